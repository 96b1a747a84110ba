"""Named moments at which the broker can be made to kill itself, for the crash-point tests:
``TRIOLOG_CRASH_AT=name[,name...]`` in its environment arms them, and the first armed point
reached sends SIGKILL to the process (kill -9: no shutdown, no flush, no finally), which is the
only way to stop a broker between two steps microseconds apart (a transaction's markers on two
partitions). Unset, as everywhere outside those tests, a point is one frozenset lookup.

The points: ``txn.before_write.<State>`` and ``txn.after_write.<State>`` around the transaction
coordinator's record of that state (Kafka's names: ``PrepareCommit``, ``CompleteAbort``...), and
``txn.marker_appended`` after a COMMIT/ABORT marker is appended to one partition (before the next).
"""

from __future__ import annotations

import os
import signal

__all__ = ["ARMED", "crash_point"]

#: The points armed for this process, read once at import.
ARMED: frozenset[str] = frozenset(
    name.strip() for name in os.environ.get("TRIOLOG_CRASH_AT", "").split(",") if name.strip()
)


def crash_point(name: str) -> None:
    if name in ARMED:
        os.kill(os.getpid(), signal.SIGKILL)
