"""What kafka-python users rely on, against the real broker: serializers, bootstrap lists, poll()'s
shape, and Kafka's auto-creation rule (producers create topics, consumers do not unless asked)."""

from __future__ import annotations

import json
import socket
import time

import pytest

from triolog.client import (AdminClient, Consumer, ConsumerRecord, NewTopic, Producer, RecordDeserializationError,
                            RequestNotSentError, SerializationError, TopicPartition, UnknownTopicOrPartitionError)
from triolog.client.aio import AsyncAdminClient, AsyncConsumer, AsyncProducer
from tests.client.helpers import flat
from tests.waiting import wait_for


@pytest.fixture
def dead_address() -> str:
    """host:port where nothing listens (bound, then released: connecting is refused at once)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{probe.getsockname()[1]}"


# -- serializers ----------------------------------------------------------------------------------


class _TopicTagging:
    """A kafka-python 3 style Serializer/Deserializer object: told the topic and the headers."""

    def __init__(self) -> None:
        self.seen = []

    def serialize(self, topic, headers, data):
        self.seen.append((topic, tuple(headers)))
        return f"{topic}|{data}".encode()

    def deserialize(self, topic, headers, data):
        self.seen.append((topic, tuple(headers)))
        prefix, _, rest = data.decode().partition("|")
        assert prefix == topic
        return rest


def test_serializers_round_trip_and_leave_null_keys_and_tombstones_alone(bootstrap, admin, topic):
    admin.create_topics([NewTopic(topic, 1)])
    documents = [{"id": i, "tags": ["a", "b"][: i % 3]} for i in range(5)]
    with Producer(bootstrap, key_serializer=str.encode, value_serializer=lambda v: json.dumps(v).encode()) as producer:
        for doc in documents:
            producer.send(topic, doc, key=f"user-{doc['id']}")
        producer.send(topic, {"no": "key"})  # None key: the serializer is not called
        producer.send(topic, None, key="user-0")  # tombstone: still a null value
    with Consumer(bootstrap, auto_offset_reset="earliest", consumer_timeout_ms=500,
                  key_deserializer=bytes.decode, value_deserializer=json.loads) as consumer:
        consumer.subscribe(topic)
        records = list(consumer)
    assert [(r.key, r.value) for r in records] == (
        [(f"user-{d['id']}", d) for d in documents] + [(None, {"no": "key"}), ("user-0", None)])
    with Consumer(bootstrap, auto_offset_reset="earliest", consumer_timeout_ms=500) as consumer:
        consumer.subscribe(topic)
        raw = list(consumer)  # the bytes on the wire are what the serializers made
    assert raw[0].key == b"user-0" and json.loads(raw[0].value) == documents[0]


def test_serializer_objects_get_the_topic_and_headers(bootstrap, admin, topic):
    admin.create_topics([NewTopic(topic, 1)])
    out, back = _TopicTagging(), _TopicTagging()
    with Producer(bootstrap, value_serializer=out) as producer:
        producer.send(topic, "hello", headers=[("h", b"1")]).get(10)
    with Consumer(bootstrap, auto_offset_reset="earliest", value_deserializer=back) as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        (record,) = flat(consumer.poll(5000))
    assert record.value == "hello"
    assert out.seen == [(topic, (("h", b"1"),))] and back.seen == [(topic, (("h", b"1"),))]


def test_a_failing_serializer_raises_and_queues_nothing(bootstrap, admin, topic):
    admin.create_topics([NewTopic(topic, 1)])
    with Producer(bootstrap, value_serializer=lambda v: json.dumps(v).encode()) as producer:
        with pytest.raises(SerializationError) as info:
            producer.send(topic, {"not", "json"})  # a set
        assert isinstance(info.value.__cause__, TypeError) and info.value.topic == topic
        producer.send(topic, {"ok": 1}).get(10)
    with Producer(bootstrap, value_serializer=len) as producer:
        with pytest.raises(SerializationError, match="must return bytes, str or None, got int"):
            producer.send(topic, "x")
    tp = TopicPartition(topic, 0)
    with Consumer(bootstrap) as consumer:
        assert consumer.end_offsets([tp]) == {tp: 1}  # only the good record was sent


def test_a_record_that_fails_to_deserialize_stays_next_until_seeked_past(bootstrap, admin, topic):
    admin.create_topics([NewTopic(topic, 1)])
    with Producer(bootstrap, linger_ms=60_000) as producer:  # one batch: the bad record is mid-batch
        for value in (b'{"n": 0}', b'{"n": 1}', b"not json", b'{"n": 3}'):
            producer.send(topic, value)
    tp = TopicPartition(topic, 0)
    with Consumer(bootstrap, auto_offset_reset="earliest", value_deserializer=json.loads) as consumer:
        consumer.assign([tp])
        assert [r.value for r in flat(consumer.poll(5000))] == [{"n": 0}, {"n": 1}]  # what came before it
        for _ in range(2):  # every poll raises for it, as Kafka's consumer does
            with pytest.raises(RecordDeserializationError) as info:
                consumer.poll(1000)
            assert (info.value.topic, info.value.partition, info.value.offset) == (topic, 0, 2)
            assert isinstance(info.value.__cause__, ValueError)
            assert consumer.position(tp) == 2
        consumer.seek(tp, 3)
        assert [(r.offset, r.value) for r in flat(consumer.poll(5000))] == [(3, {"n": 3})]


async def test_aio_serializers_round_trip(bootstrap, topic):
    async with AsyncAdminClient(bootstrap) as admin:
        await admin.create_topics([NewTopic(topic, 2)])
    async with AsyncProducer(bootstrap, key_serializer=str.encode, value_serializer=str.encode) as producer:
        futures = [await producer.send(topic, f"v{i}", key=f"k{i}") for i in range(6)]
        for future in futures:
            await future
    async with AsyncConsumer(bootstrap, auto_offset_reset="earliest", consumer_timeout_ms=500,
                             key_deserializer=bytes.decode, value_deserializer=bytes.decode) as consumer:
        consumer.subscribe(topic)
        records = [record async for record in consumer]
    assert sorted((r.key, r.value) for r in records) == [(f"k{i}", f"v{i}") for i in range(6)]


# -- bootstrap servers ----------------------------------------------------------------------------


@pytest.mark.parametrize("form", ["list", "comma-separated"])
def test_every_sync_client_skips_a_dead_first_bootstrap_server(bootstrap, dead_address, topic, form):
    servers = [dead_address, bootstrap] if form == "list" else f"{dead_address}, {bootstrap}"
    with AdminClient(servers) as admin:
        admin.create_topics([NewTopic(topic, 1)])
        assert topic in admin.list_topics()
    with Producer(servers) as producer:
        assert producer.send(topic, b"via the second").get(10).offset == 0
    with Consumer(servers, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        assert [r.value for r in flat(consumer.poll(5000))] == [b"via the second"]


async def test_every_async_client_skips_a_dead_first_bootstrap_server(bootstrap, dead_address, topic):
    servers = [dead_address, bootstrap]
    async with AsyncAdminClient(servers) as admin:
        await admin.create_topics([NewTopic(topic, 1)])
    async with AsyncProducer(servers) as producer:
        assert (await (await producer.send(topic, b"async"))).offset == 0
    async with AsyncConsumer(f"{dead_address},{bootstrap}", auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        assert [r.value for r in flat(await consumer.poll(5000))] == [b"async"]


def test_no_bootstrap_server_answering_names_every_address_tried(dead_address):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        other = f"127.0.0.1:{probe.getsockname()[1]}"
    with AdminClient([dead_address, other]) as admin:
        with pytest.raises(RequestNotSentError) as info:
            admin.list_topics()
    text = str(info.value)
    assert "any of the 2 bootstrap servers" in text and dead_address in text and other in text


def test_malformed_bootstrap_entries_are_refused_up_front():
    with pytest.raises(ValueError, match="'nope' in"):
        Producer(["127.0.0.1:9092", "nope"])
    with pytest.raises(ValueError, match="at least one"):
        Consumer(" , ")
    with pytest.raises(ValueError, match="list of str"):
        AdminClient(9092)


# -- poll's shape ---------------------------------------------------------------------------------


def test_poll_returns_records_by_partition_and_honours_max_records(bootstrap, admin, topic):
    admin.create_topics([NewTopic(topic, 3)])
    with Producer(bootstrap) as producer:
        for partition in range(3):
            for i in range(4):
                producer.send(topic, b"p%d-%d" % (partition, i), partition=partition)
    tps = [TopicPartition(topic, p) for p in range(3)]
    with Consumer(bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign(tps)
        got: dict = {}
        deadline = time.monotonic() + 10
        while sum(map(len, got.values())) < 12 and time.monotonic() < deadline:
            polled = consumer.poll(timeout_ms=1000, max_records=5)
            assert isinstance(polled, dict) and sum(map(len, polled.values())) <= 5
            for tp, records in polled.items():
                assert all(isinstance(r, ConsumerRecord) and (r.topic, r.partition) == tp for r in records)
                got.setdefault(tp, []).extend(records)
        assert consumer.poll(timeout_ms=0) == {}  # nothing left: an empty mapping
        with pytest.raises(ValueError, match="max_records"):
            consumer.poll(max_records=0)
    assert sorted(got) == tps
    for tp in tps:
        assert [(r.offset, r.value) for r in got[tp]] == [(i, b"p%d-%d" % (tp.partition, i)) for i in range(4)]


async def test_aio_poll_returns_records_by_partition(bootstrap, topic):
    async with AsyncProducer(bootstrap) as producer:
        await (await producer.send(topic, b"one", partition=0))  # creates the topic (metadata on retry)
    tp = TopicPartition(topic, 0)
    async with AsyncConsumer(bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([tp])
        polled = await consumer.poll(timeout_ms=5000, max_records=10)
    assert list(polled) == [tp] and [r.value for r in polled[tp]] == [b"one"]


# -- auto-creation --------------------------------------------------------------------------------


def test_a_subscribed_consumer_does_not_create_the_topic_and_reads_it_once_produced(bootstrap, admin, topic):
    with Consumer(bootstrap, auto_offset_reset="earliest", retry_backoff_ms=50) as consumer:
        consumer.subscribe(topic)
        start = time.monotonic()
        assert consumer.poll(timeout_ms=400) == {}  # waits, returns nothing
        assert time.monotonic() - start >= 0.35
        assert consumer.assignment() == set()
        assert topic not in admin.list_topics()  # and created nothing
        with Producer(bootstrap) as producer:  # the producer's metadata request creates it
            producer.send(topic, b"first").get(10)
        assert topic in admin.list_topics()
        records = wait_for(lambda: flat(consumer.poll(500)), 15, "the subscribed consumer to see the new topic")
    assert [r.value for r in records] == [b"first"]


def test_an_assigned_consumer_does_not_create_the_topic(bootstrap, admin, topic):
    with Consumer(bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        with pytest.raises(UnknownTopicOrPartitionError):
            consumer.poll(200)
    assert topic not in admin.list_topics()


@pytest.mark.parametrize("how", ["subscribe", "assign"])
def test_allow_auto_create_topics_lets_a_consumer_create_it(bootstrap, admin, topic, how):
    with Consumer(bootstrap, auto_offset_reset="earliest", allow_auto_create_topics=True) as consumer:
        if how == "subscribe":
            consumer.subscribe([topic])
        else:
            consumer.assign([TopicPartition(topic, 0)])
        assert consumer.poll(200) == {}
        assert consumer.assignment() == {TopicPartition(topic, 0)}
    assert topic in admin.list_topics()


async def test_aio_subscribed_consumer_does_not_create_the_topic(bootstrap, topic):
    async with AsyncConsumer(bootstrap) as consumer:
        consumer.subscribe(topic)
        assert await consumer.poll(300) == {}
    async with AsyncAdminClient(bootstrap) as admin:
        assert topic not in await admin.list_topics()


def test_with_broker_auto_creation_off_nobody_creates(no_autocreate_broker, topic):
    bootstrap = f"127.0.0.1:{no_autocreate_broker.port}"
    with Consumer(bootstrap, allow_auto_create_topics=True, retry_backoff_ms=50) as consumer:
        consumer.subscribe(topic)
        assert consumer.poll(300) == {}
    with Producer(bootstrap, max_block_ms=300, retry_backoff_ms=50) as producer:
        with pytest.raises(UnknownTopicOrPartitionError):
            producer.send(topic, b"x")
    with AdminClient(bootstrap) as admin:
        assert topic not in admin.list_topics()
