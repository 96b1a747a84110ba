"""The leader's batch validator: every record walked, the max timestamp computed, bad batches refused
with Kafka's error codes, offsets rebuilt where Kafka rebuilds them, decompression bounded."""

from __future__ import annotations

import struct
import tracemalloc
import zlib

import cramjam
import lz4.frame
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from triolog.broker.storage.validator import (
    DECOMPRESSION_FACTOR,
    decompression_limit,
    validate_and_assign_offsets,
    with_base_offset,
)
from triolog.config.log_config import LogConfig
from triolog.protocol.compression import GZIP_HEADER, XERIAL_HEADER, compress
from triolog.protocol.errors import (
    CorruptRecordError,
    ErrorCode,
    InvalidRecordError,
    InvalidTimestampError,
    RecordTooLargeError,
    TriologError,
)
from triolog.protocol.record_batch import HEADER, HEADER_SIZE, CompressionType, TimestampType, check_batch, compute_crc
from triolog.protocol.records import Record, decode_batch, encode_batch, encode_varint, encode_varlong

NOW = 1_700_000_000_000
CODECS = list(CompressionType)
COMPRESSED = [c for c in CompressionType if c is not CompressionType.NONE]
MiB = 1 << 20


def config(**overrides) -> LogConfig:
    return LogConfig().with_overrides({k: str(v) for k, v in overrides.items()}) if overrides else LogConfig()


def validate(batch, cfg: LogConfig | None = None, *, offset: int = 100, now_ms: int = NOW, leader_epoch: int = 7):
    return validate_and_assign_offsets(batch, offset=offset, config=cfg or config(), now_ms=now_ms,
                                       leader_epoch=leader_epoch)


def stored(validated) -> bytes:
    return b"".join(bytes(part) for part in validated.records)


def record(offset_delta: int, timestamp_delta: int = 0, key: bytes | None = b"k", value: bytes | None = b"v",
           headers: tuple = (), *, length_adjust: int = 0) -> bytes:
    """One record written out field by field (Kafka's DefaultRecord), with a settable length error."""
    body = b"\x00" + encode_varlong(timestamp_delta) + encode_varint(offset_delta)
    body += b"\x01" if key is None else encode_varint(len(key)) + key
    body += b"\x01" if value is None else encode_varint(len(value)) + value
    body += encode_varint(len(headers))
    for header_key, header_value in headers:
        body += encode_varint(len(header_key)) + header_key
        body += b"\x01" if header_value is None else encode_varint(len(header_value)) + header_value
    return encode_varint(len(body) + length_adjust) + body


def raw_batch(records: bytes, count: int, *, codec: CompressionType = CompressionType.NONE, base_timestamp: int = NOW,
              max_timestamp: int | None = None, last_offset_delta: int | None = None, attributes: int = 0,
              compressed_body: bytes | None = None) -> bytes:
    """A producer batch around hand-written record bytes with a correct CRC: what a client with a
    broken serializer sends. ``codec`` compresses the records (or sets only the flag, with
    ``compressed_body`` given as is)."""
    body = compressed_body if compressed_body is not None else compress(codec, records)
    batch = bytearray(HEADER_SIZE + len(body))
    HEADER.pack_into(batch, 0, 0, len(batch) - 12, -1, 2, 0, codec | attributes,
                     count - 1 if last_offset_delta is None else last_offset_delta, base_timestamp,
                     base_timestamp if max_timestamp is None else max_timestamp, -1, -1, -1, count)
    batch[HEADER_SIZE:] = body
    struct.pack_into(">I", batch, 17, compute_crc(batch))
    return bytes(batch)


def records_of(data: bytes) -> list[Record]:
    return decode_batch(data).records


# --- the common path ----------------------------------------------------------------------------


def test_valid_batch_is_stored_with_a_patched_header_and_a_view_of_the_producer_bytes():
    batch = encode_batch([Record(i, NOW + i, b"k%d" % i, b"v" * i) for i in range(5)])
    validated = validate(batch)
    head, body = validated.records
    assert len(head) == HEADER_SIZE and isinstance(body, memoryview) and body.obj is batch  # one pwritev, no copy
    assert (validated.first_offset, validated.last_offset, validated.record_count) == (100, 104, 5)
    assert (validated.max_timestamp, validated.shallow_offset_of_max_timestamp) == (NOW + 4, 104)
    assert validated.offset_of_max_timestamp == 104 and validated.log_append_time_ms == -1
    out = stored(validated)
    decoded = decode_batch(out)
    assert decoded.header.base_offset == 100 and decoded.header.partition_leader_epoch == 7
    assert [r.offset for r in decoded.records] == [100, 101, 102, 103, 104]
    assert out[HEADER_SIZE:] == batch[HEADER_SIZE:] and out[17:21] == batch[17:21]  # CRC untouched


@pytest.mark.parametrize("codec", COMPRESSED, ids=lambda c: c.kafka_name)
def test_compressed_batch_is_walked_and_kept_compressed_as_sent(codec):
    records = [Record(i, NOW - 10 * i, b"key", b"value %d" % i, (("h", b"x"),)) for i in range(20)]
    batch = encode_batch(records, compression=codec)
    validated = validate(batch)
    assert validated.records[1].obj is batch
    assert validated.max_timestamp == NOW and validated.offset_of_max_timestamp == 100
    assert stored(validated)[HEADER_SIZE:] == batch[HEADER_SIZE:]
    assert [r.value for r in records_of(stored(validated))] == [r.value for r in records]


def test_offset_of_max_timestamp_is_the_first_record_carrying_it():
    batch = encode_batch([Record(0, NOW - 5, None, b"a"), Record(1, NOW, None, b"b"), Record(2, NOW, None, b"c"),
                          Record(3, NOW - 9, None, b"d")])
    validated = validate(batch)
    assert (validated.max_timestamp, validated.offset_of_max_timestamp) == (NOW, 101)
    assert validated.shallow_offset_of_max_timestamp == 103  # Kafka's time index uses the batch's last offset


# --- the record count against the records -------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.kafka_name)
@pytest.mark.parametrize(("claimed", "present"), [(3, 2), (8, 5), (2, 3), (1, 4)])
def test_record_count_that_disagrees_with_the_records_is_invalid_record(codec, claimed, present):
    records = b"".join(record(i) for i in range(present))
    with pytest.raises(InvalidRecordError, match="Incorrect declared batch size") as error:
        validate(raw_batch(records, claimed, codec=codec))
    assert error.value.code == ErrorCode.INVALID_RECORD
    message = str(error.value)
    assert ("premature EOF" in message) if claimed > present else ("records still remaining" in message)


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.kafka_name)
@pytest.mark.parametrize("garbage", [b"\xff" * 40, b"\x47" * 100, b"\x00" * 10, bytes(range(256))],
                         ids=["overlong-varint", "negative-length", "zeros", "every-byte"])
def test_garbage_records_with_a_valid_crc_are_invalid_record(codec, garbage):
    with pytest.raises(InvalidRecordError) as error:
        validate(raw_batch(garbage, 2, codec=codec))
    assert error.value.code == ErrorCode.INVALID_RECORD


@pytest.mark.parametrize(
    ("broken", "message"),
    [
        (record(0, length_adjust=+3), "Invalid record size"),  # length prefix past the batch
        (record(0, length_adjust=-1) + b"\x00", "Invalid record size"),  # fields longer than the length
        (record(0, length_adjust=+1) + b"\x00", "Invalid record size"),  # fields shorter than the length
        (record(0, length_adjust=-100), "Invalid record size"),  # negative length
        # a 6-byte varint as the header count
        (b"\x14\x00\x00\x00\x02k\x02v\x81\x81\x81\x81\x81\x01" + b"\x00" * 6, "invalid record structure"),
        (b"\x0c\x00\x00\x00\x02k\x02v\x01\x00\x00\x00\x00", "invalid number of record headers -1"),
        (b"\x14\x00\x00\x00\x02k\x02v\x02\x01\x00", "negative header key size"),
        (b"\x10\x00\x00\x00\x02k\x02v\x7e\x00\x00\x00\x00", "invalid number of record headers"),  # 63 headers
        (b"\x10\x00\x00\x00\x40k\x02v\x00" + b"\x00" * 40, "Invalid record size"),  # key runs past its record
        (b"\x10\x00\x00\x00\x02k\x7ev\x00" + b"\x00" * 80, "Invalid record size"),  # value runs past it
        (b"\x10\x00\x00\x00\x02k\x7ev\x00", "premature EOF"),  # value runs past the batch
    ],
    ids=["length-past-end", "length-short", "length-long", "length-negative", "varint-6-bytes", "headers-negative",
         "header-null-key", "headers-more-than-bytes", "key-past-record", "value-past-record", "value-past-batch"],
)
def test_malformed_record_fields_are_invalid_record(broken, message):
    with pytest.raises(InvalidRecordError, match=message):
        validate(raw_batch(broken, 1))
    # The same record bytes a consumer would choke on: the walk refuses exactly what decoding cannot read.
    with pytest.raises(CorruptRecordError):
        decode_batch(raw_batch(broken, 1))


# --- codecs -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", COMPRESSED, ids=lambda c: c.kafka_name)
def test_codec_flag_over_plain_record_bytes_is_corrupt_message(codec):
    plain = b"".join(record(i, value=b"plain value %d" % i) for i in range(3))
    batch = raw_batch(b"", 3, codec=codec, compressed_body=plain)
    with pytest.raises(CorruptRecordError, match=f"do not decompress: {codec.kafka_name}") as error:
        validate(batch)
    assert error.value.code == ErrorCode.CORRUPT_MESSAGE


@pytest.mark.parametrize("codec", COMPRESSED, ids=lambda c: c.kafka_name)
def test_garbage_after_decompression_is_invalid_record_as_in_kafka(codec):
    with pytest.raises(InvalidRecordError):
        validate(raw_batch(b"\xff" * 30 + b"garbage", 1, codec=codec))


def test_unknown_codec_id_is_corrupt_message():
    with pytest.raises(CorruptRecordError, match="unknown compression codec id 6"):
        validate(raw_batch(record(0), 1, attributes=6))


# --- offset deltas ----------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.kafka_name)
@pytest.mark.parametrize("deltas", [(0, 2, 5), (0, 0, 0), (2, 1, 0), (7, 8, 9)], ids=str)
def test_inner_offsets_not_0_to_n_minus_1_are_rebuilt_like_kafka(codec, deltas):
    records = b"".join(record(d, i, b"key%d" % i, b"value%d" % i, ((b"h", b"%d" % i),)) for i, d in enumerate(deltas))
    validated = validate(raw_batch(records, 3, codec=codec))
    out = stored(validated)
    assert validated.records == [out] and validated.size == len(out)
    header = check_batch(out)
    assert header.compression is codec and header.records_count == 3 and header.last_offset_delta == 2
    decoded = decode_batch(out)
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in decoded.records] == [
        (100 + i, NOW + i, b"key%d" % i, b"value%d" % i, (("h", b"%d" % i),)) for i in range(3)]
    assert (validated.first_offset, validated.last_offset, validated.max_timestamp) == (100, 102, NOW + 2)


def test_rebuilt_batch_keeps_producer_fields():
    records = b"".join(record(0, i) for i in range(2))
    batch = bytearray(raw_batch(records, 2, codec=CompressionType.GZIP, attributes=0x10))  # transactional
    struct.pack_into(">qhi", batch, 43, 42, 3, 17)  # producer id, epoch, base sequence
    struct.pack_into(">I", batch, 17, compute_crc(batch))
    header = check_batch(stored(validate(bytes(batch))))
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (42, 3, 17)
    assert header.is_transactional and header.partition_leader_epoch == 7


@pytest.mark.parametrize("codec", [CompressionType.NONE, CompressionType.GZIP])
def test_a_producer_id_with_a_negative_epoch_is_invalid_record(codec):
    """Kafka's client never sends producer id >= 0 with epoch < 0; the producer state has no
    epoch to check it against."""
    records = b"".join(record(i, i) for i in range(2))
    batch = bytearray(raw_batch(records, 2, codec=codec))
    struct.pack_into(">qhi", batch, 43, 42, -1, 0)
    struct.pack_into(">I", batch, 17, compute_crc(batch))
    with pytest.raises(InvalidRecordError, match="producer 42 has producer epoch -1"):
        validate(bytes(batch))
    struct.pack_into(">qhi", batch, 43, -1, -1, -1)  # no producer: still fine
    struct.pack_into(">I", batch, 17, compute_crc(batch))
    validate(bytes(batch))


def test_rebuilt_batch_over_max_message_bytes_is_record_too_large():
    # A batch that compresses well as sent but not once rebuilt in the topic's codec.
    values = [bytes([i]) * 300 for i in range(20)]
    batch = encode_batch([Record(i, NOW, b"k", v) for i, v in enumerate(values)], compression=CompressionType.ZSTD)
    with pytest.raises(RecordTooLargeError, match="recompressed"):
        validate(batch, config(**{"compression.type": "uncompressed", "max.message.bytes": 2000}))


# --- timestamps -------------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", [CompressionType.NONE, CompressionType.ZSTD], ids=lambda c: c.kafka_name)
@pytest.mark.parametrize("header_max", [NOW - 1, NOW + 2, NOW + 100])
def test_header_max_timestamp_is_recomputed_from_the_records(codec, header_max):
    batch = raw_batch(record(0, 0) + record(1, 50) + record(2, 20), 3, codec=codec, max_timestamp=header_max)
    validated = validate(batch)
    out = stored(validated)
    assert validated.max_timestamp == NOW + 50 and validated.offset_of_max_timestamp == 101
    assert check_batch(out).max_timestamp == NOW + 50  # and the CRC was recomputed over it
    assert out[HEADER_SIZE:] == batch[HEADER_SIZE:]


def test_header_already_right_keeps_the_producer_crc():
    batch = raw_batch(record(0, 0) + record(1, 50), 2, max_timestamp=NOW + 50)
    assert stored(validate(batch))[17:21] == batch[17:21]


@pytest.mark.parametrize("codec", [CompressionType.NONE, CompressionType.LZ4], ids=lambda c: c.kafka_name)
def test_one_record_timestamp_out_of_range_is_invalid_timestamp(codec):
    cfg = config(**{"message.timestamp.before.max.ms": 1000, "message.timestamp.after.max.ms": 500})
    # First and last records (what a header-only check sees) are fine; the middle one is not.
    late = raw_batch(record(0, 0) + record(1, 501) + record(2, 0), 3, codec=codec)
    with pytest.raises(InvalidTimestampError, match="record 1 .*message.timestamp.after.max.ms") as error:
        validate(late, cfg)
    assert error.value.code == ErrorCode.INVALID_TIMESTAMP
    early = raw_batch(record(0, 0) + record(1, -1001) + record(2, 0), 3, codec=codec)
    with pytest.raises(InvalidTimestampError, match="record 1 .*message.timestamp.before.max.ms"):
        validate(early, cfg)
    edges = raw_batch(record(0, 0) + record(1, 500) + record(2, -1000), 3, codec=codec)
    assert validate(edges, cfg).max_timestamp == NOW + 500


def test_no_timestamp_records_are_exempt_from_the_range_like_kafka():
    cfg = config(**{"message.timestamp.before.max.ms": 1000})
    batch = raw_batch(record(0, 0) + record(1, -1 - NOW), 2)  # the second record's timestamp is -1
    assert validate(batch, cfg).max_timestamp == NOW
    with pytest.raises(InvalidTimestampError):
        validate(raw_batch(record(0, 0) + record(1, -2 - NOW), 2), cfg)


def test_log_append_time_topic_stamps_the_batch_but_still_walks_it():
    cfg = config(**{"message.timestamp.type": "LogAppendTime", "message.timestamp.after.max.ms": 0})
    batch = raw_batch(record(0, 0) + record(1, 10**9), 2)  # far future: not checked under LogAppendTime
    validated = validate(batch, cfg)
    header = check_batch(stored(validated))
    assert header.timestamp_type is TimestampType.LOG_APPEND_TIME and header.max_timestamp == NOW
    assert validated.log_append_time_ms == validated.max_timestamp == NOW
    with pytest.raises(InvalidRecordError):
        validate(raw_batch(record(0) + record(1), 3), cfg)


def test_a_producer_may_not_send_log_append_time():
    with pytest.raises(InvalidTimestampError, match="LogAppendTime"):
        validate(raw_batch(record(0), 1, attributes=0x08))


# --- compacted topics -------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.kafka_name)
def test_compacted_topic_refuses_a_null_key_anywhere_in_the_batch(codec):
    cfg = config(**{"cleanup.policy": "compact"})
    batch = raw_batch(record(0, key=b"a") + record(1, key=None) + record(2, key=b"c"), 3, codec=codec)
    with pytest.raises(InvalidRecordError, match="without a key .record 1") as error:
        validate(batch, cfg)
    assert error.value.code == ErrorCode.INVALID_RECORD
    validate(batch)  # the same batch is fine on a delete topic
    keyed = raw_batch(record(0, key=b"a") + record(1, key=b"") + record(2, key=b"c", value=None), 3, codec=codec)
    validated = validate(keyed, cfg)  # an empty key is a key; a null value is a tombstone
    assert validated.records[-1].obj is keyed


def test_topic_codec_rebuilds_the_batch_in_that_codec():
    batch = encode_batch([Record(i, NOW, b"k", b"v%d" % i) for i in range(4)], compression=CompressionType.LZ4)
    out = stored(validate(batch, config(**{"compression.type": "gzip"})))
    assert check_batch(out).compression is CompressionType.GZIP
    assert [(r.offset, r.value) for r in records_of(out)] == [(100 + i, b"v%d" % i) for i in range(4)]


# --- decompression bombs ---------------------------------------------------------------------------


def zstd_rle_bomb(total: int) -> bytes:
    """A zstd frame of RLE blocks: 4 bytes of input per 128 KiB of output (32 KiB -> 1 GiB)."""
    block = 128 * 1024
    blocks = total // block
    frame = bytearray(b"\x28\xb5\x2f\xfd\x00\x58")  # magic, descriptor (no size, no checksum), window 2 MiB
    for i in range(blocks):
        header = (block << 3) | (1 << 1) | (1 if i == blocks - 1 else 0)  # RLE block, last bit on the last
        frame += header.to_bytes(3, "little") + b"\x00"
    return bytes(frame)


def gzip_bomb(total: int) -> bytes:
    """A gzip member of ``total`` zero bytes built from one repeated full-flush segment (fast to
    build); its trailer is not checked because the decoder must stop long before it."""
    deflater = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    zeros = bytes(MiB)
    first = deflater.compress(zeros) + deflater.flush(zlib.Z_FULL_FLUSH)
    again = deflater.compress(zeros) + deflater.flush(zlib.Z_FULL_FLUSH)
    return GZIP_HEADER + first + again * (total // MiB - 1) + deflater.flush() + b"\x00" * 8


def lz4_bomb(total: int) -> bytes:
    return lz4.frame.compress(bytes(total), block_size=lz4.frame.BLOCKSIZE_MAX64KB, block_linked=False,
                              content_checksum=False, store_size=False)


def snappy_bomb(total: int) -> bytes:
    chunk = bytes(cramjam.snappy.compress_raw(bytes(32 * 1024)))
    return XERIAL_HEADER + (struct.pack(">i", len(chunk)) + chunk) * (total // (32 * 1024))


BOMBS = {
    CompressionType.GZIP: (gzip_bomb, 1024 * MiB),
    CompressionType.SNAPPY: (snappy_bomb, 1 * MiB),  # snappy inflates at most ~21x: 1 MiB in 49 KB
    CompressionType.LZ4: (lz4_bomb, 64 * MiB),
    CompressionType.ZSTD: (zstd_rle_bomb, 1024 * MiB),
}


@pytest.mark.parametrize("codec", COMPRESSED, ids=lambda c: c.kafka_name)
def test_decompression_bomb_is_record_too_large_and_memory_stays_under_the_limit(codec):
    build, inflated = BOMBS[codec]
    body = build(inflated)
    cfg = config(**{"max.message.bytes": len(body) + 100, "cleanup.policy": "compact"})
    limit = decompression_limit(cfg)
    assert limit == (len(body) + 100) * DECOMPRESSION_FACTOR < inflated
    batch = raw_batch(b"", 5000, codec=codec, compressed_body=body)
    tracemalloc.start()
    try:
        with pytest.raises(RecordTooLargeError, match=f"decompresses to more than {limit} bytes") as error:
            validate(batch, cfg)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert error.value.code == ErrorCode.MESSAGE_TOO_LARGE
    assert peak < limit + 2 * MiB + len(batch), (peak, limit)  # the limit plus one read chunk


def test_the_issues_bomb_32_kib_of_zstd_for_a_compacted_topic_is_refused_at_the_default_limit():
    body = zstd_rle_bomb(1024 * MiB)
    assert len(body) <= 33 * 1024
    cfg = config(**{"cleanup.policy": "compact"})
    assert decompression_limit(cfg) == 16 * 1048588
    tracemalloc.start()
    try:
        with pytest.raises(RecordTooLargeError):
            validate(raw_batch(b"", 10, codec=CompressionType.ZSTD, compressed_body=body), cfg)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < decompression_limit(cfg) + 2 * MiB


def test_batch_decompressing_to_exactly_the_limit_passes():
    value = bytes(1000)
    records = b"".join(record(i, 0, None, value) for i in range(40))
    body = compress(CompressionType.ZSTD, records)
    max_message_bytes = -(-len(records) // DECOMPRESSION_FACTOR)  # limit = the first multiple >= the records
    cfg = config(**{"max.message.bytes": max_message_bytes})
    assert decompression_limit(cfg) >= len(records) > decompression_limit(cfg) - DECOMPRESSION_FACTOR
    assert len(raw_batch(records, 40, codec=CompressionType.ZSTD)) <= max_message_bytes
    validate(raw_batch(b"", 40, codec=CompressionType.ZSTD, compressed_body=body), cfg)
    smaller = config(**{"max.message.bytes": max_message_bytes - 1})
    with pytest.raises(RecordTooLargeError, match="decompresses"):
        validate(raw_batch(b"", 40, codec=CompressionType.ZSTD, compressed_body=body), smaller)


def test_decompression_limit_is_capped_so_readers_can_always_decode():
    assert decompression_limit(config(**{"max.message.bytes": 2**31 - 1})) == 256 * MiB


# --- properties -------------------------------------------------------------------------------------


HEADERS = st.lists(st.tuples(st.text(max_size=6), st.none() | st.binary(max_size=6)), max_size=2).map(tuple)


@st.composite
def producer_batches(draw, max_records=12, keyed=False):
    """A batch as a well-behaved producer writes it: offsets 0..n-1, timestamps near NOW."""
    count = draw(st.integers(1, max_records))
    records = [
        Record(i, draw(st.integers(NOW - 10**6, NOW + 3_600_000) | st.just(-1)),
               draw(st.binary(max_size=12) if keyed else st.none() | st.binary(max_size=12)),
               draw(st.none() | st.binary(max_size=80)), draw(HEADERS))
        for i in range(count)
    ]
    codec = draw(st.sampled_from(CODECS))
    header_max = draw(st.none() | st.integers(NOW - 10**6, NOW + 10**6))
    return encode_batch(records, compression=codec, max_timestamp=header_max), records, codec


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), compact=st.booleans(), offset=st.integers(0, 2**40), epoch=st.integers(-1, 2**31 - 1))
def test_any_valid_batch_passes_and_is_stored_byte_identical_but_the_fields_kafka_rewrites(data, compact, offset,
                                                                                         epoch):
    batch, records, codec = data.draw(producer_batches(keyed=compact), label="batch")
    cfg = config(**{"cleanup.policy": "compact" if compact else "delete"})
    validated = validate(batch, cfg, offset=offset, leader_epoch=epoch)
    out = stored(validated)
    expected_max = max(-1, *(r.timestamp for r in records))
    # Kafka rewrites base offset, leader epoch and max timestamp (and so the CRC); nothing else.
    assert out[8:12] == batch[8:12] and out[16:17] == batch[16:17] and out[21:35] == batch[21:35]
    assert out[43:] == batch[43:]
    assert struct.unpack_from(">q", out, 0)[0] == offset and struct.unpack_from(">i", out, 12)[0] == epoch
    assert struct.unpack_from(">q", out, 35)[0] == expected_max == validated.max_timestamp
    if struct.unpack_from(">q", batch, 35)[0] == expected_max:
        assert out[17:21] == batch[17:21]
    decoded = decode_batch(out)
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in decoded.records] == [
        (offset + r.offset, r.timestamp, r.key, r.value, r.headers) for r in records]
    first_max = next(i for i, r in enumerate(records) if r.timestamp == expected_max)
    assert validated.offset_of_max_timestamp == offset + first_max


MUTATIONS = st.sampled_from(["flip", "insert", "delete", "count", "count-and-delta"])


def _mutate(data, batch: bytes, records: bytes) -> tuple[bytes, int, int]:
    """(mutated record bytes, count, last offset delta) of a valid batch's records."""
    count = struct.unpack_from(">i", batch, 57)[0]
    delta = count - 1
    payload = bytearray(records)
    for _ in range(data.draw(st.integers(1, 3), label="mutations")):
        kind = data.draw(MUTATIONS, label="kind")
        if kind == "flip" and payload:
            position = data.draw(st.integers(0, len(payload) - 1), label="position")
            payload[position] ^= data.draw(st.integers(1, 255), label="xor")
        elif kind == "insert":
            position = data.draw(st.integers(0, len(payload)), label="position")
            payload[position:position] = data.draw(st.binary(min_size=1, max_size=4), label="bytes")
        elif kind == "delete" and payload:
            position = data.draw(st.integers(0, len(payload) - 1), label="position")
            del payload[position:position + data.draw(st.integers(1, 4), label="length")]
        elif kind == "count":
            count = data.draw(st.integers(-2, count + 3), label="count")
        else:
            count = data.draw(st.integers(1, count + 3), label="count")
            delta = count - 1
    return bytes(payload), count, delta


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(generated=producer_batches(max_records=6), data=st.data(), compact=st.booleans(),
       recompress=st.booleans())
def test_mutated_batches_with_a_recomputed_crc_pass_only_if_they_still_decode_consistently(generated, data, compact,
                                                                                          recompress):
    batch, _, codec = generated
    header = check_batch(batch)
    # The records as the producer serialized them (decompressed), mutated, then framed again with a
    # correct CRC: either recompressed (the walk sees the damage) or the compressed bytes damaged.
    if codec is CompressionType.NONE or recompress:
        plain = batch[HEADER_SIZE:] if codec is CompressionType.NONE else _decompressed(batch)
        payload, count, delta = _mutate(data, batch, plain)
        mutant = raw_batch(payload, count, codec=codec, base_timestamp=header.base_timestamp,
                           max_timestamp=header.max_timestamp, last_offset_delta=delta)
    else:
        payload, count, delta = _mutate(data, batch, batch[HEADER_SIZE:])
        mutant = raw_batch(b"", count, codec=codec, base_timestamp=header.base_timestamp,
                           max_timestamp=header.max_timestamp, last_offset_delta=delta, compressed_body=payload)
    cfg = config(**{"cleanup.policy": "compact" if compact else "delete",
                    "message.timestamp.before.max.ms": 2 * 10**6})
    try:
        consumer_view = decode_batch(mutant).records
    except CorruptRecordError:
        consumer_view = None
    try:
        validated = validate(mutant, cfg)
    except TriologError as exc:
        assert type(exc) in (CorruptRecordError, InvalidRecordError, InvalidTimestampError, RecordTooLargeError)
        event(f"refused: {type(exc).__name__}")
        return
    event("accepted")
    # Accepted: consumers could read what the producer sent, and read the stored batch consistently.
    assert consumer_view is not None, "the validator stored a batch consumers cannot decode"
    out = decode_batch(stored(validated))
    assert len(out.records) == out.header.records_count == out.header.last_offset_delta + 1 == count
    assert [r.offset for r in out.records] == list(range(100, 100 + count))
    assert out.header.max_timestamp == max(-1, *(r.timestamp for r in out.records)) == validated.max_timestamp
    assert all(NOW - 2 * 10**6 <= r.timestamp <= NOW + 3_600_000 or r.timestamp == -1 for r in out.records)
    assert not compact or all(r.key is not None for r in out.records)
    assert [(r.timestamp, r.key, r.value, r.headers) for r in out.records] == [
        (r.timestamp, r.key, r.value, r.headers) for r in consumer_view]


def _decompressed(batch: bytes) -> bytes:
    from triolog.protocol.compression import decompress

    return decompress(check_batch(batch).compression, memoryview(batch)[HEADER_SIZE:])


@pytest.mark.parametrize("topic", [{}, {"compression.type": "zstd"}, {"message.timestamp.type": "LogAppendTime"}],
                         ids=["in-place", "rebuilt", "log-append-time"])
def test_a_batch_validated_at_offset_zero_is_placed_by_its_base_offset_alone(topic):
    """The log validates outside its lock at offset 0 and places the batch under it: the result
    must be the very bytes and fields that validating at the final offset gives."""
    config = LogConfig().with_overrides(topic)
    records = [Record(i, NOW - 10 + (i * 7) % 5, b"k%d" % i, b"v%d" % i) for i in range(6)]
    batch = encode_batch(records, compression=CompressionType.LZ4)
    direct = validate_and_assign_offsets(batch, offset=1234, config=config, now_ms=NOW, leader_epoch=3)
    placed = with_base_offset(validate_and_assign_offsets(batch, offset=0, config=config, now_ms=NOW,
                                                          leader_epoch=3), 1234)
    assert b"".join(bytes(b) for b in placed.records) == b"".join(bytes(b) for b in direct.records)
    assert placed == direct._replace(records=placed.records)
    check_batch(b"".join(bytes(b) for b in placed.records))  # the CRC does not cover the base offset
    assert placed.first_offset == 1234 and placed.last_offset == 1239
