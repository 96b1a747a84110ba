"""``triolog delete-records``: Kafka's ``kafka-delete-records.sh``.

Moves each partition's log start offset up to the offset given (-1: the high watermark, i.e.
delete everything written so far), so the records below it are no longer served and retention
removes their segments. Partitions come from ``--offset-json-file`` in Kafka's format::

    {"partitions": [{"topic": "orders", "partition": 0, "offset": 42}], "version": 1}

or from ``--topic T --partition P --offset O``. Prints each partition's new low watermark as
Kafka does (``partition: T-P  low_watermark: N``, or ``partition: T-P  error: ...`` for a partition
that failed: the others are still applied; exit code 1), or one JSON document with ``-J``.
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from .common import (
    EXIT_ERROR,
    EXIT_OK,
    EXIT_USAGE,
    add_bootstrap,
    add_output,
    client_security,
    error,
    print_json,
    reports_errors,
)

DESCRIPTION = (
    "Delete the records of partitions below an offset (move their log start offset), like Kafka's "
    "kafka-delete-records.sh. Offset -1 means the high watermark: everything written so far."
)


def _offset(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an offset (an integer, or -1), got {text!r}") from None
    if value < -1:
        raise argparse.ArgumentTypeError(f"expected an offset >= 0, or -1 for the high watermark, got {value}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_bootstrap(parser)
    parser.add_argument(
        "--offset-json-file",
        metavar="FILE",
        help='partitions and offsets in Kafka\'s format: {"partitions": [{"topic": "T", '
        '"partition": 0, "offset": 42}], "version": 1}',
    )
    parser.add_argument("--topic", metavar="NAME", help="with --partition and --offset: one partition")
    parser.add_argument("--partition", type=int, metavar="N", help="the partition of --topic")
    parser.add_argument(
        "--offset",
        type=_offset,
        metavar="OFFSET",
        help="delete the records below OFFSET; -1 = the high watermark (all records)",
    )
    add_output(
        parser,
        '{"partitions": [{"topic", "partition", "low_watermark"} or {"topic", "partition", "error", "error_message"}]}',
    )


class _BadFile(ValueError):
    pass


def _read_offset_file(path: str) -> dict[tuple[str, int], int]:
    """Kafka's offset JSON file as {(topic, partition): offset}; _BadFile naming what is wrong."""
    try:
        with open(path, encoding="utf-8") as file:
            doc = json.load(file)
    except OSError as exc:
        raise _BadFile(f"cannot read {path}: {exc.strerror}") from None
    except ValueError as exc:
        raise _BadFile(f"{path} is not JSON: {exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("partitions"), list):
        raise _BadFile(
            f'{path}: expected {{"partitions": [{{"topic": ..., "partition": ..., "offset": ...}}], "version": 1}}'
        )
    if doc.get("version", 1) != 1:
        raise _BadFile(f"{path}: unsupported version {doc.get('version')!r} (expected 1)")
    offsets: dict[tuple[str, int], int] = {}
    for index, entry in enumerate(doc["partitions"]):
        where = f"{path}: partitions[{index}]"
        if not isinstance(entry, dict):
            raise _BadFile(f"{where} must be an object")
        topic, partition, offset = entry.get("topic"), entry.get("partition"), entry.get("offset")
        if not isinstance(topic, str) or not topic:
            raise _BadFile(f"{where}.topic must be a topic name")
        if not isinstance(partition, int) or isinstance(partition, bool) or partition < 0:
            raise _BadFile(f"{where}.partition must be an integer >= 0")
        if not isinstance(offset, int) or isinstance(offset, bool) or offset < -1:
            raise _BadFile(f"{where}.offset must be an integer >= 0, or -1 for the high watermark")
        if (topic, partition) in offsets:
            raise _BadFile(f"{where}: {topic}-{partition} is listed twice")  # Kafka refuses duplicates too
        offsets[(topic, partition)] = offset
    if not offsets:
        raise _BadFile(f"{path} lists no partitions")
    return offsets


@reports_errors
def run(args: argparse.Namespace) -> int:
    single = (args.topic, args.partition, args.offset)
    if args.offset_json_file is not None:
        if any(v is not None for v in single):
            error("give either --offset-json-file or --topic/--partition/--offset, not both")
            return EXIT_USAGE
        try:
            offsets = _read_offset_file(args.offset_json_file)
        except _BadFile as exc:
            error(str(exc))
            return EXIT_USAGE
    elif all(v is not None for v in single):
        offsets = {(args.topic, args.partition): args.offset}
    else:
        error("give --offset-json-file FILE, or all of --topic, --partition and --offset")
        return EXIT_USAGE

    from triolog.client.admin import AdminClient
    from triolog.client.types import TopicPartition

    with AdminClient(args.bootstrap_server, **client_security(args)) as admin:
        # The broker applies each partition on its own: report every one (its new low watermark
        # or its error), as Kafka's tool does, and exit 1 if any failed.
        results = admin.delete_records(
            {TopicPartition(*tp): offset for tp, offset in offsets.items()}, raise_errors=False
        )
    failed = {tp: result for tp, result in results.items() if isinstance(result, Exception)}
    if args.output == "json":
        print_json({"partitions": [_json_result(tp, result) for tp, result in sorted(results.items())]})
    else:
        print("Records delete operation completed:")
        for tp, result in sorted(results.items()):
            outcome = f"error: {_error_text(result)}" if tp in failed else f"low_watermark: {result}"
            print(f"partition: {tp.topic}-{tp.partition}\t{outcome}")
    for failure in failed.values():
        error(str(failure))
    return EXIT_ERROR if failed else EXIT_OK


if TYPE_CHECKING:
    from ..errors import TriologClientError


def _error_code(exc) -> str | int:
    return getattr(exc.code, "name", exc.code)


def _error_text(exc) -> str:
    return f"{_error_code(exc)}: {exc.error_message}" if exc.error_message else str(_error_code(exc))


def _json_result(tp, result: int | TriologClientError) -> dict:
    doc = {"topic": tp.topic, "partition": tp.partition}
    if isinstance(result, Exception):
        return {**doc, "error": _error_code(result), "error_message": result.error_message}
    return {**doc, "low_watermark": result}
