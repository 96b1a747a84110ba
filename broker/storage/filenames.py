"""Every file name the log layer uses: suffixes, builders and parsers (Kafka's LogFileUtils).

Segment files are named by their base offset as 20 zero-padded decimal digits; transient
states (.deleted, .cleaned, .swap) are appended to the full name, so the base offset of any
file is the integer before the first dot.
"""

from __future__ import annotations

import re
from pathlib import Path

from triolog.protocol.errors import InvalidTopicError

LOG_FILE_SUFFIX = ".log"
INDEX_FILE_SUFFIX = ".index"
TIME_INDEX_FILE_SUFFIX = ".timeindex"
TXN_INDEX_FILE_SUFFIX = ".txnindex"
PRODUCER_SNAPSHOT_FILE_SUFFIX = ".snapshot"
DELETED_FILE_SUFFIX = ".deleted"
CLEANED_FILE_SUFFIX = ".cleaned"
SWAP_FILE_SUFFIX = ".swap"
#: Empty files a Log makes ahead of its next roll (renamed to the new segment's names then);
#: leftovers are deleted when the log is loaded.
SPARE_FILE_SUFFIX = ".spare"
#: Kafka's partition directory suffix for a partition queued for asynchronous deletion.
DELETE_DIR_SUFFIX = "-delete"

MAX_TOPIC_NAME_LENGTH = 249
_LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]+")


def filename_prefix_from_offset(offset: int) -> str:
    return f"{offset:020d}"


def log_file(directory: Path, offset: int, suffix: str = "") -> Path:
    return directory / (filename_prefix_from_offset(offset) + LOG_FILE_SUFFIX + suffix)


def offset_index_file(directory: Path, offset: int, suffix: str = "") -> Path:
    return directory / (filename_prefix_from_offset(offset) + INDEX_FILE_SUFFIX + suffix)


def time_index_file(directory: Path, offset: int, suffix: str = "") -> Path:
    return directory / (filename_prefix_from_offset(offset) + TIME_INDEX_FILE_SUFFIX + suffix)


def producer_snapshot_file(directory: Path, offset: int, suffix: str = "") -> Path:
    """Kafka's producer state snapshot, named by the offset its state covers up to (exclusive)."""
    return directory / (filename_prefix_from_offset(offset) + PRODUCER_SNAPSHOT_FILE_SUFFIX + suffix)


def spare_files(directory: Path) -> tuple[Path, Path, Path]:
    """The spare .log, .index and .timeindex of a partition directory."""
    log, index, time_index = (
        directory / ("next" + suffix + SPARE_FILE_SUFFIX)
        for suffix in (LOG_FILE_SUFFIX, INDEX_FILE_SUFFIX, TIME_INDEX_FILE_SUFFIX)
    )
    return log, index, time_index


def txn_index_file(directory: Path, offset: int, suffix: str = "") -> Path:
    return directory / (filename_prefix_from_offset(offset) + TXN_INDEX_FILE_SUFFIX + suffix)


def offset_from_file_name(name: str) -> int:
    """Base offset encoded in a segment file name ("00000000000000000042.log.swap" -> 42)."""
    prefix = name.split(".", 1)[0]
    if len(prefix) != 20 or not prefix.isdigit():
        raise ValueError(f"{name!r} is not named after a 20-digit base offset")
    return int(prefix)


def validate_topic_name(topic: str) -> None:
    """Kafka's Topic.validate: 1-249 chars of [a-zA-Z0-9._-], not '.' or '..'.

    This is what keeps a client-supplied name from ever naming a path outside log.dirs.
    """
    if not isinstance(topic, str) or not topic:
        raise InvalidTopicError("topic name is empty")
    if topic in (".", ".."):
        raise InvalidTopicError(f"topic name cannot be {topic!r}")
    if len(topic) > MAX_TOPIC_NAME_LENGTH:
        raise InvalidTopicError(f"topic name is {len(topic)} characters long, the maximum is {MAX_TOPIC_NAME_LENGTH}")
    if not _LEGAL_TOPIC.fullmatch(topic):
        raise InvalidTopicError(
            f"topic name {topic!r} contains characters other than ASCII alphanumerics, '.', '_' and '-'"
        )


def topic_partition_dir_name(topic: str, partition: int) -> str:
    validate_topic_name(topic)
    if partition < 0:
        raise ValueError(f"partition {partition} is negative")
    return f"{topic}-{partition}"


def delete_dir_name(topic: str, partition: int, unique_hex: str) -> str:
    """``<topic>-<partition>.<uuid>-delete``, the topic part cut so the name fits 255 bytes
    (Kafka's LocalLog.logDeleteDirName): a 249-character topic must still be deletable."""
    suffix = f"-{partition}.{unique_hex}{DELETE_DIR_SUFFIX}"
    return topic[: 255 - len(suffix)] + suffix


def parse_topic_partition_name(name: str) -> tuple[str, int]:
    """Split a partition directory name at its last '-' (topic names may contain '-')."""
    topic, sep, partition = name.rpartition("-")
    if not sep or not topic or not partition.isdigit():
        raise ValueError(f"found directory {name!r}, which is not in the form of topic-partition")
    validate_topic_name(topic)
    return topic, int(partition)
