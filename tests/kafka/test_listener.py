"""The Kafka listener's answers to what no well-behaved client sends, each checked on the real
broker process: Kafka's answer (or Kafka's close, with a WARNING saying why), the broker healthy
afterwards, nothing appended."""

from __future__ import annotations

import socket
import struct

import msgpack

from kio.schema.api_versions.v0.request import ApiVersionsRequest as ApiVersionsV0
from kio.schema.api_versions.v3.request import ApiVersionsRequest as ApiVersionsV3
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic

from triolog.client.admin import AdminClient

from tests.waiting import wait_for

from .kafka_wire import connect, decode_response, encode_request, read_frame


def _api_versions(address: str, version: int = 3):
    with connect(address) as sock:
        body = (ApiVersionsV3(client_software_name="triolog-tests", client_software_version="1.0")
                if version >= 3 else ApiVersionsV0())
        sock.sendall(encode_request(18, version, 7, body))
        return decode_response(18, version, read_frame(sock))


def test_api_versions_lists_exactly_the_served_apis(bootstrap):
    correlation_id, body = _api_versions(bootstrap)
    assert correlation_id == 7 and body.error_code == 0
    served = {k.api_key: (k.min_version, k.max_version) for k in body.api_keys}
    # The data path and the producer id: the versions current clients negotiate.
    assert served[0] == (3, 11) and served[1] == (4, 12) and served[3] == (0, 12) and served[18] == (0, 4)
    assert served[22] == (0, 5) and served[2] == (1, 7)


def test_api_versions_of_an_unknown_version_answers_v0_with_the_served_versions(bootstrap):
    with connect(bootstrap) as sock:
        # v99 of ApiVersions: the header is v2's start, the body whatever; Kafka answers v0.
        payload = struct.pack(">hhih", 18, 99, 41, 4) + b"test" + b"\x00" + b"\x01\x01\x00"
        sock.sendall(struct.pack(">i", len(payload)) + payload)
        correlation_id, body = decode_response(18, 0, read_frame(sock))
        assert correlation_id == 41
        assert body.error_code == 35  # UNSUPPORTED_VERSION
        assert {k.api_key for k in body.api_keys} >= {0, 1, 3, 18}
        # The connection stays usable: the client asks again with a version it has.
        sock.sendall(encode_request(18, 0, 42, ApiVersionsV0()))
        assert decode_response(18, 0, read_frame(sock))[1].error_code == 0


def _closed(sock: socket.socket) -> bool:
    return read_frame(sock) is None


def _warnings(broker, event: str) -> list[dict]:
    return [e for e in broker.events() if e.get("event") == event]


def test_an_api_outside_the_table_closes_the_connection_with_a_reason(kafka_broker, bootstrap):
    with connect(bootstrap) as sock:
        # AlterPartitionReassignments (45) v0: not served (reassignment is ZooKeeper's, as Kafka's tool).
        payload = struct.pack(">hhih", 45, 0, 5, 4) + b"test" + b"\x00" * 16
        sock.sendall(struct.pack(">i", len(payload)) + payload)
        assert _closed(sock)
    wait_for(lambda: any(e.get("api_key") == 45 for e in _warnings(kafka_broker, "kafka_request_unsupported")),
             10, "the WARNING naming the API")
    assert _api_versions(bootstrap)[1].error_code == 0  # the listener still serves


def test_a_served_api_at_a_version_outside_its_range_closes_with_a_reason(kafka_broker, bootstrap):
    with connect(bootstrap) as sock:
        payload = struct.pack(">hhih", 1, 13, 6, 4) + b"test" + b"\x00" * 40  # Fetch v13: topic ids
        sock.sendall(struct.pack(">i", len(payload)) + payload)
        assert _closed(sock)
    wait_for(lambda: any(e.get("api_key") == 1 and e.get("api_version") == 13
                         for e in _warnings(kafka_broker, "kafka_request_unsupported")), 10, "the WARNING")


def test_a_truncated_request_closes_the_connection_and_appends_nothing(kafka_broker, bootstrap, msgpack_bootstrap, topic):
    good = encode_request(3, 12, 9, MetadataRequest(
        topics=(MetadataRequestTopic(topic_id=None, name=topic),), allow_auto_topic_creation=True,
        include_topic_authorized_operations=False))
    payload = good[4:-6]  # the body cut in the middle of the topic's name
    with connect(bootstrap) as sock:
        sock.sendall(struct.pack(">i", len(payload)) + payload)
        assert _closed(sock)
    wait_for(lambda: any(e.get("correlation_id") == 9 for e in _warnings(kafka_broker, "kafka_request_malformed")),
             10, "the WARNING with the reason")
    with AdminClient(msgpack_bootstrap) as admin:  # the topic was not created from half a request
        assert topic not in admin.list_topics()


def test_a_frame_over_socket_request_max_bytes_closes_with_a_reason(kafka_broker, bootstrap):
    with connect(bootstrap) as sock:
        sock.sendall(struct.pack(">i", 200 * 1024 * 1024) + b"\x00\x00")
        assert _closed(sock)
    wait_for(lambda: any(e.get("limit") == "socket.request.max.bytes"
                         for e in _warnings(kafka_broker, "frame_too_large")), 10, "the WARNING")


def test_a_triolog_client_on_the_kafka_port_is_told_where_to_go(kafka_broker, bootstrap):
    with connect(bootstrap) as sock:
        # What triolog's client sends first: a msgpack map, framed as Kafka frames are.
        payload = msgpack.packb({"api": "api_versions", "id": 1, "v": 1})
        sock.sendall(struct.pack(">i", len(payload)) + payload)
        assert _closed(sock)
    wait_for(lambda: any(e.get("protocol") == "msgpack" and "listeners" in e.get("hint", "")
                         for e in _warnings(kafka_broker, "wrong_protocol")), 10, "the wrong-protocol WARNING")


def test_a_kafka_client_on_the_msgpack_port_is_pointed_at_the_kafka_listener(kafka_broker, bootstrap, msgpack_bootstrap):
    with connect(msgpack_bootstrap) as sock:
        sock.sendall(encode_request(18, 0, 1, ApiVersionsV0()))
        assert _closed(sock)
    wait_for(lambda: any(e.get("protocol") == "kafka" and bootstrap in e.get("hint", "")
                         for e in _warnings(kafka_broker, "wrong_protocol")), 10, "the hint naming the Kafka port")


def test_an_http_client_on_the_kafka_port_is_told_this_is_the_kafka_listener(kafka_broker, bootstrap):
    with connect(bootstrap) as sock:
        sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        assert _closed(sock)
    with connect(bootstrap) as sock:
        sock.sendall(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 64)  # a TLS ClientHello
        assert _closed(sock)

    def hints():
        return {e.get("protocol"): e.get("hint", "") for e in kafka_broker.events() if e.get("event") == "wrong_protocol"
                and e.get("peer", "").startswith("127.0.0.1") and e.get("protocol") in ("http", "tls")}

    wait_for(lambda: len(hints()) == 2, 10, "both wrong-protocol WARNINGs")
    for hint in hints().values():
        assert "Kafka-protocol listener" in hint and "msgpack" not in hint
    assert "not HTTP" in hints()["http"] and "not TLS" in hints()["tls"]
