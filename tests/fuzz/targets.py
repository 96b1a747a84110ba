"""Fuzz targets: one function per target, ``target(data: bytes) -> None``.

A target returns normally for any input the code under test handles as designed (including the
refusals it is designed to raise) and raises for anything else: an exception type the caller
does not expect, or an invariant broken. The same functions run under atheris
(``python -m tests.fuzz.run``), over the seed corpus in the tests, and in ``bench/fuzz.py``.

``requests``: the broker's request path without a socket. The input's first byte seeds how the
rest is cut into chunks; the chunks go through :class:`triolog.protocol.frames.FrameDecoder` and every
frame through :func:`triolog.protocol.messages.decode_request`, as ``broker/server/connection.py`` does.
Only :class:`triolog.protocol.frames.RemoteProtocolError` (``FrameTooLargeError``, ``RequestError``) may
escape. Also checked: the frames are the ones a plain reading of the length prefixes gives,
whatever the chunking; a refused request's error response encodes (the server sends it); an
accepted request encodes again and decodes to the same request.

``validator``: :func:`triolog.broker.storage.validator.validate_and_assign_offsets` on one batch. Byte 0
picks a topic config (low 5 bits) and whether to repair the CRC (bit 7) and the batch length
(bit 6) after mutation, so mutations get past the CRC into the records; byte 1 picks the offset
to assign; the rest is the batch. Only the storage errors a client can cause may escape
(``broker/storage/errors.py``: CorruptRecordError, InvalidRecordError, InvalidTimestampError,
RecordTooLargeError, UnsupportedForMessageFormatError). A batch it accepts must be what a
consumer can read: one batch that :func:`triolog.protocol.records.decode_batch` decodes, with the
offsets, count, size and max timestamp the validator reported, offsets contiguous from the base,
every CreateTime record's timestamp within message.timestamp.before/after.max.ms of the broker's
time, and keys on every record of a compacted topic.
"""

from __future__ import annotations

import random
import re
import struct

from crc32c import crc32c

from triolog.broker.storage.errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    RecordTooLargeError,
    UnsupportedForMessageFormatError,
)
from triolog.broker.storage.validator import validate_and_assign_offsets
from triolog.config.log_config import LogConfig
from triolog.protocol import messages as m
from triolog.protocol.errors import ErrorCode
from triolog.protocol.frames import NEED_DATA, FrameDecoder, FrameTooLargeError, RemoteProtocolError
from triolog.protocol.kafka.apis import Direct, KafkaContext
from triolog.protocol.kafka.request_bounds import check_request as check_kafka
from triolog.protocol.kafka.requests import MalformedRequest, UnsupportedVersion, decode_request, encode_response
from triolog.protocol.kafka.served import ADAPTERS, SERVED_VERSIONS
from triolog.protocol.record_batch import CRC_OFFSET, CRC_START, HEADER_SIZE, LOG_OVERHEAD, NO_TIMESTAMP, TimestampType
from triolog.protocol.records import decode_batch


class InvariantError(AssertionError):
    """The code under test returned something it must not; ``kind`` names the broken rule."""

    def __init__(self, message: str, kind: str = "") -> None:
        super().__init__(message)
        self.kind = kind


def _shape(text: str) -> str:
    """A message without its numbers: the same flaw found with other values is one kind."""
    return re.sub(r"-?\d+", "N", text)[:80]


# -- requests ----------------------------------------------------------------------------------

#: Small enough that the fuzzer reaches the limit with a length prefix; inputs are a few KB.
FUZZ_MAX_FRAME_BYTES = 1 << 20
_PREFIX = struct.Struct(">I")


def _reference_frames(stream: bytes, max_frame_bytes: int) -> tuple[list[bytes], bool]:
    """The frames a plain reading of the length prefixes gives, and whether one is too large."""
    frames, position = [], 0
    while len(stream) - position >= 4:
        (length,) = _PREFIX.unpack_from(stream, position)
        if length > max_frame_bytes:
            return frames, True
        if len(stream) - position - 4 < length:
            break
        frames.append(stream[position + 4: position + 4 + length])
        position += 4 + length
    return frames, False


def _chunks(stream: bytes, seed: int) -> list[bytes]:
    if seed == 0:
        return [stream]
    rng = random.Random(seed)
    out, position = [], 0
    while position < len(stream):
        size = rng.choice((1, 2, 3, 4, 5, 7, 64, 4096))
        out.append(stream[position: position + size])
        position += size
    return out


def check_request(frame: bytes) -> None:
    """decode_request on one frame, and what the server does with the outcome."""
    try:
        request = m.decode_request(frame)
    except m.RequestError as exc:
        if not isinstance(exc.code, ErrorCode) or not exc.message:
            raise InvariantError(f"RequestError without a code or message: {exc.code!r} {exc.message!r}") from exc
        # The connection answers exactly this; it must encode, or the server would crash instead.
        payload = m.encode_response(m.error_response(exc.request_id, exc.code, str(exc), exc.api))
        if exc.api is not None:  # and our client reads it as that API's response
            m.decode_response(payload, exc.api)
        return
    if type(request) is not m.REQUEST_TYPES[request.api]:
        raise InvariantError(f"decode_request returned {type(request).__name__} for api {request.api!r}")
    again = m.decode_request(m.encode_request(request))
    if again != request:
        raise InvariantError(f"request does not survive encode/decode: {request!r} != {again!r}")


def requests_target(data: bytes) -> None:
    if not data:
        return
    stream = data[1:]
    expected, too_large = _reference_frames(stream, FUZZ_MAX_FRAME_BYTES)
    decoder = FrameDecoder(FUZZ_MAX_FRAME_BYTES)
    frames: list[bytes] = []
    refused = False
    for chunk in _chunks(stream, data[0]):
        decoder.receive_data(chunk)
        try:
            while (frame := decoder.next_frame()) is not NEED_DATA:
                frames.append(frame)
        except FrameTooLargeError:
            refused = True
            break
    if frames != expected or refused != too_large:
        raise InvariantError(f"decoder framed {len(frames)} frames (refused={refused}), "
                             f"the length prefixes say {len(expected)} (too large={too_large})")
    if not refused and decoder.pending_bytes != len(stream) - sum(4 + len(f) for f in frames):
        raise InvariantError(f"pending_bytes {decoder.pending_bytes} does not match the unframed tail")
    for frame in frames:
        try:
            check_request(frame)
        except InvariantError:
            raise
        except RemoteProtocolError as exc:  # allowed to escape, but decode_request only raises RequestError
            if not isinstance(exc, m.RequestError):
                raise InvariantError(f"decode_request raised {type(exc).__name__}, not RequestError") from exc


# -- validator ---------------------------------------------------------------------------------

NOW_MS = 1_700_000_000_000

CONFIGS: tuple[LogConfig, ...] = (
    LogConfig(),
    LogConfig(cleanup_policy=("compact",)),
    LogConfig(message_timestamp_type="LogAppendTime"),
    LogConfig(compression_type="zstd"),
    LogConfig(compression_type="gzip"),
    LogConfig(compression_type="lz4"),
    LogConfig(compression_type="snappy"),
    LogConfig(compression_type="uncompressed"),
    LogConfig(cleanup_policy=("compact",), compression_type="zstd"),
    LogConfig(cleanup_policy=("compact", "delete"), message_timestamp_type="LogAppendTime"),
    LogConfig(max_message_bytes=600, segment_bytes=1024),
    LogConfig(message_timestamp_before_max_ms=3_600_000, message_timestamp_after_max_ms=3_600_000),
)
OFFSETS = (0, 7, 2**31 + 5, 2**50)
FIX_CRC, FIX_LENGTH = 0x80, 0x40

#: What validate_and_assign_offsets may raise: the storage errors a client can cause.
VALIDATOR_ERRORS = (CorruptRecordError, InvalidRecordError, InvalidTimestampError, RecordTooLargeError,
                    UnsupportedForMessageFormatError)


def validator_input(batch: bytes, config_index: int, *, offset_index: int = 0, fix_crc: bool = False,
                    fix_length: bool = False) -> bytes:
    """The target's input for ``batch`` (used to build the seed corpus)."""
    flags = (FIX_CRC if fix_crc else 0) | (FIX_LENGTH if fix_length else 0)
    return bytes([flags | config_index, offset_index]) + batch


def _repair(batch: bytes, fix_crc: bool, fix_length: bool) -> bytes:
    if len(batch) < HEADER_SIZE or not (fix_crc or fix_length):
        return batch
    out = bytearray(batch)
    if fix_length:
        struct.pack_into(">i", out, 8, len(out) - LOG_OVERHEAD)
    if fix_crc:
        struct.pack_into(">I", out, CRC_OFFSET, crc32c(memoryview(out)[CRC_START:]))
    return bytes(out)


def validator_target(data: bytes) -> None:
    if len(data) < 2:
        return
    flags = data[0]
    config = CONFIGS[(flags & 0x3F) % len(CONFIGS)]
    offset = OFFSETS[data[1] % len(OFFSETS)]
    batch = _repair(data[2:], bool(flags & FIX_CRC), bool(flags & FIX_LENGTH))
    try:
        result = validate_and_assign_offsets(batch, offset=offset, config=config, now_ms=NOW_MS)
    except VALIDATOR_ERRORS:
        return
    check_accepted(result, config, offset)


def check_accepted(result, config: LogConfig, offset: int) -> None:
    """What a consumer relies on for a batch the validator let into the log."""
    stored = b"".join(bytes(part) for part in result.records)
    if len(stored) != result.size:
        raise InvariantError(f"validator reported size {result.size}, its buffers hold {len(stored)} bytes", "size")
    try:
        batch = decode_batch(stored)
    except (CorruptRecordError, UnsupportedForMessageFormatError) as exc:
        raise InvariantError(f"accepted batch does not decode: {exc}", f"does not decode: {_shape(str(exc))}") from exc
    header = batch.header
    offsets = [r.offset for r in batch.records]
    problems = []
    if header.base_offset != offset or result.first_offset != offset:
        problems.append(("base offset", f"base offset {header.base_offset} / reported {result.first_offset}, "
                                        f"assigned {offset}"))
    if header.last_offset != result.last_offset:
        problems.append(("last offset", f"last offset {header.last_offset}, reported {result.last_offset}"))
    if len(batch.records) != result.record_count or header.records_count != result.record_count:
        problems.append(("count", f"{len(batch.records)} records, header count {header.records_count}, "
                                  f"reported {result.record_count}"))
    if offsets != list(range(offset, offset + len(offsets))) or (offsets and offsets[-1] != header.last_offset):
        problems.append(("offsets", f"record offsets {offsets[:5]}... are not contiguous from {offset} to "
                                    f"{header.last_offset}"))
    if header.timestamp_type == TimestampType.CREATE_TIME:
        newest = max((r.timestamp for r in batch.records), default=NO_TIMESTAMP)
        if header.max_timestamp != newest or result.max_timestamp != newest:
            problems.append(("max timestamp", f"max timestamp {header.max_timestamp} (reported "
                                              f"{result.max_timestamp}), newest record {newest}"))
        low, high = NOW_MS - config.message_timestamp_before_max_ms, NOW_MS + config.message_timestamp_after_max_ms
        outside = [r.timestamp for r in batch.records if r.timestamp != NO_TIMESTAMP and not low <= r.timestamp <= high]
        if outside:
            problems.append(("timestamp window", f"record timestamps {outside[:3]} outside [{low}, {high}]"))
    elif config.log_append_time and header.max_timestamp != NOW_MS:
        problems.append(("append time", f"LogAppendTime batch has max timestamp {header.max_timestamp}"))
    if config.compact and any(r.key is None for r in batch.records):
        problems.append(("keyless", "a record without a key in a compacted topic"))
    if header.is_control:
        problems.append(("control", "a control batch from a producer"))
    if problems:
        raise InvariantError("accepted batch is not what it claims: " + "; ".join(text for _, text in problems),
                             "accepted: " + ", ".join(tag for tag, _ in problems))


# -- kafka_requests ----------------------------------------------------------------------------

#: The partition cap the Kafka target bounds produce requests with (max.broker.partitions' default).
KAFKA_MAX_PARTITIONS = 10_000


def kafka_requests_target(data: bytes) -> None:
    """One Kafka request frame body through the Kafka listener's path without a socket: the bound
    walk, kio's reader, the API's translation into the broker's own request (or its direct
    answer, then encoded). Only the refusals the listener answers by closing may escape
    (MalformedRequest, its RequestTooLarge, UnsupportedVersion); a request the walk lets through
    must be one kio reads (the walk exists so that kio never sees a length it cannot hold)."""
    try:
        check_kafka(data, KAFKA_MAX_PARTITIONS, SERVED_VERSIONS)
    except (MalformedRequest, UnsupportedVersion):
        return
    try:
        request = decode_request(data, SERVED_VERSIONS)
    except (MalformedRequest, UnsupportedVersion):
        return
    answer = ADAPTERS[request.api_key].to_internal(request, KafkaContext(0, "localhost", 19092, "fuzz"))
    if type(answer) is Direct:
        encode_response(request.api_key, request.version, request.correlation_id, answer.body)


TARGETS = {"requests": requests_target, "validator": validator_target, "kafka_requests": kafka_requests_target}
