"""A real Prometheus with deploy/prometheus/prometheus-cluster.yml and alerts.yml scraping a real
cluster (`make cluster`'s runner: three ZooKeeper nodes, three broker processes). The targets
broker-net:940N become the brokers' free metrics ports, the 15 s intervals 1 s; nothing else is
changed. Every query of the dashboard's Cluster row is valid and has data; a kill -9 of a leader
shows as under-replicated partitions, a clean leader election and replica lag, and puts
TriologUnderReplicatedPartitions in pending, while TriologNoActiveController never fires."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import urllib.request

from tests.cluster.test_devcluster import Supervisor, _alive
from tests.ops.conftest import free_port
from tests.ops.test_prometheus import DASHBOARD, DEPLOY, SCRAPE_S, Stack
from tests.waiting import wait_for

from tests.e2e.broker_process import ROOT


def _config(tmp, metrics_ports: dict[str, int]):
    text = (DEPLOY / "prometheus" / "prometheus-cluster.yml").read_text()
    replacements = {
        "scrape_interval: 15s": f"scrape_interval: {SCRAPE_S}s",
        "evaluation_interval: 15s": f"evaluation_interval: {SCRAPE_S}s",
        "  - alerts.yml": f"  - {DEPLOY / 'prometheus' / 'alerts.yml'}",
        **{f'"broker-net:{9403 + i}"': f'"127.0.0.1:{metrics_ports[f"broker {i}"]}"' for i in (1, 2, 3)},
    }
    for old, new in replacements.items():
        assert text.count(old) == 1, f"prometheus-cluster.yml no longer has {old!r} exactly once"
        text = text.replace(old, new)
    path = tmp / "prometheus.yml"
    path.write_text(text)
    return path


def _cluster_queries() -> list[tuple[str, str]]:
    dashboard = json.loads(DASHBOARD.read_text())
    row = [p["id"] for p in dashboard["panels"] if p["type"] == "row" and p["title"] == "Cluster"]
    assert len(row) == 1
    panels = [p for p in dashboard["panels"] if p["gridPos"]["y"] > next(
        p["gridPos"]["y"] for p in dashboard["panels"] if p["id"] == row[0])]
    out = []
    for panel in panels:
        for target in panel["targets"]:
            expr = target["expr"].replace("$__rate_interval", "1m").replace("$topic", ".*").replace("$instance", ".*")
            assert "$" not in expr, expr
            out.append((panel["title"], expr))
    assert len({title for title, _ in out}) >= 10
    return out


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "triolog.broker.cli", *args], capture_output=True, text=True,
                          timeout=60, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_prometheus_sees_the_cluster_and_a_leaders_kill_9(tmp_path, system_tools):
    cluster = Supervisor(tmp_path / "cluster-data", "--free-ports")
    prometheus = None
    try:
        cluster.wait_ready()
        metrics_ports = {f"broker {i}": int(p) for i, p in enumerate(re.findall(
            r"http://127\.0\.0\.1:(\d+)/metrics", cluster.value(r"^  metrics: +(.+)$")), 1)}
        bootstrap = cluster.value(r"bootstrap \(triolog CLI, msgpack\): +(\S+)")
        port = free_port()
        log = tmp_path / "prometheus.log"
        with open(log, "wb") as out:
            prometheus = subprocess.Popen([
                system_tools["prometheus"], f"--config.file={_config(tmp_path, metrics_ports)}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}",
            ], stdout=out, stderr=subprocess.STDOUT)
        stack = Stack(None, prometheus, f"http://127.0.0.1:{port}", log)  # type: ignore[arg-type]

        def ready():
            assert prometheus.poll() is None, log.read_text()
            try:
                with urllib.request.urlopen(f"{stack.url}/-/ready", timeout=2) as response:
                    return response.status == 200
            except OSError:
                return False

        wait_for(ready, 60, "prometheus /-/ready")
        created = _cli("topics", "--create", "--topic", "watched", "--partitions", "3", "--replication-factor", "3",
                       "--bootstrap-server", bootstrap)
        assert created.returncode == 0, created.stdout + created.stderr
        up = stack.eventually('count(up{job="triolog"} == 1)', lambda v: v == 3, what="three brokers up")
        assert sorted(s["metric"]["instance"] for s in stack.query('up{job="triolog"}')) == [
            "broker1", "broker2", "broker3"]
        stack.eventually("sum(triolog_cluster_active_controller)", lambda v: v == 1)
        stack.eventually("sum(triolog_cluster_leader_partitions)", lambda v: v == 3)
        stack.eventually("sum(triolog_cluster_under_replicated_partitions)", lambda v: v == 0)
        stack.eventually("count(triolog_cluster_replica_lag)", lambda v: v == 6)  # 3 partitions x 2 followers
        for title, expr in _cluster_queries():
            stack.query(expr)  # valid PromQL

        # kill -9 of a broker that is not the controller (each leads one partition: Kafka's round
        # robin gives each broker one); the controller's kill would leave none for a session.
        (controller,) = [s["metric"]["instance"] for s in stack.query("triolog_cluster_active_controller == 1")]
        victim = next(name for name in ("broker 2", "broker 3", "broker 1") if name.replace(" ", "") != controller)
        killed = cluster.child_pids()[victim]
        os.kill(killed, signal.SIGKILL)
        stack.eventually("sum(triolog_cluster_under_replicated_partitions)", lambda v: v == 3, 60,
                         "every partition under-replicated")
        stack.eventually('sum(triolog_cluster_elections_total{kind="clean"})', lambda v: v >= 1, 60,
                         "a clean election of a new leader for the killed broker's partition")
        stack.eventually("sum(triolog_cluster_leader_partitions)", lambda v: v == 3, 60)
        stack.eventually("sum(triolog_cluster_active_controller)", lambda v: v == 1)
        for title, expr in _cluster_queries():
            if "lag per partition" in title or "Under-replicated" in title or "ISR" in title:
                wait_for(lambda expr=expr: stack.query(expr), 30, f"data in panel {title!r}")

        def alert(name):
            found = [a for a in stack.api("alerts")["data"]["alerts"] if a["labels"]["alertname"] == name]
            return found or None

        pending = wait_for(lambda: alert("TriologUnderReplicatedPartitions"), 30, "TriologUnderReplicatedPartitions")
        assert {a["state"] for a in pending} == {"pending"}  # it fires after 5 minutes
        assert alert("TriologNoActiveController") is None and alert("TriologOfflinePartitions") is None
        print(f"\nprometheus on the cluster: {up:.0f} targets up; after kill -9 of {victim}: 3 partitions "
              f"under-replicated, TriologUnderReplicatedPartitions pending on "
              f"{sorted(a['labels']['instance'] for a in pending)}")
    finally:
        if prometheus is not None:
            prometheus.terminate()
            prometheus.wait(30)
        pids = cluster.child_pids()
        if cluster.process.poll() is None:
            cluster.process.send_signal(signal.SIGTERM)
            cluster.process.wait(60)
        cluster.finish()
        for pid in pids.values():
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
