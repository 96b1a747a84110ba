"""The narrow interface the cluster code needs of a coordination service.

Kafka's ZooKeeper mode used six things of ZooKeeper, and nothing else here may be assumed of the
backend: read a node with its version, list children, write several nodes atomically on
conditions (a version check is how every controller write is fenced on the controller epoch and
every ISR change on the partition epoch), ephemeral nodes that vanish with their owner's session,
sequential nodes (the change notifications every broker follows: ``config_change_0000000042``),
and one-shot watches. `ZooKeeperStore` is the implementation (kazoo); an etcd one would map
ephemerals to leases and versions to mod revisions without touching the callers.

Every method is a trio coroutine. Watches are trio Events: set once at the next change of what
was read (or when the session is lost, since the backend may then miss changes), after which the
caller reads again with a new watch: level-triggered, so no change is ever acted on twice or lost
between two watches.
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass

import trio


@dataclass(frozen=True)
class Node:
    data: bytes
    #: Incremented by every write of the node's data: what conditional writes compare.
    version: int
    #: The session owning an ephemeral node; 0 for a persistent one.
    ephemeral_owner: int = 0
    #: The store-wide order of the node's creation and of its last write (ZooKeeper's czxid and
    #: mzxid; an etcd backend's create and mod revisions): comparable across nodes, so "was this
    #: written after that was made" has an answer. A broker registration's is Kafka's broker epoch.
    created: int = 0
    modified: int = 0
    #: When the node was created, in milliseconds since the epoch on the store's clock (ZooKeeper's
    #: ctime): how old a change notification is.
    created_ms: int = 0


# -- operations of a conditional multi-write -----------------------------------------------------


@dataclass(frozen=True)
class Check:
    """Fails the whole write unless ``path`` is at ``version``."""

    path: str
    version: int


@dataclass(frozen=True)
class Create:
    path: str
    data: bytes = b""
    ephemeral: bool = False
    #: The store appends a 10-digit number, increasing under the parent (a change notification).
    sequential: bool = False


@dataclass(frozen=True)
class SetData:
    path: str
    data: bytes
    #: -1: any version.
    version: int = -1


@dataclass(frozen=True)
class Delete:
    path: str
    version: int = -1


Op = Check | Create | SetData | Delete


# -- errors --------------------------------------------------------------------------------------


class StoreError(Exception):
    """What the metadata store refused, or could not do."""


class NoNodeError(StoreError):
    pass


class NodeExistsError(StoreError):
    pass


class BadVersionError(StoreError):
    """A conditional write found another version: someone else wrote first."""


class NotEmptyError(StoreError):
    pass


class StoreUnavailableError(StoreError):
    """The store could not be reached (connection lost, session expired) in time: the operation
    may or may not have happened, so the caller reads again before deciding."""


class TransactionFailedError(StoreError):
    """A multi-write wrote nothing: ``ops[index]`` failed with ``cause``."""

    def __init__(self, index: int, cause: StoreError):
        super().__init__(f"operation {index} failed: {type(cause).__name__}: {cause}")
        self.index = index
        self.cause = cause


class SessionState(enum.Enum):
    #: Connected, within a session: ephemerals and watches hold.
    CONNECTED = "connected"
    #: Disconnected, the session may still be alive: act on nothing new until it is known.
    SUSPENDED = "suspended"
    #: The session expired: its ephemeral nodes are gone and must be made again.
    LOST = "lost"


class MetadataStore(ABC):
    """A session with the coordination service (ZooKeeper): one per broker."""

    @property
    @abstractmethod
    def session_id(self) -> int:
        """This session's id (the owner of the ephemerals it creates); 0 before it starts."""

    @property
    @abstractmethod
    def state(self) -> SessionState: ...

    @abstractmethod
    async def start(self) -> None:
        """Connect (within the connection timeout) and make the chroot if missing."""

    @abstractmethod
    async def close(self) -> None:
        """End the session: its ephemerals go at once, not after the session timeout."""

    @abstractmethod
    async def wait_state_change(self, seen: SessionState) -> SessionState:
        """Return the state once it is not ``seen`` (at once if it already is not)."""

    @property
    @abstractmethod
    def state_changes(self) -> int:
        """How many session state changes there have been: a new session that followed a lost one
        counts, even when the state seen before and after is CONNECTED both times."""

    @abstractmethod
    async def wait_state_changes(self, seen: int) -> int:
        """Return ``state_changes`` once it is past ``seen``."""

    @abstractmethod
    async def get(self, path: str) -> Node | None: ...

    @abstractmethod
    async def children(self, path: str) -> list[str] | None:
        """The names of ``path``'s children, None if ``path`` does not exist."""

    @abstractmethod
    async def watch(self, path: str) -> tuple[Node | None, trio.Event]:
        """The node (None if absent) and an event set at its next creation, change or deletion."""

    @abstractmethod
    async def watch_children(self, path: str) -> tuple[list[str] | None, trio.Event]:
        """The children (None if ``path`` is absent) and an event set when they next change."""

    @abstractmethod
    async def create(
        self, path: str, data: bytes = b"", *, ephemeral: bool = False, makepath: bool = False, sequential: bool = False
    ) -> str:
        """The path created (``path`` plus its number if ``sequential``). Raises NodeExistsError,
        or NoNodeError when the parent is missing and not ``makepath``."""

    @abstractmethod
    async def ensure_path(self, path: str) -> None:
        """Create ``path`` and its parents (empty, persistent) where missing."""

    @abstractmethod
    async def set(self, path: str, data: bytes, version: int = -1) -> int:
        """Write the node's data if at ``version`` (-1: any); returns the new version."""

    @abstractmethod
    async def delete(self, path: str, version: int = -1, *, recursive: bool = False) -> None: ...

    @abstractmethod
    async def commit(self, ops: Sequence[Op]) -> list[int | None]:
        """All of ``ops`` or none (TransactionFailedError). For each SetData the new version."""
