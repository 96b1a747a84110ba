#!/usr/bin/env python
"""Consume through our own client, every record decoded: compiled core, pure Python, and main's client.

    .venv/bin/python bench/consume.py            # 1,000,000 x 100 B and 200,000 x 1 KiB, 2 reps
    .venv/bin/python bench/consume.py --quick    # a fifth of that, 1 rep

The real broker process on loopback (data in a temp directory, page cache) holds one partition of
100-byte values and one of 1 KiB values (8-byte keys), filled with pre-encoded 256 KiB batches.
Each contender is one process reading the partition from offset 0 to its end and touching every
value (``len``), interleaved rep by rep, medians (``--max-poll-records``, default 1000, and
``--fetch-bytes``, default Kafka's 1 MiB, set the consumers):

* ``poll``: ``Consumer.poll()`` with the compiled core (ConsumerRecords straight from the decoder);
* ``poll_columns``: ``Consumer.poll_columns()`` (columns, no object a record), compiled;
* ``poll (pure)``: ``Consumer.poll()`` with ``TRIOLOG_PURE_PYTHON=1``;
* ``poll (baseline)``: the client of ``--baseline-ref`` (git; default: main before the codec moved
  into protocol/record_codec.py), run from a temporary checkout of that commit.

Goals (issue 12): >= 1M records/s of 100 B and >= 400 MB/s of 1 KiB values with poll().
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from baseline_tree import export_tree  # noqa: E402
from tests.e2e.broker_process import BrokerProcess  # noqa: E402

DEFAULT_BASELINE = "8674770"
BATCH_BYTES = 256 * 1024

CONSUME = r"""
import json, sys, time
from triolog.client import Consumer, TopicPartition
from triolog import core
port, topic, end, columns = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1"
poll_records, fetch_bytes = int(sys.argv[5]), int(sys.argv[6])
tp = TopicPartition(topic, 0)
with Consumer(f"127.0.0.1:{port}", max_poll_records=poll_records, max_partition_fetch_bytes=fetch_bytes) as consumer:
    consumer.assign([tp])
    consumer.seek(tp, 0)
    count = size = 0
    start = time.perf_counter()
    while count < end:
        if columns:
            for part in consumer.poll_columns(1000).values():
                count += len(part)
                size += sum(map(len, part.values))
        else:
            for records in consumer.poll(1000).values():
                count += len(records)
                size += sum([len(r.value) for r in records])
    elapsed = time.perf_counter() - start
print(json.dumps({"elapsed": elapsed, "count": count, "bytes": size, "core": getattr(core, "status", lambda: "-")()}))
"""


def fill(port: int, topic: str, value_size: int, count: int) -> int:
    from triolog.client import AdminClient
    from triolog.client.types import NewTopic
    from triolog.protocol import messages as m
    from triolog.protocol.frames import encode_frame
    from triolog.protocol.records import build_batch

    with AdminClient(f"127.0.0.1:{port}") as admin:
        admin.create_topics([NewTopic(topic, num_partitions=1)])
    now = int(time.time() * 1000)
    per_batch = max(1, BATCH_BYTES // (value_size + 20))
    batch = build_batch([(b"key-%04d" % i, b"v" * value_size, now, ()) for i in range(per_batch)])
    batches = max(1, count // per_batch)
    with socket.create_connection(("127.0.0.1", port)) as sock:
        reader = sock.makefile("rb")
        for i in range(batches):
            sock.sendall(encode_frame(m.encode_request(m.ProduceRequest(
                id=i + 1, acks=1, timeout_ms=30_000,
                topics=(m.ProduceTopic(name=topic, partitions=(m.ProducePartition(partition=0, records=batch),)),)))))
            (length,) = struct.unpack(">I", reader.read(4))
            doc = m.decode_response(reader.read(length), "produce")
            assert doc["topics"][0]["partitions"][0]["error_code"] == 0, doc
    return batches * per_batch


def checkout(ref: str, into: Path) -> Path | None:
    """A temporary copy of commit ``ref`` (its triolog/ links to its own folders)."""
    try:
        export_tree(ref, into)
    except (OSError, subprocess.CalledProcessError) as exc:
        print(f"no baseline ({ref}): {exc}", file=sys.stderr)
        return None
    return into


def run(cwd: Path, port: int, topic: str, end: int, columns: bool, pure: bool, args) -> dict:
    env = {**os.environ, "TRIOLOG_PURE_PYTHON": "1" if pure else ""}
    result = subprocess.run([sys.executable, "-c", CONSUME, str(port), topic, str(end), "1" if columns else "0",
                             str(args.max_poll_records), str(args.fetch_bytes)],
                            cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    if result.returncode:
        raise RuntimeError(result.stderr)
    return json.loads(result.stdout)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--reps", type=int, default=None)
    parser.add_argument("--baseline-ref", default=DEFAULT_BASELINE)
    parser.add_argument("--max-poll-records", type=int, default=1000, help="records a poll returns at most")
    parser.add_argument("--fetch-bytes", type=int, default=1 << 20, help="max.partition.fetch.bytes")
    args = parser.parse_args()
    scale = 5 if args.quick else 1
    reps = args.reps or (1 if args.quick else 2)
    tmp = Path(tempfile.mkdtemp(prefix="triolog-consume-bench-"))
    broker = BrokerProcess(tmp / "data").start()
    try:
        port = broker.port
        topics = {"100 B": ("small", 100, fill(port, "small", 100, 1_000_000 // scale)),
                  "1 KiB": ("large", 1024, fill(port, "large", 1024, 200_000 // scale))}
        (tmp / "baseline").mkdir()
        baseline = checkout(args.baseline_ref, tmp / "baseline")
        contenders = {"poll": (ROOT, False, False), "poll_columns": (ROOT, True, False),
                      "poll (pure)": (ROOT, False, True)}
        if baseline:
            contenders[f"poll (baseline {args.baseline_ref})"] = (baseline, False, False)
        print(f"{reps} interleaved reps, medians; one consumer process each (max_poll_records "
              f"{args.max_poll_records}, max_partition_fetch_bytes {args.fetch_bytes}), broker on loopback", flush=True)
        print(f"{'values':7} {'contender':28} {'records/s':>12} {'MB/s':>8} {'vs baseline':>12}  core")
        for label, (topic, size, end) in topics.items():
            rates: dict[str, list[float]] = {name: [] for name in contenders}
            cores = {}
            for _ in range(reps):
                for name, (cwd, columns, pure) in contenders.items():
                    result = run(cwd, port, topic, end, columns, pure, args)
                    assert result["count"] == end and result["bytes"] == end * size, result
                    rates[name].append(result["count"] / result["elapsed"])
                    cores[name] = result["core"]
            base = statistics.median(rates[list(contenders)[-1]]) if baseline else None
            for name in contenders:
                rate = statistics.median(rates[name])
                ratio = f"{rate / base:.2f}x" if base else "-"
                print(f"{label:7} {name:28} {rate:12,.0f} {rate * size / 1e6:8.1f} {ratio:>12}  {cores[name]}",
                      flush=True)
    finally:
        broker.kill()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
