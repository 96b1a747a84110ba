"""LogManager: every partition log of the broker, and the files at each log directory's root.

It owns startup (clean-shutdown marker, checkpoints, loading every partition), placement of
new partitions (the log dir holding the fewest), the periodic checkpoint writes and the clean
shutdown sequence: flush, close, checkpoints, then the marker, in Kafka's order.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path

from triolog.config.log_config import LogConfig

from . import filenames
from .checkpoints import (
    CLEANER_OFFSET_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    CleanShutdownFile,
    MetaProperties,
    OffsetCheckpointFile,
    random_kafka_uuid,
)
from .cleaner.log_cleaner import CleanerConfig, LogCleaner
from .clock import SYSTEM_CLOCK, Clock
from .errors import CorruptCheckpointError, StorageError
from .fs import OS_FS, FileSystem, make_dirs
from .log import DEFAULT_PRODUCER_ID_EXPIRATION_MS, Log
from .segment_deleter import SegmentDeleter

logger = logging.getLogger(__name__)

LOCK_FILE = ".lock"
TopicPartition = tuple[str, int]


class LogDir:
    """One entry of log.dirs: its lock, its checkpoints and whether it went offline."""

    def __init__(self, path: Path, fs: FileSystem = OS_FS):
        self.path = path
        self.fs = fs
        self.clean_shutdown_file = CleanShutdownFile(path, fs)
        self.offline = False
        self._lock_fd: int | None = None
        #: Serialises the rewrites of this directory's offset checkpoints: the periodic tasks and a
        #: partition deletion must not interleave (a snapshot taken before a deletion and written
        #: after its rewrite would bring the deleted partition's entries back).
        self.checkpoint_lock = threading.Lock()

    def open(self) -> None:
        """Create the directory if needed, take its lock, and open (creating) its checkpoint files."""
        fs = self.fs
        make_dirs(fs, self.path)
        try:
            fd = fs.lock(self.path / LOCK_FILE)
        except BlockingIOError:
            raise StorageError(f"log directory {self.path} is in use by another process") from None
        self._lock_fd = fd
        self.recovery_point_checkpoint = OffsetCheckpointFile(self.path / RECOVERY_POINT_CHECKPOINT, fs)
        self.log_start_offset_checkpoint = OffsetCheckpointFile(self.path / LOG_START_OFFSET_CHECKPOINT, fs)
        self.replication_offset_checkpoint = OffsetCheckpointFile(self.path / REPLICATION_OFFSET_CHECKPOINT, fs)
        self.cleaner_offset_checkpoint = OffsetCheckpointFile(self.path / CLEANER_OFFSET_CHECKPOINT, fs)

    def unlock(self) -> None:
        if self._lock_fd is not None:
            self.fs.close(self._lock_fd)
            self._lock_fd = None

    def read_checkpoint(self, checkpoint: OffsetCheckpointFile) -> dict[TopicPartition, int]:
        """Unreadable recovery/log-start checkpoints count as empty, as in Kafka: recovery then covers more."""
        try:
            return checkpoint.read()
        except CorruptCheckpointError as exc:
            logger.warning("ignoring unreadable checkpoint %s: %s", checkpoint.path, exc)
            return {}


class LogManager:
    def __init__(
        self,
        log_dirs: Iterable[Path | str],
        default_config: LogConfig,
        *,
        clock: Clock = SYSTEM_CLOCK,
        topic_config: Callable[[str], LogConfig] | None = None,
        node_id: int = 0,
        cleaner_config: CleanerConfig | None = None,
        fs: FileSystem = OS_FS,
        producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    ):
        #: Every file operation of the logs goes through this (see broker/storage/fs.py).
        self.fs = fs
        self.log_dirs = [LogDir(Path(d) if fs is not OS_FS else Path(d).resolve(), fs) for d in log_dirs]
        if not self.log_dirs:
            raise ValueError("log.dirs must name at least one directory")
        self.default_config = default_config
        self.clock = clock
        #: topic name -> its LogConfig; the TopicManager installs its own after construction.
        self.topic_config: Callable[[str], LogConfig] = topic_config or (lambda topic: default_config)
        self.node_id = node_id
        #: ``producer.id.expiration.ms``: producer ids idle this long are forgotten (at load and
        #: by remove_expired_producers).
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.cluster_id: str | None = None
        #: The cluster the log dirs must belong to (ZooKeeper's /cluster/id), set before startup()
        #: by a broker joining a cluster: a log dir of another cluster is refused, a new one joins it.
        self.required_cluster_id: str | None = None
        #: Set before startup() by a broker in a cluster: every log it opens or creates is
        #: ``replicated`` (its high watermark moved by replication, not by appends), and a log
        #: it loads starts from the high watermark in its dir's replication-offset-checkpoint.
        self.replicated = False
        self._logs: dict[TopicPartition, Log] = {}
        self._log_dir_of: dict[TopicPartition, LogDir] = {}
        self._lock = threading.RLock()
        self.had_clean_shutdown: dict[Path, bool] = {}
        #: Log dirs started for the first time (no meta.properties yet): no shutdown to speak of.
        self.new_log_dirs: set[Path] = set()
        #: One queue of ``.deleted`` segment files for all logs; the server runs it.
        self.segment_deleter = SegmentDeleter(clock)
        #: Kafka's LogManager owns the log cleaner: None without a config or with log.cleaner.enable=false.
        self.cleaner: LogCleaner | None = None
        if cleaner_config is not None and cleaner_config.enable_cleaner:
            self.cleaner = LogCleaner(
                cleaner_config,
                [d.path for d in self.log_dirs],
                self.all_logs,
                lambda tp: self._log_dir_of[tp].path if tp in self._log_dir_of else None,
                clock=clock,
                checkpoints=lambda: {
                    d.path: d.cleaner_offset_checkpoint
                    for d in self.log_dirs
                    if not d.offline and hasattr(d, "cleaner_offset_checkpoint")
                },
            )

    # -- startup -----------------------------------------------------------------------------

    def startup(self) -> None:
        for log_dir in self.log_dirs:
            log_dir.open()
            if self._ensure_meta_properties(log_dir):
                self.new_log_dirs.add(log_dir.path)
            clean = log_dir.clean_shutdown_file.exists()
            # KAFKA-10471: delete the marker before loading, so a crash while loading is unclean.
            log_dir.clean_shutdown_file.delete()
            self.had_clean_shutdown[log_dir.path] = clean
            recovery_points = log_dir.read_checkpoint(log_dir.recovery_point_checkpoint)
            log_starts = log_dir.read_checkpoint(log_dir.log_start_offset_checkpoint)
            high_watermarks = log_dir.read_checkpoint(log_dir.replication_offset_checkpoint) if self.replicated else {}
            for entry in sorted(self.fs.scandir(log_dir.path), key=lambda e: e.name):
                if not entry.is_dir():
                    continue
                if entry.name.endswith(filenames.DELETE_DIR_SUFFIX):
                    logger.info("removing partition directory %s queued for deletion", entry.path)
                    self.fs.rmtree(entry.path)
                    continue
                try:
                    tp = filenames.parse_topic_partition_name(entry.name)
                except Exception:
                    logger.warning("ignoring directory %s: not a topic-partition", entry.path)
                    continue
                log = Log.open(
                    Path(entry.path),
                    self.topic_config(tp[0]),
                    clock=self.clock,
                    recovery_point=recovery_points.get(tp, 0),
                    log_start_offset=log_starts.get(tp, 0),
                    had_clean_shutdown=clean,
                    segment_deleter=self.segment_deleter,
                    fs=self.fs,
                    producer_id_expiration_ms=self.producer_id_expiration_ms,
                )
                log.on_offline = self._on_log_offline
                if self.replicated:
                    # Kafka's Partition.createLogIfNotExists: the checkpointed high watermark
                    # (0 if none, so the log start offset), capped at the log end offset.
                    log.replicated = True
                    log.update_high_watermark(high_watermarks.get(tp, 0))
                self._logs[tp] = log
                self._log_dir_of[tp] = log_dir
            loaded = sum(1 for d in self._log_dir_of.values() if d is log_dir)
            if clean:
                logger.info("loaded %d logs from %s after a clean shutdown", loaded, log_dir.path)
            elif log_dir.path in self.new_log_dirs and not loaded:
                # A first start has no marker either: it is not an unclean shutdown.
                logger.info("log directory %s is new: first start, nothing to recover", log_dir.path)
            else:
                logger.warning(
                    "loaded %d logs from %s after an unclean shutdown (no %s): recovered them "
                    "from their recovery points",
                    loaded,
                    log_dir.path,
                    log_dir.clean_shutdown_file.path.name,
                )
            # Entries of partitions that are no longer on disk (a deletion interrupted between its
            # rename and its checkpoint rewrite) must be gone before a topic of that name can be
            # created again, or they would be applied to the new log after the next crash.
            self._write_offset_checkpoints(log_dir)
        if self.cleaner is not None:
            self.cleaner.startup()

    def _ensure_meta_properties(self, log_dir: LogDir) -> bool:
        """Read or write the dir's meta.properties; True when it had none (a new log dir)."""
        meta = MetaProperties.read(log_dir.path, self.fs)
        created = meta is None
        if meta is not None and self.required_cluster_id is not None and meta.cluster_id != self.required_cluster_id:
            raise StorageError(
                f"log directory {log_dir.path} belongs to cluster {meta.cluster_id}, but the cluster in "
                f"ZooKeeper is {self.required_cluster_id}: the broker is joining the wrong cluster "
                f"(is zookeeper.connect, with its chroot, right?)"
            )
        if meta is None:
            cluster_id = self.cluster_id or self.required_cluster_id or random_kafka_uuid()
            meta = MetaProperties(cluster_id=cluster_id, node_id=self.node_id, directory_id=random_kafka_uuid())
            meta.write(log_dir.path, self.fs)
        elif self.cluster_id is not None and meta.cluster_id != self.cluster_id:
            raise StorageError(
                f"log directory {log_dir.path} belongs to cluster {meta.cluster_id}, "
                f"but another log directory belongs to {self.cluster_id}"
            )
        self.cluster_id = meta.cluster_id
        return created

    # -- partitions --------------------------------------------------------------------------

    def get_log(self, topic: str, partition: int) -> Log | None:
        return self._logs.get((topic, partition))

    def all_logs(self) -> dict[TopicPartition, Log]:
        with self._lock:
            return dict(self._logs)

    def get_or_create_log(self, topic: str, partition: int, config: LogConfig | None = None) -> Log:
        """The partition's log, created (durably: its directory entry fsynced) if it is new."""
        return self.create_logs(topic, [partition], config)[0]

    def create_logs(self, topic: str, partitions: Iterable[int], config: LogConfig | None = None) -> list[Log]:
        """The logs of ``partitions``, creating those that do not exist yet.

        All or nothing: if one cannot be created (out of descriptors, a full disk), those this
        call created are removed again and StorageError is raised; no log goes offline for it.
        A new partition directory is made durable (its log dir fsynced) before this returns, so an
        acknowledged create survives a power cut; one fsync per log dir covers all of them.
        """
        logs: list[Log] = []
        created: list[tuple[TopicPartition, Log]] = []
        with self._lock:
            directory = None
            try:
                for partition in partitions:
                    existing = self._logs.get((topic, partition))
                    if existing is not None:
                        logs.append(existing)
                        continue
                    name = filenames.topic_partition_dir_name(topic, partition)
                    log_dir = self._next_log_dir()
                    directory = log_dir.path / name
                    log = Log.open(
                        directory,
                        config or self.topic_config(topic),
                        clock=self.clock,
                        had_clean_shutdown=True,
                        segment_deleter=self.segment_deleter,
                        fs=self.fs,
                        producer_id_expiration_ms=self.producer_id_expiration_ms,
                    )
                    directory = None
                    log.on_offline = self._on_log_offline
                    log.replicated = self.replicated
                    self._logs[(topic, partition)] = log
                    self._log_dir_of[(topic, partition)] = log_dir
                    created.append(((topic, partition), log))
                    logs.append(log)
                    logger.info("created log %s in %s", name, log_dir.path)
                for path in {self._log_dir_of[tp].path for tp, _ in created}:
                    self.fs.fsync_dir(path)
            except OSError as exc:
                logger.error(
                    "could not create partitions of %s (%s): removing the %d created", topic, exc, len(created)
                )
                for tp, log in created:
                    self._logs.pop(tp, None)
                    self._log_dir_of.pop(tp, None)
                    try:
                        log.close(sync=False)
                    except OSError:
                        pass
                    self.fs.rmtree(log.directory)
                if directory is not None:  # the one that failed half-way
                    self.fs.rmtree(directory)
                raise StorageError(f"could not create the partitions of {topic}: {exc}") from exc
        return logs

    def _on_log_offline(self, log: Log, exc: OSError) -> None:
        """An I/O error took ``log`` offline: its whole directory goes with it (Kafka's rule)."""
        with self._lock:
            log_dir = self._log_dir_of.get((log.topic, log.partition))
        if log_dir is not None:
            self.take_dir_offline(log_dir, f"{exc} (on {log.directory.name})")

    def take_dir_offline(self, log_dir: LogDir, cause: str) -> None:
        """Every partition of ``log_dir`` refuses reads and writes (KAFKA_STORAGE_ERROR) until a
        restart; its checkpoints are no longer written; new partitions go to other dirs."""
        with self._lock:
            if log_dir.offline:
                return
            log_dir.offline = True
            logs = [log for tp, log in self._logs.items() if self._log_dir_of[tp] is log_dir]
        for log in logs:
            log.offline = True
        logger.critical(
            "log directory %s is offline after an I/O error: %s; its %d partitions refuse "
            "reads and writes until the broker restarts",
            log_dir.path,
            cause,
            len(logs),
        )

    def _refresh_offline_dirs(self) -> None:
        """A log that hit an I/O error takes its whole directory offline (Kafka's rule)."""
        for tp, log in self.all_logs().items():
            if log.offline:
                log_dir = self._log_dir_of.get(tp)
                if log_dir is not None and not log_dir.offline:
                    logger.error("log directory %s is offline after an I/O error on %s", log_dir.path, tp)
                    log_dir.offline = True

    def offline_dirs(self) -> list[Path]:
        self._refresh_offline_dirs()
        return [d.path for d in self.log_dirs if d.offline]

    def _next_log_dir(self) -> LogDir:
        self._refresh_offline_dirs()
        online = [d for d in self.log_dirs if not d.offline]
        if not online:
            raise StorageError("no log directory is online")
        counts = {d.path: 0 for d in online}
        for d in self._log_dir_of.values():
            if d.path in counts:
                counts[d.path] += 1
        return min(online, key=lambda d: counts[d.path])

    def delete_log(self, topic: str, partition: int) -> bool:
        """Remove a partition: out of the map at once, directory renamed ``-delete`` then removed."""
        with self._lock:
            log = self._logs.pop((topic, partition), None)
            log_dir = self._log_dir_of.pop((topic, partition), None)
        if log is None:
            return False
        if self.cleaner is not None:  # stop any cleaning of it first, then forget its checkpoint
            self.cleaner.abort_cleaning((topic, partition))
            self.cleaner.manager.remove_partition((topic, partition))
            if log_dir is not None and not log_dir.offline:
                self.cleaner.update_checkpoints(log_dir.path, remove=(topic, partition))
        log.close(sync=False)
        doomed = log.directory.with_name(filenames.delete_dir_name(topic, partition, uuid.uuid4().hex))
        self.fs.replace(log.directory, doomed)
        # The rename is what deletes the partition: durable before the deletion is acknowledged,
        # or a power cut brings the partition (and its topic) back.
        self.fs.fsync_dir(doomed.parent)
        if log_dir is not None and not log_dir.offline:
            # Kafka's LogManager rewrites the directory's checkpoints right after a deletion: an
            # entry left behind would be applied to a partition of the same name created later
            # (its log start offset above the new log's end: every record deleted at recovery).
            self._write_offset_checkpoints(log_dir)
        self.fs.rmtree(doomed)
        return True

    # -- retention ---------------------------------------------------------------------------

    def cleanup_logs(self) -> int:
        """One run of Kafka's ``kafka-log-retention`` task over every non-compacted log; returns
        how many segments were deleted. Compacted logs are left to the cleaner, which applies
        retention to ``compact,delete`` logs itself so the two never work on one log at once."""
        total = 0
        if self.cleaner is not None:
            deletable = self.cleaner.manager.pause_cleaning_for_non_compacted_partitions()
        else:
            deletable = [(tp, log) for tp, log in self.all_logs().items() if not log.config.compact and not log.offline]
        try:
            for tp, log in deletable:
                try:
                    total += log.delete_old_segments()
                except Exception:  # one failing log must not stop retention for the others
                    logger.exception("retention failed for %s-%d", *tp)
        finally:
            if self.cleaner is not None:
                self.cleaner.manager.resume_cleaning([tp for tp, _ in deletable])
        return total

    # -- checkpoints and flushing ------------------------------------------------------------

    def _logs_in(self, log_dir: LogDir) -> list[tuple[TopicPartition, Log]]:
        with self._lock:
            return [(tp, log) for tp, log in self._logs.items() if self._log_dir_of[tp] is log_dir]

    def _write_checkpoint(self, log_dir: LogDir, checkpoint_of, entries) -> None:
        """Rewrite one checkpoint of ``log_dir`` from a snapshot of its logs taken under the
        directory's checkpoint lock (see LogDir.checkpoint_lock)."""
        with log_dir.checkpoint_lock:
            if log_dir.offline:
                return
            checkpoint_of(log_dir).write(entries(self._logs_in(log_dir)))

    @staticmethod
    def _recovery_points(logs) -> dict[TopicPartition, int]:
        return {tp: log.recovery_point for tp, log in logs}

    @staticmethod
    def _log_start_offsets(logs) -> dict[TopicPartition, int]:
        """Only partitions whose start moved past their first segment, as Kafka writes it."""
        return {
            tp: log.log_start_offset
            for tp, log in logs
            if log.log_start_offset > log.segments.first_segment().base_offset
        }

    def high_watermark_checkpoints(self) -> dict[TopicPartition, int]:
        """The high watermarks in the online log dirs' replication-offset-checkpoint files, of
        the partitions each dir holds (what a replica manager starts a partition from)."""
        out: dict[TopicPartition, int] = {}
        for log_dir in self.log_dirs:
            if log_dir.offline or not hasattr(log_dir, "replication_offset_checkpoint"):
                continue
            held = {tp for tp, _ in self._logs_in(log_dir)}
            with log_dir.checkpoint_lock:
                entries = log_dir.read_checkpoint(log_dir.replication_offset_checkpoint)
            out.update((tp, offset) for tp, offset in entries.items() if tp in held)
        return out

    @staticmethod
    def _high_watermarks(logs) -> dict[TopicPartition, int]:
        return {tp: log.high_watermark for tp, log in logs}

    def _write_offset_checkpoints(self, log_dir: LogDir) -> None:
        self._write_checkpoint(log_dir, lambda d: d.recovery_point_checkpoint, self._recovery_points)
        self._write_checkpoint(log_dir, lambda d: d.log_start_offset_checkpoint, self._log_start_offsets)
        self._write_checkpoint(log_dir, lambda d: d.replication_offset_checkpoint, self._high_watermarks)

    def checkpoint_recovery_points(self) -> None:
        for log_dir in self.log_dirs:
            self._write_checkpoint(log_dir, lambda d: d.recovery_point_checkpoint, self._recovery_points)

    def checkpoint_log_start_offsets(self) -> None:
        for log_dir in self.log_dirs:
            self._write_checkpoint(log_dir, lambda d: d.log_start_offset_checkpoint, self._log_start_offsets)

    def checkpoint_high_watermarks(self) -> None:
        for log_dir in self.log_dirs:
            self._write_checkpoint(log_dir, lambda d: d.replication_offset_checkpoint, self._high_watermarks)

    def remove_expired_producers(self, now_ms: int | None = None) -> int:
        """Forget, in every online log, the producer ids idle for ``producer.id.expiration.ms``
        (Kafka's per-log producerExpireCheck; the server runs this every
        ``producer.id.expiration.check.interval.ms``). Returns how many were removed."""
        now = self.clock.milliseconds() if now_ms is None else now_ms
        removed = 0
        for log in self.all_logs().values():
            if not log.offline:
                removed += log.remove_expired_producers(now)
        return removed

    def flush_pending(self) -> int:
        """Run the flushes that rolls and flush.ms scheduled; returns how many logs were flushed."""
        return sum(1 for log in self.all_logs().values() if not log.offline and log.flush_pending())

    # -- shutdown ----------------------------------------------------------------------------

    def shutdown(self) -> None:
        """Kafka's clean shutdown: flush and close every log, write checkpoints, then the marker."""
        if self.cleaner is not None:  # first, so no swap runs while the logs close
            self.cleaner.shutdown()
        logs = self.all_logs()
        for tp, log in logs.items():
            if log.offline:
                continue
            try:
                log.flush()
                log.close()
            except Exception:  # one bad log must not stop the others from closing cleanly
                logger.exception("failed to flush and close log %s during shutdown", tp)
                log.offline = True
        self._refresh_offline_dirs()
        for write in (
            self.checkpoint_recovery_points,
            self.checkpoint_log_start_offsets,
            self.checkpoint_high_watermarks,
        ):
            try:
                write()
            except OSError:
                logger.exception("failed to write checkpoints during shutdown")
                for log_dir in self.log_dirs:
                    log_dir.offline = True
        for log_dir in self.log_dirs:
            # Only a directory whose every log closed cleanly may skip recovery next time.
            if not log_dir.offline:
                log_dir.clean_shutdown_file.write(0)
            log_dir.unlock()
