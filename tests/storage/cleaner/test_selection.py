"""LogCleanerManager: which log is cleaned, over which range (Kafka's rules, injectable clock), and
the round of its own for a log whose kept tombstones' delete horizon has passed."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from triolog.broker.storage.clock import ManualClock
from triolog.broker.storage.cleaner.cleaner_manager import cleanable_offsets
from triolog.broker.storage.log import Log
from triolog.protocol.records import iter_batches

from .helpers import Driver, append, compact_config, read_all_records
from .test_transactions import ABORT, KafkaLog, marker_batch, markers


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


# -- expired tombstones: a round of their own, without new writes ----------------------------


def _tombstoned_log(tmp_path, clock, name="t", delete_retention_ms=10_000):
    """A log whose first round keeps only b=1 and a's tombstone (stamped with a horizon)."""
    log = Log.open(tmp_path / f"{name}-0", compact_config(delete_retention_ms=delete_retention_ms), clock=clock)
    append(log, [(b"a", b"1"), (b"b", b"1")], clock.milliseconds())
    append(log, [(b"a", None)], clock.milliseconds())
    log.roll()
    return log


def _contents(log):
    return [(r.key, r.value) for r in read_all_records(log)]


@pytest.mark.parametrize("worker_process", [False, True])
def test_an_expired_tombstone_goes_without_new_writes(tmp_path, worker_process):
    clock = ManualClock()
    log = _tombstoned_log(tmp_path, clock)
    driver = Driver(tmp_path, {("t", 0): log}, clock, worker_process=worker_process)
    assert driver.run_once()  # stamps the tombstone: horizon = now + 10 s
    assert _contents(log) == [(b"b", b"1"), (b"a", None)]
    end, checkpoint = log.log_end_offset, driver.checkpoint()
    clock.advance(9_999)
    assert not driver.run_once()  # nothing dirty and the horizon is still ahead: not picked
    assert _contents(log) == [(b"b", b"1"), (b"a", None)]
    clock.advance(1)
    assert driver.run_once()  # the horizon passed: cleaned with no new write
    assert _contents(log) == [(b"b", b"1")]
    assert log.log_end_offset == end and driver.checkpoint() == checkpoint
    assert not driver.run_once()  # nothing waits for a horizon any more: one round, not a loop
    clock.advance(10**9)
    assert not driver.run_once()
    driver.close()


def test_with_no_delete_retention_the_tombstone_goes_in_the_next_round(tmp_path):
    clock = ManualClock()
    log = _tombstoned_log(tmp_path, clock, delete_retention_ms=0)
    driver = Driver(tmp_path, {("t", 0): log}, clock)
    assert driver.run_until_idle() == 2  # the ratio's round stamps it, the horizon's round removes it
    assert _contents(log) == [(b"b", b"1")]
    driver.close()


def test_a_dirty_log_goes_before_one_whose_horizon_passed(tmp_path):
    clock = ManualClock()
    expired = _tombstoned_log(tmp_path, clock, name="expired", delete_retention_ms=0)
    dirty = Log.open(tmp_path / "dirty-0", compact_config(), clock=clock)
    logs = {("expired", 0): expired}
    driver = Driver(tmp_path, logs, clock)
    assert driver.run_once()  # stamps expired's tombstone
    logs[("dirty", 0)] = dirty
    append(dirty, [(b"x", b"1"), (b"x", b"2")], clock.milliseconds())
    dirty.roll()
    assert driver.run_once()
    assert _contents(dirty) == [(b"x", b"2")] and (b"a", None) in _contents(expired)
    assert driver.run_once()
    assert _contents(expired) == [(b"b", b"1")]
    assert not driver.run_once()
    driver.close()


def test_the_horizon_of_a_deleted_log_does_not_clean_its_successor(tmp_path):
    clock = ManualClock()
    old = _tombstoned_log(tmp_path, clock, name="old")
    logs = {("t", 0): old}
    driver = Driver(tmp_path, logs, clock)
    assert driver.run_once()
    # The partition is deleted and created again: same name, another log, already clean.
    new = Log.open(tmp_path / "t-0", compact_config(), clock=clock)
    append(new, [(b"a", b"1")], clock.milliseconds())
    new.roll()
    driver.cleaner.manager.update_checkpoints(tmp_path, update=(("t", 0), new.active_segment.base_offset))
    logs[("t", 0)] = new
    clock.advance(10_000)
    assert not driver.run_once()
    driver.close()


def test_an_abort_marker_alone_goes_once_its_horizon_passed(tmp_path):
    clock = ManualClock()
    kafka = KafkaLog(clock.milliseconds())
    kafka.write([(b"a", b"1")])
    marker = kafka.end(7, ABORT)  # no data of its own (a fenced producer's abort): it may go
    kafka.roll()
    kafka.write([(b"b", b"1")])
    log = kafka.open(tmp_path / "t-0", clock, delete_retention_ms=1000)
    driver = Driver(tmp_path, {("t", 0): log}, clock)
    assert driver.run_once()
    assert marker_batch(log, marker).delete_horizon_ms == clock.milliseconds() + 1000
    clock.advance(999)
    assert not driver.run_once()
    clock.advance(1)
    assert driver.run_once()
    assert marker not in markers(log) and not driver.run_once()
    driver.close()


def _expired_tombstones(log, now_ms):
    """Tombstones below the active segment whose delete horizon is at or before ``now_ms``."""
    out = []
    for segment in log.segments_snapshot()[:-1]:
        for batch in iter_batches(segment.log.read(0, segment.size)):
            if batch.header.has_delete_horizon and batch.header.delete_horizon_ms <= now_ms:
                out.extend(r.offset for r in batch.records if r.value is None)
    return out


@given(st.lists(st.tuples(st.lists(st.tuples(st.integers(0, 6), st.booleans()), min_size=1, max_size=5),
                          st.integers(0, 3000)), min_size=1, max_size=5),
       st.sampled_from([0, 1, 1000]), st.sampled_from([300, 2000]))
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_an_idle_cleaner_leaves_no_expired_tombstone(tmp_path_factory, steps, delete_retention_ms, segment_bytes):
    """Whatever was written and whenever, once the cleaner has nothing left to do no tombstone
    below the active segment is past its horizon: expired ones never wait for new writes."""
    tmp = tmp_path_factory.mktemp("h")
    clock = ManualClock()
    log = Log.open(tmp / "t-0", compact_config(delete_retention_ms=delete_retention_ms,
                                               segment_bytes=segment_bytes), clock=clock)
    driver = Driver(tmp, {("t", 0): log}, clock)
    for items, idle_ms in steps:
        append(log, [(b"k%d" % key, b"v" if alive else None) for key, alive in items], clock.milliseconds())
        log.roll()
        driver.run_until_idle()
        assert _expired_tombstones(log, clock.milliseconds()) == []
        clock.advance(idle_ms)  # no writes from here on
        driver.run_until_idle()
        assert _expired_tombstones(log, clock.milliseconds()) == []
    driver.close()
