"""The controller's rules, pure: where a new topic's replicas go and who leads a partition.

Kafka's own algorithms (AdminUtils.assignReplicasToBrokers, PartitionLeaderElectionAlgorithms and
Election.scala), so a triolog cluster places and elects as a Kafka cluster of that shape would.
Every election bumps the leader epoch; that is what fences the previous leader's writes and
what followers truncate by.
"""

from __future__ import annotations

import random
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace

from triolog.protocol.errors import (
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    InvalidRequestError,
)

from .zk_data import NO_LEADER, RECOVERED, RECOVERING, PartitionState


@dataclass(frozen=True)
class BrokerPlacement:
    """What replica assignment knows of a live broker."""

    broker_id: int
    rack: str | None = None


def assign_replicas(
    brokers: Collection[BrokerPlacement],
    partitions: int,
    replication_factor: int,
    *,
    fixed_start_index: int = -1,
    start_partition_id: int = -1,
    rng: random.Random | None = None,
) -> dict[int, list[int]]:
    """Each partition's replicas, preferred leader first: round robin over the brokers (by id), the
    followers shifted so that leaders and followers spread evenly; with racks, alternating racks,
    so that a partition's replicas land on as many racks as there are replicas."""
    if partitions <= 0:
        raise InvalidPartitionsError("Number of partitions must be larger than 0.")
    if replication_factor <= 0:
        raise InvalidReplicationFactorError("Replication factor must be larger than 0.")
    if replication_factor > len(brokers):
        raise InvalidReplicationFactorError(
            f"Replication factor: {replication_factor} larger than available brokers: {len(brokers)}."
        )
    rng = rng or random.Random()
    ordered = sorted(brokers, key=lambda b: b.broker_id)
    if all(b.rack is None for b in ordered):
        ids = [b.broker_id for b in ordered]
        return _rack_unaware(ids, partitions, replication_factor, fixed_start_index, start_partition_id, rng)
    if any(b.rack is None for b in ordered):
        raise InvalidRequestError("Not all brokers have rack information for replica rack aware assignment.")
    return _rack_aware(ordered, partitions, replication_factor, fixed_start_index, start_partition_id, rng)


def _replica_index(first_replica_index: int, second_replica_shift: int, replica_index: int, brokers: int) -> int:
    shift = 1 + (second_replica_shift + replica_index) % (brokers - 1)
    return (first_replica_index + shift) % brokers


def _leader_slots(
    n: int, partitions: int, fixed_start: int, start_partition: int, rng: random.Random
) -> Iterator[tuple[int, int, int]]:
    """Kafka's walk over the broker list: per partition, (partition, index of its first replica,
    the followers' shift); the shift grows once per full round, so followers vary round to round."""
    start_index = fixed_start if fixed_start >= 0 else rng.randrange(n)
    shift = fixed_start if fixed_start >= 0 else rng.randrange(n)
    partition = max(0, start_partition)
    for _ in range(partitions):
        if partition > 0 and partition % n == 0:
            shift += 1
        yield partition, (partition + start_index) % n, shift
        partition += 1


def _rack_unaware(
    broker_ids: list[int], partitions: int, rf: int, fixed_start: int, start_partition: int, rng: random.Random
) -> dict[int, list[int]]:
    n = len(broker_ids)
    assignment = {}
    for partition, first, shift in _leader_slots(n, partitions, fixed_start, start_partition, rng):
        replicas = [broker_ids[first]]
        replicas += [broker_ids[_replica_index(first, shift, j, n)] for j in range(rf - 1)]
        assignment[partition] = replicas
    return assignment


def rack_alternated(racks: Mapping[int, str]) -> list[int]:
    """The brokers ordered by taking one of each rack in turn (racks by name, brokers by id)."""
    by_rack: dict[str, list[int]] = {}
    for broker_id, rack in racks.items():
        by_rack.setdefault(rack, []).append(broker_id)
    queues = [sorted(by_rack[rack]) for rack in sorted(by_rack)]
    result: list[int] = []
    depth = 0
    while len(result) < len(racks):
        result += [queue[depth] for queue in queues if depth < len(queue)]
        depth += 1
    return result


def _rack_aware(
    brokers: list[BrokerPlacement], partitions: int, rf: int, fixed_start: int, start_partition: int, rng: random.Random
) -> dict[int, list[int]]:
    rack_of = {b.broker_id: b.rack for b in brokers if b.rack is not None}
    n_racks = len(set(rack_of.values()))
    arranged = rack_alternated(rack_of)
    n = len(arranged)
    assignment = {}
    for partition, first, shift in _leader_slots(n, partitions, fixed_start, start_partition, rng):
        leader = arranged[first]
        replicas = [leader]
        racks_with = {rack_of[leader]}
        brokers_with = {leader}
        k = 0
        for _ in range(rf - 1):
            while True:
                broker = arranged[_replica_index(first, shift * n_racks, k, n)]
                rack = rack_of[broker]
                k += 1
                # Skip a broker whose rack already has a replica while some rack has none, and a
                # broker that has one while some broker has none.
                if (rack not in racks_with or len(racks_with) == n_racks) and (
                    broker not in brokers_with or len(brokers_with) == n
                ):
                    replicas.append(broker)
                    racks_with.add(rack)
                    brokers_with.add(broker)
                    break
        assignment[partition] = replicas
    return assignment


def validate_replica_assignment(
    assignment: Sequence[Sequence[int]], brokers: Collection[int], num_partitions: int, replication_factor: int
) -> dict[int, tuple[int, ...]]:
    """A replica assignment given by hand (``kafka-topics.sh --replica-assignment``), checked as
    Kafka's ZooKeeper-mode admin checked one: partitions by index, replicas preferred first."""
    if num_partitions != -1 or replication_factor != -1:
        raise InvalidRequestError(
            "Both numPartitions or replicationFactor and replicasAssignments were set. "
            "Both cannot be used at the same time."
        )
    if not assignment:
        raise InvalidReplicaAssignmentError("a replica assignment must give at least one partition")
    for partition, replicas in enumerate(assignment):
        if not replicas:
            raise InvalidReplicaAssignmentError(f"partition {partition} has no replicas")
        if len(set(replicas)) != len(replicas):
            raise InvalidReplicaAssignmentError(f"Duplicate replica assignment found: {partition} -> {list(replicas)}")
    if len({len(replicas) for replicas in assignment}) > 1:
        raise InvalidReplicaAssignmentError("All partitions should have the same number of replicas")
    unknown = sorted({b for replicas in assignment for b in replicas} - set(brokers))
    if unknown:
        raise InvalidReplicaAssignmentError(f"Unknown broker(s) in replica assignment: {', '.join(map(str, unknown))}.")
    return {partition: tuple(replicas) for partition, replicas in enumerate(assignment)}


# -- leader election -----------------------------------------------------------------------------


def elect_offline(
    assignment: Sequence[int], state: PartitionState, live: Collection[int], *, unclean: bool, controller_epoch: int
) -> PartitionState:
    """A partition whose leader is gone (or that never had one): the first live in-sync replica in
    assignment order; with none, the first live replica only if unclean election is on (the ISR is
    then that replica alone, and the partition is marked recovering); else no leader.

    The ISR keeps only live replicas, and the leader epoch moves on either way: even a partition
    left without a leader must fence the leader it had."""
    leader = next((r for r in assignment if r in live and r in state.isr), None)
    recovery = RECOVERED
    if leader is not None:
        isr = tuple(r for r in state.isr if r in live)
    elif unclean and (leader := next((r for r in assignment if r in live), None)) is not None:
        isr = (leader,)
        recovery = RECOVERING
    else:
        # Kafka keeps the last ISR member recorded when nobody is left, so that it alone may lead
        # again (a clean election) when it comes back.
        isr = tuple(r for r in state.isr if r in live) or state.isr[-1:]
        return PartitionState(NO_LEADER, state.leader_epoch + 1, isr, controller_epoch, state.leader_recovery_state)
    return PartitionState(leader, state.leader_epoch + 1, isr, controller_epoch, recovery)


def elect_preferred(
    assignment: Sequence[int], state: PartitionState, live: Collection[int], *, controller_epoch: int
) -> PartitionState | None:
    """The preferred replica (the first assigned) if it is live and in sync and not already the
    leader; None when there is nothing to do or it cannot lead."""
    if not assignment:
        return None
    preferred = assignment[0]
    if preferred == state.leader or preferred not in live or preferred not in state.isr:
        return None
    return PartitionState(preferred, state.leader_epoch + 1, state.isr, controller_epoch, state.leader_recovery_state)


def elect_for_controlled_shutdown(
    assignment: Sequence[int],
    state: PartitionState,
    live: Collection[int],
    shutting_down: Collection[int],
    *,
    controller_epoch: int,
) -> PartitionState | None:
    """Leadership away from brokers shutting down: the first live in-sync replica not shutting
    down; the ISR loses the brokers shutting down. None when nobody else may lead."""
    leader = next((r for r in assignment if r in live and r in state.isr and r not in shutting_down), None)
    if leader is None:
        return None
    isr = tuple(r for r in state.isr if r not in shutting_down)
    return PartitionState(leader, state.leader_epoch + 1, isr, controller_epoch, state.leader_recovery_state)


def bounced_replicas(state: PartitionState, broker_epochs: Mapping[int, int], state_modified: int) -> frozenset[int]:
    """The ISR members registered again since the partition state was last written: Kafka's
    bounced brokers, told by their broker epoch (the registration's creation stamp, in the same
    order as the state's last write).

    Such a replica restarted, or lost its session, after the state that keeps it in the ISR was
    written, and may hold less than it acknowledged (a machine's crash loses what was never
    flushed). Until a state is written after its return it leads nothing and keeps nobody's
    record safe: the controller takes it as a broker that died and started again, and a leader
    changing the ISR leaves it out. A broker not registered is not bounced (it is dead), and a
    leaderless state has none: it was written once its replicas were known dead, and the last
    in-sync replica it names is the one expected back to lead (as in Kafka)."""
    if state.leader == NO_LEADER:
        return frozenset()
    return frozenset(r for r in state.isr if broker_epochs.get(r, 0) > state_modified)


def remove_from_isr(state: PartitionState, replicas: Collection[int], *, controller_epoch: int) -> PartitionState:
    """The controller taking dead replicas out of the ISR (Kafka's removeReplicasFromIsr, one
    replica at a time): never the last member, which alone may lead cleanly when it returns; a
    removed leader leaves the partition without one. The epoch moves on, so no write of the old
    ISR lands and the leader hears of the change."""
    isr = list(state.isr)
    leader = state.leader
    for replica in sorted(replicas):
        if replica not in isr and replica != leader:
            continue
        if len(isr) > 1:
            isr = [r for r in isr if r != replica]
        if replica == leader:
            leader = NO_LEADER
    return replace(
        state, leader=leader, isr=tuple(isr), leader_epoch=state.leader_epoch + 1, controller_epoch=controller_epoch
    )


def initial_state(assignment: Sequence[int], live: Collection[int], *, controller_epoch: int) -> PartitionState:
    """A new partition: the live assigned replicas are the ISR, the first of them leads, epoch 0."""
    isr = tuple(r for r in assignment if r in live)
    return PartitionState(isr[0] if isr else NO_LEADER, 0, isr, controller_epoch)
