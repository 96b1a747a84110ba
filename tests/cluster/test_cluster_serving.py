"""Three brokers with zookeeper.connect serve one cluster: a topic created on any of them is placed
over all three (Kafka's assignment, one leader elected per partition); Metadata on either
listener of any broker names every broker, the controller, and per partition its leader, epoch,
replicas and ISR; only a partition's leader takes its writes and serves its reads, the others
answer NOT_LEADER_OR_FOLLOWER; Kafka's own client, routing by leader, writes and reads every
partition through the cluster. A leader's death moves its partitions to the next in-sync replica
with a new epoch."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer as KafkaConsumer, Producer as KafkaProducer, TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient as KafkaAdminClient, NewTopic

from tests.e2e.broker_process import WireClient
from triolog.protocol import messages as m
from triolog.protocol.errors import ErrorCode
from triolog.testing import InProcessBroker

from .helpers import kafka_bootstrap as _bootstrap, wait_until as _wait


@pytest.fixture
def brokers(start_brokers):
    return start_brokers((1, 2, 3), per_broker=lambda broker_id: (f"broker.rack=rack-{broker_id}",))


def _metadata(broker: InProcessBroker, topic: str) -> dict:
    client = WireClient("127.0.0.1", broker.port)
    try:
        return client.call(m.MetadataRequest(id=client.next_id(), topics=(topic,), allow_auto_topic_creation=False))
    finally:
        client.close()


def test_a_topic_is_placed_over_the_cluster_and_described_the_same_by_every_broker(brokers):
    admin = KafkaAdminClient({"bootstrap.servers": _bootstrap(brokers)})
    admin.create_topics([NewTopic("orders", 6, 3)])["orders"].result(30)
    cluster = admin.list_topics(timeout=10)
    assert sorted(cluster.brokers) == [1, 2, 3]
    assert {b.id: (b.host, b.port) for b in cluster.brokers.values()} == {
        i: ("127.0.0.1", broker.kafka_port) for i, broker in brokers.items()
    }
    assert cluster.controller_id in (1, 2, 3)
    partitions = cluster.topics["orders"].partitions
    assert sorted(partitions) == list(range(6))
    leaders = [p.leader for p in partitions.values()]
    assert sorted(leaders) == [1, 1, 2, 2, 3, 3]  # Kafka's round robin spreads the leaders
    for p in partitions.values():
        assert sorted(p.replicas) == [1, 2, 3] and p.leader == p.replicas[0]  # the preferred replica leads
        assert sorted(p.isrs) == [1, 2, 3]

    # triolog's own protocol, asked of each broker: the same view, its own listener's addresses
    # (each broker follows ZooKeeper on its own: a moment after the create, all agree).
    expected = [(partitions[i].leader, 0, tuple(partitions[i].replicas)) for i in range(6)]

    def agreed(broker):
        view = _metadata(broker, "orders")
        parts = view["topics"][0]["partitions"]
        return view if [(p["leader"], p["leader_epoch"], tuple(p["replicas"])) for p in parts] == expected else None

    views = [_wait(lambda b=b: agreed(b)) for b in brokers.values()]
    for view in views:
        assert view, "a broker's view never agreed with the cluster's"
        assert [(b["node_id"], b["port"], b["rack"]) for b in view["brokers"]] == [
            (i, b.port, f"rack-{i}") for i, b in brokers.items()
        ]
        assert view["controller_id"] == cluster.controller_id
        (topic,) = view["topics"]
        assert all(sorted(p["isr"]) == [1, 2, 3] and p["offline_replicas"] == [] for p in topic["partitions"])


def _produce_raw(broker: InProcessBroker, topic: str, partition: int) -> dict:
    from tests.storage.helpers import producer_batch

    client = WireClient("127.0.0.1", broker.port)
    try:
        batch = producer_batch(1, timestamp=time.time_ns() // 1_000_000, value_size=1)
        request = m.ProduceRequest(
            id=client.next_id(),
            acks=1,
            timeout_ms=5000,
            topics=(m.ProduceTopic(name=topic, partitions=(m.ProducePartition(partition=partition, records=batch),)),),
        )
        return client.call(request)
    finally:
        client.close()


def test_only_the_leader_takes_writes_and_kafkas_client_routes_to_it(brokers):
    admin = KafkaAdminClient({"bootstrap.servers": _bootstrap(brokers)})
    # One replica per partition: with three partitions each broker leads one (no replication yet
    # to wait for: what is written is committed at once).
    admin.create_topics([NewTopic("routed", 3, 1)])["routed"].result(30)
    partitions = admin.list_topics(timeout=10).topics["routed"].partitions
    assert sorted(p.leader for p in partitions.values()) == [1, 2, 3]

    leader = partitions[0].leader
    # The leader takes the write once it has applied the new state (each broker follows
    # ZooKeeper on its own: a moment after the create's answer, NOT_LEADER_OR_FOLLOWER, which
    # clients retry).
    accepted = _wait(
        lambda: _produce_raw(brokers[leader], "routed", 0)["topics"][0]["partitions"][0]["error_code"] == 0
    )
    assert accepted
    for follower in (i for i in brokers if i != leader):
        # (LEADER_NOT_AVAILABLE until this broker's metadata has the partition's state, a moment)
        refused = _wait(
            lambda follower=follower: (r := _produce_raw(brokers[follower], "routed", 0))["topics"][0]["partitions"][0][
                "error_code"
            ]
            == ErrorCode.NOT_LEADER_OR_FOLLOWER
            and r
        )
        assert refused, _produce_raw(brokers[follower], "routed", 0)
        (row,) = refused["topics"][0]["partitions"]
        assert row["error_code"] == ErrorCode.NOT_LEADER_OR_FOLLOWER
        assert f"broker {leader} is" in row["error_message"]

    producer = KafkaProducer({"bootstrap.servers": _bootstrap(brokers), "acks": "all", "linger.ms": 5})
    for i in range(300):
        producer.produce("routed", value=str(i).encode(), partition=i % 3)
    assert producer.flush(30) == 0

    consumer = KafkaConsumer(
        {"bootstrap.servers": _bootstrap(brokers), "group.id": "unused", "enable.auto.commit": False}
    )
    consumer.assign([KafkaTopicPartition("routed", p, 0) for p in range(3)])
    seen = {}
    deadline = time.monotonic() + 30
    while len(seen) < 301 and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            seen[(message.partition(), message.offset())] = message.value()
    consumer.close()
    assert sorted(v for (p, o), v in seen.items() if (p, o) != (0, 0)) == sorted(str(i).encode() for i in range(300))
    for p in range(3):  # in order, from offset 0, per partition
        offsets = sorted(o for (q, o) in seen if q == p)
        assert offsets == list(range(len(offsets)))


def test_a_dead_leaders_partitions_move_to_the_next_in_sync_replica(brokers):
    admin = KafkaAdminClient({"bootstrap.servers": _bootstrap(brokers)})
    admin.create_topics([NewTopic("moving", 3, 3)])["moving"].result(30)
    before = admin.list_topics(timeout=10).topics["moving"].partitions
    victim = before[0].leader
    brokers.pop(victim).stop()
    survivor = next(iter(brokers.values()))

    def moved():
        view = _metadata(survivor, "moving")
        parts = view["topics"][0]["partitions"]
        return all(p["leader"] != victim and p["leader"] >= 0 for p in parts) and view

    view = _wait(moved)
    assert view, "the dead leader's partitions got no new leader"
    assert sorted(b["node_id"] for b in view["brokers"]) == sorted(brokers)
    for p in view["topics"][0]["partitions"]:
        if before[p["partition"]].leader == victim:
            assert p["leader_epoch"] == 1 and victim not in p["isr"]
            # the first live in-sync replica in assignment order
            assert p["leader"] == next(r for r in before[p["partition"]].replicas if r != victim)
        assert victim in p["offline_replicas"]


def test_triolog_topics_describe_shows_each_partitions_replicas_and_isr(brokers):
    from triolog.testing import run_cli

    admin = KafkaAdminClient({"bootstrap.servers": _bootstrap(brokers)})
    admin.create_topics([NewTopic("described", 2, 3)])["described"].result(30)
    partitions = admin.list_topics(timeout=10).topics["described"].partitions
    member = brokers[1]
    described = run_cli(
        "topics", "--bootstrap-server", f"127.0.0.1:{member.port}", "--describe", "--topic", "described"
    )
    assert described.code == 0, described.stderr
    lines = described.out.splitlines()
    assert lines[0].startswith("Topic: described\tPartitionCount: 2\tReplicationFactor: 3\t")
    for line, p in zip(lines[1:], (partitions[0], partitions[1])):
        fields = dict(field.split(": ", 1) for field in line.strip().split("\t"))
        assert fields["Leader"] == str(p.leader)
        assert fields["Replicas"] == ",".join(map(str, p.replicas))
        assert sorted(map(int, fields["Isr"].split(","))) == [1, 2, 3]
