"""The group coordinator on a cluster: where Kafka's GroupCoordinator differs from a single
broker's, all in one place.

``__consumer_offsets`` is a replicated topic like any other (created through ZooKeeper with
``offsets.topic.replication.factor`` replicas, refused while fewer brokers are live, as Kafka
refuses), and a group's coordinator is the leader of the group's partition: it loads the
partition's groups when it becomes leader (Kafka's onElection), drops them when it stops being
one (onResignation), and a group's writes (offsets, generations) are answered once the in-sync
replicas have them, as Kafka appends them with acks=all.
"""

from __future__ import annotations

from collections.abc import Callable

import structlog
import trio

from triolog.broker.cluster.election import BrokerPlacement, assign_replicas
from triolog.broker.cluster.membership import TRIOLOG_LISTENER
from triolog.broker.cluster.metadata_store import NodeExistsError
from triolog.broker.cluster.replication import AcksAll
from triolog.broker.cluster.zk_data import TopicAssignment
from triolog.broker.coordinator.group.group_coordinator import GroupCoordinator
from triolog.broker.storage.checkpoints import random_kafka_uuid
from triolog.broker.storage.log import Log, LogAppendInfo
from triolog.broker.storage.topics import OFFSETS_TOPIC
from triolog.protocol.errors import ErrorCode

from .cluster_handlers import ClusterServices

logger = structlog.get_logger("triolog.groups")


class ClusterGroupPartitions:
    def __init__(self, config, services: ClusterServices, notifier):
        self.config = config
        self.services = services
        self.cache = services.cache
        self.replicas = services.replicas
        self.notifier = notifier
        #: The partitions this broker leads, by leader epoch, as the coordinator was last told.
        self._led: dict[int, int] = {}

    # -- the topic -------------------------------------------------------------------------------

    def topic_partitions(self) -> int | None:
        """__consumer_offsets' partition count, None while the cluster has no such topic."""
        assignment = self.cache.topics.get(OFFSETS_TOPIC)
        return None if assignment is None else len(assignment.partitions)

    async def create_topic(self) -> str | None:
        """Create __consumer_offsets in ZooKeeper; None once it exists, else why it cannot yet
        (fewer live brokers than offsets.topic.replication.factor: COORDINATOR_NOT_AVAILABLE)."""
        if OFFSETS_TOPIC in self.cache.topics:
            return None
        rf = self.config.offsets_topic_replication_factor
        live = [BrokerPlacement(broker_id, reg.rack) for broker_id, reg in self.cache.brokers.items()]
        if len(live) < rf:
            return (
                f"{OFFSETS_TOPIC} needs offsets.topic.replication.factor={rf} live brokers, the cluster has {len(live)}"
            )
        partitions = self.config.offsets_topic_num_partitions
        placement = assign_replicas(live, partitions, rf)
        assignment = TopicAssignment({p: tuple(r) for p, r in placement.items()}, topic_id=random_kafka_uuid())
        configs = {
            "cleanup.policy": "compact",
            "compression.type": "producer",
            "segment.bytes": str(self.config.offsets_topic_segment_bytes),
        }
        try:
            await self.services.membership.zk.create_topic(OFFSETS_TOPIC, assignment, configs)
            logger.info("topic_created", topic=OFFSETS_TOPIC, partitions=partitions, replication_factor=rf)
        except NodeExistsError:
            pass  # another broker made it first
        generation = self.cache.generation
        with trio.move_on_after(30):
            while OFFSETS_TOPIC not in self.cache.topics:
                generation = await self.cache.wait_changed(generation)
        return None

    def coordinator_of(self, partition: int, kafka_listener: bool) -> tuple[int, str, int] | None:
        """The coordinator of a group of ``partition``: the partition's leader, at its address on
        the listener asked (node id, host, port); None while the partition has no leader."""
        view = self.cache.partition(OFFSETS_TOPIC, partition)
        if view is None or not view.online:
            return None
        registration = self.cache.brokers.get(view.leader)
        kafka = self.config.kafka_listener
        name = kafka.scheme if kafka_listener and kafka is not None else TRIOLOG_LISTENER
        endpoint = None if registration is None else registration.endpoint(name)
        return None if endpoint is None else (view.leader, endpoint.host, endpoint.port)

    # -- leadership ------------------------------------------------------------------------------

    def led_partitions(self) -> dict[int, int]:
        """The __consumer_offsets partitions this broker leads now, and their leader epochs."""
        return {
            partition: hosted.leader_epoch
            for (topic, partition), hosted in self.replicas.hosted.items()
            if topic == OFFSETS_TOPIC and hosted.leadership is not None
        }

    async def follow(self, coordinator: GroupCoordinator, load: Callable[[int, int], None]) -> None:
        """Tell the coordinator of every leadership this broker gains or loses; ``load(partition,
        epoch)`` starts loading a gained partition."""
        while True:
            seen = self.replicas.generation
            led = self.led_partitions()
            for partition in sorted(set(self._led) - set(led)):
                dropped = coordinator.release_partition(partition)
                logger.info("groups_unloaded", topic=OFFSETS_TOPIC, partition=partition, groups=dropped)
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
        hosted = self.replicas.leader_partition(OFFSETS_TOPIC, partition)
        return hosted.log, hosted.leader_epoch

    async def wait_committed(
        self, partition: int, info: LogAppendInfo, leader_epoch: int, timeout_s: float
    ) -> tuple[int, str] | None:
        """Until the in-sync replicas have the records appended in ``leader_epoch`` (None), or why
        not: the error a group request answers (NOT_COORDINATOR when leadership moved, as Kafka
        maps it)."""
        key = (OFFSETS_TOPIC, partition)
        required = info.last_offset + 1
        deadline = trio.current_time() + timeout_s
        while True:
            event = self.notifier.register([key])
            try:
                status = self.replicas.acks_all_status(OFFSETS_TOPIC, partition, required, leader_epoch)
                if status is AcksAll.DONE:
                    return None
                if status is None:
                    return (
                        ErrorCode.NOT_COORDINATOR,
                        f"leadership of {OFFSETS_TOPIC}-{partition} moved before the write was committed",
                    )
                if status is AcksAll.NOT_ENOUGH_REPLICAS_AFTER_APPEND:
                    return (
                        ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
                        f"the ISR of {OFFSETS_TOPIC}-{partition} fell below min.insync.replicas",
                    )
                if trio.current_time() >= deadline or self.notifier.closed:
                    return (
                        ErrorCode.REQUEST_TIMED_OUT,
                        f"the {OFFSETS_TOPIC} record was not committed by the in-sync replicas within "
                        f"offsets.commit.timeout.ms={round(timeout_s * 1000)}",
                    )
                with trio.move_on_at(deadline):
                    await event.wait()
            finally:
                self.notifier.unregister([key], event)
