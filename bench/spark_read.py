#!/usr/bin/env python
"""Spark batch read through the ``triolog`` data source vs our client alone (issue 6).

    .venv/bin/python bench/spark_read.py             # 1,000,000 records of 100 B, 4 partitions
    .venv/bin/python bench/spark_read.py --records 200000

Prints, in one run, rows/s of:
1. our client alone: one process, ``Consumer.poll()`` over the 4 partitions from offset 0,
   every record fetched and decoded into a ConsumerRecord;
2. (info) the data source's own task code, ``read_range`` into Arrow batches, in one process;
3. Spark: ``spark.read.format("triolog")`` on ``local[2]``, aggregating ``sum(length(value))``
   so every value crosses into the JVM (best of 3 runs after a warm-up query);
and the ratio Spark / client. Goals: ratio >= 0.5 on a 2-core machine (issue 6); Spark >= 1M rows/s on
local[2] (issue 12).

The broker is the real process on loopback with its data in a temp directory (page cache).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from triolog.client import AdminClient, Consumer, NewTopic, Producer  # noqa: E402
from tests.e2e.broker_process import BrokerProcess  # noqa: E402

PARTITIONS = 4
VALUE_BYTES = 100


def fill(bootstrap: str, topic: str, records: int) -> None:
    value = b"x" * VALUE_BYTES
    with AdminClient(bootstrap) as admin:
        admin.create_topics([NewTopic(topic, PARTITIONS)])
    with Producer(bootstrap, acks=1, linger_ms=5, batch_size=256 * 1024) as producer:
        for i in range(records):
            producer.send(topic, value, partition=i % PARTITIONS)
        producer.flush()


def client_alone(bootstrap: str, topic: str, records: int) -> float:
    start = time.perf_counter()
    seen = 0
    with Consumer(bootstrap, auto_offset_reset="earliest", max_poll_records=10_000) as consumer:
        consumer.assign([(topic, p) for p in range(PARTITIONS)])
        while seen < records:
            seen += sum(map(len, consumer.poll(1000).values()))
    return seen / (time.perf_counter() - start)


def task_code_alone(bootstrap: str, topic: str, records: int) -> float:
    from triolog.client.consumer_core import ConsumerConfig
    from triolog.pipeline.fetch import read_range

    per_partition = records // PARTITIONS
    start = time.perf_counter()
    seen = 0
    for p in range(PARTITIONS):
        for batch in read_range(bootstrap, ConsumerConfig(), topic, p, 0, per_partition,
                                fail_on_data_loss=True, include_headers=False):
            seen += batch.num_rows
    assert seen == records, seen
    return seen / (time.perf_counter() - start)


def spark_session(tmp: Path):
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").appName("triolog-spark-read-bench")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.local.dir", str(tmp / "spark"))
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def spark_read(spark, bootstrap: str, topic: str, records: int, runs: int = 3) -> float:
    df = (spark.read.format("triolog").option("triolog.bootstrap.servers", bootstrap)
          .option("subscribe", topic).load())
    best = 0.0
    for _ in range(runs):
        start = time.perf_counter()
        count, total = df.selectExpr("count(*)", "sum(length(value))").collect()[0]
        elapsed = time.perf_counter() - start
        assert count == records and total == records * VALUE_BYTES, (count, total)
        best = max(best, records / elapsed)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=1_000_000)
    args = parser.parse_args()
    records = args.records - args.records % PARTITIONS
    tmp = Path(tempfile.mkdtemp(prefix="triolog-spark-bench-"))
    broker = BrokerProcess(tmp / "data").start()
    try:
        bootstrap = f"127.0.0.1:{broker.port}"
        t = time.perf_counter()
        fill(bootstrap, "bench", records)
        print(f"produced {records:,} records of {VALUE_BYTES} B into {PARTITIONS} partitions "
              f"in {time.perf_counter() - t:.1f} s", flush=True)
        fill(bootstrap, "warmup", 4000)

        client_rate = max(client_alone(bootstrap, "bench", records) for _ in range(2))
        print(f"client alone (Consumer.poll, 1 process):      {client_rate:>12,.0f} rows/s", flush=True)
        task_rate = task_code_alone(bootstrap, "bench", records)
        print(f"(info) read_range to Arrow, 1 process:        {task_rate:>12,.0f} rows/s", flush=True)

        spark = spark_session(tmp)
        try:
            spark_read(spark, bootstrap, "warmup", 4000, runs=1)  # JVM, Python workers, planner
            spark_rate = spark_read(spark, bootstrap, "bench", records)
        finally:
            spark.stop()
        print(f"Spark batch read (local[2], best of 3):       {spark_rate:>12,.0f} rows/s")
        print(f"ratio Spark / client alone:                   {spark_rate / client_rate:>12.2f}  (goal >= 0.5)")
    finally:
        broker.kill()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
