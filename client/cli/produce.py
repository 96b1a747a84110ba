"""``triolog produce``: Kafka's ``kafka-console-producer.sh``, one record per line of stdin (or ``--file``).

Lines are bytes (no decoding); the line ending (``\\n`` or ``\\r\\n``) is dropped. A line is, in
this order, each part present only when its option is given::

    [TIMESTAMP<TAB>][HEADERS<TAB>][KEY<SEP>]VALUE

* ``--parse-timestamp``: the record's timestamp in epoch ms, then ``--timestamp-separator`` (tab).
* ``--parse-headers`` (Kafka's ``parse.headers=true``): ``k1:v1,k2:v2`` (``--headers-separator``
  between headers, ``--headers-key-separator`` inside one), then ``--headers-delimiter`` (tab);
  an empty list is no headers. Header keys are UTF-8 text; values are bytes.
* ``--key-separator S`` (Kafka's ``parse.key=true``): the key, then ``S``.

A line without a separator it needs is an error (as Kafka's). ``--header K=V`` adds a header
to every record and ``--timestamp MS`` sets every record's timestamp (a per-line timestamp wins).
Records already sent are kept; the exit code is 1 if any record failed or a line was refused.
On a terminal, a long input shows its progress (records, records/s) on stderr, refreshed each
second; piped or redirected stderr gets nothing but errors.
"""

from __future__ import annotations

import argparse
import sys
import time

from .common import EXIT_ERROR, EXIT_OK, add_bootstrap, client_security, error, non_negative, reports_errors

DESCRIPTION = (
    "Read lines from stdin (or --file) and produce one record per line, like Kafka's "
    "kafka-console-producer.sh. Line format: [TIMESTAMP<TAB>][HEADERS<TAB>][KEY<SEP>]VALUE, "
    "each part only with --parse-timestamp, --parse-headers, --key-separator."
)

#: Progress appears once producing has lasted this long, and is refreshed this often.
PROGRESS_AFTER_S = 1.0


def _compression(text: str):
    from triolog.client.producer_core import parse_compression

    try:
        return parse_compression(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _header(text: str) -> tuple[str, bytes]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value.encode()


def _separator(text: str) -> str:
    if not text:
        raise argparse.ArgumentTypeError("a separator cannot be empty")
    return text


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_bootstrap(parser)
    parser.add_argument("--topic", required=True, metavar="NAME", help="the topic to produce to")
    parser.add_argument("--file", metavar="PATH", help="read the records from PATH instead of stdin")
    parser.add_argument(
        "--key-separator",
        metavar="S",
        type=_separator,
        help="split each line at the first S into key and value (default: no key)",
    )
    parser.add_argument(
        "--header",
        type=_header,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a header for every record (repeatable)",
    )
    parser.add_argument(
        "--parse-headers",
        action="store_true",
        help="each line starts with headers k1:v1,k2:v2 then --headers-delimiter",
    )
    parser.add_argument(
        "--headers-delimiter",
        default="\t",
        type=_separator,
        metavar="S",
        help="ends the headers of a line (default tab)",
    )
    parser.add_argument(
        "--headers-separator", default=",", type=_separator, metavar="S", help="between two headers (default ,)"
    )
    parser.add_argument(
        "--headers-key-separator",
        default=":",
        type=_separator,
        metavar="S",
        help="between a header's key and value (default :)",
    )
    parser.add_argument(
        "--timestamp", type=non_negative, metavar="MS", help="every record's timestamp, epoch ms (default: now)"
    )
    parser.add_argument(
        "--parse-timestamp",
        action="store_true",
        help="each line starts with its timestamp in epoch ms then --timestamp-separator",
    )
    parser.add_argument(
        "--timestamp-separator",
        default="\t",
        type=_separator,
        metavar="S",
        help="ends the timestamp of a line (default tab)",
    )
    parser.add_argument(
        "--compression",
        type=_compression,
        default="none",
        metavar="none|gzip|snappy|lz4|zstd",
        help="batch compression (default none)",
    )
    parser.add_argument("--partition", type=int, metavar="N", help="produce to this partition only")
    parser.add_argument(
        "--acks",
        choices=["0", "1", "-1", "all"],
        default="-1",
        help="acknowledgements to wait for (default -1 = all: fsynced)",
    )
    parser.add_argument("--linger-ms", type=float, default=5, metavar="MS", help="batching delay (default 5)")
    parser.add_argument("--batch-size", type=int, default=16384, metavar="BYTES", help="batch size (default 16384)")
    parser.add_argument(
        "--max-block-ms",
        type=non_negative,
        default=60_000,
        metavar="MS",
        help="how long a send may wait for metadata or buffer space before it fails (default 60000)",
    )


class _BadLine(ValueError):
    pass


class _LineParser:
    """One line of input as (timestamp, headers, key, value), per the options; _BadLine if malformed."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.common_headers = tuple(args.header)

    def __call__(self, line: bytes) -> tuple[int | None, tuple, bytes | None, bytes]:
        args = self.args
        timestamp = args.timestamp
        if args.parse_timestamp:
            text, sep, line = line.partition(args.timestamp_separator.encode())
            if not sep:
                raise _BadLine(f"no timestamp separator {args.timestamp_separator!r}")
            try:
                timestamp = int(text)
            except ValueError:
                raise _BadLine(f"timestamp {text.decode(errors='replace')!r} is not an integer (epoch ms)") from None
            if timestamp < 0:
                raise _BadLine(f"timestamp {timestamp} is negative")
        headers = self.common_headers
        if args.parse_headers:
            text, sep, line = line.partition(args.headers_delimiter.encode())
            if not sep:
                raise _BadLine(f"no headers delimiter {args.headers_delimiter!r}")
            headers = headers + self._headers(text)
        key = None
        if args.key_separator is not None:
            key, sep, line = line.partition(args.key_separator.encode())
            if not sep:
                raise _BadLine(f"no key separator {args.key_separator!r}")
        return timestamp, headers, key, line

    def _headers(self, text: bytes) -> tuple[tuple[str, bytes], ...]:
        out = []
        for item in text.split(self.args.headers_separator.encode()) if text else ():
            name, sep, value = item.partition(self.args.headers_key_separator.encode())
            if not sep or not name:
                raise _BadLine(
                    f"header {item.decode(errors='replace')!r} is not KEY{self.args.headers_key_separator}VALUE"
                )
            try:
                out.append((name.decode("utf-8"), value))
            except UnicodeDecodeError:
                raise _BadLine("a header key is not UTF-8") from None
        return tuple(out)


class _Progress:
    """``N records, R records/s`` on a terminal's stderr, from the first second on, once a second."""

    def __init__(self, stream) -> None:
        self.stream = stream
        self.enabled = stream.isatty()
        self.start = self.last = time.monotonic()
        self.shown = False

    def update(self, count: int, force: bool = False) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self.start < PROGRESS_AFTER_S or (now - self.last < PROGRESS_AFTER_S and not force):
            return
        self.last = now
        self.shown = True
        rate = count / (now - self.start)
        self.stream.write(f"\r{count} records, {rate:,.0f} records/s ")
        self.stream.flush()

    def finish(self, count: int) -> None:
        if self.shown:
            self.update(count, force=True)
            self.stream.write("\n")
            self.stream.flush()


def _line_chunks(source, size: int = 1 << 16):
    """Lists of lines (ending dropped), as many as are available now: never waits for more input
    than one line (a terminal or a slow pipe gets each line sent at once), yet reads a file or a
    fast pipe in large chunks."""
    tail = b""
    while True:
        data = source.read1(size)
        if not data:
            if tail:
                yield [tail[:-1] if tail.endswith(b"\r") else tail]
            return
        lines = (tail + data).split(b"\n")
        tail = lines.pop()
        yield [line[:-1] if line.endswith(b"\r") else line for line in lines]


@reports_errors
def run(args: argparse.Namespace) -> int:
    from triolog.client.producer import Producer

    try:
        source = open(args.file, "rb") if args.file is not None else sys.stdin.buffer  # noqa: SIM115 (the `with` below)
    except OSError as exc:
        error(f"cannot read {args.file}: {exc.strerror}")
        return EXIT_ERROR
    parse = _LineParser(args)
    failures: list[BaseException] = []
    status = EXIT_OK
    progress = _Progress(sys.stderr)
    count = 0
    number = 0
    try:
        with (
            source,
            Producer(
                args.bootstrap_server,
                acks=args.acks,
                compression=args.compression,
                linger_ms=args.linger_ms,
                batch_size=args.batch_size,
                max_block_ms=args.max_block_ms,
                **client_security(args),
            ) as producer,
        ):
            for lines in _line_chunks(source):
                values, keys, headers, timestamps = [], [], [], []
                for line in lines:
                    number += 1
                    try:
                        timestamp, line_headers, key, value = parse(line)
                    except _BadLine as exc:
                        error(f"line {number}: {exc}")
                        status = EXIT_ERROR
                        break
                    values.append(value)
                    keys.append(key)
                    headers.append(line_headers)
                    timestamps.append(timestamp)
                    count += 1
                    progress.update(count)
                if values:
                    # Only the failures are kept (a callback per call), not the calls' futures:
                    # those hold their records until dropped, and the input may be unbounded.
                    producer.send_many(
                        args.topic, values, keys=keys, headers=headers, partition=args.partition, timestamps=timestamps
                    ).add_done_callback(lambda futures: failures.extend(failure for _, failure in futures.errors()))
                if status != EXIT_OK:
                    break
    finally:
        progress.finish(count)
    for failure in failures[:10]:
        error(str(failure))
    if len(failures) > 10:
        error(f"... and {len(failures) - 10} more records failed")
    return EXIT_ERROR if failures else status
