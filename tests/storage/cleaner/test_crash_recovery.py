"""Crash at every step of the .cleaned -> .swap -> swap -> .deleted -> rename sequence, then
reopen with Log.open (unclean shutdown): no record lost, none duplicated, the log is either
the old or the new version of each group, and the loader leaves no transient file."""

from __future__ import annotations

import shutil

from triolog.broker.storage.clock import ManualClock
from triolog.broker.storage.log import Log
from triolog.protocol.records import Record

from .helpers import Driver, append, check_against_model, compact_config, read_all_records


def _workload(log, clock, appended, rounds, keys, start=0):
    for i in range(start, start + rounds):
        items = [(b"k%d" % ((i * 7 + j) % keys), None if (i + j) % 11 == 0 else b"v%d-%d" % (i, j)) for j in range(3)]
        for record in append(log, items, clock.milliseconds()):
            appended[record.offset] = record
        clock.advance(3)
    log.roll()


def test_crash_at_every_step_of_the_swap_recovers(tmp_path):
    clock = ManualClock()
    config = compact_config(segment_bytes=700, delete_retention_ms=1_000_000)
    log = Log.open(tmp_path / "live" / "t-0", config, clock=clock)
    driver = Driver(tmp_path / "live", {("t", 0): log}, clock)
    appended: dict[int, Record] = {}
    _workload(log, clock, appended, 60, 15)
    driver.run_once()  # round 1 shrinks the segments, so round 2 groups several of them
    _workload(log, clock, appended, 60, 15, start=60)
    before = read_all_records(log)

    snapshots = []

    def snapshot(step: str) -> None:
        target = tmp_path / "crash" / f"{len(snapshots):03d}" / "t-0"
        shutil.copytree(log.directory, target)
        snapshots.append((step, target))

    log.replace_segments_hook = snapshot
    assert driver.run_once()
    log.replace_segments_hook = None
    after = read_all_records(log)
    check_against_model(after, appended)
    steps = [step for step, _ in snapshots]
    groups = steps.count("cleaned")
    assert groups >= 2, steps  # several groups...
    assert sum(step.startswith("deleted") for step in steps) > groups  # ...of several old segments
    assert any(".swap" in step for step in steps) and any(step.endswith(".log") for step in steps)

    after_offsets = {r.offset for r in after}
    for step, directory in snapshots:
        recovered = Log.open(directory, config, clock=clock)  # no clean-shutdown marker: full recovery
        got = read_all_records(recovered)
        check_against_model(got, appended)
        offsets = {r.offset for r in got}
        assert after_offsets <= offsets, f"records lost after a crash at {step!r}"
        assert offsets <= {r.offset for r in before}, f"records came back after a crash at {step!r}"
        leftovers = [p.name for p in directory.iterdir() if p.suffix in (".cleaned", ".swap", ".deleted")]
        assert leftovers == [], f"{leftovers} left after a crash at {step!r}"
        # And the recovered log can be cleaned again to the same result.
        again = Driver(directory.parent, {("t", 0): recovered}, clock)
        again.run_until_idle()
        assert {r.offset for r in read_all_records(recovered)} == after_offsets, step
        again.close()
        recovered.close()
    driver.close()


def test_loader_drops_swaps_at_or_above_an_unfinished_cleaned_file(tmp_path):
    """KAFKA-6264: a .swap at or above the lowest .cleaned base is an unfinished operation."""
    clock = ManualClock()
    config = compact_config(segment_bytes=300)
    log = Log.open(tmp_path / "t-0", config, clock=clock)
    appended = {}
    _workload(log, clock, appended, 30, 50)
    segments = list(log.segments)
    log.close()
    directory = tmp_path / "t-0"
    second = segments[1]
    # A complete-looking .swap copy of the second segment, and a .cleaned of the first.
    shutil.copy(second.log.path, directory / (second.log.path.name + ".swap"))
    shutil.copy(segments[0].log.path, directory / (segments[0].log.path.name + ".cleaned"))
    reopened = Log.open(directory, config, clock=clock)
    assert {r.offset for r in read_all_records(reopened)} == set(appended)
    assert not [p for p in directory.iterdir() if p.suffix in (".cleaned", ".swap")]
    reopened.close()
