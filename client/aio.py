"""The trio API: the same operations as the sync clients, driven by trio tasks.

Every client is an async context manager owning a nursery (the connection's reader task, and
the producer's sender task)::

    async with AsyncProducer("127.0.0.1:9092", linger_ms=5) as producer:
        future = await producer.send("orders", b"value", key=b"k")
        metadata = await future

    async with AsyncConsumer("127.0.0.1:9092", auto_offset_reset="earliest") as consumer:
        consumer.subscribe("orders")
        async for record in consumer:
            ...

Requests on one connection are pipelined: a reader task takes the responses in order and hands
each to the request it answers (checked by correlation id). The producer keeps up to
``max_in_flight_requests_per_connection`` produce requests outstanding: its sender task writes
them in order (:meth:`AsyncConnection.submit`), its receiver task handles their responses in the
same order (:meth:`AsyncConnection.result`).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import cast

import trio

from triolog.protocol import messages as m
from triolog.protocol.frames import NEED_DATA, FrameDecoder, ProtocolError

from .address import format_address
from .admin_core import AclBinding, AclBindingFilter, AdminCore, UserScramCredentialsDescription
from .cluster import ANY, ClusterView, merge
from .connection import (
    DEFAULT_BOOTSTRAP,
    MAX_BROKER_CONNECTIONS,
    CorrelationIds,
    connect_order,
    decode_answer,
    no_broker_message,
    parse_bootstrap_servers,
    prepare,
    prepare_parts,
)
from .consumer_coordinator import COORDINATOR_APIS
from .consumer_core import ConsumerConfig, ConsumerCore, Polled, PolledColumns
from .errors import (
    BrokerConnectionError,
    ClientTimeoutError,
    InvalidResponseError,
    ProducerClosedError,
    RequestNotSentError,
    ResponseLostError,
    TransactionStateError,
    TriologClientError,
)
from .ops import Call, Op, Sleep, Submit, T, now
from .producer import SEND_MANY_SLICE, _values_size
from .producer_core import ProducerConfig, ProducerCore, RecordFuture, RecordFutures
from .security import PLAINTEXT, SecurityConfig, login_error, renewal_time, sasl_exchange, split_security
from .transactions import ConsumerGroupMetadata, as_group_metadata, normalize_offsets, routing_key
from .types import (
    EARLIEST,
    LATEST,
    ConfigEntry,
    ConsumerRecord,
    OffsetAndTimestamp,
    RecordMetadata,
    TopicDescription,
    TopicPartition,
)

__all__ = [
    "AsyncAdminClient",
    "AsyncClusterConnection",
    "AsyncConnection",
    "AsyncConsumer",
    "AsyncProducer",
    "AsyncRecordFuture",
    "AsyncRecordFutures",
    "run_async",
]

_RECV_SIZE = 256 * 1024


async def run_async(
    op: Op[T],
    conn: AsyncConnection | AsyncClusterConnection | _AsyncGroupConnections | _AsyncCoordinatorConnections,
    value=None,
    error: BaseException | None = None,
) -> T:
    """Drive ``op`` to completion on trio: the async twin of :func:`triolog.client.ops.run_sync`
    (``value``/``error``: what to resume it with, as there)."""
    try:
        while True:
            try:
                effect = op.throw(error) if error is not None else op.send(value)
            except StopIteration as stop:
                return stop.value
            value = error = None
            try:
                if type(effect) is Call:
                    value = await conn.call(effect.request, effect.timeout_s)
                elif type(effect) is Sleep:
                    await trio.sleep(max(0.0, effect.seconds))
                elif type(effect) is Submit:
                    value = await conn.submit(effect.request)
                else:
                    value = await conn.result(effect.handle, effect.wait_s, give_up=False)
            except Exception as exc:
                error = exc
    finally:
        op.close()  # cancelled: let the operation clean up now


class _Slot:
    __slots__ = ("doc", "error", "event", "link", "request")

    def __init__(self, request, link) -> None:
        self.request = request
        self.link = link
        self.event = trio.Event()
        self.doc: dict | None = None
        self.error: BaseException | None = None


class _Link:
    """One TCP connection and the requests awaiting its responses, oldest first."""

    def __init__(self, stream: trio.abc.Stream, decoder: FrameDecoder | None = None) -> None:
        self.stream = stream
        self.decoder = decoder or FrameDecoder()
        self.pending: deque[_Slot] = deque()
        self.broken: BaseException | None = None
        self.cancel_scope = trio.CancelScope()
        #: When (trio time) this link stops taking requests: its SASL session ends soon.
        self.renew_at: float | None = None
        #: No longer the connection's link: closed once its last response is in.
        self.retired = False


class AsyncConnection:
    """A trio connection to one broker; concurrent calls are pipelined on it. ``security``: TLS
    (trio's SSLStream) and SASL, done on every new connection before its first request."""

    def __init__(
        self,
        bootstrap: str | list[str],
        nursery: trio.Nursery,
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
        self._nursery = nursery
        self._ids = CorrelationIds()
        self._connect_lock = trio.Lock()
        self._send_lock = trio.Lock()
        self._link: _Link | None = None
        self._closed = False
        #: The most requests seen awaiting a response at once on this connection (for tests and stats).
        self.max_in_flight_seen = 0
        #: Until when (trio time) the broker throttles this client (a quota): submits wait.
        self.throttled_until = 0.0

    async def _get_link(self) -> _Link:
        async with self._connect_lock:
            if self._closed:
                raise RequestNotSentError("connection closed by the client")
            link = self._link
            if link is not None and link.renew_at is not None and trio.current_time() >= link.renew_at:
                self._retire(link)
            if self._link is None or self._link.broken is not None:
                stream: trio.abc.Stream = await self._open_stream()
                decoder = FrameDecoder()
                lifetime_ms = 0
                if not self.security.is_plaintext:
                    stream, lifetime_ms = await self._secure(stream, decoder)
                self._link = _Link(stream, decoder)
                self._link.renew_at = renewal_time(trio.current_time(), lifetime_ms)
                self._nursery.start_soon(self._reader, self._link)
            return self._link

    def _retire(self, link: _Link) -> None:
        """Send nothing more on ``link`` (its SASL session is about to expire); its reader closes
        it once no response is due on it."""
        self._link = None
        link.retired = True
        if not link.pending:
            self._break(link, ResponseLostError("connection renewed: its SASL session was about to expire"))

    async def _open_stream(self) -> trio.SocketStream:
        """A stream to the first bootstrap server that accepts (see :mod:`triolog.client.connection`)."""
        failures = []
        for index in connect_order(self.addresses, self._last_good):
            host, port = self.addresses[index]
            try:
                with trio.fail_after(self.connect_timeout_s):
                    stream = await trio.open_tcp_stream(host, port)
            except (OSError, trio.TooSlowError) as exc:
                failures.append((self.addresses[index], exc if str(exc) else "timed out"))
                continue
            self._last_good = index
            self.host, self.port = host, port
            return stream
        raise RequestNotSentError(no_broker_message(failures))

    async def _secure(self, stream: trio.abc.Stream, decoder: FrameDecoder) -> tuple[trio.abc.Stream, int]:
        """TLS then SASL, as configured, on a new stream (closed on failure), and the SASL
        session's lifetime in ms (0: none): see
        :meth:`triolog.client.connection.SyncConnection._secure` for the errors."""
        name = format_address((self.host, self.port))
        try:
            if self.security.uses_tls:
                stream = trio.SSLStream(stream, self.security.ssl_context(), server_hostname=self.host)
                try:
                    with trio.fail_after(self.connect_timeout_s):
                        await stream.do_handshake()
                except trio.TooSlowError:
                    raise RequestNotSentError(f"TLS handshake with {name} timed out") from None
                except trio.BrokenResourceError as exc:
                    raise login_error("TLS handshake", name, exc) from None
            lifetime_ms = 0
            if self.security.uses_sasl:
                with trio.fail_after(self.connect_timeout_s):
                    lifetime_ms = await self._authenticate(stream, name, decoder)
            return stream, lifetime_ms
        except BaseException as exc:
            with trio.CancelScope(shield=True):
                await trio.aclose_forcefully(stream)
            if isinstance(exc, trio.TooSlowError):
                raise RequestNotSentError(f"SASL authentication with {name} timed out") from None
            raise

    async def _authenticate(self, stream: trio.abc.Stream, name: str, decoder: FrameDecoder) -> int:
        exchange = sasl_exchange(self.security, name)
        request = next(exchange)
        while True:
            request, frame = prepare(request, self._ids.next(), self.client_id)
            try:
                await stream.send_all(frame)
                while (answer := decoder.next_frame()) is NEED_DATA:
                    data = await stream.receive_some(_RECV_SIZE)
                    if not data:
                        raise ConnectionError("connection closed by the broker")
                    decoder.receive_data(data)  # type: ignore[arg-type]  # (bytes or bytearray: it takes both)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError, ProtocolError) as exc:
                raise login_error("SASL authentication", name, exc) from None
            try:
                request = exchange.send(decode_answer(answer, request))
            except StopIteration as done:
                return done.value

    async def call(self, request, timeout_s: float) -> dict | None:
        slot = await self.submit(request)
        if slot is None:
            return None
        return await self.result(slot, timeout_s)

    async def submit(self, request) -> _Slot | None:
        """Write one request; its slot for :meth:`result`, or None when it gets no response
        (acks=0). Requests submitted one after another by one task leave in that order.
        A produce request's batches are written as they are, not copied into the frame."""
        if self.throttled_until > trio.current_time():  # the broker throttled this client (a quota)
            await trio.sleep_until(self.throttled_until)
        link = await self._get_link()
        request, parts = prepare_parts(request, self._ids.next(), self.client_id)
        slot = _Slot(request, link) if request.expects_response else None
        async with self._send_lock:  # frames must not interleave
            if link.broken is not None:
                raise RequestNotSentError(f"connection to {self.host}:{self.port} failed: {link.broken}")
            if slot is not None:
                link.pending.append(slot)
                self.max_in_flight_seen = max(self.max_in_flight_seen, len(link.pending))
            try:
                for part in parts:
                    await link.stream.send_all(part)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
                error = RequestNotSentError(f"sending {request.api} to {self.host}:{self.port} failed: {exc!r}")
                if slot is not None:
                    link.pending.remove(slot)
                self._break(
                    link,
                    ResponseLostError(
                        f"connection to {self.host}:{self.port} failed while sending a later request: {exc!r}"
                    ),
                )
                raise error from None
            except BaseException:  # cancelled mid-frame: the stream is unusable
                if slot is not None:
                    link.pending.remove(slot)
                self._break(link, ResponseLostError(f"{request.api} request was cancelled while being sent"))
                raise
        return slot

    async def result(self, slot: _Slot, timeout_s: float, give_up: bool = True) -> dict | None:
        """The response to a submitted request, waiting up to ``timeout_s`` (then the connection is
        closed and ResponseLostError raised: the request's fate is unknown; with ``give_up=False``
        None is returned instead and the request stays in flight)."""
        with trio.move_on_after(timeout_s):
            await slot.event.wait()
        if not slot.event.is_set():
            if not give_up:
                return None
            error = ResponseLostError(
                f"no {slot.request.api} response from {self.host}:{self.port} within {timeout_s:.3g} s"
            )
            self._break(slot.link, error)
            raise error
        if slot.error is not None:
            raise slot.error
        return slot.doc

    def _break(self, link: _Link, error: BaseException) -> None:
        if link.broken is not None:
            return
        link.broken = error
        while link.pending:
            slot = link.pending.popleft()
            slot.error = error
            slot.event.set()
        link.cancel_scope.cancel()

    async def _reader(self, link: _Link) -> None:
        decoder = link.decoder
        try:
            with link.cancel_scope:
                while True:
                    try:
                        data = await link.stream.receive_some(_RECV_SIZE)
                    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
                        raise ResponseLostError(f"connection to {self.host}:{self.port} lost: {exc!r}") from None
                    if not data:
                        raise ResponseLostError("connection closed by the broker")
                    decoder.receive_data(data)  # type: ignore[arg-type]  # (bytes or bytearray: it takes both)
                    while True:
                        try:
                            frame = decoder.next_frame()
                        except ProtocolError as exc:
                            raise InvalidResponseError(str(exc)) from None
                        if frame is NEED_DATA:
                            break
                        if not link.pending:
                            raise InvalidResponseError("the broker sent a response to no request")
                        slot = link.pending.popleft()
                        try:
                            slot.doc = decode_answer(frame, slot.request)
                            throttle = slot.doc.get("throttle_ms")
                            if throttle:  # KIP-219: the next request waits as the broker does
                                self.throttled_until = max(self.throttled_until, trio.current_time() + throttle / 1000)
                        except TriologClientError as exc:
                            slot.error = exc
                            raise
                        finally:
                            slot.event.set()
                        if link.retired and not link.pending:
                            return  # renewed: the finally below closes it
        except TriologClientError as exc:
            self._break(link, exc)
        finally:
            self._break(link, ResponseLostError("connection closed"))
            with trio.CancelScope(shield=True):
                await link.stream.aclose()

    async def aclose(self) -> None:
        self._closed = True
        if self._link is not None:  # requests already written may have been acted on: fate unknown
            self._break(self._link, ResponseLostError("connection closed by the client before the response came"))


class _AsyncRouted:
    __slots__ = ("parts", "request")

    def __init__(self, request, parts: list) -> None:
        self.request = request
        self.parts = parts


class AsyncClusterConnection:
    """The trio twin of :class:`triolog.client.connection.ClusterConnection`: the bootstrap
    connection (any live broker) and one connection per broker, each request sent where
    :class:`triolog.client.cluster.ClusterView` says (a partition's leader), the view updated by
    every metadata response."""

    def __init__(
        self,
        bootstrap: str | list[str],
        nursery: trio.Nursery,
        *,
        client_id: str | None = None,
        security: SecurityConfig | None = None,
        retry_backoff_s: float = 0.1,
        metadata_timeout_s: float = 30.0,
    ) -> None:
        self.main = AsyncConnection(bootstrap, nursery, client_id=client_id, security=security)
        self.security = self.main.security
        self.client_id = client_id
        self.metadata_timeout_s = metadata_timeout_s
        self.view = ClusterView(retry_backoff_s)
        self._nursery = nursery
        self._nodes: dict[int, AsyncConnection] = {}
        self._closed = False

    @property
    def max_in_flight_seen(self) -> int:
        return max(conn.max_in_flight_seen for conn in (self.main, *self._nodes.values()))

    @property
    def throttled_until(self) -> float:
        """Until when a broker throttles this client (a quota; the latest of the brokers')."""
        return max(conn.throttled_until for conn in (self.main, *self._nodes.values()))

    def _conn(self, node: int | None) -> AsyncConnection:
        if node is ANY:
            return self.main
        address = self.view.address(node)
        conn = self._nodes.get(node)
        if conn is not None and (address is None or (conn.host, conn.port) == address):
            return conn
        if address is None or self._closed or (conn is None and len(self._nodes) >= MAX_BROKER_CONNECTIONS):
            return self.main
        if conn is not None:  # the broker moved: its old connection goes (its reader ends it)
            conn._closed = True
            if conn._link is not None:
                conn._break(conn._link, ResponseLostError("the broker moved to another address"))
        conn = self._nodes[node] = AsyncConnection(
            format_address(address), self._nursery, client_id=self.client_id, security=self.security
        )
        return conn

    def _learn(self, request, doc: dict | None) -> None:
        if doc is None:
            return
        if type(request) is m.MetadataRequest:
            self.view.learn(doc)
            known = set(self.main.addresses)
            for address in list(self.view.brokers.values()):
                if address not in known:
                    self.main.addresses.append(address)
        else:
            self.view.note_response(request, doc)

    async def _refresh(self, request) -> None:
        topics = self.view.refresh_due(request, now())
        if topics:
            lookup = m.MetadataRequest(id=0, topics=tuple(topics), allow_auto_topic_creation=False)
            try:
                self._learn(lookup, await self.main.call(lookup, self.metadata_timeout_s))
            except Exception:  # (the request then goes to any broker; its answer tells the operation)
                pass

    async def submit(self, request) -> _AsyncRouted | None:
        await self._refresh(request)
        parts = []
        for index, (node, part) in enumerate(self.view.route(request)):
            conn = self._conn(node)
            try:
                slot = await conn.submit(part)
            except RequestNotSentError as exc:
                self.view.note_broken(node)
                if index == 0:
                    raise
                raise ResponseLostError(f"a part of the {request.api} request was not sent: {exc}") from None
            if slot is not None:
                parts.append((node, conn, slot))
        return _AsyncRouted(request, parts) if parts else None

    async def result(self, handle: _AsyncRouted, timeout_s: float, give_up: bool = True) -> dict | None:
        deadline = trio.current_time() + timeout_s
        docs = []
        for node, conn, slot in handle.parts:
            try:
                doc = await conn.result(slot, max(0.0, deadline - trio.current_time()), give_up=give_up)
            except ResponseLostError:
                self.view.note_broken(node)
                raise
            if doc is None:
                return None
            docs.append(doc)
        doc = merge(docs)
        self._learn(handle.request, doc)
        return doc

    async def call(self, request, timeout_s: float) -> dict | None:
        handle = await self.submit(request)
        return None if handle is None else await self.result(handle, timeout_s)

    async def aclose(self) -> None:
        self._closed = True
        conns, self._nodes = list(self._nodes.values()), {}
        for conn in conns:
            await conn.aclose()
        await self.main.aclose()


class _AsyncClient:
    """Owns the nursery and the connection; subclasses hook start and stop."""

    _client_id = "triolog"
    #: Before asking a moved leader again; the bound of a metadata lookup (set from the config).
    _retry_backoff_s = 0.1
    _request_timeout_s = 30.0

    def __init__(self, bootstrap_servers: str | list[str], security: SecurityConfig = PLAINTEXT) -> None:
        parse_bootstrap_servers(bootstrap_servers)  # fail early on a bad address
        self._bootstrap = bootstrap_servers
        self.security = security
        self._conn: AsyncClusterConnection | None = None
        self._cm: AbstractAsyncContextManager | None = None

    async def __aenter__(self):
        self._cm = self._lifecycle()
        return await self._cm.__aenter__()

    async def __aexit__(self, *exc_info):
        assert self._cm is not None  # (entered)
        return await self._cm.__aexit__(*exc_info)

    @asynccontextmanager
    async def _lifecycle(self):
        async with trio.open_nursery() as nursery:
            self._conn = AsyncClusterConnection(
                self._bootstrap,
                nursery,
                client_id=self._client_id,
                security=self.security,
                retry_backoff_s=self._retry_backoff_s,
                metadata_timeout_s=self._request_timeout_s,
            )
            try:
                self._start(nursery)
                yield self
                await self._finish()
            finally:
                self._stop()
                await self._conn.aclose()
                nursery.cancel_scope.cancel()

    def _start(self, nursery: trio.Nursery) -> None:
        pass

    async def _finish(self) -> None:
        pass

    def _stop(self) -> None:
        pass

    async def _run(self, op: Op[T]) -> T:
        if self._conn is None:
            raise RuntimeError(f"use `async with {type(self).__name__}(...)`")
        return await run_async(op, self._conn)


async def _batch_done(batch) -> None:
    """Wait, under trio, until ``batch``'s outcome is known (its callbacks run on the sender task)."""
    if not batch.is_done():
        event = trio.Event()
        batch.add_callback(event.set)
        await event.wait()


class AsyncRecordFuture(RecordFuture):
    """What :meth:`AsyncProducer.send` returns: ``await future`` gives the RecordMetadata.

    A light handle into its batch, as the sync producer's future (see
    :data:`triolog.client.producer.FutureRecordMetadata`); waiting is per batch."""

    __slots__ = ()

    async def wait(self) -> None:  # type: ignore[override]
        await _batch_done(self.batch)

    async def get(self) -> RecordMetadata:  # type: ignore[override]
        await _batch_done(self.batch)
        return self.result()

    def __await__(self):
        return self.get().__await__()


class AsyncRecordFutures(RecordFutures):
    """What :meth:`AsyncProducer.send_many` returns: ``await futures.wait()`` (or ``await
    futures.get()`` for the RecordMetadata list); ``errors()``, ``[i]`` as RecordFutures."""

    __slots__ = ()

    async def wait(self) -> None:  # type: ignore[override]
        for batch in self.batches():
            await _batch_done(batch)

    async def get(self) -> list:  # type: ignore[override]
        await self.wait()
        return self.results()


class AsyncProducer(_AsyncClient):
    """Arguments as :class:`triolog.client.Producer`'s (bootstrap list, serializers, ProducerConfig
    fields). Leaving the ``async with`` block normally flushes; leaving it with an exception
    fails unsent records."""

    def __init__(
        self,
        bootstrap_servers: str | list[str] = DEFAULT_BOOTSTRAP,
        *,
        key_serializer=None,
        value_serializer=None,
        **config,
    ) -> None:
        security, config = split_security(config)
        super().__init__(bootstrap_servers, security)
        self.config = ProducerConfig(**config)
        self._client_id = self.config.client_id
        self._retry_backoff_s = self.config.retry_backoff_ms / 1000
        self._request_timeout_s = self.config.request_timeout_ms / 1000
        self._core = ProducerCore(self.config, key_serializer=key_serializer, value_serializer=value_serializer)
        self._wakeup = trio.Event()
        self._space = trio.Event()
        self._closed = False
        self._stopping = False
        self._core.accumulator.set_wakeup(self._wake_sender, None, AsyncRecordFuture)
        self._txn = self._core.txn
        self._txn_conn: _AsyncCoordinatorConnections | None = None

    def _wake_sender(self) -> None:
        self._wakeup.set()

    def _start(self, nursery: trio.Nursery) -> None:
        in_flight = self.config.max_in_flight_requests_per_connection
        assert in_flight is not None  # (ProducerConfig resolves it)
        self._slots = trio.Semaphore(in_flight)
        # Unbounded: the slots bound it. Responses are handled in the order requests were written.
        self._written, received = trio.open_memory_channel(float("inf"))
        if self._txn is not None:
            assert self._conn is not None  # (_lifecycle made it)
            self._txn_conn = _AsyncCoordinatorConnections(self._conn, self._txn, nursery, self._client_id)
        nursery.start_soon(self._receiver, received)
        nursery.start_soon(self._sender)

    async def _finish(self) -> None:
        await self.flush()

    def _stop(self) -> None:
        self._closed = self._stopping = True
        self._wakeup.set()
        self._core.abort_queued("the producer was closed before the record was sent")

    async def send(
        self,
        topic: str,
        value=None,
        key=None,
        headers=(),
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> AsyncRecordFuture:
        """Queue one record (see :meth:`triolog.client.Producer.send`); ``await`` the result for its metadata."""
        if self._closed:
            raise ProducerClosedError("send() after close()", topic=topic)
        if self._txn is not None:
            self._txn.check_send()
        await trio.lowlevel.checkpoint()  # a tight send loop must still let the sender task run
        future = self._core.accumulator.try_append(topic, value, key, headers, partition, timestamp_ms)
        if future is not None:  # known topic, bytes, no serializers, room in the buffer
            return future
        record = await self._run(self._core.prepare_op(topic, value, key, headers, partition, timestamp_ms))
        await self._wait_for_space(record.size, topic)
        return cast(AsyncRecordFuture, self._core.append(record))  # (set_wakeup named the class)

    async def send_many(
        self, topic: str, values, keys=None, headers=None, partition: int | None = None, timestamps=None
    ) -> AsyncRecordFutures:
        """Queue many records in one call (see :meth:`triolog.client.Producer.send_many`, same
        arguments and checks); ``await result.wait()`` / ``await result.get()``."""
        if self._closed:
            raise ProducerClosedError("send_many() after close()", topic=topic)
        if self._txn is not None:
            self._txn.check_send()
        await trio.lowlevel.checkpoint()
        core = self._core
        values, keys, headers, timestamps, _ = core.check_many(topic, values, keys, headers, partition, timestamps)
        # The topic's metadata first, also for a given partition (Kafka's waitOnMetadata).
        num_partitions = core.num_partitions_cached(topic)
        if num_partitions is None:
            num_partitions = await self._run(core.topic_op(topic))
        runs = []
        count = len(values)
        for start in range(0, count, SEND_MANY_SLICE):
            end = start + SEND_MANY_SLICE
            part = values[start:end]
            await self._wait_for_space(80 * len(part) + _values_size(part), topic)
            futures = core.append_many(
                topic,
                part,
                None if keys is None else keys[start:end],
                None if headers is None else headers[start:end],
                partition,
                None if timestamps is None else timestamps[start:end],
                num_partitions,
            )
            runs.extend(futures._runs)
        return AsyncRecordFutures(runs, count)

    async def _wait_for_space(self, size: int, topic: str) -> None:
        accumulator, limit = self._core.accumulator, self.config.buffer_memory

        def has_space() -> bool:
            held = accumulator.buffered_bytes
            return held == 0 or held + size <= limit

        if not has_space():
            with trio.move_on_after(self.config.max_block_ms / 1000):
                while not has_space():
                    await self._space.wait()
            if not has_space():
                raise ClientTimeoutError(
                    f"buffer_memory ({self.config.buffer_memory} bytes) still full after {self.config.max_block_ms} ms",
                    topic=topic,
                )

    def metrics(self) -> dict[str, int]:
        """The producer's counters: ``record-retry-total``, ``batch-retry-total`` (Kafka's names),
        ``epoch-bump-total`` and its ``producer-id`` (-1 without idempotence)."""
        return self._core.metrics()

    # -- transactions (see triolog.client.Producer's methods of the same names) ----------------

    def _transactions(self):
        if self._txn is None:
            raise TransactionStateError("this producer has no transactional_id: transactions need one")
        if self._txn_conn is None:
            raise RuntimeError("use `async with AsyncProducer(...)`")
        return self._txn, self._txn_conn

    async def init_transactions(self) -> None:
        txn, conn = self._transactions()
        await run_async(txn.init_op(), conn)

    def begin_transaction(self) -> None:
        self._transactions()[0].begin()

    async def send_offsets_to_transaction(self, offsets, group_metadata) -> None:
        txn, conn = self._transactions()
        await run_async(txn.send_offsets_op(normalize_offsets(offsets), as_group_metadata(group_metadata)), conn)

    async def commit_transaction(self) -> None:
        txn, conn = self._transactions()
        txn.check_commit()
        await self.flush()
        await run_async(txn.end_op(True), conn)

    async def abort_transaction(self) -> None:
        txn, conn = self._transactions()
        txn.begin_abort()
        self._core.drop_transaction()
        self._space.set()
        self._space = trio.Event()
        await self.flush()  # (only what is in flight is left)
        await run_async(txn.end_op(False), conn)

    async def flush(self) -> None:
        """Send everything buffered now and wait until each record is acknowledged or failed."""
        batches = self._core.accumulator.begin_flush()
        self._wakeup.set()
        try:
            for batch in batches:
                await _batch_done(batch)
        finally:
            self._core.accumulator.end_flush()

    async def _sender(self) -> None:
        accumulator, conn = self._core.accumulator, self._conn
        assert conn is not None  # (started by _lifecycle, which made it)
        while not self._stopping:
            self._wakeup = trio.Event()
            if self._core.needs_producer_id and accumulator.has_queued() and not await self._init_producer_id():
                continue
            txn = self._txn
            if txn is not None and txn.has_pending:
                await self._add_partitions()
                continue
            await self._slots.acquire()
            batches = self._core.drain(now(), conn.view.leader)
            if not batches:
                self._slots.release()
                if txn is not None and txn.has_pending:
                    continue  # drain found partitions to add to the transaction first
                deadline = accumulator.next_deadline()
                with trio.move_on_after(float("inf") if deadline is None else max(0.0, deadline - now())):
                    await self._wakeup.wait()
                continue
            op = self._core.send_op(batches)
            try:
                effect = next(op)  # send_op's first effect is its produce request...
            except StopIteration:  # ...unless building it failed: the batches failed with the error
                self._slots.release()
                self._space.set()
                self._space = trio.Event()
                continue
            assert type(effect) is Call
            try:
                slot, error = await conn.submit(effect.request), None
            except trio.Cancelled:
                op.close()  # fails the batches: the request's fate is unknown
                raise
            except Exception as exc:  # handed to the operation by the receiver, in order
                slot, error = None, exc
            self._written.send_nowait((op, slot, effect.timeout_s, error))
            if error is not None:
                # The batches may be sent again: let the receiver put them back before anything
                # newer is written (on a fresh connection a newer batch would overtake them).
                limit = self.config.max_in_flight_requests_per_connection
                assert limit is not None  # (ProducerConfig resolves it)
                for _ in range(limit):
                    await self._slots.acquire()
                for _ in range(limit):
                    self._slots.release()

    async def _add_partitions(self) -> None:
        """A transaction's new partitions added before their batches go; refused, its queued
        records fail and it can only be aborted."""
        assert self._txn is not None and self._txn_conn is not None
        try:
            await run_async(self._txn.add_partitions_op(), self._txn_conn)
        except Exception as exc:
            self._core.fail_queued(exc)
            self._space.set()
            self._space = trio.Event()

    async def _init_producer_id(self) -> bool:
        """An idempotent producer's id, before its first batch; False (the queued batches failed
        with the error, after a backoff) if the broker did not give one."""
        assert self._conn is not None  # (_lifecycle made it)
        try:
            await run_async(self._core.init_producer_id_op(), self._conn)
            return True
        except Exception as exc:
            self._core.fail_queued(exc)
            self._space.set()
            self._space = trio.Event()
            await trio.sleep(self.config.retry_backoff_ms / 1000)
            return False

    async def _receiver(self, written) -> None:
        """Handle each written request's response, in the order the requests were written."""
        conn = self._conn
        assert conn is not None  # (started by _lifecycle, which made it)
        async for op, slot, timeout_s, error in written:
            value = None
            try:
                if slot is not None:
                    try:
                        value = await conn.result(slot, timeout_s)
                    except Exception as exc:
                        error = exc
                await run_async(op, conn, value, error)  # completes, fails or requeues its batches
            finally:
                op.close()
                self._slots.release()
                self._wakeup.set()  # a slot is free (and a retry may be due)
                self._space.set()
                self._space = trio.Event()


class _AsyncCoordinatorConnections:
    """The trio twin of :class:`triolog.client.producer.CoordinatorConnections`: a transactional
    producer's requests to its coordinators, each on a connection of its own."""

    def __init__(self, main: AsyncClusterConnection, manager, nursery: trio.Nursery, client_id: str) -> None:
        self.main, self.manager, self._nursery, self.client_id = main, manager, nursery, client_id
        self._conns: dict[tuple[str, int], tuple[AsyncConnection, trio.Lock]] = {}

    async def call(self, request, timeout_s: float):
        address = routing_key(request, self.manager)
        if address is None:
            return await self.main.call(request, timeout_s)
        entry = self._conns.get(address)
        if entry is None:
            conn = AsyncConnection(
                format_address(address), self._nursery, client_id=self.client_id, security=self.main.security
            )
            entry = self._conns[address] = (conn, trio.Lock())
        conn, lock = entry
        async with lock:
            try:
                return await conn.call(request, timeout_s)
            except BrokerConnectionError:
                if self._conns.get(address) is entry:
                    del self._conns[address]
                await conn.aclose()
                raise

    async def submit(self, request):
        raise NotImplementedError("coordinator requests are calls")

    async def result(self, handle, timeout_s: float, give_up: bool = True):
        raise NotImplementedError("coordinator requests are calls")


class _AsyncGroupConnections:
    """The trio twin of :class:`triolog.client.consumer._GroupConnections`: group requests go to
    a connection of their own, to the coordinator find_coordinator named."""

    def __init__(self, main: AsyncClusterConnection, group, nursery: trio.Nursery, client_id: str) -> None:
        self.main, self.group, self._nursery, self.client_id = main, group, nursery, client_id
        self.security = main.security
        self._coordinator: AsyncConnection | None = None
        self._address = None

    async def _for(self, request) -> AsyncConnection | AsyncClusterConnection:
        if self.group is None or request.api not in COORDINATOR_APIS:
            return self.main
        address = self.group.coordinator or self._address
        if address is None:
            return self.main
        if self._coordinator is None or address != self._address:
            if self._coordinator is not None:
                await self._coordinator.aclose()
            self._coordinator = AsyncConnection(
                format_address(address), self._nursery, client_id=self.client_id, security=self.security
            )
            self._address = address
        return self._coordinator

    async def call(self, request, timeout_s: float):
        return await (await self._for(request)).call(request, timeout_s)

    async def submit(self, request):
        conn = await self._for(request)
        slot = await conn.submit(request)
        return None if slot is None else (conn, slot)

    async def result(self, handle, timeout_s: float, give_up: bool = True):
        conn, slot = handle
        return await conn.result(slot, timeout_s, give_up=give_up)

    async def aclose(self) -> None:
        if self._coordinator is not None:
            await self._coordinator.aclose()


class AsyncConsumer(_AsyncClient):
    """Arguments as :class:`triolog.client.Consumer`'s (bootstrap list, deserializers,
    ConsumerConfig fields). With a ``group_id``, a task heartbeats while the consumer is a
    member, and leaving the ``async with`` block normally commits (enable_auto_commit) and
    leaves the group."""

    def __init__(
        self,
        bootstrap_servers: str | list[str] = DEFAULT_BOOTSTRAP,
        *,
        key_deserializer=None,
        value_deserializer=None,
        **config,
    ) -> None:
        security, config = split_security(config)
        super().__init__(bootstrap_servers, security)
        self.config = ConsumerConfig(**config)
        self._client_id = self.config.client_id
        self._retry_backoff_s = self.config.retry_backoff_ms / 1000
        self._request_timeout_s = self.config.request_timeout_ms / 1000
        self._core = ConsumerCore(self.config, key_deserializer=key_deserializer, value_deserializer=value_deserializer)
        self._router: _AsyncGroupConnections | None = None

    def _start(self, nursery: trio.Nursery) -> None:
        assert self._conn is not None  # (_lifecycle made it)
        self._router = _AsyncGroupConnections(self._conn, self._core.group, nursery, self._client_id)
        if self._core.group is not None:
            nursery.start_soon(self._heartbeat_loop)

    async def _heartbeat_loop(self) -> None:
        core, group, router = self._core, self._core.group, self._router
        assert group is not None and router is not None  # (started for a group, after _start made the router)
        while True:
            await trio.sleep(min(group.heartbeat_due(), 1.0))
            try:
                await run_async(core.heartbeat_op(), router)
            except Exception as exc:  # the next beat tries again; poll() sees what matters
                logging.getLogger(__name__).warning("heartbeat of group %s failed: %s", group.group_id, exc)

    async def _finish(self) -> None:
        if self._core.group is not None:
            try:
                await self._run(self._core.close_op())
            except Exception as exc:  # the session timeout removes the member
                logging.getLogger(__name__).warning("consumer close: group commit/leave failed: %s", exc)
        assert self._router is not None  # (_start made it)
        await self._router.aclose()

    async def _run(self, op: Op[T]) -> T:
        if self._router is None:
            raise RuntimeError(f"use `async with {type(self).__name__}(...)`")
        return await run_async(op, self._router)

    def assign(self, partitions) -> None:
        self._core.assign(partitions)

    def subscribe(self, topics=(), pattern=None, listener=None) -> None:
        """As :meth:`triolog.client.Consumer.subscribe`."""
        self._core.subscribe(topics, pattern=pattern, listener=listener)

    async def unsubscribe(self) -> None:
        await self._run(self._core.unsubscribe_op())

    def subscription(self) -> set[str]:
        return self._core.subscription()

    def group_metadata(self) -> ConsumerGroupMetadata:
        """As :meth:`triolog.client.Consumer.group_metadata`."""
        group = self._core.group
        if group is None:
            raise ValueError("this consumer has no group_id: no group metadata")
        return ConsumerGroupMetadata(
            group.group_id, group.generation, group.member_id, self._core.config.group_instance_id
        )

    async def commit(self, offsets: dict | None = None) -> None:
        """As :meth:`triolog.client.Consumer.commit`."""
        await self._run(self._core.commit_op(offsets))

    async def committed(self, tp) -> int | None:
        return await self._run(self._core.committed_op(tp))

    def assignment(self) -> set[TopicPartition]:
        return self._core.assignment()

    def seek(self, tp, offset: int) -> None:
        self._core.seek(tp, offset)

    def seek_to_beginning(self, *tps) -> None:
        self._core.seek_to_beginning(tps or None)

    def seek_to_end(self, *tps) -> None:
        self._core.seek_to_end(tps or None)

    def seek_to_timestamp(self, timestamp_ms: int, *tps) -> None:
        self._core.seek_to_timestamp(timestamp_ms, tps or None)

    async def position(self, tp) -> int:
        return await self._run(self._core.position_op(tp))

    async def offsets_for_times(self, timestamps: dict) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        return await self._run(self._core.offsets_for_times_op(timestamps))

    async def beginning_offsets(self, tps) -> dict[TopicPartition, int]:
        return await self._run(self._core.offsets_op(tps, EARLIEST))

    async def end_offsets(self, tps) -> dict[TopicPartition, int]:
        return await self._run(self._core.offsets_op(tps, LATEST))

    async def poll(self, timeout_ms: float = 0, max_records: int | None = None) -> Polled:
        """As :meth:`triolog.client.Consumer.poll`: records by partition, {} if none came."""
        return await self._run(self._core.poll_op(timeout_ms, max_records))

    async def poll_columns(self, timeout_ms: float = 0, max_records: int | None = None) -> PolledColumns:
        """As :meth:`triolog.client.Consumer.poll_columns`: poll()'s records as one
        :class:`triolog.client.types.RecordColumns` a partition, decoded without an object a
        record (bytes keys and values: ValueError on a consumer with deserializers). Mixes freely
        with poll(); positions move the same."""
        return await self._run(self._core.poll_columns_op(timeout_ms, max_records))

    async def __aiter__(self) -> AsyncIterator[ConsumerRecord]:
        """Records forever, or until ``consumer_timeout_ms`` passes without one."""
        idle_limit = self.config.consumer_timeout_ms
        last = now()
        while True:
            wait_ms: float = self.config.fetch_max_wait_ms
            if idle_limit is not None:
                wait_ms = max(0.0, min(wait_ms, idle_limit - (now() - last) * 1000))
            polled = await self.poll(wait_ms)
            for records in polled.values():
                for record in records:
                    yield record
            if polled:
                last = now()
            elif idle_limit is not None and (now() - last) * 1000 >= idle_limit:
                return


class AsyncAdminClient(_AsyncClient):
    _client_id = "triolog-admin"

    def __init__(
        self,
        bootstrap_servers: str = DEFAULT_BOOTSTRAP,
        *,
        request_timeout_ms: int = 30_000,
        client_id: str = "triolog-admin",
        **security,
    ) -> None:
        """``security``: the TLS and SASL settings, as :class:`triolog.client.AdminClient`'s."""
        sec, unknown = split_security(security)
        if unknown:
            raise TypeError(f"unexpected keyword arguments: {', '.join(sorted(unknown))}")
        super().__init__(bootstrap_servers, sec)
        self._client_id = client_id
        self._request_timeout_s = request_timeout_ms / 1000
        self._core = AdminCore(request_timeout_ms)

    async def create_topics(self, topics, validate_only: bool = False) -> dict[str, dict[str, str]]:
        return await self._run(self._core.create_topics_op(topics, validate_only))

    async def delete_topics(self, names) -> None:
        await self._run(self._core.delete_topics_op(names))

    async def list_topics(self) -> list[str]:
        return await self._run(self._core.list_topics_op())

    async def describe_topics(self, names=None) -> dict[str, TopicDescription]:
        return await self._run(self._core.describe_topics_op(names))

    async def describe_configs(self, names) -> dict[str, dict[str, ConfigEntry]]:
        return await self._run(self._core.describe_configs_op(names))

    async def describe_broker_configs(self, broker: str | int = "") -> dict:
        return await self._run(self._core.describe_broker_configs_op(broker))

    async def alter_configs(
        self, configs, delete=None, *, replace: bool = False, append=None, subtract=None, validate_only: bool = False
    ) -> None:
        await self._run(
            self._core.alter_configs_op(
                configs, delete, replace=replace, append=append, subtract=subtract, validate_only=validate_only
            )
        )

    async def create_partitions(self, counts: dict[str, int], validate_only: bool = False) -> None:
        """Grow topics to the given total partition counts, e.g. ``{"t": 6}``."""
        await self._run(self._core.create_partitions_op(counts, validate_only))

    async def delete_records(
        self, offsets: dict, raise_errors: bool = True
    ) -> dict[TopicPartition, int | TriologClientError]:
        """New low watermarks; with ``raise_errors=False`` a failed partition maps to its error."""
        return await self._run(self._core.delete_records_op(offsets, raise_errors))

    async def list_offsets(self, queries: dict) -> dict[TopicPartition, OffsetAndTimestamp]:
        return await self._run(self._core.list_offsets_op(queries))

    async def describe_log_dirs(self, topics=None) -> dict:
        """Per log dir (path), a LogDirDescription: see AdminClient.describe_log_dirs."""
        return await self._run(self._core.describe_log_dirs_op(topics))

    async def list_transactions(self, states=(), producer_ids=(), min_duration_ms: int = -1) -> list:
        return await self._run(self._core.list_transactions_op(states, producer_ids, min_duration_ms))

    async def describe_transactions(self, transactional_ids) -> dict:
        return await self._run(self._core.describe_transactions_op(transactional_ids))

    async def describe_producers(self, partitions) -> dict:
        return await self._run(self._core.describe_producers_op(partitions))

    async def abort_transaction(
        self, topic: str, partition: int, producer_id: int, producer_epoch: int, coordinator_epoch: int
    ) -> None:
        await self._run(
            self._core.abort_transaction_op(topic, partition, producer_id, producer_epoch, coordinator_epoch)
        )

    async def list_consumer_groups(self, states=()) -> list:
        return await self._run(self._core.list_groups_op(states))

    async def describe_consumer_groups(self, group_ids) -> dict:
        return await self._run(self._core.describe_groups_op(group_ids))

    async def delete_consumer_groups(self, group_ids, raise_errors: bool = True) -> dict:
        return await self._run(self._core.delete_groups_op(group_ids, raise_errors))

    async def list_consumer_group_offsets(self, group_id: str, partitions=None) -> dict[TopicPartition, int]:
        return await self._run(self._core.list_group_offsets_op(group_id, partitions))

    async def alter_consumer_group_offsets(self, group_id: str, offsets: dict) -> None:
        await self._run(self._core.alter_group_offsets_op(group_id, offsets))

    # -- ACLs and SCRAM users (Kafka's Admin API names) ------------------------------------------

    async def create_acls(self, acls) -> None:
        """Add :class:`AclBinding`s; the first failing one's error (SecurityDisabledError without an
        authorizer, ClusterAuthorizationFailedError, InvalidRequestError...) is raised."""
        await self._run(self._core.create_acls_op(acls))

    async def describe_acls(self, acl_filter: AclBindingFilter | None = None) -> list[AclBinding]:
        """The ACLs an :class:`AclBindingFilter` selects (all without one)."""
        return await self._run(self._core.describe_acls_op(acl_filter))

    async def delete_acls(self, filters) -> list[list[AclBinding]]:
        """Delete the ACLs each filter selects; per filter, the ACLs it deleted."""
        return await self._run(self._core.delete_acls_op(filters))

    async def describe_user_scram_credentials(self, users=None) -> dict[str, UserScramCredentialsDescription]:
        """User -> its SCRAM mechanisms and iterations (every user, or ``users``)."""
        return await self._run(self._core.describe_user_scram_credentials_op(users))

    async def alter_user_scram_credentials(self, alterations) -> None:
        """:class:`UserScramCredentialUpsertion` (a password, salted and hashed here) and
        :class:`UserScramCredentialDeletion` items."""
        await self._run(self._core.alter_user_scram_credentials_op(alterations))

    # -- client quotas (Kafka's describeClientQuotas / alterClientQuotas) ---------------------------

    async def describe_client_quotas(self, quota_filter=None) -> dict:
        """Entity -> its quotas, for the entities a ClientQuotaFilter selects (all without one)."""
        return await self._run(self._core.describe_client_quotas_op(quota_filter))

    async def alter_client_quotas(self, alterations, validate_only: bool = False, raise_errors: bool = True) -> dict:
        """Apply ClientQuotaAlterations, each on its own: see AdminClient.alter_client_quotas."""
        return await self._run(self._core.alter_client_quotas_op(alterations, validate_only, raise_errors))
