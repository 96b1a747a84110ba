"""Kafka's Python clients across a kill -9 of the partition leader (issue 25, part 7): a
kafka-python and an aiokafka producer (acks=all, idempotent) have every record acknowledged once,
and a consumer of the same library, reading along from before the kill, goes on to the new leader
and sees every record, once, in order. Three broker subprocesses on the session's ZooKeeper
ensemble (confluent-kafka's run is tests/cluster/test_kill_9_failover.py)."""

from __future__ import annotations

import asyncio
import socket
import threading
import time

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.metadata.v9.request import MetadataRequest, MetadataRequestTopic

from tests.e2e.broker_process import BrokerProcess
from tests.kafka.kafka_wire import decode_response, encode_request, read_frame

from .helpers import broker_processes, kafka_bootstrap, wait_until

SESSION_MS = 3000
RECORDS = 300
KILL_AT = 150


@pytest.fixture
def cluster(tmp_path, zk_connect):
    with broker_processes(tmp_path, zk_connect, SESSION_MS) as started:
        yield started, kafka_bootstrap(started)


def _led_by(broker: BrokerProcess, topic: str) -> tuple[int, int] | None:
    """(leader, ISR size) of the topic's partition 0 in this broker's own Metadata answer."""
    request = MetadataRequest(
        topics=(MetadataRequestTopic(name=topic),),
        allow_auto_topic_creation=False,
        include_cluster_authorized_operations=False,
        include_topic_authorized_operations=False,
    )
    with socket.create_connection(("127.0.0.1", broker.kafka_port), timeout=10) as sock:
        sock.sendall(encode_request(3, 9, 1, request))
        _, body = decode_response(3, 9, read_frame(sock))
    (answer,) = body.topics
    if answer.error_code or not answer.partitions or answer.partitions[0].leader_id < 0:
        return None
    return answer.partitions[0].leader_id, len(answer.partitions[0].isr_nodes)


def _make_topic(brokers: dict[int, BrokerProcess], bootstrap: str, name: str) -> int:
    """The topic made, led with its full ISR in every broker's answer (a client's first metadata
    may come from any of them); its leader."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, 1, 3, config={"min.insync.replicas": "2"})])[name].result(30)

    def everywhere() -> tuple[int, int] | None:
        seen = {_led_by(b, name) for b in brokers.values()}
        view = seen.pop() if len(seen) == 1 else None
        return view if view is not None and view[1] == 3 else None

    led = wait_until(everywhere, 30)
    assert led, f"not every broker sees {name} led with its full ISR"
    return led[0]


def test_kafka_python_producer_and_consumer_across_a_leader_kill(cluster):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    brokers, bootstrap = cluster
    leader = _make_topic(brokers, bootstrap, "kp")
    seen: list[int] = []
    stop = threading.Event()

    def consume() -> None:
        consumer = KafkaConsumer(
            bootstrap_servers=bootstrap,
            enable_auto_commit=False,
            group_id=None,
            metadata_max_age_ms=2000,
            request_timeout_ms=10000,
            retry_backoff_ms=100,
        )
        consumer.assign([TopicPartition("kp", 0)])
        consumer.seek(TopicPartition("kp", 0), 0)
        while not stop.is_set() and len(seen) < RECORDS:
            for records in consumer.poll(timeout_ms=200).values():
                seen.extend(int(r.value) for r in records)
        consumer.close()

    reader = threading.Thread(target=consume, daemon=True)
    reader.start()
    producer = KafkaProducer(
        bootstrap_servers=bootstrap,
        acks="all",
        enable_idempotence=True,
        linger_ms=2,
        retries=1000,
        retry_backoff_ms=100,
        request_timeout_ms=10000,
        delivery_timeout_ms=90000,
        metadata_max_age_ms=2000,
    )
    futures = []
    for i in range(RECORDS):
        futures.append(producer.send("kp", value=str(i).encode(), partition=0))
        if i == KILL_AT:
            producer.flush(30)  # the first half acknowledged and read before the kill
            assert wait_until(lambda: len(seen) > KILL_AT, 30), "the consumer read nothing before the kill"
            brokers[leader].kill()
        time.sleep(0.003)
    offsets = [future.get(timeout=90).offset for future in futures]
    producer.close(10)
    assert offsets == list(range(RECORDS))  # each acknowledged once, in order, no gaps
    reader.join(90)
    stop.set()
    assert seen == list(range(RECORDS)), f"the consumer saw {len(seen)} records"
    new_leader = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics["kp"].partitions[0].leader
    assert new_leader not in (leader, -1)


def test_aiokafka_producer_and_consumer_across_a_leader_kill(cluster):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    brokers, bootstrap = cluster
    leader = _make_topic(brokers, bootstrap, "aio")

    async def run() -> tuple[list[int], list[int]]:
        seen: list[int] = []
        consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap,
            enable_auto_commit=False,
            group_id=None,
            metadata_max_age_ms=2000,
            request_timeout_ms=10000,
            retry_backoff_ms=100,
        )
        await consumer.start()
        partition = TopicPartition("aio", 0)
        consumer.assign([partition])
        consumer.seek(partition, 0)

        async def consume() -> None:
            while len(seen) < RECORDS:
                for records in (await consumer.getmany(timeout_ms=200)).values():
                    seen.extend(int(r.value) for r in records)

        reader = asyncio.create_task(consume())
        producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap,
            acks="all",
            enable_idempotence=True,
            linger_ms=2,
            retry_backoff_ms=100,
            request_timeout_ms=10000,
            metadata_max_age_ms=2000,
        )
        await producer.start()
        try:
            futures = []
            for i in range(RECORDS):
                futures.append(await producer.send("aio", value=str(i).encode(), partition=0))
                if i == KILL_AT:
                    await producer.flush()
                    deadline = time.monotonic() + 30
                    while len(seen) <= KILL_AT and time.monotonic() < deadline:
                        await asyncio.sleep(0.05)
                    assert len(seen) > KILL_AT, "the consumer read nothing before the kill"
                    brokers[leader].kill()
                await asyncio.sleep(0.003)
            metadata = await asyncio.wait_for(asyncio.gather(*futures), 120)
            await asyncio.wait_for(reader, 90)
            return [m.offset for m in metadata], seen
        finally:
            reader.cancel()
            await producer.stop()
            await consumer.stop()

    offsets, seen = asyncio.run(run())
    assert offsets == list(range(RECORDS))
    assert seen == list(range(RECORDS)), f"the consumer saw {len(seen)} records"
