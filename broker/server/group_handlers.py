"""The consumer-group APIs of the request handler (find_coordinator, join_group, ... delete_groups),
and :class:`GroupService`, which runs the pure :class:`GroupCoordinator` inside the broker.

:class:`GroupApis` serves them for the request handler (which is given one), so that the group
coordinator's wiring lives beside, not inside, the log APIs. A JoinGroup or SyncGroup the
coordinator parks is a callback here that sets a trio Event the request waits on. Until the
service runs, every group API answers COORDINATOR_NOT_AVAILABLE, Kafka's answer while no
coordinator serves the group.

GroupService owns the coordinator's contact with the rest of the broker:

* ``__consumer_offsets`` is created on first use (as Kafka creates it on the first
  FindCoordinator), compacted, ``offsets.topic.num.partitions`` partitions; when it exists at
  startup its partitions are loaded (worker threads) while the broker already serves: their
  groups answer COORDINATOR_LOAD_IN_PROGRESS meanwhile;
* writes: one batch per request, appended in order per partition and answered once durable
  (fsynced, or on a cluster in the in-sync replicas), within offsets.commit.timeout.ms, by the
  :class:`~.coordinator_topic.CoordinatorRecordWriter` every coordinator's topic shares;
* a timer task fires the coordinator's deadlines (joins, syncs, sessions);
* the offsets-expiry task runs every offsets.retention.check.interval.ms.
"""

from __future__ import annotations

import dataclasses
import time

import structlog
import trio

from triolog.broker.coordinator.group.group_coordinator import (
    CommitRequest,
    Error,
    GroupConfig,
    GroupCoordinator,
    JoinResult,
    SyncResult,
)
from triolog.broker.coordinator.group.group_metadata_manager import (
    OFFSETS_TOPIC,
    LoadedPartition,
    read_partition_records,
)
from triolog.broker.security.acl import ResourceType
from triolog.protocol import messages as m
from triolog.protocol.errors import ErrorCode

from .authorization import CLUSTER, Op, RequestAuthorizer
from .coordinator_topic import CoordinatorRecordWriter, CoordinatorService, CoordinatorTopic
from .request_context import RequestContext, parked

logger = structlog.get_logger("triolog.server")

_NOT_AVAILABLE = "the group coordinator is not available on this broker"
#: How long a __consumer_offsets partition that could not be read waits before it is read again.
#: Longest the timer task sleeps without looking at the coordinator's deadlines.
TIMER_MAX_S = 0.5


def offsets_topic(config) -> CoordinatorTopic:
    """__consumer_offsets as the broker config sizes it."""
    return CoordinatorTopic(
        name=OFFSETS_TOPIC,
        num_partitions=config.offsets_topic_num_partitions,
        replication_factor=config.offsets_topic_replication_factor,
        segment_bytes=config.offsets_topic_segment_bytes,
        commit_timeout_ms=config.offsets_commit_timeout_ms,
        replication_factor_key="offsets.topic.replication.factor",
        commit_timeout_key="offsets.commit.timeout.ms",
    )


class GroupService(CoordinatorService):
    """The group coordinator inside the running broker (see the module docstring)."""

    what = "groups"

    def __init__(self, config, topics, committer, notifier, workers, limiter, clock, cluster=None):
        super().__init__(offsets_topic(config), topics, workers, limiter, cluster)
        self.config = config
        self.committer = committer
        self.notifier = notifier
        self.clock = clock
        self.coordinator: GroupCoordinator | None = None
        self._wake = trio.Event()
        self.writer = CoordinatorRecordWriter(
            offsets_topic(config), topics, committer, notifier, workers, limiter, clock, cluster, _NOT_AVAILABLE
        )

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        token = trio.lowlevel.current_trio_token()

        def topic_deleted(name: str) -> None:  # from the thread that deleted it
            try:
                token.run_sync_soon(self._topic_deleted, name)
            except trio.RunFinishedError:
                pass

        self.topics.on_deleted.append(topic_deleted)
        try:
            async with trio.open_nursery() as nursery:
                self.writer.start(nursery)
                nursery.start_soon(self._timer_task)
                nursery.start_soon(self._expiry_task)
                self._start_in(nursery)
                task_status.started()
        finally:
            self.topics.on_deleted.remove(topic_deleted)

    def _topic_deleted(self, name: str) -> None:
        """Kafka's onPartitionsDeleted: the groups' offsets of a deleted topic go (tombstones)."""
        if self.coordinator is not None:
            removed = self.coordinator.cleanup_group_metadata(deleted_topic=name)
            if removed:
                logger.info("offsets_of_deleted_topic_removed", topic=name, offsets=removed)

    def shutdown(self) -> None:
        if self.coordinator is not None:
            self.coordinator.shutdown()

    # -- CoordinatorService's hooks ----------------------------------------------------------

    def _start_coordinator(self, existing: bool) -> GroupCoordinator:
        cluster = self.cluster
        if cluster is not None:
            partitions = cluster.topic_partitions()
            assert partitions is not None
        else:
            partitions = self.topics.get(OFFSETS_TOPIC).num_partitions
        group_config = GroupConfig.from_broker_config(self.config)
        group_config = GroupConfig(**{**group_config.__dict__, "num_partitions": partitions})
        coordinator = GroupCoordinator(group_config, self.clock, self.writer.store, lambda: self._wake.set())
        if cluster is not None:  # no group until a partition's leadership brings its groups
            coordinator.startup((), owned=())
            assert self._nursery is not None
            self._nursery.start_soon(cluster.follow, coordinator, self._load_led)
        else:
            coordinator.startup(range(partitions) if existing else ())
        self.coordinator = coordinator
        self._wake.set()
        return coordinator

    def _local_partitions(self, coordinator: GroupCoordinator) -> list[int]:
        return list(coordinator.loading)

    def _replay(self, log) -> LoadedPartition:
        loaded = LoadedPartition()
        loaded.replay(read_partition_records(log, self.config.offsets_load_buffer_size))
        return loaded

    def _load_partition(self, coordinator: GroupCoordinator, partition: int, epoch: int, loaded) -> int:
        return coordinator.load_partition(partition, loaded)

    def _create_local_topic(self) -> None:
        if self.topics.get(OFFSETS_TOPIC) is None:
            self.topics.create_offsets_topic(
                self.config.offsets_topic_num_partitions, self.config.offsets_topic_segment_bytes
            )
            logger.info(
                "topic_created", topic=OFFSETS_TOPIC, partitions=self.config.offsets_topic_num_partitions, internal=True
            )

    # -- background tasks --------------------------------------------------------------------

    async def _timer_task(self) -> None:
        while True:
            self._wake = trio.Event()
            delay = TIMER_MAX_S
            if self.coordinator is not None:
                deadline = self.coordinator.poll()
                if deadline is not None:
                    delay = min(delay, max(0.0, (deadline - self.clock.milliseconds()) / 1000))
            with trio.move_on_after(delay):
                await self._wake.wait()

    async def _expiry_task(self) -> None:
        interval = self.config.offsets_retention_check_interval_ms / 1000
        while True:
            await trio.sleep(interval)
            if self.coordinator is not None:
                try:
                    expired = self.coordinator.cleanup_group_metadata()
                    if expired:
                        logger.info("offsets_expired", offsets=expired)
                except Exception:
                    logger.exception("background_task_failed", task="offsets_expiry")


def _denied_group(ctx: RequestContext, operation: Op, group_id: str) -> dict:
    return {
        "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED,
        "error_message": f"{ctx.principal} is not authorized to {operation.name.lower()} group {group_id!r}",
    }


def _fields(error: Error | None) -> dict:
    if error is None:
        return {}
    return {"error_code": error.code, "error_message": error.message}


class GroupApis:
    """The group APIs of the request handler, over the running coordinator (``service``)."""

    def __init__(
        self,
        *,
        config,
        topics,
        authz: RequestAuthorizer,
        service: GroupService | None,
        advertised_host: str,
        advertised_port: int,
        metrics=None,
    ):
        self.config = config
        self.topics = topics
        self.authz = authz
        #: None: no coordinator runs on this broker (every group API answers COORDINATOR_NOT_AVAILABLE).
        self.service = service
        self.advertised_host = advertised_host
        self.advertised_port = advertised_port
        #: The broker's GroupMetrics (commit latency), when metered.
        self.metrics = metrics

    async def _coordinator(self, create: bool = True) -> GroupCoordinator | None:
        service = self.service
        if service is None:
            return None
        if create:
            return await service.ready()
        return service.coordinator

    async def find_coordinator(self, request: m.FindCoordinatorRequest, ctx: RequestContext) -> m.Response:
        if not self.authz.group(ctx, Op.DESCRIBE, request.key):
            return m.FindCoordinatorResponse(id=request.id, **_denied_group(ctx, Op.DESCRIBE, request.key))
        coordinator = await self._coordinator()
        if coordinator is None or not coordinator.active:
            return m.FindCoordinatorResponse(
                id=request.id, error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE, error_message=_NOT_AVAILABLE
            )
        cluster = self.service.cluster if self.service is not None else None
        if cluster is not None:  # the leader of the group's __consumer_offsets partition
            partition = coordinator.partition_for(request.key)
            found = cluster.coordinator_of(partition, kafka_listener=ctx.listener == "kafka.listeners")
            if found is None:
                return m.FindCoordinatorResponse(
                    id=request.id,
                    error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE,
                    error_message=f"{OFFSETS_TOPIC} partition {partition} of group {request.key!r} has no leader now",
                )
            node_id, host, port = found
            return m.FindCoordinatorResponse(id=request.id, node_id=node_id, host=host, port=port)
        return m.FindCoordinatorResponse(
            id=request.id, node_id=self.config.node_id, host=self.advertised_host, port=self.advertised_port
        )

    async def join_group(self, request: m.JoinGroupRequest, ctx: RequestContext) -> m.Response:
        if not self.authz.group(ctx, Op.READ, request.group_id):
            return m.JoinGroupResponse(
                id=request.id, member_id=request.member_id, **_denied_group(ctx, Op.READ, request.group_id)
            )
        coordinator = await self._coordinator()
        if coordinator is None:
            return m.JoinGroupResponse(
                id=request.id,
                error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE,
                error_message=_NOT_AVAILABLE,
                member_id=request.member_id,
            )
        protocols = tuple((p.name, p.metadata) for p in request.protocols)
        result: JoinResult = await parked(
            ctx,
            lambda respond: coordinator.handle_join_group(
                request.group_id,
                request.member_id,
                request.group_instance_id,
                request.client_id or "",
                ctx.client_host,
                request.rebalance_timeout_ms,
                request.session_timeout_ms,
                request.protocol_type,
                protocols,
                respond,
            ),
        )
        return m.JoinGroupResponse(
            id=request.id,
            error_code=result.error_code,
            error_message=result.error_message,
            generation_id=result.generation_id,
            protocol_type=result.protocol_type,
            protocol_name=result.protocol_name,
            leader=result.leader,
            member_id=result.member_id,
            members=tuple(
                m.JoinGroupMember(member_id=mid, group_instance_id=iid, metadata=meta)
                for mid, iid, meta in result.members
            ),
        )

    async def sync_group(self, request: m.SyncGroupRequest, ctx: RequestContext) -> m.Response:
        if not self.authz.group(ctx, Op.READ, request.group_id):
            return m.SyncGroupResponse(id=request.id, **_denied_group(ctx, Op.READ, request.group_id))
        coordinator = await self._coordinator()
        if coordinator is None:
            return m.SyncGroupResponse(
                id=request.id, error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE, error_message=_NOT_AVAILABLE
            )
        assignments = {a.member_id: a.assignment for a in request.assignments}
        result: SyncResult = await parked(
            ctx,
            lambda respond: coordinator.handle_sync_group(
                request.group_id,
                request.generation_id,
                request.member_id,
                request.protocol_type,
                request.protocol_name,
                assignments,
                respond,
            ),
        )
        return m.SyncGroupResponse(
            id=request.id,
            error_code=result.error_code,
            error_message=result.error_message,
            protocol_type=result.protocol_type,
            protocol_name=result.protocol_name,
            assignment=result.assignment,
        )

    async def heartbeat(self, request: m.HeartbeatRequest, ctx: RequestContext) -> m.Response:
        if not self.authz.group(ctx, Op.READ, request.group_id):
            return m.HeartbeatResponse(id=request.id, **_denied_group(ctx, Op.READ, request.group_id))
        coordinator = await self._coordinator()
        if coordinator is None:
            return m.HeartbeatResponse(
                id=request.id, error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE, error_message=_NOT_AVAILABLE
            )
        error = coordinator.handle_heartbeat(request.group_id, request.generation_id, request.member_id)
        return m.HeartbeatResponse(id=request.id, **_fields(error))

    async def leave_group(self, request: m.LeaveGroupRequest, ctx: RequestContext) -> m.Response:
        if not self.authz.group(ctx, Op.READ, request.group_id):
            return m.LeaveGroupResponse(id=request.id, **_denied_group(ctx, Op.READ, request.group_id))
        coordinator = await self._coordinator()
        if coordinator is None:
            return m.LeaveGroupResponse(
                id=request.id, error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE, error_message=_NOT_AVAILABLE
            )
        error, per_member = coordinator.handle_leave_group(request.group_id, [x.member_id for x in request.members])
        members = tuple(
            m.MemberResponse(member_id=x.member_id, group_instance_id=x.group_instance_id, **_fields(e))
            for x, e in zip(request.members, per_member)
        )
        return m.LeaveGroupResponse(id=request.id, members=members, **_fields(error))

    async def offset_commit(self, request: m.OffsetCommitRequest, ctx: RequestContext) -> m.Response:
        started = time.perf_counter()

        def start(coordinator: GroupCoordinator, commits: list[CommitRequest], respond) -> None:
            coordinator.handle_commit_offsets(
                request.group_id, request.generation_id, request.member_id, commits, respond
            )

        topics = await self._commit(request, ctx, None, start)
        if self.metrics is not None:
            self.metrics.commit_done(time.perf_counter() - started)
        return m.OffsetCommitResponse(id=request.id, topics=topics)

    async def txn_offset_commit(self, request: m.TxnOffsetCommitRequest, ctx: RequestContext) -> m.Response:
        """The offsets of a consume-transform-produce transaction (Kafka's TxnOffsetCommit): written
        in the producer's name, the group's once its COMMIT marker reaches the group's partition."""
        denied = None
        if not self.authz.transactional_id(ctx, Op.WRITE, request.transactional_id):
            denied = Error(
                ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                f"{ctx.principal} is not authorized to write transactional id {request.transactional_id!r}",
            )
        producer = (request.producer_id, request.producer_epoch)

        def start(coordinator: GroupCoordinator, commits: list[CommitRequest], respond) -> None:
            coordinator.handle_txn_commit_offsets(
                request.group_id, producer, request.generation_id, request.member_id, commits, respond
            )

        topics = await self._commit(request, ctx, denied, start)
        return m.TxnOffsetCommitResponse(id=request.id, topics=topics)

    def txn_completed(self, producer_id: int, partitions: list[int], committed: bool) -> None:
        """A producer's marker reached these __consumer_offsets partitions: its transactional
        offsets there become the groups' (committed) or are dropped (aborted)."""
        service = self.service
        coordinator = None if service is None else service.coordinator
        if coordinator is not None:
            coordinator.handle_txn_completion(producer_id, partitions, committed)

    async def _commit(
        self,
        request: m.OffsetCommitRequest | m.TxnOffsetCommitRequest,
        ctx: RequestContext,
        denied: Error | None,
        start,
    ) -> tuple[m.OffsetCommitTopicResult, ...]:
        """An offset commit's answer per partition: the group's refusal for all of them, else the
        topic's for each (authorization, existence), else what the coordinator's commit answers
        (``start(coordinator, commits, respond)``)."""

        def for_all(error: Error) -> tuple[m.OffsetCommitTopicResult, ...]:
            # Group-level errors go to every partition, as Kafka's OffsetCommit answers them.
            return tuple(
                m.OffsetCommitTopicResult(
                    name=t.name,
                    partitions=tuple(
                        m.OffsetCommitPartitionResult(partition=p.partition, **_fields(error)) for p in t.partitions
                    ),
                )
                for t in request.topics
            )

        if denied is not None:
            return for_all(denied)
        if not self.authz.group(ctx, Op.READ, request.group_id):
            denial = _denied_group(ctx, Op.READ, request.group_id)
            return for_all(Error(denial["error_code"], denial["error_message"]))
        coordinator = await self._coordinator()
        if coordinator is None:
            return for_all(Error(ErrorCode.COORDINATOR_NOT_AVAILABLE, _NOT_AVAILABLE))
        # Kafka refuses commits for partitions that do not exist (KafkaApis, before the coordinator).
        unknown: dict[tuple[str, int], Error] = {}
        commits = []
        for t in request.topics:
            topic = self.topics.get(t.name)
            readable = self.authz.topic(ctx, Op.READ, t.name)
            for p in t.partitions:
                if not readable:
                    unknown[(t.name, p.partition)] = Error(
                        ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                        f"{ctx.principal} is not authorized to read topic {t.name!r}",
                    )
                elif topic is None or not 0 <= p.partition < topic.num_partitions:
                    unknown[(t.name, p.partition)] = Error(
                        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                        f"topic {t.name!r} partition {p.partition} does not exist: no offset is committed for it",
                    )
                else:
                    commits.append(
                        CommitRequest(
                            t.name, p.partition, p.committed_offset, p.committed_leader_epoch, p.committed_metadata
                        )
                    )
        errors = await parked(ctx, lambda respond: start(coordinator, commits, respond)) if commits else []
        known = iter(errors)
        results = iter(
            [
                unknown[(t.name, p.partition)] if (t.name, p.partition) in unknown else next(known)
                for t in request.topics
                for p in t.partitions
            ]
        )
        return tuple(
            m.OffsetCommitTopicResult(
                name=t.name,
                partitions=tuple(
                    m.OffsetCommitPartitionResult(partition=p.partition, **_fields(next(results))) for p in t.partitions
                ),
            )
            for t in request.topics
        )

    async def offset_fetch(self, request: m.OffsetFetchRequest, ctx: RequestContext) -> m.Response:
        authz = self.authz
        if not authz.group(ctx, Op.DESCRIBE, request.group_id):
            return m.OffsetFetchResponse(id=request.id, **_denied_group(ctx, Op.DESCRIBE, request.group_id))
        coordinator = await self._coordinator()
        if coordinator is None:
            return m.OffsetFetchResponse(
                id=request.id, error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE, error_message=_NOT_AVAILABLE
            )
        wanted = None
        if request.topics is not None:
            wanted = [(t.name, p) for t in request.topics for p in t.partitions]
        error, rows = coordinator.handle_fetch_offsets(request.group_id, wanted)
        if error is not None:
            return m.OffsetFetchResponse(id=request.id, **_fields(error))
        # Kafka's require_stable (KIP-447): a consumer starting in an exactly-once pipeline must
        # not begin from an offset a pending transaction is about to replace.
        unstable = coordinator.unstable_offsets(request.group_id) if request.require_stable else set()
        by_topic: dict[str, list[m.OffsetFetchPartitionResult]] = {}
        describable: dict[str, bool] = {}
        for topic, partition, entry in rows:
            if topic not in describable:  # all of a group's offsets: only the topics it may describe
                describable[topic] = authz.topic(ctx, Op.DESCRIBE, topic, log=request.topics is not None)
            if not describable[topic]:
                if request.topics is not None:
                    by_topic.setdefault(topic, []).append(
                        m.OffsetFetchPartitionResult(
                            partition=partition,
                            metadata="",
                            error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                            error_message=f"{ctx.principal} is not authorized to describe topic {topic!r}",
                        )
                    )
                continue
            if (topic, partition) in unstable:
                by_topic.setdefault(topic, []).append(
                    m.OffsetFetchPartitionResult(
                        partition=partition,
                        metadata="",
                        error_code=ErrorCode.UNSTABLE_OFFSET_COMMIT,
                        error_message=f"a transaction's offset for {topic}-{partition} awaits its commit or abort; "
                        f"retry",
                    )
                )
                continue
            by_topic.setdefault(topic, []).append(
                m.OffsetFetchPartitionResult(partition=partition, metadata="")
                if entry is None
                else m.OffsetFetchPartitionResult(
                    partition=partition,
                    committed_offset=entry.offset,
                    committed_leader_epoch=entry.leader_epoch,
                    metadata=entry.metadata,
                )
            )
        return m.OffsetFetchResponse(
            id=request.id,
            topics=tuple(
                m.OffsetFetchTopicResult(name=name, partitions=tuple(parts)) for name, parts in by_topic.items()
            ),
        )

    async def list_groups(self, request: m.ListGroupsRequest, ctx: RequestContext) -> m.Response:
        coordinator = await self._coordinator(create=False)
        if coordinator is None:
            if self.service is None:
                return m.ListGroupsResponse(
                    id=request.id, error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE, error_message=_NOT_AVAILABLE
                )
            return m.ListGroupsResponse(id=request.id)  # no __consumer_offsets yet: no groups
        error, groups = coordinator.handle_list_groups(set(request.states_filter))
        # Those it may describe, unless it may describe the cluster.
        if not self.authz.allowed(ctx, Op.DESCRIBE, ResourceType.CLUSTER, CLUSTER, log=False):
            groups = [g for g in groups if self.authz.group(ctx, Op.DESCRIBE, g[0], log=False)]
        return m.ListGroupsResponse(
            id=request.id,
            groups=tuple(m.ListedGroup(group_id=g, protocol_type=t, group_state=s) for g, t, s in groups),
            **_fields(error),
        )

    async def describe_groups(self, request: m.DescribeGroupsRequest, ctx: RequestContext) -> m.Response:
        coordinator = await self._coordinator(create=False)
        out = []
        for group_id in request.groups:
            if not self.authz.group(ctx, Op.DESCRIBE, group_id):
                out.append(m.DescribedGroup(group_id=group_id, **_denied_group(ctx, Op.DESCRIBE, group_id)))
                continue
            if coordinator is None:
                if self.service is None:
                    out.append(
                        m.DescribedGroup(
                            group_id=group_id,
                            error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE,
                            error_message=_NOT_AVAILABLE,
                        )
                    )
                else:
                    out.append(m.DescribedGroup(group_id=group_id, group_state="Dead"))
                continue
            summary = coordinator.handle_describe_group(group_id)
            out.append(
                m.DescribedGroup(
                    group_id=group_id,
                    group_state=summary.state,
                    protocol_type=summary.protocol_type,
                    protocol_data=summary.protocol,
                    **_fields(summary.error),
                    members=tuple(
                        m.DescribedGroupMember(
                            member_id=s.member_id,
                            group_instance_id=s.group_instance_id,
                            client_id=s.client_id,
                            client_host=s.client_host,
                            member_metadata=s.metadata,
                            member_assignment=s.assignment,
                        )
                        for s in summary.members
                    ),
                )
            )
        return m.DescribeGroupsResponse(id=request.id, groups=tuple(out))

    async def delete_groups(self, request: m.DeleteGroupsRequest, ctx: RequestContext) -> m.DeleteGroupsResponse:
        denied = {
            g: _denied_group(ctx, Op.DELETE, g) for g in request.groups_names if not self.authz.group(ctx, Op.DELETE, g)
        }
        if denied:
            allowed = tuple(g for g in request.groups_names if g not in denied)
            answer = (
                await self.delete_groups(dataclasses.replace(request, groups_names=allowed), ctx) if allowed else None
            )
            results = {r.group_id: r for r in (answer.results if answer is not None else ())}
            return m.DeleteGroupsResponse(
                id=request.id,
                results=tuple(
                    results[g] if g in results else m.DeletableGroupResult(group_id=g, **denied[g])
                    for g in request.groups_names
                ),
            )
        coordinator = await self._coordinator(create=False)
        if coordinator is None:
            code = ErrorCode.COORDINATOR_NOT_AVAILABLE if self.service is None else ErrorCode.GROUP_ID_NOT_FOUND
            message = _NOT_AVAILABLE if self.service is None else "no group exists on this broker"
            return m.DeleteGroupsResponse(
                id=request.id,
                results=tuple(
                    m.DeletableGroupResult(group_id=g, error_code=code, error_message=message)
                    for g in request.groups_names
                ),
            )
        results = await parked(
            ctx, lambda respond: coordinator.handle_delete_groups(list(request.groups_names), respond)
        )
        return m.DeleteGroupsResponse(
            id=request.id,
            results=tuple(m.DeletableGroupResult(group_id=g, **_fields(results[g])) for g in request.groups_names),
        )
