"""A seeded power-loss workload over FaultFS: the engine of test_power_loss.py and bench/power_loss.py.

One *life* is a fresh FaultFS with a log dir holding topic ``a`` (two partitions, never deleted),
topic ``b`` (two partitions, deleted and re-created now and then) and, with ``compacted=True``,
topic ``c`` (two partitions, cleanup.policy=compact, four keys and some tombstones) that the log
cleaner compacts in this thread, through the same FaultFS. Each *epoch* of a life runs random
actions as a broker would run them (appends, acks=-1 flushes, rolls, the roll and flush.ms
flushes, the three checkpoint tasks, delete_records, retention, the delete-file task, topic
deletion and creation, cleaning rounds with their swaps, clean restarts), cuts the power after a
random number of disk mutations (possibly in the middle of a call, in a cleaning round or a swap,
or during the next startup's recovery), boots, and checks the recovered broker against a model
of what was written:

* no acknowledged record is lost: an append is acknowledged once a ``flush`` covering it
  returned (acks=-1); the topic creations and deletions that returned are acknowledged too;
* every batch served decodes and passes its CRC, batches and their records follow each other
  offset by offset from the log start to the log end, and every record holds the value that
  was appended at its offset: unacknowledged (acks=1) records are lost only as a suffix;
* the log start offset never passes what delete_records or retention asked for;
* every segment's time index ends with the segment's largest timestamp (retention reads it);
* on the compacted topic: every batch served passes its CRC, offsets strictly increase, every
  record served is the one appended at its offset (key and value), and for every key the
  latest acknowledged record is served, or a newer record of that key is, or it was a tombstone
  and no older record of the key is served (the cleaner may remove a tombstone, never resurrect
  what it deleted).

The next epoch continues from the recovered state, so recovery output is itself crashed.
"""

from __future__ import annotations

import logging
import random
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from triolog.broker.storage.cleaner.log_cleaner import CleanerConfig, CleanerThread
from triolog.broker.storage.clock import ManualClock
from triolog.broker.storage.errors import StorageError
from triolog.broker.storage.log_manager import LogManager
from triolog.broker.storage.topics import TopicManager
from triolog.config.log_config import LogConfig
from triolog.protocol.record_batch import HEADER_SIZE, read_header
from triolog.protocol.records import Record, decode_batch, encode_batch

from .faultfs import FaultFS, PowerLoss

LOG_DIR = Path("/data/logs")
BASE_CONFIG = LogConfig().with_overrides({
    "segment.bytes": "1400",
    "index.interval.bytes": "150",
    "segment.index.bytes": "120",  # 15 offset / 10 time entries: index-full rolls happen too
    "file.delete.delay.ms": "2000",
})
TOPIC_CONFIGS = {
    "a": {},
    "b": {"retention.bytes": "3000"},
    "c": {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01", "delete.retention.ms": "3000",
          "segment.bytes": "700"},
}
PARTITIONS = 2
COMPACTED = "c"
#: The production default (a worker process per cleaner thread): a log on FaultFS must still be
#: cleaned in this thread, through its own file system (CleanerThread.executor).
CLEANER_CONFIG = CleanerConfig(dedupe_buffer_size=24 * 4096, use_worker_process=True)


@dataclass
class Incarnation:
    """What was appended to one partition between its creation and its deletion."""

    values: list = field(default_factory=list)  # offset -> value bytes (None: no record there)
    keys: list = field(default_factory=list)  # offset -> key bytes (the compacted topic)
    acked: int = 0  # offsets below this were acknowledged (a flush covering them returned)
    max_start: int = 0  # the highest log start offset delete_records or retention produced
    durable: int = 0  # offsets below this were synced (the log's recovery point when the cleaner swapped)


@dataclass
class TopicModel:
    partitions: list[Incarnation] | None  # None: the topic does not exist
    #: a deletion or creation the power cut interrupted: either outcome is right after a reboot
    uncertain: str | None = None
    previous: list[Incarnation] | None = None


@dataclass
class Stats:
    lives: int = 0
    power_losses: int = 0
    recovery_crashes: int = 0
    acknowledged_records: int = 0  # records whose append was acknowledged (acks=-1: a covering flush returned)
    acknowledged_checks: int = 0  # acknowledged records found intact after a power loss, summed over them
    appended_records: int = 0
    lost_acknowledged: int = 0
    lost_unacknowledged: int = 0  # acks=1 records a power cut took (allowed: a suffix)
    corrupted: int = 0
    cleaning_rounds: int = 0  # cleaning rounds that completed (each swapped in >= 1 group)
    swaps: int = 0  # groups swapped in by completed replace_segments calls
    losses_in_cleaning: int = 0  # power cuts during a cleaning round (its passes or a swap)
    losses_in_swap: int = 0  # ... of them, inside Log.replace_segments
    keys_checked: int = 0  # (key, power loss) pairs whose latest acknowledged record was checked
    violations: list[str] = field(default_factory=list)

    def add(self, other: "Stats") -> None:
        for name in ("lives", "power_losses", "recovery_crashes", "acknowledged_records", "acknowledged_checks",
                     "appended_records",
                     "lost_acknowledged", "lost_unacknowledged", "corrupted", "cleaning_rounds", "swaps",
                     "losses_in_cleaning", "losses_in_swap", "keys_checked"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.violations.extend(other.violations)


class Violation(AssertionError):
    pass


class Life:
    def __init__(self, seed: int, *, actions: int = 30, compacted: bool = False):
        self.seed = seed
        self.rng = random.Random(seed)
        self.actions = actions
        self.compacted = compacted
        self.clock = ManualClock(1_700_000_000_000 + seed)
        self.fs = FaultFS(seed=seed, clock=self.clock)
        self.model = {"a": TopicModel(None), "b": TopicModel(None)}
        if compacted:
            self.model[COMPACTED] = TopicModel(None)
        self.cleaner_thread: CleanerThread | None = None
        self.in_cleaning = False
        self.stats = Stats(lives=1)
        self.sequence = 0
        self.epoch = 0
        self.manager: LogManager | None = None
        self.topics: TopicManager | None = None

    # -- broker lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        manager = LogManager([LOG_DIR], BASE_CONFIG, clock=self.clock, fs=self.fs,
                             cleaner_config=CLEANER_CONFIG if self.compacted else None)
        if manager.cleaner is not None:
            # no background threads: clean() runs the cleaner's iterations in this thread
            manager.cleaner.startup = lambda: None
            self.cleaner_thread = CleanerThread(manager.cleaner, 0)
        topics = TopicManager(manager, BASE_CONFIG)
        manager.topic_config = topics.config_for
        topics.load()
        manager.startup()
        topics.adopt_loaded_partitions()
        self.manager, self.topics = manager, topics

    def boot_after_power_loss(self) -> None:
        self.stats.power_losses += 1
        self.fs.power_loss(self.rng)
        if self.rng.random() < 0.25:  # the power goes again while the broker recovers
            self.fs.crash_after = self.rng.randint(0, 60)
            try:
                self.start()
                self.fs.crash_after = None
                return
            except PowerLoss:
                self.stats.recovery_crashes += 1
                self.stats.power_losses += 1
                self.fs.power_loss(self.rng)
        self.start()

    # -- the workload ----------------------------------------------------------------------------

    def run(self, epochs: int) -> Stats:
        storage_logger = logging.getLogger("triolog.broker.storage")
        level = storage_logger.level
        storage_logger.setLevel(logging.CRITICAL)  # recovery warnings are expected by the thousand
        try:
            return self._run(epochs)
        finally:
            storage_logger.setLevel(level)

    def _run(self, epochs: int) -> Stats:
        try:
            self.start()
            self.create("a")
            if self.compacted:
                self.create(COMPACTED)
            for self.epoch in range(epochs):
                # ~6 disk mutations per action: the power goes anywhere in the epoch, or after it
                self.fs.crash_after = self.rng.randint(0, 8 * self.actions)
                try:
                    for _ in range(self.actions):
                        self.step()
                except PowerLoss:
                    if self.in_cleaning:
                        self.stats.losses_in_cleaning += 1
                self.in_cleaning = False
                self.fs.crash_after = None
                self.boot_after_power_loss()
                self.check()
        except Violation as exc:
            self.stats.violations.append(f"seed {self.seed} epoch {self.epoch}: {exc}")
        except Exception:
            self.stats.violations.append(
                f"seed {self.seed} epoch {self.epoch}: unexpected error\n{traceback.format_exc()}")
        return self.stats

    def step(self) -> None:
        rng = self.rng
        self.clock.advance(rng.randint(0, 500))
        if self.compacted and rng.random() < 0.12:
            self.clean()
            return
        roll = rng.random()
        if roll < 0.40:
            self.produce(acks_all=False)
        elif roll < 0.60:
            self.produce(acks_all=True)
        elif roll < 0.64:
            self.manager.flush_pending()
        elif roll < 0.72:
            tasks = ["checkpoint_recovery_points", "checkpoint_log_start_offsets", "checkpoint_high_watermarks"]
            for task in rng.sample(tasks, rng.randint(1, 3)):
                getattr(self.manager, task)()
        elif roll < 0.77:
            self.delete_records()
        elif roll < 0.80:
            self.retention()
        elif roll < 0.83:
            self.clock.advance(2500)
            self.manager.segment_deleter.run_due()
        elif roll < 0.87:
            self.roll()
        elif roll < 0.93:
            self.delete_or_create("b")
        elif roll < 0.95:
            self.restart()
        else:
            self.produce(acks_all=rng.random() < 0.5)

    def live_partitions(self) -> list[tuple[str, int, Incarnation]]:
        return [(name, p, inc) for name, topic in self.model.items() if topic.partitions is not None
                for p, inc in enumerate(topic.partitions)]

    def pick(self, *, compacted: bool = True):
        choices = [c for c in self.live_partitions() if compacted or c[0] != COMPACTED]
        return self.rng.choice(choices) if choices else None

    def produce(self, *, acks_all: bool) -> None:
        picked = self.pick()
        if picked is None:
            return
        name, p, inc = picked
        log = self.topics.log(name, p)
        count = self.rng.randint(1, 4)
        base = log.log_end_offset
        now = self.clock.milliseconds()
        values = []
        for i in range(count):
            self.sequence += 1
            values.append(f"{self.seed}:{self.epoch}:{name}{p}:{self.sequence}".encode() + b"x" * self.rng.randint(0, 60))
        keys = [b"k%d" % i for i in range(count)]
        if name == COMPACTED:  # four keys in any order, one record in eight a tombstone
            keys = [b"k%d" % self.rng.randrange(4) for _ in range(count)]
            values = [None if self.rng.random() < 0.125 else v for v in values]
        records = [Record(i, now + self.rng.randint(-5, 5), k, v) for i, (k, v) in enumerate(zip(keys, values))]
        batch = encode_batch(records)
        _put(inc.values, base, values)  # before the call: a cut during it may or may not keep them
        _put(inc.keys, base, keys)
        self.stats.appended_records += count
        info = log.append_as_leader(batch)
        if info.first_offset != base:
            raise Violation(f"{name}-{p}: append got offset {info.first_offset}, expected {base}")
        if acks_all:
            log.flush(info.last_offset + 1)  # what GroupCommitter does before answering
            newly = info.last_offset + 1 - max(inc.acked, log.log_start_offset)
            self.stats.acknowledged_records += max(newly, 0)
            inc.acked = max(inc.acked, info.last_offset + 1)

    def delete_records(self) -> None:
        picked = self.pick(compacted=False)
        if picked is None:
            return
        name, p, inc = picked
        log = self.topics.log(name, p)
        target = self.rng.randint(log.log_start_offset, log.high_watermark)
        inc.max_start = max(inc.max_start, target)
        log.maybe_increment_log_start_offset(target)

    def retention(self) -> None:
        for name, p, inc in self.live_partitions():
            log = self.manager.get_log(name, p)
            if log is not None:
                # what retention may delete: up to the segment holding the high watermark
                inc.max_start = max(inc.max_start, log.active_segment.base_offset)
        self.manager.cleanup_logs()

    def clean(self) -> None:
        """Cleaning rounds, as a cleaner thread runs them, until no compacted log is dirty enough;
        every swap is counted and a power cut inside one is told apart."""
        self.clock.advance(self.rng.randint(0, 1500))  # tombstone horizons pass now and then
        cleaner = self.manager.cleaner
        for p in range(PARTITIONS):
            log = self.manager.get_log(COMPACTED, p)
            if log is not None and "replace_segments" not in vars(log):
                log.replace_segments = self._counted_swap(log.replace_segments, log, p)
        self.in_cleaning = True
        for _ in range(4):
            errors = cleaner.metrics().errors
            cleaned = cleaner.try_clean_filthiest_log(self.cleaner_thread)
            if cleaner.metrics().errors != errors:
                raise Violation("the cleaner failed a round (see the broker.storage.cleaner log)")
            if not cleaned:
                break
            self.stats.cleaning_rounds += 1
        self.in_cleaning = False

    def _counted_swap(self, replace_segments, log, p: int):
        def swap(new_segments, old_segments):
            inc = self.model[COMPACTED].partitions[p]
            inc.durable = max(inc.durable, log.recovery_point)
            try:
                replace_segments(new_segments, old_segments)
            except PowerLoss:
                self.stats.losses_in_swap += 1
                raise
            self.stats.swaps += 1
        return swap

    def roll(self) -> None:
        picked = self.pick()
        if picked is not None:
            self.topics.log(picked[0], picked[1]).roll()

    def create(self, name: str) -> None:
        topic = self.model[name]
        topic.previous, topic.partitions, topic.uncertain = topic.partitions, None, "create"
        self.topics.create(name, PARTITIONS, 1, TOPIC_CONFIGS[name])
        topic.partitions = [Incarnation() for _ in range(PARTITIONS)]
        topic.uncertain = topic.previous = None

    def delete(self, name: str) -> None:
        topic = self.model[name]
        topic.previous, topic.uncertain = topic.partitions, "delete"
        self.topics.delete(name)
        topic.partitions = topic.previous = topic.uncertain = None

    def delete_or_create(self, name: str) -> None:
        if self.model[name].partitions is None:
            self.create(name)
        else:
            self.delete(name)
            if self.rng.random() < 0.5:
                self.create(name)  # re-created at once, as in issue 10's data-loss report

    def restart(self) -> None:
        """A clean shutdown and start (the power may go during either)."""
        self.manager.shutdown()
        self.start()

    # -- the checks ------------------------------------------------------------------------------

    def check(self) -> None:
        for name, topic in self.model.items():
            exists = self.topics.get(name) is not None
            if topic.uncertain is None:
                if topic.partitions is None and exists:
                    raise Violation(f"topic {name} came back after its deletion was acknowledged")
                if topic.partitions is not None and not exists:
                    raise Violation(f"topic {name} is gone after its creation was acknowledged")
            if not exists:
                topic.partitions = topic.previous = topic.uncertain = None
                continue
            candidates = topic.partitions if topic.uncertain is None else topic.previous
            survivors = []
            for p in range(self.topics.get(name).num_partitions):
                log = self.topics.log(name, p)
                expected = candidates[p] if candidates is not None and p < len(candidates) else None
                if topic.uncertain is not None and (expected is None or (log.log_end_offset == 0 and expected.acked)):
                    expected = Incarnation()  # an interrupted create or delete may leave a new empty partition
                if expected is None:
                    raise Violation(f"{name}-{p} exists but was never created")
                check = self.check_compacted_partition if name == COMPACTED else self.check_partition
                survivors.append(check(name, p, log, expected))
            topic.partitions, topic.previous, topic.uncertain = survivors, None, None

    def check_partition(self, name: str, p: int, log, inc: Incarnation) -> Incarnation:
        where = f"{name}-{p}"
        start, end = log.log_start_offset, log.log_end_offset
        if start > max(inc.max_start, 0):
            raise Violation(f"{where}: log start {start} is past what was deleted ({inc.max_start})")
        if end < inc.acked:
            self.stats.lost_acknowledged += inc.acked - end
            raise Violation(f"{where}: log end {end} is below the acknowledged {inc.acked}: records lost")
        offset = start
        while offset < end:
            info = log.read(offset, 1 << 20)
            if info.region is None:
                raise Violation(f"{where}: nothing served at offset {offset} below the log end {end}")
            for header, batch in self._served_batches(where, info.region.read_bytes(), offset):
                if header.base_offset > offset or header.next_offset <= offset:
                    raise Violation(f"{where}: batch {header.base_offset}..{header.last_offset} served "
                                    f"for offset {offset} (a gap or an overlap)")
                for record in batch.records:
                    if record.offset < offset:
                        continue
                    if record.offset != offset:
                        raise Violation(f"{where}: record {record.offset} follows {offset - 1}: a hole")
                    expected = inc.values[offset] if offset < len(inc.values) else None
                    if record.value != expected:
                        self.stats.corrupted += 1
                        raise Violation(f"{where}: offset {offset} holds {record.value!r}, appended {expected!r}")
                    offset += 1
        self.check_indexes(where, log)
        for offset in range(min(start, len(inc.values)), min(end, len(inc.values))):
            if offset < inc.acked:
                self.stats.acknowledged_checks += 1
        lost = sum(1 for v in inc.values[end:] if v is not None)
        self.stats.lost_unacknowledged += lost
        del inc.values[end:]
        _put(inc.values, end, [])
        return inc

    def _served_batches(self, where: str, data: bytes, offset: int):
        """(header, decoded batch) of each whole batch in what a read at ``offset`` served; a
        partial or undecodable batch is a corrupt one served."""
        position = 0
        while position < len(data):
            if len(data) - position < HEADER_SIZE:
                self.stats.corrupted += 1
                raise Violation(f"{where}: a partial batch served at offset {offset}")
            header = read_header(data, position)
            try:
                batch = decode_batch(memoryview(data)[position:position + header.size])
            except Exception as exc:
                self.stats.corrupted += 1
                raise Violation(f"{where}: corrupt batch served at offset {offset}: {exc}") from None
            yield header, batch
            position += header.size

    def check_compacted_partition(self, name: str, p: int, log, inc: Incarnation) -> Incarnation:
        where = f"{name}-{p}"
        start, end = log.log_start_offset, log.log_end_offset
        if start != 0:
            raise Violation(f"{where}: log start {start} moved on a compacted log nothing deleted from")
        if end < inc.acked:
            self.stats.lost_acknowledged += inc.acked - end
            raise Violation(f"{where}: log end {end} is below the acknowledged {inc.acked}: records lost")
        served: dict[int, tuple] = {}  # offset -> (key, value) of every record served
        offset = start
        while offset < end:
            info = log.read(offset, 1 << 20)
            if info.region is None:
                break  # the rest was compacted away (the key checks below say if that was right)
            next_offset = offset
            for header, batch in self._served_batches(where, info.region.read_bytes(), offset):
                if header.next_offset <= next_offset:
                    raise Violation(f"{where}: batch {header.base_offset}..{header.last_offset} served "
                                    f"after offset {next_offset - 1}: offsets go backwards")
                for record in batch.records:
                    if record.offset < offset:
                        continue
                    if (served and record.offset <= max(served)) or not header.base_offset <= record.offset <= header.last_offset:
                        raise Violation(f"{where}: record {record.offset} out of order in batch "
                                        f"{header.base_offset}..{header.last_offset}")
                    if record.offset >= end:
                        raise Violation(f"{where}: record {record.offset} served at or past the log end {end}")
                    appended = ((inc.keys[record.offset], inc.values[record.offset])
                                if record.offset < len(inc.values) else None)
                    if (record.key, record.value) != appended:
                        self.stats.corrupted += 1
                        raise Violation(f"{where}: offset {record.offset} holds {(record.key, record.value)!r}, "
                                        f"appended {appended!r}")
                    served[record.offset] = (record.key, record.value)
                next_offset = header.next_offset
            if next_offset <= offset:
                raise Violation(f"{where}: a read at offset {offset} made no progress")
            offset = next_offset
        self.check_indexes(where, log)
        latest_acked: dict[bytes, int] = {}
        for o in range(min(inc.acked, len(inc.values))):
            if inc.keys[o] is not None:
                latest_acked[inc.keys[o]] = o
        for key, o in latest_acked.items():
            self.stats.keys_checked += 1
            if o in served or any(s > o and k == key for s, (k, _) in served.items()):
                continue
            tombstones = [t for t in range(o, min(max(inc.durable, o + 1), len(inc.values)))
                          if inc.keys[t] == key and inc.values[t] is None]
            if any(not any(s < t and k == key for s, (k, _) in served.items()) for t in tombstones):
                continue  # a tombstone (this one, or a newer synced one) the cleaner removed with every older record
            self.stats.lost_acknowledged += 1
            raise Violation(f"{where}: the latest acknowledged record of key {key!r} (offset {o}, "
                            f"{inc.values[o]!r}) is gone and no newer record of that key is served")
        self.stats.acknowledged_checks += len(latest_acked)
        # What is not served below the log end is gone for good: compacted away, or an unsynced
        # tail (never acknowledged) lost in front of a new segment whose creation survived (the
        # loader keeps offset gaps in compacted logs, as the cleaner makes them).
        for o in range(min(end, len(inc.values))):
            if o not in served:
                inc.values[o] = inc.keys[o] = None
        self.stats.lost_unacknowledged += sum(1 for k in inc.keys[end:] if k is not None)
        del inc.values[end:], inc.keys[end:]
        _put(inc.values, end, [])
        _put(inc.keys, end, [])
        return inc

    def check_indexes(self, where: str, log) -> None:
        for segment in log.segments:
            largest = -1
            for position, header in segment.log.batch_headers():
                largest = max(largest, header.max_timestamp)
                found = segment.translate_offset(header.base_offset)
                if found is None or found[0] != position:
                    raise Violation(f"{where}: offset {header.base_offset} is looked up at {found}, "
                                    f"the batch is at {position} of segment {segment.base_offset}")
            if segment.max_timestamp_so_far != largest:
                raise Violation(f"{where}: segment {segment.base_offset}'s time index says its largest "
                                f"timestamp is {segment.max_timestamp_so_far}, its batches say {largest}")


def _put(values: list, offset: int, new: list) -> None:
    """Write ``new`` into ``values`` from ``offset``, padding a gap with None."""
    if len(values) < offset:
        values.extend([None] * (offset - len(values)))
    values[offset:offset + len(new)] = new


def run(seeds, *, epochs: int = 5, actions: int = 30, compacted: bool = False) -> Stats:
    total = Stats()
    for seed in seeds:
        total.add(Life(seed, actions=actions, compacted=compacted).run(epochs))
    return total


__all__ = ["Life", "Stats", "run", "StorageError"]
