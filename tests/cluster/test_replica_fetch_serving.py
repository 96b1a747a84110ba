"""The leader's side of Kafka's replication, driven by hand with Kafka's own Fetch v12 (kio).

Brokers 1 and 2 run; the partition's replicas are (1, 2, 3), and broker 3 is this test, registered
in ZooKeeper and fetching as a follower by hand: outside the ISR at first (it was not live at
creation), while broker 2 replicates for real. A follower's fetch reads to the leader's log end, not its high watermark; a
follower caught up into the current epoch rejoins the ISR (written to ZooKeeper by the leader);
acks=all is refused while the ISR is below min.insync.replicas and answered only once every
in-sync replica has the records; a diverging follower is told where; stale epochs are fenced; a
broker that is not a replica, or a broker that is not the leader, is refused."""

from __future__ import annotations

import dataclasses
import datetime
import socket
import threading

import pytest
import trio
from confluent_kafka import Producer as KafkaProducer
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.static.primitive import i16, i32, i64

from tests.kafka.kafka_wire import decode_response, encode_request, read_frame
from triolog.broker.cluster.zk_client import KafkaZkClient
from triolog.broker.cluster.zk_data import TopicAssignment
from triolog.broker.cluster.zookeeper_store import ZooKeeperStore
from triolog.protocol.errors import ErrorCode
from triolog.protocol.record_batch import split_batches
from triolog.protocol.records import build_batch

from .helpers import kafka_bootstrap as _bootstrap, wait_until as _wait

HAND = 3  # the follower this test plays


@pytest.fixture
def brokers(start_brokers):
    return start_brokers((1, 2))


@pytest.fixture
def register_hand(zk_connect, brokers):
    """Register broker 3 (this test) as a live broker, as a real follower is: without it the
    controller would take it out of every ISR it joins, and a leader takes no broker it has not
    seen registered into an ISR (so this waits until every broker has). Call after creating the
    topic to keep it out of the ISR at first."""
    from kazoo.client import KazooClient

    from triolog.broker.cluster.zk_data import BrokerRegistration, RegisteredEndpoint

    client = KazooClient(hosts=zk_connect, timeout=4.0)
    client.start(timeout=10)

    def register():
        endpoint = RegisteredEndpoint("PLAINTEXT", "PLAINTEXT", "127.0.0.1", 9)
        client.create(f"/brokers/ids/{HAND}", BrokerRegistration(HAND, (endpoint,)).encode(), ephemeral=True)
        assert _wait(lambda: all(HAND in b.server.cluster.cache.brokers for b in brokers.values()))

    yield register
    client.stop()
    client.close()


def create(zk_connect, topic, replicas, configs=None):
    """A topic assigned to ``replicas`` as they are (HAND among them), through ZooKeeper as
    CreateTopics writes it."""

    async def main():
        store = ZooKeeperStore(zk_connect, session_timeout_ms=4000)
        await store.start()
        try:
            await KafkaZkClient(store).create_topic(topic, TopicAssignment({0: tuple(replicas)}), configs or {})
        finally:
            await store.close()

    trio.run(main)


def move_leader(zk_connect, topic, leader, epoch, isr):
    """The partition's state rewritten as a controller's election would (conditional on its
    version, as every state write is)."""

    async def main():
        store = ZooKeeperStore(zk_connect, session_timeout_ms=4000)
        await store.start()
        try:
            zk = KafkaZkClient(store)
            current = await zk.partition_state(topic, 0)
            new = dataclasses.replace(current.state, leader=leader, leader_epoch=epoch, isr=tuple(isr))
            await zk.update_partition_state(None, topic, 0, new, current.version)
        finally:
            await store.close()

    trio.run(main)


def state(broker, topic):
    view = broker.server.cluster.cache.partition(topic, 0)
    return view if view is not None and view.online else None


def replica_fetch(broker, replica_id, topic, fetch_offset, *, last_fetched_epoch=-1, leader_epoch=-1):
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
                        partition=i32(0),
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


def test_a_follower_reads_to_the_log_end_and_rejoins_the_isr_once_caught_up(brokers, zk_connect, register_hand):
    create(zk_connect, "replicated", (1, 2, HAND))
    view = _wait(lambda: state(brokers[1], "replicated"))
    register_hand()
    assert view.leader == 1 and view.isr == (1, 2)  # broker 3 was not live: out of the ISR
    leader = brokers[1]
    producer = KafkaProducer({"bootstrap.servers": _bootstrap(brokers), "acks": "1"})
    for i in range(5):
        producer.produce("replicated", value=f"r{i}".encode(), partition=0)
    assert producer.flush(30) == 0
    # Broker 2 replicates: the five records commit without broker 3.
    assert _wait(lambda: leader.server.log_manager.get_log("replicated", 0).high_watermark == 5)
    answer = replica_fetch(leader, HAND, "replicated", 0, leader_epoch=0)
    batches = split_batches(bytes(answer.records))
    assert answer.error_code == ErrorCode.NONE and batches[-1][1].last_offset + 1 == 5
    assert all(header.partition_leader_epoch == 0 for _, header in batches)
    assert answer.high_watermark == 5
    # Its next fetch shows it has everything, in this epoch: the leader puts it back in the ISR.
    replica_fetch(leader, HAND, "replicated", 5, last_fetched_epoch=0, leader_epoch=0)
    assert _wait(lambda: state(brokers[2], "replicated").isr == (1, 2, HAND))
    assert state(brokers[2], "replicated").leader_epoch == 0  # a leader's ISR change keeps the epoch


def test_acks_all_is_refused_below_min_isr_and_answered_once_every_in_sync_replica_has_it(
    brokers, zk_connect, register_hand
):
    create(zk_connect, "durable", (1, 2, HAND), {"min.insync.replicas": "3"})
    _wait(lambda: state(brokers[1], "durable"))
    register_hand()
    leader = brokers[1]
    producer = KafkaProducer(
        {"bootstrap.servers": _bootstrap(brokers), "acks": "all", "retries": 0, "message.timeout.ms": 20000}
    )
    outcomes = []
    producer.produce("durable", value=b"refused", partition=0, on_delivery=lambda err, msg: outcomes.append(err))
    producer.flush(20)
    # ISR (1, 2) is below min.insync.replicas=3: refused, nothing written.
    assert [err.name() for err in outcomes] == ["NOT_ENOUGH_REPLICAS"]
    assert leader.server.log_manager.get_log("durable", 0).log_end_offset == 0

    # Broker 3 (this test) catches up to the empty log: back in the ISR, writes are taken.
    # (fetched again until it is in, as a follower does: the controller, seeing broker 3 register,
    # may write the state first, and the leader's ISR change then waits for the next fetch)
    assert _wait(
        lambda: (
            replica_fetch(leader, HAND, "durable", 0, leader_epoch=0) and state(leader, "durable").isr == (1, 2, HAND)
        )
    )
    assert _wait(lambda: leader.server.cluster.replicas.hosted[("durable", 0)].leadership.may_append_acks_all())
    outcomes.clear()
    producer.produce("durable", value=b"committed", partition=0, on_delivery=lambda err, msg: outcomes.append(err))
    producer.poll(1.0)
    assert outcomes == []  # broker 2 has it, broker 3 not yet: not acknowledged
    log = leader.server.log_manager.get_log("durable", 0)
    assert log.log_end_offset == 1 and log.high_watermark == 0
    replica_fetch(leader, HAND, "durable", 0, leader_epoch=0)
    replica_fetch(leader, HAND, "durable", 1, last_fetched_epoch=0, leader_epoch=0)
    assert _wait(lambda: producer.poll(0.2) or outcomes, timeout=10) and outcomes == [None]
    assert log.high_watermark == 1


def test_a_divergent_follower_is_told_where_and_stale_epochs_and_strangers_are_refused(
    brokers, zk_connect, register_hand
):
    create(zk_connect, "fenced", (1, 2, HAND))
    _wait(lambda: state(brokers[1], "fenced"))
    register_hand()
    leader = brokers[1]
    producer = KafkaProducer({"bootstrap.servers": _bootstrap(brokers), "acks": "1"})
    producer.produce("fenced", value=b"x", partition=0)
    assert producer.flush(30) == 0
    # A follower whose log of epoch 0 runs past the leader's (to offset 10; the leader's ends at
    # 1): its suffix diverges. The leader answers its epoch and where that ends, and no records.
    answer = replica_fetch(leader, HAND, "fenced", 10, last_fetched_epoch=0, leader_epoch=0)
    assert answer.error_code == ErrorCode.NONE and not bytes(answer.records or b"")
    assert (answer.diverging_epoch.epoch, answer.diverging_epoch.end_offset) == (0, 1)
    # An epoch newer than any the leader has (nothing to compare with): OFFSET_OUT_OF_RANGE, as Kafka.
    answer = replica_fetch(leader, HAND, "fenced", 1, last_fetched_epoch=3, leader_epoch=0)
    assert answer.error_code == ErrorCode.OFFSET_OUT_OF_RANGE
    # In step: no divergence, the records.
    answer = replica_fetch(leader, HAND, "fenced", 0, leader_epoch=0)
    assert answer.diverging_epoch.epoch == -1 and bytes(answer.records)
    # A leader epoch newer than the leader's own is unknown to it yet.
    assert replica_fetch(leader, HAND, "fenced", 0, leader_epoch=5).error_code == ErrorCode.UNKNOWN_LEADER_EPOCH
    # Broker 4 is no replica of the partition; broker 2 is a replica but not its leader.
    assert replica_fetch(leader, 4, "fenced", 0).error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert replica_fetch(brokers[2], HAND, "fenced", 0).error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_a_consumer_never_reads_past_the_high_watermark(brokers, zk_connect, register_hand):
    create(zk_connect, "visible", (1, HAND), {"min.insync.replicas": "1"})
    assert _wait(lambda: state(brokers[1], "visible")).isr == (1,)
    register_hand()
    leader = brokers[1]
    # Caught up (empty): into the ISR (fetched until it is in, as above).
    assert _wait(
        lambda: replica_fetch(leader, HAND, "visible", 0, leader_epoch=0) and state(leader, "visible").isr == (1, HAND)
    )
    producer = KafkaProducer({"bootstrap.servers": _bootstrap(brokers), "acks": "1"})
    producer.produce("visible", value=b"v", partition=0)
    assert producer.flush(30) == 0
    log = leader.server.log_manager.get_log("visible", 0)
    assert (log.log_end_offset, log.high_watermark) == (1, 0)  # broker 3, in the ISR, lacks it
    # A consumer (replica id -1) sees nothing yet; the follower reads it; then the consumer does.
    consumer = replica_fetch(leader, -1, "visible", 0)
    assert consumer.error_code == ErrorCode.NONE and not bytes(consumer.records or b"") and consumer.high_watermark == 0
    assert bytes(replica_fetch(leader, HAND, "visible", 0, leader_epoch=0).records)
    replica_fetch(leader, HAND, "visible", 1, last_fetched_epoch=0, leader_epoch=0)
    consumer = replica_fetch(leader, -1, "visible", 0)
    assert consumer.high_watermark == 1 and bytes(consumer.records)


def raw_produce(broker, topic, value, answers):
    """One acks=all Produce on the Kafka wire, its partition's answer appended to ``answers``: no
    client between (a client retries, and may wait out an unreachable new leader)."""
    request = ProduceRequest(
        transactional_id=None,
        acks=i16(-1),
        timeout=datetime.timedelta(seconds=30),
        topic_data=(
            TopicProduceData(
                name=topic,
                partition_data=(PartitionProduceData(index=i32(0), records=build_batch([(None, value, 0, ())])),),
            ),
        ),
    )
    with socket.create_connection(("127.0.0.1", broker.kafka_port), timeout=40) as sock:
        sock.sendall(encode_request(0, 9, 11, request, client_id="raw-producer"))
        _, body = decode_response(0, 9, read_frame(sock))
    answers.append(body.responses[0].partition_responses[0])


def test_an_acks_all_write_left_behind_by_a_leadership_move_is_never_acknowledged(brokers, zk_connect, register_hand):
    """Kafka answers a waiting acks=all write NOT_LEADER_OR_FOLLOWER once its leader loses the
    partition: as a follower it may truncate the write away, and the offsets may hold other
    records by the time it leads again and its high watermark passes them."""
    create(zk_connect, "moved", (1, HAND), {"min.insync.replicas": "2"})
    assert _wait(lambda: state(brokers[1], "moved"))
    register_hand()
    leader = brokers[1]
    assert _wait(
        lambda: replica_fetch(leader, HAND, "moved", 0, leader_epoch=0) and state(leader, "moved").isr == (1, HAND)
    )
    answers = []
    producing = threading.Thread(target=raw_produce, args=(leader, "moved", b"left-behind", answers))
    producing.start()
    log = leader.server.log_manager.get_log("moved", 0)
    assert _wait(lambda: log.log_end_offset == 1)
    assert answers == []  # appended, waiting for broker 3 to fetch it

    move_leader(zk_connect, "moved", HAND, 1, (HAND, 1))  # broker 3 leads: broker 1 follows
    assert _wait(lambda: state(leader, "moved").leader == HAND)
    move_leader(zk_connect, "moved", 1, 2, (1, HAND))  # and broker 1 leads again
    assert _wait(lambda: leader.server.cluster.replicas.hosted[("moved", 0)].leader_epoch == 2)
    # Broker 3 fetches the record in the new epoch: the high watermark passes the old write.
    replica_fetch(leader, HAND, "moved", 0, leader_epoch=2)
    replica_fetch(leader, HAND, "moved", 1, last_fetched_epoch=0, leader_epoch=2)
    assert _wait(lambda: log.high_watermark == 1)
    producing.join(40)
    assert [answer.error_code for answer in answers] == [ErrorCode.NOT_LEADER_OR_FOLLOWER]
