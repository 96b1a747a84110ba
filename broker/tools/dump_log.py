"""``triolog dump-log``: Kafka's ``kafka-dump-log.sh`` (DumpLogSegments) for triolog's segment files.

Segment files are byte-compatible with Kafka's, and so is this tool's stdout: the same lines, in
the same order, for ``.log``, ``.index``, ``.timeindex``, ``.txnindex`` (aborted transactions) and
``.snapshot`` (producer state) files.
Output can be
diffed against ``kafka-dump-log.sh`` run on the same files.

Options (as Kafka's): ``--files F1,F2`` (required), ``--print-data-log`` (implies deep
iteration), ``--deep-iteration``, ``--verify-index-only``, ``--index-sanity-check``,
``--max-bytes N`` (bytes read from each ``.log``), ``--max-message-size N`` (default 5242880:
the largest batch an index entry may point at), ``--skip-record-metadata``.

Where this tool deliberately differs from Kafka:

* Corrupt input is an error, not a stack trace. Each problem is one ``Error: ...`` line on stderr
  naming the file and the byte position; the dump carries on where it can (the next batch, the
  next index entry, the next file) and the exit code is 1. Kafka prints ``isvalid: false`` for a
  bad CRC and exits 0; we print the same line and exit 1. A batch header that cannot be framed
  (size field below 14, unknown magic, a v2 size below the 61-byte header) stops that file's
  dump, as it stops Kafka's iterator; a batch running past the end of the file (a torn write)
  is Kafka's ``Found N invalid bytes at the end of ...`` plus an error.
* Index entries and time-index entries that disagree with the log exit 1 (Kafka only reports).
  Non-consecutive offsets do not: compaction leaves gaps in healthy logs.
* Legacy (magic 0/1) entries get Kafka's shallow ``offset: ...`` line and an error (the broker
  never writes them); their inner records are not decoded.
* Records of a batch with a bad CRC are still decoded in deep iteration (so is Kafka's), but a
  batch whose records do not parse prints none of them, only an error.
* Control records of KRaft types (snapshot header/footer, kraft version, voters), which Kafka
  prints as JSON, print as ``controlType: NAME(id)``; triolog never writes them.
* Kafka's KRaft ``.checkpoint`` snapshots and decoder options are not supported. A ``.snapshot``
  that fails its version or CRC check is an error (Kafka prints the message and exits 0), and so
  is a ``.txnindex`` with a torn last entry or an unknown entry version (Kafka skips the torn
  bytes silently and stops at the unknown version with a stack trace).
* A missing ``.index`` next to a ``.timeindex`` is read as empty (Kafka creates the empty file).
"""

from __future__ import annotations

import argparse
import os
import struct
import sys
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TextIO

from triolog.broker.storage.errors import CorruptIndexError
from triolog.broker.storage.index import OffsetIndex, TimeIndex
from triolog.broker.storage.producer_state import CorruptSnapshotError, decode_snapshot
from triolog.broker.storage.transaction_index import ENTRY_SIZE as TXN_ENTRY_SIZE, decode_entries as decode_txn_entries
from triolog.protocol.errors import CorruptRecordError
from triolog.protocol.record_batch import (
    COMPRESSION_MASK,
    CRC_OFFSET,
    HEADER_PREFIX,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MIN_LEGACY_SIZE,
    TIMESTAMP_TYPE_MASK,
    BatchHeader,
    CompressionType,
    compute_crc,
    read_header,
)
from triolog.protocol.records import (
    ControlRecordType,
    Record,
    decode_batch,
    parse_control_record_key,
    parse_end_txn_marker_value,
)

__all__ = ["DEFAULT_MAX_MESSAGE_SIZE", "DumpOptions", "add_arguments", "dump", "main", "options_from_args", "run"]

DESCRIPTION = (
    "Parse log segment files (.log, .index, .timeindex, .txnindex, .snapshot) and dump their contents to the console, "
    "in the format of Kafka's kafka-dump-log.sh; useful for debugging a seemingly corrupt segment."
)
DEFAULT_MAX_MESSAGE_SIZE = 5 * 1024 * 1024
INT32_MAX = (1 << 31) - 1
RECORD_INDENT = "|"

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
#: Kafka dumps these too; triolog does not write them yet.
SNAPSHOT_SUFFIX = ".snapshot"
TXN_INDEX_SUFFIX = ".txnindex"

_READ_WINDOW = 1 << 20
_U32 = struct.Struct(">I")
_I16 = struct.Struct(">h")
_I64 = struct.Struct(">q")
_LEGACY_CRC_OFFSET = LOG_OVERHEAD  # crc (uint32) right after offset and size; it covers magic .. end
_LEGACY_MAGIC_OFFSET = 16
_LEGACY_ATTRIBUTES_OFFSET = 17
_LEGACY_TIMESTAMP_OFFSET = 18
_LEGACY_V1_MIN_SIZE = 22  # crc, magic, attributes, timestamp, key length, value length


@dataclass(frozen=True)
class DumpOptions:
    files: Sequence[str]
    print_data_log: bool = False
    deep_iteration: bool = False
    verify_index_only: bool = False
    index_sanity_check: bool = False
    max_bytes: int | None = None  # None: the whole file (Kafka's Integer.MAX_VALUE default)
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE
    skip_record_metadata: bool = False

    @property
    def deep(self) -> bool:
        return self.deep_iteration or self.print_data_log


class _FileError(Exception):
    """A problem that ends (part of) one file's dump; the message names the file and position."""


def _increment_sequence(sequence: int, increment: int) -> int:
    """Kafka's DefaultRecordBatch.incrementSequence: wraps past 2^31-1 to 0."""
    if sequence > INT32_MAX - increment:
        return increment - (INT32_MAX - sequence) - 1
    return sequence + increment


def _last_sequence(header: BatchHeader) -> int:
    if header.base_sequence == -1:
        return -1
    return _increment_sequence(header.base_sequence, header.last_offset_delta)


def _java_bool(value: bool) -> str:
    return "true" if value else "false"


def _text(data) -> str:
    """Kafka's StringDecoder: UTF-8, malformed input replaced by U+FFFD."""
    return bytes(data).decode("utf-8", "replace")


def _base_offset(path: str) -> int:
    """The base offset a segment file is named after (the digits before the first dot)."""
    prefix = os.path.basename(path).split(".", 1)[0]
    if not (prefix.isascii() and prefix.isdigit()):
        raise _FileError(f"{path}: the file name does not start with a base offset; cannot dump it")
    return int(prefix)


def _sibling(path: str, suffix: str) -> str:
    directory, name = os.path.split(path)
    return os.path.join(directory, name.split(".", 1)[0] + suffix)


class _Segment:
    """A ``.log`` file opened read-only, read through a window so small batches cost no syscall each."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd = os.open(path, os.O_RDONLY)
        try:
            self.size = os.fstat(self._fd).st_size
        except BaseException:
            os.close(self._fd)
            raise
        self._window = b""
        self._window_start = 0

    def close(self) -> None:
        os.close(self._fd)

    def __enter__(self) -> _Segment:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def read(self, position: int, length: int) -> memoryview:
        start = position - self._window_start
        if start < 0 or start + length > len(self._window):
            self._window = os.pread(self._fd, max(length, _READ_WINDOW), position)
            self._window_start = position
            start = 0
        return memoryview(self._window)[start : start + length]

    def frames(self, start: int, end: int) -> Iterator[tuple[int, int, tuple[int, int, int, int]]]:
        """(position, size, (base offset, size field, leader epoch, magic)) of each batch in [start, end).

        Kafka's FileLogInputStream: stops quietly when 17 bytes or fewer remain, or at a batch that
        runs past ``end``; a size field below 14 is corrupt (_FileError). Magic is the caller's.
        """
        position = start
        while end - position > HEADER_PREFIX.size:
            prefix = HEADER_PREFIX.unpack(self.read(position, HEADER_PREFIX.size))
            size_field = prefix[1]
            if size_field < MIN_LEGACY_SIZE:
                hint = " (zero bytes: a preallocated or untrimmed file?)" if not any(prefix) else ""
                raise _FileError(
                    f"{self.path}: record batch at position {position} declares size {size_field}, smaller than "
                    f"the minimum record overhead ({MIN_LEGACY_SIZE}){hint}; cannot read past it"
                )
            size = size_field + LOG_OVERHEAD
            if position + size > end:
                return
            yield position, size, prefix
            position += size

    def last_offset(self, position: int, size: int, prefix: tuple[int, int, int, int]) -> int:
        """Kafka's batch.lastOffset: from the v2 header, or a legacy entry's offset field."""
        magic = prefix[3]
        if magic in (0, 1):
            return prefix[0]
        if magic != 2:
            raise _FileError(f"{self.path}: record batch at position {position} has unknown magic {magic}")
        if size < HEADER_SIZE:
            raise _FileError(
                f"{self.path}: record batch at position {position} declares {size} bytes, fewer than the "
                f"{HEADER_SIZE}-byte v2 header"
            )
        return read_header(self.read(position, HEADER_SIZE)).last_offset


class _Dumper:
    def __init__(self, options: DumpOptions, out: TextIO, err: TextIO) -> None:
        self.options = options
        self.out = out
        self.err = err
        self.failed = False
        # Kafka's end-of-run reports, keyed by absolute path. Kafka prepends to the offset-index
        # mismatch and non-consecutive lists (Scala `::=`), so those print newest first.
        self.index_mismatches: dict[str, list[tuple[int, int]]] = {}
        self.time_mismatches: dict[str, list[tuple[int, int]]] = {}
        self.time_out_of_order: dict[str, list[tuple[int, int]]] = {}
        self.time_not_found: dict[str, list[tuple[int, int]]] = {}
        self.non_consecutive: dict[str, list[tuple[int, int]]] = {}

    # -- output ------------------------------------------------------------------------------

    def _print(self, line: str) -> None:
        self.out.write(line + "\n")

    def _stderr(self, line: str) -> None:
        self.out.flush()  # keep stdout and stderr in order on a terminal
        self.err.write(line + "\n")

    def _error(self, message: str) -> None:
        self.failed = True
        self._stderr(f"Error: {message}")

    # -- driver ------------------------------------------------------------------------------

    def run(self) -> int:
        for path in self.options.files:
            if not path:
                continue
            self._print(f"Dumping {path}")
            name = os.path.basename(path)
            suffix = name[name.rfind(".") :] if "." in name else ""
            handler = {
                LOG_SUFFIX: self._dump_log,
                INDEX_SUFFIX: self._dump_offset_index,
                TIME_INDEX_SUFFIX: self._dump_time_index,
                SNAPSHOT_SUFFIX: self._dump_producer_snapshot,
                TXN_INDEX_SUFFIX: self._dump_txn_index,
            }.get(suffix)
            if handler is None:
                self._stderr(f"Ignoring unknown file {path}")
                continue
            try:
                handler(path)
            except _FileError as exc:
                self._error(str(exc))
            except BrokenPipeError:
                raise
            except OSError as exc:
                culprit = "" if exc.filename in (None, path) else f"cannot read {exc.filename}: "
                self._error(f"{path}: {culprit}{exc.strerror or exc}")
        self._report()
        return 1 if self.failed else 0

    def _report(self) -> None:
        for path, pairs in self.index_mismatches.items():
            self._stderr(f"Mismatches in :{path}")
            for index_offset, log_offset in pairs:
                self._stderr(f"  Index offset: {index_offset}, log offset: {log_offset}")
        for path, pairs in self.time_mismatches.items():
            self._stderr(f"Found timestamp mismatch in :{path}")
            for index_ts, log_ts in pairs:
                self._stderr(f"  Index timestamp: {index_ts}, log timestamp: {log_ts}")
        for path, pairs in self.time_out_of_order.items():
            self._stderr(f"Found out of order timestamp in :{path}")
            for index_ts, previous_ts in pairs:
                self._stderr(f"  Index timestamp: {index_ts}, Previously indexed timestamp: {previous_ts}")
        for pairs in self.time_not_found.values():
            self._stderr("The following indexed offsets are not found in the log.")
            for index_offset, log_offset in pairs:
                self._stderr(f"Indexed offset: {index_offset}, found log offset: {log_offset}")
        for path, pairs in self.non_consecutive.items():
            self._stderr(f"Non-consecutive offsets in {path}")
            for first, second in pairs:
                self._stderr(f"  {first} is followed by {second}")
        if self.index_mismatches or self.time_mismatches or self.time_out_of_order or self.time_not_found:
            self.failed = True

    # -- .txnindex --------------------------------------------------------------------------

    def _dump_txn_index(self, path: str) -> None:
        """One line per aborted transaction, as Kafka's dumpTxnIndex prints it."""
        with open(path, "rb") as file:
            data = file.read()
        whole = len(data) - len(data) % TXN_ENTRY_SIZE
        try:
            entries = decode_txn_entries(data[:whole])
        except CorruptIndexError as exc:
            raise _FileError(f"{path}: {exc}") from None
        for entry in entries:
            self._print(
                f"version: {entry.version} producerId: {entry.producer_id} firstOffset: {entry.first_offset} "
                f"lastOffset: {entry.last_offset} lastStableOffset: {entry.last_stable_offset}"
            )
        if whole != len(data):
            raise _FileError(
                f"{path}: {len(data) - whole} bytes at position {whole} are not a whole {TXN_ENTRY_SIZE}-byte entry"
            )

    # -- .snapshot ---------------------------------------------------------------------------

    def _dump_producer_snapshot(self, path: str) -> None:
        """One line per producer id, as Kafka's dumpProducerIdSnapshot prints it (its Java
        OptionalLong for the transaction's first offset; the one batch a snapshot keeps)."""
        with open(path, "rb") as file:
            data = file.read()
        try:
            entries = decode_snapshot(data)
        except CorruptSnapshotError as exc:
            raise _FileError(f"{path}: {exc}") from None
        for entry in entries:
            txn = entry.current_txn_first_offset
            line = (
                f"producerId: {entry.producer_id} producerEpoch: {entry.producer_epoch} "
                f"coordinatorEpoch: {entry.coordinator_epoch} currentTxnFirstOffset: "
                f"{'OptionalLong.empty' if txn < 0 else f'OptionalLong[{txn}]'} "
                f"lastTimestamp: {entry.last_timestamp} "
            )
            for batch in list(entry.batch_metadata)[:1]:
                line += (
                    f"firstSequence: {batch.first_seq} lastSequence: {batch.last_seq} "
                    f"lastOffset: {batch.last_offset} offsetDelta: {batch.offset_delta} "
                    f"timestamp: {batch.timestamp}"
                )
            self._print(line)

    # -- .log --------------------------------------------------------------------------------

    def _dump_log(self, path: str) -> None:
        base_offset = _base_offset(path)
        with _Segment(path) as segment:
            self._print(f"Log starting offset: {base_offset}")
            max_bytes = self.options.max_bytes
            end = segment.size if max_bytes is None else min(max_bytes, segment.size)
            state = {"last_offset": -1, "abs_path": os.path.abspath(path)}
            valid_bytes = 0
            stopped = False
            try:
                for position, size, prefix in segment.frames(0, end):
                    magic = prefix[3]
                    if magic == 2:
                        self._dump_batch(segment, position, size, state)
                    elif magic in (0, 1):
                        self._dump_legacy_entry(segment, position, size, prefix)
                    else:
                        raise _FileError(
                            f"{path}: record batch at position {position} has unknown magic {magic}; "
                            f"cannot read past it"
                        )
                    valid_bytes = position + size
            except _FileError as exc:
                self._error(str(exc))
                stopped = True
            trailing = end - valid_bytes
            if trailing > 0 and not stopped and end == segment.size:
                self._error(self._describe_tail(segment, valid_bytes))
            if trailing > 0 and max_bytes is None:
                self._print(f"Found {trailing} invalid bytes at the end of {os.path.basename(path)}")

    @staticmethod
    def _describe_tail(segment: _Segment, position: int) -> str:
        remaining = segment.size - position
        if remaining <= HEADER_PREFIX.size:
            return (
                f"{segment.path}: the last {remaining} bytes, from position {position}, are too few for a "
                f"record batch (truncated write?)"
            )
        size = HEADER_PREFIX.unpack(segment.read(position, HEADER_PREFIX.size))[1] + LOG_OVERHEAD
        return (
            f"{segment.path}: record batch at position {position} declares {size} bytes but only {remaining} "
            f"remain in the file (truncated write?)"
        )

    def _dump_batch(self, segment: _Segment, position: int, size: int, state: dict) -> None:
        path = segment.path
        if size < HEADER_SIZE:
            raise _FileError(
                f"{path}: record batch at position {position} declares {size} bytes, fewer than the "
                f"{HEADER_SIZE}-byte v2 header; cannot read past it"
            )
        data = segment.read(position, size)
        header = read_header(data)
        codec_id = header.attributes & COMPRESSION_MASK
        if codec_id > CompressionType.ZSTD:
            self._error(f"{path}: record batch at position {position} has unknown compression codec id {codec_id}")
            return
        computed_crc = compute_crc(data)
        crc_ok = computed_crc == header.crc
        delete_horizon = header.delete_horizon_ms
        self._print(
            f"baseOffset: {header.base_offset} lastOffset: {header.last_offset} count: {header.records_count} "
            f"baseSequence: {header.base_sequence} lastSequence: {_last_sequence(header)} "
            f"producerId: {header.producer_id} producerEpoch: {header.producer_epoch} "
            f"partitionLeaderEpoch: {header.partition_leader_epoch} "
            f"isTransactional: {_java_bool(header.is_transactional)} isControl: {_java_bool(header.is_control)} "
            f"deleteHorizonMs: {'OptionalLong.empty' if delete_horizon is None else f'OptionalLong[{delete_horizon}]'} "
            f"position: {position} {header.timestamp_type.kafka_name}: {header.max_timestamp} size: {size} "
            f"magic: {header.magic} compresscodec: {CompressionType(codec_id).kafka_name} crc: {header.crc} "
            f"isvalid: {_java_bool(crc_ok)}"
        )
        if not crc_ok:
            self._error(
                f"{path}: record batch at position {position} is corrupt: stored crc {header.crc} does not "
                f"match computed crc {computed_crc}"
            )
        if self.options.deep:
            self._dump_records(segment, position, data, header, crc_ok, computed_crc, state)

    def _decode(self, path: str, position: int, data, crc_ok: bool, computed_crc: int):
        """decode_batch, but like Kafka's iterator it does not insist on the CRC (the line says isvalid)."""
        if not crc_ok:
            data = bytearray(data)
            _U32.pack_into(data, CRC_OFFSET, computed_crc)
        try:
            return decode_batch(data)
        except CorruptRecordError as exc:
            raise _FileError(f"{path}: cannot read the records of the batch at position {position}: {exc}") from None

    def _dump_records(self, segment, position, data, header: BatchHeader, crc_ok, computed_crc, state) -> None:
        path = segment.path
        try:
            batch = self._decode(path, position, data, crc_ok, computed_crc)
        except _FileError as exc:
            self._error(str(exc))
            return
        options = self.options
        timestamp_name = header.timestamp_type.kafka_name
        for record in batch.records:
            last_offset = state["last_offset"]
            if last_offset != -1 and record.offset != last_offset + 1:
                self.non_consecutive.setdefault(state["abs_path"], []).insert(0, (last_offset, record.offset))
            state["last_offset"] = record.offset

            prefix = f"{RECORD_INDENT} "
            parts = []
            if not options.skip_record_metadata:
                key_size = -1 if record.key is None else len(record.key)
                value_size = -1 if record.value is None else len(record.value)
                sequence = (
                    -1
                    if header.base_sequence < 0
                    else _increment_sequence(header.base_sequence, record.offset - header.base_offset)
                )
                parts.append(
                    f"{prefix}offset: {record.offset} {timestamp_name}: {record.timestamp} "
                    f"keySize: {key_size} valueSize: {value_size}"
                )
                prefix = " "
                parts.append(f" sequence: {sequence} headerKeys: [{','.join(key for key, _ in record.headers)}]")
                if header.is_control:
                    parts.append(self._control_text(path, position, record))
            if options.print_data_log and not header.is_control:
                if record.key is not None:
                    parts.append(f"{prefix}key: {_text(record.key)}")
                    prefix = " "
                if record.value is not None:
                    parts.append(f" payload: {_text(record.value)}")
            self._print("".join(parts))

    def _control_text(self, path: str, position: int, record: Record) -> str:
        try:
            _, control_type = parse_control_record_key(record.key)
            assert record.key is not None  # parse_control_record_key raised otherwise
            type_id = _I16.unpack_from(record.key, 2)[0]
            if control_type in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
                epoch = parse_end_txn_marker_value(record.value)
                return f" endTxnMarker: {control_type.name} coordinatorEpoch: {epoch}"
            return f" controlType: {control_type.name}({type_id})"
        except CorruptRecordError as exc:
            self._error(f"{path}: control record at offset {record.offset} of the batch at position {position}: {exc}")
            return ""

    def _dump_legacy_entry(self, segment: _Segment, position: int, size: int, prefix) -> None:
        path = segment.path
        offset, size_field, _, magic = prefix
        if magic == 1 and size_field < _LEGACY_V1_MIN_SIZE:
            self._error(
                f"{path}: legacy (magic 1) entry at position {position} declares size {size_field}, smaller than "
                f"the v1 record overhead ({_LEGACY_V1_MIN_SIZE})"
            )
            return
        data = segment.read(position, size)
        stored_crc = _U32.unpack_from(data, _LEGACY_CRC_OFFSET)[0]
        attributes = data[_LEGACY_ATTRIBUTES_OFFSET]
        codec_id = attributes & COMPRESSION_MASK
        self._error(
            f"{path}: record batch at position {position} uses the legacy message format (magic {magic}), "
            f"which triolog never writes; its records are not decoded"
        )
        if codec_id > CompressionType.ZSTD:
            self._error(f"{path}: legacy entry at position {position} has unknown compression codec id {codec_id}")
            return
        if magic == 0:
            timestamp_name, timestamp = "NoTimestampType", -1
        else:
            timestamp_name = "LogAppendTime" if attributes & TIMESTAMP_TYPE_MASK else "CreateTime"
            timestamp = _I64.unpack_from(data, _LEGACY_TIMESTAMP_OFFSET)[0]
        valid = zlib.crc32(data[_LEGACY_MAGIC_OFFSET:]) == stored_crc
        self._print(
            f"offset: {offset} position: {position} {timestamp_name}: {timestamp} size: {size} magic: {magic} "
            f"compresscodec: {CompressionType(codec_id).kafka_name} crc: {stored_crc} isvalid: {_java_bool(valid)}"
        )
        if not valid:
            self._error(f"{path}: legacy entry at position {position} is corrupt: crc {stored_crc} does not match")

    # -- .index and .timeindex ---------------------------------------------------------------

    def _sanity_check(self, index, path: str) -> None:
        try:
            index.sanity_check()
        except CorruptIndexError as exc:
            where = ""
            if index.entries:
                where = f" (last entry at byte position {(index.entries - 1) * index.ENTRY_SIZE})"
            self._error(f"{path} failed sanity check{where}: {exc}")
        else:
            self._print(f"{path} passed sanity check.")

    def _open_log_for(self, index_path: str) -> _Segment:
        log_path = _sibling(index_path, LOG_SUFFIX)
        try:
            return _Segment(log_path)
        except OSError as exc:
            raise _FileError(
                f"{index_path}: cannot check the index against {log_path}: {exc.strerror or exc}"
            ) from None

    def _dump_offset_index(self, path: str) -> None:
        base_offset = _base_offset(path)
        index = OffsetIndex(path, base_offset, writable=False)
        try:
            if index.entries == 0:
                self._print(f"{path} is empty.")
                return
            if self.options.index_sanity_check:
                self._sanity_check(index, path)
                return
            abs_path = os.path.abspath(path)
            with self._open_log_for(path) as segment:
                for i in range(index.entries):
                    entry = index.entry(i)
                    # A crash can leave an untrimmed, zero-filled tail: stop at the first zero entry.
                    if entry.offset == base_offset and i > 0:
                        return
                    try:
                        log_offset = self._first_batch_last_offset(segment, entry.position)
                    except _FileError as exc:
                        self._error(f"{path}: entry {i} (offset {entry.offset}): {exc}")
                    else:
                        if log_offset != entry.offset:
                            self.index_mismatches.setdefault(abs_path, []).insert(0, (entry.offset, log_offset))
                    if not self.options.verify_index_only:
                        self._print(f"offset: {entry.offset} position: {entry.position}")
        finally:
            index.close()

    def _first_batch_last_offset(self, segment: _Segment, position: int) -> int:
        """Last offset of the batch at ``position``, read within --max-message-size bytes (Kafka's check)."""
        if position < 0 or position > segment.size:
            raise _FileError(f"position {position} is outside {segment.path} ({segment.size} bytes)")
        limit = min(position + self.options.max_message_size, segment.size)
        for batch_position, size, prefix in segment.frames(position, limit):
            return segment.last_offset(batch_position, size, prefix)
        if limit == segment.size:
            raise _FileError(
                f"no complete record batch at position {position} of {segment.path} ({segment.size} bytes)"
            )
        raise _FileError(
            f"no complete record batch within --max-message-size ({self.options.max_message_size}) bytes "
            f"at position {position} of {segment.path}"
        )

    def _dump_time_index(self, path: str) -> None:
        base_offset = _base_offset(path)
        time_index = TimeIndex(path, base_offset, writable=False)
        offset_index = None
        try:
            if self.options.index_sanity_check:
                self._sanity_check(time_index, path)
                return
            if time_index.entries == 0:
                return
            index_path = _sibling(path, INDEX_SUFFIX)
            if os.path.exists(index_path):
                offset_index = OffsetIndex(index_path, base_offset, writable=False)
            abs_path = os.path.abspath(path)
            previous_timestamp = -1
            with self._open_log_for(path) as segment:
                for i in range(time_index.entries):
                    entry = time_index.entry(i)
                    if entry.offset == base_offset and i > 0:
                        return
                    start = offset_index.lookup(entry.offset).position if offset_index is not None else 0
                    try:
                        self._check_time_entry(segment, abs_path, start, entry, previous_timestamp)
                    except _FileError as exc:
                        self._error(f"{path}: entry {i} (timestamp {entry.timestamp}, offset {entry.offset}): {exc}")
                    if not self.options.verify_index_only:
                        self._print(f"timestamp: {entry.timestamp} offset: {entry.offset}")
                    previous_timestamp = entry.timestamp
        finally:
            time_index.close()
            if offset_index is not None:
                offset_index.close()

    def _check_time_entry(self, segment: _Segment, abs_path: str, start: int, entry, previous_timestamp: int) -> None:
        """Kafka's check: the first batch from ``start`` reaching the entry's offset must end exactly
        there and have the entry's timestamp as its max record timestamp."""
        if start < 0 or start > segment.size:
            raise _FileError(f"the offset index points at position {start}, outside {segment.path}")
        for position, size, prefix in segment.frames(start, segment.size):
            last_offset = segment.last_offset(position, size, prefix)
            if last_offset < entry.offset:
                continue
            if last_offset != entry.offset:
                self.time_not_found.setdefault(abs_path, []).append((entry.offset, last_offset))
                return
            if prefix[3] != 2:
                raise _FileError(f"the batch at position {position} of {segment.path} uses the legacy format")
            data = segment.read(position, size)
            computed_crc = compute_crc(data)
            header = read_header(data)
            batch = self._decode(segment.path, position, data, computed_crc == header.crc, computed_crc)
            max_timestamp = max([-1, *(record.timestamp for record in batch.records)])
            if max_timestamp != entry.timestamp:
                self.time_mismatches.setdefault(abs_path, []).append((entry.timestamp, max_timestamp))
            if previous_timestamp >= entry.timestamp:
                self.time_out_of_order.setdefault(abs_path, []).append((entry.timestamp, previous_timestamp))
            return
        self.time_not_found.setdefault(abs_path, []).append((entry.offset, -1))


def dump(options: DumpOptions, stdout: TextIO, stderr: TextIO) -> int:
    """Dump every file in ``options.files``; returns the exit code (0 ok, 1 anything corrupt or unreadable)."""
    return _Dumper(options, stdout, stderr).run()


# -- command line ------------------------------------------------------------------------------


def _non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of Kafka's kafka-dump-log.sh that apply to triolog's files."""
    parser.add_argument(
        "--files",
        required=True,
        metavar="FILE1,FILE2,...",
        help="REQUIRED: comma separated list of .log, .index and .timeindex files to dump",
    )
    parser.add_argument(
        "--print-data-log",
        action="store_true",
        help="print each record's key and payload (as UTF-8); implies --deep-iteration",
    )
    parser.add_argument("--deep-iteration", action="store_true", help="print every record, not only every batch")
    parser.add_argument(
        "--verify-index-only", action="store_true", help="check index entries against the log without printing them"
    )
    parser.add_argument(
        "--index-sanity-check", action="store_true", help="only run the sanity check a broker runs on an index"
    )
    parser.add_argument(
        "--max-bytes",
        type=_non_negative_int,
        default=None,
        metavar="SIZE",
        help="read at most SIZE bytes of each .log file (default: all)",
    )
    parser.add_argument(
        "--max-message-size",
        type=_non_negative_int,
        default=DEFAULT_MAX_MESSAGE_SIZE,
        metavar="SIZE",
        help=f"size of the largest batch an index entry may point at (default {DEFAULT_MAX_MESSAGE_SIZE})",
    )
    parser.add_argument(
        "--skip-record-metadata",
        action="store_true",
        help="with deep iteration, print no offset/timestamp/size/sequence/header details",
    )


def options_from_args(args: argparse.Namespace) -> DumpOptions:
    return DumpOptions(
        files=args.files.split(","),
        print_data_log=args.print_data_log,
        deep_iteration=args.deep_iteration,
        verify_index_only=args.verify_index_only,
        index_sanity_check=args.index_sanity_check,
        max_bytes=args.max_bytes,
        max_message_size=args.max_message_size,
        skip_record_metadata=args.skip_record_metadata,
    )


def run(args: argparse.Namespace, stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:
    """Run with parsed arguments (the ``triolog dump-log`` subcommand's entry point)."""
    if stdout is None:
        stdout = sys.stdout
        reconfigure = getattr(stdout, "reconfigure", None)
        if reconfigure is not None:
            try:  # a terminal that cannot show U+FFFD gets '?', as Java's System.out does
                reconfigure(errors="replace")
            except (ValueError, OSError):
                pass
    if stderr is None:
        stderr = sys.stderr
    # A reader that stops early (`triolog dump-log ... | head`) raises BrokenPipeError here:
    # triolog.broker.cli.main ends the process quietly with 0, as for every subcommand.
    code = dump(options_from_args(args), stdout, stderr)
    stdout.flush()
    return code


def build_parser(prog: str = "triolog dump-log") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=DESCRIPTION)
    add_arguments(parser)
    return parser


def main(argv: Sequence[str] | None = None, stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # --help or a usage error, already printed by argparse
        return exc.code if isinstance(exc.code, int) else 2
    return run(args, stdout, stderr)


if __name__ == "__main__":
    from triolog.broker.cli import main as triolog_main  # its broken-pipe and Ctrl-C handling

    sys.exit(triolog_main(["dump-log", *sys.argv[1:]]))
