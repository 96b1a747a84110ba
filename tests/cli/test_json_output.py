"""``--output json`` / ``-J``: every JSON output parses (json.loads on the output of the real command, run in-process)."""

from __future__ import annotations

import base64
import json

from triolog.client import Producer


def test_topics_list_and_describe_as_json(triolog, server, broker, topic):
    assert triolog("topics", *server, "--create", "--topic", topic, "--partitions", "2",
                   "--config", "retention.ms=60000", "--config", "segment.bytes=200").code == 0
    with Producer(f"127.0.0.1:{broker.port}", linger_ms=0) as producer:
        for _ in range(6):
            producer.send(topic, b"v" * 100, partition=1).get(timeout=10)

    listed = triolog("topics", *server, "--list", "-J")
    assert listed.code == 0 and topic in json.loads(listed.out)

    described = triolog("topics", *server, "--describe", "--topic", topic, "--output", "json")
    assert described.code == 0, described.stderr
    (doc,) = json.loads(described.out)
    assert (doc["name"], doc["partition_count"]) == (topic, 2)
    assert doc["configs"] == {"retention.ms": "60000", "segment.bytes": "200"}
    p0, p1 = doc["partitions"]
    files = sorted((broker.data_dir / f"{topic}-1").glob("*.log"))
    assert (p1["partition"], p1["high_watermark"], p1["log_start_offset"]) == (1, 6, 0)
    assert p1["size_bytes"] == sum(f.stat().st_size for f in files) and p1["segments"] == len(files) > 1
    assert (p0["size_bytes"], p0["segments"], p0["high_watermark"]) == (0, 1, 0)
    assert p0["log_dir"] == str(broker.data_dir.resolve())


def test_topics_describe_text_shows_size_and_segments(triolog, server, broker, topic):
    assert triolog("topics", *server, "--create", "--topic", topic, "--partitions", "1").code == 0
    with Producer(f"127.0.0.1:{broker.port}") as producer:
        producer.send(topic, b"hello", partition=0).get(timeout=10)
    lines = triolog("topics", *server, "--describe", "--topic", topic).out.splitlines()
    size = (broker.data_dir / f"{topic}-0" / "00000000000000000000.log").stat().st_size
    assert lines[1].endswith(f"\tHighWatermark: 1\tSize: {size}\tSegments: 1")


def test_topics_actions_as_json(triolog, server, topic):
    created = triolog("topics", *server, "--create", "--topic", topic, "-J")
    assert json.loads(created.out) == {"topic": topic, "result": "created"}
    again = triolog("topics", *server, "--create", "--topic", topic, "--if-not-exists", "-J")
    assert json.loads(again.out) == {"topic": topic, "result": "exists"}
    altered = triolog("topics", *server, "--alter", "--topic", topic, "--config", "retention.ms=1000", "-J")
    assert json.loads(altered.out) == {"topic": topic, "result": "altered"}
    deleted = triolog("topics", *server, "--delete", "--topic", topic, "-J")
    assert json.loads(deleted.out) == {"topic": topic, "result": "deleted"}


def test_offsets_as_json(triolog, server, broker, topic):
    with Producer(f"127.0.0.1:{broker.port}") as producer:
        for i in range(3):
            producer.send(topic, b"v", partition=0, timestamp_ms=1000 * (i + 1))
    result = triolog("offsets", *server, "--topic", topic, "--time", "1500", "-J")
    assert result.code == 0, result.stderr
    assert json.loads(result.out) == [{"topic": topic, "partition": 0, "offset": 1, "timestamp": 2000}]


def test_consume_as_json_lines_with_text_base64_null_and_headers(triolog, server, broker, topic):
    with Producer(f"127.0.0.1:{broker.port}") as producer:
        producer.send(topic, "héllo".encode(), key=b"k1", partition=0, timestamp_ms=1234,
                      headers=[("trace", b"abc"), ("raw", b"\xff\x00"), ("none", None)])
        producer.send(topic, b"\xff\xfe binary", key=None, partition=0, timestamp_ms=1235)
        producer.send(topic, None, key=b"\x80", partition=0, timestamp_ms=1236)
    result = triolog("consume", *server, "--topic", topic, "--from-beginning", "--max-messages", "3", "-J")
    assert result.code == 0, result.stderr
    first, second, third = (json.loads(line) for line in result.out.splitlines())
    assert first == {
        "topic": topic, "partition": 0, "offset": 0, "timestamp": 1234, "timestamp_type": "CreateTime",
        "key": "k1", "key_base64": False, "value": "héllo", "value_base64": False,
        "headers": [{"key": "trace", "value": "abc", "value_base64": False},
                    {"key": "raw", "value": base64.b64encode(b"\xff\x00").decode(), "value_base64": True},
                    {"key": "none", "value": None, "value_base64": False}],
    }
    assert (second["key"], second["value_base64"]) == (None, True)
    assert base64.b64decode(second["value"]) == b"\xff\xfe binary"
    assert (third["value"], third["key_base64"], base64.b64decode(third["key"])) == (None, True, b"\x80")


def test_delete_records_as_json(triolog, server, broker, topic):
    with Producer(f"127.0.0.1:{broker.port}") as producer:
        for _ in range(4):
            producer.send(topic, b"v", partition=0)
    result = triolog("delete-records", *server, "--topic", topic, "--partition", "0", "--offset", "3", "-J")
    assert result.code == 0, result.stderr
    assert json.loads(result.out) == {"partitions": [{"topic": topic, "partition": 0, "low_watermark": 3}]}
