"""kcat (librdkafka's command-line client, the Debian package `make test` installs) against the
Kafka listener of a real broker process: metadata, produce, consume, offsets for times."""

from __future__ import annotations

import json
import shutil
import subprocess

from triolog.client import Producer

from tests.e2e.reading import read_partition

def _kcat(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    kcat = shutil.which("kcat")
    assert kcat, "kcat is not installed: `make test` installs it (Debian's package kcat)"
    done = subprocess.run([kcat, *args], input=stdin, capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr.decode()
    return done


def test_metadata_lists_the_kafka_listener_and_the_topics(bootstrap, msgpack_bootstrap, topic):
    with Producer(msgpack_bootstrap) as producer:
        producer.send(topic, b"x", partition=0).get(30)
    listing = json.loads(_kcat("-b", bootstrap, "-L", "-J").stdout)
    assert [(b["id"], b["name"]) for b in listing["brokers"]] == [(0, bootstrap)]
    (entry,) = [t for t in listing["topics"] if t["topic"] == topic]
    assert [p["partition"] for p in entry["partitions"]] == [0]


def test_produce_keyed_lines_and_consume_them_back(bootstrap, msgpack_bootstrap, topic):
    lines = b"".join(b"key-%d:value %d\n" % (i, i) for i in range(100))
    _kcat("-b", bootstrap, "-P", "-t", topic, "-p", "0", "-K", ":", stdin=lines)
    consumed = _kcat("-b", bootstrap, "-C", "-t", topic, "-o", "beginning", "-e", "-J").stdout.decode()
    messages = [json.loads(line) for line in consumed.splitlines()]
    assert [(m["offset"], m["key"], m["payload"]) for m in messages] == [
        (i, f"key-{i}", f"value {i}") for i in range(100)]
    ours = read_partition(msgpack_bootstrap, topic)  # the same records through triolog's protocol
    assert [(r.offset, r.key, r.value) for r in ours] == [(i, b"key-%d" % i, b"value %d" % i) for i in range(100)]


def test_offsets_for_times(bootstrap, msgpack_bootstrap, topic):
    with Producer(msgpack_bootstrap) as producer:
        for i in range(10):
            producer.send(topic, b"%d" % i, partition=0, timestamp_ms=1_700_000_000_000 + 1000 * i)
        producer.flush()
    out = _kcat("-b", bootstrap, "-Q", "-t", f"{topic}:0:1700000004500").stdout.decode()
    # The first record at or after the time: offset 5 (timestamp ...5000).
    assert f"{topic} [0] offset 5" in out, out
