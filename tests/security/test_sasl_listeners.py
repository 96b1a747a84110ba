"""SASL on both listeners, against the real broker process: users added with `triolog users`
(offline, before the start), Kafka's clients with SCRAM and PLAIN on the Kafka listener, and the
msgpack listener's sasl_handshake / sasl_authenticate exchange driven by hand with scramp's
client, including what a client that gets it wrong sees."""

from __future__ import annotations

import socket
import struct
import subprocess
import time

import msgpack
import pytest
from scramp import ScramClient

from tests.e2e.broker_process import InProcessBroker
from triolog.protocol import messages as m
from triolog.protocol.errors import ErrorCode

from .brokers import add_user
from .sasl_client import MsgpackClient
from .tls_certs import make_tls_files

confluent_kafka = pytest.importorskip("confluent_kafka")


@pytest.fixture(scope="module")
def sasl_broker(tmp_path_factory):
    """SASL_PLAINTEXT on both listeners; users alice (both SCRAM mechanisms) and bob (SHA-512 only)."""
    data = tmp_path_factory.mktemp("sasl") / "data"
    add_user(data, "alice", "alice-secret")
    add_user(data, "bob", "bob-secret", "SCRAM-SHA-512")
    broker = InProcessBroker(data, security="SASL_PLAINTEXT", kafka=True, kafka_security="SASL_PLAINTEXT",
                           metrics=True, overrides=("connection.failed.authentication.delay.ms=300",))
    broker.start()
    yield broker
    broker.stop()


def _kafka(broker, mechanism, user, password, **more):
    return {"bootstrap.servers": f"127.0.0.1:{broker.kafka_port}", "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password, **more}


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_kafka_clients_authenticate_with_scram_and_produce_and_consume(sasl_broker, mechanism):
    topic = f"scram-{mechanism.lower()}"
    producer = confluent_kafka.Producer(_kafka(sasl_broker, mechanism, "alice", "alice-secret", **{"linger.ms": 5}))
    for i in range(500):
        producer.produce(topic, value=b"v%d" % i)
    assert producer.flush(30) == 0
    consumer = confluent_kafka.Consumer(_kafka(sasl_broker, mechanism, "alice", "alice-secret", **{
        "group.id": f"g-{topic}", "auto.offset.reset": "earliest"}))
    consumer.subscribe([topic])
    values = []
    deadline = time.monotonic() + 30
    while len(values) < 500 and time.monotonic() < deadline:
        message = consumer.poll(1.0)
        if message is not None and message.error() is None:
            values.append(message.value())
    consumer.close()
    assert values == [b"v%d" % i for i in range(500)]


def test_a_wrong_password_is_refused_delayed_and_counted(sasl_broker):
    before = _auth_failures(sasl_broker, "SCRAM-SHA-256")
    errors = _client_errors(_kafka(sasl_broker, "SCRAM-SHA-256", "alice", "wrong"))
    assert errors[0].code() == confluent_kafka.KafkaError._AUTHENTICATION
    assert "Authentication failed: invalid credentials" in errors[0].str()
    assert _auth_failures(sasl_broker, "SCRAM-SHA-256") > before
    failed = [e for e in sasl_broker.events() if e.get("event") == "authentication_failed"]
    assert failed and "wrong" not in str(failed[-1])  # the attempt's password is never logged


def test_a_user_without_that_mechanism_fails_like_a_wrong_password(sasl_broker):
    errors = _client_errors(_kafka(sasl_broker, "SCRAM-SHA-256", "bob", "bob-secret"))
    assert errors[0].code() == confluent_kafka.KafkaError._AUTHENTICATION
    ok = confluent_kafka.Producer(_kafka(sasl_broker, "SCRAM-SHA-512", "bob", "bob-secret"))
    assert ok.list_topics(timeout=10).brokers


def test_plain_is_not_offered_without_tls(sasl_broker):
    client = MsgpackClient(sasl_broker.port)
    answer = client.call(m.SaslHandshakeRequest, mechanism="PLAIN")
    assert answer["error_code"] == ErrorCode.UNSUPPORTED_SASL_MECHANISM
    assert answer["mechanisms"] == ["SCRAM-SHA-256", "SCRAM-SHA-512"]
    assert client.closed()


# -- the msgpack listener's exchange --------------------------------------------------------------


def test_msgpack_clients_authenticate_then_use_the_broker(sasl_broker):
    client = MsgpackClient(sasl_broker.port)
    assert client.call(m.ApiVersionsRequest)["error_code"] == 0  # allowed before authentication
    assert client.authenticate("alice", "alice-secret")["error_code"] == 0
    created = client.call(m.CreateTopicsRequest, topics=(m.NewTopic(name="after-auth", num_partitions=1,
                                                                      replication_factor=1),))
    assert created["topics"][0]["error_code"] == 0
    assert _auth_successes(sasl_broker, "SCRAM-SHA-256") >= 1


def test_a_request_before_authentication_is_refused_and_closed(sasl_broker):
    client = MsgpackClient(sasl_broker.port)
    answer = client.call(m.MetadataRequest)
    assert answer["error_code"] == ErrorCode.ILLEGAL_SASL_STATE and "before authentication" in answer["error_message"]
    assert client.closed()


def test_a_wrong_password_on_the_msgpack_listener_is_answered_after_the_delay_and_closed(sasl_broker):
    client = MsgpackClient(sasl_broker.port)
    started = time.monotonic()
    answer = client.authenticate("alice", "not-her-password")
    assert time.monotonic() - started >= 0.3  # connection.failed.authentication.delay.ms
    assert answer["error_code"] == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert "Authentication failed" in answer["error_message"]
    assert client.closed()
    unknown = MsgpackClient(sasl_broker.port).authenticate("mallory", "guess")
    assert unknown["error_message"] == answer["error_message"]  # no hint whether the user exists


def test_a_replayed_client_final_is_refused(sasl_broker):
    """CVE-2024-56128: Kafka once accepted a client-final whose nonce was not the exchange's."""
    first_client = MsgpackClient(sasl_broker.port)
    assert first_client.call(m.SaslHandshakeRequest, mechanism="SCRAM-SHA-256")["error_code"] == 0
    scram = ScramClient(["SCRAM-SHA-256"], "alice", "alice-secret")
    recorded_first = scram.get_client_first().encode()
    server_first = first_client.call(m.SaslAuthenticateRequest, auth_bytes=recorded_first)
    scram.set_server_first(server_first["auth_bytes"].decode())
    recorded_final = scram.get_client_final().encode()
    assert first_client.call(m.SaslAuthenticateRequest, auth_bytes=recorded_final)["error_code"] == 0
    # an eavesdropper replays both messages on a new connection: the server's nonce differs
    replay = MsgpackClient(sasl_broker.port)
    assert replay.call(m.SaslHandshakeRequest, mechanism="SCRAM-SHA-256")["error_code"] == 0
    assert replay.call(m.SaslAuthenticateRequest, auth_bytes=recorded_first)["error_code"] == 0
    answer = replay.call(m.SaslAuthenticateRequest, auth_bytes=recorded_final)
    assert answer["error_code"] == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert replay.closed()


def test_a_frame_over_the_pre_authentication_limit_closes_the_connection(sasl_broker):
    client = MsgpackClient(sasl_broker.port)
    client.sock.sendall(struct.pack(">I", 524288 + 1) + b"\x80" * 1024)
    answer = struct.unpack(">I", client.exactly(4))[0]
    doc = msgpack.unpackb(client.exactly(answer), raw=False)
    assert doc["error_code"] == ErrorCode.INVALID_REQUEST
    assert client.closed()


def test_kafka_clients_use_plain_over_sasl_ssl(tmp_path):
    tls = make_tls_files(tmp_path / "tls")
    add_user(tmp_path / "data", "carol", "carol-secret")
    broker = InProcessBroker(tmp_path / "data", kafka=True, kafka_security="SASL_SSL", metrics=True, overrides=(
        f"ssl.keystore.location={tls.keystore}", "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-512")).start()
    try:
        settings = {"bootstrap.servers": f"127.0.0.1:{broker.kafka_port}", "security.protocol": "SASL_SSL",
                    "ssl.ca.location": str(tls.ca_pem), "sasl.mechanism": "PLAIN", "sasl.username": "carol",
                    "sasl.password": "carol-secret"}
        producer = confluent_kafka.Producer(settings)
        producer.produce("plain-over-tls", value=b"hello")
        assert producer.flush(30) == 0
        assert _auth_successes(broker, "PLAIN") >= 1
        errors = _client_errors({**settings, "sasl.password": "nope"})
        assert errors[0].code() == confluent_kafka.KafkaError._AUTHENTICATION
        assert _auth_failures(broker, "PLAIN") >= 1
    finally:
        broker.stop()


def _client_errors(settings: dict) -> list:
    """The errors a producer with ``settings`` reports (its error callback) within 10 s."""
    errors = []
    producer = confluent_kafka.Producer({**settings, "error_cb": errors.append, "log_level": 0})
    producer.produce("never-delivered", value=b"x")
    deadline = time.monotonic() + 10
    while not errors and time.monotonic() < deadline:
        producer.poll(0.1)
    producer.purge()
    assert errors, "no error reported"
    return errors


def _auth_failures(broker, mechanism: str) -> float:
    try:
        return broker.sample("triolog_auth_failures_total", mechanism=mechanism)
    except KeyError:
        return 0.0


def _auth_successes(broker, mechanism: str) -> float:
    try:
        return broker.sample("triolog_auth_successes_total", mechanism=mechanism)
    except KeyError:
        return 0.0


def test_sasl_handshake_v0_then_bare_scram_messages(sasl_broker):
    """SaslHandshake v0 (librdkafka 2.0 needs v0 listed; a client sending it follows with the
    mechanism's messages as bare frames): authenticated, then an ordinary request is answered."""
    from tests.kafka.kafka_wire import decode_response, encode_request, read_frame
    from triolog.protocol.kafka.schema import build, request_class

    sock = socket.create_connection(("127.0.0.1", sasl_broker.kafka_port), timeout=10)
    sock.sendall(encode_request(17, 0, 1, build(request_class(17, 0), {"mechanism": "SCRAM-SHA-256"})))
    assert int(decode_response(17, 0, read_frame(sock))[1].error_code) == 0
    scram = ScramClient(["SCRAM-SHA-256"], "alice", "alice-secret")

    def bare(message: str) -> str:
        sock.sendall(struct.pack(">i", len(message)) + message.encode())
        return read_frame(sock).decode()

    scram.set_server_first(bare(scram.get_client_first()))
    scram.set_server_final(bare(scram.get_client_final()))
    sock.sendall(encode_request(3, 12, 2, build(request_class(3, 12), {"topics": None})))
    assert decode_response(3, 12, read_frame(sock))[1].brokers[0].port == sasl_broker.kafka_port
    # a wrong password after v0: the connection closes without an answer, as Kafka's does
    other = socket.create_connection(("127.0.0.1", sasl_broker.kafka_port), timeout=10)
    other.sendall(encode_request(17, 0, 1, build(request_class(17, 0), {"mechanism": "SCRAM-SHA-256"})))
    read_frame(other)
    wrong = ScramClient(["SCRAM-SHA-256"], "alice", "wrong")
    first = wrong.get_client_first()
    other.sendall(struct.pack(">i", len(first)) + first.encode())
    wrong.set_server_first(read_frame(other).decode())
    final = wrong.get_client_final()
    other.sendall(struct.pack(">i", len(final)) + final.encode())
    assert read_frame(other) is None


def test_kcat_logs_in_with_plain_over_sasl_ssl(tmp_path):
    """Debian's kcat (librdkafka 2.0): PLAIN over SASL_SSL. (Its SCRAM repeats the client nonce in
    the client-final message, refused here as by Kafka 4; librdkafka 2.6.1 fixed it.)"""
    import shutil

    if shutil.which("kcat") is None:
        pytest.skip("kcat is not installed (make test installs it)")
    tls = make_tls_files(tmp_path / "tls")
    add_user(tmp_path / "data", "dave", "dave-secret")
    broker = InProcessBroker(tmp_path / "data", kafka=True, kafka_security="SASL_SSL", overrides=(
        f"ssl.keystore.location={tls.keystore}", "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-512")).start()
    options = ["-b", f"127.0.0.1:{broker.kafka_port}", "-X", "security.protocol=SASL_SSL", "-X",
               f"ssl.ca.location={tls.ca_pem}", "-X", "sasl.mechanism=PLAIN", "-X", "sasl.username=dave"]
    try:
        done = subprocess.run(["kcat", *options, "-X", "sasl.password=dave-secret", "-P", "-t", "kcat-plain"],
                              input=b"one\ntwo\n", capture_output=True, timeout=60)
        assert done.returncode == 0, done.stderr
        read = subprocess.run(["kcat", *options, "-X", "sasl.password=dave-secret", "-C", "-t", "kcat-plain", "-e",
                               "-q"], capture_output=True, timeout=60)
        assert read.stdout.split() == [b"one", b"two"], read.stderr
        refused = subprocess.run(["kcat", *options, "-X", "sasl.password=nope", "-L"], capture_output=True, timeout=60)
        assert refused.returncode != 0 and b"Authentication failed" in refused.stderr
    finally:
        broker.stop()


def test_a_client_chosen_mechanism_name_is_neither_a_label_nor_logged_whole(sasl_broker):
    """Found by review: each refused name became a metric label and a whole log line."""
    for i in range(3):
        client = MsgpackClient(sasl_broker.port)
        answer = client.call(m.SaslHandshakeRequest, mechanism=f"BOGUS-{i}-" + "x" * 20_000)
        assert answer["error_code"] == ErrorCode.UNSUPPORTED_SASL_MECHANISM and client.closed()
    assert _auth_failures(sasl_broker, "unsupported") >= 3
    scrape = sasl_broker.scrape()
    assert "BOGUS" not in scrape
    logged = [e for e in sasl_broker.events() if e.get("event") == "authentication_failed"
              and str(e.get("mechanism", "")).startswith("BOGUS")]
    assert logged and all(len(e["mechanism"]) < 100 for e in logged)


def test_a_malformed_request_before_authentication_is_answered_then_closed(sasl_broker):
    client = MsgpackClient(sasl_broker.port)
    client.send(msgpack.packb({"api": "metadata", "id": 1}))  # no version
    (length,) = struct.unpack(">I", client.exactly(4))
    assert msgpack.unpackb(client.exactly(length), raw=False)["error_code"] == ErrorCode.INVALID_REQUEST
    assert client.closed()


def test_peers_that_have_not_logged_in_hold_no_request_memory(tmp_path):
    """Found by review: two unauthenticated peers announcing 520 kB frames and trickling them
    held a 1 MB queued.max.request.bytes, and a logged-in client's large request waited for
    their receive timeout. Their frames are bounded by sasl.server.max.receive.size instead."""
    add_user(tmp_path / "data", "alice", "alice-secret")
    broker = InProcessBroker(tmp_path / "data", security="SASL_PLAINTEXT", overrides=(
        "queued.max.request.bytes=1048576", "request.receive.timeout.ms=20000")).start()
    try:
        squatters = []
        for _ in range(2):
            squatter = socket.create_connection(("127.0.0.1", broker.port), timeout=10)
            squatter.sendall(struct.pack(">I", 520_000) + b"\x80" * 10)
            squatters.append(squatter)
        time.sleep(0.3)
        alice = MsgpackClient(broker.port)
        assert alice.authenticate("alice", "alice-secret")["error_code"] == 0
        alice.call(m.CreateTopicsRequest, topics=(m.NewTopic(name="big", num_partitions=1, replication_factor=1),))
        from triolog.protocol.records import build_batch

        batch = build_batch([(b"k", b"v" * 900_000, int(time.time() * 1000), ())])
        started = time.monotonic()
        answer = alice.call(m.ProduceRequest, acks=1, timeout_ms=10_000, topics=(
            m.ProduceTopic(name="big", partitions=(m.ProducePartition(partition=0, records=batch),)),))
        assert time.monotonic() - started < 3.0, "the logged-in client waited for the squatters"
        assert answer["topics"][0]["partitions"][0]["error_code"] in (0, ErrorCode.MESSAGE_TOO_LARGE)
        for squatter in squatters:
            squatter.close()
    finally:
        broker.stop()
