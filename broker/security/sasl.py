"""One connection's SASL authentication on a SASL_PLAINTEXT or SASL_SSL listener, sans I/O.

Kafka's SaslServerAuthenticator, as states: a client may ask ApiVersions, must then name its
mechanism (SaslHandshake v1) and complete that mechanism's exchange (SaslAuthenticate, one
message at a time) before any other request; any other order is ILLEGAL_SASL_STATE. The
connection feeds the requests in and closes after a refusal. ``authenticate`` does the
mechanism's CPU work (PBKDF2 for PLAIN): the server runs it in a worker thread.
"""

from __future__ import annotations

import enum

from triolog.protocol.errors import ErrorCode

from .scram import AuthenticationFailed, CredentialStore, IllegalSaslStateError, PlainServerExchange, ScramServerExchange

__all__ = ["PRE_AUTHENTICATION_APIS", "SaslServerSession", "offered_mechanisms"]

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


class SaslServerSession:
    def __init__(self, mechanisms: tuple[str, ...], store: CredentialStore):
        self.mechanisms = mechanisms
        self.store = store
        self._state = _State.HANDSHAKE
        self._exchange: ScramServerExchange | PlainServerExchange | None = None
        #: The mechanism the client chose (for logs and metrics), once it has.
        self.mechanism: str | None = None
        #: ``User:<name>`` once authenticated.
        self.principal: str | None = None

    @property
    def authenticated(self) -> bool:
        return self._state is _State.COMPLETE

    def handshake(self, mechanism: str) -> tuple[int, str | None]:
        """(error code, message): NONE if ``mechanism`` is offered, UNSUPPORTED_SASL_MECHANISM if
        not (the connection then closes), ILLEGAL_SASL_STATE out of order."""
        if self._state is not _State.HANDSHAKE:
            return ErrorCode.ILLEGAL_SASL_STATE, (
                f"unexpected sasl_handshake: the connection is in SASL state {self._state.value} "
                f"(re-authentication is not supported)")
        if mechanism not in self.mechanisms:
            self._state = _State.FAILED
            return ErrorCode.UNSUPPORTED_SASL_MECHANISM, (
                f"unsupported SASL mechanism {mechanism}: this listener offers {', '.join(self.mechanisms)}")
        self.mechanism = mechanism
        self._exchange = (PlainServerExchange(self.store) if mechanism == "PLAIN"
                          else ScramServerExchange(mechanism, self.store))
        self._state = _State.AUTHENTICATE
        return ErrorCode.NONE, None

    def authenticate(self, auth_bytes: bytes) -> bytes:
        """The server's answer to one client message; AuthenticationFailed (with the message the
        client is told) ends the session, IllegalSaslStateError if no exchange is under way."""
        if self._state is not _State.AUTHENTICATE or self._exchange is None:
            raise IllegalSaslStateError(
                "unexpected sasl_authenticate: " + ("send sasl_handshake first" if self._state is _State.HANDSHAKE
                                                    else f"the connection is in SASL state {self._state.value}"))
        try:
            answer = self._exchange.step(bytes(auth_bytes))
        except AuthenticationFailed:
            self._state = _State.FAILED
            raise
        if self._exchange.complete:
            self.principal = self._exchange.principal
            self._state = _State.COMPLETE
        return answer
