"""commitOffsetsToGroup: a streaming query commits each completed micro-batch's end offsets to a
consumer group (off by default, as Spark's Kafka source), so group tools see its progress."""

from __future__ import annotations

import pytest

from triolog.client import NewTopic
from triolog.client.types import TopicPartition
from triolog.pipeline.options import OptionError, parse_read_options

from .helpers import expected, keyed, produce
from .test_streaming import Collector, run_available_now, stream


def test_each_micro_batch_end_is_committed_to_the_group(spark, bootstrap, admin, topic, tmp_path):
    """Spark calls a source's commit(end) for a micro-batch when it plans the next one, so the
    group holds the end of every batch but the latest (Spark's rule; the checkpoint has it)."""
    admin.create_topics([NewTopic(topic, 2)])
    sent = produce(bootstrap, topic, 2, 10)
    group = f"{topic}-spark"
    sink = Collector()
    run_available_now(stream(spark, bootstrap, subscribe=topic, startingOffsets="earliest", maxOffsetsPerTrigger="8",
                             commitOffsetsToGroup="true", **{"triolog.group.id": group}),
                      tmp_path / "checkpoint", sink)
    assert keyed(sink.rows) == expected(sent)
    batches = [batch for batch in sink.batches if batch]
    assert len(batches) >= 2
    ends: dict[TopicPartition, int] = {}
    for batch in batches[:-1]:
        for row in batch:
            tp = TopicPartition(topic, row["partition"])
            ends[tp] = max(ends.get(tp, 0), row["offset"] + 1)
    assert admin.list_consumer_group_offsets(group) == ends
    # more data, a restart from the checkpoint: planning its batch commits the last one of before
    produce(bootstrap, topic, 2, 3, start=10)
    restarted = Collector()
    run_available_now(stream(spark, bootstrap, subscribe=topic, commitOffsetsToGroup="true",
                             **{"triolog.group.id": group}), tmp_path / "checkpoint", restarted)
    assert len(restarted.rows) == 6
    assert admin.list_consumer_group_offsets(group) == {TopicPartition(topic, 0): 10, TopicPartition(topic, 1): 10}


def test_no_group_is_written_by_default(spark, bootstrap, admin, topic, tmp_path):
    admin.create_topics([NewTopic(topic, 1)])
    produce(bootstrap, topic, 1, 3)
    before = admin.list_consumer_groups()
    run_available_now(stream(spark, bootstrap, subscribe=topic, startingOffsets="earliest"), tmp_path / "cp",
                      Collector())
    assert admin.list_consumer_groups() == before


@pytest.mark.parametrize("options, streaming, message", [
    ({"commitOffsetsToGroup": "true"}, True, "needs 'triolog.group.id'"),
    ({"triolog.group.id": "g"}, True, "only used with commitOffsetsToGroup=true"),
    ({"commitOffsetsToGroup": "true", "triolog.group.id": "g"}, False, "streaming queries only"),
    ({"commitOffsetsToGroup": "maybe", "triolog.group.id": "g"}, True, "expected true or false"),
])
def test_commit_option_rules(options, streaming, message):
    base = {"triolog.bootstrap.servers": "127.0.0.1:9092", "subscribe": "t"}
    with pytest.raises(OptionError, match=message):
        parse_read_options({k.lower(): v for k, v in {**base, **options}.items()}, streaming=streaming)
    if streaming and "true" in options.values() and "triolog.group.id" in options:
        assert parse_read_options({**base, **options}, streaming=True).commit_group == "g"
