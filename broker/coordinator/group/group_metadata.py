"""One consumer group's state, as Kafka's classic coordinator keeps it (``GroupMetadata.scala``).

Plain data with the rules that only look at the group itself: which state may follow which,
whether a member's protocols fit the group, the protocol vote, when every member has rejoined,
and which committed offsets have expired. The decisions that involve time, storage and the
parked requests are :class:`GroupCoordinator`'s.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Callable
from dataclasses import dataclass, field


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


#: Kafka's validPreviousStates: a transition from any other state is a bug.
VALID_PREVIOUS_STATES: dict[GroupState, frozenset[GroupState]] = {
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.PREPARING_REBALANCE: frozenset({GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY}),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.DEAD: frozenset(GroupState),
}


@dataclass(frozen=True)
class OffsetAndMetadata:
    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp: int = -1
    #: -1: expiry follows offsets.retention.minutes (Kafka writes an explicit one only for v1 records).
    expire_timestamp: int = -1
    #: Offset in __consumer_offsets of the record that holds it (the later record wins).
    record_offset: int = -1


@dataclass
class MemberMetadata:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    #: (protocol name, metadata bytes) in the member's order of preference.
    supported_protocols: tuple[tuple[str, bytes], ...]
    assignment: bytes = b""
    #: The parked JoinGroup / SyncGroup answer, called once with the result.
    awaiting_join: Callable | None = None
    awaiting_sync: Callable | None = None
    #: Wall-clock ms by which the member must heartbeat (or rejoin, or sync).
    heartbeat_deadline: int = 0
    #: The deadline of this member's one pending heartbeat entry in the coordinator's timer heap
    #: (None: none pending). Heartbeats only move heartbeat_deadline; the entry re-arms when it fires.
    heartbeat_timer: int | None = None
    is_new: bool = False

    def protocols(self) -> set[str]:
        return {name for name, _ in self.supported_protocols}

    def metadata(self, protocol: str | None) -> bytes:
        for name, data in self.supported_protocols:
            if name == protocol:
                return data
        raise KeyError(f"member {self.member_id} does not support protocol {protocol!r}")

    def matches(self, protocols: tuple[tuple[str, bytes], ...]) -> bool:
        return tuple(protocols) == tuple(self.supported_protocols)

    def vote(self, candidates: set[str]) -> str:
        """The member's first-listed protocol among ``candidates``."""
        for name, _ in self.supported_protocols:
            if name in candidates:
                return name
        raise ValueError(f"member {self.member_id} supports none of {sorted(candidates)}")


@dataclass
class GroupMetadata:
    group_id: str
    state: GroupState = GroupState.EMPTY
    current_state_timestamp: int = -1
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    #: Insertion order is join order (the leader is re-elected from it).
    members: dict[str, MemberMetadata] = field(default_factory=dict)
    #: Member ids handed out with MEMBER_ID_REQUIRED that have not joined with them yet.
    pending_members: set[str] = field(default_factory=set)
    #: Members of the current generation that have not sent their SyncGroup yet.
    pending_sync_members: set[str] = field(default_factory=set)
    offsets: dict[tuple[str, int], OffsetAndMetadata] = field(default_factory=dict)
    #: A member joined during the initial rebalance delay (InitialDelayedJoin waits once more).
    new_member_added: bool = False
    #: Offset commits written but not yet durable: the group is not removed meanwhile (Kafka's
    #: hasPendingOffsetCommits), or their offsets would land in a group nobody sees.
    pending_commits: int = 0
    #: The same per partition: expiry leaves these alone (Kafka's getExpiredOffsets skips a partition
    #: with a pending commit), or its tombstone could land after the acknowledged commit.
    pending_offset_commits: dict[tuple[str, int], int] = field(default_factory=dict)
    #: Offsets committed within producers' transactions (TxnOffsetCommit), by producer id: they
    #: become the group's offsets when the producer's COMMIT marker reaches the group's
    #: __consumer_offsets partition, and are dropped at its ABORT (Kafka's
    #: pendingTransactionalOffsetCommits). ``record_offset`` is -1 until the record is written.
    pending_txn_offsets: dict[int, dict[tuple[str, int], OffsetAndMetadata]] = field(default_factory=dict)

    # -- state ---------------------------------------------------------------------------------

    def is_in(self, *states: GroupState) -> bool:
        return self.state in states

    def transition_to(self, state: GroupState, now_ms: int) -> None:
        if self.state not in VALID_PREVIOUS_STATES[state]:
            raise AssertionError(
                f"group {self.group_id}: {self.state.value} -> {state.value} is not a valid transition"
            )
        self.state = state
        self.current_state_timestamp = now_ms

    def can_rebalance(self) -> bool:
        return self.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY)

    # -- members -------------------------------------------------------------------------------

    def has_member(self, member_id: str) -> bool:
        return member_id in self.members

    def size(self) -> int:
        return len(self.members) + len(self.pending_members)

    def add(self, member: MemberMetadata) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if self.leader_id is None:
            self.leader_id = member.member_id

    def remove(self, member_id: str) -> MemberMetadata | None:
        member = self.members.pop(member_id, None)
        self.pending_sync_members.discard(member_id)
        if member_id == self.leader_id:
            # Prefer a member that has already rejoined (Kafka's maybeElectNewJoinedLeader).
            joined = [m for m in self.members.values() if m.awaiting_join is not None]
            rest = joined or list(self.members.values())
            self.leader_id = rest[0].member_id if rest else None
        return member

    def is_leader(self, member_id: str) -> bool:
        return member_id == self.leader_id

    def not_yet_rejoined(self) -> list[MemberMetadata]:
        return [m for m in self.members.values() if m.awaiting_join is None]

    def has_all_members_joined(self) -> bool:
        return not self.pending_members and all(m.awaiting_join is not None for m in self.members.values())

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    # -- protocols -----------------------------------------------------------------------------

    def candidate_protocols(self) -> set[str]:
        """Protocols every member supports."""
        sets = [m.protocols() for m in self.members.values()]
        return set.intersection(*sets) if sets else set()

    def supports_protocols(self, protocol_type: str, protocols: set[str]) -> bool:
        """Kafka's supportsProtocols: an empty group takes any non-empty type and list; otherwise
        the type must match and one of the protocols must be supported by every member."""
        if not self.members:
            return bool(protocol_type) and bool(protocols)
        return protocol_type == self.protocol_type and bool(protocols & self.candidate_protocols())

    def select_protocol(self) -> str:
        """The protocol vote: each member votes for its first-listed candidate; most votes wins
        (ties to the name first met in join order, deterministic)."""
        candidates = self.candidate_protocols()
        if not candidates:
            raise ValueError(f"group {self.group_id} has no protocol every member supports")
        votes: dict[str, int] = {}
        for member in self.members.values():
            name = member.vote(candidates)
            votes[name] = votes.get(name, 0) + 1
        return max(votes, key=lambda name: votes[name])

    def init_next_generation(self, now_ms: int) -> None:
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.pending_sync_members = set(self.members)
            self.transition_to(GroupState.COMPLETING_REBALANCE, now_ms)
        else:
            self.protocol_name = None
            self.pending_sync_members = set()
            self.transition_to(GroupState.EMPTY, now_ms)

    def clear_assignments(self) -> None:
        for member in self.members.values():
            member.assignment = b""

    # -- offsets -------------------------------------------------------------------------------

    @property
    def has_pending_offsets(self) -> bool:
        """Offsets still to land (written, or waiting for their transaction): the group stays."""
        return bool(self.pending_commits or self.pending_txn_offsets)

    def complete_txn_offsets(self, producer_id: int, committed: bool) -> int:
        """The producer's transaction ended: its written offsets become the group's on a commit
        (each unless a later record already holds that partition's offset), are dropped on an
        abort. How many became the group's."""
        pending = self.pending_txn_offsets.pop(producer_id, None)
        if not pending or not committed:
            return 0
        applied = 0
        for tp, entry in pending.items():
            if entry.record_offset < 0:
                continue  # its write failed (the producer was told): nothing of it is in the log
            current = self.offsets.get(tp)
            if current is None or current.record_offset < entry.record_offset:
                self.offsets[tp] = entry
                applied += 1
        return applied

    def subscribed_topics(self) -> set[str] | None:
        """Topics the members subscribe to (from their ConsumerProtocol subscriptions), or None
        when that cannot be known (not a "consumer" group, not Stable, unreadable metadata)."""
        if self.protocol_type != "consumer" or self.state is not GroupState.STABLE or self.protocol_name is None:
            return None
        topics: set[str] = set()
        for member in self.members.values():
            try:
                topics |= subscription_topics(member.metadata(self.protocol_name))
            except (KeyError, ValueError):
                return None
        return topics

    def expired_offsets(self, now_ms: int, retention_ms: int) -> list[tuple[str, int]]:
        """Kafka's removeExpiredOffsets rule: which offsets are past retention (not removed here)."""

        def expired(base_of) -> list[tuple[str, int]]:
            out = []
            for tp, entry in self.offsets.items():
                if entry.expire_timestamp >= 0:
                    if now_ms >= entry.expire_timestamp:
                        out.append(tp)
                elif now_ms - base_of(entry) >= retention_ms:
                    out.append(tp)
            return out

        if self.protocol_type and self.state is GroupState.EMPTY:
            return expired(
                lambda e: self.current_state_timestamp if self.current_state_timestamp >= 0 else e.commit_timestamp
            )
        if self.protocol_type is None or self.protocol_type == "":
            return expired(lambda e: e.commit_timestamp)
        subscribed = self.subscribed_topics()
        if subscribed is not None:
            return [tp for tp in expired(lambda e: e.commit_timestamp) if tp[0] not in subscribed]
        return []


def subscription_topics(data: bytes) -> set[str]:
    """The topics of a ConsumerProtocol Subscription (any version: they come first after it)."""
    view = memoryview(data)
    if len(view) < 6:
        raise ValueError("subscription too short")
    (count,) = struct.unpack_from(">i", view, 2)
    position = 6
    topics = set()
    if count < 0 or count > len(view):
        raise ValueError("bad topic count")
    for _ in range(count):
        (length,) = struct.unpack_from(">h", view, position)
        position += 2
        if length < 0 or position + length > len(view):
            raise ValueError("bad topic name")
        topics.add(bytes(view[position : position + length]).decode())
        position += length
    return topics
