import pytest

from .broker_process import BrokerProcess, InProcessBroker


@pytest.fixture
def broker_factory(tmp_path):
    """``start(*overrides, data_dir=None, port=0, process=False)``: a started broker, in this
    process (InProcessBroker) unless ``process=True``: a subprocess (BrokerProcess), for the
    tests of what only a process does (kill -9, signals, exit codes)."""
    started: list[BrokerProcess | InProcessBroker] = []

    def start(*overrides: str, data_dir=None, port: int = 0, process: bool = False):
        kind = BrokerProcess if process else InProcessBroker
        broker = kind(data_dir or tmp_path / "data", tuple(overrides), port=port)
        started.append(broker)
        return broker.start()

    yield start
    for broker in reversed(started):
        if isinstance(broker, BrokerProcess):
            broker.kill()
        else:
            broker.stop()


@pytest.fixture
def broker(broker_factory):
    return broker_factory()
