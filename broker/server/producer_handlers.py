"""init_producer_id: the request handler's side of idempotent producers.

A mixin of :class:`triolog.broker.server.handlers.RequestHandler`. Producer ids are handed out by
the broker (:class:`triolog.broker.coordinator.producer_id_manager.ProducerIdManager`); each
partition's producer state (sequence checks, duplicates) lives in storage.

Only idempotent producers are served (Kafka's InitProducerId with a null transactional id): every
call returns a NEW producer id with epoch 0, as Kafka's transaction coordinator does for them. A
producer whose epoch would overflow asks for a new id the same way.
"""

from __future__ import annotations

from triolog.broker.coordinator.producer_id_manager import ProducerIdBlockError, ProducerIdManager
from triolog.protocol import messages as m
from triolog.protocol.errors import ErrorCode


class ProducerIdHandlers:
    #: Set by the server (BrokerServer) once storage is loaded; None answers COORDINATOR_NOT_AVAILABLE.
    producer_ids: ProducerIdManager | None = None

    async def _init_producer_id(self, request: m.InitProducerIdRequest) -> m.Response:
        if request.transactional_id is not None:
            return m.InitProducerIdResponse(
                id=request.id, error_code=ErrorCode.INVALID_REQUEST,
                error_message="transactions are not served: init_producer_id needs transactional_id nil "
                              "(an idempotent producer)")
        manager = self.producer_ids
        if manager is None:
            return m.InitProducerIdResponse(id=request.id, error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                            error_message="the broker is not ready to hand out producer ids")
        try:
            # A new block is reserved with an fsync: never on the event loop.
            producer_id = await self.workers.run_sync(manager.generate_producer_id, limiter=self.limiter)
        except (OSError, ProducerIdBlockError) as exc:
            return m.InitProducerIdResponse(id=request.id, error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                            error_message=f"cannot reserve producer ids: {exc}")
        return m.InitProducerIdResponse(id=request.id, producer_id=producer_id, producer_epoch=0)
