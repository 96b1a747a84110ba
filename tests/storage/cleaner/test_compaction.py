"""Compaction end to end on real files: the cleaner against a reference model (a dict of the
latest record per key), over random workloads with tombstones, several rounds, several groups
and tiny offset maps; plus the specific rules (delete horizon, empty batches, checkpoint,
uncleanable partitions, compact+delete, throttling)."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from triolog.broker.storage.clock import ManualClock
from triolog.broker.storage.cleaner.cleaner import group_segments_by_size, SegmentSource
from triolog.broker.storage.cleaner.throttler import Throttler
from triolog.broker.storage.log import Log
from triolog.protocol.record_batch import CompressionType, read_header
from triolog.protocol.records import Record, encode_batch, iter_batches

from .helpers import Driver, append, check_against_model, compact_config, read_all_records

CODECS = [CompressionType.NONE, CompressionType.NONE, CompressionType.GZIP, CompressionType.LZ4]

batch_strategy = st.tuples(
    st.lists(st.tuples(st.integers(0, 12), st.integers(0, 9)), min_size=1, max_size=6),  # (key, 0 = tombstone)
    st.sampled_from(CODECS),
    st.booleans(),  # headers
)
workload = st.lists(st.tuples(st.lists(batch_strategy, min_size=1, max_size=10), st.integers(0, 4000)),
                    min_size=1, max_size=4)


@given(workload, st.sampled_from([300, 600, 1500]), st.integers(2, 40), st.integers(0, 3000),
       st.sampled_from([24, 10485760]))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_compaction_matches_the_reference_model(tmp_path_factory, rounds, segment_bytes, map_slots,
                                                delete_retention_ms, index_bytes):
    tmp = tmp_path_factory.mktemp("c")
    clock = ManualClock()
    config = compact_config(segment_bytes=segment_bytes, delete_retention_ms=delete_retention_ms,
                            segment_index_bytes=index_bytes, index_interval_bytes=100)
    log = Log.open(tmp / "t-0", config, clock=clock)
    driver = Driver(tmp, {("t", 0): log}, clock, map_slots=map_slots)
    appended: dict[int, Record] = {}
    counter = 0
    checkpoints = []
    for batches, advance_ms in rounds:
        for items, codec, with_headers in batches:
            kv = []
            for key, value in items:
                counter += 1
                kv.append((b"k%d" % key, None if value == 0 else b"v%d" % counter))
            headers = (("h", b"x%d" % counter),) if with_headers else ()
            for record in append(log, kv, clock.milliseconds(), codec, headers):
                appended[record.offset] = record
        log.roll()
        driver.run_until_idle(limit=1000)
        check_against_model(read_all_records(log), appended, now_ms=clock.milliseconds(),
                            delete_retention_ms=delete_retention_ms)
        checkpoints.append(driver.checkpoint().get(("t", 0), 0))
        clock.advance(advance_ms)
    driver.close()
    assert checkpoints == sorted(checkpoints)
    assert checkpoints[-1] == log.active_segment.base_offset
    # Fully cleaned: below the first dirty offset each key appears at most once.
    keys = [r.key for r in read_all_records(log) if r.offset < checkpoints[-1]]
    assert len(keys) == len(set(keys))
    # And the files reopen (after a crash, too) to the same records.
    got = read_all_records(log)
    log.close()
    reopened = Log.open(tmp / "t-0", config, clock=clock)
    assert read_all_records(reopened) == got
    reopened.close()
    assert not list((tmp / "t-0").glob("*.cleaned")) and not list((tmp / "t-0").glob("*.swap"))


def _batches(log: Log):
    out = []
    for segment in log.segments:
        data = segment.log.read(0, segment.size)
        out.extend(iter_batches(data))
    return out


def test_tombstones_get_a_delete_horizon_and_go_after_it(tmp_path):
    clock = ManualClock()
    log = Log.open(tmp_path / "t-0", compact_config(delete_retention_ms=10_000), clock=clock)
    driver = Driver(tmp_path, {("t", 0): log}, clock)
    append(log, [(b"a", b"1"), (b"b", b"1")], clock.milliseconds())
    append(log, [(b"a", None)], clock.milliseconds())  # tombstone for a
    log.roll()
    cleaned_at = clock.milliseconds()
    assert driver.run_once()
    records = read_all_records(log)
    assert [(r.key, r.value) for r in records] == [(b"b", b"1"), (b"a", None)]
    tombstone_batch = next(b for b in _batches(log) if any(r.value is None for r in b.records))
    assert tombstone_batch.header.has_delete_horizon
    assert tombstone_batch.header.delete_horizon_ms == cleaned_at + 10_000
    assert tombstone_batch.records[0].timestamp == records[1].timestamp  # deltas re-based on the horizon

    # Before the horizon a new round keeps it; after it, the next round removes it.
    clock.advance(9_999)
    append(log, [(b"c", b"1")], clock.milliseconds())
    log.roll()
    assert driver.run_once()
    assert (b"a", None) in [(r.key, r.value) for r in read_all_records(log)]
    clock.advance(1)
    append(log, [(b"d", b"1")], clock.milliseconds())
    log.roll()
    assert driver.run_once()
    assert [(r.key, r.value) for r in read_all_records(log)] == [(b"b", b"1"), (b"c", b"1"), (b"d", b"1")]
    driver.close()


def test_untouched_batches_are_copied_byte_for_byte(tmp_path):
    clock = ManualClock()
    log = Log.open(tmp_path / "t-0", compact_config(), clock=clock)
    driver = Driver(tmp_path, {("t", 0): log}, clock)
    append(log, [(b"a", b"1"), (b"b", b"1")], clock.milliseconds(), headers=(("trace", b"t1"),))
    append(log, [(b"c", b"1"), (b"a", b"2")], clock.milliseconds() + 5)
    log.roll()
    before = [bytes(log.segments.first_segment().log.read(0, log.segments.first_segment().size))]
    first_batch_bytes = before[0][:read_header(before[0]).size]
    assert driver.run_once()
    after = log.segments.first_segment().log.read(0, log.segments.first_segment().size)
    batches = list(iter_batches(after))
    # The first batch lost "a": rebuilt with its offsets span and header fields kept.
    assert batches[0].header.base_offset == 0 and batches[0].header.last_offset_delta == 1
    assert [(r.offset, r.key, r.headers) for r in batches[0].records] == [(1, b"b", (("trace", b"t1"),))]
    assert after[read_header(after).size:] == before[0][len(first_batch_bytes):]  # second batch: same bytes
    driver.close()


def test_empty_batches_are_kept_only_when_kafka_keeps_them(tmp_path):
    """A batch whose records all go is dropped, unless it is its idempotent producer's last
    batch (its sequence must survive) or ends right below the first uncleanable offset."""
    clock = ManualClock()
    log = Log.open(tmp_path / "t-0", compact_config(), clock=clock)
    driver = Driver(tmp_path, {("t", 0): log}, clock)
    ts = clock.milliseconds()

    def produce(key, producer_id=-1, sequence=-1):
        batch = encode_batch([Record(0, ts, key, b"x")], producer_id=producer_id, producer_epoch=0 if producer_id >= 0 else -1,
                             base_sequence=sequence)
        return log.append_as_leader(batch).first_offset

    produce(b"a", producer_id=7, sequence=0)       # 0: producer 7's last batch -> kept empty
    produce(b"a")                                  # 1: plain, superseded -> dropped
    produce(b"b", producer_id=8, sequence=0)       # 2: superseded by 8's later batch -> dropped
    produce(b"b", producer_id=8, sequence=1)       # 3: latest b, kept with its record
    produce(b"c")                                  # 4: superseded -> dropped
    produce(b"a")                                  # 5
    produce(b"c")                                  # 6: latest c, last before the active segment
    log.roll()
    assert driver.run_once()
    headers = [b.header for b in _batches(log)]
    assert [(h.base_offset, h.records_count, h.producer_id) for h in headers] == [
        (0, 0, 7), (3, 1, 8), (5, 1, -1), (6, 1, -1)]
    empty = headers[0]
    assert empty.base_timestamp == -1 and empty.max_timestamp == ts and empty.base_sequence == 0
    driver.close()


def test_checkpoint_moves_after_each_clean_and_a_full_map_continues_next_round(tmp_path):
    clock = ManualClock()
    log = Log.open(tmp_path / "t-0", compact_config(segment_bytes=400), clock=clock)
    driver = Driver(tmp_path, {("t", 0): log}, clock, map_slots=4)  # 3 keys per round
    appended = {}
    for i in range(40):
        for r in append(log, [(b"k%d" % (i % 9), b"v%d" % i)], clock.milliseconds()):
            appended[r.offset] = r
    log.roll()
    seen, utilization = [], []
    while driver.run_once():
        seen.append(driver.checkpoint()[("t", 0)])
        utilization.append(driver.cleaner.metrics().max_buffer_utilization)
        check_against_model(read_all_records(log), appended)
    assert len(seen) > 2 and seen == sorted(seen) and seen[-1] == 40
    assert sorted(r.key for r in read_all_records(log)) == sorted(b"k%d" % i for i in range(9))
    metrics = driver.cleaner.metrics()
    assert metrics.runs == len(seen) and metrics.errors == 0
    assert utilization[0] == pytest.approx(3 / 4)  # the map stopped at load factor x slots
    driver.close()


@pytest.mark.parametrize("position, corruption", [
    (57, (5).to_bytes(4, "big")),  # the record count claims more records than the batch's bytes hold
    (61, b"\x7f"),  # the first record's length is negative (-64)
    (65, b"\x7e"),  # its key length (63) runs past the record
])
def test_a_failing_partition_is_marked_uncleanable_and_the_others_still_get_cleaned(tmp_path, position, corruption):
    clock = ManualClock()
    bad = Log.open(tmp_path / "bad-0", compact_config(), clock=clock)
    good = Log.open(tmp_path / "good-0", compact_config(), clock=clock)
    for log in (bad, good):
        for i in range(20):
            append(log, [(b"k%d" % (i % 3), b"v" * 50)], clock.milliseconds())
        log.roll()
    # Corrupt a batch of the bad log (the cleaner does not re-check CRCs, like Kafka's).
    path = bad.segments.first_segment().log.path
    with open(path, "r+b") as f:
        f.seek(position)
        f.write(corruption)
    bytes_before = bad.size
    driver = Driver(tmp_path, {("bad", 0): bad, ("good", 0): good}, clock)
    assert driver.run_once()  # the filthiest first (both equally dirty): one of them
    assert driver.run_once()
    assert not driver.run_once()
    metrics = driver.cleaner.metrics()
    assert metrics.uncleanable_partitions == 1 and metrics.errors == 1
    assert metrics.uncleanable_bytes == bytes_before
    assert driver.cleaner.manager.is_uncleanable(("bad", 0))
    assert [r.key for r in read_all_records(good)] == [b"k2", b"k0", b"k1"]
    assert bad.size == bytes_before and not list((tmp_path / "bad-0").glob("*.cleaned"))
    driver.close()


def test_compact_delete_logs_get_retention_from_the_cleaner(tmp_path):
    clock = ManualClock()
    config = compact_config(cleanup_policy="compact,delete", retention_ms=60_000, segment_bytes=300)
    log = Log.open(tmp_path / "t-0", config, clock=clock)
    for i in range(12):
        append(log, [(b"k%d" % i, b"v" * 40)], clock.milliseconds())
    log.roll()
    driver = Driver(tmp_path, {("t", 0): log}, clock)
    assert driver.run_once()
    assert log.log_start_offset == 0
    clock.advance(60_001)
    append(log, [(b"new", b"v")], clock.milliseconds())
    driver.run_once()  # nothing much to clean, but retention runs in the cleaner's iteration
    assert log.log_start_offset == 12
    assert [r.key for r in read_all_records(log, log.log_start_offset)] == [b"new"]
    assert log.deleted_segment_counts["retention_ms"] >= 1
    driver.close()


def test_compact_only_logs_keep_old_segments(tmp_path):
    clock = ManualClock()
    log = Log.open(tmp_path / "t-0", compact_config(retention_ms=1000, segment_bytes=300), clock=clock)
    for i in range(8):
        append(log, [(b"k%d" % i, b"v" * 40)], clock.milliseconds())
    log.roll()
    clock.advance(10_000)
    driver = Driver(tmp_path, {("t", 0): log}, clock)
    driver.run_until_idle()
    assert log.log_start_offset == 0 and len(read_all_records(log)) == 8
    driver.close()


def test_groups_respect_size_index_size_and_relative_offsets():
    def seg(base, size, index=80, time_index=120):
        return SegmentSource(base, f"/x/{base}", size, index, time_index, 0)

    segments = [seg(0, 400), seg(100, 400), seg(200, 300), seg(300, 100), seg(400, 0)]
    grouped = group_segments_by_size(segments, 1000, 10_000, 500)
    assert [[s.base_offset for s in g] for g in grouped] == [[0, 100], [200, 300, 400]]
    grouped = group_segments_by_size(segments, 10_000, 200, 500)  # time indexes: 120 each
    assert [[s.base_offset for s in g] for g in grouped] == [[0], [100], [200], [300], [400]]
    far = [seg(0, 10), seg(2**31 - 10, 10), seg(2**31 + 5, 10)]
    grouped = group_segments_by_size(far, 10_000, 10_000, 2**31 + 50)
    assert [[s.base_offset for s in g] for g in grouped] == [[0], [2**31 - 10, 2**31 + 5]]


def test_throttler_sleeps_to_the_desired_rate():
    now = [0]
    slept = []
    throttler = Throttler(1_000_000, monotonic_ns=lambda: now[0], sleep=slept.append)
    throttler.maybe_throttle(500_000)  # within the first check interval: no decision yet
    assert slept == []
    now[0] = 400_000_000  # 0.4 s later, 1.5 MB observed: should have taken 1.5 s
    throttler.maybe_throttle(1_000_000)
    assert slept == [pytest.approx(1.1)]
    unlimited = Throttler(float("inf"), monotonic_ns=lambda: now[0], sleep=slept.append)
    now[0] += 10**9
    unlimited.maybe_throttle(10**12)
    assert len(slept) == 1


def test_cleaning_with_a_throttle_sleeps(tmp_path):
    import time

    clock = ManualClock()
    log = Log.open(tmp_path / "t-0", compact_config(), clock=clock)
    value = os.urandom(1000)
    for i in range(300):
        append(log, [(b"k%d-%d" % (i % 5, j), value) for j in range(10)], clock.milliseconds())
    log.roll()
    size = log.size  # ~3 MB
    # Far below what the cleaner manages even on a loaded CI core (~10 MB/s), checked every
    # millisecond: the first check after a read already finds the rate too high, whatever the
    # machine's speed (with a longer interval a fast clean could finish before the first check).
    rate = 2_500_000.0
    driver = Driver(tmp_path, {("t", 0): log}, clock, max_io_bytes_per_second=rate, throttle_check_interval_ms=1)
    started = time.monotonic()
    assert driver.run_once()
    elapsed = time.monotonic() - started
    stats = driver.cleaner.metrics()
    assert driver.cleaner.throttler.slept_s > 0
    assert elapsed >= 0.8 * (size + stats.bytes_written) / rate
    driver.close()


def test_a_read_planned_before_the_swap_still_returns_the_old_bytes(tmp_path):
    """A fetch that planned its region from a segment that the cleaner then replaces keeps
    reading it: the old files are only renamed .deleted, removed after file.delete.delay.ms."""
    clock = ManualClock()
    log = Log.open(tmp_path / "t-0", compact_config(file_delete_delay_ms=60_000), clock=clock)
    for i in range(30):
        append(log, [(b"k%d" % (i % 3), b"v%d" % i)], clock.milliseconds())
    log.roll()
    planned = log.read(0, 1 << 20)
    expected = planned.region.read_bytes()
    driver = Driver(tmp_path, {("t", 0): log}, clock)
    assert driver.run_once()
    assert len(read_all_records(log)) == 3
    assert planned.region.read_bytes() == expected  # the replaced segment, now .deleted
    assert list((tmp_path / "t-0").glob("*.log.deleted"))
    clock.advance(60_000)
    assert log.segment_deleter.run_due() == 1
    assert not list((tmp_path / "t-0").glob("*.deleted"))
    driver.close()
