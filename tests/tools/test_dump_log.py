"""`triolog dump-log`: Kafka's kafka-dump-log.sh output for segments the log really wrote.

Expected batch and record lines are derived from the files' bytes with kafka-python, an
independent parser of Kafka's record format, so the tool's field extraction is checked against a
second implementation; a few lines are pinned literally to pin Kafka's exact wording.
"""

from __future__ import annotations

import io
import os
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
from kafka.record import MemoryRecords

from triolog.broker import cli
from triolog.broker.storage.index import OffsetIndex, TimeIndex
from triolog.broker.tools import dump_log
from triolog.protocol.record_batch import CompressionType, read_header
from triolog.protocol.records import ControlRecordType, Record, encode_batch, encode_end_txn_marker

from tests.storage.helpers import open_log

REPO_ROOT = Path(__file__).resolve().parents[2]
CODEC_NAMES = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
INT32_MAX = 2**31 - 1
SMALL_SEGMENTS = {"segment.bytes": 600, "index.interval.bytes": 100}


# ---------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------


def run_cli(*args: str) -> subprocess.CompletedProcess:
    """The real command line: `python -m triolog.broker.cli dump-log ...` in a fresh interpreter."""
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), PYTHONIOENCODING="utf-8")
    return subprocess.run(
        [sys.executable, "-m", "triolog.broker.cli", "dump-log", *args],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, encoding="utf-8", timeout=60,
    )


def run(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = dump_log.main(list(args), out, err)
    return code, out.getvalue(), err.getvalue()


def files_arg(paths) -> str:
    return ",".join(str(p) for p in paths)


def java_bool(value) -> str:
    return "true" if value else "false"


def batch_layout(path: Path) -> list[tuple[int, int]]:
    """(position, size) of every batch in a .log file, from the raw size fields."""
    data = path.read_bytes()
    out, position = [], 0
    while position + 12 <= len(data):
        size = struct.unpack_from(">i", data, position + 8)[0] + 12
        if position + size > len(data):
            break
        out.append((position, size))
        position += size
    return out


def expected_log_dump(path: Path, *, deep: bool = False, data_log: bool = False) -> list[str]:
    """Kafka's lines for a .log, computed from the bytes with kafka-python."""
    lines = [f"Dumping {path}", f"Log starting offset: {int(path.name.split('.')[0])}"]
    records = MemoryRecords(path.read_bytes())
    position = 0
    while (batch := records.next_batch()) is not None:
        ts_type = "LogAppendTime" if batch.timestamp_type else "CreateTime"
        lines.append(
            f"baseOffset: {batch.base_offset} lastOffset: {batch.last_offset} count: {batch.records_count} "
            f"baseSequence: {batch.base_sequence} lastSequence: {batch.last_sequence} "
            f"producerId: {batch.producer_id} producerEpoch: {batch.producer_epoch} "
            f"partitionLeaderEpoch: {batch.leader_epoch} isTransactional: {java_bool(batch.is_transactional)} "
            f"isControl: {java_bool(batch.is_control_batch)} deleteHorizonMs: OptionalLong.empty "
            f"position: {position} {ts_type}: {batch.max_timestamp} size: {batch.size_in_bytes} magic: 2 "
            f"compresscodec: {CODEC_NAMES[batch.compression_type]} crc: {batch.crc} "
            f"isvalid: {java_bool(batch.validate_crc())}"
        )
        if deep or data_log:
            for record in batch:
                sequence = (-1 if batch.base_sequence < 0
                            else (batch.base_sequence + record.offset - batch.base_offset) % 2**31)
                line = (
                    f"| offset: {record.offset} {ts_type}: {record.timestamp} "
                    f"keySize: {-1 if record.key is None else len(record.key)} "
                    f"valueSize: {-1 if record.value is None else len(record.value)} "
                    f"sequence: {sequence} headerKeys: [{','.join(k for k, _ in record.headers)}]"
                )
                if data_log:
                    if record.key is not None:
                        line += f" key: {record.key.decode('utf-8', 'replace')}"
                    if record.value is not None:
                        line += f" payload: {record.value.decode('utf-8', 'replace')}"
                lines.append(line)
        position += batch.size_in_bytes
    return lines


def build_multi_segment_log(tmp_path: Path, clock) -> Path:
    """Twelve appends over every codec: keyed and null keys, headers, a tombstone, an idempotent
    producer whose sequence wraps past 2^31-1; small segments so there are several, each indexed."""
    log = open_log(tmp_path, clock, **SMALL_SEGMENTS)
    codecs = list(CompressionType) * 2 + [CompressionType.NONE, CompressionType.ZSTD]
    for i, codec in enumerate(codecs):
        now = clock.milliseconds()
        records = [
            Record(0, now, f"key-{i}".encode(), f"value-{i}-é".encode(), (("trace", b"t"), ("empty", None))),
            Record(1, now + 1, None, f"value-{i}-nokey".encode()),
            Record(2, now - 5, f"key-{i}".encode(), None if i % 3 == 0 else b"\xff\xfebad-utf8"),
        ]
        if i == 7:
            # Producer 1000 is known to the partition with its sequence near the wrap (as if its
            # earlier 2^31 records had been written and removed by retention since): an unknown
            # producer id must start at sequence 0 (UNKNOWN_PRODUCER_ID).
            log.producer_state_manager.update(1000, 2, INT32_MAX - 2, log.log_end_offset - 1, 0, now)
            batch = encode_batch(records, compression=codec, producer_id=1000, producer_epoch=2,
                                 base_sequence=INT32_MAX - 1)
        else:
            batch = encode_batch(records, compression=codec)
        log.append_as_leader(batch, leader_epoch=4)
        clock.advance(10)
    log.close()
    return tmp_path / "topic-0"


@pytest.fixture
def log_dir(tmp_path, clock) -> Path:
    return build_multi_segment_log(tmp_path, clock)


def segment_files(directory: Path, suffix: str) -> list[Path]:
    return sorted(directory.glob(f"*{suffix}"))


def write_segment(directory: Path, base_offset: int, batches: list[bytes]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{base_offset:020d}.log"
    path.write_bytes(b"".join(batches))
    return path


# ---------------------------------------------------------------------------------------------
# .log dumps of real logs (as a subprocess)
# ---------------------------------------------------------------------------------------------


def test_dump_log_prints_kafka_batch_lines_for_every_segment_and_codec(log_dir):
    logs = segment_files(log_dir, ".log")
    assert len(logs) >= 3, "the fixture should roll several segments"

    result = run_cli("--files", files_arg(logs))

    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    expected = [line for path in logs for line in expected_log_dump(path)]
    assert result.stdout.splitlines() == expected
    codecs = {line.split("compresscodec: ")[1].split()[0] for line in expected if "compresscodec" in line}
    assert codecs == set(CODEC_NAMES.values())
    assert "lastSequence: 0 producerId: 1000 producerEpoch: 2" in result.stdout  # 2^31-2 + 2 wraps to 0


def test_dump_log_print_data_log_prints_every_record_with_key_and_payload(log_dir):
    logs = segment_files(log_dir, ".log")

    result = run_cli("--print-data-log", "--files", files_arg(logs))

    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert result.stdout.splitlines() == [line for p in logs for line in expected_log_dump(p, data_log=True)]
    # Spot-check the exact wording of one record line: null key, no headers, StringDecoder output.
    assert "| offset: 1 CreateTime: 1700000000001 keySize: -1 valueSize: 13 sequence: -1 headerKeys: [] " \
           "payload: value-0-nokey" in result.stdout.splitlines()
    assert " key: key-0 payload: value-0-é" in result.stdout
    assert " key: key-1 payload: \ufffd\ufffdbad-utf8" in result.stdout  # Java's replacement on bad UTF-8
    assert "headerKeys: [] key: key-0\n" in result.stdout  # a tombstone prints no payload
    # Sequences of the idempotent batch wrap past 2^31-1 record by record.
    assert [l.split("sequence: ")[1].split()[0] for l in result.stdout.splitlines()
            if l.startswith("| offset:") and "sequence: -1" not in l] == ["2147483646", "2147483647", "0"]


def test_dump_log_deep_iteration_prints_record_metadata_without_data(log_dir):
    log = segment_files(log_dir, ".log")[0]

    code, out, err = run("--deep-iteration", "--files", str(log))

    assert (code, err) == (0, "")
    assert out.splitlines() == expected_log_dump(log, deep=True)
    assert "payload" not in out


def test_dump_log_index_and_timeindex_list_the_entries_the_log_wrote(log_dir):
    indexes = segment_files(log_dir, ".index")
    time_indexes = segment_files(log_dir, ".timeindex")

    result = run_cli("--files", files_arg(indexes + time_indexes))

    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    expected, total_entries = [], 0
    for path in indexes:
        base = int(path.name.split(".")[0])
        index = OffsetIndex(path, base, writable=False)
        entries = index.entries_list()
        index.close()
        total_entries += len(entries)
        layout = dict(batch_layout(path.with_suffix(".log")))
        for offset, position in entries:  # every entry points at the batch ending at its offset
            assert position in layout
            header = read_header(path.with_suffix(".log").read_bytes(), position)
            assert header.last_offset == offset
        expected += [f"Dumping {path}"] + (
            [f"offset: {o} position: {p}" for o, p in entries] if entries else [f"{path} is empty."])
    for path in time_indexes:
        index = TimeIndex(path, int(path.name.split(".")[0]), writable=False)
        expected += [f"Dumping {path}"] + [f"timestamp: {t} offset: {o}" for t, o in index.entries_list()]
        index.close()
    assert result.stdout.splitlines() == expected
    assert total_entries >= 4, "index.interval.bytes should have produced several entries"


def test_dump_log_corrupt_crc_prints_isvalid_false_and_exits_nonzero_naming_position(log_dir):
    log = segment_files(log_dir, ".log")[0]
    (_, _), (position, size), *_ = batch_layout(log)
    data = bytearray(log.read_bytes())
    data[position + size - 3] ^= 0xFF  # inside the second batch's records: covered by the CRC
    log.write_bytes(bytes(data))

    result = run_cli("--files", str(log))

    assert result.returncode != 0
    expected = expected_log_dump(log)  # kafka-python agrees the batch is invalid
    assert expected[3].endswith("isvalid: false")
    assert result.stdout.splitlines() == expected  # the batches after it are still dumped
    assert f"position {position}" in result.stderr
    stored_crc = struct.unpack_from(">I", data, position + 17)[0]
    assert f"stored crc {stored_crc}" in result.stderr


# ---------------------------------------------------------------------------------------------
# .log dumps, exact formats (in process)
# ---------------------------------------------------------------------------------------------


def test_dump_log_batch_line_has_kafkas_exact_wording(tmp_path):
    batch = encode_batch(
        [Record(42, 1_700_000_000_500, b"k", b"v"), Record(43, 1_700_000_000_900, None, b"w")],
        base_offset=42, producer_id=7, producer_epoch=1, base_sequence=5, partition_leader_epoch=3,
        is_transactional=True, delete_horizon_ms=1_700_000_000_000, compression=CompressionType.NONE,
    )
    path = write_segment(tmp_path, 42, [batch])

    code, out, err = run("--files", str(path))

    assert (code, err) == (0, "")
    assert out.splitlines() == [
        f"Dumping {path}",
        "Log starting offset: 42",
        "baseOffset: 42 lastOffset: 43 count: 2 baseSequence: 5 lastSequence: 6 producerId: 7 producerEpoch: 1 "
        "partitionLeaderEpoch: 3 isTransactional: true isControl: false deleteHorizonMs: OptionalLong[1700000000000] "
        f"position: 0 CreateTime: 1700000000900 size: {len(batch)} magic: 2 compresscodec: none "
        f"crc: {read_header(batch).crc} isvalid: true",
    ]


def test_dump_log_log_append_time_topic_shows_append_time_for_batch_and_records(tmp_path, clock):
    log = open_log(tmp_path, clock, **{"message.timestamp.type": "LogAppendTime"})
    now = clock.milliseconds()
    log.append_as_leader(encode_batch([Record(0, now - 60_000, b"a", b"1"), Record(1, now - 50_000, b"b", b"2")],
                                      compression=CompressionType.LZ4))
    log.close()
    path = tmp_path / "topic-0" / "00000000000000000000.log"

    code, out, err = run("--deep-iteration", "--files", str(path))

    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert f"position: 0 LogAppendTime: {now} size:" in lines[2]
    assert lines[3:] == [
        f"| offset: 0 LogAppendTime: {now} keySize: 1 valueSize: 1 sequence: -1 headerKeys: []",
        f"| offset: 1 LogAppendTime: {now} keySize: 1 valueSize: 1 sequence: -1 headerKeys: []",
    ]
    assert lines == expected_log_dump(path, deep=True)


def test_dump_log_control_batches_print_end_txn_markers_and_control_types(tmp_path):
    t = 1_700_000_000_000
    data = encode_batch([Record(0, t, b"k", b"v")], producer_id=9, producer_epoch=0, base_sequence=0,
                        is_transactional=True)
    commit = encode_end_txn_marker(9, 0, ControlRecordType.COMMIT, coordinator_epoch=5, offset=1, timestamp=t + 1)
    abort = encode_end_txn_marker(9, 0, ControlRecordType.ABORT, coordinator_epoch=6, offset=2, timestamp=t + 2)
    leader_change = encode_batch([Record(3, t + 3, struct.pack(">hh", 0, 2), b"")], base_offset=3, is_control=True)
    unknown = encode_batch([Record(4, t + 4, struct.pack(">hh", 0, 9), None)], base_offset=4, is_control=True)
    path = write_segment(tmp_path, 0, [data, commit, abort, leader_change, unknown])

    code, out, err = run("--print-data-log", "--files", str(path))

    assert (code, err) == (0, "")
    records = [line for line in out.splitlines() if line.startswith("|")]
    assert records == [
        "| offset: 0 CreateTime: 1700000000000 keySize: 1 valueSize: 1 sequence: 0 headerKeys: [] key: k payload: v",
        "| offset: 1 CreateTime: 1700000000001 keySize: 4 valueSize: 6 sequence: -1 headerKeys: [] "
        "endTxnMarker: COMMIT coordinatorEpoch: 5",
        "| offset: 2 CreateTime: 1700000000002 keySize: 4 valueSize: 6 sequence: -1 headerKeys: [] "
        "endTxnMarker: ABORT coordinatorEpoch: 6",
        "| offset: 3 CreateTime: 1700000000003 keySize: 4 valueSize: 0 sequence: -1 headerKeys: [] "
        "controlType: LEADER_CHANGE(2)",
        "| offset: 4 CreateTime: 1700000000004 keySize: 4 valueSize: -1 sequence: -1 headerKeys: [] "
        "controlType: UNKNOWN(9)",
    ]
    batch_lines = [line for line in out.splitlines() if line.startswith("baseOffset")]
    assert "isTransactional: true isControl: true" in batch_lines[1]
    assert f"position: {len(data)} CreateTime: 1700000000001 size: 78 " in batch_lines[1]


def test_dump_log_skip_record_metadata_prints_only_key_and_payload_like_kafka(tmp_path):
    t = 1_700_000_000_000
    batch = encode_batch([Record(0, t, b"k0", b"v0"), Record(1, t, None, b"v1"), Record(2, t, b"k2", None),
                          Record(3, t, None, None)])
    path = write_segment(tmp_path, 0, [batch])

    code, out, err = run("--print-data-log", "--skip-record-metadata", "--files", str(path))

    assert (code, err) == (0, "")
    # Kafka prints the "| " indent only in front of a key: a null-key record starts with " payload:".
    assert out.splitlines()[3:] == ["| key: k0 payload: v0", " payload: v1", "| key: k2", ""]


def test_dump_log_non_consecutive_offsets_are_reported_newest_first_without_failing(tmp_path):
    t = 1_700_000_000_000
    compacted = [
        encode_batch([Record(0, t, b"a", b"1"), Record(1, t, b"b", b"1"), Record(3, t, b"c", b"1")]),
        encode_batch([Record(7, t, b"a", b"2"), Record(8, t, b"b", b"2")], base_offset=7),
    ]
    path = write_segment(tmp_path, 0, compacted)

    code, out, err = run("--deep-iteration", "--files", str(path))

    assert code == 0
    assert err.splitlines() == [
        f"Non-consecutive offsets in {path.resolve()}",
        "  3 is followed by 7",
        "  1 is followed by 3",
    ]


def test_dump_log_truncated_tail_reports_invalid_bytes_and_position(log_dir):
    log = segment_files(log_dir, ".log")[0]
    *_, (position, size) = batch_layout(log)
    data = log.read_bytes()
    log.write_bytes(data[: position + size - 5])
    expected = expected_log_dump(log)  # kafka-python also stops before the torn batch

    code, out, err = run("--files", str(log))

    assert code != 0
    assert out.splitlines() == expected + [f"Found {size - 5} invalid bytes at the end of {log.name}"]
    assert f"position {position} declares {size} bytes but only {size - 5} remain" in err


def test_dump_log_too_short_tail_reports_invalid_bytes(log_dir):
    log = segment_files(log_dir, ".log")[0]
    log.write_bytes(log.read_bytes() + b"\x00" * 10)

    code, out, err = run("--files", str(log))

    assert code != 0
    assert out.splitlines()[-1] == f"Found 10 invalid bytes at the end of {log.name}"
    assert f"the last 10 bytes, from position {log.stat().st_size - 10}" in err


@pytest.mark.parametrize(
    "field_offset, fmt, value, reason",
    [
        (8, ">i", 3, "declares size 3, smaller than the minimum record overhead (14)"),
        (16, ">b", 7, "has unknown magic 7"),
        (8, ">i", 40, "declares 52 bytes, fewer than the 61-byte v2 header"),
    ],
    ids=["size-below-14", "bad-magic", "size-below-v2-header"],
)
def test_dump_log_unparseable_header_stops_the_file_naming_the_position(log_dir, field_offset, fmt, value, reason):
    log = segment_files(log_dir, ".log")[0]
    (first_pos, first_size), (position, _), *_ = batch_layout(log)
    data = bytearray(log.read_bytes())
    struct.pack_into(fmt, data, position + field_offset, value)
    log.write_bytes(bytes(data))

    code, out, err = run("--files", str(log))

    assert code != 0
    lines = out.splitlines()
    assert len([line for line in lines if line.startswith("baseOffset")]) == 1  # stops after the first batch
    assert lines[-1] == f"Found {len(data) - position} invalid bytes at the end of {log.name}"
    assert f"record batch at position {position} {reason}" in err


def test_dump_log_legacy_magic_entry_is_printed_and_reported(tmp_path):
    # A v1 message (offset 0, CreateTime 1234, key "k", value "v") as old Kafka wrote it.
    body = struct.pack(">bbq", 1, 0, 1234) + struct.pack(">i", 1) + b"k" + struct.pack(">i", 1) + b"v"
    crc = zlib.crc32(body)
    legacy = struct.pack(">qiI", 0, 4 + len(body), crc) + body
    v2 = encode_batch([Record(1, 1_700_000_000_000, None, b"x")], base_offset=1)
    path = write_segment(tmp_path, 0, [legacy, v2])

    code, out, err = run("--files", str(path))

    assert code != 0
    lines = out.splitlines()
    assert lines[2] == (f"offset: 0 position: 0 CreateTime: 1234 size: {len(legacy)} magic: 1 "
                        f"compresscodec: none crc: {crc} isvalid: true")
    assert lines[3].startswith(f"baseOffset: 1 lastOffset: 1 count: 1 ")
    assert f"position: {len(legacy)} " in lines[3]
    assert "record batch at position 0 uses the legacy message format (magic 1)" in err


def test_dump_log_max_bytes_stops_quietly_inside_a_batch(log_dir):
    log = segment_files(log_dir, ".log")[0]
    (_, size0), (_, size1), *rest = batch_layout(log)
    assert rest

    code, out, err = run("--max-bytes", str(size0 + size1 + 10), "--files", str(log))

    assert (code, err) == (0, "")
    assert out.splitlines() == expected_log_dump(log)[:4]  # two batches, no "Found ... invalid bytes"


# ---------------------------------------------------------------------------------------------
# indexes
# ---------------------------------------------------------------------------------------------


def _index_with_entries(log_dir: Path) -> Path:
    return next(p for p in segment_files(log_dir, ".index") if p.stat().st_size >= 16)


def test_dump_log_verify_index_only_is_silent_for_a_good_index_and_reports_a_wrong_entry(log_dir):
    index = _index_with_entries(log_dir)
    time_index = index.with_suffix(".timeindex")
    assert run("--verify-index-only", "--files", files_arg([index, time_index])) == (
        0, f"Dumping {index}\nDumping {time_index}\n", "")

    base = int(index.name.split(".")[0])
    data = bytearray(index.read_bytes())
    relative, position = struct.unpack_from(">ii", data, 8)
    struct.pack_into(">i", data, 8, relative + 1)  # second entry now claims one offset too many
    index.write_bytes(bytes(data))

    code, out, err = run("--verify-index-only", "--files", str(index))

    assert code != 0
    assert out == f"Dumping {index}\n"
    assert err.splitlines() == [
        f"Mismatches in :{index.resolve()}",
        f"  Index offset: {base + relative + 1}, log offset: {base + relative}",
    ]


def test_dump_log_verify_time_index_reports_a_wrong_timestamp(log_dir):
    time_index = _index_with_entries(log_dir).with_suffix(".timeindex")
    data = bytearray(time_index.read_bytes())
    timestamp, relative = struct.unpack_from(">qi", data, 0)
    struct.pack_into(">q", data, 0, timestamp + 3)
    time_index.write_bytes(bytes(data))

    code, out, err = run("--files", str(time_index))

    assert code != 0
    assert out.splitlines()[1] == f"timestamp: {timestamp + 3} offset: {int(time_index.name.split('.')[0]) + relative}"
    assert err.splitlines() == [
        f"Found timestamp mismatch in :{time_index.resolve()}",
        f"  Index timestamp: {timestamp + 3}, log timestamp: {timestamp}",
    ]


def test_dump_log_index_sanity_check_passes_for_indexes_the_broker_wrote(log_dir):
    index = _index_with_entries(log_dir)
    time_index = index.with_suffix(".timeindex")

    code, out, err = run("--index-sanity-check", "--files", files_arg([index, time_index]))

    assert (code, err) == (0, "")
    assert out.splitlines() == [f"Dumping {index}", f"{index} passed sanity check.",
                                f"Dumping {time_index}", f"{time_index} passed sanity check."]


def test_dump_log_zero_padded_timeindex_fails_sanity_check_but_dumps_up_to_the_padding(log_dir):
    time_index = _index_with_entries(log_dir).with_suffix(".timeindex")
    good = run("--files", str(time_index))[1]
    entries = (time_index.stat().st_size) // 12
    time_index.write_bytes(time_index.read_bytes() + b"\x00" * 36)  # an untrimmed file after a crash

    code, out, err = run("--index-sanity-check", "--files", str(time_index))

    assert code != 0
    assert out == f"Dumping {time_index}\n"
    assert f"{time_index} failed sanity check (last entry at byte position {(entries + 2) * 12})" in err
    assert "the last timestamp is 0 which is less than the first timestamp" in err
    # A plain dump stops at the first zero entry, as Kafka's does.
    assert run("--files", str(time_index)) == (0, good, "")


def test_dump_log_empty_index_is_reported_empty(tmp_path, clock):
    log = open_log(tmp_path, clock)
    log.append_as_leader(encode_batch([Record(0, clock.milliseconds(), b"k", b"v")]))
    log.close()
    index = tmp_path / "topic-0" / "00000000000000000000.index"

    assert run("--files", str(index)) == (0, f"Dumping {index}\n{index} is empty.\n", "")


def test_dump_log_index_entry_past_the_log_end_is_an_error(log_dir):
    index = _index_with_entries(log_dir)
    data = bytearray(index.read_bytes())
    struct.pack_into(">i", data, 4, 1_000_000)
    index.write_bytes(bytes(data))

    code, out, err = run("--files", str(index))

    assert code != 0
    assert "offset:" in out.splitlines()[1] and "position: 1000000" in out.splitlines()[1]
    assert "position 1000000 is outside" in err


# ---------------------------------------------------------------------------------------------
# files and command line
# ---------------------------------------------------------------------------------------------


def test_dump_log_missing_file_fails_but_the_other_files_are_dumped(log_dir):
    log = segment_files(log_dir, ".log")[0]
    missing = log_dir / "00000000000000099999.log"
    unknown = log_dir / "leader-epoch-checkpoint"

    result = run_cli("--files", files_arg([missing, unknown, log]))

    assert result.returncode != 0
    assert result.stdout.splitlines() == [f"Dumping {missing}", f"Dumping {unknown}", *expected_log_dump(log)]
    assert result.stderr.splitlines() == [
        f"Error: {missing}: No such file or directory",
        f"Ignoring unknown file {unknown}",
    ]


def test_dump_log_unknown_files_alone_are_ignored_with_exit_zero(tmp_path):
    other = tmp_path / "notes.txt"
    other.write_text("x")

    assert run("--files", str(other)) == (0, f"Dumping {other}\n", f"Ignoring unknown file {other}\n")


def test_dump_log_requires_files_and_cli_lists_the_subcommand(capsys):
    assert dump_log.main([]) == 2
    assert "--files" in capsys.readouterr().err
    assert cli.main(["--help"]) == 0
    assert "dump-log" in capsys.readouterr().out
    assert cli.main([]) == 2


# ---------------------------------------------------------------------------------------------
# .snapshot (producer state)
# ---------------------------------------------------------------------------------------------


def test_dump_log_prints_producer_snapshots_as_kafka_does(log_dir):
    """The fixture's log rolled and closed: a snapshot at every roll and at the end; producer
    1000 appears from the roll after its batch on, with its one cached batch (wrapped sequence)."""
    snapshots = segment_files(log_dir, ".snapshot")
    assert len(snapshots) >= 3
    result = run_cli("--files", files_arg([snapshots[0], snapshots[-1]]))
    assert (result.returncode, result.stderr) == (0, "")
    lines = result.stdout.splitlines()
    assert lines[0] == f"Dumping {snapshots[0]}"
    assert lines[-2] == f"Dumping {snapshots[-1]}"
    assert lines[-1] == ("producerId: 1000 producerEpoch: 2 coordinatorEpoch: -1 "
                         "currentTxnFirstOffset: OptionalLong.empty lastTimestamp: 1700000000071 "
                         "firstSequence: 2147483646 lastSequence: 0 lastOffset: 23 offsetDelta: 2 "
                         "timestamp: 1700000000071")  # the batch max timestamp (now + 1)


def test_dump_log_snapshot_golden_file_and_an_entry_without_a_batch(tmp_path):
    """The one-entry golden snapshot of the plan (Kafka's bytes) and an entry with no batch."""
    golden = tmp_path / "00000000000000000042.snapshot"
    golden.write_bytes(bytes.fromhex(
        "0001eefd49ba00000001" "00000000000003e8" "0000" "00000009" "0000000000000029" "00000009"
        "0000018bcfe56800" "ffffffff" "ffffffffffffffff"))
    from triolog.broker.storage.producer_state import ProducerStateEntry, encode_snapshot
    bare = tmp_path / "00000000000000000050.snapshot"
    bare.write_bytes(bytes(encode_snapshot([ProducerStateEntry(7, 3, last_timestamp=5)])))
    code, out, err = run("--files", f"{golden},{bare}")
    assert (code, err) == (0, "")
    assert out.splitlines() == [
        f"Dumping {golden}",
        "producerId: 1000 producerEpoch: 0 coordinatorEpoch: -1 currentTxnFirstOffset: OptionalLong.empty "
        "lastTimestamp: 1700000000000 firstSequence: 0 lastSequence: 9 lastOffset: 41 offsetDelta: 9 "
        "timestamp: 1700000000000",
        f"Dumping {bare}",
        "producerId: 7 producerEpoch: 3 coordinatorEpoch: -1 currentTxnFirstOffset: OptionalLong.empty "
        "lastTimestamp: 5 ",
    ]


def test_dump_log_corrupt_snapshot_is_an_error_and_the_next_file_is_dumped(tmp_path):
    corrupt = tmp_path / "00000000000000000010.snapshot"
    corrupt.write_bytes(bytes.fromhex("000148674bc800000000"))  # CRC off by one
    empty = tmp_path / "00000000000000000011.snapshot"
    empty.write_bytes(bytes.fromhex("000148674bc700000000"))
    code, out, err = run("--files", f"{corrupt},{empty}")
    assert code == 1
    assert out.splitlines() == [f"Dumping {corrupt}", f"Dumping {empty}"]
    assert err.startswith(f"Error: {corrupt}: snapshot failed its CRC check")


# ---------------------------------------------------------------------------------------------
# .txnindex (aborted transactions)
# ---------------------------------------------------------------------------------------------


def test_dump_log_prints_txnindex_entries_as_kafka_does(tmp_path, clock):
    """Kafka's dumpTxnIndex line per aborted transaction, from the .txnindex the log wrote."""
    log = open_log(tmp_path, clock)
    for producer_id, committed in ((7, False), (8, True), (9, False)):
        log.append_as_leader(encode_batch([Record(0, clock.milliseconds(), b"k", b"v")], producer_id=producer_id,
                                          producer_epoch=1, base_sequence=0, is_transactional=True))
        log.append_end_txn_marker(producer_id, 1, 0, committed=committed, leader_epoch=0)
    log.close()
    path = log.directory / "00000000000000000000.txnindex"
    code, out, err = run("--files", str(path))
    assert (code, err) == (0, "")
    assert out.splitlines() == [
        f"Dumping {path}",
        "version: 0 producerId: 7 firstOffset: 0 lastOffset: 1 lastStableOffset: 2",
        "version: 0 producerId: 9 firstOffset: 4 lastOffset: 5 lastStableOffset: 6",
    ]


def test_dump_log_reports_a_torn_or_unknown_txnindex_entry(tmp_path):
    path = tmp_path / "00000000000000000000.txnindex"
    entry = struct.pack(">hqqqq", 0, 7, 0, 1, 2)
    path.write_bytes(entry + entry[:10])
    code, out, err = run("--files", str(path))
    assert code == 1
    assert "version: 0 producerId: 7 firstOffset: 0 lastOffset: 1 lastStableOffset: 2" in out
    assert "10 bytes at position 34" in err
    path.write_bytes(struct.pack(">hqqqq", 3, 7, 0, 1, 2))
    code, out, err = run("--files", str(path))
    assert code == 1 and "version 3" in err
