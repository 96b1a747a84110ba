"""Log: one partition's append-only log of segments (Kafka's UnifiedLog + LocalLog).

Offsets: log start offset (first readable), high watermark (what consumers may read) and log
end offset (next to assign). On a single node the high watermark is the log end offset right
after each append, as in Kafka with one in-sync replica. A ``replicated`` log leaves the high
watermark to its replication (update_high_watermark): appends never move it. The recovery point
is the offset below which everything is known to be fsynced; a crash re-validates only what
lies above it.

Replication: a follower appends the leader's batches unchanged (append_as_follower) and cuts
its log back to where it agrees with the leader (truncate_to, by leader epoch).

Idempotent producers: every batch with a producer id is checked against the partition's producer
state (producer_state.py) under the lock before anything is written; a retried batch is answered
with its original offsets. The state is snapshotted to ``.snapshot`` files at rolls and at close.

Transactions: the producer state tracks each producer's open transaction; the coordinator ends
one with append_end_txn_marker (producers may not send control batches). An ABORT appends an
entry to the active segment's ``.txnindex`` (transaction_index.py). The last stable offset (LSO)
is the first offset of the oldest open (or not yet replicated) transaction, capped by the high
watermark; a read_committed read (FetchIsolation.TXN_COMMITTED) stops there and lists the aborted
transactions overlapping what it returns, from the ``.txnindex`` files. Followers and recovery
replay markers the same way, so a follower ends with the leader's ``.txnindex`` and LSO.

Threading: every method may be called from any thread. Mutations and read planning hold the
log's lock for microseconds; fsync runs outside it on duplicated descriptors, so appends never
wait for a flush they did not ask for.
"""

from __future__ import annotations

import bisect
import enum
import logging
import os
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple, NoReturn

from triolog.config.log_config import LogConfig
from triolog.protocol.errors import CorruptRecordError
from triolog.protocol.record_batch import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_MASK,
    CONTROL_FLAG,
    CRC_OFFSET,
    MAX_TIMESTAMP_OFFSET,
    NO_TIMESTAMP,
    PRODUCER_FIELDS,
    PRODUCER_ID_OFFSET,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_FLAG,
    CompressionType,
    check_batch,
    compute_crc,
    fields_struct,
    split_batches,
)
from triolog.protocol.records import (
    ControlRecordType,
    decode_batch,
    encode_end_txn_marker,
    parse_control_record_key,
    parse_end_txn_marker_value,
)

from . import filenames
from .checkpoints import LEADER_EPOCH_CHECKPOINT, LeaderEpochCheckpointFile, LeaderEpochFileCache
from .clock import SYSTEM_CLOCK, Clock
from .errors import OffsetOutOfRangeError, OffsetsOutOfOrderError, StorageError, UnexpectedAppendOffsetError
from .fs import OS_FS, FileSystem, is_disk_full, is_out_of_descriptors
from .index import OffsetIndex, TimeIndex
from .loader import LoadedLogOffsets, LogLoader
from .producer_state import (
    CompletedTxn,
    ProducerStateManager,
    VerificationGuard,
    check_append,
    check_end_txn_marker,
    check_producer_epoch,
    check_txn_state,
    increment_sequence,
)
from .segment import (
    FetchDataInfo,
    LogOffsetMetadata,
    LogSegment,
    TimestampAndOffset,
    rolling_jitter_ms,
)
from .segment_deleter import DeletedFile, SegmentDeleter
from .segments import LogSegments
from .validator import ValidatedBatch, target_codec, validate_and_assign_offsets

logger = logging.getLogger(__name__)

_BASE_OFFSET = fields_struct("base_offset")
_ATTRIBUTES = fields_struct("attributes")
_MAX_TIMESTAMP = fields_struct("max_timestamp")
_CRC = fields_struct("crc")
#: Kafka's producer.id.expiration.ms default (the broker passes its setting).
DEFAULT_PRODUCER_ID_EXPIRATION_MS = 86_400_000

EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3

#: Why retention deleted a segment (Kafka's SegmentDeletionReason), a metric label.
RETENTION_MS_BREACH = "retention_ms"
RETENTION_BYTES_BREACH = "retention_bytes"
LOG_START_OFFSET_BREACH = "log_start_offset"
DELETION_REASONS = (RETENTION_MS_BREACH, RETENTION_BYTES_BREACH, LOG_START_OFFSET_BREACH)
#: Segments removed by truncate_to (not a retention reason: the per-reason metric leaves them out).
TRUNCATION = "truncation"


class FetchIsolation(enum.Enum):
    """How far a read may go (Kafka's FetchIsolation): a follower reads to the log end offset,
    a read_uncommitted consumer to the high watermark, a read_committed one to the last stable
    offset (and is told the aborted transactions in what it reads)."""

    LOG_END = "log_end"
    HIGH_WATERMARK = "high_watermark"
    TXN_COMMITTED = "txn_committed"


class ProducerStateInfo(NamedTuple):
    """One producer id's state on a partition, as DescribeProducers reports it."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    #: First offset of its open transaction; -1 without one.
    current_txn_start_offset: int


def end_txn_marker_of(batch) -> tuple[bool, int] | None:
    """(is abort, coordinator epoch) of a COMMIT/ABORT control batch's bytes; None for an empty
    control batch (cleaned) or another control type. Read for control batches only."""
    decoded = decode_batch(batch)
    if not decoded.records:
        return None
    record = decoded.records[0]
    _, control_type = parse_control_record_key(record.key)
    if control_type not in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
        return None
    return control_type == ControlRecordType.ABORT, parse_end_txn_marker_value(record.value)


class LogAppendInfo(NamedTuple):
    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    log_append_time_ms: int
    log_start_offset: int
    record_count: int
    valid_bytes: int
    roll_reason: str | None = None
    #: The batch repeats one its idempotent producer already wrote: nothing was appended, and
    #: the offsets (and append time) are the original ones.
    duplicate: bool = False


class Log:
    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        segments: LogSegments,
        offsets: LoadedLogOffsets,
        clock: Clock,
        leader_epoch_cache: LeaderEpochFileCache,
        segment_deleter: SegmentDeleter | None = None,
        fs: FileSystem = OS_FS,
        producer_state_manager: ProducerStateManager | None = None,
    ):
        self.directory = Path(directory)
        self.fs = fs
        #: Idempotent producers' last batches (dedupe and sequence checks); changed under the lock.
        self.producer_state_manager = (
            producer_state_manager
            if producer_state_manager is not None
            else ProducerStateManager(self.directory, DEFAULT_PRODUCER_ID_EXPIRATION_MS, fs)
        )
        #: Duplicate batches answered with their original offsets since startup (a metric).
        self.duplicate_batches = 0
        self.topic, self.partition = filenames.parse_topic_partition_name(self.directory.name)
        self._config = config
        self._segments = segments
        self._active = segments.active_segment  # cached: the append path reads it every time
        self._clock = clock
        self.leader_epoch_cache = leader_epoch_cache
        self._latest_epoch = leader_epoch_cache.latest_epoch
        self._lock = threading.RLock()
        self._log_start_offset = offsets.log_start_offset
        self._next_offset = offsets.next_offset
        self._high_watermark = offsets.next_offset
        #: Replicated (a cluster's partition): the high watermark moves only by
        #: update_high_watermark / maybe_increment_high_watermark, never by appends.
        self.replicated = False
        #: (limit, segment, position): where reads bounded below the log end stop (see _read_bound).
        self._read_bound_cache: tuple[int, LogSegment, int] | None = None
        self._recovery_point = offsets.recovery_point
        self._pending_flush_offset = offsets.recovery_point
        #: Segments a roll sealed (final time index entry, trimmed files) that no fsync has covered
        #: since, by base offset: the recovery point may not pass them until one does.
        self._unsynced_sealed: dict[int, LogSegment] = {}
        #: Segments a roll left behind with their final time index entry but not yet sealed
        #: (indexes trimmed and unmapped, .log trimmed and closed): the next flush seals them, off
        #: the appending request. Always a subset of ``_unsynced_sealed``.
        self._unsealed: dict[int, LogSegment] = {}
        #: Empty files made ahead of the next roll (filenames.spare_files), renamed to the new
        #: segment's names then: a rename costs the file system a fraction of a create. Made by
        #: the flush that follows a roll, so only logs that roll have them.
        self._spare: tuple[Path, Path, Path] | None = None
        self._spare_lock = threading.Lock()
        self._rolled = False
        #: (records, leader epoch, config, ValidatedBatch) try_append_as_leader validated and gave
        #: back: the append_as_leader of the same records object takes it instead of validating again.
        self._validated_ahead: tuple | None = None
        self._last_flush_ms = clock.milliseconds()
        self.load_stats = offsets
        self.roll_counts: Counter[str] = Counter()
        #: Files of removed segments go through this, ``file.delete.delay.ms`` after their removal.
        self.segment_deleter = segment_deleter if segment_deleter is not None else SegmentDeleter(clock)
        #: Segments and bytes removed by retention since startup, by reason (a metric).
        self.deleted_segment_counts: Counter[str] = Counter()
        self.deleted_bytes: Counter[str] = Counter()
        self.offline = False
        #: Called with (log, error) when an I/O error takes the log offline (the LogManager
        #: takes the whole log directory offline then, as Kafka's LogDirFailureChannel does).
        self.on_offline: Callable[[Log, OSError], None] | None = None
        self._closed = False
        self._timestamp_prefix: list[int] = []
        self._timestamp_prefix_key: tuple[int, int, int] | None = None

    # -- opening -----------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        directory: Path,
        config: LogConfig,
        *,
        clock: Clock = SYSTEM_CLOCK,
        recovery_point: int = 0,
        log_start_offset: int = 0,
        had_clean_shutdown: bool = False,
        segment_deleter: SegmentDeleter | None = None,
        fs: FileSystem = OS_FS,
        producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    ) -> Log:
        """Open (creating if needed) the log in ``directory``, recovering it if it was not shut down cleanly.

        Producer state comes from the newest ``.snapshot`` at or below the recovered log end
        offset plus a replay of the batch headers after it (Kafka's rebuildProducerState).
        A directory this creates is not yet durable in its parent: the LogManager fsyncs the
        log dir before the creation is acknowledged.
        """
        directory = Path(directory)
        filenames.parse_topic_partition_name(directory.name)
        fs.mkdir(directory)
        cache = LeaderEpochFileCache(LeaderEpochCheckpointFile(directory / LEADER_EPOCH_CHECKPOINT, fs))
        segments = LogSegments()

        def on_recovered_batch(header) -> None:
            if header.partition_leader_epoch >= 0:
                cache.assign(header.partition_leader_epoch, header.base_offset)

        loader = LogLoader(
            directory,
            config,
            clock,
            segments,
            log_start_offset_checkpoint=log_start_offset,
            recovery_point_checkpoint=recovery_point,
            had_clean_shutdown=had_clean_shutdown,
            on_recovered_batch=on_recovered_batch,
            fs=fs,
        )
        offsets = loader.load()
        cache.truncate_from_end(offsets.next_offset)
        cache.truncate_from_start(offsets.log_start_offset)
        started = time.perf_counter()
        producer_state = ProducerStateManager(directory, producer_id_expiration_ms, fs)
        producer_state.remove_stray_snapshots(segment.base_offset for segment in segments)
        if loader.recovered:
            rebuild_txn_indexes(
                directory,
                segments,
                loader.recovered,
                offsets.log_start_offset,
                producer_id_expiration_ms,
                clock.milliseconds(),
                fs,
            )
        offsets.producer_batches_replayed = rebuild_producer_state(
            producer_state, segments, offsets.log_start_offset, offsets.next_offset, clock.milliseconds()
        )
        offsets.producer_state_load_ms = (time.perf_counter() - started) * 1000
        offsets.producers_loaded = len(producer_state.producers)
        return cls(directory, config, segments, offsets, clock, cache, segment_deleter, fs, producer_state)

    # -- state -------------------------------------------------------------------------------

    @property
    def config(self) -> LogConfig:
        return self._config

    def update_config(self, config: LogConfig) -> None:
        """Apply new topic-level settings; they take effect from the next append or roll."""
        with self._lock:
            self._config = config

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._next_offset

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    def update_high_watermark(self, offset: int) -> int:
        """Set the high watermark, clamped to [log start offset, log end offset] (Kafka's
        updateHighWatermark: a checkpoint at startup, a follower taking its leader's); the
        value set."""
        with self._lock:
            self._high_watermark = min(max(offset, self._log_start_offset), self._next_offset)
            self.producer_state_manager.on_high_watermark_updated(self._high_watermark)
            return self._high_watermark

    def maybe_increment_high_watermark(self, offset: int) -> bool:
        """Move the high watermark up to ``offset`` (clamped to the log end), never down: a
        leader as its in-sync replicas catch up. Whether it moved."""
        with self._lock:
            new = min(max(offset, self._log_start_offset), self._next_offset)
            if new <= self._high_watermark:
                return False
            self._high_watermark = new
            self.producer_state_manager.on_high_watermark_updated(new)
            return True

    @property
    def last_stable_offset(self) -> int:
        """Kafka's LSO: every offset below it is decided (its transaction committed or aborted,
        the marker replicated) and below the high watermark; what read_committed reads up to."""
        with self._lock:
            return self._last_stable_offset_locked()

    def _first_unstable_locked(self) -> int | None:
        psm = self.producer_state_manager
        # Unreplicated markers matter to a replicated log only: elsewhere every marker lies below
        # the high watermark, which is the log end offset.
        return psm.first_unstable_offset() if self.replicated else psm.first_undecided_offset()

    def _last_stable_offset_locked(self) -> int:
        first_unstable = self._first_unstable_locked()
        high_watermark = self._high_watermark
        if first_unstable is None:
            return high_watermark
        return min(max(first_unstable, self._log_start_offset), high_watermark)

    @property
    def first_unstable_offset(self) -> int | None:
        """The first offset of the oldest open (or unreplicated) transaction, None without one."""
        with self._lock:
            first_unstable = self._first_unstable_locked()
            return None if first_unstable is None else max(first_unstable, self._log_start_offset)

    @property
    def latest_epoch(self) -> int | None:
        """The newest leader epoch in the leader epoch cache (None before any)."""
        return self._latest_epoch

    @property
    def recovery_point(self) -> int:
        """Everything below is durable: what recovery may trust after a crash (checkpointed)."""
        unsynced = self._unsynced_sealed
        if unsynced:
            return min(self._recovery_point, min(unsynced))
        return self._recovery_point

    @property
    def last_flush_ms(self) -> int:
        return self._last_flush_ms

    @property
    def segments(self) -> LogSegments:
        return self._segments

    @property
    def active_segment(self) -> LogSegment:
        return self._active

    @property
    def num_segments(self) -> int:
        return len(self._segments)

    @property
    def size(self) -> int:
        return self._segments.size_in_bytes()

    def _check_open(self) -> None:
        if self.offline:
            raise StorageError(f"log {self.directory.name} is offline after an I/O error")
        if self._closed:
            raise StorageError(f"log {self.directory.name} is closed")

    # -- append ------------------------------------------------------------------------------

    def maybe_start_txn_verification(self, producer_id: int) -> VerificationGuard:
        """KIP-890 part 1: the guard to append ``producer_id``'s transactional batch with, once
        its transaction coordinator confirmed this partition is in the transaction
        (NO_VERIFICATION_NEEDED: its transaction is already open here). Without the log's lock:
        the event loop asks, and the append re-checks the guard under the lock."""
        return self.producer_state_manager.maybe_start_verification(producer_id)

    def append_as_leader(
        self,
        records,
        leader_epoch: int = 0,
        *,
        from_coordinator: bool = False,
        verification: VerificationGuard | None = None,
    ) -> LogAppendInfo:
        """Validate a producer's batch, give it offsets and append it. Nothing is written on error.

        Validation walks every record, so it runs before the log's lock is taken (as Kafka's
        analyzeAndValidateRecords does); under the lock the batch only gets its base offset.
        A batch try_append_as_leader validated and handed back is not validated again.

        ``from_coordinator``: a coordinator's own write in a producer's name (Kafka's append
        origin COORDINATOR: a TxnOffsetCommit's transactional offsets), whose sequence is not the
        producer's to check; its epoch still is.

        ``verification``: the broker verifies transactions (KIP-890 part 1); a transactional
        batch that opens the producer's transaction here needs the guard of
        maybe_start_txn_verification, still current (INVALID_TXN_STATE otherwise).
        """
        now_ms = self._clock.milliseconds()
        validated = self._validated_ahead_for(records, leader_epoch)
        if validated is None:
            validated = validate_and_assign_offsets(
                records, offset=0, config=self._config, now_ms=now_ms, leader_epoch=leader_epoch
            )
        with self._lock:
            info = self._append_locked(validated, leader_epoch, now_ms, False, from_coordinator, verification)
            assert info is not None  # (only an inline append gives up)
            flush_due = info.last_offset + 1 - self._recovery_point >= self._config.flush_messages
        if flush_due:
            self.flush()
        return info

    def try_append_as_leader(
        self, records, leader_epoch: int = 0, *, max_bytes: int, verification: VerificationGuard | None = None
    ) -> LogAppendInfo | None:
        """append_as_leader, or None (nothing written) when it could take long: a batch above
        ``max_bytes`` or one to (de)compress, the log's lock held by another thread, a roll or a
        flush (``flush.messages``) due, a new leader epoch to record. What the event loop may
        call itself: a small uncompressed batch is a few microseconds of validation and one
        write into the page cache. Errors are raised as append_as_leader raises them.

        When it gives up after validating, it keeps the validated batch for the
        append_as_leader(records) that follows with the same ``records`` object (the caller's
        fallback), so a batch is walked once either way."""
        if len(records) > max_bytes or len(records) <= ATTRIBUTES_OFFSET + 1:
            return None
        config = self._config
        codec = records[ATTRIBUTES_OFFSET + 1] & COMPRESSION_MASK
        if codec != CompressionType.NONE or target_codec(config, codec) != codec:
            return None
        if leader_epoch != self._latest_epoch and leader_epoch >= 0:
            return None
        now_ms = self._clock.milliseconds()
        validated = validate_and_assign_offsets(
            records, offset=0, config=config, now_ms=now_ms, leader_epoch=leader_epoch
        )
        if self._lock.acquire(blocking=False):
            try:
                info = self._append_locked(validated, leader_epoch, now_ms, True, False, verification)
            finally:
                self._lock.release()
            if info is not None:
                return info
        # Handed to the caller's fallback; one slot: a later batch's replaces it (only costing
        # that fallback a second validation). Bytes only: a mutable buffer could change meanwhile.
        if type(records) is bytes:
            self._validated_ahead = (records, leader_epoch, config, validated)
        return None

    def _validated_ahead_for(self, records, leader_epoch: int) -> ValidatedBatch | None:
        """The batch try_append_as_leader validated for exactly this ``records`` object, epoch and
        config, taken (once), or None."""
        ahead = self._validated_ahead
        if ahead is None or ahead[0] is not records:
            return None
        self._validated_ahead = None
        if ahead[1] != leader_epoch or ahead[2] is not self._config:
            return None
        return ahead[3]

    def _append_locked(
        self,
        validated: ValidatedBatch,
        leader_epoch: int,
        now_ms: int,
        inline: bool,
        from_coordinator: bool = False,
        verification: VerificationGuard | None = None,
    ) -> LogAppendInfo | None:
        """Place a validated batch at the log end offset and write it (caller holds the lock).
        ``inline``: give up (None, nothing changed) rather than roll, flush or record an epoch."""
        self._check_open()
        buffers, size, first_offset, last_offset = (
            validated.records,
            validated.size,
            validated.first_offset,
            validated.last_offset,
        )
        max_timestamp, shallow_offset = validated.max_timestamp, validated.shallow_offset_of_max_timestamp
        log_append_time_ms, record_count = validated.log_append_time_ms, validated.record_count
        producer_id, producer_epoch, base_sequence = PRODUCER_FIELDS.unpack_from(buffers[0], PRODUCER_ID_OFFSET)
        if producer_id >= 0:
            # Before any roll or write: a duplicate or a refused batch changes nothing.
            offset_delta = last_offset - first_offset
            last_sequence = increment_sequence(base_sequence, offset_delta)
            entry = self.producer_state_manager.producers.get(producer_id)
            if from_coordinator:
                check_producer_epoch(entry, producer_id, producer_epoch, self.directory.name)
                duplicate = None
            else:
                duplicate = check_append(
                    entry, producer_id, producer_epoch, base_sequence, last_sequence, self.directory.name
                )
            is_transactional = bool(buffers[0][ATTRIBUTES_OFFSET + 1] & TRANSACTIONAL_FLAG)
            if duplicate is None and entry is not None and entry.current_txn_first_offset >= 0:
                check_txn_state(entry, producer_id, is_transactional, self.directory.name)
            if duplicate is None and verification is not None:
                self.producer_state_manager.check_verification(
                    producer_id, verification, is_transactional, self.directory.name
                )
            if duplicate is not None:
                self.duplicate_batches += 1
                return LogAppendInfo(
                    duplicate.first_offset,
                    duplicate.last_offset,
                    duplicate.timestamp,
                    duplicate.last_offset,
                    duplicate.timestamp if self._config.log_append_time else -1,
                    self._log_start_offset,
                    0,
                    0,
                    None,
                    True,
                )
        new_epoch = leader_epoch != self._latest_epoch and leader_epoch >= 0
        base = self._next_offset
        last_offset += base - first_offset
        shallow_offset += base - first_offset
        config = self._config
        if inline and (new_epoch or last_offset + 1 - self._recovery_point >= config.flush_messages):
            return None
        active = self._active
        roll_reason = active.roll_reason(
            config.max_segment_ms, config.segment_bytes, max_timestamp, last_offset, size, now_ms
        )
        if roll_reason is not None and inline:
            return None
        # The base offset lies outside the CRC: the batch's first 8 bytes (its head, a bytearray
        # on every validator path) take it here, under the lock.
        _BASE_OFFSET.pack_into(buffers[0], 0, base)
        try:
            if roll_reason is not None:
                self.roll_counts[roll_reason] += 1
                self._roll_locked(base)
                active = self._active
                logger.debug("rolled %s (%s) at offset %d", self.directory.name, roll_reason, base)
            if new_epoch:
                # Before the batch, as Kafka does: an epoch that cannot be recorded (a full
                # disk) fails the append with nothing written.
                self.leader_epoch_cache.assign(leader_epoch, base)
                self._latest_epoch = leader_epoch
            active.append(last_offset, max_timestamp, shallow_offset, buffers, size)
        except OSError as exc:
            self._io_failure(exc, "append")
        self._next_offset = last_offset + 1
        if not self.replicated:
            self._high_watermark = last_offset + 1
        if producer_id >= 0:
            # The map end offset is not moved per append (non-idempotent batches would pay for
            # it): snapshots are taken at explicit offsets (roll, close, open).
            self.producer_state_manager.update(
                producer_id, producer_epoch, last_sequence, last_offset, offset_delta, max_timestamp, is_transactional
            )
        return LogAppendInfo(
            base,
            last_offset,
            max_timestamp,
            shallow_offset,
            log_append_time_ms,
            self._log_start_offset,
            record_count,
            size,
            roll_reason,
        )

    def append_end_txn_marker(
        self,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        committed: bool,
        leader_epoch: int,
        timestamp_ms: int | None = None,
        transaction_version: int = 0,
    ) -> LogAppendInfo:
        """Write a transaction's COMMIT or ABORT marker (Kafka's appendAsLeader with origin
        COORDINATOR, for WriteTxnMarkers): one control batch at the log end, built here. The
        producer's open transaction, if any, is completed; an aborted one gets its ``.txnindex``
        entry. Raises INVALID_PRODUCER_EPOCH for a producer epoch older than the producer's, and
        TRANSACTION_COORDINATOR_FENCED for a coordinator epoch older than its last marker's;
        nothing is written then. A marker with no transaction open is written too (Kafka's rule:
        a retried WriteTxnMarkers must succeed), completing nothing. ``transaction_version`` 2:
        the marker's epoch must be above the open transaction's (producer_state.check_end_txn_marker)."""
        now_ms = self._clock.milliseconds()
        timestamp = now_ms if timestamp_ms is None else timestamp_ms
        marker_type = ControlRecordType.COMMIT if committed else ControlRecordType.ABORT
        with self._lock:
            self._check_open()
            psm = self.producer_state_manager
            check_end_txn_marker(
                psm.producers.get(producer_id),
                producer_id,
                producer_epoch,
                coordinator_epoch,
                self.directory.name,
                transaction_version,
            )
            base = self._next_offset
            batch = encode_end_txn_marker(
                producer_id,
                producer_epoch,
                marker_type,
                coordinator_epoch,
                base,
                timestamp,
                partition_leader_epoch=leader_epoch,
            )
            size = len(batch)
            config = self._config
            log_append_time = -1
            if config.log_append_time:
                # As Kafka's validator stamps every batch of such a topic: LogAppendTime, now.
                timestamp = log_append_time = now_ms
                batch = _stamp_log_append_time(batch, now_ms)
            roll_reason = self._active.roll_reason(
                config.max_segment_ms, config.segment_bytes, timestamp, base, size, now_ms
            )
            try:
                if roll_reason is not None:
                    self.roll_counts[roll_reason] += 1
                    self._roll_locked(base)
                if leader_epoch != self._latest_epoch and leader_epoch >= 0:
                    self.leader_epoch_cache.assign(leader_epoch, base)
                    self._latest_epoch = leader_epoch
                active = self._active
                active.append(base, timestamp, base, batch, size)
            except OSError as exc:
                self._io_failure(exc, "transaction marker append")
            self._next_offset = base + 1
            if not self.replicated:
                self._high_watermark = base + 1
            completed = psm.end_txn(producer_id, producer_epoch, coordinator_epoch, base, timestamp, not committed)
            if completed is not None:
                try:
                    self._complete_txn_locked(active, completed)
                except OSError as exc:
                    self._io_failure(exc, "transaction index append")
            flush_due = base + 1 - self._recovery_point >= config.flush_messages
            info = LogAppendInfo(
                base, base, timestamp, base, log_append_time, self._log_start_offset, 1, size, roll_reason
            )
        if flush_due:
            self.flush()
        return info

    def _complete_txn_locked(self, segment: LogSegment, completed: CompletedTxn) -> None:
        """Index an aborted transaction in the segment holding its marker (with the LSO it
        leaves, Kafka's order: index first, then complete) and complete it."""
        psm = self.producer_state_manager
        if completed.is_aborted:
            segment.update_txn_index(
                completed.producer_id, completed.first_offset, completed.last_offset, psm.last_stable_offset(completed)
            )
        psm.complete_txn(completed)
        if not self.replicated:
            psm.on_high_watermark_updated(self._high_watermark)

    def append_as_follower(self, records) -> LogAppendInfo:
        """Append a leader's batches as they are (Kafka's appendAsFollower): offsets, epochs and
        compression stay the leader's, so the follower's files match the leader's byte for byte.

        Nothing is written unless every batch is whole, passes its CRC, and the offsets rise
        from at or above the log end offset (gaps are fine: a compacted leader has them).
        Producer state follows the batch headers, unchecked, as recovery replays them. Rolls
        are decided per batch by the leader's rules, so segments start where the leader's do.
        """
        view = memoryview(records)
        if not len(view):
            return LogAppendInfo(-1, -1, NO_TIMESTAMP, -1, -1, self._log_start_offset, 0, 0)
        batches = split_batches(view)
        expected = -1
        for position, header in batches:
            check_batch(view[position : position + header.size], header)
            if header.base_offset < expected or header.last_offset_delta < 0:
                raise OffsetsOutOfOrderError(
                    f"batch {header.base_offset}..{header.last_offset} of a follower append to "
                    f"{self.directory.name} does not follow offset {expected - 1}"
                )
            expected = header.next_offset
        first_offset, last_offset = batches[0][1].base_offset, batches[-1][1].last_offset
        now_ms = self._clock.milliseconds()
        max_timestamp, offset_of_max_timestamp, record_count, roll_reason = NO_TIMESTAMP, -1, 0, None
        with self._lock:
            self._check_open()
            if first_offset < self._next_offset:
                raise UnexpectedAppendOffsetError(
                    f"follower append to {self.directory.name} starts at offset {first_offset}, "
                    f"below the log end offset {self._next_offset}",
                    first_offset,
                    last_offset,
                )
            config = self._config
            cache = self.leader_epoch_cache
            psm = self.producer_state_manager
            try:
                for position, header in batches:
                    size = header.size
                    batch_max_timestamp = header.max_timestamp
                    active = self._active
                    reason = active.roll_reason(
                        config.max_segment_ms,
                        config.segment_bytes,
                        batch_max_timestamp,
                        header.last_offset,
                        size,
                        now_ms,
                    )
                    if reason is not None:
                        self.roll_counts[reason] += 1
                        self._roll_locked(header.base_offset)
                        active = self._active
                        roll_reason = reason
                    epoch = header.partition_leader_epoch
                    if epoch >= 0:
                        latest = cache.latest_entry
                        if latest is None or latest.epoch != epoch or header.base_offset < latest.start_offset:
                            cache.assign(epoch, header.base_offset)
                            self._latest_epoch = cache.latest_epoch
                    # The shallow offset of the batch's max timestamp is its last offset, as the
                    # leader's validator gives its time index.
                    active.append(
                        header.last_offset,
                        batch_max_timestamp,
                        header.last_offset,
                        view[position : position + size],
                        size,
                    )
                    self._next_offset = header.next_offset
                    if not self.replicated:
                        self._high_watermark = self._next_offset
                    if header.producer_id >= 0:
                        attributes = header.attributes
                        is_control = bool(attributes & CONTROL_FLAG)
                        completed = psm.replay_batch(
                            header.producer_id,
                            header.producer_epoch,
                            header.base_sequence,
                            header.last_offset,
                            header.last_offset_delta,
                            batch_max_timestamp,
                            is_control,
                            bool(attributes & TRANSACTIONAL_FLAG),
                            _marker_or_none(view[position : position + size]) if is_control else None,
                        )
                        if completed is not None:
                            self._complete_txn_locked(active, completed)
                    if batch_max_timestamp > max_timestamp:
                        max_timestamp, offset_of_max_timestamp = batch_max_timestamp, header.last_offset
                    record_count += header.records_count
            except OSError as exc:
                # The batches before the failing one are in (the log end offset says so).
                self._io_failure(exc, "follower append")
            flush_due = self._next_offset - self._recovery_point >= config.flush_messages
            info = LogAppendInfo(
                first_offset,
                last_offset,
                max_timestamp,
                offset_of_max_timestamp,
                -1,
                self._log_start_offset,
                record_count,
                len(view),
                roll_reason,
            )
        if flush_due:
            self.flush()
        return info

    def _io_failure(self, exc: OSError, what: str) -> NoReturn:
        """A write that failed. A full disk or a process out of descriptors fails only this
        request (KAFKA_STORAGE_ERROR): nothing was changed, reads go on, and the next write
        tries again, so writing resumes by itself once space or descriptors are back. Any
        other error is a disk failure and takes the log offline."""
        if is_disk_full(exc) or is_out_of_descriptors(exc):
            logger.warning("%s on log %s failed: %s", what, self.directory.name, exc)
            raise StorageError(f"{what} on log {self.directory.name} failed: {exc}") from exc
        self._go_offline(exc)

    def _go_offline(self, exc: OSError) -> NoReturn:
        """Take the log offline for good (until a restart): reads and writes are refused, and a
        failed fsync is never retried, since Linux may have dropped the unwritten pages
        (fsyncgate). The LogManager takes the whole log directory offline with it."""
        if not self.offline:
            self.offline = True
            logger.error("I/O error on log %s: %s; taking it offline", self.directory, exc)
            callback = self.on_offline
            if callback is not None:
                callback(self, exc)
        raise StorageError(f"I/O error on log {self.directory.name}: {exc}") from exc

    def roll(self) -> LogSegment:
        """Start a new active segment at the log end offset."""
        with self._lock:
            self._check_open()
            try:
                return self._roll_locked(self._next_offset)
            except OSError as exc:
                self._io_failure(exc, "roll")

    def _roll_locked(self, expected_next_offset: int) -> LogSegment:
        """Make a new active segment; an OSError (no space, no descriptor) leaves the log as it
        was: the new segment's files are created first and removed again if that fails, and
        sealing the old one fails, if at all, before it changes anything."""
        new_offset = max(expected_next_offset, self._next_offset)
        active = self.active_segment
        if new_offset == active.base_offset and active.size == 0:
            # KAFKA-6388: never two segments with one base offset. An empty active segment at the
            # same base just starts over (its roll timer), with no file touched.
            active.created_ms = self._clock.milliseconds()
            return active
        if new_offset in self._segments:
            raise StorageError(
                f"cannot roll {self.directory.name}: a segment with base offset {new_offset} already exists"
            )
        targets = (
            filenames.log_file(self.directory, new_offset),
            filenames.offset_index_file(self.directory, new_offset),
            filenames.time_index_file(self.directory, new_offset),
        )
        stale_txn_index = filenames.txn_index_file(self.directory, new_offset)
        for stale in targets if self._spare is None else ():  # (spares are renamed over stale files)
            if self.fs.exists(stale):
                logger.warning("deleting stale file %s before rolling", stale)
                self.fs.unlink(stale)
        if self.fs.exists(stale_txn_index):  # the new segment starts with none (and knows it)
            logger.warning("deleting stale file %s before rolling", stale_txn_index)
            self.fs.unlink(stale_txn_index)
        # At most one rolled segment waits for its seal: rolls coming faster than the flushes
        # they schedule seal the previous one here (each unsealed segment holds a descriptor).
        self._seal_rolled_locked()
        config = self._config
        spare = self._take_spare(targets)
        segment = LogSegment.open(
            self.directory,
            new_offset,
            index_interval_bytes=config.index_interval_bytes,
            segment_index_bytes=config.segment_index_bytes,
            clock=self._clock,
            rolling_jitter_ms=rolling_jitter_ms(config.segment_jitter_ms, config.segment_ms),
            preallocate_bytes=config.segment_bytes if config.preallocate else 0,
            fs=self.fs,
            spare=spare,
            paths=targets,
        )
        self._rolled = True
        try:
            active.append_final_time_index_entry()
        except BaseException:
            segment.delete_if_exists()
            raise
        # The rest of sealing the old segment (trimming its preallocated files frees their blocks,
        # milliseconds of journal work) waits for the flush a roll schedules, as Kafka's roll
        # leaves the old segment's flush to a background task.
        self._unsealed[active.base_offset] = active
        self._unsynced_sealed[active.base_offset] = active
        self._segments.add(segment)
        self._active = segment
        # Kafka flushes everything below the new segment asynchronously; flush_pending() does it.
        self._pending_flush_offset = max(self._pending_flush_offset, new_offset)
        # Named by the new segment's base offset; fsynced by that flush (Kafka's roll does the same).
        self._take_producer_snapshot(new_offset, sync=False)
        return segment

    def _take_producer_snapshot(self, offset: int, *, sync: bool) -> None:
        """Snapshot the producer state at ``offset`` (caller holds the lock). A full disk or no
        descriptor only costs a longer replay at the next start: logged, not raised."""
        psm = self.producer_state_manager
        psm.update_map_end_offset(offset)
        try:
            psm.take_snapshot(sync=sync)
        except OSError as exc:
            if not (is_disk_full(exc) or is_out_of_descriptors(exc)):
                raise
            logger.warning(
                "could not write the producer snapshot of %s at offset %d: %s", self.directory.name, offset, exc
            )

    def _take_spare(self, targets) -> bool:
        """Rename the spare files (if any) to ``targets``, the new segment's .log, .index and
        .timeindex (a rename replaces a stale file of that name); whether all three were.
        Caller holds the lock. A rename that fails leaves the rest to be created as usual."""
        spare, self._spare = self._spare, None
        if spare is None:
            return False
        renamed = []
        try:
            for source, target in zip(spare, targets):
                self.fs.replace(source, target)
                renamed.append(target)
        except OSError as exc:
            logger.warning("could not use the spare files of %s (%s): creating new ones", self.directory.name, exc)
            for path in (*targets, *spare[len(renamed) :]):  # no stale file may stay under a target
                try:
                    self.fs.unlink(path)
                except OSError:
                    pass
            return False
        return True

    def prepare_spare(self) -> bool:
        """Make the empty files the next roll renames into place, if this log rolls and has none;
        runs outside the log's lock (from the flush a roll schedules). Whether it made them."""
        if not self._rolled or self._spare is not None or self._closed or self.offline:
            return False
        with self._spare_lock:
            if self._spare is not None:
                return False
            paths = filenames.spare_files(self.directory)
            index_bytes = self._config.segment_index_bytes
            made = []
            try:
                for path, index in zip(paths, (None, OffsetIndex, TimeIndex)):
                    try:
                        fd = self.fs.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
                    except FileNotFoundError:
                        return False  # the partition directory went away (topic deleted)
                    made.append(path)
                    try:
                        if index is not None:  # sized and reserved now, not by the roll
                            index.prepare_spare_file(self.fs, fd, max(index_bytes, index.ENTRY_SIZE))
                    finally:
                        self.fs.close(fd)
            except OSError as exc:  # no space or no descriptor: rolls create their files meanwhile
                logger.debug("no spare files for %s: %s", self.directory.name, exc)
                self._remove_files(made)
                return False
            with self._lock:
                if self._closed or self.offline:
                    self._remove_files(made)
                    return False
                self._spare = paths
            return True

    def _remove_files(self, paths) -> None:
        for path in paths:
            try:
                self.fs.unlink(path)
            except OSError:
                pass

    # -- flush -------------------------------------------------------------------------------

    def _seal_rolled_locked(self) -> None:
        """Seal the segments rolls left unsealed (caller holds the lock); one that fails stays
        listed and is tried again by the next flush."""
        unsealed = self._unsealed
        while unsealed:
            base, segment = next(iter(unsealed.items()))
            try:
                segment.seal()
            except OSError as exc:
                self._io_failure(exc, "sealing a rolled segment")
            del unsealed[base]

    def flush(self, offset: int | None = None) -> None:
        """fsync every segment holding offsets below ``offset`` (default: the log end offset).

        Only this moves the recovery point. The fsyncs run outside the log's lock.
        """
        with self._lock:
            self._check_open()
            self._seal_rolled_locked()  # what is fsynced below is the sealed (trimmed) files
            offset = self._next_offset if offset is None else min(offset, self._next_offset)
            sealed = list(self._unsynced_sealed.items())
            if offset <= self._recovery_point and not sealed:
                return
            fds: list[int] = []
            snapshots = list(self.producer_state_manager.unsynced_snapshots)
            try:
                segments = self._segments.values(self._recovery_point, offset) if offset > self._recovery_point else []
                covered = {segment.base_offset for segment in segments}
                segments.extend(segment for base, segment in sealed if base not in covered)
                for segment in segments:
                    fds.extend(segment.descriptors_to_flush())
                for snapshot in snapshots:
                    try:
                        fds.append(self.fs.open(self.producer_state_manager.snapshot_file(snapshot), os.O_RDONLY))
                    except FileNotFoundError:
                        pass  # deleted with its segment meanwhile
            except OSError as exc:  # no descriptor to sync with: nothing was synced, nothing failed
                for fd in fds:
                    self.fs.close(fd)
                self._io_failure(exc, "flush")
        fs = self.fs
        try:
            for fd in fds:
                fs.fsync(fd)
            fs.fsync_dir(self.directory)
        except OSError as exc:
            if is_out_of_descriptors(exc):
                # Only opening the directory to sync it fails so (fsync itself never does):
                # nothing failed to reach the disk, the recovery point stays, and the next flush
                # syncs again. Only this request fails.
                self._io_failure(exc, "flush")
            # Any other errno: the kernel may have dropped the pages it could not write, so a
            # retry that succeeded would prove nothing (fsyncgate). The log goes offline.
            with self._lock:
                self._go_offline(exc)
        finally:
            for fd in fds:
                fs.close(fd)
        with self._lock:
            self._recovery_point = max(self._recovery_point, offset)
            self.producer_state_manager.unsynced_snapshots.difference_update(snapshots)
            for base, segment in sealed:
                if self._unsynced_sealed.get(base) is segment:
                    del self._unsynced_sealed[base]
            self._last_flush_ms = self._clock.milliseconds()

    def flush_pending(self) -> bool:
        """Run the flush that rolls and ``flush.ms`` scheduled; returns whether one was due."""
        with self._lock:
            target = None
            if self._pending_flush_offset > self._recovery_point:
                target = self._pending_flush_offset
            if self._clock.milliseconds() - self._last_flush_ms >= self._config.flush_ms:
                target = self._next_offset
            if self._unsynced_sealed:
                target = max(target or 0, self._recovery_point)
            elif target is not None and target <= self._recovery_point:
                target = None
        if target is None:
            self.prepare_spare()
            return False
        self.flush(target)
        self.prepare_spare()
        return True

    # -- reads -------------------------------------------------------------------------------

    def read(
        self,
        start_offset: int,
        max_length: int,
        *,
        min_one_message: bool = True,
        isolation: FetchIsolation = FetchIsolation.HIGH_WATERMARK,
    ) -> FetchDataInfo:
        """Whole batches from ``start_offset`` below the high watermark (a follower's fetch:
        ``isolation=LOG_END``, below the log end offset; read_committed: ``TXN_COMMITTED``, below
        the last stable offset, with the aborted transactions it overlaps), at most
        ``max_length`` bytes.

        Raises OffsetOutOfRangeError below the log start offset or above the log end offset.
        """
        with self._lock:
            return self._read_locked(start_offset, max_length, min_one_message, isolation)

    def try_read_tail(
        self,
        start_offset: int,
        max_length: int,
        *,
        min_one_message: bool = True,
        isolation: FetchIsolation = FetchIsolation.HIGH_WATERMARK,
    ) -> FetchDataInfo | None:
        """read(), or None (nothing done) when it could take long: the log's lock held by another
        thread, or ``start_offset`` below the active segment (older data may have left the page
        cache; its index may not be mapped yet). What the event loop may call itself: the tail
        was just written, so planning its read is an index lookup and a few header reads from
        the page cache."""
        if not self._lock.acquire(blocking=False):
            return None
        try:
            if start_offset < self._active.base_offset:
                return None
            if isolation is FetchIsolation.TXN_COMMITTED and not self._active.txn_index.is_loaded:
                return None  # its first lookup reads the .txnindex file (once)
            return self._read_locked(start_offset, max_length, min_one_message, isolation)
        finally:
            self._lock.release()

    def _read_locked(
        self,
        start_offset: int,
        max_length: int,
        min_one_message: bool,
        isolation: FetchIsolation = FetchIsolation.HIGH_WATERMARK,
    ) -> FetchDataInfo:
        self._check_open()
        if isolation is FetchIsolation.HIGH_WATERMARK:
            limit = self._high_watermark
        elif isolation is FetchIsolation.LOG_END:
            limit = self._next_offset
        else:
            return self._read_committed_locked(start_offset, max_length, min_one_message)
        if start_offset < self._log_start_offset or start_offset > self._next_offset:
            raise OffsetOutOfRangeError(
                f"offset {start_offset} is out of range for partition {self.directory.name}: "
                f"log start offset {self._log_start_offset}, log end offset {self._next_offset}"
            )
        empty = FetchDataInfo(LogOffsetMetadata(start_offset), None)
        if start_offset >= limit:
            return empty
        return self._read_below_locked(start_offset, max_length, min_one_message, limit, empty)

    def _read_committed_locked(self, start_offset: int, max_length: int, min_one_message: bool) -> FetchDataInfo:
        """A read_committed read: below the LSO, with the aborted transactions overlapping it
        (Kafka's addAbortedTransactions): an index lookup and a bisection per segment whose
        ``.txnindex`` is consulted, no per-record work."""
        if start_offset < self._log_start_offset or start_offset > self._next_offset:
            raise OffsetOutOfRangeError(
                f"offset {start_offset} is out of range for partition {self.directory.name}: "
                f"log start offset {self._log_start_offset}, log end offset {self._next_offset}"
            )
        empty = FetchDataInfo(LogOffsetMetadata(start_offset), None, None, [])
        limit = self._last_stable_offset_locked()
        if start_offset >= limit:
            return empty
        info = self._read_below_locked(start_offset, max_length, min_one_message, limit, empty)
        region = info.region
        segment = self._segments.get(info.fetch_offset_metadata.segment_base_offset)
        if region is None or segment is None:
            return info._replace(aborted_transactions=[])
        # The offset after the last batch read: the next batch's base offset, else the next
        # segment's base (or the log end).
        end_position = info.fetch_offset_metadata.relative_position_in_segment + region.length
        following = segment.log.read_header_at(end_position) if end_position < segment.size else None
        if following is not None:
            upper_bound = following.base_offset
        else:
            higher = self._segments.higher_segment(segment.base_offset)
            upper_bound = higher.base_offset if higher is not None else self._next_offset
        aborted = []
        current: LogSegment | None = segment
        while current is not None:
            found = current.collect_aborted_txns(start_offset, upper_bound)
            aborted.extend(found.aborted_transactions)
            if found.is_complete:
                break
            current = self._segments.higher_segment(current.base_offset)
        return info._replace(aborted_transactions=aborted)

    def _read_below_locked(
        self, start_offset: int, max_length: int, min_one_message: bool, limit: int, empty: FetchDataInfo
    ) -> FetchDataInfo:
        # Below the log end (a replicated log's high watermark), reads stop at the batch holding
        # the limit: Kafka's maxPosition in the limit's segment.
        bound = self._read_bound(limit) if limit < self._next_offset else None
        segment = self._segments.floor_segment(start_offset)
        while segment is not None:
            max_position = None
            if bound is not None:
                if segment.base_offset > bound[0]:
                    return empty
                if segment.base_offset == bound[0]:
                    max_position = bound[1]
            info = segment.read(start_offset, max_length, max_position, min_one_message=min_one_message)
            if info is not None:
                return info
            segment = self._segments.higher_segment(segment.base_offset)
        return empty

    def _read_bound(self, limit: int) -> tuple[int, int]:
        """(base offset, position) of the segment holding ``limit`` and the start of the batch
        reaching it; cached, as consumers of a replicated log ask for it on every fetch. The
        position cannot move while the segment and limit stay: a segment with a later one is
        never appended to, and truncation clears the cache."""
        segment = self._segments.floor_segment(limit)
        assert segment is not None  # (limit >= the log start offset, the first segment's base or above)
        cached = self._read_bound_cache
        if cached is not None and cached[0] == limit and cached[1] is segment:
            return segment.base_offset, cached[2]
        found = segment.translate_offset(limit)
        position = found[0] if found is not None else segment.size
        self._read_bound_cache = (limit, segment, position)
        return segment.base_offset, position

    def fetch_offset_by_timestamp(
        self, timestamp: int, isolation: FetchIsolation = FetchIsolation.HIGH_WATERMARK
    ) -> TimestampAndOffset | None:
        """Kafka's ListOffsets: -2 earliest, -1 latest (the last stable offset for
        ``TXN_COMMITTED``), -3 max timestamp, or the first record at/after a time."""
        with self._lock:
            self._check_open()
            if timestamp == EARLIEST_TIMESTAMP:
                return TimestampAndOffset(NO_TIMESTAMP, self._log_start_offset)
            # read_committed clients are answered within the last stable offset (Kafka's ListOffsets).
            bound = (
                self._last_stable_offset_locked() if isolation is FetchIsolation.TXN_COMMITTED else self._high_watermark
            )
            if timestamp == LATEST_TIMESTAMP:
                return TimestampAndOffset(NO_TIMESTAMP, bound)
            if timestamp == MAX_TIMESTAMP:
                return self._max_timestamp_offset()
            if timestamp < 0:
                raise ValueError(f"invalid timestamp {timestamp}")
            for segment in self._segments.from_index(self._first_segment_index_reaching(timestamp)):
                if segment.largest_timestamp < timestamp:
                    continue
                found = segment.find_offset_by_timestamp(timestamp, self._log_start_offset)
                if found is not None:
                    return found if found.offset < bound else None
            return None

    def _first_segment_index_reaching(self, timestamp: int) -> int:
        """Index of the first segment whose largest timestamp is >= ``timestamp`` (Kafka's rule).

        A running maximum of the inactive segments' largest timestamps is non-decreasing, so a
        bisection finds it; only the active segment's value changes between rolls, and it is
        always scanned. The cache is rebuilt when the segment list changes.
        """
        segments = self._segments
        first = segments.first_segment()
        assert first is not None  # (a log always has a segment: its active one)
        key = (len(segments), first.base_offset, self._active.base_offset)
        if self._timestamp_prefix_key != key:
            running, prefix = -(2**63), []
            for segment in list(segments)[:-1]:
                running = max(running, segment.largest_timestamp)
                prefix.append(running)
            self._timestamp_prefix, self._timestamp_prefix_key = prefix, key
        return bisect.bisect_left(self._timestamp_prefix, timestamp)

    def _max_timestamp_offset(self) -> TimestampAndOffset | None:
        """-3: the first record with the largest timestamp, at or above the log start offset.

        Kafka reads the segment with the largest max timestamp; when delete_records moved the
        log start past that record, the remaining records are scanned instead (rare, bounded
        by the log's batch headers).
        """
        from triolog.protocol.records import decode_batch, first_record_at_or_after

        start = self._log_start_offset
        best: LogSegment | None = None
        for segment in self._segments:
            if best is None or segment.max_timestamp_so_far > best.max_timestamp_so_far:
                best = segment
        if best is None or best.max_timestamp_so_far < 0:
            return None
        if best.shallow_offset_of_max_timestamp_so_far >= start:
            target = best.max_timestamp_so_far
            position = best.offset_index.lookup(best.shallow_offset_of_max_timestamp_so_far).position
            for batch_position, header in best.log.batch_headers(position):
                if header.max_timestamp == target:
                    found = first_record_at_or_after(best.log.read(batch_position, header.size), target, start)
                    if found is not None:
                        return TimestampAndOffset(*found)
        # The record holding the maximum is below the log start: find the maximum of what remains.
        winner: tuple[int, int] | None = None  # (timestamp, offset); earlier offsets win ties
        for segment in self._segments.from_index(self._segments.floor_index(start)):
            for batch_position, header in segment.log.batch_headers():
                if header.last_offset < start or header.max_timestamp <= (winner[0] if winner else -1):
                    continue
                batch = segment.log.read(batch_position, header.size)
                if header.base_offset >= start:
                    found = first_record_at_or_after(batch, header.max_timestamp, start)
                else:  # straddles the log start: only its records at or above it count
                    remaining = [(r.timestamp, r.offset) for r in decode_batch(batch).records if r.offset >= start]
                    found = max(remaining, key=lambda r: (r[0], -r[1]), default=None)
                if found is not None and (winner is None or found[0] > winner[0]):
                    winner = found
        return TimestampAndOffset(*winner) if winner is not None else None

    # -- replication: leader epochs and truncation --------------------------------------------

    def assign_epoch_start_offset(self, epoch: int, offset: int | None = None) -> None:
        """Record that ``epoch`` starts at ``offset`` (default: the log end offset), as a new
        leader does before it takes writes (Kafka's maybeAssignEpochStartOffset); its appends
        in that epoch then record nothing more."""
        with self._lock:
            self._check_open()
            try:
                self.leader_epoch_cache.assign(epoch, self._next_offset if offset is None else offset)
            except OSError as exc:
                self._io_failure(exc, "leader epoch assignment")
            self._latest_epoch = self.leader_epoch_cache.latest_epoch

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """OffsetsForLeaderEpoch: (the largest epoch <= ``epoch``, the offset where the next one
        starts, or the log end offset for the latest epoch); (-1, -1) when unknown."""
        with self._lock:
            self._check_open()
            return self.leader_epoch_cache.end_offset_for(epoch, self._next_offset)

    def truncate_to(self, target_offset: int) -> bool:
        """Cut the log back to below ``target_offset`` (Kafka's UnifiedLog.truncateTo): what a
        follower does where its log diverges from its leader's. Whether anything was removed.

        Segments from ``target_offset`` on go the way retention's do (``.deleted``, removed
        later); the one holding it is cut at the batch reaching it, so the new log end offset is
        where the remaining batches end (a batch straddling the target goes whole). Below the
        log start offset (or the first segment) the log starts over at ``target_offset``.
        """
        if target_offset < 0:
            raise ValueError(f"cannot truncate {self.directory.name} to offset {target_offset}")
        with self._lock:
            self._check_open()
            if target_offset >= self._next_offset:
                # Nothing to cut, but an epoch may start at the log end with no batch of its own:
                # a leader elected that appended nothing before the next was. Left, it makes the
                # follower answer the leader with that epoch forever, told each time to truncate
                # to where it already ends (Kafka's truncateTo drops it too).
                try:
                    if self.leader_epoch_cache.truncate_from_end(self._next_offset):
                        self._latest_epoch = self.leader_epoch_cache.latest_epoch
                except OSError as exc:
                    self._go_offline(exc)
                return False
            first = self._segments.first_segment()
            assert first is not None  # (a log always has a segment)
            if target_offset < self._log_start_offset or target_offset <= first.base_offset:
                self._truncate_fully_locked(target_offset)
                return True
            tail = self._segments.floor_segment(target_offset - 1)
            assert tail is not None  # (target_offset > the first segment's base offset)
            doomed = [segment for segment in self._segments if segment.base_offset > tail.base_offset]
            if tail is not self._active:
                # It becomes the active segment again: sealed, it has trimmed, read-only
                # indexes; a new LogSegment on its files maps them writable.
                try:
                    if tail.base_offset in self._unsealed:
                        tail.seal()
                        del self._unsealed[tail.base_offset]
                    new_tail = self._open_segment(tail.base_offset, file_already_exists=True)
                except OSError as exc:
                    self._io_failure(exc, "truncation")
            else:
                new_tail = tail
            self._validated_ahead = None
            self._read_bound_cache = None
            try:
                if doomed:
                    self._remove_and_delete_segments(doomed, TRUNCATION)
                if new_tail is not tail:
                    tail.close_handlers()
                    self._segments.add(new_tail)
                    if tail.base_offset in self._unsynced_sealed:
                        self._unsynced_sealed[tail.base_offset] = new_tail
                    self._active = new_tail
                    new_tail.resize_indexes(self._config.segment_index_bytes)
                new_tail.truncate_to(target_offset)
                new_end = new_tail.read_next_offset() if new_tail.size else new_tail.base_offset
                # Durable before anything is appended after it: a power cut that undid the cut
                # would bring the removed batches back under offsets the leader gives others.
                new_tail.flush()
                self.fs.fsync_dir(self.directory)
            except OSError as exc:
                self._go_offline(exc)  # half done: the log must not serve or take more
            self._truncated_to_locked(new_end)
            logger.info(
                "truncated %s to offset %d (log end offset %d, %d segments removed)",
                self.directory.name,
                target_offset,
                new_end,
                len(doomed),
            )
            return True

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Remove every segment and start over, empty, at ``offset`` (Kafka's
        truncateFullyAndStartAt): a follower far behind its leader's log start offset."""
        if offset < 0:
            raise ValueError(f"cannot start {self.directory.name} at offset {offset}")
        with self._lock:
            self._check_open()
            self._truncate_fully_locked(offset)

    def _truncate_fully_locked(self, offset: int) -> None:
        self._validated_ahead = None
        self._read_bound_cache = None
        try:
            self._remove_and_delete_segments(list(self._segments), TRUNCATION)
            segment = self._open_segment(offset, file_already_exists=False)
            self._segments.add(segment)
            self._active = segment
            self.fs.fsync_dir(self.directory)
        except OSError as exc:
            self._go_offline(exc)  # no segment left, or the new one not durable
        self._log_start_offset = offset
        self._recovery_point = offset  # nothing below it, and the new segment is durable
        try:
            self.producer_state_manager.truncate_fully_and_start_at(offset)
            self.leader_epoch_cache.clear()
        except OSError as exc:
            self._go_offline(exc)
        self._truncated_to_locked(offset)
        logger.info("truncated %s fully: it starts over at offset %d", self.directory.name, offset)

    def _truncated_to_locked(self, new_end: int) -> None:
        """The offsets and caches after a truncation to ``new_end`` (caller holds the lock)."""
        try:
            self._truncate_state_locked(new_end)
        except OSError as exc:
            self._go_offline(exc)  # an epoch checkpoint or a producer snapshot: half done

    def _truncate_state_locked(self, new_end: int) -> None:
        self._next_offset = new_end
        self._high_watermark = min(self._high_watermark, new_end)
        self._recovery_point = min(self._recovery_point, new_end)
        self._pending_flush_offset = min(self._pending_flush_offset, new_end)
        self._timestamp_prefix_key = None
        self._read_bound_cache = None
        self._validated_ahead = None
        self.leader_epoch_cache.truncate_from_end(new_end)
        self._latest_epoch = self.leader_epoch_cache.latest_epoch
        # The state at the new end: snapshots past it go, the newest left is loaded and the
        # batches after it replayed. (The map end offset does not follow appends, so a state
        # whose map end happens to equal new_end still holds removed batches: start empty.)
        psm = self.producer_state_manager
        psm.clear()
        rebuild_producer_state(psm, self._segments, self._log_start_offset, new_end, self._clock.milliseconds())
        psm.on_high_watermark_updated(self._high_watermark)

    def _open_segment(self, base_offset: int, *, file_already_exists: bool) -> LogSegment:
        config = self._config
        return LogSegment.open(
            self.directory,
            base_offset,
            index_interval_bytes=config.index_interval_bytes,
            segment_index_bytes=config.segment_index_bytes,
            clock=self._clock,
            rolling_jitter_ms=rolling_jitter_ms(config.segment_jitter_ms, config.segment_ms),
            file_already_exists=file_already_exists,
            preallocate_bytes=config.segment_bytes if config.preallocate and not file_already_exists else 0,
            fs=self.fs,
        )

    # -- log start offset --------------------------------------------------------------------

    def maybe_increment_log_start_offset(self, new_log_start_offset: int) -> int:
        """Move the log start offset up (delete_records); retention later deletes whole segments below it."""
        with self._lock:
            self._check_open()
            if new_log_start_offset > self._high_watermark:
                raise OffsetOutOfRangeError(
                    f"cannot move the log start offset of {self.directory.name} to {new_log_start_offset}: "
                    f"above the high watermark {self._high_watermark}"
                )
            if new_log_start_offset > self._log_start_offset:
                self._log_start_offset = new_log_start_offset
                self.leader_epoch_cache.truncate_from_start(new_log_start_offset)
                self._latest_epoch = self.leader_epoch_cache.latest_epoch
            return self._log_start_offset

    # -- retention ---------------------------------------------------------------------------

    def delete_old_segments(self) -> int:
        """Kafka's retention: segments wholly below the log start offset and, for ``delete`` logs,
        those past ``retention.bytes`` and ``retention.ms``. Returns how many were deleted."""
        deleted = self._delete_segments_matching(self._below_log_start_offset, LOG_START_OFFSET_BREACH)
        if self._config.delete:
            deleted += self._delete_retention_size_breached_segments()
            deleted += self._delete_segments_matching(self._past_retention_ms(), RETENTION_MS_BREACH)
        return deleted

    def _below_log_start_offset(self, segment: LogSegment, next_segment: LogSegment | None) -> bool:
        return next_segment is not None and next_segment.base_offset <= self._log_start_offset

    def _past_retention_ms(self):
        retention_ms = self._config.retention_ms
        now_ms = self._clock.milliseconds()

        def expired(segment: LogSegment, next_segment: LogSegment | None) -> bool:
            # Judged on the newest record's timestamp, or the file's mtime when none has one.
            return retention_ms >= 0 and now_ms - segment.largest_timestamp > retention_ms

        return expired

    def _delete_retention_size_breached_segments(self) -> int:
        retention_bytes = self._config.retention_bytes
        if retention_bytes < 0:
            return 0
        with self._lock:
            excess = self.size - retention_bytes
            if excess <= 0:
                return 0

            def too_big(segment: LogSegment, next_segment: LogSegment | None) -> bool:
                # Oldest first, and only while a whole segment fits in the excess.
                nonlocal excess
                if excess - segment.size >= 0:
                    excess -= segment.size
                    return True
                return False

            return self._delete_segments_matching(too_big, RETENTION_BYTES_BREACH)

    def _delete_segments_matching(self, predicate, reason: str) -> int:
        """Delete the longest prefix of segments that ``predicate`` accepts and that lies wholly
        below the high watermark (Kafka's ``deletableSegments`` + ``deleteSegments``)."""
        with self._lock:
            if self._closed or self.offline:
                return 0
            deletable: list[LogSegment] = []
            segments = list(self._segments)
            for i, segment in enumerate(segments):
                next_segment = segments[i + 1] if i + 1 < len(segments) else None
                upper_bound = next_segment.base_offset if next_segment is not None else self._next_offset
                if self._high_watermark < upper_bound:
                    break
                if next_segment is None and segment.size == 0:
                    break  # an empty active segment is never deleted: there would be nothing to roll to
                if not predicate(segment, next_segment):
                    break
                deletable.append(segment)
            if not deletable:
                return 0
            if len(deletable) == len(segments):
                # Every segment expired: the log needs one segment, so roll a new one first.
                try:
                    new_segment = self._roll_locked(self._next_offset)
                except OSError as exc:
                    self._io_failure(exc, "roll for retention")
                if deletable[-1].base_offset == new_segment.base_offset:
                    deletable.pop()  # the "expired" active segment was empty and was replaced in place
            if not deletable:
                return 0
            self._remove_and_delete_segments(deletable, reason)
            first = self._segments.first_segment()
            assert first is not None  # (a log always has a segment: deletion spares or rolls the active one)
            self._log_start_offset = max(self._log_start_offset, first.base_offset)
            self.leader_epoch_cache.truncate_from_start(self._log_start_offset)
            self._latest_epoch = self.leader_epoch_cache.latest_epoch
            return len(deletable)

    def _remove_and_delete_segments(self, segments: list[LogSegment], reason: str) -> None:
        """Take ``segments`` out of the map at once (readers never see a half-deleted segment),
        rename their files ``.deleted`` and remove them after ``file.delete.delay.ms``."""
        with self._lock:
            removed: list[LogSegment | DeletedFile] = []
            for segment in segments:
                if self._segments.get(segment.base_offset) is segment:
                    self._segments.remove(segment.base_offset)
                if self._unsynced_sealed.get(segment.base_offset) is segment:
                    del self._unsynced_sealed[segment.base_offset]
                if self._unsealed.get(segment.base_offset) is segment:
                    del self._unsealed[segment.base_offset]  # its files go: nothing to trim
                size = segment.size
                try:
                    segment.change_file_suffixes("", filenames.DELETED_FILE_SUFFIX)
                except FileNotFoundError:
                    pass  # already gone (e.g. an index that was never created)
                except OSError as exc:
                    self._io_failure(exc, "segment deletion")
                removed.append(segment)
                self.deleted_segment_counts[reason] += 1
                self.deleted_bytes[reason] += size
                logger.info("deleting segment %s of %s (%s)", segment.base_offset, self.directory.name, reason)
            for segment in segments:
                # Its producer snapshot goes with it, unless a segment (a cleaned one) took its place.
                if segment.base_offset not in self._segments:
                    try:
                        path = self.producer_state_manager.remove_and_mark_snapshot_for_deletion(segment.base_offset)
                    except OSError as exc:
                        self._io_failure(exc, "producer snapshot deletion")
                    if path is not None:
                        removed.append(DeletedFile(path, self.fs))
            self._timestamp_prefix_key = None
        self.segment_deleter.schedule(removed, self._config.file_delete_delay_ms)

    # -- producer state ----------------------------------------------------------------------

    def remove_expired_producers(self, now_ms: int) -> int:
        """Forget producer ids whose last batch is ``producer.id.expiration.ms`` old (Kafka's
        producerExpireCheck); returns how many. A forgotten id that sends again with a sequence
        other than 0 gets UNKNOWN_PRODUCER_ID, and the cleaner no longer keeps its last batch."""
        with self._lock:
            return self.producer_state_manager.remove_expired_producers(now_ms)

    def producer_states(self) -> list[ProducerStateInfo]:
        """Every active producer id's state on this partition (Kafka's DescribeProducers answer)."""
        with self._lock:
            return [
                ProducerStateInfo(
                    pid,
                    entry.producer_epoch,
                    entry.last_seq,
                    entry.last_timestamp,
                    entry.coordinator_epoch,
                    entry.current_txn_first_offset,
                )
                for pid, entry in self.producer_state_manager.producers.items()
            ]

    def ongoing_transactions_older_than(self, timestamp_ms: int) -> list[tuple[int, int, int]]:
        """(producer id, producer epoch, first offset) of each open transaction whose producer
        last wrote before ``timestamp_ms``: candidates for the coordinator's hanging-transaction
        tooling (kafka-transactions.sh find-hanging)."""
        with self._lock:
            return self.producer_state_manager.ongoing_txns_older_than(timestamp_ms)

    def last_records_of_active_producers(self) -> tuple[tuple[int, int, int], ...]:
        """(producer id, offset of its last data batch or -1, epoch) of every active producer
        (Kafka's lastRecordsOfActiveProducers): the cleaner keeps these batches, emptied if need be."""
        with self._lock:
            return tuple(
                (pid, entry.last_data_offset, entry.producer_epoch)
                for pid, entry in self.producer_state_manager.producers.items()
            )

    # -- lifecycle ---------------------------------------------------------------------------

    def close(self, *, sync: bool = True) -> None:
        """Clean close: final index entries, trimmed indexes, files closed. Does not flush data,
        but with ``sync`` makes the trims durable (fsync of the files it changed and of the
        directory): after a clean shutdown the loader trusts them, and an index whose trim a
        power cut undid reads its zero padding as entries (KAFKA-10207)."""
        # The spare lock first (as prepare_spare takes them): no spare is being made meanwhile,
        # so none appears in the directory after this removed it.
        with self._spare_lock, self._lock:
            if self._closed:
                return
            if not self.offline:
                # Kafka's UnifiedLog.close: the state at the log end, so the next start replays nothing.
                try:
                    self._take_producer_snapshot(self._next_offset, sync=sync)
                    if sync:
                        self.producer_state_manager.fsync_snapshots()
                except OSError as exc:
                    logger.warning("could not write the producer snapshot of %s: %s", self.directory.name, exc)
            self._closed = True
            changed = set(self._unsynced_sealed) | {self._active.base_offset}
            for segment in self._segments:
                segment.close(sync=sync and segment.base_offset in changed)
            self._unsynced_sealed.clear()
            self._unsealed.clear()
            spare, self._spare = self._spare, None
            if spare is not None:
                self._remove_files(spare)
            if sync:
                self.fs.fsync_dir(self.directory)

    def delete(self) -> None:
        """Remove the whole partition directory (topic deletion)."""
        with self._spare_lock, self._lock:
            self._closed = True
            for segment in self._segments.clear():
                segment.close_handlers()
            self.fs.rmtree(self.directory)

    def __repr__(self) -> str:
        return (
            f"Log({self.directory.name}, start={self._log_start_offset}, end={self._next_offset}, "
            f"segments={len(self._segments)})"
        )

    # -- compaction support (cleaner) --------------------------------------------------------

    #: Test hook: called with a step name after every file operation of replace_segments, so
    #: crash tests can capture the directory in each intermediate state. None in production.
    replace_segments_hook = None
    #: The reason old segments are passed to _remove_and_delete_segments with (not a retention
    #: reason, so the per-reason deletion metric leaves them out).
    CLEANER_REPLACED = "cleaner"

    def segments_snapshot(self) -> list[LogSegment]:
        """The segments, oldest first, as one consistent list (the cleaner plans from it)."""
        with self._lock:
            self._check_open()
            try:
                self._seal_rolled_locked()  # the cleaner reads inactive segments as sealed files
            except StorageError:
                if self.offline:
                    raise
                # A full disk or no descriptor: the cleaner reads the still mapped indexes, as
                # readers do, and the next flush seals them.
            return list(self._segments)

    def replace_segments(self, new_segments: list[LogSegment], old_segments: list[LogSegment]) -> None:
        """Swap the cleaner's ``.cleaned`` ``new_segments`` in for ``old_segments`` (Kafka's
        LocalLog.replaceSegments), under the log's lock so readers see either set whole.

        Crash-safe at every step because of the order: (1) .cleaned -> .swap for every new
        segment (newest first); a crash before the last rename leaves a .cleaned file, so the
        loader drops every .swap at or above it and the old segments stand; (2) the new
        segments enter the map; (3) each old segment leaves the map and its files become
        .deleted; from a crash here the loader completes the swap (a .swap replaces every file
        in its offset range); (4) .swap -> plain names, then the directory is synced.
        Raises StorageError, with nothing renamed, if an old segment left the log meanwhile.
        """
        new_sorted = sorted(new_segments, key=lambda s: s.base_offset)
        old_sorted = sorted(old_segments, key=lambda s: s.base_offset)
        hook = self.replace_segments_hook
        with self._lock:
            self._check_open()
            if any(self._segments.get(s.base_offset) is not s for s in old_sorted):
                raise StorageError(f"segments of {self.directory.name} changed while they were being cleaned")
            if any(s.base_offset >= self._active.base_offset for s in old_sorted):
                raise StorageError(f"the cleaner may not replace the active segment of {self.directory.name}")
            if hook is not None:
                hook("cleaned")
            try:
                for segment in reversed(new_sorted):
                    self._rename_segment_files(segment, filenames.CLEANED_FILE_SUFFIX, filenames.SWAP_FILE_SUFFIX, hook)
                for segment in reversed(new_sorted):
                    self._segments.add(segment)
                for segment in old_sorted:
                    self._remove_and_delete_segments([segment], self.CLEANER_REPLACED)
                    if hook is not None:
                        hook(f"deleted {segment.base_offset}")
                for segment in new_sorted:
                    self._rename_segment_files(segment, filenames.SWAP_FILE_SUFFIX, "", hook)
                self.fs.fsync_dir(self.directory)
            except OSError as exc:
                if not is_out_of_descriptors(exc):
                    self._go_offline(exc)
                # Only the directory sync could not open its descriptor: every rename is done,
                # and if a power cut undoes some of them the loader finishes the swap (the
                # renames' order makes every prefix recoverable). The next flush syncs the dir.
                logger.warning("could not sync directory %s after a cleaner swap: %s", self.directory, exc)
            self._timestamp_prefix_key = None

    @staticmethod
    def _rename_segment_files(segment: LogSegment, old_suffix: str, new_suffix: str, hook) -> None:
        """LogSegment.change_file_suffixes one file at a time, so a crash test sees each state."""
        for holder in (segment.log, segment.lazy_offset_index, segment.lazy_time_index, segment.txn_index):
            name = holder.path.name
            if not name.endswith(old_suffix):
                raise ValueError(f"{holder.path} does not end with {old_suffix!r}")
            holder.rename_to(holder.path.with_name(name[: len(name) - len(old_suffix)] + new_suffix))
            if hook is not None:
                hook(f"renamed {holder.path.name}")


def _stamp_log_append_time(batch: bytes, now_ms: int) -> bytes:
    """The batch with timestamp type LogAppendTime and ``now_ms`` as its max timestamp, CRC redone."""
    out = bytearray(batch)
    _ATTRIBUTES.pack_into(
        out, ATTRIBUTES_OFFSET, _ATTRIBUTES.unpack_from(out, ATTRIBUTES_OFFSET)[0] | TIMESTAMP_TYPE_MASK
    )
    _MAX_TIMESTAMP.pack_into(out, MAX_TIMESTAMP_OFFSET, now_ms)
    _CRC.pack_into(out, CRC_OFFSET, compute_crc(out))
    return bytes(out)


def _marker_or_none(batch) -> tuple[bool, int] | None:
    try:
        return end_txn_marker_of(batch)
    except CorruptRecordError:
        return None  # (a batch that passed its CRC: only an unreadable control record)


def _replay_segment(
    psm: ProducerStateManager, segment: LogSegment, position: int, start: int, index_aborted: bool = False
) -> int:
    """Replay the producer batches of ``segment`` from ``position`` whose last offset is at or
    after ``start`` into ``psm`` (a control batch's marker is read, 78 bytes); completed
    transactions are completed and, with ``index_aborted``, aborted ones are written to the
    segment's ``.txnindex`` (Kafka's LogSegment.recover with its producer state). How many
    batches were replayed."""
    replayed = 0
    for batch_position, header in segment.log.batch_headers(position):
        if header.last_offset < start or header.producer_id < 0:
            continue
        attributes = header.attributes
        is_control = bool(attributes & CONTROL_FLAG)
        completed = psm.replay_batch(
            header.producer_id,
            header.producer_epoch,
            header.base_sequence,
            header.last_offset,
            header.last_offset_delta,
            header.max_timestamp,
            is_control,
            bool(attributes & TRANSACTIONAL_FLAG),
            _marker_or_none(segment.log.read(batch_position, header.size)) if is_control else None,
        )
        if completed is not None:
            if index_aborted and completed.is_aborted:
                segment.update_txn_index(
                    completed.producer_id,
                    completed.first_offset,
                    completed.last_offset,
                    psm.last_stable_offset(completed),
                )
            psm.complete_txn(completed)
        replayed += 1
    return replayed


def rebuild_txn_indexes(
    directory: Path,
    segments: LogSegments,
    recovered: list[LogSegment],
    log_start_offset: int,
    producer_id_expiration_ms: int,
    now_ms: int,
    fs: FileSystem = OS_FS,
) -> int:
    """Rebuild the ``.txnindex`` of the segments recovery rebuilt (a torn tail, a missing or
    corrupt index), from the producer state at the first one's base offset (the newest snapshot
    at or below it, read but not changed, plus a replay of the segments between): Kafka's
    recoverSegment, with one replay for all of them. Returns how many entries were written."""
    targets = {segment.base_offset: segment for segment in recovered if segments.get(segment.base_offset) is segment}
    if not targets:
        return 0
    for segment in targets.values():
        segment.txn_index.reset()
    first, last = min(targets), max(targets)
    psm = ProducerStateManager(directory, producer_id_expiration_ms, fs)
    psm.load_snapshot_at_or_below(first, log_start_offset, now_ms)
    map_end = psm.last_map_offset
    written = 0
    for segment in segments.values(min(map_end, first), last + 1):  # (the log start may lie past `first`)
        target = segment.base_offset in targets
        before = len(segment.txn_index) if target else 0
        position = 0
        if segment.base_offset < map_end:
            found = segment.translate_offset(map_end)
            if found is None:
                continue
            position = found[0]
        _replay_segment(psm, segment, position, map_end, index_aborted=target)
        if target:
            written += len(segment.txn_index) - before
            segment.txn_index.close()
            if len(segment.txn_index):
                segment.txn_index.flush()
    if written:
        fs.fsync_dir(directory)
    return written


def rebuild_producer_state(
    psm: ProducerStateManager, segments: LogSegments, log_start_offset: int, last_offset: int, now_ms: int
) -> int:
    """Bring ``psm`` to ``last_offset`` (the recovered log end): the newest snapshot at or below
    it, then the batch headers after it (Kafka's UnifiedLog.rebuildProducerState; replayed
    batches are not checked, the log is the truth). Snapshots are taken at the base offsets
    of the last two segments passed and at the end. Returns how many batches were replayed.

    Unlike Kafka, a log without any snapshot is replayed from its start even after a clean
    shutdown (Kafka skips the scan there, for logs from before the snapshot format): a clean
    shutdown whose snapshot could not be written (a full disk) must not forget the producers.
    It costs one header read per batch, once: the replay ends with a snapshot."""
    bases = [segment.base_offset for segment in segments]
    offsets_to_snapshot = set(bases[-2:]) | {last_offset}
    psm.truncate_and_reload(log_start_offset, last_offset, now_ms)
    replayed = 0
    map_end = psm.last_map_offset
    if map_end < last_offset:
        active = segments.active_segment if not segments.is_empty else None
        for segment in segments.values(map_end, last_offset):
            start = max(segment.base_offset, map_end, log_start_offset)
            if segment.base_offset in offsets_to_snapshot and start == segment.base_offset:
                psm.update_map_end_offset(start)
                psm.take_snapshot(sync=False)
            position = 0
            if segment is active and start > segment.base_offset:
                found = segment.translate_offset(start)
                if found is None:
                    continue
                position = found[0]
            replayed += _replay_segment(psm, segment, position, start)
    psm.update_map_end_offset(last_offset)
    psm.take_snapshot(sync=False)
    return replayed
