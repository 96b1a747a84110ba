"""Shared builders for the cleaner tests: a compacted log on tmp_path, a cleaner driven one
iteration at a time (no background thread), and the reference model checks."""

from __future__ import annotations

from pathlib import Path

from triolog.broker.storage.checkpoints import CLEANER_OFFSET_CHECKPOINT, OffsetCheckpointFile
from triolog.broker.storage.cleaner.log_cleaner import CleanerConfig, CleanerThread, LogCleaner
from triolog.broker.storage.log import Log
from triolog.config.log_config import LogConfig
from triolog.protocol.record_batch import CompressionType
from triolog.protocol.records import Record, encode_batch

from tests.storage.helpers import read_all_records

__all__ = ["Driver", "append", "compact_config", "read_all_records", "check_against_model"]


def compact_config(**overrides) -> LogConfig:
    props = {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.0001"}
    props.update({k.replace("_", "."): str(v) for k, v in overrides.items()})
    return LogConfig().with_overrides(props)


def append(log: Log, items, timestamp: int, compression=CompressionType.NONE, headers=()) -> list[Record]:
    """Append one producer batch of (key, value) items; returns the records with their offsets."""
    records = [Record(i, timestamp, key, value, tuple(headers)) for i, (key, value) in enumerate(items)]
    info = log.append_as_leader(encode_batch(records, compression=compression))
    return [Record(info.first_offset + r.offset, r.timestamp, r.key, r.value, r.headers) for r in records]


class Driver:
    """A LogCleaner over fixed logs whose iterations the test runs itself, in the test's thread."""

    def __init__(self, log_dir: Path, logs: dict, clock, *, map_slots: int = 100_000, load_factor: float = 0.9,
                 worker_process: bool = False, **config):
        self.log_dir = log_dir
        self.logs = logs
        config = CleanerConfig(dedupe_buffer_size=24 * map_slots, dedupe_buffer_load_factor=load_factor,
                               use_worker_process=worker_process, **config)
        self.cleaner = LogCleaner(config, [log_dir], lambda: dict(self.logs), lambda tp: log_dir, clock=clock)
        self.thread = CleanerThread(self.cleaner, 0)

    def run_once(self) -> bool:
        return self.cleaner.try_clean_filthiest_log(self.thread)

    def run_until_idle(self, limit: int = 200) -> int:
        rounds = 0
        while self.run_once():
            rounds += 1
            assert rounds < limit, "the cleaner never ran out of work"
        return rounds

    def checkpoint(self) -> dict:
        return OffsetCheckpointFile(self.log_dir / CLEANER_OFFSET_CHECKPOINT).read()

    def close(self) -> None:
        self.thread.close_executor()


def check_against_model(got: list[Record], appended: dict[int, Record], *, now_ms: int | None = None,
                        delete_retention_ms: int | None = None) -> None:
    """What a consumer reads from a compacted log, against every record ever appended:
    offsets strictly increase, every record is one that was appended (offset, timestamp, key,
    value, headers unchanged), the latest record of every key is still there unless it is a
    tombstone (which may have been removed, but not before ``delete.retention.ms`` after it was
    written: its horizon is stamped no earlier), and no key shows an older value than its latest."""
    offsets = [r.offset for r in got]
    assert offsets == sorted(set(offsets)), "offsets must strictly increase"
    for record in got:
        assert appended[record.offset] == record, f"record at {record.offset} changed"
    latest: dict[bytes, Record] = {}
    for offset in sorted(appended):
        latest[appended[offset].key] = appended[offset]
    last_seen: dict[bytes, Record] = {}
    for record in got:
        last_seen[record.key] = record
    for key, record in latest.items():
        if record.value is not None:
            assert last_seen.get(key) == record, f"latest value of {key!r} lost"
        else:
            assert last_seen.get(key) in (None, record), f"{key!r} resurrected after its tombstone"
            if now_ms is not None and now_ms < record.timestamp + delete_retention_ms:
                assert last_seen.get(key) == record, f"tombstone of {key!r} removed before its horizon"
