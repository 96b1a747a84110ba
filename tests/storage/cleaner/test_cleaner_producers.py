"""The cleaner and producer ids: the last batch of an active producer is kept (emptied if its
records are superseded), an expired producer's is not (Kafka's lastRecordsOfActiveProducers),
and dedupe keeps working after a clean."""

from __future__ import annotations

from triolog.broker.storage.clock import ManualClock
from triolog.broker.storage.cleaner.log_cleaner import plan_job
from triolog.broker.storage.log import Log
from triolog.protocol.records import Record, encode_batch, iter_batches

from .helpers import Driver, compact_config

EXPIRATION_MS = 60_000


def headers(log: Log):
    out = []
    for segment in log.segments:
        out.extend(b.header for b in iter_batches(segment.log.read(0, segment.size)))
    return [(h.base_offset, h.records_count, h.producer_id) for h in out]


def build(tmp_path, clock):
    """Producer 7 writes key a once; producer 8 writes key b once; plain batches supersede both."""
    log = Log.open(tmp_path / "t-0", compact_config(), clock=clock, producer_id_expiration_ms=EXPIRATION_MS)

    def produce(key, producer_id=-1, sequence=-1):
        batch = encode_batch([Record(0, clock.milliseconds(), key, b"x")], producer_id=producer_id,
                             producer_epoch=0 if producer_id >= 0 else -1, base_sequence=sequence)
        return log.append_as_leader(batch)

    produce(b"a", producer_id=7, sequence=0)  # 0
    clock.advance(EXPIRATION_MS // 2)
    produce(b"b", producer_id=8, sequence=0)  # 1
    produce(b"a")                             # 2: supersedes 0
    produce(b"b")                             # 3: supersedes 1
    produce(b"z")                             # 4
    produce(b"z")                             # 5: last before the active segment
    log.roll()
    return log, produce


def test_the_job_carries_the_active_producers_from_the_log(tmp_path):
    clock = ManualClock()
    log, _ = build(tmp_path, clock)
    job = plan_job(log, type("LTC", (), {"first_dirty_offset": 0, "first_uncleanable_offset": 6})(), 0, 1 << 16)
    assert sorted(job.active_producers) == [(7, 0, 0), (8, 1, 0)]


def test_an_active_producers_last_batch_is_kept_empty_and_an_expired_ones_goes(tmp_path):
    clock = ManualClock()
    log, produce = build(tmp_path, clock)
    clock.advance(EXPIRATION_MS // 2)  # producer 7's batch is now expiration.ms old, 8's is not
    assert log.remove_expired_producers(clock.milliseconds()) == 1
    driver = Driver(tmp_path, {("t", 0): log}, clock)
    assert driver.run_once()
    assert headers(log)[:3] == [(1, 0, 8), (2, 1, -1), (3, 1, -1)]  # 7's empty batch dropped, 8's kept
    # Producer 8 still dedupes against its kept batch header.
    retry = encode_batch([Record(0, clock.milliseconds(), b"b", b"x")], producer_id=8, producer_epoch=0,
                         base_sequence=0)
    assert log.append_as_leader(retry).duplicate
    driver.close()
    log.close()


def test_without_expiry_both_producers_keep_their_last_batch(tmp_path):
    clock = ManualClock()
    log, _ = build(tmp_path, clock)
    driver = Driver(tmp_path, {("t", 0): log}, clock)
    assert driver.run_once()
    assert headers(log)[:4] == [(0, 0, 7), (1, 0, 8), (2, 1, -1), (3, 1, -1)]
    driver.close()
    log.close()


def test_an_expired_producers_batch_is_no_longer_pinned_after_a_restart(tmp_path):
    """Expired at load (the snapshot's entry is too old): the state, not the log's headers, decides."""
    clock = ManualClock()
    log, _ = build(tmp_path, clock)
    log.close()
    clock.advance(EXPIRATION_MS)  # both are past the expiration now
    log = Log.open(tmp_path / "t-0", compact_config(), clock=clock, had_clean_shutdown=True,
                   producer_id_expiration_ms=EXPIRATION_MS)
    assert log.last_records_of_active_producers() == ()
    driver = Driver(tmp_path, {("t", 0): log}, clock)
    assert driver.run_once()
    assert [h for h in headers(log) if h[2] >= 0] == []
    driver.close()
    log.close()


def test_a_cleaned_group_keeps_its_base_snapshot_drops_the_merged_ones_and_dedupe_survives_a_restart(tmp_path):
    clock = ManualClock()
    log = Log.open(tmp_path / "t-0", compact_config(), clock=clock)

    def produce(key, sequence):
        batch = encode_batch([Record(0, clock.milliseconds(), key, b"x%d" % sequence)], producer_id=5,
                             producer_epoch=0, base_sequence=sequence)
        return log.append_as_leader(batch)

    for sequence in range(4):  # one batch per segment: snapshots at 1, 2, 3, 4
        produce(b"k", sequence)
        log.roll()
    assert sorted(p.name for p in log.directory.glob("*.snapshot")) == [
        "0000000000000000000%d.snapshot" % o for o in (1, 2, 3, 4)]
    driver = Driver(tmp_path, {("t", 0): log}, clock)
    assert driver.run_once()
    assert [s.base_offset for s in log.segments] == [0, 4]  # segments 0-3 cleaned into one
    assert sorted(p.name for p in log.directory.glob("*.snapshot*")) == [  # merged-away bases lose theirs
        "00000000000000000001.snapshot.deleted", "00000000000000000002.snapshot.deleted",
        "00000000000000000003.snapshot.deleted", "00000000000000000004.snapshot"]
    driver.close()
    log.close()
    reopened = Log.open(tmp_path / "t-0", compact_config(), clock=clock, had_clean_shutdown=True)
    retry = encode_batch([Record(0, clock.milliseconds(), b"k", b"x3")], producer_id=5, producer_epoch=0,
                         base_sequence=3)
    info = reopened.append_as_leader(retry)
    assert info.duplicate and info.first_offset == 3
    reopened.close()
