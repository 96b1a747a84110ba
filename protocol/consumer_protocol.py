"""Kafka's ConsumerProtocol bytes: the Subscription and Assignment a consumer group carries.

A consumer joining a group (protocol_type ``"consumer"``) sends, per assignor it offers, a
*Subscription* as the JoinGroup protocol metadata; the leader answers every member with an
*Assignment* in SyncGroup. The coordinator stores both opaquely, and describe_groups hands them
back, so tools (lag, ``triolog groups --describe``) decode them too. These are Kafka's bytes
(``ConsumerProtocolSubscription.json`` / ``ConsumerProtocolAssignment.json``, non-flexible),
so a Kafka client's group metadata reads here and ours reads there:

- an int16 version first; strings are an int16 length + UTF-8, nullable ones length -1 = null;
  bytes an int32 length (-1 = null); arrays an int32 count.
- Subscription: Topics [string] and UserData (v0), OwnedPartitions [{Topic, Partitions [int32]}]
  (v1+), GenerationId int32 (v2+, default -1), RackId nullable string (v3+).
- Assignment: AssignedPartitions [{Topic, Partitions [int32]}], UserData (every version; v1-v3
  add nothing to the bytes).

Encoding writes version 3 by default (what current Kafka clients write) with the topics and
owned partitions sorted, as Kafka's ``ConsumerProtocol.serializeSubscription`` does. Decoding
accepts every version >= 0; a version above 3 is read as 3 and the bytes a newer version adds
after the v3 fields are ignored (Kafka's rule, so older members read newer members' metadata).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Literal, overload

__all__ = [
    "Assignment",
    "ConsumerProtocolError",
    "LATEST_VERSION",
    "PROTOCOL_TYPE",
    "Subscription",
    "decode_assignment",
    "decode_subscription",
    "encode_assignment",
    "encode_subscription",
]

#: The JoinGroup protocol_type of consumers.
PROTOCOL_TYPE = "consumer"
#: The highest Subscription/Assignment version this codec knows (and writes by default).
LATEST_VERSION = 3

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


class ConsumerProtocolError(ValueError):
    """Group metadata that is not a well-formed Subscription or Assignment."""


@dataclass(frozen=True, slots=True)
class Subscription:
    topics: tuple[str, ...]
    user_data: bytes | None = None
    #: (topic, partitions) pairs the member owns (cooperative protocols; empty for eager ones).
    owned_partitions: tuple[tuple[str, tuple[int, ...]], ...] = ()
    generation_id: int = -1
    rack_id: str | None = None
    #: The version the bytes had (decoding) or are written in (encoding's default: 3).
    version: int = LATEST_VERSION


@dataclass(frozen=True, slots=True)
class Assignment:
    #: (topic, partitions) pairs.
    assigned_partitions: tuple[tuple[str, tuple[int, ...]], ...]
    user_data: bytes | None = None
    version: int = LATEST_VERSION

    def partitions(self) -> list[tuple[str, int]]:
        """Every assigned (topic, partition), in the order the bytes list them."""
        return [(topic, partition) for topic, parts in self.assigned_partitions for partition in parts]


# -- writing ----------------------------------------------------------------------------------


def _string(out: bytearray, text: str | None, nullable: bool = False) -> None:
    if text is None:
        if not nullable:
            raise ConsumerProtocolError("a non-nullable string is None")
        out += _I16.pack(-1)
        return
    data = text.encode("utf-8")
    if len(data) > 0x7FFF:
        raise ConsumerProtocolError(f"string of {len(data)} bytes is longer than 32767")
    out += _I16.pack(len(data))
    out += data


def _bytes(out: bytearray, data: bytes | None) -> None:
    if data is None:
        out += _I32.pack(-1)
        return
    out += _I32.pack(len(data))
    out += data


def _topic_partitions(out: bytearray, items) -> None:
    out += _I32.pack(len(items))
    for topic, partitions in items:
        _string(out, topic)
        out += _I32.pack(len(partitions))
        for partition in partitions:
            out += _I32.pack(partition)


def _check_version(version: int) -> None:
    if not 0 <= version <= LATEST_VERSION:
        raise ConsumerProtocolError(f"version {version} is not one of 0..{LATEST_VERSION}")


def encode_subscription(subscription: Subscription, version: int | None = None) -> bytes:
    """The Subscription's bytes at ``version`` (default: the subscription's own, 3); fields the
    version does not have are left out. Topics and owned partitions are written sorted."""
    version = subscription.version if version is None else version
    _check_version(version)
    out = bytearray(_I16.pack(version))
    topics = sorted(subscription.topics)
    out += _I32.pack(len(topics))
    for topic in topics:
        _string(out, topic)
    _bytes(out, subscription.user_data)
    if version >= 1:
        _topic_partitions(out, [(topic, sorted(parts)) for topic, parts in sorted(subscription.owned_partitions)])
    if version >= 2:
        out += _I32.pack(subscription.generation_id)
    if version >= 3:
        _string(out, subscription.rack_id, nullable=True)
    return bytes(out)


def encode_assignment(assignment: Assignment, version: int | None = None) -> bytes:
    version = assignment.version if version is None else version
    _check_version(version)
    out = bytearray(_I16.pack(version))
    _topic_partitions(out, assignment.assigned_partitions)
    _bytes(out, assignment.user_data)
    return bytes(out)


# -- reading ----------------------------------------------------------------------------------


class _Reader:
    __slots__ = ("data", "pos", "what")

    def __init__(self, data: bytes, what: str) -> None:
        self.data, self.pos, self.what = memoryview(data), 0, what

    def _take(self, size: int) -> memoryview:
        if size < 0 or self.pos + size > len(self.data):
            raise ConsumerProtocolError(
                f"{self.what} ends early: {size} bytes wanted at byte {self.pos} of {len(self.data)}"
            )
        start, self.pos = self.pos, self.pos + size
        return self.data[start : self.pos]

    def int16(self) -> int:
        return _I16.unpack(self._take(2))[0]

    def int32(self) -> int:
        return _I32.unpack(self._take(4))[0]

    @overload
    def string(self, nullable: Literal[False] = False) -> str: ...
    @overload
    def string(self, nullable: bool) -> str | None: ...

    def string(self, nullable: bool = False) -> str | None:
        """A string; null (length -1) only where ``nullable``, else ConsumerProtocolError."""
        size = self.int16()
        if size < 0:
            if size == -1 and nullable:
                return None
            raise ConsumerProtocolError(f"{self.what}: string length {size} at byte {self.pos - 2}")
        try:
            return str(self._take(size), "utf-8")
        except UnicodeDecodeError as exc:
            raise ConsumerProtocolError(f"{self.what}: string is not UTF-8: {exc}") from None

    def nullable_bytes(self) -> bytes | None:
        size = self.int32()
        if size == -1:
            return None
        if size < 0:
            raise ConsumerProtocolError(f"{self.what}: bytes length {size} at byte {self.pos - 4}")
        return bytes(self._take(size))

    def count(self) -> int:
        """An array's count, bounded by the bytes left (each element takes at least 2 bytes)."""
        size = self.int32()
        if size < 0 or size > (len(self.data) - self.pos) // 2:
            raise ConsumerProtocolError(f"{self.what}: array count {size} at byte {self.pos - 4} does not fit")
        return size

    def topic_partitions(self) -> tuple[tuple[str, tuple[int, ...]], ...]:
        out = []
        for _ in range(self.count()):
            topic = self.string()
            out.append((topic, tuple(self.int32() for _ in range(self.count()))))
        return tuple(out)

    def version(self) -> int:
        version = self.int16()
        if version < 0:
            raise ConsumerProtocolError(f"{self.what}: version {version} is negative")
        return min(version, LATEST_VERSION)


def decode_subscription(data: bytes) -> Subscription:
    """A Subscription from its bytes (any version >= 0; see the module's docstring)."""
    reader = _Reader(data, "subscription")
    version = reader.version()
    topics = tuple(reader.string() for _ in range(reader.count()))
    user_data = reader.nullable_bytes()
    owned = reader.topic_partitions() if version >= 1 else ()
    generation_id = reader.int32() if version >= 2 else -1
    rack_id = reader.string(nullable=True) if version >= 3 else None
    return Subscription(topics, user_data, owned, generation_id, rack_id, version)


def decode_assignment(data: bytes) -> Assignment:
    """An Assignment from its bytes (any version >= 0). Empty bytes are an empty assignment:
    what the coordinator hands a member the leader left out."""
    if not data:
        return Assignment((), None, 0)
    reader = _Reader(data, "assignment")
    version = reader.version()
    assigned = reader.topic_partitions()
    user_data = reader.nullable_bytes()
    return Assignment(assigned, user_data, version)
