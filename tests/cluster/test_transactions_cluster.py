"""Transactions on a cluster: the coordinator of a transactional id is the leader of its
__transaction_state partition (replicated, min.insync.replicas 2), its markers reach partition
leaders on other brokers, and when the coordinator's broker stops mid-transaction the next
leader loads the id's state and the producer commits there.

Real in-process brokers on one ZooKeeper chroot; our own client."""

from __future__ import annotations

import time

from triolog.client import AdminClient, NewTopic, Producer

from .helpers import read_committed, wait_until


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
        assert sorted(read_committed(bootstrap, "t", 3, 9)) == sorted(b"first-%d" % n for n in range(9))

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
        values = read_committed(survivors, "t", 3, 18)
        assert sorted(values) == sorted([b"first-%d" % n for n in range(9)] + [b"second-%d" % n for n in range(9)])


def test_a_partition_leader_verifies_a_batch_with_a_coordinator_on_another_broker(start_brokers):
    """KIP-890 part 1 across brokers: the leader of a partition asks the transactional id's
    coordinator, another broker, over the broker channel (AddPartitionsToTxn v4, VerifyOnly)
    before a producer's first batch there; a partition never added is refused."""
    import trio

    from triolog.protocol import messages as m
    from triolog.protocol.errors import ErrorCode
    from triolog.protocol.records import build_batch

    from tests.server.inprocess import Client

    brokers = start_brokers((1, 2), "transaction.state.log.num.partitions=1",
                            "transaction.state.log.replication.factor=2", "transaction.state.log.min.isr=1")
    bootstrap = [b.bootstrap for b in brokers.values()]
    with Producer(bootstrap, transactional_id="tx", linger_ms=1) as producer:
        producer.init_transactions()  # (creates __transaction_state)
    with AdminClient(bootstrap) as admin:
        coordinator = admin.describe_topics(["__transaction_state"])["__transaction_state"].partitions[0].leader
        other = next(node for node in brokers if node != coordinator)
        admin.create_topics([NewTopic("t", replica_assignment=((other,), (other,)))])
        wait_until(lambda: all(p.leader == other for p in admin.describe_topics(["t"])["t"].partitions))

    async def exchange(broker, *requests_of):
        client = await Client.connect(int(broker.bootstrap.rsplit(":", 1)[1]))
        try:
            return [await client.call(request_of(client)) for request_of in requests_of]
        finally:
            await client.aclose()

    def produce(client, partition, pid, epoch):
        batch = build_batch([(None, b"v", int(time.time() * 1000), ())], producer_id=pid, producer_epoch=epoch,
                            base_sequence=0, is_transactional=True)
        return m.ProduceRequest(id=client.next_id(), acks=-1, timeout_ms=10_000, transactional_id="tx", topics=(
            m.ProduceTopic(name="t", partitions=(m.ProducePartition(partition=partition, records=batch),)),))

    (init,) = trio.run(exchange, brokers[coordinator], lambda c: m.InitProducerIdRequest(
        id=c.next_id(), transactional_id="tx", transaction_timeout_ms=60_000))
    pid, epoch = init["producer_id"], init["producer_epoch"]
    (added,) = trio.run(exchange, brokers[coordinator], lambda c: m.AddPartitionsToTxnRequest(
        id=c.next_id(), transactional_id="tx", producer_id=pid, producer_epoch=epoch,
        topics=(m.TxnTopic(name="t", partitions=(0,)),)))
    assert added["topics"][0]["partitions"][0]["error_code"] == 0
    for _ in range(100):  # (until the leader has taken both partitions over)
        never_added, in_txn = trio.run(exchange, brokers[other], lambda c: produce(c, 1, pid, epoch),
                                       lambda c: produce(c, 0, pid, epoch))
        codes = {never_added["topics"][0]["partitions"][0]["error_code"],
                 in_txn["topics"][0]["partitions"][0]["error_code"]}
        if ErrorCode.NOT_LEADER_OR_FOLLOWER not in codes:
            break
        time.sleep(0.05)
    assert never_added["topics"][0]["partitions"][0]["error_code"] == ErrorCode.INVALID_TXN_STATE
    assert in_txn["topics"][0]["partitions"][0]["error_code"] == 0
    (stale,) = trio.run(exchange, brokers[other], lambda c: produce(c, 1, pid, epoch + 5))
    assert stale["topics"][0]["partitions"][0]["error_code"] == ErrorCode.INVALID_PRODUCER_EPOCH


def test_the_transaction_admin_finds_coordinators_and_leaders_from_any_broker(start_brokers):
    """kafka-transactions.sh's calls through a broker that coordinates nothing: describe goes to
    the id's coordinator, list to every broker, describe-producers and abort to the partition's
    leader."""
    from triolog.client import TopicPartition

    brokers = start_brokers((1, 2), "transaction.state.log.num.partitions=1",
                            "transaction.state.log.replication.factor=2", "transaction.state.log.min.isr=1")
    bootstrap = [b.bootstrap for b in brokers.values()]
    with Producer(bootstrap, transactional_id="tx", linger_ms=1) as producer:
        producer.init_transactions()
        with AdminClient(bootstrap) as admin:
            coordinator = admin.describe_topics(["__transaction_state"])["__transaction_state"].partitions[0].leader
            other = next(node for node in brokers if node != coordinator)
            admin.create_topics([NewTopic("t", replica_assignment=((coordinator,), (other,)))])
            wait_until(lambda: all(p.leader >= 0 for p in admin.describe_topics(["t"])["t"].partitions))
        producer.begin_transaction()
        for partition in (0, 1):
            producer.send("t", b"open", partition=partition).get(30)
        with AdminClient(brokers[other].bootstrap) as admin:  # (it coordinates nothing)
            described = admin.describe_transactions(["tx"])["tx"]
            assert described.state == "Ongoing"
            assert described.partitions == {TopicPartition("t", 0), TopicPartition("t", 1)}
            assert [t.transactional_id for t in admin.list_transactions()] == ["tx"]
            found = admin.describe_producers([("t", 0), ("t", 1)])
            assert {tp.partition: [p.current_transaction_start_offset for p in found[tp]] for tp in found} == \
                {0: [0], 1: [0]}
        producer.commit_transaction()
    assert sorted(read_committed(bootstrap, "t", 2, 2)) == [b"open", b"open"]
