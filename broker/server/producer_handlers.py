"""init_producer_id: the request handler's side of idempotent producers.

Served for :class:`triolog.broker.server.handlers.RequestHandler` by :class:`ProducerIdApis`, which
it is given. Producer ids are handed out by
the broker (:class:`triolog.broker.coordinator.producer_id_manager.ProducerIdManager`); each
partition's producer state (sequence checks, duplicates) lives in storage.

Idempotent producers (Kafka's InitProducerId with a null transactional id) are served here: every
call returns a NEW producer id with epoch 0, as Kafka's transaction coordinator does for them. A
producer whose epoch would overflow asks for a new id the same way. A transactional producer's
InitProducerId goes to the transaction coordinator (txn_handlers.py), which takes its producer
ids from :meth:`ProducerIdApis.new_producer_id`.
"""

from __future__ import annotations

import struct

from crc32c import crc32c

from triolog.broker.coordinator.producer_id_manager import ProducerIdBlockError, ProducerIdManager
from triolog.protocol import messages as m
from triolog.protocol.errors import ErrorCode, UnknownProducerIdError
from triolog.protocol.record_batch import (
    BATCH_LENGTH_OFFSET,
    CRC_OFFSET,
    CRC_START,
    HEADER_SIZE,
    LOG_OVERHEAD,
    PRODUCER_ID_OFFSET,
)

from .authorization import RequestAuthorizer
from .request_context import RequestContext

_PRODUCER_ID = struct.Struct(">q")
_BATCH_LENGTH = struct.Struct(">i")
_CRC = struct.Struct(">I")


class ProducerIdApis:
    """init_producer_id for the request handler, and the producer-id check of its produce path."""

    def __init__(self, *, manager: ProducerIdManager | None, log_manager, authz: RequestAuthorizer, workers, limiter):
        #: None answers COORDINATOR_NOT_AVAILABLE.
        self.producer_ids = manager
        self.log_manager = log_manager
        self.authz = authz
        self.workers = workers
        self.limiter = limiter
        #: The manager was told the largest producer id found in the logs (at the first init).
        self._producer_ids_seeded = False

    async def refresh_if_unknown(self, request: m.ProduceRequest) -> None:
        """Before a produce whose batch names a producer id past the ids known to be handed out:
        on a cluster, read the cluster's latest block afresh, since the broker that reserved it
        may have answered the producer before this broker's watch saw it."""
        manager = self.producer_ids
        if manager is None or manager.refresh_cluster_issued_limit is None:
            return
        limit = manager.issued_limit()
        for topic in request.topics:
            for part in topic.partitions:
                records = part.records
                if len(records) >= HEADER_SIZE and _PRODUCER_ID.unpack_from(records, PRODUCER_ID_OFFSET)[0] >= limit:
                    await manager.refresh_cluster_issued_limit()
                    return

    def check_producer_id(self, records, log) -> None:
        """Refuse a producer id this broker never handed out (at or past the reserved block's
        end) unless the partition already knows it (recovered from its log or snapshot): any
        client could otherwise make the broker keep state for unboundedly many ids. Cheap: one
        header read, on the produce path."""
        manager = self.producer_ids
        if manager is None or len(records) < HEADER_SIZE:
            return  # not ready (nothing is served then), or a batch the validator refuses
        (producer_id,) = _PRODUCER_ID.unpack_from(records, PRODUCER_ID_OFFSET)
        if producer_id < 0:
            return
        # Bytes that are not a whole batch with a good CRC are the validator's to refuse
        # (CORRUPT_MESSAGE, as Kafka answers them), not a producer id to judge.
        (length,) = _BATCH_LENGTH.unpack_from(records, BATCH_LENGTH_OFFSET)
        if length + LOG_OVERHEAD != len(records) or _CRC.unpack_from(records, CRC_OFFSET)[0] != crc32c(
            memoryview(records)[CRC_START:]
        ):
            return
        limit = manager.issued_limit()
        if producer_id >= limit and producer_id not in log.producer_state_manager.producers:
            raise UnknownProducerIdError(
                f"producer id {producer_id} was never handed out by this broker (ids so far are below "
                f"{limit}): get one with init_producer_id"
            )

    def _seed_producer_ids(self, manager: ProducerIdManager) -> None:
        """Once, in a worker: ids found in the logs are never handed out again, even if the block
        file was lost (the manager then starts past them, with a warning)."""
        if self._producer_ids_seeded:
            return
        seen = [
            max(log.producer_state_manager.producers, default=-1) for log in list(self.log_manager.all_logs().values())
        ]
        manager.load(max(seen, default=-1) + 1)
        self._producer_ids_seeded = True

    def _new_producer_id(self, manager: ProducerIdManager) -> int:
        self._seed_producer_ids(manager)
        return manager.generate_producer_id()

    async def new_producer_id(self) -> int:
        """A producer id never handed out before (the transaction coordinator's source)."""
        manager = self.producer_ids
        if manager is None:
            raise ProducerIdBlockError("the broker is not ready to hand out producer ids")
        # A new block is reserved with an fsync: never on the event loop.
        return await self.workers.run_sync(self._new_producer_id, manager, limiter=self.limiter)

    async def init_producer_id(self, request: m.InitProducerIdRequest, ctx: RequestContext) -> m.Response:
        """An idempotent producer's (transactional_id nil; a transactional producer's goes to
        the transaction coordinator: txn_handlers)."""
        if not self.authz.may_write_idempotently(ctx):
            return m.InitProducerIdResponse(
                id=request.id,
                error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                error_message=f"{ctx.principal} is not authorized to write idempotently (IDEMPOTENT_WRITE on the "
                f"cluster, or WRITE on some topic)",
            )
        manager = self.producer_ids
        if manager is None:
            return m.InitProducerIdResponse(
                id=request.id,
                error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE,
                error_message="the broker is not ready to hand out producer ids",
            )
        try:
            # A new block is reserved with an fsync: never on the event loop.
            producer_id = await self.workers.run_sync(self._new_producer_id, manager, limiter=self.limiter)
        except (OSError, ProducerIdBlockError) as exc:
            return m.InitProducerIdResponse(
                id=request.id,
                error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE,
                error_message=f"cannot reserve producer ids: {exc}",
            )
        return m.InitProducerIdResponse(id=request.id, producer_id=producer_id, producer_epoch=0)
