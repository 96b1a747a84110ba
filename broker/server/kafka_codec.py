"""The Kafka listener's codec (``kafka.listeners``), sans I/O: each frame decoded with kio
(:mod:`triolog.protocol.kafka.requests`), bounded first (request_bounds), translated by its API's
adapter into the broker's internal request; the answer translated back into the kio response of
the request's version. A fetch's records still go from the segment files to the socket by
sendfile: the Kafka response is written around them (RecordsRegion parts).

What Kafka does with bad input, this codec does: an oversized frame, a request that does not
parse, or an API or version it does not serve closes the connection unanswered, each with a
WARNING saying why (an ApiVersions request of a version it does not know is answered, with v0 and
the versions served, so the client can pick one). A request before SASL authentication is refused
from its header, nothing decoded. A throttled fetch lists no partitions; an acks=0 produce is
never answered, and closes the connection if it failed; after SaslHandshake v0 the mechanism's
messages come as bare frames.
"""

from __future__ import annotations

import dataclasses
import datetime
from typing import cast, overload

from triolog.protocol import messages as m
from triolog.protocol.errors import ErrorCode
from triolog.protocol.kafka.apis import Adapter, ApiKey, Direct, KafkaContext
from triolog.protocol.kafka.request_bounds import RequestTooLarge, check_request
from triolog.protocol.kafka.requests import (
    KafkaRequest,
    MalformedRequest,
    UnsupportedVersion,
    decode_request,
    encode_response,
)
from triolog.protocol.kafka.sasl_apis import SASL_HANDSHAKE_KEY
from triolog.protocol.kafka.schema import build, field_names, response_class
from triolog.protocol.kafka.served import ADAPTERS, API_VERSIONS_KEY, SERVED_VERSIONS, unsupported_api_versions_body
from triolog.protocol.request_limits import RequestLimits

from .appends import TopicAppends
from .codec import Acks0Errors, Decoded, EncodedResponse, Peek, Refusal, entry_errors, entry_fields
from .fetch_descriptors import FetchResult
from .handlers import produce_response
from .wrong_protocol import MSGPACK_MAP_FIRST, KafkaListenerLog, WrongProtocolLog

__all__ = ["INLINE_DECODE_BYTES", "INLINE_ENTRIES", "KafkaCodec", "Peek"]

#: Frames up to this long are bounded, decoded and translated on the event loop (well under a
#: millisecond); longer ones in a worker thread, and their answers translated and encoded there.
INLINE_DECODE_BYTES = 64 * 1024
#: An answer of more entries (topics, partitions, groups...: a Metadata of every topic, say) is
#: translated and encoded in a worker thread, whatever its request's size.
INLINE_ENTRIES = 1000
#: Produce's API key (ApiKey's members come from kio's index at import: mypy knows none by name).
_PRODUCE_KEY = ApiKey["PRODUCE"]


class KafkaCodec:
    #: Kafka answers nothing to a frame it refuses for its length.
    answers_refused_frames = False

    def __init__(
        self,
        context: KafkaContext,
        limits: RequestLimits = m.DEFAULT_REQUEST_LIMITS,
        *,
        adapters: dict[int, Adapter] = ADAPTERS,
        served: dict[int, tuple[int, int]] = SERVED_VERSIONS,
    ):
        #: What the answers say about this broker (its advertised address, cluster id).
        self.context = context
        self.limits = limits
        self.adapters = adapters
        self.served = served
        #: After a SaslHandshake v0, the SASL exchange's messages come as bare frames.
        self.raw_sasl_tokens = False

    def wrong_protocol_log(self, shared: WrongProtocolLog) -> KafkaListenerLog:
        """The broker's log (its per-host rate limit shared with the msgpack listener), with this
        listener's hints: what it speaks is Kafka's protocol, not triolog's msgpack."""
        return KafkaListenerLog(shared)

    def foreign_protocol(self, frame: bytes) -> tuple[str, dict] | None:
        if frame and frame[0] in MSGPACK_MAP_FIRST:
            return "msgpack", {}
        return None

    def peek_api(self, frame: bytes) -> Peek | None:
        """The API from the frame's api_key, nothing decoded (None: too short to say)."""
        if len(frame) < 2:
            return None
        api_key = int.from_bytes(frame[:2], "big", signed=True)
        adapter = self.adapters.get(api_key)
        return Peek(
            adapter.label if adapter is not None else None,
            {"api_key": api_key, "api": adapter.name if adapter is not None else None},
        )

    @overload
    def decode(self, frame: bytes) -> Decoded | Refusal: ...

    @overload
    def decode(self, frame: bytes, *, may_defer: bool) -> Decoded | Refusal | None: ...

    def decode(self, frame: bytes, *, may_defer: bool = False) -> Decoded | Refusal | None:
        """The request in ``frame``, bounded first (see request_bounds) and translated, or its
        refusal; None (only ``may_defer``) if it is too large, or of too many entries, to read on
        the event loop (its translations and answer then go to a worker thread too)."""
        try:
            if may_defer and len(frame) > INLINE_DECODE_BYTES:
                return None
            entries = check_request(frame, self.limits.max_partitions, self.served)
            if may_defer and entries > INLINE_ENTRIES:
                return None
            request = decode_request(frame, self.served)
        except UnsupportedVersion as exc:
            return self._unsupported(exc)
        except MalformedRequest as exc:
            adapter = self.adapters.get(exc.api_key) if exc.api_key is not None else None
            return Refusal(
                adapter.label if adapter is not None else None,
                ErrorCode.INVALID_REQUEST,
                warning=(
                    "kafka_request_too_large" if isinstance(exc, RequestTooLarge) else "kafka_request_malformed",
                    dict(
                        api_key=exc.api_key,
                        api_version=exc.version,
                        correlation_id=exc.correlation_id,
                        reason=str(exc),
                        action="connection closed, as Kafka closes it",
                    ),
                ),
            )
        adapter = self.adapters[request.api_key]
        try:
            internal = adapter.to_internal(request, self.context)
        except Exception as exc:  # a request kio read but no translation can take: malformed
            return Refusal(
                adapter.label,
                ErrorCode.INVALID_REQUEST,
                warning=(
                    "kafka_request_malformed",
                    dict(
                        api=adapter.name,
                        api_version=request.version,
                        correlation_id=request.correlation_id,
                        reason=f"{type(exc).__name__}: {exc}",
                        action="connection closed",
                    ),
                ),
            )
        direct = internal.body if type(internal) is Direct else None
        return Decoded(
            adapter.label,
            request.version,
            request.correlation_id,
            request.client_id,
            None if direct is not None else internal,
            direct,
            not may_defer,
            request,
            adapter,
        )

    def _unsupported(self, exc: UnsupportedVersion) -> Refusal:
        """ApiVersions of an unknown version is answered (v0, UNSUPPORTED_VERSION, the versions
        served); any other API or version outside the table closes the connection, as Kafka does."""
        if exc.api_key == API_VERSIONS_KEY:
            answer = b"".join(encode_response(API_VERSIONS_KEY, 0, exc.correlation_id, unsupported_api_versions_body()))
            return Refusal(
                "api_versions", ErrorCode.UNSUPPORTED_VERSION, answer, close=False, answered_before_authentication=True
            )
        adapter = self.adapters.get(exc.api_key)
        return Refusal(
            adapter.label if adapter is not None else None,
            ErrorCode.UNSUPPORTED_VERSION,
            warning=(
                "kafka_request_unsupported",
                dict(
                    api_key=exc.api_key,
                    api=adapter.name if adapter is not None else None,
                    api_version=exc.version,
                    correlation_id=exc.correlation_id,
                    reason=str(exc),
                    action="connection closed, as Kafka closes it (ApiVersions lists what is served)",
                ),
            ),
        )

    def refuse_frame(self, message: str) -> None:
        """Kafka answers nothing to a frame it refuses for its length."""
        return None

    def refusal(self, decoded: Decoded, code: ErrorCode, message: str) -> None:
        """Kafka answers nothing to a request it refuses whole (before authentication): it closes."""
        return None

    def sasl_answer(self, decoded: Decoded, response: m.Response) -> bytes:
        wire = decoded.wire
        if wire.api_key == SASL_HANDSHAKE_KEY and wire.version == 0 and not response.error_code:
            # SaslHandshake v0: the mechanism's messages follow as bare frames, no header.
            self.raw_sasl_tokens = True
        return _encoded(wire, decoded.adapter.to_kafka(response, wire, self.context))

    def follow_up(self, decoded: Decoded, response: object, internal: m.Request) -> m.Request | None:
        """The internal request to make next in ``internal``'s place, or None (a Kafka version that
        expects in one exchange what the internal API does in two)."""
        follow_up = decoded.adapter.follow_up
        return None if follow_up is None else follow_up(response, internal, decoded.wire)

    def failure(self, decoded: Decoded, message: str) -> bytes | None:
        """The API's error body, UNKNOWN_SERVER_ERROR in every entry, as Kafka answers an
        unexpected error; None (the connection closes) for an acks=0 produce, or an API whose
        response has no error code."""
        if decoded.unacknowledged_produce:
            return None
        adapter, wire = decoded.adapter, decoded.wire
        code = ErrorCode.UNKNOWN_SERVER_ERROR
        if adapter.error_body is not None:
            body = adapter.error_body(wire, self.context, code, message)
        else:
            cls = response_class(wire.api_key, wire.version)
            if "error_code" not in field_names(cls):
                return None
            values: dict[str, object] = {"error_code": code}
            if "error_message" in field_names(cls):
                values["error_message"] = message
            body = build(cls, values)
        return _encoded(wire, body)

    def closes_after_failed_acks0(self) -> bool:
        """Kafka sends no answer to an acks=0 produce, and closes instead when it failed: how the
        producer learns to refresh its metadata."""
        return True

    def direct_acks0_failure(self, decoded: Decoded) -> Acks0Errors | None:
        """The failed partitions of an acks=0 produce the adapter refused whole (a partition named
        twice), None if the request is not one."""
        if decoded.direct is None or decoded.wire.api_key != _PRODUCE_KEY or decoded.wire.body.acks != 0:
            return None
        return [
            (t.name, p.index, int(p.error_code), p.error_message)
            for t in decoded.direct.responses
            for p in t.partition_responses
            if p.error_code
        ]

    def throttled_fetch(self, response: m.FetchResponse, throttle: int) -> m.FetchResponse:
        """Kafka's throttled fetch (FetchContext.getThrottledResponse): no partitions at all."""
        return dataclasses.replace(response, throttle_ms=throttle, topics=())

    def large_answer(self, decoded: Decoded, response: object) -> bool:
        """Whether translating and encoding the answer is worth a worker thread."""
        if type(response) is FetchResult:
            response = response.response
        return decoded.large or _response_entries(response) > INLINE_ENTRIES

    def fetch_parts(self, decoded: Decoded, result: FetchResult) -> list:
        wire = decoded.wire
        return encode_response(
            wire.api_key,
            wire.version,
            wire.correlation_id,
            decoded.adapter.to_kafka(result.response, wire, self.context),
        )

    def encode(self, decoded: Decoded, response: object, throttle_ms: int) -> EncodedResponse:
        """The kio answer's bytes, carrying ``throttle_ms`` in its throttle_time_ms if that is longer
        than its own (every Kafka response that has the field; ApiVersions v0 has none)."""
        wire = decoded.wire
        if decoded.direct is not None:
            body = decoded.direct
            code, counts = None, None
        else:
            request = decoded.request
            if type(request) is m.ProduceRequest:
                # the produce handler's answer: its partitions' TopicAppends
                response = produce_response(request.id, cast("list[TopicAppends]", response), throttle_ms)
            body = decoded.adapter.to_kafka(response, wire, self.context)
            if type(response) is list:  # the answers of a batched request: the body's code
                code, counts = None, _merged_entry_errors(response)
            else:
                # One request's answer is a response: a fetch's FetchResult goes to fetch_parts,
                # and the EncodedResponse of msgpack's api_versions is a Direct answer here.
                response = cast(m.Response, response)
                code, counts = response.error_code, entry_errors(response)
        if code is None:
            code = _top_level_code(body)
        if throttle_ms:
            # (annotated `type`: mypy wrongly finds a type[Any] unhashable as field_names' cache key)
            body_class: type = type(body)
            if "throttle_time" in field_names(body_class):
                throttle = datetime.timedelta(milliseconds=throttle_ms)
                body = dataclasses.replace(body, throttle_time=max(body.throttle_time, throttle))
        return EncodedResponse(_encoded(wire, body), code, counts)


def _encoded(wire: KafkaRequest, body) -> bytes:
    return b"".join(encode_response(wire.api_key, wire.version, wire.correlation_id, body))


def _merged_entry_errors(responses: list) -> dict[int, int] | None:
    counts: dict[int, int] = {}
    for response in responses:
        for code, n in (entry_errors(response) or {}).items():
            counts[code] = counts.get(code, 0) + n
    return counts or None


def _response_entries(response: object) -> int:
    """The entries of a handler's answer (a list of answers too), two levels deep, counted up to
    just past INLINE_ENTRIES: how long translating and encoding it takes, roughly."""
    if response is None:
        return 0
    answers = response if type(response) is list else (response,)
    count = len(answers) if type(response) is list else 0
    for answer in answers:
        for name in entry_fields(type(answer)):
            for entry in getattr(answer, name):
                count += 1
                for sub in entry_fields(type(entry)):
                    count += len(getattr(entry, sub))
                if count > INLINE_ENTRIES:
                    return count
    return count


def _top_level_code(body) -> int:
    code = getattr(body, "error_code", 0)
    return int(getattr(code, "value", code))
