"""Client quotas against the real broker process: set with alter_client_quotas (and Kafka's
AlterClientQuotas), durable, and enforced: a producer or consumer over its byte rate is
throttled (throttle_ms in its answers, nothing read from it meanwhile) to within 10% of its
quota over 10 s."""

from __future__ import annotations

import time

import pytest

from tests.e2e.broker_process import BrokerProcess
from triolog.protocol import messages as m
from triolog.protocol.errors import ErrorCode
from triolog.protocol.records import build_batch

from .sasl_client import MsgpackClient

QUOTA = 1_000_000  # bytes per second


def _entity(**parts):
    return tuple(m.QuotaEntityPart(entity_type=k.replace("_", "-"), entity_name=v) for k, v in parts.items())


def _alter(client, entity, **ops):
    answer = client.call(m.AlterClientQuotasRequest, entries=(m.QuotaAlteration(entity=entity, ops=tuple(
        m.QuotaOp(key=k, value=v or 0, remove=v is None) for k, v in ops.items())),))
    return answer["entries"][0]


@pytest.fixture
def broker(tmp_path):
    process = BrokerProcess(tmp_path / "data", metrics=True).start()
    yield process
    process.stop()


def test_a_producer_over_its_quota_gets_its_quota(broker):
    client = MsgpackClient(broker.port, timeout_s=30)
    assert _alter(client, _entity(client_id="greedy"), producer_byte_rate=QUOTA)["error_code"] == 0
    client.call(m.CreateTopicsRequest, topics=(m.NewTopic(name="q", num_partitions=1, replication_factor=1),))
    batch = build_batch([(b"k", b"v" * 1000, int(time.time() * 1000), ()) for _ in range(100)])  # ~100 kB
    greedy = MsgpackClient(broker.port, timeout_s=30)
    sent, throttled = 0, []
    started = time.monotonic()
    while time.monotonic() - started < 10:  # as fast as the broker takes them: ~100 MB/s unthrottled
        answer = greedy.call(m.ProduceRequest, client_id="greedy", acks=1, timeout_ms=10_000, topics=(
            m.ProduceTopic(name="q", partitions=(m.ProducePartition(partition=0, records=batch),)),))
        assert answer["topics"][0]["partitions"][0]["error_code"] == 0
        sent += len(batch)
        throttled.append(answer["throttle_ms"])
    rate = sent / (time.monotonic() - started)
    assert 0.9 * QUOTA <= rate <= 1.1 * QUOTA, rate
    assert min(throttled) > 0  # over its quota from the first batch on
    # another client id is not throttled
    answer = client.call(m.ProduceRequest, client_id="modest", acks=1, timeout_ms=10_000, topics=(
        m.ProduceTopic(name="q", partitions=(m.ProducePartition(partition=0, records=batch),)),))
    assert answer["throttle_ms"] == 0
    assert broker.sample("triolog_quota_throttle_seconds_total", quota="producer_byte_rate", user="",
                         client_id="greedy") > 5


def test_a_consumer_over_its_quota_gets_its_quota(broker):
    client = MsgpackClient(broker.port, timeout_s=30)
    client.call(m.CreateTopicsRequest, topics=(m.NewTopic(name="f", num_partitions=1, replication_factor=1),))
    batch = build_batch([(b"k", b"v" * 1000, int(time.time() * 1000), ()) for _ in range(100)])
    for _ in range(200):  # 20 MB to read
        client.call(m.ProduceRequest, acks=1, timeout_ms=10_000, topics=(
            m.ProduceTopic(name="f", partitions=(m.ProducePartition(partition=0, records=batch),)),))
    assert _alter(client, _entity(user=None), consumer_byte_rate=QUOTA)["error_code"] == 0  # every user
    offset, fetched = 0, 0
    started = time.monotonic()
    while time.monotonic() - started < 10:
        answer = client.call(m.FetchRequest, max_wait_ms=0, min_bytes=1, max_bytes=200_000, topics=(
            m.FetchTopic(name="f", partitions=(m.FetchPartition(partition=0, fetch_offset=offset,
                                                                partition_max_bytes=200_000),)),))
        records = answer["topics"][0]["partitions"][0]["records"]
        fetched += len(records)
        offset += 100 * (len(records) // len(batch))
    rate = fetched / (time.monotonic() - started)
    assert 0.9 * QUOTA <= rate <= 1.1 * QUOTA, rate


def test_quotas_are_described_validated_and_survive_a_restart(tmp_path):
    process = BrokerProcess(tmp_path / "data").start()
    try:
        client = MsgpackClient(process.port)
        assert _alter(client, _entity(user="alice", client_id=None), producer_byte_rate=5000)["error_code"] == 0
        assert _alter(client, _entity(ip=None), connection_creation_rate=10)["error_code"] == 0
        bad = _alter(client, _entity(user="alice"), consumer_byte_rat=5)
        assert bad["error_code"] == ErrorCode.INVALID_REQUEST and "consumer_byte_rat" in bad["error_message"]
        assert _alter(client, _entity(ip="1.2.3.4"), producer_byte_rate=5)["error_code"] == ErrorCode.INVALID_REQUEST
    finally:
        process.stop()
    process = BrokerProcess(tmp_path / "data").start()
    try:
        client = MsgpackClient(process.port)
        entries = client.call(m.DescribeClientQuotasRequest, components=(
            m.QuotaFilterComponent(entity_type="user", match_type="exact", match="alice"),))["entries"]
        assert entries == [{"entity": [{"entity_type": "client-id", "entity_name": None},
                                       {"entity_type": "user", "entity_name": "alice"}],
                            "values": {"producer_byte_rate": 5000}}]
        everything = client.call(m.DescribeClientQuotasRequest)["entries"]
        assert len(everything) == 2
        assert _alter(client, _entity(ip=None), connection_creation_rate=None)["error_code"] == 0
        assert len(client.call(m.DescribeClientQuotasRequest)["entries"]) == 1
    finally:
        process.stop()


def test_kafka_clients_alter_and_describe_quotas_and_are_throttled(tmp_path):
    """Kafka's AlterClientQuotas and DescribeClientQuotas (raw requests: confluent-kafka has no
    client-quota admin API), then librdkafka producing as that client id: held to its quota."""
    confluent_kafka = pytest.importorskip("confluent_kafka")
    import socket

    from tests.kafka.kafka_wire import decode_response, encode_request, read_frame
    from triolog.protocol.kafka.schema import build, request_class

    process = BrokerProcess(tmp_path / "data", kafka=True).start()
    try:
        sock = socket.create_connection(("127.0.0.1", process.kafka_port), timeout=10)
        sock.sendall(encode_request(49, 1, 1, build(request_class(49, 1), {"validate_only": False, "entries": [
            {"entity": [{"entity_type": "client-id", "entity_name": "rdkafka-quota"}],
             "ops": [{"key": "producer_byte_rate", "value": float(QUOTA), "remove": False}]}]})))
        altered = decode_response(49, 1, read_frame(sock))[1]
        assert [int(e.error_code) for e in altered.entries] == [0]
        sock.sendall(encode_request(48, 1, 2, build(request_class(48, 1), {"strict": False, "components": [
            {"entity_type": "client-id", "match_type": 2, "match": None}]})))
        described = decode_response(48, 1, read_frame(sock))[1]
        assert [(e.entity[0].entity_name, e.values[0].key, e.values[0].value) for e in described.entries] == [
            ("rdkafka-quota", "producer_byte_rate", float(QUOTA))]
        producer = confluent_kafka.Producer({"bootstrap.servers": f"127.0.0.1:{process.kafka_port}",
                                             "client.id": "rdkafka-quota", "linger.ms": 5, "acks": 1})
        value, sent = b"v" * 1000, 0
        producer.produce("kq", value)  # the topic exists before the clock starts
        producer.flush(10)
        started = time.monotonic()
        while time.monotonic() - started < 10:
            try:
                producer.produce("kq", value)
                sent += len(value)
            except BufferError:
                producer.poll(0.05)
            producer.poll(0)
        pending = len(producer)
        elapsed = time.monotonic() - started
        acknowledged = sent - pending * len(value)
        assert acknowledged / elapsed <= 1.1 * QUOTA, acknowledged / elapsed
        assert acknowledged / elapsed >= 0.5 * QUOTA
        producer.purge()
    finally:
        process.stop()


def test_triolog_producers_wait_out_their_throttle(broker):
    """The client honours throttle_ms (KIP-219): under a quota it sends no request the broker
    would only hold, and its rate is the quota."""
    from triolog.client import AdminClient, Producer

    client = MsgpackClient(broker.port)
    assert _alter(client, _entity(client_id="polite"), producer_byte_rate=QUOTA)["error_code"] == 0
    with AdminClient(f"127.0.0.1:{broker.port}") as admin:
        admin.create_topics([__import__("triolog.client", fromlist=["NewTopic"]).NewTopic("polite", 1)])
    value = b"v" * 1000
    with Producer(f"127.0.0.1:{broker.port}", client_id="polite", acks=1, linger_ms=5) as producer:
        started = time.monotonic()
        futures = [producer.send("polite", value, partition=0) for _ in range(5000)]  # 5 MB
        producer.flush()
        elapsed = time.monotonic() - started
        assert all(f.get(timeout=30).offset >= 0 for f in futures)
        throttled_until = producer._conn.throttled_until
    assert elapsed >= 4.0, elapsed  # 5 MB at 1 MB/s (less the last batch's wait)
    assert throttled_until > 0


def test_connections_over_an_ips_creation_rate_are_refused(broker):
    import socket

    client = MsgpackClient(broker.port)
    assert _alter(client, _entity(ip=None), connection_creation_rate=5)["error_code"] == 0
    accepted = refused = 0
    for _ in range(40):  # as fast as possible: far over 5 a second
        probe = MsgpackClient(broker.port)
        try:
            probe.call(m.ApiVersionsRequest)
            accepted += 1
        except (EOFError, ConnectionError):
            refused += 1
        probe.close()
    assert accepted <= 10 and refused >= 30, (accepted, refused)
    assert broker.sample("triolog_server_connections_refused_total", limit="connection_creation_rate") == refused
    time.sleep(1.2)  # the allowance comes back
    MsgpackClient(broker.port).call(m.ApiVersionsRequest)
    assert _alter(client, _entity(ip=None), connection_creation_rate=None)["error_code"] == 0
    for _ in range(20):
        MsgpackClient(broker.port).call(m.ApiVersionsRequest)
