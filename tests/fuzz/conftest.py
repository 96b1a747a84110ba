import pytest

from tests.e2e.broker_process import InProcessBroker


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    """One real broker per module: no auto-created topics, no cleaner (models stay exact)."""
    process = InProcessBroker(tmp_path_factory.mktemp("broker") / "data", (
        "auto.create.topics.enable=false", "log.cleaner.enable=false", "num.partitions=2"))
    process.start()
    yield process
    process.stop()
