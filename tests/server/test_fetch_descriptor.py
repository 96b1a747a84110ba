"""A fetch plans its read under the log's lock and takes the segment's descriptor just after; if
retention removes that segment's files in between (possible with file.delete.delay.ms=0), the
fetch plans again instead of failing with a server error."""

from __future__ import annotations

import os

import pytest

from broker.server.handlers import _read_with_descriptor
from broker.storage.errors import OffsetOutOfRangeError

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
