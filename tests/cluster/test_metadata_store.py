"""The metadata store on a real ZooKeeper ensemble: what the controller and the brokers rely on.
Conditional multi-writes are all or nothing, ephemerals go with their owner's session (at once on
a clean close, after the session timeout on a kill -9), watches fire once per change, a lost
ZooKeeper node costs a session nothing, and an ensemble that is not there fails start() in time."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import pytest
import trio

from triolog.broker.cluster.metadata_store import (
    BadVersionError,
    Check,
    Create,
    Delete,
    NodeExistsError,
    NoNodeError,
    SessionState,
    SetData,
    StoreUnavailableError,
    TransactionFailedError,
)
from triolog.broker.cluster.zookeeper_store import ZooKeeperStore

from .zookeeper import ZooKeeperEnsemble, four_letter_word


async def _store(connect: str, session_timeout_ms: int = 4000) -> ZooKeeperStore:
    store = ZooKeeperStore(connect, session_timeout_ms=session_timeout_ms, connection_timeout_ms=10000)
    await store.start()
    return store


async def test_the_chroot_is_made_and_holds_every_path(zookeeper, zk_connect):
    store = await _store(zk_connect)
    try:
        await store.ensure_path("/brokers/ids")
        await store.create("/brokers/ids/1", b"one")
        assert (await store.get("/brokers/ids/1")).data == b"one"
    finally:
        await store.close()
    # Seen from the ensemble's root, everything is under the chroot.
    chroot = zk_connect[zk_connect.index("/") :]
    root = await _store(zookeeper.connect())
    try:
        assert (await root.get(f"{chroot}/brokers/ids/1")).data == b"one"
        assert await root.get("/brokers/ids/1") is None
    finally:
        await root.close()


async def test_a_conditional_multi_write_is_all_or_nothing(zk_connect):
    store = await _store(zk_connect)
    try:
        await store.commit([Create("/controller_epoch", b"1"), Create("/state", b"a")])
        epoch = await store.get("/controller_epoch")
        # The fence is stale (version 7): neither write happens, and the error names the check.
        with pytest.raises(TransactionFailedError) as failed:
            await store.commit([Check("/controller_epoch", 7), SetData("/state", b"b"), Create("/other")])
        assert failed.value.index == 0 and isinstance(failed.value.cause, BadVersionError)
        assert (await store.get("/state")).data == b"a" and await store.get("/other") is None
        # A later op failing undoes the earlier ones too.
        with pytest.raises(TransactionFailedError) as failed:
            await store.commit([SetData("/state", b"c"), Create("/controller_epoch")])
        assert failed.value.index == 1 and isinstance(failed.value.cause, NodeExistsError)
        assert (await store.get("/state")).data == b"a"
        # With the right versions everything is written, and the new versions come back.
        state = await store.get("/state")
        versions = await store.commit(
            [Check("/controller_epoch", epoch.version), SetData("/state", b"d", state.version), Create("/other")]
        )
        assert versions == [None, state.version + 1, None]
        assert (await store.get("/state")).data == b"d" and await store.get("/other") is not None
        await store.commit([Delete("/other")])
        assert await store.get("/other") is None
    finally:
        await store.close()


async def test_single_writes_check_versions_and_parents(zk_connect):
    store = await _store(zk_connect)
    try:
        with pytest.raises(NoNodeError):
            await store.create("/a/b", b"x")
        await store.create("/a/b", b"x", makepath=True)
        with pytest.raises(NodeExistsError):
            await store.create("/a/b", b"y")
        with pytest.raises(BadVersionError):
            await store.set("/a/b", b"y", version=3)
        assert await store.set("/a/b", b"y", version=0) == 1
        assert await store.children("/a") == ["b"]
        assert await store.children("/missing") is None
        await store.delete("/a", recursive=True)
        assert await store.get("/a") is None
    finally:
        await store.close()


async def test_watches_fire_once_at_the_next_change(zk_connect):
    store = await _store(zk_connect)
    other = await _store(zk_connect)
    try:
        node, created = await store.watch("/controller")
        assert node is None and not created.is_set()
        await other.create("/controller", b"1", ephemeral=True)
        with trio.fail_after(5):
            await created.wait()
        node, changed = await store.watch("/controller")
        assert node.data == b"1" and node.ephemeral_owner == other.session_id
        await other.set("/controller", b"2")
        with trio.fail_after(5):
            await changed.wait()
        node, deleted = await store.watch("/controller")
        assert node.data == b"2"
        await other.close()  # the ephemeral goes with its session, at once on a clean close
        with trio.fail_after(5):
            await deleted.wait()
        assert await store.get("/controller") is None

        await store.ensure_path("/brokers/ids")
        children, joined = await store.watch_children("/brokers/ids")
        assert children == []
        third = await _store(zk_connect)
        await third.create("/brokers/ids/3", b"", ephemeral=True)
        with trio.fail_after(5):
            await joined.wait()
        assert await store.children("/brokers/ids") == ["3"]
        await third.close()
        # A watch on children of a missing node fires when the node appears.
        children, appears = await store.watch_children("/brokers/topics")
        assert children is None
        await store.create("/brokers/topics", b"")
        with trio.fail_after(5):
            await appears.wait()
    finally:
        await store.close()


_HOLDER = textwrap.dedent(
    """
    import sys, trio
    from triolog.broker.cluster.zookeeper_store import ZooKeeperStore

    async def main():
        store = ZooKeeperStore(sys.argv[1], session_timeout_ms=int(sys.argv[2]))
        await store.start()
        await store.create("/brokers/ids/7", b"holder", ephemeral=True, makepath=True)
        print("registered", flush=True)
        await trio.sleep_forever()

    trio.run(main)
    """
)


async def test_an_ephemeral_outlives_a_killed_owner_by_its_session_timeout_only(zk_connect):
    timeout_ms = 2000
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, zk_connect, str(timeout_ms)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert "registered" in (line.strip() for line in holder.stdout)  # after its log lines
        store = await _store(zk_connect)
        try:
            holder.kill()
            holder.wait()
            killed = time.monotonic()
            # Until the session expires, the dead broker still looks registered (as in Kafka).
            node, gone = await store.watch("/brokers/ids/7")
            assert node is not None and node.data == b"holder"
            with trio.fail_after(timeout_ms / 1000 + 5):
                await gone.wait()
            waited = time.monotonic() - killed
            assert await store.get("/brokers/ids/7") is None
            assert waited >= timeout_ms / 1000 * 0.6, waited  # not before the session could expire
        finally:
            await store.close()
    finally:
        holder.kill()
        holder.wait()


async def test_a_session_survives_the_loss_of_any_one_zookeeper_node(tmp_path):
    """Each node in turn is killed and restarted: one of them is the node the session is connected
    to, and the session moves to another without losing its ephemeral node."""
    # A longer tick than the suite's (sessions up to 20 ticks: 10 s), and an 8 s session: on two
    # busy cores, moving to another node once took longer than the suite's 4 s sessions allow.
    own_zookeeper = ZooKeeperEnsemble(tmp_path / "zookeeper", size=3, tick_ms=500).start()
    try:
        await _session_survives_each_node_loss(own_zookeeper)
    finally:
        own_zookeeper.stop()


async def _session_survives_each_node_loss(own_zookeeper):
    store = await _store(own_zookeeper.connect("/triolog"), session_timeout_ms=8000)
    states = []

    async def record_states():
        state = store.state
        while True:
            state = await store.wait_state_change(state)
            states.append(state)

    try:
        await store.create("/brokers/ids/1", b"me", ephemeral=True, makepath=True)
        session = store.session_id
        async with trio.open_nursery() as nursery:
            nursery.start_soon(record_states)
            for node in own_zookeeper.nodes:
                own_zookeeper.kill(node)
                with trio.fail_after(20):
                    while True:
                        try:
                            if (await store.get("/brokers/ids/1")) is not None:
                                break
                        except StoreUnavailableError:
                            pass
                        await trio.sleep(0.1)
                own_zookeeper.start_node(node)
                await trio.to_thread.run_sync(own_zookeeper.wait_serving, 60.0, [node])
            nursery.cancel_scope.cancel()
        assert store.session_id == session and store.state is SessionState.CONNECTED
        assert (await store.get("/brokers/ids/1")).ephemeral_owner == session
        assert SessionState.SUSPENDED in states and SessionState.LOST not in states, states
    finally:
        await store.close()


async def test_start_fails_in_time_when_no_zookeeper_answers(tmp_path):
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    assert four_letter_word(port) == ""
    store = ZooKeeperStore(f"127.0.0.1:{port}/triolog", session_timeout_ms=2000, connection_timeout_ms=1000)
    started = time.monotonic()
    with pytest.raises(StoreUnavailableError, match="zookeeper.connection.timeout.ms=1000"):
        await store.start()
    assert time.monotonic() - started < 5
