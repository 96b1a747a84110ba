"""The ``triolog`` command: one argparse subcommand per tool (``python -m triolog.broker.cli`` works too).

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
    from triolog.broker.tools import dump_log

    parser = subparsers.add_parser(
        "dump-log",
        help="dump segment files (.log, .index, .timeindex) like Kafka's kafka-dump-log.sh",
        description=dump_log.DESCRIPTION,
    )
    dump_log.add_arguments(parser)
    parser.set_defaults(run=dump_log.run)


def _add_serve(subparsers) -> None:
    parser = subparsers.add_parser(
        "serve",
        help="run the broker (default: the embedded config/server.properties)",
        description="Run the triolog broker until SIGTERM or SIGINT, then shut down cleanly. "
        "Configuration layers, lowest first: the embedded server.properties, --config FILE, "
        "TRIOLOG_<KEY> environment variables (log.retention.ms -> TRIOLOG_LOG_RETENTION_MS), --override.",
    )
    parser.add_argument("--config", metavar="FILE", help="a server.properties file")
    parser.add_argument("--override", metavar="KEY=VALUE", action="append", default=[],
                        help="set one config key (repeatable), e.g. --override log.segment.bytes=1048576")
    parser.set_defaults(run=_run_serve)


def _run_serve(args) -> int:
    import trio

    from triolog.broker.logger import configure_logging
    from triolog.broker.server.app import serve
    from triolog.config.loader import load_config
    from triolog.config.log_config import ConfigError

    try:
        config, warnings = load_config(args.config, args.override)
    except ConfigError as exc:
        print(f"triolog: invalid configuration: {exc}", file=sys.stderr)
        return 2
    configure_logging(config.logger_format, config.logger_level)
    import structlog

    log = structlog.get_logger("triolog.config")
    for warning in warnings:
        log.warning("config_warning", message=warning)
    from triolog.broker.allocator import MMAP_THRESHOLD_BYTES, fix_mmap_threshold

    log.info("malloc_mmap_threshold", bytes=MMAP_THRESHOLD_BYTES, fixed=fix_mmap_threshold())
    trio.run(serve, config)
    return 0


def _client_tool(name: str, module_name: str, help_text: str):
    """A registrar for one of the client tools in :mod:`triolog.client.cli` (same shape as dump-log)."""

    def register(subparsers) -> None:
        import importlib

        module = importlib.import_module(f"triolog.client.cli.{module_name}")
        parser = subparsers.add_parser(name, help=help_text, description=module.DESCRIPTION)
        module.add_arguments(parser)
        parser.set_defaults(run=module.run)

    return register


_add_topics = _client_tool("topics", "topics", "create, list, describe, delete topics; alter topic configs")
_add_produce = _client_tool("produce", "produce", "produce lines from stdin as records")
_add_consume = _client_tool("consume", "consume", "print the records of a topic")
_add_offsets = _client_tool("offsets", "offsets", "print partition offsets for a time (latest, earliest, ms)")
_add_health = _client_tool("health", "health", "check that the broker answers (api_versions); exit 0 or 1")

#: Subcommand registrars, in the order ``triolog --help`` lists them.
SUBCOMMANDS = (_add_serve, _add_topics, _add_produce, _add_consume, _add_offsets, _add_dump_log, _add_health)


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
