"""Compiled with mypyc (aiorocketmq/compiled.py, which lists the rules): declared, typed
attributes only; no monkeypatching, setattr or frame tricks; no await in except/finally.

Mapped files: fixed-size files named by their 20-digit start offset, mapped read/write, and
the queue of them that backs one log (the commit log, or one consume queue).

Everything here runs on the event-loop thread except the methods documented as blocking
(:meth:`MappedFile.sync`, :func:`allocate`, :meth:`MappedFile.destroy`), which the store hands to
worker threads.

Zero-copy reads hand out slices of a file's memoryview. Such a slice keeps the mapping alive on
its own: closing a file releases our view and *tries* to unmap; if slices are still out there
the unmap is left to the garbage collector (the slices hold the mmap object), so deleting or
closing a file never breaks a reader and never raises.

Files are **sparse, with their blocks reserved ahead of the writes**: a file is made at its full
size without blocks (``ftruncate``), so its disk use follows the data, and before anything is
written through the mapping the bytes it lands in get real blocks (:meth:`MappedFile.ensure`, a
bounded stretch ahead of the write position). A write through a mapping into a page the
filesystem has no block for kills the process with SIGBUS when the disk is full, so no mapped
byte is ever written before its blocks are reserved; ``reserved`` is how far that holds.

Reserving writes zeros with ``pwrite`` (:func:`reserve`): a region written so has its blocks
(or, under delayed allocation, the filesystem's promise of them) when the call returns, or the
call fails with ENOSPC. Zeros may only go where no data is, at or past a file's write position
(or into holes: :func:`fill_holes`). The commit log's prepare thread, which reserves beside the
appending loop, faults the pages in for writing instead (:func:`reserve_mapped`,
``MADV_POPULATE_WRITE``, the compiled codecs' ``populate_write``): the filesystem's own
write-fault path gives each page its blocks as a write through the mapping would, but as a
system call that fails with EFAULT where that write would have been a SIGBUS, and without
changing a byte, so it is safe beside any writer (where it is missing, zeros, and the loop waits
for them: see :class:`~.commit_log.CommitLog`). It is kept for those large stretches: on a fresh
file its first fault costs about a millisecond (the filesystem's first dirtying of the inode),
where writing a page of zeros costs 10 µs. ``posix_fallocate`` is not enough: it leaves
*unwritten* extents, and a write through a mapping into those can still need new blocks when
the kernel converts them; ext4 on a nearly full disk does that in its page-fault handler, seen
as SIGBUS when a broker filled a 128 MB volume.
No room is :class:`DiskFullError`, never suppressed; the store turns it into refused puts.
Reads of the unreserved rest see zeros (holes), which recovery never takes for data.
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
from collections.abc import Iterator
from pathlib import Path

from aiorocketmq.protocol.errors import MQError
from aiorocketmq.protocol.speedups import compiled as _compiled

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


_ZEROS = memoryview(bytes(1 << 20))


def reserve(fd: int, offset: int, length: int, path: Path) -> None:
    """Give ``[offset, offset + length)`` of the file blocks by writing zeros there, so that
    writes through a mapping never need new ones. Only for a range that holds no data.
    :class:`DiskFullError` when the disk has no room (part of the range may be zeroed then)."""
    end = offset + length
    while offset < end:
        chunk = _ZEROS[: min(end - offset, len(_ZEROS))]
        try:
            written = os.pwrite(fd, chunk, offset)
        except OSError as exc:
            if exc.errno in _NO_SPACE:
                raise DiskFullError(path, end - offset, os.strerror(exc.errno)) from None
            raise
        if written <= 0:
            raise DiskFullError(path, end - offset, "nothing written")
        offset += written


#: ``populate_write(mapping, start, length)`` of the compiled codecs (MADV_POPULATE_WRITE with the
#: GIL released), while it is there and the kernel has it.
_populate_write = _compiled.populate_write if _compiled is not None else None


def populating() -> bool:
    """Whether :func:`reserve_mapped` faults pages in (and so may overlap any writer) rather
    than write zeros (which must not land where a writer may write meanwhile)."""
    return _populate_write is not None


@contextlib.contextmanager
def _without_readahead(mm: mmap.mmap, begin: int, end: int) -> Iterator[None]:
    """Fault ``[begin, end)`` in page by page. A fault into a hole reads ahead, and the
    readahead zero-fills a whole window at once: a 2 MB stretch then cost 40-97 ms of a core
    every few jobs (0.35-1.5 ms otherwise), time the appending loop waited for a CPU
    (docs/performance.md, the 1 KiB stalls). Only this range, and only meanwhile: readers of
    cold data keep their readahead."""
    start = begin - begin % mmap.PAGESIZE
    try:
        mm.madvise(mmap.MADV_RANDOM, start, end - start)
    except (OSError, ValueError):
        yield
        return
    try:
        yield
    finally:
        with contextlib.suppress(OSError, ValueError):
            mm.madvise(mmap.MADV_NORMAL, start, end - start)


def reserve_mapped(mm: mmap.mmap, fd: int, begin: int, end: int, path: Path) -> None:
    """Give ``[begin, end)`` of a mapped file its blocks: fault the pages in for writing where
    the kernel can (contents untouched), else write zeros there (so: only where no data is).
    ``fd`` is any descriptor of the file (-1: opened by path if needed). For large stretches
    (see the module's notes on a fresh file's first fault)."""
    global _populate_write
    if end <= begin:
        return
    populate = _populate_write
    if populate is not None:
        try:
            with _without_readahead(mm, begin, end):
                if populate(mm, begin, end - begin):
                    return
        except OSError as exc:
            # EFAULT: a write there would have been SIGBUS (no room, a quota, an I/O error).
            raise DiskFullError(path, end - begin, os.strerror(exc.errno or errno.ENOSPC)) from None
        _populate_write = None  # the kernel has no MADV_POPULATE_WRITE
        log.info("store: the kernel cannot fault mapped pages in ahead; reserving by writing zeros")
    own = fd < 0
    if own:
        fd = os.open(path, os.O_RDWR)
    try:
        reserve(fd, begin, end - begin, path)
    finally:
        if own:
            os.close(fd)


def fill_holes(fd: int, begin: int, end: int, path: Path) -> None:
    """:func:`reserve` the holes of ``[begin, end)`` and leave the data as it is: for a file
    whose region may hold data anywhere (an index file's slots). Where the filesystem cannot
    tell holes from data, its blocks are allocated instead (``posix_fallocate``)."""
    pos = begin
    while pos < end:
        try:
            data = os.lseek(fd, pos, os.SEEK_DATA)
        except OSError as exc:
            if exc.errno == errno.ENXIO:
                data = end  # no data past pos
            else:
                try:
                    os.posix_fallocate(fd, begin, end - begin)
                except OSError as failure:
                    if failure.errno in _NO_SPACE:
                        raise DiskFullError(path, end - begin, os.strerror(failure.errno)) from None
                    raise
                return
        if data > pos:
            reserve(fd, pos, min(data, end) - pos, path)
        if data >= end:
            return
        try:
            pos = os.lseek(fd, data, os.SEEK_HOLE)
        except OSError:
            return


def page_floor(offset: int) -> int:
    return offset - offset % OS_PAGE_SIZE


def page_ceil(offset: int) -> int:
    return offset + -offset % OS_PAGE_SIZE


def growth_step(written: int, least: int, most: int) -> int:
    """How far ahead of the write position a file with ``written`` bytes reserves: half of what
    it holds (so the slack never exceeds half the data), within [``least``, ``most``]."""
    half = page_floor(written // 2)
    return least if half < least else most if half > most else half


def release_tail(fd: int, offset: int, path: Path) -> None:
    """Make ``[offset, end of file)`` read as zeros and give its whole blocks back (a hole):
    stale bytes past a recovered end must never look like data, and the space is the data's
    only. A partial block at ``offset`` keeps its block (punching zeroes it in place)."""
    size = os.fstat(fd).st_size
    if offset >= size:
        return
    if _fallocate is not None:
        fallocate = _fallocate
        if fallocate(fd, _FALLOC_FL_PUNCH_HOLE | _FALLOC_FL_KEEP_SIZE, offset, size - offset) == 0:  # type: ignore[operator]
            return
    # No hole punching here: cut and regrow (the same hole, by truncation).
    os.ftruncate(fd, offset)
    os.ftruncate(fd, size)


def file_name(offset: int) -> str:
    return f"{offset:0{_NAME_DIGITS}d}"


class MappedFile:
    """One file of a log, mapped in full. ``wrote`` is the write position inside the file;
    ``reserved`` how far from the start its pages have blocks for certain (page-aligned, or the
    file size): writers call :meth:`ensure` before they write past it.

    ``reserved`` is at least ``wrote`` once a file is in use (recovery sets both for a loaded
    file's end; the earlier files of a log are never written again).

    ``fd`` is -1 for files that do not keep a descriptor: CPython's mmap holds a duplicate of
    its own, so a store with thousands of consume-queue files would otherwise use two each.
    They reopen by path for the rare call that needs one (a flush, a reservation, a recovery cut).
    """

    __slots__ = ("path", "start", "size", "fd", "mm", "view", "wrote", "reserved", "dir_synced", "closed")

    def __init__(self, path: Path, start: int, size: int, fd: int, mm: mmap.mmap) -> None:
        self.path = path
        self.start = start
        self.size = size
        self.fd = fd
        self.mm = mm
        self.view = memoryview(mm)
        self.wrote = 0
        self.reserved = 0
        #: Whether the directory entry of this file is known to be on disk.
        self.dir_synced = False
        self.closed = False

    @classmethod
    def open(
        cls, path: Path, start: int, size: int, *, create: bool = False, keep_fd: bool = True
    ) -> MappedFile:
        """Map ``path``; a missing tail (a new file, or one cut short) reads as zeros. Nothing
        is reserved: the first :meth:`ensure` reserves from the write position on."""
        fd = os.open(path, os.O_RDWR | (os.O_CREAT if create else 0), 0o644)
        try:
            actual = os.fstat(fd).st_size
            if actual > size:
                raise StoreError(f"{path} has {actual} bytes, more than the configured file size {size}")
            if actual < size:
                if not create:
                    log.warning("%s has %d bytes of %d; the rest reads as zeros", path, actual, size)
                os.ftruncate(fd, size)
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

    def ensure(self, end: int, ahead: int) -> None:
        """Make sure the bytes up to ``end`` (a position in this file) have blocks, reserving
        ``ahead`` bytes more while at it, so that the next writes find them there (blocking:
        :func:`reserve`). :class:`DiskFullError` when the disk has no room; ``reserved`` stays
        as it was then."""
        if end <= self.reserved:
            return
        # Written from the write position on only: below it lies data, which has its blocks.
        begin = max(self.reserved, self.wrote)
        target = min(self.size, page_ceil(end + ahead))
        fd = self.fd if self.fd >= 0 else os.open(self.path, os.O_RDWR)
        try:
            try:
                reserve(fd, begin, target - begin, self.path)
            except DiskFullError:
                # The stretch ahead is a convenience; the bytes about to be written are not.
                target = min(self.size, page_ceil(end))
                reserve(fd, begin, target - begin, self.path)
        finally:
            if fd != self.fd:
                os.close(fd)
        self.reserved = target

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

    def zero_from(self, pos: int, *, keep_blocks: bool = False) -> None:
        """Make ``[pos, size)`` read as zeros, so stale bytes past a recovered end can never be
        mistaken for data later, and give its blocks back (the next writes reserve again);
        ``pos`` becomes the reservation mark (below it lies data, with its blocks). With
        ``keep_blocks`` the data between ``pos`` and the write position is zeroed in place and
        keeps its blocks (and the mark stays there): entries about to be written again then
        need no new space, which matters when recovery runs on a full disk."""
        keep = self.wrote if keep_blocks and pos < self.wrote <= self.size else pos
        fd = self.fd if self.fd >= 0 else os.open(self.path, os.O_RDWR)
        try:
            if keep > pos:
                reserve(fd, pos, keep - pos, self.path)  # zeros over data: no new blocks
            release_tail(fd, keep, self.path)
        finally:
            if fd != self.fd:
                os.close(fd)
        self.reserved = keep

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
        return f"<MappedFile {self.path.name} wrote={self.wrote} reserved={self.reserved}>"


def sync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def allocate(
    directory: Path, start: int, size: int, *, reserve_first: int, keep_fd: bool = True
) -> MappedFile:
    """Blocking: create the (sparse) file for ``start`` under a temporary name, reserve its
    first ``reserve_first`` bytes, map it. :meth:`MappedFileQueue.adopt` renames it into place.
    :class:`DiskFullError` when the disk cannot hold that much (checked first, so a doomed
    allocation does not eat the last blocks), or no directory entry can be made."""
    first = min(size, page_ceil(reserve_first))
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        if exc.errno in _NO_SPACE:
            raise DiskFullError(directory, OS_PAGE_SIZE, os.strerror(exc.errno)) from None
        raise
    check_space(directory, first)
    # Named per thread: the preparing worker and the loop may both be making this file.
    path = directory / f"{file_name(start)}.{threading.get_ident()}{ALLOC_SUFFIX}"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    except OSError as exc:
        if exc.errno in _NO_SPACE:
            raise DiskFullError(path, OS_PAGE_SIZE, os.strerror(exc.errno)) from None
        raise
    try:
        os.ftruncate(fd, size)
        reserve(fd, 0, first, path)
        mm = mmap.mmap(fd, size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise
    if not keep_fd:
        os.close(fd)
        fd = -1
    mapped = MappedFile(path, start, size, fd, mm)
    mapped.reserved = first
    return mapped


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

    def create(self, start: int, reserve_first: int = 0) -> MappedFile:
        """Create (sparse, under a temporary name until complete) and append the file starting
        at ``start`` with its first ``reserve_first`` bytes reserved; :class:`DiskFullError`
        when there is no room for them."""
        mapped = allocate(
            self.directory, start, self.file_size, reserve_first=reserve_first, keep_fd=self.keep_fds
        )
        self.adopt(mapped)
        return mapped

    def adopt(self, mapped: MappedFile) -> None:
        """Append a file made by :func:`allocate`, renaming it into place."""
        final = self.directory / file_name(mapped.start)
        os.rename(mapped.path, final)
        mapped.path = final
        self.files.append(mapped)

    # -- shrinking ---------------------------------------------------------------------------

    def truncate(self, offset: int, *, keep_blocks: bool = False) -> list[MappedFile]:
        """Make ``offset`` the end of the log: the file holding it is zeroed from there (with
        ``keep_blocks``, see :meth:`MappedFile.zero_from`) and files after it are removed from
        the queue (returned, for the caller to destroy)."""
        self.truncations += 1
        removed = []
        while self.files and self.files[-1].start > offset:
            removed.append(self.files.pop())
        last = self.files[-1] if self.files else None
        if last is not None:
            pos = offset - last.start
            if pos < last.size:
                last.zero_from(pos, keep_blocks=keep_blocks)
            else:
                last.reserved = last.size
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
