"""The authorization matrix through the Kafka listener: the same principal and ACLs as
test_authorization, each Kafka API sent as a raw request (kio) after SaslHandshake and
SaslAuthenticate, asserting the exact error code where Kafka's response carries it."""

from __future__ import annotations

import socket
import time

import pytest
from scramp import ScramClient

from tests.kafka.kafka_wire import decode_response, encode_request, read_frame
from triolog.protocol.errors import ErrorCode
from triolog.protocol.kafka.schema import build, request_class
from triolog.protocol.records import build_batch

from .test_authorization import GROUP, TOPIC, _acl, _grant, _revoke_all, broker  # noqa: F401 (fixture)

E = ErrorCode


class KafkaClient:
    """Raw Kafka requests over a socket, logged in with SCRAM-SHA-256."""

    def __init__(self, port: int, user: str, password: str):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.ids = 0
        assert int(self.call(17, 1, {"mechanism": "SCRAM-SHA-256"}).error_code) == 0
        scram = ScramClient(["SCRAM-SHA-256"], user, password)
        first = self.call(36, 2, {"auth_bytes": scram.get_client_first().encode()})
        scram.set_server_first(first.auth_bytes.decode())
        final = self.call(36, 2, {"auth_bytes": scram.get_client_final().encode()})
        assert int(final.error_code) == 0, final.error_message

    def call(self, api_key: int, version: int, values: dict):
        self.ids += 1
        self.sock.sendall(encode_request(api_key, version, self.ids, build(request_class(api_key, version), values)))
        correlation_id, body = decode_response(api_key, version, read_frame(self.sock))
        assert correlation_id == self.ids
        return body


def _batch() -> bytes:
    return build_batch([(b"k", b"v", int(time.time() * 1000), ())])


def _code(value) -> int:
    return int(getattr(value, "value", value))


PARTITION = {"partition": 0}
CALLS = {
    "Produce": (0, 9, {"acks": 1, "timeout": 5000, "topic_data": [
        {"name": TOPIC, "partition_data": [{"index": 0, "records": _batch()}]}]},
        lambda r: r.responses[0].partition_responses[0].error_code),
    "Fetch": (1, 12, {"max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20, "session_epoch": -1, "topics": [
        {"topic": TOPIC, "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}],
        "forgotten_topics_data": []}, lambda r: r.responses[0].partitions[0].error_code),
    "ListOffsets": (2, 7, {"replica_id": -1, "topics": [
        {"name": TOPIC, "partitions": [{"partition_index": 0, "timestamp": -1}]}]},
        lambda r: r.topics[0].partitions[0].error_code),
    "Metadata": (3, 12, {"topics": [{"name": TOPIC}], "allow_auto_topic_creation": False},
                 lambda r: r.topics[0].error_code),
    "OffsetCommit": (8, 8, {"group_id": GROUP, "generation_id_or_member_epoch": -1, "member_id": "", "topics": [
        {"name": TOPIC, "partitions": [{"partition_index": 0, "committed_offset": 0}]}]},
        lambda r: r.topics[0].partitions[0].error_code),
    "OffsetFetch": (9, 7, {"group_id": GROUP, "topics": [{"name": TOPIC, "partition_indexes": [0]}]},
                    lambda r: _code(r.error_code) or r.topics[0].partitions[0].error_code),
    "FindCoordinator": (10, 3, {"key": GROUP, "key_type": 0}, lambda r: r.error_code),
    "JoinGroup": (11, 7, {"group_id": GROUP, "session_timeout": 10000, "rebalance_timeout": 10000, "member_id": "",
                          "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": b""}]},
                  lambda r: r.error_code),
    "DescribeGroups": (15, 5, {"groups": [GROUP]}, lambda r: r.groups[0].error_code),
    "CreateTopics": (19, 7, {"timeout": 5000, "validate_only": True, "topics": [
        {"name": "kafka-new", "num_partitions": 1, "replication_factor": 1}]}, lambda r: r.topics[0].error_code),
    "DeleteTopics": (20, 6, {"timeout": 5000, "topics": [{"name": "never-existed"}]},
                     lambda r: r.responses[0].error_code),
    "DeleteRecords": (21, 2, {"timeout": 5000, "topics": [
        {"name": TOPIC, "partitions": [{"partition_index": 0, "offset": 0}]}]},
        lambda r: r.topics[0].partitions[0].error_code),
    "InitProducerId": (22, 4, {"transactional_id": None, "transaction_timeout": -1, "producer_id": -1,
                               "producer_epoch": -1}, lambda r: r.error_code),
    "DescribeConfigs": (32, 4, {"resources": [{"resource_type": 2, "resource_name": TOPIC}]},
                        lambda r: r.results[0].error_code),
    "CreatePartitions": (37, 3, {"timeout": 5000, "validate_only": True, "topics": [
        {"name": TOPIC, "count": 2}]}, lambda r: r.results[0].error_code),
    "DeleteGroups": (42, 2, {"groups_names": [GROUP]}, lambda r: r.results[0].error_code),
}
CLUSTER = dict(resource_type="CLUSTER", name="kafka-cluster")
# Kafka API -> (code without ACLs, the ACLs Kafka asks for, code with them)
MATRIX = {
    "Produce": (E.TOPIC_AUTHORIZATION_FAILED, [_acl("WRITE")], E.NONE),
    "Fetch": (E.TOPIC_AUTHORIZATION_FAILED, [_acl("READ")], E.NONE),
    "ListOffsets": (E.TOPIC_AUTHORIZATION_FAILED, [_acl("DESCRIBE")], E.NONE),
    "Metadata": (E.TOPIC_AUTHORIZATION_FAILED, [_acl("DESCRIBE")], E.NONE),
    "OffsetCommit": (E.GROUP_AUTHORIZATION_FAILED, [_acl("READ", resource_type="GROUP", name=GROUP), _acl("READ")],
                     E.NONE),
    "OffsetFetch": (E.GROUP_AUTHORIZATION_FAILED, [_acl("DESCRIBE", resource_type="GROUP", name=GROUP),
                                                   _acl("DESCRIBE")], E.NONE),
    "FindCoordinator": (E.GROUP_AUTHORIZATION_FAILED, [_acl("DESCRIBE", resource_type="GROUP", name=GROUP)], E.NONE),
    "JoinGroup": (E.GROUP_AUTHORIZATION_FAILED, [_acl("READ", resource_type="GROUP", name=GROUP)],
                  E.MEMBER_ID_REQUIRED),
    "DescribeGroups": (E.GROUP_AUTHORIZATION_FAILED, [_acl("DESCRIBE", resource_type="GROUP", name=GROUP)], E.NONE),
    "CreateTopics": (E.TOPIC_AUTHORIZATION_FAILED, [_acl("CREATE", **CLUSTER)], E.NONE),
    "DeleteTopics": (E.TOPIC_AUTHORIZATION_FAILED, [_acl("DELETE", name="never-existed")],
                     E.UNKNOWN_TOPIC_OR_PARTITION),
    "DeleteRecords": (E.TOPIC_AUTHORIZATION_FAILED, [_acl("DELETE")], E.NONE),
    "InitProducerId": (E.CLUSTER_AUTHORIZATION_FAILED, [_acl("WRITE", name="some-topic")], E.NONE),
    "DescribeConfigs": (E.TOPIC_AUTHORIZATION_FAILED, [_acl("DESCRIBE_CONFIGS")], E.NONE),
    "CreatePartitions": (E.TOPIC_AUTHORIZATION_FAILED, [_acl("ALTER")], E.NONE),
    "DeleteGroups": (E.GROUP_AUTHORIZATION_FAILED, [_acl("DELETE", resource_type="GROUP", name=GROUP)],
                     E.GROUP_ID_NOT_FOUND),
}


def _call(client: KafkaClient, api: str) -> int:
    key, version, values, code_of = CALLS[api]
    return _code(code_of(client.call(key, version, values)))


@pytest.mark.parametrize("api", sorted(MATRIX))
def test_every_kafka_api_needs_the_acls_kafka_asks_for(broker, api):  # noqa: F811 (the fixture)
    without, acls, granted = MATRIX[api]
    _revoke_all(broker)
    alice = KafkaClient(broker.kafka_port, "alice", "alice-secret")
    assert _call(alice, api) == without
    _grant(broker, *acls)
    try:
        assert _call(alice, api) == granted
        assert _call(KafkaClient(broker.kafka_port, "bob", "bob-secret"), api) == without
    finally:
        _revoke_all(broker)


def test_kafka_metadata_lists_only_what_the_principal_may_describe(broker):  # noqa: F811
    _revoke_all(broker)
    _grant(broker, _acl("DESCRIBE", name="logs-", pattern="PREFIXED"))
    try:
        alice = KafkaClient(broker.kafka_port, "alice", "alice-secret")
        listed = alice.call(3, 12, {"topics": None, "allow_auto_topic_creation": False})
        assert [t.name for t in listed.topics] == ["logs-app"]
    finally:
        _revoke_all(broker)
