"""Validation and offset assignment of a producer's batch (Kafka's LogValidator, leader path).

Every batch is read to its last record before it is stored, as Kafka's leader reads it: the
header rules and the CRC first (in C), then one walk over every record (protocol.record_codec)
that checks the record count against the records present, each length prefix, varint and
key/value/header length, every record's timestamp against message.timestamp.before/after.max.ms
and, for compacted topics, that every record has a key. The walk also yields the batch's max
timestamp, which the broker writes into the header itself instead of trusting the producer's
(recomputing the CRC only when the value changes), so time lookups and retention see the truth.

Compressed batches are decompressed for the walk, bounded (see ``decompression_limit``). The
stored bytes stay the producer's whenever Kafka would keep them: the append is a patched copy of
the 61-byte header plus a view of the producer's record bytes (one pwritev, no copy of the
payload). The batch is rebuilt, as Kafka's ``inPlaceAssignment = false`` path rebuilds it, when
the topic's compression.type differs from the producer's codec, or when the inner offset deltas
are not 0..n-1 (Kafka rebuilds such compressed batches; it stores such uncompressed batches as
they are, and its consumers then read offsets out of order, so triolog rebuilds those too).

Error codes are Kafka's: CORRUPT_MESSAGE for a bad CRC, framing and a stream the codec cannot
decode (Kafka answers UNKNOWN_SERVER_ERROR for the last; CORRUPT_MESSAGE says what happened);
INVALID_RECORD for records that do not parse, a count that disagrees with them, header rule
violations and null keys on compacted topics; INVALID_TIMESTAMP for timestamps out of range;
MESSAGE_TOO_LARGE for a batch over max.message.bytes or one that decompresses past its limit.

The walk runs on the compiled core (triolog/core.py) where it was built: about 30 ns a record
against 600 ns interpreted for 100-byte records (bench/codec.py).
"""

from __future__ import annotations

import threading
from typing import NamedTuple, NoReturn

from crc32c import crc32c

from triolog import core
from triolog.config.log_config import LogConfig
from triolog.protocol.compression import MAX_DECOMPRESSED_BYTES, DecompressionLimitError, compress, decompress
from triolog.protocol.record_batch import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_MASK,
    CONTROL_FLAG,
    CRC_OFFSET,
    CRC_START,
    CURRENT_MAGIC,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAX_TIMESTAMP_OFFSET,
    NO_TIMESTAMP,
    PRODUCER_ID_OFFSET,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_FLAG,
    BatchHeader,
    CompressionType,
    fields_struct,
    read_header,
    split_batches,
)

from .errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    RecordTooLargeError,
)

# The walk of the compiled core (Cython) where it was built, else the same source interpreted.
_record_codec = core.load("protocol.record_codec")
walk_records = _record_codec.walk_records
renumber_records = _record_codec.renumber_records
check_batch_header = _record_codec.check_batch_header

# The header fields this module reads or patches (record_batch.py's layout), each at its *_OFFSET.
_BASE_OFFSET = fields_struct("base_offset")
_OFFSET_LENGTH_EPOCH = fields_struct("base_offset", "partition_leader_epoch")
_CRC = fields_struct("crc")
_ATTRIBUTES = fields_struct("attributes")
_MAX_TIMESTAMP = fields_struct("max_timestamp")
_PRODUCER_ID_EPOCH = fields_struct("producer_id", "producer_epoch")

_TOPIC_CODECS = {
    "uncompressed": CompressionType.NONE,
    "gzip": CompressionType.GZIP,
    "snappy": CompressionType.SNAPPY,
    "lz4": CompressionType.LZ4,
    "zstd": CompressionType.ZSTD,
}

#: Compressed batches being validated at once, in the whole process. Each holds up to its
#: decompression limit (and the codec's window) until it is placed; storage threads are many (16
#: by default) and a flood of decompression bombs at 16 MiB each would otherwise multiply that.
#: Validation is mostly single-threaded Python (the GIL), so two slots cost no throughput.
DECOMPRESSION_SLOTS = 2
_DECOMPRESSION_SLOTS = threading.BoundedSemaphore(DECOMPRESSION_SLOTS)
#: ValidatedBatch built without NamedTuple's keyword-handling __new__ (the append path builds one a batch)
_new_tuple = tuple.__new__

#: A compressed batch may decode to at most this many times max.message.bytes (16 MiB at the
#: default 1 MiB), and never more than protocol.compression.MAX_DECOMPRESSED_BYTES (256 MiB).
DECOMPRESSION_FACTOR = 16


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
    #: Offset of the first record carrying ``max_timestamp`` (Kafka keeps only the shallow one,
    #: the batch's last offset, for its time index; this one is exact).
    offset_of_max_timestamp: int = -1


def with_base_offset(batch: ValidatedBatch, offset: int) -> ValidatedBatch:
    """The same batch placed at ``offset``.

    The base offset lies outside the CRC, so a batch is validated before its offsets are known,
    outside the log's lock (the record walk and any decompression cost the batch's size, and
    fetches of the partition must not wait for them), and placed under the lock by patching the
    first 8 bytes of its first buffer, which every path builds as a bytearray.
    """
    shift = offset - batch.first_offset
    if not shift:
        return batch
    _BASE_OFFSET.pack_into(batch.records[0], 0, offset)
    return batch._replace(
        first_offset=offset,
        last_offset=batch.last_offset + shift,
        shallow_offset_of_max_timestamp=batch.shallow_offset_of_max_timestamp + shift,
        offset_of_max_timestamp=batch.offset_of_max_timestamp + shift if batch.offset_of_max_timestamp >= 0 else -1,
    )


def target_codec(config: LogConfig, source: int) -> int:
    return source if config.compression_type == "producer" else _TOPIC_CODECS[config.compression_type]


def decompression_limit(config: LogConfig) -> int:
    """Most bytes one compressed batch of this topic may decompress to.

    Kafka bounds only the compressed size (max.message.bytes), so a 32 KiB zstd batch could
    inflate to a GiB in the broker's memory. A legitimate batch is made of records its producer
    fitted under max.request.size and batch.size, which Kafka producers estimate from the
    compressed size; real record streams compress 2-10x, rarely past 16x. DECOMPRESSION_FACTOR x
    max.message.bytes therefore refuses only batches that are both near the size limit and
    extraordinarily compressible, and a Java producer answers MESSAGE_TOO_LARGE by splitting the
    batch and retrying. The cap keeps every limit at or below what readers (consumers, the
    cleaner) accept by default, so whatever is stored stays readable.
    """
    return min(config.max_message_bytes * DECOMPRESSION_FACTOR, MAX_DECOMPRESSED_BYTES)


def validate_and_assign_offsets(
    records, *, offset: int, config: LogConfig, now_ms: int, leader_epoch: int = -1
) -> ValidatedBatch:
    """Check one producer batch against Kafka's leader-side rules and give it offsets from ``offset``.

    Checks run in Kafka's order (framing and magic, one batch, base offset, offset delta vs
    count, control flag, producer fields, size, CRC, then every record). Raises
    CorruptRecordError, InvalidRecordError, RecordTooLargeError, InvalidTimestampError or
    UnsupportedForMessageFormatError; nothing is written on error.
    """
    size = len(records)
    limit = config.max_message_bytes
    if config.segment_bytes < limit:
        limit = config.segment_bytes
    fields = check_batch_header(records, limit)
    if fields is None:
        _raise_header_error(records, config)
    batch_length, crc, attributes, last_offset_delta, base_timestamp, max_timestamp, count = fields
    producer_id, producer_epoch = _PRODUCER_ID_EPOCH.unpack_from(records, PRODUCER_ID_OFFSET)
    if producer_id >= 0 and producer_epoch < 0:
        # Kafka's client never sends it; the producer state has no epoch to check it against.
        raise InvalidRecordError(
            f"idempotent batch from producer {producer_id} has producer epoch {producer_epoch}; it must be >= 0"
        )
    view = memoryview(records)
    if crc32c(view[CRC_START:]) != crc:
        raise CorruptRecordError(
            f"record batch is corrupt (stored crc = {crc}, computed crc = {crc32c(view[CRC_START:])})"
        )
    if attributes & TIMESTAMP_TYPE_MASK:
        raise InvalidTimestampError("a producer may not set the LogAppendTime timestamp type")

    codec = attributes & COMPRESSION_MASK
    # Decompressed records live until validation returns: a process-wide bound on how many do.
    # (A try/finally, not a `with`: the common uncompressed batch then pays for no context manager.)
    slot = codec != CompressionType.NONE
    if slot:
        _DECOMPRESSION_SLOTS.acquire()
    try:
        if codec == CompressionType.NONE:
            data = records if type(records) in (bytes, bytearray) else bytes(view)
            start = HEADER_SIZE
        else:
            data = _decompress(codec, view[HEADER_SIZE:], config)
            start = 0
        log_append_time = config.log_append_time
        try:
            if log_append_time:  # record timestamps are replaced by the broker's: not checked (Kafka)
                walked_max, max_index, in_sequence = walk_records(
                    data, start, count, base_timestamp, keys_required=config.compact
                )
            else:
                walked_max, max_index, in_sequence = walk_records(
                    data,
                    start,
                    count,
                    base_timestamp,
                    min_timestamp=now_ms - config.message_timestamp_before_max_ms,
                    max_timestamp=now_ms + config.message_timestamp_after_max_ms,
                    keys_required=config.compact,
                )
        except InvalidTimestampError as exc:
            # the walk sets the offending record's timestamp on every error it raises
            assert exc.timestamp is not None
            rule = _timestamp_rule(exc.timestamp, config, now_ms)
            raise InvalidTimestampError(f"{exc}: {rule}") from None

        last_offset = offset + last_offset_delta
        if log_append_time:
            new_max, offset_of_max = now_ms, offset
        else:
            new_max = walked_max if walked_max > NO_TIMESTAMP else NO_TIMESTAMP  # Kafka's max starts there
            offset_of_max = offset + max_index
        target = target_codec(config, codec)
        if target != codec or not in_sequence:
            return _rebuild(
                data,
                start,
                read_header(records),
                target,
                offset=offset,
                config=config,
                now_ms=now_ms,
                leader_epoch=leader_epoch,
                max_timestamp=new_max,
                offset_of_max=offset_of_max,
                renumber=not in_sequence,
            )

        # In place: patch a copy of the header, keep the records as they are.
        head = bytearray(view[:HEADER_SIZE])
        _OFFSET_LENGTH_EPOCH.pack_into(head, 0, offset, batch_length, leader_epoch)
        body = view[HEADER_SIZE:]
        if log_append_time:
            _ATTRIBUTES.pack_into(head, ATTRIBUTES_OFFSET, attributes | TIMESTAMP_TYPE_MASK)
            _MAX_TIMESTAMP.pack_into(head, MAX_TIMESTAMP_OFFSET, now_ms)
            _CRC.pack_into(head, CRC_OFFSET, crc32c(body, crc32c(memoryview(head)[CRC_START:])))
            return ValidatedBatch(
                [head, body], size, offset, last_offset, now_ms, last_offset, now_ms, count, offset_of_max
            )
        if new_max != max_timestamp:
            _MAX_TIMESTAMP.pack_into(head, MAX_TIMESTAMP_OFFSET, new_max)
            _CRC.pack_into(head, CRC_OFFSET, crc32c(body, crc32c(memoryview(head)[CRC_START:])))
        return _new_tuple(
            ValidatedBatch, ([head, body], size, offset, last_offset, new_max, last_offset, -1, count, offset_of_max)
        )
    finally:
        if slot:
            _DECOMPRESSION_SLOTS.release()


def _raise_header_error(records, config: LogConfig) -> NoReturn:
    """The batch breaks a header rule (the core's check_batch_header said so): name the first one
    in Kafka's order (the rare path, so it reads the header again, in Python)."""
    size = len(records)
    if size < HEADER_SIZE:
        _raise_framing_error(records)
    (
        base_offset,
        batch_length,
        _,
        magic,
        _,
        attributes,
        last_offset_delta,
        _,
        _,
        producer_id,
        _,
        base_sequence,
        count,
    ) = HEADER.unpack_from(records, 0)
    if magic != CURRENT_MAGIC or batch_length + LOG_OVERHEAD != size:
        _raise_framing_error(records)
    if (
        base_offset != 0
        or last_offset_delta + 1 != count
        or count <= 0
        or attributes & CONTROL_FLAG
        or (producer_id >= 0 and base_sequence < 0)
        or attributes & COMPRESSION_MASK > CompressionType.ZSTD
    ):
        _check_header(read_header(records))
    _check_size(size, config)


def _raise_framing_error(records) -> NoReturn:
    """The slow path for anything but exactly one well-framed v2 batch: name what is wrong."""
    batches = split_batches(records)  # raises for truncation, legacy or unknown magic, bad lengths
    if not batches:
        raise InvalidRecordError("produce request holds no record batch")
    raise InvalidRecordError(
        f"produce request holds {len(batches)} record batches for one partition; magic 2 allows exactly one"
    )


def _check_header(header: BatchHeader) -> NoReturn:
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


def _check_size(size: int, config: LogConfig) -> NoReturn:
    if size > config.max_message_bytes:
        raise RecordTooLargeError(
            f"record batch of {size} bytes exceeds max.message.bytes ({config.max_message_bytes})"
        )
    raise RecordTooLargeError(f"record batch of {size} bytes is larger than segment.bytes ({config.segment_bytes})")


def _timestamp_rule(timestamp: int, config: LogConfig, now_ms: int) -> str:
    """Which setting a refused timestamp breaks, for the error message."""
    if timestamp < now_ms - config.message_timestamp_before_max_ms:
        return (
            f"more than message.timestamp.before.max.ms ({config.message_timestamp_before_max_ms}) "
            f"before the broker's time {now_ms}"
        )
    if timestamp > now_ms + config.message_timestamp_after_max_ms:
        return (
            f"more than message.timestamp.after.max.ms ({config.message_timestamp_after_max_ms}) "
            f"after the broker's time {now_ms}"
        )
    return "outside the range of a 64-bit timestamp"


def _decompress(codec: int, payload, config: LogConfig) -> bytes:
    limit = decompression_limit(config)
    try:
        return decompress(CompressionType(codec), payload, limit)
    except DecompressionLimitError:
        raise RecordTooLargeError(
            f"record batch decompresses to more than {limit} bytes, the limit for this topic "
            f"({DECOMPRESSION_FACTOR} x max.message.bytes {config.max_message_bytes}, at most {MAX_DECOMPRESSED_BYTES})"
        ) from None
    except CorruptRecordError as exc:
        raise CorruptRecordError(f"record batch is corrupt: its records do not decompress: {exc}") from None


def _compression_level(config: LogConfig, codec: int) -> int | None:
    levels: dict[int, int | None] = {
        CompressionType.GZIP: config.compression_gzip_level if config.compression_gzip_level >= 0 else None,
        CompressionType.LZ4: config.compression_lz4_level,
        CompressionType.ZSTD: config.compression_zstd_level,
    }
    return levels.get(codec)


def _rebuild(
    data,
    start: int,
    header: BatchHeader,
    codec: int,
    *,
    offset: int,
    config: LogConfig,
    now_ms: int,
    leader_epoch: int,
    max_timestamp: int,
    offset_of_max: int,
    renumber: bool,
) -> ValidatedBatch:
    """A new batch around the walked records: in the topic's codec, with offset deltas 0..n-1.

    Record bytes are reused as they are (timestamps stay base_timestamp + delta); only the
    offset deltas are rewritten when they were not 0..n-1. No Record objects are built, so a
    rebuild costs the records' bytes, not an object per record.
    """
    count = header.records_count
    body = renumber_records(data, start, count) if renumber else memoryview(data)[start:]
    if codec != CompressionType.NONE:
        # compress takes any buffer, as each of its codecs does; its annotation (protocol/compression.py) says bytes
        body = compress(CompressionType(codec), body, _compression_level(config, codec))  # type: ignore[arg-type]
    append_time = config.log_append_time
    attributes = codec | (header.attributes & TRANSACTIONAL_FLAG) | (TIMESTAMP_TYPE_MASK if append_time else 0)
    built = bytearray(HEADER_SIZE + len(body))
    HEADER.pack_into(
        built,
        0,
        offset,
        len(built) - LOG_OVERHEAD,
        leader_epoch,
        CURRENT_MAGIC,
        0,
        attributes,
        count - 1,
        header.base_timestamp,
        max_timestamp,
        header.producer_id,
        header.producer_epoch,
        header.base_sequence,
        count,
    )
    built[HEADER_SIZE:] = body
    _CRC.pack_into(built, CRC_OFFSET, crc32c(memoryview(built)[CRC_START:]))
    if len(built) > config.max_message_bytes:
        raise RecordTooLargeError(
            f"record batch recompressed to {len(built)} bytes exceeds max.message.bytes ({config.max_message_bytes})"
        )
    last_offset = offset + count - 1
    return ValidatedBatch(
        [built],
        len(built),
        offset,
        last_offset,
        max_timestamp,
        last_offset,
        now_ms if append_time else -1,
        count,
        offset_of_max,
    )
