#!/usr/bin/env python
"""Bomb flood against the real broker (issue 10, item 3). Not a test: it prints figures.

    .venv/bin/python bench/bombs.py                        # every phase, 10 s each
    .venv/bin/python bench/bombs.py --phases wide slow --duration 20 --frame-mb 32

Each phase starts a fresh broker (so its VmHWM is that phase's peak), floods it from many
connections, and meanwhile a well-behaved client produces (acks=1) and fetches back one small
batch every 100 ms on its own connection. Phases:

* ``baseline``: no flood; the good client alone.
* ``wide``: frames of the frame limit holding one array of empty maps (1 byte each on the wire,
  a Python dict each once decoded), under an unknown key of an otherwise valid request.
* ``deep``: frames of the frame limit holding many 1,000-level nested arrays.
* ``zstd``: produce requests to a compacted topic whose one batch is a few KB of zstd that
  inflate to ``--zstd-mb`` MiB (the broker decompresses to check the keys).
* ``slow``: connections that send most of a frame at once, then one byte a second, never
  finishing it.
* ``all``: every kind of bomber at once.

Printed per phase: the broker's peak RSS (VmHWM) and open descriptors, the good client's
successes, failures and latency (p50/p99/max), and what the bombers got back. The bound the
issue asks for is queued.max.request.bytes + a fixed overhead (baseline VmHWM). A watchdog kills
the broker if its RSS passes ``--rss-cap-mb`` (the machine is shared); the phase says so.
"""

from __future__ import annotations

import argparse
import collections
import shutil
import socket
import struct
import sys
import tempfile
import threading
import time
from pathlib import Path

import msgpack
import zstandard

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from triolog.protocol import messages as m  # noqa: E402
from triolog.protocol.record_batch import CRC_OFFSET, CRC_START, CompressionType  # noqa: E402
from triolog.protocol.records import Record, encode_batch  # noqa: E402
from tests.e2e.broker_process import BrokerProcess  # noqa: E402
from tests.e2e.crash_harness import count_fds, read_status  # noqa: E402

MiB = 1 << 20
PHASES = ("baseline", "wide", "deep", "zstd", "slow", "all")


# -- the bombs -----------------------------------------------------------------------------------


def wide_bomb(frame_bytes: int) -> bytes:
    """{"api": "metadata", "v": 1, "id": 1, "x": [{}, {}, ...]} filling the frame."""
    head = msgpack.packb({"api": "metadata", "v": 1, "id": 1})
    head = bytes([head[0] + 1]) + head[1:]  # one more map entry: "x" below
    count = frame_bytes - len(head) - 2 - 5
    return head + msgpack.packb("x") + b"\xdd" + struct.pack(">I", count) + b"\x80" * count


def deep_bomb(frame_bytes: int, depth: int = 1000) -> bytes:
    """The same envelope around an array of ``depth``-level nested one-element arrays."""
    head = msgpack.packb({"api": "metadata", "v": 1, "id": 1})
    head = bytes([head[0] + 1]) + head[1:]
    one = b"\x91" * depth + b"\xc0"
    count = (frame_bytes - len(head) - 2 - 5) // len(one)
    return head + msgpack.packb("x") + b"\xdd" + struct.pack(">I", count) + one * count


def zstd_bomb_batch(inflated_bytes: int) -> bytes:
    """One keyed record's batch whose zstd payload inflates to ``inflated_bytes`` of zeros."""
    compressor = zstandard.ZstdCompressor(level=3).compressobj()
    chunk, parts, left = bytes(MiB), [], inflated_bytes
    while left:
        parts.append(compressor.compress(chunk[: min(left, MiB)]))
        left -= min(left, MiB)
    parts.append(compressor.flush())
    template = bytearray(encode_batch([Record(0, int(time.time() * 1000), b"k", b"v")],
                                      compression=CompressionType.ZSTD))
    batch = template[:61] + b"".join(parts)
    struct.pack_into(">i", batch, 8, len(batch) - 12)
    from crc32c import crc32c

    struct.pack_into(">I", batch, CRC_OFFSET, crc32c(memoryview(batch)[CRC_START:]))
    return bytes(batch)


def frame(payload: bytes) -> bytes:
    return struct.pack(">I", len(payload)) + payload


# -- the actors ----------------------------------------------------------------------------------


class Stats:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.answers: collections.Counter[str] = collections.Counter()

    def add(self, what: str) -> None:
        with self.lock:
            self.answers[what] += 1


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    chunks = []
    while n:
        chunk = sock.recv(min(n, MiB))
        if not chunk:
            raise ConnectionError("closed")
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def bomber(port: int, payload: bytes, stop: threading.Event, stats: Stats, kind: str) -> None:
    """Sends the bomb, waits for the answer (or the close), again, until stopped."""
    data = frame(payload)
    while not stop.is_set():
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
                while not stop.is_set():
                    sock.sendall(data)
                    (length,) = struct.unpack(">I", _recv_exact(sock, 4))
                    doc = msgpack.unpackb(_recv_exact(sock, length), raw=False, strict_map_key=False)
                    code = doc.get("error_code")
                    if not code and doc.get("topics") and "partitions" in doc["topics"][0]:
                        code = doc["topics"][0]["partitions"][0].get("error_code")  # produce: per partition
                    stats.add(f"{kind}: answered, error_code {code}")
        except (OSError, ConnectionError) as exc:
            if not stop.is_set():  # the broker is killed at the end of a phase: not an answer
                stats.add(f"{kind}: {type(exc).__name__}")
            stop.wait(0.05)


def slow_sender(port: int, frame_bytes: int, stop: threading.Event, stats: Stats) -> None:
    """Most of a frame at once, then a byte a second; never the end."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
            sock.sendall(struct.pack(">I", frame_bytes) + b"\x80" * (frame_bytes - 1024))
            stats.add("slow: frame started")
            while not stop.wait(1.0):
                sock.sendall(b"\x80")
            stats.add("slow: still open at the end")
    except OSError as exc:
        if not stop.is_set():
            stats.add(f"slow: {type(exc).__name__}")


class GoodClient(threading.Thread):
    """Produce one small batch (acks=1) and fetch it back every 100 ms; time each round trip."""

    def __init__(self, port: int, stop: threading.Event):
        super().__init__(daemon=True)
        self.port, self.stop = port, stop
        self.latencies: list[float] = []
        self.failures: collections.Counter[str] = collections.Counter()

    def run(self) -> None:
        sock = None
        next_id = 0
        while not self.stop.is_set():
            began = time.monotonic()
            try:
                if sock is None:
                    sock = socket.create_connection(("127.0.0.1", self.port), timeout=5)
                next_id += 1
                batch = encode_batch([Record(0, int(time.time() * 1000), b"good", b"x" * 100)])
                sock.sendall(frame(m.encode_request(m.ProduceRequest(id=next_id, acks=1, timeout_ms=5000, topics=(
                    m.ProduceTopic(name="good", partitions=(m.ProducePartition(partition=0, records=batch),)),)))))
                doc = m.decode_response(_recv_exact(sock, struct.unpack(">I", _recv_exact(sock, 4))[0]), "produce")
                result = doc["topics"][0]["partitions"][0]
                if result["error_code"]:
                    raise RuntimeError(f"produce error {result['error_code']}")
                next_id += 1
                sock.sendall(frame(m.encode_request(m.FetchRequest(
                    id=next_id, max_wait_ms=0, min_bytes=0, max_bytes=65536, topics=(m.FetchTopic(
                        name="good", partitions=(m.FetchPartition(partition=0, fetch_offset=result["base_offset"],
                                                                  partition_max_bytes=65536),)),)))))
                doc = m.decode_response(_recv_exact(sock, struct.unpack(">I", _recv_exact(sock, 4))[0]), "fetch")
                if doc["topics"][0]["partitions"][0]["error_code"] or not doc["topics"][0]["partitions"][0]["records"]:
                    raise RuntimeError("fetch returned nothing")
                self.latencies.append(time.monotonic() - began)
            except Exception as exc:  # timeouts, resets, errors: all count as a failed round trip
                self.failures[type(exc).__name__] += 1
                if sock is not None:
                    sock.close()
                    sock = None
            self.stop.wait(max(0.0, 0.1 - (time.monotonic() - began)))
        if sock is not None:
            sock.close()


class Watch(threading.Thread):
    """Peak RSS and fds of the broker; kills it past the RSS cap."""

    def __init__(self, broker: BrokerProcess, cap_kib: int):
        super().__init__(daemon=True)
        self.broker, self.cap_kib = broker, cap_kib
        self.pid = broker.process.pid
        self.peak_rss_kib = self.peak_hwm_kib = self.peak_fds = 0
        self.capped = False
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.is_set() and self.broker.process.poll() is None:
            status = read_status(self.pid)
            self.peak_rss_kib = max(self.peak_rss_kib, status.get("VmRSS", 0))
            self.peak_hwm_kib = max(self.peak_hwm_kib, status.get("VmHWM", 0))
            self.peak_fds = max(self.peak_fds, count_fds(self.pid))
            if status.get("VmRSS", 0) > self.cap_kib:
                self.capped = True
                self.broker.kill()
                return
            self.halt.wait(0.02)


# -- a phase -------------------------------------------------------------------------------------


def run_phase(phase: str, args, work: Path, bombs: dict[str, bytes]) -> dict:
    data_dir = work / phase / "data"
    data_dir.parent.mkdir(parents=True)
    broker = BrokerProcess(data_dir, (
        f"socket.request.max.bytes={args.frame_mb * MiB}",
        f"queued.max.request.bytes={args.queued_mb * MiB}",
        "log.cleaner.enable=false",
    ))
    broker.start()
    client = broker.client()
    client.call(m.CreateTopicsRequest(id=client.next_id(), topics=(
        m.NewTopic(name="good", num_partitions=1, replication_factor=1),
        m.NewTopic(name="compacted", num_partitions=1, replication_factor=1,
                   configs={"cleanup.policy": "compact", "max.message.bytes": str(8 * MiB)}))))
    client.close()
    watch = Watch(broker, args.rss_cap_mb * 1024)
    watch.start()
    stop, stats = threading.Event(), Stats()
    good = GoodClient(broker.port, stop)
    threads: list[threading.Thread] = []
    kinds = {"wide": ["wide"], "deep": ["deep"], "zstd": ["zstd"], "slow": ["slow"],
             "all": ["wide", "deep", "zstd", "slow"], "baseline": []}[phase]
    for kind in kinds:
        count = args.slow_connections if kind == "slow" else args.connections
        for _ in range(count):
            if kind == "slow":
                target, targs = slow_sender, (broker.port, args.frame_mb * MiB, stop, stats)
            else:
                target, targs = bomber, (broker.port, bombs[kind], stop, stats, kind)
            threads.append(threading.Thread(target=target, args=targs, daemon=True))
    good.start()
    began = time.monotonic()
    for thread in threads:
        thread.start()
    while time.monotonic() - began < args.duration and not watch.capped and broker.process.poll() is None:
        time.sleep(0.1)
    stop.set()
    died = broker.process.poll() is not None and not watch.capped
    good.join(15)
    watch.halt.set()
    watch.join(5)
    broker.kill()
    for thread in threads:
        thread.join(2)
    latencies = sorted(good.latencies)

    def pct(p: float) -> float:
        return latencies[min(len(latencies) - 1, int(len(latencies) * p))] * 1000 if latencies else float("nan")

    return dict(phase=phase, hwm_mib=watch.peak_hwm_kib / 1024, rss_mib=watch.peak_rss_kib / 1024,
                fds=watch.peak_fds, capped=watch.capped, died=died, ok=len(latencies),
                failed=sum(good.failures.values()), failures=dict(good.failures), p50=pct(0.5), p99=pct(0.99),
                max=latencies[-1] * 1000 if latencies else float("nan"), answers=dict(stats.answers),
                connections=len(threads))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--phases", nargs="+", default=list(PHASES), choices=PHASES)
    parser.add_argument("--duration", type=float, default=10.0, help="seconds of flood per phase")
    parser.add_argument("--frame-mb", type=int, default=16, help="socket.request.max.bytes, in MiB")
    parser.add_argument("--queued-mb", type=int, default=64, help="queued.max.request.bytes, in MiB")
    parser.add_argument("--connections", type=int, default=8, help="bombing connections per kind")
    parser.add_argument("--slow-connections", type=int, default=32)
    parser.add_argument("--zstd-mb", type=int, default=256, help="what one zstd batch inflates to, in MiB")
    parser.add_argument("--rss-cap-mb", type=int, default=4096, help="kill the broker past this RSS")
    args = parser.parse_args()
    frame_bytes = args.frame_mb * MiB
    zstd_batch = zstd_bomb_batch(args.zstd_mb * MiB)
    bombs = {
        "wide": wide_bomb(frame_bytes),
        "deep": deep_bomb(frame_bytes),
        "zstd": m.encode_request(m.ProduceRequest(id=1, acks=1, timeout_ms=30_000, topics=(m.ProduceTopic(
            name="compacted", partitions=(m.ProducePartition(partition=0, records=zstd_batch),)),))),
    }
    print(f"frame limit {args.frame_mb} MiB, queued.max.request.bytes {args.queued_mb} MiB, "
          f"{args.connections} connections per bomb kind, {args.slow_connections} slow senders, "
          f"zstd batch of {len(zstd_batch):,} bytes inflating to {args.zstd_mb} MiB, {args.duration:.0f} s per phase")
    work = Path(tempfile.mkdtemp(prefix="triolog-bombs-"))
    results = []
    try:
        for phase in args.phases:
            r = run_phase(phase, args, work, bombs)
            results.append(r)
            flag = " (RSS CAP HIT: broker killed)" if r["capped"] else " (BROKER DIED)" if r["died"] else ""
            print(f"\nphase {phase}{flag}: {r['connections']} flood connections")
            print(f"  broker peak RSS (VmHWM):  {r['hwm_mib']:.0f} MiB   fds at peak: {r['fds']}")
            print(f"  good client round trips:  {r['ok']} ok, {r['failed']} failed {r['failures'] or ''}")
            print(f"  good client latency:      p50 {r['p50']:.1f} ms, p99 {r['p99']:.1f} ms, max {r['max']:.1f} ms")
            for answer, count in sorted(r["answers"].items()):
                print(f"  {answer}: {count}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    baseline = next((r["hwm_mib"] for r in results if r["phase"] == "baseline"), None)
    if baseline is not None:
        bound = args.queued_mb + baseline
        print(f"\nbound asked by the issue: queued.max.request.bytes + overhead = {args.queued_mb} + {baseline:.0f}"
              f" = {bound:.0f} MiB")
        for r in results:
            verdict = "within" if r["hwm_mib"] <= bound and not r["capped"] else "ABOVE"
            print(f"  {r['phase']:9} VmHWM {r['hwm_mib']:7.0f} MiB  {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
