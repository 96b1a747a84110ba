"""A TCP proxy between a client and a real broker that loses produce RESPONSES.

It forwards bytes both ways and parses the frames (4-byte length, then a msgpack map, or with
``protocol="kafka"`` Kafka's request and response headers) to know which response answers a
produce request. To lose one, it closes both connections instead of
forwarding it: the broker has acted on the request (appended the batch), the client only sees
its connection die with the request outstanding (ResponseLostError), as after a network fault.
Every request outstanding on that connection is lost with it, as on a real network.

Runs its own trio loop in a thread, so sync tests and broker subprocesses can use it alike::

    with FaultProxy(broker.port, drop_every=7) as proxy:
        Producer(f"127.0.0.1:{proxy.port}", ...)
"""

from __future__ import annotations

import random
import struct
import threading

import msgpack
import trio

from triolog.protocol.kafka.apis import ApiKey

__all__ = ["FaultProxy"]

_LENGTH = struct.Struct(">I")


def _frames(buffer: bytearray):
    """Whole frames (prefix included) taken from the front of ``buffer``, with their payload."""
    while len(buffer) >= 4:
        (length,) = _LENGTH.unpack_from(buffer)
        if len(buffer) < 4 + length:
            return
        frame = bytes(buffer[:4 + length])
        del buffer[:4 + length]
        yield frame, frame[4:]


def _kafka_request_header(payload: bytes) -> tuple[str | None, int | None]:
    """(api, correlation id) of a Kafka request: "produce" for Produce, the key's number otherwise."""
    if len(payload) < 8:
        return None, None
    api_key, _, correlation_id = struct.unpack_from(">hhi", payload)
    return ("produce" if api_key == ApiKey.PRODUCE else str(api_key)), correlation_id


def _kafka_response_header(payload: bytes) -> tuple[str | None, int | None]:
    return None, (struct.unpack_from(">i", payload)[0] if len(payload) >= 4 else None)


def _header(payload: bytes) -> tuple[str | None, int | None]:
    """(api, id) of a request or response payload; (None, None) if it is not a msgpack map."""
    try:
        doc = msgpack.unpackb(payload, raw=False, strict_map_key=False)
    except Exception:
        return None, None
    if not isinstance(doc, dict):
        return None, None
    return doc.get("api"), doc.get("id")


class FaultProxy:
    """``drop_every=N``: lose every Nth produce response; ``drop_probability=p``: lose each with
    probability p (seeded). ``target_port`` may change between connections (a restarted broker).
    ``dropping`` can be switched off to let a run finish cleanly."""

    def __init__(self, target_port: int, *, drop_every: int = 0, drop_probability: float = 0.0,
                 seed: int = 0, host: str = "127.0.0.1", protocol: str = "msgpack") -> None:
        self.target_port = target_port
        self._request_header = _kafka_request_header if protocol == "kafka" else _header
        #: Every request frame forwarded (prefix included), when given a list to record into.
        self.recorded: list[bytes] | None = None
        self._response_header = _kafka_response_header if protocol == "kafka" else _header
        self.host = host
        self.drop_every = drop_every
        self.drop_probability = drop_probability
        self.dropping = True
        self._random = random.Random(seed)
        self.port = 0
        #: Produce responses seen from the broker, and those lost on purpose.
        self.produce_responses = 0
        self.produce_responses_dropped = 0
        #: Produce requests forwarded to the broker.
        self.produce_requests = 0
        self.connections = 0
        self._thread: threading.Thread | None = None
        self._started = threading.Event()
        self._token: trio.lowlevel.TrioToken | None = None
        self._cancel: trio.CancelScope | None = None
        self._error: BaseException | None = None

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> "FaultProxy":
        self._thread = threading.Thread(target=self._run, name="fault-proxy", daemon=True)
        self._thread.start()
        if not self._started.wait(10):
            raise RuntimeError("the fault proxy did not start")
        if self._error is not None:
            raise self._error
        return self

    def close(self) -> None:
        if self._token is not None and self._cancel is not None:
            try:
                trio.from_thread.run_sync(self._cancel.cancel, trio_token=self._token)
            except trio.RunFinishedError:
                pass
        if self._thread is not None:
            self._thread.join(10)

    def __enter__(self) -> "FaultProxy":
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.close()

    def _run(self) -> None:
        try:
            trio.run(self._main)
        except BaseException as exc:  # reported by start() if it happened before the listener was up
            self._error = exc
            self._started.set()

    async def _main(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        with trio.CancelScope() as scope:
            self._cancel = scope
            listeners = await trio.open_tcp_listeners(0, host=self.host)
            self.port = listeners[0].socket.getsockname()[1]
            self._started.set()
            async with trio.open_nursery() as nursery:
                for listener in listeners:
                    nursery.start_soon(trio.serve_listeners, self._serve, [listener])

    # -- one client connection -----------------------------------------------------------------

    def _drop_now(self) -> bool:
        self.produce_responses += 1
        if not self.dropping:
            return False
        if self.drop_every and self.produce_responses % self.drop_every == 0:
            return True
        return bool(self.drop_probability) and self._random.random() < self.drop_probability

    async def _serve(self, client: trio.SocketStream) -> None:
        self.connections += 1
        try:
            broker = await trio.open_tcp_stream(self.host, self.target_port)
        except OSError:
            await client.aclose()  # the broker is down: the client sees its connection refused-like close
            return
        apis: dict[int, str] = {}
        async with trio.open_nursery() as nursery:

            async def hang_up() -> None:
                nursery.cancel_scope.cancel()

            async def upstream() -> None:
                buffer = bytearray()
                try:
                    while data := await client.receive_some(1 << 16):
                        buffer += data
                        for frame, payload in _frames(buffer):
                            api, request_id = self._request_header(payload)
                            if request_id is not None:
                                apis[request_id] = api
                            if api == "produce":
                                self.produce_requests += 1
                            if self.recorded is not None:
                                self.recorded.append(frame)
                            await broker.send_all(frame)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    pass
                await hang_up()

            async def downstream() -> None:
                buffer = bytearray()
                try:
                    while data := await broker.receive_some(1 << 16):
                        buffer += data
                        for frame, payload in _frames(buffer):
                            _, response_id = self._response_header(payload)
                            if apis.pop(response_id, None) == "produce" and self._drop_now():
                                self.produce_responses_dropped += 1
                                await hang_up()  # the batch is in the log; the client never hears of it
                                return
                            await client.send_all(frame)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    pass
                await hang_up()

            nursery.start_soon(upstream)
            nursery.start_soon(downstream)
        with trio.CancelScope(shield=True):
            await broker.aclose()
            await client.aclose()
