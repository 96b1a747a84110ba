"""Clients speaking another protocol to a listener (a Kafka client on the msgpack port, a triolog
client on the Kafka port, curl, TLS to a plaintext port): how each is recognised from its first
bytes, the hint it is logged with (what to do instead), and the log that says so at WARNING once
per peer host and protocol in ten minutes, at DEBUG in between (clients retry).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Protocol

import structlog

from triolog.config.broker_config import Endpoint
from triolog.protocol.kafka.apis import KafkaContext

__all__ = [
    "MSGPACK_MAP_FIRST",
    "KafkaListenerLog",
    "ListenerWrongProtocolLog",
    "WrongProtocolLog",
    "kafka_listener_hints",
    "wrong_protocol_hints",
]

logger = structlog.get_logger("triolog.server")

#: A msgpack map's first byte (fixmap, map16, map32): a triolog client on the Kafka port. No
#: Kafka request starts with one (its first byte is the high byte of a small api_key: 0).
MSGPACK_MAP_FIRST = frozenset(range(0x80, 0x90)) | {0xDE, 0xDF}

#: What the log (and the refusal a TLS client gets) says about a client speaking another protocol
#: here; the HTTP hint names this broker's metrics endpoint (:func:`wrong_protocol_hints`).
_NOT_KAFKA = (
    "this listener speaks triolog's msgpack protocol, not Kafka's, and this broker has no Kafka-protocol "
    "listener (kafka.listeners is empty): set kafka.listeners, or connect with triolog's client "
    "(triolog.client) or the triolog CLI"
)
_NOT_TLS = (
    "this listener is PLAINTEXT, not TLS: connect without TLS, or to a listener the broker serves as "
    "SSL:// or SASL_SSL:// (listeners, kafka.listeners)"
)
_NOT_PLAINTEXT = (
    "this listener speaks TLS (an SSL:// or SASL_SSL:// listener): the client must connect with TLS "
    "(Kafka clients: security.protocol=SSL or SASL_SSL; triolog's: the same setting)"
)
#: A client speaking another protocol is logged at WARNING once per (peer host, protocol) in this
#: long, at DEBUG in between: a Kafka client retrying its bootstrap would log one per attempt.
WRONG_PROTOCOL_WARN_INTERVAL_S = 600.0
#: (host, protocol) pairs remembered for that; past this many, the oldest is forgotten (and may
#: warn again early), so a scan from many addresses holds bounded memory.
WRONG_PROTOCOL_MAX_PEERS = 256


def wrong_protocol_hints(
    metrics_listener: Endpoint | None, metrics_port: int | None = None, kafka: KafkaContext | None = None
) -> dict[str, str]:
    """The hint for each protocol; the HTTP one says where this broker serves Prometheus metrics
    (``metrics_port``: the port it bound, for a listener configured with port 0), or that it
    serves none; the Kafka one where Kafka clients connect (``kafka``: the Kafka listener's
    advertised address), if anywhere. "msgpack" is for a triolog client on the Kafka port."""
    if metrics_listener is None:
        http = (
            "this listener speaks triolog's msgpack protocol, not HTTP, and this broker serves no HTTP "
            "endpoint: Prometheus metrics are disabled (metrics.listener is empty)"
        )
    else:
        port = metrics_listener.port if metrics_port is None else metrics_port
        host = metrics_listener.host
        if host in ("", "0.0.0.0", "::"):
            host = "<any address of this host>"
        elif ":" in host:
            host = f"[{host}]"
        http = (
            f"this listener speaks triolog's msgpack protocol, not HTTP: Prometheus metrics are served at "
            f"http://{host}:{port}/metrics (metrics.listener={metrics_listener})"
        )
    not_kafka = _NOT_KAFKA
    if kafka is not None:
        host = f"[{kafka.host}]" if ":" in kafka.host else kafka.host
        not_kafka = (
            f"this listener speaks triolog's msgpack protocol, not Kafka's: Kafka clients connect to "
            f"{host}:{kafka.port} (kafka.listeners)"
        )
    msgpack = (
        "this listener speaks Kafka's protocol, not triolog's msgpack protocol: triolog's client and CLI "
        "connect to the broker's listeners address"
    )
    return {"kafka": not_kafka, "http": http, "tls": _NOT_TLS, "msgpack": msgpack, "plaintext": _NOT_PLAINTEXT}


class WrongProtocolLog:
    """Logs the clients that speak another protocol to the listener, for the whole broker: WARNING
    for the first connection of a (peer host, protocol) in ``interval_s``, DEBUG for the others
    (the metric counts them all). ``clock`` is monotonic seconds."""

    def __init__(
        self,
        hints: dict[str, str],
        *,
        clock: Callable[[], float] = time.monotonic,
        interval_s: float = WRONG_PROTOCOL_WARN_INTERVAL_S,
        max_peers: int = WRONG_PROTOCOL_MAX_PEERS,
    ):
        self.hints = hints
        self.clock = clock
        self.interval_s = interval_s
        self.max_peers = max_peers
        #: (host, protocol) -> when it was last logged at WARNING, oldest first.
        self._warned: OrderedDict[tuple[str, str], float] = OrderedDict()

    def log(self, host: str, protocol: str, **fields) -> str:
        """Log one connection of ``host`` speaking ``protocol``; the level used ("warning", "debug")."""
        now = self.clock()
        warned = self._warned
        while warned:  # forget what has expired (entries are in the order they were warned)
            key, at = next(iter(warned.items()))
            if now - at < self.interval_s:
                break
            del warned[key]
        key = (host, protocol)
        if key in warned:
            logger.debug("wrong_protocol", protocol=protocol, hint=self.hints[protocol], **fields)
            return "debug"
        warned[key] = now
        if len(warned) > self.max_peers:
            warned.popitem(last=False)
        logger.warning(
            "wrong_protocol",
            protocol=protocol,
            hint=self.hints[protocol],
            repeats=f"further connections of this host speaking it are logged at DEBUG for "
            f"{self.interval_s:g} s, all counted in triolog_server_wrong_protocol_connections_total",
            **fields,
        )
        return "warning"

    def __len__(self) -> int:
        return len(self._warned)


class ListenerWrongProtocolLog(Protocol):
    """What a listener's connections log a wrong protocol with: the broker's WrongProtocolLog
    itself (the msgpack listener), or a listener's view of it (KafkaListenerLog)."""

    @property
    def hints(self) -> dict[str, str]: ...

    def log(self, host: str, protocol: str, **fields: object) -> str: ...


#: How the msgpack listener's hints begin, and how the Kafka listener's begin instead.
_MSGPACK_SPEAKS = "this listener speaks triolog's msgpack protocol"
_KAFKA_SPEAKS = "this is the Kafka-protocol listener (kafka.listeners): it speaks Kafka's protocol"


def kafka_listener_hints(hints: dict[str, str]) -> dict[str, str]:
    """The wrong-protocol hints of the Kafka listener, from the broker's (the msgpack listener's):
    the same facts (where metrics are served...), said of the Kafka-protocol listener."""
    out = dict(hints)
    for protocol, name in (("http", "HTTP"), ("tls", "TLS")):
        hint = hints.get(protocol, "")
        if hint.startswith(_MSGPACK_SPEAKS):
            out[protocol] = _KAFKA_SPEAKS + hint[len(_MSGPACK_SPEAKS) :]
        else:  # a hint true of either listener (TLS to a PLAINTEXT one)
            out[protocol] = f"{_KAFKA_SPEAKS}, not {name}" + (f"; {hint}" if hint else "")
    return out


class KafkaListenerLog:
    """The broker's WrongProtocolLog seen from the Kafka listener: the same rate-limit state (and
    hints updated once the broker knows its ports), the Kafka listener's wording."""

    def __init__(self, shared: WrongProtocolLog):
        self._shared = shared

    def __getattr__(self, name: str):
        return getattr(self._shared, name)

    @property
    def hints(self) -> dict[str, str]:
        return kafka_listener_hints(self._shared.hints)

    log = WrongProtocolLog.log
