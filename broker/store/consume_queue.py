"""Compiled with mypyc (aiorocketmq/compiled.py, which lists the rules): declared, typed
attributes only; no monkeypatching, setattr or frame tricks; no await in except/finally.

Consume queues: per topic and queue id, a log of 20-byte entries ``(commit-log offset i64,
record size i32, tags code i64)``, one per message, that consumers address by entry number
(the queue offset). Files hold ``mappedFileSizeConsumeQueue`` bytes (300,000 entries) and live
in ``consumequeue/{topic}/{queueId}/``, named by their first byte's logical position.

A queue whose first file starts past entry 0 (its older files were deleted, or it is rebuilt
from a commit log that starts later) fills the unused head of that file with BLANK entries
``(0, 0x7FFFFFFF, 0)``; the queue's minimum offset is past them.

For delayed messages (``SCHEDULE_TOPIC_XXXX``) the tags-code slot holds the delivery time.

Files are sparse: a queue's file has blocks for the pages its entries reach plus half as much
again ahead (:func:`~.mapped_file.growth_step`, at most :data:`RESERVE_MOST`), reserved before a
put writes there (:meth:`ConsumeQueue.make_room`), so a topic of a thousand queues holding a
message each takes a page per queue, not 6 MB.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import struct
from collections.abc import Callable
from pathlib import Path

from aiorocketmq.protocol.speedups import compiled as _compiled

from .mapped_file import (
    OS_PAGE_SIZE,
    MappedFile,
    MappedFileQueue,
    allocate,
    destroy_allocated,
    growth_step,
)

log = logging.getLogger(__name__)

UNIT = 20
BLANK_SIZE = 0x7FFFFFFF
ENTRY = struct.Struct(">qiq")
#: The compiled entry writer, when active (aiorocketmq.protocol.speedups).
_put_entries = _compiled.cq_put_entries if _compiled is not None else None
_BLANK_ENTRY = ENTRY.pack(0, BLANK_SIZE, 0)
#: How many entries before its last file is full a queue starts making the next one in the
#: background (at most half a file ahead), so that rolling over rarely waits for it.
PREPARE_AHEAD = 1024
#: The most a queue's file reserves ahead of its entries (it reserves half of what it holds).
RESERVE_MOST = 1 << 20


class ConsumeQueue:
    """One topic-queue's consume queue. ``max_offset`` is one past the last entry."""

    __slots__ = (
        "topic",
        "queue_id",
        "queue",
        "file_size",
        "min_logic_offset",
        "max_offset",
        "max_physic_end",
        "spare",
        "preparing",
        "preparing_start",
        "ahead",
        "flush_due",
    )

    def __init__(
        self,
        root: Path,
        topic: str,
        queue_id: int,
        file_size: int,
        *,
        flush_due: set[MappedFileQueue] | None = None,
    ) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.file_size = file_size
        self.queue = MappedFileQueue(root / topic / str(queue_id), file_size, keep_fds=False)
        #: Byte position of the first valid entry.
        self.min_logic_offset = 0
        self.max_offset = 0
        #: End (offset + size) of the commit-log record of the last entry: dispatching a record
        #: that ends at or before it again is a no-op.
        self.max_physic_end = 0
        #: The next file, allocated by :meth:`make_room` before a put appends to the commit
        #: log, so that dispatch never needs disk space the put did not know it had.
        self.spare: MappedFile | None = None
        #: The next file being made by a worker thread (see :meth:`room_pending`), for
        #: ``preparing_start``; :meth:`make_room` takes it once it is done.
        self.preparing: concurrent.futures.Future[MappedFile] | None = None
        self.preparing_start = 0
        #: Entries before the end of the last file from which the next one is made ahead.
        self.ahead = min(PREPARE_AHEAD, file_size // UNIT // 2)
        #: Where this queue's files go once a write may have made them worth a flush (its end
        #: entered another page, or a file filled up): the store's flusher looks only there,
        #: not at every queue, between its thorough rounds.
        self.flush_due = flush_due

    # -- positions ---------------------------------------------------------------------------------

    @property
    def min_offset(self) -> int:
        return self.min_logic_offset // UNIT

    def entry(self, offset: int) -> tuple[int, int, int] | None:
        """The entry at queue offset ``offset``, if its file exists and it is written."""
        pos = offset * UNIT
        mapped = self.queue.find(pos)
        if mapped is None or pos - mapped.start + UNIT > mapped.wrote:
            return None
        offset_py, size, tags = ENTRY.unpack_from(mapped.view, pos - mapped.start)
        return offset_py, size, tags

    def index_view(self, offset: int) -> memoryview | None:
        """Entries from ``offset`` to the written end of the file holding it (never across a
        file boundary); None below the minimum or where the file is gone."""
        pos = offset * UNIT
        if pos < self.min_logic_offset:
            return None
        mapped = self.queue.find(pos)
        if mapped is None:
            return None
        start = pos - mapped.start
        if start >= mapped.wrote:
            return None
        return mapped.view[start : mapped.wrote]

    def entries(self, offset: int, max_count: int) -> list[tuple[int, int, int]]:
        """Up to ``max_count`` entries from ``offset`` on, across files; [] outside the queue."""
        result: list[tuple[int, int, int]] = []
        if offset < self.min_offset:
            return result
        while len(result) < max_count and offset < self.max_offset:
            view = self.index_view(offset)
            if view is None:
                break
            take = min(max_count - len(result), len(view) // UNIT)
            result.extend(ENTRY.iter_unpack(view[: take * UNIT]))
            offset += take
        return result

    def roll_next(self, offset: int) -> int:
        per_file = self.file_size // UNIT
        return offset + per_file - offset % per_file

    # -- writes ------------------------------------------------------------------------------------

    def _needed_file(self, count: int) -> int | None:
        """Start of the file that ``count`` more entries need and the queue does not have yet
        (its first, or the next); None when they fit in the last file."""
        last = self.queue.last
        end = (self.max_offset + count) * UNIT
        if last is not None:
            return None if end <= last.end else last.end
        return self.max_offset * UNIT - self.max_offset * UNIT % self.file_size

    def make_room(self, count: int) -> None:
        """Make sure ``count`` more entries have a place with blocks behind it (blocking: may
        make the next file, unless a worker made it already, and reserve blocks);
        :class:`~.mapped_file.DiskFullError` when the disk has no room for them."""
        last = self.queue.last
        end = (self.max_offset + count) * UNIT
        if last is not None and end - last.start <= last.reserved:
            return  # the common case, checked first
        start = self._needed_file(count)
        if start is not None:
            self._make_spare(start)
        for mapped in (last, self.spare):
            if mapped is not None and mapped.start < end and not mapped.full:
                self._reserve(mapped, min(end, mapped.end) - mapped.start)

    def _make_spare(self, start: int) -> None:
        spare = self.spare
        if spare is not None:
            if spare.start == start:
                return
            self.spare = None
            spare.destroy()
        pending = self.preparing
        if pending is not None and self.preparing_start == start and pending.done():
            self.preparing = None
            with contextlib.suppress(Exception):  # else made below, after a fresh look at the disk
                self.spare = pending.result()
                return
        self.drop_preparing()
        self.spare = allocate(
            self.queue.directory, start, self.file_size, reserve_first=OS_PAGE_SIZE, keep_fd=False
        )

    @staticmethod
    def _reserve(mapped: MappedFile, end: int) -> None:
        """Blocks in ``mapped`` up to ``end``, and half as much again ahead (at most
        :data:`RESERVE_MOST`)."""
        if end > mapped.reserved:
            mapped.ensure(end, growth_step(end, 0, RESERVE_MOST))

    def room_pending(
        self, count: int, executor: concurrent.futures.Executor
    ) -> concurrent.futures.Future[MappedFile] | None:
        """For a put of ``count`` entries that must not allocate on the event loop: None when
        they fit (or the file they need is made already), else the worker's job making that
        file (started here if it is not yet), for the put to wait on. Near the end of the last
        file this also starts making the next one, without waiting for it."""
        files = self.queue.files
        if files and (self.max_offset + count + self.ahead) * UNIT <= files[-1].end:
            return None  # the common case, checked first
        start = self._needed_file(count)
        wait = start is not None
        if start is None:
            start = files[-1].end
        spare = self.spare
        if spare is not None and spare.start == start:
            return None
        pending = self.preparing
        if pending is not None:
            if self.preparing_start == start:
                return pending if wait and not pending.done() else None
            self.drop_preparing()
        pending = executor.submit(
            allocate,
            self.queue.directory,
            start,
            self.file_size,
            reserve_first=OS_PAGE_SIZE,
            keep_fd=False,
        )
        self.preparing = pending
        self.preparing_start = start
        return pending if wait else None

    def _new_file(self, start: int) -> MappedFile:
        spare = self.spare
        if spare is not None:
            self.spare = None
            if spare.start == start:
                self.queue.adopt(spare)
                return spare
            spare.destroy()
        return self.queue.create(start)

    def _writable_file(self, expect: int) -> MappedFile:
        """The file the entry at byte position ``expect`` goes to, created if needed."""
        queue = self.queue
        mapped = queue.last
        if mapped is None:
            mapped = self._new_file(expect - expect % self.file_size)
            if expect != mapped.start:
                # A queue that starts past its first file's beginning: blank the head.
                head = expect - mapped.start
                self._reserve(mapped, head)
                mapped.view[:head] = _BLANK_ENTRY * (head // UNIT)
                mapped.wrote = head
            self.min_logic_offset = expect
            queue.flushed_where = mapped.start
        elif mapped.full:
            mapped = self._new_file(mapped.end)
        return mapped

    def put(self, offset_py: int, size: int, tags_code: int, queue_offset: int) -> None:
        """Write the entry for the record at ``offset_py`` at ``queue_offset``."""
        if offset_py + size <= self.max_physic_end:
            return  # already dispatched
        began = self.max_offset * UNIT
        expect = queue_offset * UNIT
        mapped = self._writable_file(expect)
        current = mapped.start + mapped.wrote
        if expect < current:
            return  # built before (a re-dispatch during recovery)
        while expect > current:
            log.warning(
                "consume queue %s/%d: entry %d arrives at %d; blanking the gap",
                self.topic,
                self.queue_id,
                queue_offset,
                current // UNIT,
            )
            self._reserve(mapped, mapped.wrote + UNIT)
            mapped.view[mapped.wrote : mapped.wrote + UNIT] = _BLANK_ENTRY
            mapped.wrote += UNIT
            mapped = self._writable_file(mapped.start + mapped.wrote)
            current = mapped.start + mapped.wrote
        if mapped.wrote + UNIT > mapped.reserved:
            self._reserve(mapped, mapped.wrote + UNIT)
        ENTRY.pack_into(mapped.view, mapped.wrote, offset_py, size, tags_code)
        mapped.wrote += UNIT
        self.max_physic_end = offset_py + size
        self.max_offset = queue_offset + 1
        self._note_flush_due(began, expect + UNIT, mapped)

    def put_batch(
        self, offsets: list[int], sizes: list[int], tags_codes: list[int], queue_offset: int
    ) -> None:
        """Entries for consecutive queue offsets from ``queue_offset``."""
        mapped = self.queue.last
        count = len(offsets)
        if (
            mapped is None
            or queue_offset != self.max_offset
            or mapped.wrote + count * UNIT > mapped.size
            or offsets[0] + sizes[0] <= self.max_physic_end
            or mapped.start + mapped.wrote != queue_offset * UNIT
        ):
            for i in range(count):
                self.put(offsets[i], sizes[i], tags_codes[i], queue_offset + i)
            return
        if mapped.wrote + count * UNIT > mapped.reserved:
            self._reserve(mapped, mapped.wrote + count * UNIT)
        view = mapped.view
        pos = mapped.wrote
        written = None if _put_entries is None else _put_entries(view, pos, offsets, sizes, tags_codes)
        if written is None:
            pack = ENTRY.pack_into
            for i in range(count):
                pack(view, pos, offsets[i], sizes[i], tags_codes[i])
                pos += UNIT
        else:
            pos = written
        mapped.wrote = pos
        self.max_physic_end = offsets[-1] + sizes[-1]
        self.max_offset = queue_offset + count
        self._note_flush_due(queue_offset * UNIT, mapped.start + pos, mapped)

    def _note_flush_due(self, began: int, end: int, mapped: MappedFile) -> None:
        """Entries were written from ``began`` to ``end``: if that entered another page or
        filled ``mapped``, a threshold round may now have something to flush here."""
        due = self.flush_due
        if due is not None and (began // OS_PAGE_SIZE != end // OS_PAGE_SIZE or mapped.full):
            due.add(self.queue)

    # -- recovery ----------------------------------------------------------------------------------

    def load(self) -> None:
        queue = self.queue
        queue.load()
        if not queue.files:
            return
        self.min_logic_offset = queue.files[0].start
        last = queue.files[-1]
        # Entries are written in order, so the written part is a prefix: find its end.
        view = last.view
        low, high = 0, last.size // UNIT
        while low < high:
            mid = (low + high) // 2
            if ENTRY.unpack_from(view, mid * UNIT)[1] != 0:
                low = mid + 1
            else:
                high = mid
        last.wrote = low * UNIT
        # A crash can tear the last entries; they must follow each other in the commit log.
        while last.wrote >= 2 * UNIT:
            prev_py, prev_size, _ = ENTRY.unpack_from(view, last.wrote - 2 * UNIT)
            offset_py, size, _ = ENTRY.unpack_from(view, last.wrote - UNIT)
            if prev_size == BLANK_SIZE or (
                size > 0 and size != BLANK_SIZE and offset_py >= prev_py + prev_size
            ):
                break
            last.wrote -= UNIT
        if last.wrote < last.size:
            last.zero_from(last.wrote)
        queue.flushed_where = queue.max_offset
        self._refresh_tail()

    def _refresh_tail(self) -> None:
        self.max_offset = self.queue.max_offset // UNIT
        last = self.max_offset - 1
        found = self.entry(last) if last >= self.min_offset else None
        self.max_physic_end = found[0] + found[1] if found and found[1] != BLANK_SIZE else 0

    def _first_where(self, predicate: Callable[[int, int], bool]) -> int:
        """First queue offset in [min, max) whose entry satisfies ``predicate(offset_py, size)``
        (which must hold for a suffix of the queue); ``max_offset`` if none does."""
        low, high = self.min_offset, self.max_offset
        while low < high:
            mid = (low + high) // 2
            found = self.entry(mid)
            if found is None or predicate(found[0], found[1]):
                high = mid
            else:
                low = mid + 1
        return low

    def first_at_or_past(self, offset_py: int) -> int:
        """First queue offset whose record starts at or past commit-log offset ``offset_py``."""
        return self._first_where(lambda py, size: size != BLANK_SIZE and py >= offset_py)

    def truncate_from_physical(self, offset_py: int) -> list[MappedFile]:
        """Drop the entries of records ending past ``offset_py`` (and any zero entries among
        them); returns emptied files for the caller to destroy."""

        def after(entry_py: int, size: int) -> bool:
            return size == 0 or (size != BLANK_SIZE and entry_py + size > offset_py)

        cut = self._first_where(after)
        if cut >= self.max_offset:
            return []
        # Recovery writes these entries again: their blocks stay (a full disk has no others).
        removed = self.queue.truncate(cut * UNIT, keep_blocks=True)
        if not self.queue.files:
            self.min_logic_offset = cut * UNIT
        self._refresh_tail()
        return removed

    # -- retention -------------------------------------------------------------------------------

    def delete_expired(self, commit_log_min: int) -> list[MappedFile]:
        """Drop whole files (never the last) whose entries all point below ``commit_log_min``,
        then move the minimum offset past the entries that do; returns the dropped files."""
        queue = self.queue
        removed = []
        while len(queue.files) > 1:
            first = queue.files[0]
            last_py, size, _ = ENTRY.unpack_from(first.view, first.size - UNIT)
            if size == BLANK_SIZE or last_py >= commit_log_min:
                break
            removed.append(queue.files.pop(0))
        self.correct_min_offset(commit_log_min)
        return removed

    def correct_min_offset(self, commit_log_min: int) -> None:
        """The minimum is the first entry whose record is still in the commit log."""
        if self.queue.files:
            self.min_logic_offset = max(self.min_logic_offset, self.queue.files[0].start)
        found = self._first_where(lambda py, size: size != BLANK_SIZE and py >= commit_log_min)
        self.min_logic_offset = found * UNIT

    def drop_preparing(self) -> None:
        """Give up the file a worker is making (it is deleted once made)."""
        pending, self.preparing = self.preparing, None
        if pending is not None:
            pending.add_done_callback(destroy_allocated)

    def close(self) -> None:
        self.drop_preparing()
        spare, self.spare = self.spare, None
        if spare is not None:
            spare.destroy()
        self.queue.close()
