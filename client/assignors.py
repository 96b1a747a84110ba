"""Kafka's partition assignors: what the group leader runs to split partitions among members.

The leader of a consumer group gets every member's Subscription in its JoinGroup response and
the name of the assignor the group chose (the first of a member's preferred ones that every
member offers); it runs that assignor over the subscribed topics' partition counts and sends each
member's Assignment in SyncGroup. Both assignors are eager (every member gives up all its
partitions before a rebalance) and deterministic: the same members and partition counts give the
same assignment on any client, ours or Kafka's.

Member order, as Kafka's ``AbstractPartitionAssignor.MemberInfo``: members with a
group_instance_id first, by instance id, then the others by member id.

- ``range`` (Kafka's ``RangeAssignor``): per topic on its own, its subscribed members in order;
  with n partitions and c members, member i gets the consecutive partitions starting at
  ``i * (n // c) + min(i, n % c)``, ``n // c`` of them plus one for the first ``n % c`` members.
  Two members, two topics of 3 partitions: C0 [t0p0, t0p1, t1p0, t1p1], C1 [t0p2, t1p2].
- ``roundrobin`` (Kafka's ``RoundRobinAssignor``): every partition of every subscribed topic,
  sorted by topic then partition, dealt in turn to the members in order, skipping a member not
  subscribed to the partition's topic. Same example: C0 [t0p0, t0p2, t1p1], C1 [t0p1, t1p0, t1p2].

A topic missing from ``partitions_per_topic`` (not in metadata) is left unassigned, as Kafka does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import NamedTuple

from triolog.protocol.consumer_protocol import Assignment, Subscription

__all__ = ["ASSIGNORS", "Member", "assign", "range_assign", "roundrobin_assign"]


class Member(NamedTuple):
    member_id: str
    group_instance_id: str | None
    subscription: Subscription


def _order(member: Member) -> tuple:
    """Kafka's MemberInfo order: static members (by instance id) before dynamic (by member id)."""
    if member.group_instance_id is not None:
        return (0, member.group_instance_id, member.member_id)
    return (1, member.member_id, "")


def _assignments(members: list[Member], owned: dict[str, dict[str, list[int]]]) -> dict[str, Assignment]:
    return {
        member.member_id: Assignment(
            tuple((topic, tuple(parts)) for topic, parts in sorted(owned[member.member_id].items()))
        )
        for member in members
    }


def range_assign(partitions_per_topic: Mapping[str, int], members: list[Member]) -> dict[str, Assignment]:
    owned: dict[str, dict[str, list[int]]] = {member.member_id: {} for member in members}
    by_topic: dict[str, list[Member]] = {}
    for member in members:
        for topic in dict.fromkeys(member.subscription.topics):
            by_topic.setdefault(topic, []).append(member)
    for topic, subscribed in by_topic.items():
        count = partitions_per_topic.get(topic)
        if count is None:
            continue
        subscribed = sorted(subscribed, key=_order)
        per, extra = divmod(count, len(subscribed))
        for i, member in enumerate(subscribed):
            start = per * i + min(i, extra)
            length = per + (1 if i < extra else 0)
            if length:
                owned[member.member_id][topic] = list(range(start, start + length))
    return _assignments(members, owned)


def roundrobin_assign(partitions_per_topic: Mapping[str, int], members: list[Member]) -> dict[str, Assignment]:
    owned: dict[str, dict[str, list[int]]] = {member.member_id: {} for member in members}
    ordered = sorted(members, key=_order)
    subscribed = {member.member_id: set(member.subscription.topics) for member in members}
    topics = sorted(
        {topic for member in members for topic in member.subscription.topics if topic in partitions_per_topic}
    )
    turn = 0
    for topic in topics:
        for partition in range(partitions_per_topic[topic]):
            while topic not in subscribed[ordered[turn].member_id]:  # someone is: the topic came from a member
                turn = (turn + 1) % len(ordered)
            owned[ordered[turn].member_id].setdefault(topic, []).append(partition)
            turn = (turn + 1) % len(ordered)
    return _assignments(members, owned)


#: Assignor name (the JoinGroup protocol name, Kafka's) -> function.
ASSIGNORS: dict[str, Callable[[Mapping[str, int], list[Member]], dict[str, Assignment]]] = {
    "range": range_assign,
    "roundrobin": roundrobin_assign,
}


def assign(name: str, partitions_per_topic: Mapping[str, int], members: list[Member]) -> dict[str, Assignment]:
    """Run the assignor ``name`` (ValueError for one this client does not have)."""
    try:
        function = ASSIGNORS[name]
    except KeyError:
        raise ValueError(f"unknown partition assignor {name!r}; known: {', '.join(ASSIGNORS)}") from None
    return function(partitions_per_topic, members)
