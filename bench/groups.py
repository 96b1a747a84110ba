#!/usr/bin/env python
"""Consumer groups: rebalance time for 3 members, and commit latency.

    .venv/bin/python bench/groups.py             # 10 rebalance rounds, 1000 commits
    .venv/bin/python bench/groups.py --quick     # 3 rounds, 200 commits

The real broker process on loopback (data in a temp directory), ``group.initial.rebalance.delay.ms``
0 by default (``--initial-delay-ms``: Kafka's default is 3000, which every first join of an
empty group then waits), a 6-partition topic, each member a separate process
(``tests/e2e/group_member.py``: its own connections, its own heartbeat thread; session 3 s,
heartbeat 300 ms, polls of 200 ms). Figures, medians over the rounds:

* ``3 members join``: from starting three member processes until each holds 2 partitions (with
  process start-up, ~0.3 s of Python imports; also shown without it: from the first member's
  first assignment line);
* ``4th joins``: a fourth member joins a Stable group of 3: from its start-up until all four
  hold their new partitions (Kafka's eager rebalance: everyone rejoins at its next poll);
* ``member leaves``: one member closes (leave_group): until the other three hold 2 partitions;
* ``commit``: ``Consumer.commit()`` of 6 partitions' offsets, one at a time (each waits for the
  __consumer_offsets append and its fsync): median and p99 in ms.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.e2e.broker_process import BrokerProcess  # noqa: E402
from tests.e2e.test_consumer_groups import Member  # noqa: E402
from triolog.client import AdminClient, Consumer, Producer  # noqa: E402
from triolog.client.types import NewTopic, TopicPartition  # noqa: E402


def wait(condition, timeout_s: float = 120.0) -> float:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return time.time()
        time.sleep(0.005)
    raise TimeoutError("the group did not settle")


def settled(members, count: int) -> bool:
    """Every member's latest assignment has ``count`` partitions and together they cover all 6."""
    parts = [m.partitions() for m in members]
    return all(p is not None and len(p) == count for p in parts) and sorted(sum(parts, [])) == list(range(6))


def rebalance_round(bootstrap: str, out_dir: Path, group: str, topic: str) -> dict[str, float]:
    import tests.e2e.test_consumer_groups as layout

    layout.GROUP, layout.TOPIC = group, topic  # Member() reads them
    start = time.time()
    members = [Member(bootstrap, out_dir, f"{group}-m{i}") for i in range(3)]
    try:
        done = wait(lambda: settled(members, 2))
        first_line = min(line["at"] for m in members for line in m.lines() if "joined" in line)
        out = {"3 members join (with start-up)": done - start, "3 members join": done - first_line}
        start = time.time()
        members.append(Member(bootstrap, out_dir, f"{group}-m3"))
        done = wait(lambda: all(m.partitions() is not None and len(m.partitions()) in (1, 2) for m in members)
                    and sorted(sum((m.partitions() for m in members), [])) == list(range(6)))
        out["4th joins (with start-up)"] = done - start
        leaving = members.pop(0)
        start = time.time()
        leaving.stop()
        done = wait(lambda: settled(members, 2))
        out["member leaves"] = done - start
        return out
    finally:
        for member in members:
            if member.process.poll() is None:
                member.stop()


def commit_latencies(bootstrap: str, topic: str, count: int) -> list[float]:
    with Consumer(bootstrap, group_id="bench-commits", enable_auto_commit=False, session_timeout_ms=6000,
                  heartbeat_interval_ms=500) as consumer:
        consumer.subscribe([topic])
        while len(consumer.assignment()) < 6:
            consumer.poll(100)
        out = []
        for i in range(count):
            offsets = {TopicPartition(topic, p): i for p in range(6)}
            started = time.perf_counter()
            consumer.commit(offsets)
            out.append((time.perf_counter() - started) * 1000)
            if i % 100 == 0:
                consumer.poll(0)  # a poll now and then, as an application would (max_poll_interval_ms)
        return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--commits", type=int, default=None)
    parser.add_argument("--initial-delay-ms", type=int, default=0, help="group.initial.rebalance.delay.ms")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON too")
    args = parser.parse_args()
    rounds = args.rounds or (3 if args.quick else 10)
    commits = args.commits or (200 if args.quick else 1000)
    with tempfile.TemporaryDirectory() as tmp:
        broker = BrokerProcess(Path(tmp) / "data", (f"group.initial.rebalance.delay.ms={args.initial_delay_ms}",
                                                    "group.min.session.timeout.ms=1000")).start()
        try:
            bootstrap = f"127.0.0.1:{broker.port}"
            topic = "bench-groups"
            with AdminClient(bootstrap) as admin:
                admin.create_topics([NewTopic(topic, 6)])
            with Producer(bootstrap) as producer:
                for i in range(600):
                    producer.send(topic, b"x" * 100, partition=i % 6)
            out_dir = Path(tmp) / "members"
            out_dir.mkdir()
            figures: dict[str, list[float]] = {}
            for i in range(rounds):
                for name, seconds in rebalance_round(bootstrap, out_dir, f"bench-{i}", topic).items():
                    figures.setdefault(name, []).append(seconds * 1000)
            latencies = commit_latencies(bootstrap, topic, commits)
        finally:
            broker.kill()
    print(f"rebalance, {rounds} rounds (group.initial.rebalance.delay.ms={args.initial_delay_ms}), median ms "
          f"[min-max]:")
    for name, values in figures.items():
        print(f"  {name:32} {statistics.median(values):8.1f}   [{min(values):.1f}-{max(values):.1f}]")
    latencies.sort()
    p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
    print(f"commit of 6 partitions, {commits} commits: median {statistics.median(latencies):.2f} ms, "
          f"p99 {p99:.2f} ms, max {latencies[-1]:.2f} ms")
    if args.json:
        print(json.dumps({"rebalance_ms": {k: statistics.median(v) for k, v in figures.items()},
                          "commit_ms": {"median": statistics.median(latencies), "p99": p99}}))


if __name__ == "__main__":
    main()
