"""File descriptors: a bounded LRU of open segment files, and EMFILE never takes a log offline.

Running out of descriptors is a resource limit, not a disk failure (issue 10, item 4): the
request that hit it fails (KAFKA_STORAGE_ERROR), idle segment descriptors are closed to make
room, and everything works again once descriptors are free.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from triolog.broker.storage.descriptors import DescriptorCache
from triolog.broker.storage.errors import StorageError
from triolog.broker.storage.fs import OsFileSystem
from triolog.broker.storage.log import Log
from triolog.broker.storage.log_manager import LogManager
from triolog.broker.storage.topics import TopicManager
from triolog.config.log_config import LogConfig
from triolog.protocol.records import Record, encode_batch

from .faultfs import FaultFS
from .helpers import read_all_records

CONFIG = LogConfig().with_overrides({"segment.bytes": "700", "index.interval.bytes": "100"})
D1 = Path("/disk/logs")


def _batch(clock, tag: str) -> bytes:
    now = clock.milliseconds()
    return encode_batch([Record(i, now, b"k", f"{tag}-{i}".encode().ljust(60, b".")) for i in range(3)])


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_reads_across_many_segments_keep_at_most_the_budget_of_descriptors_open(tmp_path, clock):
    fs = OsFileSystem(DescriptorCache(limit=10))
    log = Log.open(tmp_path / "t-0", CONFIG, clock=clock, fs=fs)
    for i in range(150):
        log.append_as_leader(_batch(clock, f"r{i}"))
    assert log.num_segments >= 40
    before = _open_fds()
    expected = read_all_records(log)  # touches every segment
    for segment in log.segments:  # and again, in another order
        log.read(segment.base_offset, 100)
    assert _open_fds() - before <= 10
    assert sum(1 for s in log.segments if s.log.is_open) <= 10
    assert fs.open_files.evictions > 0
    # an evicted descriptor comes back on use, for reads and for appends alike
    assert read_all_records(log) == expected
    log.append_as_leader(_batch(clock, "after"))
    assert read_all_records(log)[-1].value.startswith(b"after-2")


def test_many_partitions_share_one_budget(clock):
    fs = FaultFS(seed=1, clock=clock, open_files=12)
    manager = LogManager([D1], CONFIG, clock=clock, fs=fs)
    manager.startup()
    logs = [manager.get_or_create_log("t", p) for p in range(30)]
    for round_ in range(3):
        for p, log in enumerate(logs):
            log.append_as_leader(_batch(clock, f"{p}.{round_}"))
    for log in logs:
        assert [r.value[:6] for r in read_all_records(log)][-1].startswith(b"%d.2" % logs.index(log))
    assert fs.open_fds() <= 12 + 1  # the log dir's lock file
    manager.shutdown()


def _hog(fs: FaultFS, directory: Path) -> list[int]:
    """Take every free descriptor, as thousands of client sockets would."""
    held = []
    while True:
        try:
            held.append(fs.open(directory / ".lock", os.O_RDONLY))
        except OSError:
            return held


def test_out_of_descriptors_fails_the_request_and_never_takes_a_log_offline(clock):
    fs = FaultFS(seed=2, clock=clock, max_fds=40, open_files=1000)
    manager = LogManager([D1], CONFIG, clock=clock, fs=fs)
    manager.startup()
    log = manager.get_or_create_log("t", 0)
    for i in range(12):
        log.append_as_leader(_batch(clock, f"a{i}"))
    log.flush()
    expected = read_all_records(log)
    for segment in log.segments:
        segment.log.close()  # nothing cached to shed: the descriptors are someone else's
    held = _hog(fs, D1)

    with pytest.raises(StorageError, match="Too many open files"):
        for i in range(20):  # the append that needs a descriptor (or a roll) fails
            log.append_as_leader(_batch(clock, f"b{i}"))
    with pytest.raises(OSError, match="Too many open files"):
        log.read(0, 1 << 20)
    with pytest.raises(StorageError):
        log.roll()
    with pytest.raises(StorageError):
        manager.get_or_create_log("u", 0)
    assert not log.offline and manager.offline_dirs() == []
    assert fs.listdir(D1).count("u-0") == 0  # the failed creation left nothing behind

    for fd in held:
        fs.close(fd)
    assert read_all_records(log)[:len(expected)] == expected
    info = log.append_as_leader(_batch(clock, "c"))
    log.flush()
    assert info.first_offset == read_all_records(log)[-3].offset
    offsets = [r.offset for r in read_all_records(log)]
    assert offsets == list(range(len(offsets)))


def test_a_topic_creation_that_runs_out_of_descriptors_leaves_no_topic_behind(clock):
    fs = FaultFS(seed=3, clock=clock, max_fds=30)
    manager = LogManager([D1], CONFIG, clock=clock, fs=fs)
    topics = TopicManager(manager, CONFIG)
    manager.topic_config = topics.config_for
    topics.load()
    manager.startup()
    topics.create("small", 2)
    small = topics.log("small", 0)
    small.append_as_leader(_batch(clock, "s"))
    held = _hog(fs, D1)
    for fd in held[:12]:
        fs.close(fd)  # room for a few partitions, not for 50
    with pytest.raises(StorageError):
        topics.create("big", 50)
    assert topics.get("big") is None
    assert not [name for name in fs.listdir(D1) if name.startswith("big-")]
    assert not small.offline and manager.offline_dirs() == []
    small.append_as_leader(_batch(clock, "s2"))  # the unrelated partition works on
    for fd in held[12:]:
        fs.close(fd)
    manager.shutdown()
    fs.power_loss()
    manager = LogManager([D1], CONFIG, clock=clock, fs=fs)
    topics = TopicManager(manager, CONFIG)
    topics.load()
    manager.startup()
    topics.adopt_loaded_partitions()
    assert topics.get("big") is None and topics.get("small") is not None
