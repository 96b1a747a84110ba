"""SCRAM and PLAIN server exchanges against scramp's client: full exchanges, and every refusal
(wrong or unknown credentials alike, nonce mismatch and replay, malformed and extra steps)."""

from __future__ import annotations

import base64

import pytest
import scramp

from triolog.broker.security.scram import (
    AuthenticationFailed,
    CredentialStore,
    IllegalSaslStateError,
    PlainServerExchange,
    ScramMechanism,
    ScramServerExchange,
    make_credential,
)

MECHANISMS = list(ScramMechanism)
GENERIC = "Authentication failed: invalid credentials with SASL mechanism"


@pytest.fixture
def store(tmp_path) -> CredentialStore:
    store = CredentialStore(tmp_path)
    for mechanism in MECHANISMS:
        store.upsert("alice", make_credential(mechanism, "alice-pw"))
        store.upsert("a,b=c", make_credential(mechanism, "odd-pw"))
    store.upsert("only256", make_credential(ScramMechanism.SCRAM_SHA_256, "pw-256", iterations=8192))
    return store


def run(mechanism, store, user="alice", password="alice-pw", c_nonce=None):
    """A full exchange; returns (server exchange, client, client-first, client-final)."""
    client = scramp.ScramClient([mechanism.value], user, password, c_nonce=c_nonce)
    server = ScramServerExchange(mechanism, store)
    first = client.get_client_first().encode()
    client.set_server_first(server.step(first).decode())
    final = client.get_client_final().encode()
    client.set_server_final(server.step(final).decode())  # checks the server's signature
    return server, client, first, final


@pytest.mark.parametrize("mechanism", MECHANISMS, ids=str)
def test_full_exchange(mechanism, store):
    server, *_ = run(mechanism, store)
    assert server.complete and server.principal == "User:alice"


@pytest.mark.parametrize("mechanism", MECHANISMS, ids=str)
def test_escaped_username(mechanism, store):
    client = scramp.ScramClient([mechanism.value], "a,b=c", "odd-pw")
    first = client.get_client_first()
    assert "n=a=2Cb=3Dc," in first
    server, *_ = run(mechanism, store, user="a,b=c", password="odd-pw")
    assert server.principal == "User:a,b=c"


@pytest.mark.parametrize("mechanism", MECHANISMS, ids=str)
def test_wrong_password_and_unknown_user_fail_alike(mechanism, store):
    messages = []
    for user, password in (("alice", "wrong"), ("mallory", "alice-pw")):
        client = scramp.ScramClient([mechanism.value], user, password)
        server = ScramServerExchange(mechanism, store)
        server_first = server.step(client.get_client_first().encode()).decode()
        # an unknown user gets a server-first like a known one's: a salt and Kafka's default iterations
        assert server_first.split(",")[1].startswith("s=") and server_first.endswith(",i=4096")
        client.set_server_first(server_first)
        with pytest.raises(AuthenticationFailed) as info:
            server.step(client.get_client_final().encode())
        messages.append(str(info.value))
        assert server.principal is None and not server.complete
    assert messages[0] == messages[1] and messages[0].startswith(GENERIC)


def test_an_unknown_user_sees_the_same_salt_each_time(store):
    salts = set()
    for _ in range(2):
        client = scramp.ScramClient(["SCRAM-SHA-256"], "mallory", "x")
        server = ScramServerExchange(ScramMechanism.SCRAM_SHA_256, store)
        salts.add(server.step(client.get_client_first().encode()).decode().split(",")[1])
    assert len(salts) == 1


def test_a_user_without_a_credential_for_the_mechanism_is_unknown(store):
    with pytest.raises(AuthenticationFailed, match=GENERIC):
        run(ScramMechanism.SCRAM_SHA_512, store, user="only256", password="pw-256")
    server, *_ = run(ScramMechanism.SCRAM_SHA_256, store, user="only256", password="pw-256")
    assert server.principal == "User:only256"


@pytest.mark.parametrize("mechanism", MECHANISMS, ids=str)
def test_replayed_client_final_is_refused(mechanism, store):
    """CVE-2024-56128: a client-final from an earlier exchange, even after the same client-first,
    carries the earlier server nonce and must not authenticate a new exchange."""
    _, _, first, final = run(mechanism, store, c_nonce="fixedclientnonce")
    replay = ScramServerExchange(mechanism, store)
    replay.step(first)
    with pytest.raises(AuthenticationFailed, match="nonce"):
        replay.step(final)
    assert replay.principal is None


@pytest.mark.parametrize("change", ["other-server-part", "client-nonce-only", "extra-suffix"])
def test_client_final_with_another_nonce_is_refused(store, change):
    client = scramp.ScramClient(["SCRAM-SHA-256"], "alice", "alice-pw")
    server = ScramServerExchange(ScramMechanism.SCRAM_SHA_256, store)
    client.set_server_first(server.step(client.get_client_first().encode()).decode())
    final = client.get_client_final()
    nonce = final.split(",")[1][2:]
    other = {"other-server-part": nonce[:-4] + "abcd", "client-nonce-only": str(client.c_nonce),
             "extra-suffix": nonce + "x"}[change]
    with pytest.raises(AuthenticationFailed, match="nonce"):
        server.step(final.replace(f"r={nonce}", f"r={other}").encode())


@pytest.mark.parametrize("mechanism", MECHANISMS, ids=str)
def test_a_third_step_is_refused(mechanism, store):
    server, _, _, final = run(mechanism, store)
    with pytest.raises(IllegalSaslStateError, match="has ended") as info:
        server.step(final)
    assert isinstance(info.value, AuthenticationFailed) and int(info.value.code) == 34


def test_a_failed_exchange_takes_no_further_step(store):
    server = ScramServerExchange(ScramMechanism.SCRAM_SHA_256, store)
    with pytest.raises(AuthenticationFailed):
        server.step(b"garbage")
    with pytest.raises(IllegalSaslStateError):
        server.step(scramp.ScramClient(["SCRAM-SHA-256"], "alice", "alice-pw").get_client_first().encode())


@pytest.mark.parametrize("first", [
    b"", b"n", b"n,", b"n,,", b"n,,n=alice", b"n,,n=alice,", b"n,,r=abc", b"n,,n=,r=abc", b"n,,n=alice,r=",
    b"x,,n=alice,r=abc", b"n,,m=ext,n=alice,r=abc", b"n,,n=al=41ice,r=abc", b"n,,n=alice,r=abc,bad",
    b"n,,n=alice,r=abc,k=v,w", b"\xff\xfe", "n,,n=alice,r=abc".encode("utf-16"),
])
def test_truncated_or_malformed_client_first_is_refused(store, first):
    with pytest.raises(AuthenticationFailed, match="Authentication failed"):
        ScramServerExchange(ScramMechanism.SCRAM_SHA_256, store).step(first)


@pytest.mark.parametrize("cut", ["no-proof", "half", "empty", "no-channel-binding", "bad-base64-proof",
                                 "wrong-channel-binding", "not-utf8"])
def test_truncated_or_malformed_client_final_is_refused(store, cut):
    client = scramp.ScramClient(["SCRAM-SHA-512"], "alice", "alice-pw")
    server = ScramServerExchange(ScramMechanism.SCRAM_SHA_512, store)
    client.set_server_first(server.step(client.get_client_first().encode()).decode())
    final = client.get_client_final()
    bad = {
        "no-proof": final[:final.index(",p=")],
        "half": final[: len(final) // 2],
        "empty": "",
        "no-channel-binding": final[final.index(",") + 1:],
        "bad-base64-proof": final[:final.index(",p=")] + ",p=!!!!",
        "wrong-channel-binding": final.replace("c=biws", "c=eSws"),  # y,, instead of n,,
    }.get(cut, "")
    with pytest.raises(AuthenticationFailed):
        server.step(b"\xff" if cut == "not-utf8" else bad.encode())
    assert server.principal is None


def test_channel_binding_is_refused_and_y_is_accepted(store):
    with pytest.raises(AuthenticationFailed, match="channel binding is not supported"):
        ScramServerExchange(ScramMechanism.SCRAM_SHA_256, store).step(b"p=tls-unique,,n=alice,r=abc")
    # 'y': the client supports binding but thinks the server does not; scramp's client never sends
    # it, so build the messages as it would with that header.
    client = scramp.ScramClient(["SCRAM-SHA-256"], "alice", "alice-pw")
    client.gs2_header = scramp.core.Gs2Header("y", None)
    server = ScramServerExchange(ScramMechanism.SCRAM_SHA_256, store)
    first = client.get_client_first()
    assert first.startswith("y,,")
    client.set_server_first(server.step(first.encode()).decode())
    client.set_server_final(server.step(client.get_client_final().encode()).decode())
    assert server.principal == "User:alice"


def test_an_authorization_id_in_the_gs2_header_is_refused(store):
    with pytest.raises(AuthenticationFailed, match="authorization id"):
        ScramServerExchange(ScramMechanism.SCRAM_SHA_256, store).step(b"n,a=alice,n=alice,r=abc")


def _with_extensions(client, extensions: str) -> bytes:
    """The client-first a Kafka client sends with SCRAM extensions: ``,key=value`` after the nonce,
    part of the client-first-bare both sides sign."""
    first = client.get_client_first() + extensions
    client.client_first_bare += extensions
    return first.encode()


@pytest.mark.parametrize("mechanism", MECHANISMS, ids=str)
def test_unknown_extensions_are_ignored_and_signed(mechanism, store):
    client = scramp.ScramClient([mechanism.value], "alice", "alice-pw")
    server = ScramServerExchange(mechanism, store)
    client.set_server_first(server.step(_with_extensions(client, ",traceid=42,Foo=bar")).decode())
    client.set_server_final(server.step(client.get_client_final().encode()).decode())
    assert server.principal == "User:alice"
    assert server.extensions == {"traceid": "42", "Foo": "bar"}


def test_extensions_left_out_of_the_signature_fail(store):
    client = scramp.ScramClient(["SCRAM-SHA-256"], "alice", "alice-pw")
    server = ScramServerExchange(ScramMechanism.SCRAM_SHA_256, store)
    first = (client.get_client_first() + ",traceid=42").encode()  # the client signs without it
    client.set_server_first(server.step(first).decode())
    with pytest.raises(AuthenticationFailed, match=GENERIC):
        server.step(client.get_client_final().encode())


@pytest.mark.parametrize("value", ["true", "TRUE", "True"])
def test_token_authentication_is_refused(store, value):
    client = scramp.ScramClient(["SCRAM-SHA-256"], "alice", "alice-pw")
    with pytest.raises(AuthenticationFailed, match="delegation tokens are not supported"):
        ScramServerExchange(ScramMechanism.SCRAM_SHA_256, store).step(_with_extensions(client, f",tokenauth={value}"))


def test_tokenauth_false_is_an_ordinary_exchange(store):
    client = scramp.ScramClient(["SCRAM-SHA-256"], "alice", "alice-pw")
    server = ScramServerExchange(ScramMechanism.SCRAM_SHA_256, store)
    client.set_server_first(server.step(_with_extensions(client, ",tokenauth=false")).decode())
    client.set_server_final(server.step(client.get_client_final().encode()).decode())
    assert server.principal == "User:alice"


def test_scramp_compares_proofs_in_constant_time():
    """The proof check this module relies on is scramp's, with hmac.compare_digest."""
    import inspect

    assert "compare_digest(key, stored_key)" in inspect.getsource(scramp.core._check_client_key)


# -- PLAIN -------------------------------------------------------------------------------------


def plain(store, message: bytes) -> PlainServerExchange:
    exchange = PlainServerExchange(store)
    assert exchange.step(message) == b""
    return exchange


def test_plain_right_password(store):
    assert plain(store, b"\0alice\0alice-pw").principal == "User:alice"
    assert plain(store, b"alice\0alice\0alice-pw").principal == "User:alice"  # authzid = user
    assert plain(store, b"\0only256\0pw-256").principal == "User:only256"  # SCRAM-SHA-256 only
    assert plain(store, b"\0a,b=c\0odd-pw").principal == "User:a,b=c"  # no escaping in PLAIN


def test_plain_prefers_the_sha512_credential(tmp_path):
    store = CredentialStore(tmp_path)
    store.upsert("u", make_credential(ScramMechanism.SCRAM_SHA_256, "old"))
    store.upsert("u", make_credential(ScramMechanism.SCRAM_SHA_512, "new"))
    assert plain(store, b"\0u\0new").principal == "User:u"
    with pytest.raises(AuthenticationFailed):
        plain(store, b"\0u\0old")


def test_plain_wrong_password_and_unknown_user_fail_alike(store):
    messages = []
    for message in (b"\0alice\0wrong", b"\0mallory\0alice-pw"):
        exchange = PlainServerExchange(store)
        with pytest.raises(AuthenticationFailed) as info:
            exchange.step(message)
        assert exchange.principal is None
        messages.append(str(info.value))
    assert messages[0] == messages[1] == "Authentication failed: Invalid username or password"


@pytest.mark.parametrize("message, error", [
    (b"bob\0alice\0alice-pw", "authorization id that is different from username"),
    (b"alice-pw", "expected 3 tokens, got 1"),
    (b"alice\0alice-pw", "expected 3 tokens, got 2"),
    (b"\0alice\0alice-pw\0", "expected 3 tokens, got 4"),
    (b"\0\0alice-pw", "username not specified"),
    (b"\0alice\0", "password not specified"),
    (b"\0alice\0\xff", "not valid UTF-8"),
])
def test_plain_malformed_or_bad_authzid(store, message, error):
    with pytest.raises(AuthenticationFailed, match=error):
        PlainServerExchange(store).step(message)


def test_plain_is_one_step(store):
    exchange = plain(store, b"\0alice\0alice-pw")
    with pytest.raises(IllegalSaslStateError):
        exchange.step(b"\0alice\0alice-pw")


def test_exchanges_are_plain_python_callable_from_a_thread(store):
    """The server runs steps in worker threads: nothing here needs an event loop."""
    import threading

    results = []

    def work():
        server, *_ = run(ScramMechanism.SCRAM_SHA_256, store)
        results.append(server.principal)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == ["User:alice"] * 4


def test_base64_of_gs2_headers():
    assert base64.b64decode("biws") == b"n,," and base64.b64decode("eSws") == b"y,,"


@pytest.mark.parametrize("mechanism", MECHANISMS, ids=str)
def test_a_name_holding_an_escape_sequence_is_unescaped_once(mechanism, store):
    """The client sends "x=2Cy" as n=x=3D2Cy: the user is "x=2Cy", never "x,y"."""
    store.upsert("x=2Cy", make_credential(mechanism, "pw-1"))
    store.upsert("x,y", make_credential(mechanism, "pw-2"))
    server, *_ = run(mechanism, store, user="x=2Cy", password="pw-1")
    assert server.principal == "User:x=2Cy"


@pytest.mark.parametrize("mechanism", MECHANISMS, ids=str)
def test_the_server_first_message_of_an_unknown_user_looks_like_a_real_one(mechanism, store):
    """Salt length and iterations of a user that does not exist are those of one that does."""
    def salt_and_iterations(user):
        client = scramp.ScramClient([mechanism.value], user, "whatever")
        first = ScramServerExchange(mechanism, store).step(client.get_client_first().encode()).decode()
        fields = dict(f.split("=", 1) for f in first.split(","))
        return len(base64.b64decode(fields["s"])), fields["i"]

    store.upsert("real", make_credential(mechanism, "pw"))
    assert salt_and_iterations("real") == salt_and_iterations("nobody-by-that-name")


def _exchange(session, now: float, user: str = "alice", password: str = "alice-pw") -> int:
    """A SCRAM-SHA-256 exchange after its handshake, through a SaslServerSession: its session
    lifetime (ms)."""
    client = scramp.ScramClient(["SCRAM-SHA-256"], user, password)
    client.set_server_first(session.authenticate(client.get_client_first().encode()).decode())
    client.set_server_final(session.authenticate(client.get_client_final().encode()).decode())
    assert session.authenticated
    return session.begin_session(now)


def _login(session, now: float, user: str = "alice", password: str = "alice-pw") -> int:
    assert session.handshake("SCRAM-SHA-256", now) == (0, None)
    return _exchange(session, now, user, password)


def test_a_session_lifetime_ends_the_session_unless_renewed_at_most_once_a_second(store):
    from triolog.broker.security.sasl import SaslServerSession
    from triolog.protocol.errors import ErrorCode

    session = SaslServerSession(("SCRAM-SHA-256", "SCRAM-SHA-512"), store, max_reauth_ms=1500)
    assert _login(session, now=100.0) == 1500
    assert not session.expired(101.5) and session.expired(101.6)
    assert session.handshake("SCRAM-SHA-256", 101.6) == (ErrorCode.NONE, None)  # renewing may begin after the end
    assert not session.expired(101.7)  # and its exchange is served, however late
    assert _exchange(session, now=101.8) == 1500
    assert not session.expired(103.2) and session.expired(103.4)
    code, message = session.handshake("SCRAM-SHA-256", 102.5)  # under a second since the last began
    assert code == ErrorCode.ILLEGAL_SASL_STATE and session.authenticated and session.principal == "User:alice"
    assert _login(session, now=102.7) == 1500


def test_renewing_as_another_user_or_with_another_mechanism_fails(store):
    from triolog.broker.security.sasl import SaslServerSession

    session = SaslServerSession(("SCRAM-SHA-256", "SCRAM-SHA-512"), store, max_reauth_ms=1000)
    _login(session, now=0.0)
    with pytest.raises(AuthenticationFailed, match="Cannot change principals during re-authentication "
                                                   "from User.alice: User.only256"):
        _login(session, now=5.0, user="only256", password="pw-256")
    assert not session.authenticated

    session = SaslServerSession(("SCRAM-SHA-256", "SCRAM-SHA-512"), store, max_reauth_ms=1000)
    _login(session, now=0.0)
    assert session.handshake("SCRAM-SHA-512", 5.0)[0] == 0
    client = scramp.ScramClient(["SCRAM-SHA-512"], "alice", "alice-pw")
    with pytest.raises(AuthenticationFailed, match="not supported for re-authentication of mechanism 'SCRAM-SHA-256'"):
        session.authenticate(client.get_client_first().encode())


def test_without_a_lifetime_sessions_never_end_nor_renew(store):
    from triolog.broker.security.sasl import SaslServerSession

    session = SaslServerSession(("SCRAM-SHA-256",), store)
    assert _login(session, now=0.0) == 0
    assert not session.expired(1e9)
    assert session.handshake("SCRAM-SHA-256", 10.0)[0] != 0 and session.authenticated


def test_clients_renew_at_85_to_95_percent_of_the_lifetime():
    from triolog.client.security import renewal_time

    assert renewal_time(10.0, 0) is None
    times = [renewal_time(10.0, 2000) for _ in range(200)]
    assert all(11.7 <= t <= 11.9 for t in times) and max(times) - min(times) > 0.1
