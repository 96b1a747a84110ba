"""triolog_cluster_replica_lag on three brokers: the leader reports each follower's distance from its
log end (0 once both fetched everything), only the leader reports it, and a stopped follower's lag
grows with what is appended after it stopped while the live one stays at 0: by exactly that in the
same leader epoch, the whole log once a new epoch began (the leader knows nothing of its log then)."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer as KafkaProducer
from confluent_kafka.admin import AdminClient as KafkaAdminClient, NewTopic

from .helpers import kafka_bootstrap, wait_until

LAG = "triolog_cluster_replica_lag"


def _produce(bootstrap: str, count: int, acks: str) -> None:
    producer = KafkaProducer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 0})
    failed = []
    for i in range(count):
        producer.produce("lagging", value=str(i).encode(), partition=0,
                         on_delivery=lambda err, msg: err is not None and failed.append(err))
    assert producer.flush(30) == 0 and failed == []


def test_the_leader_reports_each_followers_lag(start_brokers):
    brokers = start_brokers((1, 2, 3))
    bootstrap = kafka_bootstrap(brokers)
    admin = KafkaAdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("lagging", 1, 3, config={"min.insync.replicas": "1"})])["lagging"].result(30)
    leader = wait_until(lambda: admin.list_topics(timeout=10).topics["lagging"].partitions[0].leader)
    assert leader in brokers
    followers = sorted(i for i in brokers if i != leader)

    def lag(replica: int) -> float | None:
        try:
            return brokers[leader].sample(LAG, topic="lagging", partition="0", replica=str(replica))
        except KeyError:
            return None

    _produce(bootstrap, 10, "all")
    assert wait_until(lambda: [lag(f) for f in followers] == [0, 0]), [lag(f) for f in followers]
    assert lag(leader) is None  # the leader is no follower of its own
    for follower in followers:  # followers report nothing for a partition they do not lead
        with pytest.raises(KeyError):
            brokers[follower].sample(LAG, topic="lagging", partition="0", replica=str(leader))

    def epoch() -> int:
        return brokers[leader].server.cluster.replicas.hosted[("lagging", 0)].leader_epoch

    epoch_before = epoch()
    stopped, live = followers
    brokers.pop(stopped).stop()
    _produce(bootstrap, 25, "1")
    # The controller takes the stopped broker out of the ISR in a new leader epoch (Kafka's
    # ZooKeeper-mode controller does): wait for it, then nothing moves any more.
    assert wait_until(lambda: epoch() > epoch_before), "the controller never shrank the ISR"
    assert wait_until(lambda: (lag(stopped), lag(live)) == (35, 0)), (lag(stopped), lag(live))
    _produce(bootstrap, 5, "1")
    assert wait_until(lambda: (lag(stopped), lag(live)) == (40, 0)), (lag(stopped), lag(live))
