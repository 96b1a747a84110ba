#!/usr/bin/env python
"""The Spark sink's exactly-once mode against its at-least-once mode, in one run.

    .venv/bin/python bench/spark_write.py                  # 400,000 records of 100 B, 4 partitions
    .venv/bin/python bench/spark_write.py --records 1000000 --reps 5

One broker process (the real one, data in a temp directory) holds a source topic of
``--records`` records of 100 B in 4 partitions. A Structured Streaming query on ``local[2]``
copies it into a new 4-partition topic with ``trigger(availableNow=True)``: once as one
micro-batch, and once in micro-batches of ``--batch-records`` (``maxOffsetsPerTrigger``), since
exactly-once pays a transaction per task and micro-batch. The two modes alternate, ``--reps``
times each, every run into a new target topic from a new checkpoint; rows/s counts from start()
to the query's end (so Spark's per-batch costs are in both). Printed: the median rows/s of each
mode and exactly-once / at-least-once. The figures compare within one run only.
"""

from __future__ import annotations

import argparse
import itertools
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.e2e.broker_process import BrokerProcess  # noqa: E402

PARTITIONS = 4
VALUE_BYTES = 100
MODES = ("at-least-once", "exactly-once")


def fill(bootstrap: str, topic: str, records: int) -> None:
    from triolog.client import AdminClient, NewTopic, Producer

    with AdminClient(bootstrap) as admin:
        admin.create_topics([NewTopic(topic, PARTITIONS)])
    with Producer(bootstrap, acks=1, linger_ms=5, batch_size=256 * 1024) as producer:
        for p in range(PARTITIONS):
            producer.send_many(topic, [b"x" * VALUE_BYTES] * (records // PARTITIONS), partition=p)
        producer.flush()


def committed_count(bootstrap: str, topic: str) -> int:
    from triolog.client import Consumer

    with Consumer(bootstrap, isolation_level="read_committed") as consumer:
        ends = consumer.end_offsets([(topic, p) for p in range(PARTITIONS)])
    return sum(ends.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=400_000)
    parser.add_argument("--batch-records", type=int, default=40_000, help="maxOffsetsPerTrigger of the second case")
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    records = args.records - args.records % PARTITIONS
    workdir = Path(tempfile.mkdtemp(prefix="triolog-spark-write-bench-"))
    broker = BrokerProcess(workdir / "data").start()
    names = (f"t{i}" for i in itertools.count())
    try:
        bootstrap = f"127.0.0.1:{broker.port}"
        fill(bootstrap, "source", records)
        os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
        os.environ["PYSPARK_PYTHON"] = sys.executable
        os.environ["PYTHONPATH"] = str(ROOT)
        from pyspark.sql import SparkSession

        from triolog.client import AdminClient, NewTopic

        spark = (SparkSession.builder.master("local[2]").appName("triolog-spark-write-bench")
                 .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
                 .config("spark.driver.bindAddress", "127.0.0.1").config("spark.local.dir", str(workdir / "spark"))
                 .getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        admin = AdminClient(bootstrap)

        def run(mode: str, per_batch: int | None) -> float:
            target = next(names)
            admin.create_topics([NewTopic(target, PARTITIONS)])
            reader = (spark.readStream.format("triolog").option("triolog.bootstrap.servers", bootstrap)
                      .option("subscribe", "source").option("startingOffsets", "earliest"))
            if per_batch:
                reader = reader.option("maxOffsetsPerTrigger", str(per_batch))
            writer = (reader.load().selectExpr("key", "value", "partition").writeStream.format("triolog")
                      .option("triolog.bootstrap.servers", bootstrap).option("topic", target)
                      .option("checkpointLocation", str(workdir / f"checkpoint-{target}"))
                      .option("deliveryGuarantee", mode))
            if mode == "exactly-once":
                writer = writer.option("transactionalIdPrefix", target)
            start = time.perf_counter()
            query = writer.trigger(availableNow=True).start()
            query.awaitTermination()
            elapsed = time.perf_counter() - start
            assert query.exception() is None, query.exception()
            assert committed_count(bootstrap, target) >= records  # (+1 marker per partition and batch)
            return records / elapsed

        run("at-least-once", None)  # warm-up: JVM, Python workers
        print(f"Spark sink benchmark: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; "
              f"{records:,} records of {VALUE_BYTES} B in {PARTITIONS} partitions copied by a streaming "
              f"query on local[2]; {args.reps} runs per mode, alternating", flush=True)
        cases = [("one micro-batch", None), (f"micro-batches of {args.batch_records:,}", args.batch_records)]
        table = []
        for label, per_batch in cases:
            rates: dict[str, list[float]] = {mode: [] for mode in MODES}
            for _ in range(args.reps):
                for mode in MODES:
                    rates[mode].append(run(mode, per_batch))
            medians = {mode: statistics.median(r) for mode, r in rates.items()}
            table.append((label, medians))
            print(f"  {label}: " + "; ".join(
                f"{mode} {', '.join(f'{r:,.0f}' for r in rates[mode])} rows/s" for mode in MODES), flush=True)
        admin.close()
        spark.stop()
    finally:
        broker.kill()
        shutil.rmtree(workdir, ignore_errors=True)

    print(f"\n{'case':<32}{'at-least-once':>16}{'exactly-once':>16}{'ratio':>8}")
    for label, medians in table:
        print(f"{label:<32}{medians['at-least-once']:>16,.0f}{medians['exactly-once']:>16,.0f}"
              f"{medians['exactly-once'] / medians['at-least-once']:>8.2f}")


if __name__ == "__main__":
    main()
