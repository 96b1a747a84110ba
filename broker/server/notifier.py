"""Wakes long-polling fetches when one of the partitions they wait on gets an append."""

from __future__ import annotations

from collections import defaultdict
from typing import Iterable

import trio

TopicPartition = tuple[str, int]


class AppendNotifier:
    def __init__(self) -> None:
        self._waiters: dict[TopicPartition, set[trio.Event]] = defaultdict(set)

    def notify(self, tp: TopicPartition) -> None:
        for event in self._waiters.pop(tp, ()):
            event.set()

    def register(self, tps: Iterable[TopicPartition]) -> trio.Event:
        """An event set by the next append to any of ``tps``; register before reading, so an
        append that lands between the read and the wait is not missed. Unregister when done."""
        event = trio.Event()
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
