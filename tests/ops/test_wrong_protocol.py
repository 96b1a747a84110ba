"""A client speaking another protocol to the msgpack listener (a Kafka client, curl, a TLS client)
is recognised from its first bytes: logged as such with what to do instead (at WARNING once per
peer host and protocol in ten minutes, at DEBUG in between), counted by protocol (every
connection) and not as a bad request, disconnected, and the broker serves everyone else as before.

The Kafka requests are real clients' bytes: kafka-python's own encoder and a live kafka-python
consumer, and an ApiVersions v3 request in the layout librdkafka sends (request header v2, KIP-511
client software name and version)."""

from __future__ import annotations

import http.client
import socket
import ssl
import struct
import urllib.request

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st
from kafka import KafkaConsumer
from kafka.errors import KafkaError
from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest
from kafka.protocol.parser import KafkaProtocol

from triolog.broker.server.wrong_protocol import WrongProtocolLog, wrong_protocol_hints
from triolog.client import AdminClient, NewTopic, Producer
from triolog.config.broker_config import Endpoint
from triolog.protocol import messages as m
from triolog.protocol.errors import ErrorCode
from triolog.protocol.frames import KafkaRequestHeader, foreign_protocol_of_prefix, kafka_request_header
from tests.e2e.broker_process import InProcessBroker
from tests.server.inprocess import running_broker
from tests.waiting import wait_for

#: ApiVersions v3 as librdkafka sends it first on every connection: size, api_key 18, version 3,
#: correlation id 1, client id "rdkafka" (int16 length), empty tagged fields, then the body's
#: compact strings client_software_name "librdkafka" and client_software_version "2.3.0".
LIBRDKAFKA_API_VERSIONS = (b"\x00\x00\x00\x24" b"\x00\x12\x00\x03\x00\x00\x00\x01\x00\x07rdkafka\x00"
                           b"\x0blibrdkafka\x062.3.0\x00")


def _kafka_python_bytes(*requests) -> list[bytes]:
    protocol = KafkaProtocol(client_id="kafka-python-test")
    out = []
    for request in requests:
        protocol.send_request(request)
        out.append(bytes(protocol.send_bytes()))
    return out


# -- sans-IO recognition -----------------------------------------------------------------------


def test_kafka_request_headers_of_real_clients_are_recognised():
    api_versions, metadata = _kafka_python_bytes(ApiVersionsRequest(version=4, client_software_name="kafka-python",
                                                                    client_software_version="3"),
                                                 MetadataRequest(version=12, topics=None))
    assert kafka_request_header(api_versions[4:]) == KafkaRequestHeader(18, 4, 1, "kafka-python-test")
    assert kafka_request_header(metadata[4:]) == KafkaRequestHeader(3, 12, 2, "kafka-python-test")
    assert struct.unpack(">I", LIBRDKAFKA_API_VERSIONS[:4])[0] == len(LIBRDKAFKA_API_VERSIONS) - 4
    assert kafka_request_header(LIBRDKAFKA_API_VERSIONS[4:]) == KafkaRequestHeader(18, 3, 1, "rdkafka")


@given(st.integers(0, 255), st.integers(0, 32767), st.integers(-2**31, 2**31 - 1),
       st.one_of(st.none(), st.text(max_size=40)), st.binary(max_size=64))
def test_any_kafka_request_header_is_recognised(api_key, version, correlation_id, client_id, body):
    encoded = None if client_id is None else client_id.encode()
    header = struct.pack(">hhih", api_key, version, correlation_id, -1 if encoded is None else len(encoded))
    frame = header + (encoded or b"") + body
    assert kafka_request_header(frame) == KafkaRequestHeader(api_key, version, correlation_id, client_id)


@given(st.dictionaries(st.text(max_size=8), st.one_of(st.integers(-2**63, 2**64 - 1), st.binary(max_size=16), st.text(max_size=8)),
                       max_size=20))
def test_no_msgpack_map_is_taken_for_a_kafka_request(doc):
    assert kafka_request_header(msgpack.packb(doc, use_bin_type=True)) is None


def test_every_triolog_request_is_a_msgpack_map_not_a_kafka_request():
    for request in (m.ApiVersionsRequest(id=0), m.MetadataRequest(id=2**31 - 1, topics=("a",)),
                    m.DeleteTopicsRequest(id=1, topics=("x" * 300,))):
        assert kafka_request_header(m.encode_request(request)) is None


def test_http_and_tls_prefixes_are_recognised_and_nothing_else():
    for line in (b"GET /metrics HTTP/1.1\r\n", b"POST / HTTP/1.1\r\n", b"HEAD / HTTP/1.0\r\n", b"PUT /x HTTP/1.1"):
        assert foreign_protocol_of_prefix(struct.unpack(">I", line[:4])[0]) == "http", line
    for version in (b"\x16\x03\x01", b"\x16\x03\x03"):  # TLS 1.0 record layer (ClientHello), 1.2
        assert foreign_protocol_of_prefix(struct.unpack(">I", version + b"\x02")[0]) == "tls"
    for length in (0, 1, 4096, 104_857_601, 2**32 - 1, 0x16050000):
        assert foreign_protocol_of_prefix(length) is None


# -- the real broker ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    # DEBUG: the repeated connections of a peer are logged at that level.
    process = InProcessBroker(tmp_path_factory.mktemp("wrong-protocol") / "data", ("logger.level=DEBUG",),
                            metrics=True).start()
    try:
        yield process
    finally:
        process.stop()


def _wrong_protocol_events(broker: InProcessBroker, protocol: str) -> list[dict]:
    return [e for e in broker.events() if e.get("event") == "wrong_protocol" and e.get("protocol") == protocol]


def _hints(broker: InProcessBroker) -> dict[str, str]:
    """The hints this broker gives: its metrics listener is http://127.0.0.1:0, bound to metrics_port."""
    return wrong_protocol_hints(Endpoint("http", "127.0.0.1", 0), broker.metrics_port)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        assert chunk, f"closed after {len(data)} of {n} bytes"
        data += chunk
    return data


def _closed_by_broker(sock: socket.socket) -> bool:
    sock.settimeout(10)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def _still_serves(broker: InProcessBroker, topic: str) -> None:
    bootstrap = f"127.0.0.1:{broker.port}"
    with AdminClient(bootstrap) as admin:
        admin.create_topics([NewTopic(topic, 1)])
    with Producer(bootstrap) as producer:
        producer.send(topic, b"still here").get(10)


def _unknown_requests(broker: InProcessBroker) -> float:
    """Requests counted as api=unknown (frames that are no readable request), whatever the error."""
    from prometheus_client.parser import text_string_to_metric_families

    return sum(s.value for family in text_string_to_metric_families(broker.scrape()) for s in family.samples
               if s.name == "triolog_server_requests_total" and s.labels["api"] == "unknown")


def _count(broker: InProcessBroker, protocol: str) -> float:
    return broker.sample("triolog_server_wrong_protocol_connections_total", protocol=protocol)


@pytest.mark.parametrize("client", ["kafka-python", "librdkafka"])
def test_kafka_request_bytes_are_recognised_logged_and_disconnected(broker, client):
    payload = _kafka_python_bytes(ApiVersionsRequest(version=4, client_software_name="kafka-python",
                                                     client_software_version="3"))[0] \
        if client == "kafka-python" else LIBRDKAFKA_API_VERSIONS
    before_events = len(_wrong_protocol_events(broker, "kafka"))
    before = _count(broker, "kafka")
    unknown_before = _unknown_requests(broker)
    with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as sock:
        sock.sendall(payload)
        assert _closed_by_broker(sock)
    wait_for(lambda: len(_wrong_protocol_events(broker, "kafka")) == before_events + 1, 10, "the wrong_protocol event")
    event = _wrong_protocol_events(broker, "kafka")[-1]
    assert event["level"] in ("warning", "debug") and event["hint"] == _hints(broker)["kafka"]
    assert "not Kafka's" in event["hint"] and "triolog.client" in event["hint"]
    assert event["kafka_api_key"] == 18
    assert event["kafka_client_id"] == ("kafka-python-test" if client == "kafka-python" else "rdkafka")
    wait_for(lambda: _count(broker, "kafka") == before + 1, 10, "the kafka connection counted")
    # Not a generic bad request.
    assert _unknown_requests(broker) == unknown_before
    _still_serves(broker, f"after-{client}")


def test_a_live_kafka_python_consumer_is_told_which_protocol_this_is(broker):
    before = _count(broker, "kafka")
    with pytest.raises(KafkaError):
        KafkaConsumer(bootstrap_servers=f"127.0.0.1:{broker.port}", bootstrap_timeout_ms=2000,
                      request_timeout_ms=2000, client_id="live-consumer")
    events = [e for e in _wrong_protocol_events(broker, "kafka") if e.get("kafka_client_id") == "live-consumer"]
    assert events and all(e["kafka_api_key"] == 18 for e in events)  # ApiVersions, its first request
    assert _count(broker, "kafka") >= before + 1
    assert not [e for e in broker.events() if e.get("level") == "error"]
    _still_serves(broker, "after-live-consumer")


def test_an_http_client_is_refused_with_a_hint_where_metrics_are(broker):
    before = _count(broker, "http")
    closes_before = broker.sample("triolog_server_connections_closed_total", limit="socket.request.max.bytes")
    with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as sock:
        sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nAccept: */*\r\n\r\n")
        # The refusal any oversized length prefix gets (INVALID_REQUEST, id nil), saying why.
        length = struct.unpack(">I", _recv_exact(sock, 4))[0]
        doc = msgpack.unpackb(_recv_exact(sock, length), raw=False)
        assert _closed_by_broker(sock)
    assert doc["error_code"] == ErrorCode.INVALID_REQUEST and doc["id"] is None
    assert "socket.request.max.bytes" in doc["error_message"]
    # Where this broker's metrics really are: the port its metrics listener bound.
    assert doc["error_message"].endswith(f"served at http://127.0.0.1:{broker.metrics_port}/metrics "
                                         "(metrics.listener=http://127.0.0.1:0)")
    assert doc["error_message"].endswith(_hints(broker)["http"])
    wait_for(lambda: _count(broker, "http") == before + 1, 10, "the http connection counted")
    assert _wrong_protocol_events(broker, "http")[-1]["hint"] == _hints(broker)["http"]
    # Counted as a wrong protocol, not as an oversized frame.
    assert broker.sample("triolog_server_connections_closed_total", limit="socket.request.max.bytes") == closes_before
    with pytest.raises(http.client.BadStatusLine):  # what an HTTP client makes of the answer
        urllib.request.urlopen(f"http://127.0.0.1:{broker.port}/metrics", timeout=10)
    wait_for(lambda: _count(broker, "http") == before + 2, 10, "urllib's connection counted")
    _still_serves(broker, "after-http")


def test_a_tls_client_is_recognised_and_disconnected(broker):
    before = _count(broker, "tls")
    closes_before = broker.sample("triolog_server_connections_closed_total", limit="socket.request.max.bytes")
    context = ssl.create_default_context()
    with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as sock:
        with pytest.raises((ssl.SSLError, ConnectionError)):
            context.wrap_socket(sock, server_hostname="localhost")
    wait_for(lambda: _count(broker, "tls") == before + 1, 10, "the tls connection counted")
    assert _wrong_protocol_events(broker, "tls")[-1]["hint"] == _hints(broker)["tls"]
    # Not counted as an oversized frame either.
    assert broker.sample("triolog_server_connections_closed_total", limit="socket.request.max.bytes") == closes_before
    _still_serves(broker, "after-tls")


def _speak_kafka(broker: InProcessBroker) -> None:
    with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as sock:
        sock.sendall(LIBRDKAFKA_API_VERSIONS)
        assert _closed_by_broker(sock)


def _speak_http(broker: InProcessBroker) -> None:
    with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
        length = struct.unpack(">I", _recv_exact(sock, 4))[0]
        _recv_exact(sock, length)
        assert _closed_by_broker(sock)


def test_a_reconnecting_client_is_warned_about_once_and_counted_every_time(broker):
    """A Kafka client retries its bootstrap every few hundred ms: one WARNING per peer host and
    protocol (within ten minutes, longer than this module runs), the others at DEBUG, and the
    counter counts every connection (also those of the other tests on this broker)."""
    kafka_before, http_before = _count(broker, "kafka"), _count(broker, "http")
    for _ in range(4):
        _speak_kafka(broker)
    for _ in range(3):
        _speak_http(broker)
    wait_for(lambda: _count(broker, "kafka") == kafka_before + 4 and _count(broker, "http") == http_before + 3,
             10, "every connection counted")
    for protocol in ("kafka", "http"):
        wait_for(lambda: len(_wrong_protocol_events(broker, protocol)) == _count(broker, protocol), 10,
                 f"one {protocol} event per connection")
        events = _wrong_protocol_events(broker, protocol)
        warnings = [e for e in events if e["level"] == "warning"]
        assert len(warnings) == 1, warnings
        assert warnings[0]["peer"].startswith("127.0.0.1:") and "DEBUG" in warnings[0]["repeats"]
        assert {e["level"] for e in events} == {"warning", "debug"}
        assert all(e["hint"] == _hints(broker)[protocol] for e in events)
    assert not [e for e in broker.events() if e.get("level") == "error"]


def test_wrong_protocol_warnings_are_per_host_and_protocol_expire_and_stay_bounded():
    now = [1000.0]
    log = WrongProtocolLog(wrong_protocol_hints(None), clock=lambda: now[0], interval_s=600, max_peers=3)
    assert log.log("10.0.0.1", "kafka") == "warning"
    assert log.log("10.0.0.1", "kafka") == "debug"
    assert log.log("10.0.0.1", "http") == "warning"  # another protocol of the same host
    assert log.log("10.0.0.2", "kafka") == "warning"  # another host
    now[0] += 599
    assert log.log("10.0.0.1", "kafka") == "debug"
    now[0] += 1  # ten minutes after its warning
    assert log.log("10.0.0.1", "kafka") == "warning"
    assert log.log("10.0.0.1", "kafka") == "debug"
    assert len(log) == 1  # the other two expired
    # A scan from many addresses: the state stays bounded, the oldest forgotten first.
    for i in range(100):
        assert log.log(f"192.0.2.{i}", "tls") == "warning"
    assert len(log) == 3
    assert log.log("192.0.2.99", "tls") == "debug"
    assert log.log("192.0.2.0", "tls") == "warning"


def test_the_http_hint_says_where_metrics_are_served_or_that_they_are_off():
    assert "http://127.0.0.1:9404/metrics (metrics.listener=http://127.0.0.1:9404)" in \
        wrong_protocol_hints(Endpoint("http", "127.0.0.1", 9404))["http"]
    assert "http://127.0.0.1:40001/metrics (metrics.listener=http://127.0.0.1:0)" in \
        wrong_protocol_hints(Endpoint("http", "127.0.0.1", 0), 40001)["http"]
    assert "http://[::1]:9404/metrics" in wrong_protocol_hints(Endpoint("http", "::1", 9404))["http"]
    assert "http://<any address of this host>:9404/metrics (metrics.listener=http://0.0.0.0:9404)" in \
        wrong_protocol_hints(Endpoint("http", "0.0.0.0", 9404))["http"]
    off = wrong_protocol_hints(None)["http"]
    assert "metrics are disabled (metrics.listener is empty)" in off and "http://" not in off


async def test_an_http_client_of_a_broker_without_metrics_is_told_they_are_disabled(tmp_path):
    import trio

    async with running_broker(tmp_path / "data") as (server, port):  # metrics.listener=""
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            await stream.send_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n")
            received = b""
            while chunk := await stream.receive_some(65536):
                received += chunk
        length = struct.unpack(">I", received[:4])[0]
        doc = msgpack.unpackb(received[4:4 + length], raw=False)
        assert doc["error_code"] == ErrorCode.INVALID_REQUEST
        assert doc["error_message"].endswith(wrong_protocol_hints(None)["http"])
        assert "Prometheus metrics are disabled (metrics.listener is empty)" in doc["error_message"]
