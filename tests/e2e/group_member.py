"""One member of a consumer group, run as its own process by tests/e2e/test_consumer_groups.py
and bench/groups.py: ``python -m tests.e2e.group_member BOOTSTRAP GROUP TOPIC OUT_FILE NAME``.

Commit after processing, as an application that wants no loss does: each poll's records are
"processed" (written to OUT_FILE as one JSON line per partition, flushed, before the commit),
then committed synchronously with the batch's id as the commit metadata, so the test can tell
from ``__consumer_offsets`` which batches' commits really landed. SIGTERM: close the consumer
(leave the group) and exit 0. A line ``{"joined": ...}`` is written each time the assignment
changes, with the time, for the rebalance figures.
"""

from __future__ import annotations

import json
import signal
import sys
import time

from triolog.client import Consumer
from triolog.client.errors import CommitFailedError
from triolog.client.errors import TriologClientError

#: How long "processing" a poll's records takes, after they are written out and before the commit.
PROCESSING_S = 0.01


def main(bootstrap: str, group: str, topic: str, out_path: str, name: str) -> int:
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    out = open(out_path, "a", encoding="utf-8")
    consumer = Consumer(bootstrap, group_id=group, client_id=name, auto_offset_reset="earliest",
                        enable_auto_commit=False, session_timeout_ms=3000, heartbeat_interval_ms=300,
                        max_poll_interval_ms=20000, max_poll_records=40, fetch_max_wait_ms=100)
    consumer.subscribe([topic])
    batches = 0
    assignment: set = set()
    try:
        while not stopping:
            polled = consumer.poll(200)
            if consumer.assignment() != assignment:
                assignment = consumer.assignment()
                out.write(json.dumps({"joined": sorted(tp.partition for tp in assignment), "at": time.time(),
                                      "name": name}) + "\n")
                out.flush()
            if not polled:
                continue
            batches += 1
            batch_id = f"{name}:{batches}"
            for tp, records in polled.items():
                out.write(json.dumps({"batch": batch_id, "partition": tp.partition, "first": records[0].offset,
                                      "last": records[-1].offset, "values": [r.value.decode() for r in records]})
                          + "\n")
            out.flush()
            time.sleep(PROCESSING_S)  # the work itself: a kill -9 often lands between it and the commit
            offsets = {tp: (records[-1].offset + 1, batch_id) for tp, records in polled.items()}
            started = time.perf_counter()
            try:
                consumer.commit(offsets)
            except (CommitFailedError, TriologClientError) as exc:
                out.write(json.dumps({"commit_failed": batch_id, "error": str(exc)}) + "\n")
            else:
                out.write(json.dumps({"committed": batch_id, "ms": (time.perf_counter() - started) * 1000}) + "\n")
            out.flush()
    finally:
        consumer.close()
        out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:6]))
