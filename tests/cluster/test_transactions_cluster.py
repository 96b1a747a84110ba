"""Transactions on a cluster: the coordinator of a transactional id is the leader of its
__transaction_state partition (replicated, min.insync.replicas 2), its markers reach partition
leaders on other brokers, and when the coordinator's broker stops mid-transaction the next
leader loads the id's state and the producer commits there.

Real in-process brokers on one ZooKeeper chroot; our own client."""

from __future__ import annotations

import time

from triolog.client import AdminClient, Consumer, NewTopic, Producer

from .helpers import wait_until


def _read_committed(bootstrap, topic: str, partitions: int, expected: int) -> list[bytes]:
    with Consumer(bootstrap, auto_offset_reset="earliest", isolation_level="read_committed",
                  fetch_max_wait_ms=50) as consumer:
        consumer.assign([(topic, p) for p in range(partitions)])
        values: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(values) < expected and time.monotonic() < deadline:
            values += [r.value for records in consumer.poll(200).values() for r in records]
        values += [r.value for records in consumer.poll(500).values() for r in records]
        return values


def test_a_transaction_spans_brokers_and_survives_its_coordinators_loss(start_brokers):
    brokers = start_brokers((1, 2, 3), "controlled.shutdown.enable=false",
                            "transaction.state.log.num.partitions=1")
    bootstrap = [b.bootstrap for b in brokers.values()]
    with AdminClient(bootstrap) as admin:
        admin.create_topics([NewTopic("t", replica_assignment=((1, 2, 3), (2, 3, 1), (3, 1, 2)))])
        wait_until(lambda: all(p.leader >= 0 for p in admin.describe_topics(["t"])["t"].partitions))
    with Producer(bootstrap, transactional_id="tx", linger_ms=1) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        for n in range(9):
            producer.send("t", b"first-%d" % n, partition=n % 3)
        producer.commit_transaction()
        assert sorted(_read_committed(bootstrap, "t", 3, 9)) == sorted(b"first-%d" % n for n in range(9))

        # The coordinator is the leader of __transaction_state-0; it stops mid-transaction.
        with AdminClient(bootstrap) as admin:
            coordinator = admin.describe_topics(["__transaction_state"])["__transaction_state"].partitions[0].leader
        assert coordinator in brokers
        producer.begin_transaction()
        for n in range(9):
            producer.send("t", b"second-%d" % n, partition=n % 3).get(30)
        brokers[coordinator].stop()
        producer.commit_transaction()  # (NOT_COORDINATOR: found again, on the new leader)
        survivors = [b.bootstrap for node, b in brokers.items() if node != coordinator]
        values = _read_committed(survivors, "t", 3, 18)
        assert sorted(values) == sorted([b"first-%d" % n for n in range(9)] + [b"second-%d" % n for n in range(9)])
