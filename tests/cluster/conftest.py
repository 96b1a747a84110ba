import itertools
import os

import pytest

from triolog.testing import InProcessBroker

from .helpers import all_registered
from .zookeeper import ZooKeeperEnsemble

_chroots = itertools.count()


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory):
    """A three-node ZooKeeper ensemble shared by the session's cluster tests (each in its own
    chroot); tests that kill or pause ZooKeeper nodes start an ensemble of their own."""
    ensemble = ZooKeeperEnsemble(tmp_path_factory.mktemp("zookeeper"), size=3).start()
    yield ensemble
    ensemble.stop()


@pytest.fixture
def zk_connect(zookeeper, request):
    """``zookeeper.connect`` for this test: every node, and a chroot no other test uses."""
    return zookeeper.connect(f"/test-{os.getpid()}-{next(_chroots)}")


@pytest.fixture
def own_zookeeper(tmp_path):
    """A three-node ensemble for this test alone (its faults reach no other test)."""
    ensemble = ZooKeeperEnsemble(tmp_path / "zookeeper", size=3).start()
    yield ensemble
    ensemble.stop()


@pytest.fixture
def start_brokers(tmp_path, zk_connect):
    """``start_brokers(ids, *overrides, per_broker=...)``: in-process brokers of one cluster (this
    test's chroot; 4 s sessions; followers fetching every 50 ms), returned once every one sees every
    other; all stopped at the end (a test may stop some itself)."""
    started = []

    def start(ids, *overrides, per_broker=lambda broker_id: ()):
        brokers = {}
        for broker_id in ids:
            brokers[broker_id] = InProcessBroker(
                tmp_path / f"broker-{broker_id}",
                [
                    f"broker.id={broker_id}",
                    f"zookeeper.connect={zk_connect}",
                    "zookeeper.session.timeout.ms=4000",
                    "replica.fetch.wait.max.ms=50",
                    *overrides,
                    *per_broker(broker_id),
                ],
            ).start()
            started.append(brokers[broker_id])
        all_registered(brokers)
        return brokers

    yield start
    for broker in started:
        broker.stop()
