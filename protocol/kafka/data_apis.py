"""The data path's Kafka APIs: Produce, Fetch, ListOffsets, Metadata and InitProducerId.

Each translates a kio request into the handler's request and the handler's response back; the
record bytes are never parsed here (Produce hands the batch bytes on as they came, Fetch turns
the handler's file regions into RecordsRegions that the listener sends with sendfile).
"""

from __future__ import annotations

import uuid
from typing import Any

from triolog.protocol import messages as m
from triolog.protocol.errors import ErrorCode

from .apis import Adapter, ApiKey, Direct, KafkaContext, by_key
from .replica_apis import ReplicaFetchPartition, ReplicaFetchRequest
from .requests import KafkaRequest
from .schema import RecordsRegion, build, millis, response_class

__all__ = ["ADAPTERS"]

#: Kafka's "no leader epoch known": clients then skip the leader-epoch checks (KIP-320) that a
#: single broker without replicas has no use for.
NO_EPOCH = -1
_ZERO_UUID = uuid.UUID(int=0)


def _body(req: KafkaRequest, values: dict[str, Any]):
    return build(response_class(req.api_key, req.version), values)


# -- Produce ------------------------------------------------------------------------------------


def produce_to_internal(req: KafkaRequest, ctx: KafkaContext):
    body = req.body
    acks = body.acks
    seen: set[tuple[str, int]] = set()
    duplicate = False
    topics = []
    for topic in body.topic_data:
        partitions = []
        for part in topic.partition_data:
            key = (topic.name, part.index)
            duplicate = duplicate or key in seen
            seen.add(key)
            records = part.records
            partitions.append(m.ProducePartition(partition=part.index, records=b"" if records is None else records))
        topics.append(m.ProduceTopic(name=topic.name, partitions=tuple(partitions)))
    if acks not in (-1, 0, 1):
        return Direct(
            produce_error_body(
                req, ctx, ErrorCode.INVALID_REQUIRED_ACKS, f"acks={acks} is not one of -1 (all), 0 and 1"
            )
        )
    if duplicate:
        return Direct(
            produce_error_body(req, ctx, ErrorCode.INVALID_REQUEST, "the request names a partition more than once")
        )
    return m.ProduceRequest(
        id=req.correlation_id,
        client_id=req.client_id,
        acks=acks,
        timeout_ms=max(0, millis(body.timeout, 0)),
        topics=tuple(topics),
        transactional_id=body.transactional_id,
    )


def produce_error_body(req: KafkaRequest, ctx: KafkaContext, code: int, message: str):
    return _body(
        req,
        {
            "responses": [
                {
                    "name": topic.name,
                    "partition_responses": [
                        {"index": part.index, "error_code": code, "base_offset": -1, "error_message": message}
                        for part in topic.partition_data
                    ],
                }
                for topic in req.body.topic_data
            ]
        },
    )


def produce_to_kafka(response: m.ProduceResponse, req: KafkaRequest, ctx: KafkaContext):
    return _body(
        req,
        {
            "throttle_time": response.throttle_ms,
            "responses": [
                {
                    "name": topic.name,
                    "partition_responses": [
                        {
                            "index": p.partition,
                            "error_code": p.error_code,
                            "base_offset": p.base_offset,
                            "log_append_time": None if p.log_append_time < 0 else p.log_append_time,
                            "log_start_offset": p.log_start_offset,
                            "error_message": p.error_message,
                        }
                        for p in topic.partitions
                    ],
                }
                for topic in response.topics
            ],
        },
    )


# -- Fetch --------------------------------------------------------------------------------------


def fetch_to_internal(req: KafkaRequest, ctx: KafkaContext):
    body = req.body
    session_id = getattr(body, "session_id", 0)
    session_epoch = getattr(body, "session_epoch", -1)
    if session_id != 0 or session_epoch > 0:
        # No fetch session was ever created here (every answer says session_id 0, which clients
        # take as "fetch without a session"): an incremental fetch names one that does not exist.
        return Direct(
            _body(req, {"error_code": ErrorCode.FETCH_SESSION_ID_NOT_FOUND, "session_id": 0, "responses": []})
        )
    replica_state = getattr(body, "replica_state", None)  # v15+
    replica_id = replica_state.replica_id if replica_state is not None else getattr(body, "replica_id", -1)
    if replica_id >= 0:
        return _replica_fetch_to_internal(req, replica_id)
    topics = []
    for topic in body.topics:
        topics.append(
            m.FetchTopic(
                name=topic.topic,
                partitions=tuple(
                    m.FetchPartition(
                        partition=p.partition,
                        fetch_offset=p.fetch_offset,
                        partition_max_bytes=max(0, p.partition_max_bytes),
                    )
                    for p in topic.partitions
                ),
            )
        )
    max_bytes = getattr(body, "max_bytes", 2**31 - 1)
    return m.FetchRequest(
        id=req.correlation_id,
        client_id=req.client_id,
        max_wait_ms=max(0, millis(body.max_wait, 0)),
        min_bytes=max(0, body.min_bytes),
        max_bytes=max(0, max_bytes),
        isolation_level=1 if getattr(body, "isolation_level", 0) else 0,
        topics=tuple(topics),
    )


def _replica_fetch_to_internal(req: KafkaRequest, replica_id: int) -> ReplicaFetchRequest:
    """A follower's fetch: its epochs and log start ride along (fields of v5, v9 and v12)."""
    body = req.body
    topics = tuple(
        m.FetchTopic(
            name=topic.topic,
            partitions=tuple(
                ReplicaFetchPartition(
                    partition=p.partition,
                    fetch_offset=p.fetch_offset,
                    partition_max_bytes=max(0, p.partition_max_bytes),
                    current_leader_epoch=getattr(p, "current_leader_epoch", NO_EPOCH),
                    last_fetched_epoch=getattr(p, "last_fetched_epoch", NO_EPOCH),
                    log_start_offset=getattr(p, "log_start_offset", -1),
                )
                for p in topic.partitions
            ),
        )
        for topic in body.topics
    )
    return ReplicaFetchRequest(
        id=req.correlation_id,
        client_id=req.client_id,
        replica_id=replica_id,
        max_wait_ms=max(0, millis(body.max_wait, 0)),
        min_bytes=max(0, body.min_bytes),
        max_bytes=max(0, getattr(body, "max_bytes", 2**31 - 1)),
        topics=topics,
    )


def _diverging(p) -> dict[str, int]:
    return {
        "epoch": getattr(p, "diverging_epoch", NO_EPOCH),
        "end_offset": getattr(p, "diverging_end_offset", -1),
    }


def _records(records):
    if type(records) is m.ExternalBin:
        return RecordsRegion(records.length, records.ref)
    return records


def fetch_error_body(req: KafkaRequest, ctx: KafkaContext, code: int, message: str):
    values: dict[str, Any] = {
        "error_code": code,
        "session_id": 0,
        "responses": [
            {
                "topic": topic.topic,
                "partitions": [
                    {"partition_index": p.partition, "error_code": code, "high_watermark": -1, "records": b""}
                    for p in topic.partitions
                ],
            }
            for topic in req.body.topics
        ],
    }
    return _body(req, values)


def fetch_to_kafka(response: m.FetchResponse, req: KafkaRequest, ctx: KafkaContext):
    return _body(
        req,
        {
            "error_code": 0,
            "session_id": 0,
            "throttle_time": response.throttle_ms,
            "responses": [
                {
                    "topic": topic.name,
                    "partitions": [
                        {
                            "partition_index": p.partition,
                            "error_code": p.error_code,
                            "high_watermark": p.high_watermark,
                            "last_stable_offset": p.last_stable_offset,
                            "log_start_offset": p.log_start_offset,
                            "aborted_transactions": None
                            if p.aborted_transactions is None
                            else [
                                {"producer_id": t.producer_id, "first_offset": t.first_offset}
                                for t in p.aborted_transactions
                            ],
                            "preferred_read_replica": -1,
                            "diverging_epoch": _diverging(p),
                            "records": _records(p.records),
                        }
                        for p in topic.partitions
                    ],
                }
                for topic in response.topics
            ],
        },
    )


# -- ListOffsets --------------------------------------------------------------------------------


def list_offsets_to_internal(req: KafkaRequest, ctx: KafkaContext):
    body = req.body
    topics = []
    for topic in body.topics:
        partitions = []
        for p in topic.partitions:
            timestamp = p.timestamp
            if timestamp < -3:
                # Kafka reads a negative time it has no meaning for as a time before every
                # record: the first record's offset.
                timestamp = 0
            partitions.append(m.ListOffsetsPartition(partition=p.partition_index, timestamp=timestamp))
        topics.append(m.ListOffsetsTopic(name=topic.name, partitions=tuple(partitions)))
    return m.ListOffsetsRequest(
        id=req.correlation_id,
        client_id=req.client_id,
        isolation_level=1 if getattr(body, "isolation_level", 0) else 0,
        topics=tuple(topics),
    )


def list_offsets_error_body(req: KafkaRequest, ctx: KafkaContext, code: int, message: str):
    return _body(
        req,
        {
            "topics": [
                {
                    "name": topic.name,
                    "partitions": [
                        {"partition_index": p.partition_index, "error_code": code} for p in topic.partitions
                    ],
                }
                for topic in req.body.topics
            ]
        },
    )


def list_offsets_to_kafka(response: m.ListOffsetsResponse, req: KafkaRequest, ctx: KafkaContext):
    return _body(
        req,
        {
            "topics": [
                {
                    "name": topic.name,
                    "partitions": [
                        {
                            "partition_index": p.partition,
                            "error_code": p.error_code,
                            "timestamp": p.timestamp,
                            "offset": p.offset,
                            "leader_epoch": NO_EPOCH,
                        }
                        for p in topic.partitions
                    ],
                }
                for topic in response.topics
            ]
        },
    )


# -- Metadata -----------------------------------------------------------------------------------


def metadata_to_internal(req: KafkaRequest, ctx: KafkaContext):
    body = req.body
    topics = body.topics
    if topics is not None and req.version == 0 and not topics:
        topics = None  # v0: an empty list asks for every topic
    names = None
    if topics is not None:
        # Deduplicated in one pass, first naming first (a list's ``in`` made 20,000 names take
        # seconds on the event loop).
        names = tuple(dict.fromkeys(topic.name for topic in topics))
        if None in names:  # by topic id (v10+): triolog's topics have none
            return Direct(metadata_unknown_ids(req, ctx))
    allow = getattr(body, "allow_auto_topic_creation", True)
    return m.MetadataRequest(
        id=req.correlation_id, client_id=req.client_id, topics=names, allow_auto_topic_creation=allow
    )


def _brokers(ctx: KafkaContext) -> list[dict]:
    return [{"node_id": ctx.node_id, "host": ctx.host, "port": ctx.port, "rack": None}]


def metadata_unknown_ids(req: KafkaRequest, ctx: KafkaContext):
    return _body(
        req,
        {
            "brokers": _brokers(ctx),
            "cluster_id": ctx.cluster_id,
            "controller_id": ctx.node_id,
            "topics": [
                {
                    "error_code": ErrorCode.UNKNOWN_TOPIC_ID,
                    "name": t.name or "",
                    "topic_id": t.topic_id,
                    "partitions": [],
                }
                for t in req.body.topics
            ],
        },
    )


def metadata_error_body(req: KafkaRequest, ctx: KafkaContext, code: int, message: str):
    topics = req.body.topics or ()
    return _body(
        req,
        {
            "brokers": _brokers(ctx),
            "cluster_id": ctx.cluster_id,
            "controller_id": ctx.node_id,
            "topics": [
                {"error_code": code, "name": t.name or "", "topic_id": t.topic_id or _ZERO_UUID, "partitions": []}
                for t in topics
            ],
        },
    )


def _response_brokers(response: m.MetadataResponse, ctx: KafkaContext) -> list[dict]:
    """The handler's brokers, each at its Kafka listener (a cluster's answer carries them so); this
    broker at the address ctx gives (kafka.advertised.listeners), which a standalone answer lacks."""
    brokers = [
        {"node_id": b.node_id, "host": b.host, "port": b.port, "rack": b.rack}
        for b in response.brokers
        if b.node_id != ctx.node_id
    ]
    own = next((b for b in response.brokers if b.node_id == ctx.node_id), None)
    if own is not None:
        brokers.append({"node_id": ctx.node_id, "host": ctx.host, "port": ctx.port, "rack": own.rack})
    return sorted(brokers, key=lambda b: b["node_id"])


def metadata_to_kafka(response: m.MetadataResponse, req: KafkaRequest, ctx: KafkaContext):
    return _body(
        req,
        {
            "brokers": _response_brokers(response, ctx),
            "cluster_id": ctx.cluster_id,
            "controller_id": response.controller_id,
            "cluster_authorized_operations": -2147483648,
            "topics": [
                {
                    "error_code": t.error_code,
                    "name": t.name,
                    "topic_id": _ZERO_UUID,
                    "is_internal": t.internal,
                    "topic_authorized_operations": -2147483648,
                    "partitions": [
                        {
                            "error_code": p.error_code,
                            "partition_index": p.partition,
                            "leader_id": p.leader,
                            "leader_epoch": p.leader_epoch,
                            "replica_nodes": list(p.replicas),
                            "isr_nodes": list(p.isr),
                            "offline_replicas": list(p.offline_replicas),
                        }
                        for p in t.partitions
                    ],
                }
                for t in response.topics
            ],
        },
    )


# -- InitProducerId -----------------------------------------------------------------------------


def init_producer_id_to_internal(req: KafkaRequest, ctx: KafkaContext):
    body = req.body
    return m.InitProducerIdRequest(
        id=req.correlation_id,
        client_id=req.client_id,
        transactional_id=body.transactional_id,
        transaction_timeout_ms=millis(body.transaction_timeout, -1),
        producer_id=getattr(body, "producer_id", -1),
        producer_epoch=getattr(body, "producer_epoch", -1),
    )


def init_producer_id_to_kafka(response: m.InitProducerIdResponse, req: KafkaRequest, ctx: KafkaContext):
    return _body(
        req,
        {
            "error_code": response.error_code,
            "producer_id": response.producer_id,
            "producer_epoch": response.producer_epoch,
        },
    )


ADAPTERS = by_key(
    Adapter(ApiKey.PRODUCE, 3, 11, produce_to_internal, produce_to_kafka, "produce", produce_error_body),
    Adapter(ApiKey.FETCH, 4, 12, fetch_to_internal, fetch_to_kafka, "fetch", fetch_error_body),
    Adapter(
        ApiKey.LIST_OFFSETS,
        1,
        7,
        list_offsets_to_internal,
        list_offsets_to_kafka,
        "list_offsets",
        list_offsets_error_body,
    ),
    Adapter(ApiKey.METADATA, 0, 12, metadata_to_internal, metadata_to_kafka, "metadata", metadata_error_body),
    Adapter(ApiKey.INIT_PRODUCER_ID, 0, 5, init_producer_id_to_internal, init_producer_id_to_kafka, "init_producer_id"),
)
