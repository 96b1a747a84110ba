"""LogLoader: turn a partition directory back into segments, recovering after a crash.

Order matters and follows Kafka's loader:
1. finish or undo interrupted cleaner swaps (.cleaned / .swap) and drop .deleted files;
2. open every segment (lazily: nothing is read after a clean shutdown);
3. without the clean-shutdown marker, re-validate every batch from the recovery point on,
   truncate at the first torn or corrupt byte and delete every later segment, and rebuild
   indexes that are missing or fail their sanity checks;
4. make sure an active segment exists and its indexes have room to grow.
Nothing before the first bad byte is ever lost.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from triolog.config.log_config import LogConfig

from . import filenames
from .clock import Clock
from .errors import CorruptIndexError
from .fs import OS_FS, FileSystem, touch
from .segment import LogSegment, rolling_jitter_ms
from .segments import LogSegments

logger = logging.getLogger(__name__)


@dataclass
class LoadedLogOffsets:
    log_start_offset: int
    recovery_point: int
    next_offset: int
    truncated_bytes: int = 0
    recovered_segments: int = 0
    rebuilt_indexes: int = 0
    #: Producer state (filled by Log.open): milliseconds to load it, producers, batches replayed.
    producer_state_load_ms: float = 0.0
    producers_loaded: int = 0
    producer_batches_replayed: int = 0


class LogLoader:
    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        clock: Clock,
        segments: LogSegments,
        *,
        log_start_offset_checkpoint: int,
        recovery_point_checkpoint: int,
        had_clean_shutdown: bool,
        on_recovered_batch=None,
        fs: FileSystem = OS_FS,
    ):
        self.fs = fs
        self.directory = Path(directory)
        self.config = config
        self.clock = clock
        self.segments = segments
        self.log_start_offset_checkpoint = log_start_offset_checkpoint
        self.recovery_point_checkpoint = recovery_point_checkpoint
        self.had_clean_shutdown = had_clean_shutdown
        self.on_recovered_batch = on_recovered_batch
        self.rebuilt_indexes = 0
        self.recovered_segments = 0
        #: Set when loading removed, renamed or cut files: they are synced before the log is used.
        self.changed_files = False
        #: Segments whose files recovery rewrote (indexes rebuilt, a tail cut), synced at the end.
        self._rewritten: dict[int, LogSegment] = {}
        #: After load(): the segments recovery rebuilt, oldest first. Their ``.txnindex`` needs
        #: the producer state to rebuild, which the Log builds next (log.rebuild_txn_indexes).
        self.recovered: list[LogSegment] = []

    def load(self) -> LoadedLogOffsets:
        swap_files = self._remove_temp_files_and_collect_swap_files()
        self._complete_swaps(swap_files)
        self._load_segment_files()
        truncated = 0
        if self.had_clean_shutdown and not self.segments.is_empty:
            next_offset = self.segments.active_segment.read_next_offset()
            recovery_point = next_offset
        else:
            next_offset, truncated = self._recover_log()
            recovery_point = min(self.recovery_point_checkpoint, next_offset)

        if not self.segments.is_empty and next_offset < self.log_start_offset_checkpoint:
            logger.warning(
                "log end offset %d of %s is below its log start offset %d: deleting all segments",
                next_offset,
                self.directory,
                self.log_start_offset_checkpoint,
            )
            for segment in self.segments.clear():
                segment.delete_if_exists()
            self.changed_files = True
        if self.segments.is_empty:
            start = max(self.log_start_offset_checkpoint, 0)
            self.segments.add(self._open_segment(start, file_already_exists=False))
            next_offset = start
            recovery_point = start
        active = self.segments.active_segment
        for segment in self.segments:
            if segment is not active:  # recovery and sanity checks mapped some; free them again
                segment.lazy_offset_index.seal()
                segment.lazy_time_index.seal()
        active.resize_indexes(self.config.segment_index_bytes)
        rewritten = [s for base, s in sorted(self._rewritten.items()) if self.segments.get(base) is s]
        self.recovered = list(rewritten)
        if self.changed_files or rewritten:
            # What recovery cut, removed and rebuilt must be durable before new appends land
            # where it was, and before a recovery point covering it is checkpointed: a power cut
            # undoing it would bring back bytes or segments that overlap the new data, or
            # indexes that recovery would then trust.
            for segment in rewritten if active in rewritten or not self.changed_files else rewritten + [active]:
                segment.flush()
                if segment is not active:
                    segment.log.close()  # inactive segments hold no descriptors
            self.fs.fsync_dir(self.directory)
        first = self.segments.first_segment()
        assert first is not None  # (loading leaves at least the active segment)
        log_start_offset = max(self.log_start_offset_checkpoint, first.base_offset)
        return LoadedLogOffsets(
            log_start_offset=log_start_offset,
            recovery_point=min(recovery_point, next_offset),
            next_offset=next_offset,
            truncated_bytes=truncated,
            recovered_segments=self.recovered_segments,
            rebuilt_indexes=self.rebuilt_indexes,
        )

    # -- step 1: interrupted swaps and leftovers -------------------------------------------------

    def _remove_temp_files_and_collect_swap_files(self) -> list[Path]:
        swap_files: list[Path] = []
        cleaned_files: list[Path] = []
        min_cleaned_offset = None
        for entry in self.fs.scandir(self.directory):
            name = entry.name
            if not name.endswith(_TRANSIENT_SUFFIXES) or not entry.is_file():
                continue
            path = Path(entry.path)
            if name.endswith(filenames.DELETED_FILE_SUFFIX):
                logger.info("deleting stray temporary file %s", path)
                self._unlink(path)
            elif name.endswith(filenames.SPARE_FILE_SUFFIX):
                try:
                    self.fs.unlink(path)  # a spare the log made for its next roll: made again when needed
                except FileNotFoundError:
                    pass
            elif name.endswith(filenames.CLEANED_FILE_SUFFIX):
                offset = _base_offset_or_none(name)
                if offset is not None:
                    min_cleaned_offset = offset if min_cleaned_offset is None else min(min_cleaned_offset, offset)
                cleaned_files.append(path)
            elif name.endswith(filenames.SWAP_FILE_SUFFIX):
                swap_files.append(path)
        kept_swaps = []
        for path in swap_files:
            offset = _base_offset_or_none(path.name)
            if min_cleaned_offset is not None and offset is not None and offset >= min_cleaned_offset:
                logger.info("deleting incomplete swap file %s", path)
                self._unlink(path)
            else:
                kept_swaps.append(path)
        for path in cleaned_files:
            logger.info("deleting stray cleaner output %s", path)
            self._unlink(path)
        return kept_swaps

    def _unlink(self, path: Path) -> None:
        self.changed_files = True
        try:
            self.fs.unlink(path)
        except FileNotFoundError:
            pass

    def _complete_swaps(self, swap_files: list[Path]) -> None:
        """A .swap segment replaces every plain segment whose offsets it covers; then it becomes plain."""
        log_swaps = [p for p in swap_files if p.name.endswith(filenames.LOG_FILE_SUFFIX + filenames.SWAP_FILE_SUFFIX)]
        if log_swaps:
            swap_bases = [filenames.offset_from_file_name(p.name) for p in log_swaps]
            min_swap = min(swap_bases)
            max_next = max(self._swap_next_offset(p, base) for p, base in zip(log_swaps, swap_bases))
            for entry in self.fs.scandir(self.directory):
                name = entry.name
                if name.endswith(filenames.SWAP_FILE_SUFFIX) or not entry.is_file():
                    continue
                offset = _base_offset_or_none(name)
                if offset is not None and min_swap <= offset < max_next and _is_segment_file(name):
                    logger.info("deleting %s, replaced by an interrupted swap", entry.path)
                    self._unlink(Path(entry.path))
        for path in swap_files:
            target = path.with_name(path.name[: -len(filenames.SWAP_FILE_SUFFIX)])
            self.fs.replace(path, target)
            self.changed_files = True

    def _swap_next_offset(self, log_path: Path, base_offset: int) -> int:
        segment = LogSegment.open(
            self.directory,
            base_offset,
            index_interval_bytes=self.config.index_interval_bytes,
            segment_index_bytes=self.config.segment_index_bytes,
            clock=self.clock,
            file_already_exists=True,
            file_suffix=filenames.SWAP_FILE_SUFFIX,
            fs=self.fs,
        )
        try:
            segment.recover()
            return segment.read_next_offset()
        finally:
            segment.close_handlers()

    # -- step 2: open segments -----------------------------------------------------------------

    def _open_segment(
        self, base_offset: int, *, file_already_exists: bool, txn_index_exists: bool | None = None
    ) -> LogSegment:
        config = self.config
        return LogSegment.open(
            self.directory,
            base_offset,
            index_interval_bytes=config.index_interval_bytes,
            segment_index_bytes=config.segment_index_bytes,
            clock=self.clock,
            rolling_jitter_ms=rolling_jitter_ms(config.segment_jitter_ms, config.segment_ms),
            file_already_exists=file_already_exists,
            preallocate_bytes=config.segment_bytes if config.preallocate else 0,
            fs=self.fs,
            txn_index_exists=txn_index_exists,
        )

    def _load_segment_files(self) -> None:
        names = sorted(entry.name for entry in self.fs.scandir(self.directory) if entry.is_file())
        present = set(names)
        for name in names:
            offset = _base_offset_or_none(name)
            if offset is None:
                continue
            prefix = filenames.filename_prefix_from_offset(offset)
            if name in (
                prefix + filenames.INDEX_FILE_SUFFIX,
                prefix + filenames.TIME_INDEX_FILE_SUFFIX,
                prefix + filenames.TXN_INDEX_FILE_SUFFIX,
            ):
                if prefix + filenames.LOG_FILE_SUFFIX not in present:
                    logger.warning("deleting orphaned index file %s", self.directory / name)
                    self._unlink(self.directory / name)
                continue
            if name != prefix + filenames.LOG_FILE_SUFFIX:
                continue
            index_missing = prefix + filenames.INDEX_FILE_SUFFIX not in present
            if prefix + filenames.TIME_INDEX_FILE_SUFFIX not in present:
                # Kafka's rule: a missing time index is replaced by an empty one, not rebuilt.
                touch(self.fs, self.directory / (prefix + filenames.TIME_INDEX_FILE_SUFFIX))
            segment = self._open_segment(
                offset,
                file_already_exists=True,
                txn_index_exists=prefix + filenames.TXN_INDEX_FILE_SUFFIX in present,
            )
            if index_missing:
                logger.info("rebuilding missing index of segment %s", segment.log.path)
                self._recover_segment(segment)
                self.rebuilt_indexes += 1
            self.segments.add(segment)

    # -- step 3: recovery ----------------------------------------------------------------------

    def _recover_segment(self, segment: LogSegment) -> int:
        self.recovered_segments += 1
        self._rewritten[segment.base_offset] = segment
        return segment.recover(self.on_recovered_batch)

    def _recover_log(self) -> tuple[int, int]:
        """Recover from the recovery point to the end; returns (next offset, bytes truncated)."""
        recovery_point = self.recovery_point_checkpoint
        if self.segments.is_empty:
            return max(self.log_start_offset_checkpoint, 0), 0
        last = self.segments.last_segment()
        assert last is not None  # (not empty, above)
        # From the segment holding the offset before the recovery point: when the recovery point
        # is a segment's base offset, the segment below it was active when the checkpoint was
        # written, and the roll that sealed it afterwards (final time index entry, trimmed
        # files) may not have reached the disk.
        from_offset = max(recovery_point - 1, 0)
        unflushed = self.segments.values(from_offset, 2**63 - 1) if from_offset < 2**63 - 1 else []
        if recovery_point > last.base_offset and not unflushed:
            unflushed = [last]
        unflushed_bases = {segment.base_offset for segment in unflushed}
        # Segments below the recovery point were flushed: trust their data, but not an index
        # that a crash left torn or inconsistent.
        for segment in self.segments:
            if segment.base_offset in unflushed_bases:
                continue
            try:
                segment.sanity_check_indexes()
            except CorruptIndexError as exc:
                logger.warning("rebuilding index of %s: %s", segment.log.path, exc)
                self._recover_segment(segment)
                self.rebuilt_indexes += 1
        truncated_total = 0
        tolerate_gaps = self.config.compact  # the cleaner leaves offset gaps between segments
        for i, segment in enumerate(unflushed):
            truncated = self._recover_segment(segment)
            truncated_total += truncated
            later = unflushed[i + 1 :]
            if not later:
                break
            reason = None
            if truncated > 0:
                reason = f"truncated {truncated} invalid bytes at the end of {segment.log.path}"
            else:
                # A power cut keeps unsynced writes in any order: the next segment's creation can
                # survive while the tail of this one (never acknowledged: a flush syncs every
                # segment below its offset before it returns) is lost without a torn byte. What
                # follows such a gap, or overlaps this segment, is not part of the log.
                next_offset = segment.read_next_offset()
                following = later[0].base_offset
                if next_offset > following or (next_offset < following and not tolerate_gaps):
                    reason = (
                        f"{segment.log.path} ends at offset {next_offset} but the next segment starts at {following}"
                    )
            if reason is not None:
                logger.warning("%s; deleting %d later segments", reason, len(later))
                for segment_after in later:
                    self.segments.remove(segment_after.base_offset)
                    segment_after.delete_if_exists()
                self.changed_files = True
                break
        if truncated_total:
            self.changed_files = True
        return self.segments.active_segment.read_next_offset(), truncated_total


_TRANSIENT_SUFFIXES = (
    filenames.DELETED_FILE_SUFFIX,
    filenames.CLEANED_FILE_SUFFIX,
    filenames.SWAP_FILE_SUFFIX,
    filenames.SPARE_FILE_SUFFIX,
)


def _base_offset_or_none(name: str) -> int | None:
    try:
        return filenames.offset_from_file_name(name)
    except ValueError:
        return None


def _is_segment_file(name: str) -> bool:
    return any(
        name.endswith(suffix)
        for suffix in (
            filenames.LOG_FILE_SUFFIX,
            filenames.INDEX_FILE_SUFFIX,
            filenames.TIME_INDEX_FILE_SUFFIX,
            filenames.TXN_INDEX_FILE_SUFFIX,
            filenames.PRODUCER_SNAPSHOT_FILE_SUFFIX,
        )
    )
