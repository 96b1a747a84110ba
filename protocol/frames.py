"""Framing: every request and response is a 4-byte big-endian unsigned length, then that many bytes.

Sans-IO, in the shape of h11: the connection feeds whatever it read to
:meth:`FrameDecoder.receive_data` and pulls whole frames with :meth:`FrameDecoder.next_frame`
until it returns :data:`NEED_DATA`. The decoder never touches a socket, so the trio server, the
client and the tests drive the same object.

:func:`kafka_request_header` and :func:`foreign_protocol_of_prefix` recognise a peer that speaks
another protocol (Kafka's, HTTP, TLS) to a triolog listener, so the broker can say so instead of
answering a generic bad request.

Also home of the protocol exceptions shared with :mod:`triolog.protocol.messages`:
:class:`LocalProtocolError` (we tried to send something the protocol forbids: a bug here) and
:class:`RemoteProtocolError` (the peer sent bytes the protocol forbids), each carrying the wire
error code to answer with.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass
from typing import Final, Literal

from .errors import ErrorCode

#: ``socket.request.max.bytes``'s default: the largest frame body a broker accepts.
DEFAULT_MAX_FRAME_BYTES: Final = 104_857_600

_PREFIX = struct.Struct(">I")
PREFIX_SIZE: Final = _PREFIX.size  # 4
MAX_FRAME_LENGTH: Final = 2**32 - 1

# Compact the receive buffer once this many consumed bytes sit in front of it (and they are at
# least half of it), so pipelined frames in one big chunk cost O(n), not O(n^2) in memmoves.
_COMPACT_AFTER_BYTES = 65536


class _NeedData(enum.Enum):
    NEED_DATA = "NEED_DATA"

    def __repr__(self) -> str:
        return self.value


#: Returned by :meth:`FrameDecoder.next_frame` when no whole frame is buffered yet.
NEED_DATA: Final = _NeedData.NEED_DATA


class ProtocolError(Exception):
    """A violation of the wire protocol; ``code`` is the error code a response should carry."""

    code: ErrorCode = ErrorCode.INVALID_REQUEST


class LocalProtocolError(ProtocolError):
    """We were asked to send something the protocol forbids: a bug in the caller, not the peer."""


class RemoteProtocolError(ProtocolError):
    """The peer sent bytes the protocol forbids."""


class FrameTooLargeError(RemoteProtocolError):
    """A length prefix above ``max_frame_bytes``.

    Raised as soon as the prefix is read, before any of the body is buffered: the broker answers
    ``INVALID_REQUEST`` (with ``id`` nil: the body holding it is never read) and closes.
    """

    def __init__(self, length: int, max_frame_bytes: int) -> None:
        super().__init__(
            f"frame of {length} bytes exceeds the limit of {max_frame_bytes} bytes (socket.request.max.bytes)"
        )
        self.length = length
        self.max_frame_bytes = max_frame_bytes


def frame_prefix(length: int) -> bytes:
    """The 4-byte prefix announcing a body of ``length`` bytes (for bodies sent in parts)."""
    if not 0 <= length <= MAX_FRAME_LENGTH:
        raise LocalProtocolError(f"frame length {length} is outside [0, {MAX_FRAME_LENGTH}]")
    return _PREFIX.pack(length)


def encode_frame(payload: bytes) -> bytes:
    """One frame: prefix then payload."""
    return frame_prefix(len(payload)) + payload


class FrameDecoder:
    """Splits a byte stream into frame payloads.

    Memory is bounded as long as the caller drains with :meth:`next_frame` until
    :data:`NEED_DATA` after each :meth:`receive_data`: what stays buffered is then at most one
    incomplete frame, itself at most ``4 + max_frame_bytes`` bytes, because an oversized length
    prefix is refused before its body arrives. After a :class:`FrameTooLargeError` the stream
    cannot be resynchronised: every later :meth:`next_frame` raises it again and received data
    is dropped.

    A large frame (``OWN_BODY_BYTES`` or more) whose body is still arriving is kept as the chunks
    received, joined once when whole: while it arrives it costs its length, not the length of a
    receive buffer that grows by reallocation, and nothing is copied but by the final join.
    """

    #: Frames at least this long are received as chunks (see above).
    OWN_BODY_BYTES: Final = 65536

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        if not 0 <= max_frame_bytes <= MAX_FRAME_LENGTH:
            raise ValueError(f"max_frame_bytes must be in [0, {MAX_FRAME_LENGTH}], got {max_frame_bytes}")
        self.max_frame_bytes = max_frame_bytes
        self._buffer = bytearray()
        self._start = 0  # bytes of _buffer already handed out as frames
        self._error: FrameTooLargeError | None = None
        # The large frame being received, once its body starts: its length and the chunks so far.
        self._body_length: int | None = None
        self._body_chunks: list[bytes | memoryview] = []
        self._body_filled = 0

    @property
    def pending_bytes(self) -> int:
        """Bytes received but not yet returned as a frame: non-zero at EOF means a truncated frame."""
        pending = len(self._buffer) - self._start
        if self._body_length is not None:
            pending += PREFIX_SIZE + self._body_filled
        return pending

    @property
    def frame_length(self) -> int | None:
        """The body length announced by the prefix of the frame being received, once that prefix
        is whole (None before): what a server reserves before it reads the body."""
        if self._body_length is not None:
            return self._body_length
        if len(self._buffer) - self._start < PREFIX_SIZE:
            return None
        return _PREFIX.unpack_from(self._buffer, self._start)[0]

    def read_size(self, max_bytes: int, read_ahead: int = 0) -> int:
        """How many bytes to read next: the rest of the prefix, then the rest of the body, of the
        frame being received, plus at most ``read_ahead`` bytes past it (the next frames' first
        bytes); at most ``max_bytes``, at least 1.

        A reader that asks for no more than this holds at most ``read_ahead`` bytes beyond the
        frame whose length it has accounted for.
        """
        if self._body_length is not None:
            rest = self._body_length - self._body_filled
        else:
            pending = len(self._buffer) - self._start
            if pending < PREFIX_SIZE:
                rest = PREFIX_SIZE - pending
            else:
                rest = PREFIX_SIZE + _PREFIX.unpack_from(self._buffer, self._start)[0] - pending
        return max(1, min(max_bytes, rest + read_ahead))

    def receive_data(self, data: bytes) -> None:
        if self._error is not None:
            return
        if self._body_length is None and len(self._buffer) - self._start == PREFIX_SIZE and data:
            # Only a prefix is buffered (a reader that reads by read_size): a large body starts
            # here and is kept as the chunks received, without passing through the buffer.
            (length,) = _PREFIX.unpack_from(self._buffer, self._start)
            if self.OWN_BODY_BYTES <= length <= self.max_frame_bytes:
                self._buffer = bytearray()
                self._start = 0
                self._body_length = length
        if self._body_length is not None:
            n = min(len(data), self._body_length - self._body_filled)
            if n == len(data):
                self._body_chunks.append(bytes(data))  # no copy of a bytes object
            else:  # the end of the body, then the start of the next frame
                view = memoryview(bytes(data))
                self._body_chunks.append(view[:n])  # a view, copied only by the final join
                self._buffer += view[n:]
            self._body_filled += n
            return
        self._buffer += data

    def next_frame(self) -> bytes | Literal[_NeedData.NEED_DATA]:
        """The next whole frame's payload, or :data:`NEED_DATA`."""
        if self._error is not None:
            raise self._error
        if self._body_length is not None:
            if self._body_filled < self._body_length:
                return NEED_DATA
            chunks, self._body_chunks = self._body_chunks, []
            self._body_length, self._body_filled = None, 0
            if len(chunks) == 1 and isinstance(chunks[0], bytes):
                return chunks[0]
            return b"".join(chunks)
        if self.pending_bytes < PREFIX_SIZE:
            return NEED_DATA
        (length,) = _PREFIX.unpack_from(self._buffer, self._start)
        if length > self.max_frame_bytes:
            self._error = FrameTooLargeError(length, self.max_frame_bytes)
            self._buffer = bytearray()
            self._start = 0
            raise self._error
        body_start = self._start + PREFIX_SIZE
        body_end = body_start + length
        if len(self._buffer) < body_end:
            if length >= self.OWN_BODY_BYTES and len(self._buffer) > body_start:
                # Everything buffered belongs to this frame (it is not whole): it becomes the
                # body's first chunk. Not before its first byte arrived, so a reader that reserves
                # memory once the prefix is read does so before the frame costs anything.
                with memoryview(self._buffer) as view, view[body_start:] as first:
                    self._body_chunks = [bytes(first)]
                self._body_length = length
                self._body_filled = len(self._body_chunks[0])
                self._buffer = bytearray()
                self._start = 0
            return NEED_DATA
        with memoryview(self._buffer) as view, view[body_start:body_end] as body:
            frame = bytes(body)
        self._start = body_end
        if self._start == len(self._buffer):
            self._buffer.clear()
            self._start = 0
        elif self._start >= _COMPACT_AFTER_BYTES and 2 * self._start >= len(self._buffer):
            del self._buffer[: self._start]
            self._start = 0
        return frame


# -- peers speaking another protocol -----------------------------------------------------------

_KAFKA_HEADER = struct.Struct(">hhih")  # api_key, api_version, correlation_id, client_id length


@dataclass(frozen=True)
class KafkaRequestHeader:
    """The start of a Kafka request header (versions 0 to 2 all begin this way)."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


def kafka_request_header(frame: bytes | bytearray) -> KafkaRequestHeader | None:
    """The Kafka request header ``frame`` (a frame body, prefix removed) starts with, or None.

    Kafka frames its requests like triolog (an int32 size first), so a Kafka client's request
    arrives as a whole frame; its body starts with the int16 api_key, whose first byte is 0 for
    every API Kafka defines. A triolog request is a msgpack map, whose first byte is never 0
    (0x80-0x8f, 0xde or 0xdf), so no valid triolog request is taken for Kafka's. The rest of the
    header must be plausible too: a non-negative version and a client id (nullable int16-length
    string, in every header version) that fits in the frame and is UTF-8.
    """
    if len(frame) < _KAFKA_HEADER.size or frame[0] != 0:
        return None
    api_key, api_version, correlation_id, client_id_length = _KAFKA_HEADER.unpack_from(frame)
    if api_version < 0 or client_id_length < -1 or _KAFKA_HEADER.size + client_id_length > len(frame):
        return None
    client_id = None
    if client_id_length >= 0:
        try:
            client_id = bytes(frame[_KAFKA_HEADER.size : _KAFKA_HEADER.size + client_id_length]).decode()
        except UnicodeDecodeError:
            return None
    return KafkaRequestHeader(api_key, api_version, correlation_id, client_id)


#: First bytes of the requests of protocols a triolog port is often mistaken for: an HTTP
#: request line (curl, a browser, a Prometheus scrape aimed at the wrong port) and a TLS record
#: carrying a handshake (0x16, then major version 3). Read as a triolog length prefix, each
#: announces a frame of more than 360 MB, over the default ``socket.request.max.bytes``.
_HTTP_METHODS = (b"GET ", b"HEAD", b"POST", b"PUT ", b"DELE", b"OPTI", b"PATC", b"CONN", b"TRAC")


def foreign_protocol_of_prefix(length: int) -> str | None:
    """``"http"`` or ``"tls"`` when the 4 bytes read as a frame's ``length`` are the start of an
    HTTP request or a TLS handshake; None otherwise. Meant for a prefix refused as too large: a
    legitimate frame may have any length."""
    prefix = _PREFIX.pack(length) if 0 <= length <= MAX_FRAME_LENGTH else b""
    if prefix in _HTTP_METHODS:
        return "http"
    if prefix[:2] == b"\x16\x03" and prefix[2:3] <= b"\x04":
        return "tls"
    return None
