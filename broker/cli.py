"""The ``triolog`` command: one argparse subcommand per tool (``python -m triolog.broker.cli`` works too).

Adding a subcommand (``serve``, ``topics``, ``produce``, ``consume``...) is one function appended to
SUBCOMMANDS: it adds its parser to ``subparsers`` and sets ``run`` to a callable taking the parsed
arguments and returning the exit code. Import heavy modules inside that function or inside
``run``, so that ``triolog --help`` and the other subcommands stay fast.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from triolog.client.cli import TOOLS


def _add_dump_log(subparsers) -> None:
    from triolog.broker.tools import dump_log

    parser = subparsers.add_parser(
        "dump-log",
        help="dump segment files (.log, .index, .timeindex, .snapshot) like Kafka's kafka-dump-log.sh",
        description=dump_log.DESCRIPTION,
    )
    dump_log.add_arguments(parser)
    parser.set_defaults(run=dump_log.run)


def _add_users(subparsers) -> None:
    from triolog.broker.tools import users

    parser = subparsers.add_parser(
        "users", help="add, delete and list SASL/SCRAM users (online or offline)", description=users.DESCRIPTION
    )
    users.add_arguments(parser)
    parser.set_defaults(run=users.run)


def _add_acls(subparsers) -> None:
    from triolog.broker.tools import acls

    parser = subparsers.add_parser(
        "acls", help="add, remove and list ACLs, like kafka-acls.sh (online or offline)", description=acls.DESCRIPTION
    )
    acls.add_arguments(parser)
    parser.set_defaults(run=acls.run)


def _add_configs(subparsers) -> None:
    from triolog.broker.tools import configs

    parser = subparsers.add_parser(
        "configs",
        help="set, delete and describe client quotas, like kafka-configs.sh (online or offline)",
        description=configs.DESCRIPTION,
    )
    configs.add_arguments(parser)
    parser.set_defaults(run=configs.run)


def _add_serve(subparsers) -> None:
    parser = subparsers.add_parser(
        "serve",
        help="run the broker (default: the embedded config/server.properties)",
        description="Run the triolog broker until SIGTERM or SIGINT, then shut down cleanly. "
        "Configuration layers, lowest first: the embedded server.properties, --config FILE, "
        "TRIOLOG_<KEY> environment variables (log.retention.ms -> TRIOLOG_LOG_RETENTION_MS), --override.",
    )
    parser.add_argument("--config", metavar="FILE", help="a server.properties file")
    parser.add_argument(
        "--override",
        metavar="KEY=VALUE",
        action="append",
        default=[],
        help="set one config key (repeatable), e.g. --override log.segment.bytes=1048576",
    )
    parser.set_defaults(run=_run_serve)


def _run_serve(args) -> int:
    import trio

    from triolog import core  # decided (and its WARNING dropped, see main) before logging is set up
    from triolog.broker.logger import configure_logging
    from triolog.broker.server.app import serve
    from triolog.config.loader import load_config
    from triolog.config.log_config import ConfigError

    try:
        config, warnings = load_config(args.config, args.override)
    except ConfigError as exc:
        print(f"triolog: invalid configuration: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:  # --config FILE missing or unreadable
        print(f"triolog: cannot read the configuration: {exc.strerror}: {exc.filename}", file=sys.stderr)
        return 1
    configure_logging(config.logger_format, config.logger_level)
    import structlog

    log = structlog.get_logger("triolog.config")
    for warning in warnings:
        log.warning("config_warning", message=warning)
    from triolog.broker.allocator import MMAP_THRESHOLD_BYTES, fix_mmap_threshold

    log.info("malloc_mmap_threshold", bytes=MMAP_THRESHOLD_BYTES, fixed=fix_mmap_threshold())
    # Which core the broker runs, in its own log (main() kept the import-time WARNING off stderr):
    # a WARNING when it fell back to pure Python unasked (no compiler at install, a stale build).
    core_log = structlog.get_logger("triolog.core")
    if core.warning() is None:
        core_log.info("compiled_core", status=core.status())
    else:
        core_log.warning("compiled_core", status=core.status(), message=core.warning())
    from triolog.broker.server.app import startup_failure

    try:
        trio.run(serve, config)
    except BaseException as exc:
        failure = startup_failure(exc)
        if failure is None:
            raise
        print(f"triolog: cannot start: {failure}", file=sys.stderr)
        return 1
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


#: One registrar per client tool (client.cli.TOOLS names them, their modules and their help).
_CLIENT_TOOLS = {name: _client_tool(name, module, help_text) for name, module, help_text in TOOLS}

#: Subcommand registrars, in the order ``triolog --help`` lists them.
SUBCOMMANDS = (
    _add_serve,
    *(register for name, register in _CLIENT_TOOLS.items() if name != "health"),
    _add_users,
    _add_acls,
    _add_configs,
    _add_dump_log,
    _CLIENT_TOOLS["health"],
)

#: The shell's exit code for a process ended by Ctrl-C (128 + SIGINT).
EXIT_INTERRUPTED = 130


def version_text() -> str:
    """Version, Python, and which core this install runs (compiled or the pure-Python fallback)."""
    import platform

    from triolog import __version__, core

    return f"triolog {__version__} (Python {platform.python_version()}; core: {core.status()})"


class _VersionAction(argparse.Action):
    """``--version``, computed only when asked (importing the package metadata costs a little)."""

    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(
            option_strings, dest, nargs=0, help="print the version of triolog and Python and which core runs, and exit"
        )

    def __call__(self, parser, namespace, values, option_string=None):
        print(version_text())
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="triolog", description="triolog: a Kafka-style log broker.")
    parser.add_argument("--version", action=_VersionAction)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for register in SUBCOMMANDS:
        register(subparsers)
    return parser


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so that the interpreter's last flush of a closed pipe cannot fail."""
    import os

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def _quiet_core_warning() -> None:
    """Keep the compiled core's import-time WARNING (triolog/core.py: pure Python, no compiler at
    install) off the stderr of every command: logging's last resort would print it on each
    ``produce``, ``consume``, ``topics``... call. The command says it where it matters instead:
    ``--version``, ``health`` (the broker's core) and the broker's startup log (``serve``). A logging
    setup of the caller's own (``main()`` called from a program) still receives the record."""
    import logging

    core_logger = logging.getLogger("triolog.core")
    if not any(isinstance(handler, logging.NullHandler) for handler in core_logger.handlers):
        core_logger.addHandler(logging.NullHandler())


def main(argv: Sequence[str] | None = None) -> int:
    """Run one subcommand. A reader that closed our stdout (``| head``) ends us quietly with 0,
    Ctrl-C with 130, as Kafka's shell tools do: neither is an error worth a traceback."""
    _quiet_core_warning()
    try:
        try:
            args = build_parser().parse_args(argv)
        except SystemExit as exc:  # --help or a usage error, already printed by argparse
            return exc.code if isinstance(exc.code, int) else 2
        code = args.run(args)
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's exit
        return code
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        _silence_stdout()
        return 0


if __name__ == "__main__":
    sys.exit(main())
