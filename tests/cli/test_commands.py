"""--version, TRIOLOG_BOOTSTRAP_SERVER, delete-records and the produce options, through the command's main()."""

from __future__ import annotations

import json
import platform
import socket
import subprocess

import pytest

from triolog import __version__
from triolog.client import Producer
from triolog import core

from tests.cli.conftest import ROOT, cli_command, cli_env


def test_version_names_triolog_python_and_the_core_that_runs(triolog):
    result = triolog("--version")
    expected = f"triolog {__version__} (Python {platform.python_version()}; core: {core.status()})\n"
    assert (result.code, result.out) == (0, expected)
    assert core.status() in ("compiled (Cython)", "pure Python (extension not built)",
                             "pure Python (extension out of date)", "pure Python (TRIOLOG_PURE_PYTHON is set)")


def test_version_says_when_the_environment_forces_the_pure_python_core():
    # A process of its own: TRIOLOG_PURE_PYTHON is read when triolog is first imported.
    done = subprocess.run(cli_command("--version"), capture_output=True, text=True, cwd=ROOT, timeout=60,
                          env={**cli_env(), "TRIOLOG_PURE_PYTHON": "1"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.endswith("; core: pure Python (TRIOLOG_PURE_PYTHON is set))\n"), done.stdout


def test_bootstrap_server_defaults_to_the_environment_variable(triolog, broker, topic):
    env = {"TRIOLOG_BOOTSTRAP_SERVER": f"127.0.0.1:{broker.port}"}
    assert triolog("topics", "--create", "--topic", topic, env=env).code == 0
    assert topic in triolog("topics", "--list", env=env).out.splitlines()
    assert "TRIOLOG_BOOTSTRAP_SERVER" in triolog("topics", "--help", env=env).out
    # An explicit --bootstrap-server still wins: here, a port where nothing listens.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    refused = triolog("topics", "--list", "--bootstrap-server", f"127.0.0.1:{port}", env=env)
    assert refused.code == 1 and "cannot connect" in refused.stderr
    bad = triolog("topics", "--list", env={"TRIOLOG_BOOTSTRAP_SERVER": "no-port"})
    assert bad.code == 2 and "host:port" in bad.stderr


@pytest.fixture
def ten(broker, topic):
    """``topic`` with 10 records in each of its 2 partitions."""
    from triolog.client.admin import AdminClient

    with AdminClient(f"127.0.0.1:{broker.port}") as admin:
        admin.create_topics([(topic, 2, 1, {})])
    with Producer(f"127.0.0.1:{broker.port}") as producer:
        for partition in (0, 1):
            for _ in range(10):
                producer.send(topic, b"v", partition=partition)
    return topic


def test_delete_records_from_kafkas_offset_json_file(triolog, server, ten, tmp_path):
    plan = tmp_path / "offsets.json"
    plan.write_text(json.dumps({"partitions": [{"topic": ten, "partition": 0, "offset": 4},
                                               {"topic": ten, "partition": 1, "offset": -1}], "version": 1}))
    result = triolog("delete-records", *server, "--offset-json-file", str(plan))
    assert result.code == 0, result.stderr
    assert result.out == ("Records delete operation completed:\n"
                          f"partition: {ten}-0\tlow_watermark: 4\n"
                          f"partition: {ten}-1\tlow_watermark: 10\n")
    earliest = triolog("offsets", *server, "--topic", ten, "--time", "earliest")
    assert earliest.out == f"{ten}:0:4\n{ten}:1:10\n"


def test_delete_records_reports_every_partition_when_one_fails(triolog, server, ten, tmp_path):
    plan = tmp_path / "offsets.json"
    plan.write_text(json.dumps({"partitions": [{"topic": ten, "partition": 0, "offset": 4},
                                               {"topic": ten, "partition": 1, "offset": 11}], "version": 1}))
    result = triolog("delete-records", *server, "--offset-json-file", str(plan))
    assert result.code == 1
    lines = result.out.splitlines()
    assert lines[:2] == ["Records delete operation completed:", f"partition: {ten}-0\tlow_watermark: 4"]
    assert lines[2].startswith(f"partition: {ten}-1\terror: OFFSET_OUT_OF_RANGE: ") and len(lines) == 3, result.out
    assert result.stderr.startswith(f"Error: OFFSET_OUT_OF_RANGE [{ten}-1]: ") and result.stderr.count("\n") == 1
    assert triolog("offsets", *server, "--topic", ten, "--time", "earliest").out == f"{ten}:0:4\n{ten}:1:0\n"

    plan.write_text(json.dumps({"partitions": [{"topic": ten, "partition": 0, "offset": 6},
                                               {"topic": ten, "partition": 9, "offset": 1}], "version": 1}))
    result = triolog("delete-records", *server, "--offset-json-file", str(plan), "-J")
    assert result.code == 1
    first, second = json.loads(result.out)["partitions"]
    assert first == {"topic": ten, "partition": 0, "low_watermark": 6}
    assert (second["topic"], second["partition"], second["error"]) == (ten, 9, "UNKNOWN_TOPIC_OR_PARTITION")
    assert second["error_message"] and "low_watermark" not in second


def test_delete_records_errors(triolog, server, ten, tmp_path):
    beyond = triolog("delete-records", *server, "--topic", ten, "--partition", "0", "--offset", "11")
    assert beyond.code == 1 and "OFFSET_OUT_OF_RANGE" in beyond.stderr
    unknown = triolog("delete-records", *server, "--topic", ten, "--partition", "9", "--offset", "1")
    assert unknown.code == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in unknown.stderr
    assert triolog("delete-records", *server, "--topic", ten, "--partition", "0").code == 2  # no --offset
    assert triolog("delete-records", *server, "--topic", ten, "--partition", "0", "--offset", "-2").code == 2
    bad = tmp_path / "bad.json"
    bad.write_text('{"partitions": [{"topic": "t", "partition": 0}], "version": 1}')
    refused = triolog("delete-records", *server, "--offset-json-file", str(bad))
    assert refused.code == 2 and "partitions[0].offset" in refused.stderr
    missing = triolog("delete-records", *server, "--offset-json-file", str(tmp_path / "nope.json"))
    assert missing.code == 2 and "cannot read" in missing.stderr
    assert triolog("offsets", *server, "--topic", ten, "--time", "earliest").out == f"{ten}:0:0\n{ten}:1:0\n"


def test_produce_headers_timestamps_and_file(triolog, server, topic, tmp_path):
    lines = tmp_path / "records.txt"
    lines.write_bytes(b"1000\ttrace:t1,kind:a\tk1=v1\n"
                      b"2000\t\tk2=v2\n")
    produced = triolog("produce", *server, "--topic", topic, "--partition", "0", "--file", str(lines),
                       "--parse-timestamp", "--parse-headers", "--key-separator", "=", "--header", "src=cli")
    assert (produced.code, produced.stderr) == (0, "")
    consumed = triolog("consume", *server, "--topic", topic, "--from-beginning", "--max-messages", "2", "-J")
    first, second = (json.loads(line) for line in consumed.out.splitlines())
    assert (first["timestamp"], first["key"], first["value"]) == (1000, "k1", "v1")
    assert [(h["key"], h["value"]) for h in first["headers"]] == [("src", "cli"), ("trace", "t1"), ("kind", "a")]
    assert (second["timestamp"], second["key"], second["value"]) == (2000, "k2", "v2")
    assert [(h["key"], h["value"]) for h in second["headers"]] == [("src", "cli")]


def test_produce_fixed_timestamp_and_bad_lines(triolog, server, topic):
    fixed = triolog("produce", *server, "--topic", topic, "--partition", "0", "--timestamp", "42", stdin=b"a\n")
    assert fixed.code == 0
    consumed = triolog("consume", *server, "--topic", topic, "--from-beginning", "--max-messages", "1",
                       "--print-timestamp")
    assert consumed.out == "CreateTime:42\ta\n"
    bad_time = triolog("produce", *server, "--topic", topic, "--parse-timestamp", stdin=b"soon\tx\n")
    assert bad_time.code == 1 and "line 1: timestamp 'soon' is not an integer" in bad_time.stderr
    bad_header = triolog("produce", *server, "--topic", topic, "--parse-headers", stdin=b"nocolon\tx\n")
    assert bad_header.code == 1 and "line 1: header 'nocolon' is not KEY:VALUE" in bad_header.stderr
    no_file = triolog("produce", *server, "--topic", topic, "--file", "/nonexistent/records")
    assert no_file.code == 1 and "cannot read /nonexistent/records" in no_file.stderr


def test_produce_max_block_ms_bounds_the_wait_for_a_topic_that_never_comes(triolog, broker, tmp_path):
    """A broker without auto-creation: the send waits for metadata at most --max-block-ms."""
    from tests.e2e.broker_process import BrokerProcess

    strict = BrokerProcess(tmp_path / "data", overrides=("auto.create.topics.enable=false",)).start()
    try:
        result = triolog("produce", "--bootstrap-server", f"127.0.0.1:{strict.port}", "--topic", "absent",
                         "--max-block-ms", "300", stdin=b"x\n", timeout=30)
        assert result.code == 1 and result.stderr.startswith("Error:"), result.stderr
        assert "still unknown after 0.3 s" in result.stderr and "Traceback" not in result.stderr
    finally:
        strict.kill()


def test_topic_config_errors_name_the_key_the_allowed_values_and_the_key_meant(triolog, server, topic):
    typo = triolog("topics", *server, "--create", "--topic", topic, "--config", "retention.msx=1000")
    assert typo.code == 1
    assert typo.stderr.splitlines() == [
        f"Error: INVALID_CONFIG [{topic}]: unknown topic config 'retention.msx' (did you mean retention.ms?)"]
    bad_value = triolog("topics", *server, "--create", "--topic", topic, "--config", "cleanup.policy=archive")
    assert bad_value.code == 1 and bad_value.stderr.splitlines() == [
        f"Error: INVALID_CONFIG [{topic}]: invalid value 'archive' for cleanup.policy: must be one of delete, compact"]
    assert triolog("topics", *server, "--create", "--topic", topic).code == 0
    alter = triolog("topics", *server, "--alter", "--topic", topic, "--config", "segment.bytes=big")
    assert alter.code == 1 and "invalid value 'big' for segment.bytes: not an integer (allowed: int, >= 14)" in alter.stderr
    unset = triolog("topics", *server, "--alter", "--topic", topic, "--delete-config", "log.retention.ms")
    assert unset.code == 1 and "log.retention.ms is a broker config; the topic config is retention.ms" in unset.stderr


def test_produce_reads_input_in_chunks_keeping_lines_before_a_bad_one(triolog, server, topic):
    """A large input goes through send_many in chunks; line numbers, CRLF endings, a last line
    without a newline and the records before a refused line are as with one send() per line."""
    lines = b"".join(b"k%d=v%d\r\n" % (i, i) for i in range(1, 3000)) + b"no separator\nk3001=after\n"
    bad = triolog("produce", *server, "--topic", topic, "--partition", "0", "--key-separator", "=", stdin=lines)
    assert bad.code == 1 and "line 3000: no key separator '='" in bad.stderr
    consumed = triolog("consume", *server, "--topic", topic, "--from-beginning", "--max-messages", "2999",
                       "--print-key")
    assert consumed.out.splitlines() == [f"k{i}\tv{i}" for i in range(1, 3000)]
    tail = triolog("produce", *server, "--topic", topic, "--partition", "0", stdin=b"last")
    assert tail.code == 0
    consumed = triolog("consume", *server, "--topic", topic, "--from-beginning", "--max-messages", "3000")
    assert consumed.out.splitlines()[-1] == "last"


def test_produce_reports_each_record_the_broker_refuses(triolog, server, topic):
    from triolog.client import AdminClient, NewTopic

    with AdminClient(server[1]) as admin:
        admin.create_topics([NewTopic(topic, 1)])
    result = triolog("produce", *server, "--topic", topic, "--partition", "4", stdin=b"x\n" * 12)
    assert result.code == 1
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 11 and errors[-1] == "Error: ... and 2 more records failed", result.stderr
