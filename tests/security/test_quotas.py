"""Client quotas against the real broker: set with alter_client_quotas (and Kafka's
AlterClientQuotas), durable, and enforced: a producer or consumer over its byte rate is
throttled (throttle_ms in its answers, nothing read from it meanwhile) to its quota over 10 s,
an IP over its connection_creation_rate refused, the broker over max.connection.creation.rate
slowed down.

Where the test is the client, the broker runs in-process on trio's MockClock and the test waits
out each throttle by moving that clock (``advance``) as a well-behaved client would wait: the
quotas' allowance and the muted channels follow the event loop's clock, so 10 s of quota take a
fraction of a second, and the rate is the quota to within the throttles' rounding to a
millisecond (the client waits exactly the throttle, and nothing else delays it). Real time stays where the client keeps its own time: librdkafka's timers,
triolog's Producer (it waits out throttle_ms on time.monotonic), and request_percentage, whose
cost is the real time a request takes to handle (a broker process of its own, see there)."""

from __future__ import annotations

import time

import pytest
from trio.testing import MockClock

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


@pytest.fixture
def virtual_broker(tmp_path):
    """The broker on trio's MockClock: time passes only when the test says (``advance``)."""
    process = InProcessBroker(tmp_path / "data", metrics=True, mock_clock=MockClock()).start()
    yield process
    process.stop()


def _produce(client, client_id, topic, batch):
    return client.call(m.ProduceRequest, client_id=client_id, acks=1, timeout_ms=10_000, topics=(
        m.ProduceTopic(name=topic, partitions=(m.ProducePartition(partition=0, records=batch),)),))


def test_a_producer_over_its_quota_gets_its_quota(virtual_broker):
    broker = virtual_broker
    client = MsgpackClient(broker.port, timeout_s=30)
    assert _alter(client, _entity(client_id="greedy"), producer_byte_rate=QUOTA)["error_code"] == 0
    client.call(m.CreateTopicsRequest, topics=(m.NewTopic(name="q", num_partitions=1, replication_factor=1),))
    batch = build_batch([(b"k", b"v" * 1000, int(time.time() * 1000), ()) for _ in range(100)])  # ~100 kB
    greedy = MsgpackClient(broker.port, timeout_s=30)
    sent, throttled, elapsed = 0, [], 0.0
    while elapsed < 10:  # each batch as soon as the last throttle is waited out (virtual seconds)
        answer = _produce(greedy, "greedy", "q", batch)
        assert answer["topics"][0]["partitions"][0]["error_code"] == 0
        sent += len(batch)
        throttled.append(answer["throttle_ms"])
        # Over its quota from the first batch on (a new client has saved nothing), and at every
        # batch after: waiting exactly the throttle leaves no allowance for a whole batch.
        assert answer["throttle_ms"] > 0, throttled
        broker.advance(answer["throttle_ms"] / 1000)
        elapsed += answer["throttle_ms"] / 1000
    # At its quota: at most it (the bytes charged are the frames, a little more than the batches),
    # and short of it by no more than the throttles' rounding up to a millisecond (1 ms in 100).
    assert 0.99 * QUOTA <= sent / elapsed <= QUOTA, sent / elapsed
    assert broker.sample("triolog_quota_throttle_seconds_total", quota="producer_byte_rate", user="",
                         client_id="greedy") == pytest.approx(elapsed, rel=0.01)
    # Muted while throttled: a batch sent at once is not read (nor charged) until the throttle is over.
    throttle_ms = _produce(greedy, "greedy", "q", batch)["throttle_ms"]
    charged = broker.sample("triolog_quota_bytes_total", quota="producer_byte_rate", user="", client_id="greedy")
    greedy.request(m.ProduceRequest, client_id="greedy", acks=1, timeout_ms=10_000,
                   topics=(m.ProduceTopic(name="q", partitions=(m.ProducePartition(partition=0, records=batch),)),))
    broker.advance(throttle_ms // 2 / 1000)
    assert not greedy.answered()
    assert broker.sample("triolog_quota_bytes_total", quota="producer_byte_rate", user="",
                         client_id="greedy") == charged
    broker.advance((throttle_ms - throttle_ms // 2) / 1000)
    answer = greedy.answer()
    assert answer["topics"][0]["partitions"][0]["error_code"] == 0 and answer["throttle_ms"] > 0
    # another client id is not throttled
    assert _produce(client, "modest", "q", batch)["throttle_ms"] == 0


def test_a_consumer_over_its_quota_gets_its_quota(virtual_broker):
    broker = virtual_broker
    client = MsgpackClient(broker.port, timeout_s=30)
    client.call(m.CreateTopicsRequest, topics=(m.NewTopic(name="f", num_partitions=1, replication_factor=1),))
    batch = build_batch([(b"k", b"v" * 1000, int(time.time() * 1000), ()) for _ in range(100)])
    for _ in range(120):  # 12 MB to read: more than 10 s of the quota
        _produce(client, None, "f", batch)
    assert _alter(client, _entity(user=None), consumer_byte_rate=QUOTA)["error_code"] == 0  # every user
    offset, fetched, elapsed = 0, 0, 0.0
    while elapsed < 10:  # each fetch as soon as the last throttle is waited out (virtual seconds)
        answer = client.call(m.FetchRequest, max_wait_ms=0, min_bytes=1, max_bytes=200_000, topics=(
            m.FetchTopic(name="f", partitions=(m.FetchPartition(partition=0, fetch_offset=offset,
                                                                partition_max_bytes=200_000),)),))
        records = answer["topics"][0]["partitions"][0]["records"]
        # a consumer that waits as told is never answered empty, and is over its quota each time
        assert len(records) == len(batch) and answer["throttle_ms"] > 0, (len(records), answer["throttle_ms"])
        fetched += len(records)
        offset += 100
        broker.advance(answer["throttle_ms"] / 1000)
        elapsed += answer["throttle_ms"] / 1000
    assert 0.99 * QUOTA <= fetched / elapsed <= QUOTA, fetched / elapsed
    assert broker.sample("triolog_quota_throttle_seconds_total", quota="consumer_byte_rate", user="<default>",
                         client_id="") == pytest.approx(elapsed, rel=0.01)


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
    client-quota admin API), then librdkafka producing as that client id: held to its quota.
    Real time: librdkafka keeps its own timers (linger, its throttle wait), which a MockClock of
    the broker's cannot move."""
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
    would only hold, and its rate is the quota. Real time: the Producer waits on time.monotonic,
    its own clock, which a broker's MockClock does not move."""
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


def _connections(broker, count):
    """(accepted, refused) of ``count`` new connections, one after another."""
    accepted = refused = 0
    for _ in range(count):
        probe = MsgpackClient(broker.port)
        try:
            probe.call(m.ApiVersionsRequest)
            accepted += 1
        except (EOFError, ConnectionError):
            refused += 1
        probe.close()
    return accepted, refused


def test_connections_over_an_ips_creation_rate_are_refused(virtual_broker):
    broker = virtual_broker
    client = MsgpackClient(broker.port)
    assert _alter(client, _entity(ip=None), connection_creation_rate=5)["error_code"] == 0
    # at one instant (virtual time stands still): the allowance of a second, 5, and no more
    assert _connections(broker, 40) == (5, 35)
    assert broker.sample("triolog_server_connections_refused_total", limit="connection_creation_rate") == 35
    broker.advance(0.25)  # the allowance comes back at 5 a second: one connection's worth, and a quarter
    assert _connections(broker, 3) == (1, 2)
    broker.advance(1)  # never more than a second's worth
    assert _connections(broker, 10) == (5, 5)
    assert _alter(client, _entity(ip=None), connection_creation_rate=None)["error_code"] == 0
    assert _connections(broker, 20) == (20, 0)
    assert broker.sample("triolog_server_connections_refused_total", limit="connection_creation_rate") == 42


def _fetch(client, topic, client_id, max_bytes=64 << 20):
    return client.call(m.FetchRequest, client_id=client_id, max_wait_ms=0, min_bytes=1, max_bytes=max_bytes, topics=(
        m.FetchTopic(name=topic, partitions=(m.FetchPartition(partition=0, fetch_offset=0,
                                                              partition_max_bytes=max_bytes),)),))


def test_a_fetch_in_debt_gets_no_records_and_a_fetch_is_capped_to_the_quota_window(tmp_path):
    """Kafka's throttled fetch: one response is at most quota x window span (11 s); a client
    still in debt gets a throttle time and no records (on the Kafka listener no partitions, as
    Kafka's answer; on the msgpack one its partitions' offsets), and is charged nothing for it;
    once it has waited out its debt, it gets records again."""
    import socket

    from tests.kafka.kafka_wire import decode_response, encode_request, read_frame
    from triolog.protocol.kafka.schema import build, request_class

    process = InProcessBroker(tmp_path / "data", kafka=True, metrics=True, mock_clock=MockClock()).start()
    try:
        client = MsgpackClient(process.port, timeout_s=30)
        client.call(m.CreateTopicsRequest, topics=(m.NewTopic(name="t", num_partitions=1, replication_factor=1),))
        batch = build_batch([(b"k", b"v" * 1000, int(time.time() * 1000), ()) for _ in range(100)])  # ~100 kB
        for _ in range(30):  # 3 MB
            _produce(client, None, "t", batch)
        rate = 100_000
        assert _alter(client, _entity(client_id="slow"), consumer_byte_rate=rate)["error_code"] == 0
        slow = MsgpackClient(process.port)
        answered = _fetch(slow, "t", "slow")
        first = answered["topics"][0]["partitions"][0]
        # capped at 100 kB/s x 11 s (quota.window.num x quota.window.size.seconds), not 64 MB
        assert 0 < len(first["records"]) <= 11 * rate, len(first["records"])
        charged = process.sample("triolog_quota_bytes_total", quota="consumer_byte_rate", user="", client_id="slow")
        assert charged == len(first["records"])
        debt_ms = answered["throttle_ms"]  # what it has to wait: its bytes at the quota
        assert debt_ms == pytest.approx(1000 * charged / rate, abs=1)
        # another connection of the same client, at once (no time has passed): all of that debt
        answer = _fetch(MsgpackClient(process.port), "t", "slow")
        partition = answer["topics"][0]["partitions"][0]
        assert answer["throttle_ms"] == debt_ms and partition["records"] == b""
        assert partition["error_code"] == 0 and partition["high_watermark"] == 3000
        sock = socket.create_connection(("127.0.0.1", process.kafka_port), timeout=10)
        body = build(request_class(1, 12), {
            "max_wait": 0, "min_bytes": 1, "max_bytes": 64 << 20, "session_epoch": -1,
            "topics": [{"topic": "t", "partitions": [{"partition": 0, "fetch_offset": 0,
                                                      "partition_max_bytes": 64 << 20}]}]})
        sock.sendall(encode_request(1, 12, 7, body, client_id="slow"))
        _, kafka_answer = decode_response(1, 12, read_frame(sock))
        assert round(kafka_answer.throttle_time.total_seconds() * 1000) == debt_ms and kafka_answer.responses == ()
        assert int(kafka_answer.error_code) == 0
        # halfway through it: half the debt left, still no records
        process.advance(debt_ms // 2 / 1000)
        answer = _fetch(MsgpackClient(process.port), "t", "slow")
        assert answer["throttle_ms"] == pytest.approx(debt_ms - debt_ms // 2, abs=1)
        assert answer["topics"][0]["partitions"][0]["records"] == b""
        # the throttled answers cost nothing; a client without the quota is served in full
        assert process.sample("triolog_quota_bytes_total", quota="consumer_byte_rate", user="",
                              client_id="slow") == charged
        assert len(_fetch(client, "t", "other")["topics"][0]["partitions"][0]["records"]) > 2_900_000
        # the debt waited out, the first connection (no longer muted) gets records again, capped again
        process.advance((debt_ms - debt_ms // 2) / 1000)
        again = _fetch(slow, "t", "slow")["topics"][0]["partitions"][0]["records"]
        assert 0 < len(again) <= 11 * rate, len(again)
    finally:
        process.stop()


def test_a_client_over_its_request_percentage_is_throttled(tmp_path):
    """request_percentage (KIP-124): cheap requests in a loop are held to 1% of a thread's time;
    the answers say for how long (msgpack throttle_ms, Kafka throttle_time_ms). Real time: what is
    charged is the real time a request takes to handle (request_context.handling_clock), so the
    allowance has to come back in real time too for the 1% to mean anything."""
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
    refused), unlike an IP's connection_creation_rate: 4 at once (the allowance of a second,
    saved from the start), then one every 0.25 s, to the (virtual) instant. (4 a second: times in
    quarters of a second add up exactly in binary floating point, so every wait ends at the very
    instant the test moves the clock to.)"""
    process = InProcessBroker(tmp_path / "data", ("max.connection.creation.rate=4",), metrics=True,
                              mock_clock=MockClock()).start()
    try:
        clients = [MsgpackClient(process.port, timeout_s=30) for _ in range(20)]  # in the listen backlog
        for client in clients:
            client.request(m.ApiVersionsRequest)
        answered = 0
        for step in range(33):  # at 0, 0.125, 0.25 ... 4 s: each client answered when due, not before
            due = min(20, 4 + step // 2)
            while answered < due:
                assert clients[answered].answer()["error_code"] == 0
                answered += 1
            assert not any(client.answered() for client in clients[due:]), (step, due)
            process.advance(0.125)
        assert process.sample("triolog_server_connection_accept_throttle_seconds_total") == 16 * 0.25
        with pytest.raises(KeyError):  # no connection refused for any limit
            process.sample("triolog_server_connections_refused_total", limit="connection_creation_rate")
    finally:
        process.stop()
