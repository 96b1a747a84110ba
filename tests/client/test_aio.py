"""The trio API against the real broker (pytest-trio, trio_mode): same behaviour as the sync one."""

from __future__ import annotations

import pytest
import trio

from triolog.client import NewTopic, OffsetOutOfRangeError, TopicAlreadyExistsError, TopicPartition
from triolog.client.aio import AsyncAdminClient, AsyncConsumer, AsyncProducer
from triolog.client.partitioner import partition_for_key
from tests.client.helpers import flat as _flat


async def test_aio_producer_and_consumer_round_trip(bootstrap, topic):
    async with AsyncAdminClient(bootstrap) as admin:
        await admin.create_topics([NewTopic(topic, 3)])
    async with AsyncProducer(bootstrap, linger_ms=20, compression="lz4") as producer:
        futures = [await producer.send(topic, b"v%d" % i, key=b"k%d" % i, headers=[("i", b"%d" % i)])
                   for i in range(30)]
        metadata = [await f for f in futures]
    assert [md.partition for md in metadata] == [partition_for_key(b"k%d" % i, 3) for i in range(30)]
    async with AsyncConsumer(bootstrap, auto_offset_reset="earliest", consumer_timeout_ms=300) as consumer:
        consumer.subscribe(topic)
        records = [record async for record in consumer]
    assert sorted(r.value for r in records) == sorted(b"v%d" % i for i in range(30))
    assert all(r.headers == (("i", r.value[1:]),) for r in records)
    assert {(r.partition, r.offset) for r in records} == {(md.partition, md.offset) for md in metadata}


async def test_aio_concurrent_requests_are_pipelined_and_matched_by_id(bootstrap, topic):
    names = [f"{topic}-{i}" for i in range(20)]
    results = {}
    async with AsyncAdminClient(bootstrap) as admin:
        await admin.create_topics([NewTopic(name, 1 + i % 3) for i, name in enumerate(names)])

        async def describe(name):
            results[name] = (await admin.describe_configs([name]), await admin.list_offsets({(name, 0): -1}))

        async with trio.open_nursery() as nursery:  # 20 tasks share the admin's one connection
            for name in names:
                nursery.start_soon(describe, name)
        described = await admin.describe_topics(names)
    assert sorted(results) == sorted(names)
    assert all(list(results[name][0]) == [name] for name in names)  # each got the answer to its own request
    assert {name: len(d.partitions) for name, d in described.items()} == {n: 1 + i % 3 for i, n in enumerate(names)}


async def test_aio_linger_and_flush(bootstrap, topic):
    async with AsyncProducer(bootstrap, linger_ms=400) as producer:
        start = trio.current_time()
        future = await producer.send(topic, b"lingered", partition=0)
        with trio.fail_after(10):
            assert (await future).offset == 0  # no flush: sent when the linger expired...
        assert trio.current_time() - start >= 0.4  # ...and never sooner
    async with AsyncProducer(bootstrap, linger_ms=60_000) as producer:
        future = await producer.send(topic, b"held", partition=0)
        with trio.fail_after(5):
            await producer.flush()  # a 60 s linger cut short
        assert (await future).offset == 1


async def test_aio_consumer_seeks_and_typed_errors(bootstrap, topic):
    tp = TopicPartition(topic, 0)
    async with AsyncProducer(bootstrap) as producer:
        for i in range(5):
            await producer.send(topic, b"%d" % i, partition=0, timestamp_ms=1000 * (i + 1))
    async with AsyncConsumer(bootstrap, auto_offset_reset="none") as consumer:
        consumer.assign([tp])
        consumer.seek_to_timestamp(3000)
        assert await consumer.position(tp) == 2
        assert [r.value for r in _flat(await consumer.poll(2000))] == [b"2", b"3", b"4"]
        consumer.seek_to_beginning()
        assert [r.offset for r in _flat(await consumer.poll(2000))] == [0, 1, 2, 3, 4]
        consumer.seek(tp, 42)
        with pytest.raises(OffsetOutOfRangeError):
            _flat(await consumer.poll(500))
    async with AsyncAdminClient(bootstrap) as admin:
        with pytest.raises(TopicAlreadyExistsError):
            await admin.create_topics([topic])


async def test_aio_long_poll_is_woken_by_a_concurrent_producer(bootstrap, topic):
    tp = TopicPartition(topic, 0)
    async with AsyncAdminClient(bootstrap) as admin:
        await admin.create_topics([NewTopic(topic, 1)])
    async with AsyncConsumer(bootstrap, fetch_max_wait_ms=10_000) as consumer, \
            AsyncProducer(bootstrap) as producer:
        consumer.assign([tp])
        await consumer.position(tp)

        producing_at = []

        async def produce_later():
            await trio.sleep(0.3)
            producing_at.append(trio.current_time())
            await producer.send(topic, b"wake", partition=0)

        async with trio.open_nursery() as nursery:
            start = trio.current_time()
            nursery.start_soon(produce_later)
            with trio.fail_after(20):
                records = _flat(await consumer.poll(10_000))
            returned = trio.current_time()
        assert [r.value for r in records] == [b"wake"]
        # Answered when the record came (it cannot be sooner), not at the 10 s fetch.max.wait.
        assert returned - start >= 0.3
        assert returned - producing_at[0] < 5


async def test_aio_send_many_round_trip(bootstrap, topic):
    async with AsyncAdminClient(bootstrap) as admin:
        await admin.create_topics([NewTopic(topic, 2)])
    keys = [b"k%d" % (i % 5) for i in range(100)]
    async with AsyncProducer(bootstrap, linger_ms=20) as producer:
        futures = await producer.send_many(topic, [b"v%d" % i for i in range(100)], keys=keys)
        metadata = await futures.get()
        single = await (await producer.send(topic, b"last", partition=1))
    assert [md.partition for md in metadata] == [partition_for_key(k, 2) for k in keys]
    assert futures.errors() == [] and single.partition == 1
    async with AsyncConsumer(bootstrap, auto_offset_reset="earliest", consumer_timeout_ms=300) as consumer:
        consumer.subscribe(topic)
        records = [record async for record in consumer]
    assert len(records) == 101


async def _fill(bootstrap, topic, count=10):
    """``topic`` with one partition holding v0..v(count-1) in ONE batch, timestamps 1000, 2000, ..."""
    async with AsyncAdminClient(bootstrap) as admin:
        await admin.create_topics([NewTopic(topic, 1)])
    async with AsyncProducer(bootstrap, linger_ms=60_000) as producer:
        await producer.send_many(topic, [b"v%d" % i for i in range(count)], partition=0,
                                 timestamps=[1000 * (i + 1) for i in range(count)])
    return TopicPartition(topic, 0)


async def test_aio_poll_columns_hands_out_the_records_as_columns_and_mixes_with_poll(bootstrap, topic):
    tp = await _fill(bootstrap, topic)
    async with AsyncConsumer(bootstrap, auto_offset_reset="earliest", max_poll_records=6) as consumer:
        consumer.assign([tp])
        consumer.seek(tp, 2)  # inside the one batch: the records below are skipped
        polled = await consumer.poll_columns(5000)
        assert list(polled) == [tp]
        columns = polled[tp]
        assert columns.offsets == [2, 3, 4, 5, 6, 7]
        assert columns.values == [b"v%d" % i for i in range(2, 8)]
        assert columns.timestamps == [1000 * (i + 1) for i in range(2, 8)]
        assert columns.keys == [None] * 6 and columns.headers == [()] * 6 and columns.types == [0] * 6
        assert await consumer.position(tp) == 8
        # poll() goes on where poll_columns stopped, from the same fetched bytes
        assert [(r.offset, r.value) for r in _flat(await consumer.poll(5000))] == [(8, b"v8"), (9, b"v9")]
        assert await consumer.poll_columns(0) == {}
        consumer.seek(tp, 1)
        assert [r.offset for r in _flat(await consumer.poll(5000, max_records=2))] == [1, 2]
        assert (await consumer.poll_columns(5000, max_records=3))[tp].offsets == [3, 4, 5]  # after poll's records
        assert (await consumer.poll_columns(5000, max_records=100))[tp].offsets == [6, 7, 8, 9]


async def test_aio_poll_columns_refuses_a_consumer_with_deserializers(bootstrap, topic):
    tp = await _fill(bootstrap, topic, 2)
    async with AsyncConsumer(bootstrap, value_deserializer=bytes.decode, auto_offset_reset="earliest") as consumer:
        consumer.assign([tp])
        with pytest.raises(ValueError, match="deserializer"):
            await consumer.poll_columns(0)
        assert [r.value for r in _flat(await consumer.poll(5000))] == ["v0", "v1"]  # nothing was consumed
