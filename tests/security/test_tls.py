"""TLS listeners (SSL://): the broker's certificate from ssl.keystore.location, client
certificates against ssl.truststore.location, and what a client that gets TLS wrong sees. Real
broker processes, real sockets, certificates made at test time."""

from __future__ import annotations

import socket
import ssl
import struct
import time

import pytest
import trustme

from tests.e2e.broker_process import InProcessBroker
from triolog.protocol import messages as m
from triolog.protocol.records import build_batch, iter_batches

from .sasl_client import MsgpackClient
from .tls_certs import make_tls_files


@pytest.fixture(scope="module")
def tls(tmp_path_factory):
    return make_tls_files(tmp_path_factory.mktemp("tls"))


def _broker(tmp_path, tls, *overrides, kafka=False, security="SSL", **kwargs) -> InProcessBroker:
    return InProcessBroker(tmp_path / "data", security=security, kafka=kafka, kafka_security="SSL", metrics=True,
                         overrides=(f"ssl.keystore.location={tls.keystore}", *overrides), **kwargs).start()


def _produce_and_fetch(client: MsgpackClient, topic: str, values: list[bytes]) -> list[bytes]:
    assert client.call(m.CreateTopicsRequest, topics=(m.NewTopic(name=topic, num_partitions=1, replication_factor=1),)
                       )["topics"][0]["error_code"] == 0
    for start in range(0, len(values), 20):  # batches under max.message.bytes
        batch = build_batch([(b"k", v, int(time.time() * 1000), ()) for v in values[start:start + 20]])
        answer = client.call(m.ProduceRequest, acks=1, timeout_ms=10_000, topics=(
            m.ProduceTopic(name=topic, partitions=(m.ProducePartition(partition=0, records=batch),)),))
        assert answer["topics"][0]["partitions"][0]["error_code"] == 0
    fetched = client.call(m.FetchRequest, max_wait_ms=0, min_bytes=1, max_bytes=64 << 20, topics=(
        m.FetchTopic(name=topic, partitions=(m.FetchPartition(partition=0, fetch_offset=0,
                                                              partition_max_bytes=64 << 20),)),))
    records = fetched["topics"][0]["partitions"][0]["records"]
    return [record.value for batch in iter_batches(records) for record in batch.records]


def test_msgpack_listener_over_tls_produces_and_fetches_the_same_bytes(tmp_path, tls):
    broker = _broker(tmp_path, tls)
    try:
        client = MsgpackClient(broker.port, ssl_context=tls.client_context())
        # ~3 MiB of records: the fetch is read from the segment and sent through TLS in pieces
        values = [bytes([i % 251]) * 30_000 for i in range(100)]
        assert _produce_and_fetch(client, "over-tls", values) == values
        assert client.sock.version() in ("TLSv1.2", "TLSv1.3")
        client.close()
    finally:
        broker.stop()


def test_a_client_that_does_not_trust_the_broker_certificate_cannot_connect(tmp_path, tls):
    broker = _broker(tmp_path, tls)
    try:
        with pytest.raises(ssl.SSLCertVerificationError):
            MsgpackClient(broker.port, ssl_context=tls.client_context(ca=trustme.CA()))
        _wait_for(lambda: broker.sample("triolog_server_tls_handshake_failures_total") == 1)
        failed = [e for e in broker.events() if e.get("event") == "tls_handshake_failed"]
        assert failed and failed[0]["level"] == "warning" and failed[0]["reason"]
        # the broker is unharmed: a client trusting the right CA goes on
        MsgpackClient(broker.port, ssl_context=tls.client_context()).call(m.ApiVersionsRequest)
    finally:
        broker.stop()


def test_plaintext_to_a_tls_listener_is_closed_logged_and_counted(tmp_path, tls):
    broker = _broker(tmp_path, tls)
    try:
        with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as sock:
            payload = m.encode_request(m.ApiVersionsRequest(id=1))
            sock.sendall(struct.pack(">I", len(payload)) + payload)
            try:  # closed, nothing answered (the client could not read TLS); unread bytes make it a reset
                assert sock.recv(1) == b""
            except ConnectionResetError:
                pass
        _wait_for(lambda: broker.sample("triolog_server_wrong_protocol_connections_total", protocol="plaintext") == 1)
        warning = [e for e in broker.events() if e.get("event") == "wrong_protocol"]
        assert warning and warning[0]["protocol"] == "plaintext" and "security.protocol=SSL" in warning[0]["hint"]
    finally:
        broker.stop()


def test_required_client_auth_refuses_a_client_without_a_certificate(tmp_path, tls):
    broker = _broker(tmp_path, tls, "ssl.client.auth=required", f"ssl.truststore.location={tls.ca_pem}")
    try:
        with pytest.raises((ssl.SSLError, ConnectionError, EOFError)):
            # TLS 1.3: the refusal arrives after the client's side of the handshake completed
            MsgpackClient(broker.port, ssl_context=tls.client_context()).call(m.ApiVersionsRequest)
        _wait_for(lambda: broker.sample("triolog_server_tls_handshake_failures_total") == 1)
        client = MsgpackClient(broker.port, ssl_context=tls.client_context(with_certificate=True))
        assert client.call(m.ApiVersionsRequest)["error_code"] == 0
        client.close()
    finally:
        broker.stop()


def test_a_tls_listener_without_a_usable_keystore_stops_the_broker_naming_the_key(tmp_path, tls):
    broker = InProcessBroker(tmp_path / "data", security="SSL")
    with pytest.raises(RuntimeError, match="ssl.keystore.location"):
        broker.start()
    broker = InProcessBroker(tmp_path / "data2", security="SSL",
                           overrides=(f"ssl.keystore.location={tmp_path / 'missing.pem'}",))
    with pytest.raises(RuntimeError, match="missing.pem: no such file"):
        broker.start()


def test_an_encrypted_key_needs_its_password(tmp_path):
    files = make_tls_files(tmp_path / "tls", key_password=b"s3cret")
    broker = InProcessBroker(tmp_path / "data", security="SSL", overrides=(f"ssl.keystore.location={files.keystore}",
                                                                          "ssl.key.password=wrong"))
    with pytest.raises(RuntimeError, match="ssl.key.password"):
        broker.start()
    assert "wrong" not in broker.log_text().replace("is wrong", "")  # the password is never logged
    broker = InProcessBroker(tmp_path / "data2", security="SSL", metrics=True,
                           overrides=(f"ssl.keystore.location={files.keystore}", "ssl.key.password=s3cret"))
    broker.start()
    try:
        client = MsgpackClient(broker.port, ssl_context=files.client_context())
        assert client.call(m.ApiVersionsRequest)["error_code"] == 0
    finally:
        broker.stop()


def test_kafka_clients_produce_and_consume_over_tls(tmp_path, tls):
    confluent_kafka = pytest.importorskip("confluent_kafka")
    broker = _broker(tmp_path, tls, kafka=True, security="PLAINTEXT")
    try:
        settings = {"bootstrap.servers": f"127.0.0.1:{broker.kafka_port}", "security.protocol": "SSL",
                    "ssl.ca.location": str(tls.ca_pem), "ssl.endpoint.identification.algorithm": "none"}
        producer = confluent_kafka.Producer({**settings, "linger.ms": 5})
        for i in range(1000):
            producer.produce("kafka-tls", key=b"k%d" % i, value=b"v%d" % i)
        assert producer.flush(30) == 0
        consumer = confluent_kafka.Consumer({**settings, "group.id": "tls-group", "auto.offset.reset": "earliest"})
        consumer.subscribe(["kafka-tls"])
        values = []
        deadline = time.monotonic() + 30
        while len(values) < 1000 and time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is not None and message.error() is None:
                values.append(message.value())
        consumer.close()
        assert values == [b"v%d" % i for i in range(1000)]
    finally:
        broker.stop()


def _wait_for(condition, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if condition():
                return
        except KeyError:
            pass
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached")
        time.sleep(0.05)
