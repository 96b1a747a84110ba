"""kill -9 of a partition's leader, as a process (three broker subprocesses on one ZooKeeper
ensemble): the controller elects an in-sync follower once the dead broker's session expires;
Kafka's idempotent acks=all producer follows the new leader and loses no acknowledged record;
the killed broker, restarted on its ports, rejoins as a follower, drops whatever it alone had,
and ends with the new leader's records, byte for byte."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer as KafkaConsumer, Producer as KafkaProducer, TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient as KafkaAdminClient, NewTopic

from tests.e2e.broker_process import BrokerProcess

from .helpers import broker_processes, wait_until

SESSION_MS = 3000


@pytest.fixture
def brokers(tmp_path, zk_connect):
    with broker_processes(tmp_path, zk_connect, SESSION_MS) as started:
        yield started


def _segments(broker: BrokerProcess, partition_dir: str) -> dict[str, bytes]:
    directory = broker.data_dir / partition_dir
    return {p.name: p.read_bytes() for p in sorted(directory.glob("*.log"))}


def test_kill_9_of_the_leader_loses_no_acknowledged_record(brokers):
    bootstrap = ",".join(f"127.0.0.1:{b.kafka_port}" for b in brokers.values())
    admin = KafkaAdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("ledger", 1, 3, config={"min.insync.replicas": "2"})])["ledger"].result(30)
    leader_id = admin.list_topics(timeout=10).topics["ledger"].partitions[0].leader

    acked: list[int] = []
    failed: list[tuple[int, str]] = []

    def delivered(err, msg):
        (acked.append(int(msg.value())) if err is None else failed.append((int(msg.value()), err.name())))

    producer = KafkaProducer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 2,
            "message.timeout.ms": 60000,
            "retry.backoff.ms": 100,
        }
    )
    killed = brokers[leader_id]
    for i in range(300):
        producer.produce("ledger", value=str(i).encode(), partition=0, on_delivery=delivered)
        producer.poll(0)
        if i == 150:
            killed.kill()  # kill -9: no shutdown, its session lives on until it expires
        time.sleep(0.003)
    assert producer.flush(90) == 0
    assert failed == [] and sorted(acked) == list(range(300))

    survivors = [b for i, b in brokers.items() if i != leader_id]
    survivor_bootstrap = ",".join(f"127.0.0.1:{b.kafka_port}" for b in survivors)
    consumer = KafkaConsumer(
        {"bootstrap.servers": survivor_bootstrap, "group.id": "unused", "enable.auto.commit": False}
    )
    consumer.assign([KafkaTopicPartition("ledger", 0, 0)])
    seen: list[int] = []
    deadline = time.monotonic() + 30
    while len(seen) < 300 and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            seen.append(int(message.value()))
    consumer.close()
    assert seen == list(range(300))  # every acknowledged record, once, in order

    # The killed broker comes back on its ports: a follower now, it ends with the leader's log.
    killed.start(timeout_s=SESSION_MS / 1000 + 30)
    new_leader_id = wait_until(
        lambda: (p := KafkaAdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=5)
                 .topics["ledger"].partitions[0]).leader != leader_id and len(p.isrs) == 3 and p.leader,
        30,
    )  # fmt: skip
    assert new_leader_id, "the restarted broker never rejoined the ISR"
    assert wait_until(lambda: _segments(killed, "ledger-0") == _segments(brokers[new_leader_id], "ledger-0"), 30)
