"""Fetched record batches decoded straight into column lists, for Arrow.

:func:`triolog.protocol.records.iter_batches` builds one ``Record`` object per record; this decoder
appends each field of each record to its column instead (the compiled core's one record loop,
:func:`triolog.protocol.record_codec.decode_columns`, compiled where it was built). Framing, magic
and CRC checks are protocol's own (:func:`triolog.protocol.record_batch.check_batch`), and a record
that contradicts its batch raises the protocol decoder's CorruptRecordError;
``tests/pipeline/test_columnar.py`` checks both decoders agree.
"""

from __future__ import annotations

import struct

from triolog import core
from triolog.client.types import RecordColumns
from triolog.protocol.compression import decompress
from triolog.protocol.errors import CorruptRecordError, UnsupportedForMessageFormatError
from triolog.protocol.record_batch import (
    BATCH_LENGTH_OFFSET,
    COMPRESSION_MASK,
    CONTROL_FLAG,
    CURRENT_MAGIC,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    MIN_BATCH_LENGTH,
    TIMESTAMP_TYPE_MASK,
    CompressionType,
    check_batch,
    read_header,
)

__all__ = ["decode_into", "next_position"]

_I32 = struct.Struct(">i")
_codec = core.load("protocol.record_codec")


def decode_into(buf, columns: RecordColumns, position: int, end: int, with_headers: bool) -> int:
    """Append the records with ``position <= offset < end`` of the whole batches in ``buf`` (a
    fetch response's bytes; a trailing partial batch is ignored) to ``columns``.

    Returns the offset after the last batch that reaches ``position`` (control batches and
    compaction gaps included), or ``position`` if none does: where the next fetch starts.
    """
    if type(buf) is not bytes:
        buf = bytes(buf)
    view = memoryview(buf)
    next_position = position
    for start, size in _whole_batches(view):
        batch = view[start : start + size]
        header = read_header(batch)
        batch_next = header.base_offset + header.last_offset_delta + 1
        if batch_next <= position:
            continue
        next_position = batch_next
        if header.attributes & CONTROL_FLAG or header.records_count <= 0:
            continue
        check_batch(batch, header)
        codec = header.attributes & COMPRESSION_MASK
        if codec > CompressionType.ZSTD:
            raise CorruptRecordError(f"record batch at base offset {header.base_offset} has unknown codec id {codec}")
        if codec == CompressionType.NONE:  # decoded in place from the fetched bytes
            _records(buf, start + HEADER_SIZE, start + size, header, columns, position, end, with_headers)
        else:
            data = decompress(CompressionType(codec), batch[HEADER_SIZE:])
            _records(data, 0, len(data), header, columns, position, end, with_headers)
        if batch_next >= end:
            break
    return next_position


def next_position(buf, position: int) -> int:
    """The offset after the last whole batch in ``buf`` that reaches ``position`` (``position`` if
    none), from the batch headers alone: where the next fetch starts, known before the records are
    decoded. Equals :func:`decode_into`'s answer whenever that is below its ``end``. Raises what
    :func:`decode_into` raises on bad framing."""
    view = memoryview(buf)
    found = position
    for start, _size in _whole_batches(view):
        header = read_header(view, start)
        batch_next = header.base_offset + header.last_offset_delta + 1
        if batch_next > position:
            found = batch_next
    return found


def _whole_batches(view):
    """(position, size) of each whole batch in ``view``, framing checked; a partial one ends it."""
    total = len(view)
    at = 0
    while total - at >= LOG_OVERHEAD + 5:
        (batch_length,) = _I32.unpack_from(view, at + BATCH_LENGTH_OFFSET)
        magic = view[at + MAGIC_OFFSET]
        if magic != CURRENT_MAGIC:
            if magic in (0, 1):
                raise UnsupportedForMessageFormatError(f"record batch at position {at} has legacy magic {magic}")
            raise CorruptRecordError(f"record batch at position {at} has magic {magic}, expected {CURRENT_MAGIC}")
        if batch_length < MIN_BATCH_LENGTH:
            raise CorruptRecordError(f"record batch at position {at} declares length {batch_length}")
        size = batch_length + LOG_OVERHEAD
        if at + size > total:
            return
        yield at, size
        at += size


def _records(
    data: bytes, origin: int, stop: int, header, columns: RecordColumns, lo: int, hi: int, with_headers: bool
) -> None:
    """One batch's ``records_count`` records (``data[origin:stop]``) into the columns: the compiled
    core's decoder."""
    try:
        _codec.decode_columns(
            data,
            header.records_count,
            header.base_offset,
            header.base_timestamp,
            header.max_timestamp if header.attributes & TIMESTAMP_TYPE_MASK else None,
            lo,
            hi,
            columns,
            with_headers,
            origin,
            stop,
        )
    except CorruptRecordError as exc:
        raise CorruptRecordError(f"record batch at base offset {header.base_offset}: {exc}") from None
