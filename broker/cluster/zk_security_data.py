"""Kafka's ZooKeeper layout of the security metadata: SCRAM credentials, client quotas and ACLs.

Pure values and codecs, no I/O, as zk_data.py is for topics and brokers. The paths and JSON are
Kafka 3.x's in ZooKeeper mode (ZkData.scala's ConfigEntityZNode, ConfigEntityChangeNotification*,
the ACL stores; ScramCredentialUtils' credential string; Sanitizer's names), so Kafka's tools read
a triolog cluster's users, quotas and ACLs as they read Kafka's:

* ``/config/users/<user>``, ``/config/users/<user>/clients/<client>``, ``/config/clients/<client>``,
  ``/config/ips/<ip>``: ``{"version":1,"config":{...}}``, every value a string: a user's SCRAM
  credentials under their mechanism's name beside its quotas. Names are URL-encoded (Kafka's
  Sanitizer); a default entity is ``<default>``.
* ``/config/changes/config_change_<n>``: ``{"version":2,"entity_path":"users/alice"}``.
* ``/kafka-acl/<Type>/<name>`` (literal patterns), ``/kafka-acl-extended/prefixed/<Type>/<name>``:
  ``{"version":1,"acls":[{"principal":...,"permissionType":...,"operation":...,"host":...}]}``.
* ``/kafka-acl-changes/acl_changes_<n>``: ``Topic:name``;
  ``/kafka-acl-extended-changes/acl_changes_<n>``: ``{"version":1,"resourceType":"TOPIC",...}``.

Every decoder is strict: bytes that are not what Kafka writes raise ZkDataError naming the znode,
never an empty set (an ACL znode read as empty could open its resource).
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import quote, unquote_plus

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
from triolog.broker.security.quotas import CLIENT_ID, CLIENT_KEYS, IP, IP_KEYS, USER, InvalidQuotaError, QuotaEntity
from triolog.broker.security.scram import ScramCredential, ScramMechanism, UnacceptableCredentialError

from .zk_data import ZkDataError, json_object

#: A default entity's name in a path (Kafka's ZooKeeperInternals.DEFAULT_STRING).
DEFAULT = "<default>"
CONFIG_CHANGES = "/config/changes"
CONFIG_CHANGE_PREFIX = "config_change_"
LITERAL_ACLS = "/kafka-acl"
EXTENDED_ACLS = "/kafka-acl-extended"
PREFIXED_ACLS = "/kafka-acl-extended/prefixed"
LITERAL_ACL_CHANGES = "/kafka-acl-changes"
EXTENDED_ACL_CHANGES = "/kafka-acl-extended-changes"
ACL_CHANGE_PREFIX = "acl_changes_"
#: The entity types of the client quotas and credentials (``/config/<type>``).
USERS, CLIENTS, IPS = "users", "clients", "ips"

#: The persistent parents the security metadata needs (beside zk_data.PERSISTENT_PATHS).
SECURITY_PATHS = (
    CONFIG_CHANGES,
    "/config/users",
    "/config/clients",
    "/config/ips",
    LITERAL_ACLS,
    PREFIXED_ACLS,
    LITERAL_ACL_CHANGES,
    EXTENDED_ACL_CHANGES,
)

#: Quotas Kafka types as LONG or INT (written as integers) and as DOUBLE (written as Java's
#: Double.toString, ``200.0``).
_DOUBLE_QUOTAS = frozenset({"request_percentage"})


def _json(value: Mapping[str, Any]) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def sequence_number(name: str, prefix: str) -> int | None:
    """The number of a sequential znode ``<prefix><10 digits>``; None for another child."""
    if not name.startswith(prefix) or not name[len(prefix) :].isdigit():
        return None
    return int(name[len(prefix) :])


# -- names ---------------------------------------------------------------------------------------


def sanitize(name: str) -> str:
    """Kafka's Sanitizer.sanitize: Java's URLEncoder (letters, digits and ``.-_`` kept), then ``*``
    as ``%2A`` and a space as ``%20``. A user or client id as a znode name."""
    return quote(name, safe="").replace("~", "%7E")


def desanitize(name: str) -> str:
    """Kafka's Sanitizer.desanitize (Java's URLDecoder: ``+`` is a space)."""
    return unquote_plus(name)


def entity_path(entity: QuotaEntity) -> str:
    """The path under ``/config`` of a quota entity (Kafka's sanitized entity path)."""

    def name(kind: str) -> str:
        value = entity.get(kind)
        return DEFAULT if value is None else sanitize(value)

    if entity.types == {IP}:
        return f"{IPS}/{name(IP)}"
    if entity.types == {USER}:
        return f"{USERS}/{name(USER)}"
    if entity.types == {CLIENT_ID}:
        return f"{CLIENTS}/{name(CLIENT_ID)}"
    return f"{USERS}/{name(USER)}/{CLIENTS}/{name(CLIENT_ID)}"


def user_path(user: str) -> str:
    """The path under ``/config`` of a user's credentials (and its user quotas)."""
    return f"{USERS}/{sanitize(user)}"


def entity_from_path(path: str) -> QuotaEntity:
    """The quota entity of a path under ``/config`` (``users/alice/clients/app``);
    ZkDataError for a path that names none."""
    parts = path.strip("/").split("/")

    def name(part: str) -> str | None:
        return None if part == DEFAULT else desanitize(part)

    try:
        if len(parts) == 2 and parts[0] == USERS:
            return QuotaEntity.from_parts({USER: name(parts[1])})
        if len(parts) == 2 and parts[0] == CLIENTS:
            return QuotaEntity.from_parts({CLIENT_ID: name(parts[1])})
        if len(parts) == 2 and parts[0] == IPS:
            return QuotaEntity.from_parts({IP: name(parts[1])})
        if len(parts) == 4 and parts[0] == USERS and parts[2] == CLIENTS:
            return QuotaEntity.from_parts({USER: name(parts[1]), CLIENT_ID: name(parts[3])})
    except InvalidQuotaError as exc:
        raise ZkDataError(f"/config/{path}: {exc}") from None
    raise ZkDataError(f"/config/{path}: not a user, client or IP entity")


# -- /config/<entity> ----------------------------------------------------------------------------


def encode_entity_config(config: Mapping[str, str]) -> bytes:
    """``/config/<entity>``: Kafka's ConfigEntityZNode, every value a string."""
    return _json({"version": 1, "config": dict(config)})


def decode_entity_config(raw: bytes | None, path: str) -> dict[str, str]:
    """An empty znode (a parent made for its children, e.g. ``/config/users/alice`` of
    ``.../clients/app``) has no config; anything else must be Kafka's JSON."""
    if not raw:
        return {}
    obj = json_object(raw, path)
    if obj.get("version") != 1:
        raise ZkDataError(f"{path}: not a config of version 1")
    config = obj.get("config")
    if not isinstance(config, dict) or not all(isinstance(v, str) for v in config.values()):
        raise ZkDataError(f"{path}: 'config' is not an object of strings")
    return dict(config)


def encode_config_change(path: str) -> bytes:
    """``/config/changes/config_change_<n>``: which entity changed (its path under /config)."""
    return _json({"version": 2, "entity_path": path})


def decode_config_change(raw: bytes | None, what: str) -> str:
    obj = json_object(raw, what)
    path = obj.get("entity_path")
    if obj.get("version") != 2 or not isinstance(path, str) or not path:
        raise ZkDataError(f"{what}: not a config change of version 2 with an entity_path")
    return path


def credential_to_string(credential: ScramCredential) -> str:
    """Kafka's ScramCredentialUtils.credentialToString."""
    b64 = lambda b: base64.b64encode(b).decode("ascii")  # noqa: E731
    return (
        f"salt={b64(credential.salt)},stored_key={b64(credential.stored_key)},"
        f"server_key={b64(credential.server_key)},iterations={credential.iterations}"
    )


def credential_from_string(mechanism: ScramMechanism | str, text: str, what: str = "credential") -> ScramCredential:
    """Kafka's ScramCredentialUtils.credentialFromString, and the credential's own checks."""
    fields = {}
    for token in text.split(","):
        key, sep, value = token.partition("=")
        if not sep or not key:
            raise ZkDataError(f"{what}: not a SCRAM credential string (salt=...,stored_key=...,...)")
        fields[key] = value
    if sorted(fields) != ["iterations", "salt", "server_key", "stored_key"]:
        raise ZkDataError(f"{what}: a SCRAM credential has salt, stored_key, server_key and iterations")
    try:
        return ScramCredential(
            ScramMechanism.parse(mechanism),
            base64.b64decode(fields["salt"], validate=True),
            base64.b64decode(fields["stored_key"], validate=True),
            base64.b64decode(fields["server_key"], validate=True),
            int(fields["iterations"]),
        )
    except (binascii.Error, ValueError, UnacceptableCredentialError) as exc:
        raise ZkDataError(f"{what}: invalid SCRAM credential ({exc})") from None


def quota_to_string(key: str, value: float) -> str:
    """As Kafka writes a quota: an integer, or for request_percentage a double (``200.0``)."""
    if key in _DOUBLE_QUOTAS or value != math.floor(value):
        return repr(float(value))
    return str(int(value))


def parse_entity_config(
    path: str, config: Mapping[str, str]
) -> tuple[QuotaEntity, dict[ScramMechanism, ScramCredential], dict[str, float]]:
    """A ``/config/<path>`` znode's config as the entity, its credentials (a user's, by
    mechanism) and its quotas (as numbers). Keys triolog does not enforce (Kafka's
    controller_mutation_rate, a broker's configs) are left to the znode: ignored, not refused."""
    entity = entity_from_path(path)
    what = f"/config/{path}"
    credentials: dict[ScramMechanism, ScramCredential] = {}
    quotas = {}
    allowed = IP_KEYS if entity.types == {IP} else CLIENT_KEYS
    for key, value in config.items():
        if key in _MECHANISMS:
            if entity.types == {USER} and entity.get(USER) is not None:
                credentials[ScramMechanism(key)] = credential_from_string(key, value, f"{what} {key}")
        elif key in allowed:
            quotas[key] = quota_from_string(key, value, what)
    return entity, credentials, quotas


_MECHANISMS = frozenset(m.value for m in ScramMechanism)


def quota_from_string(key: str, value: str, what: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise ZkDataError(f"{what}: {key}={value!r} is not a number") from None
    if not math.isfinite(number) or number <= 0:
        raise ZkDataError(f"{what}: {key}={value!r} is not a positive number")
    return number


# -- ACLs ----------------------------------------------------------------------------------------


def _pascal(name: str) -> str:
    """Kafka's SecurityUtils names: TRANSACTIONAL_ID is TransactionalId, ALLOW is Allow."""
    return "".join(part.capitalize() for part in name.split("_"))


def acl_path(pattern: ResourcePattern) -> str:
    """The znode of a pattern's ACLs. A name with ``/`` cannot be a znode name (Kafka's
    ZooKeeper mode could not store it either): InvalidAclError."""
    if "/" in pattern.name or pattern.name in (".", ".."):
        raise InvalidAclError(f"the resource name {pattern.name!r} cannot be stored in ZooKeeper")
    root = LITERAL_ACLS if pattern.pattern_type == PatternType.LITERAL else PREFIXED_ACLS
    return f"{root}/{_pascal(pattern.resource_type.name)}/{pattern.name}"


def acl_type_path(pattern_type: PatternType, resource_type: ResourceType) -> str:
    root = LITERAL_ACLS if pattern_type == PatternType.LITERAL else PREFIXED_ACLS
    return f"{root}/{_pascal(resource_type.name)}"


def resource_type_of(znode_name: str, what: str) -> ResourceType:
    """The resource type of a ``/kafka-acl/<Type>`` child (Kafka accepts any case)."""
    try:
        resource_type = ResourceType.parse(znode_name)
    except InvalidAclError:
        raise ZkDataError(f"{what}: {znode_name!r} is not a resource type") from None
    if resource_type in (ResourceType.ANY, ResourceType.UNKNOWN):
        raise ZkDataError(f"{what}: {znode_name!r} is not a resource type")
    return resource_type


def encode_acls(bindings: Iterable[AclBinding]) -> bytes:
    """A resource znode: the entries of its bindings (all of one pattern), in Kafka's names."""
    entries = [
        {
            "principal": b.entry.principal,
            "permissionType": _pascal(b.entry.permission_type.name),
            "operation": _pascal(b.entry.operation.name),
            "host": b.entry.host,
        }
        for b in bindings
    ]
    return _json({"version": 1, "acls": entries})


def decode_acls(pattern: ResourcePattern, raw: bytes | None) -> frozenset[AclBinding]:
    """The bindings of a resource znode, every one valid; ZkDataError otherwise."""
    what = acl_path(pattern)
    obj = json_object(raw, what)
    if obj.get("version") != 1:
        raise ZkDataError(f"{what}: not an ACL list of version 1")
    entries = obj.get("acls")
    if not isinstance(entries, list):
        raise ZkDataError(f"{what}: no 'acls' list")
    bindings = set()
    for number, entry in enumerate(entries):
        try:
            if not isinstance(entry, dict):
                raise InvalidAclError("not an object")
            binding = AclBinding(
                pattern,
                AccessControlEntry(
                    entry["principal"],
                    entry["host"],
                    AclOperation.parse(entry["operation"]),
                    AclPermissionType.parse(entry["permissionType"]),
                ),
            )
            bindings.add(binding.validate())
        except (KeyError, InvalidAclError) as exc:
            raise ZkDataError(f"{what}: ACL number {number} is invalid ({exc!r})") from None
    return frozenset(bindings)


def acl_change_path(pattern: ResourcePattern) -> str:
    """The prefix of the sequential notification of a change to the pattern's ACLs."""
    root = LITERAL_ACL_CHANGES if pattern.pattern_type == PatternType.LITERAL else EXTENDED_ACL_CHANGES
    return f"{root}/{ACL_CHANGE_PREFIX}"


def encode_acl_change(pattern: ResourcePattern) -> bytes:
    """Kafka's notification: ``Topic:name`` for a literal pattern (its legacy form), JSON for others."""
    if pattern.pattern_type == PatternType.LITERAL:
        return f"{_pascal(pattern.resource_type.name)}:{pattern.name}".encode()
    return _json(
        {
            "version": 1,
            "resourceType": pattern.resource_type.name,
            "name": pattern.name,
            "patternType": pattern.pattern_type.name,
        }
    )


def decode_acl_change(raw: bytes | None, extended: bool, what: str) -> ResourcePattern:
    """The pattern a notification names (under ``/kafka-acl-extended-changes`` if ``extended``)."""
    try:
        if not extended:
            text = (raw or b"").decode("utf-8")
            kind, sep, name = text.partition(":")
            if not sep:
                raise ZkDataError(f"{what}: expected ResourceType:name, got {text[:80]!r}")
            return ResourcePattern(resource_type_of(kind, what), name, PatternType.LITERAL)
        obj = json_object(raw, what)
        if obj.get("version") != 1 or not isinstance(obj.get("name"), str):
            raise ZkDataError(f"{what}: not an ACL change event of version 1")
        pattern = ResourcePattern(
            resource_type_of(str(obj.get("resourceType")), what),
            obj["name"],
            PatternType.parse(str(obj.get("patternType"))),
        )
    except (UnicodeDecodeError, InvalidAclError) as exc:
        raise ZkDataError(f"{what}: {exc}") from None
    if pattern.pattern_type != PatternType.PREFIXED:
        raise ZkDataError(f"{what}: an extended ACL change names a PREFIXED pattern")
    return pattern
