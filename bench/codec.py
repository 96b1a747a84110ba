#!/usr/bin/env python
"""The record codec per record: compiled core, the same source interpreted, and main's code before it.

    .venv/bin/python bench/codec.py            # ~1 min
    .venv/bin/python bench/codec.py --quick    # ~15 s
    .venv/bin/python bench/codec.py --baseline-ref main~5   # another baseline commit

protocol/record_codec.py (triolog/core.py) runs compiled and interpreted in one process; the
baseline is the pre-codec code (protocol/records.py's encoder and decoder, pipeline/columnar.py's
loop, protocol/record_walk.py's walk) taken from git at ``--baseline-ref`` (default: the last commit
before record_codec.py existed) and imported under another package name. Every function runs on the
same batches, interleaved rep by rep; medians, and ratios in the same run:

* encode: Record objects -> the records section of a batch;
* decode: the records section -> Record objects (RecordBatch.records);
* consumer: -> ConsumerRecords (Consumer.poll; the baseline built Records, then ConsumerRecords);
* columns: -> column lists for Arrow (the Spark source);
* walk: the broker's validation walk (nothing built).

Batches: 16 KiB of 100-byte values with 8-byte keys, 16 KiB of 1 KiB values, 16 KiB of 100-byte
values with two headers each. Times are the thread's CPU time, so other processes on a loaded
machine count less (their cache and memory traffic still does); the ratios hold better.
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from triolog.client.types import ConsumerRecord  # noqa: E402
from triolog.client.types import RecordColumns  # noqa: E402
from triolog import core  # noqa: E402
from triolog.protocol.record_batch import HEADER_SIZE, read_header  # noqa: E402
from triolog.protocol.records import Record, encode_batch  # noqa: E402

NOW = 1_700_000_000_000
#: The baseline: main just before the codec moved into protocol/record_codec.py.
DEFAULT_BASELINE = "8674770"


def _batch(value_size: int, headers: tuple = (), target: int = 16 * 1024):
    records = []
    size = 0
    while size < target:
        i = len(records)
        records.append(Record(i, NOW + i // 10, b"key-%04d" % (i % 10_000), b"v" * value_size, headers))
        size += value_size + 20 + sum(len(k) + len(v) + 2 for k, v in headers)
    batch = encode_batch(records)
    return records, batch[HEADER_SIZE:], read_header(batch)


CASES = {
    "16 KiB, 100 B values": _batch(100),
    "16 KiB, 1 KiB values": _batch(1024),
    "16 KiB, 100 B + 2 headers": _batch(100, (("trace", b"0123456789abcdef"), ("type", b"event"))),
}


def _codec_functions(codec, records, payload, header):
    count, base, ts = header.records_count, header.base_offset, header.base_timestamp
    return {
        "encode": lambda: codec.encode_records(records, base, records[0].timestamp),
        "decode": lambda: codec.decode_records(payload, count, base, ts, None, Record),
        "consumer": lambda: codec.decode_consumer_records(payload, count, base, ts, None, 0, [], ConsumerRecord,
                                                          "topic", 0, "CreateTime"),
        "columns": lambda: codec.decode_columns(payload, count, base, ts, None, 0, None, RecordColumns(), True),
        "walk": lambda: codec.walk_records(payload, 0, count, ts, min_timestamp=0, max_timestamp=NOW + 3_600_000),
    }


def _baseline_functions(modules, records, payload, header):
    records_module, columnar, walk = modules
    count, base, ts = header.records_count, header.base_offset, header.base_timestamp

    def consumer():  # what Consumer._buffer did per record before the codec
        out = []
        for record in records_module._parse_records(payload, header):
            if record.offset >= 0:
                out.append(ConsumerRecord("topic", 0, record.offset, record.timestamp, record.key, record.value,
                                          record.headers, "CreateTime"))
        return out

    return {
        "encode": lambda: records_module._encode_records(records, base, records[0].timestamp),
        "decode": lambda: records_module._parse_records(payload, header),
        "consumer": consumer,
        "columns": lambda: columnar._records(payload, header, columnar.Columns(), 0, 1 << 62, True),
        "walk": lambda: walk.walk_records(payload, 0, count, ts, min_timestamp=0, max_timestamp=NOW + 3_600_000),
    }


def _load_baseline(ref: str, into: Path):
    """protocol/ and pipeline/columnar.py of ``ref``, importable as ``baseline_protocol`` (whose
    relative imports resolve inside it) and ``baseline_columnar``; None when git cannot give them."""
    package = into / "baseline_protocol"
    package.mkdir()
    try:
        names = subprocess.run(["git", "-C", str(ROOT), "ls-tree", "--name-only", ref, "protocol/"], check=True,
                               capture_output=True, text=True).stdout.split()
        for name in names:
            if name.endswith(".py"):
                text = subprocess.run(["git", "-C", str(ROOT), "show", f"{ref}:{name}"], check=True,
                                      capture_output=True, text=True).stdout
                (package / Path(name).name).write_text(text)
        columnar = subprocess.run(["git", "-C", str(ROOT), "show", f"{ref}:pipeline/columnar.py"], check=True,
                                  capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        print(f"no baseline ({ref}): {exc}", file=sys.stderr)
        return None
    (into / "baseline_columnar.py").write_text(
        columnar.replace("from triolog.protocol.records import", "from baseline_protocol.records import"))
    sys.path.insert(0, str(into))
    return (importlib.import_module("baseline_protocol.records"), importlib.import_module("baseline_columnar"),
            importlib.import_module("baseline_protocol.record_walk"))


def _per_record_ns(function, count: int, budget_s: float) -> float:
    """CPU nanoseconds (this thread's: other processes on a loaded machine are not counted) per
    record of one timed loop of about ``budget_s``."""
    loops = 1
    while True:
        start = time.thread_time_ns()
        for _ in range(loops):
            function()
        elapsed = time.thread_time_ns() - start
        if elapsed > budget_s * 1e9:
            return elapsed / loops / count
        loops *= 2


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer, shorter repetitions")
    parser.add_argument("--baseline-ref", default=DEFAULT_BASELINE, help="git commit of the baseline code")
    args = parser.parse_args()
    reps, budget = (3, 0.02) if args.quick else (7, 0.05)
    implementations = {"pure": core.implementation("protocol.record_codec", compiled=False)}
    if core.compiled_available("protocol.record_codec"):
        implementations["compiled"] = core.implementation("protocol.record_codec", compiled=True)
    with tempfile.TemporaryDirectory() as tmp:
        baseline = _load_baseline(args.baseline_ref, Path(tmp))
        print(f"core: {core.status()}; python {sys.version.split()[0]}; baseline {args.baseline_ref if baseline else '-'}; "
              f"{reps} interleaved reps, medians, ns per record")
        print(f"{'batch':27} {'function':9} {'main':>8} {'pure':>8} {'compiled':>9} {'pure/main':>10} "
              f"{'main/compiled':>14} {'compiled rec/s':>15}")
        for case, (records, payload, header) in CASES.items():
            contenders = {name: _codec_functions(module, records, payload, header)
                          for name, module in implementations.items()}
            if baseline:
                contenders = {"main": _baseline_functions(baseline, records, payload, header), **contenders}
            for function in ("encode", "decode", "consumer", "columns", "walk"):
                times: dict[str, list[float]] = {name: [] for name in contenders}
                for _ in range(reps):
                    for name, functions in contenders.items():
                        times[name].append(_per_record_ns(functions[function], len(records), budget))
                m = {name: statistics.median(values) for name, values in times.items()}
                main_ns, pure_ns, compiled_ns = m.get("main"), m["pure"], m.get("compiled")

                def cell(value, width, fmt="{:.1f}"):
                    return f"{'-' if value is None else fmt.format(value):>{width}}"

                print(f"{case:27} {function:9} {cell(main_ns, 8)} {cell(pure_ns, 8)} {cell(compiled_ns, 9)} "
                      f"{cell(main_ns and pure_ns / main_ns, 10, '{:.2f}')} "
                      f"{cell(main_ns and compiled_ns and main_ns / compiled_ns, 14, '{:.1f}x')} "
                      f"{cell(compiled_ns and 1e9 / compiled_ns, 15, '{:,.0f}')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
