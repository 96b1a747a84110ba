"""LogSegments: a log's segments in a sorted map keyed by base offset (Kafka's skip list).

Finding the segment for an offset is a floor lookup: O(log n) however many segments there are.
"""

from __future__ import annotations

from collections.abc import Iterator

from sortedcontainers import SortedDict

from .segment import LogSegment


class LogSegments:
    def __init__(self) -> None:
        self._segments: SortedDict[int, LogSegment] = SortedDict()

    def add(self, segment: LogSegment) -> LogSegment | None:
        """Insert or replace the segment at its base offset; returns the one replaced."""
        previous = self._segments.get(segment.base_offset)
        self._segments[segment.base_offset] = segment
        return previous

    def remove(self, base_offset: int) -> LogSegment | None:
        return self._segments.pop(base_offset, None)

    def clear(self) -> list[LogSegment]:
        removed = list(self._segments.values())
        self._segments.clear()
        return removed

    def get(self, base_offset: int) -> LogSegment | None:
        return self._segments.get(base_offset)

    def __contains__(self, base_offset: int) -> bool:
        return base_offset in self._segments

    def __len__(self) -> int:
        return len(self._segments)

    def __iter__(self) -> Iterator[LogSegment]:
        return iter(list(self._segments.values()))

    @property
    def is_empty(self) -> bool:
        return not self._segments

    def base_offsets(self) -> list[int]:
        return list(self._segments.keys())

    def first_segment(self) -> LogSegment | None:
        return self._segments.peekitem(0)[1] if self._segments else None

    def last_segment(self) -> LogSegment | None:
        return self._segments.peekitem(-1)[1] if self._segments else None

    @property
    def active_segment(self) -> LogSegment:
        return self._segments.peekitem(-1)[1]

    def floor_segment(self, offset: int) -> LogSegment | None:
        """The segment with the greatest base offset <= ``offset``."""
        index = self._segments.bisect_right(offset)
        return self._segments.peekitem(index - 1)[1] if index else None

    def higher_segment(self, offset: int) -> LogSegment | None:
        """The segment with the least base offset > ``offset``."""
        index = self._segments.bisect_right(offset)
        return self._segments.peekitem(index)[1] if index < len(self._segments) else None

    def values(self, from_offset: int, to_offset: int) -> list[LogSegment]:
        """Segments that may hold offsets in [from_offset, to_offset): the floor segment of from_offset onwards."""
        if from_offset == to_offset:
            return []
        if to_offset < from_offset:
            raise ValueError(f"invalid log segment range: from {from_offset} > to {to_offset}")
        start = self._segments.bisect_right(from_offset)
        start = max(start - 1, 0)
        end = self._segments.bisect_left(to_offset)
        return [self._segments.peekitem(i)[1] for i in range(start, end)]

    def floor_index(self, offset: int) -> int:
        """Index (by base offset) of the floor segment of ``offset``, or 0."""
        return max(self._segments.bisect_right(offset) - 1, 0)

    def from_index(self, index: int) -> Iterator[LogSegment]:
        """Segments from the ``index``-th (0-based, by base offset) on, fetched one at a time."""
        values = self._segments.values()
        for i in range(index, len(values)):
            yield values[i]

    def size_in_bytes(self) -> int:
        return sum(segment.size for segment in self._segments.values())
