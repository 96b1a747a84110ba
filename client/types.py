"""The values the client hands back: plain named tuples, the same for the sync and trio APIs."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import NamedTuple

__all__ = [
    "ClientQuotaAlteration",
    "ClientQuotaAlterationOp",
    "ClientQuotaEntity",
    "ClientQuotaFilter",
    "ClientQuotaFilterComponent",
    "ConfigEntry",
    "ConsumerRecord",
    "LogDirDescription",
    "LogDirPartitionInfo",
    "NewTopic",
    "OffsetAndTimestamp",
    "PartitionInfo",
    "RecordColumns",
    "RecordMetadata",
    "TopicDescription",
    "TopicPartition",
]

#: list_offsets / offsets_for_times special timestamps (Kafka's ListOffsetsRequest values).
LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3


class TopicPartition(NamedTuple):
    topic: str
    partition: int


class RecordMetadata(NamedTuple):
    """Where a produced record landed. ``offset`` is -1 for acks=0 (the broker does not say).

    ``timestamp`` is the broker's append time on LogAppendTime topics, else the record's own.
    """

    topic: str
    partition: int
    offset: int
    timestamp: int


class ConsumerRecord(NamedTuple):
    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()
    #: "CreateTime" or "LogAppendTime", as Kafka's console consumer prints it.
    timestamp_type: str = "CreateTime"


class RecordColumns:
    """One partition's records from :meth:`triolog.client.Consumer.poll_columns`, as parallel lists.

    ``offsets``, ``timestamps``, ``keys``, ``values`` (bytes or None), ``headers`` (tuples of
    (str, bytes or None) pairs) and ``types`` (0 CreateTime, 1 LogAppendTime), all of ``len(self)``
    items in offset order, decoded straight from the fetched bytes (no object a record).
    ``to_arrow()`` gives a pyarrow Table.
    """

    __slots__ = ("headers", "keys", "offsets", "timestamps", "types", "values")

    def __init__(self) -> None:
        self.offsets: list[int] = []
        self.timestamps: list[int] = []
        self.types: list[int] = []
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.headers: list[tuple[tuple[str, bytes | None], ...]] = []

    def __len__(self) -> int:
        return len(self.offsets)

    def __repr__(self) -> str:
        span = f"offsets {self.offsets[0]}..{self.offsets[-1]}" if self.offsets else "empty"
        return f"RecordColumns({len(self)} records, {span})"

    def extend(self, other: RecordColumns) -> None:
        for name in self.__slots__:
            getattr(self, name).extend(getattr(other, name))

    def append_record(self, record: ConsumerRecord) -> None:
        self.offsets.append(record.offset)
        self.timestamps.append(record.timestamp)
        self.types.append(1 if record.timestamp_type == "LogAppendTime" else 0)
        self.keys.append(record.key)
        self.values.append(record.value)
        self.headers.append(record.headers)

    def split(self, count: int) -> tuple[RecordColumns, RecordColumns]:
        """The first ``count`` records and the rest."""
        head, tail = RecordColumns(), RecordColumns()
        for name in self.__slots__:
            column = getattr(self, name)
            setattr(head, name, column[:count])
            setattr(tail, name, column[count:])
        return head, tail

    def to_arrow(self):
        """A pyarrow Table (offset int64, timestamp int64, timestamp_type int8, key/value binary,
        headers list<struct<key string, value binary>>); needs pyarrow installed."""
        try:
            import pyarrow as pa
        except ImportError:
            raise ImportError("RecordColumns.to_arrow() needs pyarrow: pip install pyarrow") from None
        header_type = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
        return pa.table(
            {
                "offset": pa.array(self.offsets, pa.int64()),
                "timestamp": pa.array(self.timestamps, pa.int64()),
                "timestamp_type": pa.array(self.types, pa.int8()),
                "key": pa.array(self.keys, pa.binary()),
                "value": pa.array(self.values, pa.binary()),
                "headers": pa.array([[{"key": k, "value": v} for k, v in h] for h in self.headers], header_type),
            }
        )


class OffsetAndTimestamp(NamedTuple):
    offset: int
    timestamp: int


class NewTopic(NamedTuple):
    name: str
    #: -1 = the broker's num.partitions.
    num_partitions: int = -1
    replication_factor: int = -1
    configs: dict[str, str] = {}
    #: Instead of num_partitions and replication_factor (leave both -1): per partition, from 0,
    #: the broker ids of its replicas, preferred leader first (kafka-topics.sh --replica-assignment).
    replica_assignment: tuple[tuple[int, ...], ...] | None = None


class PartitionInfo(NamedTuple):
    partition: int
    leader: int
    log_start_offset: int
    high_watermark: int
    #: The brokers holding a replica (the preferred leader first), the in-sync ones, and those not
    #: live: the leader alone on a standalone broker.
    replicas: tuple[int, ...] = ()
    isr: tuple[int, ...] = ()
    offline_replicas: tuple[int, ...] = ()
    #: The leader's epoch in a cluster; -1 standalone.
    leader_epoch: int = -1


class TopicDescription(NamedTuple):
    name: str
    internal: bool
    partitions: tuple[PartitionInfo, ...]


class ConfigEntry(NamedTuple):
    value: str | None
    #: "topic" (an override), "broker" (the broker's setting) or "default".
    source: str


class LogDirPartitionInfo(NamedTuple):
    """One partition's files in a log dir, as kafka-log-dirs.sh reports them (plus offsets)."""

    size_bytes: int
    segments: int
    log_start_offset: int
    log_end_offset: int


class LogDirDescription(NamedTuple):
    """One entry of the broker's log.dirs. ``error`` is None, or why the directory is unusable
    (offline after an I/O error). ``total_bytes``/``usable_bytes`` are -1 when unknown."""

    path: str
    error: str | None
    total_bytes: int
    usable_bytes: int
    partitions: dict[TopicPartition, LogDirPartitionInfo]


# -- client quotas (Kafka's org.apache.kafka.common.quota) --------------------------------------


class ClientQuotaEntity:
    """Kafka's ClientQuotaEntity: whom a quota applies to, as a mapping of entity type (``user``,
    ``client-id`` or ``ip``) to a name, or to None for that type's default entity (Kafka's
    ``<default>``). ``ClientQuotaEntity({"user": "alice", "client-id": None})``: alice's clients
    that have no quota of their own. Hashable: describe_client_quotas maps entities to quotas."""

    USER = "user"
    CLIENT_ID = "client-id"
    IP = "ip"
    TYPES = (USER, CLIENT_ID, IP)

    __slots__ = ("_parts",)

    def __init__(self, entries: Mapping[str, str | None]) -> None:
        parts = dict(entries)
        if not parts:
            raise ValueError("a quota entity names at least one entity type")
        for kind, name in parts.items():
            if kind not in self.TYPES:
                raise ValueError(f"unknown quota entity type {kind!r} (one of {', '.join(self.TYPES)})")
            if name is not None and not isinstance(name, str):
                raise ValueError(f"the {kind} of a quota entity is a string, or None for the default")
        self._parts = tuple(sorted(parts.items(), key=lambda part: part[0]))

    @property
    def entries(self) -> dict[str, str | None]:
        return dict(self._parts)

    def get(self, kind: str, missing=None):
        return self.entries.get(kind, missing)

    def __contains__(self, kind: object) -> bool:
        return any(k == kind for k, _ in self._parts)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ClientQuotaEntity) and self._parts == other._parts

    def __hash__(self) -> int:
        return hash(self._parts)

    def sort_key(self) -> tuple:
        """Users, then client ids, then IPs; the default before named entities."""
        entries = self.entries
        return tuple((kind in entries, entries.get(kind) is not None, entries.get(kind) or "") for kind in self.TYPES)

    def __repr__(self) -> str:
        return f"ClientQuotaEntity({self.entries!r})"


class ClientQuotaAlterationOp(NamedTuple):
    """Set ``key`` to ``value``, or remove it (``value`` None): Kafka's ClientQuotaAlteration.Op.
    Keys: ``producer_byte_rate``, ``consumer_byte_rate`` (bytes per second) and
    ``request_percentage`` (percent of one thread's time) of user and client-id entities,
    ``connection_creation_rate`` (per second) of IP entities."""

    key: str
    value: float | None = None


class ClientQuotaAlteration(NamedTuple):
    """The changes to one entity's quotas (Kafka's ClientQuotaAlteration)."""

    entity: ClientQuotaEntity
    ops: tuple[ClientQuotaAlterationOp, ...]


#: Kafka spells the op ``ClientQuotaAlteration.Op`` (a class attribute, not a field: set after the
#: class, since a NamedTuple's body may declare fields only).
ClientQuotaAlteration.Op = ClientQuotaAlterationOp  # type: ignore[attr-defined]


class ClientQuotaFilterComponent(NamedTuple):
    """One entity type a filter matches (Kafka's ClientQuotaFilterComponent): build it with
    :meth:`of_entity` (the entity named), :meth:`of_default_entity` (the type's default entity) or
    :meth:`of_entity_type` (any entity of the type, the default included)."""

    entity_type: str
    #: "exact", "default" or "any".
    match_type: str
    match: str | None = None

    @classmethod
    def of_entity(cls, entity_type: str, name: str) -> ClientQuotaFilterComponent:
        return cls(_entity_type(entity_type), "exact", name)

    @classmethod
    def of_default_entity(cls, entity_type: str) -> ClientQuotaFilterComponent:
        return cls(_entity_type(entity_type), "default")

    @classmethod
    def of_entity_type(cls, entity_type: str) -> ClientQuotaFilterComponent:
        return cls(_entity_type(entity_type), "any")

    def matches(self, entity: ClientQuotaEntity) -> bool:
        if self.entity_type not in entity:
            return False
        name = entity.get(self.entity_type)
        if self.match_type == "exact":
            return name == self.match
        return name is None if self.match_type == "default" else True


class ClientQuotaFilter(NamedTuple):
    """Which entities describe_client_quotas returns (Kafka's ClientQuotaFilter): those every
    component matches; ``strict`` (:meth:`contains_only`) also leaves out entities with parts of
    other types. :meth:`all`: every entity."""

    components: tuple[ClientQuotaFilterComponent, ...] = ()
    strict: bool = False

    @classmethod
    def contains(cls, components: Iterable[ClientQuotaFilterComponent]) -> ClientQuotaFilter:
        return cls(tuple(components), False)

    @classmethod
    def contains_only(cls, components: Iterable[ClientQuotaFilterComponent]) -> ClientQuotaFilter:
        return cls(tuple(components), True)

    @classmethod
    def all(cls) -> ClientQuotaFilter:
        return cls((), False)

    def matches(self, entity: ClientQuotaEntity) -> bool:
        """The broker's rule (docs/protocol.md, describe_client_quotas), for a stopped broker's file."""
        if not all(c.matches(entity) for c in self.components):
            return False
        return not self.strict or set(entity.entries) == {c.entity_type for c in self.components}


def _entity_type(kind: str) -> str:
    if kind not in ClientQuotaEntity.TYPES:
        raise ValueError(f"unknown quota entity type {kind!r} (one of {', '.join(ClientQuotaEntity.TYPES)})")
    return kind


def quota_value(key: str, value) -> int:
    """A quota value as the wire carries it: a whole number per second (Kafka's doubles rounded,
    as the broker's Kafka listener rounds them); ValueError for what is not a finite number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"the value of {key} must be a finite number, got {value!r}")
    return round(value)
