"""A fetch response nobody reads pins a bounded number of the broker's descriptors, however many
partitions it names: the real broker under a tight RLIMIT_NOFILE, one client fetching 300
partitions into a tiny receive buffer and never reading, others still connecting and producing."""

from __future__ import annotations

import socket
import time

import msgpack

from triolog.broker.server.fetch_descriptors import DESCRIPTORS_PER_RESPONSE
from triolog.protocol.records import build_batch, iter_batches
from tests.waiting import wait_for

from .broker_process import BrokerProcess

PARTITIONS = 300
VALUE = b"v" * (48 * 1024)  # 300 x 48 KiB: far more than the sockets' buffers hold
MIB = 1 << 20


def fetch_frame(request_id: int, partitions: range) -> bytes:
    payload = msgpack.packb({"api": "fetch", "v": 1, "id": request_id, "max_wait_ms": 0, "min_bytes": 1,
                             "max_bytes": 64 * MIB, "topics": [{"name": "wide", "partitions": [
                                 {"partition": p, "fetch_offset": 0, "partition_max_bytes": MIB}
                                 for p in partitions]}]})
    return len(payload).to_bytes(4, "big") + payload


def test_a_wide_fetch_nobody_reads_pins_few_descriptors_and_others_are_served(tmp_path):
    broker = BrokerProcess(tmp_path / "data", (), rlimit_nofile=(600, 600)).start()
    try:
        client = broker.client()
        created = client.call_map("create_topics", topics=[
            {"name": "wide", "num_partitions": PARTITIONS, "replication_factor": 1, "configs": {}}])
        assert created["topics"][0]["error_code"] == 0
        now = int(time.time() * 1000)
        produced = client.call_map("produce", acks=1, timeout_ms=10_000, topics=[{"name": "wide", "partitions": [
            {"partition": p, "records": build_batch([(b"k", VALUE, now, ())])} for p in range(PARTITIONS)]}])
        assert all(p["error_code"] == 0 for p in produced["topics"][0]["partitions"])
        baseline = broker.open_descriptors()  # one per active partition, the listener, this client...
        assert baseline > PARTITIONS

        stuck = socket.socket()
        stuck.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        stuck.connect(("127.0.0.1", broker.port))
        stuck.sendall(fetch_frame(1, range(PARTITIONS)))
        # The response has started (and, unread, stalls long before its 14 MiB are out).
        wait_for(lambda: len(stuck.recv(64, socket.MSG_PEEK)) > 0, 10, "the fetch response to start")
        held = broker.open_descriptors() - baseline
        print(f"baseline {baseline} descriptors, held by the stalled fetch {held}")
        # its connection, and the segment descriptors of the response: a few, not one per partition
        assert held <= 1 + DESCRIPTORS_PER_RESPONSE, held

        for attempt in range(3):  # others still connect, produce and fetch
            other = broker.client()
            done = other.call_map("produce", acks=1, timeout_ms=10_000, topics=[{"name": "wide", "partitions": [
                {"partition": attempt, "records": build_batch([(b"k", b"after", now, ())])}]}])
            assert done["topics"][0]["partitions"][0]["error_code"] == 0
            fetched = other.call_map("fetch", max_wait_ms=0, min_bytes=1, max_bytes=MIB, topics=[
                {"name": "wide", "partitions": [{"partition": attempt, "fetch_offset": 1, "partition_max_bytes": MIB}]}])
            records = fetched["topics"][0]["partitions"][0]["records"]
            assert [r.value for b in iter_batches(records) for r in b.records] == [b"after"]
            other.close()
        # (the others' connections close on the broker's side shortly after they hang up)
        wait_for(lambda: broker.open_descriptors() - baseline <= 1 + DESCRIPTORS_PER_RESPONSE, 10,
                 "the others' connections to close while the fetch still stalls")
        assert not _closed(stuck)  # the stalled response is still in flight

        stuck.close()  # the client goes away: what the response held is given back
        wait_for(lambda: broker.open_descriptors() <= baseline, 10, "the response's descriptors to close")
        assert broker.process.poll() is None
    finally:
        broker.kill()


def _closed(sock: socket.socket) -> bool:
    sock.settimeout(0.05)
    try:
        return sock.recv(1, socket.MSG_PEEK) == b""
    except (socket.timeout, BlockingIOError):
        return False
    except ConnectionResetError:
        return True
