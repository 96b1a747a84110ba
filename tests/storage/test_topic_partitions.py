"""Growing a topic (create_partitions): existing partitions untouched, the new count durable, and
a crash at any step leaves the old count or the new one, never one in between.

The crash here is kill -9 (descriptors dropped, nothing closed, no clean-shutdown marker); the
states a kill leaves between the steps are made on disk as the kill would leave them: the
topics file's temporary copy not yet renamed, or the renamed file without the new directories.
"""

from __future__ import annotations

import json

import pytest

from triolog.broker.storage.checkpoints import atomic_write
from triolog.broker.storage.log_manager import LogManager
from triolog.broker.storage.topics import OFFSETS_TOPIC, TOPICS_FILE, TopicManager
from triolog.config.log_config import LogConfig
from triolog.protocol.errors import (
    InvalidPartitionsError,
    InvalidRequestError,
    StorageError,
    UnknownTopicOrPartitionError,
)

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


def _stored_count(root, topic: str) -> int:
    return json.loads((root / TOPICS_FILE).read_text())["topics"][topic]["num_partitions"]


def _partition_dirs(root, topic: str) -> list[str]:
    return sorted(p.name for p in root.glob(f"{topic}-*") if p.is_dir())


def _orders_with_data(root, clock):
    manager, topics = _start(root, clock)
    topics.create("orders", 2, configs={"retention.ms": "123456"})
    log = manager.get_log("orders", 1)
    for i in range(5):
        log.append_as_leader(producer_batch(2, timestamp=clock.milliseconds(), tag=f"b{i}-"))
    log.flush()
    return manager, topics, read_all_records(log)


def test_growing_adds_empty_partitions_and_keeps_the_others_through_a_kill(tmp_path, clock):
    root = tmp_path / "logs"
    manager, topics, acknowledged = _orders_with_data(root, clock)
    before = manager.get_log("orders", 1)

    grown = topics.create_partitions("orders", 5)
    assert grown.num_partitions == 5 and dict(grown.overrides) == {"retention.ms": "123456"}
    assert _stored_count(root, "orders") == 5
    assert _partition_dirs(root, "orders") == [f"orders-{i}" for i in range(5)]
    assert manager.get_log("orders", 1) is before  # the same open log, not reopened
    assert manager.get_log("orders", 4).log_end_offset == 0
    assert manager.get_log("orders", 4).config.retention_ms == 123456  # the topic's overrides apply
    _kill(manager)

    manager, topics = _start(root, clock)
    assert topics.get("orders").num_partitions == 5
    assert read_all_records(manager.get_log("orders", 1)) == acknowledged
    manager.shutdown()


def test_a_kill_before_the_topics_file_is_renamed_leaves_the_old_count(tmp_path, clock):
    root = tmp_path / "logs"
    manager, topics, acknowledged = _orders_with_data(root, clock)
    doc = json.loads((root / TOPICS_FILE).read_text())
    doc["topics"]["orders"]["num_partitions"] = 5
    (root / (TOPICS_FILE + ".tmp")).write_text(json.dumps(doc))  # written, not yet renamed
    _kill(manager)

    manager, topics = _start(root, clock)
    assert topics.get("orders").num_partitions == 2
    assert _partition_dirs(root, "orders") == ["orders-0", "orders-1"]
    with pytest.raises(UnknownTopicOrPartitionError):
        topics.log("orders", 2)
    topics.create_partitions("orders", 3)  # and growing again works
    assert _stored_count(root, "orders") == 3
    manager.shutdown()


def test_a_kill_after_the_rename_before_the_directories_leaves_the_new_count(tmp_path, clock):
    root = tmp_path / "logs"
    manager, topics, acknowledged = _orders_with_data(root, clock)
    doc = json.loads((root / TOPICS_FILE).read_text())
    doc["topics"]["orders"]["num_partitions"] = 5
    atomic_write(root / TOPICS_FILE, json.dumps(doc).encode())  # the rename happened, no new directory
    _kill(manager)

    manager, topics = _start(root, clock)
    assert topics.get("orders").num_partitions == 5
    # A missing new partition is made empty on first use, as the grow would have made it.
    log = topics.log("orders", 4)
    assert log.log_end_offset == 0 and log.config.retention_ms == 123456
    log.append_as_leader(producer_batch(1, timestamp=clock.milliseconds()))
    assert log.log_end_offset == 1
    assert read_all_records(manager.get_log("orders", 1)) == acknowledged
    manager.shutdown()


def test_a_directory_that_cannot_be_made_leaves_the_old_count_in_memory_and_on_disk(tmp_path, clock):
    root = tmp_path / "logs"
    manager, topics, _ = _orders_with_data(root, clock)
    (root / "orders-3").write_bytes(b"in the way")  # mkdir of partition 3 fails
    with pytest.raises((StorageError, OSError)):
        topics.create_partitions("orders", 5)
    assert topics.get("orders").num_partitions == 2
    assert _stored_count(root, "orders") == 2
    assert _partition_dirs(root, "orders") == ["orders-0", "orders-1"]  # partition 2 removed again
    (root / "orders-3").unlink()
    topics.create_partitions("orders", 5)
    assert _partition_dirs(root, "orders") == [f"orders-{i}" for i in range(5)]
    manager.shutdown()


def test_kafkas_refusals(tmp_path, clock):
    manager, topics = _start(tmp_path / "logs", clock)
    topics.create("t", 3)
    with pytest.raises(InvalidPartitionsError, match=r"^Topic currently has 3 partitions, which is higher than "
                                                     r"the requested 2\.$"):
        topics.create_partitions("t", 2)
    with pytest.raises(InvalidPartitionsError, match=r"^Topic already has 3 partition\(s\)\.$"):
        topics.create_partitions("t", 3)
    with pytest.raises(InvalidPartitionsError, match="at most 10000"):
        topics.create_partitions("t", 10_001)
    with pytest.raises(UnknownTopicOrPartitionError):
        topics.create_partitions("absent", 2)
    topics.create_offsets_topic(2, 1 << 20)
    with pytest.raises(InvalidRequestError, match="internal topic __consumer_offsets"):
        topics.create_partitions(OFFSETS_TOPIC, 4)
    assert topics.get("t").num_partitions == 3 and topics.get(OFFSETS_TOPIC).num_partitions == 2
    manager.shutdown()
