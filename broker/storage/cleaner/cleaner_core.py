"""The cleaner's per-record loops: pass 1 (key -> offset map) and pass 2 (keep or drop, copy).

One batch's records at a time, so the caller (cleaner.py) keeps everything per batch and per
segment (files, transactions, headers, compression) and this module only what runs once per
record. Like protocol/record_codec.py it is written in Cython's pure-Python mode: this same file
runs interpreted, and setup.py compiles it into ``triolog.broker.storage.cleaner._cleaner_core_c``
(``core.load`` picks one; ``core.implementation`` gives either, for the tests comparing them).
Both make the same decisions, byte for byte; the few places where the compiled one takes another
road to the same bytes are under ``if cython.compiled`` and covered by the property tests.

The offset map is SkimpyOffsetMap's buffer (offset_map.py): 24-byte slots of two int64 hash
words and the offset, read and written through an int64 view, which compiled is a typed
memoryview: a probe compares C integers, and no Python object is made per record for it.

Hash: MD5 of the key, as Kafka's SkimpyOffsetMap. The map is in memory only, so the hash is no
file format; MD5 stays because (a) the pure-Python fallback must fill the *same* map (the
property tests compare them slot for slot) at no less than today's speed, and CPython's ``_md5``
is the fastest 128-bit hash it ships; (b) 16 bytes keep Kafka's collision margin (two keys with
one hash share a slot and the cleaner would drop the older key's latest record): with 5 M keys in
a 128 MiB map that is ~1e-26 per round, where a 64-bit hash would give ~1e-6. The compiled loops
call OpenSSL's one-shot ``MD5`` (libcrypto, the library CPython's hashlib uses) through a C
function pointer, found once at run time (``_md5_function``) and checked against ``_md5``: no
Python object per record and no header or link-time dependency, so the extension builds where
OpenSSL's headers are absent. Measured on this project's 2-core VM (loaded), pass 1 over 100-byte
records: ~0.3 us a record with libcrypto against ~1.1 us calling ``_md5`` from the compiled loop
(its hash object, digest and key slice cost more than the hash); where libcrypto is not found,
the compiled loops call ``_md5``. No MD5 of our own: the project writes no crypto by hand.

Varints: one-byte and two-byte varints (nearly all of them: lengths of records up to 8 KiB,
offset deltas, key and value lengths) are decoded inline: interpreted, through the record codec's
zig-zag tables (protocol/record_codec.py, the one table); compiled, by the same arithmetic in C
(``_unzig``; a Python-list lookup there cost pass 2 ~45%). Longer ones by ``_varint``/``_varlong``
below: compiled, the codec's own C readers ``_long32``/``_long64``, cimported from its compiled
twin through protocol/_record_codec_c.pxd (one varint loop in the project, called as a C
function); interpreted, the pure codec's ``read_varint32``/``read_varint64`` (the module itself,
not ``core.load``: the pure twin runs no compiled code). The compiled rebuild writes its two varints (length, timestamp delta) with its
own zig-zag LEB128 loop, the one encoder here.

Corrupt bytes: the cleaner does not re-check a batch's CRC, so bit rot on disk reaches these
loops. Both passes check every record as Kafka's DefaultRecord.readFrom does before they use it
(a non-negative length inside the batch's bytes, headers well formed, the fields ending exactly
at the record's end, so key and value lie inside it; a batch base offset in [0, 2^63 - 2^31))
and raise CorruptRecordError otherwise, with the same message on both paths (a read past the
bytes included). Positions then only grow from 0, so every read of the compiled loops (typed
views, bounds-checked; MD5 through a pointer only for a key of a record that passed the check)
stays inside the batch. The caller (cleaner.py) abandons the round and the partition is marked
uncleanable, as for any unreadable batch. The check costs the interpreted loops ~25 bytecodes a
record (pass 1 ~1.1x, pass 2 ~1.2x the time without it); the compiled ones nothing measurable.
"""

from __future__ import annotations

import struct

try:  # Cython is needed to build, not to run: its pure-Python-mode names, or a stand-in.
    import cython
except ModuleNotFoundError:
    from triolog.protocol import _cython_shim as cython

try:  # CPython's built-in MD5 (the same digest as hashlib.md5, without OpenSSL's per-call setup)
    from _md5 import md5 as _md5
except ImportError:  # pragma: no cover - other interpreters
    from hashlib import md5 as _md5

from triolog.protocol import record_codec
from triolog.protocol.errors import CorruptRecordError

if cython.compiled:
    # this module's own C declarations (_cleaner_core_c.pxd): in scope anyway, named here for mypy
    from cython.cimports.triolog.broker.storage.cleaner._cleaner_core_c import triolog_prefetch

    # the codec's C varint readers (protocol/_record_codec_c.pxd), called as C functions
    from cython.cimports.triolog.protocol._record_codec_c import _long32, _long64

__all__ = ["filter_records", "map_records", "probe_slot", "rebuild_records"]

_INT_MIN = -(2**31)
_WORDS = struct.Struct(">qq")
#: Zig-zag values of one-byte varints, and of two-byte ones indexed by b0 | b1 << 8 (the codec's).
_ZZ = record_codec._ZIGZAG_ONE
_ZZ2 = record_codec._ZIGZAG_TWO
#: The pure codec's readers of longer varints (the interpreted path of _varint / _varlong).
_read_varint32 = record_codec.read_varint32
_read_varint64 = record_codec.read_varint64
_varint_bytes = record_codec.varint_bytes


# The messages of a corrupt record, one place for every loop (both paths raise the same).
def _truncated(n, count) -> str:
    """A read past the end of the batch's bytes."""
    return f"record {n} of {count} runs past the end of the batch's records"


def _bad_length(n, count, position, length, remaining) -> str:
    return f"record {n} of {count} at position {position} declares {length} bytes but {remaining} remain"


def _remaining(left, count) -> str:
    """Bytes after the declared count of records (Kafka: "records still remaining")."""
    return f"incorrect declared batch size, records still remaining: {left} bytes after {count} records"


def _bad_size(n, length, fields) -> str:
    return f"invalid record size: record {n} should take {length} bytes but its fields take {fields}"


#: Beyond this the compiled rebuild's timestamp arithmetic could leave int64: the general path.
_SAFE = 1 << 62
#: The largest base offset whose records' offsets (base + an int32 delta) stay inside int64, so C
#: and Python add them alike; Kafka's offsets are never negative. Beyond it a batch is corrupt
#: (its base offset is outside the CRC's cover: a bit flip there goes unnoticed till here).
_MAX_BASE = (1 << 63) - 1 - (1 << 31)

#: ``Exception`` under a name Cython does not resolve to a type, for an annotation that mypy
#: reads and Cython leaves a plain Python object: a builtin type in an annotation would compile
#: into a variable of that exact type, checked on every assignment.
_Exception = Exception


_md5_address = None


def _md5_function() -> int:
    """The address of libcrypto's one-shot ``MD5`` for the compiled loops, or 0 (they then call
    ``_md5``). The library is OpenSSL's, the one CPython's hashlib is built on, found at run time
    by its usual names (no header or link-time dependency: a build without it still compiles),
    and checked against ``_md5`` on a known input before it is used."""
    global _md5_address
    if _md5_address is None:
        _md5_address = 0
        try:
            import ctypes
        except ImportError:  # pragma: no cover
            return 0
        for name in ("libcrypto.so.3", "libcrypto.so.1.1", "libcrypto.so", "libcrypto.3.dylib", "libcrypto.dylib"):
            try:
                function = ctypes.CDLL(name).MD5
            except (OSError, AttributeError):
                continue
            function.restype = ctypes.c_void_p
            function.argtypes = (ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p)
            probe = b"triolog offset map"
            out = ctypes.create_string_buffer(16)
            function(probe, len(probe), out)
            if out.raw == _md5(probe).digest():
                _md5_address = ctypes.cast(function, ctypes.c_void_p).value or 0
                break
    return _md5_address


@cython.cfunc
@cython.inline
@cython.locals(d="const unsigned char*", i=cython.int, v=cython.ulonglong)
@cython.returns(cython.longlong)
def _be64(d, i):
    """The big-endian int64 at byte ``i`` of a digest (compiled path only)."""
    v = (
        (cython.cast(cython.ulonglong, d[i]) << 56)
        | (cython.cast(cython.ulonglong, d[i + 1]) << 48)
        | (cython.cast(cython.ulonglong, d[i + 2]) << 40)
        | (cython.cast(cython.ulonglong, d[i + 3]) << 32)
        | (cython.cast(cython.ulonglong, d[i + 4]) << 24)
        | (cython.cast(cython.ulonglong, d[i + 5]) << 16)
        | (cython.cast(cython.ulonglong, d[i + 6]) << 8)
        | cython.cast(cython.ulonglong, d[i + 7])
    )
    return cython.cast(cython.longlong, v)


@cython.ccall
@cython.cdivision(True)
@cython.locals(
    h0=cython.longlong,
    h1=cython.longlong,
    attempt=cython.longlong,
    slots=cython.longlong,
    u0=cython.ulonglong,
    u1=cython.ulonglong,
    k=cython.int,
    v=cython.ulonglong,
    p=cython.longlong,
)
@cython.returns(cython.longlong)
def probe_slot(h0, h1, attempt, slots):
    """Kafka's slot for probe ``attempt`` of the digest whose big-endian words are (h0, h1):
    the big-endian int32 at byte min(attempt, 12) of the digest plus max(0, attempt - 12), as a
    Java int; its abs (abs(MIN_INT) = 0) modulo ``slots``."""
    u0 = cython.cast(cython.ulonglong, h0)
    u1 = cython.cast(cython.ulonglong, h1)
    if not cython.compiled:  # Python ints: make them the unsigned words C has
        u0 &= 0xFFFFFFFFFFFFFFFF
        u1 &= 0xFFFFFFFFFFFFFFFF
    k = 12 if attempt > 12 else attempt
    if k <= 4:
        v = (u0 >> (32 - 8 * k)) & 0xFFFFFFFF
    elif k < 8:
        v = ((u0 << (8 * k - 32)) | (u1 >> (96 - 8 * k))) & 0xFFFFFFFF
    else:
        v = (u1 >> (96 - 8 * k)) & 0xFFFFFFFF
    p = cython.cast(cython.longlong, v)
    if p >= 0x80000000:
        p -= 0x100000000
    if attempt > 12:
        p += attempt - 12
        p = ((p + 0x80000000) & 0xFFFFFFFF) - 0x80000000  # Java int overflow
    if p < 0:
        p = 0 if p == _INT_MIN else -p
    return p % slots


@cython.cfunc
@cython.inline
@cython.returns(cython.long)
def _unzig(u: cython.uint):
    """The zig-zag value of a one- or two-byte varint's bits (compiled path: the interpreter reads
    the codec's tables, which hold the same values)."""
    return cython.cast(cython.long, u >> 1) ^ -cython.cast(cython.long, u & 1)


@cython.cfunc
@cython.locals(buf="const unsigned char[::1]", position=cython.Py_ssize_t)
def _varint(buf, data, position) -> tuple[cython.long, cython.Py_ssize_t]:
    """The int32 varint at ``position`` and the position after it: the codec's reader, its C
    function over the typed view when compiled (cimported), its Python one interpreted."""
    if not cython.compiled:
        return _read_varint32(data, position)
    return _long32(buf, position)


@cython.cfunc
@cython.locals(buf="const unsigned char[::1]", position=cython.Py_ssize_t)
def _varlong(buf, data, position) -> tuple[cython.longlong, cython.Py_ssize_t]:
    """_varint for an int64 varlong."""
    if not cython.compiled:
        return _read_varint64(data, position)
    return _long64(buf, position)


@cython.cfunc
@cython.boundscheck(True)
@cython.wraparound(False)
@cython.locals(
    buf="const unsigned char[::1]",
    p=cython.Py_ssize_t,
    record_end=cython.Py_ssize_t,
    n=cython.Py_ssize_t,
    headers=cython.long,
    h=cython.long,
    size=cython.long,
)
@cython.returns(cython.Py_ssize_t)
def _headers_end(buf, data, p, record_end, n):
    """The position after the headers of record ``n`` (their count at ``p``; rare: most records
    have none, which the loops check inline), each inside the record, as Kafka reads them."""
    if p >= record_end:  # no room for the count: the caller's size check says so
        return p + 1
    headers, p = _varint(buf, data, p)
    if headers < 0:
        raise CorruptRecordError(f"record {n} has an invalid number of headers {headers}")
    if headers > record_end - p:  # each header takes >= 2 bytes: no long loop on a corrupt count
        raise CorruptRecordError(f"record {n} declares {headers} headers in {record_end - p} bytes")
    for h in range(headers):
        size, p = _varint(buf, data, p)
        if size < 0:
            raise CorruptRecordError(f"record {n} has a header with a null key (length {size})")
        p += size
        if p >= record_end:
            raise CorruptRecordError(f"record {n}: header {h} runs past the record's end")
        size, p = _varint(buf, data, p)
        if size > 0:
            p += size
        if p > record_end:
            raise CorruptRecordError(f"record {n}: header {h} runs past the record's end")
    return p


@cython.boundscheck(True)  # an index past the end raises IndexError: a truncated record
@cython.wraparound(False)  # positions only grow from 0 (a negative length is refused)
@cython.cdivision(True)
@cython.locals(
    data=bytes,
    count=cython.Py_ssize_t,
    base=cython.longlong,
    start=cython.longlong,
    words="long long[::1]",
    slots=cython.longlong,
    entries=cython.longlong,
    entries_limit=cython.longlong,
    bitmap="unsigned char[::1]",
    bit_base=cython.longlong,
    bit_limit=cython.longlong,
    buf="const unsigned char[::1]",
    dp="const unsigned char*",
    n=cython.Py_ssize_t,
    pos=cython.Py_ssize_t,
    p=cython.Py_ssize_t,
    record_end=cython.Py_ssize_t,
    b=cython.int,
    key_length=cython.long,
    delta=cython.long,
    length=cython.long,
    offset=cython.longlong,
    last_put=cython.longlong,
    mapped=cython.Py_ssize_t,
    collisions=cython.longlong,
    h0=cython.longlong,
    h1=cython.longlong,
    probe=cython.longlong,
    i=cython.Py_ssize_t,
    w0=cython.longlong,
    previous=cython.longlong,
    attempt=cython.longlong,
    rel=cython.longlong,
    zz=list,
    zz2=list,
    md5_c="md5_fn",
    md5_address=cython.size_t,
    bp="const unsigned char*",
    size=cython.Py_ssize_t,
    key_start=cython.Py_ssize_t,
    value_length=cython.long,
    native=cython.bint,
    c=cython.int,
)
def map_records(data, count, base, start, words, slots, entries, entries_limit, bitmap, bit_base, bit_limit):
    """Pass 1 over one batch: put every keyed record at or past ``start`` into the map.

    ``data`` is the batch's (decompressed) records as bytes, ``words`` the map's int64 view,
    ``bitmap`` the "latest of its key" bits over [bit_base, bit_base + bit_limit). Stops before
    a record when the map holds ``entries_limit`` keys. Returns (full, entries, last offset put
    or -1, records read, extra probes).
    """
    # A C array for the compiled path, declared here rather than in cython.locals so that mypy
    # knows the name.
    out: cython.uchar[16]  # libcrypto's digest
    if not 0 <= base <= _MAX_BASE:
        raise CorruptRecordError(f"batch base offset {base} is out of range")
    native = cython.compiled  # a local: the interpreter tests it cheaper than cython.compiled
    buf = data  # compiled: a typed view of the bytes; interpreted: the bytes themselves
    zz = _ZZ
    zz2 = _ZZ2
    unpack_words = _WORDS.unpack
    size = len(data)
    if cython.compiled:
        md5_address = _md5_function()
        if md5_address != 0:
            return _map_records_ahead(
                data, count, base, start, words, slots, entries, entries_limit, bitmap, bit_base, bit_limit, md5_address
            )
        md5_c = cython.cast("md5_fn", md5_address)
        bp = data
    pos = 0
    last_put = -1
    mapped = 0
    collisions = 0
    n = 0
    try:  # a read past the end of the bytes: the batch is cut short
        for n in range(count):
            b = buf[pos]
            if b < 0x80:
                p = pos + 1
                if native:
                    length = _unzig(b)
                else:
                    length = zz[b]
            elif (c := buf[pos + 1]) < 0x80:
                p = pos + 2
                if native:
                    length = _unzig((b & 0x7F) | c << 7)
                else:
                    length = zz2[b | c << 8]
            else:
                length, p = _varint(buf, data, pos)
            record_end = p + length
            if length < 0 or record_end > size:
                raise CorruptRecordError(_bad_length(n, count, pos, length, size - p))
            p += 1  # attributes
            while buf[p] & 0x80:  # timestamp delta: skipped
                p += 1
            b = buf[p + 1]
            if b < 0x80:
                if native:
                    delta = _unzig(b)
                else:
                    delta = zz[b]
                p += 2
            elif (c := buf[p + 2]) < 0x80:
                if native:
                    delta = _unzig((b & 0x7F) | c << 7)
                else:
                    delta = zz2[b | c << 8]
                p += 3
            else:
                delta, p = _varint(buf, data, p + 1)
            offset = base + delta
            b = buf[p]
            if b < 0x80:
                if native:
                    key_length = _unzig(b)
                else:
                    key_length = zz[b]
                p += 1
            else:
                key_length, p = _varint(buf, data, p)
            key_start = p
            if key_length > 0:
                p += key_length
            b = buf[p]  # value length
            if b < 0x80:
                if native:
                    value_length = _unzig(b)
                else:
                    value_length = zz[b]
                p += 1
            elif (c := buf[p + 1]) < 0x80:
                if native:
                    value_length = _unzig((b & 0x7F) | c << 7)
                else:
                    value_length = zz2[b | c << 8]
                p += 2
            else:
                value_length, p = _varint(buf, data, p)
            if value_length > 0:
                p += value_length
            if buf[p] == 0:  # no headers
                p += 1
            else:
                p = _headers_end(buf, data, p, record_end, n)
            if p != record_end:
                raise CorruptRecordError(_bad_size(n, length, p - (record_end - length)))
            if key_length >= 0 and offset >= start:
                if entries >= entries_limit:
                    return True, entries, last_put, mapped, collisions
                if cython.compiled:
                    if md5_address != 0 and key_start >= 0 and key_start + key_length <= size:  # libcrypto
                        md5_c(bp + key_start, key_length, out)
                        h0 = _be64(out, 0)
                        h1 = _be64(out, 8)
                    else:
                        digest = _md5(data[key_start : key_start + key_length]).digest()
                        dp = digest
                        h0 = _be64(dp, 0)
                        h1 = _be64(dp, 8)
                else:
                    h0, h1 = unpack_words(_md5(data[key_start : key_start + key_length]).digest())
                probe = h0 >> 32  # Kafka's first probe: the digest's first 4 bytes as a big-endian int32
                i = (probe if probe >= 0 else -probe if probe != _INT_MIN else 0) % slots * 3
                w0 = words[i]
                if w0 == h0 and words[i + 1] == h1:
                    previous = words[i + 2]
                    words[i + 2] = offset
                elif w0 == 0 and words[i + 1] == 0 and words[i + 2] == 0:
                    if entries >= slots:
                        raise OverflowError("attempt to add a new entry to a full offset map")
                    words[i] = h0
                    words[i + 1] = h1
                    words[i + 2] = offset
                    entries += 1
                    previous = -1
                else:  # Kafka's probe sequence (rare at its load factor)
                    if entries >= slots:
                        raise OverflowError("attempt to add a new entry to a full offset map")
                    attempt = 1
                    while True:
                        collisions += 1
                        i = probe_slot(h0, h1, attempt, slots) * 3
                        w0 = words[i]
                        if w0 == h0 and words[i + 1] == h1:
                            previous = words[i + 2]
                            words[i + 2] = offset
                            break
                        if w0 == 0 and words[i + 1] == 0 and words[i + 2] == 0:
                            words[i] = h0
                            words[i + 1] = h1
                            words[i + 2] = offset
                            entries += 1
                            previous = -1
                            break
                        attempt += 1
                last_put = offset
                rel = previous - bit_base
                if 0 <= rel < bit_limit:
                    bitmap[rel >> 3] &= ~(1 << (rel & 7)) & 0xFF
                rel = offset - bit_base
                if 0 <= rel < bit_limit:
                    bitmap[rel >> 3] |= 1 << (rel & 7)
            mapped += 1
            pos = record_end
    except IndexError:
        raise CorruptRecordError(_truncated(n, count)) from None
    if pos != size:
        raise CorruptRecordError(_remaining(size - pos, count))
    return False, entries, last_put, mapped, collisions


#: Keyed records hashed ahead of their puts in the compiled pass 1 (see _map_records_ahead).
_AHEAD = 16


@cython.cfunc
@cython.boundscheck(True)
@cython.wraparound(False)
@cython.cdivision(True)
@cython.locals(
    data=bytes,
    count=cython.Py_ssize_t,
    base=cython.longlong,
    start=cython.longlong,
    words="long long[::1]",
    slots=cython.longlong,
    entries=cython.longlong,
    entries_limit=cython.longlong,
    bitmap="unsigned char[::1]",
    bit_base=cython.longlong,
    bit_limit=cython.longlong,
    md5_address=cython.size_t,
    buf="const unsigned char[::1]",
    bp="const unsigned char*",
    md5_c="md5_fn",
    size=cython.Py_ssize_t,
    n=cython.Py_ssize_t,
    pos=cython.Py_ssize_t,
    p=cython.Py_ssize_t,
    record_end=cython.Py_ssize_t,
    b=cython.int,
    key_length=cython.long,
    delta=cython.long,
    length=cython.long,
    offset=cython.longlong,
    last_put=cython.longlong,
    collisions=cython.longlong,
    h0=cython.longlong,
    h1=cython.longlong,
    probe=cython.longlong,
    i=cython.Py_ssize_t,
    w0=cython.longlong,
    previous=cython.longlong,
    attempt=cython.longlong,
    rel=cython.longlong,
    zz=list,
    zz2=list,
    j=cython.int,
    pending=cython.int,
    key_start=cython.Py_ssize_t,
    value_length=cython.long,
    native=cython.bint,
    c=cython.int,
)
def _map_records_ahead(
    data, count, base, start, words, slots, entries, entries_limit, bitmap, bit_base, bit_limit, md5_address
):
    """map_records, compiled, with libcrypto's MD5: the same walk and the same puts in the same
    order, but up to 16 keyed records are hashed, and their first slots prefetched, before they
    are put, so the map's cache misses (a random slot of a 128 MiB buffer per key) overlap
    instead of queueing. A put still checks the map's fill first, so it stops at the same record;
    "records read" is then that record's index, as the one-at-a-time loop counts it."""
    # C arrays (this function runs compiled only), declared here rather than in cython.locals so
    # that mypy knows the names.
    out: cython.uchar[16]  # libcrypto's digest
    # the records hashed ahead: their digest words, offsets, first slots and indexes
    ph0: cython.longlong[16]
    ph1: cython.longlong[16]
    poffset: cython.longlong[16]
    pslot: cython.Py_ssize_t[16]
    precord: cython.Py_ssize_t[16]
    native = cython.compiled  # a local: the interpreter tests it cheaper than cython.compiled
    buf = data
    bp = data
    md5_c = cython.cast("md5_fn", md5_address)
    zz = _ZZ
    zz2 = _ZZ2
    size = len(data)
    pos = 0
    last_put = -1
    collisions = 0
    error: _Exception | None = None
    n = 0
    while n < count:
        pending = 0
        while n < count and pending < _AHEAD:
            try:  # a corrupt record: the puts before it first (they may fill the map: no error then)
                b = buf[pos]
                if b < 0x80:
                    p = pos + 1
                    if native:
                        length = _unzig(b)
                    else:
                        length = zz[b]
                elif (c := buf[pos + 1]) < 0x80:
                    p = pos + 2
                    if native:
                        length = _unzig((b & 0x7F) | c << 7)
                    else:
                        length = zz2[b | c << 8]
                else:
                    length, p = _varint(buf, data, pos)
                record_end = p + length
                if length < 0 or record_end > size:
                    raise CorruptRecordError(_bad_length(n, count, pos, length, size - p))
                p += 1  # attributes
                while buf[p] & 0x80:  # timestamp delta: skipped
                    p += 1
                b = buf[p + 1]
                if b < 0x80:
                    if native:
                        delta = _unzig(b)
                    else:
                        delta = zz[b]
                    p += 2
                elif (c := buf[p + 2]) < 0x80:
                    if native:
                        delta = _unzig((b & 0x7F) | c << 7)
                    else:
                        delta = zz2[b | c << 8]
                    p += 3
                else:
                    delta, p = _varint(buf, data, p + 1)
                offset = base + delta
                b = buf[p]
                if b < 0x80:
                    if native:
                        key_length = _unzig(b)
                    else:
                        key_length = zz[b]
                    p += 1
                else:
                    key_length, p = _varint(buf, data, p)
                key_start = p
                if key_length > 0:
                    p += key_length
                b = buf[p]  # value length
                if b < 0x80:
                    if native:
                        value_length = _unzig(b)
                    else:
                        value_length = zz[b]
                    p += 1
                elif (c := buf[p + 1]) < 0x80:
                    if native:
                        value_length = _unzig((b & 0x7F) | c << 7)
                    else:
                        value_length = zz2[b | c << 8]
                    p += 2
                else:
                    value_length, p = _varint(buf, data, p)
                if value_length > 0:
                    p += value_length
                if buf[p] == 0:  # no headers
                    p += 1
                else:
                    p = _headers_end(buf, data, p, record_end, n)
                if p != record_end:
                    raise CorruptRecordError(_bad_size(n, length, p - (record_end - length)))
            except IndexError:
                error = CorruptRecordError(_truncated(n, count))
                break
            except Exception as exc:
                error = exc
                break
            if key_length >= 0 and offset >= start:
                if key_start >= 0 and key_start + key_length <= size:  # always, the walk checked it
                    md5_c(bp + key_start, key_length, out)
                    h0 = _be64(out, 0)
                    h1 = _be64(out, 8)
                else:
                    digest = _md5(data[key_start : key_start + key_length]).digest()
                    h0 = _be64(digest, 0)
                    h1 = _be64(digest, 8)
                probe = h0 >> 32
                i = (probe if probe >= 0 else -probe if probe != _INT_MIN else 0) % slots * 3
                triolog_prefetch(cython.address(words[i]))
                ph0[pending] = h0
                ph1[pending] = h1
                poffset[pending] = offset
                pslot[pending] = i
                precord[pending] = n
                pending += 1
            n += 1
            pos = record_end
        for j in range(pending):
            if entries >= entries_limit:
                return True, entries, last_put, precord[j], collisions
            h0 = ph0[j]
            h1 = ph1[j]
            offset = poffset[j]
            i = pslot[j]
            w0 = words[i]
            if w0 == h0 and words[i + 1] == h1:
                previous = words[i + 2]
                words[i + 2] = offset
            elif w0 == 0 and words[i + 1] == 0 and words[i + 2] == 0:
                if entries >= slots:
                    raise OverflowError("attempt to add a new entry to a full offset map")
                words[i] = h0
                words[i + 1] = h1
                words[i + 2] = offset
                entries += 1
                previous = -1
            else:
                if entries >= slots:
                    raise OverflowError("attempt to add a new entry to a full offset map")
                attempt = 1
                while True:
                    collisions += 1
                    i = probe_slot(h0, h1, attempt, slots) * 3
                    w0 = words[i]
                    if w0 == h0 and words[i + 1] == h1:
                        previous = words[i + 2]
                        words[i + 2] = offset
                        break
                    if w0 == 0 and words[i + 1] == 0 and words[i + 2] == 0:
                        words[i] = h0
                        words[i + 1] = h1
                        words[i + 2] = offset
                        entries += 1
                        previous = -1
                        break
                    attempt += 1
            last_put = offset
            rel = previous - bit_base
            if 0 <= rel < bit_limit:
                bitmap[rel >> 3] &= ~(1 << (rel & 7)) & 0xFF
            rel = offset - bit_base
            if 0 <= rel < bit_limit:
                bitmap[rel >> 3] |= 1 << (rel & 7)
        if error is not None:
            raise error
    if pos != size:
        raise CorruptRecordError(_remaining(size - pos, count))
    return False, entries, last_put, count, collisions


@cython.boundscheck(True)
@cython.wraparound(False)
@cython.cdivision(True)
@cython.locals(
    data=bytes,
    count=cython.Py_ssize_t,
    base=cython.longlong,
    latest=cython.longlong,
    retain_deletes=cython.bint,
    words="long long[::1]",
    slots=cython.longlong,
    bitmap="const unsigned char[::1]",
    bit_base=cython.longlong,
    bit_limit=cython.longlong,
    buf="const unsigned char[::1]",
    spans="long long[::1]",
    dp="const unsigned char*",
    n=cython.Py_ssize_t,
    k=cython.Py_ssize_t,
    pos=cython.Py_ssize_t,
    p=cython.Py_ssize_t,
    record_start=cython.Py_ssize_t,
    record_end=cython.Py_ssize_t,
    ts_end=cython.Py_ssize_t,
    key_start=cython.Py_ssize_t,
    b=cython.int,
    key_length=cython.long,
    delta=cython.long,
    length=cython.long,
    ts_delta=cython.longlong,
    offset=cython.longlong,
    found=cython.longlong,
    keep=cython.bint,
    value_null=cython.bint,
    all_kept=cython.bint,
    has_tombstone=cython.bint,
    invalid=cython.Py_ssize_t,
    collisions=cython.longlong,
    h0=cython.longlong,
    h1=cython.longlong,
    probe=cython.longlong,
    i=cython.Py_ssize_t,
    w0=cython.longlong,
    attempt=cython.longlong,
    max_attempts=cython.longlong,
    rel=cython.longlong,
    zz=list,
    zz2=list,
    md5_c="md5_fn",
    md5_address=cython.size_t,
    bp="const unsigned char*",
    size=cython.Py_ssize_t,
    value_length=cython.long,
    native=cython.bint,
    c=cython.int,
)
def filter_records(data, count, base, latest, retain_deletes, words, slots, bitmap, bit_base, bit_limit):
    """Pass 2 over one data batch: which records stay.

    A record stays when its offset is past the mapped range (``latest``), or it is the latest of
    its key (the pass-1 bitmap where it covers the offset, else the map), and, for a tombstone,
    while deletes are retained. A null key below ``latest`` is invalid and goes. Returns (spans,
    kept, all kept, a kept tombstone, invalid records, extra probes); ``spans`` holds four ints
    per kept record (start, timestamp delta, end of the timestamp delta, end) for
    :func:`rebuild_records`.
    """
    # A C array for the compiled path, declared here rather than in cython.locals so that mypy
    # knows the name.
    out: cython.uchar[16]  # libcrypto's digest
    if not 0 <= base <= _MAX_BASE:
        raise CorruptRecordError(f"batch base offset {base} is out of range")
    native = cython.compiled  # a local: the interpreter tests it cheaper than cython.compiled
    buf = data
    zz = _ZZ
    zz2 = _ZZ2
    unpack_words = _WORDS.unpack
    size = len(data)
    if cython.compiled:
        md5_address = _md5_function()
        md5_c = cython.cast("md5_fn", md5_address)
        bp = data
        spans_object: memoryview | list[int] = memoryview(bytearray(32 * count)).cast("q")
    else:
        spans_object = [0] * (4 * count)
    spans = spans_object
    max_attempts = slots + 12
    k = 0
    all_kept = True
    has_tombstone = False
    invalid = 0
    collisions = 0
    pos = 0
    n = 0
    try:  # a read past the end of the bytes: the batch is cut short
        for n in range(count):
            record_start = pos
            b = buf[pos]
            if b < 0x80:
                p = pos + 1
                if native:
                    length = _unzig(b)
                else:
                    length = zz[b]
            elif (c := buf[pos + 1]) < 0x80:
                p = pos + 2
                if native:
                    length = _unzig((b & 0x7F) | c << 7)
                else:
                    length = zz2[b | c << 8]
            else:
                length, p = _varint(buf, data, pos)
            record_end = p + length
            if length < 0 or record_end > size:
                raise CorruptRecordError(_bad_length(n, count, pos, length, size - p))
            b = buf[p + 1]
            if b < 0x80:
                if native:
                    ts_delta = _unzig(b)
                else:
                    ts_delta = zz[b]
                p += 2
            else:
                ts_delta, p = _varlong(buf, data, p + 1)
            ts_end = p
            b = buf[p]
            if b < 0x80:
                if native:
                    delta = _unzig(b)
                else:
                    delta = zz[b]
                p += 1
            elif (c := buf[p + 1]) < 0x80:
                if native:
                    delta = _unzig((b & 0x7F) | c << 7)
                else:
                    delta = zz2[b | c << 8]
                p += 2
            else:
                delta, p = _varint(buf, data, p)
            offset = base + delta
            b = buf[p]
            if b < 0x80:
                if native:
                    key_length = _unzig(b)
                else:
                    key_length = zz[b]
                p += 1
            else:
                key_length, p = _varint(buf, data, p)
            key_start = p
            if key_length > 0:
                p += key_length
            b = buf[p]  # value length
            if b < 0x80:
                if native:
                    value_length = _unzig(b)
                else:
                    value_length = zz[b]
                p += 1
            elif (c := buf[p + 1]) < 0x80:
                if native:
                    value_length = _unzig((b & 0x7F) | c << 7)
                else:
                    value_length = zz2[b | c << 8]
                p += 2
            else:
                value_length, p = _varint(buf, data, p)
            value_null = value_length < 0  # Kafka: any negative length is a null value
            if value_length > 0:
                p += value_length
            if buf[p] == 0:  # no headers
                p += 1
            else:
                p = _headers_end(buf, data, p, record_end, n)
            if p != record_end:
                raise CorruptRecordError(_bad_size(n, length, p - (record_end - length)))
            if offset > latest:
                keep = True
            elif key_length < 0:
                keep = False
                invalid += 1
            else:
                rel = offset - bit_base
                if 0 <= rel < bit_limit:
                    keep = (bitmap[rel >> 3] & (1 << (rel & 7))) != 0
                else:
                    if cython.compiled:
                        if md5_address != 0 and key_start >= 0 and key_start + key_length <= size:
                            md5_c(bp + key_start, key_length, out)
                            h0 = _be64(out, 0)
                            h1 = _be64(out, 8)
                        else:
                            digest = _md5(data[key_start : key_start + key_length]).digest()
                            dp = digest
                            h0 = _be64(dp, 0)
                            h1 = _be64(dp, 8)
                    else:
                        h0, h1 = unpack_words(_md5(data[key_start : key_start + key_length]).digest())
                    # SkimpyOffsetMap.get_digest, first probe inline
                    probe = h0 >> 32
                    i = (probe if probe >= 0 else -probe if probe != _INT_MIN else 0) % slots * 3
                    w0 = words[i]
                    if w0 == h0 and words[i + 1] == h1:
                        found = words[i + 2] if (w0 or h1 or words[i + 2]) else -1
                    elif w0 == 0 and words[i + 1] == 0 and words[i + 2] == 0:
                        found = -1
                    else:
                        found = -1
                        attempt = 1
                        while attempt < max_attempts:
                            collisions += 1
                            i = probe_slot(h0, h1, attempt, slots) * 3
                            w0 = words[i]
                            if w0 == h0 and words[i + 1] == h1:
                                found = words[i + 2]
                                break
                            if w0 == 0 and words[i + 1] == 0 and words[i + 2] == 0:
                                break
                            attempt += 1
                    keep = offset >= found
                if keep and value_null and not retain_deletes:
                    keep = False
            if keep:
                spans[k] = record_start
                spans[k + 1] = ts_delta
                spans[k + 2] = ts_end
                spans[k + 3] = record_end
                k += 4
                if value_null:
                    has_tombstone = True
            else:
                all_kept = False
            pos = record_end
    except IndexError:
        raise CorruptRecordError(_truncated(n, count)) from None
    if pos != size:
        raise CorruptRecordError(_remaining(size - pos, count))
    return spans_object, k >> 2, all_kept, has_tombstone, invalid, collisions


@cython.boundscheck(True)
@cython.wraparound(False)
@cython.locals(
    data=bytes,
    kept=cython.Py_ssize_t,
    log_append_time=cython.bint,
    buf="const unsigned char[::1]",
    spans="const long long[::1]",
    out_view="unsigned char[::1]",
    j=cython.Py_ssize_t,
    k=cython.Py_ssize_t,
    start=cython.Py_ssize_t,
    end=cython.Py_ssize_t,
    ts_end=cython.Py_ssize_t,
    w=cython.Py_ssize_t,
    size=cython.Py_ssize_t,
    shift=cython.longlong,
    ts_delta=cython.longlong,
    value=cython.longlong,
    u=cython.ulonglong,
    top=cython.longlong,
)
def rebuild_records(data, spans, kept, old_base_ts, new_base_ts, log_append_time, max_ts):
    """The record bytes of a rebuilt batch: the ``kept`` spans of ``data``, each record's timestamp
    delta re-based on ``new_base_ts`` (with log-append time every record's timestamp is
    ``max_ts``). Returns (records bytes, the largest kept timestamp)."""
    if log_append_time:
        top_ts = max_ts
    else:
        top = spans[1]
        for k in range(1, kept):
            if spans[4 * k + 1] > top:
                top = spans[4 * k + 1]
        top_ts = old_base_ts + top
    if new_base_ts == old_base_ts and not log_append_time:  # deltas unchanged: the bytes as they are
        if cython.compiled:
            buf = data
            size = 0
            for k in range(kept):
                size += spans[4 * k + 3] - spans[4 * k]
            out = bytearray(size)
            out_view = out
            w = 0
            for k in range(kept):
                start = spans[4 * k]
                end = spans[4 * k + 3]
                for j in range(start, end):
                    out_view[w] = buf[j]
                    w += 1
            return bytes(out), top_ts
        return b"".join([data[spans[4 * k] : spans[4 * k + 3]] for k in range(kept)]), top_ts
    if cython.compiled and -_SAFE < old_base_ts - new_base_ts < _SAFE and -_SAFE < max_ts - new_base_ts < _SAFE:
        buf = data
        shift = old_base_ts - new_base_ts
        out = bytearray(len(data) + 20 * kept)  # a record grows by at most 9 + 5 bytes
        out_view = out
        w = 0
        for k in range(kept):
            start = spans[4 * k]
            ts_end = spans[4 * k + 2]
            end = spans[4 * k + 3]
            ts_delta = spans[4 * k + 1]
            if ts_delta >= _SAFE or ts_delta <= -_SAFE:
                break  # the general path below says what is wrong
            value = (max_ts - new_base_ts) if log_append_time else ts_delta + shift
            # the record's new body: attributes byte, the new timestamp delta, the rest as it was
            u = (cython.cast(cython.ulonglong, value) << 1) ^ cython.cast(cython.ulonglong, value >> 63)
            body = 2 + (end - ts_end)
            while u >= 0x80:
                body += 1
                u >>= 7
            u = cython.cast(cython.ulonglong, body) << 1  # length prefix: zig-zag of a positive size
            while u >= 0x80:
                out_view[w] = (u & 0x7F) | 0x80
                w += 1
                u >>= 7
            out_view[w] = u
            w += 1
            # attributes byte: the first byte after the old length prefix
            out_view[w] = buf[start + _prefix_size(buf, start)]
            w += 1
            u = (cython.cast(cython.ulonglong, value) << 1) ^ cython.cast(cython.ulonglong, value >> 63)
            while u >= 0x80:
                out_view[w] = (u & 0x7F) | 0x80
                w += 1
                u >>= 7
            out_view[w] = u
            w += 1
            for j in range(ts_end, end):
                out_view[w] = buf[j]
                w += 1
        else:
            return bytes(out[:w]), top_ts
    if log_append_time:
        timestamps = [max_ts] * kept
    else:
        timestamps = [old_base_ts + spans[4 * k + 1] for k in range(kept)]
    parts = []
    for k in range(kept):
        start = spans[4 * k]
        ts_end = spans[4 * k + 2]
        end = spans[4 * k + 3]
        body_start = start + _prefix_size(data, start)
        record = b"".join(
            (data[body_start : body_start + 1], _varint_bytes(timestamps[k] - new_base_ts), data[ts_end:end])
        )
        parts.append(_varint_bytes(len(record)))
        parts.append(record)
    return b"".join(parts), top_ts


@cython.cfunc
@cython.inline
@cython.locals(buf="const unsigned char[::1]", start=cython.Py_ssize_t, p=cython.Py_ssize_t)
@cython.returns(cython.Py_ssize_t)
def _prefix_size(buf, start):
    """Bytes of the varint at ``start`` (a record's length prefix)."""
    p = start
    while buf[p] & 0x80:
        p += 1
    return p - start + 1
