"""The exactly-once sink (deliveryGuarantee=exactly-once) on real Spark and the real broker: a
transaction per task committed with the micro-batch, nothing readable before, and a replay of a
batch the sink had already committed writes nothing again."""

from __future__ import annotations

import pytest

from triolog.client import Consumer, NewTopic

from .helpers import produce
from .test_streaming import stream


def read_all(bootstrap: str, topic: str, partitions: int, isolation_level: str) -> list[bytes]:
    with Consumer(bootstrap, auto_offset_reset="earliest", consumer_timeout_ms=1500,
                  isolation_level=isolation_level) as consumer:
        consumer.assign([(topic, p) for p in range(partitions)])
        return sorted(r.value for r in consumer)


def copy_query(spark, bootstrap: str, source: str, target: str, checkpoint, **sink_options):
    writer = stream(spark, bootstrap, subscribe=source, startingOffsets="earliest").selectExpr("key", "value") \
        .writeStream.format("triolog").option("triolog.bootstrap.servers", bootstrap).option("topic", target) \
        .option("checkpointLocation", str(checkpoint))
    for name, value in sink_options.items():
        writer = writer.option(name, value)
    query = writer.trigger(availableNow=True).start()
    assert query.awaitTermination(120), "availableNow query did not finish"
    assert query.exception() is None


def forget_last_commit(checkpoint) -> None:
    """What a driver killed after the sink committed, before Spark wrote the batch's commit
    file, leaves behind: on restart Spark runs that batch again."""
    commits = sorted((checkpoint / "commits").glob("[0-9]*"), key=lambda p: int(p.name))
    commits[-1].unlink()
    for crc in (checkpoint / "commits").glob(f".{commits[-1].name}.crc"):
        crc.unlink()


EXACTLY_ONCE = {"deliveryGuarantee": "exactly-once"}


def test_each_task_commits_one_transaction_with_the_micro_batch(spark, bootstrap, admin, topic, tmp_path):
    source, target = topic + "-in", topic + "-out"
    admin.create_topics([NewTopic(source, 2), NewTopic(target, 2)])
    sent = produce(bootstrap, source, 2, 40)
    copy_query(spark, bootstrap, source, target, tmp_path / "checkpoint", **EXACTLY_ONCE,
               transactionalIdPrefix=topic)

    values = sorted(value for _, value, _ in sent.values())
    assert read_all(bootstrap, target, 2, "read_committed") == values
    assert read_all(bootstrap, target, 2, "read_uncommitted") == values, "nothing aborted, nothing twice"
    described = admin.describe_transactions([f"{topic}-0", f"{topic}-1"])
    assert {tid: d.state for tid, d in described.items()} == {f"{topic}-0": "CompleteCommit",
                                                               f"{topic}-1": "CompleteCommit"}


@pytest.mark.parametrize("guarantee", ["exactly-once", "at-least-once"])
def test_a_replayed_batch_that_was_committed_is_not_written_twice(spark, bootstrap, admin, topic, tmp_path, guarantee):
    """The same crash for both modes: exactly-once writes every record once, at-least-once
    writes the replayed batch again (which shows the check can fail)."""
    source, target = topic + "-in", topic + "-out"
    admin.create_topics([NewTopic(source, 2), NewTopic(target, 2)])
    checkpoint = tmp_path / "checkpoint"
    options = {"deliveryGuarantee": guarantee}
    if guarantee == "exactly-once":
        options["transactionalIdPrefix"] = topic
    first = produce(bootstrap, source, 2, 20)
    copy_query(spark, bootstrap, source, target, checkpoint, **options)
    second = produce(bootstrap, source, 2, 15, start=20)
    copy_query(spark, bootstrap, source, target, checkpoint, **options)

    forget_last_commit(checkpoint)
    copy_query(spark, bootstrap, source, target, checkpoint, **options)  # replays the second batch

    once = sorted(value for _, value, _ in [*first.values(), *second.values()])
    written = read_all(bootstrap, target, 2, "read_committed")
    if guarantee == "exactly-once":
        assert written == once
    else:
        assert written == sorted(once + [value for _, value, _ in second.values()])


def test_a_failed_micro_batch_leaves_nothing_readable_and_its_retry_writes_once(spark, bootstrap, admin, topic,
                                                                                 tmp_path):
    """A task fails after part of its rows went out in its transaction (rows from offset 20 go
    to a partition the target does not have yet): the transaction is aborted, read_committed
    consumers never see those rows, and once the partition exists the query restarted from its
    checkpoint writes each row once."""
    source, target = topic + "-in", topic + "-out"
    admin.create_topics([NewTopic(source, 1), NewTopic(target, 1)])
    sent = produce(bootstrap, source, 1, 30)
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "5")  # the sink sends 5 rows at a time

    def run():
        return stream(spark, bootstrap, subscribe=source, startingOffsets="earliest") \
            .selectExpr("key", "value", "cast(if(offset >= 20, 1, 0) as int) as partition") \
            .writeStream.format("triolog").option("triolog.bootstrap.servers", bootstrap).option("topic", target) \
            .option("deliveryGuarantee", "exactly-once").option("transactionalIdPrefix", topic) \
            .option("triolog.max.block.ms", "2000").option("triolog.delivery.timeout.ms", "2000") \
            .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True).start()

    try:
        with pytest.raises(Exception, match="partition"):
            run().awaitTermination(120)
        assert read_all(bootstrap, target, 1, "read_committed") == []
        in_the_log = read_all(bootstrap, target, 1, "read_uncommitted")
        assert 0 < len(in_the_log) <= 20, "part of the rows reached the log before the failure"

        admin.create_partitions({target: 2})
        query = run()
        assert query.awaitTermination(120) and query.exception() is None
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    assert read_all(bootstrap, target, 2, "read_committed") == sorted(value for _, value, _ in sent.values())


def test_exactly_once_options_are_checked(spark, bootstrap, topic):
    values = spark.createDataFrame([("v",)], "value string")

    def save(**options):  # (a DataFrameWriter keeps its options: a new one each time)
        writer = values.write.format("triolog").mode("append").option("triolog.bootstrap.servers", bootstrap) \
            .option("topic", topic)
        for name, value in options.items():
            writer = writer.option(name, value)
        writer.save()

    with pytest.raises(Exception, match="option 'deliveryGuarantee'.*streaming"):
        save(deliveryGuarantee="exactly-once", transactionalIdPrefix="p")
    with pytest.raises(Exception, match="option 'transactionalIdPrefix'.*exactly-once needs it"):
        save(deliveryGuarantee="exactly-once")
    with pytest.raises(Exception, match="option 'transactionalIdPrefix'.*only means something"):
        save(transactionalIdPrefix="p")
    with pytest.raises(Exception, match="option 'deliveryGuarantee'.*expected"):
        save(deliveryGuarantee="twice")
    with pytest.raises(Exception, match="option 'triolog.transactional.id'"):
        save(**{"triolog.transactional.id": "mine"})
