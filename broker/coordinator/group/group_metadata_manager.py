"""The records of ``__consumer_offsets``, byte for byte as Kafka writes them, and which partition
holds a group (``GroupMetadataManager.scala``, ``GroupCoordinatorRecordHelpers.java``).

Keys and values start with an int16 version. Kafka writes OffsetCommitKey v1 / OffsetCommitValue
v3 and GroupMetadataKey v2 / GroupMetadataValue v3; it reads older values (and the flexible v4
OffsetCommitValue) too, and so do we. A null value is a tombstone: the key's entry is gone, and
the log cleaner removes both after delete.retention.ms.

Loading a partition replays its records in offset order (the last record per key wins) into
:class:`LoadedPartition`, from which the coordinator rebuilds its groups.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

from triolog.protocol.records import ControlRecordType, iter_batches

from .group_metadata import OffsetAndMetadata

OFFSETS_TOPIC = "__consumer_offsets"

OFFSET_COMMIT_KEY_VERSION = 1
OFFSET_COMMIT_VALUE_VERSION = 3
GROUP_METADATA_KEY_VERSION = 2
GROUP_METADATA_VALUE_VERSION = 3

_INT_MIN = -(2**31)


def java_string_hash(s: str) -> int:
    """Java's String.hashCode (31-polynomial over UTF-16 code units, int32 overflow)."""
    h = 0
    data = s.encode("utf-16-be")
    for (unit,) in struct.iter_unpack(">H", data):
        h = (31 * h + unit) & 0xFFFFFFFF
    return h - (1 << 32) if h >= (1 << 31) else h


def java_abs(n: int) -> int:
    """Kafka's Utils.abs: Integer.MIN_VALUE maps to 0 (not to 2**31, which Math.abs overflows to)."""
    return 0 if n == _INT_MIN else abs(n)


def partition_for(group_id: str, num_partitions: int) -> int:
    return java_abs(java_string_hash(group_id)) % num_partitions


# -- primitive encodings (Kafka's non-flexible message format) --------------------------------


def _string(s: str) -> bytes:
    data = s.encode()
    if len(data) > 0x7FFF:
        raise ValueError(f"string of {len(data)} bytes does not fit an int16 length")
    return struct.pack(">h", len(data)) + data


def _nullable_string(s: str | None) -> bytes:
    return b"\xff\xff" if s is None else _string(s)


def _bytes(b: bytes) -> bytes:
    return struct.pack(">i", len(b)) + bytes(b)


class _Reader:
    __slots__ = ("data", "position")

    def __init__(self, data: bytes):
        self.data = memoryview(data)
        self.position = 0

    def _take(self, n: int) -> memoryview:
        if n < 0 or self.position + n > len(self.data):
            raise ValueError(f"record truncated: needs {n} bytes at {self.position} of {len(self.data)}")
        out = self.data[self.position : self.position + n]
        self.position += n
        return out

    def int16(self) -> int:
        return struct.unpack(">h", self._take(2))[0]

    def int32(self) -> int:
        return struct.unpack(">i", self._take(4))[0]

    def int64(self) -> int:
        return struct.unpack(">q", self._take(8))[0]

    def string(self) -> str:
        value = self.nullable_string()
        if value is None:
            raise ValueError("null where a string is required")
        return value

    def nullable_string(self) -> str | None:
        n = self.int16()
        return None if n == -1 else bytes(self._take(n)).decode()

    def bytes_(self) -> bytes:
        n = self.int32()
        return b"" if n == -1 else bytes(self._take(n))

    def uvarint(self) -> int:
        shift = value = 0
        while True:
            b = self._take(1)[0]
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7
            if shift > 35:
                raise ValueError("varint too long")

    def compact_string(self) -> str:
        n = self.uvarint() - 1
        if n < 0:
            raise ValueError("null where a string is required")
        return bytes(self._take(n)).decode()

    def skip_tagged_fields(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            self._take(self.uvarint())


# -- keys and values ---------------------------------------------------------------------------


def offset_commit_key(group: str, topic: str, partition: int) -> bytes:
    return struct.pack(">h", OFFSET_COMMIT_KEY_VERSION) + _string(group) + _string(topic) + struct.pack(">i", partition)


def offset_commit_value(offset: OffsetAndMetadata) -> bytes:
    """v3, or v1 when the commit carries an explicit expire timestamp (as Kafka chooses)."""
    if offset.expire_timestamp >= 0:
        return (
            struct.pack(">hq", 1, offset.offset)
            + _string(offset.metadata)
            + struct.pack(">qq", offset.commit_timestamp, offset.expire_timestamp)
        )
    return (
        struct.pack(">hqi", OFFSET_COMMIT_VALUE_VERSION, offset.offset, offset.leader_epoch)
        + _string(offset.metadata)
        + struct.pack(">q", offset.commit_timestamp)
    )


def group_metadata_key(group: str) -> bytes:
    return struct.pack(">h", GROUP_METADATA_KEY_VERSION) + _string(group)


@dataclass(frozen=True)
class StoredMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True)
class StoredGroup:
    """GroupMetadataValue: what a group's record says."""

    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int
    members: tuple[StoredMember, ...] = ()


def group_metadata_value(group: StoredGroup) -> bytes:
    parts = [
        struct.pack(">h", GROUP_METADATA_VALUE_VERSION),
        _string(group.protocol_type),
        struct.pack(">i", group.generation),
        _nullable_string(group.protocol),
        _nullable_string(group.leader),
        struct.pack(">qi", group.current_state_timestamp, len(group.members)),
    ]
    for member in group.members:
        parts += [
            _string(member.member_id),
            _nullable_string(member.group_instance_id),
            _string(member.client_id),
            _string(member.client_host),
            struct.pack(">ii", member.rebalance_timeout_ms, member.session_timeout_ms),
            _bytes(member.subscription),
            _bytes(member.assignment),
        ]
    return b"".join(parts)


@dataclass(frozen=True)
class OffsetKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True)
class GroupKey:
    group: str


def read_key(key: bytes) -> OffsetKey | GroupKey | None:
    """The key of a __consumer_offsets record; None for key types this coordinator does not use
    (KIP-848 records, version 3+)."""
    reader = _Reader(key)
    version = reader.int16()
    if version in (0, 1):
        return OffsetKey(reader.string(), reader.string(), reader.int32())
    if version == 2:
        return GroupKey(reader.string())
    return None


def read_offset_value(value: bytes) -> OffsetAndMetadata:
    reader = _Reader(value)
    version = reader.int16()
    if version in (0, 1, 2, 3):
        offset = reader.int64()
        leader_epoch = reader.int32() if version >= 3 else -1
        metadata = reader.string()
        commit_ts = reader.int64()
        expire_ts = reader.int64() if version == 1 else -1
        return OffsetAndMetadata(offset, leader_epoch, metadata, commit_ts, expire_ts)
    if version == 4:  # flexible: compact string, tagged fields
        offset = reader.int64()
        leader_epoch = reader.int32()
        metadata = reader.compact_string()
        commit_ts = reader.int64()
        reader.skip_tagged_fields()
        return OffsetAndMetadata(offset, leader_epoch, metadata, commit_ts)
    raise ValueError(f"unknown OffsetCommitValue version {version}")


def read_group_value(value: bytes) -> StoredGroup:
    reader = _Reader(value)
    version = reader.int16()
    if not 0 <= version <= 3:
        raise ValueError(f"unknown GroupMetadataValue version {version}")
    protocol_type = reader.string()
    generation = reader.int32()
    protocol = reader.nullable_string()
    leader = reader.nullable_string()
    state_ts = reader.int64() if version >= 2 else -1
    members = []
    for _ in range(reader.int32()):
        member_id = reader.string()
        instance_id = reader.nullable_string() if version >= 3 else None
        client_id = reader.string()
        client_host = reader.string()
        rebalance_timeout = reader.int32() if version >= 1 else -1
        session_timeout = reader.int32()
        if rebalance_timeout < 0:
            rebalance_timeout = session_timeout
        members.append(
            StoredMember(
                member_id,
                instance_id,
                client_id,
                client_host,
                rebalance_timeout,
                session_timeout,
                reader.bytes_(),
                reader.bytes_(),
            )
        )
    return StoredGroup(protocol_type, generation, protocol, leader, state_ts, tuple(members))


# -- loading -----------------------------------------------------------------------------------


class TxnMarker(NamedTuple):
    """A COMMIT or ABORT control record in __consumer_offsets: the end of a producer's
    transaction, deciding the offsets it committed there (TxnOffsetCommit)."""

    offset: int
    producer_id: int
    committed: bool


#: What a partition replays, in log order: (offset, key, value) of a record outside any
#: transaction, (offset, key, value, producer id) of one in a producer's transaction, or a marker.
LoadedRecord = tuple[int, bytes | None, bytes | None] | tuple[int, bytes | None, bytes | None, int] | TxnMarker


@dataclass
class LoadedPartition:
    """One __consumer_offsets partition replayed: the last record per key."""

    offsets: dict[str, dict[tuple[str, int], OffsetAndMetadata]] = field(default_factory=dict)
    groups: dict[str, StoredGroup] = field(default_factory=dict)
    #: Tombstoned groups (a later commit may bring a group back: Kafka keeps what comes last).
    removed_groups: set[str] = field(default_factory=set)
    #: Offsets of transactions without their marker yet: producer id -> group -> partition.
    pending_txn_offsets: dict[int, dict[str, dict[tuple[str, int], OffsetAndMetadata]]] = field(default_factory=dict)
    records: int = 0
    skipped: int = 0

    def replay(self, records: Iterable[LoadedRecord]) -> None:
        """Apply the records in log order."""
        for item in records:
            if isinstance(item, TxnMarker):
                self._end_transaction(item)
                continue
            offset, key, value, *rest = item
            producer_id = rest[0] if rest else -1
            self.records += 1
            if key is None:
                self.skipped += 1
                continue
            try:
                parsed = read_key(key)
                if isinstance(parsed, OffsetKey):
                    tp = (parsed.topic, parsed.partition)
                    if producer_id >= 0:
                        if value is None:  # Kafka's transactional commits always carry a value
                            self.skipped += 1
                            continue
                        pending = self.pending_txn_offsets.setdefault(producer_id, {})
                        pending.setdefault(parsed.group, {})[tp] = _placed(read_offset_value(value), offset)
                        continue
                    group_offsets = self.offsets.setdefault(parsed.group, {})
                    if value is None:
                        group_offsets.pop(tp, None)
                    else:
                        group_offsets[tp] = _placed(read_offset_value(value), offset)
                elif isinstance(parsed, GroupKey):
                    if value is None:
                        self.groups.pop(parsed.group, None)
                        self.removed_groups.add(parsed.group)
                    else:
                        self.groups[parsed.group] = read_group_value(value)
                        self.removed_groups.discard(parsed.group)
                else:
                    self.skipped += 1
            except (ValueError, UnicodeDecodeError, struct.error):
                self.skipped += 1

    def _end_transaction(self, marker: TxnMarker) -> None:
        """A commit makes the transaction's offsets the groups', each unless a later record
        already holds that partition's (Kafka compares the records' offsets); an abort drops them."""
        pending = self.pending_txn_offsets.pop(marker.producer_id, None)
        if not pending or not marker.committed:
            return
        for group, entries in pending.items():
            group_offsets = self.offsets.setdefault(group, {})
            for tp, entry in entries.items():
                current = group_offsets.get(tp)
                if current is None or current.record_offset < entry.record_offset:
                    group_offsets[tp] = entry


def _placed(entry: OffsetAndMetadata, record_offset: int) -> OffsetAndMetadata:
    return OffsetAndMetadata(
        entry.offset, entry.leader_epoch, entry.metadata, entry.commit_timestamp, entry.expire_timestamp, record_offset
    )


def read_partition_records(log, load_buffer_size: int) -> Iterable[LoadedRecord]:
    """Every record of ``log`` (a storage Log) from its start to its high watermark, as
    LoadedPartition.replay takes them, reading ``load_buffer_size`` bytes at a time
    (offsets.load.buffer.size)."""
    position = log.log_start_offset
    end = log.high_watermark
    while position < end:
        info = log.read(position, load_buffer_size, min_one_message=True)
        if info.region is None:
            break
        data = info.region.read_bytes()
        advanced = position
        for batch in iter_batches(data):
            if batch.next_offset <= position:
                continue
            if batch.is_control:
                control = batch.control_type
                if control is not None and batch.producer_id >= 0:
                    yield TxnMarker(batch.base_offset, batch.producer_id, control == ControlRecordType.COMMIT)
            elif batch.is_transactional:
                producer_id = batch.producer_id
                for record in batch.records:
                    if record.offset >= position:
                        yield record.offset, record.key, record.value, producer_id
            else:
                for record in batch.records:
                    if record.offset >= position:
                        yield record.offset, record.key, record.value
            advanced = batch.next_offset
        if advanced == position:
            break
        position = advanced
