"""One client connection: bytes in through the sans-IO FrameDecoder, responses out in request order.

Requests of one connection are handled one at a time, in the order they arrived (as Kafka
mutes a channel while it has a request in flight), so pipelined responses come back in order.
Fetch responses go out as msgpack parts with the record bytes copied from the segment files by
sendfile. Every error a handler does not map is contained here: the connection answers
UNKNOWN_SERVER_ERROR and stays up; only unreadable framing closes it.
"""

from __future__ import annotations

import os
from typing import Protocol

import structlog
import trio

from protocol import messages as m
from protocol.errors import ErrorCode
from protocol.frames import NEED_DATA, PREFIX_SIZE, FrameDecoder, FrameTooLargeError, frame_prefix

from .handlers import FetchResult, RequestHandler

logger = structlog.get_logger("triolog.server")

RECEIVE_BYTES = 256 * 1024
#: APIs whose responses are encoded without re-checking them against the schema.
_HOT_APIS = frozenset({"produce", "fetch"})


class ConnectionStats(Protocol):
    """What a connection reports (``broker.metrics.ServerMetrics``); ``api`` None = not a readable request."""

    def request_done(self, api: str | None, code: int, latency_s: float | None = None) -> None: ...

    def bytes_in(self, api: str | None, n: int) -> None: ...

    def bytes_out(self, api: str | None, n: int) -> None: ...


class ClientConnection:
    def __init__(self, stream: trio.SocketStream, handler: RequestHandler, *, max_frame_bytes: int,
                 idle_timeout_s: float, peer: str, stats: ConnectionStats | None = None):
        self.stream = stream
        self.handler = handler
        self.decoder = FrameDecoder(max_frame_bytes)
        self.idle_timeout_s = idle_timeout_s
        self.peer = peer
        self.stats = stats
        #: True while a request is being handled: shutdown lets it finish, and cancels idle ones.
        self.busy = False
        #: Bytes read from the socket, and those of them that formed whole frames (for stats).
        self._received_bytes = 0
        self._framed_bytes = 0

    async def serve(self, shutdown: trio.Event) -> None:
        try:
            await self._serve(shutdown)
        finally:
            # Bytes that never formed a whole frame (cut off, or over the frame limit) still came in.
            if self.stats is not None and self._received_bytes > self._framed_bytes:
                self.stats.bytes_in(None, self._received_bytes - self._framed_bytes)

    async def _serve(self, shutdown: trio.Event) -> None:
        while not shutdown.is_set():
            with trio.move_on_after(self.idle_timeout_s) as idle:
                data = await self.stream.receive_some(RECEIVE_BYTES)
            if idle.cancelled_caught:
                logger.info("connection_idle_closed", peer=self.peer, idle_s=self.idle_timeout_s)
                return
            if not data:
                return
            self._received_bytes += len(data)
            self.decoder.receive_data(data)
            while True:
                try:
                    frame = self.decoder.next_frame()
                except FrameTooLargeError as exc:
                    logger.warning("frame_too_large", peer=self.peer, length=exc.length)
                    await self._send_bytes(None, m.encode_response(
                        m.error_response(None, ErrorCode.INVALID_REQUEST, str(exc))))
                    return
                if frame is NEED_DATA:
                    break
                self.busy = True
                try:
                    await self._handle_frame(frame)
                finally:
                    self.busy = False
                if shutdown.is_set():
                    return

    async def _handle_frame(self, frame: bytes) -> None:
        """Answer one request. It is counted once its outcome is known, with the time from here
        to its response written (or the write failing); a request cancelled before it has an
        outcome (shutdown grace expired) is not counted."""
        start = trio.current_time()
        api: str | None = None
        code: int | None = None
        try:
            try:
                request = m.decode_request(frame)
            except m.RequestError as exc:
                api, code = exc.api, exc.code
                await self._send_bytes(api, m.encode_response(
                    m.error_response(exc.request_id, exc.code, str(exc), exc.api)))
                return
            api = request.api
            try:
                response = await self.handler.handle(request)
            except Exception as exc:
                logger.exception("request_failed", peer=self.peer, api=request.api, id=request.id)
                code = ErrorCode.UNKNOWN_SERVER_ERROR
                await self._send_bytes(api, m.encode_response(m.error_response(
                    request.id, ErrorCode.UNKNOWN_SERVER_ERROR,
                    f"unexpected server error: {type(exc).__name__}: {exc}", request.api)))
                return
            if response is None:  # produce with acks=0
                code = ErrorCode.NONE
                return
            if isinstance(response, FetchResult):
                code = ErrorCode.NONE
                try:
                    await self._send_parts(api, response)
                finally:
                    response.close()
                return
            try:
                # The hot paths skip the schema re-check (still refusing an error without a message).
                payload = m.encode_response(response, check_schema=api not in _HOT_APIS)
            except Exception:
                code = ErrorCode.UNKNOWN_SERVER_ERROR  # a bug on our side; the connection closes
                raise
            code = response.error_code
            await self._send_bytes(api, payload)
        finally:
            self._framed_bytes += len(frame) + PREFIX_SIZE
            if self.stats is not None:
                self.stats.bytes_in(api, len(frame) + PREFIX_SIZE)
                if code is not None:
                    self.stats.request_done(api, int(code), trio.current_time() - start)

    async def _send_bytes(self, api: str | None, payload: bytes) -> None:
        await self.stream.send_all(frame_prefix(len(payload)) + payload)
        if self.stats is not None:
            self.stats.bytes_out(api, len(payload) + PREFIX_SIZE)

    async def _send_parts(self, api: str | None, result: FetchResult) -> None:
        """The frame prefix and msgpack bytes through the stream; record bytes by sendfile."""
        parts = result.parts
        total = m.parts_length(parts)
        pending = bytearray(frame_prefix(total))
        sock = self.stream.socket
        for part in parts:
            if isinstance(part, m.ExternalBin):
                if pending:
                    await self.stream.send_all(bytes(pending))
                    pending.clear()
                region = part.ref
                await _sendfile(sock, region.fd, region.position, region.length)
            else:
                pending.extend(part)
        if pending:
            await self.stream.send_all(bytes(pending))
        if self.stats is not None:
            self.stats.bytes_out(api, total + PREFIX_SIZE)


async def _sendfile(sock, fd: int, position: int, count: int) -> None:
    """Zero-copy file-to-socket copy on trio's non-blocking socket."""
    while count > 0:
        await trio.lowlevel.wait_writable(sock)
        try:
            sent = os.sendfile(sock.fileno(), fd, position, count)
        except BlockingIOError:
            continue
        if sent == 0:  # the file shrank under us: the frame cannot be completed
            raise trio.BrokenResourceError("segment file ended before the fetched region")
        position += sent
        count -= sent
