#!/usr/bin/env python
"""The long fault run on a cluster (issue 25, part 7). Not a test: it prints figures (the CI test,
tests/cluster/test_fault_harness.py, runs a dozen faults).

    .venv/bin/python bench/cluster_faults.py                         # 100 faults, safe setting, + acks=1 demo
    .venv/bin/python bench/cluster_faults.py --faults 300 --seed 7 --setting safe --setting unclean

A three-node ZooKeeper ensemble and three brokers on loopback; idempotent acks=all confluent-kafka
producers writing unique values to a 3-partition topic (RF=3, min.insync.replicas=2) and a
consumer reading along, while a seeded nemesis kills -9 and restarts partition leaders and the
controller, kills ZooKeeper nodes, stops a leader past its session (a zombie) and cuts the
unflushed tail of a killed broker's active segments. After each fault the cluster heals; at the
end every partition is read from offset 0 and every replica's files compared. See
tests/cluster/fault_harness.py for what each figure means. Exits 1 if the safe setting lost,
duplicated or contradicted anything, or the cluster did not heal.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.cluster.fault_harness import (  # noqa: E402
    ACKS_1,
    FAULT_KINDS,
    SAFE,
    UNCLEAN,
    format_result,
    run_acks1_loss,
    run_faults,
)

SETTINGS = {"safe": SAFE, "acks=1": ACKS_1, "unclean": UNCLEAN}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--faults", type=int, default=100)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--setting",
        action="append",
        choices=sorted(SETTINGS),
        help="settings to run under the random faults (repeatable; default: safe)",
    )
    parser.add_argument("--kind", action="append", choices=FAULT_KINDS, help="fault kinds (default: all)")
    parser.add_argument(
        "--no-acks1-demo", dest="demo", action="store_false", help="without the acks=1 run that must show a loss"
    )
    parser.add_argument("--keep", action="store_true", help="keep the data directories and logs")
    parser.add_argument("--quiet", action="store_true", help="no line per fault")
    args = parser.parse_args()
    log = (lambda line: None) if args.quiet else (lambda line: print(line, flush=True))
    work = Path(tempfile.mkdtemp(prefix="triolog-cluster-faults-"))
    failed = False
    try:
        results = []
        for name in args.setting or ["safe"]:
            result = run_faults(
                work / name.replace("=", ""),
                SETTINGS[name],
                faults=args.faults,
                seed=args.seed,
                kinds=tuple(args.kind or FAULT_KINDS),
                log=log,
            )
            results.append(result)
            print(format_result(result), flush=True)
            if name == "safe" and (not result.verdict.ok or result.unhealed):
                failed = True
        if args.demo:
            result = run_acks1_loss(work / "acks1-demo", seed=args.seed, log=log)
            results.append(result)
            print(format_result(result), flush=True)
            if not result.verdict.lost:
                print("the acks=1 demo lost nothing: the checker or the demo is broken", flush=True)
                failed = True
        print()
        for result in results:
            print(format_result(result))
        return 1 if failed else 0
    finally:
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
