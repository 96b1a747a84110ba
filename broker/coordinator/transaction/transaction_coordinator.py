"""The transaction coordinator (Kafka's TransactionCoordinator and TransactionStateManager):
InitProducerId with a transactional id, AddPartitionsToTxn, EndTxn, the abort of timed-out transactions, the expiration of idle transactional ids,
DescribeTransactions and ListTransactions.

Pure and single-threaded, like the group coordinator: the server calls it from its event loop.
Time comes from an injected clock. Three ports reach the rest of the broker:

* ``append(partition, key, value, done)`` writes one ``__transaction_state`` record and calls
  ``done(failure)`` once, with None when the record is durable (fsynced, or in the in-sync
  replicas) or ``(code, message)`` when it is not;
* ``send_markers(producer_id, producer_epoch, coordinator_epoch, committed, partitions, done, *,
  still_current, transaction_version)`` writes a COMMIT or ABORT marker to every partition and calls ``done(codes)``
  once every partition has answered for good;
* ``allocate_producer_id(done)`` calls ``done(failure, producer_id)`` with a producer id never
  handed out before (reserving a block may take a disk write, so it answers later).

A request is answered through its ``respond`` callback, exactly once, possibly after writes.

Ending a transaction is Kafka's two-phase protocol: PrepareCommit/PrepareAbort is written (from
then on the outcome is decided and the producer is answered), the markers go to every partition,
and CompleteCommit/CompleteAbort is written once they are all there. A coordinator that loads a
partition finds Prepare* transactions and sends their markers again, so a crash at any point
ends every transaction the same way on every partition.

The transaction version is an input of each EndTxn: 2 (KIP-890, our own client) bumps the
producer epoch at every end, so the markers and the next transaction carry a new epoch and a
delayed request or marker of the ended transaction can never apply to the next one; below 2
(Kafka's clients without KIP-890) the epoch stays, as in Kafka before 4.0.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

from triolog.broker.coordinator.group.group_coordinator import Error
from triolog.protocol.errors import ErrorCode

from .transaction_log import (
    TxnLogValue,
    partition_for,
    transaction_log_key,
    transaction_log_value,
)
from .transaction_metadata import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    TransactionMetadata,
    TransactionState,
    TxnTransitMetadata,
    is_epoch_exhausted,
)

__all__ = ["EndTxnResult", "InitProducerIdResult", "TransactionConfig", "TransactionCoordinator"]

S = TransactionState
TopicPartition = tuple[str, int]
AppendDone = Callable[[tuple[int, str] | None], None]
Append = Callable[[int, bytes, bytes | None, AppendDone], None]
SendMarkers = Callable[..., None]
AllocateProducerId = Callable[[Callable[[tuple[int, str] | None, int], None]], None]
#: Kafka's mapping of a failed __transaction_state write to what the client is told
#: (TransactionStateManager.appendTransactionToLog).
_APPEND_ERRORS = {
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.REQUEST_TIMED_OUT: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_OR_FOLLOWER: ErrorCode.NOT_COORDINATOR,
    ErrorCode.KAFKA_STORAGE_ERROR: ErrorCode.NOT_COORDINATOR,
    ErrorCode.MESSAGE_TOO_LARGE: ErrorCode.UNKNOWN_SERVER_ERROR,
}
#: Marker answers after which the transaction is complete: written, or a deleted partition.
_MARKER_DONE = frozenset({ErrorCode.NONE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION})
#: How long a CompleteCommit/CompleteAbort whose write failed waits before it is written again.
COMPLETE_RETRY_MS = 100


@dataclass(frozen=True)
class TransactionConfig:
    """The coordinator's settings (Kafka's names in the broker config)."""

    num_partitions: int = 50
    max_timeout_ms: int = 900_000
    id_expiration_ms: int = 604_800_000

    @classmethod
    def from_broker_config(cls, config, num_partitions: int | None = None) -> TransactionConfig:
        return cls(
            num_partitions=config.transaction_state_log_num_partitions if num_partitions is None else num_partitions,
            max_timeout_ms=config.transaction_max_timeout_ms,
            id_expiration_ms=config.transactional_id_expiration_ms,
        )


class InitProducerIdResult(NamedTuple):
    error: Error | None
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


class EndTxnResult(NamedTuple):
    error: Error | None
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


class TransactionListing(NamedTuple):
    transactional_id: str
    producer_id: int
    state: str


@dataclass
class _Partition:
    """A ``__transaction_state`` partition this coordinator owns (it leads it)."""

    coordinator_epoch: int
    loading: bool = True
    transactions: dict[str, TransactionMetadata] = field(default_factory=dict)


def _error(code: ErrorCode, message: str) -> Error:
    return Error(code, message)


class TransactionCoordinator:
    def __init__(
        self,
        config: TransactionConfig,
        clock,
        append: Append,
        send_markers: SendMarkers,
        allocate_producer_id: AllocateProducerId,
        wake: Callable[[], None] = lambda: None,
    ):
        self.config = config
        #: Called when poll() has something new to do (a Complete* write to retry).
        self.wake = wake
        self.clock = clock
        self.append = append
        self.send_markers = send_markers
        self.allocate_producer_id = allocate_producer_id
        self.partitions: dict[int, _Partition] = {}
        self.active = True
        #: Complete* writes that failed, retried by poll(): (due ms, transactional id, partition, epoch).
        self._retries: list[tuple[int, str, int, int]] = []
        #: Their transitions, by transactional id (held pending meanwhile: CONCURRENT_TRANSACTIONS).
        self._pending_completes: dict[str, TxnTransitMetadata] = {}
        #: Transactions ended by their timeout, by producer id (the metrics read it).
        self.timed_out_aborts = 0

    def now(self) -> int:
        return self.clock.milliseconds()

    def partition_for(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.config.num_partitions)

    # -- partitions ----------------------------------------------------------------------------

    def begin_loading(self, partition: int, coordinator_epoch: int) -> None:
        """This broker now leads ``partition``: its ids answer COORDINATOR_LOAD_IN_PROGRESS until
        :meth:`load_partition`."""
        self.partitions[partition] = _Partition(coordinator_epoch)

    def load_partition(self, partition: int, coordinator_epoch: int, values: dict[str, TxnLogValue]) -> int:
        """The partition's transactional ids from its records (transaction_log.load_transactions);
        transactions found between Prepare* and Complete* get their markers sent again. How many
        ids were loaded; 0 if the partition is no longer ours in that epoch."""
        owned = self.partitions.get(partition)
        if owned is None or owned.coordinator_epoch != coordinator_epoch:
            return 0
        for transactional_id, value in values.items():
            state = TransactionState(value.state)
            owned.transactions[transactional_id] = TransactionMetadata(
                transactional_id,
                value.producer_id,
                value.producer_epoch,
                value.transaction_timeout_ms,
                state,
                set(value.partitions),
                value.start_ms,
                value.last_update_ms,
                previous_producer_id=value.previous_producer_id,
                next_producer_id=value.next_producer_id,
                client_transaction_version=value.client_transaction_version,
            )
        owned.loading = False
        for metadata in list(owned.transactions.values()):
            if metadata.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
                self._send_markers(partition, owned.coordinator_epoch, metadata, metadata.prepare_complete(self.now()))
        return len(values)

    def unload_partition(self, partition: int) -> int:
        """This broker no longer leads ``partition``: forget its ids (their answers pending in
        flight find the partition gone and answer NOT_COORDINATOR)."""
        owned = self.partitions.pop(partition, None)
        return 0 if owned is None else len(owned.transactions)

    def shutdown(self) -> None:
        self.active = False
        self.partitions.clear()

    def _owned(self, transactional_id: str) -> tuple[Error | None, int, _Partition | None]:
        partition = self.partition_for(transactional_id)
        if not self.active:
            return _error(ErrorCode.COORDINATOR_NOT_AVAILABLE, "the transaction coordinator is shutting down"), -1, None
        owned = self.partitions.get(partition)
        if owned is None:
            return (
                _error(
                    ErrorCode.NOT_COORDINATOR,
                    f"this broker does not coordinate __transaction_state partition {partition} "
                    f"(of transactional id {transactional_id!r})",
                ),
                partition,
                None,
            )
        if owned.loading:
            return (
                _error(
                    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                    f"__transaction_state partition {partition} is still being loaded",
                ),
                partition,
                None,
            )
        return None, partition, owned

    def _still_current(self, partition: int, coordinator_epoch: int) -> bool:
        owned = self.partitions.get(partition)
        return owned is not None and owned.coordinator_epoch == coordinator_epoch and not owned.loading

    # -- writes --------------------------------------------------------------------------------

    def _write(
        self,
        partition: int,
        coordinator_epoch: int,
        metadata: TransactionMetadata,
        transit: TxnTransitMetadata,
        done: Callable[[Error | None], None],
    ) -> None:
        """Persist a prepared transition, then apply it (or drop it when the write failed)."""
        key = transaction_log_key(metadata.transactional_id)
        if transit.state == S.DEAD:
            value = None
        else:
            value = transaction_log_value(
                TxnLogValue(
                    transit.producer_id,
                    transit.producer_epoch,
                    transit.txn_timeout_ms,
                    int(transit.state),
                    transit.partitions,
                    transit.txn_last_update_ms,
                    transit.txn_start_ms,
                    client_transaction_version=transit.client_transaction_version,
                )
            )

        def written(failure) -> None:
            owned = self.partitions.get(partition)
            current = None if owned is None else owned.transactions.get(metadata.transactional_id)
            if owned is None or owned.coordinator_epoch != coordinator_epoch or current is not metadata:
                # The partition moved (or was reloaded) meanwhile: this metadata is not the live one.
                done(
                    _error(
                        ErrorCode.NOT_COORDINATOR,
                        f"this broker stopped coordinating {metadata.transactional_id!r} during the write",
                    )
                )
                return
            if failure is not None:
                code, message = failure
                metadata.abort_transition()
                mapped = _APPEND_ERRORS.get(ErrorCode(code), ErrorCode(code))
                done(_error(mapped, f"the __transaction_state record was not written: {message}"))
                return
            if transit.state == S.DEAD:
                metadata.pending_state = None
                del owned.transactions[metadata.transactional_id]
            else:
                metadata.complete_transition(transit)
            done(None)

        self.append(partition, key, value, written)

    # -- InitProducerId ------------------------------------------------------------------------

    def handle_init_producer_id(
        self,
        transactional_id: str,
        transaction_timeout_ms: int,
        expected: tuple[int, int] | None,
        respond: Callable[[InitProducerIdResult], None],
    ) -> None:
        """A transactional producer's InitProducerId: a producer id and a new epoch for the id,
        aborting a transaction the previous producer left open (the producer retries on
        CONCURRENT_TRANSACTIONS meanwhile). ``expected``: KIP-360's (producer id, epoch) of a
        producer recovering its own id."""
        if not transactional_id:
            return respond(InitProducerIdResult(_error(ErrorCode.INVALID_REQUEST, "empty transactional_id")))
        if not 0 < transaction_timeout_ms <= self.config.max_timeout_ms:
            return respond(
                InitProducerIdResult(
                    _error(
                        ErrorCode.INVALID_TRANSACTION_TIMEOUT,
                        f"transaction_timeout_ms {transaction_timeout_ms} is not in 1..transaction.max.timeout.ms "
                        f"({self.config.max_timeout_ms})",
                    )
                )
            )
        error, partition, owned = self._owned(transactional_id)
        if owned is None:
            return respond(InitProducerIdResult(error))
        metadata = owned.transactions.get(transactional_id)
        if metadata is None:

            def allocated(failure, producer_id: int) -> None:
                if failure is not None:
                    return respond(InitProducerIdResult(_error(ErrorCode.COORDINATOR_NOT_AVAILABLE, failure[1])))
                error, _, owned = self._owned(transactional_id)
                if owned is None:
                    return respond(InitProducerIdResult(error))
                if transactional_id not in owned.transactions:
                    owned.transactions[transactional_id] = TransactionMetadata(
                        transactional_id,
                        producer_id,
                        NO_PRODUCER_EPOCH,
                        transaction_timeout_ms,
                        txn_last_update_ms=self.now(),
                    )
                self.handle_init_producer_id(transactional_id, transaction_timeout_ms, expected, respond)

            self.allocate_producer_id(allocated)
            return
        if metadata.pending:
            return respond(InitProducerIdResult(self._concurrent(metadata)))
        if expected is not None and not (
            metadata.producer_epoch == NO_PRODUCER_EPOCH
            or expected[0] == metadata.producer_id
            or (expected[0] == metadata.previous_producer_id and is_epoch_exhausted(expected[1]))
        ):
            return respond(
                InitProducerIdResult(
                    _error(
                        ErrorCode.PRODUCER_FENCED,
                        f"producer id {expected[0]} is no longer {transactional_id!r}'s (it is {metadata.producer_id})",
                    )
                )
            )
        state = metadata.state
        if state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            return respond(InitProducerIdResult(self._concurrent(metadata)))
        if state == S.ONGOING:
            # Abort the previous producer's transaction first, with its epoch fenced; the new
            # producer retries (CONCURRENT_TRANSACTIONS) and then gets the epoch after it.
            fence = metadata.prepare_fence_producer_epoch()

            def fenced(result: EndTxnResult) -> None:
                respond(
                    InitProducerIdResult(
                        result.error
                        or _error(
                            ErrorCode.CONCURRENT_TRANSACTIONS,
                            f"{transactional_id!r}'s open transaction is being aborted; retry",
                        )
                    )
                )

            self._end_transaction(
                transactional_id,
                fence.producer_id,
                fence.producer_epoch,
                False,
                metadata.client_transaction_version,
                fenced,
                from_client=False,
            )
            return
        if metadata.epoch_exhausted and (expected is None or expected[1] == metadata.producer_epoch):

            def rotated(failure, producer_id: int) -> None:
                if failure is not None:
                    return respond(InitProducerIdResult(_error(ErrorCode.COORDINATOR_NOT_AVAILABLE, failure[1])))
                current_error, _, current = self._owned(transactional_id)
                if current is None or current.transactions.get(transactional_id) is not metadata or metadata.pending:
                    return respond(InitProducerIdResult(current_error or self._concurrent(metadata)))
                transit = metadata.prepare_producer_id_rotation(
                    producer_id, transaction_timeout_ms, self.now(), expected is not None
                )
                self._write_init(partition, current.coordinator_epoch, metadata, transit, respond)

            self.allocate_producer_id(rotated)
            return
        transit = metadata.prepare_increment_producer_epoch(
            transaction_timeout_ms, None if expected is None else expected[1], self.now()
        )
        if transit is None:
            return respond(
                InitProducerIdResult(
                    _error(
                        ErrorCode.PRODUCER_FENCED,
                        f"epoch {expected[1] if expected else -1} of {transactional_id!r} is neither its current "
                        f"({metadata.producer_epoch}) nor its previous one",
                    )
                )
            )
        self._write_init(partition, owned.coordinator_epoch, metadata, transit, respond)

    def _write_init(self, partition, coordinator_epoch, metadata, transit, respond) -> None:
        def written(error: Error | None) -> None:
            if error is not None:
                respond(InitProducerIdResult(error))
            else:
                respond(InitProducerIdResult(None, transit.producer_id, transit.producer_epoch))

        self._write(partition, coordinator_epoch, metadata, transit, written)

    @staticmethod
    def _concurrent(metadata: TransactionMetadata) -> Error:
        pending = metadata.pending_state or metadata.state
        return _error(
            ErrorCode.CONCURRENT_TRANSACTIONS,
            f"{metadata.transactional_id!r} is completing a change ({pending.kafka_name}); retry",
        )

    # -- AddPartitionsToTxn --------------------------------------------------------------------

    def _check_producer(self, metadata: TransactionMetadata, producer_id: int, producer_epoch: int) -> Error | None:
        if producer_id != metadata.producer_id:
            if producer_id == metadata.next_producer_id and metadata.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
                return self._concurrent(metadata)  # TV2: the next id, before its transaction may start
            return _error(
                ErrorCode.INVALID_PRODUCER_ID_MAPPING,
                f"producer id {producer_id} is not {metadata.transactional_id!r}'s (it is {metadata.producer_id})",
            )
        if producer_epoch != metadata.producer_epoch:
            return _error(
                ErrorCode.PRODUCER_FENCED,
                f"epoch {producer_epoch} of producer {producer_id} is not the current one ({metadata.producer_epoch}):"
                f" a newer producer with transactional id {metadata.transactional_id!r} took over",
            )
        return None

    def handle_add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
        transaction_version: int,
        respond: Callable[[Error | None], None],
    ) -> None:
        """Add partitions to the producer's transaction (it becomes Ongoing); answered once durable."""
        if not transactional_id:
            return respond(_error(ErrorCode.INVALID_REQUEST, "empty transactional_id"))
        error, partition, owned = self._owned(transactional_id)
        if owned is None:
            return respond(error)
        metadata = owned.transactions.get(transactional_id)
        if metadata is None:
            return respond(
                _error(
                    ErrorCode.INVALID_PRODUCER_ID_MAPPING,
                    f"transactional id {transactional_id!r} is unknown: init_producer_id first",
                )
            )
        error = self._check_producer(metadata, producer_id, producer_epoch)
        if error is not None:
            return respond(error)
        if metadata.pending or metadata.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            return respond(self._concurrent(metadata))
        added = set(partitions)
        if metadata.state == S.ONGOING and added <= metadata.partitions:
            return respond(None)
        transit = metadata.prepare_add_partitions(added, self.now(), transaction_version)
        self._write(partition, owned.coordinator_epoch, metadata, transit, respond)

    def verify_partitions(
        self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: Iterable[TopicPartition]
    ) -> Error | dict[TopicPartition, Error | None]:
        """KIP-890 part 1: a partition leader asks, before a producer's first transactional batch
        there, whether the partition is in the producer's ongoing transaction (Kafka's
        AddPartitionsToTxn with VerifyOnly). Answered at once from memory: an error for the whole
        request, or per partition None (it is) or INVALID_TXN_STATE (it is not)."""
        if not transactional_id:
            return _error(ErrorCode.INVALID_REQUEST, "empty transactional_id")
        error, _, owned = self._owned(transactional_id)
        if owned is None:
            assert error is not None
            return error
        metadata = owned.transactions.get(transactional_id)
        if metadata is None:
            return _error(ErrorCode.INVALID_PRODUCER_ID_MAPPING, f"transactional id {transactional_id!r} is unknown")
        error = self._check_producer(metadata, producer_id, producer_epoch)
        if error is not None:
            return error
        if metadata.pending or metadata.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            return self._concurrent(metadata)
        ongoing = metadata.state == S.ONGOING
        return {
            tp: None
            if ongoing and tp in metadata.partitions
            else _error(
                ErrorCode.INVALID_TXN_STATE,
                f"{tp[0]}-{tp[1]} is not in {transactional_id!r}'s transaction "
                f"({metadata.state.kafka_name}): add_partitions_to_txn first",
            )
            for tp in partitions
        }

    # -- EndTxn --------------------------------------------------------------------------------

    def handle_end_txn(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        committed: bool,
        transaction_version: int,
        respond: Callable[[EndTxnResult], None],
    ) -> None:
        """Commit or abort the producer's transaction. Answered once Prepare* is durable (the
        outcome is then decided), with the producer id and epoch of the next transaction."""
        self._end_transaction(
            transactional_id, producer_id, producer_epoch, committed, transaction_version, respond, from_client=True
        )

    def _end_transaction(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        committed: bool,
        transaction_version: int,
        respond: Callable[[EndTxnResult], None],
        *,
        from_client: bool,
    ) -> None:
        if not transactional_id:
            return respond(EndTxnResult(_error(ErrorCode.INVALID_REQUEST, "empty transactional_id")))
        error, partition, owned = self._owned(transactional_id)
        if owned is None:
            return respond(EndTxnResult(error))
        metadata = owned.transactions.get(transactional_id)
        if metadata is None:
            return respond(
                EndTxnResult(
                    _error(
                        ErrorCode.INVALID_PRODUCER_ID_MAPPING,
                        f"transactional id {transactional_id!r} is unknown: init_producer_id first",
                    )
                )
            )
        fencing = metadata.pending_state == S.PREPARE_EPOCH_FENCE
        tv2 = not fencing and metadata.supports_epoch_bump
        retry_on_overflow = (
            tv2
            and metadata.previous_producer_id == producer_id
            and producer_epoch == 2**15 - 2
            and metadata.producer_epoch == 0
        )
        retry_on_bump = tv2 and metadata.producer_epoch == producer_epoch + 1
        state = metadata.state
        if tv2:
            if state in (S.ONGOING, S.EMPTY, S.DEAD, S.PREPARE_EPOCH_FENCE):
                valid_epoch = producer_epoch == metadata.producer_epoch
            elif state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
                valid_epoch = retry_on_bump
            else:
                valid_epoch = retry_on_bump or retry_on_overflow
        else:
            valid_epoch = (not from_client or producer_epoch == metadata.producer_epoch) and (
                producer_epoch >= metadata.producer_epoch
            )
        result_name = "commit" if committed else "abort"
        if metadata.producer_id != producer_id and not retry_on_overflow:
            return respond(
                EndTxnResult(
                    _error(
                        ErrorCode.INVALID_PRODUCER_ID_MAPPING,
                        f"producer id {producer_id} is not {transactional_id!r}'s (it is {metadata.producer_id})",
                    )
                )
            )
        if not valid_epoch:
            return respond(
                EndTxnResult(
                    _error(
                        ErrorCode.PRODUCER_FENCED,
                        f"epoch {producer_epoch} of producer {producer_id} may not end {transactional_id!r}'s "
                        f"transaction (current epoch {metadata.producer_epoch}): a newer producer took over, or "
                        f"this request belongs to an earlier transaction",
                    )
                )
            )
        if metadata.pending and not fencing:
            return respond(EndTxnResult(self._concurrent(metadata)))
        if state == S.ONGOING:
            target = S.PREPARE_COMMIT if committed else S.PREPARE_ABORT
            if not committed and fencing:
                metadata.pending_state = None
                if transaction_version < 2:
                    # The fence's bumped epoch is applied now and the abort written with it; if
                    # that write fails, the epoch stays bumped in memory and the next fence
                    # reuses it rather than spend another (KAFKA-9666).
                    metadata.producer_epoch = producer_epoch
                    metadata.last_producer_epoch = NO_PRODUCER_EPOCH
                    answer = respond

                    def respond(result: EndTxnResult) -> None:
                        if result.error is not None:
                            metadata.has_failed_epoch_fence = True
                        answer(result)

                # Transaction version 2: the abort's own bump is the fence, once (KAFKA-19367);
                # the fenced producer's abort with its old epoch is then a retry, as KIP-588 wants.
            if transaction_version >= 2 and not fencing and metadata.epoch_exhausted:

                def allocated(failure, next_id: int) -> None:
                    if failure is not None:
                        return respond(EndTxnResult(_error(ErrorCode.COORDINATOR_NOT_AVAILABLE, failure[1])))
                    if metadata.pending or metadata.state != S.ONGOING:
                        return respond(EndTxnResult(self._concurrent(metadata)))
                    transit = metadata.prepare_abort_or_commit(target, transaction_version, next_id, self.now())
                    self._write_prepare(partition, owned, metadata, transit, committed, respond)

                self.allocate_producer_id(allocated)
                return
            transit = metadata.prepare_abort_or_commit(target, transaction_version, NO_PRODUCER_ID, self.now())
            self._write_prepare(partition, owned, metadata, transit, committed, respond)
            return
        if state == S.COMPLETE_COMMIT and committed or state == S.COMPLETE_ABORT and not committed:
            return respond(EndTxnResult(None, metadata.producer_id, metadata.producer_epoch))  # a retry
        if tv2 and state == S.COMPLETE_ABORT and committed:
            # The epoch of the transaction the coordinator aborted by itself (its timeout): the
            # producer is fenced, which it can recover from, not in a bad state (KAFKA-20785).
            return respond(
                EndTxnResult(
                    _error(
                        ErrorCode.PRODUCER_FENCED,
                        f"{transactional_id!r}'s transaction was aborted by the coordinator (it timed out)",
                    )
                )
            )
        if state == S.PREPARE_COMMIT and committed or state == S.PREPARE_ABORT and not committed:
            return respond(EndTxnResult(self._concurrent(metadata)))
        if state in (S.DEAD, S.PREPARE_EPOCH_FENCE):
            raise AssertionError(f"{transactional_id!r} is {state.kafka_name}: never a live state")
        return respond(
            EndTxnResult(
                _error(
                    ErrorCode.INVALID_TXN_STATE,
                    f"cannot {result_name} {transactional_id!r}'s transaction: it is {state.kafka_name}"
                    + (" (it timed out, or another end won)" if state != S.EMPTY else " (none was begun)"),
                )
            )
        )

    def _write_prepare(self, partition, owned: _Partition, metadata, transit, committed: bool, respond) -> None:
        coordinator_epoch = owned.coordinator_epoch

        def written(error: Error | None) -> None:
            if error is not None:
                return respond(EndTxnResult(error))
            if not self._still_current(partition, coordinator_epoch):
                return respond(
                    EndTxnResult(_error(ErrorCode.NOT_COORDINATOR, "the coordinator moved after the decision"))
                )
            complete = metadata.prepare_complete(self.now())
            next_id, next_epoch = metadata.producer_id, metadata.producer_epoch
            if metadata.supports_epoch_bump and metadata.next_producer_id != NO_PRODUCER_ID:
                next_id, next_epoch = metadata.next_producer_id, 0
            respond(EndTxnResult(None, next_id, next_epoch))
            self._send_markers(partition, coordinator_epoch, metadata, complete)

        self._write(partition, coordinator_epoch, metadata, transit, written)

    def _send_markers(
        self, partition: int, coordinator_epoch: int, metadata: TransactionMetadata, complete: TxnTransitMetadata
    ) -> None:
        """The markers of a decided transaction, then its Complete* record (``complete`` is
        prepared: the id answers CONCURRENT_TRANSACTIONS until it is written)."""
        committed = complete.state == S.COMPLETE_COMMIT

        def markers_done(codes: dict[TopicPartition, ErrorCode]) -> None:
            if not self._still_current(partition, coordinator_epoch):
                return  # a newer coordinator loads the Prepare* and finishes the transaction
            if any(code not in _MARKER_DONE for code in codes.values()):
                # A newer producer epoch or coordinator owns the partitions: a zombie's ending.
                metadata.abort_transition()
                return
            self._write_complete(partition, coordinator_epoch, metadata, complete)

        self.send_markers(
            metadata.producer_id,
            metadata.producer_epoch,
            coordinator_epoch,
            committed,
            sorted(metadata.partitions),
            markers_done,
            still_current=lambda: self._still_current(partition, coordinator_epoch),
            transaction_version=metadata.client_transaction_version,
        )

    def _write_complete(self, partition, coordinator_epoch, metadata, complete) -> None:
        def written(error: Error | None) -> None:
            if error is None or error.code == ErrorCode.NOT_COORDINATOR:
                return
            # Retried until it is written or the partition moves: the decision is already made.
            self._retries.append(
                (self.now() + COMPLETE_RETRY_MS, metadata.transactional_id, partition, coordinator_epoch)
            )
            metadata.pending_state = complete.state  # (the failed write dropped it)
            self._pending_completes[metadata.transactional_id] = complete
            self.wake()

        self._pending_completes.pop(metadata.transactional_id, None)
        self._write(partition, coordinator_epoch, metadata, complete, written)

    def poll(self) -> int | None:
        """Retry the Complete* writes that failed and are due; when the next one is due (clock
        ms), None with none waiting."""
        now = self.now()
        due = [entry for entry in self._retries if entry[0] <= now]
        self._retries = [entry for entry in self._retries if entry[0] > now]
        for _, transactional_id, partition, coordinator_epoch in due:
            complete = self._pending_completes.pop(transactional_id, None)
            owned = self.partitions.get(partition)
            if complete is None or owned is None or owned.coordinator_epoch != coordinator_epoch:
                continue
            metadata = owned.transactions.get(transactional_id)
            if metadata is None:
                continue
            metadata.pending_state = None
            complete = metadata.prepare_complete(now)
            self._write_complete(partition, coordinator_epoch, metadata, complete)
        return min((entry[0] for entry in self._retries), default=None)

    # -- background ----------------------------------------------------------------------------

    def abort_timed_out_transactions(self) -> int:
        """Abort every Ongoing transaction older than its timeout, fencing its producer's epoch
        (Kafka's abortTimedOutTransactions). How many aborts were started."""
        now = self.now()
        started = 0
        for owned in list(self.partitions.values()):
            if owned.loading:
                continue
            for metadata in list(owned.transactions.values()):
                if (
                    metadata.state != S.ONGOING
                    or metadata.pending
                    or metadata.txn_start_ms + metadata.txn_timeout_ms > now
                ):
                    continue
                fence = metadata.prepare_fence_producer_epoch()
                self.timed_out_aborts += 1
                started += 1
                self._end_transaction(
                    metadata.transactional_id,
                    fence.producer_id,
                    fence.producer_epoch,
                    False,
                    metadata.client_transaction_version,
                    lambda result: None,
                    from_client=False,
                )
        return started

    def expire_transactional_ids(self) -> int:
        """Forget ids idle past transactional.id.expiration.ms with no transaction open (a
        tombstone in __transaction_state). How many expirations were started."""
        now = self.now()
        started = 0
        for partition, owned in list(self.partitions.items()):
            if owned.loading:
                continue
            for metadata in list(owned.transactions.values()):
                if (
                    not metadata.state.expiration_allowed
                    or metadata.pending
                    or metadata.txn_last_update_ms + self.config.id_expiration_ms > now
                ):
                    continue
                transit = metadata.prepare_dead()
                started += 1
                self._write(partition, owned.coordinator_epoch, metadata, transit, lambda error: None)
        return started

    # -- admin ---------------------------------------------------------------------------------

    def describe(self, transactional_id: str) -> tuple[Error | None, TransactionMetadata | None]:
        if not transactional_id:
            return _error(ErrorCode.INVALID_REQUEST, "empty transactional_id"), None
        error, _, owned = self._owned(transactional_id)
        if owned is None:
            return error, None
        metadata = owned.transactions.get(transactional_id)
        if metadata is None or metadata.state == S.DEAD or metadata.pending_state == S.DEAD:
            return _error(ErrorCode.TRANSACTIONAL_ID_NOT_FOUND, f"no transactional id {transactional_id!r}"), None
        return None, metadata

    def list_transactions(
        self, states: set[str], producer_ids: set[int], min_duration_ms: int = -1
    ) -> tuple[Error | None, list[TransactionListing], list[str]]:
        """(error, the matching transactions, the state filters that name no state)."""
        if not self.active:
            return _error(ErrorCode.COORDINATOR_NOT_AVAILABLE, "the transaction coordinator is shutting down"), [], []
        unknown = sorted(s for s in states if TransactionState.from_kafka_name(s) is None)
        wanted = {TransactionState.from_kafka_name(s) for s in states} - {None}
        if states and not wanted:
            return None, [], unknown
        now = self.now()
        out = []
        for owned in self.partitions.values():
            if owned.loading:
                continue
            for metadata in owned.transactions.values():
                if metadata.state == S.DEAD:
                    continue
                if wanted and metadata.state not in wanted:
                    continue
                if producer_ids and metadata.producer_id not in producer_ids:
                    continue
                if min_duration_ms >= 0 and (
                    metadata.state != S.ONGOING or now - metadata.txn_start_ms < min_duration_ms
                ):
                    continue
                out.append(
                    TransactionListing(metadata.transactional_id, metadata.producer_id, metadata.state.kafka_name)
                )
        return None, sorted(out), unknown
