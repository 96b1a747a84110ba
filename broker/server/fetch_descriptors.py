"""What bounds the descriptors fetch responses hold: a response sends from its segment files by
sendfile, taking each segment's descriptor shortly before it is sent and closing it right after,
a few at a time (DESCRIPTORS_PER_RESPONSE) and, beyond its first, only what a broker-wide budget
allows (SPARE_FETCH_DESCRIPTORS), however many partitions it names: a client that does not read
pins a bounded number of descriptors until its connection is dropped.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from typing import Any

from triolog.protocol import messages as m

__all__ = ["DESCRIPTORS_PER_RESPONSE", "SPARE_FETCH_DESCRIPTORS", "DescriptorBudget", "FetchRegion", "FetchResult"]

#: Descriptors one fetch response holds at most at once: a fetch naming thousands of partitions
#: opens them a few at a time as it sends, each closed right after its sendfile.
DESCRIPTORS_PER_RESPONSE = 8
#: Descriptors all fetch responses in flight hold together beyond the one each may always hold
#: (as its connection holds its socket): clients that do not read cannot pin more than this.
SPARE_FETCH_DESCRIPTORS = 256


class DescriptorBudget:
    """A broker-wide count of descriptors taken by fetch responses; thread-safe (taken in workers)."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.held = 0
        self._lock = threading.Lock()

    def take(self) -> bool:
        with self._lock:
            if self.held >= self.capacity:
                return False
            self.held += 1
            return True

    def give(self) -> None:
        with self._lock:
            self.held -= 1


@dataclass
class FetchRegion:
    """A region of a segment file to sendfile; its descriptor is taken shortly before it is sent
    (``fd`` None until then) and closed right after."""

    records: Any  # the segment's FileRecords: reopened by the object, so a rename does not lose it
    position: int
    length: int
    fd: int | None = None


class FetchResult:
    """A fetch response whose record bytes stay in files: the connection sends it with sendfile.

    It holds at most DESCRIPTORS_PER_RESPONSE descriptors at once, and beyond its first only
    what the broker-wide budget allows, however many partitions the fetch names: a client that
    does not read pins a bounded number of descriptors until its connection is dropped."""

    def __init__(self, parts: list | None, regions: list[FetchRegion], budget: DescriptorBudget):
        self._parts = parts
        self.regions = regions
        #: The response the parts encode (its partition error codes are counted in the metrics).
        self.response: m.FetchResponse | None = None
        #: Record bytes the response holds, and whether a partition has an error (what decides
        #: whether a long poll answers now).
        self.total_bytes = 0
        self.has_errors = False
        self._budget = budget
        #: Regions before this one have had their descriptor (and may have been sent).
        self._next = 0
        self._held = 0

    @property
    def parts(self) -> list:
        """The msgpack protocol's response: its bytes, and the regions as ExternalBin parts (packed
        when first asked for: the Kafka listener encodes ``response`` its own way)."""
        if self._parts is None:
            self._parts = m.pack_parts(self.response, check_schema=False)
        return self._parts

    def _may_open(self) -> bool:
        """Whether one more descriptor may be taken now (taking a budget unit if beyond the first)."""
        if self._held == 0:
            return True
        return self._held < DESCRIPTORS_PER_RESPONSE and self._budget.take()

    def _opened(self, region: FetchRegion, fd: int) -> None:
        region.fd = fd
        self._held += 1

    def _return_unit(self) -> None:
        """Give back what _may_open took for a descriptor that was not opened after all."""
        if self._held:
            self._budget.give()

    def open_descriptors(self) -> None:
        """Take descriptors for the next regions (run in a worker thread: taking one may wait for
        the segment's lock, held during an fsync). FileNotFoundError if a segment's files were
        removed meanwhile (retention with file.delete.delay.ms=0): the response cannot be completed."""
        while self._next < len(self.regions):
            region = self.regions[self._next]
            if region.fd is None:
                if not self._may_open():
                    return
                try:
                    fd = region.records.dup_fd()
                except BaseException:
                    self._return_unit()
                    raise
                self._opened(region, fd)
            self._next += 1

    def close_region(self, region: FetchRegion) -> None:
        if region.fd is None:
            return
        fd, region.fd = region.fd, None
        self._held -= 1
        if self._held:
            self._budget.give()
        os.close(fd)

    def close(self) -> None:
        for region in self.regions:
            self.close_region(region)
        self.regions = []
