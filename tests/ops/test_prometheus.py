"""A real Prometheus server (the Debian package) scraping a real broker with the shipped
deploy/prometheus/prometheus.yml and alerts.yml; every assertion goes through Prometheus's HTTP
API, so the series, the dashboard's queries and the alert rules are checked as an operator's
Prometheus sees them.

The shipped config is changed in four places only, each asserted to match once: the target
address (the test broker's free metrics port), the scrape and evaluation intervals (1 s instead
of 15 s, so changes show within seconds) and the path of the rule file.

``test_prometheus_sees_retention_deletions_and_compaction`` needs issue 4 (retention deletion
metrics and the log cleaner).
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

from triolog.client import AdminClient, NewTopic, Producer, TopicPartition
from triolog.protocol import messages as m
from triolog.protocol.errors import ErrorCode
from tests.e2e.broker_process import BrokerProcess
from tests.ops.conftest import free_port
from tests.waiting import wait_for
from tests.ops.dockerfile import ROOT

DEPLOY = ROOT / "deploy"
DASHBOARD = DEPLOY / "grafana" / "dashboards" / "triolog.json"
SCRAPE_S = 1


@dataclass
class Stack:
    broker: BrokerProcess
    prometheus: subprocess.Popen
    url: str
    log: Path

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.broker.port}"

    def api(self, path: str, **params) -> dict:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        try:
            with urllib.request.urlopen(f"{self.url}/api/v1/{path}{query}", timeout=10) as response:
                body = json.load(response)
        except urllib.error.HTTPError as exc:  # 400/422 carry the error as JSON
            body = json.load(exc)
        return body

    def query(self, expr: str) -> list[dict]:
        body = self.api("query", query=expr)
        assert body["status"] == "success", f"{expr}: {body}"
        return body["data"]["result"]

    def value(self, expr: str) -> float | None:
        """The single value of an instant query, or None when it returns nothing."""
        result = self.query(expr)
        assert len(result) <= 1, f"{expr}: {len(result)} series"
        return float(result[0]["value"][1]) if result else None

    def eventually(self, expr: str, check, timeout_s: float = 30, what: str = ""):
        """Poll until ``check(value)`` holds for the value of ``expr``; returns the value."""
        holder = {}

        def attempt():
            holder["value"] = self.value(expr)
            return holder["value"] is not None and check(holder["value"])

        wait_for(attempt, timeout_s, f"{what or expr} (last value {holder.get('value')!r})")
        return holder["value"]


def _prometheus_config(tmp: Path, metrics_port: int) -> Path:
    text = (DEPLOY / "prometheus" / "prometheus.yml").read_text()
    replacements = {
        "scrape_interval: 15s": f"scrape_interval: {SCRAPE_S}s",
        "evaluation_interval: 15s": f"evaluation_interval: {SCRAPE_S}s",
        '"broker:9404"': f'"127.0.0.1:{metrics_port}"',
        "  - alerts.yml": f"  - {DEPLOY / 'prometheus' / 'alerts.yml'}",
    }
    for old, new in replacements.items():
        assert text.count(old) == 1, f"prometheus.yml no longer has {old!r} exactly once"
        text = text.replace(old, new)
    path = tmp / "prometheus.yml"
    path.write_text(text)
    return path


@contextlib.contextmanager
def _stack(tmp: Path, prometheus_binary: str):
    """A broker and a Prometheus scraping it with the shipped config, both stopped on exit."""
    broker = BrokerProcess(tmp / "data", (
        "log.retention.check.interval.ms=500", "log.initial.task.delay.ms=0", "log.cleaner.backoff.ms=500",
    ), metrics=True).start()
    port = free_port()
    log = tmp / "prometheus.log"
    with open(log, "wb") as out:
        prometheus = subprocess.Popen([
            prometheus_binary, f"--config.file={_prometheus_config(tmp, broker.metrics_port)}",
            f"--storage.tsdb.path={tmp / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}",
        ], stdout=out, stderr=subprocess.STDOUT)
    stack = Stack(broker, prometheus, f"http://127.0.0.1:{port}", log)

    def ready():
        assert prometheus.poll() is None, log.read_text()
        try:
            with urllib.request.urlopen(f"{stack.url}/-/ready", timeout=2) as response:
                return response.status == 200
        except OSError:
            return False

    try:
        wait_for(ready, 60, "prometheus /-/ready")
        yield stack
    finally:
        prometheus.terminate()
        try:
            prometheus.wait(30)
        except subprocess.TimeoutExpired:
            prometheus.kill()
            prometheus.wait()
        broker.kill()


@pytest.fixture(scope="module")
def stack(tmp_path_factory, system_tools):
    """Shared by the tests that leave the broker running; each uses its own topics."""
    with _stack(tmp_path_factory.mktemp("prometheus"), system_tools["prometheus"]) as shared:
        yield shared


@pytest.fixture
def own_stack(tmp_path, system_tools):
    """For a test that stops its broker: the shared one must stay up for the others."""
    with _stack(tmp_path, system_tools["prometheus"]) as stack:
        yield stack


def _produce(stack: Stack, topic: str, count: int, size: int = 200, keys: int | None = None) -> None:
    """One batch per record (flush after each), so that small segment.bytes rolls often."""
    with Producer(stack.bootstrap, linger_ms=0) as producer:
        for i in range(count):
            key = str(i % keys).encode() if keys else None
            producer.send(topic, f"{i:06d}".encode().ljust(size, b"."), key=key)
            producer.flush()


def _dashboard_queries() -> list[tuple[str, str]]:
    """(panel title, PromQL) of every dashboard target, Grafana's variables filled in."""
    dashboard = json.loads(DASHBOARD.read_text())
    out = []
    for panel in dashboard["panels"]:
        for target in panel.get("targets", ()):
            expr = target["expr"].replace("$__rate_interval", "1m").replace("$topic", ".*").replace("$instance", ".*")
            assert "$" not in expr, expr
            out.append((panel["title"], expr))
    return out


#: Alerts on the file system the test's data dir is on: the host's disk, shared with everything
#: else on the machine, so they may be pending here; promtool's unit tests check them.
HOST_DISK_ALERTS = ("TriologLogDirSpaceLow", "TriologLogDirFillingUp")


def _broker_alerts(stack: Stack) -> list[dict]:
    return [a for a in stack.api("alerts")["data"]["alerts"] if a["labels"]["alertname"] not in HOST_DISK_ALERTS]


def _panel_has_data(stack: Stack, title: str) -> bool:
    return any(stack.query(expr) for panel, expr in _dashboard_queries() if panel == title)


def test_prometheus_scrapes_the_broker_and_sees_produce_and_rolls(stack):
    targets = wait_for(lambda: [t for t in stack.api("targets")["data"]["activeTargets"] if t["health"] == "up"],
                       30, "the broker target up")
    assert len(targets) == 1 and targets[0]["labels"]["job"] == "triolog"
    assert targets[0]["labels"]["cluster"] == "triolog"  # the shipped static label
    assert stack.eventually('up{job="triolog"}', lambda v: v == 1) == 1

    # Every shipped rule is loaded, and none has failed to evaluate. The 1 s groups have been
    # evaluated by now; the 5-minute storage group may not have been, so every rule's expression
    # is also run through the query API here.
    def rules_loaded():
        groups = stack.api("rules")["data"]["groups"]
        fast = [r for g in groups if g["interval"] == SCRAPE_S for r in g["rules"]]
        done = fast and all(r["health"] == "ok" for r in fast)
        return [r for g in groups for r in g["rules"]] if done else None

    rules = wait_for(rules_loaded, 30, "the 1 s rule groups evaluated")
    assert all(r["health"] in ("ok", "unknown") for r in rules), [(r["name"], r.get("lastError")) for r in rules]
    assert sorted(r["name"] for r in rules) == sorted(
        line.split(":", 1)[1].strip() for line in (DEPLOY / "prometheus" / "alerts.yml").read_text().splitlines()
        if line.strip().startswith("- alert:"))
    for rule in rules:
        stack.query(rule["query"])

    topic = "prom-rolls"
    with AdminClient(stack.bootstrap) as admin:
        admin.create_topics([NewTopic(topic, 1, configs={"segment.bytes": "1024"})])
    selector = f'topic="{topic}",partition="0"'
    assert stack.eventually(f"triolog_log_segments{{{selector}}}", lambda v: v == 1) == 1
    assert stack.value(f"triolog_log_end_offset{{{selector}}}") == 0
    produce_before = stack.eventually('sum(triolog_server_requests_total{api="produce"})', lambda v: True)

    _produce(stack, topic, 30)

    assert stack.eventually(f"triolog_log_end_offset{{{selector}}}", lambda v: v == 30) == 30
    segments = stack.eventually(f"triolog_log_segments{{{selector}}}", lambda v: v > 1)
    rolls = stack.eventually(f'triolog_log_rolls_total{{{selector},reason="size"}}', lambda v: v >= segments - 1)
    size = stack.eventually(f"triolog_log_size_bytes{{{selector}}}", lambda v: v > 30 * 200)
    high_watermark = stack.eventually(f"triolog_log_high_watermark{{{selector}}}", lambda v: v == 30)
    produced = stack.eventually('sum(triolog_server_requests_total{api="produce",error="NONE"})',
                                lambda v: v >= produce_before + 30)
    stack.eventually('sum(triolog_server_request_latency_seconds_count{api="produce"})', lambda v: v >= 30)
    stack.eventually('sum(increase(triolog_server_bytes_in_total{api="produce"}[1m]))', lambda v: v > 30 * 200)
    stack.eventually('sum(rate(triolog_server_requests_total{api="produce"}[1m]))', lambda v: v > 0)
    free = stack.eventually("min(triolog_log_dir_free_bytes / triolog_log_dir_total_bytes)", lambda v: 0 < v < 1)
    # A per-partition error in a successful response: the request counts as failed.
    client = stack.broker.client()
    try:
        listed = client.call(m.ListOffsetsRequest(id=client.next_id(), topics=(m.ListOffsetsTopic(
            name=topic, partitions=(m.ListOffsetsPartition(partition=9, timestamp=-1),)),)))
    finally:
        client.close()
    assert listed["error_code"] == 0
    assert listed["topics"][0]["partitions"][0]["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    stack.eventually('triolog_server_requests_total{api="list_offsets",error="UNKNOWN_TOPIC_OR_PARTITION"}',
                     lambda v: v == 1)
    stack.eventually('triolog_server_partition_errors_total{api="list_offsets",error="UNKNOWN_TOPIC_OR_PARTITION"}',
                     lambda v: v == 1)

    # The dashboard's queries: every one valid PromQL, and the request and log panels have data.
    for title, expr in _dashboard_queries():
        stack.query(expr)
    for title in ("Produce and fetch requests /s", "Produce and fetch latency", "Bytes in / out",
                  "Log size per topic", "Segments per topic", "Records appended /s per topic",
                  "Segment rolls by reason", "Connections", "Log directories offline", "Free space per log dir",
                  "Free bytes per log dir", "Request errors /s"):
        wait_for(lambda: _panel_has_data(stack, title), 30, f"data in panel {title!r}")

    # Nothing the shipped alerts watch is wrong with this broker.
    assert _broker_alerts(stack) == []
    print(f"\nprometheus: target {targets[0]['scrapeUrl']} up; {len(rules)} rules loaded, none failing; topic {topic}: "
          f"end offset 30, high watermark {high_watermark:.0f}, {segments:.0f} segments, {rolls:.0f} size rolls, "
          f"{size:.0f} bytes; produce requests {produce_before:.0f} -> {produced:.0f}; log dir {free:.0%} free; "
          f"{len(_dashboard_queries())} dashboard queries valid; alerts firing: none")


def test_prometheus_sees_retention_deletions_and_compaction(stack):
    """Needs issue 4: retention deletes by log start offset, time and size, and the cleaner compacts."""
    with AdminClient(stack.bootstrap) as admin:
        admin.create_topics([
            NewTopic("prom-delete-records", 1, configs={"segment.bytes": "1024", "file.delete.delay.ms": "0"}),
            NewTopic("prom-retention-ms", 1, configs={"segment.bytes": "1024", "file.delete.delay.ms": "0",
                                                      "retention.ms": "2000"}),
            NewTopic("prom-retention-bytes", 1, configs={"segment.bytes": "1024", "file.delete.delay.ms": "0",
                                                         "retention.bytes": "2048"}),
            NewTopic("prom-compact", 1, configs={"segment.bytes": "1024", "cleanup.policy": "compact",
                                                 "min.cleanable.dirty.ratio": "0.01", "file.delete.delay.ms": "0"}),
        ])
    for topic in ("prom-delete-records", "prom-retention-ms", "prom-retention-bytes"):
        _produce(stack, topic, 30)
    _produce(stack, "prom-compact", 60, keys=5)
    with AdminClient(stack.bootstrap) as admin:
        admin.delete_records({TopicPartition("prom-delete-records", 0): 20})

    def deleted(topic: str, reason: str) -> str:
        return f'triolog_log_segments_deleted_total{{topic="{topic}",partition="0",reason="{reason}"}}'

    stack.eventually('triolog_log_start_offset{topic="prom-delete-records"}', lambda v: v == 20)
    by_start = stack.eventually(deleted("prom-delete-records", "log_start_offset"), lambda v: v > 0, 60)
    by_time = stack.eventually(deleted("prom-retention-ms", "retention_ms"), lambda v: v > 0, 60)
    by_size = stack.eventually(deleted("prom-retention-bytes", "retention_bytes"), lambda v: v > 0, 60)
    stack.eventually('triolog_log_deleted_bytes_total{topic="prom-retention-bytes",reason="retention_bytes"}',
                     lambda v: v > 0)
    stack.eventually('triolog_log_size_bytes{topic="prom-retention-bytes"}', lambda v: v <= 2048 + 1024)

    runs = stack.eventually("sum(triolog_cleaner_runs_total)", lambda v: v > 0, 60)
    removed = stack.eventually("sum(triolog_cleaner_records_removed_total)", lambda v: v > 0, 60)
    stack.eventually("sum(triolog_cleaner_records_kept_total)", lambda v: v > 0)
    stack.eventually("sum(triolog_cleaner_bytes_read_total)", lambda v: v > 0)
    stack.eventually("sum(triolog_cleaner_bytes_written_total)", lambda v: v > 0)
    stack.eventually("max(triolog_cleaner_buffer_utilization_ratio)", lambda v: 0 < v <= 1)
    for name in ("triolog_cleaner_max_dirty_ratio", "triolog_cleaner_recopy_ratio",
                 "triolog_cleaner_last_run_duration_seconds", "triolog_cleaner_seconds_since_last_run",
                 "triolog_cleaner_uncleanable_bytes", "triolog_cleaner_max_compaction_delay_seconds"):
        stack.eventually(f"max({name})", lambda v: v >= 0, what=name)
    for name in ("triolog_cleaner_dead_threads", "triolog_cleaner_uncleanable_partitions", "triolog_cleaner_errors_total"):
        assert stack.eventually(f"sum({name})", lambda v: True, what=name) == 0
    for title in ("Retention deletions (segments)", "Retention deletions (bytes)", "Cleaner throughput",
                  "Records kept / removed by compaction /s", "Max dirty ratio", "Dedupe buffer utilisation",
                  "Recopy ratio", "Dead cleaner threads", "Uncleanable partitions"):
        wait_for(lambda: _panel_has_data(stack, title), 30, f"data in panel {title!r}")
    assert _broker_alerts(stack) == []
    print(f"\nprometheus: segments deleted by log_start_offset {by_start:.0f}, retention_ms {by_time:.0f}, "
          f"retention_bytes {by_size:.0f}; cleaner runs {runs:.0f}, records removed {removed:.0f}")


def test_prometheus_broker_down_alert_when_the_broker_stops(own_stack):
    """Stops its own broker, as `docker stop` would."""
    stack = own_stack
    stack.eventually('up{job="triolog"}', lambda v: v == 1, what="up == 1")  # scraped while it was up
    assert stack.broker.stop() == 0
    stack.eventually('up{job="triolog"}', lambda v: v == 0, what="up == 0")

    def broker_down():
        alerts = [a for a in stack.api("alerts")["data"]["alerts"] if a["labels"]["alertname"] == "TriologBrokerDown"]
        return alerts if alerts and alerts[0]["state"] in ("pending", "firing") else None

    alert = wait_for(broker_down, 30, "TriologBrokerDown pending")[0]
    assert alert["labels"]["severity"] == "critical" and alert["labels"]["job"] == "triolog"
    print(f"\nprometheus: broker stopped -> up 0, TriologBrokerDown {alert['state']} (fires after its 1m 'for')")
