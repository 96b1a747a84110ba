"""The admin APIs' Kafka translations, every served version, through kio's own writer and reader.
Pure: no broker."""

from __future__ import annotations

import pytest

from triolog.protocol import messages as m
from triolog.protocol.kafka import admin_apis
from triolog.protocol.kafka.apis import Direct, KafkaContext
from triolog.protocol.kafka.requests import decode_request, encode_response
from triolog.protocol.kafka.schema import build, request_class
from triolog.protocol.kafka.served import SERVED_VERSIONS

from .kafka_wire import decode_response, encode_request

CTX = KafkaContext(node_id=0, host="kafka.example", port=19092, cluster_id="cid")


def _versions(api_key: int) -> list[int]:
    low, high = SERVED_VERSIONS[api_key]
    return list(range(low, high + 1))


def _request(api_key: int, version: int, values: dict):
    frame = encode_request(api_key, version, 3, build(request_class(api_key, version), values))[4:]
    return decode_request(frame, SERVED_VERSIONS)


def _decoded(request, body):
    frame = b"".join(encode_response(request.api_key, request.version, request.correlation_id, body))
    return decode_response(request.api_key, request.version, frame)[1]


@pytest.mark.parametrize("version", _versions(19))
def test_create_topics_every_version(version):
    request = _request(19, version, {"topics": [{"name": "t", "num_partitions": 3, "replication_factor": 1,
                                                 "assignments": [], "configs": [{"name": "retention.ms", "value": "5"}]}],
                                     "timeout": 1000, "validate_only": True})
    internal = admin_apis.create_topics_to_internal(request, CTX)
    assert internal.topics == (m.NewTopic(name="t", num_partitions=3, replication_factor=1,
                                          configs={"retention.ms": "5"}),)
    assert internal.validate_only
    answer = m.CreateTopicsResponse(id=3, topics=(m.CreateTopicResult(name="t", num_partitions=3,
                                                                      configs={"retention.ms": "5", "segment.ms": "9"}),))
    (topic,) = _decoded(request, admin_apis.create_topics_to_kafka(answer, request, CTX)).topics
    assert (topic.name, int(topic.error_code)) == ("t", 0)
    if version >= 5:
        assert topic.num_partitions == 3 and {(c.name, c.config_source) for c in topic.configs} == {
            ("retention.ms", 1), ("segment.ms", 5)}


def test_create_topics_carries_a_replica_assignment_by_partition_index():
    request = _request(19, 7, {"topics": [{"name": "t", "num_partitions": -1, "replication_factor": -1,
                                           "assignments": [{"partition_index": 1, "broker_ids": [2, 7]},
                                                           {"partition_index": 0, "broker_ids": [7, 2]}],
                                           "configs": []}],
                               "timeout": 1000})
    (topic,) = admin_apis.create_topics_to_internal(request, CTX).topics
    assert topic.replica_assignment == ((7, 2), (2, 7))  # (the broker checks the brokers named)


def test_create_topics_with_partitions_missing_from_its_assignment_is_refused():
    request = _request(19, 7, {"topics": [{"name": "t", "num_partitions": -1, "replication_factor": -1,
                                           "assignments": [{"partition_index": 1, "broker_ids": [7]}], "configs": []}],
                               "timeout": 1000})
    answer = admin_apis.create_topics_to_internal(request, CTX)
    assert type(answer) is Direct
    assert [int(t.error_code) for t in _decoded(request, answer.body).topics] == [39]


@pytest.mark.parametrize("version", _versions(20))
def test_delete_topics_every_version(version):
    values = ({"topics": [{"name": "a", "topic_id": None}, {"name": "b", "topic_id": None}], "timeout": 1000}
              if version >= 6 else {"topic_names": ["a", "b"], "timeout": 1000})
    request = _request(20, version, values)
    assert admin_apis.delete_topics_to_internal(request, CTX).topics == ("a", "b")
    answer = m.DeleteTopicsResponse(id=3, topics=(m.TopicResult(name="a"), m.TopicResult(name="b", error_code=3,
                                                                                           error_message="no")))
    decoded = _decoded(request, admin_apis.delete_topics_to_kafka(answer, request, CTX))
    assert [(r.name, int(r.error_code)) for r in decoded.responses] == [("a", 0), ("b", 3)]


@pytest.mark.parametrize("version", _versions(21))
def test_delete_records_every_version(version):
    request = _request(21, version, {"topics": [{"name": "t", "partitions": [{"partition_index": 0, "offset": 6}]}],
                                     "timeout": 1000})
    internal = admin_apis.delete_records_to_internal(request, CTX)
    assert internal.topics == (m.DeleteRecordsTopic(name="t", partitions=(m.DeleteRecordsPartition(partition=0, offset=6),)),)
    answer = m.DeleteRecordsResponse(id=3, topics=(m.DeleteRecordsTopicResult(name="t", partitions=(
        m.DeleteRecordsPartitionResult(partition=0, low_watermark=6),)),))
    (p,) = _decoded(request, admin_apis.delete_records_to_kafka(answer, request, CTX)).topics[0].partitions
    assert (p.partition_index, p.low_watermark, int(p.error_code)) == (0, 6, 0)


@pytest.mark.parametrize("version", _versions(32))
def test_describe_configs_of_topics_and_the_broker_every_version(version):
    request = _request(32, version, {"resources": [
        {"resource_type": 2, "resource_name": "t", "configuration_keys": None},
        {"resource_type": 4, "resource_name": "0", "configuration_keys": ["log.segment.bytes"]},
        {"resource_type": 8, "resource_name": "0", "configuration_keys": None}], "include_synonyms": True})
    internal = admin_apis.describe_configs_to_internal(request, CTX)
    assert (internal.topics, internal.brokers) == (("t",), ("0",))
    answer = m.DescribeConfigsResponse(id=3, topics=(m.DescribeConfigsResult(name="t", configs={
        "retention.ms": m.ConfigEntry(value="5", source="topic"),
        "segment.bytes": m.ConfigEntry(value="9", source="broker")}),), brokers=(m.DescribeConfigsResult(
            name="0", configs={"log.segment.bytes": m.ConfigEntry(value="1073741824", source="broker", read_only=True),
                               "num.partitions": m.ConfigEntry(value="1", source="default", read_only=True)}),))
    topic, broker, logger = _decoded(request, admin_apis.describe_configs_to_kafka(answer, request, CTX)).results
    assert [(c.name, c.value) for c in topic.configs] == [("retention.ms", "5"), ("segment.bytes", "9")]
    assert [(c.name, c.value, c.read_only) for c in broker.configs] == [("log.segment.bytes", "1073741824", True)]
    assert int(logger.error_code) == 42  # a broker logger resource is not served
    if version >= 1:
        assert [c.config_source for c in topic.configs] == [1, 4] and broker.configs[0].config_source == 4


@pytest.mark.parametrize("version", _versions(44))
def test_incremental_alter_configs_set_delete_append_subtract(version):
    request = _request(44, version, {"resources": [{"resource_type": 2, "resource_name": "t", "configs": [
        {"name": "segment.bytes", "config_operation": 0, "value": "1048576"},
        {"name": "retention.ms", "config_operation": 1, "value": None},
        {"name": "cleanup.policy", "config_operation": 2, "value": "compact"},
        {"name": "x.list", "config_operation": 3, "value": "a"}]}], "validate_only": True})
    internal = admin_apis.alter_configs_to_internal(request, CTX)
    assert internal.validate_only
    assert internal.topics == (m.AlterConfigsTopic(name="t", configs={"segment.bytes": "1048576"},
                                                   delete=("retention.ms",), append={"cleanup.policy": "compact"},
                                                   subtract={"x.list": "a"}),)
    decoded = _decoded(request, admin_apis.alter_configs_to_kafka(
        m.AlterConfigsResponse(id=3, topics=(m.TopicResult(name="t"),)), request, CTX))
    assert [(r.resource_name, int(r.error_code)) for r in decoded.responses] == [("t", 0)]


@pytest.mark.parametrize("version", _versions(33))
def test_alter_configs_replaces_every_override(version):
    request = _request(33, version, {"resources": [{"resource_type": 2, "resource_name": "t", "configs": [
        {"name": "max.message.bytes", "value": "2097152"}]},
        {"resource_type": 4, "resource_name": "0", "configs": [{"name": "num.partitions", "value": "3"}]}],
        "validate_only": False})
    internal = admin_apis.alter_configs_to_internal(request, CTX)
    assert internal.topics == (m.AlterConfigsTopic(name="t", configs={"max.message.bytes": "2097152"}, replace=True),)
    decoded = _decoded(request, admin_apis.alter_configs_to_kafka(
        m.AlterConfigsResponse(id=3, topics=(m.TopicResult(name="t"),)), request, CTX))
    assert [(r.resource_type, int(r.error_code)) for r in decoded.responses] == [(2, 0), (4, 42)]  # broker: static


@pytest.mark.parametrize("version", _versions(37))
def test_create_partitions_every_version(version):
    request = _request(37, version, {"topics": [{"name": "t", "count": 6, "assignments": None}], "timeout": 5000,
                                     "validate_only": True})
    internal = admin_apis.create_partitions_to_internal(request, CTX)
    assert internal.topics == (m.CreatePartitionsTopic(name="t", count=6),) and internal.validate_only
    answer = m.CreatePartitionsResponse(id=3, topics=(m.TopicResult(name="t", error_code=37,
                                                                    error_message="Topic already has 6 partitions."),))
    (result,) = _decoded(request, admin_apis.create_partitions_to_kafka(answer, request, CTX)).results
    assert (result.name, int(result.error_code), result.error_message) == ("t", 37, "Topic already has 6 partitions.")


@pytest.mark.parametrize("version", _versions(60))
def test_describe_cluster_every_version(version):
    request = _request(60, version, {"include_cluster_authorized_operations": False})
    answer = admin_apis.describe_cluster_to_internal(request, CTX)
    decoded = _decoded(request, answer.body)
    assert (decoded.cluster_id, decoded.controller_id) == ("cid", 0)
    assert [(b.broker_id, b.host, b.port) for b in decoded.brokers] == [(0, "kafka.example", 19092)]
