"""What every client subcommand shares: ``--bootstrap-server``, ``--command-config``, ``--output``,
and turning errors into exit codes."""

from __future__ import annotations

import argparse
import base64
import functools
import json
import os
import sys

from triolog.client.address import DEFAULT_BOOTSTRAP, parse_bootstrap
from triolog.client.errors import TriologClientError

#: Ctrl-C (130) and a closed stdout (0) are handled once, in triolog.broker.cli.main.
EXIT_OK, EXIT_ERROR, EXIT_USAGE = 0, 1, 2

#: The environment variable that gives --bootstrap-server its default.
BOOTSTRAP_ENV = "TRIOLOG_BOOTSTRAP_SERVER"


def _bootstrap(value: str) -> str:
    try:
        parse_bootstrap(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return value


def add_bootstrap(parser: argparse.ArgumentParser) -> None:
    default = os.environ.get(BOOTSTRAP_ENV) or DEFAULT_BOOTSTRAP
    parser.add_argument(
        "--bootstrap-server",
        metavar="HOST:PORT[,HOST:PORT...]",
        default=default,
        type=_bootstrap,
        help="the brokers to connect to first, any of which will do (on a cluster, the clients then "
        f"reach every broker they need) (default: ${BOOTSTRAP_ENV} if set, else {DEFAULT_BOOTSTRAP})",
    )
    add_command_config(parser)


def add_command_config(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--command-config",
        metavar="FILE",
        help="a Kafka client properties file: security.protocol, sasl.mechanism, sasl.username, "
        "sasl.password or sasl.jaas.config, ssl.truststore.location (PEM)... as Kafka's tools "
        "take it",
    )


def client_security(args: argparse.Namespace) -> dict:
    """The clients' keyword arguments for ``--command-config`` ({} without one); a bad file
    raises SecurityConfigError (reported as ``Error: ...``)."""
    path = getattr(args, "command_config", None)
    if not path:
        return {}
    from triolog.client.security import load_command_config

    return {"security": load_command_config(path)}


def add_output(parser: argparse.ArgumentParser, what: str = "one JSON document") -> None:
    """``--output text|json`` and its short form ``-J`` (= ``--output json``)."""
    parser.add_argument(
        "--output", choices=("text", "json"), default="text", help=f"text (default, Kafka's format) or json ({what})"
    )
    parser.add_argument("-J", dest="output", action="store_const", const="json", help="same as --output json")


def print_json(document) -> None:
    print(json.dumps(document, ensure_ascii=False))


def bytes_field(data: bytes | None) -> tuple[str | None, bool]:
    """(text, is_base64) for a key, value or header value in JSON: UTF-8 text when it is, else base64."""
    if data is None:
        return None, False
    try:
        return data.decode("utf-8"), False
    except UnicodeDecodeError:
        return base64.b64encode(data).decode("ascii"), True


def key_value(text: str) -> tuple[str, str]:
    """argparse type for ``--config k=v``."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value.strip()


def non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def print_table(rows: list[list], header: list[str]) -> None:
    """Kafka's layout: left-aligned columns, each as wide as its widest cell, one space apart."""
    cells = [[str(c) for c in row] for row in [header, *rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    for row in cells:
        print(" ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())


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
