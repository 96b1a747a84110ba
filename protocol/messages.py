"""The message layer of wire protocol v1: one frozen dataclass per request and response, for both sides.

The dataclasses are the schema. Each field's annotation says its wire type and range
(``Int32``, ``Acks``, ``tuple[ProduceTopic, ...]``...), and a field with a default is optional.
The same compiled schema validates what the server decodes (:func:`decode_request`, raising
:class:`RequestError`), what either side encodes (raising :class:`LocalProtocolError`: a bug on our
side, caught before it reaches the wire) and what the client decodes (:func:`decode_response`,
raising :class:`RemoteProtocolError`). Each field name is spelled once, here.

Rules of the decoder:

* msgpack types are strict: ``bin`` is not ``str`` and ``str`` is not ``bin``; a bool is not an
  int; an int must fit the Kafka wire width of its field (int16/int32/int64).
* ``nil`` means absent: an optional field that is nil takes its default; a required field that is
  missing or nil is an error.
* Unknown keys are ignored, at every level, for forward compatibility (a later minor revision may
  add optional fields, as Kafka's tagged fields do). Only the known fields are ever walked, so an
  unknown key's value is never inspected, however deep.
* Sizes are bounded by the frame limit (msgpack never announces more elements than there are
  bytes) and nesting by msgpack's own stack limit; both surface as "not a valid msgpack document".
  What a frame may decode to is bounded before decoding (:mod:`triolog.protocol.request_limits`): no
  more msgpack objects than its API's budget, no string longer than Kafka's 32767 bytes.

Which problems fail the whole request and which are reported per topic or partition follows
Kafka: the request parser refuses what it cannot parse, the broker judges values one topic or
partition at a time so that one bad entry does not fail the others.

Request level, raised here as :class:`RequestError` (``INVALID_REQUEST`` unless noted):
  not msgpack, not a map, an empty frame; ``id`` missing, mistyped or outside [0, 2^31);
  ``api`` missing, mistyped or unknown; ``v`` missing or mistyped; ``v`` not supported
  (``UNSUPPORTED_VERSION``); any required field missing or nil; any field of the wrong type; an
  int outside its wire width; a value with no per-entry meaning: ``acks`` not in {0, 1, -1},
  ``isolation_level`` not in {0, 1}, a negative ``timeout_ms``, ``max_wait_ms``, ``min_bytes``,
  ``max_bytes`` or ``partition_max_bytes``, a list_offsets ``timestamp`` below -3, a
  find_coordinator ``key_type`` other than 0 or 1; the same topic twice in one request or the
  same partition twice in one topic, and likewise a join's protocol, a sync's or leave's member
  or a group named twice (the response could not say which entry a result belongs to, and Kafka
  would silently keep only one).

Per topic or partition, decoded here and reported by the server in that entry's ``error_code``:
  topic names (``INVALID_TOPIC_EXCEPTION``), unknown topics and partitions, negative partition
  numbers included (``UNKNOWN_TOPIC_OR_PARTITION``; servers: never index a list with one),
  ``num_partitions`` and create_partitions' ``count`` (``INVALID_PARTITIONS``; -1 = the broker
  default for ``num_partitions``), ``replication_factor``
  other than 1 or -1 (``INVALID_REPLICATION_FACTOR``), config keys and values
  (``INVALID_CONFIG``), ``fetch_offset`` outside the log and delete_records ``offset`` below -1
  or above the high watermark (``OFFSET_OUT_OF_RANGE``), and the ``records`` bytes themselves
  (``CORRUPT_MESSAGE``, ``INVALID_RECORD``...).

Judged by the group coordinator, not here: group ids, member ids, generations and session
timeouts (``INVALID_GROUP_ID``, ``UNKNOWN_MEMBER_ID``, ``ILLEGAL_GENERATION``,
``INVALID_SESSION_TIMEOUT``...); by the producer state of each partition: an idempotent batch's
producer id, epoch and sequence numbers. docs/protocol.md says which error each API answers when.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import os
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar, Union, get_args, get_origin, get_type_hints

import msgpack

from .errors import ErrorCode
from .frames import LocalProtocolError, RemoteProtocolError
from .request_limits import ENVELOPE_OBJECTS, RequestBudgetError, RequestLimits, count_objects, scan_request

#: The limits of a broker with the default ``max.broker.partitions``.
DEFAULT_REQUEST_LIMITS = RequestLimits()

#: API name -> (min_version, max_version) this implementation speaks.
SUPPORTED_APIS: dict[str, tuple[int, int]] = {
    name: (1, 1)
    for name in (
        "api_versions",
        "metadata",
        "create_topics",
        "delete_topics",
        "describe_configs",
        "alter_configs",
        "create_partitions",
        "produce",
        "fetch",
        "list_offsets",
        "delete_records",
        "describe_log_dirs",
        "init_producer_id",
        "find_coordinator",
        "join_group",
        "sync_group",
        "heartbeat",
        "leave_group",
        "offset_commit",
        "offset_fetch",
        "list_groups",
        "describe_groups",
        "delete_groups",
        "sasl_handshake",
        "sasl_authenticate",
        "create_acls",
        "describe_acls",
        "delete_acls",
        "describe_user_scram_credentials",
        "alter_user_scram_credentials",
        "describe_client_quotas",
        "alter_client_quotas",
        "add_partitions_to_txn",
        "add_offsets_to_txn",
        "end_txn",
        "txn_offset_commit",
        "write_txn_markers",
        "describe_transactions",
        "list_transactions",
        "describe_producers",
    )
}


class RequestError(RemoteProtocolError):
    """A request refused as a whole; answer with :func:`error_response`, the connection stays usable.

    ``request_id`` is the request's ``id`` when it could be read (else None, echoed as nil) and
    ``api`` its API name when known, so the response can carry that API's (empty) fields.
    """

    def __init__(self, code: ErrorCode, message: str, request_id: int | None = None, api: str | None = None):
        super().__init__(message)
        self.code = ErrorCode(code)
        self.message = message
        self.request_id = request_id
        self.api = api


class _FieldError(Exception):
    """A schema violation; each entry point re-raises it as its side's protocol error."""


# --- the schema vocabulary -------------------------------------------------------------------

_WIRE_TYPE_NAMES: tuple[tuple[type | tuple[type, ...], str], ...] = (
    (type(None), "nil"),
    (bool, "bool"),  # before int: bool is a subclass of int in Python, not in msgpack
    (int, "int"),
    (float, "float"),
    (str, "str"),
    (bytes, "bin"),
    ((list, tuple), "array"),
    (dict, "map"),
    ((msgpack.ExtType, msgpack.Timestamp), "ext"),
)


def _brief(value: object, limit: int = 60) -> str:
    """repr() cut short: messages quote what the peer sent, and the peer may send megabytes."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _wire_name(value: object) -> str:
    for cls, name in _WIRE_TYPE_NAMES:
        if isinstance(value, cls):
            return name
    return type(value).__name__


class IntRange:
    """Annotation: the int lies in [lo, hi]; ``meaning`` replaces the bounds in messages."""

    def __init__(self, lo: int, hi: int, meaning: str | None = None) -> None:
        self.lo, self.hi = lo, hi
        self.meaning = meaning or f"in [{lo}, {hi}]"

    def __call__(self, value: int, path: str) -> None:
        if not self.lo <= value <= self.hi:
            raise _FieldError(f"field '{path}' must be {self.meaning}, got {value}")


class OneOf:
    """Annotation: the value is one of a fixed set."""

    def __init__(self, *values: object) -> None:
        self.values = values

    def __call__(self, value: object, path: str) -> None:
        if value not in self.values:
            allowed = ", ".join(repr(v) for v in self.values)
            raise _FieldError(f"field '{path}' must be one of {allowed}, got {value!r}")


class Unique:
    """Annotation on an array: no two items (or items' ``key`` attribute) are equal."""

    def __init__(self, key: str | None = None) -> None:
        self.key = key

    def __call__(self, items: tuple[Any, ...], path: str) -> None:
        seen: dict[object, int] = {}
        suffix = f".{self.key}" if self.key else ""
        for index, item in enumerate(items):
            key = getattr(item, self.key) if self.key else item
            if key in seen:
                raise _FieldError(
                    f"field '{path}[{index}]{suffix}' repeats {_brief(key)}, already given in {path}[{seen[key]}]"
                )
            seen[key] = index


Int16 = Annotated[int, IntRange(-(2**15), 2**15 - 1)]
Int32 = Annotated[int, IntRange(-(2**31), 2**31 - 1)]
Int64 = Annotated[int, IntRange(-(2**63), 2**63 - 1)]
#: Sizes, waits and timeouts: an int32 that cannot be negative.
NonNegativeInt32 = Annotated[int, IntRange(0, 2**31 - 1)]
CorrelationId = Annotated[int, IntRange(0, 2**31 - 1)]
Acks = Annotated[int, OneOf(0, 1, -1)]
#: 0 read_uncommitted, 1 read_committed: the same data on a broker without transactions.
IsolationLevel = Annotated[int, OneOf(0, 1)]
OffsetQueryTimestamp = Annotated[
    int, IntRange(-3, 2**63 - 1, "-1 (latest), -2 (earliest), -3 (max timestamp) or a time in ms")
]
ErrorCodeValue = Int16
Port = Annotated[int, IntRange(0, 65535)]
ConfigSource = Annotated[str, OneOf("topic", "broker", "default")]
TopicNames = Annotated[tuple[str, ...], Unique()]


@dataclass(frozen=True)
class ExternalBin:
    """A bin value whose bytes stay outside the message: the caller sends ``length`` bytes of ``ref``.

    The fetch path uses it for records it copies from segment files with sendfile; see
    :func:`pack_parts`.
    """

    length: int
    ref: object

    def __post_init__(self) -> None:
        if not 0 <= self.length <= 2**32 - 1:
            raise LocalProtocolError(f"ExternalBin length {self.length} is outside [0, 2^32)")


# --- requests --------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Request:
    """The envelope every request carries; subclasses add their API's fields."""

    api: ClassVar[str]
    id: CorrelationId
    client_id: str | None = None
    #: Required on the wire (decode_request checks it first); the default is for constructors.
    v: int = 1

    @property
    def expects_response(self) -> bool:
        """False only for produce with acks=0, which the broker never answers."""
        return True


@dataclass(frozen=True, kw_only=True)
class ApiVersionsRequest(Request):
    api: ClassVar[str] = "api_versions"


@dataclass(frozen=True, kw_only=True)
class MetadataRequest(Request):
    api: ClassVar[str] = "metadata"
    #: nil = every topic; an empty list = none (brokers only).
    topics: TopicNames | None = None
    #: Whether a named topic that does not exist may be created (only if the broker's
    #: auto.create.topics.enable is also true): Kafka's MetadataRequest v4+ field, default true.
    #: Producers ask for it, consumers do not (unless configured to).
    allow_auto_topic_creation: bool = True


@dataclass(frozen=True, kw_only=True)
class NewTopic:
    name: str
    #: -1 = the broker's num.partitions; other values below 1 are INVALID_PARTITIONS per topic.
    num_partitions: Int32
    #: 1 or -1 on a single broker; on a cluster, up to the live brokers.
    replication_factor: Int16
    configs: dict[str, str] = field(default_factory=dict)
    #: Per partition, in order from 0, the broker ids of its replicas (preferred leader first),
    #: instead of num_partitions and replication_factor (both -1 then).
    replica_assignment: tuple[tuple[Int32, ...], ...] | None = None


@dataclass(frozen=True, kw_only=True)
class CreateTopicsRequest(Request):
    api: ClassVar[str] = "create_topics"
    topics: Annotated[tuple[NewTopic, ...], Unique("name")]
    validate_only: bool = False


@dataclass(frozen=True, kw_only=True)
class DeleteTopicsRequest(Request):
    api: ClassVar[str] = "delete_topics"
    topics: TopicNames


@dataclass(frozen=True, kw_only=True)
class DescribeConfigsRequest(Request):
    api: ClassVar[str] = "describe_configs"
    topics: TopicNames = ()
    #: Broker resources (Kafka's BROKER type): a node id as a string, or "" for the answering broker.
    brokers: TopicNames = ()


@dataclass(frozen=True, kw_only=True)
class AlterConfigsTopic:
    name: str
    configs: dict[str, str]
    delete: Annotated[tuple[str, ...], Unique()] = ()
    #: Kafka's AlterConfigs: ``configs`` becomes the topic's whole override set (others removed).
    replace: bool = False
    #: IncrementalAlterConfigs' APPEND and SUBTRACT, for list keys: comma-separated items.
    append: dict[str, str] = field(default_factory=dict)
    subtract: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class AlterConfigsRequest(Request):
    api: ClassVar[str] = "alter_configs"
    topics: Annotated[tuple[AlterConfigsTopic, ...], Unique("name")]
    validate_only: bool = False


@dataclass(frozen=True, kw_only=True)
class CreatePartitionsTopic:
    name: str
    #: The new total partition count (Kafka's ``count``), above the current one.
    count: Int32


@dataclass(frozen=True, kw_only=True)
class CreatePartitionsRequest(Request):
    api: ClassVar[str] = "create_partitions"
    topics: Annotated[tuple[CreatePartitionsTopic, ...], Unique("name")]
    timeout_ms: NonNegativeInt32 = 60000
    validate_only: bool = False


@dataclass(frozen=True, kw_only=True)
class ProducePartition:
    partition: Int32
    #: One RecordBatch v2, as bytes (Kafka's rule for magic 2: a second batch is INVALID_RECORD);
    #: validated by the broker, per partition.
    records: bytes


@dataclass(frozen=True, kw_only=True)
class ProduceTopic:
    name: str
    partitions: Annotated[tuple[ProducePartition, ...], Unique("partition")]


@dataclass(frozen=True, kw_only=True)
class ProduceRequest(Request):
    api: ClassVar[str] = "produce"
    acks: Acks
    timeout_ms: NonNegativeInt32
    topics: Annotated[tuple[ProduceTopic, ...], Unique("name")]
    #: The transactional producer's id (Kafka's field): its transactional batches are checked
    #: against its transaction (WRITE on the id; KIP-890 verification).
    transactional_id: str | None = None

    @property
    def expects_response(self) -> bool:
        return self.acks != 0


@dataclass(frozen=True, kw_only=True)
class FetchPartition:
    partition: Int32
    fetch_offset: Int64
    partition_max_bytes: NonNegativeInt32


@dataclass(frozen=True, kw_only=True)
class FetchTopic:
    name: str
    partitions: Annotated[tuple[FetchPartition, ...], Unique("partition")]


@dataclass(frozen=True, kw_only=True)
class FetchRequest(Request):
    api: ClassVar[str] = "fetch"
    max_wait_ms: NonNegativeInt32
    min_bytes: NonNegativeInt32
    max_bytes: NonNegativeInt32
    isolation_level: IsolationLevel = 0
    topics: Annotated[tuple[FetchTopic, ...], Unique("name")]


@dataclass(frozen=True, kw_only=True)
class ListOffsetsPartition:
    partition: Int32
    timestamp: OffsetQueryTimestamp


@dataclass(frozen=True, kw_only=True)
class ListOffsetsTopic:
    name: str
    partitions: Annotated[tuple[ListOffsetsPartition, ...], Unique("partition")]


@dataclass(frozen=True, kw_only=True)
class ListOffsetsRequest(Request):
    api: ClassVar[str] = "list_offsets"
    isolation_level: IsolationLevel = 0
    topics: Annotated[tuple[ListOffsetsTopic, ...], Unique("name")]


@dataclass(frozen=True, kw_only=True)
class DeleteRecordsPartition:
    partition: Int32
    #: -1 = the high watermark; other negatives are OFFSET_OUT_OF_RANGE per partition.
    offset: Int64


@dataclass(frozen=True, kw_only=True)
class DeleteRecordsTopic:
    name: str
    partitions: Annotated[tuple[DeleteRecordsPartition, ...], Unique("partition")]


@dataclass(frozen=True, kw_only=True)
class DeleteRecordsRequest(Request):
    api: ClassVar[str] = "delete_records"
    topics: Annotated[tuple[DeleteRecordsTopic, ...], Unique("name")]


# describe_log_dirs: Kafka's DescribeLogDirs (kafka-log-dirs.sh), what each partition holds on disk.


@dataclass(frozen=True, kw_only=True)
class DescribeLogDirsTopic:
    name: str
    #: nil = every partition of the topic; a partition it does not have is UNKNOWN_TOPIC_OR_PARTITION.
    partitions: Annotated[tuple[Int32, ...], Unique()] | None = None


@dataclass(frozen=True, kw_only=True)
class DescribeLogDirsRequest(Request):
    api: ClassVar[str] = "describe_log_dirs"
    #: nil = every partition of every topic.
    topics: Annotated[tuple[DescribeLogDirsTopic, ...], Unique("name")] | None = None


# --- idempotent producers and consumer groups: Kafka's APIs of the same names ---------------

#: A group or member id as Kafka bounds it: any string the STRING type holds (an empty group id
#: is judged by the coordinator: INVALID_GROUP_ID).
GroupNames = Annotated[tuple[str, ...], Unique()]
#: find_coordinator's key_type: 0 = a consumer group (1, a transactional id, is not served).
CoordinatorType = Annotated[int, OneOf(0, 1)]


@dataclass(frozen=True, kw_only=True)
class InitProducerIdRequest(Request):
    api: ClassVar[str] = "init_producer_id"
    #: nil = an idempotent producer without transactions (the only kind served).
    transactional_id: str | None = None
    transaction_timeout_ms: Int32 = -1
    #: A producer's current id and epoch (Kafka's KIP-360 fields); -1 asks for a new id.
    producer_id: Int64 = -1
    producer_epoch: Int16 = -1


@dataclass(frozen=True, kw_only=True)
class FindCoordinatorRequest(Request):
    api: ClassVar[str] = "find_coordinator"
    #: The group id (for key_type 0).
    key: str
    key_type: CoordinatorType = 0


@dataclass(frozen=True, kw_only=True)
class JoinGroupProtocol:
    #: An assignor's name: "range", "roundrobin"...
    name: str
    #: For protocol_type "consumer", a ConsumerProtocol Subscription (Kafka's bytes).
    metadata: bytes


@dataclass(frozen=True, kw_only=True)
class JoinGroupRequest(Request):
    api: ClassVar[str] = "join_group"
    group_id: str
    session_timeout_ms: Int32
    #: -1 = session_timeout_ms (Kafka's JoinGroup v0 rule).
    rebalance_timeout_ms: Int32 = -1
    #: "" for a member's first join; the broker answers MEMBER_ID_REQUIRED with the id to use.
    member_id: str = ""
    group_instance_id: str | None = None
    protocol_type: str
    protocols: Annotated[tuple[JoinGroupProtocol, ...], Unique("name")]
    reason: str | None = None


@dataclass(frozen=True, kw_only=True)
class SyncGroupAssignment:
    member_id: str
    #: For protocol_type "consumer", a ConsumerProtocol Assignment (Kafka's bytes).
    assignment: bytes


@dataclass(frozen=True, kw_only=True)
class SyncGroupRequest(Request):
    api: ClassVar[str] = "sync_group"
    group_id: str
    generation_id: Int32
    member_id: str
    group_instance_id: str | None = None
    protocol_type: str | None = None
    protocol_name: str | None = None
    #: The leader's assignment of every member; empty from the other members.
    assignments: Annotated[tuple[SyncGroupAssignment, ...], Unique("member_id")] = ()


@dataclass(frozen=True, kw_only=True)
class HeartbeatRequest(Request):
    api: ClassVar[str] = "heartbeat"
    group_id: str
    generation_id: Int32
    member_id: str
    group_instance_id: str | None = None


@dataclass(frozen=True, kw_only=True)
class MemberIdentity:
    member_id: str
    group_instance_id: str | None = None
    reason: str | None = None


@dataclass(frozen=True, kw_only=True)
class LeaveGroupRequest(Request):
    api: ClassVar[str] = "leave_group"
    group_id: str
    members: Annotated[tuple[MemberIdentity, ...], Unique("member_id")]


@dataclass(frozen=True, kw_only=True)
class OffsetCommitPartition:
    partition: Int32
    committed_offset: Int64
    committed_leader_epoch: Int32 = -1
    committed_metadata: str | None = None


@dataclass(frozen=True, kw_only=True)
class OffsetCommitTopic:
    name: str
    partitions: Annotated[tuple[OffsetCommitPartition, ...], Unique("partition")]


@dataclass(frozen=True, kw_only=True)
class OffsetCommitRequest(Request):
    api: ClassVar[str] = "offset_commit"
    group_id: str
    #: -1 with member_id "" = a commit from outside the group (admin tools), allowed while the
    #: group has no members.
    generation_id: Int32 = -1
    member_id: str = ""
    group_instance_id: str | None = None
    topics: Annotated[tuple[OffsetCommitTopic, ...], Unique("name")]


@dataclass(frozen=True, kw_only=True)
class OffsetFetchTopic:
    name: str
    partitions: Annotated[tuple[Int32, ...], Unique()]


@dataclass(frozen=True, kw_only=True)
class OffsetFetchRequest(Request):
    api: ClassVar[str] = "offset_fetch"
    group_id: str
    #: nil = every partition the group has an offset for.
    topics: Annotated[tuple[OffsetFetchTopic, ...], Unique("name")] | None = None
    require_stable: bool = False


@dataclass(frozen=True, kw_only=True)
class ListGroupsRequest(Request):
    api: ClassVar[str] = "list_groups"
    #: Group states to list ("Empty", "Stable"...); empty = all.
    states_filter: GroupNames = ()


@dataclass(frozen=True, kw_only=True)
class DescribeGroupsRequest(Request):
    api: ClassVar[str] = "describe_groups"
    groups: GroupNames


@dataclass(frozen=True, kw_only=True)
class DeleteGroupsRequest(Request):
    api: ClassVar[str] = "delete_groups"
    groups_names: GroupNames


# --- responses -------------------------------------------------------------------------------
# Every level with an error_code also has an error_message; encoding refuses a non-zero code
# without a message ("error_message always says, in words, what was wrong").


@dataclass(frozen=True, kw_only=True)
class Response:
    """The envelope every response carries; API fields default to empty so error responses are whole."""

    api: ClassVar[str]
    #: nil only when the request's id could not be read.
    id: CorrelationId | None
    error_code: ErrorCodeValue = ErrorCode.NONE
    error_message: str | None = None


@dataclass(frozen=True, kw_only=True)
class ApiVersion:
    name: str
    min_version: Int16
    max_version: Int16


def _supported_api_versions() -> tuple[ApiVersion, ...]:
    return tuple(ApiVersion(name=n, min_version=lo, max_version=hi) for n, (lo, hi) in SUPPORTED_APIS.items())


@dataclass(frozen=True, kw_only=True)
class ApiVersionsResponse(Response):
    api: ClassVar[str] = "api_versions"
    apis: tuple[ApiVersion, ...] = field(default_factory=_supported_api_versions)
    broker_version: str = ""


@dataclass(frozen=True, kw_only=True)
class BrokerMetadata:
    node_id: Int32
    host: str
    port: Port
    rack: str | None = None


@dataclass(frozen=True, kw_only=True)
class PartitionMetadata:
    partition: Int32
    leader: Int32
    error_code: ErrorCodeValue = ErrorCode.NONE
    error_message: str | None = None
    log_start_offset: Int64 = -1
    high_watermark: Int64 = -1
    leader_epoch: Int32 = -1
    replicas: tuple[Int32, ...] = ()
    isr: tuple[Int32, ...] = ()
    offline_replicas: tuple[Int32, ...] = ()


@dataclass(frozen=True, kw_only=True)
class TopicMetadata:
    name: str
    error_code: ErrorCodeValue = ErrorCode.NONE
    error_message: str | None = None
    internal: bool = False
    partitions: tuple[PartitionMetadata, ...] = ()


@dataclass(frozen=True, kw_only=True)
class MetadataResponse(Response):
    api: ClassVar[str] = "metadata"
    brokers: tuple[BrokerMetadata, ...] = ()
    controller_id: Int32 = -1
    topics: tuple[TopicMetadata, ...] = ()


@dataclass(frozen=True, kw_only=True)
class CreateTopicResult:
    name: str
    error_code: ErrorCodeValue = ErrorCode.NONE
    error_message: str | None = None
    num_partitions: Int32 = -1
    configs: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class CreateTopicsResponse(Response):
    api: ClassVar[str] = "create_topics"
    topics: tuple[CreateTopicResult, ...] = ()


@dataclass(frozen=True, kw_only=True)
class TopicResult:
    """One topic's outcome where there is nothing else to say: delete_topics, alter_configs, create_partitions."""

    name: str
    error_code: ErrorCodeValue = ErrorCode.NONE
    error_message: str | None = None


@dataclass(frozen=True, kw_only=True)
class DeleteTopicsResponse(Response):
    api: ClassVar[str] = "delete_topics"
    topics: tuple[TopicResult, ...] = ()


@dataclass(frozen=True, kw_only=True)
class ConfigEntry:
    value: str | None
    source: ConfigSource
    read_only: bool = False
    is_sensitive: bool = False


@dataclass(frozen=True, kw_only=True)
class DescribeConfigsResult:
    name: str
    error_code: ErrorCodeValue = ErrorCode.NONE
    error_message: str | None = None
    configs: dict[str, ConfigEntry] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class DescribeConfigsResponse(Response):
    api: ClassVar[str] = "describe_configs"
    topics: tuple[DescribeConfigsResult, ...] = ()
    brokers: tuple[DescribeConfigsResult, ...] = ()


@dataclass(frozen=True, kw_only=True)
class AlterConfigsResponse(Response):
    api: ClassVar[str] = "alter_configs"
    topics: tuple[TopicResult, ...] = ()


@dataclass(frozen=True, kw_only=True)
class CreatePartitionsResponse(Response):
    api: ClassVar[str] = "create_partitions"
    topics: tuple[TopicResult, ...] = ()


@dataclass(frozen=True, kw_only=True)
class ProducePartitionResult:
    partition: Int32
    error_code: ErrorCodeValue = ErrorCode.NONE
    error_message: str | None = None
    base_offset: Int64 = -1
    #: -1 unless the topic uses LogAppendTime.
    log_append_time: Int64 = -1
    log_start_offset: Int64 = -1


@dataclass(frozen=True, kw_only=True)
class ProduceTopicResult:
    name: str
    partitions: tuple[ProducePartitionResult, ...]


@dataclass(frozen=True, kw_only=True)
class ProduceResponse(Response):
    api: ClassVar[str] = "produce"
    topics: tuple[ProduceTopicResult, ...] = ()
    throttle_ms: NonNegativeInt32 = 0


@dataclass(frozen=True, kw_only=True)
class FetchAbortedTransaction:
    """A transaction aborted within the fetched range (Kafka's FetchResponse AbortedTransaction):
    a read_committed consumer skips its producer's transactional batches from ``first_offset``
    up to the producer's ABORT marker."""

    producer_id: Int64
    first_offset: Int64


@dataclass(frozen=True, kw_only=True)
class FetchPartitionResult:
    partition: Int32
    error_code: ErrorCodeValue = ErrorCode.NONE
    error_message: str | None = None
    high_watermark: Int64 = -1
    last_stable_offset: Int64 = -1
    log_start_offset: Int64 = -1
    #: read_committed (isolation_level 1) only: the aborted transactions overlapping ``records``;
    #: nil for read_uncommitted, as Kafka answers.
    aborted_transactions: tuple[FetchAbortedTransaction, ...] | None = None
    #: Whole batches; an ExternalBin when the server sends them from a file (pack_parts).
    records: bytes | ExternalBin = b""


@dataclass(frozen=True, kw_only=True)
class FetchTopicResult:
    name: str
    partitions: tuple[FetchPartitionResult, ...]


@dataclass(frozen=True, kw_only=True)
class FetchResponse(Response):
    api: ClassVar[str] = "fetch"
    throttle_ms: NonNegativeInt32 = 0
    topics: tuple[FetchTopicResult, ...] = ()


@dataclass(frozen=True, kw_only=True)
class ListOffsetsPartitionResult:
    partition: Int32
    error_code: ErrorCodeValue = ErrorCode.NONE
    error_message: str | None = None
    timestamp: Int64 = -1
    offset: Int64 = -1


@dataclass(frozen=True, kw_only=True)
class ListOffsetsTopicResult:
    name: str
    partitions: tuple[ListOffsetsPartitionResult, ...]


@dataclass(frozen=True, kw_only=True)
class ListOffsetsResponse(Response):
    api: ClassVar[str] = "list_offsets"
    topics: tuple[ListOffsetsTopicResult, ...] = ()


@dataclass(frozen=True, kw_only=True)
class DeleteRecordsPartitionResult:
    partition: Int32
    error_code: ErrorCodeValue = ErrorCode.NONE
    error_message: str | None = None
    low_watermark: Int64 = -1


@dataclass(frozen=True, kw_only=True)
class DeleteRecordsTopicResult:
    name: str
    partitions: tuple[DeleteRecordsPartitionResult, ...]


@dataclass(frozen=True, kw_only=True)
class DeleteRecordsResponse(Response):
    api: ClassVar[str] = "delete_records"
    topics: tuple[DeleteRecordsTopicResult, ...] = ()


@dataclass(frozen=True, kw_only=True)
class LogDirPartition:
    partition: Int32
    #: The sum of the partition's segment (.log) sizes, as Kafka's partition_size.
    size_bytes: Int64
    segments: Int32
    log_start_offset: Int64
    log_end_offset: Int64


@dataclass(frozen=True, kw_only=True)
class LogDirTopic:
    name: str
    partitions: tuple[LogDirPartition, ...]


@dataclass(frozen=True, kw_only=True)
class LogDirResult:
    """One entry of log.dirs; an offline directory has KAFKA_STORAGE_ERROR and no topics."""

    path: str
    error_code: ErrorCodeValue = ErrorCode.NONE
    error_message: str | None = None
    #: The file system's size and the bytes still usable there; -1 when it cannot be read.
    total_bytes: Int64 = -1
    usable_bytes: Int64 = -1
    topics: tuple[LogDirTopic, ...] = ()


@dataclass(frozen=True, kw_only=True)
class LogDirPartitionError:
    partition: Int32
    error_code: ErrorCodeValue
    error_message: str | None = None


@dataclass(frozen=True, kw_only=True)
class LogDirTopicError:
    """A requested topic, or some of its partitions, found in no log dir, and why."""

    name: str
    #: Set for the whole topic (unknown or invalid name, no partitions named); else NONE.
    error_code: ErrorCodeValue = ErrorCode.NONE
    error_message: str | None = None
    partitions: tuple[LogDirPartitionError, ...] = ()


@dataclass(frozen=True, kw_only=True)
class DescribeLogDirsResponse(Response):
    api: ClassVar[str] = "describe_log_dirs"
    log_dirs: tuple[LogDirResult, ...] = ()
    errors: tuple[LogDirTopicError, ...] = ()


@dataclass(frozen=True, kw_only=True)
class InitProducerIdResponse(Response):
    api: ClassVar[str] = "init_producer_id"
    producer_id: Int64 = -1
    producer_epoch: Int16 = -1


@dataclass(frozen=True, kw_only=True)
class FindCoordinatorResponse(Response):
    api: ClassVar[str] = "find_coordinator"
    node_id: Int32 = -1
    host: str = ""
    port: Port = 0


@dataclass(frozen=True, kw_only=True)
class JoinGroupMember:
    member_id: str
    group_instance_id: str | None = None
    metadata: bytes


@dataclass(frozen=True, kw_only=True)
class JoinGroupResponse(Response):
    api: ClassVar[str] = "join_group"
    generation_id: Int32 = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    skip_assignment: bool = False
    member_id: str = ""
    #: Every member with its metadata for protocol_name, for the leader only; empty for the others.
    members: tuple[JoinGroupMember, ...] = ()


@dataclass(frozen=True, kw_only=True)
class SyncGroupResponse(Response):
    api: ClassVar[str] = "sync_group"
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(frozen=True, kw_only=True)
class HeartbeatResponse(Response):
    api: ClassVar[str] = "heartbeat"


@dataclass(frozen=True, kw_only=True)
class MemberResponse:
    member_id: str
    group_instance_id: str | None = None
    error_code: ErrorCodeValue = ErrorCode.NONE
    error_message: str | None = None


@dataclass(frozen=True, kw_only=True)
class LeaveGroupResponse(Response):
    api: ClassVar[str] = "leave_group"
    members: tuple[MemberResponse, ...] = ()


@dataclass(frozen=True, kw_only=True)
class OffsetCommitPartitionResult:
    partition: Int32
    error_code: ErrorCodeValue = ErrorCode.NONE
    error_message: str | None = None


@dataclass(frozen=True, kw_only=True)
class OffsetCommitTopicResult:
    name: str
    partitions: tuple[OffsetCommitPartitionResult, ...]


@dataclass(frozen=True, kw_only=True)
class OffsetCommitResponse(Response):
    api: ClassVar[str] = "offset_commit"
    topics: tuple[OffsetCommitTopicResult, ...] = ()


@dataclass(frozen=True, kw_only=True)
class OffsetFetchPartitionResult:
    partition: Int32
    error_code: ErrorCodeValue = ErrorCode.NONE
    error_message: str | None = None
    #: -1 = no committed offset.
    committed_offset: Int64 = -1
    committed_leader_epoch: Int32 = -1
    metadata: str | None = None


@dataclass(frozen=True, kw_only=True)
class OffsetFetchTopicResult:
    name: str
    partitions: tuple[OffsetFetchPartitionResult, ...]


@dataclass(frozen=True, kw_only=True)
class OffsetFetchResponse(Response):
    api: ClassVar[str] = "offset_fetch"
    topics: tuple[OffsetFetchTopicResult, ...] = ()


@dataclass(frozen=True, kw_only=True)
class ListedGroup:
    group_id: str
    protocol_type: str
    group_state: str


@dataclass(frozen=True, kw_only=True)
class ListGroupsResponse(Response):
    api: ClassVar[str] = "list_groups"
    groups: tuple[ListedGroup, ...] = ()


@dataclass(frozen=True, kw_only=True)
class DescribedGroupMember:
    member_id: str
    group_instance_id: str | None = None
    client_id: str
    client_host: str
    #: The member's metadata and assignment for the group's protocol; empty unless Stable.
    member_metadata: bytes = b""
    member_assignment: bytes = b""


@dataclass(frozen=True, kw_only=True)
class DescribedGroup:
    group_id: str
    error_code: ErrorCodeValue = ErrorCode.NONE
    error_message: str | None = None
    #: "Empty", "PreparingRebalance", "CompletingRebalance", "Stable" or "Dead" (an unknown group).
    group_state: str = ""
    protocol_type: str = ""
    #: The chosen protocol (assignor) name.
    protocol_data: str = ""
    members: tuple[DescribedGroupMember, ...] = ()


@dataclass(frozen=True, kw_only=True)
class DescribeGroupsResponse(Response):
    api: ClassVar[str] = "describe_groups"
    groups: tuple[DescribedGroup, ...] = ()


@dataclass(frozen=True, kw_only=True)
class DeletableGroupResult:
    group_id: str
    error_code: ErrorCodeValue = ErrorCode.NONE
    error_message: str | None = None


@dataclass(frozen=True, kw_only=True)
class DeleteGroupsResponse(Response):
    api: ClassVar[str] = "delete_groups"
    results: tuple[DeletableGroupResult, ...] = ()


@dataclass(frozen=True, kw_only=True)
class SaslHandshakeRequest(Request):
    """Kafka's SaslHandshake v1: the mechanism the client will authenticate with."""

    api: ClassVar[str] = "sasl_handshake"
    mechanism: str


@dataclass(frozen=True, kw_only=True)
class SaslHandshakeResponse(Response):
    api: ClassVar[str] = "sasl_handshake"
    #: The mechanisms this listener offers (whatever the outcome).
    mechanisms: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class SaslAuthenticateRequest(Request):
    """Kafka's SaslAuthenticate: one SASL message of the mechanism's exchange."""

    api: ClassVar[str] = "sasl_authenticate"
    auth_bytes: bytes


@dataclass(frozen=True, kw_only=True)
class SaslAuthenticateResponse(Response):
    api: ClassVar[str] = "sasl_authenticate"
    #: The server's SASL message (SCRAM's server-first or server-final).
    auth_bytes: bytes = b""
    #: When the exchange completes: how long the session lasts before the client must
    #: re-authenticate (KIP-368, connections.max.reauth.ms); 0: it never expires.
    session_lifetime_ms: Int64 = 0


# -- ACLs (Kafka's CreateAcls, DescribeAcls, DeleteAcls) ------------------------------------------

#: Kafka's names of its ACL enums, as its tools print them; ANY (and MATCH) only in filters.
AclResourceType = Annotated[str, OneOf("ANY", "TOPIC", "GROUP", "CLUSTER", "TRANSACTIONAL_ID")]
AclPatternType = Annotated[str, OneOf("ANY", "MATCH", "LITERAL", "PREFIXED")]
AclOperationName = Annotated[
    str,
    OneOf(
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
    ),
]
AclPermission = Annotated[str, OneOf("ANY", "DENY", "ALLOW")]


@dataclass(frozen=True, kw_only=True)
class AclEntry:
    """One ACL: who (principal, host) may or may not (permission_type) do what (operation) to
    which resources (resource_type, resource_name, pattern_type)."""

    resource_type: AclResourceType
    resource_name: str
    pattern_type: AclPatternType = "LITERAL"
    principal: str
    host: str = "*"
    operation: AclOperationName
    permission_type: AclPermission


@dataclass(frozen=True, kw_only=True)
class AclFilter:
    """Selects ACLs: every field that is ANY or nil matches anything."""

    resource_type: AclResourceType = "ANY"
    resource_name: str | None = None
    pattern_type: AclPatternType = "ANY"
    principal: str | None = None
    host: str | None = None
    operation: AclOperationName = "ANY"
    permission_type: AclPermission = "ANY"


@dataclass(frozen=True, kw_only=True)
class CreateAclsRequest(Request):
    api: ClassVar[str] = "create_acls"
    creations: tuple[AclEntry, ...]


@dataclass(frozen=True, kw_only=True)
class AclResult:
    error_code: ErrorCodeValue = ErrorCode.NONE
    error_message: str | None = None


@dataclass(frozen=True, kw_only=True)
class CreateAclsResponse(Response):
    api: ClassVar[str] = "create_acls"
    #: One per creation, in the request's order.
    results: tuple[AclResult, ...] = ()


@dataclass(frozen=True, kw_only=True)
class DescribeAclsRequest(Request):
    """The ACLs one filter selects (the filter's fields inline, as Kafka's DescribeAcls)."""

    api: ClassVar[str] = "describe_acls"
    resource_type: AclResourceType = "ANY"
    resource_name: str | None = None
    pattern_type: AclPatternType = "ANY"
    principal: str | None = None
    host: str | None = None
    operation: AclOperationName = "ANY"
    permission_type: AclPermission = "ANY"


@dataclass(frozen=True, kw_only=True)
class DescribeAclsResponse(Response):
    api: ClassVar[str] = "describe_acls"
    acls: tuple[AclEntry, ...] = ()


@dataclass(frozen=True, kw_only=True)
class DeleteAclsRequest(Request):
    api: ClassVar[str] = "delete_acls"
    filters: tuple[AclFilter, ...]


@dataclass(frozen=True, kw_only=True)
class DeleteAclsFilterResult:
    error_code: ErrorCodeValue = ErrorCode.NONE
    error_message: str | None = None
    #: The ACLs this filter deleted.
    matching_acls: tuple[AclEntry, ...] = ()


@dataclass(frozen=True, kw_only=True)
class DeleteAclsResponse(Response):
    api: ClassVar[str] = "delete_acls"
    #: One per filter, in the request's order.
    filter_results: tuple[DeleteAclsFilterResult, ...] = ()


# -- SCRAM users (Kafka's DescribeUserScramCredentials, AlterUserScramCredentials) ---------------

ScramMechanismName = Annotated[str, OneOf("SCRAM-SHA-256", "SCRAM-SHA-512")]


@dataclass(frozen=True, kw_only=True)
class DescribeUserScramCredentialsRequest(Request):
    api: ClassVar[str] = "describe_user_scram_credentials"
    #: nil = every user.
    users: tuple[str, ...] | None = None


@dataclass(frozen=True, kw_only=True)
class CredentialInfo:
    mechanism: ScramMechanismName
    iterations: Int32


@dataclass(frozen=True, kw_only=True)
class UserScramCredentials:
    user: str
    error_code: ErrorCodeValue = ErrorCode.NONE
    error_message: str | None = None
    credential_infos: tuple[CredentialInfo, ...] = ()


@dataclass(frozen=True, kw_only=True)
class DescribeUserScramCredentialsResponse(Response):
    api: ClassVar[str] = "describe_user_scram_credentials"
    results: tuple[UserScramCredentials, ...] = ()


@dataclass(frozen=True, kw_only=True)
class ScramCredentialDeletion:
    name: str
    mechanism: ScramMechanismName


@dataclass(frozen=True, kw_only=True)
class ScramCredentialUpsertion:
    """A credential as Kafka's AlterUserScramCredentials carries it: the client salts and hashes
    the password (PBKDF2 with ``iterations``), so the password itself never travels."""

    name: str
    mechanism: ScramMechanismName
    iterations: Int32
    salt: bytes
    salted_password: bytes


@dataclass(frozen=True, kw_only=True)
class AlterUserScramCredentialsRequest(Request):
    api: ClassVar[str] = "alter_user_scram_credentials"
    deletions: tuple[ScramCredentialDeletion, ...] = ()
    upsertions: tuple[ScramCredentialUpsertion, ...] = ()


@dataclass(frozen=True, kw_only=True)
class AlterUserScramCredentialsResult:
    user: str
    error_code: ErrorCodeValue = ErrorCode.NONE
    error_message: str | None = None


@dataclass(frozen=True, kw_only=True)
class AlterUserScramCredentialsResponse(Response):
    api: ClassVar[str] = "alter_user_scram_credentials"
    #: One per user named in the request.
    results: tuple[AlterUserScramCredentialsResult, ...] = ()


# -- client quotas (Kafka's DescribeClientQuotas, AlterClientQuotas) ----------------------------

QuotaEntityType = Annotated[str, OneOf("user", "client-id", "ip")]
#: Quota values: whole bytes (or connections) per second, at least 1.
QuotaValue = Annotated[int, IntRange(1, 2**63 - 1)]


@dataclass(frozen=True, kw_only=True)
class QuotaEntityPart:
    entity_type: QuotaEntityType
    #: nil: the default entity of the type (Kafka's <default>).
    entity_name: str | None = None


@dataclass(frozen=True, kw_only=True)
class QuotaFilterComponent:
    entity_type: QuotaEntityType
    #: exact: the entity named ``match``; default: the type's default entity; any: every entity
    #: of the type, the default included.
    match_type: Annotated[str, OneOf("exact", "default", "any")] = "exact"
    match: str | None = None


@dataclass(frozen=True, kw_only=True)
class DescribeClientQuotasRequest(Request):
    api: ClassVar[str] = "describe_client_quotas"
    components: tuple[QuotaFilterComponent, ...] = ()
    strict: bool = False


@dataclass(frozen=True, kw_only=True)
class QuotaEntry:
    entity: tuple[QuotaEntityPart, ...]
    values: dict[str, QuotaValue] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class DescribeClientQuotasResponse(Response):
    api: ClassVar[str] = "describe_client_quotas"
    entries: tuple[QuotaEntry, ...] = ()


@dataclass(frozen=True, kw_only=True)
class QuotaOp:
    key: str
    #: The new value (ignored when ``remove``).
    value: Int64 = 0
    remove: bool = False


@dataclass(frozen=True, kw_only=True)
class QuotaAlteration:
    entity: tuple[QuotaEntityPart, ...]
    ops: tuple[QuotaOp, ...]


@dataclass(frozen=True, kw_only=True)
class AlterClientQuotasRequest(Request):
    api: ClassVar[str] = "alter_client_quotas"
    entries: tuple[QuotaAlteration, ...]
    validate_only: bool = False


@dataclass(frozen=True, kw_only=True)
class QuotaAlterationResult:
    error_code: ErrorCodeValue = ErrorCode.NONE
    error_message: str | None = None
    entity: tuple[QuotaEntityPart, ...] = ()


@dataclass(frozen=True, kw_only=True)
class AlterClientQuotasResponse(Response):
    api: ClassVar[str] = "alter_client_quotas"
    #: One per entry of the request, in its order.
    entries: tuple[QuotaAlterationResult, ...] = ()


# --- transactions: Kafka's APIs of the same names (KIP-98, KIP-664) --------------------------


@dataclass(frozen=True, kw_only=True)
class TxnTopic:
    """A topic's partitions named by a transactional request."""

    name: str
    partitions: Annotated[tuple[Int32, ...], Unique()]


@dataclass(frozen=True, kw_only=True)
class AddPartitionsToTxnRequest(Request):
    api: ClassVar[str] = "add_partitions_to_txn"
    transactional_id: str
    producer_id: Int64
    producer_epoch: Int16
    topics: Annotated[tuple[TxnTopic, ...], Unique("name")]
    #: A partition leader's question (KIP-890 part 1; needs CLUSTER_ACTION): are these
    #: partitions in the producer's ongoing transaction? Nothing is added.
    verify_only: bool = False


@dataclass(frozen=True, kw_only=True)
class TxnPartitionResult:
    partition: Int32
    error_code: ErrorCodeValue = ErrorCode.NONE
    error_message: str | None = None


@dataclass(frozen=True, kw_only=True)
class TxnTopicResult:
    name: str
    partitions: tuple[TxnPartitionResult, ...]


@dataclass(frozen=True, kw_only=True)
class AddPartitionsToTxnResponse(Response):
    api: ClassVar[str] = "add_partitions_to_txn"
    topics: tuple[TxnTopicResult, ...] = ()


@dataclass(frozen=True, kw_only=True)
class AddOffsetsToTxnRequest(Request):
    api: ClassVar[str] = "add_offsets_to_txn"
    transactional_id: str
    producer_id: Int64
    producer_epoch: Int16
    #: The consumer group whose offsets the transaction will commit (txn_offset_commit).
    group_id: str


@dataclass(frozen=True, kw_only=True)
class AddOffsetsToTxnResponse(Response):
    api: ClassVar[str] = "add_offsets_to_txn"


@dataclass(frozen=True, kw_only=True)
class EndTxnRequest(Request):
    api: ClassVar[str] = "end_txn"
    transactional_id: str
    producer_id: Int64
    producer_epoch: Int16
    #: True commits the transaction, False aborts it.
    committed: bool


@dataclass(frozen=True, kw_only=True)
class EndTxnResponse(Response):
    api: ClassVar[str] = "end_txn"
    #: The producer id and epoch the next transaction uses (the epoch is bumped at every end).
    producer_id: Int64 = -1
    producer_epoch: Int16 = -1


@dataclass(frozen=True, kw_only=True)
class TxnOffsetCommitRequest(Request):
    api: ClassVar[str] = "txn_offset_commit"
    transactional_id: str
    group_id: str
    producer_id: Int64
    producer_epoch: Int16
    #: The consumer's group generation and member (Kafka's KIP-447 fencing); -1 and "" skip it.
    generation_id: Int32 = -1
    member_id: str = ""
    group_instance_id: str | None = None
    topics: Annotated[tuple[OffsetCommitTopic, ...], Unique("name")]


@dataclass(frozen=True, kw_only=True)
class TxnOffsetCommitResponse(Response):
    api: ClassVar[str] = "txn_offset_commit"
    topics: tuple[OffsetCommitTopicResult, ...] = ()


@dataclass(frozen=True, kw_only=True)
class TxnMarker:
    """A COMMIT or ABORT marker the transaction coordinator asks a partition leader to write."""

    producer_id: Int64
    producer_epoch: Int16
    committed: bool
    topics: Annotated[tuple[TxnTopic, ...], Unique("name")]
    coordinator_epoch: Int32
    #: The transaction's version (Kafka's KIP-890): 2 means the epoch was bumped at its end, so
    #: the marker must carry an epoch above the transaction's; 0 and 1 the classic rule.
    transaction_version: Annotated[int, IntRange(0, 2)] = 0


@dataclass(frozen=True, kw_only=True)
class WriteTxnMarkersRequest(Request):
    api: ClassVar[str] = "write_txn_markers"
    markers: tuple[TxnMarker, ...]


@dataclass(frozen=True, kw_only=True)
class TxnMarkerResult:
    producer_id: Int64
    topics: tuple[TxnTopicResult, ...]


@dataclass(frozen=True, kw_only=True)
class WriteTxnMarkersResponse(Response):
    api: ClassVar[str] = "write_txn_markers"
    #: One per marker of the request, in its order.
    markers: tuple[TxnMarkerResult, ...] = ()


@dataclass(frozen=True, kw_only=True)
class DescribeTransactionsRequest(Request):
    api: ClassVar[str] = "describe_transactions"
    transactional_ids: Annotated[tuple[str, ...], Unique()]


@dataclass(frozen=True, kw_only=True)
class TransactionDescription:
    transactional_id: str
    error_code: ErrorCodeValue = ErrorCode.NONE
    error_message: str | None = None
    #: Kafka's state name: Empty, Ongoing, PrepareCommit, PrepareAbort, CompleteCommit,
    #: CompleteAbort, Dead, PrepareEpochFence.
    state: str = ""
    transaction_timeout_ms: Int32 = 0
    #: When the ongoing transaction began (ms since the epoch), -1 with none.
    transaction_start_time_ms: Int64 = -1
    producer_id: Int64 = -1
    producer_epoch: Int16 = -1
    topics: tuple[TxnTopic, ...] = ()


@dataclass(frozen=True, kw_only=True)
class DescribeTransactionsResponse(Response):
    api: ClassVar[str] = "describe_transactions"
    #: One per transactional id of the request, in its order.
    transactions: tuple[TransactionDescription, ...] = ()


@dataclass(frozen=True, kw_only=True)
class ListTransactionsRequest(Request):
    api: ClassVar[str] = "list_transactions"
    #: Only transactions in these states (Kafka's names); empty = any.
    state_filters: Annotated[tuple[str, ...], Unique()] = ()
    #: Only transactions of these producer ids; empty = any.
    producer_id_filters: Annotated[tuple[Int64, ...], Unique()] = ()
    #: Only transactions running longer than this (ms); -1 = any (Kafka's KIP-994).
    duration_filter_ms: Int64 = -1


@dataclass(frozen=True, kw_only=True)
class TransactionListing:
    transactional_id: str
    producer_id: Int64
    state: str


@dataclass(frozen=True, kw_only=True)
class ListTransactionsResponse(Response):
    api: ClassVar[str] = "list_transactions"
    #: The state filters that name no state.
    unknown_state_filters: tuple[str, ...] = ()
    transactions: tuple[TransactionListing, ...] = ()


@dataclass(frozen=True, kw_only=True)
class DescribeProducersRequest(Request):
    api: ClassVar[str] = "describe_producers"
    topics: Annotated[tuple[TxnTopic, ...], Unique("name")]


@dataclass(frozen=True, kw_only=True)
class ProducerState:
    """A producer a partition's leader knows (Kafka's DescribeProducers entry)."""

    producer_id: Int64
    producer_epoch: Int32
    last_sequence: Int32 = -1
    last_timestamp: Int64 = -1
    coordinator_epoch: Int32 = -1
    #: The first offset of its ongoing transaction in this partition, -1 with none.
    current_txn_start_offset: Int64 = -1


@dataclass(frozen=True, kw_only=True)
class ProducersPartitionResult:
    partition: Int32
    error_code: ErrorCodeValue = ErrorCode.NONE
    error_message: str | None = None
    active_producers: tuple[ProducerState, ...] = ()


@dataclass(frozen=True, kw_only=True)
class ProducersTopicResult:
    name: str
    partitions: tuple[ProducersPartitionResult, ...]


@dataclass(frozen=True, kw_only=True)
class DescribeProducersResponse(Response):
    api: ClassVar[str] = "describe_producers"
    topics: tuple[ProducersTopicResult, ...] = ()


REQUEST_TYPES: dict[str, type[Request]] = {
    cls.api: cls
    for cls in (
        ApiVersionsRequest,
        MetadataRequest,
        CreateTopicsRequest,
        DeleteTopicsRequest,
        DescribeConfigsRequest,
        AlterConfigsRequest,
        CreatePartitionsRequest,
        ProduceRequest,
        FetchRequest,
        ListOffsetsRequest,
        DeleteRecordsRequest,
        DescribeLogDirsRequest,
        InitProducerIdRequest,
        FindCoordinatorRequest,
        JoinGroupRequest,
        SyncGroupRequest,
        HeartbeatRequest,
        LeaveGroupRequest,
        OffsetCommitRequest,
        OffsetFetchRequest,
        ListGroupsRequest,
        DescribeGroupsRequest,
        DeleteGroupsRequest,
        SaslHandshakeRequest,
        SaslAuthenticateRequest,
        CreateAclsRequest,
        DescribeAclsRequest,
        DeleteAclsRequest,
        DescribeUserScramCredentialsRequest,
        AlterUserScramCredentialsRequest,
        DescribeClientQuotasRequest,
        AlterClientQuotasRequest,
        AddPartitionsToTxnRequest,
        AddOffsetsToTxnRequest,
        EndTxnRequest,
        TxnOffsetCommitRequest,
        WriteTxnMarkersRequest,
        DescribeTransactionsRequest,
        ListTransactionsRequest,
        DescribeProducersRequest,
    )
}
RESPONSE_TYPES: dict[str, type[Response]] = {
    cls.api: cls
    for cls in (
        ApiVersionsResponse,
        MetadataResponse,
        CreateTopicsResponse,
        DeleteTopicsResponse,
        DescribeConfigsResponse,
        AlterConfigsResponse,
        CreatePartitionsResponse,
        ProduceResponse,
        FetchResponse,
        ListOffsetsResponse,
        DeleteRecordsResponse,
        DescribeLogDirsResponse,
        InitProducerIdResponse,
        FindCoordinatorResponse,
        JoinGroupResponse,
        SyncGroupResponse,
        HeartbeatResponse,
        LeaveGroupResponse,
        OffsetCommitResponse,
        OffsetFetchResponse,
        ListGroupsResponse,
        DescribeGroupsResponse,
        DeleteGroupsResponse,
        SaslHandshakeResponse,
        SaslAuthenticateResponse,
        CreateAclsResponse,
        DescribeAclsResponse,
        DeleteAclsResponse,
        DescribeUserScramCredentialsResponse,
        AlterUserScramCredentialsResponse,
        DescribeClientQuotasResponse,
        AlterClientQuotasResponse,
        AddPartitionsToTxnResponse,
        AddOffsetsToTxnResponse,
        EndTxnResponse,
        TxnOffsetCommitResponse,
        WriteTxnMarkersResponse,
        DescribeTransactionsResponse,
        ListTransactionsResponse,
        DescribeProducersResponse,
    )
}
assert REQUEST_TYPES.keys() == RESPONSE_TYPES.keys() == SUPPORTED_APIS.keys()


# --- the schema compiler ---------------------------------------------------------------------

_Check = Callable[[Any, str], Any]
_SCALARS: dict[type, str] = {int: "an int", bool: "a bool", str: "a str", bytes: "a bin"}


def _mistyped(path: str, expected: str, value: object) -> _FieldError:
    return _FieldError(f"field '{path}' must be {expected}, got {_wire_name(value)}")


@functools.cache
def _checker(tp: Any, strict: bool = False) -> _Check:
    """Compile an annotation into ``check(value, path) -> python value``, raising _FieldError.

    ``strict`` makes every field of every map required, defaults or not: the client's reading of
    responses, where a missing ``error_code`` must not pass for success.
    """
    origin, args = get_origin(tp), get_args(tp)
    if origin is Annotated:
        inner, constraints = _checker(args[0], strict), args[1:]

        def check_annotated(value: Any, path: str) -> Any:
            value = inner(value, path)
            for constraint in constraints:
                constraint(value, path)
            return value

        return check_annotated
    if origin in (Union, types.UnionType):
        options = tuple(a for a in args if a is not type(None))
        if len(options) == 1:  # X | None
            inner_optional = _checker(options[0], strict)
            return lambda value, path: None if value is None else inner_optional(value, path)
        expected = " or ".join(_SCALARS[o] for o in options if o in _SCALARS)

        def check_union(value: Any, path: str) -> Any:
            if isinstance(value, options):
                return value
            raise _mistyped(path, expected, value)

        return check_union
    if origin is tuple:
        item = _checker(args[0], strict)

        def check_array(value: Any, path: str) -> tuple[Any, ...]:
            if not isinstance(value, (list, tuple)):
                raise _mistyped(path, "an array", value)
            return tuple(item(v, f"{path}[{i}]") for i, v in enumerate(value))

        return check_array
    if origin is dict:
        item = _checker(args[1], strict)

        def check_map(value: Any, path: str) -> dict[str, Any]:
            if not isinstance(value, dict):
                raise _mistyped(path, "a map", value)
            for key in value:
                if not isinstance(key, str):
                    raise _FieldError(f"field '{path}' must have str keys, got {_wire_name(key)}")
            return {k: item(v, f"{path}[{_brief(k)}]") for k, v in value.items()}

        return check_map
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):  # a message class (an annotation is no instance)
        return functools.partial(_decode_map, tp, strict=strict)
    if tp in _SCALARS:
        expected_scalar = _SCALARS[tp]

        def check_scalar(value: Any, path: str) -> Any:
            if isinstance(value, tp) and (tp is bool or not isinstance(value, bool)):
                return value
            raise _mistyped(path, expected_scalar, value)

        return check_scalar
    raise TypeError(f"no wire type for annotation {tp!r}")


def _fast_accept(tp: Any) -> tuple[type | None, int | None, int | None, tuple | None]:
    """(exact type, lo, hi, allowed values) such that a non-nil value of exactly that type, within
    [lo, hi] and among the allowed values (where given), is what ``_checker(tp)`` would return
    unchanged: the decoder takes it without the call. (None, ...) where no such shortcut exists."""
    none = (None, None, None, None)
    if get_origin(tp) in (Union, types.UnionType):
        options = [a for a in get_args(tp) if a is not type(None)]
        if len(options) != 1:
            return none
        tp = options[0]
    constraints: tuple = ()
    if get_origin(tp) is Annotated:
        tp, constraints = get_args(tp)[0], get_args(tp)[1:]
    if tp not in _SCALARS or len(constraints) > 1:
        return none
    if not constraints:
        return tp, None, None, None
    (constraint,) = constraints
    if type(constraint) is IntRange and tp is int:
        return tp, constraint.lo, constraint.hi, None
    if type(constraint) is OneOf:
        return tp, None, None, constraint.values
    return none


@functools.cache
def _schema(cls: type, strict: bool) -> tuple[tuple[str, _Check, bool, bool, Any, Any, Any, Any], ...]:
    """(name, check, has_default, nullable, *_fast_accept) for each field of a message dataclass."""
    hints = get_type_hints(cls, include_extras=True)
    schema = []
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        has_default = not strict and (
            f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
        )
        nullable = get_origin(tp) in (Union, types.UnionType) and type(None) in get_args(tp)
        schema.append((f.name, _checker(tp, strict), has_default, nullable, *_fast_accept(tp)))
    return tuple(schema)


def _decode_map(cls: type, value: Any, path: str, strict: bool = False) -> Any:
    """Build ``cls`` from a decoded msgpack map, checking every known field and ignoring the rest."""
    if not isinstance(value, dict):
        raise _mistyped(path, "a map", value)
    kwargs = {}
    for name, check, has_default, nullable, exact, lo, hi, allowed in _schema(cls, strict):
        raw = value.get(name)
        if raw is None:  # nil means absent
            if has_default:
                continue
            field_path = f"{path}.{name}" if path else name
            if name not in value:
                raise _FieldError(f"field '{field_path}' is missing")
            if not nullable:
                raise _FieldError(f"field '{field_path}' is required, got nil")
        elif type(raw) is exact and (lo is None or lo <= raw <= hi) and (allowed is None or raw in allowed):
            kwargs[name] = raw  # what the check would return (see _fast_accept)
            continue
        kwargs[name] = check(raw, f"{path}.{name}" if path else name)
    return cls(**kwargs)


@functools.cache
def _field_names(cls: type) -> tuple[str, ...] | None:
    """A message dataclass's field names (None for anything else), looked up once per class."""
    if cls is ExternalBin or not dataclasses.is_dataclass(cls):
        return None
    return tuple(f.name for f in dataclasses.fields(cls))


_PLAIN = (bytes, str, int, float, bool, type(None))
#: Exactly these types go to the wire as they are (subclasses, enums among them, take the long way).
_EXACT_PLAIN = frozenset(_PLAIN)


class _MissingErrorMessage(Exception):
    """Raised by _response_to_wire; _validated_wire walks again to name the field."""


def _to_wire(value: Any) -> Any:
    """Message dataclasses to plain maps and arrays, leaving bytes and ExternalBin as they are."""
    # `type`, not the inferred type[Any], which mypy refuses to a functools.cache (python/mypy#11470)
    cls: type = type(value)
    if cls in _EXACT_PLAIN:
        return value
    if isinstance(value, _PLAIN) and not isinstance(value, enum.Enum):
        return value
    names = _field_names(cls)
    if names is not None:
        out = {}
        for name in names:
            item = getattr(value, name)
            out[name] = item if type(item) in _EXACT_PLAIN else _to_wire(item)
        return out
    if isinstance(value, ExternalBin):
        return value
    if isinstance(value, (list, tuple)):
        return [_to_wire(v) for v in value]
    if isinstance(value, dict):
        return {k: _to_wire(v) for k, v in value.items()}
    if isinstance(value, enum.Enum):
        return value.value
    return value


def _response_to_wire(value: Any) -> Any:
    """_to_wire for responses, refusing (_MissingErrorMessage) an error code without a message on
    the way: one walk where encoding and the check took two (the broker's request path)."""
    cls: type = type(value)  # (annotated: see _to_wire)
    if cls in _EXACT_PLAIN:
        return value
    if cls is tuple or cls is list:
        return [item if type(item) in _EXACT_PLAIN else _response_to_wire(item) for item in value]
    names = _field_names(cls)
    if names is None:
        return _to_wire(value)
    if getattr(value, "error_code", 0) != 0 and not getattr(value, "error_message", None):
        raise _MissingErrorMessage
    out = {}
    for name in names:
        item = getattr(value, name)
        out[name] = item if type(item) in _EXACT_PLAIN else _response_to_wire(item)
    return out


def _require_error_messages(value: Any, path: str) -> None:
    cls: type = type(value)  # (annotated: see _to_wire)
    if isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            _require_error_messages(item, f"{path}[{index}]")
    elif (names := _field_names(cls)) is not None:
        code = getattr(value, "error_code", ErrorCode.NONE)
        if code != ErrorCode.NONE and not getattr(value, "error_message", None):
            where = f"{path}.error_message" if path else "error_message"
            raise LocalProtocolError(f"field '{where}' must say what went wrong when error_code is {code}")
        for name in names:
            child = getattr(value, name)
            child_cls: type = type(child)
            if isinstance(child, (list, tuple)) or _field_names(child_cls) is not None:
                _require_error_messages(child, f"{path}.{name}" if path else name)


def _validated_wire(message: Request | Response, check_schema: bool = True) -> dict[str, Any]:
    """The wire map of one of our messages, refusing (LocalProtocolError) what a peer would refuse.

    ``check_schema=False`` skips re-reading the map against the schema (the costly part) but
    still refuses an error code without a message: for the broker's produce and fetch answers,
    built from typed values on the hot path and schema-checked by the conformance tests.
    """
    if isinstance(message, Response):
        try:
            wire = _response_to_wire(message)
        except _MissingErrorMessage:
            _require_error_messages(message, "")  # raises, naming the field
            raise AssertionError("unreachable") from None
    else:
        wire = _to_wire(message)
    if check_schema:
        try:
            _decode_map(type(message), wire, "")
        except _FieldError as exc:
            raise LocalProtocolError(f"{type(message).__name__}: {exc}") from None
    if isinstance(message, Request):
        return {"api": message.api, **wire}
    return wire


# --- entry points ----------------------------------------------------------------------------

# What msgpack.unpackb raises on hostile bytes: ExtraData, FormatError, StackError, truncated input
# and invalid UTF-8 are ValueErrors; unhashable map keys (a map used as a key) are TypeErrors.
_UNPACK_ERRORS = (ValueError, TypeError, msgpack.UnpackException)


def _unpack_error_text(exc: Exception) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


@dataclass(frozen=True, kw_only=True)
class _RequestId:
    """Read first and alone, so every later error can echo it."""

    id: CorrelationId


def decode_request(payload: bytes, limits: RequestLimits = DEFAULT_REQUEST_LIMITS) -> Request:
    """A frame's payload as a validated request, or RequestError naming the first problem found.

    Before msgpack builds anything, :func:`triolog.protocol.request_limits.scan_request` checks that
    the payload holds no more objects than a request of its API may (``limits``), and the
    unpacker runs with caps sized from the payload and that budget: what a frame decodes to is
    bounded by its length plus the budget, however the bytes are arranged.
    """
    if not payload:
        raise RequestError(ErrorCode.INVALID_REQUEST, "request must be a map, got an empty frame")
    api: str | None = None  # the API the budget scan read, for the unpacker's caps; then the doc's
    if count_objects(payload, ENVELOPE_OBJECTS) > ENVELOPE_OBJECTS:  # within every API's budget
        try:
            api = scan_request(payload, limits).api
        except RequestBudgetError as exc:
            raise RequestError(exc.code, exc.message, exc.request_id, exc.api) from None
    try:
        # use_list=False: arrays as tuples, so even an array used as a map key cannot fail here.
        doc = msgpack.unpackb(
            payload, raw=False, use_list=False, strict_map_key=False, **limits.unpack_options(len(payload), api)
        )
    except _UNPACK_ERRORS as exc:
        message = f"request is not a valid msgpack document ({_unpack_error_text(exc)})"
        raise RequestError(ErrorCode.INVALID_REQUEST, message) from None
    if not isinstance(doc, dict):
        raise RequestError(ErrorCode.INVALID_REQUEST, f"request must be a map, got {_wire_name(doc)}")
    request_id: int | None = None
    api = None
    try:
        request_id = _decode_map(_RequestId, doc, "").id
        name = doc.get("api")
        if name is None:
            raise _FieldError("field 'api' is missing")
        if not isinstance(name, str):
            raise _mistyped("api", "a str", name)
        if name not in REQUEST_TYPES:
            known = ", ".join(SUPPORTED_APIS)
            raise _FieldError(f"field 'api' names no known API: {_brief(name)} (known: {known})")
        api = name
        version = doc.get("v")
        if version is None:
            raise _FieldError("field 'v' is missing")
        if not isinstance(version, int) or isinstance(version, bool):
            raise _mistyped("v", "an int", version)
        low, high = SUPPORTED_APIS[api]
        if not low <= version <= high:
            message = f"api {api!r} does not support v {version}: supported versions are {low} to {high}"
            raise RequestError(ErrorCode.UNSUPPORTED_VERSION, message, request_id, api)
        return _decode_map(REQUEST_TYPES[api], doc, "")
    except _FieldError as exc:
        raise RequestError(ErrorCode.INVALID_REQUEST, str(exc), request_id, api) from None


def encode_request(request: Request) -> bytes:
    """The msgpack payload of ``request``; LocalProtocolError if a broker would refuse its shape."""
    return msgpack.packb(_validated_wire(request), use_bin_type=True)


def encode_response(response: Response | dict[str, Any], *, check_schema: bool = True) -> bytes:
    """The msgpack payload of a response object, or of a map from :func:`error_response`."""
    wire = _validated_wire(response, check_schema) if isinstance(response, Response) else response
    try:
        return msgpack.packb(wire, use_bin_type=True)
    except TypeError as exc:  # an ExternalBin, or anything else msgpack cannot hold
        raise LocalProtocolError(f"response cannot be packed whole ({exc}); use pack_parts") from None


def error_response(request_id: int | None, code: ErrorCode, message: str, api: str | None = None) -> dict[str, Any]:
    """The map answering a request refused as a whole; the connection stays usable.

    ``id``, ``error_code`` and ``error_message``, plus, for a known ``api``, that API's fields left
    empty, so clients that read them unconditionally still work. api_versions still lists the
    supported versions, as Kafka does, so a client that sent an unsupported version can pick another.
    """
    cls = RESPONSE_TYPES.get(api or "", Response)
    return _validated_wire(cls(id=request_id, error_code=code, error_message=message))


def decode_response(payload: bytes, expected_api: str) -> dict[str, Any]:
    """A response payload as a plain dict, after checking it against the ``expected_api`` schema.

    The envelope (``id``, ``error_code``, ``error_message``) is always checked; the API's fields
    only when ``error_code`` is 0, since a request-level error may leave them out. Every field the
    spec lists must be present (nil where it allows nil): the defaults of the response classes
    are for building responses, not for guessing what a peer left out.
    """
    cls = RESPONSE_TYPES.get(expected_api)
    if cls is None:
        raise LocalProtocolError(f"no such api {expected_api!r}")
    try:
        doc = msgpack.unpackb(payload, raw=False, strict_map_key=False)
    except _UNPACK_ERRORS as exc:
        message = f"response is not a valid msgpack document ({_unpack_error_text(exc)})"
        raise RemoteProtocolError(message) from None
    if not isinstance(doc, dict):
        raise RemoteProtocolError(f"response must be a map, got {_wire_name(doc)}")
    try:
        if _decode_map(Response, doc, "", strict=True).error_code == ErrorCode.NONE:
            _decode_map(cls, doc, "", strict=True)
    except _FieldError as exc:
        raise RemoteProtocolError(f"{expected_api} response: {exc}") from None
    return doc


# --- zero-copy fetch -------------------------------------------------------------------------


def _bin_header(length: int) -> bytes:
    """The header msgpack itself would write for a bin of ``length`` bytes."""
    if length < 2**8:
        return b"\xc4" + length.to_bytes(1, "big")
    if length < 2**16:
        return b"\xc5" + length.to_bytes(2, "big")
    return b"\xc6" + length.to_bytes(4, "big")


def pack_parts(obj: Any, *, check_schema: bool = True) -> list[bytes | ExternalBin]:
    """msgpack-encode ``obj``, leaving each ExternalBin's bytes for the caller to send.

    Each ExternalBin becomes its bin header (at the end of the preceding bytes part) followed by
    the ExternalBin itself, standing for its ``length`` bytes. Bytes parts are merged, so parts
    alternate bytes, ExternalBin, bytes... Sending ``frame_prefix(parts_length(parts))`` then the
    parts in order, with each ExternalBin replaced by its bytes, is byte for byte what
    ``encode_frame(msgpack.packb(obj_with_real_bytes, use_bin_type=True))`` would send.
    ``obj`` is a Request or Response (validated as for encoding) or plain msgpack values.
    """
    if isinstance(obj, (Request, Response)):
        obj = _validated_wire(obj, check_schema)
    # One packb with each ExternalBin packed as a stand-in (a bin holding this process's random
    # token, which no bytes a peer sends can forge: an ExternalBin's own bytes are never packed
    # here), then cut where the stand-ins are: a C pass instead of a Python call per value.
    externals: list[ExternalBin] = []

    def stand_in(value: Any) -> bytes:
        if isinstance(value, ExternalBin):
            externals.append(value)
            return _EXTERNAL_TOKEN
        raise TypeError(type(value).__name__)

    try:
        packed = msgpack.packb(obj, use_bin_type=True, default=stand_in)
    except (TypeError, ValueError, OverflowError):
        return _pack_parts_per_value(obj)  # the same refusal, worded as always
    parts: list[bytes | ExternalBin] = []
    start = 0
    for external in externals:
        at = packed.find(_EXTERNAL_MARK, start)
        if at < 0:  # cannot happen (each stand-in is packed once, in this order): be exact anyway
            return _pack_parts_per_value(obj)
        parts.append(packed[start:at] + _bin_header(external.length))
        parts.append(external)
        start = at + len(_EXTERNAL_MARK)
    if start < len(packed):
        parts.append(packed[start:])
    return parts


#: See pack_parts: a random 16-byte token per process, and how msgpack packs it (bin 8).
_EXTERNAL_TOKEN = os.urandom(16)
_EXTERNAL_MARK = b"\xc4\x10" + _EXTERNAL_TOKEN


def _pack_parts_per_value(obj: Any) -> list[bytes | ExternalBin]:
    """pack_parts one value at a time (what it did before the stand-ins; its errors' wording)."""
    packer = msgpack.Packer(use_bin_type=True)
    pack, map_header, array_header = packer.pack, packer.pack_map_header, packer.pack_array_header
    parts: list[bytes | ExternalBin] = []
    pending = bytearray()
    extend = pending.extend
    plain = _EXACT_PLAIN

    def emit(value: Any) -> None:
        # Scalars of the exact wire types are packed inline, not through a call per value.
        if isinstance(value, ExternalBin):
            extend(_bin_header(value.length))
            parts.append(bytes(pending))
            pending.clear()
            parts.append(value)
        elif isinstance(value, dict):
            extend(map_header(len(value)))
            for key, item in value.items():
                if type(key) in plain:
                    extend(pack(key))
                else:
                    emit(key)
                if type(item) in plain:
                    extend(pack(item))
                else:
                    emit(item)
        elif isinstance(value, (list, tuple)):
            extend(array_header(len(value)))
            for item in value:
                if type(item) in plain:
                    extend(pack(item))
                else:
                    emit(item)
        else:
            try:
                extend(pack(value))
            except TypeError as exc:
                raise LocalProtocolError(f"cannot pack {type(value).__name__}: {exc}") from None

    emit(obj)
    if pending:
        parts.append(bytes(pending))
    return parts


def parts_length(parts: list[bytes | ExternalBin]) -> int:
    """The frame length of ``parts``: for :func:`triolog.protocol.frames.frame_prefix`."""
    return sum(part.length if isinstance(part, ExternalBin) else len(part) for part in parts)
