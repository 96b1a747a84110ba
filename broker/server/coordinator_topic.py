"""A coordinator's internal topic: ``__consumer_offsets`` for the group coordinator (and, with the
same machinery, ``__transaction_state`` for the transaction coordinator).

Kafka's coordinators keep their state in a compacted topic of their own and coordinate the keys
of the partitions their broker leads. What is the same for every such coordinator lives here:

* :class:`CoordinatorTopic`: the topic as the broker's config sizes it;
* :class:`ClusterCoordinatorPartitions`: on a cluster, the topic is created through ZooKeeper
  with its replication factor (refused while fewer brokers are live, as Kafka refuses), a key's
  coordinator is the leader of its partition, which loads the partition when it becomes leader
  (Kafka's onElection) and drops it when it stops being one (onResignation);
* :class:`CoordinatorRecordWriter`: the coordinator's writes, appended in order per partition in
  a worker thread and answered once durable: on a single broker once fsynced (the group commit
  acks=all produce waits for), on a cluster once the in-sync replicas have them (as Kafka appends
  them with acks=all);
* :class:`CoordinatorService`: the coordinator inside the broker: its topic created on first
  use, loaded at startup or as leadership comes, with retries.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Protocol

import structlog
import trio

from triolog.broker.cluster.election import BrokerPlacement, assign_replicas
from triolog.broker.cluster.membership import TRIOLOG_LISTENER
from triolog.broker.cluster.metadata_store import NodeExistsError
from triolog.broker.cluster.replication import AcksAll
from triolog.broker.cluster.zk_data import TopicAssignment
from triolog.broker.storage.checkpoints import random_kafka_uuid
from triolog.broker.storage.log import Log, LogAppendInfo
from triolog.protocol.errors import ErrorCode
from triolog.protocol.records import build_batch

from .cluster_handlers import ClusterServices
from .error_mapping import ApiError, error_of

logger = structlog.get_logger("triolog.coordinators")

#: (error code, message) as a coordinator's store callback is answered; None: durable.
StoreFailure = tuple[int, str] | ApiError | None


@dataclass(frozen=True)
class CoordinatorTopic:
    """A coordinator's internal topic, sized by the broker config (``<prefix>.num.partitions``,
    ``.replication.factor``, ``.segment.bytes``; writes answered within ``commit_timeout_ms``)."""

    name: str
    num_partitions: int
    replication_factor: int
    segment_bytes: int
    commit_timeout_ms: int
    #: The config keys named in errors: the replication factor's and the write timeout's.
    replication_factor_key: str
    commit_timeout_key: str
    #: Topic configs beyond Kafka's compact/producer/segment.bytes (min.insync.replicas, ...).
    extra_configs: dict[str, str] = field(default_factory=dict)

    @property
    def configs(self) -> dict[str, str]:
        """The topic's configs, as Kafka creates its internal topics: compacted, compression as produced."""
        return {
            "cleanup.policy": "compact",
            "compression.type": "producer",
            "segment.bytes": str(self.segment_bytes),
            **self.extra_configs,
        }


class PartitionCoordinator(Protocol):
    """What :meth:`ClusterCoordinatorPartitions.follow` tells a coordinator."""

    def take_partition(self, partition: int) -> object: ...

    def release_partition(self, partition: int) -> object: ...


class ClusterCoordinatorPartitions:
    """The coordinator's topic on a cluster (see the module docstring)."""

    def __init__(self, config, topic: CoordinatorTopic, services: ClusterServices, notifier, what: str):
        self.config = config
        self.topic = topic
        self.services = services
        self.cache = services.cache
        self.replicas = services.replicas
        self.notifier = notifier
        #: What the coordinator coordinates, for the log lines ("groups", "transactions").
        self.what = what
        #: The partitions this broker leads, by leader epoch, as the coordinator was last told.
        self._led: dict[int, int] = {}

    # -- the topic -------------------------------------------------------------------------------

    def topic_partitions(self) -> int | None:
        """The topic's partition count, None while the cluster has no such topic."""
        assignment = self.cache.topics.get(self.topic.name)
        return None if assignment is None else len(assignment.partitions)

    async def create_topic(self) -> str | None:
        """Create the topic in ZooKeeper; None once it exists, else why it cannot yet (fewer live
        brokers than its replication factor: COORDINATOR_NOT_AVAILABLE)."""
        topic = self.topic
        if topic.name in self.cache.topics:
            return None
        rf = topic.replication_factor
        live = [BrokerPlacement(broker_id, reg.rack) for broker_id, reg in self.cache.brokers.items()]
        if len(live) < rf:
            return f"{topic.name} needs {topic.replication_factor_key}={rf} live brokers, the cluster has {len(live)}"
        placement = assign_replicas(live, topic.num_partitions, rf)
        assignment = TopicAssignment({p: tuple(r) for p, r in placement.items()}, topic_id=random_kafka_uuid())
        try:
            await self.services.membership.zk.create_topic(topic.name, assignment, topic.configs)
            logger.info("topic_created", topic=topic.name, partitions=topic.num_partitions, replication_factor=rf)
        except NodeExistsError:
            pass  # another broker made it first
        generation = self.cache.generation
        with trio.move_on_after(30):
            while topic.name not in self.cache.topics:
                generation = await self.cache.wait_changed(generation)
        return None

    def coordinator_of(self, partition: int, kafka_listener: bool) -> tuple[int, str, int] | None:
        """The coordinator of a key of ``partition``: the partition's leader, at its address on
        the listener asked (node id, host, port); None while the partition has no leader."""
        view = self.cache.partition(self.topic.name, partition)
        if view is None or not view.online:
            return None
        registration = self.cache.brokers.get(view.leader)
        kafka = self.config.kafka_listener
        name = kafka.scheme if kafka_listener and kafka is not None else TRIOLOG_LISTENER
        endpoint = None if registration is None else registration.endpoint(name)
        return None if endpoint is None else (view.leader, endpoint.host, endpoint.port)

    # -- leadership ------------------------------------------------------------------------------

    def led_partitions(self) -> dict[int, int]:
        """The topic's partitions this broker leads now, and their leader epochs."""
        return {
            partition: hosted.leader_epoch
            for (topic, partition), hosted in self.replicas.hosted.items()
            if topic == self.topic.name and hosted.leadership is not None
        }

    async def follow(self, coordinator: PartitionCoordinator, load: Callable[[int, int], None]) -> None:
        """Tell the coordinator of every leadership this broker gains or loses; ``load(partition,
        epoch)`` starts loading a gained partition."""
        while True:
            seen = self.replicas.generation
            led = self.led_partitions()
            for partition in sorted(set(self._led) - set(led)):
                dropped = coordinator.release_partition(partition)
                logger.info(
                    "coordinator_partition_unloaded", topic=self.topic.name, partition=partition, **{self.what: dropped}
                )
            for partition, epoch in sorted(led.items()):
                if self._led.get(partition) != epoch:
                    if partition in self._led:  # a new term of ours: what the last one loaded may be stale
                        coordinator.release_partition(partition)
                    coordinator.take_partition(partition)
                    load(partition, epoch)
            self._led = led
            await self.replicas.wait_changed(seen)

    def still_leads(self, partition: int, epoch: int) -> bool:
        return self._led.get(partition) == epoch

    # -- writes ----------------------------------------------------------------------------------

    def leader_log(self, partition: int) -> tuple[Log, int]:
        """The partition's log and leader epoch (NOT_LEADER_OR_FOLLOWER if this broker lost it)."""
        hosted = self.replicas.leader_partition(self.topic.name, partition)
        return hosted.log, hosted.leader_epoch

    async def wait_committed(
        self, partition: int, info: LogAppendInfo, leader_epoch: int, timeout_s: float
    ) -> tuple[int, str] | None:
        """Until the in-sync replicas have the records appended in ``leader_epoch`` (None), or why
        not: the error a coordinator request answers (NOT_COORDINATOR when leadership moved, as
        Kafka maps it)."""
        name = self.topic.name
        key = (name, partition)
        required = info.last_offset + 1
        deadline = trio.current_time() + timeout_s
        while True:
            event = self.notifier.register([key])
            try:
                status = self.replicas.acks_all_status(name, partition, required, leader_epoch)
                if status is AcksAll.DONE:
                    return None
                if status is None:
                    return (
                        ErrorCode.NOT_COORDINATOR,
                        f"leadership of {name}-{partition} moved before the write was committed",
                    )
                if status is AcksAll.NOT_ENOUGH_REPLICAS_AFTER_APPEND:
                    return (
                        ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
                        f"the ISR of {name}-{partition} fell below min.insync.replicas",
                    )
                if trio.current_time() >= deadline or self.notifier.closed:
                    return (
                        ErrorCode.REQUEST_TIMED_OUT,
                        f"the {name} record was not committed by the in-sync replicas within "
                        f"{self.topic.commit_timeout_key}={round(timeout_s * 1000)}",
                    )
                with trio.move_on_at(deadline):
                    await event.wait()
            finally:
                self.notifier.unregister([key], event)


class CoordinatorRecordWriter:
    """The coordinator's ``store(partition, records, done)``: each call's (key, value) records
    become one batch, appended in the order of the calls per partition (one writer task per
    partition: a task per store could be scheduled out of order), and ``done(failure,
    base_offset)`` is called once they are durable (failure None) or cannot be. With
    ``producer=(id, epoch)`` the batch is that producer's, transactional (a TxnOffsetCommit's
    offsets, decided by the producer's marker), with sequence 0 as Kafka's coordinator writes it."""

    def __init__(
        self,
        topic: CoordinatorTopic,
        topics,
        committer,
        notifier,
        workers,
        limiter,
        clock,
        cluster: ClusterCoordinatorPartitions | None,
        not_available: str,
    ):
        self.topic = topic
        self.topics = topics
        self.committer = committer
        self.notifier = notifier
        self.workers = workers
        self.limiter = limiter
        self.clock = clock
        self.cluster = cluster
        self._not_available = not_available
        self._nursery: trio.Nursery | None = None
        self._queues: dict[int, list] = {}
        self._queue_ready: dict[int, trio.Event] = {}

    def start(self, nursery: trio.Nursery) -> None:
        """Write in ``nursery`` from now on (the writers of an earlier one are gone)."""
        self._nursery = nursery
        self._queues, self._queue_ready = {}, {}

    def store(self, partition: int, records, done, producer: tuple[int, int] | None = None) -> None:
        if self._nursery is None:
            done((ErrorCode.COORDINATOR_NOT_AVAILABLE, self._not_available), -1)
            return
        queue = self._queues.get(partition)
        if queue is None:
            queue = self._queues[partition] = []
            self._queue_ready[partition] = trio.Event()
            self._nursery.start_soon(self._writer, partition, queue)
        queue.append((records, done, producer))  # synchronously: the order of the calls is the order in the log
        self._queue_ready[partition].set()

    async def _writer(self, partition: int, queue: list) -> None:
        while True:
            if not queue:
                self._queue_ready[partition] = trio.Event()
                await self._queue_ready[partition].wait()
                continue
            records, done, producer = queue.pop(0)
            await self._append(partition, records, done, producer)

    def _storage_error(self, exc: BaseException) -> ApiError:
        name = self.topic.name
        return error_of(exc, io_error=f"I/O error writing {name}", topic=name)

    async def _append(self, partition: int, records, done, producer: tuple[int, int] | None) -> None:
        """Append (the caller, the partition's writer, keeps the order), then wait for the fsync
        (on a cluster: the in-sync replicas) in a task of its own, so that the next store is
        appended meanwhile."""
        now = self.clock.milliseconds()
        values = [(key, value, now, ()) for key, value in records]
        if producer is None:
            batch = build_batch(values)
        else:
            producer_id, epoch = producer
            batch = build_batch(
                values, producer_id=producer_id, producer_epoch=epoch, base_sequence=0, is_transactional=True
            )
        cluster = self.cluster
        try:
            if cluster is not None:
                log, epoch = cluster.leader_log(partition)
            else:
                log, epoch = self.topics.log(self.topic.name, partition), 0
            append = partial(log.append_as_leader, from_coordinator=producer is not None)
            info = await self.workers.run_sync(append, batch, epoch, limiter=self.limiter)
        except Exception as exc:
            done(self._storage_error(exc), -1)
            return
        self.notifier.notify((self.topic.name, partition))
        assert self._nursery is not None  # this partition's writer runs in it (store)
        if cluster is not None:
            self._nursery.start_soon(self._committed, cluster, partition, info, epoch, done)
        else:
            self._nursery.start_soon(self._flushed, log, info, done)

    async def _committed(self, cluster: ClusterCoordinatorPartitions, partition: int, info, epoch: int, done) -> None:
        failure = await cluster.wait_committed(partition, info, epoch, self.topic.commit_timeout_ms / 1000)
        done(failure, -1 if failure is not None else info.first_offset)

    async def _flushed(self, log, info, done) -> None:
        timeout_ms = self.topic.commit_timeout_ms
        try:
            with trio.fail_after(timeout_ms / 1000):
                await self.committer.wait_flushed(log, info.last_offset + 1)
        except trio.TooSlowError:
            done(
                (
                    ErrorCode.REQUEST_TIMED_OUT,
                    f"the {self.topic.name} record was not fsynced within {self.topic.commit_timeout_key}={timeout_ms}",
                ),
                -1,
            )
            return
        except Exception as exc:
            done(self._storage_error(exc), -1)
            return
        done(None, info.first_offset)


# -- the coordinator inside the broker ----------------------------------------------------------

#: Seconds before a partition whose load failed is read again.
LOAD_RETRY_S = 1.0


class CoordinatorService:
    """What every coordinator's service inside the broker does the same way (GroupService and
    TransactionService supply only their coordinator and how it loads a partition):

    * the topic is created on first use (:meth:`ready`): on a single broker in a worker thread,
      on a cluster through ZooKeeper (refused while too few brokers are live);
    * at startup, an existing topic is loaded whole on a single broker (its keys answering
      COORDINATOR_LOAD_IN_PROGRESS meanwhile); on a cluster the coordinator starts once the
      cluster's metadata is read, and each partition is loaded when this broker comes to lead it,
      if it still leads it (in that term) after the read;
    * a partition whose read fails stays loading and is read again after LOAD_RETRY_S: serving
      its keys without their state would lose it.
    """

    #: What it coordinates, in its log lines ("groups", "transactions").
    what = "keys"

    def __init__(self, topic: CoordinatorTopic, topics, workers, limiter, cluster: ClusterCoordinatorPartitions | None):
        self.topic = topic
        self.topics = topics
        self.workers = workers
        self.limiter = limiter
        #: On a cluster member: the topic is the cluster's, and this broker coordinates the keys
        #: of the partitions it leads; None on a single broker.
        self.cluster = cluster
        #: The pure coordinator, once started (each service narrows the type).
        self.coordinator: Any = None
        self._nursery: trio.Nursery | None = None
        self._creating: trio.Event | None = None
        #: Seconds the last full load took (None before one ran).
        self.load_seconds: float | None = None

    # -- what each coordinator supplies ------------------------------------------------------------

    def _start_coordinator(self, existing: bool):
        """Create the coordinator (``existing``: over a topic that was there, to be loaded), and
        on a cluster follow this broker's leaderships with :meth:`_load_led`."""
        raise NotImplementedError

    def _local_partitions(self, coordinator) -> list[int]:
        """The partitions a single broker's coordinator waits to have loaded."""
        raise NotImplementedError

    def _replay(self, log: Log):
        """(worker thread) A partition's records, as the coordinator loads them."""
        raise NotImplementedError

    def _load_partition(self, coordinator, partition: int, epoch: int, loaded) -> int:
        """Hand a partition's records to the coordinator; how many keys it loaded."""
        raise NotImplementedError

    def _create_local_topic(self) -> None:
        """(worker thread) The topic on a single broker."""
        raise NotImplementedError

    def _begin_loading(self, partition: int, epoch: int) -> None:
        """A partition this broker came to lead is about to be read (its keys: loading)."""

    # -- startup -----------------------------------------------------------------------------------

    def _start_in(self, nursery: trio.Nursery) -> None:
        self._nursery = nursery
        if self.cluster is not None:
            nursery.start_soon(self._start_on_cluster)
        elif self.topics.get(self.topic.name) is not None:
            nursery.start_soon(self._load_all, self._start_coordinator(existing=True))

    async def _start_on_cluster(self) -> None:
        """A cluster member's coordinator starts once the cluster's metadata is read, if the
        topic exists (else at the first request, which creates it)."""
        assert self.cluster is not None
        await self.cluster.cache.loaded.wait()
        if self.coordinator is None and self.cluster.topic_partitions() is not None:
            self._start_coordinator(existing=True)

    def _load_led(self, partition: int, epoch: int) -> None:
        assert self._nursery is not None
        self._begin_loading(partition, epoch)
        self._nursery.start_soon(self._load_one, partition, epoch)

    def _read_partition(self, partition: int):
        if self.cluster is not None:
            log, _ = self.cluster.leader_log(partition)
        else:
            log = self.topics.log(self.topic.name, partition)
        return self._replay(log)

    async def _load_one(self, partition: int, epoch: int) -> None:
        """Load a partition this broker came to lead, if it still leads it (in that term) after."""
        cluster, coordinator = self.cluster, self.coordinator
        assert cluster is not None and coordinator is not None
        started = time.monotonic()
        while True:
            try:
                loaded = await self.workers.run_sync(self._read_partition, partition, limiter=self.limiter)
                break
            except Exception:
                if not cluster.still_leads(partition, epoch):
                    return
                logger.exception(
                    f"{self.what}_load_failed", topic=self.topic.name, partition=partition, retry_s=LOAD_RETRY_S
                )
                await trio.sleep(LOAD_RETRY_S)
        if cluster.still_leads(partition, epoch):
            count = self._load_partition(coordinator, partition, epoch, loaded)
            logger.info(
                f"{self.what}_loaded",
                topic=self.topic.name,
                partition=partition,
                leader_epoch=epoch,
                count=count,
                seconds=round(time.monotonic() - started, 3),
            )

    async def _load_all(self, coordinator) -> None:
        started = time.monotonic()
        total = 0
        for partition in sorted(self._local_partitions(coordinator)):
            while True:
                try:
                    loaded = await self.workers.run_sync(self._read_partition, partition, limiter=self.limiter)
                    break
                except Exception:
                    logger.exception(
                        f"{self.what}_load_failed", topic=self.topic.name, partition=partition, retry_s=LOAD_RETRY_S
                    )
                    await trio.sleep(LOAD_RETRY_S)
            total += self._load_partition(coordinator, partition, 0, loaded)
        self.load_seconds = time.monotonic() - started
        logger.info(f"{self.what}_loaded", topic=self.topic.name, count=total, seconds=round(self.load_seconds, 3))

    async def ready(self):
        """The coordinator, creating the topic first if this is its first use (None if it
        cannot be created now)."""
        if self.coordinator is not None:
            return self.coordinator
        if self._creating is not None:
            await self._creating.wait()
            return self.coordinator
        self._creating = creating = trio.Event()
        try:
            if self.cluster is not None:
                why = await self.cluster.create_topic()
                if why is not None or self.cluster.topic_partitions() is None:
                    logger.info("coordinator_topic_not_created", topic=self.topic.name, reason=why)
                    return None
            else:
                await self.workers.run_sync(self._create_local_topic, limiter=self.limiter)
            self._start_coordinator(existing=False)
        except Exception:
            logger.exception("coordinator_topic_create_failed", topic=self.topic.name)
        finally:
            creating.set()
            self._creating = None
        return self.coordinator
