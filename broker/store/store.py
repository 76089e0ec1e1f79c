"""Compiled with mypyc (aiorocketmq/compiled.py, which lists the rules): declared, typed
attributes only; no monkeypatching, setattr or frame tricks; no await in except/finally.

The message store: the broker's one entry point to commit log, consume queues and index.

Everything synchronous runs on the event-loop thread: a put appends the records, writes their
consume-queue and index entries and tells the arrival listeners, all before it returns; reads
(``get_messages`` and the lookups) answer from the mapped files. Background work (flushing,
preallocating the next commit-log file, deleting files) runs as asyncio tasks that hand every
blocking call to one of two worker threads: one for commit-log ``fdatasync`` (latency matters
under SYNC_FLUSH), one for everything else.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import logging
import os
import shutil
import struct
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

from aiorocketmq.protocol.codes import (
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    TRANSACTION_TYPE_MASK,
)
from aiorocketmq.protocol.errors import ProtocolError
from aiorocketmq.protocol.loop import cancel_and_wait
from aiorocketmq.protocol.message import (
    KEY_SEPARATOR,
    MessageExt,
    PropertyKey,
    decode_properties,
    decode_record,
    offset_msg_ids,
    read_record_header,
    tags_code,
)
from aiorocketmq.protocol.names import SCHEDULE_TOPIC, TIMER_OUT_MS, TIMER_TOPIC

from .checkpoint import Checkpoint, DirectoryLock, abort_file_exists, create_abort_file, remove_abort_file
from .commit_log import Appended, CommitLog, ScannedRecord
from .config import BrokerRole, FlushDiskType, StoreConfig
from .consume_queue import BLANK_SIZE, UNIT, ConsumeQueue
from .flush import CommitLogFlusher, LogicsFlusher, sync_all
from .index import Index
from .mapped_file import DiskFullError, MappedFile, MappedFileQueue, StoreError, free_bytes
from .messages import GetResult, GetStatus, PutResult, PutStatus, QueryResult, StoreMessage
from .recovery import RecoveryReport, recover
from .retention import Retention, disk_used_ratio

log = logging.getLogger(__name__)

T = TypeVar("T")

_TX_MASK = TRANSACTION_TYPE_MASK
_TX_PREPARED = TRANSACTION_PREPARED_TYPE
_TX_ROLLBACK = TRANSACTION_ROLLBACK_TYPE
_INT32_MIN = -0x80000000
_INT32_MAX = 0x7FFFFFFF
_ENTRIES = struct.Struct(">qiq").iter_unpack
#: getMessage scans at most max(16000 bytes of entries, max_count entries).
_MIN_SCAN_ENTRIES = 16000 // UNIT
#: How far ahead one search for a record filter's needles looks.
_NEEDLE_STRETCH = 256 * 1024
_TOMBSTONE_PREFIX = ".deleted-"
#: Replicated records dispatched together (their index keys go in as one batch).
_CHUNK = 512

ArrivalListener = Callable[[str, int, int, int], None]
#: ``(group, topic, queue id, next queue offset to consume)`` of every subscribed group: what
#: forced clean-up must not delete unless the operator said so (``cleanFileForciblyEnable``).
ConsumerProgress = Callable[[], Iterable[tuple[str, str, int, int]]]
#: How often the disk is looked at while puts are refused for lack of space (writes resume
#: within this of space coming back), and while they are not.
DISK_WATCH_FULL_SECONDS = 0.2
DISK_WATCH_SECONDS = 1.0
#: Threads that make consume-queue files for sends waiting on them.
QUEUE_FILE_THREADS = 4


class _Destroyable(Protocol):
    def destroy(self) -> None: ...


class ReplicaWait(Protocol):
    """A SYNC_MASTER's replication: PUT_OK once a slave holds the log up to ``end_offset``,
    else FLUSH_SLAVE_TIMEOUT or SLAVE_NOT_AVAILABLE."""

    async def wait(self, end_offset: int) -> PutStatus: ...


#: Upper bounds (ms, exclusive) of RocketMQ's put-latency buckets; the last is unbounded.
PUT_LATENCY_BUCKETS_MS = (1, 10, 50, 100, 200, 500, 1000, 2000, 3000, 4000, 5000, 10000)
_PUT_LATENCY_BOUNDS_NS = tuple(ms * 1_000_000 for ms in PUT_LATENCY_BUCKETS_MS)
_FIRST_BOUND_NS = _PUT_LATENCY_BOUNDS_NS[0]


@dataclass(slots=True)
class StoreStats:
    """Counters for the broker's runtime info and metrics."""

    put_message_times_total: int = 0
    put_message_size_total: int = 0
    put_message_failures: int = 0
    put_calls: int = 0
    put_latency_total_ns: int = 0
    put_latency_max_ns: int = 0
    #: Puts per latency bucket (:data:`PUT_LATENCY_BUCKETS_MS`, then one for the rest).
    put_latency_buckets: list[int] = field(default_factory=lambda: [0] * (len(PUT_LATENCY_BUCKETS_MS) + 1))
    get_message_times_found: int = 0
    get_message_times_miss: int = 0
    get_message_transferred: int = 0
    #: Fraction of the commit-log disk in use at the last look (-1: not yet known).
    disk_used_ratio: float = -1.0
    #: Puts refused because the disk was full.
    put_refused_disk_full: int = 0
    #: Messages some group (or no group at all) had not consumed when retention deleted their
    #: file, in all and per topic.
    unconsumed_deleted: int = 0
    unconsumed_deleted_by_topic: dict[str, int] = field(default_factory=dict)

    @property
    def put_latency_avg_ms(self) -> float:
        return self.put_latency_total_ns / self.put_calls / 1e6 if self.put_calls else 0.0

    def on_put_latency(self, latency_ns: int) -> None:
        self.put_calls += 1
        self.put_latency_total_ns += latency_ns
        if latency_ns > self.put_latency_max_ns:
            self.put_latency_max_ns = latency_ns
        buckets = self.put_latency_buckets
        if latency_ns < _FIRST_BOUND_NS:
            buckets[0] += 1  # nearly every put
            return
        for i, bound in enumerate(_PUT_LATENCY_BOUNDS_NS[1:], 1):
            if latency_ns < bound:
                buckets[i] += 1
                return
        buckets[-1] += 1


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class MessageStore:
    """Commit log + consume queues + index in ``storePathRootDir``."""

    def __init__(self, config: StoreConfig, *, store_host: bytes) -> None:
        self.config = config
        self.store_host = store_host
        self.commit_log = CommitLog(
            config.commit_log_dir, config.mapped_file_size_commit_log, store_host, config.max_message_size
        )
        self.index: Index | None = (
            Index(config.index_dir, config.max_hash_slot_num, config.max_index_num)
            if config.message_index_enable
            else None
        )
        self.stats = StoreStats()
        #: Puts are refused for lack of space: the disk passed ``diskSpaceWarningLevelRatio``,
        #: or a file the store needed could not be allocated (:meth:`check_disk` decides).
        self.disk_full = False
        self.disk_full_reason = ""
        #: Bytes the last failed allocation wanted: puts resume once that much is free again.
        self._space_needed = 0
        #: The commit log's reservation count when the disk was last looked at: each new
        #: stretch reserved is a look (a small volume fills in less than the watch's second).
        self._reservations_seen = 0
        self._disk_task: asyncio.Task[None] | None = None
        #: Set by the broker: the consumption the forced clean-up protects.
        self.consumer_progress: ConsumerProgress | None = None
        #: Set when a put could not write its consume-queue entries; puts are refused after.
        self.dispatch_failed = False
        self.recovery: RecoveryReport | None = None
        self._queues: dict[str, dict[int, ConsumeQueue]] = {}
        #: Consume queues a write may have made worth a flush (see :class:`LogicsFlusher`).
        self._flush_due: set[MappedFileQueue] = set()
        #: Consume queues whose next file a worker is making, and the puts waiting for it.
        self._room_waits: dict[ConsumeQueue, RoomWait] = {}
        #: Arrival listeners with the topic each watches (None: every topic).
        self._listeners: list[tuple[str | None, ArrivalListener]] = []
        #: The listeners of each topic that has had arrivals, in registration order.
        self._topic_listeners: dict[str, tuple[ArrivalListener, ...]] = {}
        self._running = False
        self._slave = config.broker_role is BrokerRole.SLAVE
        #: A SLAVE's store takes only replicated bytes, never puts.
        self.is_slave = self._slave
        self._correct_offsets = not self._slave or config.offset_check_in_slave
        self._hot_bytes = config.hot_data_bytes
        self._delay_levels = config.delay_levels
        #: An offset message id is the store host's bytes and the record's offset, in hex.
        self._msg_id_host = store_host.hex().upper()
        self._cq_file_size = config.consume_queue_file_size
        self._logics_timestamp = 0
        self._index_timestamp = 0
        self._checkpoint: Checkpoint | None = None
        self._lock: DirectoryLock | None = None
        self._flush_executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._io_executor: concurrent.futures.ThreadPoolExecutor | None = None
        #: Prepares the commit log's next stretch (reserves it, faults it in). Its own thread, so
        #: that it never queues behind the flushes, preparations and deletions on ``_io_executor``.
        self._prepare_executor: concurrent.futures.ThreadPoolExecutor | None = None
        #: Makes the consume-queue files sends wait for (see :meth:`room_pending`).
        self._queue_file_executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._commit_log_flusher: CommitLogFlusher | None = None
        self._logics_flusher: LogicsFlusher | None = None
        self._retention = Retention(self)
        self._pending_io: set[concurrent.futures.Future[None]] = set()
        #: SYNC_MASTER: what a waiting send also awaits after the flush (the slave's ack).
        self.replica: ReplicaWait | None = None
        #: A slave: where dispatching replicated records stands in the commit log.
        self.reput_offset = 0

    # -- lifecycle -----------------------------------------------------------------------------

    @property
    def checkpoint(self) -> Checkpoint:
        if self._checkpoint is None:
            raise StoreError("the message store has not been started")
        return self._checkpoint

    @property
    def running(self) -> bool:
        return self._running

    async def start(self) -> None:
        """Load and recover the files (normal or abnormal restart), then start flushing,
        preallocation and retention."""
        if self._running:
            return
        root = self.config.root_dir
        root.mkdir(parents=True, exist_ok=True)
        self._lock = DirectoryLock(root)
        try:
            self._checkpoint = await asyncio.to_thread(Checkpoint, root / "checkpoint")
            abnormal = abort_file_exists(root)
            self.recovery = await asyncio.to_thread(self._recover, abnormal)
            await asyncio.to_thread(create_abort_file, root)
        except BaseException:
            self._close_files()
            self._lock.release()
            self._lock = None
            raise
        self._flush_executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="store-flush")
        self._io_executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="store-io")
        self._prepare_executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="store-prepare")
        # Several threads: making a queue's first file is mostly waiting on the filesystem's
        # metadata (a directory and a file created: 0.3-0.6 ms on the development VM), and a
        # producer starting on a topic of a thousand new queues waits for a thousand of them.
        self._queue_file_executor = concurrent.futures.ThreadPoolExecutor(
            QUEUE_FILE_THREADS, thread_name_prefix="store-queue-files"
        )
        config = self.config
        self._commit_log_flusher = CommitLogFlusher(
            self.commit_log.queue,
            lambda: self.commit_log.last_store_timestamp,
            self.checkpoint,
            self._flush_executor,
            sync=config.flush_disk_type is FlushDiskType.SYNC_FLUSH,
            interval_ms=config.flush_interval_commit_log,
            least_pages=config.flush_commit_log_least_pages,
            thorough_interval_ms=config.flush_commit_log_thorough_interval,
            timeout_ms=config.sync_flush_timeout,
        )
        self._logics_flusher = LogicsFlusher(
            self._consume_queue_files,
            self._flush_due,
            self.index.dirty_files if self.index is not None else list,
            lambda: (self._logics_timestamp, self._index_timestamp),
            self.checkpoint,
            self._io_executor,
            interval_ms=config.flush_interval_consume_queue,
            least_pages=config.flush_consume_queue_least_pages,
            thorough_interval_ms=config.flush_consume_queue_thorough_interval,
        )
        self._commit_log_flusher.start()
        self._logics_flusher.start()
        self.check_disk()
        if self.disk_full:
            log.error("the store starts read-only for producers: %s", self.disk_full_reason)
        self.commit_log.start_preallocation(self._io_executor, self._prepare_executor)
        self._retention.start()
        self._disk_task = asyncio.ensure_future(self._watch_disk())
        self.reput_offset = self.commit_log.max_offset
        self._running = True

    def _recover(self, abnormal: bool) -> RecoveryReport:
        """Blocking: recover, then make the result durable and checkpoint it."""
        report = recover(self, abnormal)
        commit_log = self.commit_log
        files = list(commit_log.queue.files)
        for cq in self.consume_queues():
            files.extend(cq.queue.files)
            cq.queue.flushed_where = cq.queue.max_offset
        sync_all(files)
        if self.index is not None:
            sync_all(self.index.dirty_files())
        stamp = 0
        if report.last_record_offset >= 0:
            stamp = commit_log.store_timestamp_at(report.last_record_offset)
        checkpoint = self.checkpoint
        if stamp > 0:
            commit_log.last_store_timestamp = stamp
            checkpoint.physic_timestamp = max(checkpoint.physic_timestamp, stamp)
            checkpoint.logics_timestamp = max(checkpoint.logics_timestamp, stamp)
            checkpoint.index_timestamp = max(checkpoint.index_timestamp, stamp)
        self._logics_timestamp = checkpoint.logics_timestamp
        self._index_timestamp = checkpoint.index_timestamp
        checkpoint.flush()
        return report

    async def shutdown(self) -> None:
        """Stop the tasks, flush everything, checkpoint, remove the abort file, close."""
        if not self._running:
            return
        self._running = False
        await cancel_and_wait(self._disk_task)
        self._disk_task = None
        await self._retention.stop()
        self.commit_log.stop_preallocation()
        if self._commit_log_flusher is not None:
            await self._commit_log_flusher.stop()
        if self._logics_flusher is not None:
            await self._logics_flusher.stop()
        await self.drain_io()
        checkpoint = self.checkpoint
        stamp = self.commit_log.last_store_timestamp
        if self.commit_log.queue.flushed_where >= self.commit_log.max_offset and stamp > 0:
            checkpoint.physic_timestamp = max(checkpoint.physic_timestamp, stamp)
        await asyncio.to_thread(checkpoint.flush)
        for executor in (
            self._flush_executor,
            self._io_executor,
            self._prepare_executor,
            self._queue_file_executor,
        ):
            if executor is not None:
                await asyncio.to_thread(executor.shutdown, True)
        self._close_files()
        flusher = self._commit_log_flusher
        if flusher is None or not flusher.disk_error:
            # After a failed commit-log flush the abort file stays: the next start recovers as
            # after a crash, checking the log record by record.
            remove_abort_file(self.config.root_dir)
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def _close_files(self) -> None:
        self.commit_log.close()
        for cq in self.consume_queues():
            cq.close()
        self._queues.clear()
        self._flush_due.clear()
        if self.index is not None:
            self.index.close()
            self.index.files.clear()
        if self._checkpoint is not None:
            self._checkpoint.close()

    async def drain_io(self) -> None:
        """Wait until files handed to the background for deletion are gone."""
        while self._pending_io:
            pending = list(self._pending_io)
            await asyncio.gather(*(asyncio.wrap_future(f) for f in pending), return_exceptions=True)
            self._pending_io.difference_update(pending)

    def discard(self, item: _Destroyable) -> None:
        """Close and delete a file already removed from its queue, in the background when the
        store runs (unlinking and unmapping a large file can take a while)."""
        executor = self._io_executor
        if executor is None or not self._running:
            item.destroy()
            return
        future = executor.submit(item.destroy)
        self._pending_io.add(future)
        future.add_done_callback(self._pending_io.discard)

    # -- disk space ------------------------------------------------------------------------------

    def _disk_paths(self) -> list[Path]:
        """The store's directories on distinct filesystems (commit log first)."""
        paths = []
        devices = set()
        for path in (self.config.commit_log_dir, self.config.root_dir):
            try:
                device = os.stat(path).st_dev
            except OSError:
                continue
            if device not in devices:
                devices.add(device)
                paths.append(path)
        return paths

    def disk_usage(self) -> list[tuple[Path, float, int]]:
        """``(directory, fraction used, bytes free)`` for each filesystem the store writes."""
        usage = []
        for path in self._disk_paths():
            ratio = disk_used_ratio(str(path))
            try:
                free = free_bytes(path)
            except OSError:
                free = -1
            usage.append((path, ratio, free))
        return usage

    def check_disk(self) -> bool:
        """Look at the disk now; refuse or accept puts accordingly. Returns ``disk_full``.

        Full means: past ``diskSpaceWarningLevelRatio``, or less free than the last allocation
        that failed wanted. ``statvfs`` is one cheap system call, so this runs on the loop."""
        usage = self.disk_usage()
        if not usage:
            return self.disk_full
        limit = self.config.disk_space_warning_level_ratio
        self.stats.disk_used_ratio = usage[0][1]
        problem = ""
        for path, ratio, free in usage:
            if ratio > limit:
                problem = f"{path} is {ratio:.1%} full (diskSpaceWarningLevelRatio {limit:.0%})"
                break
            if 0 <= free < self._space_needed:
                problem = f"{path} has {free} bytes free, a new store file needs {self._space_needed}"
                break
        if problem:
            self._set_disk_full(problem)
        elif self.disk_full:
            log.warning("disk space is back (%s): the store accepts messages again", self._usage_text(usage))
            self.disk_full = False
            self.disk_full_reason = ""
            self._space_needed = 0
        return self.disk_full

    def _set_disk_full(self, reason: str) -> None:
        if not self.disk_full:
            log.error("disk full, the store refuses new messages (reads go on): %s", reason)
        self.disk_full = True
        self.disk_full_reason = reason

    def _on_disk_full(self, exc: DiskFullError) -> None:
        self._space_needed = max(self._space_needed, exc.needed)
        self._set_disk_full(str(exc))

    @staticmethod
    def _usage_text(usage: list[tuple[Path, float, int]]) -> str:
        return ", ".join(f"{path} {ratio:.1%} used, {free} bytes free" for path, ratio, free in usage)

    def disk_full_remark(self) -> str:
        """What a refused producer is told: the broker's disk is full, where, and how full."""
        return (
            "service not available now: the broker's disk is full, no message can be stored "
            f"until space is freed ({self.disk_full_reason}; {self._usage_text(self.disk_usage())})"
        )

    async def _watch_disk(self) -> None:
        while True:
            await asyncio.sleep(DISK_WATCH_FULL_SECONDS if self.disk_full else DISK_WATCH_SECONDS)
            try:
                self.check_disk()
            except Exception:
                log.exception("checking the disk failed")

    # -- consume queues --------------------------------------------------------------------------

    def load_consume_queues(self) -> None:
        """Blocking (recovery): open every consume queue found on disk."""
        root = self.config.consume_queue_dir
        root.mkdir(parents=True, exist_ok=True)
        for topic_entry in os.scandir(root):
            if not topic_entry.is_dir():
                continue
            if topic_entry.name.startswith(_TOMBSTONE_PREFIX):
                shutil.rmtree(topic_entry.path, ignore_errors=True)
                continue
            for queue_entry in os.scandir(topic_entry.path):
                if not (queue_entry.is_dir() and queue_entry.name.isdigit()):
                    continue
                cq = ConsumeQueue(
                    root,
                    topic_entry.name,
                    int(queue_entry.name),
                    self._cq_file_size,
                    flush_due=self._flush_due,
                )
                cq.load()
                if cq.queue.files:
                    self._queues.setdefault(cq.topic, {})[cq.queue_id] = cq

    def consume_queues(self) -> Iterator[ConsumeQueue]:
        for queues in list(self._queues.values()):
            yield from list(queues.values())

    def _consume_queue_files(self) -> list[MappedFileQueue]:
        return [cq.queue for cq in self.consume_queues()]

    def _create_consume_queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        cq = ConsumeQueue(
            self.config.consume_queue_dir, topic, queue_id, self._cq_file_size, flush_due=self._flush_due
        )
        self._queues.setdefault(topic, {})[queue_id] = cq
        return cq

    def consume_queue(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        queues = self._queues.get(topic)
        return queues.get(queue_id) if queues is not None else None

    def room_pending(self, topic: str, queue_id: int, count: int) -> RoomWait | None:
        """For a put of ``count`` messages to ``topic``/``queue_id`` that should not allocate a
        file on the event loop (a client's send): None when the consume-queue file it writes
        into exists (the common case; also when the store would refuse the put anyway), else
        the :class:`RoomWait` to :meth:`~RoomWait.defer` the put to: it runs once the prepare
        worker has made the file, after the puts deferred before it. If the worker failed, the
        put allocates the file itself, or refuses for a full disk.

        A queue's first file is made on its first put (a topic's queues take disk space only
        once used); making one is a few system calls and a millisecond or more on a busy disk,
        which would stall every connection, and a broker with thousands of new queues makes
        thousands of them."""
        executor = self._queue_file_executor
        if executor is None or not self._running or self.disk_full or self._slave:
            return None
        queues = self._queues.get(topic)
        cq = queues.get(queue_id) if queues is not None else None
        if cq is None:
            if self.commit_log.topic_prefix(topic) is None:
                return None  # the put refuses the name
            cq = self._create_consume_queue(topic, queue_id)
        waiting = self._room_waits.get(cq)
        if waiting is not None:
            return waiting  # behind the puts already waiting: the queue keeps the arrival order
        pending = cq.room_pending(count, executor)
        if pending is None:
            return None
        loop = asyncio.get_running_loop()
        waiting = self._room_waits[cq] = RoomWait()

        def run() -> None:
            # One callback: the waiting puts run in order, and a put arriving after it finds
            # no wait; whatever the job's outcome (the puts look again, and allocate or refuse).
            del self._room_waits[cq]
            waiting.run()

        pending.add_done_callback(lambda _job: loop.call_soon_threadsafe(run))
        return waiting

    # -- put -------------------------------------------------------------------------------------

    def put_message(self, msg: StoreMessage) -> PutResult:
        """Append one message and dispatch it; never waits for the disk (see :meth:`wait_flushed`)."""
        return self._put((msg,))

    def put_messages(self, msgs: Sequence[StoreMessage]) -> PutResult:
        """Append a batch for one topic-queue as contiguous records with consecutive queue offsets."""
        if not msgs:
            self.stats.put_message_failures += 1
            return PutResult(PutStatus.MESSAGE_ILLEGAL)
        topic = msgs[0].topic
        queue_id = msgs[0].queue_id
        for msg in msgs:
            if msg.topic != topic or msg.queue_id != queue_id:
                self.stats.put_message_failures += 1
                return PutResult(PutStatus.MESSAGE_ILLEGAL)
        return self._put(msgs)

    def _refuse_disk_full(self) -> PutResult:
        self.stats.put_message_failures += 1
        self.stats.put_refused_disk_full += 1
        return PutResult(PutStatus.SERVICE_NOT_AVAILABLE, remark=self.disk_full_remark())

    def _put(self, msgs: Sequence[StoreMessage]) -> PutResult:
        stats = self.stats
        if self.disk_full and self._running and not self._slave:
            return self._refuse_disk_full()
        if not self._running or self._slave or self.dispatch_failed:
            stats.put_message_failures += 1
            if self._slave:
                return PutResult(
                    PutStatus.SERVICE_NOT_AVAILABLE,
                    remark="service not available now: this broker is a slave (brokerRole=SLAVE), "
                    "messages go to its master",
                )
            return PutResult(PutStatus.SERVICE_NOT_AVAILABLE)
        started = time.perf_counter_ns()
        first = msgs[0]
        topic = first.topic
        queue_id = first.queue_id
        queues = self._queues.get(topic)
        cq = queues.get(queue_id) if queues is not None else None
        queue_offset = cq.max_offset if cq is not None else 0
        now_ms = time.time_ns() // 1_000_000
        if cq is None and self.commit_log.topic_prefix(topic) is None:
            # Checked before the queue (a directory named after the topic) exists.
            stats.put_message_failures += 1
            return PutResult(PutStatus.MESSAGE_ILLEGAL)
        try:
            if cq is None:
                cq = self._create_consume_queue(topic, queue_id)
            # The consume-queue entries' blocks, before anything is appended: a full disk then
            # refuses the put instead of failing its dispatch. (The index takes what room it
            # finds: a key without room is counted, never a reason to refuse the message.)
            cq.make_room(len(msgs))
        except DiskFullError as exc:
            self._on_disk_full(exc)
            return self._refuse_disk_full()
        except OSError as error:
            log.error("cannot create a consume-queue or index file: %s", error)
            stats.put_message_failures += 1
            return PutResult(PutStatus.CREATE_MAPPED_FILE_FAILED)
        appended = self.commit_log.append(msgs, queue_offset, now_ms)
        if isinstance(appended, PutStatus):
            disk_full = self.commit_log.disk_full
            if disk_full is not None:
                self._on_disk_full(disk_full)
                return self._refuse_disk_full()
            stats.put_message_failures += 1
            return PutResult(appended)
        offsets = appended.offsets
        count = len(msgs)
        if self.commit_log.reservations != self._reservations_seen:
            self._reservations_seen = self.commit_log.reservations
            self.check_disk()
        try:
            if count == 1:
                self._dispatch_one(first, cq, queue_offset, appended)
            else:
                self._dispatch_batch(msgs, cq, queue_offset, appended)
        except OSError as failure:
            # The records are in the commit log but not in their consume queue (a file that
            # cannot be created: disk full, too many open files). Like RocketMQ's "logics
            # queue error": refuse puts until a restart dispatches them from the log.
            log.error("cannot write consume-queue or index entries, refusing new messages: %s", failure)
            self.dispatch_failed = True
            stats.put_message_failures += 1
            return PutResult(PutStatus.UNKNOWN_ERROR, appended.wrote_offset, appended.wrote_bytes)
        ids = offset_msg_ids(self._msg_id_host, offsets)
        stats.put_message_times_total += count
        stats.put_message_size_total += appended.wrote_bytes
        stats.on_put_latency(time.perf_counter_ns() - started)
        return PutResult(
            PutStatus.PUT_OK,
            appended.wrote_offset,
            appended.wrote_bytes,
            queue_offset if appended.next_queue_offset > queue_offset else 0,
            count,
            ids,
            appended.store_timestamps[0],
        )

    def _dispatch_one(
        self, msg: StoreMessage, cq: ConsumeQueue | None, queue_offset: int, appended: Appended
    ) -> None:
        offset = appended.offsets[0]
        stamp = appended.store_timestamps[0]
        dispatched = appended.next_queue_offset > queue_offset
        if dispatched:
            if cq is None:
                cq = self._create_consume_queue(msg.topic, msg.queue_id)
            cq.put(offset, appended.sizes[0], msg.tags_code, queue_offset)
            self._logics_timestamp = stamp
        index = self.index
        if index is not None and (msg.keys or msg.uniq_key):
            written = index.build(msg.topic, offset, stamp, msg.sys_flag, msg.keys, msg.uniq_key)
            if written is not None:
                written.write_header()
            # Also past keys the disk had no room for: they are counted, not retried.
            self._index_timestamp = stamp
        if dispatched and self._listeners:
            self._notify(msg.topic, msg.queue_id, ((queue_offset + 1, msg.tags_code),))

    def _dispatch_batch(
        self, msgs: Sequence[StoreMessage], cq: ConsumeQueue | None, queue_offset: int, appended: Appended
    ) -> None:
        first = msgs[0]
        topic = first.topic
        queue_id = first.queue_id
        offsets = appended.offsets
        sizes = appended.sizes
        stamps = appended.store_timestamps
        taken = appended.next_queue_offset - queue_offset
        arrivals: dict[int, int] = {}
        if taken:
            if cq is None:
                cq = self._create_consume_queue(topic, queue_id)
            if taken == len(msgs):
                codes = [m.tags_code for m in msgs]
                cq.put_batch(offsets, sizes, codes, queue_offset)
                if self._listeners:
                    # Each tag code with the queue offset after its last message (later pairs win).
                    arrivals = dict(
                        zip(codes, range(queue_offset + 1, queue_offset + 1 + len(codes)), strict=True)
                    )
            else:
                qoff = queue_offset
                for i, msg in enumerate(msgs):
                    if msg.sys_flag & _TX_MASK not in (_TX_PREPARED, _TX_ROLLBACK):
                        cq.put(offsets[i], sizes[i], msg.tags_code, qoff)
                        qoff += 1
                        arrivals[msg.tags_code] = qoff
            self._logics_timestamp = stamps[-1]
        index = self.index
        if index is not None and index.build_batch(topic, msgs, offsets, stamps):
            self._index_timestamp = stamps[-1]
        if arrivals and self._listeners:
            self._notify(topic, queue_id, sorted((nxt, code) for code, nxt in arrivals.items()))

    def _notify(self, topic: str, queue_id: int, arrivals: Sequence[tuple[int, int]]) -> None:
        listeners = self._topic_listeners.get(topic)
        if listeners is None:
            listeners = tuple(fn for watched, fn in self._listeners if watched is None or watched == topic)
            self._topic_listeners[topic] = listeners
        for next_offset, code in arrivals:
            for listener in listeners:
                try:
                    listener(topic, queue_id, next_offset, code)
                except Exception:
                    log.exception("arrival listener %r failed", listener)

    def dispatch_recovered(self, records: Sequence[ScannedRecord]) -> None:
        """Recovery: rebuild the consume-queue and index entries of verified records (in log
        order)."""
        if not records:
            return
        keys: list[tuple[str, int, int]] = []
        index = self.index
        queues = self._queues
        for offset, size, topic, queue_id, queue_offset, sys_flag, stamp, text in records:
            properties = decode_properties(text)
            tx = sys_flag & _TX_MASK
            if tx != _TX_PREPARED and tx != _TX_ROLLBACK:
                by_id = queues.get(topic)
                cq = by_id.get(queue_id) if by_id is not None else None
                if cq is None:
                    cq = self._create_consume_queue(topic, queue_id)
                cq.put(offset, size, self._recovered_tags_code(topic, stamp, properties), queue_offset)
            if index is not None and tx != _TX_ROLLBACK:
                uniq_key = properties.get(PropertyKey.UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
                if uniq_key:
                    keys.append((f"{topic}#{uniq_key}", offset, stamp))
                message_keys = properties.get(PropertyKey.KEYS)
                if message_keys:
                    for key in message_keys.split(KEY_SEPARATOR):
                        if key:
                            keys.append((f"{topic}#{key}", offset, stamp))
        stamp = records[-1][6]
        self._logics_timestamp = stamp
        if index is not None and keys:
            index.put_items(keys)
            self._index_timestamp = stamp
        self.commit_log.last_store_timestamp = stamp

    def _recovered_tags_code(self, topic: str, store_timestamp: int, properties: dict[str, str]) -> int:
        """The tags code the broker gave at put time: the tag's hash, or for a delayed message
        its delivery time (store time + the delay of its level, clamped to the last level)."""
        if topic == TIMER_TOPIC:
            # A parked timer message: its delivery time, as the timer store put it there.
            deliver = properties.get(TIMER_OUT_MS, "")
            if deliver.isdigit():
                return int(deliver)
        if topic == SCHEDULE_TOPIC:
            level_text = properties.get(PropertyKey.DELAY_TIME_LEVEL)
            if level_text and level_text.lstrip("-").isdigit():
                level = min(int(level_text), len(self._delay_levels))
                if level > 0:
                    return store_timestamp + self._delay_levels[level - 1]
        return tags_code(properties.get(PropertyKey.TAGS))

    def add_arrival_listener(self, fn: ArrivalListener, topic: str | None = None) -> None:
        """``fn(topic, queue_id, next_queue_offset, tags_code)`` after each dispatch (for long
        polling); a batch calls it once per distinct tags code, with the highest offset. With
        ``topic``, only for that topic's arrivals: every send pays for each listener called."""
        self._listeners.append((topic, fn))
        self._topic_listeners.clear()

    async def wait_flushed(self, result: PutResult) -> PutStatus:
        """Under SYNC_FLUSH: PUT_OK once the result's bytes are on disk, FLUSH_DISK_TIMEOUT after
        ``syncFlushTimeout``. Under ASYNC_FLUSH (or for a failed put): the result's status."""
        done: asyncio.Future[PutStatus] = asyncio.get_running_loop().create_future()

        def settle(status: PutStatus) -> None:
            if not done.done():  # the waiting task may have been cancelled
                done.set_result(status)

        self.when_flushed(result, settle)
        return await done

    def when_flushed(self, result: PutResult, callback: Callable[[PutStatus], None]) -> None:
        """:meth:`wait_flushed` as a callback, called once with the status: at once when there
        is nothing to wait for, else from the flush that covers the message (or its timeout).
        The send path answers from it, without a coroutine per put."""
        flusher = self._commit_log_flusher
        if result.status is not PutStatus.PUT_OK or flusher is None or not flusher.sync or not self._running:
            callback(result.status)
            return
        flusher.when_flushed(result.wrote_offset + result.wrote_bytes, callback)

    def flush_settler(self) -> Callable[[], bool] | None:
        """Under SYNC_FLUSH, what the server's connections call between the requests of a
        read to answer the puts a group-commit round covered as soon as it ends
        (:meth:`CommitLogFlusher.settle_ended`); None otherwise. Valid once started."""
        flusher = self._commit_log_flusher
        if flusher is None or not flusher.sync:
            return None
        return flusher.settle_ended

    async def wait_stored(self, result: PutResult) -> PutStatus:
        """What a send that waits for its message (``WAIT=true``) answers: :meth:`wait_flushed`,
        then, on a SYNC_MASTER, the slave's ack (its status wins, as in RocketMQ)."""
        status = await self.wait_flushed(result)
        replica = self.replica
        if replica is None or result.status is not PutStatus.PUT_OK:
            return status
        replicated = await replica.wait(result.wrote_offset + result.wrote_bytes)
        return status if replicated is PutStatus.PUT_OK else replicated

    # -- replication (slave) -------------------------------------------------------------------

    def append_replicated(self, offset: int, data: bytes | memoryview, *, dispatch: bool = True) -> int:
        """A slave: write the master's commit-log bytes at ``offset`` (the end of this log) and
        (unless told not to: :meth:`dispatch_replicated` later) build the consume-queue and
        index entries of every record they complete; returns how many. ValueError when
        ``offset`` is not where this log ends or the bytes are not records where records must
        start (the logs diverged); DiskFullError when no file fits."""
        if not self._running:
            raise StoreError("the message store is not running")
        commit_log = self.commit_log
        was_empty = not commit_log.queue.files
        commit_log.append_raw(offset, data)
        if was_empty:
            self.reput_offset = offset
            log.info("replica: the commit log starts at the master's offset %d", offset)
        return self.dispatch_replicated() if dispatch else 0

    def dispatch_replicated(self) -> int:
        """Dispatch the complete records between ``reput_offset`` and the end of the log.
        Bytes that are not records where one must start are taken back (the log ends at the
        last good record again, so the slave reports its true end) and raise ValueError."""
        try:
            return self._dispatch_replicated()
        except ValueError:
            for mapped in self.commit_log.queue.truncate(self.reput_offset):
                mapped.destroy()
            raise

    def _dispatch_replicated(self) -> int:
        commit_log = self.commit_log
        dispatched = 0
        while True:
            mapped, count, file_ended = commit_log.complete_records(self.reput_offset, _CHUNK)
            if mapped is None:
                break
            if count:
                pos = self.reput_offset - mapped.start
                records, end, _outcome = commit_log.read_run(mapped, pos, False, count)
                if len(records) < count:
                    raise ValueError(f"invalid record at commit-log offset {mapped.start + end}")
                self.dispatch_recovered(records)
                if self._listeners:
                    # Pulls held on the slave wake once per queue and run (RocketMQ's slave
                    # wakes none; a held pull filtering other tags waits for its recheck).
                    last: dict[tuple[str, int], ScannedRecord] = {}
                    for record in records:
                        tx = record[5] & _TX_MASK
                        if tx != _TX_PREPARED and tx != _TX_ROLLBACK:
                            last[(record[2], record[3])] = record
                    for (topic, queue_id), record in last.items():
                        code = self._recovered_tags_code(topic, record[6], decode_properties(record[7]))
                        self._notify(topic, queue_id, ((record[4] + 1, code),))
                dispatched += count
                self.reput_offset = mapped.start + end
            if file_ended:
                self.reput_offset = mapped.end
            elif count < _CHUNK:
                break
        return dispatched

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
        if not self._running:
            raise StoreError("the message store is not running")
        queues = self._queues.get(topic)
        cq = queues.get(queue_id) if queues is not None else None
        commit_log = self.commit_log
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

        config = self.config
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
        stats = self.stats
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
        self.stats.get_message_times_miss += 1
        return GetResult(status, next_offset, min_offset, max_offset)

    # -- offsets and times -----------------------------------------------------------------------

    def get_max_offset(self, topic: str, queue_id: int) -> int:
        """One past the last entry; 0 for unknown queues."""
        cq = self.consume_queue(topic, queue_id)
        return cq.max_offset if cq is not None else 0

    def get_min_offset(self, topic: str, queue_id: int) -> int:
        cq = self.consume_queue(topic, queue_id)
        return cq.min_offset if cq is not None else 0

    def get_offset_by_time(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """The first queue offset whose message was stored at or after ``timestamp_ms``; the max
        offset if every message is older (binary search over the queue)."""
        cq = self.consume_queue(topic, queue_id)
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
        return self.commit_log.store_timestamp_at(entry[0])

    def get_earliest_store_time(self, topic: str, queue_id: int) -> int:
        """Store time of the queue's first message; -1 if none."""
        cq = self.consume_queue(topic, queue_id)
        if cq is None or cq.min_offset >= cq.max_offset:
            return -1
        return self._entry_store_time(cq, cq.min_offset)

    def get_store_time(self, topic: str, queue_id: int, offset: int) -> int:
        """Store time of the message at ``offset``; -1 if there is none."""
        cq = self.consume_queue(topic, queue_id)
        if cq is None or not cq.min_offset <= offset < cq.max_offset:
            return -1
        return self._entry_store_time(cq, offset)

    @property
    def commit_log_min_offset(self) -> int:
        return self.commit_log.min_offset

    @property
    def commit_log_max_offset(self) -> int:
        return self.commit_log.max_offset

    # -- records ---------------------------------------------------------------------------------

    def read_record(
        self, commit_log_offset: int, size: int | None = None, *, check_crc: bool = False
    ) -> bytes | None:
        """The stored record at ``commit_log_offset`` (a copy); None if gone, not a record, or
        (with ``check_crc``) its body fails the CRC."""
        view = self.commit_log.record_at(commit_log_offset, size, check_crc=check_crc)
        return bytes(view) if view is not None else None

    def look_message(self, commit_log_offset: int, *, check_crc: bool = False) -> MessageExt | None:
        """The decoded message at ``commit_log_offset``; None as for :meth:`read_record`."""
        view = self.commit_log.record_at(commit_log_offset, check_crc=check_crc)
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
        cq = self.consume_queue(topic, queue_id)
        return cq.entries(offset, max_count) if cq is not None else []

    def query_by_key(self, topic: str, key: str, max_num: int, begin_ms: int, end_ms: int) -> QueryResult:
        """Records of ``topic`` whose UNIQ_KEY or one of whose KEYS is ``key``, stored within
        [begin_ms, end_ms] (index times have one-second resolution), newest first."""
        result = QueryResult()
        if self.index is None or max_num <= 0:
            return result
        offsets, last_ts, last_phy = self.index.query(topic, key, max_num + 16, begin_ms, end_ms)
        result.index_last_update_timestamp = last_ts
        result.index_last_update_phyoffset = last_phy
        for offset in offsets:
            view = self.commit_log.record_at(offset)
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

    # -- topics ----------------------------------------------------------------------------------

    def topics(self) -> list[str]:
        return list(self._queues)

    def queue_ids(self, topic: str) -> list[int]:
        return sorted(self._queues.get(topic, {}))

    def delete_topic(self, topic: str) -> None:
        """Drop the topic's consume queues (its records stay in the commit log until retention)."""
        self._topic_listeners.pop(topic, None)
        queues = self._queues.pop(topic, None)
        if not queues:
            return
        directory = self.config.consume_queue_dir / topic
        tombstone = directory.with_name(f"{_TOMBSTONE_PREFIX}{topic}-{time.time_ns()}")
        try:
            os.rename(directory, tombstone)
        except OSError:
            tombstone = directory
        files = [mapped for cq in queues.values() for mapped in cq.queue.files]
        files.extend(cq.spare for cq in queues.values() if cq.spare is not None)
        for cq in queues.values():
            cq.drop_preparing()
        self.discard(_Tree(tombstone, files))

    def drop_consume_queue(self, topic: str, queue_id: int) -> None:
        """Drop one consume queue and its files (the records stay in the commit log)."""
        queues = self._queues.get(topic)
        cq = queues.pop(queue_id, None) if queues is not None else None
        if cq is None:
            return
        if not queues:
            self._queues.pop(topic, None)
        files = list(cq.queue.files)
        if cq.spare is not None:
            files.append(cq.spare)
        cq.drop_preparing()
        directory = self.config.consume_queue_dir / topic / str(queue_id)
        self.discard(_Tree(directory, files))

    # -- retention ---------------------------------------------------------------------------------

    def delete_expired_files(self, *, force: bool = False) -> int:
        """Delete commit-log files older than ``fileReservedTime`` now, whatever the hour (with
        ``force``: every file but the last, expired or not), then the consume-queue and index
        files that pointed into them; returns the number of commit-log files deleted."""
        return self._retention.delete_commit_log_files(_now_ms(), immediately=force)

    async def clean_once(self, now_ms: int | None = None) -> int:
        """One periodic retention round now (hour, disk ratio and reserve time apply)."""
        return await self._retention.run_once(now_ms)

    # -- runtime info ------------------------------------------------------------------------------

    def runtime_info(self) -> dict[str, str]:
        """Store figures under RocketMQ's runtime-info names."""
        stats = self.stats
        ratio = stats.disk_used_ratio
        if ratio < 0:
            ratio = disk_used_ratio(str(self.config.commit_log_dir))
        return {
            "putMessageTimesTotal": str(stats.put_message_times_total),
            "putMessageSizeTotal": str(stats.put_message_size_total),
            "putMessageFailedTimes": str(stats.put_message_failures),
            "putMessageAverageLatencyMs": f"{stats.put_latency_avg_ms:.3f}",
            "putMessageMaxLatencyMs": f"{stats.put_latency_max_ns / 1e6:.3f}",
            "getMessageTimesTotalFound": str(stats.get_message_times_found),
            "getMessageTimesTotalMiss": str(stats.get_message_times_miss),
            "getMessageTransferedMsgCount": str(stats.get_message_transferred),
            "commitLogMinOffset": str(self.commit_log_min_offset),
            "commitLogMaxOffset": str(self.commit_log_max_offset),
            "commitLogDiskRatio": f"{ratio:.4f}",
            "consumeQueueDiskRatio": f"{disk_used_ratio(str(self.config.root_dir)):.4f}",
            "diskFull": "true" if self.disk_full else "false",
            "putMessageRefusedDiskFull": str(stats.put_refused_disk_full),
            "unconsumedMessagesDeleted": str(stats.unconsumed_deleted),
            "indexKeysMissed": str(self.index.missed_keys if self.index is not None else 0),
            "dispatchBehindBytes": "0",
            "pageCacheLockTimeMills": "0",
        }


#: Waits of deferred puts whose senders went away, kept until they end.
_UNANSWERED: set[asyncio.Future[Any]] = set()


class RoomWait:
    """Puts to one consume queue waiting for its next file (see
    :meth:`MessageStore.room_pending`), run in the order they were deferred."""

    __slots__ = ("_puts",)

    def __init__(self) -> None:
        self._puts: deque[tuple[Callable[[], Any], asyncio.Future[Any]]] = deque()

    def defer(self, put: Callable[[], T]) -> asyncio.Future[T]:
        """Run ``put`` once the file is made; the future gets what it returns or raises. The
        put runs even if the future is cancelled meanwhile (its sender went away): the
        message was received, so it is stored, as it would have been without the wait."""
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._puts.append((put, future))
        return future

    def run(self) -> None:
        for put, future in self._puts:
            try:
                result = put()
            except Exception as exc:
                if not future.done():
                    future.set_exception(exc)
                continue
            if not future.done():
                future.set_result(result)
            elif inspect.isawaitable(result):
                # Its sender went away: the put's wait (a flush) still runs, unanswered.
                task = asyncio.ensure_future(result)
                _UNANSWERED.add(task)
                task.add_done_callback(_UNANSWERED.discard)
        self._puts.clear()


class _Tree:
    """A directory of mapped files to close and remove (in the background)."""

    def __init__(self, path: Path, files: list[MappedFile]) -> None:
        self.path = path
        self.files = files

    def destroy(self) -> None:
        for mapped in self.files:
            mapped.close()
        shutil.rmtree(self.path, ignore_errors=True)
