"""The sync consumer against the real broker: positions, seeks, long polls, resets, typed errors."""

from __future__ import annotations

import threading
import time

import pytest

from triolog.client import (Consumer, ConsumerRecord, CorruptMessageError, NewTopic, NoOffsetForPartitionError,
                            OffsetAndTimestamp, OffsetOutOfRangeError, Producer, TopicPartition,
                            UnknownTopicOrPartitionError)
from tests.client.helpers import flat as _flat


def _produce(bootstrap, topic, values, partition=0, timestamps=None, linger_ms=0):
    with Producer(bootstrap, linger_ms=linger_ms) as producer:
        futures = [producer.send(topic, v, partition=partition,
                                 timestamp_ms=None if timestamps is None else timestamps[i])
                   for i, v in enumerate(values)]
    return [f.get(5) for f in futures]


@pytest.fixture
def filled(bootstrap, admin, topic):
    """``topic`` with one partition holding v0..v9 in ONE batch, timestamps 1000, 2000, ... 10000."""
    admin.create_topics([NewTopic(topic, 1)])
    _produce(bootstrap, topic, [b"v%d" % i for i in range(10)], timestamps=[1000 * (i + 1) for i in range(10)],
             linger_ms=60_000)
    return TopicPartition(topic, 0)


def _values(records):
    return [r.value for r in records]


def test_consumer_seek_to_beginning_end_and_offset(bootstrap, filled):
    with Consumer(bootstrap) as consumer:
        consumer.assign([filled])
        consumer.seek_to_beginning()
        assert consumer.position(filled) == 0
        assert _values(_flat(consumer.poll(2000))) == [b"v%d" % i for i in range(10)]
        assert consumer.position(filled) == 10
        consumer.seek(filled, 7)
        assert [(r.offset, r.value) for r in _flat(consumer.poll(2000))] == [(7, b"v7"), (8, b"v8"), (9, b"v9")]
        consumer.seek_to_end(filled)
        assert consumer.position(filled) == 10
        assert _flat(consumer.poll(0)) == []


def test_consumer_skips_records_below_the_position_inside_a_batch(bootstrap, filled):
    with Consumer(bootstrap) as consumer:
        consumer.assign([filled])
        consumer.seek(filled, 4)  # the broker returns the whole batch starting at offset 0
        records = _flat(consumer.poll(2000))
    assert [r.offset for r in records] == [4, 5, 6, 7, 8, 9]


def test_consumer_seek_to_timestamp_and_offsets_for_times(bootstrap, filled):
    with Consumer(bootstrap) as consumer:
        consumer.assign([filled])
        assert consumer.offsets_for_times({filled: 3500}) == {filled: OffsetAndTimestamp(3, 4000)}
        assert consumer.offsets_for_times({filled: 99_000}) == {filled: None}
        consumer.seek_to_timestamp(5000)
        records = _flat(consumer.poll(2000))
        assert [(r.offset, r.timestamp) for r in records][:2] == [(4, 5000), (5, 6000)]
        consumer.seek_to_timestamp(99_000)  # later than every record: the log end
        assert consumer.position(filled) == 10


def test_consumer_starts_at_the_log_end_by_default_like_kafka(bootstrap, filled):
    with Consumer(bootstrap) as consumer:
        consumer.assign([filled])
        assert _flat(consumer.poll(200)) == []
        _produce(bootstrap, filled.topic, [b"late"])
        assert _values(_flat(consumer.poll(2000))) == [b"late"]


def test_consumer_long_poll_returns_as_soon_as_a_record_arrives(bootstrap, filled):
    with Consumer(bootstrap, fetch_max_wait_ms=10_000) as consumer:
        consumer.assign([filled])
        consumer.seek_to_end()
        consumer.position(filled)
        producing_at = []

        def produce_later():
            producing_at.append(time.monotonic())
            _produce(bootstrap, filled.topic, [b"wake"])

        producer = threading.Timer(0.3, produce_later)
        start = time.monotonic()
        producer.start()
        records = _flat(consumer.poll(10_000))
        returned = time.monotonic()
        producer.join(10)
    assert _values(records) == [b"wake"]
    # Answered when the record came (it cannot be sooner), not at the 10 s fetch.max.wait.
    assert returned - start >= 0.3
    assert returned - producing_at[0] < 5


def test_consumer_poll_waits_its_timeout_when_nothing_comes(bootstrap, filled):
    with Consumer(bootstrap) as consumer:
        consumer.assign([filled])
        consumer.seek_to_end()
        start = time.monotonic()
        assert _flat(consumer.poll(400)) == []
        assert 0.35 < time.monotonic() - start < 3


def test_consumer_offset_out_of_range_raises_a_typed_error_when_reset_is_none(bootstrap, filled):
    with Consumer(bootstrap, auto_offset_reset="none") as consumer:
        consumer.assign([filled])
        consumer.seek(filled, 50)
        with pytest.raises(OffsetOutOfRangeError) as info:
            _flat(consumer.poll(1000))
    assert (info.value.topic, info.value.partition) == (filled.topic, 0)
    assert info.value.error_message


def test_consumer_without_a_position_and_reset_none_raises(bootstrap, filled):
    with Consumer(bootstrap, auto_offset_reset="none") as consumer:
        consumer.assign([filled])
        with pytest.raises(NoOffsetForPartitionError):
            _flat(consumer.poll(0))


def test_consumer_out_of_range_position_resets_to_earliest(bootstrap, admin, filled):
    with Consumer(bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([filled])
        consumer.seek(filled, 2)
        admin.delete_records({filled: 6})  # the position now lies below the log start
        records = _flat(consumer.poll(2000))
    assert [r.offset for r in records] == [6, 7, 8, 9]


def test_consumer_unknown_partition_raises_a_typed_error(bootstrap, filled):
    with Consumer(bootstrap) as consumer:
        consumer.assign([(filled.topic, 9)])
        with pytest.raises(UnknownTopicOrPartitionError):
            _flat(consumer.poll(0))  # resolving the start position (list_offsets) fails
        consumer.seek((filled.topic, 9), 0)
        with pytest.raises(UnknownTopicOrPartitionError) as info:
            _flat(consumer.poll(0))  # and so does the fetch
    assert info.value.partition == 9


def test_consumer_subscribe_reads_every_partition(bootstrap, admin, topic):
    admin.create_topics([NewTopic(topic, 3)])
    for partition in range(3):
        _produce(bootstrap, topic, [b"p%d" % partition], partition=partition)
    with Consumer(bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.subscribe(topic)
        records = []
        deadline = time.monotonic() + 5
        while len(records) < 3 and time.monotonic() < deadline:
            records += _flat(consumer.poll(500))
        assert consumer.assignment() == {TopicPartition(topic, p) for p in range(3)}
    assert sorted((r.partition, r.value) for r in records) == [(0, b"p0"), (1, b"p1"), (2, b"p2")]


def test_consumer_max_poll_records_limits_each_poll_and_keeps_the_position(bootstrap, filled):
    with Consumer(bootstrap, auto_offset_reset="earliest", max_poll_records=4) as consumer:
        consumer.assign([filled])
        polls = [[r.offset for r in _flat(consumer.poll(2000))] for _ in range(3)]
        assert consumer.position(filled) == 10
    assert polls == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]


def test_consumer_iteration_stops_after_consumer_timeout(bootstrap, filled):
    with Consumer(bootstrap, auto_offset_reset="earliest", consumer_timeout_ms=300) as consumer:
        consumer.assign([filled])
        start = time.monotonic()
        values = _values(list(consumer))
    assert values == [b"v%d" % i for i in range(10)]
    assert time.monotonic() - start < 3


def test_consumer_beginning_and_end_offsets(bootstrap, admin, filled):
    admin.delete_records({filled: 3})
    with Consumer(bootstrap) as consumer:
        assert consumer.beginning_offsets([filled]) == {filled: 3}
        assert consumer.end_offsets([filled]) == {filled: 10}


def test_consumer_poll_rides_out_a_broker_restart(broker_factory_port, topic):
    start_broker, port = broker_factory_port
    bootstrap = f"127.0.0.1:{port}"
    first = start_broker(process=True)  # killed -9 below
    tp = TopicPartition(topic, 0)
    _produce(bootstrap, topic, [b"before"])
    with Consumer(bootstrap, auto_offset_reset="earliest", retry_backoff_ms=50) as consumer:
        consumer.assign([tp])
        assert _values(_flat(consumer.poll(2000))) == [b"before"]
        first.kill()

        produced = []

        def restart_and_produce():
            start_broker()
            produced.extend(_produce(bootstrap, topic, [b"after"]))

        restarter = threading.Timer(0.2, restart_and_produce)
        restarter.start()
        records = _flat(consumer.poll(15_000))  # the fetch fails while the broker is down, then resumes
        restarter.join(10)
    assert [(r.offset, r.value) for r in records] == [(1, b"after")]
    assert [md.offset for md in produced] == [1]


def test_poll_records_carry_every_field_straight_from_the_decoder(bootstrap, admin, topic):
    """Keys, null values, headers and the timestamp type reach ConsumerRecord exactly, on both paths."""
    admin.create_topics([NewTopic(topic, 1)])
    with Producer(bootstrap, linger_ms=60_000) as producer:
        producer.send(topic, b"v" * 300, key=b"k1", headers=[("h", b"x"), ("n", None)], partition=0, timestamp_ms=5)
        producer.send(topic, None, key=b"k2", partition=0, timestamp_ms=7)
    with Consumer(bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([(topic, 0)])
        records = _flat(consumer.poll(5000))
    assert records == [
        ConsumerRecord(topic, 0, 0, 5, b"k1", b"v" * 300, (("h", b"x"), ("n", None)), "CreateTime"),
        ConsumerRecord(topic, 0, 1, 7, b"k2", None, (), "CreateTime"),
    ]
    assert all(type(r) is ConsumerRecord for r in records)


def test_poll_columns_hands_out_the_records_as_columns(bootstrap, filled):
    with Consumer(bootstrap, auto_offset_reset="earliest", max_poll_records=6) as consumer:
        consumer.assign([filled])
        consumer.seek(filled, 2)  # inside the one batch: the records below are skipped
        polled = consumer.poll_columns(5000)
        assert list(polled) == [filled]
        columns = polled[filled]
        assert len(columns) == 6 and columns.offsets == [2, 3, 4, 5, 6, 7]
        assert columns.values == [b"v%d" % i for i in range(2, 8)]
        assert columns.timestamps == [1000 * (i + 1) for i in range(2, 8)]
        assert columns.keys == [None] * 6 and columns.headers == [()] * 6 and columns.types == [0] * 6
        assert consumer.position(filled) == 8
        # poll() goes on where poll_columns stopped, from the same fetched bytes
        assert [(r.offset, r.value) for r in _flat(consumer.poll(5000))] == [(8, b"v8"), (9, b"v9")]
        assert consumer.poll_columns(0) == {}


def test_poll_columns_after_poll_and_with_max_records(bootstrap, filled):
    with Consumer(bootstrap, auto_offset_reset="earliest", max_poll_records=3) as consumer:
        consumer.assign([filled])
        assert [r.offset for r in _flat(consumer.poll(5000))] == [0, 1, 2]  # 7 more stay buffered as records
        assert consumer.poll_columns(5000, max_records=4)[filled].offsets == [3, 4, 5, 6]
        assert consumer.poll_columns(5000, max_records=100)[filled].offsets == [7, 8, 9]
        consumer.seek(filled, 1)
        assert consumer.poll_columns(5000, max_records=2)[filled].offsets == [1, 2]  # a chunk split in two
        assert [r.offset for r in _flat(consumer.poll(5000))] == [3, 4, 5]  # the rest of the chunk as records


def test_poll_columns_to_arrow(bootstrap, filled):
    pa = pytest.importorskip("pyarrow")
    with Consumer(bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([filled])
        table = consumer.poll_columns(5000)[filled].to_arrow()
    assert table.num_rows == 10 and table.column("offset").to_pylist() == list(range(10))
    assert table.column("value").to_pylist() == [b"v%d" % i for i in range(10)]
    assert table.schema.field("key").type == pa.binary()


def test_poll_columns_refuses_a_consumer_with_deserializers(bootstrap, filled):
    with Consumer(bootstrap, value_deserializer=bytes.decode) as consumer:
        consumer.assign([filled])
        with pytest.raises(ValueError, match="deserializer"):
            consumer.poll_columns(0)


def test_a_batch_whose_records_do_not_decode_is_reported_after_the_good_ones_and_stays_next():
    """CRC-valid bytes whose records are broken (a broker bug or a disk fault the CRC missed): the
    records before it are handed out, then every poll raises CorruptMessageError for it."""
    from triolog.client.consumer_core import ConsumerConfig, ConsumerCore
    from triolog.protocol.record_batch import CRC_OFFSET, compute_crc
    from triolog.protocol.records import Record, encode_batch

    good = encode_batch([Record(i, 1000 + i, b"k", b"v%d" % i) for i in range(3)])
    bad = bytearray(encode_batch([Record(i, 2000, b"k", b"w") for i in range(3, 5)], base_offset=3))
    bad[61] = 0x7F  # the first record's length varint: -64, a negative record length
    bad[CRC_OFFSET:CRC_OFFSET + 4] = compute_crc(bad).to_bytes(4, "big")
    tp = TopicPartition("t", 0)
    consumer = ConsumerCore(ConsumerConfig(max_poll_records=2))
    consumer.assign([tp])
    consumer.seek(tp, 1)
    consumer._buffer(tp, consumer._states[tp], good + bytes(bad))
    assert [r.offset for r in consumer._drain(2)[tp]] == [1, 2]
    for _ in range(2):
        with pytest.raises(CorruptMessageError, match="record batch at base offset 3"):
            consumer._drain(2)
    consumer.seek(tp, 5)
    assert consumer._drain(2) == {}
