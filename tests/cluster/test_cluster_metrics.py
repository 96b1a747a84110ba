"""The cluster's metrics with Kafka's meanings, scraped from three brokers: leaderships add up to
the partitions, one active controller, nothing under-replicated while every replica is up; a
broker gone leaves its leaders' partitions under-replicated (their ISR shrunk by the controller),
and its single-replica partition offline on the controller."""

from __future__ import annotations

from confluent_kafka.admin import AdminClient as KafkaAdminClient, NewTopic

from .helpers import kafka_bootstrap as _bootstrap, wait_until as _wait
from .test_replica_fetch_serving import create


def _samples(brokers, name, **labels):
    return {i: b.sample(name, **labels) for i, b in brokers.items()}


def test_leaders_controller_and_under_replicated_partitions(start_brokers, zk_connect):
    # (no controlled shutdown: the broker that stops goes as a dead one does, its leaders elected clean)
    brokers = start_brokers((1, 2, 3), "controlled.shutdown.enable=false")
    admin = KafkaAdminClient({"bootstrap.servers": _bootstrap(brokers)})
    admin.create_topics([NewTopic("three", 3, 3)])["three"].result(30)
    assert _wait(lambda: sum(_samples(brokers, "triolog_cluster_active_controller").values()) == 1)
    controller = next(i for i, v in _samples(brokers, "triolog_cluster_active_controller").items() if v == 1)
    gone = next(i for i in brokers if i != controller)
    create(zk_connect, "single", (gone,))  # one replica, on a broker that is not the controller
    assert _wait(lambda: "single" in admin.list_topics(timeout=10).topics)
    partitions = admin.list_topics(timeout=10).topics
    assert _wait(lambda: sum(_samples(brokers, "triolog_cluster_leader_partitions").values()) == 4)
    assert sorted(_samples(brokers, "triolog_cluster_active_controller").values()) == [0, 0, 1]
    assert _wait(lambda: sum(_samples(brokers, "triolog_cluster_under_replicated_partitions").values()) == 0)
    assert sum(_samples(brokers, "triolog_cluster_offline_partitions").values()) == 0

    # The broker holding "single" stops (not the controller): "single" goes offline.
    brokers.pop(gone).stop()
    # Every "three" partition lost a replica: each leader counts its partitions under-replicated.
    assert _wait(lambda: sum(_samples(brokers, "triolog_cluster_under_replicated_partitions").values()) == 3)
    assert _wait(lambda: _samples(brokers, "triolog_cluster_offline_partitions")[controller] == 1)
    # The "three" partitions the stopped broker led were moved by a clean election on the controller.
    led_by_gone = sum(1 for p in partitions["three"].partitions.values() if p.leader == gone)
    elections = sum(b.sample("triolog_cluster_elections_total", kind="clean") for b in brokers.values())
    assert elections >= led_by_gone
