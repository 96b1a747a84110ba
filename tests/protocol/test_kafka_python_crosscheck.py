"""Cross-check against an independent implementation of RecordBatch v2: kafka-python 3.0.x.

kafka-python must read every batch we write, and we must read every batch it writes, for every
codec. Its writer differs from Kafka's Java producer in ways that are legal on the wire, which
these tests pin down rather than paper over:

* it falls back to an uncompressed batch (codec bits 0) when compression does not shrink the
  records, where Java always compresses;
* it writes PartitionLeaderEpoch 0 (Java: -1) and, for an empty batch, timestamps 0 (Java: -1);
* its gzip member carries an mtime and XFL/OS bytes (Python's GzipFile) at level 9, where Java
  writes a zeroed header at zlib's default level;
* its lz4 frame sets the content-size flag (FLG 0x68, lz4.frame's default ``store_size=True``)
  where Java writes FLG 0x60; Kafka's reader accepts both;
* its zstd frame records the content size, where zstd-jni's streaming writer does not;
* its maxTimestamp is the plain maximum of the record timestamps, where Java's starts at -1.
Its snappy codec (python-snappy) wraps the same C library as cramjam, so for snappy the
independent part is the xerial framing, not the block codec.
"""

from __future__ import annotations

import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

with warnings.catch_warnings():
    # kafka-python's protocol schemas load through deprecated importlib.resources calls at import.
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
    from kafka.record.memory_records import MemoryRecords
    from kafka.record.util import decode_varint as kp_decode_varint
    from kafka.record.util import encode_varint as kp_encode_varint

from triolog.protocol.record_batch import CompressionType, TimestampType, check_batch
from triolog.protocol.records import (
    ControlRecordType,
    Record,
    decode_batch,
    decode_varlong,
    encode_batch,
    encode_end_txn_marker,
    encode_varlong,
    iter_batches,
)

CODECS = list(CompressionType)
HEADERS = st.lists(st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=8)), max_size=3).map(tuple)
TIMESTAMPS = st.integers(0, 2**45)
# Repetitive values make compression pay off, so kafka-python keeps its codec on most examples.
VALUES = st.none() | st.binary(max_size=40) | st.binary(min_size=1, max_size=4).map(lambda b: b * 50)


@st.composite
def record_lists(draw, min_size=0, max_size=12):
    base_offset = draw(st.integers(0, 2**62))
    offset = base_offset + draw(st.integers(0, 3))
    records = []
    for _ in range(draw(st.integers(min_size, max_size))):
        records.append(Record(offset, draw(TIMESTAMPS), draw(st.none() | st.binary(max_size=16)), draw(VALUES),
                              draw(HEADERS)))
        offset += draw(st.integers(1, 300) | st.just(1))
    return base_offset, records


def _kafka_python_view(batch: bytes):
    """kafka-python's reading of one batch: header fields and records in comparable form."""
    kp = DefaultRecordBatch(batch)
    assert kp.validate_crc()  # before iterating, as its API requires
    header = {
        "base_offset": kp.base_offset,
        "leader_epoch": kp.leader_epoch,
        "attributes": kp.attributes,
        "compression": kp.compression_type,
        "timestamp_type": kp.timestamp_type,
        "transactional": kp.is_transactional,
        "control": kp.is_control_batch,
        "last_offset_delta": kp.last_offset_delta,
        "first_timestamp": kp.first_timestamp,
        "max_timestamp": kp.max_timestamp,
        "producer": (kp.producer_id, kp.producer_epoch, kp.base_sequence),
        "count": kp.records_count,
        "size": kp.size_in_bytes,
    }
    records = [Record(r.offset, r.timestamp, r.key, r.value, tuple(r.headers)) for r in kp]
    return header, records


# --- we write, kafka-python reads -------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.kafka_name)
@settings(max_examples=40, deadline=None)
@given(
    generated=record_lists(),
    timestamp_type=st.sampled_from(TimestampType),
    producer=st.tuples(st.integers(-1, 2**62), st.integers(-1, 2**15 - 1), st.integers(-1, 2**31 - 1)),
    leader_epoch=st.integers(-1, 2**31 - 1),
    transactional=st.booleans(),
    delete_horizon=st.none() | st.integers(0, 2**45),
    extra_delta=st.integers(0, 3),
)
def test_kafka_python_reads_every_batch_we_write(codec, generated, timestamp_type, producer, leader_epoch,
                                                 transactional, delete_horizon, extra_delta):
    base_offset, records = generated
    last_delta = records[-1].offset - base_offset if records else 0
    batch = encode_batch(
        records, base_offset=base_offset, last_offset_delta=last_delta + extra_delta, compression=codec,
        timestamp_type=timestamp_type, producer_id=producer[0], producer_epoch=producer[1],
        base_sequence=producer[2], partition_leader_epoch=leader_epoch, is_transactional=transactional,
        delete_horizon_ms=delete_horizon,
    )
    ours = decode_batch(batch).header
    header, kp_records = _kafka_python_view(batch)

    assert header == {
        "base_offset": base_offset,
        "leader_epoch": leader_epoch,
        "attributes": ours.attributes,
        "compression": codec if records else CompressionType.NONE,
        "timestamp_type": timestamp_type,
        "transactional": transactional,
        "control": False,
        "last_offset_delta": last_delta + extra_delta,
        "first_timestamp": ours.base_timestamp,
        "max_timestamp": ours.max_timestamp,
        "producer": producer,
        "count": len(records),
        "size": len(batch),
    }
    assert bool(header["attributes"] & 0x40) is (delete_horizon is not None)
    if timestamp_type is TimestampType.LOG_APPEND_TIME:
        records = [Record(r.offset, ours.max_timestamp, r.key, r.value, r.headers) for r in records]
    # kafka-python knows nothing of the delete horizon: base + delta still gives each timestamp.
    assert kp_records == records


@pytest.mark.parametrize("marker", [ControlRecordType.ABORT, ControlRecordType.COMMIT])
def test_kafka_python_reads_our_end_txn_markers(marker):
    batch = encode_end_txn_marker(77, 3, marker, 12, offset=500, timestamp=1_700_000_000_000)
    kp = DefaultRecordBatch(batch)
    assert kp.validate_crc()
    assert kp.is_control_batch and kp.is_transactional
    (record,) = list(kp)
    assert (record.version, record.type, record.offset, record.timestamp) == (0, marker, 500, 1_700_000_000_000)
    assert record.abort is (marker is ControlRecordType.ABORT)
    assert record.commit is (marker is ControlRecordType.COMMIT)


@settings(max_examples=25, deadline=None)
@given(
    batches=st.lists(st.tuples(record_lists(min_size=1, max_size=4), st.sampled_from(CODECS)), min_size=1,
                     max_size=4),
    cut=st.integers(0, 60),
)
def test_kafka_python_and_we_frame_the_same_fetch_response(batches, cut):
    encoded = [encode_batch(records, base_offset=base, compression=codec) for (base, records), codec in batches]
    response = b"".join(encoded)
    response = response[: len(response) - min(cut, len(encoded[-1]) - 1)]
    ours = [(b.base_offset, b.next_offset, [r.offset for r in b.records]) for b in iter_batches(response)]
    theirs = [(b.base_offset, b.next_offset, [r.offset for r in b]) for b in MemoryRecords(response)]
    assert ours == theirs
    assert len(ours) == len(encoded) - (cut > 0)


# --- kafka-python writes, we read -------------------------------------------------------------


def _kafka_python_build(codec, records, *, transactional=False, producer=(-1, -1, -1)) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=codec, is_transactional=transactional, producer_id=producer[0],
        producer_epoch=producer[1], base_sequence=producer[2], batch_size=1 << 30,
    )
    for offset, timestamp, key, value, headers in records:
        assert builder.append(offset, timestamp=timestamp, key=key, value=value, headers=list(headers)) is not None
    return bytes(builder.build())


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.kafka_name)
@settings(max_examples=40, deadline=None)
@given(
    generated=record_lists(),
    transactional=st.booleans(),
    producer=st.tuples(st.integers(0, 2**62), st.integers(0, 2**15 - 1), st.integers(0, 2**31 - 1)),
)
def test_we_read_every_batch_kafka_python_writes(codec, generated, transactional, producer):
    base_offset, records = generated
    # kafka-python's builder always writes base offset 0: offsets are deltas from it.
    records = [Record(r.offset - base_offset, r.timestamp, r.key, r.value, r.headers) for r in records]
    batch = _kafka_python_build(codec, [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in records],
                                transactional=transactional, producer=producer)
    decoded = decode_batch(batch)
    header = decoded.header
    check_batch(batch)
    assert header.compression in (codec, CompressionType.NONE)  # its "no gain, no compression" fallback
    assert header.timestamp_type is TimestampType.CREATE_TIME
    assert header.is_transactional is transactional and not header.is_control
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == producer
    assert header.records_count == len(records)
    assert header.base_offset == 0 and header.partition_leader_epoch == 0
    if records:
        assert header.last_offset_delta == records[-1].offset
        assert header.base_timestamp == records[0].timestamp
        assert header.max_timestamp == max(r.timestamp for r in records)
    else:
        assert (header.last_offset_delta, header.base_timestamp, header.max_timestamp) == (0, 0, 0)
    assert decoded.records == records
    # And both readers agree on the same bytes.
    assert _kafka_python_view(batch)[1] == records


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.kafka_name)
def test_we_read_kafka_python_batches_that_keep_their_codec(codec):
    records = [(i, 1_600_000_000_000 + i, b"key-%d" % (i % 7), b"payload " * 30, [("trace", b"abc")])
               for i in range(200)]
    batch = _kafka_python_build(codec, records)
    decoded = decode_batch(batch)
    assert decoded.compression is codec
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in decoded.records] == [
        (o, t, k, v, tuple(h)) for o, t, k, v, h in records
    ]


def test_kafka_python_stream_headers_differ_from_java_but_we_read_them():
    records = [(i, 1_000, None, b"value " * 40, []) for i in range(20)]
    gzip_batch = _kafka_python_build(CompressionType.GZIP, records)
    assert gzip_batch[61:64] == b"\x1f\x8b\x08" and gzip_batch[69] == 2  # XFL 2: level 9
    lz4_batch = _kafka_python_build(CompressionType.LZ4, records)
    assert lz4_batch[61:67] == bytes.fromhex("04224d186840")  # content size flag set, unlike Java's 0x60
    for batch in (gzip_batch, lz4_batch):
        assert len(decode_batch(batch).records) == 20


# --- varints ----------------------------------------------------------------------------------


@given(st.integers(-(2**63), 2**63 - 1))
def test_varlong_matches_kafka_pythons_encoding(value):
    out = bytearray()
    kp_encode_varint(value, out.append)
    assert encode_varlong(value) == bytes(out)
    assert decode_varlong(bytes(out)) == kp_decode_varint(out, 0)


# --- the broker's validator on another client's batches ----------------------------------------


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.kafka_name)
@settings(max_examples=25, deadline=None)
@given(values=st.lists(st.tuples(st.binary(min_size=1, max_size=16), VALUES, st.integers(-5_000, 5_000), HEADERS),
                       min_size=1, max_size=12),
       compact=st.booleans())
def test_broker_validator_accepts_kafka_python_producer_batches_and_it_reads_them_back(codec, values, compact):
    """A real client's batches (its own serializer and codec framing) pass the full record walk,
    are stored as sent but for the header fields the broker owns, and read back in kafka-python."""
    from triolog.broker.storage.validator import validate_and_assign_offsets
    from triolog.config.log_config import LogConfig

    now = 1_700_000_000_000
    records = [(i, now + skew, key, value, list(headers)) for i, (key, value, skew, headers) in enumerate(values)]
    batch = _kafka_python_build(codec, records)
    cfg = LogConfig().with_overrides({"cleanup.policy": "compact" if compact else "delete"})
    validated = validate_and_assign_offsets(batch, offset=1_000, config=cfg, now_ms=now, leader_epoch=3)
    stored = b"".join(bytes(part) for part in validated.records)
    assert stored[61:] == batch[61:] and stored[21:35] == batch[21:35]
    assert validated.max_timestamp == max(now + skew for _, _, skew, _ in values)
    header, read_back = _kafka_python_view(stored)
    assert header["base_offset"] == 1_000 and header["leader_epoch"] == 3
    assert [(r.offset, r.timestamp, r.key, r.value) for r in read_back] == [
        (1_000 + o, t, k, v) for o, t, k, v, _ in records]
