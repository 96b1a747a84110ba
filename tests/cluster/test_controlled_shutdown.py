"""Moving leaders on purpose: a broker stopping (SIGTERM) hands its leaderships and ISR places over
before it goes (controlled shutdown), so a rolling restart of every broker stops no producer;
ElectLeaders and the auto-rebalance task give leadership back to each partition's preferred
replica afterwards."""

from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import (
    Consumer as KafkaConsumer,
    ElectionType,
    KafkaError,
    Producer as KafkaProducer,
    TopicPartition as KafkaTopicPartition,
)
from confluent_kafka.admin import AdminClient as KafkaAdminClient, NewTopic

from tests.kafka.kafka_wire import connect, decode_response, encode_request, read_frame

from .helpers import kafka_bootstrap, wait_until

PARTITIONS = 6


def _admin(brokers) -> KafkaAdminClient:
    return KafkaAdminClient({"bootstrap.servers": kafka_bootstrap(brokers)})


def _partitions(brokers, topic: str):
    return _admin(brokers).list_topics(topic, timeout=10).topics[topic].partitions


def _fully_replicated(brokers, topic: str) -> bool:
    return all(len(p.isrs) == len(p.replicas) and p.leader >= 0 for p in _partitions(brokers, topic).values())


def _create(brokers, topic: str) -> None:
    admin = _admin(brokers)  # (held: a client collected before its future is done cancels it)
    admin.create_topics([NewTopic(topic, PARTITIONS, 3, config={"min.insync.replicas": "2"})])[topic].result(30)
    assert wait_until(lambda: _fully_replicated(brokers, topic))


def _preferred_leaders(brokers, topic: str) -> bool:
    return all(p.leader == p.replicas[0] for p in _partitions(brokers, topic).values())


class _Writer:
    """An idempotent acks=all producer writing unique values to every partition, in a thread,
    timing each delivery."""

    def __init__(self, brokers, topic: str):
        self.topic = topic
        self.producer = KafkaProducer(
            {
                "bootstrap.servers": kafka_bootstrap(brokers),
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 2,
                "message.timeout.ms": 60000,
                "retry.backoff.ms": 50,
                "topic.metadata.refresh.interval.ms": 500,
            }
        )
        self.acked: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
        self.failed: list[tuple[int, str]] = []
        self.latencies: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        value = 0
        while not self._stop.is_set():
            sent = time.monotonic()

            def delivered(err, msg, sent=sent):
                self.latencies.append(time.monotonic() - sent)
                if err is None:
                    self.acked[msg.partition()].append(int(msg.value()))
                else:
                    self.failed.append((int(msg.value()), err.name()))

            self.producer.produce(self.topic, str(value).encode(), partition=value % PARTITIONS, on_delivery=delivered)
            self.producer.poll(0)
            value += 1
            time.sleep(0.002)
        self.producer.flush(60)

    def __enter__(self) -> _Writer:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(90)

    def count(self) -> int:
        return sum(len(v) for v in self.acked.values())


def _read_all(brokers, topic: str, partition: int, expected: int) -> list[int]:
    consumer = KafkaConsumer(
        {"bootstrap.servers": kafka_bootstrap(brokers), "group.id": "unused", "enable.auto.commit": False}
    )
    consumer.assign([KafkaTopicPartition(topic, partition, 0)])
    seen: list[int] = []
    deadline = time.monotonic() + 30
    while len(seen) < expected and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            seen.append(int(message.value()))
    consumer.close()
    return seen


def test_a_rolling_restart_of_every_broker_stops_no_producer(start_brokers):
    brokers = start_brokers((1, 2, 3), "auto.leader.rebalance.enable=false")
    _create(brokers, "rolling")
    with _Writer(brokers, "rolling") as writer:
        for broker_id in (1, 2, 3):
            led = [p for p in _partitions(brokers, "rolling").values() if p.leader == broker_id]
            before = writer.count()
            brokers[broker_id].stop()
            # It handed every leadership over while it still served, and left the ISRs itself.
            (done,) = [e for e in brokers[broker_id].events() if e["event"].startswith("controlled_shutdown_")]
            assert done["event"] == "controlled_shutdown_succeeded", done
            assert done["elapsed_ms"] < 1000, done
            assert led, f"broker {broker_id} led nothing to hand over"
            brokers[broker_id].start()
            assert wait_until(lambda: _fully_replicated(brokers, "rolling"), 30), "the restarted broker never caught up"
            assert wait_until(lambda before=before: writer.count() > before + 100)
    assert writer.failed == []
    # No write waited out a session timeout (4 s here) or a replica lag time (30 s) for a broker
    # that was leaving: each took at most a leader move and the producer's metadata refresh.
    assert max(writer.latencies) < 3.0, max(writer.latencies)
    for partition, values in writer.acked.items():
        assert values, partition
        assert _read_all(brokers, "rolling", partition, len(values)) == values  # once each, in order
    # The controllers (each restart moved the controller too) elected for the shutdowns.
    moves = [
        e
        for b in brokers.values()
        for e in b.events()
        if e["event"] == "partition_state_changed" and e.get("election") == "controlled_shutdown"
    ]
    assert {e["previous_leader"] for e in moves} == {1, 2, 3}


def test_elect_leaders_moves_leadership_back_to_preferred_replicas(start_brokers):
    brokers = start_brokers((1, 2, 3), "auto.leader.rebalance.enable=false")
    _create(brokers, "prefs")
    brokers[1].stop()
    brokers[1].start()
    assert wait_until(lambda: _fully_replicated(brokers, "prefs"), 30)
    partitions = _partitions(brokers, "prefs")
    moved = [p.id for p in partitions.values() if p.leader != p.replicas[0]]
    assert moved, "no leadership left its preferred replica"

    admin = _admin(brokers)
    results = admin.elect_leaders(ElectionType.PREFERRED, [KafkaTopicPartition("prefs", p) for p in range(PARTITIONS)])
    answers = {tp.partition: err for tp, err in results.result(30).items()}
    for partition in range(PARTITIONS):
        if partition in moved:
            assert answers[partition] is None, answers
        else:
            assert answers[partition].code() == KafkaError.ELECTION_NOT_NEEDED, answers
    assert wait_until(lambda: _preferred_leaders(brokers, "prefs"))  # (metadata follows ZooKeeper)
    # Again, for every partition of the cluster: nothing left to elect.
    again = admin.elect_leaders(ElectionType.PREFERRED, None).result(30)
    assert {err.code() for err in again.values()} == {KafkaError.ELECTION_NOT_NEEDED}
    # A partition that does not exist, and an unclean election where every leader is live.
    odd = admin.elect_leaders(
        ElectionType.UNCLEAN, [KafkaTopicPartition("prefs", 0), KafkaTopicPartition("prefs", 99)]
    ).result(30)
    codes = {tp.partition: err.code() for tp, err in odd.items()}
    assert codes == {0: KafkaError.ELECTION_NOT_NEEDED, 99: KafkaError.UNKNOWN_TOPIC_OR_PART}


def test_only_the_controller_answers_elect_leaders(start_brokers):
    brokers = start_brokers((1, 2))
    controller = wait_until(lambda: brokers[1].server.cluster.cache.controller_id)
    other = brokers[2 if controller == 1 else 1]
    sock = connect(f"127.0.0.1:{other.kafka_port}")
    body = {"election_type": 0, "topic_partitions": None, "timeout": 10000}
    from triolog.protocol.kafka.schema import build, request_class

    sock.sendall(encode_request(43, 2, 7, build(request_class(43, 2), body)))
    correlation_id, response = decode_response(43, 2, read_frame(sock))
    sock.close()
    assert correlation_id == 7 and response.error_code.value == KafkaError.NOT_CONTROLLER


@pytest.mark.parametrize("interval", [1])
def test_the_auto_rebalance_task_gives_leaders_back(start_brokers, interval):
    brokers = start_brokers(
        (1, 2, 3),
        "auto.leader.rebalance.enable=true",
        f"leader.imbalance.check.interval.seconds={interval}",
        "leader.imbalance.per.broker.percentage=0",
    )
    _create(brokers, "balanced")
    brokers[2].stop()
    assert wait_until(lambda: all(p.leader != 2 for p in _partitions(brokers, "balanced").values()))
    brokers[2].start()
    assert wait_until(lambda: _fully_replicated(brokers, "balanced") and _preferred_leaders(brokers, "balanced"), 30)
    elections = sum(b.sample("triolog_cluster_elections_total", kind="preferred") for b in brokers.values())
    assert elections >= 1
