"""What the cluster tests share: waiting for a condition, and a set of brokers in one cluster."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from contextlib import contextmanager


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


@contextmanager
def broker_processes(directory, zk_connect: str, session_ms: int, ids: Iterable[int] = (1, 2, 3),
                     overrides: Iterable[str] = ()):
    """Broker subprocesses of one cluster (Kafka listeners, followers fetching every 50 ms, and
    ``overrides``), by id, yielded once every one is in Metadata; all killed at the end."""
    from confluent_kafka.admin import AdminClient

    from tests.e2e.broker_process import BrokerProcess

    started: dict = {}
    try:
        for broker_id in ids:
            started[broker_id] = BrokerProcess(
                directory / f"broker-{broker_id}",
                (
                    f"broker.id={broker_id}",
                    f"zookeeper.connect={zk_connect}",
                    f"zookeeper.session.timeout.ms={session_ms}",
                    "replica.fetch.wait.max.ms=50",
                    *overrides,
                ),
                kafka=True,
            ).start()
        bootstrap = kafka_bootstrap(started)
        assert wait_until(
            lambda: len(AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=5).brokers) == len(started),
            30,
        ), "the brokers never all appeared in Metadata"
        yield started
    finally:
        for broker in started.values():
            broker.kill()


def read_committed(bootstrap, topic: str, partitions: int, expected: int, timeout: float = 60) -> list[bytes]:
    """What a read_committed consumer reads of ``topic`` from the start: until ``expected``
    values came (or ``timeout``), then one more poll for any past them."""
    from triolog.client import Consumer

    with Consumer(bootstrap, auto_offset_reset="earliest", isolation_level="read_committed",
                  fetch_max_wait_ms=50) as consumer:
        consumer.assign([(topic, p) for p in range(partitions)])
        values: list[bytes] = []
        deadline = time.monotonic() + timeout
        while len(values) < expected and time.monotonic() < deadline:
            values += [r.value for records in consumer.poll(200).values() for r in records]
        values += [r.value for records in consumer.poll(1000).values() for r in records]
        return values


async def call(broker, request_of):
    """One msgpack request to an in-process ``broker`` (``request_of(client)`` builds it)."""
    from tests.server.inprocess import Client

    client = await Client.connect(int(broker.bootstrap.rsplit(":", 1)[1]))
    try:
        return await client.call(request_of(client))
    finally:
        await client.aclose()
