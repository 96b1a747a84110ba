"""Structured Streaming reads from the real broker: availableNow, restart from the checkpoint,
new partitions, processingTime triggers, maxOffsetsPerTrigger and failOnDataLoss."""

from __future__ import annotations

import json
import re
import threading

import pytest

from triolog.client import NewTopic
from tests.waiting import wait_for

from .helpers import delete_segments, expected, keyed, produce


class Collector:
    """A foreachBatch sink that keeps every row it is given, per micro-batch: a record delivered
    twice (a replay the checkpoint should have prevented) shows up as a duplicate here."""

    def __init__(self) -> None:
        self.batches: list[list] = []
        self._lock = threading.Lock()

    def __call__(self, batch_df, batch_id: int) -> None:
        rows = batch_df.collect()
        with self._lock:
            self.batches.append(rows)

    @property
    def rows(self) -> list:
        with self._lock:
            return [row for batch in self.batches for row in batch]


def stream(spark, bootstrap: str, **options):
    r = spark.readStream.format("triolog").option("triolog.bootstrap.servers", bootstrap)
    for name, value in options.items():
        r = r.option(name, value)
    return r.load()


def run_available_now(df, checkpoint, sink: Collector, timeout_s: float = 120) -> None:
    query = df.writeStream.foreachBatch(sink).option("checkpointLocation", str(checkpoint)) \
        .trigger(availableNow=True).start()
    assert query.awaitTermination(timeout_s), "availableNow query did not finish"
    assert query.exception() is None


def by_topic(rows) -> dict[str, dict]:
    out: dict[str, list] = {}
    for row in rows:
        out.setdefault(row["topic"], []).append(row)
    return {t: keyed(r) for t, r in out.items()}


def test_stream_available_now_then_more_data_then_restart_from_checkpoint(spark, bootstrap, admin, topic, tmp_path):
    """No record twice and none missing across restarts; a topic created later that matches
    subscribePattern is read from its first offset; processingTime triggers pick up new data."""
    first = topic + "-a"
    admin.create_topics([NewTopic(first, 2)])
    sent_first = produce(bootstrap, first, 2, 15)
    pattern = re.escape(topic) + "-[a-z]"
    checkpoint = tmp_path / "checkpoint"

    sink = Collector()
    run_available_now(stream(spark, bootstrap, subscribePattern=pattern, startingOffsets="earliest"), checkpoint, sink)
    assert by_topic(sink.rows) == {first: expected(sent_first)}

    more_first = produce(bootstrap, first, 2, 5, start=15)
    second = topic + "-b"
    admin.create_topics([NewTopic(second, 1)])
    sent_second = produce(bootstrap, second, 1, 7)

    restarted = Collector()
    run_available_now(stream(spark, bootstrap, subscribePattern=pattern, startingOffsets="earliest"), checkpoint,
                      restarted)
    assert by_topic(restarted.rows) == {first: expected(more_first), second: expected(sent_second)}

    # a continuously running query (processingTime trigger) from the same checkpoint
    live = Collector()
    query = stream(spark, bootstrap, subscribePattern=pattern).writeStream.foreachBatch(live) \
        .option("checkpointLocation", str(checkpoint)).trigger(processingTime="300 milliseconds").start()
    try:
        latest = produce(bootstrap, second, 1, 4, start=7)
        wait_for(lambda: len(live.rows) >= 4 or not query.isActive, 60, "the live query to deliver 4 rows",
                 interval_s=0.2)
    finally:
        query.stop()
    assert query.exception() is None
    assert by_topic(live.rows) == {second: expected(latest)}


def test_max_offsets_per_trigger_limits_each_micro_batch(spark, bootstrap, admin, topic, tmp_path):
    admin.create_topics([NewTopic(topic, 2)])
    sent = produce(bootstrap, topic, 2, 20)
    sink = Collector()
    run_available_now(stream(spark, bootstrap, subscribe=topic, startingOffsets="earliest",
                             maxOffsetsPerTrigger="10"), tmp_path / "checkpoint", sink)

    sizes = [len(batch) for batch in sink.batches if batch]
    assert sizes == [10, 10, 10, 10]
    assert keyed(sink.rows) == expected(sent)


def test_stream_starts_at_latest_by_default_and_from_a_timestamp_when_asked(spark, bootstrap, admin, topic, tmp_path):
    admin.create_topics([NewTopic(topic, 1)])
    sent = produce(bootstrap, topic, 1, 10)

    sink = Collector()
    run_available_now(stream(spark, bootstrap, subscribe=topic), tmp_path / "latest", sink)
    assert sink.rows == []

    from_time = Collector()
    run_available_now(stream(spark, bootstrap, subscribe=topic, startingTimestamp=str(sent[(0, 6)][2])),
                      tmp_path / "time", from_time)
    assert keyed(from_time.rows) == expected(sent, lambda p, o: o >= 6)


def test_stream_fail_on_data_loss_when_deleted_records_were_not_read_yet(spark, broker, bootstrap, admin, topic,
                                                                        tmp_path):
    admin.create_topics([NewTopic(topic, 1, configs={"segment.bytes": "1024"})])
    sent = produce(bootstrap, topic, 1, 30, batch_size=300)
    checkpoint = tmp_path / "checkpoint"
    sink = Collector()
    run_available_now(stream(spark, bootstrap, subscribe=topic, startingOffsets="earliest"), checkpoint, sink)
    assert len(sink.rows) == 30

    more = produce(bootstrap, topic, 1, 60, start=30, batch_size=300)
    cut = delete_segments(admin, broker, topic, 0, after=30)  # 30..cut-1 were never read by the query

    failing = stream(spark, bootstrap, subscribe=topic).writeStream.foreachBatch(Collector()) \
        .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start()
    with pytest.raises(Exception) as failure:
        failing.awaitTermination(120)
    assert f"topic '{topic}' partition 0: offsets 30 to {cut - 1}" in str(failure.value)

    skipping = Collector()
    run_available_now(stream(spark, bootstrap, subscribe=topic, failOnDataLoss="false"), checkpoint, skipping)
    assert keyed(skipping.rows) == expected(more, lambda p, o: o >= cut)
    assert not set(keyed(skipping.rows)) & set(sent)


def test_streaming_only_and_batch_only_options_are_refused(spark, bootstrap, admin, topic):
    admin.create_topics([NewTopic(topic, 1)])
    df = stream(spark, bootstrap, subscribe=topic, endingOffsets="latest")
    with pytest.raises(Exception, match="option 'endingOffsets'.*batch queries only"):
        df.writeStream.foreachBatch(Collector()).trigger(availableNow=True).start().awaitTermination(60)
    with pytest.raises(Exception, match="option 'maxOffsetsPerTrigger'.*streaming"):
        spark.read.format("triolog").option("triolog.bootstrap.servers", bootstrap).option("subscribe", topic) \
            .option("maxOffsetsPerTrigger", "5").load().collect()
    with pytest.raises(Exception, match="option 'startingOffsets'"):
        stream(spark, bootstrap, subscribe=topic, startingOffsets=json.dumps({topic: {"0": "x"}}))
