"""Our own clients (triolog.client, msgpack protocol) on a cluster, as Kafka's clients on its
Kafka listener: any bootstrap server will do, requests about a partition go to its leader, and a
leader that stops is followed to the new one without losing or duplicating an acknowledged record.

Real in-process brokers on one ZooKeeper chroot; nothing of ours is faked.
"""

from __future__ import annotations

import socket
import threading
import time

import pytest
import trio

from triolog.client import AdminClient, Consumer, NewTopic, Producer, TopicPartition
from triolog.client.aio import AsyncConsumer, AsyncProducer
from triolog.testing import run_cli

from .helpers import wait_until


@pytest.fixture
def brokers(start_brokers):
    # (no controlled shutdown: a stopped leader's partitions move only when its session ends)
    return start_brokers((1, 2, 3), "controlled.shutdown.enable=false")


def _bootstrap(brokers) -> list[str]:
    return [b.bootstrap for b in brokers.values()]


def _dead_address() -> str:
    """A local port nothing listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{sock.getsockname()[1]}"


def _create(bootstrap, topic: str, partitions: int, replication: int, **configs) -> dict[int, int]:
    """Create the topic; partition -> leader once every partition has one."""
    with AdminClient(bootstrap) as admin:
        admin.create_topics([NewTopic(topic, partitions, replication, configs)])

        def leaders():
            description = admin.describe_topics([topic])[topic]
            found = {p.partition: p.leader for p in description.partitions}
            return found if len(found) == partitions and all(node >= 0 for node in found.values()) else None

        found = wait_until(leaders)
    assert found, f"{topic} never got a leader for every partition"
    return found


def _leader(bootstrap, topic: str, not_node: int | None = None) -> int | None:
    with AdminClient(bootstrap) as admin:
        leader = admin.describe_topics([topic])[topic].partitions[0].leader
    return leader if leader >= 0 and leader != not_node else None


def _read_all(consumer: Consumer, count: int, timeout_s: float = 60.0) -> list[int]:
    """The values of the next ``count`` records the consumer polls (fewer if they do not come)."""
    seen: list[int] = []
    deadline = time.monotonic() + timeout_s
    while len(seen) < count and time.monotonic() < deadline:
        for records in consumer.poll(500).values():
            seen.extend(int(r.value) for r in records)
    return seen


def test_producer_writes_each_partition_to_its_own_leader(brokers):
    bootstrap = _bootstrap(brokers)
    # One replica each, placed over the three brokers: only a partition's leader has it at all.
    leaders = _create(bootstrap, "spread", 3, 1)
    assert sorted(leaders.values()) == [1, 2, 3]

    with Producer(bootstrap, acks="all", linger_ms=1) as producer:
        futures = [producer.send("spread", b"%d" % i, partition=i % 3) for i in range(300)]
        metadata = [f.get(30) for f in futures]
    assert [(m.partition, m.offset) for m in metadata] == [(i % 3, i // 3) for i in range(300)]

    # A consumer given one broker's address reads every partition, from each leader.
    with Consumer(brokers[1].bootstrap, auto_offset_reset="earliest") as consumer:
        for partition in range(3):
            tp = TopicPartition("spread", partition)
            consumer.assign([tp])
            assert _read_all(consumer, 100) == list(range(partition, 300, 3))
        # All three at once: each fetch is split over the three leaders, the answers merged.
        consumer.assign([TopicPartition("spread", p) for p in range(3)])
        for p in range(3):
            consumer.seek(TopicPartition("spread", p), 0)
        assert sorted(_read_all(consumer, 300)) == list(range(300))
        assert consumer.end_offsets([TopicPartition("spread", p) for p in range(3)]) == {
            TopicPartition("spread", p): 100 for p in range(3)
        }
    with AdminClient(brokers[2].bootstrap) as admin:  # delete_records goes to each leader too
        low = admin.delete_records({TopicPartition("spread", p): 10 for p in range(3)})
    assert low == {TopicPartition("spread", p): 10 for p in range(3)}


def test_a_leader_stops_mid_stream_nothing_is_lost_or_duplicated(brokers):
    bootstrap = _bootstrap(brokers)
    _create(bootstrap, "ledger", 1, 3, **{"min.insync.replicas": "2"})
    tp = TopicPartition("ledger", 0)
    leader = _leader(bootstrap, "ledger")
    assert leader is not None

    consumer = Consumer(bootstrap, auto_offset_reset="earliest")
    consumer.assign([tp])
    producer = Producer(
        bootstrap, acks="all", enable_idempotence=True, linger_ms=2, retry_backoff_ms=50, delivery_timeout_ms=60_000
    )
    try:
        futures = []
        for i in range(400):
            futures.append(producer.send("ledger", b"%d" % i, partition=0))
            if i == 199:
                producer.flush(30)
                assert all(f.exception() is None for f in futures)  # acknowledged before the stop
                assert _read_all(consumer, 200) == list(range(200))  # the consumer reads the old leader
                brokers.pop(leader).stop()
            time.sleep(0.001)
        producer.flush(60)
        offsets = [f.get(0).offset for f in futures]  # every record acknowledged, none failed
        assert offsets == list(range(400))  # once each, in order: the retries were not appended again
        new_leader = wait_until(lambda: _leader(_bootstrap(brokers), "ledger", not_node=leader))
        assert new_leader in brokers

        # The same consumer keeps reading, now from the new leader.
        assert _read_all(consumer, 200) == list(range(200, 400))
    finally:
        producer.close(10)
        consumer.close()

    with Consumer(_bootstrap(brokers), auto_offset_reset="earliest") as fresh:
        fresh.assign([tp])
        assert _read_all(fresh, 400) == list(range(400))
        assert fresh.poll(300) == {}  # and nothing after them


def test_a_dead_first_bootstrap_server_is_skipped(brokers):
    bootstrap = [_dead_address(), *_bootstrap(brokers)]
    _create(bootstrap, "skip", 3, 3)
    with Producer(bootstrap, linger_ms=1) as producer:
        for f in [producer.send("skip", b"%d" % i, partition=i % 3) for i in range(30)]:
            f.get(30)
    with Consumer(bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition("skip", 1)])
        assert _read_all(consumer, 10) == list(range(1, 30, 3))


def test_a_bootstrap_broker_that_stops_later_is_not_needed(brokers):
    """Only the first broker given; once the client knows the cluster, that broker may go."""
    first = brokers[1].bootstrap
    leaders = _create(_bootstrap(brokers), "moves", 1, 3, **{"min.insync.replicas": "2"})
    with Producer(first, linger_ms=1, retry_backoff_ms=50) as producer:
        producer.send("moves", b"0", partition=0).get(30)
        brokers.pop(1).stop()
        assert wait_until(lambda: _leader(_bootstrap(brokers), "moves", not_node=1) or leaders[0] != 1)
        assert producer.send("moves", b"1", partition=0).get(60).offset == 1


def test_trio_clients_follow_a_stopped_leader(brokers):
    bootstrap = _bootstrap(brokers)
    _create(bootstrap, "trio-ledger", 1, 3, **{"min.insync.replicas": "2"})
    tp = TopicPartition("trio-ledger", 0)
    leader = _leader(bootstrap, "trio-ledger")
    assert leader is not None

    async def read(consumer, count: int) -> list[int]:
        seen: list[int] = []
        with trio.move_on_after(60):
            while len(seen) < count:
                for records in (await consumer.poll(500)).values():
                    seen.extend(int(r.value) for r in records)
        return seen

    async def main():
        bootstrap_with_a_dead_first = [_dead_address(), *bootstrap]
        async with (
            AsyncProducer(
                bootstrap_with_a_dead_first, acks="all", enable_idempotence=True, linger_ms=2, retry_backoff_ms=50
            ) as producer,
            AsyncConsumer(bootstrap_with_a_dead_first, auto_offset_reset="earliest") as consumer,
        ):
            consumer.assign([tp])
            futures = []
            for i in range(300):
                futures.append(await producer.send("trio-ledger", b"%d" % i, partition=0))
                if i == 149:
                    await producer.flush()
                    assert [(await f).offset for f in futures] == list(range(150))
                    assert await read(consumer, 150) == list(range(150))
                    await trio.to_thread.run_sync(brokers.pop(leader).stop)
                await trio.sleep(0.001)
            with trio.fail_after(60):
                await producer.flush()
                offsets = [(await f).offset for f in futures]
            assert offsets == list(range(300))
            assert await read(consumer, 150) == list(range(150, 300))

    trio.run(main)


def test_the_cli_takes_a_list_of_bootstrap_servers(brokers):
    servers = ",".join([_dead_address(), *_bootstrap(brokers)])
    created = run_cli(
        "topics", "--bootstrap-server", servers, "--create", "--topic", "lines",
        "--partitions", "3", "--replication-factor", "3",
    )  # fmt: skip
    assert created.code == 0, created.stderr
    described = run_cli("topics", "--bootstrap-server", servers, "--describe", "--topic", "lines")
    assert described.code == 0 and "ReplicationFactor: 3" in described.out, described.stderr
    # Keyless lines spread over the partitions, each written to its own leader.
    produced = run_cli("produce", "--bootstrap-server", servers, "--topic", "lines", stdin=b"a\nb\nc\nd\n")
    assert produced.code == 0, produced.stderr
    consumed = run_cli(
        "consume", "--bootstrap-server", servers, "--topic", "lines",
        "--from-beginning", "--max-messages", "4", "--timeout-ms", "20000",
    )  # fmt: skip
    assert consumed.code == 0, consumed.stderr
    assert sorted(consumed.out.split()) == ["a", "b", "c", "d"]


def test_a_leader_stops_with_batches_in_flight(brokers):
    """No flush before the stop: batches are written to the leader as it goes, their answers lost
    with it; the idempotent producer resends them to the new leader, which keeps each once."""
    bootstrap = _bootstrap(brokers)
    _create(bootstrap, "inflight", 1, 3, **{"min.insync.replicas": "2"})
    leader = _leader(bootstrap, "inflight")
    assert leader is not None
    stopping = threading.Thread(target=brokers[leader].stop)
    with Producer(bootstrap, acks="all", linger_ms=0, retry_backoff_ms=50) as producer:
        futures = []
        for i in range(600):
            futures.append(producer.send("inflight", b"%d" % i, partition=0))
            if i == 300:
                stopping.start()
            time.sleep(0.0005)
        producer.flush(60)
        assert [f.get(0).offset for f in futures] == list(range(600))
        assert producer.metrics()["batch-retry-total"] > 0  # (the stop did catch batches on their way)
    stopping.join()
    del brokers[leader]
    with Consumer(_bootstrap(brokers), auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition("inflight", 0)])
        assert _read_all(consumer, 600) == list(range(600))
        assert consumer.poll(300) == {}


def test_the_cli_creates_a_topic_with_a_replica_assignment(brokers):
    servers = ",".join(_bootstrap(brokers))
    created = run_cli(
        "topics", "--bootstrap-server", servers, "--create", "--topic", "placed",
        "--replica-assignment", "3:1,1:2,2:3",
    )  # fmt: skip
    assert created.code == 0, created.stderr
    with AdminClient(servers) as admin:

        def led():
            description = admin.describe_topics(["placed"])["placed"]
            return description if all(p.leader >= 0 for p in description.partitions) else None

        described = wait_until(led)
    assert described, "the placed topic never got its leaders"
    assert [p.replicas for p in described.partitions] == [(3, 1), (1, 2), (2, 3)]
    assert [p.leader for p in described.partitions] == [3, 1, 2]  # the preferred replica first
    refused = run_cli(
        "topics", "--bootstrap-server", servers, "--create", "--topic", "misplaced", "--replica-assignment", "1:1",
    )  # fmt: skip
    assert refused.code != 0 and "INVALID_REPLICA_ASSIGNMENT" in refused.stderr
    mixed = run_cli(
        "topics", "--bootstrap-server", servers, "--create", "--topic", "x",
        "--replica-assignment", "1:2", "--partitions", "2",
    )  # fmt: skip
    assert mixed.code == 2 and "--replica-assignment" in mixed.stderr


def test_acks_all_batches_near_64_kib_are_not_held_by_the_leader(brokers):
    # On loopback a TCP segment carries 64 KiB, and the leader sent replica fetch responses up to
    # 64 KiB corked: one the follower's window could not take at once filled the send buffer, and
    # the leader waited for room that only the cork's 200 ms ceiling made. Every acks=all write of
    # such a batch waited 200 ms (3,000 records/s); about 7 ms each otherwise.
    bootstrap = _bootstrap(brokers)
    _create(bootstrap, "near-64k", 1, 3, **{"min.insync.replicas": "2"})
    value = b"v" * 100
    with Producer(bootstrap, acks="all", linger_ms=5, batch_size=65536) as producer:
        producer.send("near-64k", value, partition=0).get(timeout=30)  # metadata, connections
        started = time.monotonic()
        for _ in range(12_000):  # about twenty 64 KiB batches
            producer.send("near-64k", value, partition=0)
        producer.flush()
        took = time.monotonic() - started
    assert took < 1.0, f"12,000 records in 64 KiB batches took {took:.2f} s (0.15 s here; 2.6 s when held)"
