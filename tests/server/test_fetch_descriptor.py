"""A fetch plans its read under the log's lock and takes the segment's descriptor just after; if
retention removes that segment's files in between (possible with file.delete.delay.ms=0), the
fetch plans again instead of failing with a server error. A response takes its descriptors a few
at a time as it is sent, within a per-response cap and a broker-wide budget."""

from __future__ import annotations

import os

import pytest

from triolog.broker.server.fetch_descriptors import DESCRIPTORS_PER_RESPONSE, DescriptorBudget, FetchRegion, FetchResult
from triolog.broker.server.handlers import _read_with_descriptor
from triolog.broker.storage.errors import OffsetOutOfRangeError

from ..storage.helpers import open_log, producer_batch


class _RetentionRacesTheFirstRead:
    """The real log, with retention (and the file removal) run right after the first plan."""

    def __init__(self, log):
        self.log = log
        self.reads = 0

    def read(self, *args, **kwargs):
        self.reads += 1
        info = self.log.read(*args, **kwargs)
        if self.reads == 1:
            assert self.log.delete_old_segments() > 0
            assert self.log.segment_deleter.run_due() > 0
        return info


def _log(tmp_path, clock):
    log = open_log(tmp_path, clock, **{"retention.ms": "1000", "file.delete.delay.ms": "0"})
    for _ in range(2):
        log.append_as_leader(producer_batch(3, timestamp=clock.milliseconds()))
        log.roll()
    clock.advance(1001)
    log.append_as_leader(producer_batch(3, timestamp=clock.milliseconds()))  # offsets 6..8 stay
    return log


def test_fetch_replans_when_retention_removed_its_segment_and_reports_out_of_range(tmp_path, clock):
    racing = _RetentionRacesTheFirstRead(_log(tmp_path, clock))
    with pytest.raises(OffsetOutOfRangeError):
        _read_with_descriptor(racing, 0, 1 << 20)
    assert racing.reads == 2
    assert racing.log.log_start_offset == 6


def test_fetch_at_the_new_start_gets_the_remaining_segment_after_the_replan(tmp_path, clock):
    log = _log(tmp_path, clock)
    expected = log.read(6, 1 << 20).region.read_bytes()
    info, fd = _read_with_descriptor(log, 6, 1 << 20)
    try:
        assert os.pread(fd, info.region.length, info.region.position) == expected
    finally:
        os.close(fd)


# -- descriptors a response holds: a few at a time, within a broker-wide budget ------------------


def _regions(log, clock, count: int) -> list[FetchRegion]:
    for _ in range(count):
        log.append_as_leader(producer_batch(1, timestamp=clock.milliseconds()))
        log.roll()
    regions = []
    for offset in range(count):
        region = log.read(offset, 1 << 20).region
        regions.append(FetchRegion(region.records, region.position, region.length))
    return regions


def _open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_a_response_holds_at_most_a_few_descriptors_and_sends_every_region(tmp_path, clock):
    log = open_log(tmp_path, clock)
    regions = _regions(log, clock, 3 * DESCRIPTORS_PER_RESPONSE)
    expected = [r.records.read(r.position, r.length) for r in regions]
    budget = DescriptorBudget(1000)
    result = FetchResult([], regions, budget)
    before = _open_descriptors()
    sent, peak = [], 0
    for region in regions:  # as the connection sends: open when missing, close once sent
        if region.fd is None:
            result.open_descriptors()
        peak = max(peak, _open_descriptors() - before)
        sent.append(os.pread(region.fd, region.length, region.position))
        result.close_region(region)
    assert sent == expected
    assert peak == DESCRIPTORS_PER_RESPONSE
    assert _open_descriptors() == before and budget.held == 0


def test_responses_beyond_their_first_descriptor_share_a_broker_wide_budget(tmp_path, clock):
    log = open_log(tmp_path, clock)
    regions = _regions(log, clock, 20)
    budget = DescriptorBudget(3)
    first = FetchResult([], regions[:10], budget)
    second = FetchResult([], regions[10:], budget)
    first.open_descriptors()
    second.open_descriptors()
    held = lambda result: sum(r.fd is not None for r in result.regions)  # noqa: E731
    assert (held(first), held(second), budget.held) == (4, 1, 3)  # the second still progresses
    first.close_region(first.regions[0])
    assert budget.held == 2
    second.close_region(second.regions[0])
    second.open_descriptors()  # the unit given back lets it take two: its next plus one ahead
    assert held(second) == 2 and budget.held == 3
    first.close()
    second.close()
    assert budget.held == 0


def test_a_region_whose_segment_retention_removed_cannot_be_opened(tmp_path, clock):
    log = _log(tmp_path, clock)
    planned = log.read(0, 1 << 20).region
    assert log.delete_old_segments() > 0 and log.segment_deleter.run_due() > 0  # delay 0: files gone
    budget = DescriptorBudget(10)
    result = FetchResult([], [FetchRegion(planned.records, planned.position, planned.length)], budget)
    with pytest.raises(FileNotFoundError):
        result.open_descriptors()  # the connection closes it, as for a short read
    result.close()
    assert budget.held == 0
