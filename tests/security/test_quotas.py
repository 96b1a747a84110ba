"""Client quotas against the real broker process: set with alter_client_quotas (and Kafka's
AlterClientQuotas), durable, and enforced: a producer or consumer over its byte rate is
throttled (throttle_ms in its answers, nothing read from it meanwhile) to within 10% of its
quota over 10 s."""

from __future__ import annotations

import time

import pytest

from tests.e2e.broker_process import BrokerProcess, InProcessBroker
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
    process = InProcessBroker(tmp_path / "data", metrics=True).start()
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
    # Over its quota from the first batch on. Not every answer: where the broker (or a loaded
    # machine) held a muted channel longer than the throttle asked, the next batch finds the rate
    # back under the quota and is rightly let through unthrottled.
    assert throttled[0] > 0 and sum(t > 0 for t in throttled) > len(throttled) / 2, throttled
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
    process = InProcessBroker(tmp_path / "data").start()
    try:
        client = MsgpackClient(process.port)
        assert _alter(client, _entity(user="alice", client_id=None), producer_byte_rate=5000)["error_code"] == 0
        assert _alter(client, _entity(ip=None), connection_creation_rate=10)["error_code"] == 0
        bad = _alter(client, _entity(user="alice"), consumer_byte_rat=5)
        assert bad["error_code"] == ErrorCode.INVALID_REQUEST and "consumer_byte_rat" in bad["error_message"]
        assert _alter(client, _entity(ip="1.2.3.4"), producer_byte_rate=5)["error_code"] == ErrorCode.INVALID_REQUEST
        assert _alter(client, _entity(user="alice", client_id=None), request_percentage=50)["error_code"] == 0
        for bad in ({"request_percentage": 0}, {"request_percentage": -1}):  # Kafka's: a double > 0
            assert _alter(client, _entity(user="bob"), **bad)["error_code"] == ErrorCode.INVALID_REQUEST
        assert _alter(client, _entity(ip=None), request_percentage=5)["error_code"] == ErrorCode.INVALID_REQUEST
    finally:
        process.stop()
    process = InProcessBroker(tmp_path / "data").start()
    try:
        client = MsgpackClient(process.port)
        entries = client.call(m.DescribeClientQuotasRequest, components=(
            m.QuotaFilterComponent(entity_type="user", match_type="exact", match="alice"),))["entries"]
        assert entries == [{"entity": [{"entity_type": "client-id", "entity_name": None},
                                       {"entity_type": "user", "entity_name": "alice"}],
                            "values": {"producer_byte_rate": 5000, "request_percentage": 50}}]
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

    process = InProcessBroker(tmp_path / "data", kafka=True).start()
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


def _fetch(client, topic, client_id, max_bytes=64 << 20):
    return client.call(m.FetchRequest, client_id=client_id, max_wait_ms=0, min_bytes=1, max_bytes=max_bytes, topics=(
        m.FetchTopic(name=topic, partitions=(m.FetchPartition(partition=0, fetch_offset=0,
                                                              partition_max_bytes=max_bytes),)),))


def test_a_fetch_in_debt_gets_no_records_and_a_fetch_is_capped_to_the_quota_window(tmp_path):
    """Kafka's throttled fetch: one response is at most quota x window span (11 s); a client
    still in debt gets a throttle time and no records (on the Kafka listener no partitions, as
    Kafka's answer; on the msgpack one its partitions' offsets), and is charged nothing for it."""
    import socket

    from tests.kafka.kafka_wire import decode_response, encode_request, read_frame
    from triolog.protocol.kafka.schema import build, request_class

    process = InProcessBroker(tmp_path / "data", kafka=True, metrics=True).start()
    try:
        client = MsgpackClient(process.port, timeout_s=30)
        client.call(m.CreateTopicsRequest, topics=(m.NewTopic(name="t", num_partitions=1, replication_factor=1),))
        batch = build_batch([(b"k", b"v" * 1000, int(time.time() * 1000), ()) for _ in range(100)])  # ~100 kB
        for _ in range(30):  # 3 MB
            client.call(m.ProduceRequest, acks=1, timeout_ms=10_000, topics=(
                m.ProduceTopic(name="t", partitions=(m.ProducePartition(partition=0, records=batch),)),))
        rate = 100_000
        assert _alter(client, _entity(client_id="slow"), consumer_byte_rate=rate)["error_code"] == 0
        first = _fetch(MsgpackClient(process.port), "t", "slow")["topics"][0]["partitions"][0]
        # capped at 100 kB/s x 11 s (quota.window.num x quota.window.size.seconds), not 64 MB
        assert 0 < len(first["records"]) <= 11 * rate, len(first["records"])
        charged = process.sample("triolog_quota_bytes_total", quota="consumer_byte_rate", user="", client_id="slow")
        assert charged == len(first["records"])
        # another connection of the same client, at once: still ~10 s in debt
        answer = _fetch(MsgpackClient(process.port), "t", "slow")
        partition = answer["topics"][0]["partitions"][0]
        assert answer["throttle_ms"] > 5000 and partition["records"] == b""
        assert partition["error_code"] == 0 and partition["high_watermark"] == 3000
        sock = socket.create_connection(("127.0.0.1", process.kafka_port), timeout=10)
        body = build(request_class(1, 12), {
            "max_wait": 0, "min_bytes": 1, "max_bytes": 64 << 20, "session_epoch": -1,
            "topics": [{"topic": "t", "partitions": [{"partition": 0, "fetch_offset": 0,
                                                      "partition_max_bytes": 64 << 20}]}]})
        sock.sendall(encode_request(1, 12, 7, body, client_id="slow"))
        _, kafka_answer = decode_response(1, 12, read_frame(sock))
        assert kafka_answer.throttle_time.total_seconds() > 5 and kafka_answer.responses == ()
        assert int(kafka_answer.error_code) == 0
        # the throttled answers cost nothing; a client without the quota is served in full
        assert process.sample("triolog_quota_bytes_total", quota="consumer_byte_rate", user="",
                              client_id="slow") == charged
        assert len(_fetch(client, "t", "other")["topics"][0]["partitions"][0]["records"]) > 2_900_000
    finally:
        process.stop()


def test_a_client_over_its_request_percentage_is_throttled(tmp_path):
    """request_percentage (KIP-124): cheap requests in a loop are held to 1% of a thread's time;
    the answers say for how long (msgpack throttle_ms, Kafka throttle_time_ms)."""
    import socket

    from tests.kafka.kafka_wire import decode_response, encode_request, read_frame
    from triolog.protocol.kafka.schema import build, request_class

    # A process of its own: the request time measured is the broker's, which in-process would
    # include waits for the interpreter lock held by this test's clients (80 s instead of 40).
    process = BrokerProcess(tmp_path / "data", kafka=True, metrics=True).start()
    try:
        admin = MsgpackClient(process.port, timeout_s=30)
        admin.call(m.CreateTopicsRequest, topics=(m.NewTopic(name="e", num_partitions=1, replication_factor=1),))
        assert _alter(admin, _entity(client_id="busy"), request_percentage=1)["error_code"] == 0

        def loop(client_id, seconds):
            client = MsgpackClient(process.port, timeout_s=30)
            done, throttles = 0, []
            started = time.monotonic()
            while time.monotonic() - started < seconds:
                answer = _fetch(client, "e", client_id)  # nothing to read: a cheap request
                assert answer["topics"][0]["partitions"][0]["error_code"] == 0
                throttles.append(answer["throttle_ms"])
                done += 1
            return done / (time.monotonic() - started), throttles

        free_rate, free_throttles = loop("free", 2)
        busy_rate, busy_throttles = loop("busy", 4)
        assert not any(free_throttles)
        assert sum(t > 0 for t in busy_throttles) >= len(busy_throttles) // 2, busy_throttles
        assert busy_rate < free_rate / 5, (busy_rate, free_rate)
        handled = process.sample("triolog_quota_request_time_seconds_total", user="", client_id="busy")
        # 1% of the 4 s and the first second's allowance (0.05 s), plus the last request's debt,
        # never waited: unthrottled, a second of these requests takes a third of a second
        assert 0 < handled < 0.25, handled
        assert process.sample("triolog_quota_throttle_seconds_total", quota="request_percentage", user="",
                              client_id="busy") > 2
        # the Kafka listener's answers carry it in throttle_time_ms (Metadata, say)
        sock = socket.create_connection(("127.0.0.1", process.kafka_port), timeout=30)
        throttled = []
        for correlation_id in range(20):
            sock.sendall(encode_request(3, 12, correlation_id, build(request_class(3, 12), {
                "topics": [], "allow_auto_topic_creation": False}), client_id="busy"))
            throttled.append(decode_response(3, 12, read_frame(sock))[1].throttle_time.total_seconds())
        assert max(throttled) > 0, throttled
    finally:
        process.stop()


def test_the_broker_wide_connection_creation_rate_delays_accepting(tmp_path):
    """max.connection.creation.rate: over it, new connections wait to be accepted (none is
    refused), unlike an IP's connection_creation_rate."""
    process = InProcessBroker(tmp_path / "data", ("max.connection.creation.rate=5",), metrics=True).start()
    try:
        time.sleep(1.2)  # the allowance of a second saved
        started = time.monotonic()
        clients = [MsgpackClient(process.port, timeout_s=30) for _ in range(20)]
        for client in clients:
            assert client.call(m.ApiVersionsRequest)["error_code"] == 0
        elapsed = time.monotonic() - started
        assert elapsed >= 2.7, elapsed  # 5 at once, then 15 at 5 a second
        assert process.sample("triolog_server_connection_accept_throttle_seconds_total") > 2
        with pytest.raises(KeyError):  # no connection refused for any limit
            process.sample("triolog_server_connections_refused_total", limit="connection_creation_rate")
    finally:
        process.stop()
