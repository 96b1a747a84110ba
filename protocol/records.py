"""Record-level codec for RecordBatch v2: what producers, consumers and the log cleaner need.

The broker's fetch path never comes here, and its produce path only walks the records without
building them (the validator's walk in record_codec.py). This module decodes and builds the records inside, for clients,
the cleaner and tools; decompression is bounded by compression.MAX_DECOMPRESSED_BYTES. The batch
header, CRC and compression are handled here; the per-record loops (varints, records in and out)
are the compiled core's record codec (record_codec.py), which this module calls.

Record layout (Kafka's DefaultRecord), repeated ``records_count`` times after the header, the
whole sequence compressed as one stream when the batch codec is not none::

    Record =>
      Length         varint   bytes after this field
      Attributes     int8     unused, written 0
      TimestampDelta varlong  timestamp - batch base_timestamp (negative when a delete horizon
                              is the base, or when timestamps are not monotonic)
      OffsetDelta    varint   offset - batch base_offset
      KeyLength      varint   -1 (any negative) = null key
      Key            bytes
      ValueLength    varint   -1 (any negative) = null value, a tombstone
      Value          bytes
      HeaderCount    varint   >= 0
      Headers        [HeaderKeyLength varint (>= 0), HeaderKey UTF-8,
                      HeaderValueLength varint (-1 = null), HeaderValue]

varint/varlong: zig-zag, then unsigned LEB128 (7 bits a byte, low group first, high bit =
more). At most 5 bytes for a varint and 10 for a varlong; a longer encoding is corrupt. As in
Java's ByteUtils, bits beyond 32 (64) in the last byte are dropped.

A record's effective timestamp is the batch's max_timestamp when the batch is LogAppendTime,
else base_timestamp + TimestampDelta. Control batches (attribute bit 5) hold one control record:
key = int16 version, int16 type; for COMMIT/ABORT markers value = int16 version, int32
coordinator epoch.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Literal, overload

from triolog import core

from .compression import compress, decompress
from .errors import CorruptRecordError, UnsupportedForMessageFormatError
from .record_batch import (
    BATCH_LENGTH_OFFSET,
    COMPRESSION_MASK,
    CONTROL_FLAG,
    CRC_OFFSET,
    CURRENT_MAGIC,
    DELETE_HORIZON_FLAG,
    HEADER,
    HEADER_PREFIX,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    MIN_BATCH_LENGTH,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_FLAG,
    BatchHeader,
    CompressionType,
    TimestampType,
    check_batch,
    compute_crc,
    fields_struct,
    read_header,
)

__all__ = [
    "END_TXN_MARKER_BATCH_SIZE",
    "ControlRecordType",
    "Record",
    "RecordBatch",
    "build_batch",
    "decode_batch",
    "decode_varint",
    "decode_varlong",
    "encode_batch",
    "encode_end_txn_marker",
    "encode_varint",
    "encode_varlong",
    "iter_batch_spans",
    "iter_batch_views",
    "iter_batches",
    "parse_control_record_key",
    "records_data",
    "parse_end_txn_marker_value",
]

INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1

_CRC = fields_struct("crc")
_BATCH_LENGTH = fields_struct("batch_length")

# ---------------------------------------------------------------------------------------------
# varint / varlong
# ---------------------------------------------------------------------------------------------

# The codec's per-record code (varints, the records section in and out) lives in the compiled
# core's one module, protocol/record_codec.py: compiled where it was built, else interpreted.
_codec = core.load("protocol.record_codec")

encode_varint = _codec.encode_varint
encode_varlong = _codec.encode_varlong
decode_varint = _codec.decode_varint
decode_varlong = _codec.decode_varlong
#: decode_varint/decode_varlong without the truncation check (a short buffer raises IndexError),
#: for loops that catch it once (the cleaner's walks).
_varint32 = _codec.read_varint32
_varint64 = _codec.read_varint64
#: Zig-zag value of a one-byte varint.
_ZIGZAG_ONE = _codec._ZIGZAG_ONE


# ---------------------------------------------------------------------------------------------
# Records and batches
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Record:
    """One record with its absolute offset and effective timestamp (ms)."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


@dataclass(slots=True)
class RecordBatch:
    """A decoded batch: the header as stored plus its records (offsets absolute)."""

    header: BatchHeader
    records: list[Record] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.records)

    def __iter__(self) -> Iterator[Record]:
        return iter(self.records)

    @property
    def base_offset(self) -> int:
        return self.header.base_offset

    @property
    def last_offset(self) -> int:
        return self.header.last_offset

    @property
    def next_offset(self) -> int:
        return self.header.next_offset

    @property
    def size(self) -> int:
        return self.header.size

    @property
    def compression(self) -> CompressionType:
        return self.header.compression

    @property
    def timestamp_type(self) -> TimestampType:
        return self.header.timestamp_type

    @property
    def max_timestamp(self) -> int:
        return self.header.max_timestamp

    @property
    def is_transactional(self) -> bool:
        return self.header.is_transactional

    @property
    def is_control(self) -> bool:
        return self.header.is_control

    @property
    def delete_horizon_ms(self) -> int | None:
        return self.header.delete_horizon_ms

    @property
    def producer_id(self) -> int:
        return self.header.producer_id

    @property
    def producer_epoch(self) -> int:
        return self.header.producer_epoch

    @property
    def base_sequence(self) -> int:
        return self.header.base_sequence

    @property
    def control_type(self) -> ControlRecordType | None:
        """The control record's type for a non-empty control batch, else None."""
        if not self.header.is_control or not self.records:
            return None
        return parse_control_record_key(self.records[0].key)[1]

    def sequence_of(self, record: Record) -> int:
        """The producer sequence of ``record``: base_sequence + offset delta, wrapping past 2^31-1."""
        if self.header.base_sequence < 0:
            return NO_SEQUENCE
        return (self.header.base_sequence + record.offset - self.header.base_offset) & 0x7FFFFFFF


# --- encode ----------------------------------------------------------------------------------


_varint_bytes = _codec.varint_bytes


def _encode_records(records: Sequence[Record], base_offset: int, base_timestamp: int) -> tuple[bytearray, int]:
    """Serialise records; returns (bytes, last offset delta). Offsets must strictly increase."""
    return _codec.encode_records(records, base_offset, base_timestamp)


def encode_batch(
    records: Sequence[Record],
    *,
    base_offset: int = 0,
    last_offset_delta: int | None = None,
    compression: CompressionType = CompressionType.NONE,
    compression_level: int | None = None,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    max_timestamp: int | None = None,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    is_transactional: bool = False,
    is_control: bool = False,
    delete_horizon_ms: int | None = None,
) -> bytes:
    """Build one v2 batch holding ``records`` at their own absolute offsets, with a valid CRC.

    Gaps between offsets are kept (the cleaner rewrites batches in place of the originals), and
    ``last_offset_delta`` may exceed the last record's so a rewritten batch keeps its offset span.
    base_timestamp is the first record's timestamp, or ``delete_horizon_ms`` (attribute bit 6)
    with every delta re-based on it. max_timestamp defaults to max(-1, record timestamps), as
    Kafka's builder starts from NO_TIMESTAMP. An empty batch is written the way Kafka writes an
    empty header: count 0, no record bytes, codec none, base_timestamp -1 (or the horizon).
    Arguments that cannot be represented raise ValueError.
    """
    compression = CompressionType(compression)
    timestamp_type = TimestampType(timestamp_type)
    body: bytes | bytearray  # the codec's buffer, or the compressed bytes
    if records:
        base_timestamp = records[0].timestamp if delete_horizon_ms is None else delete_horizon_ms
        body, last_delta = _encode_records(records, base_offset, base_timestamp)
        if max_timestamp is None:
            max_timestamp = max(NO_TIMESTAMP, max(record.timestamp for record in records))
        if compression is not CompressionType.NONE:
            body = compress(compression, bytes(body), compression_level)
    else:
        base_timestamp = NO_TIMESTAMP if delete_horizon_ms is None else delete_horizon_ms
        body, last_delta = b"", 0
        if max_timestamp is None:
            max_timestamp = NO_TIMESTAMP
        compression = CompressionType.NONE
    if last_offset_delta is None:
        last_offset_delta = last_delta
    elif not last_delta <= last_offset_delta <= INT32_MAX:
        raise ValueError(f"last_offset_delta {last_offset_delta} is below the last record's delta {last_delta}")

    attributes = compression | (timestamp_type << 3)
    if is_transactional:
        attributes |= TRANSACTIONAL_FLAG
    if is_control:
        attributes |= CONTROL_FLAG
    if delete_horizon_ms is not None:
        attributes |= DELETE_HORIZON_FLAG

    batch = bytearray(HEADER_SIZE + len(body))
    batch[HEADER_SIZE:] = body
    return _seal(
        batch,
        base_offset,
        partition_leader_epoch,
        attributes,
        last_offset_delta,
        base_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        len(records),
    )


def _seal(
    batch: bytearray,
    base_offset,
    partition_leader_epoch,
    attributes,
    last_offset_delta,
    base_timestamp,
    max_timestamp,
    producer_id,
    producer_epoch,
    base_sequence,
    count,
) -> bytes:
    """Write the header into ``batch``'s first HEADER_SIZE bytes (the records follow), then its CRC."""
    try:
        HEADER.pack_into(
            batch,
            0,
            base_offset,
            len(batch) - LOG_OVERHEAD,
            partition_leader_epoch,
            CURRENT_MAGIC,
            0,  # crc, filled in below once the bytes it covers are in place
            attributes,
            last_offset_delta,
            base_timestamp,
            max_timestamp,
            producer_id,
            producer_epoch,
            base_sequence,
            count,
        )
    except struct.error as exc:
        raise ValueError(f"record batch header field out of range: {exc}") from None
    _CRC.pack_into(batch, CRC_OFFSET, compute_crc(batch))
    return bytes(batch)


def build_batch(
    values: Iterable[tuple[bytes | None, bytes | None, int, Sequence[tuple[str, bytes | None]]]],
    *,
    compression: CompressionType = CompressionType.NONE,
    compression_level: int | None = None,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    is_transactional: bool = False,
    size_hint: int = 0,
) -> bytes:
    """A producer's batch from (key, value, timestamp, headers) tuples: offsets 0..n-1, base offset 0.

    The same bytes as encode_batch of the Record objects, built without them: the codec writes
    the records straight from the tuples after room for the header, in one buffer, allocated at
    ``size_hint`` bytes when given (the uncompressed batch's expected size; only a hint)."""
    records = values if type(values) is list else list(values)
    if not records:
        return encode_batch(
            (),
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            base_sequence=base_sequence,
            is_transactional=is_transactional,
        )
    compression = CompressionType(compression)
    batch, last_delta, max_timestamp = _codec.encode_producer_records(records, HEADER_SIZE, size_hint)
    if compression is not CompressionType.NONE:
        body = compress(compression, bytes(memoryview(batch)[HEADER_SIZE:]), compression_level)
        batch = bytearray(HEADER_SIZE + len(body))
        batch[HEADER_SIZE:] = body
    attributes: int = compression  # CREATE_TIME
    if is_transactional:
        attributes |= TRANSACTIONAL_FLAG
    return _seal(
        batch,
        0,
        NO_PARTITION_LEADER_EPOCH,
        attributes,
        last_delta,
        records[0][2],
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        len(records),
    )


# --- decode ----------------------------------------------------------------------------------


def _parse_records(data: bytes, header: BatchHeader) -> list[Record]:
    """Parse exactly ``records_count`` records filling ``data``; the hot loop of every consumer."""
    return _codec.decode_records(
        data,
        header.records_count,
        header.base_offset,
        header.base_timestamp,
        header.max_timestamp if header.attributes & TIMESTAMP_TYPE_MASK else None,
        Record,
    )


@overload
def records_data(buf, copy: Literal[True] = True) -> tuple[BatchHeader, bytes | None]: ...
@overload
def records_data(buf, copy: bool) -> tuple[BatchHeader, bytes | memoryview | None]: ...


def records_data(buf, copy: bool = True) -> tuple[BatchHeader, bytes | memoryview | None]:
    """One v2 batch's header and its records section, uncompressed (None when it declares no
    records), after the checks decode_batch makes: size, magic, CRC, codec id, record count.
    With ``copy=False`` an uncompressed section is a view of ``buf``, not a copy."""
    view = memoryview(buf)
    header = check_batch(view)
    codec = header.attributes & COMPRESSION_MASK
    if codec > CompressionType.ZSTD:
        raise CorruptRecordError(
            f"record batch at base offset {header.base_offset} has unknown compression codec id {codec}"
        )
    if header.records_count < 0:
        raise CorruptRecordError(
            f"record batch at base offset {header.base_offset} has a negative record count {header.records_count}"
        )
    if header.records_count == 0:
        return header, None
    payload = view[HEADER_SIZE:]
    if codec == CompressionType.NONE:
        return header, bytes(payload) if copy else payload
    return header, decompress(CompressionType(codec), payload)


def decode_batch(buf) -> RecordBatch:
    """Decode exactly one v2 batch: check size, magic and CRC, decompress, parse every record.

    Like Kafka, a batch declaring zero records is not decompressed or parsed at all.
    """
    header, data = records_data(buf)
    if data is None:
        return RecordBatch(header, [])
    try:
        records = _parse_records(data, header)
    except CorruptRecordError as exc:
        raise CorruptRecordError(f"record batch at base offset {header.base_offset}: {exc}") from None
    return RecordBatch(header, records)


def iter_batches(buf) -> Iterator[RecordBatch]:
    """Decode back-to-back batches as a fetch response carries them.

    A fetch may end in a partial batch (the broker cuts at max bytes): it is skipped silently.
    Legacy magic 0/1 raises UnsupportedForMessageFormatError (as split_batches does); anything
    else that is wrong raises CorruptRecordError.
    """
    for view in iter_batch_views(buf):
        yield decode_batch(view)


def iter_batch_views(buf) -> Iterator[memoryview]:
    """The whole batches of a fetch response, as views, framing checked (iter_batches' split,
    for readers that decode the records themselves: records_data, then the codec)."""
    view = memoryview(buf)
    for position, size in iter_batch_spans(view):
        yield view[position : position + size]


def iter_batch_spans(buf) -> Iterator[tuple[int, int]]:
    """(position, size) of each whole batch of a fetch response, framing checked."""
    view = memoryview(buf)
    total = len(view)
    position = 0
    while total - position >= LOG_OVERHEAD:
        (batch_length,) = _BATCH_LENGTH.unpack_from(view, position + BATCH_LENGTH_OFFSET)
        if total - position >= HEADER_PREFIX.size:
            magic = view[position + MAGIC_OFFSET]
            if magic in (0, 1):
                raise UnsupportedForMessageFormatError(
                    f"record batch at position {position} has legacy magic {magic}; only magic 2 is decoded"
                )
            if magic != CURRENT_MAGIC:
                raise CorruptRecordError(
                    f"record batch at position {position} has magic {magic}, expected {CURRENT_MAGIC}"
                )
        if batch_length < MIN_BATCH_LENGTH:
            raise CorruptRecordError(
                f"record batch at position {position} declares length {batch_length}, "
                f"below the minimum {MIN_BATCH_LENGTH}"
            )
        size = batch_length + LOG_OVERHEAD
        if position + size > total:
            return
        yield position, size
        position += size


# ---------------------------------------------------------------------------------------------
# Control records and transaction markers
# ---------------------------------------------------------------------------------------------


class ControlRecordType(enum.IntEnum):
    """The int16 type in a control record's key; unknown ids parse as UNKNOWN."""

    UNKNOWN = -1
    ABORT = 0
    COMMIT = 1
    LEADER_CHANGE = 2
    SNAPSHOT_HEADER = 3
    SNAPSHOT_FOOTER = 4
    KRAFT_VERSION = 5
    KRAFT_VOTERS = 6

    @classmethod
    def from_id(cls, type_id: int) -> ControlRecordType:
        try:
            return cls(type_id)
        except ValueError:
            return cls.UNKNOWN


CONTROL_RECORD_KEY = struct.Struct(">hh")  # version, type
END_TXN_MARKER_VALUE = struct.Struct(">hi")  # version, coordinator epoch
CONTROL_RECORD_KEY_VERSION = 0
END_TXN_MARKER_VERSION = 0
#: 61-byte header + one 17-byte record.
END_TXN_MARKER_BATCH_SIZE = 78


def parse_control_record_key(key: bytes | None) -> tuple[int, ControlRecordType]:
    """(version, type) of a control record key. Newer versions are read as version 0 is."""
    if key is None or len(key) < CONTROL_RECORD_KEY.size:
        raise CorruptRecordError(
            f"control record key must have at least {CONTROL_RECORD_KEY.size} bytes, "
            f"found {'a null key' if key is None else len(key)}"
        )
    version, type_id = CONTROL_RECORD_KEY.unpack_from(key)
    if version < 0:
        raise CorruptRecordError(f"invalid version {version} found for control record; may indicate data corruption")
    return version, ControlRecordType.from_id(type_id)


def parse_end_txn_marker_value(value: bytes | None) -> int:
    """The coordinator epoch stored in a COMMIT/ABORT marker's value."""
    if value is None or len(value) < END_TXN_MARKER_VALUE.size:
        raise CorruptRecordError(
            f"end transaction marker value must have at least {END_TXN_MARKER_VALUE.size} bytes, "
            f"found {'a null value' if value is None else len(value)}"
        )
    version, coordinator_epoch = END_TXN_MARKER_VALUE.unpack_from(value)
    if version < 0:
        raise CorruptRecordError(
            f"invalid version {version} found for end transaction marker; may indicate data corruption"
        )
    return coordinator_epoch


def encode_end_txn_marker(
    producer_id: int,
    producer_epoch: int,
    marker_type: ControlRecordType,
    coordinator_epoch: int,
    offset: int,
    timestamp: int,
    *,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
) -> bytes:
    """Kafka's 78-byte COMMIT/ABORT control batch (transactional, uncompressed, CreateTime)."""
    marker_type = ControlRecordType(marker_type)
    if marker_type not in (ControlRecordType.COMMIT, ControlRecordType.ABORT):
        raise ValueError(f"an end transaction marker is COMMIT or ABORT, not {marker_type.name}")
    record = Record(
        offset,
        timestamp,
        CONTROL_RECORD_KEY.pack(CONTROL_RECORD_KEY_VERSION, marker_type),
        END_TXN_MARKER_VALUE.pack(END_TXN_MARKER_VERSION, coordinator_epoch),
    )
    return encode_batch(
        [record],
        base_offset=offset,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        partition_leader_epoch=partition_leader_epoch,
        is_transactional=True,
        is_control=True,
    )


def first_record_at_or_after(buf, timestamp: int, min_offset: int) -> tuple[int, int] | None:
    """(timestamp, offset) of the first record of one batch with timestamp >= ``timestamp`` and
    offset >= ``min_offset``, or None.

    Lookups by time need only these two fields of each record, so keys, values and headers are
    skipped by their lengths instead of decoded (~20x cheaper than decode_batch). The batch is
    one the broker already validated on append, so its CRC is not checked again (Kafka's
    lookups do not either); structural damage still raises CorruptRecordError.
    """
    view = memoryview(buf)
    header = read_header(view)
    codec = header.attributes & COMPRESSION_MASK
    if codec > CompressionType.ZSTD:
        raise CorruptRecordError(
            f"record batch at base offset {header.base_offset} has unknown compression codec id {codec}"
        )
    if header.records_count <= 0:
        return None
    payload = view[HEADER_SIZE : header.batch_length + LOG_OVERHEAD]
    data = payload if codec == CompressionType.NONE else decompress(CompressionType(codec), payload)
    base_offset = header.base_offset
    if header.attributes & TIMESTAMP_TYPE_MASK:  # LogAppendTime: every record has the batch's time
        if header.max_timestamp < timestamp:
            return None
        fixed_timestamp = header.max_timestamp
    else:
        fixed_timestamp = None
    try:
        return _codec.first_at_or_after(
            data, header.records_count, base_offset, header.base_timestamp, fixed_timestamp, timestamp, min_offset
        )
    except IndexError:
        raise CorruptRecordError(
            f"record batch at base offset {base_offset}: premature EOF while reading record timestamps"
        ) from None
