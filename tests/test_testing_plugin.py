"""triolog.testing, the pytest plugin users test their programs with: the example of
docs/testing.md run as a user runs it, and what the in-process broker shares with its process."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import structlog

from triolog.client import AdminClient, NewTopic
from triolog.testing import InProcessBroker, run_cli

from tests.waiting import wait_for

ROOT = Path(__file__).resolve().parent.parent


def test_the_documented_example_passes_in_a_suite_of_its_own(tmp_path):
    """The plugin comes with the install (the pytest11 entry point): a suite elsewhere, with no
    conftest of ours, gets the fixtures."""
    text = (ROOT / "docs" / "testing.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) == 1, "docs/testing.md has one runnable example"
    (tmp_path / "test_example.py").write_text(blocks[0])
    environment = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTEST_ADDOPTS")}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_example.py"],
                          cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 passed" in done.stdout


def test_session_broker_serves_both_listeners(triolog_session_broker):
    from triolog.testing import free_topic_name

    topic = free_topic_name()
    with AdminClient(triolog_session_broker.bootstrap) as admin:
        admin.create_topics([NewTopic(topic, 1)])
    assert triolog_session_broker.kafka_port > 0
    import socket

    with socket.create_connection(("127.0.0.1", triolog_session_broker.kafka_port), timeout=10):
        pass


def test_each_broker_has_its_own_events_and_metrics_and_logging_is_put_back(tmp_path):
    before = structlog.get_config() if structlog.is_configured() else None
    first = InProcessBroker(tmp_path / "one").start()
    try:
        second = InProcessBroker(tmp_path / "two").start()
        try:
            with AdminClient(first.bootstrap) as admin:
                admin.create_topics([NewTopic("only-on-first", 1)])
            assert first.port != second.port
            started = [e for e in second.events() if e["event"] == "broker_started"]
            assert [e["port"] for e in started] == [second.port]  # not the first broker's event
            # counted once the response is written, which may be just after the client read it
            wait_for(lambda: first.sample("triolog_server_requests_total", api="create_topics", error="NONE") == 1,
                     10, "the create_topics request counted")
            try:
                counted_on_second = second.sample("triolog_server_requests_total", api="create_topics", error="NONE")
            except KeyError:
                counted_on_second = 0
            assert counted_on_second == 0
        finally:
            assert second.stop() == 0
        assert any(e["event"] == "broker_stopped" for e in second.events())
    finally:
        assert first.stop() == 0
    after = structlog.get_config() if structlog.is_configured() else None
    assert after == before


def test_a_restart_keeps_the_ports_and_the_data(tmp_path):
    broker = InProcessBroker(tmp_path / "data", kafka=True).start()
    try:
        port, kafka_port = broker.port, broker.kafka_port
        with AdminClient(broker.bootstrap) as admin:
            admin.create_topics([NewTopic("kept", 2)])
        assert broker.stop() == 0
        broker.start()
        assert (broker.port, broker.kafka_port) == (port, kafka_port)
        with AdminClient(broker.bootstrap) as admin:
            assert len(admin.describe_topics(["kept"])["kept"].partitions) == 2
    finally:
        broker.stop()


def test_a_broker_that_cannot_start_says_why(tmp_path):
    try:
        InProcessBroker(tmp_path / "data", ("num.partitions=zero",)).start()
    except RuntimeError as exc:
        assert "num.partitions" in str(exc)
    else:
        raise AssertionError("started with an invalid num.partitions")


def test_the_cli_runs_in_process_and_leaves_the_environment_as_it_was(triolog_broker, monkeypatch):
    monkeypatch.setenv("TRIOLOG_BOOTSTRAP_SERVER", "127.0.0.1:1")
    done = run_cli("topics", "--list", env={"TRIOLOG_BOOTSTRAP_SERVER": triolog_broker.bootstrap})
    assert (done.code, done.stderr) == (0, "")
    assert os.environ["TRIOLOG_BOOTSTRAP_SERVER"] == "127.0.0.1:1"
    stdout = sys.stdout
    usage = run_cli("topics")
    assert usage.code == 2 and "one of the arguments --create --list" in usage.stderr
    assert sys.stdout is stdout
    produced = run_cli("produce", "--bootstrap-server", triolog_broker.bootstrap, "--topic", "lines",
                       stdin=b"a\nb\n")
    assert produced.code == 0, produced.stderr
    consumed = run_cli("consume", "--bootstrap-server", triolog_broker.bootstrap, "--topic", "lines",
                       "--from-beginning", "--max-messages", "2", "--timeout-ms", "10000")
    assert (consumed.code, consumed.out) == (0, "a\nb\n"), consumed.stderr


async def test_the_cli_runs_from_an_async_test_too(triolog_broker):
    done = run_cli("topics", "--bootstrap-server", triolog_broker.bootstrap, "--list")
    assert done.code == 0, done.stderr
