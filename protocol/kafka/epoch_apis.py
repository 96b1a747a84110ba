"""OffsetForLeaderEpoch (Kafka's API 23): where a leader epoch ends in the leader's log.

Kafka's clients ask it after a leader change to check that the position they hold is still in
the log (KIP-320: a consumer that read past what a new leader has truncates or resets instead of
reading a different history), and older followers ask it before truncating. Served on the Kafka
listener only (the msgpack protocol's clients do not validate positions by epoch), so these shapes
are not messages of its table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from triolog.protocol import messages as m
from triolog.protocol.errors import ErrorCode

from .apis import Adapter, ApiKey, KafkaContext, by_key
from .requests import KafkaRequest
from .schema import build, response_class

__all__ = ["ADAPTERS", "EpochEndOffset", "EpochQuery", "OffsetForLeaderEpochRequest", "OffsetForLeaderEpochResponse"]

#: Kafka's "no epoch" and "no offset" (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET).
UNDEFINED = -1
#: A consumer's request (v3+ carry the asking broker's id; a consumer sends -1).
CONSUMER = -1


@dataclass(frozen=True, kw_only=True)
class EpochQuery:
    topic: str
    partition: int
    #: The leader epoch the client believes current (-1: unchecked).
    current_leader_epoch: int = UNDEFINED
    leader_epoch: int


@dataclass(frozen=True, kw_only=True)
class OffsetForLeaderEpochRequest(m.Request):
    api: ClassVar[str] = "offset_for_leader_epoch"
    replica_id: int = CONSUMER
    queries: tuple[EpochQuery, ...] = ()


@dataclass(frozen=True, kw_only=True)
class EpochEndOffset:
    topic: str
    partition: int
    error_code: int = ErrorCode.NONE
    leader_epoch: int = UNDEFINED
    end_offset: int = UNDEFINED


@dataclass(frozen=True, kw_only=True)
class OffsetForLeaderEpochResponse(m.Response):
    api: ClassVar[str] = "offset_for_leader_epoch"
    results: tuple[EpochEndOffset, ...] = ()


def offset_for_leader_epoch_to_internal(req: KafkaRequest, ctx: KafkaContext) -> OffsetForLeaderEpochRequest:
    body = req.body
    return OffsetForLeaderEpochRequest(
        id=req.correlation_id,
        client_id=req.client_id,
        replica_id=int(getattr(body, "replica_id", CONSUMER)),
        queries=tuple(
            EpochQuery(
                topic=t.topic,
                partition=p.partition,
                current_leader_epoch=p.current_leader_epoch,
                leader_epoch=p.leader_epoch,
            )
            for t in body.topics
            for p in t.partitions
        ),
    )


def _topics(entries: list[tuple[str, int, int, int, int]]) -> list[dict]:
    by_topic: dict[str, list[dict]] = {}
    for topic, partition, code, epoch, end in entries:
        by_topic.setdefault(topic, []).append(
            {"error_code": code, "partition": partition, "leader_epoch": epoch, "end_offset": end}
        )
    return [{"topic": topic, "partitions": partitions} for topic, partitions in by_topic.items()]


def offset_for_leader_epoch_to_kafka(response: OffsetForLeaderEpochResponse, req: KafkaRequest, ctx: KafkaContext):
    return build(
        response_class(req.api_key, req.version),
        {
            "topics": _topics(
                [(r.topic, r.partition, r.error_code, r.leader_epoch, r.end_offset) for r in response.results]
            )
        },
    )


def offset_for_leader_epoch_error(req: KafkaRequest, ctx: KafkaContext, code: int, message: str):
    return build(
        response_class(req.api_key, req.version),
        {
            "topics": _topics(
                [(t.topic, p.partition, code, UNDEFINED, UNDEFINED) for t in req.body.topics for p in t.partitions]
            )
        },
    )


ADAPTERS = by_key(
    Adapter(
        ApiKey.OFFSET_FOR_LEADER_EPOCH,
        2,
        4,
        offset_for_leader_epoch_to_internal,
        offset_for_leader_epoch_to_kafka,
        "offset_for_leader_epoch",
        offset_for_leader_epoch_error,
    ),
)
