"""Checkpoint and metadata files: exact bytes as Kafka writes them, crash safety, corrupt input,
and the leader-epoch cache rules."""

from __future__ import annotations

import base64
import os
import re
import stat
import tempfile
import uuid
from types import SimpleNamespace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from triolog.broker.storage import checkpoints
from triolog.broker.storage.fs import OsFileSystem
from triolog.broker.storage.checkpoints import (
    CLEAN_SHUTDOWN_FILE,
    CLEANER_OFFSET_CHECKPOINT,
    LEADER_EPOCH_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    META_PROPERTIES,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    UNDEFINED_EPOCH,
    UNDEFINED_EPOCH_OFFSET,
    CleanShutdownFile,
    EpochEntry,
    LeaderEpochCheckpointFile,
    LeaderEpochFileCache,
    MetaProperties,
    OffsetCheckpointFile,
    atomic_write,
    random_kafka_uuid,
)
from triolog.broker.storage.errors import CorruptCheckpointError

E = EpochEntry


def _no_tmp_files(directory: Path) -> bool:
    return not any(p.name.endswith(".tmp") for p in directory.iterdir())


class _WriteCounter:
    """Wraps a LeaderEpochCheckpointFile's write to count how often the cache persists."""

    def __init__(self, checkpoint: LeaderEpochCheckpointFile, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        real = checkpoint.write

        def counting(entries):
            self.count += 1
            real(entries)

        monkeypatch.setattr(checkpoint, "write", counting)


def _cache_with(tmp_path: Path, *entries: tuple[int, int]) -> LeaderEpochFileCache:
    checkpoint = LeaderEpochCheckpointFile(tmp_path / LEADER_EPOCH_CHECKPOINT)
    checkpoint.write([E(*e) for e in entries])
    return LeaderEpochFileCache(checkpoint)


def _epoch_file(tmp_path: Path) -> bytes:
    return (tmp_path / LEADER_EPOCH_CHECKPOINT).read_bytes()


# --------------------------------------------------------------------------------------------
# File names and atomic_write


def test_constants_file_names_match_kafka():
    assert RECOVERY_POINT_CHECKPOINT == "recovery-point-offset-checkpoint"
    assert LOG_START_OFFSET_CHECKPOINT == "log-start-offset-checkpoint"
    assert REPLICATION_OFFSET_CHECKPOINT == "replication-offset-checkpoint"
    assert CLEANER_OFFSET_CHECKPOINT == "cleaner-offset-checkpoint"
    assert LEADER_EPOCH_CHECKPOINT == "leader-epoch-checkpoint"
    assert META_PROPERTIES == "meta.properties"
    assert CLEAN_SHUTDOWN_FILE == ".kafka_cleanshutdown"


def test_atomic_write_replaces_content_and_leaves_no_tmp(tmp_path):
    target = tmp_path / "f"
    atomic_write(target, b"first")
    atomic_write(target, b"second")
    assert target.read_bytes() == b"second"
    assert _no_tmp_files(tmp_path)


class _RecordingFs(OsFileSystem):
    """The real file system, noting the calls that decide durability (or failing a rename)."""

    def __init__(self, fail_replace: str | None = None):
        self.events: list[str] = []
        self.fail_replace = fail_replace

    def fsync(self, fd):
        self.events.append("fsync-dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "fsync-file")
        os.fsync(fd)

    def fsync_dir(self, path):
        self.events.append("fsync-dir")
        super().fsync_dir(path)

    def replace(self, src, dst):
        if self.fail_replace:
            raise OSError(self.fail_replace)
        self.events.append("rename")
        os.replace(src, dst)


def test_atomic_write_fsyncs_file_then_renames_then_fsyncs_dir(tmp_path):
    fs = _RecordingFs()
    atomic_write(tmp_path / "f", b"data", fs)
    assert fs.events == ["fsync-file", "rename", "fsync-dir"]


def test_atomic_write_failed_rename_keeps_old_content_and_removes_tmp(tmp_path):
    target = tmp_path / "f"
    atomic_write(target, b"old")
    with pytest.raises(OSError, match="disk gone"):
        atomic_write(target, b"new", _RecordingFs(fail_replace="disk gone"))
    assert target.read_bytes() == b"old"
    assert _no_tmp_files(tmp_path)


# --------------------------------------------------------------------------------------------
# Offset checkpoints


def test_offset_checkpoint_open_creates_empty_file(tmp_path):
    path = tmp_path / RECOVERY_POINT_CHECKPOINT
    cp = OffsetCheckpointFile(path)
    assert path.read_bytes() == b""
    assert cp.read() == {}


def test_offset_checkpoint_open_keeps_existing_content(tmp_path):
    path = tmp_path / REPLICATION_OFFSET_CHECKPOINT
    path.write_bytes(b"0\n1\nt 0 7\n")
    assert OffsetCheckpointFile(path).read() == {("t", 0): 7}


def test_offset_checkpoint_write_exact_bytes(tmp_path):
    cp = OffsetCheckpointFile(tmp_path / RECOVERY_POINT_CHECKPOINT)
    cp.write({("orders", 0): 1234, ("__consumer_offsets", 17): 0, ("a.b-c_d", 2147483647): 2**63 - 1})
    assert cp.path.read_bytes() == (
        b"0\n3\norders 0 1234\n__consumer_offsets 17 0\na.b-c_d 2147483647 9223372036854775807\n"
    )
    assert _no_tmp_files(tmp_path)


def test_offset_checkpoint_write_empty_map_exact_bytes(tmp_path):
    cp = OffsetCheckpointFile(tmp_path / LOG_START_OFFSET_CHECKPOINT)
    cp.write({("t", 0): 5})
    cp.write({})
    assert cp.path.read_bytes() == b"0\n0\n"
    assert cp.read() == {}


_TOPIC = st.text(alphabet="abcxyzABZ019._-", min_size=1, max_size=249)
_OFFSETS = st.dictionaries(
    st.tuples(_TOPIC, st.integers(-(2**31), 2**31 - 1)),
    st.integers(-(2**63), 2**63 - 1),
    max_size=20,
)


@settings(max_examples=60, deadline=None)
@given(offsets=_OFFSETS)
def test_offset_checkpoint_round_trips_any_legal_offsets(offsets):
    with tempfile.TemporaryDirectory() as d:
        cp = OffsetCheckpointFile(Path(d) / CLEANER_OFFSET_CHECKPOINT)
        cp.write(offsets)
        assert cp.read() == offsets


def test_offset_checkpoint_reads_missing_count_line_as_empty(tmp_path):
    path = tmp_path / RECOVERY_POINT_CHECKPOINT
    path.write_bytes(b"0\n")
    assert OffsetCheckpointFile(path).read() == {}


def test_offset_checkpoint_read_splits_on_any_whitespace_and_java_line_ends(tmp_path):
    # Java's readLine accepts \n, \r\n and \r; fields split on \s+.
    path = tmp_path / RECOVERY_POINT_CHECKPOINT
    path.write_bytes(b"0\r\n3\r\nt\t0  5\rt 1 \t6\nu 0 -1")
    assert OffsetCheckpointFile(path).read() == {("t", 0): 5, ("t", 1): 6, ("u", 0): -1}


def test_offset_checkpoint_read_duplicate_partition_keeps_last(tmp_path):
    path = tmp_path / RECOVERY_POINT_CHECKPOINT
    path.write_bytes(b"0\n2\nt 0 5\nt 0 9\n")
    assert OffsetCheckpointFile(path).read() == {("t", 0): 9}


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"1\n0\n", r"line 1: unrecognised version 1, expected 0"),
        (b"v0\n0\n", r"line 1: malformed version"),
        (b" 0\n0\n", r"line 1: malformed version"),
        (b"0\nx\n", r"line 2: malformed entry count"),
        (b"0\n1_0\n", r"line 2: malformed entry count"),
        (b"0\n-1\n", r"line 2: negative entry count"),
        (b"0\n2\nt 0 1\n", r"expected 2 entries but found 1"),
        (b"0\n0\nt 0 1\n", r"expected 0 entries but found 1"),
        (b"0\n2\nt 0 1\nt 1\n", r"line 4: malformed entry 't 1'"),
        (b"0\n1\nt 0 1 2\n", r"line 3: malformed entry"),
        (b"0\n1\n t 0 1\n", r"line 3: malformed entry"),
        (b"0\n1\nt zero 1\n", r"line 3: malformed entry"),
        (b"0\n1\nt 0 1.5\n", r"line 3: malformed entry"),
        (b"0\n1\nt 2147483648 1\n", r"line 3: malformed entry"),
        (b"0\n1\nt 0 9223372036854775808\n", r"line 3: malformed entry"),
        (b"0\n1\n\n", r"line 3: malformed entry ''"),
        (b"0\n1\nt 0 \xff\n", r"not UTF-8"),
    ],
    ids=[
        "wrong-version", "non-numeric-version", "padded-version", "non-numeric-count",
        "python-only-int-syntax", "negative-count", "too-few-entries", "too-many-entries",
        "two-fields", "four-fields", "leading-whitespace", "non-int-partition", "non-int-offset",
        "partition-overflows-int32", "offset-overflows-int64", "blank-entry-line", "not-utf8",
    ],
)
def test_offset_checkpoint_read_corrupt_file_names_file_and_problem(tmp_path, content, message):
    path = tmp_path / RECOVERY_POINT_CHECKPOINT
    path.write_bytes(content)
    with pytest.raises(CorruptCheckpointError, match=message) as info:
        OffsetCheckpointFile(path).read()
    assert str(path) in str(info.value)


def test_offset_checkpoint_read_ignores_leftover_tmp_from_crash(tmp_path):
    cp = OffsetCheckpointFile(tmp_path / RECOVERY_POINT_CHECKPOINT)
    cp.write({("t", 0): 100})
    # A crash mid-write leaves a partial temp file next to the intact checkpoint.
    (tmp_path / (RECOVERY_POINT_CHECKPOINT + ".tmp")).write_bytes(b"0\n2\nt 0 2")
    assert cp.read() == {("t", 0): 100}
    cp.write({("t", 0): 200})
    assert cp.read() == {("t", 0): 200}
    assert _no_tmp_files(tmp_path)


def test_offset_checkpoint_crash_before_rename_keeps_old_offsets(tmp_path):
    OffsetCheckpointFile(tmp_path / RECOVERY_POINT_CHECKPOINT).write({("t", 0): 100})
    failing = OffsetCheckpointFile(tmp_path / RECOVERY_POINT_CHECKPOINT, _RecordingFs(fail_replace="power cut"))
    with pytest.raises(OSError):
        failing.write({("t", 0): 999})
    assert OffsetCheckpointFile(tmp_path / RECOVERY_POINT_CHECKPOINT).read() == {("t", 0): 100}


@pytest.mark.parametrize("topic", ["", "has space", "tab\there", "new\nline"])
def test_offset_checkpoint_write_rejects_unparsable_topic_and_keeps_file(tmp_path, topic):
    cp = OffsetCheckpointFile(tmp_path / RECOVERY_POINT_CHECKPOINT)
    cp.write({("t", 0): 1})
    with pytest.raises(ValueError):
        cp.write({(topic, 0): 1})
    assert cp.read() == {("t", 0): 1}


def test_offset_checkpoint_read_of_deleted_file_raises_os_error(tmp_path):
    cp = OffsetCheckpointFile(tmp_path / RECOVERY_POINT_CHECKPOINT)
    cp.path.unlink()
    with pytest.raises(FileNotFoundError):
        cp.read()


# --------------------------------------------------------------------------------------------
# leader-epoch-checkpoint


def test_leader_epoch_checkpoint_write_exact_bytes(tmp_path):
    cp = LeaderEpochCheckpointFile(tmp_path / LEADER_EPOCH_CHECKPOINT)
    cp.write([E(0, 0), E(3, 120), E(2147483647, 2**63 - 1)])
    assert cp.path.read_bytes() == b"0\n3\n0 0\n3 120\n2147483647 9223372036854775807\n"
    assert cp.read() == [E(0, 0), E(3, 120), E(2147483647, 2**63 - 1)]


def test_leader_epoch_checkpoint_open_creates_empty_file(tmp_path):
    cp = LeaderEpochCheckpointFile(tmp_path / LEADER_EPOCH_CHECKPOINT)
    assert cp.path.read_bytes() == b""
    assert cp.read() == []


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"1\n1\n0 0\n", r"line 1: unrecognised version 1"),
        (b"0\n1\n0 0 0\n", r"line 3: malformed entry"),
        (b"0\n1\n0\n", r"line 3: malformed entry"),
        (b"0\n1\n2147483648 0\n", r"line 3: malformed entry"),
        (b"0\n1\nfive 0\n", r"line 3: malformed entry"),
        (b"0\n2\n0 0\n", r"expected 2 entries but found 1"),
    ],
    ids=["wrong-version", "three-fields", "one-field", "epoch-overflows-int32", "non-int-epoch", "count-mismatch"],
)
def test_leader_epoch_checkpoint_read_corrupt_file_raises(tmp_path, content, message):
    path = tmp_path / LEADER_EPOCH_CHECKPOINT
    path.write_bytes(content)
    with pytest.raises(CorruptCheckpointError, match=message) as info:
        LeaderEpochCheckpointFile(path).read()
    assert str(path) in str(info.value)


# --------------------------------------------------------------------------------------------
# LeaderEpochFileCache


def test_leader_epoch_cache_assign_appends_and_persists_each_entry(tmp_path):
    cache = _cache_with(tmp_path)
    assert cache.assign(0, 0) is True
    assert _epoch_file(tmp_path) == b"0\n1\n0 0\n"
    assert cache.assign(2, 50) is True
    assert _epoch_file(tmp_path) == b"0\n2\n0 0\n2 50\n"
    assert cache.entries == [E(0, 0), E(2, 50)]
    assert cache.latest_epoch == 2
    assert cache.latest_entry == E(2, 50)
    assert cache.earliest_entry == E(0, 0)


def test_leader_epoch_cache_empty_has_no_latest_epoch(tmp_path):
    cache = _cache_with(tmp_path)
    assert cache.entries == []
    assert cache.latest_epoch is None
    assert cache.latest_entry is None


def test_leader_epoch_cache_assign_same_epoch_is_noop_without_write(tmp_path, monkeypatch):
    cache = _cache_with(tmp_path, (0, 0), (1, 10))
    writes = _WriteCounter(cache.checkpoint, monkeypatch)
    assert cache.assign(1, 10) is False
    assert cache.assign(1, 25) is False
    assert cache.entries == [E(0, 0), E(1, 10)]
    assert writes.count == 0


def test_leader_epoch_cache_assign_same_epoch_lower_offset_moves_its_start(tmp_path):
    # Kafka rule: the latest epoch re-assigned at a lower offset replaces its entry.
    cache = _cache_with(tmp_path, (0, 0), (1, 10))
    assert cache.assign(1, 5) is True
    assert cache.entries == [E(0, 0), E(1, 5)]
    assert _epoch_file(tmp_path) == b"0\n2\n0 0\n1 5\n"


def test_leader_epoch_cache_assign_lower_epoch_truncates_higher_epochs(tmp_path):
    cache = _cache_with(tmp_path, (1, 0), (3, 10), (5, 20))
    assert cache.assign(2, 30) is True
    assert cache.entries == [E(1, 0), E(2, 30)]
    assert _epoch_file(tmp_path) == b"0\n2\n1 0\n2 30\n"


def test_leader_epoch_cache_assign_between_epochs_keeps_lower_ones(tmp_path):
    cache = _cache_with(tmp_path, (1, 0), (3, 10), (5, 20))
    cache.assign(4, 15)
    assert cache.entries == [E(1, 0), E(3, 10), E(4, 15)]


def test_leader_epoch_cache_assign_higher_epoch_at_lower_offset_truncates_later_starts(tmp_path):
    cache = _cache_with(tmp_path, (1, 0), (3, 10), (5, 20))
    cache.assign(6, 10)
    assert cache.entries == [E(1, 0), E(6, 10)]
    assert _epoch_file(tmp_path) == b"0\n2\n1 0\n6 10\n"


@pytest.mark.parametrize(("epoch", "offset"), [(-1, 0), (0, -1)])
def test_leader_epoch_cache_assign_rejects_negative_values(tmp_path, epoch, offset):
    cache = _cache_with(tmp_path, (0, 0))
    with pytest.raises(ValueError):
        cache.assign(epoch, offset)
    assert cache.entries == [E(0, 0)]


def test_leader_epoch_cache_truncate_from_end_removes_entries_at_or_after_offset(tmp_path, monkeypatch):
    cache = _cache_with(tmp_path, (0, 0), (1, 10), (2, 20))
    writes = _WriteCounter(cache.checkpoint, monkeypatch)

    assert cache.truncate_from_end(21) is False  # latest epoch starts before the new end
    assert cache.truncate_from_end(-1) is False  # undefined end offset
    assert writes.count == 0

    assert cache.truncate_from_end(20) is True
    assert _epoch_file(tmp_path) == b"0\n2\n0 0\n1 10\n"
    assert cache.truncate_from_end(11) is False
    assert cache.truncate_from_end(10) is True
    assert _epoch_file(tmp_path) == b"0\n1\n0 0\n"
    assert cache.truncate_from_end(0) is True
    assert _epoch_file(tmp_path) == b"0\n0\n"
    assert writes.count == 3


def test_leader_epoch_cache_truncate_from_end_removes_several_entries_at_once(tmp_path):
    cache = _cache_with(tmp_path, (0, 0), (1, 10), (2, 20), (4, 30))
    cache.truncate_from_end(15)
    assert cache.entries == [E(0, 0), E(1, 10)]


def test_leader_epoch_cache_truncate_from_start_moves_covering_entry_up(tmp_path):
    cache = _cache_with(tmp_path, (0, 0), (1, 10), (2, 20))
    assert cache.truncate_from_start(5) is True
    assert cache.entries == [E(0, 5), E(1, 10), E(2, 20)]
    assert _epoch_file(tmp_path) == b"0\n3\n0 5\n1 10\n2 20\n"
    assert cache.truncate_from_start(15) is True
    assert cache.entries == [E(1, 15), E(2, 20)]
    assert _epoch_file(tmp_path) == b"0\n2\n1 15\n2 20\n"


def test_leader_epoch_cache_truncate_from_start_at_entry_start_drops_earlier_entries(tmp_path):
    cache = _cache_with(tmp_path, (0, 0), (1, 10), (2, 20))
    assert cache.truncate_from_start(10) is True
    assert cache.entries == [E(1, 10), E(2, 20)]
    assert _epoch_file(tmp_path) == b"0\n2\n1 10\n2 20\n"


def test_leader_epoch_cache_truncate_from_start_past_last_entry_keeps_latest_epoch(tmp_path):
    cache = _cache_with(tmp_path, (0, 0), (1, 10), (2, 20))
    cache.truncate_from_start(25)
    assert cache.entries == [E(2, 25)]
    assert cache.latest_epoch == 2


def test_leader_epoch_cache_truncate_from_start_without_change_does_not_write(tmp_path, monkeypatch):
    cache = _cache_with(tmp_path, (0, 5), (1, 10))
    writes = _WriteCounter(cache.checkpoint, monkeypatch)
    assert cache.truncate_from_start(3) is False  # before the first entry
    assert cache.truncate_from_start(5) is False  # exactly the first entry's start
    assert cache.entries == [E(0, 5), E(1, 10)]
    assert writes.count == 0


def test_leader_epoch_cache_clear_persists_empty_file(tmp_path, monkeypatch):
    cache = _cache_with(tmp_path, (0, 0), (1, 10))
    assert cache.clear() is True
    assert cache.entries == []
    assert _epoch_file(tmp_path) == b"0\n0\n"
    writes = _WriteCounter(cache.checkpoint, monkeypatch)
    assert cache.clear() is False
    assert writes.count == 0


@pytest.mark.parametrize(
    ("offset", "epoch"),
    [(0, None), (4, None), (5, 0), (9, 0), (10, 1), (19, 1), (20, 3), (10**12, 3)],
)
def test_leader_epoch_cache_epoch_for_offset(tmp_path, offset, epoch):
    cache = _cache_with(tmp_path, (0, 5), (1, 10), (3, 20))
    assert cache.epoch_for_offset(offset) == epoch


def test_leader_epoch_cache_epoch_for_offset_empty_cache_is_none(tmp_path):
    assert _cache_with(tmp_path).epoch_for_offset(0) is None


@pytest.mark.parametrize(
    ("requested", "expected"),
    [
        (UNDEFINED_EPOCH, (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)),
        (5, (5, 100)),  # latest epoch: the log end offset
        (3, (3, 50)),  # exact epoch: the next epoch's start
        (4, (3, 50)),  # unknown epoch between two: the epoch below, the next start
        (1, (1, 10)),  # below the first known epoch: the first known start
        (6, (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)),  # above the latest
    ],
)
def test_leader_epoch_cache_end_offset_for(tmp_path, requested, expected):
    cache = _cache_with(tmp_path, (2, 10), (3, 20), (5, 50))
    assert cache.end_offset_for(requested, log_end_offset=100) == expected


def test_leader_epoch_cache_reload_from_file_restores_entries(tmp_path):
    cache = _cache_with(tmp_path)
    cache.assign(0, 0)
    cache.assign(4, 100)
    cache.truncate_from_start(50)
    reloaded = LeaderEpochFileCache(LeaderEpochCheckpointFile(tmp_path / LEADER_EPOCH_CHECKPOINT))
    assert reloaded.entries == [E(0, 50), E(4, 100)]


def test_leader_epoch_cache_reload_applies_assign_rules_to_non_monotonic_file(tmp_path):
    path = tmp_path / LEADER_EPOCH_CHECKPOINT
    path.write_bytes(b"0\n3\n0 0\n2 10\n1 20\n")
    cache = LeaderEpochFileCache(LeaderEpochCheckpointFile(path))
    assert cache.entries == [E(0, 0), E(1, 20)]
    assert path.read_bytes() == b"0\n3\n0 0\n2 10\n1 20\n"  # loading alone does not rewrite


def test_leader_epoch_cache_reload_rejects_negative_epoch_in_file(tmp_path):
    path = tmp_path / LEADER_EPOCH_CHECKPOINT
    path.write_bytes(b"0\n1\n-1 0\n")
    with pytest.raises(CorruptCheckpointError, match="invalid leader epoch entry"):
        LeaderEpochFileCache(LeaderEpochCheckpointFile(path))


_CACHE_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("assign"), st.integers(0, 8), st.integers(0, 60)),
        st.tuples(st.just("end"), st.integers(-1, 60)),
        st.tuples(st.just("start"), st.integers(0, 60)),
        st.tuples(st.just("clear")),
    ),
    max_size=12,
)


@settings(max_examples=40, deadline=None)
@given(ops=_CACHE_OPS)
def test_leader_epoch_cache_stays_monotonic_and_file_matches_after_any_changes(ops):
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / LEADER_EPOCH_CHECKPOINT
        cache = LeaderEpochFileCache(LeaderEpochCheckpointFile(path))
        for op in ops:
            if op[0] == "assign":
                cache.assign(op[1], op[2])
                assert cache.latest_entry is not None and cache.latest_epoch == op[1]
            elif op[0] == "end":
                cache.truncate_from_end(op[1])
            elif op[0] == "start":
                cache.truncate_from_start(op[1])
            else:
                cache.clear()
            entries = cache.entries
            assert all(a.epoch < b.epoch and a.start_offset < b.start_offset for a, b in zip(entries, entries[1:]))
            if path.stat().st_size:
                assert LeaderEpochCheckpointFile(path).read() == entries
            else:
                assert entries == []  # nothing was ever persisted
        assert LeaderEpochFileCache(LeaderEpochCheckpointFile(path)).entries == cache.entries


# --------------------------------------------------------------------------------------------
# meta.properties and Kafka uuids

_B64URL = re.compile(r"[A-Za-z0-9_-]{22}")
_JAVA_DATE = re.compile(r"#(Mon|Tue|Wed|Thu|Fri|Sat|Sun) [A-Z][a-z]{2} \d{2} \d{2}:\d{2}:\d{2} \S+ \d{4}")


def test_random_kafka_uuid_is_22_char_urlsafe_base64_of_v4_uuid():
    ids = {random_kafka_uuid() for _ in range(200)}
    assert len(ids) == 200
    for text in ids:
        assert _B64URL.fullmatch(text)
        assert not text.startswith("-")
        raw = base64.urlsafe_b64decode(text + "==")
        assert len(raw) == 16
        assert raw[6] >> 4 == 4 and raw[8] >> 6 == 0b10  # java.util.UUID.randomUUID layout


def test_random_kafka_uuid_never_returns_reserved_zero_or_one_uuid(monkeypatch):
    real = uuid.uuid4()
    sequence = iter([uuid.UUID(int=0), uuid.UUID(int=1), real])
    # (checkpoints' own view of the uuid module, not the module itself: other threads of this
    # worker, a running broker's, draw uuids too and would take values from the sequence)
    monkeypatch.setattr(checkpoints, "uuid", SimpleNamespace(uuid4=lambda: next(sequence)))
    assert random_kafka_uuid() == base64.urlsafe_b64encode(real.bytes).rstrip(b"=").decode()


def test_meta_properties_write_java_properties_format(tmp_path):
    meta = MetaProperties(cluster_id="MkU3OEVBNTcwNTJENDM2Qk", node_id=7, directory_id="AAAAAAAAAAAAAAAAAAAAAQ")
    meta.write(tmp_path)
    lines = (tmp_path / META_PROPERTIES).read_bytes().decode("ascii").split("\n")
    assert lines[0] == "#"
    assert _JAVA_DATE.fullmatch(lines[1]), lines[1]
    assert lines[2:] == [
        "cluster.id=MkU3OEVBNTcwNTJENDM2Qk",
        "directory.id=AAAAAAAAAAAAAAAAAAAAAQ",
        "node.id=7",
        "version=1",
        "",
    ]
    assert _no_tmp_files(tmp_path)


def test_meta_properties_round_trip(tmp_path):
    meta = MetaProperties(cluster_id=random_kafka_uuid(), node_id=2147483647, directory_id=random_kafka_uuid())
    meta.write(tmp_path)
    assert MetaProperties.read(tmp_path) == meta
    assert meta.version == 1


def test_meta_properties_round_trip_escapes_special_characters(tmp_path):
    meta = MetaProperties(cluster_id=" a=b:c#d!e\\f\tg é", node_id=0, directory_id=None)
    meta.write(tmp_path)
    assert (tmp_path / META_PROPERTIES).read_bytes().isascii()
    assert MetaProperties.read(tmp_path) == meta


def test_meta_properties_read_missing_file_is_none(tmp_path):
    assert MetaProperties.read(tmp_path) is None


def test_meta_properties_read_kafka_style_variants(tmp_path):
    # Unsorted keys, ':' and spaced separators, '!' comments, CRLF, a continuation line.
    (tmp_path / META_PROPERTIES).write_bytes(
        b"#\r\n#Tue Oct 15 12:00:00 UTC 2024\r\n! note\r\nnode.id : 3\r\n"
        b"version=1\r\ndirectory.id   AAAAAAAAAAAAAAAAAAAAAQ\r\ncluster.id=abc\\\r\n    def\r\n"
    )
    assert MetaProperties.read(tmp_path) == MetaProperties(
        cluster_id="abcdef", node_id=3, directory_id="AAAAAAAAAAAAAAAAAAAAAQ"
    )


def test_meta_properties_read_without_directory_id_gives_none(tmp_path):
    (tmp_path / META_PROPERTIES).write_bytes(b"#\n#date\nversion=1\ncluster.id=abc\nnode.id=1\n")
    assert MetaProperties.read(tmp_path) == MetaProperties(cluster_id="abc", node_id=1, directory_id=None)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"version=0\nbroker.id=1\ncluster.id=abc\n", "unsupported meta.properties version 0"),
        (b"broker.id=1\n", "unsupported meta.properties version 0"),
        (b"version=x\n", "malformed version"),
        (b"version=1\nnode.id=1\n", "cluster.id was not found"),
        (b"version=1\ncluster.id=abc\n", "node.id was not found"),
        (b"version=1\ncluster.id=abc\nnode.id=one\n", "unable to read node.id"),
        (b"version=1\ncluster.id=abc\nnode.id=1\ndirectory.id=short\n", "unable to read directory.id"),
        (b"version=1\ncluster.id=a\\u00zz\nnode.id=1\n", "malformed"),
    ],
    ids=["zk-era-v0", "no-version-means-v0", "bad-version", "no-cluster-id", "no-node-id",
         "bad-node-id", "bad-directory-id", "bad-unicode-escape"],
)
def test_meta_properties_read_invalid_file_raises(tmp_path, content, message):
    (tmp_path / META_PROPERTIES).write_bytes(content)
    with pytest.raises(CorruptCheckpointError, match=message) as info:
        MetaProperties.read(tmp_path)
    assert META_PROPERTIES in str(info.value)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"cluster_id": "", "node_id": 1, "directory_id": None},
        {"cluster_id": "c", "node_id": 2**31, "directory_id": None},
        {"cluster_id": "c", "node_id": 1, "directory_id": "not-a-uuid"},
        {"version": 0, "cluster_id": "c", "node_id": 1, "directory_id": None},
    ],
    ids=["empty-cluster-id", "node-id-overflow", "bad-directory-id", "version-0"],
)
def test_meta_properties_rejects_values_kafka_cannot_read(kwargs):
    with pytest.raises(ValueError):
        MetaProperties(**kwargs)


# --------------------------------------------------------------------------------------------
# Clean shutdown marker


def test_clean_shutdown_file_write_exists_read_delete(tmp_path):
    marker = CleanShutdownFile(tmp_path)
    assert not marker.exists()
    marker.write(broker_epoch=42)
    assert marker.exists()
    assert (tmp_path / CLEAN_SHUTDOWN_FILE).read_bytes() == b'{"broker_epoch":"42","version":"0"}'
    assert marker.read_broker_epoch() == 42
    assert _no_tmp_files(tmp_path)
    marker.delete()
    assert not marker.exists()
    assert not (tmp_path / CLEAN_SHUTDOWN_FILE).exists()


def test_clean_shutdown_file_write_default_epoch_is_zero(tmp_path):
    marker = CleanShutdownFile(tmp_path)
    marker.write()
    assert marker.read_broker_epoch() == 0


def test_clean_shutdown_file_delete_missing_is_noop(tmp_path):
    CleanShutdownFile(tmp_path).delete()
    assert not CleanShutdownFile(tmp_path).exists()


def test_clean_shutdown_file_legacy_empty_file_counts_as_clean_with_unknown_epoch(tmp_path):
    (tmp_path / CLEAN_SHUTDOWN_FILE).write_bytes(b"")
    marker = CleanShutdownFile(tmp_path)
    assert marker.exists()
    assert marker.read_broker_epoch() == -1


@pytest.mark.parametrize(
    ("content", "epoch"),
    [
        (b'{"version":"0","broker_epoch":"-5"}', -5),
        (b'{"version":0,"broker_epoch":17}', 17),
        (b'{"version":0,"brokerEpoch":7}', 7),
        (b'{"version":"0"}', -1),
        (b'{"broker_epoch":"-1L"}', -1),
        (b"not json", -1),
        (b"[1, 2]", -1),
    ],
    ids=["kafka-strings", "numeric", "camel-case-key", "no-epoch", "unparsable-epoch", "garbage", "not-an-object"],
)
def test_clean_shutdown_file_read_broker_epoch_tolerates_variants(tmp_path, content, epoch):
    (tmp_path / CLEAN_SHUTDOWN_FILE).write_bytes(content)
    assert CleanShutdownFile(tmp_path).read_broker_epoch() == epoch


def test_clean_shutdown_file_delete_fsyncs_log_dir(tmp_path):
    fs = _RecordingFs()
    marker = CleanShutdownFile(tmp_path, fs)
    marker.write(1)
    fs.events.clear()
    marker.delete()
    assert fs.events == ["fsync-dir"] and not marker.exists()
