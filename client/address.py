"""Broker addresses (kept apart from the connection so the CLI can parse them without importing it)."""

from __future__ import annotations

__all__ = ["DEFAULT_BOOTSTRAP", "parse_bootstrap"]

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"


def parse_bootstrap(bootstrap: str) -> tuple[str, int]:
    """``host:port`` (or ``[v6]:port``; the first of a comma-separated list) as (host, port)."""
    first = bootstrap.split(",")[0].strip()
    if first.startswith("PLAINTEXT://"):
        first = first[len("PLAINTEXT://"):]
    host, sep, port = first.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"bootstrap server must be host:port, got {bootstrap!r}")
    return host.strip("[]"), int(port)
