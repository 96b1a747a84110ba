"""The controller on a real ZooKeeper: one broker wins each epoch and the next takes over when it
dies; new topics get their first states; a dead leader is replaced by the first live in-sync
replica with a new epoch, dead followers leave the ISR, a returning last replica leads again; a
deposed controller's writes are refused. Brokers here are their ZooKeeper sessions and
controllers, each in this process: what a broker's death means to the cluster is its session
ending."""

from __future__ import annotations

from contextlib import asynccontextmanager

import pytest
import trio

from triolog.broker.cluster import zk_data
from triolog.broker.cluster.controller import KafkaController
from triolog.broker.cluster.metadata_store import Create, Delete, NodeExistsError
from triolog.broker.cluster.zk_client import ControllerMovedError, KafkaZkClient
from triolog.broker.cluster.zk_data import (
    NO_LEADER,
    BrokerRegistration,
    PartitionState,
    RegisteredEndpoint,
    TopicAssignment,
)
from triolog.broker.cluster.zookeeper_store import ZooKeeperStore


class Member:
    """One broker as the cluster sees it: a session, a registration, a controller."""

    def __init__(self, broker_id: int, store: ZooKeeperStore, unclean: bool):
        self.broker_id = broker_id
        self.store = store
        self.zk = KafkaZkClient(store)

        async def unclean_election(topic: str) -> bool:
            return unclean

        self.controller = KafkaController(self.zk, broker_id, unclean_election=unclean_election)
        self.scope = trio.CancelScope()

    async def stop(self):
        """The broker dies: its session ends (its registration and /controller go at once)."""
        self.scope.cancel()
        await self.store.close()


@asynccontextmanager
async def cluster(zk_connect, unclean=False):
    """Members started by the test (``start(broker_id)``), all stopped at the end."""
    members = {}
    async with trio.open_nursery() as nursery:

        async def start(broker_id):
            store = ZooKeeperStore(zk_connect, session_timeout_ms=4000, connection_timeout_ms=10000)
            await store.start()
            member = Member(broker_id, store, unclean)
            await member.zk.create_top_level_paths()
            endpoint = RegisteredEndpoint("PLAINTEXT", "PLAINTEXT", "127.0.0.1", 9000 + broker_id)
            await member.zk.register_broker(BrokerRegistration(broker_id, (endpoint,)))

            async def run():
                with member.scope:
                    await member.controller.run()

            nursery.start_soon(run)
            members[broker_id] = member
            return member

        try:
            yield members, start
        finally:
            for member in list(members.values()):
                await member.stop()
            nursery.cancel_scope.cancel()


async def wait_for(predicate, timeout=15):
    with trio.fail_after(timeout):
        while not await predicate():
            await trio.sleep(0.05)


async def active_controller(members):
    active = [m for m in members.values() if m.controller.active and not m.scope.cancel_called]
    return active[0] if len(active) == 1 else None


async def test_one_controller_per_epoch_and_the_next_takes_over(zk_connect):
    async with cluster(zk_connect) as (members, start):
        for broker_id in (1, 2, 3):
            await start(broker_id)
        await wait_for(lambda: _truthy(active_controller(members)))
        first = await active_controller(members)
        zk = members[2 if first.broker_id != 2 else 3].zk
        assert await zk.controller_id() == first.broker_id
        assert (await zk.controller_epoch())[0] == first.controller.fence.epoch
        epoch = first.controller.fence.epoch

        await first.stop()
        del members[first.broker_id]
        await wait_for(lambda: _truthy(active_controller(members)))
        second = await active_controller(members)
        assert second.broker_id != first.broker_id and second.controller.fence.epoch == epoch + 1
        assert await second.zk.controller_id() == second.broker_id


async def _truthy(awaitable):
    return bool(await awaitable)


async def test_a_deposed_controller_writes_nothing(zk_connect):
    store = ZooKeeperStore(zk_connect, session_timeout_ms=4000)
    await store.start()
    other = ZooKeeperStore(zk_connect, session_timeout_ms=4000)
    await other.start()
    try:
        zk, rival = KafkaZkClient(store), KafkaZkClient(other)
        await zk.create_top_level_paths()
        stale = await zk.try_become_controller(1)
        assert stale is not None and stale.epoch == 1
        assert await rival.try_become_controller(2) is None  # /controller is taken
        await zk.resign(1)
        fresh = await rival.try_become_controller(2)
        assert fresh is not None and fresh.epoch == 2
        await rival.store.ensure_path("/brokers/topics/t/partitions/0")
        await rival.create_partition_states(fresh, "t", {1: PartitionState(2, 0, (2,), 2)})
        # The old controller, unaware, tries to write: its epoch check fails, nothing is written.
        with pytest.raises(ControllerMovedError):
            await zk.update_partition_state(stale, "t", 1, PartitionState(1, 1, (1,), 1), 0)
        with pytest.raises(ControllerMovedError):
            await zk.create_partition_states(stale, "t", {0: PartitionState(1, 0, (1,), 1)})
        assert (await zk.partition_state("t", 1)).state == PartitionState(2, 0, (2,), 2)
        assert await zk.partition_state("t", 0) is None
    finally:
        await store.close()
        await other.close()


async def _states(zk, topic, partitions):
    return {p: (await zk.partition_state(topic, p)) for p in range(partitions)}


async def test_new_topics_are_led_and_dead_brokers_lose_leadership_and_isr(zk_connect):
    async with cluster(zk_connect) as (members, start):
        for broker_id in (1, 2, 3):
            await start(broker_id)
        zk = members[1].zk
        assignment = TopicAssignment({0: (1, 2, 3), 1: (2, 3, 1), 2: (3, 1, 2)})
        await zk.create_topic("orders", assignment, {"min.insync.replicas": "2"})
        with pytest.raises(NodeExistsError):
            await zk.create_topic("orders", assignment, {})
        assert await zk.topic_config("orders") == {"min.insync.replicas": "2"}

        async def all_led():
            states = await _states(zk, "orders", 3)
            return all(s is not None for s in states.values())

        await wait_for(all_led)
        states = await _states(zk, "orders", 3)
        assert {p: s.state.leader for p, s in states.items()} == {0: 1, 1: 2, 2: 3}
        assert all(s.state.leader_epoch == 0 and s.state.isr == assignment.partitions[p] for p, s in states.items())

        # Broker 1 dies (the controller or not): it led partition 0 and followed the others.
        await members[1].stop()
        zk = members[2].zk

        async def moved():
            states = await _states(zk, "orders", 3)
            return all(1 not in s.state.isr for s in states.values())

        await wait_for(moved)
        after = await _states(zk, "orders", 3)
        # Partition 0: the first live in-sync replica of (1, 2, 3) leads, with the next epoch.
        assert after[0].state.leader == 2 and after[0].state.isr == (2, 3) and after[0].state.leader_epoch == 1
        # Partitions 1 and 2 keep their leader; the dead follower leaves their ISR, epoch + 1.
        assert after[1].state.leader == 2 and after[1].state.isr == (2, 3) and after[1].state.leader_epoch == 1
        assert after[2].state.leader == 3 and after[2].state.isr == (3, 2) and after[2].state.leader_epoch == 1
        # Every write was fenced on the epoch of the controller that made it.
        controller_epoch = (await zk.controller_epoch())[0]
        assert all(s.state.controller_epoch <= controller_epoch for s in after.values())


async def test_a_partition_whose_replicas_all_died_waits_for_its_last_in_sync_replica(zk_connect):
    async with cluster(zk_connect) as (members, start):
        for broker_id in (1, 2, 3):
            await start(broker_id)
        zk = members[3].zk
        await zk.create_topic("solo", TopicAssignment({0: (1, 2)}), {})
        await wait_for(lambda: _truthy(zk.partition_state("solo", 0)))
        await members[2].stop()  # the follower first: the ISR shrinks to the leader, 1
        await wait_for(lambda: _isr_is(zk, "solo", (1,)))
        await members[1].stop()  # then the leader: nobody in sync is left
        await wait_for(lambda: _leader_is(zk, "solo", NO_LEADER))
        state = (await zk.partition_state("solo", 0)).state
        assert state.isr == (1,)  # the last in-sync replica is remembered
        # Broker 2 (out of sync) comes back: with unclean election off it may not lead.
        await start(2)
        await trio.sleep(1.0)
        assert (await zk.partition_state("solo", 0)).state.leader == NO_LEADER
        # Broker 1 comes back: it leads again, with a new epoch.
        await start(1)
        await wait_for(lambda: _leader_is(zk, "solo", 1))
        assert (await zk.partition_state("solo", 0)).state.leader_epoch > state.leader_epoch


async def test_with_unclean_election_an_out_of_sync_replica_leads(zk_connect):
    async with cluster(zk_connect, unclean=True) as (members, start):
        for broker_id in (1, 2, 3):
            await start(broker_id)
        zk = members[3].zk
        await zk.create_topic("risky", TopicAssignment({0: (1, 2)}), {})
        await wait_for(lambda: _truthy(zk.partition_state("risky", 0)))
        await members[2].stop()
        await wait_for(lambda: _isr_is(zk, "risky", (1,)))
        await members[1].stop()
        await wait_for(lambda: _leader_is(zk, "risky", NO_LEADER))
        await start(2)
        await wait_for(lambda: _leader_is(zk, "risky", 2))
        state = (await zk.partition_state("risky", 0)).state
        assert state.isr == (2,) and state.leader_recovery_state == 1  # RECOVERING, as Kafka marks it
        controller = await active_controller(members)
        assert controller.controller.elections["unclean"] >= 1


async def _isr_is(zk, topic, isr):
    state = await zk.partition_state(topic, 0)
    return state is not None and state.state.isr == isr


async def _leader_is(zk, topic, leader):
    state = await zk.partition_state(topic, 0)
    return state is not None and state.state.leader == leader


async def register_again(member):
    """The broker's registration deleted and made again in one write: a restart the controller
    cannot see as a death (no pass between the two), as when a killed broker's successor registers
    the moment its predecessor's session ends. Only its broker epoch tells."""
    path = zk_data.broker_path(member.broker_id)
    node = await member.store.get(path)
    await member.store.commit([Delete(path), Create(path, node.data, ephemeral=True)])
    registration, _ = await member.zk.broker(member.broker_id)
    assert registration.epoch > node.created


async def test_a_broker_registered_again_is_taken_for_one_that_died_and_started(zk_connect):
    async with cluster(zk_connect) as (members, start):
        for broker_id in (1, 2, 3):
            await start(broker_id)
        zk = members[3].zk
        await zk.create_topic("bounce", TopicAssignment({0: (1, 2, 3), 1: (2, 1, 3)}), {})
        await zk.create_topic("alone", TopicAssignment({0: (1,)}), {})
        await wait_for(lambda: _truthy(zk.partition_state("bounce", 1)))
        await wait_for(lambda: _leader_is(zk, "alone", 1))
        before = {p: (await zk.partition_state("bounce", p)).state for p in (0, 1)}
        alone = (await zk.partition_state("alone", 0)).state
        # (broker 3 is in the first ISRs only if the controller's pass read it registered)
        assert before[0].leader == 1 and 1 in before[0].isr and before[1].isr[:2] == (2, 1)
        without_1 = {p: tuple(r for r in before[p].isr if r != 1) for p in (0, 1)}

        await register_again(members[1])

        # It may have lost what it held (an unflushed tail): it leads nothing it led, and leaves
        # every ISR; as a started broker it comes back in by catching up (the leader's part).
        await wait_for(lambda: _leader_is(zk, "bounce", 2))
        after = {p: (await zk.partition_state("bounce", p)).state for p in (0, 1)}
        assert after[0].isr == without_1[0] and after[0].leader_epoch == before[0].leader_epoch + 1
        await wait_for(lambda: _isr_of(zk, "bounce", 1, without_1[1]))
        assert (await zk.partition_state("bounce", 1)).state.leader == 2
        # Its only replica: offline for one write (the old leader epoch fenced), then it leads
        # again on a state newer than its registration.
        await wait_for(lambda: _epoch_at_least(zk, "alone", alone.leader_epoch + 2))
        now = (await zk.partition_state("alone", 0)).state
        assert now.leader == 1 and now.isr == (1,) and now.leader_epoch == alone.leader_epoch + 2


async def _isr_of(zk, topic, partition, isr):
    state = await zk.partition_state(topic, partition)
    return state is not None and state.state.isr == isr


async def _epoch_at_least(zk, topic, epoch):
    state = await zk.partition_state(topic, 0)
    return state is not None and state.state.leader_epoch >= epoch and state.state.leader != NO_LEADER


async def test_a_controller_whose_session_came_back_goes_on_controlling(own_zookeeper):
    """Losing the ZooKeeper quorum leader suspends every session for a moment: the controller
    stands down (its session might be expiring) and, its session back, finds /controller still
    its own. It must take up its term again: nobody else can, and a cluster without a controller
    elects no leader."""
    async with cluster(own_zookeeper.connect("/resume")) as (members, start):
        for broker_id in (1, 2, 3):
            await start(broker_id)
        await wait_for(lambda: _truthy(active_controller(members)))
        first = await active_controller(members)
        epoch = first.controller.fence.epoch

        leader = own_zookeeper.leader()
        assert leader is not None
        await trio.to_thread.run_sync(own_zookeeper.kill, leader)
        await trio.to_thread.run_sync(own_zookeeper.start_node, leader)
        await trio.to_thread.run_sync(own_zookeeper.wait_serving, 60, [leader])

        await wait_for(lambda: _truthy(active_controller(members)), timeout=30)
        now = await active_controller(members)
        # The same term when the sessions survived; a new one only if the controller's expired.
        assert now.controller.fence.epoch == epoch or now.broker_id != first.broker_id
        zk = members[2].zk
        await zk.create_topic("after-quorum-loss", TopicAssignment({0: (2, 3)}), {})
        await wait_for(lambda: _leader_is(zk, "after-quorum-loss", 2), timeout=30)
