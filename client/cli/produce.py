"""``triolog produce``: Kafka's ``kafka-console-producer.sh``, one record per line of stdin.

Lines are bytes (no decoding); the line ending (``\\n`` or ``\\r\\n``) is dropped. With
``--key-separator S`` each line is split at the first ``S`` into key and value, and a line
without ``S`` is an error (as Kafka's ``parse.key=true``). Records already sent are kept; the
exit code is 1 if any record failed or a line was refused.
"""

from __future__ import annotations

import argparse
import sys

from .common import EXIT_ERROR, EXIT_OK, add_bootstrap, error, reports_errors

DESCRIPTION = "Read lines from stdin and produce one record per line, like Kafka's kafka-console-producer.sh."


def _compression(text: str):
    from triolog.client.producer_core import parse_compression

    try:
        return parse_compression(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_bootstrap(parser)
    parser.add_argument("--topic", required=True, metavar="NAME", help="the topic to produce to")
    parser.add_argument("--key-separator", metavar="S",
                        help="split each line at the first S into key and value (default: no key)")
    parser.add_argument("--compression", type=_compression, default="none",
                        metavar="none|gzip|snappy|lz4|zstd", help="batch compression (default none)")
    parser.add_argument("--partition", type=int, metavar="N", help="produce to this partition only")
    parser.add_argument("--acks", choices=["0", "1", "-1", "all"], default="-1",
                        help="acknowledgements to wait for (default -1 = all: fsynced)")
    parser.add_argument("--linger-ms", type=float, default=5, metavar="MS", help="batching delay (default 5)")
    parser.add_argument("--batch-size", type=int, default=16384, metavar="BYTES", help="batch size (default 16384)")


@reports_errors
def run(args: argparse.Namespace) -> int:
    from triolog.client.producer import Producer

    separator = args.key_separator.encode() if args.key_separator else None
    failures: list[BaseException] = []
    status = EXIT_OK
    with Producer(args.bootstrap_server, acks=args.acks, compression=args.compression,
                  linger_ms=args.linger_ms, batch_size=args.batch_size) as producer:
        for number, line in enumerate(sys.stdin.buffer, start=1):
            line = line[:-1] if line.endswith(b"\n") else line
            line = line[:-1] if line.endswith(b"\r") else line
            key = None
            if separator is not None:
                key, sep, value = line.partition(separator)
                if not sep:
                    error(f"no key separator {args.key_separator!r} found on line {number}")
                    status = EXIT_ERROR
                    break
            else:
                value = line
            future = producer.send(args.topic, value, key=key, partition=args.partition)
            future.add_done_callback(lambda f: f.exception() is not None and failures.append(f.exception()))
    for failure in failures[:10]:
        error(str(failure))
    if len(failures) > 10:
        error(f"... and {len(failures) - 10} more records failed")
    return EXIT_ERROR if failures else status
