"""Admin answers Kafka gives to what a client may well send, checked on the real broker process:
a CreateTopics naming a topic twice, a DescribeCluster asking for the controllers."""

from __future__ import annotations

import datetime

from kio.schema.create_topics.v5.request import CreatableTopic, CreateTopicsRequest
from kio.schema.describe_cluster.v1.request import DescribeClusterRequest
from kio.schema.metadata.v9.request import MetadataRequest, MetadataRequestTopic

from .kafka_wire import connect, decode_response, encode_request, read_frame


def _create(*topics: tuple[str, int]) -> CreateTopicsRequest:
    return CreateTopicsRequest(topics=tuple(
        CreatableTopic(name=name, num_partitions=count, replication_factor=1, assignments=(), configs=())
        for name, count in topics), timeout=datetime.timedelta(seconds=10), validate_only=False)


def test_create_topics_naming_a_topic_twice_refuses_every_entry_of_it_and_creates_the_others(bootstrap, topic):
    dup, other = f"{topic}-dup", f"{topic}-other"
    with connect(bootstrap) as sock:
        sock.sendall(encode_request(19, 5, 1, _create((dup, 1), (other, 1), (dup, 2)), client_id="dup-client"))
        _, body = decode_response(19, 5, read_frame(sock))
        answers = sorted((t.name, int(t.error_code)) for t in body.topics)
        assert answers == [(dup, 42), (dup, 42), (other, 0)]  # 42: INVALID_REQUEST, each entry
        assert all("duplicate" in t.error_message and "dup-client" in t.error_message
                   for t in body.topics if t.name == dup)
        sock.sendall(encode_request(3, 9, 2, MetadataRequest(
            topics=(MetadataRequestTopic(name=dup), MetadataRequestTopic(name=other)),
            allow_auto_topic_creation=False, include_topic_authorized_operations=False,
            include_cluster_authorized_operations=False)))
        _, metadata = decode_response(3, 9, read_frame(sock))
        assert {t.name: int(t.error_code) for t in metadata.topics} == {dup: 3, other: 0}  # dup never created


def test_create_topics_of_only_a_duplicated_name_creates_nothing(bootstrap, topic):
    with connect(bootstrap) as sock:
        sock.sendall(encode_request(19, 5, 1, _create((topic, 1), (topic, 1))))
        _, body = decode_response(19, 5, read_frame(sock))
        assert [int(t.error_code) for t in body.topics] == [42, 42]
        sock.sendall(encode_request(19, 5, 2, _create((topic, 1))))  # so it can be created after
        assert int(decode_response(19, 5, read_frame(sock))[1].topics[0].error_code) == 0


def test_describe_cluster_asking_for_the_controllers_is_unsupported_endpoint_type(bootstrap):
    with connect(bootstrap) as sock:
        sock.sendall(encode_request(60, 1, 1, DescribeClusterRequest(
            include_cluster_authorized_operations=False, endpoint_type=2)))
        _, body = decode_response(60, 1, read_frame(sock))
        # Kafka's UNSUPPORTED_ENDPOINT_TYPE (Errors.java: 115; 119 is INVALID_REGISTRATION)
        assert int(body.error_code) == 115 and body.error_message and not body.brokers
        sock.sendall(encode_request(60, 1, 2, DescribeClusterRequest(
            include_cluster_authorized_operations=False, endpoint_type=1)))
        _, body = decode_response(60, 1, read_frame(sock))
        assert int(body.error_code) == 0 and len(body.brokers) == 1
