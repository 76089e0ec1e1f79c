"""Compiled with mypyc (aiorocketmq/compiled.py, which lists the rules): declared, typed
attributes only; no monkeypatching, setattr or frame tricks; no await in except/finally.

Reading: a pull's records (:meth:`Reader.get_messages`), a queue's offsets and store times,
single records by commit-log offset, consume-queue entries, and messages by key.

Apart from the writing side because nothing here changes the store: it answers from the
mapped files on the event loop. ``get_messages`` is the pull path: one call per request that
walks the queue's entries itself (a struct unpack per entry, the needle search in place), so
a pull costs no call per message.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from aiorocketmq.protocol.errors import ProtocolError
from aiorocketmq.protocol.message import (
    KEY_SEPARATOR,
    MessageExt,
    PropertyKey,
    decode_properties,
    decode_record,
    read_record_header,
)

from .commit_log import CommitLog
from .config import StoreConfig
from .consume_queue import BLANK_SIZE, UNIT, ConsumeQueue
from .index import Index
from .messages import GetResult, GetStatus, QueryResult
from .queues import QueueRegistry
from .store_stats import StoreStats

_INT32_MIN = -0x80000000
_INT32_MAX = 0x7FFFFFFF
_ENTRIES = struct.Struct(">qiq").iter_unpack
#: getMessage scans at most max(16000 bytes of entries, max_count entries).
_MIN_SCAN_ENTRIES = 16000 // UNIT
#: How far ahead one search for a record filter's needles looks.
_NEEDLE_STRETCH = 256 * 1024


class Reader:
    """The store's reads (the store checks it is running first where that matters)."""

    def __init__(
        self,
        config: StoreConfig,
        commit_log: CommitLog,
        queues: QueueRegistry,
        index: Index | None,
        stats: StoreStats,
        *,
        correct_offsets: bool,
    ) -> None:
        self._config = config
        self._commit_log = commit_log
        self._queues = queues
        self._index = index
        self._stats = stats
        #: Whether a miss moves the next offset back into the queue (not on a slave unless
        #: ``offsetCheckInSlave``).
        self._correct_offsets = correct_offsets
        self._hot_bytes = config.hot_data_bytes

    # -- get -------------------------------------------------------------------------------------

    def get_messages(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        max_count: int,
        tag_codes: frozenset[int] | None = None,
        record_filter: Callable[[memoryview], bool] | None = None,
    ) -> GetResult:
        """Up to ``max_count`` records of a queue from ``offset`` whose tags code is in
        ``tag_codes`` (None: all) and that ``record_filter`` (given the record's bytes) keeps,
        capped per call by count and bytes (hot or cold data). A filter with a ``needles``
        attribute (byte strings one of which every record it keeps contains) is spared the
        records that contain none: the mapped file is searched in place, nothing is copied."""
        queues = self._queues.by_topic.get(topic)
        cq = queues.get(queue_id) if queues is not None else None
        commit_log = self._commit_log
        max_phy = commit_log.queue.max_offset
        correct = self._correct_offsets
        if cq is None:
            min_offset = max_offset = 0
        else:
            min_offset = cq.min_logic_offset // UNIT
            max_offset = cq.max_offset
        if max_offset == 0:
            return self._miss(GetStatus.NO_MESSAGE_IN_QUEUE, 0 if correct else offset, min_offset, max_offset)
        if offset < min_offset:
            return self._miss(
                GetStatus.OFFSET_TOO_SMALL, min_offset if correct else offset, min_offset, max_offset
            )
        if offset == max_offset:
            return self._miss(GetStatus.OFFSET_OVERFLOW_ONE, offset, min_offset, max_offset)
        if offset > max_offset:
            # Back to the end of the queue, as Apache's 4.9.7 store does (older 4.x releases
            # went back to 0 when the queue still started there).
            nxt = max_offset if correct else offset
            return self._miss(GetStatus.OFFSET_OVERFLOW_BADLY, nxt, min_offset, max_offset)
        assert cq is not None
        view = cq.index_view(offset)
        if view is None:
            nxt = cq.roll_next(offset) if correct else offset
            return self._miss(GetStatus.OFFSET_FOUND_NULL, nxt, min_offset, max_offset)

        config = self._config
        hot = self._hot_bytes
        if max_count <= 0:
            max_count = 1
        mem_bytes = config.max_transfer_bytes_on_message_in_memory
        mem_count = config.max_transfer_count_on_message_in_memory
        disk_bytes = config.max_transfer_bytes_on_message_in_disk
        disk_count = config.max_transfer_count_on_message_in_disk
        files = commit_log.queue.files
        nfiles = len(files)
        first_start = files[0].start if files else 0
        file_size = commit_log.file_size
        scan = min(len(view) // UNIT, max(_MIN_SCAN_ENTRIES, max_count))
        buffers: list[bytes | memoryview] = []
        status = GetStatus.NO_MATCHED_MESSAGE
        total = 0
        count = 0
        skip_below = -1
        max_phy_pulling = 0
        consumed = scan
        needles: tuple[bytes, ...] = (
            getattr(record_filter, "needles", ()) if record_filter is not None else ()
        )
        # Where the next needle occurrence starts (or where the last search ended without one).
        hit = -1
        for i, (offset_py, size_py, code) in enumerate(_ENTRIES(view[: scan * UNIT])):
            max_phy_pulling = offset_py
            if offset_py < skip_below:
                continue
            if count:
                if count >= max_count:
                    consumed = i
                    break
                if max_phy - offset_py > hot:
                    if total + size_py > disk_bytes or count >= disk_count:
                        consumed = i
                        break
                elif total + size_py > mem_bytes or count >= mem_count:
                    consumed = i
                    break
            if (
                tag_codes is not None
                and code not in tag_codes
                # Java compares (int) tagsCode: wrap codes wider than 32 bits.
                and (
                    _INT32_MIN <= code <= _INT32_MAX
                    or ((code - _INT32_MIN) & 0xFFFFFFFF) + _INT32_MIN not in tag_codes
                )
            ):
                if not count:
                    status = GetStatus.NO_MATCHED_MESSAGE
                continue
            if needles and hit >= offset_py + size_py:
                # The last search found no needle before this record's end: it cannot match.
                if not count:
                    status = GetStatus.NO_MATCHED_MESSAGE
                skip_below = -1
                continue
            if size_py == BLANK_SIZE:
                continue  # a placeholder entry, no message behind it
            index = (offset_py - first_start) // file_size
            if 0 <= index < nfiles:
                mapped = files[index]
                pos = offset_py - mapped.start
                if pos + size_py <= mapped.wrote:
                    if needles and hit < offset_py:
                        # One search ahead covers every record up to the next occurrence.
                        first = min(mapped.wrote, pos + _NEEDLE_STRETCH)
                        find = mapped.mm.find
                        for needle in needles:
                            at = find(needle, pos, first)
                            if at >= 0:
                                first = at
                        hit = mapped.start + first
                        if hit >= offset_py + size_py:
                            if not count:
                                status = GetStatus.NO_MATCHED_MESSAGE
                            skip_below = -1
                            continue
                    record = mapped.view[pos : pos + size_py]
                    if record_filter is not None and not record_filter(record):
                        if not count:
                            status = GetStatus.NO_MATCHED_MESSAGE
                        skip_below = -1
                        continue
                    buffers.append(record)
                    total += size_py
                    count += 1
                    status = GetStatus.FOUND
                    skip_below = -1
                    continue
            # The record's commit-log file is gone: skip what else pointed into it.
            if not count:
                status = GetStatus.MESSAGE_WAS_REMOVING
            skip_below = commit_log.roll_next(offset_py)
        stats = self._stats
        if count:
            stats.get_message_times_found += 1
            stats.get_message_transferred += count
        else:
            stats.get_message_times_miss += 1
        return GetResult(
            status,
            offset + consumed,
            min_offset,
            max_offset,
            buffers,
            count,
            total,
            max_phy - max_phy_pulling > hot,
        )

    def _miss(self, status: GetStatus, next_offset: int, min_offset: int, max_offset: int) -> GetResult:
        self._stats.get_message_times_miss += 1
        return GetResult(status, next_offset, min_offset, max_offset)

    # -- offsets and times -----------------------------------------------------------------------

    def get_max_offset(self, topic: str, queue_id: int) -> int:
        """One past the last entry; 0 for unknown queues."""
        cq = self._queues.get(topic, queue_id)
        return cq.max_offset if cq is not None else 0

    def get_min_offset(self, topic: str, queue_id: int) -> int:
        cq = self._queues.get(topic, queue_id)
        return cq.min_offset if cq is not None else 0

    def get_offset_by_time(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """The first queue offset whose message was stored at or after ``timestamp_ms``; the max
        offset if every message is older (binary search over the queue)."""
        cq = self._queues.get(topic, queue_id)
        if cq is None:
            return 0
        low, high = cq.min_offset, cq.max_offset
        while low < high:
            mid = (low + high) // 2
            if self._entry_store_time(cq, mid) >= timestamp_ms:
                high = mid
            else:
                low = mid + 1
        return low

    def _entry_store_time(self, cq: ConsumeQueue, offset: int) -> int:
        entry = cq.entry(offset)
        if entry is None or entry[1] == BLANK_SIZE:
            return -1
        return self._commit_log.store_timestamp_at(entry[0])

    def get_earliest_store_time(self, topic: str, queue_id: int) -> int:
        """Store time of the queue's first message; -1 if none."""
        cq = self._queues.get(topic, queue_id)
        if cq is None or cq.min_offset >= cq.max_offset:
            return -1
        return self._entry_store_time(cq, cq.min_offset)

    def get_store_time(self, topic: str, queue_id: int, offset: int) -> int:
        """Store time of the message at ``offset``; -1 if there is none."""
        cq = self._queues.get(topic, queue_id)
        if cq is None or not cq.min_offset <= offset < cq.max_offset:
            return -1
        return self._entry_store_time(cq, offset)

    # -- records ---------------------------------------------------------------------------------

    def read_record(
        self, commit_log_offset: int, size: int | None = None, *, check_crc: bool = False
    ) -> bytes | None:
        """The stored record at ``commit_log_offset`` (a copy); None if gone, not a record, or
        (with ``check_crc``) its body fails the CRC."""
        view = self._commit_log.record_at(commit_log_offset, size, check_crc=check_crc)
        return bytes(view) if view is not None else None

    def look_message(self, commit_log_offset: int, *, check_crc: bool = False) -> MessageExt | None:
        """The decoded message at ``commit_log_offset``; None as for :meth:`read_record`."""
        view = self._commit_log.record_at(commit_log_offset, check_crc=check_crc)
        if view is None:
            return None
        try:
            return decode_record(view)[0]
        except ProtocolError:
            return None

    def read_consume_queue(
        self, topic: str, queue_id: int, offset: int, max_count: int
    ) -> list[tuple[int, int, int]]:
        """``(commit-log offset, size, tags code)`` entries from ``offset``; [] outside [min, max)."""
        cq = self._queues.get(topic, queue_id)
        return cq.entries(offset, max_count) if cq is not None else []

    def query_by_key(self, topic: str, key: str, max_num: int, begin_ms: int, end_ms: int) -> QueryResult:
        """Records of ``topic`` whose UNIQ_KEY or one of whose KEYS is ``key``, stored within
        [begin_ms, end_ms] (index times have one-second resolution), newest first."""
        result = QueryResult()
        if self._index is None or max_num <= 0:
            return result
        offsets, last_ts, last_phy = self._index.query(topic, key, max_num + 16, begin_ms, end_ms)
        result.index_last_update_timestamp = last_ts
        result.index_last_update_phyoffset = last_phy
        for offset in offsets:
            view = self._commit_log.record_at(offset)
            if view is None:
                continue
            try:
                header = read_record_header(view)
            except ProtocolError:
                continue
            if header.topic != topic:
                continue
            properties = decode_properties(header.properties)
            keys = properties.get(PropertyKey.KEYS, "")
            if properties.get(PropertyKey.UNIQ_CLIENT_MESSAGE_ID_KEYIDX) != key and key not in keys.split(
                KEY_SEPARATOR
            ):
                continue
            result.records.append(bytes(view))
            if len(result.records) >= max_num:
                break
        return result
