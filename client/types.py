"""The values the client hands back: plain named tuples, the same for the sync and trio APIs."""

from __future__ import annotations

from typing import NamedTuple

__all__ = [
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
        return pa.table({
            "offset": pa.array(self.offsets, pa.int64()),
            "timestamp": pa.array(self.timestamps, pa.int64()),
            "timestamp_type": pa.array(self.types, pa.int8()),
            "key": pa.array(self.keys, pa.binary()),
            "value": pa.array(self.values, pa.binary()),
            "headers": pa.array([[{"key": k, "value": v} for k, v in h] for h in self.headers], header_type),
        })


class OffsetAndTimestamp(NamedTuple):
    offset: int
    timestamp: int


class NewTopic(NamedTuple):
    name: str
    #: -1 = the broker's num.partitions.
    num_partitions: int = -1
    replication_factor: int = -1
    configs: dict[str, str] = {}


class PartitionInfo(NamedTuple):
    partition: int
    leader: int
    log_start_offset: int
    high_watermark: int


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
