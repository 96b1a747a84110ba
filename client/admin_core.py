"""Admin operations (topics, configs, records, offsets), shared by both admin clients.

Each takes many topics at once, as the wire APIs do; a per-topic or per-partition error raises
the first failing entry's typed exception after the whole response is read (the other entries
were still applied by the broker, as in Kafka).

Admin requests are not retried: creating or deleting twice is not harmless, so a connection error
reaches the caller (RequestNotSentError: nothing happened; ResponseLostError: it may have).
"""

from __future__ import annotations

from typing import NamedTuple

from triolog.protocol import messages as m
from triolog.protocol.consumer_protocol import PROTOCOL_TYPE, ConsumerProtocolError, decode_assignment
from triolog.protocol.errors import ErrorCode

from .cluster import RETRY_ON_LEADER
from .consumer_core import list_offsets_op
from .errors import BrokerConnectionError, TriologClientError, UnknownTopicOrPartitionError, error_for
from .metadata import MetadataCache, describe
from .ops import Call, Op, Sleep, check_response, now
from .types import (
    ClientQuotaAlteration,
    ClientQuotaAlterationOp,
    ClientQuotaEntity,
    ClientQuotaFilter,
    ConfigEntry,
    LogDirDescription,
    LogDirPartitionInfo,
    NewTopic,
    OffsetAndTimestamp,
    TopicDescription,
    TopicPartition,
    quota_value,
)

__all__ = [
    "AclBinding",
    "AclBindingFilter",
    "AdminCore",
    "BrokerConfigEntry",
    "ConsumerGroupDescription",
    "ConsumerGroupListing",
    "MemberDescription",
    "ProducerStateDescription",
    "ScramCredentialInfo",
    "TransactionDescription",
    "TransactionListing",
    "UserScramCredentialDeletion",
    "UserScramCredentialUpsertion",
    "UserScramCredentialsDescription",
]


class BrokerConfigEntry(NamedTuple):
    """One broker config key as DescribeConfigs shows a BROKER resource."""

    #: None for a key left unset that falls back to another (log.retention.ms to .hours).
    value: str | None
    #: "broker" (set in the broker's configuration) or "default".
    source: str
    read_only: bool
    is_sensitive: bool


class ConsumerGroupListing(NamedTuple):
    """A group as list_groups shows it (Kafka's ConsumerGroupListing)."""

    group_id: str
    protocol_type: str
    state: str


class MemberDescription(NamedTuple):
    member_id: str
    group_instance_id: str | None
    client_id: str
    host: str
    #: The member's partitions (decoded from its ConsumerProtocol Assignment; empty unless the
    #: group is Stable, or for a group that is not a consumer group).
    assignment: frozenset


class ConsumerGroupDescription(NamedTuple):
    """Kafka's ConsumerGroupDescription. ``state``: Empty, PreparingRebalance,
    CompletingRebalance, Stable, or Dead (no such group)."""

    group_id: str
    state: str
    protocol_type: str
    #: The assignor the group chose ("range", "roundrobin"), when Stable.
    partition_assignor: str
    members: tuple[MemberDescription, ...]


class TransactionListing(NamedTuple):
    """A transactional id as list_transactions shows it (Kafka's TransactionListing)."""

    transactional_id: str
    producer_id: int
    #: Kafka's state name: Empty, Ongoing, PrepareCommit, PrepareAbort, CompleteCommit...
    state: str


class TransactionDescription(NamedTuple):
    """Kafka's TransactionDescription: a transactional id's producer and open transaction."""

    transactional_id: str
    state: str
    producer_id: int
    producer_epoch: int
    transaction_timeout_ms: int
    #: When the open transaction began (epoch ms); -1 with none.
    transaction_start_time_ms: int
    partitions: frozenset


class ProducerStateDescription(NamedTuple):
    """A producer a partition's leader knows (Kafka's ProducerState, kafka-transactions.sh
    describe-producers)."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    #: The first offset of its open transaction in the partition; -1 with none.
    current_transaction_start_offset: int


#: Group-level errors that pass: the coordinator is loading or moving (retried within the timeout).
#: A coordinated request's answers after which the coordinator is looked up again.
_COORDINATOR_MOVED = frozenset((ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE))
_COORDINATOR_BUSY = frozenset(
    {ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR}
)


#: Kafka's admin client's retry.backoff.ms: the wait before asking a moved leader again.
RETRY_BACKOFF_S = 0.1


def _raise_first(errors: list[TriologClientError]) -> None:
    if errors:
        raise errors[0]


# -- ACLs and SCRAM users ----------------------------------------------------------------------


class AclBinding(NamedTuple):
    """One ACL (Kafka's AclBinding): ``principal`` (``User:alice``) from ``host`` is ALLOWed or
    DENYed ``operation`` on the resources ``resource_type``/``resource_name``/``pattern_type``
    names. Enum fields take Kafka's names in any case and CamelCase (``"Read"``,
    ``"DescribeConfigs"``, ``"topic"``), kept in Kafka's upper-case spelling."""

    resource_type: str
    resource_name: str
    principal: str
    operation: str
    permission_type: str = "ALLOW"
    host: str = "*"
    pattern_type: str = "LITERAL"


class AclBindingFilter(NamedTuple):
    """Selects ACLs (Kafka's AclBindingFilter): ``ANY`` or None matches anything; pattern_type
    ``MATCH`` with a name selects every ACL that applies to that resource."""

    resource_type: str = "ANY"
    resource_name: str | None = None
    principal: str | None = None
    operation: str = "ANY"
    permission_type: str = "ANY"
    host: str | None = None
    pattern_type: str = "ANY"


class ScramCredentialInfo(NamedTuple):
    mechanism: str
    iterations: int


class UserScramCredentialsDescription(NamedTuple):
    """A user's SCRAM credentials: which mechanisms, with how many iterations (never the keys)."""

    user: str
    credential_infos: tuple[ScramCredentialInfo, ...]


class UserScramCredentialUpsertion(NamedTuple):
    """Set ``user``'s ``mechanism`` credential to ``password``: the client salts it (a random
    salt of 32 bytes) and hashes it (PBKDF2 with ``iterations``); the password never travels."""

    user: str
    mechanism: str
    password: str
    iterations: int = 4096


class UserScramCredentialDeletion(NamedTuple):
    user: str
    mechanism: str


_SCRAM_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}


def acl_enum(value: str, allowed, what: str) -> str:
    """Kafka's upper-case name of an ACL enum value given as ``Read``, ``read``, ``DescribeConfigs``
    or ``DESCRIBE_CONFIGS``; ValueError naming the allowed values otherwise."""
    import re

    text = str(value).strip()
    name = (re.sub(r"(?<=[a-z])(?=[A-Z])", "_", text) if "_" not in text else text).upper().replace("-", "_")
    if name not in allowed:
        raise ValueError(f"unknown {what} {value!r} (one of {', '.join(allowed)})")
    return name


_RESOURCE_TYPES = ("ANY", "TOPIC", "GROUP", "CLUSTER", "TRANSACTIONAL_ID")
_PATTERN_TYPES = ("ANY", "MATCH", "LITERAL", "PREFIXED")
_OPERATIONS = (
    "ANY",
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
_PERMISSIONS = ("ANY", "DENY", "ALLOW")


def _wire_entry(acl) -> m.AclEntry:
    acl = AclBinding(*acl) if not isinstance(acl, AclBinding) else acl
    return m.AclEntry(
        resource_type=acl_enum(acl.resource_type, _RESOURCE_TYPES, "resource type"),
        resource_name=acl.resource_name,
        principal=acl.principal,
        host=acl.host or "*",
        pattern_type=acl_enum(acl.pattern_type, _PATTERN_TYPES, "pattern type"),
        operation=acl_enum(acl.operation, _OPERATIONS, "operation"),
        permission_type=acl_enum(acl.permission_type, _PERMISSIONS, "permission type"),
    )


def _wire_filter(flt) -> dict:
    flt = AclBindingFilter() if flt is None else flt
    return dict(
        resource_type=acl_enum(flt.resource_type, _RESOURCE_TYPES, "resource type"),
        resource_name=flt.resource_name,
        principal=flt.principal,
        host=flt.host,
        pattern_type=acl_enum(flt.pattern_type, _PATTERN_TYPES, "pattern type"),
        operation=acl_enum(flt.operation, _OPERATIONS, "operation"),
        permission_type=acl_enum(flt.permission_type, _PERMISSIONS, "permission type"),
    )


def _binding(doc: dict) -> AclBinding:
    return AclBinding(
        resource_type=doc["resource_type"],
        resource_name=doc["resource_name"],
        principal=doc["principal"],
        operation=doc["operation"],
        permission_type=doc["permission_type"],
        host=doc.get("host") or "*",
        pattern_type=doc.get("pattern_type") or "LITERAL",
    )


def salted_upsertion(upsertion: UserScramCredentialUpsertion, salt: bytes | None = None) -> m.ScramCredentialUpsertion:
    """The wire upsertion of a password: PBKDF2-HMAC of its SASLprep form with a random salt."""
    import hashlib
    import os

    from scramp.core import saslprep

    mechanism = str(upsertion.mechanism).upper()
    if mechanism not in _SCRAM_HASHES:
        raise ValueError(f"unknown SCRAM mechanism {upsertion.mechanism!r} (SCRAM-SHA-256 or SCRAM-SHA-512)")
    salt = os.urandom(32) if salt is None else salt
    salted = hashlib.pbkdf2_hmac(
        _SCRAM_HASHES[mechanism], saslprep(upsertion.password).encode("utf-8"), salt, upsertion.iterations
    )
    return m.ScramCredentialUpsertion(
        name=upsertion.user, mechanism=mechanism, iterations=upsertion.iterations, salt=salt, salted_password=salted
    )


class SecurityAdminOps:
    """The ACL and SCRAM-user operations (mixed into AdminCore)."""

    timeout_s: float

    def create_acls_op(self, acls) -> Op[None]:
        """Add AclBindings (a binding already present is not added twice); the first failing
        binding's error is raised after the others were applied."""
        entries = tuple(_wire_entry(acl) for acl in acls)
        doc = check_response((yield Call(m.CreateAclsRequest(id=0, creations=entries), self.timeout_s)))
        _raise_first([error_for(r["error_code"], r.get("error_message")) for r in doc["results"] if r["error_code"]])

    def describe_acls_op(self, acl_filter: AclBindingFilter | None = None) -> Op[list[AclBinding]]:
        """The ACLs ``acl_filter`` selects (every ACL without one)."""
        doc = check_response((yield Call(m.DescribeAclsRequest(id=0, **_wire_filter(acl_filter)), self.timeout_s)))
        return [_binding(acl) for acl in doc["acls"]]

    def delete_acls_op(self, filters) -> Op[list[list[AclBinding]]]:
        """Delete the ACLs each filter selects; per filter, the ACLs it deleted."""
        wire = tuple(m.AclFilter(**_wire_filter(f)) for f in filters)
        doc = check_response((yield Call(m.DeleteAclsRequest(id=0, filters=wire), self.timeout_s)))
        _raise_first(
            [error_for(r["error_code"], r.get("error_message")) for r in doc["filter_results"] if r["error_code"]]
        )
        return [[_binding(acl) for acl in r["matching_acls"]] for r in doc["filter_results"]]

    def describe_user_scram_credentials_op(self, users=None) -> Op[dict[str, UserScramCredentialsDescription]]:
        """Every user's SCRAM mechanisms (of ``users`` only, if given: an unknown one raises
        ResourceNotFoundError after the others are read)."""
        request = m.DescribeUserScramCredentialsRequest(id=0, users=None if users is None else tuple(users))
        doc = check_response((yield Call(request, self.timeout_s)))
        out, errors = {}, []
        for result in doc["results"]:
            if result["error_code"]:
                errors.append(error_for(result["error_code"], result.get("error_message")))
                continue
            out[result["user"]] = UserScramCredentialsDescription(
                result["user"],
                tuple(
                    ScramCredentialInfo(info["mechanism"], info["iterations"]) for info in result["credential_infos"]
                ),
            )
        _raise_first(errors)
        return out

    def alter_user_scram_credentials_op(self, alterations) -> Op[None]:
        """Apply UserScramCredentialUpsertions (salted and hashed here) and
        UserScramCredentialDeletions; the first failing user's error is raised."""
        upsertions, deletions = [], []
        for alteration in alterations:
            if isinstance(alteration, UserScramCredentialUpsertion):
                upsertions.append(salted_upsertion(alteration))
            elif isinstance(alteration, UserScramCredentialDeletion):
                deletions.append(
                    m.ScramCredentialDeletion(name=alteration.user, mechanism=str(alteration.mechanism).upper())
                )
            else:
                raise TypeError(
                    f"expected UserScramCredentialUpsertion or UserScramCredentialDeletion, "
                    f"got {type(alteration).__name__}"
                )
        request = m.AlterUserScramCredentialsRequest(id=0, deletions=tuple(deletions), upsertions=tuple(upsertions))
        doc = check_response((yield Call(request, self.timeout_s)))
        _raise_first([error_for(r["error_code"], r.get("error_message")) for r in doc["results"] if r["error_code"]])

    # -- client quotas -----------------------------------------------------------------------------

    def describe_client_quotas_op(
        self, quota_filter: ClientQuotaFilter | None = None
    ) -> Op[dict[ClientQuotaEntity, dict[str, float]]]:
        """Entity -> its quotas (key -> value, a float as Kafka's Admin gives it) for the entities
        ``quota_filter`` selects (every one without it)."""
        flt = ClientQuotaFilter.all() if quota_filter is None else quota_filter
        request = m.DescribeClientQuotasRequest(
            id=0,
            strict=bool(flt.strict),
            components=tuple(
                m.QuotaFilterComponent(entity_type=c.entity_type, match_type=c.match_type, match=c.match)
                for c in flt.components
            ),
        )
        doc = check_response((yield Call(request, self.timeout_s)))
        return {
            ClientQuotaEntity({p["entity_type"]: p["entity_name"] for p in entry["entity"]}): {
                key: float(value) for key, value in sorted(entry["values"].items())
            }
            for entry in doc["entries"]
        }

    def alter_client_quotas_op(
        self, alterations, validate_only: bool = False, raise_errors: bool = True
    ) -> Op[dict[ClientQuotaEntity, TriologClientError | None]]:
        """Apply :class:`ClientQuotaAlteration`s; the broker takes or refuses each on its own.
        Per entity None or its error (``error.entity`` names it), the first raised with
        ``raise_errors``."""
        alterations = [a if isinstance(a, ClientQuotaAlteration) else ClientQuotaAlteration(*a) for a in alterations]
        entries = []
        for alteration in alterations:
            if not isinstance(alteration.entity, ClientQuotaEntity):
                raise TypeError(f"expected a ClientQuotaEntity, got {type(alteration.entity).__name__}")
            ops = tuple(
                m.QuotaOp(key=op.key, remove=True)
                if op.value is None
                else m.QuotaOp(key=op.key, value=quota_value(op.key, op.value))
                for op in (ClientQuotaAlterationOp(*op) for op in alteration.ops)
            )
            entries.append(
                m.QuotaAlteration(
                    entity=tuple(
                        m.QuotaEntityPart(entity_type=kind, entity_name=name)
                        for kind, name in alteration.entity.entries.items()
                    ),
                    ops=ops,
                )
            )
        request = m.AlterClientQuotasRequest(id=0, entries=tuple(entries), validate_only=validate_only)
        doc = check_response((yield Call(request, self.timeout_s)))
        out: dict[ClientQuotaEntity, TriologClientError | None] = {}
        for alteration, result in zip(alterations, doc["entries"]):
            error = None
            if result["error_code"]:
                error = error_for(result["error_code"], result.get("error_message"))
                error.entity = alteration.entity
            out[alteration.entity] = error
        if raise_errors:
            _raise_first([error for error in out.values() if error is not None])
        return out


class AdminCore(SecurityAdminOps):
    def __init__(self, request_timeout_ms: int = 30_000) -> None:
        self.timeout_s = request_timeout_ms / 1000
        # allow_auto_create=False: an admin's metadata requests never create a topic.
        self.metadata = MetadataCache(max_age_s=0, request_timeout_s=self.timeout_s, allow_auto_create=False)

    def create_topics_op(self, topics, validate_only: bool = False) -> Op[dict[str, dict[str, str]]]:
        """Create ``NewTopic``s (or names); returns name -> the topic's effective configs."""
        new = [NewTopic(t) if isinstance(t, str) else NewTopic(*t) for t in topics]
        request = m.CreateTopicsRequest(
            id=0,
            validate_only=validate_only,
            topics=tuple(
                m.NewTopic(
                    name=t.name,
                    num_partitions=t.num_partitions,
                    replication_factor=t.replication_factor,
                    configs={str(k): str(v) for k, v in dict(t.configs or {}).items()},
                    replica_assignment=None
                    if t.replica_assignment is None
                    else tuple(tuple(int(node) for node in replicas) for replicas in t.replica_assignment),
                )
                for t in new
            ),
        )
        doc = check_response((yield Call(request, self.timeout_s)))
        errors, out = [], {}
        for topic in doc["topics"]:
            if topic["error_code"]:
                errors.append(error_for(topic["error_code"], topic.get("error_message"), topic=topic["name"]))
            else:
                out[topic["name"]] = topic["configs"]
        _raise_first(errors)
        return out

    def delete_topics_op(self, names) -> Op[None]:
        doc = check_response((yield Call(m.DeleteTopicsRequest(id=0, topics=tuple(names)), self.timeout_s)))
        _raise_first(
            [
                error_for(t["error_code"], t.get("error_message"), topic=t["name"])
                for t in doc["topics"]
                if t["error_code"]
            ]
        )

    def list_topics_op(self) -> Op[list[str]]:
        return sorted((yield from self.metadata.all_topics_op()))

    def describe_topics_op(self, names=None) -> Op[dict[str, TopicDescription]]:
        """Every topic, or the topics named: one metadata request for just those, sent with
        allow_auto_topic_creation false (this cache's setting, as Kafka's admin client does), so
        describing never creates a topic; an absent or invalid name raises its error."""
        if names is None:
            return (yield from self.metadata.all_topics_op())
        names = list(dict.fromkeys(names))
        raw = yield from self.metadata.fetch_op(names)
        out = {}
        for name in names:
            entry = raw.get(name)
            if entry is None:
                raise UnknownTopicOrPartitionError(f"topic {name!r} is not in the metadata response", topic=name)
            if entry["error_code"]:
                raise error_for(entry["error_code"], entry.get("error_message"), topic=name)
            out[name] = describe(entry)
        return out

    def describe_configs_op(self, names) -> Op[dict[str, dict[str, ConfigEntry]]]:
        doc = check_response((yield Call(m.DescribeConfigsRequest(id=0, topics=tuple(names)), self.timeout_s)))
        errors, out = [], {}
        for topic in doc["topics"]:
            if topic["error_code"]:
                errors.append(error_for(topic["error_code"], topic.get("error_message"), topic=topic["name"]))
            else:
                out[topic["name"]] = {k: ConfigEntry(v["value"], v["source"]) for k, v in topic["configs"].items()}
        _raise_first(errors)
        return out

    def describe_broker_configs_op(self, broker: str | int = "") -> Op[dict[str, BrokerConfigEntry]]:
        """Every broker config key of ``broker`` (its node id; "" = the broker answering)."""
        name = str(broker)
        doc = check_response((yield Call(m.DescribeConfigsRequest(id=0, brokers=(name,)), self.timeout_s)))
        (entry,) = doc["brokers"]
        if entry["error_code"]:
            raise error_for(entry["error_code"], entry.get("error_message"))
        return {
            k: BrokerConfigEntry(v["value"], v["source"], v.get("read_only", False), v.get("is_sensitive", False))
            for k, v in entry["configs"].items()
        }

    def create_partitions_op(self, counts: dict[str, int], validate_only: bool = False) -> Op[None]:
        """Grow each topic to ``counts[topic]`` partitions in total (Kafka's createPartitions)."""
        request = m.CreatePartitionsRequest(
            id=0,
            validate_only=validate_only,
            topics=tuple(m.CreatePartitionsTopic(name=name, count=int(count)) for name, count in counts.items()),
        )
        doc = check_response((yield Call(request, self.timeout_s)))
        _raise_first(
            [
                error_for(t["error_code"], t.get("error_message"), topic=t["name"])
                for t in doc["topics"]
                if t["error_code"]
            ]
        )

    def alter_configs_op(
        self,
        configs: dict[str, dict[str, str]],
        delete: dict[str, list[str]] | None = None,
        *,
        replace: bool = False,
        append: dict[str, dict[str, str]] | None = None,
        subtract: dict[str, dict[str, str]] | None = None,
        validate_only: bool = False,
    ) -> Op[None]:
        """Set ``configs[topic]`` and remove the overrides named in ``delete[topic]``. ``replace``:
        ``configs[topic]`` becomes the topic's whole override set (Kafka's AlterConfigs).
        ``append``/``subtract``: items added to or removed from list configs (cleanup.policy)."""
        delete, append, subtract = delete or {}, append or {}, subtract or {}
        names = list(dict.fromkeys([*configs, *delete, *append, *subtract]))

        def texts(values) -> dict[str, str]:
            return {str(k): str(v) for k, v in values.items()}

        request = m.AlterConfigsRequest(
            id=0,
            validate_only=validate_only,
            topics=tuple(
                m.AlterConfigsTopic(
                    name=name,
                    configs=texts(configs.get(name, {})),
                    delete=tuple(delete.get(name, ())),
                    replace=replace,
                    append=texts(append.get(name, {})),
                    subtract=texts(subtract.get(name, {})),
                )
                for name in names
            ),
        )
        doc = check_response((yield Call(request, self.timeout_s)))
        _raise_first(
            [
                error_for(t["error_code"], t.get("error_message"), topic=t["name"])
                for t in doc["topics"]
                if t["error_code"]
            ]
        )

    def delete_records_op(
        self, offsets: dict, raise_errors: bool = True
    ) -> Op[dict[TopicPartition, int | TriologClientError]]:
        """Move each partition's log start to the offset (-1: the high watermark); returns the
        new low watermarks. The broker applies each partition on its own: with ``raise_errors``
        false, a failed partition maps to its error instead of raising the first one, so a caller
        can report every partition (as Kafka's per-partition results do). A partition whose leader
        moved (or a lost connection) is asked again, as Kafka's admin client does, within the
        request timeout: moving a log start to an offset twice moves it once."""
        deadline = now() + self.timeout_s
        out: dict[TopicPartition, int | TriologClientError] = {}
        todo = dict(offsets)
        while True:
            try:
                answered = yield from self._delete_records_once_op(todo)
            except BrokerConnectionError:
                if now() + RETRY_BACKOFF_S >= deadline:
                    raise
                yield Sleep(RETRY_BACKOFF_S)
                continue
            out.update(answered)
            todo = {
                tp: todo[tp]
                for tp, result in answered.items()
                if isinstance(result, TriologClientError) and result.code in RETRY_ON_LEADER
            }
            if not todo or now() + RETRY_BACKOFF_S >= deadline:
                break
            yield Sleep(RETRY_BACKOFF_S)
        errors = [result for result in out.values() if isinstance(result, TriologClientError)]
        if raise_errors:
            _raise_first(errors)
        return out

    def _delete_records_once_op(self, offsets: dict) -> Op[dict[TopicPartition, int | TriologClientError]]:
        by_topic: dict[str, list[m.DeleteRecordsPartition]] = {}
        for (topic, partition), offset in offsets.items():
            by_topic.setdefault(topic, []).append(m.DeleteRecordsPartition(partition=partition, offset=offset))
        request = m.DeleteRecordsRequest(
            id=0,
            topics=tuple(m.DeleteRecordsTopic(name=name, partitions=tuple(parts)) for name, parts in by_topic.items()),
        )
        doc = check_response((yield Call(request, self.timeout_s)))
        out: dict[TopicPartition, int | TriologClientError] = {}
        for topic in doc["topics"]:
            for part in topic["partitions"]:
                tp = TopicPartition(topic["name"], part["partition"])
                if part["error_code"]:
                    out[tp] = error_for(
                        part["error_code"], part.get("error_message"), topic=tp.topic, partition=tp.partition
                    )
                else:
                    out[tp] = part["low_watermark"]
        return out

    def describe_log_dirs_op(self, topics=None) -> Op[dict[str, LogDirDescription]]:
        """Path -> what that log dir holds. ``topics``: None (every partition), topic names, or a
        mapping name -> partitions (None: all of them). A requested topic or partition in no log
        dir raises its error (UnknownTopicOrPartitionError...) after the whole response is read."""
        if topics is None:
            wanted = None
        else:
            items = topics.items() if isinstance(topics, dict) else ((name, None) for name in topics)
            wanted = tuple(
                m.DescribeLogDirsTopic(name=name, partitions=None if parts is None else tuple(parts))
                for name, parts in items
            )
        doc = check_response((yield Call(m.DescribeLogDirsRequest(id=0, topics=wanted), self.timeout_s)))
        out = {}
        for log_dir in doc["log_dirs"]:
            partitions = {
                TopicPartition(topic["name"], p["partition"]): LogDirPartitionInfo(
                    p["size_bytes"], p["segments"], p["log_start_offset"], p["log_end_offset"]
                )
                for topic in log_dir["topics"]
                for p in topic["partitions"]
            }
            error = (log_dir.get("error_message") or "error") if log_dir["error_code"] else None
            out[log_dir["path"]] = LogDirDescription(
                log_dir["path"], error, log_dir["total_bytes"], log_dir["usable_bytes"], partitions
            )
        errors = []
        for topic in doc["errors"]:
            if topic["error_code"]:
                errors.append(error_for(topic["error_code"], topic.get("error_message"), topic=topic["name"]))
            errors.extend(
                error_for(p["error_code"], p.get("error_message"), topic=topic["name"], partition=p["partition"])
                for p in topic["partitions"]
            )
        _raise_first(errors)
        return out

    def list_offsets_op(self, queries: dict) -> Op[dict[TopicPartition, OffsetAndTimestamp]]:
        """``{(topic, partition): -1 | -2 | -3 | time_ms}`` -> (offset, timestamp); -1/-1 = none."""
        return (yield from list_offsets_op({TopicPartition(*tp): ts for tp, ts in queries.items()}, self.timeout_s))

    def api_versions_op(self) -> Op[dict]:
        return check_response((yield Call(m.ApiVersionsRequest(id=0), self.timeout_s)))

    # -- consumer groups ---------------------------------------------------------------------------
    # A group's (or transactional id's) coordinator is looked up first (_find_coordinators_op) and
    # the connection sends the request there (triolog.client.cluster); while a coordinator loads
    # its topic (COORDINATOR_LOAD_IN_PROGRESS) or moves, reads are asked again within the request
    # timeout (they change nothing).

    def _group_call_op(self, request) -> Op[dict]:
        deadline = now() + self.timeout_s
        while True:
            doc = yield Call(request, self.timeout_s)
            if doc["error_code"] in _COORDINATOR_BUSY and now() + 0.1 < deadline:
                yield Sleep(0.1)
                continue
            return check_response(doc)

    # -- transactions (kafka-transactions.sh's requests) -------------------------------------------

    def list_transactions_op(
        self, states=(), producer_ids=(), min_duration_ms: int = -1
    ) -> Op[list[TransactionListing]]:
        """The transactional ids the broker coordinates (of the states and producer ids named,
        open longer than ``min_duration_ms``), sorted by id."""
        request = m.ListTransactionsRequest(
            id=0,
            state_filters=tuple(states),
            producer_id_filters=tuple(producer_ids),
            duration_filter_ms=min_duration_ms,
        )
        yield from self._learn_brokers_op()
        doc = yield from self._group_call_op(request)
        if doc.get("unknown_state_filters"):
            raise ValueError(f"unknown transaction states: {', '.join(doc['unknown_state_filters'])}")
        return sorted(
            TransactionListing(t["transactional_id"], t["producer_id"], t["state"]) for t in doc["transactions"]
        )

    def _learn_brokers_op(self) -> Op[None]:
        """A metadata request for no topic: the connection learns every live broker, so a
        coordinator's request can go to its coordinator (and, on a cluster, a listing to each)."""
        yield Call(m.MetadataRequest(id=0, topics=(), allow_auto_topic_creation=False), self.timeout_s)

    def _find_coordinators_op(self, key_type: int, keys) -> Op[None]:
        """Each key's coordinator looked up (the connection routes the request's parts there)."""
        yield from self._learn_brokers_op()
        for key in keys:
            yield Call(m.FindCoordinatorRequest(id=0, key=key, key_type=key_type), self.timeout_s)

    def describe_transactions_op(self, transactional_ids) -> Op[dict[str, TransactionDescription]]:
        """Per transactional id its TransactionDescription; the first id's error is raised
        (TransactionalIdNotFoundError...)."""
        wanted = tuple(dict.fromkeys(transactional_ids))
        answers: dict[str, dict] = {}
        asking = wanted
        yield from self._learn_brokers_op()
        for attempt in range(3):
            # Each id's coordinator first: the connection routes each id's part there.
            for transactional_id in asking:
                yield Call(m.FindCoordinatorRequest(id=0, key=transactional_id, key_type=1), self.timeout_s)
            doc = yield from self._group_call_op(m.DescribeTransactionsRequest(id=0, transactional_ids=asking))
            for t in doc["transactions"]:
                answers[t["transactional_id"]] = t
            asking = tuple(i for i in asking if answers.get(i, {}).get("error_code") in _COORDINATOR_MOVED)
            if not asking:
                break
            yield Sleep(0.1 * (attempt + 1))
        out, errors = {}, []
        for t in (answers[i] for i in wanted if i in answers):
            if t["error_code"]:
                errors.append(error_for(t["error_code"], t.get("error_message")))
                continue
            out[t["transactional_id"]] = TransactionDescription(
                t["transactional_id"],
                t["state"],
                t["producer_id"],
                t["producer_epoch"],
                t["transaction_timeout_ms"],
                t["transaction_start_time_ms"],
                frozenset(TopicPartition(topic["name"], p) for topic in t["topics"] for p in topic["partitions"]),
            )
        _raise_first(errors)
        return out

    def describe_producers_op(self, partitions) -> Op[dict[TopicPartition, list[ProducerStateDescription]]]:
        """Per partition, the producers its leader knows, with their open transactions."""
        by_topic: dict[str, list[int]] = {}
        for topic, partition in partitions:
            by_topic.setdefault(topic, []).append(partition)
        request = m.DescribeProducersRequest(
            id=0, topics=tuple(m.TxnTopic(name=t, partitions=tuple(dict.fromkeys(ps))) for t, ps in by_topic.items())
        )
        doc = check_response((yield Call(request, self.timeout_s)))
        out, errors = {}, []
        for topic in doc["topics"]:
            for part in topic["partitions"]:
                if part["error_code"]:
                    errors.append(
                        error_for(
                            part["error_code"],
                            part.get("error_message"),
                            topic=topic["name"],
                            partition=part["partition"],
                        )
                    )
                    continue
                out[TopicPartition(topic["name"], part["partition"])] = [
                    ProducerStateDescription(
                        p["producer_id"],
                        p["producer_epoch"],
                        p["last_sequence"],
                        p["last_timestamp"],
                        p["coordinator_epoch"],
                        p["current_txn_start_offset"],
                    )
                    for p in part["active_producers"]
                ]
        _raise_first(errors)
        return out

    def abort_transaction_op(
        self, topic: str, partition: int, producer_id: int, producer_epoch: int, coordinator_epoch: int
    ) -> Op[None]:
        """Write an ABORT marker for a producer's open transaction on one partition (Kafka's
        kafka-transactions.sh abort, for a hanging transaction its coordinator does not know);
        needs CLUSTER_ACTION with an authorizer. The values come from describe_producers."""
        request = m.WriteTxnMarkersRequest(
            id=0,
            markers=(
                m.TxnMarker(
                    producer_id=producer_id,
                    producer_epoch=producer_epoch,
                    committed=False,
                    topics=(m.TxnTopic(name=topic, partitions=(partition,)),),
                    coordinator_epoch=coordinator_epoch,
                ),
            ),
        )
        doc = check_response((yield Call(request, self.timeout_s)))
        for marker in doc["markers"]:
            for t in marker["topics"]:
                for part in t["partitions"]:
                    if part["error_code"]:
                        raise error_for(
                            part["error_code"], part.get("error_message"), topic=t["name"], partition=part["partition"]
                        )

    def list_groups_op(self, states=()) -> Op[list[ConsumerGroupListing]]:
        """Every group (of the states named, if any), sorted by id."""
        yield from self._learn_brokers_op()
        doc = yield from self._group_call_op(m.ListGroupsRequest(id=0, states_filter=tuple(states)))
        return sorted(ConsumerGroupListing(g["group_id"], g["protocol_type"], g["group_state"]) for g in doc["groups"])

    def describe_groups_op(self, group_ids) -> Op[dict[str, ConsumerGroupDescription]]:
        """Per group: state, assignor and members with their partitions. An unknown group is
        described as Dead with no members (Kafka's answer)."""
        groups = tuple(dict.fromkeys(group_ids))
        yield from self._find_coordinators_op(0, groups)
        doc = yield from self._group_call_op(m.DescribeGroupsRequest(id=0, groups=groups))
        out, errors = {}, []
        for group in doc["groups"]:
            if group["error_code"]:
                errors.append(error_for(group["error_code"], group.get("error_message")))
                continue
            members = []
            for member in group["members"]:
                assigned: frozenset[TopicPartition] = frozenset()
                if group["protocol_type"] == PROTOCOL_TYPE and member["member_assignment"]:
                    try:
                        assigned = frozenset(
                            TopicPartition(t, p) for t, p in decode_assignment(member["member_assignment"]).partitions()
                        )
                    except ConsumerProtocolError:
                        pass  # not our bytes to judge: shown without an assignment
                members.append(
                    MemberDescription(
                        member["member_id"],
                        member.get("group_instance_id"),
                        member["client_id"],
                        member["client_host"],
                        assigned,
                    )
                )
            out[group["group_id"]] = ConsumerGroupDescription(
                group["group_id"],
                group["group_state"],
                group["protocol_type"],
                group["protocol_data"],
                tuple(sorted(members)),
            )
        _raise_first(errors)
        return out

    def delete_groups_op(self, group_ids, raise_errors: bool = True) -> Op[dict[str, TriologClientError | None]]:
        """Delete empty groups with their committed offsets; per group None or its error
        (GroupIdNotFoundError, NonEmptyGroupError...), the first raised with ``raise_errors``."""
        groups = tuple(dict.fromkeys(group_ids))
        yield from self._find_coordinators_op(0, groups)
        doc = yield from self._group_call_op(m.DeleteGroupsRequest(id=0, groups_names=groups))
        out = {
            r["group_id"]: (error_for(r["error_code"], r.get("error_message")) if r["error_code"] else None)
            for r in doc["results"]
        }
        if raise_errors:
            _raise_first([error for error in out.values() if error is not None])
        return out

    def list_group_offsets_op(self, group_id: str, partitions=None) -> Op[dict[TopicPartition, int]]:
        """The group's committed offsets (of ``partitions``, or all it has); a partition
        without one is left out."""
        topics = None
        if partitions is not None:
            by_topic: dict[str, set[int]] = {}
            for topic, partition in partitions:
                by_topic.setdefault(topic, set()).add(partition)
            topics = tuple(
                m.OffsetFetchTopic(name=name, partitions=tuple(sorted(parts))) for name, parts in by_topic.items()
            )
        yield from self._find_coordinators_op(0, (group_id,))
        doc = yield from self._group_call_op(m.OffsetFetchRequest(id=0, group_id=group_id, topics=topics))
        out, errors = {}, []
        for topic in doc["topics"]:
            for part in topic["partitions"]:
                if part["error_code"]:
                    errors.append(
                        error_for(
                            part["error_code"],
                            part.get("error_message"),
                            topic=topic["name"],
                            partition=part["partition"],
                        )
                    )
                elif part["committed_offset"] >= 0:
                    out[TopicPartition(topic["name"], part["partition"])] = part["committed_offset"]
        _raise_first(errors)
        return out

    def alter_group_offsets_op(self, group_id: str, offsets: dict) -> Op[None]:
        """Commit ``offsets`` ({tp: offset}) for the group from outside it (generation -1, no
        member id): the broker accepts this only while the group has no members (Kafka's rule;
        UnknownMemberIdError otherwise)."""
        by_topic: dict[str, list[m.OffsetCommitPartition]] = {}
        for (topic, partition), offset in offsets.items():
            by_topic.setdefault(topic, []).append(m.OffsetCommitPartition(partition=partition, committed_offset=offset))
        request = m.OffsetCommitRequest(
            id=0,
            group_id=group_id,
            generation_id=-1,
            member_id="",
            topics=tuple(m.OffsetCommitTopic(name=name, partitions=tuple(parts)) for name, parts in by_topic.items()),
        )
        deadline = now() + self.timeout_s
        while True:
            yield from self._find_coordinators_op(0, (group_id,))
            doc = yield from self._group_call_op(request)
            codes = {p["error_code"] for t in doc["topics"] for p in t["partitions"]}
            # The broker gives a group-level error to every partition (Kafka's OffsetCommit has no
            # top-level code): a busy or moving coordinator is retried like a top-level one.
            if codes and codes <= _COORDINATOR_BUSY and now() + 0.1 < deadline:
                yield Sleep(0.1)
                continue
            break
        _raise_first(
            [
                error_for(p["error_code"], p.get("error_message"), topic=t["name"], partition=p["partition"])
                for t in doc["topics"]
                for p in t["partitions"]
                if p["error_code"]
            ]
        )
