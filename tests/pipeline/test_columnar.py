"""The data source's columnar decoder agrees with protocol.records on every batch shape."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from triolog.client.types import RecordColumns
from triolog.pipeline.columnar import decode_into, next_position
from triolog.protocol.errors import CorruptRecordError
from triolog.protocol.record_batch import CompressionType, TimestampType
from triolog.protocol.records import ControlRecordType, Record, encode_batch, encode_end_txn_marker, iter_batches


def reference(buf, lo: int, hi: int):
    """What protocol.records decodes, filtered like a read of offsets [lo, hi)."""
    rows = []
    for batch in iter_batches(buf):
        if batch.is_control:
            continue
        kind = 1 if batch.timestamp_type == TimestampType.LOG_APPEND_TIME else 0
        rows += [(r.offset, r.timestamp, kind, r.key, r.value, r.headers) for r in batch.records if lo <= r.offset < hi]
    return rows


def columnar(buf, lo: int, hi: int):
    columns = RecordColumns()
    decode_into(buf, columns, lo, hi, True)
    return list(zip(columns.offsets, columns.timestamps, columns.types, columns.keys, columns.values,
                    columns.headers))


#: lengths of one, two and three varint bytes
blobs = st.one_of(st.none(), st.binary(max_size=40), st.integers(60, 20_000).map(lambda n: bytes([n % 256]) * n))
records = st.lists(st.tuples(blobs, blobs, st.integers(-10_000, 10_000),
                             st.lists(st.tuples(st.text(max_size=5), st.one_of(st.none(), st.binary(max_size=5))),
                                      max_size=3)),
                   min_size=1, max_size=20)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(records, st.sampled_from(list(CompressionType)), st.integers(0, 3)), min_size=1, max_size=4),
       st.integers(0, 100), st.integers(0, 200), st.booleans())
def test_columnar_decode_matches_protocol_records(batches, lo, span, log_append_time):
    buf, offset = b"", 0
    for rows, codec, gap in batches:
        recs = [Record(offset + i * (gap + 1), 1_700_000_000_000 + delta, key, value, tuple(headers))
                for i, (key, value, delta, headers) in enumerate(rows)]
        last_delta = recs[-1].offset - offset + gap  # a compacted batch keeps its span
        buf += encode_batch(recs, base_offset=offset, last_offset_delta=last_delta, compression=codec,
                            timestamp_type=TimestampType.LOG_APPEND_TIME if log_append_time else TimestampType.CREATE_TIME,
                            max_timestamp=1_800_000_000_000 if log_append_time else None)
        offset += last_delta + 1
        buf += encode_end_txn_marker(7, 0, ControlRecordType.COMMIT, 0, offset, 1_700_000_000_000)
        offset += 1
    hi = lo + span
    assert columnar(buf, lo, hi) == reference(buf, lo, hi)
    # where the next fetch starts, from the headers alone, as the decoder says it
    assert next_position(buf + buf[:30], lo) == decode_into(buf, RecordColumns(), lo, 10**9, False)
    columns = RecordColumns()
    assert decode_into(buf + buf[:30], columns, 0, 10**9, False) == offset  # partial trailing batch ignored
    assert columns.headers == []


def test_corrupt_batches_raise_like_the_protocol_decoder():
    good = encode_batch([Record(0, 1, b"k", b"v" * 100)])
    flipped = bytearray(good)
    flipped[-3] ^= 0xFF
    with pytest.raises(CorruptRecordError, match="crc"):
        decode_into(bytes(flipped), RecordColumns(), 0, 10, False)
