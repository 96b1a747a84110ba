"""LogCleanerManager: which log is cleaned, over which range (Kafka's rules, injectable clock)."""

from __future__ import annotations

from triolog.broker.storage.clock import ManualClock
from triolog.broker.storage.cleaner.cleaner_manager import cleanable_offsets
from triolog.broker.storage.log import Log

from .helpers import Driver, append, compact_config, read_all_records


def _fill(log, clock, count, keys, value=b"v" * 40):
    for i in range(count):
        append(log, [(b"k%d" % (i % keys), value)], clock.milliseconds())


def test_the_filthiest_log_goes_first(tmp_path):
    clock = ManualClock()
    cleaner_logs = {}
    for name, keys in (("a", 10), ("b", 2)):
        log = Log.open(tmp_path / f"{name}-0", compact_config(segment_bytes=2000), clock=clock)
        _fill(log, clock, 40, keys)
        log.roll()
        cleaner_logs[(name, 0)] = log
    driver = Driver(tmp_path, cleaner_logs, clock)
    # Make "a" mostly clean: one round on it alone, then add a little dirt to both.
    only_a = Driver(tmp_path, {("a", 0): cleaner_logs[("a", 0)]}, clock)
    assert only_a.run_once()
    only_a.close()
    for log in cleaner_logs.values():
        _fill(log, clock, 3, 2)
        log.roll()
    assert driver.run_once()
    assert driver.checkpoint()[("b", 0)] == cleaner_logs[("b", 0)].active_segment.base_offset
    assert driver.checkpoint()[("a", 0)] < cleaner_logs[("a", 0)].active_segment.base_offset
    assert driver.cleaner.metrics().max_dirty_ratio == 1.0  # b was entirely dirty
    driver.close()


def test_dirty_ratio_must_exceed_the_minimum(tmp_path):
    clock = ManualClock()
    log = Log.open(tmp_path / "t-0", compact_config(min_cleanable_dirty_ratio=0.5, segment_bytes=600), clock=clock)
    _fill(log, clock, 40, 40)
    log.roll()
    driver = Driver(tmp_path, {("t", 0): log}, clock)
    assert driver.run_once()  # all dirty: ratio 1
    _fill(log, clock, 2, 40)
    log.roll()
    assert not driver.run_once()  # a sliver of dirt: below 0.5
    assert 0 < driver.cleaner.metrics().max_dirty_ratio < 0.5
    driver.close()


def test_min_compaction_lag_keeps_young_segments_out(tmp_path):
    clock = ManualClock()
    log = Log.open(tmp_path / "t-0", compact_config(min_compaction_lag_ms=10_000, segment_bytes=600), clock=clock)
    _fill(log, clock, 30, 3)
    log.roll()
    dirty, uncleanable, _ = cleanable_offsets(log, None, clock.milliseconds())
    assert (dirty, uncleanable) == (0, 0)  # the first segment is younger than the lag
    driver = Driver(tmp_path, {("t", 0): log}, clock)
    assert not driver.run_once()
    clock.advance(10_001)
    assert driver.run_once()
    assert len(read_all_records(log)) == 3
    driver.close()


def test_max_compaction_lag_forces_a_clean_below_the_ratio(tmp_path):
    clock = ManualClock()
    config = compact_config(min_cleanable_dirty_ratio=0.99, max_compaction_lag_ms=60_000, segment_bytes=600)
    log = Log.open(tmp_path / "t-0", config, clock=clock)
    _fill(log, clock, 30, 30)
    log.roll()
    driver = Driver(tmp_path, {("t", 0): log}, clock)
    assert driver.run_once()  # ratio 1.0 > 0.99
    _fill(log, clock, 2, 30)
    log.roll()
    assert not driver.run_once()
    clock.advance(60_000 + 5_000)
    assert driver.run_once()  # overdue: cleaned whatever the ratio
    assert driver.cleaner.metrics().max_compaction_delay_s == 5.0
    driver.close()


def test_a_checkpoint_below_the_log_start_is_reset(tmp_path):
    clock = ManualClock()
    log = Log.open(tmp_path / "t-0", compact_config(segment_bytes=600), clock=clock)
    _fill(log, clock, 40, 40)
    log.roll()
    log.maybe_increment_log_start_offset(25)
    assert cleanable_offsets(log, 10, clock.milliseconds())[0::2] == (25, True)
    assert cleanable_offsets(log, 10**6, clock.milliseconds())[0::2] == (25, True)
    assert cleanable_offsets(log, 30, clock.milliseconds())[0::2] == (30, False)
