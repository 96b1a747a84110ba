"""Broker-level configuration (Kafka's KafkaConfig): one frozen object for the whole broker.

Every key is declared once in ``BROKER_CONFIGS`` with Kafka's name, type, default, what it allows
and what it means; parsing, validation and the generated reference (docs/configuration.md) all read that table.
The broker-level synonyms of topic keys (``log.segment.bytes`` for ``segment.bytes``...) are
generated from ``TOPIC_CONFIGS`` so the two tables cannot drift, and together they yield
``BrokerConfig.log_config``: the ``LogConfig`` of every topic without overrides.

Synonym precedence is Kafka's and is resolved once, in ``from_properties``, by following each
key's ``fallback`` while a key is unset:

- ``log.retention.ms`` > ``log.retention.minutes`` > ``log.retention.hours`` (negative ⇒ -1)
- ``log.roll.ms`` > ``log.roll.hours``; ``log.roll.jitter.ms`` > ``log.roll.jitter.hours``
- ``log.flush.interval.ms`` > ``log.flush.scheduler.interval.ms``
- ``log.dirs`` > ``log.dir``

Keys triolog adds to Kafka's set: ``metrics.listener``, ``logger.format``, ``logger.level``,
``request.receive.timeout.ms``; ``max.broker.partitions`` is KIP-578's (not in Kafka yet).
"""

from __future__ import annotations

import dataclasses
import difflib
import ipaddress
import math
import os
import re
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from .log_config import INT_MAX, LONG_MAX, TOPIC_CONFIGS, ConfigError, LogConfig
from .principal_rules import DEFAULT_RULES, PrincipalMappingRules

#: Java's Double.MAX_VALUE, Kafka's "no limit" for log.cleaner.io.max.bytes.per.second.
DOUBLE_MAX = sys.float_info.max

LOGGER_FORMATS = ("console", "json")
LOGGER_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")

MS_PER_MINUTE = 60 * 1000
MS_PER_HOUR = 60 * MS_PER_MINUTE

__all__ = [
    "BROKER_CONFIGS",
    "BrokerConfig",
    "BrokerConfigKey",
    "ConfigError",
    "DOUBLE_MAX",
    "Endpoint",
    "LOGGER_FORMATS",
    "LOGGER_LEVELS",
    "parse_endpoint",
    "parse_kafka_listeners",
    "parse_listeners",
    "parse_metrics_listener",
    "parse_zookeeper_connect",
]


# -- endpoints ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Endpoint:
    """Where a server listens, Kafka's ``EndPoint``: ``SCHEME://host:port``.

    ``host`` is stored without brackets; an empty host means every interface.
    """

    scheme: str
    host: str
    port: int

    @property
    def bind_host(self) -> str | None:
        """The host to bind, or None for every interface (what ``trio.serve_tcp`` expects)."""
        return self.host or None

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}"


# Kafka's listener regex, made strict: an IPv6 host must be bracketed, nothing may follow the port.
_ENDPOINT = re.compile(
    r"(?P<scheme>[A-Za-z][A-Za-z0-9_+.-]*)://"
    r"(?:\[(?P<ipv6>[^\]]*)\]|(?P<host>[^:/\[\]\s]*))"
    r":(?P<port>[0-9]+)"
)
_HOSTNAME = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_.-]*[A-Za-z0-9_])?")


def parse_endpoint(text: str, scheme: str | tuple[str, ...]) -> Endpoint:
    """Parse ``scheme://host:port`` (scheme case-insensitive, one of ``scheme`` if a tuple, kept
    as the tuple spells it), or raise ValueError saying why."""
    schemes = (scheme,) if isinstance(scheme, str) else scheme
    text = text.strip()
    match = _ENDPOINT.fullmatch(text)
    if match is None:
        raise ValueError(f"not of the form {schemes[0]}://host:port")
    chosen = next((s for s in schemes if s.upper() == match["scheme"].upper()), None)
    if chosen is None:
        raise ValueError(f"scheme {match['scheme']!r} is not supported, only {' or '.join(schemes)}")
    if match["ipv6"] is not None:
        host = match["ipv6"]
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ValueError(f"[{host}] is not an IPv6 address") from None
    else:
        host = match["host"]
        if host and not _HOSTNAME.fullmatch(host):
            raise ValueError(f"{host!r} is not a host name or IPv4 address")
    port = int(match["port"])
    if port > 65535:
        raise ValueError(f"port {port} is not in 0..65535")
    return Endpoint(chosen, host, port)


#: Kafka's security protocols, each a listener name (Kafka's default listener.security.protocol.map):
#: TLS or not, SASL authentication or not.
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


def uses_tls(endpoint: Endpoint) -> bool:
    return endpoint.scheme in ("SSL", "SASL_SSL")


def uses_sasl(endpoint: Endpoint) -> bool:
    return endpoint.scheme in ("SASL_PLAINTEXT", "SASL_SSL")


def parse_listeners(text: str) -> Endpoint:
    """Kafka's ``listeners`` syntax, restricted to what triolog serves: one listener, named by
    its security protocol."""
    parts = [part.strip() for part in text.split(",") if part.strip()]
    if not parts:
        raise ValueError("names no listener")
    if len(parts) > 1:
        raise ValueError(f"names {len(parts)} listeners; triolog serves exactly one")
    return parse_endpoint(parts[0], SECURITY_PROTOCOLS)


def parse_kafka_listeners(text: str) -> Endpoint | None:
    """``kafka.listeners``: one listener for Kafka's own protocol; empty = none (None)."""
    parts = [part.strip() for part in text.split(",") if part.strip()]
    if not parts:
        return None
    if len(parts) > 1:
        raise ValueError(f"names {len(parts)} listeners; triolog serves at most one Kafka listener")
    return parse_endpoint(parts[0], SECURITY_PROTOCOLS)


def parse_zookeeper_connect(text: str) -> str:
    """Kafka's zookeeper.connect: host:port pairs, then an optional chroot that is an absolute path."""
    text = text.strip()
    if not text:
        return ""
    hosts, slash, chroot = text.partition("/")
    for pair in hosts.split(","):
        host, colon, port = pair.strip().rpartition(":")
        if not colon or not host or not port.isdigit() or not 0 < int(port) <= 65535:
            raise ValueError(f"{pair.strip()!r} is not host:port")
    if slash:
        if chroot.endswith("/") or "//" in f"/{chroot}" or any(part in (".", "..") for part in chroot.split("/")):
            raise ValueError(f"chroot /{chroot} is not a plain absolute path")
    return text


def parse_metrics_listener(text: str) -> Endpoint | None:
    """``http://host:port`` for the Prometheus endpoint; an empty value turns it off (None)."""
    if not text.strip():
        return None
    return parse_endpoint(text, "http")


def _parse_dirs(text: str) -> tuple[str, ...]:
    """A comma-separated list of directories, kept as written (relative to the working directory)."""
    dirs = tuple(part.strip() for part in text.split(",") if part.strip())
    if not dirs:
        raise ValueError("names no directory")
    seen: set[str] = set()
    for path in dirs:
        normal = os.path.normpath(path)
        if normal in seen:
            raise ValueError(f"names {path!r} twice")
        seen.add(normal)
    return dirs


def _parse_logger_level(text: str) -> str:
    """Python's level names, case-insensitive; log4j's WARN is accepted for Kafka habits."""
    level = text.strip().upper()
    level = {"WARN": "WARNING"}.get(level, level)
    if level not in LOGGER_LEVELS:
        raise ValueError(f"not one of {', '.join(LOGGER_LEVELS)}")
    return level


def _parse_logger_format(text: str) -> str:
    value = text.strip().lower()
    if value not in LOGGER_FORMATS:
        raise ValueError(f"not one of {', '.join(LOGGER_FORMATS)}")
    return value


def _parse_rate(text: str) -> float:
    """A positive rate in bytes per second; Double.MAX (the default) or ``inf`` mean no limit."""
    value = _convert("double", text)
    if not value > 0:
        raise ValueError("must be greater than 0")
    return value


def _parse_load_factor(text: str) -> float:
    value = _convert("double", text)
    if not 0 < value <= 1:
        raise ValueError("must be in (0, 1]")
    return value


# -- key declarations --------------------------------------------------------------------------

_INTEGER = re.compile(r"[+-]?[0-9]+")


def _convert(type_: str, raw: Any) -> Any:
    """Turn a property string (or an already typed value) into ``type_``, with a readable error."""
    value: Any
    if type_ in ("int", "long"):
        if isinstance(raw, bool):
            raise ValueError("not an integer")
        if isinstance(raw, int):
            value = raw
        else:
            text = str(raw).strip()
            if not _INTEGER.fullmatch(text):
                raise ValueError("not an integer")
            value = int(text)
        limit = INT_MAX if type_ == "int" else LONG_MAX
        if not -limit - 1 <= value <= limit:
            raise ValueError(f"out of range for {'an int' if type_ == 'int' else 'a long'}")
        return value
    if type_ == "double":
        if isinstance(raw, bool):
            raise ValueError("not a number")
        try:
            value = float(raw.strip() if isinstance(raw, str) else raw)
        except (TypeError, ValueError):
            raise ValueError("not a number") from None
        if math.isnan(value):
            raise ValueError("not a number")
        return value
    if type_ == "boolean":
        if isinstance(raw, bool):
            return raw
        lowered = str(raw).strip().lower()
        if lowered not in ("true", "false"):
            raise ValueError("not true or false")
        return lowered == "true"
    if type_ == "list":
        items = raw.split(",") if isinstance(raw, str) else raw
        return tuple(str(item).strip().lower() for item in items if str(item).strip())
    return str(raw).strip()


def _fmt(number: float) -> str:
    return str(int(number)) if float(number).is_integer() else str(number)


@dataclass(frozen=True)
class BrokerConfigKey:
    """How one broker key is named, parsed, defaulted, checked and documented.

    ``attr`` names the ``BrokerConfig`` field the key fills, ``topic_name`` the topic key it
    supplies the default for; a key with neither is only ever consulted as another key's
    ``fallback``. ``unit_ms`` scales hour/minute synonyms to milliseconds.
    """

    name: str
    type: str  # "int", "long", "double", "boolean", "string", "password", "list", "listener", "url"
    default: Any  # typed; None = unset, resolved through ``fallback``
    doc: str
    group: str
    attr: str | None = None
    topic_name: str | None = None
    fallback: str | None = None
    unit_ms: int = 1
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[str, ...] | None = None
    #: Replaces type conversion and the minimum/maximum/choices checks for non-trivial syntaxes.
    parser: Callable[[str], Any] | None = field(default=None, compare=False, repr=False)
    #: What ``describe_allowed`` says when ``parser`` decides what is valid.
    allowed: str | None = None
    #: A secret (Kafka's PASSWORD type): never shown by describe_configs or logged.
    sensitive: bool = False

    def parse(self, raw: Any) -> Any:
        """Turn a property value into this key's type, or raise ValueError saying what is wrong."""
        if self.parser is not None:
            return self.parser(str(raw))
        value = _convert(self.type, raw)
        if self.minimum is not None and value < self.minimum:
            raise ValueError(f"must be at least {_fmt(self.minimum)}")
        if self.maximum is not None and value > self.maximum:
            raise ValueError(f"must be at most {_fmt(self.maximum)}")
        if self.choices is not None:
            items = value if isinstance(value, tuple) else (value,)
            for item in items:
                if item not in self.choices:
                    raise ValueError(f"{item!r} is not one of {', '.join(self.choices)}")
            if not items:
                raise ValueError(f"must list at least one of {', '.join(self.choices)}")
        return value

    def describe_allowed(self) -> str:
        if self.allowed is not None:
            return self.allowed
        parts = [self.type]
        if self.choices:
            joined = ", ".join(self.choices)
            if self.type == "list":
                parts = [f"comma-separated list of {joined}"]
            else:
                parts.append(f"one of {joined}")
        if self.minimum is not None:
            parts.append(f">= {_fmt(self.minimum)}")
        if self.maximum is not None:
            parts.append(f"<= {_fmt(self.maximum)}")
        return ", ".join(parts)

    @property
    def default_text(self) -> str:
        """The default as docs/configuration.md shows it, naming Java's MAX constants."""
        value = self.default
        if value is None:
            return f"unset (falls back to {self.fallback})" if self.fallback else "unset"
        if isinstance(value, bool):
            return str(value).lower()
        if value in ((), ""):
            return "empty"
        if isinstance(value, tuple):
            return ",".join(value)
        if self.type == "long" and value == LONG_MAX:
            return f"{value} (Long.MAX)"
        if self.type == "int" and value == INT_MAX:
            return f"{value} (Int.MAX)"
        if self.type == "double" and value == DOUBLE_MAX:
            return f"{value!r} (Double.MAX)"
        return str(value)


def _server_keys() -> Iterator[BrokerConfigKey]:
    group = "server"
    yield BrokerConfigKey(
        "listeners",
        "listener",
        Endpoint("PLAINTEXT", "127.0.0.1", 9092),
        "Address the broker accepts client connections on, in Kafka's listener syntax, named by "
        "its security protocol: PLAINTEXT, SSL (TLS, see ssl.*), SASL_PLAINTEXT or SASL_SSL "
        "(SASL authentication, see sasl.enabled.mechanisms). triolog serves one listener and, "
        "unlike Kafka (PLAINTEXT://:9092), defaults to loopback so that a bare start is not "
        "reachable from the network.",
        group,
        attr="listener",
        parser=parse_listeners,
        allowed="one PROTOCOL://host:port, PROTOCOL one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL "
        "(empty host = every interface, IPv6 in brackets as PLAINTEXT://[::1]:9092, port "
        "0..65535 with 0 = any free port)",
    )
    yield BrokerConfigKey(
        "kafka.listeners",
        "listener",
        None,
        "Address the broker accepts Kafka's own wire protocol on (Kafka's clients: librdkafka "
        "and confluent-kafka, kcat, kafka-python, aiokafka, the Java client), in Kafka's listener "
        "syntax; empty turns it off. The same logs and handlers serve it as listeners.",
        group,
        attr="kafka_listener",
        parser=parse_kafka_listeners,
        allowed="empty, or one PROTOCOL://host:port as listeners (PLAINTEXT, SSL, SASL_PLAINTEXT, "
        "SASL_SSL; empty host = every interface, IPv6 in brackets, port 0..65535 with 0 = "
        "any free port)",
    )
    yield BrokerConfigKey(
        "kafka.advertised.listeners",
        "listener",
        None,
        "The address Metadata, FindCoordinator and DescribeCluster give Kafka clients for this "
        "broker, where it differs from kafka.listeners (a container's published port, a host "
        "name). Empty: kafka.listeners' own, with localhost for an empty host.",
        group,
        attr="kafka_advertised_listener",
        parser=parse_kafka_listeners,
        allowed="empty, or one PROTOCOL://host:port with a host",
    )
    yield BrokerConfigKey(
        "node.id",
        "int",
        None,
        "Id of this broker, written to meta.properties. Unset: broker.id (its ZooKeeper-mode "
        "name), whose default is 0; Kafka's is -1 (must be set).",
        group,
        attr="node_id",
        fallback="broker.id",
        minimum=0,
    )
    yield BrokerConfigKey(
        "log.dirs",
        "list",
        None,
        "Comma-separated directories holding the partition logs; new partitions go to the one "
        "holding the fewest. Relative paths are relative to the working directory.",
        group,
        attr="log_dirs",
        fallback="log.dir",
        parser=_parse_dirs,
        allowed="comma-separated directories, none twice",
    )
    yield BrokerConfigKey(
        "log.dir",
        "list",
        ("/tmp/kafka-logs",),
        "Used when log.dirs is unset. The embedded server.properties sets ./data.",
        group,
        parser=_parse_dirs,
        allowed="comma-separated directories, none twice",
    )
    yield BrokerConfigKey(
        "num.partitions",
        "int",
        1,
        "Partition count of automatically created topics.",
        group,
        attr="num_partitions",
        minimum=1,
    )
    yield BrokerConfigKey(
        "auto.create.topics.enable",
        "boolean",
        True,
        "Create a missing topic when a metadata request names it and allows creation (producers do, consumers only with allow_auto_create_topics); produce alone never creates.",
        group,
        attr="auto_create_topics_enable",
    )
    yield BrokerConfigKey(
        "socket.request.max.bytes",
        "int",
        104857600,
        "Largest request frame accepted; a longer one is refused and the connection closed.",
        group,
        attr="socket_request_max_bytes",
        minimum=1,
    )
    yield BrokerConfigKey(
        "max.connections",
        "int",
        INT_MAX,
        "Connections the broker holds open at once; further ones wait to be accepted.",
        group,
        attr="max_connections",
        minimum=0,
    )
    yield BrokerConfigKey(
        "max.connections.per.ip",
        "int",
        INT_MAX,
        "Connections accepted from one client address; further ones are closed at once.",
        group,
        attr="max_connections_per_ip",
        minimum=0,
    )
    yield BrokerConfigKey(
        "max.connection.creation.rate",
        "int",
        INT_MAX,
        "New connections the broker accepts per second, over all its listeners (Kafka's broker-wide "
        "limit): past it, accepting waits (new connections wait in the listen backlog) instead of "
        "refusing them, unlike an IP's connection_creation_rate quota, which closes them. 0 accepts none.",
        group,
        attr="max_connection_creation_rate",
        minimum=0,
    )
    yield BrokerConfigKey(
        "connections.max.idle.ms",
        "long",
        600000,
        "Close a connection with no request for this long; -1 never closes idle connections.",
        group,
        attr="connections_max_idle_ms",
        minimum=-1,
    )
    yield BrokerConfigKey(
        "queued.max.request.bytes",
        "long",
        268435456,
        "Request bytes all connections together may hold in memory, from a frame's length prefix "
        "until its request is answered; a connection whose next frame does not fit stops reading "
        "until earlier requests give their bytes back, and a frame longer than the cap is refused. "
        "Kafka's default is -1 (unbounded); -1 turns the cap off.",
        group,
        attr="queued_max_request_bytes",
        minimum=-1,
    )
    yield BrokerConfigKey(
        "request.receive.timeout.ms",
        "long",
        30000,
        "triolog key: a request frame must arrive in full within this long of its first byte, "
        "or the connection is closed (a slow sender cannot hold a buffer indefinitely); time spent "
        "waiting for queued.max.request.bytes does not count. -1 waits forever.",
        group,
        attr="request_receive_timeout_ms",
        minimum=-1,
    )
    yield BrokerConfigKey(
        "max.broker.partitions",
        "int",
        10000,
        "Partitions this broker holds at most (KIP-578's name); a create_topics or auto-creation "
        "that would exceed it is refused with POLICY_VIOLATION before anything is created.",
        group,
        attr="max_broker_partitions",
        minimum=1,
    )
    yield BrokerConfigKey(
        "metrics.listener",
        "url",
        Endpoint("http", "127.0.0.1", 9404),
        "triolog key: where Prometheus scrapes /metrics over HTTP. Same host rules as "
        "listeners; an empty value turns the endpoint off.",
        group,
        attr="metrics_listener",
        parser=parse_metrics_listener,
        allowed="http://host:port (empty host = every interface, IPv6 in brackets), or empty to disable",
    )
    yield BrokerConfigKey(
        "logger.format",
        "string",
        "console",
        "triolog key: console writes human-readable lines, json one JSON object per line.",
        group,
        attr="logger_format",
        parser=_parse_logger_format,
        allowed="one of " + ", ".join(LOGGER_FORMATS),
    )
    yield BrokerConfigKey(
        "logger.level",
        "string",
        "INFO",
        "triolog key: least severe level logged (case-insensitive; WARN means WARNING).",
        group,
        attr="logger_level",
        parser=_parse_logger_level,
        allowed="one of " + ", ".join(LOGGER_LEVELS),
    )


def _log_manager_keys() -> Iterator[BrokerConfigKey]:
    group = "log manager"
    yield BrokerConfigKey(
        "log.retention.check.interval.ms",
        "long",
        300000,
        "How often the retention task deletes segments past retention.ms or retention.bytes.",
        group,
        attr="log_retention_check_interval_ms",
        minimum=1,
    )
    yield BrokerConfigKey(
        "log.flush.offset.checkpoint.interval.ms",
        "int",
        60000,
        "How often each log dir's recovery-point-offset-checkpoint is written; recovery after a "
        "crash starts from there.",
        group,
        attr="log_flush_offset_checkpoint_interval_ms",
        minimum=0,
    )
    yield BrokerConfigKey(
        "log.flush.start.offset.checkpoint.interval.ms",
        "int",
        60000,
        "How often each log dir's log-start-offset-checkpoint is written.",
        group,
        attr="log_flush_start_offset_checkpoint_interval_ms",
        minimum=0,
    )
    yield BrokerConfigKey(
        "replica.high.watermark.checkpoint.interval.ms",
        "long",
        5000,
        "How often each log dir's replication-offset-checkpoint (high watermarks) is written.",
        group,
        attr="replica_high_watermark_checkpoint_interval_ms",
        minimum=1,
    )
    yield BrokerConfigKey(
        "log.flush.scheduler.interval.ms",
        "long",
        LONG_MAX,
        "How often the flusher looks for logs whose last flush is older than flush.ms; also the "
        "default of log.flush.interval.ms. The default never runs it.",
        group,
        attr="log_flush_scheduler_interval_ms",
        minimum=1,
    )
    yield BrokerConfigKey(
        "log.initial.task.delay.ms",
        "long",
        30000,
        "Delay after startup before the kafka-log-retention task first runs (the flush and "
        "checkpoint tasks start at once: delaying them would only widen what a crash re-validates).",
        group,
        attr="log_initial_task_delay_ms",
        minimum=0,
    )
    yield BrokerConfigKey(
        "num.recovery.threads.per.data.dir",
        "int",
        1,
        "Threads per log dir that load and recover logs at startup and flush them at shutdown.",
        group,
        attr="num_recovery_threads_per_data_dir",
        minimum=1,
    )


def _cleaner_keys() -> Iterator[BrokerConfigKey]:
    group = "log cleaner"
    yield BrokerConfigKey(
        "log.cleaner.enable",
        "boolean",
        True,
        "Run the log cleaner, which compacts topics whose cleanup.policy includes compact.",
        group,
        attr="log_cleaner_enable",
    )
    yield BrokerConfigKey(
        "log.cleaner.threads",
        "int",
        1,
        "Cleaner threads; each cleans one log at a time.",
        group,
        attr="log_cleaner_threads",
        minimum=0,
    )
    yield BrokerConfigKey(
        "log.cleaner.dedupe.buffer.size",
        "long",
        134217728,
        "Memory for the key-to-offset maps of all cleaner threads together; bounds how much of "
        "the dirty section one pass can clean.",
        group,
        attr="log_cleaner_dedupe_buffer_size",
        minimum=1,
    )
    yield BrokerConfigKey(
        "log.cleaner.io.buffer.size",
        "int",
        524288,
        "Read and write buffer memory of all cleaner threads together.",
        group,
        attr="log_cleaner_io_buffer_size",
        minimum=0,
    )
    yield BrokerConfigKey(
        "log.cleaner.io.buffer.load.factor",
        "double",
        0.9,
        "Fill ratio of the dedupe offset map, despite the name (Kafka's).",
        group,
        attr="log_cleaner_io_buffer_load_factor",
        parser=_parse_load_factor,
        allowed="double, > 0 and <= 1",
    )
    yield BrokerConfigKey(
        "log.cleaner.io.max.bytes.per.second",
        "double",
        DOUBLE_MAX,
        "Throttle on the cleaner's reads plus writes. The default, Java's Double.MAX (also "
        "written inf), means no limit.",
        group,
        attr="log_cleaner_io_max_bytes_per_second",
        parser=_parse_rate,
        allowed="double, > 0 (inf or Double.MAX = unlimited)",
    )
    yield BrokerConfigKey(
        "log.cleaner.backoff.ms",
        "long",
        15000,
        "Sleep of a cleaner thread that found no log to clean.",
        group,
        attr="log_cleaner_backoff_ms",
        minimum=0,
    )


#: What ``sasl.enabled.mechanisms`` may name. PLAIN carries the password itself: it is offered on
#: SASL_SSL listeners only.
SASL_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN")
#: Kafka's authorizer class names; either turns on triolog's ACL authorizer (the same model).
AUTHORIZER_CLASS_NAMES = (
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "kafka.security.authorizer.AclAuthorizer",
)
_TLS_PROTOCOLS = ("TLSv1.2", "TLSv1.3")


def _parse_optional(text: str) -> str | None:
    return text.strip() or None


def _parse_pem_type(text: str) -> str:
    if text.strip().upper() != "PEM":
        raise ValueError(
            "triolog reads PEM files only (JKS and PKCS12 keystores: convert them with openssl or keytool)"
        )
    return "PEM"


def _parse_names(text: str, allowed: tuple[str, ...], what: str, *, at_least_one: bool) -> tuple[str, ...]:
    """A comma-separated list of ``allowed`` names, case-insensitive, spelled as ``allowed``."""
    by_upper = {name.upper(): name for name in allowed}
    out = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        name = by_upper.get(item.upper())
        if name is None:
            raise ValueError(f"{item!r} is not a {what} triolog supports ({', '.join(allowed)})")
        if name not in out:
            out.append(name)
    if at_least_one and not out:
        raise ValueError(f"names no {what}")
    return tuple(out)


def _parse_cipher_suites(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


def _parse_super_users(text: str) -> tuple[str, ...]:
    """Kafka's ``super.users``: principals separated by semicolons (a DN holds commas)."""
    users = tuple(part.strip() for part in text.split(";") if part.strip())
    for user in users:
        kind, _, name = user.partition(":")
        if not kind or not name:
            raise ValueError(f"{user!r} is not a principal of the form Type:name (User:alice)")
    return users


def _parse_authorizer(text: str) -> str:
    value = text.strip()
    if value and value not in AUTHORIZER_CLASS_NAMES:
        raise ValueError("triolog's authorizer is turned on by either of Kafka's class names")
    return value


def _security_keys() -> Iterator[BrokerConfigKey]:
    group = "security"
    yield BrokerConfigKey(
        "ssl.keystore.type",
        "string",
        "PEM",
        "Format of ssl.keystore.location. Kafka defaults to JKS; triolog reads PEM.",
        group,
        attr="ssl_keystore_type",
        parser=_parse_pem_type,
        allowed="PEM",
    )
    yield BrokerConfigKey(
        "ssl.keystore.location",
        "string",
        None,
        "One PEM file holding the broker's private key and its certificate chain (leaf first); "
        "required by an SSL or SASL_SSL listener.",
        group,
        attr="ssl_keystore_location",
        parser=_parse_optional,
        allowed="a file path, or empty",
    )
    yield BrokerConfigKey(
        "ssl.key.password",
        "password",
        None,
        "Password of the private key in ssl.keystore.location, if it is encrypted. Never shown by describe_configs.",
        group,
        attr="ssl_key_password",
        parser=_parse_optional,
        allowed="a string, or empty",
        sensitive=True,
    )
    yield BrokerConfigKey(
        "ssl.truststore.type",
        "string",
        "PEM",
        "Format of ssl.truststore.location. Kafka defaults to JKS; triolog reads PEM.",
        group,
        attr="ssl_truststore_type",
        parser=_parse_pem_type,
        allowed="PEM",
    )
    yield BrokerConfigKey(
        "ssl.truststore.location",
        "string",
        None,
        "PEM file of the CA certificates client certificates are verified against (ssl.client.auth).",
        group,
        attr="ssl_truststore_location",
        parser=_parse_optional,
        allowed="a file path, or empty",
    )
    yield BrokerConfigKey(
        "ssl.client.auth",
        "string",
        "none",
        "Whether TLS listeners ask clients for a certificate: none, requested (verified if "
        "given) or required (mutual TLS). A verified certificate's subject is the principal "
        "(User:CN=...,O=...) on an SSL listener, as Kafka's default principal builder.",
        group,
        attr="ssl_client_auth",
        choices=("none", "requested", "required"),
    )
    yield BrokerConfigKey(
        "ssl.enabled.protocols",
        "list",
        _TLS_PROTOCOLS,
        "TLS versions the TLS listeners accept.",
        group,
        attr="ssl_enabled_protocols",
        parser=lambda text: _parse_names(text, _TLS_PROTOCOLS, "TLS version", at_least_one=True),
        allowed="comma-separated list of " + ", ".join(_TLS_PROTOCOLS),
    )
    yield BrokerConfigKey(
        "ssl.cipher.suites",
        "list",
        (),
        "TLS 1.2 cipher suites, in OpenSSL's names (ECDHE-RSA-AES128-GCM-SHA256); empty: "
        "OpenSSL's secure defaults. TLS 1.3's suites are OpenSSL's defaults (Python cannot restrict them).",
        group,
        attr="ssl_cipher_suites",
        parser=_parse_cipher_suites,
        allowed="comma-separated OpenSSL cipher names, or empty",
    )
    yield BrokerConfigKey(
        "ssl.principal.mapping.rules",
        "string",
        PrincipalMappingRules(DEFAULT_RULES),
        "How a TLS client's certificate subject becomes its user name, as Kafka: rules tried in "
        "order, separated by commas; DEFAULT is the subject itself (CN=alice,OU=eng,O=acme), "
        "RULE:pattern/replacement/ with an optional L or U after it applies when the regular "
        "expression matches the whole subject (RULE:^CN=([^,]*),.*$/$1/L names that client "
        "alice). A client no rule applies to is refused.",
        group,
        attr="ssl_principal_mapping_rules",
        parser=PrincipalMappingRules,
        allowed="DEFAULT and RULE:pattern/replacement/[LU], comma-separated",
    )
    yield BrokerConfigKey(
        "sasl.enabled.mechanisms",
        "list",
        ("SCRAM-SHA-256", "SCRAM-SHA-512"),
        "SASL mechanisms SASL_PLAINTEXT and SASL_SSL listeners offer; users and their SCRAM "
        "credentials are managed with `triolog users`. PLAIN checks the password against the "
        "same credentials and is offered on SASL_SSL only, never over plaintext. Kafka's default "
        "is GSSAPI, which triolog does not serve.",
        group,
        attr="sasl_enabled_mechanisms",
        parser=lambda text: _parse_names(text, SASL_MECHANISMS, "SASL mechanism", at_least_one=True),
        allowed="comma-separated list of " + ", ".join(SASL_MECHANISMS),
    )
    yield BrokerConfigKey(
        "sasl.server.max.receive.size",
        "int",
        524288,
        "Longest frame a client may send before it has authenticated on a SASL listener.",
        group,
        attr="sasl_server_max_receive_size",
        minimum=1,
    )
    yield BrokerConfigKey(
        "connections.max.reauth.ms",
        "long",
        0,
        "How long a SASL session lasts (KIP-368). When it is over 0, the broker tells each client "
        "its session lifetime when it authenticates; the client must authenticate again on the "
        "same connection before then (Kafka's Java clients, librdkafka 2.2 or later and kafka-python 3 "
        "do; triolog's clients open a new connection), or the broker closes the connection at its next request. "
        "A deleted user's or a changed password's connections end this way. 0: sessions never expire.",
        group,
        attr="connections_max_reauth_ms",
        minimum=0,
    )
    yield BrokerConfigKey(
        "connection.failed.authentication.delay.ms",
        "int",
        100,
        "How long the broker waits before answering a failed authentication (and closing the "
        "connection), which slows password guessing.",
        group,
        attr="connection_failed_authentication_delay_ms",
        minimum=0,
    )
    yield BrokerConfigKey(
        "authorizer.class.name",
        "string",
        "",
        "Empty: every client may do everything. Kafka's StandardAuthorizer or AclAuthorizer class "
        "name turns on triolog's ACL authorizer (Kafka's model, ACLs managed with `triolog acls`).",
        group,
        attr="authorizer_class_name",
        parser=_parse_authorizer,
        allowed="empty, " + " or ".join(AUTHORIZER_CLASS_NAMES),
    )
    yield BrokerConfigKey(
        "super.users",
        "list",
        (),
        "Principals the authorizer allows everything, separated by semicolons (User:admin;User:ops).",
        group,
        attr="super_users",
        parser=_parse_super_users,
        allowed="semicolon-separated principals Type:name, or empty",
    )
    yield BrokerConfigKey(
        "quota.window.size.seconds",
        "int",
        1,
        "Client quotas (producer_byte_rate, consumer_byte_rate, request_percentage, set with "
        "AlterClientQuotas): a client may burst this many seconds' worth of its quota before it is throttled.",
        group,
        attr="quota_window_size_seconds",
        minimum=1,
    )
    yield BrokerConfigKey(
        "quota.window.num",
        "int",
        11,
        "Client quotas: the longest single throttle is this many quota windows, and a fetch under a "
        "consumer_byte_rate returns at most that many windows' worth of it.",
        group,
        attr="quota_window_num",
        minimum=1,
    )
    yield BrokerConfigKey(
        "allow.everyone.if.no.acl.found",
        "boolean",
        False,
        "With the authorizer on, whether a resource no ACL applies to is open to everyone (true) or "
        "to super users only (false, Kafka's default).",
        group,
        attr="allow_everyone_if_no_acl_found",
    )


def _producer_state_keys() -> Iterator[BrokerConfigKey]:
    group = "idempotent producers"
    yield BrokerConfigKey(
        "producer.id.expiration.ms",
        "int",
        86400000,
        "A partition forgets a producer id whose last batch's timestamp is this old: its sequence "
        "state leaves memory, .snapshot files and the cleaner's kept batches, and its next batch "
        "must start at sequence 0.",
        group,
        attr="producer_id_expiration_ms",
        minimum=1,
    )
    yield BrokerConfigKey(
        "producer.id.expiration.check.interval.ms",
        "int",
        600000,
        "How often every partition removes expired producer ids.",
        group,
        attr="producer_id_expiration_check_interval_ms",
        minimum=1,
    )


def _cluster_keys() -> Iterator[BrokerConfigKey]:
    """Kafka's ZooKeeper-mode cluster keys (KafkaConfig, ReplicationConfigs, ZkConfigs)."""
    group = "cluster"
    yield BrokerConfigKey(
        "broker.id",
        "int",
        0,
        "This broker's id in the cluster, Kafka's ZooKeeper-mode name for node.id: set either, "
        "or both to the same value. A standalone triolog defaults to 0 (Kafka: -1, must be set).",
        group,
        minimum=0,
    )
    yield BrokerConfigKey(
        "zookeeper.connect",
        "string",
        "",
        "ZooKeeper's host:port list with an optional chroot (127.0.0.1:2181,127.0.0.1:2182/triolog): "
        "the broker joins that cluster, registers there, and keeps topics and partition state there "
        "in Kafka's layout (docs/cluster.md: a cluster is not finished yet). "
        "Empty: a standalone broker, no ZooKeeper.",
        group,
        attr="zookeeper_connect",
        parser=parse_zookeeper_connect,
        allowed="empty, or host:port[,host:port...][/chroot]",
    )
    yield BrokerConfigKey(
        "zookeeper.session.timeout.ms",
        "int",
        18000,
        "The ZooKeeper session's timeout: a broker not heard from for this long is dead to the "
        "cluster (its registration goes, its partitions get new leaders).",
        group,
        attr="zookeeper_session_timeout_ms",
        minimum=1,
    )
    yield BrokerConfigKey(
        "zookeeper.connection.timeout.ms",
        "int",
        None,
        "How long the broker waits to connect to ZooKeeper at startup. Unset: zookeeper.session.timeout.ms.",
        group,
        attr="zookeeper_connection_timeout_ms",
        fallback="zookeeper.session.timeout.ms",
        minimum=1,
    )
    yield BrokerConfigKey(
        "broker.rack",
        "string",
        None,
        "This broker's rack: replicas of a partition are spread over racks first.",
        group,
        attr="broker_rack",
    )
    yield BrokerConfigKey(
        "default.replication.factor",
        "int",
        1,
        "Replicas of each partition of an automatically created topic, and of a created topic that names none.",
        group,
        attr="default_replication_factor",
        minimum=1,
    )
    yield BrokerConfigKey(
        "replica.lag.time.max.ms",
        "long",
        30000,
        "A follower that has not caught up to the leader's log end for this long leaves the ISR.",
        group,
        attr="replica_lag_time_max_ms",
        minimum=1,
    )
    yield BrokerConfigKey(
        "replica.fetch.wait.max.ms",
        "int",
        500,
        "How long a follower's fetch waits at the leader for replica.fetch.min.bytes; below "
        "replica.lag.time.max.ms, or idle followers would drop out of the ISR.",
        group,
        attr="replica_fetch_wait_max_ms",
        minimum=0,
    )
    yield BrokerConfigKey(
        "replica.fetch.min.bytes",
        "int",
        1,
        "Bytes a follower's fetch waits for at the leader (up to replica.fetch.wait.max.ms).",
        group,
        attr="replica_fetch_min_bytes",
        minimum=1,
    )
    yield BrokerConfigKey(
        "replica.fetch.max.bytes",
        "int",
        1048576,
        "Bytes a follower fetches per partition per request (at least one whole batch).",
        group,
        attr="replica_fetch_max_bytes",
        minimum=0,
    )
    yield BrokerConfigKey(
        "replica.fetch.response.max.bytes",
        "int",
        10485760,
        "Bytes a follower fetches per request over all its partitions (at least one whole batch).",
        group,
        attr="replica_fetch_response_max_bytes",
        minimum=0,
    )
    yield BrokerConfigKey(
        "num.replica.fetchers",
        "int",
        1,
        "Fetcher tasks per source broker; partitions are spread over them.",
        group,
        attr="num_replica_fetchers",
        minimum=1,
    )
    yield BrokerConfigKey(
        "replica.fetch.backoff.ms",
        "int",
        1000,
        "How long a follower waits after a failed fetch before fetching from that broker again.",
        group,
        attr="replica_fetch_backoff_ms",
        minimum=0,
    )
    yield BrokerConfigKey(
        "auto.leader.rebalance.enable",
        "boolean",
        True,
        "Whether the controller moves leadership back to preferred replicas (the first of each "
        "partition's replicas) when a broker leads too few of its own.",
        group,
        attr="auto_leader_rebalance_enable",
    )
    yield BrokerConfigKey(
        "leader.imbalance.check.interval.seconds",
        "long",
        300,
        "How often the controller checks for leader imbalance.",
        group,
        attr="leader_imbalance_check_interval_seconds",
        minimum=1,
    )
    yield BrokerConfigKey(
        "leader.imbalance.per.broker.percentage",
        "int",
        10,
        "The share of a broker's preferred partitions it may not lead before the controller "
        "rebalances them back (percent).",
        group,
        attr="leader_imbalance_per_broker_percentage",
        minimum=0,
        maximum=100,
    )
    yield BrokerConfigKey(
        "controlled.shutdown.enable",
        "boolean",
        True,
        "Whether a broker stopping on SIGTERM first asks the controller to move its leaderships "
        "to other in-sync replicas, so producers see no unavailable partition.",
        group,
        attr="controlled_shutdown_enable",
    )
    yield BrokerConfigKey(
        "controlled.shutdown.max.retries",
        "int",
        3,
        "Bounds how long a broker stopping on SIGTERM waits for the controller to move its leaderships "
        "and ISR places: (this + 1) x controlled.shutdown.retry.backoff.ms; it then stops anyway.",
        group,
        attr="controlled_shutdown_max_retries",
        minimum=0,
    )
    yield BrokerConfigKey(
        "controlled.shutdown.retry.backoff.ms",
        "long",
        5000,
        "With controlled.shutdown.max.retries, how long a broker stopping on SIGTERM waits for its "
        "leaderships to move: (max.retries + 1) x this.",
        group,
        attr="controlled_shutdown_retry_backoff_ms",
        minimum=0,
    )
    yield BrokerConfigKey(
        "inter.broker.listener.name",
        "string",
        None,
        "The listener brokers replicate over (Kafka's Fetch): the Kafka listener, named by its "
        "security protocol as in kafka.listeners. Unset: that listener.",
        group,
        attr="inter_broker_listener_name",
    )
    yield BrokerConfigKey(
        "sasl.mechanism.inter.broker.protocol",
        "string",
        "SCRAM-SHA-512",
        "The SASL mechanism a follower logs in to its leader with, when the inter-broker (Kafka) "
        "listener is SASL_PLAINTEXT or SASL_SSL: SCRAM-SHA-256, SCRAM-SHA-512, or PLAIN (SASL_SSL "
        "only), as sasl.inter.broker.username. Kafka's default is GSSAPI, which triolog does not serve.",
        group,
        attr="sasl_mechanism_inter_broker_protocol",
        parser=lambda text: _parse_names(text, SASL_MECHANISMS, "SASL mechanism", at_least_one=True)[0],
        allowed=", ".join(SASL_MECHANISMS),
    )
    yield BrokerConfigKey(
        "sasl.inter.broker.username",
        "string",
        None,
        "The user a follower logs in to its leader's SASL listener as (triolog's stand-in for the "
        "username of Kafka's listener.name.<listener>.<mechanism>.sasl.jaas.config). A user of the "
        "cluster, made with `triolog users` (its credential is in ZooKeeper, so it logs in to every "
        "broker); with the authorizer on, give it CLUSTER_ACTION on the cluster or make it a super user.",
        group,
        attr="sasl_inter_broker_username",
        parser=_parse_optional,
        allowed="a user name, or empty",
    )
    yield BrokerConfigKey(
        "sasl.inter.broker.password",
        "password",
        None,
        "The password of sasl.inter.broker.username. Never shown by describe_configs.",
        group,
        attr="sasl_inter_broker_password",
        parser=_parse_optional,
        allowed="a string, or empty",
        sensitive=True,
    )


def _group_coordinator_keys() -> Iterator[BrokerConfigKey]:
    group = "group coordinator"
    yield BrokerConfigKey(
        "offsets.topic.num.partitions",
        "int",
        50,
        "Partitions of the internal topic __consumer_offsets, fixed when it is first created; a "
        "group's offsets and metadata live in partition abs(java hashCode(group_id)) % this.",
        group,
        attr="offsets_topic_num_partitions",
        minimum=1,
    )
    yield BrokerConfigKey(
        "offsets.topic.segment.bytes",
        "int",
        104857600,
        "segment.bytes of __consumer_offsets, kept small so that compaction and loading are fast.",
        group,
        attr="offsets_topic_segment_bytes",
        minimum=1,
    )
    yield BrokerConfigKey(
        "offsets.topic.replication.factor",
        "int",
        3,
        "Accepted for Kafka configs; a single triolog broker keeps one replica whatever it says.",
        group,
        attr="offsets_topic_replication_factor",
        minimum=1,
    )
    yield BrokerConfigKey(
        "offsets.retention.minutes",
        "int",
        10080,
        "Committed offsets of a group are deleted (tombstoned) this long after the group became "
        "empty, or after their commit for a group without members' protocol.",
        group,
        attr="offsets_retention_minutes",
        minimum=1,
    )
    yield BrokerConfigKey(
        "offsets.retention.check.interval.ms",
        "long",
        600000,
        "How often expired offsets are looked for.",
        group,
        attr="offsets_retention_check_interval_ms",
        minimum=1,
    )
    yield BrokerConfigKey(
        "offsets.load.buffer.size",
        "int",
        5242880,
        "Bytes read at a time when loading __consumer_offsets at startup.",
        group,
        attr="offsets_load_buffer_size",
        minimum=1,
    )
    yield BrokerConfigKey(
        "offsets.commit.timeout.ms",
        "int",
        5000,
        "How long an offset commit waits for its record to be flushed before failing with REQUEST_TIMED_OUT.",
        group,
        attr="offsets_commit_timeout_ms",
        minimum=1,
    )
    yield BrokerConfigKey(
        "offset.metadata.max.bytes",
        "int",
        4096,
        "Longest committed_metadata string an offset commit may carry.",
        group,
        attr="offset_metadata_max_bytes",
        minimum=0,
    )
    yield BrokerConfigKey(
        "group.initial.rebalance.delay.ms",
        "int",
        3000,
        "How long the first rebalance of an empty group waits for more members to join.",
        group,
        attr="group_initial_rebalance_delay_ms",
        minimum=0,
    )
    yield BrokerConfigKey(
        "group.min.session.timeout.ms",
        "int",
        6000,
        "Smallest session_timeout_ms a member may ask for.",
        group,
        attr="group_min_session_timeout_ms",
        minimum=0,
    )
    yield BrokerConfigKey(
        "group.max.session.timeout.ms",
        "int",
        1800000,
        "Largest session_timeout_ms a member may ask for.",
        group,
        attr="group_max_session_timeout_ms",
        minimum=0,
    )
    yield BrokerConfigKey(
        "group.max.size",
        "int",
        INT_MAX,
        "Members one group may have; a join beyond it gets GROUP_MAX_SIZE_REACHED.",
        group,
        attr="group_max_size",
        minimum=1,
    )


def _transaction_coordinator_keys() -> Iterator[BrokerConfigKey]:
    group = "transaction coordinator"
    yield BrokerConfigKey(
        "request.timeout.ms",
        "int",
        30000,
        "How long the broker's own writes may take before they fail with REQUEST_TIMED_OUT: the "
        "transaction coordinator's records in __transaction_state and the COMMIT/ABORT markers "
        "written for it (Kafka's broker-side request.timeout.ms).",
        group,
        attr="request_timeout_ms",
        minimum=1,
    )
    yield BrokerConfigKey(
        "transaction.state.log.num.partitions",
        "int",
        50,
        "Partitions of the internal topic __transaction_state, fixed when it is first created; a "
        "transactional id's state lives in partition abs(java hashCode(transactional_id)) % this.",
        group,
        attr="transaction_state_log_num_partitions",
        minimum=1,
    )
    yield BrokerConfigKey(
        "transaction.state.log.replication.factor",
        "int",
        3,
        "Replicas of __transaction_state on a cluster (created once this many brokers are live); a "
        "single broker keeps one whatever it says.",
        group,
        attr="transaction_state_log_replication_factor",
        minimum=1,
    )
    yield BrokerConfigKey(
        "transaction.state.log.min.isr",
        "int",
        2,
        "min.insync.replicas of __transaction_state: a coordinator's write needs this many in-sync replicas.",
        group,
        attr="transaction_state_log_min_isr",
        minimum=1,
    )
    yield BrokerConfigKey(
        "transaction.state.log.segment.bytes",
        "int",
        104857600,
        "segment.bytes of __transaction_state, kept small so that compaction and loading are fast.",
        group,
        attr="transaction_state_log_segment_bytes",
        minimum=1,
    )
    yield BrokerConfigKey(
        "transaction.state.log.load.buffer.size",
        "int",
        5242880,
        "Bytes read at a time when loading a partition of __transaction_state.",
        group,
        attr="transaction_state_log_load_buffer_size",
        minimum=1,
    )
    yield BrokerConfigKey(
        "transaction.max.timeout.ms",
        "int",
        900000,
        "Largest transaction_timeout_ms a producer may ask for (init_producer_id answers "
        "INVALID_TRANSACTION_TIMEOUT above it).",
        group,
        attr="transaction_max_timeout_ms",
        minimum=1,
    )
    yield BrokerConfigKey(
        "transaction.partition.verification.enable",
        "boolean",
        True,
        "A partition leader asks the transaction coordinator before a producer's first transactional "
        "batch there whether the partition is in its transaction (KIP-890 part 1); a batch of a "
        "partition never added is refused with INVALID_TXN_STATE instead of leaving a hanging "
        "transaction. Produce requests with transactional batches must then name the transactional id.",
        group,
        attr="transaction_partition_verification_enable",
    )
    yield BrokerConfigKey(
        "transactional.id.expiration.ms",
        "int",
        604800000,
        "A transactional id whose producer sent nothing for this long, with no transaction open, is "
        "forgotten (its state tombstoned).",
        group,
        attr="transactional_id_expiration_ms",
        minimum=1,
    )
    yield BrokerConfigKey(
        "transaction.abort.timed.out.transaction.cleanup.interval.ms",
        "int",
        10000,
        "How often transactions open longer than their transaction_timeout_ms are looked for and aborted.",
        group,
        attr="transaction_abort_timed_out_transaction_cleanup_interval_ms",
        minimum=1,
    )
    yield BrokerConfigKey(
        "transaction.remove.expired.transaction.cleanup.interval.ms",
        "int",
        3600000,
        "How often transactional ids past transactional.id.expiration.ms are looked for and removed.",
        group,
        attr="transaction_remove_expired_transaction_cleanup_interval_ms",
        minimum=1,
    )


# Chain heads: unset by default, falling back to a coarser key (Kafka's precedence).
_SYNONYM_HEADS: dict[str, dict[str, Any]] = {
    "retention.ms": dict(
        fallback="log.retention.minutes",
        minimum=None,
        doc_extra="Takes precedence over log.retention.minutes and log.retention.hours; "
        "any negative value means -1 (unlimited).",
    ),
    "segment.ms": dict(fallback="log.roll.hours", doc_extra="Takes precedence over log.roll.hours."),
    "segment.jitter.ms": dict(
        fallback="log.roll.jitter.hours", doc_extra="Takes precedence over log.roll.jitter.hours."
    ),
    "flush.ms": dict(
        fallback="log.flush.scheduler.interval.ms", doc_extra="Takes precedence over log.flush.scheduler.interval.ms."
    ),
}

# Coarser keys consulted when a chain head is unset, emitted right after it.
_SYNONYM_FALLBACKS: dict[str, tuple[BrokerConfigKey, ...]] = {
    "retention.ms": (
        BrokerConfigKey(
            "log.retention.minutes",
            "int",
            None,
            "Retention in minutes, used when log.retention.ms is unset; negative = unlimited.",
            "topic defaults",
            fallback="log.retention.hours",
            unit_ms=MS_PER_MINUTE,
        ),
        BrokerConfigKey(
            "log.retention.hours",
            "int",
            168,
            "Retention in hours, used when log.retention.ms and log.retention.minutes are unset; negative = unlimited.",
            "topic defaults",
            unit_ms=MS_PER_HOUR,
        ),
    ),
    "segment.ms": (
        BrokerConfigKey(
            "log.roll.hours",
            "int",
            168,
            "Segment roll time in hours, used when log.roll.ms is unset.",
            "topic defaults",
            unit_ms=MS_PER_HOUR,
            minimum=1,
        ),
    ),
    "segment.jitter.ms": (
        BrokerConfigKey(
            "log.roll.jitter.hours",
            "int",
            0,
            "Roll jitter in hours, used when log.roll.jitter.ms is unset.",
            "topic defaults",
            unit_ms=MS_PER_HOUR,
            minimum=0,
        ),
    ),
}


def _topic_default_keys() -> Iterator[BrokerConfigKey]:
    """The broker synonym of every topic key: same type and limits, documented from the topic key."""
    for topic in TOPIC_CONFIGS.values():
        if topic.broker_name is None:
            continue
        head = dict(_SYNONYM_HEADS.get(topic.name, {}))
        extra = head.pop("doc_extra", "")
        settings: dict[str, Any] = dict(minimum=topic.minimum, maximum=topic.maximum, choices=topic.choices)
        if head:
            settings["default"] = None
        else:
            settings["default"] = topic.default
        settings.update(head)
        doc = f"{topic.doc} Default of topic key {topic.name}." + (f" {extra}" if extra else "")
        yield BrokerConfigKey(
            topic.broker_name, topic.type, doc=doc, group="topic defaults", topic_name=topic.name, **settings
        )
        yield from _SYNONYM_FALLBACKS.get(topic.name, ())


BROKER_CONFIGS: dict[str, BrokerConfigKey] = {
    key.name: key
    for keys in (
        _server_keys(),
        _security_keys(),
        _log_manager_keys(),
        _cleaner_keys(),
        _producer_state_keys(),
        _group_coordinator_keys(),
        _transaction_coordinator_keys(),
        _cluster_keys(),
        _topic_default_keys(),
    )
    for key in keys
}


# -- the configuration object ------------------------------------------------------------------


@dataclass(frozen=True)
class BrokerConfig:
    """The effective broker configuration: synonyms resolved, every value typed and checked.

    Build it with ``from_properties`` (or ``triolog.config.loader.load_config``); the field defaults
    equal ``from_properties({})``. ``dataclasses.replace`` makes variants for tests, but does not
    re-resolve synonyms: change ``log_config`` itself, or re-parse ``originals`` with changes.
    """

    listener: Endpoint = Endpoint("PLAINTEXT", "127.0.0.1", 9092)
    kafka_listener: Endpoint | None = None
    kafka_advertised_listener: Endpoint | None = None
    node_id: int = 0
    log_dirs: tuple[str, ...] = ("/tmp/kafka-logs",)
    num_partitions: int = 1
    auto_create_topics_enable: bool = True
    socket_request_max_bytes: int = 104857600
    max_connections: int = INT_MAX
    max_connections_per_ip: int = INT_MAX
    max_connection_creation_rate: int = INT_MAX
    connections_max_idle_ms: int = 600000
    queued_max_request_bytes: int = 268435456
    request_receive_timeout_ms: int = 30000
    max_broker_partitions: int = 10000
    metrics_listener: Endpoint | None = Endpoint("http", "127.0.0.1", 9404)
    logger_format: str = "console"
    logger_level: str = "INFO"

    ssl_keystore_type: str = "PEM"
    ssl_keystore_location: str | None = None
    ssl_key_password: str | None = field(default=None, repr=False)
    ssl_truststore_type: str = "PEM"
    ssl_truststore_location: str | None = None
    ssl_client_auth: str = "none"
    ssl_enabled_protocols: tuple[str, ...] = _TLS_PROTOCOLS
    ssl_cipher_suites: tuple[str, ...] = ()
    ssl_principal_mapping_rules: PrincipalMappingRules = PrincipalMappingRules(DEFAULT_RULES)
    sasl_enabled_mechanisms: tuple[str, ...] = ("SCRAM-SHA-256", "SCRAM-SHA-512")
    sasl_server_max_receive_size: int = 524288
    connection_failed_authentication_delay_ms: int = 100
    connections_max_reauth_ms: int = 0
    authorizer_class_name: str = ""
    super_users: tuple[str, ...] = ()
    allow_everyone_if_no_acl_found: bool = False
    quota_window_size_seconds: int = 1
    quota_window_num: int = 11

    log_retention_check_interval_ms: int = 300000
    log_flush_offset_checkpoint_interval_ms: int = 60000
    log_flush_start_offset_checkpoint_interval_ms: int = 60000
    replica_high_watermark_checkpoint_interval_ms: int = 5000
    log_flush_scheduler_interval_ms: int = LONG_MAX
    log_initial_task_delay_ms: int = 30000
    num_recovery_threads_per_data_dir: int = 1

    log_cleaner_enable: bool = True
    log_cleaner_threads: int = 1
    log_cleaner_dedupe_buffer_size: int = 134217728
    log_cleaner_io_buffer_size: int = 524288
    log_cleaner_io_buffer_load_factor: float = 0.9
    log_cleaner_io_max_bytes_per_second: float = DOUBLE_MAX
    log_cleaner_backoff_ms: int = 15000

    producer_id_expiration_ms: int = 86400000
    producer_id_expiration_check_interval_ms: int = 600000

    offsets_topic_num_partitions: int = 50
    offsets_topic_segment_bytes: int = 104857600
    offsets_topic_replication_factor: int = 3
    offsets_retention_minutes: int = 10080
    offsets_retention_check_interval_ms: int = 600000
    offsets_load_buffer_size: int = 5242880
    offsets_commit_timeout_ms: int = 5000
    offset_metadata_max_bytes: int = 4096
    group_initial_rebalance_delay_ms: int = 3000
    group_min_session_timeout_ms: int = 6000
    group_max_session_timeout_ms: int = 1800000
    group_max_size: int = INT_MAX

    request_timeout_ms: int = 30000
    transaction_state_log_num_partitions: int = 50
    transaction_state_log_replication_factor: int = 3
    transaction_state_log_min_isr: int = 2
    transaction_state_log_segment_bytes: int = 104857600
    transaction_state_log_load_buffer_size: int = 5242880
    transaction_max_timeout_ms: int = 900000
    transaction_partition_verification_enable: bool = True
    transactional_id_expiration_ms: int = 604800000
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = 10000
    transaction_remove_expired_transaction_cleanup_interval_ms: int = 3600000

    #: The LogConfig of every topic without overrides, from the broker synonyms of topic keys.
    zookeeper_connect: str = ""
    zookeeper_session_timeout_ms: int = 18000
    zookeeper_connection_timeout_ms: int = 18000
    broker_rack: str | None = None
    default_replication_factor: int = 1
    replica_lag_time_max_ms: int = 30000
    replica_fetch_wait_max_ms: int = 500
    replica_fetch_min_bytes: int = 1
    replica_fetch_max_bytes: int = 1048576
    replica_fetch_response_max_bytes: int = 10485760
    num_replica_fetchers: int = 1
    replica_fetch_backoff_ms: int = 1000
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_check_interval_seconds: int = 300
    leader_imbalance_per_broker_percentage: int = 10
    controlled_shutdown_enable: bool = True
    controlled_shutdown_max_retries: int = 3
    controlled_shutdown_retry_backoff_ms: int = 5000
    inter_broker_listener_name: str | None = None
    sasl_mechanism_inter_broker_protocol: str = "SCRAM-SHA-512"
    sasl_inter_broker_username: str | None = None
    sasl_inter_broker_password: str | None = field(default=None, repr=False)

    log_config: LogConfig = field(default_factory=LogConfig)
    #: The known keys that were set explicitly, as given (Kafka's ``originals()``).
    originals: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_properties(
        cls, props: Mapping[str, Any], *, sources: Mapping[str, str] | None = None
    ) -> tuple[BrokerConfig, list[str]]:
        """Parse broker properties into a config plus warnings (one per unknown key, which is ignored).

        Raises ConfigError naming every invalid key at once, each with its value and what is
        allowed. ``sources`` maps keys to where they came from, quoted in messages.
        """
        sources = sources or {}
        problems: list[str] = []
        warnings: list[str] = []
        parsed: dict[str, Any] = {}
        originals: dict[str, Any] = {}
        for name, raw in props.items():
            origin = f" (from {sources[name]})" if name in sources else ""
            key = BROKER_CONFIGS.get(name)
            if key is None:
                warnings.append(_unknown_key_warning(name, origin))
                continue
            originals[name] = raw
            try:
                parsed[name] = key.parse(raw)
            except (TypeError, ValueError) as exc:
                problems.append(f"invalid value {raw!r} for {name}{origin}: {exc} (allowed: {key.describe_allowed()})")

        fields = {key.attr: _resolve(key.name, parsed) for key in BROKER_CONFIGS.values() if key.attr}
        topic_values = {
            TOPIC_CONFIGS[key.topic_name].attr: _resolve(key.name, parsed)
            for key in BROKER_CONFIGS.values()
            if key.topic_name
        }
        if topic_values["retention_ms"] < 0:
            topic_values["retention_ms"] = -1  # Kafka: any negative retention means unlimited
        log_config = dataclasses.replace(LogConfig(), **topic_values)
        if log_config.min_compaction_lag_ms > log_config.max_compaction_lag_ms:
            problems.append(
                f"log.cleaner.min.compaction.lag.ms ({log_config.min_compaction_lag_ms}) must not "
                f"exceed log.cleaner.max.compaction.lag.ms ({log_config.max_compaction_lag_ms})"
            )
        if "broker.id" in parsed and "node.id" in parsed and parsed["node.id"] != parsed["broker.id"]:
            problems.append(
                f"broker.id ({parsed['broker.id']}) and node.id ({parsed['node.id']}) name one id: "
                f"set one of them, or both to the same value"
            )
        problems.extend(_security_problems(fields))
        problems.extend(_cluster_problems(fields))
        if problems:
            raise ConfigError(problems)
        return cls(**fields, log_config=log_config, originals=originals), warnings

    @property
    def authorizer_enabled(self) -> bool:
        return bool(self.authorizer_class_name)

    @property
    def tls_listeners(self) -> list[Endpoint]:
        return [e for e in (self.listener, self.kafka_listener) if e is not None and uses_tls(e)]


def _security_problems(fields: Mapping[str, Any]) -> list[str]:
    """What the listeners need of the ssl.* keys, checked at load rather than at the first handshake."""
    listeners = [e for e in (fields["listener"], fields["kafka_listener"]) if e is not None]
    problems = []
    tls = [str(e) for e in listeners if uses_tls(e)]
    if tls and fields["ssl_keystore_location"] is None:
        problems.append(
            f"the TLS listener {', '.join(tls)} needs ssl.keystore.location (one PEM file with the "
            f"private key and its certificate chain)"
        )
    if tls and fields["ssl_client_auth"] != "none" and fields["ssl_truststore_location"] is None:
        problems.append(
            f"ssl.client.auth={fields['ssl_client_auth']} needs ssl.truststore.location (the PEM "
            f"CA certificates client certificates are verified against)"
        )
    plaintext_sasl = [e for e in listeners if e.scheme == "SASL_PLAINTEXT"]
    if plaintext_sasl and fields["sasl_enabled_mechanisms"] == ("PLAIN",):
        problems.append(
            f"the SASL_PLAINTEXT listener {plaintext_sasl[0]} would offer no mechanism: PLAIN, the only "
            f"one in sasl.enabled.mechanisms, sends the password itself and is offered over TLS only "
            f"(SASL_SSL); enable SCRAM-SHA-256 or SCRAM-SHA-512"
        )
    return problems


def _cluster_problems(fields: Mapping[str, Any]) -> list[str]:
    """What joining a cluster needs of the other keys: brokers replicate over the Kafka listener."""
    if not fields["zookeeper_connect"]:
        return []
    kafka = fields["kafka_listener"]
    if kafka is None:
        return [
            "zookeeper.connect needs kafka.listeners: brokers replicate with Kafka's Fetch over the "
            "Kafka listener (inter.broker.listener.name)"
        ]
    name = fields["inter_broker_listener_name"]
    if name is not None and name != kafka.scheme:
        return [
            f"inter.broker.listener.name={name} names no Kafka listener: kafka.listeners is {kafka} "
            f"(its name is {kafka.scheme})"
        ]
    if uses_sasl(kafka):
        mechanism = fields["sasl_mechanism_inter_broker_protocol"]
        if not fields["sasl_inter_broker_username"] or not fields["sasl_inter_broker_password"]:
            return [
                f"the inter-broker listener {kafka} needs a login: set sasl.inter.broker.username and "
                "sasl.inter.broker.password (a user of the cluster, see `triolog users`)"
            ]
        if mechanism == "PLAIN" and kafka.scheme != "SASL_SSL":
            return [
                "sasl.mechanism.inter.broker.protocol=PLAIN sends the password itself: over SASL_SSL only "
                f"(the inter-broker listener is {kafka.scheme}); use SCRAM-SHA-256 or SCRAM-SHA-512"
            ]
        if mechanism not in fields["sasl_enabled_mechanisms"]:
            return [
                f"sasl.mechanism.inter.broker.protocol={mechanism} is not in sasl.enabled.mechanisms "
                f"({','.join(fields['sasl_enabled_mechanisms'])}): the leaders would not offer it"
            ]
    return []


def _resolve(name: str, parsed: Mapping[str, Any]) -> Any:
    """The value of ``name``: set explicitly, else its fallback's (recursively), else its default."""
    key = BROKER_CONFIGS[name]
    if name in parsed:
        value = parsed[name]
    elif key.fallback is not None:
        return _resolve(key.fallback, parsed)
    else:
        value = key.default
    return value * key.unit_ms if key.unit_ms != 1 else value


def _unknown_key_warning(name: str, origin: str) -> str:
    """Unknown keys are only warned about (Kafka logs them too), with a hint at the likely key."""
    topic = TOPIC_CONFIGS.get(name)
    if topic is not None and topic.broker_name is not None:
        hint = f"; {name} is a topic-level key, the broker sets its default with {topic.broker_name}"
    else:
        close = difflib.get_close_matches(name, list(BROKER_CONFIGS), n=1)
        hint = f"; did you mean {close[0]}?" if close else ""
    return f"unknown config {name!r}{origin} ignored{hint}"
