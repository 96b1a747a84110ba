"""The records of ``__transaction_state``, byte for byte as Kafka writes them (its
TransactionLogKey and TransactionLogValue schemas, version-prefixed), and the loading of a
partition's records into the coordinator's metadata.

The key is version 0: the transactional id. The value is version 0 (non-flexible) for a
transaction of transaction version 0 or 1, and version 1 (flexible: compact strings and arrays,
tagged fields) for one of transaction version 2, as Kafka 4 chooses; both are read. A null value
(a tombstone) removes an expired transactional id. The partition of a transactional id is the
group coordinator's hash of a key (Java's String.hashCode, Kafka's abs, mod the partition count).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass

from triolog.broker.coordinator.group.group_metadata_manager import partition_for

__all__ = [
    "TRANSACTION_STATE_TOPIC",
    "TxnLogValue",
    "load_transactions",
    "partition_for",
    "read_key",
    "read_value",
    "transaction_log_key",
    "transaction_log_value",
]

TRANSACTION_STATE_TOPIC = "__transaction_state"

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_VALUE_V0_HEAD = struct.Struct(">qhib")  # producer id, epoch, timeout, status
_TIMES = struct.Struct(">qq")  # last update, start

#: Kafka's tags of TransactionLogValue v1's tagged fields.
TAG_PREVIOUS_PRODUCER_ID = 0
TAG_NEXT_PRODUCER_ID = 1
TAG_CLIENT_TRANSACTION_VERSION = 2


@dataclass(frozen=True)
class TxnLogValue:
    """One TransactionLogValue: a transactional id's state as persisted."""

    producer_id: int
    producer_epoch: int
    transaction_timeout_ms: int
    #: The TransactionState id (0 Empty ... 7 PrepareEpochFence).
    state: int
    #: (topic, partition) pairs; empty for Empty (written as null, as Kafka does).
    partitions: frozenset[tuple[str, int]]
    last_update_ms: int
    start_ms: int
    previous_producer_id: int = -1
    next_producer_id: int = -1
    client_transaction_version: int = 0


def transaction_log_key(transactional_id: str) -> bytes:
    return _I16.pack(0) + _string(transactional_id)


def transaction_log_value(value: TxnLogValue) -> bytes:
    """The value's bytes: version 1 for transaction version 2, else version 0 (Kafka's choice)."""
    groups: dict[str, list[int]] = {}
    for topic, partition in sorted(value.partitions):
        groups.setdefault(topic, []).append(partition)
    head = _VALUE_V0_HEAD.pack(value.producer_id, value.producer_epoch, value.transaction_timeout_ms, value.state)
    times = _TIMES.pack(value.last_update_ms, value.start_ms)
    empty = value.state == 0
    if value.client_transaction_version < 2:
        if empty:
            partitions = _I32.pack(-1)
        else:
            partitions = _I32.pack(len(groups)) + b"".join(
                _string(topic) + _I32.pack(len(ids)) + b"".join(_I32.pack(i) for i in ids)
                for topic, ids in groups.items()
            )
        return _I16.pack(0) + head + partitions + times
    if empty:
        partitions = _uvarint(0)
    else:
        partitions = _uvarint(len(groups) + 1) + b"".join(
            _compact_string(topic) + _uvarint(len(ids) + 1) + b"".join(_I32.pack(i) for i in ids) + _uvarint(0)
            for topic, ids in groups.items()
        )
    tagged = []
    if value.previous_producer_id != -1:
        tagged.append((TAG_PREVIOUS_PRODUCER_ID, _I64.pack(value.previous_producer_id)))
    if value.next_producer_id != -1:
        tagged.append((TAG_NEXT_PRODUCER_ID, _I64.pack(value.next_producer_id)))
    if value.client_transaction_version != 0:
        tagged.append((TAG_CLIENT_TRANSACTION_VERSION, _I16.pack(value.client_transaction_version)))
    fields = _uvarint(len(tagged)) + b"".join(_uvarint(tag) + _uvarint(len(data)) + data for tag, data in tagged)
    return _I16.pack(1) + head + partitions + times + fields


def read_key(data: bytes) -> str | None:
    """The transactional id of a key; None for a key version this broker does not know."""
    (version,) = _I16.unpack_from(data, 0)
    if version != 0:
        return None
    text, end = _read_string(data, 2)
    if end != len(data):
        raise ValueError(f"{len(data) - end} bytes after the transaction log key")
    return text


def read_value(data: bytes | None) -> TxnLogValue | None:
    """A value's content; None for a tombstone. ValueError for bytes that are not one."""
    if data is None:
        return None
    (version,) = _I16.unpack_from(data, 0)
    if version not in (0, 1):
        raise ValueError(f"unknown transaction log value version {version}")
    producer_id, epoch, timeout, state = _VALUE_V0_HEAD.unpack_from(data, 2)
    position = 2 + _VALUE_V0_HEAD.size
    partitions: set[tuple[str, int]] = set()
    extra: dict[int, int] = {}
    if version == 0:
        (count,) = _I32.unpack_from(data, position)
        position += 4
        for _ in range(max(count, 0)):
            topic, position = _read_string(data, position)
            (ids,) = _I32.unpack_from(data, position)
            position += 4
            for _ in range(ids):
                partitions.add((topic, _I32.unpack_from(data, position)[0]))
                position += 4
        last_update, start = _TIMES.unpack_from(data, position)
        position += _TIMES.size
    else:
        count, position = _read_uvarint(data, position)
        for _ in range(max(count - 1, 0)):
            length, position = _read_uvarint(data, position)
            topic = data[position : position + length - 1].decode()
            position += length - 1
            ids, position = _read_uvarint(data, position)
            for _ in range(ids - 1):
                partitions.add((topic, _I32.unpack_from(data, position)[0]))
                position += 4
            position = _skip_tagged(data, position)
        last_update, start = _TIMES.unpack_from(data, position)
        position += _TIMES.size
        fields, position = _read_uvarint(data, position)
        for _ in range(fields):
            tag, position = _read_uvarint(data, position)
            size, position = _read_uvarint(data, position)
            field = data[position : position + size]
            position += size
            if tag in (TAG_PREVIOUS_PRODUCER_ID, TAG_NEXT_PRODUCER_ID):
                extra[tag] = _I64.unpack(field)[0]
            elif tag == TAG_CLIENT_TRANSACTION_VERSION:
                extra[tag] = _I16.unpack(field)[0]
    if position != len(data):
        raise ValueError(f"{len(data) - position} bytes after the transaction log value")
    return TxnLogValue(
        producer_id,
        epoch,
        timeout,
        state,
        frozenset(partitions) if state != 0 else frozenset(),
        last_update,
        start,
        extra.get(TAG_PREVIOUS_PRODUCER_ID, -1),
        extra.get(TAG_NEXT_PRODUCER_ID, -1),
        extra.get(TAG_CLIENT_TRANSACTION_VERSION, 0),
    )


def load_transactions(records: Iterable[tuple]) -> dict[str, TxnLogValue]:
    """A partition's transactional ids from its records in log order ((offset, key, value), as
    read_partition_records yields plain records; anything else is skipped): the last value of each
    key wins, a tombstone removes it (Kafka's loadTransactionsForTxnTopicPartition)."""
    loaded: dict[str, TxnLogValue] = {}
    for record in records:
        if not isinstance(record, tuple) or len(record) != 3:
            continue  # a transactional record or a marker: never written to this topic
        _, key, value = record
        if key is None:
            continue
        transactional_id = read_key(key)
        if transactional_id is None:
            continue
        parsed = read_value(value)
        if parsed is None:
            loaded.pop(transactional_id, None)
        else:
            loaded[transactional_id] = parsed
    return loaded


# -- primitives ----------------------------------------------------------------------------------


def _string(text: str) -> bytes:
    data = text.encode()
    if len(data) > 0x7FFF:
        raise ValueError(f"string of {len(data)} bytes does not fit an int16 length")
    return _I16.pack(len(data)) + data


def _read_string(data: bytes, position: int) -> tuple[str, int]:
    (length,) = _I16.unpack_from(data, position)
    position += 2
    if length < 0 or position + length > len(data):
        raise ValueError("string length out of range")
    return data[position : position + length].decode(), position + length


def _compact_string(text: str) -> bytes:
    data = text.encode()
    return _uvarint(len(data) + 1) + data


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _read_uvarint(data: bytes, position: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if position >= len(data) or shift > 28:
            raise ValueError("malformed unsigned varint")
        byte = data[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, position
        shift += 7


def _skip_tagged(data: bytes, position: int) -> int:
    fields, position = _read_uvarint(data, position)
    for _ in range(fields):
        _, position = _read_uvarint(data, position)
        size, position = _read_uvarint(data, position)
        position += size
    return position
