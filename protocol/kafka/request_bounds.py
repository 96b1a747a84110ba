"""What one Kafka request frame may decode to, checked before kio builds a single object.

kio's reader amplifies as msgpack does: a Metadata request of 2,000,000 empty topic names is
4 MB on the wire and 2M Python objects (over a second of CPU holding the GIL, ~170 MB); a frame at
socket.request.max.bytes would take half a minute and gigabytes. No client needs that. Most APIs
carry names, ids and offsets only, and real clients' requests of them stay far below
``MAX_SMALL_FRAME_BYTES`` (a Metadata request naming 10,000 topics is ~300 KB), so a larger one
is refused unread; Produce (record bytes) and JoinGroup, SyncGroup and OffsetCommit (opaque
member metadata, assignments and committed metadata, over a megabyte in large groups) may go up
to socket.request.max.bytes (``LARGE_FRAME_APIS``). What amplifies is a request's count of
entries, and every entry also costs the event loop a translation, a handler call and an answer
to encode: so a walk over its array lengths (skipping strings and records by their lengths,
without copying) refuses, before decoding, a Produce request that names more partitions than
the broker may hold (``max.broker.partitions``), and any other request holding more entries
than its API's budget (:func:`entry_budget`: twice max.broker.partitions for the APIs naming
topics and partitions, ``MAX_GROUP_ENTRIES`` for the group APIs). Every request but Produce is
walked over its schema (kio's classes say each field's wire type) before kio reads it: an
array, string or bytes length larger than what is left of the frame is refused there too. kio's reader trusts such lengths and reserves memory for them up front: one mutated frame
claiming an array of billions of entries made it ask for 99 GB and abort the broker process.
Pure and sans-IO: the connection calls :func:`check_request` on each frame.
"""

from __future__ import annotations

import dataclasses
import functools
import struct
from typing import Literal

from kio.serial._introspect import EntityField, EntityTupleField, classify_field, get_field_tag, is_optional
from kio.static.protocol import Entity

from .apis import ApiKey
from .requests import MalformedRequest
from .schema import UnknownSchema, request_class

__all__ = [
    "LARGE_FRAME_APIS",
    "MAX_GROUP_ENTRIES",
    "MAX_SMALL_FRAME_BYTES",
    "RequestTooLarge",
    "check_request",
    "entry_budget",
]

#: The largest frame of any API but those of ``LARGE_FRAME_APIS``.
MAX_SMALL_FRAME_BYTES = 1 << 20
PRODUCE = ApiKey.PRODUCE
#: APIs whose frames may be as large as socket.request.max.bytes (the frame decoder's bound):
#: Produce's record bytes, and the opaque bytes the group APIs carry, which legitimately exceed a
#: megabyte in large groups (JoinGroup's member metadata, SyncGroup's assignments, OffsetCommit's
#: committed metadata). What they amplify into is bounded by their entry counts, as any API's.
LARGE_FRAME_APIS = frozenset({PRODUCE, ApiKey.OFFSET_COMMIT, ApiKey.JOIN_GROUP, ApiKey.SYNC_GROUP})
#: The group APIs, whose arrays are group ids, coordinator keys, members and protocols.
GROUP_APIS = frozenset(
    {
        ApiKey.FIND_COORDINATOR,
        ApiKey.JOIN_GROUP,
        ApiKey.HEARTBEAT,
        ApiKey.LEAVE_GROUP,
        ApiKey.SYNC_GROUP,
        ApiKey.DESCRIBE_GROUPS,
        ApiKey.LIST_GROUPS,
        ApiKey.DELETE_GROUPS,
    }
)
#: The entries (every array's, nested ones too) a request of a group API may hold: FindCoordinator
#: keys, DescribeGroups and DeleteGroups ids, a JoinGroup's protocols, a SyncGroup's or
#: LeaveGroup's members. Ten thousand groups or members is far more than one request of a real
#: client names; each costs the event loop a translation and a coordinator call.
MAX_GROUP_ENTRIES = 10_000
#: The first flexible (compact, tagged) version of Produce, and of its request header (v2).
PRODUCE_FLEXIBLE = 9

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")


class RequestTooLarge(MalformedRequest):
    """A request over a bound of the listener (its reason names the bound)."""


def check_request(
    frame: bytes | bytearray | memoryview, max_partitions: int, served: dict[int, tuple[int, int]] | None = None
) -> int:
    """The entries ``frame`` holds (every array's, counted by the walk; 0 where it is left to the
    decoder): what translating it will cost. Raise RequestTooLarge if ``frame`` exceeds what its API may hold; MalformedRequest if the
    walk finds it cut short or a length beyond its end (both naming the request's header).
    Frames too short to name their API, and APIs or versions outside ``served`` (None: any kio
    knows), are left to the decoder."""
    try:
        return _check(frame, max_partitions, served)
    except MalformedRequest as exc:
        if len(frame) >= 8:
            exc.api_key, exc.version, exc.correlation_id = struct.unpack_from(">hhi", frame)
        raise


def _check(
    frame: bytes | bytearray | memoryview, max_partitions: int, served: dict[int, tuple[int, int]] | None
) -> int:
    if len(frame) < 4:
        return 0
    api_key, version = struct.unpack_from(">hh", frame)
    if api_key != PRODUCE:
        if api_key not in LARGE_FRAME_APIS and len(frame) > MAX_SMALL_FRAME_BYTES:
            raise RequestTooLarge(
                f"a request of api_key {api_key} of {len(frame)} bytes is over the "
                f"{MAX_SMALL_FRAME_BYTES} bytes any such request needs",
                api_key,
                version,
            )
        versions = served.get(api_key) if served is not None else (version, version)
        if versions is None or not versions[0] <= version <= versions[1]:
            return 0
        try:
            cls = request_class(api_key, version)
        except UnknownSchema:
            return 0
        walk = _Walk(memoryview(frame), 8, False, api_key)
        walk.budget, walk.bound = entry_budget(api_key, max_partitions)
        walk.legacy_string()  # client_id: a legacy string in every header version
        if cls.__header_schema__.__flexible__:
            walk.flexible = True
            walk.tagged_fields()
        walk.flexible = cls.__flexible__
        walk.entity(cls)
        return walk.entries
    count = _produce_entries(memoryview(frame), version >= PRODUCE_FLEXIBLE, 2 * max_partitions)
    if count > 2 * max_partitions:
        raise RequestTooLarge(
            f"a produce request naming more than {max_partitions} partitions (max.broker.partitions)", api_key, version
        )
    return count


def entry_budget(api_key: int, max_partitions: int) -> tuple[int, str]:
    """(the entries a request of ``api_key`` may hold, counting every array's entries, nested
    ones too; what that bound is). The APIs naming topics and partitions (Fetch, ListOffsets,
    Metadata, OffsetCommit, OffsetFetch, DeleteRecords, the admin APIs...) get Produce's budget:
    two entries per partition the broker may hold (a topic and a partition each); the group APIs
    ``MAX_GROUP_ENTRIES``. Every entry costs the event loop a translation, a handler call or an
    answer to encode: the budget bounds how long one request may take."""
    if api_key in GROUP_APIS:
        return MAX_GROUP_ENTRIES, f"{MAX_GROUP_ENTRIES} entries (groups, keys or members) per request"
    return 2 * max_partitions, f"{2 * max_partitions} entries (topics and partitions), twice max.broker.partitions"


class _Walk:
    __slots__ = ("data", "at", "flexible", "api_key", "end", "entries", "budget", "bound")

    def __init__(self, data: memoryview, at: int, flexible: bool, api_key: int = PRODUCE):
        self.data, self.at, self.flexible, self.api_key = data, at, flexible, api_key
        self.end = len(data)
        self.entries = 0
        self.budget = 1 << 62
        self.bound = ""

    def entries_of(self, nullable: bool) -> int:
        """An array's length (as array_length), counted against the request's entry budget."""
        n = self.array_length(nullable)
        self.entries += n
        if self.entries > self.budget:
            raise RequestTooLarge(f"a request of api_key {self.api_key} holding more than {self.bound}", self.api_key)
        return n

    def _need(self, n: int) -> None:
        if n < 0 or self.at + n > self.end:
            raise MalformedRequest(f"a length of {n} bytes runs past the end of the request", self.api_key)

    def int16(self) -> int:
        self._need(2)
        value = _INT16.unpack_from(self.data, self.at)[0]
        self.at += 2
        return value

    def int32(self) -> int:
        self._need(4)
        value = _INT32.unpack_from(self.data, self.at)[0]
        self.at += 4
        return value

    def uvarint(self) -> int:
        value = shift = 0
        while True:
            self._need(1)
            byte = self.data[self.at]
            self.at += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
            if shift > 35:
                raise MalformedRequest("a varint longer than 5 bytes", PRODUCE)

    def skip(self, n: int) -> None:
        self._need(n)
        self.at += n

    def legacy_string(self) -> None:
        length = self.int16()
        if length > 0:
            self.skip(length)

    def string(self, nullable: bool = True) -> None:
        """A STRING of the body: compact in flexible versions."""
        length = self.uvarint() - 1 if self.flexible else self.int16()
        if length > 0:
            self.skip(length)
        elif length < 0 and not nullable:
            self._null()

    def _null(self) -> None:
        # Kafka refuses it too: "non-nullable field was serialized as null".
        raise MalformedRequest("a field that cannot be null was sent as null", self.api_key)

    def records(self) -> None:
        length = self.uvarint() - 1 if self.flexible else self.int32()
        if length > 0:
            self.skip(length)

    def array_length(self, nullable: bool = False) -> int:
        n = self.uvarint() - 1 if self.flexible else self.int32()
        if n < 0:
            if not nullable:
                self._null()
            return 0
        if n > self.end - self.at:  # every entry takes a byte at least
            raise MalformedRequest(
                f"an array of {n} entries in the {self.end - self.at} bytes left of the request", self.api_key
            )
        return n

    # -- the schema walk (every API but Produce) ------------------------------------------------

    def entity(self, cls: type[Entity]) -> None:
        fields, tagged = _plan(cls)
        for step in fields:
            if step[2]:  # an array
                for _ in range(self.entries_of(step[3])):
                    self.value(step, False)
            else:
                self.value(step, step[3])
        if self.flexible:
            for _ in range(self.uvarint()):
                tag = self.uvarint()
                size = self.uvarint()
                self._need(size)
                known = tagged.get(tag)
                if known is None:
                    self.at += size
                    continue
                end, self.end = self.end, self.at + size  # a known tag is read by kio: walk it too
                if known[2]:  # an array
                    for _ in range(self.entries_of(known[3])):
                        self.value(known, False)
                else:
                    self.value(known, known[3])
                self.at, self.end = self.end, end

    def value(self, step: _Step, nullable: bool) -> None:
        """One value of ``step``'s field (one entry, for an array field)."""
        if step[0] == "fixed":
            self.skip(step[1])
        elif step[0] == "string" or step[0] == "bytes":
            if self.flexible:
                n = self.uvarint() - 1
            else:
                n = self.int16() if step[0] == "string" else self.int32()
            if n > 0:
                self.skip(n)
            elif n < 0 and not nullable:
                self._null()
        elif step[0] == "entity":
            self.entity(step[1])
        else:  # a nullable entity: an int8 marker first
            self._need(1)
            present = self.data[self.at] != 0xFF
            self.at += 1
            if present:
                self.entity(step[1])

    def tagged_fields(self) -> None:
        if self.flexible:
            for _ in range(self.uvarint()):
                self.uvarint()  # the tag
                self.skip(self.uvarint())


_FIXED = {
    "int8": 1,
    "bool": 1,
    "int16": 2,
    "uint16": 2,
    "error_code": 2,
    "int32": 4,
    "uint32": 4,
    "timedelta_i32": 4,
    "int64": 8,
    "uint64": 8,
    "float64": 8,
    "timedelta_i64": 8,
    "datetime_i64": 8,
    "uuid": 16,
}


#: How the walk takes one field: (kind, what the kind needs, is_array, nullable). A "fixed" field
#: is skipped by its size in bytes; a "string" or "bytes" one by the length it starts with; an
#: "entity" is walked as its kio class says, a "nullable" one after its int8 presence marker. A
#: plain tuple, tested as ``step[0] == ...``: the type checker then knows what ``step[1]`` is.
_Step = (
    tuple[Literal["fixed"], int, bool, bool]
    | tuple[Literal["string", "bytes"], None, bool, bool]
    | tuple[Literal["entity", "nullable"], type[Entity], bool, bool]
)


@functools.cache
def _plan(cls: type[Entity]) -> tuple[tuple[_Step, ...], dict[int, _Step]]:
    """(the regular fields' steps in order, {tag: the tagged field's step})."""
    fields: list[_Step] = []
    tagged: dict[int, _Step] = {}
    for field in dataclasses.fields(cls):
        shape = classify_field(field)
        tag = get_field_tag(field)
        nullable = is_optional(field) or tag is not None
        step: _Step
        if isinstance(shape, (EntityField, EntityTupleField)):
            marker = isinstance(shape, EntityField) and is_optional(field) and tag is None
            step = ("nullable" if marker else "entity", shape.type_, shape.is_array, nullable)
        else:
            kafka_type = field.metadata["kafka_type"]
            if kafka_type in ("string",):
                step = ("string", None, shape.is_array, nullable)
            elif kafka_type in ("bytes", "records"):
                step = ("bytes", None, shape.is_array, nullable)
            else:
                step = ("fixed", _FIXED[kafka_type], shape.is_array, nullable)
        if tag is None:
            fields.append(step)
        else:
            tagged[int(tag)] = step
    return tuple(fields), tagged


def _produce_entries(data: memoryview, flexible: bool, budget: int) -> int:
    """The topics and partitions a produce request names, counted up to just past ``budget``
    (topics too: a request of empty topics would otherwise be walked to its end)."""
    walk = _Walk(data, 8, flexible)  # api_key, api_version, correlation_id
    walk.legacy_string()  # client_id: a legacy string in every header version
    walk.tagged_fields()  # header v2's
    walk.string(nullable=True)  # transactional_id
    walk.skip(6)  # acks, timeout_ms
    count = 0
    topics = walk.array_length()
    if topics > budget:
        return topics
    for _ in range(topics):
        walk.string(nullable=False)  # the topic's name
        partitions = walk.array_length()
        count += 1 + partitions
        if count > budget:
            return count
        for _ in range(partitions):
            walk.skip(4)  # index
            walk.records()
            walk.tagged_fields()
        walk.tagged_fields()
    return count
