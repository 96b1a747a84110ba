"""The sync producer against the real broker: codecs, partitioning, batching, acks, errors, retries."""

from __future__ import annotations

import threading
import time

import pytest
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from triolog.client import (AdminClient, Consumer, InvalidTopicError, MessageTooLargeError, NewTopic, Producer, ResponseLostError,
                    TopicPartition, UnknownTopicOrPartitionError)
from triolog.protocol.record_batch import CompressionType
from tests.client.helpers import flat as _flat
from tests.e2e.fault_proxy import FaultProxy


def _consume_all(bootstrap, topic, partitions=(0,), expected=None, timeout_s=5.0):
    """Every record of the partitions from the beginning (until ``expected`` are read, or idle)."""
    with Consumer(bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=100) as consumer:
        consumer.assign([(topic, p) for p in partitions])
        records, deadline = [], time.monotonic() + timeout_s
        while time.monotonic() < deadline and (expected is None or len(records) < expected):
            batch = _flat(consumer.poll(200))
            if not batch and expected is None:
                break
            records += batch
        return records


@pytest.mark.parametrize("codec", list(CompressionType), ids=lambda c: c.kafka_name)
def test_producer_round_trip_for_every_codec(bootstrap, admin, topic, raw_batches, codec):
    admin.create_topics([NewTopic(topic, 1)])
    values = [(b"key-%d" % i, b"value %d " % i * 20, (("h", b"%d" % i),)) for i in range(50)]
    with Producer(bootstrap, compression=codec.kafka_name, linger_ms=1000) as producer:
        futures = [producer.send(topic, v, key=k, headers=h) for k, v, h in values]
        producer.flush()
        offsets = [f.get(5).offset for f in futures]
    assert offsets == list(range(50))
    assert {b.compression for b in raw_batches(topic)} == {codec}
    records = _consume_all(bootstrap, topic, expected=50)
    assert [(r.key, r.value, r.headers) for r in records] == values
    assert [r.offset for r in records] == list(range(50))


def test_producer_keyed_records_land_where_kafka_python_puts_them(bootstrap, admin, topic):
    admin.create_topics([NewTopic(topic, 5)])
    keys = [b"user-%d" % i for i in range(40)]
    with Producer(bootstrap) as producer:
        futures = {key: producer.send(topic, b"v", key=key) for key in keys}
        placed = {key: f.get(5).partition for key, f in futures.items()}
    assert placed == {key: (kafka_python_murmur2(key) & 0x7FFFFFFF) % 5 for key in keys}
    stored = {r.key: r.partition for r in _consume_all(bootstrap, topic, range(5), expected=40)}
    assert stored == placed
    assert len(set(placed.values())) > 1


def test_producer_keyless_records_stick_to_one_partition_per_batch(bootstrap, admin, topic, raw_batches):
    admin.create_topics([NewTopic(topic, 4)])
    with Producer(bootstrap, linger_ms=10_000) as producer:
        first = [producer.send(topic, b"a%d" % i) for i in range(20)]
        producer.flush()
        second = [producer.send(topic, b"b%d" % i) for i in range(20)]
        producer.flush()
    first_partitions = {f.get(1).partition for f in first}
    second_partitions = {f.get(1).partition for f in second}
    assert len(first_partitions) == 1 and len(second_partitions) == 1
    assert first_partitions != second_partitions  # a new batch moved to another partition
    for partition in first_partitions | second_partitions:
        assert [len(b) for b in raw_batches(topic, partition)] == [20]


def test_producer_linger_holds_a_batch_until_it_expires(bootstrap, admin, topic, raw_batches):
    admin.create_topics([NewTopic(topic, 1)])
    acked_at = []
    with Producer(bootstrap, linger_ms=400) as producer:
        start = time.monotonic()
        futures = [producer.send(topic, b"r%d" % i) for i in range(5)]
        futures[0].add_done_callback(lambda future: acked_at.append(time.monotonic()))
        futures[-1].get(10)  # no flush: the batch goes when its linger expires
    # Never sooner than linger.ms after its first record (a slow machine only makes it later).
    assert acked_at[0] - start >= 0.4
    assert [len(b) for b in raw_batches(topic)] == [5]  # one batch


def test_producer_flush_sends_without_waiting_for_linger(bootstrap, admin, topic):
    admin.create_topics([NewTopic(topic, 1)])
    with Producer(bootstrap, linger_ms=60_000) as producer:
        future = producer.send(topic, b"now")
        start = time.monotonic()
        producer.flush()
        assert future.done() and time.monotonic() - start < 3
        assert future.get(0).offset == 0


def test_producer_send_after_close_is_refused_even_on_the_fast_path(bootstrap, admin, topic):
    """send() of bytes to a known topic is one compiled call; closing still stops it."""
    from triolog.client import ProducerClosedError

    admin.create_topics([NewTopic(topic, 1)])
    producer = Producer(bootstrap, acks=1)
    producer.send(topic, b"known").get(10)
    assert producer.send(topic, b"fast").get(10).offset == 1  # topic known: the fast path took it
    producer.close()
    with pytest.raises(ProducerClosedError):
        producer.send(topic, b"late")
    with pytest.raises(ProducerClosedError):
        producer.send(topic, b"late", partition=0)
    assert [r.value for r in _consume_all(bootstrap, topic, expected=2)] == [b"known", b"fast"]


def test_producer_subclass_send_override_is_called(bootstrap, admin, topic):
    admin.create_topics([NewTopic(topic, 1)])
    calls = []

    class Counting(Producer):
        def send(self, topic, value=None, **kwargs):
            calls.append(value)
            return super().send(topic, value, **kwargs)

    with Counting(bootstrap, acks=1) as producer:
        producer.send(topic, b"a").get(10)
        producer.send(topic, b"b").get(10)
    assert calls == [b"a", b"b"]


def test_producer_batch_size_caps_each_batch(bootstrap, admin, topic, raw_batches):
    admin.create_topics([NewTopic(topic, 1)])
    with Producer(bootstrap, linger_ms=60_000, batch_size=400) as producer:
        futures = [producer.send(topic, b"%02d" % i + b"." * 28) for i in range(40)]
        producer.flush()
    assert [f.get(1).offset for f in futures] == list(range(40))
    batches = raw_batches(topic)
    assert len(batches) > 3
    assert all(b.size <= 400 for b in batches)
    assert all(b.size + 40 > 400 for b in batches[:-1])  # each full batch had no room for one more
    assert [r.value[:2] for b in batches for r in b] == [b"%02d" % i for i in range(40)]


@pytest.mark.parametrize("acks", [0, 1, -1])
def test_producer_acks_modes_all_store_the_records(bootstrap, admin, topic, acks):
    admin.create_topics([NewTopic(topic, 1)])
    with Producer(bootstrap, acks=acks) as producer:
        results = [producer.send(topic, b"m%d" % i, partition=0).get(5) for i in range(3)]
    # acks=0 gets no response, so no offsets (Kafka reports -1); the others report them
    assert [r.offset for r in results] == ([-1, -1, -1] if acks == 0 else [0, 1, 2])
    assert [r.value for r in _consume_all(bootstrap, topic, expected=3)] == [b"m0", b"m1", b"m2"]


def test_producer_acks_all_is_the_default():
    from triolog.client.producer_core import ProducerConfig

    assert ProducerConfig().acks == -1 and ProducerConfig(acks="all").acks == -1


def test_producer_null_key_tombstone_and_headers_round_trip(bootstrap, admin, topic):
    admin.create_topics([NewTopic(topic, 1)])
    headers = [("trace", b"abc"), ("trace", b"def"), ("empty", None), ("text", "é")]
    with Producer(bootstrap) as producer:
        producer.send(topic, None, key=b"gone", headers=headers, partition=0)
        producer.send(topic, "unicode ✓", partition=0, timestamp_ms=1_600_000_000_000)
    first, second = _consume_all(bootstrap, topic, expected=2)
    assert (first.key, first.value) == (b"gone", None)
    assert first.headers == (("trace", b"abc"), ("trace", b"def"), ("empty", None), ("text", "é".encode()))
    assert (second.key, second.value, second.timestamp) == (None, "unicode ✓".encode(), 1_600_000_000_000)


def test_producer_reports_the_broker_timestamp_on_log_append_time_topics(bootstrap, admin, topic):
    admin.create_topics([NewTopic(topic, 1, configs={"message.timestamp.type": "LogAppendTime"})])
    before = int(time.time() * 1000)
    with Producer(bootstrap) as producer:
        metadata = producer.send(topic, b"x", timestamp_ms=1_000).get(5)
    assert metadata.timestamp >= before - 1000
    (record,) = _consume_all(bootstrap, topic, expected=1)
    assert record.timestamp == metadata.timestamp and record.timestamp_type == "LogAppendTime"


def test_producer_unknown_partition_fails_at_once_with_a_typed_error(bootstrap, admin, topic):
    admin.create_topics([NewTopic(topic, 2)])
    with Producer(bootstrap, delivery_timeout_ms=60_000) as producer:
        start = time.monotonic()
        future = producer.send(topic, b"x", partition=7)
        with pytest.raises(UnknownTopicOrPartitionError) as info:
            future.get(10)
    assert time.monotonic() - start < 5  # not retried: the topic exists, partition 7 never will
    assert info.value.partition == 7 and info.value.error_message


def test_producer_invalid_topic_name_raises_invalid_topic_error(bootstrap):
    with Producer(bootstrap) as producer:
        with pytest.raises(InvalidTopicError):
            producer.send("no spaces allowed", b"x")  # metadata lookup refuses the name
        with pytest.raises(InvalidTopicError):  # a given partition waits for metadata too (Kafka's waitOnMetadata)
            producer.send("no/slashes", b"x", partition=0)


def test_producer_batch_above_max_message_bytes_raises_message_too_large(bootstrap, admin, topic):
    admin.create_topics([NewTopic(topic, 1, configs={"max.message.bytes": "1000"})])
    with Producer(bootstrap) as producer:
        big = producer.send(topic, b"x" * 5000)
        with pytest.raises(MessageTooLargeError):
            big.get(5)
        assert producer.send(topic, b"small").get(5).offset == 0  # nothing of the big batch was written


def test_producer_retries_a_request_that_could_not_be_sent(broker_factory_port, topic):
    """The broker is not up yet: the connection fails before any request is written, so the
    producer retries (its metadata lookups), and each record is stored exactly once when the
    broker appears."""
    start_broker, port = broker_factory_port
    bootstrap = f"127.0.0.1:{port}"
    with Producer(bootstrap, retry_backoff_ms=50, delivery_timeout_ms=20_000) as producer:
        starter = threading.Timer(0.5, start_broker)
        starter.start()
        started = time.monotonic()
        # A given partition waits for the topic's metadata too (Kafka's waitOnMetadata).
        early = producer.send(topic, b"early", partition=0)
        assert time.monotonic() - started >= 0.4
        keyless = producer.send(topic, b"keyless")
        starter.join(15)
        assert early.get(15).offset == 0
        assert keyless.get(15).offset == 1
    assert [r.value for r in _consume_all(bootstrap, topic, expected=2)] == [b"early", b"keyless"]


def test_a_producer_without_idempotence_never_resends_when_the_response_is_lost(broker, admin, topic):
    """A connection that dies after the request was written (the broker appended the batch, the
    response is lost on the way): without idempotence the outcome is unknown, so the record
    fails with ResponseLostError instead of being sent again (no duplicates)."""
    admin.create_topics([NewTopic(topic, 1)])
    with FaultProxy(broker.port, drop_every=1) as proxy:
        with Producer(f"127.0.0.1:{proxy.port}", enable_idempotence=False, retry_backoff_ms=10) as producer:
            future = producer.send(topic, b"x", partition=0)
            with pytest.raises(ResponseLostError):
                future.get(10)
            assert producer.metrics()["record-retry-total"] == 0
        assert proxy.produce_requests == 1 and proxy.produce_responses_dropped == 1
    assert [r.value for r in _consume_all(f"127.0.0.1:{broker.port}", topic, expected=1)] == [b"x"]


def test_producer_results_are_in_send_order_across_partitions(bootstrap, admin, topic):
    admin.create_topics([NewTopic(topic, 3)])
    with Producer(bootstrap, linger_ms=2) as producer:
        futures = [producer.send(topic, b"%d" % i, key=b"k%d" % (i % 7)) for i in range(300)]
    by_partition: dict[int, list[int]] = {}
    for f in futures:
        md = f.get(5)
        by_partition.setdefault(md.partition, []).append(md.offset)
    assert all(offsets == list(range(len(offsets))) for offsets in by_partition.values())
    records = _consume_all(bootstrap, topic, range(3), expected=300)
    assert sorted(int(r.value) for r in records) == list(range(300))
    assert {TopicPartition(topic, p) for p in by_partition} <= {TopicPartition(r.topic, r.partition) for r in records}


def test_producer_retries_unknown_topic_until_it_is_created(no_autocreate_broker, topic):
    """A topic that does not exist (no auto-create): send waits for its metadata (retrying the
    lookup) until the topic is created, then the record is stored once."""
    bootstrap = f"127.0.0.1:{no_autocreate_broker.port}"
    def create() -> None:
        with AdminClient(bootstrap) as admin:
            admin.create_topics([NewTopic(topic, 1)])

    with Producer(bootstrap, retry_backoff_ms=50, delivery_timeout_ms=20_000) as producer:
        creator = threading.Timer(0.3, create)
        creator.start()
        # Waits for the topic's metadata (Kafka's waitOnMetadata), also with a given partition.
        future = producer.send(topic, b"patient", partition=0)
        creator.join(10)
        assert future.get(10).offset == 0
    assert [r.value for r in _consume_all(bootstrap, topic, expected=1)] == [b"patient"]


def test_producer_send_gives_up_on_a_topic_that_never_appears(no_autocreate_broker, topic):
    with Producer(f"127.0.0.1:{no_autocreate_broker.port}", max_block_ms=300, retry_backoff_ms=50) as producer:
        start = time.monotonic()
        with pytest.raises(UnknownTopicOrPartitionError) as info:
            producer.send(topic, b"x")
        assert 0.25 <= time.monotonic() - start < 3
    assert info.value.topic == topic


def test_send_many_round_trip_with_keys_headers_timestamps(bootstrap, admin, topic):
    admin.create_topics([NewTopic(topic, 3)])
    n = 300
    values = [b"value %d" % i for i in range(n)]
    keys = [None if i % 7 == 0 else b"k%d" % (i % 11) for i in range(n)]
    headers = [(("i", b"%d" % i),) if i % 2 else () for i in range(n)]
    stamps = [1_700_000_000_000 + i for i in range(n)]
    with Producer(bootstrap, linger_ms=50, batch_size=2000) as producer:
        futures = producer.send_many(topic, values, keys=keys, headers=headers, timestamps=stamps)
        assert len(futures) == n
        metadata = futures.get(10)
    assert [md.timestamp for md in metadata] == stamps
    for key, md in zip(keys, metadata):
        if key is not None:
            assert md.partition == (kafka_python_murmur2(key) & 0x7FFFFFFF) % 3
    assert futures[5].result() == metadata[5] and futures.errors() == []
    records = {(r.partition, r.offset): r for r in _consume_all(bootstrap, topic, range(3), expected=n)}
    assert len(records) == n
    for i, md in enumerate(metadata):
        record = records[(md.partition, md.offset)]
        assert (record.key, record.value, record.headers, record.timestamp) == (keys[i], values[i], headers[i], stamps[i])


def test_send_many_orders_records_like_send_and_serializes_them(bootstrap, admin, topic):
    admin.create_topics([NewTopic(topic, 1)])
    with Producer(bootstrap, value_serializer=lambda v: str(v).encode(), linger_ms=20) as producer:
        first = producer.send(topic, 0, partition=0)
        many = producer.send_many(topic, list(range(1, 2001)), partition=0)
        last = producer.send(topic, 2001, partition=0)
        producer.flush()
        offsets = [first.get(5).offset] + [md.offset for md in many.get(5)] + [last.get(5).offset]
    assert offsets == list(range(2002))
    assert [r.value for r in _consume_all(bootstrap, topic, expected=2002)] == [b"%d" % i for i in range(2002)]


def test_send_many_refuses_a_bad_argument_before_queuing_anything(bootstrap, admin, topic):
    admin.create_topics([NewTopic(topic, 1)])
    with Producer(bootstrap) as producer:
        with pytest.raises(TypeError, match=r"values\[2\]"):
            producer.send_many(topic, [b"a", b"b", 3], partition=0)
        with pytest.raises(ValueError, match="keys has 1 items for 2 values"):
            producer.send_many(topic, [b"a", b"b"], keys=[b"k"], partition=0)
        with pytest.raises(TypeError, match=r"headers\[1\]"):
            producer.send_many(topic, [b"a", b"b"], headers=[(), ((1, b"x"),)], partition=0)
        with pytest.raises(ValueError, match="partition"):
            producer.send_many(topic, [b"a"], partition=-1)
        with pytest.raises(ValueError, match=r"timestamps\[1\] must be between 0 and 2\^63-1"):
            producer.send_many(topic, [b"a", b"b"], timestamps=[5, 2**64], partition=0)
        producer.send_many(topic, ["ok"], partition=0).get(5)
    assert [r.value for r in _consume_all(bootstrap, topic)] == [b"ok"]


@pytest.mark.parametrize("timestamp", [-5, 2**63])
def test_send_refuses_a_timestamp_a_batch_cannot_carry(bootstrap, admin, topic, timestamp):
    """Kafka's producer refuses a negative timestamp; one past int64 cannot be encoded. Refused at
    send(), on the fast path's fallback as on the checked path, so no batch fails with it."""
    admin.create_topics([NewTopic(topic, 1)])
    with Producer(bootstrap) as producer:
        producer.send(topic, b"first", partition=0).get(5)  # the topic is known: the fast path's case
        with pytest.raises(ValueError, match="timestamp_ms must be between 0 and 2\\^63-1"):
            producer.send(topic, b"bad", partition=0, timestamp_ms=timestamp)
        producer.send(topic, b"next", partition=0).get(5)
    assert [r.value for r in _consume_all(bootstrap, topic)] == [b"first", b"next"]


def test_send_many_reports_each_failed_record(bootstrap, admin, topic):
    admin.create_topics([NewTopic(topic, 1)])
    with Producer(bootstrap, delivery_timeout_ms=2000, retry_backoff_ms=50) as producer:
        futures = producer.send_many(topic, [b"x"] * 5, partition=3)  # the topic has no partition 3
        assert futures.wait(10)
        errors = futures.errors()
    assert [index for index, _ in errors] == [0, 1, 2, 3, 4]
    assert all(isinstance(error, UnknownTopicOrPartitionError) for _, error in errors)
    with pytest.raises(UnknownTopicOrPartitionError):
        futures.get(0)


def test_send_many_waits_for_buffer_space_in_slices(bootstrap, admin, topic):
    admin.create_topics([NewTopic(topic, 1)])
    with Producer(bootstrap, buffer_memory=200_000, batch_size=16384) as producer:
        futures = producer.send_many(topic, [b"y" * 100] * 20_000, partition=0)  # ~3.6 MB through 200 kB
        assert [md.offset for md in futures.get(30)] == list(range(20_000))


def test_a_raising_callback_is_logged_once_with_its_partition_and_the_producer_goes_on(bootstrap, topic):
    import structlog

    calls = []

    def broken(future):
        calls.append(future.result().offset)
        raise RuntimeError("user bug")

    with structlog.testing.capture_logs() as logs:
        with Producer(bootstrap, linger_ms=60_000) as producer:
            first = producer.send(topic, b"a", partition=0)
            first.add_done_callback(broken)
            producer.flush(30)
            second = producer.send(topic, b"b", partition=0)  # the sender survived the callback
            producer.flush(30)
            assert second.get(30).offset == first.get(0).offset + 1
    assert calls == [first.get(0).offset]
    failures = [entry for entry in logs if entry["event"] == "producer_callback_failed"]
    assert len(failures) == 1, logs
    assert failures[0]["topic"] == topic and failures[0]["partition"] == 0
    assert failures[0]["log_level"] == "error" and failures[0].get("exc_info")
