"""Several produce requests in flight on one connection (max_in_flight_requests_per_connection),
against the real broker: order kept, every acknowledged record in the log exactly once, a
per-request error handled while other requests are outstanding, a broker killed mid-stream."""

from __future__ import annotations

import threading

import pytest
import trio

from triolog.client import (Consumer, NewTopic, Producer, TopicPartition,
                            UnknownTopicOrPartitionError)
from triolog.client.aio import AsyncProducer
from triolog.client.producer_core import ProducerConfig
from triolog.client.errors import BrokerConnectionError
from tests.client.helpers import flat
from tests.waiting import wait_for


def _log_values(bootstrap, tp, stop_at=None) -> list[tuple[int, bytes]]:
    """Every (offset, value) of ``tp`` from offset 0 to its end."""
    out = []
    with Consumer(bootstrap, auto_offset_reset="earliest", max_poll_records=100_000) as consumer:
        consumer.assign([tp])
        end = consumer.end_offsets([tp])[tp]
        while len(out) < end:
            records = flat(consumer.poll(5000))
            assert records, f"the log ends at {end} but polling stopped at {len(out)}"
            out += [(r.offset, r.value) for r in records]
    return out


def _number(value: bytes) -> int:
    return int(value.split(b"-")[1])


def test_max_in_flight_must_be_at_least_one():
    with pytest.raises(ValueError, match="max_in_flight_requests_per_connection"):
        ProducerConfig(max_in_flight_requests_per_connection=0)
    # Kafka's 5 for the (default) idempotent producer: sequence numbers keep each partition's order.
    assert ProducerConfig().enable_idempotence is True
    assert ProducerConfig().max_in_flight_requests_per_connection == 5
    # 1 without idempotence: a batch retried after a later one of its partition landed (the
    # first sends to a topic being auto-created) would reorder records.
    assert ProducerConfig(enable_idempotence=False).max_in_flight_requests_per_connection == 1
    assert ProducerConfig(acks=1).max_in_flight_requests_per_connection == 1


@pytest.mark.parametrize("in_flight", [1, 5])
def test_pipelined_produce_keeps_order_and_stores_each_record_once(bootstrap, admin, topic, in_flight):
    admin.create_topics([NewTopic(topic, 1)])
    values = [b"r-%d-" % i + b"x" * 200 for i in range(4000)]
    with Producer(bootstrap, acks=1, linger_ms=0, batch_size=4096,
                  max_in_flight_requests_per_connection=in_flight) as producer:
        futures = producer.send_many(topic, values, partition=0)  # ~200 batches, all ready at once
        metadata = futures.get(60)
        seen = producer._conn.max_in_flight_seen
    assert [md.offset for md in metadata] == list(range(len(values)))  # acknowledged in send order
    assert _log_values(bootstrap, TopicPartition(topic, 0)) == list(enumerate(values))
    if in_flight == 1:
        assert seen == 1
    else:
        assert 2 <= seen <= in_flight  # requests really overlapped, never beyond the limit


def test_an_error_on_one_of_several_in_flight_requests_fails_only_its_records(bootstrap, admin, topic):
    """Batches for a partition that does not exist are refused (after the metadata check the
    producer makes while other requests are outstanding); every other record lands once, in order."""
    admin.create_topics([NewTopic(topic, 1)])
    good, bad = [], []
    with Producer(bootstrap, acks=1, linger_ms=0, batch_size=2048, max_in_flight_requests_per_connection=5) as producer:
        for i in range(3000):
            good.append(producer.send(topic, b"g-%d-" % i + b"x" * 100, partition=0))
            if i % 300 == 0:
                bad.append(producer.send(topic, b"b-%d" % i, partition=3))
        producer.flush(60)
        seen = producer._conn.max_in_flight_seen
    for future in bad:
        with pytest.raises(UnknownTopicOrPartitionError):
            future.get(0)
    offsets = [future.get(0).offset for future in good]
    assert offsets == list(range(3000))
    log = _log_values(bootstrap, TopicPartition(topic, 0))
    assert [_number(value) for _, value in log] == list(range(3000))
    assert seen >= 2


def test_broker_killed_mid_stream_loses_and_duplicates_no_acknowledged_record(tmp_path, broker_factory_port):
    """kill -9 the broker while requests are in flight, restart it, keep producing: every
    acknowledged record is in the log exactly once and in order; no record is there twice."""
    start, port = broker_factory_port
    broker = start(process=True)  # killed -9 below
    bootstrap = f"127.0.0.1:{port}"
    from triolog.client import AdminClient

    with AdminClient(bootstrap) as admin:
        admin.create_topics([NewTopic("pipelined", 1)])
    tp = TopicPartition("pipelined", 0)
    futures = []
    with Producer(bootstrap, acks=1, linger_ms=0, batch_size=2048, retry_backoff_ms=50,
                  request_timeout_ms=10_000, max_in_flight_requests_per_connection=5) as producer:
        def produce(first, count):
            for i in range(first, first + count):
                futures.append(producer.send("pipelined", b"n-%d-" % i + b"y" * 150, partition=0))

        produce(0, 3000)
        wait_for(lambda: futures[1000].done(), 30, "the first records acknowledged")
        produce(3000, 2000)  # in flight or queued when the broker dies
        broker.kill()
        produce(5000, 2000)  # queued while the broker is down: sent once it is back
        restarted = start()
        produce(7000, 2000)
        producer.flush(90)
    outcomes = []
    for i, future in enumerate(futures):
        error = future.exception()
        if error is None:
            outcomes.append((i, future.result().offset))
        else:
            assert isinstance(error, BrokerConnectionError), error  # lost with the connection, fate unknown
    acknowledged = {i for i, _ in outcomes}
    assert set(range(1000)) <= acknowledged and set(range(7000, 9000)) <= acknowledged
    log = _log_values(bootstrap, tp)
    numbers = [_number(value) for _, value in log]
    assert len(numbers) == len(set(numbers)), "a record is in the log twice"
    position = {number: offset for offset, number in zip((o for o, _ in log), numbers)}
    for i, offset in outcomes:
        assert position.get(i) == offset, f"record {i} acknowledged at {offset}, in the log at {position.get(i)}"
    acked_in_log_order = [n for n in numbers if n in acknowledged]
    assert acked_in_log_order == sorted(acked_in_log_order)  # acknowledged records kept their order
    restarted.stop()


async def test_aio_pipelined_produce_keeps_order_and_stores_each_record_once(bootstrap, topic):
    from triolog.client.aio import AsyncAdminClient

    async with AsyncAdminClient(bootstrap) as admin:
        await admin.create_topics([NewTopic(topic, 1)])
    values = [b"a-%d-" % i + b"z" * 200 for i in range(4000)]
    async with AsyncProducer(bootstrap, acks=1, linger_ms=0, batch_size=4096,
                             max_in_flight_requests_per_connection=5) as producer:
        futures = await producer.send_many(topic, values, partition=0)
        with trio.fail_after(60):
            metadata = await futures.get()
        seen = producer._conn.max_in_flight_seen
    assert [md.offset for md in metadata] == list(range(len(values)))
    assert await trio.to_thread.run_sync(_log_values, bootstrap, TopicPartition(topic, 0)) == list(enumerate(values))
    assert 2 <= seen <= 5


async def test_aio_an_error_on_one_of_several_in_flight_requests_fails_only_its_records(bootstrap, topic):
    from triolog.client.aio import AsyncAdminClient

    async with AsyncAdminClient(bootstrap) as admin:
        await admin.create_topics([NewTopic(topic, 1)])
    good, bad = [], []
    async with AsyncProducer(bootstrap, acks=1, linger_ms=0, batch_size=2048) as producer:
        for i in range(3000):
            good.append(await producer.send(topic, b"g-%d-" % i + b"x" * 100, partition=0))
            if i % 300 == 0:
                bad.append(await producer.send(topic, b"b-%d" % i, partition=3))
        with trio.fail_after(60):
            await producer.flush()
    for future in bad:
        with pytest.raises(UnknownTopicOrPartitionError):
            await future
    assert [(await future).offset for future in good] == list(range(3000))
    log = await trio.to_thread.run_sync(_log_values, bootstrap, TopicPartition(topic, 0))
    assert [_number(value) for _, value in log] == list(range(3000))


# -- fetch pipelining ---------------------------------------------------------------------------


def _fill(bootstrap, admin, topic, count, size=100):
    admin.create_topics([NewTopic(topic, 1)])
    with Producer(bootstrap, linger_ms=0, batch_size=8192) as producer:
        producer.send_many(topic, [b"c-%d-" % i + b"w" * size for i in range(count)], partition=0).get(60)
    return TopicPartition(topic, 0)


def test_poll_writes_the_next_fetch_before_handing_out_records_and_keeps_order(bootstrap, admin, topic):
    tp = _fill(bootstrap, admin, topic, 6000)
    numbers = []
    ahead = []
    with Consumer(bootstrap, auto_offset_reset="earliest", max_partition_fetch_bytes=64 * 1024,
                  max_poll_records=700) as consumer:
        consumer.assign([tp])
        while len(numbers) < 6000:
            records = flat(consumer.poll(5000))
            assert records
            numbers += [_number(r.value) for r in records]
            in_flight = consumer._core._in_flight
            if in_flight is not None:
                state = consumer._core._states[tp]
                # asked from the end of what is buffered, never from before it
                assert in_flight[1][tp] == (state.next_fetch_offset if state.next_fetch_offset is not None
                                            else state.position)
                ahead.append(in_flight[1][tp])
        assert consumer.poll(0) == {}
    assert numbers == list(range(6000))  # every record once, in order, across pipelined fetches
    assert len(ahead) >= 10 and ahead == sorted(ahead)


def test_a_seek_drops_the_fetch_in_flight_and_reads_from_the_new_position(bootstrap, admin, topic):
    tp = _fill(bootstrap, admin, topic, 3000)
    with Consumer(bootstrap, auto_offset_reset="earliest", max_partition_fetch_bytes=32 * 1024,
                  max_poll_records=100_000) as consumer:
        consumer.assign([tp])
        first = flat(consumer.poll(5000))
        assert first and consumer._core._in_flight is not None  # the next fetch is out
        consumer.seek(tp, 10)
        after = flat(consumer.poll(5000))
        assert after[0].offset == 10 and [_number(r.value) for r in after] == list(range(10, 10 + len(after)))
        consumer.seek(tp, 2990)
        numbers = []
        while len(numbers) < 10:
            numbers += [_number(r.value) for r in flat(consumer.poll(5000))]
    assert numbers == list(range(2990, 3000))


def test_the_fetch_in_flight_at_the_log_end_still_delivers_new_records(bootstrap, admin, topic):
    tp = _fill(bootstrap, admin, topic, 50)
    with Consumer(bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=300) as consumer:
        consumer.assign([tp])
        seen = []
        while len(seen) < 50:
            seen += flat(consumer.poll(5000))
        with Producer(bootstrap, linger_ms=0) as producer:
            late = threading.Timer(0.2, lambda: producer.send(tp.topic, b"c-50-late", partition=0).get(30))
            late.start()
            records = []
            for _ in range(20):  # each poll waits up to 1 s: the late record comes within them
                records = flat(consumer.poll(1000))
                if records:
                    break
            late.join(10)
    assert [(r.offset, r.value) for r in records] == [(50, b"c-50-late")]


async def test_aio_consumer_pipelines_fetches_and_keeps_order(bootstrap, admin, topic):
    from triolog.client.aio import AsyncConsumer

    tp = await trio.to_thread.run_sync(_fill, bootstrap, admin, topic, 4000)
    numbers = []
    writes_ahead = 0
    async with AsyncConsumer(bootstrap, auto_offset_reset="earliest", max_partition_fetch_bytes=48 * 1024,
                             max_poll_records=900) as consumer:
        consumer.assign([tp])
        with trio.fail_after(60):
            while len(numbers) < 4000:
                columns = await consumer.poll_columns(5000)
                if columns:
                    numbers += [_number(value) for value in columns[tp].values]
                writes_ahead += consumer._core._in_flight is not None
    assert numbers == list(range(4000))
    assert writes_ahead >= 5


def test_a_request_that_cannot_be_built_fails_its_records_and_the_sender_goes_on(bootstrap, topic):
    with Producer(bootstrap, compression="gzip", compression_level=99, linger_ms=0) as producer:
        for value in (b"x", b"y"):  # the second is sent by the same, still running, sender
            with pytest.raises(ValueError, match="level"):
                producer.send(topic, value, partition=0).get(30)
        assert producer._sender.is_alive() and producer._receiver.is_alive()


async def test_aio_a_request_that_cannot_be_built_fails_its_records_and_the_sender_goes_on(bootstrap, topic):
    async with AsyncProducer(bootstrap, compression="gzip", compression_level=99, linger_ms=0) as producer:
        for value in (b"x", b"y"):
            future = await producer.send(topic, value, partition=0)
            with trio.fail_after(30), pytest.raises(ValueError, match="level"):
                await future
