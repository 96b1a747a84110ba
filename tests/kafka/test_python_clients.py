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


def test_kafka_python_and_aiokafka_consumer_groups_commit_and_resume(bootstrap, msgpack_bootstrap, topic):
    from kafka import KafkaConsumer as KpConsumer

    from triolog.client import Producer
    from triolog.client.admin import AdminClient

    with AdminClient(msgpack_bootstrap) as admin:
        admin.create_topics([(topic, 3, 1, {})])
    with Producer(msgpack_bootstrap) as producer:
        for i in range(30):
            producer.send(topic, b"v%d" % i, partition=i % 3)
        producer.flush()

    def kp_group(expect: int) -> list:
        consumer = KpConsumer(topic, bootstrap_servers=bootstrap, group_id=f"{topic}-kp", auto_offset_reset="earliest",
                              enable_auto_commit=False, session_timeout_ms=6000, heartbeat_interval_ms=500)
        got: list = []
        for _ in range(60):
            if len(got) >= expect:
                break
            for records in consumer.poll(timeout_ms=500).values():
                got += [r.value for r in records]
        consumer.commit()
        consumer.close()
        return got

    assert sorted(kp_group(30)) == sorted(b"v%d" % i for i in range(30))
    with Producer(msgpack_bootstrap) as producer:
        for p in range(3):
            producer.send(topic, b"late-%d" % p, partition=p)
        producer.flush()
    assert sorted(kp_group(3)) == [b"late-0", b"late-1", b"late-2"]  # resumed after the commit

    async def aio_group() -> list:
        consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=f"{topic}-aio",
                                    auto_offset_reset="earliest", enable_auto_commit=False)
        await consumer.start()
        try:
            got: list = []
            for _ in range(60):
                if len(got) >= 33:
                    break
                for records in (await consumer.getmany(timeout_ms=500)).values():
                    got += [r.value for r in records]
            await consumer.commit()
            return got
        finally:
            await consumer.stop()

    assert len(asyncio.run(aio_group())) == 33
    with AdminClient(msgpack_bootstrap) as admin:  # both groups' commits, read through triolog's protocol
        for group in (f"{topic}-kp", f"{topic}-aio"):
            assert sorted(admin.list_consumer_group_offsets(group).values()) == [11, 11, 11]
