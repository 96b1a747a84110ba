"""The real broker inside the test process, and the ``triolog`` command run through its ``main()``:
a pytest plugin (registered with the ``pytest11`` entry point ``triolog``) for this project's
tests and for the test suites of programs that use triolog. See docs/testing.md.

:class:`InProcessBroker` runs :class:`~triolog.broker.server.app.BrokerServer` in a thread of its
own (``trio.run`` there) on real sockets of 127.0.0.1, both listeners (msgpack and Kafka's
protocol) on free ports, its data in a directory of yours. It has the interface of a broker
subprocess: ``port``, ``kafka_port``, ``metrics_port``, ``sample()``/``scrape()`` of its metrics,
``events()`` (its structured log events, as the JSON log lines of ``triolog serve`` would hold
them), ``stop()``. What it cannot do is what only a process can: be killed with SIGKILL, receive a
signal, exit with a code, run under other rlimits.

Fixtures:

* ``triolog_broker``: a broker of its own for each test (empty, in the test's ``tmp_path``);
* ``triolog_session_broker``: one broker for the whole session (tests share it: give topics
  unique names);
* ``triolog_broker_factory``: ``start(*overrides, **options)`` for brokers with settings of
  their own (``"log.retention.ms=1000"``...), stopped after the test;
* ``triolog_cli``: ``run(*args, stdin=b"", env=None)`` runs ``triolog ARGS`` in-process
  (:func:`run_cli`) and returns a :class:`CliResult` (exit code, stdout bytes, stderr text).

Shared process state, put back as it was: while at least one broker runs, structlog is configured
to route each event to the broker whose thread logged it (a context variable set in the broker's
thread, inherited by its tasks and worker threads); the stdlib loggers under ``triolog.broker`` get one
routing handler. Each broker has its own Prometheus registry (never the global one). ``run_cli``
swaps ``sys.stdin/stdout/stderr`` and ``os.environ`` for the command's duration only, under a
lock. No signal handler is installed (``BrokerServer.run`` installs none; ``serve`` does).
"""

from __future__ import annotations

import contextvars
import io
import json
import logging
import os
import sys
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    import trio

    from triolog.broker.server.app import BrokerServer

__all__ = ["InProcessBroker", "CliResult", "run_cli", "free_topic_name"]

#: The broker whose thread (or task, or worker thread) is running: where its log events go.
_CURRENT: contextvars.ContextVar[InProcessBroker | None] = contextvars.ContextVar(
    "triolog_testing_broker", default=None
)
_LEVELS = {
    "debug": 10,
    "info": 20,
    "warning": 30,
    "warn": 30,
    "error": 40,
    "exception": 40,
    "critical": 50,
    "fatal": 50,
}


class _LogRouting:
    """structlog's configuration and a handler on the ``triolog.broker`` stdlib logger, installed while
    at least one in-process broker runs and put back as they were when the last one stops."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: list[InProcessBroker] = []
        self._saved: dict | None = None
        self._handler: logging.Handler | None = None
        self._saved_level = logging.NOTSET

    def add(self, broker: InProcessBroker) -> None:
        import structlog

        with self._lock:
            self._running.append(broker)
            if len(self._running) == 1:
                self._saved = structlog.get_config() if structlog.is_configured() else None
                structlog.configure(
                    processors=[
                        structlog.contextvars.merge_contextvars,
                        structlog.stdlib.add_log_level,
                        structlog.stdlib.add_logger_name,
                        structlog.processors.TimeStamper(fmt="iso", utc=True),
                        self._route_structlog,
                    ],
                    logger_factory=structlog.stdlib.LoggerFactory(),
                    wrapper_class=structlog.stdlib.BoundLogger,
                    cache_logger_on_first_use=False,
                )
                self._handler = _RoutingHandler(self)
                triolog_logger = logging.getLogger("triolog.broker")
                self._saved_level = triolog_logger.level
                triolog_logger.addHandler(self._handler)
            logging.getLogger("triolog.broker").setLevel(min(b.level for b in self._running))

    def remove(self, broker: InProcessBroker) -> None:
        import structlog

        with self._lock:
            if broker not in self._running:
                return
            self._running.remove(broker)
            triolog_logger = logging.getLogger("triolog.broker")
            if self._running:
                triolog_logger.setLevel(min(b.level for b in self._running))
                return
            if self._handler is not None:
                triolog_logger.removeHandler(self._handler)
            triolog_logger.setLevel(self._saved_level)
            self._handler = None
            if self._saved is None:
                structlog.reset_defaults()
            else:
                structlog.configure(**self._saved)

    def targets(self, logger_name: str = "") -> list[InProcessBroker]:
        """The broker of the calling context. Outside every broker's context: none from the main
        thread (the test's own code) or the client library; from another thread (one the storage
        layer started itself) every running broker, since the event may be any one's."""
        broker = _CURRENT.get()
        if broker is not None:
            return [broker]
        if threading.current_thread() is threading.main_thread() or logger_name.startswith(
            ("triolog.client", "triolog.pipeline")
        ):
            return []
        with self._lock:
            return list(self._running)

    def _route_structlog(self, logger, method_name, event_dict):
        import structlog

        targets = self.targets(str(event_dict.get("logger", "")))
        if not targets:  # the test's own code logging while a broker runs: to stderr, readable
            rendered = structlog.dev.ConsoleRenderer(colors=False)(logger, method_name, dict(event_dict))
            print(rendered, file=sys.stderr)
            raise structlog.DropEvent
        structlog.processors.format_exc_info(logger, method_name, event_dict)
        for broker in targets:
            broker._record(event_dict)
        raise structlog.DropEvent


class _RoutingHandler(logging.Handler):
    """The storage layer's stdlib records, as ``triolog serve``'s ProcessorFormatter renders them."""

    def __init__(self, routing: _LogRouting):
        super().__init__(logging.DEBUG)
        self.routing = routing

    def emit(self, record: logging.LogRecord) -> None:
        import datetime

        targets = self.routing.targets(record.name)
        if not targets:
            return
        event = {
            "event": record.getMessage(),
            "level": record.levelname.lower(),
            "logger": record.name,
            "timestamp": datetime.datetime.fromtimestamp(record.created, datetime.UTC)
            .isoformat()
            .replace("+00:00", "Z"),
        }
        if record.exc_info:
            event["exception"] = logging.Formatter().formatException(record.exc_info)
        for broker in targets:
            broker._record(event)


_ROUTING = _LogRouting()


class InProcessBroker:
    """A real broker in a thread of this process; the arguments mirror ``triolog serve``'s.

    ``overrides`` are ``key=value`` config items (as ``--override``), over ``config_file`` and the
    ``TRIOLOG_*`` environment, as ``serve`` layers them. ``mock_clock`` (a
    ``trio.testing.MockClock``, without autojump: an idle broker always waits) runs the broker's
    event loop on virtual time, moved on with :meth:`advance`; ``clock`` is the storage layer's
    clock (a ``triolog.broker.storage.clock.ManualClock`` for record timestamps and retention).
    """

    def __init__(
        self,
        data_dir: Path,
        overrides: Sequence[str] = (),
        *,
        port: int = 0,
        kafka: bool = True,
        kafka_port: int = 0,
        metrics: bool = False,
        security: str = "PLAINTEXT",
        kafka_security: str = "PLAINTEXT",
        config_file: Path | None = None,
        clock=None,
        mock_clock=None,
    ):
        self.data_dir = Path(data_dir)
        self.overrides = tuple(overrides)
        self.port = port
        self.kafka = kafka
        self.kafka_port = kafka_port
        self.metrics = metrics
        self.metrics_port: int | None = None
        self.security = security
        self.kafka_security = kafka_security
        self.config_file = config_file
        self.storage_clock = clock
        self.mock_clock = mock_clock
        self.log_path = self.data_dir.parent / f"{self.data_dir.name}-broker.log"
        self.server: BrokerServer | None = None
        self.level = logging.INFO
        self._lines: list[str] = []
        self._lines_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._started = threading.Event()
        self._failure: BaseException | None = None

    # -- the configuration ------------------------------------------------------------------------

    def config_items(self) -> list[str]:
        return [
            f"log.dirs={self.data_dir}",
            f"listeners={self.security}://127.0.0.1:{self.port}",
            "metrics.listener=" + ("http://127.0.0.1:0" if self.metrics else ""),
            "kafka.listeners=" + (f"{self.kafka_security}://127.0.0.1:{self.kafka_port}" if self.kafka else ""),
            *self.overrides,
        ]

    # -- starting and stopping ---------------------------------------------------------------------

    def start(self, timeout_s: float = 30.0) -> InProcessBroker:
        """Start and wait until the listeners are bound (``port``... set); RuntimeError if it
        cannot start (what ``triolog serve`` would print, and the log so far)."""
        from triolog.config.loader import load_config
        from triolog.config.log_config import ConfigError

        try:
            config, warnings = load_config(self.config_file, self.config_items())
        except ConfigError as exc:  # what `triolog serve` prints before exiting with 1
            raise RuntimeError(f"triolog: invalid configuration: {exc}") from exc
        except OSError as exc:
            raise RuntimeError(f"triolog: cannot read the configuration: {exc.strerror}: {exc.filename}") from exc
        self.level = _LEVELS.get(config.logger_level.lower(), logging.INFO)
        self._started.clear()
        self._failure = None
        _ROUTING.add(self)
        context = contextvars.copy_context()
        context.run(_CURRENT.set, self)
        self._thread = threading.Thread(
            target=context.run,
            args=(self._thread_main, config, warnings),
            name=f"triolog-broker-{self.data_dir.name}",
            daemon=True,
        )
        self._thread.start()
        if not self._started.wait(timeout_s):
            self.stop()
            raise RuntimeError(f"broker did not start within {timeout_s} s:\n{self.log_text()}")
        if self._failure is not None:
            self._thread.join(timeout_s)
            _ROUTING.remove(self)
            from triolog.broker.server.app import startup_failure

            failure = startup_failure(self._failure) or self._failure
            raise RuntimeError(f"broker did not start: {failure}\n{self.log_text()}") from self._failure
        return self

    def _thread_main(self, config, warnings) -> None:
        import trio

        try:
            trio.run(self._serve, config, warnings, clock=self.mock_clock)
        except BaseException as exc:  # reported by start() (or stop())
            self._failure = exc
        finally:
            self._started.set()

    async def _serve(self, config, warnings) -> None:
        import structlog
        import trio

        from triolog.broker.server.app import BrokerServer

        log = structlog.get_logger("triolog.config")
        for warning in warnings:
            log.warning("config_warning", message=warning)
        kwargs = {} if self.storage_clock is None else {"clock": self.storage_clock}
        server = self.server = BrokerServer(config, **kwargs)
        self._token = trio.lowlevel.current_trio_token()
        async with trio.open_nursery() as nursery:
            address = await nursery.start(server.run)
            self.port = address.port
            self.kafka_port = address.kafka_port or 0
            self.metrics_port = address.metrics_port
            self._started.set()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def stop(self, timeout_s: float = 60.0) -> int:
        """Shut down as SIGTERM would (in-flight requests finish, logs closed cleanly, checkpoints
        written): 0, or 1 if the broker's loop ended with an error."""
        import trio

        thread = self._thread
        if thread is None:
            return 0
        if thread.is_alive() and self._token is not None and self.server is not None:
            try:
                if self.mock_clock is not None:  # the shutdown's waits pass at once, not never
                    trio.from_thread.run_sync(
                        setattr, self.mock_clock, "autojump_threshold", 0.0, trio_token=self._token
                    )
                trio.from_thread.run_sync(self.server.shutdown, trio_token=self._token)
            except trio.RunFinishedError:
                pass
        thread.join(timeout_s)
        if thread.is_alive():
            raise RuntimeError(f"broker did not stop within {timeout_s} s:\n{self.log_text()}")
        self._thread = None
        _ROUTING.remove(self)
        return 0 if self._failure is None else 1

    #: In-process there is no SIGKILL: teardown code written for a subprocess stops it cleanly.
    kill = stop

    def advance(self, seconds: float) -> None:
        """Move the broker's MockClock on by ``seconds``, and return once its sleeps and timeouts
        due by then have run.

        The jump waits until every task of the broker is blocked (trio's wait_all_tasks_blocked):
        what the test did before (a connection made, a request sent) has been taken up, so a task
        on its way to a sleep (the accept loop about to wait out max.connection.creation.rate, say)
        sleeps from the time it started at, not from after the jump. After the jump it waits so
        again: what came due has run, as far as it goes without a worker thread or the network
        (a request read from a socket is answered; one handed to a worker thread may still be in
        it). ``advance(0)`` only waits."""
        import trio
        import trio.testing

        clock = self.mock_clock
        if clock is None:
            raise RuntimeError("this broker runs on real time: pass mock_clock=trio.testing.MockClock()")

        async def jump() -> None:
            await trio.testing.wait_all_tasks_blocked()
            clock.jump(seconds)
            await trio.testing.wait_all_tasks_blocked()

        trio.from_thread.run(jump, trio_token=self._token)

    def call_in_loop(self, fn, *args):
        """``fn(*args)`` run in the broker's event loop thread (to read its state consistently)."""
        import trio

        return trio.from_thread.run_sync(fn, *args, trio_token=self._token)

    # -- its log -------------------------------------------------------------------------------------

    def _record(self, event_dict: dict) -> None:
        if _LEVELS.get(str(event_dict.get("level", "info")), logging.INFO) < self.level:
            return
        line = json.dumps({k: v for k, v in event_dict.items() if not k.startswith("_")}, default=repr)
        with self._lines_lock:
            self._lines.append(line)
            with open(self.log_path, "a") as f:  # kept for the eyes of whoever debugs a test
                f.write(line + "\n")

    def events(self) -> list[dict]:
        """The log events so far, as ``triolog serve --override logger.format=json`` writes them."""
        with self._lines_lock:
            return [json.loads(line) for line in self._lines]

    def log_text(self) -> str:
        with self._lines_lock:
            return "".join(line + "\n" for line in self._lines)

    # -- its metrics --------------------------------------------------------------------------------

    def scrape(self, timeout_s: float = 10.0) -> str:
        """The Prometheus text exposition: GET /metrics of the endpoint when the broker serves one
        (``metrics=True``), else its registry rendered the same way."""
        if self.metrics_port is not None:
            import urllib.request

            with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=timeout_s) as r:
                return r.read().decode()
        from prometheus_client import generate_latest

        return generate_latest(self._running_server().metrics.registry).decode()

    def _running_server(self) -> BrokerServer:
        if self.server is None:
            raise RuntimeError("the broker has not been started")
        return self.server

    def sample(self, name: str, **labels: str) -> float:
        value = self._running_server().metrics.registry.get_sample_value(name, labels)
        if value is None:
            raise KeyError(f"no sample {name}{labels}")
        return value

    # -- context manager ----------------------------------------------------------------------------

    def __enter__(self) -> InProcessBroker:
        return self if self.running else self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def bootstrap(self) -> str:
        """``127.0.0.1:<port>`` of the msgpack listener (``--bootstrap-server``, the client's)."""
        return f"127.0.0.1:{self.port}"

    @property
    def kafka_bootstrap(self) -> str:
        """``127.0.0.1:<port>`` of the Kafka-protocol listener (for Kafka's own clients)."""
        return f"127.0.0.1:{self.kafka_port}"


# -- the command line, in-process ----------------------------------------------------------------------


@dataclass
class CliResult:
    code: int
    stdout: bytes
    stderr: str

    @property
    def out(self) -> str:
        return self.stdout.decode()


_CLI_LOCK = threading.RLock()
_BOOTSTRAP_ENV = "TRIOLOG_BOOTSTRAP_SERVER"


def run_cli(*args: str, stdin: bytes = b"", env: dict[str, str] | None = None) -> CliResult:
    """``triolog ARGS`` through ``triolog.broker.cli.main``, in this process: its exit code (or
    SystemExit's), stdout as bytes and stderr as text. ``stdin`` is what it reads; ``env`` adds
    variables for the call (TRIOLOG_BOOTSTRAP_SERVER is unset unless given there). Inside a running
    trio loop (an async test) the command runs in a thread, since it runs trio itself."""
    try:
        import trio

        trio.lowlevel.current_trio_token()
    except RuntimeError:
        return _run_cli(args, stdin, env)
    box: list = []
    thread = threading.Thread(target=lambda: box.append(_run_cli(args, stdin, env)), name="triolog-cli")
    thread.start()
    thread.join()
    if not box:
        raise RuntimeError("the command's thread ended without a result")
    return box[0]


def _run_cli(args: Sequence[str], stdin: bytes, env: dict[str, str] | None) -> CliResult:
    from triolog.broker.cli import main

    stdin_text = io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8")
    out, err = io.BytesIO(), io.BytesIO()
    out_text = io.TextIOWrapper(out, encoding="utf-8", write_through=True)
    err_text = io.TextIOWrapper(err, encoding="utf-8", errors="backslashreplace", write_through=True)
    with _CLI_LOCK, _environment({_BOOTSTRAP_ENV: None, **(env or {})}):
        saved = sys.stdin, sys.stdout, sys.stderr
        sys.stdin, sys.stdout, sys.stderr = stdin_text, out_text, err_text
        try:
            try:
                code = main(list(args))
            except SystemExit as exc:
                if exc.code is None or isinstance(exc.code, int):
                    code = exc.code or 0
                else:  # sys.exit(message): printed to stderr, status 1, as the interpreter does
                    print(exc.code, file=sys.stderr)
                    code = 1
            out_text.flush()
            err_text.flush()
        finally:
            sys.stdin, sys.stdout, sys.stderr = saved
    if code is None:
        code = 0
    elif not isinstance(code, int):  # sys.exit("message"): printed, exit code 1
        err.write(f"{code}\n".encode())
        code = 1
    return CliResult(code, out.getvalue(), err.getvalue().decode("utf-8", errors="replace"))


class _environment:
    """os.environ with ``changes`` (None: unset) for a ``with``, then exactly as before."""

    def __init__(self, changes: dict[str, str | None]):
        self.changes = changes

    def __enter__(self) -> None:
        self.saved = {key: os.environ.get(key) for key in self.changes}
        for key, value in self.changes.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value

    def __exit__(self, *exc) -> None:
        for key, value in self.saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


_names = iter(range(1 << 62))


def free_topic_name(prefix: str = "t") -> str:
    """A topic name no other call in this process returned (for a shared broker)."""
    return f"{prefix}-{os.getpid()}-{next(_names)}"


# -- the pytest fixtures --------------------------------------------------------------------------------


@pytest.fixture
def triolog_broker_factory(tmp_path) -> Iterator:
    """``start(*overrides, data_dir=None, **options)``: a started :class:`InProcessBroker`
    (options as its constructor's), each stopped after the test."""
    started: list[InProcessBroker] = []
    count = iter(range(1 << 30))

    def start(*overrides: str, data_dir: Path | None = None, **options) -> InProcessBroker:
        broker = InProcessBroker(data_dir or tmp_path / f"broker-{next(count)}", overrides, **options)
        started.append(broker)
        return broker.start()

    yield start
    for broker in reversed(started):
        broker.stop()


@pytest.fixture
def triolog_broker(triolog_broker_factory) -> InProcessBroker:
    """A broker of this test's own, empty, both listeners on free ports of 127.0.0.1."""
    return triolog_broker_factory()


@pytest.fixture(scope="session")
def triolog_session_broker(tmp_path_factory) -> Iterator[InProcessBroker]:
    """One broker for the session (both listeners); tests share it, so name topics uniquely
    (``triolog.testing.free_topic_name()``)."""
    broker = InProcessBroker(tmp_path_factory.mktemp("triolog-session") / "data").start()
    yield broker
    broker.stop()


@pytest.fixture
def triolog_cli():
    """``run(*args, stdin=b"", env=None)``: ``triolog ARGS`` in this process (:func:`run_cli`)."""
    return run_cli
