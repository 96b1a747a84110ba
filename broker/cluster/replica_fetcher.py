"""A follower copies its leaders' logs (Kafka's ReplicaFetcherManager and ReplicaFetcherThread,
as trio tasks).

The partitions to follow are the hosted ones (the replica manager's) whose leader is another
live broker. One fetcher task per leader broker (Kafka's ``num.replica.fetchers=1``) holds one
connection to the leader's endpoint on the inter-broker listener and sends Fetch v12 after Fetch
v12 for all its partitions, each from the local log's end (ReplicaId = this broker, the leader
epoch it believes current, the epoch of its last batch, its log start). A task is replaced when
its leader's partitions, their leader epochs or the leader's endpoint change (the replica
manager's generation or the metadata cache's moved).

Per partition of a response, in a worker thread (``run_sync``: disk work never runs on the event
loop), what Kafka's follower does:

- **DivergingEpoch** (truncate-on-fetch, KIP-595/KIP-320): the follower's log has a suffix the
  leader's has not. It truncates to where the two agree: with the leader's epoch E ending at
  offset L and the follower's own end of E (``end_offset_for_epoch``), to min(L, its end of E);
  if its largest epoch not above E is older than E, to the end of that epoch only, and the next
  fetch (naming that older epoch) narrows it further (Kafka's getOffsetTruncationState).
- **records**: appended as they are (``append_as_follower``: the leader's offsets, epochs and
  batches, so the files end byte-identical). An empty log handed a batch that starts below its
  start (the leader's log start in mid-batch) starts over at the batch (Kafka's rule).
- then the follower's high watermark moves up to min(leader's high watermark, its log end) and
  its log start up to the leader's (not above its own high watermark).
- **OFFSET_OUT_OF_RANGE**: a follower whose log ends below the leader's log start starts over,
  empty, at the leader's log start (``truncate_fully_and_start_at``); one whose log ends above
  the leader's high watermark truncates to that high watermark (committed, so the leader has it;
  Kafka truncates to the leader's log end, which a Fetch error does not carry); otherwise it
  waits ``replica.fetch.backoff.ms`` and asks again.
- **FENCED_LEADER_EPOCH** (the follower's leader epoch is older than the leader's): the
  partition is left out until the replica manager's generation moves (new metadata).
- **NOT_LEADER_OR_FOLLOWER, UNKNOWN_LEADER_EPOCH, UNKNOWN_TOPIC_OR_PARTITION** and any other
  error (a failed append too): the partition waits ``replica.fetch.backoff.ms``, or until the
  generation moves, and is asked for again (Kafka's partitionsWithError): the leader may simply
  not have applied the same metadata yet.

A connection that fails, closes or stays silent longer than ``replica.fetch.wait.max.ms`` plus
a margin is logged, and the task reconnects after ``replica.fetch.backoff.ms``. Nothing here
stops the broker. Logs go to ``triolog.cluster.fetcher``, a line per change of state (a fetcher
started or stopped, connected or not, a partition truncated, failing or fetching again), never
one per fetch.

Connections are plaintext, TLS (``ssl_context``: the leader's SSL listener), and/or SASL
(``sasl``: a follower logs in to the leader's SASL listener first, inter_broker_sasl.py).
"""

from __future__ import annotations

import ssl
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

import structlog
import trio

from triolog.broker.storage.errors import UnexpectedAppendOffsetError
from triolog.broker.storage.log import Log
from triolog.config.broker_config import BrokerConfig
from triolog.protocol.errors import ErrorCode
from triolog.protocol.frames import DEFAULT_MAX_FRAME_BYTES, FrameDecoder, RemoteProtocolError
from triolog.protocol.kafka.replica_fetch import (
    NO_EPOCH,
    EpochEndOffset,
    PartitionFetch,
    PartitionFetchResult,
    decode_replica_fetch_response,
    encode_replica_fetch,
)

from .broker_channel import open_broker_connection, receive_frame
from .inter_broker_sasl import InterBrokerSasl
from .metadata_cache import ClusterMetadataCache
from .replica_manager import HostedPartition, ReplicaManager

logger = structlog.get_logger("triolog.cluster.fetcher")

RunSync = Callable[..., Awaitable]
PartitionKey = tuple[str, int]

#: How much longer than replica.fetch.wait.max.ms a fetch's answer may take before the
#: connection counts as dead (Kafka's replica.socket.timeout.ms plays this part).
DEFAULT_RESPONSE_MARGIN_MS = 10_000
#: What a leader answers while it has not yet applied the partition state its follower acts on.
LEADER_BEHIND = frozenset(
    {ErrorCode.UNKNOWN_LEADER_EPOCH, ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
)
#: How soon a follower asks such a leader again.
LEADER_BEHIND_RETRY_S = 0.05


# -- applying a response, in a worker thread ----------------------------------------------------


@dataclass(frozen=True)
class FetchApplied:
    """What one partition's answer did to the local log."""

    #: The log end offset after a truncation (None: nothing truncated).
    truncated_to: int | None = None
    #: The offset an emptied log started over at (truncate_fully_and_start_at), or None.
    started_at: int | None = None
    appended_bytes: int = 0
    #: The answer left the log as it was and the partition should wait before asking again
    #: (an OFFSET_OUT_OF_RANGE this follower cannot resolve alone).
    back_off: bool = False


def truncation_offset(log: Log, diverging: EpochEndOffset) -> int:
    """Where a follower truncates to when the leader answers that its log diverges: the leader's
    epoch ``diverging.epoch`` ends at ``diverging.end_offset`` in the leader's log (Kafka's
    getOffsetTruncationState, for truncate-on-fetch)."""
    log_end = log.log_end_offset
    follower_epoch, follower_end = log.end_offset_for_epoch(diverging.epoch)
    if follower_epoch < 0:  # the follower has no epoch that old: trust the leader's offset
        target = min(diverging.end_offset, log_end)
    elif follower_epoch == diverging.epoch:
        target = min(follower_end, diverging.end_offset, log_end)
    else:
        # The follower lacks the leader's epoch: cut to the end of its own largest epoch below
        # it, and the next fetch (naming that epoch) finds the exact point.
        target = min(follower_end, log_end)
    return max(target, 0)


def apply_fetched(log: Log, result: PartitionFetchResult) -> FetchApplied:
    """Apply one partition's answer (error NONE or OFFSET_OUT_OF_RANGE) to the follower's log.
    Blocking (disk): a worker thread's. A failed append raises (nothing is written then)."""
    if result.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
        return _out_of_range(log, result)
    if result.diverging_epoch is not None:
        target = truncation_offset(log, result.diverging_epoch)
        if log.truncate_to(target):
            return FetchApplied(truncated_to=log.log_end_offset)
        return FetchApplied()
    started_at = None
    if result.records:
        try:
            log.append_as_follower(result.records)
        except UnexpectedAppendOffsetError as exc:
            # An empty log (one just started over at the leader's log start) handed the batch that
            # holds its start offset: it starts at that batch instead (Kafka's appendAsFollower).
            log_end = log.log_end_offset
            if not (log.log_start_offset == log_end and exc.first_offset < log_end <= exc.last_offset):
                raise
            log.truncate_fully_and_start_at(exc.first_offset)
            started_at = exc.first_offset
            log.append_as_follower(result.records)
    _follow_leader_offsets(log, result)
    return FetchApplied(started_at=started_at, appended_bytes=len(result.records))


def _follow_leader_offsets(log: Log, result: PartitionFetchResult) -> None:
    """The follower's high watermark and log start follow the leader's, never past what it has."""
    if result.high_watermark >= 0:
        log.maybe_increment_high_watermark(min(result.high_watermark, log.log_end_offset))
    if result.log_start_offset > log.log_start_offset:
        log.maybe_increment_log_start_offset(min(result.log_start_offset, log.high_watermark))


def _out_of_range(log: Log, result: PartitionFetchResult) -> FetchApplied:
    """Kafka's handleOutOfRangeError, from what the error answer carries (the leader's log start
    and high watermark)."""
    leader_start, leader_hw = result.log_start_offset, result.high_watermark
    log_end = log.log_end_offset
    if leader_start >= 0 and log_end < leader_start:
        log.truncate_fully_and_start_at(leader_start)
        return FetchApplied(started_at=leader_start)
    if 0 <= leader_hw < log_end and log.truncate_to(leader_hw):
        return FetchApplied(truncated_to=log.log_end_offset)
    return FetchApplied(back_off=True)


def apply_all(work: Sequence[tuple[Log, PartitionFetchResult]]) -> list[FetchApplied | Exception]:
    """apply_fetched for each partition of one response (one trip to a worker thread); a
    partition's failure is its own."""
    outcomes: list[FetchApplied | Exception] = []
    for log, result in work:
        try:
            outcomes.append(apply_fetched(log, result))
        except Exception as exc:
            outcomes.append(exc)
    return outcomes


# -- the fetcher tasks ---------------------------------------------------------------------------


@dataclass(frozen=True)
class FetchTarget:
    """What one fetcher task fetches: a leader at its endpoint, and the partitions (with the
    leader epoch of each) that this broker follows there."""

    leader: int
    host: str
    port: int
    partitions: frozenset[tuple[str, int, int]]


@dataclass(frozen=True)
class FetchSettings:
    """replica.fetch.* (Kafka's defaults)."""

    wait_max_ms: int = 500
    min_bytes: int = 1
    max_bytes: int = 1_048_576
    response_max_bytes: int = 10_485_760
    backoff_ms: int = 1000
    response_margin_ms: int = DEFAULT_RESPONSE_MARGIN_MS

    @classmethod
    def from_config(cls, config: BrokerConfig) -> FetchSettings:
        return cls(
            wait_max_ms=config.replica_fetch_wait_max_ms,
            min_bytes=config.replica_fetch_min_bytes,
            max_bytes=config.replica_fetch_max_bytes,
            response_max_bytes=config.replica_fetch_response_max_bytes,
            backoff_ms=config.replica_fetch_backoff_ms,
        )


class _Disconnected(Exception):
    """The leader closed the connection."""


class ReplicaFetcherManager:
    def __init__(
        self,
        broker_id: int,
        cache: ClusterMetadataCache,
        replicas: ReplicaManager,
        *,
        listener_name: str,
        settings: FetchSettings = FetchSettings(),
        run_sync: RunSync = trio.to_thread.run_sync,
        ssl_context: ssl.SSLContext | None = None,
        sasl: InterBrokerSasl | None = None,
    ):
        self.broker_id = broker_id
        self.cache = cache
        self.replicas = replicas
        #: The inter-broker listener's name: which of a leader's registered endpoints to dial.
        self.listener_name = listener_name
        self.settings = settings
        self.run_sync = run_sync
        #: The leaders' listener is TLS: the context to verify them with (None: PLAINTEXT).
        self.ssl_context = ssl_context
        #: The leaders' listener is SASL: the login a fetcher makes first (None: none).
        self.sasl = sasl
        #: The running fetcher tasks, by leader broker id.
        self.fetchers: dict[int, LeaderFetcher] = {}
        self._no_endpoint: set[int] = set()
        #: Set by a controlled shutdown: a partition is then fetched only while this broker is in
        #: its ISR (Kafka's controller sends StopReplica once it has taken it out).
        self.leaving = False
        self._nursery: trio.Nursery | None = None
        #: The partitions a fetcher is appending fetched batches to now. Fetchers are replaced at
        #: every change of their partitions' roles; a new one fetching a partition while the one
        #: it replaced still appends to it would ask from a log end about to move.
        self.applying: set[PartitionKey] = set()

    def targets(self) -> dict[int, FetchTarget]:
        """What to fetch now, by leader: hosted partitions led by another live broker."""
        by_leader: dict[int, set[tuple[str, int, int]]] = {}
        for hosted in self.replicas.hosted.values():
            if hosted.leader < 0 or hosted.leader == self.broker_id or hosted.leader not in self.cache.brokers:
                continue
            if self.leaving and self.broker_id not in getattr(
                self.cache.partition(hosted.topic, hosted.partition), "isr", ()
            ):
                continue
            by_leader.setdefault(hosted.leader, set()).add((hosted.topic, hosted.partition, hosted.leader_epoch))
        targets = {}
        for leader, partitions in by_leader.items():
            endpoint = self.cache.brokers[leader].endpoint(self.listener_name)
            if endpoint is None:
                if leader not in self._no_endpoint:
                    self._no_endpoint.add(leader)
                    logger.warning(
                        "leader_without_listener",
                        leader=leader,
                        listener=self.listener_name,
                        partitions=len(partitions),
                        detail="the leader registered no endpoint on the inter-broker listener: nothing is fetched from it",
                    )
                continue
            self._no_endpoint.discard(leader)
            targets[leader] = FetchTarget(leader, endpoint.host, endpoint.port, frozenset(partitions))
        return targets

    def leave(self) -> None:
        """Stop fetching each partition as soon as this broker is out of its ISR (a controlled
        shutdown): a follower that went on fetching would be taken back in. Its fetches carry
        the leader epoch the controller's ISR change moved on, so none sent meanwhile counts."""
        self.leaving = True
        if self._nursery is not None:
            self._reconcile(self._nursery)

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            try:
                while True:
                    replicas_seen, cache_seen = self.replicas.generation, self.cache.generation
                    self._reconcile(nursery)
                    await self._wait_changed(replicas_seen, cache_seen)
            finally:
                self.fetchers.clear()

    def _reconcile(self, nursery: trio.Nursery) -> None:
        wanted = self.targets()
        for leader, fetcher in list(self.fetchers.items()):
            if wanted.get(leader) != fetcher.target:
                fetcher.stop()
                del self.fetchers[leader]
        for leader, target in wanted.items():
            if leader not in self.fetchers:
                fetcher = self.fetchers[leader] = LeaderFetcher(self, target)
                nursery.start_soon(fetcher.run)

    async def _wait_changed(self, replicas_seen: int, cache_seen: int) -> None:
        """Until the hosted partitions or the metadata (a leader's endpoint) change."""
        async with trio.open_nursery() as nursery:

            async def wait(wait_changed, seen: int) -> None:
                await wait_changed(seen)
                nursery.cancel_scope.cancel()

            nursery.start_soon(wait, self.replicas.wait_changed, replicas_seen)
            nursery.start_soon(wait, self.cache.wait_changed, cache_seen)


@dataclass
class _PartitionState:
    """A partition's standing in its fetcher, between fetches."""

    #: Left out until the replica manager's generation is past this (FENCED_LEADER_EPOCH).
    fenced_at_generation: int | None = None
    #: Left out until this trio time, unless the generation moves first.
    delayed_until: float = 0.0
    delayed_at_generation: int = -1
    #: The error it is failing with (logged once, when it starts or changes).
    error: str | None = None


class LeaderFetcher:
    """One leader's fetcher (Kafka's ReplicaFetcherThread for one source broker)."""

    def __init__(self, manager: ReplicaFetcherManager, target: FetchTarget):
        self.manager = manager
        self.target = target
        self.settings = manager.settings
        self.client_id = f"broker-{manager.broker_id}-fetcher-0"
        self._scope = trio.CancelScope()
        self._correlation_id = 0
        self._states: dict[PartitionKey, _PartitionState] = {
            (topic, partition): _PartitionState() for topic, partition, _ in target.partitions
        }
        self._epochs = {(topic, partition): epoch for topic, partition, epoch in target.partitions}
        self._connected = False
        self._connection_error: str | None = None
        #: Fetch requests answered (for tests and metrics).
        self.fetches = 0

    @property
    def address(self) -> str:
        return f"{self.target.host}:{self.target.port}"

    def stop(self) -> None:
        self._scope.cancel()

    async def run(self) -> None:
        with self._scope:
            logger.info(
                "fetcher_started",
                leader=self.target.leader,
                address=self.address,
                partitions=sorted(f"{t}-{p}@{e}" for t, p, e in self.target.partitions),
            )
            try:
                while True:
                    try:
                        await self._session()
                    except (OSError, trio.BrokenResourceError, trio.TooSlowError, _Disconnected) as exc:
                        self._lost(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)
                    except RemoteProtocolError as exc:
                        self._lost(f"bad response: {exc}")
                    except Exception as exc:  # a bug: logged with its stack, never the broker's end
                        logger.exception("fetcher_failed", leader=self.target.leader, error=repr(exc))
                        self._connected = False
                    await trio.sleep(self.settings.backoff_ms / 1000)
            finally:
                logger.info("fetcher_stopped", leader=self.target.leader, address=self.address)

    def _lost(self, error: str) -> None:
        if self._connected:
            logger.warning("fetcher_disconnected", leader=self.target.leader, address=self.address, error=error)
        elif error != self._connection_error:
            logger.warning("fetcher_cannot_connect", leader=self.target.leader, address=self.address, error=error)
        self._connected = False
        self._connection_error = error

    async def _session(self) -> None:
        stream, self._correlation_id = await open_broker_connection(
            self.target.host,
            self.target.port,
            ssl_context=self.manager.ssl_context,
            sasl=self.manager.sasl,
            client_id=self.client_id,
            correlation_id=self._correlation_id,
            timeout_s=(self.settings.wait_max_ms + self.settings.response_margin_ms) / 1000,
        )
        async with stream:
            self._connected, self._connection_error = True, None
            logger.info("fetcher_connected", leader=self.target.leader, address=self.address)
            decoder = FrameDecoder(max(DEFAULT_MAX_FRAME_BYTES, 2 * self.settings.response_max_bytes))
            timeout = (self.settings.wait_max_ms + self.settings.response_margin_ms) / 1000
            while True:
                fetches = self._fetches()
                if not fetches:
                    await self._wait_for_work()
                    continue
                self._correlation_id = (self._correlation_id + 1) & 0x7FFFFFFF
                request = encode_replica_fetch(
                    self._correlation_id,
                    self.client_id,
                    self.manager.broker_id,
                    self.settings.wait_max_ms,
                    self.settings.min_bytes,
                    self.settings.response_max_bytes,
                    fetches,
                )
                with trio.fail_after(timeout):
                    await stream.send_all(request)
                    body = await _receive_frame(stream, decoder)
                response = decode_replica_fetch_response(body)
                if response.correlation_id != self._correlation_id:
                    raise RemoteProtocolError(
                        f"response to request {response.correlation_id}, expected {self._correlation_id}"
                    )
                self.fetches += 1
                if response.error_code:
                    self._lost(f"Fetch error {_error_name(response.error_code)}")
                    await trio.sleep(self.settings.backoff_ms / 1000)
                    continue
                await self._process(fetches, response.partitions)

    async def _wait_for_work(self) -> None:
        """Every partition is fenced or waiting: until the first wait ends or the partitions'
        roles change (new metadata), a back-off at most."""
        now = trio.current_time()
        waits = [self.settings.backoff_ms / 1000]
        waits += [s.delayed_until - now for s in self._states.values() if s.delayed_until > now]
        if not self.manager.applying.isdisjoint(self._states):
            waits.append(0.01)  # (a replaced fetcher's append ends in a moment)
        replicas = self.manager.replicas
        with trio.move_on_after(max(min(waits), 0.001)):
            await replicas.wait_changed(replicas.generation)

    def _fetches(self) -> list[PartitionFetch]:
        """This round's partitions, each from its log's end."""
        generation = self.manager.replicas.generation
        now = trio.current_time()
        fetches = []
        for key, state in self._states.items():
            if key in self.manager.applying:
                continue  # a replaced fetcher is still appending what it fetched: from its end next round
            hosted = self._hosted(key)
            if hosted is None:
                continue  # its role changed: the manager replaces this task
            if state.fenced_at_generation is not None:
                if state.fenced_at_generation == generation:
                    continue
                state.fenced_at_generation = None
            if state.delayed_until > now and state.delayed_at_generation == generation:
                continue
            log = hosted.log
            if log.offline:
                continue
            latest_epoch = log.latest_epoch
            fetches.append(
                PartitionFetch(
                    topic=hosted.topic,
                    partition=hosted.partition,
                    current_leader_epoch=hosted.leader_epoch,
                    fetch_offset=log.log_end_offset,
                    last_fetched_epoch=NO_EPOCH if latest_epoch is None else latest_epoch,
                    log_start_offset=log.log_start_offset,
                    partition_max_bytes=self.settings.max_bytes,
                )
            )
        return fetches

    def _hosted(self, key: PartitionKey) -> HostedPartition | None:
        """The partition as this task follows it, or None when it is no longer that."""
        hosted = self.manager.replicas.hosted.get(key)
        if hosted is None or (hosted.leader, hosted.leader_epoch) != (self.target.leader, self._epochs[key]):
            return None
        return hosted

    async def _process(self, fetches: list[PartitionFetch], results: Sequence[PartitionFetchResult]) -> None:
        asked = {(f.topic, f.partition): f for f in fetches}
        generation = self.manager.replicas.generation
        work: list[tuple[PartitionKey, Log, PartitionFetchResult]] = []
        for result in results:
            key = (result.topic, result.partition)
            hosted = self._hosted(key) if key in asked else None
            if hosted is None:
                continue
            code = result.error_code
            if code in (ErrorCode.NONE, ErrorCode.OFFSET_OUT_OF_RANGE):
                work.append((key, hosted.log, result))
            elif code == ErrorCode.FENCED_LEADER_EPOCH:
                self._failing(key, _error_name(code), generation, fenced=True)
            elif code in LEADER_BEHIND:
                # The leader has not applied the state this follower read yet (its leadership, its
                # epoch, the partition itself): it reads the same ZooKeeper watches, so it will in
                # a moment. A full back-off here would hold up every acks=all write for as long.
                self._failing(key, _error_name(code), generation, backoff_s=LEADER_BEHIND_RETRY_S)
            else:
                self._failing(key, _error_name(code), generation)
        if not work:
            return
        applying = self.manager.applying
        keys = [key for key, _, _ in work]
        applying.update(keys)
        try:
            # (a worker thread is not cancelled: a replaced fetcher finishes its apply, and its
            # successor leaves these partitions out of its fetches until it has)
            with trio.CancelScope(shield=True):
                outcomes = await self.manager.run_sync(apply_all, [(log, result) for _, log, result in work])
        finally:
            applying.difference_update(keys)
        for (key, log, result), outcome in zip(work, outcomes):
            if isinstance(outcome, Exception):
                self._failing(key, f"{type(outcome).__name__}: {outcome}", generation)
                continue
            if outcome.truncated_to is not None or outcome.started_at is not None:
                logger.info(
                    "follower_truncated",
                    topic=key[0],
                    partition=key[1],
                    leader=self.target.leader,
                    log_end_offset=log.log_end_offset,
                    started_over_at=outcome.started_at,
                    diverging_epoch=None if result.diverging_epoch is None else result.diverging_epoch.epoch,
                    diverging_end_offset=None if result.diverging_epoch is None else result.diverging_epoch.end_offset,
                    leader_high_watermark=result.high_watermark,
                    leader_log_start_offset=result.log_start_offset,
                    reason=_error_name(result.error_code),
                )
            if outcome.back_off:
                self._failing(key, _error_name(result.error_code), generation)
            else:
                self._fetching(key)

    def _failing(
        self, key: PartitionKey, error: str, generation: int, *, fenced: bool = False, backoff_s: float | None = None
    ) -> None:
        state = self._states[key]
        if backoff_s is None:
            backoff_s = self.settings.backoff_ms / 1000
        if fenced:
            state.fenced_at_generation = generation
        else:
            state.delayed_until = trio.current_time() + backoff_s
            state.delayed_at_generation = generation
        if state.error != error:
            state.error = error
            logger.warning(
                "follower_fetch_failing",
                topic=key[0],
                partition=key[1],
                leader=self.target.leader,
                error=error,
                waits_for="new metadata" if fenced else f"{round(backoff_s * 1000)} ms or new metadata",
            )

    def _fetching(self, key: PartitionKey) -> None:
        state = self._states[key]
        if state.error is not None:
            logger.info("follower_fetching_again", topic=key[0], partition=key[1], leader=self.target.leader)
            state.error = None


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error {code}"


async def _receive_frame(stream: trio.abc.ReceiveStream, decoder: FrameDecoder) -> bytes:
    frame = await receive_frame(stream, decoder)
    if frame is None:
        raise _Disconnected("the leader closed the connection")
    return frame


__all__ = [
    "FetchApplied",
    "FetchSettings",
    "FetchTarget",
    "LeaderFetcher",
    "ReplicaFetcherManager",
    "apply_all",
    "apply_fetched",
    "truncation_offset",
]
