"""Mapped files: fixed-size files named by their 20-digit start offset, mapped read/write, and
the queue of them that backs one log (the commit log, or one consume queue).

Everything here runs on the event-loop thread except the methods documented as blocking
(:meth:`MappedFile.sync`, :func:`allocate`, :meth:`MappedFile.destroy`), which the store hands to
worker threads.

Zero-copy reads hand out slices of a file's memoryview. Such a slice keeps the mapping alive on
its own: closing a file releases our view and *tries* to unmap; if slices are still out there
the unmap is left to the garbage collector (the slices hold the mmap object), so deleting or
closing a file never breaks a reader and never raises.

Every file is **allocated for real** before it is mapped (``posix_fallocate``; zeroing a range
keeps its blocks): a write through a mapping into a page the filesystem has no block for
kills the process with SIGBUS when the disk is full, so no mapped page may ever be a hole.
No room is :class:`DiskFullError`, never suppressed; the store turns it into refused puts.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import ctypes
import errno
import logging
import mmap
import os
import threading
from pathlib import Path

from aiorocketmq.protocol.errors import MQError

log = logging.getLogger(__name__)

OS_PAGE_SIZE = 4096
_NAME_DIGITS = 20
ALLOC_SUFFIX = ".alloc"


class StoreError(MQError):
    """The store cannot open, recover or use its files."""


class DiskFullError(StoreError):
    """No room on the disk for a file the store needs (ENOSPC, a quota, or too little free
    space to start one)."""

    def __init__(self, path: Path, needed: int, reason: str) -> None:
        super().__init__(f"{path}: no room for {needed} bytes ({reason})")
        self.path = path
        self.needed = needed


_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)
_FALLOC_FL_KEEP_SIZE = 0x01
_FALLOC_FL_PUNCH_HOLE = 0x02
_FALLOC_FL_ZERO_RANGE = 0x10


def _libc_fallocate() -> object | None:
    try:
        fn = ctypes.CDLL(None, use_errno=True).fallocate
    except (OSError, AttributeError):
        return None
    fn.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64)
    fn.restype = ctypes.c_int
    return fn


#: Linux ``fallocate(2)`` (modes beyond what ``os.posix_fallocate`` offers), if available.
_fallocate = _libc_fallocate()


def free_bytes(directory: Path) -> int:
    """Bytes an unprivileged writer may still use on the filesystem holding ``directory``."""
    st = os.statvfs(directory)
    return st.f_bavail * st.f_frsize


def check_space(directory: Path, size: int) -> None:
    """Raise :class:`DiskFullError` unless ``size`` bytes are free where ``directory`` lives."""
    try:
        free = free_bytes(directory)
    except OSError:
        return  # cannot tell: the allocation itself will say
    if free < size:
        raise DiskFullError(directory, size, f"{free} bytes free")


def reserve(fd: int, offset: int, length: int, path: Path) -> None:
    """Give ``[offset, offset + length)`` of the file real blocks (zeros where it had none)."""
    if length <= 0:
        return
    try:
        os.posix_fallocate(fd, offset, length)
    except OSError as exc:
        if exc.errno in _NO_SPACE:
            raise DiskFullError(path, length, os.strerror(exc.errno)) from None
        raise


def is_sparse(fd: int, size: int) -> bool:
    """Whether the file has fewer allocated blocks than ``size`` bytes need."""
    return os.fstat(fd).st_blocks * 512 < size - size % 4096


def zero_range(fd: int, offset: int, length: int, path: Path) -> None:
    """Make ``[offset, offset + length)`` read as zeros and keep it allocated: stale bytes
    past a recovered end must never look like data, and a hole there could SIGBUS a later
    write on a full disk."""
    if length <= 0:
        return
    if _fallocate is not None:
        fallocate = _fallocate
        if fallocate(fd, _FALLOC_FL_ZERO_RANGE | _FALLOC_FL_KEEP_SIZE, offset, length) == 0:  # type: ignore[operator]
            return
        if fallocate(fd, _FALLOC_FL_PUNCH_HOLE | _FALLOC_FL_KEEP_SIZE, offset, length) == 0:  # type: ignore[operator]
            reserve(fd, offset, length, path)
            return
    # Neither mode: cut and regrow (a hole), then allocate the hole again.
    size = os.fstat(fd).st_size
    os.ftruncate(fd, offset)
    os.ftruncate(fd, size)
    reserve(fd, offset, size - offset, path)


def file_name(offset: int) -> str:
    return f"{offset:0{_NAME_DIGITS}d}"


class MappedFile:
    """One file of a log, mapped in full. ``wrote`` is the write position inside the file.

    ``fd`` is -1 for files that do not keep a descriptor: CPython's mmap holds a duplicate of
    its own, so a store with thousands of consume-queue files would otherwise use two each.
    They reopen by path for the rare call that needs one (a flush, a recovery cut).
    """

    __slots__ = ("path", "start", "size", "fd", "mm", "view", "wrote", "dir_synced", "closed")

    def __init__(self, path: Path, start: int, size: int, fd: int, mm: mmap.mmap) -> None:
        self.path = path
        self.start = start
        self.size = size
        self.fd = fd
        self.mm = mm
        self.view = memoryview(mm)
        self.wrote = 0
        #: Whether the directory entry of this file is known to be on disk.
        self.dir_synced = False
        self.closed = False

    @classmethod
    def open(
        cls, path: Path, start: int, size: int, *, create: bool = False, keep_fd: bool = True
    ) -> MappedFile:
        """Map ``path``; a missing tail (a new file, or one cut short) reads as zeros. A file
        with holes (cut short, or made by an older version) gets its blocks first; on a full
        disk that raises :class:`DiskFullError` (see :meth:`MappedFileQueue.load`)."""
        fd = os.open(path, os.O_RDWR | (os.O_CREAT if create else 0), 0o644)
        try:
            actual = os.fstat(fd).st_size
            if actual > size:
                raise StoreError(f"{path} has {actual} bytes, more than the configured file size {size}")
            if actual < size:
                if not create:
                    log.warning("%s has %d bytes of %d; the rest reads as zeros", path, actual, size)
                os.ftruncate(fd, size)
            if create or is_sparse(fd, size):
                reserve(fd, 0, size, path)
            mm = mmap.mmap(fd, size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)
        except BaseException:
            os.close(fd)
            if create:
                with contextlib.suppress(OSError):
                    os.unlink(path)
            raise
        if not keep_fd:
            os.close(fd)
            fd = -1
        return cls(path, start, size, fd, mm)

    @property
    def end(self) -> int:
        return self.start + self.size

    @property
    def write_offset(self) -> int:
        return self.start + self.wrote

    @property
    def full(self) -> bool:
        return self.wrote >= self.size

    def sync(self) -> None:
        """Blocking: force this file's written pages (also those written through the mapping,
        which share the page cache) and, once, its directory entry to disk."""
        if self.closed:
            return
        try:
            if self.fd >= 0:
                os.fdatasync(self.fd)
            else:
                fd = os.open(self.path, os.O_RDONLY)
                try:
                    os.fdatasync(fd)
                finally:
                    os.close(fd)
        except OSError as exc:
            # Deleted (or its directory moved away) meanwhile: nothing left to keep.
            if self.closed or isinstance(exc, FileNotFoundError):
                return
            raise
        if not self.dir_synced:
            sync_directory(self.path.parent)
            self.dir_synced = True

    def zero_from(self, pos: int) -> None:
        """Make ``[pos, size)`` read as zeros, keeping its blocks, so stale bytes past a
        recovered end can never be mistaken for data later."""
        fd = self.fd if self.fd >= 0 else os.open(self.path, os.O_RDWR)
        try:
            zero_range(fd, pos, self.size - pos, self.path)
        finally:
            if fd != self.fd:
                os.close(fd)

    def close(self) -> None:
        """Release our view and unmap, unless readers still hold slices (then the mapping goes
        when the last slice does)."""
        if self.closed:
            return
        self.closed = True
        self.view.release()
        with contextlib.suppress(BufferError):
            self.mm.close()
        if self.fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self.fd)

    def destroy(self) -> None:
        """Close and delete the file (blocking: unlinking a large file frees its extents)."""
        self.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)

    def __repr__(self) -> str:
        return f"<MappedFile {self.path.name} wrote={self.wrote}>"


def sync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def allocate(directory: Path, start: int, size: int, *, keep_fd: bool = True) -> MappedFile:
    """Blocking: create the file for ``start`` under a temporary name, reserve its blocks, map it.
    :meth:`MappedFileQueue.adopt` renames it into place. :class:`DiskFullError` when the
    disk cannot hold it (checked first, so a doomed allocation does not eat the last blocks)."""
    directory.mkdir(parents=True, exist_ok=True)
    check_space(directory, size)
    # Named per thread: the preallocating worker and the loop may both be making this file.
    path = directory / f"{file_name(start)}.{threading.get_ident()}{ALLOC_SUFFIX}"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        os.ftruncate(fd, size)
        reserve(fd, 0, size, path)
        mm = mmap.mmap(fd, size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise
    if not keep_fd:
        os.close(fd)
        fd = -1
    return MappedFile(path, start, size, fd, mm)


def destroy_allocated(future: concurrent.futures.Future[MappedFile]) -> None:
    """Done-callback for a background :func:`allocate` nobody wants any more: delete its file."""
    with contextlib.suppress(Exception):
        future.result().destroy()


class MappedFileQueue:
    """The files of one log, contiguous: file *i* starts at ``first.start + i * file_size``.

    ``flushed_where`` is the log offset up to which bytes are known to be on disk.
    """

    __slots__ = ("directory", "file_size", "files", "flushed_where", "keep_fds", "truncations")

    def __init__(self, directory: Path, file_size: int, *, keep_fds: bool = True) -> None:
        self.directory = directory
        self.file_size = file_size
        self.files: list[MappedFile] = []
        self.flushed_where = 0
        self.keep_fds = keep_fds
        #: How many times :meth:`truncate` cut the log back (a flush in flight then covers less).
        self.truncations = 0

    def load(self) -> None:
        """Map the existing files (each marked fully written; recovery sets the real ends)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        names = []
        for entry in os.scandir(self.directory):
            if entry.name.endswith(ALLOC_SUFFIX):
                # A preallocated file never adopted before a crash holds no data.
                with contextlib.suppress(OSError):
                    os.unlink(entry.path)
            elif len(entry.name) == _NAME_DIGITS and entry.name.isdigit() and entry.is_file():
                names.append(entry.name)
        names.sort()
        for i, name in enumerate(names):
            start = int(name)
            actual = os.stat(self.directory / name).st_size
            if actual != self.file_size and (i < len(names) - 1 or actual > self.file_size):
                # Only the newest file can be short (cut by a crash); anything else means the
                # configured file size is not the one these files were written with.
                raise StoreError(
                    f"{self.directory}/{name} has {actual} bytes; the configured file size is {self.file_size}"
                )
            if self.files and start != self.files[-1].end:
                raise StoreError(
                    f"{self.directory}: file {name} does not follow {self.files[-1].path.name} "
                    f"(file size {self.file_size}); files are missing or the size changed"
                )
            if start % self.file_size:
                raise StoreError(f"{self.directory}/{name} is not on a {self.file_size}-byte boundary")
            mapped = MappedFile.open(self.directory / name, start, self.file_size, keep_fd=self.keep_fds)
            mapped.wrote = self.file_size
            mapped.dir_synced = True
            self.files.append(mapped)

    # -- positions ---------------------------------------------------------------------------

    @property
    def min_offset(self) -> int:
        return self.files[0].start if self.files else 0

    @property
    def max_offset(self) -> int:
        """One past the last written byte."""
        if not self.files:
            return 0
        last = self.files[-1]
        return last.start + last.wrote

    @property
    def last(self) -> MappedFile | None:
        return self.files[-1] if self.files else None

    def find(self, offset: int) -> MappedFile | None:
        """The file holding ``offset``, if it still exists."""
        files = self.files
        if not files:
            return None
        index = (offset - files[0].start) // self.file_size
        if 0 <= index < len(files):
            return files[index]
        return None

    def roll_next(self, offset: int) -> int:
        """Start of the file after the one holding ``offset``."""
        return offset + self.file_size - offset % self.file_size

    # -- growth ------------------------------------------------------------------------------

    def create(self, start: int) -> MappedFile:
        """Create (allocated, under a temporary name until complete) and append the file
        starting at ``start``; :class:`DiskFullError` when there is no room for it."""
        mapped = allocate(self.directory, start, self.file_size, keep_fd=self.keep_fds)
        self.adopt(mapped)
        return mapped

    def adopt(self, mapped: MappedFile) -> None:
        """Append a file made by :func:`allocate`, renaming it into place."""
        final = self.directory / file_name(mapped.start)
        os.rename(mapped.path, final)
        mapped.path = final
        self.files.append(mapped)

    # -- shrinking ---------------------------------------------------------------------------

    def truncate(self, offset: int) -> list[MappedFile]:
        """Make ``offset`` the end of the log: the file holding it is zeroed from there and files
        after it are removed from the queue (returned, for the caller to destroy)."""
        self.truncations += 1
        removed = []
        while self.files and self.files[-1].start > offset:
            removed.append(self.files.pop())
        last = self.files[-1] if self.files else None
        if last is not None:
            pos = offset - last.start
            if pos < last.size:
                last.zero_from(pos)
            last.wrote = min(pos, last.size)
        self.flushed_where = min(self.flushed_where, offset)
        return removed

    def close(self) -> None:
        for mapped in self.files:
            mapped.close()
        self.files.clear()

    # -- flushing ----------------------------------------------------------------------------

    def flush_plan(self, least_pages: int) -> tuple[int, list[MappedFile]] | None:
        """What a flush should cover now: ``(target offset, files)``, or None when the dirty
        range is below ``least_pages`` pages (a full file is always worth flushing)."""
        target = self.max_offset
        flushed = self.flushed_where
        if target <= flushed:
            return None
        files = self.files
        if not files:
            return None
        first = max(0, (flushed - files[0].start) // self.file_size)
        dirty = files[first:]
        if (
            least_pages > 0
            and target // OS_PAGE_SIZE - flushed // OS_PAGE_SIZE < least_pages
            and not (len(dirty) > 1 or dirty[0].full)
        ):
            return None
        return target, dirty
