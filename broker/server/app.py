"""The broker process: storage startup, the TCP listener, background tasks, graceful shutdown.

Startup loads every log (recovering after a crash) before the listener opens, then starts the
Prometheus endpoint (``metrics.listener``, see broker/metrics.py). Shutdown (SIGTERM, SIGINT, or
``BrokerServer.shutdown()``) stops accepting, lets in-flight requests finish (up to a grace
period), stops the metrics endpoint, then flushes, closes every log, writes the checkpoints and
the clean-shutdown marker, in Kafka's order.
"""

from __future__ import annotations

import errno
import gc
import ipaddress
import math
import os
import signal
import ssl
from dataclasses import dataclass
from functools import partial

import structlog
import trio

from triolog.broker.cluster.broker_channel import BrokerChannel
from triolog.broker.cluster.controlled_shutdown import controlled_shutdown
from triolog.broker.cluster.inter_broker_sasl import InterBrokerSasl
from triolog.broker.cluster.membership import ClusterJoinError, ClusterMembership
from triolog.broker.cluster.metadata_cache import ClusterMetadataCache
from triolog.broker.cluster.metadata_store import StoreError
from triolog.broker.cluster.producer_id_blocks import follow_issued_limit, read_issued_limit, reserve_block
from triolog.broker.cluster.replica_fetcher import FetchSettings, ReplicaFetcherManager
from triolog.broker.cluster.replica_manager import ReplicaManager
from triolog.broker.cluster.zk_security import SecurityMetadataError, ZkSecurityMetadata
from triolog.broker.coordinator.producer_id_manager import ProducerIdManager
from triolog.broker.metrics import BrokerMetrics
from triolog.broker.security.acl_store import AclStore
from triolog.broker.security.quotas import QuotaStore
from triolog.broker.security.sasl import SaslServerSession, offered_mechanisms
from triolog.broker.security.scram import CredentialStore
from triolog.broker.security.tls import TlsConfigError, inter_broker_context, server_context
from triolog.broker.storage.cleaner.log_cleaner import CleanerConfig
from triolog.broker.storage.clock import SYSTEM_CLOCK, Clock
from triolog.broker.storage.log import Log
from triolog.broker.storage.log_manager import LogManager
from triolog.broker.storage.topics import TopicManager
from triolog.config.broker_config import BrokerConfig, Endpoint, uses_sasl, uses_tls
from triolog.config.log_config import INT_MAX
from triolog.protocol.errors import TriologError
from triolog.protocol.kafka.apis import KafkaContext
from triolog.protocol.request_limits import RequestLimits

from .authorization import RequestAuthorizer
from .cluster_handlers import ClusterApis, ClusterServices
from .codec import Codec
from .connection import ClientConnection
from .coordinator_topic import ClusterCoordinatorPartitions
from .group_commit import GroupCommitter
from .group_handlers import GroupApis, GroupService, offsets_topic
from .handlers import RequestHandler
from .kafka_codec import KafkaCodec
from .loop_hold import WorkerThreads
from .memory_pool import RequestMemoryPool
from .msgpack_codec import MsgpackCodec
from .notifier import AppendNotifier
from .producer_handlers import ProducerIdApis
from .quota_manager import ClientQuotas, TokenBucket
from .security_handlers import SecurityApis
from .task_dump import dump_tasks_on_signal
from .txn_handlers import TransactionApis, TransactionService, transaction_state_topic
from .wrong_protocol import WrongProtocolLog, wrong_protocol_hints

logger = structlog.get_logger("triolog.server")

#: How long in-flight requests may take to finish once shutdown begins.
SHUTDOWN_GRACE_S = 30.0
#: How often due flushes (flush.ms, and rolls missed by the roll hook) are looked for.
FLUSH_CHECK_INTERVAL_MS = 1000
#: How often the files of deleted segments whose file.delete.delay.ms passed are removed.
SEGMENT_DELETE_CHECK_INTERVAL_MS = 500
#: Errors of accept(2) that mean "no descriptor or memory for now", not a broken listener
#: (trio's serve_listeners list): the listener waits this long and accepts again.
ACCEPT_CAPACITY_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS})
ACCEPT_RETRY_S = 0.1

#: Worker threads decoding large requests (each holds at most one request's object budget).
DECODE_THREADS = 2
AUTH_THREADS = 1


class StartupError(OSError):
    """The broker cannot start: one sentence naming what failed (a busy port, a locked or unwritable
    log dir), which ``triolog serve`` prints as one line instead of the exception group around it.
    An OSError, as what it wraps mostly is, so callers catching that still do."""


def _describe_os_error(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.strerror}: {exc.filename}" if exc.filename else exc.strerror
    return str(exc) or type(exc).__name__


def startup_failure(exc: BaseException) -> StartupError | None:
    """The StartupError inside ``exc`` (an exception group from the nurseries, or itself), if any."""
    if isinstance(exc, StartupError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = startup_failure(inner)
            if found is not None:
                return found
    return None


@dataclass(frozen=True)
class BrokerAddress:
    host: str
    port: int
    #: The Prometheus endpoint's bound port, None when ``metrics.listener`` is empty.
    metrics_port: int | None = None
    #: The Kafka-protocol listener's bound port, None when ``kafka.listeners`` is empty.
    kafka_port: int | None = None


class BrokerServer:
    def __init__(
        self, config: BrokerConfig, *, clock: Clock = SYSTEM_CLOCK, storage_threads: int = 16, freeze_gc: bool = False
    ):
        self.config = config
        #: Once storage is loaded, move every object so far out of the garbage collector's sight
        #: (gc.freeze): a full collection then scans only what came after, not the startup's
        #: tens of thousands of long-lived objects (tens of milliseconds on the event loop, a
        #: produce p99 outlier). For the broker's own process (serve); a host process embedding
        #: a broker (tests) keeps its collector as it is.
        self.freeze_gc = freeze_gc
        self.clock = clock
        self.log_manager = LogManager(
            config.log_dirs,
            config.log_config,
            clock=clock,
            node_id=config.node_id,
            cleaner_config=CleanerConfig.from_broker_config(config),
            producer_id_expiration_ms=config.producer_id_expiration_ms,
        )
        self.topics = TopicManager(self.log_manager, config.log_config)
        #: Producer ids for init_producer_id, reserved in blocks in the first log dir.
        self.producer_ids = ProducerIdManager(config.log_dirs[0])
        self.log_manager.topic_config = self.topics.config_for
        self.limiter = trio.CapacityLimiter(storage_threads)
        #: Every call of the running broker into a worker thread goes through this (counted: see
        #: loop_hold.LoopHoldMeter).
        self.workers = WorkerThreads()
        self.committer = GroupCommitter(run_sync=self.workers.run_sync)
        self.notifier = AppendNotifier()
        queued = config.queued_max_request_bytes
        #: queued.max.request.bytes: request bytes all connections together may hold.
        self.request_pool = RequestMemoryPool(None if queued < 0 else queued)
        self.request_limits = RequestLimits(max_partitions=config.max_broker_partitions)
        self.decode_limiter = trio.CapacityLimiter(DECODE_THREADS)
        #: Worker threads for SASL steps (PBKDF2 for PLAIN), apart from decoding: a flood of login
        #: attempts queues behind itself, not in front of requests.
        self.auth_limiter = trio.CapacityLimiter(AUTH_THREADS)
        #: This broker's own metrics registry; served over HTTP only if ``metrics.listener`` is set.
        self.metrics = BrokerMetrics(self.log_manager)
        self.handler: RequestHandler | None = None
        #: What the Kafka listener's answers say about this broker; None without the listener.
        self.kafka_context: KafkaContext | None = None
        #: The group coordinator's service (set when run() starts it).
        self.groups: GroupService | None = None
        #: The transaction coordinator's service (set when run() starts it).
        self.transactions: TransactionService | None = None
        self.producer_apis: ProducerIdApis | None = None
        self._authz: RequestAuthorizer | None = None
        self._handler_ready = trio.Event()
        #: Requests to the other brokers (the transaction coordinator's markers); cluster only.
        self._broker_channel: BrokerChannel | None = None
        self._shutdown = trio.Event()
        self._connections: dict[ClientConnection, trio.CancelScope] = {}
        self._per_ip: dict[str, int] = {}
        #: Connections refused for their IP's connection_creation_rate (logged 1 in 1000).
        self._refused_by_rate = 0
        #: One per open connection; accepting waits for one (max.connections).
        self._connection_slots = trio.Semaphore(config.max_connections)
        #: True while accepting is paused at max.connections.
        self.accept_paused = False
        #: max.connection.creation.rate, broker-wide: the allowance of new connections (one
        #: second's worth, saved from the start), None when unlimited (Kafka's default, Int.MaxValue).
        #: On the event loop's clock, as the client quotas: its time is read only when accepting
        #: (this may run outside the loop), and it is full then (saved since "-inf").
        rate = config.max_connection_creation_rate
        self._accept_rate: TokenBucket | None = None
        if 0 < rate < INT_MAX:
            self._accept_rate = TokenBucket(rate, rate, -math.inf)
        self._nursery: trio.Nursery | None = None
        #: Clients speaking another protocol, logged for all connections (its HTTP hint names the
        #: metrics endpoint, set once that is bound).
        self.wrong_protocol_log = WrongProtocolLog(wrong_protocol_hints(config.metrics_listener))
        #: The TLS listeners' server context (ssl.* keys), read at startup.
        self.ssl_context: ssl.SSLContext | None = None
        #: SCRAM credentials (triolog-users.json in the first log dir), loaded with the storage.
        self.credentials: CredentialStore | None = None
        #: ACLs (triolog-acls.json in the first log dir), loaded with the storage; enforced when
        #: authorizer.class.name is set.
        self.acls: AclStore | None = None
        #: Client quotas (triolog-quotas.json in the first log dir) and their managers.
        self.quotas: ClientQuotas | None = None
        #: The broker's ZooKeeper session, registration and controller (zookeeper.connect set).
        self.membership: ClusterMembership | None = None
        #: A cluster's credentials, quotas and ACLs (zookeeper.connect set): the stores above are
        #: its in-memory copies, instead of the files of a single broker.
        self.security_metadata: ZkSecurityMetadata | None = None
        #: What a cluster member's handlers serve from (zookeeper.connect set).
        self.cluster: ClusterServices | None = None
        #: The followers' fetchers run in it; a controlled shutdown stops them first.
        self._fetching = trio.CancelScope()
        self._fetchers: ReplicaFetcherManager | None = None

    def shutdown(self) -> None:
        self._shutdown.set()

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        if self.config.tls_listeners:
            try:
                self.ssl_context = server_context(self.config)
            except TlsConfigError as exc:
                raise StartupError(str(exc)) from None
        if self.config.zookeeper_connect:
            # Kafka's order: the cluster id from ZooKeeper first, which the log dirs must carry.
            self.membership = membership = ClusterMembership(self.config)
            cache = ClusterMetadataCache(membership.zk)
            replicas = ReplicaManager(
                self.config.node_id,
                cache,
                self.topics,
                topic_configs=membership.zk.topic_config,
                zk=membership.zk,
                lag_max_ms=self.config.replica_lag_time_max_ms,
                now_ms=self.clock.milliseconds,
                run_sync=partial(self.workers.run_sync, limiter=self.limiter),
                notify=self.notifier.notify,
            )
            self.cluster = ClusterServices(membership, cache, replicas)
            try:
                self.log_manager.required_cluster_id = await self.membership.connect()
                # Every log's high watermark is then the replication's (from its checkpoint at
                # load), no longer its log end.
                self.log_manager.replicated = True
            except ClusterJoinError as exc:
                raise StartupError(str(exc)) from None
            self.security_metadata = ZkSecurityMetadata(
                membership.zk.store,
                super_users=self.config.super_users,
                allow_everyone_if_no_acl_found=self.config.allow_everyone_if_no_acl_found,
            )
            try:
                await self.security_metadata.load()
            except (SecurityMetadataError, StoreError) as exc:
                await membership.close()
                raise StartupError(f"cannot read the cluster's users, quotas and ACLs from ZooKeeper: {exc}") from None
        try:
            await trio.to_thread.run_sync(self._start_storage)
        except (TriologError, OSError) as exc:
            if self.membership is not None:
                await self.membership.close()
            raise StartupError(
                f"cannot open log.dirs={','.join(map(str, self.config.log_dirs))}: {_describe_os_error(exc)}"
            ) from exc
        if self.freeze_gc:
            gc.collect()
            gc.freeze()
            logger.debug("gc_frozen", objects=gc.get_freeze_count())
        try:
            metrics_port = await self._start_metrics_endpoint()
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                if self.security_metadata is not None:
                    await nursery.start(self.security_metadata.run)
                await nursery.start(self.committer.run)
                # The group coordinator: loads __consumer_offsets (if it exists) while serving.
                self.groups = GroupService(
                    self.config,
                    self.topics,
                    self.committer,
                    self.notifier,
                    self.workers,
                    self.limiter,
                    self.clock,
                    cluster=None
                    if self.cluster is None
                    else ClusterCoordinatorPartitions(
                        self.config, offsets_topic(self.config), self.cluster, self.notifier, "groups"
                    ),
                )
                self.metrics.groups.watch(lambda: self.groups.coordinator)
                await nursery.start(self.groups.run)
                # The transaction coordinator: loads __transaction_state (if it exists) while serving.
                self.producer_apis = ProducerIdApis(
                    manager=self.producer_ids,
                    log_manager=self.log_manager,
                    authz=self._authorizer(),
                    workers=self.workers,
                    limiter=self.limiter,
                )
                self.transactions = self._transaction_service()
                self.metrics.transactions.watch(lambda: self.transactions)
                await nursery.start(self.transactions.run)
                self.metrics.server.watch(self)
                async with trio.open_nursery() as connections:
                    listen = self.config.listener
                    listeners = await _open_listeners(listen, "listeners")
                    kafka_listen = self.config.kafka_listener
                    kafka_listeners = (
                        [] if kafka_listen is None else await _open_listeners(kafka_listen, "kafka.listeners")
                    )
                    port = listeners[0].socket.getsockname()[1]
                    # Before the first accept: its answers name the port bound (listeners with port 0).
                    self.handler = self._request_handler(listen.host or "localhost", port)
                    self._handler_ready.set()
                    accepting = trio.CancelScope()

                    async def accept_all() -> None:
                        with accepting:
                            async with trio.open_nursery() as accept_loops:
                                for listener in listeners:
                                    accept_loops.start_soon(self._accept_loop, listener, connections, False, listen)
                                if kafka_listen is not None:  # (else there is no Kafka listener)
                                    for listener in kafka_listeners:
                                        accept_loops.start_soon(
                                            self._accept_loop, listener, connections, True, kafka_listen
                                        )

                    connections.start_soon(accept_all)
                    kafka_port = kafka_listeners[0].socket.getsockname()[1] if kafka_listeners else None
                    self.kafka_context = self._kafka_context(kafka_port)
                    if self.membership is not None:
                        await self._join_cluster(nursery, listen, port)
                    self.wrong_protocol_log.hints = wrong_protocol_hints(
                        self.config.metrics_listener, metrics_port, self.kafka_context
                    )
                    for coro in self._periodic_tasks():
                        nursery.start_soon(coro)
                    address = BrokerAddress(listen.host or "0.0.0.0", port, metrics_port, kafka_port)
                    logger.info(
                        "broker_started",
                        host=address.host,
                        port=port,
                        metrics_port=metrics_port,
                        kafka_port=kafka_port,
                        log_dirs=list(self.config.log_dirs),
                    )
                    for warning in exposure_warnings(self.config):
                        logger.warning("listener_without_authentication", **warning)
                    task_status.started(address)
                    await self._shutdown.wait()
                    if self.cluster is not None and self.config.controlled_shutdown_enable:
                        await self._controlled_shutdown()
                    logger.info(
                        "broker_stopping",
                        open_connections=len(self._connections),
                        delayed_fetches=self.handler.delayed_fetches,
                    )
                    # Stop accepting by cancelling the accept loops, which close their listeners.
                    # The connections live in their own nursery and go on; long polls answer
                    # what they have now instead of waiting out their max_wait_ms.
                    accepting.cancel()
                    self.notifier.close()
                    self.groups.shutdown()  # parked joins and syncs answer NOT_COORDINATOR
                    self.transactions.shutdown()
                    await self._drain_connections()
                    connections.cancel_scope.cancel()
                nursery.cancel_scope.cancel()
        finally:
            with trio.CancelScope(shield=True):
                # The endpoint goes first: no scrape reads a log while it is being closed.
                await trio.to_thread.run_sync(self.metrics.stop_endpoint)
                if self.membership is not None:
                    # The session ends: the registration goes at once, not a session timeout later.
                    await self.membership.close()
                await trio.to_thread.run_sync(self.log_manager.shutdown)
                if self.handler is not None:
                    self.handler.close()
                if self._broker_channel is not None:
                    await self._broker_channel.aclose()
                logger.info("broker_stopped")

    async def _join_cluster(self, nursery: trio.Nursery, listen: Endpoint, port: int) -> None:
        """Register with both listeners' advertised endpoints, then run the controller, the replica
        manager and the followers' fetchers."""
        membership, kafka = self.membership, self.kafka_context
        assert membership is not None and kafka is not None and self.config.kafka_listener is not None
        endpoints = membership.endpoints(
            (listen.scheme, listen.host or "localhost", port),
            (self.config.kafka_listener.scheme, kafka.host, kafka.port),
        )
        try:
            await membership.register(endpoints)
        except ClusterJoinError as exc:
            raise StartupError(str(exc)) from None
        assert self.cluster is not None
        cluster = self.cluster
        self.metrics.cluster.watch(lambda: (cluster.replicas, cluster.cache, cluster.membership.controller))
        await nursery.start(membership.run)
        await nursery.start(self.cluster.cache.run)
        # Producer ids from the cluster's blocks; ids any broker handed out are accepted here.
        zk, producer_ids, broker_id = membership.zk, self.producer_ids, self.config.node_id

        def reserve(size: int) -> tuple[int, int]:
            block = trio.from_thread.run(reserve_block, zk, broker_id, size)
            return block.first, block.last + 1

        producer_ids.reserve = reserve

        reading = trio.Lock()
        last_read_started = [float("-inf")]

        async def refresh_issued_limit() -> None:
            # One read at a time; a read that began after this request arrived answers it too,
            # so a flood of unknown ids costs ZooKeeper one read per round trip, no more.
            arrived = trio.current_time()
            async with reading:
                if last_read_started[0] >= arrived:
                    return
                last_read_started[0] = trio.current_time()
                try:
                    limit = await read_issued_limit(zk)
                except Exception:  # (ZooKeeper unreachable: the watch's value stands)
                    return
            if limit is not None and limit > producer_ids.cluster_issued_limit:
                producer_ids.cluster_issued_limit = limit

        producer_ids.refresh_cluster_issued_limit = refresh_issued_limit
        nursery.start_soon(follow_issued_limit, zk, partial(setattr, producer_ids, "cluster_issued_limit"))
        # Serving starts once the partitions this broker leads are known (Kafka's broker waits
        # for its first LeaderAndIsr the same way); clients retry NOT_LEADER_OR_FOLLOWER meanwhile.
        await nursery.start(self.cluster.replicas.run)
        # Followers copy their leaders' logs over the inter-broker listener (the Kafka listener).
        kafka_listener = self.config.kafka_listener
        try:
            ssl_context = inter_broker_context(self.config) if uses_tls(kafka_listener) else None
        except TlsConfigError as exc:
            raise StartupError(str(exc)) from None
        fetchers = ReplicaFetcherManager(
            self.config.node_id,
            self.cluster.cache,
            self.cluster.replicas,
            listener_name=self.config.inter_broker_listener_name or kafka_listener.scheme,
            settings=FetchSettings.from_config(self.config),
            run_sync=partial(self.workers.run_sync, limiter=self.limiter),
            ssl_context=ssl_context,
            # A SASL listener's login (sasl.mechanism.inter.broker.protocol, sasl.inter.broker.*).
            sasl=InterBrokerSasl.from_config(self.config),
        )
        self._fetchers = fetchers
        fetching = self._fetching

        async def fetch(*, task_status=trio.TASK_STATUS_IGNORED) -> None:
            with fetching:
                await fetchers.run(task_status=task_status)

        await nursery.start(fetch)

    async def _controlled_shutdown(self) -> None:
        """Move this broker's leaderships and ISR places to the others before it stops serving
        (controlled.shutdown.enable): for up to (controlled.shutdown.max.retries + 1) x
        controlled.shutdown.retry.backoff.ms, while it keeps serving whatever it still leads."""
        assert self.membership is not None and self.cluster is not None
        if self._fetchers is not None:
            self._fetchers.leave()
        config = self.config
        timeout_s = (config.controlled_shutdown_max_retries + 1) * config.controlled_shutdown_retry_backoff_ms / 1000
        await controlled_shutdown(self.membership.zk, self.cluster.cache, config.node_id, timeout_s=timeout_s)
        self._fetching.cancel()

    def _authorizer(self) -> RequestAuthorizer:
        if self._authz is None:
            acls = self.acls
            assert acls is not None  # loaded with the storage
            self._authz = RequestAuthorizer(acls if self.config.authorizer_enabled else None)
        return self._authz

    def _transaction_service(self) -> TransactionService:
        """The transaction coordinator's service; on a cluster with the broker channel its markers
        take to the other brokers (over the inter-broker listener, as the replica fetchers)."""
        cluster = None
        if self.cluster is not None:
            cluster = ClusterCoordinatorPartitions(
                self.config, transaction_state_topic(self.config), self.cluster, self.notifier, "transactions"
            )
            kafka_listener = self.config.kafka_listener
            assert kafka_listener is not None  # (zookeeper.connect needs kafka.listeners: the config checks it)
            try:
                ssl_context = inter_broker_context(self.config) if uses_tls(kafka_listener) else None
            except TlsConfigError as exc:
                raise StartupError(str(exc)) from None
            self._broker_channel = BrokerChannel(
                self.config.node_id,
                self.cluster.cache,
                listener_name=self.config.inter_broker_listener_name or kafka_listener.scheme,
                ssl_context=ssl_context,
                sasl=InterBrokerSasl.from_config(self.config),
                timeout_ms=self.config.request_timeout_ms,
            )

        async def write_local(markers):
            await self._handler_ready.wait()  # (a load finds decided transactions before serving starts)
            assert self.handler is not None
            return await self.handler.txn_partitions.write_markers(markers)

        assert self.producer_apis is not None
        return TransactionService(
            self.config,
            self.topics,
            self.committer,
            self.notifier,
            self.workers,
            self.limiter,
            self.clock,
            self.producer_apis,
            write_local,
            cluster=cluster,
            channel=self._broker_channel,
        )

    def _request_handler(self, advertised_host: str, advertised_port: int) -> RequestHandler:
        """The request handler, with the coordinators and security stores it serves from."""
        acls, credentials, quotas = self.acls, self.credentials, self.quotas
        assert acls is not None and credentials is not None and quotas is not None  # loaded with the storage
        authz = self._authorizer()
        assert self.producer_apis is not None  # (made with the services, before serving)
        groups = GroupApis(
            config=self.config,
            topics=self.topics,
            authz=authz,
            service=self.groups,
            advertised_host=advertised_host,
            advertised_port=advertised_port,
            metrics=self.metrics.groups,
        )
        return RequestHandler(
            config=self.config,
            log_manager=self.log_manager,
            topics=self.topics,
            committer=self.committer,
            notifier=self.notifier,
            on_roll=self._on_roll,
            authz=authz,
            advertised_host=advertised_host,
            advertised_port=advertised_port,
            groups=groups,
            transactions=TransactionApis(
                config=self.config,
                topics=self.topics,
                authz=authz,
                service=self.transactions,
                groups=self.groups,
                advertised_host=advertised_host,
                advertised_port=advertised_port,
            ),
            security=SecurityApis(
                authz=authz,
                acl_store=acls,
                credentials=credentials,
                quota_store=quotas.store,
                workers=self.workers,
                limiter=self.limiter,
            ),
            cluster=None
            if self.cluster is None
            else ClusterApis(config=self.config, topics=self.topics, services=self.cluster),
            producers=self.producer_apis,
            workers=self.workers,
            limiter=self.limiter,
        )

    def _kafka_context(self, kafka_port: int | None) -> KafkaContext | None:
        """What the Kafka listener's answers say about this broker (None without the listener)."""
        listen = self.config.kafka_listener
        if listen is None or kafka_port is None:
            return None
        advertised = self.config.kafka_advertised_listener
        if advertised is not None:
            host, port = advertised.host or "localhost", advertised.port
        else:
            host, port = listen.host or "localhost", kafka_port
        return KafkaContext(node_id=self.config.node_id, host=host, port=port, cluster_id=self.log_manager.cluster_id)

    async def _start_metrics_endpoint(self) -> int | None:
        """Serve /metrics on ``metrics.listener`` (its own threads, off the event loop); its port, or None."""
        listen = self.config.metrics_listener
        if listen is None:
            return None
        try:
            endpoint = await trio.to_thread.run_sync(self.metrics.start_endpoint, listen.host, listen.port)
        except OSError as exc:
            raise StartupError(
                f"cannot serve metrics on {listen.host or '0.0.0.0'}:{listen.port} "
                f"(metrics.listener): {_describe_os_error(exc)}"
            ) from exc
        return endpoint.port

    def _start_storage(self) -> None:
        self.topics.load()
        self.log_manager.startup()
        first_dir = self.log_manager.log_dirs[0].path
        quota_store: QuotaStore
        if self.security_metadata is not None:
            # A cluster member's: the cluster's set, from ZooKeeper (read by run()).
            self.credentials = self.security_metadata.credentials
            self.acls = self.security_metadata.acls
            quota_store = self.security_metadata.quotas
        else:
            self.credentials = CredentialStore(first_dir, self.log_manager.fs)
            # Loaded whether or not an authorizer is on, so that a corrupt file is found at startup and
            # ACLs can be managed before the authorizer is turned on (as Kafka's metadata keeps them).
            self.acls = AclStore(
                first_dir,
                self.log_manager.fs,
                super_users=self.config.super_users,
                allow_everyone_if_no_acl_found=self.config.allow_everyone_if_no_acl_found,
            )
            quota_store = QuotaStore(first_dir, self.log_manager.fs)
        # On the event loop's clock (read only by the connections and the accept path, in the
        # loop; not here, in a worker thread): a throttled client's allowance comes back on the
        # clock its connection is muted by, a MockClock's in tests.
        self.quotas = ClientQuotas(
            quota_store,
            window_s=self.config.quota_window_size_seconds,
            windows=self.config.quota_window_num,
            clock=trio.current_time,
            on_throttle=self.metrics.server.quota_recorded,
        )
        self.topics.adopt_loaded_partitions()
        # Ids found in the logs count as handed out, even if the block file was lost: they are
        # accepted from their producers and never handed out again.
        seen = max(
            (max(log.producer_state_manager.producers, default=-1) for log in self.log_manager.all_logs().values()),
            default=-1,
        )
        self.producer_ids.load(seen + 1)

    async def _drain_connections(self) -> None:
        """Idle connections close now; those in the middle of a request finish it first."""
        for connection, scope in list(self._connections.items()):
            if not connection.busy:
                scope.cancel()
        with trio.move_on_after(SHUTDOWN_GRACE_S):
            while self._connections:
                await trio.sleep(0.01)

    async def _accept_loop(
        self, listener: trio.SocketListener, connections: trio.Nursery, kafka: bool, endpoint: Endpoint
    ) -> None:
        """Accept while fewer than max.connections are open. At the limit nothing is accepted:
        new connections wait in the kernel's listen backlog, holding no descriptor of ours, until
        one closes (Kafka's acceptor blocks the same way). Out of descriptors (EMFILE) or memory,
        accept waits a little and tries again: the listener is never lost to it."""
        slots = self._connection_slots
        async with listener:
            if self.config.max_connection_creation_rate == 0:  # Kafka's 0: no connection is accepted
                await trio.sleep_forever()
            while True:
                if slots.value == 0 and not self.accept_paused:
                    self.accept_paused = True
                    logger.warning(
                        "accept_paused",
                        limit="max.connections",
                        value=self.config.max_connections,
                        open_connections=len(self._connections),
                    )
                await slots.acquire()
                if self.accept_paused:
                    self.accept_paused = False
                    logger.info("accept_resumed", open_connections=len(self._connections))
                try:
                    stream = await listener.accept()
                except OSError as exc:
                    slots.release()
                    if exc.errno not in ACCEPT_CAPACITY_ERRNOS:
                        raise
                    logger.error(
                        "accept_failed",
                        error=errno.errorcode.get(exc.errno, str(exc.errno)),
                        message=os.strerror(exc.errno),
                        retry_s=ACCEPT_RETRY_S,
                    )
                    self.metrics.server.accept_error(errno.errorcode.get(exc.errno, str(exc.errno)))
                    await trio.sleep(ACCEPT_RETRY_S)
                    continue
                except BaseException:
                    slots.release()
                    raise
                try:
                    await self._throttle_accept()
                except BaseException:  # the broker stops meanwhile
                    slots.release()
                    with trio.CancelScope(shield=True):
                        await stream.aclose()
                    raise
                connections.start_soon(self._serve_connection, stream, kafka, endpoint)

    async def _throttle_accept(self) -> None:
        """max.connection.creation.rate, as Kafka's acceptor enforces it: over the rate, the
        connection just accepted waits (and with it the listener: the next ones wait in the
        backlog) until the rate allows it; it is not refused (an IP's connection_creation_rate
        quota refuses)."""
        bucket = self._accept_rate
        if bucket is None:
            return
        delay = bucket.spend(1, trio.current_time())
        if delay > 0:
            self.metrics.server.accept_throttled(delay)
            await trio.sleep(delay)

    async def _serve_connection(self, stream: trio.SocketStream, kafka: bool, endpoint: Endpoint) -> None:
        """Serve one accepted connection; it holds one of the max.connections slots (shared by
        both listeners, as Kafka's broker-wide limit is) until closed."""
        try:
            await self._serve_accepted(stream, kafka, endpoint)
        finally:
            self._connection_slots.release()

    async def _serve_accepted(self, stream: trio.SocketStream, kafka: bool, endpoint: Endpoint) -> None:
        try:
            host, port = stream.socket.getpeername()[:2]
        except OSError:  # reset before we looked
            with trio.CancelScope(shield=True):
                await stream.aclose()
            return
        peer = f"{host}:{port}"
        config = self.config
        # The limit a connection is refused for, and what its WARNING says besides (None: not refused).
        refusal: tuple[str, dict[str, int]] | None = None
        if self._per_ip.get(host, 0) >= config.max_connections_per_ip:
            # Kafka closes connections over the per-IP limit at once.
            refusal = "max.connections.per.ip", {"value": config.max_connections_per_ip}
        elif self.quotas is not None and self.quotas.connection_rate_exceeded(host):
            # Kafka's connection_creation_rate of an IP entity: a connection over it is closed.
            self._refused_by_rate += 1
            refusal = "connection_creation_rate", {"refused": self._refused_by_rate}
        if refusal is not None:
            limit, details = refusal
            if details.get("refused", 1) % 1000 == 1:  # a flood logs 1 line in 1000
                logger.warning("connection_refused", peer=peer, limit=limit, **details)
            self.metrics.server.connection_refused(limit)
            with trio.CancelScope(shield=True):
                await stream.aclose()
            return
        handler = self.handler
        assert handler is not None  # made before the first accept (run)
        idle_ms = config.connections_max_idle_ms
        receive_ms = config.request_receive_timeout_ms
        tls = uses_tls(endpoint)
        sasl = None
        if uses_sasl(endpoint):
            assert self.credentials is not None  # loaded with the storage, before any listener opens
            sasl = SaslServerSession(
                offered_mechanisms(config.sasl_enabled_mechanisms, tls),
                self.credentials,
                max_reauth_ms=config.connections_max_reauth_ms,
            )
        if kafka:
            assert self.kafka_context is not None  # set (run) before the first accept, as there is a Kafka listener
            codec: Codec = KafkaCodec(self.kafka_context, self.request_limits)
        else:
            codec = MsgpackCodec(self.request_limits)
        connection = ClientConnection(
            stream,
            handler,
            codec=codec,
            max_frame_bytes=config.socket_request_max_bytes,
            idle_timeout_s=idle_ms / 1000 if idle_ms >= 0 else math.inf,
            receive_timeout_s=receive_ms / 1000 if receive_ms >= 0 else math.inf,
            peer=peer,
            stats=self.metrics.server,
            pool=self.request_pool,
            limits=self.request_limits,
            decode_limiter=self.decode_limiter,
            wrong_protocol_log=self.wrong_protocol_log,
            listener="kafka.listeners" if kafka else "listeners",
            security_protocol=endpoint.scheme,
            quotas=self.quotas,
            sasl=sasl,
            # SASL's settings (used only with a session)
            auth_failure_delay_s=config.connection_failed_authentication_delay_ms / 1000,
            sasl_max_frame_bytes=config.sasl_server_max_receive_size,
            auth_limiter=self.auth_limiter,
            # A TLS listener's connection handshakes first thing in serve(), under its time limits.
            ssl_context=self.ssl_context if tls else None,
            principal_rules=config.ssl_principal_mapping_rules if tls else None,
        )
        self._per_ip[host] = self._per_ip.get(host, 0) + 1
        self.metrics.server.connection_opened()
        # Opening and closing are routine (every CLI call, every client): DEBUG, one event each.
        logger.debug("connection_opened", peer=peer)
        broken: str | None = None
        try:
            with trio.CancelScope() as scope:
                self._connections[connection] = scope
                await connection.serve(self._shutdown)
        except (trio.BrokenResourceError, trio.ClosedResourceError, ConnectionError) as exc:
            broken = str(exc)
        except Exception:
            logger.exception("connection_failed", peer=peer)
        finally:
            self._connections.pop(connection, None)
            self.metrics.server.connection_closed()
            self._per_ip[host] -= 1
            if not self._per_ip[host]:
                del self._per_ip[host]
            connection.close_tls()
            with trio.CancelScope(shield=True):
                await stream.aclose()
            if broken is None:
                logger.debug("connection_closed", peer=peer)
            else:
                logger.debug("connection_closed", peer=peer, error=broken)

    # -- background work ---------------------------------------------------------------------

    def _on_roll(self, log: Log, reason: str) -> None:
        """Kafka flushes a rolled segment asynchronously: do it now, off the event loop."""
        logger.info(
            "segment_rolled",
            topic=log.topic,
            partition=log.partition,
            reason=reason,
            base_offset=log.active_segment.base_offset,
        )
        if self._nursery is not None:
            self._nursery.start_soon(partial(self.workers.run_sync, log.flush_pending, limiter=self.limiter))

    def _periodic_tasks(self):
        config = self.config
        lm = self.log_manager
        return [
            # Kafka's kafka-log-retention task: first run after log.initial.task.delay.ms.
            partial(
                self._every,
                config.log_retention_check_interval_ms,
                self._retention,
                initial_delay_ms=config.log_initial_task_delay_ms,
            ),
            partial(self._every, SEGMENT_DELETE_CHECK_INTERVAL_MS, lm.segment_deleter.run_due),
            partial(
                self._every, min(config.log_flush_scheduler_interval_ms, FLUSH_CHECK_INTERVAL_MS), lm.flush_pending
            ),
            partial(self._every, config.log_flush_offset_checkpoint_interval_ms, lm.checkpoint_recovery_points),
            partial(self._every, config.log_flush_start_offset_checkpoint_interval_ms, lm.checkpoint_log_start_offsets),
            partial(self._every, config.replica_high_watermark_checkpoint_interval_ms, lm.checkpoint_high_watermarks),
            # Kafka's per-log producerExpireCheck.
            partial(self._every, config.producer_id_expiration_check_interval_ms, self._expire_producers),
        ]

    def _retention(self) -> None:
        deleted = self.log_manager.cleanup_logs()
        if deleted:
            logger.info("retention_deleted_segments", task="kafka-log-retention", segments=deleted)

    def _expire_producers(self) -> None:
        removed = self.log_manager.remove_expired_producers()
        if removed:
            logger.info("producer_ids_expired", producers=removed)

    async def _every(self, interval_ms: int, work, *, initial_delay_ms: int | None = None) -> None:
        delay_ms = interval_ms if initial_delay_ms is None else initial_delay_ms
        while True:
            await trio.sleep(delay_ms / 1000)
            delay_ms = interval_ms
            try:
                await self.workers.run_sync(work, limiter=self.limiter)
            except Exception:
                logger.exception("background_task_failed", task=getattr(work, "__name__", str(work)))


def raise_open_file_limit() -> tuple[int, int, int]:
    """Raise the soft RLIMIT_NOFILE to the hard limit: (soft before, soft now, hard).

    Each partition holds three descriptors (log, index, time index), each connection one, each
    fetch in flight one per partition it sends from; the usual soft default of 1024 runs out
    long before the hard limit does. An unlimited hard limit is capped at the kernel's nr_open.
    """
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard
    if target == resource.RLIM_INFINITY:
        try:
            with open("/proc/sys/fs/nr_open") as f:
                target = int(f.read())
        except (OSError, ValueError):
            target = 1 << 20
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError) as exc:
            logger.warning("open_file_limit_not_raised", soft=soft, hard=hard, error=str(exc))
    now = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    logger.info("open_file_limit", soft_before=soft, soft=now, hard=hard)
    return soft, now, hard


def exposure_warnings(config: BrokerConfig) -> list[dict]:
    """One warning per listener reachable from other hosts (not bound to loopback) that lets any
    client in (no SASL, no required client certificate) or lets every authenticated client do
    everything (no authorizer); and for the metrics endpoint, which has no authentication at all
    and names every topic."""
    out = []
    for key, endpoint in (("listeners", config.listener), ("kafka.listeners", config.kafka_listener)):
        if endpoint is None or _is_loopback(endpoint.host):
            continue
        if not (uses_sasl(endpoint) or (uses_tls(endpoint) and config.ssl_client_auth == "required")):
            out.append(
                {
                    "key": key,
                    "listener": str(endpoint),
                    "hint": "any client that reaches this address may read, write and delete every topic: use a "
                    "SASL_SSL listener (or SSL with ssl.client.auth=required) and authorizer.class.name, "
                    "or bind it to 127.0.0.1",
                }
            )
        elif not config.authorizer_enabled:
            out.append(
                {
                    "key": key,
                    "listener": str(endpoint),
                    "hint": "clients must authenticate, but no authorizer is configured: every one that does may "
                    "do everything, other users' credentials included; set authorizer.class.name",
                }
            )
    metrics = config.metrics_listener
    if metrics is not None and not _is_loopback(metrics.host):
        out.append(
            {
                "key": "metrics.listener",
                "listener": str(metrics),
                "hint": "/metrics has no authentication and names every topic: bind it to 127.0.0.1, or put it "
                "behind a proxy that authenticates, or restrict the port with a firewall",
            }
        )
    return out


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # "" (every interface) or a name: reachable, as far as we can tell


async def _open_listeners(listen, key: str) -> list[trio.SocketListener]:
    try:
        return await trio.open_tcp_listeners(listen.port, host=listen.bind_host)
    except OSError as exc:
        raise StartupError(
            f"cannot listen on {listen.bind_host or '0.0.0.0'}:{listen.port} ({key}): {_describe_os_error(exc)}"
        ) from exc


async def serve(config: BrokerConfig) -> None:
    """Run the broker until SIGTERM or SIGINT, then shut down gracefully."""
    raise_open_file_limit()
    server = BrokerServer(config, freeze_gc=True)
    async with trio.open_nursery() as nursery:
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            nursery.start_soon(server.run)

            async def watch() -> None:
                async for signum in signals:
                    logger.info("signal_received", signal=signal.Signals(signum).name)
                    server.shutdown()
                    return

            nursery.start_soon(watch)
            dumps = trio.CancelScope()

            async def dump_tasks() -> None:
                with dumps:
                    await dump_tasks_on_signal()

            nursery.start_soon(dump_tasks)
            await server._shutdown.wait()
            dumps.cancel()
