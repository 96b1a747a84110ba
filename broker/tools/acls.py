"""``triolog acls``: add, remove and list ACLs, shaped like Kafka's ``kafka-acls.sh``.

Two forms:

* online, ``--bootstrap-server HOST:PORT`` (with ``--command-config FILE`` for a TLS/SASL
  listener: Kafka's client properties): through the broker's create_acls / describe_acls /
  delete_acls, as the connecting principal (ALTER or DESCRIBE on the cluster, or a super user);
* offline, serve's ``--config FILE`` / ``--override K=V``: edits the ACL file of a stopped
  broker (``triolog-acls.json`` in its first log dir) under the log dir's lock, so a running
  broker is never edited under its feet; the change takes effect at the next start. With
  ``zookeeper.connect`` in that configuration, the cluster's ACLs in ZooKeeper instead (Kafka's
  ``--authorizer-properties zookeeper.connect=...``): every broker follows at once.

``--add`` makes one ACL per resource x principal x operation (``--allow-principal`` with each
``--allow-host``, ``--deny-principal`` with each ``--deny-host``; hosts default to ``*``);
``--remove`` deletes the ACLs of the given resources (only those of the given principals and
operations, when given); ``--list`` prints the ACLs of the given resources (every ACL without
one; ``--principal`` narrows it), as kafka-acls.sh prints them.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable

from triolog.broker.tools import ToolError, UsageError, add_location_arguments, offline_store, online_admin, online_mode

DESCRIPTION = (
    "Add, remove and list ACLs, like Kafka's kafka-acls.sh: online through --bootstrap-server (and "
    "--command-config for TLS/SASL), or offline on a stopped broker's log dir (--config/--override, as serve). "
    "With zookeeper.connect in that configuration: the cluster's ACLs, in ZooKeeper."
)

OPERATIONS = (
    "All",
    "Read",
    "Write",
    "Create",
    "Delete",
    "Alter",
    "Describe",
    "ClusterAction",
    "DescribeConfigs",
    "AlterConfigs",
    "IdempotentWrite",
)
CLUSTER_NAME = "kafka-cluster"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--add", action="store_true", help="add ACLs")
    action.add_argument("--remove", action="store_true", help="remove ACLs")
    action.add_argument("--list", action="store_true", help="list ACLs")
    parser.add_argument(
        "--allow-principal",
        action="append",
        default=[],
        metavar="PRINCIPAL",
        help="who is allowed, e.g. User:alice or User:* (repeatable)",
    )
    parser.add_argument(
        "--deny-principal", action="append", default=[], metavar="PRINCIPAL", help="who is denied (repeatable)"
    )
    parser.add_argument(
        "--principal",
        action="append",
        default=[],
        metavar="PRINCIPAL",
        help="--list: only the ACLs of this principal (repeatable)",
    )
    parser.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="HOST",
        help="the client IP an allow applies to (repeatable; default *)",
    )
    parser.add_argument(
        "--deny-host",
        action="append",
        default=[],
        metavar="HOST",
        help="the client IP a deny applies to (repeatable; default *)",
    )
    parser.add_argument(
        "--operation",
        action="append",
        default=[],
        metavar="OPERATION",
        help=f"one of {', '.join(OPERATIONS)}, any case (repeatable; --add needs one)",
    )
    parser.add_argument("--topic", action="append", default=[], metavar="TOPIC", help="a topic resource (repeatable)")
    parser.add_argument("--group", action="append", default=[], metavar="GROUP", help="a group resource (repeatable)")
    parser.add_argument("--cluster", action="store_true", help="the cluster resource (kafka-cluster)")
    parser.add_argument(
        "--transactional-id", action="append", default=[], metavar="ID", help="a transactional id resource (repeatable)"
    )
    parser.add_argument(
        "--resource-pattern-type",
        default=None,
        metavar="TYPE",
        help="literal (default) or prefixed; --list and --remove also take match and any",
    )
    add_location_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from triolog.client.admin_core import acl_enum

    try:
        online = online_mode(args)
        pattern_type = _pattern_type(args)
        resources = _resources(args)
        operations = [acl_enum(op, _OPERATION_NAMES, "operation") for op in args.operation]
    except (UsageError, ValueError) as exc:
        return _fail(str(exc), 2)
    if args.add:
        if not resources:
            return _fail("--add needs a resource (--topic, --group, --cluster or --transactional-id)", 2)
        if not (args.allow_principal or args.deny_principal):
            return _fail("--add needs --allow-principal or --deny-principal", 2)
        if not operations:
            return _fail("--add needs --operation", 2)
    elif args.remove and not resources:
        return _fail("--remove needs a resource (--topic, --group, --cluster or --transactional-id)", 2)
    backend = _Online(args) if online else _Offline(args)
    try:
        return backend.run(lambda acls: _act(args, acls, resources, pattern_type, operations))
    except ToolError as exc:
        return _fail(str(exc), 1)


_OPERATION_NAMES = (
    "ALL",
    "READ",
    "WRITE",
    "CREATE",
    "DELETE",
    "ALTER",
    "DESCRIBE",
    "CLUSTER_ACTION",
    "DESCRIBE_CONFIGS",
    "ALTER_CONFIGS",
    "IDEMPOTENT_WRITE",
)


def _pattern_type(args) -> str | None:
    raw = args.resource_pattern_type
    if raw is None:
        return None
    value = raw.strip().upper()
    allowed = ("LITERAL", "PREFIXED") if args.add else ("LITERAL", "PREFIXED", "MATCH", "ANY")
    if value not in allowed:
        raise UsageError(
            f"--resource-pattern-type must be one of {', '.join(a.lower() for a in allowed)}"
            f"{' with --add' if args.add else ''}, got {raw!r}"
        )
    return value


def _resources(args) -> list[tuple[str, str]]:
    out = [("TOPIC", t) for t in args.topic] + [("GROUP", g) for g in args.group]
    out += [("TRANSACTIONAL_ID", t) for t in args.transactional_id]
    if args.cluster:
        out.append(("CLUSTER", CLUSTER_NAME))
    for kind, name in out:
        if not name:
            raise UsageError(f"an empty {kind.lower()} name")
    return out


def _act(args, acls, resources, pattern_type, operations) -> int:
    """The action, on ``acls`` (the online or offline backend)."""
    from triolog.client.admin_core import AclBinding, AclBindingFilter

    if args.add:
        pattern = pattern_type or "LITERAL"
        entries = [(p, h, "ALLOW") for p in args.allow_principal for h in (args.allow_host or ["*"])]
        entries += [(p, h, "DENY") for p in args.deny_principal for h in (args.deny_host or ["*"])]
        bindings = [
            AclBinding(kind, name, principal, op, permission, host, pattern)
            for kind, name in resources
            for principal, host, permission in entries
            for op in operations
        ]
        for kind, name in resources:
            _print_resource(
                "Adding ACLs for resource",
                (kind, name, pattern),
                [b for b in bindings if (b.resource_type, b.resource_name) == (kind, name)],
            )
        acls.create(bindings)
        for kind, name in resources:
            _print_resource(
                "Current ACLs for resource",
                (kind, name, pattern),
                acls.describe(AclBindingFilter(kind, name, pattern_type=pattern)),
            )
        return 0
    if args.remove:
        pattern = pattern_type or "LITERAL"
        principals = [(p, args.allow_host or [None], "ALLOW") for p in args.allow_principal] + [
            (p, args.deny_host or [None], "DENY") for p in args.deny_principal
        ]
        filters = []
        for kind, name in resources:
            if principals or operations:
                for principal, hosts, permission in principals or [(None, [None], "ANY")]:
                    for host in hosts:
                        for op in operations or ["ANY"]:
                            filters.append(AclBindingFilter(kind, name, principal, op, permission, host, pattern))
            else:
                filters.append(AclBindingFilter(kind, name, pattern_type=pattern))
        deleted = [b for group in acls.delete(filters) for b in group]
        for key, group in _by_pattern(deleted).items():
            _print_resource("Removed ACLs for resource", key, group)
        if not deleted:
            print("No ACLs matched: nothing removed")
        return 0
    found: list = []
    wanted: list[str | None] = args.principal or [None]
    if resources:
        for kind, name in resources:
            for who in wanted:
                found += acls.describe(AclBindingFilter(kind, name, who, pattern_type=pattern_type or "LITERAL"))
    else:
        for who in wanted:
            found += acls.describe(AclBindingFilter(principal=who, pattern_type=pattern_type or "ANY"))
    for key, group in _by_pattern(list(dict.fromkeys(found))).items():
        _print_resource("Current ACLs for resource", key, group)
    return 0


def _by_pattern(bindings: Iterable) -> dict[tuple[str, str, str], list]:
    out: dict[tuple[str, str, str], list] = {}
    for b in sorted(bindings):
        out.setdefault((b.resource_type, b.resource_name, b.pattern_type), []).append(b)
    return out


def _print_resource(title: str, key: tuple[str, str, str], bindings: list) -> None:
    kind, name, pattern = key
    print(f"{title} `ResourcePattern(resourceType={kind}, name={name}, patternType={pattern})`: ")
    for b in bindings:
        print(
            f" \t(principal={b.principal}, host={b.host}, operation={b.operation}, permissionType={b.permission_type}) "
        )
    print()


class _Online:
    """The ACL calls of a running broker (AdminClient)."""

    def __init__(self, args) -> None:
        self.args = args

    def run(self, act) -> int:
        with online_admin(self.args, "triolog-acls") as self.admin:
            return act(self)

    def create(self, bindings) -> None:
        self.admin.create_acls(bindings)

    def describe(self, acl_filter) -> list:
        return self.admin.describe_acls(acl_filter)

    def delete(self, filters) -> list[list]:
        return self.admin.delete_acls(filters)


class _Offline:
    """The ACL file of a stopped broker (AclStore), under its log dir's lock."""

    def __init__(self, args) -> None:
        self.args = args

    def run(self, act) -> int:
        from triolog.broker.security.acl import InvalidAclError
        from triolog.broker.security.acl_store import AclStore

        try:
            with offline_store(self.args, AclStore, "ACLs") as self.store:
                return act(self)
        except (InvalidAclError, ValueError) as exc:
            raise ToolError(str(exc)) from None

    def create(self, bindings) -> None:
        from triolog.broker.security.acl import AccessControlEntry, AclBinding, ResourcePattern

        self.store.create(
            [
                AclBinding(
                    ResourcePattern(b.resource_type, b.resource_name, b.pattern_type),
                    AccessControlEntry(b.principal, b.host, b.operation, b.permission_type),
                ).validate()
                for b in bindings
            ]
        )

    def describe(self, acl_filter) -> list:
        return [_client_binding(b) for b in self.store.describe(_store_filter(acl_filter))]

    def delete(self, filters) -> list[list]:
        return [[_client_binding(b) for b in group] for group in self.store.delete([_store_filter(f) for f in filters])]


def _store_filter(f):
    from triolog.broker.security.acl import AclBindingFilter

    return AclBindingFilter(
        f.resource_type, f.resource_name, f.pattern_type, f.principal, f.host, f.operation, f.permission_type
    ).validate()


def _client_binding(b):
    from triolog.client.admin_core import AclBinding

    return AclBinding(
        b.pattern.resource_type.name,
        b.pattern.name,
        b.entry.principal,
        b.entry.operation.name,
        b.entry.permission_type.name,
        b.entry.host,
        b.pattern.pattern_type.name,
    )


def _fail(message: str, code: int = 1) -> int:
    print(f"triolog acls: {message}", file=sys.stderr)
    return code
