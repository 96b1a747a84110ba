"""LogCleanerManager: which log to clean next, and the state every cleaner thread shares.

Kafka's LogCleanerManager: the ``cleaner-offset-checkpoint`` of each log dir (first dirty offset
per partition), the choice of the filthiest log (largest dirty ratio at least
``min.cleanable.dirty.ratio``, or any cleanable bytes once ``max.compaction.lag.ms`` is exceeded),
the cleanable range [first dirty, first uncleanable), a log whose kept tombstones' delete horizon
has passed when no log is dirty enough (below), the in-progress / aborted / paused state of
each partition (so deleting a partition can wait for its cleaning to stop), and the partitions
marked uncleanable after an unexpected error.

Expired tombstones: a round stamps each tombstone (and each marker that may go) with a delete
horizon and removes it only in a later round once the horizon has passed (KIP-534). With the
dirty ratio alone that later round waits for enough new writes, on an idle log forever. So the
manager keeps, per log, the earliest horizon the last completed round kept, and when no log is
cleanable by ratio or lag it picks one whose horizon has passed: one round per horizon, no more.
This is the rule of KIP-534's pull request (``logsWithTombstonesExpired``, after
``log.latestDeleteHorizon``), which Kafka dropped before the merge over the reviewers' worries:
the extra round on idle partitions (here at most one per stamping round) and the horizon being
unknown after a restart (here too: kept in memory, learnt again by the log's next round).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..checkpoints import OffsetCheckpointFile
from ..clock import SYSTEM_CLOCK, Clock
from ..errors import CorruptCheckpointError
from ..log import Log
from .cleaner import LogCleaningAbortedError

logger = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
LONG_MAX = 2**63 - 1

IN_PROGRESS = "in_progress"
ABORTED = "aborted"


@dataclass(frozen=True)
class Paused:
    count: int


@dataclass
class LogToClean:
    """A candidate: its cleanable range and the bytes on each side of the first dirty offset."""

    topic_partition: TopicPartition
    log: Log
    first_dirty_offset: int
    first_uncleanable_offset: int
    clean_bytes: int
    cleanable_bytes: int
    need_compaction_now: bool
    compaction_delay_ms: int = 0

    @property
    def total_bytes(self) -> int:
        return self.clean_bytes + self.cleanable_bytes

    @property
    def cleanable_ratio(self) -> float:
        return self.cleanable_bytes / self.total_bytes if self.total_bytes else 0.0


def cleanable_offsets(log: Log, checkpointed: int | None, now_ms: int) -> tuple[int, int, bool]:
    """(first dirty offset, first uncleanable offset, whether the checkpoint must be rewritten).

    The first dirty offset is the checkpoint, reset to the log start when it is below it or past
    the log end. Uncleanable: the last stable offset (the high watermark unless a transaction is
    open: its outcome decides what is kept), the active segment, and the first dirty segment
    whose newest record is younger than ``min.compaction.lag.ms`` (Kafka's rule).
    """
    start = log.log_start_offset
    dirty = start if checkpointed is None else checkpointed
    force = False
    if dirty < start or dirty > log.log_end_offset:
        if checkpointed is not None and not (log.config.compact and log.config.delete):
            logger.warning(
                "resetting first dirty offset of %s from %d to log start %d", log.directory.name, dirty, start
            )
        dirty, force = start, True
    candidates = [log.last_stable_offset, log.active_segment.base_offset]
    lag = max(log.config.min_compaction_lag_ms, 0)
    if lag > 0:
        for segment in _non_active_segments_from(log, dirty):
            if segment.largest_timestamp > now_ms - lag:
                candidates.append(segment.base_offset)
                break
    return dirty, max(dirty, min(candidates)), force


def _non_active_segments_from(log: Log, offset: int):
    segments = log.segments_snapshot()
    active = segments[-1]
    floor = None
    for segment in segments:
        if segment.base_offset <= offset:
            floor = segment
    for segment in segments:
        if segment is active:
            break
        if floor is None or segment.base_offset >= floor.base_offset:
            yield segment


def calculate_cleanable_bytes(log: Log, first_dirty: int, uncleanable: int) -> tuple[int, int]:
    """(first uncleanable offset rounded down to its segment's base, bytes of [first dirty, it))."""
    first_uncleanable_segment = next(iter(_non_active_segments_from(log, uncleanable)), log.active_segment)
    first_uncleanable = first_uncleanable_segment.base_offset
    low = min(first_dirty, first_uncleanable)
    cleanable = sum(s.size for s in log.segments.values(low, first_uncleanable)) if low < first_uncleanable else 0
    return first_uncleanable, cleanable


def max_compaction_delay_ms(log: Log, first_dirty: int, now_ms: int) -> int:
    """How far past ``max.compaction.lag.ms`` the oldest dirty segment's first batch is (0 if not)."""
    max_lag = max(log.config.max_compaction_lag_ms, 0)
    if max_lag >= LONG_MAX // 2:
        return 0
    earliest = LONG_MAX
    for segment in _non_active_segments_from(log, first_dirty):
        try:
            header = segment.log.read_header_at(0)
        except OSError:
            continue
        if header is not None and header.max_timestamp > 0:
            earliest = min(earliest, header.max_timestamp)
    clean_until = now_ms - max_lag
    return clean_until - earliest if earliest < clean_until else 0


class LogCleanerManager:
    def __init__(
        self,
        logs: Callable[[], dict[TopicPartition, Log]],
        checkpoints: Callable[[], dict[Path, OffsetCheckpointFile]],
        log_dir_of: Callable[[TopicPartition], Path | None],
        *,
        clock: Clock = SYSTEM_CLOCK,
    ):
        """``checkpoints`` returns the cleaner-offset-checkpoint file of each online log dir."""
        self._logs = logs
        self._checkpoints = checkpoints
        self._log_dir_of = log_dir_of
        self.clock = clock
        self._lock = threading.RLock()
        self._paused_cond = threading.Condition(self._lock)
        self._in_progress: dict[TopicPartition, object] = {}
        self._uncleanable: dict[Path, set[TopicPartition]] = {}
        #: The earliest delete horizon kept by each log's last completed round, with the log
        #: it is about (a partition deleted and created again is another log).
        self._delete_horizons: dict[TopicPartition, tuple[Log, int]] = {}
        #: Metrics of the last selection (Kafka's max-dirty-percent, max-compaction-delay-secs).
        self.dirtiest_log_cleanable_ratio = 0.0
        self.max_compaction_delay_ms = 0
        self.time_of_last_run_ms = clock.milliseconds()

    # -- checkpoints -------------------------------------------------------------------------

    def all_cleaner_checkpoints(self) -> dict[TopicPartition, int]:
        out: dict[TopicPartition, int] = {}
        with self._lock:
            for path, checkpoint in self._checkpoints().items():
                try:
                    out.update(checkpoint.read())
                except CorruptCheckpointError as exc:
                    logger.warning("ignoring unreadable cleaner checkpoint in %s: %s", path, exc)
                except OSError as exc:
                    logger.warning("failed to read the cleaner checkpoint in %s: %s", path, exc)
        return out

    def update_checkpoints(
        self, log_dir: Path, update: tuple[TopicPartition, int] | None = None, remove: TopicPartition | None = None
    ) -> None:
        """Add/replace or remove one entry of ``log_dir``'s checkpoint, dropping partitions the
        dir no longer holds (Kafka's updateCheckpoints)."""
        with self._lock:
            checkpoint = self._checkpoints().get(Path(log_dir))
            if checkpoint is None:
                return
            try:
                current = checkpoint.read()
            except CorruptCheckpointError:
                current = {}
            held = {tp for tp in self._logs() if self._log_dir_of(tp) == Path(log_dir)}
            current = {tp: offset for tp, offset in current.items() if tp in held}
            if update is not None:
                current[update[0]] = update[1]
            if remove is not None:
                current.pop(remove, None)
            checkpoint.write(current)

    # -- selection ---------------------------------------------------------------------------

    def grab_filthiest_compacted_log(self) -> LogToClean | None:
        """The compacted log to clean next (now marked in progress), or None."""
        now = self.clock.milliseconds()
        with self._lock:
            self.time_of_last_run_ms = now
            checkpoints = self.all_cleaner_checkpoints()
            candidates: list[LogToClean] = []
            max_delay = 0
            for tp, log in self._logs().items():
                if not log.config.compact or tp in self._in_progress or log.offline:
                    continue
                if self.is_uncleanable(tp):
                    continue
                try:
                    dirty, uncleanable, force = cleanable_offsets(log, checkpoints.get(tp), now)
                    if force:
                        log_dir = self._log_dir_of(tp)
                        if log_dir is not None:
                            self.update_checkpoints(log_dir, update=(tp, dirty))
                    delay = max_compaction_delay_ms(log, dirty, now)
                    max_delay = max(max_delay, delay)
                    clean_bytes = sum(s.size for s in log.segments.values(-1, dirty)) if dirty > -1 else 0
                    first_uncleanable, cleanable_bytes = calculate_cleanable_bytes(log, dirty, uncleanable)
                except Exception:  # a log closed or deleted meanwhile: not a candidate this time
                    logger.debug("skipping %s in cleaner selection", tp, exc_info=True)
                    continue
                ltc = LogToClean(tp, log, dirty, first_uncleanable, clean_bytes, cleanable_bytes, delay > 0, delay)
                if ltc.total_bytes > 0:
                    candidates.append(ltc)
            self.max_compaction_delay_ms = max_delay
            self.dirtiest_log_cleanable_ratio = max((c.cleanable_ratio for c in candidates), default=0.0)
            cleanable = [
                c
                for c in candidates
                if (c.need_compaction_now and c.cleanable_bytes > 0)
                or c.cleanable_ratio > c.log.config.min_cleanable_dirty_ratio
            ]
            if not cleanable:
                cleanable = [c for c in candidates if self._delete_horizon_passed(c.topic_partition, c.log, now)]
                if not cleanable:
                    return None
            filthiest = max(cleanable, key=lambda c: c.cleanable_ratio)
            self._in_progress[filthiest.topic_partition] = IN_PROGRESS
            return filthiest

    def _delete_horizon_passed(self, tp: TopicPartition, log: Log, now_ms: int) -> bool:
        entry = self._delete_horizons.get(tp)
        return entry is not None and entry[0] is log and entry[1] <= now_ms

    def update_delete_horizon(self, tp: TopicPartition, log: Log, horizon_ms: int | None) -> None:
        """What a completed round of ``log`` kept: the earliest delete horizon (None: nothing
        waits for one)."""
        with self._lock:
            if horizon_ms is None:
                self._delete_horizons.pop(tp, None)
            else:
                self._delete_horizons[tp] = (log, horizon_ms)

    def deletable_logs(self) -> list[tuple[TopicPartition, Log]]:
        """Compacted logs for the cleaner thread's retention pass (marked in progress)."""
        with self._lock:
            out = [
                (tp, log)
                for tp, log in self._logs().items()
                if tp not in self._in_progress
                and log.config.compact
                and not log.offline
                and not self.is_uncleanable(tp)
            ]
            for tp, _ in out:
                self._in_progress[tp] = IN_PROGRESS
            return out

    def pause_cleaning_for_non_compacted_partitions(self) -> list[tuple[TopicPartition, Log]]:
        """The non-compacted logs for the retention task, each paused for cleaning until
        :meth:`resume_cleaning` (Kafka's pauseCleaningForNonCompactedPartitions): a topic switched
        from compact to delete while a round runs is left to the next retention run instead of
        having its segments deleted under the cleaner."""
        with self._lock:
            out = []
            for tp, log in self._logs().items():
                if log.config.compact or log.offline:
                    continue
                state = self._in_progress.get(tp)
                if state is None:
                    self._in_progress[tp] = Paused(1)
                elif isinstance(state, Paused):
                    self._in_progress[tp] = Paused(state.count + 1)
                else:
                    continue  # being cleaned (or aborted) right now
                out.append((tp, log))
            return out

    def done_deleting(self, partitions) -> None:
        with self._lock:
            for tp in partitions:
                state = self._in_progress.get(tp)
                if state == IN_PROGRESS:
                    del self._in_progress[tp]
                elif state == ABORTED:
                    self._in_progress[tp] = Paused(1)
                    self._paused_cond.notify_all()

    def done_cleaning(self, tp: TopicPartition, log_dir: Path | None, end_offset: int | None) -> None:
        """Checkpoint ``end_offset`` (None: the round did not finish) and release the partition."""
        with self._lock:
            state = self._in_progress.get(tp)
            if state == IN_PROGRESS:
                if end_offset is not None and log_dir is not None:
                    self.update_checkpoints(log_dir, update=(tp, end_offset))
                del self._in_progress[tp]
            elif state == ABORTED:
                self._in_progress[tp] = Paused(1)
                self._paused_cond.notify_all()
            else:
                raise RuntimeError(f"cleaning state of {tp} should be in progress, is {state}")

    # -- pause / abort -----------------------------------------------------------------------

    def abort_and_pause_cleaning(self, tp: TopicPartition, timeout_s: float | None = None) -> None:
        """Stop any cleaning of ``tp`` and keep it from starting; waits for a running round to
        notice (it checks between batches)."""
        with self._lock:
            state = self._in_progress.get(tp)
            if state is None:
                self._in_progress[tp] = Paused(1)
            elif state == IN_PROGRESS:
                self._in_progress[tp] = ABORTED
            elif isinstance(state, Paused):
                self._in_progress[tp] = Paused(state.count + 1)
            else:
                raise RuntimeError(f"cleaning of {tp} cannot be aborted and paused in state {state}")
            self._paused_cond.wait_for(lambda: isinstance(self._in_progress.get(tp), Paused), timeout_s)

    def resume_cleaning(self, partitions) -> None:
        with self._lock:
            for tp in partitions:
                state = self._in_progress.get(tp)
                if isinstance(state, Paused):
                    if state.count <= 1:
                        del self._in_progress[tp]
                    else:
                        self._in_progress[tp] = Paused(state.count - 1)

    def abort_cleaning(self, tp: TopicPartition) -> None:
        """Kafka's abortCleaning: abort and pause, then resume (used when a partition goes)."""
        self.abort_and_pause_cleaning(tp)
        self.resume_cleaning([tp])

    def check_cleaning_aborted(self, tp: TopicPartition) -> None:
        with self._lock:
            if self._in_progress.get(tp) == ABORTED:
                raise LogCleaningAbortedError(f"cleaning of {tp[0]}-{tp[1]} was aborted")

    def state_of(self, tp: TopicPartition):
        with self._lock:
            return self._in_progress.get(tp)

    # -- uncleanable partitions --------------------------------------------------------------

    def mark_partition_uncleanable(self, log_dir: Path | None, tp: TopicPartition) -> None:
        with self._lock:
            self._uncleanable.setdefault(Path(log_dir) if log_dir is not None else Path(), set()).add(tp)

    def is_uncleanable(self, tp: TopicPartition) -> bool:
        with self._lock:
            return any(tp in parts for parts in self._uncleanable.values())

    def remove_partition(self, tp: TopicPartition) -> None:
        """Forget a deleted partition's uncleanable mark and delete horizon."""
        with self._lock:
            for parts in self._uncleanable.values():
                parts.discard(tp)
            self._delete_horizons.pop(tp, None)

    def maintain_uncleanable_partitions(self) -> None:
        """Drop marks of partitions that no longer exist (Kafka's maintainUncleanablePartitions),
        and the delete horizons of logs that are gone."""
        logs = self._logs()
        with self._lock:
            for parts in self._uncleanable.values():
                for tp in [tp for tp in parts if tp not in logs]:
                    parts.discard(tp)
            for tp in [tp for tp, (log, _) in self._delete_horizons.items() if logs.get(tp) is not log]:
                del self._delete_horizons[tp]

    def uncleanable_partitions(self) -> dict[Path, set[TopicPartition]]:
        with self._lock:
            return {d: set(parts) for d, parts in self._uncleanable.items() if parts}

    def uncleanable_bytes(self) -> int:
        """Cleanable bytes of the uncleanable partitions (Kafka's uncleanable-bytes, all dirs)."""
        uncleanable = self.uncleanable_partitions()
        if not uncleanable:
            return 0
        logs = self._logs()
        checkpoints = self.all_cleaner_checkpoints()
        now = self.clock.milliseconds()
        total = 0
        for parts in uncleanable.values():
            for tp in parts:
                log = logs.get(tp)
                if log is None or log.offline:
                    continue
                try:
                    dirty, first_uncleanable, _ = cleanable_offsets(log, checkpoints.get(tp), now)
                    total += calculate_cleanable_bytes(log, dirty, first_uncleanable)[1]
                except Exception:
                    continue
        return total
