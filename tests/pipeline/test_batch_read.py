"""Batch reads through Spark from the real broker: the Kafka source's schema, offset options,
timestamps, headers, minPartitions, failOnDataLoss and bad options."""

from __future__ import annotations

import datetime as dt
import json
import re

import pyarrow as pa
import pytest

from triolog.client import NewTopic

from .helpers import BASE_TS, delete_segments, expected, keyed, produce, reader

KAFKA_SCHEMA = ("struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,timestamp:timestamp,"
                "timestampType:int>")


def test_batch_read_returns_every_record_of_every_partition_with_kafkas_schema(spark, bootstrap, admin, topic):
    admin.create_topics([NewTopic(topic, 3)])
    sent = produce(bootstrap, topic, 3, 40)

    df = reader(spark, bootstrap, subscribe=topic).load()
    assert df.schema.simpleString() == KAFKA_SCHEMA
    assert all(field.nullable for field in df.schema.fields)
    rows = df.collect()

    assert keyed(rows) == expected(sent)
    for row in rows:
        assert row["topic"] == topic
        assert row["timestampType"] == 0  # CreateTime
        ts = sent[(row["partition"], row["offset"])][2]
        assert row["timestamp"] == dt.datetime.fromtimestamp(ts / 1000, dt.UTC).replace(tzinfo=None)


def test_read_yields_arrow_batches_in_sparks_exact_arrow_schema(spark, bootstrap, admin, topic):
    """Spark only accepts batches whose Arrow schema equals its own form of the declared one."""
    from pyspark.sql.pandas.types import to_arrow_schema

    from triolog.pipeline.source import TriologDataSource

    admin.create_topics([NewTopic(topic, 1)])
    produce(bootstrap, topic, 1, 5, headers=True)
    for headers in ("false", "true"):
        df = reader(spark, bootstrap, subscribe=topic, includeHeaders=headers).load()
        source = TriologDataSource({"triolog.bootstrap.servers": bootstrap, "subscribe": topic,
                                    "includeheaders": headers})
        batch_reader = source.reader(df.schema)
        batches = [b for part in batch_reader.partitions() for b in batch_reader.read(part)]
        assert batches and all(isinstance(b, pa.RecordBatch) for b in batches)
        assert all(b.schema.equals(to_arrow_schema(df.schema, timezone="UTC")) for b in batches)


def test_starting_and_ending_offsets_in_every_form(spark, bootstrap, admin, topic):
    admin.create_topics([NewTopic(topic, 2)])
    sent = produce(bootstrap, topic, 2, 10)

    def read(**options):
        return keyed(reader(spark, bootstrap, subscribe=topic, **options).load().collect())

    assert read(startingOffsets="earliest", endingOffsets="latest") == expected(sent)
    starting = json.dumps({topic: {"0": 3, "1": -2}})
    ending = json.dumps({topic: {"0": -1, "1": 7}})
    assert read(startingOffsets=starting, endingOffsets=ending) == expected(
        sent, lambda p, o: (p == 0 and o >= 3) or (p == 1 and o < 7))
    # assign reads only the partitions it names, JSON offsets for exactly those
    assert keyed(reader(spark, bootstrap, assign=json.dumps({topic: [1]}),
                        startingOffsets=json.dumps({topic: {"1": 8}})).load().collect()) == expected(
        sent, lambda p, o: p == 1 and o >= 8)
    # subscribePattern matches whole topic names
    pattern = re.escape(topic[:-1]) + "[0-9]"
    assert keyed(reader(spark, bootstrap, subscribePattern=pattern).load().collect()) == expected(sent)


def test_reading_from_a_timestamp(spark, bootstrap, admin, topic):
    """Offsets by time: the first offset whose timestamp is >= the time (records 1 s apart)."""
    admin.create_topics([NewTopic(topic, 2)])
    sent = produce(bootstrap, topic, 2, 10)

    def read(**options):
        return keyed(reader(spark, bootstrap, subscribe=topic, **options).load().collect())

    # records i have timestamp BASE_TS + i s; offsets equal i here
    assert read(startingTimestamp=str(BASE_TS + 6500)) == expected(sent, lambda p, o: o >= 7)
    assert read(startingTimestamp=str(BASE_TS + 2000), endingTimestamp=str(BASE_TS + 5000)) == expected(
        sent, lambda p, o: 2 <= o < 5)
    by_partition = json.dumps({topic: {"0": BASE_TS + 8000, "1": BASE_TS}})
    assert read(startingOffsetsByTimestamp=by_partition) == expected(sent, lambda p, o: p == 1 or o >= 8)
    ending = json.dumps({topic: {"0": BASE_TS + 1000, "1": BASE_TS + 99_000}})  # past the last: latest
    assert read(endingOffsetsByTimestamp=ending) == expected(sent, lambda p, o: p == 1 or o < 1)
    # the global timestamp wins over per-partition ones and over startingOffsets, as in Spark
    assert read(startingTimestamp=str(BASE_TS + 9000), startingOffsetsByTimestamp=by_partition,
                startingOffsets="earliest") == expected(sent, lambda p, o: o >= 9)

    # no record that late: fail by default, or start at the end with the "latest" strategy
    with pytest.raises(Exception, match="startingTimestamp.*no record"):
        read(startingTimestamp=str(BASE_TS + 60_000))
    assert read(startingTimestamp=str(BASE_TS + 60_000), startingOffsetsByTimestampStrategy="latest") == {}


def test_include_headers_adds_kafkas_headers_column(spark, bootstrap, admin, topic):
    admin.create_topics([NewTopic(topic, 1)])
    produce(bootstrap, topic, 1, 4, headers=True)

    df = reader(spark, bootstrap, subscribe=topic, includeHeaders="true").load()
    assert df.schema.simpleString() == KAFKA_SCHEMA[:-1] + ",headers:array<struct<key:string,value:binary>>>"
    rows = sorted(df.collect(), key=lambda r: r["offset"])
    assert rows[0]["headers"] is None  # no headers: null, as Spark's Kafka source
    assert [(h["key"], h["value"]) for h in rows[1]["headers"]] == [("n", b"1"), ("p", None)]
    assert [(h["key"], h["value"]) for h in rows[3]["headers"]] == [("n", b"3"), ("p", None)]


def test_min_partitions_splits_large_partitions_into_offset_ranges(spark, bootstrap, admin, topic):
    admin.create_topics([NewTopic(topic, 2)])
    sent = produce(bootstrap, topic, 2, 30)

    df = reader(spark, bootstrap, subscribe=topic, minPartitions="6").load()
    assert df.rdd.getNumPartitions() == 6
    assert keyed(df.collect()) == expected(sent)
    assert reader(spark, bootstrap, subscribe=topic).load().rdd.getNumPartitions() == 2


def test_fail_on_data_loss_after_records_were_deleted(spark, broker, bootstrap, admin, topic):
    """Offsets below the log start (segments deleted by retention after delete_records) are data
    loss: a clear error naming topic, partition and the missing range, or skipped when asked."""
    admin.create_topics([NewTopic(topic, 1, configs={"segment.bytes": "1024"})])
    sent = produce(bootstrap, topic, 1, 80, batch_size=300)  # many small segments
    cut = delete_segments(admin, broker, topic, 0, after=5)
    starting = json.dumps({topic: {"0": 5}})

    with pytest.raises(Exception) as failure:
        reader(spark, bootstrap, subscribe=topic, startingOffsets=starting).load().collect()
    message = str(failure.value)
    assert f"topic '{topic}' partition 0: offsets 5 to {cut - 1}" in message
    assert "failOnDataLoss" in message

    rows = reader(spark, bootstrap, subscribe=topic, startingOffsets=starting, failOnDataLoss="false").load().collect()
    assert keyed(rows) == expected(sent, lambda p, o: o >= cut)
    # earliest means the log start now: nothing is lost
    assert keyed(reader(spark, bootstrap, subscribe=topic).load().collect()) == expected(sent, lambda p, o: o >= cut)


@pytest.mark.parametrize(("options", "named"), [
    ({}, "subscribe"),
    ({"subscribe": "a", "assign": '{"a": [0]}'}, "subscribe"),
    ({"subscribe": "a", "startingOffsets": "yesterday"}, "startingOffsets"),
    ({"subscribe": "a", "startingOffsets": '{"a": {"0": -7}}'}, "startingOffsets"),
    ({"subscribe": "a", "failOnDataLoss": "maybe"}, "failOnDataLoss"),
    ({"subscribe": "a", "minPartitions": "0"}, "minPartitions"),
    ({"subscribe": "a", "startingTimestamp": "noon"}, "startingTimestamp"),
    ({"subscribe": "a", "startingOffsetsByTimestampStrategy": "newest"}, "startingOffsetsByTimestampStrategy"),
    ({"subscribe": "a", "assign": "[1]"}, "subscribe"),
    ({"assign": "[1]"}, "assign"),
    ({"subscribe": "a", "kafka.group.id": "g"}, "kafka.group.id"),
    ({"subscribe": "a", "subscribePatern": "x"}, "subscribepatern"),
    ({"subscribe": "a", "triolog.fetch.max.bytes": "lots"}, "triolog.fetch.max.bytes"),
    ({"subscribe": "a", "triolog.auto.offset.reset": "earliest"}, "triolog.auto.offset.reset"),
])
def test_a_wrong_option_fails_at_load_naming_it(spark, bootstrap, options, named):
    with pytest.raises(Exception, match=f"option '{named}'"):
        reader(spark, bootstrap, **options).load()


def test_mode_specific_and_broker_checked_options_fail_before_any_task(spark, bootstrap, admin, topic):
    admin.create_topics([NewTopic(topic, 2)])
    with pytest.raises(Exception, match="option 'triolog.bootstrap.servers'"):
        spark.read.format("triolog").option("subscribe", topic).load()
    with pytest.raises(Exception, match="option 'startingOffsets'.*batch"):
        reader(spark, bootstrap, subscribe=topic, startingOffsets="latest").load().collect()
    with pytest.raises(Exception, match="option 'endingOffsets'.*missing .*-1"):
        reader(spark, bootstrap, subscribe=topic, endingOffsets=json.dumps({topic: {"0": 1}})).load().collect()
    with pytest.raises(Exception, match="option 'endingOffsets'.*past the end"):
        reader(spark, bootstrap, subscribe=topic, endingOffsets=json.dumps({topic: {"0": 5, "1": -1}})).load().collect()
    with pytest.raises(Exception, match=f"option 'subscribe'.*{topic}-nope.*does not exist"):
        reader(spark, bootstrap, subscribe=topic + "-nope").load().collect()


def test_task_reads_over_many_fetches_return_each_record_once_and_stop_at_the_end(bootstrap, admin, topic):
    """A task asks for its next fetch while it decodes the last one: with fetches of a few batches,
    every record of [start, end) still comes once, in order, and nothing past ``end``."""
    import dataclasses

    from triolog.client.consumer_core import ConsumerConfig
    from triolog.pipeline.fetch import read_range

    admin.create_topics([NewTopic(topic, 1)])
    sent = produce(bootstrap, topic, 1, 600, batch_size=1024)
    config = dataclasses.replace(ConsumerConfig(), max_partition_fetch_bytes=4096)
    for start, end in ((0, 600), (7, 593), (301, 302)):
        batches = list(read_range(bootstrap, config, topic, 0, start, end, fail_on_data_loss=True,
                                  include_headers=False))
        assert len(batches) > 1 or end - start == 1
        offsets = [o for b in batches for o in b.column("offset").to_pylist()]
        assert offsets == list(range(start, end))
        values = [v for b in batches for v in b.column("value").to_pylist()]
        assert values == [sent[(0, o)][1] for o in offsets]


def test_a_task_stopped_early_closes_cleanly_with_a_fetch_in_flight(bootstrap, admin, topic):
    """Spark stops reading a partition early (a limit): closing the reader mid-range waits for the
    fetch it asked for ahead, then closes its connection; nothing hangs or leaks a thread."""
    import dataclasses
    import threading

    from triolog.client.consumer_core import ConsumerConfig
    from triolog.pipeline.fetch import read_range

    admin.create_topics([NewTopic(topic, 1)])
    produce(bootstrap, topic, 1, 300, batch_size=1024)
    config = dataclasses.replace(ConsumerConfig(), max_partition_fetch_bytes=4096)
    reader_ = read_range(bootstrap, config, topic, 0, 0, 300, fail_on_data_loss=True, include_headers=False)
    first = next(reader_)
    assert first.column("offset")[0].as_py() == 0
    reader_.close()
    assert not [t for t in threading.enumerate() if t.name.startswith(f"triolog-fetch-{topic}")]
