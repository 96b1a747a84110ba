"""The range and roundrobin assignors: Kafka's documented examples, and kafka-python's assignors
(an independent implementation) agreeing on random groups."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.coordinator.assignors.range import RangePartitionAssignor
from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription

from triolog.client.assignors import ASSIGNORS, Member, assign
from triolog.protocol.consumer_protocol import Subscription


def members(**subscribed: tuple[str, ...]) -> list[Member]:
    return [Member(name, None, Subscription(tuple(topics))) for name, topics in subscribed.items()]


def flat(result) -> dict[str, list[str]]:
    return {member: [f"{t}p{p}" for t, p in a.partitions()] for member, a in result.items()}


def test_range_kafka_javadoc_example():
    # RangeAssignor's javadoc: C0 and C1 on t0, t1 of 3 partitions each.
    result = assign("range", {"t0": 3, "t1": 3}, members(C0=("t0", "t1"), C1=("t0", "t1")))
    assert flat(result) == {"C0": ["t0p0", "t0p1", "t1p0", "t1p1"], "C1": ["t0p2", "t1p2"]}


def test_range_six_partitions_three_members():
    result = assign("range", {"orders": 6}, members(c=("orders",), a=("orders",), b=("orders",)))
    assert flat(result) == {"a": ["ordersp0", "ordersp1"], "b": ["ordersp2", "ordersp3"],
                            "c": ["ordersp4", "ordersp5"]}


def test_roundrobin_kafka_javadoc_examples():
    result = assign("roundrobin", {"t0": 3, "t1": 3}, members(C0=("t0", "t1"), C1=("t0", "t1")))
    assert flat(result) == {"C0": ["t0p0", "t0p2", "t1p1"], "C1": ["t0p1", "t1p0", "t1p2"]}
    # Unequal subscriptions: C0 on t0; C1 on t0, t1; C2 on t0, t1, t2 (1, 2, 3 partitions).
    result = assign("roundrobin", {"t0": 1, "t1": 2, "t2": 3},
                    members(C0=("t0",), C1=("t0", "t1"), C2=("t0", "t1", "t2")))
    assert flat(result) == {"C0": ["t0p0"], "C1": ["t1p0"], "C2": ["t1p1", "t2p0", "t2p1", "t2p2"]}


def test_static_members_come_first_by_instance_id():
    group = [Member("a-member", None, Subscription(("t",))), Member("z-member", "instance-1", Subscription(("t",)))]
    result = assign("range", {"t": 3}, group)
    assert flat(result) == {"z-member": ["tp0", "tp1"], "a-member": ["tp2"]}


def test_more_members_than_partitions_and_unknown_topics():
    result = assign("range", {"t": 1}, members(a=("t", "missing"), b=("t",)))
    assert flat(result) == {"a": ["tp0"], "b": []}
    assert flat(assign("roundrobin", {}, members(a=("missing",)))) == {"a": []}


def test_unknown_assignor_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown partition assignor 'sticky'"):
        assign("sticky", {}, [])


class _Cluster:
    def __init__(self, counts):
        self.counts = counts

    def partitions_for_topic(self, topic):
        return set(range(self.counts[topic])) if topic in self.counts else None


class _KpMember:
    def __init__(self, member: Member):
        self.member_id, self.group_instance_id = member.member_id, member.group_instance_id
        self.metadata = ConsumerProtocolSubscription(version=0, topics=list(member.subscription.topics), user_data=None)


TOPICS = ["t0", "t1", "t2", "t3"]
groups = st.dictionaries(st.text("abcdefgh", min_size=1, max_size=3),
                         st.lists(st.sampled_from(TOPICS), min_size=1, unique=True), min_size=1, max_size=6)
counts = st.fixed_dictionaries({t: st.integers(1, 9) for t in TOPICS[:3]})  # t3 is never in metadata


@settings(max_examples=300, deadline=None)
@given(groups, counts, st.sampled_from(sorted(ASSIGNORS)))
def test_kafka_python_assigns_the_same(subscribed, partition_counts, name):
    if name == "roundrobin":
        # kafka-python 3.0.12's roundrobin crashes (KeyError) when it must skip a member not
        # subscribed to a topic; the javadoc examples above cover that case.
        first = next(iter(subscribed.values()))
        subscribed = {member: first for member in subscribed}
    group = members(**subscribed)
    ours = {member: sorted(a.partitions()) for member, a in assign(name, partition_counts, group).items()}
    kp = {"range": RangePartitionAssignor, "roundrobin": RoundRobinPartitionAssignor}[name]
    theirs = kp.assign(_Cluster(partition_counts), [_KpMember(m) for m in group])
    assert ours == {member: sorted((t, p) for t, ps in a.assigned_partitions for p in ps)
                    for member, a in theirs.items()}
    # every partition of every subscribed, known topic goes to exactly one member subscribed to it
    owners = [tp for parts in ours.values() for tp in parts]
    assert len(owners) == len(set(owners))
    wanted = {(t, p) for topics in subscribed.values() for t in topics if t in partition_counts
              for p in range(partition_counts[t])}
    assert set(owners) == wanted
