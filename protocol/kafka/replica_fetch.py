"""A follower's side of Kafka's Fetch (version 12), sans-IO: the request it sends, the response
it reads.

Version 12 is the last that names topics by name (13+ use topic ids, which triolog's topics do
not have) and the first with truncate-on-fetch (KIP-595's ``LastFetchedEpoch`` in the request,
``DivergingEpoch`` in the response), so a follower never needs OffsetsForLeaderEpoch. It is a
flexible version: compact strings, arrays and bytes (unsigned varint lengths, plus one) and
tagged fields. The encoder and decoder are written out by hand, field by field as Kafka's
FetchRequest.json and FetchResponse.json list them, rather than through kio's dataclasses: a
follower fetches all the time, and the records (most of a response) are sliced out once, never
parsed. tests/protocol/test_replica_fetch_codec.py checks both against kio's own codec.

Frames on the wire are a 4-byte length and that many bytes: :func:`encode_replica_fetch` gives
a whole frame; the caller splits the byte stream it reads into frame bodies with
:class:`triolog.protocol.frames.FrameDecoder` and hands each body to
:func:`decode_replica_fetch_response`.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass

from triolog.protocol.frames import RemoteProtocolError

__all__ = [
    "FETCH_API_KEY",
    "FETCH_VERSION",
    "NO_EPOCH",
    "EpochEndOffset",
    "PartitionFetch",
    "PartitionFetchResult",
    "ReplicaFetchResponse",
    "decode_replica_fetch_response",
    "encode_replica_fetch",
    "response_correlation_id",
]

FETCH_API_KEY = 1
FETCH_VERSION = 12
#: Kafka's "no epoch" (-1), in a request's CurrentLeaderEpoch or LastFetchedEpoch.
NO_EPOCH = -1

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
# The fixed part of a request body: ReplicaId, MaxWaitMs, MinBytes, MaxBytes, IsolationLevel,
# SessionId, SessionEpoch.
_REQUEST_FIXED = struct.Struct(">iiiibii")
# A request partition: Partition, CurrentLeaderEpoch, FetchOffset, LastFetchedEpoch,
# LogStartOffset, PartitionMaxBytes.
_REQUEST_PARTITION = struct.Struct(">iiqiqi")
# A response partition's fixed head: PartitionIndex, ErrorCode, HighWatermark, LastStableOffset,
# LogStartOffset.
_RESPONSE_PARTITION = struct.Struct(">ihqqq")
# The response body's fixed head: ThrottleTimeMs, ErrorCode, SessionId.
_RESPONSE_FIXED = struct.Struct(">ihi")
_EPOCH_END_OFFSET = struct.Struct(">iq")
_LEADER_ID_AND_EPOCH = struct.Struct(">ii")

# Tags of the response partition's tagged fields.
_TAG_DIVERGING_EPOCH = 0
_TAG_CURRENT_LEADER = 1
# (2: SnapshotId, KRaft's metadata log: skipped, as are tags this version does not know)


# -- values ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class PartitionFetch:
    """One partition of a follower's fetch, from its local log."""

    topic: str
    partition: int
    #: The leader epoch the follower believes current (the leader fences an older one).
    current_leader_epoch: int
    #: The follower's log end offset.
    fetch_offset: int
    #: The epoch of the follower's last batch (its latest epoch), NO_EPOCH with none.
    last_fetched_epoch: int
    #: The follower's log start offset (the leader keeps it, for its own retention).
    log_start_offset: int
    partition_max_bytes: int


@dataclass(frozen=True)
class EpochEndOffset:
    """Where the leader's log diverges from the follower's: the largest leader epoch not above the
    follower's last fetched one, and the offset where it ends in the leader's log."""

    epoch: int
    end_offset: int


@dataclass(frozen=True)
class PartitionFetchResult:
    topic: str
    partition: int
    error_code: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    #: None when the leader found no divergence (it sent epoch -1 and end offset -1).
    diverging_epoch: EpochEndOffset | None
    #: The leader's record batches as they are in its log, b"" when there are none.
    records: bytes
    #: (leader id, leader epoch) the leader named (a tagged field), None when it sent none.
    current_leader: tuple[int, int] | None = None


@dataclass(frozen=True)
class ReplicaFetchResponse:
    correlation_id: int
    #: The top-level error (a fetch session's; per partition errors are in ``partitions``).
    error_code: int
    throttle_time_ms: int
    session_id: int
    partitions: tuple[PartitionFetchResult, ...]


# -- encoding --------------------------------------------------------------------------------


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _compact_string(value: str) -> bytes:
    data = value.encode()
    return _uvarint(len(data) + 1) + data


_NO_TAGGED_FIELDS = b"\x00"


def encode_replica_fetch(
    correlation_id: int,
    client_id: str | None,
    replica_id: int,
    max_wait_ms: int,
    min_bytes: int,
    max_bytes: int,
    partitions: Iterable[PartitionFetch],
    *,
    isolation_level: int = 0,
    rack_id: str = "",
) -> bytes:
    """A whole Fetch v12 request frame (with its 4-byte length): a full fetch outside any fetch
    session (SessionId 0, SessionEpoch -1), partitions grouped by topic in first-seen order."""
    by_topic: dict[str, list[PartitionFetch]] = {}
    for p in partitions:
        by_topic.setdefault(p.topic, []).append(p)
    out = bytearray()
    # Request header v2: ApiKey, ApiVersion, CorrelationId, ClientId (a nullable non-compact
    # string, in every header version), tagged fields.
    out += _I16.pack(FETCH_API_KEY) + _I16.pack(FETCH_VERSION) + _I32.pack(correlation_id)
    if client_id is None:
        out += _I16.pack(-1)
    else:
        client = client_id.encode()
        out += _I16.pack(len(client)) + client
    out += _NO_TAGGED_FIELDS
    out += _REQUEST_FIXED.pack(replica_id, max_wait_ms, min_bytes, max_bytes, isolation_level, 0, -1)
    out += _uvarint(len(by_topic) + 1)
    for topic, parts in by_topic.items():
        out += _compact_string(topic)
        out += _uvarint(len(parts) + 1)
        for p in parts:
            out += _REQUEST_PARTITION.pack(
                p.partition,
                p.current_leader_epoch,
                p.fetch_offset,
                p.last_fetched_epoch,
                p.log_start_offset,
                p.partition_max_bytes,
            )
            out += _NO_TAGGED_FIELDS
        out += _NO_TAGGED_FIELDS
    out += _uvarint(1)  # ForgottenTopicsData: none
    out += _compact_string(rack_id)
    out += _NO_TAGGED_FIELDS  # (ClusterId, tag 0, is left out: null)
    return _I32.pack(len(out)) + bytes(out)


# -- decoding --------------------------------------------------------------------------------


class _Reader:
    """A cursor over a frame body; every read past its end is a RemoteProtocolError."""

    __slots__ = ("data", "pos", "end")

    def __init__(self, data: bytes | bytearray | memoryview, pos: int = 0, end: int | None = None):
        self.data = data
        self.pos = pos
        self.end = len(data) if end is None else end

    def _take(self, n: int) -> int:
        start = self.pos
        if n < 0 or start + n > self.end:
            raise RemoteProtocolError(f"Fetch response truncated: {n} bytes wanted at {start} of {self.end}")
        self.pos = start + n
        return start

    def unpack(self, fmt: struct.Struct) -> tuple:
        return fmt.unpack_from(self.data, self._take(fmt.size))

    def uvarint(self) -> int:
        value = shift = 0
        while True:
            byte = self.data[self._take(1)]
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
            if shift > 28:
                raise RemoteProtocolError("Fetch response has an unsigned varint longer than 5 bytes")

    def compact_length(self) -> int:
        """A compact length: -1 for null."""
        return self.uvarint() - 1

    def compact_string(self) -> str:
        n = self.compact_length()
        if n < 0:
            raise RemoteProtocolError("Fetch response has a null topic name")
        start = self._take(n)
        return bytes(self.data[start : start + n]).decode()

    def compact_bytes(self) -> bytes | None:
        n = self.compact_length()
        if n < 0:
            return None
        start = self._take(n)
        return bytes(self.data[start : start + n])

    def skip(self, n: int) -> None:
        self._take(n)

    def tagged_fields(self) -> dict[int, tuple[int, int]]:
        """The tagged fields here, as tag -> (position, size) of each value (read by the caller)."""
        fields = {}
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            size = self.uvarint()
            fields[tag] = (self._take(size), size)
        return fields


def response_correlation_id(frame_body: bytes | bytearray | memoryview) -> int:
    """The correlation id of a response frame body (any API, any header version)."""
    return _Reader(frame_body).unpack(_I32)[0]


def decode_replica_fetch_response(frame_body: bytes | bytearray | memoryview) -> ReplicaFetchResponse:
    """A Fetch v12 response frame body (the bytes after the 4-byte length)."""
    r = _Reader(frame_body)
    (correlation_id,) = r.unpack(_I32)
    r.tagged_fields()  # response header v1
    throttle_time_ms, error_code, session_id = r.unpack(_RESPONSE_FIXED)
    results: list[PartitionFetchResult] = []
    topic_count = r.compact_length()
    for _ in range(max(topic_count, 0)):
        topic = r.compact_string()
        partition_count = r.compact_length()
        for _ in range(max(partition_count, 0)):
            results.append(_decode_partition(r, topic))
        r.tagged_fields()
    r.tagged_fields()
    return ReplicaFetchResponse(correlation_id, error_code, throttle_time_ms, session_id, tuple(results))


def _decode_partition(r: _Reader, topic: str) -> PartitionFetchResult:
    partition, error_code, high_watermark, last_stable_offset, log_start_offset = r.unpack(_RESPONSE_PARTITION)
    aborted = r.compact_length()  # AbortedTransactions: ProducerId, FirstOffset, tagged fields
    for _ in range(max(aborted, 0)):
        r.skip(16)
        r.tagged_fields()
    r.skip(4)  # PreferredReadReplica
    records = r.compact_bytes() or b""
    diverging = None
    current_leader = None
    for tag, (position, size) in r.tagged_fields().items():
        if tag == _TAG_DIVERGING_EPOCH:
            sub = _Reader(r.data, position, position + size)
            epoch, end_offset = sub.unpack(_EPOCH_END_OFFSET)
            if epoch != NO_EPOCH or end_offset != -1:
                diverging = EpochEndOffset(epoch, end_offset)
        elif tag == _TAG_CURRENT_LEADER:
            leader_id, leader_epoch = _Reader(r.data, position, position + size).unpack(_LEADER_ID_AND_EPOCH)
            if leader_id != -1 or leader_epoch != NO_EPOCH:
                current_leader = (leader_id, leader_epoch)
    return PartitionFetchResult(
        topic,
        partition,
        error_code,
        high_watermark,
        last_stable_offset,
        log_start_offset,
        diverging,
        records,
        current_leader,
    )
