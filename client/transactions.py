"""A transactional producer's side of Kafka's transactions (Kafka's TransactionManager), shared by
:class:`triolog.client.Producer` and :class:`triolog.client.aio.AsyncProducer` as operations.

``init_transactions`` finds the transaction coordinator (``find_coordinator`` with key_type 1)
and gets the producer id and a new epoch for the transactional id (``init_producer_id``), which
fences every older producer with the same id. In a transaction, before a partition's first batch
is sent the sender adds it (``add_partitions_to_txn``, new partitions batched); the batches carry
the transactional bit. ``send_offsets_to_transaction`` adds the group (``add_offsets_to_txn``)
and commits its offsets in the transaction (``txn_offset_commit`` to the group's coordinator).
``commit_transaction`` flushes and ends the transaction (``end_txn``); ``abort_transaction``
drops what was not sent yet and ends it aborted. The coordinator answers an end with the
producer id and epoch of the next transaction (a new epoch every time: transaction version 2),
so every partition's sequences start over, and a request of an ended transaction delayed in the
network can never apply to the next one.

States (Kafka's): uninitialized -> ready -> in transaction -> committing/aborting -> ready. A
failed send or a refused partition makes the transaction *abortable* (only abort_transaction,
then a new one); being fenced by a newer producer (PRODUCER_FENCED, INVALID_PRODUCER_EPOCH) is
*fatal* (only close()). An end that ran out of time (max_block_ms) on a coordinator that is
busy or unreachable is finished by calling the same method again (abort_transaction is refused
after a commit_transaction that timed out, as in Kafka).
"""

from __future__ import annotations

import enum
import logging
import threading
from typing import NamedTuple

from triolog.protocol import messages as m
from triolog.protocol.errors import ErrorCode

from .errors import (
    BrokerConnectionError,
    TransactionStateError,
    TriologClientError,
    error_for,
)
from .ops import Call, Op, Sleep, now
from .types import TopicPartition

__all__ = ["GROUP_TXN_APIS", "TXN_COORDINATOR_APIS", "ConsumerGroupMetadata", "TransactionManager", "TxnState"]

_log = logging.getLogger("triolog.client.transactions")

#: Requests that go to the transaction coordinator's connection.
TXN_COORDINATOR_APIS = frozenset({"add_partitions_to_txn", "add_offsets_to_txn", "end_txn"})
#: Requests that go to a group's coordinator (the group named in the request).
GROUP_TXN_APIS = frozenset({"txn_offset_commit"})
#: Answers after which the request is sent again (after a backoff, the coordinator looked up
#: again for the last two).
_RETRY = frozenset(
    {
        ErrorCode.CONCURRENT_TRANSACTIONS,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.REQUEST_TIMED_OUT,
        ErrorCode.UNSTABLE_OFFSET_COMMIT,
    }
)
#: The first wait before a CONCURRENT_TRANSACTIONS answer is asked again (doubling after).
CONCURRENT_RETRY_FIRST_S = 0.002
_REFIND = frozenset({ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR})
#: A coordinator's answers after which the producer can only be closed (Kafka's handlers of
#: AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit and EndTxn): a newer producer with the
#: transactional id took over, or the coordinator's state and ours disagree for good.
_FATAL = frozenset(
    {
        ErrorCode.PRODUCER_FENCED,
        ErrorCode.INVALID_PRODUCER_EPOCH,
        ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        ErrorCode.INVALID_PRODUCER_ID_MAPPING,
        ErrorCode.TRANSACTION_COORDINATOR_FENCED,
        ErrorCode.INVALID_TXN_STATE,
    }
)
#: A failed batch's errors that are fatal (Kafka's maybeTransitionToErrorState); any other only
#: makes the transaction abortable, INVALID_PRODUCER_EPOCH included (KIP-588: the coordinator
#: bumped the epoch when it aborted a timed-out transaction; abort_transaction tells whether the
#: producer was fenced).
_SEND_FATAL = frozenset(
    {
        ErrorCode.PRODUCER_FENCED,
        ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
        ErrorCode.UNSUPPORTED_VERSION,
    }
)


class TxnState(enum.Enum):
    UNINITIALIZED = "uninitialized"
    READY = "ready"
    IN_TRANSACTION = "in transaction"
    COMMITTING = "committing"
    ABORTING = "aborting"
    ABORTABLE_ERROR = "abortable error"
    FATAL_ERROR = "fatal error"


class ConsumerGroupMetadata(NamedTuple):
    """What send_offsets_to_transaction needs of a consumer (Kafka's ConsumerGroupMetadata): its
    group and, for KIP-447 fencing, its generation and member id."""

    group_id: str
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None


class TransactionManager:
    """See the module docstring. Thread-safe: the sender thread asks :meth:`partition_ready` and
    adds partitions while the application's thread begins, commits or aborts."""

    def __init__(self, transactional_id: str, transaction_timeout_ms: int, idempotence, config) -> None:
        self.transactional_id = transactional_id
        self.transaction_timeout_ms = transaction_timeout_ms
        self.idempotence = idempotence
        self.config = config
        self._lock = threading.Lock()
        self.state = TxnState.UNINITIALIZED
        #: The transaction coordinator's (host, port); None: look it up first.
        self.coordinator: tuple[str, int] | None = None
        #: Each group's coordinator, for txn_offset_commit.
        self.group_coordinators: dict[str, tuple[str, int]] = {}
        #: The partitions in the open transaction, and those its batches wait to have added.
        self.partitions: set[TopicPartition] = set()
        self.pending: set[TopicPartition] = set()
        #: Why the transaction is abortable or the producer fatal (raised from the next call).
        self.error: BaseException | None = None
        #: add_offsets_to_txn succeeded in the open transaction (so it has something to end).
        self.offsets_added = False
        #: The open transaction was prepared by another producer and resumed here to be ended.
        self.resumed = False
        #: Transactions committed and aborted (the producer's metrics).
        self.commits = 0
        self.aborts = 0
        idempotence.transactional = True
        idempotence.txn_gate = self.partition_ready

    # -- the state machine -------------------------------------------------------------------

    def _require(self, *states: TxnState, doing: str) -> None:
        if self.state in states:
            return
        if self.state is TxnState.FATAL_ERROR:
            raise TransactionStateError(
                f"cannot {doing}: the producer hit a fatal error and can only be closed"
            ) from self.error
        if self.state is TxnState.ABORTABLE_ERROR:
            raise TransactionStateError(
                f"cannot {doing}: the transaction failed and must be aborted (abort_transaction)"
            ) from self.error
        raise TransactionStateError(f"cannot {doing} while the producer is {self.state.value}")

    def begin(self) -> None:
        with self._lock:
            self._require(TxnState.READY, doing="begin a transaction")
            self.state = TxnState.IN_TRANSACTION
            self.partitions.clear()
            self.pending.clear()
            self.offsets_added = False

    def resume(self, producer_id: int, producer_epoch: int) -> None:
        """Take over a transaction another producer with this id left open (its producer id and
        epoch), only to commit or abort it: the two-phase sink's coordinator (Flink's
        resumeTransaction), which ends what its tasks prepared."""
        with self._lock:
            self._require(TxnState.UNINITIALIZED, doing="resume a transaction after init_transactions")
            self.idempotence.new_epoch(producer_id, producer_epoch)
            self.state = TxnState.IN_TRANSACTION
            self.resumed = True

    def begin_abort(self) -> None:
        """abort_transaction starts: no batch of the transaction is sent from now on."""
        with self._lock:
            if self.state is TxnState.COMMITTING:
                raise TransactionStateError(
                    "cannot abort the transaction: commit_transaction did not finish (timed out)"
                    " and must be called again"
                ) from self.error
            self._require(
                TxnState.IN_TRANSACTION,
                TxnState.ABORTABLE_ERROR,
                TxnState.COMMITTING,
                TxnState.ABORTING,
                doing="abort the transaction",
            )
            self.state = TxnState.ABORTING
            self.pending.clear()

    def check_commit(self) -> None:
        """commit_transaction: of the open transaction, or again after one that timed out."""
        state = self.state
        if state is not TxnState.IN_TRANSACTION and state is not TxnState.COMMITTING:
            self._require(TxnState.IN_TRANSACTION, TxnState.COMMITTING, doing="commit the transaction")

    def check_send(self) -> None:
        """send() is only for the open transaction."""
        state = self.state
        if state is not TxnState.IN_TRANSACTION:
            self._require(TxnState.IN_TRANSACTION, doing="send a record (begin_transaction first)")
        if self.resumed:  # (its sequences are the preparing producer's: only ending it is safe)
            raise TransactionStateError("a resumed transaction can only be committed or aborted")

    def partition_ready(self, tp) -> bool:
        """The sender's question before it stamps a partition's batch: is the partition in the
        transaction yet? If not, it is queued for add_partitions_to_txn."""
        with self._lock:
            if tp in self.partitions:
                return True
            if self.state is TxnState.IN_TRANSACTION or self.state is TxnState.COMMITTING:
                self.pending.add(tp)
            return False

    @property
    def has_pending(self) -> bool:
        return bool(self.pending) and self.state in (TxnState.IN_TRANSACTION, TxnState.COMMITTING)

    def fail(self, error: BaseException, fatal_codes: frozenset = _SEND_FATAL) -> None:
        """A send of the transaction failed: it can only be aborted now (fatal if fenced).
        ``fatal_codes``: _FATAL for an answer of a coordinator."""
        with self._lock:
            self._fail_locked(error, fatal_codes)

    def _fail_locked(self, error: BaseException, fatal_codes: frozenset = _FATAL) -> None:
        fatal = isinstance(error, TriologClientError) and error.code in fatal_codes
        if self.state is TxnState.FATAL_ERROR:
            return
        if fatal:
            self.state, self.error = TxnState.FATAL_ERROR, error
        elif self.state in (TxnState.IN_TRANSACTION, TxnState.COMMITTING, TxnState.ABORTABLE_ERROR):
            self.state, self.error = TxnState.ABORTABLE_ERROR, error

    # -- operations ------------------------------------------------------------------------------

    def _deadline(self) -> float:
        return now() + self.config.max_block_ms / 1000

    def _call_op(self, request: m.Request, code_of, deadline: float, refind: str | None = None) -> Op[dict]:
        """One coordinator request, sent again while its answer can pass by itself."""
        backoff = self.config.retry_backoff_ms / 1000
        # CONCURRENT_TRANSACTIONS passes within milliseconds (the previous transaction's markers
        # and Complete record): asked again soon, then less often (Kafka's producer retries it
        # after 20 ms instead of retry.backoff.ms, for the same reason).
        concurrent_backoff = CONCURRENT_RETRY_FIRST_S
        while True:
            error: TriologClientError | None = None
            try:
                doc = yield Call(request, self.config.request_timeout_ms / 1000)
                code = code_of(doc)
                if code == ErrorCode.NONE:
                    return doc
                error = error_for(code, _message_of(doc))
            except BrokerConnectionError as exc:
                error, code = exc, ErrorCode.COORDINATOR_NOT_AVAILABLE
            if code not in _RETRY or now() + backoff >= deadline:
                raise error
            if code == ErrorCode.CONCURRENT_TRANSACTIONS:
                yield Sleep(concurrent_backoff)
                concurrent_backoff = min(backoff, concurrent_backoff * 2)
                continue
            if code in _REFIND or isinstance(error, BrokerConnectionError):
                if refind == "transaction":
                    self.coordinator = None
                    yield from self.find_coordinator_op(deadline)
                elif refind is not None:
                    self.group_coordinators.pop(refind, None)
                    yield from self._group_coordinator_op(refind, deadline)
            yield Sleep(backoff)

    def find_coordinator_op(self, deadline: float | None = None) -> Op[tuple[str, int]]:
        deadline = self._deadline() if deadline is None else deadline
        if self.coordinator is None:
            request = m.FindCoordinatorRequest(id=0, key=self.transactional_id, key_type=1)
            doc = yield from self._call_op(request, _code, deadline)
            self.coordinator = (doc["host"], doc["port"])
        return self.coordinator

    def _group_coordinator_op(self, group_id: str, deadline: float) -> Op[tuple[str, int]]:
        found = self.group_coordinators.get(group_id)
        if found is None:
            doc = yield from self._call_op(m.FindCoordinatorRequest(id=0, key=group_id, key_type=0), _code, deadline)
            found = self.group_coordinators[group_id] = (doc["host"], doc["port"])
        return found

    def init_op(self) -> Op[None]:
        """init_transactions: the producer id and a new epoch (fencing older producers)."""
        with self._lock:
            self._require(TxnState.UNINITIALIZED, doing="init_transactions twice")
        deadline = self._deadline()
        yield from self.find_coordinator_op(deadline)
        request = m.InitProducerIdRequest(
            id=0, transactional_id=self.transactional_id, transaction_timeout_ms=self.transaction_timeout_ms
        )
        doc = yield from self._call_op(request, _code, deadline, refind="transaction")
        self.idempotence.new_epoch(doc["producer_id"], doc["producer_epoch"])
        with self._lock:
            self.state = TxnState.READY
        _log.debug(
            "transactional id %s: producer id %d, epoch %d",
            self.transactional_id,
            doc["producer_id"],
            doc["producer_epoch"],
        )

    def add_partitions_op(self) -> Op[None]:
        """The sender's: add the partitions the transaction's batches wait for."""
        with self._lock:
            adding = sorted(self.pending)
        if not adding:
            return
        by_topic: dict[str, list[int]] = {}
        for tp in adding:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        request = m.AddPartitionsToTxnRequest(
            id=0,
            transactional_id=self.transactional_id,
            producer_id=self.idempotence.producer_id,
            producer_epoch=self.idempotence.producer_epoch,
            topics=tuple(m.TxnTopic(name=name, partitions=tuple(parts)) for name, parts in by_topic.items()),
        )
        try:
            yield from self.find_coordinator_op()
            yield from self._call_op(request, _first_partition_code, self._deadline(), refind="transaction")
        except TriologClientError as exc:
            self.fail(exc, _FATAL)
            raise
        with self._lock:
            self.partitions.update(adding)
            self.pending.difference_update(adding)

    def send_offsets_op(self, offsets: dict, group: ConsumerGroupMetadata) -> Op[None]:
        """The consumed offsets committed in the transaction (Kafka's sendOffsetsToTransaction)."""
        with self._lock:
            self._require(TxnState.IN_TRANSACTION, doing="send offsets to a transaction")
        deadline = self._deadline()
        try:
            yield from self.find_coordinator_op(deadline)
            request = m.AddOffsetsToTxnRequest(
                id=0,
                transactional_id=self.transactional_id,
                producer_id=self.idempotence.producer_id,
                producer_epoch=self.idempotence.producer_epoch,
                group_id=group.group_id,
            )
            yield from self._call_op(request, _code, deadline, refind="transaction")
            self.offsets_added = True
            yield from self._group_coordinator_op(group.group_id, deadline)
            by_topic: dict[str, list[m.OffsetCommitPartition]] = {}
            for tp, value in sorted(offsets.items()):
                offset, metadata = (value, None) if isinstance(value, int) else (value[0], value[1])
                by_topic.setdefault(tp.topic, []).append(
                    m.OffsetCommitPartition(
                        partition=tp.partition, committed_offset=offset, committed_metadata=metadata
                    )
                )
            commit = m.TxnOffsetCommitRequest(
                id=0,
                transactional_id=self.transactional_id,
                group_id=group.group_id,
                producer_id=self.idempotence.producer_id,
                producer_epoch=self.idempotence.producer_epoch,
                generation_id=group.generation_id,
                member_id=group.member_id,
                group_instance_id=group.group_instance_id,
                topics=tuple(
                    m.OffsetCommitTopic(name=name, partitions=tuple(parts)) for name, parts in by_topic.items()
                ),
            )
            doc = yield from self._call_op(commit, _first_partition_code, deadline, refind=group.group_id)
            for topic in doc["topics"]:
                for part in topic["partitions"]:
                    if part["error_code"]:
                        raise error_for(
                            part["error_code"],
                            part.get("error_message"),
                            topic=topic["name"],
                            partition=part["partition"],
                        )
        except TriologClientError as exc:
            self.fail(exc, _FATAL)
            raise

    def end_op(self, committed: bool) -> Op[None]:
        """end_txn once everything of the transaction was sent (the caller flushed or dropped it)."""
        with self._lock:
            if committed:
                self._require(TxnState.IN_TRANSACTION, TxnState.COMMITTING, doing="commit the transaction")
                self.state = TxnState.COMMITTING
            else:
                self._require(
                    TxnState.IN_TRANSACTION,
                    TxnState.ABORTABLE_ERROR,
                    TxnState.ABORTING,
                    doing="abort the transaction",
                )
                self.state = TxnState.ABORTING
            empty = not self.partitions and not self.pending and not self.offsets_added and not self.resumed
        if empty:  # nothing reached the coordinator: nothing to end (as Kafka's producer)
            with self._lock:
                self.state = TxnState.READY
                self.error = None
            return
        deadline = self._deadline()
        request = m.EndTxnRequest(
            id=0,
            transactional_id=self.transactional_id,
            producer_id=self.idempotence.producer_id,
            producer_epoch=self.idempotence.producer_epoch,
            committed=committed,
        )
        try:
            yield from self.find_coordinator_op(deadline)
            doc = yield from self._call_op(request, _code, deadline, refind="transaction")
        except TriologClientError as exc:
            with self._lock:
                if isinstance(exc, BrokerConnectionError) or exc.code in _RETRY:
                    # Out of time on an answer that passes by itself: the same call again
                    # finishes the end (Kafka's commitTransaction after a TimeoutException).
                    self.error = exc
                else:
                    self._fail_locked(exc)
            raise
        # A new epoch (and maybe id) for the next transaction: sequences start over.
        self.idempotence.new_epoch(doc["producer_id"], doc["producer_epoch"])
        with self._lock:
            self.state = TxnState.READY
            self.error = None
            self.partitions.clear()
            self.pending.clear()
            self.offsets_added = False
            self.resumed = False
            if committed:
                self.commits += 1
            else:
                self.aborts += 1


def normalize_offsets(offsets) -> dict[TopicPartition, int | tuple[int, str | None]]:
    """send_offsets_to_transaction's ``offsets``: a dict of TopicPartition (or (topic,
    partition)) to the next offset or (offset, metadata); or a list of objects with ``topic``,
    ``partition`` and ``offset`` (confluent-kafka's TopicPartition)."""
    out: dict[TopicPartition, int | tuple[int, str | None]] = {}
    items = offsets.items() if hasattr(offsets, "items") else ((tp, getattr(tp, "offset", None)) for tp in offsets)
    for tp, given in items:
        key = TopicPartition(tp[0], tp[1]) if isinstance(tp, tuple) else TopicPartition(tp.topic, tp.partition)
        metadata = None
        if isinstance(given, tuple):
            offset, metadata = given[0], given[1]
        elif given is not None and hasattr(given, "offset"):  # kafka-python's OffsetAndMetadata
            offset, metadata = given.offset, getattr(given, "metadata", None)
        else:
            offset = given
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise ValueError(f"offset for {key.topic}-{key.partition} must be an int >= 0, got {offset!r}")
        out[key] = offset if metadata is None else (offset, metadata)
    if not out:
        raise ValueError("send_offsets_to_transaction needs at least one offset")
    return out


def as_group_metadata(group) -> ConsumerGroupMetadata:
    """``consumer.group_metadata()``, any object with a ``group_id``, or a group id."""
    if isinstance(group, ConsumerGroupMetadata):
        return group
    if isinstance(group, str):
        return ConsumerGroupMetadata(group)
    group_id = getattr(group, "group_id", None)
    if not isinstance(group_id, str) or not group_id:
        raise TypeError(f"group_metadata must be consumer.group_metadata() or a group id, got {group!r}")
    return ConsumerGroupMetadata(
        group_id,
        getattr(group, "generation_id", -1),
        getattr(group, "member_id", ""),
        getattr(group, "group_instance_id", None),
    )


def _code(doc: dict) -> int:
    return doc["error_code"]


def _first_partition_code(doc: dict) -> int:
    """A per-partition answer's error: the request's, else the first partition's that failed."""
    if doc.get("error_code"):
        return doc["error_code"]
    for topic in doc.get("topics", ()):
        for part in topic["partitions"]:
            if part["error_code"]:
                return part["error_code"]
    return ErrorCode.NONE


def _message_of(doc: dict) -> str | None:
    if doc.get("error_message"):
        return doc["error_message"]
    for topic in doc.get("topics", ()):
        for part in topic["partitions"]:
            if part.get("error_message"):
                return part["error_message"]
    return None


def routing_key(request: m.Request, manager: TransactionManager) -> tuple[str, int] | None:
    """Where a transactional producer sends ``request``: the transaction coordinator, a group's
    coordinator, or None (the bootstrap connection: find_coordinator, metadata, produce)."""
    api = request.api
    if api in TXN_COORDINATOR_APIS or (api == "init_producer_id" and getattr(request, "transactional_id", None)):
        return manager.coordinator
    if api in GROUP_TXN_APIS:
        return manager.group_coordinators.get(request.group_id)  # type: ignore[attr-defined]
    return None
