"""The APIs whose answer is the cluster's, not this broker's, when it is a cluster member
(``zookeeper.connect``): Metadata from the cluster view, CreateTopics through ZooKeeper, and
which partitions this broker may serve as leader.

As Kafka in ZooKeeper mode: a topic is created by writing its assignment (placed by the
controller's rules over the live brokers) and its configs to ZooKeeper; the controller then
elects the partitions' leaders, and the request is answered once every partition has one (or
REQUEST_TIMED_OUT, the topic created, after CREATE_WAIT_S). Metadata lists every live broker at
its address on the listener the request came in on, and per partition the leader, leader epoch,
replicas, ISR and offline replicas; a partition without a leader is LEADER_NOT_AVAILABLE, the
rest of its entry still filled in.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import structlog
import trio

from triolog.broker.cluster.election import BrokerPlacement, assign_replicas, validate_replica_assignment
from triolog.broker.cluster.membership import TRIOLOG_LISTENER, ClusterMembership
from triolog.broker.cluster.metadata_cache import ClusterMetadataCache
from triolog.broker.cluster.metadata_store import BadVersionError, NodeExistsError
from triolog.broker.cluster.replica_manager import ReplicaManager
from triolog.broker.cluster.zk_data import TopicAssignment
from triolog.broker.storage.checkpoints import random_kafka_uuid
from triolog.broker.storage.log import Log
from triolog.broker.storage.topics import TopicManager, check_new_partition_count, is_internal
from triolog.config.broker_config import BrokerConfig
from triolog.config.log_config import LogConfig
from triolog.protocol import messages as m
from triolog.protocol.errors import (
    ErrorCode,
    InvalidTopicError,
    RequestTimedOutError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from triolog.protocol.kafka.controller_apis import ElectionResult, ElectLeadersRequest, ElectLeadersResponse

logger = structlog.get_logger("triolog.server")

#: How long CreateTopics waits for the new partitions' leaders before answering REQUEST_TIMED_OUT.
CREATE_WAIT_S = 30.0
#: How often a conditional write that lost a race (another admin's change) is planned again.
WRITE_ATTEMPTS = 5


@dataclass(frozen=True)
class ClusterServices:
    """What a cluster member's handlers serve from (made before the listeners open, filled as the
    broker joins the cluster)."""

    membership: ClusterMembership
    cache: ClusterMetadataCache
    replicas: ReplicaManager


class ClusterApis:
    def __init__(self, *, config: BrokerConfig, topics: TopicManager, services: ClusterServices):
        self.config = config
        self.topics = topics
        self.services = services
        self.cache = services.cache
        self.replicas = services.replicas

    # -- partitions ----------------------------------------------------------------------------

    def topic_exists(self, topic: str) -> bool:
        return topic in self.cache.topics

    def leader(self, topic: str, partition: int) -> tuple[Log, int]:
        """The log of a partition this broker leads and its leader epoch (the epoch appends are
        stamped with), or NOT_LEADER_OR_FOLLOWER and its kin."""
        hosted = self.replicas.leader_partition(topic, partition)
        return hosted.log, hosted.leader_epoch

    # -- Metadata ------------------------------------------------------------------------------

    def brokers(self, kafka_listener: bool) -> tuple[m.BrokerMetadata, ...]:
        """Every live broker at its address on the listener asked (Kafka's rule: the endpoints of
        the listener the request came in on)."""
        wanted = self.config.kafka_listener.scheme if kafka_listener and self.config.kafka_listener else None
        out = []
        for broker_id, registration in sorted(self.cache.brokers.items()):
            endpoint = registration.endpoint(wanted or TRIOLOG_LISTENER)
            if endpoint is None:
                continue
            out.append(
                m.BrokerMetadata(node_id=broker_id, host=endpoint.host, port=endpoint.port, rack=registration.rack)
            )
        return tuple(out)

    def controller_id(self) -> int:
        return -1 if self.cache.controller_id is None else self.cache.controller_id

    def topic_metadata(self, name: str) -> m.TopicMetadata:
        if name not in self.cache.topics:
            raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
        partitions = []
        for view in self.cache.partitions(name):
            log_start = high_watermark = -1
            hosted = self.replicas.hosted.get((name, view.partition))
            if hosted is not None and hosted.is_leader(self.replicas.broker_id):
                log_start, high_watermark = hosted.log.log_start_offset, hosted.log.high_watermark
            partitions.append(
                m.PartitionMetadata(
                    partition=view.partition,
                    leader=view.leader,
                    error_code=ErrorCode.NONE if view.online else ErrorCode.LEADER_NOT_AVAILABLE,
                    error_message=None if view.online else f"partition {name}-{view.partition} has no leader now",
                    log_start_offset=log_start,
                    high_watermark=high_watermark,
                    leader_epoch=view.leader_epoch,
                    replicas=view.replicas,
                    isr=view.isr,
                    offline_replicas=view.offline_replicas,
                )
            )
        return m.TopicMetadata(name=name, internal=is_internal(name), partitions=tuple(partitions))

    # -- CreatePartitions and AlterConfigs ------------------------------------------------------

    async def create_partitions(self, name: str, count: int, *, validate_only: bool = False) -> int:
        """Kafka's AdminZkClient.addPartitions: the new partitions placed as the topic's first ones
        were (its replication factor, the round robin continued from its partition 0's leader),
        the assignment rewritten if unchanged meanwhile; answered once they have leaders. The
        previous partition count."""
        zk = self.services.membership.zk
        for _ in range(WRITE_ATTEMPTS):
            found = await zk.versioned_topic_assignment(name)
            if found is None:
                raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
            assignment, version = found
            current = len(assignment.partitions)
            check_new_partition_count(name, current, count)
            live = [BrokerPlacement(broker_id, reg.rack) for broker_id, reg in self.cache.brokers.items()]
            first = assignment.partitions[0]
            ids = sorted(b.broker_id for b in live)
            added = assign_replicas(
                live,
                count - current,
                len(first),
                fixed_start_index=ids.index(first[0]) if first[0] in ids else -1,
                start_partition_id=current,
            )
            if validate_only:
                return current
            grown = dataclasses.replace(
                assignment, partitions={**assignment.partitions, **{p: tuple(r) for p, r in added.items()}}
            )
            try:
                await zk.set_topic_assignment(name, grown, version)
            except BadVersionError:
                continue  # changed meanwhile: place again over what is there now
            logger.info("partitions_created", topic=name, partitions=count, previous=current)
            await self._wait_led(name, count, f"topic {name!r} has {count} partitions now, but not every one had")
            return current
        raise RequestTimedOutError(f"topic {name!r} kept changing: try again")

    async def alter_configs(
        self,
        name: str,
        set_configs: dict[str, str],
        delete_keys: tuple[str, ...],
        *,
        validate_only: bool = False,
        replace: bool = False,
        append: dict[str, str] | None = None,
        subtract: dict[str, str] | None = None,
    ) -> None:
        """Kafka's AdminZkClient.changeTopicConfig: the topic's whole override set rewritten in
        ``/config/topics/<topic>`` if unchanged meanwhile; every broker follows that znode."""
        zk = self.services.membership.zk
        for _ in range(WRITE_ATTEMPTS):
            if name not in self.cache.topics:
                raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
            found = await zk.versioned_topic_config(name)
            current, version = found if found is not None else ({}, -1)
            overrides = self.topics.changed_overrides(
                current, set_configs, delete_keys, replace=replace, append=append, subtract=subtract
            )
            if validate_only:
                return
            try:
                await zk.set_topic_config(name, overrides, version)
            except (BadVersionError, NodeExistsError):
                continue
            return
        raise RequestTimedOutError(f"the configs of topic {name!r} kept changing: try again")

    # -- DeleteTopics --------------------------------------------------------------------------

    async def delete_topic(self, name: str) -> None:
        """Kafka's ZooKeeper-mode deletion: mark the topic under ``/admin/delete_topics`` for the
        controller, and answer once this broker's metadata no longer has it (REQUEST_TIMED_OUT,
        the deletion still under way, after CREATE_WAIT_S)."""
        if name not in self.cache.topics:
            raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
        if is_internal(name):
            raise InvalidTopicError(f"topic {name!r} is internal (the group coordinator's) and cannot be deleted")
        await self.services.membership.zk.queue_topic_deletion(name)
        with trio.move_on_after(CREATE_WAIT_S):
            generation = self.cache.generation
            while name in self.cache.topics:
                generation = await self.cache.wait_changed(generation)
            logger.info("topic_deleted", topic=name)
            return
        raise RequestTimedOutError(
            f"topic {name!r} is marked for deletion, but it was not deleted within {CREATE_WAIT_S:.0f} s"
        )

    # -- ElectLeaders -------------------------------------------------------------------------

    async def elect_leaders(self, request: ElectLeadersRequest) -> ElectLeadersResponse:
        """Elections by the controller running here; NOT_CONTROLLER on any other broker (Kafka's
        admin clients send ElectLeaders to the controller Metadata names)."""
        controller = self.services.membership.controller
        results = await controller.elect_leaders(request.election_type, request.partitions)
        return ElectLeadersResponse(
            id=request.id,
            results=tuple(
                ElectionResult(topic=topic, partition=partition, error_code=code, error_message=message)
                for (topic, partition), (code, message) in results.items()
            ),
        )

    # -- CreateTopics --------------------------------------------------------------------------

    async def create_topic(
        self,
        name: str,
        num_partitions: int,
        replication_factor: int,
        configs: dict[str, str],
        *,
        validate_only: bool = False,
        replica_assignment: tuple[tuple[int, ...], ...] | None = None,
    ) -> tuple[int, LogConfig]:
        """Check, place (or take the assignment given) and create a topic in ZooKeeper; wait for
        its partitions' leaders."""
        if replica_assignment is not None:
            placement = validate_replica_assignment(
                replica_assignment, self.cache.brokers, num_partitions, replication_factor
            )
            num_partitions, replication_factor = len(placement), len(placement[0])
        count, config = self.topics.validate_new_topic(
            name, num_partitions, replication_factor, configs, self.config.num_partitions, existing=self.cache.topics
        )
        rf = self.config.default_replication_factor if replication_factor == -1 else replication_factor
        if replica_assignment is None:
            live = [BrokerPlacement(broker_id, reg.rack) for broker_id, reg in self.cache.brokers.items()]
            placement = {p: tuple(r) for p, r in assign_replicas(live, count, rf).items()}
        if validate_only:
            return count, config
        assignment = TopicAssignment({p: tuple(r) for p, r in placement.items()}, topic_id=random_kafka_uuid())
        try:
            await self.services.membership.zk.create_topic(name, assignment, configs)
        except NodeExistsError:
            raise TopicAlreadyExistsError(f"topic {name!r} already exists") from None
        logger.info("topic_created", topic=name, partitions=count, replication_factor=rf, configs=dict(configs))
        await self._wait_led(name, count, f"topic {name!r} was created, but not every partition had")
        return count, config

    async def _wait_led(self, name: str, count: int, timed_out: str) -> None:
        """Until the topic's ``count`` partitions all have a leader (REQUEST_TIMED_OUT after
        CREATE_WAIT_S, the change made)."""
        with trio.move_on_after(CREATE_WAIT_S):
            generation = self.cache.generation
            while not self._led(name, count):
                generation = await self.cache.wait_changed(generation)
            return
        raise RequestTimedOutError(f"{timed_out} a leader within {CREATE_WAIT_S:.0f} s")

    def _led(self, name: str, count: int) -> bool:
        views = self.cache.partitions(name)
        return len(views) == count and all(view.online for view in views)
