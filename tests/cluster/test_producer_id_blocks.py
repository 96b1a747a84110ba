"""Producer-id blocks from ZooKeeper: brokers reserving at the same time get disjoint, consecutive
blocks (conditional writes, the loser takes the next), in Kafka's JSON; every broker follows the
end of what the cluster reserved."""

from __future__ import annotations

import trio

from triolog.broker.cluster.producer_id_blocks import follow_issued_limit, reserve_block
from triolog.broker.cluster.zk_client import KafkaZkClient
from triolog.broker.cluster.zk_data import LATEST_PRODUCER_ID_BLOCK, ProducerIdBlock
from triolog.broker.cluster.zookeeper_store import ZooKeeperStore
from triolog.broker.coordinator.producer_id_manager import ProducerIdManager
from triolog.protocol.errors import ErrorCode


async def test_concurrent_reservations_get_disjoint_consecutive_blocks(zk_connect):
    stores = [ZooKeeperStore(zk_connect, session_timeout_ms=4000) for _ in range(3)]
    for store in stores:
        await store.start()
    try:
        clients = [KafkaZkClient(store) for store in stores]
        limits = []
        blocks = []

        async def reserve(broker_id, client):
            for _ in range(5):
                blocks.append(await reserve_block(client, broker_id, 1000))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(follow_issued_limit, clients[0], limits.append)
            async with trio.open_nursery() as reservers:
                for broker_id, client in enumerate(clients, start=1):
                    reservers.start_soon(reserve, broker_id, client)
            with trio.fail_after(5):
                while not limits or limits[-1] != 15000:
                    await trio.sleep(0.02)
            nursery.cancel_scope.cancel()
        ranges = sorted((b.first, b.last) for b in blocks)
        assert ranges == [(i * 1000, i * 1000 + 999) for i in range(15)]  # every id once, no gap
        latest = ProducerIdBlock.decode((await stores[0].get(LATEST_PRODUCER_ID_BLOCK)).data)
        assert (latest.first, latest.last) == (14000, 14999)
        assert limits == sorted(limits)  # the limit only grows
    finally:
        for store in stores:
            await store.close()


async def test_the_event_loop_never_waits_for_a_reservation_in_progress(zk_connect, tmp_path):
    """A reservation runs on the event loop (ZooKeeper), asked from a worker handing out an id;
    meanwhile a produce on the loop asks the issued limit. Were the limit behind the lock the
    reservation holds, the loop would wait for the worker waiting for the loop: the broker hung."""
    store = ZooKeeperStore(zk_connect, session_timeout_ms=4000)
    await store.start()
    try:
        zk = KafkaZkClient(store)
        manager = ProducerIdManager(tmp_path)
        limits_seen = []

        async def reserve_on_the_loop(size):
            limits_seen.append(manager.issued_limit())  # (as producer_handlers does, on the loop)
            block = await reserve_block(zk, 1, size)
            return block.first, block.last + 1

        manager.reserve = lambda size: trio.from_thread.run(reserve_on_the_loop, size)
        with trio.fail_after(20):
            first = await trio.to_thread.run_sync(manager.generate_producer_id)
            second = await trio.to_thread.run_sync(manager.generate_producer_id)
        assert limits_seen == [0] and (first, second) == (0, 1)
        assert manager.issued_limit() == 1000 and manager.blocks_reserved == 1
    finally:
        await store.close()


def test_a_leader_whose_watch_lags_still_accepts_an_id_another_broker_just_handed_out(start_brokers):
    """Broker A reserves a block and answers InitProducerId at once; the producer's first batch
    reaches leader B before B's ZooKeeper watch has told it about the block (modelled by setting
    B's known limit back). B reads the block afresh instead of refusing the id as never issued
    (UNKNOWN_PRODUCER_ID), which failed a fresh idempotent producer's every record."""
    import time

    from triolog.client import AdminClient, NewTopic
    from triolog.protocol import messages as m
    from triolog.protocol.records import build_batch

    from .helpers import call, wait_until

    brokers = start_brokers((1, 2))
    with AdminClient([b.bootstrap for b in brokers.values()]) as admin:
        admin.create_topics([NewTopic("t", replica_assignment=((2,),))])
        wait_until(lambda: admin.describe_topics(["t"])["t"].partitions[0].leader == 2)

    init = trio.run(call, brokers[1], lambda c: m.InitProducerIdRequest(id=c.next_id()))
    assert init["error_code"] == 0
    leader_ids = brokers[2].server.producer_ids
    assert wait_until(lambda: leader_ids.issued_limit() > init["producer_id"])
    leader_ids.cluster_issued_limit = 0  # the watch has not fired yet
    batch = build_batch([(None, b"first", int(time.time() * 1000), ())], producer_id=init["producer_id"],
                        producer_epoch=init["producer_epoch"], base_sequence=0)
    for _ in range(100):  # (until broker 2 has taken its leadership over)
        doc = trio.run(call, brokers[2], lambda c: m.ProduceRequest(id=c.next_id(), acks=-1, timeout_ms=10_000, topics=(
            m.ProduceTopic(name="t", partitions=(m.ProducePartition(partition=0, records=batch),)),)))
        code = doc["topics"][0]["partitions"][0]["error_code"]
        if code != ErrorCode.NOT_LEADER_OR_FOLLOWER:
            break
        time.sleep(0.05)
    assert code == 0, doc
    assert leader_ids.issued_limit() > init["producer_id"]
    # An id no broker handed out is still refused.
    forged = build_batch([(None, b"forged", int(time.time() * 1000), ())], producer_id=10**12, producer_epoch=0,
                         base_sequence=0)
    doc = trio.run(call, brokers[2], lambda c: m.ProduceRequest(id=c.next_id(), acks=-1, timeout_ms=10_000, topics=(
        m.ProduceTopic(name="t", partitions=(m.ProducePartition(partition=0, records=forged),)),)))
    assert doc["topics"][0]["partitions"][0]["error_code"] == ErrorCode.UNKNOWN_PRODUCER_ID
