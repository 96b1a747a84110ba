"""The real broker as a subprocess, for end-to-end tests: started on a free port with its data in
a temporary directory, JSON logs captured to a file, stopped with a signal (or killed)."""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from triolog import testing
from triolog.protocol import messages as m

ROOT = Path(__file__).resolve().parents[2]

#: For a broker shared by many tests that write records stamped long ago (timestamp 42, 1000...):
#: with the default retention.ms (7 days) the retention task, every 300 s, may delete such a
#: record between a test's produce and its consume, as Kafka would. Retention tests start their own.
KEEP_OLD_RECORDS = ("log.retention.ms=-1",)


@dataclass
class BrokerProcess:
    data_dir: Path
    overrides: tuple[str, ...] = ()
    process: subprocess.Popen | None = None
    port: int = 0
    #: Serve Prometheus metrics on a free port (read back into ``metrics_port``); off by default.
    metrics: bool = False
    metrics_port: int | None = None
    #: Serve Kafka's protocol (kafka.listeners) on a free port (read back into ``kafka_port``);
    #: off by default, so that no test broker takes the embedded config's 19092.
    kafka: bool = False
    kafka_port: int = 0
    #: The listeners' security protocols (their ssl.* and sasl.* keys go in ``overrides``).
    security: str = "PLAINTEXT"
    kafka_security: str = "PLAINTEXT"
    #: A server.properties file (serve's --config), under the overrides.
    config_file: Path | None = None
    #: (soft, hard) RLIMIT_NOFILE to start the process with; None keeps the test runner's.
    rlimit_nofile: tuple[int, int] | None = None
    #: Extra environment variables for the broker process (TRIOLOG_CRASH_AT...).
    env: dict[str, str] = field(default_factory=dict)
    log_path: Path = field(init=False)

    def __post_init__(self) -> None:
        self.log_path = self.data_dir.parent / f"{self.data_dir.name}-broker.log"

    def start(self, timeout_s: float = 30.0) -> "BrokerProcess":
        args = [
            sys.executable, "-m", "triolog.broker.cli", "serve",
            *(("--config", str(self.config_file)) if self.config_file is not None else ()),
            "--override", f"log.dirs={self.data_dir}",
            "--override", f"listeners={self.security}://127.0.0.1:{self.port}",
            "--override", "metrics.listener=" + ("http://127.0.0.1:0" if self.metrics else ""),
            "--override", "logger.format=json",
            "--override", "kafka.listeners=" + (f"{self.kafka_security}://127.0.0.1:{self.kafka_port}" if self.kafka else ""),
        ]
        for item in self.overrides:
            args += ["--override", item]
        earlier_starts = len(self._started_events())  # the log file is appended to across restarts
        log = open(self.log_path, "ab")
        env = {**os.environ, "PYTHONPATH": str(ROOT), **self.env}
        limits = self.rlimit_nofile

        def preexec() -> None:
            import resource

            resource.setrlimit(resource.RLIMIT_NOFILE, limits)

        self.process = subprocess.Popen(args, stdout=log, stderr=log, cwd=ROOT, env=env,
                                        preexec_fn=preexec if limits is not None else None)
        log.close()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            started = self._started_events()[earlier_starts:]
            if started:
                self.port = started[-1]["port"]
                self.metrics_port = started[-1].get("metrics_port")
                self.kafka_port = started[-1].get("kafka_port") or 0
            if started:  # logged once the listener is bound: no probe connection (it would count
                return self  # against max.connections.per.ip in the limit tests)
            if self.process.poll() is not None:
                raise RuntimeError(f"broker exited with {self.process.returncode}:\n{self.log_text()}")
            time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"broker did not start within {timeout_s} s:\n{self.log_text()}")

    def _started_events(self) -> list[dict]:
        return [event for event in self.events() if event.get("event") == "broker_started"]

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def events(self) -> list[dict]:
        out = []
        for line in self.log_text().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
        return out

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 30.0) -> int:
        """Ask the broker to shut down; returns its exit code."""
        if self.process is None or self.process.poll() is not None:
            return self.process.returncode if self.process else 0
        self.process.send_signal(sig)
        try:
            return self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise

    def kill(self) -> None:
        """kill -9: no shutdown sequence at all."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)

    def scrape(self, timeout_s: float = 10.0) -> str:
        """GET /metrics: the Prometheus text exposition."""
        import urllib.request

        if self.metrics_port is None:
            raise RuntimeError("this broker was started without metrics")
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return response.read().decode()

    def status(self, key: str) -> int:
        """A /proc/<pid>/status value in kB (VmRSS, VmHWM...)."""
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
        raise KeyError(key)

    def open_descriptors(self) -> int:
        return len(os.listdir(f"/proc/{self.process.pid}/fd"))

    def sample(self, name: str, **labels: str) -> float:
        """One sample of a scrape (the broker must be started with ``metrics=True``)."""
        from prometheus_client.parser import text_string_to_metric_families

        for family in text_string_to_metric_families(self.scrape()):
            for s in family.samples:
                if s.name == name and s.labels == labels:
                    return s.value
        raise KeyError(f"no sample {name}{labels}")

    def client(self) -> "WireClient":
        return WireClient("127.0.0.1", self.port)


class WireClient:
    """The protocol on a raw socket: frames in and out, nothing hidden."""

    def __init__(self, host: str, port: int, timeout_s: float = 10.0):
        self.sock = socket.create_connection((host, port), timeout=timeout_s)
        self._next_id = 1

    def next_id(self) -> int:
        self._next_id += 1
        return self._next_id

    def send_frame(self, payload: bytes) -> None:
        self.sock.sendall(struct.pack(">I", len(payload)) + payload)

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv_exact(self, n: int) -> bytes:
        chunks = []
        while n:
            chunk = self.sock.recv(n)
            if not chunk:
                raise ConnectionError("connection closed by the broker")
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def recv_frame(self) -> bytes:
        (length,) = struct.unpack(">I", self.recv_exact(4))
        return self.recv_exact(length)

    def recv_doc(self) -> dict:
        import msgpack

        return msgpack.unpackb(self.recv_frame(), raw=False, strict_map_key=False)

    def call(self, request: m.Request) -> dict:
        self.send_frame(m.encode_request(request))
        return m.decode_response(self.recv_frame(), request.api)

    def call_map(self, api: str, **fields) -> dict:
        """One request spelled as a plain msgpack map (no schema of ours in between), answered in turn."""
        import msgpack

        rid = self.next_id()
        self.send_frame(msgpack.packb({"api": api, "v": 1, "id": rid, **fields}, use_bin_type=True))
        doc = self.recv_doc()
        assert doc["id"] == rid
        return doc

    def is_closed(self, timeout_s: float = 5.0) -> bool:
        self.sock.settimeout(timeout_s)
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True
        except socket.timeout:
            return False

    def close(self) -> None:
        self.sock.close()


class InProcessBroker(testing.InProcessBroker):
    """The broker in a thread of the test process (triolog.testing), with BrokerProcess's
    interface and defaults (no Kafka listener unless ``kafka=True``): the default for every test
    that does not test the process itself (signals, SIGKILL, exit codes, rlimits, stdout)."""

    def __init__(self, data_dir: Path, overrides: tuple[str, ...] = (), *, kafka: bool = False, **options):
        super().__init__(data_dir, overrides, kafka=kafka, **options)

    def client(self) -> WireClient:
        return WireClient("127.0.0.1", self.port)

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 60.0) -> int:
        """As SIGTERM would (``sig`` is for BrokerProcess's signature: in-process, always that)."""
        return super().stop(timeout_s)

    def kill(self) -> None:
        """No kill -9 in-process: a test of what survives one starts a BrokerProcess."""
        raise TypeError("an in-process broker cannot be killed -9; start a BrokerProcess "
                        "(broker_factory(..., process=True)) for that")
