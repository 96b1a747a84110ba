#!/usr/bin/env python
"""End-to-end benchmark: the real broker process on loopback, one producer and one consumer process.

    .venv/bin/python bench/e2e.py            # full run (~1-2 min on this 2-core VM)
    .venv/bin/python bench/e2e.py --quick    # smaller counts
    .venv/bin/python bench/e2e.py --latency-only [--baseline DIR]
                                             # only figure 4; with --baseline also against a broker
                                             # run from another source tree, runs alternating

Figures, in one run:
1. produce throughput with the client's ``Producer.send()`` (records/s, MB/s of values) for
   100-byte and 1 KiB values with acks=1 and acks=all (linger 5 ms, 256 KiB batches);
2. (info) broker ingest from one process sending pre-encoded 256 KiB batches back to back: what
   the broker sustains when the client's per-record Python work is taken out of the picture;
3. fetch throughput: MB/s of record batches delivered to a raw-protocol consumer reading the
   100-byte topic from offset 0, next to a plain loopback socket moving the same number of bytes
   in the same run (ratio), and records/s when the client's ``Consumer`` decodes them;
4. produce latency (send() to acknowledgement) p50/p99 at a fixed 20,000 records/s, acks=1,
   linger 0, after a second of warm-up at that rate (goal of issue 12: p99 <= 2 ms; with
   --baseline, the median p99 of each broker over the runs, the brokers taking turns).

The broker keeps its data in a temp directory (page cache; acks=all fsyncs with group commit).
Goals (issue 3): fetch >= 0.5 of the plain socket; produce >= 500,000 records/s of 100 B with
acks=1; p99 <= 5 ms at the fixed rate.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import shutil
import socket
import struct
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from tests.e2e.broker_process import BrokerProcess  # noqa: E402

MB = 1_000_000
BATCH_BYTES = 256 * 1024


# -- topics --------------------------------------------------------------------------------------


def create_topic(port: int, name: str) -> None:
    from triolog.client import AdminClient
    from triolog.client.types import NewTopic

    with AdminClient(f"127.0.0.1:{port}") as admin:
        admin.create_topics([NewTopic(name, num_partitions=1)])


# -- worker processes (each reports through a queue) ------------------------------------------------


def produce_with_client(port: int, topic: str, value_size: int, acks: int, count: int, out) -> None:
    from triolog.client import Producer

    value = b"v" * value_size
    with Producer(f"127.0.0.1:{port}", acks=acks, linger_ms=5, batch_size=BATCH_BYTES) as producer:
        producer.send(topic, value).get(30)  # metadata and connection outside the timing
        start = time.perf_counter()
        for _ in range(count):
            producer.send(topic, value, partition=0)
        producer.flush()
        elapsed = time.perf_counter() - start
    out.put(elapsed)


def produce_prebuilt_batches(port: int, topic: str, value_size: int, acks: int, count: int, out) -> None:
    """One encoded batch sent ``count / records_per_batch`` times, 8 requests in flight."""
    from triolog.protocol import messages as m
    from triolog.protocol.frames import encode_frame
    from triolog.protocol.records import build_batch

    now = int(time.time() * 1000)
    per_batch = max(1, BATCH_BYTES // (value_size + 10))
    batch = build_batch([(None, b"v" * value_size, now, ())] * per_batch)
    batches = max(1, count // per_batch)
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    reader = sock.makefile("rb")

    def frame(i: int) -> bytes:
        return encode_frame(m.encode_request(m.ProduceRequest(
            id=i, acks=acks, timeout_ms=30_000,
            topics=(m.ProduceTopic(name=topic, partitions=(m.ProducePartition(partition=0, records=batch),)),))))

    def answer() -> None:
        (length,) = struct.unpack(">I", reader.read(4))
        doc = m.decode_response(reader.read(length), "produce")
        assert doc["topics"][0]["partitions"][0]["error_code"] == 0, doc

    start = time.perf_counter()
    in_flight = 0
    for i in range(batches):
        sock.sendall(frame(i + 1))
        in_flight += 1
        if in_flight == 8:
            answer()
            in_flight -= 1
    while in_flight:
        answer()
        in_flight -= 1
    elapsed = time.perf_counter() - start
    sock.close()
    out.put((elapsed, batches * per_batch))


def fetch_raw(port: int, topic: str, end_offset: int, out) -> None:
    """Fetch everything from offset 0 with 8 MiB fetches; count the record bytes delivered."""
    from triolog.protocol import messages as m
    from triolog.protocol.frames import encode_frame
    from triolog.protocol.record_batch import read_header

    sock = socket.create_connection(("127.0.0.1", port))
    reader = sock.makefile("rb", buffering=1 << 20)
    offset, delivered, request_id = 0, 0, 0
    start = time.perf_counter()
    while offset < end_offset:
        request_id += 1
        sock.sendall(encode_frame(m.encode_request(m.FetchRequest(
            id=request_id, max_wait_ms=0, min_bytes=1, max_bytes=8 << 20,
            topics=(m.FetchTopic(name=topic, partitions=(
                m.FetchPartition(partition=0, fetch_offset=offset, partition_max_bytes=8 << 20),)),)))))
        (length,) = struct.unpack(">I", reader.read(4))
        doc = m.decode_response(reader.read(length), "fetch")
        records = doc["topics"][0]["partitions"][0]["records"]
        delivered += len(records)
        # The next offset: walk the batch headers (61 bytes each), never the records.
        position, view = 0, memoryview(records)
        while position + 61 <= len(records):
            header = read_header(view[position:position + 61])
            offset = header.base_offset + header.last_offset_delta + 1
            position += header.size
    elapsed = time.perf_counter() - start
    sock.close()
    out.put((elapsed, delivered))


def consume_with_client(port: int, topic: str, end_offset: int, out) -> None:
    from triolog.client import Consumer, TopicPartition

    tp = TopicPartition(topic, 0)
    with Consumer(f"127.0.0.1:{port}", max_poll_records=1_000_000, max_partition_fetch_bytes=8 << 20) as consumer:
        consumer.assign([tp])
        consumer.seek(tp, 0)
        count, start = 0, time.perf_counter()
        while count < end_offset:
            count += sum(map(len, consumer.poll(1000).values()))
        out.put((time.perf_counter() - start, count))


def socket_sender(port: int, total: int, chunk: int) -> None:
    data = b"x" * chunk
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sent = 0
        while sent < total:
            sock.sendall(data)
            sent += chunk


#: Seconds each fixed-rate run sends at its rate before it starts counting: the first second of a
#: fresh process and connection (imports finishing, caches, the broker's first appends to the
#: topic) is not the steady state the p99 is about.
WARMUP_S = 1.0


def produce_at_fixed_rate(port: int, topic: str, rate: int, seconds: float, out, warmup_s: float = WARMUP_S) -> None:
    from triolog.client import Producer

    value = b"v" * 100
    latencies: list[float] = []
    with Producer(f"127.0.0.1:{port}", acks=1, linger_ms=0, batch_size=BATCH_BYTES) as producer:
        producer.send(topic, value).get(30)
        if warmup_s > 0:
            send_at_rate(producer, topic, value, rate, warmup_s, [])
        sent = send_at_rate(producer, topic, value, rate, seconds, latencies)
        producer.flush()
    out.put((sent, sorted(latencies)))


def send_at_rate(producer, topic: str, value: bytes, rate: int, seconds: float, latencies: list) -> int:
    """Send ``rate`` records a second for ``seconds``, each one's send-to-acknowledgement time
    appended to ``latencies``; the number sent."""
    tick = 0.001
    start = time.perf_counter()
    sent = 0
    while True:
        now = time.perf_counter()
        if now - start >= seconds:
            break
        due = int((now - start) * rate) + 1
        while sent < due:
            sent_at = time.perf_counter()
            future = producer.send(topic, value, partition=0)
            future.add_done_callback(lambda f, t=sent_at: latencies.append(time.perf_counter() - t))
            sent += 1
        pause = start + sent / rate - time.perf_counter()
        if pause > 0:
            time.sleep(min(pause, tick))
    producer.flush()
    return sent


# -- runs ------------------------------------------------------------------------------------------


def in_process(target, *args):
    """Run ``target`` in its own (spawned) process and return what it put on the queue."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    process = ctx.Process(target=target, args=(*args, queue))
    process.start()
    result = queue.get(timeout=600)
    process.join(60)
    return result


def plain_socket_rate(total: int, chunk: int = 8 << 20) -> float:
    """MB/s of ``total`` bytes from a sender process to this one over a loopback socket."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        ctx = mp.get_context("spawn")
        sender = ctx.Process(target=socket_sender, args=(port, total, chunk))
        sender.start()
        conn, _ = server.accept()
        received, buffer = 0, bytearray(1 << 20)
        start = time.perf_counter()
        with conn:
            while True:
                n = conn.recv_into(buffer)
                if not n:
                    break
                received += n
        elapsed = time.perf_counter() - start
        sender.join(30)
    return received / elapsed / MB


def percentile(sorted_values: list[float], q: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def fixed_rate_latency(ports: dict[str, int], seconds: float, reps: int) -> None:
    """Figure 4 against each broker (label -> port), the brokers taking turns, ``reps`` runs each."""
    results: dict[str, list[tuple[float, float, float, int]]] = {label: [] for label in ports}
    for label, port in ports.items():
        create_topic(port, "latency")
    for _ in range(reps):
        for label, port in ports.items():
            sent, latencies = in_process(produce_at_fixed_rate, port, "latency", 20_000, seconds)
            results[label].append((percentile(latencies, 0.50) * 1000, percentile(latencies, 0.99) * 1000,
                                   latencies[-1] * 1000, sent))
    medians = {}
    for label, runs in results.items():
        runs_text = "; ".join(f"p50 {p50:.2f} p99 {p99:.2f} max {top:.2f} ({sent:,} records)"
                              for p50, p99, top, sent in runs)
        print(f"   {label:<10} runs: {runs_text} ms")
    for label, runs in results.items():
        p50s, p99s = sorted(r[0] for r in runs), sorted(r[1] for r in runs)
        medians[label] = median_p50, median_p99 = p50s[len(p50s) // 2], p99s[len(p99s) // 2]
        print(f"   {label:<10} median of {len(runs)}: p50 {median_p50:.2f} ms, p99 {median_p99:.2f} ms   "
              f"goal p99 <= 2 ms: {'PASS' if median_p99 <= 2 else 'MISS'}")
    if "baseline" in medians and len(medians) > 1:
        (base50, base99), (this50, this99) = medians["baseline"], medians["this tree"]
        print(f"   this tree / baseline: p50 {this50 / base50:.2f}, p99 {this99 / base99:.2f}")


def latency_only(args) -> int:
    from latency import start_broker_from

    workdir = Path(tempfile.mkdtemp(prefix="triolog-bench-e2e-"))
    baseline = None
    broker = BrokerProcess(workdir / "data").start()
    try:
        ports = {}
        if args.baseline is not None:
            baseline, ports["baseline"] = start_broker_from(args.baseline.resolve(), workdir / "baseline")
        ports["this tree"] = broker.port
        load = os.getloadavg()
        print(f"4. produce latency at a fixed 20,000 records/s (100 B, acks=1, linger 0), load "
              f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} CPUs")
        fixed_rate_latency(ports, 2.0 if args.quick else 5.0, args.reps)
    finally:
        if baseline is not None:
            baseline.terminate()
            baseline.wait(30)
        broker.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smaller counts")
    parser.add_argument("--latency-only", action="store_true", help="only figure 4 (fixed-rate produce latency)")
    parser.add_argument("--baseline", type=Path, help="with --latency-only: also a broker run from this source tree")
    parser.add_argument("--reps", type=int, default=3, help="with --latency-only: runs per broker (default 3)")
    args = parser.parse_args()
    if args.latency_only:
        return latency_only(args)
    scale = 0.2 if args.quick else 1.0
    counts = {100: int(400_000 * scale), 1024: int(100_000 * scale)}

    workdir = Path(tempfile.mkdtemp(prefix="triolog-bench-e2e-"))
    broker = BrokerProcess(workdir / "data").start()
    port = broker.port
    print(f"triolog e2e benchmark: broker pid {broker.process.pid} on 127.0.0.1:{port}, Python {sys.version.split()[0]}, "
          f"{os.cpu_count()} CPUs")
    try:
        print("\n1. produce with Producer.send() (linger 5 ms, 256 KiB batches, one partition)")
        send_rate_100_acks1 = 0.0
        for value_size, acks in ((100, 1), (100, -1), (1024, 1), (1024, -1)):
            topic = f"send-{value_size}-{'all' if acks == -1 else acks}"
            create_topic(port, topic)
            count = counts[value_size]
            elapsed = in_process(produce_with_client, port, topic, value_size, acks, count)
            rate = count / elapsed
            if (value_size, acks) == (100, 1):
                send_rate_100_acks1 = rate
            print(f"   {value_size:>5} B acks={'all' if acks == -1 else acks:<3}  {rate:>10,.0f} records/s  "
                  f"{rate * value_size / MB:7.1f} MB/s   ({count:,} records)")

        print("\n2. (info) broker ingest of pre-encoded 256 KiB batches, 8 requests in flight")
        ingest_topic = "ingest-100-1"
        for value_size, acks in ((100, 1), (100, -1), (1024, 1)):
            topic = f"ingest-{value_size}-{'all' if acks == -1 else acks}"
            create_topic(port, topic)
            elapsed, records = in_process(produce_prebuilt_batches, port, topic, value_size, acks,
                                          int(3_000_000 * scale) if value_size == 100 else int(600_000 * scale))
            rate = records / elapsed
            print(f"   {value_size:>5} B acks={'all' if acks == -1 else acks:<3}  {rate:>10,.0f} records/s  "
                  f"{rate * value_size / MB:7.1f} MB/s   ({records:,} records)")

        print("\n3. fetch the 100 B ingest topic from offset 0")
        end_offset = _end_offset(port, ingest_topic)
        elapsed, delivered = in_process(fetch_raw, port, ingest_topic, end_offset)
        fetch_rate = delivered / elapsed / MB
        socket_rate = plain_socket_rate(delivered)
        ratio = fetch_rate / socket_rate
        print(f"   raw fetch (8 MiB)     {fetch_rate:8.1f} MB/s of batches   ({delivered / MB:,.0f} MB, "
              f"{end_offset:,} records)")
        print(f"   plain loopback socket {socket_rate:8.1f} MB/s             same bytes, 8 MiB writes")
        print(f"   ratio                 {ratio:8.2f}   goal >= 0.5: {'PASS' if ratio >= 0.5 else 'MISS'}")
        decode_count = min(end_offset, int(1_000_000 * scale))
        elapsed, decoded = in_process(consume_with_client, port, ingest_topic, decode_count)
        print(f"   Consumer.poll decode  {decoded / elapsed:>10,.0f} records/s ({decoded:,} records)")

        print("\n4. produce latency at a fixed 20,000 records/s (100 B, acks=1, linger 0)")
        create_topic(port, "latency")
        sent, latencies = in_process(produce_at_fixed_rate, port, "latency", 20_000, 5.0 * max(scale, 0.4))
        p50, p99 = percentile(latencies, 0.50) * 1000, percentile(latencies, 0.99) * 1000
        print(f"   {sent:,} records: p50 {p50:.2f} ms, p99 {p99:.2f} ms, max {latencies[-1] * 1000:.2f} ms   "
              f"goal p99 <= 5 ms: {'PASS' if p99 <= 5 else 'MISS'}")

        print("\nsummary")
        print(f"   produce 100 B acks=1 with send(): {send_rate_100_acks1:,.0f} records/s   goal >= 500,000: "
              f"{'PASS' if send_rate_100_acks1 >= 500_000 else 'MISS'}")
        print(f"   fetch / plain socket: {ratio:.2f}   p99 at 20k/s: {p99:.2f} ms")
    finally:
        broker.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


def _end_offset(port: int, topic: str) -> int:
    from triolog.client import Consumer, TopicPartition

    with Consumer(f"127.0.0.1:{port}") as consumer:
        tp = TopicPartition(topic, 0)
        return consumer.end_offsets([tp])[tp]


if __name__ == "__main__":
    sys.exit(main())
