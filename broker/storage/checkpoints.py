"""Kafka's small text files next to the logs: offset checkpoints, the leader-epoch checkpoint and
its cache, ``meta.properties`` and the clean-shutdown marker, in Kafka's formats.

Every file is replaced whole and atomically (:func:`atomic_write`): a crash leaves either the old
or the new content, never a mix, and at worst a stray ``<name>.tmp`` that readers ignore.

Synchronous on purpose: callers (the log manager's checkpoint tasks, partition code) already run
storage work off the event loop and serialise access per file.
"""

from __future__ import annotations

import base64
import datetime
import json
import os
import re
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from triolog.broker.storage.errors import CorruptCheckpointError
from triolog.broker.storage.fs import OS_FS, FileSystem, read_file
from triolog.protocol.properties import parse_properties

__all__ = [
    "CLEANER_OFFSET_CHECKPOINT",
    "CLEAN_SHUTDOWN_FILE",
    "LEADER_EPOCH_CHECKPOINT",
    "LOG_START_OFFSET_CHECKPOINT",
    "META_PROPERTIES",
    "RECOVERY_POINT_CHECKPOINT",
    "REPLICATION_OFFSET_CHECKPOINT",
    "UNDEFINED_EPOCH",
    "UNDEFINED_EPOCH_OFFSET",
    "CleanShutdownFile",
    "EpochEntry",
    "LeaderEpochCheckpointFile",
    "LeaderEpochFileCache",
    "MetaProperties",
    "OffsetCheckpointFile",
    "atomic_write",
    "fsync_dir",
    "random_kafka_uuid",
    "read_partition_topic_id",
    "write_partition_topic_id",
]

# File names, as Kafka's.
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
META_PROPERTIES = "meta.properties"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"

#: OffsetsForLeaderEpoch's "no such epoch" answer, for both fields.
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1

_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


# --------------------------------------------------------------------------------------------
# Durable whole-file replacement


def fsync_dir(path: str | os.PathLike[str], fs: FileSystem = OS_FS) -> None:
    """Make a directory's entries (a rename, a create, an unlink) durable."""
    fs.fsync_dir(path)


def atomic_write(path: str | os.PathLike[str], data: bytes, fs: FileSystem = OS_FS, *, mode: int = 0o644) -> None:
    """Replace ``path`` with ``data`` so that a crash leaves the old or the new file, whole.

    Kafka's protocol: write ``<path>.tmp``, flush and fsync it, rename it over the target, then
    fsync the parent directory so the rename itself survives a power loss. A failure (a full
    disk) leaves the old file as it was and removes the temporary one. ``mode``: the new file's
    permissions, from its creation on (a secret's 0600 is never preceded by a wider mode: a
    temporary file left by a crash is removed, not reused).
    """
    target = Path(path)
    tmp = target.with_name(target.name + ".tmp")
    if mode != 0o644:
        try:
            fs.unlink(tmp)
        except FileNotFoundError:
            pass
    try:
        fd = fs.open(tmp, os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if mode == 0o644 else os.O_EXCL), mode)
        try:
            view = memoryview(data)
            position = 0
            while position < len(view):
                position += fs.pwrite(fd, view[position:], position)
            fs.fsync(fd)
        finally:
            fs.close(fd)
        fs.replace(tmp, target)
    except BaseException:
        try:
            fs.unlink(tmp)
        except OSError:
            pass
        raise
    fs.fsync_dir(target.absolute().parent)


# --------------------------------------------------------------------------------------------
# Generic text checkpoint: "<version>\n<count>\n<entry>\n"*count

_JAVA_INT = re.compile(r"[+-]?[0-9]+")
# Java's readLine() ends a line at \n, \r or \r\n; Java's \s is [ \t\n\x0B\f\r].
_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_JAVA_WHITESPACE = re.compile(r"[ \t\n\x0b\f\r]+")
_JAVA_WHITESPACE_CHAR = re.compile(r"[ \t\n\x0b\f\r]")


def _java_int(text: str, lo: int, hi: int) -> int | None:
    """Integer.parseInt / Long.parseLong: optional sign, digits only, in range; else None."""
    if not _JAVA_INT.fullmatch(text):
        return None
    value = int(text)
    return value if lo <= value <= hi else None


def _split_fields(line: str) -> list[str]:
    """Java's ``Pattern.compile("\\s+").split(line)``: a leading separator yields an empty first
    field, trailing empty fields are dropped."""
    fields = _JAVA_WHITESPACE.split(line)
    while fields and fields[-1] == "":
        fields.pop()
    return fields


class _CheckpointFile:
    """Shared reader/writer; subclasses say how one entry line looks."""

    VERSION = 0

    def __init__(self, path: str | os.PathLike[str], fs: FileSystem = OS_FS) -> None:
        self.path = Path(path)
        self.fs = fs
        # As Kafka's CheckpointFile: the file exists (empty) from the moment it is opened.
        try:
            fs.close(fs.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
        except FileExistsError:
            pass

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self.path)!r})"

    # Subclass hooks -------------------------------------------------------------------------
    def _format_entry(self, entry: object) -> str:
        raise NotImplementedError

    def _parse_entry(self, fields: list[str]) -> object | None:
        raise NotImplementedError

    # ----------------------------------------------------------------------------------------
    def _write_entries(self, entries: Sequence[object]) -> None:
        parts = [f"{self.VERSION}\n{len(entries)}\n"]
        parts.extend(self._format_entry(e) + "\n" for e in entries)
        atomic_write(self.path, "".join(parts).encode("utf-8"), self.fs)

    def _corrupt(self, lineno: int, what: str) -> CorruptCheckpointError:
        return CorruptCheckpointError(f"checkpoint file {self.path}, line {lineno}: {what}")

    def _read_entries(self) -> list[object]:
        """Parse the file. OSError (e.g. the file vanished) propagates: that is an I/O failure of
        the log dir, not a corrupt checkpoint."""
        raw = read_file(self.fs, self.path)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise CorruptCheckpointError(f"checkpoint file {self.path}: not UTF-8 ({e})") from None
        if text == "":
            return []
        lines = _LINE_BREAK.split(text)
        if lines[-1] == "":  # the terminator of the last line does not start another line
            lines.pop()

        version = _java_int(lines[0], _INT32_MIN, _INT32_MAX)
        if version is None:
            raise self._corrupt(1, f"malformed version line {lines[0]!r}")
        if version != self.VERSION:
            raise self._corrupt(1, f"unrecognised version {version}, expected {self.VERSION}")
        if len(lines) < 2:
            return []
        count = _java_int(lines[1], _INT32_MIN, _INT32_MAX)
        if count is None:
            raise self._corrupt(2, f"malformed entry count {lines[1]!r}")
        if count < 0:
            raise self._corrupt(2, f"negative entry count {count}")

        entries = []
        for lineno, line in enumerate(lines[2:], start=3):
            entry = self._parse_entry(_split_fields(line))
            if entry is None:
                raise self._corrupt(lineno, f"malformed entry {line!r}")
            entries.append(entry)
        if len(entries) != count:
            raise CorruptCheckpointError(
                f"checkpoint file {self.path}: expected {count} entries but found {len(entries)}"
            )
        return entries


class OffsetCheckpointFile(_CheckpointFile):
    """A log dir's per-partition offsets (recovery point, log start, high watermark, cleaner
    first-dirty offset): lines ``<topic> <partition> <offset>``."""

    VERSION = 0

    def write(self, offsets: Mapping[tuple[str, int], int]) -> None:
        """Replace the file with ``offsets``, in the mapping's iteration order."""
        for (topic, partition), offset in offsets.items():
            if not topic or _JAVA_WHITESPACE_CHAR.search(topic):
                raise ValueError(f"topic name {topic!r} cannot be stored in a checkpoint")
            if not (_INT32_MIN <= partition <= _INT32_MAX and _INT64_MIN <= offset <= _INT64_MAX):
                raise ValueError(f"partition/offset out of range: {topic} {partition} {offset}")
        self._write_entries(list(offsets.items()))

    def read(self) -> dict[tuple[str, int], int]:
        """The stored offsets; a partition listed twice keeps its last offset (as Kafka's HashMap)."""
        return dict(self._read_entries())  # type: ignore[arg-type]

    def _format_entry(self, entry: Any) -> str:
        (topic, partition), offset = entry
        return f"{topic} {int(partition)} {int(offset)}"

    def _parse_entry(self, fields: list[str]) -> object | None:
        if len(fields) != 3 or fields[0] == "":
            return None
        partition = _java_int(fields[1], _INT32_MIN, _INT32_MAX)
        offset = _java_int(fields[2], _INT64_MIN, _INT64_MAX)
        if partition is None or offset is None:
            return None
        return ((fields[0], partition), offset)


class EpochEntry(NamedTuple):
    epoch: int
    start_offset: int


class LeaderEpochCheckpointFile(_CheckpointFile):
    """A partition dir's ``leader-epoch-checkpoint``: lines ``<epoch> <start_offset>``, ascending."""

    VERSION = 0

    def write(self, entries: Iterable[EpochEntry]) -> None:
        entries = [EpochEntry(int(e), int(o)) for e, o in entries]
        for e, o in entries:
            if not (_INT32_MIN <= e <= _INT32_MAX and _INT64_MIN <= o <= _INT64_MAX):
                raise ValueError(f"epoch entry out of range: {e} {o}")
        self._write_entries(entries)

    def read(self) -> list[EpochEntry]:
        return self._read_entries()  # type: ignore[return-value]

    def _format_entry(self, entry: Any) -> str:
        epoch, start_offset = entry
        return f"{epoch} {start_offset}"

    def _parse_entry(self, fields: list[str]) -> object | None:
        if len(fields) != 2:
            return None
        epoch = _java_int(fields[0], _INT32_MIN, _INT32_MAX)
        start_offset = _java_int(fields[1], _INT64_MIN, _INT64_MAX)
        if epoch is None or start_offset is None:
            return None
        return EpochEntry(epoch, start_offset)


# --------------------------------------------------------------------------------------------
# Leader epoch cache


class LeaderEpochFileCache:
    """Kafka's epoch -> first offset map for one replica, kept ascending in both fields.

    Every change is written through to the checkpoint synchronously (Kafka flushes truncations
    asynchronously; we have no scheduler and prefer the file never to lag). Not thread-safe: the
    owning log serialises calls.
    """

    def __init__(self, checkpoint: LeaderEpochCheckpointFile) -> None:
        self.checkpoint = checkpoint
        self._entries: list[EpochEntry] = []
        # Replay through the assign rules, as Kafka does: a file with non-monotonic entries loads
        # as the monotonic suffix the rules produce. Not written back until the next change.
        for entry in checkpoint.read():
            if entry.epoch < 0 or entry.start_offset < 0:
                raise CorruptCheckpointError(
                    f"checkpoint file {checkpoint.path}: invalid leader epoch entry {tuple(entry)}"
                )
            self._assign(entry)

    def __repr__(self) -> str:
        return f"LeaderEpochFileCache({self.checkpoint.path}, {self._entries})"

    # Queries --------------------------------------------------------------------------------
    @property
    def entries(self) -> list[EpochEntry]:
        """A copy of the entries, ascending."""
        return list(self._entries)

    @property
    def latest_entry(self) -> EpochEntry | None:
        return self._entries[-1] if self._entries else None

    @property
    def latest_epoch(self) -> int | None:
        return self._entries[-1].epoch if self._entries else None

    @property
    def earliest_entry(self) -> EpochEntry | None:
        return self._entries[0] if self._entries else None

    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch the record at ``offset`` was written in: the last entry starting at or before
        it; None when the offset precedes every entry (or the cache is empty)."""
        found = None
        for epoch, start in self._entries:
            if start > offset:
                break
            found = epoch
        return found

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """OffsetsForLeaderEpoch: (largest epoch <= requested, start offset of the next epoch), the
        log end offset for the latest epoch, (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET) if unknown."""
        if requested_epoch == UNDEFINED_EPOCH or not self._entries:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if self._entries[-1].epoch == requested_epoch:
            return requested_epoch, log_end_offset
        higher = next((e for e in self._entries if e.epoch > requested_epoch), None)
        if higher is None:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        floor = None
        for e in self._entries:
            if e.epoch > requested_epoch:
                break
            floor = e
        if floor is None:
            # Older epochs were truncated away; point the follower at the first epoch we know.
            return requested_epoch, higher.start_offset
        return floor.epoch, higher.start_offset

    # Changes --------------------------------------------------------------------------------
    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that ``epoch`` starts at ``start_offset``. Returns whether anything changed.

        A no-op when ``epoch`` is the latest epoch and ``start_offset`` is not below its start.
        Otherwise trailing entries with epoch >= ``epoch`` or start >= ``start_offset`` are
        dropped first (so a lower epoch truncates, and the same epoch at a lower offset moves).
        """
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"invalid leader epoch entry ({epoch}, {start_offset})")
        with self._changing():
            changed = self._assign(EpochEntry(epoch, start_offset))
            if changed:
                self._persist()
        return changed

    def _assign(self, entry: EpochEntry) -> bool:
        latest = self.latest_entry
        if latest is not None and entry.epoch == latest.epoch and entry.start_offset >= latest.start_offset:
            return False
        while self._entries and (
            self._entries[-1].epoch >= entry.epoch or self._entries[-1].start_offset >= entry.start_offset
        ):
            self._entries.pop()
        self._entries.append(entry)
        return True

    def truncate_from_end(self, end_offset: int) -> bool:
        """Log truncated to ``end_offset``: drop every entry starting at or after it."""
        if end_offset < 0:
            return False
        removed = False
        with self._changing():
            while self._entries and self._entries[-1].start_offset >= end_offset:
                self._entries.pop()
                removed = True
            if removed:
                self._persist()
        return removed

    def truncate_from_start(self, start_offset: int) -> bool:
        """Log start advanced to ``start_offset``: drop entries wholly before it; the entry that
        covers ``start_offset`` stays, its start moved up to ``start_offset``."""
        before = list(self._entries)
        with self._changing():
            covering: EpochEntry | None = None
            while self._entries and self._entries[0].start_offset <= start_offset:
                covering = self._entries.pop(0)
            if covering is not None:
                self._entries.insert(0, EpochEntry(covering.epoch, start_offset))
            # Kafka flushes whenever it popped an entry, even one it re-adds unchanged; we write
            # only when the content differs.
            if self._entries == before:
                return False
            self._persist()
        return True

    def clear(self) -> bool:
        """Forget every epoch (an append of a pre-v2 batch does this)."""
        if not self._entries:
            return False
        with self._changing():
            self._entries.clear()
            self._persist()
        return True

    def _persist(self) -> None:
        self.checkpoint.write(self._entries)

    def _changing(self):
        """Undo the in-memory change when the file cannot be written (a full disk): the cache
        never says more than its checkpoint."""
        return _Rollback(self)


class _Rollback:
    def __init__(self, cache: LeaderEpochFileCache) -> None:
        self.cache = cache

    def __enter__(self) -> None:
        self.saved = list(self.cache._entries)

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self.cache._entries[:] = self.saved


# --------------------------------------------------------------------------------------------
# Kafka Uuid (base64 form)


def random_kafka_uuid() -> str:
    """Kafka's ``Uuid.randomUuid().toString()``: a random version-4 UUID as 22 URL-safe base64
    chars without padding; never the reserved 0 or 1 UUID, never starting with '-'."""
    while True:
        raw = uuid.uuid4().bytes
        text = base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")
        if int.from_bytes(raw, "big") > 1 and not text.startswith("-"):
            return text


def _parse_kafka_uuid(text: str) -> bytes | None:
    """``Uuid.fromString``: URL-safe base64 of exactly 16 bytes (padding optional), else None."""
    if len(text) > 24 or not re.fullmatch(r"[A-Za-z0-9_-]*={0,2}", text):
        return None
    stripped = text.rstrip("=")
    try:
        raw = base64.urlsafe_b64decode(stripped + "=" * (-len(stripped) % 4))
    except ValueError:
        return None
    return raw if len(raw) == 16 else None


# --------------------------------------------------------------------------------------------
# partition.metadata (Kafka's PartitionMetadataFile)

PARTITION_METADATA_FILE = "partition.metadata"


def read_partition_topic_id(directory: str | os.PathLike[str]) -> str | None:
    """The topic id a partition directory was made for (Kafka's ``partition.metadata``: a
    ``version: 0`` line and a ``topic_id: <uuid>`` line); None without the file or a readable id."""
    try:
        text = Path(directory, PARTITION_METADATA_FILE).read_text("utf-8")
    except (FileNotFoundError, UnicodeDecodeError):
        return None
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if len(lines) != 2 or lines[0] != "version: 0" or not lines[1].startswith("topic_id: "):
        return None
    topic_id = lines[1][len("topic_id: ") :].strip()
    return topic_id if _parse_kafka_uuid(topic_id) is not None else None


def write_partition_topic_id(directory: str | os.PathLike[str], topic_id: str, fs: FileSystem = OS_FS) -> None:
    """Record, durably, which topic (by id) a partition directory belongs to: a topic deleted and
    made again under its name while this broker was away is then told from the new one."""
    if _parse_kafka_uuid(topic_id) is None:
        raise ValueError(f"not a Kafka topic id: {topic_id!r}")
    atomic_write(Path(directory, PARTITION_METADATA_FILE), f"version: 0\ntopic_id: {topic_id}\n".encode(), fs)


# --------------------------------------------------------------------------------------------
# meta.properties (Java properties file)

_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def _java_date_now() -> str:
    """``new Date().toString()``: ``EEE MMM dd HH:mm:ss zzz yyyy`` in English, local time."""
    now = datetime.datetime.now().astimezone()
    return (
        f"{_DAYS[now.weekday()]} {_MONTHS[now.month - 1]} {now.day:02d} "
        f"{now:%H:%M:%S} {now.tzname() or time.tzname[0]} {now.year}"
    )


def _properties_escape(text: str, *, is_key: bool) -> str:
    """Properties.store's escaping; non-ASCII becomes \\uXXXX so any Java reader decodes it."""
    out = []
    for i, ch in enumerate(text):
        if ch == " ":
            out.append("\\ " if is_key or i == 0 else " ")
        elif ch in "\\=:#!":
            out.append("\\" + ch)
        elif ch in "\t\n\r\f":
            out.append({"\t": "\\t", "\n": "\\n", "\r": "\\r", "\f": "\\f"}[ch])
        elif ord(ch) < 0x20 or ord(ch) > 0x7E:
            out.extend(f"\\u{unit:04X}" for unit in _utf16_units(ch))
        else:
            out.append(ch)
    return "".join(out)


def _utf16_units(ch: str) -> list[int]:
    data = ch.encode("utf-16-be")
    return [int.from_bytes(data[i : i + 2], "big") for i in range(0, len(data), 2)]


@dataclass(frozen=True, kw_only=True)
class MetaProperties:
    """A KRaft log dir's identity (``meta.properties`` version 1, KIP-858).

    ``directory_id`` is None only for files written before directory ids existed (Kafka 3.3-3.6);
    the caller then generates one and rewrites the file, as Kafka does.
    """

    version: int = 1
    cluster_id: str
    node_id: int
    directory_id: str | None

    def __post_init__(self) -> None:
        if self.version != 1:
            raise ValueError(f"only meta.properties version 1 is supported, not {self.version}")
        if not isinstance(self.cluster_id, str) or not self.cluster_id:
            raise ValueError(f"cluster_id must be a non-empty string, not {self.cluster_id!r}")
        if isinstance(self.node_id, bool) or not isinstance(self.node_id, int):
            raise ValueError(f"node_id must be an int, not {self.node_id!r}")
        if not _INT32_MIN <= self.node_id <= _INT32_MAX:
            raise ValueError(f"node_id {self.node_id} does not fit a Java int")
        if self.directory_id is not None and _parse_kafka_uuid(self.directory_id) is None:
            raise ValueError(f"directory_id {self.directory_id!r} is not a Kafka Uuid")

    def to_properties(self) -> dict[str, str]:
        props = {
            "version": str(self.version),
            "cluster.id": self.cluster_id,
            "node.id": str(self.node_id),
        }
        if self.directory_id is not None:
            props["directory.id"] = self.directory_id
        return props

    def write(self, log_dir: str | os.PathLike[str], fs: FileSystem = OS_FS) -> None:
        """Write ``<log_dir>/meta.properties`` atomically, keys sorted (as Java 18+ stores)."""
        lines = ["#", "#" + _java_date_now()]
        for key, value in sorted(self.to_properties().items()):
            lines.append(f"{_properties_escape(key, is_key=True)}={_properties_escape(value, is_key=False)}")
        atomic_write(Path(log_dir) / META_PROPERTIES, ("\n".join(lines) + "\n").encode("ascii"), fs)

    @classmethod
    def read(cls, log_dir: str | os.PathLike[str], fs: FileSystem = OS_FS) -> MetaProperties | None:
        """The dir's identity; None if there is no ``meta.properties``.

        CorruptCheckpointError if it does not parse or is not a version-1 (KRaft) file: a
        ZooKeeper-era version 0 file has to be migrated by Kafka's tooling first.
        """
        path = Path(log_dir) / META_PROPERTIES
        try:
            raw = read_file(fs, path)
        except FileNotFoundError:
            return None

        def corrupt(what: str) -> CorruptCheckpointError:
            return CorruptCheckpointError(f"{path}: {what}")

        try:
            # Java's Properties.load(InputStream) reads ISO-8859-1.
            props = parse_properties(raw.decode("latin-1"))
        except ValueError as e:
            raise corrupt(str(e)) from None
        version_text = props.get("version", "0")
        version = _java_int(version_text, _INT32_MIN, _INT32_MAX)
        if version is None:
            raise corrupt(f"malformed version {version_text!r}")
        if version != 1:
            raise corrupt(f"unsupported meta.properties version {version} (only 1, KRaft, is supported)")
        if "cluster.id" not in props:
            raise corrupt("cluster.id was not found")
        if "node.id" not in props:
            raise corrupt("node.id was not found")
        node_id = _java_int(props["node.id"], _INT32_MIN, _INT32_MAX)
        if node_id is None:
            raise corrupt(f"unable to read node.id {props['node.id']!r} as a base-10 number")
        directory_id = props.get("directory.id")
        if directory_id is not None and _parse_kafka_uuid(directory_id) is None:
            raise corrupt(f"unable to read directory.id {directory_id!r} as a Uuid")
        try:
            return cls(version=1, cluster_id=props["cluster.id"], node_id=node_id, directory_id=directory_id)
        except ValueError as e:
            raise corrupt(str(e)) from None


# --------------------------------------------------------------------------------------------
# Clean shutdown marker


class CleanShutdownFile:
    """``<log_dir>/.kafka_cleanshutdown``: present only while the dir is cleanly stopped.

    Written last on shutdown, deleted first on startup before any log is loaded (KAFKA-10471),
    so a crash while loading counts as unclean.

    Content is what Kafka's CleanShutdownFileHandler writes, a Jackson dump of a
    HashMap<String, String>: ``{"broker_epoch":"<n>","version":"0"}`` (string values, that key
    order). Readers also accept numeric values, ``brokerEpoch``, and the empty file older brokers
    left (epoch -1).
    """

    VERSION = 0

    def __init__(self, log_dir: str | os.PathLike[str], fs: FileSystem = OS_FS) -> None:
        self.log_dir = Path(log_dir)
        self.path = self.log_dir / CLEAN_SHUTDOWN_FILE
        self.fs = fs

    def __repr__(self) -> str:
        return f"CleanShutdownFile({str(self.path)!r})"

    def exists(self) -> bool:
        return self.fs.exists(self.path)

    def write(self, broker_epoch: int = 0) -> None:
        if isinstance(broker_epoch, bool) or not _INT64_MIN <= int(broker_epoch) <= _INT64_MAX:
            raise ValueError(f"broker epoch {broker_epoch!r} does not fit a Java long")
        body = f'{{"broker_epoch":"{int(broker_epoch):d}","version":"{self.VERSION:d}"}}'
        atomic_write(self.path, body.encode("utf-8"), self.fs)

    def read_broker_epoch(self) -> int:
        """The broker epoch stored at shutdown; -1 when unknown (legacy empty file, no epoch,
        unreadable content or no file). Like Kafka this never raises: the epoch is a hint for
        broker registration, while the file's existence is what decides recovery."""
        try:
            text = read_file(self.fs, self.path).decode("utf-8")
            content = json.loads(text) if text.strip() else {}
        except (OSError, ValueError):
            return -1
        if not isinstance(content, dict):
            return -1
        value = content.get("broker_epoch", content.get("brokerEpoch"))
        if isinstance(value, bool):
            return -1
        if isinstance(value, int):
            epoch: int | None = value if _INT64_MIN <= value <= _INT64_MAX else None
        elif isinstance(value, str):
            epoch = _java_int(value, _INT64_MIN, _INT64_MAX)
        else:
            epoch = None
        return -1 if epoch is None else epoch

    def delete(self) -> None:
        """Remove the marker durably (directory fsynced): if the unlink were lost in a power cut
        during log loading, the next start would wrongly skip recovery."""
        try:
            self.fs.unlink(self.path)
        except FileNotFoundError:
            return
        self.fs.fsync_dir(self.log_dir)
