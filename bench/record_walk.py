#!/usr/bin/env python
"""The validator's record walk per record: the compiled core next to the same source interpreted.

    .venv/bin/python bench/record_walk.py            # ~15 s
    .venv/bin/python bench/record_walk.py --quick    # ~3 s

Both implementations of protocol/record_walk.py (protocol/core.py) walk the same batches in one
process, interleaved rep by rep, and the medians are compared as a ratio. Batches (uncompressed
record bytes, what the walk sees after decompression):

* 16 KiB of 100-byte values with 8-byte keys (a producer's default batch: one-byte varints);
* 16 KiB of 1 KiB values (two-byte length varints);
* 16 KiB of 100-byte values with two headers each (the headers loop);
* one 100-byte record (the per-call overhead of a 1-record produce).

Without a built extension (no compiler at install time, or TRIOLOG_PURE_PYTHON) only the pure
figures are printed.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from triolog.protocol import core  # noqa: E402
from triolog.protocol.record_batch import HEADER  # noqa: E402
from triolog.protocol.records import Record, encode_batch  # noqa: E402

NOW = 1_700_000_000_000


def _batch(value_size: int, headers: tuple = (), target: int = 16 * 1024) -> tuple[bytes, int]:
    records = []
    size = 0
    while size < target or not records:
        i = len(records)
        records.append(Record(i, NOW + i // 10, b"key-%04d" % (i % 10_000), b"v" * value_size, headers))
        size += value_size + 20 + sum(len(k) + len(v) + 2 for k, v in headers)
        if target == 0:
            break
    batch = encode_batch(records)
    return batch[HEADER.size:], len(records)


CASES = {
    "16 KiB, 100 B values": _batch(100),
    "16 KiB, 1 KiB values": _batch(1024),
    "16 KiB, 100 B + 2 headers": _batch(100, (("trace", b"0123456789abcdef"), ("type", b"event"))),
    "1 record, 100 B": _batch(100, target=0),
}


def _per_record_ns(walk, payload: bytes, count: int, budget_s: float) -> float:
    """Nanoseconds per record of the fastest of a few timed loops filling ``budget_s``."""
    loops = 1
    while True:  # calibrate: a timed loop of about budget_s / 5
        start = time.perf_counter_ns()
        for _ in range(loops):
            walk(payload, 0, count, NOW, min_timestamp=0, max_timestamp=NOW + 3_600_000)
        elapsed = time.perf_counter_ns() - start
        if elapsed > budget_s * 1e9 / 5:
            break
        loops *= 2
    return elapsed / loops / count


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer, shorter repetitions")
    args = parser.parse_args()
    reps, budget = (3, 0.05) if args.quick else (7, 0.2)
    pure = core.implementation("record_walk", compiled=False).walk_records
    compiled = core.implementation("record_walk", compiled=True).walk_records if core.COMPILED else None
    print(f"core: {core.status()}; python {sys.version.split()[0]}; {reps} interleaved reps, medians")
    print(f"{'batch':28} {'records':>7} {'pure ns/rec':>12} {'compiled ns/rec':>16} {'speed-up':>9} "
          f"{'compiled rec/s':>15}")
    for name, (payload, count) in CASES.items():
        assert pure(payload, 0, count, NOW) == (compiled or pure)(payload, 0, count, NOW)
        pure_ns, compiled_ns = [], []
        for _ in range(reps):
            pure_ns.append(_per_record_ns(pure, payload, count, budget))
            if compiled:
                compiled_ns.append(_per_record_ns(compiled, payload, count, budget))
        p = statistics.median(pure_ns)
        if compiled:
            c = statistics.median(compiled_ns)
            print(f"{name:28} {count:7d} {p:12.1f} {c:16.1f} {p / c:8.1f}x {1e9 / c:15,.0f}")
        else:
            print(f"{name:28} {count:7d} {p:12.1f} {'-':>16} {'-':>9} {'-':>15}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
