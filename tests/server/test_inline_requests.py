"""Small produces and fetches of the active segment are served on the event loop, but only when
nothing can make them wait: a log held by a worker thread, a roll, a batch to decompress go to a
worker thread, and the event loop keeps answering the other connections meanwhile."""

from __future__ import annotations

import threading

import trio

from .inprocess import Client, running_broker, values_of, wait_until


class HeldLock:
    """A log's lock held by another thread (as a flush, a roll or retention holds it)."""

    def __init__(self, lock):
        self.lock = lock
        self.held = threading.Event()
        self.release = threading.Event()
        self.thread = threading.Thread(target=self._hold, daemon=True)

    def _hold(self) -> None:
        with self.lock:
            self.held.set()
            self.release.wait(30)

    def __enter__(self) -> "HeldLock":
        self.thread.start()
        assert self.held.wait(10)
        return self

    def __exit__(self, *exc) -> None:
        self.release.set()
        self.thread.join(10)


def counting_thread_hops(handler) -> list:
    """Record the worker-thread calls the handler makes (observed, not replaced)."""
    calls = []
    real = handler._in_thread

    async def in_thread(fn, *args):
        calls.append(getattr(fn, "__name__", repr(fn)))
        return await real(fn, *args)

    handler._in_thread = in_thread
    return calls


async def test_a_small_produce_and_fetch_of_the_tail_take_no_thread_hop(tmp_path):
    async with running_broker(tmp_path) as (server, port):
        client = await Client.connect(port)
        await client.create("inline")
        hops = counting_thread_hops(server.handler)
        # The log's first append records its leader epoch (a checkpoint file): in a worker.
        assert (await client.produce("inline", [b"a", b"b"]))["base_offset"] == 0
        assert hops == ["_produce_rows"]
        assert (await client.produce("inline", [b"c"]))["base_offset"] == 2
        assert (await client.produce("inline", [b"d"]))["base_offset"] == 3
        fetched = await client.fetch("inline", 0)
        assert values_of(fetched["records"]) == [b"a", b"b", b"c", b"d"]
        assert hops == ["_produce_rows"]


async def test_a_produce_to_a_busy_log_waits_in_a_worker_while_the_loop_answers_others(tmp_path):
    async with running_broker(tmp_path) as (server, port):
        producer, other = await Client.connect(port), await Client.connect(port)
        await producer.create("busy")
        await producer.produce("busy", [b"first"])
        log = server.topics.log("busy", 0)
        hops = counting_thread_hops(server.handler)
        with HeldLock(log._lock):
            await producer.send_request(producer.produce_request("busy", [b"second"]))
            await wait_until(lambda: hops, what="the produce to go to a worker thread")
            with trio.fail_after(10):  # the event loop is not stuck behind the held lock
                assert (await other.api_versions())["error_code"] == 0
        with trio.fail_after(10):
            doc = await producer.receive_doc()
        assert doc["topics"][0]["partitions"][0]["base_offset"] == 1
        assert values_of((await other.fetch("busy", 0))["records"]) == [b"first", b"second"]


async def test_a_fetch_of_a_busy_log_waits_in_a_worker_while_the_loop_answers_others(tmp_path):
    async with running_broker(tmp_path) as (server, port):
        consumer, other = await Client.connect(port), await Client.connect(port)
        await consumer.create("busy")
        await consumer.produce("busy", [b"x", b"y"])
        log = server.topics.log("busy", 0)
        hops = counting_thread_hops(server.handler)
        with HeldLock(log._lock):
            await consumer.send_request(consumer.fetch_request("busy", 0))
            await wait_until(lambda: hops, what="the fetch to go to a worker thread")
            with trio.fail_after(10):
                assert (await other.api_versions())["error_code"] == 0
        with trio.fail_after(10):
            doc = await consumer.receive_doc()
        assert values_of(doc["topics"][0]["partitions"][0]["records"]) == [b"x", b"y"]


async def test_a_produce_that_rolls_or_is_compressed_goes_to_a_worker(tmp_path):
    from triolog.protocol import messages as m
    from triolog.protocol.record_batch import CompressionType
    from triolog.protocol.records import build_batch

    async with running_broker(tmp_path) as (server, port):
        client = await Client.connect(port)
        await client.create("rolls", configs={"segment.bytes": "1024"})
        await client.produce("rolls", [b"v" * 600])
        hops = counting_thread_hops(server.handler)
        result = await client.produce("rolls", [b"w" * 600])  # does not fit the segment: rolls
        assert result["error_code"] == 0 and result["base_offset"] == 1
        assert hops == ["_produce_rows"]
        assert server.topics.log("rolls", 0).num_segments == 2
        import time

        batch = build_batch([(b"k", b"z" * 100, int(time.time() * 1000), ())] * 3, compression=CompressionType.GZIP)
        doc = await client.call(m.ProduceRequest(id=client.next_id(), acks=1, timeout_ms=30_000, topics=(
            m.ProduceTopic(name="rolls", partitions=(m.ProducePartition(partition=0, records=batch),)),)))
        assert doc["topics"][0]["partitions"][0]["base_offset"] == 2
        assert hops == ["_produce_rows", "_produce_rows"]
        fetched = []
        offset = 0
        while offset < 5:
            records = (await client.fetch("rolls", offset))["records"]
            fetched += values_of(records)
            offset = len(fetched)
        assert fetched == [b"v" * 600, b"w" * 600] + [b"z" * 100] * 3


async def test_a_slow_inline_request_sends_the_next_ones_to_workers_for_a_while(tmp_path):
    """A write the kernel throttles blocks the event loop once; then inline serving pauses."""
    from triolog.broker.server import handlers

    async with running_broker(tmp_path) as (server, port):
        client = await Client.connect(port)
        await client.create("slow")
        await client.produce("slow", [b"first"])  # records the leader epoch (in a worker)
        handler = server.handler
        now = [1000.0]
        handler.clock = lambda: now[0]
        real_append = handler._produce_rows

        blocked = [0]
        handler.blocked_count = lambda: blocked[0]

        def slow_inline(request, done, inline):
            real_append(request, done, inline)
            if inline:  # this inline append took too long, and blocked on the way
                now[0] += handlers.INLINE_SLOW_S * 2
                blocked[0] += 1

        handler._produce_rows = slow_inline
        hops = counting_thread_hops(handler)
        assert (await client.produce("slow", [b"a"]))["base_offset"] == 1  # inline, slow
        assert hops == []
        assert (await client.produce("slow", [b"b"]))["base_offset"] == 2  # paused: a worker
        assert (await client.fetch("slow", 0))["records"]  # fetches too
        assert len(hops) == 2
        now[0] += handlers.INLINE_PAUSE_S  # the pause is over
        assert (await client.produce("slow", [b"c"]))["base_offset"] == 3
        assert len(hops) == 2
        fetched = values_of((await client.fetch("slow", 0))["records"])
        assert fetched == [b"first", b"a", b"b", b"c"]


async def test_a_slow_inline_request_that_was_only_preempted_does_not_pause(tmp_path):
    """Taking long without blocking (another process had the CPU) is no reason to pause."""
    from triolog.broker.server import handlers

    async with running_broker(tmp_path) as (server, port):
        client = await Client.connect(port)
        await client.create("busy-cpu")
        await client.produce("busy-cpu", [b"first"])
        handler = server.handler
        now = [1000.0]
        handler.clock = lambda: now[0]
        handler.blocked_count = lambda: 7  # never blocked
        real_append = handler._produce_rows

        def preempted(request, done, inline):
            real_append(request, done, inline)
            if inline:
                now[0] += handlers.INLINE_SLOW_S * 2  # slow, but never gave up the CPU itself

        handler._produce_rows = preempted
        hops = counting_thread_hops(handler)
        assert (await client.produce("busy-cpu", [b"a"]))["base_offset"] == 1
        assert (await client.produce("busy-cpu", [b"b"]))["base_offset"] == 2
        assert hops == []


def test_the_blocked_count_counts_sleeps_not_computation():
    import time

    from triolog.broker.server.handlers import _voluntary_switches

    before = _voluntary_switches()
    time.sleep(0.002)
    assert _voluntary_switches() > before
