"""The 61-byte header view and the framing checks the broker runs on every produced batch."""

from __future__ import annotations

import struct

import pytest
from crc32c import crc32c
from hypothesis import given, settings
from hypothesis import strategies as st

from triolog.protocol.errors import CorruptRecordError, UnsupportedForMessageFormatError
from triolog.protocol import record_batch
from triolog.protocol.record_batch import (
    HEADER,
    HEADER_SIZE,
    BatchHeader,
    CompressionType,
    TimestampType,
    check_batch,
    compute_crc,
    fields_struct,
    offset_of,
    read_header,
    split_batches,
)
from triolog.protocol.records import Record, encode_batch


def _raw_batch(
    *,
    base_offset=0,
    leader_epoch=-1,
    magic=2,
    attributes=0,
    last_offset_delta=0,
    base_timestamp=-1,
    max_timestamp=-1,
    producer_id=-1,
    producer_epoch=-1,
    base_sequence=-1,
    count=0,
    payload=b"",
    crc=None,
) -> bytes:
    """A batch assembled field by field with struct and crc32c, independent of the codec under test."""
    after_crc = struct.pack(
        ">hiqqqhii",
        attributes,
        last_offset_delta,
        base_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        count,
    ) + payload
    if crc is None:
        crc = crc32c(after_crc)
    batch_length = 4 + 1 + 4 + len(after_crc)
    return struct.pack(">qiibI", base_offset, batch_length, leader_epoch, magic, crc) + after_crc


def _sample_batch(base_offset=0, n=3) -> bytes:
    records = [Record(base_offset + i, 1_000 + i, b"k%d" % i, b"value-%d" % i) for i in range(n)]
    return encode_batch(records, base_offset=base_offset)


#: Kafka's DefaultRecordBatch constants (clients/.../record/DefaultRecordBatch.java), by our names.
KAFKA_OFFSETS = {
    "BASE_OFFSET_OFFSET": 0, "BATCH_LENGTH_OFFSET": 8, "PARTITION_LEADER_EPOCH_OFFSET": 12, "MAGIC_OFFSET": 16,
    "CRC_OFFSET": 17, "ATTRIBUTES_OFFSET": 21, "LAST_OFFSET_DELTA_OFFSET": 23, "BASE_TIMESTAMP_OFFSET": 27,
    "MAX_TIMESTAMP_OFFSET": 35, "PRODUCER_ID_OFFSET": 43, "PRODUCER_EPOCH_OFFSET": 51, "BASE_SEQUENCE_OFFSET": 53,
    "RECORDS_COUNT_OFFSET": 57, "HEADER_SIZE": 61, "LOG_OVERHEAD": 12,
}


def test_layout_offsets_are_kafkas():
    assert {name: getattr(record_batch, name) for name in KAFKA_OFFSETS} == KAFKA_OFFSETS


_FIELD_VALUES = {
    "q": st.integers(-(1 << 63), (1 << 63) - 1), "i": st.integers(-(1 << 31), (1 << 31) - 1),
    "I": st.integers(0, (1 << 32) - 1), "h": st.integers(-(1 << 15), (1 << 15) - 1), "b": st.integers(-128, 127),
}


@given(data=st.data())
def test_each_field_struct_reads_at_its_offset_what_the_whole_header_holds(data):
    """A module that reads or patches one field (the validator, the log, the producer) with
    fields_struct at offset_of sees exactly the value read_header sees, and a patch changes only it."""
    values = [data.draw(_FIELD_VALUES[code]) for code in HEADER.format[1:]]
    raw = bytearray(HEADER.pack(*values))
    names = BatchHeader._fields
    first = data.draw(st.sampled_from(names))
    last = data.draw(st.sampled_from(names[names.index(first):]))
    fields = fields_struct(first, last)
    chosen = values[names.index(first):names.index(last) + 1]
    assert list(fields.unpack_from(raw, offset_of(first))) == chosen
    replacement = [data.draw(_FIELD_VALUES[code]) for code in fields.format[1:]]
    fields.pack_into(raw, offset_of(first), *replacement)
    expected = values[:names.index(first)] + replacement + values[names.index(last) + 1:]
    assert list(read_header(raw)) == expected


def test_read_header_decodes_every_field_and_derived_property():
    raw = _raw_batch(
        base_offset=1_000,
        leader_epoch=7,
        attributes=0x04 | 0x08 | 0x10 | 0x20 | 0x40,
        last_offset_delta=9,
        base_timestamp=5_000,
        max_timestamp=6_000,
        producer_id=42,
        producer_epoch=3,
        base_sequence=100,
        count=10,
    )
    header = read_header(raw)
    assert header == BatchHeader(1_000, 49, 7, 2, crc32c(raw[21:]), 0x7C, 9, 5_000, 6_000, 42, 3, 100, 10)
    assert header.size == HEADER_SIZE == len(raw)
    assert header.last_offset == 1_009
    assert header.next_offset == 1_010
    assert header.compression is CompressionType.ZSTD
    assert header.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert header.is_transactional and header.is_control and header.has_delete_horizon
    assert header.delete_horizon_ms == 5_000
    assert header.last_sequence == 109


def test_read_header_without_flags_reports_defaults():
    header = read_header(_raw_batch())
    assert header.compression is CompressionType.NONE
    assert header.timestamp_type is TimestampType.CREATE_TIME
    assert not (header.is_transactional or header.is_control or header.has_delete_horizon)
    assert header.delete_horizon_ms is None
    assert header.last_sequence == -1


def test_read_header_last_sequence_wraps_past_int32_max():
    header = read_header(_raw_batch(base_sequence=2**31 - 2, last_offset_delta=4))
    assert header.last_sequence == 2


def test_read_header_at_position_reads_the_batch_there():
    first, second = _sample_batch(0), _sample_batch(3)
    assert read_header(first + second, len(first)).base_offset == 3


def test_codec_and_timestamp_type_use_kafka_names():
    assert [c.kafka_name for c in CompressionType] == ["none", "gzip", "snappy", "lz4", "zstd"]
    assert TimestampType.CREATE_TIME.kafka_name == "CreateTime"
    assert TimestampType.LOG_APPEND_TIME.kafka_name == "LogAppendTime"


def test_compute_crc_covers_attributes_to_end():
    raw = _sample_batch()
    assert compute_crc(raw) == crc32c(raw[21:]) == read_header(raw).crc


def test_check_batch_accepts_a_valid_batch_and_returns_its_header():
    raw = _sample_batch(base_offset=5)
    assert check_batch(raw) == read_header(raw)
    assert check_batch(bytearray(raw)) == read_header(raw)
    assert check_batch(memoryview(raw)) == read_header(raw)


def test_check_batch_accepts_an_empty_batch():
    assert check_batch(_raw_batch()).records_count == 0


@pytest.mark.parametrize("length", [0, 1, 17, 60])
def test_check_batch_rejects_buffers_shorter_than_the_header(length):
    with pytest.raises(CorruptRecordError, match="shorter than the 61-byte header"):
        check_batch(_sample_batch()[:length])


@pytest.mark.parametrize("magic", [0, 1, 3, -1])
def test_check_batch_rejects_other_magics(magic):
    with pytest.raises(CorruptRecordError, match=f"magic {magic}"):
        check_batch(_raw_batch(magic=magic))


def test_check_batch_rejects_a_buffer_longer_or_shorter_than_declared():
    raw = _sample_batch()
    with pytest.raises(CorruptRecordError, match="declares"):
        check_batch(raw + b"\x00")
    with pytest.raises(CorruptRecordError, match="declares"):
        check_batch(raw[:-1])


def test_check_batch_rejects_a_wrong_stored_crc():
    raw = _raw_batch(crc=12345)
    with pytest.raises(CorruptRecordError, match="stored crc = 12345"):
        check_batch(raw)


@settings(max_examples=200)
@given(data=st.data())
def test_check_batch_detects_any_byte_flip_in_the_crc_range(data):
    raw = _sample_batch()
    position = data.draw(st.integers(21, len(raw) - 1), label="position")
    flip = data.draw(st.integers(1, 255), label="xor")
    corrupt = bytearray(raw)
    corrupt[position] ^= flip
    with pytest.raises(CorruptRecordError, match="corrupt"):
        check_batch(corrupt)


@pytest.mark.parametrize("position", [*range(0, 8), *range(12, 16)])
def test_check_batch_ignores_base_offset_and_leader_epoch_outside_the_crc(position):
    # The broker restamps both on append without recomputing the CRC.
    corrupt = bytearray(_sample_batch())
    corrupt[position] ^= 0x5A
    check_batch(corrupt)


def test_check_batch_detects_a_flipped_crc_byte():
    corrupt = bytearray(_sample_batch())
    corrupt[18] ^= 1
    with pytest.raises(CorruptRecordError, match="corrupt"):
        check_batch(corrupt)


def test_split_batches_frames_back_to_back_batches():
    batches = [_sample_batch(0, 3), _raw_batch(base_offset=3), _sample_batch(4, 1)]
    framed = split_batches(b"".join(batches))
    assert [position for position, _ in framed] == [0, len(batches[0]), len(batches[0]) + len(batches[1])]
    assert [header for _, header in framed] == [read_header(b) for b in batches]


def test_split_batches_of_an_empty_buffer_is_empty():
    assert split_batches(b"") == []


def test_split_batches_does_not_check_crcs():
    corrupt = bytearray(_sample_batch())
    corrupt[-1] ^= 0xFF
    assert len(split_batches(corrupt)) == 1


@given(data=st.data())
def test_split_batches_rejects_a_truncated_last_batch(data):
    last = _sample_batch(3)
    buffer = _sample_batch(0) + last
    cut = data.draw(st.integers(1, len(last) - 1), label="bytes cut")
    with pytest.raises(CorruptRecordError, match="trailing bytes|remain"):
        split_batches(buffer[:-cut])


def test_split_batches_rejects_trailing_bytes_shorter_than_the_magic():
    with pytest.raises(CorruptRecordError, match="16 trailing bytes at position"):
        split_batches(_sample_batch() + bytes(16))


def test_split_batches_rejects_an_unknown_magic():
    with pytest.raises(CorruptRecordError, match="magic 3"):
        split_batches(_sample_batch() + _raw_batch(magic=3))


@pytest.mark.parametrize("magic", [0, 1])
def test_split_batches_rejects_legacy_magic_as_unsupported(magic):
    with pytest.raises(UnsupportedForMessageFormatError, match=f"legacy magic {magic}"):
        split_batches(_raw_batch(magic=magic))


@pytest.mark.parametrize("batch_length", [-1, 0, 14, 48])
def test_split_batches_rejects_a_length_below_the_empty_batch(batch_length):
    raw = bytearray(_raw_batch())
    struct.pack_into(">i", raw, 8, batch_length)
    with pytest.raises(CorruptRecordError, match=f"declares length {batch_length}, below the minimum 49"):
        split_batches(raw)
