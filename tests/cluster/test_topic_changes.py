"""Changing a cluster's topic from any broker: CreatePartitions places the new partitions as the
first ones were and the controller elects their leaders; AlterConfigs rewrites the topic's
config in ZooKeeper and every replica applies it at once."""

from __future__ import annotations

from confluent_kafka import KafkaException, Producer as KafkaProducer
from confluent_kafka.admin import (
    AdminClient as KafkaAdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
)

from tests.kafka.test_admin_confluent import create_with_assignment

from .helpers import kafka_bootstrap, wait_until


def test_partitions_added_on_a_cluster_get_replicas_and_leaders(start_brokers):
    brokers = start_brokers((1, 2, 3))
    admin = KafkaAdminClient({"bootstrap.servers": kafka_bootstrap(brokers)})
    admin.create_topics([NewTopic("growing", 2, 3)])["growing"].result(30)
    admin.create_partitions([NewPartitions("growing", 5)])["growing"].result(30)

    # (every broker's metadata follows ZooKeeper: the one asked may see the new partitions a moment later)
    assert wait_until(lambda: len(admin.list_topics("growing", timeout=10).topics["growing"].partitions) == 5)
    partitions = admin.list_topics("growing", timeout=10).topics["growing"].partitions
    assert sorted(partitions) == [0, 1, 2, 3, 4]
    assert all(len(p.replicas) == 3 and p.leader in p.replicas for p in partitions.values())
    # The round robin goes on: leaders of consecutive partitions differ.
    assert len({p.replicas[0] for p in partitions.values()}) == 3
    producer = KafkaProducer({"bootstrap.servers": kafka_bootstrap(brokers), "acks": "all"})
    producer.produce("growing", b"to the new partition", partition=4)
    assert producer.flush(30) == 0
    assert wait_until(lambda: all((b.data_dir / "growing-4").is_dir() for b in brokers.values()))

    fewer = admin.create_partitions([NewPartitions("growing", 3)])["growing"]
    try:
        fewer.result(30)
        raise AssertionError("shrinking a topic was accepted")
    except KafkaException as exc:
        assert exc.args[0].name() == "INVALID_PARTITIONS"
        assert "higher than the requested 3" in exc.args[0].str()


def _retention_ms(broker, topic: str) -> int | None:
    log = broker.server.log_manager.get_log(topic, 0)
    return None if log is None else log.config.retention_ms


def test_a_topic_config_altered_on_one_broker_applies_on_every_replica(start_brokers):
    brokers = start_brokers((1, 2, 3))
    admin = KafkaAdminClient({"bootstrap.servers": kafka_bootstrap(brokers)})
    admin.create_topics([NewTopic("tuned", 1, 3, config={"retention.ms": "3600000"})])["tuned"].result(30)
    assert wait_until(lambda: all(_retention_ms(b, "tuned") == 3600000 for b in brokers.values()))

    resource = ConfigResource(ConfigResource.Type.TOPIC, "tuned")
    resource.add_incremental_config(ConfigEntry("retention.ms", "60000", incremental_operation=AlterConfigOpType.SET))
    admin.incremental_alter_configs([resource])[resource].result(30)
    assert wait_until(lambda: all(_retention_ms(b, "tuned") == 60000 for b in brokers.values()))
    for broker in brokers.values():  # any broker describes the cluster's config
        one = KafkaAdminClient({"bootstrap.servers": f"127.0.0.1:{broker.kafka_port}"})
        described = one.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, "tuned")])
        (configs,) = [f.result(30) for f in described.values()]
        assert configs["retention.ms"].value == "60000"

    bad = ConfigResource(ConfigResource.Type.TOPIC, "tuned")
    bad.add_incremental_config(ConfigEntry("retention.ms", "soon", incremental_operation=AlterConfigOpType.SET))
    try:
        admin.incremental_alter_configs([bad])[bad].result(30)
        raise AssertionError("a bad value was accepted")
    except KafkaException as exc:
        assert exc.args[0].name() == "INVALID_CONFIG"
    assert all(_retention_ms(b, "tuned") == 60000 for b in brokers.values())  # nothing changed


def test_a_topic_created_with_a_replica_assignment_keeps_it(start_brokers):
    brokers = start_brokers((1, 2, 3))
    bootstrap = f"127.0.0.1:{brokers[1].kafka_port}"
    assert create_with_assignment(bootstrap, "placed", [[3, 1], [2, 3], [1, 2]]) == (0, None)
    admin = KafkaAdminClient({"bootstrap.servers": f"127.0.0.1:{brokers[1].kafka_port}"})  # (the broker that answered)
    partitions = admin.list_topics("placed", timeout=10).topics["placed"].partitions
    assert {p: tuple(v.replicas) for p, v in partitions.items()} == {0: (3, 1), 1: (2, 3), 2: (1, 2)}
    assert {p: v.leader for p, v in partitions.items()} == {0: 3, 1: 2, 2: 1}  # the preferred replicas lead

    for bad, said in (
        ([[1, 9]], "Unknown broker(s) in replica assignment: 9."),
        ([[1, 1]], "Duplicate replica assignment found"),
        ([[1, 2], [3]], "All partitions should have the same number of replicas"),
    ):
        code, message = create_with_assignment(bootstrap, "misplaced", bad)
        assert code == 39 and said in message, (bad, code, message)  # INVALID_REPLICA_ASSIGNMENT
    assert "misplaced" not in admin.list_topics(timeout=10).topics
