from pathlib import Path

import pytest
from hypothesis import settings

from triolog.broker.storage.clock import ManualClock

# No per-example deadline: an example's wall time depends on the machine's load (and, with
# in-process brokers, on a broker thread of the same process), not on what the properties check;
# a test that hangs is failed by pytest-timeout (pyproject.toml).
settings.register_profile("triolog", deadline=None)
settings.load_profile("triolog")


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(1_700_000_000_000)


# -- how `make test` shares the files among its workers (pytest-xdist's --dist loadgroup) --------
#
# Each file is one unit of work, since a file's tests share its module's broker: every test gets
# its file as an xdist group. The exceptions share a unit wider than a file: every file whose tests
# use the `spark` fixture (tests/pipeline) runs on one worker, so one Spark JVM starts, not one per
# worker, and its JIT warms once. xdist hands units out in collection order, so the longest go
# first and the run does not end waiting on one of them: LONGEST_FIRST, measured with
# `--durations=0` (each over a minute of a run's time; the order among them is the longest first).
SPARK_GROUP = "spark"
LONGEST_FIRST = (
    SPARK_GROUP,
    "tests/test_install.py",
    "tests/ops/test_image.py",
    "tests/fuzz/test_fuzz.py",
    "tests/storage/test_power_loss.py",
    "tests/e2e/test_crash_loop.py",
    "tests/docs/test_readme.py",
    "tests/protocol/test_messages.py",
    "tests/e2e/test_consumer_groups.py",
)

@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not getattr(config.option, "loadgroup", False):  # (set by xdist in its workers)
        return
    unit = {}
    for item in items:
        unit.setdefault(_file_of(item), item.nodeid.split("::")[0])
        if "spark" in getattr(item, "fixturenames", ()):
            unit[_file_of(item)] = SPARK_GROUP
    rank = {name: place for place, name in enumerate(LONGEST_FIRST)}
    # a stable sort: within a unit, and among the rest, collection order stays
    items.sort(key=lambda item: rank.get(unit[_file_of(item)], len(rank)))
    for item in items:
        item.add_marker(pytest.mark.xdist_group(unit[_file_of(item)]))


def _file_of(item: pytest.Item) -> Path:
    return Path(item.path).resolve()
