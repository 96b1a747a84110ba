"""Bad input against the real broker (in this process): each case asserts the exact error, that the same
connection still works when docs/protocol.md says it should, that another connection always works, and
that acknowledged data is intact (checked after every test by an autouse fixture).

One broker serves the module (socket.request.max.bytes lowered so the frame limit can be tested
to the byte); tests that need other settings start their own.
"""

from __future__ import annotations

import os
import socket
import struct
import time
from pathlib import Path

import msgpack
import pytest

from triolog.protocol.messages import SUPPORTED_APIS
from triolog.protocol.record_batch import compute_crc
from triolog.protocol.records import build_batch, iter_batches

from tests.waiting import wait_for

from .broker_process import InProcessBroker, WireClient

NONE = 0
OFFSET_OUT_OF_RANGE = 1
CORRUPT_MESSAGE = 2
UNKNOWN_TOPIC_OR_PARTITION = 3
INVALID_TOPIC_EXCEPTION = 17
INVALID_TIMESTAMP = 32
UNSUPPORTED_VERSION = 35
INVALID_REQUEST = 42
UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
INVALID_RECORD = 87

MAX_FRAME = 65536
SENTINEL_TOPIC = "sentinel"
SENTINEL_VALUES = [b"acked-%d" % i for i in range(5)]


# -- helpers ---------------------------------------------------------------------------------


def pack(doc) -> bytes:
    return msgpack.packb(doc, use_bin_type=True)


def frame(payload: bytes) -> bytes:
    return struct.pack(">I", len(payload)) + payload


def send_doc(client: WireClient, doc) -> dict:
    client.send_frame(pack(doc))
    return client.recv_doc()


def call(client: WireClient, api: str, **fields) -> dict:
    rid = client.next_id()
    doc = send_doc(client, {"api": api, "v": 1, "id": rid, **fields})
    assert doc["id"] == rid
    return doc


def assert_usable(client: WireClient) -> None:
    """The connection still answers requests."""
    doc = call(client, "api_versions")
    assert doc["error_code"] == NONE and len(doc["apis"]) == len(SUPPORTED_APIS)


def assert_refused(doc: dict, code: int, request_id, *mentions: str) -> None:
    assert doc["error_code"] == code, doc
    assert doc["id"] == request_id
    assert isinstance(doc["error_message"], str)
    for text in mentions:
        assert text in doc["error_message"], (text, doc["error_message"])


def now_ms() -> int:
    return int(time.time() * 1000)


def batch(*values: bytes, timestamp: int | None = None) -> bytes:
    ts = now_ms() if timestamp is None else timestamp
    return build_batch([(b"k", v, ts, ()) for v in values])


def produce_part(client, topic, partition, records, acks=1) -> dict:
    doc = call(client, "produce", acks=acks, timeout_ms=5000,
               topics=[{"name": topic, "partitions": [{"partition": partition, "records": records}]}])
    assert doc["error_code"] == NONE, doc
    return doc["topics"][0]["partitions"][0]


def fetch_part(client, topic, partition, offset, max_wait_ms=0) -> dict:
    doc = call(client, "fetch", max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=1 << 20, topics=[
        {"name": topic, "partitions": [{"partition": partition, "fetch_offset": offset,
                                        "partition_max_bytes": 1 << 20}]}])
    assert doc["error_code"] == NONE, doc
    return doc["topics"][0]["partitions"][0]


def values_of(records: bytes) -> list[bytes]:
    return [r.value for b in iter_batches(records) for r in b.records]


def create(client, name, partitions=1, configs=None) -> dict:
    doc = call(client, "create_topics", topics=[
        {"name": name, "num_partitions": partitions, "replication_factor": 1, "configs": configs or {}}])
    assert doc["error_code"] == NONE
    return doc["topics"][0]


def high_watermark(client, topic, partition=0) -> int:
    return fetch_part(client, topic, partition, 0)["high_watermark"]


def tree(root: Path) -> set[str]:
    """Every path under ``root`` but checkpoints being replaced (``*.tmp``) and the broker's own log."""
    return {str(p.relative_to(root)) for p in root.rglob("*") if not p.name.endswith((".tmp", "-broker.log"))}


def server_errors(broker: InProcessBroker) -> list[dict]:
    return [e for e in broker.events() if e.get("level") in ("error", "critical")]


# -- fixtures --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    broker = InProcessBroker(tmp_path_factory.mktemp("bad-input") / "data",
                             (f"socket.request.max.bytes={MAX_FRAME}",)).start()
    client = broker.client()
    assert create(client, SENTINEL_TOPIC)["error_code"] == NONE
    for value in SENTINEL_VALUES:
        assert produce_part(client, SENTINEL_TOPIC, 0, batch(value), acks=-1)["error_code"] == NONE
    client.close()
    yield broker
    alive = broker.running
    code = broker.stop()
    assert alive, "the broker died on bad input"
    assert code == 0


@pytest.fixture(autouse=True)
def still_serving(server):
    """After every test: the broker is up, a fresh connection works, acknowledged data is intact,
    and nothing was logged as an unexpected server error."""
    before = len(server_errors(server))
    yield
    assert server.running, "the broker's thread ended"
    other = server.client()
    assert_usable(other)
    sentinel = fetch_part(other, SENTINEL_TOPIC, 0, 0)
    assert sentinel["error_code"] == NONE and values_of(sentinel["records"]) == SENTINEL_VALUES
    other.close()
    assert server_errors(server)[before:] == []


@pytest.fixture
def client(server):
    c = server.client()
    yield c
    c.close()


# == whole frames that are not requests ======================================================


def test_request_empty_frame_is_invalid_request(client):
    client.send_frame(b"")
    assert_refused(client.recv_doc(), INVALID_REQUEST, None, "empty frame")
    assert_usable(client)


@pytest.mark.parametrize("payload", [
    b"\xc1",                                         # the one byte msgpack never uses
    b"\xff\xfe\xfd\xfc",                             # four negative fixints: extra data after the first
    b"\x82\xa3api",                                  # a map cut off in its first key's value
    pack({"api": "api_versions", "v": 1, "id": 5}) + b"\x00",  # a valid request plus trailing bytes
    b"\x81\xa2id\xa3\xff\xfe\xfd",                   # a str that is not UTF-8
    b"\x91" * 5000 + b"\xc0",                        # nesting deeper than the unpacker allows
    b"\xdd\xff\xff\xff\xff",                         # an array announcing 4 billion items
    b"\x81\x81\xa1a\x01\x02",                        # a map used as a map key
    os.urandom(512),
], ids=["never-used", "extra-data", "truncated-map", "trailing-bytes", "bad-utf8", "deep-nesting",
        "huge-array", "map-key", "random"])
def test_request_garbage_bytes_are_invalid_request(client, payload):
    client.send_frame(payload)
    doc = client.recv_doc()
    assert doc["error_code"] == INVALID_REQUEST and doc["id"] is None, doc
    assert doc["error_message"]
    assert_usable(client)


@pytest.mark.parametrize("document, kind", [
    ([1, 2, 3], "array"), (7, "int"), ("api_versions", "str"), (None, "nil"), (b"\x00\x01", "bin"),
    (True, "bool"), (1.5, "float"), ([{"api": "api_versions", "v": 1, "id": 1}], "array"),
])
def test_request_non_map_document_is_invalid_request(client, document, kind):
    client.send_frame(pack(document))
    assert_refused(client.recv_doc(), INVALID_REQUEST, None, "must be a map", kind)
    assert_usable(client)


# == the envelope ============================================================================


@pytest.mark.parametrize("api, mentions", [
    ("steal_data", "steal_data"), ("", "api"), ("Metadata", "Metadata"), (5, "'api' must be a str"),
    (None, "'api' is missing"), (b"metadata", "'api' must be a str"),
])
def test_request_unknown_or_mistyped_api_is_invalid_request_with_id_echoed(client, api, mentions):
    doc = send_doc(client, {"api": api, "v": 1, "id": 77})
    assert_refused(doc, INVALID_REQUEST, 77, mentions)
    assert_usable(client)


def test_request_without_api_key_is_invalid_request(client):
    assert_refused(send_doc(client, {"v": 1, "id": 78}), INVALID_REQUEST, 78, "'api' is missing")


@pytest.mark.parametrize("api", ["api_versions", "metadata", "produce", "fetch", "delete_records"])
@pytest.mark.parametrize("version", [0, 2, -1, 2**40])
def test_request_unsupported_version_is_unsupported_version_with_id_echoed(client, api, version):
    doc = send_doc(client, {"api": api, "v": version, "id": 31})
    assert_refused(doc, UNSUPPORTED_VERSION, 31, api, str(version))
    if api != "api_versions":
        assert doc["topics"] == []  # the API's fields are there, empty, for clients that read them
    assert_usable(client)


@pytest.mark.parametrize("version, mentions", [
    ("1", "'v' must be an int, got str"), (True, "'v' must be an int, got bool"), (1.0, "'v' must be an int"),
    (None, "'v' is missing"),
])
def test_request_mistyped_version_is_invalid_request(client, version, mentions):
    doc = send_doc(client, {"api": "metadata", "v": version, "id": 32, "topics": []})
    assert_refused(doc, INVALID_REQUEST, 32, mentions)
    assert_usable(client)


@pytest.mark.parametrize("request_id, mentions", [
    (-1, "'id'"), (2**31, "'id'"), (2**64 - 1, "'id'"), (-(2**63), "'id'"), ("7", "'id' must be an int"),
    (1.5, "'id' must be an int"), (True, "'id' must be an int"), (None, "'id'"),
])
def test_request_id_out_of_range_or_mistyped_is_invalid_request_with_nil_id(client, request_id, mentions):
    doc = send_doc(client, {"api": "api_versions", "v": 1, "id": request_id})
    assert_refused(doc, INVALID_REQUEST, None, mentions)
    assert_usable(client)


@pytest.mark.parametrize("request_id", [0, 2**31 - 1])
def test_request_id_at_the_bounds_is_echoed(client, request_id):
    doc = send_doc(client, {"api": "api_versions", "v": 1, "id": request_id})
    assert doc["error_code"] == NONE and doc["id"] == request_id


def test_request_mistyped_client_id_is_invalid_request(client):
    doc = send_doc(client, {"api": "api_versions", "v": 1, "id": 9, "client_id": 12})
    assert_refused(doc, INVALID_REQUEST, 9, "client_id")


def test_request_unknown_keys_are_ignored_at_every_level(client):
    doc = call(client, "create_topics", future=1, topics=[
        {"name": "bi-extra", "num_partitions": 1, "replication_factor": 1, "configs": {}, "later": [1, {"x": b""}]}])
    assert doc["error_code"] == NONE and doc["topics"][0]["error_code"] == NONE
    doc = call(client, "produce", acks=1, timeout_ms=1000, extra={"deep": [None]}, topics=[
        {"name": "bi-extra", "extra": 1, "partitions": [{"partition": 0, "records": batch(b"v"), "extra": "x"}]}])
    assert doc["topics"][0]["partitions"][0]["error_code"] == NONE


# == fields: missing, nil, mistyped, out of range ============================================

PRODUCE_OK = {"acks": 1, "timeout_ms": 1000,
              "topics": [{"name": "bi-fields", "partitions": [{"partition": 0, "records": b"x"}]}]}
FETCH_OK = {"max_wait_ms": 0, "min_bytes": 1, "max_bytes": 100,
            "topics": [{"name": "bi-fields", "partitions": [
                {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 100}]}]}


def _with(base: dict, path: str, value, *, drop: bool = False) -> dict:
    """A deep copy of ``base`` with the field at dotted ``path`` (list items as numbers) replaced or dropped."""
    doc = msgpack.unpackb(pack(base), raw=False)
    *parents, last = path.split(".")
    target = doc
    for part in parents:
        target = target[int(part)] if part.isdigit() else target[part]
    if drop:
        del target[last]
    else:
        target[int(last) if last.isdigit() else last] = value
    return doc


FIELD_CASES = [
    # (api, fields, text the message must contain)
    ("metadata", {"topics": "bi-fields"}, "field 'topics' must be an array, got str"),
    ("metadata", {"topics": [1]}, "field 'topics[0]' must be a str, got int"),
    ("metadata", {"topics": ["a", "a"]}, "repeats"),
    ("create_topics", {}, "field 'topics' is missing"),
    ("create_topics", {"topics": None}, "field 'topics' is required, got nil"),
    ("create_topics", {"topics": [{"name": "x", "num_partitions": "3", "replication_factor": 1}]},
     "field 'topics[0].num_partitions' must be an int, got str"),
    ("create_topics", {"topics": [{"name": "x", "num_partitions": 2**31, "replication_factor": 1}]},
     "topics[0].num_partitions"),
    ("create_topics", {"topics": [{"name": "x", "num_partitions": 1, "replication_factor": 2**15}]},
     "topics[0].replication_factor"),
    ("create_topics", {"topics": [{"name": "x", "num_partitions": 1}]},
     "field 'topics[0].replication_factor' is missing"),
    ("create_topics", {"topics": [{"name": "x", "num_partitions": 1, "replication_factor": 1,
                                   "configs": {"retention.ms": 1000}}]}, "topics[0].configs['retention.ms']"),
    ("create_topics", {"topics": [{"name": 5, "num_partitions": 1, "replication_factor": 1}]},
     "field 'topics[0].name' must be a str"),
    ("create_topics", {"validate_only": 1, "topics": []}, "field 'validate_only' must be a bool"),
    ("create_topics", {"topics": {"name": "x"}}, "field 'topics' must be an array, got map"),
    ("delete_topics", {"topics": [None]}, "topics[0]"),
    ("describe_configs", {"topics": "x"}, "field 'topics' must be an array, got str"),
    ("describe_configs", {"brokers": [0]}, "field 'brokers[0]' must be a str, got int"),
    ("alter_configs", {"topics": [{"name": "x", "configs": {}, "replace": "yes"}]},
     "field 'topics[0].replace' must be a bool"),
    ("create_partitions", {}, "field 'topics' is missing"),
    ("create_partitions", {"topics": [{"name": "x"}]}, "field 'topics[0].count' is missing"),
    ("create_partitions", {"topics": [{"name": "x", "count": 2}], "timeout_ms": -1}, "timeout_ms"),
    ("alter_configs", {"topics": [{"name": "x"}]}, "field 'topics[0].configs' is missing"),
    ("alter_configs", {"topics": [{"name": "x", "configs": {}, "delete": "retention.ms"}]},
     "field 'topics[0].delete' must be an array"),
    ("produce", _with(PRODUCE_OK, "acks", None, drop=True), "field 'acks' is missing"),
    ("produce", _with(PRODUCE_OK, "acks", 2), "field 'acks' must be one of 0, 1, -1, got 2"),
    ("produce", _with(PRODUCE_OK, "acks", "all"), "field 'acks' must be an int"),
    ("produce", _with(PRODUCE_OK, "timeout_ms", -1), "timeout_ms"),
    ("produce", _with(PRODUCE_OK, "topics.0.partitions.0.records", "text"),
     "field 'topics[0].partitions[0].records' must be a bin, got str"),
    ("produce", _with(PRODUCE_OK, "topics.0.partitions.0.partition", 2**31), "topics[0].partitions[0].partition"),
    ("produce", _with(PRODUCE_OK, "topics.0.partitions.0.partition", "0"), "topics[0].partitions[0].partition"),
    ("produce", _with(PRODUCE_OK, "topics.0.partitions", None), "topics[0].partitions"),
    ("produce", {**PRODUCE_OK, "topics": PRODUCE_OK["topics"] * 2}, "repeats"),
    ("fetch", _with(FETCH_OK, "max_wait_ms", -1), "max_wait_ms"),
    ("fetch", _with(FETCH_OK, "min_bytes", "1"), "min_bytes"),
    ("fetch", _with(FETCH_OK, "max_bytes", None, drop=True), "field 'max_bytes' is missing"),
    ("fetch", _with(FETCH_OK, "isolation_level", 2), "isolation_level"),
    ("fetch", _with(FETCH_OK, "topics.0.partitions.0.partition_max_bytes", -5), "partition_max_bytes"),
    ("fetch", _with(FETCH_OK, "topics.0.partitions.0.fetch_offset", 2**63), "fetch_offset"),
    ("fetch", _with(FETCH_OK, "topics.0.partitions.0.fetch_offset", 1.0), "fetch_offset"),
    ("fetch", _with(FETCH_OK, "topics.0.partitions", FETCH_OK["topics"][0]["partitions"] * 2), "repeats"),
    ("list_offsets", {"topics": [{"name": "x", "partitions": [{"partition": 0, "timestamp": -4}]}]},
     "topics[0].partitions[0].timestamp"),
    ("list_offsets", {"topics": [{"name": "x", "partitions": [{"partition": 0}]}]},
     "field 'topics[0].partitions[0].timestamp' is missing"),
    ("delete_records", {"topics": [{"name": "x", "partitions": [{"partition": 0, "offset": "0"}]}]},
     "topics[0].partitions[0].offset"),
    ("delete_records", {"topics": [{"name": "x", "partitions": [{"partition": 0, "offset": 2**64 - 1}]}]},
     "topics[0].partitions[0].offset"),
]


@pytest.mark.parametrize("api, fields, mentions", FIELD_CASES,
                         ids=[f"{api}-{i}" for i, (api, _, _) in enumerate(FIELD_CASES)])
def test_request_missing_or_mistyped_field_is_invalid_request_naming_it(client, server, api, fields, mentions):
    before = tree(server.data_dir)
    doc = send_doc(client, {"api": api, "v": 1, "id": 4242, **fields})
    assert_refused(doc, INVALID_REQUEST, 4242, mentions)
    if api != "api_versions":
        assert doc["topics"] == []
    assert tree(server.data_dir) == before  # a refused request creates nothing
    assert_usable(client)


# == frames ==================================================================================


def test_frame_over_socket_request_max_bytes_is_refused_and_closed_without_reading_the_body(client):
    client.send_raw(struct.pack(">I", MAX_FRAME + 1))  # the body never comes
    start = time.monotonic()
    doc = client.recv_doc()
    assert time.monotonic() - start < 2  # answered without waiting for the body
    assert_refused(doc, INVALID_REQUEST, None, str(MAX_FRAME + 1), "socket.request.max.bytes")
    assert client.is_closed()


def test_frame_of_exactly_socket_request_max_bytes_is_accepted(client):
    base = {"api": "api_versions", "v": 1, "id": 12, "pad": b""}
    overhead = len(pack(base))
    pad = MAX_FRAME - overhead - 1  # the pad's bin header grows from 2 to 3 bytes past 255 bytes
    payload = pack({**base, "pad": b"p" * pad})
    assert len(payload) == MAX_FRAME
    client.send_frame(payload)
    doc = client.recv_doc()
    assert doc["id"] == 12 and doc["error_code"] == NONE
    assert_usable(client)


def test_request_holding_more_objects_than_its_api_may_is_refused_and_the_connection_stays(client):
    # api_versions names no topic or partition: a few hundred objects is already a bomb
    doc = send_doc(client, {"api": "api_versions", "v": 1, "id": 31, "pad": [{}] * 20_000})
    assert_refused(doc, INVALID_REQUEST, 31, "msgpack objects", "api_versions requests may hold at most 256")
    assert_usable(client)


def test_request_with_a_string_longer_than_kafka_allows_is_refused(client):
    doc = send_doc(client, {"api": "metadata", "v": 1, "id": 32, "topics": ["t" * 40_000]})
    assert_refused(doc, INVALID_REQUEST, 32, "str of 40000 bytes", "32767")
    assert_usable(client)


def test_frame_http_request_is_refused_and_closed(client):
    client.send_raw(b"GET / HTTP/1.1\r\nHost: broker\r\n\r\n")
    assert_refused(client.recv_doc(), INVALID_REQUEST, None, "socket.request.max.bytes")
    assert client.is_closed()


def test_frame_oversized_with_its_body_closes_that_connection_only(server, client):
    other = server.client()
    assert_usable(other)
    try:
        client.send_raw(struct.pack(">I", 10 * MAX_FRAME) + b"\x00" * (2 * MAX_FRAME))
    except (BrokenPipeError, ConnectionResetError):
        pass  # the broker closed without reading the body, as docs/protocol.md says
    try:  # the answer may be lost to the reset that closing with unread bytes causes ("if it can")
        assert_refused(client.recv_doc(), INVALID_REQUEST, None, "socket.request.max.bytes")
    except ConnectionError:
        pass
    assert client.is_closed()
    assert_usable(other)


@pytest.mark.parametrize("sent", [b"\x00\x00", struct.pack(">I", 100) + b"\x81\xa2id\x01"],
                         ids=["half-prefix", "half-body"])
def test_frame_truncated_then_closed_gets_no_response(client, sent):
    client.send_raw(sent)
    client.sock.shutdown(socket.SHUT_WR)
    client.sock.settimeout(5)
    assert client.sock.recv(1024) == b""  # closed, nothing answered


def test_frame_split_across_many_sends_is_reassembled(client):
    data = frame(pack({"api": "api_versions", "v": 1, "id": 55}))
    for i in range(len(data)):
        client.send_raw(data[i:i + 1])
        if i % 10 == 0:
            time.sleep(0.001)
    doc = client.recv_doc()
    assert doc["id"] == 55 and doc["error_code"] == NONE


def test_pipelining_mixed_requests_in_one_send_are_answered_in_order(client):
    create(client, "bi-pipe")
    frames, expected = [], []
    for i in range(60):
        rid = 1000 + i
        kind = i % 6
        if kind == 0:
            frames.append(frame(pack({"api": "api_versions", "v": 1, "id": rid})))
            expected.append((rid, NONE))
        elif kind == 1:
            frames.append(frame(pack({"api": "produce", "v": 1, "id": rid, "acks": 1, "timeout_ms": 1000,
                                      "topics": [{"name": "bi-pipe", "partitions": [
                                          {"partition": 0, "records": batch(b"%d" % i)}]}]})))
            expected.append((rid, NONE))
        elif kind == 2:
            frames.append(frame(b"\xc1"))  # garbage: answered in its place, with id nil
            expected.append((None, INVALID_REQUEST))
        elif kind == 3:
            frames.append(frame(pack({"api": "produce", "v": 1, "id": rid, "acks": 0, "timeout_ms": 1000,
                                      "topics": [{"name": "bi-pipe", "partitions": [
                                          {"partition": 0, "records": batch(b"%d" % i)}]}]})))
        elif kind == 4:
            frames.append(frame(pack({"api": "metadata", "v": 9, "id": rid})))
            expected.append((rid, UNSUPPORTED_VERSION))
        else:
            frames.append(frame(pack({"api": "fetch", "v": 1, "id": rid, "max_wait_ms": 0, "min_bytes": 0,
                                      "max_bytes": 1 << 20, "topics": [{"name": "bi-pipe", "partitions": [
                                          {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}]})))
            expected.append((rid, NONE))
    client.send_raw(b"".join(frames))
    got = []
    for _ in expected:
        doc = client.recv_doc()
        got.append((doc["id"], doc["error_code"]))
    assert got == expected
    assert client.is_closed(0.3) is False  # no extra response (acks=0 gets none)
    # every produce landed, in request order
    assert values_of(fetch_part(client, "bi-pipe", 0, 0)["records"]) == [
        b"%d" % i for i in range(60) if i % 6 in (1, 3)]


def test_pipelining_produce_then_fetch_in_one_send_sees_the_data(client):
    create(client, "bi-pipe-rw")
    produce = {"api": "produce", "v": 1, "id": 1, "acks": 1, "timeout_ms": 1000,
               "topics": [{"name": "bi-pipe-rw", "partitions": [{"partition": 0, "records": batch(b"first")}]}]}
    fetch = {"api": "fetch", "v": 1, "id": 2, "max_wait_ms": 5000, "min_bytes": 1, "max_bytes": 1 << 20,
             "topics": [{"name": "bi-pipe-rw", "partitions": [
                 {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}]}
    client.send_raw(frame(pack(produce)) + frame(pack(fetch)))
    assert client.recv_doc()["id"] == 1
    start = time.monotonic()
    fetched = client.recv_doc()
    assert fetched["id"] == 2 and time.monotonic() - start < 2
    assert values_of(fetched["topics"][0]["partitions"][0]["records"]) == [b"first"]


# == values: topic names, partitions, offsets, records =======================================

EVIL_NAMES = ["../x", "../../x", "a/b", "/tmp/x", ".", "..", "x" * 250, "", "tópico", "x\x00", "..\\..\\x",
              "sentinel/../sentinel", "a b"]


@pytest.mark.parametrize("name", EVIL_NAMES)
def test_topic_illegal_names_are_invalid_topic_in_every_api_and_touch_no_file(server, client, name):
    root = server.data_dir.parent
    before = tree(root)
    # where partition 0 would land if the name reached the file system unchecked
    landing = [] if "\x00" in name else [Path(os.path.normpath(base / f"{name}-0"))
                                         for base in (server.data_dir, Path.cwd())]
    existed = [path.exists() for path in landing]  # "sentinel/../sentinel" lands on a real partition
    part = [{"partition": 0, "offset": 0, "fetch_offset": 0, "partition_max_bytes": 100, "timestamp": -1,
             "records": batch(b"v")}]
    requests = {
        "metadata": {"topics": [name]},
        "create_topics": {"topics": [{"name": name, "num_partitions": 1, "replication_factor": 1}]},
        "delete_topics": {"topics": [name]},
        "describe_configs": {"topics": [name]},
        "alter_configs": {"topics": [{"name": name, "configs": {"retention.ms": "1"}}]},
        "produce": {"acks": 1, "timeout_ms": 1000, "topics": [{"name": name, "partitions": part}]},
        "fetch": {"max_wait_ms": 0, "min_bytes": 1, "max_bytes": 100, "topics": [{"name": name, "partitions": part}]},
        "list_offsets": {"topics": [{"name": name, "partitions": part}]},
        "delete_records": {"topics": [{"name": name, "partitions": part}]},
    }
    for api, fields in requests.items():
        doc = call(client, api, **fields)
        assert doc["error_code"] == NONE, (api, doc)
        (topic,) = doc["topics"]
        assert topic["name"] == name
        entries = topic["partitions"] if api in ("produce", "fetch", "list_offsets", "delete_records") else [topic]
        for entry in entries:
            assert entry["error_code"] == INVALID_TOPIC_EXCEPTION, (api, entry)
            assert "topic name" in entry["error_message"]
    assert tree(root) == before
    assert [path.exists() for path in landing] == existed
    assert name not in [t["name"] for t in call(client, "metadata", topics=None)["topics"]]


def test_topic_dash_only_name_is_legal(client):
    assert create(client, "-")["error_code"] == NONE
    assert produce_part(client, "-", 0, batch(b"dash"))["base_offset"] == 0


@pytest.mark.parametrize("partition", [-1, -(2**31), 1, 2**31 - 1])
def test_partition_negative_or_huge_is_unknown_topic_or_partition_everywhere(server, client, partition):
    create(client, "bi-parts")
    before = tree(server.data_dir)
    part = {"partition": partition, "offset": 0, "fetch_offset": 0, "partition_max_bytes": 100, "timestamp": -1,
            "records": batch(b"v")}
    for api, extra in [("produce", {"acks": 1, "timeout_ms": 1000}),
                       ("fetch", {"max_wait_ms": 0, "min_bytes": 1, "max_bytes": 100}),
                       ("list_offsets", {}), ("delete_records", {})]:
        doc = call(client, api, topics=[{"name": "bi-parts", "partitions": [part]}], **extra)
        entry = doc["topics"][0]["partitions"][0]
        assert (entry["partition"], entry["error_code"]) == (partition, UNKNOWN_TOPIC_OR_PARTITION), (api, entry)
        assert str(partition) in entry["error_message"]
    assert tree(server.data_dir) == before
    assert high_watermark(client, "bi-parts") == 0


@pytest.mark.parametrize("offset", [2**63 - 1, -(2**63), -2, 10**12])
def test_offsets_huge_or_negative_are_offset_out_of_range(client, offset):
    create(client, "bi-offsets")
    if high_watermark(client, "bi-offsets") == 0:
        produce_part(client, "bi-offsets", 0, batch(b"a", b"b"))
    fetched = fetch_part(client, "bi-offsets", 0, offset, max_wait_ms=2000)
    assert fetched["error_code"] == OFFSET_OUT_OF_RANGE and fetched["records"] == b""
    deleted = call(client, "delete_records", topics=[
        {"name": "bi-offsets", "partitions": [{"partition": 0, "offset": offset}]}])["topics"][0]["partitions"][0]
    assert deleted["error_code"] == OFFSET_OUT_OF_RANGE
    assert values_of(fetch_part(client, "bi-offsets", 0, 0)["records"]) == [b"a", b"b"]


def test_list_offsets_huge_timestamp_finds_nothing(client):
    create(client, "bi-ts")
    produce_part(client, "bi-ts", 0, batch(b"a"))
    doc = call(client, "list_offsets", topics=[{"name": "bi-ts", "partitions": [{"partition": 0,
                                                                                  "timestamp": 2**63 - 1}]}])
    entry = doc["topics"][0]["partitions"][0]
    assert (entry["error_code"], entry["offset"], entry["timestamp"]) == (NONE, -1, -1)


def _patched(records: bytes, fmt: str, position: int, value, *, fix_crc: bool = False) -> bytes:
    data = bytearray(records)
    struct.pack_into(fmt, data, position, value)
    if fix_crc:
        struct.pack_into(">I", data, 17, compute_crc(data))
    return bytes(data)


GOOD = batch(b"value")
RECORD_CASES = [
    ("empty", b"", INVALID_RECORD, "no record batch"),
    ("random", b"\x47" * 200, CORRUPT_MESSAGE, "magic"),
    ("truncated", GOOD[:-5], CORRUPT_MESSAGE, "remain"),
    ("trailing-bytes", GOOD + b"\x00\x00\x00", CORRUPT_MESSAGE, "trailing"),
    ("length-too-big", _patched(GOOD, ">i", 8, 10**6), CORRUPT_MESSAGE, "1000012"),
    ("length-negative", _patched(GOOD, ">i", 8, -5), CORRUPT_MESSAGE, "-5"),
    ("legacy-magic", _patched(GOOD, ">b", 16, 1), UNSUPPORTED_FOR_MESSAGE_FORMAT, "magic 1"),
    ("unknown-magic", _patched(GOOD, ">b", 16, 9), CORRUPT_MESSAGE, "magic 9"),
    ("unknown-codec", _patched(GOOD, ">h", 21, 7, fix_crc=True), CORRUPT_MESSAGE, "codec"),
    ("control-batch", _patched(GOOD, ">h", 21, 0x20, fix_crc=True), INVALID_RECORD, "control"),
    ("log-append-time-set", _patched(GOOD, ">h", 21, 0x08, fix_crc=True), INVALID_TIMESTAMP, "LogAppendTime"),
    ("zero-records", _patched(GOOD, ">i", 57, 0, fix_crc=True), INVALID_RECORD, "0 records"),
    ("crc", _patched(GOOD, ">I", 17, 12345), CORRUPT_MESSAGE, "crc"),
]


@pytest.mark.parametrize("records, code, mentions", [c[1:] for c in RECORD_CASES], ids=[c[0] for c in RECORD_CASES])
def test_produce_bad_records_are_rejected_whole_and_nothing_is_written(client, records, code, mentions):
    create(client, "bi-records")
    before = high_watermark(client, "bi-records")
    doc = call(client, "produce", acks=1, timeout_ms=1000, topics=[{"name": "bi-records", "partitions": [
        {"partition": 0, "records": records}]}])
    entry = doc["topics"][0]["partitions"][0]
    assert entry["error_code"] == code, entry
    assert mentions in entry["error_message"], entry["error_message"]
    assert entry["base_offset"] == -1
    assert high_watermark(client, "bi-records") == before
    assert produce_part(client, "bi-records", 0, batch(b"after"))["base_offset"] == before


# == connection limits and idle close ========================================================


def _served(client: WireClient, timeout_s: float = 1.0) -> bool:
    """Whether the broker answers an api_versions on this connection within timeout_s."""
    client.sock.settimeout(timeout_s)
    try:
        client.send_frame(pack({"api": "api_versions", "v": 1, "id": 1}))
        return client.recv_doc()["error_code"] == NONE
    except (OSError, ConnectionError):
        return False


def _answered_within(client: WireClient, timeout_s: float) -> bool:
    """Whether a response frame arrives on ``client`` within ``timeout_s`` (without consuming it
    unless it does)."""
    client.sock.settimeout(timeout_s)
    try:
        return client.recv_doc()["error_code"] == NONE
    except (socket.timeout, OSError, ConnectionError):
        return False


def test_connections_max_connections_per_ip_closes_the_extra_connection(broker_factory):
    broker = broker_factory("max.connections.per.ip=2")
    first, second = broker.client(), broker.client()
    assert _served(first) and _served(second)
    third = broker.client()
    assert third.is_closed(5)  # refused at once, not left waiting
    assert _served(first) and _served(second)
    first.close()
    # the slot frees once the broker has seen the close
    wait_for(lambda: _served(broker.client()), 10, "a freed per-ip slot to be reused")
    assert _served(second)
    assert any(e.get("event") == "connection_refused" for e in broker.events())


def test_connections_max_connections_bounds_open_connections(broker_factory):
    broker = broker_factory("max.connections=2", process=True)  # its descriptors are counted
    first, second = broker.client(), broker.client()
    assert _served(first) and _served(second)
    descriptors = broker.open_descriptors()
    third = broker.client()  # connected by the kernel, never accepted while two are open
    assert not _served(third, 0.5)
    assert broker.open_descriptors() <= descriptors
    third.close()
    first.close()
    wait_for(lambda: _served(broker.client()), 10, "a freed slot to be reused")
    assert _served(second)
    assert any(e.get("event") == "accept_paused" for e in broker.events())


def test_connections_over_max_connections_wait_for_a_free_slot(broker_factory):
    broker = broker_factory("max.connections=1")
    first = broker.client()
    assert _served(first)
    waiting = broker.client()
    waiting.send_frame(pack({"api": "api_versions", "v": 1, "id": 3}))
    assert not _answered_within(waiting, 0.3)  # not served while the only slot is taken...
    first.close()
    waiting.sock.settimeout(10)
    assert waiting.recv_doc()["id"] == 3  # ...and served, not dropped, once it frees


def test_connections_idle_connection_is_closed_after_connections_max_idle_ms(broker_factory):
    # (activity resetting the idle timer, and -1 never closing, are tested on a fake clock in
    # tests/server/test_connection_bounds.py)
    broker = broker_factory("connections.max.idle.ms=400", "logger.level=DEBUG")  # idle closes log at DEBUG
    idle = broker.client()
    assert _served(idle)
    assert idle.is_closed(10)
    assert _served(broker.client())
    assert any(e.get("event") == "connection_idle_closed" for e in broker.events())
