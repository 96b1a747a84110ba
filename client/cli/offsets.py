"""``triolog offsets``: Kafka's ``kafka-get-offsets.sh`` (GetOffsetShell).

Prints ``topic:partition:offset`` per partition. ``--time``: -1 / latest (the log end offset),
-2 / earliest (the log start offset), -3 / max-timestamp (the offset of the record with the
largest timestamp), or a time in ms (the first offset whose timestamp is >= it). Where the broker
finds no such record the offset printed is -1. With ``--output json`` (``-J``): one JSON array of
``{"topic", "partition", "offset", "timestamp"}``.
"""

from __future__ import annotations

import argparse

from .common import EXIT_OK, add_bootstrap, add_output, client_security, print_json, reports_errors

DESCRIPTION = "Print partition offsets for a time, like Kafka's kafka-get-offsets.sh."

_NAMED = {"latest": -1, "earliest": -2, "max-timestamp": -3}


def _time(text: str) -> int:
    if text in _NAMED:
        return _NAMED[text]
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected -1, -2, -3, latest, earliest, max-timestamp or ms, got {text!r}"
        ) from None
    if value < -3:
        raise argparse.ArgumentTypeError(f"expected -1, -2, -3 or a time in ms >= 0, got {value}")
    return value


def _partitions(text: str) -> list[int]:
    try:
        return [int(p) for p in text.split(",") if p.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a comma-separated list of partitions, got {text!r}") from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_bootstrap(parser)
    parser.add_argument("--topic", required=True, metavar="NAME", help="the topic")
    parser.add_argument(
        "--time",
        type=_time,
        default=-1,
        metavar="-1|-2|-3|MS",
        help="-1 latest (default), -2 earliest, -3 max timestamp, or a timestamp in ms",
    )
    parser.add_argument("--partitions", type=_partitions, metavar="P1,P2", help="only these partitions (default: all)")
    add_output(parser, 'an array of {"topic", "partition", "offset", "timestamp"}')


@reports_errors
def run(args: argparse.Namespace) -> int:
    from triolog.client.admin import AdminClient
    from triolog.client.types import TopicPartition

    with AdminClient(args.bootstrap_server, **client_security(args)) as admin:
        partitions = args.partitions
        if partitions is None:
            partitions = [p.partition for p in admin.describe_topics([args.topic])[args.topic].partitions]
        found = admin.list_offsets({TopicPartition(args.topic, p): args.time for p in partitions})
    if args.output == "json":
        print_json(
            [
                {
                    "topic": tp.topic,
                    "partition": tp.partition,
                    "offset": found[tp].offset,
                    "timestamp": found[tp].timestamp,
                }
                for tp in sorted(found)
            ]
        )
        return EXIT_OK
    for tp in sorted(found):
        print(f"{tp.topic}:{tp.partition}:{found[tp].offset}")
    return EXIT_OK
