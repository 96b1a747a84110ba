"""SASL sessions with a lifetime (KIP-368, ``connections.max.reauth.ms``): where the test moves
time, an in-process broker on trio's MockClock; where real clients renew on their own timers, a
broker process: the lifetime announced at login, re-authentication on the same connection (same user,
same mechanism, at most once a second), an expired connection closed unanswered at its next
request, a deleted user's connection ending at its next re-authentication, librdkafka and
kafka-python re-authenticating by themselves, aiokafka (which does not) reconnecting, and
triolog's clients renewing their connections in time."""

from __future__ import annotations

import datetime
import socket
import threading
import time

import pytest
import trio
from scramp import ScramClient

from tests.e2e.broker_process import BrokerProcess, InProcessBroker
from tests.kafka.kafka_wire import decode_response, encode_request, read_frame
from triolog.client import AdminClient, NewTopic, Producer
from triolog.client.aio import AsyncAdminClient
from triolog.protocol import messages as m
from triolog.protocol.errors import ErrorCode
from triolog.protocol.kafka.schema import build, request_class

from .brokers import add_user
from .sasl_client import MsgpackClient, logged_in

#: Long enough that a client renewing at 85-95% of it has 150 ms or more to spare on a loaded machine.
LIFETIME_MS = 3000
LIFETIME = datetime.timedelta(milliseconds=LIFETIME_MS)
SAFE = dict(security_protocol="SASL_PLAINTEXT", sasl_mechanism="SCRAM-SHA-256")


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    data = tmp_path_factory.mktemp("reauth") / "data"
    for user in ("alice", "bob", "carol"):
        add_user(data, user, f"{user}-secret")
    # A process of its own: clients renew 150-300 ms before the session ends, a margin the
    # broker keeps only with its own interpreter (in-process, librdkafka's renewals were late).
    process = BrokerProcess(data, security="SASL_PLAINTEXT", kafka=True, kafka_security="SASL_PLAINTEXT",
                            metrics=True, overrides=(f"connections.max.reauth.ms={LIFETIME_MS}",)).start()
    yield process
    process.stop()


@pytest.fixture(scope="module")
def virtual_broker(tmp_path_factory):
    """The same broker in-process with its event loop on trio's MockClock: a session ends when the
    test moves the clock past its lifetime (advance()), not after a real wait."""
    from trio.testing import MockClock

    data = tmp_path_factory.mktemp("reauth-virtual") / "data"
    add_user(data, "alice", "alice-secret")
    broker = InProcessBroker(data, security="SASL_PLAINTEXT", kafka=True, kafka_security="SASL_PLAINTEXT", metrics=True,
                             mock_clock=MockClock(), overrides=(f"connections.max.reauth.ms={LIFETIME_MS}",)).start()
    yield broker
    broker.stop()


def _expired_closes(broker) -> float:
    return broker.sample("triolog_server_connections_closed_total", limit="connections.max.reauth.ms")


def _logins(broker, metric: str = "triolog_auth_reauthentications_total") -> float:
    try:
        return broker.sample(metric, mechanism="SCRAM-SHA-256")
    except KeyError:  # none with that mechanism yet
        return 0.0


def _reauthentications(broker) -> float:
    return _logins(broker)


def _metadata_answered(client: MsgpackClient) -> bool:
    return client.call(m.MetadataRequest)["error_code"] == 0


def test_login_announces_the_session_lifetime_and_an_expired_connection_is_closed_unanswered(virtual_broker):
    broker = virtual_broker
    before = _expired_closes(broker)
    client = MsgpackClient(broker.port)
    final = client.authenticate("alice", "alice-secret")
    assert final["error_code"] == 0 and final["session_lifetime_ms"] == LIFETIME_MS
    broker.advance(LIFETIME_MS / 1000 - 0.2)
    assert _metadata_answered(client)  # still within the session
    broker.advance(0.4)
    client.send(m.encode_request(m.MetadataRequest(id=99)))
    assert client.closed()  # no answer: the connection was closed
    assert _expired_closes(broker) == before + 1


def test_reauthenticating_on_the_same_connection_renews_the_session_even_after_its_end(virtual_broker):
    # Kafka's order: the handshake that begins a re-authentication is taken even on an ended
    # session, and the exchange's messages after it too (the Kafka listener's test renews in time)
    broker = virtual_broker
    before = _reauthentications(broker)
    client = logged_in(broker.port, "alice", "alice-secret")
    broker.advance(LIFETIME_MS / 1000 + 0.2)
    again = client.authenticate("alice", "alice-secret")
    assert again["error_code"] == 0 and again["session_lifetime_ms"] == LIFETIME_MS
    assert _metadata_answered(client)
    assert _reauthentications(broker) == before + 1


def test_a_second_reauthentication_within_a_second_is_refused_and_the_connection_stays(broker):
    client = logged_in(broker.port, "alice", "alice-secret")
    assert client.authenticate("alice", "alice-secret")["error_code"] == 0  # the first may come at once
    refused = client.call(m.SaslHandshakeRequest, mechanism="SCRAM-SHA-256")
    assert refused["error_code"] == ErrorCode.ILLEGAL_SASL_STATE and "one a second" in refused["error_message"]
    assert _metadata_answered(client)  # Kafka answers it as a request and keeps the connection


def test_reauthenticating_as_another_user_fails_and_closes_the_connection(broker):
    client = logged_in(broker.port, "alice", "alice-secret")
    answer = client.authenticate("bob", "bob-secret")
    assert answer["error_code"] == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert answer["error_message"] == "Cannot change principals during re-authentication from User.alice: User.bob"
    assert client.closed()


def test_reauthenticating_with_another_mechanism_fails_and_closes_the_connection(broker):
    client = logged_in(broker.port, "alice", "alice-secret")
    assert client.call(m.SaslHandshakeRequest, mechanism="SCRAM-SHA-512")["error_code"] == 0
    first = client.call(m.SaslAuthenticateRequest,
                        auth_bytes=ScramClient(["SCRAM-SHA-512"], "alice", "alice-secret").get_client_first().encode())
    assert first["error_code"] == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert "not supported for re-authentication of mechanism 'SCRAM-SHA-256'" in first["error_message"]
    assert client.closed()


def test_a_deleted_users_connection_ends_at_its_next_reauthentication(broker):
    carol = logged_in(broker.port, "carol", "carol-secret")
    admin = logged_in(broker.port, "alice", "alice-secret")
    answer = admin.call(m.AlterUserScramCredentialsRequest, deletions=tuple(
        m.ScramCredentialDeletion(name="carol", mechanism=mech) for mech in ("SCRAM-SHA-256", "SCRAM-SHA-512")))
    assert [r["error_code"] for r in answer["results"]] == [0]
    assert _metadata_answered(carol)  # the session carol has is hers until it ends
    assert carol.authenticate("carol", "carol-secret")["error_code"] == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert carol.closed()
    assert MsgpackClient(broker.port).authenticate("carol", "carol-secret")["error_code"] != 0


def test_without_a_session_lifetime_sessions_never_expire(tmp_path):
    from trio.testing import MockClock

    add_user(tmp_path / "data", "alice", "alice-secret")
    process = InProcessBroker(tmp_path / "data", security="SASL_PLAINTEXT", mock_clock=MockClock()).start()
    try:
        client = MsgpackClient(process.port)
        assert client.authenticate("alice", "alice-secret")["session_lifetime_ms"] == 0
        refused = client.call(m.SaslHandshakeRequest, mechanism="SCRAM-SHA-256")
        assert refused["error_code"] == ErrorCode.ILLEGAL_SASL_STATE
        assert "connections.max.reauth.ms" in refused["error_message"]
        process.advance(1.5)  # past the one-a-second rule: still no re-authentication without a lifetime
        refused = client.call(m.SaslHandshakeRequest, mechanism="SCRAM-SHA-256")
        assert refused["error_code"] == ErrorCode.ILLEGAL_SASL_STATE
        # Minutes later (under connections.max.idle.ms, whose idle close is another rule), still
        # its session: past any lifetime it could have had.
        process.advance(5 * 60)
        assert _metadata_answered(client)
    finally:
        process.stop()


class _KafkaLogin:
    """Kafka's SaslHandshake v1 and SaslAuthenticate v2 by hand, on one socket."""

    def __init__(self, port: int):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.ids = 0

    def call(self, api_key: int, version: int, values: dict):
        self.ids += 1
        self.sock.sendall(encode_request(api_key, version, self.ids, build(request_class(api_key, version), values)))
        frame = read_frame(self.sock)
        return None if frame is None else decode_response(api_key, version, frame)[1]

    def login(self, user: str, password: str):
        assert int(self.call(17, 1, {"mechanism": "SCRAM-SHA-256"}).error_code) == 0
        scram = ScramClient(["SCRAM-SHA-256"], user, password)
        first = self.call(36, 2, {"auth_bytes": scram.get_client_first().encode()})
        scram.set_server_first(first.auth_bytes.decode())
        final = self.call(36, 2, {"auth_bytes": scram.get_client_final().encode()})
        assert int(final.error_code) == 0
        scram.set_server_final(final.auth_bytes.decode())
        return final


def test_the_kafka_listener_announces_the_lifetime_and_closes_an_expired_connection(virtual_broker):
    broker = virtual_broker
    before = _expired_closes(broker)
    client = _KafkaLogin(broker.kafka_port)
    assert client.login("alice", "alice-secret").session_lifetime == LIFETIME
    assert int(client.call(3, 4, {"topics": [], "allow_auto_topic_creation": False}).brokers[0].node_id) == 0
    broker.advance(1.1)  # re-authentication may come once a second
    assert client.login("alice", "alice-secret").session_lifetime == LIFETIME  # renewed in place
    broker.advance(LIFETIME_MS / 1000 - 1.1 + 0.2)  # past the first session's end: the renewed one holds
    assert client.call(3, 4, {"topics": [], "allow_auto_topic_creation": False}) is not None
    broker.advance(LIFETIME_MS / 1000)  # past the renewed one's end
    assert client.call(3, 4, {"topics": [], "allow_auto_topic_creation": False}) is None  # closed unanswered
    assert _expired_closes(broker) == before + 1


def test_librdkafka_reauthenticates_in_place_and_keeps_producing(broker):
    confluent_kafka = pytest.importorskip("confluent_kafka")
    before, closed_before = _reauthentications(broker), _expired_closes(broker)
    errors, delivered = [], []
    producer = confluent_kafka.Producer({
        "bootstrap.servers": f"127.0.0.1:{broker.kafka_port}", "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "bob", "sasl.password": "bob-secret",
        "linger.ms": 5, "error_cb": lambda error: errors.append(str(error))})
    sent, started = 0, time.monotonic()
    while time.monotonic() - started < 2.2 * LIFETIME_MS / 1000:  # librdkafka renews at 90% of it
        producer.produce("reauth-rdkafka", b"v%d" % sent, on_delivery=lambda error, _: delivered.append(error))
        sent += 1
        producer.poll(0.02)
    assert producer.flush(10) == 0
    assert errors == [] and len(delivered) == sent and set(delivered) == {None}
    assert _reauthentications(broker) - before >= 2
    assert _expired_closes(broker) == closed_before  # it renewed in time


def test_kafka_python_reauthenticates_in_place(broker):
    kafka = pytest.importorskip("kafka")
    before, closed_before = _reauthentications(broker), _expired_closes(broker)
    producer = kafka.KafkaProducer(
        bootstrap_servers=f"127.0.0.1:{broker.kafka_port}", security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="SCRAM-SHA-256", sasl_plain_username="bob", sasl_plain_password="bob-secret", linger_ms=5)
    try:
        futures, started = [], time.monotonic()
        while time.monotonic() - started < 2.2 * LIFETIME_MS / 1000:
            futures.append(producer.send("reauth-kafka-python", b"v"))
            time.sleep(0.02)
        producer.flush(20)
        assert sorted(f.get(10).offset for f in futures) == list(range(len(futures)))
    finally:
        producer.close(5)
    assert _reauthentications(broker) - before >= 2
    assert _expired_closes(broker) == closed_before


def test_aiokafka_which_does_not_reauthenticate_is_closed_and_reconnects(broker):
    """aiokafka 0.14 has no KIP-368: each session's end closes its connection at its next
    request; it reconnects, logs in again and retries, and nothing acknowledged is lost."""
    aiokafka = pytest.importorskip("aiokafka")
    import asyncio

    closed_before = _expired_closes(broker)

    async def produce() -> list[int]:
        producer = aiokafka.AIOKafkaProducer(
            bootstrap_servers=f"127.0.0.1:{broker.kafka_port}", security_protocol="SASL_PLAINTEXT",
            sasl_mechanism="SCRAM-SHA-256", sasl_plain_username="bob", sasl_plain_password="bob-secret",
            enable_idempotence=True)
        await producer.start()
        try:
            offsets, started = [], time.monotonic()
            while time.monotonic() - started < 2.2 * LIFETIME_MS / 1000:
                offsets.append((await producer.send_and_wait("reauth-aiokafka", b"v")).offset)
                await asyncio.sleep(0.02)
            return offsets
        finally:
            await producer.stop()

    offsets = asyncio.run(produce())
    assert offsets == list(range(len(offsets)))  # idempotent retries: each record once
    assert _expired_closes(broker) - closed_before >= 1


def test_our_producer_and_trio_admin_renew_their_connections_before_the_session_ends(broker):
    closed_before = _expired_closes(broker)
    successes_before = _logins(broker, "triolog_auth_successes_total")
    seconds = 2.2 * LIFETIME_MS / 1000  # each renews at 85-95% of a lifetime: twice
    with AdminClient(f"127.0.0.1:{broker.port}", sasl_username="alice", sasl_password="alice-secret", **SAFE) as admin:
        admin.create_topics([NewTopic("reauth-ours", 1)])
    futures = []

    def produce() -> None:
        with Producer(f"127.0.0.1:{broker.port}", sasl_username="bob", sasl_password="bob-secret", linger_ms=5,
                      **SAFE) as producer:
            started = time.monotonic()
            while time.monotonic() - started < seconds:  # a request every 10 ms
                futures.append(producer.send("reauth-ours", b"v"))
                time.sleep(0.01)
            producer.flush()

    async def list_topics() -> int:
        calls = 0
        async with AsyncAdminClient(f"127.0.0.1:{broker.port}", sasl_username="alice", sasl_password="alice-secret",
                                    **SAFE) as admin:
            deadline = trio.current_time() + seconds
            while trio.current_time() < deadline:
                assert "reauth-ours" in await admin.list_topics()
                calls += 1
                await trio.sleep(0.05)
        return calls

    producing = threading.Thread(target=produce)
    producing.start()
    try:
        assert trio.run(list_topics) > 30
    finally:
        producing.join(60)
    offsets = [future.get(10).offset for future in futures]
    assert offsets == list(range(len(futures)))  # every record acknowledged, once, in order
    assert _expired_closes(broker) == closed_before  # neither was caught with an ended session
    # the sync admin logged in once; the producer and the trio admin once and twice again each
    assert _logins(broker, "triolog_auth_successes_total") - successes_before >= 1 + 3 + 3
