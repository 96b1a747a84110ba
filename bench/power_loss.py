#!/usr/bin/env python
"""Simulated power losses of the storage layer, at scale (the CI test runs ~2,000).

    .venv/bin/python bench/power_loss.py                    # 10,000+ power losses (~1.5 min)
    .venv/bin/python bench/power_loss.py --lives 100 --seed 7000
    .venv/bin/python bench/power_loss.py --compacted        # plus a compacted topic being cleaned

Each life is a fresh in-memory FaultFS (tests/storage/faultfs.py) with two topics; each epoch
runs a random broker workload (appends with acks=1 and acks=-1, rolls, flushes, checkpoints,
delete_records, retention, topic deletion and re-creation, clean restarts), cuts the power at a
random disk mutation (a quarter of the boots lose power again during recovery), recovers and
checks: no acknowledged record lost, no corrupt batch served, offsets contiguous, acks=1 losses
only a suffix, log start never past what was deleted, time indexes ending at the segment's
largest timestamp. With ``--compacted`` a third topic (cleanup.policy=compact) is cleaned by the
log cleaner in-process, through the same FaultFS, so the power also goes in cleaning passes and
in the middle of swaps; its check: every key's latest acknowledged record (or a newer one) is
served, tombstones removed only with every older record of their key. Seeded: a reported seed
replays with ``--lives 1 --seed N`` (and ``--compacted`` if it was given).
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.storage.power_loss import Life, Stats  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lives", type=int, default=1700, help="fresh file systems to run (default 1700)")
    parser.add_argument("--epochs", type=int, default=5, help="power losses per life, besides those in recovery")
    parser.add_argument("--actions", type=int, default=30, help="workload actions per epoch")
    parser.add_argument("--seed", type=int, default=100_000, help="first seed (default 100000, apart from CI's)")
    parser.add_argument("--compacted", action="store_true",
                        help="add a compacted topic that the log cleaner cleans (power lost mid-clean and mid-swap)")
    args = parser.parse_args()

    total = Stats()
    started = time.perf_counter()
    for n, seed in enumerate(range(args.seed, args.seed + args.lives), 1):
        total.add(Life(seed, actions=args.actions, compacted=args.compacted).run(args.epochs))
        if n % 200 == 0 or n == args.lives:
            print(f"  {n:>6} lives  {total.power_losses:>7,} power losses  {time.perf_counter() - started:6.1f} s",
                  flush=True)
    elapsed = time.perf_counter() - started
    print()
    print(f"seeds                          {args.seed}..{args.seed + args.lives - 1}")
    print(f"simulated power losses         {total.power_losses:,} ({total.recovery_crashes:,} during recovery)")
    print(f"records appended               {total.appended_records:,}")
    print(f"acknowledged records (acks=-1) {total.acknowledged_records:,}"
          f" (checked intact {total.acknowledged_checks:,} times after power losses)")
    print(f"acknowledged records lost      {total.lost_acknowledged:,}")
    print(f"corrupted batches served       {total.corrupted:,}")
    print(f"acks=1 records lost (suffixes) {total.lost_unacknowledged:,}")
    if args.compacted:
        print(f"cleaning rounds / swaps        {total.cleaning_rounds:,} / {total.swaps:,}")
        print(f"power losses in cleaning       {total.losses_in_cleaning:,} ({total.losses_in_swap:,} mid-swap)")
        print(f"compacted keys checked         {total.keys_checked:,}")
    print(f"violations                     {len(total.violations):,}")
    peak_rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS of this process       {peak_rss_mib:.0f} MiB")
    print(f"time                           {elapsed:.1f} s ({elapsed / max(total.power_losses, 1) * 1000:.1f} ms per power loss)")
    for violation in total.violations[:20]:
        print("\n" + violation)
    return 1 if total.violations else 0


if __name__ == "__main__":
    sys.exit(main())
