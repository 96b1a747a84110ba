"""The record codec of the compiled core: compiled and interpreted give identical bytes, records and errors.

protocol/record_codec.py is one source (Cython's pure-Python mode) with a few branches on
``cython.compiled`` (the encoder writes through a pointer, the decoder adds C integers with an
overflow check). These properties run both implementations in one process on the same inputs:
encode (identical bytes or identical ValueError), decode into Record objects, into consumer records
and into columns (identical objects or identical CorruptRecordError, message included), on every
compression type, with headers, null keys and values, varint width boundaries, offset gaps,
timestamp deltas up to the int64 edges, and on corrupted bytes.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from triolog.client.types import ConsumerRecord, RecordColumns
from triolog import core
from triolog.protocol.compression import decompress
from triolog.protocol.record_batch import HEADER, CompressionType
from triolog.protocol.records import Record, encode_batch
from tests.protocol.corruption import corrupted

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
PURE = core.implementation("protocol.record_codec", compiled=False)


def _compiled():
    if not core.compiled_available("protocol.record_codec"):
        pytest.skip("the compiled core is not built here (no C compiler at install time): only the pure path runs")
    return core.implementation("protocol.record_codec", compiled=True)


def _outcome(function, *args):
    try:
        result = function(*args)
    except Exception as exc:  # the comparison is the point: any exception, same type and message
        return ("raised", type(exc), str(exc))
    if isinstance(result, tuple) and result and isinstance(result[0], bytearray):
        result = (bytes(result[0]), *result[1:])
    return ("ok", result)


#: sizes either side of the one/two/three-byte varint widths (zig-zag: 63|64, 8191|8192)
SIZES = st.sampled_from([0, 1, 63, 64, 100, 8191, 8192, 20_000])
#: timestamp deltas either side of the varlong widths, up to the int64 edges
DELTAS = st.sampled_from([0, 1, -1, 63, 64, -64, -65, 8191, 8192, -8192, -8193, 2**31, -(2**31), 2**62]) | st.integers(
    -(2**40), 2**40)


#: Built once: a strategy made inside a draw (a new ``.map`` lambda, a new ``|``) is built and
#: validated again for every record of every example, which was most of these tests' time.
KEYS = st.none() | SIZES.map(lambda n: b"k" * n) | st.binary(max_size=8)
VALUES = st.none() | SIZES.map(lambda n: b"v" * n) | st.binary(max_size=8)
HEADERS = st.lists(st.tuples(st.text(max_size=3), st.none() | st.binary(max_size=70)), max_size=3).map(tuple)
BASE_TIMESTAMPS = st.sampled_from([-1, 0, 1_700_000_000_000]) | st.integers(-(2**45), 2**45)
FIRST_OFFSETS = st.sampled_from([0, 5, 2**40])
OFFSET_STEPS = st.sampled_from([1, 1, 1, 2, 63, 64, 100, 8192, 70_000])


@st.composite
def records(draw, max_count=12):
    """Records whose fields cross the one-, two- and multi-byte varint encodings."""
    count = draw(st.integers(1, max_count))
    base_timestamp = draw(BASE_TIMESTAMPS)
    offset = draw(FIRST_OFFSETS)
    out = []
    for _ in range(count):
        key, value, headers = draw(KEYS), draw(VALUES), draw(HEADERS)
        out.append(Record(offset, base_timestamp + draw(DELTAS), key, value, headers))
        offset += draw(OFFSET_STEPS)
    return out


def _payload(batch: bytes):
    header = HEADER.unpack_from(batch)
    codec = CompressionType(header[5] & 0x07)
    body = batch[HEADER.size:] if codec == CompressionType.NONE else decompress(codec, batch[HEADER.size:])
    return bytes(body), header[12], header[0], header[7], header[8]  # records, count, base offset, base/max ts


def _decoded(codec, payload, count, base_offset, base_timestamp, append_time, lo, hi):
    """Every decoder of one implementation on one input: Records, consumer records, columns."""
    as_records = _outcome(codec.decode_records, payload, count, base_offset, base_timestamp, append_time, Record)
    consumer: list = []
    as_consumer = _outcome(codec.decode_consumer_records, payload, count, base_offset, base_timestamp, append_time,
                           lo, consumer, ConsumerRecord, "topic", 3, "CreateTime")
    columns = RecordColumns()
    as_columns = _outcome(codec.decode_columns, payload, count, base_offset, base_timestamp, append_time, lo, hi,
                          columns, True)
    # the same section inside a larger buffer (as in a fetch response), read in place: nothing beyond it
    framed = b"\xff" * 7 + payload + b"\x02\x7f" * 5
    consumer_framed: list = []
    as_consumer_framed = _outcome(codec.decode_consumer_records, framed, count, base_offset, base_timestamp,
                                  append_time, lo, consumer_framed, ConsumerRecord, "topic", 3, "CreateTime", 7,
                                  7 + len(payload))
    columns_framed = RecordColumns()
    as_columns_framed = _outcome(codec.decode_columns, framed, count, base_offset, base_timestamp, append_time, lo,
                                 hi, columns_framed, True, 7, 7 + len(payload))
    assert (as_consumer_framed, consumer_framed, as_columns_framed) == (as_consumer, consumer, as_columns)
    assert [getattr(columns_framed, name) for name in RecordColumns.__slots__] == [getattr(columns, name)
                                                                             for name in RecordColumns.__slots__]
    # the time lookup's skip-ahead walk (a short buffer is an IndexError on both paths, worded apart)
    as_first = _outcome(codec.first_at_or_after, payload, count, base_offset, base_timestamp, append_time,
                        base_timestamp, lo)
    if as_first[0] == "raised" and as_first[1] is IndexError:
        as_first = as_first[:2]
    return (as_records, as_consumer, consumer, as_columns, columns.keys, columns.values, columns.offsets,
            columns.timestamps, columns.types, columns.headers, as_first)


@settings(max_examples=300, deadline=None)
@given(generated=records(), codec=st.sampled_from(CompressionType), horizon=st.booleans())
def test_compiled_encode_writes_the_bytes_the_pure_encode_writes(generated, codec, horizon):
    compiled = _compiled()
    base_timestamp = INT64_MIN + 5 if horizon else generated[0].timestamp
    expected = _outcome(PURE.encode_records, generated, generated[0].offset, base_timestamp)
    assert _outcome(compiled.encode_records, generated, generated[0].offset, base_timestamp) == expected
    if expected[0] == "ok":  # and whole batches, through the compressors
        assert encode_batch(generated, base_offset=generated[0].offset, compression=codec) == bytes(
            _batch_with(PURE, generated, codec))


def _batch_with(implementation, generated, codec):
    from triolog.protocol import records as records_module

    saved = records_module._codec
    records_module._codec = implementation
    try:
        return encode_batch(generated, base_offset=generated[0].offset, compression=codec)
    finally:
        records_module._codec = saved


def _as_queued(generated):
    """The producer's queued (key, value, timestamp, headers) tuples for these records (offsets 0..n-1)."""
    return [(r.key, r.value, r.timestamp, r.headers) for r in generated]


@settings(max_examples=300, deadline=None)
@given(generated=records(), reserve=st.sampled_from([0, 1, 61]), hint=st.sampled_from([0, 1, "exact", "short", 100_000]))
def test_compiled_producer_encode_writes_the_bytes_the_pure_one_writes(generated, reserve, hint):
    """encode_producer_records (the producer's batches, from its tuples): identical bytes, last
    offset delta and max timestamp compiled and pure, whatever the size hint (none, too small,
    exact, too large), and the records section encode_records writes for the same records at
    offsets 0..n-1, after ``reserve`` zero bytes."""
    compiled = _compiled()
    queued = _as_queued(generated)
    expected = _outcome(PURE.encode_producer_records, queued, reserve)
    if isinstance(hint, str):  # the exact size, or one byte short of it
        hint = 0 if expected[0] != "ok" else len(expected[1][0]) - (hint == "short")
    assert _outcome(PURE.encode_producer_records, queued, reserve, hint) == expected
    assert _outcome(compiled.encode_producer_records, queued, reserve, hint) == expected
    renumbered = [Record(i, r.timestamp, r.key, r.value, r.headers) for i, r in enumerate(generated)]
    reference = _outcome(PURE.encode_records, renumbered, 0, generated[0].timestamp)
    if reference[0] == "ok":
        section, last_delta = reference[1]
        assert expected == ("ok", (bytes(reserve) + section, last_delta,
                                   max(-1, *(r.timestamp for r in generated))))
    else:  # a timestamp delta beyond int64: the same refusal
        assert expected == reference


@settings(max_examples=200, deadline=None)
@given(generated=records(), codec=st.sampled_from(CompressionType), transactional=st.booleans())
def test_build_batch_writes_what_encode_batch_writes_for_the_same_records(generated, codec, transactional):
    """build_batch (the producer's encode, from tuples, no Record objects) gives the very batch
    encode_batch builds from Record objects at offsets 0..n-1, on this process's codec and the pure one."""
    from triolog.protocol.records import build_batch

    queued = _as_queued(generated)
    renumbered = [Record(i, r.timestamp, r.key, r.value, r.headers) for i, r in enumerate(generated)]
    options = dict(compression=codec, producer_id=7 if transactional else -1, producer_epoch=1 if transactional else -1,
                   base_sequence=3 if transactional else -1, is_transactional=transactional)
    expected = _outcome(lambda: encode_batch(renumbered, **options))
    assert _outcome(lambda: build_batch(queued, **options)) == expected
    assert _outcome(lambda: _with_codec(PURE, build_batch)(queued, **options)) == expected


def _with_codec(implementation, function):
    def call(*args, **kwargs):
        from triolog.protocol import records as records_module

        saved = records_module._codec
        records_module._codec = implementation
        try:
            return function(*args, **kwargs)
        finally:
            records_module._codec = saved

    return call


@settings(max_examples=100, deadline=None)
@given(generated=records(max_count=4), data=st.data())
def test_compiled_encode_refuses_like_the_pure_encode(generated, data):
    """Offsets out of order or beyond 2^31-1 past the base, timestamp deltas beyond int64."""
    compiled = _compiled()
    index = data.draw(st.integers(0, len(generated) - 1))
    bad = generated[index]
    field = data.draw(st.sampled_from(["offset-back", "offset-far", "timestamp"]))
    if field == "offset-back":
        bad = Record(generated[0].offset - data.draw(st.integers(0, 3)), bad.timestamp, bad.key, bad.value)
    elif field == "offset-far":
        bad = Record(generated[0].offset + 2**31 + data.draw(st.integers(0, 3)), bad.timestamp, bad.key, bad.value)
    else:
        bad = Record(bad.offset, data.draw(st.sampled_from([2**64, -(2**64), INT64_MAX + 1])), bad.key, bad.value)
    generated = generated[:index] + [bad] + generated[index + 1:]
    expected = _outcome(PURE.encode_records, generated, generated[0].offset, 0)
    assert _outcome(compiled.encode_records, generated, generated[0].offset, 0) == expected


@settings(max_examples=300, deadline=None)
@given(generated=records(), codec=st.sampled_from(CompressionType), append_time=st.none() | st.integers(0, 2**45),
       data=st.data())
def test_compiled_decoders_build_what_the_pure_decoders_build(generated, codec, append_time, data):
    compiled = _compiled()
    payload, count, base_offset, base_timestamp, _ = _payload(
        encode_batch(generated, base_offset=generated[0].offset, compression=codec))
    lo = data.draw(st.integers(base_offset - 2, generated[-1].offset + 2), label="lo")
    hi = lo + data.draw(st.integers(0, 100_000), label="span")
    expected = _decoded(PURE, payload, count, base_offset, base_timestamp, append_time, lo, hi)
    assert expected[0] == ("ok", generated if append_time is None else
                           [Record(r.offset, append_time, r.key, r.value, r.headers) for r in generated])
    assert _decoded(compiled, payload, count, base_offset, base_timestamp, append_time, lo, hi) == expected


@settings(max_examples=100, deadline=None)
@given(base_offset=st.sampled_from([INT64_MAX - 3, INT64_MIN + 2, 2**62]),
       base_timestamp=st.sampled_from([INT64_MAX - 1, INT64_MIN + 1, 0]), deltas=st.lists(DELTAS, min_size=1,
                                                                                             max_size=4),
       bounds=st.tuples(st.sampled_from([None, INT64_MIN - 1, INT64_MAX - 2, 0]),
                        st.sampled_from([None, INT64_MAX + 1, INT64_MAX - 1, 2**62 + 1])))
def test_offsets_and_timestamps_past_the_int64_edges_decode_exactly(base_offset, base_timestamp, deltas, bounds):
    """A corrupt or hostile header puts base + delta beyond int64: Python ints, not C overflow."""
    compiled = _compiled()
    payload, _ = PURE.encode_records([Record(i, d, b"k", b"v") for i, d in enumerate(deltas)], 0, 0)
    payload = bytes(payload)
    lo, hi = bounds
    expected = _decoded(PURE, payload, len(deltas), base_offset, base_timestamp, None, lo, hi)
    assert expected[0][1][0].timestamp == base_timestamp + deltas[0]
    assert _decoded(compiled, payload, len(deltas), base_offset, base_timestamp, None, lo, hi) == expected


@settings(max_examples=500, deadline=None)
@given(generated=records(), codec=st.sampled_from(CompressionType), data=st.data())
def test_compiled_decoders_refuse_like_the_pure_decoders_on_corrupt_records(generated, codec, data):
    """Flipped, deleted and inserted bytes (overlong varints too), and wrong counts."""
    compiled = _compiled()
    payload, count, base_offset, base_timestamp, _ = _payload(encode_batch(generated, compression=codec,
                                                                           base_offset=generated[0].offset))
    corrupt = data.draw(corrupted(payload), label="corrupt")
    count += data.draw(st.sampled_from([0, 0, 0, -1, 1]), label="count change")
    lo = base_offset + data.draw(st.integers(-1, 3), label="lo")
    expected = _decoded(PURE, corrupt, count, base_offset, base_timestamp, None, lo, lo + 50)
    assert _decoded(compiled, corrupt, count, base_offset, base_timestamp, None, lo, lo + 50) == expected


def test_a_corrupt_record_is_reported_the_same_by_every_decoder():
    """The three decoders share one loop, so one damage gives one message (here an overlong varint)."""
    payload = bytearray(PURE.encode_records([Record(0, 0, b"k", b"v")], 0, 0)[0])
    payload[3:3] = b"\xff" * 6  # the offset delta becomes a varint of more than 5 bytes
    payload[0] += 6
    for codec in {PURE, core.load("protocol.record_codec")}:
        outcomes = _decoded(codec, bytes(payload), 1, 0, 0, None, 0, 10)
        assert outcomes[0] == outcomes[1] == outcomes[3] == (
            "raised", PURE.CorruptRecordError, "varint longer than 5 bytes at position 3")


@given(value=st.integers(-(2**31), 2**31 - 1), wide=st.integers(INT64_MIN, INT64_MAX))
def test_varint_readers_and_writers_round_trip_on_both_paths(value, wide):
    for codec in {PURE, core.load("protocol.record_codec")}:
        encoded = codec.encode_varint(value)
        assert codec.decode_varint(b"\x00" + encoded, 1) == (value, 1 + len(encoded))
        assert codec.read_varint32(encoded, 0) == (value, len(encoded))
        encoded = codec.encode_varlong(wide)
        assert codec.decode_varlong(encoded) == (wide, len(encoded)) == codec.read_varint64(encoded, 0)


def test_a_records_section_outside_the_buffer_is_refused_before_any_read():
    payload = bytes(PURE.encode_records([Record(0, 0, b"k", b"v")], 0, 0)[0])
    for codec in {PURE, core.load("protocol.record_codec")}:
        for origin, stop in ((0, len(payload) + 1), (-1, 3), (4, 3)):
            with pytest.raises(ValueError, match="outside the"):
                codec.decode_columns(payload, 1, 0, 0, None, 0, 10, RecordColumns(), True, origin, stop)
