"""The record codec: varints, building and decoding batches, control records, and every decode error."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from triolog.protocol.compression import compress, decompress
from triolog.protocol.errors import CorruptRecordError, UnsupportedForMessageFormatError
from triolog.protocol.record_batch import (
    HEADER,
    CompressionType,
    TimestampType,
    check_batch,
    compute_crc,
    read_header,
)
from triolog.protocol.records import (
    END_TXN_MARKER_BATCH_SIZE,
    ControlRecordType,
    Record,
    RecordBatch,
    build_batch,
    decode_batch,
    decode_varint,
    decode_varlong,
    encode_batch,
    encode_end_txn_marker,
    encode_varint,
    encode_varlong,
    iter_batches,
    parse_control_record_key,
    parse_end_txn_marker_value,
)

INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)


def _raw_batch(payload: bytes, count: int, *, attributes: int = 0, base_offset: int = 0, base_timestamp: int = 0,
               max_timestamp: int = 0, last_offset_delta: int = 0) -> bytes:
    """A batch around hand-written record bytes, with a valid CRC, so decode errors come from the records."""
    batch = bytearray(HEADER.size + len(payload))
    HEADER.pack_into(batch, 0, base_offset, len(batch) - 12, -1, 2, 0, attributes, last_offset_delta,
                     base_timestamp, max_timestamp, -1, -1, -1, count)
    batch[HEADER.size:] = payload
    struct.pack_into(">I", batch, 17, compute_crc(batch))
    return bytes(batch)


# One record, base timestamp 0: length 8, attributes 0, ts delta 0, offset delta 0, key "k", value "v", 0 headers.
RECORD_KV = bytes.fromhex("10 00 00 00 02 6b 02 76 00")


# --- varint / varlong -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        (0, "00"),
        (-1, "01"),
        (1, "02"),
        (63, "7e"),
        (-64, "7f"),
        (64, "8001"),
        (300, "d804"),
        (2**31 - 1, "feffffff0f"),
        (-(2**31), "ffffffff0f"),
    ],
)
def test_varint_encodes_zigzag_leb128(value, encoded):
    assert encode_varint(value) == bytes.fromhex(encoded)
    assert decode_varint(bytes.fromhex(encoded)) == (value, len(encoded) // 2)


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        (0, "00"),
        (-1, "01"),
        (2**31, "8080808010"),
        (2**63 - 1, "feffffffffffffffff01"),
        (-(2**63), "ffffffffffffffffff01"),
    ],
)
def test_varlong_encodes_zigzag_leb128(value, encoded):
    assert encode_varlong(value) == bytes.fromhex(encoded)
    assert decode_varlong(bytes.fromhex(encoded)) == (value, len(encoded) // 2)


@given(INT32, st.binary(max_size=3))
def test_varint_round_trips_every_int32(value, prefix):
    encoded = encode_varint(value)
    assert 1 <= len(encoded) <= 5
    assert decode_varint(prefix + encoded + b"\xff", len(prefix)) == (value, len(prefix) + len(encoded))


@given(INT64)
def test_varlong_round_trips_every_int64(value):
    encoded = encode_varlong(value)
    assert 1 <= len(encoded) <= 10
    assert decode_varlong(encoded) == (value, len(encoded))


def test_varint_rejects_encodings_longer_than_5_bytes():
    with pytest.raises(CorruptRecordError, match="varint longer than 5 bytes"):
        decode_varint(bytes.fromhex("8080808080 00"))


def test_varlong_rejects_encodings_longer_than_10_bytes():
    with pytest.raises(CorruptRecordError, match="varlong longer than 10 bytes"):
        decode_varlong(bytes.fromhex("80808080808080808080 00"))


@pytest.mark.parametrize("decode", [decode_varint, decode_varlong])
@pytest.mark.parametrize("data", ["", "80", "ffff"])
def test_varint_rejects_truncated_input(decode, data):
    with pytest.raises(CorruptRecordError, match="truncated"):
        decode(bytes.fromhex(data))


def test_varint_drops_bits_beyond_32_in_the_fifth_byte_like_java():
    # Java's ByteUtils.readVarint shifts the fifth byte into an int: the high bits fall off.
    assert decode_varint(bytes.fromhex("ffffffff7f")) == (-(2**31), 5)
    assert decode_varint(bytes.fromhex("feffffff1f")) == (2**31 - 1, 5)
    assert decode_varlong(bytes.fromhex("ffffffffffffffffff7f")) == (-(2**63), 10)


@pytest.mark.parametrize(("encode", "value"), [(encode_varint, 2**31), (encode_varint, -(2**31) - 1),
                                               (encode_varlong, 2**63), (encode_varlong, -(2**63) - 1)])
def test_varint_encode_rejects_out_of_range_values(encode, value):
    with pytest.raises(ValueError, match="outside the int"):
        encode(value)


# --- encode: exact bytes ----------------------------------------------------------------------


def test_encode_batch_writes_kafkas_record_layout():
    batch = encode_batch([Record(0, 1_000, b"k", b"v")])
    assert batch[61:] == RECORD_KV
    header = read_header(batch)
    assert header.batch_length == len(batch) - 12 == 49 + len(RECORD_KV)
    assert (header.base_offset, header.last_offset_delta, header.records_count) == (0, 0, 1)
    assert (header.base_timestamp, header.max_timestamp) == (1_000, 1_000)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (-1, -1, -1)
    assert header.partition_leader_epoch == -1
    assert header.attributes == 0
    check_batch(batch)


def test_encode_batch_writes_null_key_value_and_headers():
    record = Record(3, 990, None, None, (("h", b"x"), ("é", None)))
    batch = encode_batch([record], base_offset=1)
    # attrs, ts delta 0, offset delta 2, key null, value null, 2 headers: "h"="x", "é"=null
    body = bytes.fromhex("00 00 04 01 01 04 02 68 02 78 04 c3a9 01")
    assert batch[61:] == bytes([len(body) * 2]) + body


def test_encode_end_txn_marker_is_kafkas_78_byte_control_batch():
    batch = encode_end_txn_marker(
        producer_id=4_000, producer_epoch=7, marker_type=ControlRecordType.COMMIT,
        coordinator_epoch=5, offset=1_234, timestamp=1_700_000_000_000,
    )
    assert len(batch) == END_TXN_MARKER_BATCH_SIZE == 78
    header = check_batch(batch)
    assert header.batch_length == 66
    assert header.attributes == 0x30  # transactional | control, uncompressed, CreateTime
    assert (header.base_offset, header.last_offset_delta, header.records_count) == (1_234, 0, 1)
    assert header.base_timestamp == header.max_timestamp == 1_700_000_000_000
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (4_000, 7, -1)
    # length 16 | attrs | ts delta | offset delta | key len 4 | v0 COMMIT | value len 6 | v0, epoch 5 | 0 headers
    assert batch[61:] == bytes.fromhex("20 00 00 00 08 0000 0001 0c 0000 00000005 00")


def test_encode_end_txn_marker_carries_abort_and_leader_epoch():
    batch = decode_batch(encode_end_txn_marker(1, 0, ControlRecordType.ABORT, 9, 0, 5, partition_leader_epoch=3))
    assert batch.control_type is ControlRecordType.ABORT
    assert batch.header.partition_leader_epoch == 3
    assert parse_end_txn_marker_value(batch.records[0].value) == 9


def test_encode_end_txn_marker_rejects_other_control_types():
    with pytest.raises(ValueError, match="COMMIT or ABORT"):
        encode_end_txn_marker(1, 0, ControlRecordType.LEADER_CHANGE, 0, 0, 0)


def test_encode_batch_of_no_records_is_kafkas_empty_header():
    batch = encode_batch([], base_offset=50, last_offset_delta=9, compression=CompressionType.ZSTD,
                         max_timestamp=777, producer_id=3, producer_epoch=1, base_sequence=10)
    assert len(batch) == 61
    header = check_batch(batch)
    assert header.compression is CompressionType.NONE
    assert (header.base_offset, header.last_offset, header.records_count) == (50, 59, 0)
    assert (header.base_timestamp, header.max_timestamp) == (-1, 777)
    assert decode_batch(batch).records == []
    assert read_header(encode_batch([])).max_timestamp == -1


def test_encode_batch_max_timestamp_starts_from_no_timestamp_like_kafka():
    batch = encode_batch([Record(0, -5, None, b"v"), Record(1, -3, None, b"v")])
    assert read_header(batch).max_timestamp == -1
    assert read_header(batch).base_timestamp == -5


def test_encode_batch_uses_the_given_max_timestamp():
    assert read_header(encode_batch([Record(0, 10, None, None)], max_timestamp=99)).max_timestamp == 99


def test_encode_batch_compresses_the_records_as_one_stream():
    records = [Record(i, 1_000, b"key", b"value" * 20) for i in range(50)]
    plain = encode_batch(records)
    for codec in (CompressionType.GZIP, CompressionType.SNAPPY, CompressionType.LZ4, CompressionType.ZSTD):
        batch = encode_batch(records, compression=codec)
        assert read_header(batch).compression is codec
        assert decompress(codec, batch[61:]) == plain[61:]
        assert len(batch) < len(plain)


@pytest.mark.parametrize(
    ("records", "kwargs", "message"),
    [
        ([Record(5, 0, None, None)], {"base_offset": 6}, "below the batch base offset"),
        ([Record(1, 0, None, None), Record(1, 0, None, None)], {}, "must strictly increase: 1 follows"),
        ([Record(2, 0, None, None), Record(1, 0, None, None)], {}, "must strictly increase: 1 follows 2"),
        ([Record(2**31, 0, None, None)], {}, "2\\^31-1"),
        ([Record(3, 0, None, None)], {"last_offset_delta": 2}, "below the last record's delta"),
        ([Record(0, 2**62 + 1, None, None), Record(1, -(2**62), None, None)], {}, "outside the int64"),
        ([Record(0, 0, None, None)], {"producer_epoch": 2**15}, "out of range"),
    ],
)
def test_encode_batch_rejects_unrepresentable_input(records, kwargs, message):
    with pytest.raises(ValueError, match=message):
        encode_batch(records, **kwargs)


def test_build_batch_numbers_offsets_from_zero_for_producers():
    batch = build_batch(
        [(b"a", b"1", 100, ()), (None, b"2", 90, [("h", b"x")]), (b"c", None, 110, ())],
        compression=CompressionType.LZ4, producer_id=8, producer_epoch=2, base_sequence=40, is_transactional=True,
    )
    decoded = decode_batch(batch)
    assert decoded.records == [
        Record(0, 100, b"a", b"1"), Record(1, 90, None, b"2", (("h", b"x"),)), Record(2, 110, b"c", None),
    ]
    header = decoded.header
    assert (header.base_offset, header.last_offset_delta, header.max_timestamp) == (0, 2, 110)
    assert header.compression is CompressionType.LZ4 and header.is_transactional
    assert (header.producer_id, header.producer_epoch, header.base_sequence, header.last_sequence) == (8, 2, 40, 42)


# --- round trips ------------------------------------------------------------------------------

HEADERS = st.lists(st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=8)), max_size=3).map(tuple)
TIMESTAMPS = st.integers(-(2**61), 2**61) | st.integers(-1, 2_000_000_000_000)


LIST_KEYS = st.none() | st.binary(max_size=20)  # (built once, not per record)
LIST_VALUES = st.none() | st.binary(max_size=60)
LIST_OFFSET_STEPS = st.integers(1, 1_000) | st.just(1)


@st.composite
def record_lists(draw, max_size=15):
    base_offset = draw(st.integers(0, 2**62))
    offset = base_offset + draw(st.integers(0, 3))
    records = []
    for _ in range(draw(st.integers(0, max_size))):
        records.append(Record(
            offset,
            draw(TIMESTAMPS),
            draw(LIST_KEYS),
            draw(LIST_VALUES),
            draw(HEADERS),
        ))
        offset += draw(LIST_OFFSET_STEPS)
    return base_offset, records


@settings(max_examples=150, deadline=None)
@given(
    generated=record_lists(),
    codec=st.sampled_from(CompressionType),
    timestamp_type=st.sampled_from(TimestampType),
    max_timestamp=st.none() | TIMESTAMPS,
    extra_delta=st.integers(0, 5),
    producer=st.tuples(st.integers(-1, 2**63 - 1), st.integers(-1, 2**15 - 1), st.integers(-1, 2**31 - 1)),
    leader_epoch=INT32,
    transactional=st.booleans(),
    control=st.booleans(),
    delete_horizon=st.none() | st.integers(0, 2**61),
)
def test_encode_then_decode_round_trips(generated, codec, timestamp_type, max_timestamp, extra_delta, producer,
                                        leader_epoch, transactional, control, delete_horizon):
    base_offset, records = generated
    last_delta = (records[-1].offset - base_offset) if records else 0
    producer_id, producer_epoch, base_sequence = producer
    batch = encode_batch(
        records, base_offset=base_offset, last_offset_delta=last_delta + extra_delta, compression=codec,
        timestamp_type=timestamp_type, max_timestamp=max_timestamp, producer_id=producer_id,
        producer_epoch=producer_epoch, base_sequence=base_sequence, partition_leader_epoch=leader_epoch,
        is_transactional=transactional, is_control=control, delete_horizon_ms=delete_horizon,
    )
    decoded = decode_batch(batch)
    header = decoded.header

    expected_max = max_timestamp
    if expected_max is None:
        expected_max = max([-1, *(r.timestamp for r in records)]) if records else -1
    if delete_horizon is not None:
        expected_base = delete_horizon
    else:
        expected_base = records[0].timestamp if records else -1
    assert header.size == len(batch)
    assert header.base_offset == decoded.base_offset == base_offset
    assert header.last_offset_delta == last_delta + extra_delta
    assert header.records_count == len(records) == len(decoded)
    assert header.compression is (codec if records else CompressionType.NONE)
    assert header.timestamp_type is decoded.timestamp_type is timestamp_type
    assert header.is_transactional is decoded.is_transactional is transactional
    assert header.is_control is decoded.is_control is control
    assert decoded.delete_horizon_ms == delete_horizon
    assert header.base_timestamp == expected_base
    assert header.max_timestamp == decoded.max_timestamp == expected_max
    assert (decoded.producer_id, decoded.producer_epoch, decoded.base_sequence) == producer
    assert header.partition_leader_epoch == leader_epoch
    if timestamp_type is TimestampType.LOG_APPEND_TIME:
        # LogAppendTime: every record reads as the batch's append time.
        records = [Record(r.offset, expected_max, r.key, r.value, r.headers) for r in records]
    assert decoded.records == records
    assert list(decoded) == records


@settings(max_examples=30, deadline=None)
@given(generated=record_lists(max_size=5), codec=st.sampled_from(CompressionType))
def test_decode_batch_accepts_bytes_bytearray_and_memoryview(generated, codec):
    base_offset, records = generated
    batch = encode_batch(records, base_offset=base_offset, compression=codec)
    expected = decode_batch(batch)
    assert decode_batch(bytearray(batch)) == expected
    assert decode_batch(memoryview(b"\x00" + batch)[1:]) == expected


def test_decode_batch_keeps_negative_deltas_under_a_delete_horizon():
    records = [Record(10, 5_000, b"k", None), Record(12, 7_000, b"j", b"v")]
    batch = encode_batch(records, base_offset=10, delete_horizon_ms=86_400_000)
    header = read_header(batch)
    assert header.attributes & 0x40 and header.base_timestamp == 86_400_000
    assert decode_batch(batch).records == records


def test_decode_batch_reads_log_append_time_from_max_timestamp():
    records = [Record(0, 1, b"a", b"b"), Record(1, 2, b"a", b"b")]
    batch = encode_batch(records, timestamp_type=TimestampType.LOG_APPEND_TIME, max_timestamp=1_234)
    assert [r.timestamp for r in decode_batch(batch).records] == [1_234, 1_234]


def test_record_batch_sequence_of_wraps_past_int32_max():
    batch = decode_batch(encode_batch([Record(100, 0, None, None), Record(103, 0, None, None)],
                                      base_offset=100, producer_id=1, producer_epoch=0, base_sequence=2**31 - 2))
    assert [batch.sequence_of(r) for r in batch.records] == [2**31 - 2, 1]
    no_sequence = decode_batch(encode_batch([Record(0, 0, None, None)]))
    assert no_sequence.sequence_of(no_sequence.records[0]) == -1


def test_record_batch_reports_offsets_and_size():
    raw = encode_batch([Record(7, 0, None, None)], base_offset=5, last_offset_delta=4)
    batch = decode_batch(raw)
    assert (batch.base_offset, batch.last_offset, batch.next_offset, batch.size) == (5, 9, 10, len(raw))
    assert batch.compression is CompressionType.NONE
    assert batch.control_type is None


def test_record_is_frozen_and_hashable():
    record = decode_batch(encode_batch([Record(0, 1, b"k", b"v", (("h", None),))])).records[0]
    assert record == Record(0, 1, b"k", b"v", (("h", None),))
    assert hash(record) == hash(Record(0, 1, b"k", b"v", (("h", None),)))
    with pytest.raises(AttributeError):
        record.offset = 1  # type: ignore[misc]


# --- decode errors ----------------------------------------------------------------------------


@pytest.mark.parametrize("codec", [CompressionType.NONE, CompressionType.GZIP, CompressionType.ZSTD])
def test_decode_batch_rejects_records_still_remaining(codec):
    payload = RECORD_KV * 2 if codec is CompressionType.NONE else compress(codec, RECORD_KV * 2)
    with pytest.raises(CorruptRecordError, match="records still remaining: 9 bytes after 1 records"):
        decode_batch(_raw_batch(payload, 1, attributes=codec))


@pytest.mark.parametrize("codec", [CompressionType.NONE, CompressionType.SNAPPY, CompressionType.LZ4])
def test_decode_batch_rejects_premature_eof(codec):
    payload = RECORD_KV if codec is CompressionType.NONE else compress(codec, RECORD_KV)
    with pytest.raises(CorruptRecordError, match="premature EOF reached: record 1 of 2 is missing"):
        decode_batch(_raw_batch(payload, 2, attributes=codec))


def test_decode_batch_rejects_a_record_longer_than_the_batch():
    with pytest.raises(CorruptRecordError, match="premature EOF reached: record 0 of 1 declares 16 bytes but 8 remain"):
        decode_batch(_raw_batch(bytes.fromhex("20") + RECORD_KV[1:], 1))


def test_decode_batch_rejects_a_negative_record_length():
    with pytest.raises(CorruptRecordError, match="declares -1 bytes"):
        decode_batch(_raw_batch(bytes.fromhex("01") + RECORD_KV[1:], 1))


def test_decode_batch_rejects_a_record_whose_fields_are_shorter_than_its_length():
    payload = bytes.fromhex("12") + RECORD_KV[1:] + b"\xff"
    with pytest.raises(CorruptRecordError, match="record 0 should take 9 bytes but its fields take 8"):
        decode_batch(_raw_batch(payload, 1))


def test_decode_batch_rejects_a_record_whose_fields_are_longer_than_its_length():
    payload = bytes.fromhex("0e") + RECORD_KV[1:] + RECORD_KV
    with pytest.raises(CorruptRecordError, match="record 0 should take 7 bytes but its fields take 8"):
        decode_batch(_raw_batch(payload, 2))


def test_decode_batch_rejects_fields_running_past_the_batch():
    # Length says 8, but the value claims 50 bytes.
    with pytest.raises(CorruptRecordError, match="record 0"):
        decode_batch(_raw_batch(bytes.fromhex("10 00 00 00 02 6b 64 76 00"), 1))


def test_decode_batch_rejects_a_negative_record_count():
    with pytest.raises(CorruptRecordError, match="negative record count -1"):
        decode_batch(_raw_batch(RECORD_KV, -1))


@pytest.mark.parametrize("codec_id", [5, 6, 7])
def test_decode_batch_rejects_unknown_codecs(codec_id):
    with pytest.raises(CorruptRecordError, match=f"unknown compression codec id {codec_id}"):
        decode_batch(_raw_batch(RECORD_KV, 1, attributes=codec_id))


def test_decode_batch_rejects_a_null_header_key():
    body = bytes.fromhex("00 00 00 02 6b 02 76 02 01 01")
    with pytest.raises(CorruptRecordError, match="header with a null key"):
        decode_batch(_raw_batch(bytes([len(body) * 2]) + body, 1))


def test_decode_batch_rejects_a_negative_header_count():
    body = bytes.fromhex("00 00 00 02 6b 02 76 01")
    with pytest.raises(CorruptRecordError, match="invalid number of headers -1"):
        decode_batch(_raw_batch(bytes([len(body) * 2]) + body, 1))


def test_decode_batch_rejects_more_headers_than_bytes():
    body = bytes.fromhex("00 00 00 02 6b 02 76 c801")  # 100 headers in 0 bytes
    with pytest.raises(CorruptRecordError, match="declares 100 headers in 0 bytes"):
        decode_batch(_raw_batch(bytes([len(body) * 2]) + body, 1))


def test_decode_batch_rejects_an_overlong_varint_inside_a_record():
    body = bytes.fromhex("00 00 ffffffffff01 01 01 00")
    with pytest.raises(CorruptRecordError, match="varint longer than 5 bytes"):
        decode_batch(_raw_batch(bytes([len(body) * 2]) + body, 1))


def test_decode_batch_rejects_a_bad_crc():
    batch = bytearray(encode_batch([Record(0, 0, b"k", b"v")]))
    batch[-2] ^= 0x10
    with pytest.raises(CorruptRecordError, match="is corrupt"):
        decode_batch(batch)


def test_decode_batch_rejects_a_corrupt_compressed_stream_with_a_valid_crc():
    with pytest.raises(CorruptRecordError, match="^zstd"):
        decode_batch(_raw_batch(b"\x28\xb5\x2f\xfd garbage", 1, attributes=CompressionType.ZSTD))


def test_decode_batch_reads_any_negative_key_or_value_length_as_null_like_kafka():
    body = bytes.fromhex("00 00 00 03 05 00")  # key length -2, value length -3
    record = decode_batch(_raw_batch(bytes([len(body) * 2]) + body, 1)).records[0]
    assert record.key is None and record.value is None


def test_decode_batch_replaces_malformed_utf8_in_header_keys_like_java():
    body = bytes.fromhex("00 00 00 01 01 02 04 61ff 01")
    record = decode_batch(_raw_batch(bytes([len(body) * 2]) + body, 1)).records[0]
    assert record.headers == (("a\ufffd", None),)


def test_decode_batch_does_not_parse_the_records_of_an_empty_batch():
    # Kafka's iterator returns nothing for count 0 without looking at the bytes.
    assert decode_batch(_raw_batch(b"\xff\xff", 0, attributes=CompressionType.GZIP)).records == []


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_decode_batch_of_damaged_records_raises_only_corrupt_record_error(data):
    good = encode_batch([Record(0, 5, b"key", b"value", (("h", b"v"),)), Record(1, 3, None, b"x" * 200)])
    payload = bytearray(good[61:])
    position = data.draw(st.integers(0, len(payload) - 1), label="position")
    payload[position] ^= data.draw(st.integers(1, 255), label="xor")
    count = data.draw(st.integers(1, 3), label="count")
    try:
        decode_batch(_raw_batch(bytes(payload), count, base_timestamp=5))
    except CorruptRecordError:
        pass


# --- iter_batches -----------------------------------------------------------------------------


def _three_batches() -> list[bytes]:
    return [
        encode_batch([Record(0, 1, b"a", b"1"), Record(1, 2, b"b", b"2")], compression=CompressionType.GZIP),
        encode_end_txn_marker(5, 0, ControlRecordType.COMMIT, 1, 2, 3),
        encode_batch([Record(3, 4, None, b"3")], base_offset=3, compression=CompressionType.ZSTD),
    ]


def test_iter_batches_decodes_back_to_back_batches():
    batches = list(iter_batches(b"".join(_three_batches())))
    assert [[r.offset for r in b.records] for b in batches] == [[0, 1], [2], [3]]
    assert [b.is_control for b in batches] == [False, True, False]
    assert all(isinstance(b, RecordBatch) for b in batches)


def test_iter_batches_of_nothing_is_empty():
    assert list(iter_batches(b"")) == []


@given(data=st.data())
def test_iter_batches_stops_silently_at_a_partial_last_batch(data):
    batches = _three_batches()
    last = batches[-1]
    cut = data.draw(st.integers(1, len(last) - 1), label="bytes missing")
    decoded = list(iter_batches(b"".join(batches)[:-cut]))
    assert [b.base_offset for b in decoded] == [0, 2]


def test_iter_batches_raises_on_a_corrupt_batch_before_the_end():
    first, second, third = _three_batches()
    damaged = bytearray(second)
    damaged[-1] ^= 1
    iterator = iter_batches(first + bytes(damaged) + third)
    assert next(iterator).base_offset == 0
    with pytest.raises(CorruptRecordError, match="corrupt"):
        next(iterator)


def test_iter_batches_rejects_an_unknown_magic():
    damaged = bytearray(_three_batches()[0])
    damaged[16] = 7
    with pytest.raises(CorruptRecordError, match="magic 7"):
        list(iter_batches(damaged))


@pytest.mark.parametrize("magic", [0, 1])
def test_iter_batches_rejects_legacy_magic_as_unsupported(magic):
    damaged = bytearray(_three_batches()[0])
    damaged[16] = magic
    with pytest.raises(UnsupportedForMessageFormatError, match=f"legacy magic {magic}"):
        list(iter_batches(damaged))


def test_iter_batches_rejects_a_length_below_an_empty_batch_even_when_partial():
    damaged = bytearray(_three_batches()[0][:20])
    struct.pack_into(">i", damaged, 8, 30)
    with pytest.raises(CorruptRecordError, match="declares length 30"):
        list(iter_batches(damaged))


# --- control records --------------------------------------------------------------------------


@pytest.mark.parametrize("control_type", [t for t in ControlRecordType if t is not ControlRecordType.UNKNOWN])
def test_parse_control_record_key_reads_every_known_type(control_type):
    assert parse_control_record_key(struct.pack(">hh", 0, control_type)) == (0, control_type)


def test_parse_control_record_key_maps_unknown_types_to_unknown():
    assert parse_control_record_key(struct.pack(">hh", 0, 99)) == (0, ControlRecordType.UNKNOWN)
    assert parse_control_record_key(struct.pack(">hh", 0, -7)) == (0, ControlRecordType.UNKNOWN)


def test_parse_control_record_key_reads_newer_versions_and_longer_keys():
    assert parse_control_record_key(struct.pack(">hh", 3, 1) + b"future") == (3, ControlRecordType.COMMIT)


def test_parse_control_record_key_rejects_a_negative_version():
    with pytest.raises(CorruptRecordError, match="invalid version -1"):
        parse_control_record_key(struct.pack(">hh", -1, 0))


@pytest.mark.parametrize("key", [None, b"", b"\x00\x00\x00"])
def test_parse_control_record_key_rejects_short_or_null_keys(key):
    with pytest.raises(CorruptRecordError, match="at least 4 bytes"):
        parse_control_record_key(key)


def test_parse_end_txn_marker_value_reads_the_coordinator_epoch():
    assert parse_end_txn_marker_value(struct.pack(">hi", 0, 2**31 - 1)) == 2**31 - 1
    assert parse_end_txn_marker_value(struct.pack(">hi", 1, 5) + b"tagged") == 5


def test_parse_end_txn_marker_value_rejects_corruption():
    with pytest.raises(CorruptRecordError, match="invalid version -2"):
        parse_end_txn_marker_value(struct.pack(">hi", -2, 5))
    for value in (None, b"\x00\x00\x00\x00\x00"):
        with pytest.raises(CorruptRecordError, match="at least 6 bytes"):
            parse_end_txn_marker_value(value)


def test_control_type_of_an_empty_control_batch_is_none():
    batch = decode_batch(encode_batch([], is_control=True, is_transactional=True))
    assert batch.is_control and batch.control_type is None


@settings(max_examples=150, deadline=None)
@given(
    timestamps=st.lists(st.integers(0, 10_000), min_size=1, max_size=30),
    target=st.integers(-5, 10_005),
    min_offset_delta=st.integers(0, 35),
    codec=st.sampled_from(list(CompressionType)),
    log_append_time=st.booleans(),
    big_values=st.booleans(),
)
def test_first_record_at_or_after_matches_a_full_decode(timestamps, target, min_offset_delta, codec,
                                                        log_append_time, big_values):
    from triolog.protocol.records import first_record_at_or_after

    base = 1_000
    value = b"v" * (300 if big_values else 3)  # multi-byte varint lengths too
    records = [Record(base + i * 2, ts, b"k%d" % i, value, (("h", b"x"),)) for i, ts in enumerate(timestamps)]
    batch = encode_batch(
        records, base_offset=base, compression=codec,
        timestamp_type=TimestampType.LOG_APPEND_TIME if log_append_time else TimestampType.CREATE_TIME,
        max_timestamp=7_777 if log_append_time else None,
    )
    min_offset = base + min_offset_delta
    expected = next(
        ((r.timestamp, r.offset) for r in decode_batch(batch).records if r.timestamp >= target and r.offset >= min_offset),
        None,
    )
    assert first_record_at_or_after(batch, target, min_offset) == expected


# --- the validation walk (protocol.record_walk) ------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(generated=record_lists(), big=st.booleans())
def test_walk_records_agrees_with_a_full_decode_on_valid_records(generated, big):
    from triolog.protocol.record_walk import walk_records

    base_offset, records = generated
    if big:  # values and deltas past the one- and two-byte varint fast paths
        records = [Record(r.offset, r.timestamp, r.key, (r.value or b"") * 200, r.headers) for r in records]
    batch = encode_batch(records, base_offset=base_offset)
    decoded = decode_batch(batch).records
    max_ts, max_index, in_sequence = walk_records(batch, 61, len(records), read_header(batch).base_timestamp)
    if not records:
        assert (max_ts, max_index, in_sequence) == (-1, -1, True)
        return
    expected_max = max(r.timestamp for r in decoded)
    assert max_ts == expected_max
    assert max_index == next(i for i, r in enumerate(decoded) if r.timestamp == expected_max)
    assert in_sequence == ([r.offset - base_offset for r in decoded] == list(range(len(records))))


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_walk_records_refuses_exactly_what_decoding_cannot_read(data):
    """The walk (broker) and the decoder (consumers) are separate loops: they must agree, or the
    broker would store batches that break consumers."""
    from triolog.protocol.errors import InvalidRecordError
    from triolog.protocol.record_walk import walk_records

    good = encode_batch([Record(0, 5, b"key", b"value", (("h", b"v"),)), Record(1, 3, None, b"x" * 200),
                         Record(2, 9, b"", None, (("a", None), ("b", b"")))])
    payload = bytearray(good[61:])
    for _ in range(data.draw(st.integers(1, 3), label="edits")):
        position = data.draw(st.integers(0, len(payload) - 1), label="position")
        if data.draw(st.booleans(), label="flip"):
            payload[position] ^= data.draw(st.integers(1, 255), label="xor")
        else:
            del payload[position:position + data.draw(st.integers(1, 3), label="length")]
    count = data.draw(st.integers(1, 4), label="count")
    batch = _raw_batch(bytes(payload), count, base_timestamp=5)
    try:
        decode_batch(batch)
        decodes = True
    except CorruptRecordError:
        decodes = False
    try:
        walk_records(batch, 61, count, 5)
        walks = True
    except InvalidRecordError:
        walks = False
    assert walks == decodes


def test_walk_records_checks_timestamps_and_keys_when_asked():
    from triolog.protocol.errors import InvalidRecordError, InvalidTimestampError
    from triolog.protocol.record_walk import walk_records

    batch = encode_batch([Record(0, 100, b"k", b"v"), Record(1, 250, None, b"v"), Record(2, -1, b"k", b"v")])
    base = read_header(batch).base_timestamp
    assert walk_records(batch, 61, 3, base, min_timestamp=100, max_timestamp=250) == (250, 1, True)
    with pytest.raises(InvalidTimestampError, match="Timestamp 250 of record 1") as error:
        walk_records(batch, 61, 3, base, max_timestamp=249)
    assert error.value.timestamp == 250
    with pytest.raises(InvalidTimestampError, match="Timestamp 100 of record 0"):
        walk_records(batch, 61, 3, base, min_timestamp=101)  # -1 (NO_TIMESTAMP) is exempt, 100 is not
    with pytest.raises(InvalidRecordError, match="without a key .record 1"):
        walk_records(batch, 61, 3, base, keys_required=True)


@settings(max_examples=100, deadline=None)
@given(generated=record_lists(max_size=10), big=st.booleans())
def test_renumber_records_rewrites_only_the_offset_deltas(generated, big):
    from triolog.protocol.record_walk import renumber_records, walk_records

    base_offset, records = generated
    if big:
        records = [Record(base_offset + (r.offset - base_offset) * 1000, r.timestamp, r.key, r.value, r.headers)
                   for r in records]
    batch = encode_batch(records, base_offset=base_offset)
    body = bytes(renumber_records(batch, 61, len(records)))
    rebuilt = _raw_batch(body, len(records), base_timestamp=read_header(batch).base_timestamp,
                         last_offset_delta=max(len(records) - 1, 0))
    assert walk_records(body, 0, len(records), read_header(batch).base_timestamp)[2] is True
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in decode_batch(rebuilt).records] == [
        (i, r.timestamp, r.key, r.value, r.headers) for i, r in enumerate(decode_batch(batch).records)]


def test_decode_batch_bounds_decompression_for_readers(monkeypatch):
    import triolog.protocol.compression as compression
    from triolog.protocol.compression import DecompressionLimitError

    records = [Record(i, 0, None, bytes(10_000)) for i in range(50)]  # ~500 KB of zeros
    batch = encode_batch(records, compression=CompressionType.ZSTD)
    assert len(decode_batch(batch).records) == 50
    monkeypatch.setattr(compression, "MAX_DECOMPRESSED_BYTES", 100_000)  # the default readers get
    with pytest.raises(DecompressionLimitError, match="zstd: record batch decompresses to more than 100000 bytes"):
        decode_batch(batch)
    with pytest.raises(CorruptRecordError):
        list(iter_batches(batch))
