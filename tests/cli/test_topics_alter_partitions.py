"""``triolog topics --alter --partitions N``: kafka-topics.sh's way of adding partitions."""

from __future__ import annotations

import json


def _partition_count(triolog, server, topic) -> int:
    described = triolog("topics", *server, "--describe", "--topic", topic, "--output", "json")
    assert described.code == 0, described.stderr
    return json.loads(described.out)[0]["partition_count"]


def test_alter_partitions_grows_the_topic_and_refuses_a_smaller_count(triolog, server, topic):
    assert triolog("topics", *server, "--create", "--topic", topic, "--partitions", "2").code == 0
    grown = triolog("topics", *server, "--alter", "--topic", topic, "--partitions", "4")
    assert grown.code == 0 and grown.out == f"Altered topic {topic}.\n", grown.stderr
    assert _partition_count(triolog, server, topic) == 4

    smaller = triolog("topics", *server, "--alter", "--topic", topic, "--partitions", "3")
    assert smaller.code == 1 and smaller.stderr.splitlines() == [
        f"Error: INVALID_PARTITIONS [{topic}]: Topic currently has 4 partitions, which is higher than the requested 3."]
    same = triolog("topics", *server, "--alter", "--topic", topic, "--partitions", "4")
    assert same.code == 1 and "Topic already has 4 partition(s)." in same.stderr

    # With a config change too: both applied.
    both = triolog("topics", *server, "--alter", "--topic", topic, "--partitions", "5", "--config", "retention.ms=5000",
                   "--output", "json")
    assert both.code == 0 and json.loads(both.out) == {"topic": topic, "result": "altered"}
    assert _partition_count(triolog, server, topic) == 5
    described = json.loads(triolog("topics", *server, "--describe", "--topic", topic, "--output", "json").out)
    assert described[0]["configs"] == {"retention.ms": "5000"}


def test_alter_partitions_of_a_missing_topic(triolog, server, topic):
    missing = triolog("topics", *server, "--alter", "--topic", topic, "--partitions", "3")
    assert missing.code == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in missing.stderr
    tolerated = triolog("topics", *server, "--alter", "--topic", topic, "--partitions", "3", "--if-exists")
    assert tolerated.code == 0


def test_alter_without_a_change_is_a_usage_error(triolog, server, topic):
    result = triolog("topics", *server, "--alter", "--topic", topic)
    assert result.code == 2 and "--alter needs --partitions N, --config KEY=VALUE or --delete-config KEY" in result.stderr
