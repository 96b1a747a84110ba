"""The compose file's "secure" profile, without Docker: deploy/secure/make-certs.sh makes
certificates the broker takes, and deploy/secure/server.properties (its listeners as the compose
service sets them) runs a broker that admits only authenticated TLS clients, the admin added by
`triolog users` as the secure-init service adds it."""

from __future__ import annotations

import shutil
import ssl
import subprocess

import pytest

from tests.e2e.broker_process import ROOT, InProcessBroker
from triolog.protocol import messages as m
from triolog.protocol.errors import ErrorCode

from .sasl_client import MsgpackClient
from .brokers import add_user

SECURE = ROOT / "deploy" / "secure"


@pytest.mark.skipif(shutil.which("openssl") is None, reason="make-certs.sh needs the openssl command")
def test_the_secure_profile_admits_only_authenticated_tls_clients(tmp_path):
    copy = tmp_path / "secure"
    shutil.copytree(SECURE, copy, ignore=shutil.ignore_patterns("certs"))
    done = subprocess.run([str(copy / "make-certs.sh")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    certs = copy / "certs"
    assert sorted(p.name for p in certs.iterdir()) == ["broker.pem", "ca.key", "ca.pem"]
    data = tmp_path / "data"
    add_user(data, "admin", "admin-secret")
    # The listeners as the compose service sets them (on free ports of 127.0.0.1 here), the rest
    # from the profile's file; the keystore where make-certs.sh wrote it.
    broker = InProcessBroker(data, security="SASL_SSL", kafka=True, kafka_security="SASL_SSL",
                           config_file=copy / "server.properties",
                           overrides=(f"ssl.keystore.location={certs / 'broker.pem'}", "logger.format=json"))
    broker.start()
    try:
        context = ssl.create_default_context(cafile=str(certs / "ca.pem"))  # verifies the name: localhost
        client = MsgpackClient(broker.port, ssl_context=context, server_hostname="localhost")
        assert client.call(m.MetadataRequest)["error_code"] == ErrorCode.ILLEGAL_SASL_STATE  # authenticate first
        client.close()
        started = [e for e in broker.events() if e.get("event") == "broker_started"]
        assert started and not [e for e in broker.events() if e.get("event") == "listener_without_authentication"]
    finally:
        broker.stop()
