"""Idempotent appends on a real log: duplicates, refused batches, .snapshot files at rolls and
close, restarts (clean and as kill -9 leaves the files), retention and expiry."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from triolog.broker.storage.log import Log
from triolog.broker.storage.log_manager import LogManager
from triolog.broker.storage.producer_state import INT32_MAX, read_snapshot
from triolog.config.log_config import LogConfig
from triolog.protocol.errors import (
    DuplicateSequenceNumberError,
    InvalidProducerEpochError,
    OutOfOrderSequenceNumberError,
    UnknownProducerIdError,
)
from triolog.protocol.records import Record, encode_batch

from .helpers import producer_batch, read_all_records

PID = 4242


def idempotent(sequence: int, count: int = 2, *, pid: int = PID, epoch: int = 0, timestamp: int,
               tag: str = "") -> bytes:
    records = [Record(i, timestamp, f"k{sequence + i}".encode(), f"{tag}v{sequence + i}".encode())
               for i in range(count)]
    return encode_batch(records, producer_id=pid, producer_epoch=epoch, base_sequence=sequence)


def open_at(directory: Path, clock, *, clean: bool = False, expiration_ms: int = 86_400_000, **overrides) -> Log:
    config = LogConfig().with_overrides(overrides) if overrides else LogConfig()
    return Log.open(directory, config, clock=clock, had_clean_shutdown=clean, producer_id_expiration_ms=expiration_ms)


def files(directory: Path) -> dict[str, int]:
    return {p.name: p.stat().st_size for p in sorted(directory.iterdir())}


def snapshots(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.glob("*.snapshot"))


def crash_copy(log: Log, tmp_path: Path) -> Path:
    """The partition directory as a kill -9 leaves it: every write so far, no close."""
    target = tmp_path / "crashed" / log.directory.name
    shutil.copytree(log.directory, target)
    return target


def send(log: Log, sequences, clock, **kwargs):
    return [log.append_as_leader(idempotent(s, timestamp=clock.milliseconds(), **kwargs)) for s in sequences]


# -- duplicates and refusals -----------------------------------------------------------------


def test_a_retried_batch_is_answered_with_its_original_offsets_and_nothing_is_written(tmp_path, clock):
    log = open_at(tmp_path / "t-0", clock, **{"segment.ms": "1000"})
    log.append_as_leader(producer_batch(3, timestamp=clock.milliseconds()))  # offsets 0-2, no producer
    first, second = send(log, [0, 2], clock)
    assert (first.first_offset, first.last_offset, second.first_offset) == (3, 4, 5)
    before = files(log.directory)
    clock.advance(5000)  # a roll is due: a duplicate must not cause it
    again = log.append_as_leader(idempotent(0, timestamp=clock.milliseconds(), tag="retry"))
    assert again.duplicate and (again.first_offset, again.last_offset) == (3, 4)
    assert again.log_append_time_ms == -1 and again.record_count == 0 and again.roll_reason is None
    assert log.log_end_offset == 7 and log.num_segments == 1 and files(log.directory) == before
    assert log.duplicate_batches == 1
    assert [r.value for r in read_all_records(log)][3:] == [b"v0", b"v1", b"v2", b"v3"]


def test_the_inline_append_path_dedupes_too(tmp_path, clock):
    log = open_at(tmp_path / "t-0", clock)
    log.append_as_leader(producer_batch(1, timestamp=clock.milliseconds()))  # records the leader epoch
    batch = idempotent(0, timestamp=clock.milliseconds())
    assert log.try_append_as_leader(batch, max_bytes=1 << 20).first_offset == 1
    info = log.try_append_as_leader(idempotent(0, timestamp=clock.milliseconds()), max_bytes=1 << 20)
    assert info.duplicate and info.first_offset == 1 and log.log_end_offset == 3
    with pytest.raises(OutOfOrderSequenceNumberError):
        log.try_append_as_leader(idempotent(5, timestamp=clock.milliseconds()), max_bytes=1 << 20)
    assert log.log_end_offset == 3


def test_log_append_time_topics_answer_a_duplicate_with_the_original_append_time(tmp_path, clock):
    log = open_at(tmp_path / "t-0", clock, **{"message.timestamp.type": "LogAppendTime"})
    original = log.append_as_leader(idempotent(0, timestamp=clock.milliseconds()))
    clock.advance(777)
    again = log.append_as_leader(idempotent(0, timestamp=clock.milliseconds()))
    assert again.duplicate and again.log_append_time_ms == original.log_append_time_ms == clock.milliseconds() - 777


@pytest.mark.parametrize("epoch, sequence, error", [
    (0, 6, OutOfOrderSequenceNumberError),      # a gap after 0..3
    (0, 1, OutOfOrderSequenceNumberError),      # overlaps differently
    (1, 4, OutOfOrderSequenceNumberError),      # a new epoch must start at 0
])
def test_refused_batches_write_nothing(tmp_path, clock, epoch, sequence, error):
    log = open_at(tmp_path / "t-0", clock)
    send(log, [0, 2], clock)
    before = files(log.directory)
    with pytest.raises(error):
        log.append_as_leader(idempotent(sequence, epoch=epoch, timestamp=clock.milliseconds()))
    assert log.log_end_offset == 4 and files(log.directory) == before


def test_epoch_rules_on_a_log(tmp_path, clock):
    log = open_at(tmp_path / "t-0", clock)
    send(log, [0], clock, epoch=3)
    with pytest.raises(InvalidProducerEpochError):
        send(log, [2], clock, epoch=2)
    bumped = send(log, [0], clock, epoch=4)[0]  # the producer's own epoch bump restarts at 0
    assert not bumped.duplicate and bumped.first_offset == 2
    with pytest.raises(UnknownProducerIdError):
        send(log, [7], clock, pid=PID + 1)
    assert log.log_end_offset == 4


def test_a_batch_older_than_the_five_cached_gets_duplicate_sequence_number(tmp_path, clock):
    log = open_at(tmp_path / "t-0", clock)
    send(log, range(0, 14, 2), clock)  # 7 batches
    assert log.append_as_leader(idempotent(4, timestamp=clock.milliseconds())).duplicate  # 3rd: in the window
    with pytest.raises(DuplicateSequenceNumberError):
        send(log, [2], clock)
    assert log.log_end_offset == 14


# -- snapshots at roll and close, and restarts -----------------------------------------------


def test_snapshots_are_named_by_the_new_segments_base_offset_and_written_at_close(tmp_path, clock):
    log = open_at(tmp_path / "t-0", clock)
    send(log, [0, 2], clock)
    log.roll()
    assert snapshots(log.directory) == ["00000000000000000004.snapshot"]
    [entry] = read_snapshot(log.directory / "00000000000000000004.snapshot")
    assert (entry.producer_id, entry.producer_epoch, entry.last_seq, entry.last_data_offset,
            entry.last_offset_delta) == (PID, 0, 3, 3, 1)
    send(log, [4], clock)
    log.close()
    assert snapshots(log.directory) == ["00000000000000000004.snapshot", "00000000000000000006.snapshot"]


def test_after_a_clean_restart_dedupe_works_from_the_snapshot_alone(tmp_path, clock):
    directory = tmp_path / "t-0"
    log = open_at(directory, clock)
    send(log, range(0, 10, 2), clock)  # offsets 0..9
    log.flush()
    log.close()
    reopened = open_at(directory, clock, clean=True)
    assert reopened.load_stats.producer_batches_replayed == 0 and reopened.load_stats.producers_loaded == 1
    last = reopened.append_as_leader(idempotent(8, timestamp=clock.milliseconds()))
    assert last.duplicate and (last.first_offset, last.last_offset) == (8, 9)
    # Only the newest batch survives a snapshot (Kafka's format): an older retry is 46, never appended twice.
    with pytest.raises(DuplicateSequenceNumberError):
        reopened.append_as_leader(idempotent(6, timestamp=clock.milliseconds()))
    assert reopened.append_as_leader(idempotent(10, timestamp=clock.milliseconds())).first_offset == 10
    reopened.close()


def test_after_a_crash_dedupe_works_from_the_snapshot_and_a_replay_of_the_log_after_it(tmp_path, clock):
    log = open_at(tmp_path / "t-0", clock)
    send(log, range(0, 6, 2), clock)  # offsets 0..5
    log.roll()  # snapshot at 6
    send(log, range(6, 14, 2), clock)  # offsets 6..13, after the snapshot
    log.flush()
    crashed = crash_copy(log, tmp_path)
    log.close()
    recovered = open_at(crashed, clock)
    assert recovered.load_stats.producer_batches_replayed == 4
    for sequence in range(6, 14, 2):  # each replayed batch is a full duplicate
        info = recovered.append_as_leader(idempotent(sequence, timestamp=clock.milliseconds()))
        assert info.duplicate and info.first_offset == sequence
    assert recovered.append_as_leader(idempotent(4, timestamp=clock.milliseconds())).duplicate  # 5th from last
    with pytest.raises(DuplicateSequenceNumberError):
        recovered.append_as_leader(idempotent(2, timestamp=clock.milliseconds()))
    assert recovered.log_end_offset == 14
    assert [r.value for r in read_all_records(recovered)] == [b"v%d" % i for i in range(14)]
    recovered.close()


def test_a_crash_without_any_snapshot_replays_the_whole_log(tmp_path, clock):
    log = open_at(tmp_path / "t-0", clock)
    send(log, [0, 2], clock)
    crashed = crash_copy(log, tmp_path)
    log.close()
    recovered = open_at(crashed, clock)
    assert recovered.load_stats.producer_batches_replayed == 2
    assert recovered.append_as_leader(idempotent(0, timestamp=clock.milliseconds())).duplicate
    recovered.close()


def test_a_corrupt_newest_snapshot_falls_back_to_the_older_one_and_replays_more(tmp_path, clock):
    directory = tmp_path / "t-0"
    log = open_at(directory, clock)
    send(log, [0], clock)
    log.roll()  # snapshot 2
    send(log, [2], clock)
    log.roll()  # snapshot 4
    send(log, [4], clock)
    log.close()  # snapshot 6
    newest = directory / "00000000000000000006.snapshot"
    newest.write_bytes(newest.read_bytes()[:-1] + b"\x00")
    reopened = open_at(directory, clock, clean=True)
    assert "00000000000000000006.snapshot" in snapshots(directory)  # rewritten after the replay
    assert reopened.load_stats.producer_batches_replayed == 1  # only the batch after snapshot 4
    assert reopened.append_as_leader(idempotent(4, timestamp=clock.milliseconds())).duplicate
    assert reopened.append_as_leader(idempotent(6, timestamp=clock.milliseconds())).first_offset == 6
    reopened.close()


def test_snapshots_past_a_truncated_log_end_are_deleted(tmp_path, clock):
    log = open_at(tmp_path / "t-0", clock)
    send(log, [0, 2], clock)
    log.roll()  # snapshot at 4
    send(log, [4], clock)
    log.flush()
    crashed = crash_copy(log, tmp_path)
    log.close()
    # The crash lost the newest segment's data (a torn tail): the log ends at 4 again.
    (crashed / "00000000000000000004.log").write_bytes(b"")
    fake = crashed / "00000000000000000009.snapshot"  # a snapshot past the end (e.g. from before a truncation)
    shutil.copy(crashed / "00000000000000000004.snapshot", fake)
    recovered = open_at(crashed, clock)
    assert recovered.log_end_offset == 4
    assert snapshots(crashed) == ["00000000000000000004.snapshot"]
    assert recovered.append_as_leader(idempotent(4, timestamp=clock.milliseconds())).first_offset == 4
    recovered.close()


# -- retention and expiry --------------------------------------------------------------------


def test_retention_deletes_a_segments_snapshot_with_it(tmp_path, clock):
    log = open_at(tmp_path / "t-0", clock, **{"retention.ms": "1000", "file.delete.delay.ms": "100"})
    send(log, [0], clock)
    log.roll()
    send(log, [2], clock)
    log.roll()
    clock.advance(500)
    send(log, [4], clock)
    log.roll()
    assert snapshots(log.directory) == ["0000000000000000000%d.snapshot" % o for o in (2, 4, 6)]
    clock.advance(600)  # segments 0 and 2 are past retention.ms
    assert log.delete_old_segments() == 2
    assert snapshots(log.directory) == ["00000000000000000004.snapshot", "00000000000000000006.snapshot"]
    assert (log.directory / "00000000000000000002.snapshot.deleted").exists()
    clock.advance(100)
    log.segment_deleter.run_due()
    assert not list(log.directory.glob("*.deleted"))
    assert log.append_as_leader(idempotent(4, timestamp=clock.milliseconds())).duplicate  # state stays
    log.close()


def test_expired_producers_are_forgotten_and_must_start_again_at_zero(tmp_path, clock):
    log = open_at(tmp_path / "t-0", clock, expiration_ms=60_000)
    send(log, [0, 2], clock)
    send(log, [0], clock, pid=7)
    clock.advance(30_000)
    send(log, [2], clock, pid=7)
    assert {pid for pid, _, _ in log.last_records_of_active_producers()} == {PID, 7}
    clock.advance(30_000)
    assert log.remove_expired_producers(clock.milliseconds()) == 1
    assert log.last_records_of_active_producers() == ((7, 7, 0),)  # its batch at offsets 6-7
    with pytest.raises(UnknownProducerIdError):
        send(log, [4], clock)
    assert send(log, [0], clock)[0].first_offset == 8  # a fresh start is accepted
    log.close()


def test_expired_producers_are_dropped_when_a_snapshot_is_loaded(tmp_path, clock):
    directory = tmp_path / "t-0"
    log = open_at(directory, clock, expiration_ms=60_000)
    send(log, [0], clock)
    clock.advance(50_000)
    send(log, [0], clock, pid=7)
    log.close()
    clock.advance(10_000)
    reopened = open_at(directory, clock, clean=True, expiration_ms=60_000)
    assert [pid for pid, _, _ in reopened.last_records_of_active_producers()] == [7]
    reopened.close()


def test_log_manager_removes_expired_producers_in_every_log(tmp_path, clock):
    manager = LogManager([tmp_path / "data"], LogConfig(), clock=clock, producer_id_expiration_ms=1000)
    manager.startup()
    logs = manager.create_logs("t", [0, 1])
    for log in logs:
        send(log, [0], clock)
    send(logs[1], [0], clock, pid=9)
    clock.advance(1000)
    assert manager.remove_expired_producers() == 3
    assert all(log.last_records_of_active_producers() == () for log in logs)
    manager.shutdown()


def test_sequences_wrap_through_the_log_and_a_restart(tmp_path, clock):
    directory = tmp_path / "t-0"
    log = open_at(directory, clock)
    log.producer_state_manager.update(PID, 0, INT32_MAX - 2, -1, 0, clock.milliseconds())  # seeded near the wrap
    info = log.append_as_leader(idempotent(INT32_MAX - 1, count=3, timestamp=clock.milliseconds()))
    assert info.first_offset == 0
    log.close()
    reopened = open_at(directory, clock, clean=True)
    assert reopened.append_as_leader(idempotent(INT32_MAX - 1, count=3, timestamp=clock.milliseconds())).duplicate
    assert reopened.append_as_leader(idempotent(1, timestamp=clock.milliseconds())).first_offset == 3
    reopened.close()


# -- power loss ------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(12))  # bench-scale runs: more seeds by hand
def test_after_a_power_cut_no_flushed_batch_is_ever_appended_twice(seed, clock):
    """Idempotent appends over small segments (a snapshot at every roll), each flushed as acks=all
    does, then a power cut keeping a random part of what was not synced, then recovery: a
    retry of every acknowledged batch is a duplicate (the newest 5 after the last snapshot with
    their offsets) or DUPLICATE_SEQUENCE_NUMBER, never a second copy; the log holds each once."""
    import random

    from triolog.broker.storage.fs import make_dirs

    from .faultfs import FaultFS

    rng = random.Random(seed)
    fs = FaultFS(seed=seed, clock=clock)
    config = LogConfig().with_overrides({"segment.bytes": "700", "index.interval.bytes": "100"})
    directory = Path("/disk/t-0")
    make_dirs(fs, directory)  # durable, as the LogManager makes a new partition's directory
    log = Log.open(directory, config, clock=clock, fs=fs)
    acked = []  # (sequence, count, first offset)
    sequence = 0
    for _ in range(rng.randrange(5, 25)):
        count = rng.randrange(1, 4)
        info = log.append_as_leader(idempotent(sequence, count, timestamp=clock.milliseconds()))
        if rng.random() < 0.7:
            log.flush()
            acked.append((sequence, count, info.first_offset))
        sequence += count
    fs.power_loss(rng)
    recovered = Log.open(directory, config, clock=clock, fs=fs)
    end = recovered.log_end_offset
    assert all(first + count <= end for _, count, first in acked), "a flushed batch was lost"
    for batch_sequence, count, first in acked:
        try:
            info = recovered.append_as_leader(idempotent(batch_sequence, count, timestamp=clock.milliseconds()))
        except DuplicateSequenceNumberError:
            continue
        assert info.duplicate and info.first_offset == first, (batch_sequence, info)
    assert recovered.log_end_offset == end
    values = [r.value for r in read_all_records(recovered)]
    assert values == [b"v%d" % i for i in range(len(values))]  # each record once, in order
    recovered.close()


def test_a_clean_shutdown_without_a_snapshot_still_rebuilds_the_state_from_the_log(tmp_path, clock):
    """The close could not write its snapshot (say the disk was full): the next start replays
    the log rather than trusting the clean-shutdown marker (Kafka would start empty here)."""
    directory = tmp_path / "t-0"
    log = open_at(directory, clock)
    send(log, [0, 2], clock)
    log.close()
    for snapshot in directory.glob("*.snapshot"):
        snapshot.unlink()
    reopened = open_at(directory, clock, clean=True)
    assert reopened.load_stats.producer_batches_replayed == 2
    assert reopened.append_as_leader(idempotent(2, timestamp=clock.milliseconds())).duplicate
    reopened.close()
