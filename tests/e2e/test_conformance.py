"""Wire-protocol conformance of the real broker (run in this process), one API at a time.

Every request here is a plain msgpack map spelled from docs/protocol.md, the written protocol
reference, and every response is checked against its field lists with our own shape table, not
with ``triolog.protocol.messages`` (a field misspelled there would otherwise pass on both sides). One broker
serves the whole module; each test uses its own topic names.
"""

from __future__ import annotations

import os
import struct
import threading
import time
from pathlib import Path

import msgpack
import pytest

from triolog.protocol.records import build_batch, iter_batches

from tests.waiting import wait_for

from .broker_process import InProcessBroker, WireClient

# -- error codes, from docs/protocol.md ------------------------------------------------------

NONE = 0
OFFSET_OUT_OF_RANGE = 1
CORRUPT_MESSAGE = 2
UNKNOWN_TOPIC_OR_PARTITION = 3
MESSAGE_TOO_LARGE = 10
INVALID_TOPIC_EXCEPTION = 17
INVALID_TIMESTAMP = 32
UNSUPPORTED_VERSION = 35
TOPIC_ALREADY_EXISTS = 36
INVALID_PARTITIONS = 37
INVALID_REPLICATION_FACTOR = 38
INVALID_CONFIG = 40
INVALID_REQUEST = 42
INVALID_RECORD = 87

ALL_APIS = ["api_versions", "metadata", "create_topics", "delete_topics", "describe_configs",
            "alter_configs", "create_partitions", "produce", "fetch", "list_offsets", "delete_records", "describe_log_dirs",
            "init_producer_id", "find_coordinator", "join_group", "sync_group", "heartbeat", "leave_group",
            "offset_commit", "offset_fetch", "list_groups", "describe_groups", "delete_groups", "sasl_handshake",
            "sasl_authenticate", "create_acls", "describe_acls", "delete_acls", "describe_user_scram_credentials",
            "alter_user_scram_credentials", "describe_client_quotas", "alter_client_quotas",
            "add_partitions_to_txn", "add_offsets_to_txn", "end_txn", "txn_offset_commit", "write_txn_markers",
            "describe_transactions", "list_transactions", "describe_producers"]

NODE_ID = 3
DEFAULT_PARTITIONS = 2
BROKER_OVERRIDES = (
    f"node.id={NODE_ID}",
    f"num.partitions={DEFAULT_PARTITIONS}",
    "log.segment.bytes=1048576",     # segment.bytes: set on the broker
    "log.retention.hours=2",         # retention.ms: set on the broker through a coarser synonym
    "message.max.bytes=100000",      # max.message.bytes: set on the broker
)

# -- response shapes, transcribed from docs/protocol.md ----------------------------------------------


class MapOf:
    """A map str -> shape."""

    def __init__(self, shape):
        self.shape = shape


INT, STR, BIN, BOOL = int, str, bytes, bool
OPT_STR = (str, type(None))
ENVELOPE = {"id": INT, "error_code": INT, "error_message": OPT_STR}
SHAPES = {
    "api_versions": {"apis": [{"name": STR, "min_version": INT, "max_version": INT}], "broker_version": STR},
    "metadata": {
        "brokers": [{"node_id": INT, "host": STR, "port": INT, "rack": OPT_STR}],
        "controller_id": INT,
        "topics": [{"name": STR, "error_code": INT, "error_message": OPT_STR, "internal": BOOL,
                    "partitions": [{"partition": INT, "leader": INT, "error_code": INT,
                                    "log_start_offset": INT, "high_watermark": INT, "leader_epoch": INT,
                                    "replicas": [INT], "isr": [INT], "offline_replicas": [INT]}]}],
    },
    "create_topics": {"topics": [{"name": STR, "error_code": INT, "error_message": OPT_STR,
                                  "num_partitions": INT, "configs": MapOf(STR)}]},
    "delete_topics": {"topics": [{"name": STR, "error_code": INT, "error_message": OPT_STR}]},
    "describe_configs": {"topics": [{"name": STR, "error_code": INT, "error_message": OPT_STR,
                                     "configs": MapOf({"value": OPT_STR, "source": STR})}]},
    "alter_configs": {"topics": [{"name": STR, "error_code": INT, "error_message": OPT_STR}]},
    "produce": {
        "throttle_ms": INT,
        "topics": [{"name": STR, "partitions": [{"partition": INT, "error_code": INT, "error_message": OPT_STR,
                                                 "base_offset": INT, "log_append_time": INT,
                                                 "log_start_offset": INT}]}],
    },
    "fetch": {
        "throttle_ms": INT,
        "topics": [{"name": STR, "partitions": [{"partition": INT, "error_code": INT, "error_message": OPT_STR,
                                                 "high_watermark": INT, "last_stable_offset": INT,
                                                 "log_start_offset": INT, "records": BIN}]}],
    },
    "list_offsets": {"topics": [{"name": STR, "partitions": [{"partition": INT, "error_code": INT,
                                                              "error_message": OPT_STR, "timestamp": INT,
                                                              "offset": INT}]}]},
    "delete_records": {"topics": [{"name": STR, "partitions": [{"partition": INT, "error_code": INT,
                                                                "error_message": OPT_STR, "low_watermark": INT}]}]},
    "describe_log_dirs": {
        "log_dirs": [{"path": STR, "error_code": INT, "error_message": OPT_STR, "total_bytes": INT,
                      "usable_bytes": INT,
                      "topics": [{"name": STR, "partitions": [{"partition": INT, "size_bytes": INT, "segments": INT,
                                                               "log_start_offset": INT, "log_end_offset": INT}]}]}],
        "errors": [{"name": STR, "error_code": INT, "error_message": OPT_STR,
                    "partitions": [{"partition": INT, "error_code": INT, "error_message": OPT_STR}]}],
    },
}


#: "Answers at once" tests ask for a long poll of a minute and require the answer well before it:
#: a broker that waited would take 60 s, and a loaded CI machine never takes 30 s to answer.
LONG_WAIT_MS = 60_000
AT_ONCE_S = 30


def check_shape(value, shape, path="response"):
    if isinstance(shape, dict):
        assert isinstance(value, dict), f"{path} must be a map, got {type(value).__name__}"
        for key, sub in shape.items():
            assert key in value, f"{path}.{key} is missing"
            check_shape(value[key], sub, f"{path}.{key}")
    elif isinstance(shape, list):
        assert isinstance(value, list), f"{path} must be an array, got {type(value).__name__}"
        for index, item in enumerate(value):
            check_shape(item, shape[0], f"{path}[{index}]")
    elif isinstance(shape, MapOf):
        assert isinstance(value, dict), f"{path} must be a map"
        for key, item in value.items():
            assert isinstance(key, str), f"{path} has a non-str key {key!r}"
            check_shape(item, shape.shape, f"{path}[{key!r}]")
    elif shape is int:
        assert isinstance(value, int) and not isinstance(value, bool), f"{path} must be an int, got {value!r}"
    else:
        assert isinstance(value, shape), f"{path} must be {shape}, got {value!r}"


def check_error_messages(value, path="response"):
    """error_message says in words what went wrong when error_code != 0, and is nil when it is 0."""
    if isinstance(value, dict):
        if "error_code" in value:
            if value["error_code"] != NONE:
                assert isinstance(value["error_message"], str) and value["error_message"].strip(), path
            else:
                assert value.get("error_message") is None, f"{path}: error_message without an error"
        for key, item in value.items():
            check_error_messages(item, f"{path}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            check_error_messages(item, f"{path}[{index}]")


# -- raw wire helpers ------------------------------------------------------------------------


def pack(doc) -> bytes:
    return msgpack.packb(doc, use_bin_type=True)


def call(client: WireClient, api: str, **fields) -> dict:
    """One request as a plain map; the response checked for id, envelope and the documented shape."""
    rid = client.next_id()
    client.send_frame(pack({"api": api, "v": 1, "id": rid, "client_id": "conformance", **fields}))
    doc = client.recv_doc()
    assert doc["id"] == rid
    check_shape(doc, ENVELOPE)
    if doc["error_code"] == NONE:
        check_shape(doc, SHAPES[api], api)
    check_error_messages(doc)
    return doc


def now_ms() -> int:
    return int(time.time() * 1000)


def batch(*values: bytes, timestamp: int | None = None, key: bytes | None = b"k") -> bytes:
    ts = now_ms() if timestamp is None else timestamp
    return build_batch([(key, v, ts, ()) for v in values])


def produce(client, topic, partition, records, acks=1, timeout_ms=5000) -> dict:
    doc = call(client, "produce", acks=acks, timeout_ms=timeout_ms,
               topics=[{"name": topic, "partitions": [{"partition": partition, "records": records}]}])
    assert doc["error_code"] == NONE
    return doc["topics"][0]["partitions"][0]


def fetch_doc(client, topics, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=0) -> dict:
    """topics: {name: [(partition, fetch_offset, partition_max_bytes), ...]}"""
    return call(client, "fetch", max_wait_ms=max_wait_ms, min_bytes=min_bytes, max_bytes=max_bytes,
                isolation_level=isolation_level,
                topics=[{"name": name, "partitions": [
                    {"partition": p, "fetch_offset": o, "partition_max_bytes": pm} for p, o, pm in parts]}
                    for name, parts in topics.items()])


def fetch(client, topic, partition, offset, partition_max_bytes=1 << 20, **kw) -> dict:
    doc = fetch_doc(client, {topic: [(partition, offset, partition_max_bytes)]}, **kw)
    return doc["topics"][0]["partitions"][0]


def batch_sizes(records: bytes) -> list[int]:
    """Sizes of the back-to-back batches in ``records``; fails on a partial trailing batch."""
    sizes, position = [], 0
    while position < len(records):
        assert len(records) - position >= 12, "partial batch header at the end of the fetched records"
        (length,) = struct.unpack_from(">i", records, position + 8)
        assert position + length + 12 <= len(records), "partial batch at the end of the fetched records"
        sizes.append(length + 12)
        position += length + 12
    return sizes


def values(records: bytes, start: int = 0) -> list[bytes]:
    return [r.value for b in iter_batches(records) for r in b.records if r.offset >= start]


def create(client, name, partitions=1, configs=None, replication_factor=1, validate_only=False) -> dict:
    doc = call(client, "create_topics", validate_only=validate_only, topics=[
        {"name": name, "num_partitions": partitions, "replication_factor": replication_factor,
         "configs": configs or {}}])
    assert doc["error_code"] == NONE
    assert len(doc["topics"]) == 1 and doc["topics"][0]["name"] == name
    return doc["topics"][0]


def parked_long_polls(server: InProcessBroker) -> int:
    """Fetches waiting for data in the broker right now (its triolog_server_delayed_fetches)."""
    return int(server.sample("triolog_server_delayed_fetches"))


def start_long_poll(server: InProcessBroker, poll) -> threading.Thread:
    """Run ``poll`` (a blocking fetch) in a thread and return once the broker holds it waiting:
    what happens next happens to a parked long poll, not to a read that was still on its way."""
    before = parked_long_polls(server)
    thread = threading.Thread(target=poll)
    thread.start()
    wait_for(lambda: parked_long_polls(server) > before, 10, "the fetch to wait for data")
    return thread


def create_ok(client, name, partitions=1, configs=None):
    result = create(client, name, partitions, configs)
    assert result["error_code"] == NONE, result
    return result


def metadata_topic(client, name) -> dict:
    doc = call(client, "metadata", topics=[name])
    assert doc["error_code"] == NONE and len(doc["topics"]) == 1
    return doc["topics"][0]


def list_offsets(client, topic, *queries) -> list[dict]:
    """queries: (partition, timestamp) pairs."""
    doc = call(client, "list_offsets", isolation_level=0, topics=[
        {"name": topic, "partitions": [{"partition": p, "timestamp": t} for p, t in queries]}])
    assert doc["error_code"] == NONE
    return doc["topics"][0]["partitions"]


def delete_records(client, topic, partition, offset) -> dict:
    doc = call(client, "delete_records", topics=[
        {"name": topic, "partitions": [{"partition": partition, "offset": offset}]}])
    assert doc["error_code"] == NONE
    return doc["topics"][0]["partitions"][0]


def describe(client, name) -> dict:
    doc = call(client, "describe_configs", topics=[name])
    assert doc["error_code"] == NONE
    return doc["topics"][0]


def alter(client, name, configs=None, delete=()) -> dict:
    doc = call(client, "alter_configs", topics=[{"name": name, "configs": configs or {}, "delete": list(delete)}])
    assert doc["error_code"] == NONE
    return doc["topics"][0]


def dir_listing(root: Path) -> set[str]:
    """Every path under ``root`` but checkpoints being replaced (``*.tmp``) and the broker's own log."""
    return {str(p.relative_to(root)) for p in root.rglob("*") if not p.name.endswith((".tmp", "-broker.log"))}


def would_be_dirs(server: InProcessBroker, name: str) -> list[Path]:
    """Where partition 0 of ``name`` would land if the name reached the file system unchecked."""
    try:
        return [Path(os.path.normpath(base / f"{name}-0")) for base in (server.data_dir, Path.cwd())]
    except ValueError:  # a NUL byte: no path at all
        return []


# -- fixtures --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    broker = InProcessBroker(tmp_path_factory.mktemp("conformance") / "data", BROKER_OVERRIDES, metrics=True).start()
    yield broker
    alive = broker.running
    code = broker.stop()
    assert alive, "the broker died during the conformance tests"
    assert code == 0


@pytest.fixture(scope="module")
def strict_server(tmp_path_factory):
    """auto.create.topics.enable=false."""
    broker = InProcessBroker(tmp_path_factory.mktemp("strict") / "data", ("auto.create.topics.enable=false",)).start()
    yield broker
    broker.stop()


def _server_errors(broker: InProcessBroker) -> list[dict]:
    return [e for e in broker.events() if e.get("level") in ("error", "critical")]


@pytest.fixture
def client(server):
    """A connection to the shared broker; the test fails if the broker logged an error meanwhile."""
    before = len(_server_errors(server))
    c = server.client()
    yield c
    c.close()
    assert _server_errors(server)[before:] == []


# == api_versions ============================================================================


def test_api_versions_lists_every_api_at_version_1(client):
    doc = call(client, "api_versions")
    assert doc["error_code"] == NONE
    assert sorted(a["name"] for a in doc["apis"]) == sorted(ALL_APIS)
    assert all((a["min_version"], a["max_version"]) == (1, 1) for a in doc["apis"])
    assert doc["broker_version"]


def test_api_versions_unsupported_version_still_lists_the_apis(client):
    rid = client.next_id()
    client.send_frame(pack({"api": "api_versions", "v": 7, "id": rid}))
    doc = client.recv_doc()
    assert doc["id"] == rid and doc["error_code"] == UNSUPPORTED_VERSION
    assert "7" in doc["error_message"]
    assert sorted(a["name"] for a in doc["apis"]) == sorted(ALL_APIS)


# == metadata ================================================================================


def test_metadata_describes_the_broker_and_controller(client, server):
    doc = call(client, "metadata", topics=[])
    assert doc["brokers"] == [{"node_id": NODE_ID, "host": "127.0.0.1", "port": server.port, "rack": None}]
    assert doc["controller_id"] == NODE_ID
    assert doc["topics"] == []


def test_metadata_partitions_report_leader_log_start_and_high_watermark(client):
    create_ok(client, "md-offsets", 3)
    produce(client, "md-offsets", 1, batch(b"a", b"b", b"c"))
    produce(client, "md-offsets", 2, batch(b"x"))
    delete_records(client, "md-offsets", 1, 2)
    topic = metadata_topic(client, "md-offsets")
    assert topic["error_code"] == NONE and topic["internal"] is False
    assert [(p["partition"], p["leader"], p["error_code"], p["log_start_offset"], p["high_watermark"])
            for p in topic["partitions"]] == [
        (0, NODE_ID, NONE, 0, 0), (1, NODE_ID, NONE, 2, 3), (2, NODE_ID, NONE, 0, 1)]
    # A standalone broker is the one replica of each partition, in sync; no leader epoch.
    assert all((p["replicas"], p["isr"], p["offline_replicas"], p["leader_epoch"]) == ([NODE_ID], [NODE_ID], [], -1)
               for p in topic["partitions"])


def test_metadata_nil_topics_lists_every_topic(client):
    create_ok(client, "md-all-a")
    create_ok(client, "md-all-b", 2)
    doc = call(client, "metadata", topics=None)
    names = [t["name"] for t in doc["topics"]]
    assert {"md-all-a", "md-all-b"} <= set(names)
    by_name = {t["name"]: t for t in doc["topics"]}
    assert len(by_name["md-all-b"]["partitions"]) == 2


def test_metadata_auto_creates_a_named_topic_with_num_partitions(client):
    topic = metadata_topic(client, "md-auto")
    assert topic["error_code"] == NONE
    assert [p["partition"] for p in topic["partitions"]] == list(range(DEFAULT_PARTITIONS))


def test_metadata_that_does_not_allow_auto_creation_leaves_a_missing_topic_missing(client, server):
    """Kafka's MetadataRequest v4+ rule: consumers send allow_auto_topic_creation=false."""
    doc = call(client, "metadata", topics=["md-no-create"], allow_auto_topic_creation=False)
    (topic,) = doc["topics"]
    assert topic["error_code"] == UNKNOWN_TOPIC_OR_PARTITION and "md-no-create" in topic["error_message"]
    assert "md-no-create" not in [t["name"] for t in call(client, "metadata", topics=None)["topics"]]
    assert not any(p.name.startswith("md-no-create") for p in server.data_dir.iterdir())


def test_metadata_unknown_topic_without_auto_create_is_unknown_and_not_created(strict_server):
    client = strict_server.client()
    topic = metadata_topic(client, "md-missing")
    assert topic["error_code"] == UNKNOWN_TOPIC_OR_PARTITION and "md-missing" in topic["error_message"]
    assert topic["partitions"] == []
    assert call(client, "metadata", topics=None)["topics"] == []
    assert not any(p.name.startswith("md-missing") for p in strict_server.data_dir.iterdir())


def test_metadata_invalid_topic_name_is_invalid_topic_and_not_created(client, server):
    before = dir_listing(server.data_dir.parent)
    topic = metadata_topic(client, "../md-evil")
    assert topic["error_code"] == INVALID_TOPIC_EXCEPTION
    assert dir_listing(server.data_dir.parent) == before


# == create_topics ===========================================================================


def test_create_topics_returns_partitions_and_effective_configs(client, server):
    result = create_ok(client, "ct-basic", 3, {"cleanup.policy": "compact", "segment.bytes": "4096"})
    assert result["num_partitions"] == 3
    assert result["configs"]["cleanup.policy"] == "compact"
    assert result["configs"]["segment.bytes"] == "4096"
    assert result["configs"]["retention.ms"] == str(2 * 3600 * 1000)  # from log.retention.hours=2
    assert result["configs"]["max.message.bytes"] == "100000"
    assert all(isinstance(v, str) for v in result["configs"].values())
    assert {f"ct-basic-{p}" for p in range(3)} <= {p.name for p in server.data_dir.iterdir()}
    assert [p["high_watermark"] for p in metadata_topic(client, "ct-basic")["partitions"]] == [0, 0, 0]


def test_create_topics_minus_one_partitions_uses_num_partitions(client):
    assert create_ok(client, "ct-default", -1)["num_partitions"] == DEFAULT_PARTITIONS
    assert len(metadata_topic(client, "ct-default")["partitions"]) == DEFAULT_PARTITIONS


def test_create_topics_replication_factor_minus_one_is_accepted(client):
    assert create(client, "ct-rf-default", 1, replication_factor=-1)["error_code"] == NONE


def test_create_topics_validate_only_checks_without_touching_files(client, server):
    before = dir_listing(server.data_dir)
    result = create(client, "ct-dry", 4, {"retention.ms": "1000"}, validate_only=True)
    assert result["error_code"] == NONE and result["num_partitions"] == 4
    assert result["configs"]["retention.ms"] == "1000"
    bad = create(client, "ct-dry-bad", 0, validate_only=True)
    assert bad["error_code"] == INVALID_PARTITIONS
    assert dir_listing(server.data_dir) == before
    assert "ct-dry" not in [t["name"] for t in call(client, "metadata", topics=None)["topics"]]
    assert create(client, "ct-dry", 4)["error_code"] == NONE  # nothing was reserved by the dry run


def test_create_topics_existing_topic_is_topic_already_exists(client):
    create_ok(client, "ct-twice", 2)
    produce(client, "ct-twice", 0, batch(b"kept"))
    for validate_only in (False, True):
        result = create(client, "ct-twice", 5, validate_only=validate_only)
        assert result["error_code"] == TOPIC_ALREADY_EXISTS and "ct-twice" in result["error_message"]
    assert len(metadata_topic(client, "ct-twice")["partitions"]) == 2
    assert values(fetch(client, "ct-twice", 0, 0)["records"]) == [b"kept"]


@pytest.mark.parametrize("partitions", [0, -2, 10_001, 2**31 - 1, -(2**31)])
def test_create_topics_bad_partition_count_is_invalid_partitions(client, server, partitions):
    name = f"ct-parts-{'m' if partitions < 0 else ''}{abs(partitions)}"
    result = create(client, name, partitions)
    assert result["error_code"] == INVALID_PARTITIONS
    assert str(partitions) in result["error_message"]
    assert not any(p.name.startswith(name) for p in server.data_dir.iterdir())


@pytest.mark.parametrize("factor", [0, 2, 3, -2])
def test_create_topics_replication_factor_other_than_1_is_invalid_replication_factor(client, server, factor):
    name = f"ct-rf-{'m' if factor < 0 else ''}{abs(factor)}"
    result = create(client, name, 1, replication_factor=factor)
    assert result["error_code"] == INVALID_REPLICATION_FACTOR and str(factor) in result["error_message"]
    assert not any(p.name.startswith(name) for p in server.data_dir.iterdir())


@pytest.mark.parametrize("configs, mentions", [
    ({"no.such.config": "1"}, "no.such.config"),
    ({"segment.bytes": "abc"}, "segment.bytes"),
    ({"segment.bytes": "1"}, "segment.bytes"),
    ({"cleanup.policy": "shred"}, "cleanup.policy"),
    ({"message.timestamp.type": "WallClock"}, "message.timestamp.type"),
    ({"log.retention.hours": "1"}, "log.retention.hours"),  # a broker key is not a topic key
])
def test_create_topics_bad_config_is_invalid_config(client, server, configs, mentions):
    name = "ct-cfg-" + mentions.replace(".", "-")
    result = create(client, name, 1, configs)
    assert result["error_code"] == INVALID_CONFIG and mentions in result["error_message"]
    assert not any(p.name.startswith(name) for p in server.data_dir.iterdir())


@pytest.mark.parametrize("name", [
    "../x", "a/b", ".", "..", "x" * 250, "", "tópico", "a b", "/etc/passwd", "..\\x", "a\x00b", "x\n", "ü" * 10,
    "../../../../tmp/escape",
])
def test_create_topics_illegal_name_is_invalid_topic_and_touches_no_file(client, server, name):
    root = server.data_dir.parent
    before = dir_listing(root)
    for validate_only in (True, False):
        result = create(client, name, 1, validate_only=validate_only)
        assert result["error_code"] == INVALID_TOPIC_EXCEPTION, result
        assert result["name"] == name and "topic name" in result["error_message"]
    assert dir_listing(root) == before
    assert not any(path.exists() for path in would_be_dirs(server, name))
    assert name not in [t["name"] for t in call(client, "metadata", topics=None)["topics"]]


def test_create_topics_longest_legal_name_is_accepted(client):
    name = "L" * 249
    assert create(client, name, 1)["error_code"] == NONE
    assert produce(client, name, 0, batch(b"v"))["error_code"] == NONE


def test_create_topics_name_colliding_on_dot_and_underscore_is_invalid_topic(client):
    create_ok(client, "ct.collide")
    result = create(client, "ct_collide", 1)
    assert result["error_code"] == INVALID_TOPIC_EXCEPTION and "ct.collide" in result["error_message"]


def test_create_topics_one_bad_entry_does_not_fail_the_others(client):
    doc = call(client, "create_topics", validate_only=False, topics=[
        {"name": "ct-mix-ok", "num_partitions": 1, "replication_factor": 1, "configs": {}},
        {"name": "ct-mix-bad", "num_partitions": 0, "replication_factor": 1, "configs": {}},
        {"name": "ct/mix", "num_partitions": 1, "replication_factor": 1, "configs": {}},
    ])
    assert [(t["name"], t["error_code"]) for t in doc["topics"]] == [
        ("ct-mix-ok", NONE), ("ct-mix-bad", INVALID_PARTITIONS), ("ct/mix", INVALID_TOPIC_EXCEPTION)]
    assert doc["topics"][1]["num_partitions"] == -1 and doc["topics"][1]["configs"] == {}


# == delete_topics ===========================================================================


def test_delete_topics_removes_the_topic_and_its_data(client, server):
    create_ok(client, "dt-gone", 2)
    produce(client, "dt-gone", 1, batch(b"old"))
    doc = call(client, "delete_topics", topics=["dt-gone"])
    assert doc["topics"] == [{"name": "dt-gone", "error_code": NONE, "error_message": None}]
    assert "dt-gone" not in [t["name"] for t in call(client, "metadata", topics=None)["topics"]]
    assert not any(p.name.startswith("dt-gone-") for p in server.data_dir.iterdir())
    # re-creating gives an empty topic, not the old data
    create_ok(client, "dt-gone", 2)
    result = fetch(client, "dt-gone", 1, 0)
    assert result["error_code"] == NONE and result["high_watermark"] == 0 and result["records"] == b""


def test_delete_topics_unknown_topic_is_unknown_topic_or_partition(client):
    doc = call(client, "delete_topics", topics=["dt-never", "dt/bad"])
    assert [(t["name"], t["error_code"]) for t in doc["topics"]] == [
        ("dt-never", UNKNOWN_TOPIC_OR_PARTITION), ("dt/bad", INVALID_TOPIC_EXCEPTION)]
    assert "dt-never" in doc["topics"][0]["error_message"]


def test_delete_topics_ends_a_long_poll_on_the_topic_promptly(client, server):
    create_ok(client, "dt-polled")
    produce(client, "dt-polled", 0, batch(b"a"))
    poller = server.client()
    outcome = {}

    def poll():
        start = time.monotonic()
        outcome["result"] = fetch(poller, "dt-polled", 0, 1, max_wait_ms=5000)
        outcome["waited"] = time.monotonic() - start

    thread = start_long_poll(server, poll)
    assert call(client, "delete_topics", topics=["dt-polled"])["topics"][0]["error_code"] == NONE
    thread.join(10)
    assert not thread.is_alive()
    # Kafka completes a delayed fetch as soon as its partition is gone.
    assert outcome["result"]["error_code"] == UNKNOWN_TOPIC_OR_PARTITION
    assert outcome["waited"] < 3
    assert call(poller, "api_versions")["error_code"] == NONE
    assert not any(p.name.startswith("dt-polled-") for p in server.data_dir.iterdir())
    assert "dt-polled" not in [t["name"] for t in call(client, "metadata", topics=None)["topics"]]


def test_delete_topics_racing_fetches_and_list_offsets_leave_no_partition_behind(client, server):
    """Reads of a topic being deleted must not bring its partition directories back."""
    stop = threading.Event()
    readers = [server.client() for _ in range(3)]

    seen = set()
    rounds: list[int] = []  # reads done while the topic existed, then after its deletion

    def hammer(reader, name):
        while not stop.is_set():
            seen.add(fetch(reader, name, 0, 0)["error_code"])
            seen.add(list_offsets(reader, name, (0, -1))[0]["error_code"])
            seen.add(delete_records(reader, name, 0, -1)["error_code"])
            rounds.append(1)

    for round_ in range(3):
        name = f"dt-race-{round_}"
        create_ok(client, name)
        threads = [threading.Thread(target=hammer, args=(r, name)) for r in readers]
        rounds.clear()
        for t in threads:
            t.start()
        wait_for(lambda: len(rounds) >= 3, 10, "the readers to be reading")
        assert call(client, "delete_topics", topics=[name])["topics"][0]["error_code"] == NONE
        deleted_at = len(rounds)
        wait_for(lambda: len(rounds) >= deleted_at + 3, 10, "the readers to read the deleted topic")
        stop.set()
        for t in threads:
            t.join(10)
        stop.clear()
        assert not any(p.name.startswith(f"{name}-") for p in server.data_dir.iterdir()), name
        assert name not in [t["name"] for t in call(client, "metadata", topics=None)["topics"]]
    # a reader of a topic being deleted sees it, then sees it gone: never a storage error
    assert seen <= {NONE, UNKNOWN_TOPIC_OR_PARTITION}, seen


def test_delete_topics_longest_legal_name_is_deleted(server):
    client = server.client()
    name = "D" * 249
    create_ok(client, name)
    doc = call(client, "delete_topics", topics=[name])
    assert doc["topics"][0]["error_code"] == NONE, doc["topics"][0]["error_message"]
    assert not any(p.name.startswith(name) for p in server.data_dir.iterdir())


# == describe_configs / alter_configs ========================================================


def test_describe_configs_reports_topic_broker_and_default_sources(client):
    create_ok(client, "dc-sources", 1, {"cleanup.policy": "compact"})
    result = describe(client, "dc-sources")
    assert result["error_code"] == NONE
    configs = result["configs"]
    assert configs["cleanup.policy"] == {"value": "compact", "source": "topic", "read_only": False, "is_sensitive": False}
    assert configs["segment.bytes"] == {"value": "1048576", "source": "broker", "read_only": False, "is_sensitive": False}
    assert configs["max.message.bytes"] == {"value": "100000", "source": "broker", "read_only": False, "is_sensitive": False}
    assert configs["preallocate"] == {"value": "false", "source": "default", "read_only": False, "is_sensitive": False}
    assert configs["message.timestamp.type"] == {"value": "CreateTime", "source": "default", "read_only": False, "is_sensitive": False}
    assert all(e["source"] in ("topic", "broker", "default") for e in configs.values())


def test_describe_configs_broker_synonym_set_through_a_fallback_key_is_a_broker_source(client):
    """log.retention.hours sets retention.ms's default: Kafka reports STATIC_BROKER_CONFIG."""
    create_ok(client, "dc-fallback")
    assert describe(client, "dc-fallback")["configs"]["retention.ms"] == {
        "value": str(2 * 3600 * 1000), "source": "broker", "read_only": False, "is_sensitive": False}


def test_describe_configs_unknown_and_invalid_topics_are_per_topic_errors(client):
    create_ok(client, "dc-known")
    doc = call(client, "describe_configs", topics=["dc-known", "dc-unknown", "dc/../x"])
    assert [(t["name"], t["error_code"]) for t in doc["topics"]] == [
        ("dc-known", NONE), ("dc-unknown", UNKNOWN_TOPIC_OR_PARTITION), ("dc/../x", INVALID_TOPIC_EXCEPTION)]
    assert doc["topics"][1]["configs"] == {}


def test_alter_configs_sets_and_deletes_keys_at_once(client):
    create_ok(client, "ac-live", 1, {"retention.ms": "5000"})
    assert alter(client, "ac-live", {"max.message.bytes": "200"}, delete=["retention.ms"])["error_code"] == NONE
    configs = describe(client, "ac-live")["configs"]
    assert configs["max.message.bytes"] == {"value": "200", "source": "topic", "read_only": False, "is_sensitive": False}
    assert configs["retention.ms"] == {"value": str(2 * 3600 * 1000), "source": "broker", "read_only": False, "is_sensitive": False}
    # applies at once: the next produce is judged by the new max.message.bytes
    result = produce(client, "ac-live", 0, batch(b"x" * 500))
    assert result["error_code"] == MESSAGE_TOO_LARGE
    # deleting a key that is not set is fine
    assert alter(client, "ac-live", {}, delete=["max.message.bytes", "segment.ms"])["error_code"] == NONE
    assert describe(client, "ac-live")["configs"]["max.message.bytes"] == {"value": "100000", "source": "broker", "read_only": False, "is_sensitive": False}
    assert produce(client, "ac-live", 0, batch(b"x" * 500))["error_code"] == NONE


@pytest.mark.parametrize("case, configs, delete, mentions", [
    (1, {"no.such.config": "1"}, [], "no.such.config"),
    (2, {"retention.ms": "soon"}, [], "retention.ms"),
    (3, {"min.cleanable.dirty.ratio": "2"}, [], "min.cleanable.dirty.ratio"),
    (4, {}, ["no.such.config"], "no.such.config"),
])
def test_alter_configs_bad_config_is_invalid_config_and_changes_nothing(client, case, configs, delete, mentions):
    name = f"ac-bad-{case}"
    create_ok(client, name, 1, {"segment.ms": "60000"})
    before = describe(client, name)["configs"]
    result = alter(client, name, {**configs, "segment.ms": "1234"}, delete=delete)
    assert result["error_code"] == INVALID_CONFIG and mentions in result["error_message"]
    assert describe(client, name)["configs"] == before


def test_alter_configs_unknown_topic_is_per_topic_error(client):
    create_ok(client, "ac-known")
    doc = call(client, "alter_configs", topics=[
        {"name": "ac-unknown", "configs": {"retention.ms": "1"}},
        {"name": "ac-known", "configs": {"retention.ms": "1000"}},
        {"name": "..", "configs": {}},
    ])
    assert [(t["name"], t["error_code"]) for t in doc["topics"]] == [
        ("ac-unknown", UNKNOWN_TOPIC_OR_PARTITION), ("ac-known", NONE), ("..", INVALID_TOPIC_EXCEPTION)]
    assert describe(client, "ac-known")["configs"]["retention.ms"]["value"] == "1000"
    assert describe(client, "ac-unknown")["error_code"] == UNKNOWN_TOPIC_OR_PARTITION


def test_alter_configs_persist_across_a_restart(broker_factory, tmp_path):
    data = tmp_path / "persist"
    first = broker_factory(data_dir=data)
    c = first.client()
    create_ok(c, "ac-persist", 1, {"retention.ms": "5000", "segment.ms": "70000"})
    alter(c, "ac-persist", {"cleanup.policy": "compact"}, delete=["retention.ms"])
    c.close()
    assert first.stop() == 0
    second = broker_factory(data_dir=data)
    c = second.client()
    configs = describe(c, "ac-persist")["configs"]
    assert configs["cleanup.policy"] == {"value": "compact", "source": "topic", "read_only": False, "is_sensitive": False}
    assert configs["segment.ms"] == {"value": "70000", "source": "topic", "read_only": False, "is_sensitive": False}
    assert configs["retention.ms"]["source"] != "topic"
    # the restored override is in force: a compacted topic refuses keyless records
    assert produce(c, "ac-persist", 0, batch(b"v", key=None))["error_code"] == INVALID_RECORD


# == produce =================================================================================


def test_produce_acks_1_returns_offsets_and_log_start(client):
    create_ok(client, "pr-acks1")
    first = produce(client, "pr-acks1", 0, batch(b"a", b"b"))
    assert (first["error_code"], first["base_offset"], first["log_append_time"], first["log_start_offset"]) == (
        NONE, 0, -1, 0)
    second = produce(client, "pr-acks1", 0, batch(b"c"))
    assert second["base_offset"] == 2
    delete_records(client, "pr-acks1", 0, 1)
    assert produce(client, "pr-acks1", 0, batch(b"d"))["log_start_offset"] == 1
    assert values(fetch(client, "pr-acks1", 0, 1)["records"], 1) == [b"b", b"c", b"d"]


def test_produce_acks_all_returns_after_the_append(client):
    create_ok(client, "pr-acksall")
    doc = call(client, "produce", acks=-1, timeout_ms=10_000, topics=[
        {"name": "pr-acksall", "partitions": [{"partition": 0, "records": batch(b"durable")}]}])
    assert doc["throttle_ms"] == 0
    assert doc["topics"][0]["partitions"][0]["error_code"] == NONE
    assert doc["topics"][0]["partitions"][0]["base_offset"] == 0
    assert values(fetch(client, "pr-acksall", 0, 0)["records"]) == [b"durable"]


def test_produce_acks_0_sends_no_response_and_pipelined_responses_stay_in_order(client):
    create_ok(client, "pr-acks0")
    ids = [client.next_id() for _ in range(4)]
    frames = [
        {"api": "produce", "v": 1, "id": ids[0], "acks": 0, "timeout_ms": 1000,
         "topics": [{"name": "pr-acks0", "partitions": [{"partition": 0, "records": batch(b"silent")}]}]},
        {"api": "api_versions", "v": 1, "id": ids[1]},
        {"api": "produce", "v": 1, "id": ids[2], "acks": 0, "timeout_ms": 1000,
         "topics": [{"name": "pr-acks0", "partitions": [{"partition": 0, "records": batch(b"quiet")}]}]},
        {"api": "produce", "v": 1, "id": ids[3], "acks": 1, "timeout_ms": 1000,
         "topics": [{"name": "pr-acks0", "partitions": [{"partition": 0, "records": batch(b"loud")}]}]},
    ]
    client.send_raw(b"".join(struct.pack(">I", len(p)) + p for p in map(pack, frames)))
    first, second = client.recv_doc(), client.recv_doc()
    assert first["id"] == ids[1] and first["error_code"] == NONE
    assert second["id"] == ids[3] and second["topics"][0]["partitions"][0]["base_offset"] == 2
    assert values(fetch(client, "pr-acks0", 0, 0)["records"]) == [b"silent", b"quiet", b"loud"]
    assert client.is_closed(0.2) is False  # nothing else was sent


def test_produce_flipped_crc_byte_is_corrupt_message_and_writes_nothing(client):
    create_ok(client, "pr-crc")
    produce(client, "pr-crc", 0, batch(b"good"))
    bad = bytearray(batch(b"evil"))
    bad[17] ^= 0xFF
    result = produce(client, "pr-crc", 0, bytes(bad))
    assert result["error_code"] == CORRUPT_MESSAGE and "crc" in result["error_message"].lower()
    assert result["base_offset"] == -1
    flipped_payload = bytearray(batch(b"evil"))
    flipped_payload[-1] ^= 0x01
    assert produce(client, "pr-crc", 0, bytes(flipped_payload))["error_code"] == CORRUPT_MESSAGE
    assert list_offsets(client, "pr-crc", (0, -1))[0]["offset"] == 1
    assert values(fetch(client, "pr-crc", 0, 0)["records"]) == [b"good"]


def test_produce_nonzero_base_offset_is_invalid_record(client):
    create_ok(client, "pr-base")
    bad = bytearray(batch(b"v"))
    struct.pack_into(">q", bad, 0, 42)  # the base offset is outside the CRC
    result = produce(client, "pr-base", 0, bytes(bad))
    assert result["error_code"] == INVALID_RECORD and "base offset" in result["error_message"]
    assert list_offsets(client, "pr-base", (0, -1))[0]["offset"] == 0


def test_produce_two_batches_for_one_partition_is_invalid_record(client):
    create_ok(client, "pr-two")
    result = produce(client, "pr-two", 0, batch(b"a") + batch(b"b"))
    assert result["error_code"] == INVALID_RECORD and "2" in result["error_message"]
    assert fetch(client, "pr-two", 0, 0)["high_watermark"] == 0


def test_produce_over_max_message_bytes_is_message_too_large(client):
    create_ok(client, "pr-large", 1, {"max.message.bytes": "300"})
    result = produce(client, "pr-large", 0, batch(b"x" * 400))
    assert result["error_code"] == MESSAGE_TOO_LARGE and "max.message.bytes" in result["error_message"]
    assert produce(client, "pr-large", 0, batch(b"x" * 10))["base_offset"] == 0


def test_produce_over_broker_message_max_bytes_is_message_too_large(client):
    create_ok(client, "pr-large-broker")
    result = produce(client, "pr-large-broker", 0, batch(b"x" * 150_000))
    assert result["error_code"] == MESSAGE_TOO_LARGE


def test_produce_timestamp_outside_the_window_is_invalid_timestamp(client):
    create_ok(client, "pr-ts", 1, {"message.timestamp.before.max.ms": "60000"})
    future = produce(client, "pr-ts", 0, batch(b"f", timestamp=now_ms() + 3 * 3600 * 1000))
    assert future["error_code"] == INVALID_TIMESTAMP and "message.timestamp.after.max.ms" in future["error_message"]
    past = produce(client, "pr-ts", 0, batch(b"p", timestamp=now_ms() - 3600 * 1000))
    assert past["error_code"] == INVALID_TIMESTAMP and "message.timestamp.before.max.ms" in past["error_message"]
    assert fetch(client, "pr-ts", 0, 0)["high_watermark"] == 0


def test_produce_log_append_time_topic_stamps_the_broker_clock(client):
    create_ok(client, "pr-lat", 1, {"message.timestamp.type": "LogAppendTime"})
    before = now_ms()
    result = produce(client, "pr-lat", 0, batch(b"old", timestamp=1000))  # far outside any CreateTime window
    after = now_ms()
    assert result["error_code"] == NONE
    assert before - 1000 <= result["log_append_time"] <= after + 1000
    (stored,) = iter_batches(fetch(client, "pr-lat", 0, 0)["records"])
    assert stored.max_timestamp == result["log_append_time"]
    assert [r.timestamp for r in stored.records] == [result["log_append_time"]]


def test_produce_unknown_topic_without_auto_create_is_unknown_and_not_created(strict_server):
    client = strict_server.client()
    result = produce(client, "pr-nowhere", 0, batch(b"v"))
    assert result["error_code"] == UNKNOWN_TOPIC_OR_PARTITION and "pr-nowhere" in result["error_message"]
    assert not any(p.name.startswith("pr-nowhere") for p in strict_server.data_dir.iterdir())
    assert call(client, "metadata", topics=None)["topics"] == []


def test_produce_never_auto_creates_a_topic_metadata_does(client):
    """Kafka's rule: only a metadata request creates a topic; producers ask for metadata first."""
    result = produce(client, "pr-auto", 1, batch(b"v"))
    assert result["error_code"] == UNKNOWN_TOPIC_OR_PARTITION and "pr-auto" in result["error_message"]
    assert "pr-auto" not in [t["name"] for t in call(client, "metadata", topics=None)["topics"]]
    assert len(metadata_topic(client, "pr-auto")["partitions"]) == DEFAULT_PARTITIONS
    assert produce(client, "pr-auto", 1, batch(b"v"))["base_offset"] == 0


def test_produce_unknown_partition_fails_only_that_partition(client):
    create_ok(client, "pr-parts", 2)
    doc = call(client, "produce", acks=1, timeout_ms=1000, topics=[
        {"name": "pr-parts", "partitions": [
            {"partition": 0, "records": batch(b"ok")},
            {"partition": 2, "records": batch(b"no")},
            {"partition": -1, "records": batch(b"no")},
            {"partition": 1, "records": b"garbage"},
        ]},
        {"name": "pr/../bad", "partitions": [{"partition": 0, "records": batch(b"no")}]},
    ])
    parts = doc["topics"][0]["partitions"]
    assert [(p["partition"], p["error_code"]) for p in parts] == [
        (0, NONE), (2, UNKNOWN_TOPIC_OR_PARTITION), (-1, UNKNOWN_TOPIC_OR_PARTITION), (1, CORRUPT_MESSAGE)]
    assert doc["topics"][1]["partitions"][0]["error_code"] == INVALID_TOPIC_EXCEPTION
    assert values(fetch(client, "pr-parts", 0, 0)["records"]) == [b"ok"]
    assert fetch(client, "pr-parts", 1, 0)["high_watermark"] == 0


# == fetch ===================================================================================


def test_fetch_returns_records_and_offsets(client):
    create_ok(client, "fe-basic")
    produce(client, "fe-basic", 0, batch(b"a", b"b"))
    produce(client, "fe-basic", 0, batch(b"c"))
    doc = fetch_doc(client, {"fe-basic": [(0, 1, 1 << 20)]}, isolation_level=1)
    assert doc["throttle_ms"] == 0
    part = doc["topics"][0]["partitions"][0]
    assert (part["partition"], part["error_code"], part["high_watermark"], part["last_stable_offset"],
            part["log_start_offset"]) == (0, NONE, 3, 3, 0)
    # whole batches, possibly starting before fetch_offset: the consumer skips below its position
    assert iter_batches(part["records"]).__next__().base_offset == 0
    assert values(part["records"], 1) == [b"b", b"c"]
    at_end = fetch(client, "fe-basic", 0, 3)
    assert at_end["error_code"] == NONE and at_end["records"] == b""


def test_fetch_answers_at_once_when_min_bytes_are_available(client):
    create_ok(client, "fe-ready")
    produce(client, "fe-ready", 0, batch(b"ready"))
    start = time.monotonic()
    assert values(fetch(client, "fe-ready", 0, 0, max_wait_ms=LONG_WAIT_MS)["records"]) == [b"ready"]
    assert time.monotonic() - start < AT_ONCE_S


def test_fetch_long_poll_waits_max_wait_ms_then_returns_what_there_is(client):
    create_ok(client, "fe-wait")
    produce(client, "fe-wait", 0, batch(b"small"))
    start = time.monotonic()
    result = fetch(client, "fe-wait", 0, 0, max_wait_ms=400, min_bytes=1_000_000)
    waited = time.monotonic() - start
    assert 0.4 <= waited < 10  # never before max_wait_ms
    assert values(result["records"]) == [b"small"]


def test_fetch_long_poll_is_not_ended_by_an_append_below_min_bytes(client, server):
    create_ok(client, "fe-minbytes")
    producer = server.client()
    outcome = {}

    def poll():
        start = time.monotonic()
        outcome["result"] = fetch(client, "fe-minbytes", 0, 0, max_wait_ms=1000, min_bytes=100_000)
        outcome["waited"] = time.monotonic() - start

    thread = start_long_poll(server, poll)
    produce(producer, "fe-minbytes", 0, batch(b"tiny"))  # wakes it; too little: it waits on
    thread.join(20)
    assert outcome["waited"] >= 1.0  # answered no earlier than max_wait_ms
    assert values(outcome["result"]["records"]) == [b"tiny"]


def test_fetch_long_poll_is_woken_by_enough_data(client, server):
    create_ok(client, "fe-wake")
    producer = server.client()
    outcome = {}

    def poll():
        outcome["result"] = fetch(client, "fe-wake", 0, 0, max_wait_ms=60_000, min_bytes=100)
        outcome["answered"] = time.monotonic()

    thread = start_long_poll(server, poll)
    produced = time.monotonic()
    produce(producer, "fe-wake", 0, batch(b"x" * 200))
    thread.join(20)
    assert outcome["answered"] - produced < 10  # woken by the data, not by max_wait_ms
    assert values(outcome["result"]["records"]) == [b"x" * 200]


def test_fetch_max_wait_zero_answers_at_once_with_nothing(client):
    create_ok(client, "fe-nowait")
    start = time.monotonic()
    result = fetch(client, "fe-nowait", 0, 0, max_wait_ms=0)
    assert time.monotonic() - start < AT_ONCE_S
    assert result["error_code"] == NONE and result["records"] == b""


def test_fetch_min_bytes_zero_answers_at_once(client):
    create_ok(client, "fe-minzero")
    start = time.monotonic()
    result = fetch(client, "fe-minzero", 0, 0, max_wait_ms=LONG_WAIT_MS, min_bytes=0)
    assert time.monotonic() - start < AT_ONCE_S
    assert result["error_code"] == NONE and result["records"] == b""


def test_fetch_of_no_partitions_answers_at_once(client):
    """Kafka answers a fetch with nothing to fetch at once, whatever max_wait_ms says."""
    start = time.monotonic()
    doc = fetch_doc(client, {}, max_wait_ms=LONG_WAIT_MS)
    assert time.monotonic() - start < AT_ONCE_S
    assert doc["error_code"] == NONE and doc["topics"] == []


def test_fetch_partition_max_bytes_returns_whole_batches_only(client):
    create_ok(client, "fe-limit")
    for i in range(5):
        produce(client, "fe-limit", 0, batch(b"%d" % i + b"." * 100))
    size = batch_sizes(fetch(client, "fe-limit", 0, 0, partition_max_bytes=1 << 20)["records"])[0]
    for limit, expected in [(size, 1), (2 * size + size // 2, 2), (5 * size, 5), (100 * size, 5)]:
        records = fetch(client, "fe-limit", 0, 0, partition_max_bytes=limit)["records"]
        sizes = batch_sizes(records)
        assert len(sizes) == expected and sum(sizes) <= limit, (limit, sizes)
    records = fetch(client, "fe-limit", 0, 0, partition_max_bytes=1 << 20, max_bytes=3 * size + 1)["records"]
    assert len(batch_sizes(records)) == 3


def test_fetch_max_bytes_is_shared_across_partitions(client):
    create_ok(client, "fe-shared", 2)
    for p in (0, 1):
        for i in range(3):
            produce(client, "fe-shared", p, batch(b"p%d-%d" % (p, i) + b"." * 100))
    size = batch_sizes(fetch(client, "fe-shared", 0, 0)["records"])[0]
    doc = fetch_doc(client, {"fe-shared": [(0, 0, 100 * size), (1, 0, 100 * size)]}, max_bytes=4 * size)
    sizes = [batch_sizes(p["records"]) for p in doc["topics"][0]["partitions"]]
    assert [len(s) for s in sizes] == [3, 1]


def test_fetch_returns_one_whole_batch_larger_than_the_limits(client):
    create_ok(client, "fe-big")
    produce(client, "fe-big", 0, batch(b"B" * 5000))
    produce(client, "fe-big", 0, batch(b"small"))
    result = fetch(client, "fe-big", 0, 0, partition_max_bytes=100, max_bytes=100)
    sizes = batch_sizes(result["records"])
    assert len(sizes) == 1 and sizes[0] > 5000
    assert values(result["records"]) == [b"B" * 5000]
    zero = fetch(client, "fe-big", 0, 0, partition_max_bytes=0, max_bytes=0)
    assert values(zero["records"]) == [b"B" * 5000]


def test_fetch_below_log_start_is_offset_out_of_range(client):
    create_ok(client, "fe-oor-low")
    produce(client, "fe-oor-low", 0, batch(b"a", b"b", b"c"))
    assert delete_records(client, "fe-oor-low", 0, 2)["low_watermark"] == 2
    result = fetch(client, "fe-oor-low", 0, 1)
    assert result["error_code"] == OFFSET_OUT_OF_RANGE and "1" in result["error_message"]
    assert (result["high_watermark"], result["last_stable_offset"], result["log_start_offset"]) == (3, 3, 2)
    assert result["records"] == b""
    assert values(fetch(client, "fe-oor-low", 0, 2)["records"], 2) == [b"c"]


@pytest.mark.parametrize("offset", [4, 1000, 2**63 - 1, -1, -(2**63)])
def test_fetch_outside_the_log_is_offset_out_of_range(client, offset):
    name = "fe-oor"
    create(client, name)
    if fetch(client, name, 0, 0)["high_watermark"] == 0:
        produce(client, name, 0, batch(b"a", b"b", b"c"))
    result = fetch(client, name, 0, offset, max_wait_ms=3000)  # errors answer at once
    assert result["error_code"] == OFFSET_OUT_OF_RANGE
    assert result["high_watermark"] == 3 and result["log_start_offset"] == 0


def test_fetch_unknown_topic_or_partition_answers_at_once_and_creates_nothing(client, server):
    create_ok(client, "fe-known")
    start = time.monotonic()
    doc = fetch_doc(client, {"fe-known": [(0, 0, 1000), (5, 0, 1000), (-1, 0, 1000)],
                             "fe-unknown": [(0, 0, 1000)], "../fe": [(0, 0, 1000)]}, max_wait_ms=LONG_WAIT_MS)
    assert time.monotonic() - start < AT_ONCE_S
    codes = {(t["name"], p["partition"]): p["error_code"] for t in doc["topics"] for p in t["partitions"]}
    assert codes == {("fe-known", 0): NONE, ("fe-known", 5): UNKNOWN_TOPIC_OR_PARTITION,
                     ("fe-known", -1): UNKNOWN_TOPIC_OR_PARTITION, ("fe-unknown", 0): UNKNOWN_TOPIC_OR_PARTITION,
                     ("../fe", 0): INVALID_TOPIC_EXCEPTION}
    assert not any(p.name.startswith("fe-unknown") for p in server.data_dir.iterdir())


# == list_offsets ============================================================================


def test_list_offsets_latest_earliest_max_timestamp_and_time(client):
    create_ok(client, "lo-all")
    base = now_ms() - 10_000
    for ts, v in [(base, b"a"), (base + 5000, b"b"), (base + 2000, b"c")]:
        produce(client, "lo-all", 0, batch(v, timestamp=ts))
    results = list_offsets(client, "lo-all", (0, -1))
    assert (results[0]["offset"], results[0]["timestamp"]) == (3, -1)
    assert [(r["offset"], r["timestamp"]) for r in list_offsets(client, "lo-all", (0, -2))] == [(0, -1)]
    assert [(r["offset"], r["timestamp"]) for r in list_offsets(client, "lo-all", (0, -3))] == [(1, base + 5000)]
    assert [(r["offset"], r["timestamp"]) for r in list_offsets(client, "lo-all", (0, base + 1))] == [
        (1, base + 5000)]
    assert [(r["offset"], r["timestamp"]) for r in list_offsets(client, "lo-all", (0, 0))] == [(0, base)]
    assert [(r["offset"], r["timestamp"]) for r in list_offsets(client, "lo-all", (0, base + 6000))] == [(-1, -1)]
    delete_records(client, "lo-all", 0, 2)
    assert list_offsets(client, "lo-all", (0, -2))[0]["offset"] == 2


def test_list_offsets_max_timestamp_after_delete_records_still_finds_a_record(client):
    create_ok(client, "lo-max-deleted")
    base = now_ms() - 10_000
    produce(client, "lo-max-deleted", 0, batch(b"newest", timestamp=base + 5000))
    produce(client, "lo-max-deleted", 0, batch(b"older", timestamp=base))
    delete_records(client, "lo-max-deleted", 0, 1)
    (result,) = list_offsets(client, "lo-max-deleted", (0, -3))
    # Kafka answers with the segment's max-timestamp record (offset 0); the largest timestamp still
    # in the log (offset 1) would do too. "None" is wrong: there are records.
    assert (result["offset"], result["timestamp"]) in [(0, base + 5000), (1, base)]


def test_list_offsets_on_an_empty_partition(client):
    create_ok(client, "lo-empty")
    for ts in (-1, -2):  # latest and earliest: the log end / start offset, 0, with no timestamp
        assert [(r["error_code"], r["offset"], r["timestamp"]) for r in list_offsets(client, "lo-empty", (0, ts))] \
            == [(NONE, 0, -1)]
    for ts in (-3, 0, now_ms()):
        assert [(r["error_code"], r["offset"], r["timestamp"]) for r in list_offsets(client, "lo-empty", (0, ts))] \
            == [(NONE, -1, -1)]


def test_list_offsets_unknown_partition_and_topic_are_per_partition_errors(client):
    create_ok(client, "lo-known")
    results = list_offsets(client, "lo-known", (0, -1), (1, -1), (-5, -1))
    assert [(r["partition"], r["error_code"]) for r in results] == [
        (0, NONE), (1, UNKNOWN_TOPIC_OR_PARTITION), (-5, UNKNOWN_TOPIC_OR_PARTITION)]
    assert list_offsets(client, "lo-unknown", (0, -1))[0]["error_code"] == UNKNOWN_TOPIC_OR_PARTITION
    assert list_offsets(client, "lo/x", (0, -1))[0]["error_code"] == INVALID_TOPIC_EXCEPTION


# == delete_records ==========================================================================


def test_delete_records_moves_the_log_start_and_returns_the_low_watermark(client):
    create_ok(client, "dr-basic")
    produce(client, "dr-basic", 0, batch(b"a", b"b", b"c", b"d"))
    assert delete_records(client, "dr-basic", 0, 2) == {
        "partition": 0, "error_code": NONE, "error_message": None, "low_watermark": 2}
    # moving backwards is not an error; the low watermark stays
    assert delete_records(client, "dr-basic", 0, 1)["low_watermark"] == 2
    assert delete_records(client, "dr-basic", 0, -1)["low_watermark"] == 4  # -1 = high watermark
    assert metadata_topic(client, "dr-basic")["partitions"][0]["log_start_offset"] == 4
    assert fetch(client, "dr-basic", 0, 4)["records"] == b""
    assert produce(client, "dr-basic", 0, batch(b"e"))["base_offset"] == 4


@pytest.mark.parametrize("offset", [3, 2**63 - 1, -2, -(2**63)])
def test_delete_records_outside_the_log_is_offset_out_of_range(client, offset):
    name = f"dr-oor{abs(offset) % 1000}{'n' if offset < 0 else ''}"
    create_ok(client, name)
    produce(client, name, 0, batch(b"a", b"b"))
    result = delete_records(client, name, 0, offset)
    assert result["error_code"] == OFFSET_OUT_OF_RANGE and result["error_message"]
    assert result["low_watermark"] == -1
    assert list_offsets(client, name, (0, -2))[0]["offset"] == 0
    assert values(fetch(client, name, 0, 0)["records"]) == [b"a", b"b"]


def test_delete_records_unknown_topic_and_partition_are_per_partition_errors(client):
    create_ok(client, "dr-known")
    doc = call(client, "delete_records", topics=[
        {"name": "dr-known", "partitions": [{"partition": 0, "offset": 0}, {"partition": 7, "offset": 0}]},
        {"name": "dr-unknown", "partitions": [{"partition": 0, "offset": 0}]},
        {"name": "../dr", "partitions": [{"partition": 0, "offset": 0}]},
    ])
    codes = [(t["name"], p["partition"], p["error_code"]) for t in doc["topics"] for p in t["partitions"]]
    assert codes == [("dr-known", 0, NONE), ("dr-known", 7, UNKNOWN_TOPIC_OR_PARTITION),
                     ("dr-unknown", 0, UNKNOWN_TOPIC_OR_PARTITION), ("../dr", 0, INVALID_TOPIC_EXCEPTION)]
