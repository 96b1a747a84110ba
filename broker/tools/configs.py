"""``triolog configs``: client quotas, shaped like Kafka's ``kafka-configs.sh`` for users, clients
and IPs.

An entity is ``--entity-type users|clients|ips`` with ``--entity-name NAME`` or
``--entity-default`` (pairs repeat, in order: ``--entity-type users --entity-name alice
--entity-type clients --entity-name app`` is alice's client app), or Kafka's shorthands
``--user``/``--client``/``--ip`` and ``--user-defaults``/``--client-defaults``/``--ip-defaults``.
``--alter --add-config 'k=v,k2=v2'`` / ``--delete-config k`` change its quotas; ``--describe``
prints the quotas of the entities of exactly those types (of every one of a type given without a
name), one line each as kafka-configs.sh prints them.

Two forms, as ``triolog users`` and ``triolog acls``: online through a running broker
(``--bootstrap-server``, ``--command-config``; describe_client_quotas / alter_client_quotas,
DESCRIBE_CONFIGS or ALTER_CONFIGS on the cluster under an authorizer), or offline on a stopped
broker's ``triolog-quotas.json`` under its log dir's lock (``--config``/``--override``, as serve);
with ``zookeeper.connect`` in that configuration, the cluster's quotas in ZooKeeper instead.
Topic configs are ``triolog topics --alter``; broker configs are static (server.properties).
"""

from __future__ import annotations

import argparse
import ipaddress
import re
import sys
from decimal import Decimal

from triolog.broker.tools import ToolError, UsageError, add_location_arguments, offline_store, online_admin, online_mode

DESCRIPTION = (
    "Set, delete and describe client quotas (producer_byte_rate, consumer_byte_rate, request_percentage per user "
    "and/or client id; "
    "connection_creation_rate per IP), like Kafka's kafka-configs.sh: online through --bootstrap-server (and "
    "--command-config for TLS/SASL), or offline on a stopped broker's log dir (--config/--override, as serve). "
    "With zookeeper.connect in that configuration: the cluster's quotas, in ZooKeeper."
)

#: kafka-configs.sh's entity types -> the quota entity types of the wire (Kafka's ClientQuotaEntity).
ENTITY_TYPES = {"users": "user", "clients": "client-id", "ips": "ip"}
#: How the describe lines name each type, as kafka-configs.sh does.
_DESCRIBED_AS = {"user": "user-principal", "client-id": "client-id", "ip": "ip"}
_TOPIC_HINT = (
    "topic configs are set with `triolog topics --alter --topic NAME --config KEY=VALUE` (and "
    "--delete-config KEY), and described with `triolog topics --describe`"
)
_NOT_HERE = {
    "topics": _TOPIC_HINT,
    "brokers": "broker configs are static in triolog (server.properties, or --override when starting serve); "
    + _TOPIC_HINT.replace("topic configs", "per-topic overrides", 1),
    "broker-loggers": "the broker's log level is logger.level in server.properties",
}


class _Entity(argparse.Action):
    """Keeps --entity-type/--entity-name/--entity-default and the shorthands in command-line order
    (Kafka pairs the n-th name with the n-th type)."""

    def __call__(self, parser, namespace, values, option_string=None):
        if namespace.entity is None:
            namespace.entity = []
        namespace.entity.append((self.const, values))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument(
        "--alter", action="store_true", help="change an entity's quotas (--add-config, --delete-config)"
    )
    action.add_argument("--describe", action="store_true", help="print the quotas of the entities given")
    parser.set_defaults(entity=None)
    entity = parser.add_argument_group("entity")
    entity.add_argument(
        "--entity-type",
        action=_Entity,
        const="type",
        metavar="TYPE",
        help="users, clients or ips (repeatable: users and clients together name a user's client)",
    )
    entity.add_argument(
        "--entity-name",
        action=_Entity,
        const="name",
        metavar="NAME",
        help="the name of the entity of the --entity-type before it (a user, a client id, an IP)",
    )
    entity.add_argument(
        "--entity-default",
        action=_Entity,
        const="default",
        nargs=0,
        help="the default entity of the --entity-type before it (Kafka's <default>)",
    )
    for flag, kind, what, default in (
        ("--user", "users", "a user (its principal's name)", "user"),
        ("--client", "clients", "a client id", "client id"),
        ("--ip", "ips", "an IP address", "IP"),
    ):
        entity.add_argument(
            flag, action=_Entity, const=kind, metavar="NAME", help=f"{what}: --entity-type {kind} --entity-name NAME"
        )
        entity.add_argument(
            f"{flag}-defaults",
            action=_Entity,
            const=f"{kind}-default",
            nargs=0,
            help=f"the default {default}: --entity-type {kind} --entity-default",
        )
    parser.add_argument(
        "--add-config",
        action="append",
        default=[],
        metavar="K=V,K2=V2",
        help="quotas to set: producer_byte_rate, consumer_byte_rate (bytes per second), "
        "request_percentage (percent of a thread's time) for users and clients; "
        "connection_creation_rate (per second) for ips",
    )
    parser.add_argument(
        "--delete-config",
        action="append",
        default=[],
        metavar="K,K2",
        help="quotas to remove (comma-separated, repeatable)",
    )
    add_location_arguments(parser)


def run(args: argparse.Namespace) -> int:
    try:
        online = online_mode(args)
        pairs = _entity_pairs(args)
        added = _parse_added(args.add_config)
        deleted = [key.strip() for text in args.delete_config for key in text.split(",") if key.strip()]
        _check(args, pairs, added, deleted)
    except (UsageError, ValueError) as exc:
        return _fail(str(exc), 2)
    backend = _Online(args) if online else _Offline(args)
    try:
        return backend.run(lambda quotas: _act(args, quotas, pairs, added, deleted))
    except ToolError as exc:
        return _fail(str(exc), 1)


def _entity_pairs(args) -> list[tuple[str, str | None]]:
    """(kafka-configs.sh entity type, name) pairs; name "" is the default entity, None no name
    (every entity of the type, for --describe)."""
    given = args.entity or []
    long_form = [(kind, value) for kind, value in given if kind in ("type", "name", "default")]
    shorthand = [(kind, value) for kind, value in given if kind not in ("type", "name", "default")]
    if long_form and shorthand:
        raise UsageError(
            "--entity-type/--entity-name/--entity-default cannot be mixed with --user, --client, --ip "
            "and their -defaults"
        )
    if shorthand:
        return [
            (kind[: -len("-default")], "") if kind.endswith("-default") else (kind, value) for kind, value in shorthand
        ]
    types = [value for kind, value in long_form if kind == "type"]
    names = [value if kind == "name" else "" for kind, value in long_form if kind != "type"]
    if len(names) > len(types):
        raise UsageError("more entity names (--entity-name, --entity-default) than --entity-type")
    return [(kind, names[i] if i < len(names) else None) for i, kind in enumerate(types)]


def _check(args, pairs, added, deleted) -> None:
    if not pairs:
        raise UsageError(
            "give an entity: --entity-type users|clients|ips with --entity-name NAME or "
            "--entity-default, or --user/--client/--ip NAME"
        )
    kinds = [kind for kind, _ in pairs]
    for kind in kinds:
        if kind in _NOT_HERE:
            raise UsageError(f"triolog configs handles client quotas (users, clients, ips) only: {_NOT_HERE[kind]}")
        if kind not in ENTITY_TYPES:
            raise UsageError(f"unknown entity type {kind!r} (users, clients or ips)")
    if len(set(kinds)) != len(kinds):
        raise UsageError(f"an entity type given twice: {', '.join(sorted({k for k in kinds if kinds.count(k) > 1}))}")
    if len(kinds) > 1 and set(kinds) != {"users", "clients"}:
        raise UsageError("only users and clients may be given together (a user's client id)")
    for kind, name in pairs:
        if kind == "ips" and name:
            try:
                ipaddress.ip_address(name)
            except ValueError:
                raise UsageError(f"the entity name of ips must be an IP address, got {name!r}") from None
    if args.alter:
        if any(name is None for _, name in pairs):
            raise UsageError("--alter needs an --entity-name or --entity-default for every --entity-type")
        if not added and not deleted:
            raise UsageError("--alter needs --add-config or --delete-config")
        scram = [key for key in deleted if key.upper().startswith("SCRAM-")]
        if scram:
            raise UsageError(f"{', '.join(scram)}: SCRAM credentials are managed with `triolog users`")
    elif added or deleted:
        raise UsageError("--add-config and --delete-config go with --alter")


_OUTSIDE_BRACKETS = r"(?=[^\]]*(?:\[|$))"


def _parse_added(texts: list[str]) -> dict[str, float]:
    """--add-config 'k=v,k2=v2' (Kafka's syntax, [] grouping commas) -> key: number."""
    out: dict[str, float] = {}
    for text in texts:
        for item in re.split("," + _OUTSIDE_BRACKETS, text):
            if not item.strip():
                continue
            key, sep, value = item.partition("=")
            key, value = key.strip(), value.strip().strip("[]").strip()
            if not sep or not key:
                raise UsageError(f"invalid --add-config item {item.strip()!r}: configs are given as KEY=VALUE")
            if key.upper().startswith("SCRAM-"):
                raise UsageError(f"{key}: SCRAM credentials are managed with `triolog users`")
            try:
                number = float(value)
            except ValueError:
                raise UsageError(f"cannot parse the quota value of {key}: {value!r} is not a number") from None
            out[key] = number
    return out


def _entity(pairs):
    from triolog.client.types import ClientQuotaEntity

    return ClientQuotaEntity({ENTITY_TYPES[kind]: (name or None) for kind, name in pairs})


def _filter(pairs):
    from triolog.client.types import ClientQuotaFilter, ClientQuotaFilterComponent as Component

    return ClientQuotaFilter.contains_only(
        Component.of_entity_type(ENTITY_TYPES[kind])
        if name is None
        else Component.of_default_entity(ENTITY_TYPES[kind])
        if name == ""
        else Component.of_entity(ENTITY_TYPES[kind], name)
        for kind, name in pairs
    )


def _act(args, quotas, pairs, added, deleted) -> int:
    """The action, on ``quotas`` (the online or offline backend)."""
    from triolog.client.types import ClientQuotaAlteration, ClientQuotaAlterationOp

    if args.describe:
        found = quotas.describe(_filter(pairs))
        for entity in sorted(found, key=lambda e: e.sort_key()):
            print(
                f"Quota configs for {describe_entity(entity)} are "
                + ", ".join(f"{key}={java_double(value)}" for key, value in sorted(found[entity].items()))
            )
        return 0
    entity = _entity(pairs)
    current = quotas.describe(_filter(pairs)).get(entity, {}) if deleted else {}
    missing = [key for key in deleted if key not in current]
    if missing:  # as kafka-configs.sh: deleting what is not set is an error
        raise ToolError(f"Invalid config(s): {','.join(missing)} (not set for {describe_entity(entity)})")
    ops = [ClientQuotaAlterationOp(key, value) for key, value in added.items()]
    ops += [ClientQuotaAlterationOp(key, None) for key in deleted]
    quotas.alter(ClientQuotaAlteration(entity, tuple(ops)))
    kind, name = pairs[0]
    if name:
        print(f"Completed updating config for {kind[:-1]} {name}.")
    else:
        print(f"Completed updating default config for {kind} in the cluster.")
    return 0


def describe_entity(entity) -> str:
    """kafka-configs.sh's words for an entity: ``user-principal 'alice', the default client-id``."""
    parts = []
    for kind in ("user", "client-id", "ip"):
        if kind in entity:
            name = entity.get(kind)
            parts.append(f"the default {_DESCRIBED_AS[kind]}" if name is None else f"{_DESCRIBED_AS[kind]} '{name}'")
    return ", ".join(parts)


def java_double(value: float) -> str:
    """A double as Java prints it (kafka-configs.sh shows Kafka's doubles): ``1048576.0``, and
    ``1.048576E7`` from ten million up."""
    value = float(value)
    if value == 0 or 1e-3 <= abs(value) < 1e7:
        return repr(value)
    sign, digits, exponent = Decimal(repr(value)).normalize().as_tuple()
    text = "".join(map(str, digits))
    mantissa = text[0] + "." + (text[1:] or "0")
    return f"{'-' if sign else ''}{mantissa}E{len(text) - 1 + int(exponent)}"  # (finite: an int)


class _Online:
    """The quota calls of a running broker (AdminClient)."""

    def __init__(self, args) -> None:
        self.args = args

    def run(self, act) -> int:
        with online_admin(self.args, "triolog-configs") as self.admin:
            return act(self)

    def describe(self, quota_filter) -> dict:
        return self.admin.describe_client_quotas(quota_filter)

    def alter(self, alteration) -> None:
        self.admin.alter_client_quotas([alteration])


class _Offline:
    """The quota file of a stopped broker (QuotaStore), under its log dir's lock."""

    def __init__(self, args) -> None:
        self.args = args

    def run(self, act) -> int:
        from triolog.broker.security.files import CorruptSecurityFileError
        from triolog.broker.security.quotas import InvalidQuotaError, QuotaStore

        try:
            with offline_store(self.args, QuotaStore, "quotas") as self.store:
                return act(self)
        except (CorruptSecurityFileError, InvalidQuotaError, ValueError) as exc:
            raise ToolError(str(exc)) from None

    def describe(self, quota_filter) -> dict:
        from triolog.client.types import ClientQuotaEntity

        found = {ClientQuotaEntity(dict(entity.parts)): values for entity, values in self.store.describe().items()}
        return {
            entity: dict(sorted(values.items())) for entity, values in found.items() if quota_filter.matches(entity)
        }

    def alter(self, alteration) -> None:
        """As the broker applies an alter_client_quotas entry: values rounded to whole units."""
        from triolog.broker.security.quotas import QuotaEntity
        from triolog.client.types import quota_value

        ops = {op.key: None if op.value is None else float(quota_value(op.key, op.value)) for op in alteration.ops}
        self.store.alter([(QuotaEntity.from_parts(alteration.entity.entries), ops)])


def _fail(message: str, code: int = 1) -> int:
    print(f"triolog configs: {message}", file=sys.stderr)
    return code
