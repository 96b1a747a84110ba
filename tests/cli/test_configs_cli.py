"""``triolog configs`` (kafka-configs.sh for client quotas) against a real broker process of its
own (a default quota would throttle the shared broker's clients), and offline on a stopped
broker's data directory."""

from __future__ import annotations

import time

import pytest

from tests.e2e.broker_process import InProcessBroker
from triolog.client import Producer


@pytest.fixture
def quota_broker(tmp_path):
    broker = InProcessBroker(tmp_path / "data").start()
    yield broker
    broker.stop()


@pytest.fixture
def online(quota_broker) -> list[str]:
    return ["--bootstrap-server", f"127.0.0.1:{quota_broker.port}"]


def test_set_describe_and_delete_quotas_online(triolog, online):
    done = triolog("configs", *online, "--alter", "--entity-type", "users", "--entity-name", "alice",
                   "--add-config", "producer_byte_rate=1048576,consumer_byte_rate=2097152")
    assert (done.code, done.out) == (0, "Completed updating config for user alice.\n"), done.stderr
    done = triolog("configs", *online, "--alter", "--entity-type", "users", "--entity-name", "alice",
                   "--entity-type", "clients", "--entity-name", "app", "--add-config", "producer_byte_rate=65536")
    assert (done.code, done.out) == (0, "Completed updating config for user alice.\n"), done.stderr
    done = triolog("configs", *online, "--alter", "--client", "app", "--add-config", "consumer_byte_rate=20971520")
    assert (done.code, done.out) == (0, "Completed updating config for client app.\n"), done.stderr

    done = triolog("configs", *online, "--describe", "--entity-type", "users", "--entity-name", "alice")
    assert (done.code, done.out) == (0, "Quota configs for user-principal 'alice' are "
                                        "consumer_byte_rate=2097152.0, producer_byte_rate=1048576.0\n"), done.stderr
    # a type without a name: every entity of exactly those types, as kafka-configs.sh
    done = triolog("configs", *online, "--describe", "--user", "alice", "--client", "app")
    assert done.out == "Quota configs for user-principal 'alice', client-id 'app' are producer_byte_rate=65536.0\n"
    done = triolog("configs", *online, "--describe", "--entity-type", "clients")
    assert done.out == "Quota configs for client-id 'app' are consumer_byte_rate=2.097152E7\n"  # Java's double
    done = triolog("configs", *online, "--describe", "--entity-type", "users", "--entity-type", "clients")
    assert done.out.splitlines() == ["Quota configs for user-principal 'alice', client-id 'app' are "
                                     "producer_byte_rate=65536.0"]

    done = triolog("configs", *online, "--alter", "--entity-type", "users", "--entity-name", "alice",
                   "--delete-config", "producer_byte_rate")
    assert done.code == 0, done.stderr
    done = triolog("configs", *online, "--describe", "--user", "alice")
    assert done.out == "Quota configs for user-principal 'alice' are consumer_byte_rate=2097152.0\n"
    again = triolog("configs", *online, "--alter", "--user", "alice", "--delete-config", "producer_byte_rate")
    assert again.code == 1 and "Invalid config(s): producer_byte_rate" in again.stderr
    done = triolog("configs", *online, "--alter", "--user", "alice", "--delete-config", "consumer_byte_rate",
                   "--add-config", "request_percentage=50")
    assert done.code == 0, done.stderr
    done = triolog("configs", *online, "--describe", "--user", "alice")
    assert done.out == "Quota configs for user-principal 'alice' are request_percentage=50.0\n"
    done = triolog("configs", *online, "--alter", "--user", "alice", "--delete-config", "request_percentage")
    assert done.code == 0, done.stderr
    done = triolog("configs", *online, "--describe", "--user", "alice")
    assert (done.code, done.out) == (0, "")  # no quota left: nothing to print, as kafka-configs.sh


def test_default_entities(triolog, online):
    done = triolog("configs", *online, "--alter", "--entity-type", "users", "--entity-default",
                   "--add-config", "producer_byte_rate=500000")
    assert (done.code, done.out) == (0, "Completed updating default config for users in the cluster.\n"), done.stderr
    done = triolog("configs", *online, "--alter", "--user-defaults", "--client-defaults",
                   "--add-config", "consumer_byte_rate=300000")
    assert done.code == 0, done.stderr
    done = triolog("configs", *online, "--alter", "--ip-defaults", "--add-config", "connection_creation_rate=50")
    assert (done.code, done.out) == (0, "Completed updating default config for ips in the cluster.\n"), done.stderr
    done = triolog("configs", *online, "--describe", "--entity-type", "users", "--entity-default")
    assert done.out == "Quota configs for the default user-principal are producer_byte_rate=500000.0\n"
    done = triolog("configs", *online, "--describe", "--user-defaults", "--client-defaults")
    assert done.out == ("Quota configs for the default user-principal, the default client-id are "
                        "consumer_byte_rate=300000.0\n")
    done = triolog("configs", *online, "--describe", "--entity-type", "ips")
    assert done.out == "Quota configs for the default ip are connection_creation_rate=50.0\n"
    done = triolog("configs", *online, "--alter", "--ip-defaults", "--delete-config", "connection_creation_rate")
    assert done.code == 0, done.stderr
    assert triolog("configs", *online, "--describe", "--entity-type", "ips").out == ""


def test_a_default_and_named_overrides_of_one_type(triolog, online):
    """Kafka's usual setup: every user gets the default, some users their own."""
    done = triolog("configs", *online, "--alter", "--user-defaults", "--add-config", "producer_byte_rate=500000")
    assert done.code == 0, done.stderr
    done = triolog("configs", *online, "--alter", "--user", "alice", "--add-config", "producer_byte_rate=2000000")
    assert done.code == 0, done.stderr
    done = triolog("configs", *online, "--describe", "--entity-type", "users")
    assert done.out.splitlines() == ["Quota configs for the default user-principal are producer_byte_rate=500000.0",
                                     "Quota configs for user-principal 'alice' are producer_byte_rate=2000000.0"]


def test_bad_keys_and_values_are_clear_errors(triolog, online):
    done = triolog("configs", *online, "--alter", "--user", "alice", "--add-config", "producer_byte_rat=100")
    assert done.code == 1
    assert done.stderr == ("triolog configs: INVALID_REQUEST: producer_byte_rat is not a quota of a user entity "
                           "(allowed: consumer_byte_rate, producer_byte_rate, request_percentage)\n")
    done = triolog("configs", *online, "--alter", "--ip", "10.0.0.1", "--add-config", "producer_byte_rate=100")
    assert done.code == 1 and "allowed: connection_creation_rate" in done.stderr
    done = triolog("configs", *online, "--alter", "--user", "alice", "--add-config", "producer_byte_rate=fast")
    assert done.code == 2
    assert "cannot parse the quota value of producer_byte_rate: 'fast' is not a number" in done.stderr
    done = triolog("configs", *online, "--alter", "--user", "alice", "--add-config", "producer_byte_rate=0")
    assert done.code == 1 and "producer_byte_rate must be a positive number" in done.stderr
    done = triolog("configs", *online, "--alter", "--user", "alice", "--add-config", "producer_byte_rate")
    assert done.code == 2 and "KEY=VALUE" in done.stderr
    done = triolog("configs", *online, "--alter", "--user", "alice", "--add-config", "SCRAM-SHA-256=[password=x]")
    assert done.code == 2 and "triolog users" in done.stderr
    assert triolog("configs", *online, "--describe", "--entity-type", "users").out == ""  # nothing was set


def test_topics_and_brokers_point_elsewhere_and_usage_errors(triolog, online):
    done = triolog("configs", *online, "--alter", "--entity-type", "topics", "--entity-name", "orders",
                   "--add-config", "retention.ms=1000")
    assert done.code == 2 and "triolog topics --alter --topic NAME --config KEY=VALUE" in done.stderr
    done = triolog("configs", *online, "--describe", "--entity-type", "brokers", "--entity-name", "0")
    assert done.code == 2 and "static" in done.stderr and "triolog topics --alter" in done.stderr
    usage = {
        ("--describe",): "give an entity",
        ("--alter", "--entity-type", "users", "--add-config", "producer_byte_rate=1"): "for every --entity-type",
        ("--alter", "--user", "alice"): "--add-config or --delete-config",
        ("--describe", "--user", "alice", "--add-config", "producer_byte_rate=1"): "go with --alter",
        ("--describe", "--entity-type", "users", "--entity-type", "ips"): "only users and clients",
        ("--describe", "--entity-type", "users", "--user", "bob"): "cannot be mixed",
        ("--describe", "--entity-name", "alice"): "more entity names",
        ("--describe", "--ip", "not-an-ip"): "must be an IP address",
        ("--describe", "--entity-type", "groups"): "unknown entity type 'groups'",
    }
    for args, message in usage.items():
        done = triolog("configs", *online, *args)
        assert done.code == 2 and message in done.stderr, (args, done.stderr)
    done = triolog("configs", "--describe", "--user", "alice")
    assert done.code == 2 and "--bootstrap-server" in done.stderr


def test_a_quota_set_with_the_cli_throttles_a_producer(triolog, online, quota_broker):
    bootstrap = f"127.0.0.1:{quota_broker.port}"
    done = triolog("configs", "--bootstrap-server", bootstrap, "--alter", "--client", "slow",
                   "--add-config", "producer_byte_rate=200000")
    assert done.code == 0, done.stderr
    value = b"v" * 1000
    with Producer(bootstrap, client_id="slow", acks=1, linger_ms=5) as producer:
        producer.send("throttled", value, partition=0).get(timeout=10)  # the topic, before the clock starts
        started = time.monotonic()
        futures = [producer.send("throttled", value, partition=0) for _ in range(600)]  # 600 kB at 200 kB/s
        producer.flush()
        elapsed = time.monotonic() - started
        assert all(f.get(timeout=30).offset >= 0 for f in futures)
        throttled = producer._conn.throttled_until > 0  # the broker's throttle_ms reached the client
    assert throttled
    assert elapsed >= 1.5, elapsed  # ~3 s at the quota, less the last batch's wait; unthrottled: well under 1 s
    with Producer(bootstrap, client_id="fast", acks=1, linger_ms=5) as producer:
        started = time.monotonic()
        futures = [producer.send("throttled", value, partition=0) for _ in range(600)]
        producer.flush()
        assert time.monotonic() - started < elapsed / 2
        assert producer._conn.throttled_until == 0


def test_offline_on_a_stopped_broker_then_refused_while_it_runs(triolog, tmp_path):
    data = tmp_path / "data"
    offline = ["--override", f"log.dirs={data}"]
    done = triolog("configs", *offline, "--alter", "--user", "alice", "--add-config",
                   "producer_byte_rate=1048576,consumer_byte_rate=2097152")
    assert (done.code, done.out) == (0, "Completed updating config for user alice.\n"), done.stderr
    done = triolog("configs", *offline, "--alter", "--client-defaults", "--add-config", "consumer_byte_rate=4096")
    assert done.code == 0, done.stderr
    done = triolog("configs", *offline, "--alter", "--user", "alice", "--delete-config", "consumer_byte_rate")
    assert done.code == 0, done.stderr
    done = triolog("configs", *offline, "--alter", "--user", "alice", "--add-config", "producer_byte_rat=5")
    assert done.code == 1 and "producer_byte_rat is not a quota of a user entity" in done.stderr
    done = triolog("configs", *offline, "--describe", "--entity-type", "users")
    assert done.out == "Quota configs for user-principal 'alice' are producer_byte_rate=1048576.0\n", done.stderr
    process = InProcessBroker(data).start()  # its lock on the log dir is held by another open file: flock
    try:
        done = triolog("configs", *offline, "--describe", "--user", "alice")
        assert done.code == 1 and "the broker is running" in done.stderr
        online = ["--bootstrap-server", f"127.0.0.1:{process.port}"]
        done = triolog("configs", *online, "--describe", "--user", "alice")  # the broker took the file's quotas
        assert done.out == "Quota configs for user-principal 'alice' are producer_byte_rate=1048576.0\n"
        done = triolog("configs", *online, "--describe", "--client-defaults")
        assert done.out == "Quota configs for the default client-id are consumer_byte_rate=4096.0\n"
    finally:
        process.stop()
