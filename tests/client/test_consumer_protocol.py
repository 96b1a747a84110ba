"""Kafka's ConsumerProtocol bytes (Subscription, Assignment v0-3): golden vectors computed from
Kafka's schemas, every version against kafka-python's own codec, and round trips (hypothesis)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment as KpAssignment
from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription as KpSubscription

from triolog.protocol.consumer_protocol import (Assignment, ConsumerProtocolError, Subscription, decode_assignment,
                                                decode_subscription, encode_assignment, encode_subscription)


def h(text: str) -> bytes:
    return bytes.fromhex(text.replace(" ", ""))


def test_subscription_v0_golden_bytes():
    data = encode_subscription(Subscription(("orders",)), version=0)
    assert data == h("0000 00000001 0006 6f7264657273 ffffffff")
    assert decode_subscription(data) == Subscription(("orders",), version=0)


def test_subscription_v3_golden_bytes_is_the_default():
    data = encode_subscription(Subscription(("orders",)))
    assert data == h("0003 00000001 0006 6f7264657273 ffffffff 00000000 ffffffff ffff")
    assert decode_subscription(data) == Subscription(("orders",))


def test_assignment_v0_and_v3_golden_bytes():
    assignment = Assignment((("orders", (0, 1)),))
    body = "00000001 0006 6f7264657273 00000002 00000000 00000001 ffffffff"
    assert encode_assignment(assignment, version=0) == h("0000" + body)
    assert encode_assignment(assignment) == h("0003" + body)
    assert decode_assignment(h("0000" + body)).partitions() == [("orders", 0), ("orders", 1)]


def test_topics_and_owned_partitions_are_written_sorted_as_kafka_does():
    data = encode_subscription(Subscription(("b", "a"), owned_partitions=(("z", (2, 0)), ("y", (1,)))))
    decoded = decode_subscription(data)
    assert decoded.topics == ("a", "b")
    assert decoded.owned_partitions == (("y", (1,)), ("z", (0, 2)))


def test_newer_versions_are_read_as_v3_and_their_extra_bytes_ignored():
    v3 = encode_subscription(Subscription(("t",), b"u", (("t", (0,)),), 7, "rack-1"))
    v4 = b"\x00\x04" + v3[2:] + b"\x00\x00\x00\x09 future field"
    decoded = decode_subscription(v4)
    assert (decoded.topics, decoded.user_data, decoded.owned_partitions, decoded.generation_id, decoded.rack_id,
            decoded.version) == (("t",), b"u", (("t", (0,)),), 7, "rack-1", 3)
    assert decode_assignment(b"\x00\x05" + encode_assignment(Assignment((("t", (3,)),)))[2:]).partitions() == [("t", 3)]


def test_empty_assignment_bytes_are_an_empty_assignment():
    assert decode_assignment(b"").partitions() == []


@pytest.mark.parametrize("data", [b"\x00", b"\xff\xff", h("0003 00000001 0006 6f72"), h("0000 7fffffff"),
                                  h("0000 00000001 fffe"), h("0003 00000000 ffffffff 00000000"),
                                  h("0000 00000001 0002 ffff ffffffff")])
def test_malformed_subscriptions_raise_a_clear_error(data):
    with pytest.raises(ConsumerProtocolError):
        decode_subscription(data)


@pytest.mark.parametrize("data", [b"\x00\x00\x00", h("0000 00000001 0001 41 7ffffff0"), h("0000 00000000 fffffff0")])
def test_malformed_assignments_raise_a_clear_error(data):
    with pytest.raises(ConsumerProtocolError):
        decode_assignment(data)


names = st.text(min_size=0, max_size=12)
partitions = st.lists(st.integers(0, 2**31 - 1), max_size=5, unique=True).map(lambda ps: tuple(sorted(ps)))
topic_partitions = st.dictionaries(names, partitions, max_size=4).map(lambda d: tuple(sorted(d.items())))
subscriptions = st.builds(
    Subscription, topics=st.lists(names, max_size=5, unique=True).map(lambda ts: tuple(sorted(ts))),
    user_data=st.none() | st.binary(max_size=20), owned_partitions=topic_partitions,
    generation_id=st.integers(-2**31, 2**31 - 1), rack_id=st.none() | names)
assignments = st.builds(Assignment, assigned_partitions=topic_partitions, user_data=st.none() | st.binary(max_size=20))


def _cut(subscription: Subscription, version: int) -> Subscription:
    """What ``version`` keeps of a subscription (later fields at their defaults)."""
    return Subscription(subscription.topics, subscription.user_data,
                        subscription.owned_partitions if version >= 1 else (),
                        subscription.generation_id if version >= 2 else -1,
                        subscription.rack_id if version >= 3 else None, version)


@settings(max_examples=200, deadline=None)
@given(subscriptions, st.integers(0, 3))
def test_subscription_round_trip_and_kafka_python_agrees(subscription, version):
    data = encode_subscription(subscription, version)
    assert decode_subscription(data) == _cut(subscription, version)
    theirs = KpSubscription(
        version=version, topics=list(subscription.topics), user_data=subscription.user_data,
        owned_partitions=[(t, list(ps)) for t, ps in subscription.owned_partitions],
        generation_id=subscription.generation_id, rack_id=subscription.rack_id)
    assert theirs.encode(version=version) == data
    read = KpSubscription.decode(data)
    assert list(read.topics) == list(subscription.topics)
    assert read.user_data == subscription.user_data


@settings(max_examples=200, deadline=None)
@given(assignments, st.integers(0, 3))
def test_assignment_round_trip_and_kafka_python_agrees(assignment, version):
    data = encode_assignment(assignment, version)
    assert decode_assignment(data) == Assignment(assignment.assigned_partitions, assignment.user_data, version)
    theirs = KpAssignment(version=version, assigned_partitions=[(t, list(ps)) for t, ps in assignment.assigned_partitions],
                          user_data=assignment.user_data)
    assert theirs.encode(version=version) == data
    assert [(t, tuple(ps)) for t, ps in KpAssignment.decode(data).assigned_partitions] == \
        list(assignment.assigned_partitions)
