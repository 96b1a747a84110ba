"""Transactions with our client against the real broker (in this process), in one run:

* **commits**: transactions of 1, 100 and 10,000 records (``Producer(transactional_id=...)``:
  begin, send, commit), commits/s and records/s, against the same records sent by an idempotent
  producer flushed at the same points (what a transaction adds: add_partitions_to_txn, end_txn,
  the markers and the coordinator's records);
* **read_committed**: our ``Consumer`` reading a topic whose transactions (of 100 records) abort
  1% of the time, records/s with ``isolation_level="read_committed"`` against
  ``read_uncommitted`` (issue 26's goal: >= 0.9x). read_committed delivers fewer records (the
  aborted ones), so records/s counts the records *read*: the offsets passed over per second.

Data on /dev/shm when it exists (``--data-dir`` picks a disk): the figures are the protocol's,
not a shared disk's fsyncs.

    python bench/transactions.py [--runs 3] [--scale 1.0]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from triolog.client import AdminClient, Consumer, NewTopic, Producer  # noqa: E402
from triolog.testing import InProcessBroker  # noqa: E402

VALUE = b"v" * 100


def produce(bootstrap: str, topic: str, transactions: int, size: int, transactional: bool) -> float:
    """Seconds to write ``transactions`` x ``size`` records, each group committed (or flushed)."""
    options = {"transactional_id": f"{topic}-tx"} if transactional else {}
    with Producer(bootstrap, linger_ms=5, **options) as producer:
        if transactional:
            producer.init_transactions()
        producer.send(topic, VALUE).get(10) if not transactional else None  # (metadata, connection)
        started = time.perf_counter()
        for _ in range(transactions):
            if transactional:
                producer.begin_transaction()
            if size == 1:
                producer.send(topic, VALUE, partition=0)
            else:
                producer.send_many(topic, [VALUE] * size, partition=0)
            if transactional:
                producer.commit_transaction()
            else:
                producer.flush()
        return time.perf_counter() - started


def fill_with_aborts(bootstrap: str, topic: str, transactions: int, size: int) -> int:
    """Transactions of ``size`` records, 1 in 100 aborted (after its records are in the log)."""
    with Producer(bootstrap, transactional_id=f"{topic}-fill", linger_ms=5) as producer:
        producer.init_transactions()
        for n in range(transactions):
            producer.begin_transaction()
            producer.send_many(topic, [VALUE] * size, partition=0)
            if n % 100 == 99:
                producer.flush()
                producer.abort_transaction()
            else:
                producer.commit_transaction()
    with Consumer(bootstrap) as consumer:
        return consumer.end_offsets([(topic, 0)])[(topic, 0)]


def consume(bootstrap: str, topic: str, isolation_level: str, end: int) -> tuple[float, int]:
    """(seconds to read the partition to ``end``, records delivered)."""
    with Consumer(bootstrap, auto_offset_reset="earliest", isolation_level=isolation_level,
                  fetch_max_wait_ms=10, max_poll_records=10_000) as consumer:
        consumer.assign([(topic, 0)])
        started = time.perf_counter()
        delivered = 0
        while consumer.position((topic, 0)) < end:
            delivered += sum(len(records) for records in consumer.poll(1000).values())
        return time.perf_counter() - started, delivered


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--scale", type=float, default=1.0, help="multiply the record counts")
    parser.add_argument("--data-dir", type=Path, default=Path("/dev/shm") if os.path.isdir("/dev/shm") else None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.data_dir) as tmp:
        broker = InProcessBroker(Path(tmp) / "data", ("transaction.state.log.num.partitions=1",)).start()
        bootstrap = broker.bootstrap
        try:
            with AdminClient(bootstrap) as admin:
                print("transactions of N records, our client: commits/s, records/s, and records/s against the same")
                print("records from an idempotent producer flushed at the same points (median of runs)")
                for size, count in ((1, 300), (100, 100), (10_000, 5)):
                    count = max(1, int(count * args.scale))
                    txn_times, plain_times = [], []
                    for run in range(args.runs):
                        for transactional, times in ((True, txn_times), (False, plain_times)):
                            topic = f"t{size}-{run}-{'txn' if transactional else 'idem'}"
                            admin.create_topics([NewTopic(topic, 1, 1)])
                            times.append(produce(bootstrap, topic, count, size, transactional))
                    txn, plain = statistics.median(txn_times), statistics.median(plain_times)
                    print(f"  {size:>6} records: {count / txn:9.0f} commits/s {count * size / txn:10.0f} records/s"
                          f"   idempotent {count * size / plain:10.0f} records/s   ratio {plain / txn:.2f}")

                topic = "aborts-1pc"
                admin.create_topics([NewTopic(topic, 1, 1)])
                end = fill_with_aborts(bootstrap, topic, max(100, int(1000 * args.scale)), 100)
                timings: dict[str, list[float]] = {"read_uncommitted": [], "read_committed": []}
                delivered: dict[str, int] = {}
                for _ in range(args.runs):
                    for level in timings:
                        seconds, delivered[level] = consume(bootstrap, topic, level, end)
                        timings[level].append(seconds)
                print(f"read_committed against read_uncommitted, transactions of 100 records, 1% aborted "
                      f"({end} offsets):")
                rates = {level: end / statistics.median(t) for level, t in timings.items()}
                for level, rate in rates.items():
                    print(f"  {level:<17} {rate:10.0f} offsets/s read, {delivered[level]} records delivered")
                print(f"  ratio read_committed / read_uncommitted: {rates['read_committed'] / rates['read_uncommitted']:.2f}"
                      f"  (goal >= 0.9)")
        finally:
            broker.stop()


if __name__ == "__main__":
    main()
