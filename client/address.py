"""Broker addresses (kept apart from the connection so the CLI can parse them without importing it).

``bootstrap_servers`` is what kafka-python takes: one ``host:port``, a comma-separated string of
them, or a list. The client tries them in order until one accepts a connection.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["DEFAULT_BOOTSTRAP", "format_address", "parse_bootstrap", "parse_bootstrap_servers"]

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"


def _parse_one(text: str, given) -> tuple[str, int]:
    entry = text.strip()
    if entry.startswith("PLAINTEXT://"):
        entry = entry[len("PLAINTEXT://") :]
    host, sep, port = entry.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise ValueError(
            f"bootstrap server must be host:port, got {text.strip()!r}" + ("" if given == text else f" in {given!r}")
        )
    return host.strip("[]"), int(port)


def parse_bootstrap_servers(bootstrap: str | Iterable[str]) -> list[tuple[str, int]]:
    """Every (host, port) of ``"h1:9092,h2:9092"`` or ``["h1:9092", "h2:9092"]``, in order,
    without repeats; ValueError naming the first malformed entry."""
    if isinstance(bootstrap, str):
        entries = bootstrap.split(",")
    elif isinstance(bootstrap, Iterable):
        entries = list(bootstrap)
        if not all(isinstance(e, str) for e in entries):
            raise ValueError(f"bootstrap servers must be host:port strings, got {bootstrap!r}")
        entries = [part for e in entries for part in e.split(",")]
    else:
        raise ValueError(f"bootstrap servers must be a str or a list of str, got {type(bootstrap).__name__}")
    addresses = [_parse_one(e, bootstrap) for e in entries if e.strip()]
    if not addresses:
        raise ValueError(f"bootstrap servers must name at least one host:port, got {bootstrap!r}")
    return list(dict.fromkeys(addresses))


def parse_bootstrap(bootstrap: str | Iterable[str]) -> tuple[str, int]:
    """The first (host, port) of ``bootstrap``; every entry is checked."""
    return parse_bootstrap_servers(bootstrap)[0]


def format_address(address: tuple[str, int]) -> str:
    host, port = address
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
