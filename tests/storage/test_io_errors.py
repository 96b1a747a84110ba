"""I/O errors through the fault seam: EIO on fsync, a full disk (ENOSPC), out of descriptors.

EIO on fsync takes the log directory offline loudly and is never retried (fsyncgate: Linux may
have dropped the unwritten pages, so a retried fsync that "succeeds" proves nothing). A full
disk only fails the request that needed the space: the partition stays online and readable,
and writes resume by themselves once space returns (Redpanda's behaviour, beyond Kafka's).
The same with a real tiny tmpfs is in tests/e2e/test_disk_full.py.
"""

from __future__ import annotations

import errno
import logging
from pathlib import Path

import pytest

from triolog.broker.storage.checkpoints import RECOVERY_POINT_CHECKPOINT, OffsetCheckpointFile
from triolog.broker.storage.errors import StorageError
from triolog.broker.storage.log_manager import LogManager
from triolog.config.log_config import LogConfig
from triolog.protocol.errors import ErrorCode
from triolog.protocol.records import Record, encode_batch

from .faultfs import Fault, FaultFS
from .helpers import read_all_records

CONFIG = LogConfig().with_overrides({
    "segment.bytes": "6000", "index.interval.bytes": "200", "segment.index.bytes": "4096",
})
D1, D2 = Path("/disk1/logs"), Path("/disk2/logs")


def _batch(clock, n: int = 3, size: int = 100, tag: str = "") -> bytes:
    now = clock.milliseconds()
    return encode_batch([Record(i, now, b"k", f"{tag}{i}".encode().ljust(size, b".")) for i in range(n)])


def _manager(fs, clock, dirs=(D1,)) -> LogManager:
    manager = LogManager(list(dirs), CONFIG, clock=clock, fs=fs)
    manager.startup()
    return manager


# -- EIO on fsync ---------------------------------------------------------------------------------


def test_a_failed_fsync_takes_the_log_dir_offline_loudly_and_is_never_retried(clock, caplog):
    fs = FaultFS(seed=1, clock=clock)
    manager = _manager(fs, clock, dirs=(D1, D2))
    failing = manager.get_or_create_log("t", 0)  # placed in the emptiest dir: d1, d2, d1
    elsewhere = manager.get_or_create_log("t", 1)
    neighbour = manager.get_or_create_log("t", 2)
    assert (failing.directory.parent, elsewhere.directory.parent, neighbour.directory.parent) == (D1, D2, D1)
    for log in (failing, elsewhere, neighbour):
        log.append_as_leader(_batch(clock, tag="acked-"))
        log.flush()
    acknowledged = read_all_records(failing)
    manager.checkpoint_recovery_points()
    checkpoint_before = fs.read_bytes(D1 / RECOVERY_POINT_CHECKPOINT)

    log_file = str(failing.active_segment.log.path)
    fs.faults.append(Fault("fsync", errno.EIO, match=lambda path: path == log_file))
    failing.append_as_leader(_batch(clock, tag="never-acked-"))
    with caplog.at_level(logging.ERROR, logger="triolog.broker.storage"), pytest.raises(StorageError) as failed:
        failing.flush()
    assert failed.value.code == ErrorCode.KAFKA_STORAGE_ERROR
    assert any(r.levelno >= logging.CRITICAL and str(D1) in r.getMessage() and "offline" in r.getMessage()
               for r in caplog.records)
    assert manager.offline_dirs() == [D1]

    # the whole directory is offline: every partition of it refuses writes and reads
    fsyncs = fs.fsyncs_of(log_file)
    for log in (failing, neighbour):
        with pytest.raises(StorageError):
            log.append_as_leader(_batch(clock))
        with pytest.raises(StorageError):
            log.read(0, 1 << 20)
        with pytest.raises(StorageError):
            log.flush()
    assert manager.flush_pending() == 0
    assert fs.fsyncs_of(log_file) == fsyncs  # no retry of the failed fsync, ever
    manager.checkpoint_recovery_points()
    assert fs.read_bytes(D1 / RECOVERY_POINT_CHECKPOINT) == checkpoint_before  # offline dirs are left alone

    # the other directory works on, and takes the new partitions
    elsewhere.append_as_leader(_batch(clock))
    elsewhere.flush()
    assert manager.get_or_create_log("u", 0).directory.parent == D2

    # after a restart, what was acknowledged before the failure is there
    fs.power_loss()
    manager = _manager(fs, clock, dirs=(D1, D2))
    assert read_all_records(manager.get_log("t", 0))[:len(acknowledged)] == acknowledged


def test_no_descriptor_to_sync_the_directory_fails_only_that_flush(clock):
    """Opening the directory for its fsync can hit EMFILE (the real OS_FS opens it; fsync itself
    never fails so): that is no disk failure. The flush fails, the recovery point stays, the log
    and its directory stay online, and the next flush syncs everything."""
    fs = FaultFS(seed=2, clock=clock)
    manager = _manager(fs, clock)
    log = manager.get_or_create_log("t", 0)
    log.append_as_leader(_batch(clock, tag="first-"))
    log.flush()
    before = log.recovery_point
    log.append_as_leader(_batch(clock, tag="second-"))
    fs.faults.append(Fault("fsync_dir", errno.EMFILE, match=lambda path: path == str(log.directory)))
    with pytest.raises(StorageError) as failed:
        log.flush()
    assert failed.value.code == ErrorCode.KAFKA_STORAGE_ERROR
    assert "Too many open files" in str(failed.value)
    assert log.recovery_point == before and not log.offline and manager.offline_dirs() == []
    log.append_as_leader(_batch(clock, tag="third-"))
    log.flush()
    assert log.recovery_point == log.log_end_offset == 9
    fs.power_loss()
    manager = _manager(fs, clock)
    assert len(read_all_records(manager.get_log("t", 0))) == 9


# -- a full disk ----------------------------------------------------------------------------------


def _fill(fs: FaultFS, log, clock) -> int:
    """Append until the disk is full; returns the log end offset reached."""
    for i in range(10_000):
        try:
            log.append_as_leader(_batch(clock, tag=f"fill{i}-"))
        except StorageError as exc:
            assert "No space left" in str(exc)
            return log.log_end_offset
    raise AssertionError("the disk never filled")


def test_a_full_disk_fails_the_append_keeps_the_partition_readable_and_writes_resume(clock):
    fs = FaultFS(seed=2, clock=clock, capacity=64 * 1024)
    manager = _manager(fs, clock)
    log = manager.get_or_create_log("t", 0)
    end = _fill(fs, log, clock)
    log.flush()
    acknowledged = read_all_records(log)
    assert [r.offset for r in acknowledged] == list(range(end))

    # nothing of the refused batch is left in the file, nothing went offline, reads work
    segment = log.active_segment
    assert len(fs.read_bytes(segment.log.path)) == segment.size
    assert not log.offline and manager.offline_dirs() == []
    with pytest.raises(StorageError, match="No space left"):
        log.append_as_leader(_batch(clock, tag="still-full-"))
    assert read_all_records(log) == acknowledged

    # space comes back: the very next append works, at the next offset
    fs.capacity += 256 * 1024
    info = log.append_as_leader(_batch(clock, tag="after-"))
    assert info.first_offset == end
    for i in range(40):  # and on, through rolls
        log.append_as_leader(_batch(clock, tag=f"more{i}-"))
    log.flush()
    expected = read_all_records(log)
    assert [r.offset for r in expected] == list(range(log.log_end_offset))

    fs.power_loss()
    manager = _manager(fs, clock)
    assert read_all_records(manager.get_log("t", 0)) == expected


def test_a_full_disk_during_a_roll_leaves_the_log_as_it_was(clock):
    fs = FaultFS(seed=3, clock=clock)
    manager = _manager(fs, clock)
    log = manager.get_or_create_log("t", 0)
    while log.num_segments == 1:
        log.append_as_leader(_batch(clock))
        if log.active_segment.size + 400 > 6000:
            break
    before_files = fs.listdir(log.directory)
    active = log.active_segment
    fs.capacity = fs.used  # not one more block: the new segment's index cannot get its space
    with pytest.raises(StorageError, match="No space left"):
        for _ in range(20):
            log.append_as_leader(_batch(clock))
    assert log.active_segment is active and log.num_segments == 1
    assert fs.listdir(log.directory) == before_files  # the half-made segment is gone again
    assert not log.offline
    fs.capacity = None
    log.append_as_leader(_batch(clock))
    assert log.num_segments == 2
    log.flush()
    expected = read_all_records(log)
    fs.power_loss()
    assert read_all_records(_manager(fs, clock).get_log("t", 0)) == expected


def test_an_index_that_cannot_grow_is_left_sparser_never_written_unbacked(clock):
    """Index pages get real blocks before they are written (posix_fallocate): no SIGBUS on a
    full tmpfs. When there is no block, the entry is left out and the append still succeeds."""
    fs = FaultFS(seed=4, clock=clock)
    config = CONFIG.with_overrides({"segment.index.bytes": str(1 << 20), "segment.bytes": str(1 << 30),
                                    "index.interval.bytes": "1"})
    manager = LogManager([D1], config, clock=clock, fs=fs)
    manager.startup()
    log = manager.get_or_create_log("t", 0)
    for i in range(30):
        log.append_as_leader(_batch(clock, tag=f"a{i}-"))
    entries = log.active_segment.offset_index.entries
    assert entries > 0
    fs.faults.append(Fault("fallocate", errno.ENOSPC, times=None))
    # 64 KiB were reserved at creation: fill the index past them so it must ask for more
    big = _batch(clock, n=1, size=10)
    for i in range(10_000):
        log.append_as_leader(big)
        if log.active_segment.offset_index.entries * 8 >= 64 * 1024:
            break
    stuck = log.active_segment.offset_index.entries
    assert stuck * 8 == 64 * 1024  # it stopped at the reserved space instead of writing past it
    for _ in range(5):
        log.append_as_leader(big)  # still accepted, without index entries
    assert log.active_segment.offset_index.entries == stuck
    fs.faults.clear()
    log.append_as_leader(big)
    assert log.active_segment.offset_index.entries == stuck + 1
    records = read_all_records(log)
    assert [r.offset for r in records] == list(range(log.log_end_offset))
    for offset in (0, stuck // 2, log.log_end_offset - 3):
        assert log.read(offset, 100).first_batch.base_offset <= offset


def test_a_full_disk_while_writing_checkpoints_keeps_the_old_ones(clock):
    fs = FaultFS(seed=5, clock=clock)
    manager = _manager(fs, clock)
    log = manager.get_or_create_log("t", 0)
    log.append_as_leader(_batch(clock))
    log.flush()
    manager.checkpoint_recovery_points()
    before = OffsetCheckpointFile(D1 / RECOVERY_POINT_CHECKPOINT, fs).read()
    log.append_as_leader(_batch(clock))
    log.flush()
    fs.faults.append(Fault("pwrite", errno.ENOSPC, match=lambda path: path.endswith(".tmp"), times=None))
    with pytest.raises(OSError):
        manager.checkpoint_recovery_points()
    assert OffsetCheckpointFile(D1 / RECOVERY_POINT_CHECKPOINT, fs).read() == before
    assert not [name for name in fs.listdir(D1) if name.endswith(".tmp")]
    assert manager.offline_dirs() == []
    fs.faults.clear()
    manager.checkpoint_recovery_points()
    assert OffsetCheckpointFile(D1 / RECOVERY_POINT_CHECKPOINT, fs).read() == {("t", 0): 6}
