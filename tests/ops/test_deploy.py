"""deploy/ hangs together: what docker-compose.yml mounts exists, the addresses Prometheus and
Grafana use match the compose services and the image's ports, and every metric the dashboard and
the alerts use is one the broker documents (no YAML parser in the test extra: plain text checks)."""

from __future__ import annotations

import json
import re

from triolog.config.reference import metrics_reference
from tests.ops import dockerfile as df

DEPLOY = df.ROOT / "deploy"
COMPOSE = (DEPLOY / "docker-compose.yml").read_text()
HISTOGRAM_SUFFIXES = ("_bucket", "_count", "_sum")


def _used_metrics() -> dict[str, set[str]]:
    dashboard = json.loads((DEPLOY / "grafana" / "dashboards" / "triolog.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", ())]
    return {
        "dashboard": set(re.findall(r"\btriolog_[a-z_]+", " ".join(exprs))),
        "alerts": set(re.findall(r"\btriolog_[a-z_]+", (DEPLOY / "prometheus" / "alerts.yml").read_text())),
    }


def test_compose_mounts_files_that_exist():
    mounts = re.findall(r"^\s*- (\./[^:]+):", COMPOSE, re.M)
    assert len(mounts) >= 5
    for mount in mounts:
        assert (DEPLOY / mount).exists(), f"docker-compose.yml mounts {mount}, which does not exist"
    assert re.search(r"^\s*context: \.\.$", COMPOSE, re.M) and (df.ROOT / "Dockerfile").exists()


def test_addresses_match_the_services_and_the_image_ports():
    _, stages = df.stages(df.DOCKERFILE.read_text())
    exposed = stages[-1].last("EXPOSE").args.split()
    metrics_port = df.env(stages[-1])["TRIOLOG_METRICS_LISTENER"].rsplit(":", 1)[1]
    assert metrics_port in exposed
    assert f'"broker:{metrics_port}"' in (DEPLOY / "prometheus" / "prometheus.yml").read_text()
    for port in exposed:
        assert f'"{port}:{port}"' in COMPOSE
    datasource = (DEPLOY / "grafana" / "provisioning" / "datasources" / "prometheus.yml").read_text()
    assert "url: http://prometheus:9090" in datasource and '"9090:9090"' in COMPOSE
    for service in ("broker", "prometheus", "grafana"):
        assert re.search(rf"^  {service}:$", COMPOSE, re.M), service
    dashboards = (DEPLOY / "grafana" / "provisioning" / "dashboards" / "triolog.yml").read_text()
    path = re.search(r"path: (\S+)", dashboards)[1]
    assert f"./grafana/dashboards:{path}:ro" in COMPOSE


def test_dashboard_uses_the_provisioned_datasource_variable():
    dashboard = json.loads((DEPLOY / "grafana" / "dashboards" / "triolog.json").read_text())
    names = [v["name"] for v in dashboard["templating"]["list"]]
    assert names == ["datasource", "topic"]
    for panel in dashboard["panels"]:
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
            assert panel["targets"], panel["title"]


def test_dashboard_and_alerts_use_only_documented_metrics():
    """Needs the cleaner metrics of issue 4 in the tables of broker/metrics.py's docstring."""
    documented = set(re.findall(r"^\| `(triolog_[a-z_]+)`", metrics_reference(), re.M))
    for where, names in _used_metrics().items():
        unknown = sorted(n for n in names if n not in documented
                         and not any(n.endswith(s) and n[:-len(s)] in documented for s in HISTOGRAM_SUFFIXES))
        assert unknown == [], f"{where} uses metrics broker/metrics.py does not document: {unknown}"
