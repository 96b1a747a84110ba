"""FaultFS: an in-memory FileSystem (broker/storage/fs.py) that loses power.

Modelled on LevelDB's FaultInjectionTestEnv and SQLite's crash-test VFS. It keeps, for every
file, what a power cut is sure to keep (the content at its last fsync) next to what reads see
(the page cache), and for every directory its entries at the last directory fsync next to the
creates, renames and unlinks made since. :meth:`FaultFS.power_loss` then builds what a disk
could hold after the cut:

* file content: every 512-byte sector that changed since the file's last fsync independently
  keeps its old bytes, gets its new bytes, or (where the file grew) reads as zeros: unsynced
  writes land partially and out of order, with holes. The file length is the synced length,
  the current one, or any length in between;
* mmapped pages are the page cache too: index entries written through a mapping are unsynced
  until fsync of the file or msync (``flush``) of the mapping;
* directories: the unsynced operations of each directory survive as a random prefix (journaling
  file systems commit metadata in order); ``fsync_dir`` makes them all durable. A file whose
  create did not survive is gone, whatever was fsynced into it.

Faults can also be injected: any operation can be made to fail with an errno (EIO on fsync,
ENOSPC, EMFILE), a capacity makes writes and fallocate fail with ENOSPC, and ``crash_after``
cuts the power in the middle of the workload (every call then raises :class:`PowerLoss`).
After a failed fsync the file's dirty sectors are dropped as Linux does (fsyncgate): a later
fsync reports success but they are lost at the next power cut.

Descriptors are numbers from 100,000 up: a call that bypassed the seam with one would fail.
"""

from __future__ import annotations

import errno
import functools
import itertools
import os
import random
from dataclasses import dataclass, field
from typing import Callable

from triolog.broker.storage.descriptors import DescriptorCache

SECTOR = 512
BLOCK = 4096


class PowerLoss(BaseException):
    """The power went off: nothing the broker does from now on reaches the disk.

    A BaseException, so storage code's ``except Exception`` cannot swallow it."""


class SimulatedSigbus(AssertionError):
    """A page of a mapping was written where the file has no block and none could be had:
    on a real file system (tmpfs) the process would have died with SIGBUS."""


@dataclass
class Stat:
    st_size: int
    st_mtime_ns: int
    st_mode: int = 0


class _Inode:
    __slots__ = ("is_dir", "data", "durable", "mtime_ns", "mappings", "dropped", "blocks",
                 "entries", "durable_entries", "ops", "fsyncs", "serial")
    _serials = itertools.count()

    def __init__(self, is_dir: bool, mtime_ns: int = 0):
        self.is_dir = is_dir
        self.serial = next(self._serials)
        self.mtime_ns = mtime_ns
        self.fsyncs = 0
        if is_dir:
            self.entries: dict[str, _Inode] = {}
            self.durable_entries: dict[str, _Inode] = {}
            self.ops: list[tuple] = []
        else:
            self.data = bytearray()
            self.durable = b""
            self.mappings: list[FaultMapping] = []
            #: sectors dirty when an fsync failed: never written, even by a later fsync
            self.dropped: set[int] = set()
            #: 4 KiB blocks that hold real space (written or fallocated), for ENOSPC and SIGBUS
            self.blocks: set[int] = set()


class FaultMapping(bytearray):
    """A shared writable mapping: the index writes entries into it with struct.pack_into.

    It is a private copy that the file system copies back (``absorb``) before anything reads or
    syncs the file, which is what a shared mapping's page cache looks like from outside."""

    def __init__(self, fs: "FaultFS", inode: _Inode, length: int, writable: bool):
        super().__init__(inode.data[:length])
        self._fs = fs
        self._inode = inode
        self._writable = writable
        self._closed = False

    def absorb(self) -> None:
        if self._closed or not self._writable:
            return
        inode = self._inode
        n = len(self)
        if inode.data[:n] == self:
            return
        changed = [i for i in range(0, n, BLOCK) if inode.data[i:i + BLOCK] != self[i:i + BLOCK]]
        for start in changed:
            block = start // BLOCK
            if block not in inode.blocks:
                if not self._fs._has_room(BLOCK):
                    raise SimulatedSigbus(f"mapped write to an unallocated page at {start} with the disk full")
                inode.blocks.add(block)
                self._fs._used += BLOCK
            inode.data[start:start + BLOCK] = self[start:start + BLOCK]
            inode.dropped.difference_update(range(start // SECTOR, (start + BLOCK) // SECTOR))

    def flush(self, *args) -> None:  # msync(MS_SYNC): the mapped range becomes durable
        self._fs._check_alive("msync")
        self.absorb()
        self._fs._make_durable(self._inode)

    def madvise(self, *args) -> None:
        pass

    def close(self) -> None:
        if self._closed:
            return
        if self._fs._alive:
            self.absorb()
        self._closed = True
        _remove(self._inode.mappings, self)
        _remove(self._fs._mappings, self)
        del self[:]  # any later use fails loudly

    @property
    def closed(self) -> bool:
        return self._closed



def _remove(items: list, item) -> None:
    for i, candidate in enumerate(items):
        if candidate is item:
            del items[i]
            return


class _Entry:
    __slots__ = ("name", "path", "_is_dir")

    def __init__(self, name: str, path: str, is_dir: bool):
        self.name, self.path, self._is_dir = name, path, is_dir

    def is_dir(self) -> bool:
        return self._is_dir

    def is_file(self) -> bool:
        return not self._is_dir


@dataclass
class Fault:
    """Fail ``op`` (e.g. "fsync", "pwrite", "open") with ``err`` for paths that ``match``."""

    op: str
    err: int
    match: Callable[[str], bool] = lambda path: True
    times: int | None = 1  # None: every time
    hits: int = field(default=0)


@dataclass
class _Fd:
    inode: _Inode
    path: str
    writable: bool


@functools.lru_cache(maxsize=8192)
def _path_parts(path: str) -> tuple[str, ...]:
    """An absolute path's names, as PurePosixPath(path).parts[1:] without "." (cached: a workload
    names the same few hundred paths hundreds of thousands of times, and pathlib's parsing was a
    quarter of the power-loss tests' time)."""
    if not path.startswith("/"):
        raise ValueError(f"FaultFS needs absolute paths, got {path}")
    return tuple(part for part in path.split("/") if part not in ("", "."))


class FaultFS:
    """In-memory file system that can lose power; see the module docstring."""

    def __init__(self, *, seed: int = 0, capacity: int | None = None, max_fds: int | None = None,
                 open_files: int = 64, clock=None):
        self.rng = random.Random(seed)
        self.root = _Inode(True)
        self.capacity = capacity
        self.max_fds = max_fds
        self.clock = clock
        self.faults: list[Fault] = []
        #: cut the power when this many more mutating calls have been made (None: never)
        self.crash_after: int | None = None
        self.mutations = 0
        self.fsync_calls = 0
        self._alive = True
        self._fds: dict[int, _Fd] = {}
        self._next_fd = itertools.count(100_000)
        self._locks: dict[str, int] = {}
        self._used = 0
        self._mappings: list[FaultMapping] = []
        #: the budget of segment descriptors the storage layer may keep open on this file system
        self.open_files = DescriptorCache(limit=open_files)

    # -- power ---------------------------------------------------------------------------------

    def power_loss(self, rng: random.Random | None = None) -> None:
        """Cut the power (if it is still on) and boot again: build what the disk could hold,
        forget every descriptor, mapping and lock."""
        rng = rng or self.rng
        for mapping in list(self._mappings):  # what was written through a mapping is page cache
            mapping.absorb()
        for mapping in list(self._mappings):  # and the mappings die with the process
            mapping._closed = True
            del mapping[:]
        self._mappings.clear()
        self._alive = True
        self.crash_after = None
        self._fds.clear()
        self._locks.clear()
        self.open_files = DescriptorCache(limit=self.open_files._fixed_limit)  # a new process
        seen: dict[int, _Inode] = {}
        self.root = self._survivor(self.root, rng, seen)
        self._used = sum(len(i.blocks) * BLOCK for i in seen.values() if not i.is_dir)

    def _survivor(self, inode: _Inode, rng: random.Random, seen: dict) -> _Inode:
        if inode.serial in seen:
            return seen[inode.serial]
        if inode.is_dir:
            entries = dict(inode.durable_entries)
            ops = inode.ops
            keep = len(ops) if not ops else rng.choice((0, len(ops), rng.randint(0, len(ops))))
            for op in ops[:keep]:
                if op[0] == "set":
                    entries[op[1]] = op[2]
                elif op[0] == "del":
                    entries.pop(op[1], None)
                else:  # rename within this directory, atomic
                    _, src, dst, moved = op
                    if entries.get(src) is moved:
                        del entries[src]
                        entries[dst] = moved
            new = _Inode(True, inode.mtime_ns)
            seen[inode.serial] = new
            new.entries = {name: self._survivor(child, rng, seen) for name, child in entries.items()}
            new.durable_entries = dict(new.entries)
            return new
        new = _Inode(False, inode.mtime_ns)
        seen[inode.serial] = new
        new.data = bytearray(self._surviving_content(inode, rng))
        new.durable = bytes(new.data)
        new.blocks = set(range((len(new.data) + BLOCK - 1) // BLOCK))
        return new

    def _surviving_content(self, inode: _Inode, rng: random.Random) -> bytes:
        cur, dur = inode.data, inode.durable
        if cur == dur and not inode.dropped:
            return dur
        lo, hi = sorted((len(dur), len(cur)))
        choice = rng.randrange(3)
        length = len(cur) if choice == 0 else len(dur) if choice == 1 else rng.randint(lo, hi)
        out = bytearray(length)
        for start in range(0, length, SECTOR):
            end = min(start + SECTOR, length)
            # Past the synced length the old content is zeros: a block that was never written.
            old = bytes(dur[start:end]).ljust(end - start, b"\0")
            new = bytes(cur[start:end]).ljust(end - start, b"\0")
            if old == new or start // SECTOR in inode.dropped:
                out[start:end] = old  # unchanged, or dropped after a failed fsync
            else:
                out[start:end] = new if rng.random() < 0.5 else old
        return bytes(out)

    def _check_alive(self, what: str, path: str = "") -> None:
        if not self._alive:
            raise PowerLoss(f"{what} {path}: the power is off")

    def _mutate(self, what: str, path: str) -> None:
        """Every call that changes the disk comes through here: maybe cut the power first."""
        self._check_alive(what, path)
        self.mutations += 1
        if self.crash_after is not None:
            self.crash_after -= 1
            if self.crash_after < 0:
                self._alive = False
                raise PowerLoss(f"power cut before {what} {path}")
        self._inject(what, path)

    def _inject(self, what: str, path: str) -> None:
        for fault in self.faults:
            if fault.op == what and (fault.times is None or fault.hits < fault.times) and fault.match(path):
                fault.hits += 1
                raise OSError(fault.err, f"{os.strerror(fault.err)} (injected)", path)

    @property
    def alive(self) -> bool:
        return self._alive

    # -- paths ---------------------------------------------------------------------------------

    @staticmethod
    def _parts(path) -> tuple[str, ...]:
        return _path_parts(os.fspath(path))

    def _lookup(self, path) -> _Inode:
        inode = self.root
        for part in self._parts(path):
            if not inode.is_dir:
                raise NotADirectoryError(errno.ENOTDIR, "Not a directory", str(path))
            child = inode.entries.get(part)
            if child is None:
                raise FileNotFoundError(errno.ENOENT, "No such file or directory", str(path))
            inode = child
        return inode

    def _parent(self, path) -> tuple[_Inode, str]:
        parts = self._parts(path)
        if not parts:
            raise PermissionError(errno.EPERM, "cannot change the root", str(path))
        parent = self._lookup("/" + "/".join(parts[:-1]))
        if not parent.is_dir:
            raise NotADirectoryError(errno.ENOTDIR, "Not a directory", str(path))
        return parent, parts[-1]

    def _now_ns(self) -> int:
        return self.clock.milliseconds() * 1_000_000 if self.clock is not None else 0

    # -- space -----------------------------------------------------------------------------------

    def _has_room(self, nbytes: int) -> bool:
        return self.capacity is None or self._used + nbytes <= self.capacity

    def _allocate(self, inode: _Inode, start: int, end: int, path: str) -> int:
        """Give [start, end) real blocks; returns how many bytes from ``start`` fit (ENOSPC if none)."""
        if end <= start:
            return 0
        first, last = start // BLOCK, (end - 1) // BLOCK
        for block in range(first, last + 1):
            if block in inode.blocks:
                continue
            if not self._has_room(BLOCK):
                fitted = max(0, block * BLOCK - start)
                if fitted == 0:
                    raise OSError(errno.ENOSPC, "No space left on device", path)
                return fitted
            inode.blocks.add(block)
            self._used += BLOCK
        return end - start

    def free_space(self) -> int | None:
        return None if self.capacity is None else self.capacity - self._used

    @property
    def used(self) -> int:
        return self._used

    # -- descriptors -----------------------------------------------------------------------------

    def _fd(self, fd: int) -> _Fd:
        try:
            return self._fds[fd]
        except KeyError:
            raise OSError(errno.EBADF, "Bad file descriptor") from None

    def _new_fd(self, entry: _Fd, path: str) -> int:
        if self.max_fds is not None and len(self._fds) >= self.max_fds:
            raise OSError(errno.EMFILE, "Too many open files", path)
        fd = next(self._next_fd)
        self._fds[fd] = entry
        return fd

    def open(self, path, flags: int, mode: int = 0o644) -> int:
        path = os.fspath(path)
        self._check_alive("open", path)
        self._inject("open", path)
        try:
            inode = self._lookup(path)
            if flags & os.O_CREAT and flags & os.O_EXCL:
                raise FileExistsError(errno.EEXIST, "File exists", path)
        except FileNotFoundError:
            if not flags & os.O_CREAT:
                raise
            parent, name = self._parent(path)
            self._mutate("create", path)
            inode = _Inode(False, self._now_ns())
            parent.entries[name] = inode
            parent.ops.append(("set", name, inode))
        writable = bool(flags & (os.O_WRONLY | os.O_RDWR))
        if inode.is_dir and writable:
            raise IsADirectoryError(errno.EISDIR, "Is a directory", path)
        if flags & os.O_TRUNC and writable and inode.data:
            self._mutate("truncate", path)
            self._resize(inode, 0)
        return self._new_fd(_Fd(inode, path, writable), path)

    def close(self, fd: int) -> None:
        self._fd(fd)
        del self._fds[fd]
        for path, holder in list(self._locks.items()):
            if holder == fd:
                del self._locks[path]

    def dup(self, fd: int) -> int:
        self._check_alive("dup")
        entry = self._fd(fd)
        return self._new_fd(_Fd(entry.inode, entry.path, entry.writable), entry.path)

    def pread(self, fd: int, length: int, offset: int) -> bytes:
        entry = self._fd(fd)
        self._check_alive("pread", entry.path)
        self._inject("pread", entry.path)
        inode = entry.inode
        for mapping in inode.mappings:
            mapping.absorb()
        return bytes(inode.data[offset:offset + length])

    def pwrite(self, fd: int, data, offset: int) -> int:
        entry = self._fd(fd)
        if not entry.writable:
            raise OSError(errno.EBADF, "Bad file descriptor (read-only)", entry.path)
        self._mutate("pwrite", entry.path)
        data = bytes(data)
        if not data:
            return 0
        inode = entry.inode
        for mapping in inode.mappings:
            if mapping._writable and offset < len(mapping):
                raise AssertionError(f"pwrite into the mapped part of {entry.path}")
        fitted = self._allocate(inode, offset, offset + len(data), entry.path)
        data = data[:fitted]
        end = offset + len(data)
        if end > len(inode.data):
            inode.data.extend(bytes(end - len(inode.data)))
        inode.data[offset:end] = data
        inode.dropped.difference_update(range(offset // SECTOR, (end + SECTOR - 1) // SECTOR))
        inode.mtime_ns = self._now_ns()
        return len(data)

    def pwritev(self, fd: int, buffers, offset: int) -> int:
        data = b"".join(bytes(b) for b in buffers)
        return self.pwrite(fd, data, offset)

    def fsync(self, fd: int) -> None:
        entry = self._fd(fd)
        inode = entry.inode
        self.fsync_calls += 1
        inode.fsyncs += 1
        try:
            self._mutate("fsync", entry.path)
        except OSError:
            if not inode.is_dir:  # a failed writeback: Linux marks the dirty pages clean, unwritten
                for mapping in inode.mappings:
                    mapping.absorb()
                self._drop_dirty(inode)
            raise
        if inode.is_dir:
            self._sync_dir(inode)
            return
        for mapping in inode.mappings:
            mapping.absorb()
        self._make_durable(inode)

    def _make_durable(self, inode: _Inode) -> None:
        if inode.dropped:
            # fsyncgate: what was dirty when an fsync failed never reaches the disk
            new = bytearray(inode.data)
            for sector in inode.dropped:
                start = sector * SECTOR
                end = min(start + SECTOR, len(new))
                if start < end:
                    new[start:end] = bytes(inode.durable[start:end]).ljust(end - start, b"\0")
            inode.durable = bytes(new)
        else:
            inode.durable = bytes(inode.data)

    @staticmethod
    def _drop_dirty(inode: _Inode) -> None:
        """What Linux does on a failed writeback (fsyncgate): the dirty pages are marked clean
        though never written, so a retried fsync succeeds and the data is lost anyway."""
        cur, dur = inode.data, inode.durable
        for sector in range((max(len(cur), len(dur)) + SECTOR - 1) // SECTOR):
            if cur[sector * SECTOR:(sector + 1) * SECTOR] != dur[sector * SECTOR:(sector + 1) * SECTOR]:
                inode.dropped.add(sector)

    def ftruncate(self, fd: int, length: int) -> None:
        entry = self._fd(fd)
        if not entry.writable:
            raise OSError(errno.EINVAL, "Invalid argument (read-only descriptor)", entry.path)
        self._truncate_inode(entry.inode, entry.path, length)

    def _truncate_inode(self, inode: _Inode, path: str, length: int) -> None:
        self._mutate("ftruncate", path)
        for mapping in inode.mappings:
            mapping.absorb()
            if length < len(mapping) and not mapping.closed:
                raise SimulatedSigbus(f"{path} shortened to {length} under a live {len(mapping)}-byte mapping")
        self._resize(inode, length)
        inode.mtime_ns = self._now_ns()

    def truncate(self, path, length: int) -> None:
        path = os.fspath(path)
        self._check_alive("truncate", path)
        self._truncate_inode(self._lookup(path), path, length)

    def _resize(self, inode: _Inode, length: int) -> None:
        if length < len(inode.data):
            del inode.data[length:]
            gone = {b for b in inode.blocks if b * BLOCK >= length}
            inode.blocks -= gone
            self._used -= len(gone) * BLOCK
        else:
            inode.data.extend(bytes(length - len(inode.data)))  # sparse: no blocks

    def fallocate(self, fd: int, offset: int, length: int) -> None:
        entry = self._fd(fd)
        self._mutate("fallocate", entry.path)
        inode = entry.inode
        used_before = self._used
        blocks_before = set(inode.blocks)
        try:
            if self._allocate(inode, offset, offset + length, entry.path) < length:
                raise OSError(errno.ENOSPC, "No space left on device", entry.path)
        except OSError:
            inode.blocks = blocks_before  # posix_fallocate allocates all or nothing
            self._used = used_before
            raise
        if offset + length > len(inode.data):
            inode.data.extend(bytes(offset + length - len(inode.data)))

    def fstat(self, fd: int) -> Stat:
        entry = self._fd(fd)
        self._check_alive("fstat", entry.path)
        inode = entry.inode
        return Stat(0 if inode.is_dir else len(inode.data), inode.mtime_ns, 0o040000 if inode.is_dir else 0o100000)

    def mmap(self, fd: int, length: int, writable: bool) -> FaultMapping:
        entry = self._fd(fd)
        self._check_alive("mmap", entry.path)
        inode = entry.inode
        if length > len(inode.data):
            raise ValueError("mmap length is greater than file size")
        if writable and any(m._writable for m in inode.mappings):
            raise AssertionError(f"{entry.path} mapped writable twice (KAFKA-9156)")
        for mapping in inode.mappings:
            mapping.absorb()
        mapping = FaultMapping(self, inode, length, writable)
        inode.mappings.append(mapping)
        self._mappings.append(mapping)
        return mapping

    # -- names -----------------------------------------------------------------------------------

    def stat(self, path) -> Stat:
        self._check_alive("stat", os.fspath(path))
        inode = self._lookup(path)
        if not inode.is_dir:
            for mapping in inode.mappings:
                mapping.absorb()
        return Stat(0 if inode.is_dir else len(inode.data), inode.mtime_ns, 0o040000 if inode.is_dir else 0o100000)

    def exists(self, path) -> bool:
        self._check_alive("exists", os.fspath(path))
        try:
            self._lookup(path)
            return True
        except (FileNotFoundError, NotADirectoryError):
            return False

    def is_dir(self, path) -> bool:
        try:
            return self._lookup(path).is_dir
        except (FileNotFoundError, NotADirectoryError):
            return False

    def replace(self, src, dst) -> None:
        src, dst = os.fspath(src), os.fspath(dst)
        src_parent, src_name = self._parent(src)
        dst_parent, dst_name = self._parent(dst)
        moved = src_parent.entries.get(src_name)
        if moved is None:
            self._check_alive("rename", src)
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", src)
        if src_parent is not dst_parent:
            raise NotImplementedError("FaultFS renames within one directory only")
        self._mutate("rename", src)
        if src == dst:
            return
        del src_parent.entries[src_name]
        src_parent.entries[dst_name] = moved
        src_parent.ops.append(("rename", src_name, dst_name, moved))

    def unlink(self, path) -> None:
        path = os.fspath(path)
        parent, name = self._parent(path)
        inode = parent.entries.get(name)
        if inode is None:
            self._check_alive("unlink", path)
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", path)
        if inode.is_dir:
            raise IsADirectoryError(errno.EISDIR, "Is a directory", path)
        self._mutate("unlink", path)
        del parent.entries[name]
        parent.ops.append(("del", name))

    def mkdir(self, path) -> bool:
        path = os.fspath(path)
        parts = self._parts(path)
        inode = self.root
        created = False
        for i, part in enumerate(parts):
            child = inode.entries.get(part)
            if child is None:
                self._mutate("mkdir", "/" + "/".join(parts[:i + 1]))
                child = _Inode(True, self._now_ns())
                inode.entries[part] = child
                inode.ops.append(("set", part, child))
                created = True
            elif not child.is_dir:
                raise FileExistsError(errno.EEXIST, "File exists", path)
            inode = child
        if not created:
            self._check_alive("mkdir", path)
        return created

    def rmtree(self, path) -> None:
        path = os.fspath(path)
        try:
            inode = self._lookup(path)
        except FileNotFoundError:
            self._check_alive("rmtree", path)
            return
        for name, child in list(inode.entries.items()):
            if child.is_dir:
                self.rmtree(f"{path}/{name}")
            else:
                self.unlink(f"{path}/{name}")
        parent, name = self._parent(path)
        self._mutate("rmdir", path)
        del parent.entries[name]
        parent.ops.append(("del", name))

    def scandir(self, path) -> list[_Entry]:
        path = os.fspath(path)
        self._check_alive("scandir", path)
        inode = self._lookup(path)
        if not inode.is_dir:
            raise NotADirectoryError(errno.ENOTDIR, "Not a directory", path)
        base = path.rstrip("/")
        return [_Entry(name, f"{base}/{name}", child.is_dir) for name, child in inode.entries.items()]

    def fsync_dir(self, path) -> None:
        path = os.fspath(path)
        inode = self._lookup(path)
        self._mutate("fsync_dir", path)
        self.fsync_calls += 1
        inode.fsyncs += 1
        self._sync_dir(inode)

    @staticmethod
    def _sync_dir(inode: _Inode) -> None:
        inode.durable_entries = dict(inode.entries)
        inode.ops = []

    def utime(self, path, mtime_ns: int) -> None:
        self._mutate("utime", os.fspath(path))
        self._lookup(path).mtime_ns = mtime_ns

    def lock(self, path) -> int:
        path = os.fspath(path)
        if path in self._locks:
            raise BlockingIOError(errno.EWOULDBLOCK, "Resource temporarily unavailable", path)
        fd = self.open(path, os.O_RDWR | os.O_CREAT)
        self._locks[path] = fd
        return fd

    # -- for tests -------------------------------------------------------------------------------

    def open_fds(self) -> int:
        return len(self._fds)

    def fsyncs_of(self, path) -> int:
        return self._lookup(path).fsyncs

    def read_bytes(self, path) -> bytes:
        return bytes(self._lookup(path).data)

    def listdir(self, path) -> list[str]:
        return sorted(self._lookup(path).entries)
