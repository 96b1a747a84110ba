"""Brokers with zookeeper.connect join a cluster as Kafka's did: registered in ZooKeeper with both
listeners, one of them controller, the cluster id shared with every log dir; a stopped broker's
registration goes at once and another broker takes over as controller. What must not join is
refused at startup with one line: a broker.id a live broker holds, a log dir of another cluster,
a ZooKeeper that does not answer."""

from __future__ import annotations

import time

import pytest
import trio

from triolog.broker.cluster.zk_client import KafkaZkClient
from triolog.broker.cluster.zookeeper_store import ZooKeeperStore
from triolog.broker.storage.checkpoints import MetaProperties
from triolog.testing import InProcessBroker


def zk_call(connect: str, fn):
    """``await fn(KafkaZkClient)`` on a session of the test's own, in a trio loop of its own."""

    async def main():
        store = ZooKeeperStore(connect, session_timeout_ms=4000, connection_timeout_ms=10000)
        await store.start()
        try:
            return await fn(KafkaZkClient(store))
        finally:
            await store.close()

    return trio.run(main)


def eventually(check, timeout=20.0):
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result or time.monotonic() > deadline:
            return result
        time.sleep(0.1)


def member(tmp_path, zk_connect, broker_id, *extra, name=None, **options) -> InProcessBroker:
    return InProcessBroker(
        tmp_path / (name or f"broker-{broker_id}"),
        [f"broker.id={broker_id}", f"zookeeper.connect={zk_connect}", "zookeeper.session.timeout.ms=4000", *extra],
        **options,
    )


def test_three_brokers_register_both_listeners_and_elect_one_controller(tmp_path, zk_connect):
    brokers = {i: member(tmp_path, zk_connect, i).start() for i in (1, 2, 3)}
    try:
        live = zk_call(zk_connect, lambda zk: zk.live_brokers())
        assert sorted(live) == [1, 2, 3]
        for broker_id, broker in brokers.items():
            endpoints = {e.listener: e for e in live[broker_id].endpoints}
            assert (endpoints["PLAINTEXT"].host, endpoints["PLAINTEXT"].port) == ("127.0.0.1", broker.kafka_port)
            assert (endpoints["TRIOLOG"].host, endpoints["TRIOLOG"].port) == ("127.0.0.1", broker.port)
            assert endpoints["TRIOLOG"].security_protocol == "PLAINTEXT"
        controller = eventually(lambda: zk_call(zk_connect, lambda zk: zk.controller_id()))
        assert controller in brokers
        assert sum(b.server.membership.controller.active for b in brokers.values()) == 1
        # One cluster id: in ZooKeeper and in every broker's meta.properties.
        cluster_id = zk_call(zk_connect, lambda zk: zk.get_or_create_cluster_id("unused"))
        for broker_id, broker in brokers.items():
            meta = MetaProperties.read(broker.data_dir)
            assert (meta.cluster_id, meta.node_id) == (cluster_id, broker_id)
        epoch = zk_call(zk_connect, lambda zk: zk.controller_epoch())[0]

        # The controller stops: its registration goes at once, another broker is elected.
        assert brokers.pop(controller).stop() == 0
        assert sorted(zk_call(zk_connect, lambda zk: zk.live_brokers())) == sorted(brokers)
        successor = eventually(
            lambda: [b for b in brokers.values() if b.server.membership.controller.active], timeout=20
        )
        assert len(successor) == 1
        assert zk_call(zk_connect, lambda zk: zk.controller_epoch())[0] == epoch + 1
    finally:
        for broker in brokers.values():
            broker.stop()


def test_a_broker_id_held_by_a_live_broker_is_refused_in_one_line(tmp_path, zk_connect):
    with member(tmp_path, zk_connect, 7).start() as first:
        second = member(tmp_path, zk_connect, 7, name="impostor")
        with pytest.raises(RuntimeError) as refused:
            second.start()
        line = str(refused.value).splitlines()[0]
        assert line == (
            f"broker did not start: broker.id 7 is already registered in ZooKeeper by a live broker at "
            f"PLAINTEXT://127.0.0.1:{first.kafka_port}, TRIOLOG://127.0.0.1:{first.port}: give this broker "
            f"another broker.id, or stop the other one"
        )
        # The first broker is untouched: still registered, still serving.
        assert 7 in zk_call(zk_connect, lambda zk: zk.live_brokers())
        assert first.running


def test_a_log_dir_of_another_cluster_is_refused(tmp_path, zookeeper, zk_connect):
    with member(tmp_path, zk_connect, 1).start():
        pass
    other_cluster = zookeeper.connect(zk_connect[zk_connect.index("/") :] + "-other")
    moved = member(tmp_path, other_cluster, 1)
    with pytest.raises(RuntimeError) as refused:
        moved.start()
    assert "belongs to cluster" in str(refused.value) and "joining the wrong cluster" in str(refused.value)


def test_no_zookeeper_fails_startup_within_the_connection_timeout(tmp_path):
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    broker = member(tmp_path, f"127.0.0.1:{port}/triolog", 1, "zookeeper.connection.timeout.ms=1000")
    started = time.monotonic()
    with pytest.raises(RuntimeError) as refused:
        broker.start()
    assert time.monotonic() - started < 10
    assert str(refused.value).splitlines()[0] == (
        f"broker did not start: cannot join the cluster at zookeeper.connect=127.0.0.1:{port}/triolog: "
        f"cannot connect to ZooKeeper at 127.0.0.1:{port}/triolog within zookeeper.connection.timeout.ms=1000"
    )


# -- the process itself: kill -9 and a pause past the session ---------------------------------


def _process(tmp_path, zk_connect, broker_id, timeout_ms):
    from tests.e2e.broker_process import BrokerProcess

    return BrokerProcess(
        tmp_path / f"broker-{broker_id}",
        (f"broker.id={broker_id}", f"zookeeper.connect={zk_connect}", f"zookeeper.session.timeout.ms={timeout_ms}"),
        kafka=True,
    )


def _owner(zk_connect, broker_id):
    found = zk_call(zk_connect, lambda zk: zk.broker(broker_id))
    return None if found is None else found[1]


def test_a_broker_restarted_after_kill_9_waits_out_its_stale_registration(tmp_path, zk_connect):
    timeout_ms = 3000
    broker = _process(tmp_path, zk_connect, 4, timeout_ms).start()
    try:
        first_session = _owner(zk_connect, 4)
        assert first_session
        broker.kill()
        # Same ports (its clients' bootstrap): the old registration is its own, so it waits.
        started = time.monotonic()
        broker.start(timeout_s=timeout_ms / 1000 + 20)
        assert any(e.get("event") == "waiting_for_stale_registration" for e in broker.events())
        assert time.monotonic() - started < timeout_ms / 1000 + 10
        second_session = _owner(zk_connect, 4)
        assert second_session and second_session != first_session
    finally:
        broker.stop()


def test_a_broker_paused_past_its_session_registers_again(tmp_path, zk_connect):
    import os
    import signal

    timeout_ms = 2000
    broker = _process(tmp_path, zk_connect, 5, timeout_ms).start()
    try:
        first_session = _owner(zk_connect, 5)
        os.kill(broker.process.pid, signal.SIGSTOP)
        try:
            # Paused (a long GC, a stalled VM): its session expires and the cluster drops it.
            assert eventually(lambda: _owner(zk_connect, 5) is None, timeout=timeout_ms / 1000 + 10)
        finally:
            os.kill(broker.process.pid, signal.SIGCONT)
        # Awake, it finds its session expired, gets a new one, and registers again by itself.
        assert eventually(lambda: _owner(zk_connect, 5) not in (None, first_session), timeout=30)
        assert any(e.get("event") == "broker_registered_again" for e in broker.events())
        assert broker.process.poll() is None
    finally:
        broker.stop()
