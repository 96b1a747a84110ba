"""OffsetForLeaderEpoch on a standalone broker: every batch it wrote is of epoch 0, so epoch 0
ends at the log end, and a later epoch is unknown to it."""

from __future__ import annotations

from confluent_kafka import Producer as KafkaProducer
from confluent_kafka.admin import AdminClient as KafkaAdminClient, NewTopic

from triolog.protocol.errors import ErrorCode
from triolog.protocol.kafka.schema import build, request_class

from .kafka_wire import connect, decode_response, encode_request, read_frame


def _ask(bootstrap: str, topic: str, current: int, epoch: int) -> tuple[int, int, int]:
    body = build(
        request_class(23, 3),
        {
            "replica_id": -1,
            "topics": [
                {"topic": topic, "partitions": [{"partition": 0, "current_leader_epoch": current, "leader_epoch": epoch}]}
            ],
        },
    )
    sock = connect(bootstrap)
    try:
        sock.sendall(encode_request(23, 3, 5, body))
        correlation_id, response = decode_response(23, 3, read_frame(sock))
    finally:
        sock.close()
    assert correlation_id == 5
    (answer,) = [p for t in response.topics for p in t.partitions]
    return answer.error_code.value, answer.leader_epoch, answer.end_offset


def test_a_standalone_broker_answers_for_epoch_0(bootstrap, topic):
    admin = KafkaAdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    producer = KafkaProducer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i in range(7):
        producer.produce(topic, str(i).encode(), partition=0)
    assert producer.flush(30) == 0
    assert _ask(bootstrap, topic, -1, 0) == (ErrorCode.NONE, 0, 7)
    assert _ask(bootstrap, topic, 0, 0) == (ErrorCode.NONE, 0, 7)
    assert _ask(bootstrap, "no-such-topic", -1, 0)[0] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
