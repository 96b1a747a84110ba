"""Simulated power losses (FaultFS): nothing acknowledged is lost, nothing corrupt is served.

The workload and its checks are in power_loss.py; bench/power_loss.py runs the same for
10,000+ power losses (``--compacted`` with the log cleaner cleaning through the FaultFS). A failure message names the seed: ``Life(seed).run(5)`` replays it.
"""

from __future__ import annotations

import errno
import os

import pytest

from triolog.broker.storage.fs import OsFileSystem

from .faultfs import Fault, FaultFS
from .power_loss import Life, Stats, run

#: 4 chunks of 90 lives, 5 epochs each: about 2,100 power losses (with those during recovery).
CHUNKS = 4
LIVES_PER_CHUNK = 90


@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_power_losses_lose_no_acknowledged_record_and_serve_no_corrupt_batch(chunk):
    stats = run(range(chunk * LIVES_PER_CHUNK, (chunk + 1) * LIVES_PER_CHUNK), epochs=5)
    assert stats.violations == []
    assert stats.power_losses >= 5 * LIVES_PER_CHUNK
    # the workload is not vacuous: records were acknowledged, checked after power losses, and
    # unacknowledged ones were really lost (so unsynced writes did vanish)
    assert stats.acknowledged_records > 1000 and stats.acknowledged_checks > stats.acknowledged_records
    assert stats.lost_unacknowledged > 100
    assert stats.recovery_crashes > 0


#: The compacted workload: 3 chunks of 100 lives with topic ``c`` cleaned in-process (~1,800
#: power losses, a tenth of them during a cleaning round).
COMPACTED_CHUNKS = 3
COMPACTED_LIVES_PER_CHUNK = 100


@pytest.mark.parametrize("chunk", range(COMPACTED_CHUNKS))
def test_power_losses_while_the_cleaner_cleans_and_swaps_lose_no_acknowledged_record(chunk):
    first = 10_000 + chunk * COMPACTED_LIVES_PER_CHUNK
    stats = run(range(first, first + COMPACTED_LIVES_PER_CHUNK), epochs=5, compacted=True)
    assert stats.violations == []
    assert stats.power_losses >= 5 * COMPACTED_LIVES_PER_CHUNK
    # the cleaner really ran through the FaultFS, and the power went in its passes and its swaps
    assert stats.cleaning_rounds > 50 and stats.swaps > 50
    assert stats.losses_in_cleaning > 20 and stats.losses_in_swap > 3
    assert stats.keys_checked > 1000 and stats.acknowledged_records > 1000


def test_the_compacted_workload_catches_a_cleaner_that_cleans_past_what_is_durable(monkeypatch):
    """The compacted checks can fail: a round that does not flush what it compacts against first
    removes acknowledged records for newer ones a power cut then takes as well."""
    monkeypatch.setattr("triolog.broker.storage.cleaner.log_cleaner.make_durable", lambda log, offset: None)
    stats = run(range(200), epochs=5, compacted=True)
    assert stats.lost_acknowledged > 0
    assert any("latest acknowledged record of key" in v for v in stats.violations)


class _SkipDirectoryFsync(FaultFS):
    """A broken storage layer: directory fsyncs do nothing."""

    def fsync_dir(self, path) -> None:
        self._mutate("fsync_dir", str(path))


class _SkipFileFsync(FaultFS):
    """A broken storage layer: file fsyncs do nothing (directories still sync)."""

    def fsync(self, fd: int) -> None:
        entry = self._fd(fd)
        self._mutate("fsync", entry.path)
        if entry.inode.is_dir:
            super().fsync(fd)


@pytest.mark.parametrize("broken", [_SkipDirectoryFsync, _SkipFileFsync])
def test_the_power_loss_workload_catches_a_flush_that_does_not_sync(broken, monkeypatch):
    """The checks can fail: with a flush that syncs less, acknowledged records get lost."""
    monkeypatch.setattr("tests.storage.power_loss.FaultFS", broken)
    stats = Stats()
    for seed in range(40):
        stats.add(Life(seed).run(5))
    assert stats.lost_acknowledged > 0
    assert any("records lost" in v for v in stats.violations)


# -- FaultFS itself: what it keeps and what it loses --------------------------------------------


def _write(fs: FaultFS, path: str, data: bytes, *, sync: bool) -> None:
    fd = fs.open(path, os.O_RDWR | os.O_CREAT)
    fs.pwrite(fd, data, fs.fstat(fd).st_size)
    if sync:
        fs.fsync(fd)
    fs.close(fd)


def test_faultfs_keeps_fsynced_data_and_names_and_may_lose_the_rest():
    kept_unsynced = lost_unsynced = 0
    for seed in range(60):
        fs = FaultFS(seed=seed)
        fs.mkdir("/d")
        fs.fsync_dir("/")
        _write(fs, "/d/synced", b"a" * 2000, sync=True)
        fs.fsync_dir("/d")
        _write(fs, "/d/synced", b"b" * 2000, sync=False)  # appended, never synced
        _write(fs, "/d/unnamed", b"c" * 100, sync=True)  # synced data, directory entry not
        fs.power_loss()
        data = fs.read_bytes("/d/synced")
        assert data[:2000] == b"a" * 2000
        tail = data[2000:]
        assert set(tail) <= {ord("b"), 0}  # new bytes or a hole, never anything else
        if b"b" in tail:
            kept_unsynced += 1
        if tail.count(b"b") < 2000:
            lost_unsynced += 1
        assert fs.listdir("/d") in (["synced"], ["synced", "unnamed"])
    assert kept_unsynced and lost_unsynced


def test_faultfs_loses_unflushed_mapped_writes_and_keeps_msynced_ones():
    outcomes = set()
    for seed in range(40):
        fs = FaultFS(seed=seed)
        fd = fs.open("/index", os.O_RDWR | os.O_CREAT)
        fs.ftruncate(fd, 4096)
        fs.fsync(fd)
        fs.fsync_dir("/")
        mapping = fs.mmap(fd, 4096, True)
        fs.close(fd)  # a mapping outlives its descriptor
        mapping[0:4] = b"SYNC"
        mapping.flush()
        mapping[1024:1028] = b"LOST"
        fs.power_loss()
        data = fs.read_bytes("/index")
        assert data[0:4] == b"SYNC"
        outcomes.add(data[1024:1028])
    assert outcomes == {b"LOST", b"\0\0\0\0"}


def test_faultfs_drops_the_dirty_pages_of_a_failed_fsync_like_linux():
    """fsyncgate: after a failed fsync, a retried fsync succeeds but the data never lands."""
    fs = FaultFS(seed=1)
    fd = fs.open("/f", os.O_RDWR | os.O_CREAT)
    fs.fsync_dir("/")
    fs.pwrite(fd, b"x" * 1024, 0)
    fs.faults.append(Fault("fsync", errno.EIO))
    with pytest.raises(OSError) as failed:
        fs.fsync(fd)
    assert failed.value.errno == errno.EIO
    fs.fsync(fd)  # a retry "succeeds"
    fs.power_loss()
    assert fs.read_bytes("/f").strip(b"\0") == b""


def test_os_file_system_is_the_default_and_has_every_method_faultfs_has():
    names = {n for n in dir(FaultFS) if not n.startswith("_")} & {n for n in dir(OsFileSystem) if not n.startswith("_")}
    assert {"open", "pread", "pwrite", "pwritev", "fsync", "fsync_dir", "mmap", "fallocate", "replace",
            "unlink", "mkdir", "rmtree", "scandir", "ftruncate", "lock"} <= names
