"""The transactional producer's state machine (client/transactions.py) without a broker: which
calls each state allows, which errors make a transaction abortable and which make the producer
fatal, and what an ended transaction leaves behind (a new epoch, sequences from 0). The
coordinator is a table of answers: what is tested is only the client's reaction to them."""

from __future__ import annotations

import pytest
from hypothesis import settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from triolog.client.errors import TransactionStateError, TriologClientError, error_for
from triolog.client.ops import run_sync
from triolog.client.producer_core import IdempotentState, ProducerConfig
from triolog.client.transactions import ConsumerGroupMetadata, TransactionManager, TxnState
from triolog.client.types import TopicPartition
from triolog.protocol.errors import ErrorCode

PRODUCER_ID = 4000


class Answers:
    """The coordinators' side: answers each request from the producer's (SyncCaller), failing
    the next request of an API with ``fail[api]`` once. Records what was asked."""

    def __init__(self) -> None:
        self.epoch = 0
        self.fail: dict[str, int] = {}
        #: APIs answered COORDINATOR_LOAD_IN_PROGRESS until removed.
        self.loading: set[str] = set()
        self.asked: list = []

    def call(self, request, timeout_s):
        self.asked.append(request)
        code = self.fail.pop(request.api, ErrorCode.NONE)
        if request.api in self.loading:
            code = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        if request.api == "find_coordinator":
            return {"error_code": code, "error_message": None, "node_id": 0, "host": "127.0.0.1", "port": 1}
        if request.api in ("add_partitions_to_txn", "txn_offset_commit"):
            parts = "partitions"
            return {"error_code": ErrorCode.NONE, "topics": [
                {"name": t.name, parts: [{"partition": p if isinstance(p, int) else p.partition, "error_code": code}
                                         for p in t.partitions]} for t in request.topics]}
        if code:
            return {"error_code": code, "error_message": f"refused: {code}", "producer_id": -1, "producer_epoch": -1}
        if request.api == "end_txn":
            self.epoch += 1  # transaction version 2: the next transaction's epoch
        return {"error_code": ErrorCode.NONE, "error_message": None, "producer_id": PRODUCER_ID,
                "producer_epoch": self.epoch}

    def send(self, request, timeout_s):  # (SyncCaller's: not used by these operations)
        raise AssertionError("unexpected")

    receive = send


def manager(max_block_ms: int = 2_000) -> tuple[TransactionManager, IdempotentState]:
    idempotence = IdempotentState()
    config = ProducerConfig(transactional_id="tx", retry_backoff_ms=1, max_block_ms=max_block_ms)
    return TransactionManager("tx", 60_000, idempotence, config), idempotence


TPS = [TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("u", 0)]
#: What a coordinator may refuse with, and whether the producer is then fatal (Kafka's
#: TransactionManager handlers) or its transaction abortable.
COORDINATOR_ERRORS = {
    ErrorCode.PRODUCER_FENCED: True,
    ErrorCode.INVALID_PRODUCER_EPOCH: True,
    ErrorCode.INVALID_TXN_STATE: True,
    ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: True,
    ErrorCode.TOPIC_AUTHORIZATION_FAILED: False,
    ErrorCode.UNKNOWN_MEMBER_ID: False,
}
#: A failed batch's errors: fatal only when fenced (KIP-588: INVALID_PRODUCER_EPOCH from a
#: partition leader is abortable).
SEND_ERRORS = {
    ErrorCode.PRODUCER_FENCED: True,
    ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: True,
    ErrorCode.INVALID_PRODUCER_EPOCH: False,
    ErrorCode.INVALID_TXN_STATE: False,
    ErrorCode.MESSAGE_TOO_LARGE: False,
    ErrorCode.NOT_ENOUGH_REPLICAS: False,
}


class TransactionStates(RuleBasedStateMachine):
    """Random call orders against a model of Kafka's rules; every refused call raises
    TransactionStateError and changes nothing."""

    def __init__(self) -> None:
        super().__init__()
        self.txn, self.idempotence = manager()
        self.coordinator = Answers()
        self.model = TxnState.UNINITIALIZED
        self.added: set = set()  # partitions (or offsets) in the open transaction
        self.epoch = -1

    def _refused(self, call) -> None:
        before = (self.txn.state, self.idempotence.producer_epoch)
        with pytest.raises(TransactionStateError):
            call()
        assert (self.txn.state, self.idempotence.producer_epoch) == before

    def _coordinator_failed(self, code: int) -> None:
        if COORDINATOR_ERRORS[code]:
            self.model = TxnState.FATAL_ERROR
        elif self.model is TxnState.ABORTING:
            pass  # a failed abort: abort_transaction again
        elif self.model is not TxnState.FATAL_ERROR:
            self.model = TxnState.ABORTABLE_ERROR

    @rule()
    def init(self) -> None:
        if self.model is not TxnState.UNINITIALIZED:
            return self._refused(lambda: run_sync(self.txn.init_op(), self.coordinator))
        run_sync(self.txn.init_op(), self.coordinator)
        self.model, self.epoch = TxnState.READY, self.coordinator.epoch
        assert (self.idempotence.producer_id, self.idempotence.producer_epoch) == (PRODUCER_ID, self.epoch)

    @rule()
    def begin(self) -> None:
        if self.model is not TxnState.READY:
            return self._refused(self.txn.begin)
        self.txn.begin()
        self.model, self.added = TxnState.IN_TRANSACTION, set()

    @rule(tp=st.sampled_from(TPS), refusal=st.none() | st.sampled_from(sorted(COORDINATOR_ERRORS)))
    def send(self, tp, refusal) -> None:
        """send() and its partition's first batch drained (add_partitions_to_txn first)."""
        if self.model is not TxnState.IN_TRANSACTION:
            return self._refused(self.txn.check_send)
        self.txn.check_send()
        if tp in self.added:
            assert self.txn.partition_ready(tp)
            return
        assert not self.txn.partition_ready(tp), "a new partition's batch waits until the partition is added"
        assert self.txn.has_pending
        if refusal is not None:
            self.coordinator.fail["add_partitions_to_txn"] = refusal
            with pytest.raises(TriologClientError):
                run_sync(self.txn.add_partitions_op(), self.coordinator)
            self._coordinator_failed(refusal)
            return
        run_sync(self.txn.add_partitions_op(), self.coordinator)
        self.added.add(tp)
        assert self.txn.partition_ready(tp) and not self.txn.has_pending

    @rule(refusal=st.none() | st.sampled_from(sorted(COORDINATOR_ERRORS)),
          refuser=st.sampled_from(["add_offsets_to_txn", "txn_offset_commit"]))
    def send_offsets(self, refusal, refuser) -> None:
        group = ConsumerGroupMetadata("g", 3, "member-1")
        op = lambda: run_sync(self.txn.send_offsets_op({TopicPartition("in", 0): 7}, group), self.coordinator)  # noqa: E731
        if self.model is not TxnState.IN_TRANSACTION:
            return self._refused(op)
        if refusal is not None:
            self.coordinator.fail[refuser] = refusal
            with pytest.raises(TriologClientError):
                op()
            self._coordinator_failed(refusal)
            if refuser == "txn_offset_commit":
                self.added.add("offsets")  # the group is in the transaction: there is something to end
            return
        op()
        commit = self.coordinator.asked[-1]
        assert (commit.api, commit.generation_id, commit.member_id) == ("txn_offset_commit", 3, "member-1")
        assert commit.producer_epoch == self.epoch
        self.added.add("offsets")

    @rule(code=st.sampled_from(sorted(SEND_ERRORS)))
    def batch_fails(self, code) -> None:
        """A batch of the transaction failed for good (the sender's report)."""
        self.txn.fail(error_for(code, "refused"))
        if SEND_ERRORS[code]:
            self.model = TxnState.FATAL_ERROR
        elif self.model in (TxnState.IN_TRANSACTION, TxnState.ABORTABLE_ERROR):
            self.model = TxnState.ABORTABLE_ERROR

    def _end(self, committed: bool, refusal) -> None:
        asked = len(self.coordinator.asked)
        if refusal is not None:
            self.coordinator.fail["end_txn"] = refusal
        try:
            if refusal is not None and self.added:
                with pytest.raises(TriologClientError):
                    run_sync(self.txn.end_op(committed), self.coordinator)
                self._coordinator_failed(refusal)
                return
            run_sync(self.txn.end_op(committed), self.coordinator)
        finally:
            self.coordinator.fail.pop("end_txn", None)
        ends = [r for r in self.coordinator.asked[asked:] if r.api == "end_txn"]
        if self.added:
            # The coordinator's next epoch is adopted: every partition's sequences start over.
            assert [(r.committed, r.producer_epoch) for r in ends] == [(committed, self.epoch)]
            self.epoch = self.coordinator.epoch
            assert self.idempotence.producer_epoch == self.epoch and self.idempotence.partitions == {}
        else:
            assert ends == [], "an empty transaction is ended without the coordinator"
        self.model, self.added = TxnState.READY, set()
        assert self.txn.error is None and not self.txn.partitions

    @rule(refusal=st.none() | st.sampled_from(sorted(COORDINATOR_ERRORS)))
    def commit(self, refusal) -> None:
        if self.model is not TxnState.IN_TRANSACTION:
            return self._refused(lambda: run_sync(self.txn.end_op(True), self.coordinator))
        self._end(True, refusal)

    @rule(refusal=st.none() | st.sampled_from(sorted(COORDINATOR_ERRORS)))
    def abort(self, refusal) -> None:
        if self.model not in (TxnState.IN_TRANSACTION, TxnState.ABORTABLE_ERROR, TxnState.ABORTING):
            return self._refused(self.txn.begin_abort)
        self.txn.begin_abort()
        self.model = TxnState.ABORTING
        assert not self.txn.has_pending, "nothing of an aborting transaction is added any more"
        self._end(False, refusal)

    @precondition(lambda self: self.model is TxnState.FATAL_ERROR)
    @rule()
    def fatal_allows_nothing(self) -> None:
        for call in (self.txn.begin, self.txn.check_send, self.txn.begin_abort,
                     lambda: run_sync(self.txn.end_op(True), self.coordinator)):
            self._refused(call)

    @invariant()
    def state_follows_the_model(self) -> None:
        assert self.txn.state is self.model


TransactionStates.TestCase.settings = settings(max_examples=150, stateful_step_count=30, deadline=None)
test_transaction_states = TransactionStates.TestCase


def test_an_abortable_transaction_allows_only_abort_and_then_a_new_one():
    txn, idempotence = manager()
    coordinator = Answers()
    run_sync(txn.init_op(), coordinator)
    txn.begin()
    assert not txn.partition_ready(TPS[0])
    run_sync(txn.add_partitions_op(), coordinator)
    txn.fail(error_for(ErrorCode.MESSAGE_TOO_LARGE, "too large"))
    for refused in (txn.check_send, txn.begin, lambda: run_sync(txn.end_op(True), coordinator)):
        with pytest.raises(TransactionStateError, match="must be aborted") as info:
            refused()
        assert info.value.__cause__ is txn.error, "the failed send is the cause"
    txn.begin_abort()
    run_sync(txn.end_op(False), coordinator)
    assert txn.state is TxnState.READY and (txn.commits, txn.aborts) == (0, 1)
    assert idempotence.producer_epoch == 1, "the abort's end_txn answer carries the next epoch"
    txn.begin()
    txn.check_send()


def test_a_fenced_producer_can_only_be_closed():
    txn, _ = manager()
    coordinator = Answers()
    run_sync(txn.init_op(), coordinator)
    txn.begin()
    assert not txn.partition_ready(TPS[0])
    coordinator.fail["add_partitions_to_txn"] = ErrorCode.PRODUCER_FENCED
    with pytest.raises(TriologClientError) as fenced:
        run_sync(txn.add_partitions_op(), coordinator)
    assert fenced.value.code == ErrorCode.PRODUCER_FENCED and txn.state is TxnState.FATAL_ERROR
    with pytest.raises(TransactionStateError, match="can only be closed"):
        txn.begin_abort()
    with pytest.raises(TransactionStateError, match="init_transactions twice"):
        run_sync(txn.init_op(), coordinator)


def test_init_retries_a_loading_or_moved_coordinator_and_concurrent_transactions():
    coordinator = Answers()
    for code in (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.NOT_COORDINATOR, ErrorCode.CONCURRENT_TRANSACTIONS):
        coordinator.fail["init_producer_id"] = code
        fresh, idempotence = manager()
        run_sync(fresh.init_op(), coordinator)
        assert fresh.state is TxnState.READY and idempotence.producer_id == PRODUCER_ID
    apis = [r.api for r in coordinator.asked]
    # NOT_COORDINATOR: the coordinator is looked up again before init_producer_id is.
    assert apis.count("init_producer_id") == 6 and apis.count("find_coordinator") == 4
    init = next(r for r in coordinator.asked if r.api == "init_producer_id")
    assert (init.transactional_id, init.transaction_timeout_ms) == ("tx", 60_000)
    find = coordinator.asked[0]
    assert (find.key, find.key_type) == ("tx", 1), "the transaction coordinator (key type 1)"


def test_a_commit_that_ran_out_of_time_is_finished_by_committing_again():
    """Kafka's commitTransaction after a TimeoutException: the same call again, never an abort
    (the coordinator may already have decided to commit)."""
    txn, idempotence = manager(max_block_ms=50)
    coordinator = Answers()
    run_sync(txn.init_op(), coordinator)
    txn.begin()
    assert not txn.partition_ready(TPS[0])
    run_sync(txn.add_partitions_op(), coordinator)
    coordinator.loading.add("end_txn")
    with pytest.raises(TriologClientError) as timed_out:
        run_sync(txn.end_op(True), coordinator)
    assert timed_out.value.code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    assert txn.state is TxnState.COMMITTING
    with pytest.raises(TransactionStateError, match="must be called again"):
        txn.begin_abort()
    for refused in (txn.begin, txn.check_send):
        with pytest.raises(TransactionStateError):
            refused()
    txn.check_commit()
    coordinator.loading.clear()
    run_sync(txn.end_op(True), coordinator)
    assert txn.state is TxnState.READY and txn.commits == 1 and idempotence.producer_epoch == 1
    ends = [r.committed for r in coordinator.asked if r.api == "end_txn"]
    assert len(ends) > 2 and all(ends), "asked again while loading, then once more: always a commit"
    # An abort that ran out of time is finished by aborting again.
    txn.begin()
    assert not txn.partition_ready(TPS[1])
    run_sync(txn.add_partitions_op(), coordinator)
    coordinator.loading.add("end_txn")
    txn.begin_abort()
    with pytest.raises(TriologClientError):
        run_sync(txn.end_op(False), coordinator)
    assert txn.state is TxnState.ABORTING
    with pytest.raises(TransactionStateError):
        txn.check_commit()
    coordinator.loading.clear()
    txn.begin_abort()
    run_sync(txn.end_op(False), coordinator)
    assert txn.state is TxnState.READY and txn.aborts == 1 and idempotence.producer_epoch == 2
