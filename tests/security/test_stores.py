"""AclStore and CredentialStore: durable across reopen, atomic, loud about corrupt files, and the
users file holds no password."""

from __future__ import annotations

import json
import os
import stat

import pytest

from triolog.broker.security.acl import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    InvalidAclError,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from triolog.broker.security.acl_store import ACLS_FILE, AclStore
from triolog.broker.security.files import CorruptSecurityFileError
from triolog.broker.security.scram import (
    USERS_FILE,
    CredentialNotFoundError,
    CredentialStore,
    ScramMechanism,
    UnacceptableCredentialError,
    credential_from_salted_password,
    make_credential,
)
from triolog.broker.storage.errors import CorruptCheckpointError

SHA256, SHA512 = ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512


def binding(name="orders", principal="User:alice", op=AclOperation.READ, pattern=PatternType.LITERAL,
            perm=AclPermissionType.ALLOW) -> AclBinding:
    return AclBinding(ResourcePattern(ResourceType.TOPIC, name, pattern),
                      AccessControlEntry(principal, "*", op, perm))


def leftovers(directory) -> list[str]:
    return sorted(p for p in os.listdir(directory) if p.endswith(".tmp"))


# -- AclStore ----------------------------------------------------------------------------------


def test_acls_survive_reopen(tmp_path):
    store = AclStore(tmp_path)
    added = store.create([binding(), binding("pay", pattern=PatternType.PREFIXED),
                          binding(principal="User:*", op=AclOperation.WRITE, perm=AclPermissionType.DENY)])
    assert len(added) == 3
    assert store.create([binding()]) == []  # known: no rewrite needed, nothing new
    again = AclStore(tmp_path, super_users={"User:root"})
    assert again.describe(AclBindingFilter()) == added
    assert again.authorize("User:alice", "h", AclOperation.READ, ResourceType.TOPIC, "orders")
    assert not again.authorize("User:alice", "h", AclOperation.WRITE, ResourceType.TOPIC, "orders")
    assert again.authorize("User:alice", "h", AclOperation.DESCRIBE, ResourceType.TOPIC, "payments")
    assert leftovers(tmp_path) == []
    doc = json.loads((tmp_path / ACLS_FILE).read_text())
    assert doc["version"] == 1 and doc["acls"][1]["pattern_type"] == "PREFIXED"


def test_delete_is_durable_and_answers_per_filter(tmp_path):
    store = AclStore(tmp_path)
    a, b, c = binding("a"), binding("b"), binding("c", principal="User:bob")
    store.create([a, b, c])
    results = store.delete([AclBindingFilter(principal="User:alice"), AclBindingFilter(name="a"),
                            AclBindingFilter(principal="User:nobody")])
    assert results == [[a, b], [], []]  # a binding counts under the first filter matching it
    assert AclStore(tmp_path).describe(AclBindingFilter()) == [c]
    assert leftovers(tmp_path) == []


def test_invalid_bindings_change_nothing(tmp_path):
    store = AclStore(tmp_path)
    with pytest.raises(InvalidAclError):
        store.create([binding(), binding(name="")])
    assert not (tmp_path / ACLS_FILE).exists()
    assert store.describe(AclBindingFilter()) == []


@pytest.mark.parametrize("content", [b"{not json", b"[]", b'{"version": 2, "acls": []}', b'{"version": 1}',
                                     b'{"version": 1, "acls": [{"name": "x"}]}',
                                     b'{"version": 1, "acls": [{"resource_type": "TOPIC", "name": "", '
                                     b'"pattern_type": "LITERAL", "principal": "User:a", "host": "*", '
                                     b'"operation": "READ", "permission_type": "ALLOW"}]}',
                                     b"\xff\xfe"])
def test_a_corrupt_acl_file_is_an_error_naming_it(tmp_path, content):
    (tmp_path / ACLS_FILE).write_bytes(content)
    with pytest.raises(CorruptSecurityFileError, match=ACLS_FILE) as info:
        AclStore(tmp_path, allow_everyone_if_no_acl_found=True)
    assert info.value.path == tmp_path / ACLS_FILE
    assert isinstance(info.value, CorruptCheckpointError)


def test_a_failed_write_leaves_file_and_memory_as_they_were(tmp_path):
    store = AclStore(tmp_path)
    store.create([binding()])
    before = (tmp_path / ACLS_FILE).read_bytes()
    os.mkdir(tmp_path / (ACLS_FILE + ".tmp"))  # the temporary file cannot be created
    with pytest.raises(OSError):
        store.create([binding("other")])
    with pytest.raises(OSError):
        store.delete([AclBindingFilter()])
    assert (tmp_path / ACLS_FILE).read_bytes() == before
    assert store.describe(AclBindingFilter()) == [binding()]


# -- CredentialStore ---------------------------------------------------------------------------


def test_credentials_survive_reopen_and_describe(tmp_path):
    store = CredentialStore(tmp_path)
    alice256 = make_credential(SHA256, "alice-secret", iterations=8192)
    alice512 = make_credential(SHA512, "alice-secret")
    bob = make_credential(SHA512, "bob-secret", iterations=16384)
    store.upsert("alice", alice512)
    store.upsert("alice", alice256)
    store.upsert("bob", bob)
    again = CredentialStore(tmp_path)
    assert again.get("alice", SHA256) == alice256 and again.get("alice", "SCRAM-SHA-512") == alice512
    assert again.get("bob", SHA256) is None and again.get("carol", SHA512) is None
    assert again.describe() == {"alice": [(SHA256, 8192), (SHA512, 4096)], "bob": [(SHA512, 16384)]}
    assert again.describe(["bob", "carol"]) == {"bob": [(SHA512, 16384)]}
    assert leftovers(tmp_path) == []


def test_delete_credentials(tmp_path):
    store = CredentialStore(tmp_path)
    store.upsert("alice", make_credential(SHA256, "pw"))
    with pytest.raises(CredentialNotFoundError, match="does not exist"):
        store.delete("alice", SHA512)
    with pytest.raises(CredentialNotFoundError):
        store.delete("nobody", SHA256)
    store.delete("alice", SHA256)
    assert CredentialStore(tmp_path).describe() == {}


def test_users_file_holds_no_password_and_is_private(tmp_path):
    store = CredentialStore(tmp_path)
    password = "correct horse battery staple"
    store.upsert("alice", make_credential(SHA256, password))
    store.upsert("alice", make_credential(SHA512, password))
    data = (tmp_path / USERS_FILE).read_bytes()
    assert password.encode() not in data and b"horse" not in data
    assert stat.S_IMODE(os.stat(tmp_path / USERS_FILE).st_mode) == 0o600
    doc = json.loads(data)
    assert set(doc["users"]["alice"]["SCRAM-SHA-256"]) == {"salt", "stored_key", "server_key", "iterations"}


def test_a_stale_temporary_users_file_is_replaced_privately(tmp_path):
    stale = tmp_path / (USERS_FILE + ".tmp")
    stale.write_bytes(b"half a file")
    os.chmod(stale, 0o644)
    CredentialStore(tmp_path).upsert("alice", make_credential(SHA256, "pw"))
    assert leftovers(tmp_path) == []
    assert stat.S_IMODE(os.stat(tmp_path / USERS_FILE).st_mode) == 0o600


@pytest.mark.parametrize("content", [b"", b"{", b'{"version": 1, "users": []}',
                                     b'{"version": 1, "users": {"alice": {"SCRAM-SHA-1": {}}}}',
                                     b'{"version": 1, "users": {"alice": {"SCRAM-SHA-256": {"salt": "!!"}}}}'])
def test_a_corrupt_users_file_is_an_error_naming_it(tmp_path, content):
    (tmp_path / USERS_FILE).write_bytes(content)
    with pytest.raises(CorruptSecurityFileError, match=USERS_FILE):
        CredentialStore(tmp_path)


@pytest.mark.parametrize("iterations", [4095, 16385, 0, -1])
def test_iterations_outside_kafka_bounds_are_unacceptable(iterations):
    with pytest.raises(UnacceptableCredentialError, match="Iterations") as info:
        make_credential(SHA256, "pw", iterations=iterations)
    assert isinstance(info.value, ValueError)
    assert int(info.value.code) == 93
    with pytest.raises(UnacceptableCredentialError):
        credential_from_salted_password(SHA512, b"s" * 16, b"k" * 64, iterations)


def test_bounds_themselves_are_acceptable():
    assert make_credential(SHA512, "pw", iterations=4096).iterations == 4096
    assert make_credential(SHA256, "pw", iterations=16384, salt=b"0123456789ab").salt == b"0123456789ab"


def test_unacceptable_credentials_are_refused_with_messages(tmp_path):
    with pytest.raises(UnacceptableCredentialError, match="salt"):
        make_credential(SHA256, "pw", salt=b"short")
    with pytest.raises(UnacceptableCredentialError, match="password"):
        make_credential(SHA256, "")
    with pytest.raises(UnacceptableCredentialError, match="64 bytes"):
        credential_from_salted_password(SHA512, b"s" * 16, b"k" * 32, 4096)
    with pytest.raises(UnacceptableCredentialError, match="unknown SCRAM mechanism"):
        make_credential("SCRAM-SHA-1", "pw")
    with pytest.raises(UnacceptableCredentialError, match="Username must not be empty"):
        CredentialStore(tmp_path).upsert("", make_credential(SHA256, "pw"))


def test_salted_password_credential_equals_the_password_one():
    import hashlib
    salt = b"0123456789abcdef"
    salted = hashlib.pbkdf2_hmac("sha512", b"pw", salt, 4096)
    assert credential_from_salted_password(SHA512, salt, salted, 4096) == make_credential(SHA512, "pw", 4096, salt)
    assert (SHA256.code, SHA512.code) == (1, 2) and ScramMechanism.parse(2) is SHA512


def test_stores_take_concurrent_changes(tmp_path):
    """Several threads creating ACLs and users at once: every change is in memory and on disk."""
    import threading

    acls, users = AclStore(tmp_path), CredentialStore(tmp_path)
    credential = make_credential(SHA256, "pw")

    def work(n: int) -> None:
        for i in range(10):
            acls.create([binding(f"t{n}-{i}")])
            users.upsert(f"u{n}-{i}", credential)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(AclStore(tmp_path).describe(AclBindingFilter())) == 60
    assert len(CredentialStore(tmp_path).describe()) == 60
    assert leftovers(tmp_path) == []


def test_default_and_named_quota_entities_of_one_type_are_kept_side_by_side(tmp_path):
    """Kafka's usual setup, every user the default and some their own: stored, listed (defaults
    first) and reloaded, and each user gets the quota Kafka's precedence gives it."""
    from triolog.broker.security.quotas import QuotaEntity, QuotaStore

    store = QuotaStore(tmp_path)
    store.alter([(QuotaEntity.of(user=None), {"producer_byte_rate": 500_000.0})])
    store.alter([(QuotaEntity.of(user="alice"), {"producer_byte_rate": 2_000_000.0}),
                 (QuotaEntity.of(client_id="app"), {"consumer_byte_rate": 10.0}),
                 (QuotaEntity.of(client_id=None), {"consumer_byte_rate": 20.0})])
    reloaded = QuotaStore(tmp_path)
    assert [str(e) for e in sorted(reloaded.describe())] == [
        "client-id=<default>", "client-id=app", "user=<default>", "user=alice"]
    assert reloaded.quota_for("producer_byte_rate", "alice", "x")[0] == 2_000_000
    assert reloaded.quota_for("producer_byte_rate", "bob", "x")[0] == 500_000
