"""Offset index, time index and lazy index (KAFKA-10207, KAFKA-6388, KAFKA-7283, KAFKA-9156)."""

from __future__ import annotations

import bisect
import random
import struct
import tempfile
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from triolog.broker.storage.errors import CorruptIndexError, IndexFullError, InvalidOffsetError
from triolog.broker.storage.index import (
    LazyIndex,
    OffsetIndex,
    OffsetPosition,
    ReadOnlyIndexError,
    TimeIndex,
    TimestampOffset,
)

MIB10 = 10 * 1024 * 1024
BASE = 1_000


def _offset_index(tmp_path: Path, entries=(), base=BASE, size=MIB10, name="0.index") -> OffsetIndex:
    idx = OffsetIndex(tmp_path / name, base, size)
    for offset, position in entries:
        idx.append(offset, position)
    return idx


def _time_index(tmp_path: Path, entries=(), base=BASE, size=MIB10, name="0.timeindex") -> TimeIndex:
    idx = TimeIndex(tmp_path / name, base, size)
    for ts, offset in entries:
        idx.maybe_append(ts, offset)
    return idx


def _random_offset_entries(rng: random.Random, n: int, base: int) -> list[OffsetPosition]:
    entries, offset, position = [], base + rng.randrange(3), 0
    for _ in range(n):
        entries.append(OffsetPosition(offset, position))
        offset += rng.choice((1, 1, 2, 5, 100, rng.randrange(1, 50_000)))
        position += rng.choice((1, 60, 4096, rng.randrange(1, 1 << 20)))
    return entries


def _random_time_entries(rng: random.Random, n: int, base: int) -> list[TimestampOffset]:
    entries, ts, offset = [], rng.choice((0, 1, 1_700_000_000_000)), base
    for _ in range(n):
        entries.append(TimestampOffset(ts, offset))
        ts += rng.choice((1, 2, 1000, rng.randrange(1, 1 << 40)))
        offset += rng.choice((0, 1, 7, rng.randrange(1, 10_000)))  # time index offsets may repeat
    return entries


def _ref_lower(keys: list[int], target: int) -> int:
    """Slot of the largest key <= target, or -1 (brute-force reference)."""
    return bisect.bisect_right(keys, target) - 1


def _targets(keys: list[int], rng: random.Random, extra: int = 50) -> list[int]:
    out = [k + d for k in keys for d in (-1, 0, 1)]
    if keys:
        out += [rng.randrange(keys[0] - 10, keys[-1] + 10) for _ in range(extra)]
    return out + [-(2**40), 0, 2**62]


# ---------------------------------------------------------------------------------------- layout


def test_offset_index_file_bytes_are_big_endian_relative_offset_then_position(tmp_path):
    idx = _offset_index(tmp_path, [(BASE + 3, 100), (BASE + 0x01020304, 0x0A0B0C0D)])
    idx.close()
    assert (tmp_path / "0.index").read_bytes() == bytes.fromhex(
        "00000003" "00000064"  # relative offset 3, position 100
        "01020304" "0a0b0c0d"
    )


def test_time_index_file_bytes_are_big_endian_timestamp_then_relative_offset(tmp_path):
    idx = _time_index(tmp_path, [(0x0102030405060708, BASE + 5), (0x0102030405060709, BASE + 0x0A0B0C0D)])
    idx.close()
    assert (tmp_path / "0.timeindex").read_bytes() == bytes.fromhex(
        "0102030405060708" "00000005" "0102030405060709" "0a0b0c0d"
    )


def test_offset_index_appends_are_visible_in_the_file_before_close(tmp_path):
    idx = _offset_index(tmp_path, [(BASE + 1, 7)])
    idx.flush()
    assert (tmp_path / "0.index").read_bytes()[:8] == struct.pack(">ii", 1, 7)
    idx.close()


# ---------------------------------------------------------------------------------------- sizing


def test_offset_index_new_file_is_preallocated_to_default_10_mib(tmp_path):
    idx = _offset_index(tmp_path)
    assert (tmp_path / "0.index").stat().st_size == 10_485_760
    assert (idx.file_length, idx.max_entries, idx.entries, idx.size_in_bytes) == (10_485_760, 1_310_720, 0, 0)
    assert idx.last_offset == BASE
    assert not idx.is_full()
    idx.close()


def test_time_index_new_file_is_preallocated_to_default_10_mib_rounded_down(tmp_path):
    idx = _time_index(tmp_path)
    assert (tmp_path / "0.timeindex").stat().st_size == 10_485_756
    assert (idx.file_length, idx.max_entries, idx.entries) == (10_485_756, 873_813, 0)
    assert idx.last_entry == TimestampOffset(-1, BASE)
    idx.close()


@pytest.mark.parametrize(
    ("cls", "size", "expected"),
    [
        (OffsetIndex, 8, 8),
        (OffsetIndex, 15, 8),
        (OffsetIndex, 17, 16),
        (OffsetIndex, 4096, 4096),
        (TimeIndex, 12, 12),
        (TimeIndex, 23, 12),
        (TimeIndex, 25, 24),
        (TimeIndex, 4096, 4092),
    ],
)
def test_index_preallocation_rounds_down_to_whole_entries(tmp_path, cls, size, expected):
    idx = cls(tmp_path / "x", BASE, size)
    assert idx.file_length == expected == (tmp_path / "x").stat().st_size
    assert idx.max_entries == expected // cls.ENTRY_SIZE
    idx.close_handler()


@pytest.mark.parametrize(
    ("cls", "size"),
    [(OffsetIndex, 4), (OffsetIndex, 7), (OffsetIndex, -1), (TimeIndex, 4), (TimeIndex, 11), (TimeIndex, -1)],
)
def test_index_creation_rejects_max_size_below_entry_size_and_leaves_no_file(tmp_path, cls, size):
    # Kafka's config accepts segment.index.bytes >= 4, but AbstractIndex throws
    # IllegalArgumentException("Invalid max index size") when it creates a file that cannot hold
    # one entry: a topic with segment.index.bytes=4 fails on its first segment. We do the same.
    with pytest.raises(ValueError, match="max index size"):
        cls(tmp_path / "x", BASE, size)
    assert not (tmp_path / "x").exists()


def test_index_opening_existing_file_ignores_max_index_size(tmp_path):
    _offset_index(tmp_path, [(BASE + 1, 0)]).close()
    idx = OffsetIndex(tmp_path / "0.index", BASE, 4)  # -1 / tiny sizes are fine for existing files
    assert idx.entries_list() == [OffsetPosition(BASE + 1, 0)]
    idx.close()


def test_offset_index_is_full_when_every_slot_is_used(tmp_path):
    idx = _offset_index(tmp_path, [(BASE + i, i) for i in range(3)], size=24)
    assert idx.is_full()
    with pytest.raises(IndexFullError):
        idx.append(BASE + 10, 10)
    assert idx.entries == 3
    idx.close()


def test_time_index_is_full_one_slot_early_reserving_the_roll_entry(tmp_path):
    idx = _time_index(tmp_path, [(10, BASE), (20, BASE + 1)], size=36)  # 3 slots
    assert idx.is_full()
    with pytest.raises(IndexFullError):
        idx.maybe_append(30, BASE + 2)
    idx.maybe_append(30, BASE + 2, skip_full_check=True)  # the roll/close entry takes the last slot
    assert idx.last_entry == TimestampOffset(30, BASE + 2)
    idx.maybe_append(30, BASE + 2, skip_full_check=True)  # repeating the last entry is a no-op
    with pytest.raises(IndexFullError):
        idx.maybe_append(40, BASE + 3, skip_full_check=True)  # no slot at all
    assert idx.entries == 3
    idx.close()


def test_time_index_with_a_single_slot_is_full_from_the_start(tmp_path):
    idx = _time_index(tmp_path, size=23)  # segment.index.bytes in [12, 24): the segment rolls every append
    assert idx.max_entries == 1
    assert idx.is_full()
    idx.maybe_append(5, BASE, skip_full_check=True)
    assert idx.entries_list() == [TimestampOffset(5, BASE)]
    idx.close()


# ---------------------------------------------------------------------------------------- reopen


def test_offset_index_close_trims_and_reopen_gives_same_entries(tmp_path):
    entries = [(BASE + 2, 0), (BASE + 9, 4200), (BASE + 30, 9000)]
    _offset_index(tmp_path, entries).close()
    assert (tmp_path / "0.index").stat().st_size == 24
    idx = OffsetIndex(tmp_path / "0.index", BASE, MIB10)
    assert idx.entries_list() == entries
    assert (idx.entries, idx.max_entries, idx.last_offset) == (3, 3, BASE + 30)
    assert idx.is_full()  # an inactive, trimmed index accepts no more entries
    assert idx.lookup(BASE + 10) == OffsetPosition(BASE + 9, 4200)
    idx.close()


def test_time_index_close_trims_and_reopen_gives_same_entries_and_last_entry(tmp_path):
    entries = [(100, BASE), (150, BASE + 4), (900, BASE + 4)]
    _time_index(tmp_path, entries).close()
    assert (tmp_path / "0.timeindex").stat().st_size == 36
    idx = TimeIndex(tmp_path / "0.timeindex", BASE, MIB10)
    assert idx.entries_list() == entries
    assert idx.last_entry == TimestampOffset(900, BASE + 4)
    assert idx.is_full()
    idx.close()


def test_index_reopen_trusts_file_length_as_entry_count(tmp_path):
    raw = b"".join(struct.pack(">ii", rel, pos) for rel, pos in [(1, 10), (2, 20), (5, 50)])
    (tmp_path / "0.index").write_bytes(raw)
    idx = OffsetIndex(tmp_path / "0.index", BASE)
    assert (idx.entries, idx.max_entries, idx.file_length, idx.size_in_bytes) == (3, 3, 24, 24)
    assert idx.lookup(BASE + 4) == OffsetPosition(BASE + 2, 20)
    idx.close()
    assert (tmp_path / "0.index").read_bytes() == raw  # close of a trimmed index changes nothing


def test_empty_index_trims_to_zero_bytes_and_reopens_empty_and_full(tmp_path):
    _offset_index(tmp_path).close()
    _time_index(tmp_path).close()
    assert (tmp_path / "0.index").stat().st_size == 0
    assert (tmp_path / "0.timeindex").stat().st_size == 0
    # An existing 0-byte file is trusted as trimmed (Kafka): it is NOT re-extended on open, so an
    # inactive segment's empty index cannot become a zero-filled 10 MiB file if we crash later.
    idx = OffsetIndex(tmp_path / "0.index", BASE, MIB10)
    tidx = TimeIndex(tmp_path / "0.timeindex", BASE, MIB10)
    assert (tmp_path / "0.index").stat().st_size == 0
    assert (idx.entries, idx.max_entries) == (0, 0)
    assert idx.lookup(BASE + 5) == OffsetPosition(BASE, 0)
    assert tidx.lookup(5) == TimestampOffset(-1, BASE)
    assert idx.fetch_upper_bound_offset(0, 10) is None
    idx.sanity_check()
    tidx.sanity_check()
    # KAFKA-6388: such an index is "full"; the active segment must be resized before appending.
    assert idx.is_full() and tidx.is_full()
    with pytest.raises(IndexFullError):
        idx.append(BASE + 1, 0)
    assert idx.resize(MIB10) and tidx.resize(MIB10)
    idx.append(BASE + 1, 0)
    tidx.maybe_append(7, BASE + 1)
    assert idx.lookup(BASE + 5) == OffsetPosition(BASE + 1, 0)
    assert tidx.lookup(8) == TimestampOffset(7, BASE + 1)
    idx.close()
    tidx.close()


# ---------------------------------------------------------------------------------------- sanity


def test_time_index_untrimmed_zero_padded_file_fails_sanity_check(tmp_path):
    # KAFKA-10207: a crash before trim leaves zero slots that reopen as entries; the last "entry"
    # (timestamp 0) would make retention delete the segment early. The sanity check catches it.
    idx = _time_index(tmp_path, [(1_700_000_000_000, BASE), (1_700_000_000_500, BASE + 3)], size=120)
    idx.close_handler()  # crash: no trim
    reopened = TimeIndex(tmp_path / "0.timeindex", BASE, 120)
    assert reopened.entries == 10
    assert reopened.last_entry == TimestampOffset(0, BASE)
    with pytest.raises(CorruptIndexError, match="last timestamp"):
        reopened.sanity_check()
    reopened.close_handler()


def test_time_index_trimmed_file_passes_sanity_check(tmp_path):
    _time_index(tmp_path, [(1_700_000_000_000, BASE), (1_700_000_000_500, BASE + 3)], size=120).close()
    idx = TimeIndex(tmp_path / "0.timeindex", BASE)
    idx.sanity_check()
    idx.close()


def test_offset_index_sanity_check_rejects_length_not_a_multiple_of_entry_size(tmp_path):
    (tmp_path / "0.index").write_bytes(struct.pack(">ii", 1, 0) + b"\x00\x00\x00")
    idx = OffsetIndex(tmp_path / "0.index", BASE)
    assert idx.entries == 1
    with pytest.raises(CorruptIndexError, match="multiple of 8"):
        idx.sanity_check()
    idx.close_handler()


def test_offset_index_sanity_check_rejects_last_offset_below_base(tmp_path):
    (tmp_path / "0.index").write_bytes(struct.pack(">ii", 1, 0) + struct.pack(">ii", -5, 10))
    idx = OffsetIndex(tmp_path / "0.index", BASE)
    with pytest.raises(CorruptIndexError, match="less than the base offset"):
        idx.sanity_check()
    idx.close_handler()


def test_time_index_sanity_check_rejects_last_offset_below_base_and_bad_length(tmp_path):
    (tmp_path / "a.timeindex").write_bytes(struct.pack(">qi", 5, 0) + struct.pack(">qi", 9, -1))
    idx = TimeIndex(tmp_path / "a.timeindex", BASE)
    with pytest.raises(CorruptIndexError, match="last offset"):
        idx.sanity_check()
    idx.close_handler()
    (tmp_path / "b.timeindex").write_bytes(struct.pack(">qi", 5, 0) + b"\x00")
    idx = TimeIndex(tmp_path / "b.timeindex", BASE)
    with pytest.raises(CorruptIndexError, match="multiple of 12"):
        idx.sanity_check()
    idx.close_handler()


# ---------------------------------------------------------------------------------------- lookup


def test_offset_index_lookup_returns_largest_offset_at_or_below_target(tmp_path):
    idx = _offset_index(tmp_path, [(BASE + 5, 100), (BASE + 10, 200), (BASE + 20, 300)])
    assert idx.lookup(BASE) == OffsetPosition(BASE, 0)  # below the first entry: scan from 0
    assert idx.lookup(BASE + 4) == OffsetPosition(BASE, 0)
    assert idx.lookup(BASE + 5) == OffsetPosition(BASE + 5, 100)
    assert idx.lookup(BASE + 19) == OffsetPosition(BASE + 10, 200)
    assert idx.lookup(BASE + 20) == OffsetPosition(BASE + 20, 300)
    assert idx.lookup(BASE + 10**12) == OffsetPosition(BASE + 20, 300)
    idx.close()


def test_time_index_lookup_returns_largest_timestamp_at_or_below_target(tmp_path):
    idx = _time_index(tmp_path, [(100, BASE + 1), (200, BASE + 5)])
    assert idx.lookup(99) == TimestampOffset(-1, BASE)
    assert idx.lookup(100) == TimestampOffset(100, BASE + 1)
    assert idx.lookup(199) == TimestampOffset(100, BASE + 1)
    assert idx.lookup(10**15) == TimestampOffset(200, BASE + 5)
    idx.close()


def test_index_lookup_on_empty_index_returns_sentinels(tmp_path):
    idx, tidx = _offset_index(tmp_path), _time_index(tmp_path)
    assert idx.lookup(BASE + 7) == OffsetPosition(BASE, 0)
    assert tidx.lookup(7) == TimestampOffset(-1, BASE)
    idx.close()
    tidx.close()


@pytest.mark.parametrize("n", [1, 2, 681, 682, 683, 684, 1023, 1024, 1025, 1026, 2100])
def test_index_lookup_matches_brute_force_around_the_warm_section_boundary(tmp_path, n):
    rng = random.Random(n)
    oentries = _random_offset_entries(rng, n, BASE)
    tentries = _random_time_entries(rng, n, BASE)
    idx = _offset_index(tmp_path, oentries)
    tidx = _time_index(tmp_path, tentries)
    okeys = [e.offset for e in oentries]
    for t in _targets(okeys, rng):
        slot = _ref_lower(okeys, t)
        assert idx.lookup(t) == (oentries[slot] if slot >= 0 else OffsetPosition(BASE, 0))
    tkeys = [e.timestamp for e in tentries]
    for t in _targets(tkeys, rng):
        slot = _ref_lower(tkeys, t)
        assert tidx.lookup(t) == (tentries[slot] if slot >= 0 else TimestampOffset(-1, BASE))
    idx.close()
    tidx.close()


_PROPERTY = settings(max_examples=60, deadline=None)


@_PROPERTY
@given(
    n=st.one_of(st.integers(0, 40), st.integers(1000, 1100), st.integers(0, 2200)),
    seed=st.integers(0, 2**32),
    base=st.sampled_from([0, 17, 2**40]),
    targets=st.lists(st.integers(-(2**41), 2**42), max_size=20),
)
def test_offset_index_lookup_matches_brute_force(n, seed, base, targets):
    rng = random.Random(seed)
    entries = _random_offset_entries(rng, n, base)
    keys = [e.offset for e in entries]
    with tempfile.TemporaryDirectory() as d:
        idx = _offset_index(Path(d), entries, base=base)
        for t in _targets(keys, rng, extra=20) + targets:
            slot = _ref_lower(keys, t)
            assert idx.lookup(t) == (entries[slot] if slot >= 0 else OffsetPosition(base, 0))
        idx.close()


@_PROPERTY
@given(
    n=st.one_of(st.integers(0, 40), st.integers(650, 720), st.integers(0, 1500)),
    seed=st.integers(0, 2**32),
    targets=st.lists(st.integers(-(2**63), 2**63 - 1), max_size=20),
)
def test_time_index_lookup_matches_brute_force(n, seed, targets):
    rng = random.Random(seed)
    entries = _random_time_entries(rng, n, BASE)
    keys = [e.timestamp for e in entries]
    with tempfile.TemporaryDirectory() as d:
        idx = _time_index(Path(d), entries)
        assert idx.entries_list() == entries
        for t in _targets(keys, rng, extra=20) + targets:
            slot = _ref_lower(keys, t)
            assert idx.lookup(t) == (entries[slot] if slot >= 0 else TimestampOffset(-1, BASE))
        idx.close()


# ---------------------------------------------------------------------------------------- fetch bound


def test_offset_index_fetch_upper_bound_offset_returns_first_entry_past_the_fetch(tmp_path):
    idx = _offset_index(tmp_path)
    assert idx.fetch_upper_bound_offset(0, 100) is None
    for off, pos in [(BASE + 10, 0), (BASE + 20, 100), (BASE + 30, 200)]:
        idx.append(off, pos)
    assert idx.fetch_upper_bound_offset(0, 100) == OffsetPosition(BASE + 20, 100)
    assert idx.fetch_upper_bound_offset(50, 60) == OffsetPosition(BASE + 30, 200)
    assert idx.fetch_upper_bound_offset(150, 50) == OffsetPosition(BASE + 30, 200)
    assert idx.fetch_upper_bound_offset(150, 51) is None
    # Exact smallest bound even where Kafka's search overshoots by one slot (target == first key).
    assert idx.fetch_upper_bound_offset(0, 0) == OffsetPosition(BASE + 10, 0)
    idx.close()


@_PROPERTY
@given(n=st.one_of(st.integers(0, 30), st.integers(1020, 1030)), seed=st.integers(0, 2**32))
def test_offset_index_fetch_upper_bound_offset_matches_brute_force(n, seed):
    rng = random.Random(seed)
    entries = _random_offset_entries(rng, n, BASE)
    positions = [e.position for e in entries]
    with tempfile.TemporaryDirectory() as d:
        idx = _offset_index(Path(d), entries)
        for target in _targets(positions, rng, extra=20):
            if target < 0:
                continue
            size = rng.randrange(0, target + 1)
            slot = bisect.bisect_left(positions, target)
            expected = entries[slot] if slot < n else None
            assert idx.fetch_upper_bound_offset(target - size, size) == expected
        idx.close()


# ---------------------------------------------------------------------------------------- append rules


def test_offset_index_append_requires_strictly_increasing_offsets(tmp_path):
    idx = _offset_index(tmp_path, [(BASE, 0)])  # the base offset itself is a valid first entry
    idx.append(BASE + 5, 10)
    with pytest.raises(InvalidOffsetError):
        idx.append(BASE + 5, 20)
    with pytest.raises(InvalidOffsetError):
        idx.append(BASE + 4, 20)
    assert idx.entries_list() == [(BASE, 0), (BASE + 5, 10)]
    idx.close()


@pytest.mark.parametrize("rel", [-1, 2**31])
def test_offset_index_append_rejects_offsets_outside_int32_relative_range(tmp_path, rel):
    idx = _offset_index(tmp_path)
    assert not idx.can_append_offset(BASE + rel)
    with pytest.raises(ValueError, match="relative to base offset"):
        idx.append(BASE + rel, 0)
    assert idx.entries == 0
    idx.append(BASE + 2**31 - 1, 0)  # the largest relative offset fits
    assert idx.lookup(BASE + 2**40) == OffsetPosition(BASE + 2**31 - 1, 0)
    idx.close()


def test_time_index_maybe_append_rejects_offset_outside_int32_relative_range(tmp_path):
    idx = _time_index(tmp_path)
    with pytest.raises(ValueError, match="relative to base offset"):
        idx.maybe_append(5, BASE + 2**31)
    assert idx.entries == 0 and idx.last_entry == TimestampOffset(-1, BASE)
    idx.close()


def test_time_index_maybe_append_only_writes_increasing_timestamps(tmp_path):
    idx = _time_index(tmp_path)
    idx.maybe_append(-1, BASE)  # NO_TIMESTAMP never produces an entry
    assert idx.entries == 0
    idx.maybe_append(100, BASE + 1)
    idx.maybe_append(100, BASE + 7)  # equal timestamp: skipped, not an error
    idx.maybe_append(150, BASE + 1)  # equal offset, larger timestamp: written
    assert idx.entries_list() == [(100, BASE + 1), (150, BASE + 1)]
    with pytest.raises(InvalidOffsetError):
        idx.maybe_append(200, BASE)  # offset went backwards
    with pytest.raises(InvalidOffsetError):
        idx.maybe_append(149, BASE + 9)  # timestamp went backwards
    assert idx.last_entry == TimestampOffset(150, BASE + 1)
    idx.close()


# ---------------------------------------------------------------------------------------- truncate


@pytest.mark.parametrize(
    ("offset", "kept"),
    [(BASE, 0), (BASE + 5, 0), (BASE + 6, 1), (BASE + 10, 1), (BASE + 11, 2), (BASE + 20, 2), (BASE + 99, 3)],
)
def test_offset_index_truncate_to_keeps_entries_below_offset(tmp_path, offset, kept):
    entries = [(BASE + 5, 0), (BASE + 10, 100), (BASE + 20, 200)]
    idx = _offset_index(tmp_path, entries)
    idx.truncate_to(offset)
    assert idx.entries_list() == entries[:kept]
    assert idx.last_offset == (entries[kept - 1][0] if kept else BASE)
    idx.append(BASE + 50, 500)  # appending resumes after the new last entry
    assert idx.lookup(BASE + 60) == OffsetPosition(BASE + 50, 500)
    idx.close()


def test_time_index_truncate_to_compares_the_offset_column(tmp_path):
    entries = [(100, BASE + 2), (200, BASE + 5), (300, BASE + 5), (400, BASE + 9)]
    idx = _time_index(tmp_path, entries)
    idx.truncate_to(BASE + 9)
    assert idx.entries_list() == entries[:3]
    idx.truncate_to(BASE + 5)  # both entries at the repeated offset go
    assert idx.entries_list() == entries[:1]
    assert idx.last_entry == TimestampOffset(100, BASE + 2)
    idx.truncate_to(BASE)
    assert idx.entries == 0 and idx.last_entry == TimestampOffset(-1, BASE)
    idx.close()


@_PROPERTY
@given(n=st.integers(0, 60), seed=st.integers(0, 2**32), cut=st.integers(-5, 10**6))
def test_index_truncate_to_matches_reference(n, seed, cut):
    rng = random.Random(seed)
    oentries = _random_offset_entries(rng, n, BASE)
    tentries = _random_time_entries(rng, n, BASE)
    with tempfile.TemporaryDirectory() as d:
        idx = _offset_index(Path(d), oentries)
        tidx = _time_index(Path(d), tentries)
        idx.truncate_to(BASE + cut)
        tidx.truncate_to(BASE + cut)
        assert idx.entries_list() == [e for e in oentries if e.offset < BASE + cut]
        assert tidx.entries_list() == [e for e in tentries if e.offset < BASE + cut]
        idx.close()
        tidx.close()


# ---------------------------------------------------------------------------------------- resize / reset


def test_index_resize_preserves_entries_and_rounds_down(tmp_path):
    entries = [(BASE + i * 3, i * 100) for i in range(5)]
    idx = _offset_index(tmp_path, entries, size=800)
    assert idx.resize(100) is True
    assert (idx.file_length, idx.max_entries) == (96, 12)
    assert (tmp_path / "0.index").stat().st_size == 96
    assert idx.resize(103) is False  # same rounded size: nothing to do
    assert idx.entries_list() == entries
    assert idx.lookup(BASE + 7) == OffsetPosition(BASE + 6, 200)
    idx.append(BASE + 100, 9000)
    idx.close()
    assert OffsetIndex(tmp_path / "0.index", BASE).entries_list() == entries + [(BASE + 100, 9000)]


def test_time_index_resize_preserves_entries_and_last_entry(tmp_path):
    entries = [(10 * i, BASE + i) for i in range(1, 6)]
    idx = _time_index(tmp_path, entries, size=1200)
    idx.trim_to_valid_size()
    assert idx.file_length == 60 and idx.is_full()
    idx.resize(1200)
    assert idx.entries_list() == entries and idx.last_entry == entries[-1]
    assert not idx.is_full()
    idx.close()


def test_index_reset_drops_entries_and_restores_max_size(tmp_path):
    idx = _offset_index(tmp_path, [(BASE + 1, 0), (BASE + 2, 10)], size=800)
    tidx = _time_index(tmp_path, [(5, BASE + 1)], size=800)
    idx.make_read_only()
    tidx.trim_to_valid_size()
    idx.reset()
    tidx.reset()
    assert (idx.entries, idx.file_length, idx.last_offset) == (0, 800, BASE)
    assert (tidx.entries, tidx.file_length, tidx.last_entry) == (0, 792, TimestampOffset(-1, BASE))
    idx.append(BASE, 0)  # recovery rebuilds from scratch
    tidx.maybe_append(1, BASE)
    idx.close()
    tidx.close()


def test_index_reset_requires_a_usable_max_index_size(tmp_path):
    _offset_index(tmp_path, [(BASE + 1, 0)]).close()
    idx = OffsetIndex(tmp_path / "0.index", BASE)  # default max_index_size=-1
    with pytest.raises(ValueError):
        idx.reset()
    assert idx.entries == 1  # nothing dropped
    idx.close()


# ---------------------------------------------------------------------------------------- read-only


def test_index_make_read_only_trims_and_rejects_writes(tmp_path):
    idx = _offset_index(tmp_path, [(BASE + 1, 0), (BASE + 4, 90)])
    tidx = _time_index(tmp_path, [(7, BASE + 1)])
    idx.make_read_only()
    tidx.make_read_only()
    assert (tmp_path / "0.index").stat().st_size == 16
    assert (tmp_path / "0.timeindex").stat().st_size == 12
    assert idx.read_only and not idx.writable
    with pytest.raises(ReadOnlyIndexError):
        idx.append(BASE + 9, 100)
    with pytest.raises(ReadOnlyIndexError):
        tidx.maybe_append(9, BASE + 9, skip_full_check=True)
    with pytest.raises(TypeError):  # the mapping itself refuses stray writes
        idx._mmap[0:1] = b"\xff"
    assert idx.lookup(BASE + 5) == OffsetPosition(BASE + 4, 90)
    assert tidx.lookup(8) == TimestampOffset(7, BASE + 1)
    idx.close()
    tidx.close()
    assert (tmp_path / "0.index").read_bytes() == struct.pack(">iiii", 1, 0, 4, 90)


def test_index_growing_a_read_only_index_makes_it_appendable_again(tmp_path):
    # A log truncation that deletes later segments makes an old segment active again: Kafka
    # truncates its index and resizes it to max_index_size, after which it takes appends.
    idx = _offset_index(tmp_path, [(BASE + 1, 0), (BASE + 4, 90)], size=800)
    idx.make_read_only()
    idx.truncate_to(BASE + 4)
    idx.resize(800)
    assert idx.writable and idx.max_entries == 100
    idx.append(BASE + 2, 40)
    assert idx.entries_list() == [(BASE + 1, 0), (BASE + 2, 40)]
    idx.close()


def test_index_opened_read_only_rejects_every_mutation(tmp_path):
    _offset_index(tmp_path, [(BASE + 1, 0)]).close()
    before = (tmp_path / "0.index").read_bytes()
    idx = OffsetIndex(tmp_path / "0.index", BASE, writable=False)
    for mutate in (
        lambda: idx.append(BASE + 2, 10),
        lambda: idx.truncate_to(BASE),
        lambda: idx.resize(800),
        lambda: idx.reset(),
    ):
        with pytest.raises(ReadOnlyIndexError):
            mutate()
    assert idx.lookup(BASE + 1) == OffsetPosition(BASE + 1, 0)
    idx.close()
    assert (tmp_path / "0.index").read_bytes() == before


def test_index_opened_read_only_requires_the_file_to_exist(tmp_path):
    with pytest.raises(FileNotFoundError):
        TimeIndex(tmp_path / "missing.timeindex", BASE, MIB10, writable=False)
    assert not (tmp_path / "missing.timeindex").exists()


# ---------------------------------------------------------------------------------------- files


def test_index_rename_to_keeps_the_mapping_usable(tmp_path):
    idx = _offset_index(tmp_path, [(BASE + 1, 0)])
    idx.rename_to(tmp_path / "0.index.deleted")
    assert idx.path == tmp_path / "0.index.deleted" and not (tmp_path / "0.index").exists()
    idx.append(BASE + 2, 10)
    idx.close()
    assert (tmp_path / "0.index.deleted").stat().st_size == 16


def test_index_delete_if_exists_reports_whether_it_deleted(tmp_path):
    idx = _time_index(tmp_path, [(1, BASE)])
    assert idx.delete_if_exists() is True
    assert not (tmp_path / "0.timeindex").exists()
    assert idx.delete_if_exists() is False


def test_closed_index_refuses_lookups_instead_of_reading_garbage(tmp_path):
    idx = _offset_index(tmp_path, [(BASE + 1, 0)])
    idx.close()
    with pytest.raises(ValueError, match="closed"):
        idx.lookup(BASE + 1)
    with pytest.raises(ValueError, match="closed"):
        idx.append(BASE + 2, 5)


def test_offset_index_entry_out_of_range_raises_index_error(tmp_path):
    idx = _offset_index(tmp_path, [(BASE + 1, 0)])
    assert idx.entry(0) == OffsetPosition(BASE + 1, 0)
    with pytest.raises(IndexError):
        idx.entry(1)
    with pytest.raises(IndexError):
        idx.entry(-1)
    idx.close()


# ---------------------------------------------------------------------------------------- threads


def test_offset_index_reader_during_appends_only_sees_complete_entries(tmp_path):
    idx = _offset_index(tmp_path)
    stop, errors = threading.Event(), []

    def read() -> None:
        rng = random.Random(1)
        while not stop.is_set():
            found = idx.lookup(BASE + rng.randrange(0, 40_000))
            if found != (BASE, 0) and found.position != (found.offset - BASE) * 7:
                errors.append(found)

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for i in range(1, 20_000):
            idx.append(BASE + 2 * i, 14 * i)
    finally:
        stop.set()
        reader.join()
    assert errors == []
    idx.close()


# ---------------------------------------------------------------------------------------- lazy


def test_lazy_index_does_not_touch_the_file_until_get(tmp_path):
    lazy = LazyIndex.for_offset(tmp_path / "0.index", BASE, MIB10)
    assert not lazy.is_loaded and not (tmp_path / "0.index").exists()
    lazy.close()  # closing an unloaded index creates nothing either
    assert not (tmp_path / "0.index").exists()
    idx = lazy.get()
    assert isinstance(idx, OffsetIndex) and lazy.is_loaded
    assert (tmp_path / "0.index").stat().st_size == 10_485_760
    assert lazy.get() is idx
    lazy.close()
    assert (tmp_path / "0.index").stat().st_size == 0


def test_lazy_index_loads_an_existing_file_on_get(tmp_path):
    _time_index(tmp_path, [(5, BASE + 1)]).close()
    lazy = LazyIndex.for_time(tmp_path / "0.timeindex", BASE, MIB10)
    assert not lazy.is_loaded
    assert lazy.get().lookup(6) == TimestampOffset(5, BASE + 1)
    lazy.close()


def test_lazy_index_get_materialises_once_under_concurrent_calls(tmp_path):
    # KAFKA-9156: two racing loads created two mmaps with independent write positions.
    loads = []

    def loader(path: Path, writable: bool) -> OffsetIndex:
        loads.append(path)
        time.sleep(0.05)
        return OffsetIndex(path, BASE, MIB10)

    lazy = LazyIndex(tmp_path / "0.index", loader)
    barrier = threading.Barrier(8)
    results = []

    def worker() -> None:
        barrier.wait()
        results.append(lazy.get())

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(loads) == 1
    assert len(results) == 8 and all(r is results[0] for r in results)
    lazy.close()


def test_lazy_index_rename_to_before_load_moves_the_file_without_opening_it(tmp_path):
    _offset_index(tmp_path, [(BASE + 1, 0)]).close()
    lazy = LazyIndex.for_offset(tmp_path / "0.index", BASE, MIB10)
    lazy.rename_to(tmp_path / "0.index.cleaned")
    assert not lazy.is_loaded
    assert lazy.path == tmp_path / "0.index.cleaned" and not (tmp_path / "0.index").exists()
    assert lazy.get().entries_list() == [(BASE + 1, 0)]
    lazy.close()


def test_lazy_index_rename_to_before_load_tolerates_a_missing_file(tmp_path):
    lazy = LazyIndex.for_time(tmp_path / "0.timeindex", BASE, MIB10)
    lazy.rename_to(tmp_path / "0.timeindex.swap")
    assert lazy.path == tmp_path / "0.timeindex.swap"
    assert not (tmp_path / "0.timeindex.swap").exists()


def test_lazy_index_rename_to_after_load_renames_the_open_index(tmp_path):
    lazy = LazyIndex.for_offset(tmp_path / "0.index", BASE, MIB10)
    lazy.get().append(BASE + 3, 0)
    lazy.rename_to(tmp_path / "0.index.deleted")
    assert lazy.path == lazy.get().path == tmp_path / "0.index.deleted"
    lazy.get().append(BASE + 4, 10)
    lazy.close()
    assert OffsetIndex(tmp_path / "0.index.deleted", BASE).entries_list() == [(BASE + 3, 0), (BASE + 4, 10)]


def test_lazy_index_delete_if_exists_before_and_after_load(tmp_path):
    _offset_index(tmp_path, name="a.index").close()
    unloaded = LazyIndex.for_offset(tmp_path / "a.index", BASE, MIB10)
    assert unloaded.delete_if_exists() is True and not unloaded.is_loaded
    assert unloaded.delete_if_exists() is False
    loaded = LazyIndex.for_offset(tmp_path / "b.index", BASE, MIB10)
    loaded.get()
    assert loaded.delete_if_exists() is True
    assert not (tmp_path / "b.index").exists()


def test_lazy_index_update_parent_dir_changes_the_path_only(tmp_path):
    lazy = LazyIndex.for_offset(tmp_path / "0.index", BASE, MIB10)
    (tmp_path / "future").mkdir()
    lazy.update_parent_dir(tmp_path / "future")
    assert lazy.path == tmp_path / "future" / "0.index"
    lazy.get()
    assert (tmp_path / "future" / "0.index").exists()
    lazy.close()


def test_lazy_index_seal_trims_unmaps_and_reloads_read_only(tmp_path):
    lazy = LazyIndex.for_offset(tmp_path / "0.index", BASE, MIB10)
    index = lazy.get()
    index.append(BASE + 1, 10)
    index.append(BASE + 5, 70)
    lazy.seal()
    assert not lazy.is_loaded
    assert (tmp_path / "0.index").stat().st_size == 2 * OffsetIndex.ENTRY_SIZE
    reloaded = lazy.get()
    assert reloaded.read_only and reloaded.entries_list() == [(BASE + 1, 10), (BASE + 5, 70)]
    with pytest.raises(ReadOnlyIndexError):
        reloaded.append(BASE + 9, 100)
    lazy.close()
