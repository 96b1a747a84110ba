"""Producer state of one partition: idempotent producers' sequences (Kafka's ProducerStateManager).

Each producer id keeps the metadata of its last 5 batches (Kafka's NUM_BATCHES_TO_RETAIN): a
batch the producer sends again after a lost response is recognised and answered with the
offsets it got the first time, instead of being appended twice. The state is derived from the
log; ``.snapshot`` files (Kafka's bytes, named by the offset they cover up to) let a restart
replay only the log after the newest one.

Snapshot layout (big-endian; Kafka's ProducerSnapshot schema version 1): int16 version, uint32
CRC-32C of everything after it, int32 entry count, then per producer 46 bytes: producer id
int64, epoch int16, last sequence int32, last offset int64, offset delta int32, timestamp
int64, coordinator epoch int32, current transaction first offset int64. Only each producer's
newest batch is stored, as Kafka does.

Append-time rules, in Kafka's order (check_append): an exact duplicate of a cached batch is
answered with its original offsets; a batch older than the cached window gets
DUPLICATE_SEQUENCE_NUMBER (Kafka 1.0's rule, which closes the gap a snapshot's single cached
batch leaves after a restart; clients complete such a batch as sent); an older epoch gets
INVALID_PRODUCER_EPOCH; a producer id this partition does not know, sending a first sequence
other than 0, gets UNKNOWN_PRODUCER_ID (Kafka 2.x's rule); a gap gets OUT_OF_ORDER_SEQUENCE_NUMBER.
A higher epoch starting at sequence 0 is accepted (an idempotent producer's epoch bump).

Transactions (Kafka's ProducerAppendInfo): a producer's first transactional data batch opens its
transaction (``current_txn_first_offset``, kept in the snapshot, so an open transaction survives
a restart); a non-transactional batch while it is open gets INVALID_TXN_STATE; its COMMIT or ABORT
marker closes it and yields a CompletedTxn, after two checks (check_end_txn_marker): the marker's
producer epoch may not be older than the producer's (INVALID_PRODUCER_EPOCH) nor its coordinator
epoch older than the last marker's (TRANSACTION_COORDINATOR_FENCED). The manager keeps the open
transactions by first offset (they open at the log end, so in append order: the oldest is the
first key of a dict) and the completed ones whose marker is not yet below the high watermark; the
oldest of either is the partition's first unstable offset, which bounds its last stable offset.
"""

from __future__ import annotations

import bisect
import gc
import heapq
import logging
import os
import struct
from collections import deque
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

from crc32c import crc32c

from triolog.protocol.errors import (
    DuplicateSequenceNumberError,
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceNumberError,
    TransactionCoordinatorFencedError,
    UnknownProducerIdError,
)

from . import filenames
from .fs import OS_FS, FileSystem, read_file

logger = logging.getLogger(__name__)

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_TIMESTAMP = -1
INT32_MAX = 2**31 - 1
#: Kafka's ProducerStateEntry.NUM_BATCHES_TO_RETAIN (also the most requests an idempotent
#: producer may have in flight per connection).
NUM_BATCHES_TO_RETAIN = 5

PRODUCER_SNAPSHOT_VERSION = 1
_SNAPSHOT_HEADER = struct.Struct(">hIi")  # version, crc, entry count
_SNAPSHOT_ENTRY = struct.Struct(">qhiqiqiq")  # 46 bytes
_CRC_OFFSET = 2
_ENTRIES_OFFSET = 6
#: Suffix of a snapshot being written; renamed to its final name once complete.
TMP_SUFFIX = ".tmp"


class CorruptSnapshotError(Exception):
    """A snapshot file that fails its version or CRC check, or is cut short."""


# -- sequence numbers ------------------------------------------------------------------------


def increment_sequence(sequence: int, increment: int) -> int:
    """``sequence + increment``, wrapping past Int.MAX to 0 (Kafka's DefaultRecordBatch)."""
    if sequence > INT32_MAX - increment:
        return increment - (INT32_MAX - sequence) - 1
    return sequence + increment


def decrement_sequence(sequence: int, decrement: int) -> int:
    """The inverse of increment_sequence."""
    if sequence < decrement:
        return INT32_MAX - (decrement - sequence) + 1
    return sequence - decrement


def in_sequence(last_sequence: int, next_sequence: int) -> bool:
    return next_sequence == last_sequence + 1 or (next_sequence == 0 and last_sequence == INT32_MAX)


def _sequence_before(a: int, b: int) -> bool:
    """Whether sequence ``a`` comes strictly before ``b`` in the wrapping sequence space (less than
    half of it apart). Kafka 1.0 compared the two integers, which calls a batch that follows a
    wrap past Int.MAX a duplicate; this does not."""
    return 0 < (b - a) % (INT32_MAX + 1) < (INT32_MAX + 1) // 2


# -- entries ---------------------------------------------------------------------------------


class BatchMetadata(NamedTuple):
    last_seq: int
    last_offset: int
    offset_delta: int
    timestamp: int

    @property
    def first_seq(self) -> int:
        return decrement_sequence(self.last_seq, self.offset_delta)

    @property
    def first_offset(self) -> int:
        return self.last_offset - self.offset_delta


_new_tuple = tuple.__new__  # a NamedTuple without its constructor's argument handling (hot path)


class CompletedTxn(NamedTuple):
    """A transaction its marker closed (Kafka's CompletedTxn): first data offset, marker offset."""

    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool


class TxnMetadata:
    """An open (or completed but not yet replicated) transaction of a partition (Kafka's TxnMetadata)."""

    __slots__ = ("producer_id", "first_offset", "last_offset")

    def __init__(self, producer_id: int, first_offset: int, last_offset: int = -1):
        self.producer_id = producer_id
        self.first_offset = first_offset
        #: The marker's offset once completed; -1 while open.
        self.last_offset = last_offset

    def __repr__(self) -> str:
        return f"TxnMetadata(producer_id={self.producer_id}, first_offset={self.first_offset}, last_offset={self.last_offset})"


class ProducerStateEntry:
    """One producer id's epoch and its last batches, oldest first."""

    __slots__ = (
        "producer_id",
        "producer_epoch",
        "coordinator_epoch",
        "last_timestamp",
        "current_txn_first_offset",
        "batch_metadata",
    )

    def __init__(
        self,
        producer_id: int,
        producer_epoch: int = NO_PRODUCER_EPOCH,
        coordinator_epoch: int = -1,
        last_timestamp: int = NO_TIMESTAMP,
        current_txn_first_offset: int = -1,
        batches: Iterable[BatchMetadata] = (),
    ):
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.coordinator_epoch = coordinator_epoch
        self.last_timestamp = last_timestamp
        self.current_txn_first_offset = current_txn_first_offset
        self.batch_metadata: deque[BatchMetadata] = deque(batches, NUM_BATCHES_TO_RETAIN)

    @property
    def first_seq(self) -> int:
        return self.batch_metadata[0].first_seq if self.batch_metadata else NO_SEQUENCE

    @property
    def last_seq(self) -> int:
        return self.batch_metadata[-1].last_seq if self.batch_metadata else NO_SEQUENCE

    @property
    def first_data_offset(self) -> int:
        return self.batch_metadata[0].first_offset if self.batch_metadata else -1

    @property
    def last_data_offset(self) -> int:
        return self.batch_metadata[-1].last_offset if self.batch_metadata else -1

    @property
    def last_offset_delta(self) -> int:
        return self.batch_metadata[-1].offset_delta if self.batch_metadata else 0

    def maybe_update_producer_epoch(self, epoch: int) -> bool:
        """A new epoch forgets the old epoch's batches (their sequences start over)."""
        if self.producer_epoch != epoch:
            self.batch_metadata.clear()
            self.producer_epoch = epoch
            return True
        return False

    def add_batch(self, epoch: int, last_seq: int, last_offset: int, offset_delta: int, timestamp: int) -> None:
        if self.producer_epoch != epoch:
            self.maybe_update_producer_epoch(epoch)
        self.batch_metadata.append(_new_tuple(BatchMetadata, (last_seq, last_offset, offset_delta, timestamp)))
        self.last_timestamp = timestamp

    def find_duplicate_batch(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        """The cached batch with exactly these sequences in this epoch (a producer's retry)."""
        if epoch != self.producer_epoch:
            return None
        for batch in self.batch_metadata:
            if batch.last_seq == last_seq and batch.first_seq == first_seq:
                return batch
        return None

    def __repr__(self) -> str:
        return (
            f"ProducerStateEntry(producer_id={self.producer_id}, epoch={self.producer_epoch}, "
            f"last_timestamp={self.last_timestamp}, batches={list(self.batch_metadata)})"
        )


def check_append(
    entry: ProducerStateEntry | None, producer_id: int, epoch: int, first_seq: int, last_seq: int, partition: str = ""
) -> BatchMetadata | None:
    """Judge a producer's batch against its state (a leader append): the cached batch it
    duplicates, or None when it may be appended. Raises the wire error otherwise. Pure: the
    caller updates the entry after the append succeeded."""
    if entry is not None and entry.producer_epoch == epoch and entry.batch_metadata:
        # The common case first: the next batch in sequence (it cannot equal a cached batch).
        current_last = entry.batch_metadata[-1][0]
        if first_seq == current_last + 1 or (first_seq == 0 and current_last == INT32_MAX):
            return None
    where = f" on {partition}" if partition else ""
    if entry is not None and entry.producer_epoch == epoch and entry.batch_metadata:
        duplicate = entry.find_duplicate_batch(epoch, first_seq, last_seq)
        if duplicate is not None:
            return duplicate
        oldest = entry.first_seq
        # Bounded: the records of sequences last_seq..oldest-1 would lie at distinct offsets below
        # the oldest remembered batch, so a batch further behind than that was never appended.
        if (
            _sequence_before(last_seq, oldest)
            and not in_sequence(entry.last_seq, first_seq)
            and (oldest - last_seq) % (INT32_MAX + 1) <= entry.batch_metadata[0].first_offset
        ):
            raise DuplicateSequenceNumberError(
                f"batch of producer {producer_id} epoch {epoch} with sequences {first_seq}..{last_seq}{where} "
                f"is older than the {len(entry.batch_metadata)} batches the broker remembers (sequences "
                f"{oldest}..{entry.last_seq}): it was written before",
                flush_before=entry.batch_metadata[0].first_offset,
            )
    current_epoch = entry.producer_epoch if entry is not None else NO_PRODUCER_EPOCH
    if current_epoch != NO_PRODUCER_EPOCH and epoch < current_epoch:
        raise InvalidProducerEpochError(
            f"producer {producer_id}{where} sent epoch {epoch}, older than its current epoch {current_epoch}"
        )
    if epoch != current_epoch:
        if first_seq != 0:
            if current_epoch == NO_PRODUCER_EPOCH:
                raise UnknownProducerIdError(
                    f"producer {producer_id}{where} is unknown (never seen, or its state expired or was "
                    f"removed with the log) and its batch starts at sequence {first_seq}, not 0"
                )
            raise OutOfOrderSequenceNumberError(
                f"producer {producer_id}{where} started epoch {epoch} at sequence {first_seq}; "
                f"a new epoch must start at 0"
            )
        return None
    # entry None here: an unknown producer whose batch has epoch -1 (refused by the validator;
    # kept safe for any other caller): no last sequence on record.
    current_last_seq = entry.last_seq if entry is not None else NO_SEQUENCE
    if current_last_seq == NO_SEQUENCE:
        if first_seq != 0:
            raise UnknownProducerIdError(
                f"producer {producer_id}{where} has no batch on record in epoch {epoch} and its batch starts "
                f"at sequence {first_seq}, not 0"
            )
        return None
    if not in_sequence(current_last_seq, first_seq):
        raise OutOfOrderSequenceNumberError(
            f"out of order sequence number for producer {producer_id}{where} epoch {epoch}: "
            f"{first_seq} (incoming batch's first sequence), {current_last_seq} (last sequence written)"
        )
    return None


def check_producer_epoch(entry: ProducerStateEntry | None, producer_id: int, epoch: int, partition: str = "") -> None:
    """The epoch check alone (a coordinator's write in the producer's name, whose sequence is
    the coordinator's): an epoch older than the producer's current one is fenced."""
    if entry is not None and entry.producer_epoch != NO_PRODUCER_EPOCH and epoch < entry.producer_epoch:
        where = f" on {partition}" if partition else ""
        raise InvalidProducerEpochError(
            f"producer {producer_id}{where} sent epoch {epoch}, older than its current epoch {entry.producer_epoch}"
        )


def check_txn_state(
    entry: ProducerStateEntry | None, producer_id: int, is_transactional: bool, partition: str = ""
) -> None:
    """Kafka's rule for a data batch that passed check_append: no non-transactional batch while
    the producer's transaction is open."""
    if not is_transactional and entry is not None and entry.current_txn_first_offset >= 0:
        where = f" on {partition}" if partition else ""
        raise InvalidTxnStateError(
            f"expected a transactional batch from producer {producer_id}{where}: its transaction "
            f"from offset {entry.current_txn_first_offset} is open"
        )


class VerificationGuard:
    """A partition leader's token for one producer's transaction verification (KIP-890 part 1,
    Kafka's VerificationGuard): taken before the leader asks the transaction coordinator whether
    the partition is in the producer's transaction, and still the producer's at the append only
    if no marker or other transactional batch came in between. A batch that opens a transaction
    needs the guard it was verified with."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"VerificationGuard({id(self):#x})"


#: Verification asked, none needed: the producer's transaction was open here when asked. An
#: append with it that would open a transaction is refused (the transaction ended meanwhile).
NO_VERIFICATION_NEEDED = VerificationGuard()


def check_end_txn_marker(
    entry: ProducerStateEntry | None,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    partition: str = "",
    transaction_version: int = 0,
) -> None:
    """Kafka's checks of a COMMIT/ABORT marker a coordinator writes (appendEndTxnMarker): the
    producer epoch may not go back, nor the coordinator epoch. A transaction version 2 marker
    carries the epoch bumped at its EndTxn (KIP-890), so it must be above the epoch of the
    transaction open here: one that is not belongs to an earlier transaction of the producer,
    delayed, and would otherwise end the next one."""
    if entry is None:
        return
    where = f" on {partition}" if partition else ""
    if transaction_version >= 2 and entry.current_txn_first_offset >= 0 and producer_epoch <= entry.producer_epoch:
        raise InvalidProducerEpochError(
            f"transaction marker for producer {producer_id}{where} has epoch {producer_epoch}, not above the epoch "
            f"{entry.producer_epoch} of the transaction open since offset {entry.current_txn_first_offset}: it "
            f"belongs to an earlier transaction"
        )
    if entry.producer_epoch != NO_PRODUCER_EPOCH and producer_epoch < entry.producer_epoch:
        raise InvalidProducerEpochError(
            f"transaction marker for producer {producer_id}{where} has epoch {producer_epoch}, "
            f"older than its current epoch {entry.producer_epoch}"
        )
    if entry.coordinator_epoch > coordinator_epoch:
        raise TransactionCoordinatorFencedError(
            f"invalid coordinator epoch for producer {producer_id}{where}: {coordinator_epoch} (zombie), "
            f"{entry.coordinator_epoch} (current)"
        )


# -- snapshot files --------------------------------------------------------------------------


def encode_snapshot(entries: Iterable[ProducerStateEntry]) -> bytearray:
    """The bytes of a snapshot holding each entry's newest batch (Kafka's writeSnapshot)."""
    entries = list(entries)
    size = _ENTRIES_OFFSET + 4 + _SNAPSHOT_ENTRY.size * len(entries)
    buffer = bytearray(size)
    _SNAPSHOT_HEADER.pack_into(buffer, 0, PRODUCER_SNAPSHOT_VERSION, 0, len(entries))
    pack, position, step = _SNAPSHOT_ENTRY.pack_into, _ENTRIES_OFFSET + 4, _SNAPSHOT_ENTRY.size
    for entry in entries:
        metadata = entry.batch_metadata
        if metadata:
            last = metadata[-1]
            last_seq, last_offset, offset_delta = last.last_seq, last.last_offset, last.offset_delta
        else:
            last_seq, last_offset, offset_delta = NO_SEQUENCE, -1, 0
        pack(
            buffer,
            position,
            entry.producer_id,
            entry.producer_epoch,
            last_seq,
            last_offset,
            offset_delta,
            entry.last_timestamp,
            entry.coordinator_epoch,
            entry.current_txn_first_offset,
        )
        position += step
    struct.pack_into(">I", buffer, _CRC_OFFSET, crc32c(memoryview(buffer)[_ENTRIES_OFFSET:]))
    return buffer


def decode_snapshot(data) -> list[ProducerStateEntry]:
    """Entries of a snapshot's bytes; CorruptSnapshotError if they fail a check (Kafka's readSnapshot)."""
    if len(data) < _ENTRIES_OFFSET + 4:
        raise CorruptSnapshotError(f"snapshot of {len(data)} bytes is shorter than its header")
    version, crc, count = _SNAPSHOT_HEADER.unpack_from(data, 0)
    if version != PRODUCER_SNAPSHOT_VERSION:
        raise CorruptSnapshotError(
            f"snapshot has version {version}; this broker reads version {PRODUCER_SNAPSHOT_VERSION}"
        )
    computed = crc32c(memoryview(data)[_ENTRIES_OFFSET:])
    if computed != crc:
        raise CorruptSnapshotError(f"snapshot failed its CRC check (stored {crc}, computed {computed})")
    if count < 0 or len(data) != _ENTRIES_OFFSET + 4 + count * _SNAPSHOT_ENTRY.size:
        raise CorruptSnapshotError(f"snapshot of {len(data)} bytes does not hold the {count} entries it counts")
    # Built without the constructors' argument handling, and with the cyclic garbage collector
    # paused: its passes over the new objects were 3/4 of the load time of 100k producer ids.
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _decode_entries(data)
    finally:
        if collecting:
            gc.enable()


def _decode_entries(data) -> list[ProducerStateEntry]:
    entries: list[ProducerStateEntry] = []
    append = entries.append
    new_entry, new_tuple = ProducerStateEntry.__new__, _new_tuple
    for (
        producer_id,
        epoch,
        last_seq,
        last_offset,
        offset_delta,
        timestamp,
        coordinator_epoch,
        txn_first_offset,
    ) in _SNAPSHOT_ENTRY.iter_unpack(memoryview(data)[_ENTRIES_OFFSET + 4 :]):
        entry = new_entry(ProducerStateEntry)
        entry.producer_id = producer_id
        entry.producer_epoch = epoch
        entry.coordinator_epoch = coordinator_epoch
        entry.last_timestamp = timestamp
        entry.current_txn_first_offset = txn_first_offset
        entry.batch_metadata = deque(
            (new_tuple(BatchMetadata, (last_seq, last_offset, offset_delta, timestamp)),) if last_offset >= 0 else (),
            NUM_BATCHES_TO_RETAIN,
        )
        append(entry)
    return entries


def read_snapshot(path: Path, fs: FileSystem = OS_FS) -> list[ProducerStateEntry]:
    return decode_snapshot(read_file(fs, path))


def write_snapshot(path: Path, entries: Iterable[ProducerStateEntry], *, sync: bool, fs: FileSystem = OS_FS) -> None:
    """Write ``path`` whole or not at all: into ``path.tmp``, fsynced if ``sync``, then renamed.
    (Kafka writes the final name directly; its CRC catches a torn file, which then costs a replay.)"""
    data = encode_snapshot(entries)
    tmp = path.with_name(path.name + TMP_SUFFIX)
    fd = fs.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        position = 0
        while position < len(data):
            position += fs.pwrite(fd, view[position:], position)
        if sync:
            fs.fsync(fd)
    except BaseException:
        fs.close(fd)
        try:
            fs.unlink(tmp)
        except OSError:
            pass
        raise
    fs.close(fd)
    fs.replace(tmp, path)


def snapshot_offset(name: str) -> int | None:
    """The offset of a ``<20 digits>.snapshot`` file name, else None."""
    if not name.endswith(filenames.PRODUCER_SNAPSHOT_FILE_SUFFIX):
        return None
    try:
        return filenames.offset_from_file_name(name)
    except ValueError:
        return None


# -- the manager -----------------------------------------------------------------------------


class ProducerStateManager:
    """The producer ids of one partition and its snapshot files. Not thread-safe: the Log calls
    it under its lock."""

    def __init__(self, directory: Path, producer_id_expiration_ms: int, fs: FileSystem = OS_FS):
        self.directory = Path(directory)
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.fs = fs
        self.producers: dict[int, ProducerStateEntry] = {}
        #: Open transactions by first offset, oldest first (Kafka's ongoingTxns): a transaction
        #: opens at the log end, so insertion order is offset order (loads sort theirs).
        self.ongoing_txns: dict[int, TxnMetadata] = {}
        #: Completed transactions whose marker is not yet below the high watermark, by first offset
        #: (Kafka's unreplicatedTxns; only a replicated log has any for long). Inserted as their
        #: markers are appended, so in marker order: the high watermark prunes a prefix.
        self.unreplicated_txns: dict[int, TxnMetadata] = {}
        #: Their first offsets as a min-heap (entries no longer in unreplicated_txns are skipped).
        self._unreplicated_firsts: list[int] = []
        #: Producers whose transaction is being verified here: their VerificationGuard (in
        #: memory only, as Kafka's verificationStateEntries: a restart makes producers verify again).
        self.verification_guards: dict[int, VerificationGuard] = {}
        #: The offset up to which (exclusive) the state covers the log.
        self.last_map_offset = 0
        #: The offset of the newest snapshot written or loaded.
        self.last_snap_offset = 0
        self._snapshot_offsets: list[int] = []  # sorted
        #: Snapshots written without fsync (at a roll): the next flush of the log syncs them.
        self.unsynced_snapshots: set[int] = set()
        self._load_snapshot_offsets()

    # -- files ------------------------------------------------------------------------------

    def _load_snapshot_offsets(self) -> None:
        offsets = []
        try:
            entries = self.fs.scandir(self.directory)
        except FileNotFoundError:
            entries = []
        for entry in entries:
            name = entry.name
            if name.endswith(filenames.PRODUCER_SNAPSHOT_FILE_SUFFIX + TMP_SUFFIX):
                self._unlink(Path(entry.path))  # a write a crash interrupted
                continue
            offset = snapshot_offset(name)
            if offset is not None:
                offsets.append(offset)
        self._snapshot_offsets = sorted(offsets)

    def snapshot_file(self, offset: int) -> Path:
        return filenames.producer_snapshot_file(self.directory, offset)

    @property
    def snapshot_offsets(self) -> list[int]:
        return list(self._snapshot_offsets)

    def latest_snapshot_offset(self) -> int | None:
        return self._snapshot_offsets[-1] if self._snapshot_offsets else None

    def oldest_snapshot_offset(self) -> int | None:
        return self._snapshot_offsets[0] if self._snapshot_offsets else None

    def _unlink(self, path: Path) -> None:
        try:
            self.fs.unlink(path)
        except FileNotFoundError:
            pass

    def _forget(self, offset: int) -> None:
        i = bisect.bisect_left(self._snapshot_offsets, offset)
        if i < len(self._snapshot_offsets) and self._snapshot_offsets[i] == offset:
            del self._snapshot_offsets[i]
        self.unsynced_snapshots.discard(offset)

    def remove_and_delete_snapshot(self, offset: int) -> None:
        self._forget(offset)
        self._unlink(self.snapshot_file(offset))

    def remove_and_mark_snapshot_for_deletion(self, offset: int) -> Path | None:
        """Rename the snapshot at ``offset`` (if any) ``.deleted``, for a later delete; its path."""
        i = bisect.bisect_left(self._snapshot_offsets, offset)
        if i == len(self._snapshot_offsets) or self._snapshot_offsets[i] != offset:
            return None
        self._forget(offset)
        path = self.snapshot_file(offset)
        target = path.with_name(path.name + filenames.DELETED_FILE_SUFFIX)
        try:
            self.fs.replace(path, target)
        except FileNotFoundError:
            return None
        return target

    def remove_stray_snapshots(self, segment_base_offsets: Iterable[int]) -> None:
        """Delete snapshots not at a segment's base offset, except the newest one if it lies at or
        past the last segment's base (the one a clean shutdown wrote at the log end)."""
        bases = sorted(set(segment_base_offsets))
        largest_base = bases[-1] if bases else None
        base_set = set(bases)
        strays = [offset for offset in self._snapshot_offsets if offset not in base_set]
        keep = None
        if strays and largest_base is not None and strays[-1] >= largest_base:
            keep = strays.pop()
        for offset in strays:
            logger.info("deleting stray producer snapshot %s", self.snapshot_file(offset))
            self.remove_and_delete_snapshot(offset)
        if keep is not None:
            logger.debug("keeping producer snapshot %d past the last segment base", keep)

    def delete_snapshots_before(self, offset: int) -> None:
        for snapshot in [o for o in self._snapshot_offsets if o < offset]:
            self.remove_and_delete_snapshot(snapshot)

    def take_snapshot(self, *, sync: bool = True) -> Path | None:
        """Write a snapshot at the map end offset if it moved past the last one (Kafka's rule)."""
        offset = self.last_map_offset
        if offset <= self.last_snap_offset:
            return None
        path = self.snapshot_file(offset)
        write_snapshot(path, self.producers.values(), sync=sync, fs=self.fs)
        if offset not in self._snapshot_offsets:
            bisect.insort(self._snapshot_offsets, offset)
        if sync:
            self.unsynced_snapshots.discard(offset)
        else:
            self.unsynced_snapshots.add(offset)
        self.last_snap_offset = max(self.last_snap_offset, offset)
        return path

    def load_from_snapshot(self, log_start_offset: int, now_ms: int) -> int | None:
        """Load the newest snapshot that reads back; a corrupt one is deleted and the next older
        tried. Returns its offset (the map end offset now), or None (state empty from the log start)."""
        while self._snapshot_offsets:
            offset = self._snapshot_offsets[-1]
            path = self.snapshot_file(offset)
            try:
                entries = read_snapshot(path, self.fs)
            except (CorruptSnapshotError, FileNotFoundError) as exc:
                logger.warning("deleting producer snapshot %s: %s; trying an older one", path, exc)
                self.remove_and_delete_snapshot(offset)
                continue
            expiration = self.producer_id_expiration_ms
            self.set_producers(
                e for e in entries if not (e.current_txn_first_offset < 0 and now_ms - e.last_timestamp >= expiration)
            )
            self.last_map_offset = self.last_snap_offset = offset
            return offset
        self.clear()
        self.last_map_offset = log_start_offset
        self.last_snap_offset = log_start_offset
        return None

    def load_snapshot_at_or_below(self, offset: int, log_start_offset: int, now_ms: int) -> int | None:
        """Load the newest snapshot at or below ``offset`` (and not below the log start) that
        reads back, changing no file (a corrupt one is skipped, not deleted): the state recovery
        replays a segment's batches on. Its offset, or None (state empty from the log start)."""
        expiration = self.producer_id_expiration_ms
        for snapshot in reversed(self._snapshot_offsets):
            if snapshot > offset or snapshot < log_start_offset:
                continue
            try:
                entries = read_snapshot(self.snapshot_file(snapshot), self.fs)
            except (CorruptSnapshotError, FileNotFoundError):
                continue
            self.set_producers(
                e for e in entries if not (e.current_txn_first_offset < 0 and now_ms - e.last_timestamp >= expiration)
            )
            self.last_map_offset = self.last_snap_offset = snapshot
            return snapshot
        self.clear()
        self.last_map_offset = self.last_snap_offset = log_start_offset
        return None

    def truncate_and_reload(self, log_start_offset: int, log_end_offset: int, now_ms: int) -> None:
        """Drop snapshots past the log end or below the log start, then load the newest left
        (Kafka's truncateAndReload; a snapshot exactly at the log start is kept: it is valid there)."""
        for offset in [o for o in self._snapshot_offsets if o > log_end_offset or o < log_start_offset]:
            self.remove_and_delete_snapshot(offset)
        if log_end_offset != self.last_map_offset or not self.producers:
            self.clear()
            self.load_from_snapshot(log_start_offset, now_ms)

    def fsync_snapshots(self) -> None:
        """fsync the snapshots written at rolls (the log's flush calls this, as Kafka's flush task does)."""
        for offset in sorted(self.unsynced_snapshots):
            try:
                fd = self.fs.open(self.snapshot_file(offset), os.O_RDONLY)
            except FileNotFoundError:
                self.unsynced_snapshots.discard(offset)
                continue
            try:
                self.fs.fsync(fd)
            finally:
                self.fs.close(fd)
            self.unsynced_snapshots.discard(offset)

    # -- state ------------------------------------------------------------------------------

    def last_entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self.producers.get(producer_id)

    def set_producers(self, entries: Iterable[ProducerStateEntry]) -> None:
        """Replace the state by ``entries`` (a snapshot's), their open transactions included
        (Kafka's loadProducerEntry)."""
        self.producers = {entry.producer_id: entry for entry in entries}
        ongoing = sorted(
            (entry.current_txn_first_offset, entry.producer_id)
            for entry in self.producers.values()
            if entry.current_txn_first_offset >= 0
        )
        self.ongoing_txns = {first: TxnMetadata(pid, first) for first, pid in ongoing}
        self.unreplicated_txns = {}
        self._unreplicated_firsts = []

    def maybe_start_verification(self, producer_id: int) -> VerificationGuard:
        """The guard a transactional batch of ``producer_id`` is appended with once the
        coordinator confirmed the partition is in its transaction; NO_VERIFICATION_NEEDED when
        the producer's transaction is already open here."""
        entry = self.producers.get(producer_id)
        if entry is not None and entry.current_txn_first_offset >= 0:
            return NO_VERIFICATION_NEEDED
        # setdefault: atomic, so the request handler may call this without the log's lock (the
        # append checks the guard under the lock, which is what makes it safe).
        return self.verification_guards.setdefault(producer_id, VerificationGuard())

    def check_verification(
        self, producer_id: int, guard: VerificationGuard, is_transactional: bool, partition: str = ""
    ) -> None:
        """A verified append: a transactional batch that would open a transaction needs the
        producer's current guard (else INVALID_TXN_STATE: the transaction ended, or was never
        verified, since the leader asked)."""
        if not is_transactional:
            return
        entry = self.producers.get(producer_id)
        if entry is not None and entry.current_txn_first_offset >= 0:
            return
        if guard is NO_VERIFICATION_NEEDED or self.verification_guards.get(producer_id) is not guard:
            where = f" on {partition}" if partition else ""
            raise InvalidTxnStateError(
                f"producer {producer_id}'s transactional batch{where} was not verified with the transaction "
                f"coordinator, or its transaction ended meanwhile"
            )

    def clear(self) -> None:
        self.verification_guards = {}
        self.producers = {}
        self.ongoing_txns = {}
        self.unreplicated_txns = {}
        self._unreplicated_firsts = []

    def update(
        self,
        producer_id: int,
        epoch: int,
        last_seq: int,
        last_offset: int,
        offset_delta: int,
        timestamp: int,
        is_transactional: bool = False,
    ) -> None:
        """Record a data batch appended (or replayed) for ``producer_id``; a transactional one
        opens the producer's transaction if none is open."""
        entry = self.producers.get(producer_id)
        if entry is None:
            entry = self.producers[producer_id] = ProducerStateEntry(producer_id)
        entry.add_batch(epoch, last_seq, last_offset, offset_delta, timestamp)
        if is_transactional and entry.current_txn_first_offset < 0:
            self.verification_guards.pop(producer_id, None)  # (its transaction is open now)
            first_offset = last_offset - offset_delta
            entry.current_txn_first_offset = first_offset
            self.ongoing_txns[first_offset] = TxnMetadata(producer_id, first_offset)

    def end_txn(
        self, producer_id: int, epoch: int, coordinator_epoch: int, offset: int, timestamp: int, is_abort: bool
    ) -> CompletedTxn | None:
        """Record a COMMIT/ABORT marker at ``offset`` (checked by the caller, or replayed):
        the producer's transaction, if one was open, as a CompletedTxn (Kafka's
        appendEndTxnMarker: a marker with no data before it completes nothing). The caller
        indexes an aborted one, then calls complete_txn."""
        entry = self.producers.get(producer_id)
        if entry is None:
            entry = self.producers[producer_id] = ProducerStateEntry(producer_id)
        first_offset = entry.current_txn_first_offset
        self.verification_guards.pop(producer_id, None)  # a verification begun before is stale
        entry.maybe_update_producer_epoch(epoch)
        entry.coordinator_epoch = coordinator_epoch
        entry.current_txn_first_offset = -1
        entry.last_timestamp = timestamp
        if first_offset < 0:
            return None
        return CompletedTxn(producer_id, first_offset, offset, is_abort)

    def last_stable_offset(self, completed: CompletedTxn) -> int:
        """The LSO once ``completed`` is complete, ignoring replication: the first offset of the
        oldest other open transaction, else the offset after its marker (Kafka's rule; the value
        an aborted transaction's .txnindex entry records)."""
        for txn in self.ongoing_txns.values():  # at most one entry (this producer's) is skipped
            if txn.producer_id != completed.producer_id:
                return txn.first_offset
        return completed.last_offset + 1

    def complete_txn(self, completed: CompletedTxn) -> None:
        """Move the transaction from open to completed-but-unreplicated (Kafka's completeTxn);
        on_high_watermark_updated forgets it once the high watermark passes its marker."""
        txn = self.ongoing_txns.pop(completed.first_offset, None)
        if txn is None:
            raise ValueError(f"cannot complete transaction {completed}: it was not started")
        txn.last_offset = completed.last_offset
        self.unreplicated_txns[completed.first_offset] = txn
        heapq.heappush(self._unreplicated_firsts, completed.first_offset)

    def on_high_watermark_updated(self, high_watermark: int) -> None:
        """Forget the completed transactions whose marker is below ``high_watermark`` (a prefix:
        they are in marker order)."""
        unreplicated = self.unreplicated_txns
        while unreplicated:
            first, txn = next(iter(unreplicated.items()))
            if txn.last_offset >= high_watermark:
                break
            del unreplicated[first]
        if not unreplicated:
            self._unreplicated_firsts = []

    def first_undecided_offset(self) -> int | None:
        """The first offset of the oldest open transaction (Kafka's firstUndecidedOffset)."""
        for first in self.ongoing_txns:
            return first
        return None

    def first_unstable_offset(self) -> int | None:
        """The oldest offset whose transaction is open or whose marker is not yet replicated
        (Kafka's firstUnstableOffset); None when there is none."""
        undecided = self.first_undecided_offset()
        if not self.unreplicated_txns:
            return undecided
        heap = self._unreplicated_firsts
        while heap[0] not in self.unreplicated_txns:  # forgotten since: skipped now
            heapq.heappop(heap)
        return heap[0] if undecided is None else min(undecided, heap[0])

    def ongoing_txns_older_than(self, timestamp_ms: int) -> list[tuple[int, int, int]]:
        """(producer id, epoch, first offset) of each open transaction whose producer last wrote
        before ``timestamp_ms`` (hanging transactions, for the coordinator's tooling)."""
        found = []
        for first, txn in self.ongoing_txns.items():
            entry = self.producers.get(txn.producer_id)
            if entry is not None and entry.last_timestamp < timestamp_ms:
                found.append((txn.producer_id, entry.producer_epoch, first))
        return found

    def replay_batch(
        self,
        producer_id: int,
        epoch: int,
        base_sequence: int,
        last_offset: int,
        offset_delta: int,
        timestamp: int,
        is_control: bool,
        is_transactional: bool = False,
        marker: tuple[bool, int] | None = None,
    ) -> CompletedTxn | None:
        """A batch read back from the log (recovery, a follower's append): no checks, the log is
        the truth. ``marker``: (is abort, coordinator epoch) of a COMMIT/ABORT control batch. The
        transaction a marker completes is returned; the caller indexes it if aborted and calls
        complete_txn."""
        if is_control:
            if marker is not None:
                return self.end_txn(producer_id, epoch, marker[1], last_offset, timestamp, marker[0])
            # An empty control batch (its marker cleaned away, the header kept): only the epoch.
            entry = self.producers.get(producer_id)
            if entry is None:
                entry = self.producers[producer_id] = ProducerStateEntry(producer_id)
            entry.maybe_update_producer_epoch(epoch)
            entry.last_timestamp = timestamp
            return None
        self.update(
            producer_id,
            epoch,
            increment_sequence(base_sequence, offset_delta),
            last_offset,
            offset_delta,
            timestamp,
            is_transactional,
        )
        return None

    def update_map_end_offset(self, offset: int) -> None:
        self.last_map_offset = offset

    def is_producer_expired(self, now_ms: int, entry: ProducerStateEntry) -> bool:
        return entry.current_txn_first_offset < 0 and now_ms - entry.last_timestamp >= self.producer_id_expiration_ms

    def remove_expired_producers(self, now_ms: int) -> int:
        """Forget producers whose last batch is ``producer.id.expiration.ms`` old; how many."""
        expired = [pid for pid, entry in self.producers.items() if self.is_producer_expired(now_ms, entry)]
        for pid in expired:
            del self.producers[pid]
        return len(expired)

    def active_producers(self) -> dict[int, ProducerStateEntry]:
        return dict(self.producers)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        self.clear()
        for snapshot in list(self._snapshot_offsets):
            self.remove_and_delete_snapshot(snapshot)
        self.last_map_offset = self.last_snap_offset = offset
