"""Compiled with mypyc (aiorocketmq/compiled.py, which lists the rules): declared, typed
attributes only; no monkeypatching, setattr or frame tricks; no await in except/finally.

The message index: find messages by key (``topic#KEYS`` item, ``topic#UNIQ_KEY``) within a
time range, for QUERY_MESSAGE.

Index files (``index/{yyyyMMddHHmmssSSS}``, named at creation) are hash tables with chaining:
a 40-byte header (begin/end store timestamp, begin/end commit-log offset, used slots, entry
count starting at 1), ``maxHashSlotNum`` 4-byte slots holding the newest entry number of their
bucket, then ``maxIndexNum`` 20-byte entries ``(key hash i32, commit-log offset i64, seconds
since the file's begin timestamp i32, previous entry of the bucket i32)``.

Each key writes its entry first and then points the slot at it; the header is written after
each dispatched batch.

A file is sparse: the header and the slots (written anywhere, as keys hash) get their blocks when
the file is made, the entries a stretch at a time ahead of the count (:attr:`IndexFile.capacity`,
half as many again as it holds, at least :data:`RESERVE_LEAST` bytes). The index is best effort
under a full disk: a key that finds no room is counted (:attr:`Index.missed_keys`) and logged,
and the message it belongs to is stored all the same. Recovery rolls entries back newest-first (restoring each slot to the
entry's predecessor, which is exactly the slot's earlier value) down to the point it
re-dispatches from, including entries a crash left beyond the header's count.
"""

from __future__ import annotations

import contextlib
import logging
import mmap
import os
import struct
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from aiorocketmq.protocol.message import KEY_SEPARATOR, java_hash_fast
from aiorocketmq.protocol.speedups import compiled as _compiled

from .mapped_file import (
    DiskFullError,
    StoreError,
    check_space,
    fill_holes,
    growth_step,
    page_ceil,
    release_tail,
    reserve,
    sync_directory,
)

log = logging.getLogger(__name__)

HEADER_SIZE = 40
_HEADER = struct.Struct(">qqqqii")
_SLOT = struct.Struct(">i")
_ENTRY = struct.Struct(">iqii")
ENTRY_SIZE = 20
_ZERO_ENTRY = bytes(ENTRY_SIZE)
_TX_ROLLBACK = 0xC
_INT_MAX = 0x7FFFFFFF
#: The compiled index writer, when active (aiorocketmq.protocol.speedups).
_index_put_many = _compiled.index_put_many if _compiled is not None else None
_index_build_batch = _compiled.index_build_batch if _compiled is not None else None
#: The least and most an index file reserves for entries ahead of its count, in bytes.
RESERVE_LEAST = 256 << 10
RESERVE_MOST = 4 << 20
#: After the disk refused an index file room, how long keys are counted as missed before the
#: index asks the disk again (each ask is a system call, and a full disk refuses them all).
RETRY_AFTER_NS = 1_000_000_000


def key_hash(key: str) -> int:
    """Java's ``Math.abs(key.hashCode())``, with ``Integer.MIN_VALUE`` mapped to 0."""
    h = java_hash_fast(key)
    if h >= 0:
        return h
    return 0 if h == -0x80000000 else -h


class _Keyed(Protocol):
    @property
    def keys(self) -> str | None: ...
    @property
    def uniq_key(self) -> str | None: ...
    @property
    def sys_flag(self) -> int: ...


def _file_name(now_ms: int) -> str:
    seconds, millis = divmod(now_ms, 1000)
    return time.strftime("%Y%m%d%H%M%S", time.localtime(seconds)) + f"{millis:03d}"


class IndexFile:
    """One index file, mapped in full (sparse; see the module's notes on reservation)."""

    __slots__ = (
        "path",
        "slot_num",
        "index_num",
        "fd",
        "mm",
        "view",
        "begin_timestamp",
        "end_timestamp",
        "begin_phy_offset",
        "end_phy_offset",
        "hash_slot_count",
        "index_count",
        "reserved",
        "capacity",
        "header_held",
        "dirty",
        "dir_synced",
        "closed",
    )

    def __init__(self, path: Path, slot_num: int, index_num: int, *, create: bool = False) -> None:
        self.path = path
        self.slot_num = slot_num
        self.index_num = index_num
        size = HEADER_SIZE + slot_num * 4 + index_num * ENTRY_SIZE
        first = min(size, page_ceil(self._entry_pos(1) + RESERVE_LEAST))
        if create:
            check_space(path.parent, first)
        fd = os.open(path, os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0), 0o644)
        try:
            actual = os.fstat(fd).st_size
            if not create and actual != size:
                if actual > size:
                    raise StoreError(
                        f"index file {path} has {actual} bytes, not {size}: maxHashSlotNum or maxIndexNum changed"
                    )
                os.ftruncate(fd, size)
            elif create:
                os.ftruncate(fd, size)
                # Header and slots first: every key may write any slot.
                reserve(fd, 0, first, path)
            self.mm = mmap.mmap(fd, size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)
        except BaseException:
            os.close(fd)
            if create:
                with contextlib.suppress(OSError):
                    os.unlink(path)
            raise
        self.fd = fd
        self.view = memoryview(self.mm)
        (
            self.begin_timestamp,
            self.end_timestamp,
            self.begin_phy_offset,
            self.end_phy_offset,
            self.hash_slot_count,
            self.index_count,
        ) = _HEADER.unpack_from(self.view, 0)
        if self.index_count <= 0:
            self.index_count = 1
        #: Bytes from the start with blocks for certain, and the entry count they allow. A
        #: loaded file has none for certain until its first :meth:`grow` (after recovery, when
        #: its count is known): no key goes in before.
        self.reserved = 0
        self.capacity = 0
        #: Whether the header's page holds data (so has its blocks) though nothing is reserved.
        self.header_held = any(self.view[:HEADER_SIZE])
        if create:
            self._reserved_to(first)
        self.dirty = create
        self.dir_synced = not create
        self.closed = False

    def _reserved_to(self, end: int) -> None:
        self.reserved = end
        self.capacity = min(self.index_num, max(0, (end - self._entry_pos(0)) // ENTRY_SIZE))

    def grow(self, keys: int) -> None:
        """Reserve blocks for ``keys`` more entries past the count, and a stretch ahead (half
        as many again as the file holds, within [RESERVE_LEAST, RESERVE_MOST] bytes);
        :class:`DiskFullError` when the disk has no room. Blocking: zeros written past the
        count, and the first time for a loaded file, into the holes among its slots."""
        count_end = self._entry_pos(self.index_count)
        end = self._entry_pos(min(self.index_num, self.index_count + keys))
        held = end - self._entry_pos(0)
        target = min(len(self.mm), page_ceil(end + growth_step(held, RESERVE_LEAST, RESERVE_MOST)))
        if target <= self.reserved:
            return
        begin = self.reserved
        if begin < count_end:
            # A loaded file: its slots may have holes (any key may write any of them); its
            # entries up to the count are data, never written again (nor overwritten by zeros).
            fill_holes(self.fd, 0, count_end, self.path)
            begin = count_end
        reserve(self.fd, begin, target - begin, self.path)
        self._reserved_to(target)

    @property
    def full(self) -> bool:
        return self.index_count >= self.index_num

    @property
    def empty(self) -> bool:
        return self.index_count <= 1

    def _entry_pos(self, number: int) -> int:
        return HEADER_SIZE + self.slot_num * 4 + number * ENTRY_SIZE

    def put_key(self, key: str, phy_offset: int, store_timestamp: int) -> bool:
        """Add one key; False when the file is full. The header is written by :meth:`write_header`."""
        if _index_put_many is not None:
            done = self._put_compiled([(key, phy_offset, store_timestamp)], 0)
            if done is not None:
                return done == 1
        count = self.index_count
        if count >= self.capacity:
            return False
        h = java_hash_fast(key)
        if h < 0:  # Java: Math.abs, and 0 for Integer.MIN_VALUE
            h = 0 if h == -0x80000000 else -h
        slot_pos = HEADER_SIZE + (h % self.slot_num) * 4
        view = self.view
        (prev,) = _SLOT.unpack_from(view, slot_pos)
        if prev <= 0 or prev > count:
            prev = 0
            self.hash_slot_count += 1
        begin = self.begin_timestamp
        if begin <= 0:
            diff = 0
            if count <= 1:
                self.begin_phy_offset = phy_offset
                self.begin_timestamp = store_timestamp
        elif store_timestamp <= begin:
            diff = 0
        else:
            diff = min((store_timestamp - begin) // 1000, _INT_MAX)
        _ENTRY.pack_into(
            view, HEADER_SIZE + self.slot_num * 4 + count * ENTRY_SIZE, h, phy_offset, diff, prev
        )
        _SLOT.pack_into(view, slot_pos, count)
        self.index_count = count + 1
        self.end_phy_offset = phy_offset
        self.end_timestamp = store_timestamp
        self.dirty = True
        return True

    def put_many(self, items: Sequence[tuple[str, int, int]], start: int) -> int:
        """:meth:`put_key` for ``items[start:]`` (key, commit-log offset, store time) until the
        file is full; returns how many went in."""
        if _index_put_many is not None:
            done = self._put_compiled(items, start)
            if done is not None:
                return done
        return self.put_many_pure(items, start)

    def _put_compiled(self, items: Sequence[tuple[str, int, int]], start: int) -> int | None:
        """:meth:`put_many` by the compiled codecs; None for the pure code to decide."""
        assert _index_put_many is not None
        result = _index_put_many(
            self.view, items, start, self.index_count, self.capacity, self.slot_num, self.begin_timestamp
        )
        return None if result is None else self._took(result)

    def put_batch_compiled(
        self, topic: str, msgs: Sequence[_Keyed], offsets: Sequence[int], stamps: Sequence[int], end_phy: int
    ) -> int | None:
        """The keys of a batch (as :meth:`Index.build_batch` picks them) by the compiled
        codecs, all into this file; how many went in, or None for the caller's own loop (keys
        that do not all fit here; offsets or times not in lists, or a value the compiled code
        leaves to the pure one)."""
        assert _index_build_batch is not None
        result = _index_build_batch(
            self.view,
            topic,
            msgs,
            offsets,
            stamps,
            end_phy,
            self.index_count,
            self.capacity,
            self.slot_num,
            self.begin_timestamp,
        )
        return None if result is None else self._took(result)

    def _took(self, result: tuple[int, int, int | None, int, int, int]) -> int:
        """Header fields after the compiled code wrote ``result[0]`` entries."""
        done, used_slots, begin_phy_offset, begin_timestamp, end_phy_offset, end_timestamp = result
        if done:
            if begin_phy_offset is not None:
                self.begin_phy_offset = begin_phy_offset
                self.begin_timestamp = begin_timestamp
            self.hash_slot_count += used_slots
            self.index_count += done
            self.end_phy_offset = end_phy_offset
            self.end_timestamp = end_timestamp
            self.dirty = True
        return done

    def put_many_pure(self, items: Sequence[tuple[str, int, int]], start: int) -> int:
        """:meth:`put_many` in pure Python (what runs without the compiled codecs)."""
        count = self.index_count
        room = self.capacity - count
        if room <= 0:
            return 0
        chunk = items[start : start + room]
        view = self.view
        slot_num = self.slot_num
        entries = HEADER_SIZE + slot_num * 4
        unpack_slot = _SLOT.unpack_from
        pack_slot = _SLOT.pack_into
        pack_entry = _ENTRY.pack_into
        used_slots = 0
        begin = self.begin_timestamp
        phy_offset = store_timestamp = 0
        hash_key = java_hash_fast
        entry_pos = entries + count * ENTRY_SIZE
        for key, phy_offset, store_timestamp in chunk:
            h = hash_key(key)
            if h < 0:  # Java: Math.abs, and 0 for Integer.MIN_VALUE
                h = 0 if h == -0x80000000 else -h
            slot_pos = 40 + (h % slot_num) * 4  # HEADER_SIZE
            (prev,) = unpack_slot(view, slot_pos)
            if prev <= 0 or prev > count:
                prev = 0
                used_slots += 1
            if begin <= 0:
                diff = 0
                if count <= 1:
                    self.begin_phy_offset = phy_offset
                    self.begin_timestamp = begin = store_timestamp
            elif store_timestamp <= begin:
                diff = 0
            else:
                diff = (store_timestamp - begin) // 1000
                if diff > 0x7FFFFFFF:
                    diff = 0x7FFFFFFF
            pack_entry(view, entry_pos, h, phy_offset, diff, prev)
            pack_slot(view, slot_pos, count)
            count += 1
            entry_pos += 20  # ENTRY_SIZE
        if chunk:
            self.hash_slot_count += used_slots
            self.index_count = count
            self.end_phy_offset = phy_offset
            self.end_timestamp = store_timestamp
            self.dirty = True
        return len(chunk)

    def write_header(self) -> None:
        if self.reserved < HEADER_SIZE and not self.header_held:
            return  # its page may be a hole, and nothing was added since (that needs a grow)
        _HEADER.pack_into(
            self.view,
            0,
            self.begin_timestamp,
            self.end_timestamp,
            self.begin_phy_offset,
            self.end_phy_offset,
            self.hash_slot_count,
            self.index_count,
        )

    def time_matches(self, begin: int, end: int) -> bool:
        b, e = self.begin_timestamp, self.end_timestamp
        return (begin < b and end > e) or b <= begin <= e or b <= end <= e

    def select(self, key: str, max_num: int, begin: int, end: int, found: list[int]) -> None:
        """Append to ``found`` the commit-log offsets of entries with this key's hash stored
        within [begin, end], newest first, until ``found`` holds ``max_num``."""
        count = self.index_count
        if count <= 1:
            return
        h = key_hash(key)
        view = self.view
        (number,) = _SLOT.unpack_from(view, HEADER_SIZE + (h % self.slot_num) * 4)
        if number <= 0 or number > count:
            return
        base = self.begin_timestamp
        while len(found) < max_num:
            hash_read, phy, diff, prev = _ENTRY.unpack_from(view, self._entry_pos(number))
            if diff < 0:
                break
            stamp = base + diff * 1000
            if hash_read == h and begin <= stamp <= end:
                found.append(phy)
            if prev <= 0 or prev > count or prev == number or stamp < begin:
                break
            number = prev

    def roll_back(self, phy_offset: int) -> int:
        """Remove the entries of records at or past ``phy_offset`` (newest first, including any
        written past the header's count); returns how many were removed."""
        view = self.view
        count = counted = self.index_count
        if count > 1 and self.begin_phy_offset >= phy_offset:
            # Everything goes: empty the file at once (a hole) instead of entry by entry.
            removed = count - 1
            release_tail(self.fd, 0, self.path)
            self._reserved_to(0)
            self.header_held = False
            self.index_count = 1
            self.begin_timestamp = self.end_timestamp = 0
            self.begin_phy_offset = self.end_phy_offset = 0
            self.hash_slot_count = 0
            self.write_header()
            self.dirty = True
            return removed
        while count < self.index_num:
            pos = self._entry_pos(count)
            if view[pos : pos + ENTRY_SIZE] == _ZERO_ENTRY:
                break
            count += 1
        removed = 0
        while count > 1:
            number = count - 1
            pos = self._entry_pos(number)
            h, phy, _diff, prev = _ENTRY.unpack_from(view, pos)
            if phy < phy_offset and view[pos : pos + ENTRY_SIZE] != _ZERO_ENTRY:
                break
            slot_pos = HEADER_SIZE + (max(h, 0) % self.slot_num) * 4
            (slot,) = _SLOT.unpack_from(view, slot_pos)
            if slot == number:
                _SLOT.pack_into(view, slot_pos, prev if 0 < prev < number else 0)
                if prev <= 0 and number < counted:  # entries past the header were never counted
                    self.hash_slot_count = max(0, self.hash_slot_count - 1)
            view[pos : pos + ENTRY_SIZE] = _ZERO_ENTRY
            count -= 1
            removed += 1
        self.index_count = count
        if count <= 1:
            self.begin_timestamp = self.end_timestamp = 0
            self.begin_phy_offset = self.end_phy_offset = 0
            self.hash_slot_count = 0
        else:
            _h, phy, diff, _prev = _ENTRY.unpack_from(view, self._entry_pos(count - 1))
            self.end_phy_offset = phy
            self.end_timestamp = max(self.begin_timestamp + diff * 1000, self.begin_timestamp)
        self.write_header()
        self.dirty = True
        return removed

    def sync(self) -> None:
        """Blocking: force the file (and, the first time, its directory entry) to disk."""
        if self.closed:
            return
        try:
            os.fdatasync(self.fd)
        except OSError:
            if self.closed:
                return
            raise
        if not self.dir_synced:
            sync_directory(self.path.parent)
            self.dir_synced = True

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.view.release()
        with contextlib.suppress(BufferError):
            self.mm.close()
        with contextlib.suppress(OSError):
            os.close(self.fd)

    def destroy(self) -> None:
        self.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)


class Index:
    """The index files of a store, oldest first; the last one takes new keys."""

    def __init__(self, directory: Path, slot_num: int, index_num: int) -> None:
        self.directory = directory
        self.slot_num = slot_num
        self.index_num = index_num
        self.files: list[IndexFile] = []
        #: Keys not indexed because the disk had no room for them (their messages are stored).
        self.missed_keys = 0
        #: When the disk last refused room (monotonic ns; 0: it has not since it last gave it).
        self._refused_at = 0
        self._refusal_logged = -(1 << 62)

    def load(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        names = sorted(
            e.name
            for e in os.scandir(self.directory)
            if e.is_file() and e.name.isdigit() and len(e.name) == 17
        )
        for name in names:
            self.files.append(IndexFile(self.directory / name, self.slot_num, self.index_num))

    def _create(self, now_ms: int) -> IndexFile:
        stamp = now_ms
        while True:
            path = self.directory / _file_name(stamp)
            if not path.exists():
                break
            stamp += 1
        created = IndexFile(path, self.slot_num, self.index_num, create=True)
        self.files.append(created)
        return created

    def _writable(self, now_ms: int, keys: int = 1) -> IndexFile | None:
        """The file the next ``keys`` keys go to, with room for one at least (growing the last
        one or starting the next); None when the disk has no room for it."""
        last = self.files[-1] if self.files else None
        if last is not None and last.index_count < last.capacity:
            return last
        if self._refused_at and time.monotonic_ns() - self._refused_at < RETRY_AFTER_NS:
            return None
        try:
            if last is not None and not last.full:
                last.grow(keys)
                writable = last
            else:
                if last is not None:
                    last.write_header()
                writable = self._create(now_ms)
        except DiskFullError as exc:
            self._refused(exc)
            return None
        if self._refused_at:
            self._refused_at = 0
            log.warning("index: keys are indexed again (%d keys went unindexed so far)", self.missed_keys)
        return writable

    def _refused(self, exc: DiskFullError) -> None:
        self._refused_at = time.monotonic_ns()
        if self._refused_at - self._refusal_logged >= 60 * RETRY_AFTER_NS:
            self._refusal_logged = self._refused_at
            log.warning(
                "index: no room on the disk for more keys (%s); messages are still stored, but "
                "their keys are not indexed until space returns (%d keys unindexed so far)",
                exc,
                self.missed_keys,
            )

    def _missed(self, keys: int) -> None:
        self.missed_keys += keys

    def build(
        self,
        topic: str,
        phy_offset: int,
        store_timestamp: int,
        sys_flag: int,
        keys: str | None,
        uniq_key: str | None,
    ) -> IndexFile | None:
        """Index one message's keys (not rolled-back transaction messages, nor messages already
        indexed); returns the file written, whose header the caller writes once per batch.
        Keys that find no room on the disk are counted in :attr:`missed_keys`."""
        if (not keys and not uniq_key) or sys_flag & _TX_ROLLBACK == _TX_ROLLBACK:
            return None
        last = self.files[-1] if self.files else None
        if last is not None and last.index_count > 1 and phy_offset <= last.end_phy_offset:
            return None
        index = self._writable(store_timestamp)
        written = None
        if uniq_key:
            index = self._put(index, f"{topic}#{uniq_key}", phy_offset, store_timestamp)
            if index is not None:
                written = index
        if keys:
            for key in keys.split(KEY_SEPARATOR):
                if key:
                    index = self._put(index, f"{topic}#{key}", phy_offset, store_timestamp)
                    if index is not None:
                        written = index
        return written

    def _put(
        self, index: IndexFile | None, key: str, phy_offset: int, store_timestamp: int
    ) -> IndexFile | None:
        """One key into ``index``, or the next writable file; None (the key counted as missed)
        when there is no room for it."""
        if index is not None and index.put_key(key, phy_offset, store_timestamp):
            return index
        index = self._writable(store_timestamp)
        if index is None or not index.put_key(key, phy_offset, store_timestamp):
            self._missed(1)
            return None
        return index

    def build_batch(
        self, topic: str, msgs: Sequence[_Keyed], offsets: Sequence[int], stamps: Sequence[int]
    ) -> bool:
        """:meth:`build` for each message of a batch, writing the header once; True if the
        batch had keys to index (indexed, or counted as missed for lack of room)."""
        last = self.files[-1] if self.files else None
        index = last if last is not None and last.index_count < last.capacity else None
        if _index_build_batch is not None and index is not None:
            end_phy = index.end_phy_offset if index.index_count > 1 else -1
            done = index.put_batch_compiled(topic, msgs, offsets, stamps, end_phy)
            if done is not None:
                if done:
                    index.write_header()
                return done > 0
        end_phy = last.end_phy_offset if last is not None and last.index_count > 1 else -1
        items: list[tuple[str, int, int]] = []
        for i, msg in enumerate(msgs):
            keys = msg.keys
            uniq_key = msg.uniq_key
            if (not keys and not uniq_key) or msg.sys_flag & _TX_ROLLBACK == _TX_ROLLBACK:
                continue
            phy_offset = offsets[i]
            if phy_offset <= end_phy:
                continue
            if uniq_key:
                items.append((f"{topic}#{uniq_key}", phy_offset, stamps[i]))
            if keys:
                for key in keys.split(KEY_SEPARATOR):
                    if key:
                        items.append((f"{topic}#{key}", phy_offset, stamps[i]))
        if items:
            self.put_items(items)
        return bool(items)

    def put_items(self, items: Sequence[tuple[str, int, int]]) -> None:
        """Index ``(full key, commit-log offset, store time)`` items in order, growing the last
        file or rolling to new ones as they fill; the header of the last file written is
        written once at the end (a crash before that leaves entries past the header's count,
        which recovery finds). Items that find no room on the disk are counted as missed."""
        index = self._writable(items[0][2], len(items))
        done = 0
        written = None
        while index is not None:
            done += index.put_many(items, done)
            written = index
            if done >= len(items):
                break
            index = self._writable(items[done][2], len(items) - done)
        if done < len(items):
            self._missed(len(items) - done)
        if written is not None:
            written.write_header()

    def query(self, topic: str, key: str, max_num: int, begin: int, end: int) -> tuple[list[int], int, int]:
        """Commit-log offsets (newest first) of messages indexed under ``topic#key`` and stored
        within [begin, end], plus the last file's end timestamp and end offset."""
        found: list[int] = []
        last_ts = last_phy = 0
        full_key = f"{topic}#{key}"
        for i in range(len(self.files) - 1, -1, -1):
            index = self.files[i]
            if i == len(self.files) - 1:
                last_ts, last_phy = index.end_timestamp, index.end_phy_offset
            if index.time_matches(begin, end):
                index.select(full_key, max_num, begin, end, found)
            if index.begin_timestamp < begin or len(found) >= max_num:
                break
        return found, last_ts, last_phy

    def roll_back(self, phy_offset: int) -> None:
        """Forget everything indexed for records at or past ``phy_offset`` (recovery)."""
        while self.files:
            last = self.files[-1]
            last.roll_back(phy_offset)
            if not last.empty or len(self.files) == 1:
                break
            self.files.pop().destroy()
            # The file before may also hold entries past the point.
        for index in self.files:
            index.write_header()

    def delete_expired(self, commit_log_min: int) -> list[IndexFile]:
        """Files (never the last) whose entries all point below ``commit_log_min``."""
        removed = []
        while len(self.files) > 1 and self.files[0].end_phy_offset < commit_log_min:
            removed.append(self.files.pop(0))
        return removed

    def dirty_files(self) -> list[IndexFile]:
        """Files changed since the last call (their headers written, ready to be synced)."""
        dirty = []
        for index in self.files:
            if index.dirty:
                index.write_header()
                index.dirty = False
                dirty.append(index)
        return dirty

    def full_file_dirty(self) -> bool:
        """Whether a file that took its last key (any but the newest) has changes not yet
        synced: the flusher syncs it at once rather than at the end of its sweep."""
        return any(index.dirty for index in self.files[:-1])

    @property
    def last_timestamp(self) -> int:
        """End timestamp of the newest entry; 0 without entries."""
        return self.files[-1].end_timestamp if self.files else 0

    def close(self) -> None:
        for index in self.files:
            index.write_header()
            index.close()
