"""``triolog topics``: Kafka's ``kafka-topics.sh`` (plus ``--alter`` of configs, kafka-configs' job).

Output follows Kafka's: ``--list`` prints one name a line; ``--describe`` prints Kafka's
``Topic: ... PartitionCount: ...`` line (``Configs:`` lists the topic's overrides only) and one
line per partition, to which we add the log start offset and high watermark; ``--create`` prints
``Created topic T.``.
"""

from __future__ import annotations

import argparse

from .common import EXIT_OK, EXIT_USAGE, add_bootstrap, error, key_value, reports_errors

DESCRIPTION = ("Create, list, describe, delete topics or alter their configs, like Kafka's kafka-topics.sh. "
               "Exactly one of --create, --list, --describe, --delete, --alter.")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_bootstrap(parser)
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--create", action="store_true", help="create --topic")
    action.add_argument("--list", action="store_true", help="list topic names, one a line")
    action.add_argument("--describe", action="store_true", help="describe --topic (default: every topic)")
    action.add_argument("--delete", action="store_true", help="delete --topic")
    action.add_argument("--alter", action="store_true",
                        help="set (--config) or remove (--delete-config) topic config overrides of --topic")
    parser.add_argument("--topic", metavar="NAME", help="the topic to act on")
    parser.add_argument("--partitions", type=int, metavar="N",
                        help="partition count for --create (default: the broker's num.partitions)")
    parser.add_argument("--replication-factor", type=int, default=-1, metavar="N",
                        help="for --create: 1 (a single node has no replicas) or -1 for the default")
    parser.add_argument("--config", type=key_value, action="append", default=[], metavar="KEY=VALUE",
                        help="a topic config for --create or --alter (repeatable), e.g. retention.ms=60000")
    parser.add_argument("--delete-config", action="append", default=[], metavar="KEY",
                        help="for --alter: remove an override so the broker default applies again (repeatable)")
    parser.add_argument("--if-not-exists", action="store_true", help="for --create: no error if the topic exists")
    parser.add_argument("--if-exists", action="store_true", help="for --delete/--alter: no error if it does not exist")


@reports_errors
def run(args: argparse.Namespace) -> int:
    if (args.create or args.delete or args.alter) and not args.topic:
        error("--topic is required with --create, --delete and --alter")
        return EXIT_USAGE
    if args.alter and args.partitions is not None:
        error("--alter --partitions is not supported: the triolog protocol has no API to add partitions")
        return EXIT_USAGE
    if args.alter and not (args.config or args.delete_config):
        error("--alter needs --config KEY=VALUE or --delete-config KEY")
        return EXIT_USAGE
    from triolog.client.admin import AdminClient

    with AdminClient(args.bootstrap_server) as admin:
        if args.create:
            return _create(admin, args)
        if args.list:
            for name in admin.list_topics():
                print(name)
            return EXIT_OK
        if args.describe:
            return _describe(admin, args.topic)
        if args.delete:
            return _if_exists(args, lambda: admin.delete_topics([args.topic]), f"Deleted topic {args.topic}.")
        return _if_exists(args, lambda: admin.alter_configs({args.topic: dict(args.config)},
                                                              {args.topic: args.delete_config}),
                          f"Completed updating config for topic {args.topic}.")


def _create(admin, args) -> int:
    from triolog.client.errors import TopicAlreadyExistsError
    from triolog.client.types import NewTopic

    new = NewTopic(args.topic, -1 if args.partitions is None else args.partitions, args.replication_factor,
                   dict(args.config))
    try:
        admin.create_topics([new])
    except TopicAlreadyExistsError:
        if not args.if_not_exists:
            raise
        return EXIT_OK
    print(f"Created topic {args.topic}.")
    return EXIT_OK


def _if_exists(args, action, done_message: str) -> int:
    from triolog.client.errors import UnknownTopicOrPartitionError

    try:
        action()
    except UnknownTopicOrPartitionError:
        if not args.if_exists:
            raise
        return EXIT_OK
    print(done_message)
    return EXIT_OK


def _describe(admin, topic: str | None) -> int:
    descriptions = admin.describe_topics(None if topic is None else [topic])
    configs = admin.describe_configs(sorted(descriptions)) if descriptions else {}
    for name in sorted(descriptions):
        description = descriptions[name]
        overrides = ",".join(f"{k}={entry.value}" for k, entry in sorted(configs[name].items())
                             if entry.source == "topic")
        print(f"Topic: {name}\tPartitionCount: {len(description.partitions)}\tReplicationFactor: 1\t"
              f"Configs: {overrides}")
        for p in description.partitions:
            print(f"\tTopic: {name}\tPartition: {p.partition}\tLeader: {p.leader}\tReplicas: {p.leader}\t"
                  f"Isr: {p.leader}\tLogStartOffset: {p.log_start_offset}\tHighWatermark: {p.high_watermark}")
    return EXIT_OK
