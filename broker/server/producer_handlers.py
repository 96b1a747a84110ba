"""init_producer_id: the request handler's side of idempotent producers.

A mixin of :class:`triolog.broker.server.handlers.RequestHandler`. Producer ids are handed out by
the broker; each partition's producer state (sequence checks, duplicates) lives in storage.
"""

from __future__ import annotations

from triolog.protocol import messages as m
from triolog.protocol.errors import ErrorCode


class ProducerIdHandlers:
    async def _init_producer_id(self, request: m.InitProducerIdRequest) -> m.Response:
        return m.InitProducerIdResponse(id=request.id, error_code=ErrorCode.UNSUPPORTED_VERSION,
                                        error_message="producer ids are not handed out yet")
