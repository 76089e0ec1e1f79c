"""Flushing: forcing what the store wrote through its mappings onto the disk.

* The **commit log** under ASYNC_FLUSH is flushed every ``flushIntervalCommitLog`` (500 ms)
  when at least ``flushCommitLogLeastPages`` (4) pages are dirty, and in full every
  ``flushCommitLogThoroughInterval`` (10 s). Under SYNC_FLUSH it is a **group commit**: a put
  waits (:meth:`CommitLogFlusher.wait`) until a flush covers its bytes; the puts that arrive
  while one ``fdatasync`` runs share the next one. A waiter not covered within
  ``syncFlushTimeout`` gets FLUSH_DISK_TIMEOUT (its message is stored, just not known durable).
* **Consume queues** (and index files, and then the checkpoint) are flushed every
  ``flushIntervalConsumeQueue`` (1 s) when at least ``flushConsumeQueueLeastPages`` (2) pages
  are dirty, in full every ``flushConsumeQueueThoroughInterval`` (60 s), and at shutdown.

``fdatasync`` runs in worker threads, never on the event loop: it releases the GIL and, since
mapped pages live in the page cache, forces what was written through the mapping too
(``mmap.flush`` would hold the GIL for the whole ``msync``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from typing import Protocol

from .checkpoint import Checkpoint
from .mapped_file import MappedFileQueue
from .messages import PutStatus

log = logging.getLogger(__name__)

_SHUTDOWN_ATTEMPTS = 10
#: Group commit: how long the flusher idles between rounds when nobody waits.
_IDLE_ROUND_SECONDS = 0.01


class _Syncable(Protocol):
    def sync(self) -> None: ...


def sync_all(files: Sequence[_Syncable]) -> None:
    """Blocking: force each file to disk."""
    for item in files:
        item.sync()


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class CommitLogFlusher:
    """Flushes the commit log (ASYNC timed flush, or SYNC group commit)."""

    def __init__(
        self,
        queue: MappedFileQueue,
        last_store_timestamp: Callable[[], int],
        checkpoint: Checkpoint,
        executor: concurrent.futures.Executor,
        *,
        sync: bool,
        interval_ms: int,
        least_pages: int,
        thorough_interval_ms: int,
        timeout_ms: int,
    ) -> None:
        self.queue = queue
        self.last_store_timestamp = last_store_timestamp
        self.checkpoint = checkpoint
        self.executor = executor
        self.sync = sync
        self.interval = interval_ms / 1000
        self.least_pages = least_pages
        self.thorough_interval_ms = thorough_interval_ms
        self.timeout = timeout_ms / 1000
        self._waiters: list[tuple[int, asyncio.Future[PutStatus], asyncio.TimerHandle]] = []
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()
        self.flush_count = 0
        self.timeouts = 0

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._run_sync() if self.sync else self._run_async())

    async def stop(self) -> None:
        """Stop the loop, then flush everything (up to 10 attempts) and settle all waiters."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        for _ in range(_SHUTDOWN_ATTEMPTS):
            try:
                await self.flush(0)
            except OSError as exc:
                log.error("final commit-log flush failed: %s", exc)
                continue
            if self.queue.flushed_where >= self.queue.max_offset:
                break
        for _end, future, handle in self._waiters:
            handle.cancel()
            if not future.done():
                future.set_result(PutStatus.FLUSH_DISK_TIMEOUT)
        self._waiters.clear()

    # -- waiting ---------------------------------------------------------------------------------

    async def wait(self, end: int) -> PutStatus:
        """PUT_OK once bytes up to ``end`` are on disk; FLUSH_DISK_TIMEOUT after the timeout."""
        if self.queue.flushed_where >= end:
            return PutStatus.PUT_OK
        loop = asyncio.get_running_loop()
        future: asyncio.Future[PutStatus] = loop.create_future()
        handle = loop.call_later(self.timeout, self._expire, future)
        self._waiters.append((end, future, handle))
        self._wake.set()
        return await future

    def _expire(self, future: asyncio.Future[PutStatus]) -> None:
        if not future.done():
            self.timeouts += 1
            future.set_result(PutStatus.FLUSH_DISK_TIMEOUT)

    def _settle(self) -> None:
        flushed = self.queue.flushed_where
        waiting = []
        for item in self._waiters:
            end, future, handle = item
            if future.done():
                continue
            if end <= flushed:
                handle.cancel()
                future.set_result(PutStatus.PUT_OK)
            else:
                waiting.append(item)
        self._waiters = waiting

    # -- flushing --------------------------------------------------------------------------------

    async def flush(self, least_pages: int) -> bool:
        """One flush round; True if anything was forced."""
        async with self._lock:
            plan = self.queue.flush_plan(least_pages)
            if plan is None:
                self._settle()
                return False
            target, files = plan
            stamp = self.last_store_timestamp()
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(self.executor, sync_all, files)
            if target > self.queue.flushed_where:
                self.queue.flushed_where = target
            if stamp > 0:
                self.checkpoint.physic_timestamp = stamp
            self.flush_count += 1
            self._settle()
            return True

    async def _run_sync(self) -> None:
        while True:
            if not self._waiters:
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), _IDLE_ROUND_SECONDS)
            try:
                await self.flush(0)
            except OSError as exc:
                log.error("commit-log flush failed: %s", exc)
                await asyncio.sleep(_IDLE_ROUND_SECONDS)

    async def _run_async(self) -> None:
        last_thorough = _now_ms()
        while True:
            await asyncio.sleep(self.interval)
            least = self.least_pages
            now = _now_ms()
            if now >= last_thorough + self.thorough_interval_ms:
                last_thorough = now
                least = 0
            try:
                await self.flush(least)
            except OSError as exc:
                log.error("commit-log flush failed: %s", exc)


class LogicsFlusher:
    """Flushes consume queues and index files, then writes the checkpoint."""

    def __init__(
        self,
        queues: Callable[[], Sequence[MappedFileQueue]],
        index_files: Callable[[], Sequence[_Syncable]],
        stamps: Callable[[], tuple[int, int]],
        checkpoint: Checkpoint,
        executor: concurrent.futures.Executor,
        *,
        interval_ms: int,
        least_pages: int,
        thorough_interval_ms: int,
    ) -> None:
        self.queues = queues
        self.index_files = index_files
        self.stamps = stamps
        self.checkpoint = checkpoint
        self.executor = executor
        self.interval = interval_ms / 1000
        self.least_pages = least_pages
        self.thorough_interval_ms = thorough_interval_ms
        self._task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()
        self._written: tuple[int, int, int] | None = None

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        for _ in range(3):
            try:
                await self.flush(0)
                break
            except OSError as exc:
                log.error("final consume-queue flush failed: %s", exc)

    async def flush(self, least_pages: int) -> None:
        async with self._lock:
            # Timestamps first: whatever they cover is written by now, so the flush below
            # covers it too.
            logics_stamp, index_stamp = self.stamps()
            plans: list[tuple[MappedFileQueue, int]] = []
            files: list[_Syncable] = []
            for queue in self.queues():
                plan = queue.flush_plan(least_pages)
                if plan is not None:
                    plans.append((queue, plan[0]))
                    files.extend(plan[1])
            files.extend(self.index_files())
            loop = asyncio.get_running_loop()
            if files:
                await loop.run_in_executor(self.executor, sync_all, files)
                for queue, target in plans:
                    if target > queue.flushed_where:
                        queue.flushed_where = target
            checkpoint = self.checkpoint
            if logics_stamp > checkpoint.logics_timestamp:
                checkpoint.logics_timestamp = logics_stamp
            if index_stamp > checkpoint.index_timestamp:
                checkpoint.index_timestamp = index_stamp
            stamps = (checkpoint.physic_timestamp, checkpoint.logics_timestamp, checkpoint.index_timestamp)
            if stamps != self._written:
                await loop.run_in_executor(self.executor, checkpoint.flush, stamps)
                self._written = stamps

    async def _run(self) -> None:
        last_thorough = 0
        while True:
            await asyncio.sleep(self.interval)
            least = self.least_pages
            now = _now_ms()
            if now >= last_thorough + self.thorough_interval_ms:
                last_thorough = now
                least = 0
            try:
                await self.flush(least)
            except OSError as exc:
                log.error("consume-queue flush failed: %s", exc)
