"""What the Kafka listener serves: one :class:`Adapter` per Kafka API, and the version table
ApiVersions advertises.

An adapter translates a Kafka request (a kio instance) into the broker's internal request
(:mod:`triolog.protocol.messages`, the msgpack protocol's message classes), so that one handler
set serves both listeners, and the handler's answer back into the kio response of the request's
version. An API the handler has no counterpart for (ApiVersions, DescribeCluster) is answered by
its adapter alone (:class:`Direct`). Everything here is pure: no I/O, no broker state beyond
the :class:`KafkaContext` the listener passes in.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kio.schema.index import api_key_map

from .requests import KafkaRequest

__all__ = ["Adapter", "ApiKey", "Direct", "KafkaContext", "by_key", "served_versions"]

if TYPE_CHECKING:

    class _ApiKeyType(enum.EnumMeta):
        """What a type checker sees: the members are made at import from kio's index (below), so
        it cannot list them; every ``ApiKey.NAME`` is an ApiKey, as for ErrorCode (errors.py). The
        names the sources use are checked by tests/protocol/test_enum_names.py."""

        def __getattr__(cls, name: str) -> ApiKey: ...

else:
    _ApiKeyType = enum.EnumMeta


class ApiKey(enum.IntEnum, metaclass=_ApiKeyType):
    """Kafka's API keys, every one kio has schemas for, by kio's names upper-cased (PRODUCE,
    API_VERSIONS...). The numbers come from kio's index, generated from Kafka's JSON schemas, so
    no key is typed here."""

    _ignore_ = "_key _name"
    for _key, _name in api_key_map.items():
        vars()[_name.upper()] = _key

    @property
    def kafka_name(self) -> str:
        """Kafka's name of the API: ApiVersions, Produce, DescribeUserScramCredentials."""
        return "".join(word.capitalize() for word in self.name.split("_"))


@dataclass(frozen=True)
class KafkaContext:
    """What the translations need to know about the broker answering."""

    node_id: int
    #: What Metadata, FindCoordinator and DescribeCluster give as this broker's address
    #: (kafka.advertised.listeners, else the bound kafka listener).
    host: str
    port: int
    cluster_id: str | None


@dataclass(frozen=True)
class Direct:
    """An answer the adapter gives without the handler: the kio response body."""

    body: Any


@dataclass(frozen=True)
class Adapter:
    api_key: ApiKey
    min_version: int
    max_version: int
    #: The Kafka request as the handler's request (or a list of them, answered in order, for a
    #: Kafka request that batches what the internal API asks one at a time), or a Direct answer.
    to_internal: Callable[[KafkaRequest, KafkaContext], Any]
    #: The handler's answer (the list of answers, for a list) as the kio response body of the
    #: request's version.
    to_kafka: Callable[[Any, KafkaRequest, KafkaContext], Any]
    #: The metrics' label of the API (the internal API's name where there is one).
    label: str
    #: The body answering the whole request with one error (every entry, or the top-level code
    #: where the response has one), for a request the handler failed on; None: the top-level
    #: code if the response has one, else the connection closes.
    error_body: Callable[[KafkaRequest, KafkaContext, int, str], Any] | None = None
    #: Given the handler's answer, the internal request to make next in its place, or None: for a
    #: Kafka version that expects in one exchange what the internal API does in two.
    follow_up: Callable[[Any, Any, KafkaRequest], Any] | None = None

    @property
    def name(self) -> str:
        """Kafka's name of the API (ApiVersions, Produce...)."""
        return self.api_key.kafka_name


def by_key(*adapters: Adapter) -> dict[int, Adapter]:
    """The adapters by their API key (so no key is written twice)."""
    return {adapter.api_key: adapter for adapter in adapters}


def served_versions(adapters: dict[int, Adapter]) -> dict[int, tuple[int, int]]:
    return {key: (a.min_version, a.max_version) for key, a in adapters.items()}
