"""SkimpyOffsetMap: Kafka's 24-byte-slot MD5 map, checked against a dict and Kafka's probe rule."""

from __future__ import annotations

import hashlib
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from triolog.broker.storage.cleaner.offset_map import BYTES_PER_ENTRY, SkimpyOffsetMap, key_digest


def kafka_probe_slot(digest: bytes, attempt: int, slots: int) -> int:
    """Kafka's positionOf, written out independently (Java int arithmetic)."""
    window = min(attempt, 12)
    probe = struct.unpack(">i", digest[window:window + 4])[0] + max(0, attempt - 12)
    probe = (probe + 2**31) % 2**32 - 2**31
    return (0 if probe == -(2**31) else abs(probe)) % slots


@given(st.lists(st.tuples(st.binary(max_size=12), st.integers(0, 2**62)), max_size=60),
       st.integers(min_value=60, max_value=200))
@settings(max_examples=200, deadline=None)
def test_latest_put_wins_like_a_dict(puts, slots):
    offset_map = SkimpyOffsetMap(slots * BYTES_PER_ENTRY)
    model: dict[bytes, int] = {}
    for key, offset in puts:
        previous = offset_map.put(key, offset)
        assert previous == model.get(key, -1)
        model[key] = offset
    for key, offset in model.items():
        assert offset_map.get(key) == offset
    assert offset_map.size == len(model)
    assert offset_map.utilization == pytest.approx(len(model) / slots)
    assert offset_map.get(b"\xff" * 13) == -1  # longer than any key put


@given(st.lists(st.binary(max_size=8), min_size=1, max_size=40, unique=True), st.data())
@settings(max_examples=200, deadline=None)
def test_a_nearly_full_tiny_map_still_finds_every_key(keys, data):
    """Colliding keys in a map with barely more slots than keys: probing past the 13 hash
    windows into linear probing must find each one."""
    slots = len(keys) + data.draw(st.integers(0, 2))
    offset_map = SkimpyOffsetMap(slots * BYTES_PER_ENTRY)
    for i, key in enumerate(keys):
        offset_map.put(key, i)
    for i, key in enumerate(keys):
        assert offset_map.get(key) == i
    assert offset_map.size == len(keys)


def test_slots_memory_and_full_map():
    offset_map = SkimpyOffsetMap(24 * 3 + 23)
    assert offset_map.slots == 3 and offset_map.memory == 72
    for i in range(3):
        offset_map.put(b"k%d" % i, i)
    offset_map.put(b"k1", 10)  # an existing key still updates when the map is full
    assert offset_map.get(b"k1") == 10
    with pytest.raises(OverflowError):
        offset_map.put(b"another", 4)
    with pytest.raises(ValueError):
        SkimpyOffsetMap(23)


def test_first_slot_and_layout_follow_kafka():
    """The entry lands in Kafka's first-probe slot: 16 bytes of hash then the 8-byte offset."""
    slots = 1009
    offset_map = SkimpyOffsetMap(slots * BYTES_PER_ENTRY)
    key = b"user-42"
    digest = hashlib.md5(key).digest()
    assert key_digest(key) == digest
    offset_map.put(key, 123456789)
    slot = kafka_probe_slot(digest, 0, slots)
    raw = bytes(offset_map._buf[slot * 24:(slot + 1) * 24])
    hi, lo, offset = struct.unpack("=qqq", raw)
    assert (hi, lo) == struct.unpack(">qq", digest)  # the digest's two words
    assert offset == 123456789
    assert bytes(offset_map._buf[:slot * 24]).count(0) == slot * 24  # nothing anywhere else


@given(st.binary(min_size=16, max_size=16), st.integers(0, 40), st.integers(1, 10_000))
def test_probe_sequence_is_kafkas(digest, attempt, slots):
    offset_map = SkimpyOffsetMap(slots * BYTES_PER_ENTRY)
    assert offset_map._slot(digest, attempt) == kafka_probe_slot(digest, attempt, slots)


def test_clear_forgets_everything():
    offset_map = SkimpyOffsetMap(24 * 16)
    offset_map.put(b"a", 5)
    offset_map.update_latest_offset(9)
    offset_map.clear()
    assert offset_map.get(b"a") == -1 and offset_map.size == 0 and offset_map.latest_offset == -1
    assert not any(offset_map._buf)
