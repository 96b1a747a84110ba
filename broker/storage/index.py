"""Kafka's per-segment offset index (``.index``) and time index (``.timeindex``), plus ``LazyIndex``.

Byte layout (no header, no checksum, big-endian), as Kafka's OffsetIndex and TimeIndex:

* ``.index``     8-byte entries:  int32 offset relative to the segment base, int32 position in ``.log``
* ``.timeindex`` 12-byte entries: int64 timestamp, int32 relative offset

Lifecycle (Kafka's ``AbstractIndex``):

* A file that does not exist yet is *created* and immediately extended (sparse, zero-filled) to
  ``floor(max_index_size / ENTRY_SIZE) * ENTRY_SIZE`` bytes; it starts with 0 entries. Real blocks
  are reserved ahead of the entries with posix_fallocate (see ALLOCATION_CHUNK), never written
  sparse through the mapping.
* A file that already exists is *trusted to be trimmed*: ``entries = max_entries = length // ENTRY_SIZE``.
  That includes a 0-byte file, which opens as an empty index with no free slot ("full"), exactly like
  Kafka; it is not re-extended on open (see ``_AbstractIndex.__init__`` for why). The owner of the
  active segment calls ``resize(max_index_size)`` after loading it, as Kafka's log loader does.
* ``trim_to_valid_size()`` (roll, close, recovery) shrinks the file to ``entries * ENTRY_SIZE``;
  ``close()`` trims, ``close_handler()`` does not (a crash is a ``close_handler()``).

Threading contract:

* ``lookup``/``entry``/``fetch_upper_bound_offset``/``last_entry``/``entries`` may be called from any
  thread while another thread appends: an entry's bytes are written to the mapping before ``entries``
  is advanced, so a reader never sees a half-written entry.
* Appends serialise on an internal lock.
* Everything that remaps or shortens the index (``resize``, ``trim_to_valid_size``, ``reset``,
  ``truncate_to``, ``make_read_only``, ``close``, ``close_handler``, ``rename_to``,
  ``delete_if_exists``) must run under the *caller's* (segment/log) lock, excluding readers. This is
  a hard rule: the mapping (``triolog.broker.storage.fs``) stays valid memory until its last reference goes,
  so a reader that raced a shrink would read a stale mapping past the file's new end and fault
  (SIGBUS) instead of getting an error.
"""

from __future__ import annotations

import errno
import mmap
import os
import struct
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, Generic, NamedTuple, TypeVar

from triolog.broker.storage.errors import CorruptIndexError, IndexFullError, InvalidOffsetError
from triolog.broker.storage.fs import OS_FS, FileSystem

__all__ = [
    "LazyIndex",
    "OffsetIndex",
    "OffsetPosition",
    "ReadOnlyIndexError",
    "TimeIndex",
    "TimestampOffset",
]

INT32_MAX = 2**31 - 1
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
NO_TIMESTAMP = -1  # RecordBatch.NO_TIMESTAMP

# Kafka keeps the last 8 KiB of an index "warm" (AbstractIndex.warmEntries).
_WARM_BYTES = 8192

_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")


_MADV_RANDOM = getattr(mmap, "MADV_RANDOM", None)

#: Index pages get real blocks (posix_fallocate) this many bytes at a time, as entries come.
#: An index is created sparse at segment.index.bytes (10 MiB by default, as in Kafka), and the
#: first write through the mapping to a page the file system cannot back (a full disk, a full
#: tmpfs) kills the process with SIGBUS. Allocating whole files would cost 20 MiB of real disk
#: per partition (two indexes) for entries that mostly never come (a 1 GiB segment at the
#: default index.interval.bytes needs ~2 MiB of offset index). In 64 KiB steps, a fallocate
#: comes once per 8,192 offset entries (~32 MiB of log), at most 128 KiB per partition is
#: reserved ahead of use, and a full disk is an ENOSPC on the append that needs the space.
ALLOCATION_CHUNK = 64 * 1024
#: File systems without fallocate (the emulation in libc covers most): appends go on sparse.
_NO_FALLOCATE = frozenset({errno.EOPNOTSUPP, errno.ENOTSUP, errno.EINVAL, errno.ENOSYS})


#: A NamedTuple built without its keyword-handling __new__ (once per index entry appended)
_new_tuple = tuple.__new__


class OffsetPosition(NamedTuple):
    offset: int
    position: int


class TimestampOffset(NamedTuple):
    timestamp: int
    offset: int


class ReadOnlyIndexError(RuntimeError):
    """A write to an index opened with ``writable=False`` or sealed by ``make_read_only()``."""


class _AbstractIndex:
    """Entry-format-agnostic part of an index: file, mapping, sizing and the warm-section search."""

    ENTRY_SIZE: int = 0  # set by subclasses
    _KIND = "index"

    def __init__(
        self,
        path: os.PathLike | str,
        base_offset: int,
        max_index_size: int = -1,
        writable: bool = True,
        fs: FileSystem = OS_FS,
        fresh: bool = False,
    ) -> None:
        """``fresh``: the file exists, empty, made for this index (a Log's spare file renamed to
        its name on roll), and is set up as one this call created."""
        es = self.ENTRY_SIZE
        self._fs = fs
        self._path = path if isinstance(path, Path) else Path(path)  # (a Path is immutable: no copy)
        self._base_offset = int(base_offset)
        self._max_index_size = int(max_index_size)
        self._writable = bool(writable)  # may this object ever change the file?
        self._read_only = not self._writable  # is the current mapping read-only?
        self._warm_entries = _WARM_BYTES // es
        self._lock = threading.RLock()  # serialises appends (Kafka's `lock`)
        # FileSystem.mmap's Mapping (or an mmap), None while empty or closed. Any: appends pack
        # into it on the hot path, where they check no None (an append to a closed index fails).
        self._mmap: Any = None
        self._closed = False
        #: Bytes from the start of the file known to have real blocks under them (see
        #: ALLOCATION_CHUNK); appends reserve more before they write past it.
        self._allocated = 0
        self._length = 0

        # Kafka's rule: only a file this call creates is preallocated. An existing file, even a
        # 0-byte one, is trusted as trimmed. (Extending an existing 0-byte file on open would turn
        # every lazily opened *inactive* segment with an empty index into a 10 MiB zero-filled
        # file; a crash before it is trimmed again leaves an untrimmed index whose zero slots read
        # as real entries - KAFKA-10207's timestamp-0 "last entry" that makes retention delete
        # data early.)
        newly_created = False
        if self._writable:
            try:
                fd = fs.open(self._path, os.O_RDWR if fresh else os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
                newly_created = True
            except FileExistsError:
                pass  # opened below, as an existing index
            if newly_created:
                try:
                    if self._max_index_size < es:
                        raise ValueError(
                            f"Invalid max index size {self._max_index_size} for {self._path}: a new "
                            f"{self._KIND} needs room for at least one {es}-byte entry"
                        )
                    self._length = self._round_down(self._max_index_size)
                    if fresh and fs.fstat(fd).st_size == self._length:
                        # A spare sized by prepare_spare_file, its first chunk reserved already
                        # (off the appending request): nothing left to do to it.
                        self._allocated = min(ALLOCATION_CHUNK, self._length)
                    else:
                        fs.ftruncate(fd, self._length)
                        # Room for the first entries (and the time index's roll entry) now: a
                        # segment that cannot get it is not created, rather than half-usable.
                        self._reserve_on(fd, min(ALLOCATION_CHUNK, self._length))
                except BaseException:
                    fs.close(fd)
                    try:
                        fs.unlink(self._path)
                    except FileNotFoundError:
                        pass
                    raise
            else:
                fd = fs.open(self._path, os.O_RDWR)
        else:
            fd = fs.open(self._path, os.O_RDONLY)  # FileNotFoundError if missing: nothing to read
        try:
            length = fs.fstat(fd).st_size
            self._map(fd, length, writable=not self._read_only)
        finally:
            fs.close(fd)
        self._length = length
        self._max_entries = length // es
        self._entries = 0 if newly_created else length // es

    # ------------------------------------------------------------------ properties

    @property
    def path(self) -> Path:
        return self._path

    @property
    def base_offset(self) -> int:
        return self._base_offset

    @property
    def max_index_size(self) -> int:
        return self._max_index_size

    @property
    def entries(self) -> int:
        return self._entries

    @property
    def max_entries(self) -> int:
        return self._max_entries

    @property
    def size_in_bytes(self) -> int:
        """Bytes used by entries (``entries * ENTRY_SIZE``), not the (preallocated) file length."""
        return self._entries * self.ENTRY_SIZE

    @property
    def file_length(self) -> int:
        return self._length

    @property
    def writable(self) -> bool:
        """True while appends are accepted (opened writable and not sealed by ``make_read_only``)."""
        return not self._read_only

    @property
    def read_only(self) -> bool:
        """True when appends are refused (``writable=False`` or after ``make_read_only()``)."""
        return self._read_only

    @property
    def closed(self) -> bool:
        return self._closed

    def is_full(self) -> bool:
        return self._entries >= self._max_entries

    def __len__(self) -> int:
        return self._entries

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({str(self._path)!r}, base_offset={self._base_offset}, "
            f"entries={self._entries}, max_entries={self._max_entries})"
        )

    # ------------------------------------------------------------------ offsets

    def relative_offset(self, offset: int) -> int:
        """``offset - base_offset``; ``ValueError`` unless it fits Kafka's int32 relative offset."""
        rel = offset - self._base_offset
        if rel < 0 or rel > INT32_MAX:
            raise ValueError(
                f"Offset {offset} does not fit {self._path}: relative to base offset "
                f"{self._base_offset} it must be in [0, {INT32_MAX}]"
            )
        return rel

    def can_append_offset(self, offset: int) -> bool:
        return 0 <= offset - self._base_offset <= INT32_MAX

    # ------------------------------------------------------------------ file lifecycle

    def resize(self, new_size: int) -> bool:
        """Set the file length to ``new_size`` rounded down to a multiple of ENTRY_SIZE and remap.

        Entries are kept (``entries`` is clamped if the new size cannot hold them all). Growing the
        file means the index is accepting appends again (recovery, or a truncation that made an old
        segment active), so a ``make_read_only()`` index is remapped read-write; shrinking keeps the
        current access mode. Returns False when the length is already right. Caller's lock.
        """
        if new_size < 0:
            raise ValueError(f"Cannot resize {self._path} to a negative size ({new_size})")
        self._check_file_writable("resize")
        rounded = self._round_down(new_size)
        with self._lock:
            if self._closed:
                raise ValueError(f"{self._path} is closed")
            if rounded == self._length:
                return False
            read_only = self._read_only and rounded < self._length
            self._allocated = min(self._allocated, rounded)
            fs = self._fs
            fd = fs.open(self._path, os.O_RDWR)
            try:
                self._unmap()  # before shortening: no mapping may outlive its bytes
                fs.ftruncate(fd, rounded)
                self._length = rounded
                self._map(fd, rounded, writable=not read_only)
            finally:
                fs.close(fd)
            self._read_only = read_only
            self._max_entries = rounded // self.ENTRY_SIZE
            if self._entries > self._max_entries:
                self._entries = self._max_entries
            self._reload_last_entry()
            return True

    def trim_to_valid_size(self) -> None:
        """Shrink the file to exactly ``entries * ENTRY_SIZE`` bytes (0 bytes when empty)."""
        with self._lock:
            if self._length != self._entries * self.ENTRY_SIZE:
                self.resize(self._entries * self.ENTRY_SIZE)

    def reset(self) -> None:
        """Drop every entry and grow back to ``max_index_size`` (used to rebuild during recovery)."""
        with self._lock:
            self._check_file_writable("reset")
            if self._max_index_size < self.ENTRY_SIZE:
                raise ValueError(
                    f"Cannot reset {self._path}: max_index_size {self._max_index_size} holds no "
                    f"{self.ENTRY_SIZE}-byte entry"
                )
            self._truncate_to_entries(0)
            self.resize(self._max_index_size)

    def make_read_only(self) -> None:
        """Seal the index when its segment stops being active: trim, then map it read-only."""
        if not self._writable:
            return  # opened read-only: already sealed, and not ours to trim
        with self._lock:
            self.trim_to_valid_size()
            if self._read_only:
                return
            if self._mmap is not None:
                fd = self._fs.open(self._path, os.O_RDONLY)
                try:
                    self._unmap()
                    self._map(fd, self._length, writable=False)
                finally:
                    self._fs.close(fd)
            self._read_only = True

    def flush(self) -> None:
        """msync the mapping (no-op when read-only, empty or closed)."""
        mm = self._mmap
        if mm is not None and not self._read_only:
            mm.flush()

    def close(self) -> None:
        """Release the mapping, then trim the file to the valid size (Kafka trims on close).

        The trim goes by path (truncate, not ftruncate) once the mapping is gone: no descriptor
        is needed, so a process out of descriptors can still seal a segment on roll."""
        with self._lock:
            if self._closed:
                return
            self._unmap()
            self._closed = True
            valid = self._entries * self.ENTRY_SIZE
            if self._writable and self._length != valid:
                self._fs.truncate(self._path, valid)
                self._length = valid

    def close_handler(self) -> None:
        """Release the mapping without trimming (what a crash leaves behind)."""
        with self._lock:
            self._unmap()
            self._closed = True

    def rename_to(self, new_path: os.PathLike | str) -> None:
        """Atomically rename the file; the mapping (if any) stays valid. Path updated even on error."""
        new_path = Path(new_path)
        try:
            self._fs.replace(self._path, new_path)
        finally:
            self._path = new_path

    def update_parent_dir(self, parent_dir: os.PathLike | str) -> None:
        self._path = Path(parent_dir) / self._path.name

    def delete_if_exists(self) -> bool:
        self.close_handler()
        try:
            self._fs.unlink(self._path)
        except FileNotFoundError:
            return False
        return True

    # ------------------------------------------------------------------ internals

    def _round_down(self, size: int) -> int:
        return (size // self.ENTRY_SIZE) * self.ENTRY_SIZE

    def _reserve(self, end: int) -> None:
        """Give the bytes below ``end`` real blocks before an entry is written through the
        mapping; OSError (ENOSPC, EMFILE) if that is not possible now. Caller's lock."""
        target = min(self._length, -(-end // ALLOCATION_CHUNK) * ALLOCATION_CHUNK)
        if target <= self._allocated:
            return
        fd = self._fs.open(self._path, os.O_RDWR)
        try:
            self._reserve_on(fd, target)
        finally:
            self._fs.close(fd)

    def _reserve_on(self, fd: int, target: int) -> None:
        if target <= self._allocated:
            return
        try:
            self._fs.fallocate(fd, self._allocated, target - self._allocated)
        except OSError as exc:
            if exc.errno not in _NO_FALLOCATE:
                raise
            target = self._length  # nothing to reserve with: behave as a sparse index always did
        self._allocated = target

    @classmethod
    def prepare_spare_file(cls, fs: FileSystem, fd: int, max_index_size: int) -> bool:
        """Size an empty spare file (a Log's, renamed to an index's name on its next roll) as a
        new index of ``max_index_size`` is sized, its first chunk of blocks reserved, so that
        opening it ``fresh`` costs no more work; whether it was (else it stays empty and the
        index does that work when it opens). Runs off the appending request. On disk the file
        is then what a new index is right after its creation (zeros past 0 entries), so a crash
        at any point recovers it alike."""
        length = (max_index_size // cls.ENTRY_SIZE) * cls.ENTRY_SIZE
        if length < cls.ENTRY_SIZE:
            return False
        try:
            fs.ftruncate(fd, length)
            fs.fallocate(fd, 0, min(ALLOCATION_CHUNK, length))
        except OSError:  # no space (or no fallocate here): the roll reserves, or fails, as it would
            fs.ftruncate(fd, 0)
            return False
        return True

    def _map(self, fd: int, length: int, *, writable: bool) -> None:
        # A 0-byte file cannot be mmapped; an empty index simply has no mapping.
        if length == 0:
            self._mmap = None
        else:
            self._mmap = self._fs.mmap(fd, length, writable)
            if _MADV_RANDOM is not None and hasattr(self._mmap, "madvise"):
                # Lookups touch a few pages; without this hint the first fault on a fresh 10 MiB
                # sparse index reads ahead megabytes of zeros (milliseconds on every roll).
                self._mmap.madvise(_MADV_RANDOM)

    def _unmap(self) -> None:
        mm, self._mmap = self._mmap, None
        if mm is not None:
            mm.close()

    def _check_file_writable(self, what: str) -> None:
        if not self._writable:
            raise ReadOnlyIndexError(f"Cannot {what} {self._path}: it was opened read-only")

    def _check_appendable(self) -> None:
        if self._read_only:
            raise ReadOnlyIndexError(f"Cannot append to {self._path}: it is read-only")
        if self._closed:
            raise ValueError(f"Cannot append to {self._path}: it is closed")

    def _mapping(self) -> mmap.mmap:
        mm = self._mmap
        if mm is None:
            raise ValueError(f"{self._path} is closed")
        return mm

    def _truncate_to_entries(self, entries: int) -> None:
        self._entries = entries
        self._reload_last_entry()

    def _reload_last_entry(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def _first_slot_at_least(self, target: int, unpack_from, field: int) -> int:
        """Smallest slot whose field is >= target, or ``entries`` if none (plain lower bound).

        Used by ``truncate_to``: correct even if the searched column holds duplicates (a time index
        may repeat an offset), where Kafka's exact-match binary search could keep one of them.
        """
        mm = self._mapping()
        es = self.ENTRY_SIZE
        lo, hi = 0, self._entries
        while lo < hi:
            mid = (lo + hi) >> 1
            if unpack_from(mm, mid * es + field)[0] < target:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def _largest_lower_bound(self, mm, n: int, target: int, unpack_from, field: int) -> int:
        """Kafka's warm-section search: slot of the largest key <= target, or -1.

        ``n`` is the caller's snapshot of ``entries``. Identical results to a plain binary search;
        it only changes which slots are touched, so that in-sync lookups stay in the last 8 KiB.
        """
        if n == 0:
            return -1
        es = self.ENTRY_SIZE
        first_hot = n - 1 - self._warm_entries
        if first_hot < 0:
            first_hot = 0
        if unpack_from(mm, first_hot * es + field)[0] < target:
            lo, hi = first_hot, n - 1
        elif unpack_from(mm, field)[0] > target:
            return -1
        else:
            lo, hi = 0, first_hot
        while lo < hi:
            mid = (lo + hi + 1) >> 1
            key = unpack_from(mm, mid * es + field)[0]
            if key > target:
                hi = mid - 1
            elif key < target:
                lo = mid
            else:
                return mid
        return lo

    def _smallest_upper_bound(self, mm, n: int, target: int, unpack_from, field: int) -> int:
        """Slot of the smallest key >= target, or -1 (Kafka's SMALLEST_UPPER_BOUND search).

        Kafka's version returns ``lo + 1`` without checking ``key(lo) == target`` when the search
        range collapses onto its first slot (e.g. target == key(0)), i.e. one entry too far. That
        is still a valid (looser) bound for its only caller; we return the exact smallest.
        """
        if n == 0:
            return -1
        slot = self._largest_lower_bound(mm, n, target, unpack_from, field)
        if slot == -1:
            return 0
        if unpack_from(mm, slot * self.ENTRY_SIZE + field)[0] >= target:
            return slot
        return slot + 1 if slot + 1 < n else -1


class OffsetIndex(_AbstractIndex):
    """Sparse map from offset to byte position in the segment's ``.log`` (8-byte entries)."""

    ENTRY_SIZE = 8
    _KIND = "offset index"

    def __init__(
        self,
        path: os.PathLike | str,
        base_offset: int,
        max_index_size: int = -1,
        writable: bool = True,
        fs: FileSystem = OS_FS,
        fresh: bool = False,
    ) -> None:
        super().__init__(path, base_offset, max_index_size, writable, fs, fresh)
        self._last_offset = self._base_offset
        self._reload_last_entry()

    @property
    def last_offset(self) -> int:
        """Offset of the last entry, or ``base_offset`` when empty."""
        return self._last_offset

    def _reload_last_entry(self) -> None:
        n = self._entries
        if n == 0 or self._mmap is None:
            self._last_offset = self._base_offset
        else:
            self._last_offset = self._base_offset + _I32.unpack_from(self._mmap, (n - 1) * 8)[0]

    def append(self, offset: int, position: int) -> None:
        """Append ``(offset, position)``; offsets must strictly increase.

        Raises IndexFullError if no slot is free, InvalidOffsetError if ``offset`` is not larger
        than ``last_offset`` (unless the index is empty), ValueError if ``offset`` does not fit a
        relative int32 or ``position`` is not in [0, 2^31-1].
        """
        with self._lock:
            if self._read_only or self._closed:  # (tests inline: an append a batch is the hot path)
                self._check_appendable()
            n = self._entries
            if n >= self._max_entries:
                raise IndexFullError(f"Attempt to append to a full offset index {self._path} (entries = {n})")
            if n != 0 and offset <= self._last_offset:
                raise InvalidOffsetError(
                    f"Attempt to append offset {offset} to slot {n} of {self._path}, which is no "
                    f"larger than the last offset appended ({self._last_offset})"
                )
            rel = offset - self._base_offset
            if rel < 0 or rel > INT32_MAX:
                self.relative_offset(offset)  # raises, naming the range
            if position < 0 or position > INT32_MAX:
                raise ValueError(f"Position {position} does not fit an int32 in {self._path}")
            if (n + 1) * 8 > self._allocated:
                self._reserve((n + 1) * 8)
            _OFFSET_ENTRY.pack_into(self._mmap, n * 8, rel, position)
            # Publish only after the bytes are in place: readers snapshot `entries` first.
            self._last_offset = offset
            self._entries = n + 1

    def lookup(self, target_offset: int) -> OffsetPosition:
        """Entry with the largest offset <= ``target_offset``, or ``(base_offset, 0)``."""
        n = self._entries
        if n == 0:
            return OffsetPosition(self._base_offset, 0)
        mm = self._mapping()
        slot = self._largest_lower_bound(mm, n, target_offset - self._base_offset, _I32.unpack_from, 0)
        if slot == -1:
            return OffsetPosition(self._base_offset, 0)
        rel, pos = _OFFSET_ENTRY.unpack_from(mm, slot * 8)
        return OffsetPosition(self._base_offset + rel, pos)

    def entry(self, n: int) -> OffsetPosition:
        """The ``n``-th entry (0-based); IndexError if out of range."""
        if n < 0 or n >= self._entries:
            raise IndexError(f"Attempt to fetch entry {n} from offset index {self._path}, which has {self._entries}")
        rel, pos = _OFFSET_ENTRY.unpack_from(self._mapping(), n * 8)
        return OffsetPosition(self._base_offset + rel, pos)

    def entries_list(self) -> list[OffsetPosition]:
        """All entries (for dump tools and tests)."""
        return [self.entry(i) for i in range(self._entries)]

    def fetch_upper_bound_offset(self, fetch_position: int, fetch_size: int) -> OffsetPosition | None:
        """Smallest entry whose position is >= ``fetch_position + fetch_size``, or None.

        Its offset is guaranteed to lie beyond the fetched byte range (bounds aborted-txn lookups).
        """
        n = self._entries
        if n == 0:
            return None
        mm = self._mapping()
        slot = self._smallest_upper_bound(mm, n, fetch_position + fetch_size, _I32.unpack_from, 4)
        if slot == -1:
            return None
        rel, pos = _OFFSET_ENTRY.unpack_from(mm, slot * 8)
        return OffsetPosition(self._base_offset + rel, pos)

    def truncate_to(self, offset: int) -> None:
        """Remove every entry whose offset is >= ``offset`` (no-op beyond the last). Caller's lock."""
        with self._lock:
            self._check_file_writable("truncate")
            if self._entries == 0:
                return
            rel = offset - self._base_offset
            self._truncate_to_entries(self._first_slot_at_least(rel, _I32.unpack_from, 0))

    def sanity_check(self) -> None:
        """CorruptIndexError if the last offset is below the base or the length is not a multiple of 8."""
        if self._entries != 0 and self._last_offset < self._base_offset:
            raise CorruptIndexError(
                f"Corrupt index found, index file {self._path} has non-zero size but the last "
                f"offset is {self._last_offset} which is less than the base offset {self._base_offset}"
            )
        if self._length % self.ENTRY_SIZE != 0:
            raise CorruptIndexError(
                f"Index file {self._path} is corrupt, found {self._length} bytes which is not a "
                f"multiple of {self.ENTRY_SIZE}"
            )


class TimeIndex(_AbstractIndex):
    """Sparse map from max-timestamp-so-far to offset (12-byte entries).

    An entry ``(T, O)`` means every record with a timestamp > T comes after offset O. The last slot
    is reserved for the entry written when the segment rolls or closes, hence ``is_full()`` is
    ``entries >= max_entries - 1``.
    """

    ENTRY_SIZE = 12
    _KIND = "time index"

    def __init__(
        self,
        path: os.PathLike | str,
        base_offset: int,
        max_index_size: int = -1,
        writable: bool = True,
        fs: FileSystem = OS_FS,
        fresh: bool = False,
    ) -> None:
        super().__init__(path, base_offset, max_index_size, writable, fs, fresh)
        self._last_entry = TimestampOffset(NO_TIMESTAMP, self._base_offset)
        self._reload_last_entry()

    def is_full(self) -> bool:
        return self._entries >= self._max_entries - 1

    @property
    def last_entry(self) -> TimestampOffset:
        """Last entry, cached; ``(-1, base_offset)`` when empty."""
        return self._last_entry

    def _reload_last_entry(self) -> None:
        n = self._entries
        if n == 0 or self._mmap is None:
            self._last_entry = TimestampOffset(NO_TIMESTAMP, self._base_offset)
        else:
            ts, rel = _TIME_ENTRY.unpack_from(self._mmap, (n - 1) * 12)
            self._last_entry = TimestampOffset(ts, self._base_offset + rel)

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> None:
        """Append ``(timestamp, offset)`` if ``timestamp`` is larger than the last entry's.

        Kafka's rules: IndexFullError if full (unless ``skip_full_check``, used for the roll/close
        entry that may take the reserved last slot); InvalidOffsetError if ``offset`` or
        ``timestamp`` is smaller than the last entry's. An equal timestamp (e.g. the roll entry
        repeating the last one) or a timestamp <= -1 on an empty index is silently skipped.
        """
        with self._lock:
            if self._read_only or self._closed:
                self._check_appendable()
            n = self._entries
            if not skip_full_check and n >= self._max_entries - 1:  # is_full()
                raise IndexFullError(f"Attempt to append to a full time index {self._path} (entries = {n})")
            last = self._last_entry
            if n != 0 and offset < last.offset:
                raise InvalidOffsetError(
                    f"Attempt to append offset {offset} to slot {n} of {self._path}, which is smaller "
                    f"than the last offset appended ({last.offset})"
                )
            if n != 0 and timestamp < last.timestamp:
                raise InvalidOffsetError(
                    f"Attempt to append timestamp {timestamp} to slot {n} of {self._path}, which is "
                    f"smaller than the last timestamp appended ({last.timestamp})"
                )
            if timestamp <= last.timestamp:
                return
            if n >= self._max_entries:  # even the reserved slot is taken
                raise IndexFullError(f"No slot left in time index {self._path} (entries = {n})")
            rel = self.relative_offset(offset)
            if timestamp > INT64_MAX:
                raise ValueError(f"Timestamp {timestamp} does not fit an int64 in {self._path}")
            if (n + 2) * 12 > self._allocated:  # this entry and the slot kept for the roll entry
                self._reserve((n + 2) * 12)
            _TIME_ENTRY.pack_into(self._mmap, n * 12, timestamp, rel)
            self._last_entry = _new_tuple(TimestampOffset, (timestamp, offset))
            self._entries = n + 1

    def lookup(self, target_timestamp: int) -> TimestampOffset:
        """Entry with the largest timestamp <= ``target_timestamp``, or ``(-1, base_offset)``."""
        n = self._entries
        if n == 0:
            return TimestampOffset(NO_TIMESTAMP, self._base_offset)
        mm = self._mapping()
        slot = self._largest_lower_bound(mm, n, target_timestamp, _I64.unpack_from, 0)
        if slot == -1:
            return TimestampOffset(NO_TIMESTAMP, self._base_offset)
        ts, rel = _TIME_ENTRY.unpack_from(mm, slot * 12)
        return TimestampOffset(ts, self._base_offset + rel)

    def entry(self, n: int) -> TimestampOffset:
        """The ``n``-th entry (0-based); IndexError if out of range."""
        if n < 0 or n >= self._entries:
            raise IndexError(f"Attempt to fetch entry {n} from time index {self._path}, which has {self._entries}")
        ts, rel = _TIME_ENTRY.unpack_from(self._mapping(), n * 12)
        return TimestampOffset(ts, self._base_offset + rel)

    def entries_list(self) -> list[TimestampOffset]:
        """All entries (for dump tools and tests)."""
        return [self.entry(i) for i in range(self._entries)]

    def truncate_to(self, offset: int) -> None:
        """Remove every entry whose *offset* is >= ``offset``. Caller's lock."""
        with self._lock:
            self._check_file_writable("truncate")
            if self._entries == 0:
                return
            rel = offset - self._base_offset
            self._truncate_to_entries(self._first_slot_at_least(rel, _I32.unpack_from, 8))

    def sanity_check(self) -> None:
        """CorruptIndexError per Kafka: last ts < first ts, last offset < base, or a bad length.

        An untrimmed, zero-padded file (crash before trim) has a zero last slot and fails the first
        check whenever the real first timestamp is positive (KAFKA-10207).
        """
        last_ts, last_offset = self._last_entry
        if self._entries != 0:
            first_ts = _I64.unpack_from(self._mapping(), 0)[0]
            if last_ts < first_ts:
                raise CorruptIndexError(
                    f"Corrupt time index found, time index file {self._path} has non-zero size but "
                    f"the last timestamp is {last_ts} which is less than the first timestamp {first_ts}"
                )
            if last_offset < self._base_offset:
                raise CorruptIndexError(
                    f"Corrupt time index found, time index file {self._path} has non-zero size but "
                    f"the last offset is {last_offset} which is less than the base offset "
                    f"{self._base_offset}"
                )
        if self._length % self.ENTRY_SIZE != 0:
            raise CorruptIndexError(
                f"Time index file {self._path} is corrupt, found {self._length} bytes which is not a "
                f"multiple of {self.ENTRY_SIZE}"
            )


T = TypeVar("T", bound=_AbstractIndex)


class LazyIndex(Generic[T]):
    """Defers opening/mmapping an index until ``get()`` (KAFKA-7283).

    Opening a log with 10,000 segments must not map 20,000 files; most segments are never read.
    Path management (``rename_to``, ``delete_if_exists``, ``update_parent_dir``, ``close``) works
    without loading. ``get()`` materialises the index exactly once even when raced (KAFKA-9156:
    two mappings of one file with independent positions corrupt appends).
    """

    def __init__(
        self, path: os.PathLike | str, loader: Callable[[Path, bool], T], writable: bool = True, fs: FileSystem = OS_FS
    ) -> None:
        self._path = path if isinstance(path, Path) else Path(path)  # (a Path is immutable: no copy)
        self._fs = fs
        self._loader = loader
        self._writable = writable
        self._index: T | None = None
        self._lock = threading.Lock()

    @classmethod
    def for_offset(
        cls,
        path: os.PathLike | str,
        base_offset: int,
        max_index_size: int = -1,
        writable: bool = True,
        fs: FileSystem = OS_FS,
        fresh: bool = False,
    ) -> LazyIndex[OffsetIndex]:
        return LazyIndex(path, _loader(OffsetIndex, base_offset, max_index_size, fs, fresh), writable, fs)

    @classmethod
    def for_time(
        cls,
        path: os.PathLike | str,
        base_offset: int,
        max_index_size: int = -1,
        writable: bool = True,
        fs: FileSystem = OS_FS,
        fresh: bool = False,
    ) -> LazyIndex[TimeIndex]:
        return LazyIndex(path, _loader(TimeIndex, base_offset, max_index_size, fs, fresh), writable, fs)

    @property
    def path(self) -> Path:
        index = self._index
        return index.path if index is not None else self._path

    @property
    def is_loaded(self) -> bool:
        return self._index is not None

    def get(self) -> T:
        index = self._index
        if index is not None:
            return index
        with self._lock:
            if self._index is None:
                self._index = self._loader(self._path, self._writable)
            return self._index

    def seal(self) -> None:
        """The segment stopped being active: trim the file, drop the mapping and its file
        descriptor, and map it read-only if it is ever used again.

        Inactive segments then cost no descriptors until read, however many a log rolls.
        Caller holds the log's lock (no lookup may be running on this index).
        """
        with self._lock:
            index = self._index
            if index is not None:
                index.close()
                self._path = index.path
                self._index = None
            self._writable = False

    def update_parent_dir(self, parent_dir: os.PathLike | str) -> None:
        with self._lock:
            if self._index is not None:
                self._index.update_parent_dir(parent_dir)
            else:
                self._path = Path(parent_dir) / self._path.name

    def rename_to(self, new_path: os.PathLike | str) -> None:
        """Rename the file. Unloaded and missing is fine (nothing to move); path updated regardless."""
        new_path = Path(new_path)
        with self._lock:
            if self._index is not None:
                self._index.rename_to(new_path)
                return
            try:
                self._fs.replace(self._path, new_path)
            except FileNotFoundError:
                if self._fs.exists(self._path):  # the destination's directory is what is missing
                    raise
            finally:
                self._path = new_path

    def delete_if_exists(self) -> bool:
        with self._lock:
            if self._index is not None:
                return self._index.delete_if_exists()
            try:
                self._fs.unlink(self._path)
            except FileNotFoundError:
                return False
            return True

    def close(self) -> None:
        with self._lock:
            if self._index is not None:
                self._index.close()

    def close_handler(self) -> None:
        with self._lock:
            if self._index is not None:
                self._index.close_handler()

    def __repr__(self) -> str:
        state = "loaded" if self._index is not None else "unloaded"
        return f"LazyIndex({str(self.path)!r}, {state})"


def _loader(index_type, base_offset: int, max_index_size: int, fs: FileSystem, fresh: bool):
    """LazyIndex's load function for ``index_type``; a spare file is fresh only for the first load."""
    first = [fresh]

    def load(p: Path, w: bool):
        index = index_type(p, base_offset, max_index_size, w, fs, first[0] and w)
        first[0] = False
        return index

    return load
