"""The file-system seam: every segment, index and checkpoint I/O of the log layer goes through one
:class:`FileSystem` object, handed down from the LogManager to logs, segments, indexes and
checkpoint files.

Production uses :data:`OS_FS`, whose methods are the ``os`` functions themselves (no wrapper
frame on the append path) and whose descriptors are real ones, so fetch can ``sendfile`` from a
duplicate. Tests pass an implementation that remembers what was fsynced and loses the rest at a
simulated power cut, or fails a chosen call with EIO, ENOSPC or EMFILE (tests/storage/faultfs.py).

The interface is descriptor-based, as POSIX is: what is durable is decided by ``fsync`` of a
file and ``fsync_dir`` of the directory holding its name, and the log layer calls both
explicitly wherever a crash must not undo what it did.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import functools
import mmap as _mmap
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from .descriptors import DescriptorCache

__all__ = [
    "FileSystem",
    "OS_FS",
    "OsFileSystem",
    "is_disk_full",
    "is_out_of_descriptors",
    "make_dirs",
    "read_file",
    "touch",
]


class StatResult(Protocol):
    @property
    def st_size(self) -> int: ...

    @property
    def st_mtime_ns(self) -> int: ...


class DirEntry(Protocol):
    name: str
    path: str

    def is_file(self) -> bool: ...

    def is_dir(self) -> bool: ...


class Mapping(Protocol):
    """What :meth:`FileSystem.mmap` returns: a writable buffer (``struct.pack_into``), ``flush``
    (msync) and ``close``, as ``mmap.mmap``."""

    def flush(self) -> None: ...

    def close(self) -> None: ...

    def __len__(self) -> int: ...


class FileSystem(Protocol):
    #: The budget of segment descriptors held open on this file system (broker/storage/descriptors.py).
    open_files: DescriptorCache

    # -- descriptors -------------------------------------------------------------------------
    def open(self, path: str | os.PathLike, flags: int, mode: int = 0o644) -> int: ...

    def close(self, fd: int) -> None: ...

    def dup(self, fd: int) -> int: ...

    def pread(self, fd: int, length: int, offset: int) -> bytes: ...

    def pwrite(self, fd: int, data, offset: int) -> int: ...

    def pwritev(self, fd: int, buffers: Sequence[Any], offset: int) -> int: ...

    def fsync(self, fd: int) -> None: ...

    def ftruncate(self, fd: int, length: int) -> None: ...

    def truncate(self, path: str | os.PathLike, length: int) -> None:
        """Cut (or extend) a file by name: needs no descriptor."""

    def fallocate(self, fd: int, offset: int, length: int) -> None:
        """Reserve real blocks for [offset, offset + length) (posix_fallocate): ENOSPC now, not
        SIGBUS later when a page of a sparse mapping is first written."""

    def fstat(self, fd: int) -> StatResult: ...

    def mmap(self, fd: int, length: int, writable: bool) -> Mapping: ...

    # -- names -------------------------------------------------------------------------------
    def stat(self, path: str | os.PathLike) -> StatResult: ...

    def exists(self, path: str | os.PathLike) -> bool: ...

    def replace(self, src: str | os.PathLike, dst: str | os.PathLike) -> None: ...

    def unlink(self, path: str | os.PathLike) -> None: ...

    def mkdir(self, path: str | os.PathLike) -> bool:
        """Create the directory (and missing parents); True if it did not exist."""

    def rmtree(self, path: str | os.PathLike) -> None: ...

    def scandir(self, path: str | os.PathLike) -> list[DirEntry]: ...

    def fsync_dir(self, path: str | os.PathLike) -> None:
        """Make the directory's entries (creates, renames, unlinks) durable."""

    def utime(self, path: str | os.PathLike, mtime_ns: int) -> None: ...

    def lock(self, path: str | os.PathLike) -> int:
        """An exclusive lock on ``path`` (created if needed), released by ``close``;
        BlockingIOError when another process holds it."""


def _fsync_dir(path) -> None:
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _mkdir(path) -> bool:
    path = Path(path)
    if path.is_dir():
        return False
    path.mkdir(parents=True, exist_ok=True)
    return True


_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long)
_libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
_libc.msync.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
_libc.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
_MAP_FAILED = ctypes.c_void_p(-1).value
_MS_SYNC = getattr(_mmap, "MS_SYNC", 4)


def _check(result: int) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


class _MappingBase(ctypes.Array):
    """A shared file mapping that holds no descriptor.

    CPython's ``mmap.mmap`` keeps a duplicate of the file's descriptor for as long as the mapping
    lives (``trackfd`` came in 3.13): two per partition for its indexes, which is how partitions
    used to cost three descriptors each. This maps with mmap(2) directly, and the object is the
    buffer itself (``struct.pack_into`` writes through it). ``close`` only drops the index's
    reference: the pages are unmapped when the last reference goes, so a reader that raced a
    close still reads valid memory instead of faulting.
    """

    _type_ = ctypes.c_char
    _length_ = 0

    def flush(self) -> None:  # msync(MS_SYNC)
        _check(_libc.msync(ctypes.addressof(self), len(self), _MS_SYNC))

    def madvise(self, advice: int) -> None:
        _check(_libc.madvise(ctypes.addressof(self), len(self), advice))

    def close(self) -> None:
        pass  # see the class docstring: unmapped in __del__

    def __del__(self) -> None:
        try:
            _libc.munmap(ctypes.addressof(self), len(self))
        except Exception:  # interpreter shutdown: the process unmaps everything anyway
            pass


class _ReadOnlyMappingBase(_MappingBase):
    """A PROT_READ mapping: item writes are refused here, as ``mmap.ACCESS_READ`` does (a write
    through the buffer would fault; the indexes check ``read_only`` before appending)."""

    _type_ = ctypes.c_char
    _length_ = 0

    def __setitem__(self, key, value) -> None:
        raise TypeError("the mapping is read-only")


@functools.lru_cache(maxsize=1024)
def _mapping_type(length: int, writable: bool) -> type[Any]:
    base = _MappingBase if writable else _ReadOnlyMappingBase
    return type("Mapping", (base,), {"_type_": ctypes.c_char, "_length_": length})


def _mmap_file(fd: int, length: int, writable: bool):
    prot = _mmap.PROT_READ | (_mmap.PROT_WRITE if writable else 0)
    address = _libc.mmap(None, length, prot, _mmap.MAP_SHARED, fd, 0)
    if address is None or address == _MAP_FAILED:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return _mapping_type(length, writable).from_address(address)


def _exists(path) -> bool:
    return os.path.exists(path)


def _scandir(path) -> list:
    with os.scandir(path) as entries:
        return list(entries)


def _rmtree(path) -> None:
    shutil.rmtree(path, ignore_errors=True)


def _utime(path, mtime_ns: int) -> None:
    os.utime(path, ns=(mtime_ns, mtime_ns))


def _lock(path) -> int:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BaseException:
        os.close(fd)
        raise
    return fd


class OsFileSystem:
    """The real file system. Every method is the ``os`` (or a two-line) function itself."""

    def __init__(self, open_files: DescriptorCache | None = None):
        #: One budget for the whole process: every log of the broker shares it.
        self.open_files = open_files if open_files is not None else DescriptorCache()

    open = staticmethod(os.open)
    close = staticmethod(os.close)
    dup = staticmethod(os.dup)
    pread = staticmethod(os.pread)
    pwrite = staticmethod(os.pwrite)
    pwritev = staticmethod(os.pwritev)
    fsync = staticmethod(os.fsync)
    ftruncate = staticmethod(os.ftruncate)
    truncate = staticmethod(os.truncate)
    fallocate = staticmethod(os.posix_fallocate)
    fstat = staticmethod(os.fstat)
    mmap = staticmethod(_mmap_file)
    stat = staticmethod(os.stat)
    exists = staticmethod(_exists)
    replace = staticmethod(os.replace)
    unlink = staticmethod(os.unlink)
    mkdir = staticmethod(_mkdir)
    rmtree = staticmethod(_rmtree)
    scandir = staticmethod(_scandir)
    fsync_dir = staticmethod(_fsync_dir)
    utime = staticmethod(_utime)
    lock = staticmethod(_lock)

    def __repr__(self) -> str:
        return "OS_FS"


OS_FS: FileSystem = OsFileSystem()


# -- helpers over any FileSystem ---------------------------------------------------------------


def read_file(fs: FileSystem, path: str | os.PathLike) -> bytes:
    """The whole content of a (small) file."""
    fd = fs.open(path, os.O_RDONLY)
    try:
        size = fs.fstat(fd).st_size
        parts = []
        position = 0
        while True:
            chunk = fs.pread(fd, max(size - position, 1 << 16), position)
            if not chunk:
                break
            parts.append(chunk)
            position += len(chunk)
        return b"".join(parts)
    finally:
        fs.close(fd)


def make_dirs(fs: FileSystem, path: Path) -> bool:
    """``mkdir -p`` whose result survives a power cut: each directory it creates is fsynced into
    its parent. Returns whether anything was created."""
    missing = []
    probe = Path(path)
    while not fs.exists(probe):
        missing.append(probe)
        if probe.parent == probe:
            break
        probe = probe.parent
    if not missing:
        return False
    fs.mkdir(path)
    for created in reversed(missing):
        fs.fsync_dir(created.parent)
    return True


def touch(fs: FileSystem, path: str | os.PathLike) -> None:
    """Create an empty file if there is none (its directory entry is not synced)."""
    fs.close(fs.open(path, os.O_WRONLY | os.O_CREAT, 0o644))


#: Errors that say the disk is full: a write fails, nothing is broken, it may work later.
_DISK_FULL = frozenset({errno.ENOSPC, errno.EDQUOT})
#: Errors that say the process or system ran out of descriptors: a resource limit, not a disk fault.
_OUT_OF_DESCRIPTORS = frozenset({errno.EMFILE, errno.ENFILE})


def is_disk_full(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in _DISK_FULL


def is_out_of_descriptors(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in _OUT_OF_DESCRIPTORS
