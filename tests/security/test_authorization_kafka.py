"""The authorization matrix through the Kafka listener: the same principal and ACLs as
test_authorization, each Kafka API sent as a raw request (kio) after SaslHandshake and
SaslAuthenticate, asserting the exact error code where Kafka's response carries it."""

from __future__ import annotations

import hashlib
import socket
import time

import pytest
from scramp import ScramClient

from tests.kafka.kafka_wire import decode_response, encode_request, read_frame
from triolog.protocol import messages as m
from triolog.protocol.errors import ErrorCode
from triolog.protocol.kafka.schema import build, request_class
from triolog.protocol.records import build_batch

from .test_authorization import GROUP, TOPIC, _acl, _admin, _grant, _revoke_all, broker  # noqa: F401 (fixture)

E = ErrorCode


class KafkaClient:
    """Raw Kafka requests over a socket, logged in with SCRAM-SHA-256."""

    def __init__(self, port: int, user: str, password: str, *, check: bool = True):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.ids = 0
        self.login = self.authenticate(user, password)
        assert self.login == 0 or not check, self.login

    def authenticate(self, user: str, password: str) -> int:
        """The SaslAuthenticate error code: 0 once logged in."""
        assert int(self.call(17, 1, {"mechanism": "SCRAM-SHA-256"}).error_code) == 0
        scram = ScramClient(["SCRAM-SHA-256"], user, password)
        first = self.call(36, 2, {"auth_bytes": scram.get_client_first().encode()})
        if _code(first.error_code):
            return _code(first.error_code)
        scram.set_server_first(first.auth_bytes.decode())
        return _code(self.call(36, 2, {"auth_bytes": scram.get_client_final().encode()}).error_code)

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


# -- the security admin APIs -----------------------------------------------------------------------
# Kafka (KafkaApis, AclApis, ControllerApis) checks one operation on the cluster for each and, when
# refused, answers with the request's getErrorResponse: the code at the top for DescribeAcls and
# DescribeClientQuotas (entries null), at the top and in a result per named user for
# DescribeUserScramCredentials, in every entry for CreateAcls, DeleteAcls and AlterClientQuotas,
# and per user (sorted, once each) for AlterUserScramCredentials.

CAF = E.CLUSTER_AUTHORIZATION_FAILED
ANY, LITERAL, TOPIC_TYPE, ALLOW, READ, WRITE = 1, 3, 2, 3, 3, 4
CAROL_READ = _acl("READ", principal="User:carol")
CAROL_WRITE = _acl("WRITE", principal="User:carol")
CAROL = [{"entity_type": "user", "entity_name": "carol"}]
NEW_USERS = {"dave": "dave-secret", "carol": "carol-secret"}  # upserted in this order


def _carol_acls(broker) -> set[str]:
    listed = _admin(broker).call(m.DescribeAclsRequest, principal="User:carol")["acls"]
    return {a["operation"] for a in listed}


def _carol_quota(broker) -> dict:
    entries = _admin(broker).call(m.DescribeClientQuotasRequest, components=(
        m.QuotaFilterComponent(entity_type="user", match="carol"),))["entries"]
    return entries[0]["values"] if entries else {}


def _set_carol_quota(broker, value: int | None) -> None:
    op = m.QuotaOp(key="producer_byte_rate", value=value or 0, remove=value is None)
    answer = _admin(broker).call(m.AlterClientQuotasRequest, entries=(m.QuotaAlteration(
        entity=(m.QuotaEntityPart(entity_type="user", entity_name="carol"),), ops=(op,)),))
    assert answer["entries"][0]["error_code"] == 0, answer


def _drop_new_users(broker) -> None:
    admin = _admin(broker)
    for user in NEW_USERS:  # RESOURCE_NOT_FOUND for a user not there: fine
        admin.call(m.AlterUserScramCredentialsRequest, deletions=(
            m.ScramCredentialDeletion(name=user, mechanism="SCRAM-SHA-256"),))


def _logs_in(broker, user: str) -> bool:
    return KafkaClient(broker.kafka_port, user, NEW_USERS[user], check=False).login == 0


def _upsertion(user: str) -> dict:
    salt, iterations = f"salt-of-{user}".encode(), 4096
    return {"name": user, "mechanism": 1, "iterations": iterations, "salt": salt,
            "salted_password": hashlib.pbkdf2_hmac("sha256", NEW_USERS[user].encode(), salt, iterations)}


def _wire_acl(entry: m.AclEntry) -> dict:
    return {"resource_type": TOPIC_TYPE, "resource_name": entry.resource_name, "resource_pattern_type": LITERAL,
            "principal": entry.principal, "host": "*", "permission_type": ALLOW,
            "operation": {"READ": READ, "WRITE": WRITE}[entry.operation]}


class AdminApi:
    """One security admin API as the matrix drives it: the raw request, its error codes where Kafka
    puts them (``codes``), those codes for a refused and for an allowed principal, the ACL Kafka
    asks for, the state the call acts on (``reset`` before each call) and whether it took effect."""

    def __init__(self, key, version, values, codes, refused, granted, acl, effect, reset=lambda broker: None,
                 any_order=False):
        self.key, self.version, self.values, self.codes = key, version, values, codes
        self.refused, self.granted, self.acl, self.effect, self.reset = refused, granted, acl, effect, reset
        self.any_order = any_order  # Kafka answers an allowed call in no set order

    def call(self, broker, user: str):
        self.reset(broker)
        client = KafkaClient(broker.kafka_port, user, f"{user}-secret")
        return client.call(self.key, self.version, self.values)

    def allowed(self, answer) -> bool:
        codes = self.codes(answer)
        return (sorted(codes) if self.any_order else codes) == self.granted


def _grant_carol_read(broker):
    _grant(broker, CAROL_READ)


def _clear_carol_quota(broker):
    _set_carol_quota(broker, None)


def _set_carol_quota_to_1024(broker):
    _set_carol_quota(broker, 1024)


def _codes(where):
    return lambda r: [_code(c) for c in where(r)]


ADMIN = {
    "DescribeAcls": AdminApi(
        29, 3, {"resource_type_filter": ANY, "resource_name_filter": None, "pattern_type_filter": ANY,
                "principal_filter": "User:carol", "host_filter": None, "operation": ANY, "permission_type": ANY},
        _codes(lambda r: [r.error_code, len(r.resources)]), [CAF, 0], [0, 1], _acl("DESCRIBE", **CLUSTER),
        lambda broker, r: [(x.resource_name, [a.operation for a in x.acls]) for x in r.resources] == [(TOPIC, [READ])],
        reset=_grant_carol_read),
    "CreateAcls": AdminApi(
        30, 3, {"creations": [_wire_acl(CAROL_READ), _wire_acl(CAROL_WRITE)]},
        _codes(lambda r: [x.error_code for x in r.results]), [CAF, CAF], [0, 0], _acl("ALTER", **CLUSTER),
        lambda broker, r: _carol_acls(broker) == {"READ", "WRITE"}),
    "DeleteAcls": AdminApi(
        31, 3, {"filters": [{"resource_type_filter": TOPIC_TYPE, "resource_name_filter": TOPIC,
                             "pattern_type_filter": LITERAL, "principal_filter": "User:carol", "host_filter": None,
                             "operation": ANY, "permission_type": ANY}]},
        _codes(lambda r: [x.error_code for x in r.filter_results] + [len(x.matching_acls) for x in r.filter_results]),
        [CAF, 0], [0, 1], _acl("ALTER", **CLUSTER),
        lambda broker, r: _carol_acls(broker) == set(), reset=_grant_carol_read),
    "DescribeClientQuotas": AdminApi(
        48, 1, {"components": [{"entity_type": "user", "match_type": 0, "match": "carol"}], "strict": False},
        _codes(lambda r: [r.error_code, r.entries is None]), [CAF, True], [0, False],
        _acl("DESCRIBE_CONFIGS", **CLUSTER),
        lambda broker, r: [(v.key, v.value) for e in r.entries or () for v in e.values] == [("producer_byte_rate",
                                                                                            1024)],
        reset=_set_carol_quota_to_1024),
    "AlterClientQuotas": AdminApi(
        49, 1, {"entries": [{"entity": CAROL, "ops": [{"key": "producer_byte_rate", "value": 2048.0,
                                                       "remove": False}]}], "validate_only": False},
        lambda r: [(_code(e.error_code), [(p.entity_type, p.entity_name) for p in e.entity]) for e in r.entries],
        [(CAF, [("user", "carol")])], [(0, [("user", "carol")])], _acl("ALTER_CONFIGS", **CLUSTER),
        lambda broker, r: _carol_quota(broker) == {"producer_byte_rate": 2048}, reset=_clear_carol_quota),
    "DescribeUserScramCredentials": AdminApi(
        50, 0, {"users": [{"name": "alice"}, {"name": "admin"}]},
        _codes(lambda r: [r.error_code, *(x.error_code for x in r.results)]), [CAF, CAF, CAF], [0, 0, 0],
        _acl("DESCRIBE", **CLUSTER),
        lambda broker, r: {(x.user, c.mechanism) for x in r.results for c in x.credential_infos}
        >= {("alice", 1), ("admin", 1)}),
    "AlterUserScramCredentials": AdminApi(
        51, 0, {"deletions": [], "upsertions": [_upsertion(user) for user in NEW_USERS]},
        lambda r: [(x.user, _code(x.error_code)) for x in r.results], [("carol", CAF), ("dave", CAF)],
        [("carol", 0), ("dave", 0)], _acl("ALTER", **CLUSTER),
        lambda broker, r: all(_logs_in(broker, user) for user in NEW_USERS), reset=_drop_new_users, any_order=True),
}


@pytest.mark.parametrize("api", sorted(ADMIN))
def test_every_security_admin_api_needs_the_cluster_acl_kafka_asks_for(broker, api):  # noqa: F811
    """Refused without the ACL (the codes where Kafka puts them, nothing done), NONE and done with
    it, still refused for another principal, and NONE and done for the super user with no ACL."""
    case = ADMIN[api]
    _revoke_all(broker)
    try:
        answer = case.call(broker, "alice")
        assert case.codes(answer) == case.refused
        assert not case.effect(broker, answer)
        _grant(broker, case.acl)
        answer = case.call(broker, "alice")
        assert case.allowed(answer), case.codes(answer)
        assert case.effect(broker, answer)
        assert case.codes(case.call(broker, "bob")) == case.refused
        _revoke_all(broker)
        answer = case.call(broker, "admin")
        assert case.allowed(answer), case.codes(answer)
        assert case.effect(broker, answer)
    finally:
        _revoke_all(broker)
        _clear_carol_quota(broker)
        _drop_new_users(broker)
