"""A produce request's transactional batches checked before they are appended: WRITE on the
transactional id the request names (Kafka's rule for every transactional produce), and KIP-890
part 1's verification (``transaction.partition.verification.enable``): before a producer's
first transactional batch on a partition, the leader asks the transaction coordinator whether
the partition is in the producer's ongoing transaction, so a batch of a partition never added
(a buggy client, or a late batch of a transaction that already ended) is refused with
INVALID_TXN_STATE instead of leaving a transaction nothing will ever end.

The leader takes a VerificationGuard before it asks (Log.maybe_start_txn_verification) and
appends with it; a marker in between makes the guard stale and the append is refused.
Coordinator answers a client can outwait (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE,
COORDINATOR_LOAD_IN_PROGRESS, CONCURRENT_TRANSACTIONS) become NOT_ENOUGH_REPLICAS, which every
producer retries, and PRODUCER_FENCED becomes INVALID_PRODUCER_EPOCH, as Kafka's ReplicaManager
maps them.
"""

from __future__ import annotations

from triolog.broker.storage.producer_state import NO_VERIFICATION_NEEDED, VerificationGuard
from triolog.protocol import messages as m
from triolog.protocol.errors import ErrorCode
from triolog.protocol.record_batch import ATTRIBUTES_OFFSET, PRODUCER_FIELDS, PRODUCER_ID_OFFSET, TRANSACTIONAL_FLAG

from .authorization import Op
from .error_mapping import ApiError
from .request_context import RequestContext

__all__ = ["verify_transactional_produce"]

_RETRIABLE = frozenset(
    {
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.CONCURRENT_TRANSACTIONS,
    }
)

TopicPartition = tuple[str, int]
#: Per partition: the guard to append with, or the error to answer instead.
Verified = dict[TopicPartition, "VerificationGuard | ApiError"]


def _transactional(records) -> tuple[int, int] | None:
    """(producer id, epoch) of a transactional batch; None for any other (or too short to
    tell: the append's validation refuses it)."""
    if (
        len(records) < PRODUCER_ID_OFFSET + PRODUCER_FIELDS.size
        or not records[ATTRIBUTES_OFFSET + 1] & TRANSACTIONAL_FLAG
    ):
        return None
    producer_id, epoch, _ = PRODUCER_FIELDS.unpack_from(records, PRODUCER_ID_OFFSET)
    return producer_id, epoch


def _mapped(code: ErrorCode, message: str) -> ApiError:
    if code in _RETRIABLE:
        return ApiError(ErrorCode.NOT_ENOUGH_REPLICAS, f"transaction verification: {message} (retry)")
    if code == ErrorCode.PRODUCER_FENCED:
        return ApiError(ErrorCode.INVALID_PRODUCER_EPOCH, f"transaction verification: {message}")
    return ApiError(code, f"transaction verification: {message}")


async def verify_transactional_produce(handler, request: m.ProduceRequest, ctx: RequestContext) -> Verified | None:
    """None when the request has no transactional batch; else, for each partition of the
    request to answer or append differently, its guard or its error."""
    batches: dict[TopicPartition, tuple[int, int]] = {}
    for topic in request.topics:
        for part in topic.partitions:
            ids = _transactional(part.records)
            if ids is not None:
                batches[(topic.name, part.partition)] = ids
    if not batches:
        return None
    transactional_id = request.transactional_id
    refusal = None
    if not transactional_id:
        refusal = ApiError(
            ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
            "a produce request with transactional batches must name its transactional_id",
        )
    elif not handler.authz.transactional_id(ctx, Op.WRITE, transactional_id):
        refusal = ApiError(
            ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
            f"{ctx.principal} is not authorized to write transactional id {transactional_id!r}",
        )
    if refusal is not None:  # Kafka refuses the whole request
        return {(t.name, p.partition): refusal for t in request.topics for p in t.partitions}
    service = handler.transactions.service
    if not handler.config.transaction_partition_verification_enable or service is None:
        return None
    verified: Verified = {}
    asking: dict[tuple[int, int], list[TopicPartition]] = {}
    for tp, ids in batches.items():
        try:
            log, _ = handler._leader(*tp, inline=True)
        except Exception:
            # Not led here, or not open yet: the append answers that, and should it find the
            # log after all, a batch that would open a transaction is refused unverified.
            verified[tp] = NO_VERIFICATION_NEEDED
            continue
        guard = log.maybe_start_txn_verification(ids[0])
        verified[tp] = guard
        if guard is not NO_VERIFICATION_NEEDED:
            asking.setdefault(ids, []).append(tp)
    counts = service.verifications
    for (producer_id, epoch), partitions in asking.items():
        answer = await service.verify(transactional_id, producer_id, epoch, partitions)
        for tp in partitions:
            error = answer.get(tp) if isinstance(answer, dict) else answer
            if error is None:
                counts["verified"] += 1
                continue
            verified[tp] = mapped = _mapped(error.code, error.message)
            counts["unavailable" if mapped.code == ErrorCode.NOT_ENOUGH_REPLICAS else "refused"] += 1
    return verified
