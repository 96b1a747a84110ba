"""The transaction APIs on the Kafka listener, answered by the same coordinators as the msgpack
protocol's: AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, TxnOffsetCommit, WriteTxnMarkers,
DescribeTransactions, ListTransactions and DescribeProducers.

The versions served are the clients' (AddPartitionsToTxn up to v3; v4 and v5 batch several
transactions for brokers, whose partition leaders verify with them) of Kafka's transaction
version 1: EndTxn up to v4, whose
answer carries no new epoch. A Kafka client therefore keeps one epoch across its transactions,
as against Kafka without KIP-890's second part; triolog's own client gets an epoch per
transaction (docs/transactions.md). WriteTxnMarkers is v1 and v2 (Kafka 4 removed v0; v2 carries
the marker's transaction version).
"""

from __future__ import annotations

from typing import Any

from triolog.protocol import messages as m

from .apis import Adapter, ApiKey, KafkaContext, by_key
from .requests import KafkaRequest
from .schema import build, millis, response_class

__all__ = ["ADAPTERS"]


def _body(req: KafkaRequest, values: dict[str, Any]):
    return build(response_class(req.api_key, req.version), values)


def _envelope(req: KafkaRequest) -> dict[str, Any]:
    return {"id": req.correlation_id, "client_id": req.client_id}


def _top_level_error(req: KafkaRequest, ctx: KafkaContext, code: int, message: str):
    return _body(req, {"error_code": code})


# -- AddPartitionsToTxn -------------------------------------------------------------------------


def add_partitions_to_internal(req: KafkaRequest, ctx: KafkaContext):
    """v3 and below: a client's one transaction; v4 and above: a broker's batch of them (each
    answered as its own internal request), VerifyOnly for KIP-890's verification."""
    body = req.body
    if req.version >= 4:
        return [
            m.AddPartitionsToTxnRequest(
                **_envelope(req),
                transactional_id=txn.transactional_id,
                producer_id=txn.producer_id,
                producer_epoch=txn.producer_epoch,
                topics=tuple(m.TxnTopic(name=t.name, partitions=tuple(t.partitions)) for t in txn.topics),
                verify_only=txn.verify_only,
            )
            for txn in body.transactions
        ]
    return m.AddPartitionsToTxnRequest(
        **_envelope(req),
        transactional_id=body.v3_and_below_transactional_id,
        producer_id=body.v3_and_below_producer_id,
        producer_epoch=body.v3_and_below_producer_epoch,
        topics=tuple(m.TxnTopic(name=t.name, partitions=tuple(t.partitions)) for t in body.v3_and_below_topics),
    )


def _partition_results(topics, code_key: str) -> list[dict[str, Any]]:
    return [
        {
            "name": t.name,
            "results_by_partition": [{"partition_index": p.partition, code_key: p.error_code} for p in t.partitions],
        }
        for t in topics
    ]


def add_partitions_to_kafka(response, req: KafkaRequest, ctx: KafkaContext):
    if req.version >= 4:
        return _body(
            req,
            {
                "error_code": 0,
                "results_by_transaction": [
                    {
                        "transactional_id": txn.transactional_id,
                        "topic_results": _partition_results(
                            answer.topics
                            if not answer.error_code
                            else [
                                m.TxnTopicResult(
                                    name=t.name,
                                    partitions=tuple(
                                        m.TxnPartitionResult(partition=p, error_code=answer.error_code)
                                        for p in t.partitions
                                    ),
                                )
                                for t in txn.topics
                            ],
                            "partition_error_code",
                        ),
                    }
                    for txn, answer in zip(req.body.transactions, response, strict=True)
                ],
            },
        )
    if response.error_code:
        return add_partitions_error(req, ctx, response.error_code, response.error_message or "")
    return _body(req, {"results_by_topic_v3_and_below": _partition_results(response.topics, "partition_error_code")})


def add_partitions_error(req: KafkaRequest, ctx: KafkaContext, code: int, message: str):
    """A whole-request refusal: Kafka gives it in every partition (v4 and above: at the top)."""
    if req.version >= 4:
        return _body(req, {"error_code": code, "results_by_transaction": []})
    return _body(
        req,
        {
            "results_by_topic_v3_and_below": [
                {
                    "name": t.name,
                    "results_by_partition": [
                        {"partition_index": p, "partition_error_code": code} for p in t.partitions
                    ],
                }
                for t in req.body.v3_and_below_topics
            ]
        },
    )


# -- AddOffsetsToTxn, EndTxn --------------------------------------------------------------------


def add_offsets_to_internal(req: KafkaRequest, ctx: KafkaContext):
    body = req.body
    return m.AddOffsetsToTxnRequest(
        **_envelope(req),
        transactional_id=body.transactional_id,
        producer_id=body.producer_id,
        producer_epoch=body.producer_epoch,
        group_id=body.group_id,
    )


def add_offsets_to_kafka(response: m.AddOffsetsToTxnResponse, req: KafkaRequest, ctx: KafkaContext):
    return _body(req, {"error_code": response.error_code})


def end_txn_to_internal(req: KafkaRequest, ctx: KafkaContext):
    body = req.body
    return m.EndTxnRequest(
        **_envelope(req),
        transactional_id=body.transactional_id,
        producer_id=body.producer_id,
        producer_epoch=body.producer_epoch,
        committed=body.committed,
    )


def end_txn_to_kafka(response: m.EndTxnResponse, req: KafkaRequest, ctx: KafkaContext):
    return _body(req, {"error_code": response.error_code})


# -- TxnOffsetCommit ----------------------------------------------------------------------------


def txn_offset_commit_to_internal(req: KafkaRequest, ctx: KafkaContext):
    body = req.body
    return m.TxnOffsetCommitRequest(
        **_envelope(req),
        transactional_id=body.transactional_id,
        group_id=body.group_id,
        producer_id=body.producer_id,
        producer_epoch=body.producer_epoch,
        generation_id=getattr(body, "generation_id", -1),
        member_id=getattr(body, "member_id", ""),
        group_instance_id=getattr(body, "group_instance_id", None),
        topics=tuple(
            m.OffsetCommitTopic(
                name=t.name,
                partitions=tuple(
                    m.OffsetCommitPartition(
                        partition=p.partition_index,
                        committed_offset=p.committed_offset,
                        committed_leader_epoch=getattr(p, "committed_leader_epoch", -1),
                        committed_metadata=p.committed_metadata,
                    )
                    for p in t.partitions
                ),
            )
            for t in body.topics
        ),
    )


def txn_offset_commit_to_kafka(response: m.TxnOffsetCommitResponse, req: KafkaRequest, ctx: KafkaContext):
    if response.error_code:
        return txn_offset_commit_error(req, ctx, response.error_code, response.error_message or "")
    return _body(
        req,
        {
            "topics": [
                {
                    "name": t.name,
                    "partitions": [{"partition_index": p.partition, "error_code": p.error_code} for p in t.partitions],
                }
                for t in response.topics
            ]
        },
    )


def txn_offset_commit_error(req: KafkaRequest, ctx: KafkaContext, code: int, message: str):
    return _body(
        req,
        {
            "topics": [
                {
                    "name": t.name,
                    "partitions": [{"partition_index": p.partition_index, "error_code": code} for p in t.partitions],
                }
                for t in req.body.topics
            ]
        },
    )


# -- WriteTxnMarkers ----------------------------------------------------------------------------


def write_txn_markers_to_internal(req: KafkaRequest, ctx: KafkaContext):
    return m.WriteTxnMarkersRequest(
        **_envelope(req),
        markers=tuple(
            m.TxnMarker(
                producer_id=marker.producer_id,
                producer_epoch=marker.producer_epoch,
                committed=marker.transaction_result,
                topics=tuple(m.TxnTopic(name=t.name, partitions=tuple(t.partition_indexes)) for t in marker.topics),
                coordinator_epoch=marker.coordinator_epoch,
                transaction_version=getattr(marker, "transaction_version", 0),
            )
            for marker in req.body.markers
        ),
    )


def write_txn_markers_to_kafka(response: m.WriteTxnMarkersResponse, req: KafkaRequest, ctx: KafkaContext):
    if response.error_code:
        return write_txn_markers_error(req, ctx, response.error_code, response.error_message or "")
    return _body(
        req,
        {
            "markers": [
                {
                    "producer_id": marker.producer_id,
                    "topics": [
                        {
                            "name": t.name,
                            "partitions": [
                                {"partition_index": p.partition, "error_code": p.error_code} for p in t.partitions
                            ],
                        }
                        for t in marker.topics
                    ],
                }
                for marker in response.markers
            ]
        },
    )


def write_txn_markers_error(req: KafkaRequest, ctx: KafkaContext, code: int, message: str):
    return _body(
        req,
        {
            "markers": [
                {
                    "producer_id": marker.producer_id,
                    "topics": [
                        {
                            "name": t.name,
                            "partitions": [{"partition_index": p, "error_code": code} for p in t.partition_indexes],
                        }
                        for t in marker.topics
                    ],
                }
                for marker in req.body.markers
            ]
        },
    )


# -- DescribeTransactions, ListTransactions, DescribeProducers ----------------------------------


def describe_transactions_to_internal(req: KafkaRequest, ctx: KafkaContext):
    return m.DescribeTransactionsRequest(**_envelope(req), transactional_ids=tuple(req.body.transactional_ids))


def _transaction_state(t: m.TransactionDescription) -> dict[str, Any]:
    return {
        "error_code": t.error_code,
        "transactional_id": t.transactional_id,
        "transaction_state": t.state,
        "transaction_timeout": t.transaction_timeout_ms,
        "transaction_start_time": t.transaction_start_time_ms,
        "producer_id": t.producer_id,
        "producer_epoch": t.producer_epoch,
        "topics": [{"topic": topic.name, "partitions": list(topic.partitions)} for topic in t.topics],
    }


def describe_transactions_to_kafka(response: m.DescribeTransactionsResponse, req: KafkaRequest, ctx: KafkaContext):
    if response.error_code:
        return describe_transactions_error(req, ctx, response.error_code, response.error_message or "")
    return _body(req, {"transaction_states": [_transaction_state(t) for t in response.transactions]})


def describe_transactions_error(req: KafkaRequest, ctx: KafkaContext, code: int, message: str):
    return _body(
        req,
        {
            "transaction_states": [
                _transaction_state(m.TransactionDescription(transactional_id=i, error_code=code))
                for i in req.body.transactional_ids
            ]
        },
    )


def list_transactions_to_internal(req: KafkaRequest, ctx: KafkaContext):
    body = req.body
    return m.ListTransactionsRequest(
        **_envelope(req),
        state_filters=tuple(body.state_filters),
        producer_id_filters=tuple(body.producer_id_filters),
        duration_filter_ms=millis(getattr(body, "duration_filter", -1), -1),
    )


def list_transactions_to_kafka(response: m.ListTransactionsResponse, req: KafkaRequest, ctx: KafkaContext):
    return _body(
        req,
        {
            "error_code": response.error_code,
            "unknown_state_filters": list(response.unknown_state_filters),
            "transaction_states": [
                {"transactional_id": t.transactional_id, "producer_id": t.producer_id, "transaction_state": t.state}
                for t in response.transactions
            ],
        },
    )


def describe_producers_to_internal(req: KafkaRequest, ctx: KafkaContext):
    return m.DescribeProducersRequest(
        **_envelope(req),
        topics=tuple(m.TxnTopic(name=t.name, partitions=tuple(t.partition_indexes)) for t in req.body.topics),
    )


def _partition(p: m.ProducersPartitionResult) -> dict[str, Any]:
    return {
        "partition_index": p.partition,
        "error_code": p.error_code,
        "error_message": p.error_message,
        "active_producers": [
            {
                "producer_id": s.producer_id,
                "producer_epoch": s.producer_epoch,
                "last_sequence": s.last_sequence,
                "last_timestamp": s.last_timestamp,
                "coordinator_epoch": s.coordinator_epoch,
                "current_txn_start_offset": s.current_txn_start_offset,
            }
            for s in p.active_producers
        ],
    }


def describe_producers_to_kafka(response: m.DescribeProducersResponse, req: KafkaRequest, ctx: KafkaContext):
    if response.error_code:
        return describe_producers_error(req, ctx, response.error_code, response.error_message or "")
    return _body(
        req,
        {"topics": [{"name": t.name, "partitions": [_partition(p) for p in t.partitions]} for t in response.topics]},
    )


def describe_producers_error(req: KafkaRequest, ctx: KafkaContext, code: int, message: str):
    return _body(
        req,
        {
            "topics": [
                {
                    "name": t.name,
                    "partitions": [
                        _partition(m.ProducersPartitionResult(partition=p, error_code=code, error_message=message))
                        for p in t.partition_indexes
                    ],
                }
                for t in req.body.topics
            ]
        },
    )


ADAPTERS = by_key(
    Adapter(
        ApiKey.ADD_PARTITIONS_TO_TXN,
        0,
        5,
        add_partitions_to_internal,
        add_partitions_to_kafka,
        "add_partitions_to_txn",
        add_partitions_error,
    ),
    Adapter(
        ApiKey.ADD_OFFSETS_TO_TXN,
        0,
        4,
        add_offsets_to_internal,
        add_offsets_to_kafka,
        "add_offsets_to_txn",
        _top_level_error,
    ),
    Adapter(ApiKey.END_TXN, 0, 4, end_txn_to_internal, end_txn_to_kafka, "end_txn", _top_level_error),
    Adapter(
        ApiKey.TXN_OFFSET_COMMIT,
        0,
        4,
        txn_offset_commit_to_internal,
        txn_offset_commit_to_kafka,
        "txn_offset_commit",
        txn_offset_commit_error,
    ),
    Adapter(
        ApiKey.WRITE_TXN_MARKERS,
        1,
        2,
        write_txn_markers_to_internal,
        write_txn_markers_to_kafka,
        "write_txn_markers",
        write_txn_markers_error,
    ),
    Adapter(
        ApiKey.DESCRIBE_TRANSACTIONS,
        0,
        0,
        describe_transactions_to_internal,
        describe_transactions_to_kafka,
        "describe_transactions",
        describe_transactions_error,
    ),
    Adapter(
        ApiKey.LIST_TRANSACTIONS,
        0,
        1,
        list_transactions_to_internal,
        list_transactions_to_kafka,
        "list_transactions",
        _top_level_error,
    ),
    Adapter(
        ApiKey.DESCRIBE_PRODUCERS,
        0,
        0,
        describe_producers_to_internal,
        describe_producers_to_kafka,
        "describe_producers",
        describe_producers_error,
    ),
)
