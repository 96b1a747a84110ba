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


#: What compose mounts that a script of deploy/ makes (git ignores it): mount -> the script.
GENERATED = {"./secure/certs": DEPLOY / "secure" / "make-certs.sh"}


def test_compose_mounts_files_that_exist():
    mounts = re.findall(r"^\s*- (\./[^:]+):", COMPOSE, re.M)
    assert len(mounts) >= 5
    for mount in mounts:
        if mount in GENERATED:
            assert GENERATED[mount].exists(), f"{mount} is made by {GENERATED[mount]}, which does not exist"
            continue
        assert (DEPLOY / mount).exists(), f"docker-compose.yml mounts {mount}, which does not exist"
    assert re.search(r"^\s*context: \.\.$", COMPOSE, re.M) and (df.ROOT / "Dockerfile").exists()


def test_addresses_match_the_services_and_the_image_ports():
    _, stages = df.stages(df.DOCKERFILE.read_text())
    exposed = stages[-1].last("EXPOSE").args.split()
    metrics_port = df.env(stages[-1])["TRIOLOG_METRICS_LISTENER"].rsplit(":", 1)[1]
    assert metrics_port in exposed
    assert f'"broker:{metrics_port}"' in (DEPLOY / "prometheus" / "prometheus.yml").read_text()
    for port in exposed:
        assert f'"127.0.0.1:{port}:{port}"' in COMPOSE
    datasource = (DEPLOY / "grafana" / "provisioning" / "datasources" / "prometheus.yml").read_text()
    assert "url: http://prometheus:9090" in datasource and '"127.0.0.1:9090:9090"' in COMPOSE
    for service in ("broker", "prometheus", "grafana"):
        assert re.search(rf"^  {service}:$", COMPOSE, re.M), service
    dashboards = (DEPLOY / "grafana" / "provisioning" / "dashboards" / "triolog.yml").read_text()
    path = re.search(r"path: (\S+)", dashboards)[1]
    assert f"./grafana/dashboards:{path}:ro" in COMPOSE


def _services() -> dict[str, str]:
    """Each compose service's block of text (the lines under ``  name:``)."""
    services = COMPOSE.split("\nservices:\n", 1)[1].split("\nvolumes:\n", 1)[0]
    parts = re.split(r"^  ([a-z-]+):\n", services, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2]))


def _config_lines(block: str) -> list[str]:
    return [line for line in block.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def test_compose_publishes_every_port_on_localhost_only():
    services = _services()
    assert sorted(services) == ["broker", "grafana", "prometheus", "secure-broker", "secure-init"]
    published = []
    for name, block in services.items():
        lines = _config_lines(block)
        if "    ports:" in lines:
            start = lines.index("    ports:") + 1
            while start < len(lines) and lines[start].startswith("      - "):
                published.append((name, lines[start].split("- ", 1)[1]))
                start += 1
    # broker: msgpack, Kafka, metrics; Prometheus; Grafana; the secure broker's three
    assert len(published) == 8, published
    for name, mapping in published:
        assert re.fullmatch(r'"127\.0\.0\.1:\d+:\d+"', mapping), f"{name} publishes {mapping} beyond 127.0.0.1"


def test_compose_has_no_default_grafana_password_and_no_prometheus_lifecycle_api():
    grafana = _config_lines(_services()["grafana"])
    password = [line.strip() for line in grafana if "GF_SECURITY_ADMIN_PASSWORD" in line]
    # ${VAR:?message}: compose refuses to start without it, there is no fallback value.
    assert len(password) == 1 and re.fullmatch(
        r"GF_SECURITY_ADMIN_PASSWORD: \$\{GRAFANA_ADMIN_PASSWORD:\?[^}]+\}", password[0]), password
    assert not any(re.search(r"\badmin/admin\b|PASSWORD: *\"?admin\"?$", line) for line in _config_lines(COMPOSE))
    assert not any("enable-lifecycle" in line for line in _config_lines(COMPOSE))


def test_compose_starts_prometheus_and_grafana_once_the_broker_is_healthy():
    services = _services()
    broker = "\n".join(_config_lines(services["broker"]))
    # The broker's healthcheck is the image's: the same `triolog health` command.
    _, stages = df.stages(df.DOCKERFILE.read_text())
    image_check = json.loads(stages[-1].last("HEALTHCHECK").args.split("CMD", 1)[1].strip())
    compose_check = re.search(r"^    healthcheck:\n      test: (\[.*\])$", broker, re.M)
    assert compose_check and json.loads(compose_check[1]) == ["CMD", *image_check]
    for dependent in ("prometheus", "grafana"):
        block = "\n".join(_config_lines(services[dependent]))
        assert re.search(r"^    depends_on:\n      broker:\n        condition: service_healthy$", block, re.M), \
            f"{dependent} does not wait for a healthy broker"


def test_dashboard_uses_the_provisioned_datasource_and_instance_variables():
    dashboard = json.loads((DEPLOY / "grafana" / "dashboards" / "triolog.json").read_text())
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert list(variables) == ["datasource", "instance", "topic"]
    assert variables["instance"]["definition"] == 'label_values(up{job="triolog"}, instance)'
    assert 'instance=~"$instance"' in variables["topic"]["definition"]
    selectors = 0
    for panel in dashboard["panels"]:
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
            assert panel["targets"], panel["title"]
        for target in panel.get("targets", ()):
            # Every series a panel reads is filtered by the instance variable.
            for name, matchers in re.findall(r"\b(triolog_[a-z_]+)(\{[^}]*\})?", target["expr"]):
                selectors += 1
                assert matchers.startswith('{instance=~"$instance"'), (panel["title"], target["expr"])
    assert selectors >= 30


def test_dashboard_and_alerts_use_only_documented_metrics():
    """Needs the cleaner metrics of issue 4 in the tables of broker/metrics.py's docstring."""
    documented = set(re.findall(r"^\| `(triolog_[a-z_]+)`", metrics_reference(), re.M))
    for where, names in _used_metrics().items():
        unknown = sorted(n for n in names if n not in documented
                         and not any(n.endswith(s) and n[:-len(s)] in documented for s in HISTOGRAM_SUFFIXES))
        assert unknown == [], f"{where} uses metrics broker/metrics.py does not document: {unknown}"
