"""Deferred removal of deleted segments' files (Kafka's ``delete-file`` task).

A segment that retention or the cleaner removes leaves the segment map at once and its files are
renamed with ``.deleted``; the files themselves go ``file.delete.delay.ms`` later. The delay lets
a fetch that planned a read of the segment a moment earlier still send from it (its descriptor
stays valid even after the unlink, but the delay also keeps tools like dump-log from tripping
over vanished files). If the broker stops first, the loader removes leftover ``.deleted`` files
at the next start, so nothing here needs to survive a restart.

Time comes from the storage clock, so tests move a ManualClock and call :meth:`run_due`; the
server calls :meth:`run_due` from a background task.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
from typing import TYPE_CHECKING

from .clock import SYSTEM_CLOCK, Clock

if TYPE_CHECKING:
    from .segment import LogSegment

logger = logging.getLogger(__name__)


class SegmentDeleter:
    def __init__(self, clock: Clock = SYSTEM_CLOCK) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._queue: list[tuple[int, int, LogSegment | DeletedFile]] = []
        self._tiebreak = itertools.count()

    def schedule(self, segments: list[LogSegment | DeletedFile], delay_ms: int) -> None:
        """Delete the (already ``.deleted``-renamed) files of ``segments`` (or lone files) after ``delay_ms``."""
        due = self._clock.milliseconds() + max(0, delay_ms)
        with self._lock:
            for segment in segments:
                heapq.heappush(self._queue, (due, next(self._tiebreak), segment))

    def next_due_ms(self) -> int | None:
        with self._lock:
            return self._queue[0][0] if self._queue else None

    def __len__(self) -> int:
        with self._lock:
            return len(self._queue)

    def run_due(self) -> int:
        """Delete the files whose delay has passed; returns how many segments were removed."""
        now = self._clock.milliseconds()
        due: list[LogSegment | DeletedFile] = []
        with self._lock:
            while self._queue and self._queue[0][0] <= now:
                due.append(heapq.heappop(self._queue)[2])
        for segment in due:
            try:
                segment.delete_if_exists()
            except OSError:
                # The loader removes leftover .deleted files at the next start; nothing is lost.
                logger.exception("failed to delete the files of %s", segment)
        return len(due)


class DeletedFile:
    """A lone ``.deleted`` file (a removed segment's producer snapshot), queued like a segment."""

    __slots__ = ("path", "fs")

    def __init__(self, path, fs) -> None:
        self.path = path
        self.fs = fs

    def delete_if_exists(self) -> None:
        try:
            self.fs.unlink(self.path)
        except FileNotFoundError:
            pass

    def __repr__(self) -> str:
        return f"DeletedFile({self.path})"
