"""A fetch response takes its segments' descriptors as it is sent: a segment that retention
removed (file.delete.delay.ms=0) before its turn cannot be sent, and the connection closes (as for
a segment cut short) rather than sending a wrong frame; the broker serves the others on."""

from __future__ import annotations

import socket
import struct

import trio

from triolog.broker.server.fetch_descriptors import DESCRIPTORS_PER_RESPONSE
from triolog.protocol import messages as m

from .inprocess import Client, running_broker, wait_until

PARTITIONS = 3 * DESCRIPTORS_PER_RESPONSE
VALUE = b"v" * (1 << 20)  # 24 MiB in all: more than the sockets' buffers, the response stalls


async def test_a_segment_removed_before_its_turn_closes_the_connection(tmp_path):
    async with running_broker(tmp_path) as (server, port):
        client = await Client.connect(port)
        assert (await client.create("wide", PARTITIONS, {"file.delete.delay.ms": "0", "max.message.bytes": str(2 << 20)}))["error_code"] == 0
        for p in range(PARTITIONS):
            assert (await client.produce("wide", [VALUE], partition=p))["error_code"] == 0
        last = server.topics.log("wide", PARTITIONS - 1)
        await trio.to_thread.run_sync(last.roll)
        assert (await client.produce("wide", [b"after"], partition=PARTITIONS - 1))["error_code"] == 0

        sock = trio.socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        await sock.connect(("127.0.0.1", port))
        stuck = Client(trio.SocketStream(sock))
        await stuck.send_request(m.FetchRequest(id=1, max_wait_ms=0, min_bytes=1, max_bytes=64 << 20, topics=(
            m.FetchTopic(name="wide", partitions=tuple(
                m.FetchPartition(partition=p, fetch_offset=0, partition_max_bytes=2 << 20)
                for p in range(PARTITIONS))),)))
        length = struct.unpack(">I", await stuck._receive_exact(4))[0]  # the response has started
        assert length > PARTITIONS * len(VALUE)

        def remove_first_segment():  # retention, with no delay before the files go
            last.maybe_increment_log_start_offset(1)
            assert last.delete_old_segments() == 1
            assert last.segment_deleter.run_due() > 0

        await trio.to_thread.run_sync(remove_first_segment)
        received = 0
        with trio.fail_after(30):
            while data := await stuck.stream.receive_some(1 << 20):  # read on, until the broker closes
                received += len(data)
        assert received < length  # the frame was cut, never completed with other bytes
        assert (await client.fetch("wide", 1, partition=PARTITIONS - 1))["error_code"] == 0
        await wait_until(lambda: server.handler.fetch_descriptors.held == 0, what="the budget to be given back")


async def test_a_fetch_response_leaves_the_socket_uncorked(tmp_path):
    """Fetch responses are sent corked (one segment for prefix, fields and records); the cork
    comes off at the end, or the next small response would sit in the kernel for 200 ms."""
    import socket

    from .inprocess import Client, running_broker, values_of

    cork = getattr(socket, "TCP_CORK", None)
    async with running_broker(tmp_path) as (server, port):
        client = await Client.connect(port)
        await client.create("corked")
        await client.produce("corked", [b"x" * 3000, b"y"])
        assert values_of((await client.fetch("corked", 0))["records"]) == [b"x" * 3000, b"y"]
        (connection,) = server._connections
        if cork is not None:
            assert connection.stream.socket.getsockopt(socket.IPPROTO_TCP, cork) == 0
        assert (await client.api_versions())["error_code"] == 0
