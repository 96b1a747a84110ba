"""Storage-layer exceptions. Those a client can cause carry a wire code via protocol.errors."""

from __future__ import annotations

from triolog.protocol.errors import (  # noqa: F401  (re-exported: storage callers import from here)
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
    StorageError,
    TriologError,
    UnsupportedForMessageFormatError,
)


class CorruptIndexError(Exception):
    """An index file fails Kafka's sanity checks; indexes are derived data, so it gets rebuilt."""


class InvalidOffsetError(Exception):
    """An index append that would break the strictly-increasing order of entries."""


class IndexFullError(Exception):
    """An append to an index that has no free slot left; the segment should have rolled."""


class LogSegmentOffsetOverflowError(Exception):
    """A batch whose offsets do not fit the segment's 32-bit relative offsets."""


class CorruptCheckpointError(Exception):
    """A checkpoint file that does not parse; callers decide whether to start empty or fail."""


class UnexpectedAppendOffsetError(InvalidRecordError):
    """A follower append whose first offset lies below the log end offset (Kafka's
    UnexpectedAppendOffsetException): the follower's fetch position and its log disagree."""

    def __init__(self, message: str, first_offset: int, last_offset: int) -> None:
        super().__init__(message)
        self.first_offset = first_offset
        self.last_offset = last_offset


class OffsetsOutOfOrderError(InvalidRecordError):
    """Batches of a follower append whose offsets do not increase (Kafka's OffsetsOutOfOrderException)."""
