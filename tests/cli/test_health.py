"""``triolog health``, the image's HEALTHCHECK: a real api_versions round trip, exit 0 or 1."""

from __future__ import annotations

import socket
import time

from triolog import __version__
from triolog import core


def test_health_succeeds_against_a_running_broker(triolog, server, broker):
    result = triolog("health", *server, "--timeout", "5")
    assert result.code == 0, result.stderr
    lines = result.out.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"OK: broker at 127.0.0.1:{broker.port} ")
    assert "answered api_versions" in lines[0]
    # The broker says which core it runs (the same checkout and environment as this process).
    assert f"(triolog {__version__}, core: {core.status()}) answered" in lines[0], lines[0]


def test_health_fails_with_a_clear_message_when_nothing_listens(triolog):
    # A port that was free a moment ago: bound, then closed, so the connect is refused.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    result = triolog("health", "--bootstrap-server", f"127.0.0.1:{port}", "--timeout", "2")
    assert result.code == 1
    assert result.out == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"Error: broker at 127.0.0.1:{port} is not healthy: cannot connect")


def test_health_times_out_on_a_listener_that_never_answers(triolog):
    """A socket that accepts (the kernel's backlog) but never replies: what a hung broker looks like."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        port = sock.getsockname()[1]
        start = time.monotonic()
        result = triolog("health", "--bootstrap-server", f"127.0.0.1:{port}", "--timeout", "0.5")
        elapsed = time.monotonic() - start
    assert result.code == 1
    assert "is not healthy: no api_versions response" in result.stderr, result.stderr
    assert elapsed < 10


def test_health_rejects_a_bad_timeout(triolog):
    result = triolog("health", "--timeout", "0")
    assert result.code == 2
    assert "expected a timeout > 0 s" in result.stderr
