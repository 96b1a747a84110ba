"""Kafka's ZooKeeper JSON of SCRAM credentials, client quotas and ACLs, both ways: what Kafka writes
decodes, what triolog writes decodes back unchanged (hypothesis), and bytes that are not Kafka's
JSON are refused with the znode named, never read as an empty set."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, strategies as st

from triolog.broker.cluster import zk_security_data as data
from triolog.broker.cluster.zk_data import ZkDataError
from triolog.broker.security.acl import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    InvalidAclError,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from triolog.broker.security.quotas import QuotaEntity
from triolog.broker.security.scram import MAX_ITERATIONS, MIN_ITERATIONS, ScramCredential, ScramMechanism

# As Kafka 3.7 in ZooKeeper mode wrote them (kafka-configs.sh / kafka-acls.sh, from zookeeper-shell).
KAFKA_USER = (
    b'{"version":1,"config":{"SCRAM-SHA-512":"salt=MWtxOG56cGNvMGlpNmxvbm1wNGpxbXo=,'
    b"stored_key=mCocOEHfELYXqzW3AORhTuFdA8lX6t1c+qO3HOR34hJ3amWcVj6jDA80r9JmQZ3HrxpvR2tivDw5Kc3fLV7a+A==,"
    b"server_key=NsKhyO06rpcx2kLO/CaUxyr/YPpZk2Jw9f2H9PsNmftIV9MWt9Wr9ovgl6Ht9IFmC8ld0CJkN0p7iJOAnZ5s5w==,"
    b'iterations=4096","producer_byte_rate":"1024","controller_mutation_rate":"10"}}'
)
KAFKA_ACLS = (
    b'{"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow","operation":"Read","host":"*"},'
    b'{"principal":"User:bob","permissionType":"Deny","operation":"IdempotentWrite","host":"10.0.0.1"}]}'
)


def test_what_kafka_writes_decodes():
    entity, credentials, quotas = data.parse_entity_config(
        "users/alice", data.decode_entity_config(KAFKA_USER, "/config/users/alice")
    )
    assert entity == QuotaEntity.of(user="alice")
    assert list(credentials) == [ScramMechanism.SCRAM_SHA_512] and credentials[ScramMechanism.SCRAM_SHA_512].iterations == 4096
    # controller_mutation_rate is Kafka's, not enforced here: left in the znode, not refused.
    assert quotas == {"producer_byte_rate": 1024.0}
    pattern = ResourcePattern(ResourceType.TOPIC, "orders")
    assert data.decode_acls(pattern, KAFKA_ACLS) == {
        AclBinding(pattern, AccessControlEntry("User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW)),
        AclBinding(pattern, AccessControlEntry("User:bob", "10.0.0.1", AclOperation.IDEMPOTENT_WRITE, "DENY")),
    }
    assert data.decode_acl_change(b"Topic:orders", False, "n") == pattern
    extended = b'{"version":1,"resourceType":"GROUP","name":"app-","patternType":"PREFIXED"}'
    assert data.decode_acl_change(extended, True, "n") == ResourcePattern("GROUP", "app-", "PREFIXED")
    assert data.decode_config_change(b'{"version":2,"entity_path":"users/alice/clients/c1"}', "n") == (
        "users/alice/clients/c1"
    )


def test_paths_are_kafkas():
    assert data.acl_path(ResourcePattern("TRANSACTIONAL_ID", "tx")) == "/kafka-acl/TransactionalId/tx"
    assert data.acl_path(ResourcePattern("TOPIC", "pay", "PREFIXED")) == "/kafka-acl-extended/prefixed/Topic/pay"
    assert data.entity_path(QuotaEntity.of(user=None, client_id="a b*")) == "users/<default>/clients/a%20b%2A"
    assert data.entity_path(QuotaEntity.of(client_id=None)) == "clients/<default>"
    assert data.entity_path(QuotaEntity.of(ip="10.0.0.1")) == "ips/10.0.0.1"
    assert data.user_path("CN=x,O=y") == "users/CN%3Dx%2CO%3Dy"
    assert data.encode_acl_change(ResourcePattern("GROUP", "g")) == b"Group:g"
    with pytest.raises(InvalidAclError, match="cannot be stored in ZooKeeper"):
        data.acl_path(ResourcePattern("GROUP", "a/b"))


names = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=20)
znode_names = names.filter(lambda n: "/" not in n and n not in (".", ".."))


@given(names)
def test_sanitized_names_round_trip_and_are_znode_names(name):
    sanitized = data.sanitize(name)
    assert data.desanitize(sanitized) == name
    assert "/" not in sanitized and "*" not in sanitized and " " not in sanitized


@st.composite
def credentials(draw):
    mechanism = draw(st.sampled_from(list(ScramMechanism)))
    size = mechanism.hf().digest_size
    return ScramCredential(
        mechanism,
        draw(st.binary(min_size=12, max_size=40)),
        draw(st.binary(min_size=size, max_size=size)),
        draw(st.binary(min_size=size, max_size=size)),
        draw(st.integers(MIN_ITERATIONS, MAX_ITERATIONS)),
    )


@given(names, st.lists(credentials(), max_size=2), st.dictionaries(
    st.sampled_from(["producer_byte_rate", "consumer_byte_rate", "request_percentage"]),
    st.integers(1, 10**12) | st.floats(0.001, 1e6)))
def test_a_user_znode_round_trips(user, creds, quotas):
    config = {c.mechanism.value: data.credential_to_string(c) for c in creds}
    config.update({k: data.quota_to_string(k, v) for k, v in quotas.items()})
    raw = data.encode_entity_config(config)
    assert json.loads(raw) == {"version": 1, "config": config}
    path = data.user_path(user)
    entity, decoded_creds, decoded_quotas = data.parse_entity_config(path, data.decode_entity_config(raw, path))
    assert entity == QuotaEntity.of(user=user)
    assert decoded_creds == {c.mechanism: c for c in creds}
    assert decoded_quotas == {k: float(v) for k, v in quotas.items()}


@st.composite
def acl_sets(draw):
    pattern = ResourcePattern(
        draw(st.sampled_from([t for t in ResourceType if t not in (ResourceType.ANY, ResourceType.UNKNOWN)])),
        draw(znode_names),
        draw(st.sampled_from([PatternType.LITERAL, PatternType.PREFIXED])),
    )
    if pattern.resource_type == ResourceType.CLUSTER:
        pattern = ResourcePattern(ResourceType.CLUSTER, "kafka-cluster", PatternType.LITERAL)
    if pattern.pattern_type == PatternType.PREFIXED and pattern.name == "*":
        pattern = ResourcePattern(pattern.resource_type, "*", PatternType.LITERAL)
    entries = draw(st.lists(st.builds(
        AccessControlEntry,
        st.sampled_from(["User:*", "User:alice", "User:CN=a,O=b"]) | names.map(lambda n: f"User:{n}"),
        st.sampled_from(["*", "10.0.0.1", "::1"]),
        st.sampled_from([o for o in AclOperation if o not in (AclOperation.ANY, AclOperation.UNKNOWN)]),
        st.sampled_from([AclPermissionType.ALLOW, AclPermissionType.DENY]),
    ), min_size=1, max_size=6))
    return pattern, frozenset(AclBinding(pattern, e) for e in entries)


@given(acl_sets())
def test_an_acl_znode_and_its_notification_round_trip(acls):
    pattern, bindings = acls
    assert data.decode_acls(pattern, data.encode_acls(bindings)) == bindings
    extended = pattern.pattern_type == PatternType.PREFIXED
    assert data.decode_acl_change(data.encode_acl_change(pattern), extended, "n") == pattern
    assert data.acl_change_path(pattern).startswith(
        data.EXTENDED_ACL_CHANGES if extended else data.LITERAL_ACL_CHANGES)


@pytest.mark.parametrize("raw", [
    b"", b"not json", b"[]", b'{"version":2,"acls":[]}', b'{"version":1}', b'{"version":1,"acls":{}}',
    b'{"version":1,"acls":[{"principal":"User:a"}]}',
    b'{"version":1,"acls":[{"principal":"alice","permissionType":"Allow","operation":"Read","host":"*"}]}',
    b'{"version":1,"acls":[{"principal":"User:a","permissionType":"Maybe","operation":"Read","host":"*"}]}',
    b'{"version":1,"acls":[{"principal":"User:a","permissionType":"Allow","operation":"Fly","host":"*"}]}',
    b'{"version":1,"acls":[{"principal":"User:a","permissionType":"Allow","operation":"Any","host":"*"}]}',
    b'\xff\xfe',
])
def test_an_acl_znode_that_is_not_kafkas_json_is_refused_never_empty(raw):
    with pytest.raises(ZkDataError, match="/kafka-acl/Topic/t"):
        data.decode_acls(ResourcePattern("TOPIC", "t"), raw)


@pytest.mark.parametrize("raw", [
    b"not json", b'{"version":2,"config":{}}', b'{"version":1,"config":[]}', b'{"version":1,"config":{"a":1}}',
    b'{"version":1,"config":{"SCRAM-SHA-256":"salt=abc"}}',
    b'{"version":1,"config":{"SCRAM-SHA-256":"salt=!!,stored_key=a,server_key=b,iterations=4096"}}',
    b'{"version":1,"config":{"SCRAM-SHA-256":"salt=MWtxOG56cGNvMGlpNmxvbm1wNGpxbXo=,stored_key=AA==,'
    b'server_key=AA==,iterations=4096"}}',
    b'{"version":1,"config":{"producer_byte_rate":"fast"}}',
    b'{"version":1,"config":{"producer_byte_rate":"-5"}}',
])
def test_a_user_znode_that_is_not_kafkas_json_is_refused(raw):
    with pytest.raises(ZkDataError, match="/config/users/alice"):
        data.parse_entity_config("users/alice", data.decode_entity_config(raw, "/config/users/alice"))


@pytest.mark.parametrize("raw,extended", [
    (b"Topic", False), (b"Nothing:x", False), (b"{}", True), (b'{"version":1,"resourceType":"TOPIC","name":"x",'
                                                             b'"patternType":"LITERAL"}', True),
    (b'{"version":2,"entity_path":"users/a"}', True),
])
def test_notifications_that_are_not_kafkas_are_refused(raw, extended):
    with pytest.raises(ZkDataError):
        data.decode_acl_change(raw, extended, "n")


def test_entity_paths_that_name_no_entity_are_refused():
    for path in ("users", "users/a/b", "brokers/1", "users/a/clients/b/c"):
        with pytest.raises(ZkDataError):
            data.entity_from_path(path)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=12,
)
almost_kafka = st.builds(
    lambda acls, version: json.dumps({"version": version, "acls": acls}).encode(),
    st.lists(st.dictionaries(st.sampled_from(["principal", "permissionType", "operation", "host", "x"]),
                             st.sampled_from(["User:a", "Allow", "Deny", "Read", "*", "", "nope", "a"]) | json_values,
                             max_size=5), max_size=3),
    st.sampled_from([1, 1, 2, "1"]),
)


@given(st.binary(max_size=80) | json_values.map(lambda v: json.dumps(v).encode()) | almost_kafka)
def test_any_bytes_are_kafkas_acls_or_a_clear_error(raw):
    """Whatever a znode holds: the valid bindings it names, or ZkDataError naming it; never another
    exception (which would end a broker's follower) and never a set that lost an entry it had."""
    pattern = ResourcePattern("TOPIC", "t")
    try:
        bindings = data.decode_acls(pattern, raw)
    except ZkDataError as exc:
        assert "/kafka-acl/Topic/t" in str(exc)
        return
    doc = json.loads(raw)  # decoded: Kafka's JSON, every entry a valid binding (duplicates once)
    assert doc["version"] == 1 and bool(bindings) == bool(doc["acls"]) and len(bindings) <= len(doc["acls"])
    assert all(b.pattern == pattern for b in bindings)


@given(st.binary(max_size=80) | json_values.map(lambda v: json.dumps({"version": 1, "config": v}).encode()))
def test_any_bytes_are_a_users_config_or_a_clear_error(raw):
    try:
        data.parse_entity_config("users/alice", data.decode_entity_config(raw, "/config/users/alice"))
    except ZkDataError as exc:
        assert "/config/users/alice" in str(exc)


@given(st.binary(max_size=80), st.booleans())
def test_any_bytes_are_an_acl_change_or_a_clear_error(raw, extended):
    try:
        data.decode_acl_change(raw, extended, "/kafka-acl-changes/acl_changes_0000000001")
    except ZkDataError:
        pass
