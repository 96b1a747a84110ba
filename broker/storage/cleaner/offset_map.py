"""SkimpyOffsetMap: Kafka's key -> latest offset map for the cleaner, in a fixed-size buffer.

Each slot is 24 bytes: the 16-byte MD5 of the key followed by the 8-byte offset. Memory is
fixed when the map is created (``log.cleaner.dedupe.buffer.size`` / threads), which is what
bounds how much of a dirty section one cleaning round can cover: a Python dict of digests
would cost ~5x as much per key and grow without limit.

Probe sequence (Kafka's): attempt i reads a big-endian int32 from the digest at byte
min(i, 12) and adds max(0, i - 12); slot = abs(p) % slots (abs(MIN_INT) = 0). So 13 probes
derived from the hash, then linear probing. A slot is empty iff all 24 bytes are zero; there
are no deletes; a lookup miss returns -1. Two keys with the same MD5 share a slot (the
"skimpy" part, as in Kafka).

The slot is read through an int64 view of the buffer: comparing two words is cheaper in Python
than slicing out and comparing 16 bytes. Probes past the first are rare at Kafka's load factor
and take the slow path.
"""

from __future__ import annotations

import ctypes
import hashlib
import struct

try:  # CPython's built-in MD5: ~4x faster per call than OpenSSL's hashlib.md5 for short keys
    from _md5 import md5 as _md5
except ImportError:  # pragma: no cover - other interpreters
    _md5 = hashlib.md5

HASH_SIZE = 16
BYTES_PER_ENTRY = HASH_SIZE + 8
_INT_MIN = -(2**31)
_BE_INT = struct.Struct(">i")
#: The digest read as two big-endian int64 words; they are stored in the slot's first 16 bytes
#: (as native words), and the first word's top 32 bits are Kafka's first probe int.
_WORDS = struct.Struct(">qq")


def key_digest(key) -> bytes:
    """The 16-byte MD5 a key is stored under."""
    return _md5(key).digest()


def _java_abs(value: int) -> int:
    return 0 if value == _INT_MIN else abs(value)


def _wrap_int32(value: int) -> int:
    return ((value + 2**31) & 0xFFFFFFFF) - 2**31


class SkimpyOffsetMap:
    def __init__(self, memory: int):
        slots = memory // BYTES_PER_ENTRY
        if slots < 1:
            raise ValueError(f"an offset map needs at least {BYTES_PER_ENTRY} bytes, got {memory}")
        self.slots = slots
        self.memory = slots * BYTES_PER_ENTRY
        self._buf = bytearray(self.memory)
        self._words = memoryview(self._buf).cast("q")
        self.entries = 0
        #: Extra probes past the first slot (Kafka's collision count), for the collision rate.
        self.collisions = 0
        #: The last offset put (or the cleaner's "fully scanned up to" mark), -1 when empty.
        self.latest_offset = -1

    # -- probing -----------------------------------------------------------------------------

    def _slot(self, digest: bytes, attempt: int) -> int:
        probe = _BE_INT.unpack_from(digest, min(attempt, HASH_SIZE - 4))[0] + max(0, attempt - HASH_SIZE + 4)
        return _java_abs(_wrap_int32(probe)) % self.slots

    def put(self, key, offset: int) -> int:
        return self.put_digest(_md5(key).digest(), offset)

    def put_digest(self, digest: bytes, offset: int) -> int:
        """Record ``offset`` as the latest for the key hashed to ``digest``; returns the offset
        it replaced, or -1 for a new entry (the cleaner's pass 1 uses it to track winners)."""
        words = self._words
        h0, h1 = _WORDS.unpack(digest)
        p = h0 >> 32  # Kafka's first probe: the digest's first 4 bytes as a big-endian int32
        i = (p if p >= 0 else -p if p != _INT_MIN else 0) % self.slots * 3
        w0 = words[i]
        if w0 == h0 and words[i + 1] == h1:
            previous = words[i + 2]
            words[i + 2] = offset
        elif w0 == 0 and words[i + 1] == 0 and words[i + 2] == 0:
            if self.entries >= self.slots:
                raise OverflowError("attempt to add a new entry to a full offset map")
            words[i] = h0
            words[i + 1] = h1
            words[i + 2] = offset
            self.entries += 1
            previous = -1
        else:
            previous = self._put_probing(digest, h0, h1, offset)
        self.latest_offset = offset
        return previous

    def _put_probing(self, digest: bytes, h0: int, h1: int, offset: int) -> int:
        if self.entries >= self.slots:
            raise OverflowError("attempt to add a new entry to a full offset map")
        words = self._words
        attempt = 1
        while True:
            self.collisions += 1
            i = self._slot(digest, attempt) * 3
            w0 = words[i]
            if w0 == h0 and words[i + 1] == h1:
                previous = words[i + 2]
                words[i + 2] = offset
                return previous
            if w0 == 0 and words[i + 1] == 0 and words[i + 2] == 0:
                words[i] = h0
                words[i + 1] = h1
                words[i + 2] = offset
                self.entries += 1
                return -1
            attempt += 1

    def get(self, key) -> int:
        return self.get_digest(_md5(key).digest())

    def get_digest(self, digest: bytes) -> int:
        """The offset stored for ``digest``, or -1."""
        words = self._words
        h0, h1 = _WORDS.unpack(digest)
        p = h0 >> 32  # Kafka's first probe: the digest's first 4 bytes as a big-endian int32
        i = (p if p >= 0 else -p if p != _INT_MIN else 0) % self.slots * 3
        w0 = words[i]
        if w0 == h0 and words[i + 1] == h1:
            return words[i + 2] if (w0 or h1 or words[i + 2]) else -1
        if w0 == 0 and words[i + 1] == 0 and words[i + 2] == 0:
            return -1
        max_attempts = self.slots + HASH_SIZE - 4
        attempt = 1
        while attempt < max_attempts:
            self.collisions += 1
            i = self._slot(digest, attempt) * 3
            w0 = words[i]
            if w0 == h0 and words[i + 1] == h1:
                return words[i + 2]
            if w0 == 0 and words[i + 1] == 0 and words[i + 2] == 0:
                return -1
            attempt += 1
        return -1

    # -- state -------------------------------------------------------------------------------

    def update_latest_offset(self, offset: int) -> None:
        """Mark everything up to ``offset`` as covered (offset gaps, a fully scanned segment)."""
        self.latest_offset = offset

    def clear(self) -> None:
        # memset in place: ~10x faster than copying in a zeroed buffer (a 128 MiB map every round)
        ctypes.memset((ctypes.c_char * self.memory).from_buffer(self._buf), 0, self.memory)
        self.entries = 0
        self.collisions = 0
        self.latest_offset = -1

    @property
    def size(self) -> int:
        return self.entries

    @property
    def utilization(self) -> float:
        return self.entries / self.slots

    def __len__(self) -> int:
        return self.entries

    def __repr__(self) -> str:
        return f"SkimpyOffsetMap(slots={self.slots}, entries={self.entries}, latest_offset={self.latest_offset})"
