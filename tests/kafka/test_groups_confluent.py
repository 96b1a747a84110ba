"""librdkafka's consumer groups on the Kafka listener, served by triolog's group coordinator:
subscribe, split partitions between members, commit, resume after a restart; the committed
offsets are the same ones triolog's own protocol reads and writes."""

from __future__ import annotations

import time

from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka import Producer as KafkaProducer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient as KafkaAdminClient

from triolog.client import TopicPartition
from triolog.client.admin import AdminClient

PARTITIONS = 6


def _topic_with_records(bootstrap: str, msgpack_bootstrap: str, topic: str, per_partition: int) -> None:
    with AdminClient(msgpack_bootstrap) as admin:
        admin.create_topics([(topic, PARTITIONS, 1, {})])
    producer = KafkaProducer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    failed: list = []
    for p in range(PARTITIONS):
        for i in range(per_partition):
            producer.produce(topic, value=b"%d-%d" % (p, i), partition=p,
                             on_delivery=lambda err, msg: err and failed.append(err))
    assert producer.flush(30) == 0 and failed == []


def _consumer(bootstrap: str, group: str, **extra) -> KafkaConsumer:
    return KafkaConsumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                          "enable.auto.commit": False, "session.timeout.ms": 6000, "heartbeat.interval.ms": 500,
                          **extra})


def _drain(consumer: KafkaConsumer, want: int, timeout_s: float = 60) -> list:
    got: list = []
    deadline = time.monotonic() + timeout_s
    while len(got) < want and time.monotonic() < deadline:
        for message in consumer.consume(1000, 0.5):
            assert message.error() is None, message.error()
            got.append(message)
    return got


def test_subscribe_consume_commit_and_resume_after_a_restart(bootstrap, msgpack_bootstrap, topic):
    _topic_with_records(bootstrap, msgpack_bootstrap, topic, 20)
    first = _consumer(bootstrap, topic)
    first.subscribe([topic])
    got = _drain(first, PARTITIONS * 20)
    assert sorted(m.value() for m in got) == sorted(b"%d-%d" % (p, i) for p in range(PARTITIONS) for i in range(20))
    first.commit(asynchronous=False)
    first.close()

    producer = KafkaProducer({"bootstrap.servers": bootstrap})
    for p in range(PARTITIONS):
        producer.produce(topic, value=b"after-%d" % p, partition=p)
    assert producer.flush(30) == 0
    second = _consumer(bootstrap, topic)
    second.subscribe([topic])
    resumed = _drain(second, PARTITIONS)
    assert sorted(m.value() for m in resumed) == sorted(b"after-%d" % p for p in range(PARTITIONS))
    second.close()

    # triolog's own protocol sees the offsets librdkafka committed.
    with AdminClient(msgpack_bootstrap) as admin:
        offsets = admin.list_consumer_group_offsets(topic)
    assert offsets == {TopicPartition(topic, p): 20 for p in range(PARTITIONS)}


def test_two_members_split_the_partitions_and_one_takes_all_when_the_other_leaves(bootstrap, msgpack_bootstrap, topic):
    _topic_with_records(bootstrap, msgpack_bootstrap, topic, 1)
    one, two = _consumer(bootstrap, topic), _consumer(bootstrap, topic)
    one.subscribe([topic])
    two.subscribe([topic])
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        one.poll(0.2)
        two.poll(0.2)
        a, b = one.assignment(), two.assignment()
        if len(a) + len(b) == PARTITIONS and a and b:
            break
    assert {tp.partition for tp in a} | {tp.partition for tp in b} == set(range(PARTITIONS))
    assert not {tp.partition for tp in a} & {tp.partition for tp in b}
    two.close()
    deadline = time.monotonic() + 60
    while len(one.assignment()) < PARTITIONS and time.monotonic() < deadline:
        one.poll(0.2)
    assert {tp.partition for tp in one.assignment()} == set(range(PARTITIONS))
    one.close()


def test_offsets_committed_through_triolog_are_what_librdkafka_reads(bootstrap, msgpack_bootstrap, topic):
    _topic_with_records(bootstrap, msgpack_bootstrap, topic, 5)
    with AdminClient(msgpack_bootstrap) as admin:
        admin.alter_consumer_group_offsets(topic, {TopicPartition(topic, p): 3 for p in range(PARTITIONS)})
    consumer = _consumer(bootstrap, topic)
    committed = consumer.committed([KafkaTopicPartition(topic, p) for p in range(PARTITIONS)], timeout=30)
    assert [(tp.partition, tp.offset) for tp in committed] == [(p, 3) for p in range(PARTITIONS)]
    consumer.subscribe([topic])
    rest = _drain(consumer, PARTITIONS * 2)
    assert sorted(m.value() for m in rest) == sorted(b"%d-%d" % (p, i) for p in range(PARTITIONS) for i in (3, 4))
    consumer.close()


def test_admin_lists_describes_and_deletes_groups(bootstrap, msgpack_bootstrap, topic):
    _topic_with_records(bootstrap, msgpack_bootstrap, topic, 1)
    consumer = _consumer(bootstrap, topic)
    consumer.subscribe([topic])
    assert len(_drain(consumer, PARTITIONS)) == PARTITIONS
    consumer.commit(asynchronous=False)
    admin = KafkaAdminClient({"bootstrap.servers": bootstrap})
    listed = admin.list_consumer_groups().result(30)
    assert topic in {g.group_id for g in listed.valid}
    described = admin.describe_consumer_groups([topic])[topic].result(30)
    assert described.state.name == "STABLE" and len(described.members) == 1
    assert {tp.partition for tp in described.members[0].assignment.topic_partitions} == set(range(PARTITIONS))
    consumer.close()
    deleted = admin.delete_consumer_groups([topic])
    deleted[topic].result(30)
    assert topic not in {g.group_id for g in admin.list_consumer_groups().result(30).valid}
