"""The example pipeline (pipeline/examples/windowed_totals.py) end to end, on the shared Spark."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict

from triolog.pipeline.examples import windowed_totals as example


def test_example_pipeline_writes_the_latest_window_totals_to_a_compacted_topic(spark, bootstrap, admin, topic,
                                                                               tmp_path):
    events, totals = topic + "-events", topic + "-totals"
    sent = example.run(spark, bootstrap, seconds=3, rate=100, checkpoint=str(tmp_path / "checkpoint"),
                       events_topic=events, totals_topic=totals, window="2 seconds")
    assert len(sent) >= 100

    assert admin.describe_configs([totals])[totals]["cleanup.policy"].value == "compact"
    want: dict = defaultdict(lambda: [0, 0])
    for user, amount, ts in sent:
        window_start = dt.datetime.fromtimestamp(ts // 2000 * 2, dt.UTC).replace(tzinfo=None)
        want[(user, window_start)][0] += 1
        want[(user, window_start)][1] += amount
    table = example.totals_table(spark, bootstrap, totals).collect()
    got = {(row["user"], row["window_start"]): [row["events"], row["total"]] for row in table}
    assert got == dict(want)


def test_register_helper_registers_the_triolog_format(spark, bootstrap, admin, topic):
    """``triolog.pipeline.register(spark)``; every other test relies on PySpark finding pyspark_triolog."""
    from triolog import pipeline
    from triolog.client import NewTopic

    from .helpers import produce, reader

    admin.create_topics([NewTopic(topic, 1)])
    produce(bootstrap, topic, 1, 3)
    pipeline.register(spark)
    assert reader(spark, bootstrap, subscribe=topic).load().count() == 3
