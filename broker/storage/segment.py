"""LogSegment: one ``.log`` file with its sparse ``.index`` and ``.timeindex`` (Kafka's LogSegment).

Invariants:
- every batch in the file has offsets in [base_offset, base_offset + 2^31 - 1], so indexes can
  store 32-bit relative offsets;
- an index entry (offset, position) says the batch starting at ``position`` ends at ``offset``;
  a time index entry (ts, offset) says every record with a timestamp up to ``ts`` is at or
  before ``offset``. Indexes are derived data: rebuilt from the log, never checksummed;
- only the active (last) segment is appended to; on roll it gets its final time index entry,
  its indexes are trimmed and mapped read-only;
- the ``.txnindex`` (transaction_index.py) lists the aborted transactions whose ABORT marker is
  in this segment; it exists only once one was written.
"""

from __future__ import annotations

import os
import random
import struct
from pathlib import Path
from typing import NamedTuple

from triolog.protocol.record_batch import NO_TIMESTAMP, BatchHeader, compute_crc

from . import filenames
from .clock import Clock
from .errors import CorruptIndexError, CorruptRecordError, LogSegmentOffsetOverflowError
from .file_records import FileRecords, FileRegion
from .fs import OS_FS, FileSystem, is_disk_full, is_out_of_descriptors
from .index import LazyIndex, OffsetIndex, TimeIndex, TimestampOffset
from .transaction_index import AbortedTxn, TransactionIndex, TxnIndexSearchResult

MAX_RELATIVE_OFFSET = 2**31 - 1
_new_tuple = tuple.__new__  # a NamedTuple without its keyword-handling __new__ (the append path)


class LogOffsetMetadata(NamedTuple):
    message_offset: int
    segment_base_offset: int = -1
    relative_position_in_segment: int = -1


class FetchDataInfo(NamedTuple):
    fetch_offset_metadata: LogOffsetMetadata
    region: FileRegion | None  # None: nothing to return
    first_batch: BatchHeader | None = None
    #: read_committed reads only (FetchIsolation.TXN_COMMITTED): the aborted transactions
    #: overlapping what was read, oldest marker first; None for the other isolations.
    aborted_transactions: list[AbortedTxn] | None = None

    @property
    def size(self) -> int:
        return self.region.length if self.region is not None else 0


class TimestampAndOffset(NamedTuple):
    timestamp: int
    offset: int


class RollParams(NamedTuple):
    """What decides a roll: the segment limits and the incoming record set (Kafka's RollParams)."""

    max_segment_ms: int
    max_segment_bytes: int
    max_timestamp_in_messages: int
    max_offset_in_messages: int
    messages_size: int
    now_ms: int


ROLL_REASONS = ("size", "time", "index_full", "offset_overflow")


class LogSegment:
    def __init__(
        self,
        log: FileRecords,
        offset_index: LazyIndex,
        time_index: LazyIndex,
        base_offset: int,
        index_interval_bytes: int,
        rolling_jitter_ms: int,
        clock: Clock,
        fs: FileSystem = OS_FS,
        txn_index: TransactionIndex | None = None,
    ):
        self.fs = fs
        self.log = log
        self._offset_index = offset_index
        self._time_index = time_index
        if txn_index is None:  # beside the .log, with its transient suffix if it has one
            suffix = log.path.name.split(filenames.LOG_FILE_SUFFIX, 1)[1]
            txn_index = TransactionIndex(
                base_offset, filenames.txn_index_file(log.path.parent, base_offset, suffix), fs
            )
        self.txn_index = txn_index
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.rolling_jitter_ms = rolling_jitter_ms
        self._clock = clock
        self.created_ms = clock.milliseconds()
        self._bytes_since_last_index_entry = 0
        # Both loaded lazily from the files: a cleanly opened log reads nothing until asked.
        self._max_timestamp_and_offset: TimestampOffset | None = None
        self._rolling_based_timestamp: int | None = None

    @classmethod
    def open(
        cls,
        directory: Path,
        base_offset: int,
        *,
        index_interval_bytes: int,
        segment_index_bytes: int,
        clock: Clock,
        rolling_jitter_ms: int = 0,
        file_already_exists: bool = False,
        preallocate_bytes: int = 0,
        file_suffix: str = "",
        fs: FileSystem = OS_FS,
        spare: bool = False,
        paths: tuple[Path, Path, Path] | None = None,
        txn_index_exists: bool | None = None,
    ) -> LogSegment:
        """``spare``: the three files exist already, empty (a Log's spare files renamed to this
        segment's names), and are set up as new ones; creating files costs the file system far
        more than renaming them. ``paths``: the segment's .log, .index and .timeindex, when the
        caller has them already (the names of ``directory``, ``base_offset`` and ``file_suffix``).
        ``txn_index_exists``: whether its ``.txnindex`` is there, when the caller knows (a new
        segment has none)."""
        directory = Path(directory)
        if paths is None:
            paths = (
                filenames.log_file(directory, base_offset, file_suffix),
                filenames.offset_index_file(directory, base_offset, file_suffix),
                filenames.time_index_file(directory, base_offset, file_suffix),
            )
        log = FileRecords(
            paths[0],
            create=not file_already_exists,
            preallocate_bytes=preallocate_bytes,
            fs=fs,
        )
        offset_index = LazyIndex.for_offset(
            paths[1],
            base_offset,
            _at_least_one_entry(segment_index_bytes, OffsetIndex.ENTRY_SIZE),
            fs=fs,
            fresh=spare,
        )
        time_index = LazyIndex.for_time(
            paths[2],
            base_offset,
            _at_least_one_entry(segment_index_bytes, TimeIndex.ENTRY_SIZE),
            fs=fs,
            fresh=spare,
        )
        if not file_already_exists:
            # A new segment has all three files from the start, its indexes preallocated.
            try:
                offset_index.get()
                time_index.get()
            except BaseException:
                log.delete_if_exists()
                offset_index.delete_if_exists()
                time_index.delete_if_exists()
                raise
        txn_index = TransactionIndex(
            base_offset,
            filenames.txn_index_file(directory, base_offset, file_suffix),
            fs,
            exists=False if not file_already_exists else txn_index_exists,
        )
        return cls(
            log, offset_index, time_index, base_offset, index_interval_bytes, rolling_jitter_ms, clock, fs, txn_index
        )

    # -- accessors ---------------------------------------------------------------------------

    @property
    def offset_index(self) -> OffsetIndex:
        return self._offset_index.get()

    @property
    def time_index(self) -> TimeIndex:
        return self._time_index.get()

    @property
    def lazy_offset_index(self) -> LazyIndex:
        return self._offset_index

    @property
    def lazy_time_index(self) -> LazyIndex:
        return self._time_index

    @property
    def size(self) -> int:
        return self.log.size

    def _max_timestamp_so_far(self) -> TimestampOffset:
        if self._max_timestamp_and_offset is None:
            if self._time_index.is_loaded:
                self._max_timestamp_and_offset = self.time_index.last_entry
            else:  # one pread instead of mapping the whole index
                self._max_timestamp_and_offset = read_last_time_index_entry(
                    self._time_index.path, self.base_offset, self.fs
                )
        return self._max_timestamp_and_offset

    @property
    def max_timestamp_so_far(self) -> int:
        return self._max_timestamp_so_far().timestamp

    @property
    def shallow_offset_of_max_timestamp_so_far(self) -> int:
        return self._max_timestamp_so_far().offset

    @property
    def largest_timestamp(self) -> int:
        """Newest record timestamp, or the file's mtime when no record has one (Kafka's rule)."""
        ts = self.max_timestamp_so_far
        return ts if ts >= 0 else self.log.last_modified_ms()

    @property
    def last_modified_ms(self) -> int:
        return self.log.last_modified_ms()

    def set_last_modified_ms(self, ms: int) -> None:
        for path in (self.log.path, self._offset_index.path, self._time_index.path, self.txn_index.path):
            if self.fs.exists(path):
                self.fs.utime(path, ms * 1_000_000)

    # -- append ------------------------------------------------------------------------------

    def can_convert_to_relative_offset(self, offset: int) -> bool:
        return 0 <= offset - self.base_offset <= MAX_RELATIVE_OFFSET

    def append(
        self,
        largest_offset: int,
        largest_timestamp: int,
        shallow_offset_of_max_timestamp: int,
        records,
        size: int | None = None,
    ) -> None:
        """Append already-validated batch bytes (a buffer or a list of buffers, ``size`` bytes in
        all if the caller knows) ending at ``largest_offset``."""
        physical_position = self.log.size
        if physical_position == 0:
            self._rolling_based_timestamp = largest_timestamp
        if not 0 <= largest_offset - self.base_offset <= MAX_RELATIVE_OFFSET:
            raise LogSegmentOffsetOverflowError(
                f"offset {largest_offset} does not fit segment {self.log.path} with base offset {self.base_offset}"
            )
        size = self.log.append(records, size)
        if size == 0:
            return
        current = self._max_timestamp_and_offset or self._max_timestamp_so_far()
        if largest_timestamp > current.timestamp:
            current = self._max_timestamp_and_offset = _new_tuple(
                TimestampOffset, (largest_timestamp, shallow_offset_of_max_timestamp)
            )
        if self._bytes_since_last_index_entry > self.index_interval_bytes:
            try:
                self._offset_index.get().append(largest_offset, physical_position)
                self._time_index.get().maybe_append(current.timestamp, current.offset)
                self._bytes_since_last_index_entry = 0
            except OSError as exc:
                # The batch is written; indexes are sparse, so an entry that found no space (or
                # no descriptor) is left out and the next append tries again.
                if not (is_disk_full(exc) or is_out_of_descriptors(exc)):
                    raise
        self._bytes_since_last_index_entry += size

    def update_txn_index(self, producer_id: int, first_offset: int, last_offset: int, last_stable_offset: int) -> None:
        """Record an aborted transaction whose ABORT marker (at ``last_offset``) is in this
        segment (Kafka's updateTxnIndex; committed ones are not indexed)."""
        self.txn_index.append(AbortedTxn(producer_id, first_offset, last_offset, last_stable_offset))

    def collect_aborted_txns(self, fetch_offset: int, upper_bound_offset: int) -> TxnIndexSearchResult:
        return self.txn_index.collect_aborted_txns(fetch_offset, upper_bound_offset)

    # -- roll --------------------------------------------------------------------------------

    def _rolling_base(self) -> int:
        if self._rolling_based_timestamp is None:
            first = self.log.read_header_at(0) if self.log.size else None
            self._rolling_based_timestamp = first.max_timestamp if first is not None else NO_TIMESTAMP
        return self._rolling_based_timestamp

    def time_waited_for_roll(self, now_ms: int, max_timestamp_in_messages: int) -> int:
        base = self._rolling_based_timestamp
        if base is None:
            base = self._rolling_base()
        if base >= 0:
            return max_timestamp_in_messages - base
        return now_ms - self.created_ms

    def should_roll(self, params: RollParams) -> str | None:
        """The reason this segment must roll before ``params``' records are appended, or None."""
        return self.roll_reason(*params)

    def roll_reason(
        self,
        max_segment_ms: int,
        max_segment_bytes: int,
        max_timestamp_in_messages: int,
        max_offset_in_messages: int,
        messages_size: int,
        now_ms: int,
    ) -> str | None:
        """should_roll with RollParams' fields as arguments (the append path asks on every batch)."""
        size = self.log.size
        if size > max_segment_bytes - messages_size:
            return "size"
        if size > 0:
            base = self._rolling_based_timestamp
            if base is None:
                base = self._rolling_base()
            waited = max_timestamp_in_messages - base if base >= 0 else now_ms - self.created_ms
            if waited > max_segment_ms - self.rolling_jitter_ms:
                return "time"
            # (An empty segment's index can only be "full" when it has a single slot; rolling it
            # would just recreate it, so it takes its first batch instead.)
            if self._offset_index.get().is_full() or self._time_index.get().is_full():
                return "index_full"
        if not 0 <= max_offset_in_messages - self.base_offset <= MAX_RELATIVE_OFFSET:
            return "offset_overflow"
        return None

    def on_becoming_inactive_segment(self) -> None:
        """Final time index entry and trimmed files; then the indexes are unmapped (read-only from
        now on) and the .log descriptor closed, so inactive segments hold no descriptors.

        The final entry goes first: it is the one step that can fail for want of space (its slot
        is reserved with the previous entry, see TimeIndex), and nothing has changed if it does."""
        self.append_final_time_index_entry()
        self.seal()

    def append_final_time_index_entry(self) -> None:
        """The first half of becoming inactive, the one a roll does at once: the entry naming the
        segment's largest timestamp (a write into the mapped index, microseconds)."""
        current = self._max_timestamp_so_far()
        self.time_index.maybe_append(current.timestamp, current.offset, skip_full_check=True)

    def seal(self) -> None:
        """The second half, which a Log runs off the appending request (in its next flush): trim
        the indexes and the preallocated .log (truncating a preallocated 10 MiB index frees its
        blocks: milliseconds of file system journal work), unmap, close the .log descriptor.
        Until then the segment is read like the active one. Caller holds the log's lock."""
        self._offset_index.seal()
        self._time_index.seal()
        self.txn_index.close()
        self.log.trim()
        self.log.close()

    def resize_indexes(self, size: int) -> None:
        self.offset_index.resize(_at_least_one_entry(size, OffsetIndex.ENTRY_SIZE))
        self.time_index.resize(_at_least_one_entry(size, TimeIndex.ENTRY_SIZE))

    # -- reads -------------------------------------------------------------------------------

    def translate_offset(self, offset: int, starting_position: int = 0) -> tuple[int, BatchHeader] | None:
        """Position and header of the first batch whose last offset is >= ``offset``."""
        mapping = self.offset_index.lookup(offset)
        return self.log.search_for_offset_with_size(offset, max(mapping.position, starting_position))

    def read(
        self, start_offset: int, max_size: int, max_position: int | None = None, min_one_message: bool = False
    ) -> FetchDataInfo | None:
        """Whole batches from the one holding ``start_offset``, at most ``max_size`` bytes.

        With ``min_one_message`` the first batch is returned even when it exceeds ``max_size``
        (Kafka's rule, so a consumer can always make progress). Returns None if no batch in
        this segment reaches ``start_offset``.
        """
        if max_size < 0:
            raise ValueError(f"invalid max size {max_size} for log read from segment {self.log.path}")
        found = self.translate_offset(start_offset)
        if found is None:
            return None
        start_position, first = found
        metadata = LogOffsetMetadata(start_offset, self.base_offset, start_position)
        limit = self.log.size if max_position is None else min(max_position, self.log.size)
        if start_position >= limit:
            return FetchDataInfo(metadata, None, first)
        budget = min(limit - start_position, max(max_size, first.size) if min_one_message else max_size)
        length = self._whole_batches_length(start_position, first, budget)
        return FetchDataInfo(metadata, self.log.region(start_position, length) if length else None, first)

    def _whole_batches_length(self, start_position: int, first: BatchHeader, budget: int) -> int:
        """Bytes of the longest run of whole batches from ``start_position`` that fits ``budget``.

        The offset index's positions are batch boundaries, so the walk over headers starts at
        the last indexed boundary that fits and covers at most index.interval.bytes.
        """
        if first.size > budget:
            return 0
        end = start_position + budget
        position = max(start_position, self._last_indexed_position_at_or_before(end))
        for batch_position, header in self.log.batch_headers(position):
            if batch_position + header.size > end:
                return batch_position - start_position
            position = batch_position + header.size
        return position - start_position

    def _last_indexed_position_at_or_before(self, position: int) -> int:
        index = self.offset_index
        lo, hi = 0, index.entries - 1
        best = 0
        while lo <= hi:
            mid = (lo + hi) // 2
            entry_position = index.entry(mid).position
            if entry_position <= position:
                best = entry_position
                lo = mid + 1
            else:
                hi = mid - 1
        return best

    def read_next_offset(self) -> int:
        """The offset after the last batch: found from the last index entry, not a full scan."""
        next_offset = self.base_offset
        start = self.offset_index.lookup(2**63 - 1).position if self.offset_index.entries else 0
        for _, header in self.log.batch_headers(start):
            next_offset = header.next_offset
        return next_offset

    def find_offset_by_timestamp(self, timestamp: int, start_offset: int | None = None) -> TimestampAndOffset | None:
        """First record at or after ``start_offset`` whose timestamp is >= ``timestamp``."""
        from triolog.protocol.records import first_record_at_or_after  # never used on produce/fetch

        start_offset = self.base_offset if start_offset is None else start_offset
        ts_offset = self.time_index.lookup(timestamp)
        position = self.offset_index.lookup(max(ts_offset.offset, start_offset)).position
        for batch_position, header in self.log.batch_headers(position):
            if header.max_timestamp < timestamp or header.last_offset < start_offset:
                continue
            found = first_record_at_or_after(self.log.read(batch_position, header.size), timestamp, start_offset)
            if found is not None:
                return TimestampAndOffset(*found)
        return None

    # -- truncation --------------------------------------------------------------------------

    def truncate_to(self, offset: int) -> int:
        """Remove the batches from the first one reaching ``offset`` on, with their index
        entries (Kafka's LogSegment.truncateTo); the segment must be the active one (writable
        indexes). Returns the bytes removed. What the appends of the removed batches left in
        memory (max timestamp, bytes since the last index entry) is derived again from the
        files, so the next appends index as they would have without them."""
        found = self.translate_offset(offset)
        offset_index, time_index = self.offset_index, self.time_index
        offset_index.truncate_to(offset)
        time_index.truncate_to(offset)
        self.txn_index.truncate_to(offset)
        removed = self.log.truncate_to(found[0]) if found is not None else 0
        size = self.log.size
        self._rolling_based_timestamp = None
        if size == 0:
            self.created_ms = self._clock.milliseconds()
        entries = offset_index.entries
        self._bytes_since_last_index_entry = size - (offset_index.entry(entries - 1).position if entries else 0)
        # The newest time index entry, then the batches after it (Kafka's readLargestTimestamp).
        if time_index.entries:
            max_ts = time_index.last_entry
            position = offset_index.lookup(max_ts.offset).position
        else:
            max_ts, position = TimestampOffset(NO_TIMESTAMP, self.base_offset), 0
        for _, header in self.log.batch_headers(position):
            if header.max_timestamp > max_ts.timestamp:
                max_ts = TimestampOffset(header.max_timestamp, header.last_offset)
        self._max_timestamp_and_offset = max_ts
        return removed

    # -- recovery ----------------------------------------------------------------------------

    def recover(self, on_batch=None) -> int:
        """Rebuild both indexes from the log and cut it at the first invalid batch.

        A batch is invalid when its header cannot be a v2 batch, its CRC fails, or its offsets do
        not follow the previous batch within this segment. Sizes are not checked against the
        topic's max.message.bytes: a limit lowered after the data was written must not cut it
        (Kafka's recovery does not check it either). Returns the number of bytes truncated.
        ``on_batch(header)`` sees every valid batch (the leader epoch cache uses it).
        """
        offset_index, time_index = self.offset_index, self.time_index
        offset_index.reset()
        time_index.reset()
        valid_bytes = 0
        last_index_entry = 0
        indexing = True
        max_ts = TimestampOffset(NO_TIMESTAMP, self.base_offset)
        expected_offset = self.base_offset
        try:
            for position, header, batch in self.log.batches_for_recovery():
                if compute_crc(batch) != header.crc:
                    raise CorruptRecordError(f"batch at position {position} of {self.log.path} fails its CRC")
                # The base offset is outside the CRC: offsets must still rise and fit the segment.
                if (
                    header.base_offset < expected_offset
                    or header.last_offset_delta < 0
                    or not self.can_convert_to_relative_offset(header.last_offset)
                ):
                    raise CorruptRecordError(
                        f"batch at position {position} of {self.log.path} has offsets "
                        f"{header.base_offset}..{header.last_offset}, expected a batch from offset "
                        f"{expected_offset} within segment base {self.base_offset}"
                    )
                expected_offset = header.next_offset
                if header.max_timestamp > max_ts.timestamp:
                    max_ts = TimestampOffset(header.max_timestamp, header.last_offset)
                # (An index shrunk by a config change since the data was written just stops
                # taking entries: lookups then scan a little further, nothing is lost.)
                if (
                    indexing
                    and valid_bytes - last_index_entry > self.index_interval_bytes
                    and not offset_index.is_full()
                    and not time_index.is_full()
                ):
                    try:
                        offset_index.append(header.last_offset, valid_bytes)
                        time_index.maybe_append(max_ts.timestamp, max_ts.offset)
                    except OSError as exc:
                        if not is_disk_full(exc):
                            raise
                        indexing = False  # a full disk: the log is recovered with a sparser index
                    last_index_entry = valid_bytes
                valid_bytes += header.size
                if on_batch is not None:
                    on_batch(header)
        except CorruptRecordError:
            pass  # everything from the first invalid byte on is cut below
        truncated = self.log.size - valid_bytes
        if truncated > 0:
            self.log.truncate_to(valid_bytes)
        self._max_timestamp_and_offset = max_ts
        self._rolling_based_timestamp = None
        time_index.maybe_append(max_ts.timestamp, max_ts.offset, skip_full_check=True)
        offset_index.trim_to_valid_size()
        time_index.trim_to_valid_size()
        self._bytes_since_last_index_entry = valid_bytes - last_index_entry
        return truncated

    def sanity_check_indexes(self) -> None:
        """Kafka's index sanity checks, plus checks against the log itself, for segments that
        recovery would otherwise trust: the last offset index entry must point at a batch
        ending at its offset, and the last time index entry must name a batch whose max
        timestamp is its timestamp. A zeroed or zero-padded index left by a power cut fails
        them (KAFKA-10207), where Kafka's own checks let some through."""
        offset_index, time_index = self.offset_index, self.time_index
        offset_index.sanity_check()
        time_index.sanity_check()
        self.txn_index.sanity_check()
        entries = offset_index.entries
        if entries > 1:
            first, last = offset_index.entry(0), offset_index.entry(entries - 1)
            if last.offset <= first.offset or last.position <= first.position:
                raise CorruptIndexError(f"index {offset_index.path} has entries out of order (zero padded?)")
        if time_index.entries > 1 and time_index.last_entry.timestamp <= time_index.entry(0).timestamp:
            raise CorruptIndexError(f"time index {time_index.path} has entries out of order (zero padded?)")
        if entries:
            last = offset_index.entry(entries - 1)
            header = self.log.read_header_at(last.position) if last.position < self.log.size else None
            if header is None or header.last_offset != last.offset:
                raise CorruptIndexError(
                    f"index {offset_index.path}: last entry ({last.offset}, {last.position}) does not match "
                    f"the batch at that position of {self.log.path}"
                )
        if time_index.entries:
            entry = time_index.last_entry
            found = self.log.search_for_offset_with_size(entry.offset, offset_index.lookup(entry.offset).position)
            if found is None or found[1].last_offset != entry.offset or found[1].max_timestamp != entry.timestamp:
                raise CorruptIndexError(
                    f"time index {time_index.path}: last entry ({entry.timestamp}, {entry.offset}) does not match "
                    f"a batch of {self.log.path}"
                )

    # -- files -------------------------------------------------------------------------------

    def flush(self) -> None:
        fs = self.fs
        fds = self.descriptors_to_flush()
        try:
            for fd in fds:
                fs.fsync(fd)
        finally:
            for fd in fds:
                fs.close(fd)

    def descriptors_to_flush(self) -> list[int]:
        """Caller-owned descriptors of the .log and both index files, for fsync outside any lock.

        fsync on an index descriptor also writes pages dirtied through its mmap, so this covers
        loaded and sealed (unmapped) indexes alike.
        """
        fs = self.fs
        fds = [self.log.dup_fd()]
        try:
            for path in (self._offset_index.path, self._time_index.path, self.txn_index.path):
                try:
                    fds.append(fs.open(path, os.O_RDONLY))
                except FileNotFoundError:
                    pass  # renamed away by a concurrent swap or deletion (or no .txnindex): nothing to sync
        except BaseException:
            for fd in fds:
                fs.close(fd)
            raise
        return fds

    def change_file_suffixes(self, old_suffix: str, new_suffix: str) -> None:
        def renamed(path: Path) -> Path:
            name = path.name
            if old_suffix and not name.endswith(old_suffix):
                raise ValueError(f"{path} does not end with {old_suffix!r}")
            stem = name[: len(name) - len(old_suffix)] if old_suffix else name
            return path.with_name(stem + new_suffix)

        self.log.rename_to(renamed(self.log.path))
        self._offset_index.rename_to(renamed(self._offset_index.path))
        self._time_index.rename_to(renamed(self._time_index.path))
        self.txn_index.rename_to(renamed(self.txn_index.path))

    def close(self, sync: bool = False) -> None:
        """Clean close: final time index entry, trimmed indexes, files closed; with ``sync`` the
        files are fsynced first, so what the close wrote survives a power cut."""
        if self._time_index.is_loaded and self._offset_index.is_loaded:
            current = self._max_timestamp_so_far()
            if not self.time_index.read_only:
                self.time_index.maybe_append(current.timestamp, current.offset, skip_full_check=True)
        self._offset_index.close()
        self._time_index.close()
        self.txn_index.close()
        self.log.trim()
        if sync:
            self.flush()
        self.log.close()

    def close_handlers(self) -> None:
        self._offset_index.close_handler()
        self._time_index.close_handler()
        self.txn_index.close()
        self.log.close()

    def delete_if_exists(self) -> None:
        self.close_handlers()
        self.log.delete_if_exists()
        self._offset_index.delete_if_exists()
        self._time_index.delete_if_exists()
        self.txn_index.delete_if_exists()

    def __repr__(self) -> str:
        return f"LogSegment(base_offset={self.base_offset}, size={self.size}, path={self.log.path})"


def _at_least_one_entry(segment_index_bytes: int, entry_size: int) -> int:
    """Kafka 3.x accepts segment.index.bytes down to 4 but then cannot create an index smaller
    than one entry; we give such an index one slot, so the log rolls on every batch instead."""
    return max(segment_index_bytes, entry_size)


def read_last_time_index_entry(path: Path, base_offset: int, fs: FileSystem = OS_FS) -> TimestampOffset:
    """The last entry of a trimmed time index file, or (-1, base_offset) when it has none."""
    try:
        fd = fs.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return TimestampOffset(NO_TIMESTAMP, base_offset)
    try:
        entries = fs.fstat(fd).st_size // TimeIndex.ENTRY_SIZE
        if entries == 0:
            return TimestampOffset(NO_TIMESTAMP, base_offset)
        raw = fs.pread(fd, TimeIndex.ENTRY_SIZE, (entries - 1) * TimeIndex.ENTRY_SIZE)
    finally:
        fs.close(fd)
    timestamp, relative = _TIME_INDEX_ENTRY.unpack(raw)
    return TimestampOffset(timestamp, base_offset + relative)


_TIME_INDEX_ENTRY = struct.Struct(">qi")


def rolling_jitter_ms(segment_jitter_ms: int, segment_ms: int) -> int:
    """Chosen once per segment: abs(random int) % min(jitter, segment.ms), or 0 (Kafka's rule)."""
    if segment_jitter_ms == 0:
        return 0
    return random.randrange(2**31) % min(segment_jitter_ms, segment_ms)
