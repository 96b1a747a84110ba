"""ElectLeaders (Kafka's API 43), which only the controller of a cluster answers.

Served on the Kafka listener only (``kafka-leader-election.sh``, confluent-kafka's and
kafka-python's ``elect_leaders``): the msgpack protocol has no election request, so these shapes
are not messages of its table. A broker that is not the controller answers NOT_CONTROLLER, and
Kafka's admin clients then ask the controller the metadata names.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from triolog.protocol import messages as m
from triolog.protocol.errors import ErrorCode

from .apis import Adapter, ApiKey, KafkaContext, by_key
from .requests import KafkaRequest
from .schema import build, millis, response_class

__all__ = ["ADAPTERS", "ElectLeadersRequest", "ElectLeadersResponse", "ElectionResult"]

#: ElectLeaders v0 has no election type: it asks for preferred elections.
PREFERRED = 0


@dataclass(frozen=True, kw_only=True)
class ElectLeadersRequest(m.Request):
    api: ClassVar[str] = "elect_leaders"
    #: 0: preferred, 1: unclean (Kafka's ElectionType).
    election_type: int = PREFERRED
    #: (topic, partition) pairs; None: every partition of the cluster.
    partitions: tuple[tuple[str, int], ...] | None = None
    timeout_ms: int = 60_000


@dataclass(frozen=True, kw_only=True)
class ElectionResult:
    topic: str
    partition: int
    error_code: int = ErrorCode.NONE
    error_message: str | None = None


@dataclass(frozen=True, kw_only=True)
class ElectLeadersResponse(m.Response):
    api: ClassVar[str] = "elect_leaders"
    results: tuple[ElectionResult, ...] = ()


def elect_leaders_to_internal(req: KafkaRequest, ctx: KafkaContext) -> ElectLeadersRequest:
    body = req.body
    partitions = None
    if body.topic_partitions is not None:
        partitions = tuple(dict.fromkeys((t.topic, int(p)) for t in body.topic_partitions for p in t.partitions))
    return ElectLeadersRequest(
        id=req.correlation_id,
        client_id=req.client_id,
        election_type=int(getattr(body, "election_type", PREFERRED)),
        partitions=partitions,
        timeout_ms=max(0, millis(body.timeout, 60_000)),
    )


def _results(results: list[tuple[str, int, int, str | None]]) -> list[dict[str, Any]]:
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for topic, partition, code, message in results:
        by_topic.setdefault(topic, []).append({"partition_id": partition, "error_code": code, "error_message": message})
    return [{"topic": topic, "partition_result": entries} for topic, entries in by_topic.items()]


def elect_leaders_to_kafka(response: ElectLeadersResponse, req: KafkaRequest, ctx: KafkaContext):
    return build(
        response_class(req.api_key, req.version),
        {
            "error_code": response.error_code,
            "replica_election_results": _results(
                [(r.topic, r.partition, r.error_code, r.error_message) for r in response.results]
            ),
        },
    )


def elect_leaders_error(req: KafkaRequest, ctx: KafkaContext, code: int, message: str):
    """One error for the whole request: the top-level code (v1+) and every partition named."""
    named = req.body.topic_partitions or ()
    return build(
        response_class(req.api_key, req.version),
        {
            "error_code": code,
            "replica_election_results": _results(
                [(t.topic, int(p), code, message) for t in named for p in t.partitions]
            ),
        },
    )


ADAPTERS = by_key(
    Adapter(
        ApiKey.ELECT_LEADERS,
        0,
        2,
        elect_leaders_to_internal,
        elect_leaders_to_kafka,
        "elect_leaders",
        elect_leaders_error,
    ),
)
