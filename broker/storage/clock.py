"""Wall clocks for record timestamps, rolls, retention and flush schedules.

The storage layer never calls time.time() itself: tests pass a ManualClock and move it, so
time-based behaviour is tested without sleeping. (Timeouts and schedules use trio's clock.)
"""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def milliseconds(self) -> int: ...


class SystemClock:
    def milliseconds(self) -> int:
        return time.time_ns() // 1_000_000


class ManualClock:
    """A clock that only moves when told to."""

    def __init__(self, start_ms: int = 1_700_000_000_000):
        self.now_ms = start_ms

    def milliseconds(self) -> int:
        return self.now_ms

    def advance(self, delta_ms: int) -> None:
        self.now_ms += delta_ms


SYSTEM_CLOCK = SystemClock()
