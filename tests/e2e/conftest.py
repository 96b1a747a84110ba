import pytest

from .broker_process import BrokerProcess


@pytest.fixture
def broker_factory(tmp_path):
    started: list[BrokerProcess] = []

    def start(*overrides: str, data_dir=None, port: int = 0) -> BrokerProcess:
        broker = BrokerProcess(data_dir or tmp_path / "data", tuple(overrides), port=port)
        started.append(broker)
        return broker.start()

    yield start
    for broker in started:
        broker.kill()


@pytest.fixture
def broker(broker_factory) -> BrokerProcess:
    return broker_factory()
