# C declarations for the compiled twin of record_codec.py (Cython reads this file by the
# extension's name when setup.py compiles record_codec.py; the interpreter never sees it).

# The zig-zag tables as C arrays (filled at import from the same values as the Python lists
# _ZIGZAG_ONE / _ZIGZAG_TWO): compiled loops look a varint's value up with one load, where a
# Python list would cost an item fetch and an int conversion.
cdef long _ZZ1_C[128]
cdef int _ZZ2_C[32768]

# record_batch.py's header layout (sizes, flags, field offsets), assigned at import from its
# names: C integers, so the compiled check_batch_header adds them to a pointer and compares them
# as it did the literals they replace.
cdef Py_ssize_t _HEADER_SIZE, _LOG_OVERHEAD
cdef int _MAGIC, _CONTROL_FLAG, _COMPRESSION_MASK, _MAX_CODEC
cdef Py_ssize_t _AT_BATCH_LENGTH, _AT_MAGIC, _AT_CRC, _AT_ATTRIBUTES, _AT_LAST_OFFSET_DELTA, _AT_BASE_TIMESTAMP
cdef Py_ssize_t _AT_MAX_TIMESTAMP, _AT_PRODUCER_ID, _AT_BASE_SEQUENCE, _AT_RECORDS_COUNT

# The readers of a varint (int32, zig-zag) and of a varlong (int64) at ``position`` of a typed
# view: (value, position after it). They are the project's one varint loop: the cleaner's core
# cimports them (broker/storage/cleaner/cleaner_core.py) rather than repeating them.
cdef (long, Py_ssize_t) _long32(const unsigned char[:] buf, Py_ssize_t position)
cdef (long long, Py_ssize_t) _long64(const unsigned char[:] buf, Py_ssize_t position)

# Drops a new object from the cyclic collector's lists. Used on consumer records: immutable tuples
# of str, ints, bytes, None and header tuples, which can never be part of a cycle. Left tracked,
# every 700 of them cost a generation-0 collection that walks them all, and the survivors of a large
# fetch made the collector's full passes the largest cost of poll().
cdef extern from "Python.h":
    void PyObject_GC_UnTrack(object)
