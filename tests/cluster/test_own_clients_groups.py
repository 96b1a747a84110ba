"""A consumer group of our own consumers on a cluster: subscribe, read every partition (led by
different brokers), commit, and a new member of the group resumes from the commits."""

from __future__ import annotations

import time

import pytest

from triolog.client import Consumer, Producer, TopicPartition

from .test_own_clients_cluster import _bootstrap, _create


@pytest.fixture
def brokers(start_brokers):
    return start_brokers((1, 2, 3))


def test_a_group_reads_partitions_of_every_leader_and_resumes_from_its_commits(brokers):
    bootstrap = _bootstrap(brokers)
    leaders = _create(bootstrap, "grouped", 3, 1)
    assert sorted(leaders.values()) == [1, 2, 3]
    with Producer(bootstrap, linger_ms=1) as producer:
        for f in [producer.send("grouped", b"%d" % i, partition=i % 3) for i in range(90)]:
            f.get(30)

    def read(count: int, committed_after: int) -> list[int]:
        seen: list[int] = []
        with Consumer(bootstrap, group_id="g", auto_offset_reset="earliest", enable_auto_commit=False) as consumer:
            consumer.subscribe(["grouped"])
            deadline = time.monotonic() + 60
            while len(seen) < count and time.monotonic() < deadline:
                for records in consumer.poll(500).values():
                    seen.extend(int(r.value) for r in records)
            consumer.commit()
            committed = {p: consumer.committed(TopicPartition("grouped", p)) for p in range(3)}
        assert committed == dict.fromkeys(range(3), committed_after)
        return seen

    assert sorted(read(90, 30)) == list(range(90))
    with Producer(bootstrap, linger_ms=1) as producer:
        for f in [producer.send("grouped", b"%d" % i, partition=i % 3) for i in range(90, 120)]:
            f.get(30)
    # A new member of the group reads only what came after the commits.
    assert sorted(read(30, 40)) == list(range(90, 120))


def test_the_group_admin_finds_the_coordinator_from_any_broker(start_brokers):
    """kafka-consumer-groups.sh's calls through a broker that coordinates no group: each goes to
    the group's coordinator (describe, offsets, alter, delete), a listing to every broker."""
    from triolog.client import AdminClient, NewTopic

    from .helpers import wait_until

    brokers = start_brokers((1, 2), "offsets.topic.num.partitions=1", "offsets.topic.replication.factor=2")
    bootstrap = [b.bootstrap for b in brokers.values()]
    with AdminClient(bootstrap) as admin:
        admin.create_topics([NewTopic("t", 1, 2)])
        wait_until(lambda: admin.describe_topics(["t"])["t"].partitions[0].leader >= 0)
    with Consumer(bootstrap, group_id="g") as consumer:  # (creates __consumer_offsets)
        consumer.assign([("t", 0)])
        consumer.commit({TopicPartition("t", 0): 0})
    with AdminClient(bootstrap) as admin:
        coordinator = admin.describe_topics(["__consumer_offsets"])["__consumer_offsets"].partitions[0].leader
    other = next(node for node in brokers if node != coordinator)
    with AdminClient(brokers[other].bootstrap) as admin:
        assert admin.list_consumer_group_offsets("g") == {TopicPartition("t", 0): 0}
        admin.alter_consumer_group_offsets("g", {("t", 0): 5})
        assert admin.list_consumer_group_offsets("g") == {TopicPartition("t", 0): 5}
        assert admin.describe_consumer_groups(["g"])["g"].state == "Empty"
        assert [g.group_id for g in admin.list_consumer_groups()] == ["g"]
        assert admin.delete_consumer_groups(["g"]) == {"g": None}
        assert admin.list_consumer_groups() == []
