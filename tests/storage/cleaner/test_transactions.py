"""Compaction of logs holding transactions (as a Kafka broker writes them: batches with producer
ids and the transactional bit, COMMIT/ABORT control batches), over several segments cleaned in
one round: aborted data goes and never hides committed values, a marker stays while any batch of
its transaction is in the log and goes delete.retention.ms after the round that found it alone.

Clients cannot write control batches (the broker refuses them), so the logs are written as
segment files, the way a Kafka broker left them, and opened (recovered) by Log.open."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from triolog.broker.storage.clock import ManualClock
from triolog.broker.storage.log import Log
from triolog.protocol.record_batch import CompressionType
from triolog.protocol.records import ControlRecordType, Record, encode_batch, encode_end_txn_marker, iter_batches

from .helpers import Driver, append, compact_config

COMMIT, ABORT = ControlRecordType.COMMIT, ControlRecordType.ABORT


@dataclass
class KafkaLog:
    """Segments of batches at absolute offsets, written as files; remembers every record and
    which transaction (producer id, index) it belongs to."""

    timestamp: int
    segments: list[list[bytes]] = field(default_factory=lambda: [[]])
    next_offset: int = 0
    records: dict[int, Record] = field(default_factory=dict)
    #: offset of each transactional record -> (producer id, transaction number of that producer)
    txn_of: dict[int, tuple[int, int]] = field(default_factory=dict)
    #: (producer id, transaction number) -> ("commit" | "abort", marker offset); open ones absent
    outcome: dict[tuple[int, int], tuple[str, int]] = field(default_factory=dict)
    _txn_number: dict[int, int] = field(default_factory=dict)
    _open: set[int] = field(default_factory=set)
    _sequence: dict[int, int] = field(default_factory=dict)

    def write(self, items, producer_id: int = -1, transactional: bool = False,
              compression: CompressionType = CompressionType.NONE) -> list[int]:
        base = self.next_offset
        records = [Record(base + i, self.timestamp, key, value) for i, (key, value) in enumerate(items)]
        sequence = -1
        if producer_id >= 0:
            sequence = self._sequence.get(producer_id, 0)
            self._sequence[producer_id] = sequence + len(records)
        self.segments[-1].append(encode_batch(
            records, base_offset=base, producer_id=producer_id, producer_epoch=0 if producer_id >= 0 else -1,
            base_sequence=sequence, is_transactional=transactional, compression=compression))
        self.next_offset += len(records)
        for record in records:
            self.records[record.offset] = record
            if transactional:
                if producer_id not in self._open:
                    self._open.add(producer_id)
                    self._txn_number[producer_id] = self._txn_number.get(producer_id, -1) + 1
                self.txn_of[record.offset] = (producer_id, self._txn_number[producer_id])
        return [r.offset for r in records]

    def end(self, producer_id: int, marker: ControlRecordType) -> int:
        offset = self.next_offset
        self.segments[-1].append(encode_end_txn_marker(producer_id, 0, marker, 0, offset, self.timestamp))
        self.next_offset += 1
        if producer_id in self._open:
            self._open.discard(producer_id)
            key = (producer_id, self._txn_number[producer_id])
            self.outcome[key] = ("commit" if marker == COMMIT else "abort", offset)
        return offset

    @property
    def open_transactions(self) -> set[int]:
        return set(self._open)

    def roll(self) -> None:
        if self.segments[-1]:
            self.segments.append([])

    def open(self, directory: Path, clock, **config) -> Log:
        directory.mkdir(parents=True)
        for batches in self.segments:
            if batches:
                base = next(iter_batches(batches[0])).base_offset
                (directory / f"{base:020d}.log").write_bytes(b"".join(batches))
        return Log.open(directory, compact_config(**config), clock=clock)  # no clean-shutdown marker: recovered

    def aborted(self, offset: int) -> bool:
        txn = self.txn_of.get(offset)
        return txn is not None and self.outcome.get(txn, ("open",))[0] == "abort"


def batches(log: Log) -> list:
    out = []
    for segment in log.segments:
        out.extend(iter_batches(segment.log.read(0, segment.size)))
    return out


def markers(log: Log) -> dict[int, tuple[int, ControlRecordType]]:
    """offset -> (producer id, type) of every non-empty control batch."""
    return {b.base_offset: (b.producer_id, b.control_type) for b in batches(log) if b.is_control and b.records}


def marker_batch(log: Log, offset: int):
    return next(b for b in batches(log) if b.base_offset == offset)


def data_records(log: Log) -> dict[int, Record]:
    return {r.offset: r for b in batches(log) if not b.is_control for r in b.records}


def read_committed(log: Log) -> list[Record]:
    """What a read_committed consumer sees, knowing only the log: a producer's transaction runs
    from its first transactional batch after its previous marker to its next marker; the data
    of those ending in ABORT is skipped, as are the control batches."""
    all_batches = batches(log)
    aborted_offsets: set[int] = set()
    open_txn: dict[int, list[int]] = {}
    for batch in all_batches:
        if batch.is_control:
            offsets = open_txn.pop(batch.producer_id, [])
            if batch.control_type == ABORT:
                aborted_offsets.update(offsets)
        elif batch.is_transactional:
            open_txn.setdefault(batch.producer_id, []).extend(r.offset for r in batch.records)
    return [r for b in all_batches if not b.is_control for r in b.records if r.offset not in aborted_offsets]


def _roll_with(log: Log, clock, key: bytes = b"filler") -> None:
    """New dirty bytes, so the cleaner has a reason to run another round."""
    append(log, [(key, b"x")], clock.milliseconds())
    log.roll()


def test_a_commit_marker_stays_while_its_transaction_has_data_in_other_segments(tmp_path):
    clock = ManualClock()
    kafka = KafkaLog(clock.milliseconds())
    txn = kafka.write([(b"a", b"txn-a"), (b"b", b"txn-b")], producer_id=7, transactional=True)  # segment 0
    kafka.roll()
    kafka.write([(b"c", b"plain")])  # segment 1: another producer
    kafka.roll()
    commit = kafka.end(7, COMMIT)  # segment 2: the marker, away from its data
    kafka.roll()
    kafka.write([(b"d", b"plain")])
    # The producer's later transaction: the first one's batch is not its last batch (which Kafka
    # keeps, emptied, for as long as the producer is active, and its marker with it).
    kafka.write([(b"e", b"txn-e")], producer_id=7, transactional=True)
    kafka.end(7, COMMIT)
    kafka.roll()
    kafka.write([(b"f", b"plain")])
    # One segment per group (segment.bytes below two segments' size), so the marker's group
    # knows of the data only through the round's state.
    log = kafka.open(tmp_path / "t-0", clock, segment_bytes=120, delete_retention_ms=1000)
    assert len(log.segments) == 5
    driver = Driver(tmp_path, {("t", 0): log}, clock)
    for _ in range(3):  # rounds well past the delete horizon: the data is still there, so is the marker
        assert driver.run_once()
        assert commit in markers(log)
        assert [data_records(log)[o].value for o in txn] == [b"txn-a", b"txn-b"]
        clock.advance(5000)
        _roll_with(log, clock)
    # Once the transaction's data is superseded, the marker gets a horizon and then goes.
    append(log, [(b"a", b"new-a"), (b"b", b"new-b")], clock.milliseconds())
    log.roll()
    assert driver.run_once()  # the batch goes; the marker met it in this round, so it stays as it was
    assert txn[0] not in data_records(log) and marker_batch(log, commit).delete_horizon_ms is None
    _roll_with(log, clock)
    assert driver.run_once()  # alone now: stamped with a horizon, still there
    assert marker_batch(log, commit).delete_horizon_ms == clock.milliseconds() + 1000
    clock.advance(999)
    _roll_with(log, clock)
    assert driver.run_once() and commit in markers(log)
    clock.advance(1)
    _roll_with(log, clock)
    assert driver.run_once() and commit not in markers(log)
    driver.close()


def test_aborted_data_is_removed_and_never_hides_the_committed_value(tmp_path):
    clock = ManualClock()
    kafka = KafkaLog(clock.milliseconds())
    committed = kafka.write([(b"k", b"committed"), (b"j", b"committed-j")], producer_id=1, transactional=True)
    commit = kafka.end(1, COMMIT)
    kafka.roll()
    first = kafka.write([(b"k", b"aborted-1")], producer_id=2, transactional=True)  # spans three segments
    kafka.write([(b"other", b"plain")])
    kafka.roll()
    second = kafka.write([(b"j", b"aborted-2"), (b"k", b"aborted-3")], producer_id=2, transactional=True)
    kafka.roll()
    abort = kafka.end(2, ABORT)
    kafka.roll()
    kafka.write([(b"z", b"later")], producer_id=2, transactional=True)  # producer 2's last batch
    later_commit = kafka.end(2, COMMIT)
    kafka.roll()
    kafka.write([(b"tail", b"plain")])
    log = kafka.open(tmp_path / "t-0", clock, segment_bytes=150, delete_retention_ms=0)
    driver = Driver(tmp_path, {("t", 0): log}, clock)
    assert driver.run_once()
    got = data_records(log)
    assert [got[o].value for o in committed] == [b"committed", b"committed-j"]
    assert not set(first + second) & set(got)  # every aborted batch is gone
    # The ABORT met its batches in this round: it stays as it was.
    assert markers(log) == {commit: (1, COMMIT), abort: (2, ABORT), later_commit: (2, COMMIT)}
    assert marker_batch(log, abort).delete_horizon_ms is None
    _roll_with(log, clock)
    assert driver.run_once()  # nothing of producer 2's transaction left: horizon now (retention 0)...
    assert marker_batch(log, abort).delete_horizon_ms == clock.milliseconds()
    _roll_with(log, clock, b"filler2")
    assert driver.run_once()
    # ...and gone in the next round; the COMMITs still have their data.
    assert markers(log) == {commit: (1, COMMIT), later_commit: (2, COMMIT)}
    assert {r.key: r.value for r in read_committed(log)}[b"k"] == b"committed"
    driver.close()


def test_aborted_data_goes_even_when_its_marker_is_beyond_the_cleanable_range(tmp_path):
    """The ABORT marker sits in the active segment (never cleaned): the round still knows the
    transaction was aborted, as Kafka does from its transaction index."""
    clock = ManualClock()
    kafka = KafkaLog(clock.milliseconds())
    kafka.write([(b"k", b"committed")])
    kafka.roll()
    aborted = kafka.write([(b"k", b"aborted")], producer_id=3, transactional=True)
    kafka.roll()
    abort = kafka.end(3, ABORT)  # the last segment: the active one
    log = kafka.open(tmp_path / "t-0", clock, segment_bytes=100)
    assert log.active_segment.base_offset == abort
    driver = Driver(tmp_path, {("t", 0): log}, clock)
    assert driver.run_once()
    assert aborted[0] not in data_records(log)
    assert data_records(log)[0].value == b"committed"
    assert abort in markers(log)
    driver.close()


def test_a_transaction_without_a_marker_holds_compaction_at_its_first_offset(tmp_path):
    """An open transaction's outcome decides which value of its keys survives, so the cleanable
    range ends at the last stable offset (Kafka's rule): the older value stays, and is the one
    kept once the transaction aborts."""
    clock = ManualClock()
    kafka = KafkaLog(clock.milliseconds())
    old = kafka.write([(b"k", b"old")])
    kafka.roll()
    open_txn = kafka.write([(b"k", b"new")], producer_id=4, transactional=True)
    kafka.roll()
    kafka.write([(b"x", b"plain")])
    log = kafka.open(tmp_path / "t-0", clock, segment_bytes=100)
    assert log.last_stable_offset == open_txn[0]
    driver = Driver(tmp_path, {("t", 0): log}, clock)
    driver.run_until_idle()
    assert sorted(data_records(log)) == [old[0], open_txn[0], open_txn[0] + 1]
    log.append_end_txn_marker(4, 0, 0, committed=False, leader_epoch=0)
    log.roll()
    _roll_with(log, clock, b"y")
    driver.run_until_idle()
    assert data_records(log)[old[0]].value == b"old" and open_txn[0] not in data_records(log)
    assert [r.value for r in read_committed(log) if r.key == b"k"] == [b"old"]
    driver.close()


# -- the property ------------------------------------------------------------------------------

KEYS = [b"k%d" % i for i in range(4)]
PRODUCERS = [11, 12, 13]
_items = st.lists(st.tuples(st.sampled_from(KEYS), st.sampled_from([True, True, True, False])),  # (key, live)
                  min_size=1, max_size=3)
_plain = st.tuples(st.just("plain"), _items)
_txn = st.tuples(st.just("txn"), st.sampled_from(PRODUCERS), _items)
# Ends one of the open transactions (the index picks which), else writes a stray marker.
_end = st.tuples(st.just("end"), st.integers(0, 2), st.sampled_from([COMMIT, ABORT, ABORT]))
operation = st.one_of(_plain, _txn, _txn, _end, _end, st.tuples(st.just("roll")))


@given(ops=st.lists(operation, min_size=1, max_size=40),
       codec=st.sampled_from([CompressionType.NONE, CompressionType.GZIP]),
       segment_bytes=st.sampled_from([200, 500, 100_000]),
       map_slots=st.sampled_from([3, 8, 1000]),
       delete_retention_ms=st.sampled_from([0, 500, 10**9]),
       later=st.lists(st.tuples(st.integers(0, 800), st.sampled_from(KEYS), st.booleans()), max_size=4))
# Two shapes always tried: an aborted write after a key's committed one (its marker in another
# segment), and a committed transaction whose marker is groups away from its data.
@example(ops=[("plain", [(b"k0", True)]), ("roll",), ("txn", 11, [(b"k0", True)]), ("roll",), ("end", 0, ABORT)],
         codec=CompressionType.NONE, segment_bytes=200, map_slots=1000, delete_retention_ms=0, later=[])
@example(ops=[("txn", 11, [(b"k0", True)]), ("roll",), ("plain", [(b"k1", True)]), ("roll",), ("end", 0, COMMIT),
              ("roll",), ("txn", 11, [(b"k2", True)]), ("end", 0, COMMIT)],
         codec=CompressionType.NONE, segment_bytes=200, map_slots=1000, delete_retention_ms=0,
         later=[(1, b"k3", True), (1, b"k3", True)])
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                    HealthCheck.too_slow])
def test_cleaning_transactional_logs_keeps_what_read_committed_consumers_see(
        tmp_path_factory, ops, codec, segment_bytes, map_slots, delete_retention_ms, later):
    """Random interleavings of plain writes, tombstones and transactions (committed, aborted,
    left open) over several segments, cleaned in several rounds: records keep their offsets and
    bytes, a read_committed consumer never sees aborted data, the newest committed value of every
    key stays the one it sees, and a transaction's data is never left without its marker."""
    tmp = tmp_path_factory.mktemp("txn")
    clock = ManualClock()
    kafka = KafkaLog(clock.milliseconds())
    counter = 0
    for op in ops:
        if op[0] in ("plain", "txn"):
            items = []
            for key, live in op[-1]:
                counter += 1
                items.append((key, b"v%d" % counter if live else None))
            if op[0] == "plain":
                kafka.write(items, compression=codec)
            else:
                kafka.write(items, producer_id=op[1], transactional=True, compression=codec)
        elif op[0] == "end":
            open_ones = sorted(kafka.open_transactions) or PRODUCERS
            kafka.end(open_ones[op[1] % len(open_ones)], op[2])
        else:
            kafka.roll()
    if not kafka.records:
        kafka.write([(b"k0", b"only")])
    log = kafka.open(tmp / "t-0", clock, segment_bytes=segment_bytes, delete_retention_ms=delete_retention_ms)
    driver = Driver(tmp, {("t", 0): log}, clock, map_slots=map_slots)
    appended = dict(kafka.records)
    original_markers = markers(log)

    def check() -> None:
        # Every batch and record is one that was written, at its offset, unchanged.
        offsets = [r.offset for b in batches(log) for r in b.records]
        assert offsets == sorted(set(offsets))
        for offset, record in data_records(log).items():
            assert appended[offset] == record
        present_markers = markers(log)
        assert present_markers.items() <= original_markers.items()
        # A transaction's remaining data keeps its marker (else a consumer could not tell
        # committed from aborted data).
        for offset in data_records(log):
            txn = kafka.txn_of.get(offset)
            if txn in kafka.outcome:
                assert kafka.outcome[txn][1] in present_markers, f"record {offset} lost its marker"
        # What read_committed sees: no aborted data, and every key's newest committed value.
        seen = read_committed(log)
        assert not [r.offset for r in seen if kafka.aborted(r.offset)], "aborted data visible"
        latest: dict[bytes, Record] = {}
        for offset in sorted(appended):
            if not kafka.aborted(offset):
                latest[appended[offset].key] = appended[offset]
        last_seen = {r.key: r for r in seen}
        for key, record in latest.items():
            if record.value is not None:
                assert last_seen.get(key) == record, f"newest committed value of {key!r} lost"
            else:
                assert last_seen.get(key) in (None, record), f"{key!r} came back after its tombstone"

    log.roll()
    driver.run_until_idle()
    check()
    for advance, key, live in later:
        clock.advance(advance)
        counter += 1
        for record in append(log, [(key, b"v%d" % counter if live else None)], clock.milliseconds()):
            appended[record.offset] = record
        log.roll()
        driver.run_until_idle()
        check()
    driver.close()
    log.close()


# -- the .txnindex through cleaning -------------------------------------------------------------


def _txn_batch(producer_id: int, sequence: int, items, timestamp: int) -> bytes:
    return encode_batch([Record(i, timestamp, k, v) for i, (k, v) in enumerate(items)], producer_id=producer_id,
                        producer_epoch=0, base_sequence=sequence, is_transactional=True)


def _txn_indexes(log: Log) -> dict[int, list]:
    return {segment.base_offset: segment.txn_index.all_aborted_txns()
            for segment in log.segments if segment.txn_index.all_aborted_txns()}


@pytest.mark.parametrize("worker_process", [False, True], ids=["thread", "worker-process"])
def test_a_kept_abort_marker_keeps_its_txnindex_entry_in_the_cleaned_segment(tmp_path, worker_process):
    """The ABORT marker stays while its transaction's data does, and the cleaned segment's
    .txnindex (swapped in from .txnindex.cleaned) holds the entry the original one had, with
    its LSO; read_committed is told of it before and after. Once the data is gone, so is the
    entry; a transaction still open is never cleaned (the cleanable range ends at the LSO)."""
    from triolog.broker.storage.log import FetchIsolation
    from triolog.broker.storage.transaction_index import AbortedTxn

    clock = ManualClock()
    now = clock.milliseconds()
    log = Log.open(tmp_path / "t-0", compact_config(segment_bytes=400, delete_retention_ms=0), clock=clock)
    log.append_as_leader(_txn_batch(1, 0, [(b"a", b"open-1")], now))  # 0: producer 1's open txn...
    log.append_as_leader(_txn_batch(2, 0, [(b"k", b"aborted")], now))  # 1
    append(log, [(b"k", b"plain")], now)  # 2
    log.append_end_txn_marker(2, 0, 0, committed=False, leader_epoch=0)  # 3: LSO 0 (producer 1 open)
    log.roll()
    log.append_end_txn_marker(1, 0, 0, committed=True, leader_epoch=0)  # 4
    log.roll()
    append(log, [(b"z", b"tail")], now)
    assert _txn_indexes(log) == {0: [AbortedTxn(2, 1, 3, 0)]}
    assert log.last_stable_offset == log.log_end_offset
    driver = Driver(tmp_path, {("t", 0): log}, clock, worker_process=worker_process)
    driver.run_until_idle()
    # The aborted batch of producer 2 is producer 2's last data batch: kept, emptied, so its
    # transaction still has a batch in the log and the marker and its entry stay.
    assert 1 not in data_records(log), "the segment was cleaned: the aborted record is gone"
    assert 3 in markers(log)
    assert _txn_indexes(log) == {0: [AbortedTxn(2, 1, 3, 0)]}
    assert not list((tmp_path / "t-0").glob("*.cleaned")) and not list((tmp_path / "t-0").glob("*.swap"))
    info = log.read(0, 1 << 20, isolation=FetchIsolation.TXN_COMMITTED)
    assert AbortedTxn(2, 1, 3, 0) in info.aborted_transactions
    assert [r.value for r in read_committed(log)] == [b"open-1", b"plain", b"tail"]
    # A reopened (recovered) log reads the swapped-in .txnindex back the same.
    log.close()
    reopened = Log.open(tmp_path / "t-0", compact_config(segment_bytes=400, delete_retention_ms=0), clock=clock)
    assert _txn_indexes(reopened) == {0: [AbortedTxn(2, 1, 3, 0)]}
    driver.close()


def test_the_cleaner_leaves_an_open_transaction_alone(tmp_path):
    clock = ManualClock()
    now = clock.milliseconds()
    log = Log.open(tmp_path / "t-0", compact_config(segment_bytes=300), clock=clock)
    append(log, [(b"k", b"v1")], now)
    log.roll()
    log.append_as_leader(_txn_batch(1, 0, [(b"k", b"open")], now))  # open: the LSO stays here
    log.roll()
    append(log, [(b"k", b"v2")], now)
    log.roll()
    append(log, [(b"k", b"v3")], now)
    log.roll()
    assert log.last_stable_offset == 1
    driver = Driver(tmp_path, {("t", 0): log}, clock)
    driver.run_until_idle()
    assert [r.value for r in data_records(log).values()] == [b"v1", b"open", b"v2", b"v3"], \
        "nothing at or past the LSO is cleaned, nor is anything below it superseded only past it"
    log.append_end_txn_marker(1, 0, 0, committed=False, leader_epoch=0)
    log.roll()
    _roll_with(log, clock, b"other")
    driver.run_until_idle()
    values = [r.value for r in data_records(log).values()]
    assert b"open" not in values and b"v3" in values and b"v1" not in values
    driver.close()
