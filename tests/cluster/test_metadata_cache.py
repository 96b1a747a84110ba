"""Every broker's view of the cluster follows ZooKeeper: brokers joining and leaving, the
controller, new topics and each partition's leader, epoch, ISR and offline replicas, a deleted
topic forgotten. Driven by a real controller on a real ensemble."""

from __future__ import annotations

import trio

from triolog.broker.cluster.metadata_cache import ClusterMetadataCache
from triolog.broker.cluster.zk_data import NO_LEADER, TopicAssignment

from .test_controller import cluster, wait_for


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
