"""Validation and offset assignment of a producer's batch (Kafka's LogValidator, leader path).

The common case touches only the 61-byte header: the CRC is checked in C, the base offset and
leader epoch (outside the CRC) are overwritten, and for LogAppendTime topics the timestamp
type and max timestamp are set and the CRC recomputed. Records are decoded only when Kafka
must decode them too: keys of compacted topics, and a topic codec that differs from the
producer's (recompression).

Records are never parsed on the common path, so a batch whose CRC is valid but whose record
bytes contradict its header (a record count that does not match, a codec bit on uncompressed
bytes) is stored as sent, where Kafka's leader would reject it. Only a client that computes a
CRC over malformed records can do this; walking every record to catch it would cost ~40 us per
16 KiB batch (measured), more than the whole append.

Timestamps of CreateTime batches are checked at batch granularity: the batch's base and max
timestamps must lie in [now - before.max.ms, now + after.max.ms]. Producers write records in
timestamp order, so these bound every record; a batch whose inner timestamps run backwards
is checked by its first and newest record only.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from crc32c import crc32c

from config.log_config import LogConfig
from protocol.record_batch import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_MASK,
    CONTROL_FLAG,
    CRC_OFFSET,
    DELETE_HORIZON_FLAG,
    CRC_START,
    CURRENT_MAGIC,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAX_TIMESTAMP_OFFSET,
    NO_TIMESTAMP,
    TIMESTAMP_TYPE_MASK,
    BatchHeader,
    CompressionType,
    TimestampType,
    compute_crc,
    read_header,
    split_batches,
)

from .errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    RecordTooLargeError,
)

_INT64 = struct.Struct(">q")
_OFFSET_LENGTH_EPOCH = struct.Struct(">qii")
_UINT32 = struct.Struct(">I")
_INT16 = struct.Struct(">h")

_TOPIC_CODECS = {
    "uncompressed": CompressionType.NONE,
    "gzip": CompressionType.GZIP,
    "snappy": CompressionType.SNAPPY,
    "lz4": CompressionType.LZ4,
    "zstd": CompressionType.ZSTD,
}


class ValidatedBatch(NamedTuple):
    """A batch ready to append: its bytes with offsets assigned, and what the indexes need.

    ``records`` is a list of buffers written with one pwritev: on the common path a patched
    copy of the 61-byte header followed by a view of the producer's record bytes, so the
    payload is never copied in Python.
    """

    records: list
    size: int
    first_offset: int
    last_offset: int
    max_timestamp: int
    shallow_offset_of_max_timestamp: int
    log_append_time_ms: int  # -1 unless the topic uses LogAppendTime
    record_count: int


def target_codec(config: LogConfig, source: int) -> int:
    return source if config.compression_type == "producer" else _TOPIC_CODECS[config.compression_type]


def validate_and_assign_offsets(
    records, *, offset: int, config: LogConfig, now_ms: int, leader_epoch: int = -1
) -> ValidatedBatch:
    """Check one producer batch against Kafka's leader-side rules and give it offsets from ``offset``.

    Checks run in Kafka's order (framing and magic, one batch, base offset, offset delta vs
    count, control flag, producer fields, size, CRC, timestamps). Raises CorruptRecordError,
    InvalidRecordError, RecordTooLargeError, InvalidTimestampError or
    UnsupportedForMessageFormatError; nothing is written on error.
    """
    size = len(records)
    if size < HEADER_SIZE:
        _raise_framing_error(records)
    (base_offset, batch_length, _, magic, crc, attributes, last_offset_delta, base_timestamp,
     max_timestamp, producer_id, _, base_sequence, count) = HEADER.unpack_from(records, 0)
    if magic != CURRENT_MAGIC or batch_length + LOG_OVERHEAD != size:
        _raise_framing_error(records)
    if base_offset != 0 or last_offset_delta + 1 != count or count <= 0 or attributes & CONTROL_FLAG \
            or (producer_id >= 0 and base_sequence < 0) or attributes & COMPRESSION_MASK > CompressionType.ZSTD:
        _check_header(read_header(records))
    if size > config.max_message_bytes or size > config.segment_bytes:
        _check_size(size, config)
    view = memoryview(records)
    if crc32c(view[CRC_START:]) != crc:
        raise CorruptRecordError(
            f"record batch is corrupt (stored crc = {crc}, computed crc = {crc32c(view[CRC_START:])})"
        )
    if attributes & TIMESTAMP_TYPE_MASK:
        raise InvalidTimestampError("a producer may not set the LogAppendTime timestamp type")
    if max_timestamp < base_timestamp and not attributes & DELETE_HORIZON_FLAG:
        raise InvalidTimestampError(
            f"record batch claims max timestamp {max_timestamp} below its first record's timestamp {base_timestamp}"
        )
    log_append_time = config.log_append_time
    if not log_append_time and (
        max_timestamp > now_ms + config.message_timestamp_after_max_ms
        or (base_timestamp < now_ms - config.message_timestamp_before_max_ms and base_timestamp != NO_TIMESTAMP)
        or (max_timestamp < now_ms - config.message_timestamp_before_max_ms and max_timestamp != NO_TIMESTAMP)
        or base_timestamp > now_ms + config.message_timestamp_after_max_ms
    ):
        _check_timestamps((base_timestamp, max_timestamp), config, now_ms)
    codec = attributes & COMPRESSION_MASK
    if config.compression_type != "producer" or config.compact:
        target = target_codec(config, codec)
        if target != codec or config.compact:
            return _rebuild_or_check_keys(records, read_header(records), target, offset=offset, config=config,
                                          now_ms=now_ms, leader_epoch=leader_epoch)

    # The in-place path: patch a copy of the header, keep the records as they are.
    head = bytearray(view[:HEADER_SIZE])
    _OFFSET_LENGTH_EPOCH.pack_into(head, 0, offset, batch_length, leader_epoch)
    last_offset = offset + last_offset_delta
    if log_append_time:
        _INT16.pack_into(head, ATTRIBUTES_OFFSET, attributes | TIMESTAMP_TYPE_MASK)
        _INT64.pack_into(head, MAX_TIMESTAMP_OFFSET, now_ms)
        body = view[HEADER_SIZE:]
        _UINT32.pack_into(head, CRC_OFFSET, crc32c(body, crc32c(memoryview(head)[CRC_START:])))
        return ValidatedBatch([head, body], size, offset, last_offset, now_ms, last_offset, now_ms, count)
    return ValidatedBatch([head, view[HEADER_SIZE:]], size, offset, last_offset, max_timestamp, last_offset, -1,
                          count)


def _raise_framing_error(records) -> None:
    """The slow path for anything but exactly one well-framed v2 batch: name what is wrong."""
    batches = split_batches(records)  # raises for truncation, legacy or unknown magic, bad lengths
    if not batches:
        raise InvalidRecordError("produce request holds no record batch")
    raise InvalidRecordError(
        f"produce request holds {len(batches)} record batches for one partition; magic 2 allows exactly one"
    )


def _check_header(header: BatchHeader) -> None:
    """Name the first header rule the batch breaks (only called when one is broken)."""
    if header.base_offset != 0:
        raise InvalidRecordError(f"record batch has base offset {header.base_offset}; producers must send 0")
    if header.last_offset_delta + 1 != header.records_count:
        raise InvalidRecordError(
            f"record batch has last offset delta {header.last_offset_delta} but {header.records_count} records"
        )
    if header.records_count <= 0:
        raise InvalidRecordError("record batch holds no records")
    if header.is_control:
        raise InvalidRecordError("producers may not send control batches")
    if header.producer_id >= 0 and header.base_sequence < 0:
        raise InvalidRecordError(f"idempotent batch from producer {header.producer_id} has no base sequence")
    raise CorruptRecordError(f"record batch uses unknown compression codec id {header.attributes & COMPRESSION_MASK}")


def _check_size(size: int, config: LogConfig) -> None:
    if size > config.max_message_bytes:
        raise RecordTooLargeError(
            f"record batch of {size} bytes exceeds max.message.bytes ({config.max_message_bytes})"
        )
    raise RecordTooLargeError(f"record batch of {size} bytes is larger than segment.bytes ({config.segment_bytes})")


def _check_timestamps(timestamps: tuple[int, int], config: LogConfig, now_ms: int) -> None:
    for ts in timestamps:
        if ts == NO_TIMESTAMP:
            continue
        if ts < now_ms - config.message_timestamp_before_max_ms:
            raise InvalidTimestampError(
                f"timestamp {ts} of a record is more than message.timestamp.before.max.ms "
                f"({config.message_timestamp_before_max_ms}) before the broker's time {now_ms}"
            )
        if ts > now_ms + config.message_timestamp_after_max_ms:
            raise InvalidTimestampError(
                f"timestamp {ts} of a record is more than message.timestamp.after.max.ms "
                f"({config.message_timestamp_after_max_ms}) after the broker's time {now_ms}"
            )


def _rebuild_or_check_keys(records, header: BatchHeader, codec: CompressionType, *, offset: int,
                           config: LogConfig, now_ms: int, leader_epoch: int) -> ValidatedBatch:
    """The decoding path: keys of compacted topics must be present; a topic codec forces a rebuild."""
    from protocol.records import Record, decode_batch, encode_batch

    batch = decode_batch(records)
    if config.compact:
        for record in batch.records:
            if record.key is None:
                raise InvalidRecordError(
                    f"compacted topic cannot accept a record without a key (offset delta {record.offset})"
                )
    if codec == header.attributes & COMPRESSION_MASK:
        return _assign_in_place(records, header, offset=offset, config=config, now_ms=now_ms, leader_epoch=leader_epoch)
    level = {
        CompressionType.GZIP: config.compression_gzip_level if config.compression_gzip_level >= 0 else None,
        CompressionType.LZ4: config.compression_lz4_level,
        CompressionType.ZSTD: config.compression_zstd_level,
    }.get(codec)
    codec = CompressionType(codec)
    rebased = [
        Record(offset + r.offset - header.base_offset, r.timestamp, r.key, r.value, r.headers) for r in batch.records
    ]
    append_time = config.log_append_time
    built = encode_batch(
        rebased,
        base_offset=offset,
        compression=codec,
        compression_level=level,
        timestamp_type=TimestampType.LOG_APPEND_TIME if append_time else TimestampType.CREATE_TIME,
        max_timestamp=now_ms if append_time else None,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        partition_leader_epoch=leader_epoch,
        is_transactional=header.is_transactional,
    )
    if len(built) > config.max_message_bytes:
        raise RecordTooLargeError(
            f"record batch recompressed to {len(built)} bytes exceeds max.message.bytes ({config.max_message_bytes})"
        )
    last_offset = offset + header.last_offset_delta
    max_ts = now_ms if append_time else max((r.timestamp for r in batch.records), default=NO_TIMESTAMP)
    return ValidatedBatch([built], len(built), offset, last_offset, max_ts, last_offset, now_ms if append_time else -1,
                          header.records_count)


def _assign_in_place(records, header: BatchHeader, *, offset: int, config: LogConfig, now_ms: int,
                     leader_epoch: int) -> ValidatedBatch:
    """Offsets for a batch whose records were decoded only to check them (compacted topics)."""
    buf = bytearray(records)
    _OFFSET_LENGTH_EPOCH.pack_into(buf, 0, offset, header.batch_length, leader_epoch)
    last_offset = offset + header.last_offset_delta
    if config.log_append_time:
        _INT16.pack_into(buf, ATTRIBUTES_OFFSET, header.attributes | TIMESTAMP_TYPE_MASK)
        _INT64.pack_into(buf, MAX_TIMESTAMP_OFFSET, now_ms)
        _UINT32.pack_into(buf, CRC_OFFSET, compute_crc(buf))
        return ValidatedBatch([buf], len(buf), offset, last_offset, now_ms, last_offset, now_ms, header.records_count)
    return ValidatedBatch([buf], len(buf), offset, last_offset, header.max_timestamp, last_offset, -1,
                          header.records_count)
