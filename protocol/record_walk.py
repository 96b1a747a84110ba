"""The per-record walk of a v2 batch: every record checked, nothing built.

Kafka's leader reads every record of a producer's batch before storing it (LogValidator, with
DefaultRecordBatch's iterators and DefaultRecord.readFrom), so a batch whose CRC is right but
whose records are not never reaches a consumer. ``walk_records`` is that read, for the broker's
validator: it follows the length prefixes and varints of exactly ``count`` records and raises
InvalidRecordError (Kafka's INVALID_RECORD) for anything DefaultRecord would refuse:

* a record count that disagrees with the records present ("Incorrect declared batch size":
  premature EOF, or bytes still remaining after the last record);
* a record length prefix that is negative, runs past the data, or disagrees with the fields it
  frames ("Invalid record size");
* a varint longer than 5 bytes or a varlong longer than 10 ("Found invalid record structure");
* a key, value or header running out of bounds, a negative header count, more headers than
  bytes left, a header with a negative (null) key length;

and, as the walk goes, the record-level rules LogValidator applies: a timestamp outside
[``min_timestamp``, ``max_timestamp``] raises InvalidTimestampError (INVALID_TIMESTAMP; Kafka
exempts NO_TIMESTAMP, -1; the error's ``timestamp`` attribute is the offending one), and with
``keys_required`` (compacted topics) a null key raises InvalidRecordError. It returns what the
broker computes instead of trusting the header: the largest record timestamp, the index of the
first record carrying it, and whether the offset deltas are exactly 0..count-1.

It is one pure function over a buffer, allocation-free per record (varints of one and two bytes,
nearly all of them, are decoded inline through tables). It is also the first module of the compiled
core (protocol/core.py): written in Cython's pure-Python mode, this same file runs interpreted and
is compiled (setup.py) into ``triolog.protocol._record_walk_c``; the ``cython.locals`` declarations
give the compiler C types and are no-ops for the interpreter. The consumer's decoder
(records._parse_records) is its building counterpart.
"""

from __future__ import annotations

try:  # Cython is needed to build, not to run: its pure-Python-mode names, or a stand-in.
    import cython
except ModuleNotFoundError:
    from . import _cython_shim as cython

from .errors import CorruptRecordError, InvalidRecordError, InvalidTimestampError
from .record_batch import NO_TIMESTAMP
from .records import _ZIGZAG_ONE, _varint32, _varint64, decode_varint, decode_varlong, encode_varint

__all__ = ["renumber_records", "walk_records"]

_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
#: Zig-zag values of two-byte varints (|value| 64..8191: most record lengths), indexed by
#: first byte | second byte << 8; only entries whose first byte has its continuation bit are used.
_ZIGZAG_TWO = [((u >> 1) ^ -(u & 1)) for u in ((i & 0x7F) | ((i >> 8) << 7) for i in range(1 << 15))]


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
    zz=list,
    zz2=list,
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
    """Walk ``count`` records filling ``data[position:]`` exactly.

    ``data`` is bytes or a bytearray (indexing a memoryview is slower). Returns
    (largest base_timestamp + timestamp delta, index of the first record with it, whether every
    record's offset delta equals its index). Timestamps outside int64 are out of range whatever
    the bounds. Raises InvalidRecordError or InvalidTimestampError naming the record.
    """
    buf = data  # compiled: a typed view of the bytes; interpreted: the bytes themselves
    end = len(data)
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
                length, position = _varint32(data, position)
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
                delta, position = _varint64(data, position + 1)
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
                offset_delta, position = _varint32(data, position)
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
                size, position = _varint32(data, position)
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
                size, position = _varint32(data, position)
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
                    header_count, position = _varint32(data, position)
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
                        size, position = _varint32(data, position)
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
                        size, position = _varint32(data, position)
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
