"""The classic consumer-group coordinator (Kafka's ``GroupCoordinator.scala``): joins, syncs,
heartbeats, leaves, offset commits and fetches, group listing and deletion.

Pure and single-threaded: the server calls it from its event loop only. Time comes from an
injected clock (``milliseconds()``); Kafka's purgatories (DelayedJoin, InitialDelayedJoin,
DelayedSync, DelayedHeartbeat) are deadlines in a heap that :meth:`GroupCoordinator.poll` fires
(the server runs it from a timer task; tests move a ManualClock). A JoinGroup or SyncGroup that
must wait is parked as a callback, called exactly once with its result. Writes to
``__consumer_offsets`` go through the injected ``store(partition, records, done)``, which calls
``done(error, base_offset)`` once the records are durable (or failed): offsets become visible,
and commits are answered, only then.
"""

from __future__ import annotations

import heapq
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple

from triolog.protocol.errors import ErrorCode

from .group_metadata import GroupMetadata, GroupState, MemberMetadata, OffsetAndMetadata
from .group_metadata_manager import (
    LoadedPartition,
    StoredGroup,
    StoredMember,
    group_metadata_key,
    group_metadata_value,
    offset_commit_key,
    offset_commit_value,
    partition_for,
)

#: Kafka's NewMemberJoinTimeoutMs: a member that joined but never completes the rebalance is
#: dropped after this long.
NEW_MEMBER_JOIN_TIMEOUT_MS = 5 * 60 * 1000


class Error(NamedTuple):
    """A refusal: Kafka's error code and the message sent with it."""

    code: ErrorCode
    message: str


Record = tuple[bytes, bytes | None]
StoreDone = Callable[[Error | None, int], None]
#: store(partition, records, done) writes one batch; store(..., producer=(id, epoch)) writes it in
#: that producer's transaction (a TxnOffsetCommit: transactional, decided by the producer's marker).
Store = Callable[..., None]


@dataclass(frozen=True)
class GroupConfig:
    num_partitions: int = 50
    initial_rebalance_delay_ms: int = 3000
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1800000
    max_size: int = 2**31 - 1
    offset_metadata_max_bytes: int = 4096
    offsets_retention_ms: int = 10080 * 60000

    @classmethod
    def from_broker_config(cls, config) -> GroupConfig:
        return cls(
            num_partitions=config.offsets_topic_num_partitions,
            initial_rebalance_delay_ms=config.group_initial_rebalance_delay_ms,
            min_session_timeout_ms=config.group_min_session_timeout_ms,
            max_session_timeout_ms=config.group_max_session_timeout_ms,
            max_size=config.group_max_size,
            offset_metadata_max_bytes=config.offset_metadata_max_bytes,
            offsets_retention_ms=config.offsets_retention_minutes * 60000,
        )


@dataclass(frozen=True)
class JoinResult:
    error_code: ErrorCode = ErrorCode.NONE
    error_message: str | None = None
    member_id: str = ""
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    #: (member_id, group_instance_id, metadata): every member, for the leader only.
    members: tuple[tuple[str, str | None, bytes], ...] = ()


@dataclass(frozen=True)
class SyncResult:
    error_code: ErrorCode = ErrorCode.NONE
    error_message: str | None = None
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(frozen=True)
class CommitRequest:
    topic: str
    partition: int
    offset: int
    leader_epoch: int = -1
    metadata: str | None = None


@dataclass(frozen=True)
class MemberSummary:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True)
class GroupSummary:
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: tuple[MemberSummary, ...]
    error: Error | None = None


@dataclass
class _DelayedJoin:
    deadline: int
    initial: bool
    #: InitialDelayedJoin: how much of the rebalance timeout is left to wait for more members.
    remaining_ms: int = 0


def _err(code: ErrorCode, message: str) -> Error:
    return Error(code, message)


#: Kafka's GroupMetadataManager: what a failed write of __consumer_offsets tells the client.
#: storeGroup (the SyncGroup leader's assignment, delete tombstones) and storeOffsets (OffsetCommit)
#: differ only for a record set that is too large. Any other code passes through unchanged.
_STORE_ERRORS = {
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_OR_FOLLOWER: ErrorCode.NOT_COORDINATOR,
    ErrorCode.KAFKA_STORAGE_ERROR: ErrorCode.NOT_COORDINATOR,
}
_GROUP_STORE_ERRORS = {
    **_STORE_ERRORS,
    ErrorCode.REQUEST_TIMED_OUT: ErrorCode.REBALANCE_IN_PROGRESS,
    ErrorCode.MESSAGE_TOO_LARGE: ErrorCode.UNKNOWN_SERVER_ERROR,
}
_OFFSET_STORE_ERRORS = {**_STORE_ERRORS, ErrorCode.MESSAGE_TOO_LARGE: ErrorCode.INVALID_COMMIT_OFFSET_SIZE}


def group_store_error(error: Error) -> Error:
    """The error a failed storeGroup write (or group tombstone) answers with."""
    code, message = error  # (a store's callback may pass any (code, message) pair)
    return Error(_GROUP_STORE_ERRORS.get(code, code), message)


def offset_store_error(error: Error) -> Error:
    """The error a failed storeOffsets write answers each of its partitions with."""
    code, message = error
    return Error(_OFFSET_STORE_ERRORS.get(code, code), message)


class GroupCoordinator:
    def __init__(self, config: GroupConfig, clock, store: Store, wakeup: Callable[[], None] = lambda: None):
        self.config = config
        self.clock = clock
        self._store = store
        #: Called when a new deadline is set (the server's timer task then sleeps less).
        self._wakeup = wakeup
        self.groups: dict[str, GroupMetadata] = {}
        #: False until startup(); every group API then answers COORDINATOR_NOT_AVAILABLE.
        self.active = False
        #: __consumer_offsets partitions being loaded: their groups answer COORDINATOR_LOAD_IN_PROGRESS.
        self.loading: set[int] = set()
        #: On a cluster, the __consumer_offsets partitions this broker leads (the groups it
        #: coordinates; others answer NOT_COORDINATOR); None on a single broker: all of them.
        self.owned: set[int] | None = None
        #: (deadline, sequence, kind, group id, key): the key is what the kind's handler takes.
        self._timers: list[tuple[int, int, str, str, Any]] = []
        self._seq = 0
        self._delayed_joins: dict[str, _DelayedJoin] = {}
        #: Counters for metrics.
        self.rebalances = 0
        self.rebalance_ms_total = 0
        self._rebalance_started: dict[str, int] = {}

    # -- lifecycle ---------------------------------------------------------------------------

    def startup(self, loading_partitions: Iterable[int], owned: Iterable[int] | None = None) -> None:
        self.loading = set(loading_partitions)
        self.owned = None if owned is None else set(owned)
        self.active = True

    def take_partition(self, partition: int) -> None:
        """This broker now leads the partition (a cluster's): its groups are loaded next, and
        answer COORDINATOR_LOAD_IN_PROGRESS meanwhile (Kafka's onElection)."""
        if self.owned is not None:
            self.owned.add(partition)
        self.loading.add(partition)

    def release_partition(self, partition: int) -> int:
        """This broker no longer leads the partition (Kafka's onResignation): its groups go, their
        parked joins and syncs answered NOT_COORDINATOR, so that their members find the new
        coordinator. The groups dropped."""
        if self.owned is not None:
            self.owned.discard(partition)
        self.loading.discard(partition)
        gone = [group_id for group_id in self.groups if self.partition_for(group_id) == partition]
        message = f"this broker no longer leads __consumer_offsets partition {partition}"
        for group_id in gone:
            group = self.groups.pop(group_id)
            self._delayed_joins.pop(group_id, None)
            self._rebalance_started.pop(group_id, None)
            for member in group.members.values():
                self._answer_join(member, JoinResult(ErrorCode.NOT_COORDINATOR, message, member_id=member.member_id))
                self._answer_sync(member, SyncResult(ErrorCode.NOT_COORDINATOR, message))
        if gone:
            dropped = set(gone)
            self._timers = [t for t in self._timers if t[3] not in dropped]
            heapq.heapify(self._timers)
        return len(gone)

    def shutdown(self) -> None:
        """Answer every parked request (Kafka completes its purgatories with NOT_COORDINATOR)."""
        self.active = False
        for group in self.groups.values():
            for member in group.members.values():
                self._answer_join(
                    member,
                    JoinResult(
                        ErrorCode.NOT_COORDINATOR, "the coordinator is shutting down", member_id=member.member_id
                    ),
                )
                self._answer_sync(member, SyncResult(ErrorCode.NOT_COORDINATOR, "the coordinator is shutting down"))

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.config.num_partitions)

    def load_partition(self, partition: int, loaded: LoadedPartition) -> int:
        """Install the groups and offsets replayed from one partition; the groups it brought."""
        now = self.now()
        pending_groups = {g for by_group in loaded.pending_txn_offsets.values() for g in by_group}
        names = set(loaded.groups) | {g for g, offsets in loaded.offsets.items() if offsets} | pending_groups
        for group_id in names:
            if self.partition_for(group_id) != partition:
                continue
            stored = loaded.groups.get(group_id)
            group = GroupMetadata(group_id, current_state_timestamp=now)
            if stored is not None:
                group.generation_id = stored.generation
                group.protocol_type = stored.protocol_type
                group.protocol_name = stored.protocol
                group.leader_id = stored.leader
                if stored.current_state_timestamp >= 0:
                    group.current_state_timestamp = stored.current_state_timestamp
                for sm in stored.members:
                    protocols = ((stored.protocol, sm.subscription),) if stored.protocol else ()
                    member = MemberMetadata(
                        sm.member_id,
                        sm.group_instance_id,
                        sm.client_id,
                        sm.client_host,
                        sm.rebalance_timeout_ms,
                        sm.session_timeout_ms,
                        stored.protocol_type,
                        protocols,
                        assignment=sm.assignment,
                    )
                    group.members[sm.member_id] = member
                if group.members:
                    group.state = GroupState.STABLE
                    if group.leader_id not in group.members:
                        group.leader_id = next(iter(group.members))
                    for member in group.members.values():
                        self._schedule_heartbeat(group, member, member.session_timeout_ms)
                else:
                    group.leader_id = None
            group.offsets = dict(loaded.offsets.get(group_id, {}))
            for producer_id, by_group in loaded.pending_txn_offsets.items():
                if group_id in by_group:
                    group.pending_txn_offsets[producer_id] = dict(by_group[group_id])
            self.groups[group_id] = group
        self.loading.discard(partition)
        return len(names)

    def now(self) -> int:
        return self.clock.milliseconds()

    # -- pre-checks --------------------------------------------------------------------------

    def _status_error(self, group_id: str) -> Error | None:
        """Kafka's validateGroupStatus."""
        if not group_id:
            return _err(ErrorCode.INVALID_GROUP_ID, "group_id must not be empty")
        if not self.active:
            return _err(ErrorCode.COORDINATOR_NOT_AVAILABLE, "the group coordinator is not running yet")
        if self.owned is not None and self.partition_for(group_id) not in self.owned:
            return _err(
                ErrorCode.NOT_COORDINATOR,
                f"group {group_id!r} is coordinated by the leader of __consumer_offsets partition "
                f"{self.partition_for(group_id)}, not by this broker",
            )
        if self.partition_for(group_id) in self.loading:
            return _err(
                ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                f"__consumer_offsets partition {self.partition_for(group_id)} of group {group_id!r} "
                f"is still being loaded",
            )
        return None

    # -- timers ------------------------------------------------------------------------------

    def _schedule(self, deadline: int, kind: str, group_id: str, key: object = None) -> None:
        self._seq += 1
        first = not self._timers or deadline < self._timers[0][0]
        heapq.heappush(self._timers, (deadline, self._seq, kind, group_id, key))
        if first:
            self._wakeup()

    def next_deadline(self) -> int | None:
        return self._timers[0][0] if self._timers else None

    def poll(self) -> int | None:
        """Fire every deadline that is due; the next deadline (ms) or None."""
        now = self.now()
        while self._timers and self._timers[0][0] <= now:
            deadline, _, kind, group_id, key = heapq.heappop(self._timers)
            group = self.groups.get(group_id)
            if group is None:
                continue
            if kind == "join":
                self._on_join_deadline(group, key)
            elif kind == "sync":
                self._on_sync_deadline(group, key)
            elif kind == "heartbeat":
                self._on_heartbeat_deadline(group, key, now, deadline)
            elif kind == "pending":
                if key in group.pending_members:
                    self._remove_pending_member(group, key)
        return self.next_deadline()

    def _schedule_heartbeat(self, group: GroupMetadata, member: MemberMetadata, timeout_ms: int) -> None:
        member.heartbeat_deadline = self.now() + timeout_ms
        # At most one pending entry per member: a later deadline waits for the pending entry to fire
        # and re-arm; only an earlier one (a shorter timeout) needs an entry of its own.
        if member.heartbeat_timer is None or member.heartbeat_deadline < member.heartbeat_timer:
            member.heartbeat_timer = member.heartbeat_deadline
            self._schedule(member.heartbeat_deadline, "heartbeat", group.group_id, member.member_id)

    def _on_heartbeat_deadline(self, group: GroupMetadata, member_id: str, now: int, deadline: int) -> None:
        member = group.members.get(member_id)
        if member is None or member.heartbeat_timer != deadline:
            return  # gone, or an entry superseded by an earlier one
        member.heartbeat_timer = None
        if member.heartbeat_deadline > now:  # heartbeated since: watch the new deadline
            member.heartbeat_timer = member.heartbeat_deadline
            self._schedule(member.heartbeat_deadline, "heartbeat", group.group_id, member.member_id)
            return
        if (member.awaiting_join is not None and not member.is_new) or member.awaiting_sync is not None:
            # A parked rejoin or sync keeps the member (the join or sync deadline decides); look again later.
            self._schedule_heartbeat(group, member, member.session_timeout_ms)
            return
        self._remove_member_and_update(group, member, "session timeout expired")

    # -- join --------------------------------------------------------------------------------

    def handle_join_group(
        self,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        client_id: str,
        client_host: str,
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        protocol_type: str,
        protocols: tuple[tuple[str, bytes], ...],
        respond: Callable[[JoinResult], None],
    ) -> None:
        def fail(code: ErrorCode, message: str) -> None:
            respond(JoinResult(code, message, member_id=member_id))

        error = self._status_error(group_id)
        if error is not None:
            return fail(*error)
        config = self.config
        if not config.min_session_timeout_ms <= session_timeout_ms <= config.max_session_timeout_ms:
            return fail(
                ErrorCode.INVALID_SESSION_TIMEOUT,
                f"session_timeout_ms={session_timeout_ms} is outside [group.min.session.timeout.ms="
                f"{config.min_session_timeout_ms}, group.max.session.timeout.ms="
                f"{config.max_session_timeout_ms}]",
            )
        if rebalance_timeout_ms < 0:
            rebalance_timeout_ms = session_timeout_ms
        group = self.groups.get(group_id)
        if group is None:
            if member_id:
                return fail(
                    ErrorCode.UNKNOWN_MEMBER_ID,
                    f'group {group_id!r} does not exist (member {member_id!r} is not known): rejoin with member_id ""',
                )
            group = self.groups[group_id] = GroupMetadata(group_id, current_state_timestamp=self.now())
        if not self._accept_joining_member(group, member_id):
            return fail(
                ErrorCode.GROUP_MAX_SIZE_REACHED,
                f"group {group_id!r} has reached group.max.size={config.max_size} members",
            )
        if group.is_in(GroupState.DEAD):
            return fail(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"group {group_id!r} is being removed; retry")
        if not group.supports_protocols(protocol_type, {name for name, _ in protocols}):
            return fail(
                ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
                f"protocol_type {protocol_type!r} with protocols {[n for n, _ in protocols]} does not fit "
                f"group {group_id!r} (type {group.protocol_type!r}, protocols every member supports: "
                f"{sorted(group.candidate_protocols())})",
            )
        if not member_id:
            # v4+ behaviour: hand out the id, the member joins again with it.
            new_id = f"{client_id}-{uuid.uuid4()}"
            group.pending_members.add(new_id)
            self._schedule(self.now() + session_timeout_ms, "pending", group_id, new_id)
            return respond(
                JoinResult(
                    ErrorCode.MEMBER_ID_REQUIRED,
                    "join again with the member_id given in this response",
                    member_id=new_id,
                )
            )
        if member_id in group.pending_members:
            group.pending_members.discard(member_id)
            joined = MemberMetadata(
                member_id,
                group_instance_id,
                client_id,
                client_host,
                rebalance_timeout_ms,
                session_timeout_ms,
                protocol_type,
                tuple(protocols),
                awaiting_join=respond,
                is_new=True,
            )
            if group.is_in(GroupState.PREPARING_REBALANCE) and group.generation_id == 0:
                group.new_member_added = True
            group.add(joined)
            self._schedule_heartbeat(group, joined, NEW_MEMBER_JOIN_TIMEOUT_MS)
            self._maybe_prepare_rebalance(group, f"member {member_id} joined")
            self._try_complete_join(group)
            return None
        member = group.members.get(member_id)
        if member is None:
            return fail(ErrorCode.UNKNOWN_MEMBER_ID, f"member {member_id!r} is not in group {group_id!r}")
        state = group.state
        if state is GroupState.PREPARING_REBALANCE:
            self._update_member(group, member, rebalance_timeout_ms, session_timeout_ms, protocols, respond)
            self._try_complete_join(group)
        elif state is GroupState.COMPLETING_REBALANCE:
            if member.matches(protocols):
                respond(self._join_result(group, member))
            else:
                self._update_member(group, member, rebalance_timeout_ms, session_timeout_ms, protocols, respond)
                self._maybe_prepare_rebalance(group, f"member {member_id} changed its protocols")
        elif state is GroupState.STABLE:
            if group.is_leader(member_id) or not member.matches(protocols):
                self._update_member(group, member, rebalance_timeout_ms, session_timeout_ms, protocols, respond)
                self._maybe_prepare_rebalance(
                    group,
                    f"member {member_id} rejoined"
                    if group.is_leader(member_id)
                    else f"member {member_id} changed its protocols",
                )
            else:
                respond(self._join_result(group, member, include_members=False))
        else:  # Empty or Dead with a known member cannot happen; answer as Kafka would
            fail(ErrorCode.UNKNOWN_MEMBER_ID, f"member {member_id!r} is not in group {group_id!r}")
        return None

    def _accept_joining_member(self, group: GroupMetadata, member_id: str) -> bool:
        """Kafka's acceptJoiningMember (group.max.size): members awaiting a join count while
        rebalancing, members otherwise; an empty group takes anyone."""
        max_size = self.config.max_size
        if group.is_in(GroupState.EMPTY, GroupState.DEAD):
            return True
        if group.is_in(GroupState.PREPARING_REBALANCE):
            member = group.members.get(member_id)
            awaiting = sum(1 for m in group.members.values() if m.awaiting_join is not None)
            return (member is not None and member.awaiting_join is not None) or awaiting < max_size
        return member_id in group.members or len(group.members) < max_size

    def _update_member(
        self,
        group: GroupMetadata,
        member: MemberMetadata,
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        protocols,
        respond,
    ) -> None:
        member.supported_protocols = tuple(protocols)
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        if member.awaiting_join is not None and member.awaiting_join is not respond:
            self._answer_join(
                member,
                JoinResult(
                    ErrorCode.REBALANCE_IN_PROGRESS,
                    "superseded by a newer join_group of the same member",
                    member_id=member.member_id,
                ),
            )
        member.awaiting_join = respond

    def _join_result(self, group: GroupMetadata, member: MemberMetadata, include_members: bool = True) -> JoinResult:
        members: tuple[tuple[str, str | None, bytes], ...] = ()
        if include_members and group.is_leader(member.member_id):
            members = tuple(
                (m.member_id, m.group_instance_id, m.metadata(group.protocol_name)) for m in group.members.values()
            )
        return JoinResult(
            member_id=member.member_id,
            generation_id=group.generation_id,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            leader=group.leader_id or "",
            members=members,
        )

    def _maybe_prepare_rebalance(self, group: GroupMetadata, reason: str) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(group, reason)

    def _prepare_rebalance(self, group: GroupMetadata, reason: str) -> None:
        now = self.now()
        if group.is_in(GroupState.COMPLETING_REBALANCE):
            self._reset_and_propagate_sync_error(
                group, ErrorCode.REBALANCE_IN_PROGRESS, f"group {group.group_id} is rebalancing again: {reason}"
            )
        config = self.config
        if group.is_in(GroupState.EMPTY):
            delay = config.initial_rebalance_delay_ms
            delayed = _DelayedJoin(now + delay, True, max(group.rebalance_timeout_ms() - delay, 0))
        else:
            delayed = _DelayedJoin(now + group.rebalance_timeout_ms(), False)
        group.transition_to(GroupState.PREPARING_REBALANCE, now)
        self.rebalances += 1
        self._rebalance_started[group.group_id] = now
        self._delayed_joins[group.group_id] = delayed
        self._schedule(delayed.deadline, "join", group.group_id, delayed)
        self._try_complete_join(group)  # a group whose members all left completes at once

    def _try_complete_join(self, group: GroupMetadata) -> None:
        delayed = self._delayed_joins.get(group.group_id)
        if (
            group.is_in(GroupState.PREPARING_REBALANCE)
            and delayed is not None
            and not delayed.initial
            and group.has_all_members_joined()
        ):
            self._complete_join(group)

    def _on_join_deadline(self, group: GroupMetadata, delayed: _DelayedJoin) -> None:
        if self._delayed_joins.get(group.group_id) is not delayed or not group.is_in(GroupState.PREPARING_REBALANCE):
            return
        if delayed.initial and group.new_member_added and delayed.remaining_ms > 0:
            group.new_member_added = False
            delay = min(self.config.initial_rebalance_delay_ms, delayed.remaining_ms)
            again = _DelayedJoin(self.now() + delay, True, max(delayed.remaining_ms - delay, 0))
            self._delayed_joins[group.group_id] = again
            self._schedule(again.deadline, "join", group.group_id, again)
            return
        self._complete_join(group)

    def _complete_join(self, group: GroupMetadata) -> None:
        """Kafka's onCompleteJoin: drop who did not rejoin, start the next generation, answer every join."""
        self._delayed_joins.pop(group.group_id, None)
        for member in group.not_yet_rejoined():
            group.remove(member.member_id)
        if group.is_in(GroupState.DEAD):
            return
        now = self.now()
        group.new_member_added = False
        group.init_next_generation(now)
        started = self._rebalance_started.pop(group.group_id, None)
        if group.is_in(GroupState.EMPTY):
            if started is not None:
                self.rebalance_ms_total += now - started
            self._store_group(group, {}, lambda error, _offset: None)
            return
        if started is not None:
            self._rebalance_started[group.group_id] = started  # until the leader's sync
        for member in group.members.values():
            result = self._join_result(group, member)
            member.is_new = False
            self._answer_join(member, result)
            self._schedule_heartbeat(group, member, member.session_timeout_ms)
        self._schedule(now + group.rebalance_timeout_ms(), "sync", group.group_id, group.generation_id)

    def _answer_join(self, member: MemberMetadata, result: JoinResult) -> None:
        respond, member.awaiting_join = member.awaiting_join, None
        if respond is not None:
            respond(result)

    def _answer_sync(self, member: MemberMetadata, result: SyncResult) -> None:
        respond, member.awaiting_sync = member.awaiting_sync, None
        if respond is not None:
            respond(result)

    # -- sync --------------------------------------------------------------------------------

    def handle_sync_group(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: dict[str, bytes],
        respond: Callable[[SyncResult], None],
    ) -> None:
        error = self._status_error(group_id)
        if error is not None:
            code, message = error
            if code is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
                # Kafka: the member cannot be in a generation the loading coordinator knows; rejoin.
                code = ErrorCode.REBALANCE_IN_PROGRESS
            return respond(SyncResult(code, message))
        group = self.groups.get(group_id)
        if group is None:
            return respond(SyncResult(ErrorCode.UNKNOWN_MEMBER_ID, f"group {group_id!r} does not exist"))
        if group.is_in(GroupState.DEAD):
            return respond(SyncResult(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"group {group_id!r} is being removed"))
        member = group.members.get(member_id)
        if member is None:
            return respond(
                SyncResult(ErrorCode.UNKNOWN_MEMBER_ID, f"member {member_id!r} is not in group {group_id!r}")
            )
        if generation_id != group.generation_id:
            return respond(
                SyncResult(
                    ErrorCode.ILLEGAL_GENERATION,
                    f"generation {generation_id} is not the group's current generation {group.generation_id}",
                )
            )
        if protocol_type is not None and protocol_type != group.protocol_type:
            return respond(
                SyncResult(
                    ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
                    f"protocol_type {protocol_type!r} is not the group's {group.protocol_type!r}",
                )
            )
        if protocol_name is not None and protocol_name != group.protocol_name:
            return respond(
                SyncResult(
                    ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
                    f"protocol_name {protocol_name!r} is not the group's {group.protocol_name!r}",
                )
            )
        state = group.state
        if state is GroupState.EMPTY:
            return respond(SyncResult(ErrorCode.UNKNOWN_MEMBER_ID, f"group {group_id!r} has no members"))
        if state is GroupState.PREPARING_REBALANCE:
            return respond(
                SyncResult(ErrorCode.REBALANCE_IN_PROGRESS, f"group {group_id!r} is rebalancing: join again")
            )
        if state is GroupState.STABLE:
            # Kafka's doSyncGroup (Stable): this member has synced, so the sync deadline must not evict it.
            group.pending_sync_members.discard(member_id)
            self._schedule_heartbeat(group, member, member.session_timeout_ms)
            return respond(
                SyncResult(
                    protocol_type=group.protocol_type, protocol_name=group.protocol_name, assignment=member.assignment
                )
            )
        # CompletingRebalance: park; the leader's assignment completes everyone's.
        if member.awaiting_sync is not None:
            self._answer_sync(
                member,
                SyncResult(ErrorCode.REBALANCE_IN_PROGRESS, "superseded by a newer sync_group of the same member"),
            )
        member.awaiting_sync = respond
        group.pending_sync_members.discard(member_id)
        self._schedule_heartbeat(group, member, member.session_timeout_ms)
        if group.is_leader(member_id):
            full = {mid: assignments.get(mid, b"") for mid in group.members}
            generation = group.generation_id

            def stored(error: Error | None, _offset: int) -> None:
                if not (group.is_in(GroupState.COMPLETING_REBALANCE) and group.generation_id == generation):
                    return  # the group moved on meanwhile (a member left); its syncs were answered
                if error is not None:
                    self._reset_and_propagate_sync_error(group, *group_store_error(error))
                    self._maybe_prepare_rebalance(group, "storing the group's assignment failed")
                    return
                for mid, member_ in group.members.items():
                    member_.assignment = full.get(mid, b"")
                for member_ in group.members.values():
                    self._answer_sync(
                        member_,
                        SyncResult(
                            protocol_type=group.protocol_type,
                            protocol_name=group.protocol_name,
                            assignment=member_.assignment,
                        ),
                    )
                group.transition_to(GroupState.STABLE, self.now())
                started = self._rebalance_started.pop(group.group_id, None)
                if started is not None:
                    self.rebalance_ms_total += self.now() - started

            self._store_group(group, full, stored)
        return None

    def _reset_and_propagate_sync_error(self, group: GroupMetadata, code: ErrorCode, message: str) -> None:
        group.clear_assignments()
        for member in group.members.values():
            self._answer_sync(member, SyncResult(code, message))

    def _on_sync_deadline(self, group: GroupMetadata, generation: int) -> None:
        if group.generation_id != generation or not group.is_in(GroupState.COMPLETING_REBALANCE, GroupState.STABLE):
            return
        late = [group.members[mid] for mid in list(group.pending_sync_members) if mid in group.members]
        group.pending_sync_members.clear()
        for member in late:
            self._remove_member_and_update(group, member, "no sync_group within the rebalance timeout")

    # -- heartbeat and leave -----------------------------------------------------------------

    def handle_heartbeat(self, group_id: str, generation_id: int, member_id: str) -> Error | None:
        error = self._status_error(group_id)
        if error is not None:
            return None if error.code is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS else error
        group = self.groups.get(group_id)
        if group is None:
            return _err(ErrorCode.UNKNOWN_MEMBER_ID, f"group {group_id!r} does not exist")
        if group.is_in(GroupState.DEAD):
            return _err(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"group {group_id!r} is being removed")
        member = group.members.get(member_id)
        if member is None:
            return _err(ErrorCode.UNKNOWN_MEMBER_ID, f"member {member_id!r} is not in group {group_id!r}")
        if generation_id != group.generation_id:
            return _err(
                ErrorCode.ILLEGAL_GENERATION,
                f"generation {generation_id} is not the group's current generation {group.generation_id}",
            )
        if group.is_in(GroupState.EMPTY):
            return _err(ErrorCode.UNKNOWN_MEMBER_ID, f"group {group_id!r} has no members")
        self._schedule_heartbeat(group, member, member.session_timeout_ms)
        if group.is_in(GroupState.PREPARING_REBALANCE):
            return _err(ErrorCode.REBALANCE_IN_PROGRESS, f"group {group_id!r} is rebalancing: join again")
        return None

    def handle_leave_group(self, group_id: str, member_ids: list[str]) -> tuple[Error | None, list[Error | None]]:
        """(group error, one error per member)."""
        error = self._status_error(group_id)
        if error is not None:
            return error, [error] * len(member_ids)
        group = self.groups.get(group_id)
        if group is None:
            unknown = _err(ErrorCode.UNKNOWN_MEMBER_ID, f"group {group_id!r} does not exist")
            return None, [unknown] * len(member_ids)
        if group.is_in(GroupState.DEAD):
            dead = _err(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"group {group_id!r} is being removed")
            return dead, [dead] * len(member_ids)
        out: list[Error | None] = []
        for member_id in member_ids:
            if member_id in group.pending_members:
                self._remove_pending_member(group, member_id)
                out.append(None)
            elif member_id in group.members:
                self._remove_member_and_update(group, group.members[member_id], "member left the group")
                out.append(None)
            else:
                out.append(_err(ErrorCode.UNKNOWN_MEMBER_ID, f"member {member_id!r} is not in group {group_id!r}"))
        return None, out

    def _remove_pending_member(self, group: GroupMetadata, member_id: str) -> None:
        group.pending_members.discard(member_id)
        if group.is_in(GroupState.PREPARING_REBALANCE):
            self._try_complete_join(group)

    def _remove_member_and_update(self, group: GroupMetadata, member: MemberMetadata, reason: str) -> None:
        self._answer_join(
            member, JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, f"member removed: {reason}", member_id=member.member_id)
        )
        self._answer_sync(member, SyncResult(ErrorCode.UNKNOWN_MEMBER_ID, f"member removed: {reason}"))
        group.remove(member.member_id)
        if group.is_in(GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance(group, f"member {member.member_id} removed: {reason}")
        elif group.is_in(GroupState.PREPARING_REBALANCE):
            self._try_complete_join(group)

    # -- offsets -----------------------------------------------------------------------------

    def handle_commit_offsets(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        commits: list[CommitRequest],
        respond: Callable[[list[Error | None]], None],
    ) -> None:
        """Answer ``respond`` with one error (or None) per commit, once the record is durable."""

        def all_fail(code: ErrorCode, message: str) -> None:
            respond([Error(code, message)] * len(commits))

        error = self._status_error(group_id)
        if error is not None:
            return all_fail(*error)
        group = self.groups.get(group_id)
        if group is None:
            if generation_id >= 0:
                return all_fail(
                    ErrorCode.ILLEGAL_GENERATION,
                    f"group {group_id!r} does not exist, so generation {generation_id} is not its own",
                )
            group = self.groups[group_id] = GroupMetadata(group_id, current_state_timestamp=self.now())
        if group.is_in(GroupState.DEAD):
            return all_fail(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"group {group_id!r} is being removed; retry")
        member = None
        if generation_id >= 0 or member_id:
            member = group.members.get(member_id)
            if member is None:
                return all_fail(ErrorCode.UNKNOWN_MEMBER_ID, f"member {member_id!r} is not in group {group_id!r}")
            if generation_id != group.generation_id:
                return all_fail(
                    ErrorCode.ILLEGAL_GENERATION,
                    f"generation {generation_id} is not the group's current generation {group.generation_id}",
                )
        elif not group.is_in(GroupState.EMPTY):
            return all_fail(
                ErrorCode.UNKNOWN_MEMBER_ID,
                f"group {group_id!r} has members: a commit from outside the group (generation -1, "
                f"no member_id) is only accepted while it is empty",
            )
        if group.is_in(GroupState.COMPLETING_REBALANCE):
            return all_fail(
                ErrorCode.REBALANCE_IN_PROGRESS,
                f"group {group_id!r} is completing a rebalance: commit after the next sync",
            )
        if member is not None:
            self._schedule_heartbeat(group, member, member.session_timeout_ms)
        now = self.now()
        results: list[Error | None] = [None] * len(commits)
        records: list[Record] = []
        accepted: list[tuple[int, tuple[str, int], OffsetAndMetadata]] = []
        limit = self.config.offset_metadata_max_bytes
        for i, commit in enumerate(commits):
            metadata = commit.metadata or ""
            if len(metadata.encode()) > limit:
                results[i] = _err(
                    ErrorCode.OFFSET_METADATA_TOO_LARGE,
                    f"committed_metadata of {len(metadata.encode())} bytes is over offset.metadata.max.bytes={limit}",
                )
                continue
            entry = OffsetAndMetadata(commit.offset, commit.leader_epoch, metadata, now)
            records.append((offset_commit_key(group_id, commit.topic, commit.partition), offset_commit_value(entry)))
            accepted.append((i, (commit.topic, commit.partition), entry))
        if not records:
            return respond(results)

        def stored(error: Error | None, base_offset: int) -> None:
            group.pending_commits -= 1
            for _i, tp, _entry in accepted:
                left = group.pending_offset_commits[tp] - 1
                if left:
                    group.pending_offset_commits[tp] = left
                else:
                    del group.pending_offset_commits[tp]
            if error is not None:
                error = offset_store_error(error)
            for n, (i, tp, entry) in enumerate(accepted):
                if error is not None:
                    results[i] = error
                    continue
                placed = OffsetAndMetadata(
                    entry.offset,
                    entry.leader_epoch,
                    entry.metadata,
                    entry.commit_timestamp,
                    entry.expire_timestamp,
                    base_offset + n,
                )
                current = group.offsets.get(tp)
                if current is None or current.record_offset < placed.record_offset:
                    group.offsets[tp] = placed
            respond(results)

        group.pending_commits += 1
        for _i, tp, _entry in accepted:
            group.pending_offset_commits[tp] = group.pending_offset_commits.get(tp, 0) + 1
        self._store(self.partition_for(group_id), records, stored)
        return None

    def handle_txn_commit_offsets(
        self,
        group_id: str,
        producer: tuple[int, int],
        generation_id: int,
        member_id: str,
        commits: list[CommitRequest],
        respond: Callable[[list[Error | None]], None],
    ) -> None:
        """TxnOffsetCommit (Kafka's doTxnCommitOffsets): the offsets are written in the
        producer's transaction and become the group's only when its COMMIT marker reaches the
        group's partition (:meth:`handle_txn_completion`). ``respond`` gets one error (or None)
        per commit once the record is durable. A member or generation given is checked (KIP-447
        fencing); none given (-1, "") is a producer outside the group's consumers."""

        def all_fail(code: ErrorCode, message: str) -> None:
            respond([Error(code, message)] * len(commits))

        error = self._status_error(group_id)
        if error is not None:
            return all_fail(*error)
        group = self.groups.get(group_id)
        if group is None:
            group = self.groups[group_id] = GroupMetadata(group_id, current_state_timestamp=self.now())
        if group.is_in(GroupState.DEAD):
            return all_fail(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"group {group_id!r} is being removed; retry")
        if member_id and member_id not in group.members:
            return all_fail(ErrorCode.UNKNOWN_MEMBER_ID, f"member {member_id!r} is not in group {group_id!r}")
        if generation_id >= 0 and generation_id != group.generation_id:
            return all_fail(
                ErrorCode.ILLEGAL_GENERATION,
                f"generation {generation_id} is not the group's current generation {group.generation_id}",
            )
        producer_id, _epoch = producer
        now = self.now()
        results: list[Error | None] = [None] * len(commits)
        records: list[Record] = []
        accepted: list[tuple[int, tuple[str, int], OffsetAndMetadata]] = []
        limit = self.config.offset_metadata_max_bytes
        for i, commit in enumerate(commits):
            metadata = commit.metadata or ""
            if len(metadata.encode()) > limit:
                results[i] = _err(
                    ErrorCode.OFFSET_METADATA_TOO_LARGE,
                    f"committed_metadata of {len(metadata.encode())} bytes is over offset.metadata.max.bytes={limit}",
                )
                continue
            entry = OffsetAndMetadata(commit.offset, commit.leader_epoch, metadata, now)
            records.append((offset_commit_key(group_id, commit.topic, commit.partition), offset_commit_value(entry)))
            accepted.append((i, (commit.topic, commit.partition), entry))
        if not records:
            return respond(results)
        # Pending before the write (Kafka's prepareTxnOffsetCommit): a marker that arrives while
        # it is being written finds them, and the group is not removed meanwhile.
        pending = group.pending_txn_offsets.setdefault(producer_id, {})
        for _i, tp, entry in accepted:
            pending[tp] = entry

        def stored(error: Error | None, base_offset: int) -> None:
            current = group.pending_txn_offsets.get(producer_id)
            for n, (i, tp, entry) in enumerate(accepted):
                if error is not None:
                    results[i] = offset_store_error(error)
                    if current is not None and current.get(tp) is entry:
                        del current[tp]  # nothing of it is in the log (Kafka's failedTxnOffsetCommitAppend)
                    continue
                if current is not None and current.get(tp) is entry:
                    current[tp] = OffsetAndMetadata(
                        entry.offset,
                        entry.leader_epoch,
                        entry.metadata,
                        entry.commit_timestamp,
                        entry.expire_timestamp,
                        base_offset + n,
                    )
            if current is not None and not current:
                del group.pending_txn_offsets[producer_id]
            respond(results)

        self._store(self.partition_for(group_id), records, stored, producer=producer)
        return None

    def handle_txn_completion(self, producer_id: int, partitions: Iterable[int], committed: bool) -> int:
        """A producer's COMMIT or ABORT marker is in these __consumer_offsets partitions (Kafka's
        scheduleHandleTxnCompletion): its pending offsets in their groups are decided. How many
        offsets became groups' offsets."""
        wanted = set(partitions)
        applied = 0
        for group_id, group in self.groups.items():
            if producer_id in group.pending_txn_offsets and self.partition_for(group_id) in wanted:
                applied += group.complete_txn_offsets(producer_id, committed)
        return applied

    def unstable_offsets(self, group_id: str) -> set[tuple[str, int]]:
        """The partitions whose offset a transaction still holds (written, its marker not yet
        here): an OffsetFetch with require_stable is answered UNSTABLE_OFFSET_COMMIT for them."""
        group = self.groups.get(group_id)
        if group is None:
            return set()
        return {tp for pending in group.pending_txn_offsets.values() for tp in pending}

    def handle_fetch_offsets(
        self, group_id: str, partitions: list[tuple[str, int]] | None
    ) -> tuple[Error | None, list[tuple[str, int, OffsetAndMetadata | None]]]:
        error = self._status_error(group_id)
        if error is not None:
            return error, []
        group = self.groups.get(group_id)
        offsets = group.offsets if group is not None and not group.is_in(GroupState.DEAD) else {}
        if partitions is None:
            return None, [(t, p, o) for (t, p), o in sorted(offsets.items())]
        return None, [(t, p, offsets.get((t, p))) for t, p in partitions]

    # -- listing, describing, deleting -------------------------------------------------------

    def handle_list_groups(self, states: set[str]) -> tuple[Error | None, list[tuple[str, str, str]]]:
        if not self.active:
            return _err(ErrorCode.COORDINATOR_NOT_AVAILABLE, "the group coordinator is not running yet"), []
        error = None
        if self.loading:
            error = _err(
                ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                f"{len(self.loading)} __consumer_offsets partitions are still being loaded",
            )
        out = [
            (g.group_id, g.protocol_type or "", g.state.value)
            for g in self.groups.values()
            if not g.is_in(GroupState.DEAD) and (not states or g.state.value in states)
        ]
        return error, sorted(out)

    def handle_describe_group(self, group_id: str) -> GroupSummary:
        error = self._status_error(group_id)
        if error is not None:
            return GroupSummary(group_id, "", "", "", (), error)
        group = self.groups.get(group_id)
        if group is None or group.is_in(GroupState.DEAD):
            return GroupSummary(group_id, GroupState.DEAD.value, "", "", ())
        stable = group.is_in(GroupState.STABLE)
        members = tuple(
            MemberSummary(
                m.member_id,
                m.group_instance_id,
                m.client_id,
                m.client_host,
                m.metadata(group.protocol_name) if stable and group.protocol_name else b"",
                m.assignment if stable else b"",
            )
            for m in group.members.values()
        )
        return GroupSummary(
            group_id,
            group.state.value,
            group.protocol_type or "",
            (group.protocol_name or "") if stable else "",
            members,
        )

    def handle_delete_groups(self, group_ids: list[str], respond: Callable[[dict[str, Error | None]], None]) -> None:
        results: dict[str, Error | None] = {}
        pending: dict[int, list[Record]] = {}
        for group_id in group_ids:
            error = self._status_error(group_id)
            if error is not None:
                results[group_id] = error
                continue
            group = self.groups.get(group_id)
            if group is None or group.is_in(GroupState.DEAD):
                results[group_id] = _err(ErrorCode.GROUP_ID_NOT_FOUND, f"group {group_id!r} does not exist")
                continue
            if not group.is_in(GroupState.EMPTY):
                results[group_id] = _err(
                    ErrorCode.NON_EMPTY_GROUP,
                    f"group {group_id!r} has members ({group.state.value}); it can be deleted once they have left",
                )
                continue
            if group.has_pending_offsets:
                results[group_id] = _err(
                    ErrorCode.NON_EMPTY_GROUP,
                    f"group {group_id!r} has offset commits still being written; delete it again once they are done",
                )
                continue
            group.transition_to(GroupState.DEAD, self.now())
            records = self._tombstones(group)
            del self.groups[group_id]
            results[group_id] = None
            if records:
                pending.setdefault(self.partition_for(group_id), []).extend(records)
        if not pending:
            return respond(results)
        waiting = set(pending)

        def stored_for(partition: int):
            def stored(error: Error | None, _offset: int) -> None:
                if error is not None:
                    error = group_store_error(error)
                    for gid in group_ids:
                        if results.get(gid) is None and self.partition_for(gid) == partition:
                            results[gid] = error
                waiting.discard(partition)
                if not waiting:
                    respond(results)

            return stored

        for partition, records in pending.items():
            self._store(partition, records, stored_for(partition))
        return None

    def _tombstones(self, group: GroupMetadata) -> list[Record]:
        records: list[Record] = [(offset_commit_key(group.group_id, t, p), None) for t, p in group.offsets]
        if group.generation_id > 0 or group.protocol_type is not None:
            records.append((group_metadata_key(group.group_id), None))
        return records

    # -- expiry ------------------------------------------------------------------------------

    def cleanup_group_metadata(self, deleted_topic: str | None = None) -> int:
        """Kafka's offsets-expiry task: tombstone expired offsets; an Empty group left without
        offsets is removed (Dead) with a tombstone. Returns the offsets removed. With
        ``deleted_topic`` (Kafka's onPartitionsDeleted), the offsets removed are that topic's."""
        if not self.active:
            return 0
        now = self.now()
        expired_total = 0
        by_partition: dict[int, list[Record]] = {}
        for group_id, group in list(self.groups.items()):
            if self.partition_for(group_id) in self.loading:
                continue
            if deleted_topic is None:
                expired = group.expired_offsets(now, self.config.offsets_retention_ms)
            else:
                expired = [tp for tp in group.offsets if tp[0] == deleted_topic]
            expired = [tp for tp in expired if tp not in group.pending_offset_commits]
            records = by_partition.setdefault(self.partition_for(group_id), [])
            for t, p in expired:
                del group.offsets[(t, p)]
                records.append((offset_commit_key(group_id, t, p), None))
            expired_total += len(expired)
            if (
                group.is_in(GroupState.EMPTY)
                and not group.offsets
                and not group.pending_members
                and not group.has_pending_offsets
            ):
                group.transition_to(GroupState.DEAD, now)
                del self.groups[group_id]
                if group.generation_id > 0 or group.protocol_type is not None:
                    records.append((group_metadata_key(group_id), None))
        for partition, records in by_partition.items():
            if records:
                self._store(partition, records, lambda error, _offset: None)
        return expired_total

    # -- storing the group -------------------------------------------------------------------

    def _store_group(self, group: GroupMetadata, assignments: dict[str, bytes], done: StoreDone) -> None:
        members = tuple(
            StoredMember(
                m.member_id,
                m.group_instance_id,
                m.client_id,
                m.client_host,
                m.rebalance_timeout_ms,
                m.session_timeout_ms,
                m.metadata(group.protocol_name) if group.protocol_name else b"",
                assignments.get(m.member_id, b""),
            )
            for m in group.members.values()
        )
        value = StoredGroup(
            group.protocol_type or "",
            group.generation_id,
            group.protocol_name,
            group.leader_id,
            group.current_state_timestamp,
            members,
        )
        self._store(
            self.partition_for(group.group_id),
            [(group_metadata_key(group.group_id), group_metadata_value(value))],
            done,
        )
