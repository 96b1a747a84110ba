"""Deleting and re-creating a topic loses nothing: the old partition's checkpoint entries die with it.

The crash here is kill -9 (descriptors dropped, nothing closed, no clean-shutdown marker, no
periodic checkpoint after the re-creation); the page cache survives, so everything written is
on "disk". The power-loss variants of these checks are in test_power_loss.py.
"""

from __future__ import annotations

import pytest

from triolog.broker.storage.checkpoints import (
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    OffsetCheckpointFile,
)
from triolog.broker.storage.log_manager import LogManager
from triolog.broker.storage.topics import TopicManager
from triolog.config.log_config import LogConfig

from .helpers import producer_batch, read_all_records

CONFIG = LogConfig().with_overrides({"segment.bytes": "2000", "index.interval.bytes": "1"})


def _start(root, clock) -> tuple[LogManager, TopicManager]:
    manager = LogManager([root], CONFIG, clock=clock)
    topics = TopicManager(manager, CONFIG)
    manager.topic_config = topics.config_for
    topics.load()
    manager.startup()
    topics.adopt_loaded_partitions()
    return manager, topics


def _kill(manager: LogManager) -> None:
    """What kill -9 leaves: open files dropped, no close, no checkpoints, no marker."""
    for log in manager.all_logs().values():
        for segment in log.segments:
            segment.close_handlers()
    for log_dir in manager.log_dirs:
        log_dir.unlock()


def _move_log_start(log, how: str, clock) -> None:
    if how == "delete_records":
        log.maybe_increment_log_start_offset(50)
    else:  # retention: every closed segment has expired
        log.update_config(log.config.with_overrides({"retention.ms": "1000"}))
        clock.advance(10_000)
        log.roll()
        assert log.delete_old_segments() > 0
    assert log.log_start_offset >= 50


@pytest.mark.parametrize("how", ["delete_records", "retention"])
def test_acknowledged_records_survive_delete_recreate_and_a_crash(tmp_path, clock, how):
    root = tmp_path / "logs"
    manager, topics = _start(root, clock)
    topics.create("orders", 1)
    old = manager.get_log("orders", 0)
    for i in range(25):
        old.append_as_leader(producer_batch(2, timestamp=clock.milliseconds(), tag=f"old{i}-"))
    _move_log_start(old, how, clock)
    old.flush()
    manager.checkpoint_recovery_points()
    manager.checkpoint_log_start_offsets()
    manager.checkpoint_high_watermarks()

    topics.delete("orders")
    # Kafka rewrites the directory's checkpoints right after a deletion: no entry of the old log is left.
    for name in (RECOVERY_POINT_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT, REPLICATION_OFFSET_CHECKPOINT):
        assert ("orders", 0) not in OffsetCheckpointFile(root / name).read(), name

    topics.create("orders", 1)
    new = manager.get_log("orders", 0)
    for i in range(5):
        new.append_as_leader(producer_batch(2, timestamp=clock.milliseconds(), tag=f"new{i}-"))
    new.flush()  # acks=-1: the answer goes out after this returns
    acknowledged = read_all_records(new)
    assert [r.offset for r in acknowledged] == list(range(10))
    _kill(manager)

    manager, topics = _start(root, clock)
    recovered = manager.get_log("orders", 0)
    assert (recovered.log_start_offset, recovered.log_end_offset) == (0, 10)
    assert read_all_records(recovered) == acknowledged
    manager.shutdown()


def test_checkpoint_entries_of_partitions_gone_from_disk_do_not_outlive_startup(tmp_path, clock):
    """A crash between the deletion's rename and its checkpoint rewrite leaves stale entries;
    startup rewrites the checkpoints from the logs it loaded, before a topic can be re-created."""
    root = tmp_path / "logs"
    manager, topics = _start(root, clock)
    topics.create("orders", 1)
    log = manager.get_log("orders", 0)
    for i in range(10):
        log.append_as_leader(producer_batch(2, timestamp=clock.milliseconds()))
    log.maybe_increment_log_start_offset(15)
    manager.checkpoint_recovery_points()
    manager.checkpoint_log_start_offsets()
    stale_start = OffsetCheckpointFile(root / LOG_START_OFFSET_CHECKPOINT).read()
    assert stale_start == {("orders", 0): 15}
    _kill(manager)
    # the directory disappears as after a deletion whose checkpoint rewrite never happened
    import shutil

    shutil.rmtree(root / "orders-0")
    manager, topics = _start(root, clock)
    for name in (RECOVERY_POINT_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT):
        assert ("orders", 0) not in OffsetCheckpointFile(root / name).read(), name
    new = manager.get_or_create_log("orders", 0)
    new.append_as_leader(producer_batch(3, timestamp=clock.milliseconds()))
    new.flush()
    _kill(manager)
    manager, topics = _start(root, clock)
    assert manager.get_log("orders", 0).log_end_offset == 3
    manager.shutdown()
