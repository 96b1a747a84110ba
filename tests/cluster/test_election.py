"""The controller's placement and election rules: Kafka's own expectations (AdminRackAwareTest's
assignments), and properties over any cluster shape (hypothesis): distinct replicas spread over
brokers and racks, clean elections only from the ISR, every election a new epoch."""

from __future__ import annotations

import collections
import random

import pytest
from hypothesis import given, strategies as st

from triolog.broker.cluster.election import (
    BrokerPlacement,
    assign_replicas,
    bounced_replicas,
    elect_for_controlled_shutdown,
    elect_offline,
    elect_preferred,
    initial_state,
    rack_alternated,
    remove_from_isr,
)
from triolog.broker.cluster.zk_data import NO_LEADER, RECOVERING, PartitionState
from triolog.protocol.errors import InvalidPartitionsError, InvalidReplicationFactorError, InvalidRequestError


def test_rack_unaware_assignment_is_kafkas():
    brokers = [BrokerPlacement(i) for i in range(5)]
    assert assign_replicas(brokers, 10, 3, fixed_start_index=0) == {
        0: [0, 1, 2],
        1: [1, 2, 3],
        2: [2, 3, 4],
        3: [3, 4, 0],
        4: [4, 0, 1],
        5: [0, 2, 3],
        6: [1, 3, 4],
        7: [2, 4, 0],
        8: [3, 0, 1],
        9: [4, 1, 2],
    }


def test_rack_aware_assignment_is_kafkas():
    racks = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}
    assert rack_alternated(racks) == [0, 3, 1, 5, 4, 2]
    assert rack_alternated({b: r for b, r in racks.items() if b != 5}) == [0, 3, 1, 4, 2]
    brokers = [BrokerPlacement(b, r) for b, r in racks.items()]
    assert assign_replicas(brokers, 7, 3, fixed_start_index=0, start_partition_id=0) == {
        0: [0, 3, 1],
        1: [3, 1, 5],
        2: [1, 5, 4],
        3: [5, 4, 2],
        4: [4, 2, 0],
        5: [2, 0, 3],
        6: [0, 4, 2],
    }


def test_assignment_refuses_what_kafka_refuses():
    brokers = [BrokerPlacement(1), BrokerPlacement(2)]
    with pytest.raises(InvalidReplicationFactorError, match="Replication factor: 3 larger than available brokers: 2"):
        assign_replicas(brokers, 1, 3)
    with pytest.raises(InvalidReplicationFactorError):
        assign_replicas(brokers, 1, 0)
    with pytest.raises(InvalidPartitionsError):
        assign_replicas(brokers, 0, 1)
    with pytest.raises(InvalidRequestError, match="Not all brokers have rack information"):
        assign_replicas([BrokerPlacement(1, "a"), BrokerPlacement(2)], 1, 1)


_clusters = st.lists(st.integers(0, 50), min_size=1, max_size=9, unique=True).flatmap(
    lambda ids: st.tuples(
        st.just(ids),
        st.one_of(st.none(), st.lists(st.sampled_from("abcd"), min_size=len(ids), max_size=len(ids))),
        st.integers(1, len(ids)),
        st.integers(1, 40),
        st.integers(0, 2**32),
    )
)


@given(_clusters)
def test_every_partition_gets_distinct_replicas_spread_over_brokers_and_racks(cluster):
    ids, racks, rf, partitions, seed = cluster
    brokers = [BrokerPlacement(b, racks[i] if racks else None) for i, b in enumerate(ids)]
    assignment = assign_replicas(brokers, partitions, rf, rng=random.Random(seed))
    assert sorted(assignment) == list(range(partitions))
    rack_of = {b.broker_id: b.rack for b in brokers}
    for replicas in assignment.values():
        assert len(replicas) == rf and len(set(replicas)) == rf and set(replicas) <= set(ids)
        if racks:  # as many racks as the replicas can cover
            assert len({rack_of[r] for r in replicas}) == min(rf, len(set(racks)))
    if not racks:
        # Leadership (the first replica) spreads evenly: counts differ by at most one.
        leaders = collections.Counter(replicas[0] for replicas in assignment.values())
        counts = [leaders.get(b, 0) for b in ids]
        assert max(counts) - min(counts) <= 1


_states = st.lists(st.integers(0, 6), min_size=1, max_size=5, unique=True).flatmap(
    lambda assignment: st.tuples(
        st.just(assignment),
        st.lists(st.sampled_from(assignment), min_size=1, unique=True),  # the ISR
        st.sets(st.integers(0, 6)),  # live brokers
        st.booleans(),
        st.integers(0, 100),
    )
)


@given(_states)
def test_a_clean_election_picks_a_live_in_sync_replica_and_moves_the_epoch(case):
    assignment, isr, live, unclean, epoch = case
    state = PartitionState(isr[0], epoch, tuple(isr), 1)
    elected = elect_offline(assignment, state, live, unclean=unclean, controller_epoch=2)
    assert elected.leader_epoch == epoch + 1 and elected.controller_epoch == 2
    live_in_sync = [r for r in assignment if r in live and r in isr]
    if live_in_sync:
        # The first in assignment order, and the ISR is the live part of the old one.
        assert elected.leader == live_in_sync[0]
        assert set(elected.isr) == set(isr) & live and elected.leader in elected.isr
    elif unclean and any(r in live for r in assignment):
        # Only with unclean election on may an out-of-sync replica lead: the ISR is it alone.
        assert elected.leader == next(r for r in assignment if r in live)
        assert elected.isr == (elected.leader,) and elected.leader_recovery_state == RECOVERING
    else:
        assert elected.leader == NO_LEADER and elected.isr  # the last ISR member is remembered
        assert set(elected.isr) <= set(isr)


@given(_states)
def test_controller_moves_never_put_a_dead_or_out_of_sync_replica_in_the_lead(case):
    assignment, isr, live, _, epoch = case
    state = PartitionState(isr[0], epoch, tuple(isr), 1)
    preferred = elect_preferred(assignment, state, live, controller_epoch=2)
    if preferred is not None:
        assert preferred.leader == assignment[0] and preferred.leader in live and preferred.leader in isr
        assert preferred.leader_epoch == epoch + 1 and preferred.isr == state.isr
    shutting_down = {isr[0]}
    moved = elect_for_controlled_shutdown(assignment, state, live, shutting_down, controller_epoch=2)
    if moved is not None:
        assert moved.leader not in shutting_down and moved.leader in live and moved.leader in isr
        assert not set(moved.isr) & shutting_down and moved.leader in moved.isr
    removed = remove_from_isr(state, {r for r in isr if r not in live}, controller_epoch=2)
    assert removed.isr and set(removed.isr) <= set(isr) and removed.leader_epoch == epoch + 1
    if isr[0] not in live:
        assert removed.leader == NO_LEADER


@given(_states, st.dictionaries(st.integers(0, 6), st.integers(1, 200)), st.integers(0, 200), st.booleans())
def test_a_replica_registered_after_its_state_was_written_never_leads_on_it(case, epochs, modified, leaderless):
    """Kafka's bounced broker, told by its epoch: out of the ISR and of the lead until a state
    newer than its registration is written; a leaderless state waits for its last replica."""
    assignment, isr, live, unclean, epoch = case
    state = PartitionState(NO_LEADER if leaderless else isr[0], epoch, tuple(isr), 1)
    bounced = bounced_replicas(state, epochs, modified)
    assert bounced <= set(isr)
    assert all(epochs.get(r, 0) > modified for r in bounced)
    if leaderless:
        assert not bounced
    else:
        assert bounced == {r for r in isr if epochs.get(r, 0) > modified}
        elected = elect_offline(assignment, state, set(live) - bounced, unclean=False, controller_epoch=2)
        if elected.leader != NO_LEADER:
            assert elected.leader not in bounced and not set(elected.isr) & bounced


def test_removing_dead_replicas_keeps_the_last_member_and_drops_a_dead_leader():
    state = PartitionState(1, 4, (1, 2, 3), 1)
    assert remove_from_isr(state, {3}, controller_epoch=5) == PartitionState(1, 5, (1, 2), 5)
    assert remove_from_isr(state, {2, 3}, controller_epoch=5) == PartitionState(1, 5, (1,), 5)
    # Everyone dead: the last one removed stays as the ISR's memory; no leader.
    assert remove_from_isr(state, {1, 2, 3}, controller_epoch=5) == PartitionState(NO_LEADER, 5, (3,), 5)


def test_a_new_partition_is_led_by_its_first_live_replica():
    assert initial_state([3, 1, 2], {1, 2, 3}, controller_epoch=7) == PartitionState(3, 0, (3, 1, 2), 7)
    assert initial_state([3, 1, 2], {1, 2}, controller_epoch=7) == PartitionState(1, 0, (1, 2), 7)
