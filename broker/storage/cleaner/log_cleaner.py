"""LogCleaner: ``log.cleaner.threads`` background threads compacting logs (Kafka's LogCleaner).

Each thread loops: take the filthiest compacted log from the LogCleanerManager, run one cleaning
round (two passes, then each ``.cleaned`` group swapped in with ``Log.replace_segments``),
checkpoint the new first dirty offset, apply retention to the compacted logs (for
``compact,delete`` logs the cleaner is the one that runs it), and back off
``log.cleaner.backoff.ms`` when there was nothing to clean.

An error while cleaning a log marks that partition uncleanable, is logged and counted, and the
thread goes on with the other logs; anything that escapes the loop is logged and counted as a
dead thread, never swallowed.

The passes are pure-Python per-record work. In a thread they hold the GIL and stretch every
produce and fetch the server runs in its own threads: appends to another log from another
thread went from p99 0.14 ms to 5-10 ms (max 35-200 ms) while a 100 MB log was cleaned in a
thread, and stayed at p99 0.12 ms with the passes in a worker process (bench/cleaner.py, part
2). So by default they run in one worker process per cleaner thread (``use_worker_process``);
the swap and the checkpoint always happen here, in the broker process.

Every file operation of a round goes through the log's own FileSystem (``log.fs``): sizes, the
reads of both passes, the ``.cleaned`` output and the swap. A worker process cannot share an
in-memory file system, so it always works on the real one; a log opened on any other file
system (the power-loss tests' FaultFS) is cleaned in the cleaner thread instead.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .. import filenames
from ..checkpoints import OffsetCheckpointFile
from ..clock import SYSTEM_CLOCK, Clock
from ..errors import StorageError
from ..fs import FileSystem, OsFileSystem
from ..log import Log
from ..segment import LogSegment
from .cleaner import (
    Cleaner,
    CleanerStats,
    CleanJob,
    GroupResult,
    LogCleaningAbortedError,
    SegmentSource,
)
from .cleaner_manager import LogCleanerManager, LogToClean, TopicPartition
from .throttler import Throttler

if TYPE_CHECKING:  # imported when a worker process is configured (see CleanerThread.executor)
    from .worker import WorkerProcessExecutor

logger = logging.getLogger(__name__)

#: Java's Double.MAX_VALUE: Kafka's "unlimited" for log.cleaner.io.max.bytes.per.second.
DOUBLE_MAX = 1.7976931348623157e308


@dataclass(frozen=True)
class CleanerConfig:
    """The broker's log.cleaner.* settings (Kafka's CleanerConfig)."""

    num_threads: int = 1
    dedupe_buffer_size: int = 134217728
    dedupe_buffer_load_factor: float = 0.9
    io_buffer_size: int = 524288
    max_message_size: int = 1048588
    max_io_bytes_per_second: float = DOUBLE_MAX
    backoff_ms: int = 15000
    enable_cleaner: bool = True
    #: Run the two passes in a worker process per thread (see the module docstring).
    use_worker_process: bool = True
    #: How often the I/O throttle compares the rate with the limit (Kafka: 300 ms).
    throttle_check_interval_ms: int = 300

    @property
    def map_memory_per_thread(self) -> int:
        return min(self.dedupe_buffer_size // max(self.num_threads, 1), 2**31 - 1)

    @property
    def read_buffer_bytes(self) -> int:
        return max(self.io_buffer_size // max(self.num_threads, 1) // 2, 4096)

    @classmethod
    def from_broker_config(cls, config) -> CleanerConfig:
        """From a BrokerConfig's log_cleaner_* fields (and message.max.bytes)."""
        return cls(
            num_threads=config.log_cleaner_threads,
            dedupe_buffer_size=config.log_cleaner_dedupe_buffer_size,
            dedupe_buffer_load_factor=config.log_cleaner_io_buffer_load_factor,
            io_buffer_size=config.log_cleaner_io_buffer_size,
            max_message_size=config.log_config.max_message_bytes,
            max_io_bytes_per_second=config.log_cleaner_io_max_bytes_per_second,
            backoff_ms=config.log_cleaner_backoff_ms,
            enable_cleaner=config.log_cleaner_enable,
        )


@dataclass(frozen=True)
class CleanerMetrics:
    """A snapshot of Kafka's cleaner metrics (what the server exports)."""

    runs: int
    bytes_read: int
    bytes_written: int
    records_kept: int
    records_removed: int
    last_run_duration_s: float
    max_buffer_utilization: float
    max_recopy_ratio: float
    max_dirty_ratio: float
    seconds_since_last_run: float
    uncleanable_partitions: int
    uncleanable_bytes: int
    dead_threads: int
    errors: int
    max_compaction_delay_s: float


def plan_job(log: Log, ltc: LogToClean, now_ms: int, read_buffer_bytes: int) -> CleanJob:
    """The plain-data description of a round over ``log``, taken from one segment snapshot."""
    segments = log.segments_snapshot()
    config = log.config
    fs = log.fs

    def source(segment: LogSegment, start_position: int = 0) -> SegmentSource:
        return SegmentSource(
            base_offset=segment.base_offset,
            path=str(segment.log.path),
            size=segment.size,
            offset_index_bytes=_file_size(fs, segment.lazy_offset_index.path),
            time_index_bytes=_file_size(fs, segment.lazy_time_index.path),
            last_modified_ms=segment.last_modified_ms,
            start_position=start_position,
        )

    below, tail = [], []
    for i, segment in enumerate(segments):
        if segment.base_offset < ltc.first_uncleanable_offset:
            next_base = segments[i + 1].base_offset if i + 1 < len(segments) else log.log_end_offset
            start = 0
            if segment.base_offset <= ltc.first_dirty_offset < next_base:
                start = segment.offset_index.lookup(ltc.first_dirty_offset).position
            below.append(source(segment, start))
        else:
            tail.append(source(segment))
    return CleanJob(
        directory=str(log.directory),
        name=log.directory.name,
        first_dirty_offset=ltc.first_dirty_offset,
        first_uncleanable_offset=ltc.first_uncleanable_offset,
        segments=tuple(below),
        tail_segments=tuple(tail),
        segment_bytes=config.segment_bytes,
        max_index_bytes=config.segment_index_bytes,
        index_interval_bytes=config.index_interval_bytes,
        delete_retention_ms=config.delete_retention_ms,
        max_message_bytes=config.max_message_bytes,
        now_ms=now_ms,
        read_buffer_bytes=read_buffer_bytes,
        active_producers=log.last_records_of_active_producers(),
    )


def _file_size(fs: FileSystem, path: Path) -> int:
    try:
        return fs.stat(path).st_size
    except FileNotFoundError:
        return 0


def make_durable(log: Log, offset: int) -> None:
    """fsync ``log`` below ``offset`` before a round cleans up to it (see LogCleaner.clean_log)."""
    log.flush(offset)


def swap_in_group(log: Log, job: CleanJob, result: GroupResult, clock: Clock) -> None:
    """Open the finished ``.cleaned`` segment and swap it in for the group's old segments."""
    config = log.config
    directory = Path(job.directory)
    cleaned = LogSegment.open(
        directory,
        result.cleaned_base_offset,
        index_interval_bytes=config.index_interval_bytes,
        segment_index_bytes=config.segment_index_bytes,
        clock=clock,
        file_already_exists=True,
        file_suffix=filenames.CLEANED_FILE_SUFFIX,
        fs=log.fs,
    )
    try:
        by_base = {s.base_offset: s for s in log.segments_snapshot()}
        try:
            old = [by_base[base] for base in result.old_base_offsets]
        except KeyError:
            raise LogCleaningAbortedError(f"segments of {log.directory.name} changed during cleaning") from None
        log.replace_segments([cleaned], old)
    except BaseException:
        # Only while nothing was renamed: once a file is .swap or live, the old segments may
        # already be .deleted and these files are the only copy (the loader finishes the swap).
        holders = (cleaned.log, cleaned.lazy_offset_index, cleaned.lazy_time_index)
        if all(h.path.name.endswith(filenames.CLEANED_FILE_SUFFIX) for h in holders):
            cleaned.delete_if_exists()
        else:
            cleaned.close_handlers()
        raise


class CleanerThread(threading.Thread):
    """One cleaner: a thread with its own offset map (or worker process)."""

    def __init__(self, owner: LogCleaner, thread_id: int):
        super().__init__(name=f"kafka-log-cleaner-thread-{thread_id}", daemon=True)
        self.owner = owner
        self.thread_id = thread_id
        self._stop_event = threading.Event()
        self._executor: InThreadExecutor | WorkerProcessExecutor | None = None
        self._in_thread_executor: InThreadExecutor | None = None
        self.last_stats: CleanerStats | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    def run(self) -> None:
        try:
            while not self._stop_event.is_set():
                cleaned = self.owner.try_clean_filthiest_log(self)
                self.owner.manager.maintain_uncleanable_partitions()
                if not cleaned:
                    self._stop_event.wait(self.owner.config.backoff_ms / 1000.0)
        except BaseException:  # never silently: logged here, counted by dead_threads (Kafka's rule)
            logger.exception("cleaner thread %s died", self.name)
        finally:
            self.close_executor()

    def initiate_shutdown(self) -> None:
        self._stop_event.set()
        for executor in (self._executor, self._in_thread_executor):
            if executor is not None:
                executor.cancel()

    @property
    def stopping(self) -> bool:
        return self._stop_event.is_set()

    def check_done(self, tp: TopicPartition) -> None:
        if self._stop_event.is_set():
            raise LogCleaningAbortedError("the cleaner is shutting down")
        self.owner.manager.check_cleaning_aborted(tp)

    # -- executor ----------------------------------------------------------------------------

    def executor(self, fs: FileSystem | None = None):
        """The executor for a log on ``fs``: the worker process (if configured) only for the
        real file system, which is the only one a separate process can see."""
        config = self.owner.config
        if config.use_worker_process and fs is not None and not isinstance(fs, OsFileSystem):
            if self._in_thread_executor is None:
                self._in_thread_executor = InThreadExecutor(
                    config.map_memory_per_thread,
                    config.dedupe_buffer_load_factor,
                    self.owner.throttler,
                    self.owner.clock,
                )
            return self._in_thread_executor
        if self._executor is None:
            throttle = config.max_io_bytes_per_second / max(config.num_threads, 1)
            if config.use_worker_process:
                from .worker import WorkerProcessExecutor

                self._executor = WorkerProcessExecutor(
                    config.map_memory_per_thread,
                    config.dedupe_buffer_load_factor,
                    throttle,
                    config.throttle_check_interval_ms,
                )
            else:
                self._executor = InThreadExecutor(
                    config.map_memory_per_thread,
                    config.dedupe_buffer_load_factor,
                    self.owner.throttler,
                    self.owner.clock,
                )
        return self._executor

    def close_executor(self) -> None:
        if self._executor is not None:
            self._executor.close()
            self._executor = None
        if self._in_thread_executor is not None:
            self._in_thread_executor.close()
            self._in_thread_executor = None


class InThreadExecutor:
    """Runs the passes in the calling (cleaner) thread."""

    def __init__(self, map_memory: int, load_factor: float, throttler: Throttler, clock: Clock):
        self._cleaner = Cleaner(map_memory, load_factor, throttler=throttler, clock=clock)
        self._cancelled = False

    def run(
        self,
        job: CleanJob,
        on_group: Callable[[GroupResult], None],
        check_done: Callable[[], None],
        fs: FileSystem | None = None,
    ) -> tuple[int, CleanerStats]:
        """One round on ``fs`` (the log's file system; OS_FS by default)."""
        if fs is not None:
            self._cleaner.fs = fs

        def check() -> None:
            if self._cancelled:
                raise LogCleaningAbortedError("cancelled")
            check_done()

        self._cleaner.check_done = check
        return self._cleaner.clean(job, on_group)

    def cancel(self) -> None:
        self._cancelled = True

    def close(self) -> None:
        pass


class LogCleaner:
    """The cleaner threads and what they share: the manager, the throttler, the totals."""

    def __init__(
        self,
        config: CleanerConfig,
        log_dirs: list[Path],
        logs: Callable[[], dict[TopicPartition, Log]],
        log_dir_of: Callable[[TopicPartition], Path | None],
        *,
        clock: Clock = SYSTEM_CLOCK,
        checkpoints: Callable[[], dict[Path, OffsetCheckpointFile]] | None = None,
    ):
        """``checkpoints`` gives each online log dir's cleaner-offset-checkpoint (the LogManager
        owns them); by default one file per entry of ``log_dirs``, opened on first use."""
        if config.map_memory_per_thread // 24 * config.dedupe_buffer_load_factor <= 1:
            raise ValueError(
                "log.cleaner.dedupe.buffer.size is too small for log.cleaner.threads: "
                "each thread's offset map must hold more than one entry"
            )
        self.config = config
        self.clock = clock
        if checkpoints is None:
            from ..checkpoints import CLEANER_OFFSET_CHECKPOINT

            files: dict[Path, OffsetCheckpointFile] = {}

            def checkpoints() -> dict[Path, OffsetCheckpointFile]:
                if not files:
                    files.update({Path(d): OffsetCheckpointFile(Path(d) / CLEANER_OFFSET_CHECKPOINT) for d in log_dirs})
                return files

        self.manager = LogCleanerManager(logs, checkpoints, log_dir_of, clock=clock)
        self._log_dir_of = log_dir_of
        self.throttler = Throttler(config.max_io_bytes_per_second, check_interval_ms=config.throttle_check_interval_ms)
        self._threads: list[CleanerThread] = []
        self._lock = threading.Lock()
        self._runs = 0
        self._bytes_read = 0
        self._bytes_written = 0
        self._records_kept = 0
        self._records_removed = 0
        self._errors = 0
        self._last_stats: dict[int, CleanerStats] = {}
        self._started = False

    # -- lifecycle ---------------------------------------------------------------------------

    def startup(self) -> None:
        logger.info("starting %d log cleaner threads", self.config.num_threads)
        self._threads = [CleanerThread(self, i) for i in range(self.config.num_threads)]
        for thread in self._threads:
            thread.start()
        self._started = True

    def shutdown(self, timeout_s: float = 60.0) -> None:
        """Stop every thread, aborting rounds in progress (their .cleaned files are removed)."""
        for thread in self._threads:
            thread.initiate_shutdown()
        deadline = time.monotonic() + timeout_s
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
            if thread.is_alive():
                logger.error("cleaner thread %s did not stop within %.0f s", thread.name, timeout_s)
        self._started = False

    # -- partitions --------------------------------------------------------------------------

    def abort_cleaning(self, tp: TopicPartition) -> None:
        self.manager.abort_cleaning(tp)

    def abort_and_pause_cleaning(self, tp: TopicPartition) -> None:
        self.manager.abort_and_pause_cleaning(tp)

    def resume_cleaning(self, partitions) -> None:
        self.manager.resume_cleaning(partitions)

    def update_checkpoints(self, log_dir: Path, update=None, remove=None) -> None:
        self.manager.update_checkpoints(log_dir, update=update, remove=remove)

    # -- one iteration -----------------------------------------------------------------------

    def try_clean_filthiest_log(self, thread: CleanerThread) -> bool:
        """Kafka's tryCleanFilthiestLog: clean one log, then retention on the compacted logs."""
        manager = self.manager
        cleaned = False
        ltc = manager.grab_filthiest_compacted_log()
        if ltc is not None:
            cleaned = True
            try:
                self.clean_log(ltc, thread)
            except Exception:
                self._count_error()
                logger.warning(
                    "unexpected error cleaning %s-%d; marking it uncleanable", *ltc.topic_partition, exc_info=True
                )
                manager.mark_partition_uncleanable(self._log_dir_of(ltc.topic_partition), ltc.topic_partition)
        deletable = manager.deletable_logs()
        try:
            for tp, log in deletable:
                if thread.stopping:
                    break
                try:
                    log.delete_old_segments()
                except Exception:
                    self._count_error()
                    logger.warning(
                        "unexpected error applying retention to %s-%d; marking it uncleanable", *tp, exc_info=True
                    )
                    manager.mark_partition_uncleanable(self._log_dir_of(tp), tp)
        finally:
            manager.done_deleting([tp for tp, _ in deletable])
        return cleaned

    def clean_log(self, ltc: LogToClean, thread: CleanerThread) -> None:
        """One round over ``ltc``'s log; the checkpoint moves only if the round completes."""
        tp, log = ltc.topic_partition, ltc.log
        end_offset = None
        try:
            # What the round keeps is decided by the newest record of each key below the first
            # uncleanable offset: those must be durable first, or the round removes an older,
            # acknowledged record for a newer one that a power cut then takes too (found by the
            # power-loss workload; Kafka has replicas for this, triolog has the fsync). Rolled
            # segments are flushed soon anyway (flush_pending); this only brings it forward.
            make_durable(log, ltc.first_uncleanable_offset)
            job = plan_job(log, ltc, self.clock.milliseconds(), self.config.read_buffer_bytes)
            end_offset, stats = thread.executor(log.fs).run(
                job,
                lambda result: swap_in_group(log, job, result, self.clock),
                lambda: thread.check_done(tp),
                fs=log.fs,
            )
            self._record(thread.thread_id, stats)
            self.manager.update_delete_horizon(tp, log, stats.delete_horizon_ms)
            logger.info(
                "cleaned %s: offsets [%d, %d), %.1f MB read, %.1f MB written, %d records kept, %d removed in %.2f s",
                log.directory.name,
                ltc.first_dirty_offset,
                end_offset,
                stats.bytes_read / 1e6,
                stats.bytes_written / 1e6,
                stats.records_kept,
                stats.records_removed,
                stats.elapsed_s,
            )
        except LogCleaningAbortedError:
            end_offset = None
            logger.info("cleaning of %s aborted", log.directory.name)
        except StorageError:
            end_offset = None
            if not log.offline and not thread.stopping and self.manager.state_of(tp) != "aborted":
                raise
        finally:
            self.manager.done_cleaning(tp, self._log_dir_of(tp), end_offset)

    # -- metrics -----------------------------------------------------------------------------

    def _record(self, thread_id: int, stats: CleanerStats) -> None:
        with self._lock:
            self._runs += 1
            self._bytes_read += stats.bytes_read
            self._bytes_written += stats.bytes_written
            self._records_kept += stats.records_kept
            self._records_removed += stats.records_removed
            self._last_stats[thread_id] = stats

    def _count_error(self) -> None:
        with self._lock:
            self._errors += 1

    @property
    def dead_threads(self) -> int:
        return sum(1 for t in self._threads if self._started and not t.is_alive())

    def metrics(self) -> CleanerMetrics:
        manager = self.manager
        with self._lock:
            last = list(self._last_stats.values())
            runs, bytes_read, bytes_written = self._runs, self._bytes_read, self._bytes_written
            kept, removed, errors = self._records_kept, self._records_removed, self._errors
        return CleanerMetrics(
            runs=runs,
            bytes_read=bytes_read,
            bytes_written=bytes_written,
            records_kept=kept,
            records_removed=removed,
            last_run_duration_s=max((s.elapsed_s for s in last), default=0.0),
            max_buffer_utilization=max((s.buffer_utilization for s in last), default=0.0),
            max_recopy_ratio=max((s.bytes_written / s.bytes_read if s.bytes_read else 0.0 for s in last), default=0.0),
            max_dirty_ratio=manager.dirtiest_log_cleanable_ratio,
            seconds_since_last_run=max(0.0, (self.clock.milliseconds() - manager.time_of_last_run_ms) / 1000.0),
            uncleanable_partitions=sum(len(p) for p in manager.uncleanable_partitions().values()),
            uncleanable_bytes=manager.uncleanable_bytes(),
            dead_threads=self.dead_threads,
            errors=errors,
            max_compaction_delay_s=manager.max_compaction_delay_ms / 1000.0,
        )

    def __repr__(self) -> str:
        return f"LogCleaner(threads={len(self._threads)}, worker_process={self.config.use_worker_process})"


__all__ = ["CleanerConfig", "CleanerMetrics", "LogCleaner", "plan_job", "swap_in_group"]
