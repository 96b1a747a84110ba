"""Full batch validation through the real broker process: batches with a correct CRC over broken
records are refused with Kafka's codes and never reach a consumer; what Kafka rewrites (inner
offsets, the max timestamp) is rewritten; a decompression bomb costs the broker no more memory
than the topic's decompression limit."""

from __future__ import annotations

import struct
import time

import pytest

from triolog.protocol.compression import compress
from triolog.protocol.record_batch import HEADER, HEADER_SIZE, CompressionType, compute_crc
from triolog.protocol.records import encode_varint, encode_varlong, iter_batches

from .broker_process import BrokerProcess, WireClient

NONE = 0
CORRUPT_MESSAGE = 2
MESSAGE_TOO_LARGE = 10
INVALID_TIMESTAMP = 32
INVALID_RECORD = 87
MiB = 1 << 20


def produce(client: WireClient, topic: str, records: bytes) -> dict:
    doc = client.call_map("produce", acks=-1, timeout_ms=10_000,
               topics=[{"name": topic, "partitions": [{"partition": 0, "records": records}]}])
    assert doc["error_code"] == NONE, doc
    return doc["topics"][0]["partitions"][0]


def fetch_all(client: WireClient, topic: str):
    doc = client.call_map("fetch", max_wait_ms=0, min_bytes=1, max_bytes=8 * MiB, topics=[
        {"name": topic, "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 8 * MiB}]}])
    assert doc["error_code"] == NONE, doc
    part = doc["topics"][0]["partitions"][0]
    assert part["error_code"] == NONE, part
    return part["high_watermark"], [r for b in iter_batches(part["records"]) for r in b.records]


def now_ms() -> int:
    return int(time.time() * 1000)


def record(offset_delta: int, timestamp_delta: int = 0, key: bytes | None = b"k", value: bytes = b"v") -> bytes:
    body = b"\x00" + encode_varlong(timestamp_delta) + encode_varint(offset_delta)
    body += b"\x01" if key is None else encode_varint(len(key)) + key
    body += encode_varint(len(value)) + value + b"\x00"
    return encode_varint(len(body)) + body


def batch(records: bytes, count: int, *, codec: CompressionType = CompressionType.NONE, base_timestamp: int,
          max_timestamp: int | None = None, body: bytes | None = None) -> bytes:
    """A producer batch with a correct CRC around whatever record bytes a broken client wrote."""
    payload = compress(codec, records) if body is None else body
    out = bytearray(HEADER_SIZE + len(payload))
    HEADER.pack_into(out, 0, 0, len(out) - 12, -1, 2, 0, codec, count - 1, base_timestamp,
                     base_timestamp if max_timestamp is None else max_timestamp, -1, -1, -1, count)
    out[HEADER_SIZE:] = payload
    struct.pack_into(">I", out, 17, compute_crc(out))
    return bytes(out)


def peak_rss(broker: BrokerProcess) -> int:
    for line in open(f"/proc/{broker.process.pid}/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM in /proc/<pid>/status")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    broker = BrokerProcess(tmp_path_factory.mktemp("batch-validation") / "data").start()
    yield broker
    alive = broker.process.poll() is None
    code = broker.stop()
    assert alive, "the broker died on a malformed batch"
    assert code == 0
    assert [e for e in broker.events() if e.get("level") in ("error", "critical")] == []


@pytest.fixture
def client(server):
    client = server.client()
    yield client
    client.close()


def create(client: WireClient, name: str, **configs: str) -> None:
    doc = client.call_map("create_topics", topics=[
        {"name": name, "num_partitions": 1, "replication_factor": 1, "configs": configs}])
    assert doc["topics"][0]["error_code"] == NONE, doc


def broken_batches(ts: int) -> list[tuple[str, bytes, int, str]]:
    return [
        ("claims-3-holds-2", batch(record(0) + record(1), 3, base_timestamp=ts), INVALID_RECORD, "premature EOF"),
        ("claims-8-holds-5", batch(b"".join(record(i) for i in range(5)), 8, codec=CompressionType.LZ4,
                                   base_timestamp=ts), INVALID_RECORD, "premature EOF"),
        ("claims-2-holds-3", batch(b"".join(record(i) for i in range(3)), 2, base_timestamp=ts), INVALID_RECORD,
         "records still remaining"),
        ("garbage-records", batch(b"\x47" * 64, 2, base_timestamp=ts), INVALID_RECORD, "Invalid record size"),
        ("gzip-flag-over-plain-bytes", batch(b"", 2, codec=CompressionType.GZIP, base_timestamp=ts,
                                             body=record(0) + record(1)), CORRUPT_MESSAGE, "gzip"),
        ("zstd-flag-over-plain-bytes", batch(b"", 2, codec=CompressionType.ZSTD, base_timestamp=ts,
                                             body=record(0) + record(1)), CORRUPT_MESSAGE, "zstd"),
        ("one-record-two-hours-ahead", batch(record(0) + record(1, 2 * 3_600_000) + record(2), 3, base_timestamp=ts),
         INVALID_TIMESTAMP, "message.timestamp.after.max.ms"),
    ]


def test_broken_batches_are_refused_and_consumers_never_see_them(client):
    create(client, "bv-broken")
    ts = now_ms()
    for name, records, code, mention in broken_batches(ts):
        doc = client.call_map("produce", acks=-1, timeout_ms=10_000,
                   topics=[{"name": "bv-broken", "partitions": [{"partition": 0, "records": records}]}])
        entry = doc["topics"][0]["partitions"][0]
        assert (entry["error_code"], entry["base_offset"]) == (code, -1), (name, entry)
        assert mention in entry["error_message"], (name, entry["error_message"])
        assert produce(client, "bv-broken", batch(record(0, value=name.encode()), 1, base_timestamp=ts))[
            "error_code"] == NONE
    high_watermark, records = fetch_all(client, "bv-broken")
    assert high_watermark == len(broken_batches(ts))
    assert [(r.offset, r.value) for r in records] == [(i, c[0].encode()) for i, c in enumerate(broken_batches(ts))]


def test_compacted_topic_refuses_a_null_key_in_the_middle_of_a_batch(client):
    create(client, "bv-compact", **{"cleanup.policy": "compact"})
    ts = now_ms()
    doc = client.call_map("produce", acks=1, timeout_ms=10_000, topics=[{"name": "bv-compact", "partitions": [
        {"partition": 0, "records": batch(record(0) + record(1, key=None) + record(2), 3,
                                          codec=CompressionType.SNAPPY, base_timestamp=ts)}]}])
    entry = doc["topics"][0]["partitions"][0]
    assert entry["error_code"] == INVALID_RECORD and "without a key" in entry["error_message"]
    assert fetch_all(client, "bv-compact") == (0, [])


def test_inner_offsets_are_rebuilt_and_the_max_timestamp_recomputed(client):
    create(client, "bv-rewrite")
    ts = now_ms() - 60_000
    # Offset deltas 0, 0, 7 in a zstd batch whose header claims a max timestamp below its records'.
    records = record(0, 0, value=b"a") + record(0, 30_000, value=b"b") + record(7, 10, value=b"c")
    produce(client, "bv-rewrite", batch(records, 3, codec=CompressionType.ZSTD, base_timestamp=ts, max_timestamp=ts))
    _, read = fetch_all(client, "bv-rewrite")
    assert [(r.offset, r.timestamp, r.value) for r in read] == [(0, ts, b"a"), (1, ts + 30_000, b"b"),
                                                                 (2, ts + 10, b"c")]
    # The header's max timestamp is the broker's: a lookup by time finds the record the producer hid.
    doc = client.call_map("list_offsets", topics=[{"name": "bv-rewrite", "partitions": [
        {"partition": 0, "timestamp": ts + 20_000}]}])
    entry = doc["topics"][0]["partitions"][0]
    assert (entry["error_code"], entry["offset"], entry["timestamp"]) == (NONE, 1, ts + 30_000)


def test_zstd_bomb_for_a_compacted_topic_is_refused_without_inflating_the_broker(server, client):
    create(client, "bv-bomb", **{"cleanup.policy": "compact"})
    frame = bytearray(b"\x28\xb5\x2f\xfd\x00\x58")  # 8192 RLE blocks of 128 KiB: 32 KiB -> 1 GiB
    for i in range(8192):
        frame += ((128 * 1024 << 3) | 2 | (i == 8191)).to_bytes(3, "little") + b"\x00"
    bomb = batch(b"", 1000, codec=CompressionType.ZSTD, base_timestamp=now_ms(), body=bytes(frame))
    assert len(bomb) < 33 * 1024
    before = peak_rss(server)
    for _ in range(3):
        doc = client.call_map("produce", acks=1, timeout_ms=10_000, topics=[{"name": "bv-bomb", "partitions": [
            {"partition": 0, "records": bomb}]}])
        entry = doc["topics"][0]["partitions"][0]
        assert entry["error_code"] == MESSAGE_TOO_LARGE and "decompresses to more than" in entry["error_message"]
    # The default limit is 16 x max.message.bytes (16 MiB); a GiB would show here.
    assert peak_rss(server) - before < 64 * MiB, (before, peak_rss(server))
    assert fetch_all(client, "bv-bomb") == (0, [])
    produce(client, "bv-bomb", batch(record(0), 1, codec=CompressionType.ZSTD, base_timestamp=now_ms()))
    assert fetch_all(client, "bv-bomb")[0] == 1


def test_a_flood_of_zstd_bombs_from_many_connections_stays_bounded(server):
    """Sixteen connections send decompression bombs at once (the storage threads are sixteen):
    at most two batches are decompressed at a time and glibc returns their buffers, so the
    broker's peak RSS grows by a bound independent of the flood."""
    import threading

    setup = server.client()
    create(setup, "bv-flood", **{"cleanup.policy": "compact"})
    setup.close()
    # One keyed record of 64 MiB of zeros, zstd-compressed by the library (a few KiB): the shape
    # that made glibc's arenas keep the decompression buffers.
    bomb = batch(record(0, value=bytes(64 * MiB)), 1, codec=CompressionType.ZSTD, base_timestamp=now_ms())
    assert len(bomb) < 64 * 1024
    before = peak_rss(server)
    codes: list[int] = []

    def flood() -> None:
        client = server.client()
        try:
            for _ in range(4):
                doc = client.call_map("produce", acks=1, timeout_ms=30_000, topics=[
                    {"name": "bv-flood", "partitions": [{"partition": 0, "records": bomb}]}])
                codes.append(doc["topics"][0]["partitions"][0]["error_code"])
        finally:
            client.close()

    threads = [threading.Thread(target=flood) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert codes == [MESSAGE_TOO_LARGE] * 64
    # Two slots of a 16 MiB limit each, the codec's buffers and allocator slack (measured: +37 MiB;
    # bench/bombs.py's longer zstd flood shows what unbounded retention looked like: 1.3 GiB).
    assert peak_rss(server) - before < 200 * MiB, (before, peak_rss(server))
