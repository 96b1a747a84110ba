"""Reading a compacted topic: offsets with gaps are normal, never data loss.

The broker's own log cleaner compacts the topic (small segments, a low dirty ratio, a short
cleaner backoff); the test waits until every segment below the active one holds only the newest
record of each key, as a consumer reading the topic sees it. Then a transaction marker (a control
batch, which readers skip) is appended to the active segment as a Kafka broker would have written
it (clients cannot send control batches), and the broker is started again on the directory.
"""

from __future__ import annotations

import json

import pytest

from triolog.client import AdminClient, Consumer, NewTopic, Producer, TopicPartition
from triolog.protocol.records import ControlRecordType, encode_end_txn_marker, iter_batches
from tests.e2e.broker_process import BrokerProcess
from tests.waiting import wait_for

from .helpers import keyed, reader

TOPIC_CONFIGS = {"cleanup.policy": "compact", "segment.bytes": "1024", "min.cleanable.dirty.ratio": "0.01",
                 "min.compaction.lag.ms": "0"}


def _read_all(bootstrap: str, topic: str) -> dict[int, tuple[bytes, bytes]]:
    """offset -> (key, value) of every record of partition 0, through the broker."""
    tp = TopicPartition(topic, 0)
    with Consumer(bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([tp])
        end = consumer.end_offsets([tp])[tp]
        consumer.seek_to_beginning(tp)
        out = {}
        while consumer.position(tp) < end:
            out.update((r.offset, (r.key, r.value)) for r in consumer.poll(1000).get(tp, []))
        return out


def _active_base(partition_dir) -> int:
    return max(int(p.stem) for p in partition_dir.glob("*.log"))


@pytest.fixture
def compacted(tmp_path, topic):
    """(bootstrap, survivors: offset -> (key, value)) of a topic compacted by its own broker."""
    broker = BrokerProcess(tmp_path / "data", ("log.cleaner.backoff.ms=100",)).start()
    partition_dir = tmp_path / "data" / f"{topic}-0"
    try:
        bootstrap = f"127.0.0.1:{broker.port}"
        with AdminClient(bootstrap) as admin:
            admin.create_topics([NewTopic(topic, 1, configs=TOPIC_CONFIGS)])
        sent: dict[int, tuple[bytes, bytes]] = {}
        with Producer(bootstrap, batch_size=400) as producer:  # several batches, 7 keys updated often
            futures = []
            for i in range(60):
                key, value = f"user-{i % 7}".encode(), f"value {i}".encode()
                futures.append((key, value, producer.send(topic, value, key=key, partition=0)))
            for key, value, future in futures:
                sent[future.get(30).offset] = (key, value)
        assert sorted(sent) == list(range(60))
        active = _active_base(partition_dir)  # no more appends: the active segment stays
        assert active > 0
        # What the cleaner must leave: below the active segment the newest record of each key
        # there; the active segment (never cleaned) as written.
        newest_below = {key: offset for offset, (key, _) in sorted(sent.items()) if offset < active}
        survivors = {o: kv for o, kv in sent.items() if o >= active or newest_below[kv[0]] == o}
        # The cleaner's worker runs at nice 19: on a busy CI core it may take a while.
        wait_for(lambda: _read_all(bootstrap, topic) == survivors, 90, "the broker's cleaner to compact the topic",
                 interval_s=0.2)
        broker.stop()

        segment = partition_dir / f"{active:020d}.log"
        last = list(iter_batches(segment.read_bytes()))[-1]
        with open(segment, "ab") as f:
            f.write(encode_end_txn_marker(1000, 0, ControlRecordType.COMMIT, 0, last.next_offset, last.max_timestamp))
        for suffix in (".index", ".timeindex"):  # rebuilt by the loader, with the marker
            (partition_dir / (segment.stem + suffix)).unlink(missing_ok=True)
        broker.start()
        yield f"127.0.0.1:{broker.port}", survivors
    finally:
        broker.kill()


def test_a_compacted_topic_reads_with_offset_gaps_and_no_data_loss(spark, compacted, topic):
    bootstrap, survivors = compacted
    assert len(survivors) < 60 and max(survivors) == 59  # the cleaner really left gaps
    with AdminClient(bootstrap) as admin:  # the marker at offset 60 is the log's last batch
        assert admin.list_offsets({(topic, 0): -1})[(topic, 0)].offset == 61

    rows = reader(spark, bootstrap, subscribe=topic).load().collect()
    assert keyed(rows) == {(0, offset): kv for offset, kv in survivors.items()}

    # starting inside a gap is not data loss, even with failOnDataLoss=true (the default)
    missing = min(set(range(60)) - set(survivors))
    rows = reader(spark, bootstrap, subscribe=topic, startingOffsets=json.dumps({topic: {"0": missing}})).load().collect()
    assert keyed(rows) == {(0, o): kv for o, kv in survivors.items() if o > missing}
