"""The partition log: append, roll, read, timestamp lookup, validation, flush and files on disk."""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from triolog.broker.storage.errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
    UnsupportedForMessageFormatError,
)
from triolog.broker.storage.fs import OsFileSystem
from triolog.broker.storage.index import OffsetIndex, TimeIndex
from triolog.broker.storage.log import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP, Log
from triolog.config.log_config import LogConfig
from triolog.protocol.record_batch import CompressionType, TimestampType, check_batch, read_header
from triolog.protocol.records import Record, decode_batch, encode_batch, iter_batches

from .helpers import open_log, producer_batch, read_all_records


def test_log_append_assigns_consecutive_offsets_and_reads_them_back(tmp_path, clock):
    log = open_log(tmp_path, clock)
    now = clock.milliseconds()
    infos = [log.append_as_leader(producer_batch(3, timestamp=now, tag=f"b{i}")) for i in range(4)]
    assert [(i.first_offset, i.last_offset) for i in infos] == [(0, 2), (3, 5), (6, 8), (9, 11)]
    assert log.log_end_offset == log.high_watermark == 12
    records = read_all_records(log)
    assert [r.offset for r in records] == list(range(12))
    assert records[4].value.startswith(b"b11:")
    # The stored batch differs from the producer's only in base offset and leader epoch.
    stored = log.read(3, 1 << 20).region.read_bytes()
    header = check_batch(stored[: read_header(stored).size])
    assert header.base_offset == 3 and header.partition_leader_epoch == 0


def test_log_read_rejects_offsets_outside_the_log(tmp_path, clock):
    log = open_log(tmp_path, clock)
    log.append_as_leader(producer_batch(2, timestamp=clock.milliseconds()))
    with pytest.raises(OffsetOutOfRangeError):
        log.read(3, 1000)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(-1, 1000)
    assert log.read(2, 1000).region is None  # at the log end: nothing yet, not an error


def test_log_read_returns_whole_batches_within_max_bytes(tmp_path, clock):
    log = open_log(tmp_path, clock, **{"index.interval.bytes": "100"})
    batch = producer_batch(1, timestamp=clock.milliseconds(), value_size=50)
    for _ in range(20):
        log.append_as_leader(batch)
    size = len(batch)
    info = log.read(0, size * 5 + size // 2)
    assert info.region.length == size * 5
    assert [b.header.base_offset for b in iter_batches(info.region.read_bytes())] == [0, 1, 2, 3, 4]
    # from the middle, the batch holding the offset comes first
    info = log.read(7, size * 3)
    assert [b.header.base_offset for b in iter_batches(info.region.read_bytes())] == [7, 8, 9]


def test_log_read_returns_one_batch_larger_than_max_bytes(tmp_path, clock):
    log = open_log(tmp_path, clock)
    big = producer_batch(5, timestamp=clock.milliseconds(), value_size=1000)
    log.append_as_leader(big)
    log.append_as_leader(big)
    info = log.read(0, 10)
    assert info.region.length == len(big)
    assert log.read(0, 10, min_one_message=False).region is None


def test_log_read_from_an_offset_inside_a_batch_starts_at_that_batch(tmp_path, clock):
    log = open_log(tmp_path, clock)
    log.append_as_leader(producer_batch(10, timestamp=clock.milliseconds()))
    batches = list(iter_batches(log.read(4, 1 << 20).region.read_bytes()))
    assert batches[0].header.base_offset == 0 and batches[0].header.last_offset == 9


def test_log_rolls_on_segment_bytes_with_kafka_file_names_and_index_contents(tmp_path, clock):
    log = open_log(tmp_path, clock, **{"segment.bytes": "1000", "index.interval.bytes": "1"})
    now = clock.milliseconds()
    batch_size = len(producer_batch(2, timestamp=now))
    for i in range(10):
        log.append_as_leader(producer_batch(2, timestamp=now + i))
    per_segment = 1000 // batch_size
    expected_bases = [i * per_segment * 2 for i in range((10 + per_segment - 1) // per_segment)]
    assert log.segments.base_offsets() == expected_bases
    directory = tmp_path / "topic-0"
    names = sorted(p.name for p in directory.iterdir() if p.suffix in (".log", ".index", ".timeindex"))
    assert names == sorted(
        f"{base:020d}{suffix}" for base in expected_bases for suffix in (".log", ".index", ".timeindex")
    )
    assert log.roll_counts["size"] == len(expected_bases) - 1
    # Rolled segments are sealed by the flush a roll schedules (the broker runs it on a worker).
    log.flush_pending()
    # An inactive segment's indexes are trimmed to their entries. With index.interval.bytes=1
    # every batch but the first of a segment is indexed with (its last offset, its position).
    first = (directory / f"{0:020d}.index").read_bytes()
    entries = [struct.unpack_from(">ii", first, i) for i in range(0, len(first), 8)]
    assert entries == [(2 * k + 1, k * batch_size) for k in range(1, per_segment)]
    times = (directory / f"{0:020d}.timeindex").read_bytes()
    time_entries = [struct.unpack_from(">qi", times, i) for i in range(0, len(times), 12)]
    assert time_entries == [(now + k, 2 * k + 1) for k in range(1, per_segment)]
    # The active segment's index is preallocated to segment.index.bytes.
    assert (directory / f"{expected_bases[-1]:020d}.index").stat().st_size == 10485760


def test_log_index_entries_follow_index_interval_bytes(tmp_path, clock):
    log = open_log(tmp_path, clock, **{"index.interval.bytes": "4096"})
    batch = producer_batch(1, timestamp=clock.milliseconds(), value_size=1000)
    for _ in range(20):
        log.append_as_leader(batch)
    index = log.active_segment.offset_index
    size = len(batch)
    # An entry is added once more than 4096 bytes were appended since the last one.
    per_entry = 4096 // size + 1
    assert [tuple(index.entry(i)) for i in range(index.entries)] == [
        (k * per_entry, k * per_entry * size) for k in range(1, index.entries + 1)
    ]
    assert index.entries == (20 - 1) // per_entry


def test_log_rolls_on_segment_ms_measured_from_the_first_record_timestamp(tmp_path, clock):
    log = open_log(tmp_path, clock, **{"segment.ms": "1000"})
    t0 = clock.milliseconds()
    log.append_as_leader(producer_batch(1, timestamp=t0))
    log.append_as_leader(producer_batch(1, timestamp=t0 + 1000))  # exactly segment.ms: no roll
    assert log.num_segments == 1
    info = log.append_as_leader(producer_batch(1, timestamp=t0 + 1001))
    assert info.roll_reason == "time" and log.segments.base_offsets() == [0, 2]


def test_log_time_roll_ignores_wall_clock_for_old_timestamps(tmp_path, clock):
    """KAFKA-4099: copying old data must not roll on every append."""
    log = open_log(tmp_path, clock, **{"segment.ms": "1000", "message.timestamp.before.max.ms": str(10**12)})
    old = clock.milliseconds() - 10**9
    for i in range(5):
        log.append_as_leader(producer_batch(1, timestamp=old + i))
    assert log.num_segments == 1


def test_log_rolls_on_jittered_segment_ms(tmp_path, clock):
    log = open_log(tmp_path, clock, **{"segment.ms": "1000", "segment.jitter.ms": "500"})
    jitter = log.active_segment.rolling_jitter_ms
    assert 0 <= jitter < 500
    t0 = clock.milliseconds()
    log.append_as_leader(producer_batch(1, timestamp=t0))
    log.append_as_leader(producer_batch(1, timestamp=t0 + 1000 - jitter))
    assert log.num_segments == 1
    log.append_as_leader(producer_batch(1, timestamp=t0 + 1001 - jitter))
    assert log.num_segments == 2


def test_log_without_timestamps_rolls_on_segment_age_by_the_clock(tmp_path, clock):
    log = open_log(tmp_path, clock, **{"segment.ms": "1000"})
    log.append_as_leader(producer_batch(1, timestamp=-1))
    clock.advance(1001)
    info = log.append_as_leader(producer_batch(1, timestamp=-1))
    assert info.roll_reason == "time"


def test_log_rolls_when_the_index_is_full(tmp_path, clock):
    # 24 bytes: three offset index slots, two time index slots (one reserved for the roll).
    log = open_log(tmp_path, clock, **{"segment.index.bytes": "24", "index.interval.bytes": "0"})
    now = clock.milliseconds()
    for i in range(6):
        log.append_as_leader(producer_batch(1, timestamp=now + i))
    assert log.roll_counts["index_full"] >= 1
    assert log.segments.base_offsets()[:2] == [0, 2]
    assert [r.offset for r in read_all_records(log)] == list(range(6))


def test_segment_rolls_on_offset_overflow(tmp_path, clock):
    from triolog.broker.storage.segment import RollParams

    log = open_log(tmp_path, clock)
    log.append_as_leader(producer_batch(1, timestamp=clock.milliseconds()))
    segment = log.active_segment
    params = dict(max_segment_ms=10**9, max_segment_bytes=10**9, max_timestamp_in_messages=clock.milliseconds(),
                  messages_size=100, now_ms=clock.milliseconds())
    assert segment.should_roll(RollParams(max_offset_in_messages=2**31 - 1, **params)) is None
    assert segment.should_roll(RollParams(max_offset_in_messages=2**31, **params)) == "offset_overflow"


def test_log_roll_of_an_empty_active_segment_replaces_it(tmp_path, clock):
    """KAFKA-6388: never two segments with one base offset."""
    log = open_log(tmp_path, clock)
    log.roll()
    log.roll()
    assert log.segments.base_offsets() == [0]
    log.append_as_leader(producer_batch(1, timestamp=clock.milliseconds()))
    log.roll()
    assert log.segments.base_offsets() == [0, 1]


def test_log_append_time_topic_stamps_batches(tmp_path, clock):
    log = open_log(tmp_path, clock, **{"message.timestamp.type": "LogAppendTime"})
    info = log.append_as_leader(producer_batch(3, timestamp=5))
    assert info.log_append_time_ms == clock.milliseconds()
    batch = decode_batch(log.read(0, 1 << 20).region.read_bytes())
    assert batch.header.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert [r.timestamp for r in batch.records] == [clock.milliseconds()] * 3


def test_log_recompresses_to_the_topic_codec(tmp_path, clock):
    log = open_log(tmp_path, clock, **{"compression.type": "gzip"})
    log.append_as_leader(producer_batch(1, timestamp=clock.milliseconds()))
    log.append_as_leader(producer_batch(4, timestamp=clock.milliseconds(), compression=CompressionType.LZ4))
    batches = list(iter_batches(log.read(0, 1 << 20).region.read_bytes()))
    assert [b.header.compression for b in batches] == [CompressionType.GZIP, CompressionType.GZIP]
    assert [r.offset for b in batches for r in b.records] == [0, 1, 2, 3, 4]


@pytest.mark.parametrize(
    "mutate, error",
    [
        (lambda b: b[:17] + bytes([b[17] ^ 1]) + b[18:], CorruptRecordError),  # crc
        (lambda b: b[:-1] + bytes([b[-1] ^ 0xFF]), CorruptRecordError),  # record bytes
        (lambda b: b[:-3], CorruptRecordError),  # truncated
        (lambda b: struct.pack(">q", 7) + b[8:], InvalidRecordError),  # base offset from a client
        (lambda b: b + b, InvalidRecordError),  # two batches for one partition
        (lambda b: b[:16] + b"\x01" + b[17:], UnsupportedForMessageFormatError),  # legacy magic
        (lambda b: b[:16] + b"\x07" + b[17:], CorruptRecordError),  # unknown magic
        (lambda b: b"", InvalidRecordError),
    ],
)
def test_log_rejects_a_bad_batch_and_writes_nothing(tmp_path, clock, mutate, error):
    log = open_log(tmp_path, clock)
    good = producer_batch(2, timestamp=clock.milliseconds())
    log.append_as_leader(good)
    size_before = log.size
    with pytest.raises(error):
        log.append_as_leader(mutate(good))
    assert log.size == size_before and log.log_end_offset == 2
    log.append_as_leader(good)
    assert [r.offset for r in read_all_records(log)] == [0, 1, 2, 3]


def test_log_rejects_a_batch_over_max_message_bytes(tmp_path, clock):
    log = open_log(tmp_path, clock, **{"max.message.bytes": "200"})
    with pytest.raises(RecordTooLargeError, match="max.message.bytes"):
        log.append_as_leader(producer_batch(1, timestamp=clock.milliseconds(), value_size=300))
    assert log.size == 0


def test_log_rejects_timestamps_outside_the_allowed_window(tmp_path, clock):
    log = open_log(tmp_path, clock, **{"message.timestamp.before.max.ms": "1000",
                                       "message.timestamp.after.max.ms": "500"})
    now = clock.milliseconds()
    with pytest.raises(InvalidTimestampError, match="before"):
        log.append_as_leader(producer_batch(1, timestamp=now - 1001))
    with pytest.raises(InvalidTimestampError, match="after"):
        log.append_as_leader(producer_batch(1, timestamp=now + 501))
    log.append_as_leader(producer_batch(1, timestamp=now - 1000))
    log.append_as_leader(producer_batch(1, timestamp=now + 500))
    assert log.log_end_offset == 2


def test_log_rejects_a_client_setting_log_append_time(tmp_path, clock):
    log = open_log(tmp_path, clock)
    batch = encode_batch([Record(0, clock.milliseconds(), b"k", b"v")], timestamp_type=TimestampType.LOG_APPEND_TIME)
    with pytest.raises(InvalidTimestampError):
        log.append_as_leader(batch)


def test_compacted_log_rejects_records_without_keys(tmp_path, clock):
    log = open_log(tmp_path, clock, **{"cleanup.policy": "compact"})
    with pytest.raises(InvalidRecordError, match="key"):
        log.append_as_leader(producer_batch(2, timestamp=clock.milliseconds(), keyed=False))
    log.append_as_leader(producer_batch(2, timestamp=clock.milliseconds(), keyed=True))
    assert log.log_end_offset == 2


def _log_with_timestamps(tmp_path, clock, timestamps_per_batch):
    log = open_log(tmp_path, clock, **{"segment.bytes": "300", "index.interval.bytes": "1",
                                       "message.timestamp.before.max.ms": str(10**12)})
    for stamps in timestamps_per_batch:
        records = [Record(i, ts, b"k", b"v") for i, ts in enumerate(stamps)]
        log.append_as_leader(encode_batch(records))
    return log


def test_log_offset_for_timestamp_finds_the_first_record_at_or_after_it(tmp_path, clock):
    base = clock.milliseconds() - 100_000
    stamps = [[base + 10 * b + i for i in range(3)] for b in range(12)]
    log = _log_with_timestamps(tmp_path, clock, stamps)
    assert log.num_segments > 3
    flat = [ts for batch in stamps for ts in batch]
    for target in (base - 5, base, base + 1, base + 33, base + 57, flat[-1]):
        expected = next(i for i, ts in enumerate(flat) if ts >= target)
        assert log.fetch_offset_by_timestamp(target) == (flat[expected], expected)
    assert log.fetch_offset_by_timestamp(flat[-1] + 1) is None


def test_log_offset_for_timestamp_with_out_of_order_timestamps(tmp_path, clock):
    base = clock.milliseconds() - 100_000
    log = _log_with_timestamps(tmp_path, clock, [[base + 50, base + 10], [base + 20, base + 60], [base + 30]])
    assert log.fetch_offset_by_timestamp(base + 15) == (base + 50, 0)
    assert log.fetch_offset_by_timestamp(base + 55) == (base + 60, 3)
    assert log.fetch_offset_by_timestamp(base - 1) == (base + 50, 0)


def test_log_special_timestamps_earliest_latest_and_max(tmp_path, clock):
    base = clock.milliseconds() - 100_000
    log = _log_with_timestamps(tmp_path, clock, [[base, base + 5], [base + 90, base + 3], [base + 7]])
    assert log.fetch_offset_by_timestamp(EARLIEST_TIMESTAMP) == (-1, 0)
    assert log.fetch_offset_by_timestamp(LATEST_TIMESTAMP) == (-1, 5)
    assert log.fetch_offset_by_timestamp(MAX_TIMESTAMP) == (base + 90, 2)
    log.maybe_increment_log_start_offset(3)
    assert log.fetch_offset_by_timestamp(EARLIEST_TIMESTAMP) == (-1, 3)
    assert log.fetch_offset_by_timestamp(base) == (base + 3, 3)


def test_log_start_offset_moves_up_only_to_the_high_watermark(tmp_path, clock):
    log = open_log(tmp_path, clock)
    log.append_as_leader(producer_batch(5, timestamp=clock.milliseconds()))
    assert log.maybe_increment_log_start_offset(3) == 3
    assert log.maybe_increment_log_start_offset(1) == 3  # never backwards
    with pytest.raises(OffsetOutOfRangeError):
        log.maybe_increment_log_start_offset(6)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(2, 100)
    # the batch holding offset 3 is returned whole; the consumer skips 0..2
    assert [r.offset for r in read_all_records(log, 3)] == [3, 4]


def test_log_flush_messages_moves_the_recovery_point(tmp_path, clock):
    log = open_log(tmp_path, clock, **{"flush.messages": "4"})
    log.append_as_leader(producer_batch(2, timestamp=clock.milliseconds()))
    assert log.recovery_point == 0
    log.append_as_leader(producer_batch(2, timestamp=clock.milliseconds()))
    assert log.recovery_point == 4


def test_log_roll_schedules_a_flush_of_the_rolled_segment(tmp_path, clock):
    log = open_log(tmp_path, clock, **{"segment.bytes": "200"})
    for _ in range(3):
        log.append_as_leader(producer_batch(1, timestamp=clock.milliseconds(), value_size=80))
    assert log.num_segments == 3 and log.recovery_point == 0  # rolls never fsync inline
    assert log.flush_pending() is True
    assert log.recovery_point == log.active_segment.base_offset
    assert log.flush_pending() is False


def test_log_flush_ms_makes_a_flush_due(tmp_path, clock):
    log = open_log(tmp_path, clock, **{"flush.ms": "1000"})
    log.append_as_leader(producer_batch(1, timestamp=clock.milliseconds()))
    assert log.flush_pending() is False
    clock.advance(1000)
    assert log.flush_pending() is True and log.recovery_point == 1


def test_log_close_trims_the_active_segment_indexes(tmp_path, clock):
    log = open_log(tmp_path, clock, **{"index.interval.bytes": "1"})
    for i in range(3):
        log.append_as_leader(producer_batch(1, timestamp=clock.milliseconds() + i))
    log.close()
    directory = tmp_path / "topic-0"
    assert (directory / f"{0:020d}.index").stat().st_size == 2 * OffsetIndex.ENTRY_SIZE
    assert (directory / f"{0:020d}.timeindex").stat().st_size == 2 * TimeIndex.ENTRY_SIZE


def test_log_reopened_after_clean_close_continues_offsets(tmp_path, clock):
    log = open_log(tmp_path, clock, **{"segment.bytes": "300"})
    for _ in range(5):
        log.append_as_leader(producer_batch(2, timestamp=clock.milliseconds()))
    bases = log.segments.base_offsets()
    log.close()
    reopened = Log.open(tmp_path / "topic-0", log.config, clock=clock, recovery_point=10, had_clean_shutdown=True)
    assert reopened.segments.base_offsets() == bases
    assert reopened.log_end_offset == 10
    # nothing but the active segment was read
    assert not any(s.lazy_offset_index.is_loaded for s in list(reopened.segments)[:-1])
    reopened.append_as_leader(producer_batch(1, timestamp=clock.milliseconds()))
    assert [r.offset for r in read_all_records(reopened)] == list(range(11))


def test_log_refuses_a_directory_that_is_not_topic_partition(tmp_path, clock):
    with pytest.raises(Exception, match="topic-partition"):
        Log.open(tmp_path / "nodash", LogConfig(), clock=clock)


@pytest.mark.parametrize("segment_index_bytes", ["4", "8", "12"])
def test_log_accepts_index_sizes_below_one_entry_and_rolls_every_batch(tmp_path, clock, segment_index_bytes):
    log = open_log(tmp_path, clock, **{"segment.index.bytes": segment_index_bytes, "index.interval.bytes": "0"})
    for i in range(4):
        log.append_as_leader(producer_batch(1, timestamp=clock.milliseconds() + i))
    assert log.segments.base_offsets() == [0, 1, 2, 3]
    assert log.roll_counts["index_full"] == 3
    log.close()
    reopened = Log.open(tmp_path / "topic-0", log.config, clock=clock, recovery_point=4, had_clean_shutdown=True)
    assert [r.offset for r in read_all_records(reopened)] == [0, 1, 2, 3]
    assert [s.max_timestamp_so_far for s in reopened.segments] == [clock.milliseconds() + i for i in range(4)]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    batches=st.lists(st.tuples(st.integers(1, 5), st.integers(1, 120)), min_size=1, max_size=25),
    segment_bytes=st.integers(150, 1500),
    index_interval=st.sampled_from([0, 1, 100, 4096]),
)
def test_log_roll_invariants_hold_for_any_append_sequence(tmp_path_factory, clock, batches, segment_bytes,
                                                          index_interval):
    """Whatever the batch sizes: segments respect segment.bytes, are named after their first
    offset, index entries point at batch starts, and every record reads back in order."""
    directory = tmp_path_factory.mktemp("rolls")
    log = open_log(directory, clock, **{"segment.bytes": str(segment_bytes),
                                        "index.interval.bytes": str(index_interval)})
    expected_values = []
    for i, (count, value_size) in enumerate(batches):
        batch = producer_batch(count, timestamp=clock.milliseconds() + i, value_size=value_size, tag=f"{i}.")
        if len(batch) > segment_bytes:
            with pytest.raises(RecordTooLargeError):
                log.append_as_leader(batch)
            continue
        log.append_as_leader(batch)
        expected_values.extend(r.value for r in decode_batch(batch).records)
    records = read_all_records(log)
    assert [r.value for r in records] == expected_values
    assert [r.offset for r in records] == list(range(len(expected_values)))
    for segment in log.segments:
        headers = list(segment.log.batch_headers())
        assert segment.size <= segment_bytes
        if headers:
            assert headers[0][1].base_offset == segment.base_offset
        starts = {position: header.last_offset for position, header in headers}
        for entry in segment.offset_index.entries_list():
            assert starts[entry.position] == entry.offset
        assert segment.log.path.name == f"{segment.base_offset:020d}.log"


def _open_fds() -> int:
    import os

    return len(os.listdir("/proc/self/fd"))


def test_log_inactive_segments_hold_no_file_descriptors(tmp_path, clock):
    log = open_log(tmp_path, clock, **{"segment.bytes": "200"})
    log.append_as_leader(producer_batch(1, timestamp=clock.milliseconds(), value_size=80))
    before = _open_fds()
    for _ in range(30):
        log.append_as_leader(producer_batch(1, timestamp=clock.milliseconds(), value_size=80))
    assert log.num_segments == 31
    # The new active segment's .log, and the last rolled one's until the flush a roll schedules
    # seals it (a roll seals any segment still waiting: rolls faster than the flushes pile up none).
    # Index mappings hold none.
    assert _open_fds() - before <= 2


def test_log_flush_fsyncs_log_and_index_files_of_rolled_segments(tmp_path, clock):
    import os

    synced: list[str] = []

    class SpyFs(OsFileSystem):
        def fsync(self, fd):
            synced.append(os.readlink(f"/proc/self/fd/{fd}").rsplit("/", 1)[-1])
            os.fsync(fd)

        def fsync_dir(self, path):
            synced.append(os.path.basename(path))
            super().fsync_dir(path)

    config = LogConfig().with_overrides({"segment.bytes": "200", "index.interval.bytes": "1"})
    log = Log.open(tmp_path / "topic-0", config, clock=clock, fs=SpyFs())
    for _ in range(3):
        log.append_as_leader(producer_batch(1, timestamp=clock.milliseconds(), value_size=80))
    synced.clear()
    log.flush()
    for base in log.segments.base_offsets():
        for suffix in (".log", ".index", ".timeindex"):
            assert f"{base:020d}{suffix}" in synced
    assert "topic-0" in synced  # the directory, for the new file names


def test_log_rewrites_a_max_timestamp_below_the_records(tmp_path, clock):
    # Like Kafka, the broker computes the max timestamp from the records, not the producer's header.
    now = clock.milliseconds()
    batch = encode_batch([Record(0, now, b"k", b"v"), Record(1, now + 5, b"k", b"v")], max_timestamp=now - 1)
    log = open_log(tmp_path, clock)
    assert log.append_as_leader(batch).max_timestamp == now + 5
    stored = decode_batch(log.read(0, 1 << 20).region.read_bytes())  # checks the recomputed CRC
    assert stored.header.max_timestamp == now + 5
    assert log.fetch_offset_by_timestamp(now + 3) == (now + 5, 1)


# -- a roll leaves the old segment's sealing, and making the next files, to the flush ------------


def _segment_files(directory) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def test_log_roll_leaves_sealing_to_the_flush_and_recovery_point_waits_for_it(tmp_path, clock):
    log = open_log(tmp_path, clock, **{"segment.bytes": "300", "index.interval.bytes": "1"})
    for i in range(3):
        log.append_as_leader(producer_batch(1, timestamp=clock.milliseconds() + i, value_size=80))
    log.flush()
    assert log.num_segments >= 2
    log.append_as_leader(producer_batch(1, timestamp=clock.milliseconds() + 5, value_size=80))
    rolled = log.segments.values(0, log.log_end_offset)[-2]
    index_path = rolled.lazy_offset_index.path
    # Not sealed yet: its index still holds its preallocated length, and no fsync covers it.
    assert index_path.stat().st_size > 8 * 4
    assert log.recovery_point <= rolled.base_offset
    assert log.flush_pending() is True
    # Sealed by the flush: trimmed to its entries, and the recovery point passes it.
    assert index_path.stat().st_size % 8 == 0 and index_path.stat().st_size <= 8 * 4
    assert log.recovery_point > rolled.base_offset
    log.close()


def test_log_crash_before_the_rolled_segment_is_sealed_loses_nothing(tmp_path, clock):
    log = open_log(tmp_path, clock, **{"segment.bytes": "300"})
    for i in range(5):
        log.append_as_leader(producer_batch(1, timestamp=clock.milliseconds() + i, value_size=80, tag=str(i)))
    assert log.num_segments >= 3
    expected = [(r.offset, r.key, r.value) for r in read_all_records(log)]
    checkpoint = log.recovery_point  # what the LogManager would have checkpointed
    for segment in log.segments:  # kill -9: descriptors dropped, nothing written
        segment.close_handlers()
    reopened = Log.open(tmp_path / "topic-0", log.config, clock=clock, recovery_point=checkpoint,
                        had_clean_shutdown=False)
    assert [(r.offset, r.key, r.value) for r in read_all_records(reopened)] == expected
    assert not [name for name in _segment_files(tmp_path / "topic-0") if name.endswith(".spare")]
    reopened.close()


def test_log_rolls_rename_spare_files_made_by_the_flush(tmp_path, clock):
    directory = tmp_path / "topic-0"
    log = open_log(tmp_path, clock, **{"segment.bytes": "300"})
    log.append_as_leader(producer_batch(1, timestamp=clock.milliseconds(), value_size=80))
    assert not [n for n in _segment_files(directory) if n.endswith(".spare")]  # none before a roll
    for i in range(3):
        log.append_as_leader(producer_batch(1, timestamp=clock.milliseconds() + i, value_size=80))
    log.flush_pending()
    spares = [n for n in _segment_files(directory) if n.endswith(".spare")]
    assert spares == ["next.index.spare", "next.log.spare", "next.timeindex.spare"]
    spare_inode = (directory / "next.index.spare").stat().st_ino
    before = log.num_segments
    for i in range(3):
        log.append_as_leader(producer_batch(1, timestamp=clock.milliseconds() + i, value_size=80))
        if log.num_segments > before:
            break
    new = log.active_segment
    # The roll renamed the spares into place: the new index is the spare's inode, set up as new.
    assert new.lazy_offset_index.path.stat().st_ino == spare_inode
    assert not [n for n in _segment_files(directory) if n.endswith(".spare")]
    assert new.offset_index.entries == 0 and not new.offset_index.is_full()
    assert new.lazy_offset_index.path.stat().st_size == LogConfig().segment_index_bytes
    expected = [(r.offset, r.value) for r in read_all_records(log)]
    log.flush_pending()
    log.close()  # a clean close removes the spares it made
    assert not [n for n in _segment_files(directory) if n.endswith(".spare")]
    reopened = Log.open(directory, log.config, clock=clock, had_clean_shutdown=True,
                        recovery_point=log.recovery_point)
    assert [(r.offset, r.value) for r in read_all_records(reopened)] == expected
    reopened.close()


def test_log_open_removes_leftover_spare_files(tmp_path, clock):
    directory = tmp_path / "topic-0"
    log = open_log(tmp_path, clock, **{"segment.bytes": "300"})
    for i in range(4):
        log.append_as_leader(producer_batch(1, timestamp=clock.milliseconds() + i, value_size=80))
    log.flush_pending()
    assert (directory / "next.log.spare").exists()
    for segment in log.segments:  # kill -9
        segment.close_handlers()
    reopened = Log.open(directory, log.config, clock=clock, had_clean_shutdown=False)
    assert not [n for n in _segment_files(directory) if n.endswith(".spare")]
    assert reopened.log_end_offset == 4
    reopened.close()


# -- the inline append (try_append_as_leader) and its fallback --------------------------------


def test_try_append_appends_like_append_as_leader_when_nothing_is_due(tmp_path):
    from triolog.broker.storage.clock import ManualClock

    clock = ManualClock()
    inline = open_log(tmp_path, clock, "inline-0")
    worker = open_log(tmp_path, clock, "worker-0")
    inline.append_as_leader(producer_batch(2, timestamp=clock.now_ms))  # records the leader epoch
    worker.append_as_leader(producer_batch(2, timestamp=clock.now_ms))
    batch = producer_batch(3, timestamp=clock.now_ms)
    info = inline.try_append_as_leader(batch, max_bytes=1 << 20)
    assert info is not None
    assert info == worker.append_as_leader(batch)
    assert (info.first_offset, info.last_offset) == (2, 4)
    assert read_all_records(inline) == read_all_records(worker)
    inline.close()
    worker.close()


def test_a_batch_the_inline_append_gave_up_on_is_not_validated_again_by_its_fallback(tmp_path):
    """A roll is due, so the inline append gives up after validating; the append_as_leader of the
    same bytes object takes the batch it validated: on a LogAppendTime topic the stamped time is
    the time of that validation, not of the fallback (a fresh validation would stamp the later
    time)."""
    from triolog.broker.storage.clock import ManualClock

    clock = ManualClock()
    first = producer_batch(5, timestamp=clock.now_ms)
    log = open_log(tmp_path, clock, **{"message.timestamp.type": "LogAppendTime",
                                       "segment.bytes": str(len(first) + 10)})
    log.append_as_leader(first)
    validated_at = clock.now_ms
    batch = producer_batch(5, timestamp=clock.now_ms, tag="b")
    assert log.try_append_as_leader(batch, max_bytes=1 << 20) is None  # the batch would roll
    assert log.log_end_offset == 5 and log.num_segments == 1  # nothing written
    clock.advance(7_000)
    info = log.append_as_leader(batch)
    assert info.roll_reason == "size" and info.first_offset == 5
    assert info.log_append_time_ms == validated_at
    assert [r.timestamp for r in read_all_records(log, 5)] == [validated_at] * 5
    # an equal batch that is another object is validated anew (a kept result is for one object)
    again = producer_batch(5, timestamp=clock.now_ms, tag="b")
    assert log.try_append_as_leader(again, max_bytes=1 << 20) is None
    clock.advance(1_000)
    assert log.append_as_leader(bytes(bytearray(again))).log_append_time_ms == clock.now_ms
    log.close()


def test_rolls_use_spare_indexes_sized_ahead_and_recover_like_new_ones(tmp_path):
    """The flush after a roll makes the next roll's spares, the indexes already sized; the segment
    a roll makes from them reads, appends and recovers (unclean shutdown) as a new one does."""
    from triolog.broker.storage.clock import ManualClock
    from triolog.broker.storage import filenames

    clock = ManualClock()
    one = producer_batch(10, timestamp=clock.now_ms)
    directory = tmp_path / "topic-0"
    overrides = {"segment.bytes": str(len(one) + 20), "segment.index.bytes": "4096", "index.interval.bytes": "1"}
    log = open_log(tmp_path, clock, **overrides)
    log.append_as_leader(one)
    log.append_as_leader(producer_batch(10, timestamp=clock.now_ms, tag="r"))  # rolls: no spares yet
    log.flush_pending()  # the broker's flush after a roll: seals the old segment, makes the spares
    spare_log, spare_index, spare_time_index = filenames.spare_files(directory)
    assert spare_log.stat().st_size == 0
    assert spare_index.stat().st_size == 4096 and spare_time_index.stat().st_size == 4092  # 341 entries of 12
    for n in range(2, 6):
        assert log.append_as_leader(producer_batch(10, timestamp=clock.now_ms, tag=str(n))).roll_reason == "size"
        log.flush_pending()
    assert log.num_segments == 6 and log.log_end_offset == 60
    assert log.read(45, 1 << 20).fetch_offset_metadata.segment_base_offset == 40
    expected = read_all_records(log)
    assert [r.offset for r in expected] == list(range(60))
    # a crash now: the active segment (made from spares) is above the recovery point
    log.close(sync=False)
    reopened = Log.open(directory, LogConfig().with_overrides(overrides), clock=clock, recovery_point=0,
                        had_clean_shutdown=False)
    assert reopened.log_end_offset == 60 and read_all_records(reopened) == expected
    assert not spare_index.exists()  # the loader removes leftover spares
    assert reopened.fetch_offset_by_timestamp(clock.now_ms).offset == 0
    reopened.close()
