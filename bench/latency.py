#!/usr/bin/env python
"""Request round-trip latency: a plain blocking socket client, one request at a time on loopback.

    .venv/bin/python bench/latency.py              # 5,000 requests of each kind
    .venv/bin/python bench/latency.py -n 1000      # fewer
    .venv/bin/python bench/latency.py --port 9092  # against a broker already running (topic "latency")
    .venv/bin/python bench/latency.py --baseline /path/to/other/checkout
                                                   # also a broker run from another source tree
                                                   # (e.g. `git archive main`), interleaved: ratios

The broker runs as its own process (``python -m triolog.broker.cli serve``, data in a temp
directory, page cache). The client is a bare socket with TCP_NODELAY that writes one frame
(4-byte length + msgpack, built with triolog.protocol.frames/messages) and reads the whole answer
before sending the next: no client library, no pipelining, so each figure is the broker's
request path plus two loopback hops. Each request kind is measured in interleaved rounds (the
kinds take turns, so load from other processes spreads over all of them); p50/p99/max over all
requests.

Kinds: api_versions (no storage), produce of one 100-byte record with acks=1 (one record batch,
pre-encoded once: the client's encoding is not timed), fetch of 4 KiB (one 4 KiB batch read from
a fixed offset, max_wait_ms 0), and, as the floor, a plain echo server in its own process that
answers each frame with the same bytes (what any Python server on this machine costs per round
trip). The ratio broker / echo is the broker's own overhead in units of a bare round trip.

Goals (issue 12): api_versions and 1-record produce p50 <= 150 us, 4 KiB fetch p50 <= 250 us.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from triolog.protocol import messages as m  # noqa: E402
from triolog.protocol.frames import encode_frame  # noqa: E402
from triolog.protocol.records import build_batch  # noqa: E402

TOPIC = "latency"
_LENGTH = struct.Struct(">I")
perf_ns = time.perf_counter_ns


class Client:
    """One blocking socket; ``call`` sends a pre-built frame and returns the whole answer's payload."""

    def __init__(self, port: int):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buffer = bytearray(1 << 20)
        self.view = memoryview(self.buffer)

    def _recv_exact(self, n: int) -> memoryview:
        got = 0
        while got < n:
            k = self.sock.recv_into(self.view[got:n])
            if not k:
                raise ConnectionError("connection closed")
            got += k
        return self.view[:n]

    def call(self, frame: bytes) -> bytes:
        self.sock.sendall(frame)
        (length,) = _LENGTH.unpack(self._recv_exact(4))
        return bytes(self._recv_exact(length))

    def close(self) -> None:
        self.sock.close()


def echo_server(port_queue) -> None:
    """A plain blocking frame echo (length prefix + payload back), one connection."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        port_queue.put(server.getsockname()[1])
        conn, _ = server.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with conn:
            buffer = bytearray(1 << 20)
            view = memoryview(buffer)
            while True:
                got = 0
                while got < 4:
                    k = conn.recv_into(view[got:4])
                    if not k:
                        return
                    got += k
                (length,) = _LENGTH.unpack(view[:4])
                total = 4 + length
                while got < total:
                    k = conn.recv_into(view[got:total])
                    if not k:
                        return
                    got += k
                conn.sendall(view[:total])


def percentile(sorted_values: list[int], q: float) -> int:
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def frames(topic: str) -> dict[str, bytes]:
    now = int(time.time() * 1000)
    one = build_batch([(None, b"v" * 100, now, ())])
    return {
        "api_versions": encode_frame(m.encode_request(m.ApiVersionsRequest(id=1))),
        "produce 1 rec acks=1": encode_frame(m.encode_request(m.ProduceRequest(
            id=2, acks=1, timeout_ms=30_000,
            topics=(m.ProduceTopic(name=topic, partitions=(m.ProducePartition(partition=0, records=one),)),)))),
        "fetch 4 KiB": encode_frame(m.encode_request(m.FetchRequest(
            id=3, max_wait_ms=0, min_bytes=1, max_bytes=4096,
            topics=(m.FetchTopic(name=topic, partitions=(
                m.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=4096),)),)))),
    }


def prepare(client: Client, topic: str) -> None:
    """Create the topic (one partition) and put one ~4 KiB batch at offset 0 for the fetches."""
    answer = m.decode_response(client.call(encode_frame(m.encode_request(m.CreateTopicsRequest(
        id=10, topics=(m.NewTopic(name=topic, num_partitions=1, replication_factor=1),))))), "create_topics")
    code = answer["topics"][0]["error_code"]
    if code not in (0, 36):  # 36: TOPIC_ALREADY_EXISTS
        raise SystemExit(f"create_topics failed: {answer}")
    now = int(time.time() * 1000)
    records = [(None, b"f" * 90, now, ())] * 40  # ~4 KiB in one batch
    batch = build_batch(records)
    answer = m.decode_response(client.call(encode_frame(m.encode_request(m.ProduceRequest(
        id=11, acks=1, timeout_ms=30_000,
        topics=(m.ProduceTopic(name=topic, partitions=(m.ProducePartition(partition=0, records=batch),)),))))),
        "produce")
    partition = answer["topics"][0]["partitions"][0]
    if partition["error_code"] != 0 or partition["base_offset"] != 0:
        raise SystemExit(f"the latency topic must be new (its first batch at offset 0): {answer}")


def check(kind: str, payload: bytes) -> None:
    api = {"api_versions": "api_versions", "fetch 4 KiB": "fetch"}.get(kind, "produce")
    doc = m.decode_response(payload, api)
    if api == "produce":
        assert doc["topics"][0]["partitions"][0]["error_code"] == 0, doc
    elif api == "fetch":
        part = doc["topics"][0]["partitions"][0]
        assert part["error_code"] == 0 and 3_000 < len(part["records"]) <= 4096, (part["error_code"], len(part["records"]))


def measure(ports: dict[str, int], echo_port: int | None, n: int, rounds: int) -> dict[str, dict[str, list[int]]]:
    """Per broker (label -> port), per request kind: the round trips in ns; brokers and kinds take
    turns in every round."""
    built = frames(TOPIC)
    clients = {}
    for label, port in ports.items():
        client = clients[label] = Client(port)
        prepare(client, TOPIC)
        for kind, frame in built.items():  # warm up, and check every answer once
            for _ in range(200):
                check(kind, client.call(frame))
    echo = Client(echo_port) if echo_port is not None else None
    if echo is not None:
        for _ in range(200):
            echo.call(built["api_versions"])
    times: dict[str, dict[str, list[int]]] = {label: {kind: [] for kind in built} for label in ports}
    if echo is not None:
        times[""] = {"plain echo (floor)": []}
    per_round = max(1, n // rounds)
    for _ in range(rounds):
        for label, client in clients.items():
            for kind, frame in built.items():
                out = times[label][kind]
                call = client.call
                for _ in range(per_round):
                    t0 = perf_ns()
                    call(frame)
                    out.append(perf_ns() - t0)
        if echo is not None:
            out = times[""]["plain echo (floor)"]
            frame = built["api_versions"]
            for _ in range(per_round):
                t0 = perf_ns()
                echo.call(frame)
                out.append(perf_ns() - t0)
    for client in clients.values():
        client.close()
    if echo is not None:
        echo.close()
    return times


GOALS_US = {"api_versions": 150, "produce 1 rec acks=1": 150, "fetch 4 KiB": 250}


def report(times: dict[str, dict[str, list[int]]]) -> None:
    floor = None
    if "" in times:
        floor = percentile(sorted(times[""]["plain echo (floor)"]), 0.5)
    labels = [label for label in times if label]
    width = max(len(label) for label in labels) + 2
    print(f"{'broker':<{width}}{'request':<22}{'n':>7}{'p50 us':>9}{'p99 us':>9}{'max us':>9}{'p50/echo':>10}"
          f"{'p50/' + labels[-1] if len(labels) > 1 else '':>14}   goal (p50)")
    last = {kind: percentile(sorted(v), 0.5) for kind, v in times[labels[-1]].items()}
    for label, kinds in times.items():
        for kind, values in kinds.items():
            values = sorted(values)
            p50, p99 = percentile(values, 0.5), percentile(values, 0.99)
            ratio = f"{p50 / floor:10.2f}" if floor else f"{'':>10}"
            versus = f"{p50 / last[kind]:14.2f}" if len(labels) > 1 and kind in last else f"{'':>14}"
            goal = GOALS_US.get(kind)
            verdict = f"   <= {goal} us: {'PASS' if p50 / 1000 <= goal else 'MISS'}" if goal else ""
            print(f"{label or '-':<{width}}{kind:<22}{len(values):>7}{p50 / 1000:9.0f}{p99 / 1000:9.0f}"
                  f"{values[-1] / 1000:9.0f}{ratio}{versus}{verdict}")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_broker_from(root: Path, data_dir: Path) -> tuple[subprocess.Popen, int]:
    """``python -m triolog.broker.cli serve`` run from another source tree; (process, port)."""
    port = free_port()
    log = open(data_dir.parent / "baseline-broker.log", "ab")
    process = subprocess.Popen(
        [sys.executable, "-m", "triolog.broker.cli", "serve", "--override", f"log.dirs={data_dir}",
         "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}", "--override", "metrics.listener="],
        cwd=root, env={**os.environ, "PYTHONPATH": str(root), "PYTHONDONTWRITEBYTECODE": "1"},
        stdout=log, stderr=log)
    log.close()
    deadline = time.monotonic() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return process, port
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the baseline broker from {root} did not start (see {log.name})")
            time.sleep(0.1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", type=int, default=5000, help="requests of each kind (default 5000)")
    parser.add_argument("--rounds", type=int, default=10, help="interleaved rounds (default 10)")
    parser.add_argument("--port", type=int, help="measure a broker already running on 127.0.0.1:PORT")
    parser.add_argument("--override", action="append", default=[], help="broker config key=value (own broker)")
    parser.add_argument("--baseline", type=Path, help="also measure a broker run from this source tree")
    args = parser.parse_args()

    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    echo = ctx.Process(target=echo_server, args=(queue,), daemon=True)
    echo.start()
    echo_port = queue.get(timeout=30)
    workdir = broker = baseline = None
    try:
        workdir = Path(tempfile.mkdtemp(prefix="triolog-bench-latency-"))
        ports = {}
        if args.baseline is not None:
            baseline, ports["baseline"] = start_broker_from(args.baseline.resolve(), workdir / "baseline")
        if args.port is None:
            from tests.e2e.broker_process import BrokerProcess

            broker = BrokerProcess(workdir / "data", overrides=tuple(args.override)).start()
            ports["this tree"] = broker.port
        else:
            ports["this tree"] = args.port
        load = os.getloadavg()
        print(f"triolog request latency: brokers on 127.0.0.1 ports {', '.join(f'{k} {v}' for k, v in ports.items())}, "
              f"Python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} "
              f"(other processes show in the tails)")
        times = measure(ports, echo_port, args.n, args.rounds)
        report(times)
    finally:
        if baseline is not None:
            baseline.terminate()
            baseline.wait(30)
        if broker is not None:
            broker.stop()
        if workdir is not None:
            shutil.rmtree(workdir, ignore_errors=True)
        echo.join(5)
        if echo.is_alive():
            echo.terminate()
    return 0


if __name__ == "__main__":
    sys.exit(main())
