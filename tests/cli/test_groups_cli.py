"""``triolog groups`` (kafka-consumer-groups.sh) against the real broker, both in this process.

Run through ``triolog.broker.cli.main``, the ``triolog`` entry point's own parser."""

from __future__ import annotations

import datetime as dt
import json
import time

import pytest

from tests.e2e.broker_process import KEEP_OLD_RECORDS, InProcessBroker
from triolog.testing import run_cli
from triolog.client import AdminClient, Consumer, Producer
from triolog.client.types import NewTopic, TopicPartition

FAST = dict(session_timeout_ms=6000, heartbeat_interval_ms=300, fetch_max_wait_ms=100)


@pytest.fixture(scope="module")
def group_broker(tmp_path_factory) -> InProcessBroker:
    process = InProcessBroker(tmp_path_factory.mktemp("groups-cli") / "data",
                            ("group.initial.rebalance.delay.ms=0", "group.min.session.timeout.ms=1000",
                             *KEEP_OLD_RECORDS)).start()
    yield process
    process.stop()


@pytest.fixture
def boot(group_broker) -> str:
    return f"127.0.0.1:{group_broker.port}"


@pytest.fixture
def groups(boot):
    def run(*args: str):
        return run_cli("groups", "--bootstrap-server", boot, *args)

    return run


@pytest.fixture
def consumed(boot, topic):
    """A 2-partition topic of 10 records (5 each, timestamps 1000..1009 ms) and a group that read
    partition 0 to offset 3 and partition 1 to the end; the group is left Empty."""
    group = f"{topic}-group"
    with AdminClient(boot) as admin:
        admin.create_topics([NewTopic(topic, 2)])
    with Producer(boot) as producer:
        for i in range(10):
            producer.send(topic, f"v{i}".encode(), partition=i % 2, timestamp_ms=1000 + i)
    with Consumer(boot, group_id=group, auto_offset_reset="earliest", enable_auto_commit=False, **FAST) as consumer:
        consumer.subscribe([topic])
        seen = 0
        deadline = time.monotonic() + 20
        while seen < 10 and time.monotonic() < deadline:
            seen += sum(len(rs) for rs in consumer.poll(200).values())
        consumer.commit({TopicPartition(topic, 0): 3, TopicPartition(topic, 1): 5})
    return group


def rows(out: str) -> list[list[str]]:
    return [line.split() for line in out.splitlines() if line.strip()]


def test_list_and_describe_an_empty_group_with_lag(groups, consumed, topic):
    assert consumed in groups("--list").out.splitlines()
    result = groups("--describe", "--group", consumed)
    assert result.code == 0, result.stderr
    table = rows(result.out)
    assert " ".join(table[0]) == f"Consumer group '{consumed}' has no active members."
    assert table[1] == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID",
                        "HOST", "CLIENT-ID"]
    assert table[2:] == [[consumed, topic, "0", "3", "5", "2", "-", "-", "-"],
                         [consumed, topic, "1", "5", "5", "0", "-", "-", "-"]]
    document = json.loads(groups("--describe", "--group", consumed, "-J").out)
    assert document[0]["state"] == "Empty"
    assert [(p["partition"], p["current_offset"], p["lag"]) for p in document[0]["partitions"]] == [(0, 3, 2), (1, 5, 0)]


def test_describe_an_active_group_members_and_state(boot, groups, consumed, topic):
    with Consumer(boot, group_id=consumed, client_id="cli-test-client", enable_auto_commit=False, **FAST) as member:
        member.subscribe([topic])
        deadline = time.monotonic() + 20
        while len(member.assignment()) < 2 and time.monotonic() < deadline:
            member.poll(100)
        offsets = rows(groups("--describe", "--group", consumed).out)
        assert offsets[1][:6] == [consumed, topic, "0", "3", "5", "2"]
        assert offsets[1][8] == "cli-test-client" and offsets[1][6].startswith("cli-test-client-")
        members = rows(groups("--describe", "--group", consumed, "--members", "--verbose").out)
        assert members[0] == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"]
        assert members[1][3:] == ["cli-test-client", "2", f"{topic}(0,1)"]
        state = rows(groups("--describe", "--group", consumed, "--state").out)
        assert state[1][-3:] == ["range", "Stable", "1"]
        refused = groups("--reset-offsets", "--group", consumed, "--all-topics", "--to-earliest", "--execute")
        assert refused.code == 1
        assert f"can only be reset if the group '{consumed}' is inactive, but the current state is Stable" in \
            refused.stderr


def test_reset_offsets_dry_run_then_execute(boot, groups, consumed, topic):
    def committed():
        with AdminClient(boot) as admin:
            return {tp.partition: offset for tp, offset in admin.list_consumer_group_offsets(consumed).items()}

    plan = groups("--reset-offsets", "--group", consumed, "--topic", topic, "--to-earliest")
    assert plan.code == 0 and "--execute option is missing" in plan.stderr
    assert rows(plan.out) == [["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"], [consumed, topic, "0", "0"],
                              [consumed, topic, "1", "0"]]
    assert committed() == {0: 3, 1: 5}  # a dry run changes nothing
    assert groups("--reset-offsets", "--group", consumed, "--topic", f"{topic}:1", "--to-offset", "2",
                  "--execute").code == 0
    assert committed() == {0: 3, 1: 2}
    # past the log end: kept at the log end, as Kafka does
    assert groups("--reset-offsets", "--group", consumed, "--all-topics", "--to-offset", "99", "--execute").code == 0
    assert committed() == {0: 5, 1: 5}
    assert groups("--reset-offsets", "--group", consumed, "--all-topics", "--shift-by", "-2", "--execute").code == 0
    assert committed() == {0: 3, 1: 3}
    # timestamps 1000 + i: partition 0 holds 1000, 1002.., partition 1 1001, 1003..; from 1004 ms on
    since = dt.datetime.fromtimestamp(1.004, tz=dt.timezone.utc).isoformat()
    out = groups("--reset-offsets", "--group", consumed, "--all-topics", "--to-datetime", since, "--execute", "-J")
    assert [(r["partition"], r["new_offset"]) for r in json.loads(out.out)] == [(0, 2), (1, 2)]
    assert committed() == {0: 2, 1: 2}
    assert groups("--reset-offsets", "--group", consumed, "--all-topics", "--to-latest", "--execute").code == 0
    assert committed() == {0: 5, 1: 5}


def test_delete_groups(groups, consumed):
    result = groups("--delete", "--group", consumed)
    assert (result.code, result.out) == (0, f"Deletion of requested consumer groups ('{consumed}') was successful.\n")
    assert consumed not in groups("--list").out.splitlines()
    again = groups("--delete", "--group", consumed)
    assert again.code == 1 and f"* Group '{consumed}' could not be deleted due to:" in again.stderr
    missing = groups("--describe", "--group", consumed)
    assert missing.code == 1 and f"Consumer group '{consumed}' does not exist." in missing.stderr


def test_usage_errors(groups):
    assert groups("--describe").code == 2
    assert groups("--reset-offsets", "--group", "g", "--all-topics").code == 2
    assert groups("--reset-offsets", "--group", "g", "--to-earliest").code == 2
