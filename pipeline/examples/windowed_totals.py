"""Example pipeline: events -> Spark Structured Streaming windows -> a compacted topic -> a table.

With a broker running (``make run``, 127.0.0.1:9092)::

    .venv/bin/python -m triolog.pipeline.examples.windowed_totals run     # produce + stream (~30 s)
    .venv/bin/python -m triolog.pipeline.examples.windowed_totals show    # the compacted topic as a table

``run`` creates two topics, ``example-events`` (3 partitions) and ``example-totals``
(``cleanup.policy=compact``), then at the same time

* produces purchase events (JSON ``{"user": ..., "amount": ...}``, keyed by user) for
  ``--seconds`` seconds, and
* runs a streaming query that reads ``example-events`` *from the time the run started*
  (``startingTimestamp``, so events of earlier runs are skipped), sums amounts per user in
  10-second windows of the records' timestamps, and writes each updated aggregate to
  ``example-totals`` keyed ``user@window-start`` (update mode, through ``foreachBatch``: a key's
  newest record is its latest total, which is exactly what compaction keeps).

``show`` reads ``example-totals`` as a batch and keeps the last record per key, what the log
cleaner leaves once it has compacted the topic, and prints the table.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import threading
import time
from pathlib import Path

from triolog.client import AdminClient, NewTopic, Producer
from triolog.client.errors import TopicAlreadyExistsError

EVENTS, TOTALS = "example-events", "example-totals"
USERS = [f"user-{i}" for i in range(8)]


_LOG4J = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
"""


def spark_session():
    """A small, quiet local Spark; its Python workers import pipeline/ from this checkout if it
    is not installed."""
    import tempfile

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    root = str(Path(__file__).resolve().parents[2])
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))
    log4j = Path(tempfile.mkdtemp(prefix="windowed-totals-")) / "log4j2.properties"
    log4j.write_text(_LOG4J)
    from pyspark.sql import SparkSession

    from triolog import pipeline

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("triolog-windowed-totals")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile=file:{log4j}")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    pipeline.register(spark)
    return spark


def create_topics(bootstrap: str, events: str, totals: str) -> None:
    with AdminClient(bootstrap) as admin:
        for topic in (NewTopic(events, 3), NewTopic(totals, 1, configs={"cleanup.policy": "compact"})):
            try:
                admin.create_topics([topic])
            except TopicAlreadyExistsError:
                pass


def produce_events(bootstrap: str, topic: str, seconds: float, rate: int, sent: list) -> None:
    """``rate`` events a second for ``seconds``; appends (user, amount, timestamp ms) to ``sent``."""
    rng = random.Random()
    with Producer(bootstrap, linger_ms=20) as producer:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            tick = time.monotonic()
            for _ in range(max(1, rate // 10)):
                user = rng.choice(USERS)
                amount = rng.randint(1, 100)
                ts = int(time.time() * 1000)
                producer.send(
                    topic, json.dumps({"user": user, "amount": amount}).encode(), key=user.encode(), timestamp_ms=ts
                )
                sent.append((user, amount, ts))
            time.sleep(max(0.0, 0.1 - (time.monotonic() - tick)))


def run(
    spark,
    bootstrap: str,
    *,
    seconds: float,
    rate: int,
    checkpoint: str,
    events_topic: str = EVENTS,
    totals_topic: str = TOTALS,
    window: str = "10 seconds",
) -> list:
    """Produce events while the streaming job aggregates them; returns the events produced."""
    from pyspark.sql import functions as F

    create_topics(bootstrap, events_topic, totals_topic)
    started_ms = int(time.time() * 1000)
    events = (
        spark.readStream.format("triolog")
        .option("triolog.bootstrap.servers", bootstrap)
        .option("subscribe", events_topic)
        .option("startingTimestamp", str(started_ms))
        .option("startingOffsetsByTimestampStrategy", "latest")  # partitions with no event yet
        .load()
    )
    parsed = events.select(
        F.from_json(F.col("value").cast("string"), "user string, amount long").alias("e"), "timestamp"
    )
    totals = parsed.groupBy(F.window("timestamp", window), F.col("e.user").alias("user")).agg(
        F.count("*").alias("events"), F.sum("e.amount").alias("total")
    )
    out = totals.select(
        F.concat_ws("@", "user", F.date_format("window.start", "yyyy-MM-dd'T'HH:mm:ss")).alias("key"),
        F.to_json(
            F.struct(
                "user",
                F.col("window.start").alias("window_start"),
                F.col("window.end").alias("window_end"),
                "events",
                "total",
            )
        ).alias("value"),
    )

    def write_updates(batch, batch_id: int) -> None:
        # PySpark's Python sinks take append/complete only; update mode goes through
        # foreachBatch, each micro-batch's changed aggregates written by the batch sink.
        (
            batch.write.format("triolog")
            .mode("append")
            .option("triolog.bootstrap.servers", bootstrap)
            .option("topic", totals_topic)
            .save()
        )

    query = (
        out.writeStream.foreachBatch(write_updates)
        .option("checkpointLocation", checkpoint)
        .outputMode("update")
        .trigger(processingTime="2 seconds")
        .start()
    )
    sent: list = []
    producer = threading.Thread(target=produce_events, args=(bootstrap, events_topic, seconds, rate, sent), daemon=True)
    producer.start()
    try:
        while producer.is_alive():
            producer.join(4)
            done = len(query.recentProgress)
            print(f"  produced {len(sent):>6} events; {done} micro-batches done; {query.status['message']}", flush=True)
        query.processAllAvailable()  # everything produced is aggregated and written
    finally:
        query.stop()
    return sent


def totals_table(spark, bootstrap: str, totals_topic: str = TOTALS):
    """The compacted topic as a table: the newest record per key, as the log cleaner keeps it."""
    from pyspark.sql import Window, functions as F

    records = (
        spark.read.format("triolog")
        .option("triolog.bootstrap.servers", bootstrap)
        .option("subscribe", totals_topic)
        .load()
    )
    newest = Window.partitionBy("key").orderBy(F.col("partition").desc(), F.col("offset").desc())
    return (
        records.withColumn("rank", F.row_number().over(newest))
        .where("rank = 1 and value is not null")
        .select(
            F.from_json(
                F.col("value").cast("string"),
                "user string, window_start timestamp, window_end timestamp, events long, total long",
            ).alias("t")
        )
        .select("t.*")
        .orderBy("window_start", "user")
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["run", "show"])
    parser.add_argument("--bootstrap", default="127.0.0.1:9092", help="the broker (default %(default)s)")
    parser.add_argument("--seconds", type=float, default=20, help="how long run produces events")
    parser.add_argument("--rate", type=int, default=200, help="events per second")
    parser.add_argument(
        "--checkpoint", default=None, help="the streaming query's checkpoint directory (default: a new temporary one)"
    )
    args = parser.parse_args(argv)
    spark = spark_session()
    try:
        if args.command == "run":
            import tempfile

            checkpoint = args.checkpoint or tempfile.mkdtemp(prefix="windowed-totals-checkpoint-")
            sent = run(spark, args.bootstrap, seconds=args.seconds, rate=args.rate, checkpoint=checkpoint)
            print(
                f"done: {len(sent)} events aggregated into {TOTALS!r}. See the table with:\n"
                f"  python -m triolog.pipeline.examples.windowed_totals show --bootstrap {args.bootstrap}"
            )
        else:
            totals_table(spark, args.bootstrap).show(500, truncate=False)
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
