"""librdkafka (the confluent-kafka wheel) against the Kafka listener of a real broker process:
idempotent produce with every compression codec, consume, and the same records read through
triolog's own protocol, byte for byte."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka import Producer as KafkaProducer
from confluent_kafka import TopicPartition as KafkaTopicPartition

from triolog.client import Producer, TopicPartition

from tests.e2e.reading import read_partition


def _produce(bootstrap: str, topic: str, records, **config) -> list:
    """Send (key, value, headers, timestamp) tuples to partition 0; their delivery reports."""
    producer = KafkaProducer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5,
                              **config})
    reports: list = []

    def delivered(err, msg):
        reports.append((err, msg.offset() if err is None else None))

    for key, value, headers, timestamp in records:
        while True:
            try:
                extra = {} if timestamp is None else {"timestamp": timestamp}
                producer.produce(topic, value=value, key=key, headers=headers, partition=0, on_delivery=delivered,
                                 **extra)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    assert producer.flush(60) == 0
    return reports


def _consume(bootstrap: str, topic: str, count: int, partition: int = 0) -> list:
    consumer = KafkaConsumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-reader",
                              "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        consumer.assign([KafkaTopicPartition(topic, partition, 0)])
        out: list = []
        idle = 0
        while len(out) < count and idle < 30:
            batch = consumer.consume(10000, 1.0)
            idle = 0 if batch else idle + 1
            for message in batch:
                assert message.error() is None, message.error()
                out.append(message)
        return out
    finally:
        consumer.close()


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_idempotent_produce_then_consume_with_each_codec(bootstrap, topic, codec):
    count = 25_000
    records = [(b"k%d" % i, b"v%06d" % i + b"x" * 90, None, None) for i in range(count)]
    reports = _produce(bootstrap, topic, records, **{"compression.type": codec})
    assert [err for err, _ in reports if err is not None] == []
    assert sorted(offset for _, offset in reports) == list(range(count))  # each record once, no gap
    consumed = _consume(bootstrap, topic, count)
    assert [(m.offset(), m.key(), m.value()) for m in consumed] == [
        (i, key, value) for i, (key, value, _, _) in enumerate(records)]


def test_records_written_by_librdkafka_read_identically_through_triolog(bootstrap, msgpack_bootstrap, topic):
    records = [
        (b"key-0", b"value-0", [("h1", b"one"), ("h2", None)], 1_700_000_000_000),
        (None, b"no key", None, 1_700_000_000_001),
        (b"key-2", None, [("only", b"")], 1_700_000_000_002),  # a tombstone-shaped record
        (b"key-3", b"\x00\xff" * 300, [], 1_700_000_000_003),
    ]
    _produce(bootstrap, topic, records, **{"compression.type": "lz4"})
    ours = read_partition(msgpack_bootstrap, topic)
    assert [(r.offset, r.key, r.value, tuple(r.headers), r.timestamp) for r in ours] == [
        (i, key, value, tuple(headers or ()), ts) for i, (key, value, headers, ts) in enumerate(records)]


def test_records_written_by_triolog_read_identically_through_librdkafka(bootstrap, msgpack_bootstrap, topic):
    with Producer(msgpack_bootstrap, compression="zstd") as producer:
        for i in range(50):
            producer.send(topic, b"value-%d" % i, key=b"key-%d" % i, partition=0,
                          headers=[("n", b"%d" % i)], timestamp_ms=1_600_000_000_000 + i)
        producer.flush()
    consumed = _consume(bootstrap, topic, 50)
    assert [(m.offset(), m.key(), m.value(), m.headers(), m.timestamp()[1]) for m in consumed] == [
        (i, b"key-%d" % i, b"value-%d" % i, [("n", b"%d" % i)], 1_600_000_000_000 + i) for i in range(50)]
