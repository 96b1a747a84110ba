"""describe_log_dirs (Kafka's DescribeLogDirs) end to end: the real broker, its real files on disk."""

from __future__ import annotations

import time

import pytest

from triolog.client import Producer
from triolog.client.admin import AdminClient
from triolog.client.errors import UnknownTopicOrPartitionError
from triolog.client.types import TopicPartition
from triolog.protocol.errors import ErrorCode

from tests.waiting import wait_for


def _log_files(broker, topic: str, partition: int) -> list:
    return sorted((broker.data_dir / f"{topic}-{partition}").glob("*.log"))


@pytest.fixture
def admin(broker):
    with AdminClient(f"127.0.0.1:{broker.port}") as client:
        yield client


def test_describe_log_dirs_reports_the_bytes_and_segments_on_disk(broker, admin, topic):
    admin.create_topics([(topic, 2, 1, {"segment.bytes": "300"})])
    with Producer(f"127.0.0.1:{broker.port}", linger_ms=0) as producer:
        for i in range(10):
            producer.send(topic, b"x" * 100, partition=0).get(timeout=10)
        producer.send(topic, b"y", partition=1).get(timeout=10)

    dirs = admin.describe_log_dirs([topic])
    (path,) = dirs
    assert path == str(broker.data_dir.resolve())
    described = dirs[path]
    assert described.error is None and described.total_bytes > described.usable_bytes >= 0
    assert set(described.partitions) == {TopicPartition(topic, 0), TopicPartition(topic, 1)}
    for partition, records in ((0, 10), (1, 1)):
        info = described.partitions[TopicPartition(topic, partition)]
        files = _log_files(broker, topic, partition)
        assert info.size_bytes == sum(f.stat().st_size for f in files) > 0
        assert info.segments == len(files)
        assert (info.log_start_offset, info.log_end_offset) == (0, records)
    assert described.partitions[TopicPartition(topic, 0)].segments > 1  # 300-byte segments rolled

    admin.delete_records({TopicPartition(topic, 0): 4})
    only_p0 = admin.describe_log_dirs({topic: [0]})[path].partitions
    assert list(only_p0) == [TopicPartition(topic, 0)] and only_p0[TopicPartition(topic, 0)].log_start_offset == 4


def test_describe_log_dirs_of_everything_lists_every_partition(broker, admin, topic):
    admin.create_topics([(topic, 3, 1, {})])
    (described,) = admin.describe_log_dirs().values()
    assert {TopicPartition(topic, p) for p in range(3)} <= set(described.partitions)
    assert described.partitions[TopicPartition(topic, 2)] == (0, 1, 0, 0)  # empty: one empty segment


def test_describe_log_dirs_of_unknown_topics_and_partitions_errs_per_partition(broker, admin, topic):
    admin.create_topics([(topic, 1, 1, {})])
    with pytest.raises(UnknownTopicOrPartitionError) as raised:
        admin.describe_log_dirs({topic: [0, 5]})
    assert (raised.value.topic, raised.value.partition) == (topic, 5)

    client = broker.client()
    try:
        doc = client.call_map("describe_log_dirs", topics=[
            {"name": topic, "partitions": [0, 5]},
            {"name": topic + "-missing", "partitions": [0, 1]},
            {"name": topic + "-missing-too"},
            {"name": "bad/name"},
        ])
        assert doc["error_code"] == 0
        (log_dir,) = doc["log_dirs"]
        assert [(t["name"], [p["partition"] for p in t["partitions"]]) for t in log_dir["topics"]] == [(topic, [0])]
        errors = {e["name"]: e for e in doc["errors"]}
        assert [(p["partition"], p["error_code"]) for p in errors[topic]["partitions"]] == [
            (5, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]
        assert [(p["partition"], p["error_code"]) for p in errors[topic + "-missing"]["partitions"]] == [
            (0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), (1, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]
        assert errors[topic + "-missing-too"]["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert errors["bad/name"]["error_code"] == ErrorCode.INVALID_TOPIC_EXCEPTION
        assert all(p["error_message"] for e in doc["errors"] for p in e["partitions"])
        # Unknown topics are not created by describing them.
        assert topic + "-missing" not in admin.list_topics()
    finally:
        client.close()


@pytest.mark.parametrize("fields, says", [
    ({"topics": "all"}, "field 'topics' must be an array, got str"),
    ({"topics": [{"name": "t", "partitions": [0, 0]}]}, "repeats 0"),
    ({"topics": [{"name": "t"}, {"name": "t"}]}, "repeats 't'"),
    ({"topics": [{"partitions": [0]}]}, "field 'topics[0].name' is missing"),
    ({"topics": [{"name": "t", "partitions": [2**31]}]}, "field 'topics[0].partitions[0]' must be in"),
])
def test_describe_log_dirs_refuses_malformed_requests_and_stays_usable(broker, fields, says):
    client = broker.client()
    try:
        doc = client.call_map("describe_log_dirs", **fields)
        assert doc["error_code"] == ErrorCode.INVALID_REQUEST and says in doc["error_message"], doc
        assert doc["log_dirs"] == [] and doc["errors"] == []
        assert client.call_map("describe_log_dirs", topics=[])["error_code"] == 0
    finally:
        client.close()


def test_describe_log_dirs_is_counted_in_the_request_metrics(broker, admin):
    def count() -> float:
        return broker.sample("triolog_server_requests_total", api="describe_log_dirs", error="NONE")

    # A request is counted once its response is written, so the previous test's last one may be
    # counted after that test ended: start from a count that has settled, then wait for ours.
    before = _settled(count)
    admin.describe_log_dirs([])
    wait_for(lambda: count() == before + 1, 10, "describe_log_dirs counted in triolog_server_requests_total")


def _settled(sample, quiet_s: float = 0.2, timeout_s: float = 10.0) -> float:
    """``sample()`` once it has not changed for ``quiet_s``."""
    deadline = time.monotonic() + timeout_s
    value = sample()
    while time.monotonic() < deadline:
        time.sleep(quiet_s)
        again = sample()
        if again == value:
            return value
        value = again
    raise AssertionError(f"still changing after {timeout_s} s: {value}")
