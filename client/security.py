"""The client's security settings (TLS and SASL), parsed and checked once, and the two steps every
new connection takes with them: the TLS handshake and the SASL exchange.

Settings use Kafka's names in kafka-python's spelling (keyword arguments of Producer, Consumer,
AdminClient and their trio twins)::

    Producer("broker:9093", security_protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-512",
             sasl_username="alice", sasl_password="secret", ssl_cafile="ca.pem")

``security_protocol``: PLAINTEXT (default), SSL, SASL_PLAINTEXT or SASL_SSL. With SASL,
``sasl_mechanism`` is SCRAM-SHA-256 (default), SCRAM-SHA-512 or PLAIN (PLAIN only over TLS, as the
broker offers it), and ``sasl_username``/``sasl_password`` are required (kafka-python's
``sasl_plain_username``/``sasl_plain_password`` are accepted too). With TLS, ``ssl_cafile`` (PEM)
is the CA the broker's certificate is checked against (the system's CAs when unset),
``ssl_certfile``/``ssl_keyfile``/``ssl_password`` a client certificate for mutual TLS, and
``ssl_check_hostname`` (default True) checks that the certificate names the host connected to.

The same settings come from a Java-properties file as Kafka's tools take it (``--command-config``):
:func:`load_command_config` reads ``security.protocol``, ``sasl.mechanism``, ``sasl.username``,
``sasl.password``, ``sasl.jaas.config`` (ScramLoginModule / PlainLoginModule with username and
password), ``ssl.truststore.location`` (a PEM file) or ``ssl.cafile``, ``ssl.keystore.location``
(PEM key and certificate chain) or ``ssl.certfile``/``ssl.keyfile``, ``ssl.key.password`` and
``ssl.endpoint.identification.algorithm`` (empty: no hostname check).

SASL runs on every (re)connection, after TLS and before the first request
(:func:`sasl_exchange`, a sans-IO generator both connection kinds drive). SCRAM's server-final
signature is verified (scramp's ``set_server_final``), so a broker that does not know the
password's key cannot pass. When the broker gives sessions a lifetime (KIP-368,
``connections.max.reauth.ms``), a connection takes no new request after 85-95% of it
(:func:`renewal_time`): the next one goes on a new connection, which logs in again, while the
old one delivers its last responses and closes. A refusal raises :class:`SaslAuthenticationFailedError` (or the typed
error of the broker's code) with the broker's message; a failed TLS handshake raises
:class:`SslHandshakeError`. Neither is retried.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import random
import re
import ssl
from collections.abc import Generator, Mapping
from dataclasses import dataclass

from triolog.protocol import messages as m
from triolog.protocol.frames import ProtocolError
from triolog.protocol.properties import parse_properties

from .errors import (
    InvalidResponseError,
    RequestNotSentError,
    SaslAuthenticationFailedError,
    SecurityConfigError,
    SslHandshakeError,
    TriologClientError,
    error_for,
)

__all__ = [
    "MECHANISMS",
    "PLAINTEXT",
    "PROPERTY_NAMES",
    "PROTOCOLS",
    "SECURITY_KEYS",
    "SecurityConfig",
    "load_command_config",
    "login_error",
    "parse_properties",
    "renewal_time",
    "sasl_exchange",
    "security_from_properties",
    "split_security",
    "tls_error",
]

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN")


@dataclass(frozen=True)
class SecurityConfig:
    """How a client connects: checked when built (:class:`SecurityConfigError` for a bad value or
    combination); immutable, hashable and picklable (Spark ships it to executors)."""

    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: str | None = dataclasses.field(default=None, repr=False)
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    ssl_password: str | None = dataclasses.field(default=None, repr=False)
    ssl_check_hostname: bool = True

    def __post_init__(self) -> None:
        protocol = str(self.security_protocol or "PLAINTEXT").strip().upper()
        if protocol not in PROTOCOLS:
            raise SecurityConfigError(
                f"security_protocol must be one of {', '.join(PROTOCOLS)}, got {self.security_protocol!r}"
            )
        object.__setattr__(self, "security_protocol", protocol)
        if not isinstance(self.ssl_check_hostname, bool):
            raise SecurityConfigError(f"ssl_check_hostname must be True or False, got {self.ssl_check_hostname!r}")
        for name in ("sasl_username", "sasl_password", "ssl_cafile", "ssl_certfile", "ssl_keyfile", "ssl_password"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                if isinstance(value, os.PathLike) and name.endswith("file"):
                    object.__setattr__(self, name, os.fspath(value))
                else:
                    raise SecurityConfigError(f"{name} must be a string, got {type(value).__name__}")
        if self.uses_sasl:
            mechanism = str(self.sasl_mechanism or "SCRAM-SHA-256").strip().upper()
            if mechanism not in MECHANISMS:
                raise SecurityConfigError(
                    f"sasl_mechanism must be one of {', '.join(MECHANISMS)}, got {self.sasl_mechanism!r}"
                )
            object.__setattr__(self, "sasl_mechanism", mechanism)
            if not self.sasl_username or self.sasl_password is None:
                raise SecurityConfigError(f"security_protocol={protocol} needs sasl_username and sasl_password")
            if mechanism == "PLAIN" and not self.uses_tls:
                raise SecurityConfigError(
                    "sasl_mechanism=PLAIN sends the password as it is: it needs security_protocol=SASL_SSL"
                )
        else:
            given = [n for n in ("sasl_mechanism", "sasl_username", "sasl_password") if getattr(self, n) is not None]
            if given:
                raise SecurityConfigError(
                    f"{', '.join(given)} given but security_protocol={protocol} has no SASL "
                    f"(use SASL_PLAINTEXT or SASL_SSL)"
                )
        if self.uses_tls:
            for name in ("ssl_cafile", "ssl_certfile", "ssl_keyfile"):
                path = getattr(self, name)
                if path is not None and not os.path.isfile(path):
                    raise SecurityConfigError(f"{name}: no such file: {path}")
            if (self.ssl_keyfile or self.ssl_password) and not self.ssl_certfile:
                raise SecurityConfigError("ssl_keyfile and ssl_password go with ssl_certfile (the client certificate)")
        else:
            given = [n for n in ("ssl_cafile", "ssl_certfile", "ssl_keyfile", "ssl_password") if getattr(self, n)]
            if given:
                raise SecurityConfigError(
                    f"{', '.join(given)} given but security_protocol={protocol} has no TLS (use SSL or SASL_SSL)"
                )

    @property
    def uses_tls(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.security_protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    @property
    def is_plaintext(self) -> bool:
        return self.security_protocol == "PLAINTEXT"

    def ssl_context(self) -> ssl.SSLContext:
        """The client's TLS context (built once per distinct setting, then shared)."""
        return _ssl_context(
            self.ssl_cafile, self.ssl_certfile, self.ssl_keyfile, self.ssl_password, self.ssl_check_hostname
        )

    @classmethod
    def from_kwargs(cls, **settings) -> SecurityConfig:
        """From keyword arguments, kafka-python's aliases included; a ``security`` argument (a
        SecurityConfig) is taken as it is, and cannot be mixed with the others."""
        given = settings.pop("security", None)
        if given is not None:
            if not isinstance(given, SecurityConfig):
                raise SecurityConfigError(f"security must be a SecurityConfig, got {type(given).__name__}")
            if settings:
                raise SecurityConfigError(f"security= given with {', '.join(sorted(settings))}: give one or the other")
            return given
        for alias, name in _ALIASES.items():
            if alias in settings:
                value = settings.pop(alias)
                if settings.get(name) not in (None, value):
                    raise SecurityConfigError(f"{alias} and {name} differ: give one")
                settings[name] = value
        return cls(**settings)


PLAINTEXT = SecurityConfig()

#: kafka-python's names for the same settings.
_ALIASES = {"sasl_plain_username": "sasl_username", "sasl_plain_password": "sasl_password"}
#: Every keyword argument the clients take for security.
SECURITY_KEYS = frozenset({f.name for f in dataclasses.fields(SecurityConfig)} | set(_ALIASES) | {"security"})


def split_security(settings: dict) -> tuple[SecurityConfig, dict]:
    """(the SecurityConfig, the other settings) of a client's keyword arguments."""
    security = {k: v for k, v in settings.items() if k in SECURITY_KEYS}
    rest = {k: v for k, v in settings.items() if k not in SECURITY_KEYS}
    return (SecurityConfig.from_kwargs(**security) if security else PLAINTEXT), rest


@functools.lru_cache(maxsize=64)
def _ssl_context(cafile, certfile, keyfile, password, check_hostname) -> ssl.SSLContext:
    try:
        context = ssl.create_default_context(cafile=cafile)
        context.check_hostname = check_hostname
        if certfile:
            context.load_cert_chain(certfile, keyfile, password)
    except (ssl.SSLError, OSError) as exc:
        raise SecurityConfigError(
            f"cannot load the TLS files (ssl_cafile={cafile}, ssl_certfile={certfile}, ssl_keyfile={keyfile}): {exc}"
        ) from None
    return context


def tls_error(address: str, exc: BaseException) -> SslHandshakeError:
    """The client error for a TLS handshake with ``address`` that failed with ``exc``."""
    reason = getattr(exc, "verify_message", None) or getattr(exc, "reason", None) or str(exc) or type(exc).__name__
    hint = ""
    if isinstance(exc, ssl.SSLCertVerificationError):
        hint = " (is ssl_cafile the CA that signed the broker's certificate, and does it name this host?)"
    elif "WRONG_VERSION_NUMBER" in str(exc) or "wrong version number" in str(exc):
        hint = " (is this a TLS listener? security_protocol must match the broker's listener)"
    return SslHandshakeError(f"TLS handshake with {address} failed: {reason}{hint}")


def login_error(step: str, address: str, exc: BaseException) -> TriologClientError:
    """The client error for ``exc``, raised while a new connection to ``address`` took ``step``
    ("TLS handshake" or "SASL authentication"), the same for the blocking and the trio connection:
    a TLS failure (trio's BrokenResourceError carries it as its cause) is SslHandshakeError, not
    retried; a frame that does not decode, InvalidResponseError; any other failure of the
    connection, RequestNotSentError (no request was sent on it yet: retriable)."""
    tls = exc if isinstance(exc, ssl.SSLError) else exc.__cause__
    if isinstance(tls, ssl.SSLError):
        return tls_error(address, tls)
    if isinstance(exc, ProtocolError):
        return InvalidResponseError(f"{address}: {exc}")
    detail = exc.__cause__ or exc
    return RequestNotSentError(f"{step} with {address} failed: {str(detail) or repr(detail)}")


# -- the SASL exchange (sans-IO) -----------------------------------------------------------------


def sasl_exchange(security: SecurityConfig, address: str) -> Generator[m.Request, dict, int]:
    """The requests of one SASL authentication: send each yielded request, send back its
    response dict; returns the session's lifetime in ms when authenticated (0: it never
    expires; see :func:`renewal_time`), raises the typed error otherwise."""
    from scramp import ScramClient, ScramException

    mechanism, user, password = security.sasl_mechanism, security.sasl_username, security.sasl_password
    # (a SASL protocol's config has all three: SecurityConfig refuses to be built otherwise)
    assert mechanism is not None and user is not None and password is not None
    doc = yield m.SaslHandshakeRequest(id=0, mechanism=mechanism)
    if doc["error_code"]:
        offered = ", ".join(doc.get("mechanisms") or ()) or "none"
        raise error_for(
            doc["error_code"],
            f"{address} refused SASL mechanism {mechanism} "
            f"({doc.get('error_message') or 'no message'}; it offers: {offered})",
        )
    if mechanism == "PLAIN":
        doc = yield m.SaslAuthenticateRequest(id=0, auth_bytes=b"\0" + user.encode() + b"\0" + password.encode())
        _check_sasl(doc, address, user)
        return int(doc.get("session_lifetime_ms") or 0)
    scram = ScramClient([mechanism], user, password)
    doc = yield m.SaslAuthenticateRequest(id=0, auth_bytes=scram.get_client_first().encode())
    _check_sasl(doc, address, user)
    try:
        scram.set_server_first(bytes(doc["auth_bytes"]).decode())
        final = scram.get_client_final()
    except (ScramException, UnicodeDecodeError) as exc:
        raise SaslAuthenticationFailedError(f"{address}: unacceptable SCRAM server-first message: {exc}") from None
    doc = yield m.SaslAuthenticateRequest(id=0, auth_bytes=final.encode())
    _check_sasl(doc, address, user)
    try:
        scram.set_server_final(bytes(doc["auth_bytes"]).decode())
    except (ScramException, UnicodeDecodeError) as exc:
        raise SaslAuthenticationFailedError(
            f"{address} did not prove it knows User:{user}'s credential (SCRAM server signature: {exc})"
        ) from None
    return int(doc.get("session_lifetime_ms") or 0)


def renewal_time(authenticated_at: float, session_lifetime_ms: int) -> float | None:
    """When a connection whose SASL session lasts ``session_lifetime_ms`` (KIP-368,
    connections.max.reauth.ms) stops taking new requests, so that a new connection logs in
    again before the broker would close this one: at 85-95% of the lifetime, at random, as
    Kafka's clients re-authenticate; None for a session that never expires."""
    if session_lifetime_ms <= 0:
        return None
    return authenticated_at + random.uniform(0.85, 0.95) * session_lifetime_ms / 1000


def _check_sasl(doc: dict, address: str, user: str) -> None:
    if doc["error_code"]:
        raise error_for(
            doc["error_code"],
            f"authentication of User:{user} with {address} failed: {doc.get('error_message') or 'no message'}",
        )


# -- Kafka's client properties (--command-config) -----------------------------------------------

_JAAS = re.compile(r"""(\w+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|'([^']*)'|([^\s;]+))""")


#: Kafka client property -> SecurityConfig field.
_PROPERTIES = {
    "security.protocol": "security_protocol",
    "sasl.mechanism": "sasl_mechanism",
    "sasl.username": "sasl_username",
    "sasl.password": "sasl_password",
    "ssl.truststore.location": "ssl_cafile",
    "ssl.cafile": "ssl_cafile",
    "ssl.ca.location": "ssl_cafile",
    "ssl.keystore.location": "ssl_certfile",
    "ssl.certfile": "ssl_certfile",
    "ssl.certificate.location": "ssl_certfile",
    "ssl.keyfile": "ssl_keyfile",
    "ssl.key.location": "ssl_keyfile",
    "ssl.key.password": "ssl_password",
    "ssl.keystore.password": "ssl_password",
    "ssl.password": "ssl_password",
}
#: Every property name :func:`security_from_properties` reads.
PROPERTY_NAMES = frozenset(_PROPERTIES) | {
    "sasl.jaas.config",
    "ssl.endpoint.identification.algorithm",
    "ssl.check.hostname",
}


def security_from_properties(properties: Mapping[str, str], *, prefix: str = "", source: str = "") -> SecurityConfig:
    """A SecurityConfig from Kafka's client property names (``prefix`` stripped first, e.g.
    ``"triolog."`` for Spark's options); properties of other names are not looked at.
    ``source`` names where they came from, in errors."""
    where = f" ({source})" if source else ""
    settings: dict = {}
    jaas_user = jaas_password = None
    jaas_plain = False
    for raw_key, value in properties.items():
        key = raw_key.lower()
        if prefix:
            if not key.startswith(prefix):
                continue
            key = key[len(prefix) :]
        value = value.strip() if isinstance(value, str) else value
        if key in _PROPERTIES:
            name = _PROPERTIES[key]
            if settings.get(name) not in (None, value):
                raise SecurityConfigError(f"{prefix}{key}{where}: conflicts with another property setting {name}")
            settings[name] = value or None
        elif key == "sasl.jaas.config":
            jaas_user, jaas_password = _parse_jaas(value, f"{prefix}{key}{where}")
            if "PlainLoginModule" in value:
                jaas_plain = True
        elif key == "ssl.endpoint.identification.algorithm":
            settings["ssl_check_hostname"] = bool(value) and value.lower() != "none"
        elif key == "ssl.check.hostname":
            if value.lower() not in ("true", "false"):
                raise SecurityConfigError(f"{prefix}{key}{where}: expected true or false, got {value!r}")
            settings["ssl_check_hostname"] = value.lower() == "true"
    if jaas_user is not None:
        if settings.get("sasl_username") not in (None, jaas_user):
            raise SecurityConfigError(f"sasl.jaas.config{where}: its username differs from sasl.username")
        settings["sasl_username"] = jaas_user
    if jaas_password is not None:
        settings.setdefault("sasl_password", jaas_password)
    if jaas_plain:  # Kafka's PlainLoginModule is the PLAIN mechanism's
        settings.setdefault("sasl_mechanism", "PLAIN")
    try:
        return SecurityConfig(**settings)
    except SecurityConfigError as exc:
        raise SecurityConfigError(f"{exc.error_message}{where}") from None


def _parse_jaas(value: str, name: str) -> tuple[str | None, str | None]:
    """(username, password) of ``org.apache.kafka.common.security.scram.ScramLoginModule required
    username="u" password="p";`` (or PlainLoginModule)."""
    if "LoginModule" not in value:
        raise SecurityConfigError(
            f'{name}: expected \'<LoginModule class> required username="..." password="...";\', got something else'
        )
    if not any(module in value for module in ("ScramLoginModule", "PlainLoginModule")):
        raise SecurityConfigError(f"{name}: only ScramLoginModule and PlainLoginModule are supported")
    options = {}
    for match in _JAAS.finditer(value.split("required", 1)[-1]):
        quoted = match.group(2)
        options[match.group(1)] = (
            re.sub(r"\\(.)", r"\1", quoted)
            if quoted is not None
            else match.group(3)
            if match.group(3) is not None
            else match.group(4)
        )
    return options.get("username"), options.get("password")


def load_command_config(path: str | os.PathLike) -> SecurityConfig:
    """The security settings of a Kafka client properties file (Kafka's tools' ``--command-config``).
    Relative file names in it are taken relative to the current directory, as Kafka does."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except OSError as exc:
        raise SecurityConfigError(f"cannot read --command-config file {path}: {exc.strerror or exc}") from None
    try:
        properties = parse_properties(text)
    except ValueError as exc:  # a malformed \uXXXX escape, which Kafka's tools refuse too
        raise SecurityConfigError(f"--command-config file {path}: {exc}") from None
    return security_from_properties(properties, source=str(path))
