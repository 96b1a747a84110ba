#!/usr/bin/env python
"""Fuzz each target for a million inputs (issue 10). Not a test: it prints figures.

    .venv/bin/python bench/fuzz.py                          # 1,000,000 inputs per target
    .venv/bin/python bench/fuzz.py --runs 200000 --targets requests
    .venv/bin/python bench/fuzz.py --keep                   # keep the findings and new inputs

Each target (tests/fuzz/targets.py: ``requests`` = frame decoder + request decoding, ``validator``
= the produce batch validator) runs under atheris with the seed corpus of tests/fuzz/corpus and
goes on past unexpected exceptions, counting them (tests/fuzz/run.py, TRIOLOG_FUZZ_COLLECT).
Printed per target: inputs tried, unhandled exceptions (total and distinct kinds, with the first
input and traceback of each kind saved), peak RSS of the fuzzing process, time. Exits 1 if any
target had an unhandled exception or did not finish its runs.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FUZZ = ROOT / "tests" / "fuzz"


def run_target(target: str, runs: int, work: Path, seed: int, max_total_time: int) -> dict:
    scratch, findings = work / target / "new-inputs", work / target / "findings"
    scratch.mkdir(parents=True)
    args = [sys.executable, "-m", "tests.fuzz.run", target, f"-runs={runs}", f"-seed={seed}",
            f"-max_total_time={max_total_time}", "-max_len=16384", "-timeout=30", "-rss_limit_mb=3072",
            "-print_final_stats=1", "-print_pcs=0", f"-artifact_prefix={work / target}/", str(scratch),
            str(FUZZ / "corpus" / target)]
    if target == "requests":
        args.insert(4, f"-dict={FUZZ / 'requests.dict'}")
    began = time.monotonic()
    log_path = work / target / "libfuzzer.log"
    with open(log_path, "w") as log:
        code = subprocess.call(args, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                               env={**os.environ, "PYTHONPATH": str(ROOT), "TRIOLOG_FUZZ_COLLECT": str(findings)})
    output = log_path.read_text(errors="replace")
    executed = re.search(r"stat::number_of_executed_units:\s*(\d+)", output)
    rss = re.search(r"stat::peak_rss_mb:\s*(\d+)", output)
    kinds: collections.Counter[str] = collections.Counter()
    findings_log = findings / "findings.log"
    if findings_log.exists():
        with open(findings_log) as f:
            for line in f:
                kinds[line.split("\t", 1)[0]] += 1
    crash = None
    if code != 0:  # libFuzzer stopped: out of memory, a timeout, or a crash it caught itself
        crash = next((line for line in output.splitlines() if line.startswith("==") and "ERROR" in line),
                     f"exit code {code}")
    return dict(target=target, code=code, executed=int(executed.group(1)) if executed else 0,
                peak_rss_mb=int(rss.group(1)) if rss else 0, kinds=kinds, seconds=time.monotonic() - began,
                crash=crash, findings=findings)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=1_000_000)
    parser.add_argument("--targets", nargs="+", default=["requests", "validator"])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--max-total-time", type=int, default=6 * 3600, help="seconds per target at most")
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="triolog-fuzz-"))
    failed = False
    try:
        for target in args.targets:
            r = run_target(target, args.runs, work, args.seed, args.max_total_time)
            total = sum(r["kinds"].values())
            print(f"target {target}:")
            print(f"  inputs tried:           {r['executed']:,} of {args.runs:,} in {r['seconds']:.0f} s"
                  f" ({r['executed'] / max(r['seconds'], 1e-9):,.0f}/s)")
            print(f"  unhandled exceptions:   {total:,} ({len(r['kinds'])} kinds)")
            for kind, count in r["kinds"].most_common():
                print(f"    {count:>9,}  {kind}")
            if r["crash"]:
                print(f"  libFuzzer stopped:      {r['crash']}")
            print(f"  peak RSS (fuzzer):      {r['peak_rss_mb']} MB")
            failed |= bool(total) or r["code"] != 0 or r["executed"] < args.runs
        if args.keep:
            print(f"findings, new inputs and libFuzzer logs kept in {work}")
        return 1 if failed else 0
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
