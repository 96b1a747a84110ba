"""Fixtures: the real broker in this process (triolog.testing), and the CLI run through its
``main()`` against it; ``cli_command``/``cli_env`` for the tests of the command as a process
(tests/cli/test_process_endings.py)."""

from __future__ import annotations

import itertools
import os
import re
import subprocess
import sys

import pytest

from triolog.testing import CliResult as Result, run_cli
from tests.e2e.broker_process import KEEP_OLD_RECORDS, ROOT, InProcessBroker

_names = itertools.count()


@pytest.fixture(scope="session")
def broker(tmp_path_factory) -> InProcessBroker:
    broker = InProcessBroker(tmp_path_factory.mktemp("cli-broker") / "data", KEEP_OLD_RECORDS, metrics=True).start()
    yield broker
    broker.stop()


@pytest.fixture
def topic(request) -> str:
    return re.sub(r"[^a-zA-Z0-9._-]", "_", request.node.name)[:180] + f"-{next(_names)}"


def cli_env() -> dict[str, str]:
    """The environment the CLI subprocesses run in: this checkout first, no bootstrap default."""
    env = {k: v for k, v in os.environ.items() if k != "TRIOLOG_BOOTSTRAP_SERVER"}
    return {**env, "PYTHONPATH": str(ROOT)}


def cli_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "triolog.broker.cli", *args]


@pytest.fixture
def triolog():
    """``triolog(*args, stdin=b"", env={})``: ``triolog ARGS`` through ``triolog.broker.cli.main``
    in this process (stdout, stderr and the exit code captured: triolog.testing.run_cli).

    ``env`` adds variables; TRIOLOG_BOOTSTRAP_SERVER is unset unless given there."""

    def run(*args: str, stdin: bytes = b"", timeout: float = 20, env: dict | None = None) -> Result:
        return run_cli(*args, stdin=stdin, env=env)

    return run


@pytest.fixture
def server(broker) -> list[str]:
    """The ``--bootstrap-server`` option for the session broker."""
    return ["--bootstrap-server", f"127.0.0.1:{broker.port}"]
