"""What a listener's codec gives the request pipeline: a decoded request, or the refusal of its
frame, and the answers it encodes. Each listener (msgpack, Kafka) is one codec; the pipeline
(:mod:`.connection`) serves both the same way.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass, fields, is_dataclass
from typing import Any, NamedTuple, Protocol, final, overload

from triolog.protocol import messages as m
from triolog.protocol.errors import ErrorCode

from .fetch_descriptors import FetchResult
from .wrong_protocol import ListenerWrongProtocolLog, WrongProtocolLog

__all__ = ["Codec", "Decoded", "EncodedResponse", "Peek", "Refusal", "entry_errors", "entry_fields"]


@dataclass(slots=True)
class Decoded:
    """One request as the handler takes it, and what its answer needs."""

    #: The API (the handler's name; the metrics' label).
    api: str
    version: int
    correlation_id: int
    client_id: str | None
    #: The handler's request; a list of them for a Kafka request that batches what the internal
    #: API asks one at a time (answered in order); None when the codec answers it itself (``direct``).
    request: m.Request | list[m.Request] | None
    #: An answer the codec gives without the handler (a Kafka adapter's Direct body).
    direct: Any = None
    #: The frame was large: its answer is translated and encoded in a worker thread.
    large: bool = False
    #: The listener's own form of the request (the Kafka request and its adapter), for its answer.
    wire: Any = None
    adapter: Any = None

    @property
    def unacknowledged_produce(self) -> bool:
        """A produce with acks=0: never answered."""
        request = self.request
        return type(request) is m.ProduceRequest and request.acks == 0


@final  # (so that ``type(x) is Refusal`` failing tells mypy that x is the Decoded)
@dataclass(slots=True)
class Refusal:
    """A frame the codec refuses: counted under ``api`` with ``code``; ``answer`` (None: none is
    sent), then the connection closes if ``close``; ``warning``: the WARNING saying why (event,
    fields), if one is logged; ``reason``: why, for a log line the pipeline writes. A client that
    has not authenticated gets one answer to a refused request, then the connection closes,
    unless ``answered_before_authentication`` (an ApiVersions of a version not served: the
    client tries another)."""

    api: str | None
    code: int
    answer: bytes | None = None
    close: bool = True
    warning: tuple[str, dict] | None = None
    reason: str = ""
    answered_before_authentication: bool = False


class EncodedResponse:
    """An answer ready to send (the hot paths' handlers pack theirs straight from their results,
    without the message objects), with what the metrics count of it."""

    __slots__ = ("payload", "error_code", "entry_errors")

    def __init__(self, payload: bytes, error_code: int = 0, entry_errors: dict[int, int] | None = None):
        self.payload = payload
        self.error_code = error_code
        #: The entries' error codes, counted (as connection._entry_errors counts them).
        self.entry_errors = entry_errors


class Peek(NamedTuple):
    """What a frame's header says before it is decoded: the API (None: one not served), and the
    fields a log line about it names."""

    api: str | None
    fields: dict


#: The failed partitions of an acks=0 produce: (topic, partition, error code, message).
Acks0Errors = list[tuple[str, int, int, str | None]]


class Codec(Protocol):
    """What the request pipeline (:class:`.connection.ClientConnection`) asks of a listener's
    codec, whichever it is (:class:`.msgpack_codec.MsgpackCodec`, :class:`.kafka_codec.KafkaCodec`).

    ``response`` is a handler's answer (RequestHandler.handle): its type follows from the API
    (a response, an EncodedResponse, a FetchResult, a produce's TopicAppends, the list of the
    answers of a batched request), which a codec knows from the request and the type system
    cannot follow through the handler's API table: hence ``object``."""

    #: After a SaslHandshake v0 (Kafka's) the exchange's messages come as bare frames.
    raw_sasl_tokens: bool

    def wrong_protocol_log(self, shared: WrongProtocolLog) -> ListenerWrongProtocolLog: ...

    def foreign_protocol(self, frame: bytes) -> tuple[str, dict] | None: ...

    def peek_api(self, frame: bytes) -> Peek | None: ...

    @overload
    def decode(self, frame: bytes) -> Decoded | Refusal: ...

    @overload
    def decode(self, frame: bytes, *, may_defer: bool) -> Decoded | Refusal | None: ...

    def refuse_frame(self, message: str) -> bytes | None: ...

    def refusal(self, decoded: Decoded, code: ErrorCode, message: str) -> bytes | None: ...

    def sasl_answer(self, decoded: Decoded, response: m.Response) -> bytes: ...

    def follow_up(self, decoded: Decoded, response: object, internal: m.Request) -> m.Request | None: ...

    def failure(self, decoded: Decoded, message: str) -> bytes | None: ...

    def closes_after_failed_acks0(self) -> bool: ...

    def direct_acks0_failure(self, decoded: Decoded) -> Acks0Errors | None: ...

    def throttled_fetch(self, response: m.FetchResponse, throttle: int) -> m.FetchResponse: ...

    def large_answer(self, decoded: Decoded, response: object) -> bool: ...

    def fetch_parts(self, decoded: Decoded, result: FetchResult) -> list: ...

    def encode(self, decoded: Decoded, response: object, throttle_ms: int) -> EncodedResponse: ...


def entry_errors(response: m.Response | None) -> dict[int, int] | None:
    """The error codes of ``response``'s entries (every nested result with an ``error_code``: the
    topics and partitions of most APIs, describe_log_dirs' log dirs and its errors' topics and
    partitions), counted in the order first met; None when there is none. The top-level code is
    not an entry's."""
    if response is None:
        return None
    counts: dict[int, int] = {}
    _count_entry_errors(response, counts)
    return counts or None


def _count_entry_errors(node: object, counts: dict[int, int]) -> None:
    for name in entry_fields(type(node)):
        for entry in getattr(node, name):
            code = getattr(entry, "error_code", 0)
            if code:
                counts[code] = counts.get(code, 0) + 1
            _count_entry_errors(entry, counts)


#: Per message class, its fields holding tuples of nested results in which an ``error_code`` is
#: found (at that level or below); derived from the schema's type hints once per class.
_ENTRY_FIELDS: dict[type, tuple[str, ...]] = {}


def entry_fields(cls: type) -> tuple[str, ...]:
    found = _ENTRY_FIELDS.get(cls)
    if found is None:
        _ENTRY_FIELDS[cls] = ()  # a cycle in the schema would end here
        hints = typing.get_type_hints(cls)
        names = []
        for f in fields(cls):
            hint = hints[f.name]
            if typing.get_origin(hint) is not tuple:
                continue
            element = typing.get_args(hint)[0]
            if (
                isinstance(element, type)
                and is_dataclass(element)
                and (any(g.name == "error_code" for g in fields(element)) or entry_fields(element))
            ):
                names.append(f.name)
        found = _ENTRY_FIELDS[cls] = tuple(names)
    return found
