"""Kafka's ACL model and its authorizer, as pure data and logic (no I/O, no trio).

The enums carry Kafka's wire codes. A binding is a resource pattern (what) plus an access control
entry (who, from where, which operation, allow or deny). :class:`AclAuthorizer` answers Kafka's
question for one action on one resource with Kafka's rules:

* a super user is always allowed;
* the ACLs that apply to a resource are the literal ones on its name, the literal ones on the
  wildcard name ``*``, and the prefixed ones whose prefix starts the name;
* if none applies, whatever the principal, ``allow.everyone.if.no.acl.found`` decides;
* a DENY for the principal (or ``User:*``), the host (or ``*``) and the operation (or ALL) wins
  over every ALLOW;
* otherwise an ALLOW for the operation, or ALL, or an operation that implies it (READ, WRITE,
  DELETE and ALTER imply DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS) allows. A DENY never
  spreads the other way: a DENY of READ does not deny DESCRIBE.
"""

from __future__ import annotations

import enum
import threading
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from sortedcontainers import SortedList

__all__ = [
    "CLUSTER_NAME",
    "WILDCARD_HOST",
    "WILDCARD_PRINCIPAL",
    "WILDCARD_RESOURCE",
    "AccessControlEntry",
    "AclAuthorizer",
    "AclBinding",
    "AclBindingFilter",
    "AclOperation",
    "AclPermissionType",
    "InvalidAclError",
    "PatternType",
    "ResourcePattern",
    "ResourceType",
]

#: The literal resource name that matches every resource of its type.
WILDCARD_RESOURCE = "*"
#: The principal that matches every user.
WILDCARD_PRINCIPAL = "User:*"
#: The host that matches every client address.
WILDCARD_HOST = "*"
#: The only name the CLUSTER resource has (Kafka's).
CLUSTER_NAME = "kafka-cluster"


class InvalidAclError(ValueError):
    """A binding or filter Kafka's CreateAcls/DescribeAcls/DeleteAcls would refuse (INVALID_REQUEST)."""


class _KafkaEnum(enum.IntEnum):
    """An IntEnum parsed from its wire code or from Kafka's name in any case and spelling:
    ``"DescribeConfigs"``, ``"describe_configs"`` and ``"DESCRIBE-CONFIGS"`` are one member."""

    @classmethod
    def parse(cls, value: int | str | _KafkaEnum):
        if isinstance(value, cls):
            return value
        if isinstance(value, bool):
            raise InvalidAclError(f"{cls.__name__}: {value!r} is not a name or code")
        if isinstance(value, int):
            try:
                return cls(value)
            except ValueError:
                raise InvalidAclError(f"{cls.__name__}: no code {value}") from None
        if isinstance(value, str):
            key = _squash(value)
            for member in cls:
                if _squash(member.name) == key:
                    return member
            names = ", ".join(m.name for m in cls)
            raise InvalidAclError(f"{cls.__name__}: unknown name {value!r} (one of {names})")
        raise InvalidAclError(f"{cls.__name__}: {value!r} is not a name or code")

    def __str__(self) -> str:
        return self.name


def _squash(name: str) -> str:
    return name.replace("_", "").replace("-", "").replace(" ", "").lower()


class ResourceType(_KafkaEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(_KafkaEnum):
    UNKNOWN = 0
    #: Filters only: any pattern type, names compared exactly.
    ANY = 1
    #: Filters only: every pattern that applies to the named resource.
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(_KafkaEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class AclPermissionType(_KafkaEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


#: The operations an ALLOW of which also allows the key (Kafka's implied operations).
IMPLIED_BY: dict[AclOperation, frozenset[AclOperation]] = {
    AclOperation.DESCRIBE: frozenset({AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE, AclOperation.ALTER}),
    AclOperation.DESCRIBE_CONFIGS: frozenset({AclOperation.ALTER_CONFIGS}),
}


def _set(obj, **fields) -> None:
    for key, value in fields.items():
        object.__setattr__(obj, key, value)


@dataclass(frozen=True)
class ResourcePattern:
    resource_type: ResourceType
    name: str
    pattern_type: PatternType = PatternType.LITERAL

    def __post_init__(self) -> None:
        _set(
            self,
            resource_type=ResourceType.parse(self.resource_type),
            pattern_type=PatternType.parse(self.pattern_type),
        )
        if not isinstance(self.name, str):
            raise InvalidAclError(f"the resource name must be a string, got {self.name!r}")

    def validate(self) -> None:
        """Kafka's checks of a pattern in CreateAcls; InvalidAclError names the first broken one."""
        if self.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
            raise InvalidAclError(f"Invalid resource type {self.resource_type.name}: an ACL names one resource type")
        if self.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            raise InvalidAclError(
                f"Invalid pattern type {self.pattern_type.name}: an ACL's pattern is LITERAL or PREFIXED"
            )
        if not self.name:
            raise InvalidAclError("Resource name should not be empty")
        if self.resource_type == ResourceType.CLUSTER and self.name != CLUSTER_NAME:
            raise InvalidAclError(f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}, got {self.name!r}")
        if self.pattern_type == PatternType.PREFIXED and self.name == WILDCARD_RESOURCE:
            raise InvalidAclError(
                "A PREFIXED pattern cannot have the name '*': use a LITERAL '*' for every resource of the type"
            )


def _check_principal(principal: str) -> None:
    kind, sep, name = principal.partition(":")
    if not sep or not kind or not name:
        raise InvalidAclError(
            f"Invalid principal {principal!r}: expected principalType:principalName, e.g. User:alice or User:*"
        )


@dataclass(frozen=True)
class AccessControlEntry:
    principal: str
    host: str
    operation: AclOperation
    permission_type: AclPermissionType

    def __post_init__(self) -> None:
        _set(
            self,
            operation=AclOperation.parse(self.operation),
            permission_type=AclPermissionType.parse(self.permission_type),
        )
        for key in ("principal", "host"):
            if not isinstance(getattr(self, key), str):
                raise InvalidAclError(f"the ACL's {key} must be a string, got {getattr(self, key)!r}")

    def validate(self) -> None:
        """Kafka's checks of an entry in CreateAcls."""
        _check_principal(self.principal)
        if self.operation in (AclOperation.UNKNOWN, AclOperation.ANY):
            raise InvalidAclError(f"Invalid operation {self.operation.name}: an ACL names one operation (or ALL)")
        if self.permission_type not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
            raise InvalidAclError(f"Invalid permission type {self.permission_type.name}: an ACL allows or denies")


@dataclass(frozen=True)
class AclBinding:
    pattern: ResourcePattern
    entry: AccessControlEntry

    def validate(self) -> AclBinding:
        """Raise InvalidAclError if CreateAcls would refuse this binding; else return it."""
        self.pattern.validate()
        self.entry.validate()
        return self

    # -- the file format (AclStore): Kafka's names, not codes, so the file reads as ACLs --

    def to_json(self) -> dict:
        return {
            "resource_type": self.pattern.resource_type.name,
            "name": self.pattern.name,
            "pattern_type": self.pattern.pattern_type.name,
            "principal": self.entry.principal,
            "host": self.entry.host,
            "operation": self.entry.operation.name,
            "permission_type": self.entry.permission_type.name,
        }

    @classmethod
    def from_json(cls, doc: dict) -> AclBinding:
        return cls(
            ResourcePattern(doc["resource_type"], doc["name"], doc["pattern_type"]),
            AccessControlEntry(doc["principal"], doc["host"], doc["operation"], doc["permission_type"]),
        )


@dataclass(frozen=True)
class AclBindingFilter:
    """DescribeAcls' and DeleteAcls' filter, flat as on Kafka's wire: ANY or None matches anything.

    ``pattern_type`` ANY compares names exactly whatever the pattern type; MATCH (with a name)
    selects every pattern that applies to that resource: the literal name, the literal wildcard
    ``*`` and the prefixes of the name (Kafka's ResourcePatternFilter)."""

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission_type: AclPermissionType = AclPermissionType.ANY

    def __post_init__(self) -> None:
        _set(
            self,
            resource_type=ResourceType.parse(self.resource_type),
            pattern_type=PatternType.parse(self.pattern_type),
            operation=AclOperation.parse(self.operation),
            permission_type=AclPermissionType.parse(self.permission_type),
        )

    @classmethod
    def exact(cls, binding: AclBinding) -> AclBindingFilter:
        """The filter that matches this binding only."""
        p, e = binding.pattern, binding.entry
        return cls(p.resource_type, p.name, p.pattern_type, e.principal, e.host, e.operation, e.permission_type)

    def validate(self) -> AclBindingFilter:
        """Kafka refuses filters with UNKNOWN fields."""
        unknown = [
            key
            for key in ("resource_type", "pattern_type", "operation", "permission_type")
            if getattr(self, key).name == "UNKNOWN"
        ]
        if unknown:
            raise InvalidAclError(f"The filter contains UNKNOWN elements: {', '.join(unknown)}")
        return self

    def matches_pattern(self, pattern: ResourcePattern) -> bool:
        if self.resource_type != ResourceType.ANY and self.resource_type != pattern.resource_type:
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH) and self.pattern_type != pattern.pattern_type:
            return False
        if self.name is None:
            return True
        if self.pattern_type in (PatternType.ANY, pattern.pattern_type):
            return self.name == pattern.name
        # MATCH: the patterns that would apply to the resource called ``name``.
        if pattern.pattern_type == PatternType.LITERAL:
            return pattern.name in (self.name, WILDCARD_RESOURCE)
        if pattern.pattern_type == PatternType.PREFIXED:
            return self.name.startswith(pattern.name)
        return False

    def matches_entry(self, entry: AccessControlEntry) -> bool:
        return (
            (self.principal is None or self.principal == entry.principal)
            and (self.host is None or self.host == entry.host)
            and (self.operation == AclOperation.ANY or self.operation == entry.operation)
            and (self.permission_type == AclPermissionType.ANY or self.permission_type == entry.permission_type)
        )

    def matches(self, binding: AclBinding) -> bool:
        return self.matches_pattern(binding.pattern) and self.matches_entry(binding.entry)


#: The filter that matches every binding.
ANY_BINDING = AclBindingFilter()


def _check_action(operation: AclOperation, resource_type: ResourceType) -> tuple[AclOperation, ResourceType]:
    operation, resource_type = AclOperation.parse(operation), ResourceType.parse(resource_type)
    if operation in (AclOperation.ANY, AclOperation.UNKNOWN):
        raise ValueError(f"an action names one operation, not {operation.name}")
    if resource_type in (ResourceType.ANY, ResourceType.UNKNOWN):
        raise ValueError(f"an action names one resource type, not {resource_type.name}")
    return operation, resource_type


class AclAuthorizer:
    """The ACLs in memory, indexed, and Kafka's authorization decisions over them.

    Thread-safe: every method takes one lock, so a check never sees half an update. A check
    looks at the literal ACLs of the name and of ``*`` (two dict lookups) and at the prefixed
    ACLs of each prefix length in use for the type (one lookup per distinct length), never at
    every ACL."""

    def __init__(
        self,
        super_users: Iterable[str] = (),
        allow_everyone_if_no_acl_found: bool = False,
        bindings: Iterable[AclBinding] = (),
    ):
        self.super_users = frozenset(super_users)
        self.allow_everyone_if_no_acl_found = bool(allow_everyone_if_no_acl_found)
        self._lock = threading.RLock()
        #: Every binding, in the order added (a dict used as an ordered set).
        self._all: dict[AclBinding, None] = {}
        self._literal: dict[tuple[ResourceType, str], set[AclBinding]] = {}
        self._prefixed: dict[tuple[ResourceType, str], set[AclBinding]] = {}
        #: Per resource type, the distinct lengths of its prefixes (with how many prefixes have each).
        self._prefix_lengths: dict[ResourceType, Counter[int]] = {}
        self._sorted_lengths: dict[ResourceType, SortedList] = {}
        self.add(bindings)

    # -- changes -----------------------------------------------------------------------------

    def add(self, bindings: Iterable[AclBinding]) -> list[AclBinding]:
        """Validate every binding, then add them all (or none): the ones that were new."""
        bindings = [b.validate() for b in bindings]
        added = []
        with self._lock:
            for binding in bindings:
                if binding in self._all:
                    continue
                self._all[binding] = None
                self._index(binding).setdefault(self._key(binding), set()).add(binding)
                if binding.pattern.pattern_type == PatternType.PREFIXED:
                    rtype, length = binding.pattern.resource_type, len(binding.pattern.name)
                    counts = self._prefix_lengths.setdefault(rtype, Counter())
                    if counts[length] == 0:
                        self._sorted_lengths.setdefault(rtype, SortedList()).add(length)
                    counts[length] += 1
                added.append(binding)
        return added

    def remove(self, filter: AclBindingFilter) -> list[AclBinding]:
        """Remove every binding the filter matches; return them."""
        filter.validate()
        with self._lock:
            removed = [b for b in self._all if filter.matches(b)]
            for binding in removed:
                del self._all[binding]
                index, key = self._index(binding), self._key(binding)
                index[key].discard(binding)
                if not index[key]:
                    del index[key]
                if binding.pattern.pattern_type == PatternType.PREFIXED:
                    rtype, length = binding.pattern.resource_type, len(binding.pattern.name)
                    counts = self._prefix_lengths[rtype]
                    counts[length] -= 1
                    if counts[length] == 0:
                        del counts[length]
                        self._sorted_lengths[rtype].remove(length)
            return removed

    def replace(self, pattern: ResourcePattern, bindings: Iterable[AclBinding]) -> None:
        """Make ``bindings`` (all of ``pattern``) the pattern's whole set, at once: what a cluster's
        broker does when another broker changed the pattern's ACLs (a check sees the old set or
        the new one, never a mix)."""
        bindings = [b.validate() for b in bindings]
        if any(b.pattern != pattern for b in bindings):
            raise ValueError(f"bindings of another pattern than {pattern}")
        with self._lock:
            self.remove(AclBindingFilter(pattern.resource_type, pattern.name, pattern.pattern_type))
            self.add(bindings)

    def patterns(self) -> set[ResourcePattern]:
        """The patterns that have ACLs."""
        with self._lock:
            return {b.pattern for b in self._all}

    def bindings(self, filter: AclBindingFilter = ANY_BINDING) -> list[AclBinding]:
        """The bindings the filter matches, in the order they were added."""
        filter.validate()
        with self._lock:
            return [b for b in self._all if filter.matches(b)]

    def __len__(self) -> int:
        return len(self._all)

    def _index(self, binding: AclBinding) -> dict[tuple[ResourceType, str], set[AclBinding]]:
        return self._literal if binding.pattern.pattern_type == PatternType.LITERAL else self._prefixed

    @staticmethod
    def _key(binding: AclBinding) -> tuple[ResourceType, str]:
        return binding.pattern.resource_type, binding.pattern.name

    # -- decisions ---------------------------------------------------------------------------

    def is_super_user(self, principal: str) -> bool:
        return principal in self.super_users

    def matching_acls(self, resource_type: ResourceType, name: str) -> list[AclBinding]:
        """Every ACL that applies to the resource, whoever it names: literal on the name, literal
        on ``*``, and prefixed on a prefix of the name."""
        resource_type = ResourceType.parse(resource_type)
        with self._lock:
            found: list[AclBinding] = []
            found += self._literal.get((resource_type, name), ())
            if name != WILDCARD_RESOURCE:
                found += self._literal.get((resource_type, WILDCARD_RESOURCE), ())
            lengths = self._sorted_lengths.get(resource_type)
            if lengths:
                for length in lengths.irange(maximum=len(name)):
                    found += self._prefixed.get((resource_type, name[:length]), ())
            return found

    def authorize(
        self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType, name: str
    ) -> bool:
        """May ``principal`` connected from ``host`` perform ``operation`` on the resource?"""
        operation, resource_type = _check_action(operation, resource_type)
        if self.is_super_user(principal):
            return True
        acls = self.matching_acls(resource_type, name)
        if not acls:
            return self.allow_everyone_if_no_acl_found
        applies = [
            b.entry
            for b in acls
            if b.entry.principal in (principal, WILDCARD_PRINCIPAL) and b.entry.host in (host, WILDCARD_HOST)
        ]
        if any(
            e.permission_type == AclPermissionType.DENY and e.operation in (operation, AclOperation.ALL)
            for e in applies
        ):
            return False
        allowing = {operation, AclOperation.ALL} | IMPLIED_BY.get(operation, frozenset())
        return any(e.permission_type == AclPermissionType.ALLOW and e.operation in allowing for e in applies)

    def authorize_by_resource_type(
        self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType
    ) -> bool:
        """Could ``principal`` perform ``operation`` on some resource of the type? (Kafka's
        Authorizer.authorizeByResourceType, used e.g. where IDEMPOTENT_WRITE on the cluster is
        not granted but WRITE on some topic may be.)

        Allowed if an ordinary check on a resource no ACL names would allow it (a super user, or
        no ACL applying with allow.everyone.if.no.acl.found); else if an ALLOW for the principal
        (or ``User:*``), the host (or ``*``) and the operation (or ALL; implied operations do not
        count here) names the literal wildcard ``*``, unless a DENY does too; else if some literal
        or prefixed ALLOW name is not itself denied: not by a literal DENY of the same name, not
        by a prefixed DENY of one of its prefixes (the name included)."""
        operation, resource_type = _check_action(operation, resource_type)
        if self.authorize(principal, host, operation, resource_type, "hardcode"):
            return True
        deny_literal: set[str] = set()
        deny_prefixed: set[str] = set()
        allow_literal: set[str] = set()
        allow_prefixed: set[str] = set()
        wildcard_allowed = False
        with self._lock:
            bindings = [b for b in self._all if b.pattern.resource_type == resource_type]
        for binding in bindings:
            entry, pattern = binding.entry, binding.pattern
            if entry.host not in (host, WILDCARD_HOST) or entry.principal not in (principal, WILDCARD_PRINCIPAL):
                continue
            if entry.operation not in (operation, AclOperation.ALL):
                continue
            if entry.permission_type == AclPermissionType.DENY:
                if pattern.pattern_type == PatternType.LITERAL:
                    if pattern.name == WILDCARD_RESOURCE:
                        return False
                    deny_literal.add(pattern.name)
                else:
                    deny_prefixed.add(pattern.name)
            elif pattern.pattern_type == PatternType.LITERAL:
                if pattern.name == WILDCARD_RESOURCE:
                    wildcard_allowed = True
                else:
                    allow_literal.add(pattern.name)
            else:
                allow_prefixed.add(pattern.name)
        if wildcard_allowed:
            return True

        def denied_by_prefix(name: str) -> bool:
            return any(name[:i] in deny_prefixed for i in range(1, len(name) + 1))

        if any(name not in deny_literal and not denied_by_prefix(name) for name in allow_literal):
            return True
        return any(not denied_by_prefix(name) for name in allow_prefixed)
