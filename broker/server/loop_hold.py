"""How long an inline request held the event loop, and when inline serving pauses for it.

The request handler serves a small produce, and a fetch of a log's active segment, on the event
loop when nothing can make it wait (see :mod:`.handlers`). A write into the page cache can
still block (the kernel throttling writers when the disk lags behind), so an inline request
that held the event loop longer than INLINE_SLOW_S sends every request to the worker threads
for INLINE_PAUSE_S (if it happened twice in that time, or held it past INLINE_STALL_S): the
event loop stalls at most twice per pause. What counts is the time the loop was held by the
request's own work (:class:`LoopHoldMeter`), not the time it waited for the GIL while a worker
thread ran Python (a big fetch, a metadata walk): that wait is the same with or without inline
serving, and must not turn it off.
"""

from __future__ import annotations

import math
import os
import resource
import time
from collections.abc import Callable
from typing import NamedTuple, TypeVar, TypeVarTuple

import structlog
import trio

__all__ = [
    "INLINE_PAUSE_S",
    "INLINE_SLOW_S",
    "INLINE_STALL_S",
    "InlineServing",
    "LoopHoldMeter",
    "ThreadClock",
    "ThreadTimes",
    "WorkerThreads",
]

logger = structlog.get_logger("triolog.server")

T = TypeVar("T")
Ts = TypeVarTuple("Ts")

#: An inline request that held the event loop longer than this (its own computation, or a sleep
#: in the kernel: a write throttled by the kernel, a page fault reading from disk), not merely
#: preempted by another process or waiting for the GIL, turns inline serving off for
#: INLINE_PAUSE_S (see INLINE_STALL_S).
INLINE_SLOW_S = 0.002
INLINE_PAUSE_S = 1.0
#: One hold pauses at once only if this long; a shorter one pauses when another came within
#: INLINE_PAUSE_S before it: a kernel throttling writers holds every write, while a one-off wait
#: (a journal commit on a busy disk) would otherwise cost a second of thread hops for nothing.
INLINE_STALL_S = 0.02


class ThreadTimes(NamedTuple):
    """A thread's clocks at one moment (seconds, seconds, a count)."""

    cpu: float
    waiting: float
    sleeps: int


class ThreadClock:
    """The calling thread's CPU time (``time.thread_time``), its time spent runnable but waiting
    for a CPU (Linux's /proc/thread-self/schedstat, kept open: one read per call), both in
    seconds, and how many times it went to sleep (``ru_nvcsw``). Where schedstat is missing the
    wait reads 0; where the count is missing, -1 (every slow moment then counts as a sleep).
    Bound to the thread that creates it (the event loop's, which creates the handler); its
    descriptor is opened at once, so it is there from the broker's start, not from its first use."""

    def __init__(self):
        self._fd: int | None = None
        try:
            self._fd = os.open("/proc/thread-self/schedstat", os.O_RDONLY)
        except OSError:
            pass

    def __call__(self) -> ThreadTimes:
        cpu = time.thread_time()  # first: it also brings the kernel's runtime figures up to date
        try:
            sleeps = resource.getrusage(resource.RUSAGE_THREAD).ru_nvcsw
        except (AttributeError, OSError):
            sleeps = -1
        if self._fd is None:
            return ThreadTimes(cpu, 0.0, sleeps)
        try:
            return ThreadTimes(cpu, int(os.pread(self._fd, 96, 0).split()[1]) / 1e9, sleeps)
        except (OSError, ValueError, IndexError):
            self.close()
            return ThreadTimes(cpu, 0.0, sleeps)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class WorkerThreads:
    """The broker's calls into worker threads, counted on the event loop (so without a lock):
    while any is outstanding, the loop sleeping may be the loop waiting for the GIL a worker holds
    (running Python, or preempted while holding it on a loaded machine)."""

    def __init__(self):
        self.outstanding = 0

    async def run_sync(self, fn: Callable[[*Ts], T], *args: *Ts, limiter: trio.CapacityLimiter | None = None) -> T:
        self.outstanding += 1
        try:
            return await trio.to_thread.run_sync(fn, *args, limiter=limiter)
        finally:
            self.outstanding -= 1


class LoopHoldMeter:
    """How long an inline attempt held up the event loop, from clocks the kernel keeps.

    Wall time overstates it three times over. Preemption: the thread was runnable, waiting for a
    CPU other processes had (its schedstat run delay). Steal: the virtual machine's CPU was not
    running at all (the thread neither slept nor waited, its CPU clock stood still). And waits
    for the GIL while one of our worker threads held it: the thread slept on a futex, for work
    the loop would have waited for anyway, inline serving or not. So the hold is the thread's
    own CPU time in the attempt (decode, validation, copies), plus, only if it went to sleep and
    no worker thread of ours was busy (:class:`WorkerThreads`), the time it was neither on a CPU
    nor waiting for one: a sleep then is the kernel holding the thread (a write throttled by the
    kernel, a page fault reading from disk).

    The price: a kernel stall of the loop while workers are busy is not seen (a GIL holder that
    is itself preempted or asleep, common on a loaded machine, looks the same from here); a
    thread not started through WorkerThreads (the cleaner's, which runs its rounds in a worker
    process by default) can still make a GIL wait look like a hold. The loop's own computation
    always counts. Three cheap kernel reads per attempt; the process's CPU clock, which would
    tell the other threads' share, costs as much again and is left out.
    """

    __slots__ = ("wall", "thread", "workers")

    def __init__(
        self,
        wall: Callable[[], float] = time.monotonic,
        thread: Callable[[], tuple[float, float, int]] | None = None,
        workers: WorkerThreads | None = None,
    ):
        self.wall = wall
        #: () -> (this thread's CPU seconds, its seconds waiting for a CPU, its sleeps so far).
        self.thread = thread if thread is not None else ThreadClock()
        self.workers = workers if workers is not None else WorkerThreads()

    def start(self) -> tuple[float, tuple[float, float, int], bool]:
        # The wall interval encloses the thread's (read first here, last in measure).
        return self.wall(), self.thread(), self.workers.outstanding > 0

    def measure(
        self, started: tuple[float, tuple[float, float, int], bool], limit_s: float = 0.0
    ) -> tuple[float, float]:
        """(wall seconds, seconds the loop was held) of the attempt begun at ``started``. Up to
        ``limit_s`` of wall time the hold is taken to be the wall time, without reading the CPU
        clocks (the common, fast case)."""
        wall = self.wall() - started[0]
        if wall <= limit_s:
            return wall, wall
        on_cpu, waiting, sleeps = self.thread()
        wall = self.wall() - started[0]
        own = max(0.0, on_cpu - started[1][0])
        if started[2] or (sleeps >= 0 and sleeps == started[1][2]):
            # A worker was busy (a sleep may have been a wait for the GIL), or no sleep at all
            # (the rest was preemption or steal).
            return wall, own
        preempted = max(0.0, waiting - started[1][1])
        return wall, own + max(0.0, wall - own - preempted)


class InlineServing:
    """Whether requests may be served on the event loop now, and the pause a held loop begins.
    ``clock`` is monotonic seconds."""

    def __init__(
        self, workers: WorkerThreads, *, clock: Callable[[], float] = time.monotonic, meter: LoopHoldMeter | None = None
    ):
        self.clock = clock
        #: Measures how long each inline attempt held the event loop.
        self.meter = meter if meter is not None else LoopHoldMeter(workers=workers)
        #: Until when (``clock``) nothing is served inline.
        self.paused_until = 0.0
        #: Inline attempts that took longer than INLINE_SLOW_S of wall time, and those of them
        #: found to have held the loop that long (and so paused inline serving).
        self.slow = 0
        self.held = 0
        #: When (``clock``) the last inline attempt held the loop past INLINE_SLOW_S.
        self._last_hold_at = -math.inf

    def allowed(self) -> bool:
        return self.clock() >= self.paused_until

    def start(self) -> tuple:
        return self.meter.start()

    def took(self, started: tuple) -> None:
        """Turn inline serving off for a while if the inline attempt begun at ``started`` held the
        event loop longer than INLINE_SLOW_S (see LoopHoldMeter)."""
        wall, held = self.meter.measure(started, INLINE_SLOW_S)
        if wall <= INLINE_SLOW_S:
            return
        self.slow += 1
        if held <= INLINE_SLOW_S:
            return
        self.held += 1
        now = self.clock()
        previous, self._last_hold_at = self._last_hold_at, now
        if held <= INLINE_STALL_S and now - previous > INLINE_PAUSE_S:
            return
        self.paused_until = now + INLINE_PAUSE_S
        logger.info(
            "inline_requests_paused",
            held_ms=round(held * 1000, 3),
            took_ms=round(wall * 1000, 3),
            pause_s=INLINE_PAUSE_S,
            limit_ms=INLINE_SLOW_S * 1000,
        )

    def close(self) -> None:
        """Release the meter's clock file."""
        close = getattr(self.meter.thread, "close", None)
        if close is not None:
            close()
