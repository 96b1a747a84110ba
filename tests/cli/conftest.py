"""Fixtures: the REAL broker as a subprocess, and the CLI run as a subprocess against it."""

from __future__ import annotations

import itertools
import os
import re
import subprocess
import sys
from dataclasses import dataclass

import pytest

from tests.e2e.broker_process import KEEP_OLD_RECORDS, ROOT, BrokerProcess

_names = itertools.count()


@pytest.fixture(scope="session")
def broker(tmp_path_factory) -> BrokerProcess:
    process = BrokerProcess(tmp_path_factory.mktemp("cli-broker") / "data", KEEP_OLD_RECORDS, metrics=True).start()
    yield process
    process.kill()


@pytest.fixture
def topic(request) -> str:
    return re.sub(r"[^a-zA-Z0-9._-]", "_", request.node.name)[:180] + f"-{next(_names)}"


@dataclass
class Result:
    code: int
    stdout: bytes
    stderr: str

    @property
    def out(self) -> str:
        return self.stdout.decode()


def cli_env() -> dict[str, str]:
    """The environment the CLI subprocesses run in: this checkout first, no bootstrap default."""
    env = {k: v for k, v in os.environ.items() if k != "TRIOLOG_BOOTSTRAP_SERVER"}
    return {**env, "PYTHONPATH": str(ROOT)}


def cli_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "triolog.broker.cli", *args]


@pytest.fixture
def triolog():
    """``triolog(*args, stdin=b"", env={})``: ``python -m triolog.broker.cli ARGS`` as a subprocess.

    ``env`` adds variables; TRIOLOG_BOOTSTRAP_SERVER is unset unless given there."""

    def run(*args: str, stdin: bytes = b"", timeout: float = 20, env: dict | None = None) -> Result:
        env = {**cli_env(), **(env or {})}
        done = subprocess.run(cli_command(*args), input=stdin, capture_output=True,
                              cwd=ROOT, env=env, timeout=timeout)
        return Result(done.returncode, done.stdout, done.stderr.decode(errors="replace"))

    return run


@pytest.fixture
def server(broker) -> list[str]:
    """The ``--bootstrap-server`` option for the session broker."""
    return ["--bootstrap-server", f"127.0.0.1:{broker.port}"]
