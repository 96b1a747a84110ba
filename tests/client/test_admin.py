"""The admin client against the real broker: topics, configs, records, offsets, typed errors."""

from __future__ import annotations

import pytest

from triolog.client import (ConfigEntry, InvalidConfigError, InvalidPartitionsError, InvalidReplicationFactorError,
                    InvalidTopicError, NewTopic, OffsetAndTimestamp, OffsetOutOfRangeError, Producer,
                    TopicAlreadyExistsError, TopicPartition, UnknownTopicOrPartitionError)


def test_admin_create_list_describe_delete_topics(admin, topic):
    configs = admin.create_topics([NewTopic(topic, 3, configs={"retention.ms": "60000"})])
    assert configs[topic]["retention.ms"] == "60000"
    assert topic in admin.list_topics()
    description = admin.describe_topics([topic])[topic]
    assert [p.partition for p in description.partitions] == [0, 1, 2]
    assert all(p.high_watermark == 0 and p.log_start_offset == 0 for p in description.partitions)
    admin.delete_topics([topic])
    assert topic not in admin.list_topics()


def test_admin_create_validate_only_creates_nothing(admin, topic):
    admin.create_topics([NewTopic(topic, 2)], validate_only=True)
    assert topic not in admin.list_topics()


def test_admin_create_existing_topic_raises_topic_already_exists(admin, topic):
    admin.create_topics([topic])
    with pytest.raises(TopicAlreadyExistsError) as info:
        admin.create_topics([topic])
    assert info.value.topic == topic and info.value.error_message


def test_admin_invalid_topic_name_raises_invalid_topic_error(admin):
    with pytest.raises(InvalidTopicError):
        admin.create_topics([NewTopic("..", 1)])
    with pytest.raises(InvalidTopicError):
        admin.create_topics([NewTopic("x" * 250, 1)])


def test_admin_invalid_partitions_and_replication_factor_are_typed(admin, topic):
    with pytest.raises(InvalidPartitionsError):
        admin.create_topics([NewTopic(topic, 0)])
    with pytest.raises(InvalidReplicationFactorError):
        admin.create_topics([NewTopic(topic, 1, replication_factor=3)])


def test_admin_invalid_config_raises_invalid_config_error(admin, topic):
    with pytest.raises(InvalidConfigError):
        admin.create_topics([NewTopic(topic, 1, configs={"retention.ms": "soon"})])
    assert topic not in admin.list_topics()
    admin.create_topics([topic])
    with pytest.raises(InvalidConfigError):
        admin.alter_configs({topic: {"no.such.key": "1"}})


def test_admin_describe_and_alter_configs(admin, topic):
    admin.create_topics([NewTopic(topic, 1, configs={"segment.bytes": "1048576"})])
    configs = admin.describe_configs([topic])[topic]
    assert configs["segment.bytes"] == ConfigEntry("1048576", "topic")
    assert configs["cleanup.policy"].source in ("broker", "default")
    admin.alter_configs({topic: {"retention.ms": "1234"}}, delete={topic: ["segment.bytes"]})
    configs = admin.describe_configs([topic])[topic]
    assert configs["retention.ms"] == ConfigEntry("1234", "topic")
    assert configs["segment.bytes"].source != "topic"


def test_admin_describe_unknown_topic_raises_without_creating_it(admin, topic):
    with pytest.raises(UnknownTopicOrPartitionError):
        admin.describe_topics([topic])
    with pytest.raises(UnknownTopicOrPartitionError):
        admin.describe_configs([topic])
    assert topic not in admin.list_topics()  # a broker with auto-create on did not create it


def test_admin_describe_names_only_the_topics_asked_and_refuses_an_invalid_name(admin, topic):
    admin.create_topics([topic, topic + "-other"])
    assert list(admin.describe_topics([topic, topic])) == [topic]
    with pytest.raises(InvalidTopicError):
        admin.describe_topics([topic, "no spaces"])


def test_admin_delete_records_moves_the_log_start(bootstrap, admin, topic):
    admin.create_topics([NewTopic(topic, 1)])
    tp = TopicPartition(topic, 0)
    with Producer(bootstrap) as producer:
        for i in range(5):
            producer.send(topic, b"%d" % i, partition=0)
    assert admin.delete_records({tp: 3}) == {tp: 3}
    assert admin.list_offsets({tp: -2})[tp].offset == 3
    with pytest.raises(OffsetOutOfRangeError):
        admin.delete_records({tp: 99})
    assert admin.delete_records({tp: -1}) == {tp: 5}  # -1: up to the high watermark


def test_admin_list_offsets_for_latest_earliest_max_timestamp_and_a_time(bootstrap, admin, topic):
    admin.create_topics([NewTopic(topic, 1)])
    tp = TopicPartition(topic, 0)
    with Producer(bootstrap) as producer:
        for timestamp in (1000, 5000, 3000):
            producer.send(topic, b"x", partition=0, timestamp_ms=timestamp)
    assert admin.list_offsets({tp: -1})[tp].offset == 3
    assert admin.list_offsets({tp: -2})[tp].offset == 0
    assert admin.list_offsets({tp: -3})[tp] == OffsetAndTimestamp(1, 5000)
    assert admin.list_offsets({tp: 2000})[tp] == OffsetAndTimestamp(1, 5000)
    assert admin.list_offsets({tp: 9000})[tp] == OffsetAndTimestamp(-1, -1)
    with pytest.raises(UnknownTopicOrPartitionError):
        admin.list_offsets({(topic, 4): -1})


def test_admin_api_versions_lists_every_api(admin):
    apis = {a["name"] for a in admin.api_versions()["apis"]}
    assert {"produce", "fetch", "metadata", "list_offsets", "delete_records"} <= apis
