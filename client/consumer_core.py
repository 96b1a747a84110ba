"""The consumer's logic, shared by :class:`triolog.client.Consumer` and :class:`triolog.client.aio.AsyncConsumer`.

Positions are tracked per assigned partition. A partition without a position gets one lazily (at
the next poll or position() call) from list_offsets: after seek_to_beginning/seek_to_end/
seek_to_timestamp, or, for a partition never positioned, from ``auto_offset_reset``.

``auto_offset_reset`` follows Kafka: ``"latest"`` (Kafka's default) or ``"earliest"`` is used both
for a partition with no position and when a fetch answers OFFSET_OUT_OF_RANGE (the position fell
below the log start after retention/delete_records, or was seeked past the end); ``"none"``
raises NoOffsetForPartitionError / :class:`triolog.client.errors.OffsetOutOfRangeError` instead.

With a ``group_id``, subscribe() makes the consumer a member of that group and the group's
leader decides its partitions, which start at the group's committed offsets (else
``auto_offset_reset``): :mod:`triolog.client.consumer_coordinator`. Without one, subscribe()
takes every partition of the topics itself.

Auto-creation follows Kafka: the consumer's metadata requests do not ask the broker to create
a missing topic unless ``allow_auto_create_topics`` is set (then the broker's
``auto.create.topics.enable`` decides). A subscribed topic that does not exist yet is looked up
again while polls wait (after ``retry_backoff_ms``, doubling up to 1 s), and its partitions are
consumed once it appears; until then poll returns nothing. An *assigned* partition that does not exist is an
error (UnknownTopicOrPartitionError from poll): the caller named it exactly.

Deserializers (``key_deserializer``/``value_deserializer``, called with the bytes of every
non-null key or value) run when a record is handed out, so a record that fails to deserialize
stays the next one: every poll raises :class:`triolog.client.errors.RecordDeserializationError`
for it until the caller seeks past it (Kafka's behaviour).

Fetches are long polls (``fetch_max_wait_ms``, cut to what is left of poll's timeout). The broker
returns whole batches, possibly starting before the position; records below it are skipped, and
the position then moves to the end of the last batch (so compaction gaps are stepped over).

Fetches are pipelined as Kafka's consumer does: as soon as a fetch response with records is
buffered (checked, not yet decoded), the next fetch for those partitions is written, from the end
of what was fetched, so the broker reads while poll decodes and the caller works. At most one
fetch is in flight and at most one fetch's data buffered per partition beyond it; a response that
a seek (or a new assignment) made stale is dropped.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import cast

from triolog import core
from triolog.protocol import messages as m
from triolog.protocol.errors import CorruptRecordError, ErrorCode
from triolog.protocol.record_batch import HEADER_SIZE, TIMESTAMP_TYPE_MASK, read_header
from triolog.protocol.records import decode_batch, iter_batch_spans, records_data

from .cluster import LEADER_MOVED, retry_on_leader_op
from .errors import (
    BrokerConnectionError,
    CorruptMessageError,
    NoOffsetForPartitionError,
    RecordDeserializationError,
    TriologClientError,
    error_for,
)
from .metadata import MetadataCache
from .ops import Await, Call, Op, Sleep, Submit, check_response, now
from .serde import Deserializer, as_topic_function
from .types import EARLIEST, LATEST, ConsumerRecord, OffsetAndTimestamp, RecordColumns, TopicPartition

__all__ = ["ConsumerConfig", "ConsumerCore", "Polled", "PolledColumns", "list_offsets_op"]

_RESETS = {"earliest": EARLIEST, "latest": LATEST, "none": None}

#: What poll() returns, as kafka-python shapes it: records by partition, each list in offset order.
Polled = dict[TopicPartition, list[ConsumerRecord]]
#: What poll_columns() returns: the same records by partition, as columns.
PolledColumns = dict[TopicPartition, RecordColumns]

#: The record codec of the compiled core (triolog/core.py): builds ConsumerRecords straight from
#: the fetched bytes, one object a record, compiled where it was built.
_codec = core.load("protocol.record_codec")
_TIMESTAMP_NAMES = ("CreateTime", "LogAppendTime")


@dataclass(frozen=True)
class ConsumerConfig:
    """Kafka's consumer settings, with Kafka's defaults."""

    auto_offset_reset: str = "latest"
    fetch_max_wait_ms: int = 500
    fetch_min_bytes: int = 1
    fetch_max_bytes: int = 52_428_800
    max_partition_fetch_bytes: int = 1_048_576
    max_poll_records: int = 500
    request_timeout_ms: int = 30_000
    retry_backoff_ms: int = 100
    metadata_max_age_ms: int = 300_000
    #: Iteration stops after this long without a record (None: iterate forever), as kafka-python's.
    consumer_timeout_ms: float | None = None
    client_id: str = "triolog-consumer"
    #: Let metadata requests for subscribed or assigned topics create missing ones (when the
    #: broker's auto.create.topics.enable is on too). Off by default; Kafka's default is on.
    allow_auto_create_topics: bool = False
    #: A consumer group to join on subscribe() (see :mod:`triolog.client.consumer_coordinator`),
    #: and to commit offsets to; None: no group, subscribe() takes every partition itself.
    group_id: str | None = None
    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 3_000
    #: Longest time between polls before the member leaves the group; also the JoinGroup's
    #: rebalance timeout (how long the group waits for members to rejoin), as in Kafka.
    max_poll_interval_ms: int = 300_000
    #: Commit the positions every auto_commit_interval_ms at poll time, before a rebalance and
    #: at close (only with a group_id).
    enable_auto_commit: bool = True
    auto_commit_interval_ms: int = 5_000
    #: Assignor names, preferred first (Kafka's 3.x default is range then cooperative-sticky;
    #: this client has range and roundrobin).
    partition_assignment_strategy: tuple[str, ...] = ("range", "roundrobin")
    #: A static member's id (Kafka's group.instance.id): it does not leave the group on close.
    group_instance_id: str | None = None
    #: Kafka's ``isolation.level``: ``read_committed`` reads up to the last stable offset and
    #: skips the records of aborted transactions (and starts from committed offsets only once no
    #: transaction holds them); ``read_uncommitted`` (Kafka's default) reads everything.
    isolation_level: str = "read_uncommitted"

    def __post_init__(self) -> None:
        if self.isolation_level not in ("read_committed", "read_uncommitted"):
            raise ValueError(
                f"isolation_level must be read_committed or read_uncommitted, got {self.isolation_level!r}"
            )
        if self.auto_offset_reset not in _RESETS:
            raise ValueError(f"auto_offset_reset must be earliest, latest or none, got {self.auto_offset_reset!r}")
        if self.max_poll_records < 1:
            raise ValueError(f"max_poll_records must be >= 1, got {self.max_poll_records}")
        strategy = self.partition_assignment_strategy
        if isinstance(strategy, str):
            strategy = (strategy,)
        object.__setattr__(self, "partition_assignment_strategy", tuple(strategy))
        from .assignors import ASSIGNORS

        unknown = [name for name in self.partition_assignment_strategy if name not in ASSIGNORS]
        if unknown or not self.partition_assignment_strategy:
            raise ValueError(
                f"partition_assignment_strategy must name one or more of {', '.join(ASSIGNORS)}, "
                f"got {self.partition_assignment_strategy!r}"
            )
        if self.group_id is not None and not isinstance(self.group_id, str):
            raise ValueError(f"group_id must be a string, got {self.group_id!r}")
        for name in ("session_timeout_ms", "heartbeat_interval_ms", "max_poll_interval_ms", "auto_commit_interval_ms"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.heartbeat_interval_ms >= self.session_timeout_ms:
            raise ValueError(
                f"heartbeat_interval_ms ({self.heartbeat_interval_ms}) must be lower than "
                f"session_timeout_ms ({self.session_timeout_ms})"
            )


@dataclass
class _PartitionState:
    position: int | None = None
    #: -2 earliest, -1 latest, or a timestamp to seek to; None: use auto_offset_reset.
    pending_reset: int | None = None
    #: Fetched batches not yet handed out, in offset order: _Pending (checked, not yet decoded),
    #: _Decoded (ConsumerRecords) or RecordColumns chunks.
    buffer: deque = field(default_factory=deque)
    #: Where fetching resumes once the buffer is consumed: the end of the last fetched batch.
    next_fetch_offset: int | None = None


def list_offsets_op(
    queries: dict[TopicPartition, int], timeout_s: float, backoff_s: float = 0.1, isolation_level: int = 0
) -> Op[dict[TopicPartition, OffsetAndTimestamp]]:
    """list_offsets, asked of each partition's leader; raises the first partition error, typed.
    A leader that moved (or is being elected) and a lost connection are retried after
    ``backoff_s`` within ``timeout_s`` (see :func:`triolog.client.cluster.retry_on_leader_op`)."""
    return (
        yield from retry_on_leader_op(
            lambda: _list_offsets_once_op(queries, timeout_s, isolation_level), timeout_s, backoff_s
        )
    )


def _list_offsets_once_op(
    queries: dict[TopicPartition, int], timeout_s: float, isolation_level: int = 0
) -> Op[dict[TopicPartition, OffsetAndTimestamp]]:
    by_topic: dict[str, list[m.ListOffsetsPartition]] = {}
    for (topic, partition), timestamp in queries.items():
        by_topic.setdefault(topic, []).append(m.ListOffsetsPartition(partition=partition, timestamp=timestamp))
    request = m.ListOffsetsRequest(
        id=0,
        isolation_level=isolation_level,
        topics=tuple(m.ListOffsetsTopic(name=name, partitions=tuple(parts)) for name, parts in by_topic.items()),
    )
    doc = check_response((yield Call(request, timeout_s)))
    out = {}
    for topic in doc["topics"]:
        for part in topic["partitions"]:
            if part["error_code"]:
                raise error_for(
                    part["error_code"], part.get("error_message"), topic=topic["name"], partition=part["partition"]
                )
            out[TopicPartition(topic["name"], part["partition"])] = OffsetAndTimestamp(
                part["offset"], part["timestamp"]
            )
    return out


def _deserializing(
    key_deserializer: Deserializer | None, value_deserializer: Deserializer | None
) -> Callable[[ConsumerRecord], ConsumerRecord] | None:
    """One function applying both deserializers to a record (None stays None), or None if unset."""
    if key_deserializer is None and value_deserializer is None:
        return None
    kd = as_topic_function("key_deserializer", key_deserializer, "deserialize")
    vd = as_topic_function("value_deserializer", value_deserializer, "deserialize")

    def deserialize(record: ConsumerRecord) -> ConsumerRecord:
        key, value = record.key, record.value
        try:
            if key is not None and kd is not None:
                key = kd(record.topic, record.headers, key)
            if value is not None and vd is not None:
                value = vd(record.topic, record.headers, value)
            return record._replace(key=key, value=value)
        except Exception as exc:
            raise RecordDeserializationError(
                f"record at offset {record.offset} does not deserialize: {type(exc).__name__}: {exc}; "
                f"seek past it to go on",
                topic=record.topic,
                partition=record.partition,
                offset=record.offset,
            ) from exc

    return deserialize


class ConsumerCore:
    def __init__(
        self,
        config: ConsumerConfig,
        *,
        key_deserializer: Deserializer | None = None,
        value_deserializer: Deserializer | None = None,
    ) -> None:
        self.config = config
        self.metadata = MetadataCache(
            max_age_s=config.metadata_max_age_ms / 1000,
            request_timeout_s=config.request_timeout_ms / 1000,
            retry_backoff_s=config.retry_backoff_ms / 1000,
            allow_auto_create=config.allow_auto_create_topics,
        )
        self._deserialize = _deserializing(key_deserializer, value_deserializer)
        self._states: dict[TopicPartition, _PartitionState] = {}
        self._subscription: tuple[str, ...] = ()
        self._pattern = None
        #: Topics still to look up in metadata: subscribed ones not seen yet, or (only with
        #: allow_auto_create_topics) assigned ones, so that the lookup creates them.
        self._unresolved: list[str] = []
        self._next_lookup, self._lookups_missed = 0.0, 0
        self._timeout_s = config.request_timeout_ms / 1000
        #: Fetch and list_offsets' isolation_level: 1 for read_committed.
        self._isolation = 1 if config.isolation_level == "read_committed" else 0
        self._backoff_s = config.retry_backoff_ms / 1000
        #: A fetch found a partition's leader moved: the poll waits retry_backoff before the next.
        self._leader_moved = False
        #: The fetch written ahead (see the module's docstring): (handle, {tp: fetch offset}), or None.
        self._in_flight: tuple[object, dict[TopicPartition, int]] | None = None
        #: The group membership (with a group_id), Kafka's ConsumerCoordinator.
        self.group = None
        if config.group_id is not None:
            from .consumer_coordinator import ConsumerCoordinator

            self.group = ConsumerCoordinator(self)

    # -- assignment and seeks (local, no I/O) --------------------------------------------------

    def assign(self, partitions) -> None:
        """Consume exactly these (topic, partition) pairs; replaces any subscription (but not a
        group subscription: unsubscribe() first, which leaves the group)."""
        if self.is_group_subscribed():
            raise ValueError("this consumer is subscribed through its group: call unsubscribe() before assign()")
        tps = [TopicPartition(*tp) for tp in partitions]
        self._subscription, self._pattern = (), None
        self._states = {tp: self._states.get(tp, _PartitionState()) for tp in tps}
        self._unresolved = list(dict.fromkeys(tp.topic for tp in tps)) if self.config.allow_auto_create_topics else []
        self._next_lookup, self._lookups_missed = 0.0, 0

    def subscribe(self, topics=(), pattern=None, listener=None) -> None:
        """Consume every partition of ``topics``. Without a group_id: resolved from metadata at the
        next poll. With one: the group shares them out (the next poll joins it), and ``pattern``
        (a regular expression matched against whole topic names, refreshed every
        metadata_max_age_ms) may stand for the topics; ``listener`` gets
        on_partitions_revoked/on_partitions_assigned calls (Kafka's ConsumerRebalanceListener)."""
        topics = (topics,) if isinstance(topics, str) else tuple(topics)
        if pattern is not None:
            if topics:
                raise ValueError("subscribe to topics or to a pattern, not both")
            if self.group is None:
                raise ValueError("subscribe(pattern=...) needs a group_id")
            pattern = re.compile(pattern) if isinstance(pattern, str) else pattern
        elif not topics and self.group is not None:
            raise ValueError("subscribe() needs topics or a pattern (unsubscribe() leaves the group)")
        if listener is not None and self.group is None:
            raise ValueError("a rebalance listener needs a group_id")
        self._states = {}
        self._in_flight = None
        if self.group is not None:
            self._subscription = topics
            self._pattern = pattern
            self._unresolved = []
            self.group.subscribe(topics, pattern, listener)
            return
        self._subscription = topics
        self._unresolved = list(dict.fromkeys(self._subscription))
        self._next_lookup, self._lookups_missed = 0.0, 0

    def is_group_subscribed(self) -> bool:
        """Whether the partitions come from the group (subscribe() with a group_id)."""
        return self.group is not None and bool(self._subscription or self._pattern is not None)

    def subscription(self) -> set[str]:
        """The subscribed topics (for a pattern: the topics it matched at the last check)."""
        if self.group is not None and self._pattern is not None:
            return set(self.group.subscription)
        return set(self._subscription)

    def set_group_assignment(self, tps, committed: dict[TopicPartition, int] | None = None) -> None:
        """The group gave this member ``tps``; positions start at the committed offsets (else
        auto_offset_reset at the next poll). Buffered records of other partitions are dropped."""
        committed = committed or {}
        self._states = {tp: _PartitionState(position=committed.get(tp)) for tp in tps}
        self._in_flight = None

    def positions(self) -> dict[TopicPartition, int]:
        """Every assigned partition's position that is known (what a commit of "everything
        consumed" commits)."""
        return {tp: state.position for tp, state in self._states.items() if state.position is not None}

    def assignment(self) -> set[TopicPartition]:
        return set(self._states)

    def _state(self, tp) -> _PartitionState:
        tp = TopicPartition(*tp)
        state = self._states.get(tp)
        if state is None:
            raise ValueError(f"partition {tp.topic}-{tp.partition} is not assigned to this consumer")
        return state

    def seek(self, tp, offset: int) -> None:
        """Fetch from ``offset`` next (checked by the broker: out of range applies auto_offset_reset)."""
        if offset < 0:
            raise ValueError(f"offset must be >= 0, got {offset}")
        state = self._state(tp)
        state.position, state.pending_reset, state.next_fetch_offset = offset, None, None
        state.buffer.clear()

    def _seek_lazily(self, tps, target: int) -> None:
        for tp in self._states if tps is None else tps:
            state = self._state(tp)
            state.position, state.pending_reset, state.next_fetch_offset = None, target, None
            state.buffer.clear()

    def seek_to_beginning(self, tps=None) -> None:
        self._seek_lazily(tps, EARLIEST)

    def seek_to_end(self, tps=None) -> None:
        self._seek_lazily(tps, LATEST)

    def seek_to_timestamp(self, timestamp_ms: int, tps=None) -> None:
        """Position at the first record with timestamp >= ``timestamp_ms``; at the log end if none."""
        if timestamp_ms < 0:
            raise ValueError(f"timestamp must be >= 0 ms, got {timestamp_ms}")
        self._seek_lazily(tps, timestamp_ms)

    # -- operations ----------------------------------------------------------------------------

    def _ensure_assignment_op(self) -> Op[None]:
        """Look up the unresolved topics (backing off while they stay missing); a subscribed topic
        found gets all its partitions assigned, one still missing stays unresolved."""
        if not self._unresolved or now() < self._next_lookup:
            return
        topics = self._unresolved
        entries = yield from self.metadata.fetch_op(topics)
        # retry_backoff_ms, doubling while topics stay missing, up to 1 s (Kafka's retry.backoff.max.ms)
        backoff_ms = min(self.config.retry_backoff_ms * 2 ** min(self._lookups_missed, 16), 1000)
        self._next_lookup = now() + max(backoff_ms, self.config.retry_backoff_ms) / 1000
        self._lookups_missed += 1
        if not self._subscription:  # assigned topics: one lookup (it asked to create them) is all
            self._unresolved = []
            return
        still = []
        for topic in topics:
            entry = entries.get(topic)
            if entry is None or entry["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                still.append(topic)
            elif entry["error_code"]:
                raise error_for(entry["error_code"], entry.get("error_message"), topic=topic)
            else:
                for part in sorted(entry["partitions"], key=lambda p: p["partition"]):
                    self._states.setdefault(TopicPartition(topic, part["partition"]), _PartitionState())
        self._unresolved = still

    def _resolve_positions_op(self) -> Op[None]:
        queries: dict[TopicPartition, int] = {}
        for tp, state in self._states.items():
            if state.position is not None:
                continue
            target = state.pending_reset
            if target is None:
                target = _RESETS[self.config.auto_offset_reset]
                if target is None:
                    raise NoOffsetForPartitionError(
                        "no position and auto_offset_reset is 'none': seek first",
                        topic=tp.topic,
                        partition=tp.partition,
                    )
            queries[tp] = target
        if not queries:
            return
        found = yield from list_offsets_op(queries, self._timeout_s, self._backoff_s, self._isolation)
        missing = {tp: LATEST for tp, answer in found.items() if answer.offset < 0}  # no record that late
        if missing:
            found.update((yield from list_offsets_op(missing, self._timeout_s, self._backoff_s, self._isolation)))
        for tp, answer in found.items():
            known = self._states.get(tp)
            if known is not None and known.position is None:
                known.position, known.pending_reset = answer.offset, None

    def position_op(self, tp) -> Op[int]:
        """The offset of the next record poll will return for ``tp``."""
        self._state(tp)
        yield from self._resolve_positions_op()
        return self._state(tp).position  # type: ignore[return-value]  # (resolved just above)

    def offsets_for_times_op(self, timestamps: dict) -> Op[dict[TopicPartition, OffsetAndTimestamp | None]]:
        """Per partition, the first (offset, timestamp) with timestamp >= the given one; None if none."""
        found = yield from list_offsets_op(
            {TopicPartition(*tp): ts for tp, ts in timestamps.items()}, self._timeout_s, self._backoff_s
        )
        return {tp: (None if answer.offset < 0 else answer) for tp, answer in found.items()}

    def offsets_op(self, tps, target: int) -> Op[dict[TopicPartition, int]]:
        found = yield from list_offsets_op(
            {TopicPartition(*tp): target for tp in tps}, self._timeout_s, self._backoff_s, self._isolation
        )
        return {tp: answer.offset for tp, answer in found.items()}

    def poll_op(self, timeout_ms: float, max_records: int | None = None) -> Op[Polled]:
        """Up to ``max_records`` (default ``max_poll_records``) records from the assigned
        partitions, by partition, waiting up to ``timeout_ms`` for the first ones; {} if none."""
        return (yield from self._poll_op(timeout_ms, max_records, self._drain))

    def poll_columns_op(self, timeout_ms: float, max_records: int | None = None) -> Op[PolledColumns]:
        """poll_op's records as one RecordColumns a partition, decoded straight into the columns
        (no object a record). The keys and values are the fetched bytes: not available with
        deserializers. Positions and offsets move exactly as with poll_op; the two mix freely."""
        if self._deserialize is not None:
            raise ValueError(
                "poll_columns hands out the fetched bytes; it is not available on a consumer with "
                "a key_deserializer or value_deserializer: use poll()"
            )
        return (yield from self._poll_op(timeout_ms, max_records, self._drain_columns))

    def _poll_op(self, timeout_ms: float, max_records: int | None, drain) -> Op[dict]:
        if max_records is None:
            max_records = self.config.max_poll_records
        elif isinstance(max_records, bool) or not isinstance(max_records, int) or max_records < 1:
            raise ValueError(f"max_records must be an int >= 1, got {max_records!r}")
        deadline = now() + max(0.0, timeout_ms) / 1000
        backoff_s = self.config.retry_backoff_ms / 1000
        while True:
            if self.group is not None:
                try:
                    if not (yield from self._group_step_op(deadline)):
                        return {}  # the rebalance goes on past this poll's timeout
                except BrokerConnectionError:
                    if now() + backoff_s >= deadline:
                        raise
                    yield Sleep(backoff_s)
                    continue
            records = drain(max_records)
            if records:
                return records
            try:
                yield from self._ensure_assignment_op()
                yield from self._resolve_positions_op()
                records = drain(max_records)
                if records:
                    return records
                remaining_ms = max(0, int((deadline - now()) * 1000))
                fetchable = [tp for tp, state in self._states.items() if state.position is not None]
                if not fetchable:
                    if not remaining_ms:
                        return {}
                    if not self._unresolved:
                        yield Sleep(remaining_ms / 1000)
                        return {}
                    # a subscribed topic is missing: look again when the backoff allows
                    yield Sleep(min(remaining_ms / 1000, max(0.0, self._next_lookup - now())))
                    continue
                if self._prefetch_useful():
                    assert self._in_flight is not None  # (what _prefetch_useful looked at)
                    handle, requested = self._in_flight
                    doc = yield Await(handle, remaining_ms / 1000)
                    if doc is None:  # not back yet: it stays in flight for the next poll
                        return {}
                    self._in_flight = None
                    self._take_fetch(doc, requested)
                else:
                    self._in_flight = None  # stale (a seek, a new assignment): its answer is dropped
                    yield from self._fetch_op(fetchable, min(self.config.fetch_max_wait_ms, remaining_ms))
                yield from self._prefetch_op()
                if self._leader_moved:
                    self._leader_moved = False
                    records = drain(max_records)
                    if records:
                        return records
                    self._in_flight = None  # (asked of the old leader)
                    if now() >= deadline:
                        return records
                    yield Sleep(min(backoff_s, max(0.0, deadline - now())))
                    continue
            except BrokerConnectionError:
                # Reads change nothing, so they are retried while the poll has time left; a broker
                # still unreachable when it runs out is reported, not hidden behind an empty poll.
                self._in_flight = None
                if now() + backoff_s >= deadline:
                    raise
                yield Sleep(backoff_s)
                continue
            records = drain(max_records)
            if records or now() >= deadline:
                return records

    # -- the group (with a group_id; see triolog.client.consumer_coordinator) --------------------

    def _group_step_op(self, deadline: float) -> Op[bool]:
        """What a poll does for the group first: note the poll (max_poll_interval_ms), auto-commit
        when due, and (subscribed) join or rejoin; False while the rebalance outlasts ``deadline``."""
        group = self.group
        assert group is not None  # (poll steps the group only when there is one)
        group.last_poll = now()
        yield from group.maybe_auto_commit_op()
        if not self.is_group_subscribed():
            return True
        return (yield from group.ensure_active_op(deadline))

    def _require_group(self, what: str):
        if self.group is None:
            raise ValueError(f"{what} needs a group_id (Kafka's InvalidGroupIdException)")
        return self.group

    def commit_op(self, offsets: dict | None = None) -> Op[None]:
        """Commit ``offsets`` ({tp: next offset to read, or (offset, metadata)}), or by default
        every assigned partition's position (what poll() has returned), to the group; synchronous
        (Kafka's commitSync). CommitFailedError if the group rebalanced meanwhile."""
        return (yield from self._require_group("commit()").commit_op(offsets))

    def committed_op(self, tp) -> Op[int | None]:
        """The group's committed offset for ``tp``; None if it has none."""
        tp = TopicPartition(*tp)
        found = yield from self._require_group("committed()").fetch_committed_op([tp])
        return found.get(tp)

    def unsubscribe_op(self) -> Op[None]:
        """Drop the subscription or assignment; a group member commits (auto-commit on) and leaves."""
        if self.group is not None and self.is_group_subscribed():
            yield from self.group.close_op()
        self._subscription, self._pattern, self._states, self._unresolved = (), None, {}, []
        self._in_flight = None

    def close_op(self) -> Op[None]:
        """What close() sends: the group member's last commit (auto-commit on) and its leave_group."""
        if self.group is None:
            return
        if self.group is not None and self.is_group_subscribed():
            yield from self.group.close_op()
        elif self.config.enable_auto_commit and self._states:
            yield from self.group.commit_op(None)

    def heartbeat_op(self) -> Op[None]:
        """The background heartbeat's step (the drivers run it every heartbeat_due() seconds)."""
        if self.group is not None and self.is_group_subscribed():
            yield from self.group.heartbeat_op()

    @staticmethod
    def _fetch_from(state: _PartitionState) -> int | None:
        """Where the next fetch of a partition starts: the end of what is buffered, or the position."""
        return state.position if state.next_fetch_offset is None else state.next_fetch_offset

    def _fetch_request(self, requested: dict[TopicPartition, int], max_wait_ms: int) -> m.FetchRequest:
        config = self.config
        by_topic: dict[str, list[m.FetchPartition]] = {}
        for tp, offset in requested.items():
            by_topic.setdefault(tp.topic, []).append(
                m.FetchPartition(
                    partition=tp.partition, fetch_offset=offset, partition_max_bytes=config.max_partition_fetch_bytes
                )
            )
        return m.FetchRequest(
            id=0,
            isolation_level=self._isolation,
            max_wait_ms=max_wait_ms,
            min_bytes=config.fetch_min_bytes,
            max_bytes=config.fetch_max_bytes,
            topics=tuple(m.FetchTopic(name=name, partitions=tuple(parts)) for name, parts in by_topic.items()),
        )

    def _fetch_op(self, tps: list[TopicPartition], max_wait_ms: int) -> Op[None]:
        # (a partition is fetchable once it has a position: no None here)
        requested = cast("dict[TopicPartition, int]", {tp: self._fetch_from(self._states[tp]) for tp in tps})
        request = self._fetch_request(requested, max_wait_ms)
        doc = yield Call(request, self._timeout_s + max_wait_ms / 1000)
        self._take_fetch(doc, requested)

    def _prefetch_op(self) -> Op[None]:
        """Write the next fetch for the partitions that just got records, from the end of what is
        buffered, unless one is in flight (see the module's docstring)."""
        if self._in_flight is not None:
            return
        requested = {}
        for tp, state in self._states.items():
            if state.next_fetch_offset is not None and state.position is not None and len(state.buffer) > 0:
                requested[tp] = state.next_fetch_offset
        if not requested:
            return
        max_wait_ms = self.config.fetch_max_wait_ms
        handle = yield Submit(self._fetch_request(requested, max_wait_ms), self._timeout_s + max_wait_ms / 1000)
        self._in_flight = (handle, requested)

    def _prefetch_useful(self) -> bool:
        """Whether the fetch in flight still asks for what some partition needs next."""
        if self._in_flight is None:
            return False
        for tp, offset in self._in_flight[1].items():
            state = self._states.get(tp)
            if state is not None and state.position is not None and self._fetch_from(state) == offset:
                return True
        return False

    def _take_fetch(self, doc: dict, requested: dict[TopicPartition, int]) -> None:
        """Buffer a fetch response's records (a partition seeked or unassigned since is skipped)."""
        check_response(doc)
        errors: list[TriologClientError] = []
        for topic in doc["topics"]:
            for part in topic["partitions"]:
                tp = TopicPartition(topic["name"], part["partition"])
                state = self._states.get(tp)
                offset = requested.get(tp)
                if state is None or offset is None or state.position is None or self._fetch_from(state) != offset:
                    continue  # unassigned or seeked meanwhile: this answer is stale
                code = part["error_code"]
                if code == ErrorCode.OFFSET_OUT_OF_RANGE and self.config.auto_offset_reset != "none":
                    if state.buffer:  # the records before it are still handed out; then reset
                        continue
                    state.position, state.pending_reset = None, _RESETS[self.config.auto_offset_reset]
                elif code in LEADER_MOVED:
                    self._leader_moved = True  # the connection looks the leader up again; fetched next poll
                elif code:
                    errors.append(error_for(code, part.get("error_message"), topic=tp.topic, partition=tp.partition))
                else:
                    try:
                        self._buffer(tp, state, part["records"], offset, part.get("aborted_transactions"))
                    except TriologClientError as exc:
                        errors.append(exc)
        if errors:
            raise errors[0]

    def _buffer(
        self,
        tp: TopicPartition,
        state: _PartitionState,
        data: bytes,
        position: int | None = None,
        aborted_transactions=None,
    ) -> None:
        """Check a fetched partition's batches (framing, CRC, decompression) into the buffer; their
        records are decoded when a poll hands them out, a batch at a time, so a large fetch is never
        all in memory as objects at once. ``position``: the offset the fetch asked for (default:
        the partition's position). ``aborted_transactions`` (read_committed): the fetch's list of
        aborted transactions, whose batches are skipped whole (Kafka's consumer: a producer's
        transactional batches from the aborted transaction's first offset to its ABORT marker)."""
        aborted = None
        if aborted_transactions:
            aborted = sorted((t["first_offset"], t["producer_id"]) for t in aborted_transactions)
        aborting: set[int] = set()
        if position is None:
            position = state.position
            assert position is not None  # (a partition is fetched once it has a position)
        pending = []
        next_offset = None
        if type(data) is not bytes:
            data = bytes(data)
        whole = memoryview(data)
        try:
            for start, size in iter_batch_spans(whole):
                view = whole[start : start + size]
                header = read_header(view)
                next_offset = header.base_offset + header.last_offset_delta + 1
                if aborted is not None:
                    while aborted and aborted[0][0] <= next_offset - 1:
                        aborting.add(aborted.pop(0)[1])
                    if header.is_control:
                        if header.producer_id in aborting and _is_abort_marker(view):
                            aborting.discard(header.producer_id)
                        continue
                    if header.is_transactional and header.producer_id in aborting:
                        continue
                if next_offset <= position or header.is_control:
                    continue
                header, payload = records_data(view, copy=False)
                if payload is None:
                    continue
                if type(payload) is memoryview:  # uncompressed: decoded in place from the fetched bytes
                    pending.append(_Pending(header, data, start + HEADER_SIZE, start + size, position))
                else:
                    pending.append(_Pending(header, payload, 0, len(payload), position))
        except Exception as exc:  # protocol.errors.CorruptRecordError & co: the broker sent bad bytes
            raise CorruptMessageError(
                f"fetched data does not decode: {exc}", topic=tp.topic, partition=tp.partition
            ) from None
        state.buffer.extend(pending)
        if next_offset is not None and next_offset > position:
            state.next_fetch_offset = next_offset
            if not state.buffer:
                state.position = next_offset

    def _drain(self, limit: int) -> Polled:
        out: Polled = {}
        count = 0
        deserialize = self._deserialize
        for tp, state in self._states.items():
            buffer = state.buffer
            records: list[ConsumerRecord] = []
            while buffer and count < limit:
                chunk = buffer[0]
                if type(chunk) is not _Decoded:
                    try:
                        chunk = buffer[0] = _Decoded(
                            chunk.records(tp) if type(chunk) is _Pending else _as_records(tp, chunk)
                        )
                    except CorruptMessageError:  # stays next: every poll raises until a seek passes it
                        if records:
                            out[tp] = records
                            state.position = records[-1].offset + 1
                        if out:
                            return out
                        raise
                decoded, start = chunk.items, chunk.start
                stop = min(len(decoded), start + limit - count)
                if deserialize is None:
                    records += decoded[start:stop] if start or stop < len(decoded) else decoded
                    count += stop - start
                    start = stop
                else:
                    while start < stop:
                        try:
                            record = deserialize(decoded[start])
                        except RecordDeserializationError:
                            chunk.start = start  # stays next: the position does not pass it
                            if records:
                                out[tp] = records
                                state.position = records[-1].offset + 1
                            if out:
                                return out  # hand out what came before it; the next poll raises
                            raise
                        records.append(record)
                        start += 1
                        count += 1
                if start == len(decoded):
                    buffer.popleft()
                else:
                    chunk.start = start
            if records:
                out[tp] = records
                state.position = records[-1].offset + 1
            if not buffer and state.next_fetch_offset is not None and state.position is not None:
                state.position = max(state.position, state.next_fetch_offset)
                state.next_fetch_offset = None
        return out

    def _drain_columns(self, limit: int) -> PolledColumns:
        out: PolledColumns = {}
        count = 0
        for tp, state in self._states.items():
            buffer = state.buffer
            columns = RecordColumns()
            while buffer and count < limit:
                chunk = buffer[0]
                if type(chunk) is _Pending:
                    try:
                        chunk = buffer[0] = chunk.columns(tp)
                    except CorruptMessageError:  # stays next: every poll raises until a seek passes it
                        if columns.offsets:
                            out[tp] = columns
                            state.position = columns.offsets[-1] + 1
                        if out:
                            return out
                        raise
                elif type(chunk) is _Decoded:  # records decoded for poll()
                    rest = RecordColumns()
                    for record in chunk.items[chunk.start :]:
                        rest.append_record(record)
                    chunk = buffer[0] = rest
                room = limit - count
                if len(chunk) <= room:
                    buffer.popleft()
                else:
                    chunk, buffer[0] = chunk.split(room)
                columns.extend(chunk)
                count += len(chunk)
            if columns.offsets:
                out[tp] = columns
                state.position = columns.offsets[-1] + 1
            if not buffer and state.next_fetch_offset is not None and state.position is not None:
                state.position = max(state.position, state.next_fetch_offset)
                state.next_fetch_offset = None
        return out


def _is_abort_marker(batch) -> bool:
    """A control batch's one record is an ABORT marker (its key: version int16, type int16 0)."""
    decoded = decode_batch(bytes(batch))
    if not decoded.records:
        return False
    key = decoded.records[0].key
    return key is not None and len(key) >= 4 and key[2:4] == b"\x00\x00"


class _Pending:
    """One fetched batch, checked and decompressed, whose records are decoded when handed out."""

    __slots__ = (
        "count",
        "base_offset",
        "base_timestamp",
        "append_time",
        "timestamp_name",
        "payload",
        "origin",
        "stop",
        "position",
    )

    def __init__(self, header, payload: bytes, origin: int, stop: int, position: int) -> None:
        self.count, self.base_offset, self.base_timestamp = (
            header.records_count,
            header.base_offset,
            header.base_timestamp,
        )
        log_append_time = header.attributes & TIMESTAMP_TYPE_MASK
        self.append_time = header.max_timestamp if log_append_time else None
        self.timestamp_name = _TIMESTAMP_NAMES[1 if log_append_time else 0]
        self.payload, self.origin, self.stop, self.position = payload, origin, stop, position

    def records(self, tp: TopicPartition) -> list[ConsumerRecord]:
        """The records at or after the fetch position, straight from the compiled decoder."""
        out: list[ConsumerRecord] = []
        try:
            _codec.decode_consumer_records(
                self.payload,
                self.count,
                self.base_offset,
                self.base_timestamp,
                self.append_time,
                self.position,
                out,
                ConsumerRecord,
                tp.topic,
                tp.partition,
                self.timestamp_name,
                self.origin,
                self.stop,
            )
        except CorruptRecordError as exc:
            raise self._error(tp, exc) from None
        return out

    def columns(self, tp: TopicPartition) -> RecordColumns:
        out = RecordColumns()
        try:
            _codec.decode_columns(
                self.payload,
                self.count,
                self.base_offset,
                self.base_timestamp,
                self.append_time,
                self.position,
                None,
                out,
                True,
                self.origin,
                self.stop,
            )
        except CorruptRecordError as exc:
            raise self._error(tp, exc) from None
        return out

    def _error(self, tp: TopicPartition, exc: Exception) -> CorruptMessageError:
        return CorruptMessageError(
            f"fetched data does not decode: record batch at base offset {self.base_offset}: {exc}",
            topic=tp.topic,
            partition=tp.partition,
        )


class _Decoded:
    """A batch's records, decoded for poll(), handed out from ``start`` on."""

    __slots__ = ("items", "start")

    def __init__(self, items: list[ConsumerRecord]) -> None:
        self.items, self.start = items, 0


def _as_records(tp: TopicPartition, columns: RecordColumns) -> list[ConsumerRecord]:
    """A RecordColumns chunk (decoded for poll_columns) as ConsumerRecords, for poll()."""
    return [
        ConsumerRecord(tp.topic, tp.partition, offset, timestamp, key, value, headers, _TIMESTAMP_NAMES[kind])
        for offset, timestamp, kind, key, value, headers in zip(
            columns.offsets, columns.timestamps, columns.types, columns.keys, columns.values, columns.headers
        )
    ]
