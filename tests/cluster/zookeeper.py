"""The cluster tests' ZooKeeper ensemble: the checkout's own runner (:mod:`triolog.devcluster.zookeeper`,
which `make cluster` uses too), under the names the tests import."""

from triolog.devcluster.zookeeper import (
    CLASSPATH_JARS,
    JVM_FLAGS,
    ZOOKEEPER_JARS,
    ZOOKEEPER_TICK_MS,
    ZooKeeperEnsemble,
    ZooKeeperNode,
    four_letter_word,
    zookeeper_classpath,
)

__all__ = [
    "CLASSPATH_JARS",
    "JVM_FLAGS",
    "ZOOKEEPER_JARS",
    "ZOOKEEPER_TICK_MS",
    "ZooKeeperEnsemble",
    "ZooKeeperNode",
    "four_letter_word",
    "zookeeper_classpath",
]
