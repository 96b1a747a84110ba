#!/usr/bin/env python
"""Kafka's own clients against triolog's Kafka listener, beside triolog's own client, in one run.

    .venv/bin/python bench/kafka_clients.py            # 1M records of 100 B, 200k of 1 KiB
    .venv/bin/python bench/kafka_clients.py --quick    # a tenth of that
    .venv/bin/python bench/kafka_clients.py --reps 3   # medians of 3

One broker process (data in a temp directory) with both listeners. For each value size (100 B,
1 KiB) and acks (1, all), each client produces the same count of records to a fresh one-partition
topic, then reads them back; records/s and MB/s of values (1 MB = 10^6 B), time from the first
send to the last acknowledgement (produce) or to the last record in hand (consume):

* ``kcat``: librdkafka in C (Debian's kcat), fed a file of lines; consuming with ``-c N`` (it
  exits at the Nth record). This is librdkafka's own speed: what a C, Go, .NET or Java client
  sees of the broker.
* ``confluent-kafka``: librdkafka from Python (one ``produce()`` call per record, the Python
  loop included; ``consume(10000)`` batches).
* ``triolog``: triolog's own client over the msgpack listener (``send_many``; ``poll``).

Producers are tuned as a Kafka user tunes for throughput (linger.ms=5, batch.size 1 MiB,
batch.num.messages 100k, idempotence on as is the default); acks as the row says. The issue's
goal: librdkafka >= 1M records/s of 100 B into triolog and out of it, on a 2-core machine.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.e2e.broker_process import BrokerProcess  # noqa: E402

MB = 1_000_000
PRODUCER_TUNING = {"linger.ms": "5", "batch.size": str(1 << 20), "batch.num.messages": "100000",
                   "queue.buffering.max.messages": "2000000", "queue.buffering.max.kbytes": "2000000"}


def kcat_options(settings: dict[str, str]) -> list[str]:
    """librdkafka properties as kcat's -X arguments."""
    return [x for k, v in settings.items() for x in ("-X", f"{k}={v}")]


def kcat_produce(bootstrap: str, topic: str, lines: Path, count: int, acks: str,
                 extra: dict[str, str] | None = None) -> float:
    """Seconds for kcat to produce the file's lines to partition 0; ``extra``: more librdkafka
    properties (security.protocol, ssl.*, sasl.*)."""
    options = kcat_options({**PRODUCER_TUNING, "acks": acks, **(extra or {})})
    started = time.perf_counter()
    with open(lines, "rb") as source:
        done = subprocess.run(["kcat", "-b", bootstrap, "-P", "-t", topic, "-p", "0", *options], stdin=source,
                              capture_output=True, timeout=600)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(done.stderr.decode())
    return elapsed


def kcat_consume(bootstrap: str, topic: str, count: int, extra: dict[str, str] | None = None) -> float:
    """Seconds for kcat to read ``count`` records of partition 0 from the beginning; ``extra`` as
    :func:`kcat_produce`'s."""
    options = kcat_options({"fetch.max.bytes": "52428800", **(extra or {})})
    started = time.perf_counter()
    done = subprocess.run(["kcat", "-b", bootstrap, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-c", str(count),
                           "-q", *options], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=600)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(done.stderr.decode())
    return elapsed


def confluent_produce(bootstrap: str, topic: str, value: bytes, count: int, acks: str) -> float:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": acks, **PRODUCER_TUNING})
    produce, poll = producer.produce, producer.poll
    started = time.perf_counter()
    for _ in range(count):
        try:
            produce(topic, value, partition=0)
        except BufferError:
            poll(0.01)
            produce(topic, value, partition=0)
    if producer.flush(600) != 0:
        raise RuntimeError("records left unsent")
    return time.perf_counter() - started


def confluent_consume(bootstrap: str, topic: str, count: int) -> float:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-bench", "enable.auto.commit": False,
                         "fetch.max.bytes": 52428800, "queued.max.messages.kbytes": 1048576})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got = 0
    started = time.perf_counter()
    while got < count:
        for message in consumer.consume(10000, 1.0):
            if message.error() is None:
                len(message.value())
                got += 1
    elapsed = time.perf_counter() - started
    consumer.close()
    return elapsed


def triolog_produce(bootstrap: str, topic: str, value: bytes, count: int, acks: str) -> float:
    from triolog.client import Producer

    chunk = [value] * 10_000
    with Producer(bootstrap, acks=-1 if acks == "all" else 1, batch_size=1 << 20) as producer:
        started = time.perf_counter()
        for sent in range(0, count, len(chunk)):
            producer.send_many(topic, chunk[:min(len(chunk), count - sent)], partition=0)
        producer.flush()
        return time.perf_counter() - started


def triolog_consume(bootstrap: str, topic: str, count: int) -> float:
    from triolog.client import Consumer, TopicPartition

    tp = TopicPartition(topic, 0)
    with Consumer(bootstrap, fetch_max_bytes=52428800, max_partition_fetch_bytes=16 << 20) as consumer:
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        got = 0
        started = time.perf_counter()
        while got < count:
            for records in consumer.poll(1000).values():
                for record in records:
                    len(record.value)
                got += len(records)
        return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a tenth of the counts")
    parser.add_argument("--reps", type=int, default=1)
    args = parser.parse_args()
    if shutil.which("kcat") is None:
        print("kcat is not installed (Debian's package kcat; `make test` installs it)", file=sys.stderr)
        return 2
    scale = 10 if args.quick else 1
    plans = [(100, 1_000_000 // scale), (1024, 200_000 // scale)]
    rows = []
    with tempfile.TemporaryDirectory(prefix="triolog-kafka-bench-") as tmp:
        broker = BrokerProcess(Path(tmp) / "data", ("log.segment.bytes=1073741824",), kafka=True).start(timeout_s=120)
        kafka, ours = f"127.0.0.1:{broker.kafka_port}", f"127.0.0.1:{broker.port}"
        try:
            n = 0
            for size, count in plans:
                value = b"x" * size
                lines = Path(tmp) / f"lines-{size}"
                lines.write_bytes((value[:-1] + b"\n") * count)
                for acks in ("1", "all"):
                    results: dict[str, list[tuple[float, float]]] = {"kcat": [], "confluent-kafka": [], "triolog": []}
                    for _ in range(args.reps):
                        for client in results:
                            n += 1
                            topic = f"bench-{n}"
                            if client == "kcat":
                                produced = kcat_produce(kafka, topic, lines, count, acks)
                                consumed = kcat_consume(kafka, topic, count)
                            elif client == "confluent-kafka":
                                produced = confluent_produce(kafka, topic, value, count, acks)
                                consumed = confluent_consume(kafka, topic, count)
                            else:
                                produced = triolog_produce(ours, topic, value, count, acks)
                                consumed = triolog_consume(ours, topic, count)
                            results[client].append((produced, consumed))
                    for client, times in results.items():
                        produce_s = statistics.median(t for t, _ in times)
                        consume_s = statistics.median(t for _, t in times)
                        rows.append((size, acks, client, count / produce_s, count / consume_s, size))
                    print(f"{size} B acks={acks}: done", file=sys.stderr, flush=True)
        finally:
            broker.kill()
    print(f"{'value':>6} {'acks':>4} {'client':<16} {'produce rec/s':>14} {'MB/s':>7} {'consume rec/s':>14} {'MB/s':>7}"
          f" {'vs triolog (p/c)':>17}")
    ours_by = {(s, a): (p, c) for s, a, client, p, c, _ in rows if client == "triolog"}
    for size, acks, client, produce, consume, _ in rows:
        base = ours_by[(size, acks)]
        print(f"{size:>5}B {acks:>4} {client:<16} {produce:>14,.0f} {produce * size / MB:>7.1f} {consume:>14,.0f}"
              f" {consume * size / MB:>7.1f} {produce / base[0]:>8.2f}/{consume / base[1]:.2f}")
    goal = [r for r in rows if r[0] == 100 and r[2] == "kcat"]
    for _, acks, _, produce, consume, _ in goal:
        print(f"goal (librdkafka, 100 B, acks={acks}): produce {produce:,.0f} rec/s "
              f"{'>=' if produce >= 1e6 else '<'} 1M; consume {consume:,.0f} rec/s {'>=' if consume >= 1e6 else '<'} 1M")
    return 0


if __name__ == "__main__":
    sys.exit(main())
