"""The partition leader's side of transactions: write_txn_markers (the transaction coordinator's
COMMIT and ABORT markers, Kafka's handleWriteTxnMarkersRequest) and describe_producers.

Served for :class:`triolog.broker.server.handlers.RequestHandler` by :class:`TxnPartitionApis`,
which uses the handler's own leadership checks and acks=all waits: a marker is appended to each
partition this broker leads (as the coordinator's write, not a producer's: no sequence), and
answered once committed as an acks=all produce is (fsynced on a standalone broker, in the ISR on
a cluster). A marker reaching a ``__consumer_offsets`` partition also decides the producer's
transactional offset commits there (the group coordinator's handle_txn_completion).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from triolog.broker.crash_points import crash_point
from triolog.broker.storage.topics import OFFSETS_TOPIC
from triolog.protocol import messages as m

from .appends import PartitionAppend, TopicAppends
from .authorization import Op
from .request_context import RequestContext

if TYPE_CHECKING:
    from .handlers import RequestHandler

__all__ = ["TxnPartitionApis"]


class TxnPartitionApis:
    def __init__(self, handler: RequestHandler):
        self.handler = handler

    async def write_txn_markers(self, request: m.WriteTxnMarkersRequest, ctx: RequestContext) -> m.Response:
        self.handler.authz.require_cluster(ctx, Op.CLUSTER_ACTION)
        return m.WriteTxnMarkersResponse(id=request.id, markers=tuple(await self.write_markers(request.markers)))

    async def write_markers(self, markers) -> list[m.TxnMarkerResult]:
        """Each marker on each of its partitions this broker leads, answered once committed (the
        coordinator's own broker calls this directly for the partitions it leads). All are
        appended first and then waited for together: one fsync or replication round for many."""
        handler = self.handler
        appended = await handler._in_thread(lambda: [self._append_marker(marker) for marker in markers])
        rows = [topic for per_marker in appended for topic in per_marker]
        handler.after_appends(rows)
        # (request.timeout.ms, as Kafka's WriteTxnMarkers waits; the coordinator retries a timeout)
        await handler.wait_acks_all(rows, handler.config.request_timeout_ms)
        results = []
        for marker, topics in zip(markers, appended, strict=True):
            decided = [
                row.partition
                for topic in topics
                if topic.name == OFFSETS_TOPIC
                for row in topic.partitions
                if row.info is not None
            ]
            if decided:
                handler.groups.txn_completed(marker.producer_id, decided, marker.committed)
            results.append(
                m.TxnMarkerResult(
                    producer_id=marker.producer_id,
                    topics=tuple(
                        m.TxnTopicResult(
                            name=topic.name,
                            partitions=tuple(
                                m.TxnPartitionResult(partition=row.partition)
                                if row.error is None
                                else m.TxnPartitionResult(
                                    partition=row.partition, error_code=row.error.code, error_message=row.error.message
                                )
                                for row in topic.partitions
                            ),
                        )
                        for topic in topics
                    ),
                )
            )
        return results

    def _append_marker(self, marker: m.TxnMarker) -> list[TopicAppends]:
        """In a worker thread: the marker appended to each of its partitions this broker leads."""
        handler = self.handler
        out: list[TopicAppends] = []
        for topic in marker.topics:
            rows: list[PartitionAppend] = []
            for partition in topic.partitions:
                try:
                    log, epoch = handler._leader(topic.name, partition)
                    info = log.append_end_txn_marker(
                        marker.producer_id,
                        marker.producer_epoch,
                        marker.coordinator_epoch,
                        marker.committed,
                        epoch,
                        transaction_version=marker.transaction_version,
                    )
                    rows.append(PartitionAppend(partition, info, log=log, leader_epoch=epoch))
                    crash_point("txn.marker_appended")
                except Exception as exc:
                    rows.append(PartitionAppend(partition, error=handler._partition_error(exc, topic.name, partition)))
            out.append(TopicAppends(topic.name, rows))
        return out

    async def describe_producers(self, request: m.DescribeProducersRequest, ctx: RequestContext) -> m.Response:
        handler = self.handler

        def work() -> tuple[m.ProducersTopicResult, ...]:
            topics = []
            for topic in request.topics:
                partitions = []
                for partition in topic.partitions:
                    try:
                        handler.authz.require_topic(ctx, Op.READ, topic.name)
                        log, _ = handler._leader(topic.name, partition)
                        states = tuple(
                            m.ProducerState(
                                producer_id=s.producer_id,
                                producer_epoch=s.producer_epoch,
                                last_sequence=s.last_sequence,
                                last_timestamp=s.last_timestamp,
                                coordinator_epoch=s.coordinator_epoch,
                                current_txn_start_offset=s.current_txn_start_offset,
                            )
                            for s in log.producer_states()
                        )
                        partitions.append(m.ProducersPartitionResult(partition=partition, active_producers=states))
                    except Exception as exc:
                        code, message = handler._partition_error(exc, topic.name, partition)
                        partitions.append(
                            m.ProducersPartitionResult(partition=partition, error_code=code, error_message=message)
                        )
                topics.append(m.ProducersTopicResult(name=topic.name, partitions=tuple(partitions)))
            return tuple(topics)

        return m.DescribeProducersResponse(id=request.id, topics=await handler._in_thread(work))
