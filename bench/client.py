#!/usr/bin/env python
"""The Python client's own throughput, against the real broker on loopback, before and after.

    .venv/bin/python bench/client.py              # full run
    .venv/bin/python bench/client.py --quick      # small counts, 1 rep
    .venv/bin/python bench/client.py --baseline-ref main~3 --reps 5 --sizes 100
    .venv/bin/python bench/client.py --micro      # per-record costs in process: producer vs encoder

One broker process (as bench/e2e.py starts it, data in a temp directory); each measurement is one
fresh client process on 127.0.0.1 (a producer, or a consumer reading what a producer wrote):

* ``call``: the cost of ``Producer.send()`` alone (first size only): the sender thread idle
  (linger 60 s, one huge batch) while the loop is timed, so no encoding competes for the GIL;
* ``send``: ``Producer.send(topic, value, partition=0)`` per record, then ``flush()``;
* ``send_many``: the bulk call, ``Producer.send_many(topic, values, partition=0)`` in chunks of
  ``--chunk`` values, then ``flush()`` (only where the client has it);
* ``poll``: ``Consumer.poll()`` from offset 0 until every record was returned, each record
  touched (``len(record.value)``), so every record is really decoded.

acks=1 (``--acks``), linger default (5 ms), one partition, ``--batch-size`` bytes per batch, ``--in-flight``
requests, ``--idempotence`` on/off (on needs ``--acks all``). Records/s and MB/s
(value bytes; 1 MB = 10^6 B): medians of ``--reps`` interleaved repetitions. Two client
implementations run side by side in the same run: ``new`` (this checkout) and ``base`` (the
source of ``--baseline-ref``, exported with ``git archive`` to a temp directory and run as is,
i.e. without compiled extensions unless ``--baseline-compiled`` builds them there); the ratio
column is new / base. Each client process imports
``triolog`` from its own root (its working directory), so the two never mix.

It ends with issue 12's client goals (send >= 500k, send_many >= 1.5M, poll >= 1M records/s of
100 B; 1 KiB produce >= 300 MB/s, 1 KiB poll >= 400 MB/s) against this checkout's medians, and,
given ``--rstream`` (rstream's four figures from the same sitting), the ratio to rstream (goal 2x).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from baseline_tree import export_tree  # noqa: E402
from tests.e2e.broker_process import BrokerProcess  # noqa: E402

MB = 1_000_000

#: Runs in a client process (cwd = the implementation's root): one measurement, one JSON line out.
WORKER = r'''
import json, sys, time
args = json.loads(sys.argv[1])
mode, port, topic, size, count = args["mode"], args["port"], args["topic"], args["size"], args["count"]
bootstrap = f"127.0.0.1:{port}"
import triolog
from triolog.client import Producer, Consumer, TopicPartition
try:
    from triolog import core
    status = core.status()
except ImportError:
    status = "no compiled core"
if mode == "poll":
    tp = TopicPartition(topic, 0)
    with Consumer(bootstrap, max_poll_records=1_000_000, max_partition_fetch_bytes=8 << 20) as consumer:
        consumer.assign([tp])
        consumer.seek(tp, 0)
        seen = touched = 0
        start = time.perf_counter()
        while seen < count:
            for records in consumer.poll(1000).values():
                for record in records:
                    touched += len(record.value)
                seen += len(records)
        elapsed = call_s = time.perf_counter() - start
    assert touched == seen * size, (touched, seen, size)
elif mode == "call":  # send() alone: the sender sleeps (linger 60 s, one huge batch) while we time
    value = b"v" * size
    with Producer(bootstrap, acks=1, linger_ms=60_000, batch_size=1 << 30, buffer_memory=1 << 34) as producer:
        warm_up = producer.send(topic, value, partition=0)
        producer.flush(30)
        warm_up.get(0)
        send = producer.send
        start = time.perf_counter()
        for _ in range(count):
            send(topic, value, partition=0)
        elapsed = call_s = time.perf_counter() - start
        producer.close(0)  # drop the huge batch: it is not what is measured
    count += 1
else:
    value = b"v" * size
    options = {"acks": 1, **args["producer_options"]}
    with Producer(bootstrap, batch_size=args["batch_size"], **options) as producer:
        producer.send(topic, value, partition=0).get(30)  # metadata and connection outside the timing
        if mode == "send":
            send = producer.send
            start = time.perf_counter()
            for _ in range(count):
                send(topic, value, partition=0)
            call_s = time.perf_counter() - start
            producer.flush()
            elapsed = time.perf_counter() - start
        else:
            chunk = args["chunk"]
            values = [value] * chunk
            send_many = producer.send_many
            start = time.perf_counter()
            done = 0
            while done < count:
                n = min(chunk, count - done)
                send_many(topic, values if n == chunk else values[:n], partition=0)
                done += n
            call_s = time.perf_counter() - start
            producer.flush()
            elapsed = time.perf_counter() - start
    count += 1  # the warm-up record is in the topic too
print(json.dumps({"elapsed": elapsed, "call_us": call_s / max(1, count - 1) * 1e6, "count": count, "status": status,
                  "has_send_many": hasattr(Producer, "send_many")}))
'''


def run_worker(root: Path, pure: bool, **args) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TRIOLOG_PURE_PYTHON")}
    if pure:
        env["TRIOLOG_PURE_PYTHON"] = "1"
    out = subprocess.run([sys.executable, "-c", WORKER, json.dumps(args)], cwd=root, env=env,
                         capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(f"client process failed ({root}, {args['mode']}):\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def micro(count: int, reps: int) -> None:
    """In this process, no broker: the producer-side cost per record (the accumulator's send()
    fast path and append_many, compiled and pure) next to what the sender thread spends encoding
    each record (``build_batch``, the codec's), the other half of every produced record's CPU."""
    from triolog import core
    from triolog.protocol.records import build_batch

    value = b"v" * 100
    values = [value] * 10_000
    records = [(None, value, 1_700_000_000_000, ())] * 2_500
    names = ["compiled", "pure"] if core.compiled_available("client.accumulator") else ["pure"]
    timings: dict[str, list[float]] = {}
    for _ in range(reps):
        for name in names:
            module = core.implementation("client.accumulator", name == "compiled")
            acc = module.RecordAccumulator(batch_size=256 * 1024, linger_s=60)
            acc.configure_fast_path(True, 1 << 40, 1)
            try_append = acc.try_append
            start = time.perf_counter()
            for _ in range(count):
                try_append("t", value, None, (), 0, None)
            timings.setdefault(f"send() fast path ({name})", []).append((time.perf_counter() - start) / count)
            acc = module.RecordAccumulator(batch_size=256 * 1024, linger_s=60)
            start = time.perf_counter()
            for _ in range(max(1, count // len(values))):
                acc.append_many("t", values, None, None, 0, None, None, 0.0)
            timings.setdefault(f"append_many ({name})", []).append(
                (time.perf_counter() - start) / (max(1, count // len(values)) * len(values)))
        start = time.perf_counter()
        for _ in range(max(1, count // len(records))):
            build_batch(records)
        timings.setdefault(f"build_batch, the sender's encode ({core.status()})", []).append(
            (time.perf_counter() - start) / (max(1, count // len(records)) * len(records)))
    print("\nper record, in process (100 B values, no broker), medians:")
    for label, values_ in timings.items():
        print(f"   {label:<58} {statistics.median(values_) * 1e6:7.3f} us")


def has_send_many(root: Path) -> bool:
    code = "import sys; from triolog.client import Producer; sys.exit(0 if hasattr(Producer, 'send_many') else 1)"
    return subprocess.run([sys.executable, "-c", code], cwd=root).returncode == 0


def create_topic(port: int, name: str) -> None:
    from triolog.client import AdminClient
    from triolog.client.types import NewTopic

    with AdminClient(f"127.0.0.1:{port}") as admin:
        admin.create_topics([NewTopic(name, num_partitions=1)])


def new_client_options(args) -> dict:
    """This checkout's producer settings from --in-flight, --acks and --idempotence."""
    options: dict = {"acks": -1 if args.acks in ("all", "-1") else int(args.acks)}
    if args.in_flight is not None:
        options["max_in_flight_requests_per_connection"] = args.in_flight
    if args.idempotence != "default":
        options["enable_idempotence"] = args.idempotence == "on"
    return options


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small counts, one rep")
    parser.add_argument("--reps", type=int, default=3, help="interleaved repetitions (median reported)")
    parser.add_argument("--count", type=int, default=1_000_000, help="records of 100 B per run (1 KiB: a quarter)")
    parser.add_argument("--sizes", default="100,1024", help="value sizes in bytes, comma-separated")
    parser.add_argument("--batch-size", type=int, default=256 * 1024, help="producer batch_size (bytes)")
    parser.add_argument("--in-flight", type=int, default=None,
                        help="producer max_in_flight_requests_per_connection of this checkout's client (default: "
                             "the client's own, Kafka's 5 when idempotent, else 1)")
    parser.add_argument("--acks", default="1", help="producer acks of this checkout's client: 1 (default), -1/all")
    parser.add_argument("--idempotence", choices=("default", "on", "off"), default="default",
                        help="this checkout's enable_idempotence ('on' needs --acks all; the default with acks=1 is off)")
    parser.add_argument("--chunk", type=int, default=10_000, help="values per send_many call")
    parser.add_argument("--baseline-ref", default="main", help="git ref of the baseline client ('' for none)")
    parser.add_argument("--baseline-compiled", action="store_true",
                        help="build the baseline's compiled extensions (setup.py build_ext --inplace) so base "
                             "runs compiled too: compiled before/after in one run")
    parser.add_argument("--modes", default="call,send,send_many,poll",
                        help="which measurements (call: send() alone, the sender idle)")
    parser.add_argument("--clients", default="new,pure,base",
                        help="which clients: new (this checkout), pure (this checkout, TRIOLOG_PURE_PYTHON=1), "
                             "base (--baseline-ref)")
    parser.add_argument("--rstream", default="",
                        help="RabbitMQ Streams' rstream figures measured in the same sitting (a separate peer "
                             "harness, with rstream's own client): "
                             "'produce 100 B rec/s,consume 100 B rec/s,produce 1 KiB MB/s,consume 1 KiB MB/s', "
                             "e.g. 247000,642000,189,178: the goals then print the ratios to it")
    parser.add_argument("--micro", action="store_true",
                        help="only the in-process per-record costs (producer side vs the encoder), no broker")
    args = parser.parse_args()
    if args.micro:
        micro(200_000 if args.quick else args.count, args.reps)
        return 0
    if args.quick:
        args.reps, args.count = 1, 200_000
    sizes = [int(s) for s in args.sizes.split(",")]
    modes = args.modes.split(",")

    workdir = Path(tempfile.mkdtemp(prefix="triolog-bench-client-"))
    clients = args.clients.split(",")
    roots = {name: ROOT for name in ("new", "pure") if name in clients}
    if args.baseline_ref and "base" in clients:
        roots["base"] = export_tree(args.baseline_ref, workdir / "base")
        if args.baseline_compiled:
            subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"], cwd=roots["base"],
                           check=True, capture_output=True)
    bulk = {name: has_send_many(root) for name, root in roots.items()}
    broker = BrokerProcess(workdir / "data").start()
    port = broker.port
    results: dict[tuple[str, int, str], list[float]] = {}
    calls: dict[tuple[str, int, str], list[float]] = {}
    statuses = {}
    topic_number = 0
    try:
        print(f"triolog client benchmark: broker pid {broker.process.pid} on 127.0.0.1:{port}, "
              f"Python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; "
              f"acks=1, batch_size {args.batch_size}, in flight {args.in_flight} (this checkout), {args.reps} rep(s)")
        for rep in range(args.reps):
            for size in sizes:
                count = args.count if size <= 100 else max(1, args.count // 4)
                for name, root in roots.items():
                    produced = None
                    for mode in modes:
                        if mode == "send_many" and not bulk[name]:
                            continue
                        if mode == "call" and size != sizes[0]:
                            continue
                        if mode == "poll":
                            if produced is None:
                                continue
                            topic, total = produced
                        else:
                            topic_number += 1
                            topic, total = f"bench-{topic_number}", count
                            create_topic(port, topic)
                        # The baseline client may predate max_in_flight_requests_per_connection.
                        options = {} if name == "base" else new_client_options(args)
                        result = run_worker(root, name == "pure", mode=mode, port=port, topic=topic, size=size, count=total,
                                            batch_size=args.batch_size, chunk=args.chunk, producer_options=options)
                        if mode in ("send", "send_many"):
                            produced = (topic, result["count"])
                        statuses[name] = result["status"]
                        rate = result["count"] / result["elapsed"]
                        results.setdefault((name, size, mode), []).append(rate)
                        calls.setdefault((name, size, mode), []).append(result["call_us"])
                        print(f"  rep {rep + 1} {name:>4} {size:>5} B {mode:<9} {rate:>12,.0f} records/s"
                              + ("" if mode == "poll" else f"   calls {result['call_us']:.2f} us/record"), flush=True)
    finally:
        broker.stop()
        shutil.rmtree(workdir, ignore_errors=True)

    print()
    for name, status in statuses.items():
        print(f"{name}: {args.baseline_ref if name == 'base' else ROOT} ({status})")
    print("\nrecords/s and MB/s (values) end to end, call = the time in send()/send_many() alone per record "
          "(before flush), medians; ratios against base")
    names = [name for name in ("new", "pure", "base") if name in roots]
    head = ["value", "mode"]
    for name in names:
        head += [f"{name} rec/s", f"{name} MB/s", f"{name} call us"]
    head += [f"{name}/base" for name in names if name != "base" and "base" in roots]
    rows = []
    for size in sizes:
        for mode in modes:
            if not any((name, size, mode) in results for name in names):
                continue
            row = [f"{size} B", mode]
            rates = {}
            for name in names:
                rate = results.get((name, size, mode))
                call = calls.get((name, size, mode))
                if rate:
                    rates[name] = statistics.median(rate)
                    row += [f"{rates[name]:,.0f}", f"{rates[name] * size / MB:.1f}",
                            "-" if mode == "poll" else f"{statistics.median(call):.2f}"]
                else:
                    row += ["-", "-", "-"]
            base_rate = rates.get("base")
            if base_rate is None and mode == "send_many" and ("base", size, "send") in results:
                base_rate = statistics.median(results[("base", size, "send")])
                row[1] = "send_many*"
            for name in names:
                if name != "base" and "base" in roots:
                    row.append(f"{rates[name] / base_rate:.2f}" if name in rates and base_rate else "-")
            rows.append(row)
    widths = [max(len(str(r[i])) for r in [head, *rows]) for i in range(len(head))]
    print("| " + " | ".join(h.rjust(w) for h, w in zip(head, widths)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for row in rows:
        print("| " + " | ".join(str(c).rjust(w) for c, w in zip(row, widths)) + " |")
    if "send_many" in modes and "base" in roots and not bulk.get("base", True):
        print("\n* the baseline has no send_many: its ratio is against the baseline's send() per record")
    print_goals(results, args.rstream)
    return 0


def print_goals(results: dict, rstream: str) -> None:
    """Issue 12's client goals against this checkout's (``new``) medians, and against rstream."""
    def median(size, mode):
        rates = results.get(("new", size, mode))
        return statistics.median(rates) if rates else None

    peers = [float(x) for x in rstream.split(",")] if rstream else []
    produce_1k = max(filter(None, (median(1024, "send"), median(1024, "send_many"))), default=None)
    rows = [  # label, figure, unit scale, goal, rstream figure (same unit) or None
        ("100 B send() per record", median(100, "send"), 1, 500_000, None),
        ("100 B send_many", median(100, "send_many"), 1, 1_500_000, None),
        ("100 B poll, every record decoded", median(100, "poll"), 1, 1_000_000, peers[1] if peers else None),
        ("1 KiB produce (best of send, send_many), MB/s", produce_1k, 1024 / MB, 300, peers[2] if peers else None),
        ("1 KiB poll, MB/s", median(1024, "poll"), 1024 / MB, 400, peers[3] if peers else None),
    ]
    print("\ngoals (issue 12), this checkout:")
    for label, rate, scale, goal, peer in rows:
        if rate is None:
            continue
        figure = rate * scale
        line = f"   {label:<48} {figure:>12,.0f}   goal {goal:>9,}  {'met' if figure >= goal else 'MISSED'}"
        if peer:
            ratio = figure / peer
            line += f"   {ratio:.2f}x rstream ({'met' if ratio >= 2 else 'MISSED'} 2x)"
        print(line)


if __name__ == "__main__":
    sys.exit(main())
