"""Prometheus metrics: the storage collector, the server counters, the endpoint of the real broker.

Every scrape is parsed with prometheus_client's own parser, which proves the output is valid
text exposition format before any value is looked at.
"""

from __future__ import annotations

import ast
import os
import shutil
import socket
import struct
import time
import urllib.request
from pathlib import Path

import msgpack
import pytest
import trio
from prometheus_client import REGISTRY, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from triolog.broker.metrics import API_LABELS, LATENCY_BUCKETS_S, WRONG_PROTOCOLS, BrokerMetrics
from triolog.broker.server.app import BrokerServer
from triolog.broker.storage.cleaner.log_cleaner import CleanerConfig, CleanerThread
from triolog.broker.storage.log_manager import LogManager
from triolog.broker.storage.segment import ROLL_REASONS
from triolog.config.broker_config import BrokerConfig
from triolog.config.log_config import LogConfig
from triolog.protocol import messages as m
from triolog.protocol.errors import ErrorCode
from triolog.protocol.records import Record, build_batch, encode_batch, iter_batches

from .e2e.broker_process import InProcessBroker, WireClient
from .storage.helpers import producer_batch

ROOT = Path(__file__).resolve().parent.parent

Samples = dict[tuple[str, frozenset], float]


def parse(text: str) -> Samples:
    """Every sample of a scrape, keyed by (sample name, labels); raises if the text is not valid."""
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            key = (sample.name, frozenset(sample.labels.items()))
            assert key not in samples, f"duplicate series {key}"
            samples[key] = sample.value
    return samples


def value(samples: Samples, name: str, **labels) -> float:
    key = (name, frozenset((k, str(v)) for k, v in labels.items()))
    if key not in samples:
        near = sorted(str(dict(k[1])) for k in samples if k[0] == name)
        raise AssertionError(f"no series {name}{labels}; {name} has: {near}")
    return samples[key]


def family_names(text: str) -> set[str]:
    return {family.name for family in text_string_to_metric_families(text)}


# -- the module boundary -----------------------------------------------------------------------


def test_metrics_module_is_the_only_one_importing_prometheus_client():
    importers = []
    for package in ("protocol", "config", "broker", "client", "pipeline"):
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text(), filename=str(path))
            for node in ast.walk(tree):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                    [node.module] if isinstance(node, ast.ImportFrom) and node.module else []
                if any(n == "prometheus_client" or n.startswith("prometheus_client.") for n in names):
                    importers.append(str(path.relative_to(ROOT)))
    assert sorted(set(importers)) == ["broker/metrics.py"]


# -- the storage collector ---------------------------------------------------------------------


def _manager(tmp_path, clock, **overrides) -> LogManager:
    config = LogConfig().with_overrides(overrides) if overrides else LogConfig()
    manager = LogManager([tmp_path / "logs"], config, clock=clock)
    manager.startup()
    return manager


def test_metrics_log_collector_reports_each_partition_from_the_log_state(tmp_path, clock):
    manager = _manager(tmp_path, clock, **{"segment.bytes": "400"})
    metrics = BrokerMetrics(manager, process_collectors=False)
    try:
        busy = manager.get_or_create_log("orders", 0)
        idle = manager.get_or_create_log("orders", 1)
        other = manager.get_or_create_log("audit.log-v2", 7)
        for _ in range(10):
            busy.append_as_leader(producer_batch(2, timestamp=clock.milliseconds(), value_size=60))
        other.append_as_leader(producer_batch(3, timestamp=clock.milliseconds()))
        busy.maybe_increment_log_start_offset(5)

        samples = parse(metrics.render().decode())

        assert busy.roll_counts["size"] >= 2
        for log in (busy, idle, other):
            labels = {"topic": log.topic, "partition": log.partition}
            assert value(samples, "triolog_log_size_bytes", **labels) == log.size
            assert value(samples, "triolog_log_segments", **labels) == log.num_segments
            assert value(samples, "triolog_log_start_offset", **labels) == log.log_start_offset
            assert value(samples, "triolog_log_end_offset", **labels) == log.log_end_offset
            assert value(samples, "triolog_log_high_watermark", **labels) == log.high_watermark
            assert value(samples, "triolog_log_recovery_point", **labels) == log.recovery_point
            for reason in ROLL_REASONS:
                assert value(samples, "triolog_log_rolls_total", reason=reason, **labels) == log.roll_counts[reason]
        busy_labels = {"topic": "orders", "partition": 0}
        assert value(samples, "triolog_log_end_offset", **busy_labels) == 20
        assert value(samples, "triolog_log_start_offset", **busy_labels) == 5
        assert value(samples, "triolog_log_segments", **busy_labels) == busy.roll_counts["size"] + 1
        on_disk = sum(p.stat().st_size for p in busy.directory.glob("*.log"))
        assert value(samples, "triolog_log_size_bytes", **busy_labels) == on_disk
        assert value(samples, "triolog_log_size_bytes", topic="orders", partition=1) == 0

        # Values are read at scrape time: the next scrape sees the next append.
        idle.append_as_leader(producer_batch(4, timestamp=clock.milliseconds()))
        again = parse(metrics.render().decode())
        assert value(again, "triolog_log_end_offset", topic="orders", partition=1) == 4
        assert value(again, "triolog_log_size_bytes", topic="orders", partition=1) == idle.size > 0
    finally:
        manager.shutdown()


def test_metrics_log_collector_forgets_deleted_partitions(tmp_path, clock):
    manager = _manager(tmp_path, clock)
    metrics = BrokerMetrics(manager, process_collectors=False)
    try:
        manager.get_or_create_log("gone", 0)
        assert ("triolog_log_segments", frozenset({("topic", "gone"), ("partition", "0")})) in parse(
            metrics.render().decode())
        assert manager.delete_log("gone", 0)
        assert not any(dict(k[1]).get("topic") == "gone" for k in parse(metrics.render().decode()))
    finally:
        manager.shutdown()


def test_metrics_count_retention_deletions_by_reason_and_report_log_dirs(tmp_path, clock):
    manager = _manager(tmp_path, clock, **{"retention.ms": "1000"})
    metrics = BrokerMetrics(manager, process_collectors=False)
    try:
        log = manager.get_or_create_log("events", 0)
        for _ in range(3):
            log.append_as_leader(producer_batch(2, timestamp=clock.milliseconds()))
            log.roll()
        labels = {"topic": "events", "partition": 0}
        before = parse(metrics.render().decode())
        assert value(before, "triolog_log_segments_deleted_total", reason="retention_ms", **labels) == 0
        first_segment_size = log.segments.first_segment().size
        log.maybe_increment_log_start_offset(2)
        assert manager.cleanup_logs() == 1
        clock.advance(1001)
        assert manager.cleanup_logs() == 2
        samples = parse(metrics.render().decode())
        assert value(samples, "triolog_log_segments_deleted_total", reason="log_start_offset", **labels) == 1
        assert value(samples, "triolog_log_deleted_bytes_total", reason="log_start_offset", **labels) == \
            first_segment_size
        assert value(samples, "triolog_log_segments_deleted_total", reason="retention_ms", **labels) == 2
        assert value(samples, "triolog_log_segments_deleted_total", reason="retention_bytes", **labels) == 0
        assert value(samples, "triolog_log_start_offset", **labels) == 6
        assert value(samples, "triolog_log_dir_offline", log_dir=str(manager.log_dirs[0].path)) == 0
    finally:
        manager.shutdown()


# -- the cleaner collector ---------------------------------------------------------------------


def _segment_bytes(log) -> list[int]:
    return [s.size for s in log.segments]


def test_metrics_cleaner_collector_reports_real_cleans_of_known_data(tmp_path, clock):
    """Each cleaner series against numbers known without the cleaner: records written and keys
    (kept, removed), segment file sizes before and after (read, written), the map's slots
    (utilization), the manual clock (seconds since the last run), a wall clock around the run
    (its duration). Every value differs from the others, so swapped series fail."""
    config = LogConfig().with_overrides({"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01"})
    manager = LogManager([tmp_path / "logs"], config, clock=clock,
                         cleaner_config=CleanerConfig(num_threads=0, dedupe_buffer_size=24 * 100))
    manager.startup()  # no cleaner threads: the test runs each round itself, in this thread
    metrics = BrokerMetrics(manager, process_collectors=False)
    thread = CleanerThread(manager.cleaner, 0)

    def write(log, keys) -> None:
        for i, key in enumerate(keys):
            log.append_as_leader(encode_batch([Record(0, clock.milliseconds(), key, b"value-%d" % i)]))
        log.roll()

    def clean() -> float:
        started = time.monotonic()
        assert manager.cleaner.try_clean_filthiest_log(thread)
        return time.monotonic() - started

    try:
        log = manager.get_or_create_log("compacted", 0)
        # Round 1: 12 records of 3 keys in one segment -> 3 kept, 9 removed.
        write(log, [b"k%d" % (i % 3) for i in range(12)])
        read_1 = sum(_segment_bytes(log)[:-1])
        clean()
        written_1 = sum(_segment_bytes(log)[:-1])
        # Round 2: 5 more (k0 again, k3 twice, k4, k5): of the 3 + 5 records read, k0's old value
        # and k3's first go -> 6 kept, 2 removed; the map holds the 4 dirty keys.
        write(log, [b"k0", b"k3", b"k3", b"k4", b"k5"])
        read_2 = sum(_segment_bytes(log)[:-1])
        duration_bound = clean()
        written_2 = sum(_segment_bytes(log)[:-1])
        assert sorted(r.key for s in log.segments for r in _records(s)) == [b"k0", b"k1", b"k2", b"k3", b"k4", b"k5"]
        # Round 3 fails: a batch claiming more records than its bytes hold.
        broken = manager.get_or_create_log("broken", 0)
        write(broken, [b"a", b"b", b"a"])
        with open(broken.segments.first_segment().log.path, "r+b") as f:
            f.seek(57)
            f.write((5).to_bytes(4, "big"))
        broken_dirty_bytes = sum(_segment_bytes(broken)[:-1])
        clean()
        clock.advance(42_500)

        samples = parse(metrics.render().decode())
        assert value(samples, "triolog_cleaner_runs_total") == 2
        assert value(samples, "triolog_cleaner_errors_total") == 1
        assert value(samples, "triolog_cleaner_records_kept_total") == 3 + 6
        assert value(samples, "triolog_cleaner_records_removed_total") == 9 + 2
        assert value(samples, "triolog_cleaner_bytes_read_total") == read_1 + read_2
        assert value(samples, "triolog_cleaner_bytes_written_total") == written_1 + written_2
        assert read_1 + read_2 > written_1 + written_2 > 0
        # Gauges of the last completed run (round 2) and of the cleaner now.
        assert value(samples, "triolog_cleaner_recopy_ratio") == pytest.approx(written_2 / read_2)
        assert value(samples, "triolog_cleaner_buffer_utilization_ratio") == pytest.approx(4 / 100)
        assert 0 < value(samples, "triolog_cleaner_last_run_duration_seconds") <= duration_bound
        assert value(samples, "triolog_cleaner_seconds_since_last_run") == 42.5
        assert value(samples, "triolog_cleaner_max_dirty_ratio") == 1.0  # the broken log, all dirty
        assert value(samples, "triolog_cleaner_uncleanable_partitions") == 1
        assert value(samples, "triolog_cleaner_uncleanable_bytes") == broken_dirty_bytes
        assert value(samples, "triolog_cleaner_dead_threads") == 0
        assert value(samples, "triolog_cleaner_max_compaction_delay_seconds") == 0
    finally:
        thread.close_executor()
        manager.shutdown()


def _records(segment) -> list[Record]:
    return [r for b in iter_batches(segment.log.read(0, segment.size)) for r in b.records]


# -- the server metrics ------------------------------------------------------------------------


def test_metrics_of_two_brokers_in_one_process_do_not_collide(tmp_path, clock):
    first = BrokerMetrics(_manager(tmp_path / "a", clock))
    second = BrokerMetrics(_manager(tmp_path / "b", clock))
    first.server.request_done("produce", ErrorCode.NONE, 0.002)
    first.server.connection_opened()
    a, b = parse(first.render().decode()), parse(second.render().decode())
    assert value(a, "triolog_server_requests_total", api="produce", error="NONE") == 1
    assert value(b, "triolog_server_requests_total", api="produce", error="NONE") == 0
    assert value(a, "triolog_server_connections") == 1
    assert value(b, "triolog_server_connections") == 0
    assert not any(name.startswith("triolog_") for name in family_names(generate_latest(REGISTRY).decode()))


def test_metrics_server_labels_come_from_bounded_sets(tmp_path, clock):
    metrics = BrokerMetrics(_manager(tmp_path, clock), process_collectors=False)
    server = metrics.server
    server.request_done(None, ErrorCode.INVALID_REQUEST, 0.001)
    server.request_done("no-such-api", ErrorCode.INVALID_REQUEST)
    server.request_done("fetch", 12345, 0.3)  # not an ErrorCode: a bug, but no new label value
    server.bytes_in(None, 7)
    server.bytes_out("fetch", 100)
    server.connection_refused("max.connections.per.ip")
    server.request_done("nope", ErrorCode.NONE, None, {ErrorCode.MESSAGE_TOO_LARGE: 1, 54321: 2})
    server.wrong_protocol("kafka")
    samples = parse(metrics.render().decode())
    assert value(samples, "triolog_server_requests_total", api="unknown", error="INVALID_REQUEST") == 2
    assert value(samples, "triolog_server_requests_total", api="fetch", error="UNRECOGNIZED") == 1
    assert value(samples, "triolog_server_request_latency_seconds_count", api="unknown") == 1
    assert value(samples, "triolog_server_request_latency_seconds_bucket", api="fetch", le="0.5") == 1
    assert value(samples, "triolog_server_request_latency_seconds_bucket", api="fetch", le="0.25") == 0
    assert value(samples, "triolog_server_bytes_in_total", api="unknown") == 7
    assert value(samples, "triolog_server_bytes_out_total", api="fetch") == 100
    assert value(samples, "triolog_server_connections_refused_total", limit="max.connections.per.ip") == 1
    assert value(samples, "triolog_server_requests_total", api="unknown", error="MESSAGE_TOO_LARGE") == 1
    assert value(samples, "triolog_server_partition_errors_total", api="unknown", error="UNRECOGNIZED") == 2
    assert value(samples, "triolog_server_wrong_protocol_connections_total", protocol="kafka") == 1
    apis = {dict(labels)["api"] for name, labels in samples if name == "triolog_server_requests_total"}
    assert apis == set(API_LABELS)  # every API's series exists from the start, nothing else
    assert {dict(labels)["protocol"] for name, labels in samples
            if name == "triolog_server_wrong_protocol_connections_total"} == set(WRONG_PROTOCOLS)
    for name, labels in samples:
        if name.startswith("triolog_"):
            # No topic label on server series: their number does not grow with the topics.
            if name.startswith("triolog_server_"):
                allowed = {"api", "error", "le", "limit", "protocol"}
            elif name.startswith("triolog_group_"):  # per group, as Kafka's consumer-group lag
                allowed = {"group", "topic", "partition", "le"}
            else:
                allowed = {"topic", "partition", "reason", "log_dir"}
            assert set(dict(labels)) <= allowed, name


def test_metrics_count_a_request_failed_by_any_partition_and_each_failed_entry(tmp_path, clock):
    metrics = BrokerMetrics(_manager(tmp_path, clock), process_collectors=False)
    server = metrics.server
    server.request_done("produce", ErrorCode.NONE, 0.001)
    # Top-level NONE, two partitions failed differently: the request counts under the first.
    server.request_done("produce", ErrorCode.NONE, 0.001,
                        {ErrorCode.KAFKA_STORAGE_ERROR: 1, ErrorCode.MESSAGE_TOO_LARGE: 2})
    server.request_done("produce", ErrorCode.NONE, 0.001, {ErrorCode.MESSAGE_TOO_LARGE: 1})
    # A top-level error wins over its entries' errors.
    server.request_done("fetch", ErrorCode.INVALID_REQUEST, 0.001, {ErrorCode.OFFSET_OUT_OF_RANGE: 3})
    samples = parse(metrics.render().decode())
    assert value(samples, "triolog_server_requests_total", api="produce", error="NONE") == 1
    assert value(samples, "triolog_server_requests_total", api="produce", error="KAFKA_STORAGE_ERROR") == 1
    assert value(samples, "triolog_server_requests_total", api="produce", error="MESSAGE_TOO_LARGE") == 1
    assert value(samples, "triolog_server_requests_total", api="fetch", error="INVALID_REQUEST") == 1
    assert value(samples, "triolog_server_request_latency_seconds_count", api="produce") == 3
    assert value(samples, "triolog_server_partition_errors_total", api="produce", error="KAFKA_STORAGE_ERROR") == 1
    assert value(samples, "triolog_server_partition_errors_total", api="produce", error="MESSAGE_TOO_LARGE") == 3
    assert value(samples, "triolog_server_partition_errors_total", api="fetch", error="OFFSET_OUT_OF_RANGE") == 3
    assert ("triolog_server_requests_total", frozenset({("api", "fetch"), ("error", "OFFSET_OUT_OF_RANGE")})) \
        not in samples


def test_metrics_report_free_and_total_bytes_of_each_log_dir(tmp_path, clock):
    manager = LogManager([tmp_path / "a", tmp_path / "b"], LogConfig(), clock=clock)
    manager.startup()
    metrics = BrokerMetrics(manager, process_collectors=False)
    try:
        samples = parse(metrics.render().decode())
        for log_dir in manager.log_dirs:
            fs = os.statvfs(log_dir.path)
            total = value(samples, "triolog_log_dir_total_bytes", log_dir=str(log_dir.path))
            free = value(samples, "triolog_log_dir_free_bytes", log_dir=str(log_dir.path))
            assert total == fs.f_blocks * fs.f_frsize > 0
            # Read at scrape time: other processes share the disk, so equal within 256 MiB.
            assert abs(free - fs.f_bavail * fs.f_frsize) < 256 << 20
            assert 0 < free <= total
        # A log dir whose file system cannot be read loses its space series, not the scrape.
        shutil.rmtree(tmp_path / "b")
        samples = parse(metrics.render().decode())
        assert ("triolog_log_dir_free_bytes", frozenset({("log_dir", str(manager.log_dirs[1].path))})) not in samples
        assert value(samples, "triolog_log_dir_total_bytes", log_dir=str(manager.log_dirs[0].path)) > 0
    finally:
        manager.shutdown()


# -- the endpoint, in process ------------------------------------------------------------------


def _config(tmp_path: Path, *extra: tuple[str, str]) -> BrokerConfig:
    props = {"log.dirs": str(tmp_path), "listeners": "PLAINTEXT://127.0.0.1:0",
             "metrics.listener": "http://127.0.0.1:0", **dict(extra)}
    return BrokerConfig.from_properties(props)[0]


def _get(port: int, path: str = "/metrics") -> tuple[str, str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as response:
        return response.headers["Content-Type"], response.read().decode()


def _refuses(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
        return False
    except ConnectionRefusedError:
        return True


async def test_metrics_endpoint_per_server_in_one_process_and_stopped_on_shutdown(tmp_path):
    servers = [BrokerServer(_config(tmp_path / name)) for name in ("one", "two")]
    async with trio.open_nursery() as nursery:
        addresses = [await nursery.start(server.run) for server in servers]
        assert all(a.metrics_port for a in addresses)
        assert addresses[0].metrics_port != addresses[1].metrics_port

        stream = await trio.open_tcp_stream("127.0.0.1", addresses[0].port)
        payload = m.encode_request(m.ApiVersionsRequest(id=1))
        await stream.send_all(struct.pack(">I", len(payload)) + payload)
        (length,) = struct.unpack(">I", await stream.receive_some(4))
        received = 0
        while received < length:
            received += len(await stream.receive_some(length - received))

        async def scrape_until_counted(port: int) -> Samples:
            with trio.fail_after(5):
                while True:
                    content_type, text = await trio.to_thread.run_sync(_get, port)
                    samples = parse(text)
                    if value(samples, "triolog_server_requests_total", api="api_versions", error="NONE"):
                        return samples
                    await trio.sleep(0.01)

        content_type, _ = await trio.to_thread.run_sync(_get, addresses[0].metrics_port)
        assert content_type.startswith("text/plain")
        one = await scrape_until_counted(addresses[0].metrics_port)
        assert value(one, "triolog_server_bytes_in_total", api="api_versions") == len(payload) + 4
        assert value(one, "triolog_server_bytes_out_total", api="api_versions") == length + 4
        assert value(one, "triolog_server_connections") == 1
        _, text = await trio.to_thread.run_sync(_get, addresses[1].metrics_port)
        two = parse(text)
        assert value(two, "triolog_server_requests_total", api="api_versions", error="NONE") == 0
        assert value(two, "triolog_server_connections") == 0
        assert "process_cpu_seconds" in family_names(text) or "python_info" in family_names(text)

        await stream.aclose()
        for server in servers:
            server.shutdown()
    for address in addresses:
        assert await trio.to_thread.run_sync(_refuses, address.metrics_port)


async def test_metrics_endpoint_off_when_metrics_listener_is_empty(tmp_path):
    server = BrokerServer(_config(tmp_path, ("metrics.listener", "")))
    async with trio.open_nursery() as nursery:
        address = await nursery.start(server.run)
        assert address.metrics_port is None
        assert server.metrics.endpoint is None
        server.shutdown()


async def test_metrics_endpoint_port_in_use_fails_startup_cleanly(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        server = BrokerServer(_config(tmp_path, ("metrics.listener", f"http://127.0.0.1:{port}")))
        with pytest.raises(OSError):
            await server.run()
    assert (tmp_path / ".kafka_cleanshutdown").exists()  # storage still shut down in order


# -- the real broker process -------------------------------------------------------------------


class _MeteredClient(WireClient):
    """Counts the bytes of every frame it sends and receives, to check bytes_in/out exactly."""

    def __init__(self, port: int):
        super().__init__("127.0.0.1", port)
        self.sent: dict[str, int] = {}
        self.received: dict[str, int] = {}

    def exchange(self, api: str, payload: bytes) -> dict:
        self.send_frame(payload)
        self.sent[api] = self.sent.get(api, 0) + len(payload) + 4
        frame = self.recv_frame()
        self.received[api] = self.received.get(api, 0) + len(frame) + 4
        return msgpack.unpackb(frame, raw=False, strict_map_key=False)

    def request(self, request: m.Request) -> dict:
        return self.exchange(request.api, m.encode_request(request))

    def produce(self, topic: str, partition: int, value: bytes) -> dict:
        now = int(time.time() * 1000)
        response = self.request(m.ProduceRequest(id=self.next_id(), acks=1, timeout_ms=5000, topics=(
            m.ProduceTopic(name=topic, partitions=(
                m.ProducePartition(partition=partition, records=build_batch([(b"k", value, now, ())])),)),)))
        return response["topics"][0]["partitions"][0]


def _scrape_until(broker: InProcessBroker, check, timeout_s: float = 5.0) -> Samples:
    """Requests are counted once their response is written: poll until ``check`` stops failing."""
    deadline = time.monotonic() + timeout_s
    while True:
        samples = parse(broker.scrape())
        try:
            check(samples)
            return samples
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)


@pytest.fixture
def metered_broker(tmp_path):
    broker = InProcessBroker(tmp_path / "data", ("log.segment.bytes=1024",), metrics=True)
    try:
        yield broker.start()
    finally:
        broker.stop()


def test_metrics_endpoint_of_the_real_broker_reports_storage_and_requests(metered_broker, tmp_path):
    broker = metered_broker
    assert broker.metrics_port
    baseline = parse(broker.scrape())
    assert value(baseline, "triolog_server_requests_total", api="produce", error="NONE") == 0
    # No partitions yet: only the per-log-dir series.
    assert {name for name, _ in baseline if name.startswith("triolog_log_")} == {
        "triolog_log_dir_offline", "triolog_log_dir_free_bytes", "triolog_log_dir_total_bytes"}
    fs = os.statvfs(tmp_path / "data")
    assert value(baseline, "triolog_log_dir_total_bytes", log_dir=str((tmp_path / "data").resolve())) == \
        fs.f_blocks * fs.f_frsize

    client = _MeteredClient(broker.port)
    created = client.request(m.CreateTopicsRequest(id=client.next_id(), topics=(
        m.NewTopic(name="metered", num_partitions=2, replication_factor=1),)))
    assert created["topics"][0]["error_code"] == 0
    produced = 12
    for i in range(produced):
        assert client.produce("metered", 0, b"v%03d" % i + b"x" * 150)["error_code"] == 0
    fetched = client.request(m.FetchRequest(id=client.next_id(), max_wait_ms=0, min_bytes=1, max_bytes=1 << 20,
                                            topics=(m.FetchTopic(name="metered", partitions=(
                                                m.FetchPartition(partition=0, fetch_offset=0,
                                                                 partition_max_bytes=1 << 20),)),)))
    assert fetched["topics"][0]["partitions"][0]["error_code"] == 0
    # Request-level errors: an unsupported version (api known) and a frame that is no request.
    refused = client.exchange("metadata", msgpack.packb({"id": 7, "api": "metadata", "v": 99}))
    assert refused["error_code"] == ErrorCode.UNSUPPORTED_VERSION
    garbage = client.exchange("unknown", b"\xc1")
    assert garbage["error_code"] == ErrorCode.INVALID_REQUEST
    second = WireClient("127.0.0.1", broker.port)  # a second open connection

    def counted(samples: Samples) -> None:
        assert value(samples, "triolog_server_requests_total", api="produce", error="NONE") == produced
        assert value(samples, "triolog_server_requests_total", api="create_topics", error="NONE") == 1
        assert value(samples, "triolog_server_requests_total", api="fetch", error="NONE") == 1
        assert value(samples, "triolog_server_requests_total", api="metadata", error="UNSUPPORTED_VERSION") == 1
        assert value(samples, "triolog_server_requests_total", api="unknown", error="INVALID_REQUEST") == 1
        assert value(samples, "triolog_server_connections") == 2

    samples = _scrape_until(broker, counted)

    # Storage, per partition: read from the logs, equal to what the client saw.
    p0, p1 = {"topic": "metered", "partition": 0}, {"topic": "metered", "partition": 1}
    assert value(samples, "triolog_log_end_offset", **p0) == produced
    assert value(samples, "triolog_log_high_watermark", **p0) == produced
    assert value(samples, "triolog_log_start_offset", **p0) == 0
    rolls = value(samples, "triolog_log_rolls_total", reason="size", **p0)
    assert rolls >= 2  # 12 batches of ~230 bytes in 1 KiB segments
    assert value(samples, "triolog_log_segments", **p0) == rolls + 1
    for reason in ("time", "index_full", "offset_overflow"):
        assert value(samples, "triolog_log_rolls_total", reason=reason, **p0) == 0
    on_disk = sum(p.stat().st_size for p in (tmp_path / "data" / "metered-0").glob("*.log"))
    assert value(samples, "triolog_log_size_bytes", **p0) == on_disk > 0
    assert value(samples, "triolog_log_end_offset", **p1) == 0
    assert value(samples, "triolog_log_segments", **p1) == 1
    assert value(samples, "triolog_log_size_bytes", **p1) == 0

    # Per API: latency observed once per request, bytes exactly as framed on the wire.
    assert value(samples, "triolog_server_request_latency_seconds_count", api="produce") == produced
    assert value(samples, "triolog_server_request_latency_seconds_bucket", api="produce", le="+Inf") == produced
    assert 0 < value(samples, "triolog_server_request_latency_seconds_sum", api="produce") < produced * 5
    assert value(samples, "triolog_server_request_latency_seconds_count", api="metadata") == 1
    buckets = [value(samples, "triolog_server_request_latency_seconds_bucket", api="produce", le=str(le))
               for le in LATENCY_BUCKETS_S]
    assert buckets == sorted(buckets)
    for api in ("create_topics", "produce", "fetch", "metadata", "unknown"):
        assert value(samples, "triolog_server_bytes_in_total", api=api) == client.sent[api], api
        assert value(samples, "triolog_server_bytes_out_total", api=api) == client.received[api], api
    assert value(samples, "triolog_server_connections_opened_total") == 2  # the two clients

    # Values that change: more appends, delete_records, a closed connection.
    for i in range(3):
        client.produce("metered", 1, b"late%d" % i)
    deleted = client.request(m.DeleteRecordsRequest(id=client.next_id(), topics=(
        m.DeleteRecordsTopic(name="metered", partitions=(m.DeleteRecordsPartition(partition=0, offset=5),)),)))
    assert deleted["topics"][0]["partitions"][0]["error_code"] == 0
    second.close()

    def changed(samples: Samples) -> None:
        assert value(samples, "triolog_server_requests_total", api="produce", error="NONE") == produced + 3
        assert value(samples, "triolog_server_requests_total", api="delete_records", error="NONE") == 1
        assert value(samples, "triolog_server_connections") == 1

    later = _scrape_until(broker, changed)
    assert value(later, "triolog_log_end_offset", **p1) == 3
    assert value(later, "triolog_log_start_offset", **p0) == 5
    assert value(later, "triolog_log_end_offset", **p0) == produced
    assert value(later, "triolog_log_size_bytes", **p1) > 0

    # The endpoint goes away with the broker, which shuts down cleanly (an idle client still connected).
    metrics_port = broker.metrics_port
    assert broker.stop() == 0
    assert _refuses(metrics_port)
    client.close()


def test_metrics_of_the_real_broker_count_per_partition_errors(metered_broker):
    """The failures clients meet most are per-partition codes inside a top-level NONE: each makes
    its request count as failed (the error-rate alert's numerator) and is counted per entry."""
    broker = metered_broker
    client = _MeteredClient(broker.port)
    created = client.request(m.CreateTopicsRequest(id=client.next_id(), topics=(
        m.NewTopic(name="errs", num_partitions=2, replication_factor=1, configs={"max.message.bytes": "300"}),)))
    assert created["topics"][0]["error_code"] == 0
    now = int(time.time() * 1000)
    small, large = build_batch([(b"k", b"v", now, ())]), build_batch([(b"k", b"x" * 1000, now, ())])
    corrupt = bytearray(small)
    corrupt[-1] ^= 0xFF  # the CRC no longer matches

    def produce(*partitions: tuple[int, bytes]) -> list[int]:
        response = client.request(m.ProduceRequest(id=client.next_id(), acks=1, timeout_ms=5000, topics=(
            m.ProduceTopic(name="errs", partitions=tuple(
                m.ProducePartition(partition=p, records=bytes(r)) for p, r in partitions)),)))
        assert response["error_code"] == 0
        return [p["error_code"] for p in response["topics"][0]["partitions"]]

    assert produce((0, small)) == [0]
    assert produce((0, small), (1, large)) == [0, ErrorCode.MESSAGE_TOO_LARGE]
    assert produce((7, small)) == [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
    assert produce((0, corrupt), (1, large)) == [ErrorCode.CORRUPT_MESSAGE, ErrorCode.MESSAGE_TOO_LARGE]
    fetched = client.request(m.FetchRequest(id=client.next_id(), max_wait_ms=0, min_bytes=1, max_bytes=1 << 20,
                                            topics=(m.FetchTopic(name="errs", partitions=(
                                                m.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20),
                                                m.FetchPartition(partition=1, fetch_offset=99, partition_max_bytes=1 << 20),
                                            )),)))
    assert [p["error_code"] for p in fetched["topics"][0]["partitions"]] == [0, ErrorCode.OFFSET_OUT_OF_RANGE]
    listed = client.request(m.ListOffsetsRequest(id=client.next_id(), topics=(m.ListOffsetsTopic(
        name="errs", partitions=(m.ListOffsetsPartition(partition=9, timestamp=-1),)),)))
    assert listed["topics"][0]["partitions"][0]["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    deleted = client.request(m.DeleteRecordsRequest(id=client.next_id(), topics=(
        m.DeleteRecordsTopic(name="errs", partitions=(m.DeleteRecordsPartition(partition=0, offset=50),)),)))
    assert deleted["topics"][0]["partitions"][0]["error_code"] == ErrorCode.OFFSET_OUT_OF_RANGE
    again = client.request(m.CreateTopicsRequest(id=client.next_id(), topics=(
        m.NewTopic(name="errs", num_partitions=1, replication_factor=1),)))
    assert again["topics"][0]["error_code"] == ErrorCode.TOPIC_ALREADY_EXISTS
    gone = client.request(m.DeleteTopicsRequest(id=client.next_id(), topics=("no-such-topic",)))
    assert gone["topics"][0]["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    # describe_log_dirs nests its failures differently: errors[] (a whole topic) and errors[].partitions[].
    described = client.request(m.DescribeLogDirsRequest(id=client.next_id(), topics=(
        m.DescribeLogDirsTopic(name="no-such-topic"),
        m.DescribeLogDirsTopic(name="errs", partitions=(0, 8, 9)))))
    assert described["error_code"] == 0 and described["log_dirs"][0]["error_code"] == 0
    assert {(e["name"], e["error_code"]) for e in described["errors"]} == {
        ("no-such-topic", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), ("errs", 0)}
    assert [p["error_code"] for e in described["errors"] if e["name"] == "errs" for p in e["partitions"]] == \
        [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION] * 2

    def counted(samples: Samples) -> None:
        requests = {(dict(k)["api"], dict(k)["error"]): v for (name, k), v in samples.items()
                    if name == "triolog_server_requests_total" and v}
        assert requests == {
            ("create_topics", "NONE"): 1, ("create_topics", "TOPIC_ALREADY_EXISTS"): 1,
            ("produce", "NONE"): 1, ("produce", "MESSAGE_TOO_LARGE"): 1,
            ("produce", "UNKNOWN_TOPIC_OR_PARTITION"): 1, ("produce", "CORRUPT_MESSAGE"): 1,
            ("fetch", "OFFSET_OUT_OF_RANGE"): 1, ("list_offsets", "UNKNOWN_TOPIC_OR_PARTITION"): 1,
            ("delete_records", "OFFSET_OUT_OF_RANGE"): 1, ("delete_topics", "UNKNOWN_TOPIC_OR_PARTITION"): 1,
            ("describe_log_dirs", "UNKNOWN_TOPIC_OR_PARTITION"): 1,
        }
        entries = {(dict(k)["api"], dict(k)["error"]): v for (name, k), v in samples.items()
                   if name == "triolog_server_partition_errors_total"}
        assert entries == {
            ("create_topics", "TOPIC_ALREADY_EXISTS"): 1, ("produce", "MESSAGE_TOO_LARGE"): 2,
            ("produce", "UNKNOWN_TOPIC_OR_PARTITION"): 1, ("produce", "CORRUPT_MESSAGE"): 1,
            ("fetch", "OFFSET_OUT_OF_RANGE"): 1, ("list_offsets", "UNKNOWN_TOPIC_OR_PARTITION"): 1,
            ("delete_records", "OFFSET_OUT_OF_RANGE"): 1, ("delete_topics", "UNKNOWN_TOPIC_OR_PARTITION"): 1,
            ("describe_log_dirs", "UNKNOWN_TOPIC_OR_PARTITION"): 3,  # the topic, and 2 partitions of errs
        }

    _scrape_until(broker, counted)
    client.close()
