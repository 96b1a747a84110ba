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


class FakeMeter:
    """The handler's LoopHoldMeter with its clocks replaced (a fake clock): each inline attempt
    that ``slow_attempt`` marks takes ``wall_s`` of wall time, of which ``cpu_s`` on the thread's
    CPU and ``preempted_s`` waiting for a CPU, the rest asleep (``slept``) or stolen by the
    hypervisor (not ``slept``)."""

    def __init__(self):
        from triolog.broker.server.loop_hold import LoopHoldMeter

        self.now = 1000.0
        self.own = self.waiting = 0.0
        self.sleeps = 0
        self.meter = LoopHoldMeter(wall=lambda: self.now, thread=lambda: (self.own, self.waiting, self.sleeps))

    def install(self, handler) -> None:
        """Measure ``handler``'s inline attempts (and its pauses) by this fake clock, counted from
        here: the attempts before ran on the real clocks, which a loaded machine makes slow."""
        from triolog.broker.server.loop_hold import InlineServing

        self.meter.workers = handler.workers
        handler.inline = InlineServing(handler.workers, clock=lambda: self.now, meter=self.meter)

    def slow_attempt(self, wall_s: float, cpu_s: float = 0.0, preempted_s: float = 0.0, slept: bool = True) -> None:
        self.now += wall_s
        self.own += cpu_s
        self.waiting += preempted_s
        self.sleeps += slept


def slowing_inline_appends(handler, fake: FakeMeter, **attempt) -> None:
    """Every inline append of ``handler`` takes what ``attempt`` says (FakeMeter.slow_attempt)."""
    real_append = handler._produce_rows

    def slow_inline(request, ctx, done, inline, verified=None):
        real_append(request, ctx, done, inline, verified)
        if inline:
            fake.slow_attempt(**attempt)

    handler._produce_rows = slow_inline


async def test_inline_requests_held_twice_send_the_next_ones_to_workers_for_a_while(tmp_path):
    """A kernel throttling writes holds the event loop in every inline write: after the second
    such hold within INLINE_PAUSE_S, inline serving pauses for INLINE_PAUSE_S."""
    from triolog.broker.server import loop_hold

    async with running_broker(tmp_path) as (server, port):
        client = await Client.connect(port)
        await client.create("slow")
        await client.produce("slow", [b"first"])  # records the leader epoch (in a worker)
        handler = server.handler
        fake = FakeMeter()
        fake.install(handler)
        # Asleep in the kernel for twice the limit while no other thread ran.
        slowing_inline_appends(handler, fake, wall_s=loop_hold.INLINE_SLOW_S * 2, cpu_s=0.0001)
        hops = counting_thread_hops(handler)
        assert (await client.produce("slow", [b"a"]))["base_offset"] == 1  # inline, held: a one-off?
        assert (await client.produce("slow", [b"b"]))["base_offset"] == 2  # inline, held again: pause
        assert hops == []
        assert (await client.produce("slow", [b"c"]))["base_offset"] == 3  # paused: a worker
        assert (await client.fetch("slow", 0))["records"]  # fetches too
        assert len(hops) == 2
        fake.now += loop_hold.INLINE_PAUSE_S  # the pause is over
        assert (await client.produce("slow", [b"d"]))["base_offset"] == 4  # inline, held (the last long ago)
        assert len(hops) == 2
        assert (await client.produce("slow", [b"e"]))["base_offset"] == 5  # held again: pause
        fetched = values_of((await client.fetch("slow", 0))["records"])
        assert fetched == [b"first", b"a", b"b", b"c", b"d", b"e"]
        assert len(hops) == 3
        assert (handler.inline.slow, handler.inline.held) == (4, 4)


async def test_one_inline_request_held_past_the_stall_limit_pauses_at_once(tmp_path):
    from triolog.broker.server import loop_hold

    async with running_broker(tmp_path) as (server, port):
        client = await Client.connect(port)
        await client.create("stall")
        await client.produce("stall", [b"first"])
        handler = server.handler
        fake = FakeMeter()
        fake.install(handler)
        slowing_inline_appends(handler, fake, wall_s=loop_hold.INLINE_STALL_S * 1.5, cpu_s=0.0001)
        hops = counting_thread_hops(handler)
        assert (await client.produce("stall", [b"a"]))["base_offset"] == 1
        assert hops == []
        assert (await client.produce("stall", [b"b"]))["base_offset"] == 2
        assert len(hops) == 1


async def test_inline_computation_longer_than_the_limit_pauses(tmp_path):
    """The loop busy with the request itself (no sleep at all) is held just the same."""
    from triolog.broker.server import loop_hold

    async with running_broker(tmp_path) as (server, port):
        client = await Client.connect(port)
        await client.create("cpu")
        await client.produce("cpu", [b"first"])
        handler = server.handler
        fake = FakeMeter()
        fake.install(handler)
        slowing_inline_appends(handler, fake, wall_s=loop_hold.INLINE_SLOW_S * 2,
                               cpu_s=loop_hold.INLINE_SLOW_S * 1.5, preempted_s=loop_hold.INLINE_SLOW_S * 0.5)
        hops = counting_thread_hops(handler)
        assert (await client.produce("cpu", [b"a"]))["base_offset"] == 1
        assert (await client.produce("cpu", [b"b"]))["base_offset"] == 2
        assert hops == []
        assert (await client.produce("cpu", [b"c"]))["base_offset"] == 3
        assert len(hops) == 1


async def test_a_slow_inline_request_that_was_only_preempted_does_not_pause(tmp_path):
    """Taking long without blocking (another process had the CPU) is no reason to pause."""
    from triolog.broker.server import loop_hold

    async with running_broker(tmp_path) as (server, port):
        client = await Client.connect(port)
        await client.create("busy-cpu")
        await client.produce("busy-cpu", [b"first"])
        handler = server.handler
        fake = FakeMeter()
        fake.install(handler)
        slowing_inline_appends(handler, fake, wall_s=loop_hold.INLINE_SLOW_S * 2, cpu_s=0.0001,
                               preempted_s=loop_hold.INLINE_SLOW_S * 2 - 0.0001)
        hops = counting_thread_hops(handler)
        assert (await client.produce("busy-cpu", [b"a"]))["base_offset"] == 1
        assert (await client.produce("busy-cpu", [b"b"]))["base_offset"] == 2
        assert hops == []
        assert (handler.inline.slow, handler.inline.held) == (2, 0)


async def test_a_slow_inline_request_whose_cpu_was_stolen_does_not_pause(tmp_path):
    """A virtual machine's CPU not running (steal): the thread neither slept nor waited for a
    CPU, its CPU clock stood still. Not the request's doing."""
    from triolog.broker.server import loop_hold

    async with running_broker(tmp_path) as (server, port):
        client = await Client.connect(port)
        await client.create("steal")
        await client.produce("steal", [b"first"])
        handler = server.handler
        fake = FakeMeter()
        fake.install(handler)
        slowing_inline_appends(handler, fake, wall_s=loop_hold.INLINE_SLOW_S * 4, cpu_s=0.0001, slept=False)
        hops = counting_thread_hops(handler)
        for value in (b"a", b"b", b"c"):
            assert (await client.produce("steal", [value]))["error_code"] == 0
        assert hops == []
        assert (handler.inline.slow, handler.inline.held) == (3, 0)


async def test_a_sleep_while_a_worker_thread_is_busy_does_not_pause(tmp_path):
    """Asleep while one of our workers had a request: perhaps waiting for the GIL it held."""
    from triolog.broker.server import loop_hold

    async with running_broker(tmp_path) as (server, port):
        client, other = await Client.connect(port), await Client.connect(port)
        await client.create("busy-worker")
        await client.produce("busy-worker", [b"first"])
        handler = server.handler
        fake = FakeMeter()
        fake.install(handler)
        slowing_inline_appends(handler, fake, wall_s=loop_hold.INLINE_SLOW_S * 3, cpu_s=0.0001)
        log = server.topics.log("busy-worker", 0)
        hops = counting_thread_hops(handler)
        with HeldLock(log._lock):  # a fetch of the held log waits in a worker meanwhile
            await other.send_request(other.fetch_request("busy-worker", 0))
            await wait_until(lambda: handler.workers.outstanding, what="the fetch to go to a worker")
            await client.create("free")
            await client.produce("free", [b"first"])  # the first append of a log: in a worker
            assert (await client.produce("free", [b"a"]))["base_offset"] == 1  # inline, slow, no pause
            assert (await client.produce("free", [b"b"]))["base_offset"] == 2
        assert values_of((await other.receive_doc())["topics"][0]["partitions"][0]["records"]) == [b"first"]
        assert (handler.inline.slow, handler.inline.held) == (2, 0)
        assert (await client.produce("free", [b"c"]))["base_offset"] == 3  # workers idle: slow, held
        assert handler.inline.held == 1
        assert hops.count("slow_inline") == 1  # only the first append of "free"


async def test_worker_threads_running_python_do_not_turn_inline_serving_off(tmp_path):
    """Real load, real clocks: wide fetches (too many partitions to serve inline) keep worker
    threads busy running Python, so the event loop waits for the GIL in its inline requests, often
    longer than the limit. That is not the inline work holding the loop: serving stays inline."""
    from triolog.broker.server import loop_hold
    from triolog.protocol import messages as m

    async with running_broker(tmp_path) as (server, port):
        small, wide = await Client.connect(port), await Client.connect(port)
        await small.create("small")
        await small.produce("small", [b"first"])
        partitions = 300
        assert (await wide.create("wide", partitions=partitions))["error_code"] == 0
        handler = server.handler
        wide_fetch = m.FetchRequest(id=0, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, topics=(
            m.FetchTopic(name="wide", partitions=tuple(
                m.FetchPartition(partition=p, fetch_offset=0, partition_max_bytes=1024)
                for p in range(partitions))),))
        done = trio.Event()
        loaded = [0]

        async def load(client):
            while not done.is_set():
                doc = await client.call(m.FetchRequest(**{**wide_fetch.__dict__, "id": client.next_id()}))
                assert len(doc["topics"][0]["partitions"]) == partitions
                loaded[0] += 1

        async with trio.open_nursery() as nursery:
            nursery.start_soon(load, wide)
            nursery.start_soon(load, await Client.connect(port))
            await wait_until(lambda: loaded[0] >= 2, what="the wide fetches to run")
            fetched = 0
            # Until the loop was seen waiting past the limit often enough (or 20 s on a slow machine).
            with trio.move_on_after(20):
                while handler.inline.slow < 20 or fetched < 200:
                    assert values_of((await small.fetch("small", 0))["records"]) == [b"first"]
                    fetched += 1
            done.set()
        assert handler.inline.slow >= 20, f"the loop never waited past the limit ({handler.inline.slow})"
        # Only the loop's own computation past the limit (a garbage collection in the middle of a
        # request) may still pause, not the waits for the workers.
        assert handler.inline.held * 5 <= handler.inline.slow, (handler.inline.held, handler.inline.slow)


def test_the_thread_clock_tells_computation_from_sleep():
    import time

    from triolog.broker.server.loop_hold import ThreadClock

    clock = ThreadClock()
    try:
        cpu, waiting, sleeps = clock()
        time.sleep(0.01)
        slept_cpu, _, slept_sleeps = clock()
        assert slept_cpu - cpu < 0.005 and slept_sleeps > sleeps  # asleep: no CPU time, one sleep
        deadline = time.thread_time() + 0.01
        while time.thread_time() < deadline:
            pass
        later_cpu, later_waiting, _ = clock()
        assert later_cpu - cpu >= 0.009 and later_waiting >= waiting
    finally:
        clock.close()


def test_the_meter_counts_a_real_sleep_and_real_computation_as_held():
    """Real clocks, no worker busy: a sleep in the kernel is held; so is computing."""
    import time

    from triolog.broker.server.loop_hold import LoopHoldMeter

    meter = LoopHoldMeter()
    try:
        started = meter.start()
        time.sleep(0.01)
        wall, held = meter.measure(started, 0.002)
        assert wall >= 0.01 and held >= 0.008 - (wall - 0.01)  # what preemption took is not held

        started = meter.start()
        deadline = time.thread_time() + 0.01
        while time.thread_time() < deadline:
            pass
        wall, held = meter.measure(started, 0.002)
        assert held >= 0.01
    finally:
        meter.thread.close()


async def test_the_meter_does_not_count_waiting_for_the_gil_a_worker_holds():
    """Real clocks: the loop's computation while a worker thread runs Python counts its own CPU
    time, not the time it waited for the GIL in between."""
    import time

    from triolog.broker.server.loop_hold import LoopHoldMeter, WorkerThreads

    def spin(seconds):
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            pass

    workers = WorkerThreads()
    meter = LoopHoldMeter(workers=workers)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(workers.run_sync, spin, 0.3)
            await wait_until(lambda: workers.outstanding, what="the worker to start")
            started = meter.start()
            cpu_end = time.thread_time() + 0.05
            while time.thread_time() < cpu_end:  # the GIL changes hands every switch interval
                pass
            wall, held = meter.measure(started, 0.002)
        assert 0.05 <= held < 0.07 and wall > held, (wall, held)
    finally:
        meter.thread.close()
