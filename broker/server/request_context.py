"""Who asks what, from where, on which listener: Kafka's RequestContext, built once per request by
the connection and handed to the handlers (never looked up from task-local state), so a handler,
or the worker thread it starts, authorizes and logs what the request it serves says.

The context is immutable; what the pipeline learns while serving the request (time parked, the
throttle its answer carries) goes into its :class:`RequestAccounting`.
"""

from __future__ import annotations

import time
from typing import NamedTuple

import trio

__all__ = ["ANONYMOUS", "RequestAccounting", "RequestContext", "handling_clock"]

#: What a request's handling time (request_percentage) and its time parked are measured with: real
#: time, as Kafka measures its handler threads' time (nanoTime), even when the event loop runs on a
#: trio MockClock in a test. The handling time is a cost, like a produce's bytes: the work a request
#: really took. Only the allowance that repays it follows the event loop's clock (the quota
#: managers' clock, trio.current_time), as time passing does. In production the two are the same
#: clock (trio's is perf_counter plus an offset); under a MockClock a request is charged what it
#: cost, not the virtual seconds a test jumped meanwhile (or none, when it jumped none).
handling_clock = time.perf_counter

#: Kafka's principal of a client neither TLS nor SASL has named.
ANONYMOUS = "User:ANONYMOUS"


class RequestAccounting:
    """What one request costs, written while it is served (one task at a time: no lock)."""

    __slots__ = ("parked_s", "throttle_ms")

    def __init__(self) -> None:
        #: Seconds the request spent parked, not handled: a fetch's long poll, a produce waiting
        #: for its fsync (acks=-1), a join or sync parked in the coordinator. Kafka counts no time
        #: in purgatory against request_percentage. Measured with :data:`handling_clock`.
        self.parked_s = 0.0
        #: The byte-rate throttle (ms) the answer carries (a produce over its quota).
        self.throttle_ms = 0

    def parked(self, seconds: float) -> None:
        self.parked_s += seconds


class RequestContext(NamedTuple):
    """A NamedTuple, not a frozen dataclass: the produce and fetch path builds one per request,
    and a tuple is built in a third of the time."""

    #: The API served: the internal API's name (the metrics' label on the Kafka listener).
    api: str
    #: The request's API version (the msgpack protocol has none: 0).
    version: int
    correlation_id: int | None
    client_id: str
    #: ``User:<name>``: ANONYMOUS until a client certificate or SASL says otherwise.
    principal: str
    #: The peer's IP address (what ACLs name as the host).
    client_address: str
    #: The configuration key of the listener: "listeners" or "kafka.listeners".
    listener: str
    #: The listener's scheme: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL.
    security_protocol: str
    accounting: RequestAccounting

    @property
    def client_host(self) -> str:
        """The host as a group member's client_host shows it (Kafka's ``/1.2.3.4``)."""
        return f"/{self.client_address}"

    @property
    def user(self) -> str:
        """The quota user: the principal's name."""
        return self.principal.partition(":")[2]


def request_context(
    api: str,
    version: int,
    correlation_id: int | None,
    client_id: str | None,
    principal: str,
    client_address: str,
    listener: str,
    security_protocol: str,
    accounting: RequestAccounting | None = None,
) -> RequestContext:
    """A context (``tuple.__new__``: no keyword handling on the hot path); fresh accounting unless given."""
    return _new(
        RequestContext,
        (
            api,
            version,
            correlation_id,
            client_id or "",
            principal,
            client_address,
            listener,
            security_protocol,
            RequestAccounting() if accounting is None else accounting,
        ),
    )


_new = tuple.__new__


def internal_context(api: str = "internal") -> RequestContext:
    """The context of work the broker asks of itself (tests, tools): anonymous, no address."""
    return request_context(api, 0, None, "", ANONYMOUS, "", "", "PLAINTEXT")


async def parked(ctx: RequestContext, start):
    """Run ``start(respond)`` (a coordinator's request: group or transaction); the result it
    answers with, now or when the coordinator decides. Time parked there is not handling time."""
    box: list = []
    event = trio.Event()

    def respond(result) -> None:
        box.append(result)
        event.set()

    start(respond)
    if not box:  # parked in the coordinator (a join, a sync, a commit's fsync): no handling time
        waiting_since = handling_clock()
        try:
            await event.wait()
        finally:
            ctx.accounting.parked(handling_clock() - waiting_since)
    return box[0]
