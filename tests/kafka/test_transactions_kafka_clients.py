"""Kafka's own clients' transactions against the Kafka listener, unchanged: confluent-kafka's
transactional producer (commit, abort, a consume-transform-produce loop committing its input
offsets with send_offsets_to_transaction, a zombie fenced by a newer producer with the same
transactional id) and kafka-python's and aiokafka's transactional producers, each read back by a
read_committed consumer."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from aiokafka import AIOKafkaProducer
from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka import Producer as KafkaProducer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaProducer as KafkaPythonProducer


def _create(bootstrap: str, *topics: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(t, partitions, 1) for t in topics]).values():
        future.result(30)


def _producer(bootstrap: str, transactional_id: str) -> KafkaProducer:
    producer = KafkaProducer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id,
                              "transaction.timeout.ms": 60000, "linger.ms": 5})
    producer.init_transactions(30)
    return producer


def _read(bootstrap: str, topic: str, expected: int, *, isolation: str = "read_committed",
          partitions: int = 1) -> list[bytes]:
    consumer = KafkaConsumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{uuid.uuid4()}",
                              "enable.auto.commit": False, "auto.offset.reset": "earliest",
                              "isolation.level": isolation, "fetch.wait.max.ms": 100})
    try:
        consumer.assign([KafkaTopicPartition(topic, p, 0) for p in range(partitions)])
        out: list[bytes] = []
        idle = 0
        while idle < (3 if len(out) >= expected else 40):
            batch = consumer.consume(1000, 0.5)
            idle = 0 if batch else idle + 1
            for message in batch:
                assert message.error() is None, message.error()
                out.append(message.value())
        return out
    finally:
        consumer.close()


def test_confluent_kafka_commits_and_aborts_across_partitions(bootstrap, topic):
    _create(bootstrap, topic, partitions=3)
    producer = _producer(bootstrap, f"{topic}-txn")
    expected = []
    for n in range(6):
        producer.begin_transaction()
        values = [b"%d-%d" % (n, i) for i in range(9)]
        for i, value in enumerate(values):
            producer.produce(topic, value, partition=i % 3)
        if n % 2 == 0:
            producer.commit_transaction(30)
            expected += values
        else:
            producer.flush(10)  # in the log before the abort (else librdkafka drops them unsent)
            producer.abort_transaction(30)
    assert sorted(_read(bootstrap, topic, len(expected), partitions=3)) == sorted(expected)
    assert len(_read(bootstrap, topic, 54, isolation="read_uncommitted", partitions=3)) == 54


def test_confluent_kafka_consume_transform_produce_commits_offsets_with_the_output(bootstrap, topic):
    source, sink, group = f"{topic}-in", f"{topic}-out", f"{topic}-group"
    _create(bootstrap, source, sink)
    plain = KafkaProducer({"bootstrap.servers": bootstrap})
    for n in range(30):
        plain.produce(source, b"%d" % n)
    plain.flush(10)

    def run_once(limit: int, commit: bool) -> int:
        consumer = KafkaConsumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                                  "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
        producer = _producer(bootstrap, f"{topic}-ctp")
        consumer.subscribe([source])
        taken = 0
        try:
            producer.begin_transaction()
            while taken < limit:
                for message in consumer.consume(limit - taken, 1.0):
                    assert message.error() is None, message.error()
                    producer.produce(sink, message.value() + b"!")
                    taken += 1
            positions = consumer.position(consumer.assignment())
            producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), 30)
            (producer.commit_transaction if commit else producer.abort_transaction)(30)
        finally:
            consumer.close()
        return taken

    assert run_once(10, commit=True) == 10
    assert run_once(10, commit=False) == 10  # aborted: neither the output nor the offsets stay
    assert run_once(20, commit=True) == 20  # starts again from offset 10
    out = _read(bootstrap, sink, 30)
    assert out == [b"%d!" % n for n in range(30)], "every input exactly once, in order"


def test_confluent_kafka_a_zombie_is_fenced_by_a_newer_producer(bootstrap, topic):
    _create(bootstrap, topic)
    zombie = _producer(bootstrap, f"{topic}-txn")
    zombie.begin_transaction()
    zombie.produce(topic, b"zombie")
    zombie.flush(10)
    successor = _producer(bootstrap, f"{topic}-txn")  # aborts the zombie's open transaction
    successor.begin_transaction()
    successor.produce(topic, b"successor")
    successor.commit_transaction(30)
    with pytest.raises(KafkaException) as raised:
        zombie.commit_transaction(30)
    assert raised.value.args[0].code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED,
                                           KafkaError.INVALID_PRODUCER_EPOCH)
    assert _read(bootstrap, topic, 1) == [b"successor"]


def test_kafka_python_transactional_producer(bootstrap, topic):
    _create(bootstrap, topic)
    producer = KafkaPythonProducer(bootstrap_servers=bootstrap, transactional_id=f"{topic}-kp")
    producer.init_transactions()
    producer.begin_transaction()
    producer.send(topic, b"kept")
    producer.commit_transaction()
    producer.begin_transaction()
    producer.send(topic, b"dropped")
    producer.abort_transaction()
    producer.close()
    assert _read(bootstrap, topic, 1) == [b"kept"]


def test_aiokafka_transactional_producer(bootstrap, topic):
    _create(bootstrap, topic)

    async def produce():
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=f"{topic}-aio")
        await producer.start()
        try:
            async with producer.transaction():
                await producer.send_and_wait(topic, b"kept")
            await producer.begin_transaction()
            await producer.send_and_wait(topic, b"dropped")
            await producer.abort_transaction()
        finally:
            await producer.stop()

    asyncio.run(produce())
    assert _read(bootstrap, topic, 1) == [b"kept"]
