"""What one client can hold of the broker, in-process over real sockets: request memory
(queued.max.request.bytes), time to send a frame (request.receive.timeout.ms), idle time
(connections.max.idle.ms, -1 = forever), a response it does not read, connection slots
(max.connections). Time-based cases run on trio's MockClock: virtual seconds, no real waiting."""

from __future__ import annotations

import os
import struct
import time
from pathlib import Path

import msgpack
import trio
import trio.testing

from triolog.broker.server.connection import READ_AHEAD_BYTES
from triolog.protocol.errors import ErrorCode

from .inprocess import Client, metric, running_broker, wait_until


def api_versions_frame(request_id: int, pad: int = 0) -> bytes:
    payload = msgpack.packb({"api": "api_versions", "v": 1, "id": request_id, "pad": b"p" * pad})
    return struct.pack(">I", len(payload)) + payload


# -- queued.max.request.bytes ------------------------------------------------------------------


async def test_request_bytes_beyond_the_pool_wait_unread_until_earlier_requests_are_answered(tmp_path):
    async with running_broker(tmp_path, queued_max_request_bytes="300000") as (server, port), \
            trio.open_nursery() as senders:
        pool = server.request_pool
        holder, waiter, other = [await Client.connect(port) for _ in range(3)]
        big = api_versions_frame(1, pad=200_000)
        await holder.stream.send_all(big[:100_000])  # a frame half sent holds its whole length
        await wait_until(lambda: pool.used == len(big) - 4, what="the first frame's reservation")

        # does not fit beside it (sent from a task: unread, it fills the socket buffers and blocks)
        senders.start_soon(waiter.stream.send_all, api_versions_frame(2, pad=200_000))
        await wait_until(lambda: pool.waiting == 1, what="the second connection to wait for the pool")
        assert pool.used == len(big) - 4  # nothing is reserved for the waiting frame...
        unreserved = [c.decoder.pending_bytes for c in server._connections if not c.reserved_bytes]
        assert 0 < max(unreserved) <= 4 + READ_AHEAD_BYTES  # ...and of its body at most the read-ahead
        assert metric(server, "triolog_server_queued_request_waiters") == 1

        # a request larger than the read-ahead queues behind the waiter (first come, first served)...
        medium = await Client.connect(port)
        await medium.stream.send_all(api_versions_frame(3, pad=READ_AHEAD_BYTES))
        await wait_until(lambda: pool.waiting == 2, what="the medium request to queue behind")

        await holder.stream.send_all(big[100_000:])  # ...until the first is answered and gives back
        with trio.fail_after(10):
            assert (await holder.receive_doc())["id"] == 1
            assert (await waiter.receive_doc())["id"] == 2
            assert (await medium.receive_doc())["id"] == 3
            assert (await other.api_versions())["error_code"] == 0
        await wait_until(lambda: pool.used == 0, what="every reservation to be given back")
        for client in (holder, waiter, other, medium):
            await client.aclose()


async def test_small_requests_are_answered_promptly_while_large_frames_park_in_a_full_pool(tmp_path):
    """Senders that announce large frames and send nothing more fill the pool; a request no larger
    than the read-ahead takes nothing from it and is answered at once (the receive timeout is set
    far beyond the assertion, so waiting it out cannot pass)."""
    async with running_broker(tmp_path, queued_max_request_bytes="300000",
                              request_receive_timeout_ms="60000") as (server, port):
        pool = server.request_pool
        parked = [await Client.connect(port) for _ in range(3)]
        for client in parked:
            await client.stream.send_all(struct.pack(">I", 120_000))  # the body never comes
        await wait_until(lambda: pool.used == 240_000 and pool.waiting == 1, what="the pool to fill")

        start = time.monotonic()
        for request_id in range(3):  # each on a fresh connection, and pipelined on one
            fresh = await Client.connect(port)
            with trio.fail_after(5):
                assert (await fresh.api_versions())["error_code"] == 0
            await fresh.aclose()
        pipelined = await Client.connect(port)
        await pipelined.stream.send_all(b"".join(
            api_versions_frame(i, pad=READ_AHEAD_BYTES - 100) for i in range(5)))
        with trio.fail_after(5):
            assert [(await pipelined.receive_doc())["id"] for _ in range(5)] == list(range(5))
        assert time.monotonic() - start < 5  # far under the 60 s receive timeout
        assert pool.used == 240_000 and pool.waiting == 1  # the parked frames are still parked
        for client in (*parked, pipelined):
            await client.aclose()
        await wait_until(lambda: pool.used == 0 and pool.waiting == 0, what="the pool to be given back")


async def test_a_frame_longer_than_the_whole_pool_is_refused_at_its_prefix(tmp_path):
    async with running_broker(tmp_path, queued_max_request_bytes="100000") as (server, port):
        client = await Client.connect(port)
        await client.stream.send_all(struct.pack(">I", 100_001))  # its body never comes
        with trio.fail_after(10):
            doc = await client.receive_doc()
            assert await client.closed_by_broker()
        assert doc["error_code"] == ErrorCode.INVALID_REQUEST and doc["id"] is None
        assert "queued.max.request.bytes" in doc["error_message"] and "100001" in doc["error_message"]
        assert metric(server, "triolog_server_connections_closed_total", limit="queued.max.request.bytes") == 1
        other = await Client.connect(port)
        assert (await other.api_versions())["error_code"] == 0
        await wait_until(lambda: server.request_pool.used == 0, what="the reservation to be given back")


# -- request.receive.timeout.ms and connections.max.idle.ms (virtual time) ----------------------


async def test_a_frame_trickling_in_is_closed_after_request_receive_timeout_ms(tmp_path, autojump_clock):
    async with running_broker(tmp_path, request_receive_timeout_ms="2000") as (server, port):
        slow = await Client.connect(port)
        frame = api_versions_frame(1, pad=100)
        start = trio.current_time()
        sent = 0
        with trio.fail_after(60):
            while sent < len(frame) - 1:  # a byte every 0.5 s: each would reset an idle timer
                await slow.stream.send_all(frame[sent:sent + 1])
                sent += 1
                with trio.move_on_after(0.5):
                    if await slow.closed_by_broker():
                        break
        closed_after = trio.current_time() - start
        assert 2.0 <= closed_after <= 2.6, closed_after
        assert sent < len(frame) - 1
        assert metric(server, "triolog_server_connections_closed_total", limit="request.receive.timeout.ms") == 1
        await wait_until(lambda: server.request_pool.used == 0, what="its reservation to go back")
        other = await Client.connect(port)
        assert (await other.api_versions())["error_code"] == 0


async def test_time_waiting_for_the_pool_does_not_count_against_the_sender(tmp_path, autojump_clock):
    async with running_broker(tmp_path, request_receive_timeout_ms="2000",
                              queued_max_request_bytes="150000") as (server, port), \
            trio.open_nursery() as senders:
        holder, waiter = await Client.connect(port), await Client.connect(port)
        big = api_versions_frame(1, pad=100_000)
        await holder.stream.send_all(big[:10])
        await wait_until(lambda: server.request_pool.used > 0)
        senders.start_soon(waiter.stream.send_all, api_versions_frame(2, pad=100_000))
        await wait_until(lambda: server.request_pool.waiting == 1)
        await trio.sleep(1.9)  # nearly the whole receive timeout passes while it waits for memory
        await holder.stream.send_all(big[10:])  # the holder completes in time and is answered
        assert (await holder.receive_doc())["id"] == 1
        with trio.fail_after(10):  # the waiter now gets its full 2 s to send, and had sent it all
            assert (await waiter.receive_doc())["id"] == 2


async def test_an_idle_connection_is_closed_after_connections_max_idle_ms(tmp_path, autojump_clock):
    async with running_broker(tmp_path, connections_max_idle_ms="400") as (server, port):
        idle, busy = await Client.connect(port), await Client.connect(port)
        assert (await idle.api_versions())["error_code"] == 0
        start = trio.current_time()
        for _ in range(12):  # 1.2 s of requests 0.1 s apart: activity keeps it open
            assert (await busy.api_versions())["error_code"] == 0
            await trio.sleep(0.1)
        assert await idle.closed_by_broker()
        assert trio.current_time() - start <= 1.3
        assert (await busy.api_versions())["error_code"] == 0
        assert metric(server, "triolog_server_connections_closed_total", limit="connections.max.idle.ms") == 1


async def test_idle_minus_one_never_closes_a_connection(tmp_path, autojump_clock):
    async with running_broker(tmp_path, connections_max_idle_ms="-1") as (server, port):
        client = await Client.connect(port)
        assert (await client.api_versions())["error_code"] == 0
        await trio.sleep(3 * 3600)  # three virtual hours of silence
        assert (await client.api_versions())["error_code"] == 0
        assert metric(server, "triolog_server_connections_closed_total", limit="connections.max.idle.ms") == 0


# -- a response the client does not read --------------------------------------------------------


def _segment_descriptors(data_dir: Path) -> int:
    """Descriptors of this process open on segment files (.log) under ``data_dir``, the fetch
    regions among them. (Only this broker's: another test's session broker may run in the same
    worker process, its retention closing segment files meanwhile.)"""
    count = 0
    prefix = str(data_dir.resolve()) + os.sep
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
            if target.endswith(".log") and target.startswith(prefix):
                count += 1
        except OSError:
            pass
    return count


async def test_a_fetch_response_never_read_is_abandoned_and_its_descriptors_closed(tmp_path, autojump_clock):
    async with running_broker(tmp_path, connections_max_idle_ms="5000") as (server, port):
        producer = await Client.connect(port)
        await producer.create("unread", 4)
        for partition in range(4):
            for _ in range(4):  # 4 MiB per partition
                result = await producer.produce("unread", [b"v" * 1_000_000], partition=partition)
                assert result["error_code"] == 0
        await producer.aclose()
        baseline = _segment_descriptors(tmp_path)

        sock = trio.socket.socket()
        sock.setsockopt(trio.socket.SOL_SOCKET, trio.socket.SO_RCVBUF, 4096)
        await sock.connect(("127.0.0.1", port))
        reader = Client(trio.SocketStream(sock))
        request = reader.fetch_request("unread", max_bytes=64 << 20)
        request = type(request)(id=1, max_wait_ms=0, min_bytes=1, max_bytes=64 << 20, topics=(
            type(request.topics[0])(name="unread", partitions=tuple(
                type(request.topics[0].partitions[0])(partition=p, fetch_offset=0, partition_max_bytes=16 << 20)
                for p in range(4))),))
        await reader.send_request(request)  # 16 MiB of records that are never read
        await wait_until(lambda: _segment_descriptors(tmp_path) > baseline, what="the fetch's region descriptors")
        start = trio.current_time()
        await wait_until(lambda: metric(server, "triolog_server_connections_closed_total",
                                        limit="connections.max.idle.ms") == 1, timeout_s=60,
                         what="the stalled response to be abandoned")
        assert trio.current_time() - start >= 5.0 - 0.01
        await wait_until(lambda: _segment_descriptors(tmp_path) == baseline, what="its descriptors to be closed")
        other = await Client.connect(port)
        assert (await other.api_versions())["error_code"] == 0
        await reader.aclose()


# -- max.connections ------------------------------------------------------------------------------


def _open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


async def test_at_max_connections_new_connections_wait_in_the_backlog_holding_no_descriptor(tmp_path):
    async with running_broker(tmp_path, max_connections="2") as (server, port):
        first, second = await Client.connect(port), await Client.connect(port)
        assert (await first.api_versions())["error_code"] == 0
        assert (await second.api_versions())["error_code"] == 0
        await wait_until(lambda: server.accept_paused, what="accepting to pause")
        assert metric(server, "triolog_server_accept_paused") == 1

        before = _open_descriptors()
        waiting = [await Client.connect(port) for _ in range(10)]  # the kernel completes the handshakes
        for i, client in enumerate(waiting):
            await client.send_frame(msgpack.packb({"api": "api_versions", "v": 1, "id": 100 + i}))
        await trio.testing.wait_all_tasks_blocked(0.2)
        # 10 descriptors more in this process at most: the clients' own. The broker accepted none
        # of them (accepting them would have added 10 more).
        assert _open_descriptors() <= before + 10
        assert metric(server, "triolog_server_connections") == 2
        assert metric(server, "triolog_server_connections_opened_total") == 2

        await first.aclose()  # a slot frees: one waiting connection is accepted and answered
        with trio.fail_after(10):
            answered = []
            while not answered:
                for client in waiting:
                    with trio.move_on_after(0.05):
                        answered.append((await client.receive_doc())["id"])
        assert len(answered) == 1 and 100 <= answered[0] < 110
        assert metric(server, "triolog_server_connections") == 2
        assert (await second.api_versions())["error_code"] == 0
        for client in [second, *waiting]:
            await client.aclose()
        await wait_until(lambda: metric(server, "triolog_server_connections") == 0)
