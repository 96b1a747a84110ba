"""Command-line tools on the broker's files: dump-log reads segments; users, acls and configs (client
quotas) change a stopped broker's security files, or a running one's through its admin API."""

import contextlib
from pathlib import Path
from typing import Any


class ToolError(Exception):
    """What a tool reports as one line on stderr, exiting 1."""


class UsageError(Exception):
    """Options that do not go together; reported on stderr, exiting 2."""


def online_mode(args) -> bool:
    """Whether `triolog acls`/`configs` act online (--bootstrap-server) or offline (serve's
    --config/--override, which they need explicitly: an offline change to the embedded default's
    ./data is rarely meant); UsageError for neither, both, or --command-config offline."""
    offline = bool(args.config or args.override)
    if args.bootstrap_server and offline:
        raise UsageError("give --bootstrap-server (online) or --config/--override (offline), not both")
    if not args.bootstrap_server and not offline:
        raise UsageError(
            "give --bootstrap-server (online, with --command-config for TLS/SASL) or "
            "--config/--override (offline, on a stopped broker)"
        )
    if args.command_config and not args.bootstrap_server:
        raise UsageError("--command-config goes with --bootstrap-server")
    return bool(args.bootstrap_server)


@contextlib.contextmanager
def offline_store(args, open_store, what: str):
    """``open_store(directory, fs)`` on the first log dir of a stopped broker (its config found as
    serve finds it, from --config/--override), under that directory's lock, the broker's own:
    a running broker holds it. Failures to get there are ToolError saying what to do; ``what``
    names what the tool changes ("users", "ACLs", "quotas")."""
    from triolog.broker.storage.fs import OS_FS
    from triolog.broker.storage.log_manager import LOCK_FILE
    from triolog.config.loader import load_config
    from triolog.config.log_config import ConfigError

    try:
        config, _ = load_config(args.config, args.override)
    except ConfigError as exc:
        raise ToolError(f"invalid configuration: {exc}") from None
    except OSError as exc:
        raise ToolError(f"cannot read the configuration: {exc.strerror}: {exc.filename}") from None
    if config.zookeeper_connect:
        with _zookeeper_store(config, open_store) as store:
            yield store
        return
    directory = Path(config.log_dirs[0])
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd = OS_FS.lock(directory / LOCK_FILE)
    except BlockingIOError:
        raise ToolError(
            f"the broker is running on {directory} (its lock is held): stop it first, or change "
            f"{what} online with --bootstrap-server"
        ) from None
    except OSError as exc:
        raise ToolError(f"cannot write {directory}: {exc.strerror or exc}") from None
    try:
        yield open_store(directory, OS_FS)
    except OSError as exc:
        raise ToolError(f"cannot write {directory}: {exc.strerror or exc}") from None
    finally:
        OS_FS.close(fd)


@contextlib.contextmanager
def _zookeeper_store(config, open_store):
    """A cluster's store (zookeeper.connect set): its users, quotas and ACLs are in ZooKeeper, so
    the tool changes them there, as Kafka's ``kafka-configs.sh --zookeeper`` did (how a cluster
    whose listeners all need a login gets its first user); every broker follows at once. A
    session of its own runs on an event loop in a thread; the store's calls go to it."""
    import queue
    import threading

    import trio

    from triolog.broker.cluster.metadata_store import StoreError
    from triolog.broker.cluster.zk_security import SecurityMetadataError, ZkSecurityMetadata
    from triolog.broker.cluster.zookeeper_store import ZooKeeperStore

    handed: queue.Queue = queue.Queue()
    done = threading.Event()

    async def main() -> None:
        store = ZooKeeperStore(
            config.zookeeper_connect,
            session_timeout_ms=config.zookeeper_session_timeout_ms,
            connection_timeout_ms=config.zookeeper_connection_timeout_ms,
        )
        try:
            await store.start()
            metadata = ZkSecurityMetadata(store, super_users=config.super_users)
            await metadata.load()
        except (StoreError, SecurityMetadataError) as exc:
            handed.put(ToolError(f"cannot read the cluster's security metadata from ZooKeeper: {exc}"))
            await store.close()
            return
        handed.put(metadata)
        try:
            await trio.to_thread.run_sync(done.wait)
        finally:
            await store.close()

    loop = threading.Thread(target=trio.run, args=(main,), name="triolog-zookeeper", daemon=True)
    loop.start()
    try:
        got = handed.get()
        if isinstance(got, ToolError):
            raise got
        for candidate in (got.credentials, got.acls, got.quotas):
            if isinstance(candidate, open_store):
                try:
                    yield candidate
                except SecurityMetadataError as exc:
                    raise ToolError(str(exc)) from None
                break
    finally:
        done.set()
        loop.join(30)


def add_location_arguments(parser) -> None:
    """Where `triolog users`, `triolog acls` and `triolog configs` act: online through a running broker, or offline
    on a stopped broker's data (found as serve finds it)."""
    online = parser.add_argument_group("online (through a running broker)")
    online.add_argument("--bootstrap-server", metavar="HOST:PORT", help="the broker to connect to")
    online.add_argument(
        "--command-config",
        metavar="FILE",
        help="Kafka client properties for TLS/SASL (security.protocol, sasl.*, ssl.*)",
    )
    offline = parser.add_argument_group("offline (a stopped broker's data)")
    offline.add_argument("--config", metavar="FILE", help="the broker's server.properties file, as for serve")
    offline.add_argument(
        "--override", metavar="KEY=VALUE", action="append", default=[], help="one config key, as for serve (repeatable)"
    )


@contextlib.contextmanager
def online_admin(args, client_id: str):
    """An AdminClient to ``--bootstrap-server``, secured as ``--command-config`` says; a client
    error (or a bad properties file) inside the ``with`` becomes ToolError."""
    from triolog.client.admin import AdminClient
    from triolog.client.errors import TriologClientError
    from triolog.client.security import load_command_config

    try:
        security = load_command_config(args.command_config) if args.command_config else None
        kwargs: dict[str, Any] = {"security": security} if security is not None else {}
        with AdminClient(args.bootstrap_server, client_id=client_id, **kwargs) as admin:
            yield admin
    except (TriologClientError, ValueError) as exc:
        raise ToolError(str(exc)) from None
