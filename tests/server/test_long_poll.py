"""Long polls (fetch with max_wait_ms): woken by an append even one that lands while the poll
reads; ended by the client hanging up; answered at once when the broker shuts down. In-process
over real sockets; waits are on the broker's state (a parked long poll), never on a sleep."""

from __future__ import annotations

import time

import trio
import trio.testing

from triolog.broker.server import handlers

from .inprocess import Client, metric, running_broker, values_of, wait_until

HOUR_MS = 3_600_000


def parked(server, n: int = 1):
    return lambda: server.handler is not None and server.handler.delayed_fetches == n


async def test_a_long_poll_is_woken_by_an_append(tmp_path):
    async with running_broker(tmp_path) as (server, port):
        poller, producer = await Client.connect(port), await Client.connect(port)
        await producer.create("poll")
        await poller.send_request(poller.fetch_request("poll", max_wait_ms=HOUR_MS))
        await wait_until(parked(server), what="the fetch to park")
        assert metric(server, "triolog_server_delayed_fetches") == 1
        await producer.produce("poll", [b"late"])
        with trio.fail_after(10):
            doc = await poller.receive_doc()
        assert values_of(doc["topics"][0]["partitions"][0]["records"]) == [b"late"]
        assert server.handler.delayed_fetches == 0


async def test_a_long_poll_is_not_ended_by_an_append_below_min_bytes(tmp_path):
    async with running_broker(tmp_path) as (server, port):
        poller, producer = await Client.connect(port), await Client.connect(port)
        await producer.create("minbytes")
        start = time.monotonic()
        await poller.send_request(poller.fetch_request("minbytes", max_wait_ms=1000, min_bytes=100_000))
        await wait_until(parked(server), what="the fetch to park")
        await producer.produce("minbytes", [b"tiny"])  # wakes it: it reads, finds too little, waits on
        with trio.fail_after(10):
            doc = await poller.receive_doc()
        assert time.monotonic() - start >= 1.0  # answered no earlier than max_wait_ms
        assert values_of(doc["topics"][0]["partitions"][0]["records"]) == [b"tiny"]


async def test_a_long_poll_returns_what_there_is_after_max_wait_ms(tmp_path):
    # Real time (0.3 s): under an autojump clock virtual time races to the next deadline whenever
    # the broker works in a thread, so one of its own timeouts could fire (it failed once in 7).
    async with running_broker(tmp_path) as (server, port):
        client = await Client.connect(port)
        await client.create("quiet")
        start = trio.current_time()
        result = await client.fetch("quiet", max_wait_ms=300)
        assert trio.current_time() - start >= 0.3
        assert result["records"] == b"" and result["error_code"] == 0


async def test_an_append_landing_while_the_long_poll_reads_still_wakes_it(tmp_path):
    """The lost wake-up window, made deterministic: a produce is run to completion, over its own
    socket, exactly between the long poll's read (which saw nothing) and its wait."""
    async with running_broker(tmp_path) as (server, port):
        poller, producer = await Client.connect(port), await Client.connect(port)
        await producer.create("window")
        handler = server.handler
        real_read = handler._read_fetch
        produced = []

        def read_then_produce(request, ctx, inline=False):
            if inline:  # on the event loop nothing can land between the read and the wait: the
                raise handlers._WouldBlock  # window is the worker thread's, which this takes
            result = real_read(request, ctx)  # in a worker thread: the read has seen an empty log
            if not produced:
                produced.append(trio.from_thread.run(producer.produce, "window", [b"in the window"]))
            return result

        handler._read_fetch = read_then_produce
        await poller.send_request(poller.fetch_request("window", max_wait_ms=HOUR_MS))
        with trio.fail_after(10):  # a lost wake-up would wait the whole hour
            doc = await poller.receive_doc()
        assert produced and produced[0]["error_code"] == 0
        assert values_of(doc["topics"][0]["partitions"][0]["records"]) == [b"in the window"]


async def test_a_long_poll_ends_when_the_client_hangs_up(tmp_path):
    async with running_broker(tmp_path) as (server, port):
        client = await Client.connect(port)
        await client.create("abandoned")
        assert metric(server, "triolog_server_connections") == 1
        await client.send_request(client.fetch_request("abandoned", max_wait_ms=HOUR_MS))
        await wait_until(parked(server), what="the fetch to park")
        await client.aclose()
        await wait_until(parked(server, 0), what="the abandoned long poll to end")
        await wait_until(lambda: metric(server, "triolog_server_connections") == 0,
                         what="the connection to close")
        assert not server.notifier._waiters  # nothing left registered for wake-ups


async def test_a_long_poll_ends_when_the_client_resets_the_connection(tmp_path):
    async with running_broker(tmp_path) as (server, port):
        client = await Client.connect(port)
        await client.create("reset")
        await client.send_request(client.fetch_request("reset", max_wait_ms=HOUR_MS))
        await wait_until(parked(server), what="the fetch to park")
        sock = client.stream.socket
        sock.setsockopt(trio.socket.SOL_SOCKET, trio.socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        sock.close()  # linger 0: RST instead of FIN
        await wait_until(parked(server, 0), what="the reset long poll to end")


async def test_a_request_pipelined_behind_a_long_poll_does_not_end_it(tmp_path):
    async with running_broker(tmp_path) as (server, port):
        poller, producer = await Client.connect(port), await Client.connect(port)
        await producer.create("pipelined")
        await poller.send_request(poller.fetch_request("pipelined", max_wait_ms=HOUR_MS))
        await wait_until(parked(server), what="the fetch to park")
        await poller.send_request(poller.fetch_request("pipelined", max_wait_ms=0))  # the client is alive
        await trio.testing.wait_all_tasks_blocked(0.05)
        assert server.handler.delayed_fetches == 1
        await producer.produce("pipelined", [b"x"])
        with trio.fail_after(10):
            first, second = await poller.receive_doc(), await poller.receive_doc()
        assert values_of(first["topics"][0]["partitions"][0]["records"]) == [b"x"]
        assert second["error_code"] == 0


async def test_shutdown_answers_waiting_long_polls_at_once(tmp_path):
    with trio.fail_after(30):  # instead of the hour the long polls asked for
        async with running_broker(tmp_path) as (server, port):
            producer = await Client.connect(port)
            await producer.create("stopping")
            await producer.produce("stopping", [b"kept"])
            pollers = [await Client.connect(port) for _ in range(3)]
            for poller in pollers:
                await poller.send_request(poller.fetch_request("stopping", 1, max_wait_ms=HOUR_MS))
            await wait_until(parked(server, 3), what="three fetches to park")
            started = time.monotonic()
            server.shutdown()
            for poller in pollers:
                doc = await poller.receive_doc()
                part = doc["topics"][0]["partitions"][0]
                assert part["error_code"] == 0 and part["records"] == b"" and part["high_watermark"] == 1
                assert await poller.closed_by_broker()
    assert time.monotonic() - started < 10
