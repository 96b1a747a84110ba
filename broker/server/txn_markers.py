"""The transaction coordinator's marker sender (Kafka's TransactionMarkerChannelManager).

Ending a transaction means a COMMIT or ABORT marker on every partition it wrote to, on whichever
broker leads each one. :meth:`TxnMarkerSender.send` takes one transaction's markers and calls its
``done`` once, when every partition has answered for good:

* each partition goes to its leader's queue: this broker's own (written directly, through the
  request handler's WriteTxnMarkers path) or another broker's, which a drain task sends as one
  WriteTxnMarkers request over the :class:`~triolog.broker.cluster.broker_channel.BrokerChannel`
  (markers of many transactions share a request, as Kafka's queue per broker does);
* a partition whose answer can pass by itself (no leader, leadership moved, not yet replicated,
  the broker unreachable) is queued again after a pause, to its leader of then, for as long as
  the coordinator still owns the transaction (``still_current``);
* a partition that no longer exists is done (Kafka skips a deleted partition's marker), and so
  is one that refuses the marker for good (INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED:
  a newer coordinator or producer took over): ``done`` gets every partition's final code.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field

import structlog
import trio

from triolog.broker.cluster.broker_channel import BrokerChannel, BrokerUnavailableError
from triolog.broker.cluster.metadata_cache import ClusterMetadataCache
from triolog.protocol import messages as m
from triolog.protocol.errors import ErrorCode
from triolog.protocol.kafka.apis import ApiKey

__all__ = ["LOCAL", "MarkersDone", "TxnMarkerSender"]

logger = structlog.get_logger("triolog.transactions")

TopicPartition = tuple[str, int]
#: done(codes): each partition's final answer (NONE: written and committed).
MarkersDone = Callable[[dict[TopicPartition, ErrorCode]], None]
#: The queue of the partitions this broker leads itself.
LOCAL = -1
#: Pause before a partition whose answer may pass by itself is sent again (Kafka retries after
#: its retry.backoff.ms, 100 ms).
RETRY_BACKOFF_S = 0.1
#: Answers that pass by themselves: the partition is sent again, to its leader of then.
RETRIABLE = frozenset(
    {
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
        ErrorCode.NOT_ENOUGH_REPLICAS,
        ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        ErrorCode.REQUEST_TIMED_OUT,
        ErrorCode.KAFKA_STORAGE_ERROR,
        ErrorCode.UNKNOWN_SERVER_ERROR,
    }
)
#: WriteTxnMarkers v2: the first that carries the marker's transaction version (KIP-890).
WRITE_TXN_MARKERS_VERSION = 2


@dataclass(eq=False)
class _Transaction:
    """One send: its markers' partitions still unanswered, and the answers so far."""

    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    committed: bool
    pending: set[TopicPartition]
    done: MarkersDone
    still_current: Callable[[], bool]
    transaction_version: int
    codes: dict[TopicPartition, ErrorCode] = field(default_factory=dict)

    def marker(self, partitions: Iterable[TopicPartition]) -> m.TxnMarker:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(partitions):
            by_topic.setdefault(topic, []).append(partition)
        return m.TxnMarker(
            producer_id=self.producer_id,
            producer_epoch=self.producer_epoch,
            committed=self.committed,
            topics=tuple(m.TxnTopic(name=name, partitions=tuple(parts)) for name, parts in by_topic.items()),
            coordinator_epoch=self.coordinator_epoch,
            transaction_version=self.transaction_version,
        )


class TxnMarkerSender:
    """See the module docstring. ``write_local(markers)`` writes markers to the partitions this
    broker leads (the request handler's path); ``cache`` and ``channel`` are the cluster's (None
    on a single broker, where every partition is local)."""

    def __init__(
        self,
        *,
        write_local: Callable[[list[m.TxnMarker]], Awaitable[list[m.TxnMarkerResult]]],
        node_id: int,
        cache: ClusterMetadataCache | None = None,
        channel: BrokerChannel | None = None,
        retry_backoff_s: float = RETRY_BACKOFF_S,
    ):
        self.write_local = write_local
        self.node_id = node_id
        self.cache = cache
        self.channel = channel
        self.retry_backoff_s = retry_backoff_s
        self._nursery: trio.Nursery | None = None
        #: Per destination (a broker id, or LOCAL): (transaction, its partitions) to send.
        self._queues: dict[int, list[tuple[_Transaction, list[TopicPartition]]]] = {}
        self._queue_ready: dict[int, trio.Event] = {}
        #: Transactions being sent now (for the metrics and a test's wait).
        self.in_flight = 0

    def start(self, nursery: trio.Nursery) -> None:
        self._nursery = nursery
        self._queues, self._queue_ready = {}, {}

    def send(
        self,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        committed: bool,
        partitions: Iterable[TopicPartition],
        done: MarkersDone,
        still_current: Callable[[], bool] = lambda: True,
        transaction_version: int = 0,
    ) -> None:
        txn = _Transaction(
            producer_id,
            producer_epoch,
            coordinator_epoch,
            committed,
            set(partitions),
            done,
            still_current,
            transaction_version,
        )
        self.in_flight += 1
        if not txn.pending:
            self._finish(txn)
            return
        self._route(txn, list(txn.pending))

    # -- routing -------------------------------------------------------------------------------

    def _route(self, txn: _Transaction, partitions: Iterable[TopicPartition]) -> None:
        """Queue each partition to its leader now; one with no leader waits and is routed again."""
        if not txn.still_current():
            for tp in list(txn.pending):
                self._answer(txn, tp, ErrorCode.NOT_COORDINATOR)
            return
        by_destination: dict[int, list[TopicPartition]] = {}
        leaderless: list[TopicPartition] = []
        for tp in partitions:
            destination = self._destination(tp)
            if destination is None:
                # Gone from the cluster: a deleted partition gets no marker (Kafka skips it).
                self._answer(txn, tp, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            elif destination is False:
                leaderless.append(tp)
            else:
                by_destination.setdefault(destination, []).append(tp)
        for destination, tps in by_destination.items():
            self._enqueue(destination, txn, tps)
        if leaderless:
            self._retry_later(txn, leaderless)

    def _destination(self, tp: TopicPartition) -> int | bool | None:
        """The broker leading ``tp`` (LOCAL for this one), False while it has no leader, None if
        the partition does not exist."""
        cache = self.cache
        if cache is None:
            return LOCAL
        view = cache.partition(*tp)
        if view is None:
            return None
        if not view.online:
            return False
        return LOCAL if view.leader == self.node_id else view.leader

    def _enqueue(self, destination: int, txn: _Transaction, partitions: list[TopicPartition]) -> None:
        assert self._nursery is not None, "the sender was not started"
        queue = self._queues.get(destination)
        if queue is None:
            queue = self._queues[destination] = []
            self._queue_ready[destination] = trio.Event()
            self._nursery.start_soon(self._drain, destination, queue)
        queue.append((txn, partitions))
        self._queue_ready[destination].set()

    def _retry_later(self, txn: _Transaction, partitions: list[TopicPartition]) -> None:
        assert self._nursery is not None

        async def again() -> None:
            await trio.sleep(self.retry_backoff_s)
            self._route(txn, [tp for tp in partitions if tp in txn.pending])

        self._nursery.start_soon(again)

    # -- sending ---------------------------------------------------------------------------------

    async def _drain(self, destination: int, queue: list) -> None:
        """One destination's sender: everything queued meanwhile goes in one request."""
        while True:
            if not queue:
                self._queue_ready[destination] = trio.Event()
                await self._queue_ready[destination].wait()
                continue
            batch = queue[:]
            queue.clear()
            markers = [txn.marker(tps) for txn, tps in batch]
            try:
                if destination == LOCAL:
                    results = await self.write_local(markers)
                    answers = [_codes_of_result(result) for result in results]
                else:
                    answers = await self._send_remote(destination, markers)
            except Exception as exc:
                logger.warning(
                    "txn_markers_not_sent", broker=destination, error=repr(exc), retry_s=self.retry_backoff_s
                )
                answers = [dict.fromkeys(tps, ErrorCode.UNKNOWN_SERVER_ERROR) for _, tps in batch]
            for (txn, tps), codes in zip(batch, answers, strict=True):
                again = []
                for tp in tps:
                    code = codes.get(tp, ErrorCode.UNKNOWN_SERVER_ERROR)
                    if code in RETRIABLE or (code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and self.cache is not None):
                        # (on a cluster, a leader that does not know the partition may just be behind:
                        # the metadata, read again when it is routed, tells a deleted one)
                        again.append(tp)
                    else:
                        self._answer(txn, tp, code)
                if again:
                    self._retry_later(txn, again)

    async def _send_remote(self, broker: int, markers: list[m.TxnMarker]) -> list[dict[TopicPartition, ErrorCode]]:
        assert self.channel is not None
        values = {
            "markers": [
                {
                    "producer_id": marker.producer_id,
                    "producer_epoch": marker.producer_epoch,
                    "transaction_result": marker.committed,
                    "topics": [{"name": t.name, "partition_indexes": list(t.partitions)} for t in marker.topics],
                    "coordinator_epoch": marker.coordinator_epoch,
                    "transaction_version": marker.transaction_version,
                }
                for marker in markers
            ]
        }
        try:
            body = await self.channel.call(broker, ApiKey.WRITE_TXN_MARKERS, WRITE_TXN_MARKERS_VERSION, values)
        except BrokerUnavailableError as exc:
            logger.info("txn_markers_broker_unavailable", broker=broker, error=str(exc), retry_s=self.retry_backoff_s)
            return [
                {(t.name, p): ErrorCode.NOT_LEADER_OR_FOLLOWER for t in marker.topics for p in t.partitions}
                for marker in markers
            ]
        answers = [
            {
                (t.name, int(p.partition_index)): ErrorCode(int(p.error_code))
                for t in result.topics
                for p in t.partitions
            }
            for result in body.markers
        ]
        if len(answers) != len(markers):
            raise ValueError(f"broker {broker} answered {len(answers)} markers for {len(markers)}")
        return answers

    # -- completion ------------------------------------------------------------------------------

    def _answer(self, txn: _Transaction, tp: TopicPartition, code: ErrorCode) -> None:
        if tp not in txn.pending:
            return
        txn.pending.discard(tp)
        txn.codes[tp] = code
        if code not in (ErrorCode.NONE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_COORDINATOR):
            logger.warning(
                "txn_marker_refused",
                producer_id=txn.producer_id,
                producer_epoch=txn.producer_epoch,
                topic=tp[0],
                partition=tp[1],
                error=code.name,
            )
        if not txn.pending:
            self._finish(txn)

    def _finish(self, txn: _Transaction) -> None:
        self.in_flight -= 1
        txn.done(txn.codes)


def _codes_of_result(result: m.TxnMarkerResult) -> dict[TopicPartition, ErrorCode]:
    return {(t.name, p.partition): ErrorCode(p.error_code) for t in result.topics for p in t.partitions}
