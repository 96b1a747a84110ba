"""What one Kafka request frame may decode to, checked before kio builds a single object.

kio's reader amplifies as msgpack does: a Metadata request of 2,000,000 empty topic names is
4 MB on the wire and 2M Python objects (over a second of CPU holding the GIL, ~170 MB); a frame at
socket.request.max.bytes would take half a minute and gigabytes. No client needs that. Every API
but Produce carries names, ids and offsets only, and real clients' requests of them stay far
below ``MAX_SMALL_FRAME_BYTES`` (a Metadata request naming 10,000 topics is ~300 KB), so a larger
one is refused unread. A Produce request is large because of its record bytes, which decode to
one bytes object per partition; what amplifies is its count of entries, so a walk over its
array lengths (skipping strings and records by their lengths, without copying) refuses one that
names more partitions than the broker may hold (``max.broker.partitions``), before decoding.
Pure and sans-IO: the connection calls :func:`check_request` on each frame.
"""

from __future__ import annotations

import struct

from .requests import MalformedRequest

__all__ = ["MAX_SMALL_FRAME_BYTES", "RequestTooLarge", "check_request"]

#: The largest frame of any API but Produce.
MAX_SMALL_FRAME_BYTES = 1 << 20
PRODUCE = 0
#: The first flexible (compact, tagged) version of Produce, and of its request header (v2).
PRODUCE_FLEXIBLE = 9

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")


class RequestTooLarge(MalformedRequest):
    """A request over a bound of the listener (its reason names the bound)."""


def check_request(frame: bytes | bytearray | memoryview, max_partitions: int) -> None:
    """Raise RequestTooLarge if ``frame`` exceeds what its API may hold; MalformedRequest if the
    walk finds it cut short. Frames too short to name their API are left to the decoder."""
    if len(frame) < 4:
        return
    api_key, version = struct.unpack_from(">hh", frame)
    if api_key != PRODUCE:
        if len(frame) > MAX_SMALL_FRAME_BYTES:
            raise RequestTooLarge(f"a request of api_key {api_key} of {len(frame)} bytes is over the "
                                  f"{MAX_SMALL_FRAME_BYTES} bytes any such request needs", api_key, version)
        return
    count = _produce_entries(memoryview(frame), version >= PRODUCE_FLEXIBLE, 2 * max_partitions)
    if count > 2 * max_partitions:
        raise RequestTooLarge(f"a produce request naming more than {max_partitions} partitions "
                              f"(max.broker.partitions)", api_key, version)


class _Walk:
    __slots__ = ("data", "at", "flexible")

    def __init__(self, data: memoryview, at: int, flexible: bool):
        self.data, self.at, self.flexible = data, at, flexible

    def _need(self, n: int) -> None:
        if n < 0 or self.at + n > len(self.data):
            raise MalformedRequest("the request ends inside a field", PRODUCE)

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

    def string(self) -> None:
        """A (nullable) STRING of the body: compact in flexible versions."""
        if self.flexible:
            length = self.uvarint() - 1
            if length > 0:
                self.skip(length)
        else:
            self.legacy_string()

    def records(self) -> None:
        length = self.uvarint() - 1 if self.flexible else self.int32()
        if length > 0:
            self.skip(length)

    def array_length(self) -> int:
        return max(self.uvarint() - 1, 0) if self.flexible else max(self.int32(), 0)

    def tagged_fields(self) -> None:
        if self.flexible:
            for _ in range(self.uvarint()):
                self.uvarint()  # the tag
                self.skip(self.uvarint())


def _produce_entries(data: memoryview, flexible: bool, budget: int) -> int:
    """The topics and partitions a produce request names, counted up to just past ``budget``
    (topics too: a request of empty topics would otherwise be walked to its end)."""
    walk = _Walk(data, 8, flexible)  # api_key, api_version, correlation_id
    walk.legacy_string()  # client_id: a legacy string in every header version
    walk.tagged_fields()  # header v2's
    walk.string()  # transactional_id
    walk.skip(6)  # acks, timeout_ms
    count = 0
    topics = walk.array_length()
    if topics > budget:
        return topics
    for _ in range(topics):
        walk.string()  # the topic's name
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
