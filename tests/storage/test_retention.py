"""Retention: segments deleted by time, size and log start offset, as Kafka's deleteOldSegments does.

Time is a ManualClock, so nothing here sleeps.
"""

from __future__ import annotations

import os

import pytest

from triolog.broker.storage.errors import OffsetOutOfRangeError
from triolog.broker.storage.log import Log
from triolog.broker.storage.log_manager import LogManager
from triolog.config.log_config import LogConfig
from triolog.protocol.records import Record, encode_batch

from .helpers import open_log, producer_batch, read_all_records

HOUR_MS = 3_600_000


def _log_with_segments(tmp_path, clock, segments: int, *, per_segment: int = 3, step_ms: int = 0, **overrides):
    """``segments`` rolled segments of ``per_segment`` one-record batches, plus an empty active one;
    the clock moves ``step_ms`` between segments, so segment i is ``(segments-1-i)*step_ms`` older
    than the last."""
    log = open_log(tmp_path, clock, **overrides)
    for i in range(segments):
        if i:
            clock.advance(step_ms)
        for _ in range(per_segment):
            log.append_as_leader(producer_batch(1, timestamp=clock.milliseconds(), tag=f"s{i}"))
        log.roll()
    return log


def _files(log: Log) -> list[str]:
    return sorted(os.listdir(log.directory))


def test_retention_ms_deletes_only_segments_whose_newest_record_is_too_old(tmp_path, clock):
    log = _log_with_segments(tmp_path, clock, 4, step_ms=HOUR_MS, **{"retention.ms": str(2 * HOUR_MS)})
    # Segment i's newest record is (3 - i) hours older than the newest one.
    clock.advance(1)  # ages now 3 h+1, 2 h+1, 1 h+1 and 1 ms: the first two are past 2 h
    deleted = log.delete_old_segments()
    assert deleted == 2
    assert log.log_start_offset == 6
    assert [s.base_offset for s in log.segments] == [6, 9, 12]
    assert log.deleted_segment_counts == {"retention_ms": 2}
    with pytest.raises(OffsetOutOfRangeError):
        log.read(5, 1 << 20)
    assert [r.offset for r in read_all_records(log, 6)] == list(range(6, 12))
    assert log.delete_old_segments() == 0  # idempotent: nothing else is old enough


def test_deleted_segments_leave_the_map_at_once_and_their_files_after_the_delay(tmp_path, clock):
    log = _log_with_segments(tmp_path, clock, 2, **{"retention.ms": "1000", "file.delete.delay.ms": "60000"})
    clock.advance(1001)
    assert log.delete_old_segments() == 2
    files = _files(log)
    assert "00000000000000000000.log.deleted" in files
    assert "00000000000000000003.log.deleted" in files
    assert "00000000000000000000.log" not in files
    # Segment 3's producer snapshot (taken when it was rolled in) goes with it; segment 0 had none.
    assert "00000000000000000003.snapshot.deleted" in files
    assert len(log.segment_deleter) == 3
    clock.advance(59_999)
    assert log.segment_deleter.run_due() == 0
    assert "00000000000000000000.log.deleted" in _files(log)
    clock.advance(1)
    assert log.segment_deleter.run_due() == 3
    assert not [f for f in _files(log) if f.endswith(".deleted")]
    assert _files(log) == ["00000000000000000006.index", "00000000000000000006.log",
                           "00000000000000000006.snapshot", "00000000000000000006.timeindex",
                           "leader-epoch-checkpoint"]


def test_retention_ms_falls_back_to_the_file_mtime_when_records_have_no_timestamp(tmp_path, clock):
    log = open_log(tmp_path, clock, **{"retention.ms": "1000"})
    log.append_as_leader(encode_batch([Record(0, -1, b"k", b"no timestamp")]))
    log.roll()
    log.append_as_leader(producer_batch(1, timestamp=clock.milliseconds()))
    first = log.segments.first_segment()
    assert first.max_timestamp_so_far < 0
    first.set_last_modified_ms(clock.milliseconds() - 500)
    assert log.delete_old_segments() == 0
    first.set_last_modified_ms(clock.milliseconds() - 1001)
    assert log.delete_old_segments() == 1
    assert log.log_start_offset == 1


def test_retention_bytes_deletes_oldest_segments_while_the_excess_is_a_whole_segment(tmp_path, clock):
    log = _log_with_segments(tmp_path, clock, 4)
    segment_size = log.segments.first_segment().size
    assert log.size == 4 * segment_size
    # 1.5 segments too big: only one whole segment fits in the excess.
    log.update_config(log.config.with_overrides({"retention.bytes": str(int(2.5 * segment_size))}))
    assert log.delete_old_segments() == 1
    assert log.deleted_segment_counts == {"retention_bytes": 1}
    assert log.deleted_bytes == {"retention_bytes": segment_size}
    assert log.size == 3 * segment_size
    log.update_config(log.config.with_overrides({"retention.bytes": str(segment_size)}))
    assert log.delete_old_segments() == 2
    assert log.log_start_offset == 9
    log.update_config(log.config.with_overrides({"retention.bytes": "-1"}))
    assert log.delete_old_segments() == 0


def test_log_start_offset_rule_deletes_segments_wholly_below_it(tmp_path, clock):
    log = _log_with_segments(tmp_path, clock, 3)
    log.maybe_increment_log_start_offset(4)  # delete_records: inside segment 3..5
    assert log.delete_old_segments() == 1  # only 0..2 lies wholly below 4
    assert [s.base_offset for s in log.segments] == [3, 6, 9]
    assert log.log_start_offset == 4  # the start offset never moves back to the segment base
    assert log.deleted_segment_counts == {"log_start_offset": 1}
    assert [r.offset for r in read_all_records(log, 4)] == list(range(4, 9))


def test_compact_only_logs_apply_just_the_log_start_offset_rule(tmp_path, clock):
    log = _log_with_segments(tmp_path, clock, 3, **{"cleanup.policy": "compact", "retention.ms": "1",
                                                      "retention.bytes": "1"})
    clock.advance(10 * HOUR_MS)
    assert log.delete_old_segments() == 0
    log.maybe_increment_log_start_offset(6)
    assert log.delete_old_segments() == 2


def test_when_every_segment_expired_the_log_rolls_first_and_keeps_its_offsets(tmp_path, clock):
    log = open_log(tmp_path, clock, **{"retention.ms": "1000"})
    for _ in range(5):
        log.append_as_leader(producer_batch(2, timestamp=clock.milliseconds()))
    assert log.num_segments == 1  # only the active segment, and it holds data
    clock.advance(1001)
    assert log.delete_old_segments() == 1
    assert [s.base_offset for s in log.segments] == [10]
    assert log.log_start_offset == log.log_end_offset == 10
    assert log.active_segment.size == 0
    info = log.append_as_leader(producer_batch(1, timestamp=clock.milliseconds()))
    assert info.first_offset == 10
    # An empty active segment is never "expired": nothing more to delete.
    clock.advance(10_000)
    log.roll()
    assert log.delete_old_segments() == 1  # the segment holding offset 10
    assert log.delete_old_segments() == 0
    assert log.log_start_offset == 11


def test_a_fetch_planned_before_deletion_still_sends_the_deleted_segments_bytes(tmp_path, clock):
    log = _log_with_segments(tmp_path, clock, 2, **{"retention.ms": "1000", "file.delete.delay.ms": "0"})
    info = log.read(0, 1 << 20)
    expected = info.region.read_bytes()
    fd = info.region.records.dup_fd()  # what the server takes before it releases the request
    try:
        clock.advance(1001)
        assert log.delete_old_segments() == 2
        # Between removal and unlink the segment is still readable by its planned region...
        assert info.region.read_bytes() == expected
        assert log.segment_deleter.run_due() == 3  # two segments and segment 3's producer snapshot
        # ...and after the unlink the sender's own descriptor still holds the bytes.
        assert os.pread(fd, info.region.length, info.region.position) == expected
    finally:
        os.close(fd)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0, 1 << 20)


def test_reopening_after_retention_drops_leftover_deleted_files_and_keeps_the_start(tmp_path, clock):
    log = _log_with_segments(tmp_path, clock, 3, **{"retention.ms": "1000"})
    clock.advance(1001)
    log.roll()
    assert log.delete_old_segments() == 3
    directory, config = log.directory, log.config
    log.close()  # the broker stops before file.delete.delay.ms passed
    assert any(f.endswith(".deleted") for f in os.listdir(directory))
    reopened = Log.open(directory, config, clock=clock, had_clean_shutdown=True)
    assert not any(f.endswith(".deleted") for f in os.listdir(directory))
    assert reopened.log_start_offset == reopened.log_end_offset == 9


def test_log_manager_retention_task_skips_compacted_logs(tmp_path, clock):
    configs = {
        "deleted": LogConfig().with_overrides({"retention.ms": "1000"}),
        "compacted": LogConfig().with_overrides({"retention.ms": "1000", "cleanup.policy": "compact"}),
        "both": LogConfig().with_overrides({"retention.ms": "1000", "cleanup.policy": "compact,delete"}),
    }
    manager = LogManager([tmp_path / "data"], LogConfig(), clock=clock, topic_config=configs.__getitem__)
    manager.startup()
    try:
        for topic in configs:
            log = manager.get_or_create_log(topic, 0)
            log.append_as_leader(producer_batch(1, timestamp=clock.milliseconds()))
            log.roll()
        clock.advance(1001)
        assert manager.cleanup_logs() == 1
        assert manager.get_log("deleted", 0).log_start_offset == 1
        assert manager.get_log("compacted", 0).log_start_offset == 0
        assert manager.get_log("both", 0).log_start_offset == 0  # the cleaner applies it
    finally:
        manager.shutdown()


def test_retention_leaves_a_log_the_cleaner_holds_until_the_cleaner_lets_go(tmp_path, clock):
    from triolog.broker.storage.cleaner.log_cleaner import CleanerConfig

    compacted = LogConfig().with_overrides({"retention.ms": "1000", "cleanup.policy": "compact"})
    configs = {"switched": compacted}
    manager = LogManager([tmp_path / "data"], LogConfig(), clock=clock, topic_config=configs.__getitem__,
                         cleaner_config=CleanerConfig(num_threads=0, use_worker_process=False))
    manager.startup()
    try:
        log = manager.get_or_create_log("switched", 0)
        log.append_as_leader(producer_batch(1, timestamp=clock.milliseconds()))
        log.roll()
        cleaner = manager.cleaner.manager
        held = cleaner.deletable_logs()  # the cleaner thread's own pass over compacted logs
        assert [tp for tp, _ in held] == [("switched", 0)]
        # The topic becomes delete-only while the cleaner still works on it.
        log.update_config(log.config.with_overrides({"cleanup.policy": "delete"}))
        clock.advance(1001)
        assert manager.cleanup_logs() == 0
        cleaner.done_deleting([("switched", 0)])
        assert manager.cleanup_logs() == 1
        assert cleaner.state_of(("switched", 0)) is None  # retention's pause was lifted again
    finally:
        manager.shutdown()
