"""Validation and offset assignment of a producer's batch (Kafka's LogValidator, leader path).

The common case touches only the 61-byte header: the CRC is checked in C, the base offset and
leader epoch (outside the CRC) are overwritten, and for LogAppendTime topics the timestamp
type and max timestamp are set and the CRC recomputed. Records are decoded only when Kafka
must decode them too: keys of compacted topics, and a topic codec that differs from the
producer's (recompression).

Timestamps of CreateTime batches are checked at batch granularity: the batch's base and max
timestamps must lie in [now - before.max.ms, now + after.max.ms]. Producers write records in
timestamp order, so these bound every record; a batch whose inner timestamps run backwards
is checked by its first and newest record only.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from config.log_config import LogConfig
from protocol.record_batch import (
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    MAX_TIMESTAMP_OFFSET,
    NO_TIMESTAMP,
    PARTITION_LEADER_EPOCH_OFFSET,
    TIMESTAMP_TYPE_MASK,
    BatchHeader,
    CompressionType,
    TimestampType,
    check_batch,
    compute_crc,
    split_batches,
)

from .errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    RecordTooLargeError,
)

_INT64 = struct.Struct(">q")
_INT32 = struct.Struct(">i")
_UINT32 = struct.Struct(">I")
_INT16 = struct.Struct(">h")

_TOPIC_CODECS = {
    "uncompressed": CompressionType.NONE,
    "gzip": CompressionType.GZIP,
    "snappy": CompressionType.SNAPPY,
    "lz4": CompressionType.LZ4,
    "zstd": CompressionType.ZSTD,
}


@dataclass(frozen=True)
class ValidatedBatch:
    """A batch ready to append: its bytes with offsets assigned, and what the indexes need."""

    records: bytes
    first_offset: int
    last_offset: int
    max_timestamp: int
    shallow_offset_of_max_timestamp: int
    log_append_time_ms: int  # -1 unless the topic uses LogAppendTime
    record_count: int

    @property
    def size(self) -> int:
        return len(self.records)


def target_codec(config: LogConfig, source: CompressionType) -> CompressionType:
    return source if config.compression_type == "producer" else _TOPIC_CODECS[config.compression_type]


def validate_and_assign_offsets(
    records, *, offset: int, config: LogConfig, now_ms: int, leader_epoch: int = -1
) -> ValidatedBatch:
    """Check one producer batch against Kafka's leader-side rules and give it offsets from ``offset``.

    Raises CorruptRecordError, InvalidRecordError, RecordTooLargeError or InvalidTimestampError
    (UnsupportedForMessageFormatError for legacy magic); nothing is written on error.
    """
    batches = split_batches(records)
    if not batches:
        raise InvalidRecordError("produce request holds no record batch")
    if len(batches) != 1:
        raise InvalidRecordError(
            f"produce request holds {len(batches)} record batches for one partition; magic 2 allows exactly one"
        )
    _, header = batches[0]
    _check_header(header, config)
    check_batch(records, header)
    if header.records_count <= 0:
        raise InvalidRecordError("record batch holds no records")
    if header.timestamp_type is TimestampType.LOG_APPEND_TIME:
        raise InvalidTimestampError("a producer may not set the LogAppendTime timestamp type")
    if not config.log_append_time:
        _check_timestamps(header, config, now_ms)

    codec = target_codec(config, header.compression)
    if codec != header.compression or config.compact:
        return _rebuild_or_check_keys(records, header, codec, offset=offset, config=config, now_ms=now_ms,
                                      leader_epoch=leader_epoch)
    return _assign_in_place(records, header, offset=offset, config=config, now_ms=now_ms, leader_epoch=leader_epoch)


def _check_header(header: BatchHeader, config: LogConfig) -> None:
    if header.base_offset != 0:
        raise InvalidRecordError(f"record batch has base offset {header.base_offset}; producers must send 0")
    if header.last_offset_delta + 1 != header.records_count:
        raise InvalidRecordError(
            f"record batch has last offset delta {header.last_offset_delta} but {header.records_count} records"
        )
    if header.is_control:
        raise InvalidRecordError("producers may not send control batches")
    if header.producer_id >= 0 and header.base_sequence < 0:
        raise InvalidRecordError(
            f"idempotent batch from producer {header.producer_id} has no base sequence"
        )
    if header.attributes & 0x07 > 4:
        raise CorruptRecordError(f"record batch uses unknown compression codec id {header.attributes & 0x07}")
    if header.size > config.max_message_bytes:
        raise RecordTooLargeError(
            f"record batch of {header.size} bytes exceeds max.message.bytes ({config.max_message_bytes})"
        )
    if header.size > config.segment_bytes:
        raise RecordTooLargeError(
            f"record batch of {header.size} bytes is larger than segment.bytes ({config.segment_bytes})"
        )


def _check_timestamps(header: BatchHeader, config: LogConfig, now_ms: int) -> None:
    for ts in (header.base_timestamp, header.max_timestamp):
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


def _assign_in_place(records, header: BatchHeader, *, offset: int, config: LogConfig, now_ms: int,
                     leader_epoch: int) -> ValidatedBatch:
    buf = bytearray(records)
    _INT64.pack_into(buf, 0, offset)
    _INT32.pack_into(buf, PARTITION_LEADER_EPOCH_OFFSET, leader_epoch)
    last_offset = offset + header.last_offset_delta
    if config.log_append_time:
        _INT16.pack_into(buf, ATTRIBUTES_OFFSET, header.attributes | TIMESTAMP_TYPE_MASK)
        _INT64.pack_into(buf, MAX_TIMESTAMP_OFFSET, now_ms)
        _UINT32.pack_into(buf, CRC_OFFSET, compute_crc(buf))
        return ValidatedBatch(bytes(buf), offset, last_offset, now_ms, last_offset, now_ms, header.records_count)
    return ValidatedBatch(bytes(buf), offset, last_offset, header.max_timestamp, last_offset, -1, header.records_count)


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
    if codec == header.compression:
        return _assign_in_place(records, header, offset=offset, config=config, now_ms=now_ms, leader_epoch=leader_epoch)
    level = {
        CompressionType.GZIP: config.compression_gzip_level if config.compression_gzip_level >= 0 else None,
        CompressionType.LZ4: config.compression_lz4_level,
        CompressionType.ZSTD: config.compression_zstd_level,
    }.get(codec)
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
    return ValidatedBatch(built, offset, last_offset, max_ts, last_offset, now_ms if append_time else -1,
                          header.records_count)
