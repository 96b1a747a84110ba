"""The producer's logic, shared by :class:`triolog.client.Producer` and :class:`triolog.client.aio.AsyncProducer`.

The flavours only decide *when* to run these operations (a sender thread, or a trio task).

Idempotence
-----------
``enable_idempotence`` (Kafka's ``enable.idempotence``, on by default as in Kafka 3.0+, which
needs ``acks=-1``, ``retries > 0`` and at most 5 requests in flight): before its first batch the
producer asks the broker for a producer id (``init_producer_id``); each batch carries that id, an
epoch and the base sequence of its first record in the v2 header. Sequences count records per
partition, are given when a batch is first drained and kept on every retry, so the broker
recognises a batch it already has and answers it with the ORIGINAL offsets instead of appending
it again. See :class:`IdempotentState` for the ordering and epoch-bump rules.

Retry rule
----------
Always retried (until ``retries`` attempts or ``delivery_timeout_ms``):

* :class:`triolog.client.errors.RequestNotSentError`: the connection failed (or could not be opened)
  before the whole request frame was written. The broker acts on whole frames only.
* ``UNKNOWN_TOPIC_OR_PARTITION`` for the partition: the broker refused it before appending. The
  metadata is refreshed first (which also asks the broker to auto-create the topic, as Kafka's
  producer does: produce itself never creates one); if the topic exists but has no such
  partition the batch fails at once, since waiting cannot make the partition appear.

An idempotent producer also retries what may or may not have been appended, since a duplicate
is answered, not stored: a connection lost after the request was written
(:class:`ResponseLostError`), ``REQUEST_TIMED_OUT`` (appended, fsync unconfirmed),
``KAFKA_STORAGE_ERROR``, and, as Kafka 3.x's idempotent producer does,
``OUT_OF_ORDER_SEQUENCE_NUMBER`` (an earlier batch of the partition failed: wait for it; or a
real gap: bump the epoch) and ``UNKNOWN_PRODUCER_ID`` (the broker lost the producer's state:
bump the epoch). ``DUPLICATE_SEQUENCE_NUMBER`` completes the batch as success with offset -1.

Without idempotence, everything else fails the batch's futures without a retry, in particular
``ResponseLostError`` and ``REQUEST_TIMED_OUT``: the records may be in the log, and sending them
again could store them twice. Records are never silently duplicated.

Retries wait ``retry_backoff_ms``; a batch past its limits fails with the last error.

In flight
---------
Up to ``max_in_flight_requests_per_connection`` produce requests (Kafka's setting) are
outstanding at once; their responses are handled in the order the requests were sent. The
default is Kafka's 5 for an idempotent producer, whose sequence numbers keep each partition's
records in order whatever fails, and 1 otherwise: without sequence numbers, a batch retried after
a *later* batch of its partition was appended lands after it (Kafka's own caveat for a
non-idempotent producer). A retried batch goes back to its partition's queue ahead of every
batch never sent, in the order the batches were made.

Like Kafka's producer, a record waits for its topic's metadata (looked up, and the topic
auto-created, on first use) also when its partition is given.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

from triolog import core
from triolog.protocol import messages as m
from triolog.protocol.errors import ErrorCode
from triolog.protocol.record_batch import CompressionType

from .errors import (
    BrokerConnectionError,
    InvalidResponseError,
    ProducerClosedError,
    RequestNotSentError,
    SerializationError,
    TransactionAbortedError,
    TriologClientError,
    error_for,
)
from .metadata import MetadataCache
from .ops import Call, Op, Sleep, check_response, now
from .serde import Serializer, as_topic_function
from .transactions import TransactionManager

#: The accumulator this process runs: compiled when built (see :mod:`triolog.core`).
accumulator_module = core.load("client.accumulator")
if TYPE_CHECKING:  # the type checker reads the pure-Python module, whose classes the compiled one has
    from .accumulator import ProducerBatch, RecordAccumulator, RecordFuture, RecordFutures
else:
    ProducerBatch = accumulator_module.ProducerBatch
    RecordAccumulator = accumulator_module.RecordAccumulator
    RecordFuture = accumulator_module.RecordFuture
    RecordFutures = accumulator_module.RecordFutures
partition_for_key = core.load("client.partitioner").partition_for_key

Headers = tuple[tuple[str, bytes | None], ...]

#: How long send()'s fast path trusts a topic's partition count before asking the metadata cache
#: again (which applies ``metadata_max_age_ms``).
KNOWN_TOPIC_S = 1.0

__all__ = ["ProducerConfig", "ProducerCore", "parse_compression"]

#: The standard library's logging, as a library should: nothing is printed unless the application
#: configures logging (warnings and errors reach stderr through logging's last resort).
_log = logging.getLogger("triolog.client.producer")

#: Kafka's bound on requests in flight for an idempotent producer (the broker keeps the last 5
#: batches per producer to answer duplicates).
MAX_IN_FLIGHT_IDEMPOTENT = 5


def check_timestamp(value, what: str) -> int:
    """A record's timestamp as the batch will carry it: epoch milliseconds, 0 .. 2^63-1 (Kafka's
    producer refuses a negative one; a larger one does not fit the batch's int64)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{what} must be an int (epoch ms) or None, got {type(value).__name__}")
    stamp = int(value)
    if not 0 <= stamp <= 2**63 - 1:
        raise ValueError(f"{what} must be between 0 and 2^63-1 (epoch ms), got {value!r}")
    return stamp


def parse_compression(value: str | int | CompressionType | None) -> CompressionType:
    """``none``/``gzip``/``snappy``/``lz4``/``zstd`` (Kafka's ``compression.type`` names)."""
    if value is None:
        return CompressionType.NONE
    if isinstance(value, str):
        try:
            return CompressionType[value.strip().upper()]
        except KeyError:
            names = ", ".join(c.kafka_name for c in CompressionType)
            raise ValueError(f"compression must be one of {names}, got {value!r}") from None
    return CompressionType(value)


@dataclass(frozen=True)
class ProducerConfig:
    """Kafka's producer settings, with Kafka's defaults (``linger_ms`` as in Kafka 4.0)."""

    acks: int = -1
    linger_ms: float = 5
    batch_size: int = 16384
    compression: CompressionType | str = CompressionType.NONE
    compression_level: int | None = None
    retries: int = 2**31 - 1
    retry_backoff_ms: int = 100
    delivery_timeout_ms: int = 120_000
    request_timeout_ms: int = 30_000
    #: How long send() may wait for metadata or buffer space before raising.
    max_block_ms: int = 60_000
    buffer_memory: int = 32 * 1024 * 1024
    metadata_max_age_ms: int = 300_000
    client_id: str = "triolog-producer"
    #: Produce requests outstanding at once on the connection (see "In flight" above). None:
    #: Kafka's 5 for an idempotent producer, 1 otherwise (which keeps records in order).
    max_in_flight_requests_per_connection: int | None = None
    #: Kafka's ``enable.idempotence`` (see "Idempotence" above). None: Kafka 3.0+'s default, on
    #: unless acks, retries or max_in_flight_requests_per_connection rule it out (then off,
    #: logged); True with such a setting is a ValueError.
    enable_idempotence: bool | None = None
    #: Kafka's ``transactional.id``: a transactional producer (see :mod:`triolog.client.transactions`),
    #: which is idempotent; None: not transactional.
    transactional_id: str | None = None
    #: Kafka's ``transaction.timeout.ms``: the coordinator aborts a transaction open longer.
    transaction_timeout_ms: int = 60_000

    def __post_init__(self) -> None:
        acks = (
            {"all": -1, "-1": -1, "1": 1, "0": 0}.get(self.acks, self.acks) if isinstance(self.acks, str) else self.acks
        )
        if acks not in (0, 1, -1):
            raise ValueError(f"acks must be 0, 1 or -1 ('all'), got {self.acks!r}")
        object.__setattr__(self, "acks", acks)
        object.__setattr__(self, "compression", parse_compression(self.compression))
        if self.batch_size < 0 or self.linger_ms < 0:
            raise ValueError("batch_size and linger_ms cannot be negative")
        in_flight = self.max_in_flight_requests_per_connection
        if in_flight is not None and (isinstance(in_flight, bool) or not isinstance(in_flight, int) or in_flight < 1):
            raise ValueError(f"max_in_flight_requests_per_connection must be an int >= 1, got {in_flight!r}")
        idempotence = self.enable_idempotence
        if idempotence is not None and not isinstance(idempotence, bool):
            raise ValueError(f"enable_idempotence must be True, False or None, got {idempotence!r}")
        # Kafka's ProducerConfig.postProcessAndValidateIdempotenceConfigs.
        conflicts = []
        if acks != -1:
            conflicts.append(f"acks={acks} (idempotence needs acks=-1, 'all')")
        if self.retries == 0:
            conflicts.append("retries=0 (idempotence needs retries > 0)")
        if in_flight is not None and in_flight > MAX_IN_FLIGHT_IDEMPOTENT:
            conflicts.append(
                f"max_in_flight_requests_per_connection={in_flight} "
                f"(idempotence needs at most {MAX_IN_FLIGHT_IDEMPOTENT})"
            )
        transactional_id = self.transactional_id
        if transactional_id is not None:
            if not isinstance(transactional_id, str) or not transactional_id:
                raise ValueError(f"transactional_id must be a non-empty str or None, got {transactional_id!r}")
            if idempotence is False:
                raise ValueError("transactional_id needs enable_idempotence (a transactional producer is idempotent)")
            if conflicts:
                raise ValueError("transactional_id conflicts with " + "; ".join(conflicts))
            idempotence = True
            timeout = self.transaction_timeout_ms
            if isinstance(timeout, bool) or not isinstance(timeout, int) or timeout < 1:
                raise ValueError(f"transaction_timeout_ms must be an int >= 1, got {timeout!r}")
        if idempotence is None:
            idempotence = not conflicts
            if conflicts:
                _log.info("idempotence disabled: %s", "; ".join(conflicts))
        elif idempotence and conflicts:
            raise ValueError("enable_idempotence=True conflicts with " + "; ".join(conflicts))
        object.__setattr__(self, "enable_idempotence", idempotence)
        if in_flight is None:
            object.__setattr__(
                self, "max_in_flight_requests_per_connection", MAX_IN_FLIGHT_IDEMPOTENT if idempotence else 1
            )


class PreparedRecord(NamedTuple):
    """A record checked and partition-resolved by prepare_op, ready for the accumulator."""

    topic: str
    partition: int | None  # None: keyless, the accumulator picks the sticky partition
    num_partitions: int | None
    key: bytes | None
    value: bytes | None
    timestamp: int
    headers: Headers
    size: int


INT32_MAX = 2**31 - 1
INT16_MAX = 2**15 - 1

#: Errors after which a batch may or may not be in the log: retried only by an idempotent
#: producer (the broker answers a duplicate with the original's offsets).
_MAYBE_APPENDED = frozenset(
    (
        ErrorCode.REQUEST_TIMED_OUT,
        ErrorCode.KAFKA_STORAGE_ERROR,
        ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
        ErrorCode.UNKNOWN_PRODUCER_ID,
    )
)


def increment_sequence(sequence: int, increment: int) -> int:
    """Kafka's DefaultRecordBatch.incrementSequence: int32 sequences wrap from 2^31-1 to 0."""
    return (sequence + increment) % (INT32_MAX + 1)


class PartitionSequences:
    """One partition's idempotence bookkeeping (Kafka's TxnPartitionEntry, no transactions)."""

    __slots__ = (
        "producer_id",
        "epoch",
        "next_sequence",
        "last_acked_sequence",
        "unresolved",
        "in_flight",
        "bump_requested",
        "maybe_appended",
        "gap_last",
    )

    def __init__(self, producer_id: int, epoch: int) -> None:
        self.producer_id = producer_id
        self.epoch = epoch
        self.next_sequence = 0
        self.last_acked_sequence = -1
        #: Batches given a sequence and not finished yet, in sequence order.
        self.unresolved: list = []
        #: Those of them written and not yet answered.
        self.in_flight: set = set()
        self.bump_requested = False
        #: Unresolved batches an attempt of which may have been appended (response lost,
        #: REQUEST_TIMED_OUT, KAFKA_STORAGE_ERROR): their sequences are never given to another batch.
        self.maybe_appended: set = set()
        #: Last sequence of a batch that failed for good after an ambiguous attempt (Kafka's
        #: "unresolved sequence"), None if none: the next batch tells whether it is in the log.
        self.gap_last: int | None = None


def _after(sequence: int, reference: int) -> bool:
    """``sequence`` comes after ``reference`` in int32 sequence space (less than 2^30 ahead)."""
    return 0 < (sequence - reference) % (INT32_MAX + 1) < (1 << 30)


class IdempotentState:
    """Kafka's TransactionManager for an idempotent producer: the producer id and epoch, the
    sequence numbers per partition, and which batch may be sent when.

    Sequences are given when a batch is first drained and kept on retries. A retried batch is
    sent only once it is its partition's first unresolved batch, and no new batch of the
    partition is sent while one is being retried: a partition's batches reach the log in
    sequence order whatever failed, and a retry finds its first attempt still among the 5 batches
    the broker remembers per producer (with at most 5 requests in flight), so it is answered with
    its original offsets.

    A sequence that may be in the log is never given to another batch (Kafka's Sender
    failBatch/markSequenceUnresolved). A batch refused for good before any append (MESSAGE_TOO_LARGE,
    CORRUPT_MESSAGE, ...: no ambiguous attempt) gives its sequences back: the batches after it
    are renumbered down, same epoch. A batch failing after an ambiguous attempt (response lost,
    REQUEST_TIMED_OUT, KAFKA_STORAGE_ERROR, cancelled) leaves an *unresolved* sequence: the
    batches after it keep their numbers; if the next one is accepted (or a duplicate) the
    failed one was in the log. Only when the broker answers the next batch (base = the
    unresolved last + 1, first unresolved of its partition) OUT_OF_ORDER_SEQUENCE_NUMBER is the
    gap real: it is then closed by a local epoch bump (KIP-360), as when the broker lost the
    producer: once none of the partition's batches is in flight, its epoch goes up by one and its
    unresolved batches (none of which can be in the log) are renumbered from sequence 0.

    Thread-safe: ``can_send`` runs under the accumulator's lock in the sender, the rest in the
    receiver; this lock is always taken after the accumulator's, never before.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.producer_id = -1
        self.producer_epoch = -1
        #: An epoch of a partition reached Short.MAX: the next bump needs a new producer id.
        self.new_id_needed = False
        self.partitions: dict = {}
        self.epoch_bumps = 0
        #: A transactional producer's: its batches carry the transactional bit, and a partition's
        #: batches wait until ``txn_gate(tp)`` says the partition is in the transaction.
        self.transactional = False
        self.txn_gate = None

    def new_epoch(self, producer_id: int, epoch: int) -> None:
        """A transaction ended with a new producer id and epoch (transaction version 2): every
        partition's sequences start over. Only between transactions, with nothing in flight."""
        with self._lock:
            self.producer_id, self.producer_epoch = producer_id, epoch
            self.new_id_needed = False
            self.partitions = {}

    @property
    def needs_producer_id(self) -> bool:
        return self.producer_id < 0 or self.new_id_needed

    def set_producer_id(self, producer_id: int, epoch: int) -> None:
        with self._lock:
            self.producer_id, self.producer_epoch = producer_id, epoch
            self.new_id_needed = False

    def _state(self, tp) -> PartitionSequences:
        state = self.partitions.get(tp)
        if state is None:
            state = self.partitions[tp] = PartitionSequences(self.producer_id, self.producer_epoch)
        return state

    def can_send(self, batch) -> bool:
        """Whether the drained head ``batch`` may be written now; a new batch gets its sequence."""
        with self._lock:
            if self.producer_id < 0:
                return False
            gate = self.txn_gate
            if gate is not None and not gate(batch.tp):
                return False  # the sender adds the partition to the transaction first
            state = self._state(batch.tp)
            if state.bump_requested:
                if state.in_flight or not self._bump(state):
                    return False
            if batch.base_sequence < 0:
                for earlier in state.unresolved:
                    if earlier.attempts:
                        # Retries first: a new batch appended meanwhile would push the first
                        # attempts of the retried ones out of the broker's 5-batch window.
                        return False
                batch.set_producer_state(state.producer_id, state.epoch, state.next_sequence, False, self.transactional)
                state.next_sequence = increment_sequence(state.next_sequence, batch.record_count)
                state.unresolved.append(batch)
            elif not state.unresolved or state.unresolved[0] is not batch:
                return False  # a retry waits until every earlier batch of its partition is resolved
            state.in_flight.add(batch)
            return True

    def _bump(self, state: PartitionSequences) -> bool:
        if state.epoch >= INT16_MAX or state.producer_id != self.producer_id:
            if state.producer_id == self.producer_id:
                self.new_id_needed = True  # the sender asks init_producer_id for a new id first
                return False
            state.producer_id, state.epoch = self.producer_id, self.producer_epoch
        else:
            state.epoch += 1
        sequence = 0
        for batch in state.unresolved:
            batch.set_producer_state(state.producer_id, state.epoch, sequence, True)
            sequence = increment_sequence(sequence, batch.record_count)
        state.next_sequence = sequence
        state.last_acked_sequence = -1
        state.bump_requested = False
        state.gap_last = None
        state.maybe_appended.clear()
        self.epoch_bumps += 1
        _log.info(
            "producer %d bumped its epoch to %d for a partition of %s (%d batches renumbered)",
            state.producer_id,
            state.epoch,
            batch_topic(state),
            len(state.unresolved),
        )
        return True

    def answered(self, batch) -> None:
        """The batch's request got its outcome (it is finished or goes back to its queue)."""
        with self._lock:
            state = self.partitions.get(batch.tp)
            if state is not None:
                state.in_flight.discard(batch)

    def acknowledged(self, batch) -> None:
        with self._lock:
            state = self.partitions.get(batch.tp)
            if state is None or batch not in state.unresolved:
                return
            state.unresolved.remove(batch)
            state.maybe_appended.discard(batch)
            if batch.producer_epoch == state.epoch and batch.producer_id == state.producer_id:
                last = increment_sequence(batch.base_sequence, batch.record_count - 1)
                if state.last_acked_sequence < 0 or _after(last, state.last_acked_sequence):
                    state.last_acked_sequence = last  # only forward (a late answer never moves it back)
                if state.gap_last is not None and _after(batch.base_sequence, state.gap_last):
                    state.gap_last = None  # accepted after the unresolved one: it was in the log

    def maybe_appended(self, batch) -> None:
        """An attempt of ``batch`` had an ambiguous outcome: it may be in the log."""
        with self._lock:
            state = self.partitions.get(batch.tp)
            if state is not None and batch in state.unresolved:
                state.maybe_appended.add(batch)

    def failed(self, batch, definite: bool = False) -> None:
        """The batch failed for good. ``definite``: its last attempt was refused before any append.
        Never appended (definite, no ambiguous attempt): the later batches take its sequences.
        Maybe appended: its sequences stay taken, an unresolved gap (see the class)."""
        with self._lock:
            state = self.partitions.get(batch.tp)
            if state is None or batch not in state.unresolved:
                return
            index = state.unresolved.index(batch)
            state.unresolved.remove(batch)
            ambiguous = batch in state.maybe_appended or not definite
            state.maybe_appended.discard(batch)
            if batch.producer_epoch != state.epoch or batch.producer_id != state.producer_id:
                return
            if ambiguous:
                last = increment_sequence(batch.base_sequence, batch.record_count - 1)
                if state.gap_last is None or _after(last, state.gap_last):
                    state.gap_last = last
                return
            # Nothing after it can be in the log (the broker needs contiguous sequences):
            # renumber the later batches down; one in flight is refused and resent renumbered.
            sequence = batch.base_sequence
            for later in state.unresolved[index:]:
                later.set_producer_state(state.producer_id, state.epoch, sequence, True)
                sequence = increment_sequence(sequence, later.record_count)
            state.next_sequence = sequence

    def reaction(self, batch, code: int, sent: tuple[int, int], log_start_offset: int) -> bool:
        """Kafka 3.x's reaction to OUT_OF_ORDER_SEQUENCE_NUMBER / UNKNOWN_PRODUCER_ID for an
        idempotent producer (TransactionManager.canRetry): always a retry, with an epoch bump
        for the partition when the broker really misses the sequences before this batch."""
        with self._lock:
            state = self.partitions.get(batch.tp)
            if state is None or sent != (batch.producer_epoch, batch.base_sequence) or batch.sequence_reset:
                return True  # renumbered since it was sent: resend with its new numbers
            if code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER:
                if batch.base_sequence == increment_sequence(state.last_acked_sequence, 1):
                    state.bump_requested = True  # the next batch expected, refused: a real gap
                elif (
                    state.gap_last is not None
                    and state.unresolved
                    and state.unresolved[0] is batch
                    and batch.base_sequence == increment_sequence(state.gap_last, 1)
                ):
                    state.bump_requested = True  # the unresolved batch is not in the log: a real gap
            elif code == ErrorCode.UNKNOWN_PRODUCER_ID and log_start_offset != -1:
                state.bump_requested = True  # the broker lost this producer (retention, expiry)
            return True


def batch_topic(state: PartitionSequences) -> str | None:
    return state.unresolved[0].tp.topic if state.unresolved else None


class ProducerCore:
    """``key_serializer``/``value_serializer``: called with every non-None key/value given to
    send(), as kafka-python's; they return bytes (or str, sent as UTF-8). None is never passed
    to them: it stays a null key or a tombstone."""

    def __init__(
        self,
        config: ProducerConfig,
        *,
        key_serializer: Serializer | None = None,
        value_serializer: Serializer | None = None,
    ) -> None:
        self.config = config
        self.key_serializer = as_topic_function("key_serializer", key_serializer, "serialize")
        self.value_serializer = as_topic_function("value_serializer", value_serializer, "serialize")
        self.metadata = MetadataCache(
            max_age_s=config.metadata_max_age_ms / 1000,
            request_timeout_s=config.request_timeout_ms / 1000,
            retry_backoff_s=config.retry_backoff_ms / 1000,
            allow_auto_create=True,
        )
        self.accumulator = RecordAccumulator(batch_size=config.batch_size, linger_s=config.linger_ms / 1000)
        self.accumulator.configure_fast_path(
            self.key_serializer is None and self.value_serializer is None, config.buffer_memory, config.acks
        )
        #: The sequence bookkeeping of an idempotent producer (None when idempotence is off).
        self.idempotence = IdempotentState() if config.enable_idempotence else None
        #: What drain() asks before taking a partition's head batch.
        self.can_send = None if self.idempotence is None else self.idempotence.can_send
        #: A transactional producer's transaction state (None otherwise).
        self.txn: TransactionManager | None = None
        if config.transactional_id is not None:
            assert self.idempotence is not None  # (ProducerConfig makes a transactional producer idempotent)
            self.txn = TransactionManager(
                config.transactional_id, config.transaction_timeout_ms, self.idempotence, config
            )
        #: Counters (Kafka's producer metrics record-retry-total and friends), see metrics().
        self.batch_retries = 0
        self.record_retries = 0

    def metrics(self) -> dict[str, int]:
        """The producer's own counters, by Kafka's metric names where one exists."""
        return {
            "record-retry-total": self.record_retries,
            "batch-retry-total": self.batch_retries,
            "producer-id": -1 if self.idempotence is None else self.idempotence.producer_id,
            "epoch-bump-total": 0 if self.idempotence is None else self.idempotence.epoch_bumps,
        }

    @property
    def needs_producer_id(self) -> bool:
        """The sender must run init_producer_id_op before draining (a transactional producer's
        id comes from init_transactions instead)."""
        return self.txn is None and self.idempotence is not None and self.idempotence.needs_producer_id

    def init_producer_id_op(self) -> Op[None]:
        """Get a producer id and epoch (Kafka's InitProducerId with a null transactional id),
        retrying retriable errors until ``max_block_ms``."""
        config = self.config
        idempotence = self.idempotence
        assert idempotence is not None  # (needs_producer_id: an idempotent producer's)
        deadline = now() + config.max_block_ms / 1000
        while True:
            request = m.InitProducerIdRequest(id=0, transactional_id=None, transaction_timeout_ms=INT32_MAX)
            try:
                doc = yield Call(request, config.request_timeout_ms / 1000)
                check_response(doc)
            except TriologClientError as exc:
                if (
                    exc.retriable or isinstance(exc, BrokerConnectionError)
                ) and now() + config.retry_backoff_ms / 1000 < deadline:
                    yield Sleep(config.retry_backoff_ms / 1000)
                    continue
                raise
            idempotence.set_producer_id(doc["producer_id"], doc["producer_epoch"])
            _log.debug("producer id %d, epoch %d assigned", doc["producer_id"], doc["producer_epoch"])
            return

    def fail_queued(self, error: BaseException) -> None:
        """Fail every batch not yet sent with ``error`` (init_producer_id failed)."""
        for batch in self.accumulator.take_all():
            self._fail(batch, error, definite=True)

    # -- send() ------------------------------------------------------------------------------

    def prepare_cached(
        self, topic: str, value, key=None, headers=(), partition: int | None = None, timestamp_ms: int | None = None
    ) -> PreparedRecord | None:
        """prepare_op without I/O (send()'s fast path): the record, or None when the topic's
        metadata must be fetched first."""
        # Like Kafka's producer (waitOnMetadata), also a record for a given partition waits for
        # its topic's metadata: a topic being auto-created is looked up (and created) first,
        # not sent to, refused and retried.
        description = self.metadata.get(topic)
        if description is None:
            return None
        return self._prepare(topic, value, key, headers, partition, timestamp_ms, description)

    def prepare_op(
        self, topic: str, value, key=None, headers=(), partition: int | None = None, timestamp_ms: int | None = None
    ) -> Op[PreparedRecord]:
        """Check and encode one record and resolve its partition (metadata only when needed)."""
        if not isinstance(topic, str) or not topic:
            raise TypeError(f"topic must be a non-empty str, got {topic!r}")
        description = yield from self.metadata.topic_op(topic, self.config.max_block_ms / 1000)
        return self._prepare(topic, value, key, headers, partition, timestamp_ms, description)

    def _prepare(self, topic, value, key, headers, partition, timestamp_ms, description) -> PreparedRecord:
        if not isinstance(topic, str) or not topic:
            raise TypeError(f"topic must be a non-empty str, got {topic!r}")
        if self.key_serializer is not None and key is not None:
            key = self._serialize(self.key_serializer, topic, headers, key, "key")
        if self.value_serializer is not None and value is not None:
            value = self._serialize(self.value_serializer, topic, headers, value, "value")
        key, value = to_bytes(key, "key"), to_bytes(value, "value")
        headers = normalize_headers(headers)
        timestamp = int(time.time() * 1000) if timestamp_ms is None else check_timestamp(timestamp_ms, "timestamp_ms")
        partition_count = len(description.partitions)
        self.accumulator.learn(topic, partition_count, now() + KNOWN_TOPIC_S)
        num_partitions: int | None = partition_count
        if partition is not None:
            if isinstance(partition, bool) or not isinstance(partition, int) or partition < 0:
                raise ValueError(f"partition must be an int >= 0, got {partition!r}")
            num_partitions = None
        else:
            if key is not None:
                partition = partition_for_key(key, num_partitions)
        size = 80 + len(key or b"") + len(value or b"")
        if headers:
            size += sum(len(k) + len(v or b"") for k, v in headers)
        return PreparedRecord(topic, partition, num_partitions, key, value, timestamp, headers, size)

    @staticmethod
    def _serialize(serializer, topic: str, headers, data, what: str):
        try:
            out = serializer(topic, list(headers), data)
        except Exception as exc:
            raise SerializationError(
                f"{what}_serializer failed on {type(data).__name__}: {type(exc).__name__}: {exc}", topic=topic
            ) from exc
        if out is not None and not isinstance(out, (bytes, str, bytearray, memoryview)):
            raise SerializationError(
                f"{what}_serializer must return bytes, str or None, got {type(out).__name__}", topic=topic
            )
        return out

    def append(self, record: PreparedRecord) -> RecordFuture:
        """Accumulate; the record's future (the accumulator wakes the sender when needed)."""
        return self.accumulator.append(
            record.topic,
            record.partition,
            record.num_partitions,
            record.key,
            record.value,
            record.timestamp,
            record.headers,
            now(),
        )

    # -- send_many() ---------------------------------------------------------------------------

    def check_many(self, topic, values, keys, headers, partition, timestamps):
        """send_many's arguments checked and converted, before any record is appended: a bad one
        raises (naming its index) and nothing is queued. Returns (values, keys, headers,
        timestamps, estimated bytes), each list or None."""
        if not isinstance(topic, str) or not topic:
            raise TypeError(f"topic must be a non-empty str, got {topic!r}")
        if partition is not None and (isinstance(partition, bool) or not isinstance(partition, int) or partition < 0):
            raise ValueError(f"partition must be an int >= 0, got {partition!r}")
        if not isinstance(values, list):
            values = list(values)
        count = len(values)

        def column(given, what):
            if given is None:
                return None
            given = given if isinstance(given, list) else list(given)
            if len(given) != count:
                raise ValueError(f"{what} has {len(given)} items for {count} values")
            return given

        keys, headers, timestamps = column(keys, "keys"), column(headers, "headers"), column(timestamps, "timestamps")
        key_serializer, value_serializer = self.key_serializer, self.value_serializer
        if headers is not None:
            headers = [normalize_headers_at(h, i) for i, h in enumerate(headers)]
            if not any(headers):
                headers = None
        if value_serializer is not None:
            values = [
                None
                if v is None
                else self._serialize(value_serializer, topic, headers[i] if headers else (), v, "value")
                for i, v in enumerate(values)
            ]
        if keys is not None and key_serializer is not None:
            keys = [
                None if k is None else self._serialize(key_serializer, topic, headers[i] if headers else (), k, "key")
                for i, k in enumerate(keys)
            ]
        total = 80 * count + _bytes_in_place(values, "value")
        if keys is not None:
            total += _bytes_in_place(keys, "key")
            if set(map(type, keys)) <= _NONE:
                keys = None
        if timestamps is not None:
            for i, stamp in enumerate(timestamps):
                if stamp is None:
                    timestamps[i] = int(time.time() * 1000)
                elif isinstance(stamp, bool) or not isinstance(stamp, (int, float)):
                    raise TypeError(f"timestamps[{i}] must be an int (epoch ms) or None, got {type(stamp).__name__}")
                else:
                    timestamps[i] = check_timestamp(stamp, f"timestamps[{i}]")
        if headers is not None:
            total += sum(len(k) + len(v or b"") for h in headers for k, v in h)
        return values, keys, headers, timestamps, total

    def num_partitions_cached(self, topic: str) -> int | None:
        description = self.metadata.get(topic)
        return None if description is None else len(description.partitions)

    def topic_op(self, topic: str) -> Op[int]:
        description = yield from self.metadata.topic_op(topic, self.config.max_block_ms / 1000)
        return len(description.partitions)

    def append_many(self, topic, values, keys, headers, partition, timestamps, num_partitions) -> RecordFutures:
        return self.accumulator.append_many(topic, values, keys, headers, partition, timestamps, num_partitions, now())

    # -- the sender ----------------------------------------------------------------------------

    def drain(self, at: float, leader_of=None) -> list[ProducerBatch]:
        """The ready batches for one produce request: with ``leader_of(topic, partition)`` (the
        node a partition's requests go to), only those of the leader of the first batch taken,
        so that a request goes to one broker whole; the others are taken by the next drain."""
        can_send = self.can_send
        if leader_of is None:
            return self.accumulator.drain(at, can_send)
        chosen: list = []

        def one_leader(batch) -> bool:
            node = leader_of(*batch.tp)
            if chosen and node != chosen[0]:
                return False
            if can_send is not None and not can_send(batch):
                return False
            if not chosen:
                chosen.append(node)
            return True

        return self.accumulator.drain(at, one_leader)

    def produce_request(self, batches: list[ProducerBatch]) -> m.ProduceRequest:
        by_topic: dict[str, list[m.ProducePartition]] = {}
        config = self.config
        for batch in batches:
            records = batch.encode(config.compression, config.compression_level)
            # Framed without a copy: the connection sends the batch's own bytes (see prepare_parts).
            framed = m.ExternalBin(len(records), records)
            by_topic.setdefault(batch.tp.topic, []).append(
                m.ProducePartition(partition=batch.tp.partition, records=framed)  # type: ignore[arg-type]  # (messages says bytes)
            )
        topics = tuple(m.ProduceTopic(name=name, partitions=tuple(parts)) for name, parts in by_topic.items())
        return m.ProduceRequest(
            id=0,
            acks=config.acks,
            timeout_ms=config.request_timeout_ms,
            topics=topics,
            transactional_id=config.transactional_id,
        )

    def send_op(self, batches: list[ProducerBatch]) -> Op[None]:
        """One produce round trip for ``batches`` (one per partition): every batch ends completed,
        failed, or put back for a retry. Never raises: errors go to the records' futures."""
        try:
            yield from self._send_op(batches)
        except GeneratorExit:  # the driver was cancelled mid-request: the outcome is unknown
            self.fail_unfinished(
                batches,
                ProducerClosedError(
                    "the producer stopped before the broker answered; the records may or may not be in the log"
                ),
            )
            raise
        except BaseException as exc:
            self.fail_unfinished(batches, exc)
            if not isinstance(exc, Exception):
                raise

    def _send_op(self, batches: list[ProducerBatch]) -> Op[None]:
        request = self.produce_request(batches)
        idempotence = self.idempotence
        # What each batch carried in this request (an epoch bump may renumber it meanwhile).
        sent = {batch: (batch.producer_epoch, batch.base_sequence) for batch in batches} if idempotence else None
        timeout_s = self.config.request_timeout_ms / 1000 + 5.0  # the broker's own wait, plus slack
        try:
            doc = yield Call(request, timeout_s)
        except TriologClientError as exc:  # RequestNotSentError is retriable; ResponseLostError only if idempotent
            for batch in batches:
                if idempotence is not None and not isinstance(exc, RequestNotSentError):
                    idempotence.maybe_appended(batch)
                self._retry_or_fail(batch, exc)
            return
        if doc is None:  # acks=0: no response, no offsets (Kafka reports -1)
            for batch in batches:
                self._complete(batch, -1, -1)
            return
        try:
            check_response(doc)
        except TriologClientError as exc:
            self.fail_unfinished(batches, exc)
            return
        results = {(t["name"], p["partition"]): p for t in doc["topics"] for p in t["partitions"]}
        unknown: list[tuple[ProducerBatch, TriologClientError]] = []
        for batch in batches:
            result = results.get(batch.tp)
            if result is None:
                self._fail(
                    batch,
                    InvalidResponseError(
                        "the produce response has no result for this partition",
                        topic=batch.tp.topic,
                        partition=batch.tp.partition,
                    ),
                )
            elif result["error_code"] == ErrorCode.NONE:
                # A retried batch the broker already had is answered with its original offsets.
                self._complete(batch, result["base_offset"], result["log_append_time"])
            elif result["error_code"] == ErrorCode.DUPLICATE_SEQUENCE_NUMBER and idempotence is not None:
                # Kafka's client: appended before, offsets no longer known (an old broker's answer).
                self._complete(batch, -1, -1)
            else:
                code = result["error_code"]
                error = error_for(code, result.get("error_message"), topic=batch.tp.topic, partition=batch.tp.partition)
                if code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                    unknown.append((batch, error))
                elif idempotence is not None and code in _MAYBE_APPENDED:
                    if code in (ErrorCode.REQUEST_TIMED_OUT, ErrorCode.KAFKA_STORAGE_ERROR):
                        idempotence.maybe_appended(batch)
                    if code in (ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, ErrorCode.UNKNOWN_PRODUCER_ID):
                        assert sent is not None  # (made with idempotence)
                        idempotence.reaction(batch, code, sent[batch], result.get("log_start_offset", -1))
                    self._retry_or_fail(batch, error)
                elif error.retriable:
                    # Refused before any append (NOT_LEADER_OR_FOLLOWER, LEADER_NOT_AVAILABLE,
                    # FENCED/UNKNOWN_LEADER_EPOCH, NOT_ENOUGH_REPLICAS...): the connection forgot the
                    # leader it sent to (see triolog.client.cluster) and asks again before the retry.
                    self._retry_or_fail(batch, error)
                else:
                    self._fail(batch, error, definite=True)  # refused before any append
        if unknown:
            yield from self._handle_unknown_op(unknown)

    def _handle_unknown_op(self, unknown: list[tuple[ProducerBatch, TriologClientError]]) -> Op[None]:
        topics = sorted({batch.tp.topic for batch, _ in unknown})
        for topic in topics:
            self.metadata.invalidate(topic)
            self.accumulator.forget(topic)
        try:
            entries = yield from self.metadata.fetch_op(topics)
        except TriologClientError:
            entries = {}
        for batch, error in unknown:
            entry = entries.get(batch.tp.topic)
            if entry is not None and entry["error_code"] == ErrorCode.NONE:
                if batch.tp.partition not in {p["partition"] for p in entry["partitions"]}:
                    self._fail(batch, error, definite=True)  # the topic exists without this partition
                    continue
            self._retry_or_fail(batch, error)

    def _retriable(self, error: TriologClientError) -> bool:
        if error.retriable:
            return True
        # Idempotent: also what may have been appended (the broker dedupes the retry).
        return self.idempotence is not None and (
            isinstance(error, BrokerConnectionError) or error.code in _MAYBE_APPENDED
        )

    def _retry_or_fail(self, batch: ProducerBatch, error: TriologClientError) -> None:
        config = self.config
        retry_at = now() + config.retry_backoff_ms / 1000
        if (
            self._retriable(error)
            and batch.attempts < config.retries
            and retry_at < batch.created + config.delivery_timeout_ms / 1000
        ):
            if self.idempotence is not None:
                self.idempotence.answered(batch)  # before it is queued: the sender may take it at once
            self.batch_retries += 1
            self.record_retries += batch.record_count
            self.accumulator.requeue(batch, retry_at)
        else:
            # Refused (not sent, not leader...) unless the last answer was ambiguous; an earlier
            # ambiguous attempt is remembered by the idempotence state. Kafka marks a batch out of
            # retries unresolved: OUT_OF_ORDER_SEQUENCE_NUMBER / UNKNOWN_PRODUCER_ID too.
            definite = isinstance(error, RequestNotSentError) or (
                not isinstance(error, BrokerConnectionError) and error.code not in _MAYBE_APPENDED
            )
            self._fail(batch, error, definite=definite)

    def _complete(self, batch: ProducerBatch, base_offset: int, log_append_time: int) -> None:
        if self.idempotence is not None:
            self.idempotence.answered(batch)
            self.idempotence.acknowledged(batch)
        if self.accumulator.finish(batch):
            batch.complete(base_offset, log_append_time)

    def _fail(self, batch: ProducerBatch, error: BaseException, definite: bool = False) -> None:
        """``definite``: the batch's last attempt was refused before any append (or it was never
        sent); otherwise (cancelled, no answer...) it may be in the log. A transactional
        producer's transaction can then only be aborted."""
        if self.idempotence is not None:
            self.idempotence.answered(batch)
            self.idempotence.failed(batch, definite)
        if self.txn is not None:
            self.txn.fail(error)
        if self.accumulator.finish(batch):
            batch.fail(error)

    def fail_unfinished(self, batches: list[ProducerBatch], error: BaseException) -> None:
        for batch in batches:
            self._fail(batch, error)

    def drop_transaction(self) -> None:
        """abort_transaction: the batches not sent yet fail (TransactionAbortedError)."""
        for batch in self.accumulator.take_all():
            self._fail(
                batch,
                TransactionAbortedError(
                    "the transaction was aborted before the record was sent",
                    topic=batch.tp.topic,
                    partition=batch.tp.partition,
                ),
                definite=True,
            )

    def abort_queued(self, reason: str) -> None:
        """Fail every batch not yet sent (close() gave up waiting)."""
        for batch in self.accumulator.take_all():
            self._fail(
                batch, ProducerClosedError(reason, topic=batch.tp.topic, partition=batch.tp.partition), definite=True
            )  # queued, not in flight (an earlier ambiguous attempt is remembered)


_BYTES = frozenset((bytes,))
_NONE = frozenset((type(None),))


def normalize_headers(headers) -> Headers:
    """Headers as Kafka allows them: ordered (str, bytes|None) pairs, duplicates kept."""
    if not headers:
        return ()
    items = list(headers.items()) if hasattr(headers, "items") else list(headers)
    out = []
    for item in items:
        header_key, header_value = item
        if not isinstance(header_key, str):
            raise TypeError(f"header keys are str, got {type(header_key).__name__}")
        out.append((header_key, to_bytes(header_value, "header value")))
    return tuple(out)


def to_bytes(data, what: str) -> bytes | None:
    """bytes as given; str as UTF-8; None stays None (a null key, or a tombstone value)."""
    if data is None or type(data) is bytes:
        return data
    if isinstance(data, str):
        return data.encode("utf-8")
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data)
    raise TypeError(f"{what} must be bytes, str or None, got {type(data).__name__}")


def _bytes_in_place(items: list, what: str) -> int:
    """Turn every item of ``items`` (a list of values or of keys) into bytes or None, in place, and
    return their total length. The common case (all bytes) is checked and summed at C speed, not
    item by item in Python."""
    if set(map(type, items)) <= _BYTES:
        return sum(map(len, items))
    total = 0
    for i, item in enumerate(items):
        if item is not None and type(item) is not bytes:
            items[i] = item = _to_bytes_at(item, what, i)
        total += 0 if item is None else len(item)
    return total


def _to_bytes_at(data, what: str, index: int) -> bytes | None:
    try:
        return to_bytes(data, what)
    except TypeError as exc:
        raise TypeError(f"{what}s[{index}]: {exc}") from None


def normalize_headers_at(headers, index: int) -> Headers:
    try:
        return normalize_headers(headers)
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"headers[{index}]: {exc}") from None
