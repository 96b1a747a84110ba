"""Offsets committed in a producer's transaction (TxnOffsetCommit) in the pure group coordinator:
invisible until the producer's COMMIT marker reaches the group's partition, dropped at its ABORT,
and replayed the same way from __consumer_offsets after a restart (Kafka's
pendingTransactionalOffsetCommits)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from triolog.broker.coordinator.group.group_coordinator import CommitRequest
from triolog.broker.coordinator.group.group_metadata_manager import LoadedPartition, TxnMarker
from triolog.broker.storage.clock import ManualClock
from triolog.protocol.errors import ErrorCode

from .test_group_coordinator import Answer, Store, commit, make, stable_group

PRODUCER = (4000, 3)


def txn_commit(c, *offsets, producer=PRODUCER, group="g", generation=-1, member=""):
    answer = Answer()
    c.handle_txn_commit_offsets(group, producer, generation, member,
                                [CommitRequest("t", p, o, -1, None) for p, o in offsets], answer)
    return answer


def fetched(c, partition, group="g"):
    entry = c.handle_fetch_offsets(group, [("t", partition)])[1][0][2]
    return None if entry is None else entry.offset


def test_transactional_offsets_count_only_once_the_transaction_commits():
    store = Store()
    c = make(ManualClock(), store)
    assert txn_commit(c, (0, 10), (1, 20)).value == [None, None]
    assert store.producers == {0: PRODUCER[0], 1: PRODUCER[0]}  # written in the producer's transaction
    assert (fetched(c, 0), fetched(c, 1)) == (None, None)  # undecided: not the group's yet
    assert c.handle_txn_completion(PRODUCER[0], [c.partition_for("g")], committed=True) == 2
    assert (fetched(c, 0), fetched(c, 1)) == (10, 20)


def test_an_aborted_transaction_leaves_the_groups_offsets_as_they_were():
    c = make(ManualClock(), Store())
    assert commit(c, (0, 5)).value == [None]
    assert txn_commit(c, (0, 10)).value == [None]
    assert c.handle_txn_completion(PRODUCER[0], [c.partition_for("g")], committed=False) == 0
    assert fetched(c, 0) == 5
    assert c.groups["g"].pending_txn_offsets == {}


def test_a_marker_of_another_partition_or_producer_decides_nothing():
    c = make(ManualClock(), Store())
    txn_commit(c, (0, 10))
    other = (c.partition_for("g") + 1) % 5
    assert c.handle_txn_completion(PRODUCER[0], [other], committed=True) == 0
    assert c.handle_txn_completion(PRODUCER[0] + 1, [c.partition_for("g")], committed=True) == 0
    assert fetched(c, 0) is None


def test_a_plain_commit_written_after_the_transactional_one_wins_at_the_commit():
    # Kafka compares where the records are: the later record holds the partition's offset.
    c = make(ManualClock(), Store())
    txn_commit(c, (0, 10))
    commit(c, (0, 7))
    c.handle_txn_completion(PRODUCER[0], [c.partition_for("g")], committed=True)
    assert fetched(c, 0) == 7


def test_a_failed_write_is_reported_and_never_committed_later():
    store = Store()
    c = make(ManualClock(), store)
    store.fail = (ErrorCode.NOT_LEADER_OR_FOLLOWER, "moved")
    assert txn_commit(c, (0, 10)).value[0].code is ErrorCode.NOT_COORDINATOR
    store.fail = None
    c.handle_txn_completion(PRODUCER[0], [c.partition_for("g")], committed=True)
    assert fetched(c, 0) is None


def test_a_group_with_undecided_transactional_offsets_is_neither_deleted_nor_expired():
    clock = ManualClock()
    c = make(clock, Store(), offsets_retention_ms=1000)
    txn_commit(c, (0, 10))
    deleted = Answer()
    c.handle_delete_groups(["g"], deleted)
    assert deleted.value["g"][0] is ErrorCode.NON_EMPTY_GROUP
    clock.advance(5000)
    c.cleanup_group_metadata()
    assert "g" in c.groups
    c.handle_txn_completion(PRODUCER[0], [c.partition_for("g")], committed=True)
    assert fetched(c, 0) == 10


def test_members_and_generations_are_checked_when_given():
    c = make(ManualClock(), Store())
    (a, _b), generation = stable_group(c, 2)
    assert txn_commit(c, (0, 1), member="stranger").value[0].code is ErrorCode.UNKNOWN_MEMBER_ID
    assert txn_commit(c, (0, 1), generation=generation + 1, member=a).value[0].code is ErrorCode.ILLEGAL_GENERATION
    assert txn_commit(c, (0, 1), generation=generation, member=a).value == [None]
    # A producer outside the group's consumers (no member, generation -1) commits for it too.
    assert txn_commit(c, (1, 1), producer=(4001, 0)).value == [None]


def _replayed(store: Store, markers: dict[int, TxnMarker]) -> LoadedPartition:
    """The records as a restart reads them back: a producer's records carry its id, and the
    markers sit at the positions given (before the record of that index)."""
    items = []
    for i, (_, key, value) in enumerate(store.records):
        if i in markers:
            items.append(markers[i])
        producer = store.producers.get(i)
        items.append((i, key, value) if producer is None else (i, key, value, producer))
    if len(store.records) in markers:
        items.append(markers[len(store.records)])
    loaded = LoadedPartition()
    loaded.replay(items)
    return loaded


def test_a_restart_replays_committed_aborted_and_undecided_transactions():
    store = Store()
    c = make(ManualClock(), store)
    txn_commit(c, (0, 10), producer=(1, 0))  # record 0: committed below
    txn_commit(c, (1, 20), producer=(2, 0))  # record 1: aborted below
    txn_commit(c, (2, 30), producer=(3, 0))  # record 2: no marker yet
    loaded = _replayed(store, {3: TxnMarker(3, 1, True), 4: TxnMarker(4, 2, False)})
    fresh = make(ManualClock(), Store())
    partition = c.partition_for("g")
    fresh.startup([partition])
    fresh.load_partition(partition, loaded)
    assert (fetched(fresh, 0), fetched(fresh, 1), fetched(fresh, 2)) == (10, None, None)
    assert fresh.handle_txn_completion(3, [partition], committed=True) == 1  # decided after the restart
    assert fetched(fresh, 2) == 30


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["plain", "txn", "commit", "abort"]), st.integers(0, 2),
                          st.integers(0, 1000)), max_size=25))
def test_replay_decides_the_same_offsets_as_the_running_coordinator(steps):
    """Whatever sequence of plain commits, transactional commits (three producers) and markers:
    a coordinator rebuilt from the log holds the same offsets, and the same undecided ones."""
    store = Store()
    c = make(ManualClock(), store)
    partition = c.partition_for("g")
    markers: dict[int, list[TxnMarker]] = {}
    for kind, producer, value in steps:
        tp = value % 3
        if kind == "plain":
            commit(c, (tp, value))
        elif kind == "txn":
            txn_commit(c, (tp, value), producer=(producer, 0))
        else:
            committed = kind == "commit"
            markers.setdefault(len(store.records), []).append(TxnMarker(-1, producer, committed))
            c.handle_txn_completion(producer, [partition], committed)
    items = []
    for i in range(len(store.records) + 1):
        items.extend(markers.get(i, ()))
        if i < len(store.records):
            _, key, value = store.records[i]
            producer = store.producers.get(i)
            items.append((i, key, value) if producer is None else (i, key, value, producer))
    loaded = LoadedPartition()
    loaded.replay(items)
    fresh = make(ManualClock(), Store())
    fresh.startup([partition])
    fresh.load_partition(partition, loaded)
    before = {tp: e.offset for tp, e in c.groups["g"].offsets.items()} if "g" in c.groups else {}
    after = {tp: e.offset for tp, e in fresh.groups["g"].offsets.items()} if "g" in fresh.groups else {}
    assert after == before
    pending_before = {pid: {tp: e.offset for tp, e in o.items()} for pid, o in c.groups["g"].pending_txn_offsets.items()} if "g" in c.groups else {}
    pending_after = {pid: {tp: e.offset for tp, e in o.items()} for pid, o in fresh.groups["g"].pending_txn_offsets.items()} if "g" in fresh.groups else {}
    assert pending_after == pending_before
