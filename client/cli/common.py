"""What every client subcommand shares: ``--bootstrap-server`` and turning errors into exit codes."""

from __future__ import annotations

import argparse
import functools
import sys

from triolog.client.address import DEFAULT_BOOTSTRAP, parse_bootstrap
from triolog.client.errors import TriologClientError

EXIT_OK, EXIT_ERROR, EXIT_USAGE = 0, 1, 2


def _bootstrap(value: str) -> str:
    try:
        parse_bootstrap(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return value


def add_bootstrap(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bootstrap-server", metavar="HOST:PORT", default=DEFAULT_BOOTSTRAP, type=_bootstrap,
                        help=f"the broker to connect to (default {DEFAULT_BOOTSTRAP})")


def key_value(text: str) -> tuple[str, str]:
    """argparse type for ``--config k=v``."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value.strip()


def error(message: str) -> None:
    print(f"Error: {message}", file=sys.stderr)


def reports_errors(run):
    """Decorator: a client error becomes one ``Error: ...`` line on stderr and exit code 1."""

    @functools.wraps(run)
    def wrapper(args) -> int:
        try:
            return run(args)
        except TriologClientError as exc:
            error(str(exc))
            return EXIT_ERROR

    return wrapper
