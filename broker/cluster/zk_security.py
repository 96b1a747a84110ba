"""A cluster's SCRAM credentials, client quotas and ACLs, kept in ZooKeeper as Kafka kept them.

A single broker keeps them in files (security/acl_store.py, scram.py, quotas.py); a cluster's
brokers must all enforce one set, so with ``zookeeper.connect`` they live in Kafka's ZooKeeper
layout (zk_security_data.py) and every broker keeps a copy in memory, which its checks read.
The stores here are those of the files with the persistence swapped: the security handlers, the
authorizer, SASL and the quota managers call the same methods.

* A change (from a handler's worker thread) is a version-checked read-modify-write of one znode
  on the event loop, retried when another broker wrote first, made in one multi-write with its
  change notification (``/config/changes/config_change_<n>``, ``/kafka-acl*-changes/acl_changes_<n>``),
  so two brokers altering at once both keep their change and no change goes unannounced.
* Every broker follows the notifications (a watch on their parent; level-triggered: at each
  change the children are listed again and those past the last one handled are read in order)
  and re-reads the znode each names, replacing that entity's or pattern's entry in memory.
* At start the whole set is read once; a znode that is not Kafka's JSON stops the broker with
  its path (never an empty set: no ACLs can open a resource). Later, such a znode is logged and
  the entry's last good value kept. Without a session nothing changes in memory (the last known
  set stays in force); a new session reads everything again.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import TypeVar

import structlog
import trio

from triolog.broker.security.acl import AclAuthorizer, AclBinding, AclBindingFilter, PatternType, ResourcePattern
from triolog.broker.security.acl_store import AclStore
from triolog.broker.security.quotas import USER, QuotaEntity, QuotaStore, altered_values, check_quota
from triolog.broker.security.scram import (
    CredentialNotFoundError,
    CredentialStore,
    ScramCredential,
    ScramMechanism,
)
from triolog.protocol.errors import TriologError

from . import zk_security_data as data
from .metadata_store import (
    BadVersionError,
    Create,
    Delete,
    MetadataStore,
    NodeExistsError,
    NoNodeError,
    Op,
    SessionState,
    SetData,
    StoreError,
    StoreUnavailableError,
    TransactionFailedError,
)
from .zk_data import ZkDataError

logger = structlog.get_logger("triolog.cluster.security")

T = TypeVar("T")


class SecurityMetadataError(TriologError):
    """A change that could not be made: ZooKeeper unreachable, or the znode it would change is not
    Kafka's JSON (left as it is; the message names it)."""


class CorruptSecurityMetadataError(SecurityMetadataError):
    """A znode read at startup is not Kafka's JSON: the broker does not start without its set."""


# -- the stores the handlers, the authorizer and SASL call ------------------------------------------
#
# Their constructors skip the file stores' (which read a file); every method that only reads is
# the file store's own, over the in-memory copy these keep.


class ZkAclStore(AclStore):
    """The ACLs: read from memory; created and deleted in ZooKeeper (from a worker thread)."""

    def __init__(self, owner: ZkSecurityMetadata, *, super_users: Iterable[str], allow_everyone_if_no_acl_found: bool):
        self.owner = owner
        self._lock = threading.RLock()
        self.authorizer = AclAuthorizer(super_users, allow_everyone_if_no_acl_found)

    def validate(self, binding: AclBinding) -> AclBinding:
        """Also: a resource name ZooKeeper can hold as a znode name."""
        data.acl_path(binding.validate().pattern)
        return binding

    def create(self, bindings: Iterable[AclBinding]) -> list[AclBinding]:
        bindings = [self.validate(b) for b in bindings]  # every one storable before any is written
        by_pattern: dict[ResourcePattern, list[AclBinding]] = {}
        for binding in bindings:
            by_pattern.setdefault(binding.pattern, []).append(binding)
        new: list[AclBinding] = []
        for pattern, group in by_pattern.items():
            before, _ = self.owner.call(self.owner.update_acls, pattern, lambda current, g=group: current | set(g))
            new += [b for b in dict.fromkeys(group) if b not in before]
        return new

    def delete(self, filters: Iterable[AclBindingFilter]) -> list[list[AclBinding]]:
        """As Kafka's ZooKeeper authorizer: the patterns to change are found in memory, then each
        pattern's znode loses what the filters match in it (as it is in ZooKeeper then)."""
        filters = [f.validate() for f in filters]
        results: list[list[AclBinding]] = [[] for _ in filters]
        patterns = dict.fromkeys(b.pattern for b in self.authorizer.bindings() if any(f.matches(b) for f in filters))

        def without(current: frozenset[AclBinding]) -> frozenset[AclBinding]:
            return frozenset(b for b in current if not any(f.matches(b) for f in filters))

        for pattern in patterns:
            before, after = self.owner.call(self.owner.update_acls, pattern, without)
            for binding in sorted(before - after, key=_binding_order):
                index = next(i for i, f in enumerate(filters) if f.matches(binding))
                results[index].append(binding)
        return results


def _binding_order(binding: AclBinding) -> tuple:
    e = binding.entry
    return (e.principal, e.host, int(e.operation), int(e.permission_type))


class ZkCredentialStore(CredentialStore):
    """The SCRAM credentials: read from memory; changed in ZooKeeper (from a worker thread)."""

    def __init__(self, owner: ZkSecurityMetadata):
        self.owner = owner
        self._lock = threading.RLock()
        self._users = {}

    @property
    def location(self) -> str:
        return "ZooKeeper (/config/users)"

    def upsert(self, user: str, credential: ScramCredential) -> None:
        self.check_upsert(user, credential)
        text = data.credential_to_string(credential)

        def change(config: dict[str, str]) -> dict[str, str]:
            config[credential.mechanism.value] = text
            return config

        self.owner.call(self.owner.update_config, data.user_path(user), change)

    def delete(self, user: str, mechanism: ScramMechanism | str) -> None:
        mechanism = ScramMechanism.parse(mechanism)

        def change(config: dict[str, str]) -> dict[str, str]:
            if config.pop(mechanism.value, None) is None:
                raise CredentialNotFoundError(
                    f"Attempt to delete a user credential that does not exist: {user} {mechanism}"
                )
            return config

        self.owner.call(self.owner.update_config, data.user_path(user), change)

    def _replace(self, users: dict[str, dict[ScramMechanism, ScramCredential]]) -> None:
        with self._lock:
            self._users = users

    def _replace_user(self, user: str, credentials: dict[ScramMechanism, ScramCredential]) -> None:
        with self._lock:
            users = dict(self._users)
            if credentials:
                users[user] = credentials
            else:
                users.pop(user, None)
            self._users = users


class ZkQuotaStore(QuotaStore):
    """The client quotas: read from memory; altered in ZooKeeper (from a worker thread)."""

    def __init__(self, owner: ZkSecurityMetadata):
        self.owner = owner
        self._lock = threading.Lock()
        self._quotas = {}
        self._keys = frozenset()
        self.version = 0

    def alter(self, changes: list[tuple[QuotaEntity, dict[str, float | None]]], validate_only: bool = False) -> None:
        for entity, ops in changes:  # every change checked before any is written
            altered_values(entity, {}, ops)
        if validate_only:
            return
        for entity, ops in changes:

            def change(config: dict[str, str], entity=entity, ops=ops) -> dict[str, str]:
                for key, value in ops.items():
                    if value is None:
                        config.pop(key, None)
                    else:
                        config[key] = data.quota_to_string(key, check_quota(key, entity, value))
                return config

            self.owner.call(self.owner.update_config, data.entity_path(entity), change)

    def _replace(self, quotas: dict[QuotaEntity, dict[str, float]]) -> None:
        with self._lock:
            self._quotas = quotas
            self._keys = frozenset(k for values in quotas.values() for k in values)
            self.version += 1

    def _replace_entity(self, entity: QuotaEntity, values: dict[str, float]) -> None:
        with self._lock:
            quotas = dict(self._quotas)
            if values:
                quotas[entity] = values
            else:
                quotas.pop(entity, None)
            self._quotas = quotas
            self._keys = frozenset(k for v in quotas.values() for k in v)
            self.version += 1


# -- ZooKeeper: reading, following, writing ---------------------------------------------------------

_Parsed = tuple[QuotaEntity, dict[ScramMechanism, ScramCredential], dict[str, float]]
_RETRIED = (BadVersionError, NodeExistsError, NoNodeError)
#: How long a change notification is kept (Kafka's ZkNodeChangeNotificationListener: 15 minutes).
NOTIFICATION_EXPIRY_MS = 15 * 60 * 1000


class ZkSecurityMetadata:
    """One broker's view of the cluster's security metadata, and its writer. ``load`` before
    serving, ``run`` while serving."""

    def __init__(
        self,
        store: MetadataStore,
        *,
        super_users: Iterable[str] = (),
        allow_everyone_if_no_acl_found=False,
        notification_expiry_ms: int = NOTIFICATION_EXPIRY_MS,
    ):
        self.store = store
        self.notification_expiry_ms = notification_expiry_ms
        self.acls = ZkAclStore(
            self, super_users=super_users, allow_everyone_if_no_acl_found=allow_everyone_if_no_acl_found
        )
        self.credentials = ZkCredentialStore(self)
        self.quotas = ZkQuotaStore(self)
        #: Every config entity known (path under /config -> what it holds), valid ones only.
        self._entities: dict[str, _Parsed] = {}
        #: The last notification handled, per notification parent.
        self._seen: dict[str, int] = {}
        #: Reading and applying is one step at a time: a read applied later never undoes a newer one.
        self._configs_lock = trio.Lock()
        self._acls_lock = trio.Lock()
        self._token: trio.lowlevel.TrioToken | None = None

    # -- from worker threads ---------------------------------------------------------------------

    def call(self, fn: Callable[..., Awaitable[T]], *args) -> T:
        """Run ``fn(*args)`` on the event loop from a handler's worker thread; a lost session is
        a SecurityMetadataError (the change may or may not have been made: read again)."""
        try:
            return trio.from_thread.run(fn, *args, trio_token=self._token)
        except StoreUnavailableError as exc:
            raise SecurityMetadataError(f"the change was not confirmed: {exc}") from None

    # -- startup ---------------------------------------------------------------------------------

    async def load(self) -> None:
        """Make the parents Kafka makes, then read every credential, quota and ACL (strictly)."""
        self._token = trio.lowlevel.current_trio_token()
        for path in data.SECURITY_PATHS:
            await self.store.ensure_path(path)
        async with self._configs_lock:
            await self._reload_configs(strict=True)
        async with self._acls_lock:
            await self._reload_acls(strict=True)
        logger.info(
            "security_metadata_loaded",
            users=len(self.credentials.users()),
            quota_entities=len(self.quotas.describe()),
            acls=len(self.acls.authorizer),
        )

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._follow, data.CONFIG_CHANGES, data.CONFIG_CHANGE_PREFIX, self._config_changed)
            nursery.start_soon(self._follow, data.LITERAL_ACL_CHANGES, data.ACL_CHANGE_PREFIX, self._acl_changed)
            nursery.start_soon(self._follow, data.EXTENDED_ACL_CHANGES, data.ACL_CHANGE_PREFIX, self._acl_changed)
            nursery.start_soon(self._reload_on_new_sessions)
            task_status.started()

    # -- following -------------------------------------------------------------------------------

    async def _wait_connected(self) -> None:
        while self.store.state is not SessionState.CONNECTED:
            await self.store.wait_state_change(self.store.state)

    async def _follow(self, parent: str, prefix: str, handle: Callable[[str, str, bytes], Awaitable[None]]) -> None:
        """Handle each notification under ``parent`` once, in order (at least once: a handler
        re-reads, so handling one again changes nothing). Those handled that are older than
        ``notification_expiry_ms`` are deleted, as Kafka's brokers did (each broker of those that
        saw them; one that finds it gone already is content)."""
        handled: dict[str, int] = {}  # name -> creation time (ms), of the notifications handled
        while True:
            try:
                names, changed = await self.store.watch_children(parent)
                numbered = sorted(
                    (n, name) for name in names or [] if (n := data.sequence_number(name, prefix)) is not None
                )
                for number, name in numbered:
                    if number <= self._seen.get(parent, -1):
                        continue
                    node = await self.store.get(f"{parent}/{name}")
                    if node is not None:
                        await handle(parent, name, node.data)
                        handled[name] = node.created_ms
                    self._seen[parent] = max(number, self._seen.get(parent, -1))
                await self._prune(parent, handled)
            except StoreUnavailableError:
                await self._wait_connected()
                continue
            except StoreError as exc:  # ZooKeeper refused a read: the set in force stays
                logger.warning("security_metadata_unreadable", parent=parent, error=str(exc))
                await trio.sleep(1)
                continue
            await changed.wait()

    async def _prune(self, parent: str, handled: dict[str, int]) -> None:
        expired = time.time() * 1000 - self.notification_expiry_ms
        for name in [n for n, created_ms in handled.items() if created_ms < expired]:
            try:
                await self.store.delete(f"{parent}/{name}")
            except NoNodeError:
                pass
            del handled[name]

    async def _reload_on_new_sessions(self) -> None:
        """A new session after the old one was lost or suspended may have missed notifications
        that were pruned meanwhile: everything is read again (leniently: the set in force stays
        for what does not parse)."""
        seen = self.store.state_changes  # (connected: load() has just read everything)
        while True:
            # Any change leaves the connected state (or is a new session after a lost one); the
            # changes during a reload bring another.
            seen = await self.store.wait_state_changes(seen)
            while True:  # until read again over a session
                await self._wait_connected()
                try:
                    async with self._configs_lock:
                        await self._reload_configs(strict=False)
                    async with self._acls_lock:
                        await self._reload_acls(strict=False)
                except StoreError as exc:
                    logger.warning("security_metadata_unreadable", error=str(exc))
                    await trio.sleep(1)
                    continue
                logger.info("security_metadata_reloaded", reason="ZooKeeper session back")
                break

    # -- config entities (credentials, quotas) ------------------------------------------------------

    async def _config_changed(self, parent: str, name: str, raw: bytes) -> None:
        try:
            path = data.decode_config_change(raw, f"{parent}/{name}")
        except ZkDataError as exc:
            logger.error("security_metadata_invalid", error=str(exc))
            return
        if path.split("/", 1)[0] in (data.USERS, data.CLIENTS, data.IPS):
            async with self._configs_lock:
                await self._read_entity(path)

    async def _read_entity(self, path: str) -> None:
        """Read one entity and put it in force (logged and left as it was if it does not parse)."""
        node = await self.store.get(f"/config/{path}")
        try:
            entity = data.entity_from_path(path)
            parsed = (
                None
                if node is None
                else data.parse_entity_config(path, data.decode_entity_config(node.data, f"/config/{path}"))
            )
        except ZkDataError as exc:
            logger.error("security_metadata_invalid", error=str(exc), kept="the last valid value")
            return
        self._entities.pop(path, None)
        credentials: dict[ScramMechanism, ScramCredential] = {}
        quotas: dict[str, float] = {}
        if parsed is not None and (parsed[1] or parsed[2]):
            self._entities[path] = parsed
            _, credentials, quotas = parsed
        self.quotas._replace_entity(entity, dict(quotas))
        user = entity.get(USER, None)
        if entity.types == {USER} and user is not None:
            self.credentials._replace_user(user, dict(credentials))

    async def _reload_configs(self, *, strict: bool) -> None:
        self._seen[data.CONFIG_CHANGES] = await self._last_notification(data.CONFIG_CHANGES, data.CONFIG_CHANGE_PREFIX)
        entities: dict[str, _Parsed] = {}
        for path in await self._entity_paths():
            node = await self.store.get(f"/config/{path}")
            if node is None:
                continue
            try:
                parsed = data.parse_entity_config(path, data.decode_entity_config(node.data, f"/config/{path}"))
            except ZkDataError as exc:
                if strict:
                    raise CorruptSecurityMetadataError(f"ZooKeeper holds invalid security metadata: {exc}") from None
                logger.error("security_metadata_invalid", error=str(exc), kept="the last valid value")
                if path in self._entities:
                    entities[path] = self._entities[path]
                continue
            if parsed[1] or parsed[2]:
                entities[path] = parsed
        self._entities = entities
        users = {}
        for entity, credentials, _ in entities.values():
            user = entity.get(USER, None)
            if entity.types == {USER} and user is not None and credentials:
                users[user] = dict(credentials)
        self.credentials._replace(users)
        self.quotas._replace({entity: dict(quotas) for entity, _, quotas in entities.values() if quotas})

    async def _entity_paths(self) -> list[str]:
        paths = []
        for kind in (data.USERS, data.CLIENTS, data.IPS):
            for name in await self.store.children(f"/config/{kind}") or []:
                paths.append(f"{kind}/{name}")
                if kind == data.USERS:
                    for client in await self.store.children(f"/config/users/{name}/clients") or []:
                        paths.append(f"users/{name}/clients/{client}")
        return paths

    async def _last_notification(self, parent: str, prefix: str) -> int:
        names = await self.store.children(parent) or []
        return max((n for name in names if (n := data.sequence_number(name, prefix)) is not None), default=-1)

    async def update_config(self, path: str, change: Callable[[dict[str, str]], dict[str, str]]) -> None:
        """Read-modify-write ``/config/<path>`` (version-checked, retried when another broker
        wrote first) with its change notification, then put what is there in force here."""
        full = f"/config/{path}"
        while True:
            node = await self.store.get(full)
            try:
                current = {} if node is None else data.decode_entity_config(node.data, full)
            except ZkDataError as exc:
                raise SecurityMetadataError(f"not changed: {exc}") from None
            new = change(dict(current))
            if new == current:
                break
            ops: list[Op] = []
            if node is None:
                await self.store.ensure_path(full.rsplit("/", 1)[0])
                ops.append(Create(full, data.encode_entity_config(new)))
            else:
                ops.append(SetData(full, data.encode_entity_config(new), node.version))
            ops.append(
                Create(
                    f"{data.CONFIG_CHANGES}/{data.CONFIG_CHANGE_PREFIX}",
                    data.encode_config_change(path),
                    sequential=True,
                )
            )
            try:
                await self.store.commit(ops)
            except TransactionFailedError as exc:
                if isinstance(exc.cause, _RETRIED):
                    continue
                raise SecurityMetadataError(f"{full} not changed: {exc}") from None
            break
        async with self._configs_lock:
            try:
                await self._read_entity(path)
            except StoreUnavailableError:
                pass  # written; the notification brings it here once the session is back

    # -- ACLs --------------------------------------------------------------------------------------

    async def _acl_changed(self, parent: str, name: str, raw: bytes) -> None:
        try:
            pattern = data.decode_acl_change(raw, parent == data.EXTENDED_ACL_CHANGES, f"{parent}/{name}")
        except ZkDataError as exc:
            logger.error("security_metadata_invalid", error=str(exc))
            return
        async with self._acls_lock:
            await self._read_acls(pattern)

    async def _read_acls(self, pattern: ResourcePattern) -> None:
        try:
            path = data.acl_path(pattern)
        except ValueError as exc:
            logger.error("security_metadata_invalid", error=str(exc))
            return
        node = await self.store.get(path)
        try:
            bindings = frozenset() if node is None else data.decode_acls(pattern, node.data)
        except ZkDataError as exc:
            logger.error("security_metadata_invalid", error=str(exc), kept="the last valid ACLs of the resource")
            return
        self.acls.authorizer.replace(pattern, bindings)

    async def _reload_acls(self, *, strict: bool) -> None:
        for parent in (data.LITERAL_ACL_CHANGES, data.EXTENDED_ACL_CHANGES):
            self._seen[parent] = await self._last_notification(parent, data.ACL_CHANGE_PREFIX)
        authorizer = self.acls.authorizer
        found: dict[ResourcePattern, frozenset[AclBinding]] = {}
        for root, pattern_type in (
            (data.LITERAL_ACLS, PatternType.LITERAL),
            (data.PREFIXED_ACLS, PatternType.PREFIXED),
        ):
            for type_name in await self.store.children(root) or []:
                try:
                    resource_type = data.resource_type_of(type_name, f"{root}/{type_name}")
                except ZkDataError as exc:
                    if strict:
                        raise CorruptSecurityMetadataError(f"ZooKeeper holds invalid ACLs: {exc}") from None
                    logger.error("security_metadata_invalid", error=str(exc))
                    continue
                for name in await self.store.children(f"{root}/{type_name}") or []:
                    pattern = ResourcePattern(resource_type, name, pattern_type)
                    node = await self.store.get(f"{root}/{type_name}/{name}")
                    if node is None:
                        continue
                    try:
                        found[pattern] = data.decode_acls(pattern, node.data)
                    except ZkDataError as exc:
                        if strict:
                            raise CorruptSecurityMetadataError(f"ZooKeeper holds invalid ACLs: {exc}") from None
                        logger.error("security_metadata_invalid", error=str(exc), kept="the last valid ACLs")
                        found[pattern] = frozenset(b for b in authorizer.bindings() if b.pattern == pattern)
        for pattern in authorizer.patterns() - set(found):
            authorizer.replace(pattern, ())
        for pattern, bindings in found.items():
            authorizer.replace(pattern, bindings)

    async def update_acls(
        self, pattern: ResourcePattern, change: Callable[[frozenset[AclBinding]], frozenset[AclBinding]]
    ) -> tuple[frozenset[AclBinding], frozenset[AclBinding]]:
        """Read-modify-write the pattern's znode (version-checked, retried), with its change
        notification; the bindings before and after. What is there is then in force here."""
        path = data.acl_path(pattern)
        while True:
            node = await self.store.get(path)
            try:
                before = frozenset() if node is None else data.decode_acls(pattern, node.data)
            except ZkDataError as exc:
                raise SecurityMetadataError(f"not changed: {exc}") from None
            after = frozenset(change(before))
            if after == before:
                break
            ops: list[Op] = []
            ordered = sorted(after, key=_binding_order)
            if node is None:
                await self.store.ensure_path(path.rsplit("/", 1)[0])
                ops.append(Create(path, data.encode_acls(ordered)))
            elif not after:
                ops.append(Delete(path, node.version))
            else:
                ops.append(SetData(path, data.encode_acls(ordered), node.version))
            ops.append(Create(data.acl_change_path(pattern), data.encode_acl_change(pattern), sequential=True))
            try:
                await self.store.commit(ops)
            except TransactionFailedError as exc:
                if isinstance(exc.cause, _RETRIED):
                    continue
                raise SecurityMetadataError(f"{path} not changed: {exc}") from None
            break
        async with self._acls_lock:
            try:
                await self._read_acls(pattern)
            except StoreUnavailableError:
                pass
        return before, after
