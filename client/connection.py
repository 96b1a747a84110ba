"""The blocking connection: one socket, frames in and out through the shared sans-IO decoder.

Requests are numbered here (correlation ids) and every response is checked against the id of
the request it answers: the broker answers one connection's requests in order, so the oldest
outstanding request is the one being answered, and a different id means the stream is broken.

With several bootstrap servers, a connection is opened to the first that accepts one, tried in
order (the one that answered last, first); when none does, the error names every address tried.

Failures are reported in the two kinds the producer's retry rule needs:
:class:`RequestNotSentError` (the frame never left whole, so the broker cannot have acted on it)
and :class:`ResponseLostError` (it left; its fate is unknown). Either way the socket is closed
and the next call reconnects.
"""

from __future__ import annotations

import dataclasses
import itertools
import socket
import threading

from triolog.protocol import messages as m
from triolog.protocol.frames import NEED_DATA, FrameDecoder, ProtocolError, encode_frame

from .address import DEFAULT_BOOTSTRAP, format_address, parse_bootstrap, parse_bootstrap_servers
from .errors import InvalidResponseError, RequestNotSentError, ResponseLostError

__all__ = ["DEFAULT_BOOTSTRAP", "SyncConnection", "parse_bootstrap"]

_RECV_SIZE = 256 * 1024


class CorrelationIds:
    """0 <= id < 2^31, wrapping; shared by both connection flavours."""

    def __init__(self) -> None:
        self._counter = itertools.count(1)

    def next(self) -> int:
        return next(self._counter) % (2**31)


def prepare(request: m.Request, correlation_id: int, client_id: str | None) -> tuple[m.Request, bytes]:
    """The request with its id and client_id filled in, and its whole frame."""
    request = dataclasses.replace(request, id=correlation_id, client_id=client_id)
    return request, encode_frame(m.encode_request(request))


def decode_answer(frame: bytes, request: m.Request) -> dict:
    """The response to ``request`` or InvalidResponseError (malformed, or answering another id)."""
    try:
        doc = m.decode_response(frame, request.api)
    except ProtocolError as exc:
        raise InvalidResponseError(f"malformed {request.api} response: {exc}") from None
    if doc["id"] != request.id:
        if doc["id"] is None and doc["error_code"]:  # the broker could not read our frame at all
            raise InvalidResponseError(f"broker refused the request frame: {doc.get('error_message')}")
        raise InvalidResponseError(f"response id {doc['id']} does not answer request id {request.id}")
    return doc


def connect_order(addresses: list[tuple[str, int]], last_good: int) -> list[int]:
    """Indexes of ``addresses`` to try: the one that answered last, then the others in order."""
    return [last_good, *(i for i in range(len(addresses)) if i != last_good)]


def no_broker_message(failures: list[tuple[tuple[str, int], object]]) -> str:
    if len(failures) == 1:
        address, reason = failures[0]
        return f"cannot connect to {format_address(address)}: {reason}"
    tried = "; ".join(f"{format_address(address)}: {reason}" for address, reason in failures)
    return f"cannot connect to any of the {len(failures)} bootstrap servers ({tried})"


class SyncConnection:
    """A blocking connection to one broker; thread-safe (one round trip at a time)."""

    def __init__(self, bootstrap: str | list[str] = DEFAULT_BOOTSTRAP, *, client_id: str | None = None,
                 connect_timeout_s: float = 10.0) -> None:
        self.addresses = parse_bootstrap_servers(bootstrap)
        self._last_good = 0
        self.host, self.port = self.addresses[0]
        self.client_id = client_id
        self.connect_timeout_s = connect_timeout_s
        self._ids = CorrelationIds()
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._decoder = FrameDecoder()
        self._closed = False

    def _connect(self) -> socket.socket:
        if self._closed:
            raise RequestNotSentError("connection closed by the client")
        if self._sock is None:
            failures = []
            for index in connect_order(self.addresses, self._last_good):
                try:
                    sock = socket.create_connection(self.addresses[index], timeout=self.connect_timeout_s)
                    break
                except OSError as exc:
                    failures.append((self.addresses[index], exc))
            else:
                raise RequestNotSentError(no_broker_message(failures))
            self._last_good = index
            self.host, self.port = self.addresses[index]
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._sock, self._decoder = sock, FrameDecoder()
        return self._sock

    def _drop(self) -> None:
        if self._sock is not None:
            try:
                self._sock.close()
            finally:
                self._sock = None

    def call(self, request: m.Request, timeout_s: float) -> dict | None:
        """One request; its response dict, or None when the request gets no response (acks=0)."""
        with self._lock:
            sock = self._connect()
            request, frame = prepare(request, self._ids.next(), self.client_id)
            try:
                sock.settimeout(timeout_s)
                sock.sendall(frame)
            except OSError as exc:  # sendall raised: the frame was not handed over whole
                self._drop()
                raise RequestNotSentError(f"sending {request.api} to {self.host}:{self.port} failed: {exc}") from None
            if not request.expects_response:
                return None
            try:
                return decode_answer(self._receive(sock), request)
            except InvalidResponseError:
                self._drop()
                raise
            except (OSError, ResponseLostError) as exc:
                self._drop()
                if isinstance(exc, socket.timeout):
                    raise ResponseLostError(
                        f"no {request.api} response from {self.host}:{self.port} within {timeout_s:.3g} s") from None
                raise ResponseLostError(f"{request.api} response from {self.host}:{self.port} lost: {exc}") from None

    def _receive(self, sock: socket.socket) -> bytes:
        while True:
            try:
                frame = self._decoder.next_frame()
            except ProtocolError as exc:
                raise InvalidResponseError(str(exc)) from None
            if frame is not NEED_DATA:
                return frame
            data = sock.recv(_RECV_SIZE)
            if not data:
                raise ResponseLostError("connection closed by the broker")
            self._decoder.receive_data(data)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._drop()
