"""Compiled with mypyc (aiorocketmq/compiled.py, which lists the rules): declared, typed
attributes only; no monkeypatching, setattr or frame tricks; no await in except/finally.

The store's background work: its worker threads, the two flushers (commit log; consume queues,
index and checkpoint) and what a put waits for from them, and the deletion of files in the
background.

Apart from the store because it exists only while the store runs (:meth:`Workers.start` at
the end of a start, :meth:`Workers.stop_flushers` and :meth:`Workers.stop_threads` in a
shutdown); the store keeps the order of those steps. Blocking calls go to threads so the event
loop never waits on the disk: ``store-flush`` for commit-log ``fdatasync`` (latency matters
under SYNC_FLUSH), ``store-io`` for the rest (consume-queue flushes, preparations, deletions),
``store-prepare`` for the commit log's next stretch, and ``store-queue-files`` for the
consume-queue files sends wait for.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable
from typing import Protocol

from .checkpoint import Checkpoint
from .commit_log import CommitLog
from .config import FlushDiskType, StoreConfig
from .dispatch import Dispatcher
from .flush import CommitLogFlusher, LogicsFlusher
from .index import Index
from .messages import PutResult, PutStatus
from .queues import QUEUE_FILE_THREADS, QueueRegistry


def _never() -> bool:
    """A store without an index has no index file to sync."""
    return False


class Destroyable(Protocol):
    def destroy(self) -> None: ...


class Workers:
    """Threads and flushers of a running store (None while it is stopped)."""

    def __init__(self) -> None:
        self.flush_executor: concurrent.futures.ThreadPoolExecutor | None = None
        self.io_executor: concurrent.futures.ThreadPoolExecutor | None = None
        #: Prepares the commit log's next stretch (reserves it, faults it in). Its own thread, so
        #: that it never queues behind the flushes, preparations and deletions on ``io_executor``.
        self.prepare_executor: concurrent.futures.ThreadPoolExecutor | None = None
        #: Makes the consume-queue files sends wait for (see :meth:`.store.MessageStore.room_pending`).
        self.queue_file_executor: concurrent.futures.ThreadPoolExecutor | None = None
        self.commit_log_flusher: CommitLogFlusher | None = None
        self.logics_flusher: LogicsFlusher | None = None
        self._pending_io: set[concurrent.futures.Future[None]] = set()

    def start(
        self,
        config: StoreConfig,
        commit_log: CommitLog,
        queues: QueueRegistry,
        index: Index | None,
        dispatcher: Dispatcher,
        checkpoint: Checkpoint,
    ) -> None:
        """Make the threads, then make and start the flushers."""
        self.flush_executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="store-flush")
        self.io_executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="store-io")
        self.prepare_executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="store-prepare")
        # Several threads: making a queue's first file is mostly waiting on the filesystem's
        # metadata (a directory and a file created: 0.3-0.6 ms on the development VM), and a
        # producer starting on a topic of a thousand new queues waits for a thousand of them.
        self.queue_file_executor = concurrent.futures.ThreadPoolExecutor(
            QUEUE_FILE_THREADS, thread_name_prefix="store-queue-files"
        )
        self.commit_log_flusher = CommitLogFlusher(
            commit_log.queue,
            lambda: commit_log.last_store_timestamp,
            checkpoint,
            self.flush_executor,
            sync=config.flush_disk_type is FlushDiskType.SYNC_FLUSH,
            interval_ms=config.flush_interval_commit_log,
            least_pages=config.flush_commit_log_least_pages,
            thorough_interval_ms=config.flush_commit_log_thorough_interval,
            timeout_ms=config.sync_flush_timeout,
        )
        self.logics_flusher = LogicsFlusher(
            queues.files,
            queues.flush_due,
            index.dirty_files if index is not None else list,
            index.full_file_dirty if index is not None else _never,
            lambda: (dispatcher.logics_timestamp, dispatcher.index_timestamp),
            checkpoint,
            self.io_executor,
            interval_ms=config.flush_interval_consume_queue,
            least_pages=config.flush_consume_queue_least_pages,
            thorough_interval_ms=config.flush_consume_queue_thorough_interval,
        )
        self.commit_log_flusher.start()
        self.logics_flusher.start()

    async def stop_flushers(self) -> None:
        """Stop both flushers (each flushes what it has first), then wait for the deletions."""
        if self.commit_log_flusher is not None:
            await self.commit_log_flusher.stop()
        if self.logics_flusher is not None:
            await self.logics_flusher.stop()
        await self.drain_io()

    async def stop_threads(self) -> None:
        for executor in (
            self.flush_executor,
            self.io_executor,
            self.prepare_executor,
            self.queue_file_executor,
        ):
            if executor is not None:
                await asyncio.to_thread(executor.shutdown, True)

    @property
    def flush_failed(self) -> bool:
        """Whether the commit-log flusher ran into a disk error."""
        flusher = self.commit_log_flusher
        return flusher is not None and bool(flusher.disk_error)

    async def drain_io(self) -> None:
        """Wait until files handed to the background for deletion are gone."""
        while self._pending_io:
            pending = list(self._pending_io)
            await asyncio.gather(*(asyncio.wrap_future(f) for f in pending), return_exceptions=True)
            self._pending_io.difference_update(pending)

    def discard(self, item: Destroyable, running: bool) -> None:
        """Close and delete a file already removed from its queue, in the background when the
        store runs (unlinking and unmapping a large file can take a while)."""
        executor = self.io_executor
        if executor is None or not running:
            item.destroy()
            return
        future = executor.submit(item.destroy)
        self._pending_io.add(future)
        future.add_done_callback(self._pending_io.discard)

    # -- what a put waits for --------------------------------------------------------------------

    async def wait_flushed(self, result: PutResult, running: bool) -> PutStatus:
        """:meth:`.store.MessageStore.wait_flushed`."""
        done: asyncio.Future[PutStatus] = asyncio.get_running_loop().create_future()

        def settle(status: PutStatus) -> None:
            if not done.done():  # the waiting task may have been cancelled
                done.set_result(status)

        self.when_flushed(result, settle, running)
        return await done

    def when_flushed(self, result: PutResult, callback: Callable[[PutStatus], None], running: bool) -> None:
        """:meth:`.store.MessageStore.when_flushed`."""
        flusher = self.commit_log_flusher
        if result.status is not PutStatus.PUT_OK or flusher is None or not flusher.sync or not running:
            callback(result.status)
            return
        flusher.when_flushed(result.wrote_offset + result.wrote_bytes, callback)

    def flush_settler(self) -> Callable[[], bool] | None:
        """:meth:`.store.MessageStore.flush_settler`."""
        flusher = self.commit_log_flusher
        if flusher is None or not flusher.sync:
            return None
        return flusher.settle_ended
