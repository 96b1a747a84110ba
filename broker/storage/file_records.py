"""A segment's ``.log`` file: append-only batch bytes with positional reads (Kafka's FileRecords).

The file is opened lazily, so a log of 10,000 segments costs no file descriptors until a
segment is read. Reads never go through a shared file position (os.pread), so several
threads may read while one appends.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

from triolog.protocol.record_batch import (
    CURRENT_MAGIC,
    HEADER_PREFIX,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MIN_BATCH_LENGTH,
    MIN_LEGACY_SIZE,
    BatchHeader,
    read_header,
)

from .errors import CorruptRecordError
from .fs import OS_FS, FileSystem, is_out_of_descriptors

#: Recovery reads the file in windows of this size instead of one pread per batch.
RECOVERY_READ_BYTES = 1 << 20


class FileRegion(NamedTuple):
    """Whole batches of one segment file, to be copied to a socket with sendfile."""

    records: FileRecords
    position: int
    length: int

    def read_bytes(self) -> bytes:
        return self.records.read(self.position, self.length)


class FileRecords:
    """Descriptor handling: the descriptor is opened on first use, registered with the file
    system's DescriptorCache (which may close it again when it is idle and too many are open),
    and only ever used under ``_lock``, so a close can never race a read or a write."""

    def __init__(
        self,
        path: Path,
        *,
        create: bool = False,
        size: int | None = None,
        preallocate_bytes: int = 0,
        fs: FileSystem = OS_FS,
    ):
        self._path = path if isinstance(path, Path) else Path(path)  # (a Path is immutable: no copy)
        self._fs = fs
        self._cache = fs.open_files
        self._fd: int | None = None
        self._used = False
        self._lock = threading.Lock()
        if create:
            with self._lock:
                fd = self._descriptor(create=True)
                if preallocate_bytes:
                    fs.ftruncate(fd, preallocate_bytes)
            size = 0
        if size is not None:
            self.size = size  # else read lazily, see __getattr__

    # -- lifecycle ---------------------------------------------------------------------------

    def _descriptor(self, create: bool = False) -> int:
        """The descriptor, opened if needed; never recreates a file that went away. Caller holds
        ``_lock``. Out of descriptors, idle ones of other segments are closed and it tries again."""
        self._used = True
        fd = self._fd
        if fd is not None:
            return fd
        flags = os.O_RDWR | (os.O_CREAT if create else 0)
        try:
            fd = self._fs.open(self._path, flags, 0o644)
        except OSError as exc:
            if not is_out_of_descriptors(exc) or not self._cache.shed(max(len(self._cache) // 4, 1), keep=self):
                raise
            fd = self._fs.open(self._path, flags, 0o644)
        self._fd = fd
        self._cache.opened(self)
        return fd

    def _close_idle_descriptor(self) -> bool:
        """The DescriptorCache closes an idle descriptor (``_lock`` held by it)."""
        fd, self._fd = self._fd, None
        if fd is None:
            return False
        self._fs.close(fd)
        return True

    def dup_fd(self) -> int:
        """A descriptor of this file owned by the caller (close it), safe against a concurrent close:
        a fetch sends from it after the log's lock is released, while retention may close ours."""
        with self._lock:
            return self._fs.dup(self._descriptor())

    def try_dup_fd(self) -> int | None:
        """dup_fd, or None when another thread holds the file (an append, a flush): for the event
        loop, which must not wait for it."""
        if not self._lock.acquire(blocking=False):
            return None
        try:
            return self._fs.dup(self._descriptor())
        finally:
            self._lock.release()

    @property
    def path(self) -> Path:
        return self._path

    @property
    def is_open(self) -> bool:
        return self._fd is not None

    def __getattr__(self, name: str):
        # ``size`` of an existing file is read on first use (a plain attribute from then on):
        # opening 10,000 segments stats nothing, and the append path pays no property call.
        if name != "size":
            raise AttributeError(name)
        size = self._fs.stat(self._path).st_size
        self.size = size
        return size

    def close(self) -> None:
        with self._lock:
            fd, self._fd = self._fd, None
            if fd is not None:
                self._fs.close(fd)
        if fd is not None:
            self._cache.closed(self)

    def rename_to(self, new_path: Path) -> None:
        self._fs.replace(self._path, new_path)
        self._path = Path(new_path)

    def delete_if_exists(self) -> bool:
        self.close()
        try:
            self._fs.unlink(self._path)
            return True
        except FileNotFoundError:
            return False

    # -- writes ------------------------------------------------------------------------------

    def append(self, data, size: int | None = None) -> int:
        """Write ``data`` (one buffer, or a list of buffers written in one pwritev; ``size``: their
        total length, if the caller knows it) at the end.

        All or nothing: a write that fails part-way (a full disk) is cut off again, and the
        logical size only moves once every byte is written.
        """
        with self._lock:
            fd = self._descriptor()
            start = position = self.size
            try:
                if isinstance(data, list):
                    total = size if size is not None else sum(len(part) for part in data)
                    written = self._fs.pwritev(fd, data, position)
                    if written == total:
                        self.size = position + total
                        return total
                    view = memoryview(b"".join(data))[written:]  # a short write: finish the rest plainly
                    position += written
                else:
                    total = len(data)
                    view = memoryview(data)
                while view:
                    written = self._fs.pwrite(fd, view, position)
                    view = view[written:]
                    position += written
            except OSError:
                try:
                    self._fs.ftruncate(fd, start)
                except OSError:
                    pass  # the next append overwrites the torn bytes; recovery would cut them
                raise
            self.size = position
            return total

    def flush(self) -> None:
        with self._lock:
            if self._fd is not None:
                self._fs.fsync(self._fd)

    def truncate_to(self, size: int) -> int:
        """Cut the file to ``size`` bytes; returns how many bytes were removed."""
        if size > self.size or size < 0:
            raise ValueError(f"cannot truncate {self._path} of size {self.size} to {size}")
        removed = self.size - size
        self._truncate_file(size)
        self.size = size
        return removed

    def trim(self) -> None:
        """Drop preallocated space past the logical end (on roll and close)."""
        with self._lock:
            on_disk = self._fs.fstat(self._fd).st_size if self._fd is not None else self._fs.stat(self._path).st_size
        if on_disk > self.size:
            self._truncate_file(self.size)

    def _truncate_file(self, size: int) -> None:
        with self._lock:
            if self._fd is not None:
                self._fs.ftruncate(self._fd, size)
            else:
                self._fs.truncate(self._path, size)

    # -- reads -------------------------------------------------------------------------------

    def read(self, position: int, length: int) -> bytes:
        with self._lock:
            return self._fs.pread(self._descriptor(), length, position)

    def region(self, position: int, length: int) -> FileRegion:
        return FileRegion(self, position, length)

    def read_header_at(self, position: int) -> BatchHeader | None:
        """The batch header at ``position``, or None when fewer than a header's bytes remain.

        A legacy or nonsensical header raises CorruptRecordError: the broker never wrote one.
        """
        if position + HEADER_SIZE > self.size:
            if position + HEADER_PREFIX.size <= self.size:
                self._check_prefix(self.read(position, HEADER_PREFIX.size), position)
            return None
        raw = self.read(position, HEADER_SIZE)
        if len(raw) < HEADER_SIZE:
            return None
        self._check_prefix(raw, position)
        return read_header(raw)

    def _check_prefix(self, raw: bytes | memoryview, position: int) -> None:
        _, batch_length, _, magic = HEADER_PREFIX.unpack_from(raw)
        if batch_length + LOG_OVERHEAD < MIN_LEGACY_SIZE:
            raise CorruptRecordError(
                f"record size {batch_length} is smaller than the minimum record overhead "
                f"({MIN_LEGACY_SIZE}) in file {self._path} at position {position}"
            )
        if magic != CURRENT_MAGIC:
            raise CorruptRecordError(f"batch at position {position} of {self._path} has unsupported magic {magic}")
        if batch_length < MIN_BATCH_LENGTH:
            raise CorruptRecordError(
                f"batch at position {position} of {self._path} declares length {batch_length}, below {MIN_BATCH_LENGTH}"
            )

    def batch_headers(
        self, start_position: int = 0, end_position: int | None = None
    ) -> Iterator[tuple[int, BatchHeader]]:
        """(position, header) of each complete batch from ``start_position``; stops at a partial batch."""
        end = self.size if end_position is None else min(end_position, self.size)
        position = start_position
        while position < end:
            header = self.read_header_at(position)
            if header is None or position + header.size > end:
                return
            yield position, header
            position += header.size

    def search_for_offset_with_size(self, target_offset: int, starting_position: int) -> tuple[int, BatchHeader] | None:
        """The first batch at or after ``starting_position`` whose last offset is >= target_offset."""
        for position, header in self.batch_headers(starting_position):
            if header.last_offset >= target_offset:
                return position, header
        return None

    def batches_for_recovery(self, start_position: int = 0) -> Iterator[tuple[int, BatchHeader, memoryview]]:
        """(position, header, bytes) of every complete batch, reading in large windows.

        Stops without error at a batch that runs past the end of the file (a torn write);
        raises CorruptRecordError for a header that cannot be a v2 batch. CRCs are the
        caller's to check.
        """
        position = start_position
        window = b""
        window_start = position
        while position < self.size:
            offset = position - window_start
            if len(window) - offset < HEADER_SIZE:
                window = self.read(position, max(RECOVERY_READ_BYTES, HEADER_SIZE))
                window_start = position
                offset = 0
                if len(window) < HEADER_SIZE:
                    if len(window) >= HEADER_PREFIX.size:
                        self._check_prefix(window, position)
                    return
            self._check_prefix(memoryview(window)[offset : offset + HEADER_PREFIX.size], position)
            header = read_header(window, offset)
            size = header.size
            if position + size > self.size:
                return
            if len(window) - offset < size:
                window = self.read(position, max(RECOVERY_READ_BYTES, size))
                window_start = position
                offset = 0
            yield position, header, memoryview(window)[offset : offset + size]
            position += size

    def last_modified_ms(self) -> int:
        return self._fs.stat(self._path).st_mtime_ns // 1_000_000

    def set_last_modified_ms(self, ms: int) -> None:
        self._fs.utime(self._path, ms * 1_000_000)
