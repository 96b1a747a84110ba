"""The kill -9 loop: the real broker killed with SIGKILL at chosen moments under a checked workload.

Used by ``tests/e2e/test_crash_loop.py`` (a short run in CI) and ``bench/crash_loop.py`` (a long
one). Producers (our client, in threads of this process) write numbered, checksummed records to
plain, compacted and retention-limited topics with small segments, with acks=-1 and acks=1 and
every codec, for the whole run: they simply retry or fail while the broker is down, as a real
producer would. Each cycle starts the broker on the same port and data directory and kills it:

* ``random``: after a random time serving;
* ``roll``: as soon as a new segment file appears in any partition directory (mid-roll);
* ``clean``: as soon as the cleaner's ``.cleaned``/``.swap`` files appear (mid-clean/mid-swap);
* ``retention``: as soon as retention renames a segment to ``.deleted``;
* ``startup``: at a random moment between exec and ``broker_started``, i.e. during imports, log
  loading and crash recovery (every start here follows a kill -9, so every start recovers).

A waiting mode that sees nothing within its window kills anyway and is counted as not
triggered. At the end the broker is started once more, the producers drain, and the checker
reads every partition back over the wire and counts (see :class:`Counts`).

Every record's value is ``magic, producer, seq, payload length, payload, crc32c`` so a record
is identified by (producer, seq) and its bytes are checked independently of the batch CRC. The
ledger keeps, per record, where it was sent and what the producer learned: acknowledged (with
offset), outcome unknown (the connection died after the request left: the broker may or may not
have appended it; our client never resends those) or definitely not appended (the client never
got the request out whole). A duplicate is therefore always a broker bug, and so is a record
found that was definitely not appended.
"""

from __future__ import annotations

import os
import random
import signal
import struct
import threading
import time
from array import array
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from crc32c import crc32c

from triolog.protocol import messages as m
from triolog.protocol.errors import CorruptRecordError, ErrorCode
from triolog.protocol.record_batch import LOG_OVERHEAD, read_header
from triolog.protocol.records import Record, decode_batch, encode_batch

from .broker_process import BrokerProcess

# -- the workload ------------------------------------------------------------------------------

#: (name, partitions, configs). Segments are small so that rolls happen every few batches.
TOPICS: tuple[tuple[str, int, dict[str, str]], ...] = (
    ("plain", 3, {"segment.bytes": "16384", "retention.ms": "-1"}),
    ("compacted", 2, {"cleanup.policy": "compact", "segment.bytes": "8192", "min.cleanable.dirty.ratio": "0.01",
                      "min.compaction.lag.ms": "0", "retention.ms": "-1"}),
    ("retained", 1, {"segment.bytes": "8192", "retention.bytes": "40000", "retention.ms": "-1"}),
)
COMPACTED = {"compacted"}
#: Keys of the compacted topic: few enough that the cleaner has plenty to remove.
COMPACTED_KEYS = 150

BROKER_OVERRIDES: tuple[str, ...] = (
    "auto.create.topics.enable=false",
    "log.cleaner.backoff.ms=100",
    "log.retention.check.interval.ms=200",
    "log.initial.task.delay.ms=0",
    "log.segment.delete.delay.ms=100",
    "log.flush.offset.checkpoint.interval.ms=500",
    "log.flush.start.offset.checkpoint.interval.ms=500",
)


@dataclass(frozen=True)
class ProducerSpec:
    acks: int
    compression: str
    topics: tuple[str, ...]


PRODUCERS: tuple[ProducerSpec, ...] = (
    ProducerSpec(-1, "none", ("plain", "retained")),
    ProducerSpec(-1, "zstd", ("plain", "compacted")),
    ProducerSpec(-1, "lz4", ("compacted", "retained", "plain")),
    ProducerSpec(-1, "gzip", ("plain",)),
    ProducerSpec(1, "snappy", ("plain", "compacted", "retained")),
)

_MAGIC = b"TLCK"
_VALUE_HEAD = struct.Struct(">4sBIH")  # magic, producer, seq, payload length
_CRC = struct.Struct(">I")

PENDING, ACKED, UNKNOWN, NOT_APPENDED = 0, 1, 2, 3


def encode_value(producer: int, seq: int, payload: bytes) -> bytes:
    head = _VALUE_HEAD.pack(_MAGIC, producer, seq, len(payload)) + payload
    return head + _CRC.pack(crc32c(head))


def decode_value(value: bytes | None) -> tuple[int, int] | None:
    """(producer, seq) of an intact value, None for anything else."""
    if value is None or len(value) < _VALUE_HEAD.size + _CRC.size:
        return None
    magic, producer, seq, length = _VALUE_HEAD.unpack_from(value)
    if magic != _MAGIC or len(value) != _VALUE_HEAD.size + length + _CRC.size:
        return None
    (crc,) = _CRC.unpack_from(value, len(value) - _CRC.size)
    if crc32c(value[: -_CRC.size]) != crc:
        return None
    return producer, seq


def compacted_key(number: int) -> bytes:
    return b"key-%04d" % number


def all_partitions() -> list[tuple[str, int]]:
    return [(name, p) for name, count, _ in TOPICS for p in range(count)]


class ProducerLedger:
    """What one producer sent and learned, indexed by seq (arrays: a long run sends millions)."""

    def __init__(self, index: int, spec: ProducerSpec):
        self.index = index
        self.spec = spec
        self.target = array("H")  # index into all_partitions()
        self.key = array("i")  # compacted key number, -1 for none
        self.status = bytearray()
        self.offset = array("q")
        self.errors: Counter[str] = Counter()

    def __len__(self) -> int:
        return len(self.status)


class WorkloadProducer(threading.Thread):
    """Sends bursts of records with our client and waits for each burst's outcome, until stopped."""

    def __init__(self, index: int, spec: ProducerSpec, bootstrap: str, seed: int, stop: threading.Event):
        super().__init__(name=f"crash-producer-{index}", daemon=True)
        self.ledger = ProducerLedger(index, spec)
        self.bootstrap = bootstrap
        self.rng = random.Random(seed * 1000 + index)
        self.stop = stop
        self.failure: BaseException | None = None
        self.targets = [(i, tp) for i, tp in enumerate(all_partitions()) if tp[0] in spec.topics]

    def run(self) -> None:
        from triolog.client import Producer
        from triolog.client.errors import RequestNotSentError

        spec, rng, ledger = self.ledger.spec, self.rng, self.ledger
        try:
            with Producer(self.bootstrap, acks=spec.acks, compression=spec.compression, linger_ms=rng.choice([0, 2, 5]),
                          batch_size=4096, retry_backoff_ms=50, request_timeout_ms=15_000,
                          delivery_timeout_ms=90_000, client_id=f"crash-producer-{ledger.index}") as producer:
                while not self.stop.is_set():
                    burst = []
                    for _ in range(rng.randint(1, 60)):
                        target, (topic, partition) = rng.choice(self.targets)
                        seq = len(ledger)
                        key_number = rng.randrange(COMPACTED_KEYS) if topic in COMPACTED else -1
                        size = rng.choice((0, 10, 50, 200, 400))
                        payload = rng.randbytes(size) if rng.random() < 0.5 else bytes([seq % 251]) * size
                        value = encode_value(ledger.index, seq, payload)
                        key = compacted_key(key_number) if key_number >= 0 else None
                        ledger.target.append(target)
                        ledger.key.append(key_number)
                        ledger.status.append(PENDING)
                        ledger.offset.append(-1)
                        burst.append((seq, producer.send(topic, value, key=key, partition=partition)))
                    for seq, future in burst:
                        if not future.wait(120):
                            raise AssertionError(f"record {ledger.index}/{seq} neither acknowledged nor failed in 120 s")
                        error = future.exception()
                        if error is None:
                            ledger.status[seq] = ACKED
                            ledger.offset[seq] = future.result().offset
                        else:
                            # Only a request that never left whole is known not to be in the log.
                            ledger.status[seq] = NOT_APPENDED if isinstance(error, RequestNotSentError) else UNKNOWN
                            ledger.errors[type(error).__name__] += 1
        except BaseException as exc:  # reported by the loop: a producer must not die silently
            self.failure = exc


# -- observing the broker process ---------------------------------------------------------------


def read_status(pid: int) -> dict[str, int]:
    """VmHWM/VmRSS (KiB) from /proc/<pid>/status; empty once the process is gone."""
    out = {}
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith(("VmHWM:", "VmRSS:")):
                    name, value = line.split(":", 1)
                    out[name] = int(value.split()[0])
    except (FileNotFoundError, ProcessLookupError):
        pass
    return out


def count_fds(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except (FileNotFoundError, ProcessLookupError):
        return 0


def children_of(pid: int) -> list[int]:
    """Direct children (the cleaner's worker process), via /proc/<pid>/task/*/children."""
    out: list[int] = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                out.extend(int(c) for c in f.read().split())
    except (FileNotFoundError, ProcessLookupError):
        pass
    return out


def is_running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        return state not in ("Z", "X")
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


class ResourceSampler(threading.Thread):
    """Polls a process's VmHWM and open descriptors until it exits; keeps the peaks."""

    def __init__(self, pid: int, interval_s: float = 0.05):
        super().__init__(name=f"sampler-{pid}", daemon=True)
        self.pid = pid
        self.interval_s = interval_s
        self.peak_hwm_kib = 0
        self.peak_fds = 0
        self.children: set[int] = set()
        self._halted = threading.Event()

    def sample(self) -> None:
        hwm = read_status(self.pid).get("VmHWM", 0)
        self.peak_hwm_kib = max(self.peak_hwm_kib, hwm)
        self.peak_fds = max(self.peak_fds, count_fds(self.pid))
        self.children.update(children_of(self.pid))

    def run(self) -> None:
        while not self._halted.is_set() and is_running(self.pid):
            self.sample()
            self._halted.wait(self.interval_s)

    def halt(self) -> None:
        self._halted.set()
        self.join(5)


# -- kill moments --------------------------------------------------------------------------------

KILL_MODES = ("random", "roll", "startup", "clean", "random", "roll", "retention")
#: With the churn topic: "recreate" kills right after a re-created topic acknowledged its first
#: records, its previous generation having moved its log start offset and checkpointed it.
CHURN_KILL_MODES = ("random", "roll", "startup", "clean", "recreate", "roll", "retention")


def _files(data_dir: Path, suffixes: tuple[str, ...]) -> set[str]:
    found = set()
    try:
        partitions = list(os.scandir(data_dir))
    except FileNotFoundError:
        return found
    for partition in partitions:
        if not partition.is_dir():
            continue
        try:
            for entry in os.scandir(partition.path):
                if entry.name.endswith(suffixes):
                    found.add(f"{partition.name}/{entry.name}")
        except FileNotFoundError:
            continue
    return found


def wait_for_new_file(data_dir: Path, suffixes: tuple[str, ...], timeout_s: float,
                      alive: Callable[[], bool]) -> bool:
    """True as soon as a file with one of ``suffixes`` appears that was not there at the call."""
    before = _files(data_dir, suffixes)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and alive():
        if _files(data_dir, suffixes) - before:
            return True
        time.sleep(0.002)
    return False


# -- the checker ---------------------------------------------------------------------------------


@dataclass
class Counts:
    """What the checker found; every field but the first four must be 0."""

    acknowledged: int = 0  # acknowledged records (acks=-1 and acks=1)
    acknowledged_acks_all: int = 0
    unknown_outcome: int = 0  # the connection died after the request left: either way is fine
    unknown_present: int = 0  # ... of which the log holds this many
    expired: int = 0  # acknowledged, below the final log start offset of a retention topic: not lost
    superseded: int = 0  # acknowledged, removed by compaction after a later record of the key
    lost: int = 0  # acknowledged acks=-1 records missing
    lost_acks_1: int = 0  # acknowledged acks=1 records missing (a kill -9 keeps the page cache: 0 too)
    duplicated: int = 0  # a record id found more than once
    misplaced: int = 0  # an acknowledged record found at another offset, or in another partition
    not_appended_present: int = 0  # found although the client never sent its request whole
    corrupted: int = 0  # batches failing their CRC or decoding, values failing their checksum
    gaps: int = 0  # missing offsets between batches of non-compacted partitions
    disorder: int = 0  # offsets not increasing within a partition
    unreadable: list[str] = field(default_factory=list)  # partitions the checker could not read to the end
    # The topic deleted and re-created again and again (ChurnActor), each generation checked
    # before it is deleted: acknowledged (acks=-1), lost, and records of an earlier generation.
    churn_generations: int = 0
    churn_acknowledged: int = 0
    churn_lost: int = 0
    churn_resurrected: int = 0
    churn_unexpected: int = 0  # answers the churn actor's requests must not get (storage errors...)
    churn_log_start_jumps: int = 0  # produce answers with a log start offset nobody asked for

    def violations(self) -> dict[str, int]:
        bad = {name: getattr(self, name) for name in ("lost", "lost_acks_1", "duplicated", "misplaced",
                                                        "not_appended_present", "corrupted", "gaps", "disorder",
                                                        "churn_lost", "churn_resurrected", "churn_unexpected",
                                                        "churn_log_start_jumps")}
        bad["unreadable"] = len(self.unreadable)
        return {k: v for k, v in bad.items() if v}


@dataclass
class FoundRecord:
    offset: int
    producer: int
    seq: int
    key: bytes | None


@dataclass
class PartitionContents:
    records: list[FoundRecord] = field(default_factory=list)
    log_start_offset: int = 0
    high_watermark: int = 0
    corrupted: int = 0
    gaps: int = 0
    disorder: int = 0
    complete: bool = True
    problem: str = ""


def _fetch(client, topic: str, partition: int, offset: int) -> dict:
    request = m.FetchRequest(id=client.next_id(), max_wait_ms=0, min_bytes=0, max_bytes=4 << 20, topics=(
        m.FetchTopic(name=topic, partitions=(
            m.FetchPartition(partition=partition, fetch_offset=offset, partition_max_bytes=4 << 20),)),))
    return client.call(request)["topics"][0]["partitions"][0]


def read_partition(client, topic: str, partition: int, compacted: bool) -> PartitionContents:
    """Every record of one partition over the wire, checking batches, offsets and values."""
    out = PartitionContents()
    first = _fetch(client, topic, partition, 0)
    if first["error_code"] not in (ErrorCode.NONE, ErrorCode.OFFSET_OUT_OF_RANGE):
        return PartitionContents(complete=False, problem=f"fetch error {first['error_code']}: {first['error_message']}")
    out.log_start_offset, out.high_watermark = first["log_start_offset"], first["high_watermark"]
    offset = out.log_start_offset
    expected_next: int | None = None
    while offset < out.high_watermark:
        result = _fetch(client, topic, partition, offset)
        if result["error_code"] != ErrorCode.NONE:
            out.complete, out.problem = False, f"fetch at {offset}: {result['error_code']} {result['error_message']}"
            return out
        data = memoryview(result["records"])
        position, progressed = 0, False
        while len(data) - position >= LOG_OVERHEAD + 49:
            header = read_header(data, position)
            size = header.batch_length + LOG_OVERHEAD
            if size <= LOG_OVERHEAD or position + size > len(data):
                break  # a partial batch at the end of the response
            batch_bytes = data[position: position + size]
            position += size
            if header.next_offset <= offset:
                continue
            progressed = True
            previous_end = out.log_start_offset if expected_next is None else expected_next
            if not compacted and header.base_offset > previous_end:
                out.gaps += header.base_offset - previous_end
            if expected_next is not None and header.base_offset < expected_next:
                out.disorder += 1
            if header.next_offset > out.high_watermark:  # served past the high watermark
                out.disorder += 1
            expected_next = header.next_offset
            offset = header.next_offset
            try:
                batch = decode_batch(batch_bytes)
            except CorruptRecordError:
                out.corrupted += 1
                continue
            previous = None
            for index, record in enumerate(batch.records):
                if not compacted and record.offset != header.base_offset + index:
                    out.disorder += 1
                if previous is not None and record.offset <= previous:
                    out.disorder += 1
                previous = record.offset
                if record.offset < out.log_start_offset:
                    continue
                ident = decode_value(record.value)
                if ident is None:
                    out.corrupted += 1
                    continue
                out.records.append(FoundRecord(record.offset, ident[0], ident[1], record.key))
        if not progressed:
            out.complete, out.problem = False, f"no progress at offset {offset} (high watermark {out.high_watermark})"
            return out
    return out


def check(ledgers: list[ProducerLedger], contents: dict[tuple[str, int], PartitionContents]) -> Counts:
    counts = Counts()
    partitions = all_partitions()
    where: dict[tuple[int, int], list[tuple[int, int]]] = {}  # (producer, seq) -> [(target, offset)]
    for target, tp in enumerate(partitions):
        part = contents[tp]
        counts.corrupted += part.corrupted
        counts.gaps += part.gaps
        counts.disorder += part.disorder
        if not part.complete:
            counts.unreadable.append(f"{tp[0]}-{tp[1]}: {part.problem}")
        for found in part.records:
            if found.producer >= len(ledgers) or found.seq >= len(ledgers[found.producer]):
                counts.corrupted += 1  # an intact value we never sent
                continue
            where.setdefault((found.producer, found.seq), []).append((target, found.offset))
    # Compacted partitions: the highest acknowledged offset per key, and the highest offset present.
    latest_acked: dict[tuple[int, int], int] = {}
    latest_present: dict[tuple[int, int], int] = {}
    for ledger in ledgers:
        for seq in range(len(ledger)):
            target = ledger.target[seq]
            if partitions[target][0] in COMPACTED and ledger.status[seq] == ACKED:
                k = (target, ledger.key[seq])
                latest_acked[k] = max(latest_acked.get(k, -1), ledger.offset[seq])
    for (producer, seq), places in where.items():
        ledger = ledgers[producer]
        for target, offset in places:
            if partitions[target][0] in COMPACTED:
                k = (target, ledger.key[seq])
                latest_present[k] = max(latest_present.get(k, -1), offset)
    for ledger in ledgers:
        for seq in range(len(ledger)):
            status = ledger.status[seq]
            places = where.get((ledger.index, seq), ())
            if len(places) > 1:
                counts.duplicated += len(places) - 1
            target = ledger.target[seq]
            if any(t != target for t, _ in places):
                counts.misplaced += 1
            if status == UNKNOWN:
                counts.unknown_outcome += 1
                counts.unknown_present += bool(places)
            elif status == NOT_APPENDED:
                counts.not_appended_present += bool(places)
            elif status == ACKED:
                counts.acknowledged += 1
                counts.acknowledged_acks_all += ledger.spec.acks == -1
                offset = ledger.offset[seq]
                if places:
                    if places[0][1] != offset:
                        counts.misplaced += 1
                    continue
                topic, partition = partitions[target]
                part = contents[(topic, partition)]
                if offset < part.log_start_offset:
                    counts.expired += 1
                elif topic in COMPACTED and latest_present.get((target, ledger.key[seq]), -1) > offset:
                    counts.superseded += 1
                elif ledger.spec.acks == -1:
                    counts.lost += 1
                else:
                    counts.lost_acks_1 += 1
    return counts


def read_everything(broker: BrokerProcess) -> dict[tuple[str, int], PartitionContents]:
    client = broker.client()
    try:
        return {(topic, p): read_partition(client, topic, p, topic in COMPACTED) for topic, p in all_partitions()}
    finally:
        client.close()


# -- topic churn -----------------------------------------------------------------------------------

CHURN_TOPIC = "churn"
CHURN_PRODUCER = 255  # the producer number in the churn actor's values
CHURN_CONFIGS = {"segment.bytes": "4096", "retention.ms": "-1"}


def checkpoint_stamp(data_dir: Path) -> tuple | None:
    """Identity of the log-start-offset-checkpoint file: it changes whenever it is rewritten."""
    try:
        st = os.stat(data_dir / "log-start-offset-checkpoint")
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


class ChurnActor(threading.Thread):
    """Deletes and re-creates one topic again and again, over raw frames, while the loop kills.

    Each generation lives 1.2-2.5 s of serving time (across kills: a kill does not end it): it is
    created, takes acks=-1 batches, has its log start moved by delete_records after 30% of its
    life, and is read back and checked before that move and before it is deleted: every
    acknowledged record at or above the log start it set is there, nothing of an earlier
    generation is, and no produce answer shows a log start it did not ask for (issue 10, item 1:
    a re-created topic must not inherit its predecessor's checkpointed log start offset).
    """

    def __init__(self, port: int, seed: int, stop: threading.Event, data_dir: Path,
                 lifetime_s: tuple[float, float] = (1.2, 2.5)):
        super().__init__(name="crash-churn", daemon=True)
        self.port, self.stop, self.data_dir, self.lifetime_range_s = port, stop, data_dir, lifetime_s
        self.rng = random.Random(seed * 7919)
        self.seq_generation = array("I")  # seq -> generation
        self.generation = 0
        self.acked: list[tuple[int, int]] = []  # (offset, seq) of this generation
        self.log_starts: list[int] = []  # acknowledged delete_records low watermarks of this generation
        self.maybe_log_starts: list[int] = []  # delete_records whose answer was lost
        self.counts = Counts()
        self.failure: BaseException | None = None
        self.unexpected: Counter[str] = Counter()
        #: Set when a kill now tests the re-creation: see CHURN_KILL_MODES.
        self.ready_to_kill = threading.Event()
        self._client = None
        self._phase = "create"
        self._served_s = 0.0  # serving time of this generation so far
        self._lifetime_s = 0.0
        self._moved_at: float | None = None  # serving time when delete_records was acknowledged
        self._prechecked = False  # read back before the log start moves
        self._previous_checkpointed = False
        self._stamp_at_move: tuple | None = None
        #: The log start checkpoint file's identity when this generation's create was answered:
        #: unchanged at a kill means no periodic checkpoint ran between the re-creation and the kill.
        self.stamp_at_create: tuple | None = None

    def _call(self, request: m.Request) -> dict:
        if self._client is None:
            from .broker_process import WireClient

            self._client = WireClient("127.0.0.1", self.port, timeout_s=15)
        return self._client.call(request)

    def _drop(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def _expect(self, what: str, code: int, allowed: tuple[int, ...]) -> None:
        if code not in allowed:
            self.unexpected[f"{what}: error {code}"] += 1

    def run(self) -> None:
        try:
            while True:
                began = time.monotonic()
                try:
                    if self._step():
                        return
                except (OSError, ConnectionError):  # killed: the request's outcome is unknown
                    self._drop()
                    self.stop.wait(0.05)
                    continue
                self._served_s += time.monotonic() - began
        except BaseException as exc:
            self.failure = exc
        finally:
            self._drop()

    def _step(self) -> bool:
        """One request of the lifecycle; True when stopped and the last generation is checked."""
        if self._phase == "create":
            self.generation += 1
            self.acked, self.log_starts, self.maybe_log_starts = [], [], []
            self._served_s, self._moved_at, self._prechecked = 0.0, None, False
            self._lifetime_s = self.rng.uniform(*self.lifetime_range_s)
            self._phase = "creating"
        if self._phase == "creating":
            doc = self._call(m.CreateTopicsRequest(id=1, topics=(
                m.NewTopic(name=CHURN_TOPIC, num_partitions=1, replication_factor=1, configs=CHURN_CONFIGS),)))
            # Already there: an earlier attempt whose answer was lost did create it.
            self._expect("create", doc["topics"][0]["error_code"], (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS))
            self.stamp_at_create = checkpoint_stamp(self.data_dir)
            self._phase = "produce"
            return False
        if self._phase == "produce":
            if self.stop.is_set() or self._served_s >= self._lifetime_s:
                self._phase = "check"
                return False
            if self._moved_at is None and self._served_s >= 0.3 * self._lifetime_s and self.acked:
                if not self._prechecked:  # a loss before the move would hide below the new log start
                    self._check(count_generation=False)
                    self._prechecked = True
                    return False
                target = self.rng.choice(self.acked)[0]
                self.maybe_log_starts.append(target)
                doc = self._call(m.DeleteRecordsRequest(id=1, topics=(m.DeleteRecordsTopic(
                    name=CHURN_TOPIC, partitions=(m.DeleteRecordsPartition(partition=0, offset=target),)),)))
                result = doc["topics"][0]["partitions"][0]
                self._expect("delete_records", result["error_code"], (ErrorCode.NONE,))
                if result["error_code"] == ErrorCode.NONE:
                    self.log_starts.append(result["low_watermark"])
                    self._moved_at = self._served_s
                    self._stamp_at_move = checkpoint_stamp(self.data_dir)
                return False
            seqs, records = [], []
            now = int(time.time() * 1000)
            for i in range(self.rng.randint(1, 20)):
                seq = len(self.seq_generation)
                self.seq_generation.append(self.generation)
                seqs.append(seq)
                payload = struct.pack(">I", self.generation) + self.rng.randbytes(self.rng.choice((0, 20, 200)))
                records.append(Record(i, now, None, encode_value(CHURN_PRODUCER, seq, payload)))
            doc = self._call(m.ProduceRequest(id=1, acks=-1, timeout_ms=15_000, topics=(m.ProduceTopic(
                name=CHURN_TOPIC, partitions=(m.ProducePartition(partition=0, records=encode_batch(records)),)),)))
            result = doc["topics"][0]["partitions"][0]
            self._expect("produce", result["error_code"], (ErrorCode.NONE,))
            if result["error_code"] == ErrorCode.NONE:
                if result["log_start_offset"] > max([0, *self.log_starts, *self.maybe_log_starts]):
                    self.counts.churn_log_start_jumps += 1  # a log start this generation never asked for
                first = not self.acked
                self.acked += [(result["base_offset"] + i, seq) for i, seq in enumerate(seqs)]
                self.counts.churn_acknowledged += len(seqs)
                if first and self._previous_checkpointed:
                    self.ready_to_kill.set()
            return False
        if self._phase == "check":
            self._check()
            if self.stop.is_set():
                return True
            self._phase = "delete"
            return False
        # delete: then the next generation is created
        self.ready_to_kill.clear()
        # The predecessor's moved log start is in the checkpoint once the file was rewritten after
        # the move: what a re-created topic must not inherit.
        self._previous_checkpointed = self._moved_at is not None and \
            checkpoint_stamp(self.data_dir) != self._stamp_at_move
        doc = self._call(m.DeleteTopicsRequest(id=1, topics=(CHURN_TOPIC,)))
        self._expect("delete", doc["topics"][0]["error_code"], (ErrorCode.NONE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
        self._phase = "create"
        return False

    def _check(self, count_generation: bool = True) -> None:
        """Read the generation back (raises on a connection error: checked again after reconnecting).

        A record lost is counted once: it is dropped from ``acked`` when found missing."""
        if self._client is None:
            self._call(m.ApiVersionsRequest(id=1))
        contents = read_partition(self._client, CHURN_TOPIC, 0, compacted=False)
        if not contents.complete:
            self.unexpected[f"check: {contents.problem}"] += 1
        # The log start this generation may have: what we set, or a later request whose answer was lost.
        highest_allowed = max([0, *self.log_starts, *self.maybe_log_starts])
        present = {(r.offset, r.seq) for r in contents.records}
        for record in contents.records:
            if record.producer != CHURN_PRODUCER or record.seq >= len(self.seq_generation) \
                    or self.seq_generation[record.seq] != self.generation:
                self.counts.churn_resurrected += 1  # counted at each read: the precheck and the check
        kept = []
        for offset, seq in self.acked:
            if offset >= highest_allowed and (offset, seq) not in present:
                self.counts.churn_lost += 1
            else:
                kept.append((offset, seq))
        self.acked = kept
        self.counts.churn_generations += count_generation
        self.counts.corrupted += contents.corrupted
        self.counts.gaps += contents.gaps
        self.counts.disorder += contents.disorder


# -- the loop ------------------------------------------------------------------------------------


@dataclass
class CycleRecord:
    cycle: int
    mode: str
    triggered: bool
    served_s: float
    hwm_kib: int
    fds: int


@dataclass
class LoopResult:
    cycles: int = 0
    counts: Counts = field(default_factory=Counts)
    modes: Counter = field(default_factory=Counter)
    triggered: Counter = field(default_factory=Counter)
    peak_hwm_kib: int = 0
    peak_fds: int = 0
    orphans: int = 0  # broker children (the cleaner worker) still running 0.5 s after their broker was killed
    tracebacks: int = 0  # "Traceback" lines in the broker's log (all incarnations, and their children)
    churn_unexpected: dict = field(default_factory=dict)
    sent: int = 0
    producer_errors: Counter = field(default_factory=Counter)
    elapsed_s: float = 0.0
    history: list[CycleRecord] = field(default_factory=list)


def create_topics(bootstrap: str) -> None:
    from triolog.client import AdminClient, NewTopic

    with AdminClient(bootstrap) as admin:
        admin.create_topics([NewTopic(name, count, 1, configs) for name, count, configs in TOPICS])


def _reap_orphans(children: set[int], grace_s: float = 0.5) -> int:
    """Children of a killed broker (the cleaner's worker) still running ``grace_s`` after it died:
    counted, then killed (ours to end: started by the broker we started). A child that dies with
    its parent is gone at once."""
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(is_running(pid) for pid in children):
        time.sleep(0.01)
    orphans = 0
    for pid in children:
        if is_running(pid):
            orphans += 1
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    return orphans


def run_crash_loop(data_dir: Path, *, cycles: int, seed: int = 1, max_serve_s: float = 1.0,
                   producers: tuple[ProducerSpec, ...] = PRODUCERS, extra_overrides: tuple[str, ...] = (),
                   progress: Callable[[str], None] | None = None,
                   after_kill: Callable[[int, Path], None] | None = None, churn: bool = False,
                   churn_lifetime_s: tuple[float, float] = (1.2, 2.5),
                   modes: tuple[str, ...] | None = None) -> LoopResult:
    """Run ``cycles`` start/kill cycles under the workload, restart once more, drain and check.

    ``churn`` adds the topic deleted and re-created again and again (:class:`ChurnActor`, each
    generation living ``churn_lifetime_s``) and the ``recreate`` kill moment. ``modes`` replaces
    the cycle of kill moments. ``after_kill(cycle, data_dir)`` runs while the broker is down after
    each kill (the checker's own test uses it to damage the log as a broken broker would)."""
    rng = random.Random(seed)
    result = LoopResult()
    began = time.monotonic()
    broker = BrokerProcess(data_dir, BROKER_OVERRIDES + tuple(extra_overrides))
    stop = threading.Event()
    threads: list[WorkloadProducer] = []
    startup_s = 1.0  # refined from each observed start

    def observe_and_kill(sampler: ResourceSampler) -> None:
        sampler.sample()
        pid = broker.process.pid
        broker.kill()
        sampler.halt()
        result.peak_hwm_kib = max(result.peak_hwm_kib, sampler.peak_hwm_kib)
        result.peak_fds = max(result.peak_fds, sampler.peak_fds)
        result.orphans += _reap_orphans(sampler.children - {pid})
        if after_kill is not None and not stop.is_set():
            after_kill(len(result.history), data_dir)

    try:
        began_start = time.monotonic()
        broker.start()
        startup_s = time.monotonic() - began_start
        bootstrap = f"127.0.0.1:{broker.port}"
        create_topics(bootstrap)
        for index, spec in enumerate(producers):
            thread = WorkloadProducer(index, spec, bootstrap, seed, stop)
            threads.append(thread)
            thread.start()
        churner = ChurnActor(broker.port, seed, stop, data_dir, churn_lifetime_s) if churn else None
        if churner is not None:
            churner.start()
        modes = modes or (CHURN_KILL_MODES if churn else KILL_MODES)
        for cycle in range(cycles):
            mode = modes[cycle % len(modes)]
            result.modes[mode] += 1
            if cycle:
                if mode == "startup":
                    served, triggered, sampler = _kill_during_startup(broker, rng.uniform(0.0, startup_s))
                    result.triggered[mode] += triggered
                    observe_and_kill(sampler)
                    result.history.append(CycleRecord(cycle, mode, triggered, served, sampler.peak_hwm_kib,
                                                      sampler.peak_fds))
                    if progress:
                        progress(f"cycle {cycle + 1}/{cycles} {mode:9} {'hit ' if triggered else 'miss'}")
                    continue
                began_start = time.monotonic()
                broker.start(timeout_s=60)
                startup_s = 0.7 * startup_s + 0.3 * (time.monotonic() - began_start)
            sampler = ResourceSampler(broker.process.pid)
            sampler.start()
            served_from = time.monotonic()
            alive = lambda: broker.process.poll() is None  # noqa: E731
            if mode == "random":
                time.sleep(rng.uniform(0.05, max_serve_s))
                triggered = True
            elif mode == "roll":
                triggered = wait_for_new_file(data_dir, (".log",), max_serve_s * 2, alive)
            elif mode == "clean":
                triggered = wait_for_new_file(data_dir, (".cleaned", ".swap"), max_serve_s * 3, alive)
            elif mode == "recreate":
                churner.ready_to_kill.clear()
                triggered = churner.ready_to_kill.wait(max(max_serve_s * 5, churn_lifetime_s[1] * 3))
            else:  # retention
                triggered = wait_for_new_file(data_dir, (".deleted",), max_serve_s * 3, alive)
            if broker.process.poll() is not None:
                raise RuntimeError(f"the broker died by itself in cycle {cycle}:\n{broker.log_text()[-5000:]}")
            served = time.monotonic() - served_from
            observe_and_kill(sampler)
            if mode == "recreate" and triggered:  # a hit only if no checkpoint ran since the re-creation
                triggered = checkpoint_stamp(data_dir) == churner.stamp_at_create
            result.triggered[mode] += triggered
            result.history.append(CycleRecord(cycle, mode, triggered, served, sampler.peak_hwm_kib, sampler.peak_fds))
            if progress:
                acked = sum(t.ledger.status.count(ACKED) for t in threads)
                progress(f"cycle {cycle + 1}/{cycles} {mode:9} {'hit ' if triggered else 'miss'} served {served:.2f} s,"
                         f" acknowledged so far {acked}, VmHWM {sampler.peak_hwm_kib} KiB, fds {sampler.peak_fds}")
            for thread in threads + ([churner] if churner else []):
                if thread.failure is not None:
                    raise RuntimeError(f"{thread.name} failed") from thread.failure
        result.cycles = cycles
        # The last start recovers from the last kill; then the producers drain and stop.
        broker.start(timeout_s=60)
        sampler = ResourceSampler(broker.process.pid)
        sampler.start()
        stop.set()
        for thread in threads:
            thread.join(180)
            if thread.is_alive():
                raise RuntimeError(f"{thread.name} did not finish")
            if thread.failure is not None:
                raise RuntimeError(f"{thread.name} failed") from thread.failure
        if churner is not None:
            churner.join(120)
            if churner.is_alive() or churner.failure is not None:
                raise RuntimeError("the churn actor did not finish") from churner.failure
        contents = read_everything(broker)
        result.counts = check([t.ledger for t in threads], contents)
        if churner is not None:
            c, o = result.counts, churner.counts
            c.churn_generations, c.churn_acknowledged = o.churn_generations, o.churn_acknowledged
            c.churn_lost, c.churn_resurrected = o.churn_lost, o.churn_resurrected
            c.churn_unexpected = sum(churner.unexpected.values())
            c.churn_log_start_jumps = o.churn_log_start_jumps
            c.corrupted, c.gaps, c.disorder = c.corrupted + o.corrupted, c.gaps + o.gaps, c.disorder + o.disorder
            result.churn_unexpected = dict(churner.unexpected)
        result.sent = sum(len(t.ledger) for t in threads)
        for thread in threads:
            result.producer_errors.update(thread.ledger.errors)
        stop.set()
        observe_and_kill(sampler)
        result.tracebacks = broker.log_text().count("Traceback (most recent call last)")
    finally:
        stop.set()
        broker.kill()
    result.elapsed_s = time.monotonic() - began
    return result


def _kill_during_startup(broker: BrokerProcess, delay_s: float) -> tuple[float, bool, ResourceSampler]:
    """Start the broker and SIGKILL it ``delay_s`` after exec; True if it had not yet started."""
    broker.process = None
    outcome: list[BaseException | None] = []

    def start() -> None:
        try:
            broker.start(timeout_s=60)
            outcome.append(None)
        except BaseException as exc:  # the kill makes start() raise "broker exited with -9"
            outcome.append(exc)

    starter = threading.Thread(target=start, daemon=True)
    starter.start()
    deadline = time.monotonic() + 30
    while broker.process is None:
        if time.monotonic() > deadline:
            raise RuntimeError("the broker process was not spawned")
        time.sleep(0.001)
    sampler = ResourceSampler(broker.process.pid, interval_s=0.01)
    sampler.start()
    time.sleep(delay_s)
    started = bool(outcome) and outcome[0] is None
    if broker.process.poll() is not None:  # it exited before our kill: a failed recovery
        starter.join(30)
        raise RuntimeError(f"the broker exited by itself during startup ({broker.process.returncode}):\n"
                           f"{broker.log_text()[-5000:]}")
    broker.kill()
    starter.join(30)
    return delay_s, not started, sampler


def format_result(result: LoopResult) -> str:
    c = result.counts
    lines = [
        f"cycles:                    {result.cycles} ({', '.join(f'{m} {n}' for m, n in sorted(result.modes.items()))})",
        f"kill moments hit:          {', '.join(f'{m} {result.triggered[m]}/{n}' for m, n in sorted(result.modes.items()))}",
        f"records sent:              {result.sent}",
        f"acknowledged records:      {c.acknowledged} (acks=-1: {c.acknowledged_acks_all})",
        f"unknown outcome:           {c.unknown_outcome} (present in the log: {c.unknown_present})",
        f"expired by retention:      {c.expired}   superseded by compaction: {c.superseded}",
        f"lost (acks=-1):            {c.lost}",
        f"lost (acks=1):             {c.lost_acks_1}",
        f"duplicated:                {c.duplicated}",
        f"corrupted:                 {c.corrupted}",
        f"gaps:                      {c.gaps}",
        f"misplaced / disorder:      {c.misplaced} / {c.disorder}",
        f"present, never sent whole: {c.not_appended_present}",
        f"churned topic:             {c.churn_generations} generations checked, {c.churn_acknowledged} acknowledged,"
        f" {c.churn_lost} lost, {c.churn_resurrected} from an earlier generation,"
        f" {c.churn_log_start_jumps} log start jumps,"
        f" {c.churn_unexpected} unexpected answers {result.churn_unexpected or ''}",
        f"unreadable partitions:     {len(c.unreadable)} {c.unreadable if c.unreadable else ''}",
        f"peak RSS (VmHWM):          {result.peak_hwm_kib / 1024:.1f} MiB",
        f"fds at peak:               {result.peak_fds}",
        f"orphaned children:         {result.orphans} (broker children alive 0.5 s after the broker was killed)",
        f"tracebacks in broker log:  {result.tracebacks}",
        f"producer errors:           {dict(result.producer_errors)}",
        f"elapsed:                   {result.elapsed_s:.1f} s",
    ]
    return "\n".join(lines)
