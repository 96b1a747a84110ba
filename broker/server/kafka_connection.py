"""One Kafka client's connection: Kafka's request frames in, Kafka's responses out.

The connection machinery is the msgpack listener's (:class:`ClientConnection`: the same frame
decoder, request memory pool, time limits, in-order answers, sendfile); what differs is the
codec. Each frame is decoded with kio (:mod:`triolog.protocol.kafka.requests`), translated by its
API's adapter into the broker's internal request, answered by the same RequestHandler as the
msgpack protocol, and the answer translated back into the kio response of the request's version.
A fetch's record bytes still go from the segment files to the socket with sendfile: the Kafka
response is written around them (:class:`triolog.protocol.kafka.schema.RecordsRegion`).

What Kafka does with bad input, this listener does: an oversized frame, a request that does not
parse, or an API or version it does not serve closes the connection, each with a WARNING saying
why (an ApiVersions request of a version it does not know is answered, with v0 and the versions
served, so the client can pick one).
"""

from __future__ import annotations

import dataclasses
import datetime
from dataclasses import dataclass
from typing import Any

import structlog
import trio

from triolog.protocol import messages as m
from triolog.protocol.errors import ErrorCode
from triolog.protocol.frames import PREFIX_SIZE
from triolog.protocol.kafka.apis import Adapter, Direct, KafkaContext
from triolog.protocol.kafka.request_bounds import RequestTooLarge, check_request
from triolog.protocol.kafka.requests import (
    KafkaRequest,
    MalformedRequest,
    UnsupportedVersion,
    decode_request,
    encode_response,
)
from triolog.protocol.kafka.schema import build, field_names, parts_length, response_class
from triolog.protocol.kafka.sasl_apis import SASL_AUTHENTICATE_KEY, SASL_HANDSHAKE_KEY
from triolog.protocol.kafka.served import ADAPTERS, API_VERSIONS_KEY, SERVED_VERSIONS, unsupported_api_versions_body

from triolog.broker.security.scram import AuthenticationFailed

from .connection import ClientConnection, _entry_errors, _entry_fields
from .handlers import FetchResult, produce_response
from .quota_manager import throttle_ms
from .request_context import RequestContext
from .wrong_protocol import MSGPACK_MAP_FIRST, KafkaListenerLog

logger = structlog.get_logger("triolog.server")

class KafkaConnection(ClientConnection):
    """A connection of the Kafka listener (``kafka.listeners``)."""

    def __init__(self, stream: trio.SocketStream, handler, *, context: KafkaContext,
                 adapters: dict[int, Adapter] = ADAPTERS, served: dict[int, tuple[int, int]] = SERVED_VERSIONS,
                 **kwargs):
        super().__init__(stream, handler, **kwargs)
        # The broker's log (its per-host rate limit shared with the msgpack listener), with the
        # hints of this listener: what it speaks is Kafka's protocol, not triolog's msgpack.
        self.wrong_protocol_log = KafkaListenerLog(self.wrong_protocol_log)
        self.context = context
        #: After a SaslHandshake v0, the SASL exchange's messages come as bare frames.
        self._raw_sasl_tokens = False
        self.adapters = adapters
        self.served = served

    def _throttled_fetch_response(self, response: m.FetchResponse, throttle: int) -> m.FetchResponse:
        """Kafka's throttled fetch (FetchContext.getThrottledResponse): no partitions at all."""
        return dataclasses.replace(response, throttle_ms=throttle, topics=())

    async def _refuse_frame(self, message: str) -> None:
        """Kafka answers nothing to a frame it refuses for its length: the caller closes."""

    async def _handle_frame(self) -> bool:
        start = trio.current_time()
        self._begin_request()
        label: str | None = None
        code: int | None = None
        entry_errors: dict[int, int] | None = None
        frame, self._frame = self._frame, None
        frame_bytes = len(frame) + PREFIX_SIZE
        if self._raw_sasl_tokens:
            return await self._raw_sasl_token(frame)
        try:
            if frame and frame[0] in MSGPACK_MAP_FIRST:
                self._wrong_protocol("msgpack")
                return False
            if self._unauthenticated and len(frame) >= 2:
                api_key = int.from_bytes(frame[:2], "big", signed=True)
                if api_key not in _PRE_AUTHENTICATION_KEYS:  # refused from its header: nothing decoded
                    adapter = self.adapters.get(api_key)
                    label = adapter.label if adapter is not None else None
                    logger.warning("request_before_authentication", peer=self.peer, api_key=api_key,
                                   api=adapter.name if adapter is not None else None,
                                   action="connection closed, as Kafka closes it (SaslHandshake and SaslAuthenticate first)")
                    code = ErrorCode.ILLEGAL_SASL_STATE
                    return False
            if self.sasl is not None and len(frame) >= 2 and self._session_expired(
                    int.from_bytes(frame[:2], "big", signed=True) == SASL_HANDSHAKE_KEY):
                return False  # unanswered, as Kafka's SocketServer closes an expired channel
            try:
                request, large = await self._decode(frame)
            except UnsupportedVersion as exc:
                adapter = self.adapters.get(exc.api_key)
                label = adapter.label if adapter is not None else None
                code = ErrorCode.UNSUPPORTED_VERSION
                return await self._unsupported(exc)
            except MalformedRequest as exc:
                logger.warning("kafka_request_too_large" if isinstance(exc, RequestTooLarge) else
                               "kafka_request_malformed", peer=self.peer, api_key=exc.api_key,
                               api_version=exc.version, correlation_id=exc.correlation_id, reason=str(exc),
                               action="connection closed, as Kafka closes it")
                adapter = self.adapters.get(exc.api_key) if exc.api_key is not None else None
                label = adapter.label if adapter is not None else None
                code = ErrorCode.INVALID_REQUEST
                return False
            del frame
            adapter = self.adapters[request.api_key]
            label = adapter.label
            ctx = self._context(label, request.version, request.correlation_id, request.client_id)
            # A large request's translation runs in a worker thread, as its decoding did.
            try:
                internal = await self._run(large, adapter.to_internal, request, self.context)
            except Exception as exc:  # a request kio read but no translation can take: malformed
                logger.warning("kafka_request_malformed", peer=self.peer, api=adapter.name,
                               api_version=request.version, correlation_id=request.correlation_id,
                               reason=f"{type(exc).__name__}: {exc}", action="connection closed")
                code = ErrorCode.INVALID_REQUEST
                return False
            if type(internal) in _SASL_REQUESTS:
                response, keep_open = await self._sasl_request(internal)
                code = response.error_code
                if request.api_key == SASL_HANDSHAKE_KEY and request.version == 0 and not code:
                    # SaslHandshake v0: the mechanism's messages follow as bare frames, no header.
                    self._raw_sasl_tokens = True
                parts = encode_response(request.api_key, request.version, request.correlation_id,
                                        adapter.to_kafka(response, request, self.context))
                await self._send_bytes(label, b"".join(parts))
                return keep_open
            if self.quotas is not None and request.api_key == PRODUCE:
                self._meter(self.quotas.produce, request.client_id, frame_bytes)
            if self.quotas is not None and type(internal) is m.FetchRequest:
                internal = self._capped_fetch(internal)
            heavy = large  # translating and encoding the answer is worth a worker thread
            if type(internal) is Direct:
                body = internal.body
                if request.api_key == PRODUCE and request.body.acks == 0:
                    # Refused whole (a partition named twice): Kafka answers no acks=0 request.
                    errors = _kio_produce_errors(body)
                    code = errors[0][2] if errors else ErrorCode.INVALID_REQUEST
                    self._close_for_acks0(request, errors)
                    return False
            else:
                answer = await self._answer(adapter, request, internal, ctx, large)
                if answer is None:
                    return False  # the client left a long poll
                body, response, heavy = answer.body, answer.response, answer.heavy
                if body is None:  # produce with acks=0: never answered, the connection closed if it failed
                    if answer.failed:
                        code = ErrorCode.UNKNOWN_SERVER_ERROR
                        self._close_for_acks0(request, [], "the handler failed on it (request_failed above)")
                        return False
                    entry_errors = _entry_errors(response)
                    errors = _produce_errors(response)
                    if errors:
                        code = errors[0][2]
                        self._close_for_acks0(request, errors)
                        return False
                    code = ErrorCode.NONE
                    self._request_throttle(request.client_id)  # no answer to carry it: muted only
                    await trio.lowlevel.checkpoint()
                    return True
                if answer.failed:
                    code = ErrorCode.UNKNOWN_SERVER_ERROR
                elif type(response) is FetchResult:
                    try:
                        code, entry_errors = ErrorCode.NONE, _entry_errors(response.response)
                        parts = await self._run(heavy, encode_response, request.api_key, request.version,
                                                request.correlation_id, body)
                        await self._send_parts(label, response, parts, parts_length(parts))
                    finally:
                        response.close()
                    return True
                elif type(response) is list:  # the answers of a batched request: the body's code
                    entry_errors = _merged_entry_errors(response)
                elif response is not None:
                    code, entry_errors = response.error_code, _entry_errors(response)
            if code is None:
                code = _top_level_code(body)
            body = _with_throttle(body, self._request_throttle(request.client_id))
            payload = await self._run(heavy, _encoded, request.api_key, request.version, request.correlation_id,
                                      body)
            await self._send_bytes(label, payload)
            return True
        finally:
            if self.stats is not None:
                self.stats.bytes_in(label, frame_bytes)
                if code is not None:
                    self.stats.request_done(label, int(code), trio.current_time() - start, entry_errors)

    async def _raw_sasl_token(self, token: bytes | bytearray) -> bool:
        """One SASL message after SaslHandshake v0 (a bare frame), answered with a bare frame; a
        failure closes the connection without an answer, as Kafka does for v0 clients."""
        session = self.sasl
        reauthenticating = session.reauthenticating
        try:
            answer = await self._authenticate_step(session, bytes(token))
        except AuthenticationFailed as exc:
            logger.warning("authentication_failed", peer=self.peer, mechanism=session.mechanism, reason=str(exc),
                           delay_ms=round(self.auth_failure_delay_s * 1000), handshake_version=0)
            self._auth_failed(session.mechanism)
            await trio.sleep(self.auth_failure_delay_s)
            return False
        if answer is None:  # the client hung up while its step waited
            return False
        if session.authenticated:
            self._raw_sasl_tokens = False
            self._authenticated(session, reauthenticating)
        await self._send_bytes("sasl_authenticate", answer)
        return True

    def _close_for_acks0(self, request: KafkaRequest, errors: list[tuple[str, int, int, str | None]],
                         reason: str | None = None) -> None:
        """Log why an acks=0 produce closes the connection (the caller closes): Kafka answers none,
        and closes instead when it failed, which is how the producer learns to refresh metadata."""
        shown = [f"{topic}-{partition}: {_code_name(code)}" + (f" ({message})" if message else "")
                 for topic, partition, code, message in errors[:_ERRORS_LOGGED]]
        if len(errors) > _ERRORS_LOGGED:
            shown.append(f"... and {len(errors) - _ERRORS_LOGGED} more partitions")
        logger.warning("kafka_produce_acks0_failed", peer=self.peer, correlation_id=request.correlation_id,
                       api_version=request.version, errors=shown, reason=reason or "partitions failed",
                       action="connection closed, as Kafka closes it for a failed acks=0 produce (it sends no "
                              "response): the producer refreshes its metadata and reconnects")

    async def _decode(self, frame: bytes | bytearray) -> tuple[KafkaRequest, bool]:
        """(the request in ``frame``, whether it is large): bounded first (see request_bounds); a
        large frame, or one of many entries, is read in a worker thread, so that decoding it never
        holds the event loop (and its translations and answer go there too)."""
        if len(frame) <= INLINE_DECODE_BYTES:
            entries = check_request(frame, self.limits.max_partitions, self.served)
            if entries <= INLINE_ENTRIES:
                return decode_request(frame, self.served), False
        outcome = await self.handler.workers.run_sync(_decode_in_thread, frame, self.served,
                                                      self.limits.max_partitions, limiter=self.decode_limiter)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome, True

    async def _run(self, large: bool, fn, *args):
        """``fn(*args)``: on the event loop, or for ``large`` work in a worker thread (translations
        and encodings are pure), so that no request holds the other connections up for long."""
        if not large:
            return fn(*args)
        return await self.handler.workers.run_sync(fn, *args, limiter=self.decode_limiter)

    async def _answer(self, adapter: Adapter, request: KafkaRequest, internal: m.Request, ctx: RequestContext,
                      large: bool = False):
        """The answer to ``internal``; one without a body for a produce with acks=0, which is never
        answered; None if the client hung up during a long poll. A handler failure is answered
        with the API's error body, UNKNOWN_SERVER_ERROR in every entry, as Kafka answers an
        unexpected error (``failed``; no body for acks=0). ``large``: the request's frame was;
        its answer is translated in a worker."""
        try:
            if type(internal) is m.FetchRequest and internal.max_wait_ms > 0:
                result = await self._handle_watching_for_hangup(internal, ctx)
                if result is None:
                    logger.debug("long_poll_abandoned", peer=self.peer, id=internal.id)
                    return None
                response = result.unwrap()
            elif type(internal) is m.ProduceRequest:
                response = produce_response(internal.id, await self.handler.handle(internal, ctx),
                                            ctx.accounting.throttle_ms)
                if internal.acks == 0:
                    return _Answer(None, response)
            elif type(internal) is list:
                response = []
                yielded = trio.current_time()
                for one in internal:
                    response.append(await self._handle_one(adapter, request, one, ctx))
                    # A coordinator call need not yield: let the others run every few milliseconds.
                    if trio.current_time() - yielded > YIELD_AFTER_S:
                        await trio.lowlevel.checkpoint()
                        yielded = trio.current_time()
            else:
                response = await self._handle_one(adapter, request, internal, ctx)
        except Exception as exc:
            logger.exception("request_failed", peer=self.peer, api=adapter.name, id=request.correlation_id)
            if type(internal) is m.ProduceRequest and internal.acks == 0:
                return _Answer(None, None, failed=True)  # never answered: the caller closes the connection
            message = f"unexpected server error: {type(exc).__name__}: {exc}"
            body = await self._run(large, self._error_body, adapter, request, ErrorCode.UNKNOWN_SERVER_ERROR, message)
            if body is None:
                raise
            return _Answer(body, None, large, failed=True)
        if type(response) is FetchResult:
            try:
                self._meter_fetch(response, request.client_id)
                heavy = large or _response_entries(response.response) > INLINE_ENTRIES
                return _Answer(await self._run(heavy, adapter.to_kafka, response.response, request, self.context),
                               response, heavy)
            except BaseException:
                response.close()
                raise
        heavy = large or _response_entries(response) > INLINE_ENTRIES
        body = await self._run(heavy, adapter.to_kafka, response, request, self.context)
        return _Answer(body, response, heavy)

    async def _handle_one(self, adapter: Adapter, request: KafkaRequest, internal: m.Request, ctx: RequestContext):
        response = await self.handler.handle(internal, ctx)
        if adapter.follow_up is not None:
            while (after := adapter.follow_up(response, internal, request)) is not None:
                internal = after
                response = await self.handler.handle(internal, ctx)
        return response

    def _error_body(self, adapter: Adapter, request: KafkaRequest, code: int, message: str):
        if adapter.error_body is not None:
            return adapter.error_body(request, self.context, code, message)
        cls = response_class(request.api_key, request.version)
        if "error_code" in field_names(cls):
            values = {"error_code": code}
            if "error_message" in field_names(cls):
                values["error_message"] = message
            return build(cls, values)
        return None

    async def _unsupported(self, exc: UnsupportedVersion) -> bool:
        """ApiVersions of an unknown version is answered (v0, UNSUPPORTED_VERSION, the versions
        served); any other API or version outside the table closes the connection, as Kafka does."""
        if exc.api_key == API_VERSIONS_KEY:
            body = unsupported_api_versions_body()
            parts = encode_response(API_VERSIONS_KEY, 0, exc.correlation_id, body)
            await self._send_bytes("api_versions", b"".join(parts))
            return True
        adapter = self.adapters.get(exc.api_key)
        logger.warning("kafka_request_unsupported", peer=self.peer, api_key=exc.api_key,
                       api=adapter.name if adapter is not None else None, api_version=exc.version,
                       correlation_id=exc.correlation_id, reason=str(exc),
                       action="connection closed, as Kafka closes it (ApiVersions lists what is served)")
        return False


#: What a client may ask before it has authenticated on a SASL listener: ApiVersions, SaslHandshake,
#: SaslAuthenticate.
_PRE_AUTHENTICATION_KEYS = frozenset({API_VERSIONS_KEY, SASL_HANDSHAKE_KEY, SASL_AUTHENTICATE_KEY})
_SASL_REQUESTS = (m.SaslHandshakeRequest, m.SaslAuthenticateRequest)

@dataclass(slots=True)
class _Answer:
    """The handler's answer to one Kafka request: the kio body to send (None: none is sent, a
    produce with acks=0), the handler's response it was translated from, whether encoding it is
    worth a worker thread; ``failed``: the handler raised, the body is the API's error body
    (UNKNOWN_SERVER_ERROR)."""

    body: Any
    response: Any
    heavy: bool = False
    failed: bool = False

#: Frames up to this long are bounded, decoded and translated on the event loop (well under a
#: millisecond); longer ones in a worker thread, and their answers translated and encoded there.
INLINE_DECODE_BYTES = 64 * 1024
#: An answer of more entries (topics, partitions, groups...: a Metadata of every topic, say) is
#: translated and encoded in a worker thread, whatever its request's size.
INLINE_ENTRIES = 1000
#: A request that is a list of internal requests (FindCoordinator v4's keys, OffsetFetch v8's
#: groups, DescribeGroups' chunks) yields to the other connections once its calls took this long.
YIELD_AFTER_S = 0.002


def _with_throttle(body, throttle_s: float):
    """``body`` carrying the request_percentage throttle in its throttle_time_ms if that is longer
    than its own (every Kafka response that has the field; ApiVersions v0 has none)."""
    if not throttle_s or "throttle_time" not in field_names(type(body)):
        return body
    throttle = datetime.timedelta(milliseconds=throttle_ms(throttle_s))
    return dataclasses.replace(body, throttle_time=max(body.throttle_time, throttle))


def _encoded(api_key: int, version: int, correlation_id: int, body) -> bytes:
    return b"".join(encode_response(api_key, version, correlation_id, body))


def _merged_entry_errors(responses: list) -> dict[int, int] | None:
    counts: dict[int, int] = {}
    for response in responses:
        for code, n in (_entry_errors(response) or {}).items():
            counts[code] = counts.get(code, 0) + n
    return counts or None


def _response_entries(response) -> int:
    """The entries of a handler's answer (a list of answers too), two levels deep, counted up to
    just past INLINE_ENTRIES: how long translating and encoding it takes, roughly."""
    if response is None:
        return 0
    answers = response if type(response) is list else (response,)
    count = len(answers) if type(response) is list else 0
    for answer in answers:
        for name in _entry_fields(type(answer)):
            for entry in getattr(answer, name):
                count += 1
                for sub in _entry_fields(type(entry)):
                    count += len(getattr(entry, sub))
                if count > INLINE_ENTRIES:
                    return count
    return count


def _bounded_decode(frame, served, max_partitions: int) -> KafkaRequest:
    check_request(frame, max_partitions, served)
    return decode_request(frame, served)


def _decode_in_thread(frame, served, max_partitions: int) -> KafkaRequest | Exception:
    """The request, or the refusal returned rather than raised: a raised error's traceback would
    keep the frame's bytes alive through the worker thread's outcome (see connection.py)."""
    try:
        return _bounded_decode(frame, served, max_partitions)
    except (MalformedRequest, UnsupportedVersion) as exc:
        exc.__traceback__ = exc.__context__ = exc.__cause__ = None
        return exc


#: An acks=0 produce's failed partitions named in its WARNING at most.
_ERRORS_LOGGED = 10
PRODUCE = 0


def _produce_errors(response: m.ProduceResponse) -> list[tuple[str, int, int, str | None]]:
    """(topic, partition, error code, message) of the failed partitions of ``response``."""
    return [(t.name, p.partition, int(p.error_code), p.error_message)
            for t in response.topics for p in t.partitions if p.error_code]


def _kio_produce_errors(body) -> list[tuple[str, int, int, str | None]]:
    """The same of a kio produce response body (a Direct answer)."""
    return [(t.name, p.index, int(p.error_code), p.error_message)
            for t in body.responses for p in t.partition_responses if p.error_code]


def _code_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:  # a Kafka code triolog's table does not name (INVALID_REQUIRED_ACKS...)
        return f"error {code}"


def _top_level_code(body) -> int:
    code = getattr(body, "error_code", 0)
    return int(getattr(code, "value", code))
