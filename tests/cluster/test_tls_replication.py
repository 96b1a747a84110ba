"""Replication over a TLS Kafka listener (SSL://): followers connect to their leaders with TLS,
verify the leader's certificate against ssl.truststore.location, and copy its log byte for byte."""

from __future__ import annotations

from confluent_kafka import Producer as KafkaProducer
from confluent_kafka.admin import AdminClient as KafkaAdminClient, NewTopic

from tests.security.tls_certs import make_tls_files

from .helpers import wait_until


def _segments(broker, partition_dir: str) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((broker.data_dir / partition_dir).glob("*.log"))}


def test_followers_replicate_over_tls(start_brokers, tmp_path):
    tls = make_tls_files(tmp_path / "tls")
    brokers = start_brokers(
        (1, 2, 3),
        "kafka.listeners=SSL://127.0.0.1:0",
        f"ssl.keystore.location={tls.keystore}",
        f"ssl.truststore.location={tls.ca_pem}",
    )
    client = {
        "bootstrap.servers": ",".join(f"127.0.0.1:{b.kafka_port}" for b in brokers.values()),
        "security.protocol": "SSL",
        "ssl.ca.location": str(tls.ca_pem),
    }
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
    assert not any(e["event"] == "replica_fetch_unavailable" for b in brokers.values() for e in b.events())
