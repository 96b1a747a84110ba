"""A real broker (in this process) with its Kafka listener on, shared by a module's tests (each test uses
its own topics), and what talking to it takes."""

from __future__ import annotations

import pytest

from tests.e2e.broker_process import KEEP_OLD_RECORDS, InProcessBroker


@pytest.fixture(scope="module")
def kafka_broker(tmp_path_factory) -> InProcessBroker:
    broker = InProcessBroker(tmp_path_factory.mktemp("kafka") / "data", KEEP_OLD_RECORDS, kafka=True)
    broker.start()
    yield broker
    broker.stop()


@pytest.fixture
def bootstrap(kafka_broker) -> str:
    """The Kafka listener's address."""
    return f"127.0.0.1:{kafka_broker.kafka_port}"


@pytest.fixture
def msgpack_bootstrap(kafka_broker) -> str:
    """The same broker's msgpack listener."""
    return f"127.0.0.1:{kafka_broker.port}"


@pytest.fixture
def topic(request) -> str:
    return request.node.name.replace("[", "-").replace("]", "").replace("/", "-")[:200]
