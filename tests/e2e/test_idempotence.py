"""Exactly-once appends by the idempotent producer, against the real broker process, with produce
responses lost on the way (tests/e2e/fault_proxy.py) so that the client retries batches the
broker already appended; also across a kill -9 and a clean restart of the broker between a
batch's first attempt and its retry (the broker's producer state then comes from its .snapshot
files and the log after them)."""

from __future__ import annotations

import time
from collections import defaultdict

import pytest

from tests.e2e.fault_proxy import FaultProxy
from tests.waiting import wait_for
from triolog.client import AdminClient, Consumer, NewTopic, Producer

PARTITIONS = 4


def _create(port: int, topic: str, partitions: int = PARTITIONS) -> None:
    with AdminClient(f"127.0.0.1:{port}") as admin:
        admin.create_topics([NewTopic(topic, partitions)])


def _consume(port: int, topic: str, expected: int, partitions: int = PARTITIONS, timeout_s: float = 60.0):
    """{partition: [(offset, value)]} of every record, read straight from the broker."""
    out: dict[int, list[tuple[int, bytes]]] = defaultdict(list)
    count = 0
    with Consumer(f"127.0.0.1:{port}", auto_offset_reset="earliest", fetch_max_wait_ms=100) as consumer:
        consumer.assign([(topic, p) for p in range(partitions)])
        deadline = time.monotonic() + timeout_s
        while count < expected and time.monotonic() < deadline:
            for tp, records in consumer.poll(200).items():
                for record in records:
                    out[tp.partition].append((record.offset, record.value))
                    count += 1
        # Anything beyond the expected records (a duplicate) would show up within a short wait.
        for tp, records in consumer.poll(300).items():
            out[tp.partition].extend((r.offset, r.value) for r in records)
    return out


def _values(n: int) -> list[tuple[int, bytes]]:
    """(partition, value) of record i: a per-partition sequence number in every value."""
    return [(i % PARTITIONS, b"p%d-%06d-" % (i % PARTITIONS, i // PARTITIONS) + b"x" * 40) for i in range(n)]


def _assert_exactly_once_in_order(log, sent, futures, unknown_offsets_allowed: bool = False) -> int:
    """Returns how many futures had offset -1 (only allowed with ``unknown_offsets_allowed``)."""
    by_partition: dict[int, list[bytes]] = defaultdict(list)
    for partition, value in sent:
        by_partition[partition].append(value)
    for partition in range(PARTITIONS):
        stored = log.get(partition, [])
        assert [value for _, value in stored] == by_partition[partition], f"partition {partition}"
        assert [offset for offset, _ in stored] == list(range(len(stored)))
    # Each record's future holds its ORIGINAL offset, also when a retry was answered as a duplicate.
    positions: dict[int, int] = defaultdict(int)
    unknown = 0
    for (partition, _), future in zip(sent, futures):
        metadata = future.get(0)
        if metadata.offset == -1 and unknown_offsets_allowed:
            unknown += 1
        else:
            assert (metadata.partition, metadata.offset) == (partition, positions[partition])
        positions[partition] += 1
    return unknown


def _producer(port: int, **overrides) -> Producer:
    options = dict(linger_ms=2, batch_size=1024, retry_backoff_ms=20, delivery_timeout_ms=120_000,
                   request_timeout_ms=10_000)
    options.update(overrides)
    return Producer(f"127.0.0.1:{port}", **options)


def test_lost_responses_are_retried_hundreds_of_times_and_stored_once_in_order(broker_factory):
    broker = broker_factory()
    topic = "idempotent-lost-responses"
    _create(broker.port, topic)
    sent = _values(20_000)
    with FaultProxy(broker.port, drop_every=3) as proxy:
        with _producer(proxy.port) as producer:
            assert producer.config.enable_idempotence and producer.config.max_in_flight_requests_per_connection == 5
            futures = [producer.send(topic, value, partition=partition) for partition, value in sent]
            producer.flush(120)
            counters = producer.metrics()
        assert proxy.produce_responses_dropped >= 100
    # Every lost response made the client retry what it had outstanding: hundreds of batches.
    assert counters["batch-retry-total"] >= proxy.produce_responses_dropped >= 100
    assert counters["record-retry-total"] >= 1000
    assert counters["producer-id"] >= 0
    log = _consume(broker.port, topic, len(sent))
    _assert_exactly_once_in_order(log, sent, futures)


@pytest.mark.parametrize("restart", ["kill-9", "clean"])
def test_a_retry_whose_first_attempt_landed_before_a_restart_gets_the_original_offsets(broker_factory, restart):
    broker = broker_factory(process=restart == "kill-9")
    topic = f"idempotent-restart-{restart}"
    _create(broker.port, topic, partitions=1)
    with FaultProxy(broker.port, drop_every=1) as proxy:
        with Producer(f"127.0.0.1:{proxy.port}", linger_ms=0, retry_backoff_ms=1500,
                      delivery_timeout_ms=60_000, request_timeout_ms=5_000) as producer:
            before = producer.send(topic, b"before", partition=0)
            wait_for(lambda: proxy.produce_responses_dropped == 1, 20, "the first response to be lost")
            proxy.dropping = False
            # The batch is in the log (acks=all: fsynced), its response lost; the client retries
            # in 1.5 s. Restart the broker before that.
            if restart == "kill-9":
                broker.kill()
            else:
                assert broker.stop() == 0
                snapshots = list((broker.data_dir / f"{topic}-0").glob("*.snapshot"))
                assert snapshots, "a clean shutdown writes the producer state snapshot"
            assert not before.done()
            broker.start()
            assert before.get(60).offset == 0  # answered from the recovered producer state
            after = producer.send(topic, b"after", partition=0)
            assert after.get(30).offset == 1
            assert producer.metrics()["batch-retry-total"] >= 1
    log = _consume(broker.port, topic, 2, partitions=1)
    assert log[0] == [(0, b"before"), (1, b"after")]


def test_stored_once_in_order_across_broker_kills_and_restarts_under_load(broker_factory):
    broker = broker_factory(process=True)  # kill -9
    topic = "idempotent-restarts-under-load"
    _create(broker.port, topic)
    sent = _values(8_000)
    chunks = [sent[i:i + 2_000] for i in range(0, len(sent), 2_000)]
    with FaultProxy(broker.port, drop_every=9) as proxy:
        with _producer(proxy.port) as producer:
            futures: list = []
            # Each chunk is queued at once, and the broker goes down while its batches are in
            # flight (some appended, their responses lost or never sent), then comes back.
            for chunk, stop in zip(chunks, ("kill-9", "clean", "kill-9", None)):
                responses = proxy.produce_responses
                futures += [producer.send(topic, value, partition=partition) for partition, value in chunk]
                if stop is None:
                    break
                wait_for(lambda: proxy.produce_responses >= responses + 10, 60, "produce traffic")
                if stop == "kill-9":
                    broker.kill()
                else:
                    broker.stop()
                broker.start()
            producer.flush(120)
            counters = producer.metrics()
    assert counters["batch-retry-total"] >= 10
    log = _consume(broker.port, topic, len(sent))
    # A .snapshot keeps only each producer's LAST batch (Kafka's format): after a clean restart a
    # retry of an older in-flight batch is answered DUPLICATE_SEQUENCE_NUMBER, and its records
    # complete with offset -1 (unknown), as Kafka's producer reports them. Still stored once.
    unknown = _assert_exactly_once_in_order(log, sent, futures, unknown_offsets_allowed=True)
    assert unknown < len(sent) // 10
