"""Compiled with mypyc (aiorocketmq/compiled.py, which lists the rules): declared, typed
attributes only; no monkeypatching, setattr or frame tricks; no await in except/finally.

The message store: the broker's one entry point to commit log, consume queues and index.

Everything synchronous runs on the event-loop thread: a put appends the records, writes their
consume-queue and index entries and tells the arrival listeners, all before it returns; reads
(``get_messages`` and the lookups) answer from the mapped files. Background work (flushing,
preallocating the next commit-log file, deleting files) runs as asyncio tasks that hand every
blocking call to one of two worker threads: one for commit-log ``fdatasync`` (latency matters
under SYNC_FLUSH), one for everything else.

:class:`MessageStore` is the facade: it owns the lifecycle (start, recovery, shutdown, the
worker threads and flushers) and the waits after a put, and hands the rest
to one part per domain, each in its own module:

* :mod:`.append` -- a put: checked, refused, or appended and handed to the dispatch;
* :mod:`.queues` -- the consume queues by topic and queue id, and making their files;
* :mod:`.dispatch` -- consume-queue entries, index keys and arrival notices after an append,
  at recovery and on a slave;
* :mod:`.reads` -- ``get_messages`` and the lookups by offset, time and key;
* :mod:`.disk` -- the disk-full state and its watch;
* :mod:`.store_stats` -- the counters and the runtime info;
* :mod:`.workers` -- the worker threads, the flushers and what a put waits for from them;
* :mod:`.recovery` and :mod:`.retention` -- start-up and deleting old files.

Controller mode limits what is dispatched to the *confirm offset*
(:meth:`MessageStore.limit_dispatch`, RocketMQ's ``getReputEndOffset``): records past it are
stored but not visible to consumers until the replication confirms them
(:meth:`MessageStore.dispatch_confirmed`); the confirm offset is kept in the checkpoint and
bounds what recovery dispatches.

The put and the pull each make one call into a part per request; none adds a call per message.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Protocol

from aiorocketmq.protocol.message import MessageExt

from .append import Appender
from .checkpoint import Checkpoint, DirectoryLock, abort_file_exists, create_abort_file, remove_abort_file
from .commit_log import CommitLog, ScannedRecord
from .config import BrokerRole, StoreConfig
from .consume_queue import ConsumeQueue
from .disk import DiskGuard
from .dispatch import ArrivalListener, Dispatcher
from .flush import CommitLogFlusher
from .index import Index
from .mapped_file import MappedFileQueue, StoreError
from .messages import GetResult, PutResult, PutStatus, QueryResult, StoreMessage
from .queues import QueueRegistry, RoomWait
from .reads import Reader
from .recovery import RecoveryReport, recover_and_checkpoint
from .retention import Retention
from .store_stats import StoreStats, runtime_info
from .workers import Destroyable, Workers

log = logging.getLogger(__name__)

#: ``(group, topic, queue id, next queue offset to consume)`` of every subscribed group: what
#: forced clean-up must not delete unless the operator said so (``cleanFileForciblyEnable``).
ConsumerProgress = Callable[[], Iterable[tuple[str, str, int, int]]]


class ReplicaWait(Protocol):
    """A SYNC_MASTER's replication: PUT_OK once a slave holds the log up to ``end_offset``,
    else FLUSH_SLAVE_TIMEOUT or SLAVE_NOT_AVAILABLE."""

    async def wait(self, end_offset: int) -> PutStatus: ...


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
        #: Whether puts are refused for lack of space (:attr:`disk_full`, :meth:`check_disk`).
        self.disk = DiskGuard(config, self.stats)
        #: Set by the broker: the consumption the forced clean-up protects.
        self.consumer_progress: ConsumerProgress | None = None
        self.recovery: RecoveryReport | None = None
        self.queues = QueueRegistry(config, self.commit_log)
        self.dispatcher = Dispatcher(self.queues, self.commit_log, self.index, config.delay_levels)
        self._running = False
        self._slave = config.broker_role is BrokerRole.SLAVE
        #: A SLAVE's store takes only replicated bytes, never puts.
        self.is_slave = self._slave
        self.reader = Reader(
            config,
            self.commit_log,
            self.queues,
            self.index,
            self.stats,
            correct_offsets=not self._slave or config.offset_check_in_slave,
        )
        self.appender = Appender(
            self.commit_log,
            self.queues,
            self.dispatcher,
            self.disk,
            self.stats,
            store_host=store_host,
            slave=self._slave,
        )
        self._checkpoint: Checkpoint | None = None
        self._lock: DirectoryLock | None = None
        #: The threads and flushers (see :mod:`.workers`).
        self.workers = Workers()
        self._retention = Retention(self)
        #: SYNC_MASTER: what a waiting send also awaits after the flush (the slave's ack).
        self.replica: ReplicaWait | None = None
        #: Recovery under a dispatch limit: records ending past this are held (-1: no limit),
        #: and the first of them (-1: none).
        self._recovery_bound = -1
        self._held_from = -1

    # -- state kept by the parts -------------------------------------------------------------------

    @property
    def disk_full(self) -> bool:
        """Puts are refused for lack of space: the disk passed ``diskSpaceWarningLevelRatio``,
        or a file the store needed could not be allocated (:meth:`check_disk` decides)."""
        return self.disk.full

    @disk_full.setter
    def disk_full(self, value: bool) -> None:
        self.disk.full = value

    @property
    def disk_full_reason(self) -> str:
        return self.disk.reason

    @property
    def dispatch_failed(self) -> bool:
        """Set when a put could not write its consume-queue entries; puts are refused after."""
        return self.appender.dispatch_failed

    @property
    def reput_offset(self) -> int:
        """A slave: where dispatching replicated records stands in the commit log."""
        return self.dispatcher.reput_offset

    @reput_offset.setter
    def reput_offset(self, value: int) -> None:
        dispatcher = self.dispatcher
        dispatcher.reput_offset = value
        # Under a limit, records may be held past it now, their queue offsets unknown.
        dispatcher.holding = True
        dispatcher.held_known = False

    # -- the dispatch limit (controller mode) ---------------------------------------------------

    def limit_dispatch(
        self, confirm: Callable[[], int] | None, on_held: Callable[[], None] | None = None
    ) -> None:
        """Controller mode: dispatch (consume queues, index, arrival listeners) only the records
        that end at or before ``confirm()``, the confirm offset (RocketMQ's reput end offset);
        the others are held until :meth:`dispatch_confirmed` finds it past them. ``on_held`` is
        called after a put was held. Ignored with ``readUnCommitted=true``; None removes the
        limit. Set before :meth:`start`, recovery dispatches no record past the confirm offset
        the checkpoint kept."""
        if confirm is not None and self.config.read_un_committed:
            log.info("readUnCommitted=true: messages are visible before every replica has them")
            confirm = None
        dispatcher = self.dispatcher
        if self._running and dispatcher.limit is None and confirm is not None:
            # Every record so far was dispatched as it was stored.
            dispatcher.reput_offset = dispatcher.confirmed = self.commit_log.max_offset
            dispatcher.holding = False
            dispatcher.held_next.clear()
            dispatcher.held_known = True
        dispatcher.limit = confirm
        dispatcher.on_held = on_held if confirm is not None else None
        if self._checkpoint is not None:
            self._checkpoint.confirm_source = self._confirmed if confirm is not None else None
        if self._running and confirm is None and dispatcher.holding:
            dispatcher.holding = False
            self.dispatch_replicated()

    @property
    def dispatch_limited(self) -> bool:
        """Whether a dispatch limit is set (:meth:`limit_dispatch`)."""
        return self.dispatcher.limit is not None

    @property
    def confirm_offset(self) -> int:
        """Under a limit: the confirm offset as last seen (at start, the one the checkpoint
        kept, within the log)."""
        return self.dispatcher.confirmed

    def dispatch_confirmed(self) -> int:
        """Under a limit: the confirm offset moved; dispatch the held records it now covers,
        in log order, and tell the arrival listeners (long polling, POP) as for a put.
        Returns how many records were dispatched."""
        dispatcher = self.dispatcher
        limit = dispatcher.limit
        if limit is None or not self._running:
            return 0
        if not dispatcher.holding:
            dispatcher.confirmed = limit()
            return 0
        try:
            return self.dispatch_replicated()
        except ValueError as invalid:
            log.error("cannot dispatch held records: %s", invalid)
        except OSError as failure:
            log.error("cannot write consume-queue or index entries, refusing new messages: %s", failure)
            self.appender.dispatch_failed = True
        return 0

    def held_records_end(self) -> int:
        """Where the whole records after :attr:`reput_offset` end (before a torn or invalid
        tail), none of them dispatched; their queue offsets are noted for puts."""
        return self.dispatcher.scan_held()

    @property
    def _io_executor(self) -> concurrent.futures.ThreadPoolExecutor | None:
        return self.workers.io_executor

    @property
    def _commit_log_flusher(self) -> CommitLogFlusher | None:
        return self.workers.commit_log_flusher

    @property
    def _flush_due(self) -> set[MappedFileQueue]:
        return self.queues.flush_due

    @property
    def _topic_listeners(self) -> dict[str, tuple[ArrivalListener, ...]]:
        return self.dispatcher.topic_listeners

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
            if self.dispatcher.limit is not None:
                self._recovery_bound = self._checkpoint.confirm_offset
                self._held_from = -1
            abnormal = abort_file_exists(root)
            self.recovery = await asyncio.to_thread(recover_and_checkpoint, self, abnormal)
            await asyncio.to_thread(create_abort_file, root)
        except BaseException:
            self._close_files()
            self._lock.release()
            self._lock = None
            raise
        workers = self.workers
        workers.start(self.config, self.commit_log, self.queues, self.index, self.dispatcher, self.checkpoint)
        self.check_disk()
        if self.disk_full:
            log.error("the store starts read-only for producers: %s", self.disk_full_reason)
        assert workers.io_executor is not None and workers.prepare_executor is not None
        self.commit_log.start_preallocation(workers.io_executor, workers.prepare_executor)
        self._retention.start()
        self.disk.start()
        dispatcher = self.dispatcher
        end = self.commit_log.max_offset
        dispatcher.reput_offset = end
        if dispatcher.limit is not None:
            held = self._held_from
            if 0 <= held < end:
                dispatcher.reput_offset = held
                dispatcher.holding = True
                dispatcher.held_known = False
            self._recovery_bound = -1
        self._running = True

    def recovered(self, logics_timestamp: int, index_timestamp: int) -> None:
        """Recovery: where the consume queues and the index stand (the checkpoint's times);
        under a limit, the kept confirm offset brought within the log (as RocketMQ does)."""
        dispatcher = self.dispatcher
        dispatcher.logics_timestamp = logics_timestamp
        dispatcher.index_timestamp = index_timestamp
        if dispatcher.limit is not None:
            checkpoint = self.checkpoint
            commit_log = self.commit_log
            confirmed = min(max(checkpoint.confirm_offset, commit_log.min_offset), commit_log.max_offset)
            if confirmed != checkpoint.confirm_offset:
                log.warning(
                    "confirm offset %d corrected to %d (the commit log holds [%d, %d))",
                    checkpoint.confirm_offset,
                    confirmed,
                    commit_log.min_offset,
                    commit_log.max_offset,
                )
            dispatcher.confirmed = checkpoint.confirm_offset = confirmed
            checkpoint.confirm_source = self._confirmed

    async def shutdown(self) -> None:
        """Stop the tasks, flush everything, checkpoint, remove the abort file, close."""
        if not self._running:
            return
        self._running = False
        await self.disk.stop()
        await self._retention.stop()
        self.commit_log.stop_preallocation()
        await self.workers.stop_flushers()
        checkpoint = self.checkpoint
        stamp = self.commit_log.last_store_timestamp
        if self.commit_log.queue.flushed_where >= self.commit_log.max_offset and stamp > 0:
            checkpoint.physic_timestamp = max(checkpoint.physic_timestamp, stamp)
        await asyncio.to_thread(checkpoint.flush)
        await self.workers.stop_threads()
        self._close_files()
        if not self.workers.flush_failed:
            # After a failed commit-log flush the abort file stays: the next start recovers as
            # after a crash, checking the log record by record.
            remove_abort_file(self.config.root_dir)
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def _close_files(self) -> None:
        self.commit_log.close()
        self.queues.close()
        if self.index is not None:
            self.index.close()
            self.index.files.clear()
        if self._checkpoint is not None:
            self._checkpoint.close()

    async def drain_io(self) -> None:
        """Wait until files handed to the background for deletion are gone."""
        await self.workers.drain_io()

    def discard(self, item: Destroyable) -> None:
        """Close and delete a file already removed from its queue, in the background when the
        store runs (unlinking and unmapping a large file can take a while)."""
        self.workers.discard(item, self._running)

    # -- disk space ------------------------------------------------------------------------------

    def disk_usage(self) -> list[tuple[Path, float, int]]:
        """``(directory, fraction used, bytes free)`` for each filesystem the store writes."""
        return self.disk.usage()

    def check_disk(self) -> bool:
        """Look at the disk now; refuse or accept puts accordingly. Returns ``disk_full``
        (see :meth:`.disk.DiskGuard.check`)."""
        return self.disk.check()

    def disk_full_remark(self) -> str:
        """What a refused producer is told: the broker's disk is full, where, and how full."""
        return self.disk.remark()

    # -- consume queues --------------------------------------------------------------------------

    def load_consume_queues(self) -> None:
        """Blocking (recovery): open every consume queue found on disk."""
        self.queues.load()

    def consume_queues(self) -> Iterator[ConsumeQueue]:
        return self.queues.all()

    def consume_queue(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        return self.queues.get(topic, queue_id)

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
        executor = self.workers.queue_file_executor
        if executor is None or not self._running or self.disk.full or self._slave:
            return None
        return self.queues.room_pending(topic, queue_id, count, executor)

    # -- put -------------------------------------------------------------------------------------

    def put_message(self, msg: StoreMessage) -> PutResult:
        """Append one message and dispatch it; never waits for the disk (see :meth:`wait_flushed`)."""
        return self.appender.put((msg,), self._running)

    def put_messages(self, msgs: Sequence[StoreMessage]) -> PutResult:
        """Append a batch for one topic-queue as contiguous records with consecutive queue offsets."""
        return self.appender.put_batch(msgs, self._running)

    def dispatch_recovered(self, records: Sequence[ScannedRecord]) -> None:
        """Recovery: rebuild the consume-queue and index entries of verified records (in log
        order); under a limit, only of those that end at or before the kept confirm offset."""
        bound = self._recovery_bound
        if bound >= 0 and records and records[-1][0] + records[-1][1] > bound:
            kept = [record for record in records if record[0] + record[1] <= bound]
            if self._held_from < 0:
                self._held_from = records[len(kept)][0]
            records = kept
        self.dispatcher.dispatch_recovered(records)

    def _confirmed(self) -> int:
        return self.dispatcher.confirmed

    def add_arrival_listener(self, fn: ArrivalListener, topic: str | None = None) -> None:
        """``fn(topic, queue_id, next_queue_offset, tags_code)`` after each dispatch (for long
        polling); a batch calls it once per distinct tags code, with the highest offset. With
        ``topic``, only for that topic's arrivals: every send pays for each listener called."""
        self.dispatcher.add_listener(fn, topic)

    async def wait_flushed(self, result: PutResult) -> PutStatus:
        """Under SYNC_FLUSH: PUT_OK once the result's bytes are on disk, FLUSH_DISK_TIMEOUT after
        ``syncFlushTimeout``. Under ASYNC_FLUSH (or for a failed put): the result's status."""
        return await self.workers.wait_flushed(result, self._running)

    def when_flushed(self, result: PutResult, callback: Callable[[PutStatus], None]) -> None:
        """:meth:`wait_flushed` as a callback, called once with the status: at once when there
        is nothing to wait for, else from the flush that covers the message (or its timeout).
        The send path answers from it, without a coroutine per put."""
        self.workers.when_flushed(result, callback, self._running)

    def flush_settler(self) -> Callable[[], bool] | None:
        """Under SYNC_FLUSH, what the server's connections call between the requests of a
        read to answer the puts a group-commit round covered as soon as it ends
        (:meth:`CommitLogFlusher.settle_ended`); None otherwise. Valid once started."""
        return self.workers.flush_settler()

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
            self.dispatcher.reput_offset = offset
            log.info("replica: the commit log starts at the master's offset %d", offset)
        return self.dispatch_replicated() if dispatch else 0

    def dispatch_replicated(self) -> int:
        """Dispatch the complete records between ``reput_offset`` and the end of the log.
        Bytes that are not records where one must start are taken back (the log ends at the
        last good record again, so the slave reports its true end) and raise ValueError."""
        dispatcher = self.dispatcher
        try:
            return dispatcher.dispatch_replicated()
        except ValueError:
            # Under a limit, whole records held before the bad bytes stay.
            end = dispatcher.scan_held() if dispatcher.limit is not None else dispatcher.reput_offset
            for mapped in self.commit_log.queue.truncate(end):
                mapped.destroy()
            raise

    # -- reads (see :mod:`.reads`) -------------------------------------------------------------------

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
        """Up to ``max_count`` records of a queue from ``offset`` (:meth:`.reads.Reader.get_messages`);
        StoreError when the store is not running."""
        if not self._running:
            raise StoreError("the message store is not running")
        return self.reader.get_messages(group, topic, queue_id, offset, max_count, tag_codes, record_filter)

    def get_max_offset(self, topic: str, queue_id: int) -> int:
        """One past the last entry; 0 for unknown queues."""
        return self.reader.get_max_offset(topic, queue_id)

    def get_min_offset(self, topic: str, queue_id: int) -> int:
        return self.reader.get_min_offset(topic, queue_id)

    def get_offset_by_time(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """The first queue offset whose message was stored at or after ``timestamp_ms``; the max
        offset if every message is older."""
        return self.reader.get_offset_by_time(topic, queue_id, timestamp_ms)

    def get_earliest_store_time(self, topic: str, queue_id: int) -> int:
        """Store time of the queue's first message; -1 if none."""
        return self.reader.get_earliest_store_time(topic, queue_id)

    def get_store_time(self, topic: str, queue_id: int, offset: int) -> int:
        """Store time of the message at ``offset``; -1 if there is none."""
        return self.reader.get_store_time(topic, queue_id, offset)

    @property
    def commit_log_min_offset(self) -> int:
        return self.commit_log.min_offset

    @property
    def commit_log_max_offset(self) -> int:
        return self.commit_log.max_offset

    def read_record(
        self, commit_log_offset: int, size: int | None = None, *, check_crc: bool = False
    ) -> bytes | None:
        """The stored record at ``commit_log_offset`` (a copy); None if gone, not a record, or
        (with ``check_crc``) its body fails the CRC."""
        return self.reader.read_record(commit_log_offset, size, check_crc=check_crc)

    def look_message(self, commit_log_offset: int, *, check_crc: bool = False) -> MessageExt | None:
        """The decoded message at ``commit_log_offset``; None as for :meth:`read_record`."""
        return self.reader.look_message(commit_log_offset, check_crc=check_crc)

    def read_consume_queue(
        self, topic: str, queue_id: int, offset: int, max_count: int
    ) -> list[tuple[int, int, int]]:
        """``(commit-log offset, size, tags code)`` entries from ``offset``; [] outside [min, max)."""
        return self.reader.read_consume_queue(topic, queue_id, offset, max_count)

    def query_by_key(self, topic: str, key: str, max_num: int, begin_ms: int, end_ms: int) -> QueryResult:
        """Records of ``topic`` whose UNIQ_KEY or one of whose KEYS is ``key``, stored within
        [begin_ms, end_ms], newest first."""
        return self.reader.query_by_key(topic, key, max_num, begin_ms, end_ms)

    # -- topics ----------------------------------------------------------------------------------

    def topics(self) -> list[str]:
        return list(self.queues.by_topic)

    def queue_ids(self, topic: str) -> list[int]:
        return sorted(self.queues.by_topic.get(topic, {}))

    def delete_topic(self, topic: str) -> None:
        """Drop the topic's consume queues (its records stay in the commit log until retention)."""
        self.dispatcher.forget_topic(topic)
        tree = self.queues.remove_topic(topic)
        if tree is not None:
            self.discard(tree)

    def drop_consume_queue(self, topic: str, queue_id: int) -> None:
        """Drop one consume queue and its files (the records stay in the commit log)."""
        tree = self.queues.remove_queue(topic, queue_id)
        if tree is not None:
            self.discard(tree)

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
        """Store figures under RocketMQ's runtime-info names (:func:`.store_stats.runtime_info`)."""
        return runtime_info(self.stats, self.config, self.commit_log, self.index, self.disk.full)
