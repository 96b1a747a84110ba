"""The data path's translations, every served version: a Kafka request as a client would encode it
(kio's writer) becomes the broker's own request, and the broker's answer becomes a Kafka response
that Kafka's reader reads back with the same values. Pure: no broker."""

from __future__ import annotations

import time
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from triolog.protocol import messages as m
from triolog.protocol.kafka import data_apis
from triolog.protocol.kafka.apis import Direct, KafkaContext
from triolog.protocol.kafka.requests import decode_request, encode_response
from triolog.protocol.kafka.schema import RecordsRegion, build, request_class, response_class
from triolog.protocol.kafka.served import ADAPTERS, SERVED_VERSIONS

from .kafka_wire import decode_response, encode_request

CTX = KafkaContext(node_id=3, host="kafka.example", port=19092, cluster_id="c1uster-id")


def _versions(api_key: int) -> list[int]:
    low, high = SERVED_VERSIONS[api_key]
    return list(range(low, high + 1))


def _roundtrip_request(api_key: int, version: int, values: dict):
    body = build(request_class(api_key, version), values)
    frame = encode_request(api_key, version, 77, body, client_id="client-1")[4:]
    return decode_request(frame, SERVED_VERSIONS)


def _response(request, body):
    frame = b"".join(p if isinstance(p, bytes) else b"R" * len(p)
                     for p in encode_response(request.api_key, request.version, request.correlation_id, body))
    correlation_id, decoded = decode_response(request.api_key, request.version, frame)
    assert correlation_id == request.correlation_id
    return decoded


names = st.text(st.characters(whitelist_categories=("Ll", "Nd"), whitelist_characters="._-"), min_size=1, max_size=20)


@pytest.mark.parametrize("version", _versions(0))
@settings(max_examples=20, deadline=None)
@given(acks=st.sampled_from([-1, 0, 1]), timeout=st.integers(0, 2**31 - 1),
       partitions=st.lists(st.tuples(st.integers(0, 1000), st.binary(max_size=64)), min_size=1, max_size=4,
                           unique_by=lambda p: p[0]), topic=names)
def test_produce_request_and_response_every_version(version, acks, timeout, partitions, topic):
    request = _roundtrip_request(0, version, {"acks": acks, "timeout": timeout, "topic_data": [
        {"name": topic, "partition_data": [{"index": i, "records": r} for i, r in partitions]}]})
    internal = data_apis.produce_to_internal(request, CTX)
    assert internal == m.ProduceRequest(id=77, client_id="client-1", acks=acks, timeout_ms=timeout, topics=(
        m.ProduceTopic(name=topic, partitions=tuple(m.ProducePartition(partition=i, records=r) for i, r in partitions)),))
    answer = m.ProduceResponse(id=77, topics=(m.ProduceTopicResult(name=topic, partitions=tuple(
        m.ProducePartitionResult(partition=i, base_offset=100 + i, log_start_offset=5) if n % 2 == 0 else
        m.ProducePartitionResult(partition=i, error_code=59, error_message="unknown producer", log_start_offset=5)
        for n, (i, _) in enumerate(partitions))),))
    decoded = _response(request, data_apis.produce_to_kafka(answer, request, CTX))
    rows = [(p.index, int(p.error_code), p.base_offset) for t in decoded.responses for p in t.partition_responses]
    assert rows == [(i, 0, 100 + i) if n % 2 == 0 else (i, 59, -1) for n, (i, _) in enumerate(partitions)]
    if version >= 5:  # log_start_offset from v5
        assert {p.log_start_offset for t in decoded.responses for p in t.partition_responses} == {5}
    if version >= 8:  # error_message from v8
        assert [p.error_message for t in decoded.responses for p in t.partition_responses] == [
            None if n % 2 == 0 else "unknown producer" for n in range(len(partitions))]


@pytest.mark.parametrize("acks", [2, -2, 100])
def test_produce_with_acks_kafka_does_not_know_is_invalid_required_acks_in_every_partition(acks):
    request = _roundtrip_request(0, 9, {"acks": acks, "timeout": 1000, "topic_data": [
        {"name": "t", "partition_data": [{"index": 0, "records": b"x"}, {"index": 1, "records": b"y"}]}]})
    answer = data_apis.produce_to_internal(request, CTX)
    assert type(answer) is Direct
    decoded = _response(request, answer.body)
    assert [int(p.error_code) for p in decoded.responses[0].partition_responses] == [21, 21]


def test_produce_naming_a_partition_twice_is_refused_whole():
    request = _roundtrip_request(0, 9, {"acks": 1, "timeout": 1000, "topic_data": [
        {"name": "t", "partition_data": [{"index": 0, "records": b"x"}, {"index": 0, "records": b"y"}]}]})
    answer = data_apis.produce_to_internal(request, CTX)
    assert type(answer) is Direct
    assert [int(p.error_code) for p in _response(request, answer.body).responses[0].partition_responses] == [42, 42]


@pytest.mark.parametrize("version", _versions(1))
def test_fetch_request_and_response_every_version(version):
    request = _roundtrip_request(1, version, {
        "max_wait": 250, "min_bytes": 10, "max_bytes": 1 << 20, "isolation_level": 1, "session_id": 0,
        "session_epoch": -1, "topics": [{"topic": "t", "partitions": [
            {"partition": 2, "fetch_offset": 40, "partition_max_bytes": 4096, "current_leader_epoch": -1},
            {"partition": 5, "fetch_offset": 0, "partition_max_bytes": 1024}]}], "forgotten_topics_data": []})
    internal = data_apis.fetch_to_internal(request, CTX)
    assert internal == m.FetchRequest(
        id=77, client_id="client-1", max_wait_ms=250, min_bytes=10,
        max_bytes=(1 << 20) if version >= 3 else 2**31 - 1, isolation_level=1, topics=(
            m.FetchTopic(name="t", partitions=(m.FetchPartition(partition=2, fetch_offset=40, partition_max_bytes=4096),
                                               m.FetchPartition(partition=5, fetch_offset=0, partition_max_bytes=1024))),))
    answer = m.FetchResponse(id=77, topics=(m.FetchTopicResult(name="t", partitions=(
        m.FetchPartitionResult(partition=2, high_watermark=90, last_stable_offset=90, log_start_offset=3,
                               records=m.ExternalBin(11, "region")),
        m.FetchPartitionResult(partition=5, error_code=1, error_message="out of range", high_watermark=7,
                               log_start_offset=2))),))
    body = data_apis.fetch_to_kafka(answer, request, CTX)
    parts = encode_response(1, version, 77, body)
    regions = [p for p in parts if isinstance(p, RecordsRegion)]
    assert [(r.length, r.ref) for r in regions] == [(11, "region")]  # left out, for sendfile
    decoded = _response(request, body)
    first, second = decoded.responses[0].partitions
    assert (first.partition_index, int(first.error_code), first.high_watermark, first.records) == (2, 0, 90, b"R" * 11)
    assert (second.partition_index, int(second.error_code), second.high_watermark) == (5, 1, 7)
    if version >= 7:
        assert decoded.session_id == 0 and int(decoded.error_code) == 0


@pytest.mark.parametrize("version", [v for v in _versions(1) if v >= 7])
def test_an_incremental_fetch_names_a_session_that_does_not_exist(version):
    request = _roundtrip_request(1, version, {"max_wait": 0, "min_bytes": 1, "session_id": 12, "session_epoch": 3,
                                              "topics": [], "forgotten_topics_data": []})
    answer = data_apis.fetch_to_internal(request, CTX)
    assert type(answer) is Direct
    assert int(_response(request, answer.body).error_code) == 70  # FETCH_SESSION_ID_NOT_FOUND


@pytest.mark.parametrize("version", _versions(2))
def test_list_offsets_every_version(version):
    request = _roundtrip_request(2, version, {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": "t", "partitions": [{"partition_index": 0, "timestamp": -1}, {"partition_index": 1, "timestamp": -2},
                                     {"partition_index": 2, "timestamp": 1_700_000_000_000},
                                     {"partition_index": 3, "timestamp": -9}]}]})
    internal = data_apis.list_offsets_to_internal(request, CTX)
    assert [(p.partition, p.timestamp) for p in internal.topics[0].partitions] == [
        (0, -1), (1, -2), (2, 1_700_000_000_000), (3, 0)]  # an unknown negative time: before every record
    answer = m.ListOffsetsResponse(id=77, topics=(m.ListOffsetsTopicResult(name="t", partitions=(
        m.ListOffsetsPartitionResult(partition=0, timestamp=-1, offset=42),
        m.ListOffsetsPartitionResult(partition=1, error_code=3, error_message="no such partition"))),))
    decoded = _response(request, data_apis.list_offsets_to_kafka(answer, request, CTX))
    assert [(p.partition_index, int(p.error_code), p.offset) for p in decoded.topics[0].partitions] == [
        (0, 0, 42), (1, 3, -1)]


@pytest.mark.parametrize("version", _versions(3))
def test_metadata_every_version_advertises_the_kafka_listener(version):
    topics = None if version >= 1 else []
    request = _roundtrip_request(3, version, {"topics": topics, "allow_auto_topic_creation": False})
    internal = data_apis.metadata_to_internal(request, CTX)
    assert internal.topics is None  # every topic (v0: an empty list meant every topic)
    assert internal.allow_auto_topic_creation is (version < 4)  # the field exists from v4
    answer = m.MetadataResponse(id=77, controller_id=3, brokers=(m.BrokerMetadata(node_id=3, host="msgpack", port=9092),),
                                topics=(m.TopicMetadata(name="t", partitions=(
                                    m.PartitionMetadata(partition=0, leader=3, replicas=(3,), isr=(3,)),)),
                                        m.TopicMetadata(name="__consumer_offsets", internal=True),
                                        m.TopicMetadata(name="gone", error_code=3, error_message="no")))
    decoded = _response(request, data_apis.metadata_to_kafka(answer, request, CTX))
    assert [(b.node_id, b.host, b.port) for b in decoded.brokers] == [(3, "kafka.example", 19092)]
    assert [(t.name, int(t.error_code)) for t in decoded.topics] == [("t", 0), ("__consumer_offsets", 0), ("gone", 3)]
    (partition,) = decoded.topics[0].partitions
    assert (partition.partition_index, partition.leader_id, tuple(partition.replica_nodes)) == (0, 3, (3,))
    if version >= 1:
        assert decoded.controller_id == 3 and decoded.topics[1].is_internal
    if version >= 2:
        assert decoded.cluster_id == "c1uster-id"
    if version >= 10:
        assert decoded.topics[0].topic_id in (None, uuid.UUID(int=0))  # kio reads the zero id as None


def test_metadata_of_a_cluster_names_every_broker_and_each_partitions_replicas():
    request = _roundtrip_request(3, 12, {"topics": None, "allow_auto_topic_creation": False})
    brokers = (m.BrokerMetadata(node_id=1, host="k1", port=1001, rack="a"),
               m.BrokerMetadata(node_id=3, host="k3", port=1003, rack="b"))
    answer = m.MetadataResponse(id=1, controller_id=1, brokers=brokers, topics=(m.TopicMetadata(name="t", partitions=(
        m.PartitionMetadata(partition=0, leader=1, leader_epoch=4, replicas=(1, 3, 2), isr=(1, 3),
                            offline_replicas=(2,)),
        m.PartitionMetadata(partition=1, leader=-1, error_code=5, leader_epoch=2, replicas=(2,), isr=(2,),
                            offline_replicas=(2,)))),))
    decoded = _response(request, data_apis.metadata_to_kafka(answer, request, CTX))
    # Other brokers as the handler gave them; this one (3) at its advertised Kafka address.
    assert [(b.node_id, b.host, b.port, b.rack) for b in decoded.brokers] == [
        (1, "k1", 1001, "a"), (3, "kafka.example", 19092, "b")]
    assert decoded.controller_id == 1
    first, second = decoded.topics[0].partitions
    assert (first.leader_id, first.leader_epoch, tuple(first.replica_nodes), tuple(first.isr_nodes),
            tuple(first.offline_replicas)) == (1, 4, (1, 3, 2), (1, 3), (2,))
    assert (int(second.error_code), second.leader_id, second.leader_epoch) == (5, -1, 2)


def test_metadata_by_topic_id_is_unknown_topic_id():
    request = _roundtrip_request(3, 12, {"topics": [{"topic_id": uuid.uuid4(), "name": None}],
                                         "allow_auto_topic_creation": False})
    answer = data_apis.metadata_to_internal(request, CTX)
    assert type(answer) is Direct
    assert [int(t.error_code) for t in _response(request, answer.body).topics] == [100]


@pytest.mark.parametrize("version", _versions(22))
def test_init_producer_id_every_version(version):
    request = _roundtrip_request(22, version, {"transactional_id": None, "transaction_timeout": 60000,
                                               "producer_id": 1000, "producer_epoch": 4})
    internal = data_apis.init_producer_id_to_internal(request, CTX)
    assert (internal.transactional_id, internal.transaction_timeout_ms) == (None, 60000)
    assert (internal.producer_id, internal.producer_epoch) == ((1000, 4) if version >= 3 else (-1, -1))
    answer = m.InitProducerIdResponse(id=77, producer_id=1001, producer_epoch=0)
    decoded = _response(request, data_apis.init_producer_id_to_kafka(answer, request, CTX))
    assert (int(decoded.error_code), decoded.producer_id, decoded.producer_epoch) == (0, 1001, 0)


@pytest.mark.parametrize("version", _versions(18))
def test_api_versions_every_version_lists_the_table(version):
    values = {"client_software_name": "librdkafka", "client_software_version": "2.16.0"}
    request = _roundtrip_request(18, version, values)
    answer = ADAPTERS[18].to_internal(request, CTX)
    decoded = _response(request, answer.body)
    assert int(decoded.error_code) == 0
    assert {k.api_key: (k.min_version, k.max_version) for k in decoded.api_keys} == SERVED_VERSIONS


def test_api_versions_v3_with_a_bad_software_name_is_invalid_request():
    request = _roundtrip_request(18, 3, {"client_software_name": "-bad name", "client_software_version": "1"})
    assert int(_response(request, ADAPTERS[18].to_internal(request, CTX).body).error_code) == 42


def test_every_served_version_has_kio_classes_both_ways():
    for key, (low, high) in SERVED_VERSIONS.items():
        for version in range(low, high + 1):
            assert request_class(key, version) and response_class(key, version)


def test_metadata_of_many_names_is_deduplicated_in_linear_time():
    # 20,000 distinct names and each once more: a list's ``in`` per name took seconds of the
    # event loop (quadratic); first naming first, each name once.
    names = [f"t{i}" for i in range(20_000)]
    request = _roundtrip_request(3, 4, {"topics": [{"name": n} for n in names + names[::-1]],
                                        "allow_auto_topic_creation": False})
    started = time.perf_counter()
    internal = data_apis.metadata_to_internal(request, CTX)
    assert time.perf_counter() - started < 0.5
    assert internal.topics == tuple(names)
