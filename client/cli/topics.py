"""``triolog topics``: Kafka's ``kafka-topics.sh`` (plus ``--alter`` of configs, kafka-configs' job).

``--alter --partitions N`` grows the topic to N partitions, as kafka-topics.sh does (it may be
combined with ``--config``/``--delete-config``; the partitions are added first).

Output follows Kafka's: ``--list`` prints one name a line; ``--describe`` prints Kafka's
``Topic: ... PartitionCount: ...`` line (``Configs:`` lists the topic's overrides only) and one
line per partition, to which we add the log start offset, the high watermark, and what
kafka-log-dirs.sh reports: the partition's size in bytes (its segment files) and segment count;
``--create`` prints ``Created topic T.``.

With ``--output json`` (``-J``): ``--list`` prints a JSON array of names; ``--describe`` an array
of ``{"name", "partition_count", "configs", "partitions": [{"partition", "leader", "replicas",
"isr", "log_start_offset", "high_watermark", "size_bytes", "segments", "log_dir"}]}``; the other actions
``{"topic", "result"}`` (``created``, ``deleted``, ``altered``, ``exists``, ``absent``).
"""

from __future__ import annotations

import argparse

from .common import (
    EXIT_OK,
    EXIT_USAGE,
    add_bootstrap,
    add_output,
    client_security,
    error,
    key_value,
    print_json,
    reports_errors,
)

DESCRIPTION = (
    "Create, list, describe, delete topics, add partitions or alter their configs, like Kafka's "
    "kafka-topics.sh. "
    "Exactly one of --create, --list, --describe, --delete, --alter."
)


def replica_assignment(value: str) -> tuple[tuple[int, ...], ...]:
    """``"1:2:3,2:3:1"`` -> ((1, 2, 3), (2, 3, 1)): kafka-topics.sh's --replica-assignment."""
    try:
        out = tuple(tuple(int(node) for node in part.split(":")) for part in value.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a replica assignment: broker ids, ':' between replicas, ',' between partitions"
        ) from None
    return out


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_bootstrap(parser)
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--create", action="store_true", help="create --topic")
    action.add_argument("--list", action="store_true", help="list topic names, one a line")
    action.add_argument("--describe", action="store_true", help="describe --topic (default: every topic)")
    action.add_argument("--delete", action="store_true", help="delete --topic")
    action.add_argument(
        "--alter",
        action="store_true",
        help="grow --topic to --partitions N, and/or set (--config) or remove (--delete-config) "
        "its topic config overrides",
    )
    parser.add_argument("--topic", metavar="NAME", help="the topic to act on")
    parser.add_argument(
        "--partitions",
        type=int,
        metavar="N",
        help="partition count for --create (default: the broker's num.partitions); for "
        "--alter the new total, above the current count",
    )
    parser.add_argument(
        "--replication-factor",
        type=int,
        metavar="N",
        help="for --create: the number of replicas (1 on a single broker, up to the live brokers on a "
        "cluster) or -1 for the default (the default)",
    )
    parser.add_argument(
        "--replica-assignment",
        type=replica_assignment,
        metavar="B:B:B,B:B:B",
        help="for --create, instead of --partitions and --replication-factor: per partition (from 0, "
        "comma-separated) the broker ids of its replicas, preferred leader first, colon-separated "
        "(kafka-topics.sh's syntax: 1:2:3,2:3:1)",
    )
    parser.add_argument(
        "--config",
        type=key_value,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a topic config for --create or --alter (repeatable), e.g. retention.ms=60000",
    )
    parser.add_argument(
        "--delete-config",
        action="append",
        default=[],
        metavar="KEY",
        help="for --alter: remove an override so the broker default applies again (repeatable)",
    )
    parser.add_argument("--if-not-exists", action="store_true", help="for --create: no error if the topic exists")
    parser.add_argument("--if-exists", action="store_true", help="for --delete/--alter: no error if it does not exist")
    add_output(parser, "--list: an array of names; --describe: an array of topics")


@reports_errors
def run(args: argparse.Namespace) -> int:
    if (args.create or args.delete or args.alter) and not args.topic:
        error("--topic is required with --create, --delete and --alter")
        return EXIT_USAGE
    if args.replica_assignment is not None and (
        not args.create or args.partitions is not None or args.replication_factor is not None
    ):
        error("--replica-assignment goes with --create, without --partitions and --replication-factor")
        return EXIT_USAGE
    if args.alter and not (args.config or args.delete_config or args.partitions is not None):
        error("--alter needs --partitions N, --config KEY=VALUE or --delete-config KEY")
        return EXIT_USAGE
    from triolog.client.admin import AdminClient

    with AdminClient(args.bootstrap_server, **client_security(args)) as admin:
        if args.create:
            return _create(admin, args)
        if args.list:
            names = admin.list_topics()
            if args.output == "json":
                print_json(names)
            else:
                for name in names:
                    print(name)
            return EXIT_OK
        if args.describe:
            return _describe(admin, args.topic, args.output == "json")
        if args.delete:
            return _if_exists(
                args, lambda: admin.delete_topics([args.topic]), f"Deleted topic {args.topic}.", "deleted"
            )
        return _if_exists(
            args,
            lambda: _alter(admin, args),
            f"Completed updating config for topic {args.topic}."
            if args.partitions is None
            else f"Altered topic {args.topic}.",
            "altered",
        )


def _alter(admin, args) -> None:
    if args.partitions is not None:
        admin.create_partitions({args.topic: args.partitions})
    if args.config or args.delete_config:
        admin.alter_configs({args.topic: dict(args.config)}, {args.topic: args.delete_config})


def _done(args, text: str, result: str) -> None:
    if args.output == "json":
        print_json({"topic": args.topic, "result": result})
    else:
        print(text)


def _create(admin, args) -> int:
    from triolog.client.errors import TopicAlreadyExistsError
    from triolog.client.types import NewTopic

    new = NewTopic(
        args.topic,
        -1 if args.partitions is None else args.partitions,
        -1 if args.replication_factor is None else args.replication_factor,
        dict(args.config),
        args.replica_assignment,
    )
    try:
        admin.create_topics([new])
    except TopicAlreadyExistsError:
        if not args.if_not_exists:
            raise
        if args.output == "json":
            print_json({"topic": args.topic, "result": "exists"})
        return EXIT_OK
    _done(args, f"Created topic {args.topic}.", "created")
    return EXIT_OK


def _if_exists(args, action, done_message: str, result: str) -> int:
    from triolog.client.errors import UnknownTopicOrPartitionError

    try:
        action()
    except UnknownTopicOrPartitionError:
        if not args.if_exists:
            raise
        if args.output == "json":
            print_json({"topic": args.topic, "result": "absent"})
        return EXIT_OK
    _done(args, done_message, result)
    return EXIT_OK


def _describe(admin, topic: str | None, as_json: bool) -> int:
    descriptions = admin.describe_topics(None if topic is None else [topic])
    names = sorted(descriptions)
    configs = admin.describe_configs(names) if names else {}
    # Sizes as kafka-log-dirs.sh reports them. Without --topic, every partition the broker has: a
    # topic deleted since the metadata was read is then simply not there (its sizes print as -1).
    on_disk = {}
    if names:
        for path, log_dir in admin.describe_log_dirs(None if topic is None else [topic]).items():
            for tp, info in log_dir.partitions.items():
                on_disk[tp] = (info, path)
    out = []
    for name in names:
        description = descriptions[name]
        overrides = {k: entry.value for k, entry in sorted(configs[name].items()) if entry.source == "topic"}
        partitions = []
        for p in description.partitions:
            info, path = on_disk.get((name, p.partition), (None, None))
            partitions.append(
                {
                    "partition": p.partition,
                    "leader": p.leader,
                    "replicas": list(p.replicas),
                    "isr": list(p.isr),
                    "log_start_offset": p.log_start_offset,
                    "high_watermark": p.high_watermark,
                    "size_bytes": info.size_bytes if info else -1,
                    "segments": info.segments if info else -1,
                    "log_dir": path,
                }
            )
        out.append({"name": name, "partition_count": len(partitions), "configs": overrides, "partitions": partitions})
    if as_json:
        print_json(out)
        return EXIT_OK
    for topic_doc in out:
        name = topic_doc["name"]
        configs_text = ",".join(f"{k}={v}" for k, v in topic_doc["configs"].items())
        replication = max((len(p["replicas"]) for p in topic_doc["partitions"]), default=1) or 1
        print(
            f"Topic: {name}\tPartitionCount: {topic_doc['partition_count']}\tReplicationFactor: {replication}\t"
            f"Configs: {configs_text}"
        )
        for p in topic_doc["partitions"]:
            replicas = ",".join(map(str, p["replicas"])) or str(p["leader"])
            isr = ",".join(map(str, p["isr"])) or str(p["leader"])
            print(
                f"\tTopic: {name}\tPartition: {p['partition']}\tLeader: {p['leader']}\tReplicas: {replicas}\t"
                f"Isr: {isr}\tLogStartOffset: {p['log_start_offset']}\tHighWatermark: {p['high_watermark']}\t"
                f"Size: {p['size_bytes']}\tSegments: {p['segments']}"
            )
    return EXIT_OK
