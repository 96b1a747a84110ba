"""What the ops tests share: the Debian tools they run, free ports, polling."""

from __future__ import annotations

import shutil
import socket
import subprocess

import pytest

from tests.ops.dockerfile import ROOT

#: Installed by the Makefile's system-deps target (Debian packages prometheus and tini).
SYSTEM_TOOLS = ("promtool", "prometheus", "tini")


@pytest.fixture(scope="session")
def system_tools() -> dict[str, str]:
    """Paths of promtool, prometheus and tini; installs them with `make system-deps` when missing,
    so running pytest directly works as well as `make test`."""
    if not all(shutil.which(tool) for tool in SYSTEM_TOOLS):
        subprocess.run(["make", "--no-print-directory", "system-deps"], cwd=ROOT, check=True, timeout=600)
    found = {tool: shutil.which(tool) for tool in SYSTEM_TOOLS}
    missing = [tool for tool, path in found.items() if path is None]
    assert not missing, f"make system-deps did not install {missing}"
    return found


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


