"""The transaction APIs' Kafka translations, every served version: what a client (or, for
WriteTxnMarkers, a broker) encodes becomes the coordinator's request, and its answer reads back
with the same values. Pure: no broker."""

from __future__ import annotations

import pytest

from triolog.protocol import messages as m
from triolog.protocol.errors import ErrorCode
from triolog.protocol.kafka import txn_apis
from triolog.protocol.kafka.apis import ApiKey, KafkaContext
from triolog.protocol.kafka.requests import decode_request, encode_response
from triolog.protocol.kafka.schema import build, request_class
from triolog.protocol.kafka.served import SERVED_VERSIONS

from .kafka_wire import decode_response, encode_request

CTX = KafkaContext(node_id=4, host="kafka.example", port=19092, cluster_id="c")


def _versions(api_key: int) -> list[int]:
    low, high = SERVED_VERSIONS[api_key]
    return list(range(low, high + 1))


def _request(api_key: int, version: int, values: dict):
    frame = encode_request(api_key, version, 9, build(request_class(api_key, version), values), client_id="cid")[4:]
    return decode_request(frame, SERVED_VERSIONS)


def _decoded(request, body):
    frame = b"".join(encode_response(request.api_key, request.version, request.correlation_id, body))
    correlation_id, decoded = decode_response(request.api_key, request.version, frame)
    assert correlation_id == 9
    return decoded


def test_the_client_versions_of_kafka_transaction_version_1_are_served():
    assert SERVED_VERSIONS[ApiKey.ADD_PARTITIONS_TO_TXN] == (0, 5)  # v4+: brokers' batched form (KIP-890)
    assert SERVED_VERSIONS[ApiKey.END_TXN] == (0, 4)  # v5: transaction version 2's new epoch
    assert SERVED_VERSIONS[ApiKey.WRITE_TXN_MARKERS] == (1, 2)


@pytest.mark.parametrize("version", [v for v in _versions(ApiKey.ADD_PARTITIONS_TO_TXN) if v <= 3])
def test_add_partitions_to_txn_every_version(version):
    request = _request(ApiKey.ADD_PARTITIONS_TO_TXN, version, {
        "v3_and_below_transactional_id": "tx", "v3_and_below_producer_id": 7, "v3_and_below_producer_epoch": 2,
        "v3_and_below_topics": [{"name": "t", "partitions": [0, 3]}]})
    internal = txn_apis.add_partitions_to_internal(request, CTX)
    assert internal == m.AddPartitionsToTxnRequest(id=9, client_id="cid", transactional_id="tx", producer_id=7,
                                                   producer_epoch=2, topics=(m.TxnTopic(name="t", partitions=(0, 3)),))
    answer = m.AddPartitionsToTxnResponse(id=9, topics=(m.TxnTopicResult(name="t", partitions=(
        m.TxnPartitionResult(partition=0), m.TxnPartitionResult(partition=3, error_code=ErrorCode.OPERATION_NOT_ATTEMPTED))),))
    decoded = _decoded(request, txn_apis.add_partitions_to_kafka(answer, request, CTX))
    (topic,) = decoded.results_by_topic_v3_and_below
    assert [(p.partition_index, int(p.partition_error_code)) for p in topic.results_by_partition] == [(0, 0), (3, 55)]
    refused = m.AddPartitionsToTxnResponse(id=9, error_code=ErrorCode.CONCURRENT_TRANSACTIONS)
    decoded = _decoded(request, txn_apis.add_partitions_to_kafka(refused, request, CTX))
    (topic,) = decoded.results_by_topic_v3_and_below
    assert [int(p.partition_error_code) for p in topic.results_by_partition] == [51, 51]


@pytest.mark.parametrize("version", [4, 5])
def test_add_partitions_to_txn_brokers_batch_of_transactions(version):
    """v4 and v5: a partition leader's (or a broker's) batch of transactions, each its own
    internal request (VerifyOnly for KIP-890's verification), answered per transaction."""
    request = _request(ApiKey.ADD_PARTITIONS_TO_TXN, version, {"transactions": [
        {"transactional_id": "a", "producer_id": 7, "producer_epoch": 2, "verify_only": True,
         "topics": [{"name": "t", "partitions": [0, 3]}]},
        {"transactional_id": "b", "producer_id": 8, "producer_epoch": 0, "verify_only": False,
         "topics": [{"name": "u", "partitions": [1]}]}]})
    internal = txn_apis.add_partitions_to_internal(request, CTX)
    assert internal == [
        m.AddPartitionsToTxnRequest(id=9, client_id="cid", transactional_id="a", producer_id=7, producer_epoch=2,
                                    topics=(m.TxnTopic(name="t", partitions=(0, 3)),), verify_only=True),
        m.AddPartitionsToTxnRequest(id=9, client_id="cid", transactional_id="b", producer_id=8, producer_epoch=0,
                                    topics=(m.TxnTopic(name="u", partitions=(1,)),))]
    answers = [
        m.AddPartitionsToTxnResponse(id=9, topics=(m.TxnTopicResult(name="t", partitions=(
            m.TxnPartitionResult(partition=0), m.TxnPartitionResult(partition=3, error_code=ErrorCode.INVALID_TXN_STATE))),)),
        m.AddPartitionsToTxnResponse(id=9, error_code=ErrorCode.CONCURRENT_TRANSACTIONS)]
    decoded = _decoded(request, txn_apis.add_partitions_to_kafka(answers, request, CTX))
    assert int(decoded.error_code) == 0
    results = {r.transactional_id: {(t.name, p.partition_index): int(p.partition_error_code)
                                    for t in r.topic_results for p in t.results_by_partition}
               for r in decoded.results_by_transaction}
    assert results == {"a": {("t", 0): 0, ("t", 3): 48}, "b": {("u", 1): 51}}
    refused = _decoded(request, txn_apis.add_partitions_error(request, CTX, ErrorCode.CLUSTER_AUTHORIZATION_FAILED, ""))
    assert int(refused.error_code) == 31 and refused.results_by_transaction == ()


@pytest.mark.parametrize("version", _versions(ApiKey.ADD_OFFSETS_TO_TXN))
def test_add_offsets_to_txn_every_version(version):
    request = _request(ApiKey.ADD_OFFSETS_TO_TXN, version, {
        "transactional_id": "tx", "producer_id": 7, "producer_epoch": 2, "group_id": "g"})
    internal = txn_apis.add_offsets_to_internal(request, CTX)
    assert (internal.transactional_id, internal.producer_id, internal.producer_epoch, internal.group_id) == ("tx", 7, 2, "g")
    answer = m.AddOffsetsToTxnResponse(id=9, error_code=ErrorCode.PRODUCER_FENCED)
    assert int(_decoded(request, txn_apis.add_offsets_to_kafka(answer, request, CTX)).error_code) == 90


@pytest.mark.parametrize("version", _versions(ApiKey.END_TXN))
def test_end_txn_every_version(version):
    request = _request(ApiKey.END_TXN, version, {
        "transactional_id": "tx", "producer_id": 7, "producer_epoch": 2, "committed": True})
    internal = txn_apis.end_txn_to_internal(request, CTX)
    assert (internal.transactional_id, internal.producer_id, internal.producer_epoch, internal.committed) == ("tx", 7, 2, True)
    answer = m.EndTxnResponse(id=9, producer_id=7, producer_epoch=2)
    assert int(_decoded(request, txn_apis.end_txn_to_kafka(answer, request, CTX)).error_code) == 0


@pytest.mark.parametrize("version", _versions(ApiKey.TXN_OFFSET_COMMIT))
def test_txn_offset_commit_every_version(version):
    request = _request(ApiKey.TXN_OFFSET_COMMIT, version, {
        "transactional_id": "tx", "group_id": "g", "producer_id": 7, "producer_epoch": 2, "generation_id": 5,
        "member_id": "m-1", "group_instance_id": None,
        "topics": [{"name": "t", "partitions": [{"partition_index": 1, "committed_offset": 42,
                                                 "committed_leader_epoch": 3, "committed_metadata": "x"}]}]})
    internal = txn_apis.txn_offset_commit_to_internal(request, CTX)
    assert (internal.group_id, internal.producer_id, internal.producer_epoch) == ("g", 7, 2)
    assert (internal.generation_id, internal.member_id) == ((5, "m-1") if version >= 3 else (-1, ""))
    (partition,) = internal.topics[0].partitions
    assert (partition.partition, partition.committed_offset, partition.committed_metadata) == (1, 42, "x")
    assert partition.committed_leader_epoch == (3 if version >= 2 else -1)
    answer = m.TxnOffsetCommitResponse(id=9, topics=(m.OffsetCommitTopicResult(name="t", partitions=(
        m.OffsetCommitPartitionResult(partition=1, error_code=ErrorCode.ILLEGAL_GENERATION),)),))
    decoded = _decoded(request, txn_apis.txn_offset_commit_to_kafka(answer, request, CTX))
    assert [(p.partition_index, int(p.error_code)) for p in decoded.topics[0].partitions] == [(1, 22)]


@pytest.mark.parametrize("version", _versions(ApiKey.WRITE_TXN_MARKERS))
def test_write_txn_markers_every_version(version):
    marker = {"producer_id": 7, "producer_epoch": 2, "transaction_result": False, "coordinator_epoch": 5,
              "topics": [{"name": "t", "partition_indexes": [0, 1]}]}
    if version >= 2:
        marker["transaction_version"] = 2  # (v2 on: a KIP-890 marker)
    request = _request(ApiKey.WRITE_TXN_MARKERS, version, {"markers": [marker]})
    internal = txn_apis.write_txn_markers_to_internal(request, CTX)
    assert internal.markers == (m.TxnMarker(producer_id=7, producer_epoch=2, committed=False, coordinator_epoch=5,
                                            topics=(m.TxnTopic(name="t", partitions=(0, 1)),),
                                            transaction_version=2 if version >= 2 else 0),)
    answer = m.WriteTxnMarkersResponse(id=9, markers=(m.TxnMarkerResult(producer_id=7, topics=(m.TxnTopicResult(
        name="t", partitions=(m.TxnPartitionResult(partition=0),
                              m.TxnPartitionResult(partition=1, error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER))),)),))
    decoded = _decoded(request, txn_apis.write_txn_markers_to_kafka(answer, request, CTX))
    (marker,) = decoded.markers
    assert marker.producer_id == 7
    assert [(p.partition_index, int(p.error_code)) for p in marker.topics[0].partitions] == [(0, 0), (1, 6)]


def test_describe_transactions():
    request = _request(ApiKey.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": ["tx", "ty"]})
    assert txn_apis.describe_transactions_to_internal(request, CTX).transactional_ids == ("tx", "ty")
    answer = m.DescribeTransactionsResponse(id=9, transactions=(
        m.TransactionDescription(transactional_id="tx", state="Ongoing", transaction_timeout_ms=60000,
                                 transaction_start_time_ms=1_700_000_000_000, producer_id=7, producer_epoch=2,
                                 topics=(m.TxnTopic(name="t", partitions=(0, 1)),)),
        # (an id without a transaction carries start time -1, which kio's reader refuses to read)
        m.TransactionDescription(transactional_id="ty", error_code=ErrorCode.TRANSACTIONAL_ID_NOT_FOUND,
                                 transaction_start_time_ms=0)))
    decoded = _decoded(request, txn_apis.describe_transactions_to_kafka(answer, request, CTX))
    first, second = decoded.transaction_states
    assert (first.transactional_id, first.transaction_state, first.producer_id, first.producer_epoch) == ("tx", "Ongoing", 7, 2)
    assert first.transaction_timeout.total_seconds() == 60
    assert round(first.transaction_start_time.timestamp() * 1000) == 1_700_000_000_000
    assert [(t.topic, list(t.partitions)) for t in first.topics] == [("t", [0, 1])]
    assert (second.transactional_id, int(second.error_code)) == ("ty", 105)


@pytest.mark.parametrize("version", _versions(ApiKey.LIST_TRANSACTIONS))
def test_list_transactions_every_version(version):
    values = {"state_filters": ["Ongoing"], "producer_id_filters": [7]}
    if version >= 1:
        values["duration_filter"] = 60000
    request = _request(ApiKey.LIST_TRANSACTIONS, version, values)
    internal = txn_apis.list_transactions_to_internal(request, CTX)
    assert (internal.state_filters, internal.producer_id_filters) == (("Ongoing",), (7,))
    assert internal.duration_filter_ms == (60000 if version >= 1 else -1)
    answer = m.ListTransactionsResponse(id=9, unknown_state_filters=("Bogus",), transactions=(
        m.TransactionListing(transactional_id="tx", producer_id=7, state="Ongoing"),))
    decoded = _decoded(request, txn_apis.list_transactions_to_kafka(answer, request, CTX))
    assert list(decoded.unknown_state_filters) == ["Bogus"]
    assert [(t.transactional_id, t.producer_id, t.transaction_state) for t in decoded.transaction_states] == [
        ("tx", 7, "Ongoing")]


def test_describe_producers():
    request = _request(ApiKey.DESCRIBE_PRODUCERS, 0, {"topics": [{"name": "t", "partition_indexes": [0, 1]}]})
    assert txn_apis.describe_producers_to_internal(request, CTX).topics == (m.TxnTopic(name="t", partitions=(0, 1)),)
    answer = m.DescribeProducersResponse(id=9, topics=(m.ProducersTopicResult(name="t", partitions=(
        m.ProducersPartitionResult(partition=0, active_producers=(m.ProducerState(
            producer_id=7, producer_epoch=2, last_sequence=41, last_timestamp=5, coordinator_epoch=3,
            current_txn_start_offset=100),)),
        m.ProducersPartitionResult(partition=1, error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER, error_message="moved"))),))
    decoded = _decoded(request, txn_apis.describe_producers_to_kafka(answer, request, CTX))
    first, second = decoded.topics[0].partitions
    (state,) = first.active_producers
    assert (state.producer_id, state.producer_epoch, state.last_sequence, state.coordinator_epoch,
            state.current_txn_start_offset) == (7, 2, 41, 3, 100)
    assert (second.partition_index, int(second.error_code), second.error_message) == (1, 6, "moved")
