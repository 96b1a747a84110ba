"""A transactional id's state in the coordinator (Kafka's TransactionMetadata): its producer id
and epoch, the state of its transaction, and the partitions in it.

Every change is two steps, as in Kafka: ``prepare_*`` checks the transition and returns the
target (:class:`TxnTransitMetadata`, also what is written to ``__transaction_state``) with the
target state recorded as pending; once the record is durable :meth:`complete_transition` applies
it (or :meth:`abort_transition` drops it when the write failed). While a transition is pending
every other request gets CONCURRENT_TRANSACTIONS.

Transaction version 2 (KIP-890 part 2) bumps the producer epoch at every EndTxn: PrepareCommit
and PrepareAbort carry epoch + 1, so the markers and the next transaction use a new epoch, and a
request or marker of the ended transaction delayed in the network is fenced. An epoch about to
overflow takes a new producer id instead (``next_producer_id``, in use from Complete*).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace

__all__ = [
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "TransactionMetadata",
    "TransactionState",
    "TxnTransitMetadata",
    "is_epoch_exhausted",
]

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
INT16_MAX = 2**15 - 1


class TransactionState(enum.IntEnum):
    """Kafka's transaction states, by their ids in ``__transaction_state``."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        """The name DescribeTransactions and ListTransactions use (Kafka's)."""
        return _NAMES[self]

    @classmethod
    def from_kafka_name(cls, name: str) -> TransactionState | None:
        return _BY_NAME.get(name)

    @property
    def expiration_allowed(self) -> bool:
        return self in (TransactionState.EMPTY, TransactionState.COMPLETE_COMMIT, TransactionState.COMPLETE_ABORT)


_NAMES = {
    TransactionState.EMPTY: "Empty",
    TransactionState.ONGOING: "Ongoing",
    TransactionState.PREPARE_COMMIT: "PrepareCommit",
    TransactionState.PREPARE_ABORT: "PrepareAbort",
    TransactionState.COMPLETE_COMMIT: "CompleteCommit",
    TransactionState.COMPLETE_ABORT: "CompleteAbort",
    TransactionState.DEAD: "Dead",
    TransactionState.PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}
_BY_NAME = {name: state for state, name in _NAMES.items()}

S = TransactionState
#: Kafka's validPreviousStates of each state.
VALID_PREVIOUS: dict[TransactionState, frozenset[TransactionState]] = {
    S.EMPTY: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.ONGOING: frozenset({S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_COMMIT: frozenset({S.ONGOING}),
    S.PREPARE_ABORT: frozenset({S.ONGOING, S.PREPARE_EPOCH_FENCE}),
    S.COMPLETE_COMMIT: frozenset({S.PREPARE_COMMIT}),
    S.COMPLETE_ABORT: frozenset({S.PREPARE_ABORT}),
    S.DEAD: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_EPOCH_FENCE: frozenset({S.ONGOING}),
}


def is_epoch_exhausted(epoch: int) -> bool:
    """Kafka's rule: at 32766 the next bump needs a new producer id (32767 is kept for fencing)."""
    return epoch >= INT16_MAX - 1


class IllegalTransitionError(Exception):
    """A transition Kafka's state machine forbids: a bug, never a client's doing."""


@dataclass(frozen=True)
class TxnTransitMetadata:
    """The target of a pending transition; what ``__transaction_state`` gets."""

    producer_id: int
    previous_producer_id: int
    next_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    txn_timeout_ms: int
    state: TransactionState
    partitions: frozenset[tuple[str, int]]
    txn_start_ms: int
    txn_last_update_ms: int
    client_transaction_version: int


@dataclass
class TransactionMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    txn_timeout_ms: int
    state: TransactionState = TransactionState.EMPTY
    partitions: set[tuple[str, int]] = field(default_factory=set)
    txn_start_ms: int = -1
    txn_last_update_ms: int = -1
    previous_producer_id: int = NO_PRODUCER_ID
    next_producer_id: int = NO_PRODUCER_ID
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    client_transaction_version: int = 0
    pending_state: TransactionState | None = None
    #: An epoch fence whose write failed: the next fence reuses the epoch (Kafka's flag).
    has_failed_epoch_fence: bool = False

    @property
    def pending(self) -> bool:
        return self.pending_state is not None

    @property
    def epoch_exhausted(self) -> bool:
        return is_epoch_exhausted(self.producer_epoch)

    @property
    def supports_epoch_bump(self) -> bool:
        return self.client_transaction_version >= 2

    # -- prepare -------------------------------------------------------------------------------

    def prepare_fence_producer_epoch(self) -> TxnTransitMetadata:
        """Ongoing -> PrepareEpochFence: a newer producer (or the timeout) aborts the transaction
        with the epoch bumped, fencing the old producer's requests and markers."""
        if self.producer_epoch == INT16_MAX:
            raise IllegalTransitionError("cannot fence a producer whose epoch is already 32767")
        bumped = self.producer_epoch if self.has_failed_epoch_fence else self.producer_epoch + 1
        return self._prepare(
            S.PREPARE_EPOCH_FENCE,
            self.producer_id,
            bumped,
            NO_PRODUCER_EPOCH,
            self.txn_timeout_ms,
            frozenset(self.partitions),
            self.txn_start_ms,
            self.txn_last_update_ms,
        )

    def prepare_increment_producer_epoch(
        self, timeout_ms: int, expected_epoch: int | None, now_ms: int
    ) -> TxnTransitMetadata | None:
        """InitProducerId on an id without a transaction: -> Empty with epoch + 1. With a KIP-360
        expected epoch, a retry of a bump already done keeps it; None: that epoch is fenced."""
        if self.epoch_exhausted:
            raise IllegalTransitionError(f"producer id {self.producer_id} has no epoch left")
        bumped = self.producer_epoch + 1
        if expected_epoch is None:
            epoch, last = bumped, NO_PRODUCER_EPOCH
        elif self.producer_epoch == NO_PRODUCER_EPOCH or expected_epoch == self.producer_epoch:
            epoch, last = bumped, self.producer_epoch
        elif expected_epoch == self.last_producer_epoch:
            epoch, last = self.producer_epoch, self.last_producer_epoch  # the retried bump's answer again
        else:
            return None
        return self._prepare(S.EMPTY, self.producer_id, epoch, last, timeout_ms, frozenset(), -1, now_ms)

    def prepare_producer_id_rotation(
        self, new_producer_id: int, timeout_ms: int, now_ms: int, record_last_epoch: bool
    ) -> TxnTransitMetadata:
        if self.state in (S.ONGOING, S.PREPARE_COMMIT, S.PREPARE_ABORT):
            raise IllegalTransitionError("cannot rotate the producer id while a transaction is pending")
        last = self.producer_epoch if record_last_epoch else NO_PRODUCER_EPOCH
        return self._prepare(S.EMPTY, new_producer_id, 0, last, timeout_ms, frozenset(), -1, now_ms)

    def prepare_add_partitions(
        self, added: set[tuple[str, int]], now_ms: int, client_transaction_version: int
    ) -> TxnTransitMetadata:
        """-> Ongoing; the client's transaction version is recorded from the first add on, so a
        timeout's abort and the retries after it follow the protocol the client speaks."""
        start = now_ms if self.state in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT) else self.txn_start_ms
        return self._prepare(
            S.ONGOING,
            self.producer_id,
            self.producer_epoch,
            self.last_producer_epoch,
            self.txn_timeout_ms,
            frozenset(self.partitions | added),
            start,
            now_ms,
            client_transaction_version=client_transaction_version,
        )

    def prepare_abort_or_commit(
        self,
        state: TransactionState,
        client_transaction_version: int,
        next_producer_id: int,
        now_ms: int,
    ) -> TxnTransitMetadata:
        if client_transaction_version >= 2:
            epoch, last = self.producer_epoch + 1, self.producer_epoch
        else:
            epoch, last = self.producer_epoch, self.last_producer_epoch
        return self._prepare(
            state,
            self.producer_id,
            epoch,
            last,
            self.txn_timeout_ms,
            frozenset(self.partitions),
            self.txn_start_ms,
            now_ms,
            next_producer_id=next_producer_id,
            client_transaction_version=client_transaction_version,
        )

    def prepare_complete(self, now_ms: int) -> TxnTransitMetadata:
        state = S.COMPLETE_COMMIT if self.state == S.PREPARE_COMMIT else S.COMPLETE_ABORT
        self.has_failed_epoch_fence = False
        if self.supports_epoch_bump and self.next_producer_id != NO_PRODUCER_ID:
            producer_id, epoch = self.next_producer_id, 0
        else:
            producer_id, epoch = self.producer_id, self.producer_epoch
        return self._prepare(
            state,
            producer_id,
            epoch,
            self.producer_epoch,
            self.txn_timeout_ms,
            frozenset(),
            self.txn_start_ms,
            now_ms,
            client_transaction_version=self.client_transaction_version,
        )

    def prepare_dead(self) -> TxnTransitMetadata:
        return self._prepare(
            S.DEAD,
            self.producer_id,
            self.producer_epoch,
            self.last_producer_epoch,
            self.txn_timeout_ms,
            frozenset(),
            self.txn_start_ms,
            self.txn_last_update_ms,
        )

    def _prepare(
        self,
        state: TransactionState,
        producer_id: int,
        epoch: int,
        last_epoch: int,
        timeout_ms: int,
        partitions: frozenset[tuple[str, int]],
        start_ms: int,
        now_ms: int,
        *,
        next_producer_id: int = NO_PRODUCER_ID,
        client_transaction_version: int | None = None,
    ) -> TxnTransitMetadata:
        """``client_transaction_version`` None: the current one is kept (Kafka's default)."""
        if self.pending_state is not None:
            raise IllegalTransitionError(
                f"{self.transactional_id}: transition to {state.kafka_name} while {self.pending_state.kafka_name} "
                f"is pending"
            )
        if producer_id < 0 or (state != S.DEAD and epoch < 0):
            raise IllegalTransitionError(f"{self.transactional_id}: producer id {producer_id} epoch {epoch}")
        if self.state not in VALID_PREVIOUS[state]:
            raise IllegalTransitionError(
                f"{self.transactional_id}: {self.state.kafka_name} cannot go to {state.kafka_name}"
            )
        self.pending_state = state
        return TxnTransitMetadata(
            producer_id,
            self.producer_id,
            next_producer_id,
            epoch,
            last_epoch,
            timeout_ms,
            state,
            partitions,
            start_ms,
            now_ms,
            self.client_transaction_version if client_transaction_version is None else client_transaction_version,
        )

    # -- complete ------------------------------------------------------------------------------

    def complete_transition(self, transit: TxnTransitMetadata) -> None:
        """Apply a prepared transition once its record is durable (Kafka's completeTransitionTo)."""
        target = self.pending_state
        if target is None or target != transit.state:
            raise IllegalTransitionError(
                f"{self.transactional_id}: completing {transit.state.kafka_name}, pending "
                f"{None if target is None else target.kafka_name}"
            )
        if target == S.EMPTY:
            bump = transit.producer_epoch == self.producer_epoch + 1 or (
                transit.producer_epoch == 0 and transit.producer_id != self.producer_id
            )
            if (transit.producer_epoch != self.producer_epoch and not bump) or transit.partitions:
                raise IllegalTransitionError(f"{self.transactional_id}: bad transition to Empty: {transit}")
            self.txn_timeout_ms = transit.txn_timeout_ms
            self.producer_epoch = transit.producer_epoch
            self.last_producer_epoch = transit.last_producer_epoch
            self.producer_id = transit.producer_id
            self.previous_producer_id = transit.previous_producer_id
            self.txn_start_ms = -1
        elif target == S.ONGOING:
            if not self._valid_epoch(transit) or not self.partitions <= transit.partitions:
                raise IllegalTransitionError(f"{self.transactional_id}: bad transition to Ongoing: {transit}")
            self.txn_start_ms = transit.txn_start_ms
            self.partitions |= transit.partitions
        elif target in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            if not self._valid_epoch(transit) or self.partitions != transit.partitions:
                raise IllegalTransitionError(f"{self.transactional_id}: bad transition to {target.kafka_name}")
            if transit.client_transaction_version >= 2:
                self.producer_epoch = transit.producer_epoch
                self.last_producer_epoch = transit.last_producer_epoch
                self.next_producer_id = transit.next_producer_id
        elif target in (S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
            if not self._valid_epoch(transit):
                raise IllegalTransitionError(f"{self.transactional_id}: bad transition to {target.kafka_name}")
            self.partitions.clear()
            if transit.client_transaction_version >= 2:
                self.producer_epoch = transit.producer_epoch
                self.last_producer_epoch = transit.last_producer_epoch
                self.previous_producer_id = transit.previous_producer_id
                self.producer_id = transit.producer_id
                self.next_producer_id = transit.next_producer_id
        else:  # PrepareEpochFence is never written; Dead is removed, not applied
            raise IllegalTransitionError(f"{self.transactional_id}: {target.kafka_name} is never completed")
        self.client_transaction_version = transit.client_transaction_version
        self.txn_last_update_ms = transit.txn_last_update_ms
        self.pending_state = None
        self.state = target

    def abort_transition(self) -> None:
        """The prepared transition's write failed: nothing of it applies."""
        self.pending_state = None

    def _valid_epoch(self, transit: TxnTransitMetadata) -> bool:
        tv2 = transit.client_transaction_version >= 2
        overflow = tv2 and transit.state in (S.COMPLETE_COMMIT, S.COMPLETE_ABORT) and transit.producer_epoch == 0
        if overflow or (tv2 and transit.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT)):
            epoch = transit.last_producer_epoch
        else:
            epoch = transit.producer_epoch
        producer_id = transit.previous_producer_id if overflow else transit.producer_id
        return epoch == self.producer_epoch and producer_id == self.producer_id

    # -- persistence ---------------------------------------------------------------------------

    def transit_now(self) -> TxnTransitMetadata:
        """The current state as a record (what loading rebuilt), without a transition."""
        return TxnTransitMetadata(
            self.producer_id,
            self.previous_producer_id,
            self.next_producer_id,
            self.producer_epoch,
            self.last_producer_epoch,
            self.txn_timeout_ms,
            self.state,
            frozenset(self.partitions),
            self.txn_start_ms,
            self.txn_last_update_ms,
            self.client_transaction_version,
        )

    def copy(self) -> TransactionMetadata:
        return replace(self, partitions=set(self.partitions))
