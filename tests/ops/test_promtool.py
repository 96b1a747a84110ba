"""promtool on what deploy/ ships and on what the broker serves: the config and rules load, the
alerts fire on the series they are meant for (tests/ops/alerts*_test.yml), and the broker's
/metrics is valid exposition text by Prometheus's own linter."""

from __future__ import annotations

import subprocess

from triolog.client import AdminClient, NewTopic, Producer
from tests.e2e.broker_process import BrokerProcess
from tests.ops.dockerfile import ROOT

PROMETHEUS_DIR = ROOT / "deploy" / "prometheus"


def _promtool(system_tools, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([system_tools["promtool"], *args], input=stdin, capture_output=True, text=True,
                          cwd=ROOT, timeout=120)


def test_promtool_check_config_accepts_the_shipped_prometheus_yml(system_tools):
    result = _promtool(system_tools, "check", "config", str(PROMETHEUS_DIR / "prometheus.yml"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 rule files found" in result.stdout


def test_promtool_check_rules_accepts_the_shipped_alerts(system_tools):
    result = _promtool(system_tools, "check", "rules", str(PROMETHEUS_DIR / "alerts.yml"))
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_unit_tests_of_the_alerts_pass(system_tools):
    tests = sorted(str(path) for path in (ROOT / "tests" / "ops").glob("alerts*_test.yml"))
    assert len(tests) == 2
    result = _promtool(system_tools, "test", "rules", *tests)
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_check_metrics_accepts_the_live_broker_output(system_tools, tmp_path):
    broker = BrokerProcess(tmp_path / "data", ("log.cleaner.enable=true",), metrics=True).start()
    try:
        bootstrap = f"127.0.0.1:{broker.port}"
        with AdminClient(bootstrap) as admin:
            admin.create_topics([NewTopic("lint", 2, configs={"segment.bytes": "1024"})])
        with Producer(bootstrap) as producer:
            for i in range(20):
                producer.send("lint", b"v" * 200, key=str(i).encode())
                producer.flush()
        text = broker.scrape()
    finally:
        broker.stop()
    assert 'triolog_log_segments{partition="0",topic="lint"}' in text
    result = _promtool(system_tools, "check", "metrics", stdin=text)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == "" and result.stderr.strip() == "", result.stdout + result.stderr
