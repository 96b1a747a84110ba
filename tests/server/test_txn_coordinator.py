"""The transaction coordinator's rules, pure: a fake clock and plain doubles of its three ports
(the __transaction_state writes, the marker sender, producer ids). Every state transition and
error of Kafka's TransactionCoordinator that a producer or a crash can reach, transaction
versions 1 and 2, and a state-machine property over random request sequences."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from triolog.broker.coordinator.transaction.transaction_coordinator import (
    TransactionConfig,
    TransactionCoordinator,
)
from triolog.broker.coordinator.transaction.transaction_log import load_transactions, read_key, read_value
from triolog.broker.coordinator.transaction.transaction_metadata import TransactionState
from triolog.broker.storage.clock import ManualClock
from triolog.protocol.errors import ErrorCode

S = TransactionState
TX = "tx"


@dataclass
class MarkerCall:
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    committed: bool
    partitions: list
    done: object
    transaction_version: int


@dataclass
class Ports:
    """The coordinator's ports: writes succeed at once unless ``hold`` (then ``release`` them),
    markers wait for ``deliver``."""

    hold: bool = False
    fail_with: tuple | None = None
    records: list = field(default_factory=list)
    held: list = field(default_factory=list)
    markers: list = field(default_factory=list)
    next_pid: int = 1000

    def append(self, partition, key, value, done):
        if self.fail_with is not None:
            done(self.fail_with)
            return
        self.records.append((partition, key, value))
        if self.hold:
            self.held.append(done)
        else:
            done(None)

    def release(self, failure=None):
        held, self.held = self.held, []
        for done in held:
            done(failure)

    def send_markers(self, pid, epoch, coordinator_epoch, committed, partitions, done, *, still_current,
                     transaction_version):
        self.markers.append(MarkerCall(pid, epoch, coordinator_epoch, committed, list(partitions), done,
                                       transaction_version))

    def deliver(self, code=ErrorCode.NONE):
        calls, self.markers = self.markers, []
        for call in calls:
            call.done({tp: code for tp in call.partitions})
        return calls

    def allocate(self, done):
        self.next_pid += 1
        done(None, self.next_pid)

    def states(self, transactional_id=TX):
        """The states written for an id, in order (Dead as a tombstone: None)."""
        out = []
        for _, key, value in self.records:
            if read_key(key) == transactional_id:
                out.append(None if value is None else S(read_value(value).state))
        return out


class Harness:
    def __init__(self, **config):
        self.clock = ManualClock()
        self.ports = Ports()
        self.config = TransactionConfig(num_partitions=1, **config)
        self.coordinator = self.new_coordinator()
        self.coordinator.begin_loading(0, coordinator_epoch=3)
        self.coordinator.load_partition(0, 3, {})

    def new_coordinator(self):
        p = self.ports
        return TransactionCoordinator(self.config, self.clock, p.append, p.send_markers, p.allocate)

    def call(self, method, *args):
        box = []
        getattr(self.coordinator, method)(*args, box.append)
        assert len(box) <= 1
        return box[0] if box else None

    def init(self, timeout_ms=60000, expected=None, transactional_id=TX):
        return self.call("handle_init_producer_id", transactional_id, timeout_ms, expected)

    def add(self, pid, epoch, *partitions, transactional_id=TX, tv=0):
        return self.call("handle_add_partitions", transactional_id, pid, epoch, list(partitions), tv)

    def end(self, pid, epoch, committed=True, tv=0, transactional_id=TX):
        return self.call("handle_end_txn", transactional_id, pid, epoch, committed, tv)

    def meta(self, transactional_id=TX):
        return self.coordinator.partitions[0].transactions[transactional_id]

    def code(self, result):
        error = result if result is None or not hasattr(result, "error") else result.error
        return ErrorCode.NONE if error is None else error.code


def test_init_gives_a_new_id_and_bumps_the_epoch_after():
    h = Harness()
    first = h.init()
    assert first.error is None and (first.producer_id, first.producer_epoch) == (1001, 0)
    second = h.init()
    assert (second.producer_id, second.producer_epoch) == (1001, 1)
    assert h.ports.states() == [S.EMPTY, S.EMPTY]
    assert h.meta().last_producer_epoch == -1


def test_init_refuses_bad_timeouts_and_empty_ids():
    h = Harness(max_timeout_ms=1000)
    assert h.code(h.init(timeout_ms=1001)) == ErrorCode.INVALID_TRANSACTION_TIMEOUT
    assert h.code(h.init(timeout_ms=0)) == ErrorCode.INVALID_TRANSACTION_TIMEOUT
    assert h.code(h.init(transactional_id="")) == ErrorCode.INVALID_REQUEST
    assert h.ports.records == []


def test_a_commit_tv1_prepares_sends_markers_then_completes():
    h = Harness()
    r = h.init()
    pid, epoch = r.producer_id, r.producer_epoch
    assert h.add(pid, epoch, ("t", 0), ("t", 1)) is None
    assert h.meta().state == S.ONGOING and h.meta().partitions == {("t", 0), ("t", 1)}
    assert h.add(pid, epoch, ("t", 1)) is None  # already in: answered without a write
    assert h.ports.states() == [S.EMPTY, S.ONGOING]
    answer = h.end(pid, epoch, committed=True, tv=1)
    assert answer.error is None and (answer.producer_id, answer.producer_epoch) == (pid, epoch)
    (call,) = h.ports.markers
    assert (call.producer_id, call.producer_epoch, call.coordinator_epoch, call.committed) == (pid, epoch, 3, True)
    assert call.partitions == [("t", 0), ("t", 1)] and call.transaction_version == 1
    # Decided, markers in flight: the id waits.
    assert h.code(h.add(pid, epoch, ("t", 2))) == ErrorCode.CONCURRENT_TRANSACTIONS
    assert h.code(h.end(pid, epoch, committed=True, tv=1)) == ErrorCode.CONCURRENT_TRANSACTIONS
    assert h.code(h.end(pid, epoch, committed=False, tv=1)) == ErrorCode.CONCURRENT_TRANSACTIONS
    assert h.code(h.init()) == ErrorCode.CONCURRENT_TRANSACTIONS
    h.ports.deliver()
    assert h.meta().state == S.COMPLETE_COMMIT and h.meta().partitions == set()
    assert h.ports.states() == [S.EMPTY, S.ONGOING, S.PREPARE_COMMIT, S.COMPLETE_COMMIT]
    # A retried commit is answered; an abort now is out of order.
    assert h.code(h.end(pid, epoch, committed=True, tv=1)) == ErrorCode.NONE
    assert h.code(h.end(pid, epoch, committed=False, tv=1)) == ErrorCode.INVALID_TXN_STATE
    # The next transaction, same epoch (TV1).
    assert h.add(pid, epoch, ("t", 5)) is None and h.meta().state == S.ONGOING


def test_tv2_bumps_the_epoch_at_every_end_and_fences_the_ended_transactions_requests():
    h = Harness()
    r = h.init()
    pid, epoch = r.producer_id, r.producer_epoch
    h.add(pid, epoch, ("t", 0))
    answer = h.end(pid, epoch, committed=False, tv=2)
    assert (answer.producer_id, answer.producer_epoch) == (pid, epoch + 1)
    (call,) = h.ports.markers
    assert call.producer_epoch == epoch + 1 and call.transaction_version == 2 and not call.committed
    # A retry of that EndTxn (its answer lost) gets the same answer: an epoch bump, not a fence.
    assert h.code(h.end(pid, epoch, committed=False, tv=2)) == ErrorCode.CONCURRENT_TRANSACTIONS
    h.ports.deliver()
    assert h.meta().state == S.COMPLETE_ABORT and h.meta().producer_epoch == epoch + 1
    retried = h.end(pid, epoch, committed=False, tv=2)
    assert retried.error is None and retried.producer_epoch == epoch + 1
    # The next transaction with the new epoch; the ended one's delayed requests are fenced.
    assert h.add(pid, epoch + 1, ("t", 1)) is None
    assert h.code(h.add(pid, epoch, ("t", 2))) == ErrorCode.PRODUCER_FENCED
    delayed = h.end(pid, epoch, committed=True, tv=2)  # Jepsen's hazard: transaction N's EndTxn, late
    assert delayed.error.code == ErrorCode.PRODUCER_FENCED
    assert h.meta().state == S.ONGOING and h.meta().partitions == {("t", 1)}
    assert h.ports.markers == []


def test_tv2_epoch_exhaustion_moves_to_a_new_producer_id():
    h = Harness()
    pid = h.init().producer_id
    h.meta().producer_epoch = 2**15 - 2  # (as after 32766 transactions)
    h.add(pid, 2**15 - 2, ("t", 0))
    answer = h.end(pid, 2**15 - 2, committed=True, tv=2)
    assert answer.error is None and answer.producer_id != pid and answer.producer_epoch == 0
    h.ports.deliver()
    assert (h.meta().producer_id, h.meta().producer_epoch) == (answer.producer_id, 0)
    assert h.add(answer.producer_id, 0, ("t", 0)) is None


def test_end_errors():
    h = Harness()
    assert h.code(h.end(5, 0)) == ErrorCode.INVALID_PRODUCER_ID_MAPPING  # unknown id
    r = h.init()
    pid, epoch = r.producer_id, r.producer_epoch
    assert h.code(h.end(pid, epoch)) == ErrorCode.INVALID_TXN_STATE  # nothing begun (Empty)
    assert h.code(h.end(pid + 1, epoch)) == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    assert h.code(h.end(pid, epoch + 1)) == ErrorCode.PRODUCER_FENCED
    assert h.code(h.add(pid + 1, epoch, ("t", 0))) == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    assert h.code(h.add(pid, epoch - 1, ("t", 0))) == ErrorCode.PRODUCER_FENCED
    assert h.code(h.add(pid, epoch, ("t", 0), transactional_id="other")) == ErrorCode.INVALID_PRODUCER_ID_MAPPING


def test_a_new_producer_fences_the_old_and_aborts_its_transaction():
    h = Harness()
    old = h.init()
    h.add(old.producer_id, old.producer_epoch, ("t", 0))
    # The new producer's init: the open transaction is aborted with the epoch fenced (+1).
    assert h.code(h.init()) == ErrorCode.CONCURRENT_TRANSACTIONS
    (call,) = h.ports.markers
    assert not call.committed and call.producer_epoch == old.producer_epoch + 1
    assert h.code(h.end(old.producer_id, old.producer_epoch)) == ErrorCode.PRODUCER_FENCED
    h.ports.deliver()
    assert h.meta().state == S.COMPLETE_ABORT
    new = h.init()  # its retry: the epoch after the fence
    assert (new.producer_id, new.producer_epoch) == (old.producer_id, old.producer_epoch + 2)
    assert h.code(h.add(old.producer_id, old.producer_epoch, ("t", 1))) == ErrorCode.PRODUCER_FENCED
    assert h.ports.states() == [S.EMPTY, S.ONGOING, S.PREPARE_ABORT, S.COMPLETE_ABORT, S.EMPTY]


def test_kip_360_a_producer_recovers_its_own_id_but_a_stale_one_is_fenced():
    h = Harness()
    r = h.init()
    bumped = h.init(expected=(r.producer_id, r.producer_epoch))
    assert (bumped.producer_id, bumped.producer_epoch) == (r.producer_id, r.producer_epoch + 1)
    # The same request again (its answer was lost): the same epoch, not another bump.
    again = h.init(expected=(r.producer_id, r.producer_epoch))
    assert again.producer_epoch == r.producer_epoch + 1
    assert h.code(h.init(expected=(r.producer_id + 7, 0))) == ErrorCode.PRODUCER_FENCED
    assert h.code(h.init(expected=(r.producer_id, 9))) == ErrorCode.PRODUCER_FENCED


def test_init_at_an_exhausted_epoch_takes_a_new_producer_id():
    h = Harness()
    r = h.init()
    h.meta().producer_epoch = 2**15 - 2
    rotated = h.init()
    assert rotated.producer_id != r.producer_id and rotated.producer_epoch == 0


def test_a_timed_out_transaction_is_aborted_and_its_producer_fenced():
    h = Harness()
    r = h.init(timeout_ms=1000)
    h.add(r.producer_id, r.producer_epoch, ("t", 0))
    h.clock.advance(999)
    assert h.coordinator.abort_timed_out_transactions() == 0
    h.clock.advance(2)
    assert h.coordinator.abort_timed_out_transactions() == 1
    (call,) = h.ports.markers
    assert not call.committed and call.producer_epoch == r.producer_epoch + 1
    h.ports.deliver()
    assert h.meta().state == S.COMPLETE_ABORT
    late = h.end(r.producer_id, r.producer_epoch, committed=True)
    assert late.error.code == ErrorCode.PRODUCER_FENCED, "a commit after the timeout never applies"


def test_tv2_a_timed_out_transaction_is_aborted_with_one_bump_and_its_producer_may_go_on():
    """KIP-588 under transaction version 2: the timeout's abort bumps the epoch once (the fence
    and the end's bump are one, KAFKA-19367); the producer's own abort with its old epoch is then
    a retry answered with the new epoch, while its commit is fenced (KAFKA-20785)."""
    h = Harness()
    r = h.init(timeout_ms=1000)
    h.add(r.producer_id, r.producer_epoch, ("t", 0), tv=2)
    h.clock.advance(1001)
    assert h.coordinator.abort_timed_out_transactions() == 1
    (call,) = h.ports.markers
    assert not call.committed and call.producer_epoch == r.producer_epoch + 1 and call.transaction_version == 2
    assert h.code(h.add(r.producer_id, r.producer_epoch, ("t", 1), tv=2)) == ErrorCode.PRODUCER_FENCED
    h.ports.deliver()
    assert (h.meta().state, h.meta().producer_epoch) == (S.COMPLETE_ABORT, r.producer_epoch + 1)
    late_commit = h.end(r.producer_id, r.producer_epoch, committed=True, tv=2)
    assert late_commit.error.code == ErrorCode.PRODUCER_FENCED, "a commit after the timeout never applies"
    abort = h.end(r.producer_id, r.producer_epoch, committed=False, tv=2)
    assert abort.error is None and (abort.producer_id, abort.producer_epoch) == (r.producer_id, r.producer_epoch + 1)
    assert h.add(r.producer_id, r.producer_epoch + 1, ("t", 0), tv=2) is None, "the next transaction begins"
    assert h.ports.states() == [S.EMPTY, S.ONGOING, S.PREPARE_ABORT, S.COMPLETE_ABORT, S.ONGOING]


def test_tv2_a_new_producer_aborts_the_open_transaction_with_one_bump():
    """KAFKA-19367: InitProducerId over an open version-2 transaction bumps once for the abort
    and once for the new producer, never twice for the abort."""
    h = Harness()
    old = h.init()
    h.add(old.producer_id, old.producer_epoch, ("t", 0), tv=2)
    assert h.code(h.init()) == ErrorCode.CONCURRENT_TRANSACTIONS
    (call,) = h.ports.markers
    assert call.producer_epoch == old.producer_epoch + 1
    h.ports.deliver()
    new = h.init()
    assert (new.producer_id, new.producer_epoch) == (old.producer_id, old.producer_epoch + 2)


def test_tv1_a_fence_whose_abort_was_not_written_spends_no_second_epoch():
    """KAFKA-9666: the fenced epoch stays in memory when the abort's write fails, and the next
    fence reuses it."""
    h = Harness()
    r = h.init(timeout_ms=1000)
    h.add(r.producer_id, r.producer_epoch, ("t", 0))
    h.clock.advance(1001)
    h.ports.fail_with = (ErrorCode.NOT_ENOUGH_REPLICAS, "isr too small")
    assert h.coordinator.abort_timed_out_transactions() == 1
    assert (h.meta().state, h.meta().producer_epoch) == (S.ONGOING, r.producer_epoch + 1)
    assert h.code(h.end(r.producer_id, r.producer_epoch)) == ErrorCode.PRODUCER_FENCED, "fenced meanwhile"
    h.ports.fail_with = None
    assert h.coordinator.abort_timed_out_transactions() == 1
    (call,) = h.ports.markers
    assert call.producer_epoch == r.producer_epoch + 1


def test_verify_only_says_which_partitions_are_in_the_ongoing_transaction():
    """KIP-890 part 1: what a partition leader asks before a producer's first batch there."""
    h = Harness()
    c = h.coordinator
    r = h.init()
    pid, epoch = r.producer_id, r.producer_epoch
    codes = lambda answer: {tp: None if e is None else e.code for tp, e in answer.items()}  # noqa: E731
    assert codes(c.verify_partitions(TX, pid, epoch, [("t", 0)])) == {("t", 0): ErrorCode.INVALID_TXN_STATE}
    h.add(pid, epoch, ("t", 0), tv=2)
    assert codes(c.verify_partitions(TX, pid, epoch, [("t", 0), ("t", 1)])) == {
        ("t", 0): None, ("t", 1): ErrorCode.INVALID_TXN_STATE}
    assert c.verify_partitions(TX, pid, epoch - 1 if epoch else epoch + 5, [("t", 0)]).code == ErrorCode.PRODUCER_FENCED
    assert c.verify_partitions(TX, pid + 1, epoch, [("t", 0)]).code == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    assert c.verify_partitions("other", pid, epoch, [("t", 0)]).code == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    assert c.verify_partitions("", pid, epoch, [("t", 0)]).code == ErrorCode.INVALID_REQUEST
    h.ports.hold = True
    h.end(pid, epoch, committed=True, tv=2)  # Prepare* being written
    assert c.verify_partitions(TX, pid, epoch, [("t", 0)]).code == ErrorCode.CONCURRENT_TRANSACTIONS
    h.ports.hold = False
    h.ports.release()
    h.ports.deliver()
    assert codes(c.verify_partitions(TX, pid, epoch + 1, [("t", 0)])) == {("t", 0): ErrorCode.INVALID_TXN_STATE}, \
        "ended: the next transaction has not added it"
    c.unload_partition(0)
    assert c.verify_partitions(TX, pid, epoch + 1, [("t", 0)]).code == ErrorCode.NOT_COORDINATOR


def test_idle_ids_expire_with_a_tombstone_but_not_with_a_transaction_open():
    h = Harness(id_expiration_ms=10_000)
    r = h.init()
    h.init(transactional_id="busy")
    busy = h.meta("busy")
    h.add(busy.producer_id, busy.producer_epoch, ("t", 0), transactional_id="busy")
    h.clock.advance(10_001)
    assert h.coordinator.expire_transactional_ids() == 1
    assert h.ports.states() == [S.EMPTY, None]
    assert TX not in h.coordinator.partitions[0].transactions
    assert h.coordinator.describe(TX)[0].code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
    assert h.code(h.end(r.producer_id, r.producer_epoch)) == ErrorCode.INVALID_PRODUCER_ID_MAPPING


def test_loading_states_and_not_coordinator():
    h = Harness()
    c = h.coordinator
    c.begin_loading(0, coordinator_epoch=4)
    assert h.code(h.init()) == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    c.unload_partition(0)
    assert h.code(h.init()) == ErrorCode.NOT_COORDINATOR
    assert h.code(h.add(1, 0, ("t", 0))) == ErrorCode.NOT_COORDINATOR


def test_a_failed_write_changes_nothing_and_is_reported_as_kafka_maps_it():
    h = Harness()
    r = h.init()
    h.ports.fail_with = (ErrorCode.NOT_ENOUGH_REPLICAS, "isr too small")
    assert h.code(h.add(r.producer_id, r.producer_epoch, ("t", 0))) == ErrorCode.COORDINATOR_NOT_AVAILABLE
    h.ports.fail_with = (ErrorCode.NOT_LEADER_OR_FOLLOWER, "moved")
    assert h.code(h.add(r.producer_id, r.producer_epoch, ("t", 0))) == ErrorCode.NOT_COORDINATOR
    assert h.meta().state == S.EMPTY and not h.meta().pending
    h.ports.fail_with = None
    assert h.add(r.producer_id, r.producer_epoch, ("t", 0)) is None


def test_a_reload_finishes_decided_transactions_from_their_prepare_record():
    """A crash after PrepareCommit: the next coordinator reads it and sends the markers again."""
    h = Harness()
    r = h.init()
    h.add(r.producer_id, r.producer_epoch, ("t", 0), ("u", 3))
    h.end(r.producer_id, r.producer_epoch, committed=True, tv=2)
    h.ports.markers.clear()  # the crash: its markers never go
    values = load_transactions((offset, key, value) for offset, (_, key, value) in enumerate(h.ports.records))
    assert S(values[TX].state) == S.PREPARE_COMMIT
    fresh = h.new_coordinator()
    fresh.begin_loading(0, coordinator_epoch=4)
    assert fresh.load_partition(0, 4, values) == 1
    (call,) = h.ports.markers
    assert call.committed and call.coordinator_epoch == 4 and call.partitions == [("t", 0), ("u", 3)]
    assert call.producer_epoch == r.producer_epoch + 1  # TV2: the bumped epoch, as written
    h.ports.deliver()
    assert fresh.partitions[0].transactions[TX].state == S.COMPLETE_COMMIT


def test_markers_refused_for_good_leave_the_transaction_to_a_newer_coordinator():
    h = Harness()
    r = h.init()
    h.add(r.producer_id, r.producer_epoch, ("t", 0))
    h.end(r.producer_id, r.producer_epoch, committed=True)
    h.ports.deliver(ErrorCode.TRANSACTION_COORDINATOR_FENCED)
    assert h.meta().state == S.PREPARE_COMMIT and h.ports.states()[-1] == S.PREPARE_COMMIT


def test_describe_and_list():
    h = Harness()
    r = h.init()
    h.add(r.producer_id, r.producer_epoch, ("t", 0))
    h.init(transactional_id="idle")
    error, meta = h.coordinator.describe(TX)
    assert error is None and meta.state == S.ONGOING and meta.partitions == {("t", 0)}
    error, rows, unknown = h.coordinator.list_transactions({"Ongoing", "Nope"}, set())
    assert [row.transactional_id for row in rows] == [TX] and unknown == ["Nope"]
    _, rows, _ = h.coordinator.list_transactions(set(), set())
    assert sorted(row.transactional_id for row in rows) == ["idle", TX]
    h.clock.advance(5000)
    _, rows, _ = h.coordinator.list_transactions(set(), set(), min_duration_ms=4000)
    assert [row.transactional_id for row in rows] == [TX]


# -- the state machine, as a property ------------------------------------------------------------

ops = st.lists(
    st.one_of(
        st.tuples(st.just("init")),
        st.tuples(st.just("add"), st.integers(0, 3), st.booleans()),
        st.tuples(st.just("end"), st.booleans(), st.booleans(), st.sampled_from([1, 2])),
        st.tuples(st.just("deliver")),
        st.tuples(st.just("timeout")),
        st.tuples(st.just("reload")),
    ),
    max_size=40,
)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(ops)
def test_random_requests_never_break_the_state_machine(sequence):
    """Whatever a producer (or a stale one) sends, in any order, with crashes and timeouts:
    every record written is a valid next state, a transaction completes only after its markers,
    the producer's accepted epoch never goes down, and a stale epoch is never accepted."""
    h = Harness()
    current = None  # the latest (pid, epoch) the coordinator gave out
    stale = None
    epochs_seen: list[int] = []
    for op in sequence:
        kind = op[0]
        if kind == "init":
            result = h.init(timeout_ms=1000)
            if result is not None and result.error is None:
                stale, current = current, (result.producer_id, result.producer_epoch)
        elif kind == "add" and current is not None:
            use = stale if op[2] and stale is not None else current
            error = h.add(use[0], use[1], ("t", op[1]))
            if use is stale and use != current:
                assert error is not None and error.code in (ErrorCode.PRODUCER_FENCED,
                                                             ErrorCode.INVALID_PRODUCER_ID_MAPPING,
                                                             ErrorCode.CONCURRENT_TRANSACTIONS)
        elif kind == "end" and current is not None:
            use = stale if op[2] and stale is not None else current
            result = h.end(use[0], use[1], committed=op[1], tv=op[3])
            if result is not None and result.error is None and use == current:
                current = (result.producer_id, result.producer_epoch)
        elif kind == "deliver":
            h.ports.deliver()
        elif kind == "timeout":
            h.clock.advance(1001)
            h.coordinator.abort_timed_out_transactions()
        elif kind == "reload":
            values = load_transactions((n, key, value) for n, (_, key, value) in enumerate(h.ports.records))
            h.ports.markers.clear()
            h.coordinator = h.new_coordinator()
            h.coordinator.begin_loading(0, coordinator_epoch=5)
            h.coordinator.load_partition(0, 5, values)
        meta = h.coordinator.partitions[0].transactions.get(TX)
        if meta is not None and meta.producer_epoch >= 0:
            epochs_seen.append((meta.producer_id, meta.producer_epoch))
    # Every record is a valid successor of the one before (Kafka's validPreviousStates).
    from triolog.broker.coordinator.transaction.transaction_metadata import VALID_PREVIOUS
    written = h.ports.states()
    for before, after in zip(written, written[1:]):
        assert before in VALID_PREVIOUS[after], f"{before} -> {after} in {written}"
    # Complete* only after its Prepare*, which is only written after Ongoing.
    for index, state in enumerate(written):
        if state in (S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
            assert written[index - 1] == (S.PREPARE_COMMIT if state == S.COMPLETE_COMMIT else S.PREPARE_ABORT)
    # A producer id's epoch never goes down.
    by_id: dict[int, int] = {}
    for pid, epoch in epochs_seen:
        assert epoch >= by_id.get(pid, -1)
        by_id[pid] = epoch


def test_a_transition_the_state_machine_forbids_is_a_bug_not_a_state():
    from triolog.broker.coordinator.transaction.transaction_metadata import (
        IllegalTransitionError,
        TransactionMetadata,
    )

    meta = TransactionMetadata("x", 1, 0, 1000)
    with pytest.raises(IllegalTransitionError):
        meta.prepare_complete(0)  # Empty cannot complete
    meta.prepare_add_partitions({("t", 0)}, 0, 0)
    with pytest.raises(IllegalTransitionError, match="pending"):
        meta.prepare_add_partitions({("t", 1)}, 0, 0)


def test_a_failed_complete_write_is_retried_by_poll_and_the_id_waits_meanwhile():
    h = Harness()
    woken = []
    h.coordinator.wake = lambda: woken.append(True)
    r = h.init()
    h.add(r.producer_id, r.producer_epoch, ("t", 0))
    h.end(r.producer_id, r.producer_epoch, committed=True)
    h.ports.fail_with = (ErrorCode.REQUEST_TIMED_OUT, "slow disk")
    h.ports.deliver()
    assert woken and h.meta().state == S.PREPARE_COMMIT
    assert h.code(h.add(r.producer_id, r.producer_epoch, ("t", 1))) == ErrorCode.CONCURRENT_TRANSACTIONS
    due = h.coordinator.poll()
    assert due == h.clock.milliseconds() + 100
    h.ports.fail_with = None
    h.clock.advance(100)
    assert h.coordinator.poll() is None
    assert h.meta().state == S.COMPLETE_COMMIT and h.ports.states()[-1] == S.COMPLETE_COMMIT
