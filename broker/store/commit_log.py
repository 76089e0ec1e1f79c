"""The commit log: every message of every topic, appended to one sequence of mapped files.

A record's bytes are the stored-record layout of REMOTING.md §4.3, which is also the pull wire
format, so reads hand out slices of the files. A record that does not fit in what is left of a
file ends that file with the 8-byte END-OF-FILE blank (its size, then magic 0xCBD43194) and goes
to the start of the next one; a batch is never split across files.

Appends write each batch's records in full first and the first record's size and magic last, so
a process killed in the middle of an append leaves zeros where recovery looks for the next
record: the torn batch is simply not there. Recovery also checks each record's lengths, its
physical-offset field, that topic and properties hold no NUL (the store refuses such messages,
so NULs mean bytes that never reached the disk) and, optionally, the body CRC.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import struct
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

from protocol.message import (
    BLANK_MAGIC_CODE,
    MAX_PROPERTIES_LENGTH,
    MAX_TOPIC_LENGTH,
    MESSAGE_MAGIC_CODE,
    RECORD_FIXED_SIZE,
    record_head_struct,
)

from .mapped_file import MappedFile, MappedFileQueue, allocate
from .messages import PutStatus, StoreMessage

log = logging.getLogger(__name__)

BLANK_MIN_SIZE = 8

_TOTAL_MAGIC = struct.Struct(">ii")
_SHORT = struct.Struct(">h")
_INT = struct.Struct(">i")
_LONG = struct.Struct(">q")
# TOTALSIZE MAGIC BODYCRC QUEUEID FLAG QUEUEOFFSET PHYSICALOFFSET SYSFLAG: the same place in
# every record, whatever the host lengths.
_FRONT = struct.Struct(">iiiiiqqi")
_BORN_V6 = 0x10
_STORE_V6 = 0x20
_TX_MASK = 0xC
_TX_PREPARED = 0x4
_TX_ROLLBACK = 0xC
_HEADS = {(b, s): record_head_struct(b, s) for b in (8, 20) for s in (8, 20)}


def _host_layout(sys_flag: int) -> tuple[int, int]:
    """(STORETIMESTAMP position, BODYLENGTH position) for the record's host lengths."""
    born = 20 if sys_flag & _BORN_V6 else 8
    store = 20 if sys_flag & _STORE_V6 else 8
    return 48 + born, 68 + born + store


_LAYOUTS = {flags: _host_layout(flags) for flags in (0, _BORN_V6, _STORE_V6, _BORN_V6 | _STORE_V6)}


class Appended(NamedTuple):
    """Where a batch went: first record's offset, each record's offset and size."""

    wrote_offset: int
    wrote_bytes: int
    offsets: list[int]
    sizes: list[int]
    store_timestamps: list[int]


class ScannedRecord(NamedTuple):
    """The fields of a verified record that dispatch needs."""

    offset: int
    size: int
    topic: str
    queue_id: int
    queue_offset: int
    sys_flag: int
    store_timestamp: int
    properties: str


#: ``check_record`` results that are not a record size.
END_OF_FILE = 0
INVALID = -1


class CommitLog:
    """Appends and reads records; owns the files of ``storePathCommitLog``."""

    def __init__(self, directory: Path, file_size: int, store_host: bytes, max_message_size: int) -> None:
        if len(store_host) not in (8, 20):
            raise ValueError("store_host must be packed as 8 (IPv4) or 20 (IPv6) bytes")
        self.queue = MappedFileQueue(directory, file_size)
        self.file_size = file_size
        self.store_host = store_host
        self.max_body_size = max_message_size
        self._store_v6 = _STORE_V6 if len(store_host) == 20 else 0
        self._store_extra = len(store_host) - 8
        self._heads = {born: _HEADS[(born, len(store_host))] for born in (8, 20)}
        self._topics: dict[str, bytes] = {}
        #: Store timestamp of the last record appended (the flusher records it once durable).
        self.last_store_timestamp = 0
        #: Worker that prepares the next file ahead of need, when the store runs one.
        self.allocator: concurrent.futures.Executor | None = None
        self._next_file: concurrent.futures.Future[MappedFile] | None = None
        self._next_start = -1

    # -- positions -----------------------------------------------------------------------------

    @property
    def min_offset(self) -> int:
        return self.queue.min_offset

    @property
    def max_offset(self) -> int:
        return self.queue.max_offset

    def roll_next(self, offset: int) -> int:
        return self.queue.roll_next(offset)

    # -- append ----------------------------------------------------------------------------------

    def _topic_prefix(self, topic: str) -> bytes | None:
        """TOPICLEN + TOPIC bytes, or None for a topic the record cannot carry."""
        prefix = self._topics.get(topic)
        if prefix is None:
            raw = topic.encode()
            # The topic also names a consume-queue directory: no separators, no dot names.
            if not raw or len(raw) > MAX_TOPIC_LENGTH or b"\0" in raw or b"/" in raw or raw[0] == 0x2E:
                return None
            prefix = bytes((len(raw),)) + raw
            if len(self._topics) < 100_000:
                self._topics[topic] = prefix
        return prefix

    def append(self, msgs: Sequence[StoreMessage], queue_offset: int, now_ms: int) -> Appended | PutStatus:
        """Append ``msgs`` (one topic-queue, consecutive queue offsets from ``queue_offset``) as
        contiguous records in one file. Returns where they went, or why nothing was written."""
        prefix = self._topic_prefix(msgs[0].topic)
        if prefix is None:
            return PutStatus.MESSAGE_ILLEGAL
        # Record size without body, properties and the born host's extra IPv6 bytes. With
        # bodies within maxMessageSize, a record never exceeds it by more than 64 KiB.
        fixed = RECORD_FIXED_SIZE - 1 + len(prefix) + self._store_extra
        max_body = self.max_body_size
        encoded_props = []
        total = 0
        for msg in msgs:
            props = msg.properties.encode()
            body_len = len(msg.body)
            born_len = len(msg.born_host)
            if len(props) > MAX_PROPERTIES_LENGTH:
                return PutStatus.PROPERTIES_SIZE_EXCEEDED
            if body_len > max_body or b"\0" in props or (born_len != 8 and born_len != 20):
                return PutStatus.MESSAGE_ILLEGAL
            encoded_props.append(props)
            total += fixed + body_len + len(props) + born_len - 8
        if total + BLANK_MIN_SIZE > self.file_size:
            return PutStatus.MESSAGE_ILLEGAL
        mapped = self._file_with_room(total)
        if mapped is None:
            return PutStatus.CREATE_MAPPED_FILE_FAILED

        first = mapped.wrote
        phys = mapped.start + first
        store_host = self.store_host
        store_v6 = self._store_v6
        heads = self._heads
        crc32 = zlib.crc32
        parts: list[bytes] = []
        extend = parts.extend
        offsets = []
        sizes = []
        stamps = []
        qoff = queue_offset
        for msg, props in zip(msgs, encoded_props):
            body = msg.body
            born = msg.born_host
            born_len = len(born)
            size = fixed + len(body) + len(props) + born_len - 8
            sys_flag = (
                (msg.sys_flag & ~(_BORN_V6 | _STORE_V6)) | store_v6 | (_BORN_V6 if born_len == 20 else 0)
            )
            tx = sys_flag & _TX_MASK
            if tx in (_TX_PREPARED, _TX_ROLLBACK):
                # Half and rolled-back transaction messages get no consume-queue slot.
                record_qoff = 0
            else:
                record_qoff = qoff
                qoff += 1
            stamp = msg.store_timestamp or now_ms
            extend(
                (
                    heads[born_len].pack(
                        size,
                        MESSAGE_MAGIC_CODE,
                        crc32(body) & 0x7FFFFFFF,
                        msg.queue_id,
                        msg.flag,
                        record_qoff,
                        phys,
                        sys_flag,
                        msg.born_timestamp,
                        born,
                        stamp,
                        store_host,
                        msg.reconsume_times,
                        msg.prepared_transaction_offset,
                        len(body),
                    ),
                    body,
                    prefix,
                    len(props).to_bytes(2, "big"),
                    props,
                )
            )
            offsets.append(phys)
            sizes.append(size)
            stamps.append(stamp)
            phys += size
        data = memoryview(b"".join(parts))
        view = mapped.view
        # The first record's size and magic go last: until then the batch is invisible to
        # recovery, so a crash in the middle of the copy leaves no torn record behind.
        view[first + 8 : first + total] = data[8:]
        view[first : first + 8] = data[:8]
        mapped.wrote = first + total
        self.last_store_timestamp = stamps[-1]
        return Appended(offsets[0], total, offsets, sizes, stamps)

    def _file_with_room(self, size: int) -> MappedFile | None:
        """The file the next ``size`` bytes go to, ending the current one with a blank if they
        do not fit (``size + 8`` must fit in an empty file)."""
        queue = self.queue
        mapped = queue.last
        try:
            if mapped is None:
                return self._new_file(0)
            if mapped.wrote + size + BLANK_MIN_SIZE > mapped.size:
                if not mapped.full:
                    _TOTAL_MAGIC.pack_into(
                        mapped.view, mapped.wrote, mapped.size - mapped.wrote, BLANK_MAGIC_CODE
                    )
                    mapped.wrote = mapped.size
                return self._new_file(mapped.end)
        except OSError as exc:
            log.error("cannot create commit-log file: %s", exc)
            return None
        return mapped

    def _new_file(self, start: int) -> MappedFile:
        queue = self.queue
        mapped: MappedFile | None = None
        pending = self._next_file
        if pending is not None and self._next_start == start and pending.done():
            self._next_file = None
            try:
                mapped = pending.result()
            except OSError as exc:
                log.warning("preallocating commit-log file %d failed: %s", start, exc)
            else:
                queue.adopt(mapped)
        if mapped is None:
            if pending is not None and self._next_file is pending:
                # Still being prepared (or for another offset): make this one here, drop that.
                self._next_file = None
                pending.add_done_callback(_destroy_result)
            mapped = queue.create(start)
        self._prepare_next(start + self.file_size)
        return mapped

    def _prepare_next(self, start: int) -> None:
        if self.allocator is None or self._next_file is not None:
            return
        self._next_start = start
        self._next_file = self.allocator.submit(allocate, self.queue.directory, start, self.file_size)

    def start_preallocation(self, allocator: concurrent.futures.Executor) -> None:
        """From now on keep the file after the current one ready, made by ``allocator``."""
        self.allocator = allocator
        last = self.queue.last
        self._prepare_next(last.end if last is not None else 0)

    def stop_preallocation(self) -> None:
        pending = self._next_file
        self._next_file = None
        self.allocator = None
        if pending is not None:
            pending.add_done_callback(_destroy_result)

    # -- reads -----------------------------------------------------------------------------------

    def slice(self, offset: int, size: int) -> memoryview | None:
        """The ``size`` bytes at ``offset``, if they are written and their file still exists."""
        mapped = self.queue.find(offset)
        if mapped is None:
            return None
        pos = offset - mapped.start
        if pos < 0 or size <= 0 or pos + size > mapped.wrote:
            return None
        return mapped.view[pos : pos + size]

    def record_at(self, offset: int, size: int | None = None) -> memoryview | None:
        """The record starting at ``offset`` (its size read from it if not given)."""
        mapped = self.queue.find(offset)
        if mapped is None:
            return None
        pos = offset - mapped.start
        if pos < 0 or pos + RECORD_FIXED_SIZE > mapped.wrote:
            return None
        total, magic = _TOTAL_MAGIC.unpack_from(mapped.view, pos)
        if magic != MESSAGE_MAGIC_CODE or (size is not None and size != total):
            return None
        if total < RECORD_FIXED_SIZE or pos + total > mapped.wrote:
            return None
        return mapped.view[pos : pos + total]

    def store_timestamp_at(self, offset: int) -> int:
        """STORETIMESTAMP of the record at ``offset``; -1 if it is gone."""
        mapped = self.queue.find(offset)
        if mapped is None:
            return -1
        pos = offset - mapped.start
        if pos < 0 or pos + RECORD_FIXED_SIZE > mapped.wrote:
            return -1
        view = mapped.view
        (sys_flag,) = _INT.unpack_from(view, pos + 36)
        (stamp,) = _LONG.unpack_from(view, pos + _LAYOUTS[sys_flag & 0x30][0])
        return int(stamp)

    # -- verification (recovery) -----------------------------------------------------------------

    def check_record(self, mapped: MappedFile, pos: int, check_crc: bool) -> int:
        """Size of the valid record at ``pos`` of ``mapped``; END_OF_FILE for the blank that
        ends a file, INVALID for anything else (the end of the log)."""
        view = mapped.view
        limit = mapped.size
        if pos + BLANK_MIN_SIZE > limit:
            return INVALID
        total, magic = _TOTAL_MAGIC.unpack_from(view, pos)
        if magic == BLANK_MAGIC_CODE:
            return END_OF_FILE if total == limit - pos else INVALID
        if magic != MESSAGE_MAGIC_CODE or total < RECORD_FIXED_SIZE or pos + total > limit:
            return INVALID
        fields = _FRONT.unpack_from(view, pos)
        if fields[6] != mapped.start + pos:
            return INVALID
        layout = _LAYOUTS.get(fields[7] & 0x30)
        if layout is None:
            return INVALID
        body_len_pos = pos + layout[1]
        (body_len,) = _INT.unpack_from(view, body_len_pos)
        body_pos = body_len_pos + 4
        topic_pos = body_pos + body_len
        end = pos + total
        if body_len < 0 or topic_pos + 3 > end:
            return INVALID
        topic_len = view[topic_pos]
        props_pos = topic_pos + 1 + topic_len
        if topic_len == 0 or props_pos + 2 > end:
            return INVALID
        (props_len,) = _SHORT.unpack_from(view, props_pos)
        if props_pos + 2 + props_len != end:
            return INVALID
        if mapped.mm.find(b"\0", topic_pos + 1, props_pos) >= 0 or (
            props_len and mapped.mm.find(b"\0", props_pos + 2, end) >= 0
        ):
            return INVALID
        if check_crc and zlib.crc32(view[body_pos:topic_pos]) & 0x7FFFFFFF != fields[2] & 0x7FFFFFFF:
            return INVALID
        return int(total)

    def parse_record(self, mapped: MappedFile, pos: int, size: int) -> ScannedRecord:
        """The dispatch fields of a record :meth:`check_record` accepted."""
        view = mapped.view
        fields = _FRONT.unpack_from(view, pos)
        store_ts_pos, body_len_pos = _LAYOUTS[fields[7] & 0x30]
        (stamp,) = _LONG.unpack_from(view, pos + store_ts_pos)
        (body_len,) = _INT.unpack_from(view, pos + body_len_pos)
        topic_pos = pos + body_len_pos + 4 + body_len
        topic_len = view[topic_pos]
        props_pos = topic_pos + 1 + topic_len
        return ScannedRecord(
            mapped.start + pos,
            size,
            bytes(view[topic_pos + 1 : props_pos]).decode(errors="replace"),
            fields[3],
            fields[5],
            fields[7],
            stamp,
            bytes(view[props_pos + 2 : pos + size]).decode(errors="replace"),
        )

    def first_store_timestamp(self, mapped: MappedFile) -> int:
        """STORETIMESTAMP of a file's first record; -1 if it does not start with a record."""
        if self.check_record(mapped, 0, False) <= 0:
            return -1
        return self.store_timestamp_at(mapped.start)

    # -- lifecycle -------------------------------------------------------------------------------

    def close(self) -> None:
        self.stop_preallocation()
        self.queue.close()


def _destroy_result(future: concurrent.futures.Future[MappedFile]) -> None:
    with contextlib.suppress(Exception):
        future.result().destroy()
