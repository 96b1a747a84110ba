"""Throttler: keeps the cleaner's I/O at ``log.cleaner.io.max.bytes.per.second`` (Kafka's Throttler).

Every check interval (300 ms) it compares the bytes observed with the desired rate and sleeps
long enough to bring the average down to it. An infinite rate never sleeps.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable


class Throttler:
    def __init__(
        self,
        desired_rate_per_sec: float,
        *,
        check_interval_ms: int = 300,
        monotonic_ns: Callable[[], int] = time.monotonic_ns,
        sleep: Callable[[float], None] = time.sleep,
    ):
        self.desired_rate_per_sec = desired_rate_per_sec
        self.check_interval_ns = check_interval_ms * 1_000_000
        self._monotonic_ns = monotonic_ns
        self._sleep = sleep
        self._lock = threading.Lock()
        self._period_start_ns = monotonic_ns()
        self._observed = 0.0
        #: Total time slept, in seconds (a metric and what the tests check).
        self.slept_s = 0.0

    @property
    def unlimited(self) -> bool:
        return math.isinf(self.desired_rate_per_sec) or self.desired_rate_per_sec >= 1.7e308

    def maybe_throttle(self, observed: float) -> None:
        if self.unlimited:
            return
        with self._lock:
            self._observed += observed
            now = self._monotonic_ns()
            elapsed_ns = now - self._period_start_ns
            if elapsed_ns <= self.check_interval_ns or self._observed <= 0:
                return
            rate = self._observed * 1e9 / elapsed_ns
            if rate > self.desired_rate_per_sec:
                sleep_ms = round(self._observed / (self.desired_rate_per_sec / 1000.0) - elapsed_ns // 1_000_000)
                if sleep_ms > 0:
                    self._sleep(sleep_ms / 1000.0)
                    self.slept_s += sleep_ms / 1000.0
            self._period_start_ns = self._monotonic_ns()
            self._observed = 0.0
