import pytest

from triolog.broker.storage.clock import ManualClock


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(1_700_000_000_000)
