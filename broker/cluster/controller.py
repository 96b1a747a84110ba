"""The controller: one broker of the cluster keeps every partition led (Kafka's KafkaController in
ZooKeeper mode, without its RPCs: brokers watch the state znodes it writes).

Every broker runs one. While ``/controller`` is free, each tries to take it (with the next
controller epoch, in one conditional write); the winner serves until its session ends or the
epoch moves on, and the others watch ``/controller`` to try again when it goes. While active it
reacts to brokers joining and leaving and to new topics, one event at a time; each reaction
re-reads the partition states it changes and writes them conditionally on their version and on
its epoch, so a deposed controller (a zombie paused past its session) writes nothing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import structlog
import trio

from .election import elect_offline, initial_state, remove_from_isr
from .metadata_store import BadVersionError, NodeExistsError, SessionState, StoreError, StoreUnavailableError
from .zk_client import ControllerFence, ControllerMovedError, KafkaZkClient
from .zk_data import NO_LEADER, PartitionState, TopicAssignment

logger = structlog.get_logger("triolog.cluster.controller")

#: How often a conditional write that lost a race to another writer (a leader changing its ISR)
#: is re-read and retried before the event is left to the next one.
STATE_WRITE_ATTEMPTS = 5
#: After a ZooKeeper error, how long the controller waits before trying again.
RETRY_BACKOFF_S = 0.2


class KafkaController:
    def __init__(
        self,
        zk: KafkaZkClient,
        broker_id: int,
        *,
        unclean_election: Callable[[str], Awaitable[bool]] | None = None,
    ):
        self.zk = zk
        self.broker_id = broker_id
        #: Whether a topic allows unclean leader election (its config over the broker default).
        self._unclean = unclean_election
        #: The fence of this broker's term as controller, None while another broker is controller.
        self.fence: ControllerFence | None = None
        #: Set each time this broker's view of who is controller changes (tests, metrics).
        self.changed = trio.Event()
        self._wakeup = trio.Event()
        #: Elections this controller ran (for metrics): clean, unclean.
        self.elections = 0
        self.unclean_elections = 0

    @property
    def active(self) -> bool:
        return self.fence is not None

    def _set_fence(self, fence: ControllerFence | None) -> None:
        self.fence = fence
        self.changed.set()
        self.changed = trio.Event()

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            try:
                controller, moved = await self.zk.watch_controller()
                if controller is None:
                    fence = await self.zk.try_become_controller(self.broker_id)
                    if fence is not None:
                        await self._serve(fence)
                    continue
                await moved.wait()
            except (StoreUnavailableError, ControllerMovedError):
                await self._wait_connected()
            except StoreError:
                logger.exception("controller_store_error")
                await trio.sleep(RETRY_BACKOFF_S)

    async def _wait_connected(self) -> None:
        store = self.zk.store
        while store.state is not SessionState.CONNECTED:
            await store.wait_state_change(store.state)
        await trio.sleep(RETRY_BACKOFF_S)

    async def _serve(self, fence: ControllerFence) -> None:
        """This broker's term as controller: until it loses /controller or its session."""
        self._set_fence(fence)
        logger.info("controller_elected", broker_id=self.broker_id, controller_epoch=fence.epoch)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._watch_own_registration, nursery.cancel_scope)
                nursery.start_soon(self._watch_session, nursery.cancel_scope)
                nursery.start_soon(self._watch, self.zk.watch_brokers)
                nursery.start_soon(self._watch, self.zk.watch_topics)
                await self._reconcile_forever(fence)
        except* ControllerMovedError:
            logger.info("controller_moved", broker_id=self.broker_id, controller_epoch=fence.epoch)
        except* StoreUnavailableError:
            pass  # the session is suspended or lost: run() waits for it, then stands again
        except* StoreError as group:
            logger.error("controller_store_error", error=repr(group.exceptions[0]))
            await trio.sleep(RETRY_BACKOFF_S)
        finally:
            self._set_fence(None)
            logger.info("controller_resigned", broker_id=self.broker_id, controller_epoch=fence.epoch)

    async def _watch_own_registration(self, term: trio.CancelScope) -> None:
        while True:
            controller, moved = await self.zk.watch_controller()
            if controller != self.broker_id:
                term.cancel()
                return
            await moved.wait()

    async def _watch_session(self, term: trio.CancelScope) -> None:
        """A suspended session may be expiring: another broker may be elected meanwhile, so this one
        stops acting at once (its writes would be fenced anyway) and stands again when connected."""
        store = self.zk.store
        while store.state is SessionState.CONNECTED:
            await store.wait_state_change(SessionState.CONNECTED)
        term.cancel()

    async def _watch(self, read: Callable[[], Awaitable[tuple[object, trio.Event]]]) -> None:
        """Wake the reconciler at every change of what ``read`` watches."""
        while True:
            try:
                _, changed = await read()
            except StoreUnavailableError:
                await self._wait_connected()
                continue
            self._wakeup.set()
            await changed.wait()

    async def _reconcile_forever(self, fence: ControllerFence) -> None:
        """One reconciliation after each batch of changes (Kafka's controller event queue, with
        events of a kind coalesced: each pass reads the whole current state)."""
        while True:
            await self._wakeup.wait()
            self._wakeup = trio.Event()
            try:
                await self.reconcile(fence)
            except StoreUnavailableError:
                await self._wait_connected()
                self._wakeup.set()

    # -- what the controller does ----------------------------------------------------------------

    async def reconcile(self, fence: ControllerFence) -> None:
        """Bring every partition's state in line with the live brokers: new partitions get a state,
        partitions whose leader died get a new one, dead followers leave ISRs."""
        live = set(await self.zk.live_brokers())
        for topic in await self.zk.topics():
            assignment = await self.zk.topic_assignment(topic)
            if assignment is None:  # deleted meanwhile
                continue
            await self._reconcile_topic(fence, topic, assignment, live)

    async def _reconcile_topic(
        self, fence: ControllerFence, topic: str, assignment: TopicAssignment, live: set[int]
    ) -> None:
        new_states = {}
        for partition, replicas in sorted(assignment.partitions.items()):
            current = await self.zk.partition_state(topic, partition)
            if current is None:
                state = initial_state(replicas, live, controller_epoch=fence.epoch)
                if state.leader != NO_LEADER:  # with no live replica, wait for one (Kafka does)
                    new_states[partition] = state
                continue
            await self._reconcile_partition(fence, topic, partition, replicas, live)
        if new_states:
            try:
                await self.zk.create_partition_states(fence, topic, new_states)
            except StoreError as exc:
                if not isinstance(getattr(exc, "cause", None), NodeExistsError):
                    raise
                # Another pass (or a previous term) created some: the next pass handles the rest.
                self._wakeup.set()
            else:
                for partition, state in sorted(new_states.items()):
                    logger.info(
                        "partition_online", topic=topic, partition=partition, leader=state.leader, isr=list(state.isr)
                    )

    async def _reconcile_partition(
        self, fence: ControllerFence, topic: str, partition: int, replicas: tuple[int, ...], live: set[int]
    ) -> None:
        for _ in range(STATE_WRITE_ATTEMPTS):
            current = await self.zk.partition_state(topic, partition)
            if current is None:
                return
            wanted = await self._decide(topic, replicas, current.state, live, fence.epoch)
            if wanted is None:
                return
            try:
                await self.zk.update_partition_state(fence, topic, partition, wanted, current.version)
            except BadVersionError:
                continue  # the leader changed its ISR meanwhile: decide again on what it wrote
            self._log_change(topic, partition, current.state, wanted)
            return
        self._wakeup.set()

    async def _decide(
        self, topic: str, replicas: tuple[int, ...], state: PartitionState, live: set[int], epoch: int
    ) -> PartitionState | None:
        if state.leader == NO_LEADER or state.leader not in live:
            unclean = await self._unclean(topic) if self._unclean is not None else False
            elected = elect_offline(replicas, state, live, unclean=unclean, controller_epoch=epoch)
            if elected.leader == NO_LEADER and state.leader == NO_LEADER:
                return None  # still nobody to lead: no new epoch for nothing
            self.elections += 1
            if elected.leader != NO_LEADER and elected.leader not in state.isr:
                self.unclean_elections += 1
            return elected
        dead = {r for r in state.isr if r not in live}
        if dead and len(state.isr) > 1:
            return remove_from_isr(state, dead, controller_epoch=epoch)
        return None

    @staticmethod
    def _log_change(topic: str, partition: int, old: PartitionState, new: PartitionState) -> None:
        logger.info(
            "partition_state_changed",
            topic=topic,
            partition=partition,
            leader=new.leader,
            previous_leader=old.leader,
            leader_epoch=new.leader_epoch,
            isr=list(new.isr),
            unclean=bool(new.leader_recovery_state),
        )
