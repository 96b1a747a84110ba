"""Replication's storage primitives: follower appends, truncation by leader epoch, and a high
watermark that replication moves. The leader and follower are real logs on disk; a follower
copies the leader's raw bytes as a fetch would return them, and must end up with the same
files byte for byte."""

from __future__ import annotations

import copy
import itertools
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from triolog.broker.storage.errors import CorruptRecordError, OffsetsOutOfOrderError, UnexpectedAppendOffsetError
from triolog.broker.storage.log import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP, FetchIsolation, Log
from triolog.broker.storage.log_manager import LogManager
from triolog.config.log_config import LogConfig
from triolog.protocol.record_batch import CompressionType, check_batch, read_header, split_batches
from triolog.protocol.records import Record, encode_batch, iter_batches

from .helpers import open_log, producer_batch, read_all_records

SETTINGS = settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                          HealthCheck.too_slow])
LOG_END = FetchIsolation.LOG_END


# -- builders and comparisons -------------------------------------------------------------------


class Producer:
    """A test producer: plain (no id) or idempotent with its own epoch and sequence."""

    def __init__(self, producer_id: int | None):
        self.producer_id = producer_id
        self.epoch = 0
        self.sequence = 0

    def batch(self, count: int, timestamp: int, value_size: int, compression: CompressionType, tag: str) -> bytes:
        records = [Record(i, timestamp + i, f"k{tag}.{i}".encode(), (f"{tag}.{i}:".encode() + b"x" * value_size))
                   for i in range(count)]
        if self.producer_id is None:
            return encode_batch(records, compression=compression)
        batch = encode_batch(records, compression=compression, producer_id=self.producer_id,
                             producer_epoch=self.epoch, base_sequence=self.sequence)
        self.sequence += count
        return batch

    def bump_epoch(self) -> None:
        self.epoch += 1
        self.sequence = 0


def copy_from(leader: Log, follower: Log, chunks=(1 << 20,)) -> None:
    """The follower's fetch loop: raw bytes from its log end offset, up to the leader's log end,
    appended as they are, ``chunks`` giving the fetches' max bytes in turn."""
    sizes = itertools.cycle(chunks)
    while follower.log_end_offset < leader.log_end_offset:
        info = leader.read(follower.log_end_offset, next(sizes), isolation=LOG_END)
        assert info.region is not None
        follower.append_as_follower(info.region.read_bytes())


def reconcile(follower: Log, leader: Log) -> int:
    """Kafka's follower truncation by leader epoch (OffsetsForLeaderEpoch), round by round until
    the follower names an epoch the leader has; returns the offset truncated to."""
    while True:
        epoch = follower.latest_epoch
        if epoch is None:
            return follower.log_end_offset
        leader_epoch, leader_end = leader.end_offset_for_epoch(epoch)
        if leader_end < 0:
            follower.truncate_to(follower.high_watermark)
            return follower.log_end_offset
        follower_epoch, follower_end = follower.end_offset_for_epoch(leader_epoch)
        target = min(leader_end, follower_end, follower.log_end_offset) if follower_epoch == leader_epoch \
            else min(follower_end, follower.log_end_offset)
        follower.truncate_to(target)
        if follower_epoch == leader_epoch:
            return target


def files(log: Log, suffix: str) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(log.directory.iterdir()) if p.name.endswith(suffix)}


def directory_state(log: Log) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(log.directory.iterdir()) if p.is_file()}


def producer_state(log: Log, *, last_only: bool = False) -> dict:
    """Every producer's entry; ``last_only``: with its last batch only, all a snapshot keeps."""
    return {pid: (e.producer_epoch, e.last_timestamp, e.current_txn_first_offset,
                  list(e.batch_metadata)[-1:] if last_only else list(e.batch_metadata))
            for pid, e in log.producer_state_manager.producers.items()}


def batches_of(log: Log) -> list[tuple[int, int, int, bytes]]:
    """(segment base, base offset, last offset, bytes) of every batch in the log, in order."""
    out = []
    for segment in log.segments:
        for position, header in segment.log.batch_headers():
            out.append((segment.base_offset, header.base_offset, header.last_offset,
                        segment.log.read(position, header.size)))
    return out


def assert_same_log(leader: Log, follower: Log, *, truncated: bool = False) -> None:
    """``truncated``: the follower's producer state was rebuilt from a snapshot, which keeps a
    producer's last batch only (as Kafka's does): its older batches are not compared."""
    assert follower.log_end_offset == leader.log_end_offset
    assert follower.segments.base_offsets() == leader.segments.base_offsets()
    assert files(follower, ".log") == files(leader, ".log")
    assert follower.leader_epoch_cache.entries == leader.leader_epoch_cache.entries
    assert files(follower, "leader-epoch-checkpoint") == files(leader, "leader-epoch-checkpoint")
    assert follower.latest_epoch == leader.latest_epoch
    assert producer_state(follower, last_only=truncated) == producer_state(leader, last_only=truncated)
    for theirs, ours in zip(leader.segments, follower.segments):
        assert ours.offset_index.entries_list() == theirs.offset_index.entries_list()
        assert ours.max_timestamp_so_far == theirs.max_timestamp_so_far
        assert ours.shallow_offset_of_max_timestamp_so_far == theirs.shallow_offset_of_max_timestamp_so_far


def assert_same_lookups(leader: Log, follower: Log, timestamps) -> None:
    """Reads and timestamp lookups answer alike (both high watermarks moved to the log end)."""
    for log in (leader, follower):
        log.update_high_watermark(log.log_end_offset)
    for offset in range(leader.log_start_offset, leader.log_end_offset):
        ours = follower.read(offset, 1)
        theirs = leader.read(offset, 1)
        assert ours.region.read_bytes() == theirs.region.read_bytes()
        assert ours.fetch_offset_metadata == theirs.fetch_offset_metadata
    for timestamp in (*timestamps, EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP):
        assert follower.fetch_offset_by_timestamp(timestamp) == leader.fetch_offset_by_timestamp(timestamp)


def reopen(log: Log, *, clean: bool = True) -> Log:
    config, clock, directory = log.config, log._clock, log.directory
    recovery_point = log.recovery_point
    if clean:
        log.close()
    else:  # what kill -9 leaves: no close, no snapshot
        for segment in log.segments:
            segment.close_handlers()
    return Log.open(directory, config, clock=clock, recovery_point=recovery_point if clean else 0,
                    had_clean_shutdown=clean)


def replicated_log(tmp_path: Path, clock, name: str, **overrides) -> Log:
    log = open_log(tmp_path, clock, name, **overrides)
    log.replicated = True
    return log


# -- properties -------------------------------------------------------------------------------

COMPRESSIONS = [CompressionType.NONE, CompressionType.GZIP]

#: One step of a leader's life: append a batch, start a new leader epoch, bump a producer's
#: epoch, or let the follower fetch in between.
steps = st.one_of(
    st.tuples(st.just("append"), st.sampled_from([None, 1000, 1001, 1002]), st.integers(1, 4),
              st.integers(0, 60), st.sampled_from(COMPRESSIONS), st.integers(-3000, 3000)),
    st.tuples(st.just("append"), st.sampled_from([None, 1000, 1001, 1002]), st.integers(1, 4),
              st.integers(0, 60), st.sampled_from(COMPRESSIONS), st.integers(-3000, 3000)),
    st.tuples(st.just("epoch")),
    st.tuples(st.just("bump"), st.sampled_from([1000, 1001, 1002])),
    st.tuples(st.just("fetch")),
)
log_configs = st.fixed_dictionaries({
    "segment.bytes": st.integers(500, 2000).map(str),
    "index.interval.bytes": st.sampled_from(["0", "1", "100", "300", "4096"]),
    "segment.ms": st.sampled_from(["604800000", "4000"]),
})


def new_producers() -> dict[int | None, Producer]:
    return {pid: Producer(pid) for pid in (None, 1000, 1001, 1002)}


def run_leader(leader: Log, follower: Log | None, clock, plan, chunks, tag: str, first_epoch: int = 0,
               producers: dict | None = None) -> list[int]:
    """Apply ``plan`` to the leader (every epoch it starts gets a batch); returns the timestamps used."""
    producers = producers if producers is not None else new_producers()
    epoch = first_epoch
    leader.assign_epoch_start_offset(epoch)
    pending_epoch = True
    timestamps = []
    for i, step in enumerate(plan):
        if step[0] == "append":
            _, pid, count, value_size, compression, skew = step
            timestamp = clock.milliseconds() + skew
            timestamps.append(timestamp)
            clock.advance(700)
            batch = producers[pid].batch(count, timestamp, value_size, compression, f"{tag}{i}")
            info = leader.append_as_leader(batch, leader_epoch=epoch)
            assert not info.duplicate
            pending_epoch = False
        elif step[0] == "epoch":
            epoch += 1
            leader.assign_epoch_start_offset(epoch)
            pending_epoch = True
        elif step[0] == "bump":
            producers[step[1]].bump_epoch()
        elif step[0] == "fetch" and follower is not None:
            copy_from(leader, follower, chunks)
    if pending_epoch:  # an epoch no batch carries exists only on the leader: give it one
        leader.append_as_leader(producers[None].batch(1, clock.milliseconds(), 1, CompressionType.NONE, tag),
                                leader_epoch=epoch)
    return timestamps


@SETTINGS
@given(config=log_configs, plan=st.lists(steps, min_size=10, max_size=60),
       chunks=st.lists(st.integers(1, 3000), min_size=1, max_size=5))
def test_a_follower_copying_raw_bytes_ends_up_with_the_leaders_files(tmp_path_factory, clock, config, plan, chunks):
    root = tmp_path_factory.mktemp("copy")
    leader = replicated_log(root, clock, "t-0", **config)
    follower = replicated_log(root / "follower", clock, "t-0", **config)
    timestamps = run_leader(leader, follower, clock, plan, chunks, "a")
    copy_from(leader, follower, chunks)
    assert_same_log(leader, follower)
    assert follower.high_watermark == 0  # replicated: the appends did not move it
    assert_same_lookups(leader, follower, timestamps)
    # What the follower wrote reads back after a clean restart and after a crash alike.
    for clean in (True, False):
        follower = reopen(follower, clean=clean)
        assert follower.log_end_offset == leader.log_end_offset
        assert follower.leader_epoch_cache.entries == leader.leader_epoch_cache.entries
        assert producer_state(follower, last_only=True) == producer_state(leader, last_only=True)
        assert files(follower, ".log") == files(leader, ".log")


@SETTINGS
@given(config=log_configs,
       prefix=st.lists(steps, min_size=8, max_size=40),
       follower_suffix=st.lists(steps, min_size=3, max_size=20),
       leader_suffix=st.lists(steps, min_size=3, max_size=20),
       follower_keeps_prefix_epoch=st.booleans(),
       follower_rolls=st.booleans(),
       chunks=st.lists(st.integers(1, 3000), min_size=1, max_size=5))
def test_a_diverged_follower_truncates_by_epoch_and_converges(tmp_path_factory, clock, config, prefix,
                                                               follower_suffix, leader_suffix,
                                                               follower_keeps_prefix_epoch, follower_rolls, chunks):
    root = tmp_path_factory.mktemp("diverge")
    leader = replicated_log(root, clock, "t-0", **config)
    follower = replicated_log(root / "follower", clock, "t-0", **config)
    # The shared prefix, in the leader's epochs.
    prefix_plan = [s for s in prefix if s[0] != "fetch"]
    leader_producers = new_producers()
    run_leader(leader, None, clock, prefix_plan, chunks, "p", producers=leader_producers)
    copy_from(leader, follower, chunks)
    shared = leader.log_end_offset
    prefix_epoch = leader.latest_epoch
    # The follower led for a while (in the prefix's epoch or the next) and wrote what the leader
    # never got; then the leader came back in a newer epoch and wrote something else.
    follower_epoch = prefix_epoch if follower_keeps_prefix_epoch else prefix_epoch + 1
    if follower_rolls:  # its suffix in a segment of its own, which the truncation removes whole
        follower.roll()
    follower_plan = [s for s in follower_suffix if s[0] not in ("fetch", "epoch")]
    if not any(s[0] == "append" for s in follower_plan):
        follower_plan.append(("append", None, 1, 5, CompressionType.NONE, 0))
    run_leader(follower, None, clock, follower_plan, chunks, "f", first_epoch=follower_epoch,
               producers=copy.deepcopy(leader_producers))
    leader_plan = [s for s in leader_suffix if s[0] != "fetch"]
    run_leader(leader, None, clock, leader_plan, chunks, "l", first_epoch=prefix_epoch + 2,
               producers=leader_producers)
    old_suffix = {b[3] for b in batches_of(follower)} - {b[3] for b in batches_of(leader)}
    assert old_suffix

    assert reconcile(follower, leader) == shared
    assert follower.log_end_offset == shared
    assert all(b[2] < shared for b in batches_of(follower))
    for segment in follower.segments:
        assert all(e.offset < shared for e in segment.offset_index.entries_list())
        assert all(e.offset < shared for e in segment.time_index.entries_list())
    assert all(e.start_offset < shared for e in follower.leader_epoch_cache.entries)
    assert all(e.last_data_offset < shared for e in follower.producer_state_manager.producers.values())

    copy_from(leader, follower, chunks)
    assert_same_log(leader, follower, truncated=True)
    assert not old_suffix & {b[3] for b in batches_of(follower)}
    assert_same_lookups(leader, follower, [clock.milliseconds() - 5000 + 500 * i for i in range(20)])
    follower = reopen(follower)
    assert producer_state(follower, last_only=True) == producer_state(leader, last_only=True)
    assert follower.leader_epoch_cache.entries == leader.leader_epoch_cache.entries


# -- truncation ---------------------------------------------------------------------------------


def _filled(tmp_path, clock, batches: int = 12, name: str = "topic-0") -> Log:
    """Producer 7's 3-record batches, two per segment (with index.interval.bytes=1, every batch
    but a segment's first has an index entry); epoch 1, then epoch 3 from the middle batch on."""
    producer = Producer(7)
    now = clock.milliseconds()
    data = [producer.batch(3, now + 10 * i, 5, CompressionType.NONE, f"{i:02d}") for i in range(batches)]
    log = open_log(tmp_path, clock, name, **_FILLED_CONFIG)
    for i, batch in enumerate(data):
        if i == batches // 2:
            log.assign_epoch_start_offset(3)
        log.append_as_leader(batch, leader_epoch=3 if i >= batches // 2 else 1)
    return log


_BATCH_SIZE = len(Producer(7).batch(3, 0, 5, CompressionType.NONE, "00"))
_FILLED_CONFIG = {"segment.bytes": str(2 * _BATCH_SIZE), "index.interval.bytes": "1"}


def test_truncating_inside_the_active_segment_drops_the_batch_holding_the_offset(tmp_path, clock):
    log = _filled(tmp_path, clock)
    assert log.segments.base_offsets() == [0, 6, 12, 18, 24, 30]
    log.flush()
    before = files(log, ".log")
    active_bytes = before[f"{30:020d}.log"]
    assert log.truncate_to(34)  # inside the active segment's second batch (33..35)
    assert log.log_end_offset == 33 and log.high_watermark == 33 and log.recovery_point == 33
    assert log.segments.base_offsets() == [0, 6, 12, 18, 24, 30]
    after = files(log, ".log")
    assert after[f"{30:020d}.log"] == active_bytes[: len(active_bytes) // 2]
    assert {k: v for k, v in after.items() if k != f"{30:020d}.log"} == \
        {k: v for k, v in before.items() if k != f"{30:020d}.log"}
    assert log.active_segment.offset_index.entries_list() == []
    assert log.active_segment.max_timestamp_so_far == clock.milliseconds() + 100 + 2
    assert log.leader_epoch_cache.entries == [(1, 0), (3, 18)]
    assert producer_state(log)[7][3][-1].last_offset == 32
    assert not log.truncate_to(33) and not log.truncate_to(40)
    # The producer continues from its last batch left; a follower append continues at 33.
    assert [r.offset for r in read_all_records(log)] == list(range(33))


def test_truncating_to_the_log_end_drops_an_epoch_that_starts_there(tmp_path, clock):
    """A broker elected leader (epoch 4 starts at its log end) that appended nothing before the
    next leader was: as a follower it must not go on naming epoch 4 as its last, which the new
    leader, who never had it, answers with a truncation to where this log already ends."""
    log = _filled(tmp_path, clock)
    log.assign_epoch_start_offset(4)
    assert log.leader_epoch_cache.entries == [(1, 0), (3, 18), (4, 36)] and log.latest_epoch == 4
    files_before = files(log, ".log")
    assert not log.truncate_to(36)  # nothing cut...
    assert log.leader_epoch_cache.entries == [(1, 0), (3, 18)] and log.latest_epoch == 3  # ...but epoch 4 gone
    assert log.log_end_offset == 36 and files(log, ".log") == files_before
    log.close()
    reopened = open_log(tmp_path, clock, "topic-0", **_FILLED_CONFIG)
    assert reopened.leader_epoch_cache.entries == [(1, 0), (3, 18)]  # (the checkpoint was written)


def test_truncating_at_a_segment_boundary_removes_that_segment_and_reactivates_the_one_below(tmp_path, clock):
    log = _filled(tmp_path, clock)
    log.flush_pending()  # the rolled segments sealed, their indexes read-only and trimmed
    below = files(log, ".log")[f"{18:020d}.log"]
    assert log.truncate_to(24)
    assert log.segments.base_offsets() == [0, 6, 12, 18]
    assert log.active_segment.base_offset == 18 and log.log_end_offset == 24
    assert log.leader_epoch_cache.entries == [(1, 0), (3, 18)]
    names = {p.name for p in log.directory.iterdir()}
    assert {f"{b:020d}.log.deleted" for b in (24, 30)} <= names
    assert f"{24:020d}.log" not in names and f"{30:020d}.log" not in names
    assert files(log, ".log")[f"{18:020d}.log"] == below
    # The reactivated segment takes appends again, indexing them, and rolls by size as before.
    producer = Producer(None)
    info = log.append_as_leader(producer.batch(3, clock.milliseconds(), 5, CompressionType.NONE, "x"), leader_epoch=3)
    assert (info.first_offset, info.roll_reason) == (24, "size")
    assert log.segments.base_offsets() == [0, 6, 12, 18, 24]
    clock.advance(log.config.file_delete_delay_ms + 1)
    log.segment_deleter.run_due()
    assert not [p for p in log.directory.iterdir() if p.name.endswith(".deleted")]


def test_truncating_below_several_segments_keeps_a_writable_active_segment(tmp_path, clock):
    log = _filled(tmp_path, clock)
    log.flush_pending()
    assert log.truncate_to(8)  # inside the second batch of segment 6
    assert log.segments.base_offsets() == [0, 6]
    assert log.log_end_offset == 6  # the batch 6..8 holds offset 8: it goes, leaving segment 6 empty
    assert log.active_segment.size == 0
    assert log.leader_epoch_cache.entries == [(1, 0)]
    assert log.latest_epoch == 1
    deleted = sorted(p.name for p in log.directory.iterdir() if p.name.endswith(".log.deleted"))
    assert deleted == [f"{b:020d}.log.deleted" for b in (12, 18, 24, 30)]
    # Producer state rebuilt at the new end: the last batch of producer 7 ends at offset 5.
    assert producer_state(log)[7][3][-1].last_offset == 5
    assert not any(o > 6 for o in log.producer_state_manager.snapshot_offsets)


def test_truncating_below_the_log_start_offset_starts_the_log_over(tmp_path, clock):
    log = _filled(tmp_path, clock)
    log.maybe_increment_log_start_offset(20)
    log.delete_old_segments()
    assert log.segments.base_offsets() == [18, 24, 30]
    assert log.truncate_to(15)
    assert log.segments.base_offsets() == [15]
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (15, 15, 15)
    assert log.recovery_point == 15
    assert log.leader_epoch_cache.entries == [] and log.latest_epoch is None
    assert producer_state(log) == {}
    assert read_all_records(log, 15) == []
    info = log.append_as_leader(producer_batch(2, timestamp=clock.milliseconds()), leader_epoch=5)
    assert info.first_offset == 15 and log.leader_epoch_cache.entries == [(5, 15)]
    # Kafka's truncateFullyAndStartAt, for a follower far behind its leader's log start.
    log.truncate_fully_and_start_at(1000)
    assert (log.log_start_offset, log.log_end_offset, log.segments.base_offsets()) == (1000, 1000, [1000])


def test_truncation_clamps_the_high_watermark_and_recovery_point_but_never_raises_them(tmp_path, clock):
    log = _filled(tmp_path, clock)
    log.replicated = True
    log.update_high_watermark(10)
    assert log.recovery_point == 0
    log.truncate_to(20)
    assert (log.log_end_offset, log.high_watermark, log.recovery_point) == (18, 10, 0)
    log.flush()
    assert log.recovery_point == 18
    log.truncate_to(7)
    assert (log.log_end_offset, log.high_watermark, log.recovery_point) == (6, 6, 6)


@pytest.mark.parametrize("clean", [True, False])
@pytest.mark.parametrize("target", [34, 30, 24, 8, 6, 1])
def test_a_truncated_log_reopens_as_it_was_left(tmp_path, clock, target, clean):
    log = _filled(tmp_path, clock)
    log.flush()
    log.truncate_to(target)
    end, epochs, producers = log.log_end_offset, log.leader_epoch_cache.entries, producer_state(log, last_only=True)
    records = read_all_records(log)
    log = reopen(log, clean=clean)
    assert log.log_end_offset == end
    assert log.leader_epoch_cache.entries == epochs
    assert producer_state(log, last_only=True) == producers
    assert read_all_records(log) == records
    # Appending continues where the truncation left the log, on both paths.
    info = log.append_as_leader(producer_batch(2, timestamp=clock.milliseconds(), tag="n"), leader_epoch=9)
    assert info.first_offset == end
    follower_batch = encode_batch([Record(end + 2, clock.milliseconds(), b"k", b"v")], base_offset=end + 2,
                                  partition_leader_epoch=10)
    log.append_as_follower(follower_batch)
    assert log.log_end_offset == end + 3
    assert log.leader_epoch_cache.entries[-2:] == [(9, end), (10, end + 2)]


def test_follower_appends_after_truncation_continue_the_leaders_segments(tmp_path, clock):
    leader = _filled(tmp_path, clock)
    follower = open_log(tmp_path, clock, "f-0", **_FILLED_CONFIG)
    copy_from(leader, follower, [100])
    assert_same_log(leader, follower)
    follower.flush_pending()
    for target in (31, 27, 13, 5):
        follower.truncate_to(target)
        copy_from(leader, follower, [250, 90])
        assert_same_log(leader, follower, truncated=True)


# -- refusals -------------------------------------------------------------------------------------


def _batches(log: Log) -> list[bytes]:
    whole = b"".join(segment.log.read(0, segment.size) for segment in log.segments)
    return [whole[position: position + header.size] for position, header in split_batches(whole)]


def _refused(follower: Log, chunk: bytes, error) -> None:
    before, end, epochs = directory_state(follower), follower.log_end_offset, follower.leader_epoch_cache.entries
    producers = producer_state(follower)
    with pytest.raises(error):
        follower.append_as_follower(chunk)
    assert directory_state(follower) == before
    assert follower.log_end_offset == end
    assert follower.leader_epoch_cache.entries == epochs and producer_state(follower) == producers


def test_follower_append_refusals_write_nothing(tmp_path, clock):
    leader = _filled(tmp_path, clock, batches=6)
    batches = _batches(leader)
    assert len(batches) == 6
    follower = open_log(tmp_path, clock, "f-0", **_FILLED_CONFIG)
    follower.append_as_follower(b"".join(batches[:2]))
    assert follower.log_end_offset == 6
    # Below the log end offset: the follower's position and its log disagree.
    with pytest.raises(UnexpectedAppendOffsetError) as refused:
        follower.append_as_follower(batches[1] + batches[2])
    assert (refused.value.first_offset, refused.value.last_offset) == (3, 8)
    _refused(follower, batches[1] + batches[2], UnexpectedAppendOffsetError)
    # A corrupt second batch: the first, valid, is not written either.
    corrupt = bytearray(batches[3])
    corrupt[-1] ^= 0xFF
    _refused(follower, batches[2] + bytes(corrupt), CorruptRecordError)
    # A torn chunk (a batch cut short).
    _refused(follower, batches[2] + batches[3][:-1], CorruptRecordError)
    # Offsets that do not increase: a batch followed by an earlier one, or by an overlapping one.
    _refused(follower, batches[3] + batches[2], OffsetsOutOfOrderError)
    overlapping = bytearray(batches[3])
    overlapping[0:8] = (7).to_bytes(8, "big")  # the base offset lies outside the CRC
    check_batch(bytes(overlapping))
    _refused(follower, batches[2] + bytes(overlapping), OffsetsOutOfOrderError)
    # Empty input is a no-op; the valid rest is accepted whole.
    assert follower.append_as_follower(b"").record_count == 0
    info = follower.append_as_follower(b"".join(batches[2:]))
    assert (info.first_offset, info.last_offset, info.record_count) == (6, 17, 12)
    assert files(follower, ".log") == files(leader, ".log")


def test_follower_append_allows_gaps_and_records_every_epoch(tmp_path, clock):
    log = open_log(tmp_path, clock)
    now = clock.milliseconds()
    chunk = b"".join(
        encode_batch([Record(base + i, now + base, b"k", b"v") for i in range(2)], base_offset=base,
                     partition_leader_epoch=epoch, producer_id=pid, producer_epoch=2, base_sequence=seq)
        for base, epoch, pid, seq in ((0, 1, 5, 0), (10, 1, 5, 2), (20, 4, 6, 0), (30, -1, -1, -1)))
    info = log.append_as_follower(chunk)
    assert (info.first_offset, info.last_offset, info.record_count) == (0, 31, 8)
    assert info.max_timestamp == now + 30 and info.offset_of_max_timestamp == 31
    assert log.log_end_offset == 32 and log.high_watermark == 32  # not replicated: as appends always did
    assert log.leader_epoch_cache.entries == [(1, 0), (4, 20)] and log.latest_epoch == 4
    state = producer_state(log)
    assert state[5][0] == 2 and [(b.last_seq, b.last_offset) for b in state[5][3]] == [(1, 1), (3, 11)]
    assert [(b.last_seq, b.last_offset) for b in state[6][3]] == [(1, 21)]
    assert [r.offset for r in read_all_records(log)] == [0, 1, 10, 11, 20, 21, 30, 31]
    # The stored bytes are the chunk's, leader epochs and all.
    assert log.active_segment.log.read(0, len(chunk)) == chunk


# -- high watermark -----------------------------------------------------------------------------


def test_a_replicated_logs_high_watermark_moves_only_when_told(tmp_path, clock):
    log = replicated_log(tmp_path, clock, "t-0", **{"segment.bytes": "400"})
    for i in range(10):
        log.append_as_leader(producer_batch(2, timestamp=clock.milliseconds() + i, tag=str(i)))
    assert len(log.segments) > 2
    assert (log.log_end_offset, log.high_watermark) == (20, 0)
    assert log.update_high_watermark(-5) == 0
    assert log.update_high_watermark(500) == 20
    assert log.update_high_watermark(6) == 6
    assert not log.maybe_increment_high_watermark(4)
    assert log.high_watermark == 6
    assert log.maybe_increment_high_watermark(8) and log.high_watermark == 8
    assert not log.maybe_increment_high_watermark(8)
    assert log.maybe_increment_high_watermark(99) and log.high_watermark == 20
    log.update_high_watermark(9)  # inside the batch 8..9: that batch is not readable yet
    for high_watermark, visible in ((9, 8), (8, 8), (10, 10), (7, 6), (0, 0), (20, 20)):
        log.update_high_watermark(high_watermark)
        assert [r.offset for r in read_all_records(log)] == list(range(visible)), high_watermark
        consumer = log.read(0, 1 << 20)
        offsets = [r.offset for b in iter_batches(consumer.region.read_bytes()) for r in b.records] \
            if consumer.region is not None else []
        assert not offsets or offsets[-1] < visible
        follower = log.read(0, 1 << 20, isolation=LOG_END)
        assert [b.header.base_offset for b in iter_batches(follower.region.read_bytes())][0] == 0
        assert log.read(high_watermark, 1 << 20).region is None
        tail = log.try_read_tail(log.active_segment.base_offset, 1 << 20, isolation=LOG_END)
        assert tail.region is not None
        if high_watermark <= log.active_segment.base_offset:
            assert log.try_read_tail(log.active_segment.base_offset, 1 << 20).region is None
        assert log.fetch_offset_by_timestamp(LATEST_TIMESTAMP).offset == high_watermark
        found = log.fetch_offset_by_timestamp(clock.milliseconds() + 9)
        assert (found is None) if high_watermark < 19 else found.offset == 18
    # The follower's read reaches the log end wherever the high watermark is.
    log.update_high_watermark(2)
    offsets, position = [], 0
    while position < log.log_end_offset:
        info = log.read(position, 50, isolation=LOG_END)
        batch = [b for b in iter_batches(info.region.read_bytes())]
        offsets.extend(r.offset for b in batch for r in b.records)
        position = batch[-1].header.next_offset
    assert offsets == list(range(20))
    # Follower appends leave it too, and a truncation only lowers it.
    follower = replicated_log(tmp_path, clock, "f-0")
    copy_from(log, follower)
    assert follower.high_watermark == 0
    follower.update_high_watermark(15)
    follower.truncate_to(12)
    assert follower.high_watermark == 12


def test_a_high_watermark_at_a_segment_boundary_stops_reads_there(tmp_path, clock):
    log = replicated_log(tmp_path, clock, "t-0", **{"segment.bytes": "400"})
    for i in range(10):
        log.append_as_leader(producer_batch(2, timestamp=clock.milliseconds() + i, tag=str(i)))
    boundary = log.segments.base_offsets()[1]
    log.update_high_watermark(boundary)
    info = log.read(0, 1 << 20)
    assert [r.offset for b in iter_batches(info.region.read_bytes()) for r in b.records] == list(range(boundary))
    assert log.read(boundary, 1 << 20).region is None
    assert log.read(boundary, 1 << 20, isolation=LOG_END).region is not None


def test_a_non_replicated_log_keeps_the_high_watermark_at_the_log_end(tmp_path, clock):
    log = open_log(tmp_path, clock)
    assert not log.replicated
    log.append_as_leader(producer_batch(2, timestamp=clock.milliseconds()))
    assert log.high_watermark == log.log_end_offset == 2
    raw = encode_batch([Record(5, clock.milliseconds(), b"k", b"v")], base_offset=5)
    log.append_as_follower(raw)
    assert log.high_watermark == log.log_end_offset == 6
    assert log.read(0, 1 << 20).region.read_bytes() == log.read(0, 1 << 20, isolation=LOG_END).region.read_bytes()


def test_replicated_logs_start_from_the_checkpointed_high_watermark(tmp_path, clock):
    config = LogConfig()
    manager = LogManager([tmp_path], config, clock=clock)
    manager.replicated = True
    manager.startup()
    log = manager.get_or_create_log("t", 0)
    other = manager.get_or_create_log("t", 1)
    assert log.replicated and other.replicated
    for i in range(5):
        log.append_as_leader(producer_batch(2, timestamp=clock.milliseconds(), tag=str(i)))
        other.append_as_leader(producer_batch(1, timestamp=clock.milliseconds(), tag=str(i)))
    log.update_high_watermark(6)
    other.update_high_watermark(5)
    manager.checkpoint_high_watermarks()
    assert manager.high_watermark_checkpoints() == {("t", 0): 6, ("t", 1): 5}
    log.update_high_watermark(8)  # moved after the last checkpoint: lost with a crash
    for log_ in manager.all_logs().values():  # kill -9
        for segment in log_.segments:
            segment.close_handlers()
    for log_dir in manager.log_dirs:
        log_dir.unlock()
    checkpoint = tmp_path / "replication-offset-checkpoint"
    text = checkpoint.read_text().replace("t 1 5", "t 1 99")  # above the log end: capped
    checkpoint.write_text(text)

    manager = LogManager([tmp_path], config, clock=clock)
    manager.replicated = True
    manager.startup()
    assert manager.get_log("t", 0).high_watermark == 6
    assert manager.get_log("t", 1).high_watermark == 5
    assert [r.offset for r in read_all_records(manager.get_log("t", 0))] == list(range(6))
    manager.shutdown()
    # A broker that is not in a cluster: high watermark at the log end, as always.
    manager = LogManager([tmp_path], config, clock=clock)
    manager.startup()
    assert manager.get_log("t", 0).high_watermark == 10 and not manager.get_log("t", 0).replicated
    manager.shutdown()


def test_epoch_queries_and_a_new_leaders_epoch(tmp_path, clock):
    log = open_log(tmp_path, clock)
    assert log.latest_epoch is None and log.end_offset_for_epoch(0) == (-1, -1)
    log.append_as_leader(producer_batch(2, timestamp=clock.milliseconds()), leader_epoch=0)
    log.assign_epoch_start_offset(2)
    assert log.latest_epoch == 2 and log.leader_epoch_cache.entries == [(0, 0), (2, 2)]
    # The new leader's appends in its epoch record nothing more, and go inline.
    info = log.try_append_as_leader(producer_batch(3, timestamp=clock.milliseconds()), leader_epoch=2,
                                    max_bytes=1 << 20)
    assert info is not None and info.first_offset == 2
    assert log.leader_epoch_cache.entries == [(0, 0), (2, 2)]
    assert log.end_offset_for_epoch(2) == (2, 5)
    assert log.end_offset_for_epoch(1) == (0, 2)
    assert log.end_offset_for_epoch(0) == (0, 2)
    assert log.end_offset_for_epoch(3) == (-1, -1)
    log.assign_epoch_start_offset(4, 7)
    assert log.leader_epoch_cache.entries == [(0, 0), (2, 2), (4, 7)]
    assert read_header(log.read(2, 1 << 20).region.read_bytes()).partition_leader_epoch == 2
