"""Kafka's AdminClient (librdkafka) on the Kafka listener: topics, configs, records, the cluster,
each visible through triolog's own protocol."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaException
from confluent_kafka import Producer as KafkaProducer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import (
    AdminClient as KafkaAdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
)

from triolog.client.admin import AdminClient
from triolog.protocol.kafka.schema import build, request_class

from .kafka_wire import connect, decode_response, encode_request, read_frame


@pytest.fixture
def admin(bootstrap) -> KafkaAdminClient:
    return KafkaAdminClient({"bootstrap.servers": bootstrap})


def test_create_topics_with_configs_then_delete(admin, msgpack_bootstrap, topic):
    futures = admin.create_topics([NewTopic(topic, 3, 1, config={"retention.ms": "3600000",
                                                                  "cleanup.policy": "compact"})])
    futures[topic].result(30)
    with AdminClient(msgpack_bootstrap) as ours:
        described = ours.describe_topics([topic])[topic]
        configs = ours.describe_configs([topic])[topic]
    assert len(described.partitions) == 3
    assert (configs["retention.ms"].value, configs["cleanup.policy"].value) == ("3600000", "compact")
    with pytest.raises(KafkaException) as again:
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    assert again.value.args[0].name() == "TOPIC_ALREADY_EXISTS"
    admin.delete_topics([topic])[topic].result(30)
    with AdminClient(msgpack_bootstrap) as ours:
        assert topic not in ours.list_topics()


def test_create_topics_validate_only_and_invalid_names(admin, msgpack_bootstrap, topic):
    admin.create_topics([NewTopic(topic, 2, 1)], validate_only=True)[topic].result(30)
    with AdminClient(msgpack_bootstrap) as ours:
        assert topic not in ours.list_topics()
    with pytest.raises(KafkaException) as bad:
        admin.create_topics([NewTopic("../escape", 1, 1)])["../escape"].result(30)
    assert bad.value.args[0].code() == 17  # INVALID_TOPIC_EXCEPTION (librdkafka names it TOPIC_EXCEPTION)


def test_describe_and_alter_topic_configs(admin, topic):
    admin.create_topics([NewTopic(topic, 1, 1, config={"retention.ms": "60000"})])[topic].result(30)
    resource = ConfigResource("TOPIC", topic)
    configs = admin.describe_configs([resource])[resource].result(30)
    assert configs["retention.ms"].value == "60000" and configs["retention.ms"].source == 1  # dynamic topic
    assert configs["segment.bytes"].source == 4  # log.segment.bytes of the broker's server.properties
    assert configs["retention.bytes"].source == 5  # Kafka's default
    # Incremental: set one, append to a list, delete another.
    change = ConfigResource("TOPIC", topic, incremental_configs=[
        ConfigEntry("segment.bytes", "1048576", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND),
        ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE)])
    admin.incremental_alter_configs([change])[change].result(30)
    configs = admin.describe_configs([resource])[resource].result(30)
    assert configs["segment.bytes"].value == "1048576"
    assert configs["cleanup.policy"].value == "delete,compact"
    assert configs["retention.ms"].source == 4  # back to the broker's (log.retention.hours)
    # AlterConfigs replaces the whole set: segment.bytes and cleanup.policy go back to defaults.
    replace = ConfigResource("TOPIC", topic, set_config={"max.message.bytes": "2097152"})
    with pytest.warns(DeprecationWarning):  # deprecated in Kafka too, and still served
        admin.alter_configs([replace])[replace].result(30)
    configs = admin.describe_configs([resource])[resource].result(30)
    assert configs["max.message.bytes"].value == "2097152" and configs["max.message.bytes"].source == 1
    assert configs["segment.bytes"].source == 4 and configs["cleanup.policy"].value == "delete"


def test_describe_the_broker_and_the_cluster(admin, kafka_broker):
    resource = ConfigResource("BROKER", "0")
    configs = admin.describe_configs([resource])[resource].result(30)
    assert configs["kafka.listeners"].value.startswith("PLAINTEXT://127.0.0.1:")
    assert configs["log.segment.bytes"].value == "1073741824"
    cluster = admin.describe_cluster().result(30)
    assert cluster.controller.id == 0 and cluster.cluster_id
    assert [(n.host, n.port) for n in cluster.nodes] == [("127.0.0.1", kafka_broker.kafka_port)]


def test_delete_records_moves_the_log_start(admin, bootstrap, msgpack_bootstrap, topic):
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    producer = KafkaProducer({"bootstrap.servers": bootstrap})
    for i in range(10):
        producer.produce(topic, value=b"%d" % i, partition=0)
    assert producer.flush(30) == 0
    result = admin.delete_records([KafkaTopicPartition(topic, 0, 6)])
    (deleted,) = result.values()
    assert deleted.result(30).low_watermark == 6
    with AdminClient(msgpack_bootstrap) as ours:
        assert ours.list_offsets({(topic, 0): -2})[(topic, 0)].offset == 6


def test_kafka_python_and_aiokafka_admin_clients(bootstrap, msgpack_bootstrap, topic):
    import asyncio

    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.admin import NewTopic as AioNewTopic
    from kafka.admin import ConfigResource as KpConfigResource
    from kafka.admin import ConfigResourceType, KafkaAdminClient
    from kafka.admin import NewTopic as KpNewTopic

    kp = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        kp.create_topics([KpNewTopic(f"{topic}-kp", 2, 1, topic_configs={"retention.ms": "1000000"})])
        described = kp.describe_configs([KpConfigResource(ConfigResourceType.TOPIC, f"{topic}-kp")])
        assert "1000000" in repr(described), described
        kp.delete_topics([f"{topic}-kp"])
    finally:
        kp.close()

    async def aio() -> None:
        client = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await client.start()
        try:
            await client.create_topics([AioNewTopic(f"{topic}-aio", 3, 1)])
            assert f"{topic}-aio" in await client.list_topics()
            await client.delete_topics([f"{topic}-aio"])
        finally:
            await client.close()

    asyncio.run(aio())
    with AdminClient(msgpack_bootstrap) as ours:
        left = set(ours.list_topics())
    assert not {f"{topic}-kp", f"{topic}-aio"} & left


def test_create_partitions_grows_a_topic(admin, bootstrap, msgpack_bootstrap, topic):
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    admin.create_partitions([NewPartitions(topic, 5)])[topic].result(30)
    with AdminClient(msgpack_bootstrap) as ours:
        assert len(ours.describe_topics([topic])[topic].partitions) == 5
    producer = KafkaProducer({"bootstrap.servers": bootstrap})
    producer.produce(topic, value=b"in the new partition", partition=4)
    assert producer.flush(30) == 0
    with pytest.raises(KafkaException) as fewer:
        admin.create_partitions([NewPartitions(topic, 3)])[topic].result(30)
    assert fewer.value.args[0].code() == 37  # INVALID_PARTITIONS


def test_a_replica_assignment_on_a_single_broker_names_it_alone(admin, bootstrap, topic, kafka_broker):
    node = kafka_broker.server.config.node_id
    assert create_with_assignment(bootstrap, topic, [[node], [node]]) == (0, None)
    assert sorted(admin.list_topics(topic, timeout=10).topics[topic].partitions) == [0, 1]
    code, message = create_with_assignment(bootstrap, f"{topic}-x", [[node + 1]])
    assert code == 39 and "Unknown broker(s) in replica assignment" in message  # INVALID_REPLICA_ASSIGNMENT
    assert f"{topic}-x" not in admin.list_topics(timeout=10).topics


def create_with_assignment(bootstrap: str, name: str, assignment: list[list[int]]) -> tuple[int, str | None]:
    """CreateTopics with a replica assignment, by hand (confluent-kafka 2.16's NewTopic refuses
    one: it always sets a partition count)."""
    body = build(
        request_class(19, 5),
        {
            "topics": [
                {
                    "name": name,
                    "num_partitions": -1,
                    "replication_factor": -1,
                    "assignments": [{"partition_index": i, "broker_ids": r} for i, r in enumerate(assignment)],
                    "configs": [],
                }
            ],
            "timeout": 30000,
        },
    )
    sock = connect(bootstrap)
    try:
        sock.sendall(encode_request(19, 5, 1, body))
        _, response = decode_response(19, 5, read_frame(sock))
    finally:
        sock.close()
    (result,) = response.topics
    return int(result.error_code), result.error_message
