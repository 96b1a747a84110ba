"""Kafka's KafkaApis: one handler per API, decoded request and its RequestContext in, answer out.
Errors of one topic or partition become its entry's code (:mod:`.error_mapping`); anything the
handler itself raises is answered UNKNOWN_SERVER_ERROR by the connection, which stays up.

Storage work (appends, reads, fsync, topic changes) runs in worker threads, one thread hop per
request, so a slow disk never stalls the event loop for other connections. Two exceptions, the
requests a client waits on one at a time: a small uncompressed produce, and a fetch of a log's
active segment, run on the event loop when the log is free (its lock not held by a worker): a
few microseconds of validation and one write into the page cache, or an index lookup and a few
header reads of data just written. Anything that could take long (a roll, a flush, a new
leader epoch, compression, older segments, a busy log) goes to a worker thread as before. A
write into the page cache can still block (the kernel throttling writers when the disk lags
behind), so an inline request that held the event loop longer than INLINE_SLOW_S sends every
request to the worker threads for INLINE_PAUSE_S (if it happened twice in that time, or held it
past INLINE_STALL_S): the event loop stalls at most twice per pause.
(:mod:`.loop_hold` measures the hold.) A fetch response's descriptors are bounded by
:mod:`.fetch_descriptors`.
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import msgpack
import structlog
import trio

from triolog import __version__, core
from triolog.broker.cluster.election import validate_replica_assignment
from triolog.broker.cluster.replication import AcksAll
from triolog.broker.storage.filenames import validate_topic_name
from triolog.broker.storage.log import FetchIsolation, Log
from triolog.broker.storage.log_manager import LogManager
from triolog.broker.storage.topics import TopicManager, is_internal
from triolog.config.broker_config import BROKER_CONFIGS, BrokerConfig, BrokerConfigKey
from triolog.config.log_config import TOPIC_CONFIGS, LogConfig
from triolog.protocol import messages as m
from triolog.protocol.errors import (
    DuplicateSequenceNumberError,
    ErrorCode,
    InvalidRequestError,
    InvalidTopicError,
    NotEnoughReplicasAfterAppendError,
    NotLeaderOrFollowerError,
    OffsetOutOfRangeError,
    PolicyViolationError,
    RequestTimedOutError,
    StorageError,
    TopicAlreadyExistsError,
    TopicAuthorizationFailedError,
    TriologError,
    UnknownTopicOrPartitionError,
)
from triolog.protocol.kafka.controller_apis import ElectionResult, ElectLeadersRequest, ElectLeadersResponse
from triolog.protocol.kafka.epoch_apis import EpochEndOffset, OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse
from triolog.protocol.kafka.replica_apis import ReplicaFetchPartition, ReplicaFetchPartitionResult, ReplicaFetchRequest

from .appends import PartitionAppend, TopicAppends
from .authorization import Op, RequestAuthorizer
from .cluster_handlers import ClusterApis
from .codec import EncodedResponse
from .error_mapping import ApiError, error_of
from .fetch_descriptors import SPARE_FETCH_DESCRIPTORS, DescriptorBudget, FetchRegion, FetchResult
from .group_commit import GroupCommitter
from .group_handlers import GroupApis
from .loop_hold import InlineServing, WorkerThreads
from .notifier import AppendNotifier
from .producer_handlers import ProducerIdApis
from .request_context import RequestContext, handling_clock
from .security_handlers import SecurityApis
from .txn_handlers import TransactionApis
from .txn_partition_handlers import TxnPartitionApis
from .txn_verification import Verified, verify_transactional_produce

logger = structlog.get_logger("triolog.server")

#: What api_versions answers (and ``triolog health`` prints): the version and which core this broker runs.
BROKER_VERSION = f"triolog {__version__}, core: {core.status()}"


@functools.cache
def broker_synonyms(topic_key: str) -> frozenset[str]:
    """Every broker key that can supply ``topic_key``'s default: its broker synonym and the coarser
    keys that synonym falls back to (retention.ms <- log.retention.ms <- log.retention.minutes <-
    log.retention.hours). Kafka reports a topic key as STATIC_BROKER_CONFIG when any of them is set."""
    names: set[str] = set()
    heads = [k for k in BROKER_CONFIGS.values() if k.topic_name == topic_key]
    broker_name = TOPIC_CONFIGS[topic_key].broker_name
    if broker_name in BROKER_CONFIGS:
        heads.append(BROKER_CONFIGS[broker_name])
    key: BrokerConfigKey | None  # each head, then the keys it falls back to
    for key in heads:
        while key is not None and key.name not in names:
            names.add(key.name)
            key = BROKER_CONFIGS.get(key.fallback) if key.fallback else None
    if broker_name:
        names.add(broker_name)
    return frozenset(names)


def config_value_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return ",".join(value)
    return str(value)


#: A produce request whose batches hold at most this many bytes in all (and names at most
#: INLINE_PARTITIONS partitions) is appended on the event loop when it can be (see the module
#: docstring). Validation walks every record: with the compiled walk a 16 KiB batch of ~160
#: records costs a few microseconds, interpreted some hundred, hence the smaller bound then.
INLINE_PRODUCE_BYTES = 16 * 1024 if core.COMPILED else 2 * 1024
#: Partitions a produce or fetch may name and still be served on the event loop.
INLINE_PARTITIONS = 4


class ApiVersionsAnswer:
    """api_versions' answer, the same for every request but its id: packed once, the id's
    encoding spliced in per request (a map whose first key is ``id``)."""

    def __init__(self, broker_version: str):
        def packed(request_id: int) -> bytes:
            return m.encode_response(m.ApiVersionsResponse(id=request_id, broker_version=broker_version))

        zero, one = packed(0), packed(1)
        cut = next(i for i, (a, b) in enumerate(zip(zero, one)) if a != b)
        if zero[cut + 1 :] != one[cut + 1 :] or zero[cut] != msgpack.packb(0)[0]:  # pragma: no cover
            raise AssertionError("api_versions' response does not encode its id as one field")
        self._head, self._tail = zero[:cut], zero[cut + 1 :]

    def payload(self, request_id: int) -> bytes:
        return b"".join((self._head, msgpack.packb(request_id), self._tail))


def produce_payload(request_id: int, results: list[TopicAppends], throttle_ms: int = 0) -> EncodedResponse:
    """The msgpack produce response for ``results``, packed from the same wire map as
    ``m.encode_response(m.ProduceResponse(...))`` gives, without building the message objects."""
    topics = []
    errors: dict[int, int] | None = None
    for topic in results:
        partitions = []
        for row in topic.partitions:
            info = row.info
            if info is None:
                error = row.error
                assert error is not None  # a partition is either appended (its info) or refused (its error)
                code = int(error.code)
                if errors is None:
                    errors = {}
                errors[code] = errors.get(code, 0) + 1
                partitions.append(
                    {
                        "partition": row.partition,
                        "error_code": code,
                        "error_message": error.message,
                        "base_offset": -1,
                        "log_append_time": -1,
                        "log_start_offset": row.log_start_offset,
                    }
                )
            else:
                partitions.append(
                    {
                        "partition": row.partition,
                        "error_code": 0,
                        "error_message": None,
                        "base_offset": info.first_offset,
                        "log_append_time": info.log_append_time_ms,
                        "log_start_offset": info.log_start_offset,
                    }
                )
        topics.append({"name": topic.name, "partitions": partitions})
    wire = {"id": request_id, "error_code": 0, "error_message": None, "topics": topics, "throttle_ms": throttle_ms}
    return EncodedResponse(_packb(wire), 0, errors)


def produce_response(request_id: int, results: list[TopicAppends], throttle_ms: int = 0) -> m.ProduceResponse:
    """The produce response for ``results`` as message objects (what the Kafka listener translates)."""
    topics = []
    for topic in results:
        partitions = []
        for row in topic.partitions:
            info = row.info
            if info is None:
                error = row.error
                assert error is not None  # a partition is either appended (its info) or refused (its error)
                partitions.append(
                    m.ProducePartitionResult(
                        partition=row.partition,
                        error_code=int(error.code),
                        error_message=error.message,
                        log_start_offset=row.log_start_offset,
                    )
                )
            else:
                partitions.append(
                    m.ProducePartitionResult(
                        partition=row.partition,
                        base_offset=info.first_offset,
                        log_append_time=info.log_append_time_ms,
                        log_start_offset=info.log_start_offset,
                    )
                )
        topics.append(m.ProduceTopicResult(name=topic.name, partitions=tuple(partitions)))
    return m.ProduceResponse(id=request_id, topics=tuple(topics), throttle_ms=throttle_ms)


def _packb(wire: dict) -> bytes:
    return msgpack.packb(wire, use_bin_type=True)


class _WouldBlock(Exception):
    """Raised inside an inline attempt: this request goes to a worker thread after all."""


async def _per_topic(names, act: Callable[[str], Awaitable[None]]) -> tuple[m.TopicResult, ...]:
    """A cluster admin request's answer: per topic (each on its own, in order) ``act`` done, or the
    error it raised (a bad name refused first)."""
    out = []
    for name in names:
        try:
            validate_topic_name(name)
            await act(name)
            out.append(m.TopicResult(name=name))
        except Exception as exc:
            code, message = error_of(exc, topic=name)
            out.append(m.TopicResult(name=name, error_code=code, error_message=message))
    return tuple(out)


class RequestHandler:
    """Kafka's KafkaApis: each request to the handler of its API (:meth:`handle`'s table), with the
    coordinators and security stores it was built with."""

    def __init__(
        self,
        *,
        config: BrokerConfig,
        log_manager: LogManager,
        topics: TopicManager,
        committer: GroupCommitter,
        notifier: AppendNotifier,
        limiter: trio.CapacityLimiter,
        workers: WorkerThreads,
        authz: RequestAuthorizer,
        groups: GroupApis,
        security: SecurityApis,
        producers: ProducerIdApis,
        transactions: TransactionApis,
        advertised_host: str,
        advertised_port: int,
        on_roll: Callable[[Log, str], None] | None = None,
        cluster: ClusterApis | None = None,
    ):
        self.config = config
        self.log_manager = log_manager
        self.topics = topics
        self.committer = committer
        self.notifier = notifier
        self.limiter = limiter
        self.on_roll = on_roll
        #: Where clients reach this broker (Metadata's broker, FindCoordinator's answer).
        self.advertised_host = advertised_host
        self.advertised_port = advertised_port
        #: Kafka's authorization checks (with the ACLs when an authorizer is on).
        self.authz = authz
        self.groups = groups
        self.security = security
        self.producers = producers
        self.transactions = transactions
        #: A cluster member's view of the cluster (zookeeper.connect); None when standalone.
        self.cluster = cluster
        #: Long polls waiting for data right now (Kafka's delayed fetch purgatory size).
        self.delayed_fetches = 0
        #: Produce batches answered as duplicates of an idempotent producer's earlier batch
        #: (original offsets, nothing appended) since startup; each log also counts its own
        #: (Log.duplicate_batches).
        self.produce_duplicates = 0
        # Checking max.broker.partitions and creating must be one step, or two creates could each
        # see room for themselves and together pass the cap.
        self._create_lock = threading.Lock()
        self.fetch_descriptors = DescriptorBudget(SPARE_FETCH_DESCRIPTORS)
        self.workers = workers
        #: Whether small requests are served on the event loop now (see loop_hold).
        self.inline = InlineServing(workers)
        #: Every API the handler serves, and the method serving it (as KafkaApis.handle lists its
        #: cases). SaslHandshake and SaslAuthenticate are the connection's: they change its state.
        self.txn_partitions = txn_partitions = TxnPartitionApis(self)
        self.apis: dict[str, Callable[[Any, RequestContext], Awaitable[Any]]] = {
            "api_versions": self._api_versions,
            "metadata": self._metadata,
            "produce": self._produce,
            "fetch": self._fetch,
            "list_offsets": self._list_offsets,
            "delete_records": self._delete_records,
            "create_topics": self._create_topics,
            "delete_topics": self._delete_topics,
            "create_partitions": self._create_partitions,
            "elect_leaders": self._elect_leaders,
            "offset_for_leader_epoch": self._offset_for_leader_epoch,
            "describe_configs": self._describe_configs,
            "alter_configs": self._alter_configs,
            "describe_log_dirs": self._describe_log_dirs,
            "write_txn_markers": txn_partitions.write_txn_markers,
            "describe_producers": txn_partitions.describe_producers,
            "init_producer_id": self._init_producer_id,
            "find_coordinator": self._find_coordinator,
            "add_partitions_to_txn": transactions.add_partitions_to_txn,
            "add_offsets_to_txn": transactions.add_offsets_to_txn,
            "end_txn": transactions.end_txn,
            "describe_transactions": transactions.describe_transactions,
            "list_transactions": transactions.list_transactions,
            "join_group": groups.join_group,
            "sync_group": groups.sync_group,
            "heartbeat": groups.heartbeat,
            "leave_group": groups.leave_group,
            "offset_commit": groups.offset_commit,
            "txn_offset_commit": groups.txn_offset_commit,
            "offset_fetch": groups.offset_fetch,
            "list_groups": groups.list_groups,
            "describe_groups": groups.describe_groups,
            "delete_groups": groups.delete_groups,
            "create_acls": security.create_acls,
            "describe_acls": security.describe_acls,
            "delete_acls": security.delete_acls,
            "describe_client_quotas": security.describe_client_quotas,
            "alter_client_quotas": security.alter_client_quotas,
            "describe_user_scram_credentials": security.describe_user_scram_credentials,
            "alter_user_scram_credentials": security.alter_user_scram_credentials,
        }

    async def _init_producer_id(self, request: m.InitProducerIdRequest, ctx: RequestContext) -> m.Response:
        """A transactional producer's to the transaction coordinator, an idempotent one's here."""
        if request.transactional_id is not None:
            return await self.transactions.init_producer_id(request, ctx)
        return await self.producers.init_producer_id(request, ctx)

    async def _find_coordinator(self, request: m.FindCoordinatorRequest, ctx: RequestContext) -> m.Response:
        """key_type 0: a group's coordinator; 1: a transactional id's."""
        if request.key_type == 1:
            return await self.transactions.find_coordinator(request, ctx)
        return await self.groups.find_coordinator(request, ctx)

    def close(self) -> None:
        """Release what the handler holds open (the hold meter's clock file)."""
        self.inline.close()

    async def _in_thread(self, fn, *args):
        return await self.workers.run_sync(fn, *args, limiter=self.limiter)

    async def handle(self, request: m.Request, ctx: RequestContext) -> object:
        """The answer to ``request``: a response, an EncodedResponse, a FetchResult (records in
        files), or a produce's list of TopicAppends (each listener encodes it its own way)."""
        return await self.apis[request.api](request, ctx)

    # -- topics ------------------------------------------------------------------------------

    def _existing_or_auto_created(self, topic: str, *, may_create: bool = True) -> None:
        """UnknownTopicOrPartitionError unless ``topic`` exists or auto-creation made it.

        Kafka's rule: only a metadata request naming the topic creates it, and only when the
        request allows it (``allow_auto_topic_creation``: producers do, consumers do not) and
        ``auto.create.topics.enable`` is on. Produce never creates (``may_create=False``): the
        producer asks for metadata first, and a raw produce to a missing topic is refused.
        """
        validate_topic_name(topic)
        cluster = self.cluster
        if cluster is not None:
            if cluster.topic_exists(topic):
                return
            if not (may_create and self.config.auto_create_topics_enable):
                raise UnknownTopicOrPartitionError(f"topic {topic!r} does not exist")
            try:  # (from a worker thread: the cluster's topics are created on the event loop)
                trio.from_thread.run(cluster.create_topic, topic, -1, -1, {})
                logger.info("topic_auto_created", topic=topic, partitions=self.config.num_partitions)
            except TopicAlreadyExistsError:
                pass  # another broker or request made it first: that is fine
            return
        if self.topics.get(topic) is not None:
            return
        if not (may_create and self.config.auto_create_topics_enable):
            raise UnknownTopicOrPartitionError(f"topic {topic!r} does not exist")
        try:
            with self._create_lock:
                self._check_partition_cap(topic, self.config.num_partitions)
                self.topics.create(topic, -1, 1, {}, default_partitions=self.config.num_partitions)
            logger.info("topic_auto_created", topic=topic, partitions=self.config.num_partitions)
        except TriologError as exc:
            if self.topics.get(topic) is None:  # lost a race with another creator: that is fine
                raise exc

    def _check_partition_cap(self, topic: str, new_partitions: int) -> None:
        """PolicyViolationError unless ``new_partitions`` more fit under max.broker.partitions.

        Checked before anything of the topic is created, so a create too large is refused whole
        (Kafka's controller refuses an excessive partition count with POLICY_VIOLATION) instead of
        running out of descriptors or disk halfway through and leaving a broken topic behind.
        """
        if self.topics.get(topic) is not None:
            return  # TOPIC_ALREADY_EXISTS says it better
        held = sum(t.num_partitions for t in self.topics.all().values())
        cap = self.config.max_broker_partitions
        if held + new_partitions > cap:
            raise PolicyViolationError(
                f"creating topic {topic!r} with {new_partitions} partitions would bring this broker to "
                f"{held + new_partitions} partitions, over max.broker.partitions={cap} "
                f"({held} held now); nothing was created"
            )

    def _partition_error(self, exc: BaseException, topic: str, partition: int) -> ApiError:
        """(code, message) for one partition. A partition deleted while the request held its log
        (the log closed, its directory renamed away) is UNKNOWN_TOPIC_OR_PARTITION, as in Kafka, not a
        disk failure."""
        if isinstance(exc, (StorageError, OSError)):
            entry = self.topics.get(topic)
            if entry is None or not 0 <= partition < entry.num_partitions:
                exc = UnknownTopicOrPartitionError(
                    f"topic {topic!r} partition {partition} was deleted while the request was served"
                )
        return error_of(exc, topic=topic, partition=partition)

    async def _api_versions(self, request: m.ApiVersionsRequest, ctx: RequestContext) -> EncodedResponse:
        return EncodedResponse(_API_VERSIONS.payload(request.id))

    async def _metadata(self, request: m.MetadataRequest, ctx: RequestContext) -> m.Response:
        authz = self.authz

        cluster = self.cluster

        def work() -> list[m.TopicMetadata]:
            if request.topics is None:  # every topic the principal may describe (others unmentioned)
                every = cluster.cache.topics if cluster is not None else self.topics.all()
                names = [n for n in sorted(every) if authz.topic(ctx, Op.DESCRIBE, n, log=False)]
            else:
                names = list(request.topics)
            out = []
            for name in names:
                try:
                    if request.topics is not None:
                        authz.require_topic(ctx, Op.DESCRIBE, name)
                        may_create = request.allow_auto_topic_creation and self.config.auto_create_topics_enable
                        if may_create and self.topics.get(name) is None and not authz.may_create_topic(ctx, name):
                            # Kafka: a topic the client would auto-create but may not create
                            raise TopicAuthorizationFailedError(
                                f"{ctx.principal} is not authorized to create topic {name!r}"
                            )
                        self._existing_or_auto_created(name, may_create=may_create)
                    if cluster is not None:
                        out.append(cluster.topic_metadata(name))
                        continue
                    topic = self.topics.get(name)
                    if topic is None:
                        raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
                    partitions = []
                    for p in range(topic.num_partitions):
                        log = self.topics.log(name, p)
                        partitions.append(
                            m.PartitionMetadata(
                                partition=p,
                                leader=self.config.node_id,
                                log_start_offset=log.log_start_offset,
                                high_watermark=log.high_watermark,
                                replicas=(self.config.node_id,),
                                isr=(self.config.node_id,),
                            )
                        )
                    out.append(m.TopicMetadata(name=name, internal=is_internal(name), partitions=tuple(partitions)))
                except Exception as exc:
                    code, message = error_of(exc, topic=name)
                    out.append(m.TopicMetadata(name=name, error_code=code, error_message=message))
            return out

        topics = await self._in_thread(work)
        if cluster is not None:
            return m.MetadataResponse(
                id=request.id,
                brokers=cluster.brokers(kafka_listener=ctx.listener == "kafka.listeners"),
                controller_id=cluster.controller_id(),
                topics=tuple(topics),
            )
        broker = m.BrokerMetadata(node_id=self.config.node_id, host=self.advertised_host, port=self.advertised_port)
        return m.MetadataResponse(
            id=request.id, brokers=(broker,), controller_id=self.config.node_id, topics=tuple(topics)
        )

    async def _elect_leaders(self, request: ElectLeadersRequest, ctx: RequestContext) -> ElectLeadersResponse:
        """Kafka's ElectLeaders: the controller's to answer. A standalone broker is every one of
        its partitions' only replica, so each already has the leader any election would give."""
        try:
            self.authz.require_cluster(ctx, Op.ALTER)
            if self.cluster is not None:
                return await self.cluster.elect_leaders(request)
        except TriologError as exc:  # the whole request refused: every partition named says so
            return ElectLeadersResponse(
                id=request.id,
                error_code=exc.code,
                error_message=str(exc),
                results=tuple(
                    ElectionResult(topic=t, partition=p, error_code=exc.code, error_message=str(exc))
                    for t, p in request.partitions or ()
                ),
            )
        partitions = request.partitions
        if partitions is None:
            partitions = tuple((t, p) for t, e in sorted(self.topics.all().items()) for p in range(e.num_partitions))
        results = []
        for topic, partition in partitions:
            entry = self.topics.get(topic)
            if entry is None or not 0 <= partition < entry.num_partitions:
                code, message = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"partition {topic}-{partition} does not exist"
            else:
                code, message = ErrorCode.ELECTION_NOT_NEEDED, f"{topic}-{partition}: its only replica leads it"
            results.append(ElectionResult(topic=topic, partition=partition, error_code=code, error_message=message))
        return ElectLeadersResponse(id=request.id, results=tuple(results))

    async def _offset_for_leader_epoch(
        self, request: OffsetForLeaderEpochRequest, ctx: RequestContext
    ) -> OffsetForLeaderEpochResponse:
        """Kafka's OffsetForLeaderEpoch, from the leader only: the largest epoch of its log not
        above the one asked and where it ends (the log end for the latest epoch)."""
        # Kafka's rule: CLUSTER_ACTION (brokers) may ask of any topic, others of those they may describe.
        every_topic = self.authz.cluster(ctx, Op.CLUSTER_ACTION, log=False)
        results = []
        for query in request.queries:
            topic, partition = query.topic, query.partition
            try:
                if not every_topic:
                    self.authz.require_topic(ctx, Op.DESCRIBE, topic)
                if self.cluster is not None:
                    log = self.cluster.replicas.leader_partition(topic, partition, query.current_leader_epoch).log
                else:
                    log = self.topics.log(topic, partition)
                epoch, end = await self._in_thread(log.end_offset_for_epoch, query.leader_epoch)
                results.append(EpochEndOffset(topic=topic, partition=partition, leader_epoch=epoch, end_offset=end))
            except TriologError as exc:
                results.append(EpochEndOffset(topic=topic, partition=partition, error_code=exc.code))
        return OffsetForLeaderEpochResponse(id=request.id, results=tuple(results))

    async def _create_cluster_topics(self, request: m.CreateTopicsRequest, ctx: RequestContext) -> m.Response:
        cluster = self.cluster
        assert cluster is not None
        out = []
        for new in request.topics:
            try:
                if not self.authz.may_create_topic(ctx, new.name):
                    raise TopicAuthorizationFailedError(
                        f"{ctx.principal} is not authorized to create topic {new.name!r}"
                    )
                count, config = await cluster.create_topic(
                    new.name,
                    new.num_partitions,
                    new.replication_factor,
                    dict(new.configs),
                    validate_only=request.validate_only,
                    replica_assignment=new.replica_assignment,
                )
                out.append(self._created(ctx, new.name, count, config))
            except Exception as exc:
                out.append(self._not_created(exc, new.name))
        return m.CreateTopicsResponse(id=request.id, topics=tuple(out))

    def _created(self, ctx: RequestContext, name: str, count: int, config: LogConfig) -> m.CreateTopicResult:
        """A created (or validated) topic's answer: its configs only to a principal that may
        describe them, as Kafka answers."""
        shown = self.authz.topic(ctx, Op.DESCRIBE_CONFIGS, name, log=False)
        configs = {k: config_value_text(config.value_of(k)) for k in TOPIC_CONFIGS} if shown else {}
        return m.CreateTopicResult(name=name, num_partitions=count, configs=configs)

    @staticmethod
    def _not_created(exc: BaseException, name: str) -> m.CreateTopicResult:
        code, message = error_of(exc, topic=name)
        return m.CreateTopicResult(name=name, error_code=code, error_message=message)

    async def _create_topics(self, request: m.CreateTopicsRequest, ctx: RequestContext) -> m.Response:
        if self.cluster is not None:
            return await self._create_cluster_topics(request, ctx)

        def work() -> list[m.CreateTopicResult]:
            out = []
            for new in request.topics:
                try:
                    if not self.authz.may_create_topic(ctx, new.name):
                        raise TopicAuthorizationFailedError(
                            f"{ctx.principal} is not authorized to create topic {new.name!r}"
                        )
                    num_partitions, replication_factor = new.num_partitions, new.replication_factor
                    if new.replica_assignment is not None:  # (every replica this broker, to be valid)
                        placed = validate_replica_assignment(
                            new.replica_assignment, {self.config.node_id}, num_partitions, replication_factor
                        )
                        num_partitions, replication_factor = len(placed), 1
                    with self._create_lock:
                        count, config = self.topics.validate_new_topic(
                            new.name,
                            num_partitions,
                            replication_factor,
                            new.configs,
                            self.config.num_partitions,
                        )
                        self._check_partition_cap(new.name, count)
                        if not request.validate_only:
                            topic = self.topics.create(
                                new.name,
                                num_partitions,
                                replication_factor,
                                new.configs,
                                default_partitions=self.config.num_partitions,
                            )
                            count, config = topic.num_partitions, self.topics.config_for(new.name)
                    if not request.validate_only:
                        logger.info("topic_created", topic=new.name, partitions=count, configs=dict(new.configs))
                    out.append(self._created(ctx, new.name, count, config))
                except Exception as exc:
                    out.append(self._not_created(exc, new.name))
            return out

        return m.CreateTopicsResponse(id=request.id, topics=tuple(await self._in_thread(work)))

    async def _delete_topics(self, request: m.DeleteTopicsRequest, ctx: RequestContext) -> m.Response:
        if self.cluster is not None:
            return await self._delete_cluster_topics(request, ctx)
        gone: list[tuple[str, int]] = []

        def work() -> list[m.TopicResult]:
            out = []
            for name in request.topics:
                try:
                    validate_topic_name(name)
                    self.authz.require_topic(ctx, Op.DELETE, name)
                    topic = self.topics.get(name)
                    if topic is not None:
                        gone.extend((name, p) for p in range(topic.num_partitions))
                    self.topics.delete(name)
                    logger.info("topic_deleted", topic=name)
                    out.append(m.TopicResult(name=name))
                except Exception as exc:
                    code, message = error_of(exc, topic=name)
                    out.append(m.TopicResult(name=name, error_code=code, error_message=message))
            return out

        try:
            results = await self._in_thread(work)
        finally:
            # Long polls on a deleted partition end now with UNKNOWN_TOPIC_OR_PARTITION, as Kafka
            # completes a delayed fetch whose partition is gone, instead of sleeping out max_wait_ms.
            for tp in gone:
                self.notifier.notify(tp)
        return m.DeleteTopicsResponse(id=request.id, topics=tuple(results))

    async def _delete_cluster_topics(self, request: m.DeleteTopicsRequest, ctx: RequestContext) -> m.Response:
        cluster = self.cluster
        assert cluster is not None

        async def delete(name: str) -> None:
            self.authz.require_topic(ctx, Op.DELETE, name)
            await cluster.delete_topic(name)

        return m.DeleteTopicsResponse(id=request.id, topics=await _per_topic(request.topics, delete))

    def _config_source(self, topic_overrides, name: str) -> str:
        if name in topic_overrides:
            return "topic"
        if broker_synonyms(name) & set(self.config.originals):
            return "broker"
        return "default"

    async def _create_partitions(self, request: m.CreatePartitionsRequest, ctx: RequestContext) -> m.Response:
        """Kafka's CreatePartitions: grow topics to ``count`` partitions, each on its own."""
        if self.cluster is not None:
            return await self._create_cluster_partitions(request, ctx)

        def work() -> list[m.TopicResult]:
            out = []
            for entry in request.topics:
                try:
                    validate_topic_name(entry.name)
                    self.authz.require_topic(ctx, Op.ALTER, entry.name)
                    with self._create_lock:
                        topic = self.topics.validate_new_partitions(entry.name, entry.count)
                        self._check_partition_room(entry.name, entry.count - topic.num_partitions)
                        if not request.validate_only:
                            self.topics.create_partitions(entry.name, entry.count)
                    if not request.validate_only:
                        logger.info(
                            "partitions_created",
                            topic=entry.name,
                            partitions=entry.count,
                            previous=topic.num_partitions,
                        )
                    out.append(m.TopicResult(name=entry.name))
                except Exception as exc:
                    code, message = error_of(exc, topic=entry.name)
                    out.append(m.TopicResult(name=entry.name, error_code=code, error_message=message))
            return out

        return m.CreatePartitionsResponse(id=request.id, topics=tuple(await self._in_thread(work)))

    async def _create_cluster_partitions(self, request: m.CreatePartitionsRequest, ctx: RequestContext) -> m.Response:
        cluster = self.cluster
        assert cluster is not None
        counts = {entry.name: entry.count for entry in request.topics}

        async def grow(name: str) -> None:
            self.authz.require_topic(ctx, Op.ALTER, name)
            await cluster.create_partitions(name, counts[name], validate_only=request.validate_only)

        return m.CreatePartitionsResponse(id=request.id, topics=await _per_topic(counts, grow))

    async def _alter_cluster_configs(self, request: m.AlterConfigsRequest, ctx: RequestContext) -> m.Response:
        cluster = self.cluster
        assert cluster is not None
        entries = {entry.name: entry for entry in request.topics}

        async def alter(name: str) -> None:
            entry = entries[name]
            self.authz.require_topic(ctx, Op.ALTER_CONFIGS, name)
            await cluster.alter_configs(
                name,
                dict(entry.configs),
                tuple(entry.delete),
                validate_only=request.validate_only,
                replace=entry.replace,
                append=dict(entry.append),
                subtract=dict(entry.subtract),
            )
            if not request.validate_only:
                logger.info("topic_configs_altered", topic=name, set=dict(entry.configs), deleted=list(entry.delete))

        return m.AlterConfigsResponse(id=request.id, topics=await _per_topic(entries, alter))

    def _check_partition_room(self, topic: str, added: int) -> None:
        """PolicyViolationError unless ``added`` more partitions fit under max.broker.partitions
        (create_partitions' form of _check_partition_cap: the topic exists)."""
        held = sum(t.num_partitions for t in self.topics.all().values())
        cap = self.config.max_broker_partitions
        if held + added > cap:
            raise PolicyViolationError(
                f"adding {added} partitions to topic {topic!r} would bring this broker to {held + added} "
                f"partitions, over max.broker.partitions={cap} ({held} held now); nothing was created"
            )

    def _broker_configs(self, name: str) -> dict[str, m.ConfigEntry]:
        """Every broker key of this node, as Kafka's DescribeConfigs shows a BROKER resource: the
        value set in its configuration (``broker``) or the built-in default (``default``; nil for
        a key unset that falls back to another, as Kafka shows log.retention.ms). Static keys are
        read-only: triolog has no dynamic broker configs."""
        if name != "":
            try:
                node = int(name)
            except ValueError:
                raise InvalidRequestError(f"broker id must be an integer, got {name!r}") from None
            if node != self.config.node_id:
                raise InvalidRequestError(
                    f"unexpected broker id, expected {self.config.node_id} or an empty string, but received {name}"
                )
        originals = self.config.originals
        entries = {}
        value: str | None
        for key in BROKER_CONFIGS.values():
            if key.name in originals:
                raw = originals[key.name]
                value, source = (raw if isinstance(raw, str) else config_value_text(raw)), "broker"
            else:
                value = None if key.default is None else config_value_text(key.default)
                source = "default"
            if key.sensitive:  # Kafka's PASSWORD keys: described as set or not, never shown
                entries[key.name] = m.ConfigEntry(value=None, source=source, read_only=True, is_sensitive=True)
            else:
                entries[key.name] = m.ConfigEntry(value=value, source=source, read_only=True)
        return entries

    async def _describe_configs(self, request: m.DescribeConfigsRequest, ctx: RequestContext) -> m.Response:
        def brokers() -> list[m.DescribeConfigsResult]:
            out = []
            for name in request.brokers:
                try:
                    self.authz.require_cluster(ctx, Op.DESCRIBE_CONFIGS)
                    out.append(m.DescribeConfigsResult(name=name, configs=self._broker_configs(name)))
                except Exception as exc:
                    code, message = error_of(exc, broker=name)
                    out.append(m.DescribeConfigsResult(name=name, error_code=code, error_message=message))
            return out

        def work() -> list[m.DescribeConfigsResult]:
            out = []
            for name in request.topics:
                try:
                    validate_topic_name(name)
                    self.authz.require_topic(ctx, Op.DESCRIBE_CONFIGS, name)
                    overrides = self._topic_overrides(name)
                    config: LogConfig = self.topics.default_config.with_overrides(overrides)
                    entries = {
                        key: m.ConfigEntry(
                            value=config_value_text(config.value_of(key)),
                            source=self._config_source(overrides, key),
                        )
                        for key in TOPIC_CONFIGS
                    }
                    out.append(m.DescribeConfigsResult(name=name, configs=entries))
                except Exception as exc:
                    code, message = error_of(exc, topic=name)
                    out.append(m.DescribeConfigsResult(name=name, error_code=code, error_message=message))
            return out

        topics = await self._in_thread(work) if request.topics else []
        return m.DescribeConfigsResponse(id=request.id, topics=tuple(topics), brokers=tuple(brokers()))

    def _topic_overrides(self, name: str) -> Mapping[str, str]:
        """A topic's config overrides: the cluster's (any broker answers for any topic), else
        this broker's."""
        if self.cluster is not None:
            if not self.cluster.topic_exists(name):
                raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
            return self.cluster.cache.configs.get(name, {})
        topic = self.topics.get(name)
        if topic is None:
            raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
        return topic.overrides

    async def _alter_configs(self, request: m.AlterConfigsRequest, ctx: RequestContext) -> m.Response:
        if self.cluster is not None:
            return await self._alter_cluster_configs(request, ctx)

        def work() -> list[m.TopicResult]:
            out = []
            for entry in request.topics:
                try:
                    validate_topic_name(entry.name)
                    self.authz.require_topic(ctx, Op.ALTER_CONFIGS, entry.name)
                    self.topics.alter_configs(
                        entry.name,
                        entry.configs,
                        tuple(entry.delete),
                        validate_only=request.validate_only,
                        replace=entry.replace,
                        append=entry.append,
                        subtract=entry.subtract,
                    )
                    if not request.validate_only:
                        logger.info(
                            "topic_configs_altered",
                            topic=entry.name,
                            set=dict(entry.configs),
                            deleted=list(entry.delete),
                            replace=entry.replace,
                            append=dict(entry.append),
                            subtract=dict(entry.subtract),
                        )
                    out.append(m.TopicResult(name=entry.name))
                except Exception as exc:
                    code, message = error_of(exc, topic=entry.name)
                    out.append(m.TopicResult(name=entry.name, error_code=code, error_message=message))
            return out

        return m.AlterConfigsResponse(id=request.id, topics=tuple(await self._in_thread(work)))

    # -- produce -----------------------------------------------------------------------------

    def _leader(self, topic: str, partition: int, *, inline: bool = False) -> tuple[Log, int]:
        """The log a leader-only request reads or appends, and the leader epoch appends are stamped
        with: this broker's own log when standalone (epoch 0), a cluster's partition only where this
        broker leads it (else NOT_LEADER_OR_FOLLOWER and its kin)."""
        if self.cluster is not None:
            return self.cluster.leader(topic, partition)
        return (self._inline_log(topic, partition) if inline else self.topics.log(topic, partition)), 0

    def _inline_log(self, topic: str, partition: int) -> Log:
        """The log of an existing partition, without waiting for anything; _WouldBlock otherwise
        (the worker thread's path then tells a missing partition from one being created)."""
        entry = self.topics.get(topic)
        if entry is None or not 0 <= partition < entry.num_partitions:
            raise _WouldBlock
        log = self.log_manager.get_log(topic, partition)
        if log is None:
            raise _WouldBlock
        return log

    def _produce_rows(
        self,
        request: m.ProduceRequest,
        ctx: RequestContext,
        done: list[TopicAppends],
        inline: bool,
        verified: Verified | None = None,
    ) -> None:
        """Append the request's partitions in order into ``done``, from where an earlier call left
        off; ``inline`` raises _WouldBlock at the first partition that cannot be appended without
        waiting."""
        for t, topic in enumerate(request.topics):
            if t < len(done) - 1:
                continue
            if t == len(done):
                done.append(TopicAppends(topic.name, []))
            rows = done[t].partitions
            topic_error = None
            try:
                self.authz.require_topic(ctx, Op.WRITE, topic.name)
                self._existing_or_auto_created(topic.name, may_create=False)
                if is_internal(topic.name):
                    raise InvalidTopicError(f"cannot append to internal topic {topic.name}")
            except Exception as exc:
                topic_error = error_of(exc, topic=topic.name)
            for part in topic.partitions[len(rows) :]:
                if topic_error is not None:
                    rows.append(PartitionAppend(part.partition, error=topic_error))
                    continue
                verification = None if verified is None else verified.get((topic.name, part.partition))
                if isinstance(verification, ApiError):
                    rows.append(PartitionAppend(part.partition, error=verification))
                    continue
                log = None
                try:
                    log, epoch = self._leader(topic.name, part.partition, inline=inline)
                    if request.acks == -1 and self.cluster is not None:
                        self.cluster.replicas.require_enough_replicas(topic.name, part.partition)
                    self.producers.check_producer_id(part.records, log)
                    if inline:
                        info = log.try_append_as_leader(
                            part.records, epoch, max_bytes=INLINE_PRODUCE_BYTES, verification=verification
                        )
                        if info is None:
                            raise _WouldBlock
                    else:
                        info = log.append_as_leader(part.records, epoch, verification=verification)
                    rows.append(PartitionAppend(part.partition, info, log=log, leader_epoch=epoch))
                except _WouldBlock:
                    raise
                except Exception as exc:
                    # With the partition's log start offset, as Kafka's ReplicaManager answers: an
                    # idempotent producer needs it to react to UNKNOWN_PRODUCER_ID. From the log in
                    # hand (no topic lock, no log created on the event loop); -1 without one.
                    row = PartitionAppend(
                        part.partition,
                        error=self._partition_error(exc, topic.name, part.partition),
                        log_start_offset=log.log_start_offset if log is not None else -1,
                    )
                    if isinstance(exc, DuplicateSequenceNumberError) and log is not None and exc.flush_before > 0:
                        row.log, row.flush_before = log, exc.flush_before  # acks=all: the original on disk first
                    rows.append(row)

    async def _produce(self, request: m.ProduceRequest, ctx: RequestContext) -> list[TopicAppends]:
        """Append the request's batches; the outcome once acknowledged as acks asks (for acks=0 as
        soon as appended: no answer is sent, but the Kafka listener closes when one failed)."""
        results: list[TopicAppends] = []
        await self.producers.refresh_if_unknown(request)
        verified = await verify_transactional_produce(self, request, ctx)
        try:
            if (
                sum(len(t.partitions) for t in request.topics) > INLINE_PARTITIONS
                or sum(len(p.records) for t in request.topics for p in t.partitions) > INLINE_PRODUCE_BYTES
                or not self.inline.allowed()
            ):
                raise _WouldBlock
            started = self.inline.start()
            try:
                self._produce_rows(request, ctx, results, inline=True, verified=verified)
            finally:
                self.inline.took(started)
        except _WouldBlock:  # the rest (all of it, or from the first partition that would wait)
            await self._in_thread(self._produce_rows, request, ctx, results, False, verified)
        self.after_appends(results)
        if request.acks == -1:
            waiting_since = handling_clock()
            await self.wait_acks_all(results, request.timeout_ms)
            ctx.accounting.parked(handling_clock() - waiting_since)
        return results

    def after_appends(self, results: list[TopicAppends]) -> None:
        """What follows a leader's appends: followers and long polls woken, rolls reported."""
        for topic in results:
            for row in topic.partitions:
                info = row.info
                if info is not None:
                    if info.duplicate:
                        # Nothing new to wake fetchers for; acks=all still waits for the fsync
                        # of the original's offsets, which may not be durable yet.
                        self.produce_duplicates += 1
                        continue
                    if self.cluster is not None:
                        self.cluster.replicas.on_leader_append(topic.name, row.partition)
                    self.notifier.notify((topic.name, row.partition))
                    if info.roll_reason is not None and self.on_roll is not None:
                        assert row.log is not None  # an appended partition carries its log
                        self.on_roll(row.log, info.roll_reason)

    async def wait_acks_all(self, results: list[TopicAppends], timeout_ms: int) -> None:
        """acks=all: each appended row committed (in the ISR on a cluster, fsynced on a single
        broker) within ``timeout_ms``, else its row gets the error."""
        if self.cluster is not None:
            await self._wait_replicated(results, timeout_ms)
        else:
            await self._wait_flushed(results, timeout_ms)

    async def _wait_replicated(self, results: list[TopicAppends], timeout_ms: int) -> None:
        """acks=all on a cluster (Kafka's DelayedProduce): each appended partition committed (its high
        watermark past the batch: every in-sync replica has it) within timeout_ms, else
        REQUEST_TIMED_OUT; NOT_ENOUGH_REPLICAS_AFTER_APPEND if the ISR fell below
        min.insync.replicas meanwhile; NOT_LEADER_OR_FOLLOWER if leadership moved (the batch may or
        may not survive the new leader). As Kafka, no fsync is waited for: the replicas are the copies."""
        assert self.cluster is not None
        deadline = trio.current_time() + timeout_ms / 1000
        replicas = self.cluster.replicas
        for topic in results:
            for row in topic.partitions:
                info = row.info
                if info is None:
                    continue
                key = (topic.name, row.partition)
                required = info.last_offset + 1
                while True:
                    event = self.notifier.register([key])
                    try:
                        status = replicas.acks_all_status(topic.name, row.partition, required, row.leader_epoch)
                        if status is AcksAll.DONE:
                            break
                        failure: TriologError | None = None
                        if status is None:
                            failure = NotLeaderOrFollowerError(
                                f"leadership of {topic.name}-{row.partition} moved before offset {info.last_offset} "
                                f"was committed"
                            )
                        elif status is AcksAll.NOT_ENOUGH_REPLICAS_AFTER_APPEND:
                            failure = NotEnoughReplicasAfterAppendError(
                                f"records were appended at offset {info.first_offset}, but the ISR fell below "
                                f"min.insync.replicas before they were committed"
                            )
                        elif trio.current_time() >= deadline or self.notifier.closed:
                            failure = RequestTimedOutError(
                                f"records were appended at offset {info.first_offset} but not committed by the "
                                f"in-sync replicas within timeout_ms={timeout_ms}"
                            )
                        if failure is not None:
                            row.error = error_of(failure)
                            row.info, row.log_start_offset = None, -1
                            break
                        with trio.move_on_at(deadline):
                            await event.wait()
                    finally:
                        self.notifier.unregister([key], event)

    async def _wait_flushed(self, results: list[TopicAppends], timeout_ms: int) -> None:
        """acks=all: every appended partition fsynced (group commit) within timeout_ms, else
        REQUEST_TIMED_OUT (the data is in the log, but not yet known to be on disk)."""
        for topic in results:
            for row in topic.partitions:
                log = row.log
                if log is None:
                    continue
                info = row.info  # None: DUPLICATE_SEQUENCE_NUMBER, the original first
                try:
                    with trio.fail_after(max(timeout_ms, 1) / 1000):
                        await self.committer.wait_flushed(
                            log, row.flush_before if info is None else info.last_offset + 1
                        )
                except trio.TooSlowError:
                    row.error = error_of(
                        RequestTimedOutError(
                            f"the original of this duplicate batch (below offset {row.flush_before}) is not fsynced "
                            f"within timeout_ms={timeout_ms}"
                            if info is None
                            else f"records were appended at offset {info.first_offset} but not fsynced within "
                            f"timeout_ms={timeout_ms}"
                        )
                    )
                    row.info, row.log_start_offset = None, -1
                except Exception as exc:
                    row.error = self._partition_error(exc, topic.name, row.partition)
                    row.info, row.log_start_offset = None, -1

    # -- fetch -------------------------------------------------------------------------------

    async def _fetch(self, request: m.FetchRequest, ctx: RequestContext) -> FetchResult:
        tps = [(t.name, p.partition) for t in request.topics for p in t.partitions]
        deadline = trio.current_time() + request.max_wait_ms / 1000
        while True:
            # Registered before the read: an append landing between the read and the wait still wakes us.
            event = self.notifier.register(tps)
            try:
                read = None
                if sum(len(t.partitions) for t in request.topics) <= INLINE_PARTITIONS and self.inline.allowed():
                    started = self.inline.start()
                    try:
                        read = self._read_fetch(request, ctx, inline=True)
                    except _WouldBlock:
                        pass
                    finally:
                        self.inline.took(started)
                if read is None:
                    read = await self._in_thread(self._read_fetch, request, ctx)
                if isinstance(request, ReplicaFetchRequest):
                    self._follower_fetched(request, read)
                # Kafka's rule: answer at once when min_bytes are there, a partition has an error,
                # there is nothing to fetch (an empty request has nothing to wait for), or time is
                # up; and, as Kafka completes its delayed operations on shutdown, when the broker stops.
                if (
                    read.total_bytes >= request.min_bytes
                    or read.has_errors
                    or not tps
                    or trio.current_time() >= deadline
                    or self.notifier.closed
                ):
                    return read
                read.close()
                self.delayed_fetches += 1
                waiting_since = handling_clock()
                try:
                    with trio.move_on_at(deadline):
                        await event.wait()
                finally:
                    self.delayed_fetches -= 1
                    ctx.accounting.parked(handling_clock() - waiting_since)
            finally:
                self.notifier.unregister(tps, event)

    def _follower_fetched(self, request: ReplicaFetchRequest, read: FetchResult) -> None:
        """A follower's fetch tells the leader how far its log reaches (Kafka updates the follower's
        state at the read, before the fetch may wait): the high watermark may move, waking long polls."""
        assert self.cluster is not None and read.response is not None
        answered = {(t.name, p.partition): p for t in read.response.topics for p in t.partitions}
        for topic in request.topics:
            for part in topic.partitions:
                result = answered.get((topic.name, part.partition))
                if result is None or result.error_code or getattr(result, "diverging_epoch", -1) >= 0:
                    continue
                assert isinstance(part, ReplicaFetchPartition)
                try:
                    moved = self.cluster.replicas.on_follower_fetch(
                        topic.name, part.partition, request.replica_id, part.fetch_offset, part.log_start_offset
                    )
                except TriologError:
                    continue  # leadership moved between the read and now: the next fetch is refused
                if moved:
                    self.notifier.notify((topic.name, part.partition))

    def _replica_read(
        self, request: ReplicaFetchRequest, ctx: RequestContext, topic: str, part: ReplicaFetchPartition
    ) -> tuple[Log, ReplicaFetchPartitionResult | None]:
        """A follower's partition: the leader's log (checked against the epoch the follower names),
        or the answer telling it where its log diverges (truncate-on-fetch, Fetch v12+: the leader's
        largest epoch not above the follower's last fetched one, and where it ends)."""
        if self.cluster is None:
            raise NotLeaderOrFollowerError("this broker is not a member of a cluster: it has no followers")
        self.authz.require_cluster(ctx, Op.CLUSTER_ACTION)
        hosted = self.cluster.replicas.leader_partition(topic, part.partition, part.current_leader_epoch)
        if hosted.leadership is None or request.replica_id not in hosted.leadership.followers:
            raise NotLeaderOrFollowerError(f"broker {request.replica_id} is not a replica of {topic}-{part.partition}")
        log = hosted.log
        if part.last_fetched_epoch >= 0:
            epoch, end = log.end_offset_for_epoch(part.last_fetched_epoch)
            if epoch < 0 or end < 0:
                # No epoch of the leader's to compare with (on the wire -1/-1 would read as "no
                # divergence"): Kafka answers OFFSET_OUT_OF_RANGE, and the follower truncates.
                raise OffsetOutOfRangeError(
                    f"the leader of {topic}-{part.partition} has no epoch at or below {part.last_fetched_epoch}"
                )
            if epoch < part.last_fetched_epoch or end < part.fetch_offset:
                return log, ReplicaFetchPartitionResult(
                    partition=part.partition,
                    high_watermark=log.high_watermark,
                    last_stable_offset=log.last_stable_offset,
                    log_start_offset=log.log_start_offset,
                    diverging_epoch=epoch,
                    diverging_end_offset=end,
                )
        return log, None

    def _read_fetch(self, request: m.FetchRequest, ctx: RequestContext, inline: bool = False) -> FetchResult:
        """Plan the fetch's response; ``inline`` (on the event loop) raises _WouldBlock, with
        nothing held, where a partition's read could wait (see Log.try_read_tail)."""
        remaining = request.max_bytes
        # read_committed (isolation_level 1): up to the last stable offset, with the aborted
        # transactions in what is read (from the .txnindex files; the bytes still go by sendfile).
        consumer_isolation = (
            FetchIsolation.TXN_COMMITTED if request.isolation_level == 1 else FetchIsolation.HIGH_WATERMARK
        )
        regions: list[FetchRegion] = []
        result = FetchResult(None, regions, self.fetch_descriptors)
        topics = []
        total = 0
        errors = False
        try:
            for topic in request.topics:
                partitions: list[m.FetchPartitionResult] = []
                for part in topic.partitions:
                    try:
                        validate_topic_name(topic.name)
                        isolation = consumer_isolation
                        result_class: type[m.FetchPartitionResult] = m.FetchPartitionResult
                        if isinstance(request, ReplicaFetchRequest):
                            assert isinstance(part, ReplicaFetchPartition)
                            log, diverged = self._replica_read(request, ctx, topic.name, part)
                            if diverged is not None:
                                partitions.append(diverged)
                                continue
                            # A follower reads to the log end; what it has is what commits records.
                            isolation, result_class = FetchIsolation.LOG_END, ReplicaFetchPartitionResult
                        else:
                            self.authz.require_topic(ctx, Op.READ, topic.name)
                            log, _ = self._leader(topic.name, part.partition, inline=inline)
                        budget = max(0, min(part.partition_max_bytes, remaining))
                        # The first regions take their descriptors now (no thread hop later for
                        # a small fetch); the rest as the response is sent.
                        take = len(regions) == result._next and result._may_open()
                        try:
                            info, fd = _read_with_descriptor(log, part.fetch_offset, budget, take, inline, isolation)
                        except BaseException:
                            if take:
                                result._return_unit()
                            raise
                        records: bytes | m.ExternalBin = b""
                        if take and fd is None:
                            result._return_unit()
                        if info.region is not None:
                            region = FetchRegion(info.region.records, info.region.position, info.region.length)
                            regions.append(region)
                            if fd is not None:
                                result._opened(region, fd)
                                result._next = len(regions)
                            records = m.ExternalBin(region.length, region)
                            total += region.length
                            remaining -= region.length
                        aborted = info.aborted_transactions
                        partitions.append(
                            result_class(
                                partition=part.partition,
                                high_watermark=log.high_watermark,
                                last_stable_offset=log.last_stable_offset,
                                log_start_offset=log.log_start_offset,
                                aborted_transactions=None
                                if aborted is None
                                else tuple(
                                    m.FetchAbortedTransaction(producer_id=t.producer_id, first_offset=t.first_offset)
                                    for t in aborted
                                ),
                                records=records,
                            )
                        )
                    except _WouldBlock:
                        raise
                    except Exception as exc:
                        errors = True
                        code, message = self._partition_error(exc, topic.name, part.partition)
                        # out of range: with the log's offsets (as Kafka answers), if it is still there
                        found = (
                            self.log_manager.get_log(topic.name, part.partition)
                            if isinstance(exc, OffsetOutOfRangeError)
                            else None
                        )
                        if found is not None:
                            failed = m.FetchPartitionResult(
                                partition=part.partition,
                                error_code=code,
                                error_message=message,
                                high_watermark=found.high_watermark,
                                last_stable_offset=found.last_stable_offset,
                                log_start_offset=found.log_start_offset,
                            )
                        else:
                            failed = m.FetchPartitionResult(
                                partition=part.partition, error_code=code, error_message=message
                            )
                        partitions.append(failed)
                topics.append(m.FetchTopicResult(name=topic.name, partitions=tuple(partitions)))
            result.response = m.FetchResponse(id=request.id, topics=tuple(topics))
            result.total_bytes, result.has_errors = total, errors
            return result
        except BaseException:
            result.close()
            raise

    # -- offsets -----------------------------------------------------------------------------

    async def _list_offsets(self, request: m.ListOffsetsRequest, ctx: RequestContext) -> m.Response:
        def work():
            topics = []
            for topic in request.topics:
                partitions = []
                for part in topic.partitions:
                    try:
                        validate_topic_name(topic.name)
                        self.authz.require_topic(ctx, Op.DESCRIBE, topic.name)
                        log, _ = self._leader(topic.name, part.partition)
                        found = log.fetch_offset_by_timestamp(
                            part.timestamp,
                            FetchIsolation.TXN_COMMITTED
                            if request.isolation_level == 1
                            else FetchIsolation.HIGH_WATERMARK,
                        )
                        timestamp, offset = (found.timestamp, found.offset) if found is not None else (-1, -1)
                        partitions.append(
                            m.ListOffsetsPartitionResult(partition=part.partition, timestamp=timestamp, offset=offset)
                        )
                    except Exception as exc:
                        code, message = self._partition_error(exc, topic.name, part.partition)
                        partitions.append(
                            m.ListOffsetsPartitionResult(
                                partition=part.partition, error_code=code, error_message=message
                            )
                        )
                topics.append(m.ListOffsetsTopicResult(name=topic.name, partitions=tuple(partitions)))
            return topics

        return m.ListOffsetsResponse(id=request.id, topics=tuple(await self._in_thread(work)))

    async def _delete_records(self, request: m.DeleteRecordsRequest, ctx: RequestContext) -> m.Response:
        def work():
            topics = []
            for topic in request.topics:
                partitions = []
                for part in topic.partitions:
                    try:
                        validate_topic_name(topic.name)
                        self.authz.require_topic(ctx, Op.DELETE, topic.name)
                        log, _ = self._leader(topic.name, part.partition)
                        if part.offset < -1:
                            raise OffsetOutOfRangeError(
                                f"offset {part.offset} is not an offset (use -1 for the high watermark)"
                            )
                        target = log.high_watermark if part.offset == -1 else part.offset
                        low = log.maybe_increment_log_start_offset(target)
                        partitions.append(m.DeleteRecordsPartitionResult(partition=part.partition, low_watermark=low))
                    except Exception as exc:
                        code, message = self._partition_error(exc, topic.name, part.partition)
                        partitions.append(
                            m.DeleteRecordsPartitionResult(
                                partition=part.partition, error_code=code, error_message=message
                            )
                        )
                topics.append(m.DeleteRecordsTopicResult(name=topic.name, partitions=tuple(partitions)))
            return topics

        return m.DeleteRecordsResponse(id=request.id, topics=tuple(await self._in_thread(work)))

    # -- log dirs ----------------------------------------------------------------------------

    async def _describe_log_dirs(self, request: m.DescribeLogDirsRequest, ctx: RequestContext) -> m.Response:
        """Kafka's DescribeLogDirs: per log dir, the size and segment count of each partition it
        holds (from the segments the Log already knows: no directory walk). Requested topics or
        partitions found in no log dir are listed in ``errors``, one error per partition."""
        if not self.authz.cluster(ctx, Op.DESCRIBE):
            return m.DescribeLogDirsResponse(
                id=request.id,
                error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                error_message=f"{ctx.principal} is not authorized to describe the cluster (describe_log_dirs)",
            )
        log_dirs, errors = await self._in_thread(self._read_log_dirs, request.topics)
        return m.DescribeLogDirsResponse(id=request.id, log_dirs=log_dirs, errors=errors)

    def _read_log_dirs(self, wanted: tuple[m.DescribeLogDirsTopic, ...] | None):
        errors: list[m.LogDirTopicError] = []
        selected: list[tuple[str, int]] = []
        if wanted is None:
            for name, listed in sorted(self.topics.all().items()):
                selected.extend((name, p) for p in range(listed.num_partitions))
        for entry in wanted or ():
            try:
                validate_topic_name(entry.name)
                topic = self.topics.get(entry.name)
                if topic is None:
                    raise UnknownTopicOrPartitionError(f"topic {entry.name!r} does not exist")
            except Exception as exc:
                code, message = error_of(exc, topic=entry.name)
                if entry.partitions is None:
                    errors.append(m.LogDirTopicError(name=entry.name, error_code=code, error_message=message))
                else:
                    errors.append(
                        m.LogDirTopicError(
                            name=entry.name,
                            partitions=tuple(
                                m.LogDirPartitionError(partition=p, error_code=code, error_message=message)
                                for p in entry.partitions
                            ),
                        )
                    )
                continue
            partitions = range(topic.num_partitions) if entry.partitions is None else entry.partitions
            selected.extend((entry.name, p) for p in partitions)

        offline = set(self.log_manager.offline_dirs())
        by_dir: dict[Any, dict[str, list[m.LogDirPartition]]] = {d.path: {} for d in self.log_manager.log_dirs}
        failed: dict[str, list[m.LogDirPartitionError]] = {}
        for name, partition in selected:
            try:
                log = self.topics.log(name, partition)
                directory = log.directory.parent
                if directory in offline:
                    raise StorageError(f"log directory {directory} is offline")
                segments = log.segments_snapshot()
                by_dir.setdefault(directory, {}).setdefault(name, []).append(
                    m.LogDirPartition(
                        partition=partition,
                        size_bytes=sum(s.size for s in segments),
                        segments=len(segments),
                        log_start_offset=log.log_start_offset,
                        log_end_offset=log.log_end_offset,
                    )
                )
            except Exception as exc:
                code, message = self._partition_error(exc, name, partition)
                failed.setdefault(name, []).append(
                    m.LogDirPartitionError(partition=partition, error_code=code, error_message=message)
                )
        errors.extend(m.LogDirTopicError(name=name, partitions=tuple(parts)) for name, parts in failed.items())

        results = []
        for path, topics in by_dir.items():
            total = usable = -1
            try:
                stat = os.statvfs(path)
                total, usable = stat.f_blocks * stat.f_frsize, stat.f_bavail * stat.f_frsize
            except OSError:
                pass
            if path in offline:
                results.append(
                    m.LogDirResult(
                        path=str(path),
                        error_code=ErrorCode.KAFKA_STORAGE_ERROR,
                        total_bytes=total,
                        usable_bytes=usable,
                        error_message=f"log directory {path} is offline after an I/O error",
                    )
                )
                continue
            results.append(
                m.LogDirResult(
                    path=str(path),
                    total_bytes=total,
                    usable_bytes=usable,
                    topics=tuple(m.LogDirTopic(name=name, partitions=tuple(parts)) for name, parts in topics.items()),
                )
            )
        return tuple(results), tuple(errors)


def _read_with_descriptor(
    log, offset: int, budget: int, take: bool = True, inline: bool = False, isolation=FetchIsolation.HIGH_WATERMARK
):
    """Plan a fetch and (if ``take``) take a descriptor of its segment, ours to send from and close.

    If retention removes the segment and its files between the two steps (possible only with
    ``file.delete.delay.ms=0``), the read is planned again against the segments that are left.
    ``inline``: _WouldBlock instead of waiting for the log or the file.
    """
    attempts_left = 3
    while True:
        if inline:
            info = log.try_read_tail(offset, budget, min_one_message=True, isolation=isolation)
            if info is None:
                raise _WouldBlock
        else:
            info = log.read(offset, budget, min_one_message=True, isolation=isolation)
        if info.region is None or not take:
            return info, None
        try:
            if inline:
                fd = info.region.records.try_dup_fd()
                if fd is None:
                    raise _WouldBlock
                return info, fd
            return info, info.region.records.dup_fd()
        except FileNotFoundError:
            attempts_left -= 1
            if not attempts_left:
                raise


#: api_versions' packed answer (see ApiVersionsAnswer).
_API_VERSIONS = ApiVersionsAnswer(BROKER_VERSION)
