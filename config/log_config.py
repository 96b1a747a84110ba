"""Topic-level log configuration (Kafka's LogConfig): one frozen object per partition log.

Each key is declared once in ``TOPIC_CONFIGS`` with its topic-level name, the broker-level key
that supplies its default, its type, default, validator and meaning. The broker config, the
describe/alter APIs and the generated reference (docs/configuration.md) all read this table, so they cannot drift.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1

CLEANUP_POLICIES = ("delete", "compact")
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")
COMPRESSION_TYPES = ("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd")


class ConfigError(ValueError):
    """One or more configuration values are invalid; the message lists every one of them."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("; ".join(problems))


class OutOfBounds(ValueError):
    """A value of the right type outside the key's bounds or choices: the reason names them."""


def _parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    raise ValueError("must be true or false")


def _parse_list(text: str) -> tuple[str, ...]:
    return tuple(part.strip().lower() for part in text.split(",") if part.strip())


@dataclass(frozen=True)
class ConfigKey:
    """How one topic-level key is named, parsed, defaulted and checked."""

    name: str
    attr: str
    type: str  # "int", "long", "double", "string", "list", "boolean"
    default: Any
    doc: str
    broker_name: str | None = None
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[str, ...] | None = None

    def parse(self, raw: Any) -> Any:
        """Turn a string (or an already typed value) into this key's type, or raise ValueError."""
        value: Any
        if self.type in ("int", "long"):
            if isinstance(raw, bool):
                raise ValueError("must be an integer")
            try:
                value = int(raw.strip()) if isinstance(raw, str) else int(raw)
            except ValueError:
                raise ValueError("not an integer") from None
            if isinstance(raw, float) and raw != value:
                raise ValueError("must be an integer")
            limit = INT_MAX if self.type == "int" else LONG_MAX
            if not -limit - 1 <= value <= limit:
                raise ValueError(f"must fit a {self.type}")
        elif self.type == "double":
            try:
                value = float(raw)
            except ValueError:
                raise ValueError("not a number") from None
        elif self.type == "boolean":
            value = raw if isinstance(raw, bool) else _parse_bool(str(raw))
        elif self.type == "list":
            value = _parse_list(raw) if isinstance(raw, str) else tuple(str(v).lower() for v in raw)
        else:
            value = str(raw).strip()
        self.check(value)
        return value

    def check(self, value: Any) -> None:
        if self.minimum is not None and value < self.minimum:
            raise OutOfBounds(f"must be at least {_fmt(self.minimum)}")
        if self.maximum is not None and value > self.maximum:
            raise OutOfBounds(f"must be at most {_fmt(self.maximum)}")
        if self.choices is not None:
            items = value if isinstance(value, tuple) else (value,)
            for item in items:
                if item not in self.choices:
                    raise OutOfBounds(f"must be one of {', '.join(self.choices)}")
            if isinstance(value, tuple) and not value:
                raise OutOfBounds(f"must list at least one of {', '.join(self.choices)}")

    def problem(self, raw: Any, exc: Exception) -> str:
        """The message for an invalid ``raw``: what is wrong, and what is allowed, said once (a
        bound or choice the reason already names is not repeated in an "(allowed: ...)")."""
        message = f"invalid value {raw!r} for {self.name}: {exc}"
        return message if isinstance(exc, OutOfBounds) else f"{message} (allowed: {self.describe_allowed()})"

    def describe_allowed(self) -> str:
        parts = [self.type]
        if self.choices:
            parts.append("one of " + ", ".join(self.choices))
        if self.minimum is not None:
            parts.append(f">= {_fmt(self.minimum)}")
        if self.maximum is not None:
            parts.append(f"<= {_fmt(self.maximum)}")
        return ", ".join(parts)


def _fmt(number: float) -> str:
    return str(int(number)) if float(number).is_integer() else str(number)


TOPIC_CONFIGS: dict[str, ConfigKey] = {
    key.name: key
    for key in (
        ConfigKey(
            "segment.bytes",
            "segment_bytes",
            "int",
            1073741824,
            "Roll a new segment when the active one would exceed this many bytes. "
            "Kafka 3.x accepts values down to 14, which lets tests roll often.",
            "log.segment.bytes",
            minimum=14,
        ),
        ConfigKey(
            "segment.ms",
            "segment_ms",
            "long",
            604800000,
            "Roll a new segment when the first and newest record timestamps of the active segment are this far apart.",
            "log.roll.ms",
            minimum=1,
        ),
        ConfigKey(
            "segment.jitter.ms",
            "segment_jitter_ms",
            "long",
            0,
            "Subtract a random amount up to this from segment.ms per segment, so that "
            "partitions do not all roll at once.",
            "log.roll.jitter.ms",
            minimum=0,
        ),
        ConfigKey(
            "segment.index.bytes",
            "segment_index_bytes",
            "int",
            10485760,
            "Size each offset and time index file is preallocated to; a full index rolls the segment.",
            "log.index.size.max.bytes",
            minimum=4,
        ),
        ConfigKey(
            "index.interval.bytes",
            "index_interval_bytes",
            "int",
            4096,
            "Bytes appended between two sparse index entries.",
            "log.index.interval.bytes",
            minimum=0,
        ),
        ConfigKey(
            "retention.ms",
            "retention_ms",
            "long",
            604800000,
            "Delete segments whose newest record is older than this; -1 keeps them forever.",
            "log.retention.ms",
            minimum=-1,
        ),
        ConfigKey(
            "retention.bytes",
            "retention_bytes",
            "long",
            -1,
            "Delete the oldest segments while the partition is larger than this; -1 is unlimited.",
            "log.retention.bytes",
        ),
        ConfigKey(
            "cleanup.policy",
            "cleanup_policy",
            "list",
            ("delete",),
            "delete (retention), compact (keep the latest value per key) or both.",
            "log.cleanup.policy",
            choices=CLEANUP_POLICIES,
        ),
        ConfigKey(
            "min.cleanable.dirty.ratio",
            "min_cleanable_dirty_ratio",
            "double",
            0.5,
            "Compact a log once the uncompacted share of it exceeds this ratio.",
            "log.cleaner.min.cleanable.ratio",
            minimum=0,
            maximum=1,
        ),
        ConfigKey(
            "min.compaction.lag.ms",
            "min_compaction_lag_ms",
            "long",
            0,
            "Never compact a record younger than this.",
            "log.cleaner.min.compaction.lag.ms",
            minimum=0,
        ),
        ConfigKey(
            "max.compaction.lag.ms",
            "max_compaction_lag_ms",
            "long",
            LONG_MAX,
            "Compact a record no later than this after it was written, whatever the dirty ratio.",
            "log.cleaner.max.compaction.lag.ms",
            minimum=1,
        ),
        ConfigKey(
            "delete.retention.ms",
            "delete_retention_ms",
            "long",
            86400000,
            "How long compaction keeps tombstones (null values) so that consumers see the delete.",
            "log.cleaner.delete.retention.ms",
            minimum=0,
        ),
        ConfigKey(
            "file.delete.delay.ms",
            "file_delete_delay_ms",
            "long",
            60000,
            "Delay between renaming a deleted segment to .deleted and removing its files.",
            "log.segment.delete.delay.ms",
            minimum=0,
        ),
        ConfigKey(
            "flush.messages",
            "flush_messages",
            "long",
            LONG_MAX,
            "fsync the log after this many unflushed records (default: leave it to the OS).",
            "log.flush.interval.messages",
            minimum=1,
        ),
        ConfigKey(
            "flush.ms",
            "flush_ms",
            "long",
            LONG_MAX,
            "fsync the log when the last flush is this old (default: leave it to the OS).",
            "log.flush.interval.ms",
            minimum=0,
        ),
        ConfigKey(
            "message.timestamp.type",
            "message_timestamp_type",
            "string",
            "CreateTime",
            "CreateTime keeps the producer's timestamps; LogAppendTime stamps batches with the broker's clock.",
            "log.message.timestamp.type",
            choices=TIMESTAMP_TYPES,
        ),
        ConfigKey(
            "message.timestamp.before.max.ms",
            "message_timestamp_before_max_ms",
            "long",
            LONG_MAX,
            "Reject CreateTime records older than the broker's clock by more than this.",
            "log.message.timestamp.before.max.ms",
            minimum=0,
        ),
        ConfigKey(
            "message.timestamp.after.max.ms",
            "message_timestamp_after_max_ms",
            "long",
            3600000,
            "Reject CreateTime records newer than the broker's clock by more than this (Kafka 4.0 default).",
            "log.message.timestamp.after.max.ms",
            minimum=0,
        ),
        ConfigKey(
            "compression.type",
            "compression_type",
            "string",
            "producer",
            "Codec batches are stored with; producer keeps whatever the producer sent.",
            "compression.type",
            choices=COMPRESSION_TYPES,
        ),
        ConfigKey(
            "compression.gzip.level",
            "compression_gzip_level",
            "int",
            -1,
            "gzip level when the broker recompresses (-1 = zlib default).",
            "compression.gzip.level",
            minimum=-1,
            maximum=9,
        ),
        ConfigKey(
            "compression.lz4.level",
            "compression_lz4_level",
            "int",
            9,
            "lz4 level when the broker recompresses.",
            "compression.lz4.level",
            minimum=1,
            maximum=17,
        ),
        ConfigKey(
            "compression.zstd.level",
            "compression_zstd_level",
            "int",
            3,
            "zstd level when the broker recompresses.",
            "compression.zstd.level",
            minimum=-131072,
            maximum=22,
        ),
        ConfigKey(
            "max.message.bytes",
            "max_message_bytes",
            "int",
            1048588,
            "Largest record batch accepted, including the 12-byte log overhead.",
            "message.max.bytes",
            minimum=0,
        ),
        ConfigKey(
            "preallocate",
            "preallocate",
            "boolean",
            False,
            "Preallocate new segment files to segment.bytes.",
            "log.preallocate",
        ),
        ConfigKey(
            "min.insync.replicas",
            "min_insync_replicas",
            "int",
            1,
            "With acks=all, the fewest in-sync replicas (the leader counted) a write needs: with "
            "fewer the leader refuses it (NOT_ENOUGH_REPLICAS) and the high watermark stays put.",
            "min.insync.replicas",
            minimum=1,
        ),
        ConfigKey(
            "unclean.leader.election.enable",
            "unclean_leader_election_enable",
            "boolean",
            False,
            "Whether a replica outside the ISR may become leader when no in-sync replica is alive: "
            "the partition comes back, losing what only the in-sync replicas had.",
            "unclean.leader.election.enable",
        ),
    )
}


def unknown_topic_config(name: str) -> str:
    """The error for a key that is no topic config: a hint at the key meant (a near spelling, or
    the topic key of a broker key), else the list of topic configs."""
    import difflib

    synonym = next((key.name for key in TOPIC_CONFIGS.values() if key.broker_name == name), None)
    if synonym is not None:
        hint = f"{name} is a broker config; the topic config is {synonym}"
    else:
        close = difflib.get_close_matches(name, list(TOPIC_CONFIGS), n=1)
        hint = f"did you mean {close[0]}?" if close else "topic configs are " + ", ".join(TOPIC_CONFIGS)
    return f"unknown topic config {name!r} ({hint})"


@dataclass(frozen=True)
class LogConfig:
    """The effective topic-level configuration of one log. Overrides make new objects, never mutate."""

    segment_bytes: int = 1073741824
    segment_ms: int = 604800000
    segment_jitter_ms: int = 0
    segment_index_bytes: int = 10485760
    index_interval_bytes: int = 4096
    retention_ms: int = 604800000
    retention_bytes: int = -1
    cleanup_policy: tuple[str, ...] = ("delete",)
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    delete_retention_ms: int = 86400000
    file_delete_delay_ms: int = 60000
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    message_timestamp_type: str = "CreateTime"
    message_timestamp_before_max_ms: int = LONG_MAX
    message_timestamp_after_max_ms: int = 3600000
    compression_type: str = "producer"
    compression_gzip_level: int = -1
    compression_lz4_level: int = 9
    compression_zstd_level: int = 3
    max_message_bytes: int = 1048588
    preallocate: bool = False
    min_insync_replicas: int = 1
    unclean_leader_election_enable: bool = False
    #: The topic-level keys set explicitly for this log (the rest come from broker defaults).
    overrides: Mapping[str, Any] = field(default_factory=dict, compare=False)

    # Derived once per config (the append path reads them for every batch).
    compact: bool = field(init=False, repr=False, compare=False)
    delete: bool = field(init=False, repr=False, compare=False)
    log_append_time: bool = field(init=False, repr=False, compare=False)
    #: segment.ms, capped by max.compaction.lag.ms for compacted topics (Kafka's rule).
    max_segment_ms: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        compact = "compact" in self.cleanup_policy
        object.__setattr__(self, "compact", compact)
        object.__setattr__(self, "delete", "delete" in self.cleanup_policy)
        object.__setattr__(self, "log_append_time", self.message_timestamp_type == "LogAppendTime")
        max_segment_ms = self.segment_ms
        if compact and self.max_compaction_lag_ms > 0:
            max_segment_ms = min(self.segment_ms, self.max_compaction_lag_ms)
        object.__setattr__(self, "max_segment_ms", max_segment_ms)

    def with_overrides(self, props: Mapping[str, Any]) -> LogConfig:
        """A new config with topic-level ``props`` applied on top of this one (which holds the defaults).

        Every invalid or unknown key is reported at once in a ConfigError.
        """
        problems: list[str] = []
        parsed: dict[str, Any] = {}
        for name, raw in props.items():
            key = TOPIC_CONFIGS.get(name)
            if key is None:
                problems.append(unknown_topic_config(name))
                continue
            try:
                parsed[name] = key.parse(raw)
            except (ValueError, TypeError) as exc:
                problems.append(key.problem(raw, exc))
        changes = {TOPIC_CONFIGS[name].attr: value for name, value in parsed.items()}
        merged = dataclasses.replace(self, **changes, overrides={**self.overrides, **parsed})
        if merged.min_compaction_lag_ms > merged.max_compaction_lag_ms:
            problems.append("min.compaction.lag.ms must not exceed max.compaction.lag.ms")
        if problems:
            raise ConfigError(problems)
        return merged

    def value_of(self, name: str) -> Any:
        return getattr(self, TOPIC_CONFIGS[name].attr)


def topic_config_values(config: LogConfig) -> dict[str, Any]:
    """All topic-level keys with their effective values, for describe_configs."""
    return {name: getattr(config, key.attr) for name, key in TOPIC_CONFIGS.items()}
