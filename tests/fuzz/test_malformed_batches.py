"""Batches whose CRC is right but whose records contradict their header, produced to the real
broker (issue 10, item 2): each must be refused with CORRUPT_MESSAGE or INVALID_RECORD (or
INVALID_TIMESTAMP), store nothing, and leave the partition readable; a header max timestamp below
its records' is either refused or stored corrected (Kafka computes it), so list_offsets by time
finds the newest record.
"""

from __future__ import annotations

import itertools
import struct
import time

import pytest
from crc32c import crc32c

from triolog.protocol import messages as m
from triolog.protocol.errors import ErrorCode
from triolog.protocol.record_batch import CRC_OFFSET, CRC_START
from triolog.protocol.records import Record, encode_batch, iter_batches

_topics = itertools.count()


def _fix_crc(batch: bytearray) -> bytes:
    struct.pack_into(">I", batch, CRC_OFFSET, crc32c(memoryview(batch)[CRC_START:]))
    return bytes(batch)


def _records(n: int, now: int) -> list[Record]:
    return [Record(i, now - 1000 + i, b"key-%d" % i, b"value-%d" % i) for i in range(n)]


def count_claims_more(now: int) -> bytes:
    """Two records, header says three (last offset delta and count patched, CRC recomputed)."""
    batch = bytearray(encode_batch(_records(2, now)))
    struct.pack_into(">i", batch, 23, 2)
    struct.pack_into(">i", batch, 57, 3)
    return _fix_crc(batch)


def garbage_records(now: int) -> bytes:
    batch = bytearray(encode_batch(_records(2, now)))
    batch[61:] = bytes((i * 37) & 0xFF for i in range(len(batch) - 61))
    return _fix_crc(batch)


def gzip_flag_over_plain_bytes(now: int) -> bytes:
    batch = bytearray(encode_batch(_records(2, now)))
    struct.pack_into(">h", batch, 21, 1)
    return _fix_crc(batch)


def offset_deltas_not_contiguous(now: int) -> bytes:
    records = [Record(0, now, b"a", b"1"), Record(5, now, b"b", b"2"), Record(6, now, b"c", b"3")]
    batch = bytearray(encode_batch(records))
    struct.pack_into(">i", batch, 23, 2)  # the header claims deltas 0..2
    return _fix_crc(batch)


def offset_delta_negative(now: int) -> bytes:
    """Record 0's offset delta -1 (found by the fuzzer): on a topic with its own codec the broker
    rebuilds the batch."""
    batch = bytearray(encode_batch([Record(0, now, b"a", b"1"), Record(1, now, b"b", b"2")]))
    batch[64] = 1  # zig-zag -1; bytes 61-63 are the record's length, attributes and timestamp delta 0
    return _fix_crc(batch)


def record_far_in_the_future(now: int) -> bytes:
    records = [Record(0, now, b"a", b"1"), Record(1, now + 10 * 86_400_000, b"b", b"2")]
    return encode_batch(records, max_timestamp=now)


STRUCTURAL = [count_claims_more, garbage_records, gzip_flag_over_plain_bytes]


def _create(client, configs=None) -> str:
    name = f"malformed-{next(_topics)}"
    doc = client.call(m.CreateTopicsRequest(id=client.next_id(), topics=(
        m.NewTopic(name=name, num_partitions=1, replication_factor=1, configs=configs or {}),)))
    assert doc["topics"][0]["error_code"] == ErrorCode.NONE, doc
    return name


def _produce(client, topic: str, records: bytes) -> dict:
    doc = client.call(m.ProduceRequest(id=client.next_id(), acks=-1, timeout_ms=10_000, topics=(
        m.ProduceTopic(name=topic, partitions=(m.ProducePartition(partition=0, records=records),)),)))
    return doc["topics"][0]["partitions"][0]


def _fetch_all(client, topic: str) -> dict:
    doc = client.call(m.FetchRequest(id=client.next_id(), max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, topics=(
        m.FetchTopic(name=topic, partitions=(m.FetchPartition(partition=0, fetch_offset=0,
                                                              partition_max_bytes=1 << 20),)),)))
    return doc["topics"][0]["partitions"][0]


def _assert_nothing_stored_and_readable(client, topic: str, now: int) -> None:
    good = _produce(client, topic, encode_batch(_records(2, now)))
    assert good["error_code"] == ErrorCode.NONE and good["base_offset"] == 0, good
    fetched = _fetch_all(client, topic)
    assert [r.value for b in iter_batches(fetched["records"]) for r in b.records] == [b"value-0", b"value-1"]


@pytest.mark.parametrize("make", STRUCTURAL, ids=[f.__name__ for f in STRUCTURAL])
def test_batch_whose_records_contradict_its_header_is_refused(broker, make):
    client = broker.client()
    try:
        now = int(time.time() * 1000)
        topic = _create(client)
        result = _produce(client, topic, make(now))
        assert result["error_code"] in (ErrorCode.CORRUPT_MESSAGE, ErrorCode.INVALID_RECORD), result
        _assert_nothing_stored_and_readable(client, topic, now)
    finally:
        client.close()


@pytest.mark.parametrize("configs", [{}, {"compression.type": "zstd"}], ids=["in-place", "recompressed"])
def test_batch_with_inner_offsets_not_contiguous_is_stored_renumbered(broker, configs):
    """Kafka rebuilds a batch whose inner offsets are not 0..n-1 instead of refusing it; a consumer
    then sees every record once, at consecutive offsets."""
    client = broker.client()
    try:
        now = int(time.time() * 1000)
        topic = _create(client, configs)
        result = _produce(client, topic, offset_deltas_not_contiguous(now))
        assert result["error_code"] == ErrorCode.NONE and result["base_offset"] == 0, result
        (batch,) = iter_batches(_fetch_all(client, topic)["records"])
        assert [(r.offset, r.value) for r in batch.records] == [(0, b"1"), (1, b"2"), (2, b"3")]
        assert batch.header.last_offset_delta == 2
    finally:
        client.close()


def test_batch_with_a_negative_offset_delta_is_renumbered_on_a_recompressing_topic(broker):
    """Found by the fuzzer: a negative inner offset delta on a topic with its own codec once made
    the rebuild raise ValueError (UNKNOWN_SERVER_ERROR); now it is renumbered as Kafka does."""
    client = broker.client()
    try:
        now = int(time.time() * 1000)
        topic = _create(client, {"compression.type": "zstd"})
        result = _produce(client, topic, offset_delta_negative(now))
        assert result["error_code"] == ErrorCode.NONE and result["base_offset"] == 0, result
        (batch,) = iter_batches(_fetch_all(client, topic)["records"])
        assert [(r.offset, r.value) for r in batch.records] == [(0, b"1"), (1, b"2")]
    finally:
        client.close()


def test_record_timestamp_outside_the_allowed_window_is_refused(broker):
    client = broker.client()
    try:
        now = int(time.time() * 1000)
        topic = _create(client, {"message.timestamp.after.max.ms": "3600000"})
        result = _produce(client, topic, record_far_in_the_future(now))
        assert result["error_code"] == ErrorCode.INVALID_TIMESTAMP, result
        _assert_nothing_stored_and_readable(client, topic, now)
    finally:
        client.close()


def test_header_max_timestamp_below_its_records_is_refused_or_corrected(broker):
    client = broker.client()
    try:
        now = int(time.time() * 1000)
        topic = _create(client)
        records = _records(4, now)
        result = _produce(client, topic, encode_batch(records, max_timestamp=records[0].timestamp))
        if result["error_code"] != ErrorCode.NONE:
            assert result["error_code"] in (ErrorCode.CORRUPT_MESSAGE, ErrorCode.INVALID_RECORD,
                                            ErrorCode.INVALID_TIMESTAMP), result
            return
        newest = records[-1].timestamp
        doc = client.call(m.ListOffsetsRequest(id=client.next_id(), topics=(m.ListOffsetsTopic(
            name=topic, partitions=(m.ListOffsetsPartition(partition=0, timestamp=newest),)),)))
        found = doc["topics"][0]["partitions"][0]
        assert (found["offset"], found["timestamp"]) == (3, newest), found
        (batch,) = iter_batches(_fetch_all(client, topic)["records"])
        assert batch.header.max_timestamp == newest
    finally:
        client.close()
