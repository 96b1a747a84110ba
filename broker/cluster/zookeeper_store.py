"""The metadata store on ZooKeeper, through kazoo.

kazoo runs its connection in threads of its own (its threading handler); nothing here blocks
the trio loop. Each call starts kazoo's asynchronous form of the operation and waits on a trio
Event that kazoo's completion thread sets through the loop's TrioToken, so a hundred concurrent
reads cost no worker threads. Watches and session changes come back the same way.

The chroot of ``zookeeper.connect`` (``host:port,host:port/triolog``) is created at start if
missing, as Kafka does; kazoo then prefixes every path with it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import structlog
import trio
from kazoo import exceptions as kz
from kazoo.client import KazooClient
from kazoo.protocol.states import KazooState
from kazoo.retry import KazooRetry

from .metadata_store import (
    BadVersionError,
    Check,
    Create,
    Delete,
    MetadataStore,
    Node,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    Op,
    SessionState,
    SetData,
    StoreError,
    StoreUnavailableError,
    TransactionFailedError,
)

logger = structlog.get_logger("triolog.cluster.zookeeper")

_STATES = {
    KazooState.CONNECTED: SessionState.CONNECTED,
    KazooState.SUSPENDED: SessionState.SUSPENDED,
    KazooState.LOST: SessionState.LOST,
}


def _translate(exc: BaseException) -> BaseException:
    """kazoo's exception as this package's (others, programming errors, unchanged)."""
    if isinstance(exc, kz.NoNodeError):
        return NoNodeError(str(exc) or "no node")
    if isinstance(exc, kz.NodeExistsError):
        return NodeExistsError(str(exc) or "node exists")
    if isinstance(exc, kz.BadVersionError):
        return BadVersionError(str(exc) or "bad version")
    if isinstance(exc, kz.NotEmptyError):
        return NotEmptyError(str(exc) or "not empty")
    if isinstance(exc, (kz.ConnectionLoss, kz.SessionExpiredError, kz.ZookeeperStoppedError, kz.OperationTimeoutError)):
        return StoreUnavailableError(f"ZooKeeper unavailable: {type(exc).__name__}")
    if isinstance(exc, kz.ZookeeperError):
        return StoreError(f"ZooKeeper error: {type(exc).__name__} {exc}")
    return exc


def _node(data: bytes | None, stat: Any) -> Node:
    return Node(data or b"", stat.version, stat.ephemeralOwner, stat.czxid, stat.mzxid, stat.ctime)


class ZooKeeperStore(MetadataStore):
    def __init__(self, connect: str, *, session_timeout_ms: int = 18000, connection_timeout_ms: int | None = None):
        self.connect = connect
        self.session_timeout_ms = session_timeout_ms
        #: zookeeper.connection.timeout.ms: Kafka's default is the session timeout.
        self.connection_timeout_ms = connection_timeout_ms or session_timeout_ms
        self._client = KazooClient(
            hosts=connect,
            timeout=session_timeout_ms / 1000,
            # Reconnect forever, quickly: a broker's session is worth keeping while the ensemble
            # elects a leader or a node restarts.
            connection_retry=KazooRetry(max_tries=-1, delay=0.1, backoff=2, max_delay=1.0),
            command_retry=None,
        )
        self._token: trio.lowlevel.TrioToken | None = None
        self._state = SessionState.SUSPENDED
        self._state_changed = trio.Event()
        self._changes = 0
        self._watches: set[trio.Event] = set()
        self._closed = False

    # -- session ---------------------------------------------------------------------------------

    @property
    def session_id(self) -> int:
        session = self._client.client_id
        return session[0] if session else 0

    @property
    def state(self) -> SessionState:
        return self._state

    async def start(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        self._client.add_listener(self._on_state)
        # kazoo's start() is this plus a warning when the chroot is missing, which is made below.
        connecting = self._client.start_async()
        await trio.to_thread.run_sync(connecting.wait, self.connection_timeout_ms / 1000)
        if not self._client.connected:
            await trio.to_thread.run_sync(self._stop_client)
            raise StoreUnavailableError(
                f"cannot connect to ZooKeeper at {self.connect} within "
                f"zookeeper.connection.timeout.ms={self.connection_timeout_ms}"
            ) from None
        if self._client.chroot:
            # kazoo prefixes the chroot to every path: its own "/" is the chroot, made here once.
            await self._call(lambda: self._client.ensure_path_async("/"))
        self._set_state(SessionState.CONNECTED)
        trio.lowlevel.spawn_system_task(self._keep_connecting)

    async def _keep_connecting(self) -> None:
        """kazoo reconnects by itself, but its connection loop can give up (its retry policy ends
        with the loop, seen once under load while the ensemble had no quorum): then nothing
        would ever reconnect. A broker's session is worth trying for as long as it runs, so a
        loop that stopped is started again."""
        try:
            while not self._closed:
                await self.wait_state_change(SessionState.CONNECTED)
                with trio.move_on_after(self.session_timeout_ms / 1000):
                    while self._state is not SessionState.CONNECTED and not self._closed:
                        await self._state_changed.wait()
                connection = getattr(self._client, "_connection", None)
                stopped = getattr(connection, "connection_stopped", None)
                if self._closed or self._state is SessionState.CONNECTED or stopped is None or not stopped.is_set():
                    continue
                logger.warning("zookeeper_reconnecting", connect=self.connect)
                await trio.to_thread.run_sync(self._restart_client)
        except Exception:  # a system task must not raise: the store then only relies on kazoo
            logger.exception("zookeeper_reconnect_failed", connect=self.connect)

    def _restart_client(self) -> None:
        self._client.stop()
        if not self._closed:
            self._client.start_async()

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True

        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(self._stop_client)
        self._set_state(SessionState.LOST)

    def _stop_client(self) -> None:
        self._client.stop()
        self._client.close()

    def _on_state(self, state: str) -> None:
        """kazoo's listener, in its connection thread: hand the change to the trio loop."""
        translated = _STATES.get(state)
        token = self._token
        if translated is not None and token is not None and not self._closed:
            try:
                token.run_sync_soon(self._set_state, translated)
            except trio.RunFinishedError:
                pass

    def _set_state(self, state: SessionState) -> None:
        if state is self._state:
            return
        if state is not SessionState.CONNECTED:
            # The session may have missed changes while away: every watcher reads again.
            for event in self._watches:
                event.set()
            self._watches.clear()
        logger.info("zookeeper_session", state=state.value, connect=self.connect, session_id=hex(self.session_id))
        self._state = state
        self._changes += 1
        self._state_changed.set()
        self._state_changed = trio.Event()

    async def wait_state_change(self, seen: SessionState) -> SessionState:
        while self._state is seen:
            await self._state_changed.wait()
        return self._state

    @property
    def state_changes(self) -> int:
        return self._changes

    async def wait_state_changes(self, seen: int) -> int:
        while self._changes <= seen:
            await self._state_changed.wait()
        return self._changes

    # -- calls -----------------------------------------------------------------------------------

    async def _call(self, start: Callable[[], Any]) -> Any:
        """Run one kazoo *_async call; its result (or exception, translated) back on the loop."""
        if self._closed:
            raise StoreUnavailableError("the ZooKeeper session is closed")
        token = self._token
        assert token is not None, "start() first"
        done = trio.Event()
        outcome: list[Any] = []

        def finished(result: Any) -> None:  # kazoo's completion thread
            try:
                outcome.append((True, result.get_nowait()))
            except BaseException as exc:  # handed to the waiting task, translated
                outcome.append((False, exc))
            try:
                token.run_sync_soon(done.set)
            except trio.RunFinishedError:
                pass

        try:
            start().rawlink(finished)
        except kz.KazooException as exc:
            raise _translate(exc) from None
        await done.wait()
        ok, value = outcome[0]
        if ok:
            return value
        raise _translate(value) from None

    def _watcher(self, event: trio.Event) -> Callable[[Any], None]:
        self._watches.add(event)
        token = self._token
        assert token is not None

        def fire(watched_event: Any) -> None:  # kazoo's event thread
            def on_loop() -> None:
                self._watches.discard(event)
                event.set()

            try:
                token.run_sync_soon(on_loop)
            except trio.RunFinishedError:
                pass

        return fire

    async def get(self, path: str) -> Node | None:
        try:
            data, stat = await self._call(lambda: self._client.get_async(path))
        except NoNodeError:
            return None
        return _node(data, stat)

    async def children(self, path: str) -> list[str] | None:
        try:
            return list(await self._call(lambda: self._client.get_children_async(path)))
        except NoNodeError:
            return None

    async def watch(self, path: str) -> tuple[Node | None, trio.Event]:
        event = trio.Event()
        watcher = self._watcher(event)
        # exists() sets the watch whether or not the node is there (a get() watch would not be
        # set on a missing node); the data is then read with the same watch kept.
        stat = await self._call(lambda: self._client.exists_async(path, watch=watcher))
        if stat is None:
            return None, event
        try:
            data, stat = await self._call(lambda: self._client.get_async(path))
        except NoNodeError:  # deleted in between: the exists watch fires for it
            return None, event
        return _node(data, stat), event

    async def watch_children(self, path: str) -> tuple[list[str] | None, trio.Event]:
        event = trio.Event()
        watcher = self._watcher(event)
        try:
            names = await self._call(lambda: self._client.get_children_async(path, watch=watcher))
        except NoNodeError:
            # No child watch on a missing node: watch for its creation instead.
            stat = await self._call(lambda: self._client.exists_async(path, watch=watcher))
            if stat is not None:
                event.set()  # created meanwhile: read again
            return None, event
        return list(names), event

    async def create(
        self, path: str, data: bytes = b"", *, ephemeral: bool = False, makepath: bool = False, sequential: bool = False
    ) -> str:
        created = await self._call(
            lambda: self._client.create_async(path, data, ephemeral=ephemeral, sequence=sequential, makepath=makepath)
        )
        return str(created)

    async def ensure_path(self, path: str) -> None:
        await self._call(lambda: self._client.ensure_path_async(path))

    async def set(self, path: str, data: bytes, version: int = -1) -> int:
        stat = await self._call(lambda: self._client.set_async(path, data, version))
        return stat.version

    async def delete(self, path: str, version: int = -1, *, recursive: bool = False) -> None:
        if recursive:
            for child in await self.children(path) or []:
                await self.delete(f"{path.rstrip('/')}/{child}", recursive=True)
        await self._call(lambda: self._client.delete_async(path, version))

    async def commit(self, ops: Sequence[Op]) -> list[int | None]:
        def start() -> Any:
            transaction = self._client.transaction()
            for op in ops:
                if isinstance(op, Check):
                    transaction.check(op.path, op.version)
                elif isinstance(op, Create):
                    transaction.create(op.path, op.data, ephemeral=op.ephemeral, sequence=op.sequential)
                elif isinstance(op, SetData):
                    transaction.set_data(op.path, op.data, op.version)
                elif isinstance(op, Delete):
                    transaction.delete(op.path, op.version)
                else:  # pragma: no cover - the Op union is closed
                    raise TypeError(f"not a store operation: {op!r}")
            return transaction.commit_async()

        results = await self._call(start)
        for index, result in enumerate(results):
            if isinstance(result, kz.RolledBackError):
                continue
            if isinstance(result, BaseException):
                cause = _translate(result)
                if not isinstance(cause, StoreError):
                    raise cause
                raise TransactionFailedError(index, cause)
        return [
            getattr(result, "version", None) if isinstance(op, SetData) else None for op, result in zip(ops, results)
        ]
