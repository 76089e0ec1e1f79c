"""Compiled with mypyc (aiorocketmq/compiled.py, which lists the rules): declared, typed
attributes only; no monkeypatching, setattr or frame tricks; no await in except/finally.

The commit log: every message of every topic, appended to one sequence of mapped files.

A record's bytes are the stored-record layout of docs/protocol.md §4.3, which is also the pull wire
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
import os
import struct
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

from aiorocketmq.protocol.message import (
    BLANK_MAGIC_CODE,
    MAX_PROPERTIES_LENGTH,
    MAX_TOPIC_LENGTH,
    MESSAGE_MAGIC_CODE,
    RECORD_FIXED_SIZE,
    record_head_struct,
)
from aiorocketmq.protocol.speedups import compiled as _compiled

from .mapped_file import (
    DiskFullError,
    MappedFile,
    MappedFileQueue,
    allocate,
    destroy_allocated,
    page_ceil,
    populating,
    reserve_mapped,
)
from .messages import PutStatus, StoreMessage

log = logging.getLogger(__name__)

BLANK_MIN_SIZE = 8

_TOTAL_MAGIC = struct.Struct(">ii")
_INT = struct.Struct(">i")
_LONG = struct.Struct(">q")
_BORN_V6 = 0x10
_STORE_V6 = 0x20
_TX_MASK = 0xC
_TX_PREPARED = 0x4
_TX_ROLLBACK = 0xC
_HEADS = {(b, s): record_head_struct(b, s) for b in (8, 20) for s in (8, 20)}
# The fields verification needs from an IPv4/IPv4 record head: TOTALSIZE MAGIC BODYCRC
# QUEUEID (FLAG) QUEUEOFFSET PHYSICALOFFSET SYSFLAG (BORNTIMESTAMP BORNHOST) STORETIMESTAMP
# (STOREHOST RECONSUMETIMES PREPAREDOFFSET) BODYLENGTH.
_SCAN_V4 = struct.Struct(">iiii4xqqi16xq8x4x8xi")


def _host_layout(sys_flag: int) -> tuple[int, int]:
    """(STORETIMESTAMP position, BODYLENGTH position) for the record's host lengths."""
    born = 20 if sys_flag & _BORN_V6 else 8
    store = 20 if sys_flag & _STORE_V6 else 8
    return 48 + born, 68 + born + store


#: The commit log's compiled record encoder, when active (aiorocketmq.protocol.speedups).
_encode_records = _compiled.encode_records if _compiled is not None else None
#: Its refusals, by the code it returns them as.
_ENCODE_STATUSES = {1: PutStatus.MESSAGE_ILLEGAL, 2: PutStatus.PROPERTIES_SIZE_EXCEEDED}
#: How far past the end of the log the worker keeps the current file's blocks reserved (with the
#: compiled codecs by faulting its pages in: mapped_file.reserve_mapped). The reservation is what
#: makes writing through the mapping safe on a full disk; it also bounds the file's slack to this
#: much. A first write to a page of a fresh file costs a fault (0.5-8 µs: bench/page_touch.py)
#: that the event loop would otherwise take, one per 4 KiB written.
AHEAD = 8 << 20
#: What an append reserves itself when the worker's stretch is not there yet (a new file, or
#: a worker behind): enough for a burst, the worker reserves the rest.
_SELF_AHEAD = 256 << 10

_LAYOUTS = {flags: _host_layout(flags) for flags in (0, _BORN_V6, _STORE_V6, _BORN_V6 | _STORE_V6)}


class Appended(NamedTuple):
    """Where a batch went: first record's offset, each record's offset and size, and the
    queue offset after it (half and rolled-back transaction messages take none)."""

    wrote_offset: int
    wrote_bytes: int
    offsets: list[int]
    sizes: list[int]
    store_timestamps: list[int]
    next_queue_offset: int


#: What dispatch needs of a verified record: (offset, size, topic, queue id, queue offset,
#: sys flag, store timestamp, properties).
ScannedRecord = tuple[int, int, str, int, int, int, int, str]


#: ``check_record`` / ``verify`` outcomes that are not a record size.
END_OF_FILE = 0
INVALID = -1
STOPPED = -2


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
        store_v6 = self._store_v6
        #: Born-host length → (record head, SYSFLAG host bits, extra record bytes).
        self._born_layouts = {
            8: (_HEADS[(8, len(store_host))], store_v6, 0),
            20: (_HEADS[(20, len(store_host))], store_v6 | _BORN_V6, 12),
        }
        self._topics: dict[str, bytes] = {}
        #: Store timestamp of the last record appended (the flusher records it once durable).
        self.last_store_timestamp = 0
        #: Worker that prepares the next file ahead of need, when the store runs one.
        self.allocator: concurrent.futures.Executor | None = None
        #: Worker that reserves (and faults in) the current file's next stretch (:meth:`_ahead`).
        self.warmer: concurrent.futures.Executor | None = None
        self._next_file: concurrent.futures.Future[MappedFile] | None = None
        self._next_start = -1
        self._stretch = self._ahead_low = 0
        self.ahead = AHEAD
        #: Log offset up to which the worker has been asked to reserve; its last job, the file
        #: it is for, and the log's truncation count when it was asked (a cut since makes its
        #: answer stale).
        self._ahead_until = 0
        self._ahead_job: concurrent.futures.Future[tuple[int, int]] | None = None
        self._ahead_file: MappedFile | None = None
        self._ahead_cuts = 0
        #: How many times the reservation mark moved on (the store looks at the disk then).
        self.reservations = 0
        #: Why the last append found no room for a new file (the store refuses puts on it).
        self.disk_full: DiskFullError | None = None

    @property
    def ahead(self) -> int:
        """Bytes reserved ahead of the write position: :data:`AHEAD`, or a whole small file."""
        return self._stretch

    @ahead.setter
    def ahead(self, value: int) -> None:
        self._stretch = min(value, self.file_size)
        # The worker is asked for more once the end comes within this much of the mark: a
        # quarter of the stretch at a time, so a job is short and the appends keep three
        # quarters of a stretch in hand (they wait for a job only when they catch up with it).
        self._ahead_low = self._stretch - self._stretch // 4

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

    def topic_prefix(self, topic: str) -> bytes | None:
        """TOPICLEN + TOPIC bytes, or None for a topic the record cannot carry."""
        prefix = self._topics.get(topic)
        if prefix is None:
            try:
                raw = topic.encode()
            except UnicodeEncodeError:
                return None
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
        prefix = self.topic_prefix(msgs[0].topic)
        if prefix is None:
            return PutStatus.MESSAGE_ILLEGAL
        mapped = self.queue.last
        while True:
            # Encode for the current end of the log; in the rare case the batch does not fit
            # there, end the file and encode again for the start of the next one.
            start = mapped.start + mapped.wrote if mapped is not None and not mapped.full else self.max_offset
            encoded = self._encode(msgs, prefix, queue_offset, now_ms, start)
            if isinstance(encoded, PutStatus):
                return encoded
            parts, offsets, sizes, stamps, next_queue_offset = encoded
            total = offsets[-1] + sizes[-1] - start
            if total + BLANK_MIN_SIZE > self.file_size:
                return PutStatus.MESSAGE_ILLEGAL
            target = self._file_with_room(total)
            if target is None:
                return (
                    PutStatus.SERVICE_NOT_AVAILABLE
                    if self.disk_full is not None
                    else PutStatus.CREATE_MAPPED_FILE_FAILED
                )
            if target.start + target.wrote == start:
                break
            mapped = target
        first = target.wrote
        if first + total > target.reserved and not self._reserve(target, first + total):
            return PutStatus.SERVICE_NOT_AVAILABLE
        data = memoryview(b"".join(parts))
        view = target.view
        # The first record's size and magic go last: until then the batch is invisible to
        # recovery, so a crash in the middle of the copy leaves no torn record behind.
        view[first + 8 : first + total] = data[8:]
        view[first : first + 8] = data[:8]
        target.wrote = first + total
        if target.start + first + total + self._ahead_low > self._ahead_until:
            self._ahead(target)
        self.last_store_timestamp = stamps[-1]
        return Appended(start, total, offsets, sizes, stamps, next_queue_offset)

    def _encode(
        self, msgs: Sequence[StoreMessage], prefix: bytes, queue_offset: int, now_ms: int, phys: int
    ) -> tuple[list[bytes], list[int], list[int], list[int], int] | PutStatus:
        """The records of ``msgs`` as if written at ``phys``: their parts, offsets, sizes and
        store timestamps, and the queue offset after them."""
        if _encode_records is not None:
            encoded = _encode_records(
                msgs, prefix, queue_offset, now_ms, phys, self.store_host, self.max_body_size
            )
            if type(encoded) is tuple:
                data, offsets, sizes, stamps, next_queue_offset = encoded
                return [data], offsets, sizes, stamps, next_queue_offset
            if type(encoded) is int:
                return _ENCODE_STATUSES[encoded]
            # None: a field the compiled encoder leaves to the pure one (which words the error)
        return self.encode_pure(msgs, prefix, queue_offset, now_ms, phys)

    def encode_pure(
        self, msgs: Sequence[StoreMessage], prefix: bytes, queue_offset: int, now_ms: int, phys: int
    ) -> tuple[list[bytes], list[int], list[int], list[int], int] | PutStatus:
        """:meth:`_encode` in pure Python (what runs without the compiled codecs)."""
        # Record size without body, properties and the born host's extra IPv6 bytes. With
        # bodies within maxMessageSize, a record never exceeds it by more than 64 KiB.
        fixed = RECORD_FIXED_SIZE - 1 + len(prefix) + self._store_extra
        max_body = self.max_body_size
        store_host = self.store_host
        layouts = self._born_layouts
        ipv4_born = layouts[8]
        crc32 = zlib.crc32
        parts: list[bytes] = []
        extend = parts.extend
        offsets = []
        sizes = []
        stamps = []
        qoff = queue_offset
        for msg in msgs:
            body = msg.body
            try:
                props = msg.properties.encode()
            except UnicodeEncodeError:  # lone surrogates: not representable on the wire
                return PutStatus.MESSAGE_ILLEGAL
            born = msg.born_host
            if len(born) == 8:
                head, host_flags, extra = ipv4_born
            elif len(born) == 20:
                head, host_flags, extra = layouts[20]
            else:
                return PutStatus.MESSAGE_ILLEGAL
            if len(props) > MAX_PROPERTIES_LENGTH:
                return PutStatus.PROPERTIES_SIZE_EXCEEDED
            if len(body) > max_body or b"\0" in props:
                return PutStatus.MESSAGE_ILLEGAL
            size = fixed + extra + len(body) + len(props)
            sys_flag = (msg.sys_flag & ~(_BORN_V6 | _STORE_V6)) | host_flags
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
                    head.pack(
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
        return parts, offsets, sizes, stamps, qoff

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
                    if mapped.wrote + BLANK_MIN_SIZE > mapped.reserved and not self._reserve(
                        mapped, mapped.wrote + BLANK_MIN_SIZE
                    ):
                        return None
                    _TOTAL_MAGIC.pack_into(
                        mapped.view, mapped.wrote, mapped.size - mapped.wrote, BLANK_MAGIC_CODE
                    )
                    mapped.wrote = mapped.size
                return self._new_file(mapped.end)
        except DiskFullError as exc:
            if self.disk_full is None:
                log.error("cannot create a commit-log file, the disk is full: %s", exc)
            self.disk_full = exc
            return None
        except OSError as error:
            log.error("cannot create commit-log file: %s", error)
            return None
        self.disk_full = None
        return mapped

    def _new_file(self, start: int) -> MappedFile:
        queue = self.queue
        mapped: MappedFile | None = None
        pending = self._next_file
        if pending is not None and self._next_start == start and pending.done():
            self._next_file = None
            try:
                mapped = pending.result()
            except DiskFullError:
                pass  # made again below, after a fresh look at the free space
            except OSError as exc:
                log.warning("preallocating commit-log file %d failed: %s", start, exc)
            else:
                queue.adopt(mapped)
        if mapped is None:
            if pending is not None and self._next_file is pending:
                # Still being prepared (or for another offset): make this one here, drop that.
                self._next_file = None
                pending.add_done_callback(destroy_allocated)
            mapped = queue.create(start)
        self._prepare_next(start + self.file_size)
        return mapped

    def _prepare_next(self, start: int) -> None:
        if self.allocator is None or self._next_file is not None:
            return
        self._next_start = start
        # Made sparse and without blocks: it takes space once written to, not while it waits.
        self._next_file = self.allocator.submit(
            allocate, self.queue.directory, start, self.file_size, reserve_first=0
        )

    # -- reservation ahead of the writes ---------------------------------------------------------

    def _reserve(self, mapped: MappedFile, end: int) -> bool:
        """Blocks for ``mapped`` up to ``end`` (a position in it) before an append writes
        there: what the worker reserved ahead if it is done, else here and now. False (and
        ``disk_full`` set) when the disk has no room."""
        job = self._ahead_job
        if job is not None and self._ahead_file is mapped and not populating() and not job.cancel():
            # Without the compiled codecs the worker writes zeros just past the reserved mark (a
            # job it had not begun is called off): appending there before it is done could put
            # records under its zeros. (Faulting pages in changes no byte: no wait then.)
            concurrent.futures.wait((job,))
        self._settle_ahead(mapped)
        if end <= mapped.reserved:
            return True
        try:
            mapped.ensure(end, self.ahead if self.warmer is None else min(self.ahead, _SELF_AHEAD))
        except DiskFullError as exc:
            if self.disk_full is None:
                log.error("cannot reserve commit-log space, the disk is full: %s", exc)
            self.disk_full = exc
            return False
        self.reservations += 1
        return True

    def _settle_ahead(self, mapped: MappedFile) -> None:
        """Take what the worker's finished job reserved in ``mapped`` (nothing if it failed,
        is for another file, or the log was cut back since it was asked)."""
        job = self._ahead_job
        if job is None or not job.done():
            return
        self._ahead_job = None
        if self._ahead_file is not mapped or self._ahead_cuts != self.queue.truncations:
            return
        with contextlib.suppress(Exception):  # a refusal: the append reserves itself, or says why not
            begin, end = job.result()
            if begin <= mapped.reserved < end:
                mapped.reserved = end
                self.reservations += 1

    def _ahead(self, mapped: MappedFile) -> None:
        """Have the worker reserve (and fault in) the stretch of ``mapped`` past its reserved
        mark, up to :attr:`ahead` past its end."""
        warmer = self.warmer
        if warmer is None or mapped.fd < 0:
            return
        if self._ahead_job is not None:
            if not self._ahead_job.done():
                return
            self._settle_ahead(mapped)
        # From the reserved mark on: the loop writes only below it (and, where reserving
        # writes zeros, waits for this job before reserving past it), so no zero lands on a record.
        begin = max(mapped.reserved, mapped.wrote)
        end = min(mapped.size, page_ceil(mapped.wrote + self.ahead))
        self._ahead_until = mapped.start + end
        if end <= begin:
            return
        self._ahead_file = mapped
        self._ahead_cuts = self.queue.truncations
        # The worker gets a descriptor of its own: the file may be closed (deleted) meanwhile,
        # and its number taken by another file.
        fd = os.dup(mapped.fd)
        self._ahead_job = job = warmer.submit(self._reserve_ahead, fd, mapped, begin, end)
        job.add_done_callback(self._reserved_ahead)

    def _reserve_ahead(self, fd: int, mapped: MappedFile, begin: int, end: int) -> tuple[int, int]:
        """The worker's job: reserve [begin, end) of ``mapped``; returns the range (raises if
        the disk has no room, ValueError if the file was closed meanwhile)."""
        try:
            reserve_mapped(mapped.mm, fd, begin, end, mapped.path)
        finally:
            os.close(fd)
        return begin, end

    def _reserved_ahead(self, job: concurrent.futures.Future[tuple[int, int]]) -> None:
        # Runs on the worker's thread. A refusal is left for the append that needs the space.
        if not job.cancelled() and isinstance(job.exception(), DiskFullError):
            log.debug("commit log: reserving ahead failed: %s", job.exception())

    def start_preallocation(
        self, allocator: concurrent.futures.Executor, warmer: concurrent.futures.Executor | None = None
    ) -> None:
        """From now on keep the file after the current one ready, made by ``allocator``, and
        (with ``warmer``) the current file's next pages faulted in by ``warmer``."""
        self.allocator = allocator
        self.warmer = warmer
        last = self.queue.last
        self._prepare_next(last.end if last is not None else 0)

    def stop_preallocation(self) -> None:
        pending = self._next_file
        self._next_file = None
        self.allocator = None
        self.warmer = None
        self._ahead_job = None
        self._ahead_file = None
        if pending is not None:
            pending.add_done_callback(destroy_allocated)

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

    def record_at(
        self, offset: int, size: int | None = None, *, check_crc: bool = False
    ) -> memoryview | None:
        """The record starting at ``offset`` (its size read from it if not given); None unless
        a complete record starts there (and, with ``check_crc``, its body passes the CRC)."""
        mapped = self.queue.find(offset)
        if mapped is None:
            return None
        pos = offset - mapped.start
        if pos < 0 or pos + RECORD_FIXED_SIZE > mapped.wrote:
            return None
        found = _inspect(mapped, pos, check_crc)
        if isinstance(found, int) or (size is not None and size != found[0]) or pos + found[0] > mapped.wrote:
            return None
        return mapped.view[pos : pos + found[0]]

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

    def data_at(self, offset: int, max_bytes: int) -> memoryview | None:
        """Up to ``max_bytes`` written bytes from ``offset``, never past the end of the file
        holding it (replication ships these as they are); None when nothing is there yet or
        the file is gone."""
        mapped = self.queue.find(offset)
        if mapped is None:
            return None
        pos = offset - mapped.start
        size = min(mapped.wrote - pos, max_bytes)
        if pos < 0 or size <= 0:
            return None
        return mapped.view[pos : pos + size]

    # -- replication (a slave's log) ---------------------------------------------------------------

    def append_raw(self, offset: int, data: bytes | memoryview) -> None:
        """Write a master's commit-log bytes at ``offset``, which must be the end of this log
        (or, for an empty log, the start of a file); :class:`ValueError` otherwise. Records may
        be incomplete: the rest comes with the next bytes."""
        queue = self.queue
        if queue.files:
            if offset != queue.max_offset:
                raise ValueError(
                    f"replicated bytes at {offset}, but this commit log ends at {queue.max_offset}"
                )
        elif offset % self.file_size:
            raise ValueError(
                f"replicated bytes start at {offset}, which is not the start of a "
                f"{self.file_size}-byte commit-log file (is mappedFileSizeCommitLog the master's?)"
            )
        pos = 0
        total = len(data)
        while pos < total:
            mapped = queue.last
            if mapped is None or mapped.full:
                start = offset if mapped is None else mapped.end
                try:
                    mapped = self._new_file(start)
                except DiskFullError as exc:
                    self.disk_full = exc
                    raise
            n = min(total - pos, mapped.size - mapped.wrote)
            if mapped.wrote + n > mapped.reserved and not self._reserve(mapped, mapped.wrote + n):
                assert self.disk_full is not None
                raise self.disk_full
            mapped.view[mapped.wrote : mapped.wrote + n] = data[pos : pos + n]
            mapped.wrote += n
            pos += n
        last = queue.last
        if last is not None and last.start + last.wrote + self._ahead_low > self._ahead_until:
            self._ahead(last)

    def complete_records(self, offset: int, max_records: int) -> tuple[MappedFile | None, int, bool]:
        """From ``offset`` (a record boundary of a replicated log): the file, how many whole
        records are written there in a row (at most ``max_records``), and whether the file's
        END-OF-FILE blank follows them. Raises ValueError where no record can start."""
        mapped = self.queue.find(offset)
        if mapped is None:
            return None, 0, False
        view = mapped.view
        wrote = mapped.wrote
        pos = offset - mapped.start
        count = 0
        unpack = _TOTAL_MAGIC.unpack_from
        while count < max_records and pos + BLANK_MIN_SIZE <= wrote:
            total, magic = unpack(view, pos)
            if magic == BLANK_MAGIC_CODE and total == mapped.size - pos:
                return mapped, count, True
            if magic != MESSAGE_MAGIC_CODE or total < RECORD_FIXED_SIZE or pos + total > mapped.size:
                raise ValueError(f"no record at commit-log offset {mapped.start + pos}")
            if pos + total > wrote:
                break
            count += 1
            pos += total
        return mapped, count, False

    # -- verification (recovery) -----------------------------------------------------------------

    def check_record(self, mapped: MappedFile, pos: int, check_crc: bool) -> int:
        """Size of the valid record at ``pos`` of ``mapped``; END_OF_FILE for the blank that
        ends a file, INVALID for anything else (the end of the log)."""
        found = _inspect(mapped, pos, check_crc)
        return found if isinstance(found, int) else found[0]

    def verify(self, mapped: MappedFile, pos: int, check_crc: bool, stop_at: int) -> tuple[int, int, int]:
        """Check records from ``pos`` on until one fails, the file ends, or a record was stored
        at or after ``stop_at`` (ms). Returns ``(position, outcome, last)``: the position of
        the failing or stopping record (or the file size); INVALID, END_OF_FILE or STOPPED;
        and the position of the last good record passed (-1: none)."""
        # The checks of _inspect, inlined for IPv4 records: this loop runs over gigabytes.
        view = mapped.view
        find = mapped.mm.find
        limit = mapped.size
        expected = mapped.start + pos
        unpack = _SCAN_V4.unpack_from
        head = _SCAN_V4.size
        crc32 = zlib.crc32
        last = -1
        while pos + head <= limit:
            total, magic, crc, _qid, _qoff, phys, sys_flag, stamp, body_len = unpack(view, pos)
            end = pos + total
            if magic != MESSAGE_MAGIC_CODE or sys_flag & 0x30:
                break  # the blank, an IPv6 record or no record: the careful path decides
            if total < RECORD_FIXED_SIZE or end > limit or phys != expected or body_len < 0:
                return pos, INVALID, last
            topic_pos = pos + head + body_len
            if topic_pos + 3 > end:
                return pos, INVALID, last
            props_pos = topic_pos + 1 + view[topic_pos]
            if (
                props_pos == topic_pos + 1
                or props_pos + 2 > end
                or props_pos + 2 + (view[props_pos] << 8 | view[props_pos + 1]) != end
                or find(b"\0", topic_pos + 1, props_pos) >= 0
                or find(b"\0", props_pos + 2, end) >= 0
                or (check_crc and crc32(view[pos + head : topic_pos]) & 0x7FFFFFFF != crc)
            ):
                return pos, INVALID, last
            if stamp >= stop_at:
                return pos, STOPPED, last
            last = pos
            pos = end
            expected += total
        while True:
            found = _inspect(mapped, pos, check_crc)
            if isinstance(found, int):
                return (limit, END_OF_FILE, last) if found == END_OF_FILE else (pos, INVALID, last)
            if found[4] >= stop_at:
                return pos, STOPPED, last
            last = pos
            pos += found[0]

    def read_run(
        self, mapped: MappedFile, pos: int, check_crc: bool, max_records: int
    ) -> tuple[list[ScannedRecord], int, int]:
        """Verify and read up to ``max_records`` records from ``pos``. Returns the records, the
        position after them, and how the run ended: STOPPED (the count was reached),
        END_OF_FILE, or INVALID (at the returned position)."""
        records: list[ScannedRecord] = []
        append = records.append
        view = mapped.view
        find = mapped.mm.find
        limit = mapped.size
        base = mapped.start
        unpack = _SCAN_V4.unpack_from
        head = _SCAN_V4.size
        crc32 = zlib.crc32
        while len(records) < max_records:
            if pos + head <= limit:
                total, magic, crc, queue_id, queue_offset, phys, sys_flag, stamp, body_len = unpack(view, pos)
                # The checks of _inspect, inlined for IPv4 records.
                end = pos + total
                if magic == MESSAGE_MAGIC_CODE and not sys_flag & 0x30:
                    topic_pos = pos + head + body_len
                    if (
                        total < RECORD_FIXED_SIZE
                        or end > limit
                        or phys != base + pos
                        or body_len < 0
                        or topic_pos + 3 > end
                    ):
                        return records, pos, INVALID
                    props_pos = topic_pos + 1 + view[topic_pos]
                    if (
                        props_pos == topic_pos + 1
                        or props_pos + 2 > end
                        or props_pos + 2 + (view[props_pos] << 8 | view[props_pos + 1]) != end
                        or find(b"\0", topic_pos + 1, props_pos) >= 0
                        or find(b"\0", props_pos + 2, end) >= 0
                        or (check_crc and crc32(view[pos + head : topic_pos]) & 0x7FFFFFFF != crc)
                    ):
                        return records, pos, INVALID
                    append(
                        (
                            phys,
                            total,
                            bytes(view[topic_pos + 1 : props_pos]).decode(errors="replace"),
                            queue_id,
                            queue_offset,
                            sys_flag,
                            stamp,
                            bytes(view[props_pos + 2 : end]).decode(errors="replace"),
                        )
                    )
                    pos = end
                    continue
            found = _inspect(mapped, pos, check_crc)
            if isinstance(found, int):
                return records, (limit if found == END_OF_FILE else pos), found
            total, queue_id, queue_offset, sys_flag, stamp, topic_pos, props_pos = found
            append(
                (
                    base + pos,
                    total,
                    bytes(view[topic_pos:props_pos]).decode(errors="replace"),
                    queue_id,
                    queue_offset,
                    sys_flag,
                    stamp,
                    bytes(view[props_pos + 2 : pos + total]).decode(errors="replace"),
                )
            )
            pos += total
        return records, pos, STOPPED

    def first_store_timestamp(self, mapped: MappedFile) -> int:
        """STORETIMESTAMP of a file's first record; -1 if it does not start with a record."""
        if self.check_record(mapped, 0, False) <= 0:
            return -1
        return self.store_timestamp_at(mapped.start)

    # -- lifecycle -------------------------------------------------------------------------------

    def close(self) -> None:
        self.stop_preallocation()
        self.queue.close()


def _inspect(mapped: MappedFile, pos: int, check_crc: bool) -> tuple[int, int, int, int, int, int, int] | int:
    """Check the record at ``pos``: END_OF_FILE for the blank ending the file, INVALID for
    anything that is not a complete record (wrong magic or physical offset, lengths that do
    not add up, NUL bytes in topic or properties, a body that fails its CRC); otherwise
    ``(size, queue id, queue offset, sys flag, store timestamp, topic position, properties
    length position)``."""
    view = mapped.view
    limit = mapped.size
    if pos + _SCAN_V4.size <= limit:
        fields = _SCAN_V4.unpack_from(view, pos)
        total = fields[0]
        magic = fields[1]
    elif pos + BLANK_MIN_SIZE <= limit:
        total, magic = _TOTAL_MAGIC.unpack_from(view, pos)
        fields = None
    else:
        return INVALID
    if magic != MESSAGE_MAGIC_CODE:
        return END_OF_FILE if magic == BLANK_MAGIC_CODE and total == limit - pos else INVALID
    end = pos + total
    if fields is None or total < RECORD_FIXED_SIZE or end > limit:
        return INVALID
    sys_flag = fields[6]
    if sys_flag & 0x30:
        store_ts_pos, body_len_pos = _LAYOUTS[sys_flag & 0x30]
        (stamp,) = _LONG.unpack_from(view, pos + store_ts_pos)
        (body_len,) = _INT.unpack_from(view, pos + body_len_pos)
        body_pos = pos + body_len_pos + 4
    else:
        stamp = fields[7]
        body_len = fields[8]
        body_pos = pos + _SCAN_V4.size
    if fields[5] != mapped.start + pos or body_len < 0:
        return INVALID
    topic_pos = body_pos + body_len
    if topic_pos + 3 > end:
        return INVALID
    topic_len = view[topic_pos]
    props_pos = topic_pos + 1 + topic_len
    if (
        topic_len == 0
        or props_pos + 2 > end
        or props_pos + 2 + (view[props_pos] << 8 | view[props_pos + 1]) != end
    ):
        return INVALID
    # Topic and properties never hold NUL (put refuses them): NULs are bytes that never landed.
    find = mapped.mm.find
    if find(b"\0", topic_pos + 1, props_pos) >= 0 or find(b"\0", props_pos + 2, end) >= 0:
        return INVALID
    if check_crc and zlib.crc32(view[body_pos:topic_pos]) & 0x7FFFFFFF != fields[2]:
        return INVALID
    return total, fields[3], fields[4], sys_flag, stamp, topic_pos + 1, props_pos
