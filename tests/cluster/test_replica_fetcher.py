"""Replication end to end: three brokers in one cluster, a topic with three replicas, Kafka's own
client producing to its leader. Every follower's fetcher copies the leader's log until the
segment files are byte-identical and its high watermark is the leader's; a follower stopped and
restarted catches up; a replica holding a suffix the leader never had (an old leader's
uncommitted writes) truncates it on its first fetch and ends byte-identical."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Producer as KafkaProducer
from confluent_kafka.admin import AdminClient as KafkaAdminClient, NewTopic

from triolog.broker.storage.clock import ManualClock
from triolog.broker.storage.log import Log
from triolog.config.log_config import LogConfig
from triolog.protocol.records import Record, encode_batch
from triolog.testing import InProcessBroker

from .helpers import all_registered

TOPIC = "copied"


def start_broker(tmp_path: Path, broker_id: int, zk_connect: str) -> InProcessBroker:
    return InProcessBroker(
        tmp_path / f"broker-{broker_id}",
        [
            f"broker.id={broker_id}",
            f"zookeeper.connect={zk_connect}",
            "zookeeper.session.timeout.ms=4000",
            "replica.fetch.wait.max.ms=100",
            "replica.fetch.backoff.ms=200",
        ],
    ).start()


@pytest.fixture
def cluster(tmp_path, zk_connect):
    class Cluster:
        def __init__(self):
            self.brokers: dict[int, InProcessBroker] = {}

        def start(self, broker_id: int) -> InProcessBroker:
            self.brokers[broker_id] = start_broker(tmp_path, broker_id, zk_connect)
            return self.brokers[broker_id]

        def stop(self, broker_id: int) -> None:
            self.brokers.pop(broker_id).stop()

        def bootstrap(self) -> str:
            return ",".join(f"127.0.0.1:{b.kafka_port}" for b in self.brokers.values())

        def partition_dir(self, broker_id: int, partition: int = 0) -> Path:
            return tmp_path / f"broker-{broker_id}" / f"{TOPIC}-{partition}"

    c = Cluster()
    try:
        for broker_id in (1, 2, 3):
            c.start(broker_id)
        yield c
    finally:
        for broker in c.brokers.values():
            broker.stop()


def wait(check, timeout=30.0, what="condition"):
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            assert value, f"timed out waiting for {what}"
            return value
        time.sleep(0.1)


def create_topic(cluster, **config) -> dict:
    admin = KafkaAdminClient({"bootstrap.servers": cluster.bootstrap()})
    # every broker registered and seen by every broker (CreateTopics places replicas over the live
    # brokers the broker it reaches knows of: one client's metadata is one broker's view)
    all_registered(cluster.brokers)
    admin.create_topics([NewTopic(TOPIC, 1, 3, config=config)])[TOPIC].result(30)
    return wait(lambda: _partition(admin), what="a leader")


def _partition(admin):
    partition = admin.list_topics(TOPIC, timeout=10).topics[TOPIC].partitions.get(0)
    return partition if partition is not None and partition.leader >= 0 else None


def produce(cluster, count: int, *, acks: str = "1", start: int = 0) -> None:
    producer = KafkaProducer(
        {
            "bootstrap.servers": cluster.bootstrap(),
            "acks": acks,
            "linger.ms": 5,
            "batch.size": 4096,
            "enable.idempotence": False,
        }
    )
    failures = []
    for i in range(start, start + count):
        producer.produce(
            TOPIC,
            key=str(i % 7).encode(),
            value=f"record-{i}".encode() * 10,
            on_delivery=lambda err, msg: err is not None and failures.append(err),
        )
        if i % 50 == 0:
            producer.poll(0)
    assert producer.flush(30) == 0
    assert failures == []


def hosted(broker: InProcessBroker, partition: int = 0):
    server = broker.server
    return server.cluster.replicas.hosted.get((TOPIC, partition)) if server and server.cluster else None


def segment_files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.glob("*.log"))}


def replicas_identical(cluster, leader_id: int, expected_end: int | None = None) -> bool:
    """Every running replica has the leader's segment files byte for byte and its high watermark."""
    leader = hosted(cluster.brokers[leader_id])
    if leader is None or leader.leader != leader_id:
        return False
    log = leader.log
    if expected_end is not None and log.log_end_offset < expected_end:
        return False
    if log.high_watermark != log.log_end_offset:
        return False
    reference = segment_files(cluster.partition_dir(leader_id))
    for broker_id, broker in cluster.brokers.items():
        replica = hosted(broker)
        if replica is None:
            return False
        if replica.log.high_watermark != log.high_watermark or replica.log.log_end_offset != log.log_end_offset:
            return False
        if segment_files(cluster.partition_dir(broker_id)) != reference:
            return False
    return True


def test_followers_copy_the_leader_byte_for_byte(cluster):
    partition = create_topic(cluster, **{"segment.bytes": "16384"})
    assert sorted(partition.isrs) == [1, 2, 3]
    produce(cluster, 300, acks="1")
    wait(lambda: replicas_identical(cluster, partition.leader, 300), what="identical replicas")
    assert len(segment_files(cluster.partition_dir(partition.leader))) > 1
    # acks=all is answered once every in-sync replica has the records
    produce(cluster, 100, acks="all", start=300)
    wait(lambda: replicas_identical(cluster, partition.leader, 400), what="identical replicas after acks=all")
    epochs = {b: (cluster.partition_dir(b) / "leader-epoch-checkpoint").read_bytes() for b in cluster.brokers}
    assert len(set(epochs.values())) == 1


def test_a_stopped_follower_catches_up_when_it_returns(cluster):
    partition = create_topic(cluster)
    produce(cluster, 50)
    wait(lambda: replicas_identical(cluster, partition.leader, 50), what="identical replicas")
    follower = next(r for r in partition.replicas if r != partition.leader)
    cluster.stop(follower)
    produce(cluster, 200, start=50)
    cluster.start(follower)
    wait(lambda: replicas_identical(cluster, partition.leader, 250), what="the returned follower caught up")


def test_an_old_leader_truncates_what_it_alone_had(cluster):
    partition = create_topic(cluster)
    old_leader = partition.leader
    produce(cluster, 40)
    wait(lambda: replicas_identical(cluster, old_leader, 40), what="identical replicas")
    cluster.stop(old_leader)
    # Writes the old leader took in its epoch but never replicated (it died first): appended to its
    # log directly, while it is down.
    directory = cluster.partition_dir(old_leader)
    log = Log.open(directory, LogConfig(), clock=ManualClock())
    try:
        epoch = log.latest_epoch
        assert epoch == 0
        for i in range(5):
            log.append_as_leader(
                encode_batch([Record(0, 1000 + i, b"lost", b"never committed" * 20)]), leader_epoch=epoch
            )
        assert log.log_end_offset == 45
    finally:
        log.close()
    # A new leader in a new epoch takes more writes.
    admin = KafkaAdminClient({"bootstrap.servers": cluster.bootstrap()})
    moved = wait(lambda: (p := _partition(admin)) is not None and p.leader != old_leader and p, what="a new leader")
    produce(cluster, 20, start=40)
    # The old leader returns as a follower: its suffix goes, the new leader's records come.
    cluster.start(old_leader)
    wait(lambda: replicas_identical(cluster, moved.leader, 60), what="the old leader truncated and caught up")
    new_log = hosted(cluster.brokers[old_leader]).log
    assert new_log.latest_epoch == hosted(cluster.brokers[moved.leader]).log.latest_epoch == 1
