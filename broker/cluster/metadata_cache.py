"""What a broker knows of the cluster (Kafka's ZkMetadataCache), kept from ZooKeeper's watches.

In Kafka's ZooKeeper mode the controller pushed this to every broker (UpdateMetadata,
LeaderAndIsr); here every broker watches the znodes the controller writes: the live brokers, the
controller, each topic's assignment and each partition's state. One task per watched znode
re-reads it at each change (a watch fires once; level-triggered, so no change is lost between
two watches) and the cache's generation moves on; who acts on changes (the replica manager,
Metadata answers) reads the whole current view.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import structlog
import trio

from .election import bounced_replicas
from .metadata_store import SessionState, StoreUnavailableError
from .zk_client import KafkaZkClient, VersionedState
from .zk_data import NO_LEADER, BrokerRegistration, TopicAssignment

logger = structlog.get_logger("triolog.cluster.metadata")


@dataclass(frozen=True)
class PartitionView:
    """One partition as a client's Metadata sees it."""

    topic: str
    partition: int
    replicas: tuple[int, ...]
    #: NO_LEADER (-1) until the controller has written the partition's first state, and while the
    #: leader it names is not live.
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    #: The partition epoch (the state znode's version): what a leader's own ISR change is conditional on.
    partition_epoch: int
    offline_replicas: tuple[int, ...]

    @property
    def online(self) -> bool:
        return self.leader != NO_LEADER


class ClusterMetadataCache:
    def __init__(self, zk: KafkaZkClient):
        self.zk = zk
        self.brokers: dict[int, BrokerRegistration] = {}
        #: Each registered broker's epoch (its registration's creation stamp).
        self.broker_epochs: dict[int, int] = {}
        self.controller_id: int | None = None
        #: The brokers in a controlled shutdown: no leader takes them (back) into an ISR.
        self.shutting_down: frozenset[int] = frozenset()
        self.topics: dict[str, TopicAssignment] = {}
        self.states: dict[tuple[str, int], VersionedState] = {}
        #: Each topic's config overrides (``/config/topics/<topic>``).
        self.configs: dict[str, dict[str, str]] = {}
        #: Moves on at every change of anything above.
        self.generation = 0
        self._changed = trio.Event()
        #: Set once brokers, the controller and every topic and state have been read once.
        self.loaded = trio.Event()
        self._topic_scopes: dict[str, trio.CancelScope] = {}
        self._config_scopes: dict[str, trio.CancelScope] = {}
        self._state_scopes: dict[tuple[str, int], trio.CancelScope] = {}
        self._nursery: trio.Nursery | None = None
        self._pending_loads = 0

    # -- reading ---------------------------------------------------------------------------------

    async def wait_changed(self, seen_generation: int) -> int:
        """Return the generation once it is past ``seen_generation``."""
        while self.generation <= seen_generation:
            await self._changed.wait()
        return self.generation

    def partition(self, topic: str, partition: int) -> PartitionView | None:
        assignment = self.topics.get(topic)
        if assignment is None or partition not in assignment.partitions:
            return None
        replicas = assignment.partitions[partition]
        versioned = self.states.get((topic, partition))
        if versioned is None:
            return PartitionView(topic, partition, replicas, NO_LEADER, -1, (), -1, replicas)
        state = versioned.state
        # A leader registered again since this state was written (a restart, a lost session) has
        # not been elected by it: until the controller writes anew, the partition has no leader
        # (acting on it, a restarted leader that lost its unflushed tail would have its
        # followers truncate to it).
        leader = state.leader if state.leader in self.brokers else NO_LEADER
        if leader != NO_LEADER and leader in self.bounced(versioned):
            leader = NO_LEADER
        offline = tuple(r for r in replicas if r not in self.brokers)
        return PartitionView(
            topic, partition, replicas, leader, state.leader_epoch, state.isr, versioned.version, offline
        )

    def bounced(self, versioned: VersionedState) -> frozenset[int]:
        """The state's ISR members registered again since it was written (election.bounced_replicas)."""
        return bounced_replicas(versioned.state, self.broker_epochs, versioned.modified)

    def partitions(self, topic: str) -> list[PartitionView]:
        assignment = self.topics.get(topic)
        if assignment is None:
            return []
        return [view for p in sorted(assignment.partitions) if (view := self.partition(topic, p)) is not None]

    # -- keeping it -------------------------------------------------------------------------------

    def _bump(self) -> None:
        self.generation += 1
        self._changed.set()
        self._changed = trio.Event()

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            self._pending_loads = 4  # brokers, controller, shutting down, topic list
            nursery.start_soon(self._keep, self._read_brokers)
            nursery.start_soon(self._keep, self._read_shutting_down)
            nursery.start_soon(self._keep, self._read_controller)
            nursery.start_soon(self._keep, self._read_topics)
            task_status.started()

    def _loaded_one(self) -> None:
        self._pending_loads -= 1
        if self._pending_loads == 0:
            self.loaded.set()

    async def _keep(self, read: Callable[[], Awaitable[trio.Event | None]], *, first: bool = True) -> None:
        """Read, then read again at every change, until ``read`` says the znode is gone (None)."""
        store = self.zk.store
        while True:
            try:
                changed = await read()
            except StoreUnavailableError:
                while store.state is not SessionState.CONNECTED:
                    await store.wait_state_change(store.state)
                continue
            if first:
                first = False
                self._loaded_one()
            if changed is None:
                return
            await changed.wait()

    async def _read_brokers(self) -> trio.Event:
        brokers, changed = await self.zk.watch_brokers()
        if brokers != self.brokers:
            joined, left = sorted(set(brokers) - set(self.brokers)), sorted(set(self.brokers) - set(brokers))
            registered_again = sorted(
                b for b in brokers if b in self.brokers and brokers[b].epoch != self.brokers[b].epoch
            )
            self.brokers = brokers
            self.broker_epochs = {broker_id: registration.epoch for broker_id, registration in brokers.items()}
            logger.info(
                "brokers_changed", live=sorted(brokers), joined=joined, left=left, registered_again=registered_again
            )
            self._bump()
        return changed

    async def _read_shutting_down(self) -> trio.Event:
        shutting_down, changed = await self.zk.watch_shutting_down()
        if shutting_down != self.shutting_down:
            self.shutting_down = frozenset(shutting_down)
            self._bump()
        return changed

    async def _read_controller(self) -> trio.Event:
        controller, changed = await self.zk.watch_controller()
        if controller != self.controller_id:
            self.controller_id = controller
            self._bump()
        return changed

    async def _read_topics(self) -> trio.Event:
        names, changed = await self.zk.watch_topics()
        assert self._nursery is not None
        for name in names:
            if name not in self._topic_scopes:
                scope = self._topic_scopes[name] = trio.CancelScope()
                self._pending_loads += 2
                self._nursery.start_soon(self._scoped, scope, self._keep, self._topic_reader(name))
                config_scope = self._config_scopes[name] = trio.CancelScope()
                self._nursery.start_soon(self._scoped, config_scope, self._keep, self._config_reader(name))
        for name in [n for n in self._topic_scopes if n not in names]:
            self._forget_topic(name)
        return changed

    @staticmethod
    async def _scoped(scope: trio.CancelScope, fn, *args) -> None:
        with scope:
            await fn(*args)

    def _forget_topic(self, name: str) -> None:
        self._topic_scopes.pop(name).cancel()
        self._config_scopes.pop(name).cancel()
        for key in [k for k in self._state_scopes if k[0] == name]:
            self._state_scopes.pop(key).cancel()
            self.states.pop(key, None)
        self.configs.pop(name, None)
        if self.topics.pop(name, None) is not None:
            self._bump()

    def _topic_reader(self, name: str) -> Callable[[], Awaitable[trio.Event | None]]:
        async def read() -> trio.Event | None:
            node, changed = await self.zk.store.watch(f"/brokers/topics/{name}")
            if node is None:  # deleted: the topic list's watch forgets it
                return None
            assignment = TopicAssignment.decode(name, node.data)
            if assignment != self.topics.get(name):
                self.topics[name] = assignment
                self._bump()
            assert self._nursery is not None
            for partition in assignment.partitions:
                key = (name, partition)
                if key not in self._state_scopes:
                    scope = self._state_scopes[key] = trio.CancelScope()
                    self._pending_loads += 1
                    self._nursery.start_soon(self._scoped, scope, self._keep, self._state_reader(name, partition))
            return changed

        return read

    def _config_reader(self, name: str) -> Callable[[], Awaitable[trio.Event | None]]:
        async def read() -> trio.Event | None:
            config, changed = await self.zk.watch_topic_config(name)
            config = config or {}
            if config != self.configs.get(name):
                self.configs[name] = config
                self._bump()
            return changed

        return read

    def _state_reader(self, topic: str, partition: int) -> Callable[[], Awaitable[trio.Event | None]]:
        async def read() -> trio.Event | None:
            versioned, changed = await self.zk.watch_partition_state(topic, partition)
            key = (topic, partition)
            if versioned is None:
                if self.states.pop(key, None) is not None:
                    self._bump()
            elif versioned != self.states.get(key):
                self.states[key] = versioned
                self._bump()
            return changed

        return read
