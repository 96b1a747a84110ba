#!/usr/bin/env python
"""Storage-layer benchmark: append, read-by-offset, lookup-by-timestamp, open and recovery.

    .venv/bin/python bench/storage.py            # full run (~30 s on this 2-core VM)
    .venv/bin/python bench/storage.py --quick    # smaller sizes, < 30 s
    .venv/bin/python bench/storage.py --profile  # also print a cProfile summary per section

Everything runs against the page cache (nothing is fsynced per write; caches are not dropped),
so the figures are CPU cost of the storage code, not disk speed. All files live in one temp
directory under /tmp that is removed at the end.

Figures:
1. append throughput of Log.append_as_leader (16 KiB producer batches of ~100-byte records into
   64 MiB segments) next to os.write of the same 16 KiB chunks to one plain file, interleaved
   and repeated, medians compared;
2. Log.read(random offset, fetch size) latency over a log of 1,000 segments;
3. Log.fetch_offset_by_timestamp(random target) latency on the same log;
4. Log.open of a cleanly shut down 10,000-segment log, and recovery throughput of a log opened
   with had_clean_shutdown=False, recovery_point=0 (every batch's CRC checked, indexes rebuilt);
5. the latency of an append that rolls (goal p99 <= 1 ms), with 10 MiB (default) and 4 KiB preallocated
   indexes, the old segment sealed by the flush that follows (as the broker schedules it);
6. the cost of full batch validation (every record walked, compressed batches decompressed):
   Log.append_as_leader throughput with the real validator next to the same validator with the
   record walk and decompression stubbed out (what the header-only validator before it did),
   interleaved in the same run, for 1-record, 16 KiB and 16 KiB zstd producer batches.

Logs are built through Log itself; producer batches are built once with encode_batch and, where
timestamps must increase, re-stamped (header timestamps + CRC: byte-identical to encode_batch).
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import os
import platform
import pstats
import random
import shutil
import statistics
import struct
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from triolog.broker.storage.clock import SYSTEM_CLOCK  # noqa: E402
from triolog.broker.storage.log import Log  # noqa: E402
from triolog.config.log_config import LogConfig  # noqa: E402
from triolog.protocol.record_batch import (  # noqa: E402
    BASE_TIMESTAMP_OFFSET,
    CompressionType,
    CRC_OFFSET,
    compute_crc,
    read_header,
)
from triolog.protocol.records import Record, encode_batch  # noqa: E402
import triolog.broker.storage.validator as validator_module  # noqa: E402

KiB = 1024
MiB = 1024 * 1024
MB = 1_000_000

BATCH_BYTES = 16 * KiB  # producer batch size (upper bound)
RECORD_BYTES = 100  # encoded size of one record (length varint + body), roughly
PARTITION_DIR = "bench-0"

perf_ns = time.perf_counter_ns
#: CPU time of this thread (user + system): what a loaded machine's other processes do not add
cpu_ns = time.thread_time_ns
CPU_NS: list[int] = []  # the last run_plain_write / run_log_append's CPU time, appended by each
_TIMESTAMPS = struct.Struct(">qq")  # base_timestamp, max_timestamp (adjacent in the header)
_CRC = struct.Struct(">I")


# -- scales ------------------------------------------------------------------------------------


def scales(quick: bool) -> dict:
    if quick:
        return dict(
            append_total=128 * MiB, append_reps=3, validation_total=8 * MiB, validation_small=20_000,
            validation_reps=3,
            read_segments=1000, reads=5000, ts_lookups=1000,
            open_segments=10_000, open_reps=3, rolls=100,
            recovery_total=64 * MiB, recovery_reps=2,
        )
    return dict(
        append_total=512 * MiB, append_reps=3, validation_total=32 * MiB, validation_small=100_000,
        validation_reps=5,
        read_segments=1000, reads=20_000, ts_lookups=5000,
        open_segments=10_000, open_reps=5, rolls=400,
        recovery_total=256 * MiB, recovery_reps=3,
    )


# -- helpers -----------------------------------------------------------------------------------


def now_ms() -> int:
    return SYSTEM_CLOCK.milliseconds()


def producer_batch(max_bytes: int, record_bytes: int, base_ts: int) -> tuple[bytes, int]:
    """The largest producer batch (base offset 0, CreateTime, timestamps base_ts + i) under max_bytes."""
    value = bytes((i * 7) & 0xFF for i in range(record_bytes - 7))  # ~7 bytes of record framing
    n = max_bytes // record_bytes + 8
    while True:
        batch = encode_batch([Record(i, base_ts + i, None, value) for i in range(n)])
        if len(batch) <= max_bytes:
            return batch, n
        n -= 1


def restamp(template: bytes, delta_ms: int) -> bytes:
    """``template`` with every record timestamp moved by delta_ms (header fields + CRC only:
    record timestamps are deltas from base_timestamp)."""
    buf = bytearray(template)
    base_ts, max_ts = _TIMESTAMPS.unpack_from(buf, BASE_TIMESTAMP_OFFSET)
    _TIMESTAMPS.pack_into(buf, BASE_TIMESTAMP_OFFSET, base_ts + delta_ms, max_ts + delta_ms)
    _CRC.pack_into(buf, CRC_OFFSET, compute_crc(buf))
    return bytes(buf)


def config(**overrides) -> LogConfig:
    return LogConfig().with_overrides({k: str(v) for k, v in overrides.items()})


def percentile(sorted_values: list[int], p: float) -> float:
    """Nearest-rank percentile of an already sorted list."""
    if not sorted_values:
        return float("nan")
    rank = max(1, int(round(p / 100 * len(sorted_values) + 0.5)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


def fmt_us(ns: float) -> str:
    return f"{ns / 1000:,.1f} µs"


def dir_bytes(path: Path) -> int:
    return sum(e.stat().st_size for e in os.scandir(path) if e.is_file())


class Profiler:
    """cProfile around selected blocks when --profile is given; prints the top functions."""

    def __init__(self, enabled: bool):
        self.enabled = enabled

    @contextmanager
    def section(self, title: str):
        if not self.enabled:
            yield
            return
        prof = cProfile.Profile()
        prof.enable()
        try:
            yield
        finally:
            prof.disable()
            out = io.StringIO()
            stats = pstats.Stats(prof, stream=out).strip_dirs().sort_stats("tottime")
            stats.print_stats(14)
            text = out.getvalue()
            body = text[text.find("   ncalls"):] if "   ncalls" in text else text
            print(f"\n--- profile: {title} (sorted by own time) ---")
            print(body.rstrip())
            print()


def log(msg: str) -> None:
    print(f"  .. {msg}", flush=True)


# -- 1. append throughput ----------------------------------------------------------------------


def run_plain_write(path: Path, chunk: bytes, count: int) -> int:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        write = os.write
        c0 = cpu_ns()
        t0 = perf_ns()
        for _ in range(count):
            if write(fd, chunk) != len(chunk):
                raise RuntimeError("short write")
        elapsed = perf_ns() - t0
        CPU_NS.append(cpu_ns() - c0)
    finally:
        os.close(fd)
    return elapsed


def run_log_append(directory: Path, batch: bytes, count: int, cfg: LogConfig) -> tuple[int, Log]:
    lg = Log.open(directory, cfg, clock=SYSTEM_CLOCK)
    append = lg.append_as_leader
    c0 = cpu_ns()
    t0 = perf_ns()
    for _ in range(count):
        append(batch)
    elapsed = perf_ns() - t0
    CPU_NS.append(cpu_ns() - c0)
    return elapsed, lg


def bench_append(root: Path, sc: dict, prof: Profiler) -> dict:
    batch, n_records = producer_batch(BATCH_BYTES, RECORD_BYTES, now_ms() - 60_000)
    count = sc["append_total"] // len(batch)
    total = count * len(batch)
    cfg = config(**{"segment.bytes": 64 * MiB})
    log(f"append: {count:,} batches of {len(batch):,} B ({n_records} records), {total / MiB:,.0f} MiB per side, "
        f"{sc['append_reps']} interleaved reps")
    # Untimed warm-up: the first pass over fresh memory pays for page allocation in this VM
    # (the first timed plain write used to come out at half speed); both sides then reuse pages.
    warm = root / "append-warmup"
    warm.mkdir()
    run_plain_write(warm / "plain.bin", batch, count)
    shutil.rmtree(warm)
    plain_ns, log_ns = [], []
    plain_cpu, log_cpu = [], []
    for rep in range(sc["append_reps"]):
        order = ("plain", "log") if rep % 2 == 0 else ("log", "plain")
        for side in order:
            work = root / f"append-{rep}-{side}"
            work.mkdir()
            gc.collect()
            if side == "plain":
                plain_ns.append(run_plain_write(work / "plain.bin", batch, count))
                plain_cpu.append(CPU_NS[-1])
            else:
                elapsed, lg = run_log_append(work / PARTITION_DIR, batch, count, cfg)
                log_ns.append(elapsed)
                log_cpu.append(CPU_NS[-1])
                assert lg.log_end_offset == count * n_records, lg
                assert lg.size == total, (lg.size, total)
                segments = lg.num_segments
                lg.close()
            shutil.rmtree(work)  # drops the dirty pages too, so reps do not slow each other
    if prof.enabled:
        work = root / "append-profile"
        with prof.section("append_as_leader"):
            _, lg = run_log_append(work / PARTITION_DIR, batch, min(count, 8192), cfg)
        lg.close()
        shutil.rmtree(work)
    plain, logm = statistics.median(plain_ns), statistics.median(log_ns)
    return dict(
        batch_size=len(batch), n_records=n_records, count=count, total=total, segments=segments,
        plain_mbs=total / MB / (plain / 1e9), log_mbs=total / MB / (logm / 1e9),
        plain_bps=count / (plain / 1e9), log_bps=count / (logm / 1e9),
        plain_all=[total / MB / (x / 1e9) for x in plain_ns], log_all=[total / MB / (x / 1e9) for x in log_ns],
        per_batch_log_ns=logm / count, per_batch_plain_ns=plain / count,
        cpu_ratio=statistics.median(plain_cpu) / statistics.median(log_cpu),
        per_batch_log_cpu_ns=statistics.median(log_cpu) / count, per_batch_plain_cpu_ns=statistics.median(plain_cpu) / count,
    )


# -- 6. the cost of full batch validation ------------------------------------------------------


@contextmanager
def header_only_validation(batch: bytes):
    """The validator as it was before every record was walked: the walk returns what the header
    claims and compressed records are not decompressed. Everything else (header rules, CRC,
    offsets, the one-pwritev append) stays, so the difference is the walk's cost alone."""
    header = read_header(batch)
    claimed = (header.max_timestamp, header.records_count - 1, True)
    walk, decompress = validator_module.walk_records, validator_module._decompress
    validator_module.walk_records = lambda *args, **kwargs: claimed
    validator_module._decompress = lambda codec, payload, cfg: b""
    try:
        yield
    finally:
        validator_module.walk_records, validator_module._decompress = walk, decompress


def bench_validation(root: Path, sc: dict, prof: Profiler) -> dict:
    base_ts = now_ms() - 60_000
    small, _ = producer_batch(RECORD_BYTES + 70, RECORD_BYTES, base_ts)  # one ~100-byte record
    big, n_big = producer_batch(BATCH_BYTES, RECORD_BYTES, base_ts)
    # Records that compress about 4x, like text: 16 KiB of zstd holds ~64 KiB of records.
    words = [b"alpha ", b"beta ", b"gamma ", b"delta ", b"epsilon ", b"kafka ", b"record ", b"batch "]
    rng = random.Random(7)
    values = [b"".join(rng.choice(words) for _ in range(14))[:RECORD_BYTES - 7] for _ in range(4096)]
    zstd, n_zstd, n = b"", 0, 64
    while True:  # the largest multiple of 64 records under 16 KiB
        candidate = encode_batch([Record(i, base_ts + i, None, values[i % len(values)]) for i in range(n)],
                                 compression=CompressionType.ZSTD)
        if len(candidate) > BATCH_BYTES:
            break
        zstd, n_zstd, n = candidate, n, n + 64
    cfg = config(**{"segment.bytes": 64 * MiB})
    kinds = [
        ("1 record", small, sc["validation_small"]),
        (f"16 KiB, {n_big} records", big, sc["validation_total"] // len(big)),
        (f"16 KiB zstd, {n_zstd} records", zstd, sc["validation_total"] // len(zstd)),
    ]
    out = {}
    for name, batch, count in kinds:
        log(f"validation cost: {count:,} batches of {len(batch):,} B ({name}), "
            f"{sc['validation_reps']} interleaved reps")
        walked, header_only = [], []
        for rep in range(sc["validation_reps"]):
            order = ("walk", "header") if rep % 2 == 0 else ("header", "walk")
            for side in order:
                work = root / f"validation-{rep}-{side}"
                work.mkdir()
                gc.collect()
                if side == "walk":
                    elapsed, lg = run_log_append(work / PARTITION_DIR, batch, count, cfg)
                    walked.append(elapsed)
                else:
                    with header_only_validation(batch):
                        elapsed, lg = run_log_append(work / PARTITION_DIR, batch, count, cfg)
                    header_only.append(elapsed)
                lg.close()
                shutil.rmtree(work)
        if prof.enabled:
            work = root / "validation-profile"
            with prof.section(f"append_as_leader, full validation, {name}"):
                _, lg = run_log_append(work / PARTITION_DIR, batch, min(count, 4096), cfg)
            lg.close()
            shutil.rmtree(work)
        w, h = statistics.median(walked), statistics.median(header_only)
        out[name] = dict(size=len(batch), count=count, walk_bps=count / (w / 1e9), header_bps=count / (h / 1e9),
                         walk_us=w / count / 1000, header_us=h / count / 1000, ratio=h / w)
    return out


# -- 2 + 3. reads and timestamp lookups over 1,000 segments ------------------------------------


def build_read_log(directory: Path, sc: dict) -> tuple[Log, int, int, int]:
    """1,000 segments of 256 KiB, 16 KiB batches; the record at offset k has timestamp t0 + k."""
    t0 = now_ms() - 2 * 86_400_000
    template, n = producer_batch(BATCH_BYTES, RECORD_BYTES, t0)
    per_segment = (256 * KiB) // len(template)
    # segment.index.bytes only sizes the preallocated (sparse) index of the active segment; every
    # rolled index is trimmed to its entries, so the files are the same as with the 10 MiB default,
    # but a roll is ~100x cheaper here (see bench_roll: 8 MiB read-ahead on the first index fault).
    cfg = config(**{"segment.bytes": 256 * KiB, "segment.index.bytes": 4 * KiB})
    # restamp() is exactly what encode_batch would build for the shifted records:
    value = bytes((i * 7) & 0xFF for i in range(RECORD_BYTES - 7))
    assert restamp(template, 5 * n) == encode_batch([Record(i, t0 + 5 * n + i, None, value) for i in range(n)])
    lg = Log.open(directory, cfg, clock=SYSTEM_CLOCK)
    try:
        batches = sc["read_segments"] * per_segment
        for j in range(batches):
            lg.append_as_leader(restamp(template, j * n))
        assert lg.num_segments == sc["read_segments"], lg.num_segments
    except BaseException:
        lg.close()
        raise
    return lg, t0, n, len(template)


def time_reads(lg: Log, offsets: list[int], fetch: int) -> list[int]:
    read = lg.read
    out = []
    for off in offsets:
        t = perf_ns()
        read(off, fetch)
        out.append(perf_ns() - t)
    return out


def check_reads(lg: Log, offsets: list[int], fetch: int) -> None:
    for off in offsets[:200]:
        info = lg.read(off, fetch)
        assert info.first_batch.base_offset <= off <= info.first_batch.last_offset, (off, info)
        assert info.region.length <= max(fetch, info.first_batch.size)
        raw = info.region.read_bytes()
        assert read_header(raw).base_offset == info.first_batch.base_offset


def time_ts_lookups(lg: Log, targets: list[int]) -> list[int]:
    lookup = lg.fetch_offset_by_timestamp
    out = []
    for ts in targets:
        t = perf_ns()
        lookup(ts)
        out.append(perf_ns() - t)
    return out


def bench_reads(root: Path, sc: dict, prof: Profiler) -> dict:
    directory = root / "reads" / PARTITION_DIR
    t_build = perf_ns()
    lg, t0, n, batch_size = build_read_log(directory, sc)
    leo = lg.log_end_offset
    lg.flush()  # write the 250 MiB back now, so that background writeback does not add noise below
    log(f"reads: built {lg.num_segments:,} segments, {lg.size / MiB:,.0f} MiB, {leo:,} records "
        f"in {(perf_ns() - t_build) / 1e9:.1f} s")
    rng = random.Random(42)
    res: dict = dict(segments=lg.num_segments, log_mib=lg.size / MiB, batch_size=batch_size)

    # 2. read by offset (live log: indexes mapped, files open, as on a running broker)
    for fetch in (64 * KiB, 1 * MiB):
        offsets = [rng.randrange(0, leo) for _ in range(sc["reads"])]
        check_reads(lg, offsets, fetch)
        time_reads(lg, offsets[:500], fetch)  # warm-up
        gc.collect()
        lat = sorted(time_reads(lg, offsets, fetch))
        res[f"read_{fetch}"] = (percentile(lat, 50), percentile(lat, 99), percentile(lat, 99.9))
    if prof.enabled:
        offsets = [rng.randrange(0, leo) for _ in range(sc["reads"])]
        with prof.section("read(random offset, 64 KiB)"):
            time_reads(lg, offsets, 64 * KiB)

    # 3. lookup by timestamp: the record at offset k has timestamp t0 + k
    t_last = t0 + leo - 1
    targets = [rng.randrange(t0, t_last + 1) for _ in range(sc["ts_lookups"])]
    for ts in targets[:100]:
        found = lg.fetch_offset_by_timestamp(ts)
        assert found is not None and found.offset == ts - t0 and found.timestamp == ts, (ts, found)
    time_ts_lookups(lg, targets[:50])  # warm-up
    gc.collect()
    lat = sorted(time_ts_lookups(lg, targets))
    res["ts"] = (percentile(lat, 50), percentile(lat, 99), percentile(lat, 99.9))
    if prof.enabled:
        with prof.section("fetch_offset_by_timestamp(random)"):
            time_ts_lookups(lg, targets[: max(200, len(targets) // 5)])
    lg.close()

    # 2b. the same reads right after a clean restart: every segment's first read opens its
    # .log and maps its two indexes (lazy loading), which lands in the tail.
    lg = Log.open(directory, lg.config, clock=SYSTEM_CLOCK, recovery_point=leo, had_clean_shutdown=True)
    offsets = [rng.randrange(0, leo) for _ in range(sc["reads"])]
    gc.collect()
    lat = sorted(time_reads(lg, offsets, 64 * KiB))
    res["read_cold"] = (percentile(lat, 50), percentile(lat, 99), percentile(lat, 99.9))
    lg.close()
    shutil.rmtree(directory.parent)
    return res


# -- 4a. open a cleanly shut down 10,000-segment log -------------------------------------------


def build_open_log(directory: Path, sc: dict) -> tuple[int, int]:
    """A log of sc["open_segments"] one-batch segments, written through Log and closed cleanly.

    segment.bytes = the batch size, so every append rolls. Two things keep this fast without
    changing a byte on disk: segment.index.bytes = 4 KiB (rolled indexes are trimmed to their
    entries either way), and a clean close + reopen every CHUNK segments, because a live Log keeps
    ~2 descriptors per inactive segment (its .log fd plus the fd Python's mmap dup()s for each
    mapped index) and 10,000 segments would exceed the 20,000-fd limit (EMFILE).
    """
    chunk = 2000
    # One small batch (10 records of ~100 B) per segment.
    template, n = producer_batch(10 * RECORD_BYTES + 61, RECORD_BYTES, now_ms() - 86_400_000)
    cfg = config(**{"segment.bytes": len(template), "segment.index.bytes": 4 * KiB})
    leo = 0
    written = 0
    while written < sc["open_segments"]:
        lg = Log.open(directory, cfg, clock=SYSTEM_CLOCK, recovery_point=leo, had_clean_shutdown=leo > 0)
        try:
            for _ in range(min(chunk, sc["open_segments"] - written)):
                lg.append_as_leader(restamp(template, written * n))
                written += 1
            leo = lg.log_end_offset
        finally:
            lg.close()
    return leo, len(template)


def bench_open(root: Path, sc: dict, prof: Profiler) -> dict:
    directory = root / "open" / PARTITION_DIR
    t_build = perf_ns()
    leo, _ = build_open_log(directory, sc)
    build_s = (perf_ns() - t_build) / 1e9
    files = len(os.listdir(directory))
    log(f"open: built {sc['open_segments']:,} segments ({files:,} files) via the log in {build_s:.1f} s")
    cfg = LogConfig()  # what a broker opens it with: default segment.bytes and 10 MiB indexes
    times = []
    for _ in range(sc["open_reps"]):
        gc.collect()
        t = perf_ns()
        lg = Log.open(directory, cfg, clock=SYSTEM_CLOCK, recovery_point=leo, had_clean_shutdown=True)
        times.append(perf_ns() - t)
        assert lg.num_segments == sc["open_segments"] and lg.log_end_offset == leo, lg
        assert lg.load_stats.recovered_segments == 0
        lg.close()
    if prof.enabled:
        with prof.section(f"Log.open clean, {sc['open_segments']:,} segments"):
            lg = Log.open(directory, cfg, clock=SYSTEM_CLOCK, recovery_point=leo, had_clean_shutdown=True)
        lg.close()
    shutil.rmtree(directory.parent)
    return dict(segments=sc["open_segments"], files=files, open_s=statistics.median(times) / 1e9,
                open_all=[t / 1e9 for t in times], build_s=build_s)


def bench_roll(root: Path, sc: dict, prof: Profiler) -> dict:
    """Cost of an append that rolls: the new segment's three files are renamed into place from
    the log's spares (made, the indexes sized and reserved, by the flush after the previous
    roll) and its indexes mapped; the old one gets its last time index entry. Sealing the old
    segment (trims) and making the next spares is the flush the broker schedules on a worker
    thread after a roll: run here after each timed append, outside the timing, as the broker
    runs it beside the request path.

    The same batches are appended, interleaved, to a second log whose segments never fill: its
    latencies are the plain-append baseline of the same run (a loaded machine slows both)."""
    template, n = producer_batch(10 * RECORD_BYTES + 61, RECORD_BYTES, now_ms() - 86_400_000)
    res = {}
    for label, index_bytes in (("default", LogConfig().segment_index_bytes), ("4k", 4 * KiB)):
        directory = root / f"roll-{label}" / PARTITION_DIR
        cfg = config(**{"segment.bytes": len(template), "segment.index.bytes": index_bytes})
        plain_directory = root / f"roll-{label}-plain" / PARTITION_DIR
        plain_cfg = config(**{"segment.bytes": 64 * MiB, "segment.index.bytes": index_bytes})
        lg = Log.open(directory, cfg, clock=SYSTEM_CLOCK)
        plain = Log.open(plain_directory, plain_cfg, clock=SYSTEM_CLOCK)
        lat, plain_lat = [], []
        try:
            lg.append_as_leader(template)
            plain.append_as_leader(template)
            gc.collect()
            for j in range(1, sc["rolls"] + 1):
                batch = restamp(template, j * n)
                t = perf_ns()
                info = lg.append_as_leader(batch)
                lat.append(perf_ns() - t)
                assert info.roll_reason == "size", info
                t = perf_ns()
                info = plain.append_as_leader(batch)
                plain_lat.append(perf_ns() - t)
                assert info.roll_reason is None, info
                lg.flush_pending()  # the broker's background flush after a roll (not timed)
        finally:
            lg.close()
            plain.close()
        shutil.rmtree(directory.parent)
        shutil.rmtree(plain_directory.parent)
        lat.sort()
        plain_lat.sort()
        res[label] = (index_bytes, percentile(lat, 50), percentile(lat, 99), percentile(plain_lat, 50),
                      percentile(plain_lat, 99))
    return res


# -- 4b. recovery after an unclean shutdown ----------------------------------------------------


def bench_recovery(root: Path, sc: dict, prof: Profiler) -> dict:
    directory = root / "recovery" / PARTITION_DIR
    batch, n = producer_batch(BATCH_BYTES, RECORD_BYTES, now_ms() - 60_000)
    count = sc["recovery_total"] // len(batch)
    cfg = config(**{"segment.bytes": 64 * MiB})
    lg = Log.open(directory, cfg, clock=SYSTEM_CLOCK)
    for _ in range(count):
        lg.append_as_leader(batch)
    leo, size, segments = lg.log_end_offset, lg.size, lg.num_segments
    lg.flush()
    lg.close()
    log(f"recovery: {count:,} batches, {size / MiB:,.0f} MiB in {segments} segments")
    times = []
    for _ in range(sc["recovery_reps"]):
        gc.collect()
        t = perf_ns()
        lg = Log.open(directory, cfg, clock=SYSTEM_CLOCK, recovery_point=0, had_clean_shutdown=False)
        times.append(perf_ns() - t)
        st = lg.load_stats
        assert lg.log_end_offset == leo and st.truncated_bytes == 0 and st.recovered_segments == segments, st
        lg.close()
    if prof.enabled:
        with prof.section("Log.open unclean, recovery_point=0"):
            lg = Log.open(directory, cfg, clock=SYSTEM_CLOCK, recovery_point=0, had_clean_shutdown=False)
        lg.close()
    shutil.rmtree(directory.parent)
    med = statistics.median(times)
    return dict(size=size, segments=segments, batches=count, seconds=med / 1e9, mbs=size / MB / (med / 1e9),
                all_mbs=[size / MB / (t / 1e9) for t in times])


# -- main --------------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, finishes in < 30 s")
    parser.add_argument("--profile", action="store_true", help="print a cProfile summary of each section")
    parser.add_argument("--tmp", default="/tmp", help="parent of the temporary directory (default /tmp)")
    args = parser.parse_args()
    sc = scales(args.quick)

    free = shutil.disk_usage(args.tmp).free
    need = sc["append_total"] * 1.1 + 300 * MiB + sc["recovery_total"] * 1.1
    if free < 2 * need:
        factor = max(1, int(2 * need // max(free, 1)) + 1)
        sc["append_total"] //= factor
        sc["recovery_total"] //= factor
        print(f"note: only {free / MiB:,.0f} MiB free under {args.tmp}: append/recovery sizes divided by {factor}")

    print(f"machine: {os.cpu_count()} CPUs (nproc {len(os.sched_getaffinity(0))}), "
          f"{platform.processor() or platform.machine()}, Linux {platform.release()}")
    print(f"load:    {' '.join(f'{x:.2f}' for x in os.getloadavg())} (1/5/15 min) at start; "
          "other processes on the 2 cores show up as noise in the tails")
    print(f"python:  {platform.python_implementation()} {platform.python_version()} ({sys.executable})")
    print(f"mode:    {'quick' if args.quick else 'full'}; temp dir under {args.tmp} "
          f"({free / 2**30:,.0f} GiB free); page cache only, no fsync per write, caches not dropped")
    print(flush=True)

    prof = Profiler(args.profile)
    started = perf_ns()
    root = Path(tempfile.mkdtemp(prefix="triolog-bench-", dir=args.tmp))
    try:
        ap = bench_append(root, sc, prof)
        rd = bench_reads(root, sc, prof)
        op = bench_open(root, sc, prof)
        rl = bench_roll(root, sc, prof)
        rc = bench_recovery(root, sc, prof)
        va = bench_validation(root, sc, prof)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    wall = (perf_ns() - started) / 1e9

    ratio = ap["log_mbs"] / ap["plain_mbs"]
    r64, r1m, rcold, ts = rd[f"read_{64 * KiB}"], rd[f"read_{MiB}"], rd["read_cold"], rd["ts"]
    rows = [
        ("append: plain os.write, 16 KiB chunks",
         f"{ap['plain_mbs']:,.0f} MB/s  {ap['plain_bps']:,.0f} batches/s", "(baseline)", ""),
        ("append: Log.append_as_leader, 64 MiB segs",
         f"{ap['log_mbs']:,.0f} MB/s  {ap['log_bps']:,.0f} batches/s", "", ""),
        ("append: log / plain", f"{ratio:.2f}", ">= 0.70", ratio >= 0.7),
        ("append: log / plain in CPU time (load-proof)",
         f"{ap['cpu_ratio']:.2f}  ({ap['per_batch_log_cpu_ns'] / 1000:.1f} vs {ap['per_batch_plain_cpu_ns'] / 1000:.1f} µs)",
         "(info)", ""),
        (f"read 64 KiB, {rd['segments']:,} segs  p50 / p99",
         f"{fmt_us(r64[0])} / {fmt_us(r64[1])}", "p99 <= 100 µs", r64[1] <= 100_000),
        (f"read 1 MiB,  {rd['segments']:,} segs  p50 / p99",
         f"{fmt_us(r1m[0])} / {fmt_us(r1m[1])}", "p99 <= 100 µs", r1m[1] <= 100_000),
        ("read 64 KiB after clean reopen p50 / p99",
         f"{fmt_us(rcold[0])} / {fmt_us(rcold[1])}", "(info)", ""),
        ("lookup by timestamp  p50 / p99", f"{fmt_us(ts[0])} / {fmt_us(ts[1])}", "(none set)", ""),
        (f"open clean log, {op['segments']:,} segments", f"{op['open_s'] * 1000:,.0f} ms", "<= 1 s",
         op["open_s"] <= 1.0),
        (f"append that rolls, {rl['default'][0] // MiB} MiB indexes p50 / p99",
         f"{fmt_us(rl['default'][1])} / {fmt_us(rl['default'][2])}", "p99 <= 1 ms", rl['default'][2] <= 1_000_000),
        ("  plain append in the same run  p50 / p99",
         f"{fmt_us(rl['default'][3])} / {fmt_us(rl['default'][4])}", "(baseline)", ""),
        (f"append that rolls, {rl['4k'][0] // KiB} KiB indexes  p50 / p99",
         f"{fmt_us(rl['4k'][1])} / {fmt_us(rl['4k'][2])}", "(info)", ""),
        (f"recovery, {rc['size'] / MiB:,.0f} MiB from offset 0",
         f"{rc['mbs']:,.0f} MB/s  ({rc['seconds'] * 1000:,.0f} ms)", "(none set)", ""),
    ]
    for name, v in va.items():
        rows.append((f"append, full validation / header-only: {name}",
                     f"{v['ratio']:.2f}  ({v['walk_us']:,.1f} vs {v['header_us']:,.1f} µs)", "(info)", ""))

    print()
    print(f"details: producer batch {ap['batch_size']:,} B = {ap['n_records']} records of ~{RECORD_BYTES} B; "
          f"append {ap['count']:,} batches = {ap['total'] / MiB:,.0f} MiB per side, "
          f"{ap['segments']} segments of 64 MiB")
    print(f"         append reps MB/s: plain {', '.join(f'{x:,.0f}' for x in ap['plain_all'])}; "
          f"log {', '.join(f'{x:,.0f}' for x in ap['log_all'])} (medians compared); per batch: "
          f"plain {ap['per_batch_plain_ns'] / 1000:.1f} µs, log {ap['per_batch_log_ns'] / 1000:.1f} µs")
    print(f"         read log: {rd['segments']:,} segments of 256 KiB ({rd['log_mib']:,.0f} MiB, "
          f"{rd['batch_size']:,} B batches, index.interval.bytes 4096); {sc['reads']:,} random reads per "
          f"fetch size, {sc['ts_lookups']:,} timestamp lookups; p99.9: 64 KiB {fmt_us(r64[2])}, "
          f"1 MiB {fmt_us(r1m[2])}, reopened {fmt_us(rcold[2])}, timestamp {fmt_us(ts[2])}")
    print(f"         open: {op['files']:,} files, built through the log in {op['build_s']:.1f} s; "
          f"opens (s): {', '.join(f'{x:.3f}' for x in op['open_all'])}")
    print(f"         recovery: {rc['segments']} segments, {rc['batches']:,} batches; reps MB/s: "
          f"{', '.join(f'{x:,.0f}' for x in rc['all_mbs'])}")
    print()
    w1 = max(len(r[0]) for r in rows)
    w2 = max(len(r[1]) for r in rows)
    w3 = max(len(r[2]) for r in rows)
    print(f"{'figure':<{w1}}  {'value':<{w2}}  {'goal':<{w3}}  result")
    print("-" * (w1 + w2 + w3 + 14))
    for name, value, goal, ok in rows:
        verdict = "" if ok == "" else ("PASS" if ok else "MISS")
        print(f"{name:<{w1}}  {value:<{w2}}  {goal:<{w3}}  {verdict}")
    print(f"\nMB = 10^6 bytes; latencies per call, perf_counter_ns; total wall time {wall:.1f} s; "
          f"load at end {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
