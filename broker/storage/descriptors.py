"""A bound on the segment files the broker holds open: a second-chance (CLOCK) LRU.

Kafka keeps a descriptor open for every segment it has touched and leaves the rest to
``ulimit -n``; many partitions, or reads across old segments, then exhaust descriptors and
every open() fails with EMFILE. Here every ``.log`` descriptor is registered with one cache
per file system (broker-wide for the real one); when more are open than the budget allows, the
least recently used idle ones are closed, and reopened on their next use (a few microseconds).

The budget is a fraction of the RLIMIT_NOFILE soft limit, read when a file is opened, so a limit
raised at startup counts. Indexes hold no descriptor at all (they are mmapped, and the
descriptor is closed right after mapping), and fetch sends from its own ``dup`` of a descriptor,
closed by the server, so closing ours never cuts a send short.

A descriptor is closed only under its owner's lock, taken without waiting: one in use is skipped,
so eviction never blocks on, or deadlocks with, a reader or an appender.
"""

from __future__ import annotations

import resource
import threading
from collections import deque
from typing import Protocol

#: Share of the RLIMIT_NOFILE soft limit that segment files may use; sockets, the cleaner's
#: pipes, checkpoint writes and fetch's duplicates need the rest.
DEFAULT_FRACTION = 0.5
MIN_BUDGET = 16


class Holder(Protocol):
    """What the cache manages: FileRecords."""

    _lock: threading.Lock
    _used: bool

    def _close_idle_descriptor(self) -> bool:
        """Close the descriptor (the lock is held by the caller); False if there is none."""


class DescriptorCache:
    def __init__(self, limit: int | None = None, *, fraction: float = DEFAULT_FRACTION):
        self._fixed_limit = limit
        self._fraction = fraction
        self._lock = threading.Lock()
        self._ring: deque[Holder] = deque()
        self._members: set[int] = set()
        self.evictions = 0

    @property
    def limit(self) -> int:
        if self._fixed_limit is not None:
            return self._fixed_limit
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft == resource.RLIM_INFINITY:
            soft = 1 << 20
        return max(MIN_BUDGET, int(soft * self._fraction))

    def __len__(self) -> int:
        return len(self._ring)

    def opened(self, holder: Holder) -> None:
        """``holder`` opened its descriptor (under its own lock): make room if over budget."""
        with self._lock:
            if id(holder) not in self._members:
                self._members.add(id(holder))
                self._ring.append(holder)
            excess = len(self._ring) - self.limit
        if excess > 0:
            self.shed(excess, keep=holder)

    def closed(self, holder: Holder) -> None:
        with self._lock:
            if id(holder) in self._members:
                self._members.discard(id(holder))
                try:
                    self._ring.remove(holder)
                except ValueError:
                    pass

    def shed(self, count: int, keep: Holder | None = None) -> int:
        """Close up to ``count`` idle descriptors, least recently used first (second chance:
        one used since the last sweep is spared once). Returns how many were closed."""
        closed = 0
        with self._lock:
            sweeps = 2 * len(self._ring)
            candidates: list[Holder] = []
            while self._ring and sweeps > 0 and len(candidates) < count:
                sweeps -= 1
                holder = self._ring.popleft()
                if holder is keep or holder._used:
                    holder._used = False
                    self._ring.append(holder)
                    continue
                candidates.append(holder)
                self._members.discard(id(holder))
        for holder in candidates:
            if holder._lock.acquire(blocking=False):
                try:
                    if holder._close_idle_descriptor():
                        closed += 1
                finally:
                    holder._lock.release()
            else:  # in use right now: not idle, keep it
                with self._lock:
                    if id(holder) not in self._members:
                        self._members.add(id(holder))
                        self._ring.append(holder)
        self.evictions += closed
        return closed
