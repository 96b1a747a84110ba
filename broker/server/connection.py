"""One client connection of either listener: frames in through the sans-IO FrameDecoder, answers
out in request order, and the one request pipeline (:meth:`ClientConnection._handle_frame`).

The pipeline serves every request the same way whatever the listener: authentication state
(the SASL exchange, the pre-authentication rule, session expiry), quotas and throttling, long
polls and hang-ups, acks=0, timing, metrics and the answer to a handler failure. The listener is
only its codec (:mod:`.msgpack_codec`, :mod:`.kafka_codec`): a frame decoded into the handler's
request, an answer encoded, and where the two listeners differ on purpose, the codec says how.
Requests of one connection are handled one at a time, in the order they arrived (as Kafka
mutes a channel while it has a request in flight), so pipelined responses come back in order.
Fetch responses go out with the record bytes copied from the segment files by sendfile.

What one client can hold is bounded:

* memory: the connection reserves each frame's length from the broker's
  :class:`triolog.broker.server.memory_pool.RequestMemoryPool` (``queued.max.request.bytes``) as soon as
  its length prefix is read, before reading its body, until the request is answered; it reads at
  most ``READ_AHEAD_BYTES`` past the frame it is receiving, so that is all it holds unreserved.
  A frame no longer than ``READ_AHEAD_BYTES`` is not reserved at all (one connection holds at
  most one such frame plus its read-ahead, and ``max.connections`` bounds the connections), so
  a small request is never queued behind large frames whose senders parked them in the pool;
  decoding is bounded by :mod:`triolog.protocol.request_limits`, and a frame that holds more than
  ``msgpack_codec.INLINE_DECODE_OBJECTS`` msgpack objects is walked and decoded in a worker thread, not on the
  event loop;
* time: between requests a connection may stay silent ``connections.max.idle.ms``; once a
  frame's first byte is in, the whole frame must arrive within ``request.receive.timeout.ms``
  (time spent waiting for the pool not counted); a response that makes no progress for
  ``connections.max.idle.ms`` (a client that does not read) closes the connection, and with it
  the sendfile descriptors of a fetch;
* descriptors: a fetch response takes its segments' descriptors a few at a time as it sends
  (:class:`triolog.broker.server.fetch_descriptors.FetchResult`), each closed after its sendfile, so a client
  that does not read pins a bounded number, not one per partition it named;
* long polls: a fetch waiting for data watches its socket and ends when the client hangs up.

A client speaking another protocol to this listener (a Kafka client, curl, TLS) is recognised
from its first bytes, logged as such with what to do instead (at WARNING once per peer host and
protocol in ten minutes, at DEBUG in between: clients retry), counted by protocol (every
connection; not as a bad request or an oversized frame) and disconnected. HTTP and TLS clients
get the refusal any oversized length prefix gets, its message carrying the hint (for HTTP, where
this broker serves its metrics); a Kafka client gets no answer.
"""

from __future__ import annotations

import dataclasses
import math
import os
import socket
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, TypeVar, TypeVarTuple, cast

import outcome
import structlog
import trio

from triolog.broker.security.sasl import PRE_AUTHENTICATION_APIS, SaslServerSession
from triolog.broker.security.scram import AuthenticationFailed
from triolog.broker.security.tls import NoMatchingRule, certificate_principal
from triolog.config.broker_config import SASL_MECHANISMS
from triolog.config.principal_rules import PrincipalMappingRules
from triolog.protocol import messages as m
from triolog.protocol.errors import ErrorCode
from triolog.protocol.frames import (
    NEED_DATA,
    PREFIX_SIZE,
    FrameDecoder,
    FrameTooLargeError,
    foreign_protocol_of_prefix,
    frame_prefix,
)
from triolog.protocol.request_limits import RequestLimits

from .appends import TopicAppends
from .codec import Acks0Errors, Codec, Decoded, Refusal, entry_errors
from .fetch_descriptors import FetchResult
from .handlers import RequestHandler
from .memory_pool import RequestMemoryPool
from .msgpack_codec import MsgpackCodec
from .quota_manager import THROTTLE_EPSILON_S, ClientQuotaManager, ClientQuotas, throttle_ms
from .request_context import ANONYMOUS, RequestAccounting, RequestContext, handling_clock, request_context
from .tls_session import TlsClosed, TlsSession
from .wrong_protocol import ListenerWrongProtocolLog, WrongProtocolLog, wrong_protocol_hints

logger = structlog.get_logger("triolog.server")

T = TypeVar("T")
Ts = TypeVarTuple("Ts")

RECEIVE_BYTES = 256 * 1024
#: Bytes a read may take past the frame being received: the next frames' first bytes (often
#: whole small requests, or the next prefix) come with the current one instead of costing a read
#: each. They are held outside the request pool until their frame's length is reserved, so each
#: connection may hold this much beyond the pool, like its socket's own buffers.
READ_AHEAD_BYTES = 16 * 1024


class ConnectionStats(Protocol):
    """What a connection reports (``triolog.broker.metrics.ServerMetrics``); ``api`` None = not a readable request."""

    def request_done(
        self, api: str | None, code: int, latency_s: float | None = None, entry_errors: dict[int, int] | None = None
    ) -> None: ...

    def bytes_in(self, api: str | None, n: int) -> None: ...

    def bytes_out(self, api: str | None, n: int) -> None: ...

    def connection_closed_by_limit(self, limit: str) -> None: ...

    def wrong_protocol(self, protocol: str) -> None: ...

    def tls_handshake_failed(self) -> None: ...

    def authenticated(self, mechanism: str, reauthenticated: bool = False) -> None: ...

    def authentication_failed(self, mechanism: str) -> None: ...


class _SendStalled(Exception):
    """The client did not take any of a response for the stall limit."""


class ClientConnection:
    def __init__(
        self,
        stream: trio.SocketStream,
        handler: RequestHandler,
        *,
        max_frame_bytes: int,
        idle_timeout_s: float,
        peer: str,
        stats: ConnectionStats | None = None,
        receive_timeout_s: float = math.inf,
        pool: RequestMemoryPool | None = None,
        limits: RequestLimits = m.DEFAULT_REQUEST_LIMITS,
        decode_limiter: trio.CapacityLimiter | None = None,
        wrong_protocol_log: WrongProtocolLog | None = None,
        sasl: SaslServerSession | None = None,
        auth_failure_delay_s: float = 0.1,
        sasl_max_frame_bytes: int | None = None,
        auth_limiter: trio.CapacityLimiter | None = None,
        quotas: ClientQuotas | None = None,
        ssl_context: ssl.SSLContext | None = None,
        principal_rules: PrincipalMappingRules | None = None,
        listener: str = "listeners",
        security_protocol: str = "PLAINTEXT",
        codec: Codec | None = None,
    ):
        self.stream = stream
        #: The listener's codec: the msgpack protocol's unless given (the Kafka listener's).
        self.codec: Codec = codec if codec is not None else MsgpackCodec(limits)
        #: A TLS listener's connection: its TLS session (encrypted in user space, so fetched
        #: records are read from the segment and encrypted: no sendfile). None on plaintext.
        self._tls = TlsSession(ssl_context) if ssl_context is not None else None
        #: ssl.principal.mapping.rules: the user a client certificate names on an SSL listener.
        self.principal_rules = principal_rules
        self._socket = stream.socket
        #: The socket's descriptor, for the writes and reads done straight on it (plaintext only).
        self._fd = self._socket.fileno()
        #: TCP_CORK is on (a small fetch response being sent): taken off before any wait (_uncork).
        self._corked = False
        #: Who the client is (Kafka's KafkaPrincipal): ANONYMOUS until a verified client
        #: certificate or SASL says otherwise.
        self.principal = ANONYMOUS
        #: What each request's RequestContext says of where it came from.
        self.client_address = peer.rsplit(":", 1)[0]
        self.listener = listener
        self.security_protocol = security_protocol
        #: The TLS handshake completed (a close then sends close_notify).
        self.tls_established = False
        self.handler = handler
        #: A SASL listener's authentication of this client (None: the listener has no SASL). Until it
        #: completes, frames are bounded by ``sasl_max_frame_bytes`` (sasl.server.max.receive.size).
        self.sasl = sasl
        self.auth_failure_delay_s = auth_failure_delay_s
        #: The byte-rate quotas (None: no quota is enforced on this broker).
        self.quotas = quotas
        #: When (trio time) a throttled client may be read from again (KIP-219's muted channel).
        self._muted_until = 0.0
        #: The request being handled: when its frame was taken up (handling_clock), its accounting
        #: (time parked, the throttle its answer carries), and its request_percentage throttle
        #: once recorded.
        self._request_started = 0.0
        self._accounting = RequestAccounting()
        self._request_throttle_s: float | None = 0.0
        #: What the metrics count of the request being served (one at a time: reused).
        self._served = _Served()
        #: The worker threads SASL steps may use, shared by the broker's connections.
        self.auth_limiter = auth_limiter if auth_limiter is not None else trio.CapacityLimiter(1)
        self.max_frame_bytes = max_frame_bytes
        if sasl is not None and sasl_max_frame_bytes is not None:
            max_frame_bytes = min(max_frame_bytes, sasl_max_frame_bytes)
        self.decoder = FrameDecoder(max_frame_bytes)
        self.idle_timeout_s = idle_timeout_s
        self.receive_timeout_s = receive_timeout_s
        #: A response that makes no progress this long is abandoned (Kafka's idle expiry).
        self.send_stall_s = idle_timeout_s
        self.peer = peer
        self.stats = stats
        self.pool = pool if pool is not None else RequestMemoryPool(None)
        self.limits = limits
        self.decode_limiter = decode_limiter
        #: Shared by the broker's connections (it rate-limits the WARNINGs per peer host).
        self.wrong_protocol_log: ListenerWrongProtocolLog = self.codec.wrong_protocol_log(
            wrong_protocol_log if wrong_protocol_log is not None else WrongProtocolLog(wrong_protocol_hints(None))
        )
        #: True while a request is being handled: shutdown lets it finish, and cancels idle ones.
        self.busy = False
        #: Bytes read from the socket, and those of them that formed whole frames (for stats).
        self._received_bytes = 0
        self._framed_bytes = 0
        #: Bytes of the pool this connection holds for the frame it is receiving or handling.
        self._reserved = 0
        #: The frame received and not yet decoded.
        self._frame: bytes | None = None

    @property
    def _unauthenticated(self) -> bool:
        """A SASL listener's client that has not logged in (yet)."""
        return self.sasl is not None and not self.sasl.authenticated

    @property
    def reserved_bytes(self) -> int:
        """Bytes of the request pool this connection holds."""
        return self._reserved

    async def serve(self, shutdown: trio.Event) -> None:
        try:
            if self._tls is not None and not await self._tls_handshake(self._tls):
                return
            await self._serve(shutdown)
        except _SendStalled:
            logger.warning(
                "connection_send_stalled", peer=self.peer, stalled_s=self.send_stall_s, limit="connections.max.idle.ms"
            )
            self._closed_by("connections.max.idle.ms")
        finally:
            self._release()
            # Bytes that never formed a whole frame (cut off, or over the frame limit) still came in.
            if self.stats is not None and self._received_bytes > self._framed_bytes:
                self.stats.bytes_in(None, self._received_bytes - self._framed_bytes)

    async def _tls_handshake(self, tls: TlsSession) -> bool:
        """Complete the TLS handshake within the receive timeout (else the idle one); False, with a
        WARNING saying why, if it fails. A client speaking plaintext to this listener (its first
        byte is not a TLS handshake record's) is logged and counted as a wrong protocol."""
        timeout_s = self.receive_timeout_s if math.isfinite(self.receive_timeout_s) else self.idle_timeout_s
        with trio.move_on_after(timeout_s) as timer:
            try:
                first = await self._socket.recv(1, socket.MSG_PEEK)
            except OSError:
                return False
            if not first:
                return False
            if first[0] != _TLS_HANDSHAKE_RECORD:
                self._wrong_protocol("plaintext")
                return False
            try:
                while True:
                    done = tls.handshake()
                    out = tls.pending_output()
                    if out:
                        await self._send_raw(out)
                    if done:
                        break
                    raw = await self._receive_raw(RECEIVE_BYTES)
                    if not raw:
                        return False  # the client left mid-handshake
                    tls.feed(raw)
            except ssl.SSLError as exc:
                logger.warning("tls_handshake_failed", peer=self.peer, reason=exc.reason or str(exc))
                if self.stats is not None:
                    self.stats.tls_handshake_failed()
                out = tls.pending_output()  # the alert saying why, if OpenSSL made one
                if out:
                    try:
                        os.write(self._fd, out)
                    except OSError:
                        pass
                return False
        if timer.cancelled_caught:
            logger.warning("tls_handshake_timeout", peer=self.peer, timeout_s=timeout_s)
            self._closed_by("request.receive.timeout.ms")
            return False
        self.tls_established = True
        try:  # on a SASL_SSL listener SASL names the client; the certificate only on SSL
            self.principal = (
                certificate_principal(tls.getpeercert(), None if self.sasl is not None else self.principal_rules)
                or ANONYMOUS
            )
        except NoMatchingRule as exc:
            logger.warning("tls_principal_unmapped", peer=self.peer, reason=str(exc))
            if self.stats is not None:
                self.stats.authentication_failed("SSL")
            return False
        return True

    def _release(self) -> None:
        if self._reserved:
            self.pool.release(self._reserved)
            self._reserved = 0

    def _closed_by(self, limit: str) -> None:
        if self.stats is not None:
            self.stats.connection_closed_by_limit(limit)

    async def _serve(self, shutdown: trio.Event) -> None:
        while not shutdown.is_set():
            if self._muted_until:  # throttled: nothing is read from the client until then
                await trio.sleep_until(self._muted_until)
                self._muted_until = 0.0
            if not await self._receive_frame():
                return
            self.busy = True
            try:
                keep_open = await self._handle_frame()
            finally:
                self.busy = False
                self._release()  # answered: its bytes go back to the pool
            if not keep_open:
                return

    async def _receive_frame(self) -> bool:
        """Receive the next whole frame into ``_frame``, its length reserved from the pool; False
        when the connection is to close (EOF, a timeout, a frame refused for its length). Reads
        at most READ_AHEAD_BYTES past the frame being received."""
        decoder = self.decoder
        # request.receive.timeout.ms runs from the frame's first byte (for bytes read ahead with the
        # previous frame: from now), not counting time spent waiting for the pool.
        deadline = trio.current_time() + self.receive_timeout_s if decoder.pending_bytes else math.inf
        reserved = False
        while True:
            try:
                frame = decoder.next_frame()
            except FrameTooLargeError as exc:
                protocol = foreign_protocol_of_prefix(exc.length)
                if protocol is not None:
                    # Refused as any oversized prefix is (the protocol's answer), but logged and
                    # counted as what it is, with the hint in the answer too.
                    self._wrong_protocol(protocol)
                    await self._refuse_frame(f"{exc}; {self.wrong_protocol_log.hints[protocol]}")
                    return False
                logger.warning("frame_too_large", peer=self.peer, length=exc.length, limit="socket.request.max.bytes")
                self._closed_by("socket.request.max.bytes")
                await self._refuse_frame(str(exc))
                return False
            length = decoder.frame_length if frame is NEED_DATA else len(frame)
            if length is not None and not reserved and (length <= READ_AHEAD_BYTES or self._unauthenticated):
                # A small frame takes nothing from the pool: it is bounded per connection like the
                # read-ahead, so it never queues behind large frames parked in the pool. Nor does
                # one before SASL authentication (bounded by sasl.server.max.receive.size): a peer
                # that has not logged in must not hold memory the clients that have wait for.
                reserved = True
            if length is not None and not reserved:
                if not self.pool.fits(length):
                    logger.warning("frame_too_large", peer=self.peer, length=length, limit="queued.max.request.bytes")
                    self._closed_by("queued.max.request.bytes")
                    await self._refuse_frame(
                        f"frame of {length} bytes exceeds the limit of {self.pool.capacity} bytes the "
                        f"broker holds for all requests together (queued.max.request.bytes)"
                    )
                    return False
                paused_at = trio.current_time()
                await self.pool.acquire(length)  # backpressure: nothing more is read until it fits
                self._reserved = length
                reserved = True
                deadline += trio.current_time() - paused_at
            if frame is not NEED_DATA:
                self._framed_bytes += len(frame) + PREFIX_SIZE
                self._frame = frame
                return True
            started = decoder.pending_bytes > 0
            size = decoder.read_size(RECEIVE_BYTES, READ_AHEAD_BYTES)
            # Bytes already there are read at once (the client's next request is often in);
            # the send of every response is the checkpoint that keeps this fair.
            tls = self._tls
            data: bytes | None
            if tls is not None:
                data = await self._tls_read_now(tls, size)
            else:
                try:
                    data = os.read(self._fd, size)
                except BlockingIOError:
                    data = None
                except OSError as exc:
                    raise trio.BrokenResourceError(f"receive failed: {exc}") from exc
            if data is not None:
                timer = None
            else:
                timeout_at = deadline if started else trio.current_time() + self.idle_timeout_s
                with trio.move_on_at(timeout_at) as timer:
                    if tls is not None:
                        while data is None:
                            await trio.lowlevel.wait_readable(self._socket)
                            data = await self._tls_read_now(tls, size)
                    else:
                        data = await self.stream.receive_some(size)
            if timer is not None and timer.cancelled_caught:
                if started:
                    logger.warning(
                        "connection_receive_timeout",
                        peer=self.peer,
                        received=decoder.pending_bytes,
                        frame_length=decoder.frame_length,
                        timeout_s=self.receive_timeout_s,
                        limit="request.receive.timeout.ms",
                    )
                    self._closed_by("request.receive.timeout.ms")
                else:
                    logger.debug("connection_idle_closed", peer=self.peer, idle_s=self.idle_timeout_s)
                    self._closed_by("connections.max.idle.ms")
                return False
            if not data:
                return False
            if not started:
                deadline = trio.current_time() + self.receive_timeout_s
            self._received_bytes += len(data)
            decoder.receive_data(data)

    async def _tls_read_now(self, tls: TlsSession, size: int) -> bytes | None:
        """Up to ``size`` bytes of plaintext without waiting: decrypted from what was read, else
        from one non-blocking read of the socket; None if a wait is needed, b"" at the end."""
        try:
            data = tls.read(size)
            if data:
                return data
            try:
                raw = os.read(self._fd, RECEIVE_BYTES)
            except BlockingIOError:
                return None
            except OSError as exc:
                raise trio.BrokenResourceError(f"receive failed: {exc}") from exc
            if not raw:
                return b""
            tls.feed(raw)
            data = tls.read(size)
        except TlsClosed:
            return b""
        except ssl.SSLError as exc:
            raise trio.BrokenResourceError(f"TLS failed: {exc.reason or exc}") from exc
        out = tls.pending_output()  # a TLS 1.3 key update's answer, say
        if out:
            await self._send_raw(out, checkpoint=False)
        return data or None

    async def _receive_raw(self, size: int) -> bytes:
        """Bytes from the socket, waiting for them if none are there."""
        while True:
            try:
                return os.read(self._fd, size)
            except BlockingIOError:
                await trio.lowlevel.wait_readable(self._socket)
            except OSError as exc:
                raise trio.BrokenResourceError(f"receive failed: {exc}") from exc

    def close_tls(self) -> None:
        """Send close_notify if the socket takes it at once (a client that does not read is not
        waited for); the caller closes the socket."""
        if self._tls is not None and self.tls_established:
            try:
                os.write(self._fd, self._tls.close_notify())
            except OSError:
                pass

    def _wrong_protocol(self, protocol: str, **details) -> None:
        """Log and count a client speaking ``protocol``; the caller answers (or not) and closes."""
        host = self.peer.rsplit(":", 1)[0]  # "host:port", the host possibly IPv6
        self.wrong_protocol_log.log(host, protocol, peer=self.peer, **details)
        if self.stats is not None:
            self.stats.wrong_protocol(protocol)

    async def _refuse_frame(self, message: str) -> None:
        """Answer a frame refused for its length, if the codec answers one; the caller closes."""
        answer = self.codec.refuse_frame(message)
        if answer is not None:
            await self._send_bytes(None, answer)

    async def _run(self, large: bool, fn: Callable[[*Ts], T], *args: *Ts) -> T:
        """``fn(*args)``: on the event loop, or for ``large`` work (a codec's translations and
        encodings, which are pure) in a worker thread."""
        if not large:
            return fn(*args)
        return await self.handler.workers.run_sync(fn, *args, limiter=self.decode_limiter)

    async def _handle_frame(self) -> bool:
        """Serve the request in ``_frame``, whatever the listener (its codec decodes and encodes);
        False if the connection is to close. The frame is dropped once decoded.

        A request is counted once its outcome is known, with the time from here to its answer
        written (or the write failing); a request cancelled before it has an outcome (shutdown
        grace expired, client gone) is not counted."""
        start = trio.current_time()
        self._begin_request()
        codec = self.codec
        served = self._served
        served.api = served.code = served.entry_errors = None
        frame, self._frame = self._frame, None
        assert frame is not None  # _serve handles a frame once _receive_frame has stored it
        frame_bytes = len(frame) + PREFIX_SIZE
        if codec.raw_sasl_tokens:
            return await self._raw_sasl_token(frame)
        try:
            foreign = codec.foreign_protocol(frame)
            if foreign is not None:  # not counted as a request: the client speaks another protocol
                # No answer: it could not read ours. Closing ends its attempt at once.
                self._wrong_protocol(foreign[0], **foreign[1])
                return False
            peek = codec.peek_api(frame)
            if peek is not None:  # refused from its header, nothing decoded
                served.api = peek.api
                if not self._admitted(peek.api, served, peek.fields):
                    return False
            decoded = codec.decode(frame, may_defer=True)
            if decoded is None:  # too large to decode on the event loop (decoding is pure)
                decoded = await self.handler.workers.run_sync(codec.decode, frame, limiter=self.decode_limiter)
            del frame
            if type(decoded) is Refusal:
                served.api, served.code = decoded.api, decoded.code
                if decoded.warning is not None:
                    logger.warning(decoded.warning[0], peer=self.peer, **decoded.warning[1])
                if decoded.answer is not None:
                    await self._send_bytes(decoded.api, decoded.answer)
                if self._unauthenticated and not decoded.close and not decoded.answered_before_authentication:
                    # a peer that has not logged in gets one answer, then the door
                    logger.warning(
                        "request_before_authentication",
                        peer=self.peer,
                        api=decoded.api,
                        reason=decoded.reason,
                        action="answered, connection closed",
                    )
                    return False
                return not decoded.close
            served.api = api = decoded.api
            if peek is None and not self._admitted(api, served):
                if self._unauthenticated:  # answered ILLEGAL_SASL_STATE (where the codec answers), then closed
                    served.code = ErrorCode.ILLEGAL_SASL_STATE
                    answer = codec.refusal(
                        decoded,
                        ErrorCode.ILLEGAL_SASL_STATE,
                        f"{api} before authentication: this listener requires SASL "
                        f"(sasl_handshake, then sasl_authenticate) first",
                    )
                    if answer is not None:
                        await self._send_bytes(api, answer)
                return False
            request = decoded.request
            # The SASL exchange's own requests: answered by the connection (they change who the
            # client is), not by the handler.
            if type(request) is m.SaslHandshakeRequest or type(request) is m.SaslAuthenticateRequest:
                sasl_response, keep_open = await self._sasl_request(request)
                served.code = sasl_response.error_code
                await self._send_bytes(api, codec.sasl_answer(decoded, sasl_response))
                return keep_open
            ctx = self._context(api, decoded.version, decoded.correlation_id, decoded.client_id)
            quotas = self.quotas
            if quotas is not None:
                if api == "produce":
                    self._meter(quotas.produce, decoded.client_id, frame_bytes)
                elif type(request) is m.FetchRequest:
                    request = decoded.request = self._capped_fetch(quotas, request)
            # The handler's answer (its type follows from the API: see codec.Codec).
            response: object
            if decoded.direct is not None:  # answered by the codec, without the handler
                errors = codec.direct_acks0_failure(decoded)
                if errors is not None:  # refused whole: an acks=0 produce gets no answer
                    served.code = errors[0][2] if errors else ErrorCode.INVALID_REQUEST
                    self._close_for_acks0(decoded, errors)
                    return False
                response = None
            else:
                try:
                    assert request is not None  # a codec leaves it out only for its own (direct) answer
                    # Hot, handled straight away: no codec follows these up with another request,
                    # and they are no long poll.
                    if (
                        type(request) is m.ProduceRequest
                        or type(request) is m.ApiVersionsRequest
                        or (type(request) is m.FetchRequest and not request.max_wait_ms)
                    ):
                        response = await self.handler.handle(request, ctx)
                    else:
                        response = await self._handle(decoded, request, ctx)
                except Exception as exc:
                    logger.exception("request_failed", peer=self.peer, api=api, id=decoded.correlation_id)
                    served.code = ErrorCode.UNKNOWN_SERVER_ERROR
                    answer = codec.failure(decoded, f"unexpected server error: {type(exc).__name__}: {exc}")
                    if answer is None:  # an acks=0 produce, or an API without an error code: closed
                        if decoded.unacknowledged_produce and codec.closes_after_failed_acks0():
                            self._close_for_acks0(decoded, [], "the handler failed on it (request_failed above)")
                        return False
                    await self._send_bytes(api, answer)
                    return True
                if response is None:  # the client hung up during a long poll
                    logger.debug("long_poll_abandoned", peer=self.peer, id=decoded.correlation_id)
                    return False
                if type(response) is FetchResult:
                    try:
                        self._meter_fetch(response, decoded.client_id)
                        served.code, served.entry_errors = ErrorCode.NONE, entry_errors(response.response)
                        parts = await self._run(
                            codec.large_answer(decoded, response), codec.fetch_parts, decoded, response
                        )
                        await self._send_parts(api, response, parts, m.parts_length(parts))
                    finally:
                        response.close()
                    return True
                if decoded.unacknowledged_produce:  # never answered
                    errors = _produce_errors(cast("list[TopicAppends]", response))  # the produce handler's answer
                    if errors and codec.closes_after_failed_acks0():
                        served.code = errors[0][2]
                        self._close_for_acks0(decoded, errors)
                        return False
                    served.code = ErrorCode.NONE
                    self._request_throttle(decoded.client_id)  # no answer to carry it: muted only
                    await trio.lowlevel.checkpoint()  # no send, so no send's checkpoint: stay fair
                    return True
            throttle = self._answer_throttle(decoded)
            if codec.large_answer(decoded, response):  # translated and encoded in a worker thread
                payload = await self._run(True, self._encode, codec, decoded, response, throttle, served)
            else:
                payload = self._encode(codec, decoded, response, throttle, served)
            await self._send_bytes(api, payload)
            return True
        finally:
            if self.stats is not None:
                self.stats.bytes_in(served.api, frame_bytes)
                if served.code is not None:
                    self.stats.request_done(
                        served.api, int(served.code), trio.current_time() - start, served.entry_errors
                    )

    def _admitted(self, api: str | None, served: _Served, fields: dict | None = None) -> bool:
        """Whether a request of ``api`` may be served now: before SASL authentication only the
        PRE_AUTHENTICATION_APIS (else ILLEGAL_SASL_STATE, and the connection closes); on a
        session past its lifetime (KIP-368) only the handshake that begins a re-authentication
        (else the connection closes unanswered, as Kafka's SocketServer closes an expired channel)."""
        if self._unauthenticated and api not in PRE_AUTHENTICATION_APIS:
            served.code = ErrorCode.ILLEGAL_SASL_STATE
            logger.warning(
                "request_before_authentication",
                peer=self.peer,
                **(fields or {"api": api}),
                action="connection closed (sasl_handshake and sasl_authenticate first)",
            )
            return False
        return not self._session_expired(api == "sasl_handshake")

    async def _handle(self, decoded: Decoded, request: m.Request | list[m.Request], ctx: RequestContext) -> object:
        """The handler's answer to ``request`` (a list of answers for a list of requests, each
        followed up as the codec says); None if the client hung up during a long poll."""
        if type(request) is m.FetchRequest and request.max_wait_ms > 0:
            result = await self._handle_watching_for_hangup(request, ctx)
            return None if result is None else result.unwrap()
        if isinstance(request, list):
            responses = []
            yielded = trio.current_time()
            for one in request:
                responses.append(await self._handle_one(decoded, one, ctx))
                # A coordinator call need not yield: let the others run every few milliseconds.
                if trio.current_time() - yielded > YIELD_AFTER_S:
                    await trio.lowlevel.checkpoint()
                    yielded = trio.current_time()
            return responses
        return await self._handle_one(decoded, request, ctx)

    async def _handle_one(self, decoded: Decoded, request: m.Request, ctx: RequestContext) -> object:
        """The handler's answer to one request, and to the requests the codec follows it up with."""
        response = await self.handler.handle(request, ctx)
        while (after := self.codec.follow_up(decoded, response, request)) is not None:
            request = after
            response = await self.handler.handle(request, ctx)
        return response

    def _answer_throttle(self, decoded: Decoded) -> int:
        """The throttle (ms) the answer carries: request_percentage (recorded now, the handling
        done), and a produce's byte rate."""
        request_s = self._request_throttle(decoded.client_id)
        throttle = self._accounting.throttle_ms
        return max(throttle, throttle_ms(request_s)) if request_s else throttle

    @staticmethod
    def _encode(codec: Codec, decoded: Decoded, response: object, throttle: int, served: _Served) -> bytes:
        """The answer's bytes (its code and entries counted in ``served``)."""
        try:
            encoded = codec.encode(decoded, response, throttle)
        except Exception:
            served.code = ErrorCode.UNKNOWN_SERVER_ERROR  # a bug on our side; the connection closes
            raise
        served.code, served.entry_errors = encoded.error_code, encoded.entry_errors
        return encoded.payload

    async def _raw_sasl_token(self, token: bytes) -> bool:
        """One SASL message after SaslHandshake v0 (a bare frame), answered with a bare frame; a
        failure closes the connection without an answer, as Kafka does for v0 clients."""
        session = self.sasl
        # Raw tokens follow a SaslHandshake v0 answered without error: only a SASL listener's session does.
        assert session is not None
        reauthenticating = session.reauthenticating
        try:
            answer = await self._authenticate_step(session, token)
        except AuthenticationFailed as exc:
            await self._authentication_failed(session, exc, handshake_version=0)
            return False
        if answer is None:  # the client hung up while its step waited
            return False
        if session.authenticated:
            self.codec.raw_sasl_tokens = False
            self._authenticated(session, reauthenticating)
        await self._send_bytes("sasl_authenticate", answer)
        return True

    def _close_for_acks0(self, decoded: Decoded, errors: Acks0Errors, reason: str | None = None) -> None:
        """Log why an acks=0 produce closes the connection (the caller closes)."""
        shown = [
            f"{topic}-{partition}: {_code_name(code)}" + (f" ({message})" if message else "")
            for topic, partition, code, message in errors[:_ERRORS_LOGGED]
        ]
        if len(errors) > _ERRORS_LOGGED:
            shown.append(f"... and {len(errors) - _ERRORS_LOGGED} more partitions")
        logger.warning(
            "kafka_produce_acks0_failed",
            peer=self.peer,
            correlation_id=decoded.correlation_id,
            api_version=decoded.version,
            errors=shown,
            reason=reason or "partitions failed",
            action="connection closed, as Kafka closes it for a failed acks=0 produce (it sends no "
            "response): the producer refreshes its metadata and reconnects",
        )

    async def _sasl_request(
        self, request: m.SaslHandshakeRequest | m.SaslAuthenticateRequest
    ) -> tuple[m.Response, bool]:
        """(the answer, keep the connection open) for a SASL request (the connection's, not the
        handler's: it changes who the client is).

        As Kafka: a refused mechanism, a failed authentication (answered after
        connection.failed.authentication.delay.ms) and a request out of order each close the
        connection after their answer."""
        session = self.sasl
        if session is None:  # a SASL request on a listener without SASL: answered, harmless
            return _refusal(
                request,
                ErrorCode.ILLEGAL_SASL_STATE,
                "this listener does not authenticate with SASL (it is not a SASL_PLAINTEXT or SASL_SSL listener)",
            ), True
        if type(request) is m.SaslHandshakeRequest:
            was_authenticated = session.authenticated
            code, message = session.handshake(request.mechanism, trio.current_time())
            if code == ErrorCode.ILLEGAL_SASL_STATE and was_authenticated:
                # Kafka hands it to its request handlers, which refuse it: the connection stays
                return m.SaslHandshakeResponse(
                    id=request.id, error_code=code, error_message=message, mechanisms=session.mechanisms
                ), True
            if code:
                logger.warning(
                    "authentication_failed",
                    peer=self.peer,
                    mechanism=_shown(request.mechanism),
                    reason=message,
                    reauthentication=was_authenticated,
                )
                self._auth_failed(request.mechanism)
            return m.SaslHandshakeResponse(
                id=request.id, error_code=code, error_message=message, mechanisms=session.mechanisms
            ), not code
        if type(request) is m.SaslAuthenticateRequest:
            reauthenticating = session.reauthenticating
            try:
                answer = await self._authenticate_step(session, request.auth_bytes)
            except AuthenticationFailed as exc:
                await self._authentication_failed(session, exc, reauthentication=reauthenticating)
                return m.SaslAuthenticateResponse(id=request.id, error_code=exc.code, error_message=str(exc)), False
            if answer is None:  # the client hung up while its step waited
                raise trio.BrokenResourceError("the client hung up during SASL authentication")
            lifetime_ms = 0
            if session.authenticated:
                lifetime_ms = self._authenticated(session, reauthenticating)
            return m.SaslAuthenticateResponse(id=request.id, auth_bytes=answer, session_lifetime_ms=lifetime_ms), True
        raise AssertionError(f"not a SASL request: {request.api}")

    @property
    def _user(self) -> str:
        """The quota user: the principal's name (ANONYMOUS without authentication)."""
        return self.principal.partition(":")[2]

    def _mute(self, throttle_s: float) -> None:
        """Read nothing more from the client for ``throttle_s`` (KIP-219's muted channel)."""
        if throttle_s:
            self._muted_until = max(self._muted_until, trio.current_time() + throttle_s)

    def _meter(self, quota: ClientQuotaManager, client_id: str | None, nbytes: int) -> float:
        """Count ``nbytes`` against the client's quota; if it is over, its answer says how long
        it is throttled (the request's accounting) and nothing more is read from it until then."""
        throttle_s = quota.record(self._user, client_id or "", nbytes)
        self._accounting.throttle_ms = throttle_ms(throttle_s)
        self._mute(throttle_s)
        return throttle_s

    def _begin_request(self) -> None:
        """A request's frame is taken up: fresh accounting; its handling time runs from now, if
        any entity has a request_percentage (otherwise the request costs nothing here)."""
        accounting = self._accounting  # one request at a time: reused
        accounting.parked_s, accounting.throttle_ms = 0.0, 0
        if self.quotas is None or not self.quotas.request.active:
            self._request_throttle_s = 0.0
            return
        self._request_started = handling_clock()
        self._request_throttle_s = None

    def _context(self, api: str, version: int, correlation_id: int | None, client_id: str | None) -> RequestContext:
        """The context of the request being served (its accounting begun with its frame)."""
        return request_context(
            api,
            version,
            correlation_id,
            client_id,
            self.principal,
            self.client_address,
            self.listener,
            self.security_protocol,
            self._accounting,
        )

    def _request_throttle(self, client_id: str | None) -> float:
        """Record the request's handling time against the client's request_percentage (once per
        request; later calls return the same throttle) and mute the client if it is over.

        What is measured (Kafka measures its request handler thread's time): the wall time from
        the frame taken up to the response ready to send, decoding and the work on the event loop
        and in worker threads included; not the time parked (RequestAccounting: a fetch's wait
        for data, a produce's wait for its fsync, a join or sync waiting for the group), nor
        the time to send the response. Real time (request_context.handling_clock), also on a
        MockClock's loop; the client's allowance, and its mute, follow the loop's clock."""
        if self._request_throttle_s is None:
            quotas = self.quotas
            assert quotas is not None  # the throttle is left to record (None) only with quotas: _begin_request
            handled = handling_clock() - self._request_started - self._accounting.parked_s
            throttle_s = quotas.request.record(self._user, client_id or "", max(handled, 0.0) * 100)
            self._mute(throttle_s)
            self._request_throttle_s = throttle_s
        return self._request_throttle_s

    def _capped_fetch(self, quotas: ClientQuotas, request: m.FetchRequest) -> m.FetchRequest:
        """As Kafka: a fetch under a consumer_byte_rate asks for at most what the quota lets
        through in its whole window span (quota x quota.window.num x quota.window.size.seconds),
        so no single response is larger than what could ever pass."""
        cap = quotas.fetch.max_value_in_window(self._user, request.client_id or "")
        if cap is None or cap >= request.max_bytes:
            return request
        cap = max(int(cap), 1)
        return dataclasses.replace(request, max_bytes=cap, min_bytes=min(request.min_bytes, cap))

    def _meter_fetch(self, result: FetchResult, client_id: str | None) -> None:
        """Kafka's throttled fetch: a client still in debt for its consumer_byte_rate, or over
        its request_percentage, is answered without records (its partitions' offsets only) and
        charged nothing (Kafka records, then unrecords, the response); the answer carries the
        longer throttle and the client is muted for it. Otherwise the records go out and their
        bytes are charged (Kafka: the response's size)."""
        request_s = self._request_throttle(client_id)
        if self.quotas is None or result.response is None:
            return
        debt_s = self.quotas.fetch.throttle_time(self._user, client_id or "")
        if debt_s > THROTTLE_EPSILON_S or request_s:
            throttle_s = max(debt_s, request_s)
            self._mute(throttle_s)
            result.close()  # no regions: nothing is read from the segments
            result.response = self.codec.throttled_fetch(result.response, throttle_ms(throttle_s))
            return
        throttle_s = max(
            self._meter(self.quotas.fetch, client_id, sum(region.length for region in result.regions)), request_s
        )
        if throttle_s:
            result.response = dataclasses.replace(result.response, throttle_ms=throttle_ms(throttle_s))

    def _authenticated(self, session: SaslServerSession, reauthenticated: bool = False) -> int:
        """The exchange completed: act as its principal; the session's lifetime in ms (0: forever)."""
        principal, mechanism = session.principal, session.mechanism
        assert principal is not None and mechanism is not None  # a completed exchange has named both
        lifetime_ms = session.begin_session(trio.current_time())
        self.principal = principal
        self.decoder.max_frame_bytes = self.max_frame_bytes
        logger.debug(
            "reauthenticated" if reauthenticated else "authenticated",
            peer=self.peer,
            principal=principal,
            mechanism=mechanism,
            session_lifetime_ms=lifetime_ms,
        )
        if self.stats is not None:
            self.stats.authenticated(mechanism, reauthenticated)
        return lifetime_ms

    def _session_expired(self, handshake: bool) -> bool:
        """KIP-368: a request on a session past its lifetime closes the connection unanswered,
        unless it is the handshake that begins a re-authentication."""
        session = self.sasl
        if session is None or session.expires_at is None:
            return False
        now = trio.current_time()
        if not session.expired(now) or (handshake and session.may_reauthenticate(now)):
            return False
        logger.info(
            "sasl_session_expired",
            peer=self.peer,
            principal=self.principal,
            action="connection closed: the client did not re-authenticate (connections.max.reauth.ms)",
        )
        self._closed_by("connections.max.reauth.ms")
        return True

    async def _authentication_failed(
        self, session: SaslServerSession, exc: AuthenticationFailed, **step: object
    ) -> None:
        """A SASL exchange failed: logged (with what ``step`` says of it) and counted, then
        answered or closed by the caller only after connection.failed.authentication.delay.ms,
        which slows password guessing."""
        logger.warning(
            "authentication_failed",
            peer=self.peer,
            mechanism=session.mechanism,
            reason=str(exc),
            delay_ms=round(self.auth_failure_delay_s * 1000),
            **step,
        )
        self._auth_failed(session.mechanism)
        await trio.sleep(self.auth_failure_delay_s)

    def _auth_failed(self, mechanism: str | None) -> None:
        """Counted by mechanism; a name no listener offers is "unsupported" (the client chooses
        it: a label per name would let anyone grow the metrics without bound)."""
        if self.stats is not None:
            self.stats.authentication_failed(mechanism if mechanism in SASL_MECHANISMS else "unsupported")

    async def _authenticate_step(self, session: SaslServerSession, auth_bytes: bytes) -> bytes | None:
        """One SASL message answered in a worker thread (PBKDF2 for PLAIN is milliseconds of CPU),
        of the few authentication may use (``auth_limiter``): logins never queue decoding, nor
        decoding logins. None if the client hung up meanwhile (its queued work is dropped)."""
        result: outcome.Outcome[bytes] | None = None
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._cancel_on_hangup, nursery.cancel_scope)
            try:
                result = outcome.Value(
                    await self.handler.workers.run_sync(session.authenticate, auth_bytes, limiter=self.auth_limiter)
                )
            except AuthenticationFailed as exc:
                result = outcome.Error(exc)
            nursery.cancel_scope.cancel()
        return None if result is None else result.unwrap()

    async def _handle_watching_for_hangup(
        self, request: m.Request, ctx: RequestContext
    ) -> outcome.Outcome[object] | None:
        """The handler's outcome, or None if the client hung up (EOF or reset) first.

        A long poll may wait up to max_wait_ms (days, if the client says so); a client that
        goes away must not keep its task, its notifier registration and the broker's shutdown
        waiting that long. While the request is handled nothing else is read from the socket,
        so readability means either the client's next request (it is alive) or its hang-up.
        """
        result: outcome.Outcome[object] | None = None
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._cancel_on_hangup, nursery.cancel_scope)
            try:
                result = outcome.Value(await self.handler.handle(request, ctx))
            except Exception as exc:
                result = outcome.Error(exc)
            nursery.cancel_scope.cancel()
        return result  # None when the hang-up cancelled the handler (Cancelled is no Exception)

    async def _cancel_on_hangup(self, scope: trio.CancelScope) -> None:
        sock = self._socket
        try:
            data = await sock.recv(1, socket.MSG_PEEK)
        except OSError:  # reset
            data = b""
        if not data:
            scope.cancel()

    async def _send_all(self, data: bytes, checkpoint: bool = True) -> None:
        """``data`` to the client; _SendStalled if it takes none of it for ``send_stall_s``.

        Written straight to the non-blocking socket; only when the socket is full does it wait
        (for writability, under the stall limit), so a response that fits costs one write. The
        checkpoint every send owes the other tasks (``checkpoint``) comes after the write, off
        the client's round trip: the response is on its way while the scheduler runs the others."""
        if self._tls is not None:
            return await self._send_all_tls(self._tls, data)
        await self._send_raw(data, checkpoint)

    async def _send_raw(self, data: bytes | memoryview, checkpoint: bool = True) -> None:
        """``data`` as it is to the socket (see _send_all)."""
        fd = self._fd
        view = memoryview(data)
        sent = 0
        waited = False
        while sent < len(view):
            try:
                sent += os.write(fd, view[sent:])
                continue
            except BlockingIOError:
                if self._uncork():
                    continue
            waited = True
            with trio.move_on_after(self.send_stall_s) as timer:
                await trio.lowlevel.wait_writable(self._socket)
            if timer.cancelled_caught:
                raise _SendStalled
        if checkpoint and not waited:
            await trio.lowlevel.checkpoint()

    async def _send_all_tls(self, tls: TlsSession, data: bytes | memoryview) -> None:
        """``data`` encrypted, TLS_SEND_BYTES at a time (the ciphertext held is bounded so), each
        piece sent under the stall limit."""
        view = memoryview(data)
        for start in range(0, len(view), TLS_SEND_BYTES):
            await self._send_raw(tls.encrypt(view[start : start + TLS_SEND_BYTES]), checkpoint=False)
        await trio.lowlevel.checkpoint()

    async def _send_region(self, fd: int, position: int, count: int) -> None:
        """Segment bytes to the client: sendfile on plaintext; on TLS read and encrypted in a
        worker thread (OpenSSL lets the event loop run meanwhile), TLS_SEND_BYTES at a time. The
        session is used by one thread at a time: this connection's sends are sequential."""
        if self._tls is None:
            return await _sendfile(self._socket, fd, position, count, self.send_stall_s, self._uncork)
        while count > 0:
            ciphertext, n = await self.handler.workers.run_sync(
                _read_and_encrypt, self._tls, fd, min(count, TLS_SEND_BYTES), position, limiter=self.handler.limiter
            )
            if not n:
                raise trio.BrokenResourceError("segment file ended before the fetched region")
            await self._send_raw(ciphertext, checkpoint=False)
            position += n
            count -= n

    async def _send_bytes(self, api: str | None, payload: bytes) -> None:
        await self._send_all(frame_prefix(len(payload)) + payload)
        if self.stats is not None:
            self.stats.bytes_out(api, len(payload) + PREFIX_SIZE)

    def _uncork(self) -> bool:
        """Take the cork off, if it is on (True then): what it holds goes out.

        Before any wait for the socket to take more: on loopback a segment carries 64 KiB, so the
        cork may hold back what the receiver's window would let out while the send buffer fills,
        and a corked write finding the buffer full waited for room that only the cork's 200 ms
        ceiling made (every replica fetch of a
        64 KiB batch took 200 ms: acks=all writes of such batches ran at 3,000 records/s)."""
        if not self._corked or _TCP_CORK is None:
            return False
        self._corked = False
        try:
            self._socket.setsockopt(socket.IPPROTO_TCP, _TCP_CORK, 0)
        except OSError:
            pass
        return True

    async def _send_parts(self, api: str | None, result: FetchResult, parts: list, total: int) -> None:
        """The frame prefix and the bytes of ``parts`` through the stream; its record regions (the
        parts that are not bytes: ExternalBin, or a Kafka response's RecordsRegion, each with the
        FetchRegion as ``ref``) by sendfile; ``total`` is their length together.

        A small response is corked meanwhile (TCP_CORK, where there is one): the prefix, the
        msgpack bytes around the records and the records leave in as few segments as their size
        allows, instead of one segment (and one wake-up of the client) per write. A large one is
        not: corked, a multi-megabyte fetch ran at a fifth of its uncorked speed (1 KiB records,
        8 MiB fetches: 39 against 211 MB/s), and it fills whole segments anyway."""
        pending = bytearray(frame_prefix(total))
        if _TCP_CORK is not None and len(parts) > 1 and total <= _CORK_MAX_BYTES:
            try:
                self._socket.setsockopt(socket.IPPROTO_TCP, _TCP_CORK, 1)
                self._corked = True
            except OSError:
                pass
        try:
            for part in parts:
                if not isinstance(part, (bytes, bytearray)):
                    if pending:
                        await self._send_all(bytes(pending), checkpoint=False)
                        pending.clear()
                    region = part.ref
                    if region.fd is None:  # a few descriptors at a time, however many partitions
                        try:
                            await self.handler.workers.run_sync(result.open_descriptors, limiter=self.handler.limiter)
                        except FileNotFoundError as exc:  # retention removed the segment meanwhile
                            raise trio.BrokenResourceError(f"segment removed before it was sent: {exc}") from exc
                    await self._send_region(region.fd, region.position, region.length)
                    result.close_region(region)
                else:
                    pending.extend(part)
            await self._send_all(bytes(pending), checkpoint=False)
        finally:
            self._uncork()  # out with what is left
        await trio.lowlevel.checkpoint()  # the send's checkpoint
        if self.stats is not None:
            self.stats.bytes_out(api, total + PREFIX_SIZE)


#: A TLS listener sends (and reads from segments) this much at a time: TLS records are at most
#: 16 KiB, so this is several records per send, and a bounded buffer per connection.
TLS_SEND_BYTES = 256 * 1024
#: The first byte of every TLS connection (a handshake record's content type).
_TLS_HANDSHAKE_RECORD = 0x16
#: A request that is a list of internal requests (FindCoordinator v4's keys, OffsetFetch v8's
#: groups, DescribeGroups' chunks) yields to the other connections once its calls took this long.
YIELD_AFTER_S = 0.002
#: An acks=0 produce's failed partitions named in its WARNING at most.
_ERRORS_LOGGED = 10


@dataclass(slots=True)
class _Served:
    """What the metrics count of the request being served, as it becomes known."""

    api: str | None = None
    code: int | None = None
    entry_errors: dict[int, int] | None = None


def _produce_errors(results: list[TopicAppends]) -> Acks0Errors:
    """(topic, partition, error code, message) of the failed partitions of a produce."""
    return [
        (topic.name, row.partition, int(row.error.code), row.error.message)
        for topic in results
        for row in topic.partitions
        if row.error is not None  # (a partition either appended, its info, or refused, its error)
    ]


def _code_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:  # a number Kafka has no code for
        return f"error {code}"


#: Linux's TCP_CORK (None elsewhere): hold partial segments until uncorked.
_TCP_CORK: int | None = getattr(socket, "TCP_CORK", None)
#: The largest response sent corked (see _send_parts).
_CORK_MAX_BYTES = 64 * 1024


def _read_and_encrypt(tls: TlsSession, fd: int, count: int, position: int) -> tuple[bytes, int]:
    data = os.pread(fd, count, position)
    return (tls.encrypt(data) if data else b""), len(data)


def _shown(name: str, limit: int = 64) -> str:
    """A client-chosen name as a log line shows it: bounded."""
    return name if len(name) <= limit else name[:limit] + f"... ({len(name)} characters)"


def _refusal(request: m.Request, code: ErrorCode, message: str) -> m.Response:
    """The response refusing ``request`` as a whole, its API's other fields empty."""
    return m.RESPONSE_TYPES.get(request.api, m.Response)(id=request.id, error_code=code, error_message=message)


async def _sendfile(
    sock, fd: int, position: int, count: int, stall_s: float = math.inf, before_wait=lambda: False
) -> None:
    """Zero-copy file-to-socket copy on trio's non-blocking socket; _SendStalled if the socket
    accepts nothing for ``stall_s``. Tries at once and waits for writability only when the socket
    is full (the caller's send ends with a checkpoint), after ``before_wait()`` (True: try again
    first)."""
    while count > 0:
        try:
            sent = os.sendfile(sock.fileno(), fd, position, count)
        except BlockingIOError:
            if before_wait():
                continue
            with trio.move_on_after(stall_s) as timer:
                await trio.lowlevel.wait_writable(sock)
            if timer.cancelled_caught:
                raise _SendStalled from None
            continue
        if sent == 0:  # the file shrank under us: the frame cannot be completed
            raise trio.BrokenResourceError("segment file ended before the fetched region")
        position += sent
        count -= sent
