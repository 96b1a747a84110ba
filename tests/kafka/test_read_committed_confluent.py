"""confluent-kafka's consumer with isolation.level=read_committed against the Kafka listener:
it reads up to the last stable offset and skips aborted transactions by the broker's
aborted_transactions list and ABORT markers, while read_uncommitted sees everything. The
transactions are written as the coordinator will write them: transactional batches from an
idempotent producer id and COMMIT/ABORT markers, both straight into the partition's log."""

from __future__ import annotations

import time

from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka import TopicPartition as KafkaTopicPartition

from triolog.protocol import messages as m
from triolog.protocol.records import build_batch


def _produce(client, topic: str, values, *, pid: int = -1, sequence: int = -1, transactional: bool = False,
             log=None) -> None:
    now = int(time.time() * 1000)
    batch = build_batch([(None, v, now, ()) for v in values], producer_id=pid, producer_epoch=0 if pid >= 0 else -1,
                        base_sequence=sequence, is_transactional=transactional)
    if transactional:  # (straight into the log, as its markers: no coordinator to verify them with)
        log.append_as_leader(batch)
        return
    doc = client.call(m.ProduceRequest(id=client.next_id(), acks=1, timeout_ms=30_000, topics=(
        m.ProduceTopic(name=topic, partitions=(m.ProducePartition(partition=0, records=batch),)),)))
    assert doc["topics"][0]["partitions"][0]["error_code"] == 0, doc


def _consume(bootstrap: str, topic: str, isolation: str, expected: int) -> list[bytes]:
    consumer = KafkaConsumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-{isolation}",
                              "enable.auto.commit": False, "auto.offset.reset": "earliest",
                              "isolation.level": isolation, "fetch.wait.max.ms": 100})
    try:
        consumer.assign([KafkaTopicPartition(topic, 0, 0)])
        out: list[bytes] = []
        idle = 0
        while idle < (3 if len(out) >= expected else 30):
            batch = consumer.consume(1000, 0.5)
            idle = 0 if batch else idle + 1
            for message in batch:
                assert message.error() is None, message.error()
                out.append(message.value())
        return out
    finally:
        consumer.close()


def test_a_read_committed_consumer_skips_aborted_and_open_transactions(kafka_broker, bootstrap, topic):
    client = kafka_broker.client()
    assert client.call(m.CreateTopicsRequest(id=client.next_id(), topics=(
        m.NewTopic(name=topic, num_partitions=1, replication_factor=1),)))["topics"][0]["error_code"] == 0
    log = kafka_broker.server.log_manager.get_log(topic, 0)
    pids = [client.call(m.InitProducerIdRequest(id=client.next_id()))["producer_id"] for _ in range(3)]
    a, b, c = pids
    sequences = dict.fromkeys(pids, 0)
    expected_committed: list[bytes] = []
    everything: list[bytes] = []
    for round_ in range(20):
        plain = [b"plain-%d" % round_]
        _produce(client, topic, plain)
        expected_committed += plain
        everything += plain
        for pid, commits in ((a, round_ % 3 != 0), (b, round_ % 2 == 0)):
            values = [b"%d-%d-%d" % (pid, round_, i) for i in range(3)]
            _produce(client, topic, values, pid=pid, sequence=sequences[pid], transactional=True, log=log)
            sequences[pid] += 3
            everything += values
            if commits:
                expected_committed += values
        log.append_end_txn_marker(a, 0, 0, committed=round_ % 3 != 0, leader_epoch=0)
        log.append_end_txn_marker(b, 0, 0, committed=round_ % 2 == 0, leader_epoch=0)
    _produce(client, topic, [b"open"], pid=c, sequence=0, transactional=True, log=log)  # holds the LSO
    _produce(client, topic, [b"after-open"])
    everything += [b"open", b"after-open"]
    client.close()
    assert log.last_stable_offset < log.high_watermark
    committed = _consume(bootstrap, topic, "read_committed", len(expected_committed))
    assert committed == expected_committed
    uncommitted = _consume(bootstrap, topic, "read_uncommitted", len(everything))
    assert uncommitted == everything
    # Once the open transaction commits, read_committed reaches the end.
    log.append_end_txn_marker(c, 0, 0, committed=True, leader_epoch=0)
    assert _consume(bootstrap, topic, "read_committed", len(expected_committed) + 2) == \
        expected_committed + [b"open", b"after-open"]
