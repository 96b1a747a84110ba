"""A seeded power-loss workload over FaultFS: the engine of test_power_loss.py and bench/power_loss.py.

One *life* is a fresh FaultFS with a log dir holding topic ``a`` (two partitions, never deleted)
and topic ``b`` (two partitions, deleted and re-created now and then). Each *epoch* of a life
runs random actions as a broker would run them (appends, acks=-1 flushes, rolls, the roll and
flush.ms flushes, the three checkpoint tasks, delete_records, retention, the delete-file task,
topic deletion and creation, clean restarts), cuts the power after a random number of disk
mutations (possibly in the middle of a call, or during the next startup's recovery), boots, and
checks the recovered broker against a model of what was written:

* no acknowledged record is lost: an append is acknowledged once a ``flush`` covering it
  returned (acks=-1); the topic creations and deletions that returned are acknowledged too;
* every batch served decodes and passes its CRC, batches and their records follow each other
  offset by offset from the log start to the log end, and every record holds the value that
  was appended at its offset: unacknowledged (acks=1) records are lost only as a suffix;
* the log start offset never passes what delete_records or retention asked for;
* every segment's time index ends with the segment's largest timestamp (retention reads it).

The next epoch continues from the recovered state, so recovery output is itself crashed.
"""

from __future__ import annotations

import logging
import random
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from broker.storage.clock import ManualClock
from broker.storage.errors import StorageError
from broker.storage.log_manager import LogManager
from broker.storage.topics import TopicManager
from config.log_config import LogConfig
from protocol.record_batch import HEADER_SIZE, read_header
from protocol.records import Record, decode_batch, encode_batch

from .faultfs import FaultFS, PowerLoss

LOG_DIR = Path("/data/logs")
BASE_CONFIG = LogConfig().with_overrides({
    "segment.bytes": "1400",
    "index.interval.bytes": "150",
    "segment.index.bytes": "120",  # 15 offset / 10 time entries: index-full rolls happen too
    "file.delete.delay.ms": "2000",
})
TOPIC_CONFIGS = {"a": {}, "b": {"retention.bytes": "3000"}}
PARTITIONS = 2


@dataclass
class Incarnation:
    """What was appended to one partition between its creation and its deletion."""

    values: list = field(default_factory=list)  # offset -> value bytes (None: no record there)
    acked: int = 0  # offsets below this were acknowledged (a flush covering them returned)
    max_start: int = 0  # the highest log start offset delete_records or retention produced


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
    violations: list[str] = field(default_factory=list)

    def add(self, other: "Stats") -> None:
        for name in ("lives", "power_losses", "recovery_crashes", "acknowledged_records", "acknowledged_checks",
                     "appended_records",
                     "lost_acknowledged", "lost_unacknowledged", "corrupted"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.violations.extend(other.violations)


class Violation(AssertionError):
    pass


class Life:
    def __init__(self, seed: int, *, actions: int = 30):
        self.seed = seed
        self.rng = random.Random(seed)
        self.actions = actions
        self.clock = ManualClock(1_700_000_000_000 + seed)
        self.fs = FaultFS(seed=seed, clock=self.clock)
        self.model = {"a": TopicModel(None), "b": TopicModel(None)}
        self.stats = Stats(lives=1)
        self.sequence = 0
        self.epoch = 0
        self.manager: LogManager | None = None
        self.topics: TopicManager | None = None

    # -- broker lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        manager = LogManager([LOG_DIR], BASE_CONFIG, clock=self.clock, fs=self.fs)
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
        storage_logger = logging.getLogger("broker.storage")
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
            for self.epoch in range(epochs):
                # ~6 disk mutations per action: the power goes anywhere in the epoch, or after it
                self.fs.crash_after = self.rng.randint(0, 8 * self.actions)
                try:
                    for _ in range(self.actions):
                        self.step()
                except PowerLoss:
                    pass
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

    def pick(self):
        choices = self.live_partitions()
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
        records = [Record(i, now + self.rng.randint(-5, 5), b"k%d" % i, v) for i, v in enumerate(values)]
        batch = encode_batch(records)
        _put(inc.values, base, values)  # before the call: a cut during it may or may not keep them
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
        picked = self.pick()
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
                survivors.append(self.check_partition(name, p, log, expected))
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
            data = info.region.read_bytes()
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
                position += header.size
        self.check_indexes(where, log)
        for offset in range(min(start, len(inc.values)), min(end, len(inc.values))):
            if offset < inc.acked:
                self.stats.acknowledged_checks += 1
        lost = sum(1 for v in inc.values[end:] if v is not None)
        self.stats.lost_unacknowledged += lost
        del inc.values[end:]
        _put(inc.values, end, [])
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


def run(seeds, *, epochs: int = 5, actions: int = 30) -> Stats:
    total = Stats()
    for seed in seeds:
        total.add(Life(seed, actions=actions).run(epochs))
    return total


__all__ = ["Life", "Stats", "run", "StorageError"]
