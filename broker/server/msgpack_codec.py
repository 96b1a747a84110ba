"""The msgpack listener's codec (``listeners``), sans I/O: a frame in, the broker's request out;
an answer in, its bytes out. What this listener does on purpose unlike Kafka's: a request that
does not decode is answered (INVALID_REQUEST and the reason) and the connection stays, a frame
refused for its length is answered, a throttled fetch lists its partitions without records, and
a Kafka client's first frame is recognised (and not answered: it could not read ours).
"""

from __future__ import annotations

import dataclasses
from typing import cast, overload

from triolog.protocol import messages as m
from triolog.protocol.errors import ErrorCode
from triolog.protocol.frames import kafka_request_header
from triolog.protocol.request_limits import RequestLimits, count_objects

from .appends import TopicAppends
from .codec import Acks0Errors, Decoded, EncodedResponse, Peek, Refusal, entry_errors
from .fetch_descriptors import FetchResult
from .handlers import produce_payload
from .wrong_protocol import WrongProtocolLog

__all__ = ["INLINE_DECODE_OBJECTS", "MsgpackCodec"]

#: Requests holding at most this many msgpack objects are decoded on the event loop (tens of
#: microseconds); larger ones in a worker thread, so a decoding bomb never stalls the others.
INLINE_DECODE_OBJECTS = 1024
#: APIs whose responses are encoded without re-checking them against the schema (built from typed
#: values on the request path; the conformance tests check their shape).
_HOT_APIS = frozenset({"produce", "fetch", "api_versions"})
#: The responses that carry a throttle_ms (every other answer's throttle is the client's mute alone).
_THROTTLED_RESPONSES = (m.FetchResponse, m.ProduceResponse)


class MsgpackCodec:
    #: The refusal of a frame over the length limit is answered.
    answers_refused_frames = True
    #: After a SaslHandshake v0 (Kafka only) the exchange's messages come as bare frames.
    raw_sasl_tokens = False

    def __init__(self, limits: RequestLimits = m.DEFAULT_REQUEST_LIMITS):
        self.limits = limits

    def wrong_protocol_log(self, shared: WrongProtocolLog) -> WrongProtocolLog:
        return shared

    def foreign_protocol(self, frame: bytes) -> tuple[str, dict] | None:
        """A Kafka client (its request header): logged with these fields, not answered."""
        kafka = kafka_request_header(frame)
        if kafka is None:
            return None
        return "kafka", dict(
            kafka_api_key=kafka.api_key, kafka_api_version=kafka.api_version, kafka_client_id=kafka.client_id
        )

    def peek_api(self, frame: bytes) -> Peek | None:
        """The API, read from the frame's header before decoding it: not here (None), the API is a
        field of the msgpack map; the pipeline decodes first."""
        return None

    @overload
    def decode(self, frame: bytes) -> Decoded | Refusal: ...

    @overload
    def decode(self, frame: bytes, *, may_defer: bool) -> Decoded | Refusal | None: ...

    def decode(self, frame: bytes, *, may_defer: bool = False) -> Decoded | Refusal | None:
        """The request in ``frame``, or the refusal answering it; None (only ``may_defer``) if it
        holds too many objects to decode on the event loop."""
        # Every msgpack object takes at least one byte: a frame this short needs no count.
        if (
            may_defer
            and len(frame) > INLINE_DECODE_OBJECTS
            and (count_objects(frame, INLINE_DECODE_OBJECTS) > INLINE_DECODE_OBJECTS)
        ):
            return None
        try:
            request = m.decode_request(frame, self.limits)
        except m.RequestError as exc:
            # Returned, not raised: a raised error's traceback holds the decoder's frames, and
            # with them the frame's bytes, in a reference cycle (through a worker thread's
            # outcome) that lives until the collector's next full pass, past the frame's reservation.
            exc.__traceback__ = exc.__context__ = exc.__cause__ = None
            return Refusal(
                exc.api,
                exc.code,
                m.encode_response(m.error_response(exc.request_id, exc.code, str(exc), exc.api)),
                close=False,
                reason=str(exc),
            )
        return Decoded(request.api, 0, request.id, request.client_id, request)

    def refuse_frame(self, message: str) -> bytes:
        """The answer to a frame refused for its length (its id unread, so nil)."""
        return m.encode_response(m.error_response(None, ErrorCode.INVALID_REQUEST, message))

    def refusal(self, decoded: Decoded, code: ErrorCode, message: str) -> bytes:
        """The answer refusing the whole request, its API's other fields empty."""
        return m.encode_response(
            m.RESPONSE_TYPES.get(decoded.api, m.Response)(
                id=decoded.correlation_id, error_code=code, error_message=message
            )
        )

    def sasl_answer(self, decoded: Decoded, response: m.Response) -> bytes:
        return m.encode_response(response)

    def follow_up(self, decoded: Decoded, response: object, internal: m.Request) -> None:
        return None

    def failure(self, decoded: Decoded, message: str) -> bytes | None:
        """The answer to a request the handler failed on: UNKNOWN_SERVER_ERROR, the connection stays
        (an acks=0 produce too: it is the one answer it gets)."""
        return m.encode_response(
            m.error_response(decoded.correlation_id, ErrorCode.UNKNOWN_SERVER_ERROR, message, decoded.api)
        )

    def closes_after_failed_acks0(self) -> bool:
        """A failed acks=0 produce goes unanswered and unnoticed here."""
        return False

    def direct_acks0_failure(self, decoded: Decoded) -> Acks0Errors | None:
        """Never: no msgpack request is answered by the codec itself (``direct``)."""
        return None

    def throttled_fetch(self, response: m.FetchResponse, throttle: int) -> m.FetchResponse:
        """A throttled fetch's answer: every partition as it was, its records left out."""
        return dataclasses.replace(
            response,
            throttle_ms=throttle,
            topics=tuple(
                dataclasses.replace(
                    topic,
                    partitions=tuple(dataclasses.replace(p, records=b"") if p.records else p for p in topic.partitions),
                )
                for topic in response.topics
            ),
        )

    def large_answer(self, decoded: Decoded, response: object) -> bool:
        return False

    def fetch_parts(self, decoded: Decoded, result: FetchResult) -> list:
        """The fetch response's bytes, with its record regions as parts to sendfile."""
        return result.parts

    def encode(self, decoded: Decoded, response: object, throttle_ms: int) -> EncodedResponse:
        """The answer's bytes, carrying ``throttle_ms`` if that is longer than its own."""
        if type(decoded.request) is m.ProduceRequest:
            # the produce handler's answer: its partitions' TopicAppends
            response = produce_payload(decoded.correlation_id, cast("list[TopicAppends]", response), throttle_ms)
        if type(response) is EncodedResponse:
            return response
        # Any other answer is a response: a fetch's FetchResult is sent by the connection
        # (fetch_parts), and only Kafka's batched requests are answered with lists.
        response = cast(m.Response, response)
        if throttle_ms and isinstance(response, _THROTTLED_RESPONSES):
            response = dataclasses.replace(response, throttle_ms=max(response.throttle_ms, throttle_ms))
        # The hot paths skip the schema re-check (still refusing an error without a message).
        payload = m.encode_response(response, check_schema=decoded.api not in _HOT_APIS)
        return EncodedResponse(payload, response.error_code, entry_errors(response))
