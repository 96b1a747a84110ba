"""triolog's own clients over TLS and SASL, against real broker processes: Producer, Consumer
(with a group) and AdminClient, sync and trio, over SASL_SSL (SCRAM-SHA-512 and PLAIN),
SASL_PLAINTEXT (SCRAM-SHA-256) and SSL with a client certificate; what a wrong password or a
wrong CA gives; ACLs and SCRAM users managed through AdminClient."""

from __future__ import annotations

import contextlib
import socket
import threading
import time

import pytest
import trio
import trustme

from tests.e2e.broker_process import InProcessBroker
from triolog.client import (AclBinding, AclBindingFilter, AdminClient, Consumer, NewTopic, Producer,
                            SaslAuthenticationFailedError, TopicAuthorizationFailedError, TopicPartition,
                            UserScramCredentialDeletion, UserScramCredentialUpsertion)
from triolog.client.aio import AsyncAdminClient, AsyncConsumer, AsyncProducer
from triolog.client.aio import AsyncConnection
from triolog.client.connection import SyncConnection
from triolog.client.errors import InvalidResponseError, RequestNotSentError, SecurityConfigError, SslHandshakeError
from triolog.client.security import SecurityConfig
from triolog.protocol import messages as m

from .brokers import add_user, sasl_ssl_broker
from .tls_certs import make_tls_files

@pytest.fixture(scope="module")
def tls(tmp_path_factory):
    return make_tls_files(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def sasl_ssl(tmp_path_factory, tls):
    """SASL_SSL (SCRAM-SHA-512, SCRAM-SHA-256 and PLAIN) with an authorizer: admin is a super user."""
    broker = sasl_ssl_broker(tmp_path_factory.mktemp("sasl-ssl") / "data", tls, "SCRAM-SHA-512,SCRAM-SHA-256,PLAIN")
    yield broker
    broker.stop()


@pytest.fixture(scope="module")
def sasl_plaintext(tmp_path_factory):
    data = tmp_path_factory.mktemp("sasl-plain") / "data"
    add_user(data, "alice", "alice-secret")
    broker = InProcessBroker(data, security="SASL_PLAINTEXT", overrides=(
        "group.initial.rebalance.delay.ms=0",)).start()
    yield broker
    broker.stop()


@pytest.fixture(scope="module")
def mtls(tmp_path_factory, tls):
    data = tmp_path_factory.mktemp("mtls") / "data"
    broker = InProcessBroker(data, security="SSL", overrides=(
        f"ssl.keystore.location={tls.keystore}", "ssl.client.auth=required", f"ssl.truststore.location={tls.ca_pem}",
        "group.initial.rebalance.delay.ms=0")).start()
    yield broker
    broker.stop()


def _settings(kind: str, tls, request) -> tuple[str, dict]:
    if kind == "SASL_SSL/SCRAM-SHA-512":
        broker = request.getfixturevalue("sasl_ssl")
        return f"127.0.0.1:{broker.port}", dict(
            security_protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-512", sasl_username="admin",
            sasl_password="admin-secret", ssl_cafile=str(tls.ca_pem))
    if kind == "SASL_SSL/PLAIN":
        broker = request.getfixturevalue("sasl_ssl")
        return f"127.0.0.1:{broker.port}", dict(
            security_protocol="SASL_SSL", sasl_mechanism="PLAIN", sasl_plain_username="admin",
            sasl_plain_password="admin-secret", ssl_cafile=str(tls.ca_pem))
    if kind == "SASL_PLAINTEXT/SCRAM-SHA-256":
        broker = request.getfixturevalue("sasl_plaintext")
        return f"127.0.0.1:{broker.port}", dict(
            security_protocol="SASL_PLAINTEXT", sasl_username="alice", sasl_password="alice-secret")
    broker = request.getfixturevalue("mtls")
    return f"127.0.0.1:{broker.port}", dict(
        security_protocol="SSL", ssl_cafile=str(tls.ca_pem), ssl_certfile=str(tls.client_cert),
        ssl_keyfile=str(tls.client_key))


KINDS = ["SASL_SSL/SCRAM-SHA-512", "SASL_SSL/PLAIN", "SASL_PLAINTEXT/SCRAM-SHA-256", "SSL/mTLS"]


def _topic(kind: str, flavour: str) -> str:
    return "t-" + kind.replace("/", "-").replace("_", "-").lower() + "-" + flavour


@pytest.mark.parametrize("kind", KINDS)
def test_sync_clients_produce_consume_with_a_group_and_commit(kind, tls, request):
    bootstrap, settings = _settings(kind, tls, request)
    topic = _topic(kind, "sync")
    with AdminClient(bootstrap, **settings) as admin:
        admin.create_topics([NewTopic(topic, 2)])
        assert topic in admin.list_topics()
    with Producer(bootstrap, linger_ms=5, **settings) as producer:
        futures = [producer.send(topic, b"v%d" % i, key=b"k%d" % i) for i in range(200)]
        producer.flush()
    assert all(f.get(timeout=10).offset >= 0 for f in futures)
    group = f"g-{topic}"
    with Consumer(bootstrap, group_id=group, auto_offset_reset="earliest", enable_auto_commit=False,
                  **settings) as consumer:
        consumer.subscribe(topic)
        values = []
        deadline = time.monotonic() + 30
        while len(values) < 200 and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                values += [r.value for r in records]
        consumer.commit()
        committed = sum(consumer.committed(TopicPartition(topic, p)) or 0 for p in (0, 1))
    assert sorted(values) == sorted(b"v%d" % i for i in range(200))
    assert committed == 200


@pytest.mark.parametrize("kind", KINDS)
async def test_trio_clients_produce_consume_with_a_group_and_commit(kind, tls, request):
    bootstrap, settings = _settings(kind, tls, request)
    topic = _topic(kind, "trio")
    async with AsyncAdminClient(bootstrap, **settings) as admin:
        await admin.create_topics([NewTopic(topic, 1)])
    async with AsyncProducer(bootstrap, linger_ms=5, **settings) as producer:
        futures = [await producer.send(topic, b"v%d" % i) for i in range(100)]
        await producer.flush()
    assert [(await f).offset for f in futures] == list(range(100))
    async with AsyncConsumer(bootstrap, group_id=f"g-{topic}", auto_offset_reset="earliest",
                             enable_auto_commit=False, **settings) as consumer:
        consumer.subscribe(topic)
        values = []
        with trio.fail_after(30):
            while len(values) < 100:
                for records in (await consumer.poll(timeout_ms=500)).values():
                    values += [r.value for r in records]
        await consumer.commit()
        assert await consumer.committed(TopicPartition(topic, 0)) == 100
    assert values == [b"v%d" % i for i in range(100)]


def test_a_wrong_password_fails_at_once_with_the_typed_error(sasl_ssl, tls):
    start = time.monotonic()
    with pytest.raises(SaslAuthenticationFailedError) as caught:
        with Producer(f"127.0.0.1:{sasl_ssl.port}", security_protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-512",
                      sasl_username="admin", sasl_password="wrong", ssl_cafile=str(tls.ca_pem),
                      max_block_ms=30_000) as producer:
            producer.send("whatever", b"x").get(timeout=30)
    assert time.monotonic() - start < 5  # refused once (after the broker's delay), never retried
    assert "User:admin" in str(caught.value) and "SASL_AUTHENTICATION_FAILED" in str(caught.value)
    with pytest.raises(SaslAuthenticationFailedError):
        with AdminClient(f"127.0.0.1:{sasl_ssl.port}", security_protocol="SASL_SSL", sasl_username="nobody",
                         sasl_password="x", ssl_cafile=str(tls.ca_pem)) as admin:
            admin.list_topics()


async def test_a_wrong_password_fails_at_once_on_trio(sasl_plaintext):
    with trio.fail_after(5):
        async with AsyncConsumer(f"127.0.0.1:{sasl_plaintext.port}", security_protocol="SASL_PLAINTEXT",
                                 sasl_username="alice", sasl_password="wrong") as consumer:
            consumer.assign([TopicPartition("x", 0)])
            with pytest.raises(SaslAuthenticationFailedError, match="invalid credentials"):
                await consumer.poll(timeout_ms=100)


def test_a_wrong_ca_gives_a_clear_tls_error(sasl_ssl, tmp_path):
    other = tmp_path / "other-ca.pem"
    trustme.CA().cert_pem.write_to_path(other)
    start = time.monotonic()
    with pytest.raises(SslHandshakeError) as caught:
        with AdminClient(f"127.0.0.1:{sasl_ssl.port}", security_protocol="SASL_SSL", sasl_username="admin",
                         sasl_password="admin-secret", ssl_cafile=str(other)) as admin:
            admin.list_topics()
    assert time.monotonic() - start < 5
    assert "TLS handshake with 127.0.0.1" in str(caught.value) and "certificate" in str(caught.value)


async def test_a_wrong_ca_gives_a_clear_tls_error_on_trio(sasl_ssl, tmp_path):
    other = tmp_path / "other-ca.pem"
    trustme.CA().cert_pem.write_to_path(other)
    async with AsyncAdminClient(f"127.0.0.1:{sasl_ssl.port}", security_protocol="SASL_SSL",
                                sasl_username="admin", sasl_password="admin-secret", ssl_cafile=str(other)) as admin:
        with pytest.raises(SslHandshakeError, match="certificate"):
            await admin.list_topics()


@contextlib.contextmanager
def _failing_peer(answer: bytes | None):
    """A listener on 127.0.0.1 (its port) that takes each connection's first frame (the SASL
    handshake) and then hangs up (``answer`` None) or writes ``answer``: a broker failing mid-login."""
    server = socket.create_server(("127.0.0.1", 0))

    def serve():
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                conn.recv(4096)
                if answer is not None:
                    conn.sendall(answer)
                    time.sleep(0.5)

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield server.getsockname()[1]
    finally:
        server.close()


@pytest.mark.parametrize("answer, error, message", [
    (None, RequestNotSentError, "SASL authentication with 127.0.0.1:[0-9]+ failed"),  # retriable: nothing was sent
    (b"\x7f\xff\xff\xff", InvalidResponseError, "127.0.0.1:[0-9]+: "),  # a frame length no broker sends
])
def test_a_login_cut_short_gives_the_same_error_on_both_connection_kinds(answer, error, message):
    security = SecurityConfig(security_protocol="SASL_PLAINTEXT", sasl_username="alice", sasl_password="secret")
    with _failing_peer(answer) as port:
        connection = SyncConnection(f"127.0.0.1:{port}", security=security, connect_timeout_s=5)
        with pytest.raises(error, match=message):
            connection.call(m.ApiVersionsRequest(id=0), timeout_s=5)
        connection.close()

        async def on_trio():
            async with trio.open_nursery() as nursery:
                connection = AsyncConnection(f"127.0.0.1:{port}", nursery, security=security, connect_timeout_s=5)
                with pytest.raises(error, match=message):
                    await connection.call(m.ApiVersionsRequest(id=0), timeout_s=5)
                await connection.aclose()
                nursery.cancel_scope.cancel()

        trio.run(on_trio)


def test_plaintext_client_on_a_tls_listener_and_tls_client_on_a_sasl_plaintext_one(sasl_plaintext, tls):
    with pytest.raises(SslHandshakeError, match="TLS handshake"):
        with AdminClient(f"127.0.0.1:{sasl_plaintext.port}", security_protocol="SASL_SSL", sasl_username="alice",
                         sasl_password="alice-secret", ssl_cafile=str(tls.ca_pem)) as admin:
            admin.list_topics()


def test_bad_settings_are_refused_when_the_client_is_made(tls):
    with pytest.raises(SecurityConfigError, match="sasl_username and sasl_password"):
        Producer("127.0.0.1:1", security_protocol="SASL_SSL")
    with pytest.raises(SecurityConfigError, match="PLAIN"):
        SecurityConfig(security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN", sasl_username="u",
                       sasl_password="p")
    with pytest.raises(SecurityConfigError, match="security_protocol must be one of"):
        Consumer("127.0.0.1:1", security_protocol="TLS")
    with pytest.raises(SecurityConfigError, match="no TLS"):
        AdminClient("127.0.0.1:1", ssl_cafile=str(tls.ca_pem))
    with pytest.raises(SecurityConfigError, match="no such file"):
        AsyncProducer("127.0.0.1:1", security_protocol="SSL", ssl_cafile="/nonexistent/ca.pem")
    assert "secret" not in repr(SecurityConfig(security_protocol="SASL_PLAINTEXT", sasl_username="u",
                                               sasl_password="secret"))


def test_acls_through_the_admin_client_grant_a_consumer(sasl_ssl, tls):
    bootstrap = f"127.0.0.1:{sasl_ssl.port}"
    base = dict(security_protocol="SASL_SSL", ssl_cafile=str(tls.ca_pem))
    admin_settings = dict(base, sasl_username="admin", sasl_password="admin-secret", sasl_mechanism="SCRAM-SHA-512")
    alice = dict(base, sasl_username="alice", sasl_password="alice-secret")
    with AdminClient(bootstrap, **admin_settings) as admin:
        admin.create_topics(["acl-orders"])
    with Producer(bootstrap, **admin_settings) as producer:
        producer.send("acl-orders", b"one").get(timeout=10)
    with Consumer(bootstrap, auto_offset_reset="earliest", **alice) as consumer:
        consumer.assign([TopicPartition("acl-orders", 0)])
        with pytest.raises(TopicAuthorizationFailedError):
            consumer.poll(timeout_ms=2000)
    grants = [AclBinding("topic", "acl-", "User:alice", "Read", pattern_type="prefixed"),
              AclBinding("Group", "billing", "User:alice", "read")]
    with AdminClient(bootstrap, **admin_settings) as admin:
        admin.create_acls(grants)
        listed = admin.describe_acls(AclBindingFilter(principal="User:alice"))
        assert sorted(listed) == sorted([
            AclBinding("TOPIC", "acl-", "User:alice", "READ", "ALLOW", "*", "PREFIXED"),
            AclBinding("GROUP", "billing", "User:alice", "READ", "ALLOW", "*", "LITERAL")])
    with Consumer(bootstrap, group_id="billing", auto_offset_reset="earliest", enable_auto_commit=False,
                  **alice) as consumer:
        consumer.subscribe("acl-orders")
        values = []
        deadline = time.monotonic() + 20
        while not values and time.monotonic() < deadline:
            values += [r.value for records in consumer.poll(timeout_ms=500).values() for r in records]
        consumer.commit()
    assert values == [b"one"]
    with AdminClient(bootstrap, **admin_settings) as admin:
        deleted = admin.delete_acls([AclBindingFilter(principal="User:alice")])
        assert len(deleted) == 1 and len(deleted[0]) == 2
        assert admin.describe_acls(AclBindingFilter(principal="User:alice")) == []
    with AdminClient(bootstrap, **alice) as admin:  # not a super user, no ALTER on the cluster
        with pytest.raises(Exception, match="CLUSTER_AUTHORIZATION_FAILED"):
            admin.create_acls(grants)


async def test_scram_users_through_the_admin_clients(sasl_ssl, tls):
    bootstrap = f"127.0.0.1:{sasl_ssl.port}"
    base = dict(security_protocol="SASL_SSL", ssl_cafile=str(tls.ca_pem))
    admin_settings = dict(base, sasl_username="admin", sasl_password="admin-secret")
    with AdminClient(bootstrap, **admin_settings) as admin:
        admin.alter_user_scram_credentials([UserScramCredentialUpsertion("dave", "SCRAM-SHA-512", "dave-pw", 8192),
                                            UserScramCredentialUpsertion("dave", "SCRAM-SHA-256", "dave-pw")])
        described = admin.describe_user_scram_credentials(["dave"])
    assert sorted(described["dave"].credential_infos) == [("SCRAM-SHA-256", 4096), ("SCRAM-SHA-512", 8192)]
    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        async with AsyncAdminClient(bootstrap, **base, sasl_mechanism=mechanism, sasl_username="dave",
                                    sasl_password="dave-pw") as dave:
            await dave.list_topics()  # authenticated (the authorizer only filters the list)
    async with AsyncAdminClient(bootstrap, **admin_settings) as admin:
        await admin.alter_user_scram_credentials([UserScramCredentialDeletion("dave", "SCRAM-SHA-512"),
                                                  UserScramCredentialDeletion("dave", "SCRAM-SHA-256")])
        assert "dave" not in await admin.describe_user_scram_credentials()
    async with AsyncAdminClient(bootstrap, **base, sasl_username="dave", sasl_password="dave-pw") as dave:
        with pytest.raises(SaslAuthenticationFailedError):
            await dave.list_topics()
