"""Every broker's view of the cluster follows ZooKeeper: brokers joining and leaving, the
controller, new topics and each partition's leader, epoch, ISR and offline replicas, a deleted
topic forgotten. Driven by a real controller on a real ensemble."""

from __future__ import annotations

import trio

from triolog.broker.cluster.metadata_cache import ClusterMetadataCache
from triolog.broker.cluster.zk_client import KafkaZkClient
from triolog.broker.cluster.zk_data import (
    NO_LEADER,
    BrokerRegistration,
    PartitionState,
    RegisteredEndpoint,
    TopicAssignment,
)
from triolog.broker.cluster.zookeeper_store import ZooKeeperStore

from .test_controller import Member, cluster, register_again, wait_for


async def test_the_cache_follows_brokers_topics_and_partition_states(zk_connect):
    async with cluster(zk_connect) as (members, start):
        for broker_id in (1, 2, 3):
            await start(broker_id)
        observer = members[3]
        cache = ClusterMetadataCache(observer.zk)
        async with trio.open_nursery() as nursery:
            await nursery.start(cache.run)
            with trio.fail_after(10):
                await cache.loaded.wait()
            assert sorted(cache.brokers) == [1, 2, 3] and cache.topics == {}

            async def sees(predicate):
                async def check():
                    return predicate()

                await wait_for(check)

            await sees(lambda: cache.controller_id in (1, 2, 3))
            await observer.zk.create_topic("events", TopicAssignment({0: (1, 2), 1: (2, 3)}), {})
            await sees(
                lambda: all(v.online for v in cache.partitions("events")) and len(cache.partitions("events")) == 2
            )
            first = cache.partition("events", 0)
            assert (first.leader, first.leader_epoch, first.isr, first.replicas) == (1, 0, (1, 2), (1, 2))
            assert first.offline_replicas == ()

            generation = cache.generation
            await members[1].stop()
            await sees(lambda: cache.partition("events", 0).leader == 2)
            assert cache.generation > generation
            view = cache.partition("events", 0)
            assert view.leader_epoch == 1 and view.isr == (2,) and view.offline_replicas == (1,)
            assert sorted(cache.brokers) == [2, 3]
            assert cache.partition("events", 1).leader == 2  # untouched by broker 1's death

            # A topic whose znodes go is forgotten.
            await observer.store.delete("/brokers/topics/events", recursive=True)
            await sees(lambda: "events" not in cache.topics)
            assert cache.partition("events", 0) is None and not any(k[0] == "events" for k in cache.states)
            nursery.cancel_scope.cancel()


async def test_a_partition_without_a_state_yet_is_offline(zk_connect):
    async with cluster(zk_connect) as (members, start):
        await start(1)
        # The topic names broker 9, which is not live: the controller cannot lead it yet.
        cache = ClusterMetadataCache(members[1].zk)
        async with trio.open_nursery() as nursery:
            await nursery.start(cache.run)
            await members[1].zk.create_topic("waiting", TopicAssignment({0: (9,)}), {})

            async def listed():
                return "waiting" in cache.topics

            await wait_for(listed)
            view = cache.partition("waiting", 0)
            assert view.leader == NO_LEADER and view.offline_replicas == (9,) and not view.online
            nursery.cancel_scope.cancel()


async def test_a_leader_registered_again_leads_nothing_until_a_newer_state_names_it(zk_connect):
    """No controller runs here: the states are written by hand, so what the cache shows between a
    leader's new registration and the next state is seen (live, a controller acts at once)."""
    store = ZooKeeperStore(zk_connect, session_timeout_ms=4000)
    await store.start()
    zk = KafkaZkClient(store)
    try:
        await zk.create_top_level_paths()
        for broker_id in (5, 6):
            endpoint = RegisteredEndpoint("PLAINTEXT", "PLAINTEXT", "127.0.0.1", 9000 + broker_id)
            await zk.register_broker(BrokerRegistration(broker_id, (endpoint,)))
        fence = await zk.try_become_controller(99)
        await zk.create_topic("restarts", TopicAssignment({0: (5, 6)}), {})
        await zk.create_partition_states(fence, "restarts", {0: PartitionState(5, 3, (5, 6), fence.epoch)})
        cache = ClusterMetadataCache(zk)
        async with trio.open_nursery() as nursery:
            await nursery.start(cache.run)

            async def leader_is(leader):
                view = cache.partition("restarts", 0)
                return view is not None and view.leader == leader

            await wait_for(lambda: leader_is(5))
            await register_again(Member(5, store, unclean=False))
            # The state still names broker 5, written before it registered again: no leader.
            await wait_for(lambda: leader_is(NO_LEADER))
            assert (await zk.partition_state("restarts", 0)).state.leader == 5
            current = await zk.partition_state("restarts", 0)
            await zk.update_partition_state(
                fence, "restarts", 0, PartitionState(5, 4, (5,), fence.epoch), current.version
            )
            await wait_for(lambda: leader_is(5))
            assert cache.partition("restarts", 0).leader_epoch == 4
            nursery.cancel_scope.cancel()
    finally:
        await store.close()
