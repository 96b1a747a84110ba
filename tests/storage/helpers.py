"""Small builders shared by the storage tests: producer batches and a log opened on tmp_path."""

from __future__ import annotations

from pathlib import Path

from triolog.config.log_config import LogConfig
from triolog.protocol.record_batch import CompressionType
from triolog.protocol.records import Record, decode_batch, encode_batch, iter_batches
from triolog.broker.storage.log import Log


def producer_batch(count: int = 1, *, timestamp: int, value_size: int = 10, keyed: bool = True,
                   compression: CompressionType = CompressionType.NONE, step_ms: int = 0, tag: str = "") -> bytes:
    """A batch as a producer sends it: base offset 0, offsets 0..count-1."""
    records = [
        Record(i, timestamp + i * step_ms, f"key-{tag}{i}".encode() if keyed else None,
               (f"{tag}{i}:".encode() + b"v" * value_size)[:max(value_size, 1)])
        for i in range(count)
    ]
    return encode_batch(records, compression=compression)


def open_log(tmp_path: Path, clock, name: str = "topic-0", **overrides) -> Log:
    config = LogConfig().with_overrides(overrides) if overrides else LogConfig()
    return Log.open(tmp_path / name, config, clock=clock)


def read_all_records(log: Log, start: int = 0) -> list[Record]:
    """Everything a consumer would see from ``start``, fetching batch by batch to the end."""
    out: list[Record] = []
    offset = start
    while offset < log.high_watermark:
        info = log.read(offset, 1 << 20)
        if info.region is None:
            break
        for batch in iter_batches(info.region.read_bytes()):
            out.extend(r for r in batch.records if r.offset >= offset)
            offset = batch.header.next_offset
    return out


__all__ = ["producer_batch", "open_log", "read_all_records", "decode_batch"]
