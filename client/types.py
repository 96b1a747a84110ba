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
