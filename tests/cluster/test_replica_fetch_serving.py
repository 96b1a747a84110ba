"""The leader's side of Kafka's replication, driven by hand with Kafka's own Fetch v12 (kio): a
follower's fetch reads to the leader's log end, not its high watermark; the high watermark moves
once every in-sync replica has fetched past the records, and only then does acks=all answer or a
consumer see them; a follower whose last fetched epoch the leader never had is told where its log
diverges; a stale leader epoch is fenced; a consumer cannot pose as a replica of a partition it
does not replicate."""

from __future__ import annotations

import datetime
import socket
import time

import pytest
from confluent_kafka import Producer as KafkaProducer
from confluent_kafka.admin import AdminClient as KafkaAdminClient
from confluent_kafka.admin import NewTopic
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.static.primitive import i32, i64

from tests.kafka.kafka_wire import decode_response, encode_request, read_frame
from triolog.protocol.errors import ErrorCode
from triolog.protocol.record_batch import split_batches
from triolog.testing import InProcessBroker

from .test_cluster_serving import _bootstrap, _wait


@pytest.fixture
def brokers(tmp_path, zk_connect):
    started = {}
    try:
        for broker_id in (1, 2, 3):
            started[broker_id] = InProcessBroker(
                tmp_path / f"broker-{broker_id}",
                [f"broker.id={broker_id}", f"zookeeper.connect={zk_connect}", "zookeeper.session.timeout.ms=4000"],
            ).start()
        yield started
    finally:
        for broker in started.values():
            broker.stop()


def replica_fetch(broker, replica_id, topic, partition, fetch_offset, *, last_fetched_epoch=-1, leader_epoch=-1):
    request = FetchRequest(
        replica_id=i32(replica_id),
        max_wait=datetime.timedelta(0),
        min_bytes=i32(0),
        max_bytes=i32(1 << 20),
        isolation_level=0,
        session_id=i32(0),
        session_epoch=i32(-1),
        topics=(
            FetchTopic(
                topic=topic,
                partitions=(
                    FetchPartition(
                        partition=i32(partition),
                        current_leader_epoch=i32(leader_epoch),
                        fetch_offset=i64(fetch_offset),
                        last_fetched_epoch=i32(last_fetched_epoch),
                        log_start_offset=i64(0),
                        partition_max_bytes=i32(1 << 20),
                    ),
                ),
            ),
        ),
        forgotten_topics_data=(),
        rack_id="",
    )
    with socket.create_connection(("127.0.0.1", broker.kafka_port), timeout=10) as sock:
        sock.sendall(encode_request(1, 12, 7, request, client_id=f"broker-{replica_id}-fetcher"))
        _, body = decode_response(1, 12, read_frame(sock))
    (answer,) = body.responses[0].partitions
    return answer


def test_followers_fetch_to_the_log_end_and_commit_what_every_in_sync_replica_has(brokers):
    admin = KafkaAdminClient({"bootstrap.servers": _bootstrap(brokers)})
    admin.create_topics([NewTopic("replicated", 1, 3, config={"min.insync.replicas": "2"})])["replicated"].result(30)
    partition = admin.list_topics(timeout=10).topics["replicated"].partitions[0]
    leader = brokers[partition.leader]
    followers = [r for r in partition.replicas if r != partition.leader]

    # acks=1: appended and answered at once, but not committed: the followers have nothing yet.
    producer = KafkaProducer({"bootstrap.servers": _bootstrap(brokers), "acks": "1"})
    for i in range(5):
        producer.produce("replicated", value=f"r{i}".encode(), partition=0)
    assert producer.flush(30) == 0
    first = replica_fetch(leader, followers[0], "replicated", 0, 0, leader_epoch=0)
    assert first.error_code == ErrorCode.NONE and first.high_watermark == 0
    records = bytes(first.records)
    batches = split_batches(records)
    end = batches[-1][1].last_offset + 1
    assert end == 5 and all(header.partition_leader_epoch == 0 for _, header in batches)

    # The followers report the log end in their next fetch: then, and only then, it commits.
    replica_fetch(leader, followers[0], "replicated", 0, end, last_fetched_epoch=0, leader_epoch=0)
    answer = replica_fetch(leader, followers[1], "replicated", 0, 0, leader_epoch=0)
    assert answer.high_watermark == 0  # the second follower has not shown it has anything yet
    replica_fetch(leader, followers[1], "replicated", 0, end, last_fetched_epoch=0, leader_epoch=0)
    # (each answer carries the high watermark as it was at the read, as Kafka's: the next one shows it)
    answer = replica_fetch(leader, followers[0], "replicated", 0, end, last_fetched_epoch=0, leader_epoch=0)
    assert answer.high_watermark == end


def test_a_divergent_follower_is_told_where_and_stale_epochs_are_fenced(brokers):
    admin = KafkaAdminClient({"bootstrap.servers": _bootstrap(brokers)})
    admin.create_topics([NewTopic("fenced", 1, 3)])["fenced"].result(30)
    partition = admin.list_topics(timeout=10).topics["fenced"].partitions[0]
    leader = brokers[partition.leader]
    follower = next(r for r in partition.replicas if r != partition.leader)
    producer = KafkaProducer({"bootstrap.servers": _bootstrap(brokers), "acks": "1"})
    producer.produce("fenced", value=b"x", partition=0)
    assert producer.flush(30) == 0
    # A follower whose log of epoch 0 runs past the leader's (to offset 10; the leader's ends at
    # 1): its suffix diverges. The leader answers its epoch and where that ends, and no records.
    answer = replica_fetch(leader, follower, "fenced", 0, 10, last_fetched_epoch=0, leader_epoch=0)
    assert answer.error_code == ErrorCode.NONE and not bytes(answer.records or b"")
    assert (answer.diverging_epoch.epoch, answer.diverging_epoch.end_offset) == (0, 1)
    # An epoch newer than any the leader knows: Kafka's "undefined" (-1, -1); the follower then
    # truncates to its high watermark.
    answer = replica_fetch(leader, follower, "fenced", 0, 1, last_fetched_epoch=3, leader_epoch=0)
    assert (answer.diverging_epoch.epoch, answer.diverging_epoch.end_offset) == (-1, -1)
    # In step: no divergence, the records.
    answer = replica_fetch(leader, follower, "fenced", 0, 0, leader_epoch=0)
    assert answer.diverging_epoch.epoch == -1 and bytes(answer.records)
    # A leader epoch older than the leader's is fenced; a newer one is unknown to it yet.
    assert replica_fetch(leader, follower, "fenced", 0, 0, leader_epoch=5).error_code == ErrorCode.UNKNOWN_LEADER_EPOCH
    # A broker that is not a replica of the partition is refused; so is fetching from a non-leader.
    outsider = next(i for i in (1, 2, 3, 4) if i not in partition.replicas)
    assert replica_fetch(leader, outsider, "fenced", 0, 0).error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert replica_fetch(brokers[follower], follower, "fenced", 0, 0).error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_acks_all_waits_for_the_in_sync_replicas_and_is_refused_below_min_isr(brokers):
    admin = KafkaAdminClient({"bootstrap.servers": _bootstrap(brokers)})
    admin.create_topics([NewTopic("durable", 1, 3, config={"min.insync.replicas": "2"})])["durable"].result(30)
    partition = admin.list_topics(timeout=10).topics["durable"].partitions[0]
    leader = brokers[partition.leader]
    followers = [r for r in partition.replicas if r != partition.leader]

    acked = []
    producer = KafkaProducer(
        {"bootstrap.servers": _bootstrap(brokers), "acks": "all", "message.timeout.ms": 20000, "retries": 0}
    )
    producer.produce("durable", value=b"committed?", partition=0, on_delivery=lambda err, msg: acked.append(err))
    producer.poll(1.0)
    assert acked == []  # appended, but no follower has it: not acknowledged
    # Both followers fetch it (and show they have it in their next fetch): committed, acknowledged.
    for follower in followers:
        replica_fetch(leader, follower, "durable", 0, 0, leader_epoch=0)
        replica_fetch(leader, follower, "durable", 0, 1, last_fetched_epoch=0, leader_epoch=0)
    assert _wait(lambda: producer.poll(0.2) or acked, timeout=10) and acked == [None]
