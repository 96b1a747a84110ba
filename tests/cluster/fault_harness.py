"""A Jepsen-style fault harness for a triolog cluster (issue 25, part 7).

Used by ``tests/cluster/test_fault_harness.py`` (a short run in CI) and ``bench/cluster_faults.py``
(long runs). Everything is real and on loopback: a three-node ZooKeeper ensemble of the test's own
(its nodes are killed too), three broker subprocesses (:class:`BrokerProcess`), and Kafka's own
client, confluent-kafka, as the workload:

* producers (idempotent, acks as the :class:`Setting` says) write unique values (``p<n>-<seq>``)
  round robin over the partitions of one topic (RF=3, ``min.insync.replicas`` as the setting says)
  and record, for each acknowledged value, the (partition, offset) the broker acknowledged;
* a consumer reads every partition along from offset 0 and records what it saw where.

A nemesis picks faults at random (seeded: the same seed picks the same kinds and targets):

* ``kill_leader``: kill -9 of a partition's leader, then restart on its ports and data;
* ``kill_controller``: the same for the active controller (Metadata's controller id);
* ``kill_zookeeper``: kill -9 of a ZooKeeper node (the quorum's leader half the time), restarted;
* ``pause_leader``: SIGSTOP of a partition's leader for longer than ``zookeeper.session.timeout.ms``
  (its session expires, another replica is elected; it wakes up believing itself the leader: a
  zombie), then SIGCONT;
* ``lose_tail``: kill -9 of a partition's leader, then, in each partition directory of its log
  dir, the active segment cut at a random byte past the recovery point its log dir's
  ``recovery-point-offset-checkpoint`` records (what was never fsynced is what a machine crash
  may lose from the page cache), then restart.

After each fault the cluster is healed (every broker registered, every partition led with its
full ISR, every ZooKeeper node serving), within a bound: a cluster that does not heal is recorded.
After the last fault the producers stop and drain, the cluster heals, and :func:`check` compares
the history: a consumer's read of every partition from offset 0, the along-read, and every
replica's records read from its segment files.
"""

from __future__ import annotations

import json
import os
import random
import signal
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.e2e.broker_process import BrokerProcess
from triolog.broker.storage.checkpoints import RECOVERY_POINT_CHECKPOINT, OffsetCheckpointFile
from triolog.protocol.record_batch import read_header
from triolog.protocol.records import decode_batch, iter_batch_spans

from .zookeeper import ZooKeeperEnsemble

TOPIC = "jepsen"
FAULT_KINDS = ("kill_leader", "kill_controller", "kill_zookeeper", "pause_leader", "lose_tail")
#: Control batches (transaction markers) carry no workload values.
_CONTROL_FLAG = 0x20

Observation = tuple[int, int, bytes]  # (partition, offset, value)


# -- the checker -------------------------------------------------------------------------------


@dataclass
class History:
    """What the run produced and saw. ``acknowledged``: (partition, offset, value) the brokers
    acknowledged; ``attempted``: every value ever handed to a producer (acknowledged, failed or
    unknown); ``reads``: observations per source (a consumer's read, a replica's files...);
    ``final``: the source that read every partition from offset 0 after healing."""

    acknowledged: list[Observation]
    attempted: set[bytes]
    reads: dict[str, list[Observation]]
    final: str
    #: (partition, offset) -> (producer id, producer epoch) of the batch holding it, from the
    #: replicas' files: what tells a client's re-send in a new producer epoch from a broker's
    #: failure to deduplicate.
    writers: dict[tuple[int, int], tuple[int, int]] = field(default_factory=dict)


@dataclass
class Verdict:
    acknowledged: int
    #: Acknowledged (partition, offset, value) whose value the final read does not have there.
    lost: list[Observation] = field(default_factory=list)
    #: value -> the (source, partition, offset) it was seen at, when more than one offset.
    duplicated: dict[bytes, list[tuple[str, int, int]]] = field(default_factory=dict)
    #: (partition, offset) -> {value: sources}, when two sources disagree on the value.
    inconsistent: dict[tuple[int, int], dict[bytes, list[str]]] = field(default_factory=dict)
    #: Values seen that no producer ever sent.
    unexpected: list[tuple[str, int, int, bytes]] = field(default_factory=list)
    #: Values at two offsets written by one producer in two producer epochs: the client bumped
    #: its epoch (KIP-360; librdkafka does after a request whose outcome it cannot know) and sent
    #: the value again. No broker deduplicates across producer epochs (Kafka's neither): the
    #: client's at-least-once re-send, reported, not counted against the brokers.
    resent: dict[bytes, list[tuple[str, int, int]]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not (self.lost or self.duplicated or self.inconsistent or self.unexpected)

    def summary(self) -> str:
        return (
            f"acknowledged={self.acknowledged} lost={len(self.lost)} duplicated={len(self.duplicated)} "
            f"inconsistent={len(self.inconsistent)} unexpected={len(self.unexpected)} "
            f"resent-by-the-client={len(self.resent)}"
        )


def check(history: History) -> Verdict:
    """Every acknowledged value at its acknowledged offset in the final read; no value at two
    offsets and no offset with two values, over every source; nothing never sent."""
    final_at: dict[tuple[int, int], bytes] = {}
    for partition, offset, value in history.reads.get(history.final, ()):
        final_at.setdefault((partition, offset), value)
    verdict = Verdict(acknowledged=len(history.acknowledged))
    for partition, offset, value in history.acknowledged:
        if final_at.get((partition, offset)) != value:
            verdict.lost.append((partition, offset, value))
    positions: dict[bytes, set[tuple[int, int]]] = defaultdict(set)
    where: dict[bytes, list[tuple[str, int, int]]] = defaultdict(list)
    values_at: dict[tuple[int, int], dict[bytes, list[str]]] = defaultdict(lambda: defaultdict(list))
    for source, observations in sorted(history.reads.items()):
        for partition, offset, value in observations:
            if value not in history.attempted:
                verdict.unexpected.append((source, partition, offset, value))
            if (partition, offset) not in positions[value]:
                positions[value].add((partition, offset))
                where[value].append((source, partition, offset))
            if source not in values_at[(partition, offset)][value]:
                values_at[(partition, offset)][value].append(source)
    for value, seen in positions.items():
        if len(seen) < 2:
            continue
        writers = [history.writers.get(position) for position in sorted(seen)]
        epochs = {w[1] for w in writers if w is not None}
        if None not in writers and len({w[0] for w in writers}) == 1 and len(epochs) == len(writers):
            verdict.resent[value] = where[value]  # one producer, each copy in its own epoch
        else:
            verdict.duplicated[value] = where[value]
    verdict.inconsistent = {
        position: dict(values) for position, values in values_at.items() if len(values) > 1
    }  # fmt: skip
    return verdict


# -- the cluster ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Setting:
    name: str
    acks: str = "all"
    min_insync: int = 2
    unclean: bool = False
    replication: int = 3


SAFE = Setting("safe")
ACKS_1 = Setting("acks=1", acks="1")
UNCLEAN = Setting("unclean", unclean=True)


def wait_until(check_fn: Callable, timeout: float, step: float = 0.1):
    deadline = time.monotonic() + timeout
    while True:
        value = check_fn()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(step)


class Cluster:
    """Three broker subprocesses on one ZooKeeper ensemble, with the faults' primitives."""

    def __init__(
        self,
        directory: Path,
        zookeeper: ZooKeeperEnsemble,
        setting: Setting,
        *,
        session_ms: int = 2000,
        broker_ids: Iterable[int] = (1, 2, 3),
        extra: Iterable[str] = (),
    ):
        self.directory = Path(directory)
        self.zookeeper = zookeeper
        self.setting = setting
        self.session_ms = session_ms
        overrides = (
            f"zookeeper.connect={zookeeper.connect('/triolog')}",
            f"zookeeper.session.timeout.ms={session_ms}",
            "replica.fetch.wait.max.ms=50",
            "replica.lag.time.max.ms=4000",
            "log.flush.offset.checkpoint.interval.ms=300",
            f"unclean.leader.election.enable={'true' if setting.unclean else 'false'}",
            "auto.create.topics.enable=false",
            *extra,
        )
        self.brokers = {
            broker_id: BrokerProcess(
                self.directory / f"broker-{broker_id}", (f"broker.id={broker_id}", *overrides), kafka=True
            )
            for broker_id in broker_ids
        }
        self.paused: set[int] = set()
        self._admin: AdminClient | None = None

    # -- lifecycle

    def start(self) -> Cluster:
        for broker in self.brokers.values():
            broker.start(timeout_s=60)
        assert wait_until(lambda: len(self.metadata().brokers) == len(self.brokers), 60), "brokers never met"
        return self

    def stop(self) -> None:
        for broker_id in list(self.paused):
            self.resume(broker_id)
        for broker in self.brokers.values():
            broker.kill()

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{b.kafka_port}" for b in self.brokers.values())

    def running(self, broker_id: int) -> bool:
        process = self.brokers[broker_id].process
        return process is not None and process.poll() is None

    def metadata(self, timeout: float = 5.0):
        if self._admin is None:
            self._admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})
        try:
            return self._admin.list_topics(timeout=timeout)
        except Exception:
            return _NO_METADATA

    def create_topic(self, partitions: int, configs: dict[str, str] | None = None) -> None:
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        config = {"min.insync.replicas": str(self.setting.min_insync), **(configs or {})}
        admin.create_topics([NewTopic(TOPIC, partitions, self.setting.replication, config=config)])[TOPIC].result(60)
        assert self.heal(60), "the new topic never had full ISRs"

    # -- observing

    def leader_of(self, partition: int) -> int | None:
        topic = self.metadata().topics.get(TOPIC)
        if topic is None or partition not in topic.partitions:
            return None
        leader = topic.partitions[partition].leader
        return leader if leader in self.brokers else None

    def high_watermark(self, partition: int) -> int:
        """The partition's high watermark, as a consumer sees it (-1 when it cannot be read)."""
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "jepsen-watermarks", "log_level": 0})
        try:
            return consumer.get_watermark_offsets(TopicPartition(TOPIC, partition), timeout=5)[1]
        except KafkaException:
            return -1
        finally:
            consumer.close()

    def controller(self) -> int | None:
        controller = self.metadata().controller_id
        return controller if controller in self.brokers else None

    def healthy(self) -> bool:
        return self.unhealthy() == ""

    def unhealthy(self) -> str:
        """Why the cluster is not healed yet ('' once it is)."""
        if down := [b for b in self.brokers if not self.running(b)]:
            return f"brokers {down} not running"
        if self.paused:
            return f"brokers {sorted(self.paused)} stopped"
        if zk := [n.myid for n in self.zookeeper.nodes if not self.zookeeper.running(n) or n.mode() is None]:
            return f"zookeeper nodes {zk} not serving"
        metadata = self.metadata()
        if len(metadata.brokers) != len(self.brokers) or metadata.controller_id not in self.brokers:
            return f"metadata: brokers {sorted(metadata.brokers)}, controller {metadata.controller_id}"
        topic = metadata.topics.get(TOPIC)
        if topic is None:
            return ""
        return "; ".join(
            f"partition {p.id}: error {p.error}, leader {p.leader}, isr {p.isrs}"
            for p in topic.partitions.values()
            if not (p.error is None and p.leader in self.brokers and len(p.isrs) == self.setting.replication)
        )

    def heal(self, timeout: float = 60.0) -> bool:
        return bool(wait_until(self.healthy, timeout, step=0.2))

    # -- faults' primitives

    def kill(self, broker_id: int) -> None:
        self.brokers[broker_id].kill()

    def restart(self, broker_id: int) -> None:
        # A broker restarted after a kill -9 waits out its predecessor's registration first.
        self.brokers[broker_id].start(timeout_s=self.session_ms / 1000 + 60)

    def pause(self, broker_id: int) -> None:
        os.kill(self.brokers[broker_id].process.pid, signal.SIGSTOP)  # type: ignore[union-attr]
        self.paused.add(broker_id)

    def resume(self, broker_id: int) -> None:
        os.kill(self.brokers[broker_id].process.pid, signal.SIGCONT)  # type: ignore[union-attr]
        self.paused.discard(broker_id)

    # -- reading replicas' files

    def replica_records(self, broker_id: int, partitions: int) -> list[Observation]:
        return [
            obs
            for partition in range(partitions)
            for obs in read_partition_dir(self.brokers[broker_id].data_dir / f"{TOPIC}-{partition}", partition)
        ]


class _NoMetadata:
    brokers: dict = {}
    topics: dict = {}
    controller_id = -1


_NO_METADATA = _NoMetadata()


def batch_writers(directory: Path, partition: int) -> dict[tuple[int, int], tuple[int, int]]:
    """(partition, offset) -> (producer id, producer epoch) of every record in the directory."""
    out: dict[tuple[int, int], tuple[int, int]] = {}
    for path in sorted(directory.glob("*.log")):
        data = path.read_bytes()
        for position, _size in _whole_batches(data):
            header = read_header(data, position)
            for offset in range(header.base_offset, header.base_offset + header.last_offset_delta + 1):
                out[(partition, offset)] = (header.producer_id, header.producer_epoch)
    return out


def read_partition_dir(directory: Path, partition: int) -> list[Observation]:
    """Every record of a partition directory's segments, read from the files (a torn last batch,
    as a crash leaves it, is left out as the broker's recovery would)."""
    out: list[Observation] = []
    for path in sorted(directory.glob("*.log")):
        data = path.read_bytes()
        for position, size in _whole_batches(data):
            batch = decode_batch(memoryview(data)[position : position + size])
            if batch.header.attributes & _CONTROL_FLAG:
                continue
            out.extend((partition, record.offset, record.value or b"") for record in batch.records)
    return out


def _whole_batches(data: bytes) -> list[tuple[int, int]]:
    try:
        return list(iter_batch_spans(data))
    except Exception:
        spans = []
        position = 0
        while position + 12 <= len(data):
            size = int.from_bytes(data[position + 8 : position + 12], "big") + 12
            if position + size > len(data):
                break
            spans.append((position, size))
            position += size
        return spans


def cut_unflushed_tail(data_dir: Path, rng: random.Random) -> dict[str, int]:
    """In each partition directory of a (dead) broker's log dir, cut the active segment at a random
    byte between the recovery point's position and its end; returns the bytes cut per directory."""
    checkpoint = data_dir / RECOVERY_POINT_CHECKPOINT
    points = OffsetCheckpointFile(checkpoint).read() if checkpoint.exists() else {}
    cut: dict[str, int] = {}
    for directory in sorted(p for p in data_dir.iterdir() if p.is_dir() and p.name.startswith(f"{TOPIC}-")):
        segments = sorted(directory.glob("*.log"))
        if not segments:
            continue
        active = segments[-1]
        recovery_point = points.get((TOPIC, int(directory.name.rsplit("-", 1)[1])), 0)
        data = active.read_bytes()
        start = len(data)
        for position, _size in _whole_batches(data):
            header = read_header(data, position)
            if header.base_offset + header.last_offset_delta >= recovery_point:
                start = position
                break
        if start >= len(data):
            continue
        new_size = rng.randint(start, len(data) - 1)
        with open(active, "r+b") as f:
            f.truncate(new_size)
        cut[directory.name] = len(data) - new_size
    return cut


# -- the workload --------------------------------------------------------------------------------


class WorkloadProducer(threading.Thread):
    """An idempotent confluent-kafka producer writing unique values round robin over the
    partitions until stopped; a producer gone fatal is replaced by a new one (a new producer id)."""

    def __init__(self, index: int, cluster: Cluster, partitions: int, stop: threading.Event, rate: float = 150.0):
        super().__init__(name=f"producer-{index}", daemon=True)
        self.index, self.cluster, self.partitions, self.stop_event, self.rate = index, cluster, partitions, stop, rate
        self.acknowledged: list[Observation] = []
        self.failed: list[tuple[bytes, str]] = []
        self.attempted: set[bytes] = set()
        self.fatal = 0
        self.fatal_errors: list[str] = []
        self.unflushed = 0
        self._lock = threading.Lock()
        self._fatal_seen = False

    def _config(self) -> dict:
        return {
            "bootstrap.servers": self.cluster.bootstrap,
            "acks": self.cluster.setting.acks,
            "enable.idempotence": self.cluster.setting.acks == "all",
            "linger.ms": 5,
            "message.timeout.ms": 120000,
            "retry.backoff.ms": 100,
            "log_level": 0,
            "error_cb": self._error,
        }

    def _error(self, err: KafkaError) -> None:
        if err.fatal():
            self._fatal_seen = True
            self.fatal_errors.append(err.str())

    def _delivered(self, err, msg) -> None:
        with self._lock:
            if err is None:
                self.acknowledged.append((msg.partition(), msg.offset(), msg.value()))
            else:
                self.failed.append((msg.value(), err.name()))

    def run(self) -> None:
        producer = Producer(self._config())
        seq = 0
        while not self.stop_event.is_set():
            if self._fatal_seen:  # its unacknowledged values stay attempted (outcome unknown)
                self.fatal += 1
                _abandon(producer)
                producer = Producer(self._config())
                self._fatal_seen = False
            value = f"p{self.index}-{seq}".encode()
            try:
                producer.produce(TOPIC, value=value, partition=seq % self.partitions, on_delivery=self._delivered)
            except BufferError:
                producer.poll(0.1)
                continue
            except KafkaException as exc:
                if not (exc.args[0].fatal() or exc.args[0].code() == KafkaError._FATAL):
                    # Refused before it was queued (the topic missing from metadata for a moment
                    # while the cluster recovers): not attempted; again after a poll.
                    producer.poll(0.1)
                    continue
                self._fatal_seen = True  # the producer went fatal since the last poll
                self.fatal_errors.append(exc.args[0].str())
                continue
            self.attempted.add(value)
            seq += 1
            producer.poll(0)
            time.sleep(1 / self.rate)
        self.unflushed = producer.flush(0 if self._fatal_seen else 60)
        if self.unflushed:
            _abandon(producer)


def _abandon(producer: Producer) -> None:
    """A fatal producer delivers nothing more: drop what it holds (delivery reports say so)."""
    try:
        producer.purge()
        producer.poll(0)
    except KafkaException:
        pass


class AlongConsumer(threading.Thread):
    """Reads every partition from offset 0 while the faults go on."""

    def __init__(self, cluster: Cluster, partitions: int, stop: threading.Event):
        super().__init__(name="along-consumer", daemon=True)
        self.cluster, self.partitions, self.stop_event = cluster, partitions, stop
        self.seen: list[Observation] = []

    def run(self) -> None:
        consumer = Consumer(
            {
                "bootstrap.servers": self.cluster.bootstrap,
                "group.id": "jepsen-along",
                "enable.auto.commit": False,
                "log_level": 0,
            }
        )
        consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(self.partitions)])
        try:
            while not self.stop_event.is_set():
                for message in consumer.consume(500, 0.2):
                    if message.error() is None:
                        self.seen.append((message.partition(), message.offset(), message.value()))
        finally:
            consumer.close()


def read_from_zero(cluster: Cluster, partitions: int, timeout: float = 60.0) -> list[Observation]:
    """Every partition read from offset 0 to its high watermark through a fresh consumer."""
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": "jepsen-final",
            "enable.auto.commit": False,
            "log_level": 0,
        }
    )
    try:
        ends = {p: consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=30)[1] for p in range(partitions)}
        consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(partitions)])
        positions = {p: 0 for p in range(partitions)}
        seen: list[Observation] = []
        deadline = time.monotonic() + timeout
        while any(positions[p] < ends[p] for p in positions) and time.monotonic() < deadline:
            for message in consumer.consume(1000, 0.5):
                if message.error() is None:
                    seen.append((message.partition(), message.offset(), message.value()))
                    positions[message.partition()] = message.offset() + 1
        return seen
    finally:
        consumer.close()


# -- the nemesis ---------------------------------------------------------------------------------


@dataclass
class FaultRecord:
    number: int
    kind: str
    target: str
    healed_s: float | None  # None: not healed within the bound


@dataclass
class RunResult:
    setting: Setting
    seed: int
    faults: list[FaultRecord]
    verdict: Verdict
    producers_fatal: int
    failed_deliveries: int
    unflushed: int
    wall_s: float

    @property
    def unhealed(self) -> list[FaultRecord]:
        return [f for f in self.faults if f.healed_s is None]

    def faults_by_kind(self) -> Counter:
        return Counter(f.kind for f in self.faults)


class Nemesis:
    def __init__(
        self,
        cluster: Cluster,
        partitions: int,
        rng: random.Random,
        kinds: tuple[str, ...] = FAULT_KINDS,
        log: Callable[[str], None] = lambda line: None,
    ):
        self.cluster, self.partitions, self.rng, self.kinds, self.log = cluster, partitions, rng, kinds, log

    def _leader(self) -> tuple[int, int]:
        partition = self.rng.randrange(self.partitions)
        leader = wait_until(lambda: self.cluster.leader_of(partition), 30)
        assert leader, f"partition {partition} has no leader"
        return partition, leader

    def inject(self, kind: str) -> str:
        cluster = self.cluster
        if kind in ("kill_leader", "lose_tail"):
            partition, leader = self._leader()
            cluster.kill(leader)
            target = f"broker {leader} (leader of {partition})"
            if kind == "lose_tail":
                cut = cut_unflushed_tail(cluster.brokers[leader].data_dir, self.rng)
                target += f", cut {sum(cut.values())} bytes over {len(cut)} partitions"
            time.sleep(self.rng.uniform(0, 1.0))
            cluster.restart(leader)
            return target
        if kind == "kill_controller":
            controller = wait_until(cluster.controller, 30)
            assert controller, "no controller"
            cluster.kill(controller)
            time.sleep(self.rng.uniform(0, 1.0))
            cluster.restart(controller)
            return f"broker {controller} (controller)"
        if kind == "kill_zookeeper":
            zk = cluster.zookeeper
            leader = zk.leader()
            node = leader if leader is not None and self.rng.random() < 0.5 else self.rng.choice(zk.nodes)
            zk.kill(node)
            time.sleep(self.rng.uniform(0.2, 1.5))
            zk.start_node(node)
            zk.wait_serving(60, [node])
            return f"zookeeper {node.myid}" + (" (quorum leader)" if node is leader else "")
        if kind == "pause_leader":
            partition, leader = self._leader()
            cluster.pause(leader)
            time.sleep(cluster.session_ms / 1000 + self.rng.uniform(1.0, 2.0))
            cluster.resume(leader)
            return f"broker {leader} (leader of {partition}) stopped past its session"
        raise ValueError(kind)

    def run(self, faults: int, heal_timeout: float = 60.0) -> list[FaultRecord]:
        records = []
        for number in range(1, faults + 1):
            kind = self.rng.choice(self.kinds)
            target = self.inject(kind)
            started = time.monotonic()
            healed = self.cluster.heal(heal_timeout)
            healed_s = time.monotonic() - started if healed else None
            records.append(FaultRecord(number, kind, target, healed_s))
            self.log(
                f"fault {number:3d} {kind:16s} {target}: "
                + (f"healed in {healed_s:.1f} s" if healed_s is not None else f"NOT HEALED: {self.cluster.unhealthy()}")
            )
            if not healed:
                break  # the next fault would only bury this one
            time.sleep(self.rng.uniform(0.2, 1.0))  # the workload runs on a healthy cluster a while
        return records


# -- a run ---------------------------------------------------------------------------------------


def run_faults(
    directory: Path,
    setting: Setting,
    *,
    faults: int,
    seed: int,
    partitions: int = 3,
    producers: int = 2,
    kinds: tuple[str, ...] = FAULT_KINDS,
    log: Callable[[str], None] = lambda line: None,
) -> RunResult:
    """One run: own ZooKeeper ensemble, three brokers, the workload, ``faults`` faults, the check."""
    started = time.monotonic()
    rng = random.Random(seed)
    outer_log = log

    def log(line: str) -> None:
        outer_log(f"[{time.monotonic() - started:6.1f} s] {line}")

    log(f"setting {setting.name}: seed {seed}, {faults} faults of {', '.join(kinds)}")
    zookeeper = ZooKeeperEnsemble(Path(directory) / "zookeeper", size=3).start()
    cluster = Cluster(Path(directory), zookeeper, setting)
    try:
        cluster.start()
        cluster.create_topic(partitions, {"segment.bytes": "65536"})
        stop = threading.Event()
        workers = [WorkloadProducer(i, cluster, partitions, stop) for i in range(producers)]
        along = AlongConsumer(cluster, partitions, stop)
        for worker in (*workers, along):
            worker.start()
        time.sleep(1.0)
        records = Nemesis(cluster, partitions, rng, kinds, log).run(faults)
        time.sleep(1.0)
        stop.set()
        deadline = time.monotonic() + 120
        for worker in (*workers, along):
            worker.join(max(0.0, deadline - time.monotonic()))
        log("workload stopped")
        healed = cluster.heal(90)
        log(f"final heal: {'healed' if healed else 'NOT HEALED: ' + cluster.unhealthy()}")
        for worker in workers:
            for error in worker.fatal_errors:
                log(f"{worker.name} went fatal: {error}")
        history = collect_history(cluster, partitions, workers, along)
        save_history(history, Path(directory) / "history.json")
        verdict = check(history)
        log("checked")
        return RunResult(
            setting,
            seed,
            records,
            verdict,
            sum(w.fatal for w in workers),
            sum(len(w.failed) for w in workers),
            sum(w.unflushed for w in workers),
            time.monotonic() - started,
        )
    finally:
        cluster.stop()
        zookeeper.stop()


def collect_history(
    cluster: Cluster, partitions: int, workers: list[WorkloadProducer], along: AlongConsumer | None
) -> History:
    """The final read from offset 0, the along-read, and each replica's files (once the replicas'
    logs stopped changing: the ISR is full and nobody writes)."""
    reads = {"final-read": read_from_zero(cluster, partitions)}
    if along is not None:
        reads["along-read"] = along.seen
    previous: dict[int, int] = {}

    def settled() -> bool:
        sizes = {b: len(cluster.replica_records(b, partitions)) for b in cluster.brokers}
        done = sizes == previous and len(set(sizes.values())) == 1
        previous.clear()
        previous.update(sizes)
        return done

    wait_until(settled, 30, step=0.5)
    for broker_id in cluster.brokers:
        reads[f"replica-{broker_id}"] = cluster.replica_records(broker_id, partitions)
    attempted = set().union(*(w.attempted for w in workers))
    acknowledged = [obs for w in workers for obs in w.acknowledged]
    writers: dict[tuple[int, int], tuple[int, int]] = {}
    for broker in cluster.brokers.values():
        for partition in range(partitions):
            writers.update(batch_writers(broker.data_dir / f"{TOPIC}-{partition}", partition))
    return History(acknowledged, attempted, reads, "final-read", writers)


def save_history(history: History, path: Path) -> None:
    """The history as JSON next to the logs, for a post-mortem of a failed run."""

    def rows(observations: Iterable[Observation]) -> list:
        return [[p, o, v.decode(errors="replace")] for p, o, v in observations]

    doc = {
        "acknowledged": rows(history.acknowledged),
        "attempted": sorted(v.decode(errors="replace") for v in history.attempted),
        "reads": {source: rows(obs) for source, obs in history.reads.items()},
    }
    path.write_text(json.dumps(doc))


def format_result(result: RunResult) -> str:
    verdict = result.verdict
    kinds = ", ".join(f"{k} {n}" for k, n in sorted(result.faults_by_kind().items()))
    lines = [
        f"setting {result.setting.name} (acks={result.setting.acks}, min.insync.replicas={result.setting.min_insync}, "
        f"unclean={result.setting.unclean}), seed {result.seed}",
        f"  faults: {len(result.faults)} ({kinds}); not healed: {len(result.unhealed)}",
        f"  {verdict.summary()}",
        f"  failed deliveries {result.failed_deliveries}, producers gone fatal {result.producers_fatal}, "
        f"unflushed {result.unflushed}, wall {result.wall_s:.0f} s",
    ]
    for partition, offset, value in verdict.lost[:5]:
        lines.append(f"  lost: {value!r} acknowledged at {partition}/{offset}")
    for value, where in list(verdict.duplicated.items())[:5]:
        lines.append(f"  duplicated: {value!r} at {where}")
    for value, where in list(verdict.resent.items())[:5]:
        lines.append(f"  resent by the client in a new producer epoch: {value!r} at {where}")
    for position, values in list(verdict.inconsistent.items())[:5]:
        lines.append(f"  inconsistent: {position}: {values}")
    return "\n".join(lines)


# -- the unsafe demo -----------------------------------------------------------------------------


def run_acks1_loss(
    directory: Path, *, seed: int = 0, records: int = 200, log: Callable[[str], None] = lambda line: None
) -> RunResult:
    """Kafka's documented acks=1 loss, made certain: both followers of a partition are stopped
    (SIGSTOP, shorter than the session and replica.lag.time.max.ms: they stay in the ISR), an
    acks=1 producer gets ``records`` acknowledged by the leader alone, the leader is killed -9,
    the followers woken: one is elected (clean: it is in the ISR) without those records, and the
    old leader, restarted, truncates them away."""
    started = time.monotonic()
    zookeeper = ZooKeeperEnsemble(Path(directory) / "zookeeper", size=3).start()
    cluster = Cluster(Path(directory), zookeeper, ACKS_1)
    try:
        cluster.start()
        cluster.create_topic(1)
        leader = cluster.leader_of(0)
        assert leader is not None
        acknowledged: list[Observation] = []
        attempted: set[bytes] = set()
        producer = Producer(
            {
                "bootstrap.servers": cluster.bootstrap,
                "acks": "1",
                "linger.ms": 1,
                "message.timeout.ms": 30000,
                "log_level": 0,
            }
        )

        def delivered(err, msg):
            if err is None:
                acknowledged.append((msg.partition(), msg.offset(), msg.value()))

        def produce(prefix: str, count: int) -> None:
            for i in range(count):
                value = f"{prefix}-{i}".encode()
                attempted.add(value)
                producer.produce(TOPIC, value=value, partition=0, on_delivery=delivered)
            producer.flush(30)

        produce("replicated", records)  # acknowledged and replicated: these must survive
        assert wait_until(lambda: cluster.healthy(), 30)
        # Replicated means below the high watermark (acks=1 answers before the followers fetch).
        assert wait_until(lambda: cluster.high_watermark(0) >= records, 30), "the followers never caught up"
        time.sleep(0.5)
        followers = [b for b in cluster.brokers if b != leader]
        for follower in followers:
            cluster.pause(follower)
        # A fetch in flight when a follower stopped is still answered (long poll, at most
        # replica.fetch.wait.max.ms) into its socket's kernel buffer, which it reads on waking:
        # records produced only after those answers left reach no follower.
        time.sleep(0.5)
        produce("leader-only", records)
        cluster.kill(leader)
        for follower in followers:
            cluster.resume(follower)
        log(
            f"acks=1: followers {followers} stopped, {records} records acknowledged by leader {leader} alone, "
            f"leader killed -9"
        )
        new_leader = wait_until(lambda: (lead := cluster.leader_of(0)) != leader and lead, 60)
        log(f"acks=1: broker {new_leader} elected")
        produce("after", records)  # the new leader writes over the offsets the lost records had
        cluster.restart(leader)
        healed = cluster.heal(60)
        faults = [FaultRecord(1, "acks1_kill_leader", f"broker {leader}", 0.0 if healed else None)]
        producer.flush(30)
        history = collect_history(cluster, 1, [], None)
        history.acknowledged, history.attempted = acknowledged, attempted
        return RunResult(ACKS_1, seed, faults, check(history), 0, 0, 0, time.monotonic() - started)
    finally:
        cluster.stop()
        zookeeper.stop()
