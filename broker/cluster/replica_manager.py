"""Which partitions this broker hosts and leads (Kafka's ReplicaManager, its becomeLeaderOrFollower).

It follows the metadata cache: every partition whose assignment names this broker gets a local
log (created in a worker thread) and a role, leader when the partition state names it, follower
otherwise. A broker becoming leader in a new leader epoch records the epoch's start in the log's
leader-epoch-checkpoint before it takes a write (Kafka's makeLeader), so that a follower with a
diverging suffix finds where to truncate. Requests that only a leader may serve ask
``leader_log``: another broker's partition is NOT_LEADER_OR_FOLLOWER, a client with an older or
newer leader epoch is FENCED_LEADER_EPOCH or UNKNOWN_LEADER_EPOCH, as Kafka answers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import structlog
import trio

from triolog.broker.storage.log import Log
from triolog.broker.storage.topics import TopicManager, is_internal
from triolog.protocol.errors import (
    FencedLeaderEpochError,
    LeaderNotAvailableError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    UnknownLeaderEpochError,
    UnknownTopicOrPartitionError,
)

from .metadata_cache import ClusterMetadataCache, PartitionView
from .metadata_store import BadVersionError, StoreError
from .replication import AcksAll, LeaderPartition
from .zk_client import KafkaZkClient, VersionedState

logger = structlog.get_logger("triolog.cluster.replicas")

#: What a request carries when it names no leader epoch (Kafka's -1: no check).
NO_EPOCH = -1


@dataclass(frozen=True)
class HostedPartition:
    """This broker's replica of a partition, in the role the last state it applied gives it."""

    topic: str
    partition: int
    leader: int
    leader_epoch: int
    log: Log
    #: The leader's side of replication, when this broker leads the partition.
    leadership: LeaderPartition | None = None
    #: The leader epoch this broker's unbroken leadership began in (-1: not leader). A write
    #: appended in an earlier epoch may have been truncated away while it was not leader.
    led_since_epoch: int = -1

    def is_leader(self, broker_id: int) -> bool:
        return self.leader == broker_id


RunSync = Callable[..., Awaitable[Any]]


class ReplicaManager:
    def __init__(
        self,
        broker_id: int,
        cache: ClusterMetadataCache,
        topics: TopicManager,
        *,
        topic_configs: Callable[[str], Awaitable[Mapping[str, str]]],
        zk: KafkaZkClient,
        lag_max_ms: int,
        now_ms: Callable[[], int],
        run_sync: RunSync = trio.to_thread.run_sync,
        notify: Callable[[tuple[str, int]], None] = lambda tp: None,
    ):
        self.broker_id = broker_id
        self.zk = zk
        #: Wakes what waits on a partition (long polls, acks=all) when its high watermark or ISR moved.
        self._notify = notify
        #: ISR changes this leader wants written (by the ISR task, off the request path).
        self._isr_wanted: dict[tuple[str, int], frozenset[int]] = {}
        self._isr_wakeup = trio.Event()
        #: Each partition state as this leader last wrote it (read back): newer than the cache's
        #: until the cache's watch brings the write in.
        self._isr_written: dict[tuple[str, int], VersionedState] = {}
        #: ISR changes made by this leader (metrics: Kafka's IsrExpandsPerSec/IsrShrinksPerSec).
        self.isr_expands = 0
        self.isr_shrinks = 0
        #: replica.lag.time.max.ms
        self.lag_max_ms = lag_max_ms
        self._now_ms = now_ms
        self.cache = cache
        self.topics = topics
        self._topic_configs = topic_configs
        self._run_sync = run_sync
        self.hosted: dict[tuple[str, int], HostedPartition] = {}
        #: Moves on each time the hosted partitions or their roles change.
        self.generation = 0
        self._changed = trio.Event()

    # -- serving requests -------------------------------------------------------------------------

    def leader_partition(self, topic: str, partition: int, current_leader_epoch: int = NO_EPOCH) -> HostedPartition:
        """A partition this broker leads, or Kafka's error for why not (Kafka's
        getPartitionOrException plus checkCurrentLeaderEpoch)."""
        view = self.cache.partition(topic, partition)
        if view is None:
            raise UnknownTopicOrPartitionError(f"partition {topic}-{partition} does not exist")
        hosted = self.hosted.get((topic, partition))
        if hosted is None or not hosted.is_leader(self.broker_id):
            if view.leader < 0:
                raise LeaderNotAvailableError(f"partition {topic}-{partition} has no leader now")
            raise NotLeaderOrFollowerError(
                f"broker {self.broker_id} is not the leader of {topic}-{partition} (broker {view.leader} is)"
            )
        if current_leader_epoch != NO_EPOCH:
            if current_leader_epoch < hosted.leader_epoch:
                raise FencedLeaderEpochError(
                    f"leader epoch {current_leader_epoch} of {topic}-{partition} is older than {hosted.leader_epoch}"
                )
            if current_leader_epoch > hosted.leader_epoch:
                raise UnknownLeaderEpochError(
                    f"leader epoch {current_leader_epoch} of {topic}-{partition} is newer than {hosted.leader_epoch}"
                )
        return hosted

    def on_leader_append(self, topic: str, partition: int) -> bool:
        """After an append as leader: move the high watermark as far as the ISR allows (with no
        follower in the ISR, to the log end at once). True if it moved (long polls may wake)."""
        hosted = self.hosted.get((topic, partition))
        return hosted is not None and self._advance_high_watermark(hosted)

    def _advance_high_watermark(self, hosted: HostedPartition, now_ms: int | None = None) -> bool:
        """The leader's rules move the high watermark (LeaderPartition), the log follows; True if
        it moved."""
        log, leadership = hosted.log, hosted.leadership
        if leadership is None:
            return False
        now = self._now_ms() if now_ms is None else now_ms
        if not leadership.maybe_increment_high_watermark(log.log_end_offset, now):
            return False
        return log.maybe_increment_high_watermark(leadership.high_watermark)

    async def wait_changed(self, seen: int) -> int:
        while self.generation <= seen:
            await self._changed.wait()
        return self.generation

    # -- following the cluster --------------------------------------------------------------------

    def require_enough_replicas(self, topic: str, partition: int) -> None:
        """acks=all: refused before anything is written while the ISR is below min.insync.replicas."""
        hosted = self.hosted.get((topic, partition))
        leadership = hosted.leadership if hosted is not None else None
        if leadership is not None and not leadership.may_append_acks_all():
            raise NotEnoughReplicasError(
                f"{topic}-{partition} has {len(leadership.isr)} in-sync replicas {sorted(leadership.isr)}, "
                f"fewer than min.insync.replicas={leadership.min_insync_replicas}"
            )

    def acks_all_status(self, topic: str, partition: int, required_offset: int, appended_epoch: int) -> AcksAll | None:
        """Where an acks=all write appended in leader epoch ``appended_epoch`` and ending below
        ``required_offset`` stands; None if this broker has not led the partition without a break
        since (the write's fate is unknown: as a follower in between, it may have truncated the
        write away, and the offsets may hold other records now, committed or not)."""
        hosted = self.hosted.get((topic, partition))
        if hosted is None or hosted.leadership is None or hosted.led_since_epoch > appended_epoch:
            return None
        return hosted.leadership.acks_all_status(required_offset)

    def on_follower_fetch(
        self, topic: str, partition: int, follower: int, fetch_offset: int, log_start_offset: int
    ) -> bool:
        """A follower fetched from ``fetch_offset`` (its log end): its progress moves the high
        watermark, and a follower caught up into this epoch is put back in the ISR (written by
        the ISR task). True if the high watermark moved (long polls may wake)."""
        hosted = self.hosted.get((topic, partition))
        if hosted is None or hosted.leadership is None or follower not in hosted.leadership.followers:
            raise NotLeaderOrFollowerError(f"broker {follower} is not a replica of {topic}-{partition} led here")
        log, leadership = hosted.log, hosted.leadership
        now = self._now_ms()
        leadership.update_follower(follower, fetch_offset, log_start_offset, log.log_end_offset, now)
        joining = leadership.in_sync_candidates()
        if joining:
            self._want_isr((topic, partition), leadership.isr | joining)
        return self._advance_high_watermark(hosted, now)

    def _want_isr(self, key: tuple[str, int], isr: frozenset[int]) -> None:
        self._isr_wanted[key] = isr
        self._isr_wakeup.set()

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        await self.cache.loaded.wait()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._write_isr_changes)
            nursery.start_soon(self._shrink_isr_periodically)
            task_status.started()
            while True:
                seen = self.cache.generation
                await self.apply()
                await self.cache.wait_changed(seen)

    async def _shrink_isr_periodically(self) -> None:
        """Kafka's isr-expiration task: every half of replica.lag.time.max.ms, followers not caught up
        for longer leave the ISR of the partitions this broker leads."""
        while True:
            await trio.sleep(self.lag_max_ms / 2000)
            now = self._now_ms()
            for key, hosted in list(self.hosted.items()):
                leadership = hosted.leadership
                if leadership is None:
                    continue
                out = leadership.out_of_sync_replicas(hosted.log.log_end_offset, now)
                if out:
                    self._want_isr(key, leadership.isr - out)

    async def _write_isr_changes(self) -> None:
        """Write the wanted ISRs to the partition states, each conditional on the partition epoch
        (the znode version) and keeping the leader epoch (a leader's own ISR change, as Kafka's
        ZooKeeper-mode leaders wrote it); the leader acts on the new ISR only once it is written."""
        while True:
            await self._isr_wakeup.wait()
            self._isr_wakeup = trio.Event()
            wanted, self._isr_wanted = self._isr_wanted, {}
            for (topic, partition), isr in wanted.items():
                hosted = self.hosted.get((topic, partition))
                current = self._latest_state((topic, partition))
                if hosted is None or hosted.leadership is None or current is None:
                    continue
                state = current.state
                if (state.leader, state.leader_epoch) != (self.broker_id, hosted.leader_epoch):
                    continue  # the controller moved on: its next state decides
                # A broker in a controlled shutdown is never taken (back) in (Kafka's KIP-841): it
                # is about to go, and acks=all would wait for it.
                leaving = self.cache.shutting_down
                # Nor is a member registered again since the state was written kept in (Kafka's
                # KIP-903): it may have lost what it had acknowledged; it comes back by catching up.
                bounced = self.cache.bounced(current)
                ordered = tuple(
                    r
                    for r in hosted.leadership.replicas
                    if r in isr and (r in state.isr or r not in leaving) and r not in bounced
                )
                if set(ordered) == set(state.isr):
                    hosted.leadership.set_isr(ordered, self._now_ms())
                    continue
                new_state = dataclasses.replace(state, isr=ordered)
                try:
                    version = await self.zk.update_partition_state(None, topic, partition, new_state, current.version)
                    # Read back (for its write stamp): until the cache has it, the next change of
                    # this ISR compares with this state, not an older one (compared with the old
                    # ISR, an ISR grown back to it would seem unchanged and never be written).
                    written = await self.zk.partition_state(topic, partition)
                    if written is not None and written.version == version:
                        self._isr_written[(topic, partition)] = written
                except BadVersionError:
                    continue  # someone wrote first: the next fetch or check wants it again
                except StoreError as exc:
                    logger.warning("isr_write_failed", topic=topic, partition=partition, error=str(exc))
                    continue
                grew = len(ordered) > len(state.isr)
                if grew:
                    self.isr_expands += 1
                else:
                    self.isr_shrinks += 1
                hosted.leadership.set_isr(ordered, self._now_ms())
                logger.info(
                    "isr_expanded" if grew else "isr_shrunk",
                    topic=topic,
                    partition=partition,
                    isr=list(ordered),
                    previous_isr=list(state.isr),
                )
                self._advance_high_watermark(hosted)
                self._notify((topic, partition))

    def _latest_state(self, key: tuple[str, int]) -> VersionedState | None:
        """The partition's state: the cache's, or this leader's own last write while the cache
        has yet to see it."""
        cached, written = self.cache.states.get(key), self._isr_written.get(key)
        if written is None:
            return cached
        if cached is None or cached.version >= written.version:
            del self._isr_written[key]
            return cached
        return written

    async def apply(self) -> None:
        """Make the hosted partitions and their roles what the cache says."""
        changed = await self._forget_deleted_topics()
        for topic in sorted(self.cache.topics):
            views = [v for v in self.cache.partitions(topic) if self.broker_id in v.replicas]
            if not views:
                continue
            count = len(self.cache.topics[topic].partitions)
            # (the cache follows each topic's config znode, so an altered config applies at once)
            cached = self.cache.configs.get(topic)
            overrides = dict(cached) if cached is not None else dict(await self._topic_configs(topic))
            await self._run_sync(self.topics.register_cluster_topic, topic, count, overrides)
            for view in views:
                changed |= await self._apply_partition(view)
        if changed:
            self.generation += 1
            self._changed.set()
            self._changed = trio.Event()

    async def _forget_deleted_topics(self) -> bool:
        """Drop the replicas of topics the cluster no longer has (deleted while this broker ran,
        or while it was away): their logs go, their partitions are served no more."""
        gone = [name for name in self.topics.all() if name not in self.cache.topics and not is_internal(name)]
        for name in gone:
            hosted = [k for k in self.hosted if k[0] == name]
            for key in hosted:
                del self.hosted[key]
            await self._run_sync(self.topics.forget_cluster_topic, name)
            logger.info("replicas_deleted", topic=name, partitions=[p for _, p in hosted])
            for key in hosted:  # long polls on them answer UNKNOWN_TOPIC_OR_PARTITION now
                self._notify(key)
        return bool(gone)

    async def _apply_partition(self, view: PartitionView) -> bool:
        key = (view.topic, view.partition)
        hosted = self.hosted.get(key)
        if hosted is not None and (hosted.leader, hosted.leader_epoch) == (view.leader, view.leader_epoch):
            return False
        if view.leader_epoch < 0:  # no state yet: nothing to host until the controller writes one
            return False
        self._isr_written.pop(key, None)
        if hosted is not None:
            log = hosted.log
        else:
            topic_id = self.cache.topics[view.topic].topic_id
            log = await self._run_sync(self.topics.hosted_log, view.topic, view.partition, topic_id)
        leadership = None
        led_since = -1
        if view.leader == self.broker_id:
            led_since = (
                hosted.led_since_epoch if hosted is not None and hosted.leadership is not None else view.leader_epoch
            )
            await self._run_sync(self._become_leader, log, view.leader_epoch)
            leadership = LeaderPartition(
                broker_id=self.broker_id,
                leader_epoch=view.leader_epoch,
                replicas=view.replicas,
                isr=view.isr,
                leader_epoch_start_offset=log.log_end_offset,
                high_watermark=log.high_watermark,
                min_insync_replicas=log.config.min_insync_replicas,
                lag_max_ms=self.lag_max_ms,
                now_ms=self._now_ms(),
            )
        else:
            log.replicated = True
        self.hosted[key] = hosted = HostedPartition(
            view.topic, view.partition, view.leader, view.leader_epoch, log, leadership, led_since
        )
        self._advance_high_watermark(hosted)
        self._notify(key)  # acks=all writes waiting on it: answered NOT_LEADER_OR_FOLLOWER if it was lost
        logger.info(
            "replica_role",
            topic=view.topic,
            partition=view.partition,
            role="leader" if view.leader == self.broker_id else "follower",
            leader=view.leader,
            leader_epoch=view.leader_epoch,
            isr=list(view.isr),
        )
        return True

    @staticmethod
    def _become_leader(log: Log, leader_epoch: int) -> None:
        """Before the first write of the term: the epoch's start offset is the log end (Kafka's
        maybeAssignEpochStartOffset)."""
        log.replicated = True
        log.assign_epoch_start_offset(leader_epoch)
