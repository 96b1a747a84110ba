"""A client's side of Kafka's SASL exchange (SaslHandshake v1, then SaslAuthenticate v1), sans-IO:
the requests a follower sends a leader's SASL listener before its fetches, and the responses it
reads. Written out by hand as replica_fetch.py is (both versions are non-flexible: 16-bit string
lengths, 32-bit byte and array lengths, no tagged fields); tests/protocol/test_sasl_client_codec.py
checks them against kio's codec.

Each ``encode_*`` gives a whole frame (4-byte length, then the body); each ``decode_*`` takes a
frame's body as :class:`triolog.protocol.frames.FrameDecoder` gives it.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from triolog.protocol.frames import RemoteProtocolError

__all__ = [
    "SASL_AUTHENTICATE_API_KEY",
    "SASL_HANDSHAKE_API_KEY",
    "SaslAuthenticateResponse",
    "SaslHandshakeResponse",
    "decode_sasl_authenticate_response",
    "decode_sasl_handshake_response",
    "encode_sasl_authenticate",
    "encode_sasl_handshake",
]

SASL_HANDSHAKE_API_KEY = 17
SASL_AUTHENTICATE_API_KEY = 36
#: SaslHandshake v1: the mechanism's messages then travel in SaslAuthenticate requests (KIP-152).
HANDSHAKE_VERSION = 1
AUTHENTICATE_VERSION = 1

_HEADER = struct.Struct(">hhi")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


@dataclass(frozen=True)
class SaslHandshakeResponse:
    correlation_id: int
    error_code: int
    #: The mechanisms the listener offers.
    mechanisms: tuple[str, ...]


@dataclass(frozen=True)
class SaslAuthenticateResponse:
    correlation_id: int
    error_code: int
    error_message: str | None
    auth_bytes: bytes
    session_lifetime_ms: int


def _string(value: str | None) -> bytes:
    if value is None:
        return _I16.pack(-1)
    data = value.encode("utf-8")
    return _I16.pack(len(data)) + data


def _frame(api_key: int, version: int, correlation_id: int, client_id: str, body: bytes) -> bytes:
    payload = _HEADER.pack(api_key, version, correlation_id) + _string(client_id) + body
    return _I32.pack(len(payload)) + payload


def encode_sasl_handshake(correlation_id: int, client_id: str, mechanism: str) -> bytes:
    return _frame(SASL_HANDSHAKE_API_KEY, HANDSHAKE_VERSION, correlation_id, client_id, _string(mechanism))


def encode_sasl_authenticate(correlation_id: int, client_id: str, auth_bytes: bytes) -> bytes:
    body = _I32.pack(len(auth_bytes)) + bytes(auth_bytes)
    return _frame(SASL_AUTHENTICATE_API_KEY, AUTHENTICATE_VERSION, correlation_id, client_id, body)


class _Reader:
    def __init__(self, data: bytes, what: str):
        self.data, self.at, self.what = data, 0, what

    def take(self, size: int) -> bytes:
        if size < 0 or self.at + size > len(self.data):
            raise RemoteProtocolError(f"truncated {self.what} response")
        chunk = self.data[self.at : self.at + size]
        self.at += size
        return chunk

    def unpack(self, fmt: struct.Struct) -> int:
        return fmt.unpack(self.take(fmt.size))[0]

    def string(self) -> str | None:
        size = self.unpack(_I16)
        if size == -1:
            return None
        try:
            return self.take(size).decode("utf-8")
        except UnicodeDecodeError:
            raise RemoteProtocolError(f"a string of the {self.what} response is not UTF-8") from None

    def done(self) -> None:
        if self.at != len(self.data):
            raise RemoteProtocolError(f"{len(self.data) - self.at} bytes after the {self.what} response")


def decode_sasl_handshake_response(frame: bytes) -> SaslHandshakeResponse:
    reader = _Reader(frame, "SaslHandshake")
    correlation_id = reader.unpack(_I32)
    error_code = reader.unpack(_I16)
    count = reader.unpack(_I32)
    if count < -1 or count > len(frame):
        raise RemoteProtocolError("SaslHandshake response: an impossible number of mechanisms")
    mechanisms = tuple(reader.string() or "" for _ in range(max(count, 0)))
    reader.done()
    return SaslHandshakeResponse(correlation_id, error_code, mechanisms)


def decode_sasl_authenticate_response(frame: bytes) -> SaslAuthenticateResponse:
    reader = _Reader(frame, "SaslAuthenticate")
    correlation_id = reader.unpack(_I32)
    error_code = reader.unpack(_I16)
    error_message = reader.string()
    auth_bytes = reader.take(reader.unpack(_I32))
    session_lifetime_ms = reader.unpack(_I64)
    reader.done()
    return SaslAuthenticateResponse(correlation_id, error_code, error_message, auth_bytes, session_lifetime_ms)
