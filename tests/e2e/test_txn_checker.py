"""Transactions checked as Jepsen's Kafka checker checks them, on the real broker process with a
kill -9 in the middle: producers (our client, threads) run transactions that commit or abort at
random while a read_committed consumer reads, and afterwards:

* no **aborted read**: no record of a transaction whose abort_transaction returned is ever read;
* no **precommitted read**: no record is read before its transaction's commit was asked for;
* no **lost write**: every record of a transaction whose commit_transaction returned is read;
* **atomicity**: a transaction is read whole or not at all (also those whose outcome the
  producer never learned: the kill came during their commit).
"""

from __future__ import annotations

import random
import threading
import time

from triolog.client import Consumer, NewTopic, Producer
from triolog.client.errors import TriologClientError

from .broker_process import BrokerProcess

PARTITIONS = 3
PRODUCERS = 3


class Ledger:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        #: transaction -> its values, and when its commit was asked for (None: never)
        self.values: dict[str, list[bytes]] = {}
        self.commit_asked: dict[str, float] = {}
        self.outcome: dict[str, str] = {}  # committed / aborted / unknown

    def record(self, txn: str, **fields) -> None:
        with self.lock:
            for name, value in fields.items():
                getattr(self, name)[txn] = value


def _producer_loop(bootstrap: str, index: int, ledger: Ledger, stop: threading.Event, seed: int) -> None:
    rng = random.Random(seed)
    n = 0
    while not stop.is_set():
        try:
            producer = Producer(bootstrap, transactional_id=f"checker-{index}", linger_ms=1, request_timeout_ms=5000,
                                max_block_ms=20000)
        except TriologClientError:
            time.sleep(0.2)
            continue
        try:
            producer.init_transactions()
            while not stop.is_set():
                txn = f"p{index}-t{n}"
                n += 1
                values = [f"{txn}-r{j}".encode() for j in range(rng.randint(1, 6))]
                ledger.record(txn, values=values)
                producer.begin_transaction()
                for j, value in enumerate(values):
                    producer.send("checked", value, partition=(index + j) % PARTITIONS)
                if rng.random() < 0.25:
                    producer.flush()  # in the log, then aborted
                    producer.abort_transaction()
                    ledger.record(txn, outcome="aborted")
                else:
                    ledger.record(txn, commit_asked=time.monotonic(), outcome="unknown")
                    producer.commit_transaction()
                    ledger.record(txn, outcome="committed")
        except TriologClientError:
            time.sleep(0.2)  # the broker died under us: a new producer takes the id over
        finally:
            try:
                producer.close(timeout=2)
            except TriologClientError:
                pass


def test_read_committed_never_sees_aborted_or_ongoing_records_across_a_kill(tmp_path):
    broker = BrokerProcess(tmp_path / "data", ("transaction.state.log.num.partitions=2",
                                               "transaction.abort.timed.out.transaction.cleanup.interval.ms=500")).start()
    bootstrap = f"127.0.0.1:{broker.port}"
    from triolog.client import AdminClient

    with AdminClient(bootstrap) as admin:
        admin.create_topics([NewTopic("checked", PARTITIONS, 1)])
    ledger = Ledger()
    reads: list[tuple[bytes, float]] = []
    stop, stop_reading = threading.Event(), threading.Event()

    def consume() -> None:
        while not stop_reading.is_set():
            try:
                with Consumer(bootstrap, auto_offset_reset="earliest", isolation_level="read_committed",
                              fetch_max_wait_ms=20, request_timeout_ms=3000) as consumer:
                    consumer.assign([("checked", p) for p in range(PARTITIONS)])
                    while not stop_reading.is_set():
                        for records in consumer.poll(100).values():
                            now = time.monotonic()
                            reads.extend((r.value, now) for r in records)
                    return
            except TriologClientError:
                reads.clear()  # read again from the start after a reconnect: keep one pass
                time.sleep(0.2)

    threads = [threading.Thread(target=_producer_loop, args=(bootstrap, i, ledger, stop, i), daemon=True)
               for i in range(PRODUCERS)]
    reader = threading.Thread(target=consume, daemon=True)
    for thread in [*threads, reader]:
        thread.start()
    time.sleep(3)
    broker.kill()  # kill -9 mid-run
    broker = BrokerProcess(tmp_path / "data", broker.overrides, port=broker.port).start()
    time.sleep(3)
    stop.set()
    for thread in threads:
        thread.join(30)
    time.sleep(3)  # the coordinator ends what the kill left open (timeouts, reloads)
    stop_reading.set()
    reader.join(30)
    broker.stop()

    outcomes = ledger.outcome
    committed = {t for t, o in outcomes.items() if o == "committed"}
    aborted = {t for t, o in outcomes.items() if o == "aborted"}
    assert len(committed) > 20 and aborted, (len(committed), len(aborted))
    owner = {v: t for t, values in ledger.values.items() for v in values}
    read_values = [v for v, _ in reads]
    assert len(read_values) == len(set(read_values)), "a record read twice"
    aborted_reads = [v for v in read_values if owner[v] in aborted]
    precommitted = [v for v, at in reads if owner[v] not in ledger.commit_asked or at < ledger.commit_asked[owner[v]]]
    read_set = set(read_values)
    lost = [v for t in committed for v in ledger.values[t] if v not in read_set]
    partial = [t for t, values in ledger.values.items() if 0 < sum(v in read_set for v in values) < len(values)]
    print(f"checker: {len(committed)} committed, {len(aborted)} aborted, {len(outcomes) - len(committed) - len(aborted)} unknown, {len(read_values)} records read")
    assert (aborted_reads, precommitted, lost, partial) == ([], [], [], [])
