"""Transactions in the log: open transactions and the last stable offset, COMMIT/ABORT markers
written for the coordinator, the .txnindex of aborted transactions, read_committed reads, and
the same state after a restart, a recovery, a follower's copy and a truncation."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from triolog.broker.storage import filenames
from triolog.broker.storage.log import FetchIsolation, Log
from triolog.broker.storage.producer_state import ProducerStateManager
from triolog.broker.storage.transaction_index import AbortedTxn
from triolog.config.log_config import LogConfig
from triolog.protocol.errors import (
    ErrorCode,
    InvalidProducerEpochError,
    InvalidTxnStateError,
    TransactionCoordinatorFencedError,
)
from triolog.protocol.records import ControlRecordType, Record, encode_batch, iter_batches

TS = 1_700_000_000_000
COMMITTED = FetchIsolation.TXN_COMMITTED


class Producer:
    """A producer id's batches with their sequences, as a client numbers them."""

    def __init__(self, producer_id: int, epoch: int = 0):
        self.producer_id, self.epoch, self.sequence = producer_id, epoch, 0

    def batch(self, count: int = 1, *, transactional: bool = True, tag: str = "") -> bytes:
        records = [Record(i, TS, f"k{i}".encode(), f"{tag}{self.producer_id}-{self.sequence + i}".encode())
                   for i in range(count)]
        data = encode_batch(records, producer_id=self.producer_id, producer_epoch=self.epoch,
                            base_sequence=self.sequence, is_transactional=transactional)
        self.sequence += count
        return data


def open_log(directory: Path, clock, **overrides) -> Log:
    config = LogConfig().with_overrides(overrides) if overrides else LogConfig()
    return Log.open(directory, config, clock=clock)


def txn_index_bytes(log: Log) -> dict[int, bytes]:
    """Every .txnindex of the log directory, by base offset."""
    return {filenames.offset_from_file_name(p.name): p.read_bytes()
            for p in sorted(log.directory.glob("*.txnindex"))}


def committed_values(log: Log, start: int = 0, max_bytes: int = 1 << 20) -> list[bytes]:
    """What a read_committed consumer sees, filtering as Kafka's consumer does: batches of an
    aborted transaction (from its first offset to its ABORT marker) are skipped, markers too."""
    values, offset = [], start
    while True:
        info = log.read(offset, max_bytes, isolation=COMMITTED)
        assert info.aborted_transactions is not None
        if info.region is None:
            return values
        aborted = sorted(info.aborted_transactions, key=lambda t: t.first_offset)
        aborting: set[int] = set()
        for batch in iter_batches(info.region.read_bytes()):
            header = batch.header
            while aborted and aborted[0].first_offset <= header.last_offset:
                aborting.add(aborted.pop(0).producer_id)
            if header.is_control:
                if batch.control_type == ControlRecordType.ABORT:
                    aborting.discard(header.producer_id)
            elif not (header.is_transactional and header.producer_id in aborting):
                values.extend(r.value for r in batch.records if r.offset >= offset)
            offset = header.next_offset


def test_an_open_transaction_holds_the_lso_and_a_commit_releases_it(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock)
    p = Producer(1)
    log.append_as_leader(Producer(9).batch(2, transactional=False))  # 0-1
    log.append_as_leader(p.batch(3))  # 2-4, opens the transaction
    log.append_as_leader(Producer(8).batch(1, transactional=False))  # 5
    assert log.last_stable_offset == 2 and log.high_watermark == 6
    assert log.first_unstable_offset == 2
    assert committed_values(log) == [b"9-0", b"9-1"]
    info = log.append_end_txn_marker(1, 0, coordinator_epoch=0, committed=True, leader_epoch=0)
    assert (info.first_offset, info.last_offset, info.record_count) == (6, 6, 1)
    assert log.last_stable_offset == log.log_end_offset == 7 and log.first_unstable_offset is None
    assert committed_values(log) == [b"9-0", b"9-1", b"1-0", b"1-1", b"1-2", b"8-0"]
    assert txn_index_bytes(log) == {}, "a commit is not indexed: no .txnindex file"
    # The marker is Kafka's control batch: COMMIT, transactional, the producer's id and epoch.
    marker = list(iter_batches(log.read(6, 1000).region.read_bytes()))[0]
    assert marker.header.is_control and marker.header.is_transactional and marker.header.producer_id == 1
    assert marker.control_type == ControlRecordType.COMMIT


def test_an_abort_is_indexed_with_the_lso_of_its_moment_and_read_committed_skips_it(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock)
    a, b = Producer(1), Producer(2)
    log.append_as_leader(a.batch(2, tag="a"))  # 0-1: a's transaction
    log.append_as_leader(b.batch(2, tag="b"))  # 2-3: b's transaction
    log.append_end_txn_marker(2, 0, 0, committed=False, leader_epoch=0)  # 4: b aborted, a still open
    assert log.last_stable_offset == 0
    log.append_as_leader(a.batch(1, tag="a"))  # 5
    log.append_end_txn_marker(1, 0, 0, committed=True, leader_epoch=0)  # 6
    assert log.last_stable_offset == 7
    # b's entry: first offset 2, marker 4, LSO 0 (a's transaction was open from offset 0).
    assert txn_index_bytes(log) == {0: AbortedTxn(2, 2, 4, 0).encode()}
    info = log.read(0, 1 << 20, isolation=COMMITTED)
    assert info.aborted_transactions == [AbortedTxn(2, 2, 4, 0)]
    assert committed_values(log) == [b"a1-0", b"a1-1", b"a1-2"]
    # A read past the aborted transaction is not told about it; other isolations never are.
    assert log.read(5, 1 << 20, isolation=COMMITTED).aborted_transactions == []
    assert log.read(0, 1 << 20).aborted_transactions is None
    # ListOffsets latest for read_committed is the LSO.
    assert log.fetch_offset_by_timestamp(-1, COMMITTED).offset == 7


def test_list_offsets_latest_for_read_committed_is_the_lso(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock)
    log.append_as_leader(Producer(5, 0).batch(1, transactional=False))
    log.append_as_leader(Producer(1).batch(2))
    assert log.fetch_offset_by_timestamp(-1, COMMITTED).offset == 1
    assert log.fetch_offset_by_timestamp(-1).offset == 3
    assert log.fetch_offset_by_timestamp(TS, COMMITTED).offset == 0
    assert log.read(1, 1 << 20, isolation=COMMITTED).region is None


def test_a_non_transactional_batch_inside_a_transaction_is_refused_and_nothing_is_written(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock)
    p = Producer(1)
    log.append_as_leader(p.batch(1))
    with pytest.raises(InvalidTxnStateError) as refused:
        log.append_as_leader(p.batch(1, transactional=False))
    assert refused.value.code == ErrorCode.INVALID_TXN_STATE == 48
    assert log.log_end_offset == 1
    p.sequence -= 1  # the refused batch's sequence is free again
    log.append_as_leader(p.batch(1))
    assert log.log_end_offset == 2


def test_markers_from_an_old_producer_or_coordinator_epoch_are_fenced(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock)
    log.append_as_leader(Producer(1, epoch=3).batch(1))
    log.append_end_txn_marker(1, 3, coordinator_epoch=5, committed=False, leader_epoch=0)
    with pytest.raises(InvalidProducerEpochError):
        log.append_end_txn_marker(1, 2, coordinator_epoch=5, committed=False, leader_epoch=0)
    with pytest.raises(TransactionCoordinatorFencedError) as fenced:
        log.append_end_txn_marker(1, 3, coordinator_epoch=4, committed=True, leader_epoch=0)
    assert fenced.value.code == ErrorCode.TRANSACTION_COORDINATOR_FENCED == 52
    assert log.log_end_offset == 2
    # A marker with no open transaction (a retried WriteTxnMarkers) is written and completes nothing.
    log.append_end_txn_marker(1, 3, coordinator_epoch=5, committed=False, leader_epoch=0)
    assert log.log_end_offset == 3 and len(txn_index_bytes(log)[0]) == 34
    state = {s.producer_id: s for s in log.producer_states()}[1]
    assert (state.producer_epoch, state.coordinator_epoch, state.current_txn_start_offset) == (3, 5, -1)


def test_producer_states_report_the_open_transaction(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock)
    p = Producer(4, epoch=2)
    log.append_as_leader(Producer(3).batch(1, transactional=False))
    log.append_as_leader(p.batch(2))
    states = {s.producer_id: s for s in log.producer_states()}
    assert states[4].current_txn_start_offset == 1 and states[4].last_sequence == 1
    assert states[4].producer_epoch == 2 and states[4].last_timestamp == TS
    assert states[3].current_txn_start_offset == -1
    assert log.ongoing_transactions_older_than(TS + 1) == [(4, 2, 1)]
    assert log.ongoing_transactions_older_than(TS) == []


@pytest.mark.parametrize("clean", [True, False])
def test_an_open_transaction_survives_a_restart_through_the_snapshot(tmp_path, clock, clean):
    directory = tmp_path / "t-0"
    log = open_log(directory, clock)
    a, b = Producer(1), Producer(2)
    log.append_as_leader(a.batch(1))
    log.append_as_leader(b.batch(1))
    log.append_end_txn_marker(2, 0, 0, committed=False, leader_epoch=0)
    log.append_as_leader(b.batch(1))  # b's second transaction, open
    if clean:
        log.close()
        snapshot = ProducerStateManager(directory, 86_400_000)
        snapshot.load_from_snapshot(0, clock.milliseconds())
        assert {pid: e.current_txn_first_offset for pid, e in snapshot.producers.items()} == {1: 0, 2: 3}
    else:
        log.flush()
        for segment in log.segments:
            segment.close_handlers()
    reopened = Log.open(directory, LogConfig(), clock=clock, had_clean_shutdown=clean, recovery_point=0)
    assert reopened.last_stable_offset == 0
    reopened.append_end_txn_marker(1, 0, 0, committed=True, leader_epoch=0)
    assert reopened.last_stable_offset == 3
    reopened.append_end_txn_marker(2, 0, 0, committed=True, leader_epoch=0)
    assert reopened.last_stable_offset == 6 == reopened.log_end_offset
    assert txn_index_bytes(reopened) == {0: AbortedTxn(2, 1, 2, 0).encode()}
    reopened.close()


def _crash(log: Log) -> None:
    log.flush()
    for segment in log.segments:
        segment.close_handlers()


@pytest.mark.parametrize("damage", ["missing", "torn", "garbage"])
def test_recovery_rebuilds_a_missing_or_corrupt_txnindex(tmp_path, clock, damage):
    directory = tmp_path / "t-0"
    log = open_log(directory, clock, **{"segment.bytes": 600})
    producers = [Producer(i) for i in range(3)]
    for round_ in range(12):
        p = producers[round_ % 3]
        log.append_as_leader(p.batch(2))
        if round_ % 3 == 2:
            log.append_end_txn_marker(producers[0].producer_id, 0, 0, committed=False, leader_epoch=0)
            log.append_end_txn_marker(producers[1].producer_id, 0, 0, committed=True, leader_epoch=0)
    expected, lso, end = txn_index_bytes(log), log.last_stable_offset, log.log_end_offset
    assert log.num_segments > 2 and expected
    _crash(log)
    base, data = next(iter(expected.items()))
    path = filenames.txn_index_file(directory, base)
    if damage == "missing":
        path.unlink()
    elif damage == "torn":
        path.write_bytes(data[:-5])
    else:
        path.write_bytes(AbortedTxn(1, 0, base - 1 if base else 0, 0).encode() * 2)
    # The segment is below the recovery point: only a failing check (or a missing index) makes
    # it recovered; "missing" is recovered because recovery covers the whole log here.
    recovery_point = 0 if damage == "missing" else end
    reopened = Log.open(directory, LogConfig().with_overrides({"segment.bytes": 600}), clock=clock,
                        recovery_point=recovery_point)
    assert txn_index_bytes(reopened) == expected
    assert reopened.last_stable_offset == lso and reopened.log_end_offset == end
    reopened.close()


def test_a_follower_copying_the_leaders_bytes_gets_its_txnindex_and_lso(tmp_path, clock):
    leader = open_log(tmp_path / "leader" / "t-0", clock, **{"segment.bytes": 500})
    follower = open_log(tmp_path / "follower" / "t-0", clock, **{"segment.bytes": 500})
    a, b = Producer(1), Producer(2)
    for i in range(10):
        leader.append_as_leader(a.batch(1))
        leader.append_as_leader(b.batch(2))
        leader.append_end_txn_marker(2, 0, 0, committed=i % 2 == 0, leader_epoch=0)
        if i % 3 == 0:
            leader.append_end_txn_marker(1, 0, 0, committed=False, leader_epoch=0)
    open_at = leader.log_end_offset
    leader.append_as_leader(a.batch(1))  # left open
    offset = 0
    while offset < leader.log_end_offset:
        info = leader.read(offset, 300, isolation=FetchIsolation.LOG_END)
        follower.append_as_follower(info.region.read_bytes())
        offset = follower.log_end_offset
    assert txn_index_bytes(follower) == txn_index_bytes(leader) != {}
    assert follower.last_stable_offset == leader.last_stable_offset == open_at
    assert committed_values(follower) == committed_values(leader)


def test_a_replicated_log_holds_the_lso_until_the_marker_is_replicated(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock)
    log.replicated = True
    log.update_high_watermark(0)
    log.append_as_leader(Producer(1).batch(2))  # 0-1
    log.append_end_txn_marker(1, 0, 0, committed=True, leader_epoch=0)  # 2
    assert log.last_stable_offset == 0
    log.maybe_increment_high_watermark(2)
    assert log.last_stable_offset == 0, "the marker at 2 is not below the high watermark yet"
    log.maybe_increment_high_watermark(3)
    assert log.last_stable_offset == 3


def test_truncation_reopens_a_transaction_whose_marker_it_removes_and_trims_the_txnindex(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock)
    a, b = Producer(1), Producer(2)
    log.append_as_leader(a.batch(1))  # 0
    log.append_end_txn_marker(1, 0, 0, committed=False, leader_epoch=0)  # 1
    log.append_as_leader(b.batch(1))  # 2
    log.append_end_txn_marker(2, 0, 0, committed=False, leader_epoch=0)  # 3
    assert len(txn_index_bytes(log)[0]) == 68
    log.truncate_to(3)
    assert txn_index_bytes(log) == {0: AbortedTxn(1, 0, 1, 2).encode()}
    assert log.last_stable_offset == 2, "b's transaction is open again"
    log.append_end_txn_marker(2, 0, 0, committed=True, leader_epoch=0)
    assert log.last_stable_offset == 4 and len(txn_index_bytes(log)[0]) == 34


def test_retention_deletes_the_txnindex_with_its_segment(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock, **{"segment.bytes": 300, "file.delete.delay.ms": 0})
    p = Producer(1)
    log.append_as_leader(p.batch(1))
    log.append_end_txn_marker(1, 0, 0, committed=False, leader_epoch=0)
    log.roll()
    log.append_as_leader(Producer(2).batch(1, transactional=False))
    first = filenames.txn_index_file(log.directory, 0)
    assert first.exists()
    log.maybe_increment_log_start_offset(2)
    assert log.delete_old_segments() == 1
    log.segment_deleter.run_due()
    assert not first.exists() and not first.with_name(first.name + ".deleted").exists()
    assert not list(log.directory.glob("*.txnindex*"))


def test_a_rolled_segment_keeps_its_txnindex_and_the_new_one_has_none(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock)
    log.append_as_leader(Producer(1).batch(1))
    log.append_end_txn_marker(1, 0, 0, committed=False, leader_epoch=0)
    log.roll()
    log.append_as_leader(Producer(2).batch(1))
    log.append_end_txn_marker(2, 0, 0, committed=False, leader_epoch=0)
    assert txn_index_bytes(log) == {0: AbortedTxn(1, 0, 1, 2).encode(), 2: AbortedTxn(2, 2, 3, 4).encode()}
    # A read_committed read from offset 0 gathers the aborted transactions of both segments it spans.
    info = log.read(0, 1 << 20, isolation=COMMITTED)
    assert info.aborted_transactions == [AbortedTxn(1, 0, 1, 2)]
    assert committed_values(log) == []
    log.close()
    assert sorted(os.listdir(log.directory)).count("00000000000000000002.txnindex") == 1


# -- the rules, against a model ---------------------------------------------------------------

operations = st.lists(
    st.tuples(st.sampled_from(["data", "txn", "commit", "abort", "roll"]), st.integers(0, 3), st.integers(1, 3)),
    max_size=40,
)


@settings(deadline=None, max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(operations, st.integers(40, 400))
def test_read_committed_returns_exactly_the_committed_and_plain_records_below_the_lso(
    tmp_path_factory, clock, ops, max_bytes
):
    """A model of Kafka's rules: a producer's records count once its transaction commits and are
    never seen if it aborts; plain records count at once; the LSO is the oldest open
    transaction's first offset. read_committed (with Kafka's consumer-side filtering, from any
    fetch size) sees exactly the decided records below it, in order, after a reopen too."""
    directory = tmp_path_factory.mktemp("txn") / "t-0"
    log = open_log(directory, clock, **{"segment.bytes": 1000})
    producers = [Producer(i) for i in range(4)]
    pending: dict[int, list[tuple[int, bytes]]] = {}
    visible: list[tuple[int, bytes]] = []
    for op, pid, count in ops:
        p = producers[pid]
        if op == "data" and pid not in pending:
            first = log.log_end_offset
            batch = p.batch(count, transactional=False)
            log.append_as_leader(batch)
            visible += [(first + i, f"{pid}-{p.sequence - count + i}".encode()) for i in range(count)]
        elif op == "txn":
            first = log.log_end_offset
            log.append_as_leader(p.batch(count))
            pending.setdefault(pid, []).extend(
                (first + i, f"{pid}-{p.sequence - count + i}".encode()) for i in range(count))
        elif op in ("commit", "abort"):
            records = pending.pop(pid, [])
            log.append_end_txn_marker(pid, 0, 0, committed=op == "commit", leader_epoch=0)
            if op == "commit":
                visible += records
        elif op == "roll":
            log.roll()
    open_firsts = [records[0][0] for records in pending.values() if records]
    lso = min(open_firsts, default=log.log_end_offset)
    expected = [value for offset, value in sorted(visible) if offset < lso]
    assert log.last_stable_offset == lso
    assert committed_values(log, max_bytes=max_bytes) == expected
    log.close()
    reopened = open_log(directory, clock, **{"segment.bytes": 1000})
    assert reopened.last_stable_offset == lso
    assert committed_values(reopened, max_bytes=max_bytes) == expected
    reopened.close()


def test_an_aborted_transaction_spanning_segments_is_listed_for_a_read_of_its_first_segment(tmp_path, clock):
    """Its marker (and .txnindex entry) is segments later; the search goes on through the later
    segments (most without a .txnindex) until an entry's LSO ends it, as Kafka's does."""
    log = open_log(tmp_path / "t-0", clock)
    a, b, plain = Producer(1), Producer(2), Producer(9)
    log.append_as_leader(a.batch(2))  # 0-1: a's long transaction
    log.roll()
    for _ in range(3):
        log.append_as_leader(plain.batch(1, transactional=False))
        log.roll()
    log.append_end_txn_marker(1, 0, 0, committed=False, leader_epoch=0)  # 5, in the fifth segment
    log.append_as_leader(b.batch(1))  # 6
    log.append_end_txn_marker(2, 0, 0, committed=False, leader_epoch=0)  # 7
    assert log.num_segments == 5
    info = log.read(0, 1 << 20, isolation=COMMITTED)
    assert info.aborted_transactions == [AbortedTxn(1, 0, 5, 6)], "only the one overlapping offsets 0-1"
    assert committed_values(log) == [b"9-0", b"9-1", b"9-2"]
    # After a restart the segments' .txnindex presence comes from the directory listing.
    log.close()
    reopened = open_log(tmp_path / "t-0", clock)
    assert reopened.read(0, 1 << 20, isolation=COMMITTED).aborted_transactions == [AbortedTxn(1, 0, 5, 6)]
    assert [s.txn_index.is_loaded for s in reopened.segments][:4] == [True] * 4, \
        "segments listed without a .txnindex are known empty, never read"
    reopened.close()


# -- power losses ---------------------------------------------------------------------------------


def _expected_txn_indexes(log: Log) -> dict[int, list[AbortedTxn]]:
    """What the .txnindex files must say, derived from the batches alone: a producer's transaction
    runs from its first transactional batch to its next marker; an ABORT's entry records the
    oldest other open transaction's first offset (else the marker + 1), in the marker's segment."""
    expected: dict[int, list[AbortedTxn]] = {}
    open_txns: dict[int, int] = {}
    for segment in log.segments:
        for batch in iter_batches(segment.log.read(0, segment.size)):
            header = batch.header
            if header.producer_id < 0:
                continue
            if header.is_control:
                first = open_txns.pop(header.producer_id, None)
                if first is not None and batch.control_type == ControlRecordType.ABORT:
                    lso = min(open_txns.values(), default=header.base_offset + 1)
                    expected.setdefault(segment.base_offset, []).append(
                        AbortedTxn(header.producer_id, first, header.base_offset, lso))
            elif header.is_transactional:
                open_txns.setdefault(header.producer_id, header.base_offset)
    return expected


@pytest.mark.parametrize("seed", range(12))
def test_after_a_power_loss_the_txnindex_says_what_the_surviving_batches_say(seed, clock):
    import random

    from tests.storage.faultfs import FaultFS

    rng = random.Random(seed)
    fs = FaultFS(seed=seed, clock=clock)
    directory = Path("/data/t-0")
    fs.mkdir(Path("/data"))
    config = LogConfig().with_overrides({"segment.bytes": 700})
    log = Log.open(directory, config, clock=clock, fs=fs)
    producers = [Producer(i) for i in range(3)]
    open_ = set()
    recovery_point = 0
    for _ in range(rng.randrange(20, 60)):
        p = rng.choice(producers)
        action = rng.random()
        if action < 0.5:
            log.append_as_leader(p.batch(rng.randrange(1, 4)))
            open_.add(p.producer_id)
        elif p.producer_id in open_:
            log.append_end_txn_marker(p.producer_id, 0, 0, committed=action < 0.75, leader_epoch=0)
            open_.discard(p.producer_id)
        if rng.random() < 0.15:
            log.flush()
            recovery_point = log.recovery_point
    fs.power_loss(rng)
    recovered = Log.open(directory, config, clock=clock, fs=fs, recovery_point=recovery_point)
    got = {s.base_offset: s.txn_index.all_aborted_txns() for s in recovered.segments
           if s.txn_index.all_aborted_txns()}
    assert got == _expected_txn_indexes(recovered)
    # The LSO is the oldest surviving open transaction's first offset.
    still_open = {}
    for segment in recovered.segments:
        for batch in iter_batches(segment.log.read(0, segment.size)):
            h = batch.header
            if h.producer_id >= 0 and h.is_control:
                still_open.pop(h.producer_id, None)
            elif h.producer_id >= 0 and h.is_transactional:
                still_open.setdefault(h.producer_id, h.base_offset)
    assert recovered.last_stable_offset == min(still_open.values(), default=recovered.log_end_offset)


def test_a_marker_on_a_log_append_time_topic_carries_the_brokers_time(tmp_path, clock):
    """Kafka's validator stamps every batch of such a topic, markers included."""
    log = open_log(tmp_path / "t-0", clock, **{"message.timestamp.type": "LogAppendTime"})
    log.append_as_leader(Producer(1).batch(1))
    clock.advance(5000)
    info = log.append_end_txn_marker(1, 0, 0, committed=True, leader_epoch=0, timestamp_ms=TS)
    assert info.log_append_time_ms == clock.milliseconds() == info.max_timestamp
    marker = list(iter_batches(log.read(1, 1000).region.read_bytes()))[0]  # (decoding checks the CRC)
    assert marker.header.max_timestamp == clock.milliseconds()
    assert marker.header.attributes & 0x08, "timestamp type LogAppendTime"
    assert marker.control_type == ControlRecordType.COMMIT


def test_a_coordinators_writes_in_a_producers_name_skip_its_sequences_not_its_epoch(tmp_path, clock):
    """TxnOffsetCommit's offsets: the group coordinator writes each commit as a transactional
    batch of the producer's with sequence 0 (Kafka's append origin COORDINATOR). Each is appended,
    none is taken for a duplicate, an older epoch is fenced, and the marker decides them all."""
    log = open_log(tmp_path / "__consumer_offsets-0", clock)
    first = Producer(7, epoch=3).batch(1)
    second = Producer(7, epoch=3).batch(1, tag="again")  # sequence 0 again
    one = log.append_as_leader(first, from_coordinator=True)
    two = log.append_as_leader(second, from_coordinator=True)
    assert not one.duplicate and not two.duplicate and two.first_offset == one.last_offset + 1
    # A client's batch is still checked: sequence 0 again is a duplicate, answered, not written.
    assert log.append_as_leader(Producer(7, epoch=3).batch(1)).duplicate
    with pytest.raises(InvalidProducerEpochError):
        log.append_as_leader(Producer(7, epoch=2).batch(1), from_coordinator=True)
    assert log.last_stable_offset == 0 and log.log_end_offset == 2
    log.append_end_txn_marker(7, 3, coordinator_epoch=0, committed=True, leader_epoch=0)
    assert log.last_stable_offset == 3
    assert committed_values(log) == [b"7-0", b"again7-0"]


def test_a_delayed_tv2_marker_never_ends_the_producers_next_transaction(tmp_path, clock):
    """Jepsen's hazard at the partition: transaction N (epoch 4) ends with epoch 5 (KIP-890), its
    COMMIT marker written; transaction N+1 writes with epoch 5; a copy of N's marker delayed in
    the network (epoch 5 again) arrives and is refused, so N+1 stays open until its own marker."""
    log = open_log(tmp_path / "t-0", clock)
    log.append_as_leader(Producer(3, epoch=4).batch(1, tag="n"))  # 0: transaction N
    log.append_end_txn_marker(3, 5, 0, committed=True, leader_epoch=0, transaction_version=2)  # 1
    log.append_end_txn_marker(3, 5, 0, committed=True, leader_epoch=0, transaction_version=2)  # 2: a retry, harmless
    log.append_as_leader(Producer(3, epoch=5).batch(1, tag="n+1"))  # 3: transaction N+1
    with pytest.raises(InvalidProducerEpochError, match="earlier transaction"):
        log.append_end_txn_marker(3, 5, 0, committed=False, leader_epoch=0, transaction_version=2)
    assert log.last_stable_offset == 3 and log.log_end_offset == 4
    log.append_end_txn_marker(3, 6, 0, committed=False, leader_epoch=0, transaction_version=2)  # N+1's own
    assert committed_values(log) == [b"n3-0"]
    # Transaction version 0/1 keeps Kafka's classic rule: the same epoch ends the open transaction.
    log.append_as_leader(Producer(8, epoch=2).batch(1))
    log.append_end_txn_marker(8, 2, 0, committed=True, leader_epoch=0)
    assert log.last_stable_offset == log.log_end_offset
