"""A consumer's membership of a group: Kafka's classic group protocol, seen from the member.

Shared by :class:`triolog.client.Consumer` and :class:`triolog.client.aio.AsyncConsumer` (as
operations, :mod:`triolog.client.ops`). Kafka's ``AbstractCoordinator`` + ``ConsumerCoordinator``:

1. ``find_coordinator`` for the group (on the bootstrap connection); every other group request
   goes to the coordinator's address, on a connection of its own (the drivers route them: a
   JoinGroup parked at the broker for a whole rebalance must not queue behind, or hold up, fetches).
2. ``join_group`` with one protocol per assignor in ``partition_assignment_strategy`` (each
   carrying this member's ConsumerProtocol Subscription). The first join has member id "": the
   broker answers MEMBER_ID_REQUIRED with the id to use, and the member joins again with it.
   The join is written and then awaited across polls: poll(timeout) returns {} when the
   rebalance outlasts its timeout, as Kafka's does, and the next poll goes on waiting.
3. The leader (its JoinGroup response lists every member) runs the chosen assignor over the
   subscribed topics' partition counts and sends all assignments in ``sync_group``; the others
   send an empty one. Each member decodes its Assignment, fetches the group's committed offsets
   for it (``offset_fetch``; a partition without one starts from ``auto_offset_reset``) and is
   Stable.
4. While Stable, a background heartbeat (a thread / a trio task, run by the driver) sends
   ``heartbeat`` every ``heartbeat_interval_ms``. REBALANCE_IN_PROGRESS asks for a rejoin at the
   next poll; ILLEGAL_GENERATION (keep the member id) and UNKNOWN_MEMBER_ID (drop it) reset the
   generation first, but only if no rejoin changed the generation meanwhile. A consumer not
   polled for ``max_poll_interval_ms`` leaves the group from the heartbeat, Kafka's "poll timeout
   has expired"; its next poll joins again.
5. Before rejoining (eager rebalancing: range and roundrobin), the member commits its positions
   when ``enable_auto_commit`` is on, calls the listener's ``on_partitions_revoked`` and drops its
   whole assignment with any buffered records. A commit made while the group rebalances, or after
   the member lost its generation, fails with :class:`CommitFailedError`: the partitions may
   already be someone else's (the reactions are Kafka's, PLAN table "client group-member
   reactions").
6. ``close()`` commits (auto-commit on) and sends ``leave_group`` (not for a static member, one
   with ``group_instance_id``, whose leaving is its session timing out, as in Kafka).
"""

from __future__ import annotations

import logging
import re

from triolog.protocol import messages as m
from triolog.protocol.consumer_protocol import (
    PROTOCOL_TYPE,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from triolog.protocol.errors import ErrorCode

from .assignors import Member, assign
from .errors import BrokerConnectionError, CommitFailedError, TriologClientError, error_for
from .ops import Await, Call, Op, Sleep, Submit, check_response, now
from .types import TopicPartition

__all__ = ["COORDINATOR_APIS", "CommitFailedError", "ConsumerCoordinator", "RebalanceListener"]

log = logging.getLogger(__name__)

#: The requests the drivers send to the coordinator's connection (find_coordinator goes to the
#: bootstrap connection, as does everything else).
COORDINATOR_APIS = frozenset({"join_group", "sync_group", "heartbeat", "leave_group", "offset_commit", "offset_fetch"})

_COORDINATOR_GONE = frozenset({ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR})
_RETRY = frozenset({ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.REBALANCE_IN_PROGRESS})
_LOST_GENERATION = frozenset(
    {ErrorCode.REBALANCE_IN_PROGRESS, ErrorCode.ILLEGAL_GENERATION, ErrorCode.UNKNOWN_MEMBER_ID}
)


class RebalanceListener:
    """Kafka's ConsumerRebalanceListener: subclass it, or pass any object with these methods."""

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        pass

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        pass


UNJOINED, JOINING, STABLE = "unjoined", "joining", "stable"


class ConsumerCoordinator:
    """The group state of one consumer; ``core`` is its :class:`triolog.client.consumer_core.ConsumerCore`
    (positions, metadata, config)."""

    def __init__(self, core) -> None:
        config = core.config
        self.core = core
        self.config = config
        self.group_id: str = config.group_id
        self.member_id = ""
        self.generation = -1
        self.protocol: str | None = None
        self.leader = ""
        self.state = UNJOINED
        self.rejoin_needed = True
        #: (host, port) of the coordinator, or None: find it first.
        self.coordinator: tuple[str, int] | None = None
        self.subscription: tuple[str, ...] = ()
        self.pattern: re.Pattern | None = None
        self.listener = None
        self._pattern_checked = float("-inf")
        self._revoked = True  # nothing assigned yet: nothing to revoke
        self._join: tuple[object, float] | None = None  # (handle, deadline) of the JoinGroup awaited
        self._joined_with = b""  # the Subscription bytes the last JoinGroup carried
        self._timeout_s = config.request_timeout_ms / 1000
        self._backoff_s = config.retry_backoff_ms / 1000
        self.next_heartbeat = 0.0
        #: The leader's: partition count per subscribed topic it last assigned (0: not in metadata).
        self._assigned_counts: dict[str, int] = {}
        self._counts_checked, self._counts_missed = 0.0, 0
        self.last_poll = now()
        self.next_auto_commit = now() + config.auto_commit_interval_ms / 1000
        #: For tests and stats: how many times this member completed a join (a generation).
        self.joins = 0

    # -- subscription ----------------------------------------------------------------------------

    def subscribe(self, topics: tuple[str, ...], pattern: re.Pattern | None, listener) -> None:
        self.subscription = tuple(sorted(set(topics)))
        self.pattern = pattern
        self.listener = listener
        self._pattern_checked = float("-inf")
        self.request_rejoin("subscription changed")

    def request_rejoin(self, reason: str) -> None:
        if not self.rejoin_needed:
            log.info("group %s member %s: rejoining (%s)", self.group_id, self.member_id, reason)
        self.rejoin_needed = True

    def _reset_generation(self, keep_member_id: bool) -> None:
        self.generation, self.protocol, self.leader = -1, None, ""
        if not keep_member_id:
            self.member_id = ""
        self.state = UNJOINED
        self.rejoin_needed = True

    def _coordinator_unknown(self, reason: str) -> None:
        if self.coordinator is not None:
            log.info("group %s: coordinator %s:%s unknown (%s)", self.group_id, *self.coordinator, reason)
        self.coordinator = None

    @property
    def active(self) -> bool:
        return self.state == STABLE and not self.rejoin_needed

    # -- find, join, sync ------------------------------------------------------------------------

    def _find_coordinator_op(self) -> Op[bool]:
        doc = yield Call(m.FindCoordinatorRequest(id=0, key=self.group_id, key_type=0), self._timeout_s)
        code = doc["error_code"]
        if code in _COORDINATOR_GONE or code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
            return False
        check_response(doc)
        self.coordinator = (doc["host"], doc["port"])
        return True

    def _ensure_coordinator_op(self, deadline: float) -> Op[bool]:
        while self.coordinator is None:
            if (yield from self._find_coordinator_op()):
                return True
            if now() + self._backoff_s >= deadline:
                return False
            yield Sleep(self._backoff_s)
        return True

    def _pattern_op(self) -> Op[None]:
        """Match the pattern against the topic names (at most every metadata_max_age_ms); a new
        set of topics is a new subscription: rejoin. Internal topics never match (Kafka's
        exclude.internal.topics)."""
        if self.pattern is None or now() - self._pattern_checked < self.config.metadata_max_age_ms / 1000:
            return
        topics = yield from self.core.metadata.all_topics_op()
        self._pattern_checked = now()
        matched = tuple(
            sorted(name for name, topic in topics.items() if not topic.internal and self.pattern.fullmatch(name))
        )
        if matched != self.subscription:
            self.subscription = matched
            self.request_rejoin(f"pattern now matches {len(matched)} topics")

    def _subscription_bytes(self) -> bytes:
        return encode_subscription(Subscription(self.subscription))

    def _join_request(self) -> m.JoinGroupRequest:
        metadata = self._subscription_bytes()
        config = self.config
        return m.JoinGroupRequest(
            id=0,
            group_id=self.group_id,
            session_timeout_ms=config.session_timeout_ms,
            rebalance_timeout_ms=config.max_poll_interval_ms,
            member_id=self.member_id,
            group_instance_id=config.group_instance_id,
            protocol_type=PROTOCOL_TYPE,
            protocols=tuple(
                m.JoinGroupProtocol(name=name, metadata=metadata) for name in config.partition_assignment_strategy
            ),
        )

    def _join_timeout_s(self) -> float:
        """Kafka's: the rebalance timeout plus 5 s, at least the request timeout."""
        return max(self._timeout_s, self.config.max_poll_interval_ms / 1000 + 5)

    def _prepare_op(self) -> Op[None]:
        """Before (re)joining: commit (auto-commit on), revoke everything, forget the assignment."""
        if self._revoked:
            return
        owned = set(self.core.assignment())
        if self.config.enable_auto_commit and self.generation >= 0:
            try:
                yield from self.commit_op(None)
            except TriologClientError as exc:
                log.warning("group %s: commit before rebalancing failed: %s", self.group_id, exc)
        _notify(self.listener, "on_partitions_revoked", owned)
        self.core.set_group_assignment(())
        self._revoked = True

    def ensure_active_op(self, deadline: float) -> Op[bool]:
        """Join the group if needed, waiting at most until ``deadline``; True once Stable with an
        assignment, False if the rebalance is still going on (the next call goes on with it)."""
        while True:
            if self.pattern is not None:
                yield from self._pattern_op()
            if self.active and self.leader == self.member_id:
                yield from self._leader_metadata_op()
            if not (yield from self._ensure_coordinator_op(deadline)):
                return False
            if self.active:
                return True
            yield from self._prepare_op()
            if self._join is None:
                self.state = JOINING
                request = self._join_request()
                handle = yield Submit(request, self._timeout_s)
                self._join = (handle, now() + self._join_timeout_s())
                self._joined_with = request.protocols[0].metadata
            handle, join_deadline = self._join
            try:
                doc = yield Await(handle, max(0.0, min(deadline, join_deadline) - now()))
            except BrokerConnectionError as exc:
                self._join = None
                self._coordinator_unknown(str(exc))
                raise
            if doc is None:
                if now() >= join_deadline:  # Kafka's join timeout: find the coordinator again, rejoin
                    self._join = None
                    self._coordinator_unknown("no join_group response in time")
                    continue
                return False
            self._join = None
            if not (yield from self._on_join_response_op(doc)):
                if now() + self._backoff_s >= deadline:
                    return False
                yield Sleep(self._backoff_s)
                continue
            if self.active:
                return True

    def _on_join_response_op(self, doc: dict) -> Op[bool]:
        """Handle a JoinGroup response; False: join again (after a backoff if time allows)."""
        code = doc["error_code"]
        if code == ErrorCode.MEMBER_ID_REQUIRED:
            self.member_id = doc["member_id"]
            return True  # at once, with the id
        if code == ErrorCode.UNKNOWN_MEMBER_ID:
            self._reset_generation(keep_member_id=False)
            return True
        if code == ErrorCode.ILLEGAL_GENERATION:
            self._reset_generation(keep_member_id=True)
            return True
        if code in _COORDINATOR_GONE:
            self._coordinator_unknown(doc.get("error_message") or "join_group")
            return False
        if code in _RETRY:
            yield Sleep(self._backoff_s)
            return True
        check_response(doc)  # INCONSISTENT_GROUP_PROTOCOL, INVALID_SESSION_TIMEOUT...: the caller's
        self.member_id, self.generation = doc["member_id"], doc["generation_id"]
        self.protocol, self.leader = doc["protocol_name"], doc["leader"]
        assignments: tuple[m.SyncGroupAssignment, ...] = ()
        if self.leader == self.member_id:
            assignments = yield from self._assign_op(doc["members"])
        request = m.SyncGroupRequest(
            id=0,
            group_id=self.group_id,
            generation_id=self.generation,
            member_id=self.member_id,
            group_instance_id=self.config.group_instance_id,
            protocol_type=PROTOCOL_TYPE,
            protocol_name=self.protocol,
            assignments=assignments,
        )
        try:
            sync = yield Call(request, self._join_timeout_s())
        except BrokerConnectionError as exc:
            self._coordinator_unknown(str(exc))
            raise
        code = sync["error_code"]
        if code == ErrorCode.REBALANCE_IN_PROGRESS:
            self.rejoin_needed = True
            return True
        if code == ErrorCode.UNKNOWN_MEMBER_ID:
            self._reset_generation(keep_member_id=False)
            return True
        if code == ErrorCode.ILLEGAL_GENERATION:
            self._reset_generation(keep_member_id=True)
            return True
        if code in _COORDINATOR_GONE:
            self._coordinator_unknown(sync.get("error_message") or "sync_group")
            return False
        if code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL:
            check_response(sync)  # the caller's configuration: raise
        if code != ErrorCode.NONE:  # e.g. UNKNOWN_SERVER_ERROR (the assignment could not be stored)
            log.warning(
                "sync_group of group %r failed (%s: %s); rejoining after a backoff",
                self.group_id,
                ErrorCode(code).name,
                sync.get("error_message"),
            )
            self.rejoin_needed = True
            return False
        assigned = [
            TopicPartition(topic, partition) for topic, partition in decode_assignment(sync["assignment"]).partitions()
        ]
        # Positions from the group's committed offsets; none: auto_offset_reset, at the next poll.
        committed = yield from self.fetch_committed_op(assigned)
        self.core.set_group_assignment(assigned, committed)
        self.state, self.rejoin_needed, self._revoked = STABLE, False, False
        if self._subscription_bytes() != self._joined_with:  # subscribe() during the join: again
            self.request_rejoin("the subscription changed during the join")
        self.next_heartbeat = now() + self.config.heartbeat_interval_ms / 1000
        self.last_poll = now()
        self.joins += 1
        log.info(
            "group %s: member %s joined generation %d (%s) with %d partitions",
            self.group_id,
            self.member_id,
            self.generation,
            self.protocol,
            len(assigned),
        )
        _notify(self.listener, "on_partitions_assigned", set(assigned))
        return True

    def _assign_op(self, members: list[dict]) -> Op[tuple[m.SyncGroupAssignment, ...]]:
        """The leader's work: run the group's assignor over every member's subscription."""
        group = [
            Member(member["member_id"], member.get("group_instance_id"), decode_subscription(member["metadata"]))
            for member in members
        ]
        topics = sorted({topic for member in group for topic in member.subscription.topics})
        counts: dict[str, int] = {}
        if topics:
            entries = yield from self.core.metadata.fetch_op(topics)
            counts = {
                name: len(entry["partitions"])
                for name, entry in entries.items()
                if not entry["error_code"] and entry["partitions"]
            }
        self._assigned_counts = {topic: counts.get(topic, 0) for topic in topics}
        self._counts_checked, self._counts_missed = now(), 0
        protocol = self.protocol
        assert protocol is not None  # (the join that made this member the leader chose it)
        result = assign(protocol, counts, group)
        return tuple(
            m.SyncGroupAssignment(member_id=member_id, assignment=encode_assignment(assignment))
            for member_id, assignment in result.items()
        )

    def _leader_metadata_op(self) -> Op[None]:
        """The leader watches the partition counts it assigned (Kafka's metadata snapshot): a
        subscribed topic created, or given partitions, since is a reason to rebalance. Checked
        every metadata_max_age_ms, or sooner (retry_backoff_ms doubling up to 1 s, then every 5 s)
        while a subscribed topic does not exist yet."""
        counts = self._assigned_counts
        if not counts:
            return
        missing = any(count == 0 for count in counts.values())
        interval = self.config.metadata_max_age_ms / 1000
        if missing:
            interval = min(
                interval,
                max(self._backoff_s, min(self._backoff_s * 2**self._counts_missed, 1.0))
                if self._counts_missed < 8
                else 5.0,
            )
        if now() - self._counts_checked < interval:
            return
        self._counts_checked = now()
        self._counts_missed += 1
        entries = yield from self.core.metadata.fetch_op(sorted(counts))
        current = {
            topic: (len(entry["partitions"]) if not entry["error_code"] else 0) for topic, entry in entries.items()
        }
        for topic, count in counts.items():
            if current.get(topic, 0) != count:
                self.request_rejoin(f"topic {topic!r} has {current.get(topic, 0)} partitions, assigned with {count}")
                return

    # -- heartbeat, leave --------------------------------------------------------------------------

    def heartbeat_due(self) -> float:
        """Seconds until the next heartbeat (or the poll-interval check) is due."""
        return max(0.0, self.next_heartbeat - now())

    def heartbeat_op(self) -> Op[None]:
        """One beat, when Stable and due (the drivers call it from their background thread/task).
        Also leaves the group when poll() has not been called for max_poll_interval_ms."""
        if self.state != STABLE or self.coordinator is None or self._join is not None:
            # Not Stable, or a JoinGroup is parked on the coordinator connection (checked here, in the
            # driver's step, not before it): no heartbeat behind it.
            self.next_heartbeat = now() + self.config.heartbeat_interval_ms / 1000
            return
        if now() - self.last_poll > self.config.max_poll_interval_ms / 1000:
            log.warning(
                "group %s: poll() not called for max_poll_interval_ms=%d; leaving the group",
                self.group_id,
                self.config.max_poll_interval_ms,
            )
            yield from self.leave_op("consumer poll timeout has expired")
            return
        if now() < self.next_heartbeat:
            return
        generation, member_id = self.generation, self.member_id
        self.next_heartbeat = now() + self.config.heartbeat_interval_ms / 1000
        try:
            doc = yield Call(
                m.HeartbeatRequest(
                    id=0,
                    group_id=self.group_id,
                    generation_id=generation,
                    member_id=member_id,
                    group_instance_id=self.config.group_instance_id,
                ),
                self._timeout_s,
            )
        except BrokerConnectionError as exc:  # find it again at the next poll; the membership stands
            self._coordinator_unknown(str(exc))
            return
        code = doc["error_code"]
        if not code:
            return
        if code in _COORDINATOR_GONE:
            self._coordinator_unknown(doc.get("error_message") or "heartbeat")
        elif (self.generation, self.member_id) != (generation, member_id):
            return  # a rejoin already changed the generation: this answer is about the old one
        elif code == ErrorCode.REBALANCE_IN_PROGRESS:
            self.request_rejoin("the group is rebalancing")
        elif code == ErrorCode.ILLEGAL_GENERATION:
            self._reset_generation(keep_member_id=True)
        elif code == ErrorCode.UNKNOWN_MEMBER_ID:
            self._reset_generation(keep_member_id=False)
        elif code != ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
            log.warning("group %s: heartbeat failed: %s", self.group_id, doc.get("error_message"))

    def leave_op(self, reason: str) -> Op[None]:
        """Leave the group (a member that has an id); the member forgets its id and generation.
        A member with group_instance_id leaves too: the broker has no static membership (Kafka's
        static members would stay until their session ends)."""
        member_id = self.member_id
        self._join = None
        self._reset_generation(keep_member_id=False)
        if not member_id or self.coordinator is None:
            return
        request = m.LeaveGroupRequest(
            id=0, group_id=self.group_id, members=(m.MemberIdentity(member_id=member_id, reason=reason),)
        )
        try:
            doc = yield Call(request, self._timeout_s)
        except BrokerConnectionError as exc:
            log.info("group %s: leave_group not answered: %s", self.group_id, exc)
            return
        if doc["error_code"]:
            log.info("group %s: leave_group: %s", self.group_id, doc.get("error_message"))

    def close_op(self) -> Op[None]:
        """Auto-commit, revoke, leave."""
        if self.state == STABLE:
            yield from self._prepare_op()
        yield from self.leave_op("the consumer is being closed")

    # -- offsets ---------------------------------------------------------------------------------

    def maybe_auto_commit_op(self) -> Op[None]:
        """At poll time, every auto_commit_interval_ms: commit the positions, i.e. what earlier
        polls returned (at-least-once, as Kafka's auto-commit). Failures are logged, not raised."""
        if (
            not self.config.enable_auto_commit
            or now() < self.next_auto_commit
            or (self.core.is_group_subscribed() and not self.active)
        ):
            return
        self.next_auto_commit = now() + self.config.auto_commit_interval_ms / 1000
        try:
            yield from self.commit_op(None)
        except TriologClientError as exc:
            log.warning("group %s: auto-commit failed: %s", self.group_id, exc)

    def commit_op(self, offsets: dict | None) -> Op[None]:
        """Commit ``offsets`` ({tp: offset or (offset, metadata)}; None: every assigned partition's
        position). Retried while the coordinator moves or loads, within request_timeout_ms;
        CommitFailedError when the group rebalanced or this member is no longer in it."""
        if offsets is None:
            offsets = self.core.positions()
        if not offsets:
            return
        by_topic: dict[str, list[m.OffsetCommitPartition]] = {}
        for tp, value in offsets.items():
            tp = TopicPartition(*tp)
            offset, metadata = (value, "") if isinstance(value, int) else (value[0], value[1])
            by_topic.setdefault(tp.topic, []).append(
                m.OffsetCommitPartition(partition=tp.partition, committed_offset=offset, committed_metadata=metadata)
            )
        topics = tuple(m.OffsetCommitTopic(name=name, partitions=tuple(parts)) for name, parts in by_topic.items())
        deadline = now() + self._timeout_s
        while True:
            if self.state != STABLE and self.core.is_group_subscribed():
                raise CommitFailedError(
                    "the consumer is not a member of the group (it rejoins at the next "
                    "poll): its partitions may already belong to another member"
                )
            generation, member_id = (self.generation, self.member_id) if self.state == STABLE else (-1, "")
            if not (yield from self._ensure_coordinator_op(deadline)):
                raise error_for(
                    ErrorCode.COORDINATOR_NOT_AVAILABLE,
                    f"no coordinator found for group {self.group_id!r} to commit to",
                )
            request = m.OffsetCommitRequest(
                id=0,
                group_id=self.group_id,
                generation_id=generation,
                member_id=member_id,
                group_instance_id=self.config.group_instance_id,
                topics=topics,
            )
            try:
                doc = yield Call(request, self._timeout_s)
            except BrokerConnectionError as exc:  # its fate is unknown: a commit twice is harmless
                self._coordinator_unknown(str(exc))
                if now() + self._backoff_s >= deadline:
                    raise
                yield Sleep(self._backoff_s)
                continue
            codes = {doc["error_code"]} | {p["error_code"] for t in doc["topics"] for p in t["partitions"]}
            codes.discard(0)
            if not codes:
                return
            first = (
                doc if doc["error_code"] else next(p for t in doc["topics"] for p in t["partitions"] if p["error_code"])
            )
            code = first["error_code"]
            if code in _LOST_GENERATION:
                if (self.generation, self.member_id) == (generation, member_id) and generation >= 0:
                    if code == ErrorCode.UNKNOWN_MEMBER_ID:
                        self._reset_generation(keep_member_id=False)
                    elif code == ErrorCode.ILLEGAL_GENERATION:
                        self._reset_generation(keep_member_id=True)
                    else:
                        self.request_rejoin("the group is rebalancing")
                raise CommitFailedError(
                    f"commit of group {self.group_id!r} failed: {first.get('error_message')}; the group has "
                    f"rebalanced and the partitions may belong to another member now"
                )
            if code in _COORDINATOR_GONE or code in (
                ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                ErrorCode.REQUEST_TIMED_OUT,
            ):
                if code in _COORDINATOR_GONE:
                    self._coordinator_unknown(first.get("error_message") or "offset_commit")
                if now() + self._backoff_s >= deadline:
                    raise error_for(code, first.get("error_message"))
                yield Sleep(self._backoff_s)
                continue
            raise error_for(code, first.get("error_message"))

    def fetch_committed_op(self, tps) -> Op[dict[TopicPartition, int]]:
        """The group's committed offsets for ``tps`` (a partition without one is left out)."""
        tps = [TopicPartition(*tp) for tp in tps]
        if not tps:
            return {}
        by_topic: dict[str, list[int]] = {}
        for tp in tps:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        request = m.OffsetFetchRequest(
            id=0,
            group_id=self.group_id,
            # read_committed: not an offset a pending transaction is about to replace (KIP-447).
            require_stable=self.config.isolation_level == "read_committed",
            topics=tuple(
                m.OffsetFetchTopic(name=name, partitions=tuple(sorted(set(parts)))) for name, parts in by_topic.items()
            ),
        )
        deadline = now() + self._timeout_s
        while True:
            if not (yield from self._ensure_coordinator_op(deadline)):
                raise error_for(
                    ErrorCode.COORDINATOR_NOT_AVAILABLE, f"no coordinator found for group {self.group_id!r}"
                )
            try:
                doc = yield Call(request, self._timeout_s)
            except BrokerConnectionError as exc:
                self._coordinator_unknown(str(exc))
                if now() + self._backoff_s >= deadline:
                    raise
                yield Sleep(self._backoff_s)
                continue
            code = doc["error_code"]
            if code in _COORDINATOR_GONE or code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
                if code in _COORDINATOR_GONE:
                    self._coordinator_unknown(doc.get("error_message") or "offset_fetch")
                if now() + self._backoff_s >= deadline:
                    check_response(doc)
                yield Sleep(self._backoff_s)
                continue
            check_response(doc)
            unstable = any(
                part["error_code"] == ErrorCode.UNSTABLE_OFFSET_COMMIT
                for topic in doc["topics"]
                for part in topic["partitions"]
            )
            if unstable and now() + self._backoff_s < deadline:
                yield Sleep(self._backoff_s)  # the transaction holding it commits or aborts soon
                continue
            out = {}
            for topic in doc["topics"]:
                for part in topic["partitions"]:
                    if part["error_code"]:
                        raise error_for(
                            part["error_code"],
                            part.get("error_message"),
                            topic=topic["name"],
                            partition=part["partition"],
                        )
                    if part["committed_offset"] >= 0:
                        out[TopicPartition(topic["name"], part["partition"])] = part["committed_offset"]
            return out


def _notify(listener, method: str, partitions: set[TopicPartition]) -> None:
    callback = getattr(listener, method, None)
    if callback is not None:
        callback(partitions)
