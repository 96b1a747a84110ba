"""Consumer groups on a cluster: __consumer_offsets is replicated (offsets.topic.replication.factor),
a group's coordinator is the leader of its partition, every broker names that one, and when it
stops the next leader takes the group over with its committed offsets."""

from __future__ import annotations

import time

from confluent_kafka import Consumer as KafkaConsumer, Producer as KafkaProducer
from confluent_kafka.admin import AdminClient as KafkaAdminClient, NewTopic

from tests.kafka.kafka_wire import connect, decode_response, encode_request, read_frame
from triolog.broker.coordinator.group.group_metadata_manager import partition_for
from triolog.protocol.errors import ErrorCode
from triolog.protocol.kafka.schema import build, request_class

from .helpers import kafka_bootstrap, wait_until

OFFSETS = ("offsets.topic.num.partitions=6",)


def _find_coordinator(broker, group: str) -> tuple[int, int, int]:
    """(error code, node id, port) of FindCoordinator v3 asked of ``broker``."""
    body = build(request_class(10, 3), {"key": group, "key_type": 0})
    sock = connect(f"127.0.0.1:{broker.kafka_port}")
    try:
        sock.sendall(encode_request(10, 3, 1, body))
        _, response = decode_response(10, 3, read_frame(sock))
    finally:
        sock.close()
    return response.error_code.value, response.node_id, response.port


def _consume(bootstrap: str, group: str, count: int) -> list[int]:
    consumer = KafkaConsumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 6000,
        }
    )
    consumer.subscribe(["work"])
    seen: list[int] = []
    deadline = time.monotonic() + 60
    while len(seen) < count and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            seen.append(int(message.value()))
            consumer.commit(message, asynchronous=False)
    consumer.close()
    return seen


def test_every_broker_names_the_leader_of_the_groups_partition_and_it_fails_over(start_brokers):
    brokers = start_brokers((1, 2, 3), *OFFSETS)
    bootstrap = kafka_bootstrap(brokers)
    admin = KafkaAdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("work", 1, 3)])["work"].result(30)
    producer = KafkaProducer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in range(20):
        producer.produce("work", str(i).encode(), partition=0)
    assert producer.flush(30) == 0

    assert _consume(bootstrap, "g", 10) == list(range(10))
    meta = admin.list_topics("__consumer_offsets", timeout=10).topics["__consumer_offsets"].partitions
    assert len(meta) == 6 and all(len(p.replicas) == 3 for p in meta.values())  # replicated
    leader = meta[partition_for("g", 6)].leader
    answers = {i: _find_coordinator(b, "g") for i, b in brokers.items()}
    assert {a[:2] for a in answers.values()} == {(ErrorCode.NONE, leader)}
    assert {a[2] for a in answers.values()} == {brokers[leader].kafka_port}

    brokers.pop(leader).stop()  # the coordinator goes: the partition's next leader loads the group
    bootstrap = kafka_bootstrap(brokers)
    assert wait_until(
        lambda: (a := _find_coordinator(next(iter(brokers.values())), "g"))[0] == ErrorCode.NONE and a[1] != leader
    )
    # The committed offsets moved with the group: the next member starts where the first stopped.
    assert _consume(bootstrap, "g", 10) == list(range(10, 20))


def test_fewer_brokers_than_the_offsets_replication_factor_answer_coordinator_not_available(start_brokers):
    brokers = start_brokers((1, 2, 3), *OFFSETS)  # offsets.topic.replication.factor is 3
    brokers[3].stop()
    assert wait_until(lambda: sorted(brokers[1].server.cluster.cache.brokers) == [1, 2])
    assert _find_coordinator(brokers[1], "early")[0] == ErrorCode.COORDINATOR_NOT_AVAILABLE
    brokers[3].start()
    assert wait_until(lambda: _find_coordinator(brokers[2], "early")[0] == ErrorCode.NONE)
