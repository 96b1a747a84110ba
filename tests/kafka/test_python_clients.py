"""kafka-python and aiokafka against the Kafka listener of a real broker process: produce with
each acks and codec, consume back exactly, and the same records through triolog's protocol."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import TopicPartition as AioTopicPartition
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KpTopicPartition

from tests.e2e.reading import read_partition


@pytest.mark.parametrize(("acks", "codec"), [(0, None), (1, "gzip"), ("all", "lz4"), ("all", "zstd"),
                                             (1, "snappy")])
def test_kafka_python_produces_and_consumes(bootstrap, msgpack_bootstrap, topic, acks, codec):
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks=acks, compression_type=codec, linger_ms=5)
    futures = [producer.send(topic, value=b"v%d" % i, key=b"k%d" % i, partition=0,
                             headers=[("h", b"%d" % i)], timestamp_ms=1_650_000_000_000 + i) for i in range(200)]
    producer.flush(30)
    for future in futures:
        future.get(30)
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False)
    tp = KpTopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    got: list = []
    for _ in range(60):
        if len(got) >= 200:
            break
        for records in consumer.poll(timeout_ms=500).values():
            got += [(m.offset, m.key, m.value, list(m.headers), m.timestamp) for m in records]
    consumer.close()
    expected = [(i, b"k%d" % i, b"v%d" % i, [("h", b"%d" % i)], 1_650_000_000_000 + i) for i in range(200)]
    assert got == expected
    ours = read_partition(msgpack_bootstrap, topic)
    assert [(r.offset, r.key, r.value, list(r.headers), r.timestamp) for r in ours] == expected


def test_aiokafka_produces_and_consumes(bootstrap, msgpack_bootstrap, topic):
    async def run() -> list:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", compression_type="gzip")
        await producer.start()
        try:
            for i in range(50):
                await producer.send_and_wait(topic, b"a%d" % i, key=b"k%d" % i, partition=0,
                                             timestamp_ms=1_660_000_000_000 + i)
            batch = producer.create_batch()
            for i in range(50, 100):
                batch.append(key=b"k%d" % i, value=b"a%d" % i, timestamp=1_660_000_000_000 + i)
            await (await producer.send_batch(batch, topic, partition=0))
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
        await consumer.start()
        try:
            tp = AioTopicPartition(topic, 0)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            got: list = []
            while len(got) < 100:
                records = await consumer.getmany(tp, timeout_ms=5000)
                assert records, "nothing came back"
                got += [(m.offset, m.key, m.value, m.timestamp) for m in records[tp]]
            return got
        finally:
            await consumer.stop()

    got = asyncio.run(run())
    expected = [(i, b"k%d" % i, b"a%d" % i, 1_660_000_000_000 + i) for i in range(100)]
    assert got == expected
    assert [(r.offset, r.key, r.value, r.timestamp) for r in read_partition(msgpack_bootstrap, topic)] == expected
