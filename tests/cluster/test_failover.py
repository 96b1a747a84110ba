"""A leader stops in the middle of a stream of acks=all writes from Kafka's own producer
(librdkafka, idempotent): the controller elects an in-sync follower, the producer follows the
new leader by itself, and every acknowledged record is read back from the survivors, once each,
in the order it was sent."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer as KafkaConsumer, Producer as KafkaProducer, TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient as KafkaAdminClient, NewTopic

from .helpers import kafka_bootstrap as _bootstrap, wait_until as _wait


@pytest.fixture
def brokers(start_brokers):
    # (no controlled shutdown: the leader's stop is then as abrupt as a clean one can be)
    return start_brokers((1, 2, 3), "controlled.shutdown.enable=false")


def test_acknowledged_records_survive_their_leaders_stop(brokers):
    bootstrap = _bootstrap(brokers)
    admin = KafkaAdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("ledger", 1, 3, config={"min.insync.replicas": "2"})])["ledger"].result(30)
    leader_id = admin.list_topics(timeout=10).topics["ledger"].partitions[0].leader

    acked: list[int] = []
    failed: list[tuple[int, str]] = []

    def delivered(err, msg):
        value = int(msg.value())
        if err is None:
            acked.append(value)
        else:
            failed.append((value, err.name()))

    producer = KafkaProducer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 2,
            "message.timeout.ms": 60000,
            "retry.backoff.ms": 50,
            "topic.metadata.refresh.interval.ms": 500,
        }
    )
    for i in range(400):
        producer.produce("ledger", value=str(i).encode(), partition=0, on_delivery=delivered)
        producer.poll(0)
        if i == 200:
            assert producer.flush(30) == 0 and len(acked) == 201  # (all acknowledged before the stop)
            brokers.pop(leader_id).stop()  # the leader goes: its session ends at once
        time.sleep(0.002)
    assert producer.flush(60) == 0
    assert failed == [] and len(acked) == 400

    survivors = ",".join(f"127.0.0.1:{b.kafka_port}" for b in brokers.values())
    view = _wait(lambda: (p := KafkaAdminClient({"bootstrap.servers": survivors}).list_topics(timeout=10)
                          .topics["ledger"].partitions[0]).leader not in (-1, leader_id) and p)  # fmt: skip
    assert view and view.leader != leader_id and leader_id not in view.isrs

    consumer = KafkaConsumer({"bootstrap.servers": survivors, "group.id": "unused", "enable.auto.commit": False})
    consumer.assign([KafkaTopicPartition("ledger", 0, 0)])
    seen: list[int] = []
    deadline = time.monotonic() + 30
    while len(seen) < len(acked) and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            seen.append(int(message.value()))
    consumer.close()
    # Every acknowledged record, once, in the order sent (idempotence: a retry is not a duplicate).
    assert seen == sorted(acked) == list(range(400))
