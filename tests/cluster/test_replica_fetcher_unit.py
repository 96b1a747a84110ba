"""The follower's fetcher without ZooKeeper: real logs on disk, a fake leader speaking Fetch v12
(decoded and answered with kio, serving a real leader log the way Kafka's leader does), and a
replica manager and metadata cache reduced to what the fetcher reads."""

from __future__ import annotations

import io

import pytest
import trio
from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer

from triolog.broker.cluster.replica_fetcher import ReplicaFetcherManager, apply_fetched, truncation_offset
from triolog.broker.cluster.replica_manager import HostedPartition
from triolog.broker.cluster.zk_data import BrokerRegistration, RegisteredEndpoint
from triolog.broker.storage.log import FetchIsolation, Log
from triolog.config.log_config import LogConfig
from triolog.protocol.errors import ErrorCode, OffsetOutOfRangeError
from triolog.protocol.frames import NEED_DATA, FrameDecoder
from triolog.protocol.kafka.replica_fetch import EpochEndOffset, PartitionFetchResult
from triolog.protocol.kafka.schema import build
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
        log.append_as_leader(encode_batch([Record(0, 1000 + i, f"k{i}".encode(), f"{tag}{i}".encode() * 20)]),
                             leader_epoch=epoch)


def log_files(log: Log) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(log.directory.iterdir())
            if p.name.endswith(".log") or p.name == "leader-epoch-checkpoint"}


def result(**fields) -> PartitionFetchResult:
    values = {"topic": "t", "partition": 0, "error_code": 0, "high_watermark": -1, "last_stable_offset": -1,
              "log_start_offset": -1, "diverging_epoch": None, "records": b""}
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
    write(follower, 0, 5)   # epoch 0: 0..4
    write(follower, 2, 5)   # epoch 2: 5..9
    write(follower, 4, 5)   # epoch 4: 10..14
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
    apply_fetched(follower, result(records=leader.read(5, 1 << 20, isolation=FetchIsolation.LOG_END)
                                   .region.read_bytes(), high_watermark=11))
    assert log_files(follower) == log_files(leader)


def test_out_of_range(tmp_path, clock):
    behind = open_log(tmp_path, "behind", clock)
    write(behind, 0, 3)
    applied = apply_fetched(behind, result(error_code=ErrorCode.OFFSET_OUT_OF_RANGE, log_start_offset=20,
                                           high_watermark=25))
    assert applied.started_at == 20
    assert (behind.log_start_offset, behind.log_end_offset) == (20, 20)
    ahead = open_log(tmp_path, "ahead", clock)
    write(ahead, 0, 10)
    applied = apply_fetched(ahead, result(error_code=ErrorCode.OFFSET_OUT_OF_RANGE, log_start_offset=0,
                                          high_watermark=6))
    assert applied.truncated_to == 6 and ahead.log_end_offset == 6
    # in range by the leader's own numbers: nothing to do but wait and ask again
    applied = apply_fetched(ahead, result(error_code=ErrorCode.OFFSET_OUT_OF_RANGE, log_start_offset=0,
                                          high_watermark=6))
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


class FakeReplicas:
    def __init__(self):
        self.hosted: dict[tuple[str, int], HostedPartition] = {}
        self.generation = 0
        self._changed = trio.Event()

    def host(self, log: Log, leader: int, epoch: int, topic: str = "t", partition: int = 0) -> None:
        self.hosted[(topic, partition)] = HostedPartition(topic, partition, leader, epoch, log)
        self.bump()

    def bump(self) -> None:
        self.generation += 1
        self._changed.set()
        self._changed = trio.Event()

    async def wait_changed(self, seen: int) -> int:
        while self.generation <= seen:
            await self._changed.wait()
        return self.generation


class FakeCache(FakeReplicas):
    def __init__(self):
        super().__init__()
        self.brokers: dict[int, BrokerRegistration] = {}

    def register(self, broker_id: int, port: int) -> None:
        self.brokers[broker_id] = BrokerRegistration(
            broker_id, (RegisteredEndpoint("PLAINTEXT", "PLAINTEXT", "127.0.0.1", port),))
        self.bump()


class FakeLeader:
    """A leader's Fetch, as Kafka serves a replica's: epochs checked, divergence answered, reads
    up to the log end, its high watermark moved by the follower's fetch offset."""

    def __init__(self, logs: dict[tuple[str, int], Log], epoch: int):
        self.logs = logs
        self.epoch = epoch
        self.requests: list = []
        #: partition -> error code to answer instead of serving it
        self.errors: dict[tuple[str, int], int] = {}
        #: close the connection after this many answers (None: never)
        self.drop_after: int | None = None
        self.port = 0

    async def start(self, nursery) -> None:
        listeners = await nursery.start(trio.serve_tcp, self.serve, 0)
        self.port = listeners[0].socket.getsockname()[1]

    async def serve(self, stream) -> None:
        decoder = FrameDecoder()
        answered = 0
        async with stream:
            while True:
                data = await stream.receive_some(65536)
                if not data:
                    return
                decoder.receive_data(data)
                while (frame := decoder.next_frame()) is not NEED_DATA:
                    header, size = entity_reader(REQUEST.__header_schema__)(frame, 0)
                    request, _ = entity_reader(REQUEST)(frame, size)
                    self.requests.append(request)
                    body = await self.answer(request)
                    out = io.BytesIO()
                    entity_writer(RESPONSE.__header_schema__)(
                        out, RESPONSE.__header_schema__(correlation_id=header.correlation_id))
                    entity_writer(RESPONSE)(out, body)
                    payload = out.getvalue()
                    await stream.send_all(len(payload).to_bytes(4, "big") + payload)
                    answered += 1
                    if self.drop_after is not None and answered >= self.drop_after:
                        self.drop_after = None
                        return

    async def answer(self, request):
        topics, waiting = [], True
        for topic in request.topics:
            partitions = []
            for p in topic.partitions:
                key = (topic.topic, p.partition)
                partitions.append(self.partition(key, p))
                if partitions[-1]["records"] or partitions[-1]["error_code"] or \
                        partitions[-1].get("diverging_epoch"):
                    waiting = False
            topics.append({"topic": topic.topic, "partitions": partitions})
        if waiting:  # a long poll, cut short
            await trio.sleep(min(request.max_wait.total_seconds(), 0.05))
        return build(RESPONSE, {"throttle_time": 0, "error_code": 0, "session_id": 0, "responses": topics})

    def partition(self, key, p) -> dict:
        log = self.logs.get(key)
        base = {"partition_index": p.partition, "high_watermark": -1, "last_stable_offset": -1,
                "log_start_offset": -1, "aborted_transactions": None, "preferred_read_replica": -1,
                "records": b"", "error_code": 0}
        if key in self.errors:
            return {**base, "error_code": self.errors[key]}
        if log is None:
            return {**base, "error_code": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
        if p.current_leader_epoch < self.epoch:
            return {**base, "error_code": ErrorCode.FENCED_LEADER_EPOCH}
        if p.current_leader_epoch > self.epoch:
            return {**base, "error_code": ErrorCode.UNKNOWN_LEADER_EPOCH}
        offsets = {"high_watermark": log.high_watermark, "last_stable_offset": log.high_watermark,
                   "log_start_offset": log.log_start_offset}
        if p.last_fetched_epoch >= 0:
            epoch, end = log.end_offset_for_epoch(p.last_fetched_epoch)
            if epoch < p.last_fetched_epoch or end < p.fetch_offset:
                return {**base, **offsets, "diverging_epoch": {"epoch": epoch, "end_offset": end}}
        try:
            info = log.read(p.fetch_offset, p.partition_max_bytes, isolation=FetchIsolation.LOG_END)
        except OffsetOutOfRangeError:
            return {**base, **offsets, "error_code": ErrorCode.OFFSET_OUT_OF_RANGE}
        # the follower has what it asked past: the leader's high watermark may move (one follower)
        log.maybe_increment_high_watermark(p.fetch_offset)
        offsets["high_watermark"] = offsets["last_stable_offset"] = log.high_watermark
        records = info.region.read_bytes() if info.region is not None else b""
        return {**base, **offsets, "records": records}


async def wait_for(condition, timeout: float = 10.0) -> None:
    with trio.fail_after(timeout):
        while not condition():
            await trio.sleep(0.01)


@pytest.fixture
async def harness(tmp_path, clock, nursery):
    class Harness:
        pass

    h = Harness()
    h.leader_log = open_log(tmp_path, "leader", clock, **{"segment.bytes": 2048})
    h.follower_log = open_log(tmp_path, "follower", clock, **{"segment.bytes": 2048})
    h.leader = FakeLeader({("t", 0): h.leader_log}, epoch=0)
    await h.leader.start(nursery)
    h.replicas, h.cache = FakeReplicas(), FakeCache()
    h.cache.register(LEADER, h.leader.port)
    h.manager = ReplicaFetcherManager(FOLLOWER, h.cache, h.replicas, listener_name="PLAINTEXT", wait_max_ms=100,
                                      backoff_ms=50, response_margin_ms=2000)
    h.nursery = nursery
    return h


def caught_up(h) -> bool:
    return (h.follower_log.log_end_offset == h.leader_log.log_end_offset
            and h.follower_log.high_watermark == h.leader_log.high_watermark == h.leader_log.log_end_offset)


async def test_follower_copies_the_leader_byte_for_byte(harness):
    h = harness
    write(h.leader_log, 0, 30)
    write(h.leader_log, 1, 30)
    assert h.leader_log.num_segments > 3
    h.replicas.host(h.follower_log, LEADER, 1)
    h.leader.epoch = 1
    await h.nursery.start(h.manager.run)
    await wait_for(lambda: caught_up(h))
    assert log_files(h.follower_log) == log_files(h.leader_log)
    request = h.leader.requests[-1]
    assert request.replica_id == FOLLOWER and request.max_wait.total_seconds() == 0.1
    [part] = request.topics[0].partitions
    assert (part.current_leader_epoch, part.fetch_offset, part.last_fetched_epoch) == (1, 60, 1)
    # more records: they follow
    write(h.leader_log, 1, 7)
    await wait_for(lambda: caught_up(h))
    assert log_files(h.follower_log) == log_files(h.leader_log)


async def test_divergent_suffix_is_truncated(harness):
    h = harness
    write(h.leader_log, 0, 10, "same")
    write(h.follower_log, 0, 10, "same")
    write(h.follower_log, 1, 12, "lost")  # written by a leader of epoch 1 that never committed it
    write(h.leader_log, 2, 5, "new")
    h.leader.epoch = 2
    h.replicas.host(h.follower_log, LEADER, 2)
    await h.nursery.start(h.manager.run)
    await wait_for(lambda: caught_up(h))
    assert log_files(h.follower_log) == log_files(h.leader_log)
    assert h.follower_log.leader_epoch_cache.entries == h.leader_log.leader_epoch_cache.entries


async def test_reconnects_after_the_leader_drops_the_connection(harness):
    h = harness
    write(h.leader_log, 0, 20)
    h.leader.drop_after = 1
    h.replicas.host(h.follower_log, LEADER, 0)
    await h.nursery.start(h.manager.run)
    await wait_for(lambda: caught_up(h))
    assert log_files(h.follower_log) == log_files(h.leader_log)


async def test_fenced_partition_waits_for_new_metadata(harness):
    h = harness
    write(h.leader_log, 0, 5)
    h.leader.epoch = 3  # the leader is ahead of the follower's metadata
    h.replicas.host(h.follower_log, LEADER, 2)
    await h.nursery.start(h.manager.run)
    await wait_for(lambda: len(h.leader.requests) >= 1)
    await trio.sleep(0.3)  # six backoffs: a fenced partition is not asked for again
    assert len(h.leader.requests) == 1 and h.follower_log.log_end_offset == 0
    # new metadata: the new epoch, a new fetcher, the partition fetched
    h.replicas.host(h.follower_log, LEADER, 3)
    await wait_for(lambda: caught_up(h))


async def test_retriable_error_backs_off_then_fetches(harness):
    h = harness
    write(h.leader_log, 0, 5)
    h.leader.errors[("t", 0)] = ErrorCode.NOT_LEADER_OR_FOLLOWER
    h.replicas.host(h.follower_log, LEADER, 0)
    await h.nursery.start(h.manager.run)
    await wait_for(lambda: len(h.leader.requests) >= 3)  # asked again after each backoff
    assert h.follower_log.log_end_offset == 0
    del h.leader.errors[("t", 0)]
    await wait_for(lambda: caught_up(h))


async def test_fetchers_follow_the_leaders(harness, tmp_path, clock):
    h = harness
    write(h.leader_log, 0, 5)
    await h.nursery.start(h.manager.run)
    assert h.manager.fetchers == {}
    h.replicas.host(h.follower_log, LEADER, 0)
    await wait_for(lambda: caught_up(h))
    first = h.manager.fetchers[LEADER]
    # this broker becomes the leader: no fetcher
    h.replicas.host(h.follower_log, FOLLOWER, 1)
    await wait_for(lambda: h.manager.fetchers == {})
    # a leader that is not live: none either
    h.replicas.host(h.follower_log, 7, 2)
    await trio.sleep(0.05)
    assert h.manager.fetchers == {}
    # back to the first leader, in a new epoch: a new fetcher
    h.leader.epoch = 3
    h.replicas.host(h.follower_log, LEADER, 3)
    await wait_for(lambda: LEADER in h.manager.fetchers)
    assert h.manager.fetchers[LEADER] is not first


async def test_unreachable_leader_is_retried(harness):
    h = harness
    write(h.leader_log, 0, 5)
    with trio.socket.socket() as sock:  # a port nobody listens on
        await sock.bind(("127.0.0.1", 0))
        dead_port = sock.getsockname()[1]
    h.cache.register(LEADER, dead_port)
    h.replicas.host(h.follower_log, LEADER, 0)
    await h.nursery.start(h.manager.run)
    await trio.sleep(0.2)
    assert h.follower_log.log_end_offset == 0
    h.cache.register(LEADER, h.leader.port)  # it registers again, on its port
    await wait_for(lambda: caught_up(h))

