"""Produce with acks=0 on the real broker process: Kafka never answers one; when it fails (a
partition named twice, an unknown topic, a corrupt batch, any partition's error) Kafka closes the
connection instead, which is how the producer learns to refresh its metadata. An answer would
desynchronise the client's correlation ids; silence would hide the failure."""

from __future__ import annotations

import datetime
import struct
import time

from kio.schema.create_topics.v5.request import CreatableTopic, CreateTopicsRequest
from kio.schema.metadata.v9.request import MetadataRequest

from triolog.protocol.kafka.schema import build, request_class
from triolog.protocol.records import Record, encode_batch

from tests.waiting import wait_for

from .kafka_wire import connect, decode_response, encode_request, read_frame


def _batch(value: bytes = b"x") -> bytes:
    return encode_batch([Record(offset=0, timestamp=int(time.time() * 1000), key=None, value=value)])


def _produce(correlation_id: int, acks: int, partitions: list[tuple[str, int, bytes]]) -> bytes:
    topics: dict[str, list] = {}
    for name, index, records in partitions:
        topics.setdefault(name, []).append({"index": index, "records": records})
    body = build(request_class(0, 9), {"transactional_id": None, "acks": acks, "timeout": 5000, "topic_data": [
        {"name": name, "partition_data": parts} for name, parts in topics.items()]})
    return encode_request(0, 9, correlation_id, body)


def _metadata(correlation_id: int) -> bytes:
    return encode_request(3, 9, correlation_id, MetadataRequest(
        topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False,
        include_cluster_authorized_operations=False))


def _create(bootstrap: str, name: str, partitions: int = 1) -> None:
    with connect(bootstrap) as sock:
        sock.sendall(encode_request(19, 5, 1, CreateTopicsRequest(topics=(CreatableTopic(
            name=name, num_partitions=partitions, replication_factor=1, assignments=(), configs=()),),
            timeout=datetime.timedelta(seconds=5), validate_only=False)))
        assert decode_response(19, 5, read_frame(sock))[1].topics[0].error_code == 0


def _acks0_warnings(broker, correlation_id: int) -> list[dict]:
    return [e for e in broker.events() if e.get("event") == "kafka_produce_acks0_failed"
            and e.get("correlation_id") == correlation_id and e.get("level") == "warning"]


def test_a_good_acks0_produce_is_not_answered_and_the_next_answer_carries_its_own_id(bootstrap, topic):
    _create(bootstrap, topic)
    with connect(bootstrap) as sock:
        sock.sendall(_produce(10, 0, [(topic, 0, _batch())]) + _metadata(11))
        assert struct.unpack(">i", read_frame(sock)[:4])[0] == 11


def test_an_acks0_produce_naming_a_partition_twice_closes_unanswered(kafka_broker, bootstrap, topic):
    _create(bootstrap, topic)
    with connect(bootstrap) as sock:
        # Before: the INVALID_REQUEST body was sent, and read as the Metadata's answer.
        sock.sendall(_produce(20, 0, [(topic, 0, _batch()), (topic, 0, _batch())]) + _metadata(21))
        assert read_frame(sock) is None
    wait_for(lambda: _acks0_warnings(kafka_broker, 20), 10, "the WARNING saying why")
    (warning,) = _acks0_warnings(kafka_broker, 20)
    assert any("INVALID_REQUEST" in e and f"{topic}-0" in e for e in warning["errors"])


def test_an_acks0_produce_to_an_unknown_topic_closes_with_the_partitions_error(kafka_broker, bootstrap, topic):
    with connect(bootstrap) as sock:
        sock.sendall(_produce(30, 0, [(f"{topic}-missing", 0, _batch())]) + _metadata(31))
        assert read_frame(sock) is None  # before: silence, then the Metadata answered
    wait_for(lambda: _acks0_warnings(kafka_broker, 30), 10, "the WARNING naming the error")
    (warning,) = _acks0_warnings(kafka_broker, 30)
    assert any(f"{topic}-missing-0" in e and "UNKNOWN_TOPIC_OR_PARTITION" in e for e in warning["errors"])


def test_an_acks0_produce_of_a_corrupt_batch_closes_and_counts_its_error(kafka_broker, bootstrap, topic):
    _create(bootstrap, topic, partitions=2)
    bad = bytearray(_batch())
    bad[-1] ^= 0xFF  # the CRC no longer matches
    with connect(bootstrap) as sock:
        # One good partition, one corrupt: any failed partition closes the connection.
        sock.sendall(_produce(40, 0, [(topic, 0, _batch()), (topic, 1, bytes(bad))]) + _metadata(41))
        assert read_frame(sock) is None
    wait_for(lambda: _acks0_warnings(kafka_broker, 40), 10, "the WARNING naming the error")
    (warning,) = _acks0_warnings(kafka_broker, 40)
    assert len(warning["errors"]) == 1 and f"{topic}-1" in warning["errors"][0]
    assert not [e for e in kafka_broker.events() if e.get("event") == "request_failed"]
