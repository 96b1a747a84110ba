"""``triolog groups``: Kafka's ``kafka-consumer-groups.sh``.

- ``--list``: one group id a line (``--state S`` keeps the groups in that state).
- ``--describe --group G`` (or ``--all-groups``): Kafka's table, a row per partition the group
  has a member on or an offset for: ``GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG
  CONSUMER-ID HOST CLIENT-ID`` (``-`` where there is none; LAG = LOG-END-OFFSET - CURRENT-OFFSET).
  ``--members`` lists the members (``GROUP CONSUMER-ID HOST CLIENT-ID #PARTITIONS``, with
  ``--verbose`` their ASSIGNMENT too), ``--state`` the group (``GROUP COORDINATOR (ID)
  ASSIGNMENT-STRATEGY STATE #MEMBERS``).
- ``--reset-offsets --group G --topic T[:P,P...] | --all-topics`` with one of ``--to-earliest``,
  ``--to-latest``, ``--to-current``, ``--to-offset N``, ``--shift-by N``, ``--to-datetime
  YYYY-MM-DDTHH:mm:SS[.sss][zone]`` (no zone: local time, as Kafka): prints ``GROUP TOPIC
  PARTITION NEW-OFFSET``; only ``--execute`` commits them (``--dry-run``, the default, does not).
  New offsets are kept within [log start, log end], as Kafka does. As Kafka, a group with
  members is refused: its offsets can only be reset while it is inactive.
- ``--delete --group G`` (repeatable): deletes groups without members, with their offsets.

``--output json`` (``-J``) prints one JSON document instead.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys

from .common import (
    EXIT_ERROR,
    EXIT_OK,
    EXIT_USAGE,
    add_bootstrap,
    add_output,
    client_security,
    error,
    print_json,
    print_table,
    reports_errors,
)

DESCRIPTION = (
    "List, describe, delete consumer groups or reset their offsets, like Kafka's kafka-consumer-groups.sh. "
    "Exactly one of --list, --describe, --reset-offsets, --delete."
)

_RESETS = ("to_earliest", "to_latest", "to_current", "to_offset", "shift_by", "to_datetime")


def _topic_spec(text: str) -> tuple[str, list[int] | None]:
    topic, sep, parts = text.partition(":")
    if not topic:
        raise argparse.ArgumentTypeError(f"expected TOPIC or TOPIC:P1,P2, got {text!r}")
    if not sep:
        return topic, None
    try:
        return topic, [int(p) for p in parts.split(",") if p.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected TOPIC:P1,P2 with partition numbers, got {text!r}") from None


def _datetime_ms(text: str) -> int:
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected YYYY-MM-DDTHH:mm:SS.sss (optionally a zone), got {text!r}"
        ) from None
    return int(when.timestamp() * 1000)  # a naive time is local time, as Kafka reads it


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_bootstrap(parser)
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--list", action="store_true", help="list the groups, one id a line")
    action.add_argument("--describe", action="store_true", help="describe --group (offsets and lag by default)")
    action.add_argument("--reset-offsets", action="store_true", help="reset the committed offsets of --group")
    action.add_argument("--delete", action="store_true", help="delete --group (only a group without members)")
    parser.add_argument("--group", action="append", default=[], metavar="GROUP", help="the group (repeatable)")
    parser.add_argument("--all-groups", action="store_true", help="for --describe: every group")
    view = parser.add_mutually_exclusive_group()
    view.add_argument("--offsets", action="store_true", help="for --describe: partitions, offsets and lag (default)")
    view.add_argument("--members", action="store_true", help="for --describe: the members")
    view.add_argument(
        "--state",
        nargs="?",
        const="",
        default=None,
        metavar="STATE",
        help="for --describe: the group's state; for --list: only groups in STATE",
    )
    parser.add_argument("--verbose", action="store_true", help="for --describe --members: each member's partitions")
    parser.add_argument(
        "--topic",
        action="append",
        default=[],
        type=_topic_spec,
        metavar="TOPIC[:P1,P2]",
        help="for --reset-offsets: a topic, or some of its partitions (repeatable)",
    )
    parser.add_argument(
        "--all-topics", action="store_true", help="for --reset-offsets: every topic the group has offsets for"
    )
    target = parser.add_mutually_exclusive_group()
    target.add_argument("--to-earliest", action="store_true", help="reset to the log start offset")
    target.add_argument("--to-latest", action="store_true", help="reset to the log end offset")
    target.add_argument("--to-current", action="store_true", help="reset to the committed offset (no change)")
    target.add_argument("--to-offset", type=int, metavar="N", help="reset to offset N")
    target.add_argument("--shift-by", type=int, metavar="N", help="move the committed offset by N (may be negative)")
    target.add_argument(
        "--to-datetime",
        type=_datetime_ms,
        metavar="YYYY-MM-DDTHH:mm:SS.sss",
        help="reset to the first offset with a timestamp at or after this time",
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="for --reset-offsets: show the new offsets (default)")
    mode.add_argument("--execute", action="store_true", help="for --reset-offsets: commit the new offsets")
    add_output(parser, "--list: an array of groups; --describe: an array of groups with partitions and members")


def _dash(value) -> str:
    return "-" if value is None else str(value)


@reports_errors
def run(args: argparse.Namespace) -> int:
    from triolog.client.admin import AdminClient

    if (args.describe and not (args.group or args.all_groups)) or (
        (args.reset_offsets or args.delete) and not args.group
    ):
        error("--group is required (or --all-groups with --describe)")
        return EXIT_USAGE
    with AdminClient(args.bootstrap_server, **client_security(args)) as admin:
        if args.list:
            return _list(admin, args)
        if args.describe:
            return _describe(admin, args)
        if args.delete:
            return _delete(admin, args)
        return _reset(admin, args)


def _list(admin, args) -> int:
    groups = admin.list_consumer_groups((args.state,) if args.state else ())
    if args.output == "json":
        print_json([{"group": g.group_id, "protocol_type": g.protocol_type, "state": g.state} for g in groups])
    else:
        for group in groups:
            print(group.group_id)
    return EXIT_OK


def _group_rows(admin, description) -> list[dict]:
    """One row per partition with a member or a committed offset, Kafka's describe order."""
    from triolog.client.types import TopicPartition

    committed = admin.list_consumer_group_offsets(description.group_id)
    owner = {tp: member for member in description.members for tp in member.assignment}
    partitions = sorted(set(committed) | set(owner))
    ends = {}
    if partitions:
        known = set(admin.list_topics())
        query = {tp: -1 for tp in partitions if tp.topic in known}
        ends = {tp: answer.offset for tp, answer in admin.list_offsets(query).items()} if query else {}
    rows = []
    for tp in partitions:
        current, end, member = committed.get(tp), ends.get(TopicPartition(*tp)), owner.get(tp)
        rows.append(
            {
                "topic": tp.topic,
                "partition": tp.partition,
                "current_offset": current,
                "log_end_offset": end,
                "lag": None if current is None or end is None else max(0, end - current),
                "consumer_id": member.member_id if member else None,
                "host": member.host if member else None,
                "client_id": member.client_id if member else None,
            }
        )
    return rows


def _describe(admin, args) -> int:
    ids = args.group
    if args.all_groups:
        ids = [g.group_id for g in admin.list_consumer_groups()]
    descriptions = admin.describe_consumer_groups(ids) if ids else {}
    documents, missing = [], []
    for group_id in ids:
        description = descriptions[group_id]
        if description.state == "Dead":
            missing.append(group_id)
        document = {
            "group": group_id,
            "state": description.state,
            "protocol_type": description.protocol_type,
            "assignment_strategy": description.partition_assignor,
            "members": [
                {
                    "consumer_id": m.member_id,
                    "group_instance_id": m.group_instance_id,
                    "host": m.host,
                    "client_id": m.client_id,
                    "assignment": [{"topic": t, "partition": p} for t, p in sorted(m.assignment)],
                }
                for m in description.members
            ],
        }
        if args.state is None and not args.members:
            document["partitions"] = _group_rows(admin, description)
        documents.append(document)
    if args.output == "json":
        print_json(documents)
        return EXIT_ERROR if missing else EXIT_OK
    for document in documents:
        group_id = document["group"]
        if group_id in missing:
            error(f"Consumer group '{group_id}' does not exist.")
            continue
        print()
        if args.state is not None:
            print_table(
                [
                    [
                        group_id,
                        f"{args.bootstrap_server} (0)",
                        document["assignment_strategy"] or "-",
                        document["state"],
                        len(document["members"]),
                    ]
                ],
                ["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"],
            )
            continue
        if not document["members"]:
            print(f"Consumer group '{group_id}' has no active members.")
            print()
        if args.members:
            header = ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"] + (
                ["ASSIGNMENT"] if args.verbose else []
            )
            rows = []
            for member in document["members"]:
                row = [group_id, member["consumer_id"], member["host"], member["client_id"], len(member["assignment"])]
                if args.verbose:
                    by_topic: dict[str, list[int]] = {}
                    for item in member["assignment"]:
                        by_topic.setdefault(item["topic"], []).append(item["partition"])
                    row.append(",".join(f"{t}({','.join(map(str, ps))})" for t, ps in by_topic.items()) or "-")
                rows.append(row)
            print_table(rows, header)
            continue
        print_table(
            [
                [
                    group_id,
                    r["topic"],
                    r["partition"],
                    _dash(r["current_offset"]),
                    _dash(r["log_end_offset"]),
                    _dash(r["lag"]),
                    _dash(r["consumer_id"]),
                    _dash(r["host"]),
                    _dash(r["client_id"]),
                ]
                for r in document["partitions"]
            ],
            [
                "GROUP",
                "TOPIC",
                "PARTITION",
                "CURRENT-OFFSET",
                "LOG-END-OFFSET",
                "LAG",
                "CONSUMER-ID",
                "HOST",
                "CLIENT-ID",
            ],
        )
    return EXIT_ERROR if missing else EXIT_OK


def _delete(admin, args) -> int:
    results = admin.delete_consumer_groups(args.group, raise_errors=False)
    failed = {group: exc for group, exc in results.items() if exc is not None}
    if args.output == "json":
        print_json(
            [
                {
                    "group": group,
                    "result": "deleted" if exc is None else "error",
                    **({"error": str(exc)} if exc is not None else {}),
                }
                for group, exc in results.items()
            ]
        )
        return EXIT_ERROR if failed else EXIT_OK
    deleted = [group for group, exc in results.items() if exc is None]
    if deleted:
        print(f"Deletion of requested consumer groups ({', '.join(repr(g) for g in deleted)}) was successful.")
    if failed:
        print("Error: Deletion of some consumer groups failed:", file=sys.stderr)
        for group, exc in failed.items():
            print(f"* Group '{group}' could not be deleted due to: {exc}", file=sys.stderr)
        return EXIT_ERROR
    return EXIT_OK


def _reset(admin, args) -> int:
    from triolog.client.types import TopicPartition

    chosen = [name for name in _RESETS if getattr(args, name) not in (None, False)]
    if len(chosen) != 1:
        error(
            "--reset-offsets needs one of --to-earliest, --to-latest, --to-current, --to-offset, --shift-by, "
            "--to-datetime"
        )
        return EXIT_USAGE
    if bool(args.topic) == bool(args.all_topics):
        error("--reset-offsets needs --topic (repeatable) or --all-topics")
        return EXIT_USAGE
    if len(args.group) != 1:
        error("--reset-offsets takes one --group")
        return EXIT_USAGE
    group_id = args.group[0]
    description = admin.describe_consumer_groups([group_id])[group_id]
    if description.state not in ("Empty", "Dead"):
        error(
            f"Assignments can only be reset if the group '{group_id}' is inactive, but the current state is "
            f"{description.state}."
        )
        return EXIT_ERROR
    committed = admin.list_consumer_group_offsets(group_id)
    if args.all_topics:
        partitions = sorted(committed)
    else:
        partitions = []
        topics = admin.describe_topics(sorted({name for name, _ in args.topic}))
        for name, parts in args.topic:
            available = [p.partition for p in topics[name].partitions]
            for part in available if parts is None else parts:
                if part not in available:
                    error(f"topic {name!r} has no partition {part}")
                    return EXIT_USAGE
                partitions.append(TopicPartition(name, part))
        partitions = sorted(set(partitions))
    earliest = (
        {tp: a.offset for tp, a in admin.list_offsets({tp: -2 for tp in partitions}).items()} if partitions else {}
    )
    latest = {tp: a.offset for tp, a in admin.list_offsets({tp: -1 for tp in partitions}).items()} if partitions else {}
    if args.to_datetime is not None and partitions:
        found = admin.list_offsets({tp: args.to_datetime for tp in partitions})
        wanted = {tp: (a.offset if a.offset >= 0 else latest[tp]) for tp, a in found.items()}
    else:
        wanted = {}
        for tp in partitions:
            current = committed.get(tp)
            if args.to_earliest:
                wanted[tp] = earliest[tp]
            elif args.to_latest:
                wanted[tp] = latest[tp]
            elif args.to_offset is not None:
                wanted[tp] = args.to_offset
            elif args.to_current:
                wanted[tp] = current if current is not None else latest[tp]
            else:  # --shift-by: from the committed offset (none: the log end, Kafka's reset default)
                wanted[tp] = (current if current is not None else latest[tp]) + args.shift_by
    new = {tp: min(max(offset, earliest[tp]), latest[tp]) for tp, offset in wanted.items()}
    if args.execute and new:
        admin.alter_consumer_group_offsets(group_id, new)
    elif not args.dry_run and not args.execute:
        print(
            "WARN: No action will be performed as the --execute option is missing. In a future major release, the "
            "default behavior of this command will be to prompt the user before executing the reset rather than "
            "doing a dry run. You should add the --dry-run option explicitly if you are scripting this command "
            "and want to keep the current default behavior without prompting.",
            file=sys.stderr,
        )
    if args.output == "json":
        print_json(
            [
                {"group": group_id, "topic": tp.topic, "partition": tp.partition, "new_offset": offset}
                for tp, offset in sorted(new.items())
            ]
        )
        return EXIT_OK
    print()
    print_table(
        [[group_id, tp.topic, tp.partition, offset] for tp, offset in sorted(new.items())],
        ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"],
    )
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    """``python -m triolog.client.cli.groups ...``: the same command outside ``triolog``."""
    parser = argparse.ArgumentParser(prog="triolog groups", description=DESCRIPTION)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
