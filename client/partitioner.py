"""Kafka's default partitioning, so records written by Kafka clients and by ours land alike.

Keyed records: ``toPositive(murmur2(key)) % numPartitions``, exactly Java's
``BuiltInPartitioner.partitionForKey`` (murmur2 with seed 0x9747b28c, ``toPositive`` = clear the
sign bit). Keyless records: the sticky partitioner (KIP-480): every record goes to one partition
until a new batch would have to be started there, then a different partition is picked at random.

A compiled-core module (:mod:`triolog.core`): the producer's accumulator takes
``partition_for_key`` from ``core.load("client.partitioner")``.
"""

from __future__ import annotations

import random

try:
    import cython
except ModuleNotFoundError:  # Cython is a build-time dependency only
    from triolog.protocol import _cython_shim as cython

__all__ = ["StickyPartitioner", "murmur2", "partition_for_key", "to_positive"]

_SEED = 0x9747B28C
_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


@cython.cfunc
@cython.locals(
    raw=bytes,
    buf="const unsigned char *",
    length=cython.Py_ssize_t,
    tail=cython.Py_ssize_t,
    i=cython.Py_ssize_t,
    remaining=cython.Py_ssize_t,
    h=cython.uint,
    k=cython.uint,
)
def _murmur2(data) -> cython.uint:
    """Java's murmur2 as an unsigned 32-bit value. Compiled, ``h`` and ``k`` are C unsigned
    32-bit integers over the bytes' own buffer and every ``& 0xFFFFFFFF`` is a no-op;
    interpreted, the masks keep the Python integers to 32 bits."""
    raw = data if type(data) is bytes else bytes(data)
    buf = raw
    length = len(raw)
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    tail = length & ~3
    for i in range(0, tail, 4):
        k = buf[i] | (buf[i + 1] << 8) | (buf[i + 2] << 16) | (cython.cast(cython.uint, buf[i + 3]) << 24)
        k = (k * 0x5BD1E995) & 0xFFFFFFFF
        k ^= k >> 24
        k = (k * 0x5BD1E995) & 0xFFFFFFFF
        h = ((h * 0x5BD1E995) & 0xFFFFFFFF) ^ k
    remaining = length & 3
    if remaining == 3:
        h ^= buf[tail + 2] << 16
    if remaining >= 2:
        h ^= buf[tail + 1] << 8
    if remaining >= 1:
        h ^= buf[tail]
        h = (h * 0x5BD1E995) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * 0x5BD1E995) & 0xFFFFFFFF
    h ^= h >> 15
    return h


@cython.locals(h=cython.uint)
def murmur2(data) -> int:
    """Java's ``Utils.murmur2``: a *signed* 32-bit hash, as the Java client computes it."""
    h = _murmur2(data)
    if cython.compiled:
        return cython.cast(cython.int, h)
    return h - (1 << 32) if h & 0x80000000 else h


def to_positive(number: int) -> int:
    """Java's ``Utils.toPositive``: ``number & 0x7fffffff`` (not abs(), which overflows)."""
    return number & 0x7FFFFFFF


@cython.locals(n=cython.Py_ssize_t)
def partition_for_key(key: bytes, num_partitions: int) -> int:
    n = num_partitions
    if n <= 0:
        raise ValueError(f"a topic has at least one partition, got {num_partitions}")
    return (_murmur2(key) & 0x7FFFFFFF) % n


class StickyPartitioner:
    """The current sticky partition per topic, switched when a new batch would be needed.

    Not thread-safe: the accumulator calls it under its lock.
    """

    def __init__(self, rng: random.Random | None = None) -> None:
        self._current: dict[str, int] = {}
        self._rng = rng or random.Random()

    def current(self, topic: str, num_partitions: int) -> int:
        partition = self._current.get(topic)
        if partition is None or partition >= num_partitions:
            partition = self._current[topic] = self._rng.randrange(num_partitions)
        return partition

    def next(self, topic: str, num_partitions: int) -> int:
        """Move ``topic`` to another partition (a different one whenever there are two or more)."""
        previous = self._current.get(topic)
        if num_partitions == 1 or previous is None or previous >= num_partitions:
            partition = self._rng.randrange(num_partitions)
        else:
            partition = self._rng.randrange(num_partitions - 1)
            if partition >= previous:
                partition += 1
        self._current[topic] = partition
        return partition
