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


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """``--dist loadfile`` as tests/scheduling.py refines it; other modes as xdist has them."""
    if config.getoption("dist") != "loadfile":
        return None
    from tests.scheduling import LongestFirstFileScheduling

    return LongestFirstFileScheduling(config, log)
