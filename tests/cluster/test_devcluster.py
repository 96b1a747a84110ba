"""`make cluster` (python -m triolog.devcluster) as a user runs it: a real 3-node ZooKeeper ensemble
and three broker processes from this checkout; the printed bootstrap list reaches all three
brokers through the `triolog` CLI, a replicated topic gets three in-sync replicas, and SIGTERM
(or Ctrl-C) stops every process it started. Killed -9 itself, it leaves nothing behind either."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.e2e.broker_process import ROOT
from triolog.devcluster.cluster import registered_brokers

from .helpers import wait_until


class Supervisor:
    """``python -m triolog.devcluster`` in a subprocess, its output collected line by line."""

    def __init__(self, directory: Path, *args: str):
        self.lines: list[str] = []
        self.process = subprocess.Popen(
            [sys.executable, "-m", "triolog.devcluster", "--dir", str(directory), *args],
            cwd=directory.parent,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    def wait_ready(self, timeout_s: float = 60) -> None:
        ready = wait_until(lambda: self.process.poll() is not None or any(line.startswith("Try:") for line in self.lines),
                           timeout_s)
        assert ready and self.process.poll() is None, f"the cluster did not come up:\n{self.output}"

    def value(self, pattern: str) -> str:
        match = re.search(pattern, self.output, re.M)
        assert match, f"{pattern!r} not in:\n{self.output}"
        return match[1]

    def child_pids(self) -> dict[str, int]:
        return {f"{kind} {number}": int(pid) for kind, number, pid in
                re.findall(r"^  (broker|zookeeper) (\d+): pid (\d+)", self.output, re.M)}

    def finish(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self._reader.join(10)


def _alive(pid: int) -> bool:
    """The process exists and is not a zombie waiting for its parent."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "\nState:\tZ" not in status


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "triolog.broker.cli", *args], capture_output=True, text=True,
                          timeout=60, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})


@pytest.fixture
def supervisor(tmp_path):
    started: list[Supervisor] = []

    def start(*args: str) -> Supervisor:
        started.append(Supervisor(tmp_path / "cluster-data", *args))
        return started[-1]

    yield start
    for each in started:
        pids = each.child_pids()
        each.finish()
        for pid in pids.values():  # nothing of a failed test outlives it
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_the_cluster_forms_serves_a_replicated_topic_and_stops_on_sigterm(supervisor, tmp_path):
    started = time.monotonic()
    cluster = supervisor("--free-ports")
    cluster.wait_ready()
    ready_s = time.monotonic() - started
    bootstrap = cluster.value(r"bootstrap \(triolog CLI, msgpack\): +(\S+)")
    kafka_bootstrap = cluster.value(r"bootstrap \(Kafka clients\): +(\S+)")
    assert len(bootstrap.split(",")) == len(kafka_bootstrap.split(",")) == 3
    pids = cluster.child_pids()
    assert sorted(pids) == ["broker 1", "broker 2", "broker 3", "zookeeper 1", "zookeeper 2", "zookeeper 3"]
    assert all(_alive(pid) for pid in pids.values())
    # Every broker lists all three: they share one ZooKeeper chroot.
    for address in bootstrap.split(","):
        assert registered_brokers(int(address.rsplit(":", 1)[1])) == [1, 2, 3]
    data = tmp_path / "cluster-data"
    for broker_id in (1, 2, 3):
        config = (data / f"broker-{broker_id}" / "server.properties").read_text()
        assert f"broker.id={broker_id}\n" in config and "/triolog\n" in config
    for node in (1, 2, 3):
        assert (data / "zookeeper" / f"zk{node}" / "zoo.cfg").exists()

    created = _cli("topics", "--create", "--topic", "orders", "--partitions", "3", "--replication-factor", "3",
                   "--bootstrap-server", bootstrap)
    assert created.returncode == 0, created.stdout + created.stderr

    def described():
        done = _cli("topics", "--describe", "--topic", "orders", "--output", "json", "--bootstrap-server", bootstrap)
        assert done.returncode == 0, done.stderr
        partitions = json.loads(done.stdout)[0]["partitions"]
        return partitions if all(len(p["isr"]) == 3 for p in partitions) else None

    partitions = wait_until(described, 30)
    assert partitions, "the topic's partitions never had three in-sync replicas"
    assert sorted(p["leader"] for p in partitions) == [1, 2, 3]  # Kafka's round robin: one leader each
    assert all(sorted(p["replicas"]) == [1, 2, 3] for p in partitions)

    stopping = time.monotonic()
    cluster.process.send_signal(signal.SIGTERM)
    assert cluster.process.wait(60) == 0, cluster.output
    stop_s = time.monotonic() - stopping
    cluster.finish()
    assert "SIGTERM: stopping the cluster" in cluster.output and cluster.output.endswith("cluster stopped")
    assert [name for name, pid in pids.items() if _alive(pid)] == []
    for broker_id in (1, 2, 3):  # each shut down in order, not killed
        assert "broker_stopped" in (data / f"broker-{broker_id}" / "broker.log").read_text()
    print(f"\ndevcluster: ready in {ready_s:.1f} s, stopped in {stop_s:.1f} s; {len(pids)} processes, none left")


def test_a_killed_supervisor_takes_its_processes_with_it(supervisor):
    cluster = supervisor("--free-ports", "--brokers", "1")
    cluster.wait_ready()
    pids = cluster.child_pids()
    assert len(pids) == 4
    cluster.process.kill()  # kill -9: no orderly stop; the children's parent-death signal does it
    cluster.process.wait()
    assert wait_until(lambda: not any(_alive(pid) for pid in pids.values()), 30), \
        [name for name, pid in pids.items() if _alive(pid)]


def test_a_taken_port_is_refused_before_anything_starts(supervisor, tmp_path):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        others = []
        for _ in range(3):  # free ones for the other listeners (each bound until all are chosen)
            others.append(socket.socket())
            others[-1].bind(("127.0.0.1", 0))
        kafka, metrics, zookeeper = (str(s.getsockname()[1]) for s in others)
        for other in others:
            other.close()
        cluster = supervisor("--brokers", "1", "--port", str(port), "--kafka-port", kafka, "--metrics-port", metrics,
                             "--zookeeper-port", zookeeper)
        assert cluster.process.wait(30) == 1
    cluster.finish()
    assert re.search(rf"port\(s\) (\d+, )*{port}\b.* of 127\.0\.0\.1 are in use", cluster.output), cluster.output
    assert not (tmp_path / "cluster-data" / "zookeeper").exists()
