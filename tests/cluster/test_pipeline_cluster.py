"""The Spark data source's reading side on a cluster (without Spark: the planner and the reader
its tasks run): partitions led by three brokers are each read from their own leader."""

from __future__ import annotations

from triolog.client import Producer
from triolog.client.consumer_core import ConsumerConfig
from triolog.client.types import TopicPartition
from triolog.pipeline.fetch import read_range
from triolog.pipeline.plan import BrokerView

from .helpers import wait_until


def test_the_reader_plans_and_reads_partitions_of_three_leaders(start_brokers):
    brokers = start_brokers((1, 2, 3))
    bootstrap = ",".join(b.bootstrap for b in brokers.values())
    with Producer(bootstrap, acks="all") as producer:
        from triolog.client import AdminClient

        with AdminClient(bootstrap) as admin:
            admin.create_topics([("spread", 3, 3, {})])
            assert wait_until(lambda: all(p.leader > 0 for p in admin.describe_topics(["spread"])["spread"].partitions))
            leaders = {p.partition: p.leader for p in admin.describe_topics(["spread"])["spread"].partitions}
        assert sorted(leaders.values()) == [1, 2, 3]  # one partition led by each broker
        for i in range(90):
            producer.send("spread", f"v{i}".encode(), partition=i % 3)
        producer.flush()

    config = ConsumerConfig()
    view = BrokerView(brokers[1].bootstrap, config)  # (one broker named: the rest are learnt)
    try:
        latest = view.latest([TopicPartition("spread", p) for p in range(3)])
    finally:
        view.close()
    assert latest == {TopicPartition("spread", p): 30 for p in range(3)}
    for partition in range(3):
        batches = list(
            read_range(
                brokers[1].bootstrap, config, "spread", partition, 0, 30, fail_on_data_loss=True, include_headers=False
            )
        )
        values = [v.decode() for b in batches for v in b.column("value").to_pylist()]
        assert values == [f"v{i}" for i in range(partition, 90, 3)]
