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

import collections
import enum
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import partial

import structlog
import trio

from triolog.protocol.errors import ErrorCode, InvalidRequestError, NotControllerError

from .election import (
    bounced_replicas,
    elect_for_controlled_shutdown,
    elect_offline,
    elect_preferred,
    initial_state,
    remove_from_isr,
)
from .metadata_store import (
    BadVersionError,
    NodeExistsError,
    SessionState,
    StoreError,
    StoreUnavailableError,
    TransactionFailedError,
)
from .zk_client import ControllerFence, ControllerMovedError, KafkaZkClient, VersionedState
from .zk_data import NO_LEADER, PartitionState, TopicAssignment

logger = structlog.get_logger("triolog.cluster.controller")

#: How often a conditional write that lost a race to another writer (a leader changing its ISR)
#: is re-read and retried before the event is left to the next one.
STATE_WRITE_ATTEMPTS = 5
#: After a ZooKeeper error, how long the controller waits before trying again.
RETRY_BACKOFF_S = 0.2
#: What _change_state returns when every attempt lost its race.
_RETRY = object()


class ElectionType(enum.IntEnum):
    """ElectLeaders' election types (Kafka's ElectionType)."""

    PREFERRED = 0
    UNCLEAN = 1


class ElectionKind(enum.StrEnum):
    """Why the controller moved a leader (the elections metric's ``kind``)."""

    CLEAN = "clean"
    UNCLEAN = "unclean"
    PREFERRED = "preferred"
    CONTROLLED_SHUTDOWN = "controlled_shutdown"


@dataclass(frozen=True)
class BrokersView:
    """The brokers as one decision sees them: registered, and which of those are shutting down
    (Kafka's liveOrShuttingDownBrokerIds and shuttingDownBrokerIds)."""

    registered: frozenset[int]
    shutting_down: frozenset[int]
    #: Each registered broker's epoch (its registration's creation stamp).
    epochs: Mapping[int, int] = field(default_factory=dict)

    @property
    def eligible(self) -> frozenset[int]:
        """The brokers that may lead or stay in an ISR (Kafka's liveBrokerIds)."""
        return self.registered - self.shutting_down

    def as_of(self, versioned: VersionedState) -> BrokersView:
        """The brokers as a decision on this partition state sees them: its ISR members registered
        again since it was written are taken for dead (Kafka's controller handles a bounced
        broker as one that failed, then as one that started: this write puts it out, the next
        may take it in)."""
        bounced = bounced_replicas(versioned.state, self.epochs, versioned.modified)
        if not bounced:
            return self
        return BrokersView(self.registered - bounced, self.shutting_down - bounced, self.epochs)


@dataclass(frozen=True)
class RebalanceSettings:
    """``leader.imbalance.check.interval.seconds`` and ``leader.imbalance.per.broker.percentage``."""

    interval_s: float
    imbalance_percentage: int


class KafkaController:
    def __init__(
        self,
        zk: KafkaZkClient,
        broker_id: int,
        *,
        unclean_election: Callable[[str], Awaitable[bool]] | None = None,
        rebalance: RebalanceSettings | None = None,
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
        #: A change of the last reconciliation failed on a race: run again after a back-off.
        self._retry_later = False
        #: The auto-rebalance task's settings; None: auto.leader.rebalance.enable=false.
        self._rebalance = rebalance
        #: One decision at a time: a reconciliation, an election asked for, a rebalance (Kafka's
        #: single controller event thread).
        self._lock = trio.Lock()
        #: Leader elections this controller ran, by ElectionKind (for metrics).
        self.elections: collections.Counter[str] = collections.Counter()

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
                if controller == self.broker_id:
                    # Stood down while the session was suspended, and the session came back:
                    # /controller is still this broker's, so nobody else will take over. Go on
                    # (else the cluster would have no controller until this broker's session ends).
                    fence = await self.zk.resume_controller(self.broker_id)
                    if fence is not None:
                        logger.info("controller_resumed", broker_id=self.broker_id, controller_epoch=fence.epoch)
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
                nursery.start_soon(self._watch, self.zk.watch_shutting_down)
                nursery.start_soon(self._watch, self.zk.watch_topic_deletions)
                nursery.start_soon(self._watch_assignments)
                if self._rebalance is not None:
                    nursery.start_soon(self._rebalance_forever, fence, self._rebalance)
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

    async def _watch_assignments(self) -> None:
        """Wake the reconciler when a topic's assignment changes (partitions added: Kafka's
        PartitionModificationsHandler), one watch per topic."""
        watching: dict[str, trio.CancelScope] = {}

        async def watch(topic: str, scope: trio.CancelScope) -> None:
            with scope:
                await self._watch(partial(self.zk.watch_topic_assignment, topic))

        async with trio.open_nursery() as nursery:
            while True:
                try:
                    topics, changed = await self.zk.watch_topics()
                except StoreUnavailableError:
                    await self._wait_connected()
                    continue
                for topic in topics:
                    if topic not in watching:
                        watching[topic] = trio.CancelScope()
                        nursery.start_soon(watch, topic, watching[topic])
                for topic in [t for t in watching if t not in topics]:
                    watching.pop(topic).cancel()
                await changed.wait()

    async def _reconcile_forever(self, fence: ControllerFence) -> None:
        """One reconciliation after each batch of changes (Kafka's controller event queue, with
        events of a kind coalesced: each pass reads the whole current state)."""
        while True:
            await self._wakeup.wait()
            self._wakeup = trio.Event()
            try:
                async with self._lock:
                    await self.reconcile(fence)
                if self._retry_later:
                    self._retry_later = False
                    await trio.sleep(RETRY_BACKOFF_S)
                    self._wakeup.set()
            except StoreUnavailableError:
                await self._wait_connected()
                self._wakeup.set()

    # -- what the controller does ----------------------------------------------------------------

    async def _brokers(self) -> BrokersView:
        live = await self.zk.live_brokers()
        registered = frozenset(live)
        epochs = {broker_id: registration.epoch for broker_id, registration in live.items()}
        return BrokersView(registered, frozenset(await self.zk.shutting_down()) & registered, epochs)

    async def reconcile(self, fence: ControllerFence) -> None:
        """Bring every partition's state in line with the live brokers: new partitions get a state,
        partitions whose leader died or is shutting down get a new one, dead followers and those
        shutting down leave ISRs."""
        for topic in await self.zk.topics_to_delete():
            await self._delete_topic(fence, topic)
        brokers = await self._brokers()
        for topic in await self.zk.topics():
            assignment = await self.zk.topic_assignment(topic)
            if assignment is None:  # deleted meanwhile
                continue
            await self._reconcile_topic(fence, topic, assignment, brokers)

    async def _delete_topic(self, fence: ControllerFence, topic: str) -> None:
        """Kafka's TopicDeletionManager, without its wait for every replica to be online: the
        topic's znodes go at once, each broker drops its replicas when it sees the assignment
        go, and a broker that was away drops them at its return (by the topic id its
        partition directories carry, a topic made again under the name is told apart)."""
        try:
            await self.zk.delete_topic(fence, topic)
        except TransactionFailedError as failed:  # changed meanwhile (a partition's state made)
            logger.warning("topic_deletion_retried", topic=topic, error=repr(failed.cause))
            self._retry_later = True
            return
        logger.info("topic_deleted", topic=topic)

    async def _reconcile_topic(
        self, fence: ControllerFence, topic: str, assignment: TopicAssignment, brokers: BrokersView
    ) -> None:
        new_states = {}
        for partition, replicas in sorted(assignment.partitions.items()):
            current = await self.zk.partition_state(topic, partition)
            if current is None:
                state = initial_state(replicas, brokers.eligible, controller_epoch=fence.epoch)
                if state.leader != NO_LEADER:  # with no live replica, wait for one (Kafka does)
                    new_states[partition] = state
                continue
            await self._reconcile_partition(fence, topic, partition, replicas, brokers)
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
        self, fence: ControllerFence, topic: str, partition: int, replicas: tuple[int, ...], brokers: BrokersView
    ) -> None:
        async def decide(state: PartitionState, brokers: BrokersView) -> tuple[PartitionState | None, str]:
            return await self._decide(topic, replicas, state, brokers, fence.epoch)

        outcome = await self._change_state(fence, topic, partition, brokers, decide)
        if outcome is _RETRY:
            self._wakeup.set()
        elif (
            isinstance(outcome, PartitionState) and outcome.leader == NO_LEADER and brokers.eligible & set(outcome.isr)
        ):
            # A bounced broker, the partition's last in-sync replica, was put out: now that the
            # state is newer than its registration, the next pass elects it again.
            self._wakeup.set()

    async def _change_state(
        self,
        fence: ControllerFence,
        topic: str,
        partition: int,
        brokers: BrokersView,
        decide: Callable[[PartitionState, BrokersView], Awaitable[tuple[PartitionState | None, str]]],
    ) -> PartitionState | None | object:
        """Read, decide (on the brokers as that state sees them), write conditionally; again when
        a leader's ISR change got in first. The state written, None if ``decide`` wanted none (or
        the partition has no state), _RETRY if every attempt lost its race."""
        for _ in range(STATE_WRITE_ATTEMPTS):
            current = await self.zk.partition_state(topic, partition)
            if current is None:
                return None
            wanted, kind = await decide(current.state, brokers.as_of(current))
            if wanted is None:
                return None
            try:
                await self.zk.update_partition_state(fence, topic, partition, wanted, current.version)
            except BadVersionError:
                continue  # the leader changed its ISR meanwhile: decide again on what it wrote
            if kind:
                self.elections[kind] += 1
            self._log_change(topic, partition, current.state, wanted, kind)
            return wanted
        return _RETRY

    async def _decide(
        self, topic: str, replicas: tuple[int, ...], state: PartitionState, brokers: BrokersView, epoch: int
    ) -> tuple[PartitionState | None, str]:
        """The state a partition should move to, and the kind of election that is ("" for an ISR
        change alone): Kafka's rules for a dead leader, a leader shutting down, and followers
        that died or are shutting down (who are not live for any of them)."""
        live = brokers.eligible
        if state.leader == NO_LEADER or state.leader not in brokers.registered:
            unclean = await self._unclean(topic) if self._unclean is not None else False
            elected = elect_offline(replicas, state, live, unclean=unclean, controller_epoch=epoch)
            if elected.leader == NO_LEADER and state.leader == NO_LEADER:
                return None, ""  # still nobody to lead: no new epoch for nothing
            if elected.leader != NO_LEADER and elected.leader not in state.isr:
                return elected, ElectionKind.UNCLEAN
            return elected, ElectionKind.CLEAN
        if state.leader in brokers.shutting_down:
            # To the first live in-sync replica that stays; with none, the leader stays too (it is
            # the partition's only copy the broker's shutdown then waits out or leaves behind).
            moved = elect_for_controlled_shutdown(
                replicas, state, brokers.registered, brokers.shutting_down, controller_epoch=epoch
            )
            if moved is not None:
                return moved, ElectionKind.CONTROLLED_SHUTDOWN
        gone = {r for r in state.isr if r not in live and r != state.leader}
        if gone and len(state.isr) > 1:
            return remove_from_isr(state, gone, controller_epoch=epoch), ""
        return None, ""

    # -- elections asked for -----------------------------------------------------------------------

    async def elect_leaders(
        self, election_type: int, partitions: Iterable[tuple[str, int]] | None
    ) -> dict[tuple[str, int], tuple[ErrorCode, str | None]]:
        """Kafka's ElectLeaders on the controller: per partition NONE once elected, or
        ELECTION_NOT_NEEDED, PREFERRED_LEADER_NOT_AVAILABLE, ELIGIBLE_LEADERS_NOT_AVAILABLE,
        UNKNOWN_TOPIC_OR_PARTITION. ``partitions`` None: every partition. Raises NotControllerError
        on a broker that is not the controller."""
        fence = self.fence
        if fence is None:
            raise NotControllerError(f"broker {self.broker_id} is not the controller")
        if election_type not in (ElectionType.PREFERRED, ElectionType.UNCLEAN):
            raise InvalidRequestError(f"unknown election type {election_type}")
        async with self._lock:
            try:
                return await self._elect(fence, ElectionType(election_type), partitions)
            except ControllerMovedError:
                raise NotControllerError(f"broker {self.broker_id} is no longer the controller") from None

    async def _elect(
        self, fence: ControllerFence, election_type: ElectionType, partitions: Iterable[tuple[str, int]] | None
    ) -> dict[tuple[str, int], tuple[ErrorCode, str | None]]:
        brokers = await self._brokers()
        assignments: dict[str, TopicAssignment | None] = {}
        if partitions is None:
            for topic in await self.zk.topics():
                assignments[topic] = await self.zk.topic_assignment(topic)
            partitions = [(t, p) for t, a in sorted(assignments.items()) if a is not None for p in sorted(a.partitions)]
        results: dict[tuple[str, int], tuple[ErrorCode, str | None]] = {}
        for topic, partition in partitions:
            if topic not in assignments:
                assignments[topic] = await self.zk.topic_assignment(topic)
            assignment = assignments[topic]
            if assignment is None or partition not in assignment.partitions:
                results[topic, partition] = (
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    f"partition {topic}-{partition} does not exist",
                )
                continue
            results[topic, partition] = await self._elect_one(
                fence, election_type, topic, partition, assignment.partitions[partition], brokers
            )
        return results

    async def _elect_one(
        self,
        fence: ControllerFence,
        election_type: ElectionType,
        topic: str,
        partition: int,
        replicas: tuple[int, ...],
        brokers: BrokersView,
    ) -> tuple[ErrorCode, str | None]:
        refusal: tuple[ErrorCode, str | None] = (ErrorCode.NONE, None)
        name = f"{topic}-{partition}"

        async def decide(state: PartitionState, brokers: BrokersView) -> tuple[PartitionState | None, str]:
            nonlocal refusal
            if election_type is ElectionType.PREFERRED:
                if state.leader == replicas[0] and state.leader in brokers.registered:
                    refusal = (ErrorCode.ELECTION_NOT_NEEDED, f"{name}: its preferred replica already leads")
                    return None, ""
                elected = elect_preferred(replicas, state, brokers.eligible, controller_epoch=fence.epoch)
                if elected is None:
                    refusal = (
                        ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
                        f"{name}: preferred replica {replicas[0]} is not live and in sync",
                    )
                return elected, ElectionKind.PREFERRED
            if state.leader != NO_LEADER and state.leader in brokers.registered:
                refusal = (ErrorCode.ELECTION_NOT_NEEDED, f"{name}: it has a leader ({state.leader})")
                return None, ""
            elected = elect_offline(replicas, state, brokers.eligible, unclean=True, controller_epoch=fence.epoch)
            if elected.leader == NO_LEADER:
                refusal = (ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE, f"{name}: none of its replicas is live")
                return None, ""
            return elected, ElectionKind.UNCLEAN if elected.leader not in state.isr else ElectionKind.CLEAN

        outcome = await self._change_state(fence, topic, partition, brokers, decide)
        if outcome is _RETRY:
            return ErrorCode.REQUEST_TIMED_OUT, f"{name}: its state kept changing; try again"
        if outcome is None and refusal[0] == ErrorCode.NONE:
            return ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE, f"{name}: it has no state yet"
        return refusal

    # -- the auto-rebalance task -----------------------------------------------------------------

    async def _rebalance_forever(self, fence: ControllerFence, settings: RebalanceSettings) -> None:
        """Kafka's checkAndTriggerAutoLeaderRebalance, every ``leader.imbalance.check.interval.seconds``."""
        while True:
            await trio.sleep(settings.interval_s)
            async with self._lock:
                await self.rebalance(fence, settings.imbalance_percentage)

    async def rebalance(self, fence: ControllerFence, imbalance_percentage: int) -> None:
        """Per broker, the share of the partitions it is preferred for that another broker leads;
        over the percentage, leadership goes back to it wherever it is live and in sync."""
        brokers = await self._brokers()
        preferred_of: dict[int, list[tuple[str, int, tuple[int, ...]]]] = {}
        for topic in await self.zk.topics():
            assignment = await self.zk.topic_assignment(topic)
            if assignment is None:
                continue
            for partition, replicas in sorted(assignment.partitions.items()):
                if replicas:
                    preferred_of.setdefault(replicas[0], []).append((topic, partition, replicas))
        for broker_id, owned in sorted(preferred_of.items()):
            if broker_id not in brokers.eligible:
                continue
            elsewhere = []
            for topic, partition, replicas in owned:
                current = await self.zk.partition_state(topic, partition)
                if current is not None and current.state.leader not in (broker_id, NO_LEADER):
                    elsewhere.append((topic, partition, replicas))
            if not elsewhere or len(elsewhere) * 100 <= imbalance_percentage * len(owned):
                continue
            logger.info(
                "leader_imbalance",
                broker_id=broker_id,
                not_leading=len(elsewhere),
                preferred_for=len(owned),
                threshold_percent=imbalance_percentage,
            )
            for topic, partition, replicas in elsewhere:
                await self._elect_one(fence, ElectionType.PREFERRED, topic, partition, replicas, brokers)

    @staticmethod
    def _log_change(topic: str, partition: int, old: PartitionState, new: PartitionState, kind: str) -> None:
        logger.info(
            "partition_state_changed",
            topic=topic,
            partition=partition,
            leader=new.leader,
            previous_leader=old.leader,
            leader_epoch=new.leader_epoch,
            isr=list(new.isr),
            election=kind or None,
            unclean=bool(new.leader_recovery_state),
        )
