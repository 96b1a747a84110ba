"""The blocking connection: one socket, frames in and out through the shared sans-IO decoder.

Requests are numbered here (correlation ids) and every response is checked against the id of
the request it answers: the broker answers one connection's requests in order, so the oldest
outstanding request is the one being answered, and a different id means the stream is broken.

Several requests may be outstanding on one connection (Kafka's
``max.in.flight.requests.per.connection``): :meth:`SyncConnection.send` writes a request and
returns at once with a handle, :meth:`SyncConnection.receive` waits for that handle's response.
Whichever thread reads the socket hands every response it meets to the request it answers, so
threads waiting for different requests never steal each other's responses.

A produce request's record batches are never copied into the frame: the frame is sent as its
parts (the msgpack around the batches, then each batch's own bytes) with one scatter/gather
``sendmsg``.

With TLS or SASL (:mod:`triolog.client.security`), each new socket is wrapped in TLS and
authenticated before the link is used; a TLS link's socket is then non-blocking, each TLS call
made under the link's lock (OpenSSL's objects are not for two threads at once) and waits done
with poll outside it (after checking the bytes TLS already decrypted: ``pending()``). A
PLAINTEXT link is untouched: the same sendmsg path as ever.

With several bootstrap servers, a connection is opened to the first that accepts one, tried in
order (the one that answered last, first); when none does, the error names every address tried.
A client uses a :class:`ClusterConnection`: one such connection to any broker, and one per broker
of a cluster for the requests its partitions' leaders answer (:mod:`triolog.client.cluster`).

Failures are reported in the two kinds the producer's retry rule needs:
:class:`RequestNotSentError` (the frame never left whole, so the broker cannot have acted on it)
and :class:`ResponseLostError` (it left; its fate is unknown). Either way the socket is closed
and the next call reconnects.
"""

from __future__ import annotations

import dataclasses
import itertools
import select
import socket
import ssl
import threading
import time
from collections import deque
from collections.abc import Sequence
from typing import Any, cast

from triolog.protocol import messages as m
from triolog.protocol.frames import NEED_DATA, FrameDecoder, ProtocolError, encode_frame, frame_prefix

from .address import DEFAULT_BOOTSTRAP, format_address, parse_bootstrap, parse_bootstrap_servers
from .cluster import ANY, ClusterView, merge
from .errors import InvalidResponseError, RequestNotSentError, ResponseLostError
from .security import PLAINTEXT, SecurityConfig, login_error, renewal_time, sasl_exchange

__all__ = ["DEFAULT_BOOTSTRAP", "ClusterConnection", "InFlight", "SyncConnection", "parse_bootstrap"]

_RECV_SIZE = 256 * 1024
#: Parts of a frame shorter than this are joined before sending (a copy of a few bytes is cheaper
#: than another iovec or, under trio, another send call); longer ones, the record batches, go as is.
_JOIN_BELOW = 16 * 1024
#: sendmsg takes at most IOV_MAX (1024 on Linux) buffers a call.
_IOV_MAX = 512


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


def prepare_parts(request: m.Request, correlation_id: int, client_id: str | None) -> tuple[m.Request, list]:
    """As :func:`prepare`, the frame as a list of buffers: a produce request's batches (bytes, or
    :class:`triolog.protocol.messages.ExternalBin` standing for them) are parts of their own, not
    copied into the frame; small neighbouring parts are joined."""
    request = dataclasses.replace(request, id=correlation_id, client_id=client_id)
    if type(request) is not m.ProduceRequest:
        return request, [encode_frame(m.encode_request(request))]
    # Our producer builds every field from checked settings; the broker checks the rest.
    parts = m.pack_parts(request, check_schema=False)
    out: list = [frame_prefix(m.parts_length(parts))]
    for part in parts:
        data: Any = part.ref if type(part) is m.ExternalBin else part
        if len(data) < _JOIN_BELOW and type(out[-1]) is bytes and len(out[-1]) < _JOIN_BELOW:
            out[-1] += bytes(data)
        else:
            out.append(data)
    return request, out


def send_parts(sock: socket.socket, parts: list) -> None:
    """Write every part, in order, with scatter/gather sendmsg (resumed after a partial write)."""
    if len(parts) == 1:
        sock.sendall(parts[0])
        return
    views = [memoryview(part).cast("B") for part in parts]
    index = 0
    while index < len(views):
        sent = sock.sendmsg(views[index : index + _IOV_MAX])
        while sent:
            size = len(views[index])
            if sent >= size:
                sent -= size
                index += 1
            else:
                views[index] = views[index][sent:]
                sent = 0


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


def no_broker_message(failures: Sequence[tuple[tuple[str, int], object]]) -> str:
    if len(failures) == 1:
        address, reason = failures[0]
        return f"cannot connect to {format_address(address)}: {reason}"
    tried = "; ".join(f"{format_address(address)}: {reason}" for address, reason in failures)
    return f"cannot connect to any of the {len(failures)} bootstrap servers ({tried})"


class InFlight:
    """A request written to a connection whose response is awaited (see SyncConnection.send)."""

    __slots__ = ("done", "doc", "error", "link", "request")

    def __init__(self, request: m.Request, link: _Link) -> None:
        self.request = request
        self.link = link
        self.done = False
        self.doc: dict | None = None
        self.error: BaseException | None = None

    def _settle(self, doc: dict | None, error: BaseException | None) -> None:
        self.doc, self.error, self.done = doc, error, True


class _Link:
    """One TCP connection: its socket, its frame decoder, and its requests awaiting a response
    (oldest first: the broker answers in order)."""

    def __init__(
        self, sock: socket.socket, address: tuple[str, int], tls: bool = False, decoder: FrameDecoder | None = None
    ) -> None:
        self.sock = sock
        self.address = address
        #: A TLS socket (non-blocking; every TLS call under tls_lock).
        self.tls = tls
        self.tls_lock = threading.Lock() if tls else None
        self.decoder = decoder or FrameDecoder()
        self.pending: deque[InFlight] = deque()
        self.broken: BaseException | None = None
        #: When (time.monotonic) this link stops taking requests: its SASL session ends soon.
        self.renew_at: float | None = None
        #: No longer the connection's link: closed once its last response is in.
        self.retired = False
        self.poller = select.poll()
        self.poller.register(sock, select.POLLIN)


def _tls_send(link: _Link, parts: list, timeout_s: float) -> None:
    """Write every part on a TLS link (SSLSocket has no sendmsg), within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    sock, lock = link.sock, link.tls_lock
    assert lock is not None  # (a TLS link)
    for part in parts:
        view = memoryview(part).cast("B")
        while view:
            with lock:
                try:
                    sent, want = sock.send(view), 0
                except ssl.SSLWantWriteError:
                    sent, want = 0, select.POLLOUT
                except ssl.SSLWantReadError:
                    sent, want = 0, select.POLLIN
            if sent:
                view = view[sent:]
                continue
            remaining_ms = int((deadline - time.monotonic()) * 1000)
            if remaining_ms <= 0:
                raise TimeoutError(f"timed out after {timeout_s:.3g} s")
            poller = select.poll()
            poller.register(sock, want)
            poller.poll(remaining_ms)


def _tls_receive(link: _Link, remaining_ms: int) -> bytes | None:
    """Bytes from a TLS link: b"" at its end, None if none came within ``remaining_ms`` (or only a
    part of a TLS record did)."""
    sock, lock = cast(ssl.SSLSocket, link.sock), link.tls_lock
    assert lock is not None  # (a TLS link)
    if not sock.pending() and not link.poller.poll(remaining_ms):
        return None
    with lock:
        try:
            return sock.recv(_RECV_SIZE)
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
            return None


class SyncConnection:
    """A blocking connection to one broker; thread-safe. Requests from several threads (or several
    :meth:`send` calls from one) are pipelined on one socket; :meth:`call` is one round trip.
    ``security``: TLS and SASL settings (:class:`triolog.client.security.SecurityConfig`)."""

    def __init__(
        self,
        bootstrap: str | list[str] = DEFAULT_BOOTSTRAP,
        *,
        client_id: str | None = None,
        connect_timeout_s: float = 10.0,
        security: SecurityConfig | None = None,
    ) -> None:
        self.security = security or PLAINTEXT
        self.addresses = parse_bootstrap_servers(bootstrap)
        self._last_good = 0
        self.host, self.port = self.addresses[0]
        self.client_id = client_id
        self.connect_timeout_s = connect_timeout_s
        self._ids = CorrelationIds()
        #: Held while a frame is written (frames must not interleave) and while connecting.
        self._send_lock = threading.Lock()
        #: Held by the one thread reading responses.
        self._receive_lock = threading.Lock()
        #: Guards the pending queues and breaking a link.
        self._state_lock = threading.Lock()
        self._link: _Link | None = None
        self._closed = False
        #: Until when (time.monotonic) the broker throttles this client: sends wait for it.
        self.throttled_until = 0.0
        #: The most requests seen awaiting a response at once on this connection (for tests and stats).
        self.max_in_flight_seen = 0

    def _connect(self) -> _Link:
        """The live link, connecting first if there is none (called with the send lock held)."""
        if self._closed:
            raise RequestNotSentError("connection closed by the client")
        link = self._link
        if link is not None and link.renew_at is not None and time.monotonic() >= link.renew_at:
            self._retire(link)
            link = None
        if link is None or link.broken is not None:
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
            if self.security.is_plaintext:
                link = _Link(sock, self.addresses[index])
            else:
                link = self._secure(sock, self.addresses[index])
            self._link = link
        return link

    def _secure(self, sock: socket.socket, address: tuple[str, int]) -> _Link:
        """TLS (when configured) then SASL (likewise) on a new socket; its link. Closes the socket
        and raises SslHandshakeError, the broker's SASL error, or RequestNotSentError (the
        connection failed meanwhile: retriable)."""
        security, name = self.security, format_address(address)
        try:
            if security.uses_tls:
                try:
                    sock = security.ssl_context().wrap_socket(sock, server_hostname=address[0])
                except OSError as exc:
                    raise login_error("TLS handshake", name, exc) from None
            decoder = FrameDecoder()
            renew_at = None
            if security.uses_sasl:
                renew_at = renewal_time(time.monotonic(), self._authenticate(sock, name, decoder))
            if security.uses_tls:
                sock.setblocking(False)
            link = _Link(sock, address, tls=security.uses_tls, decoder=decoder)
            link.renew_at = renew_at
            return link
        except BaseException:
            sock.close()
            raise

    def _authenticate(self, sock: socket.socket, name: str, decoder: FrameDecoder) -> int:
        """The SASL exchange on a new (blocking) socket, before any other request; the session's
        lifetime in ms (0: it never expires)."""
        exchange = sasl_exchange(self.security, name)
        request = next(exchange)
        while True:
            request, frame = prepare(request, self._ids.next(), self.client_id)
            try:
                sock.sendall(frame)
                while (answer := decoder.next_frame()) is NEED_DATA:
                    data = sock.recv(_RECV_SIZE)
                    if not data:
                        raise ConnectionError("connection closed by the broker")
                    decoder.receive_data(data)
            except (OSError, ProtocolError) as exc:
                raise login_error("SASL authentication", name, exc) from None
            try:
                request = exchange.send(decode_answer(answer, request))
            except StopIteration as done:
                return done.value

    def _retire(self, link: _Link) -> None:
        """Send nothing more on ``link`` (its SASL session is about to expire); close it now if no
        response is due on it, else when the last one is read."""
        with self._state_lock:
            if self._link is link:
                self._link = None
            link.retired = True
            idle = not link.pending
        if idle:
            self._break(link, ResponseLostError("connection renewed: its SASL session was about to expire"))

    def _break(self, link: _Link, error: BaseException) -> None:
        """Close ``link``: every request still awaiting a response on it gets ``error``."""
        with self._state_lock:
            if link.broken is not None:
                return
            link.broken = error
            pending, link.pending = link.pending, deque()
            if self._link is link:
                self._link = None
        for waiting in pending:
            waiting._settle(None, error)
        try:
            link.sock.close()
        except OSError:
            pass

    def send(self, request: m.Request, timeout_s: float) -> InFlight | None:
        """Write one request and return at once: its :class:`InFlight` handle for :meth:`receive`,
        or None when it gets no response (acks=0). RequestNotSentError if the frame did not leave
        whole (the broker cannot have acted on it; the connection is closed, the next call reconnects)."""
        with self._send_lock:
            wait = self.throttled_until - time.monotonic()
            if wait > 0:  # the broker throttled this client (a quota): nothing is sent until then
                time.sleep(wait)
            link = self._connect()
            request, parts = prepare_parts(request, self._ids.next(), self.client_id)
            waiting = None
            with self._state_lock:
                if link.broken is not None:
                    raise RequestNotSentError(f"connection to {self.host}:{self.port} failed: {link.broken}")
                if request.expects_response:
                    waiting = InFlight(request, link)
                    link.pending.append(waiting)  # before the frame leaves: the reader must know it
                    if len(link.pending) > self.max_in_flight_seen:
                        self.max_in_flight_seen = len(link.pending)
            try:
                if link.tls:
                    _tls_send(link, parts, timeout_s)
                else:
                    link.sock.settimeout(timeout_s)
                    send_parts(link.sock, parts)
            except OSError as exc:  # the frame was not handed over whole
                error = RequestNotSentError(f"sending {request.api} to {self.host}:{self.port} failed: {exc}")
                if waiting is not None:
                    waiting._settle(None, error)
                self._break(
                    link,
                    ResponseLostError(
                        f"connection to {self.host}:{self.port} failed while sending a later request: {exc}"
                    ),
                )
                raise error from None
            return waiting

    def receive(self, waiting: InFlight, timeout_s: float, give_up: bool = True) -> dict | None:
        """The response to a request :meth:`send` wrote, waiting up to ``timeout_s`` for it.
        ResponseLostError when the connection failed or the time ran out (the connection is then
        closed: the request's fate is unknown), InvalidResponseError for a malformed answer.
        ``give_up=False``: when the time runs out, return None and keep waiting possible later."""
        deadline = time.monotonic() + timeout_s
        while not waiting.done:
            # A wait of 0 still reads what has already arrived.
            if not self._receive_lock.acquire(timeout=max(0.0, deadline - time.monotonic())):
                if not give_up:
                    return None
                self._time_out(waiting, timeout_s)
                break
            try:
                while not waiting.done:
                    if not self._read_some(waiting.link, deadline):
                        if not give_up:
                            return None
                        self._time_out(waiting, timeout_s)
            finally:
                self._receive_lock.release()
        if waiting.error is not None:
            raise waiting.error
        return waiting.doc

    def _time_out(self, waiting: InFlight, timeout_s: float) -> None:
        if not waiting.done:
            self._break(
                waiting.link,
                ResponseLostError(
                    f"no {waiting.request.api} response from {format_address(waiting.link.address)} "
                    f"within {timeout_s:.3g} s"
                ),
            )

    def _read_some(self, link: _Link, deadline: float) -> bool:
        """Hand out the responses buffered or readable on ``link`` before ``deadline``; False if
        none came in time (called with the receive lock held)."""
        try:
            frame = link.decoder.next_frame()
        except ProtocolError as exc:
            self._break(link, InvalidResponseError(str(exc)))
            return True
        if frame is not NEED_DATA:
            with self._state_lock:
                waiting = link.pending.popleft() if link.pending else None
            if waiting is None:
                self._break(link, InvalidResponseError("the broker sent a response to no request"))
                return True
            try:
                doc = decode_answer(frame, waiting.request)
                self._note_throttle(doc)
                waiting._settle(doc, None)
            except InvalidResponseError as exc:
                waiting._settle(None, exc)
                self._break(link, exc)
            if link.retired and not link.pending:
                self._break(link, ResponseLostError("connection renewed: its SASL session was about to expire"))
            return True
        if link.broken is not None:
            return True
        remaining_ms = max(0, int((deadline - time.monotonic()) * 1000))
        try:
            if link.tls:
                data = _tls_receive(link, remaining_ms)
                if data is None:
                    return remaining_ms > 0
            else:
                if not link.poller.poll(remaining_ms):
                    return False
                data = link.sock.recv(_RECV_SIZE)
        except (OSError, ValueError) as exc:  # ValueError: the socket was closed under us
            self._break(link, ResponseLostError(f"response from {format_address(link.address)} lost: {exc}"))
            return True
        if not data:
            self._break(link, ResponseLostError("connection closed by the broker"))
            return True
        link.decoder.receive_data(data)
        return True

    def _note_throttle(self, doc: dict) -> None:
        """KIP-219: a throttled answer (throttle_ms, a quota) holds this client's next request
        back until then, as the broker holds its reading; waiting on our side sends nothing the
        broker would only queue."""
        throttle = doc.get("throttle_ms")
        if throttle:
            self.throttled_until = max(self.throttled_until, time.monotonic() + throttle / 1000)

    def call(self, request: m.Request, timeout_s: float) -> dict | None:
        """One request; its response dict, or None when the request gets no response (acks=0)."""
        waiting = self.send(request, timeout_s)
        if waiting is None:
            return None
        return self.receive(waiting, timeout_s)

    def close(self) -> None:
        with self._send_lock:
            self._closed = True
            link = self._link
        if link is not None:  # requests already written may have been acted on: their fate is unknown
            self._break(link, ResponseLostError("connection closed by the client before the response came"))


#: At most this many broker connections per client besides the bootstrap one (a cluster's
#: brokers; a node beyond it is reached through the bootstrap connection, any broker answering
#: NOT_LEADER_OR_FOLLOWER for a partition it does not lead).
MAX_BROKER_CONNECTIONS = 64


class _Routed:
    """A request written as one or more parts (a part per leader): what :meth:`ClusterConnection.receive` merges."""

    __slots__ = ("parts", "request")

    def __init__(self, request: m.Request, parts: list) -> None:
        self.request = request
        #: (node, connection, InFlight) per part.
        self.parts = parts


class ClusterConnection:
    """A client's connections to a cluster, as Kafka's NetworkClient: the bootstrap connection
    (any live broker: metadata, admin, the group coordinator lookup; it fails over between the
    bootstrap servers and every broker a metadata response listed) and one connection per broker,
    opened when a request first goes to it. Which broker answers what is
    :class:`triolog.client.cluster.ClusterView`'s rule; every metadata response updates it.
    Same interface as :class:`SyncConnection` (call, send, receive, close); thread-safe."""

    def __init__(
        self,
        bootstrap: str | list[str] = DEFAULT_BOOTSTRAP,
        *,
        client_id: str | None = None,
        connect_timeout_s: float = 10.0,
        security: SecurityConfig | None = None,
        retry_backoff_s: float = 0.1,
        metadata_timeout_s: float = 30.0,
    ) -> None:
        self.main = SyncConnection(
            bootstrap, client_id=client_id, connect_timeout_s=connect_timeout_s, security=security
        )
        self.security = self.main.security
        self.client_id = client_id
        self.connect_timeout_s = connect_timeout_s
        self.metadata_timeout_s = metadata_timeout_s
        self.view = ClusterView(retry_backoff_s)
        self._nodes: dict[int, SyncConnection] = {}
        self._lock = threading.Lock()
        self._closed = False

    @property
    def max_in_flight_seen(self) -> int:
        with self._lock:
            conns = [self.main, *self._nodes.values()]
        return max(conn.max_in_flight_seen for conn in conns)

    @property
    def throttled_until(self) -> float:
        """Until when a broker throttles this client (a quota; the latest of the brokers')."""
        with self._lock:
            conns = [self.main, *self._nodes.values()]
        return max(conn.throttled_until for conn in conns)

    def _conn(self, node: int | None) -> SyncConnection:
        if node is ANY:
            return self.main
        address = self.view.address(node)
        with self._lock:
            conn = self._nodes.get(node)
            if conn is not None and (address is None or (conn.host, conn.port) == address):
                return conn
            if address is None or self._closed or (conn is None and len(self._nodes) >= MAX_BROKER_CONNECTIONS):
                return self.main
            if conn is not None:  # the broker moved: its old connection goes
                conn.close()
            conn = self._nodes[node] = SyncConnection(
                format_address(address),
                client_id=self.client_id,
                connect_timeout_s=self.connect_timeout_s,
                security=self.security,
            )
            return conn

    def _learn(self, request: m.Request, doc: dict | None) -> None:
        if doc is None:
            return
        if type(request) is m.MetadataRequest:
            self.view.learn(doc)
            known = set(self.main.addresses)
            for address in list(self.view.brokers.values()):
                if address not in known:  # the bootstrap connection may fail over to any live broker
                    self.main.addresses.append(address)
        else:
            self.view.note_response(request, doc)

    def _refresh(self, request: m.Request) -> None:
        """Before a partition request: the metadata of its topics whose leaders are not known."""
        topics = self.view.refresh_due(request, time.monotonic())
        if topics:
            lookup = m.MetadataRequest(id=0, topics=tuple(topics), allow_auto_topic_creation=False)
            try:
                self._learn(lookup, self.main.call(lookup, self.metadata_timeout_s))
            except Exception:  # (the request then goes to any broker; its answer tells the operation)
                pass

    def send(self, request: m.Request, timeout_s: float) -> _Routed | None:
        self._refresh(request)
        parts = []
        for index, (node, part) in enumerate(self.view.route(request)):
            conn = self._conn(node)
            try:
                waiting = conn.send(part, timeout_s)
            except RequestNotSentError as exc:
                self.view.note_broken(node)
                if index == 0:
                    raise
                raise ResponseLostError(f"a part of the {request.api} request was not sent: {exc}") from None
            if waiting is not None:
                parts.append((node, conn, waiting))
        return _Routed(request, parts) if parts else None

    def receive(self, handle: _Routed, timeout_s: float, give_up: bool = True) -> dict | None:
        deadline = time.monotonic() + timeout_s
        docs = []
        for node, conn, waiting in handle.parts:
            try:
                doc = conn.receive(waiting, max(0.0, deadline - time.monotonic()), give_up=give_up)
            except ResponseLostError:
                self.view.note_broken(node)
                raise
            if doc is None:
                return None  # (give_up=False: the parts already in keep their answers)
            docs.append(doc)
        doc = merge(docs)
        self._learn(handle.request, doc)
        return doc

    def call(self, request: m.Request, timeout_s: float) -> dict | None:
        handle = self.send(request, timeout_s)
        return None if handle is None else self.receive(handle, timeout_s)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            conns, self._nodes = list(self._nodes.values()), {}
        for conn in conns:
            conn.close()
        self.main.close()
