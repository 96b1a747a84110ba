"""OffsetForLeaderEpoch (KIP-320): after a leader change, a Kafka client asks the new leader where
the epoch it last read ends, to learn whether its position is still in the log. Only the leader
answers, and only for the epoch it is in."""

from __future__ import annotations

from confluent_kafka import Producer as KafkaProducer
from confluent_kafka.admin import AdminClient as KafkaAdminClient, NewTopic

from tests.kafka.kafka_wire import connect, decode_response, encode_request, read_frame
from triolog.protocol.errors import ErrorCode
from triolog.protocol.kafka.schema import build, request_class

from .helpers import kafka_bootstrap, wait_until

API, VERSION = 23, 4


def _ask(broker, *partitions: tuple[str, int, int, int]) -> dict[tuple[str, int], tuple[int, int, int]]:
    """(topic, partition, current_leader_epoch, leader_epoch) -> (error, epoch, end offset)."""
    by_topic: dict[str, list[dict]] = {}
    for topic, partition, current, epoch in partitions:
        by_topic.setdefault(topic, []).append(
            {"partition": partition, "current_leader_epoch": current, "leader_epoch": epoch}
        )
    body = build(
        request_class(API, VERSION),
        {"replica_id": -1, "topics": [{"topic": t, "partitions": p} for t, p in by_topic.items()]},
    )
    sock = connect(f"127.0.0.1:{broker.kafka_port}")
    try:
        sock.sendall(encode_request(API, VERSION, 1, body))
        _, response = decode_response(API, VERSION, read_frame(sock))
    finally:
        sock.close()
    return {
        (t.topic, p.partition): (p.error_code.value, p.leader_epoch, p.end_offset)
        for t in response.topics
        for p in t.partitions
    }


def _produce(brokers, count: int, start: int) -> None:
    producer = KafkaProducer({"bootstrap.servers": kafka_bootstrap(brokers), "acks": "all", "linger.ms": 0})
    for i in range(start, start + count):
        producer.produce("epochs", str(i).encode(), partition=0)
    assert producer.flush(30) == 0


def test_the_leader_answers_where_each_epoch_ends(start_brokers):
    brokers = start_brokers((1, 2, 3), "controlled.shutdown.enable=false")
    admin = KafkaAdminClient({"bootstrap.servers": kafka_bootstrap(brokers)})
    admin.create_topics([NewTopic("epochs", 1, 3, config={"min.insync.replicas": "2"})])["epochs"].result(30)
    cache = brokers[1].server.cluster.cache
    assert wait_until(lambda: (v := cache.partition("epochs", 0)) is not None and len(v.isr) == 3)
    first = cache.partition("epochs", 0)
    _produce(brokers, 10, 0)

    brokers.pop(first.leader).stop()
    cache = next(iter(brokers.values())).server.cluster.cache
    assert wait_until(lambda: cache.partition("epochs", 0).leader not in (-1, first.leader))
    _produce(brokers, 5, 10)
    view = cache.partition("epochs", 0)
    leader, follower = brokers[view.leader], next(b for i, b in brokers.items() if i != view.leader)
    epoch = view.leader_epoch
    assert epoch > first.leader_epoch

    def ask(broker, current: int, wanted: int, topic: str = "epochs") -> tuple[int, int, int]:
        return _ask(broker, (topic, 0, current, wanted))[(topic, 0)]

    # The old leader's epoch ends where the new leader's began; the current one at the log end.
    assert ask(leader, epoch, first.leader_epoch) == (ErrorCode.NONE, first.leader_epoch, 10)
    assert ask(leader, epoch, epoch) == (ErrorCode.NONE, epoch, 15)
    assert ask(leader, -1, epoch) == (ErrorCode.NONE, epoch, 15)  # (no current epoch: unchecked)
    # Only the leader, in its own epoch, answers.
    assert ask(follower, epoch, epoch)[0] == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert ask(leader, epoch - 1, epoch)[0] == ErrorCode.FENCED_LEADER_EPOCH
    assert ask(leader, epoch + 1, epoch)[0] == ErrorCode.UNKNOWN_LEADER_EPOCH
    assert ask(leader, -1, 0, topic="nothing") == (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1, -1)
