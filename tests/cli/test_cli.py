"""The client subcommands run through ``triolog.broker.cli.main`` against the real broker (both in-process)."""

from __future__ import annotations

import socket

import pytest

from triolog.client import Producer


@pytest.mark.parametrize("command", ["topics", "produce", "consume", "offsets", "delete-records"])
def test_cli_help_for_each_client_subcommand(triolog, command):
    result = triolog(command, "--help")
    assert result.code == 0, result.stderr
    assert f"usage: triolog {command}" in result.out
    assert "--bootstrap-server" in result.out and "127.0.0.1:9092" in result.out


@pytest.mark.parametrize("args", [["--help"], ["serve", "--help"], ["dump-log", "--help"], ["configs", "--help"]],
                         ids=" ".join)
def test_cli_help_for_the_command_and_existing_subcommands(triolog, args):
    result = triolog(*args)
    assert result.code == 0, result.stderr
    assert result.out.startswith("usage: triolog")
    if args == ["--help"]:
        assert all(c in result.out for c in ("serve", "topics", "produce", "consume", "offsets", "delete-records",
                                             "dump-log", "users", "acls", "configs", "--version"))


def test_cli_topics_create_list_describe_alter_delete(triolog, server, topic):
    created = triolog("topics", *server, "--create", "--topic", topic, "--partitions", "2",
                      "--config", "retention.ms=60000")
    assert (created.code, created.out) == (0, f"Created topic {topic}.\n"), created.stderr
    listed = triolog("topics", *server, "--list")
    assert listed.code == 0 and topic in listed.out.splitlines()

    described = triolog("topics", *server, "--describe", "--topic", topic)
    lines = described.out.splitlines()
    assert described.code == 0
    assert lines[0] == f"Topic: {topic}\tPartitionCount: 2\tReplicationFactor: 1\tConfigs: retention.ms=60000"
    assert [line.split("\t")[2] for line in lines[1:]] == ["Partition: 0", "Partition: 1"]

    altered = triolog("topics", *server, "--alter", "--topic", topic, "--config", "segment.bytes=1048576",
                      "--delete-config", "retention.ms")
    assert (altered.code, altered.out) == (0, f"Completed updating config for topic {topic}.\n"), altered.stderr
    described = triolog("topics", *server, "--describe", "--topic", topic)
    assert described.out.splitlines()[0].endswith("Configs: segment.bytes=1048576")

    deleted = triolog("topics", *server, "--delete", "--topic", topic)
    assert (deleted.code, deleted.out) == (0, f"Deleted topic {topic}.\n")
    assert topic not in triolog("topics", *server, "--list").out.splitlines()


def test_cli_topics_errors_exit_1_with_the_broker_message(triolog, server, topic):
    assert triolog("topics", *server, "--create", "--topic", topic).code == 0
    again = triolog("topics", *server, "--create", "--topic", topic)
    assert again.code == 1 and again.stderr.startswith("Error: TOPIC_ALREADY_EXISTS")
    assert triolog("topics", *server, "--create", "--topic", topic, "--if-not-exists").code == 0
    bad_config = triolog("topics", *server, "--create", "--topic", topic + "x", "--config", "retention.ms=soon")
    assert bad_config.code == 1 and "INVALID_CONFIG" in bad_config.stderr and "retention.ms" in bad_config.stderr
    missing = triolog("topics", *server, "--describe", "--topic", topic + "-missing")
    assert missing.code == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in missing.stderr


def test_cli_topics_usage_errors_exit_2(triolog, server):
    assert triolog("topics", *server).code == 2  # no action
    assert triolog("topics", *server, "--create", "--list").code == 2  # two actions
    assert triolog("topics", *server, "--create").code == 2  # no --topic
    assert triolog("topics", *server, "--create", "--topic", "t", "--config", "novalue").code == 2
    assert triolog("topics", "--bootstrap-server", "nonsense", "--list").code == 2


def test_cli_produce_then_consume_from_beginning_with_keys_and_compression(triolog, server, topic):
    assert triolog("topics", *server, "--create", "--topic", topic, "--partitions", "1").code == 0
    produced = triolog("produce", *server, "--topic", topic, "--key-separator", ":", "--compression", "gzip",
                       stdin=b"k1:v1\nk2:v:2\r\nk3:\n")
    assert (produced.code, produced.stderr) == (0, "")
    consumed = triolog("consume", *server, "--topic", topic, "--from-beginning", "--max-messages", "3",
                       "--print-key", "--print-offset", "--print-partition")
    assert consumed.code == 0, consumed.stderr
    assert consumed.out == ("Partition:0\tOffset:0\tk1\tv1\n"
                            "Partition:0\tOffset:1\tk2\tv:2\n"
                            "Partition:0\tOffset:2\tk3\t\n")
    assert "Processed a total of 3 messages" in consumed.stderr


def test_cli_produce_without_separator_has_no_keys_and_refuses_nothing(triolog, server, topic):
    assert triolog("produce", *server, "--topic", topic, "--partition", "0", stdin=b"plain\nwith:colon\n").code == 0
    consumed = triolog("consume", *server, "--topic", topic, "--from-beginning", "--max-messages", "2",
                       "--print-key", "--print-headers")
    assert consumed.out == "NO_HEADERS\tnull\tplain\nNO_HEADERS\tnull\twith:colon\n"


def test_cli_produce_line_without_the_key_separator_fails(triolog, server, topic):
    result = triolog("produce", *server, "--topic", topic, "--key-separator", "=", stdin=b"a=1\nbroken\nc=3\n")
    assert result.code == 1 and "line 2" in result.stderr
    consumed = triolog("consume", *server, "--topic", topic, "--from-beginning", "--timeout-ms", "500")
    assert consumed.out == "1\n"  # the lines before the bad one were sent, none after


@pytest.fixture
def stamped(broker, topic):
    """``topic`` with v0..v4 at timestamps 1000..5000 in partition 0."""
    with Producer(f"127.0.0.1:{broker.port}") as producer:
        for i in range(5):
            producer.send(topic, b"v%d" % i, partition=0, timestamp_ms=1000 * (i + 1))
    return topic


def test_cli_consume_from_an_offset_or_a_timestamp(triolog, server, stamped):
    from_offset = triolog("consume", *server, "--topic", stamped, "--offset", "3", "--max-messages", "2")
    assert (from_offset.code, from_offset.out) == (0, "v3\nv4\n")
    from_time = triolog("consume", *server, "--topic", stamped, "--timestamp", "2500", "--max-messages", "1",
                        "--print-timestamp")
    assert (from_time.code, from_time.out) == (0, "CreateTime:3000\tv2\n")


def test_cli_consume_offset_out_of_range_exits_1(triolog, server, stamped):
    result = triolog("consume", *server, "--topic", stamped, "--offset", "99", "--max-messages", "1")
    assert result.code == 1 and "OFFSET_OUT_OF_RANGE" in result.stderr


def test_cli_consume_starts_at_the_end_and_stops_after_timeout(triolog, server, stamped):
    result = triolog("consume", *server, "--topic", stamped, "--timeout-ms", "300")
    assert (result.code, result.out) == (0, "")
    assert "Processed a total of 0 messages" in result.stderr


def test_cli_offsets_for_each_time_spec(triolog, server, stamped):
    def offsets(time_spec):
        result = triolog("offsets", *server, "--topic", stamped, "--time", time_spec)
        assert result.code == 0, result.stderr
        return result.out

    assert offsets("-1") == f"{stamped}:0:5\n"
    assert offsets("earliest") == f"{stamped}:0:0\n"
    assert offsets("-3") == f"{stamped}:0:4\n"
    assert offsets("2500") == f"{stamped}:0:2\n"
    assert offsets("9000") == f"{stamped}:0:-1\n"


def test_cli_offsets_of_an_unknown_partition_exits_1(triolog, server, stamped):
    result = triolog("offsets", *server, "--topic", stamped, "--partitions", "0,7")
    assert result.code == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in result.stderr


def test_cli_unreachable_broker_exits_1_with_an_error(triolog):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    result = triolog("topics", "--bootstrap-server", f"127.0.0.1:{port}", "--list")
    assert result.code == 1 and result.stderr.startswith("Error: cannot connect")


def test_cli_consume_of_an_unknown_topic_fails_and_does_not_create_it(triolog, server, topic):
    """Kafka's rule: a consumer's metadata request does not create topics (produce may)."""
    result = triolog("consume", *server, "--topic", topic, "--timeout-ms", "500")
    assert result.code == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in result.stderr
    assert topic not in triolog("topics", *server, "--list").out.splitlines()
