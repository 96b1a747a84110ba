"""Operations as generators, so the sync and the trio APIs share every line of client logic.

An operation (metadata lookup, fetch, produce round trip, admin call...) is a generator that
yields *effects*, :class:`Call` (send this request, give me the response) or :class:`Sleep`, and
gets the outcome sent back (or the exception thrown in). It never touches a socket or a clock
API of its own flavour. :func:`run_sync` drives one over a blocking connection;
:func:`triolog.client.aio.run_async` drives the same generator over a trio connection.
"""

from __future__ import annotations

import time
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, final

from triolog.protocol import messages as m

from .errors import error_for

__all__ = ["Await", "Call", "Op", "Sleep", "Submit", "check_response", "run_sync"]

T = TypeVar("T")


@final  # (so that `type(effect) is Call` narrows the other branches, for the type checker)
@dataclass(frozen=True, slots=True)
class Call:
    """Send ``request`` (its ``id`` is assigned by the connection) and return the response dict.

    Returns None at once for a request that gets no response (produce with acks=0).
    ``timeout_s`` bounds the wait for the response; past it the connection is dropped.
    """

    request: m.Request
    timeout_s: float


@final
@dataclass(frozen=True, slots=True)
class Sleep:
    seconds: float


@final
@dataclass(frozen=True, slots=True)
class Submit:
    """Write ``request`` and return at once with a handle for :class:`Await` (a request kept in
    flight while the operation goes on: the consumer's next fetch). Errors as Call's."""

    request: m.Request
    timeout_s: float


@final
@dataclass(frozen=True, slots=True)
class Await:
    """The response to a Submit's ``handle``, waiting at most ``wait_s``; None if it has not
    come by then (the request stays in flight, the connection is kept). Errors as Call's."""

    handle: Any
    wait_s: float


Effect = Call | Sleep | Submit | Await
Op = Generator[Effect, Any, T]


class SyncCaller(Protocol):
    def call(self, request: m.Request, timeout_s: float) -> dict | None: ...

    def send(self, request: m.Request, timeout_s: float) -> Any: ...

    def receive(self, handle: Any, timeout_s: float, give_up: bool = True) -> dict | None: ...


def run_sync(op: Op[T], conn: SyncCaller, value: Any = None, error: BaseException | None = None) -> T:
    """Drive ``op`` to completion with blocking I/O; returns its value or raises its exception.

    ``value``/``error``: what to resume it with (the outcome of the effect it last yielded),
    for an operation whose first steps another driver ran (the producer's pipelined sends)."""
    try:
        while True:
            try:
                effect = op.throw(error) if error is not None else op.send(value)
            except StopIteration as stop:
                return stop.value
            value = error = None
            try:
                if type(effect) is Call:
                    value = conn.call(effect.request, effect.timeout_s)
                elif type(effect) is Sleep:
                    time.sleep(max(0.0, effect.seconds))
                elif type(effect) is Submit:
                    value = conn.send(effect.request, effect.timeout_s)
                else:
                    value = conn.receive(effect.handle, effect.wait_s, give_up=False)
            except Exception as exc:  # handed to the operation, which decides (retry, or re-raise)
                error = exc
    finally:
        op.close()  # interrupted (KeyboardInterrupt...): let the operation clean up now


def check_response(doc: dict) -> dict:
    """Raise the typed exception of a request-level error; return ``doc`` otherwise."""
    if doc["error_code"]:
        raise error_for(doc["error_code"], doc.get("error_message"))
    return doc


def now() -> float:
    """The monotonic clock every operation uses for deadlines (trio's default clock agrees)."""
    return time.monotonic()
