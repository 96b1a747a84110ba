"""The transaction APIs of the request handler (init_producer_id with a transactional id,
find_coordinator for key_type 1, add_partitions_to_txn, add_offsets_to_txn, end_txn,
describe_transactions, list_transactions) and :class:`TransactionService`, which runs the pure
:class:`TransactionCoordinator` inside the broker.

TransactionService owns the coordinator's contact with the rest of the broker, as GroupService
does for groups:

* ``__transaction_state`` is created on first use (the first FindCoordinator or InitProducerId
  with a transactional id), compacted, ``transaction.state.log.num.partitions`` partitions (on a
  cluster with its replication factor and min.insync.replicas); when it exists at startup its
  partitions are loaded (worker threads) while the broker serves, their ids answering
  COORDINATOR_LOAD_IN_PROGRESS meanwhile. On a cluster the coordinator of an id is the leader of
  its partition; the leader epoch is the coordinator epoch its markers carry;
* writes go through the shared CoordinatorRecordWriter (durable before answered);
* markers go through the :class:`~.txn_markers.TxnMarkerSender` (this broker's partitions
  directly, the others' over the broker channel);
* producer ids come from the broker's ProducerIdManager (blocks reserved in a worker thread);
* timers: the retries of Complete* writes, the abort of timed-out transactions
  (transaction.abort.timed.out.transaction.cleanup.interval.ms), the expiration of idle ids
  (transaction.remove.expired.transaction.cleanup.interval.ms).
"""

from __future__ import annotations

import structlog
import trio

from triolog.broker.cluster.broker_channel import BrokerUnavailableError
from triolog.broker.coordinator.group.group_coordinator import Error
from triolog.broker.coordinator.group.group_metadata_manager import read_partition_records
from triolog.broker.coordinator.transaction.transaction_coordinator import (
    EndTxnResult,
    InitProducerIdResult,
    TransactionConfig,
    TransactionCoordinator,
)
from triolog.broker.coordinator.transaction.transaction_log import (
    TRANSACTION_STATE_TOPIC,
    load_transactions,
    partition_for,
)
from triolog.broker.coordinator.transaction.transaction_metadata import TransactionState
from triolog.broker.crash_points import ARMED, crash_point
from triolog.broker.storage.filenames import validate_topic_name
from triolog.broker.storage.topics import OFFSETS_TOPIC
from triolog.protocol import messages as m
from triolog.protocol.errors import ErrorCode
from triolog.protocol.kafka.apis import ApiKey

from .authorization import Op, RequestAuthorizer
from .coordinator_topic import (
    ClusterCoordinatorPartitions,
    CoordinatorRecordWriter,
    CoordinatorService,
    CoordinatorTopic,
)
from .request_context import RequestContext, parked
from .txn_markers import TxnMarkerSender

#: AddPartitionsToTxn v4: the first that batches transactions and carries VerifyOnly (KIP-890).
VERIFY_VERSION = 4

logger = structlog.get_logger("triolog.transactions")

_NOT_AVAILABLE = "the transaction coordinator is not available on this broker"
#: Where a TransactionLogValue (v0 and v1) holds its state id: after the version, producer id,
#: epoch and timeout.
_STATUS_OFFSET = 2 + 8 + 2 + 4
#: The transaction version of each listener's clients: ours end every transaction with an epoch
#: bump (KIP-890); Kafka's clients speak EndTxn up to v4, transaction version 1.
OWN_CLIENTS_TRANSACTION_VERSION = 2
KAFKA_CLIENTS_TRANSACTION_VERSION = 1


def transaction_state_topic(config) -> CoordinatorTopic:
    """__transaction_state as the broker config sizes it."""
    return CoordinatorTopic(
        name=TRANSACTION_STATE_TOPIC,
        num_partitions=config.transaction_state_log_num_partitions,
        replication_factor=config.transaction_state_log_replication_factor,
        segment_bytes=config.transaction_state_log_segment_bytes,
        commit_timeout_ms=config.request_timeout_ms,
        replication_factor_key="transaction.state.log.replication.factor",
        commit_timeout_key="request.timeout.ms",
        extra_configs={"min.insync.replicas": str(config.transaction_state_log_min_isr)},
    )


class _Leadership:
    """What ClusterCoordinatorPartitions.follow tells: a partition gained is loaded (by ``load``,
    with its leader epoch as the coordinator epoch), a partition lost forgotten."""

    def __init__(self, service: TransactionService):
        self.service = service

    def take_partition(self, partition: int) -> None:
        pass  # loading starts in load(partition, epoch), which knows the epoch

    def release_partition(self, partition: int) -> int:
        coordinator = self.service.coordinator
        return 0 if coordinator is None else coordinator.unload_partition(partition)


class TransactionService(CoordinatorService):
    """The transaction coordinator inside the running broker (see the module docstring)."""

    what = "transactions"

    def __init__(
        self,
        config,
        topics,
        committer,
        notifier,
        workers,
        limiter,
        clock,
        producers,
        write_local,
        cluster: ClusterCoordinatorPartitions | None = None,
        channel=None,
    ):
        super().__init__(transaction_state_topic(config), topics, workers, limiter, cluster)
        self.config = config
        self.clock = clock
        self.producers = producers
        self.coordinator: TransactionCoordinator | None = None
        self._wake = trio.Event()
        self.writer = CoordinatorRecordWriter(
            transaction_state_topic(config),
            topics,
            committer,
            notifier,
            workers,
            limiter,
            clock,
            cluster,
            _NOT_AVAILABLE,
        )
        self.markers = TxnMarkerSender(
            write_local=write_local,
            node_id=config.node_id,
            cache=None if cluster is None else cluster.cache,
            channel=channel,
        )
        #: Partition leaders' verifications (KIP-890) by result: verified, refused (the
        #: partition is not in the transaction, or the producer is fenced), unavailable (the
        #: coordinator could not answer: the producer retries).
        self.verifications: dict[str, int] = {"verified": 0, "refused": 0, "unavailable": 0}

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self.writer.start(nursery)
            self.markers.start(nursery)
            nursery.start_soon(self._poll_task)
            nursery.start_soon(
                self._periodic,
                "transaction_abort",
                self.config.transaction_abort_timed_out_transaction_cleanup_interval_ms,
                lambda c: c.abort_timed_out_transactions(),
            )
            nursery.start_soon(
                self._periodic,
                "transactional_id_expiration",
                self.config.transaction_remove_expired_transaction_cleanup_interval_ms,
                lambda c: c.expire_transactional_ids(),
            )
            self._start_in(nursery)
            task_status.started()

    def shutdown(self) -> None:
        if self.coordinator is not None:
            self.coordinator.shutdown()

    def topic_exists(self) -> bool:
        """Whether __transaction_state exists (the cluster's, on a cluster member)."""
        if self.cluster is not None:
            return self.cluster.topic_partitions() is not None
        return self.topics.get(TRANSACTION_STATE_TOPIC) is not None

    # -- the coordinator's ports ---------------------------------------------------------------

    def _append(self, partition: int, key: bytes, value: bytes | None, done) -> None:
        point = None
        if ARMED:  # (the crash-point tests: which state this record writes)
            point = "Dead" if value is None else TransactionState(value[_STATUS_OFFSET]).kafka_name
            crash_point(f"txn.before_write.{point}")

        def stored(failure, _offset: int) -> None:
            if point is not None and failure is None:
                crash_point(f"txn.after_write.{point}")
            done(None if failure is None else (int(failure[0]), failure[1]))

        self.writer.store(partition, [(key, value)], stored)

    def _allocate_producer_id(self, done) -> None:
        async def allocate() -> None:
            try:
                producer_id = await self.producers.new_producer_id()
            except Exception as exc:
                done((ErrorCode.COORDINATOR_NOT_AVAILABLE, f"cannot reserve producer ids: {exc}"), -1)
                return
            done(None, producer_id)

        assert self._nursery is not None
        self._nursery.start_soon(allocate)

    # -- CoordinatorService's hooks -----------------------------------------------------------

    def _start_coordinator(self, existing: bool) -> TransactionCoordinator:
        cluster = self.cluster
        partitions = cluster.topic_partitions() if cluster is not None else None
        if partitions is None:
            partitions = self.topics.get(TRANSACTION_STATE_TOPIC).num_partitions
        coordinator = TransactionCoordinator(
            TransactionConfig.from_broker_config(self.config, partitions),
            self.clock,
            self._append,
            self.markers.send,
            self._allocate_producer_id,
            lambda: self._wake.set(),
        )
        self.coordinator = coordinator
        assert self._nursery is not None
        if cluster is not None:  # no id until a partition's leadership brings its ids
            self._nursery.start_soon(cluster.follow, _Leadership(self), self._load_led)
        else:
            for partition in range(partitions):
                coordinator.begin_loading(partition, 0)
                if not existing:  # a new topic: nothing to read
                    coordinator.load_partition(partition, 0, {})
        return coordinator

    def _local_partitions(self, coordinator: TransactionCoordinator) -> list[int]:
        return list(coordinator.partitions)

    def _begin_loading(self, partition: int, epoch: int) -> None:
        assert self.coordinator is not None
        self.coordinator.begin_loading(partition, epoch)

    def _replay(self, log):
        return load_transactions(read_partition_records(log, self.config.transaction_state_log_load_buffer_size))

    def _load_partition(self, coordinator: TransactionCoordinator, partition: int, epoch: int, loaded) -> int:
        return coordinator.load_partition(partition, epoch, loaded)

    def _create_local_topic(self) -> None:
        if self.topics.get(TRANSACTION_STATE_TOPIC) is None:
            config = self.config
            self.topics.create_internal_topic(
                TRANSACTION_STATE_TOPIC,
                config.transaction_state_log_num_partitions,
                config.transaction_state_log_segment_bytes,
            )
            logger.info(
                "topic_created",
                topic=TRANSACTION_STATE_TOPIC,
                partitions=config.transaction_state_log_num_partitions,
                internal=True,
            )

    # -- verification (KIP-890 part 1) ---------------------------------------------------------

    def verify_here(
        self, transactional_id: str, producer_id: int, producer_epoch: int, partitions
    ) -> Error | dict[tuple[str, int], Error | None]:
        """This broker's coordinator's answer to a partition leader's verification."""
        coordinator = self.coordinator
        if coordinator is None:
            return Error(ErrorCode.COORDINATOR_NOT_AVAILABLE, _NOT_AVAILABLE)
        return coordinator.verify_partitions(transactional_id, producer_id, producer_epoch, partitions)

    async def verify(
        self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: list[tuple[str, int]]
    ) -> Error | dict[tuple[str, int], Error | None]:
        """A partition leader asks the transactional id's coordinator whether ``partitions`` are
        in the producer's ongoing transaction: this broker's coordinator directly, another's
        with AddPartitionsToTxn v4 (VerifyOnly) over the broker channel."""
        cluster = self.cluster
        if cluster is None:
            return self.verify_here(transactional_id, producer_id, producer_epoch, partitions)
        count = cluster.topic_partitions()
        if count is None:
            return Error(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"{TRANSACTION_STATE_TOPIC} does not exist")
        partition = partition_for(transactional_id, count)
        view = cluster.cache.partition(TRANSACTION_STATE_TOPIC, partition)
        if view is None or not view.online:
            return Error(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"{TRANSACTION_STATE_TOPIC}-{partition} has no leader")
        if view.leader == self.config.node_id:
            return self.verify_here(transactional_id, producer_id, producer_epoch, partitions)
        channel = self.markers.channel
        assert channel is not None  # (a cluster member has one)
        by_topic: dict[str, list[int]] = {}
        for topic, p in partitions:
            by_topic.setdefault(topic, []).append(p)
        values = {
            "transactions": [
                {
                    "transactional_id": transactional_id,
                    "producer_id": producer_id,
                    "producer_epoch": producer_epoch,
                    "verify_only": True,
                    "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()],
                }
            ]
        }
        try:
            body = await channel.call(view.leader, ApiKey.ADD_PARTITIONS_TO_TXN, VERIFY_VERSION, values)
        except BrokerUnavailableError as exc:
            return Error(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"coordinator broker {view.leader}: {exc}")
        if body.error_code:
            return Error(ErrorCode(int(body.error_code)), "the coordinator refused the verification")
        answers: dict[tuple[str, int], Error | None] = {}
        for result in body.results_by_transaction:
            for t in result.topic_results:
                for r in t.results_by_partition:
                    code = ErrorCode(int(r.partition_error_code))
                    answers[(t.name, int(r.partition_index))] = (
                        None
                        if code == ErrorCode.NONE
                        else Error(code, f"coordinator broker {view.leader}: {code.name}")
                    )
        missing = [tp for tp in partitions if tp not in answers]
        if missing:
            return Error(ErrorCode.UNKNOWN_SERVER_ERROR, f"the coordinator did not answer for {missing}")
        return answers

    # -- timers --------------------------------------------------------------------------------

    async def _poll_task(self) -> None:
        """Sleeps until the coordinator has a retry due (it wakes the task when it schedules one)."""
        while True:
            self._wake = trio.Event()
            due = None if self.coordinator is None else self.coordinator.poll()
            if due is None:
                await self._wake.wait()
            else:
                with trio.move_on_after(max(0.0, (due - self.clock.milliseconds()) / 1000)):
                    await self._wake.wait()

    async def _periodic(self, task: str, interval_ms: int, act) -> None:
        while True:
            await trio.sleep(interval_ms / 1000)
            if self.coordinator is not None:
                try:
                    started = act(self.coordinator)
                    if started:
                        logger.info(task, transactions=started)
                except Exception:
                    logger.exception("background_task_failed", task=task)


def _txn_error(code: ErrorCode, message: str) -> dict:
    return {"error_code": code, "error_message": message}


class TransactionApis:
    """The transaction APIs of the request handler, over the running coordinator (``service``)."""

    def __init__(
        self,
        *,
        config,
        topics,
        authz: RequestAuthorizer,
        service: TransactionService | None,
        groups,
        advertised_host: str,
        advertised_port: int,
    ):
        self.config = config
        self.topics = topics
        self.authz = authz
        self.service = service
        #: The group service (AddOffsetsToTxn maps a group to its __consumer_offsets partition).
        self.groups = groups
        self.advertised_host = advertised_host
        self.advertised_port = advertised_port

    async def _coordinator(self) -> TransactionCoordinator | None:
        return None if self.service is None else await self.service.ready()

    def _denied(self, ctx: RequestContext, transactional_id: str, operation: Op) -> dict | None:
        if self.authz.transactional_id(ctx, operation, transactional_id):
            return None
        return _txn_error(
            ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
            f"{ctx.principal} is not authorized to {operation.name.lower()} transactional id {transactional_id!r}",
        )

    @staticmethod
    def _transaction_version(ctx: RequestContext) -> int:
        kafka = ctx.listener == "kafka.listeners"
        return KAFKA_CLIENTS_TRANSACTION_VERSION if kafka else OWN_CLIENTS_TRANSACTION_VERSION

    # -- find_coordinator ----------------------------------------------------------------------

    async def find_coordinator(self, request: m.FindCoordinatorRequest, ctx: RequestContext) -> m.Response:
        denied = self._denied(ctx, request.key, Op.DESCRIBE)
        if denied is not None:
            return m.FindCoordinatorResponse(id=request.id, **denied)
        if not request.key:
            return m.FindCoordinatorResponse(id=request.id, **_txn_error(ErrorCode.INVALID_REQUEST, "empty key"))
        coordinator = await self._coordinator()
        if coordinator is None or not coordinator.active:
            return m.FindCoordinatorResponse(
                id=request.id, **_txn_error(ErrorCode.COORDINATOR_NOT_AVAILABLE, _NOT_AVAILABLE)
            )
        cluster = self.service.cluster if self.service is not None else None
        if cluster is not None:
            partition = coordinator.partition_for(request.key)
            found = cluster.coordinator_of(partition, kafka_listener=ctx.listener == "kafka.listeners")
            if found is None:
                return m.FindCoordinatorResponse(
                    id=request.id,
                    **_txn_error(
                        ErrorCode.COORDINATOR_NOT_AVAILABLE,
                        f"{TRANSACTION_STATE_TOPIC} partition {partition} of transactional id {request.key!r} "
                        f"has no leader now",
                    ),
                )
            node_id, host, port = found
            return m.FindCoordinatorResponse(id=request.id, node_id=node_id, host=host, port=port)
        return m.FindCoordinatorResponse(
            id=request.id, node_id=self.config.node_id, host=self.advertised_host, port=self.advertised_port
        )

    # -- init_producer_id ----------------------------------------------------------------------

    async def init_producer_id(self, request: m.InitProducerIdRequest, ctx: RequestContext) -> m.Response:
        transactional_id = request.transactional_id
        assert transactional_id is not None  # (an idempotent producer's is ProducerIdApis')
        denied = self._denied(ctx, transactional_id, Op.WRITE)
        if denied is not None:
            return m.InitProducerIdResponse(id=request.id, **denied)
        coordinator = await self._coordinator()
        if coordinator is None:
            return m.InitProducerIdResponse(
                id=request.id, **_txn_error(ErrorCode.COORDINATOR_NOT_AVAILABLE, _NOT_AVAILABLE)
            )
        expected = None
        if request.producer_id >= 0 or request.producer_epoch >= 0:
            expected = (request.producer_id, request.producer_epoch)
        result: InitProducerIdResult = await parked(
            ctx,
            lambda respond: coordinator.handle_init_producer_id(
                transactional_id, request.transaction_timeout_ms, expected, respond
            ),
        )
        if result.error is not None:
            return m.InitProducerIdResponse(id=request.id, **_txn_error(*result.error))
        return m.InitProducerIdResponse(
            id=request.id, producer_id=result.producer_id, producer_epoch=result.producer_epoch
        )

    # -- add_partitions_to_txn, add_offsets_to_txn -----------------------------------------------

    async def add_partitions_to_txn(self, request: m.AddPartitionsToTxnRequest, ctx: RequestContext) -> m.Response:
        def answer(codes: dict[tuple[str, int], tuple[int, str | None]]) -> m.Response:
            return m.AddPartitionsToTxnResponse(
                id=request.id,
                topics=tuple(
                    m.TxnTopicResult(
                        name=t.name,
                        partitions=tuple(
                            m.TxnPartitionResult(
                                partition=p, error_code=codes[(t.name, p)][0], error_message=codes[(t.name, p)][1]
                            )
                            for p in t.partitions
                        ),
                    )
                    for t in request.topics
                ),
            )

        wanted = [(t.name, p) for t in request.topics for p in t.partitions]
        if request.verify_only:
            # A partition leader's question (KIP-890 part 1), as Kafka authorizes broker requests.
            if not self.authz.cluster(ctx, Op.CLUSTER_ACTION):
                return answer(
                    dict.fromkeys(
                        wanted,
                        (ErrorCode.CLUSTER_AUTHORIZATION_FAILED, f"{ctx.principal} may not verify transactions"),
                    )
                )
            verified = (
                self.service.verify_here(request.transactional_id, request.producer_id, request.producer_epoch, wanted)
                if self.service is not None
                else Error(ErrorCode.COORDINATOR_NOT_AVAILABLE, _NOT_AVAILABLE)
            )
            if isinstance(verified, dict):
                return answer(
                    {tp: (ErrorCode.NONE, None) if e is None else (e.code, e.message) for tp, e in verified.items()}
                )
            return answer(dict.fromkeys(wanted, (verified.code, verified.message)))
        denied = self._denied(ctx, request.transactional_id, Op.WRITE)
        if denied is not None:
            return answer(dict.fromkeys(wanted, (denied["error_code"], denied["error_message"])))
        # Kafka's checks before the coordinator: every topic writable and every partition real;
        # one failure and nothing is added (the others OPERATION_NOT_ATTEMPTED).
        refused: dict[tuple[str, int], tuple[int, str | None]] = {}
        for t in request.topics:
            if not self.authz.topic(ctx, Op.WRITE, t.name):
                for p in t.partitions:
                    refused[(t.name, p)] = (
                        ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                        f"{ctx.principal} is not authorized to write topic {t.name!r}",
                    )
                continue
            count = self._partition_count(t.name)
            for p in t.partitions:
                if count is None or not 0 <= p < count:
                    refused[(t.name, p)] = (
                        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                        f"topic {t.name!r} partition {p} does not exist",
                    )
        if refused:
            not_attempted = (
                ErrorCode.OPERATION_NOT_ATTEMPTED,
                "not added: another partition of the request was refused",
            )
            return answer({tp: refused.get(tp, not_attempted) for tp in wanted})
        error = await self._add(request.transactional_id, request.producer_id, request.producer_epoch, wanted, ctx)
        return answer(dict.fromkeys(wanted, (ErrorCode.NONE, None) if error is None else (error.code, error.message)))

    def _partition_count(self, topic: str) -> int | None:
        try:
            validate_topic_name(topic)
        except Exception:
            return None
        cluster = self.service.cluster if self.service is not None else None
        if cluster is not None:
            assignment = cluster.cache.topics.get(topic)
            return None if assignment is None else len(assignment.partitions)
        entry = self.topics.get(topic)
        return None if entry is None else entry.num_partitions

    async def _add(self, transactional_id, producer_id, producer_epoch, partitions, ctx):
        coordinator = await self._coordinator()
        if coordinator is None:
            return Error(ErrorCode.COORDINATOR_NOT_AVAILABLE, _NOT_AVAILABLE)
        version = self._transaction_version(ctx)
        return await parked(
            ctx,
            lambda respond: coordinator.handle_add_partitions(
                transactional_id, producer_id, producer_epoch, partitions, version, respond
            ),
        )

    async def add_offsets_to_txn(self, request: m.AddOffsetsToTxnRequest, ctx: RequestContext) -> m.Response:
        denied = self._denied(ctx, request.transactional_id, Op.WRITE)
        if denied is not None:
            return m.AddOffsetsToTxnResponse(id=request.id, **denied)
        if not self.authz.group(ctx, Op.READ, request.group_id):
            return m.AddOffsetsToTxnResponse(
                id=request.id,
                **_txn_error(
                    ErrorCode.GROUP_AUTHORIZATION_FAILED,
                    f"{ctx.principal} is not authorized to read group {request.group_id!r}",
                ),
            )
        groups = None if self.groups is None else await self.groups.ready()
        if groups is None:
            return m.AddOffsetsToTxnResponse(
                id=request.id,
                **_txn_error(ErrorCode.COORDINATOR_NOT_AVAILABLE, "the group coordinator is not available"),
            )
        partition = groups.partition_for(request.group_id)
        error = await self._add(
            request.transactional_id, request.producer_id, request.producer_epoch, [(OFFSETS_TOPIC, partition)], ctx
        )
        if error is not None:
            return m.AddOffsetsToTxnResponse(id=request.id, **_txn_error(*error))
        return m.AddOffsetsToTxnResponse(id=request.id)

    # -- end_txn -------------------------------------------------------------------------------

    async def end_txn(self, request: m.EndTxnRequest, ctx: RequestContext) -> m.Response:
        denied = self._denied(ctx, request.transactional_id, Op.WRITE)
        if denied is not None:
            return m.EndTxnResponse(id=request.id, **denied)
        coordinator = await self._coordinator()
        if coordinator is None:
            return m.EndTxnResponse(id=request.id, **_txn_error(ErrorCode.COORDINATOR_NOT_AVAILABLE, _NOT_AVAILABLE))
        version = self._transaction_version(ctx)
        result: EndTxnResult = await parked(
            ctx,
            lambda respond: coordinator.handle_end_txn(
                request.transactional_id,
                request.producer_id,
                request.producer_epoch,
                request.committed,
                version,
                respond,
            ),
        )
        if result.error is not None:
            return m.EndTxnResponse(id=request.id, **_txn_error(*result.error))
        return m.EndTxnResponse(id=request.id, producer_id=result.producer_id, producer_epoch=result.producer_epoch)

    # -- describe_transactions, list_transactions ----------------------------------------------

    async def describe_transactions(self, request: m.DescribeTransactionsRequest, ctx: RequestContext) -> m.Response:
        coordinator = await self._coordinator()
        out = []
        for transactional_id in request.transactional_ids:
            denied = self._denied(ctx, transactional_id, Op.DESCRIBE)
            if denied is not None:
                out.append(m.TransactionDescription(transactional_id=transactional_id, **denied))
                continue
            if coordinator is None:
                out.append(
                    m.TransactionDescription(
                        transactional_id=transactional_id,
                        **_txn_error(ErrorCode.COORDINATOR_NOT_AVAILABLE, _NOT_AVAILABLE),
                    )
                )
                continue
            error, metadata = coordinator.describe(transactional_id)
            if error is not None or metadata is None:
                assert error is not None
                out.append(m.TransactionDescription(transactional_id=transactional_id, **_txn_error(*error)))
                continue
            by_topic: dict[str, list[int]] = {}
            for topic, partition in sorted(metadata.partitions):
                by_topic.setdefault(topic, []).append(partition)
            out.append(
                m.TransactionDescription(
                    transactional_id=transactional_id,
                    state=metadata.state.kafka_name,
                    transaction_timeout_ms=metadata.txn_timeout_ms,
                    transaction_start_time_ms=metadata.txn_start_ms,
                    producer_id=metadata.producer_id,
                    producer_epoch=metadata.producer_epoch,
                    topics=tuple(m.TxnTopic(name=name, partitions=tuple(parts)) for name, parts in by_topic.items()),
                )
            )
        return m.DescribeTransactionsResponse(id=request.id, transactions=tuple(out))

    async def list_transactions(self, request: m.ListTransactionsRequest, ctx: RequestContext) -> m.Response:
        # Listing creates nothing: before __transaction_state exists there is nothing to list.
        coordinator = None if self.service is None else self.service.coordinator
        if coordinator is None:
            if self.service is not None and not self.service.topic_exists():
                return m.ListTransactionsResponse(id=request.id)
            return m.ListTransactionsResponse(
                id=request.id, **_txn_error(ErrorCode.COORDINATOR_NOT_AVAILABLE, _NOT_AVAILABLE)
            )
        error, rows, unknown = coordinator.list_transactions(
            set(request.state_filters), set(request.producer_id_filters), request.duration_filter_ms
        )
        if error is not None:
            return m.ListTransactionsResponse(id=request.id, **_txn_error(*error))
        # Only the ids the principal may describe, as Kafka filters them (no error for the others).
        visible = [
            row for row in rows if self.authz.transactional_id(ctx, Op.DESCRIBE, row.transactional_id, log=False)
        ]
        return m.ListTransactionsResponse(
            id=request.id,
            unknown_state_filters=tuple(unknown),
            transactions=tuple(
                m.TransactionListing(transactional_id=r.transactional_id, producer_id=r.producer_id, state=r.state)
                for r in visible
            ),
        )


__all__ = ["TransactionApis", "TransactionService", "partition_for", "transaction_state_topic"]
