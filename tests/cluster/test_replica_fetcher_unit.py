"""What a follower does with a leader's answer (apply_fetched, truncation_offset), on real logs on
disk: append and follow the high watermark and log start, truncate a diverging suffix by Kafka's
rule, start over past an out-of-range log. The fetcher against real leaders is in
test_replica_fetcher.py."""

from __future__ import annotations

from kio.index import load_request_schema, load_response_schema

from triolog.broker.cluster.replica_fetcher import apply_fetched, truncation_offset
from triolog.broker.storage.log import FetchIsolation, Log
from triolog.config.log_config import LogConfig
from triolog.protocol.errors import ErrorCode
from triolog.protocol.kafka.replica_fetch import EpochEndOffset, PartitionFetchResult
from triolog.protocol.records import Record, encode_batch

REQUEST = load_request_schema(1, 12)
RESPONSE = load_response_schema(1, 12)
LEADER, FOLLOWER = 1, 2


def open_log(tmp_path, name: str, clock, **overrides) -> Log:
    config = LogConfig().with_overrides(overrides) if overrides else LogConfig()
    log = Log.open(tmp_path / name / "t-0", config, clock=clock)
    log.replicated = True
    return log


def write(log: Log, epoch: int, count: int, tag: str = "") -> None:
    """``count`` one-record batches as a leader in ``epoch`` takes them."""
    if log.latest_epoch != epoch:
        log.assign_epoch_start_offset(epoch)
    for i in range(count):
        log.append_as_leader(
            encode_batch([Record(0, 1000 + i, f"k{i}".encode(), f"{tag}{i}".encode() * 20)]), leader_epoch=epoch
        )


def log_files(log: Log) -> dict[str, bytes]:
    return {
        p.name: p.read_bytes()
        for p in sorted(log.directory.iterdir())
        if p.name.endswith(".log") or p.name == "leader-epoch-checkpoint"
    }


def result(**fields) -> PartitionFetchResult:
    values = {
        "topic": "t",
        "partition": 0,
        "error_code": 0,
        "high_watermark": -1,
        "last_stable_offset": -1,
        "log_start_offset": -1,
        "diverging_epoch": None,
        "records": b"",
    }
    return PartitionFetchResult(**{**values, **fields})


# -- applying an answer to the log ---------------------------------------------------------------


def test_append_then_high_watermark_and_log_start_follow_the_leader(tmp_path, clock):
    leader, follower = open_log(tmp_path, "leader", clock), open_log(tmp_path, "follower", clock)
    write(leader, 0, 5)
    write(leader, 3, 5)
    records = leader.read(0, 1 << 20, isolation=FetchIsolation.LOG_END).region.read_bytes()
    applied = apply_fetched(follower, result(records=records, high_watermark=7, log_start_offset=2))
    assert applied.appended_bytes == len(records) and applied.truncated_to is None
    assert follower.log_end_offset == 10 and follower.high_watermark == 7 and follower.log_start_offset == 2
    segment_files = {name: data for name, data in log_files(leader).items() if name.endswith(".log")}
    assert {name: data for name, data in log_files(follower).items() if name.endswith(".log")} == segment_files
    # (the epoch cache starts at the new log start, as Kafka's does)
    assert [(e.epoch, e.start_offset) for e in follower.leader_epoch_cache.entries] == [(0, 2), (3, 5)]
    # a leader high watermark past what the follower has is cut to its log end
    apply_fetched(follower, result(high_watermark=50, log_start_offset=2))
    assert follower.high_watermark == 10


def test_truncation_offset_follows_kafka(tmp_path, clock):
    follower = open_log(tmp_path, "follower", clock)
    write(follower, 0, 5)  # epoch 0: 0..4
    write(follower, 2, 5)  # epoch 2: 5..9
    write(follower, 4, 5)  # epoch 4: 10..14
    # the leader has epoch 2 ending at 7: the follower cuts there
    assert truncation_offset(follower, EpochEndOffset(2, 7)) == 7
    # the leader's epoch 2 ends past the follower's: the follower's own end of it
    assert truncation_offset(follower, EpochEndOffset(2, 12)) == 10
    # the leader has epoch 3, the follower not: to the end of the follower's epoch 2 (then ask again)
    assert truncation_offset(follower, EpochEndOffset(3, 8)) == 10
    # the follower has no epoch that old: the leader's offset
    assert truncation_offset(open_log(tmp_path, "empty", clock), EpochEndOffset(1, 3)) == 0


def test_divergence_truncates_and_the_next_fetch_appends(tmp_path, clock):
    leader, follower = open_log(tmp_path, "leader", clock), open_log(tmp_path, "follower", clock)
    write(leader, 0, 5, "a")
    write(follower, 0, 5, "a")
    write(follower, 1, 4, "stale")  # the old leader's suffix that never committed
    write(leader, 2, 6, "b")
    epoch, end = leader.end_offset_for_epoch(follower.latest_epoch)
    applied = apply_fetched(follower, result(diverging_epoch=EpochEndOffset(epoch, end), high_watermark=11))
    assert applied.truncated_to == 5 and follower.log_end_offset == 5
    apply_fetched(
        follower,
        result(
            records=leader.read(5, 1 << 20, isolation=FetchIsolation.LOG_END).region.read_bytes(), high_watermark=11
        ),
    )
    assert log_files(follower) == log_files(leader)


def test_out_of_range(tmp_path, clock):
    behind = open_log(tmp_path, "behind", clock)
    write(behind, 0, 3)
    applied = apply_fetched(
        behind, result(error_code=ErrorCode.OFFSET_OUT_OF_RANGE, log_start_offset=20, high_watermark=25)
    )
    assert applied.started_at == 20
    assert (behind.log_start_offset, behind.log_end_offset) == (20, 20)
    ahead = open_log(tmp_path, "ahead", clock)
    write(ahead, 0, 10)
    applied = apply_fetched(
        ahead, result(error_code=ErrorCode.OFFSET_OUT_OF_RANGE, log_start_offset=0, high_watermark=6)
    )
    assert applied.truncated_to == 6 and ahead.log_end_offset == 6
    # in range by the leader's own numbers: nothing to do but wait and ask again
    applied = apply_fetched(
        ahead, result(error_code=ErrorCode.OFFSET_OUT_OF_RANGE, log_start_offset=0, high_watermark=6)
    )
    assert applied.back_off and ahead.log_end_offset == 6


def test_empty_log_starting_in_mid_batch_takes_the_whole_batch(tmp_path, clock):
    """The leader's log start is inside a batch (delete_records): the follower that started over
    there is handed the whole batch and starts at its base instead."""
    leader = open_log(tmp_path, "leader", clock)
    leader.assign_epoch_start_offset(0)
    leader.append_as_leader(encode_batch([Record(i, 1000, None, b"v") for i in range(10)]), leader_epoch=0)
    follower = open_log(tmp_path, "follower", clock)
    follower.truncate_fully_and_start_at(4)
    records = leader.read(0, 1 << 20, isolation=FetchIsolation.LOG_END).region.read_bytes()
    applied = apply_fetched(follower, result(records=records, high_watermark=10, log_start_offset=4))
    assert applied.started_at == 0
    assert (follower.log_start_offset, follower.log_end_offset, follower.high_watermark) == (4, 10, 10)


# -- the fetcher against a fake leader -------------------------------------------------------------
