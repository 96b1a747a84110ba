"""Producer ids for idempotent producers, never handed out twice (Kafka's ProducerIdManager).

Ids come in blocks of :data:`BLOCK_SIZE`. Before the first id of a block is handed out, the start
of the *next* block is written durably to ``producer-id-block`` in the first log directory
(temporary file, fsync, rename, directory fsync). A crash therefore loses at most the rest of the
current block, and a restarted broker starts after it: ids never repeat, as with Kafka's blocks
reserved in ZooKeeper or the KRaft metadata log. One broker, so no coordination beyond a lock.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path

import structlog

from triolog.broker.storage.checkpoints import atomic_write
from triolog.protocol.errors import ErrorCode, TriologError

__all__ = ["BLOCK_SIZE", "FILE_NAME", "ProducerIdBlockError", "ProducerIdManager"]

_log = structlog.get_logger("triolog.producer_ids")

#: Kafka's ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE.
BLOCK_SIZE = 1000
FILE_NAME = "producer-id-block"
VERSION = 1
#: Producer ids are int64 (Kafka's); the last block must fit below this.
MAX_PRODUCER_ID = 2**63 - 1


class ProducerIdBlockError(TriologError):
    """The block file cannot be read: refusing to guess (a guess could repeat ids). At startup
    the broker stops with this message (a StartupError)."""

    code = ErrorCode.COORDINATOR_NOT_AVAILABLE


class ProducerIdManager:
    """``generate_producer_id()`` from any thread. The file is read at the first call (or by
    :meth:`load`), so constructing one does no I/O."""

    def __init__(self, directory: str | os.PathLike[str], block_size: int = BLOCK_SIZE) -> None:
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {block_size}")
        self.path = Path(directory) / FILE_NAME
        self.block_size = block_size
        #: Guards the ids; held for moments only, since the event loop takes it (issued_limit).
        self._lock = threading.Lock()
        #: One cluster reservation at a time. Held while waiting for the cluster, which runs on
        #: the event loop: were that under ``_lock``, a produce checking issued_limit on the loop
        #: would wait for a reservation waiting for the loop (a deadlock that hung a broker).
        self._reserving = threading.Lock()
        self._next_id = 0
        self._block_end = 0  # exclusive; == _next_id: a new block must be reserved first
        self._loaded = False
        #: Blocks reserved by this process (for tests and logs).
        self.blocks_reserved = 0
        #: A cluster member reserves its blocks from the cluster (ZooKeeper) instead of the file:
        #: ``reserve(block_size) -> (first, end)``, from the calling (worker) thread.
        self.reserve: Callable[[int], tuple[int, int]] | None = None
        #: One past the last id the whole cluster has reserved (0 standalone): ids another
        #: broker handed out are issued too.
        self.cluster_issued_limit = 0
        #: A cluster member reads cluster_issued_limit afresh (awaited on the event loop) before
        #: it refuses an id past it: the broker that reserved the block may have answered the
        #: producer before this one's watch saw the block.
        self.refresh_cluster_issued_limit: Callable[[], Awaitable[None]] | None = None

    def load(self, seen_up_to: int = 0) -> None:
        """Read the block file. ``seen_up_to``: one past the largest producer id found in the
        logs' producer state. A block file behind it (missing: deleted, or a data directory
        copied without it) would hand those ids out again: ids start at the block boundary at or
        after it instead, with a warning."""
        with self._lock:
            self._load_locked()
            if seen_up_to > self._block_end:
                start = -(-seen_up_to // self.block_size) * self.block_size
                _log.warning(
                    "producer_id_block_behind_logs",
                    path=str(self.path),
                    block_start=self._block_end,
                    largest_id_in_logs=seen_up_to - 1,
                    new_block_start=start,
                )
                self._next_id = self._block_end = start

    def _load_locked(self) -> None:
        if self._loaded:
            return
        self._next_id = self._block_end = read_next_block_start(self.path)
        self._loaded = True

    def issued_limit(self) -> int:
        """No producer id at or above this was ever handed out (the end of the reserved block,
        or of the cluster's latest)."""
        with self._lock:
            self._load_locked()
            return max(self._block_end, self.cluster_issued_limit)

    def generate_producer_id(self) -> int:
        """A producer id never returned before, by this broker or an earlier run of it."""
        if self.reserve is None:
            with self._lock:
                return self._next_from_file()
        with self._reserving:
            with self._lock:
                self._load_locked()
                if self._next_id < self._block_end:
                    return self._take()
            first, end = self.reserve(self.block_size)  # (not under _lock: see _reserving)
            with self._lock:
                self._next_id, self._block_end = first, end
                self.blocks_reserved += 1
                return self._take()

    def _take(self) -> int:
        producer_id = self._next_id
        self._next_id += 1
        return producer_id

    def _next_from_file(self) -> int:
        """The next id of the block the file reserves, a new block reserved first if needed."""
        self._load_locked()
        if self._next_id >= self._block_end:
            start = self._block_end
            end = start + self.block_size
            if end > MAX_PRODUCER_ID:
                raise ProducerIdBlockError("producer ids are exhausted")
            # Durable before use: a crash after this loses the block's unused ids, never repeats one.
            atomic_write(self.path, f"{VERSION}\n{end}\n".encode("ascii"))
            self._next_id, self._block_end = start, end
            self.blocks_reserved += 1
        return self._take()


def read_next_block_start(path: Path) -> int:
    """The first id of the next block to reserve: 0 if the file does not exist yet."""
    try:
        text = path.read_bytes().decode("ascii")
    except FileNotFoundError:
        return 0
    except (OSError, UnicodeDecodeError) as exc:
        raise ProducerIdBlockError(f"cannot read {path}: {exc}") from exc
    lines = text.split("\n")
    if len(lines) != 3 or lines[2] != "" or lines[0] != str(VERSION) or not lines[1].isdigit():
        raise ProducerIdBlockError(f"{path} is not a producer id block file (version {VERSION}): {text[:80]!r}")
    return int(lines[1])
