import itertools
import os

import pytest

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
