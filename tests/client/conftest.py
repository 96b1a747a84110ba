"""Fixtures: the real broker in this process (tests/e2e/broker_process.py InProcessBroker), shared per session.

Every test gets its own topic names, so one broker serves them all; tests that need a broker
configured differently start their own.
"""

from __future__ import annotations

import itertools
import re
import socket

import pytest

from triolog.protocol import messages as m
from triolog.protocol.records import iter_batches
from tests.e2e.broker_process import KEEP_OLD_RECORDS, BrokerProcess, InProcessBroker

_names = itertools.count()


@pytest.fixture(scope="session")
def broker(tmp_path_factory) -> InProcessBroker:
    broker = InProcessBroker(tmp_path_factory.mktemp("client-broker") / "data", KEEP_OLD_RECORDS).start()
    yield broker
    broker.stop()


@pytest.fixture(scope="session")
def no_autocreate_broker(tmp_path_factory) -> InProcessBroker:
    """A broker that refuses to auto-create topics (as production Kafka clusters often do)."""
    broker = InProcessBroker(tmp_path_factory.mktemp("strict-broker") / "data",
                             ("auto.create.topics.enable=false",)).start()
    yield broker
    broker.stop()


@pytest.fixture(scope="session")
def unverified_broker(tmp_path_factory) -> InProcessBroker:
    """A broker that does not verify transactional batches with the coordinator (Kafka before
    3.6, or transaction.partition.verification.enable=false): where hanging transactions come
    from, for the tests of the tools that end them."""
    broker = InProcessBroker(tmp_path_factory.mktemp("unverified-broker") / "data",
                             ("transaction.partition.verification.enable=false",)).start()
    yield broker
    broker.stop()


@pytest.fixture
def broker_factory_port(tmp_path):
    """(start, port): a free port now, and ``start(process=False)`` that starts a broker on it later."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    started = []

    def start(process: bool = False) -> InProcessBroker | BrokerProcess:
        """In this process, or as a subprocess (``process=True``) for a test that kills it -9."""
        kind = BrokerProcess if process else InProcessBroker
        started.append(kind(tmp_path / "late-data", port=port).start())
        return started[-1]

    yield start, port
    for broker in started:
        broker.kill() if isinstance(broker, BrokerProcess) else broker.stop()


@pytest.fixture
def bootstrap(broker) -> str:
    return f"127.0.0.1:{broker.port}"


@pytest.fixture
def topic(request) -> str:
    """A topic name unique to this test (not created: tests create it as they need it)."""
    base = re.sub(r"[^a-zA-Z0-9._-]", "_", request.node.name)[:180]
    return f"{base}-{next(_names)}"


@pytest.fixture
def admin(bootstrap):
    from triolog.client import AdminClient

    with AdminClient(bootstrap) as client:
        yield client


@pytest.fixture
def raw_batches(broker):
    """``raw_batches(topic, partition)``: the partition's batches exactly as stored, fetched over
    the wire without our client, so tests can see batch boundaries and codecs."""
    wire = broker.client()

    def fetch(topic: str, partition: int = 0) -> list:
        batches, offset = [], 0
        while True:
            response = wire.call(m.FetchRequest(
                id=wire.next_id(), max_wait_ms=0, min_bytes=1, max_bytes=1 << 24,
                topics=(m.FetchTopic(name=topic, partitions=(
                    m.FetchPartition(partition=partition, fetch_offset=offset, partition_max_bytes=1 << 24),)),)))
            result = response["topics"][0]["partitions"][0]
            assert result["error_code"] == 0, result
            new = [b for b in iter_batches(result["records"]) if b.base_offset >= offset]
            if not new:
                return batches
            batches.extend(new)
            offset = new[-1].next_offset

    yield fetch
    wire.close()
