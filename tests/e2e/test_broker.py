"""The real broker process, driven over TCP: produce, fetch, long polls, restarts and shutdown."""

from __future__ import annotations

import threading
import time

from triolog.protocol import messages as m
from triolog.protocol.errors import ErrorCode
from triolog.protocol.records import build_batch, iter_batches

from tests.waiting import wait_for

from .broker_process import InProcessBroker


def _produce(client, topic, partition, values, acks=1, timeout_ms=5000):
    now = int(time.time() * 1000)
    batch = build_batch([(b"k", v, now, ()) for v in values])
    response = client.call(m.ProduceRequest(
        id=client.next_id(), acks=acks, timeout_ms=timeout_ms,
        topics=(m.ProduceTopic(name=topic, partitions=(m.ProducePartition(partition=partition, records=batch),)),),
    ))
    return response["topics"][0]["partitions"][0]


def _fetch(client, topic, partition, offset, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20):
    response = client.call(m.FetchRequest(
        id=client.next_id(), max_wait_ms=max_wait_ms, min_bytes=min_bytes, max_bytes=max_bytes,
        topics=(m.FetchTopic(name=topic, partitions=(
            m.FetchPartition(partition=partition, fetch_offset=offset, partition_max_bytes=max_bytes),)),),
    ))
    return response["topics"][0]["partitions"][0]


def _values(partition_result, start=0):
    return [r.value for b in iter_batches(partition_result["records"]) for r in b.records if r.offset >= start]


def _fetch_all(client, topic, partition):
    """Every value from offset 0, fetching until a fetch returns nothing new."""
    seen, offset = [], 0
    while True:
        values = _values(_fetch(client, topic, partition, offset), offset)
        if not values:
            return seen
        seen.extend(values)
        offset += len(values)


def _create(client, name, partitions=1, configs=None):
    response = client.call(m.CreateTopicsRequest(id=client.next_id(), topics=(
        m.NewTopic(name=name, num_partitions=partitions, replication_factor=1, configs=configs or {}),)))
    return response["topics"][0]


def test_broker_produce_then_fetch_returns_the_records_with_offsets(broker):
    client = broker.client()
    assert _create(client, "orders", 2)["error_code"] == 0
    assert _produce(client, "orders", 1, [b"a", b"b"])["base_offset"] == 0
    assert _produce(client, "orders", 1, [b"c"], acks=-1)["base_offset"] == 2
    result = _fetch(client, "orders", 1, 1)
    assert result["error_code"] == 0 and result["high_watermark"] == 3
    assert _values(result, 1) == [b"b", b"c"]


def test_broker_auto_creates_topics_on_metadata_not_on_produce(broker):
    client = broker.client()
    assert _produce(client, "fresh", 0, [b"x"])["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    meta = client.call(m.MetadataRequest(id=client.next_id(), topics=("fresh",)))
    assert [p["partition"] for p in meta["topics"][0]["partitions"]] == [0]
    assert _produce(client, "fresh", 0, [b"x"])["error_code"] == 0


def test_broker_long_poll_is_woken_by_an_append(tmp_path):
    broker = InProcessBroker(tmp_path / "data", metrics=True).start()
    try:
        client, producer = broker.client(), broker.client()
        _create(client, "poll")
        outcome = {}

        def poll():
            outcome["result"] = _fetch(client, "poll", 0, 0, max_wait_ms=60_000)
            outcome["answered"] = time.monotonic()

        thread = threading.Thread(target=poll)
        thread.start()
        wait_for(lambda: broker.sample("triolog_server_delayed_fetches") == 1, 10, "the fetch to wait for data")
        produced = time.monotonic()
        _produce(producer, "poll", 0, [b"late"])
        thread.join(20)
        assert _values(outcome["result"]) == [b"late"]
        assert outcome["answered"] - produced < 10  # woken by the append, not by max_wait_ms
    finally:
        broker.stop()


def test_broker_long_poll_returns_empty_after_max_wait(broker):
    client = broker.client()
    _create(client, "quiet")
    start = time.monotonic()
    result = _fetch(client, "quiet", 0, 0, max_wait_ms=300)
    assert result["records"] == b"" and result["error_code"] == 0
    assert 0.3 <= time.monotonic() - start < 10  # never before max_wait_ms


def test_broker_restart_keeps_acknowledged_data_and_topic_configs(broker_factory, tmp_path):
    broker = broker_factory()
    client = broker.client()
    _create(client, "durable", 1, {"segment.bytes": "200", "retention.ms": "123456"})
    for i in range(10):
        _produce(client, "durable", 0, [b"v%d" % i])
    client.close()
    assert broker.stop() == 0
    assert (tmp_path / "data" / ".kafka_cleanshutdown").exists()

    again = broker_factory(data_dir=tmp_path / "data")
    client = again.client()
    assert _fetch_all(client, "durable", 0) == [b"v%d" % i for i in range(10)]
    configs = client.call(m.DescribeConfigsRequest(id=client.next_id(), topics=("durable",)))["topics"][0]["configs"]
    entry = {"source": "topic", "read_only": False, "is_sensitive": False}
    assert configs["segment.bytes"] == {"value": "200", **entry}
    assert configs["retention.ms"] == {"value": "123456", **entry}


def test_broker_kill_9_loses_nothing_acknowledged(broker_factory, tmp_path):
    broker = broker_factory(process=True)
    client = broker.client()
    _create(client, "crash", 1, {"segment.bytes": "300"})
    acked = []
    for i in range(30):
        result = _produce(client, "crash", 0, [b"r%d" % i], acks=-1 if i % 2 else 1)
        assert result["error_code"] == 0
        acked.append(b"r%d" % i)
    broker.kill()
    again = broker_factory(data_dir=tmp_path / "data")
    client = again.client()
    assert _fetch_all(client, "crash", 0) == acked
    assert any(e.get("event") == "broker_started" for e in again.events())


def _list_offset(client, topic, partition, timestamp):
    response = client.call(m.ListOffsetsRequest(id=client.next_id(), topics=(
        m.ListOffsetsTopic(name=topic, partitions=(m.ListOffsetsPartition(partition=partition, timestamp=timestamp),)),)))
    return response["topics"][0]["partitions"][0]


def test_broker_retention_task_deletes_expired_segments_and_fetch_below_start_is_out_of_range(broker_factory, tmp_path):
    broker = broker_factory("log.retention.check.interval.ms=100", "log.initial.task.delay.ms=0",
                            "log.segment.delete.delay.ms=300")
    client = broker.client()
    assert _create(client, "expiring", configs={"segment.bytes": "200", "retention.ms": "1500"})["error_code"] == 0
    for i in range(10):
        assert _produce(client, "expiring", 0, [b"v%d" % i + b"x" * 100])["error_code"] == 0
    directory = tmp_path / "data" / "expiring-0"
    assert len(list(directory.glob("*.log"))) >= 5
    assert _fetch(client, "expiring", 0, 0)["error_code"] == 0
    # Every record expires 1.5 s after it was written; retention rolls, deletes, then the files go.
    wait_for(lambda: _list_offset(client, "expiring", 0, -2)["offset"] == 10, 15, "log start offset 10")
    result = _fetch(client, "expiring", 0, 0)
    assert result["error_code"] == ErrorCode.OFFSET_OUT_OF_RANGE
    assert result["log_start_offset"] == 10
    wait_for(lambda: not list(directory.glob("*.deleted")), 15, "the .deleted files removed")
    assert [p.name for p in directory.glob("*.log")] == ["00000000000000000010.log"]
    # The log goes on from where it was.
    assert _produce(client, "expiring", 0, [b"after"])["base_offset"] == 10
    assert _values(_fetch(client, "expiring", 0, 10)) == [b"after"]


def test_sigusr1_logs_every_task_and_where_it_waits(broker_factory):
    """A broker that answers nothing shows an idle event loop to a thread dump; SIGUSR1 logs each
    trio task's await stack instead, and the broker serves on."""
    import json
    import os
    import signal

    broker = broker_factory(process=True)
    os.kill(broker.process.pid, signal.SIGUSR1)

    def dumped():
        for line in broker.log_path.read_text().splitlines():
            if '"task_dump"' in line:
                return json.loads(line)["tasks"]
        return None

    tasks = wait_for(dumped, timeout_s=10, what="a task_dump line in the broker's log")
    # The listener's accept loop waits in trio's socket accept, named by its task and frames.
    assert any("serve_listeners" in name or any("accept" in frame for frame in frames) for name, frames in tasks.items())
    assert _create(broker.client(), "after-dump")["error_code"] == ErrorCode.NONE
