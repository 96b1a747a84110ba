"""Reading a compacted topic: offsets with gaps are normal, never data loss.

The broker's log cleaner is not there yet, so the test leaves on disk exactly what it would: the
broker is stopped, its segment rewritten keeping only the newest record of each key in batches
that keep their offset span (``encode_batch(..., last_offset_delta=...)``, as the cleaner
writes them), a transaction marker (a control batch, which readers skip) appended, and the
broker started again on the same directory, rebuilding its indexes.
"""

from __future__ import annotations

import json

import pytest

from client import AdminClient, NewTopic, Producer
from protocol.record_batch import TimestampType
from protocol.records import ControlRecordType, encode_batch, encode_end_txn_marker, iter_batches
from tests.e2e.broker_process import BrokerProcess

from .helpers import keyed, reader


def compact_on_disk(partition_dir) -> dict[int, tuple[bytes, bytes]]:
    """Keep the newest record per key; returns offset -> (key, value) of the survivors."""
    segment = partition_dir / "00000000000000000000.log"
    batches = list(iter_batches(segment.read_bytes()))
    newest = {r.key: r.offset for b in batches for r in b.records}
    kept_offsets = set(newest.values())
    out = bytearray()
    survivors = {}
    for batch in batches:
        kept = [r for r in batch.records if r.offset in kept_offsets]
        if not kept:
            continue  # a batch left empty goes (the log's last batch always keeps its last record)
        survivors.update((r.offset, (r.key, r.value)) for r in kept)
        out += encode_batch(kept, base_offset=batch.base_offset, last_offset_delta=batch.header.last_offset_delta,
                            timestamp_type=TimestampType(batch.timestamp_type), max_timestamp=batch.max_timestamp)
    end = batches[-1].next_offset
    out += encode_end_txn_marker(1000, 0, ControlRecordType.COMMIT, 0, end, batches[-1].max_timestamp)
    segment.write_bytes(bytes(out))
    for suffix in (".index", ".timeindex"):
        (partition_dir / ("00000000000000000000" + suffix)).unlink(missing_ok=True)
    return survivors


@pytest.fixture
def compacted(tmp_path, topic):
    """(bootstrap, survivors, log end offset) of a compacted topic with gaps, on its own broker."""
    broker = BrokerProcess(tmp_path / "data").start()
    try:
        bootstrap = f"127.0.0.1:{broker.port}"
        with AdminClient(bootstrap) as admin:
            admin.create_topics([NewTopic(topic, 1, configs={"cleanup.policy": "compact"})])
        with Producer(bootstrap, batch_size=400) as producer:  # several batches, 7 keys updated often
            for i in range(60):
                producer.send(topic, f"value {i}".encode(), key=f"user-{i % 7}".encode(), partition=0)
        broker.stop()
        survivors = compact_on_disk(tmp_path / "data" / f"{topic}-0")
        broker.start()
        yield f"127.0.0.1:{broker.port}", survivors
    finally:
        broker.kill()


def test_a_compacted_topic_reads_with_offset_gaps_and_no_data_loss(spark, compacted, topic):
    bootstrap, survivors = compacted
    assert len(survivors) == 7  # the newest record of each key: the rewrite really left gaps
    with AdminClient(bootstrap) as admin:  # the marker at offset 60 is the log's last batch
        assert admin.list_offsets({(topic, 0): -1})[(topic, 0)].offset == 61

    rows = reader(spark, bootstrap, subscribe=topic).load().collect()
    assert keyed(rows) == {(0, offset): kv for offset, kv in survivors.items()}

    # starting inside a gap is not data loss, even with failOnDataLoss=true (the default)
    missing = min(set(range(60)) - set(survivors))
    rows = reader(spark, bootstrap, subscribe=topic, startingOffsets=json.dumps({topic: {"0": missing}})).load().collect()
    assert keyed(rows) == {(0, o): kv for o, kv in survivors.items() if o > missing}
