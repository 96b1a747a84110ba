"""The transaction coordinator's marker sender on a cluster: markers go to each partition's
leader (this broker's own partitions directly, the others' over the broker channel), and a
partition whose leader stops is sent again to the leader elected after it.

Real in-process brokers on one ZooKeeper chroot; the sender runs in broker 1's event loop as the
coordinator's would."""

from __future__ import annotations

import time

import trio

from triolog.broker.cluster.broker_channel import BrokerChannel
from triolog.broker.server.txn_markers import TxnMarkerSender
from triolog.broker.storage.log import FetchIsolation
from triolog.client import AdminClient, NewTopic
from triolog.protocol import messages as m
from triolog.protocol.errors import ErrorCode
from triolog.protocol.records import build_batch

from .helpers import call, wait_until


def _produce_txn(broker, topic: str, partition: int, pid: int, sequence: int) -> None:
    """One transactional record, acks=all, written by the partition's leader ``broker``."""
    batch = build_batch([(b"k", b"v", int(time.time() * 1000), ())], producer_id=pid, producer_epoch=0,
                        base_sequence=sequence, is_transactional=True)
    for _ in range(100):  # (a new leader may not have taken its partition over yet: retriable)
        doc = trio.run(call, broker, lambda client: m.ProduceRequest(
            id=client.next_id(), acks=-1, timeout_ms=30_000,
            topics=(m.ProduceTopic(name=topic, partitions=(m.ProducePartition(partition=partition,
                                                                              records=batch),)),),
            transactional_id="tx"))
        if doc["topics"][0]["partitions"][0]["error_code"] != ErrorCode.NOT_LEADER_OR_FOLLOWER:
            break
        time.sleep(0.05)
    assert doc["topics"][0]["partitions"][0]["error_code"] == 0, doc


def _send(broker, pid: int, partitions, committed: bool = True) -> dict:
    """Send one transaction's markers from ``broker``'s event loop; its answer."""
    server = broker.server
    cache = server.cluster.cache

    async def scenario():
        answer: list[dict] = []
        channel = BrokerChannel(server.config.node_id, cache, listener_name="PLAINTEXT", timeout_ms=5000)
        sender = TxnMarkerSender(
            write_local=server.handler.txn_partitions.write_markers,
            node_id=server.config.node_id,
            cache=cache,
            channel=channel,
        )
        async with trio.open_nursery() as nursery:
            sender.start(nursery)
            sender.send(pid, 0, 0, committed, partitions, answer.append)
            with trio.fail_after(30):
                while not answer:
                    await trio.sleep(0.01)
            nursery.cancel_scope.cancel()
        await channel.aclose()
        return answer[0]

    return trio.from_thread.run(scenario, trio_token=broker._token)


def _lso(broker, topic: str, partition: int) -> int:
    return broker.server.log_manager.get_log(topic, partition).last_stable_offset


def test_markers_reach_local_and_remote_leaders_and_follow_a_new_leader(start_brokers):
    # (the sender is driven by hand: no coordinator stands behind the batches to verify them)
    brokers = start_brokers((1, 2, 3), "controlled.shutdown.enable=false",
                            "transaction.partition.verification.enable=false")
    with AdminClient([b.bootstrap for b in brokers.values()]) as admin:
        # p0 led by 1 (the sender's broker), p1 by 2, p2 by 3 with 2 as its follower.
        admin.create_topics([NewTopic("t", replica_assignment=((1, 2), (2, 3), (3, 2)))])
        wait_until(lambda: all(p.leader >= 0 for p in admin.describe_topics(["t"])["t"].partitions))
    pid = trio.run(call, brokers[1], lambda client: m.InitProducerIdRequest(id=client.next_id()))["producer_id"]
    leaders = {0: brokers[1], 1: brokers[2], 2: brokers[3]}
    for partition, leader in leaders.items():
        _produce_txn(leader, "t", partition, pid, 0)
    assert [_lso(leader, "t", p) for p, leader in leaders.items()] == [0, 0, 0]

    codes = _send(brokers[1], pid, [("t", 0), ("t", 1), ("t", 2), ("t", 7)])
    assert codes == {("t", 0): ErrorCode.NONE, ("t", 1): ErrorCode.NONE, ("t", 2): ErrorCode.NONE,
                     ("t", 7): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    # Answered once committed: every leader's LSO is past its marker.
    assert [_lso(leader, "t", p) for p, leader in leaders.items()] == [2, 2, 2]

    # The next transaction on p2 (replicated to 2); p2's leader stops before the ABORT marker:
    # the marker waits for 2 to take over once 3's session ends, and is written there.
    _produce_txn(brokers[3], "t", 2, pid, 1)
    brokers[3].stop()
    codes = _send(brokers[1], pid, [("t", 2)], committed=False)
    assert codes == {("t", 2): ErrorCode.NONE}
    log = brokers[2].server.log_manager.get_log("t", 2)
    assert log.last_stable_offset == log.log_end_offset == 4
    aborted = log.read(0, 1 << 20, isolation=FetchIsolation.TXN_COMMITTED).aborted_transactions
    assert [(t.producer_id, t.first_offset) for t in aborted] == [(pid, 2)]
