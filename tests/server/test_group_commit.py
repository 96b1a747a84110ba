"""GroupCommitter: the fsync behind acks=all. One round fsyncs every log with waiters once and wakes
them all; a waiter that gives up (REQUEST_TIMED_OUT) leaves the committer working; a failed
flush reaches every waiter of that log and none of another's. Real logs on disk."""

from __future__ import annotations

import os

import pytest
import trio
import trio.testing

from triolog.broker.server.group_commit import GroupCommitter
from triolog.broker.storage.errors import StorageError

from ..storage.helpers import open_log, producer_batch


def _log_with(tmp_path, clock, name, batches):
    log = open_log(tmp_path, clock, name)
    ends = []
    for _ in range(batches):
        ends.append(log.append_as_leader(producer_batch(2, timestamp=clock.milliseconds())).last_offset + 1)
    assert log.recovery_point == 0  # the default flush policy never flushes by itself
    return log, ends


@pytest.fixture
def fsyncs(monkeypatch, tmp_path):
    """Counts os.fsync calls on files under tmp_path (each still fsyncs).

    By path, not by call: os.fsync is patched for the whole process, and a thread another test
    left finishing its last flush may still fsync something of its own meanwhile.
    """
    calls = []
    real = os.fsync
    ours = str(tmp_path) + os.sep

    def counting(fd):
        try:
            path = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            path = ""
        if path.startswith(ours):
            calls.append(path)
        return real(fd)

    monkeypatch.setattr(os, "fsync", counting)
    return calls


async def test_one_round_fsyncs_each_log_once_for_all_its_waiters(tmp_path, clock, fsyncs):
    # What one flush of a log costs in fsyncs, measured on twins of the logs under test.
    for name in ("twin-0", "twin-1"):
        twin, _ = _log_with(tmp_path, clock, name, 5)
        twin.flush()
    one_flush_each = len(fsyncs)
    assert one_flush_each > 0
    fsyncs.clear()

    logs = [_log_with(tmp_path, clock, f"topic-{i}", 5) for i in range(2)]
    committer = GroupCommitter()
    woken = []

    async def waiter(log, offset):
        await committer.wait_flushed(log, offset)
        assert log.recovery_point >= offset
        woken.append(offset)

    async with trio.open_nursery() as nursery:
        for log, ends in logs:
            for offset in ends * 5:  # 25 waiters per log, at every batch's end, several times
                nursery.start_soon(waiter, log, offset)
        await trio.testing.wait_all_tasks_blocked()
        assert woken == [] and all(log.recovery_point == 0 for log, _ in logs)
        await nursery.start(committer.run)
        with trio.fail_after(10):
            while len(woken) < 50:
                await trio.sleep(0.001)
        nursery.cancel_scope.cancel()
    assert committer.flushes == 1
    assert len(fsyncs) == one_flush_each
    assert [log.recovery_point for log, _ in logs] == [log.log_end_offset for log, _ in logs]


async def test_a_waiter_that_times_out_leaves_the_committer_working(tmp_path, clock, mock_clock):
    log, ends = _log_with(tmp_path, clock, "topic-0", 2)
    committer = GroupCommitter()
    outcome = []

    async def impatient():
        try:
            with trio.fail_after(0.5):  # what the produce handler turns into REQUEST_TIMED_OUT
                await committer.wait_flushed(log, ends[0])
            outcome.append("flushed")
        except trio.TooSlowError:
            outcome.append("timed out")

    async with trio.open_nursery() as nursery:
        await nursery.start(committer.run)
        async with committer.limiter:  # the flush thread cannot start: a slow disk
            nursery.start_soon(impatient)
            await trio.testing.wait_all_tasks_blocked()
            mock_clock.jump(0.5)
            await trio.testing.wait_all_tasks_blocked()
            assert outcome == ["timed out"] and log.recovery_point == 0
        # the disk is back: the next waiter is served, and the flush covers the earlier records too
        log.append_as_leader(producer_batch(1, timestamp=clock.milliseconds()))
        await committer.wait_flushed(log, log.log_end_offset)  # the mock clock stands still: no timeout
        assert log.recovery_point == log.log_end_offset
        nursery.cancel_scope.cancel()


async def test_a_failed_flush_reaches_every_waiter_of_that_log_only(tmp_path, clock):
    broken, broken_ends = _log_with(tmp_path, clock, "topic-0", 3)
    healthy, healthy_ends = _log_with(tmp_path, clock, "topic-1", 3)
    committer = GroupCommitter()
    outcomes = {}

    async def waiter(name, log, offset):
        try:
            await committer.wait_flushed(log, offset)
            outcomes[name] = "flushed"
        except StorageError as exc:
            outcomes[name] = str(exc)

    async with trio.open_nursery() as nursery:
        for i, offset in enumerate(broken_ends):
            nursery.start_soon(waiter, f"broken-{i}", broken, offset)
        for i, offset in enumerate(healthy_ends):
            nursery.start_soon(waiter, f"healthy-{i}", healthy, offset)
        await trio.testing.wait_all_tasks_blocked()
        broken.close()  # deleted under the waiting produce requests: flush() raises
        await nursery.start(committer.run)
        with trio.fail_after(10):
            while len(outcomes) < 6:
                await trio.sleep(0.001)
        nursery.cancel_scope.cancel()
    assert all(outcomes[f"healthy-{i}"] == "flushed" for i in range(3))
    assert all("closed" in outcomes[f"broken-{i}"] for i in range(3)), outcomes
    assert broken.recovery_point == 0 and healthy.recovery_point == healthy.log_end_offset
