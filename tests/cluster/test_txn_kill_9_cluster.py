"""kill -9 of the transaction coordinator's broker, as a process (three broker subprocesses on
one ZooKeeper ensemble; __transaction_state replicated three ways, min.insync.replicas 2): the
controller elects a new leader of the id's __transaction_state partition, which loads the
transactions from its replica; a producer whose commit was under way commits there, a
transaction whose producer died with the broker is aborted by the new coordinator's timeout,
and every partition ends alike: all of a transaction or none of it."""

from __future__ import annotations


import pytest

from triolog.client import AdminClient, Consumer, NewTopic, Producer

from .helpers import broker_processes, read_committed, wait_until

SESSION_MS = 3000
PARTITIONS = 3


@pytest.fixture
def brokers(tmp_path, zk_connect):
    overrides = ("transaction.state.log.num.partitions=1",
                 "transaction.abort.timed.out.transaction.cleanup.interval.ms=500")
    with broker_processes(tmp_path, zk_connect, SESSION_MS, overrides=overrides) as started:
        yield started


def test_kill_9_of_the_coordinators_broker_leaves_every_transaction_whole(brokers):
    bootstrap = [f"127.0.0.1:{b.port}" for b in brokers.values()]
    with AdminClient(bootstrap) as admin:
        admin.create_topics([NewTopic("t", PARTITIONS, 3, configs={"min.insync.replicas": "2"})])
        wait_until(lambda: all(p.leader >= 0 for p in admin.describe_topics(["t"])["t"].partitions), 30)
    committing = Producer(bootstrap, transactional_id="committing", linger_ms=1, max_block_ms=120_000)
    abandoned = Producer(bootstrap, transactional_id="abandoned", linger_ms=1, transaction_timeout_ms=3000)
    try:
        committing.init_transactions()
        abandoned.init_transactions()
        committing.begin_transaction()
        for n in range(9):
            committing.send("t", b"first-%d" % n, partition=n % PARTITIONS)
        committing.commit_transaction()

        with AdminClient(bootstrap) as admin:
            coordinator = admin.describe_topics(["__transaction_state"])["__transaction_state"].partitions[0].leader
        assert coordinator in brokers
        committing.begin_transaction()
        abandoned.begin_transaction()
        for n in range(9):
            committing.send("t", b"second-%d" % n, partition=n % PARTITIONS).get(30)
            abandoned.send("t", b"abandoned-%d" % n, partition=n % PARTITIONS).get(30)
        brokers[coordinator].kill()  # kill -9, both transactions open
        committing.commit_transaction()  # found again on the new coordinator, once it loaded
    finally:
        committing.close(5)
        abandoned.close(1)  # (its transaction stays open: its timeout ends it)

    survivors = [f"127.0.0.1:{b.port}" for node, b in brokers.items() if node != coordinator]
    values = read_committed(survivors, "t", PARTITIONS, 18)
    expected = [b"first-%d" % n for n in range(9)] + [b"second-%d" % n for n in range(9)]
    assert sorted(values) == sorted(expected), "the commit whole, the abandoned transaction nowhere"
    with AdminClient(survivors) as admin:
        def states():
            return {tid: d.state for tid, d in admin.describe_transactions(["committing", "abandoned"]).items()}

        # (Complete* follows the markers; the abandoned one waits for its timeout on the new coordinator)
        assert wait_until(lambda: states() == {"committing": "CompleteCommit", "abandoned": "CompleteAbort"}, 30), \
            states()
        with Consumer(survivors, isolation_level="read_committed") as consumer:
            ends = consumer.end_offsets([("t", p) for p in range(PARTITIONS)])
        with Consumer(survivors) as consumer:
            high = consumer.end_offsets([("t", p) for p in range(PARTITIONS)])
        assert ends == high, "no transaction left open on any partition"
