"""The data source's options, with the names and meanings of Spark's Kafka connector.

Everything here is plain Python (no Spark, no I/O), so a bad option is reported on the driver
before any task runs, by an :class:`OptionError` whose message starts with the option's name.
Spark hands options over case-insensitively (lower-cased keys); messages use the documented
spelling.

Offsets given as JSON use Kafka's form, ``{"topic": {"0": 23, "1": -2}}``: -2 means earliest and
-1 latest. Timestamps are milliseconds since the epoch.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from triolog.client.consumer_core import ConsumerConfig
from triolog.client.producer_core import ProducerConfig
from triolog.client.security import PLAINTEXT, PROPERTY_NAMES, SecurityConfig, security_from_properties
from triolog.client.types import EARLIEST, LATEST, TopicPartition

__all__ = [
    "OffsetSpec",
    "OptionError",
    "ReadOptions",
    "Subscription",
    "WriteOptions",
    "parse_read_options",
    "parse_write_options",
]

#: Documented spelling of every option, by its lower-cased key.
_READ_NAMES = [
    "triolog.bootstrap.servers",
    "subscribe",
    "subscribePattern",
    "assign",
    "startingOffsets",
    "endingOffsets",
    "startingTimestamp",
    "endingTimestamp",
    "startingOffsetsByTimestamp",
    "endingOffsetsByTimestamp",
    "startingOffsetsByTimestampStrategy",
    "failOnDataLoss",
    "minPartitions",
    "maxOffsetsPerTrigger",
    "includeHeaders",
    "commitOffsetsToGroup",
]
_WRITE_NAMES = ["triolog.bootstrap.servers", "topic", "deliveryGuarantee", "transactionalIdPrefix"]
#: deliveryGuarantee's values (Flink's Kafka sink's names).
AT_LEAST_ONCE, EXACTLY_ONCE = "at-least-once", "exactly-once"
#: The exactly-once sink's transaction timeout unless triolog.transaction.timeout.ms says
#: otherwise: a task's transaction stays open until the driver commits the whole micro-batch,
#: so it must outlast the slowest task (the broker's transaction.max.timeout.ms default).
SINK_TRANSACTION_TIMEOUT_MS = 900_000
#: Options Spark itself may pass along with ours (load(path), writeStream's checkpoint...).
_SPARK_GENERIC = {"path", "checkpointlocation", "queryname"}
_CANONICAL = {name.lower(): name for name in _READ_NAMES + _WRITE_NAMES}

#: ``triolog.<kafka name>`` -> our client's setting, where the names differ by more than dots.
_CLIENT_RENAMES = {"compression.type": "compression"}
#: Client settings the source decides itself (a user value would break its semantics).
_READ_FIXED = {
    "auto.offset.reset": "startingOffsets and failOnDataLoss",
    "max.poll.records": "the data source (it reads whole offset ranges)",
    "consumer.timeout.ms": "the data source (it reads whole offset ranges)",
    "enable.auto.commit": "the data source (it tracks offsets itself, as Spark's Kafka source)",
}
_WRITE_FIXED = {
    "acks": "the data sink (it always produces with acks=all)",
    "transactional.id": "the data sink (exactly-once derives one per task from transactionalIdPrefix)",
}
#: The consumer settings a read uses (its fetches never wait: the ranges are known to exist).
_READ_CLIENT_SETTINGS = {"client_id", "fetch_max_bytes", "max_partition_fetch_bytes", "request_timeout_ms"}

_BOOL = {"true": True, "false": False}


class OptionError(ValueError):
    """A missing, unknown or malformed option; the message names it first."""

    def __init__(self, option: str, message: str) -> None:
        self.option = option
        super().__init__(f"option {option!r}: {message}")


@dataclass(frozen=True)
class Subscription:
    """Which partitions to read: exactly one of subscribe / subscribePattern / assign."""

    kind: str  # "subscribe", "subscribePattern" or "assign"
    topics: tuple[str, ...] = ()
    pattern: str | None = None
    partitions: tuple[TopicPartition, ...] = ()

    def matches(self, topic: str) -> bool:
        if self.kind == "subscribe":
            return topic in self.topics
        if self.kind == "subscribePattern":
            assert self.pattern is not None  # (set with the kind)
            return re.fullmatch(self.pattern, topic) is not None  # Java's Matcher.matches()
        return any(tp.topic == topic for tp in self.partitions)


@dataclass(frozen=True)
class OffsetSpec:
    """Where reading starts or ends, before it is resolved against the broker.

    ``kind``: "earliest", "latest", "offsets" (per partition, -2/-1 allowed), "timestamp" (one
    time for every partition) or "timestamps" (per partition).
    """

    kind: str
    option: str  # the option it came from, for error messages
    offsets: tuple[tuple[TopicPartition, int], ...] = ()
    timestamp: int | None = None

    @property
    def per_partition(self) -> dict[TopicPartition, int]:
        return dict(self.offsets)


@dataclass(frozen=True)
class ReadOptions:
    bootstrap: str
    subscription: Subscription
    starting: OffsetSpec
    ending: OffsetSpec
    #: "error" or "latest": what a starting timestamp with no record at or after it resolves to.
    timestamp_strategy: str
    fail_on_data_loss: bool
    min_partitions: int | None
    max_offsets_per_trigger: int | None
    include_headers: bool
    #: ConsumerConfig fields from ``triolog.*`` options (fetch sizes, timeouts, client id).
    client: dict[str, Any]
    #: The group each completed micro-batch's end offsets are committed to (commitOffsetsToGroup
    #: with triolog.group.id), or None: no commits, as Spark's Kafka source.
    commit_group: str | None = None
    #: TLS and SASL (``triolog.security.protocol``, ``triolog.sasl.*``, ``triolog.ssl.*``).
    security: SecurityConfig = PLAINTEXT

    def consumer_config(self) -> ConsumerConfig:
        return ConsumerConfig(**self.client)


@dataclass(frozen=True)
class WriteOptions:
    bootstrap: str
    topic: str | None
    #: ProducerConfig fields from ``triolog.*`` options; acks is always -1 (all).
    client: dict[str, Any]
    #: TLS and SASL, as ReadOptions'.
    security: SecurityConfig = PLAINTEXT
    #: deliveryGuarantee: AT_LEAST_ONCE, or EXACTLY_ONCE (a transaction per task, committed
    #: with the micro-batch); then transactional_id_prefix names the query's transactions.
    delivery_guarantee: str = AT_LEAST_ONCE
    transactional_id_prefix: str | None = None

    @property
    def exactly_once(self) -> bool:
        return self.delivery_guarantee == EXACTLY_ONCE

    def producer_config(self) -> ProducerConfig:
        return ProducerConfig(**{**self.client, "acks": -1})


def _name(key: str) -> str:
    return _CANONICAL.get(key.lower(), key)


def _client_settings(
    options: Mapping[str, str], config_cls, fixed: dict[str, str], used: set[str] | None = None
) -> dict[str, Any]:
    """``triolog.<kafka.style.name>`` options (other than bootstrap.servers) as config fields;
    ``used``: the only fields that mean something here (None: all)."""
    fields = {f.name: f for f in dataclasses.fields(config_cls) if used is None or f.name in used}
    out: dict[str, Any] = {}
    for key, raw in options.items():
        key = key.lower()
        if not key.startswith("triolog.") or key == "triolog.bootstrap.servers":
            continue
        kafka_name = key[len("triolog.") :]
        if kafka_name in PROPERTY_NAMES:  # security settings: see _security
            continue
        if kafka_name in fixed:
            raise OptionError(key, f"cannot be set: it is decided by {fixed[kafka_name]}")
        field_name = _CLIENT_RENAMES.get(kafka_name, kafka_name.replace(".", "_"))
        field = fields.get(field_name)
        if field is None:
            kafka_names = {v: k for k, v in _CLIENT_RENAMES.items()}
            known = ", ".join(
                sorted(
                    "triolog." + kafka_names.get(f, f.replace("_", "."))
                    for f in fields
                    if f.replace("_", ".") not in fixed
                )
            )
            raise OptionError(key, f"not a client setting this uses (known: {known})")
        kind = str(field.type)  # annotations are strings here: "int", "float | None", "CompressionType | str"
        try:
            if kind in ("bool", "bool | None"):
                value: Any = _BOOL[raw.strip().lower()]
            elif "str" in kind:
                value = raw
            elif "float" in kind:
                value = float(raw)
            else:
                value = int(raw)
        except (KeyError, ValueError):
            raise OptionError(key, f"expected a number, got {raw!r}") from None
        try:
            config_cls(**{field_name: value})
        except (TypeError, ValueError) as exc:
            raise OptionError(key, str(exc)) from None
        out[field_name] = value
    try:
        config_cls(**out)
    except (TypeError, ValueError) as exc:
        raise OptionError("triolog.*", str(exc)) from None
    return out


def _security(options: Mapping[str, str]) -> SecurityConfig:
    """``triolog.security.protocol``, ``triolog.sasl.mechanism``, ``triolog.sasl.username``,
    ``triolog.sasl.password`` (or ``triolog.sasl.jaas.config``), ``triolog.ssl.cafile`` (or
    ``triolog.ssl.truststore.location``, PEM), ``triolog.ssl.certfile``, ``triolog.ssl.keyfile``,
    ``triolog.ssl.password``, ``triolog.ssl.check.hostname``: Kafka's client settings."""
    try:
        return security_from_properties({k: v for k, v in options.items()}, prefix="triolog.")
    except ValueError as exc:
        names = sorted(
            k for k in options if k.lower().startswith(("triolog.security.", "triolog.sasl.", "triolog.ssl."))
        )
        raise OptionError(names[0] if names else "triolog.security.protocol", str(exc)) from None


def _bootstrap(options: Mapping[str, str]) -> str:
    if "kafka.bootstrap.servers" in options:
        raise OptionError("kafka.bootstrap.servers", "this is the triolog source: use 'triolog.bootstrap.servers'")
    value = options.get("triolog.bootstrap.servers", "").strip()
    if not value:
        raise OptionError("triolog.bootstrap.servers", "required (host:port of the broker)")
    from triolog.client.address import parse_bootstrap

    try:
        parse_bootstrap(value)
    except ValueError as exc:
        raise OptionError("triolog.bootstrap.servers", str(exc)) from None
    return value


def _check_known(options: Mapping[str, str], names: list[str]) -> None:
    known = {n.lower() for n in names}
    for key in options:
        lower = key.lower()
        if lower in known or lower in _SPARK_GENERIC or lower.startswith("triolog."):
            continue
        if lower.startswith("kafka."):
            raise OptionError(key, f"this is the triolog source: use 'triolog.{key[len('kafka.') :]}'")
        raise OptionError(key, f"unknown option (known: {', '.join(names)}, and triolog.* client settings)")


def _json(options: Mapping[str, str], key: str) -> Any:
    try:
        return json.loads(options[key])
    except ValueError as exc:
        raise OptionError(_name(key), f"not valid JSON ({exc}): {options[key]!r}") from None


def _int(options: Mapping[str, str], key: str, minimum: int) -> int | None:
    raw = options.get(key)
    if raw is None:
        return None
    try:
        value = int(raw.strip())
    except ValueError:
        raise OptionError(_name(key), f"expected an integer, got {raw!r}") from None
    if value < minimum:
        raise OptionError(_name(key), f"must be >= {minimum}, got {value}")
    return value


def _bool(options: Mapping[str, str], key: str, default: bool) -> bool:
    raw = options.get(key)
    if raw is None:
        return default
    try:
        return _BOOL[raw.strip().lower()]
    except KeyError:
        raise OptionError(_name(key), f"expected true or false, got {raw!r}") from None


def _subscription(options: Mapping[str, str]) -> Subscription:
    given = [k for k in ("subscribe", "subscribepattern", "assign") if k in options]
    if len(given) != 1:
        which = ", ".join(_name(k) for k in given) if given else "none"
        raise OptionError(
            "subscribe", f"exactly one of 'subscribe', 'subscribePattern', 'assign' is required, got {which}"
        )
    key = given[0]
    if key == "subscribe":
        topics = tuple(t.strip() for t in options[key].split(",") if t.strip())
        if not topics:
            raise OptionError("subscribe", "names no topic (a comma-separated list of topics)")
        return Subscription("subscribe", topics=topics)
    if key == "subscribepattern":
        pattern = options[key]
        if not pattern.strip():
            raise OptionError("subscribePattern", "is empty (a regular expression over topic names)")
        try:
            re.compile(pattern)
        except re.error as exc:
            raise OptionError("subscribePattern", f"not a valid regular expression: {exc}") from None
        return Subscription("subscribePattern", pattern=pattern)
    doc = _json(options, key)
    if (
        not isinstance(doc, dict)
        or not doc
        or not all(
            isinstance(parts, list) and parts and all(type(p) is int and p >= 0 for p in parts)
            for parts in doc.values()
        )
    ):
        raise OptionError("assign", f'expected JSON like {{"topicA": [0, 1]}}, got {options[key]!r}')
    return Subscription("assign", partitions=tuple(TopicPartition(t, p) for t, parts in doc.items() for p in parts))


def _per_partition_json(options: Mapping[str, str], key: str, what: str) -> tuple[tuple[TopicPartition, int], ...]:
    doc = _json(options, key)
    example = '{"topicA": {"0": 23, "1": -1}}' if what == "offset" else '{"topicA": {"0": 1700000000000}}'
    if not isinstance(doc, dict) or not doc:
        raise OptionError(_name(key), f"expected JSON like {example}, got {options[key]!r}")
    out = []
    for topic, parts in doc.items():
        if not isinstance(parts, dict) or not parts:
            raise OptionError(_name(key), f"expected JSON like {example}, got {options[key]!r}")
        for partition, value in parts.items():
            if not str(partition).isdigit() or type(value) is not int:
                raise OptionError(_name(key), f"expected JSON like {example}, got {options[key]!r}")
            out.append((TopicPartition(topic, int(partition)), value))
    return tuple(out)


def _offset_spec(options: Mapping[str, str], which: str) -> OffsetSpec | None:
    """startingX / endingX, by Spark's precedence: global timestamp, per-partition timestamps,
    then offsets. None when nothing is given (the caller applies the mode's default)."""
    ts_key, by_ts_key, offsets_key = f"{which}timestamp", f"{which}offsetsbytimestamp", f"{which}offsets"
    if ts_key in options:
        value = _int(options, ts_key, 0)
        return OffsetSpec("timestamp", _name(ts_key), timestamp=value)
    if by_ts_key in options:
        pairs = _per_partition_json(options, by_ts_key, "timestamp")
        for tp, ts in pairs:
            if ts < 0:
                raise OptionError(
                    _name(by_ts_key), f"timestamp for {tp.topic}-{tp.partition} must be >= 0 ms, got {ts}"
                )
        return OffsetSpec("timestamps", _name(by_ts_key), offsets=pairs)
    if offsets_key in options:
        raw = options[offsets_key].strip()
        if raw.lower() in ("earliest", "latest"):
            return OffsetSpec(raw.lower(), _name(offsets_key))
        if not raw.startswith("{"):
            raise OptionError(_name(offsets_key), f"expected earliest, latest or per-partition JSON, got {raw!r}")
        pairs = _per_partition_json(options, offsets_key, "offset")
        for tp, offset in pairs:
            if offset < EARLIEST:
                raise OptionError(
                    _name(offsets_key),
                    f"offset for {tp.topic}-{tp.partition} must be >= 0, -2 (earliest) or -1 (latest), got {offset}",
                )
        return OffsetSpec("offsets", _name(offsets_key), offsets=pairs)
    return None


def _commit_group(options: Mapping[str, str], streaming: bool | None) -> str | None:
    """commitOffsetsToGroup (default false, as Spark's Kafka source commits nothing): commit each
    completed micro-batch's end offsets to the group ``triolog.group.id``, so that group tools
    (``triolog groups --describe``, lag metrics) follow the query. The checkpoint stays the record
    the query restarts from; the group is written from outside it (generation -1), so no consumer
    may be a member of that group. Spark calls a source's commit for a micro-batch when it plans
    the next one: the group holds the end of every micro-batch but the latest."""
    lowered = {k.lower(): v for k, v in options.items()}
    commit = _bool(lowered, "commitoffsetstogroup", False)
    group = lowered.get("triolog.group.id")
    if not commit:
        if group is not None:
            raise OptionError(
                "triolog.group.id",
                "is only used with commitOffsetsToGroup=true (the source "
                "tracks its offsets in the checkpoint, as Spark's Kafka source)",
            )
        return None
    if streaming is False:
        raise OptionError(
            "commitOffsetsToGroup", "is for streaming queries only (a batch query has no progress to commit)"
        )
    if group is None or not group.strip():
        raise OptionError("commitOffsetsToGroup", "needs 'triolog.group.id', the group to commit to")
    return group.strip()


def parse_read_options(options: Mapping[str, str], *, streaming: bool | None = None) -> ReadOptions:
    """Check and parse the reader's options; ``streaming`` None checks only what both modes share.

    Mode rules, as Spark's Kafka source: batch queries start at earliest and end at latest by
    default, cannot start at latest or end at earliest (nor -1 / -2 in the JSON); streaming
    queries start at latest by default and take no ending option.
    """
    _check_known(options, _READ_NAMES)
    bootstrap = _bootstrap(options)
    subscription = _subscription(options)
    starting = _offset_spec(options, "starting")
    ending = _offset_spec(options, "ending")
    strategy = options.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise OptionError("startingOffsetsByTimestampStrategy", f"expected error or latest, got {strategy!r}")
    for spec in (starting, ending):
        if spec is not None and spec.kind in ("offsets", "timestamps") and subscription.kind == "assign":
            missing = sorted(set(spec.per_partition) - set(subscription.partitions))
            if missing:
                raise OptionError(spec.option, f"names {', '.join(f'{t}-{p}' for t, p in missing)}, not in 'assign'")
    if streaming is True:
        if ending is not None:
            raise OptionError(ending.option, "is for batch queries only: a stream has no end")
    elif streaming is False:
        if starting is not None and starting.kind == "latest":
            raise OptionError("startingOffsets", "cannot be latest for a batch query (it would read nothing)")
        if starting is not None and starting.kind == "offsets" and any(o == LATEST for _, o in starting.offsets):
            raise OptionError("startingOffsets", "-1 (latest) is not allowed for a batch query")
        if ending is not None and ending.kind == "earliest":
            raise OptionError("endingOffsets", "cannot be earliest for a batch query (it would read nothing)")
        if ending is not None and ending.kind == "offsets" and any(o == EARLIEST for _, o in ending.offsets):
            raise OptionError("endingOffsets", "-2 (earliest) is not allowed for a batch query")
    if options.get("maxoffsetspertrigger") is not None and streaming is False:
        raise OptionError("maxOffsetsPerTrigger", "is for streaming queries only")
    default_start = "latest" if streaming else "earliest"
    commit_group = _commit_group(options, streaming)
    options = {k: v for k, v in options.items() if k.lower() != "triolog.group.id"}
    return ReadOptions(
        commit_group=commit_group,
        bootstrap=bootstrap,
        subscription=subscription,
        starting=starting or OffsetSpec(default_start, "startingOffsets"),
        ending=ending or OffsetSpec("latest", "endingOffsets"),
        timestamp_strategy=strategy,
        fail_on_data_loss=_bool(options, "failondataloss", True),
        min_partitions=_int(options, "minpartitions", 1),
        max_offsets_per_trigger=_int(options, "maxoffsetspertrigger", 1),
        include_headers=_bool(options, "includeheaders", False),
        client=_client_settings(options, ConsumerConfig, _READ_FIXED, _READ_CLIENT_SETTINGS),
        security=_security(options),
    )


def parse_write_options(options: Mapping[str, str]) -> WriteOptions:
    _check_known(options, _WRITE_NAMES)
    topic = options.get("topic")
    if topic is not None and not topic.strip():
        raise OptionError("topic", "is empty")
    guarantee = (options.get("deliveryGuarantee") or AT_LEAST_ONCE).strip().lower()
    if guarantee not in (AT_LEAST_ONCE, EXACTLY_ONCE):
        raise OptionError("deliveryGuarantee", f"expected {AT_LEAST_ONCE} or {EXACTLY_ONCE}, got {guarantee!r}")
    prefix = options.get("transactionalIdPrefix")
    if guarantee == EXACTLY_ONCE:
        if prefix is None or not prefix.strip():
            raise OptionError(
                "transactionalIdPrefix",
                "exactly-once needs it: a name for the query's transactions, the same across its restarts "
                "and different from every other writer's",
            )
        prefix = prefix.strip()
    elif prefix is not None:
        raise OptionError("transactionalIdPrefix", f"only means something with deliveryGuarantee={EXACTLY_ONCE}")
    client = _client_settings(options, ProducerConfig, _WRITE_FIXED)
    if guarantee == EXACTLY_ONCE:
        client.setdefault("transaction_timeout_ms", SINK_TRANSACTION_TIMEOUT_MS)
    return WriteOptions(
        bootstrap=_bootstrap(options),
        topic=topic.strip() if topic else None,
        client=client,
        security=_security(options),
        delivery_guarantee=guarantee,
        transactional_id_prefix=prefix,
    )
