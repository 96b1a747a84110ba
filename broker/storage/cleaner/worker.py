"""The cleaner's worker process: the two passes away from the broker's GIL.

One worker per cleaner thread, a fresh interpreter (``python -c``, so no copy of the broker's
threads, locks or sockets, and no re-import of whatever ``__main__`` started the broker, which
multiprocessing's spawn would do) started on first use and kept for the next rounds, so its
offset map is allocated once. Messages are pickled over two pipes
(multiprocessing.connection framing).
The protocol over the pipe, one round at a time:

    parent -> ("clean", CleanJob)
    worker -> ("group", GroupResult)     a finished .cleaned segment; waits for the reply
    parent -> ("ok",) | ("abort",)       after swapping it in (or failing to)
    worker -> ("done", end_offset, CleanerStats) | ("aborted",) | ("error", exc, traceback)

The worker only reads segment files and writes ``.cleaned`` files; the swap into the live log
and the checkpoint stay in the broker process. An abort (partition deleted, cleaner stopping)
is sent as ("abort",), checked by the worker between reads; a worker that does not answer in
time is killed, and its ``.cleaned`` files are removed by the parent (or the next load).

The worker dies with the broker. A broker killed with kill -9 must not leave a worker that goes
on writing ``.cleaned`` files next to the next broker's (same names: two writers of one file)
or writes a traceback into its log. On Linux the kernel kills it (``PR_SET_PDEATHSIG``; the
signal follows the thread that started the worker, which is the cleaner thread, and that thread
closes its worker before it ends). Everywhere, the worker also exits, at once and silently, when
its pipe from the broker reaches EOF or its parent pid changes (checked between reads and every
quarter second of a throttle's sleep).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import pickle
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import NoReturn

import triolog

from ..errors import StorageError
from ..fs import FileSystem, OsFileSystem
from .cleaner import Cleaner, CleanerStats, CleanJob, GroupResult, LogCleaningAbortedError
from .throttler import Throttler

logger = logging.getLogger(__name__)

POLL_INTERVAL_S = 0.05
#: The worker's nice increment. With as many busy processes as CPUs (the broker, its clients and
#: the worker on 2 cores), an equal-priority worker took a core from the request path and
#: produce p99 rose 11x (bench/cleaner.py); at 19 the scheduler runs it in the gaps.
WORKER_NICENESS = 19
ABORT_TIMEOUT_S = 10.0
#: How often a throttled worker looks for its parent while it sleeps.
NAP_SLICE_S = 0.25


#: linux/prctl.h
PR_SET_PDEATHSIG = 1


class _Duplex:
    """send/recv/poll over a pipe pair."""

    def __init__(self, read_fd: int, write_fd: int):
        self._reader = Connection(read_fd, readable=True, writable=False)
        self._writer = Connection(write_fd, readable=False, writable=True)

    def send(self, message) -> None:
        self._writer.send(message)

    def recv(self):
        return self._reader.recv()

    def poll(self, timeout: float = 0.0) -> bool:
        return self._reader.poll(timeout)

    def close(self) -> None:
        self._reader.close()
        self._writer.close()


def _entry() -> None:
    """``python -c`` entry point: argv = read fd, write fd, parent pid, 1 to ask the kernel for a
    signal when the parent dies (0: the portable checks only), map memory, load factor, rate,
    throttle check ms."""
    read_fd, write_fd, parent_pid, kernel_signal = (int(a) for a in sys.argv[1:5])
    if kernel_signal:
        _set_parent_death_signal()
    if os.getppid() != parent_pid:  # the parent died before the signal was armed
        os._exit(0)
    _worker_main(
        _WorkerPipe(read_fd, write_fd, parent_pid),
        int(sys.argv[5]),
        float(sys.argv[6]),
        float(sys.argv[7]),
        int(sys.argv[8]),
    )


def _set_parent_death_signal() -> None:
    """SIGKILL when the parent goes (Linux only; elsewhere the portable checks remain)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass


class _WorkerPipe(_Duplex):
    """The worker's end: the broker gone (EOF, a broken pipe, another parent pid) ends the
    process at once, without a word: nothing of it may reach the next broker's log or files."""

    def __init__(self, read_fd: int, write_fd: int, parent_pid: int):
        super().__init__(read_fd, write_fd)
        self.parent_pid = parent_pid

    def check_parent(self) -> None:
        if os.getppid() != self.parent_pid:
            _exit_quietly()

    def send(self, message) -> None:
        try:
            super().send(message)
        except OSError:
            _exit_quietly()

    def recv(self):
        try:
            return super().recv()
        except (EOFError, OSError):
            _exit_quietly()

    def poll(self, timeout: float = 0.0) -> bool:
        try:
            return super().poll(timeout)
        except (EOFError, OSError):
            _exit_quietly()


def _exit_quietly() -> NoReturn:
    """Leave without unwinding: no cleanup that could touch the next broker's files (the
    ``.cleaned`` file left behind is removed by the next load or round), no traceback."""
    os._exit(0)


def _worker_main(conn, map_memory: int, load_factor: float, throttle_rate: float, throttle_check_ms: int = 300) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group; the broker decides
    try:  # background work: the broker's own threads come first when CPUs are short
        os.nice(WORKER_NICENESS)
    except OSError:
        pass
    check_parent = getattr(conn, "check_parent", lambda: None)

    def nap(seconds: float) -> None:
        """The throttle's sleep (minutes at a low rate), in slices that look for the parent."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            check_parent()
            time.sleep(min(left, NAP_SLICE_S))

    throttler = Throttler(throttle_rate, check_interval_ms=throttle_check_ms, sleep=nap)
    cleaner = Cleaner(map_memory, load_factor, throttler=throttler)
    pending: list[tuple] = []

    def check() -> None:
        check_parent()
        while conn.poll():
            message = conn.recv()
            if message[0] in ("abort", "exit"):
                pending.append(message)
                raise LogCleaningAbortedError("aborted by the broker")

    def on_group(result: GroupResult) -> None:
        conn.send(("group", result))
        reply = conn.recv()
        if reply[0] != "ok":
            pending.append(reply)
            raise LogCleaningAbortedError("the broker did not swap the group in")

    cleaner.check_done = check
    while True:
        message = pending.pop(0) if pending else conn.recv()
        if message[0] == "exit":
            return
        if message[0] != "clean":
            continue  # a late abort for a round that already ended
        try:
            end_offset, stats = cleaner.clean(message[1], on_group)
            conn.send(("done", end_offset, stats))
        except LogCleaningAbortedError:
            conn.send(("aborted",))
            pending = [m for m in pending if m[0] == "exit"]
        except BaseException as exc:  # reported to the broker, which marks the partition uncleanable
            try:
                pickle.dumps(exc)
            except Exception:
                exc = RuntimeError(f"{type(exc).__name__}: {exc}")
            conn.send(("error", exc, traceback.format_exc()))


class WorkerProcessExecutor:
    """Runs the passes in a worker process; ``on_group`` (the swap) runs in the calling thread."""

    def __init__(
        self,
        map_memory: int,
        load_factor: float,
        throttle_rate: float,
        throttle_check_ms: int = 300,
        *,
        die_with_parent_signal: bool = True,
    ):
        """``die_with_parent_signal=False`` leaves the worker only the portable checks (tests)."""
        self._args = (map_memory, load_factor, throttle_rate, throttle_check_ms)
        self._kernel_signal = die_with_parent_signal
        self._process: subprocess.Popen | None = None
        self._conn: _Duplex | None = None  # the pipe to the worker: set and cleared with _process
        self._cancelled = threading.Event()

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def _ensure_started(self) -> None:
        if self._process is not None and self._process.poll() is None:
            return
        self._discard_process()
        to_child_r, to_child_w = os.pipe()
        to_parent_r, to_parent_w = os.pipe()
        root = str(Path(triolog.__file__).parent.parent)  # where `import triolog` found it
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
        map_memory, load_factor, rate, check_ms = self._args
        try:
            process = subprocess.Popen(
                # The core's import-time WARNING (pure Python) is the broker's to give, once, not
                # the worker's on every start: a NullHandler keeps logging's last resort quiet.
                [
                    sys.executable,
                    "-c",
                    "import logging; logging.getLogger('triolog.core').addHandler("
                    "logging.NullHandler()); from triolog.broker.storage.cleaner.worker import _entry; _entry()",
                    str(to_child_r),
                    str(to_parent_w),
                    str(os.getpid()),
                    str(int(self._kernel_signal)),
                    str(map_memory),
                    repr(load_factor),
                    repr(rate),
                    str(check_ms),
                ],
                pass_fds=(to_child_r, to_parent_w),
                env=env,
                stdin=subprocess.DEVNULL,
            )
        except BaseException:
            for fd in (to_child_r, to_child_w, to_parent_r, to_parent_w):
                os.close(fd)
            raise
        os.close(to_child_r)
        os.close(to_parent_w)
        self._process, self._conn = process, _Duplex(to_parent_r, to_child_w)
        logger.info("started cleaner worker process %d", process.pid)

    def _alive(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def run(
        self,
        job: CleanJob,
        on_group: Callable[[GroupResult], None],
        check_done: Callable[[], None],
        fs: FileSystem | None = None,
    ) -> tuple[int, CleanerStats]:
        """One round in the worker process, which reads and writes the real file system (OS_FS):
        a log on any other ``fs`` is cleaned in-thread instead (CleanerThread.executor)."""
        if fs is not None and not isinstance(fs, OsFileSystem):
            raise ValueError(f"a cleaner worker process cannot clean a log on {fs!r}")
        if self._cancelled.is_set():
            raise LogCleaningAbortedError("cancelled")
        self._ensure_started()
        process, conn = self._process, self._conn
        assert process is not None and conn is not None  # (_ensure_started started them)
        try:
            conn.send(("clean", job))
        except (OSError, EOFError) as exc:
            self._discard_process()
            raise StorageError(f"cleaner worker process is gone: {exc}") from exc
        while True:
            if not conn.poll(POLL_INTERVAL_S):
                if not self._alive():
                    code = process.returncode
                    self._discard_process()
                    _remove_cleaned_files(job)
                    raise StorageError(f"cleaner worker process exited with {code} while cleaning {job.name}")
                try:
                    if self._cancelled.is_set():
                        raise LogCleaningAbortedError("cancelled")
                    check_done()
                except LogCleaningAbortedError:
                    self._abort_round(conn, job)
                    raise
                continue
            try:
                message = conn.recv()
            except EOFError:
                self._discard_process()
                _remove_cleaned_files(job)
                raise StorageError(f"cleaner worker process died while cleaning {job.name}") from None
            kind = message[0]
            if kind == "group":
                try:
                    on_group(message[1])
                except BaseException:
                    conn.send(("abort",))
                    self._wait_for_end_of_round(conn, job)
                    raise
                conn.send(("ok",))
            elif kind == "done":
                return message[1], message[2]
            elif kind == "aborted":
                raise LogCleaningAbortedError(f"cleaning of {job.name} aborted")
            elif kind == "error":
                error, text = message[1], message[2]
                logger.debug("cleaner worker failed:\n%s", text)
                raise error

    def _abort_round(self, conn: _Duplex, job: CleanJob) -> None:
        try:
            conn.send(("abort",))
        except (OSError, EOFError):
            self._discard_process()
            return
        self._wait_for_end_of_round(conn, job)

    def _wait_for_end_of_round(self, conn: _Duplex, job: CleanJob) -> None:
        """Wait for the worker to acknowledge the abort (it deletes its .cleaned files); kill it
        if it does not answer in time."""
        deadline = time.monotonic() + ABORT_TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                if conn.poll(POLL_INTERVAL_S):
                    message = conn.recv()
                    if message[0] in ("aborted", "done", "error"):
                        return
                    if message[0] == "group":  # finished just before the abort arrived
                        conn.send(("abort",))
                        _remove_cleaned_files(job)
                elif not self._alive():
                    break
            except (OSError, EOFError):
                break
        self._discard_process()
        _remove_cleaned_files(job)

    def cancel(self) -> None:
        """From another thread: make the running round (and any later one) abort."""
        self._cancelled.set()

    def close(self) -> None:
        process, conn = self._process, self._conn
        if process is None or conn is None:  # (no worker: they are set and cleared together)
            return
        try:
            conn.send(("exit",))
        except (OSError, EOFError):
            pass
        try:
            process.wait(5.0)
        except subprocess.TimeoutExpired:
            pass
        self._discard_process()

    def _discard_process(self) -> None:
        process, conn = self._process, self._conn
        self._process = self._conn = None
        if process is not None and process.poll() is None:
            process.kill()
            process.wait(5.0)
        if conn is not None:
            conn.close()


def _remove_cleaned_files(job: CleanJob) -> None:
    """Drop leftover .cleaned output of a round that was killed (the loader would too)."""
    directory = Path(job.directory)
    try:
        for path in directory.glob("*.cleaned"):
            path.unlink(missing_ok=True)
    except OSError:
        pass
