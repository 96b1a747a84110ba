"""What the cluster tests share: waiting for a condition, and a set of brokers in one cluster."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable


def wait_until(check: Callable, timeout: float = 20.0):
    """``check()``'s first truthy value within ``timeout`` seconds, else its last (falsy) one."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.1)


def all_registered(brokers) -> None:
    """Until every broker sees every other registered: a topic created sooner could be placed over
    fewer brokers (each follows ZooKeeper on its own)."""
    assert wait_until(
        lambda: all(sorted(b.server.cluster.cache.brokers) == sorted(brokers) for b in brokers.values())
    ), "the brokers never all saw each other"


def kafka_bootstrap(brokers: Iterable | dict) -> str:
    """The brokers' Kafka listeners, as a bootstrap.servers value."""
    values = brokers.values() if isinstance(brokers, dict) else brokers
    return ",".join(f"127.0.0.1:{b.kafka_port}" for b in values)
