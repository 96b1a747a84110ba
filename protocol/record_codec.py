"""The record codec of RecordBatch v2, once: varints, records in and out, columns, the broker's walk.

Every per-record loop over a batch's records section lives here (the layout is documented in
records.py): building the records section from Record objects (``encode_records``), decoding it
into Record objects (``decode_records``), into a consumer's records (``decode_consumer_records``),
or into column lists for Arrow (``decode_columns``), and the broker's check of a producer's records
without building anything (``walk_records``, ``renumber_records``). The varint and varlong readers
and writers exist only here; records.py, pipeline/columnar.py and the validator call in.

It is a compiled-core module (triolog/core.py): written in Cython's pure-Python mode, this file
runs interpreted as is and is compiled by setup.py into ``triolog.protocol._record_codec_c``; users
get one or the other through ``core.load("protocol.record_codec")``. The ``cython.locals``
declarations give the compiler C types and are no-ops for the interpreter. Annotations are
declarations too (an ``x: tuple`` local becomes an exact-tuple variable), so a local whose type the
type checker needs gets a ``# type:`` comment instead, which Cython ignores. Varints of one and two
bytes (nearly all of them) are decoded inline through tables in both; where the compiled code can
do better than the interpreted one (writing bytes through a pointer, C integers that must not
overflow), a branch on ``cython.compiled`` says so and tests/protocol/test_codec_core.py proves both
branches give identical results, errors and messages.

The batch header, CRC-32C (the crc32c package, in C) and compression (the codec libraries) stay
outside: this module sees the uncompressed records section only.
"""

from __future__ import annotations

try:  # Cython is needed to build, not to run: its pure-Python-mode names, or a stand-in.
    import cython
except ModuleNotFoundError:
    from . import _cython_shim as cython
# Only the compiled branches use these; interpreted, the import fails and nothing needs them. The last
# line names what this module's own .pxd declares: the compiler has it anyway, readers and mypy get it here.
try:
    from cython.cimports.cpython.bytes import PyBytes_FromStringAndSize
    from cython.cimports.libc.string import memcpy
    from cython.cimports.triolog.protocol._record_codec_c import _ZZ1_C, _ZZ2_C, PyObject_GC_UnTrack
except (ImportError, AttributeError):
    pass

from .errors import CorruptRecordError, InvalidRecordError, InvalidTimestampError
from .record_batch import (
    ATTRIBUTES_OFFSET,
    BASE_SEQUENCE_OFFSET,
    BASE_TIMESTAMP_OFFSET,
    BATCH_LENGTH_OFFSET,
    COMPRESSION_MASK,
    CONTROL_FLAG,
    CRC_OFFSET,
    CURRENT_MAGIC,
    HEADER,
    HEADER_SIZE,
    LAST_OFFSET_DELTA_OFFSET,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    MAX_TIMESTAMP_OFFSET,
    NO_TIMESTAMP,
    PRODUCER_ID_OFFSET,
    RECORDS_COUNT_OFFSET,
    CompressionType,
)

__all__ = [
    "check_batch_header",
    "decode_columns",
    "decode_consumer_records",
    "decode_records",
    "decode_varint",
    "decode_varlong",
    "encode_producer_records",
    "encode_records",
    "encode_varint",
    "encode_varlong",
    "read_varint32",
    "read_varint64",
    "renumber_records",
    "varint_bytes",
    "walk_records",
]

INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1

# ---------------------------------------------------------------------------------------------
# varint / varlong: zig-zag, then unsigned LEB128 (records.py's docstring)
# ---------------------------------------------------------------------------------------------

#: Single-byte encodings by unsigned (already zig-zagged) value.
_ONE_BYTE = [bytes((u,)) for u in range(128)]
#: Zig-zag value of a one-byte varint.
_ZIGZAG_ONE = [(u >> 1) ^ -(u & 1) for u in range(128)]
#: Zig-zag values of two-byte varints (|value| 64..8191: most record lengths), indexed by
#: first byte | second byte << 8; only entries whose first byte has its continuation bit are used.
_ZIGZAG_TWO = [((u >> 1) ^ -(u & 1)) for u in ((i & 0x7F) | ((i >> 8) << 7) for i in range(1 << 15))]
if cython.compiled:  # the same tables as C arrays (declared in _record_codec_c.pxd): one load a lookup
    for _i in range(128):
        _ZZ1_C[_i] = _ZIGZAG_ONE[_i]
    for _i in range(1 << 15):
        _ZZ2_C[_i] = _ZIGZAG_TWO[_i]


def _encode_unsigned(u: int) -> bytes:
    if u < 0x80:
        return _ONE_BYTE[u]
    out = bytearray()
    while u >= 0x80:
        out.append((u & 0x7F) | 0x80)
        u >>= 7
    out.append(u)
    return bytes(out)


def encode_varint(value: int) -> bytes:
    """Zig-zag LEB128 of an int32 (1..5 bytes)."""
    if not INT32_MIN <= value <= INT32_MAX:
        raise ValueError(f"varint value {value} is outside the int32 range")
    return _encode_unsigned((value << 1) ^ (value >> 31))


def encode_varlong(value: int) -> bytes:
    """Zig-zag LEB128 of an int64 (1..10 bytes)."""
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise ValueError(f"varlong value {value} is outside the int64 range")
    return _encode_unsigned((value << 1) ^ (value >> 63))


#: Zig-zag varints of -8192..8191 (what record lengths, deltas and key/value sizes nearly always
#: are), precomputed for the interpreted encoder.
_SMALL_VARINT_LIMIT = 8192
_SMALL_VARINTS = [
    _encode_unsigned(((v << 1) ^ (v >> 63)) & 0xFFFFFFFFFFFFFFFF)
    for v in range(-_SMALL_VARINT_LIMIT, _SMALL_VARINT_LIMIT)
]


def varint_bytes(value: int) -> bytes:
    """The varlong encoding of ``value``, from a table for small ones."""
    if -_SMALL_VARINT_LIMIT <= value < _SMALL_VARINT_LIMIT:
        return _SMALL_VARINTS[value + _SMALL_VARINT_LIMIT]
    return encode_varlong(value)


def read_varint32(data, position: int) -> tuple:
    """The int32 varint at ``position`` and the position after it, in a bytes-like buffer.

    No truncation check: a short buffer raises IndexError (callers turn that into their own
    error); more than 5 bytes raise CorruptRecordError. Bits beyond 32 are dropped, as in Java.
    The hot loops' own reader (``_long32``) does the work.
    """
    return _long32(data, position)


def read_varint64(data, position: int) -> tuple:
    """read_varint32 for an int64 varlong (at most 10 bytes, bits beyond 64 dropped)."""
    return _long64(data, position)


def decode_varint(buf, position: int = 0) -> tuple[int, int]:
    """Decode an int32 varint at ``position``; returns (value, next position)."""
    try:
        return read_varint32(buf, position)
    except IndexError:
        raise CorruptRecordError(f"varint truncated at position {position}") from None


def decode_varlong(buf, position: int = 0) -> tuple[int, int]:
    """Decode an int64 varlong at ``position``; returns (value, next position)."""
    try:
        return read_varint64(buf, position)
    except IndexError:
        raise CorruptRecordError(f"varlong truncated at position {position}") from None


# The hot loops' readers of the rarer long varints: on a typed view when compiled.


@cython.cfunc
@cython.boundscheck(True)
@cython.wraparound(False)
@cython.locals(
    buf="const unsigned char[:]",
    start=cython.Py_ssize_t,
    b=cython.ulonglong,
    shift=cython.int,
    u=cython.ulonglong,
    half=cython.longlong,
    low=cython.longlong,
)
def _long32(buf, position: cython.Py_ssize_t) -> tuple[cython.long, cython.Py_ssize_t]:  # cimported: see the .pxd
    start = position
    b = buf[position]
    position += 1
    u = b & 0x7F
    shift = 7
    while b & 0x80:
        if shift == 35:
            raise CorruptRecordError(f"varint longer than 5 bytes at position {start}")
        b = buf[position]
        position += 1
        u |= (b & 0x7F) << shift
        shift += 7
    u &= 0xFFFFFFFF
    half = u >> 1
    low = u & 1
    return half ^ -low, position


@cython.cfunc
@cython.boundscheck(True)
@cython.wraparound(False)
@cython.locals(
    buf="const unsigned char[:]",
    start=cython.Py_ssize_t,
    b=cython.ulonglong,
    shift=cython.int,
    u=cython.ulonglong,
    half=cython.longlong,
    low=cython.longlong,
)
def _long64(buf, position: cython.Py_ssize_t) -> tuple[cython.longlong, cython.Py_ssize_t]:
    start = position
    b = buf[position]
    position += 1
    u = b & 0x7F
    shift = 7
    while b & 0x80:
        if shift == 70:
            raise CorruptRecordError(f"varlong longer than 10 bytes at position {start}")
        b = buf[position]
        position += 1
        u |= (b & 0x7F) << shift
        shift += 7
    if not cython.compiled:
        u &= 0xFFFFFFFFFFFFFFFF
    half = u >> 1
    low = u & 1
    return half ^ -low, position


@cython.cfunc
@cython.inline
@cython.locals(n=cython.int)
def _unsigned_size(u: cython.ulonglong) -> cython.int:
    n = 1
    while u >= 0x80:
        u >>= 7
        n += 1
    return n


@cython.cfunc
@cython.inline
def _zigzag(value: cython.longlong) -> cython.ulonglong:
    return (cython.cast(cython.ulonglong, value) << 1) ^ cython.cast(cython.ulonglong, value >> 63)


@cython.cfunc
@cython.inline
def _put(p: cython.p_uchar, u: cython.ulonglong) -> cython.p_uchar:
    while u >= 0x80:
        p[0] = (u & 0x7F) | 0x80
        p += 1
        u >>= 7
    p[0] = u
    return p + 1


@cython.cfunc
@cython.inline
def _add(a: cython.longlong, b: cython.longlong):
    """a + b as a Python int, exact where the int64 sum would overflow."""
    if (b > 0 and a > _INT64_MAX - b) or (b < 0 and a < _INT64_MIN - b):
        return int(a) + int(b)
    return a + b


@cython.cfunc
@cython.inline
@cython.locals(stop=cython.Py_ssize_t)
def _slice(start: cython.p_char, position: cython.Py_ssize_t, size: cython.long, end: cython.Py_ssize_t) -> bytes:
    """data[position:position + size] of the bytes at ``start`` (``end`` long), without the slice
    object the generic slicing builds (compiled only)."""
    stop = position + size
    if stop > end:
        stop = end
    if stop <= position:
        return b""
    return PyBytes_FromStringAndSize(start + position, stop - position)


# ---------------------------------------------------------------------------------------------
# Encode: Record objects -> records section
# ---------------------------------------------------------------------------------------------


def encode_records(records, base_offset: int, base_timestamp: int) -> tuple:
    """Serialise ``records`` (offsets strictly increasing from ``base_offset``) into the records
    section of a batch; returns (bytearray, last offset delta). Raises ValueError for what a batch
    cannot hold. Compiled, each record is written in place into one growing buffer; interpreted,
    from precomputed varint bytes joined once a record (the fastest the interpreter gets)."""
    out, previous, _ = _encode(records, base_offset, base_timestamp, 0, False, 0)
    return out, previous


def encode_producer_records(records, reserve: int, size_hint: int = 0) -> tuple:
    """A producer's records section straight from its queued ``(key, value, timestamp, headers)``
    tuples, at offsets 0..n-1 (base timestamp: the first's), with no Record object per record.

    Returns (bytearray, last offset delta, max timestamp): ``reserve`` zero bytes (room for the
    batch header, so the batch is built in one buffer) then the records section, byte for byte
    what encode_records writes for the same records; max timestamp is max(-1, timestamps).
    ``records`` must not be empty. ``size_hint``: the expected total size, reserve included (the
    accumulator knows it exactly), so the buffer is allocated once at its size: growing it, and
    each fresh large allocation's page faults, cost more than writing the records."""
    return _encode(records, 0, records[0][2], reserve, True, size_hint)


@cython.locals(
    previous=cython.longlong,
    out=bytearray,
    size=cython.Py_ssize_t,
    capacity=cython.Py_ssize_t,
    used=cython.Py_ssize_t,
    body=cython.Py_ssize_t,
    total=cython.Py_ssize_t,
    key_size=cython.Py_ssize_t,
    value_size=cython.Py_ssize_t,
    header_size=cython.Py_ssize_t,
    td=cython.longlong,
    od=cython.longlong,
    count=cython.Py_ssize_t,
    p=cython.p_uchar,
    src=cython.p_uchar,
    interpreted=cython.bint,
    tuples=cython.bint,
    reserve=cython.Py_ssize_t,
    index=cython.Py_ssize_t,
    size_hint=cython.Py_ssize_t,
)
def _encode(records, base_offset, base_timestamp, reserve, tuples, size_hint) -> tuple:
    """encode_records' loop: over Record objects, or (``tuples``) over a producer's queued tuples
    whose offset is their index; ``reserve`` zero bytes first. Returns (bytearray, last offset
    delta, max(-1, timestamps) for tuples else None)."""
    previous = -1
    max_timestamp = NO_TIMESTAMP if tuples else None
    interpreted = not cython.compiled
    if interpreted:
        out = bytearray(reserve)
        extend = out.extend
        small = _SMALL_VARINTS
        limit = _SMALL_VARINT_LIMIT
    else:
        capacity = 64 * len(records) + 64 + reserve
        if size_hint > capacity:
            capacity = size_hint
        out = bytearray(capacity)
        used = reserve
    index = 0
    for record in records:
        if tuples:
            key, value, timestamp, headers = record
            offset_delta = index
            index += 1
            if offset_delta > INT32_MAX:
                raise ValueError(f"record offset {offset_delta} is more than 2^31-1 past base offset 0")
            if timestamp > max_timestamp:
                max_timestamp = timestamp
        else:
            offset_delta = record.offset - base_offset
            if offset_delta <= previous:
                if previous < 0:
                    raise ValueError(f"record offset {record.offset} is below the batch base offset {base_offset}")
                raise ValueError(
                    f"record offsets must strictly increase: {record.offset} follows {base_offset + previous}"
                )
            if offset_delta > INT32_MAX:
                raise ValueError(f"record offset {record.offset} is more than 2^31-1 past base offset {base_offset}")
            key, value, timestamp, headers = record.key, record.value, record.timestamp, record.headers
        previous = offset_delta
        timestamp_delta = timestamp - base_timestamp
        if interpreted:
            parts = [
                b"\x00",  # attributes
                small[timestamp_delta + limit]
                if -limit <= timestamp_delta < limit
                else encode_varlong(timestamp_delta),
                small[offset_delta + limit] if offset_delta < limit else encode_varint(offset_delta),
            ]
            if key is None:
                parts.append(b"\x01")
            else:
                parts.append(varint_bytes(len(key)))
                parts.append(key)
            if value is None:
                parts.append(b"\x01")
            else:
                parts.append(varint_bytes(len(value)))
                parts.append(value)
            if not headers:
                parts.append(b"\x00")
            else:
                parts.append(encode_varint(len(headers)))
                for header_key, header_value in headers:
                    encoded_key = header_key.encode("utf-8")
                    parts.append(varint_bytes(len(encoded_key)))
                    parts.append(encoded_key)
                    if header_value is None:
                        parts.append(b"\x01")
                    else:
                        parts.append(varint_bytes(len(header_value)))
                        parts.append(header_value)
            joined = b"".join(parts)
            extend(varint_bytes(len(joined)))
            extend(joined)
        else:
            if not _INT64_MIN <= timestamp_delta <= _INT64_MAX:
                raise ValueError(f"varlong value {timestamp_delta} is outside the int64 range")
            td = timestamp_delta
            od = offset_delta
            if key is not None and type(key) is not bytes:
                key = bytes(key)
            if value is not None and type(value) is not bytes:
                value = bytes(value)
            body = 1 + _unsigned_size(_zigzag(td)) + _unsigned_size(_zigzag(od))
            if key is None:
                body += 1
                key_size = -1
            else:
                key_size = len(key)
                body += _unsigned_size(_zigzag(key_size)) + key_size
            if value is None:
                body += 1
                value_size = -1
            else:
                value_size = len(value)
                body += _unsigned_size(_zigzag(value_size)) + value_size
            encoded = None
            if not headers:
                body += 1
            else:
                count = len(headers)
                if count > INT32_MAX:
                    raise ValueError(f"varint value {count} is outside the int32 range")
                body += _unsigned_size(_zigzag(count))
                encoded = []
                for header_key, header_value in headers:
                    encoded_key = header_key.encode("utf-8")
                    if header_value is not None and type(header_value) is not bytes:
                        header_value = bytes(header_value)
                    encoded.append((encoded_key, header_value))
                    header_size = len(encoded_key)
                    body += _unsigned_size(_zigzag(header_size)) + header_size
                    if header_value is None:
                        body += 1
                    else:
                        header_size = len(header_value)
                        body += _unsigned_size(_zigzag(header_size)) + header_size
            total = _unsigned_size(_zigzag(body)) + body
            if used + total > capacity:
                size = max(2 * capacity, used + total)
                out.extend(bytes(size - capacity))
                capacity = size
            p = out
            p += used
            p = _put(p, _zigzag(body))
            p[0] = 0  # attributes
            p = _put(p + 1, _zigzag(td))
            p = _put(p, _zigzag(od))
            if key is None:
                p[0] = 1
                p += 1
            else:
                p = _put(p, _zigzag(key_size))
                src = key
                memcpy(p, src, key_size)
                p += key_size
            if value is None:
                p[0] = 1
                p += 1
            else:
                p = _put(p, _zigzag(value_size))
                src = value
                memcpy(p, src, value_size)
                p += value_size
            if encoded is None:
                p[0] = 0
                p += 1
            else:
                p = _put(p, _zigzag(len(encoded)))
                for encoded_key, header_value in encoded:
                    header_size = len(encoded_key)
                    p = _put(p, _zigzag(header_size))
                    src = encoded_key
                    memcpy(p, src, header_size)
                    p += header_size
                    if header_value is None:
                        p[0] = 1
                        p += 1
                    else:
                        header_size = len(header_value)
                        p = _put(p, _zigzag(header_size))
                        src = header_value
                        memcpy(p, src, header_size)
                        p += header_size
            used += total
    if cython.compiled:
        del out[used:]
    return out, previous, max_timestamp


# ---------------------------------------------------------------------------------------------
# Decode: records section -> Record objects, consumer records, or columns
# ---------------------------------------------------------------------------------------------

_RECORDS = 0
_CONSUMER = 1
_COLUMNS = 2
_new_object = object.__new__
_tuple_new = tuple.__new__


@cython.boundscheck(True)  # an index past the end raises IndexError: that is how EOF is found
@cython.wraparound(False)
@cython.locals(
    buf="const unsigned char[:]",
    data=bytes,
    end=cython.Py_ssize_t,
    origin=cython.Py_ssize_t,
    stop=cython.Py_ssize_t,
    position=cython.Py_ssize_t,
    start=cython.Py_ssize_t,
    record_end=cython.Py_ssize_t,
    count=cython.Py_ssize_t,
    index=cython.Py_ssize_t,
    header=cython.Py_ssize_t,
    b=cython.int,
    c=cython.int,
    length=cython.long,
    size=cython.long,
    offset_delta=cython.long,
    header_count=cython.long,
    timestamp_delta=cython.longlong,
    base_offset_c=cython.longlong,
    base_timestamp_c=cython.longlong,
    offset_c=cython.longlong,
    lo_c=cython.longlong,
    hi_c=cython.longlong,
    safe_offsets=cython.bint,
    exact_c=cython.bint,
    hi_open=cython.bint,
    interpreted=cython.bint,
    to_consumer=cython.bint,
    to_records=cython.bint,
    start_of_data=cython.p_char,
    filtering=cython.bint,
    fixed=cython.bint,
    mode=cython.int,
    with_headers=cython.bint,
    zz="const long*",
    zz2="const int*",
    out=list,
    keys_out=list,
    values_out=list,
    offsets_out=list,
    timestamps_out=list,
    types_out=list,
    headers_out=list,
)
def _decode(
    data,
    origin,
    stop,
    count,
    base_offset,
    base_timestamp,
    append_time,
    lo,
    hi,
    mode,
    out,
    record_type,
    topic,
    partition,
    timestamp_name,
    columns,
    with_headers,
):
    """The one decoding loop: exactly ``count`` records filling ``data[origin:stop]``, each with
    ``lo <= offset < hi`` (None: unbounded) built as ``mode`` says and appended to ``out``
    (or, for columns, to ``columns``' lists). Raises CorruptRecordError naming the record.
    Positions (and messages) count from ``origin``; nothing past ``stop`` is read."""
    if not 0 <= origin <= stop <= len(data):
        raise ValueError(f"records section [{origin}, {stop}) is outside the {len(data)} bytes given")
    interpreted = not cython.compiled
    if interpreted:
        if origin or stop != len(data):
            data = data[origin:stop]  # the interpreter indexes bytes fastest: one copy
        buf = data
        end = len(data)
    else:  # a view of the records section, and its bytes by pointer: no copy
        buf = memoryview(data)[origin:stop]
        start_of_data = data
        start_of_data += origin
        end = stop - origin
    if cython.compiled:  # C arrays: a lookup is one load
        zz = _ZZ1_C
        zz2 = _ZZ2_C
    else:
        zz = _ZIGZAG_ONE
        zz2 = _ZIGZAG_TWO
    fixed = append_time is not None
    base_offset_c = base_offset
    base_timestamp_c = base_timestamp
    # offsets are int64 + int32: only a base within 2^31 of the int64 edges can overflow
    safe_offsets = INT32_MIN - _INT64_MIN < base_offset < _INT64_MAX - INT32_MAX
    filtering = lo is not None or hi is not None
    hi_open = hi is None
    if lo is None:
        lo = _INT64_MIN
    if hi is None:
        hi = _INT64_MAX + 1
    # C comparisons where every bound and offset is an int64, else Python ints (exact at the edges)
    exact_c = safe_offsets and _INT64_MIN <= lo <= _INT64_MAX and (hi_open or _INT64_MIN <= hi <= _INT64_MAX)
    lo_c = lo if exact_c else 0
    hi_c = (_INT64_MAX if hi_open else hi) if exact_c else 0
    to_consumer = mode == _CONSUMER
    to_records = mode == _RECORDS
    tuple_new = _tuple_new
    new_object = _new_object
    if out is not None:
        add = out.append
    type_id = 0  # set for columns below; a defined value for the compiler otherwise
    if mode == _RECORDS:
        set_offset = record_type.offset.__set__
        set_timestamp = record_type.timestamp.__set__
        set_key = record_type.key.__set__
        set_value = record_type.value.__set__
        set_headers = record_type.headers.__set__
    elif mode == _COLUMNS:
        keys_out = columns.keys
        values_out = columns.values
        offsets_out = columns.offsets
        timestamps_out = columns.timestamps
        types_out = columns.types
        headers_out = columns.headers
        add_key, add_value, add_offset = keys_out.append, values_out.append, offsets_out.append
        add_timestamp, add_type, add_headers = timestamps_out.append, types_out.append, headers_out.append
        type_id = 1 if fixed else 0
    position = 0
    index = 0
    try:
        for index in range(count):
            if position >= end:
                raise CorruptRecordError(
                    f"incorrect declared batch size, premature EOF reached: record {index} of {count} is missing"
                )
            b = buf[position]
            if b < 0x80:
                length = zz[b]
                position += 1
            elif (c := buf[position + 1]) < 0x80:
                length = zz2[b | c << 8]
                position += 2
            else:
                length, position = _long32(buf, position)
            start = position
            record_end = position + length
            if length < 0 or record_end > end:
                raise CorruptRecordError(
                    f"incorrect declared batch size, premature EOF reached: record {index} of {count} declares "
                    f"{length} bytes but {end - position} remain"
                )
            b = buf[position + 1]  # after the attributes byte (unused): timestamp delta
            if b < 0x80:
                timestamp_delta = zz[b]
                position += 2
            elif (c := buf[position + 2]) < 0x80:
                timestamp_delta = zz2[b | c << 8]
                position += 3
            else:
                timestamp_delta, position = _long64(buf, position + 1)
            b = buf[position]
            if b < 0x80:
                offset_delta = zz[b]
                position += 1
            elif (c := buf[position + 1]) < 0x80:
                offset_delta = zz2[b | c << 8]
                position += 2
            else:
                offset_delta, position = _long32(buf, position)
            b = buf[position]
            if b < 0x80:
                size = zz[b]
                position += 1
            elif (c := buf[position + 1]) < 0x80:
                size = zz2[b | c << 8]
                position += 2
            else:
                size, position = _long32(buf, position)
            if size >= 0:
                key = data[position : position + size] if interpreted else _slice(start_of_data, position, size, end)
                position += size
            else:
                key = None
            b = buf[position]
            if b < 0x80:
                size = zz[b]
                position += 1
            elif (c := buf[position + 1]) < 0x80:
                size = zz2[b | c << 8]
                position += 2
            else:
                size, position = _long32(buf, position)
            if size >= 0:
                value = data[position : position + size] if interpreted else _slice(start_of_data, position, size, end)
                position += size
            else:
                value = None
            b = buf[position]
            if b == 0:
                headers = ()  # type: tuple[tuple[str, bytes | None], ...]
                position += 1
            else:
                if b < 0x80:
                    header_count = zz[b]
                    position += 1
                else:
                    header_count, position = _long32(buf, position)
                if header_count < 0:
                    raise CorruptRecordError(f"record {index} has an invalid number of headers {header_count}")
                if header_count > record_end - position:  # each header takes >= 2 bytes; stops huge loops
                    raise CorruptRecordError(
                        f"record {index} declares {header_count} headers in {record_end - position} bytes"
                    )
                header_list = []
                for header in range(header_count):
                    b = buf[position]
                    if b < 0x80:
                        size = zz[b]
                        position += 1
                    else:
                        size, position = _long32(buf, position)
                    if size < 0:
                        raise CorruptRecordError(f"record {index} has a header with a null key (length {size})")
                    # Java decodes malformed UTF-8 with replacement characters; so do we.
                    header_key = (
                        data[position : position + size] if interpreted else _slice(start_of_data, position, size, end)
                    ).decode("utf-8", "replace")
                    position += size
                    b = buf[position]
                    if b < 0x80:
                        size = zz[b]
                        position += 1
                    else:
                        size, position = _long32(buf, position)
                    if size >= 0:
                        header_value = (
                            data[position : position + size]
                            if interpreted
                            else _slice(start_of_data, position, size, end)
                        )
                        position += size
                    else:
                        header_value = None
                    header_list.append((header_key, header_value))
                headers = tuple(header_list)
            if position != record_end:
                raise CorruptRecordError(
                    f"invalid record size: record {index} should take {length} bytes but its fields take "
                    f"{position - start}"
                )
            if interpreted:
                offset = base_offset + offset_delta
                if filtering and not lo <= offset < hi:
                    continue
                timestamp = append_time if fixed else base_timestamp + timestamp_delta
            else:
                if exact_c:
                    offset_c = base_offset_c + offset_delta
                    if filtering and not (offset_c >= lo_c and (hi_open or offset_c < hi_c)):
                        continue
                    offset = offset_c
                else:
                    offset = int(base_offset) + offset_delta
                    if filtering and not lo <= offset < hi:
                        continue
                timestamp = append_time if fixed else _add(base_timestamp_c, timestamp_delta)
            if to_consumer:
                record = tuple_new(
                    record_type, (topic, partition, offset, timestamp, key, value, headers, timestamp_name)
                )
                if interpreted:
                    add(record)
                else:
                    PyObject_GC_UnTrack(record)
                    out.append(record)
            elif to_records:
                record = new_object(record_type)
                set_offset(record, offset)
                set_timestamp(record, timestamp)
                set_key(record, key)
                set_value(record, value)
                set_headers(record, headers)
                if interpreted:
                    add(record)
                else:
                    out.append(record)
            elif interpreted:  # bound appends: the interpreter's fastest
                add_key(key)
                add_value(value)
                add_offset(offset)
                add_timestamp(timestamp)
                add_type(type_id)
                if with_headers:
                    add_headers(headers)
            else:  # typed lists: the compiler's fastest
                keys_out.append(key)
                values_out.append(value)
                offsets_out.append(offset)
                timestamps_out.append(timestamp)
                types_out.append(type_id)
                if with_headers:
                    headers_out.append(headers)
    except IndexError:
        raise CorruptRecordError(
            f"incorrect declared batch size, premature EOF reached inside record {index} of {count}"
        ) from None
    if position != end:
        raise CorruptRecordError(
            f"incorrect declared batch size, records still remaining: {end - position} bytes after {count} records"
        )


def _as_bytes(data) -> bytes:
    return data if type(data) is bytes else bytes(data)


def decode_records(data, count, base_offset, base_timestamp, append_time, record_type) -> list:
    """The ``count`` records filling ``data`` (a batch's uncompressed records section) as
    ``record_type`` objects (records.Record: offset, timestamp, key, value, headers slots).
    ``append_time`` is every record's timestamp (LogAppendTime batches) or None."""
    out = []  # type: list[object]
    data = _as_bytes(data)
    _decode(
        data,
        0,
        len(data),
        count,
        base_offset,
        base_timestamp,
        append_time,
        None,
        None,
        _RECORDS,
        out,
        record_type,
        None,
        None,
        None,
        None,
        False,
    )
    return out


def decode_consumer_records(
    data,
    count,
    base_offset,
    base_timestamp,
    append_time,
    position,
    out,
    record_type,
    topic,
    partition,
    timestamp_name,
    origin=0,
    stop=None,
) -> None:
    """Append the records at or after offset ``position`` to ``out`` as ``record_type`` tuples
    (client.types.ConsumerRecord: topic, partition, offset, timestamp, key, value, headers,
    timestamp type name), built straight from the bytes: one object a record. The records section
    is ``data[origin:stop]`` (default: all of it), read in place where compiled."""
    data = _as_bytes(data)
    _decode(
        data,
        origin,
        len(data) if stop is None else stop,
        count,
        base_offset,
        base_timestamp,
        append_time,
        position,
        None,
        _CONSUMER,
        out,
        record_type,
        topic,
        partition,
        timestamp_name,
        None,
        False,
    )


def decode_columns(
    data, count, base_offset, base_timestamp, append_time, lo, hi, columns, with_headers, origin=0, stop=None
) -> None:
    """Append the records with ``lo <= offset < hi`` to the lists ``columns`` holds (keys, values,
    offsets, timestamps, types: 0 CreateTime / 1 LogAppendTime, headers if ``with_headers``); the
    records section is ``data[origin:stop]`` (default: all of it), read in place where compiled."""
    data = _as_bytes(data)
    _decode(
        data,
        origin,
        len(data) if stop is None else stop,
        count,
        base_offset,
        base_timestamp,
        append_time,
        lo,
        hi,
        _COLUMNS,
        None,
        None,
        None,
        None,
        None,
        columns,
        with_headers,
    )


# ---------------------------------------------------------------------------------------------
# The broker's walk: every record checked, nothing built
# ---------------------------------------------------------------------------------------------


@cython.boundscheck(True)  # an index past the end raises IndexError: that is how EOF is found
@cython.wraparound(False)  # positions only grow from a non-negative start
@cython.locals(
    buf="const unsigned char[:]",
    end=cython.Py_ssize_t,
    position=cython.Py_ssize_t,
    record_end=cython.Py_ssize_t,
    count=cython.Py_ssize_t,
    index=cython.Py_ssize_t,
    header=cython.Py_ssize_t,
    b=cython.int,
    c=cython.int,
    length=cython.long,
    size=cython.long,
    offset_delta=cython.long,
    header_count=cython.long,
    delta=cython.longlong,
    top=cython.longlong,
    top_index=cython.Py_ssize_t,
    low=cython.longlong,
    high=cython.longlong,
    no_timestamp=cython.longlong,
    in_sequence=cython.bint,
    keys_required=cython.bint,
    zz="const long*",
    zz2="const int*",
)
def walk_records(
    data,
    position: int,
    count: int,
    base_timestamp: int,
    *,
    min_timestamp: int = _INT64_MIN,
    max_timestamp: int = _INT64_MAX,
    keys_required: bool = False,
) -> tuple[int, int, bool]:
    """Walk ``count`` records filling ``data[position:]`` exactly (protocol/record_walk.py says
    what is checked and why).

    ``data`` is bytes or a bytearray (indexing a memoryview is slower). Returns
    (largest base_timestamp + timestamp delta, index of the first record with it, whether every
    record's offset delta equals its index). Timestamps outside int64 are out of range whatever
    the bounds. Raises InvalidRecordError or InvalidTimestampError naming the record.
    """
    buf = data  # compiled: a typed view of the bytes; interpreted: the bytes themselves
    end = len(data)
    if cython.compiled:  # C arrays: a lookup is one load
        zz = _ZZ1_C
        zz2 = _ZZ2_C
    else:
        zz = _ZIGZAG_ONE
        zz2 = _ZIGZAG_TWO
    # Bounds on the timestamp delta, so the loop compares deltas without adding base_timestamp.
    # Every delta is an int64, so bounds beyond int64 clamp to it (exact for the comparisons), and
    # an empty range becomes (max, min), which every delta fails. The loop then needs no big ints.
    low_bound = max(min_timestamp, _INT64_MIN) - base_timestamp
    high_bound = min(max_timestamp, _INT64_MAX) - base_timestamp
    if low_bound < _INT64_MIN:
        low_bound = _INT64_MIN
    if high_bound > _INT64_MAX:
        high_bound = _INT64_MAX
    if low_bound > high_bound:
        low_bound, high_bound = _INT64_MAX, _INT64_MIN
    low = low_bound
    high = high_bound
    no_timestamp = NO_TIMESTAMP - base_timestamp
    top = _INT64_MIN
    top_index = -1
    in_sequence = True
    index = 0
    try:
        for index in range(count):
            # Each varint: one byte (a table), two bytes (a table), else the general decoder.
            b = buf[position]
            if b < 0x80:
                length = zz[b]
                position += 1
            elif (c := buf[position + 1]) < 0x80:
                length = zz2[b | c << 8]
                position += 2
            else:
                length, position = _long32(buf, position)
            record_end = position + length
            if length < 0 or record_end > end:
                raise InvalidRecordError(
                    f"Invalid record size: record {index} declares {length} bytes but {end - position} remain"
                )
            b = buf[position + 1]  # after the attributes byte (unused in v2): timestamp delta
            if b < 0x80:
                delta = zz[b]
                position += 2
            elif (c := buf[position + 2]) < 0x80:
                delta = zz2[b | c << 8]
                position += 3
            else:
                delta, position = _long64(buf, position + 1)
            if delta > top or top_index < 0:
                top = delta
                top_index = index
            if (delta < low or delta > high) and delta != no_timestamp:
                error = InvalidTimestampError(
                    f"Timestamp {base_timestamp + delta} of record {index} is out of range: it must be within "
                    f"[{min_timestamp}, {max_timestamp}]"
                )
                error.timestamp = base_timestamp + delta
                raise error
            b = buf[position]  # offset delta
            if b < 0x80:
                if zz[b] != index:
                    in_sequence = False
                position += 1
            elif (c := buf[position + 1]) < 0x80:
                if zz2[b | c << 8] != index:
                    in_sequence = False
                position += 2
            else:
                offset_delta, position = _long32(buf, position)
                if offset_delta != index:
                    in_sequence = False
            b = buf[position]  # key length; any negative length is a null key
            if b < 0x80:
                size = zz[b]
                position += 1
            elif (c := buf[position + 1]) < 0x80:
                size = zz2[b | c << 8]
                position += 2
            else:
                size, position = _long32(buf, position)
            if size >= 0:
                position += size
            elif keys_required:
                raise InvalidRecordError(f"Compacted topic cannot accept a record without a key (record {index})")
            b = buf[position]  # value length
            if b < 0x80:
                size = zz[b]
                position += 1
            elif (c := buf[position + 1]) < 0x80:
                size = zz2[b | c << 8]
                position += 2
            else:
                size, position = _long32(buf, position)
            if size > 0:
                position += size
            b = buf[position]  # header count
            if b == 0:
                position += 1
            else:
                if b < 0x80:
                    header_count = zz[b]
                    position += 1
                elif (c := buf[position + 1]) < 0x80:
                    header_count = zz2[b | c << 8]
                    position += 2
                else:
                    header_count, position = _long32(buf, position)
                if header_count < 0:
                    raise InvalidRecordError(f"Found invalid number of record headers {header_count} in record {index}")
                if header_count > record_end - position:  # a header takes >= 2 bytes; stops huge loops
                    raise InvalidRecordError(
                        f"Found invalid number of record headers: record {index} declares {header_count} "
                        f"headers in {record_end - position} bytes"
                    )
                for header in range(header_count):
                    b = buf[position]  # header key length
                    if b < 0x80:
                        size = zz[b]
                        position += 1
                    elif (c := buf[position + 1]) < 0x80:
                        size = zz2[b | c << 8]
                        position += 2
                    else:
                        size, position = _long32(buf, position)
                    if size < 0:
                        raise InvalidRecordError(f"Invalid negative header key size {size} in record {index}")
                    position += size
                    b = buf[position]  # header value length
                    if b < 0x80:
                        size = zz[b]
                        position += 1
                    elif (c := buf[position + 1]) < 0x80:
                        size = zz2[b | c << 8]
                        position += 2
                    else:
                        size, position = _long32(buf, position)
                    if size > 0:
                        position += size
            if position != record_end:
                raise InvalidRecordError(
                    f"Invalid record size: record {index} should take {length} bytes but its fields take "
                    f"{position - record_end + length}"
                )
    except IndexError:  # also a missing record: its length prefix is past the end
        raise InvalidRecordError(
            f"Incorrect declared batch size, premature EOF reached at record {index} of the {count} declared"
        ) from None
    except CorruptRecordError as exc:  # a varint longer than 5 (10) bytes
        raise InvalidRecordError(f"Found invalid record structure in record {index}: {exc}") from None
    if position != end:
        raise InvalidRecordError(
            f"Incorrect declared batch size, records still remaining: {end - position} bytes after {count} records"
        )
    if top_index < 0:
        return NO_TIMESTAMP, -1, True
    return base_timestamp + top, top_index, in_sequence


# ---------------------------------------------------------------------------------------------
# The validator's header checks (broker/storage/validator.py): one producer batch's 61 bytes
# ---------------------------------------------------------------------------------------------

_HEADER_UNPACK = HEADER.unpack_from
# record_batch's layout as plain ints: compiled, C integers (declared in _record_codec_c.pxd), so
# the check's pointer arithmetic and compares never touch a Python object.
_HEADER_SIZE = HEADER_SIZE
_LOG_OVERHEAD = LOG_OVERHEAD
_MAGIC = CURRENT_MAGIC
_CONTROL_FLAG = CONTROL_FLAG
_COMPRESSION_MASK = COMPRESSION_MASK
_MAX_CODEC = int(max(CompressionType))
_AT_BATCH_LENGTH = BATCH_LENGTH_OFFSET
_AT_MAGIC = MAGIC_OFFSET
_AT_CRC = CRC_OFFSET
_AT_ATTRIBUTES = ATTRIBUTES_OFFSET
_AT_LAST_OFFSET_DELTA = LAST_OFFSET_DELTA_OFFSET
_AT_BASE_TIMESTAMP = BASE_TIMESTAMP_OFFSET
_AT_MAX_TIMESTAMP = MAX_TIMESTAMP_OFFSET
_AT_PRODUCER_ID = PRODUCER_ID_OFFSET
_AT_BASE_SEQUENCE = BASE_SEQUENCE_OFFSET
_AT_RECORDS_COUNT = RECORDS_COUNT_OFFSET


@cython.cfunc
@cython.inline
@cython.locals(p="const unsigned char*", v=cython.ulonglong, i=cython.int)
def _be(p, n: cython.int) -> cython.ulonglong:
    """The big-endian unsigned integer of the ``n`` bytes at ``p`` (compiled path only)."""
    v = 0
    for i in range(n):
        v = (v << 8) | p[i]
    return v


@cython.boundscheck(True)
@cython.wraparound(False)
@cython.locals(
    buf="const unsigned char[::1]",
    p="const unsigned char*",
    size=cython.Py_ssize_t,
    limit=cython.longlong,
    base_offset=cython.longlong,
    batch_length=cython.longlong,
    magic=cython.longlong,
    crc=cython.longlong,
    attributes=cython.longlong,
    last_offset_delta=cython.longlong,
    base_timestamp=cython.longlong,
    max_timestamp=cython.longlong,
    producer_id=cython.longlong,
    base_sequence=cython.longlong,
    count=cython.longlong,
)
def check_batch_header(data, max_bytes: int):
    """The header fields validation goes on with, when ``data`` is exactly one v2 batch that keeps
    every header rule a producer's batch must keep (Kafka's leader-side checks, in its order: the
    framing and magic, a base offset of 0, a last offset delta of count - 1, at least one record,
    no control flag, a base sequence on an idempotent batch, a known codec) and is at most
    ``max_bytes`` long; else None, and the validator names the rule broken (a rare path).

    Returns (batch_length, crc, attributes, last_offset_delta, base_timestamp, max_timestamp,
    records_count). Compiled, the 61 bytes are read as C integers through a pointer (so ``data``
    must be contiguous, as struct.unpack_from also requires); interpreted, by one
    struct.unpack_from; both make the same decision (tests/storage/test_validator_core.py).
    """
    size = len(data)
    if size < _HEADER_SIZE:
        return None
    limit = max_bytes
    if cython.compiled:
        buf = data
        p = cython.address(buf[0])
        base_offset = cython.cast(cython.longlong, _be(p, 8))  # at 0
        batch_length = cython.cast(cython.int, cython.cast(cython.uint, _be(p + _AT_BATCH_LENGTH, 4)))
        magic = cython.cast(cython.schar, p[_AT_MAGIC])
        crc = _be(p + _AT_CRC, 4)
        attributes = cython.cast(cython.short, cython.cast(cython.ushort, _be(p + _AT_ATTRIBUTES, 2)))
        last_offset_delta = cython.cast(cython.int, cython.cast(cython.uint, _be(p + _AT_LAST_OFFSET_DELTA, 4)))
        base_timestamp = cython.cast(cython.longlong, _be(p + _AT_BASE_TIMESTAMP, 8))
        max_timestamp = cython.cast(cython.longlong, _be(p + _AT_MAX_TIMESTAMP, 8))
        producer_id = cython.cast(cython.longlong, _be(p + _AT_PRODUCER_ID, 8))
        base_sequence = cython.cast(cython.int, cython.cast(cython.uint, _be(p + _AT_BASE_SEQUENCE, 4)))
        count = cython.cast(cython.int, cython.cast(cython.uint, _be(p + _AT_RECORDS_COUNT, 4)))
    else:
        (
            base_offset,
            batch_length,
            _,
            magic,
            crc,
            attributes,
            last_offset_delta,
            base_timestamp,
            max_timestamp,
            producer_id,
            _,
            base_sequence,
            count,
        ) = _HEADER_UNPACK(data, 0)
    if magic != _MAGIC or batch_length + _LOG_OVERHEAD != size:
        return None
    if (
        base_offset != 0
        or last_offset_delta + 1 != count
        or count <= 0
        or attributes & _CONTROL_FLAG
        or (producer_id >= 0 and base_sequence < 0)
        or attributes & _COMPRESSION_MASK > _MAX_CODEC
    ):
        return None
    if size > limit:
        return None
    return batch_length, crc, attributes, last_offset_delta, base_timestamp, max_timestamp, count


def renumber_records(data, position: int, count: int) -> bytearray:
    """The ``count`` records at ``data[position:]`` with their offset deltas rewritten to 0..count-1.

    Kafka rebuilds a batch whose inner offsets are not 0..n-1 instead of refusing it; this is
    that rebuild at the byte level (every other field is copied as is, so no Record objects).
    Only for records ``walk_records`` has accepted: it is the rare path, so it decodes with the
    plain varint helpers rather than a second unrolled loop.
    """
    view = memoryview(data)
    out = bytearray()
    for index in range(count):
        length, body = decode_varint(data, position)
        record_end = body + length
        _, offset_field = decode_varlong(data, body + 1)  # after attributes and timestamp delta
        _, rest = decode_varint(data, offset_field)
        new_offset = encode_varint(index)
        out += encode_varint(length - (rest - offset_field) + len(new_offset))
        out += view[body:offset_field]
        out += new_offset
        out += view[rest:record_end]
        position = record_end
    return out


@cython.boundscheck(True)
@cython.wraparound(False)
@cython.locals(
    buf="const unsigned char[:]",
    position=cython.Py_ssize_t,
    record_end=cython.Py_ssize_t,
    count=cython.Py_ssize_t,
    index=cython.Py_ssize_t,
    b=cython.int,
    c=cython.int,
    length=cython.long,
    offset_delta=cython.long,
    timestamp_delta=cython.longlong,
    zz="const long*",
    zz2="const int*",
    end=cython.Py_ssize_t,
)
def first_at_or_after(data, count, base_offset, base_timestamp, append_time, timestamp, min_offset):
    """(timestamp, offset) of the first of the ``count`` records in ``data`` with timestamp >=
    ``timestamp`` and offset >= ``min_offset``, or None; keys, values and headers are skipped by
    their lengths. A short buffer raises IndexError (the caller names the batch), a record length
    that is negative or runs past the data CorruptRecordError."""
    buf = data
    end = len(data)
    if cython.compiled:  # C arrays: a lookup is one load
        zz = _ZZ1_C
        zz2 = _ZZ2_C
    else:
        zz = _ZIGZAG_ONE
        zz2 = _ZIGZAG_TWO
    position = 0
    for index in range(count):
        b = buf[position]
        if b < 0x80:
            length = zz[b]
            position += 1
        elif (c := buf[position + 1]) < 0x80:
            length = zz2[b | c << 8]
            position += 2
        else:
            length, position = _long32(buf, position)
        record_end = position + length
        if length < 0 or record_end > end:  # a position must never step back (pure: negative indexes wrap)
            raise CorruptRecordError(f"invalid record size {length} at position {position} of {end}")
        b = buf[position + 1]  # after the attributes byte: timestamp delta
        if b < 0x80:
            timestamp_delta = zz[b]
            position += 2
        elif (c := buf[position + 2]) < 0x80:
            timestamp_delta = zz2[b | c << 8]
            position += 3
        else:
            timestamp_delta, position = _long64(buf, position + 1)
        b = buf[position]
        if b < 0x80:
            offset_delta = zz[b]
        elif (c := buf[position + 1]) < 0x80:
            offset_delta = zz2[b | c << 8]
        else:
            offset_delta = _long32(buf, position)[0]
        record_timestamp = append_time if append_time is not None else base_timestamp + timestamp_delta
        if record_timestamp >= timestamp and base_offset + offset_delta >= min_offset:
            return record_timestamp, base_offset + offset_delta
        position = record_end
    return None
