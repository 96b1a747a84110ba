"""The broker-wide budget of request bytes held in memory: Kafka's ``queued.max.request.bytes``.

A connection reserves a frame's length as soon as the frame's length prefix is read, before it
reads (and so buffers) the body, and gives it back once the request is answered. When the pool
cannot hold the next frame the connection stops reading until earlier requests give their bytes
back, as Kafka mutes a channel whose receive the memory pool cannot allocate: a flood of large
or slow requests holds at most the pool's capacity, whatever the number of connections.

Waiters are served first come, first served, so a large frame is not starved by a stream of
smaller ones that use the pool (frames within a connection's read-ahead do not: the caller lets
them bypass it, so they never wait behind large frames parked here). A frame longer than the whole pool can never fit and is refused by the caller.
"""

from __future__ import annotations

import math
from collections import deque

import trio


class RequestMemoryPool:
    """``capacity`` bytes shared by every connection; ``None`` means unbounded (``-1``)."""

    def __init__(self, capacity: int | None):
        if capacity is not None and capacity < 0:
            raise ValueError(f"capacity must be >= 0 or None, got {capacity}")
        self.capacity = math.inf if capacity is None else capacity
        #: Bytes reserved right now.
        self.used = 0
        self._waiters: deque[tuple[int, trio.Event]] = deque()

    @property
    def waiting(self) -> int:
        """Connections waiting for bytes (their reading is paused)."""
        return len(self._waiters)

    def fits(self, n: int) -> bool:
        """Whether a frame of ``n`` bytes can ever be reserved."""
        return n <= self.capacity

    async def acquire(self, n: int) -> None:
        """Reserve ``n`` bytes, waiting for earlier reservations to be released if needed."""
        if not self.fits(n):
            raise ValueError(f"{n} bytes can never fit a pool of {self.capacity} bytes")
        await trio.lowlevel.checkpoint_if_cancelled()
        if not self._waiters and self.used + n <= self.capacity:
            # No yield to the scheduler when it fits: this runs once per request.
            self.used += n
            return
        event = trio.Event()
        entry = (n, event)
        self._waiters.append(entry)
        try:
            await event.wait()
        except BaseException:
            if event.is_set():  # granted as we were cancelled: give it back
                self.release(n)
            else:
                self._waiters.remove(entry)
                self._grant()  # a large waiter leaving may let smaller ones behind it in
            raise

    def release(self, n: int) -> None:
        self.used -= n
        if self.used < 0:
            raise RuntimeError(f"released more bytes than were reserved ({self.used})")
        self._grant()

    def _grant(self) -> None:
        while self._waiters and self.used + self._waiters[0][0] <= self.capacity:
            n, event = self._waiters.popleft()
            self.used += n
            event.set()
