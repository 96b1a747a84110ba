"""SASL credentials and server exchanges: SCRAM-SHA-256, SCRAM-SHA-512 and PLAIN over one store.

The store (``triolog-users.json`` at the root of the first log directory, mode 0600) holds, per
user and mechanism, what RFC 5802 lets a server keep: salt, StoredKey, ServerKey and the
iteration count, never a password. SCRAM itself (message syntax, proofs, signatures) is the
``scramp`` library's; this module adds Kafka's rules around it:

* iteration counts between 4096 and 16384 (Kafka's bounds for both mechanisms);
* the client-final nonce must be exactly client nonce + server nonce (CVE-2024-56128: Kafka's
  server once accepted a client-final carrying another nonce);
* Kafka's client-first extensions (``,key=value`` after the nonce, part of the signed message):
  ``tokenauth=true`` is refused (no delegation tokens here), other keys are ignored as Kafka does;
* no channel binding (a ``p=`` GS2 flag is refused; ``n`` and ``y`` are accepted) and no
  authorization id in the GS2 header (scramp allows none; Kafka's clients send none);
* an unknown user runs the same exchange as a known one against a dummy credential and fails at
  the proof with the same message as a wrong password, so neither the answers nor their timing
  tell whether the user exists.

PLAIN (``authzid NUL user NUL password``) is checked against the same SCRAM credential: the
password is salted with the credential's salt and iterations (PBKDF2, SCRAM-SHA-512's if the user
has one, else SCRAM-SHA-256's) and the StoredKey derived from it compared in constant time.

Everything here is synchronous and free of trio: a PBKDF2 of 4096 iterations costs milliseconds of
CPU, so the server runs :meth:`step` (and :func:`make_credential`) in a worker thread.
"""

from __future__ import annotations

import base64
import enum
import hashlib
import hmac as _hmac
import os
import re
import secrets
import threading
from dataclasses import dataclass
from pathlib import Path

import scramp
from scramp.utils import ScramException, h, hi, hmac, saslprep

from triolog.broker.storage.fs import OS_FS, FileSystem
from triolog.protocol.errors import ErrorCode, TriologError

from .files import CorruptSecurityFileError, load_json, save_private_json

__all__ = [
    "MAX_ITERATIONS",
    "MIN_ITERATIONS",
    "USERS_FILE",
    "AuthenticationFailed",
    "CredentialNotFoundError",
    "CredentialStore",
    "IllegalSaslStateError",
    "PlainServerExchange",
    "ScramCredential",
    "ScramMechanism",
    "ScramServerExchange",
    "UnacceptableCredentialError",
    "credential_from_salted_password",
    "make_credential",
]

USERS_FILE = "triolog-users.json"
#: Kafka's bounds on a SCRAM credential's iteration count (ScramMechanism.minIterations/maxIterations).
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
#: scramp refuses shorter salts in an exchange, so a credential is refused with one up front.
MIN_SALT_BYTES = 12


class ScramMechanism(str, enum.Enum):
    """The SCRAM mechanisms, by their SASL names; ``code`` is Kafka's wire number in
    DescribeUserScramCredentials/AlterUserScramCredentials (0 is UNKNOWN)."""

    SCRAM_SHA_256 = "SCRAM-SHA-256"
    SCRAM_SHA_512 = "SCRAM-SHA-512"

    @property
    def code(self) -> int:
        return _CODES[self]

    @property
    def hf(self):
        return scramp.ScramMechanism(self.value).hf

    @classmethod
    def parse(cls, value: str | int | ScramMechanism) -> ScramMechanism:
        if isinstance(value, cls):
            return value
        if isinstance(value, int) and not isinstance(value, bool):
            for mechanism, code in _CODES.items():
                if code == value:
                    return mechanism
        if isinstance(value, str):
            for mechanism in cls:
                if value.upper().replace("_", "-") == mechanism.value:
                    return mechanism
        raise UnacceptableCredentialError(
            f"unknown SCRAM mechanism {value!r}: one of {', '.join(m.value for m in cls)}"
        )

    def __str__(self) -> str:
        return self.value


_CODES = {ScramMechanism.SCRAM_SHA_256: 1, ScramMechanism.SCRAM_SHA_512: 2}


class UnacceptableCredentialError(TriologError, ValueError):
    """A credential Kafka's AlterUserScramCredentials would refuse (UNACCEPTABLE_CREDENTIAL)."""

    code = ErrorCode.UNACCEPTABLE_CREDENTIAL


class CredentialNotFoundError(TriologError, KeyError):
    """Deleting a credential the user does not have (RESOURCE_NOT_FOUND, as Kafka)."""

    code = ErrorCode.RESOURCE_NOT_FOUND

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class AuthenticationFailed(TriologError):
    """A SASL exchange refused; the message is safe to send to the client."""

    code = ErrorCode.SASL_AUTHENTICATION_FAILED


class IllegalSaslStateError(AuthenticationFailed):
    """A step after the exchange ended (completed or failed)."""

    code = ErrorCode.ILLEGAL_SASL_STATE


@dataclass(frozen=True)
class ScramCredential:
    mechanism: ScramMechanism
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "mechanism", ScramMechanism.parse(self.mechanism))
        self.validate()

    def validate(self) -> None:
        if isinstance(self.iterations, bool) or not isinstance(self.iterations, int):
            raise UnacceptableCredentialError(f"iterations must be an integer, got {self.iterations!r}")
        if not MIN_ITERATIONS <= self.iterations <= MAX_ITERATIONS:
            raise UnacceptableCredentialError(
                f"Iterations {self.iterations} is {'less' if self.iterations < MIN_ITERATIONS else 'more'} "
                f"than the {'minimum' if self.iterations < MIN_ITERATIONS else 'maximum'} "
                f"{MIN_ITERATIONS if self.iterations < MIN_ITERATIONS else MAX_ITERATIONS} for {self.mechanism}"
            )
        for key in ("salt", "stored_key", "server_key"):
            if not isinstance(getattr(self, key), bytes):
                raise UnacceptableCredentialError(f"{key} must be bytes")
        if len(self.salt) < MIN_SALT_BYTES:
            raise UnacceptableCredentialError(f"the salt is {len(self.salt)} bytes: at least {MIN_SALT_BYTES} needed")
        size = self.mechanism.hf().digest_size
        if len(self.stored_key) != size or len(self.server_key) != size:
            raise UnacceptableCredentialError(f"{self.mechanism} keys are {size} bytes long")

    def to_json(self) -> dict:
        b64 = lambda b: base64.b64encode(b).decode("ascii")  # noqa: E731
        return {
            "salt": b64(self.salt),
            "stored_key": b64(self.stored_key),
            "server_key": b64(self.server_key),
            "iterations": self.iterations,
        }

    @classmethod
    def from_json(cls, mechanism: str, doc: dict) -> ScramCredential:
        d64 = lambda s: base64.b64decode(s, validate=True)  # noqa: E731
        return cls(
            ScramMechanism.parse(mechanism),
            d64(doc["salt"]),
            d64(doc["stored_key"]),
            d64(doc["server_key"]),
            doc["iterations"],
        )


def _check_iterations(mechanism: ScramMechanism, iterations: int) -> None:
    if isinstance(iterations, bool) or not isinstance(iterations, int):
        raise UnacceptableCredentialError(f"iterations must be an integer, got {iterations!r}")
    if iterations < MIN_ITERATIONS:
        raise UnacceptableCredentialError(
            f"Iterations {iterations} is less than the minimum {MIN_ITERATIONS} for {mechanism}"
        )
    if iterations > MAX_ITERATIONS:
        raise UnacceptableCredentialError(
            f"Iterations {iterations} is more than the maximum {MAX_ITERATIONS} for {mechanism}"
        )


def make_credential(
    mechanism: ScramMechanism | str, password: str, iterations: int = MIN_ITERATIONS, salt: bytes | None = None
) -> ScramCredential:
    """The credential for ``password`` (scramp's key derivation; a random salt unless given).
    CPU work: run it off the event loop."""
    mechanism = ScramMechanism.parse(mechanism)
    _check_iterations(mechanism, iterations)
    if not isinstance(password, str) or not password:
        raise UnacceptableCredentialError("the password must be a non-empty string")
    if salt is not None and (not isinstance(salt, bytes) or len(salt) < MIN_SALT_BYTES):
        raise UnacceptableCredentialError(f"the salt must be at least {MIN_SALT_BYTES} bytes")
    try:
        salt, stored_key, server_key, iterations = scramp.ScramMechanism(mechanism.value).make_auth_info(
            password, iteration_count=iterations, salt=salt
        )
    except ScramException as exc:
        raise UnacceptableCredentialError(f"unacceptable password or salt: {exc}") from None
    return ScramCredential(mechanism, salt, stored_key, server_key, iterations)


def _keys_from_salted_password(mechanism: ScramMechanism, salted_password: bytes) -> tuple[bytes, bytes]:
    hf = mechanism.hf
    stored_key = h(hf, hmac(hf, salted_password, b"Client Key"))
    server_key = hmac(hf, salted_password, b"Server Key")
    return stored_key, server_key


def credential_from_salted_password(
    mechanism: ScramMechanism | str, salt: bytes, salted_password: bytes, iterations: int
) -> ScramCredential:
    """The credential AlterUserScramCredentials' upsertion carries (the client salts the password
    itself; the broker never sees it)."""
    mechanism = ScramMechanism.parse(mechanism)
    _check_iterations(mechanism, iterations)
    if not isinstance(salted_password, bytes) or len(salted_password) != mechanism.hf().digest_size:
        raise UnacceptableCredentialError(
            f"the salted password of {mechanism} is {mechanism.hf().digest_size} bytes long"
        )
    if not isinstance(salt, bytes) or len(salt) < MIN_SALT_BYTES:
        raise UnacceptableCredentialError(f"the salt must be at least {MIN_SALT_BYTES} bytes")
    stored_key, server_key = _keys_from_salted_password(mechanism, salted_password)
    return ScramCredential(mechanism, salt, stored_key, server_key, iterations)


class CredentialStore:
    """Users' SCRAM credentials, durable in ``triolog-users.json`` (mode 0600, base64 fields,
    no password); safe to call from several threads. Loaded by the constructor: a file that
    does not parse raises CorruptSecurityFileError naming it."""

    def __init__(self, directory: str | os.PathLike, fs: FileSystem = OS_FS):
        self.fs = fs
        self.path = Path(directory) / USERS_FILE
        self._lock = threading.RLock()
        self._users: dict[str, dict[ScramMechanism, ScramCredential]] = self._load()

    def _load(self) -> dict[str, dict[ScramMechanism, ScramCredential]]:
        doc = load_json(self.fs, self.path, "SCRAM users")
        if doc is None:
            return {}
        users = doc.get("users")
        if not isinstance(users, dict):
            raise CorruptSecurityFileError(self.path, "no 'users' object")
        loaded: dict[str, dict[ScramMechanism, ScramCredential]] = {}
        for user, mechanisms in users.items():
            try:
                if not user or not isinstance(mechanisms, dict):
                    raise ValueError("not a user name and an object of mechanisms")
                loaded[user] = {ScramMechanism.parse(m): ScramCredential.from_json(m, c) for m, c in mechanisms.items()}
            except (KeyError, TypeError, ValueError) as exc:
                raise CorruptSecurityFileError(self.path, f"user {user!r} has an invalid credential: {exc!r}") from None
        return loaded

    def _save(self, users: dict[str, dict[ScramMechanism, ScramCredential]]) -> None:
        doc = {
            "version": 1,
            "users": {
                user: {m.value: c.to_json() for m, c in sorted(creds.items())}
                for user, creds in sorted(users.items())
                if creds
            },
        }
        save_private_json(self.fs, self.path, doc)

    @property
    def location(self) -> str:
        """Where the credentials are kept, for the tools' messages."""
        return str(self.path)

    @staticmethod
    def check_upsert(user: str, credential: ScramCredential) -> None:
        """What every store refuses before it stores anything."""
        if not isinstance(user, str) or not user:
            raise UnacceptableCredentialError("Username must not be empty")
        if not isinstance(credential, ScramCredential):
            raise TypeError("upsert takes a ScramCredential")
        credential.validate()

    def upsert(self, user: str, credential: ScramCredential) -> None:
        """Set the user's credential for its mechanism; the file is replaced before memory."""
        self.check_upsert(user, credential)
        with self._lock:
            users = {u: dict(c) for u, c in self._users.items()}
            users.setdefault(user, {})[credential.mechanism] = credential
            self._save(users)
            self._users = users

    def delete(self, user: str, mechanism: ScramMechanism | str) -> None:
        """Remove the user's credential for ``mechanism``; CredentialNotFoundError if it has none."""
        mechanism = ScramMechanism.parse(mechanism)
        with self._lock:
            if mechanism not in self._users.get(user, {}):
                raise CredentialNotFoundError(
                    f"Attempt to delete a user credential that does not exist: {user} {mechanism}"
                )
            users = {u: dict(c) for u, c in self._users.items()}
            del users[user][mechanism]
            if not users[user]:
                del users[user]
            self._save(users)
            self._users = users

    def get(self, user: str, mechanism: ScramMechanism | str) -> ScramCredential | None:
        mechanism = ScramMechanism.parse(mechanism)
        with self._lock:
            return self._users.get(user, {}).get(mechanism)

    def describe(self, users: list[str] | None = None) -> dict[str, list[tuple[ScramMechanism, int]]]:
        """DescribeUserScramCredentials' answer: per user, its (mechanism, iterations), mechanisms
        in code order. ``users`` None means every user; a named user without credentials is left
        out (Kafka answers RESOURCE_NOT_FOUND for it)."""
        with self._lock:
            names = sorted(self._users) if users is None else [u for u in dict.fromkeys(users) if u in self._users]
            return {
                u: [(m, c.iterations) for m, c in sorted(self._users[u].items(), key=lambda mc: mc[0].code)]
                for u in names
            }

    def users(self) -> list[str]:
        with self._lock:
            return sorted(self._users)


# --------------------------------------------------------------------------------------------
# Exchanges

_GENERIC_FAILURE = "Authentication failed: invalid credentials with SASL mechanism {}"
#: One secret per process: the dummy credential of an unknown user is stable across attempts
#: (same salt each time, as a real user's) without being guessable.
_DUMMY_SECRET = secrets.token_bytes(32)
#: Kafka's extension syntax: ``,key=value`` with a key of letters, a value without ',' or '='.
_EXTENSION = re.compile(r"([A-Za-z]+)=([\x01-\x2b\x2d-\x3c\x3e-\x7f]+)")
_SASLNAME = re.compile(r"(?:[\x01-\x2b\x2d-\x3c\x3e-\x7f]|=2C|=3D)+")


def _reason(exc: ScramException) -> str:
    """scramp's message without its RFC error-code suffix."""
    return str(exc.args[0]) if exc.args else str(exc)


def _dummy_credential(mechanism: ScramMechanism, user: str) -> ScramCredential:
    hf = mechanism.hf
    seed = _hmac.new(_DUMMY_SECRET, f"{mechanism.value}\0{user}".encode("utf-8", "surrogatepass"), hf).digest()
    size = hf().digest_size
    # Shaped as a real user's (a 32-byte random-looking salt, the default iterations): the
    # server-first message must not tell whether the user exists.
    salt = _hmac.new(seed, b"salt", hashlib.sha256).digest()
    return ScramCredential(
        mechanism,
        salt,
        _hmac.new(seed, b"stored", hf).digest()[:size],
        _hmac.new(seed, b"server", hf).digest()[:size],
        MIN_ITERATIONS,
    )


class _Exchange:
    mechanism_name = ""

    def __init__(self) -> None:
        self.principal: str | None = None
        self.username: str | None = None
        self._finished = False

    @property
    def complete(self) -> bool:
        return self.principal is not None

    def _fail(self, message: str, cls: type[AuthenticationFailed] = AuthenticationFailed):
        self._finished = True
        self.principal = None
        return cls(message)

    def _decode(self, message: bytes, what: str) -> str:
        if not isinstance(message, (bytes, bytearray, memoryview)):
            raise self._fail(f"Authentication failed: the {what} must be bytes")
        try:
            return bytes(message).decode("utf-8")
        except UnicodeDecodeError:
            raise self._fail(f"Authentication failed: the {what} is not valid UTF-8") from None


class ScramServerExchange(_Exchange):
    """One SCRAM authentication, server side: ``step(client_first)`` answers the server-first,
    ``step(client_final)`` the server-final; then ``principal`` is ``"User:<name>"``. Every
    refusal raises AuthenticationFailed and ends the exchange; a further step raises
    IllegalSaslStateError."""

    def __init__(self, mechanism: ScramMechanism | str, store: CredentialStore):
        super().__init__()
        self.mechanism = ScramMechanism.parse(mechanism)
        self.mechanism_name = self.mechanism.value
        self.store = store
        self._server: scramp.core.ScramServer | None = None
        self._unknown_user = False
        self._nonce: str | None = None
        self.extensions: dict[str, str] = {}

    def step(self, client_message: bytes) -> bytes:
        if self._finished:
            raise IllegalSaslStateError(
                f"Authentication failed: the {self.mechanism} exchange has ended; no further message is expected"
            )
        if self._server is None:
            return self._client_first(self._decode(client_message, "client-first message"))
        return self._client_final(self._server, self._decode(client_message, "client-final message"))

    def _malformed(self, what: str, detail: str) -> AuthenticationFailed:
        return self._fail(f"Authentication failed: invalid SCRAM {what} message: {detail}")

    def _client_first(self, text: str) -> bytes:
        parts = text.split(",", 2)
        if len(parts) != 3:
            raise self._malformed("client-first", "expected a GS2 header 'n,,' then n=<user>,r=<nonce>")
        flag, authzid, bare = parts
        if flag.startswith("p="):
            raise self._fail("Authentication failed: channel binding is not supported (GS2 flag 'p')")
        if flag not in ("n", "y"):
            raise self._malformed("client-first", f"unknown GS2 flag {flag!r}")
        if authzid:
            raise self._fail("Authentication failed: an authorization id in the GS2 header is not supported")
        fields = bare.split(",")
        if len(fields) < 2 or not fields[0].startswith("n=") or not fields[1].startswith("r="):
            raise self._malformed("client-first", "expected n=<user>,r=<nonce> (and no reserved m= attribute)")
        if not _SASLNAME.fullmatch(fields[0][2:]):
            raise self._malformed("client-first", "the user name is empty or wrongly escaped (=2C, =3D)")
        extensions: dict[str, str] = {}
        for field in fields[2:]:
            match = _EXTENSION.fullmatch(field)
            if match is None:
                raise self._malformed("client-first", f"invalid extension {field[:40]!r}: expected key=value")
            extensions[match.group(1)] = match.group(2)
        if extensions.get("tokenauth", "").lower() == "true":
            raise self._fail("Authentication failed: delegation tokens are not supported (tokenauth extension)")
        self.extensions = extensions

        def credential_of(user: str):  # scramp has unescaped =2C and =3D already
            credential = self.store.get(user, self.mechanism)
            if credential is None:
                self._unknown_user = True
                credential = _dummy_credential(self.mechanism, user)
            self.username = user
            return credential.salt, credential.stored_key, credential.server_key, credential.iterations

        server = scramp.ScramMechanism(self.mechanism.value).make_server(credential_of)
        try:
            # scramp reads only n= and r= (its grammar has no multi-letter attributes); the
            # AuthMessage both sides sign is the whole client-first-bare, extensions included.
            server.set_client_first(f"{flag},,{fields[0]},{fields[1]}")
            server.client_first_bare = bare
            server_first = server.get_server_first()
        except ScramException as exc:
            raise self._malformed("client-first", _reason(exc)) from None
        self._server = server
        self._nonce = str(server.nonce)
        return server_first.encode("utf-8")

    def _client_final(self, server: scramp.core.ScramServer, text: str) -> bytes:
        nonces = [field[2:] for field in text.split(",") if field.startswith("r=")]
        if len(nonces) != 1:
            raise self._malformed("client-final", "expected one r=<nonce>")
        # Exactly the nonce of this exchange (client's + server's): never one of another exchange.
        if nonces[0] != self._nonce:
            raise self._fail("Authentication failed: invalid nonce in the client-final message")
        try:
            server.set_client_final(text)
            server_final = server.get_server_final()
        except ScramException as exc:
            if exc.server_error == scramp.utils.ServerError.INVALID_PROOF:
                raise self._fail(_GENERIC_FAILURE.format(self.mechanism)) from None
            raise self._malformed("client-final", _reason(exc)) from None
        if self._unknown_user:
            raise self._fail(_GENERIC_FAILURE.format(self.mechanism))
        self._finished = True
        self.principal = f"User:{self.username}"
        return server_final.encode("utf-8")


class PlainServerExchange(_Exchange):
    """SASL PLAIN, one step: ``authzid NUL user NUL password`` checked against the user's SCRAM
    credential (SCRAM-SHA-512's if it has one, else SCRAM-SHA-256's). ``step`` answers b"" and
    sets ``principal``; a refusal raises AuthenticationFailed."""

    mechanism_name = "PLAIN"
    _FAILURE = "Authentication failed: Invalid username or password"

    def __init__(self, store: CredentialStore):
        super().__init__()
        self.store = store

    def step(self, client_message: bytes) -> bytes:
        if self._finished:
            raise IllegalSaslStateError(
                "Authentication failed: the PLAIN exchange has ended; no further message is expected"
            )
        text = self._decode(client_message, "PLAIN message")
        tokens = text.split("\0")
        if len(tokens) != 3:
            raise self._fail(f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(tokens)}")
        authzid, user, password = tokens
        if not user:
            raise self._fail("Authentication failed: username not specified")
        if not password:
            raise self._fail("Authentication failed: password not specified")
        if authzid and authzid != user:
            raise self._fail(
                "Authentication failed: Client requested an authorization id that is different from username"
            )
        credential = self.store.get(user, ScramMechanism.SCRAM_SHA_512) or self.store.get(
            user, ScramMechanism.SCRAM_SHA_256
        )
        known = credential is not None
        if credential is None:
            credential = _dummy_credential(ScramMechanism.SCRAM_SHA_512, user)
        try:
            prepared = saslprep(password).encode("utf-8")
        except ScramException:
            prepared = password.encode("utf-8", "surrogatepass")
            known = False
        salted = hi(credential.mechanism.hf, prepared, credential.salt, credential.iterations)
        stored_key, _ = _keys_from_salted_password(credential.mechanism, salted)
        if not (_hmac.compare_digest(stored_key, credential.stored_key) and known):
            raise self._fail(self._FAILURE)
        self._finished = True
        self.username = user
        self.principal = f"User:{user}"
        return b""
