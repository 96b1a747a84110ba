"""The cleaner's worker process dies with the broker: a broker killed with kill -9, idle or in the
middle of a cleaning round, leaves no worker behind to write into its directories or into the
next broker's log. On Linux the kernel kills the worker (PR_SET_PDEATHSIG); the portable fallback
(the pipe to the parent reaching EOF, or the parent pid changing) is checked on its own."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from triolog.client import AdminClient, NewTopic, Producer
from tests.e2e.broker_process import ROOT, BrokerProcess
from tests.waiting import wait_for

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

WORKER_MODULE = "triolog.broker.storage.cleaner.worker"


def _children(pid: int) -> set[int]:
    out: set[int] = set()
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                out.update(int(p) for p in f.read().split())
    except FileNotFoundError:
        pass
    return out


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except (FileNotFoundError, ProcessLookupError):
        return ""


def _start_time(pid: int) -> str | None:
    """The process's start time (field 22 of /proc/pid/stat), None once it is gone or a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return None if fields[0] in ("Z", "X") else fields[19]


def _gone(pid: int, started: str) -> bool:
    return _start_time(pid) != started  # exited, reaped, a zombie, or the pid reused


def _kill_if_alive(pid: int | None, started: str | None) -> None:
    """A failing test leaves no worker behind (one asleep in a throttle would linger for minutes)."""
    if pid is not None and started is not None and _start_time(pid) == started:
        os.kill(pid, signal.SIGKILL)


def _worker_of(parent: int, timeout_s: float = 60) -> tuple[int, str]:
    def find():
        for child in _children(parent):
            if WORKER_MODULE in _cmdline(child):
                started = _start_time(child)
                if started is not None:
                    return child, started
        return None

    return wait_for(find, timeout_s, f"a cleaner worker process under pid {parent}")


def _open_segment_files(pid: int, directory: Path) -> list[str]:
    """Paths under ``directory`` the process has open (a cleaning round reads segment files)."""
    out = []
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith(str(directory)):
                out.append(target)
    except FileNotFoundError:
        pass
    return out


def _cpu_ticks(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return int(fields[11]) + int(fields[12])  # utime + stime


def _waiting_in_a_round(pid: int, directory: Path):
    """A condition for wait_for: the process holds a file of ``directory`` open and used no CPU
    since the previous poll (a cleaning round asleep in its throttle)."""
    last = [None]

    def check() -> bool:
        ticks = _cpu_ticks(pid)
        busy_or_unknown = ticks is None or ticks != last[0]
        last[0] = ticks
        return not busy_or_unknown and bool(_open_segment_files(pid, directory))

    return check


def _compacted_topic(bootstrap: str, topic: str, records: int, value_size: int) -> None:
    with AdminClient(bootstrap) as admin:
        admin.create_topics([NewTopic(topic, 1, configs={
            "cleanup.policy": "compact", "segment.bytes": str(64 * 1024), "min.cleanable.dirty.ratio": "0.01",
            "min.compaction.lag.ms": "0"})])
    _produce(bootstrap, topic, records, value_size)


def _produce(bootstrap: str, topic: str, records: int, value_size: int) -> None:
    with Producer(bootstrap, linger_ms=5, batch_size=16 * 1024) as producer:
        for i in range(records):
            producer.send(topic, b"%06d" % i + b"." * value_size, key=b"key-%d" % (i % 50), partition=0)
        producer.flush()


@pytest.mark.parametrize("state", ["idle", "cleaning"])
def test_the_worker_dies_with_a_killed_broker_and_writes_nothing_to_the_next_log(tmp_path, state):
    # At 5 kB/s the worker, once it has read for 300 ms, sleeps minutes after each read.
    throttle = ["log.cleaner.io.max.bytes.per.second=5000"] if state == "cleaning" else []
    overrides = ("log.cleaner.backoff.ms=100", "log.cleaner.dedupe.buffer.size=1048576", *throttle)
    broker = BrokerProcess(tmp_path / "data", overrides).start()
    worker = started = None
    try:
        bootstrap = f"127.0.0.1:{broker.port}"
        directory = tmp_path / "data" / "compacted-0"
        # ~1 MB in 64 KiB segments.
        _compacted_topic(bootstrap, "compacted", 2000, 500)
        worker, started = _worker_of(broker.process.pid)
        checkpoint = tmp_path / "data" / "cleaner-offset-checkpoint"

        def all_clean() -> bool:  # cleaned up to the active segment, no file open: the worker waits
            active = max(int(p.stem) for p in directory.glob("*.log"))
            lines = checkpoint.read_text().split("\n") if checkpoint.exists() else []
            return f"compacted 0 {active}" in lines and not _open_segment_files(worker, directory)

        if state == "idle":
            wait_for(all_clean, 60, "the log cleaned up to its active segment")
        else:  # in the middle of a round: the worker has a segment of the log open
            asleep = _waiting_in_a_round(worker, directory)

            def asleep_in_a_round() -> bool:
                if asleep():
                    return True
                if all_clean():  # a round ran before the throttle's first check (300 ms): once the
                    _produce(bootstrap, "compacted", 300, 500)  # worker has read, the next one sleeps
                return False

            try:
                wait_for(asleep_in_a_round, 60, "the worker asleep in a round", interval_s=0.3)
            except AssertionError as exc:
                raise AssertionError(f"{exc}\nworker {worker}: {_cmdline(worker)!r}, children of the broker: "
                                     f"{_children(broker.process.pid)}, open: {_open_segment_files(worker, directory)}"
                                     f"\nbroker log:\n{broker.log_text()[-4000:]}") from None
        broker.kill()
        wait_for(lambda: _gone(worker, started), 10, f"worker {worker} to exit with its parent")
        log_of_first = broker.log_text()
        assert "Traceback" not in log_of_first, log_of_first[-3000:]

        # The next broker on the same directory and log file: nothing of the old worker shows up.
        broker.overrides = ("log.cleaner.enable=false",)
        broker.start()
        assert broker.stop() == 0
        after = broker.log_text()[len(log_of_first):]
        assert "Traceback" not in after and "Error" not in after, after[-3000:]
        assert not list(directory.glob("*.cleaned")) and not list(directory.glob("*.swap"))
    finally:
        broker.kill()
        _kill_if_alive(worker, started)


def test_the_worker_asks_the_kernel_for_sigkill_when_its_parent_dies():
    script = textwrap.dedent("""
        import ctypes
        from triolog.broker.storage.cleaner.worker import _set_parent_death_signal
        _set_parent_death_signal()
        signal = ctypes.c_int(-1)
        assert ctypes.CDLL(None, use_errno=True).prctl(2, ctypes.byref(signal), 0, 0, 0) == 0  # PR_GET_PDEATHSIG
        print(signal.value)
    """)
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True)
    assert int(out.stdout) == signal.SIGKILL


_PARENT = textwrap.dedent("""
    import logging, os, sys, threading
    sys.path.insert(0, {root!r})
    # Like the broker (triolog serve), which gives the core's pure-Python WARNING in its log, not
    # on stderr: what reaches stderr here is the worker's, and a worker says nothing.
    logging.getLogger("triolog.core").addHandler(logging.NullHandler())
    from triolog.broker.storage.clock import ManualClock
    from triolog.broker.storage.log import Log
    from triolog.broker.storage.cleaner.cleaner_manager import LogToClean
    from triolog.broker.storage.cleaner.log_cleaner import plan_job
    from triolog.broker.storage.cleaner.worker import WorkerProcessExecutor
    from triolog.config.log_config import LogConfig
    from triolog.protocol.records import Record, encode_batch

    directory = {directory!r}
    config = LogConfig().with_overrides({{"cleanup.policy": "compact", "segment.bytes": "65536"}})
    log = Log.open(directory, config, clock=ManualClock())
    for i in range(2000):
        log.append_as_leader(encode_batch([Record(0, 0, b"k%d" % (i % 50), b"v" * 500)]))
    log.roll()
    executor = WorkerProcessExecutor(1 << 20, 0.9, {rate}, 20, die_with_parent_signal=False)
    executor._ensure_started()
    print(executor.pid, flush=True)
    if {clean}:
        ltc = LogToClean(("t", 0), log, 0, log.active_segment.base_offset, 0, log.size, False)
        job = plan_job(log, ltc, 0, 64 * 1024)
        executor.run(job, lambda result: None, lambda: None)
    threading.Event().wait()
""")


@pytest.mark.parametrize("state", ["idle", "cleaning"])
def test_without_the_kernel_signal_the_worker_notices_its_parent_is_gone(tmp_path, state):
    """The portable path (no PR_SET_PDEATHSIG): an idle worker sees its pipe reach EOF; one in a
    round, throttled to 1 kB/s (a 64 KiB read, then a minute of sleep), sees its parent pid
    change within its sleep, and exits at once and silently, writing nothing more."""
    directory = tmp_path / "t-0"
    stderr = tmp_path / "stderr"
    script = _PARENT.format(root=str(ROOT), directory=str(directory), rate=1000.0 if state == "cleaning" else 1e300,
                            clean=state == "cleaning")
    with open(stderr, "wb") as err:
        parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=err, cwd=ROOT)
    worker = started = None
    try:
        worker = int(parent.stdout.readline())
        started = _start_time(worker)
        assert started is not None
        if state == "cleaning":
            wait_for(lambda: _open_segment_files(worker, directory), 60, "the worker reading the log")
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
        wait_for(lambda: _gone(worker, started), 10, f"worker {worker} to exit after its parent")
        assert stderr.read_text() == ""
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        _kill_if_alive(worker, started)
