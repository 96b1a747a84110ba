"""The client-side subcommands of ``triolog`` (topics, produce, consume, offsets, groups...).

Each module has ``DESCRIPTION``, ``add_arguments(parser)`` and ``run(args) -> exit code``, the
shape of :mod:`triolog.broker.tools.dump_log`, so :mod:`triolog.broker.cli` registers them alike. Exit codes:
0 success, 1 an error reported by the broker or the connection (one ``Error: ...`` line on
stderr), 2 a usage error; Ctrl-C ends with 130 and a reader closing stdout (``| head``) with 0,
both in :func:`triolog.broker.cli.main`.
"""

#: (subcommand, module, help) of every client tool, in ``triolog --help`` order, for
#: :mod:`triolog.broker.cli` to register with its ``_client_tool``.
TOOLS = (
    ("topics", "topics", "create, list, describe, delete topics; alter topic configs"),
    ("produce", "produce", "produce lines from stdin as records"),
    ("consume", "consume", "print the records of a topic"),
    ("offsets", "offsets", "print partition offsets for a time (latest, earliest, ms)"),
    ("delete-records", "delete_records", "delete records below an offset, like Kafka's kafka-delete-records.sh"),
    (
        "groups",
        "groups",
        "list, describe, delete consumer groups or reset their offsets, like kafka-consumer-groups.sh",
    ),
    (
        "transactions",
        "transactions",
        "list, describe transactions and producers, abort a hanging one, like kafka-transactions.sh",
    ),
    ("health", "health", "check that the broker answers (api_versions); exit 0 or 1"),
)
