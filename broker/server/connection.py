"""One client connection: bytes in through the sans-IO FrameDecoder, responses out in request order.

Requests of one connection are handled one at a time, in the order they arrived (as Kafka
mutes a channel while it has a request in flight), so pipelined responses come back in order.
Fetch responses go out as msgpack parts with the record bytes copied from the segment files by
sendfile. Every error a handler does not map is contained here: the connection answers
UNKNOWN_SERVER_ERROR and stays up; only unreadable framing closes it.
"""

from __future__ import annotations

import os

import structlog
import trio

from protocol import messages as m
from protocol.errors import ErrorCode
from protocol.frames import NEED_DATA, FrameDecoder, FrameTooLargeError, frame_prefix

from .handlers import FetchResult, RequestHandler

logger = structlog.get_logger("triolog.server")

RECEIVE_BYTES = 256 * 1024


class ClientConnection:
    def __init__(self, stream: trio.SocketStream, handler: RequestHandler, *, max_frame_bytes: int,
                 idle_timeout_s: float, peer: str, stats=None):
        self.stream = stream
        self.handler = handler
        self.decoder = FrameDecoder(max_frame_bytes)
        self.idle_timeout_s = idle_timeout_s
        self.peer = peer
        self.stats = stats
        #: True while a request is being handled: shutdown lets it finish, and cancels idle ones.
        self.busy = False

    async def serve(self, shutdown: trio.Event) -> None:
        while not shutdown.is_set():
            with trio.move_on_after(self.idle_timeout_s) as idle:
                data = await self.stream.receive_some(RECEIVE_BYTES)
            if idle.cancelled_caught:
                logger.info("connection_idle_closed", peer=self.peer, idle_s=self.idle_timeout_s)
                return
            if not data:
                return
            self.decoder.receive_data(data)
            while True:
                try:
                    frame = self.decoder.next_frame()
                except FrameTooLargeError as exc:
                    logger.warning("frame_too_large", peer=self.peer, length=exc.length)
                    await self._send_bytes(m.encode_response(
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
        try:
            request = m.decode_request(frame)
        except m.RequestError as exc:
            self._count(exc.api, exc.code)
            await self._send_bytes(m.encode_response(m.error_response(exc.request_id, exc.code, str(exc), exc.api)))
            return
        start = trio.current_time()
        try:
            response = await self.handler.handle(request)
        except Exception as exc:
            logger.exception("request_failed", peer=self.peer, api=request.api, id=request.id)
            self._count(request.api, ErrorCode.UNKNOWN_SERVER_ERROR)
            await self._send_bytes(m.encode_response(m.error_response(
                request.id, ErrorCode.UNKNOWN_SERVER_ERROR,
                f"unexpected server error: {type(exc).__name__}: {exc}", request.api)))
            return
        if response is None:  # produce with acks=0
            self._count(request.api, ErrorCode.NONE, trio.current_time() - start)
            return
        if isinstance(response, FetchResult):
            try:
                await self._send_parts(response)
            finally:
                response.close()
            self._count(request.api, ErrorCode.NONE, trio.current_time() - start)
            return
        payload = m.encode_response(response)
        self._count(request.api, response.error_code, trio.current_time() - start)
        await self._send_bytes(payload)

    def _count(self, api, code, latency_s: float | None = None) -> None:
        if self.stats is not None:
            self.stats.request_done(api, int(code), latency_s)

    async def _send_bytes(self, payload: bytes) -> None:
        await self.stream.send_all(frame_prefix(len(payload)) + payload)
        if self.stats is not None:
            self.stats.bytes_out(len(payload) + 4)

    async def _send_parts(self, result: FetchResult) -> None:
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
            self.stats.bytes_out(total + 4)


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
