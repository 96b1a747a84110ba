"""Deleting a topic of a cluster: the controller removes it from ZooKeeper, every replica drops its
logs, and a topic made again under the same name starts empty, on every broker, even one that was
away while the old topic went (its partition directories carry the old topic's id)."""

from __future__ import annotations

import time

import trio
from confluent_kafka import Consumer as KafkaConsumer, Producer as KafkaProducer, TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient as KafkaAdminClient, NewTopic

from triolog.broker.cluster import zk_data
from triolog.broker.cluster.zk_client import KafkaZkClient
from triolog.broker.cluster.zk_data import TopicAssignment
from triolog.broker.cluster.zookeeper_store import ZooKeeperStore
from triolog.broker.storage.checkpoints import random_kafka_uuid, read_partition_topic_id

from .helpers import kafka_bootstrap, wait_until


def _produce(brokers, topic: str, values: list[str]) -> None:
    producer = KafkaProducer({"bootstrap.servers": kafka_bootstrap(brokers), "acks": "all", "linger.ms": 0})
    for value in values:
        producer.produce(topic, value.encode(), partition=0)
    assert producer.flush(30) == 0


def _consume_all(brokers, topic: str) -> list[str]:
    """Partition 0 from its start to its high watermark."""
    consumer = KafkaConsumer(
        {"bootstrap.servers": kafka_bootstrap(brokers), "group.id": "unused", "enable.auto.commit": False}
    )
    low, high = consumer.get_watermark_offsets(KafkaTopicPartition(topic, 0), timeout=10)
    consumer.assign([KafkaTopicPartition(topic, 0, 0)])
    seen: list[str] = []
    deadline = time.monotonic() + 20
    while len(seen) < high - low and time.monotonic() < deadline:
        message = consumer.poll(0.3)
        if message is not None and message.error() is None:
            seen.append(message.value().decode())
    consumer.close()
    return seen


def _znodes(zk_connect: str, topic: str) -> list[str]:
    """Which of a topic's znodes exist."""

    async def main() -> list[str]:
        store = ZooKeeperStore(zk_connect, session_timeout_ms=4000)
        await store.start()
        try:
            paths = [
                zk_data.topic_path(topic),
                zk_data.topic_config_path(topic),
                zk_data.delete_topic_path(topic),
                zk_data.partitions_path(topic),
            ]
            return [path for path in paths if await store.get(path) is not None]
        finally:
            await store.close()

    return trio.run(main)


def _live_dirs(broker, topic: str) -> list[str]:
    """The broker's partition directories of ``topic`` that are not on their way out."""
    return sorted(p.name for p in broker.data_dir.iterdir() if p.is_dir() and p.name.startswith(f"{topic}-"))


def test_a_deleted_topic_leaves_every_replica_and_comes_back_empty(start_brokers, zk_connect):
    brokers = start_brokers((1, 2, 3))
    admin = KafkaAdminClient({"bootstrap.servers": kafka_bootstrap(brokers)})
    admin.create_topics([NewTopic("doomed", 1, 3)])["doomed"].result(30)
    _produce(brokers, "doomed", [f"old-{i}" for i in range(20)])
    assert all(_live_dirs(b, "doomed") == ["doomed-0"] for b in brokers.values())
    old_id = read_partition_topic_id(brokers[1].data_dir / "doomed-0")
    assert old_id is not None

    admin.delete_topics(["doomed"])["doomed"].result(30)
    assert wait_until(lambda: "doomed" not in admin.list_topics(timeout=10).topics)  # (on every broker)
    assert _znodes(zk_connect, "doomed") == []
    assert wait_until(lambda: all(_live_dirs(b, "doomed") == [] for b in brokers.values())), [
        _live_dirs(b, "doomed") for b in brokers.values()
    ]
    # Deleting it again, or a topic that never was: UNKNOWN_TOPIC_OR_PARTITION.
    again = admin.delete_topics(["doomed"])["doomed"]
    assert again.exception(30).args[0].name() == "UNKNOWN_TOPIC_OR_PART"

    admin.create_topics([NewTopic("doomed", 1, 3)])["doomed"].result(30)
    _produce(brokers, "doomed", ["new-0", "new-1"])
    assert _consume_all(brokers, "doomed") == ["new-0", "new-1"]
    new_ids = {read_partition_topic_id(b.data_dir / "doomed-0") for b in brokers.values()}
    assert len(new_ids) == 1 and old_id not in new_ids


def test_a_broker_away_during_deletion_drops_the_old_topic_when_it_returns(start_brokers, zk_connect):
    brokers = start_brokers((1, 2, 3))
    admin = KafkaAdminClient({"bootstrap.servers": kafka_bootstrap(brokers)})
    admin.create_topics([NewTopic("phoenix", 1, 3)])["phoenix"].result(30)
    _produce(brokers, "phoenix", [f"old-{i}" for i in range(30)])
    away = brokers[3]
    assert wait_until(
        lambda: (
            (away.data_dir / "phoenix-0").is_dir()
            and away.sample("triolog_log_end_offset", topic="phoenix", partition="0") == 30
        )
    )
    away.stop()

    admin.delete_topics(["phoenix"])["phoenix"].result(30)
    # Made again under the name while broker 3 is away, with broker 3 among its replicas (placed
    # by hand: CreateTopics places replicas on live brokers only).
    new_id = random_kafka_uuid()

    async def create() -> None:
        store = ZooKeeperStore(zk_connect, session_timeout_ms=4000)
        await store.start()
        try:
            await KafkaZkClient(store).create_topic("phoenix", TopicAssignment({0: (1, 2, 3)}, topic_id=new_id), {})
        finally:
            await store.close()

    trio.run(create)
    assert wait_until(lambda: "phoenix" in admin.list_topics(timeout=10).topics)
    _produce({i: b for i, b in brokers.items() if i != 3}, "phoenix", ["new-0", "new-1", "new-2"])

    away.start()
    # Its old log (30 records of the deleted topic) is gone; it now holds the new topic's 3.
    assert wait_until(lambda: read_partition_topic_id(away.data_dir / "phoenix-0") == new_id)
    assert wait_until(
        lambda: (
            sorted(p.name for p in (away.data_dir / "phoenix-0").glob("*.log"))
            and (away.data_dir / "phoenix-0" / "00000000000000000000.log").read_bytes()
            == (brokers[1].data_dir / "phoenix-0" / "00000000000000000000.log").read_bytes()
        )
    )
    assert _consume_all(brokers, "phoenix") == ["new-0", "new-1", "new-2"]
