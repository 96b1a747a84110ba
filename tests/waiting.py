"""Polling for something a background task (retention, the cleaner, a broker process) will do."""

from __future__ import annotations

import time


def wait_for(condition, timeout_s: float, what: str = "the condition", interval_s: float = 0.05):
    """Poll ``condition()`` until it returns something truthy; that value, or AssertionError."""
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        last = condition()
        if last:
            return last
        time.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}; last value: {last!r}")
