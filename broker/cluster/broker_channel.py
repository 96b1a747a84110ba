"""Connections from this broker to the others' inter-broker listener.

:func:`open_broker_connection` dials a broker as the inter-broker listener asks (plaintext, TLS
verified against the broker's truststore, and/or a SASL login first): the replica fetchers and
the channel below both connect so. :class:`BrokerChannel` sends one-off requests to a broker
(the transaction coordinator's WriteTxnMarkers; Kafka's TransactionMarkerChannelManager keeps
such a NetworkClient): one connection per broker, made on first use and again after a failure,
its requests one at a time; a failure is raised to the caller, who decides whether to retry.
"""

from __future__ import annotations

import ssl
from typing import Any

import structlog
import trio

from triolog.protocol.frames import DEFAULT_MAX_FRAME_BYTES, NEED_DATA, FrameDecoder, RemoteProtocolError
from triolog.protocol.kafka.inter_broker import decode_response, encode_request

from .inter_broker_sasl import InterBrokerSasl, authenticate
from .metadata_cache import ClusterMetadataCache

__all__ = ["BrokerChannel", "BrokerUnavailableError", "open_broker_connection"]

logger = structlog.get_logger("triolog.cluster.channel")

_READ_CHUNK = 1 << 20


class BrokerUnavailableError(Exception):
    """A request to another broker got no answer: no endpoint, no connection, or it broke."""


async def open_broker_connection(
    host: str,
    port: int,
    *,
    ssl_context: ssl.SSLContext | None,
    sasl: InterBrokerSasl | None,
    client_id: str,
    correlation_id: int,
    timeout_s: float,
) -> tuple[trio.abc.Stream, int]:
    """A connection to a broker's inter-broker listener, logged in where it asks for SASL, and
    the last correlation id the login used (``correlation_id`` if none)."""
    stream: trio.abc.Stream = await trio.open_tcp_stream(host, port)
    try:
        if ssl_context is not None:  # the broker's TLS listener (SSL://, SASL_SSL://)
            stream = trio.SSLStream(stream, ssl_context, server_hostname=host)
            with trio.fail_after(timeout_s):
                await stream.do_handshake()
        if sasl is not None:
            with trio.fail_after(timeout_s):
                correlation_id = await authenticate(stream, sasl, client_id, (correlation_id + 1) & 0x7FFFFFFF)
    except BaseException:
        await trio.aclose_forcefully(stream)
        raise
    return stream, correlation_id


async def receive_frame(stream: trio.abc.ReceiveStream, decoder: FrameDecoder) -> bytes | None:
    """The next frame's body, or None if the other side closed the connection."""
    while True:
        frame = decoder.next_frame()
        if frame is not NEED_DATA:
            return frame
        data = await stream.receive_some(decoder.read_size(_READ_CHUNK))
        if not data:
            return None
        decoder.receive_data(bytes(data))


class _Connection:
    def __init__(self, stream: trio.abc.Stream, correlation_id: int):
        self.stream = stream
        self.correlation_id = correlation_id
        self.decoder = FrameDecoder(DEFAULT_MAX_FRAME_BYTES)
        self.lock = trio.Lock()


class BrokerChannel:
    def __init__(
        self,
        broker_id: int,
        cache: ClusterMetadataCache,
        *,
        listener_name: str,
        ssl_context: ssl.SSLContext | None = None,
        sasl: InterBrokerSasl | None = None,
        timeout_ms: int = 30_000,
    ):
        self.broker_id = broker_id
        self.cache = cache
        self.listener_name = listener_name
        self.ssl_context = ssl_context
        self.sasl = sasl
        self.timeout_s = timeout_ms / 1000
        self.client_id = f"broker-{broker_id}-channel"
        self._connections: dict[int, _Connection] = {}
        self._connecting: dict[int, trio.Lock] = {}

    async def call(self, target: int, api_key: int, version: int, values: dict[str, Any]) -> Any:
        """Broker ``target``'s answer (a kio body) to the request built from ``values``;
        BrokerUnavailableError when there is none (the connection is then dropped)."""
        connection = await self._connection(target)
        async with connection.lock:
            if self._connections.get(target) is not connection:  # dropped while we waited
                raise BrokerUnavailableError(f"the connection to broker {target} broke")
            connection.correlation_id = correlation_id = (connection.correlation_id + 1) & 0x7FFFFFFF
            frame = encode_request(api_key, version, correlation_id, self.client_id, values)
            try:
                with trio.fail_after(self.timeout_s):
                    await connection.stream.send_all(frame)
                    body = await receive_frame(connection.stream, connection.decoder)
                if body is None:
                    raise BrokerUnavailableError(f"broker {target} closed the connection")
                answered, response = decode_response(api_key, version, body)
                if answered != correlation_id:
                    raise RemoteProtocolError(f"response to request {answered}, expected {correlation_id}")
            except (OSError, trio.BrokenResourceError, trio.TooSlowError, RemoteProtocolError) as exc:
                await self._drop(target, connection)
                raise BrokerUnavailableError(f"request to broker {target} failed: {exc!r}") from exc
            except BrokerUnavailableError:
                await self._drop(target, connection)
                raise
            return response

    async def _connection(self, target: int) -> _Connection:
        connection = self._connections.get(target)
        if connection is not None:
            return connection
        lock = self._connecting.setdefault(target, trio.Lock())
        async with lock:
            connection = self._connections.get(target)
            if connection is not None:
                return connection
            registration = self.cache.brokers.get(target)
            endpoint = None if registration is None else registration.endpoint(self.listener_name)
            if endpoint is None:
                raise BrokerUnavailableError(f"broker {target} has no {self.listener_name} endpoint registered")
            try:
                stream, correlation_id = await open_broker_connection(
                    endpoint.host,
                    endpoint.port,
                    ssl_context=self.ssl_context,
                    sasl=self.sasl,
                    client_id=self.client_id,
                    correlation_id=0,
                    timeout_s=self.timeout_s,
                )
            except Exception as exc:
                raise BrokerUnavailableError(
                    f"cannot connect to broker {target} at {endpoint.host}:{endpoint.port}: {exc!r}"
                ) from exc
            connection = self._connections[target] = _Connection(stream, correlation_id)
            logger.info("broker_channel_connected", broker=target, address=f"{endpoint.host}:{endpoint.port}")
            return connection

    async def _drop(self, target: int, connection: _Connection) -> None:
        if self._connections.get(target) is connection:
            del self._connections[target]
        await trio.aclose_forcefully(connection.stream)

    async def aclose(self) -> None:
        for target, connection in list(self._connections.items()):
            await self._drop(target, connection)
