"""The leader's rules for one partition (Kafka's Partition and Replica), pure: no log, no
ZooKeeper, no clock of its own.

A follower's fetch tells the leader how far it has the log (its fetch offset is its log end
offset). From that the leader decides when a record is committed (the high watermark: every
in-sync replica has it), who has fallen out of sync (not caught up to the leader's end for
``replica.lag.time.max.ms``), who may come back in (caught up to the high watermark and into
the current leader epoch), and whether an acks=all write may be taken or answered. The ISR
changes themselves are written by the caller (a conditional write of the partition state).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum

#: A follower's log end offset before its first fetch of this leader's term.
UNKNOWN_OFFSET = -1


@dataclass
class FollowerState:
    """What the leader knows of one follower (Kafka's ReplicaState)."""

    broker_id: int
    log_end_offset: int = UNKNOWN_OFFSET
    log_start_offset: int = UNKNOWN_OFFSET
    #: When the follower was last known to have the whole log (0: not in this term).
    last_caught_up_ms: int = 0
    #: The leader's log end offset and the time of the follower's previous fetch.
    last_fetch_leader_log_end_offset: int = UNKNOWN_OFFSET
    last_fetch_ms: int = 0

    def caught_up(self, leader_log_end_offset: int, now_ms: int, lag_max_ms: int) -> bool:
        return self.log_end_offset == leader_log_end_offset or now_ms - self.last_caught_up_ms <= lag_max_ms


class AcksAll(Enum):
    """Where an acks=all write stands."""

    WAITING = "waiting"
    #: Committed: every in-sync replica has it.
    DONE = "done"
    #: Committed by a shrunken ISR below min.insync.replicas: written, but not acknowledged
    #: (NOT_ENOUGH_REPLICAS_AFTER_APPEND).
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = "not_enough_replicas_after_append"


class LeaderPartition:
    """One partition led by this broker in one leader epoch."""

    def __init__(
        self,
        *,
        broker_id: int,
        leader_epoch: int,
        replicas: Iterable[int],
        isr: Iterable[int],
        leader_epoch_start_offset: int,
        high_watermark: int,
        min_insync_replicas: int,
        lag_max_ms: int,
        now_ms: int,
    ):
        self.broker_id = broker_id
        self.leader_epoch = leader_epoch
        self.replicas = tuple(replicas)
        self.isr = frozenset(isr)
        #: The log end offset when this term began: a follower must reach it to rejoin the ISR.
        self.leader_epoch_start_offset = leader_epoch_start_offset
        self.high_watermark = high_watermark
        self.min_insync_replicas = min_insync_replicas
        self.lag_max_ms = lag_max_ms
        # Kafka's makeLeader: every follower in the ISR counts as caught up at the term's start,
        # so none is dropped before it could fetch once.
        self.followers = {
            r: FollowerState(r, last_caught_up_ms=now_ms if r in self.isr else 0)
            for r in self.replicas
            if r != broker_id
        }

    @property
    def effective_min_isr(self) -> int:
        """min.insync.replicas, but never more than the partition has replicas (Kafka's rule)."""
        return min(self.min_insync_replicas, len(self.replicas))

    def update_follower(
        self, follower: int, fetch_offset: int, log_start_offset: int, leader_log_end_offset: int, now_ms: int
    ) -> FollowerState:
        """A follower fetched from ``fetch_offset`` (its log end). Kafka's updateFetchStateOrThrow:
        caught up now if it asked for the leader's end; caught up as of its previous fetch if it
        asked for at least what the leader had then."""
        state = self.followers[follower]
        if fetch_offset >= leader_log_end_offset:
            state.last_caught_up_ms = max(state.last_caught_up_ms, now_ms)
        elif fetch_offset >= state.last_fetch_leader_log_end_offset:
            state.last_caught_up_ms = max(state.last_caught_up_ms, state.last_fetch_ms)
        state.log_end_offset = fetch_offset
        state.log_start_offset = log_start_offset
        state.last_fetch_leader_log_end_offset = leader_log_end_offset
        state.last_fetch_ms = now_ms
        return state

    def maybe_increment_high_watermark(self, leader_log_end_offset: int, now_ms: int) -> bool:
        """Move the high watermark to the lowest log end among the ISR and any caught-up replica
        that may join it (Kafka's maybeIncrementLeaderHW), never back; not at all while the ISR
        is smaller than min.insync.replicas (KAFKA-15583). True if it moved."""
        if len(self.isr) < self.effective_min_isr:
            return False
        candidate = leader_log_end_offset
        for state in self.followers.values():
            counts = state.broker_id in self.isr or (
                state.caught_up(leader_log_end_offset, now_ms, self.lag_max_ms)
                and state.log_end_offset != UNKNOWN_OFFSET
            )
            if counts and state.log_end_offset < candidate:
                candidate = state.log_end_offset
        if candidate > self.high_watermark:
            self.high_watermark = candidate
            return True
        return False

    def out_of_sync_replicas(self, leader_log_end_offset: int, now_ms: int) -> set[int]:
        """ISR followers not caught up for longer than replica.lag.time.max.ms (Kafka's
        getOutOfSyncReplicas): stuck and slow followers alike."""
        return {
            r
            for r in self.isr
            if r != self.broker_id and not self.followers[r].caught_up(leader_log_end_offset, now_ms, self.lag_max_ms)
        }

    def in_sync_candidates(self) -> set[int]:
        """Followers outside the ISR that may join it: their log end reached the high watermark and
        the start of this leader epoch (Kafka's isFollowerInSync; the second rule keeps a follower
        that has not truncated to this term's log out of the ISR)."""
        return {
            r
            for r, state in self.followers.items()
            if r not in self.isr
            and state.log_end_offset != UNKNOWN_OFFSET
            and state.log_end_offset >= self.high_watermark
            and state.log_end_offset >= self.leader_epoch_start_offset
        }

    def may_append_acks_all(self) -> bool:
        """Whether an acks=all write is taken at all (else NOT_ENOUGH_REPLICAS, nothing written)."""
        return len(self.isr) >= self.effective_min_isr

    def acks_all_status(self, required_offset: int) -> AcksAll:
        """Whether the acks=all write ending below ``required_offset`` is acknowledged (Kafka's
        checkEnoughReplicasReachOffset)."""
        if self.high_watermark < required_offset:
            return AcksAll.WAITING
        if len(self.isr) < self.effective_min_isr:
            return AcksAll.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        return AcksAll.DONE

    def set_isr(self, isr: Iterable[int], now_ms: int) -> None:
        """The ISR as written to ZooKeeper (by this leader, or by the controller in the same epoch)."""
        new = frozenset(isr)
        for joined in new - self.isr:
            if joined in self.followers:
                self.followers[joined].last_caught_up_ms = max(self.followers[joined].last_caught_up_ms, now_ms)
        self.isr = new


def follower_high_watermark(leader_high_watermark: int, log_end_offset: int) -> int:
    """A follower's high watermark: the leader's, but never above what it has itself."""
    return min(leader_high_watermark, log_end_offset)
