"""RecordBatch v2 header: the 61 bytes the broker reads, checks and rewrites without touching records.

The layout is Kafka's DefaultRecordBatch, big-endian, written once below (``_LAYOUT``: one field a
line); ``HEADER`` and every ``*_OFFSET`` are derived from it, and every other module that reads or
patches a header field imports them from here. Offsets 0..16 are common to every magic, so a reader
reads 17 bytes and dispatches on magic. The broker's produce and fetch paths only ever look at this
header: records stay opaque bytes (61.., compressed as one stream when the codec is not none).
"""

from __future__ import annotations

import enum
import struct
import typing
from typing import Annotated, NamedTuple

from crc32c import crc32c

from .errors import CorruptRecordError, UnsupportedForMessageFormatError


class _HeaderFields(NamedTuple):
    """RecordBatch v2's header fields in order, each with its struct code (as kafka-python's
    HEADER_STRUCT); :class:`BatchHeader` is this tuple with what the log asks of it."""

    base_offset: Annotated[int, "q"]  # first offset of the batch (clients send 0)
    batch_length: Annotated[int, "i"]  # bytes after this field: total size - 12
    partition_leader_epoch: Annotated[int, "i"]  # not covered by the CRC
    magic: Annotated[int, "b"]  # 2
    crc: Annotated[int, "I"]  # CRC-32C (Castagnoli) of bytes [attributes, end)
    attributes: Annotated[int, "h"]  # bits 0-2 codec, 3 timestamp type, 4 transactional,
    # 5 control, 6 delete horizon set
    last_offset_delta: Annotated[int, "i"]  # records_count - 1 for a producer's batch
    base_timestamp: Annotated[int, "q"]  # or the delete horizon when attribute bit 6 is set
    max_timestamp: Annotated[int, "q"]
    producer_id: Annotated[int, "q"]  # -1: not idempotent
    producer_epoch: Annotated[int, "h"]
    base_sequence: Annotated[int, "i"]
    records_count: Annotated[int, "i"]


#: (name, struct code) of each header field, in order.
_LAYOUT = tuple(
    (name, typing.get_args(hint)[1]) for name, hint in typing.get_type_hints(_HeaderFields, include_extras=True).items()
)
_NAMES = _HeaderFields._fields


def _format(first: str, last: str) -> str:
    return ">" + "".join(code for _, code in _LAYOUT[_NAMES.index(first) : _NAMES.index(last) + 1])


def offset_of(field: str) -> int:
    """The byte offset of a header field (``producer_id`` -> 43)."""
    return struct.calcsize(_format(_NAMES[0], field)) - struct.calcsize(_format(field, field))


def fields_struct(first: str, last: str | None = None) -> struct.Struct:
    """A struct of the consecutive header fields ``first``..``last`` (``first`` alone if None), to
    read or patch them at ``offset_of(first)``; build it once, at module level."""
    return struct.Struct(_format(first, last or first))


HEADER = struct.Struct(_format(_NAMES[0], _NAMES[-1]))
HEADER_SIZE = HEADER.size  # 61
assert HEADER_SIZE == 61

BASE_OFFSET_OFFSET = offset_of("base_offset")  # 0
BATCH_LENGTH_OFFSET = offset_of("batch_length")  # 8
PARTITION_LEADER_EPOCH_OFFSET = offset_of("partition_leader_epoch")  # 12
MAGIC_OFFSET = offset_of("magic")  # 16
CRC_OFFSET = offset_of("crc")  # 17
ATTRIBUTES_OFFSET = offset_of("attributes")  # 21
LAST_OFFSET_DELTA_OFFSET = offset_of("last_offset_delta")  # 23
BASE_TIMESTAMP_OFFSET = offset_of("base_timestamp")  # 27
MAX_TIMESTAMP_OFFSET = offset_of("max_timestamp")  # 35
PRODUCER_ID_OFFSET = offset_of("producer_id")  # 43
PRODUCER_EPOCH_OFFSET = offset_of("producer_epoch")  # 51
BASE_SEQUENCE_OFFSET = offset_of("base_sequence")  # 53
RECORDS_COUNT_OFFSET = offset_of("records_count")  # 57
#: The CRC covers everything from the attributes to the end of the batch.
CRC_START = ATTRIBUTES_OFFSET

#: base_offset + batch_length: the part of every batch not counted by batch_length.
LOG_OVERHEAD = PARTITION_LEADER_EPOCH_OFFSET
#: Bytes common to all magics: enough to know a batch's size, last offset field and magic.
HEADER_PREFIX = fields_struct("base_offset", "magic")  # base_offset, batch_length, leader_epoch, magic
assert HEADER_PREFIX.size == 17
#: producer_id, producer_epoch, base_sequence (at PRODUCER_ID_OFFSET): what idempotence reads.
PRODUCER_FIELDS = fields_struct("producer_id", "base_sequence")

#: The smallest legal batch_length for v2: an empty batch.
MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD  # 49
#: Kafka's file iterator refuses a size field below the v0 record overhead.
MIN_LEGACY_SIZE = 14

CURRENT_MAGIC = 2

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_FLAG = 0x10
CONTROL_FLAG = 0x20
DELETE_HORIZON_FLAG = 0x40

NO_TIMESTAMP = -1
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1


class CompressionType(enum.IntEnum):
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @property
    def kafka_name(self) -> str:
        return self.name.lower()


class TimestampType(enum.IntEnum):
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1

    @property
    def kafka_name(self) -> str:
        return "CreateTime" if self is TimestampType.CREATE_TIME else "LogAppendTime"


class BatchHeader(_HeaderFields):
    """The decoded 61-byte header (a field per ``_HeaderFields`` entry, ints); ``size`` and
    ``last_offset`` are what the log needs most."""

    __slots__ = ()

    @property
    def size(self) -> int:
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> CompressionType:
        return CompressionType(self.attributes & COMPRESSION_MASK)

    @property
    def timestamp_type(self) -> TimestampType:
        return TimestampType((self.attributes & TIMESTAMP_TYPE_MASK) >> 3)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_FLAG)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_FLAG)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.attributes & DELETE_HORIZON_FLAG)

    @property
    def delete_horizon_ms(self) -> int | None:
        return self.base_timestamp if self.has_delete_horizon else None

    @property
    def last_sequence(self) -> int:
        if self.base_sequence < 0:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) & 0x7FFFFFFF


def read_header(buf, position: int = 0) -> BatchHeader:
    """Decode the v2 header at ``position``; the caller has checked the magic and length."""
    return BatchHeader._make(HEADER.unpack_from(buf, position))


def compute_crc(batch) -> int:
    """CRC-32C of a whole batch's checksummed range (bytes 21..end)."""
    return crc32c(memoryview(batch)[CRC_START:])


def check_batch(batch, header: BatchHeader | None = None) -> BatchHeader:
    """Validate one complete v2 batch's framing and CRC without decoding records.

    ``batch`` must hold exactly one batch. Raises CorruptRecordError naming what is wrong.
    """
    if len(batch) < HEADER_SIZE:
        raise CorruptRecordError(f"record batch of {len(batch)} bytes is shorter than the {HEADER_SIZE}-byte header")
    if header is None:
        header = read_header(batch)
    if header.magic != CURRENT_MAGIC:
        raise CorruptRecordError(f"record batch has magic {header.magic}, expected {CURRENT_MAGIC}")
    if header.size != len(batch):
        raise CorruptRecordError(f"record batch declares {header.size} bytes but {len(batch)} are present")
    actual = compute_crc(batch)
    if actual != header.crc:
        raise CorruptRecordError(
            f"record batch at base offset {header.base_offset} is corrupt "
            f"(stored crc = {header.crc}, computed crc = {actual})"
        )
    return header


def split_batches(buf) -> list[tuple[int, BatchHeader]]:
    """Frame a buffer of back-to-back batches into (position, header) pairs, checking sizes and magic.

    Used on the produce path: it reads only the headers. Raises CorruptRecordError for a
    truncated or malformed buffer.
    """
    view = memoryview(buf)
    total = len(view)
    out: list[tuple[int, BatchHeader]] = []
    position = 0
    while position < total:
        if total - position < HEADER_PREFIX.size:
            raise CorruptRecordError(f"{total - position} trailing bytes at position {position} are not a record batch")
        _, batch_length, _, magic = HEADER_PREFIX.unpack_from(view, position)
        if magic in (0, 1):
            raise UnsupportedForMessageFormatError(
                f"record batch at position {position} has legacy magic {magic}; triolog stores only magic 2"
            )
        if magic != CURRENT_MAGIC:
            raise CorruptRecordError(f"record batch at position {position} has magic {magic}, expected {CURRENT_MAGIC}")
        if batch_length < MIN_BATCH_LENGTH:
            raise CorruptRecordError(
                f"record batch at position {position} declares length {batch_length}, below the minimum {MIN_BATCH_LENGTH}"
            )
        size = batch_length + LOG_OVERHEAD
        if position + size > total:
            raise CorruptRecordError(
                f"record batch at position {position} declares {size} bytes but only {total - position} remain"
            )
        out.append((position, read_header(view, position)))
        position += size
    return out
