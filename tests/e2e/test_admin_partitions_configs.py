"""Kafka's admin capabilities on the real broker process, through our AdminClient: CreatePartitions
(grow a topic; data kept; producers and consumers reach the new partitions; survives a restart),
DescribeConfigs of the BROKER resource, and AlterConfigs' replace / APPEND / SUBTRACT /
validate_only semantics."""

from __future__ import annotations

import pytest

from triolog.client import AdminClient, NewTopic, Producer
from triolog.protocol import messages as m
from triolog.client.errors import (
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidRequestError,
    PolicyViolationError,
    UnknownTopicOrPartitionError,
)

from tests.e2e.reading import read_partition
from tests.waiting import wait_for


def _bootstrap(broker) -> str:
    return f"127.0.0.1:{broker.port}"


def _count(admin, topic: str) -> int:
    return len(admin.describe_topics([topic])[topic].partitions)


def test_create_partitions_grows_a_topic_keeping_its_data_and_survives_a_restart(broker_factory, tmp_path):
    broker = broker_factory(process=True)  # killed -9 below
    bootstrap = _bootstrap(broker)
    with AdminClient(bootstrap) as admin:
        admin.create_topics([NewTopic("grow", num_partitions=2)])
        with Producer(bootstrap, acks=-1) as producer:
            assert producer.send("grow", b"before", partition=1).get(timeout=30).offset == 0
        admin.create_partitions({"grow": 5})
        assert _count(admin, "grow") == 5
        with Producer(bootstrap, acks=-1) as producer:
            assert producer.send("grow", b"new-4", partition=4).get(timeout=30).offset == 0
            assert producer.send("grow", b"after", partition=1).get(timeout=30).offset == 1
    assert [r.value for r in read_partition(bootstrap, "grow", 4)] == [b"new-4"]
    assert [r.value for r in read_partition(bootstrap, "grow", 1)] == [b"before", b"after"]
    assert sorted(p.name for p in (tmp_path / "data").glob("grow-*")) == [f"grow-{i}" for i in range(5)]

    broker.kill()  # kill -9: the new count was durable before the response
    broker = broker_factory(data_dir=tmp_path / "data")
    bootstrap = _bootstrap(broker)
    with AdminClient(bootstrap) as admin:
        assert _count(admin, "grow") == 5
    assert [r.value for r in read_partition(bootstrap, "grow", 4)] == [b"new-4"]
    assert [r.value for r in read_partition(bootstrap, "grow", 1)] == [b"before", b"after"]


def test_a_producer_partitions_keys_over_the_new_partitions_after_a_metadata_refresh(broker):
    bootstrap = _bootstrap(broker)
    keys = [b"key-%d" % i for i in range(64)]
    with AdminClient(bootstrap) as admin, Producer(bootstrap, acks=1, metadata_max_age_ms=0) as producer:
        admin.create_topics([NewTopic("keyed", num_partitions=1)])
        before = {producer.send("keyed", b"v", key=k).get(timeout=30).partition for k in keys}
        assert before == {0}
        admin.create_partitions({"keyed": 4})
        # KNOWN_TOPIC_S: the producer trusts a partition count for a second before asking again.
        wait_for(lambda: len({producer.send("keyed", b"v", key=k).get(timeout=30).partition for k in keys}) == 4,
                 timeout_s=15, what="keyed records spread over the 4 partitions")


def test_create_partitions_answers_kafkas_errors_and_changes_nothing_on_error(broker_factory):
    broker = broker_factory("max.broker.partitions=12")
    with AdminClient(_bootstrap(broker)) as admin:
        admin.create_topics([NewTopic("t", num_partitions=3)])
        with pytest.raises(InvalidPartitionsError, match=r"Topic currently has 3 partitions, which is higher "
                                                         r"than the requested 2\.$"):
            admin.create_partitions({"t": 2})
        with pytest.raises(InvalidPartitionsError, match=r"Topic already has 3 partition\(s\)\.$"):
            admin.create_partitions({"t": 3})
        with pytest.raises(UnknownTopicOrPartitionError):
            admin.create_partitions({"absent": 4})
        with pytest.raises(PolicyViolationError, match="max.broker.partitions=12"):
            admin.create_partitions({"t": 13})
        admin.create_partitions({"t": 6}, validate_only=True)
        assert _count(admin, "t") == 3
        admin.create_partitions({"t": 12})  # exactly at the cap
        assert _count(admin, "t") == 12
        with pytest.raises(PolicyViolationError):
            admin.create_partitions({"t": 13})


def test_one_topics_error_does_not_stop_the_others(broker):
    with AdminClient(_bootstrap(broker)) as admin:
        admin.create_topics([NewTopic("a", num_partitions=1), NewTopic("b", num_partitions=2)])
        with pytest.raises(InvalidPartitionsError):
            admin.create_partitions({"a": 3, "b": 1})
        assert (_count(admin, "a"), _count(admin, "b")) == (3, 2)


def test_describe_broker_configs_reports_every_key_with_its_source(broker_factory):
    broker = broker_factory("log.retention.hours=24", "num.partitions=3")
    with AdminClient(_bootstrap(broker)) as admin:
        configs = admin.describe_broker_configs()
        assert configs == admin.describe_broker_configs(0) == admin.describe_broker_configs("0")
        assert configs["log.retention.hours"] == ("24", "broker", True, False)
        assert configs["num.partitions"] == ("3", "broker", True, False)
        assert configs["log.retention.ms"] == (None, "default", True, False)  # unset: falls back, as Kafka shows
        assert configs["auto.create.topics.enable"] == ("true", "default", True, False)
        assert configs["log.dirs"].source == "broker"
        with pytest.raises(InvalidRequestError, match="unexpected broker id"):
            admin.describe_broker_configs(7)
        with pytest.raises(InvalidRequestError, match="must be an integer"):
            admin.describe_broker_configs("zero")
        # Topic configs as before, broker-level retention seen as the topic's broker source.
        admin.create_topics(["plain"])
        topic = admin.describe_configs(["plain"])["plain"]
        assert topic["retention.ms"] == (str(24 * 3600 * 1000), "broker")


def test_alter_configs_replace_append_subtract_and_validate_only(broker):
    with AdminClient(_bootstrap(broker)) as admin:
        admin.create_topics([NewTopic("c", num_partitions=1, configs={"retention.ms": "1000", "segment.bytes": "1048576"})])

        def overrides() -> dict[str, str]:
            return {k: e.value for k, e in admin.describe_configs(["c"])["c"].items() if e.source == "topic"}

        # Kafka's AlterConfigs: the given set replaces every override.
        admin.alter_configs({"c": {"cleanup.policy": "compact"}}, replace=True)
        assert overrides() == {"cleanup.policy": "compact"}
        # IncrementalAlterConfigs APPEND / SUBTRACT on a list key.
        admin.alter_configs({}, append={"c": {"cleanup.policy": "delete"}})
        assert overrides() == {"cleanup.policy": "compact,delete"}
        admin.alter_configs({}, append={"c": {"cleanup.policy": "delete"}})  # already there: once
        assert overrides() == {"cleanup.policy": "compact,delete"}
        admin.alter_configs({}, subtract={"c": {"cleanup.policy": "compact"}})
        assert overrides() == {"cleanup.policy": "delete"}
        with pytest.raises(InvalidConfigError, match="must list at least one"):
            admin.alter_configs({}, subtract={"c": {"cleanup.policy": "delete"}})
        with pytest.raises(InvalidConfigError, match="retention.ms is not a list"):
            admin.alter_configs({}, append={"c": {"retention.ms": "5"}})
        with pytest.raises(InvalidConfigError, match="no.such.key"):
            admin.alter_configs({"c": {"no.such.key": "1"}}, replace=True)
        with pytest.raises(InvalidConfigError, match="retention.ms"):
            admin.alter_configs({"c": {"retention.ms": "soon"}})
        with pytest.raises(InvalidRequestError, match="replace"):
            admin.alter_configs({"c": {"retention.ms": "5"}}, {"c": ["segment.bytes"]}, replace=True)
        # validate_only: checked, not applied.
        admin.alter_configs({"c": {"retention.ms": "5000"}}, validate_only=True)
        admin.alter_configs({"c": {"segment.bytes": "2048"}}, replace=True, validate_only=True)
        assert overrides() == {"cleanup.policy": "delete"}
        with pytest.raises(InvalidConfigError):
            admin.alter_configs({"c": {"retention.ms": "soon"}}, validate_only=True)
        # Plain set / delete keep working as before.
        admin.alter_configs({"c": {"retention.ms": "5000"}}, {"c": ["cleanup.policy"]})
        assert overrides() == {"retention.ms": "5000"}


def test_a_broker_killed_while_creating_the_new_partitions_restarts_with_the_new_count(broker_factory, tmp_path):
    """kill -9 of the real process while it makes the new partition directories (the first one
    is there, most are not): the count was made durable first, so the restart has the new count,
    every partition usable and the old data whole."""
    data = tmp_path / "data"
    broker = broker_factory("max.broker.partitions=5000", process=True)
    bootstrap = _bootstrap(broker)
    with AdminClient(bootstrap) as admin:
        admin.create_topics([NewTopic("big", num_partitions=2)])
    with Producer(bootstrap, acks=-1) as producer:
        producer.send("big", b"kept", partition=1).get(timeout=30)
    wire = broker.client()
    wire.send_frame(m.encode_request(m.CreatePartitionsRequest(
        id=7, topics=(m.CreatePartitionsTopic(name="big", count=1000),))))
    wait_for(lambda: (data / "big-2").exists() or (data / "big-999").exists(), timeout_s=30,
             what="the first new partition directory", interval_s=0.001)
    broker.kill()
    wire.close()

    # The recovery of a thousand partitions, CPU-bound: in a process of its own, as before.
    broker = broker_factory("max.broker.partitions=5000", data_dir=data, process=True)
    bootstrap = _bootstrap(broker)
    with AdminClient(bootstrap) as admin:
        assert _count(admin, "big") == 1000
    with Producer(bootstrap, acks=-1) as producer:
        assert producer.send("big", b"new", partition=999).get(timeout=30).offset == 0
    assert [r.value for r in read_partition(bootstrap, "big", 1)] == [b"kept"]
    assert [r.value for r in read_partition(bootstrap, "big", 999)] == [b"new"]


def test_a_group_consumer_is_given_the_new_partitions_and_reads_them(broker_factory):
    """The group leader sees the new count at its next metadata check and rebalances (Kafka's
    metadata snapshot): records produced to a new partition reach the subscribed consumer."""
    from triolog.client import Consumer

    bootstrap = _bootstrap(broker_factory("group.initial.rebalance.delay.ms=0"))
    with AdminClient(bootstrap) as admin:
        admin.create_topics([NewTopic("sub", num_partitions=1)])
    with Consumer(bootstrap, group_id="grow-group", auto_offset_reset="earliest", metadata_max_age_ms=200) as consumer:
        consumer.subscribe("sub")
        wait_for(lambda: consumer.poll(100) is not None and consumer.assignment(), timeout_s=30,
                 what="the first assignment")
        with AdminClient(bootstrap) as admin:
            admin.create_partitions({"sub": 3})
        with Producer(bootstrap, acks=-1) as producer:
            producer.send("sub", b"on-2", partition=2).get(timeout=30)
        seen: list = []

        def got_it() -> bool:
            for records in consumer.poll(100).values():
                seen.extend(r.value for r in records)
            return b"on-2" in seen

        wait_for(got_it, timeout_s=30, what="the record of the new partition")
        assert {tp.partition for tp in consumer.assignment()} == {0, 1, 2}
