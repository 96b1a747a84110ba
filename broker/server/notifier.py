"""Wakes long-polling fetches when one of the partitions they wait on gets an append, or when the
broker begins to shut down (a long poll then answers what it has at once)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

import trio

TopicPartition = tuple[str, int]


class AppendNotifier:
    def __init__(self) -> None:
        self._waiters: dict[TopicPartition, set[trio.Event]] = defaultdict(set)
        self._closed = False

    @property
    def closed(self) -> bool:
        """True once shutdown began: nothing waits for appends any more."""
        return self._closed

    def notify(self, tp: TopicPartition) -> None:
        for event in self._waiters.pop(tp, ()):
            event.set()

    def close(self) -> None:
        """Wake every waiter, now and from now on (shutdown must not wait out max_wait_ms)."""
        self._closed = True
        for waiters in self._waiters.values():
            for event in waiters:
                event.set()
        self._waiters.clear()

    def register(self, tps: Iterable[TopicPartition]) -> trio.Event:
        """An event set by the next append to any of ``tps``; register before reading, so an
        append that lands between the read and the wait is not missed. Unregister when done."""
        event = trio.Event()
        if self._closed:
            event.set()
            return event
        for tp in tps:
            self._waiters[tp].add(event)
        return event

    def unregister(self, tps: Iterable[TopicPartition], event: trio.Event) -> None:
        for tp in tps:
            waiters = self._waiters.get(tp)
            if waiters is not None:
                waiters.discard(event)
                if not waiters:
                    del self._waiters[tp]
