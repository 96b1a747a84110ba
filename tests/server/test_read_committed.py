"""read_committed over the wire, on the real broker: transactional batches from an idempotent
producer id, COMMIT/ABORT markers written through Log.append_end_txn_marker (as the coordinator's
WriteTxnMarkers will), and what fetch and list_offsets answer for isolation levels 0 and 1, on
the msgpack listener and on the Kafka listener (whose record bytes still go by sendfile)."""

from __future__ import annotations

import os
import time

import trio

from triolog.protocol import messages as m
from triolog.protocol.kafka.schema import build, request_class
from triolog.protocol.records import build_batch, iter_batches

from tests.kafka.kafka_wire import connect, decode_response, encode_request, read_frame

from .inprocess import Client, running_broker


#: These tests write markers themselves, with no transaction coordinator behind the batches.
NO_VERIFICATION = {"transaction_partition_verification_enable": "false"}


async def _producer_id(client: Client) -> int:
    answer = await client.call(m.InitProducerIdRequest(id=client.next_id()))
    assert answer["error_code"] == 0
    return answer["producer_id"]


async def _produce(client: Client, topic: str, values, *, pid: int = -1, sequence: int = -1,
                   transactional: bool = False) -> dict:
    now = int(time.time() * 1000)
    batch = build_batch([(b"k", v, now, ()) for v in values], producer_id=pid, producer_epoch=0 if pid >= 0 else -1,
                        base_sequence=sequence, is_transactional=transactional)
    doc = await client.call(m.ProduceRequest(id=client.next_id(), acks=1, timeout_ms=30_000, topics=(
        m.ProduceTopic(name=topic, partitions=(m.ProducePartition(partition=0, records=batch),)),),
        transactional_id="tx" if transactional else None))
    return doc["topics"][0]["partitions"][0]


async def _fetch(client: Client, topic: str, isolation_level: int, offset: int = 0) -> dict:
    request = m.FetchRequest(id=client.next_id(), max_wait_ms=0, min_bytes=1, max_bytes=1 << 20,
                             isolation_level=isolation_level, topics=(m.FetchTopic(name=topic, partitions=(
                                 m.FetchPartition(partition=0, fetch_offset=offset, partition_max_bytes=1 << 20),)),))
    return (await client.call(request))["topics"][0]["partitions"][0]


async def _latest(client: Client, topic: str, isolation_level: int) -> int:
    request = m.ListOffsetsRequest(id=client.next_id(), isolation_level=isolation_level, topics=(
        m.ListOffsetsTopic(name=topic, partitions=(m.ListOffsetsPartition(partition=0, timestamp=-1),)),))
    return (await client.call(request))["topics"][0]["partitions"][0]["offset"]


def _values(records: bytes) -> list[bytes]:
    return [r.value for b in iter_batches(records) if not b.header.is_control for r in b.records]


async def _write_transactions(client: Client, server, topic: str) -> tuple[int, int]:
    """plain(0) a(1) b(2) a(3) ABORT a(4) plain(5) b(6) COMMIT b(7) c(8): c's transaction is
    still open, so the LSO is 8. Returns the producer ids of a and b."""
    await client.create(topic)
    log = server.log_manager.get_log(topic, 0)
    a, b, c = [await _producer_id(client) for _ in range(3)]
    assert (await _produce(client, topic, [b"plain-0"]))["error_code"] == 0
    assert (await _produce(client, topic, [b"a-1"], pid=a, sequence=0, transactional=True))["error_code"] == 0
    assert (await _produce(client, topic, [b"b-2"], pid=b, sequence=0, transactional=True))["error_code"] == 0
    assert (await _produce(client, topic, [b"a-3"], pid=a, sequence=1, transactional=True))["error_code"] == 0
    log.append_end_txn_marker(a, 0, 0, committed=False, leader_epoch=0)
    assert (await _produce(client, topic, [b"plain-5"]))["error_code"] == 0
    assert (await _produce(client, topic, [b"b-6"], pid=b, sequence=1, transactional=True))["error_code"] == 0
    log.append_end_txn_marker(b, 0, 0, committed=True, leader_epoch=0)
    assert (await _produce(client, topic, [b"c-8"], pid=c, sequence=0, transactional=True))["error_code"] == 0
    return a, b


async def test_read_committed_fetch_stops_at_the_lso_and_lists_the_aborted_transactions(tmp_path):
    async with running_broker(tmp_path, **NO_VERIFICATION) as (server, port):
        client = await Client.connect(port)
        a, _ = await _write_transactions(client, server, "txn")
        uncommitted = await _fetch(client, "txn", 0)
        assert uncommitted["high_watermark"] == 9 and uncommitted["last_stable_offset"] == 8
        assert uncommitted.get("aborted_transactions") is None
        assert _values(uncommitted["records"]) == [b"plain-0", b"a-1", b"b-2", b"a-3", b"plain-5", b"b-6", b"c-8"]
        committed = await _fetch(client, "txn", 1)
        assert committed["last_stable_offset"] == 8 and committed["high_watermark"] == 9
        assert committed["aborted_transactions"] == [{"producer_id": a, "first_offset": 1}]
        assert [b.header.base_offset for b in iter_batches(committed["records"])] == list(range(8))
        # From past the aborted transaction: nothing to skip, an empty list (not nil).
        later = await _fetch(client, "txn", 1, offset=5)
        assert later["aborted_transactions"] == [] and _values(later["records"]) == [b"plain-5", b"b-6"]
        assert (await _fetch(client, "txn", 1, offset=8))["records"] == b""
        assert await _latest(client, "txn", 1) == 8 and await _latest(client, "txn", 0) == 9
        # A plain batch from a producer inside its transaction is refused.
        opened = await _produce(client, "txn", [b"x"], pid=a, sequence=2, transactional=True)
        assert opened["error_code"] == 0 and opened["base_offset"] == 9  # a's next transaction
        refused = await _produce(client, "txn", [b"y"], pid=a, sequence=3)
        assert refused["error_code"] == 48 and "transaction" in refused["error_message"]  # INVALID_TXN_STATE
        await client.aclose()


async def test_read_committed_on_the_kafka_listener_with_sendfile(tmp_path, monkeypatch):
    sent: list[int] = []
    real_sendfile = os.sendfile

    def counting_sendfile(out_fd, in_fd, offset, count):
        n = real_sendfile(out_fd, in_fd, offset, count)
        sent.append(n)
        return n

    monkeypatch.setattr(os, "sendfile", counting_sendfile)
    async with running_broker(tmp_path, kafka_listeners="PLAINTEXT://127.0.0.1:0", **NO_VERIFICATION) as (server, port):
        client = await Client.connect(port)
        a, _ = await _write_transactions(client, server, "ktxn")
        address = f"127.0.0.1:{server.kafka_context.port}"

        def kafka_call(api_key: int, version: int, values: dict):
            with connect(address) as sock:
                sock.sendall(encode_request(api_key, version, 7, build(request_class(api_key, version), values)))
                return decode_response(api_key, version, read_frame(sock))[1]

        def fetch(isolation_level: int):
            return kafka_call(1, 12, {
                "max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": isolation_level,
                "session_epoch": -1, "topics": [{"topic": "ktxn", "partitions": [
                    {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}]}).responses[0].partitions[0]

        committed = await trio.to_thread.run_sync(fetch, 1)
        uncommitted = await trio.to_thread.run_sync(fetch, 0)
        latest = await trio.to_thread.run_sync(kafka_call, 2, 5, {
            "replica_id": -1, "isolation_level": 1, "topics": [
                {"name": "ktxn", "partitions": [{"partition_index": 0, "timestamp": -1}]}]})
    assert int(committed.error_code) == 0
    assert (committed.high_watermark, committed.last_stable_offset) == (9, 8)
    assert [(t.producer_id, t.first_offset) for t in committed.aborted_transactions] == [(a, 1)]
    assert [b.header.base_offset for b in iter_batches(committed.records)] == list(range(8))
    assert uncommitted.aborted_transactions is None and uncommitted.last_stable_offset == 8
    assert sum(sent) == len(committed.records) + len(uncommitted.records), "record bytes went by sendfile"
    assert latest.topics[0].partitions[0].offset == 8
