"""Replication over a SASL Kafka listener (SASL_PLAINTEXT://): followers log in to their leaders
as the brokers' user (sasl.mechanism.inter.broker.protocol, sasl.inter.broker.username/password),
whose SCRAM credential is in ZooKeeper, made before the brokers start with `triolog users`
against ZooKeeper, and copy the leader's log byte for byte; a wrong password replicates nothing
and says why."""

from __future__ import annotations

from confluent_kafka import Producer as KafkaProducer
from confluent_kafka.admin import AdminClient as KafkaAdminClient, NewTopic

from triolog.testing import run_cli

from .helpers import wait_until

AUTHORIZER = "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer"


def _segments(broker, partition_dir: str) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((broker.data_dir / partition_dir).glob("*.log"))}


def _add_user(zk_connect, tmp_path, user, password):
    done = run_cli("users", "--override", f"zookeeper.connect={zk_connect}", "--override",
                   f"log.dirs={tmp_path / 'tool'}", "--add", "--user", user, "--password", password)
    assert done.code == 0, done.stderr


def _sasl_brokers(start_brokers, ids, mechanism, *overrides, password=lambda broker_id: "broker-secret"):
    return start_brokers(
        ids,
        *overrides,
        "kafka.listeners=SASL_PLAINTEXT://127.0.0.1:0",
        f"sasl.mechanism.inter.broker.protocol={mechanism}",
        "sasl.inter.broker.username=broker",
        AUTHORIZER,
        # (ANONYMOUS: the msgpack listener's clients, PLAINTEXT here; admin: the Kafka clients below)
        "super.users=User:broker;User:admin;User:ANONYMOUS",
        per_broker=lambda broker_id: [f"sasl.inter.broker.password={password(broker_id)}"],
    )


def _client(brokers, mechanism="SCRAM-SHA-512"):
    return {
        "bootstrap.servers": ",".join(f"127.0.0.1:{b.kafka_port}" for b in brokers.values()),
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": mechanism,
        "sasl.username": "admin",
        "sasl.password": "admin-secret",
    }


def test_followers_log_in_and_replicate_over_sasl(start_brokers, zk_connect, tmp_path):
    _add_user(zk_connect, tmp_path, "broker", "broker-secret")
    _add_user(zk_connect, tmp_path, "admin", "admin-secret")
    brokers = _sasl_brokers(start_brokers, (1, 2, 3), "SCRAM-SHA-256")
    client = _client(brokers)
    admin = KafkaAdminClient(client)
    admin.create_topics([NewTopic("sealed", 1, 3, config={"min.insync.replicas": "3"})])["sealed"].result(30)
    producer = KafkaProducer({**client, "acks": "all", "linger.ms": 1})
    delivered = []
    for i in range(200):
        producer.produce("sealed", f"secret-{i}".encode(), partition=0, on_delivery=lambda e, m: delivered.append(e))
    assert producer.flush(30) == 0
    # min.insync.replicas=3: every write was acknowledged only once both followers had it.
    assert delivered == [None] * 200
    leader = admin.list_topics("sealed", timeout=10).topics["sealed"].partitions[0].leader
    assert wait_until(
        lambda: all(_segments(b, "sealed-0") == _segments(brokers[leader], "sealed-0") for b in brokers.values())
    )
    assert not any(e["event"] == "fetcher_cannot_connect" for b in brokers.values() for e in b.events())


def test_a_follower_with_a_wrong_password_replicates_nothing_and_says_why(start_brokers, zk_connect, tmp_path):
    _add_user(zk_connect, tmp_path, "broker", "broker-secret")
    _add_user(zk_connect, tmp_path, "admin", "admin-secret")
    brokers = _sasl_brokers(start_brokers, (1, 2), "SCRAM-SHA-512", "replica.lag.time.max.ms=2000",
                            password=lambda broker_id: "wrong")
    admin = KafkaAdminClient(_client(brokers))
    admin.create_topics([NewTopic("half", 1, 2)])["half"].result(30)
    partition = lambda: brokers[1].server.cluster.cache.partition("half", 0)  # noqa: E731
    assert wait_until(lambda: partition() is not None and partition().online)
    leader = partition().leader
    follower = brokers[2 if leader == 1 else 1]
    refused = lambda: [e for e in follower.events() if e["event"] == "fetcher_cannot_connect"]  # noqa: E731
    assert wait_until(lambda: refused())
    assert "SASL_AUTHENTICATION_FAILED" in refused()[0]["error"] and "as broker" in refused()[0]["error"]
    # The leader takes the follower that never fetched out of the ISR.
    assert wait_until(lambda: partition().isr == (leader,), 30)
