"""Kafka's operations on its ZooKeeper layout (its KafkaZkClient), over any MetadataStore.

Each method is one step Kafka's brokers and controller take: register a broker, elect a
controller (create ``/controller`` and bump ``/controller_epoch`` in one conditional write),
create a topic's assignment, write partition states fenced on the controller epoch and on the
partition's own version. Decisions stay with the callers; this module knows paths and bytes.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

import trio

from . import zk_data
from .metadata_store import (
    BadVersionError,
    Check,
    Create,
    Delete,
    MetadataStore,
    Node,
    NodeExistsError,
    NoNodeError,
    Op,
    SetData,
    TransactionFailedError,
)
from .zk_data import BrokerRegistration, ControllerRegistration, PartitionState, TopicAssignment


class ControllerMovedError(Exception):
    """A controller write found a newer controller epoch: this broker is no longer the controller."""


@dataclass(frozen=True)
class ControllerFence:
    """What every write of the controller is conditional on: ``/controller_epoch`` still at the
    version this controller's election left it at."""

    epoch: int
    epoch_version: int

    def check(self) -> Check:
        return Check(zk_data.CONTROLLER_EPOCH, self.epoch_version)


@dataclass(frozen=True)
class VersionedState:
    """A partition's state and its znode version (the partition epoch)."""

    state: PartitionState
    version: int
    #: When the state was last written, in the store's order (comparable with broker epochs).
    modified: int = 0


class KafkaZkClient:
    def __init__(self, store: MetadataStore):
        self.store = store

    # -- startup ---------------------------------------------------------------------------------

    async def create_top_level_paths(self) -> None:
        for path in zk_data.PERSISTENT_PATHS:
            await self.store.ensure_path(path)

    async def get_or_create_cluster_id(self, proposed: str) -> str:
        """The cluster's id: whatever the first broker of the cluster wrote (``proposed`` if none)."""
        node = await self.store.get(zk_data.CLUSTER_ID)
        if node is None:
            try:
                await self.store.create(zk_data.CLUSTER_ID, zk_data.encode_cluster_id(proposed), makepath=True)
                return proposed
            except NodeExistsError:
                node = await self.store.get(zk_data.CLUSTER_ID)
        assert node is not None
        return zk_data.decode_cluster_id(node.data)

    # -- brokers ---------------------------------------------------------------------------------

    async def register_broker(self, registration: BrokerRegistration) -> None:
        """Create ``/brokers/ids/<id>`` (ephemeral). Raises NodeExistsError if another session holds it."""
        path = zk_data.broker_path(registration.broker_id)
        try:
            await self.store.create(path, registration.encode(), ephemeral=True)
        except NodeExistsError:
            node = await self.store.get(path)
            if node is None or node.ephemeral_owner != self.store.session_id:
                raise
            # Our own session's (a retried create whose first answer was lost): rewrite it.
            await self.store.set(path, registration.encode())

    async def broker(self, broker_id: int) -> tuple[BrokerRegistration, int] | None:
        """A registration and its owner session, None if the broker is not registered."""
        node = await self.store.get(zk_data.broker_path(broker_id))
        if node is None:
            return None
        return replace(BrokerRegistration.decode(broker_id, node.data), epoch=node.created), node.ephemeral_owner

    async def live_brokers(self) -> dict[int, BrokerRegistration]:
        brokers, _ = await self._brokers(watch=False)
        return brokers

    async def watch_brokers(self) -> tuple[dict[int, BrokerRegistration], trio.Event]:
        """The registered brokers and an event set when one joins or leaves."""
        brokers, event = await self._brokers(watch=True)
        assert event is not None
        return brokers, event

    async def _brokers(self, *, watch: bool) -> tuple[dict[int, BrokerRegistration], trio.Event | None]:
        event = None
        if watch:
            children, event = await self.store.watch_children(zk_data.BROKER_IDS)
        else:
            children = await self.store.children(zk_data.BROKER_IDS)
        brokers = {}
        for broker_id in zk_data.ids_from_children(children or []):
            node = await self.store.get(zk_data.broker_path(broker_id))
            if node is not None:  # gone between the listing and the read: not live
                brokers[broker_id] = replace(BrokerRegistration.decode(broker_id, node.data), epoch=node.created)
        return brokers, event

    # -- controlled shutdown ---------------------------------------------------------------------

    async def announce_controlled_shutdown(self, broker_id: int) -> None:
        """Tell the controller this broker is shutting down: an ephemeral node, gone with the
        session, so a broker that comes back is never taken for one still leaving."""
        try:
            await self.store.create(zk_data.controlled_shutdown_path(broker_id), b"", ephemeral=True)
        except NodeExistsError:
            pass  # (a retried create whose first answer was lost)

    async def watch_shutting_down(self) -> tuple[set[int], trio.Event]:
        """The brokers shutting down, and an event set when one starts or goes."""
        children, event = await self.store.watch_children(zk_data.CONTROLLED_SHUTDOWN)
        return set(zk_data.ids_from_children(children or [])), event

    async def shutting_down(self) -> set[int]:
        return set(zk_data.ids_from_children(await self.store.children(zk_data.CONTROLLED_SHUTDOWN) or []))

    # -- the controller --------------------------------------------------------------------------

    async def controller_id(self) -> int | None:
        node = await self.store.get(zk_data.CONTROLLER)
        return None if node is None else ControllerRegistration.decode(node.data).broker_id

    async def watch_controller(self) -> tuple[int | None, trio.Event]:
        node, event = await self.store.watch(zk_data.CONTROLLER)
        return (None if node is None else ControllerRegistration.decode(node.data).broker_id), event

    async def controller_epoch(self) -> tuple[int, int] | None:
        """``/controller_epoch`` and its version; None before the first election."""
        node = await self.store.get(zk_data.CONTROLLER_EPOCH)
        return None if node is None else (zk_data.decode_controller_epoch(node.data), node.version)

    async def try_become_controller(self, broker_id: int) -> ControllerFence | None:
        """Kafka's registerControllerAndIncrementControllerEpoch: ``/controller`` (ephemeral) and
        the next epoch in one write conditional on the epoch read. None if another broker won."""
        current = await self.controller_epoch()
        if current is None:
            try:
                await self.store.create(
                    zk_data.CONTROLLER_EPOCH, zk_data.encode_controller_epoch(zk_data.INITIAL_CONTROLLER_EPOCH)
                )
            except NodeExistsError:
                pass
            current = await self.controller_epoch()
            assert current is not None
        epoch, version = current
        registration = ControllerRegistration(broker_id, int(time.time() * 1000))
        try:
            versions = await self.store.commit(
                [
                    Create(zk_data.CONTROLLER, registration.encode(), ephemeral=True),
                    SetData(zk_data.CONTROLLER_EPOCH, zk_data.encode_controller_epoch(epoch + 1), version),
                ]
            )
        except TransactionFailedError as failed:
            if isinstance(failed.cause, (NodeExistsError, BadVersionError)):
                return None
            raise
        new_version = versions[1]
        assert new_version is not None
        return ControllerFence(epoch + 1, new_version)

    async def resume_controller(self, broker_id: int) -> ControllerFence | None:
        """This broker's fence again, if ``/controller`` is still its own, from this very session:
        a controller that stood down while its session was suspended, and got it back. Nobody
        else can have moved the epoch meanwhile (that takes creating ``/controller``)."""
        node = await self.store.get(zk_data.CONTROLLER)
        if node is None or node.ephemeral_owner != self.store.session_id:
            return None
        if ControllerRegistration.decode(node.data).broker_id != broker_id:
            return None
        current = await self.controller_epoch()
        return None if current is None else ControllerFence(*current)

    async def resign(self, broker_id: int) -> None:
        """Delete ``/controller`` if it is still this broker's (a controlled resignation)."""
        node = await self.store.get(zk_data.CONTROLLER)
        if node is None or ControllerRegistration.decode(node.data).broker_id != broker_id:
            return
        try:
            await self.store.delete(zk_data.CONTROLLER, node.version)
        except (NoNodeError, BadVersionError):
            pass

    async def fenced_commit(self, fence: ControllerFence, ops: Iterable[Op]) -> list[int | None]:
        """``ops`` if this controller's epoch still holds. Raises ControllerMovedError if not, and
        TransactionFailedError (index past the fence) when one of ``ops`` failed."""
        ops = list(ops)
        try:
            versions = await self.store.commit([fence.check(), *ops])
        except TransactionFailedError as failed:
            if failed.index == 0:
                raise ControllerMovedError(f"the controller epoch moved past {fence.epoch}") from None
            raise TransactionFailedError(failed.index - 1, failed.cause) from None
        return versions[1:]

    # -- topics and partitions -------------------------------------------------------------------

    async def topics(self) -> list[str]:
        return sorted(await self.store.children(zk_data.TOPICS) or [])

    async def watch_topics(self) -> tuple[list[str], trio.Event]:
        children, event = await self.store.watch_children(zk_data.TOPICS)
        return sorted(children or []), event

    async def topic_assignment(self, topic: str) -> TopicAssignment | None:
        node = await self.store.get(zk_data.topic_path(topic))
        return None if node is None else TopicAssignment.decode(topic, node.data)

    async def create_topic(self, topic: str, assignment: TopicAssignment, config: Mapping[str, str]) -> None:
        """Kafka's AdminZkClient.createTopicWithAssignment: the topic's config, then its assignment
        (whose appearance the controller acts on). Raises NodeExistsError if the topic exists."""
        config_json = zk_data.encode_topic_config(config)
        try:
            await self.store.commit(
                [
                    Create(zk_data.topic_config_path(topic), config_json),
                    Create(zk_data.topic_path(topic), assignment.encode()),
                ]
            )
        except TransactionFailedError as failed:
            if isinstance(failed.cause, NodeExistsError):
                raise NodeExistsError(f"topic {topic!r} already exists") from None
            raise failed.cause from None

    async def versioned_topic_assignment(self, topic: str) -> tuple[TopicAssignment, int] | None:
        node = await self.store.get(zk_data.topic_path(topic))
        return None if node is None else (TopicAssignment.decode(topic, node.data), node.version)

    async def set_topic_assignment(self, topic: str, assignment: TopicAssignment, version: int) -> None:
        """Kafka's AdminZkClient.addPartitions' write: the whole assignment, if still at ``version``
        (BadVersionError otherwise); the controller gives the new partitions their states."""
        await self.store.set(zk_data.topic_path(topic), assignment.encode(), version)

    async def watch_topic_assignment(self, topic: str) -> tuple[TopicAssignment | None, trio.Event]:
        node, event = await self.store.watch(zk_data.topic_path(topic))
        return (None if node is None else TopicAssignment.decode(topic, node.data)), event

    async def versioned_topic_config(self, topic: str) -> tuple[dict[str, str], int] | None:
        node = await self.store.get(zk_data.topic_config_path(topic))
        return None if node is None else (zk_data.decode_topic_config(node.data, topic), node.version)

    async def watch_topic_config(self, topic: str) -> tuple[dict[str, str] | None, trio.Event]:
        node, event = await self.store.watch(zk_data.topic_config_path(topic))
        return (None if node is None else zk_data.decode_topic_config(node.data, topic)), event

    async def set_topic_config(self, topic: str, config: Mapping[str, str], version: int) -> None:
        """A topic's whole override set, if still at ``version`` (-1: if it has none yet;
        BadVersionError or NodeExistsError when another write came first). Every broker watches
        the znode itself (Kafka's also wrote a /config/changes notification)."""
        data = zk_data.encode_topic_config(config)
        if version == -1:
            await self.store.create(zk_data.topic_config_path(topic), data)
        else:
            await self.store.set(zk_data.topic_config_path(topic), data, version)

    async def queue_topic_deletion(self, topic: str) -> None:
        """Kafka's AdminZkClient.deleteTopic: mark the topic for the controller to delete."""
        try:
            await self.store.create(zk_data.delete_topic_path(topic), b"")
        except NodeExistsError:
            pass  # already queued

    async def watch_topic_deletions(self) -> tuple[list[str], trio.Event]:
        children, event = await self.store.watch_children(zk_data.DELETE_TOPICS)
        return sorted(children or []), event

    async def topics_to_delete(self) -> list[str]:
        return sorted(await self.store.children(zk_data.DELETE_TOPICS) or [])

    async def delete_topic(self, fence: ControllerFence, topic: str) -> None:
        """Remove a topic's every znode (states, assignment, config, deletion mark) in one write
        fenced on the controller epoch: brokers that watch the assignment drop their replicas."""
        ops: list[Op] = []
        assignment = await self.topic_assignment(topic)
        if assignment is not None:
            for partition in sorted(assignment.partitions):
                if await self.store.get(zk_data.partition_state_path(topic, partition)) is not None:
                    ops.append(Delete(zk_data.partition_state_path(topic, partition)))
                if await self.store.get(zk_data.partition_path(topic, partition)) is not None:
                    ops.append(Delete(zk_data.partition_path(topic, partition)))
            if await self.store.get(zk_data.partitions_path(topic)) is not None:
                ops.append(Delete(zk_data.partitions_path(topic)))
            ops.append(Delete(zk_data.topic_path(topic)))
        if await self.store.get(zk_data.topic_config_path(topic)) is not None:
            ops.append(Delete(zk_data.topic_config_path(topic)))
        ops.append(Delete(zk_data.delete_topic_path(topic)))
        await self.fenced_commit(fence, ops)

    async def topic_config(self, topic: str) -> dict[str, str]:
        node = await self.store.get(zk_data.topic_config_path(topic))
        return {} if node is None else zk_data.decode_topic_config(node.data, topic)

    async def partition_state(self, topic: str, partition: int) -> VersionedState | None:
        path = zk_data.partition_state_path(topic, partition)
        node = await self.store.get(path)
        return None if node is None else _versioned_state(node, path)

    async def watch_partition_state(self, topic: str, partition: int) -> tuple[VersionedState | None, trio.Event]:
        path = zk_data.partition_state_path(topic, partition)
        node, event = await self.store.watch(path)
        return (None if node is None else _versioned_state(node, path)), event

    async def create_partition_states(
        self, fence: ControllerFence, topic: str, states: Mapping[int, PartitionState]
    ) -> None:
        """The state znodes of new partitions (with their parents), fenced on the controller epoch."""
        ops: list[Op] = []
        if await self.store.get(zk_data.partitions_path(topic)) is None:
            ops.append(Create(zk_data.partitions_path(topic)))
        for partition, state in sorted(states.items()):
            if await self.store.get(zk_data.partition_path(topic, partition)) is None:
                ops.append(Create(zk_data.partition_path(topic, partition)))
            ops.append(Create(zk_data.partition_state_path(topic, partition), state.encode()))
        await self.fenced_commit(fence, ops)

    async def update_partition_state(
        self, fence: ControllerFence | None, topic: str, partition: int, state: PartitionState, version: int
    ) -> int:
        """Write a partition's state if its znode is still at ``version``; the new version.

        The controller's writes are fenced on its epoch too; a leader's own ISR change (fence None)
        only on the partition version. Raises BadVersionError when someone wrote first."""
        write = SetData(zk_data.partition_state_path(topic, partition), state.encode(), version)
        if fence is None:
            return await self.store.set(write.path, write.data, version)
        try:
            (new_version,) = await self.fenced_commit(fence, [write])
        except TransactionFailedError as failed:
            raise failed.cause from None
        assert new_version is not None
        return new_version


def _versioned_state(node: Node, path: str) -> VersionedState:
    return VersionedState(PartitionState.decode(node.data, path), node.version, node.modified)
