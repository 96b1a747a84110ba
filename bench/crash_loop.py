#!/usr/bin/env python
"""The long kill -9 loop (issue 10). Not a test: it prints figures (the CI test runs 21 cycles).

    .venv/bin/python bench/crash_loop.py                    # 200 cycles (~5 min on a 2-core VM)
    .venv/bin/python bench/crash_loop.py --cycles 1000 --seed 3 --max-serve 2

The real broker is started, killed with SIGKILL (at random moments, mid-roll, mid-clean, mid-
retention, mid-startup, right after a topic was re-created) and restarted, ``--cycles`` times,
while producers (acks=-1 and acks=1, every codec) write numbered, checksummed records to plain,
compacted and retention-limited topics with small segments, and one topic is deleted and
re-created again and again (``--no-churn`` leaves it out). Then everything is read back and
counted; see tests/e2e/crash_harness.py for what each figure means. Exits 1 if anything
acknowledged was lost, duplicated or corrupted.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.e2e.crash_harness import format_result, run_crash_loop  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cycles", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--max-serve", type=float, default=1.0,
                        help="longest time a broker serves before a random kill, in seconds")
    parser.add_argument("--no-churn", dest="churn", action="store_false",
                        help="without the topic deleted and re-created again and again (and its kill moment)")
    parser.add_argument("--keep", action="store_true", help="keep the data directory and the broker log")
    parser.add_argument("--quiet", action="store_true", help="no line per cycle")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="triolog-crash-loop-"))
    try:
        result = run_crash_loop(work / "data", cycles=args.cycles, seed=args.seed, max_serve_s=args.max_serve,
                                churn=args.churn,
                                progress=None if args.quiet else lambda line: print(line, flush=True))
        print()
        print(format_result(result))
        violations = result.counts.violations()
        print("violations:                ", violations or "none")
        return 1 if violations else 0
    finally:
        if args.keep:
            print(f"data kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
