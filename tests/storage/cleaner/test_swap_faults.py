"""The cleaner's swap on the storage fault seam (FaultFS): a swap that fails half-way takes the
log offline and keeps every file it already renamed, so the restart finishes the swap."""

from __future__ import annotations

import errno
from pathlib import Path

from triolog.broker.storage.checkpoints import CLEANER_OFFSET_CHECKPOINT, OffsetCheckpointFile
from triolog.broker.storage.cleaner.log_cleaner import CleanerConfig, CleanerThread, LogCleaner
from triolog.broker.storage.clock import ManualClock
from triolog.broker.storage.log import Log
from triolog.protocol.records import Record

from tests.storage.faultfs import Fault, FaultFS

from .helpers import append, check_against_model, compact_config, read_all_records

LOG_DIR = Path("/data")


def _cleaner(fs: FaultFS, log: Log, clock) -> tuple[LogCleaner, CleanerThread]:
    # The production default (worker process): a log on FaultFS is still cleaned in this thread.
    config = CleanerConfig(dedupe_buffer_size=24 * 10_000, use_worker_process=True)
    checkpoint = OffsetCheckpointFile(LOG_DIR / CLEANER_OFFSET_CHECKPOINT, fs)
    cleaner = LogCleaner(config, [LOG_DIR], lambda: {("t", 0): log}, lambda tp: LOG_DIR, clock=clock,
                         checkpoints=lambda: {LOG_DIR: checkpoint})
    return cleaner, CleanerThread(cleaner, 0)


def _fill(log: Log, clock, appended: dict) -> None:
    for i in range(40):
        items = [(b"k%d" % ((i * 3 + j) % 5), b"v%d-%d" % (i, j)) for j in range(3)]
        if i == 0:  # a key written once: the first cleaned group keeps a record
            items.append((b"once", b"only value"))
        for record in append(log, items, clock.milliseconds()):
            appended[record.offset] = record
        clock.advance(3)
    log.roll()


def test_the_cleaner_reads_and_writes_only_through_the_logs_file_system():
    """FaultFS paths do not exist on the real disk: a cleaner that bypassed the seam would fail."""
    clock = ManualClock()
    fs = FaultFS(seed=1, clock=clock)
    log = Log.open(LOG_DIR / "t-0", compact_config(segment_bytes=700), clock=clock, fs=fs)
    appended: dict[int, Record] = {}
    _fill(log, clock, appended)
    cleaner, thread = _cleaner(fs, log, clock)
    bytes_before = sum(s.size for s in log.segments_snapshot())
    assert cleaner.try_clean_filthiest_log(thread)
    assert cleaner.metrics().errors == 0 and cleaner.metrics().runs == 1
    assert thread._executor is None  # no worker process was started for a log on FaultFS
    assert sum(s.size for s in log.segments_snapshot()) < bytes_before / 4
    check_against_model(read_all_records(log), appended)
    assert not any(name.endswith((".cleaned", ".swap")) for name in fs.listdir(LOG_DIR / "t-0"))
    thread.close_executor()


def test_a_swap_that_fails_after_a_rename_to_the_live_name_keeps_the_new_segment():
    """EIO on the rename of the index's .swap, after the .log already has its live name and the
    old segments are .deleted: the log goes offline; the cleaned files must not be deleted, as
    they are the only copy of the group's records. A restart completes the swap."""
    for seed in range(3):
        clock = ManualClock()
        fs = FaultFS(seed=seed, clock=clock)
        log = Log.open(LOG_DIR / "t-0", compact_config(segment_bytes=700), clock=clock, fs=fs)
        appended: dict[int, Record] = {}
        _fill(log, clock, appended)
        log.flush()
        for directory in ("/", LOG_DIR, LOG_DIR / "t-0"):  # the log's directory is durable too
            fs.fsync_dir(directory)
        cleaner, thread = _cleaner(fs, log, clock)
        fault = Fault("rename", errno.EIO, match=lambda path: path.endswith(".index.swap"))
        fs.faults.append(fault)
        cleaner.try_clean_filthiest_log(thread)
        assert fault.hits == 1 and log.offline
        thread.close_executor()
        fs.faults.clear()
        fs.fsync_dir(LOG_DIR / "t-0")  # the kernel writes the directory back in its own time
        fs.power_loss()
        reopened = Log.open(LOG_DIR / "t-0", compact_config(segment_bytes=700), clock=clock, fs=fs)
        check_against_model(read_all_records(reopened), appended)
        assert reopened.log_end_offset == max(appended) + 1
        assert not any(name.endswith((".cleaned", ".swap")) for name in fs.listdir(LOG_DIR / "t-0"))
