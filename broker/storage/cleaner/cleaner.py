"""Cleaner: the two passes of one cleaning round over one log (Kafka's ``Cleaner.doClean``).

Pass 1 maps the dirty section [first dirty, first uncleanable) into the SkimpyOffsetMap (MD5 of
each key -> its latest offset) until the map holds ``slots x load factor`` keys; the covered end
(``latest_offset + 1``) becomes the next cleaner checkpoint. Pass 2 regroups every segment below
that end (clean and dirty part) by size, index size and relative-offset span, and copies each
group into one ``.cleaned`` segment, keeping a record iff its offset is past the mapped range or
is the map's offset for its key, and tombstones only until their batch's delete horizon.

Everything here works on plain data (:class:`CleanJob`: paths, sizes, offsets) and writes only
new ``.cleaned`` files, so the same code runs in a cleaner thread or in a worker process; the
swap into the live log (``Log.replace_segments``) is always the broker process's job. Every file
operation goes through the :class:`triolog.broker.storage.fs.FileSystem` the round is given (the log's
own in a thread, so power-loss tests cover cleaning too; a worker process has only ``OS_FS``).

Batches are copied as bytes when every record survives and no delete horizon has to be stamped;
otherwise they are rebuilt from the surviving records' own bytes (only the timestamp delta is
re-encoded when the base timestamp moves), with the original base and last offset, producer
fields, leader epoch, codec and timestamp type, as Kafka's ``buildRetainedRecordsInto`` does.

Transactions (Kafka's CleanedTransactionMetadata): the batches of an aborted transaction are
not mapped in pass 1 and are removed in pass 2; a COMMIT or ABORT marker stays while any batch
of its transaction is still in the log (the state is carried across every segment and group of
the round, as a transaction's data and its marker often lie in different segments), then gets a
delete horizon and goes after ``delete.retention.ms``. Kafka finds the aborted transactions in
its ``.txnindex`` files; triolog finds them with a header scan of the whole log before pass 1
(which also finds every producer's last batch), so a lost ``.txnindex`` never changes what is
removed. An ABORT marker that stays keeps its ``.txnindex`` entry: it is written, as the source
segment's ``.txnindex`` has it, to the cleaned segment's (``.txnindex.cleaned``, swapped in with
the rest). Open transactions are never cleaned: the cleanable range ends at the last stable
offset (cleaner_manager.cleanable_offsets).

Pass 1 also remembers which mapped offset is the latest of its key (a bitmap over the dirty
offsets, bounded to 1/8 of the map's memory); pass 2 answers "offset >= map[key]" for those
records from the bitmap instead of hashing the key a second time. Same answer, half the MD5s.

What runs once per record (the walk of a batch's records, the key's MD5, the map's probes, the
keep-or-drop decision and the copy of the kept records' bytes) is in cleaner_core.py, a module
of the compiled core (triolog/core.py); this module does what happens once per batch, segment
or round.
"""

from __future__ import annotations

import logging
import os
import struct
import time
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from triolog import core
from triolog.protocol.compression import compress, decompress
from triolog.protocol.record_batch import (
    BATCH_LENGTH_OFFSET,
    COMPRESSION_MASK,
    CONTROL_FLAG,
    CRC_OFFSET,
    CURRENT_MAGIC,
    DELETE_HORIZON_FLAG,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAX_TIMESTAMP_OFFSET,
    MIN_BATCH_LENGTH,
    NO_TIMESTAMP,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_FLAG,
    CompressionType,
    compute_crc,
)
from triolog.protocol.records import ControlRecordType, _varint32, _varint64, parse_control_record_key

from .. import filenames
from ..clock import SYSTEM_CLOCK, Clock
from ..errors import CorruptIndexError, CorruptRecordError
from ..fs import OS_FS, FileSystem
from ..segment import LogSegment
from ..transaction_index import AbortedTxn as TxnIndexEntry, TransactionIndex
from .offset_map import SkimpyOffsetMap
from .throttler import Throttler

logger = logging.getLogger(__name__)

INT32_MAX = 2**31 - 1
_U32 = struct.Struct(">I")
#: The compiled-core module holding the per-record loops of both passes (see triolog/core.py).
CORE_MODULE = "broker.storage.cleaner.cleaner_core"


class LogCleaningAbortedError(Exception):
    """The round was aborted (partition deleted, cleaner stopping); nothing was swapped in."""


@dataclass(frozen=True)
class SegmentSource:
    """What the passes need to know about one segment, captured under the log's lock."""

    base_offset: int
    path: str
    size: int
    offset_index_bytes: int
    time_index_bytes: int
    last_modified_ms: int
    #: Where pass 1 starts reading (the index position of the first dirty offset, else 0).
    start_position: int = 0


@dataclass(frozen=True)
class CleanJob:
    """One cleaning round of one log, as plain picklable data."""

    directory: str
    name: str
    first_dirty_offset: int
    first_uncleanable_offset: int
    #: Every segment with base offset below the first uncleanable offset, oldest first.
    segments: tuple[SegmentSource, ...]
    #: The segments from the first uncleanable offset on (the active one last), headers only:
    #: the transaction walk needs every marker in the whole log.
    tail_segments: tuple[SegmentSource, ...]
    segment_bytes: int
    max_index_bytes: int
    index_interval_bytes: int
    delete_retention_ms: int
    max_message_bytes: int
    now_ms: int
    read_buffer_bytes: int = 256 * 1024
    #: (producer id, offset of its last data batch or -1, epoch) of the log's active producers
    #: when the job was planned (Log.last_records_of_active_producers): their last batches are
    #: kept, emptied if need be; an expired producer's are not.
    active_producers: tuple[tuple[int, int, int], ...] = ()


@dataclass(frozen=True)
class GroupResult:
    """One ``.cleaned`` segment written for a group of old segments."""

    cleaned_base_offset: int
    old_base_offsets: tuple[int, ...]
    size: int


@dataclass
class CleanerStats:
    """Kafka's CleanerStats for one round."""

    map_records_read: int = 0
    map_bytes_read: int = 0
    records_read: int = 0
    bytes_read: int = 0
    records_kept: int = 0
    bytes_written: int = 0
    invalid_records: int = 0
    buffer_utilization: float = 0.0
    #: The earliest delete horizon of the tombstones and markers the round kept (None: it kept
    #: none): when it passes they may go, and the manager cleans the log again for them alone.
    delete_horizon_ms: int | None = None
    start_s: float = field(default_factory=time.monotonic)
    map_done_s: float = 0.0
    end_s: float = 0.0

    def keep_delete_horizon(self, horizon_ms: int) -> None:
        if self.delete_horizon_ms is None or horizon_ms < self.delete_horizon_ms:
            self.delete_horizon_ms = horizon_ms

    @property
    def records_removed(self) -> int:
        return self.records_read - self.records_kept

    @property
    def elapsed_s(self) -> float:
        return (self.end_s or time.monotonic()) - self.start_s


class _ProducerInfo:
    """Last data batch and epoch of every active producer id, from the log's producer state
    (Kafka's lastRecordsOfActiveProducers): expired ids are absent, so nothing keeps their
    batches once their records are gone."""

    __slots__ = ("last_data_offset", "epoch")

    def __init__(self, active_producers=()) -> None:
        self.last_data_offset: dict[int, int] = {}  # producer id -> last data offset (absent: none)
        self.epoch: dict[int, int] = {}
        for producer_id, last_data_offset, epoch in active_producers:
            self.epoch[producer_id] = epoch
            if last_data_offset >= 0:
                self.last_data_offset[producer_id] = last_data_offset

    def is_last_batch(self, producer_id: int, epoch: int, last_offset: int, is_control: bool) -> bool:
        """Kafka's rule: the batch holding the producer's last data offset or, without one, a
        marker of its current epoch."""
        current_epoch = self.epoch.get(producer_id)
        if current_epoch is None:
            return False
        last_data = self.last_data_offset.get(producer_id)
        if last_data is not None:
            return last_offset == last_data
        return is_control and epoch == current_epoch


class AbortedTxn(NamedTuple):
    """An aborted transaction: its producer, first data offset and marker offset (Kafka's AbortedTxn)."""

    producer_id: int
    first_offset: int
    last_offset: int
    #: The LSO when its marker was written, as the scan sees it (the oldest other transaction
    #: open then, else the marker + 1): the .txnindex value when the source file has none.
    last_stable_offset: int = -1


class CleanedTransactionMetadata:
    """Transaction state while the cleaner walks the log in offset order (Kafka's class of the
    same name): which data batches belong to an aborted transaction (discarded), and whether a
    marker may go (no batch of its transaction was met on the way to it).

    One instance spans a whole pass: a transaction's batches and its marker may lie in different
    segments or groups. ``aborted`` is sorted by first offset; an entry becomes ongoing once the
    walk reaches its first offset.
    """

    __slots__ = ("_aborted", "_next", "_ongoing_aborted", "_ongoing_committed", "retained_abort")

    def __init__(self, aborted: list[AbortedTxn]):
        self._aborted = aborted
        self._next = 0
        #: The aborted transaction whose ABORT marker the last on_control_batch_read kept (its
        #: .txnindex entry goes to the cleaned segment, as Kafka's cleanedIndex gets it).
        self.retained_abort: AbortedTxn | None = None
        self._ongoing_committed: set[int] = set()
        #: producer id -> [its aborted transaction, whether one of its batches was met]
        self._ongoing_aborted: dict[int, list] = {}

    def _consume_up_to(self, offset: int) -> None:
        aborted = self._aborted
        while self._next < len(aborted) and aborted[self._next].first_offset <= offset:
            txn = aborted[self._next]
            self._next += 1
            self._ongoing_aborted.setdefault(txn.producer_id, [txn, False])

    def on_control_batch_read(self, producer_id: int, last_offset: int, control_type: ControlRecordType | None) -> bool:
        """Whether the marker may be discarded (``control_type`` None: an empty control batch,
        cleaned before, which may always go)."""
        self._consume_up_to(last_offset)
        self.retained_abort = None
        if control_type is None:
            return True
        if control_type == ControlRecordType.ABORT:
            entry = self._ongoing_aborted.pop(producer_id, None)
            if entry is not None and entry[1]:  # kept until its batches are all gone
                self.retained_abort = entry[0]
                return False
            return True
        if control_type == ControlRecordType.COMMIT:
            if producer_id in self._ongoing_committed:
                self._ongoing_committed.discard(producer_id)
                return False
            return True
        return False

    def on_batch_read(self, producer_id: int, last_offset: int) -> bool:
        """For a transactional data batch: whether it belongs to an aborted transaction."""
        self._consume_up_to(last_offset)
        entry = self._ongoing_aborted.get(producer_id)
        if entry is not None:
            entry[1] = True
            return True
        self._ongoing_committed.add(producer_id)
        return False


def group_segments_by_size(
    segments: list[SegmentSource], max_size: int, max_index_size: int, first_uncleanable_offset: int
) -> list[list[SegmentSource]]:
    """Kafka's groupSegmentsBySize: consecutive segments while the group's log bytes stay within
    segment.bytes, each index within segment.index.bytes, and every offset fits 2^31-1 past the
    group's base (estimated by the next segment's base - 1, or first uncleanable - 1)."""
    groups: list[list[SegmentSource]] = []
    i = 0
    while i < len(segments):
        group = [segments[i]]
        log_size = segments[i].size
        index_size = segments[i].offset_index_bytes
        time_index_size = segments[i].time_index_bytes
        i += 1
        while i < len(segments):
            candidate = segments[i]
            last_offset = segments[i + 1].base_offset - 1 if i + 1 < len(segments) else first_uncleanable_offset - 1
            if not (
                log_size + candidate.size <= max_size
                and index_size + candidate.offset_index_bytes <= max_index_size
                and time_index_size + candidate.time_index_bytes <= max_index_size
                and (candidate.size == 0 or last_offset - group[0].base_offset <= INT32_MAX)
            ):
                break
            group.append(candidate)
            log_size += candidate.size
            index_size += candidate.offset_index_bytes
            time_index_size += candidate.time_index_bytes
            i += 1
        groups.append(group)
    return groups


def _iter_batches(
    fs: FileSystem,
    path: str,
    start: int,
    end: int,
    buffer_bytes: int,
    throttler: Throttler | None,
    check_done: Callable[[], None],
):
    """(position, header tuple, batch memoryview) of each batch in [start, end) of a .log file,
    read in windows of ``buffer_bytes`` (grown to fit one batch, as Kafka's growBuffersOrFail)."""
    fd = fs.open(path, os.O_RDONLY)
    try:
        position = start
        unpack = HEADER.unpack_from
        while position < end:
            check_done()
            window = fs.pread(fd, min(buffer_bytes, end - position), position)
            if not window:
                return
            if throttler is not None:
                throttler.maybe_throttle(len(window))
            view = memoryview(window)
            off = 0
            total = len(window)
            while total - off >= HEADER_SIZE:
                fields = unpack(window, off)
                if fields[3] != CURRENT_MAGIC or fields[1] < MIN_BATCH_LENGTH:
                    raise CorruptRecordError(f"invalid batch header at position {position + off} of {path}")
                size = fields[1] + LOG_OVERHEAD
                if off + size > total:
                    break
                yield position + off, fields, view[off : off + size]
                off += size
            if off == 0:  # not even one batch fits the window: grow it
                if total >= LOG_OVERHEAD:
                    size = struct.unpack_from(">i", window, BATCH_LENGTH_OFFSET)[0] + LOG_OVERHEAD
                    if position + size > end:
                        raise CorruptRecordError(
                            f"batch at position {position} of {path} declares {size} bytes but only "
                            f"{end - position} remain"
                        )
                    buffer_bytes = max(buffer_bytes * 2, size)
                    continue
                raise CorruptRecordError(f"truncated batch at position {position} of {path}")
            position += off
    finally:
        fs.close(fd)


def _records_data(fields, batch) -> bytes:
    codec = fields[5] & COMPRESSION_MASK
    payload = batch[HEADER_SIZE:]
    if codec == 0:
        return bytes(payload)  # indexing bytes is cheaper than indexing a memoryview
    if codec > CompressionType.ZSTD:
        raise CorruptRecordError(f"batch at offset {fields[0]} has unknown compression codec id {codec}")
    data = decompress(CompressionType(codec), payload)
    return data if type(data) is bytes else bytes(data)  # the core's loops take bytes


class Cleaner:
    """Runs cleaning rounds with one offset map (one per cleaner thread or worker)."""

    def __init__(
        self,
        map_memory: int,
        load_factor: float,
        *,
        throttler: Throttler | None = None,
        clock: Clock = SYSTEM_CLOCK,
        check_done: Callable[[], None] | None = None,
        fs: FileSystem = OS_FS,
        core_module=None,
    ):
        self.offset_map = SkimpyOffsetMap(map_memory)
        #: The per-record loops: ``core.load(CORE_MODULE)`` unless a test or bench picks one.
        self.core = core_module if core_module is not None else core.load(CORE_MODULE)
        #: Where the round reads and writes: the cleaned log's own file system.
        self.fs = fs
        self.load_factor = load_factor
        self.throttler = throttler
        self.clock = clock
        self.check_done = check_done or (lambda: None)
        self._bitmap = bytearray()
        self._bitmap_base = 0
        self._bitmap_bits = 0

    # -- the round ---------------------------------------------------------------------------

    def clean(self, job: CleanJob, on_group: Callable[[GroupResult], None]) -> tuple[int, CleanerStats]:
        """Map the dirty section, then clean every group below the mapped end, calling
        ``on_group`` after each ``.cleaned`` segment is complete (the caller swaps it in).
        Returns (end offset = the new checkpoint, stats)."""
        stats = CleanerStats()
        producers, aborted = self.scan_log(job)
        start, end = job.first_dirty_offset, job.first_uncleanable_offset
        self.build_offset_map(
            job,
            stats,
            CleanedTransactionMetadata([t for t in aborted if t.last_offset >= start and t.first_offset < end]),
        )
        end_offset = max(self.offset_map.latest_offset + 1, job.first_dirty_offset)  # never backwards
        stats.map_done_s = time.monotonic()
        to_clean = [s for s in job.segments if s.base_offset < end_offset]
        transactions = CleanedTransactionMetadata(aborted)  # one for the whole round
        for group in group_segments_by_size(
            to_clean, job.segment_bytes, job.max_index_bytes, job.first_uncleanable_offset
        ):
            on_group(self.clean_segments(job, group, stats, producers, transactions))
        stats.buffer_utilization = self.offset_map.utilization
        stats.end_s = time.monotonic()
        return end_offset, stats

    # -- the header scan ---------------------------------------------------------------------

    def scan_log(self, job: CleanJob) -> tuple[_ProducerInfo, list[AbortedTxn]]:
        """The job's active producers, and one walk over the headers of the whole log, in
        offset order, for the aborted transactions (Kafka rebuilds its .txnindex the same way):
        a producer's transaction runs from its first transactional data batch to its next marker."""
        producers = _ProducerInfo(job.active_producers)
        open_txns: dict[int, int] = {}  # producer id -> first offset of its open transaction
        aborted: list[AbortedTxn] = []
        for segment in (*job.segments, *job.tail_segments):
            for _, fields, batch in _iter_batches(
                self.fs, segment.path, 0, segment.size, job.read_buffer_bytes, None, self.check_done
            ):
                producer_id = fields[9]
                if producer_id < 0:
                    continue
                attributes = fields[5]
                last_offset = fields[0] + fields[6]
                if attributes & CONTROL_FLAG:
                    first = open_txns.pop(producer_id, None)
                    if first is not None and _control_type(fields, batch) == ControlRecordType.ABORT:
                        # open_txns is in first-offset order (transactions open at the log end)
                        lso = next(iter(open_txns.values()), last_offset + 1)
                        aborted.append(AbortedTxn(producer_id, first, last_offset, lso))
                elif attributes & TRANSACTIONAL_FLAG and producer_id not in open_txns:
                    open_txns[producer_id] = fields[0]
        aborted.sort(key=lambda t: t.first_offset)
        return producers, aborted

    # -- pass 1 ------------------------------------------------------------------------------

    def build_offset_map(
        self, job: CleanJob, stats: CleanerStats, transactions: CleanedTransactionMetadata | None = None
    ) -> None:
        """Map [first dirty, first uncleanable) until the map is full; batches of aborted
        transactions are not mapped (their keys must not hide committed values)."""
        transactions = transactions or CleanedTransactionMetadata([])
        offset_map = self.offset_map
        offset_map.clear()
        start, end = job.first_dirty_offset, job.first_uncleanable_offset
        dirty = [
            (s, job.segments[i + 1].base_offset if i + 1 < len(job.segments) else end)
            for i, s in enumerate(job.segments)
        ]
        dirty = [(s, nxt) for s, nxt in dirty if nxt > start and s.base_offset < end]
        self._bitmap_base = start
        self._bitmap_bits = min(max(end - start, 0), offset_map.memory)  # <= memory/8 bytes
        self._bitmap = bytearray((self._bitmap_bits + 7) // 8)
        max_entries = int(offset_map.slots * self.load_factor)
        if not dirty:
            # Nothing dirty (a round for expired tombstones only): everything below the first
            # dirty offset is the latest of its key, so pass 2 keeps it all but what expired.
            offset_map.update_latest_offset(start - 1)
        for segment, next_start in dirty:
            if self._map_segment(job, segment, start, next_start, max_entries, stats, transactions):
                logger.debug("offset map of %s is full at segment %d", job.name, segment.base_offset)
                break

    def _map_segment(
        self,
        job,
        segment: SegmentSource,
        start: int,
        next_start: int,
        max_entries: int,
        stats: CleanerStats,
        transactions: CleanedTransactionMetadata,
    ) -> bool:
        """Map one segment; returns True when the map filled up before its end."""
        offset_map = self.offset_map
        map_records = self.core.map_records
        words = offset_map._words
        slots = offset_map.slots
        bitmap = self._bitmap
        bit_base = self._bitmap_base
        bit_limit = self._bitmap_bits
        for _, fields, batch in _iter_batches(
            self.fs,
            segment.path,
            segment.start_position,
            segment.size,
            job.read_buffer_bytes,
            self.throttler,
            self.check_done,
        ):
            base = fields[0]
            last_offset = base + fields[6]
            attributes = fields[5]
            stats.map_bytes_read += len(batch)
            if attributes & CONTROL_FLAG:
                stats.map_records_read += 1
                transactions.on_control_batch_read(fields[9], last_offset, _control_type(fields, batch))
            elif attributes & TRANSACTIONAL_FLAG and transactions.on_batch_read(fields[9], last_offset):
                stats.map_records_read += max(fields[12], 0)  # aborted: not mapped
            elif fields[12] > 0:
                try:
                    full, offset_map.entries, last_put, mapped, collisions = map_records(
                        _records_data(fields, batch),
                        fields[12],
                        base,
                        start,
                        words,
                        slots,
                        offset_map.entries,
                        max_entries,
                        bitmap,
                        bit_base,
                        bit_limit,
                    )
                except IndexError:
                    raise CorruptRecordError(f"truncated record in batch at offset {base} of {segment.path}") from None
                except CorruptRecordError as exc:
                    raise CorruptRecordError(
                        f"corrupt record in batch at offset {base} of {segment.path}: {exc}"
                    ) from None
                stats.map_records_read += mapped
                offset_map.collisions += collisions
                if full:
                    if last_put >= 0:
                        offset_map.update_latest_offset(last_put)
                    return True
            if last_offset >= start:
                offset_map.update_latest_offset(last_offset)
        offset_map.update_latest_offset(next_start - 1)
        return False

    # -- pass 2 ------------------------------------------------------------------------------

    def clean_segments(
        self,
        job: CleanJob,
        group: list[SegmentSource],
        stats: CleanerStats,
        producers: _ProducerInfo,
        transactions: CleanedTransactionMetadata,
    ) -> GroupResult:
        """Copy what survives of ``group`` into one new ``.cleaned`` segment, synced and trimmed."""
        directory = Path(job.directory)
        base = group[0].base_offset
        for path in (
            filenames.log_file(directory, base, filenames.CLEANED_FILE_SUFFIX),
            filenames.offset_index_file(directory, base, filenames.CLEANED_FILE_SUFFIX),
            filenames.time_index_file(directory, base, filenames.CLEANED_FILE_SUFFIX),
            filenames.txn_index_file(directory, base, filenames.CLEANED_FILE_SUFFIX),
        ):
            try:
                self.fs.unlink(path)
            except FileNotFoundError:
                pass
        # Room for every index entry the copy can need (at most one per index interval or per
        # batch): with a tiny segment.index.bytes the old segments rolled on a full index, but
        # their group must still fit one cleaned segment. The files are trimmed when sealed.
        group_bytes = sum(s.size for s in group)
        entries_bound = group_bytes // max(job.index_interval_bytes + 1, HEADER_SIZE) + 2
        cleaned = LogSegment.open(
            directory,
            base,
            index_interval_bytes=job.index_interval_bytes,
            segment_index_bytes=max(job.max_index_bytes, entries_bound * 12),
            clock=self.clock,
            file_suffix=filenames.CLEANED_FILE_SUFFIX,
            fs=self.fs,
        )
        try:
            for segment in group:
                self._clean_into(job, segment, cleaned, stats, producers, transactions)
            cleaned.on_becoming_inactive_segment()
            cleaned.flush()
            cleaned.set_last_modified_ms(group[-1].last_modified_ms)
            size = cleaned.size
        except BaseException:
            cleaned.delete_if_exists()
            raise
        finally:
            cleaned.close_handlers()
        return GroupResult(base, tuple(s.base_offset for s in group), size)

    def _clean_into(
        self,
        job: CleanJob,
        segment: SegmentSource,
        dest: LogSegment,
        stats: CleanerStats,
        producers: _ProducerInfo,
        transactions: CleanedTransactionMetadata,
    ) -> None:
        now = job.now_ms
        source_index: dict[int, TxnIndexEntry] | None = None
        for _, fields, batch in _iter_batches(
            self.fs, segment.path, 0, segment.size, job.read_buffer_bytes, self.throttler, self.check_done
        ):
            stats.bytes_read += len(batch)
            attributes = fields[5]
            if attributes & CONTROL_FLAG:
                can_discard = transactions.on_control_batch_read(
                    fields[9], fields[0] + fields[6], _control_type(fields, batch)
                )
                out, read, kept = self._filter_control_batch(fields, batch, now, job, producers, can_discard, stats)
                retained = transactions.retained_abort
                if retained is not None and out is not None:
                    if source_index is None:
                        source_index = self._source_txn_index(segment)
                    entry = source_index.get(retained.last_offset)
                    if entry is None or entry.producer_id != retained.producer_id:
                        entry = TxnIndexEntry(*retained)
                    dest.txn_index.append(entry)
            elif attributes & TRANSACTIONAL_FLAG and transactions.on_batch_read(fields[9], fields[0] + fields[6]):
                # Aborted: every record goes; the header stays only where Kafka keeps an empty batch.
                read = max(fields[12], 0)
                out, kept = (_empty_header(fields) if self._retain_empty(fields, producers, job) else None), 0
            else:
                out, read, kept = self._filter_data_batch(fields, batch, now, job, producers, stats)
            stats.records_read += read
            stats.records_kept += kept
            if out is not None:
                last_offset = fields[0] + fields[6]
                max_timestamp = struct.unpack_from(">q", out, MAX_TIMESTAMP_OFFSET)[0]
                dest.append(last_offset, max_timestamp, last_offset, out)
                stats.bytes_written += len(out)
                if self.throttler is not None:
                    self.throttler.maybe_throttle(len(out))

    def _source_txn_index(self, segment: SegmentSource) -> dict[int, TxnIndexEntry]:
        """The entries of a segment's own .txnindex by marker offset ({} when it has none or it
        does not read back: the scan's values stand in then)."""
        log_path = Path(segment.path)
        path = filenames.txn_index_file(log_path.parent, segment.base_offset)
        try:
            return {e.last_offset: e for e in TransactionIndex(segment.base_offset, path, self.fs).all_aborted_txns()}
        except (OSError, CorruptIndexError):
            return {}

    def _retain_empty(self, fields, producers: _ProducerInfo, job: CleanJob) -> bool:
        last_offset = fields[0] + fields[6]
        if fields[9] >= 0 and producers.is_last_batch(
            fields[9], fields[10], last_offset, bool(fields[5] & CONTROL_FLAG)
        ):
            return True  # keeps the producer's last sequence / epoch
        return last_offset + 1 == job.first_uncleanable_offset  # KAFKA-17076

    def _filter_data_batch(self, fields, batch, now: int, job: CleanJob, producers: _ProducerInfo, stats: CleanerStats):
        """(bytes to write or None, records read, records kept) for one data batch."""
        count = fields[12]
        attributes = fields[5]
        base = fields[0]
        if count <= 0:
            return (_empty_header(fields) if self._retain_empty(fields, producers, job) else None), 0, 0
        has_horizon = bool(attributes & DELETE_HORIZON_FLAG)
        retain_deletes = not has_horizon or now < fields[7]
        offset_map = self.offset_map
        data = _records_data(fields, batch)
        try:
            spans, kept, all_kept, has_tombstone, invalid, collisions = self.core.filter_records(
                data,
                count,
                base,
                offset_map.latest_offset,
                retain_deletes,
                offset_map._words,
                offset_map.slots,
                self._bitmap,
                self._bitmap_base,
                self._bitmap_bits,
            )
        except IndexError:
            raise CorruptRecordError(f"truncated record in batch at offset {base}") from None
        except CorruptRecordError as exc:
            raise CorruptRecordError(f"corrupt record in batch at offset {base}: {exc}") from None
        stats.invalid_records += invalid
        offset_map.collisions += collisions
        if not kept:
            return (_empty_header(fields) if self._retain_empty(fields, producers, job) else None), count, 0
        need_horizon = has_tombstone and not has_horizon
        horizon = now + job.delete_retention_ms if need_horizon else (fields[7] if has_horizon else None)
        # (with a tombstone there is a horizon: a new one or the batch's; an expired one is kept
        # when past the mapped range)
        if has_tombstone and horizon is not None and (need_horizon or horizon > now):
            stats.keep_delete_horizon(horizon)
        if all_kept and not need_horizon:
            return batch, count, count
        return _rebuild(self.core, fields, data, spans, kept, horizon), count, kept

    def _filter_control_batch(
        self, fields, batch, now: int, job: CleanJob, producers: _ProducerInfo, can_discard: bool, stats: CleanerStats
    ):
        """A marker is kept while its transaction has batches in the log; once it may go, it
        gets a delete horizon (now + delete.retention.ms) and goes in the first round after it,
        so consumers that were reading below it still see it (Kafka's rule for tombstones)."""
        count = fields[12]
        has_horizon = bool(fields[5] & DELETE_HORIZON_FLAG)
        if count <= 0 or (can_discard and has_horizon and fields[7] <= now):
            return (_empty_header(fields) if self._retain_empty(fields, producers, job) else None), max(count, 0), 0
        if not can_discard:
            return batch, count, count
        if has_horizon:
            stats.keep_delete_horizon(fields[7])
            return batch, count, count
        data = _records_data(fields, batch)
        spans = array("q")
        pos = 0
        for _ in range(count):
            length, start = _varint32(data, pos)
            ts_delta, ts_end = _varint64(data, start + 1)
            spans.extend((pos, ts_delta, ts_end, start + length))
            pos = start + length
        horizon = now + job.delete_retention_ms
        stats.keep_delete_horizon(horizon)
        return _rebuild(self.core, fields, data, spans, count, horizon), count, count


def _control_type(fields, batch) -> ControlRecordType | None:
    """The type in the key of a control batch's first record; None for an empty batch."""
    if fields[12] <= 0:
        return None
    data = _records_data(fields, batch)
    try:
        _, p = _varint32(data, 0)
        p += 1  # attributes
        _, p = _varint64(data, p)  # timestamp delta
        _, p = _varint32(data, p)  # offset delta
        key_length, p = _varint32(data, p)
        key = bytes(data[p : p + key_length]) if key_length >= 0 else None
        return parse_control_record_key(key)[1]
    except (IndexError, ValueError):
        raise CorruptRecordError(f"invalid control record in batch at offset {fields[0]}") from None


def _rebuild(core_module, fields, data: bytes, spans, kept: int, horizon: int | None) -> bytes:
    """A batch of the ``kept`` records (``spans`` of ``data``, see ``filter_records``) with the
    original header fields; the base timestamp becomes the first kept record's timestamp or the
    delete horizon (deltas re-based)."""
    (
        base_offset,
        _,
        leader_epoch,
        _,
        _,
        attributes,
        last_offset_delta,
        old_base_ts,
        max_ts,
        producer_id,
        producer_epoch,
        base_sequence,
        _,
    ) = fields
    log_append_time = bool(attributes & TIMESTAMP_TYPE_MASK)
    if horizon is not None:
        new_base_ts = horizon
    else:
        new_base_ts = max_ts if log_append_time else old_base_ts + spans[1]
    body, top_ts = core_module.rebuild_records(data, spans, kept, old_base_ts, new_base_ts, log_append_time, max_ts)
    new_max = top_ts if log_append_time else max(NO_TIMESTAMP, top_ts)
    codec = attributes & COMPRESSION_MASK
    if codec:
        body = compress(CompressionType(codec), body)
    attributes &= ~DELETE_HORIZON_FLAG
    if horizon is not None:
        attributes |= DELETE_HORIZON_FLAG
    out = bytearray(HEADER_SIZE + len(body))
    HEADER.pack_into(
        out,
        0,
        base_offset,
        len(out) - LOG_OVERHEAD,
        leader_epoch,
        CURRENT_MAGIC,
        0,
        attributes,
        last_offset_delta,
        new_base_ts,
        new_max,
        producer_id,
        producer_epoch,
        base_sequence,
        kept,
    )
    out[HEADER_SIZE:] = body
    _U32.pack_into(out, CRC_OFFSET, compute_crc(out))
    return bytes(out)


def _empty_header(fields) -> bytes:
    """Kafka's writeEmptyHeader: count 0, codec none, base timestamp -1, old max timestamp."""
    (
        base_offset,
        _,
        leader_epoch,
        _,
        _,
        attributes,
        last_offset_delta,
        _,
        max_ts,
        producer_id,
        producer_epoch,
        base_sequence,
        _,
    ) = fields
    attributes = attributes & (TIMESTAMP_TYPE_MASK | TRANSACTIONAL_FLAG | CONTROL_FLAG)
    out = bytearray(HEADER_SIZE)
    HEADER.pack_into(
        out,
        0,
        base_offset,
        HEADER_SIZE - LOG_OVERHEAD,
        leader_epoch,
        CURRENT_MAGIC,
        0,
        attributes,
        last_offset_delta,
        NO_TIMESTAMP,
        max_ts,
        producer_id,
        producer_epoch,
        base_sequence,
        0,
    )
    _U32.pack_into(out, CRC_OFFSET, compute_crc(out))
    return bytes(out)
