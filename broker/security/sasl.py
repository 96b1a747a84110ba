"""One connection's SASL authentication on a SASL_PLAINTEXT or SASL_SSL listener, sans I/O.

Kafka's SaslServerAuthenticator, as states: a client may ask ApiVersions, must then name its
mechanism (SaslHandshake v1) and complete that mechanism's exchange (SaslAuthenticate, one
message at a time) before any other request; any other order is ILLEGAL_SASL_STATE. The
connection feeds the requests in and closes after a refusal. ``authenticate`` does the
mechanism's CPU work (PBKDF2 for PLAIN): the server runs it in a worker thread.

With ``connections.max.reauth.ms`` (KIP-368) a session lasts that long: the client must
authenticate again on the same connection (a new SaslHandshake, then the exchange) before it
ends, as the same principal with the same mechanism, or the connection closes at its next
request. Re-authenticating is how a deleted user's or a changed password's connections end.
"""

from __future__ import annotations

import enum

from triolog.protocol.errors import ErrorCode

from .scram import (
    AuthenticationFailed,
    CredentialStore,
    IllegalSaslStateError,
    PlainServerExchange,
    ScramServerExchange,
)

__all__ = ["MIN_REAUTH_INTERVAL_S", "PRE_AUTHENTICATION_APIS", "SaslServerSession", "offered_mechanisms"]

#: What a client may ask before it has authenticated (msgpack API names).
PRE_AUTHENTICATION_APIS = frozenset({"api_versions", "sasl_handshake", "sasl_authenticate"})


def offered_mechanisms(enabled: tuple[str, ...], tls: bool) -> tuple[str, ...]:
    """The mechanisms a listener offers: PLAIN, which sends the password itself, over TLS only."""
    return tuple(name for name in enabled if tls or name != "PLAIN")


class _State(enum.Enum):
    HANDSHAKE = "handshake"
    AUTHENTICATE = "authenticate"
    COMPLETE = "complete"
    FAILED = "failed"


#: Kafka's least time between two re-authentications of one connection (KafkaChannel's
#: MIN_REAUTH_INTERVAL_ONE_SECOND_NANOS): a handshake sooner is an ordinary, refused one.
MIN_REAUTH_INTERVAL_S = 1.0


class SaslServerSession:
    def __init__(self, mechanisms: tuple[str, ...], store: CredentialStore, max_reauth_ms: int = 0):
        self.mechanisms = mechanisms
        self.store = store
        #: connections.max.reauth.ms: a session's lifetime; 0, sessions never expire.
        self.max_reauth_ms = max_reauth_ms
        self._state = _State.HANDSHAKE
        self._exchange: ScramServerExchange | PlainServerExchange | None = None
        #: The mechanism the client chose (for logs and metrics), once it has.
        self.mechanism: str | None = None
        #: ``User:<name>`` once authenticated; during a re-authentication, still the session's.
        self.principal: str | None = None
        #: When the session ends (the caller's clock, seconds); None: never.
        self.expires_at: float | None = None
        #: While re-authenticating, a refusal the exchange's first message gets (Kafka answers
        #: the handshake, then fails the exchange: a changed mechanism).
        self._refusal: str | None = None
        self._reauth_started: float | None = None

    @property
    def authenticated(self) -> bool:
        return self._state is _State.COMPLETE

    @property
    def reauthenticating(self) -> bool:
        """A re-authentication is under way (the session's principal stays until it completes)."""
        return self._reauth_started is not None and self._state is _State.AUTHENTICATE

    def expired(self, now: float) -> bool:
        """Past the session's end, and not re-authenticating (that exchange may finish late)."""
        return self._state is _State.COMPLETE and self.expires_at is not None and now > self.expires_at

    def may_reauthenticate(self, now: float) -> bool:
        """Whether a handshake now begins a re-authentication (KafkaChannel's
        maybeBeginServerReauthentication): sessions expire, and the last one began over a second
        ago. Otherwise the handshake is refused, and an expired session's connection closes."""
        return (
            self._state is _State.COMPLETE
            and self.expires_at is not None
            and (self._reauth_started is None or now - self._reauth_started >= MIN_REAUTH_INTERVAL_S)
        )

    def handshake(self, mechanism: str, now: float = 0.0) -> tuple[int, str | None]:
        """(error code, message): NONE if ``mechanism`` is offered, UNSUPPORTED_SASL_MECHANISM if
        not (the connection then closes), ILLEGAL_SASL_STATE out of order (an authenticated
        connection that may not re-authenticate now stays open, as Kafka's)."""
        reauthenticating = self.may_reauthenticate(now)
        if self._state is not _State.HANDSHAKE and not reauthenticating:
            why = (
                "re-authentication needs connections.max.reauth.ms, and at most one a second"
                if self._state is _State.COMPLETE
                else "send sasl_authenticate"
            )
            return ErrorCode.ILLEGAL_SASL_STATE, (
                f"unexpected sasl_handshake: the connection is in SASL state {self._state.value} ({why})"
            )
        if mechanism not in self.mechanisms:
            self._state = _State.FAILED
            return ErrorCode.UNSUPPORTED_SASL_MECHANISM, (
                f"unsupported SASL mechanism {mechanism}: this listener offers {', '.join(self.mechanisms)}"
            )
        if reauthenticating:
            self._reauth_started = now
            if mechanism != self.mechanism:
                self._refusal = (
                    f"SASL mechanism '{mechanism}' requested by client is not supported for "
                    f"re-authentication of mechanism '{self.mechanism}'"
                )
        else:
            self.mechanism = mechanism
        self._exchange = (
            PlainServerExchange(self.store) if mechanism == "PLAIN" else ScramServerExchange(mechanism, self.store)
        )
        self._state = _State.AUTHENTICATE
        return ErrorCode.NONE, None

    def begin_session(self, now: float) -> int:
        """After the exchange completed: the session's lifetime in ms, 0 if it never expires
        (the sasl_authenticate answer's session_lifetime_ms)."""
        if self.max_reauth_ms <= 0:
            return 0
        self.expires_at = now + self.max_reauth_ms / 1000
        return self.max_reauth_ms

    def authenticate(self, auth_bytes: bytes) -> bytes:
        """The server's answer to one client message; AuthenticationFailed (with the message the
        client is told) ends the session, IllegalSaslStateError if no exchange is under way."""
        if self._state is not _State.AUTHENTICATE or self._exchange is None:
            raise IllegalSaslStateError(
                "unexpected sasl_authenticate: "
                + (
                    "send sasl_handshake first"
                    if self._state is _State.HANDSHAKE
                    else f"the connection is in SASL state {self._state.value}"
                )
            )
        try:
            if self._refusal is not None:
                raise AuthenticationFailed(self._refusal)
            answer = self._exchange.step(bytes(auth_bytes))
            old, new = self.principal, self._exchange.principal
            if self._exchange.complete and self._reauth_started is not None and new != old:
                # re-authenticating: the session has its principal; complete: the exchange has its own
                assert old is not None and new is not None
                raise AuthenticationFailed(
                    f"Cannot change principals during re-authentication from "
                    f"{old.replace(':', '.', 1)}: {new.replace(':', '.', 1)}"
                )
        except AuthenticationFailed:
            self._state = _State.FAILED
            raise
        if self._exchange.complete:
            self.principal = self._exchange.principal
            self._state = _State.COMPLETE
        return answer
