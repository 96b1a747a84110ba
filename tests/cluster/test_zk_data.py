"""Kafka's ZooKeeper JSON, both ways: what a Kafka 3.x broker writes decodes to the same values,
what triolog writes decodes back unchanged (hypothesis), and bytes that are not Kafka's JSON are
refused with the znode named, never half-read."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from triolog.broker.cluster.zk_data import (
    BrokerRegistration,
    ControllerRegistration,
    PartitionState,
    ProducerIdBlock,
    RegisteredEndpoint,
    TopicAssignment,
    ZkDataError,
    decode_cluster_id,
    decode_controller_epoch,
    encode_cluster_id,
    encode_controller_epoch,
    ids_from_children,
    partition_state_path,
)

# As a Kafka 3.7 broker in ZooKeeper mode wrote them (KafkaZkClient; from a zookeeper-shell get).
KAFKA_BROKER = (
    b'{"features":{},"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT","SSL":"SSL"},'
    b'"endpoints":["PLAINTEXT://kafka-1:9092","SSL://kafka-1:9093"],"jmx_port":-1,"port":9092,'
    b'"host":"kafka-1","version":5,"timestamp":"1717000000000","rack":"r1"}'
)
KAFKA_STATE = b'{"controller_epoch":3,"leader":2,"version":1,"leader_epoch":7,"isr":[2,1]}'
KAFKA_TOPIC = (
    b'{"partitions":{"0":[1,2,3],"1":[2,3,1]},"topic_id":"AAAAAAAAAAAAAAAAAAAAAQ",'
    b'"adding_replicas":{},"removing_replicas":{},"version":3}'
)
KAFKA_CONTROLLER = b'{"version":2,"brokerid":2,"timestamp":"1717000000000","kraftControllerEpoch":-1}'


def test_what_kafka_writes_decodes():
    broker = BrokerRegistration.decode(1, KAFKA_BROKER)
    assert broker.rack == "r1" and broker.timestamp_ms == 1717000000000
    assert broker.endpoints == (
        RegisteredEndpoint("PLAINTEXT", "PLAINTEXT", "kafka-1", 9092),
        RegisteredEndpoint("SSL", "SSL", "kafka-1", 9093),
    )
    assert PartitionState.decode(KAFKA_STATE) == PartitionState(2, 7, (2, 1), 3)
    topic = TopicAssignment.decode("t", KAFKA_TOPIC)
    assert topic.partitions == {0: (1, 2, 3), 1: (2, 3, 1)} and topic.topic_id == "AAAAAAAAAAAAAAAAAAAAAQ"
    assert ControllerRegistration.decode(KAFKA_CONTROLLER) == ControllerRegistration(2, 1717000000000)
    assert decode_controller_epoch(b"12") == 12
    assert decode_cluster_id(b'{"version":"1","id":"x1y2"}') == "x1y2"
    assert ProducerIdBlock.decode(b'{"version":1,"broker":1,"block_start":"1000","block_end":"1999"}') == (
        ProducerIdBlock(1, 1000, 1999)
    )


def test_what_triolog_writes_has_kafkas_fields():
    import json

    broker = BrokerRegistration(
        3,
        (
            RegisteredEndpoint("PLAINTEXT", "PLAINTEXT", "127.0.0.1", 9092),
            RegisteredEndpoint("TRIOLOG", "SSL", "::1", 7),
        ),
        timestamp_ms=5,
    )
    obj = json.loads(broker.encode())
    assert obj["version"] == 5 and obj["host"] == "127.0.0.1" and obj["port"] == 9092 and "rack" not in obj
    assert obj["endpoints"] == ["PLAINTEXT://127.0.0.1:9092", "TRIOLOG://[::1]:7"]
    assert obj["listener_security_protocol_map"] == {"PLAINTEXT": "PLAINTEXT", "TRIOLOG": "SSL"}
    assert json.loads(PartitionState(1, 0, (1, 2), 4).encode()) == {
        "version": 1,
        "leader": 1,
        "leader_epoch": 0,
        "controller_epoch": 4,
        "isr": [1, 2],
    }
    assert partition_state_path("t", 3) == "/brokers/topics/t/partitions/3/state"


_ids = st.integers(-1, 2**31 - 1)
_names = st.text("ABCDEFGHIJKLMNOPQRSTUVWXYZ_", min_size=1, max_size=12)
_endpoints = st.builds(
    RegisteredEndpoint,
    _names,
    st.sampled_from(["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]),
    st.one_of(st.sampled_from(["127.0.0.1", "::1", "kafka-1.example"]), st.just("")),
    st.integers(0, 65535),
)


@given(
    st.builds(
        BrokerRegistration,
        st.integers(0, 2**31 - 1),
        st.lists(_endpoints, max_size=4, unique_by=lambda e: e.listener).map(tuple),
        st.one_of(st.none(), st.text(max_size=8)),
        st.integers(0, 2**62),
    )
)
def test_broker_registrations_round_trip(broker):
    assert BrokerRegistration.decode(broker.broker_id, broker.encode()) == broker


_replicas = st.lists(st.integers(0, 1000), max_size=5).map(tuple)


@given(
    st.builds(
        PartitionState, _ids, st.integers(0, 2**31 - 1), _replicas, st.integers(0, 2**31 - 1), st.sampled_from([0, 1])
    ),
    st.builds(
        TopicAssignment,
        st.dictionaries(st.integers(0, 10_000), _replicas, max_size=8),
        st.one_of(st.none(), st.text("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_", max_size=22)),
        st.dictionaries(st.integers(0, 10_000), _replicas, max_size=3),
        st.dictionaries(st.integers(0, 10_000), _replicas, max_size=3),
    ),
    st.builds(ProducerIdBlock, st.integers(0, 2**31), st.integers(0, 2**62), st.integers(0, 2**62)),
    st.integers(0, 2**31 - 1),
)
def test_states_assignments_and_blocks_round_trip(state, topic, block, epoch):
    assert PartitionState.decode(state.encode()) == state
    assert TopicAssignment.decode("t", topic.encode()) == topic
    assert ProducerIdBlock.decode(block.encode()) == block
    assert decode_controller_epoch(encode_controller_epoch(epoch)) == epoch
    assert ControllerRegistration.decode(ControllerRegistration(epoch, 9).encode()) == ControllerRegistration(epoch, 9)
    assert decode_cluster_id(encode_cluster_id("abc")) == "abc"


@pytest.mark.parametrize(
    "raw",
    [
        None,
        b"",
        b"\xff",
        b"[1]",
        b'{"leader":"1","leader_epoch":0,"isr":[],"controller_epoch":1}',
        b'{"leader":1,"leader_epoch":0,"isr":[true],"controller_epoch":1}',
        b'{"leader":1,"leader_epoch":0,"isr":[1],"controller_epoch":1,"leader_recovery_state":5}',
        b'{"leader":1,"leader_epoch":0,"controller_epoch":1}',
    ],
)
def test_a_partition_state_that_is_not_kafkas_json_is_refused_naming_it(raw):
    with pytest.raises(ZkDataError, match="/brokers/topics/t/partitions/0/state"):
        PartitionState.decode(raw, partition_state_path("t", 0))


def test_other_malformed_znodes_are_refused():
    with pytest.raises(ZkDataError, match="/brokers/ids/4"):
        BrokerRegistration.decode(4, b'{"endpoints":["no-scheme"],"listener_security_protocol_map":{}}')
    with pytest.raises(ZkDataError, match="/brokers/topics/t"):
        TopicAssignment.decode("t", b'{"partitions":{"x":[1]}}')
    with pytest.raises(ZkDataError, match="/controller_epoch"):
        decode_controller_epoch(b"one")
    with pytest.raises(ZkDataError, match="/cluster/id"):
        decode_cluster_id(b'{"version":"1"}')
    assert ids_from_children(["3", "1", "seqid", "10"]) == [1, 3, 10]
