"""Batch and streaming writes through Spark to the real broker, read back with our client and
with the source."""

from __future__ import annotations

import pytest

from triolog.client import Consumer, NewTopic, partition_for_key

from .helpers import expected, keyed, produce, reader
from .test_streaming import stream


def consume_all(bootstrap: str, topic: str, partitions: int) -> list:
    with Consumer(bootstrap, auto_offset_reset="earliest", consumer_timeout_ms=1500) as consumer:
        consumer.assign([(topic, p) for p in range(partitions)])
        return list(consumer)


def writer(df, bootstrap: str, **options):
    w = df.write.format("triolog").mode("append").option("triolog.bootstrap.servers", bootstrap)
    for name, value in options.items():
        w = w.option(name, value)
    return w


def test_batch_write_then_read_back(spark, bootstrap, admin, topic):
    """value/key/headers/partition columns as Spark's Kafka sink: keyed rows without a partition
    land where Kafka's default partitioner (murmur2 of the key) puts them."""
    admin.create_topics([NewTopic(topic, 3)])
    rows = [(f"key-{i}", f"value-{i}".encode(), [("trace", str(i).encode())] if i % 3 == 0 else None,
             2 if i % 5 == 0 else None) for i in range(60)]
    df = spark.createDataFrame(rows, "key string, value binary, headers array<struct<key string, value binary>>, "
                                     "partition int").repartition(2)
    writer(df, bootstrap, topic=topic).save()

    records = consume_all(bootstrap, topic, 3)
    assert sorted(r.value for r in records) == sorted(v for _, v, _, _ in rows)
    by_value = {r.value: r for r in records}
    for key, value, headers, partition in rows:
        record = by_value[value]
        assert record.key == key.encode()
        assert list(record.headers) == (headers or [])
        assert record.partition == (partition if partition is not None else partition_for_key(key.encode(), 3))

    read_back = reader(spark, bootstrap, subscribe=topic, includeHeaders="true").load() \
        .selectExpr("cast(key as string) k", "value", "headers").collect()
    assert sorted((r["k"], bytes(r["value"])) for r in read_back) == sorted((k, v) for k, v, _, _ in rows)


def test_topic_column_routes_rows_and_the_topic_option_overrides_it(spark, bootstrap, admin, topic):
    admin.create_topics([NewTopic(topic + "-x", 1), NewTopic(topic + "-y", 1), NewTopic(topic + "-z", 1)])
    df = spark.createDataFrame([(topic + "-x", "1"), (topic + "-y", "2"), (topic + "-x", "3")], "topic string, value string")

    writer(df, bootstrap).save()
    assert sorted(r.value for r in consume_all(bootstrap, topic + "-x", 1)) == [b"1", b"3"]
    assert [r.value for r in consume_all(bootstrap, topic + "-y", 1)] == [b"2"]

    writer(df, bootstrap, topic=topic + "-z").save()
    assert sorted(r.value for r in consume_all(bootstrap, topic + "-z", 1)) == [b"1", b"2", b"3"]


def test_a_bad_sink_column_or_option_fails_naming_it(spark, bootstrap, topic):
    no_value = spark.createDataFrame([("k",)], "key string")
    with pytest.raises(Exception, match="option 'value'"):
        writer(no_value, bootstrap, topic=topic).save()
    values = spark.createDataFrame([("v",)], "value string")
    with pytest.raises(Exception, match="option 'topic'"):
        writer(values, bootstrap).save()
    with pytest.raises(Exception, match="option 'key'.*string or binary"):
        writer(spark.createDataFrame([(1, "v")], "key int, value string"), bootstrap, topic=topic).save()
    with pytest.raises(Exception, match="option 'triolog.acks'"):
        writer(values, bootstrap, topic=topic, **{"triolog.acks": "1"}).save()
    with pytest.raises(Exception, match="option 'triolog.bootstrap.servers'"):
        values.write.format("triolog").mode("append").option("topic", topic).save()
    with pytest.raises(Exception, match="option 'mode'.*append"):
        writer(values, bootstrap, topic=topic).mode("overwrite").save()


def test_a_record_the_broker_refuses_fails_the_write(spark, bootstrap, admin, topic):
    """Producing to a partition the topic does not have is a task failure, not a silent loss."""
    admin.create_topics([NewTopic(topic, 1)])
    df = spark.createDataFrame([("v", 7)], "value string, partition int")
    with pytest.raises(Exception, match=topic):
        writer(df, bootstrap, topic=topic, **{"triolog.delivery.timeout.ms": "3000",
                                              "triolog.max.block.ms": "3000"}).save()
    assert consume_all(bootstrap, topic, 1) == []


def test_streaming_write_copies_a_topic(spark, bootstrap, admin, topic, tmp_path):
    source, target = topic + "-in", topic + "-out"
    admin.create_topics([NewTopic(source, 2), NewTopic(target, 2)])
    sent = produce(bootstrap, source, 2, 25)

    query = stream(spark, bootstrap, subscribe=source, startingOffsets="earliest") \
        .selectExpr("key", "value", "partition") \
        .writeStream.format("triolog").option("triolog.bootstrap.servers", bootstrap).option("topic", target) \
        .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True).start()
    assert query.awaitTermination(120)
    assert query.exception() is None

    copied = keyed(reader(spark, bootstrap, subscribe=target).load().collect())
    # same partition, same order within it: offsets are preserved too
    assert copied == expected(sent)
