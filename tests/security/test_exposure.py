"""`triolog serve` warns at startup about every listener other hosts can reach without
authenticating, and about a metrics endpoint they can reach; not about loopback ones."""

from __future__ import annotations

from tests.e2e.broker_process import InProcessBroker

from .tls_certs import make_tls_files


def _warnings(broker: InProcessBroker) -> dict[str, dict]:
    return {e["key"]: e for e in broker.events() if e.get("event") == "listener_without_authentication"}


def test_an_unauthenticated_listener_on_every_interface_is_warned_about(tmp_path):
    broker = InProcessBroker(tmp_path / "data", overrides=("listeners=PLAINTEXT://0.0.0.0:0",
                                                         "metrics.listener=http://0.0.0.0:0")).start()
    try:
        warnings = _warnings(broker)
        assert set(warnings) == {"listeners", "metrics.listener"}
        assert warnings["listeners"]["level"] == "warning" and "SASL_SSL" in warnings["listeners"]["hint"]
        assert "names every topic" in warnings["metrics.listener"]["hint"]
    finally:
        broker.stop()


def test_loopback_and_authenticated_listeners_are_not_warned_about(tmp_path):
    tls = make_tls_files(tmp_path / "tls")
    broker = InProcessBroker(tmp_path / "data", metrics=True, kafka=True, overrides=(
        "listeners=SASL_SSL://0.0.0.0:0", f"ssl.keystore.location={tls.keystore}",
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer")).start()
    try:
        assert any(e.get("event") == "broker_started" for e in broker.events()) and _warnings(broker) == {}
    finally:
        broker.stop()


def test_an_authenticated_listener_without_an_authorizer_is_warned_about(tmp_path):
    tls = make_tls_files(tmp_path / "tls")
    broker = InProcessBroker(tmp_path / "data", overrides=(
        "listeners=SASL_SSL://0.0.0.0:0", f"ssl.keystore.location={tls.keystore}")).start()
    try:
        warnings = _warnings(broker)
        assert set(warnings) == {"listeners"} and "no authorizer" in warnings["listeners"]["hint"]
    finally:
        broker.stop()
