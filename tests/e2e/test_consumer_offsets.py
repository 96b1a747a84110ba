"""__consumer_offsets on the real broker process: committed offsets survive a kill -9 and a clean
restart, and the topic really is compacted by the log cleaner (segments shrink, the latest
commit per key is kept, a deleted group's tombstones go after delete.retention.ms)."""

from __future__ import annotations

import signal

import pytest

from triolog.broker.coordinator.group.group_metadata_manager import (
    OFFSETS_TOPIC,
    GroupKey,
    OffsetKey,
    partition_for,
    read_key,
    read_offset_value,
)
from triolog.protocol import messages as m
from triolog.protocol.errors import ErrorCode

from tests.e2e.reading import read_partition
from tests.waiting import wait_for

RETRIABLE = {ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE}


def commit(client, group: str, offsets: dict[tuple[str, int], int]) -> None:
    by_topic: dict[str, list] = {}
    for (topic, partition), offset in offsets.items():
        by_topic.setdefault(topic, []).append(m.OffsetCommitPartition(partition=partition, committed_offset=offset))
    response = client.call(m.OffsetCommitRequest(id=client.next_id(), group_id=group, topics=tuple(
        m.OffsetCommitTopic(name=t, partitions=tuple(ps)) for t, ps in by_topic.items())))
    codes = {p["error_code"] for t in response["topics"] for p in t["partitions"]}
    assert codes == {ErrorCode.NONE}, response


def create_topic(client, name: str, partitions: int) -> None:
    response = client.call(m.CreateTopicsRequest(id=client.next_id(), topics=(
        m.NewTopic(name=name, num_partitions=partitions, replication_factor=1),)))
    assert response["topics"][0]["error_code"] == ErrorCode.NONE, response


def fetch_offsets(client, group: str) -> dict[tuple[str, int], int] | None:
    """The group's committed offsets; None while the coordinator is still loading."""
    response = client.call(m.OffsetFetchRequest(id=client.next_id(), group_id=group))
    if response["error_code"] in RETRIABLE:
        return None
    assert response["error_code"] == ErrorCode.NONE, response
    return {(t["name"], p["partition"]): p["committed_offset"] for t in response["topics"] for p in t["partitions"]}


@pytest.mark.parametrize("stop", ["kill -9", "SIGTERM"])
def test_committed_offsets_survive_a_broker_restart(broker_factory, tmp_path, stop):
    props = ("offsets.topic.num.partitions=3",)
    broker = broker_factory(*props, process=stop == "kill -9")
    client = broker.client()
    create_topic(client, "orders", 4)
    expected: dict[str, dict[tuple[str, int], int]] = {}
    for g in range(6):
        group = f"group-{g}"
        for round_ in range(5):
            offsets = {("orders", p): 100 * round_ + p + g for p in range(4)}
            commit(client, group, offsets)
        expected[group] = offsets
    client.close()
    if stop == "kill -9":
        broker.kill()
    else:
        assert broker.stop(signal.SIGTERM) == 0
    restarted = broker_factory(*props, data_dir=tmp_path / "data")
    client = restarted.client()
    for group, offsets in expected.items():
        assert wait_for(lambda: fetch_offsets(client, group), timeout_s=30, what="offsets loaded") == offsets
    assert fetch_offsets(client, "never-committed") == {}
    client.close()


def test_consumer_offsets_is_compacted_and_deleted_groups_tombstones_expire(broker_factory, tmp_path):
    broker = broker_factory("offsets.topic.num.partitions=1", "offsets.topic.segment.bytes=2048",
                            "log.cleaner.backoff.ms=100", "log.cleaner.threads=1",
                            "log.cleaner.min.cleanable.ratio=0.01", "log.cleaner.delete.retention.ms=0",
                            "log.cleaner.min.compaction.lag.ms=0")
    bootstrap = f"127.0.0.1:{broker.port}"
    client = broker.client()
    create_topic(client, "orders", 5)
    rounds = 300
    for i in range(rounds):
        commit(client, "kept", {("orders", p): i * 10 + p for p in range(5)})
        if i < 50:
            commit(client, "doomed", {("orders", 0): i})
    latest = {OffsetKey("kept", "orders", p): (rounds - 1) * 10 + p for p in range(5)}
    directory = tmp_path / "data" / f"{OFFSETS_TOPIC}-0"

    def log_bytes() -> int:
        return sum(p.stat().st_size for p in directory.glob("*.log"))

    def active_base() -> int:
        return max(int(p.stem) for p in directory.glob("*.log"))

    written = rounds + 50
    assert active_base() > written // 2  # many rolls of 2 KiB segments

    def compacted():
        records = read_partition(bootstrap, OFFSETS_TOPIC, 0)
        base = active_base()
        below = [read_key(r.key) for r in records if r.offset < base]
        if len(below) != len(set(below)):
            return None  # not cleaned yet: a key still has older records below the active segment
        last = {}
        for r in records:
            last[read_key(r.key)] = None if r.value is None else read_offset_value(r.value).offset
        return records, last

    records, last = wait_for(compacted, timeout_s=60, what="__consumer_offsets cleaned")
    assert {k: v for k, v in last.items() if k.group == "kept"} == latest
    assert last[OffsetKey("doomed", "orders", 0)] == 49
    assert log_bytes() < 8 * 2048, log_bytes()  # from ~350 batches to a few segments

    deleted = client.call(m.DeleteGroupsRequest(id=client.next_id(), groups_names=("doomed",)))
    assert deleted["results"][0]["error_code"] == ErrorCode.NONE
    assert fetch_offsets(client, "doomed") == {}
    for i in range(60):  # roll past the tombstone so the cleaner can reach it
        commit(client, "kept", {("orders", p): 10_000 + i for p in range(5)})

    def tombstones_gone():
        keys = {read_key(r.key) for r in read_partition(bootstrap, OFFSETS_TOPIC, 0)}
        return not any(isinstance(k, (OffsetKey, GroupKey)) and k.group == "doomed" for k in keys)

    wait_for(tombstones_gone, timeout_s=60, what="the deleted group's tombstones removed")
    assert fetch_offsets(client, "kept") == {("orders", p): 10_059 for p in range(5)}
    assert partition_for("kept", 1) == 0
    client.close()
