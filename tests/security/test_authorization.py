"""Kafka's authorization, against the real broker process: SASL users, the ACL authorizer on,
``super.users`` naming the admin. Every API is called as a principal with no ACLs, then with the
ACLs Kafka asks for that API, asserting the exact error codes; deny wins over allow, prefixed
patterns, the metadata listing filtered, and ACLs surviving a restart."""

from __future__ import annotations

import time

import pytest

from tests.e2e.broker_process import InProcessBroker
from triolog.protocol import messages as m
from triolog.protocol.errors import ErrorCode
from triolog.protocol.records import build_batch

from .sasl_client import MsgpackClient, logged_in
from .brokers import add_user

E = ErrorCode
TOPIC, GROUP = "orders", "billing"


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    data = tmp_path_factory.mktemp("authz") / "data"
    for user in ("admin", "alice", "bob"):
        add_user(data, user, f"{user}-secret")
    process = InProcessBroker(data, security="SASL_PLAINTEXT", kafka=True, kafka_security="SASL_PLAINTEXT", overrides=(
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer", "super.users=User:admin",
        "group.initial.rebalance.delay.ms=0"))
    process.start()
    admin = logged_in(process.port, "admin", "admin-secret")
    for name in (TOPIC, "logs-app", "other"):
        assert admin.call(m.CreateTopicsRequest, topics=(m.NewTopic(name=name, num_partitions=1, replication_factor=1),)
                          )["topics"][0]["error_code"] == 0
    yield process
    process.stop()


def _admin(broker):
    return logged_in(broker.port, "admin", "admin-secret")


def _acl(operation: str, *, resource_type="TOPIC", name=TOPIC, principal="User:alice", permission="ALLOW",
         pattern="LITERAL") -> m.AclEntry:
    return m.AclEntry(resource_type=resource_type, resource_name=name, pattern_type=pattern, principal=principal,
                      host="*", operation=operation, permission_type=permission)


def _grant(broker, *entries: m.AclEntry) -> None:
    answer = _admin(broker).call(m.CreateAclsRequest, creations=entries)
    assert [r["error_code"] for r in answer["results"]] == [0] * len(entries), answer


def _revoke_all(broker) -> None:
    _admin(broker).call(m.DeleteAclsRequest, filters=(m.AclFilter(),))


def _batch() -> bytes:
    return build_batch([(b"k", b"v", int(time.time() * 1000), ())])


# Each API as the matrix calls it: (request class, fields, where its error code is).
def _topic_code(doc):
    return doc["topics"][0]["error_code"]


def _partition_code(doc):
    return doc["topics"][0]["partitions"][0]["error_code"]


CALLS = {
    "produce": (m.ProduceRequest, dict(acks=1, timeout_ms=5000, topics=(m.ProduceTopic(name=TOPIC, partitions=(
        m.ProducePartition(partition=0, records=_batch()),)),)), _partition_code),
    "fetch": (m.FetchRequest, dict(max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, topics=(m.FetchTopic(
        name=TOPIC, partitions=(m.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20),)),)),
        _partition_code),
    "list_offsets": (m.ListOffsetsRequest, dict(topics=(m.ListOffsetsTopic(name=TOPIC, partitions=(
        m.ListOffsetsPartition(partition=0, timestamp=-1),)),)), _partition_code),
    "metadata": (m.MetadataRequest, dict(topics=(TOPIC,)), _topic_code),
    "delete_records": (m.DeleteRecordsRequest, dict(topics=(m.DeleteRecordsTopic(name=TOPIC, partitions=(
        m.DeleteRecordsPartition(partition=0, offset=0),)),)), _partition_code),
    "describe_configs": (m.DescribeConfigsRequest, dict(topics=(TOPIC,)), _topic_code),
    "alter_configs": (m.AlterConfigsRequest, dict(validate_only=True, topics=(m.AlterConfigsTopic(
        name=TOPIC, configs={"retention.ms": "1"}),)), _topic_code),
    "create_partitions": (m.CreatePartitionsRequest, dict(validate_only=True, topics=(m.CreatePartitionsTopic(
        name=TOPIC, count=2),)), _topic_code),
    "delete_topics": (m.DeleteTopicsRequest, dict(topics=("never-existed",)), _topic_code),
    "create_topics": (m.CreateTopicsRequest, dict(validate_only=True, topics=(m.NewTopic(
        name="new-topic", num_partitions=1, replication_factor=1),)), _topic_code),
    "describe_broker_configs": (m.DescribeConfigsRequest, dict(brokers=("",)), lambda d: d["brokers"][0]["error_code"]),
    "describe_log_dirs": (m.DescribeLogDirsRequest, dict(), lambda d: d["error_code"]),
    "init_producer_id": (m.InitProducerIdRequest, dict(), lambda d: d["error_code"]),
    "find_coordinator": (m.FindCoordinatorRequest, dict(key=GROUP), lambda d: d["error_code"]),
    "join_group": (m.JoinGroupRequest, dict(group_id=GROUP, session_timeout_ms=10000, protocol_type="consumer",
                                            protocols=(m.JoinGroupProtocol(name="range", metadata=b""),)),
                   lambda d: d["error_code"]),
    "heartbeat": (m.HeartbeatRequest, dict(group_id=GROUP, generation_id=1, member_id="nobody"),
                  lambda d: d["error_code"]),
    "offset_commit": (m.OffsetCommitRequest, dict(group_id=GROUP, topics=(m.OffsetCommitTopic(name=TOPIC, partitions=(
        m.OffsetCommitPartition(partition=0, committed_offset=0),)),)), _partition_code),
    "offset_fetch": (m.OffsetFetchRequest, dict(group_id=GROUP, topics=(m.OffsetFetchTopic(name=TOPIC, partitions=(0,)),)),
                     lambda d: d["error_code"] or d["topics"][0]["partitions"][0]["error_code"]),
    "describe_groups": (m.DescribeGroupsRequest, dict(groups=(GROUP,)), lambda d: d["groups"][0]["error_code"]),
    "delete_groups": (m.DeleteGroupsRequest, dict(groups_names=(GROUP,)), lambda d: d["results"][0]["error_code"]),
    "create_acls": (m.CreateAclsRequest, dict(creations=(_acl("READ", principal="User:bob"),)),
                    lambda d: d["results"][0]["error_code"]),
    "describe_acls": (m.DescribeAclsRequest, dict(), lambda d: d["error_code"]),
    "delete_acls": (m.DeleteAclsRequest, dict(filters=(m.AclFilter(principal="User:bob"),)),
                    lambda d: d["filter_results"][0]["error_code"]),
    "describe_user_scram_credentials": (m.DescribeUserScramCredentialsRequest, dict(), lambda d: d["error_code"]),
    "alter_user_scram_credentials": (m.AlterUserScramCredentialsRequest, dict(deletions=(m.ScramCredentialDeletion(
        name="nobody", mechanism="SCRAM-SHA-512"),)), lambda d: d["results"][0]["error_code"]),
    "describe_client_quotas": (m.DescribeClientQuotasRequest, dict(), lambda d: d["error_code"]),
    "alter_client_quotas": (m.AlterClientQuotasRequest, dict(validate_only=True, entries=(m.QuotaAlteration(
        entity=(m.QuotaEntityPart(entity_type="user", entity_name="bob"),),
        ops=(m.QuotaOp(key="producer_byte_rate", value=1000),)),)), lambda d: d["entries"][0]["error_code"]),
}

# api -> (the code with no ACL at all, the ACLs Kafka asks for, the code then)
MATRIX = {
    "produce": (E.TOPIC_AUTHORIZATION_FAILED, [_acl("WRITE")], E.NONE),
    "fetch": (E.TOPIC_AUTHORIZATION_FAILED, [_acl("READ")], E.NONE),
    "list_offsets": (E.TOPIC_AUTHORIZATION_FAILED, [_acl("DESCRIBE")], E.NONE),
    "metadata": (E.TOPIC_AUTHORIZATION_FAILED, [_acl("DESCRIBE")], E.NONE),
    "delete_records": (E.TOPIC_AUTHORIZATION_FAILED, [_acl("DELETE")], E.NONE),
    "describe_configs": (E.TOPIC_AUTHORIZATION_FAILED, [_acl("DESCRIBE_CONFIGS")], E.NONE),
    "alter_configs": (E.TOPIC_AUTHORIZATION_FAILED, [_acl("ALTER_CONFIGS")], E.NONE),
    "create_partitions": (E.TOPIC_AUTHORIZATION_FAILED, [_acl("ALTER")], E.NONE),
    "delete_topics": (E.TOPIC_AUTHORIZATION_FAILED, [_acl("DELETE", name="never-existed")],
                      E.UNKNOWN_TOPIC_OR_PARTITION),
    "create_topics": (E.TOPIC_AUTHORIZATION_FAILED, [_acl("CREATE", resource_type="CLUSTER", name="kafka-cluster")],
                      E.NONE),
    "describe_broker_configs": (E.CLUSTER_AUTHORIZATION_FAILED,
                                [_acl("DESCRIBE_CONFIGS", resource_type="CLUSTER", name="kafka-cluster")], E.NONE),
    "describe_log_dirs": (E.CLUSTER_AUTHORIZATION_FAILED, [_acl("DESCRIBE", resource_type="CLUSTER",
                                                                name="kafka-cluster")], E.NONE),
    "init_producer_id": (E.CLUSTER_AUTHORIZATION_FAILED, [_acl("WRITE", name="any-topic-at-all")], E.NONE),
    "find_coordinator": (E.GROUP_AUTHORIZATION_FAILED, [_acl("DESCRIBE", resource_type="GROUP", name=GROUP)], E.NONE),
    "join_group": (E.GROUP_AUTHORIZATION_FAILED, [_acl("READ", resource_type="GROUP", name=GROUP)],
                   E.MEMBER_ID_REQUIRED),
    "heartbeat": (E.GROUP_AUTHORIZATION_FAILED, [_acl("READ", resource_type="GROUP", name=GROUP)],
                  E.UNKNOWN_MEMBER_ID),
    "offset_commit": (E.GROUP_AUTHORIZATION_FAILED, [_acl("READ", resource_type="GROUP", name=GROUP)],
                      E.TOPIC_AUTHORIZATION_FAILED),
    "offset_fetch": (E.GROUP_AUTHORIZATION_FAILED, [_acl("DESCRIBE", resource_type="GROUP", name=GROUP)],
                     E.TOPIC_AUTHORIZATION_FAILED),
    "describe_groups": (E.GROUP_AUTHORIZATION_FAILED, [_acl("DESCRIBE", resource_type="GROUP", name=GROUP)], E.NONE),
    "delete_groups": (E.GROUP_AUTHORIZATION_FAILED, [_acl("DELETE", resource_type="GROUP", name=GROUP)],
                      E.GROUP_ID_NOT_FOUND),
    "create_acls": (E.CLUSTER_AUTHORIZATION_FAILED, [_acl("ALTER", resource_type="CLUSTER", name="kafka-cluster")],
                    E.NONE),
    "describe_acls": (E.CLUSTER_AUTHORIZATION_FAILED, [_acl("DESCRIBE", resource_type="CLUSTER",
                                                            name="kafka-cluster")], E.NONE),
    "delete_acls": (E.CLUSTER_AUTHORIZATION_FAILED, [_acl("ALTER", resource_type="CLUSTER", name="kafka-cluster")],
                    E.NONE),
    "describe_user_scram_credentials": (E.CLUSTER_AUTHORIZATION_FAILED, [_acl("DESCRIBE", resource_type="CLUSTER",
                                                                              name="kafka-cluster")], E.NONE),
    "alter_user_scram_credentials": (E.CLUSTER_AUTHORIZATION_FAILED, [_acl("ALTER", resource_type="CLUSTER",
                                                                           name="kafka-cluster")],
                                     E.RESOURCE_NOT_FOUND),
    "describe_client_quotas": (E.CLUSTER_AUTHORIZATION_FAILED, [_acl("DESCRIBE_CONFIGS", resource_type="CLUSTER",
                                                                     name="kafka-cluster")], E.NONE),
    "alter_client_quotas": (E.CLUSTER_AUTHORIZATION_FAILED, [_acl("ALTER_CONFIGS", resource_type="CLUSTER",
                                                                  name="kafka-cluster")], E.NONE),
}


def _call(client, api: str) -> int:
    request_class, fields, code_of = CALLS[api]
    return code_of(client.call(request_class, **fields))


@pytest.mark.parametrize("api", sorted(MATRIX))
def test_every_api_needs_the_acls_kafka_asks_for(broker, api):
    without, acls, granted = MATRIX[api]
    _revoke_all(broker)
    alice = logged_in(broker.port, "alice", "alice-secret")
    assert _call(alice, api) == without
    _grant(broker, *acls)
    try:
        assert _call(alice, api) == granted
        # another principal gets nothing from alice's ACLs
        assert _call(logged_in(broker.port, "bob", "bob-secret"), api) == without
    finally:
        _revoke_all(broker)


@pytest.mark.parametrize("api", sorted(MATRIX))
def test_super_users_may_do_everything(broker, api):
    _revoke_all(broker)
    without, _, _ = MATRIX[api]
    code = _call(_admin(broker), api)
    assert code not in (E.TOPIC_AUTHORIZATION_FAILED, E.GROUP_AUTHORIZATION_FAILED, E.CLUSTER_AUTHORIZATION_FAILED)


def test_deny_wins_over_allow(broker):
    _revoke_all(broker)
    _grant(broker, _acl("ALL"), _acl("READ", permission="DENY"))
    try:
        alice = logged_in(broker.port, "alice", "alice-secret")
        assert _call(alice, "fetch") == E.TOPIC_AUTHORIZATION_FAILED
        assert _call(alice, "produce") == E.NONE  # ALL allows what is not denied
        _grant(broker, _acl("ALL", principal="User:*", permission="DENY", name="*"))
        assert _call(alice, "produce") == E.TOPIC_AUTHORIZATION_FAILED  # a wildcard deny, too
    finally:
        _revoke_all(broker)


def test_a_prefixed_acl_covers_exactly_the_names_it_prefixes(broker):
    _revoke_all(broker)
    _grant(broker, _acl("WRITE", name="logs-", pattern="PREFIXED"))
    try:
        alice = logged_in(broker.port, "alice", "alice-secret")
        batch = (m.ProducePartition(partition=0, records=_batch()),)
        answer = alice.call(m.ProduceRequest, acks=1, timeout_ms=5000, topics=(
            m.ProduceTopic(name="logs-app", partitions=batch), m.ProduceTopic(name="other", partitions=batch)))
        assert [t["partitions"][0]["error_code"] for t in answer["topics"]] == [E.NONE, E.TOPIC_AUTHORIZATION_FAILED]
    finally:
        _revoke_all(broker)


def test_metadata_lists_only_the_topics_the_principal_may_describe(broker):
    _revoke_all(broker)
    _grant(broker, _acl("READ", name="logs-", pattern="PREFIXED"))
    try:
        alice = logged_in(broker.port, "alice", "alice-secret")
        assert [t["name"] for t in alice.call(m.MetadataRequest)["topics"]] == ["logs-app"]
        listed = _admin(broker).call(m.MetadataRequest)["topics"]
        assert {t["name"] for t in listed} >= {"logs-app", "orders", "other"}
    finally:
        _revoke_all(broker)


def test_acls_survive_a_restart(tmp_path):
    data = tmp_path / "data"
    add_user(data, "admin", "admin-secret")
    add_user(data, "alice", "alice-secret")
    overrides = ("authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                 "super.users=User:admin")
    process = InProcessBroker(data, security="SASL_PLAINTEXT", overrides=overrides).start()
    try:
        _admin(process).call(m.CreateTopicsRequest, topics=(m.NewTopic(name=TOPIC, num_partitions=1,
                                                                       replication_factor=1),))
        _grant(process, _acl("WRITE"))
    finally:
        process.stop()
    process = InProcessBroker(data, security="SASL_PLAINTEXT", overrides=overrides).start()
    try:
        alice = logged_in(process.port, "alice", "alice-secret")
        assert _call(alice, "produce") == E.NONE
        assert _call(alice, "fetch") == E.TOPIC_AUTHORIZATION_FAILED
        described = _admin(process).call(m.DescribeAclsRequest)["acls"]
        assert described == [{"resource_type": "TOPIC", "resource_name": TOPIC, "pattern_type": "LITERAL",
                              "principal": "User:alice", "host": "*", "operation": "WRITE",
                              "permission_type": "ALLOW"}]
    finally:
        process.stop()


def test_acl_apis_without_an_authorizer_are_security_disabled(tmp_path):
    process = InProcessBroker(tmp_path / "data").start()
    try:
        client = MsgpackClient(process.port)
        assert client.call(m.DescribeAclsRequest)["error_code"] == E.SECURITY_DISABLED
        answer = client.call(m.CreateAclsRequest, creations=(_acl("READ"),))
        assert answer["results"][0]["error_code"] == E.SECURITY_DISABLED
    finally:
        process.stop()


def test_kafka_clients_manage_acls_and_users_and_are_authorized(broker):
    """The same through the Kafka listener with librdkafka: AdminClient's ACL and SCRAM-user APIs
    as the super user, then a producer that is refused, then allowed."""
    confluent_kafka = pytest.importorskip("confluent_kafka")
    from confluent_kafka import admin as kadmin

    _revoke_all(broker)

    def settings(user):
        return {"bootstrap.servers": f"127.0.0.1:{broker.kafka_port}", "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": user, "sasl.password": f"{user}-secret"}

    admin = kadmin.AdminClient(settings("admin"))
    # a new user, made over the wire: the client salts and hashes, the password never travels
    upsert = kadmin.UserScramCredentialUpsertion(
        "carol", kadmin.ScramCredentialInfo(kadmin.ScramMechanism.SCRAM_SHA_512, 8192), b"carol-secret")
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result(timeout=10)
    described = admin.describe_user_scram_credentials(["carol"])["carol"].result(timeout=10)
    info = described.scram_credential_infos[0]
    assert (info.mechanism, info.iterations) == (kadmin.ScramMechanism.SCRAM_SHA_512, 8192)

    carol = confluent_kafka.Producer({**settings("carol"), "message.timeout.ms": 5000})
    outcomes = []
    carol.produce(TOPIC, value=b"refused", on_delivery=lambda err, msg: outcomes.append(err))
    carol.flush(10)
    assert outcomes[0] is not None and outcomes[0].code() == confluent_kafka.KafkaError.TOPIC_AUTHORIZATION_FAILED

    binding = kadmin.AclBinding(kadmin.ResourceType.TOPIC, TOPIC, kadmin.ResourcePatternType.LITERAL, "User:carol",
                                "*", kadmin.AclOperation.WRITE, kadmin.AclPermissionType.ALLOW)
    for future in admin.create_acls([binding]).values():
        future.result(timeout=10)
    listed = admin.describe_acls(kadmin.AclBindingFilter(
        kadmin.ResourceType.ANY, None, kadmin.ResourcePatternType.ANY, None, None, kadmin.AclOperation.ANY,
        kadmin.AclPermissionType.ANY)).result(timeout=10)
    assert listed == [binding]

    outcomes.clear()
    carol = confluent_kafka.Producer({**settings("carol"), "message.timeout.ms": 5000})
    carol.produce(TOPIC, value=b"allowed", on_delivery=lambda err, msg: outcomes.append(err))
    carol.flush(10)
    assert outcomes == [None]

    deleted = admin.delete_acls([kadmin.AclBindingFilter(
        kadmin.ResourceType.TOPIC, TOPIC, kadmin.ResourcePatternType.MATCH, "User:carol", None,
        kadmin.AclOperation.ANY, kadmin.AclPermissionType.ANY)])
    assert [b for f in deleted.values() for b in f.result(timeout=10)] == [binding]
    # alice may not manage users: CLUSTER_AUTHORIZATION_FAILED. (Not asked with
    # describe_user_scram_credentials: confluent-kafka 2.16 crashes the process on that response's
    # top-level error, which is Kafka's own answer; the msgpack matrix above covers it.)
    alice = kadmin.AdminClient(settings("alice"))
    with pytest.raises(confluent_kafka.KafkaException) as refused:
        alice.alter_user_scram_credentials([kadmin.UserScramCredentialDeletion(
            "carol", kadmin.ScramMechanism.SCRAM_SHA_512)])["carol"].result(timeout=10)
    assert refused.value.args[0].code() == confluent_kafka.KafkaError.CLUSTER_AUTHORIZATION_FAILED


def test_metadata_auto_creation_needs_create_and_else_is_topic_authorization_failed(broker):
    """Kafka: a topic metadata would auto-create, for a principal that may describe but not create
    it, is TOPIC_AUTHORIZATION_FAILED (so a producer fails fast instead of retrying)."""
    _revoke_all(broker)
    _grant(broker, _acl("DESCRIBE", name="auto-", pattern="PREFIXED"))
    try:
        alice = logged_in(broker.port, "alice", "alice-secret")
        answer = alice.call(m.MetadataRequest, topics=("auto-one",))
        assert answer["topics"][0]["error_code"] == E.TOPIC_AUTHORIZATION_FAILED
        assert alice.call(m.MetadataRequest, topics=("auto-one",), allow_auto_topic_creation=False
                          )["topics"][0]["error_code"] == E.UNKNOWN_TOPIC_OR_PARTITION
        _grant(broker, _acl("CREATE", name="auto-", pattern="PREFIXED"))
        assert alice.call(m.MetadataRequest, topics=("auto-one",))["topics"][0]["error_code"] == E.NONE
    finally:
        _revoke_all(broker)
