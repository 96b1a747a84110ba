"""``triolog consume``: Kafka's ``kafka-console-consumer.sh``.

Starts at the log end by default (Kafka's ``auto.offset.reset=latest``), or at the beginning,
an offset, or the first record at/after a timestamp. Prints each record's value (raw bytes) on
its own line, preceded by the fields asked for with ``--print-*``, in Kafka's order and format
(``CreateTime:ms``, ``Partition:p``, ``Offset:o``, headers ``k:v,...``, key), separated by
``--separator`` (a tab). ``Processed a total of N messages`` goes to stderr at the end.

With ``--output json`` (``-J``) each record is one line of JSON (JSON Lines) with every field:
``{"topic", "partition", "offset", "timestamp", "timestamp_type", "key", "key_base64", "value",
"value_base64", "headers": [{"key", "value", "value_base64"}]}``. Keys and values are text when
they are valid UTF-8, else base64 with the ``*_base64`` flag set; null stays null.

``--isolation-level read_committed`` prints only the records of committed transactions (and
non-transactional ones), up to the last stable offset, as a read_committed Kafka consumer.

An ``--offset`` outside the log is an error (exit 1), not a silent reset. The topic is not
created by consuming it: an unknown topic is an error (Kafka's consumers do not auto-create).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import sys
import threading

from .common import EXIT_OK, add_bootstrap, add_output, bytes_field, client_security, non_negative, reports_errors

DESCRIPTION = "Print records of a topic to stdout, like Kafka's kafka-console-consumer.sh."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_bootstrap(parser)
    parser.add_argument("--topic", required=True, metavar="NAME", help="the topic to consume")
    parser.add_argument("--partition", type=non_negative, metavar="N", help="consume only this partition")
    start = parser.add_mutually_exclusive_group()
    start.add_argument("--from-beginning", action="store_true", help="start at the earliest offset")
    start.add_argument(
        "--offset", type=non_negative, metavar="N", help="start at offset N (of --partition, or of every partition)"
    )
    start.add_argument(
        "--timestamp",
        type=non_negative,
        metavar="MS",
        help="start at the first record with timestamp >= MS (epoch milliseconds)",
    )
    parser.add_argument("--max-messages", type=non_negative, metavar="N", help="exit after N records")
    parser.add_argument(
        "--timeout-ms",
        type=non_negative,
        metavar="MS",
        help="exit when no record arrives for MS milliseconds (default: wait forever)",
    )
    parser.add_argument(
        "--isolation-level",
        choices=("read_uncommitted", "read_committed"),
        default="read_uncommitted",
        help="read_committed: only committed transactions' records, up to the last stable offset "
        "(default read_uncommitted: everything, as Kafka's console consumer)",
    )
    parser.add_argument("--separator", default="\t", metavar="S", help="between printed fields (default tab)")
    for field in ("timestamp", "partition", "offset", "headers", "key"):
        parser.add_argument(f"--print-{field}", action="store_true", help=f"print each record's {field}")
    add_output(parser, "one object per record and line, every field: JSON Lines")


def _line(record, args) -> bytes:
    fields = []
    if args.print_timestamp:
        fields.append(f"{record.timestamp_type}:{record.timestamp}".encode())
    if args.print_partition:
        fields.append(f"Partition:{record.partition}".encode())
    if args.print_offset:
        fields.append(f"Offset:{record.offset}".encode())
    if args.print_headers:
        fields.append(
            b",".join(k.encode() + b":" + (b"null" if v is None else v) for k, v in record.headers) or b"NO_HEADERS"
        )
    if args.print_key:
        fields.append(b"null" if record.key is None else record.key)
    fields.append(b"null" if record.value is None else record.value)
    return args.separator.encode().join(fields) + b"\n"


def _json_line(record) -> bytes:
    key, key_b64 = bytes_field(record.key)
    value, value_b64 = bytes_field(record.value)
    headers = []
    for name, data in record.headers:
        text, b64 = bytes_field(data)
        headers.append({"key": name, "value": text, "value_base64": b64})
    doc = {
        "topic": record.topic,
        "partition": record.partition,
        "offset": record.offset,
        "timestamp": record.timestamp,
        "timestamp_type": record.timestamp_type,
        "key": key,
        "key_base64": key_b64,
        "value": value,
        "value_base64": value_b64,
        "headers": headers,
    }
    return json.dumps(doc, ensure_ascii=False).encode() + b"\n"


@reports_errors
def run(args: argparse.Namespace) -> int:
    from triolog.client.admin import AdminClient
    from triolog.client.consumer import Consumer
    from triolog.client.errors import UnknownTopicOrPartitionError
    from triolog.client.types import TopicPartition

    security = client_security(args)
    with AdminClient(args.bootstrap_server, **security) as admin:
        partitions = [p.partition for p in admin.describe_topics([args.topic])[args.topic].partitions]
    if args.partition is not None:
        if args.partition not in partitions:
            raise UnknownTopicOrPartitionError(
                f"topic {args.topic!r} has no partition {args.partition}", topic=args.topic, partition=args.partition
            )
        partitions = [args.partition]
    tps = [TopicPartition(args.topic, p) for p in partitions]
    reset = "none" if args.offset is not None else ("earliest" if args.from_beginning else "latest")
    out = sys.stdout.buffer
    line = _json_line if args.output == "json" else (lambda record: _line(record, args))
    count = 0
    # Ctrl-C and a closed stdout (| head) end in triolog.broker.cli.main: 130 and 0, quietly.
    try:
        with Consumer(
            args.bootstrap_server,
            auto_offset_reset=reset,
            consumer_timeout_ms=args.timeout_ms,
            isolation_level=args.isolation_level,
            **security,
        ) as consumer:
            consumer.assign(tps)
            if args.offset is not None:
                for tp in tps:
                    consumer.seek(tp, args.offset)
            elif args.timestamp is not None:
                consumer.seek_to_timestamp(args.timestamp)
            if args.max_messages != 0:
                with _CtrlCBetweenRecords.installed() as between_records:
                    for record in consumer:
                        with between_records:
                            out.write(line(record))
                            out.flush()  # a reader gone (| head) raises here: that record was not delivered
                            count += 1
                        if args.max_messages is not None and count >= args.max_messages:
                            break
    finally:
        print(f"Processed a total of {count} messages", file=sys.stderr)
    return EXIT_OK


class _CtrlCBetweenRecords:
    """Ctrl-C lands between records, never between printing one and counting it.

    Python raises KeyboardInterrupt at whatever bytecode runs when SIGINT arrives: after a
    record's flush but before ``count += 1`` the summary line would say one record fewer than
    the reader got. Inside ``with between_records:`` the interrupt is held and raised at the
    block's end; elsewhere (waiting on the broker) it is raised at once, as before.
    """

    def __init__(self) -> None:
        self._holding = False
        self._pending = False

    @classmethod
    @contextlib.contextmanager
    def installed(cls):
        """The SIGINT handler in place for the ``with`` (main thread only; else a no-op shield)."""
        shield = cls()
        if (
            threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler
        ):
            yield shield
            return
        previous = signal.signal(signal.SIGINT, shield._on_sigint)
        try:
            yield shield
        finally:
            signal.signal(signal.SIGINT, previous)

    def _on_sigint(self, signum, frame) -> None:
        if self._holding:
            self._pending = True
        else:
            raise KeyboardInterrupt

    def __enter__(self) -> None:
        self._holding = True

    def __exit__(self, exc_type, exc, tb) -> None:
        self._holding = False
        if self._pending and exc_type is None:
            self._pending = False
            raise KeyboardInterrupt
