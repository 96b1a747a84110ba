"""``triolog transactions``: Kafka's ``kafka-transactions.sh``.

- ``--list``: the transactional ids the broker coordinates, Kafka's columns ``TransactionalId
  ProducerId TransactionState`` (``--state S`` and ``--producer-id N`` filter, ``--min-duration-ms``
  keeps transactions open longer than that).
- ``--describe --transactional-id X``: ``ProducerId ProducerEpoch TransactionState
  TransactionTimeoutMs CurrentTransactionStartTimeMs TransactionDurationMs TopicPartitions``.
- ``--describe-producers --topic T --partition P``: the producers the partition's leader knows,
  ``ProducerId ProducerEpoch LatestCoordinatorEpoch LastSequence LastTimestamp
  CurrentTransactionStartOffset`` (``-`` without an open transaction).
- ``--abort --topic T --partition P`` with ``--start-offset O`` (the open transaction starting
  there, found with describe-producers) or ``--producer-id N --producer-epoch E
  --coordinator-epoch C``: writes an ABORT marker for a hanging transaction (one whose
  coordinator does not know the partition), as Kafka's ``abort`` command.

``--output json`` (``-J``) prints one JSON document instead.
"""

from __future__ import annotations

import argparse
import time

from .common import (
    EXIT_ERROR,
    EXIT_OK,
    EXIT_USAGE,
    add_bootstrap,
    add_output,
    client_security,
    error,
    non_negative,
    print_json,
    print_table,
    reports_errors,
)

DESCRIPTION = (
    "List and describe transactions and producers, or abort a hanging transaction, like Kafka's "
    "kafka-transactions.sh. Exactly one of --list, --describe, --describe-producers, --abort."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_bootstrap(parser)
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--list", action="store_true", help="list the transactional ids")
    action.add_argument("--describe", action="store_true", help="describe --transactional-id")
    action.add_argument(
        "--describe-producers", action="store_true", help="the producers of --topic --partition and their transactions"
    )
    action.add_argument("--abort", action="store_true", help="abort a hanging transaction on --topic --partition")
    parser.add_argument("--transactional-id", metavar="ID", help="for --describe")
    parser.add_argument("--state", action="append", default=[], metavar="STATE", help="for --list (repeatable)")
    parser.add_argument(
        "--producer-id", type=int, action="append", default=[], metavar="N", help="for --list (repeatable) and --abort"
    )
    parser.add_argument("--min-duration-ms", type=non_negative, metavar="MS", help="for --list: open longer than MS")
    parser.add_argument("--topic", metavar="NAME", help="for --describe-producers and --abort")
    parser.add_argument("--partition", type=non_negative, metavar="P", help="for --describe-producers and --abort")
    parser.add_argument(
        "--start-offset", type=non_negative, metavar="O", help="for --abort: the transaction's first offset"
    )
    parser.add_argument("--producer-epoch", type=int, metavar="E", help="for --abort without --start-offset")
    parser.add_argument("--coordinator-epoch", type=int, metavar="C", help="for --abort without --start-offset")
    add_output(parser)


@reports_errors
def run(args: argparse.Namespace) -> int:
    from triolog.client.admin import AdminClient

    if args.describe and not args.transactional_id:
        error("--describe needs --transactional-id")
        return EXIT_USAGE
    if (args.describe_producers or args.abort) and (args.topic is None or args.partition is None):
        error("--topic and --partition are required")
        return EXIT_USAGE
    if (
        args.abort
        and args.start_offset is None
        and (len(args.producer_id) != 1 or args.producer_epoch is None or args.coordinator_epoch is None)
    ):
        error("--abort needs --start-offset, or --producer-id, --producer-epoch and --coordinator-epoch")
        return EXIT_USAGE
    with AdminClient(args.bootstrap_server, **client_security(args)) as admin:
        if args.list:
            return _list(admin, args)
        if args.describe:
            return _describe(admin, args)
        if args.describe_producers:
            return _producers(admin, args)
        return _abort(admin, args)


def _list(admin, args) -> int:
    rows = admin.list_transactions(
        args.state, args.producer_id, -1 if args.min_duration_ms is None else args.min_duration_ms
    )
    if args.output == "json":
        print_json(
            [{"transactional_id": r.transactional_id, "producer_id": r.producer_id, "state": r.state} for r in rows]
        )
    else:
        print_table(
            [[r.transactional_id, r.producer_id, r.state] for r in rows],
            ["TransactionalId", "ProducerId", "TransactionState"],
        )
    return EXIT_OK


def _describe(admin, args) -> int:
    d = admin.describe_transactions([args.transactional_id])[args.transactional_id]
    started = d.transaction_start_time_ms
    duration = None if started < 0 else max(0, int(time.time() * 1000) - started)
    partitions = sorted(d.partitions)
    if args.output == "json":
        print_json(
            {
                "transactional_id": d.transactional_id,
                "producer_id": d.producer_id,
                "producer_epoch": d.producer_epoch,
                "state": d.state,
                "transaction_timeout_ms": d.transaction_timeout_ms,
                "transaction_start_time_ms": None if started < 0 else started,
                "transaction_duration_ms": duration,
                "partitions": [{"topic": tp.topic, "partition": tp.partition} for tp in partitions],
            }
        )
    else:
        print_table(
            [
                [
                    d.transactional_id,
                    d.producer_id,
                    d.producer_epoch,
                    d.state,
                    d.transaction_timeout_ms,
                    "None" if started < 0 else started,
                    "None" if duration is None else duration,
                    ",".join(f"{tp.topic}-{tp.partition}" for tp in partitions),
                ]
            ],
            [
                "TransactionalId",
                "ProducerId",
                "ProducerEpoch",
                "TransactionState",
                "TransactionTimeoutMs",
                "CurrentTransactionStartTimeMs",
                "TransactionDurationMs",
                "TopicPartitions",
            ],
        )
    return EXIT_OK


def _producers(admin, args) -> int:
    states = admin.describe_producers([(args.topic, args.partition)])
    (producers,) = states.values()
    if args.output == "json":
        print_json([p._asdict() for p in producers])
    else:
        print_table(
            [
                [
                    p.producer_id,
                    p.producer_epoch,
                    p.coordinator_epoch,
                    p.last_sequence,
                    p.last_timestamp,
                    "None" if p.current_transaction_start_offset < 0 else p.current_transaction_start_offset,
                ]
                for p in producers
            ],
            [
                "ProducerId",
                "ProducerEpoch",
                "LatestCoordinatorEpoch",
                "LastSequence",
                "LastTimestamp",
                "CurrentTransactionStartOffset",
            ],
        )
    return EXIT_OK


def _abort(admin, args) -> int:
    if args.start_offset is not None:
        (producers,) = admin.describe_producers([(args.topic, args.partition)]).values()
        found = [p for p in producers if p.current_transaction_start_offset == args.start_offset]
        if not found:
            error(f"no open transaction starts at offset {args.start_offset} of {args.topic}-{args.partition}")
            return EXIT_ERROR
        producer_id, epoch, coordinator_epoch = (
            found[0].producer_id,
            found[0].producer_epoch,
            found[0].coordinator_epoch,
        )
    else:
        producer_id, epoch, coordinator_epoch = args.producer_id[0], args.producer_epoch, args.coordinator_epoch
    admin.abort_transaction(args.topic, args.partition, producer_id, epoch, max(coordinator_epoch, 0))
    if args.output == "json":
        print_json({"topic": args.topic, "partition": args.partition, "producer_id": producer_id, "aborted": True})
    else:
        print(f"Aborted the transaction of producer {producer_id} on {args.topic}-{args.partition}")
    return EXIT_OK
