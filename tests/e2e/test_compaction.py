"""Log compaction on the real broker: a consumer reading a compacted topic from the beginning sees
every key's latest value, offsets only increase, and tombstoned keys disappear after
delete.retention.ms."""

from __future__ import annotations

import random

from triolog.client import AdminClient, Consumer, NewTopic, Producer, TopicPartition

from tests.e2e.reading import read_partition
from tests.waiting import wait_for


def test_compacted_topic_keeps_the_latest_value_per_key_with_increasing_offsets(broker_factory, tmp_path):
    broker = broker_factory("log.cleaner.backoff.ms=100", "log.cleaner.threads=1")
    bootstrap = f"127.0.0.1:{broker.port}"
    with AdminClient(bootstrap) as admin:
        admin.create_topics([NewTopic("latest", num_partitions=1, configs={
            "cleanup.policy": "compact", "segment.bytes": "4096", "min.cleanable.dirty.ratio": "0.01",
            "delete.retention.ms": "0", "min.compaction.lag.ms": "0",
        })])
    rng = random.Random(7)
    expected: dict[bytes, bytes | None] = {}
    # Batches must fit in a 4 KiB segment (a larger batch is refused, as Kafka refuses it).
    with Producer(bootstrap, acks=-1, linger_ms=2, batch_size=1024) as producer:
        futures = []
        for i in range(3000):
            key = b"key-%03d" % rng.randrange(100)
            value = None if rng.random() < 0.05 else b"value-%d" % i
            futures.append(producer.send("latest", value, key=key, partition=0))
            expected[key] = value
        producer.flush()
    assert [f.result().offset for f in futures] == list(range(3000))
    produced = 3000
    directory = tmp_path / "data" / "latest-0"

    def active_base() -> int:
        return max(int(p.stem) for p in directory.glob("*.log"))

    # The log rolled many times (the cleaner may already have merged the old segments, so their
    # files are not counted: the active segment's base offset says how much lies below it).
    assert active_base() > produced // 2

    def compacted():
        # Done when everything below the active segment holds one record per key (the cleaner
        # may need more than one round while the last segments roll).
        records = read_partition(bootstrap, "latest")
        below_active = [r.key for r in records if r.offset < active_base()]
        return records if len(below_active) == len(set(below_active)) and len(records) < produced // 5 else None

    # The cleaner's worker runs at nice 19: on a busy CI core it may take a while.
    records = wait_for(compacted, 90, "one record per key below the active segment", interval_s=0.2)
    offsets = [r.offset for r in records]
    assert offsets == sorted(set(offsets))  # strictly increasing: offsets are never rewritten
    latest = {}
    for record in records:
        latest[record.key] = record.value
    # Every live key's latest value survives; keys whose last write was a tombstone are gone
    # (delete.retention.ms=0), or at most still a tombstone in the active segment.
    live = {k: v for k, v in expected.items() if v is not None}
    assert {k: v for k, v in latest.items() if v is not None} == live
    # The active segment is never cleaned, but everything before it ended with one record per key.
    assert active_base() > 0
    # The log end offset did not move: compaction removes records, never renumbers them.
    tp = TopicPartition("latest", 0)
    with Consumer(bootstrap) as consumer:
        assert consumer.end_offsets([tp])[tp] == produced
