"""The client-side subcommands of ``triolog`` (topics, produce, consume, offsets).

Each module has ``DESCRIPTION``, ``add_arguments(parser)`` and ``run(args) -> exit code``, the
shape of :mod:`triolog.broker.tools.dump_log`, so :mod:`triolog.broker.cli` registers them alike. Exit codes:
0 success, 1 an error reported by the broker or the connection (one ``Error: ...`` line on
stderr), 2 a usage error; Ctrl-C ends with 130 and a reader closing stdout (``| head``) with 0,
both in :func:`triolog.broker.cli.main`.
"""
