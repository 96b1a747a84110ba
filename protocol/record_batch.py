"""RecordBatch v2 header: the 61 bytes the broker reads, checks and rewrites without touching records.

Byte layout (big-endian), Kafka's DefaultRecordBatch::

    off size field
      0   8  base_offset              first offset of the batch (clients send 0)
      8   4  batch_length             bytes after this field: total size - 12
     12   4  partition_leader_epoch   not covered by the CRC
     16   1  magic                    2
     17   4  crc                      CRC-32C (Castagnoli) of bytes [21, end)
     21   2  attributes               bits 0-2 codec, 3 timestamp type, 4 transactional,
                                      5 control, 6 delete horizon set
     23   4  last_offset_delta
     27   8  base_timestamp           or the delete horizon when attribute bit 6 is set
     35   8  max_timestamp
     43   8  producer_id
     51   2  producer_epoch
     53   4  base_sequence
     57   4  records_count
     61   .. records (compressed as one stream when the codec is not none)

Offsets 0..16 are common to every magic, so a reader reads 17 bytes and dispatches on magic.
The broker's produce and fetch paths only ever look at this header: records stay opaque bytes.
"""

from __future__ import annotations

import enum
import struct
from typing import NamedTuple

from crc32c import crc32c

from .errors import CorruptRecordError, UnsupportedForMessageFormatError

HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = HEADER.size  # 61
assert HEADER_SIZE == 61

#: base_offset + batch_length: the part of every batch not counted by batch_length.
LOG_OVERHEAD = 12
#: Bytes common to all magics: enough to know a batch's size, last offset field and magic.
MAGIC_OFFSET = 16
HEADER_PREFIX = struct.Struct(">qiib")  # base_offset, batch_length, leader_epoch, magic
assert HEADER_PREFIX.size == 17

BASE_OFFSET_OFFSET = 0
BATCH_LENGTH_OFFSET = 8
PARTITION_LEADER_EPOCH_OFFSET = 12
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
LAST_OFFSET_DELTA_OFFSET = 23
BASE_TIMESTAMP_OFFSET = 27
MAX_TIMESTAMP_OFFSET = 35
RECORDS_COUNT_OFFSET = 57
#: The CRC covers everything from the attributes to the end of the batch.
CRC_START = ATTRIBUTES_OFFSET

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


class BatchHeader(NamedTuple):
    """The decoded 61-byte header; ``size`` and ``last_offset`` are what the log needs most."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

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
