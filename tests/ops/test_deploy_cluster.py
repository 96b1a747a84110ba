"""deploy/docker-compose.cluster.yml without Docker: it parses as YAML, its services are what
docs/cluster.md says (three ZooKeeper nodes, three brokers, Prometheus, Grafana), every port is
published on 127.0.0.1 only, each broker's configuration (deploy/cluster/server.properties, the
image's ENV, the service's environment) is accepted by the broker's own config loader with the
ids, listeners and ZooKeeper ensemble the file means, Prometheus scrapes exactly the brokers'
metrics ports (promtool checks its config), and the cluster alerts fire when they should
(promtool's unit tests, tests/ops/cluster_alerts_test.yml).

The test extra has no YAML library, so the compose file is read by a strict reader of the block
YAML it uses (mappings, sequences, plain, quoted and flow-list scalars): anything else in the file
fails the test instead of being misread. Where a YAML library exists (PyYAML in this interpreter or
in the system's python3), the same file is parsed by it too and must give the same document.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from triolog.config.loader import load_config
from tests.ops import dockerfile as df

DEPLOY = df.ROOT / "deploy"
COMPOSE_PATH = DEPLOY / "docker-compose.cluster.yml"
PROMETHEUS_CONFIG = DEPLOY / "prometheus" / "prometheus-cluster.yml"
BROKERS = {"broker1": 1, "broker2": 2, "broker3": 3}
ZOOKEEPERS = ("zk1", "zk2", "zk3")


# -- a strict reader of the YAML subset the compose file is written in -----------------------------


class UnsupportedYaml(ValueError):
    pass


def _scalar(text: str, where: int):
    text = text.strip()
    if text == "" or text in ("null", "~"):
        return None
    if text.startswith('"'):
        return json.loads(text)
    if text.startswith("'"):
        if not text.endswith("'") or len(text) < 2:
            raise UnsupportedYaml(f"line {where}: unterminated quote")
        return text[1:-1].replace("''", "'")
    if text.startswith("["):
        try:
            return json.loads(text)
        except ValueError:
            raise UnsupportedYaml(f"line {where}: a flow sequence that is not JSON: {text}") from None
    if text[0] in "{&*!|>%@`" or text.startswith("<<"):
        raise UnsupportedYaml(f"line {where}: unsupported YAML: {text}")
    if text in ("true", "false"):
        return text == "true"
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    if re.fullmatch(r"-?\d+\.\d*", text):
        return float(text)
    if ": " in text or text.endswith(":") or " #" in text:
        raise UnsupportedYaml(f"line {where}: ambiguous plain scalar: {text}")
    return text


def _lines(text: str) -> list[tuple[int, int, str]]:
    """(line number, indent, content) of each line that is not blank or a comment."""
    out = []
    for number, raw in enumerate(text.splitlines(), 1):
        if "\t" in raw[: len(raw) - len(raw.lstrip())]:
            raise UnsupportedYaml(f"line {number}: tab indentation")
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped == "---":
            raise UnsupportedYaml(f"line {number}: several documents")
        out.append((number, len(raw) - len(raw.lstrip()), stripped))
    return out


def _block(lines: list[tuple[int, int, str]], start: int, indent: int):
    """The mapping or sequence at ``indent`` from ``lines[start]``; returns (value, next index)."""
    if lines[start][2].startswith("- ") or lines[start][2] == "-":
        items = []
        i = start
        while i < len(lines) and lines[i][1] == indent and (lines[i][2].startswith("- ") or lines[i][2] == "-"):
            number, _, content = lines[i]
            rest = content[2:].strip()
            if re.match(r"^[\w.-]+:( |$)", rest):  # a mapping inside the item
                inner = [(number, indent + 2, rest), *lines[i + 1 :]]
                value, used = _block(inner, 0, indent + 2)
                items.append(value)
                i += used
            else:
                items.append(_scalar(rest, number))
                i += 1
        if i < len(lines) and lines[i][1] > indent:
            raise UnsupportedYaml(f"line {lines[i][0]}: unexpected indentation")
        return items, i - start
    mapping: dict = {}
    i = start
    while i < len(lines) and lines[i][1] == indent:
        number, _, content = lines[i]
        match = re.match(r"^([\w.-]+|\"[^\"]+\"):(?: (.*))?$", content)
        if not match:
            raise UnsupportedYaml(f"line {number}: not a `key: value` line: {content}")
        key = json.loads(match[1]) if match[1].startswith('"') else match[1]
        if key in mapping:
            raise UnsupportedYaml(f"line {number}: duplicate key {key}")
        value_text = (match[2] or "").strip()
        i += 1
        if value_text == "" and i < len(lines) and lines[i][1] > indent:
            value, used = _block(lines, i, lines[i][1])
            mapping[key] = value
            i += used
        elif value_text == "" and i < len(lines) and lines[i][1] == indent and lines[i][2].startswith("- "):
            value, used = _block(lines, i, indent)  # a sequence at its key's own indentation
            mapping[key] = value
            i += used
        else:
            mapping[key] = _scalar(value_text, number)
    if i < len(lines) and lines[i][1] > indent:
        raise UnsupportedYaml(f"line {lines[i][0]}: unexpected indentation")
    return mapping, i - start


def read_yaml(text: str):
    lines = _lines(text)
    value, used = _block(lines, 0, 0)
    if used != len(lines):
        raise UnsupportedYaml(f"line {lines[used][0]}: not part of the document")
    return value


COMPOSE = read_yaml(COMPOSE_PATH.read_text())
SERVICES = COMPOSE["services"]


def test_the_reader_refuses_what_it_does_not_understand():
    assert read_yaml('a:\n  b: "x"\n  c:\n    - 1\n    - y: [1, "z"]\n      w: null\n') == \
        {"a": {"b": "x", "c": [1, {"y": [1, "z"], "w": None}]}}
    for text in ("a: &anchor 1\n", "a: {b: 1}\n", "a: |\n  text\n", "a: 1\na: 2\n", "a:\n  b: 1\n c: 2\n",
                 "a: b: c\n"):
        with pytest.raises(UnsupportedYaml):
            read_yaml(text)


def _yaml_library_load(path: Path):
    """The document as PyYAML reads it (here or in the system's python3), or None without PyYAML."""
    try:
        import yaml  # type: ignore[import-untyped]
    except ImportError:
        pass
    else:
        return yaml.safe_load(path.read_text())
    for python in ("/usr/bin/python3", shutil.which("python3")):
        if python and Path(python).exists() and Path(python).resolve() != Path(sys.executable).resolve():
            done = subprocess.run([python, "-c", "import json, sys, yaml; json.dump(yaml.safe_load(open(sys.argv[1])), "
                                   "sys.stdout)", str(path)], capture_output=True, text=True, timeout=60)
            if done.returncode == 0:
                return json.loads(done.stdout)
    return None


def test_a_yaml_library_reads_the_same_document():
    document = _yaml_library_load(COMPOSE_PATH)
    if document is None:
        pytest.skip("no YAML library here (PyYAML); the strict reader above is the check")
    assert document == COMPOSE


# -- what the compose file says ---------------------------------------------------------------------


def test_the_services_and_every_published_port_on_localhost_only():
    assert COMPOSE["name"] == "triolog-cluster"
    assert sorted(SERVICES) == sorted([*ZOOKEEPERS, "broker-net", *BROKERS, "prometheus", "grafana"])
    published = [(name, mapping) for name, service in SERVICES.items() for mapping in service.get("ports", ())]
    # the brokers' three listeners each (on broker-net), Prometheus, Grafana; ZooKeeper none
    assert len(published) == 3 * 3 + 2, published
    for name, mapping in published:
        assert re.fullmatch(r"127\.0\.0\.1:\d+:\d+", mapping), f"{name} publishes {mapping} beyond 127.0.0.1"
    for name in ZOOKEEPERS:
        assert "ports" not in SERVICES[name]
    for name, service in SERVICES.items():
        for volume in service.get("volumes", ()):
            source = volume.split(":", 1)[0]
            if source.startswith("./"):
                assert (DEPLOY / source).exists(), f"{name} mounts {source}, which does not exist"
            else:
                assert source in COMPOSE["volumes"], f"{name} uses the undeclared volume {source}"
    assert SERVICES["broker1"]["build"] == {"context": "..", "dockerfile": "Dockerfile"}
    assert all(SERVICES[b]["image"] == "triolog:latest" for b in BROKERS)
    password = SERVICES["grafana"]["environment"]["GF_SECURITY_ADMIN_PASSWORD"]
    assert re.fullmatch(r"\$\{GRAFANA_ADMIN_PASSWORD:\?[^}]+\}", password), password


def test_the_zookeeper_ensemble_names_its_three_nodes():
    for myid, name in enumerate(ZOOKEEPERS, 1):
        environment = SERVICES[name]["environment"]
        assert environment["ZOO_MY_ID"] == str(myid) and SERVICES[name]["hostname"] == name
        servers = dict(entry.split("=", 1) for entry in environment["ZOO_SERVERS"].split())
        assert servers == {f"server.{i}": f"{zk}:2888:3888;2181" for i, zk in enumerate(ZOOKEEPERS, 1)}


def _image_environment() -> dict[str, str]:
    _, stages = df.stages(df.DOCKERFILE.read_text())
    return dict(df.env(stages[-1]))


def _broker_config(name: str):
    service = SERVICES[name]
    (mount,) = [v for v in service["volumes"] if v.endswith(":/etc/triolog/server.properties:ro")]
    path = DEPLOY / mount.split(":", 1)[0]
    environment = {**_image_environment(), **service["environment"]}
    return load_config(path, environ=environment)


def _port(address: str) -> int:
    return int(address.rsplit(":", 1)[1])


def test_each_brokers_configuration_is_accepted_by_the_config_loader():
    published = {int(m.split(":")[1]) for m in SERVICES["broker-net"]["ports"]}
    command = _image_environment()  # the image's CMD reads /etc/triolog/server.properties
    assert command["TRIOLOG_LOG_DIRS"] == "/var/lib/triolog"
    seen_ports: set[int] = set()
    for name, broker_id in BROKERS.items():
        config, warnings = _broker_config(name)
        assert warnings == [], (name, warnings)
        assert config.node_id == broker_id
        assert config.zookeeper_connect == ",".join(f"{zk}:2181" for zk in ZOOKEEPERS) + "/triolog"
        assert config.default_replication_factor == 3 and config.log_config.min_insync_replicas == 2
        listeners = {"msgpack": _port(str(config.listener)), "kafka": _port(str(config.kafka_listener)),
                     "metrics": _port(str(config.metrics_listener))}
        # Its ports are its own, published on broker-net, whose namespace it shares.
        assert SERVICES[name]["network_mode"] == "service:broker-net"
        assert not seen_ports & set(listeners.values()) and set(listeners.values()) <= published, (name, listeners)
        seen_ports |= set(listeners.values())
        # Kafka clients on this host and the other brokers both reach it at localhost:<its port>.
        assert str(config.kafka_advertised_listener) == f"PLAINTEXT://localhost:{listeners['kafka']}"
        # The healthcheck asks this broker, not another.
        assert SERVICES[name]["healthcheck"]["test"] == [
            "CMD", "triolog", "health", "--bootstrap-server", f"127.0.0.1:{listeners['msgpack']}", "--timeout", "3"]
    assert seen_ports == published


def test_prometheus_scrapes_each_brokers_metrics_port(system_tools):
    text = PROMETHEUS_CONFIG.read_text()
    targets = re.findall(r'targets: \["broker-net:(\d+)"\]\n\s+labels:\n\s+cluster: triolog\n\s+instance: (\S+)', text)
    metrics = {name: _port(str(_broker_config(name)[0].metrics_listener)) for name in BROKERS}
    assert sorted((int(port), instance) for port, instance in targets) == sorted((p, n) for n, p in metrics.items())
    assert "./prometheus/prometheus-cluster.yml:/etc/prometheus/prometheus.yml:ro" in SERVICES["prometheus"]["volumes"]
    assert "./prometheus/alerts.yml:/etc/prometheus/alerts.yml:ro" in SERVICES["prometheus"]["volumes"]
    done = subprocess.run([system_tools["promtool"], "check", "config", str(PROMETHEUS_CONFIG)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0 and "1 rule files found" in done.stdout, done.stdout + done.stderr


def test_the_cluster_alerts_fire_when_they_should(system_tools):
    tests = Path(__file__).parent / "cluster_alerts_test.yml"
    done = subprocess.run([system_tools["promtool"], "test", "rules", str(tests)], capture_output=True, text=True,
                          timeout=120, cwd=df.ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    tested = set(re.findall(r"alertname: (\w+)", tests.read_text()))
    group = (DEPLOY / "prometheus" / "alerts.yml").read_text().split("- name: triolog-cluster", 1)[1]
    assert tested == set(re.findall(r"- alert: (\w+)", group)) == {
        "TriologUnderReplicatedPartitions", "TriologOfflinePartitions", "TriologNoActiveController",
        "TriologMultipleActiveControllers"}
