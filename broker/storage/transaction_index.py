"""TransactionIndex: a segment's ``.txnindex``, the aborted transactions whose ABORT marker lies
in it (Kafka's TransactionIndex and AbortedTxn).

Each entry is Kafka's 34 bytes, big-endian: int16 version (0), int64 producer id, int64 first
offset (the transaction's first data batch), int64 last offset (its ABORT marker) and int64 last
stable offset (the partition's LSO when the marker was written: the first offset of the oldest
transaction still open then, else the marker's offset + 1). Entries are appended in marker
order, so last offsets strictly increase. The file is created on the first append, as Kafka
does: a segment without aborted transactions has no ``.txnindex``.

A read_committed fetch asks which aborted transactions overlap the range it returns. Kafka reads
the segment's whole file for every such fetch; here the entries are read once and kept in memory
(34 bytes each, the size of the file), and a bisection on the last offsets finds the first entry
that can overlap. The scan then stops, as Kafka's does, at the first entry whose last stable
offset reaches the range's end: every later entry's transaction starts at or after it.

Like the other indexes this is derived data: recovery rebuilds it from the batches.
"""

from __future__ import annotations

import bisect
import os
import struct
from array import array
from pathlib import Path
from typing import NamedTuple

from .errors import CorruptIndexError
from .fs import OS_FS, FileSystem, read_file

ABORTED_TXN = struct.Struct(">hqqqq")
#: Kafka's AbortedTxn.TOTAL_SIZE.
ENTRY_SIZE = ABORTED_TXN.size
#: Kafka's AbortedTxn.CURRENT_VERSION.
CURRENT_VERSION = 0


class AbortedTxn(NamedTuple):
    """One ``.txnindex`` entry (Kafka's AbortedTxn)."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int
    version: int = CURRENT_VERSION

    def encode(self) -> bytes:
        return ABORTED_TXN.pack(
            self.version, self.producer_id, self.first_offset, self.last_offset, self.last_stable_offset
        )

    def __str__(self) -> str:
        return (
            f"AbortedTxn(version={self.version}, producerId={self.producer_id}, firstOffset={self.first_offset}, "
            f"lastOffset={self.last_offset}, lastStableOffset={self.last_stable_offset})"
        )


def decode_entries(data) -> list[AbortedTxn]:
    """The whole entries of a ``.txnindex``'s bytes (a torn last entry is left out, as Kafka's
    reader leaves it); CorruptIndexError for a version this broker does not know."""
    entries = []
    whole = len(data) - len(data) % ENTRY_SIZE
    for version, producer_id, first, last, lso in ABORTED_TXN.iter_unpack(memoryview(data)[:whole]):
        if version > CURRENT_VERSION:
            raise CorruptIndexError(
                f"unexpected aborted transaction version {version} in a transaction index; "
                f"this broker reads version {CURRENT_VERSION}"
            )
        entries.append(AbortedTxn(producer_id, first, last, lso, version))
    return entries


class TxnIndexSearchResult(NamedTuple):
    """Kafka's TxnIndexSearchResult: the overlapping entries of one segment, and whether the
    search is complete (no later segment can hold an overlapping one)."""

    aborted_transactions: list[AbortedTxn]
    is_complete: bool


class TransactionIndex:
    """The ``.txnindex`` of the segment starting at ``start_offset``. Not thread-safe: the Log
    calls it under its lock (the cleaner writes only its own ``.cleaned`` segment's)."""

    def __init__(self, start_offset: int, path: Path, fs: FileSystem = OS_FS, *, exists: bool | None = None):
        """``exists``: whether the file is there, when the caller knows (a new segment, a
        directory listing): a known-absent index is empty without a look at the disk, so the
        lookups of a read_committed fetch pass over the many segments without one for free."""
        self.start_offset = start_offset
        self._path = Path(path)
        self._fs = fs
        self._fd: int | None = None
        #: The file's entries once read (None: not read yet); appends extend it.
        self._entries: list[AbortedTxn] | None = None if exists is None or exists else []
        self._last_offsets = array("q")
        #: Bytes of the file that are not whole entries (a torn append), found when it was read.
        self._torn_bytes = 0

    @property
    def path(self) -> Path:
        return self._path

    def exists(self) -> bool:
        return self._fs.exists(self._path)

    @property
    def is_loaded(self) -> bool:
        """Whether the entries are in memory (a lookup then reads no file)."""
        return self._entries is not None

    # -- reading ---------------------------------------------------------------------------

    def _load(self) -> list[AbortedTxn]:
        entries = self._entries
        if entries is None:
            try:
                data = read_file(self._fs, self._path)
            except FileNotFoundError:
                data = b""
            entries = decode_entries(data)
            self._torn_bytes = len(data) % ENTRY_SIZE
            self._entries = entries
            self._last_offsets = array("q", (entry.last_offset for entry in entries))
        return entries

    def all_aborted_txns(self) -> list[AbortedTxn]:
        return list(self._load())

    def __len__(self) -> int:
        return len(self._load())

    @property
    def last_offset(self) -> int | None:
        """The last offset of the newest entry (None: no entry)."""
        entries = self._load()
        return entries[-1].last_offset if entries else None

    def collect_aborted_txns(self, fetch_offset: int, upper_bound_offset: int) -> TxnIndexSearchResult:
        """The aborted transactions overlapping [fetch_offset, upper_bound_offset) (Kafka's
        collectAbortedTxns), found by bisection instead of a scan from the first entry."""
        entries = self._load()
        found: list[AbortedTxn] = []
        for i in range(bisect.bisect_left(self._last_offsets, fetch_offset), len(entries)):
            entry = entries[i]
            if entry.first_offset < upper_bound_offset:
                found.append(entry)
            if entry.last_stable_offset >= upper_bound_offset:
                return TxnIndexSearchResult(found, True)
        return TxnIndexSearchResult(found, False)

    def sanity_check(self) -> None:
        """Kafka's check (no entry may end below the segment's base offset), plus two it leaves
        out: entries in order, and no torn entry (a crash in mid-append)."""
        entries = self._load()
        if self._torn_bytes:
            raise CorruptIndexError(
                f"transaction index {self._path} ends with {self._torn_bytes} bytes of a torn entry"
            )
        previous = None
        for entry in entries:
            if entry.last_offset < self.start_offset:
                raise CorruptIndexError(
                    f"last offset of aborted transaction {entry} in index {self._path} is less than "
                    f"start offset {self.start_offset}"
                )
            if previous is not None and entry.last_offset <= previous:
                raise CorruptIndexError(f"transaction index {self._path} has entries out of order")
            previous = entry.last_offset

    # -- writing ---------------------------------------------------------------------------

    def _descriptor(self) -> int:
        fd = self._fd
        if fd is None:
            fd = self._fd = self._fs.open(self._path, os.O_RDWR | os.O_CREAT, 0o644)
        return fd

    def append(self, txn: AbortedTxn) -> None:
        """Add an entry; its last offset must follow the newest one's (Kafka's rule). The file is
        created by the first append."""
        entries = self._load()
        if entries and entries[-1].last_offset >= txn.last_offset:
            raise ValueError(
                f"the last offset of appended transactions must increase sequentially, but {txn.last_offset} is "
                f"not greater than current last offset {entries[-1].last_offset} of index {self._path}"
            )
        data = txn.encode()
        position = len(entries) * ENTRY_SIZE
        fd = self._descriptor()
        written = 0
        while written < len(data):
            written += self._fs.pwrite(fd, data[written:], position + written)
        if self._torn_bytes:  # what a torn append left past the entries goes
            self._fs.ftruncate(fd, position + ENTRY_SIZE)
            self._torn_bytes = 0
        entries.append(txn)
        self._last_offsets.append(txn.last_offset)

    def _cut(self, keep: int) -> None:
        entries = self._load()
        if keep >= len(entries) and not self._torn_bytes:
            return
        if self._fd is not None:
            self._fs.ftruncate(self._fd, keep * ENTRY_SIZE)
        elif self.exists():
            self._fs.truncate(self._path, keep * ENTRY_SIZE)
        del entries[keep:]
        del self._last_offsets[keep:]
        self._torn_bytes = 0

    def reset(self) -> None:
        """Remove every entry (recovery rebuilds them); the file, if any, stays, empty."""
        self._cut(0)

    def truncate_to(self, offset: int) -> None:
        """Remove the entries whose marker is at or past ``offset`` (Kafka's truncateTo)."""
        self._load()
        self._cut(bisect.bisect_left(self._last_offsets, offset))

    def descriptor_to_flush(self) -> int | None:
        """A caller-owned descriptor of the file, for fsync outside any lock; None without a file."""
        try:
            return self._fs.open(self._path, os.O_RDONLY)
        except FileNotFoundError:
            return None

    def flush(self) -> None:
        fd = self.descriptor_to_flush()
        if fd is None:
            return
        try:
            self._fs.fsync(fd)
        finally:
            self._fs.close(fd)

    def close(self) -> None:
        """Close the append descriptor (an inactive segment holds none); entries stay readable."""
        fd, self._fd = self._fd, None
        if fd is not None:
            self._fs.close(fd)

    def rename_to(self, new_path: Path) -> None:
        """Rename the file if there is one (Kafka's renameTo); the path changes regardless."""
        new_path = Path(new_path)
        try:
            if self._fs.exists(self._path):
                self._fs.replace(self._path, new_path)
        finally:
            self._path = new_path

    def delete_if_exists(self) -> bool:
        self.close()
        try:
            self._fs.unlink(self._path)
        except FileNotFoundError:
            return False
        return True

    def __repr__(self) -> str:
        count = len(self._entries) if self._entries is not None else "?"
        return f"TransactionIndex({str(self._path)!r}, start_offset={self.start_offset}, entries={count})"
