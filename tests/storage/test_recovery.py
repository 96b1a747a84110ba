"""Crash recovery: whatever a crash leaves on disk, reopening keeps every valid batch before the damage.

A "crash" here is what kill -9 leaves behind: the log object is dropped without close(), so
indexes stay preallocated and zero-padded, and nothing is trimmed. Damage is then applied to
the files at random byte positions.
"""

from __future__ import annotations

import os
import shutil

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from triolog.broker.storage.checkpoints import (
    CLEAN_SHUTDOWN_FILE,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    OffsetCheckpointFile,
)
from triolog.broker.storage.log import Log
from triolog.broker.storage.log_manager import LogManager
from triolog.config.log_config import LogConfig

from .helpers import producer_batch, read_all_records

CONFIG = LogConfig().with_overrides({"segment.bytes": "600", "index.interval.bytes": "1"})


def _write_log(path, clock, batches: int = 12, config: LogConfig = CONFIG) -> tuple[Log, list[int]]:
    """A log of several segments; returns it and the byte size of each batch in order."""
    log = Log.open(path, config, clock=clock)
    sizes = []
    for i in range(batches):
        batch = producer_batch(1 + i % 3, timestamp=clock.milliseconds() + i, tag=f"{i}-")
        sizes.append(len(batch))
        log.append_as_leader(batch)
    return log, sizes


def _batch_layout(log: Log) -> list[tuple[int, int, int, int]]:
    """(segment base, position, size, next offset) of every batch, from the files."""
    out = []
    for segment in log.segments:
        for position, header in segment.log.batch_headers():
            out.append((segment.base_offset, position, header.size, header.next_offset))
    return out


def _crash(log: Log) -> None:
    """Drop the log the way kill -9 does: close file descriptors, change nothing on disk."""
    for segment in log.segments:
        segment.close_handlers()


def _reopen(path, clock, *, recovery_point: int = 0) -> Log:
    return Log.open(path, CONFIG, clock=clock, recovery_point=recovery_point, had_clean_shutdown=False)


def _expected_next_offset(layout, segment_base: int, cut_position: int) -> int:
    """Offset after the last batch wholly before the damage."""
    next_offset = 0
    for base, position, size, nxt in layout:
        if base > segment_base or (base == segment_base and position + size > cut_position):
            break
        next_offset = nxt
    return next_offset


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_recovery_truncating_a_segment_anywhere_keeps_every_batch_before_the_cut(tmp_path_factory, clock, data):
    path = tmp_path_factory.mktemp("crash") / "topic-0"
    log, _ = _write_log(path, clock)
    layout = _batch_layout(log)
    expected = read_all_records(log)
    _crash(log)
    bases = sorted({base for base, *_ in layout})
    victim = data.draw(st.sampled_from(bases), label="segment")
    log_file = path / f"{victim:020d}.log"
    cut = data.draw(st.integers(0, log_file.stat().st_size - 1), label="cut")
    os.truncate(log_file, cut)
    # a crash only damages what was not yet flushed: the recovery point is at or below the damage
    recovery_point = data.draw(st.sampled_from([b for b in bases if b <= victim]), label="recovery point")

    recovered = _reopen(path, clock, recovery_point=recovery_point)
    next_offset = _expected_next_offset(layout, victim, cut)
    # Whether the cut tore a batch or fell on a batch boundary (a tail that never reached the
    # disk), the log ends at the last whole batch before it: what follows a gap was never
    # acknowledged (a flush syncs every segment below its offset first), so later segments go.
    assert recovered.log_end_offset == next_offset
    assert read_all_records(recovered) == [r for r in expected if r.offset < next_offset]
    assert all(s.base_offset <= max(victim, next_offset) for s in recovered.segments)
    # and the log is usable: appends continue right after the last valid batch
    info = recovered.append_as_leader(producer_batch(2, timestamp=clock.milliseconds()))
    assert info.first_offset == next_offset


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_recovery_corrupting_any_byte_keeps_every_batch_before_it(tmp_path_factory, clock, data):
    path = tmp_path_factory.mktemp("crash") / "topic-0"
    log, _ = _write_log(path, clock)
    layout = _batch_layout(log)
    expected = read_all_records(log)
    _crash(log)
    base, position, size, _ = data.draw(st.sampled_from(layout), label="batch")
    # any byte except the partition leader epoch (12..15), which no checksum covers in Kafka either
    offset_in_batch = data.draw(st.integers(0, size - 1).filter(lambda i: not 12 <= i < 16), label="byte")
    flip = data.draw(st.integers(1, 255), label="xor")
    log_file = path / f"{base:020d}.log"
    raw = bytearray(log_file.read_bytes())
    raw[position + offset_in_batch] ^= flip
    log_file.write_bytes(bytes(raw))
    bases = sorted({b for b, *_ in layout})
    recovery_point = data.draw(st.sampled_from([b for b in bases if b <= base]), label="recovery point")

    recovered = _reopen(path, clock, recovery_point=recovery_point)
    next_offset = _expected_next_offset(layout, base, position + 1)
    if offset_in_batch < 8:
        # The base offset is outside the CRC too: a batch whose offsets moved is caught only
        # when they leave the segment's range; otherwise its bytes are kept as they are.
        assert recovered.log_end_offset >= next_offset
    else:
        assert recovered.log_end_offset == next_offset
    kept = read_all_records(recovered)
    assert [r for r in kept if r.offset < next_offset] == [r for r in expected if r.offset < next_offset]


def test_recovery_of_garbage_after_the_last_batch(tmp_path, clock):
    path = tmp_path / "topic-0"
    log, _ = _write_log(path, clock)
    end, expected = log.log_end_offset, read_all_records(log)
    _crash(log)
    active = path / f"{log.segments.active_segment.base_offset:020d}.log"
    with open(active, "ab") as f:
        f.write(b"\x00" * 100)  # e.g. a preallocated tail
    recovered = _reopen(path, clock)
    assert recovered.log_end_offset == end and read_all_records(recovered) == expected
    assert active.stat().st_size == recovered.active_segment.size


def test_recovery_rebuilds_the_same_indexes_after_a_crash(tmp_path, clock):
    path = tmp_path / "topic-0"
    log, _ = _write_log(path, clock)
    log.roll()
    written = {
        s.base_offset: (s.offset_index.entries_list(), s.time_index.entries_list()) for s in log.segments
    }
    _crash(log)
    for segment_file in path.glob("*.index"):
        segment_file.unlink()
    for segment_file in path.glob("*.timeindex"):
        segment_file.write_bytes(b"\x00" * 120)  # zero padded, as after KAFKA-10207
    recovered = _reopen(path, clock)
    rebuilt = {
        s.base_offset: (s.offset_index.entries_list(), s.time_index.entries_list()) for s in recovered.segments
    }
    assert rebuilt == written


def test_recovery_rebuilds_a_corrupt_index_below_the_recovery_point(tmp_path, clock):
    path = tmp_path / "topic-0"
    log, _ = _write_log(path, clock)
    log.flush()
    bases = log.segments.base_offsets()
    entries = log.segments.get(bases[0]).offset_index.entries_list()
    _crash(log)
    index_file = path / f"{bases[0]:020d}.index"
    index_file.write_bytes(index_file.read_bytes() + b"\x00" * 16)  # zero padding after the entries
    recovered = _reopen(path, clock, recovery_point=log.log_end_offset)
    first = recovered.segments.get(bases[0])
    assert first.offset_index.entries_list() == entries
    assert recovered.log_end_offset == log.log_end_offset


def test_recovery_deletes_stray_cleaned_and_deleted_files(tmp_path, clock):
    path = tmp_path / "topic-0"
    log, _ = _write_log(path, clock)
    end = log.log_end_offset
    _crash(log)
    first = path / f"{0:020d}.log"
    shutil.copy(first, path / f"{0:020d}.log.cleaned")
    shutil.copy(first, path / f"{5:020d}.log.deleted")
    (path / f"{5:020d}.index.deleted").write_bytes(b"")
    recovered = _reopen(path, clock)
    assert not [p for p in path.iterdir() if p.suffix in (".cleaned", ".deleted")]
    assert recovered.log_end_offset == end


def _swap_in(path, clock, source_log: Log, replaced_bases: list[int]) -> None:
    """Leave the files of an interrupted cleaner swap: ``source_log``'s first segment as .swap."""
    segment = source_log.segments.first_segment()
    segment.close()
    for suffix in (".log", ".index", ".timeindex"):
        src = segment.log.path.with_suffix(suffix)
        shutil.copy(src, path / (src.name + ".swap"))


def test_recovery_completes_an_interrupted_swap(tmp_path, clock):
    path = tmp_path / "topic-0"
    log, _ = _write_log(path, clock)
    bases = log.segments.base_offsets()
    assert len(bases) >= 3
    # The "cleaned" replacement for the first two segments: one segment holding offsets 0..bases[2]-1.
    big = LogConfig().with_overrides({"index.interval.bytes": "1"})
    other = Log.open(tmp_path / "other" / "topic-0", big, clock=clock)
    for i in range(bases[2]):
        other.append_as_leader(producer_batch(1, timestamp=clock.milliseconds(), tag=f"c{i}-"))
    _crash(log)
    _swap_in(path, clock, other, bases[:2])
    (path / f"{bases[1]:020d}.log").unlink()  # the swap was part-way through deleting old files

    recovered = _reopen(path, clock)
    assert recovered.segments.base_offsets() == [0] + bases[2:]
    assert not list(path.glob("*.swap"))
    values = [r.value for r in read_all_records(recovered) if r.offset < bases[2]]
    assert all(v.startswith(b"c") for v in values) and len(values) == bases[2]


def test_recovery_discards_a_swap_left_by_an_unfinished_clean(tmp_path, clock):
    path = tmp_path / "topic-0"
    log, _ = _write_log(path, clock)
    bases, expected = log.segments.base_offsets(), read_all_records(log)
    other = Log.open(tmp_path / "other" / "topic-0", CONFIG, clock=clock)
    other.append_as_leader(producer_batch(1, timestamp=clock.milliseconds(), tag="c"))
    _crash(log)
    _swap_in(path, clock, other, bases[:1])
    shutil.copy(path / f"{0:020d}.log", path / f"{0:020d}.log.cleaned")
    recovered = _reopen(path, clock)
    assert read_all_records(recovered) == expected
    assert not [p for p in path.iterdir() if p.suffix in (".swap", ".cleaned")]


def test_recovery_deletes_orphaned_index_files(tmp_path, clock):
    path = tmp_path / "topic-0"
    log, _ = _write_log(path, clock)
    _crash(log)
    (path / f"{999:020d}.index").write_bytes(b"\x00" * 8)
    (path / f"{999:020d}.timeindex").write_bytes(b"")
    _reopen(path, clock)
    assert not (path / f"{999:020d}.index").exists() and not (path / f"{999:020d}.timeindex").exists()


def test_recovery_of_an_empty_directory_starts_at_the_log_start_offset(tmp_path, clock):
    path = tmp_path / "topic-0"
    path.mkdir()
    log = Log.open(path, CONFIG, clock=clock, log_start_offset=42)
    assert log.segments.base_offsets() == [42] and log.log_end_offset == 42
    assert log.append_as_leader(producer_batch(1, timestamp=clock.milliseconds())).first_offset == 42


# -- the log manager: checkpoints and the clean-shutdown marker -----------------------------------


def test_log_manager_clean_shutdown_writes_checkpoints_and_marker(tmp_path, clock):
    manager = LogManager([tmp_path / "d1"], CONFIG, clock=clock)
    manager.startup()
    log = manager.get_or_create_log("orders", 0)
    for _ in range(6):
        log.append_as_leader(producer_batch(2, timestamp=clock.milliseconds()))
    log.maybe_increment_log_start_offset(log.segments.base_offsets()[1] + 1)
    manager.shutdown()
    root = tmp_path / "d1"
    assert (root / CLEAN_SHUTDOWN_FILE).exists()
    assert (root / "meta.properties").exists()
    assert OffsetCheckpointFile(root / RECOVERY_POINT_CHECKPOINT).read() == {("orders", 0): 12}
    assert OffsetCheckpointFile(root / REPLICATION_OFFSET_CHECKPOINT).read() == {("orders", 0): 12}
    start = log.log_start_offset
    assert OffsetCheckpointFile(root / LOG_START_OFFSET_CHECKPOINT).read() == {("orders", 0): start}
    # epoch 0 began at offset 0; delete_records moved the start of its range up with the log start
    assert (root / "orders-0" / "leader-epoch-checkpoint").read_text() == f"0\n1\n0 {start}\n"

    again = LogManager([root], CONFIG, clock=clock)
    again.startup()
    assert again.had_clean_shutdown[root.resolve()] is True
    assert not (root / CLEAN_SHUTDOWN_FILE).exists()  # KAFKA-10471: gone before loading
    reopened = again.get_log("orders", 0)
    assert (reopened.log_start_offset, reopened.log_end_offset, reopened.recovery_point) == (start, 12, 12)
    again.shutdown()


def test_log_manager_recovers_after_a_crash_without_the_marker(tmp_path, clock):
    manager = LogManager([tmp_path / "d1"], CONFIG, clock=clock)
    manager.startup()
    log = manager.get_or_create_log("orders", 0)
    for _ in range(6):
        log.append_as_leader(producer_batch(2, timestamp=clock.milliseconds()))
    manager.checkpoint_recovery_points()
    _crash(log)
    for d in manager.log_dirs:
        d.unlock()
    active = log.segments.active_segment.log.path
    os.truncate(active, active.stat().st_size - 3)  # a torn last write

    again = LogManager([tmp_path / "d1"], CONFIG, clock=clock)
    again.startup()
    assert again.had_clean_shutdown[(tmp_path / "d1").resolve()] is False
    recovered = again.get_log("orders", 0)
    assert recovered.log_end_offset == 10
    assert recovered.load_stats.truncated_bytes > 0
    again.shutdown()


def test_log_manager_places_new_partitions_in_the_emptiest_dir(tmp_path, clock):
    manager = LogManager([tmp_path / "a", tmp_path / "b"], CONFIG, clock=clock)
    manager.startup()
    for p in range(4):
        manager.get_or_create_log("t", p)
    placed = sorted(d.name for d in (tmp_path / "a").iterdir() if d.is_dir()) + sorted(
        d.name for d in (tmp_path / "b").iterdir() if d.is_dir()
    )
    assert sorted(placed) == ["t-0", "t-1", "t-2", "t-3"]
    assert len([d for d in (tmp_path / "a").iterdir() if d.is_dir()]) == 2
    manager.shutdown()


def test_log_manager_refuses_a_log_dir_in_use(tmp_path, clock):
    first = LogManager([tmp_path / "d"], CONFIG, clock=clock)
    first.startup()
    with pytest.raises(Exception, match="in use"):
        LogManager([tmp_path / "d"], CONFIG, clock=clock).startup()
    first.shutdown()


def test_log_manager_delete_log_removes_the_partition(tmp_path, clock):
    manager = LogManager([tmp_path / "d"], CONFIG, clock=clock)
    manager.startup()
    manager.get_or_create_log("gone", 0).append_as_leader(producer_batch(1, timestamp=clock.milliseconds()))
    assert manager.delete_log("gone", 0) is True
    assert manager.get_log("gone", 0) is None
    assert not [p for p in (tmp_path / "d").iterdir() if p.name.startswith("gone")]
    manager.shutdown()


def test_log_manager_rejects_invalid_topic_names_before_touching_files(tmp_path, clock):
    manager = LogManager([tmp_path / "d"], CONFIG, clock=clock)
    manager.startup()
    for bad in ("../escape", "a/b", "..", "", "x" * 250, "sp ace"):
        with pytest.raises(Exception):
            manager.get_or_create_log(bad, 0)
    assert sorted(p.name for p in (tmp_path / "d").iterdir() if p.is_dir()) == []
    assert not (tmp_path / "escape-0").exists()
    manager.shutdown()




def test_recovery_keeps_batches_larger_than_a_since_lowered_max_message_bytes(tmp_path, clock):
    path = tmp_path / "topic-0"
    log = Log.open(path, CONFIG, clock=clock)
    log.append_as_leader(producer_batch(1, timestamp=clock.milliseconds(), value_size=500))
    log.append_as_leader(producer_batch(1, timestamp=clock.milliseconds()))
    expected = read_all_records(log)
    _crash(log)
    lowered = CONFIG.with_overrides({"max.message.bytes": "100"})
    recovered = Log.open(path, lowered, clock=clock, recovery_point=0, had_clean_shutdown=False)
    assert read_all_records(recovered) == expected


def test_recovery_rebuilds_a_zeroed_time_index_below_the_recovery_point(tmp_path, clock):
    """A power cut can leave a flushed segment's index pages zeroed; Kafka's own sanity check
    passes a single zero entry, which would make retention think the data is from 1970."""
    path = tmp_path / "topic-0"
    log, _ = _write_log(path, clock)
    log.flush()
    first = log.segments.first_segment()
    written = first.time_index.entries_list()
    assert len(written) >= 1
    _crash(log)
    time_index = path / f"{0:020d}.timeindex"
    time_index.write_bytes(b"\x00" * len(time_index.read_bytes()))
    recovered = _reopen(path, clock, recovery_point=log.log_end_offset)
    assert recovered.segments.first_segment().time_index.entries_list() == written
    assert recovered.segments.first_segment().largest_timestamp == written[-1].timestamp


def test_recovery_with_an_index_shrunk_by_config_keeps_every_batch(tmp_path, clock):
    path = tmp_path / "topic-0"
    big = LogConfig().with_overrides({"index.interval.bytes": "1"})
    log = Log.open(path, big, clock=clock)
    for i in range(8):
        log.append_as_leader(producer_batch(1, timestamp=clock.milliseconds() + i))
    expected = read_all_records(log)
    _crash(log)
    small = big.with_overrides({"segment.index.bytes": "24"})
    recovered = Log.open(path, small, clock=clock, recovery_point=0, had_clean_shutdown=False)
    assert read_all_records(recovered) == expected


def test_log_reopened_cleanly_without_a_time_index_gets_an_empty_one(tmp_path, clock):
    path = tmp_path / "topic-0"
    log, _ = _write_log(path, clock)
    log.close()
    (path / f"{0:020d}.timeindex").unlink()
    reopened = Log.open(path, CONFIG, clock=clock, recovery_point=log.log_end_offset, had_clean_shutdown=True)
    assert (path / f"{0:020d}.timeindex").stat().st_size == 0
    first_ts = read_all_records(reopened)[0].timestamp
    assert reopened.fetch_offset_by_timestamp(first_ts) == (first_ts, 0)


def test_recovery_of_a_compacted_log_keeps_the_offset_gaps_the_cleaner_left(tmp_path, clock):
    """Between unflushed segments a gap ends a delete-policy log (it can only be a lost tail),
    but compaction leaves gaps on purpose: a compacted log keeps the segments after one."""
    path = tmp_path / "topic-0"
    compacted = CONFIG.with_overrides({"cleanup.policy": "compact"})
    log, _ = _write_log(path, clock, config=compacted)
    expected = read_all_records(log)
    layout = _batch_layout(log)
    _crash(log)
    first = [entry for entry in layout if entry[0] == 0]
    assert len(first) >= 2
    gap_start, gap_end = first[-2][3], first[-1][3]  # offsets of the first segment's last batch
    # that batch removed, as the cleaner does with superseded keys
    os.truncate(path / f"{0:020d}.log", first[-1][1])
    recovered = Log.open(path, compacted, clock=clock, recovery_point=0, had_clean_shutdown=False)
    assert recovered.segments.base_offsets() == sorted({base for base, *_ in layout})
    assert read_all_records(recovered) == [r for r in expected if not gap_start <= r.offset < gap_end]


def test_recovery_of_a_delete_policy_log_ends_it_at_a_gap(tmp_path, clock):
    path = tmp_path / "topic-0"
    log, _ = _write_log(path, clock)
    expected = read_all_records(log)
    layout = _batch_layout(log)
    _crash(log)
    first = [entry for entry in layout if entry[0] == 0]
    os.truncate(path / f"{0:020d}.log", first[-1][1])  # a tail that never reached the disk
    recovered = _reopen(path, clock)
    assert recovered.segments.base_offsets() == [0]
    assert recovered.log_end_offset == first[-2][3]
    assert read_all_records(recovered) == [r for r in expected if r.offset < first[-2][3]]
    # and the cut is durable: the files after the gap are gone, not just forgotten
    assert sorted(p.name for p in path.iterdir() if p.suffix == ".log") == [f"{0:020d}.log"]
