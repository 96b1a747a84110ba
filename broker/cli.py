"""The ``triolog`` command: one argparse subcommand per tool (``python -m broker.cli`` works too).

Adding a subcommand (``serve``, ``topics``, ``produce``, ``consume``) is one function appended to
SUBCOMMANDS: it adds its parser to ``subparsers`` and sets ``run`` to a callable taking the parsed
arguments and returning the exit code. Import heavy modules inside that function or inside
``run``, so that ``triolog --help`` and the other subcommands stay fast.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def _add_dump_log(subparsers) -> None:
    from broker.tools import dump_log

    parser = subparsers.add_parser(
        "dump-log",
        help="dump segment files (.log, .index, .timeindex) like Kafka's kafka-dump-log.sh",
        description=dump_log.DESCRIPTION,
    )
    dump_log.add_arguments(parser)
    parser.set_defaults(run=dump_log.run)


#: Subcommand registrars, in the order ``triolog --help`` lists them.
SUBCOMMANDS = (_add_dump_log,)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="triolog", description="triolog: a Kafka-style log broker.")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for register in SUBCOMMANDS:
        register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # --help or a usage error, already printed by argparse
        return exc.code if isinstance(exc.code, int) else 2
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
