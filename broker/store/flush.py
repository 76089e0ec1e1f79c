"""Compiled with mypyc (aiorocketmq/compiled.py, which lists the rules): declared, typed
attributes only; no monkeypatching, setattr or frame tricks; no await in except/finally.

Flushing: forcing what the store wrote through its mappings onto the disk.

* The **commit log** under ASYNC_FLUSH is flushed every ``flushIntervalCommitLog`` (500 ms)
  when at least ``flushCommitLogLeastPages`` (4) pages are dirty, and in full every
  ``flushCommitLogThoroughInterval`` (10 s). Under SYNC_FLUSH it is a **group commit**: a put
  waits (:meth:`CommitLogFlusher.when_flushed`) until a flush covers its bytes; the puts that arrive
  while one ``fdatasync`` runs share the next one. A waiter not covered within
  ``syncFlushTimeout`` gets FLUSH_DISK_TIMEOUT (its message is stored, just not known durable).
  The rounds run on a :class:`GroupSync` thread of their own, one straight after another, as
  Apache's GroupCommitService does.
* **Consume queues** (and index files, and then the checkpoint) are flushed every
  ``flushIntervalConsumeQueue`` (1 s) when at least ``flushConsumeQueueLeastPages`` (2) pages
  are dirty, in full every ``flushConsumeQueueThoroughInterval`` (60 s), and at shutdown.

``fdatasync`` runs in worker threads, never on the event loop: it releases the GIL and, since
mapped pages live in the page cache, forces what was written through the mapping too
(``mmap.flush`` would hold the GIL for the whole ``msync``).

The group commit's thread is the compiled ``GroupSync`` when the compiled codecs are active: a
POSIX thread that never takes the GIL. Measured under 64 Java writers, a round through a
thread-pool job spent 0.35 ms beyond its ``fdatasync`` (waking the worker, taking the GIL back,
handing the result to the loop) and waited 0.2 ms more for a turn of the loop before the next
round could start: more than the 0.3 ms the disk took. :class:`PureGroupSync` is its twin in
Python, with the same contract.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import errno
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import Protocol

from aiorocketmq.protocol.loop import cancel_and_wait
from aiorocketmq.protocol.speedups import compiled as _compiled

from .checkpoint import Checkpoint
from .mapped_file import MappedFile, MappedFileQueue
from .messages import PutStatus

log = logging.getLogger(__name__)

_SHUTDOWN_ATTEMPTS = 10
_INT_MAX = 2**31 - 1
#: Past any log offset.
_ALL = 2**63
#: Group commit: how long the flusher idles between rounds when nobody waits.
_IDLE_ROUND_SECONDS = 0.01
#: A thorough consume-queue round plans this many queues between turns of the event loop.
_PLAN_CHUNK = 1000


class _Syncable(Protocol):
    def sync(self) -> None: ...


def sync_all(files: Sequence[_Syncable]) -> None:
    """Blocking: force each file to disk."""
    for item in files:
        item.sync()


class GroupSyncThread(Protocol):
    """What the flusher uses of a group commit thread: :class:`PureGroupSync` or the compiled
    ``GroupSync`` (a C type, so the compiled flusher must not expect the Python class)."""

    def fileno(self) -> int: ...
    def submit(self, fds: tuple[int, ...], directory: int = -1) -> None: ...
    def ended(self) -> int: ...
    def collect(self) -> tuple[int, int, int, int]: ...
    def close(self) -> None: ...


class PureGroupSync:
    """The group commit's disk thread, in Python (the compiled ``GroupSync`` has the same
    contract). :meth:`submit` hands over files to ``fdatasync`` (and a directory to ``fsync``
    after them); the thread syncs, in one round, all that was handed over since its last, then
    records how many hand-overs (the first N) that round had taken, as covered or as failed,
    and writes a byte to a pipe (:meth:`fileno`) the loop watches; :meth:`collect` reads it.
    Counting hand-overs rather than offsets keeps a round from covering bytes written after it
    started; the flusher drops what is in flight when the log is cut back."""

    def __init__(self) -> None:
        self._rfd, self._wfd = os.pipe()
        os.set_blocking(self._rfd, False)
        os.set_blocking(self._wfd, False)
        self._cond = threading.Condition()
        self._fds: list[int] = []
        self._directory = -1
        self._handed = 0
        self._pending = False
        self._covered = 0
        self._failed = 0
        self._rounds = 0
        self._ended = 0
        self._error = 0
        self._stop = False
        self._worker: threading.Thread | None = threading.Thread(
            target=self._run, name="store-group-sync", daemon=True
        )
        self._worker.start()

    def fileno(self) -> int:
        """The pipe that wakes the loop when a round ends."""
        if self._worker is None:
            raise ValueError("GroupSync is closed")
        return self._rfd

    def submit(self, fds: tuple[int, ...], directory: int = -1) -> None:
        """Hand over files to ``fdatasync`` (with those handed over before) and, optionally,
        a directory to ``fsync`` after them."""
        for fd in fds:
            if not 0 <= fd <= _INT_MAX:
                raise ValueError(f"not a file descriptor: {fd}")
        if not -1 <= directory <= _INT_MAX:
            raise ValueError(f"not a file descriptor: {directory}")
        if self._worker is None:
            raise RuntimeError("GroupSync is closed")
        with self._cond:
            for fd in fds:
                if fd not in self._fds:
                    self._fds.append(fd)
            if directory >= 0:
                self._directory = directory
            self._handed += 1
            self._pending = True
            self._cond.notify()

    def ended(self) -> int:
        """How many rounds have ended, good or failed; cheap enough to ask between requests."""
        return self._ended

    def collect(self) -> tuple[int, int, int, int]:
        """(hand-overs the last good round covered, good rounds, errno of a failed round or 0,
        hand-overs the last failed round had taken); clears the wake-ups and the errno."""
        if self._worker is not None:
            with contextlib.suppress(BlockingIOError):
                while os.read(self._rfd, 256):
                    pass
        with self._cond:
            error, self._error = self._error, 0
            return self._covered, self._rounds, error, self._failed

    def close(self) -> None:
        """Sync what was submitted, then stop the thread (blocking)."""
        thread, self._worker = self._worker, None
        if thread is None:
            return
        with self._cond:
            self._stop = True
            self._cond.notify()
        thread.join()
        os.close(self._rfd)
        os.close(self._wfd)

    def _run(self) -> None:
        cond = self._cond
        while True:
            with cond:
                while not self._pending and not self._stop:
                    cond.wait()
                if not self._pending:
                    return
                fds, self._fds = self._fds, []
                directory, self._directory = self._directory, -1
                taken = self._handed
                self._pending = False
            error = 0
            try:
                for fd in fds:
                    os.fdatasync(fd)
                if directory >= 0:  # a rename needs fsync: fdatasync need not persist it
                    os.fsync(directory)
            except OSError as exc:
                error = exc.errno or errno.EIO
            except Exception:  # the thread must go on reporting, whatever went wrong
                log.exception("the group commit's thread failed a round")
                error = errno.EIO
            with cond:
                if error:
                    self._error = error
                    self._failed = taken
                else:
                    self._covered = taken
                    self._rounds += 1
                self._ended += 1
            with contextlib.suppress(BlockingIOError):
                os.write(self._wfd, b"\0")


#: The group commit's disk thread: compiled when the compiled codecs are active.
GroupSync: Callable[[], GroupSyncThread] = _compiled.GroupSync if _compiled is not None else PureGroupSync


def _call(callback: Callable[[PutStatus], None], status: PutStatus) -> None:
    """One waiter's callback; its failure must not keep the others from theirs."""
    try:
        callback(status)
    except Exception:
        log.exception("a flush waiter's callback failed")


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class CommitLogFlusher:
    """Flushes the commit log: a timed flush (ASYNC_FLUSH), or group commit (SYNC_FLUSH).

    Under ASYNC_FLUSH a flush is one job on the worker thread, at most one at a time. Under
    SYNC_FLUSH the puts that wait hand what is written to the :class:`GroupSync` thread, once
    per turn of the loop (after the callbacks ready at that moment have run, so the writers the
    last round woke all join the next one). The thread runs a round whenever something new was
    handed to it, straight after the one before; each round's end wakes the loop, which
    answers the waiters it covered, or the loop finds it ended between two requests of a
    read (:meth:`settle_ended`) and answers at once. Each ``fdatasync`` serves everyone who
    arrived during the one before.
    """

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
        #: (end offset, deadline, callback) in the order the waits began, so deadlines ascend.
        #: Each callback is called once, with PUT_OK or FLUSH_DISK_TIMEOUT.
        self._waiters: list[tuple[int, float, Callable[[PutStatus], None]]] = []
        #: One timer, for the oldest waiter's deadline (a timer per put costs more than a put).
        self._timer: asyncio.TimerHandle | None = None
        #: ASYNC_FLUSH: the running flush job, resolving to whether it succeeded.
        self._running: asyncio.Future[bool] | None = None
        self._task: asyncio.Task[None] | None = None
        # SYNC_FLUSH: the group commit's thread and what was handed to it.
        self._group: GroupSyncThread | None = None
        #: The highest offset handed to the group, and how many hand-overs so far.
        self._submitted = 0
        self._handed = 0
        #: Per hand-over not yet answered for: (its number, the offset it covers, the store
        #: timestamp written by then, files whose directory entry that round syncs).
        self._in_flight: collections.deque[tuple[int, int, int, list[MappedFile]]] = collections.deque()
        #: Hand-overs the thread has finished with (synced or failed): their descriptors are
        #: no longer in its hands.
        self._done_with = 0
        #: Our own descriptor for each file handed over (closing or deleting the file must not
        #: close what the thread is about to sync), with the last hand-over naming it.
        self._descriptors: dict[MappedFile, tuple[int, int]] = {}
        #: The queue's truncation count when last looked at: a log cut back (a slave's) makes
        #: the hand-overs still in flight cover nothing.
        self._truncations = queue.truncations
        #: :meth:`flush` calls waiting for their target.
        self._flush_waits: list[tuple[int, asyncio.Future[bool]]] = []
        self._submit_soon = False
        self._directory_fd = -1
        self._rounds_seen = 0
        #: The group's count of ended rounds when the loop last collected them.
        self._ended_seen = 0
        #: The errno of the first failed round, 0 while none failed. Sticky: Linux marks pages
        #: whose write-back failed clean and reports the error once, so no later round can say
        #: which bytes reached the disk; from then on no put is told PUT_OK (until a restart,
        #: whose recovery checks the log) and the abort file stays.
        self.disk_error = 0
        self.flush_count = 0
        self.timeouts = 0
        self.failures = 0

    def start(self) -> None:
        if self.sync:
            self.queue.directory.mkdir(parents=True, exist_ok=True)
            directory = os.open(self.queue.directory, os.O_RDONLY)
            try:
                self._group = GroupSync()
            except BaseException:
                os.close(directory)
                raise
            self._directory_fd = directory
            asyncio.get_running_loop().add_reader(self._group.fileno(), self._committed)
        self._task = asyncio.ensure_future(self._run_sync() if self.sync else self._run_async())

    async def stop(self) -> None:
        """Stop the loop, then flush everything (up to 10 attempts) and settle all waiters."""
        await cancel_and_wait(self._task)
        self._task = None
        # Closed after the try rather than in a finally: no await in except or finally blocks
        # of compiled modules (tests/ops/test_compiled.py says why).
        failure: BaseException | None = None
        try:
            for _ in range(_SHUTDOWN_ATTEMPTS):
                if not await self.flush(0) and self.disk_error:
                    break
                if self.queue.flushed_where >= self.queue.max_offset:
                    break
        except BaseException as error:
            failure = error
        await self._close_group()
        if failure is not None:
            raise failure

    async def _close_group(self) -> None:
        """Stop the group commit's thread and answer everyone still waiting."""
        group, self._group = self._group, None
        if group is not None:
            asyncio.get_running_loop().remove_reader(group.fileno())
            await asyncio.to_thread(group.close)
            for fd, _last in self._descriptors.values():
                os.close(fd)
            self._descriptors.clear()
            os.close(self._directory_fd)
            self._directory_fd = -1
        self._answer_flushes(_ALL, False)
        waiters, self._waiters = self._waiters, []
        for _end, _deadline, callback in waiters:
            _call(callback, PutStatus.FLUSH_DISK_TIMEOUT)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    # -- waiting ---------------------------------------------------------------------------------

    def when_flushed(self, end: int, callback: Callable[[PutStatus], None]) -> None:
        """Call ``callback`` once with PUT_OK when bytes up to ``end`` are on disk (at once if
        they are), or with FLUSH_DISK_TIMEOUT after the timeout. Called from the flush's own
        settling, not through a future's callback: the send path answers a turn of the loop
        sooner. SYNC_FLUSH only."""
        if self.queue.flushed_where >= end:
            callback(PutStatus.PUT_OK)
            return
        if self.disk_error:
            callback(PutStatus.FLUSH_DISK_TIMEOUT)
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout
        self._waiters.append((end, deadline, callback))
        if self._timer is None:
            self._timer = loop.call_at(deadline, self._expire)
        if not self._submit_soon:
            # Once the callbacks ready now have run: the puts of the writers woken by the
            # last round join one hand-over instead of each starting a round of its own.
            self._submit_soon = True
            loop.call_soon(self._submit_now)

    def _submit_now(self) -> None:
        self._submit_soon = False
        self._submit(0)

    def _expire(self) -> None:
        """Time out the waiters past their deadline; re-arm for the next one."""
        self._timer = None
        loop = asyncio.get_running_loop()
        now = loop.time()
        waiters = self._waiters
        expired = 0
        for _end, deadline, _callback in waiters:
            if deadline > now:
                break
            expired += 1
        self.timeouts += expired
        for _end, _deadline, callback in waiters[:expired]:
            _call(callback, PutStatus.FLUSH_DISK_TIMEOUT)
        del waiters[:expired]
        if waiters:
            self._timer = loop.call_at(waiters[0][1], self._expire)

    def _settle(self) -> None:
        flushed = self.queue.flushed_where
        waiting = []
        covered = []
        for item in self._waiters:
            if item[0] <= flushed:
                covered.append(item[2])
            else:
                waiting.append(item)
        self._waiters = waiting
        for callback in covered:
            _call(callback, PutStatus.PUT_OK)
        if not waiting and self._timer is not None:
            self._timer.cancel()
            self._timer = None

    # -- group commit (SYNC_FLUSH) -----------------------------------------------------------------

    def _submit(self, least_pages: int) -> int | None:
        """Hand what is written now (if past ``least_pages``) to the group's thread: the offset
        its round will cover, or None when there is nothing to flush."""
        group = self._group
        if group is None or self.disk_error:
            return None
        # The timestamp first: whatever it belongs to is written by now, so the round covers it.
        stamp = self.last_store_timestamp()
        plan = self.queue.flush_plan(least_pages)
        if plan is None:
            self._settle()
            return None
        target, files = plan
        self._check_truncated()
        if target > self._submitted:
            number = self._handed + 1
            try:
                fds = tuple(self._descriptor(mapped, number) for mapped in files)
            except OSError as exc:  # out of descriptors, say: the next turn tries again
                log.error("cannot hand the commit log to its flush thread: %s", exc)
                return target
            fresh = [mapped for mapped in files if not mapped.dir_synced]
            # A new file's name too, once (renamed into place when it was adopted).
            group.submit(fds, self._directory_fd if fresh else -1)
            self._handed = number
            self._submitted = target
            self._in_flight.append((number, target, stamp, fresh))
        return target

    def _descriptor(self, mapped: MappedFile, number: int) -> int:
        known = self._descriptors.get(mapped)
        fd = os.dup(mapped.fd) if known is None else known[0]
        self._descriptors[mapped] = (fd, number)
        return fd

    def _release_descriptors(self) -> None:
        """Close our descriptors of files the thread is done with for good: fully flushed (or
        closed), and named by no hand-over it has not finished with."""
        flushed = self.queue.flushed_where
        done = [
            mapped
            for mapped, (_fd, last) in self._descriptors.items()
            if last <= self._done_with and (mapped.closed or mapped.end <= flushed)
        ]
        for mapped in done:
            os.close(self._descriptors.pop(mapped)[0])

    def _check_truncated(self) -> None:
        """The log was cut back: what is in flight covers nothing any more."""
        if self.queue.truncations == self._truncations:
            return
        self._truncations = self.queue.truncations
        self._in_flight.clear()
        self._submitted = self.queue.flushed_where
        self._answer_flushes(_ALL, False)

    def settle_ended(self) -> bool:
        """Answer the puts a round covered if one ended since the loop last looked; True if
        one had. The connections call it between the requests of a read (``between_requests``):
        under a burst a read holds dozens of puts, and an answer that waited for the pipe's
        wake-up would wait for all of them first."""
        group = self._group
        if group is None or group.ended() == self._ended_seen:
            return False
        self._committed()
        return True

    def _committed(self) -> None:
        """A round ended (the group's pipe is readable): answer what it covered, or failed."""
        group = self._group
        if group is None:
            return
        # Before collecting: a round that ends in between is looked at again, not missed.
        self._ended_seen = group.ended()
        covered, rounds, error, failed = group.collect()
        self.flush_count += rounds - self._rounds_seen
        self._rounds_seen = rounds
        self._done_with = max(self._done_with, covered, failed)
        self._check_truncated()
        queue = self.queue
        in_flight = self._in_flight
        stamp = 0
        if error and not self.disk_error:
            self.disk_error = error
            log.error(
                "commit-log flush failed: %s; SYNC_FLUSH puts are answered FLUSH_DISK_TIMEOUT "
                "until the broker restarts",
                os.strerror(error),
            )
        while in_flight and in_flight[0][0] <= self._done_with:
            _number, target, stamp_then, fresh = in_flight.popleft()
            if self.disk_error:
                continue  # nothing since the failure is vouched for (see disk_error)
            stamp = stamp_then
            if target > queue.flushed_where:
                queue.flushed_where = target
            for mapped in fresh:
                mapped.dir_synced = True
        if stamp > 0:
            self.checkpoint.physic_timestamp = stamp
        if error:
            self.failures += 1
        if self.disk_error:
            self._fail(_ALL)
        self._settle()
        self._answer_flushes(queue.flushed_where, True)
        self._release_descriptors()

    def _fail(self, end: int) -> None:
        """The puts waiting for bytes up to ``end`` are answered FLUSH_DISK_TIMEOUT now (stored,
        not known durable), and flushes up to there fail."""
        failing = [item for item in self._waiters if item[0] <= end]
        if failing:
            self._waiters = [item for item in self._waiters if item[0] > end]
            self.timeouts += len(failing)
            for _end, _deadline, callback in failing:
                _call(callback, PutStatus.FLUSH_DISK_TIMEOUT)
        self._answer_flushes(end, False)

    def _answer_flushes(self, upto: int, result: bool) -> None:
        """Answer the :meth:`flush` calls whose target is at most ``upto``."""
        waiting = []
        for target, future in self._flush_waits:
            if target > upto:
                waiting.append((target, future))
            elif not future.done():
                future.set_result(result)
        self._flush_waits = waiting

    async def _run_sync(self) -> None:
        # Puts that do not wait (the WAIT property false) are flushed within 10 ms.
        while True:
            await asyncio.sleep(_IDLE_ROUND_SECONDS)
            self._submit(0)
            # Descriptors of files deleted since the last round (off the put path).
            self._release_descriptors()

    # -- timed flushes (ASYNC_FLUSH) ---------------------------------------------------------------

    def _begin(self, least_pages: int) -> asyncio.Future[bool] | None:
        """Start a flush job for what is written now (if it passes ``least_pages``); None when
        there is nothing to do. Must not be called while one runs."""
        stamp = self.last_store_timestamp()
        plan = self.queue.flush_plan(least_pages)
        if plan is None:
            return None
        target, files = plan
        loop = asyncio.get_running_loop()
        done: asyncio.Future[bool] = loop.create_future()
        self._running = done

        def report(job: concurrent.futures.Future[None]) -> None:
            loop.call_soon_threadsafe(self._finished, job, target, stamp, done)

        self.executor.submit(sync_all, files).add_done_callback(report)
        return done

    def _finished(
        self, job: concurrent.futures.Future[None], target: int, stamp: int, done: asyncio.Future[bool]
    ) -> None:
        self._running = None
        error = job.exception()
        if error is None:
            if target > self.queue.flushed_where:
                self.queue.flushed_where = target
            if stamp > 0:
                self.checkpoint.physic_timestamp = stamp
            self.flush_count += 1
        else:
            self.failures += 1
            log.error("commit-log flush failed: %s", error)
        if not done.done():
            done.set_result(error is None)

    async def flush(self, least_pages: int) -> bool:
        """Flush what is written now (after any flush already running); True if it succeeded
        or there was nothing to flush."""
        if self.disk_error:
            return False
        if self._group is not None:
            target = self._submit(least_pages)
            if target is None or target <= self.queue.flushed_where:
                return True
            covered: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
            self._flush_waits.append((target, covered))
            return await covered
        while self._running is not None:
            await asyncio.shield(self._running)
        started = self._begin(least_pages)
        return True if started is None else await asyncio.shield(started)

    async def _run_async(self) -> None:
        last_thorough = _now_ms()
        while True:
            await asyncio.sleep(self.interval)
            least = self.least_pages
            now = _now_ms()
            if now >= last_thorough + self.thorough_interval_ms:
                last_thorough = now
                least = 0
            await self.flush(least)


class LogicsFlusher:
    """Flushes consume queues and index files, then writes the checkpoint.

    Every round flushes, past the page threshold, the queues in ``due`` (those whose end
    entered another page, or whose file filled up, since a round last looked at them: see
    :class:`~.consume_queue.ConsumeQueue`; only such a write can make a queue pass the
    threshold), and in full one slice of a **sweep**: a snapshot of every queue, taken every
    ``thorough_interval_ms`` and spread evenly over the rounds until the next one. So each
    queue is flushed in full once per sweep (one taken after it was made), as Apache's thorough
    round does every 60 s, without walking all of them every second and without one burst of
    thousands of ``fdatasync`` calls (8,000 queues of 1,000 topics: seconds of a worker thread
    and the disk's journal). :meth:`flush` with 0 (shutdown) flushes every queue in full.

    Index files are synced once per sweep, when a file fills (``index_due``) and in full
    rounds, as Apache syncs an index file when it fills and otherwise leaves it to the page
    cache: a sync makes the pages it wrote back read-only again, and keys land on random
    slots of the hash table, so syncing every round made nearly every key's write fault
    (about 13% of a single send's broker CPU). Recovery after a crash re-indexes from the
    checkpoint's index timestamp, which moves only with these syncs; keys already in a file
    are not indexed twice (:meth:`.index.Index.build_batch` skips offsets at or below a
    file's end).
    """

    def __init__(
        self,
        queues: Callable[[], Sequence[MappedFileQueue]],
        due: set[MappedFileQueue],
        index_files: Callable[[], Sequence[_Syncable]],
        index_due: Callable[[], bool],
        stamps: Callable[[], tuple[int, int]],
        checkpoint: Checkpoint,
        executor: concurrent.futures.Executor,
        *,
        interval_ms: int,
        least_pages: int,
        thorough_interval_ms: int,
    ) -> None:
        self.queues = queues
        self.due = due
        self.index_files = index_files
        self.index_due = index_due
        self.stamps = stamps
        self.checkpoint = checkpoint
        self.executor = executor
        self.interval = interval_ms / 1000
        self.least_pages = least_pages
        #: Rounds per sweep.
        self.sweep_rounds = max(1, thorough_interval_ms // max(1, interval_ms))
        self._task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()
        self._written: tuple[int, int, int] | None = None

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._run())

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None
        for _ in range(3):
            try:
                await self.flush(0)
                break
            except OSError as exc:
                log.error("final consume-queue flush failed: %s", exc)

    async def flush(self, least_pages: int) -> None:
        """One round now: every queue in full with 0, else the due queues past ``least_pages``."""
        if least_pages <= 0:
            await self._round(0, self.queues(), self.stamps()[0], True)
        else:
            await self._round(least_pages, (), None, self.index_due())

    async def _round(
        self,
        least_pages: int,
        in_full: Sequence[MappedFileQueue],
        logics_stamp: int | None,
        with_index: bool,
    ) -> None:
        """Flush ``in_full`` whole and the due queues past ``least_pages``, and with
        ``with_index`` every changed index file; then move the checkpoint's logics timestamp
        to ``logics_stamp``, which the caller reads before the round (or before the sweep this
        round ends) and passes only when every queue has been flushed in full since: recovery
        after a crash re-dispatches from that stamp, so it must not pass an entry still
        unflushed in a queue this round skipped. None: leave it."""
        async with self._lock:
            # The index stamp first: whatever it covers is written by now, and every dirty
            # index file is flushed below.
            index_stamp = self.stamps()[1] if with_index else 0
            due = self.due
            candidates = [(queue, 0) for queue in in_full]
            if least_pages > 0:
                candidates.extend((queue, least_pages) for queue in due)
            due.clear()
            plans: dict[MappedFileQueue, int] = {}
            files: list[_Syncable] = []
            for i, (queue, least) in enumerate(candidates):
                if i and not i % _PLAN_CHUNK:
                    await asyncio.sleep(0)  # a round over many queues: let sends in
                if queue in plans:
                    continue
                plan = queue.flush_plan(least)
                if plan is not None:
                    plans[queue] = plan[0]
                    files.extend(plan[1])
            if with_index:
                files.extend(self.index_files())
            loop = asyncio.get_running_loop()
            if files:
                try:
                    await loop.run_in_executor(self.executor, sync_all, files)
                except BaseException:
                    due.update(plans)  # still to flush
                    raise
                for queue, target in plans.items():
                    if target > queue.flushed_where:
                        queue.flushed_where = target
            checkpoint = self.checkpoint
            if logics_stamp is not None and logics_stamp > checkpoint.logics_timestamp:
                checkpoint.logics_timestamp = logics_stamp
            if index_stamp > checkpoint.index_timestamp:
                checkpoint.index_timestamp = index_stamp
            stamps = (checkpoint.physic_timestamp, checkpoint.logics_timestamp, checkpoint.index_timestamp)
            if stamps != self._written:
                await loop.run_in_executor(self.executor, checkpoint.flush, stamps)
                self._written = stamps

    async def _run(self) -> None:
        rounds = self.sweep_rounds
        sweep: Sequence[MappedFileQueue] = ()
        sweep_stamp = 0
        sweep_ok = True  # no round of this sweep failed
        at = 0  # this round's number within the sweep
        while True:
            await asyncio.sleep(self.interval)
            logics_stamp: int | None
            # The index files: every round without a threshold, else once per sweep (its first
            # round) and when a file filled.
            with_index = True
            if self.least_pages <= 0:  # no threshold: everything, every round
                logics_stamp = self.stamps()[0]
                in_full = self.queues()
            else:
                with_index = at == 0
                if at == 0:
                    # What the queues hold now is on disk once the sweep's last slice is.
                    sweep_stamp = self.stamps()[0]
                    sweep = self.queues()
                    sweep_ok = True
                count = len(sweep)
                # Round ``at`` takes queues [at * count / rounds, (at + 1) * count / rounds).
                in_full = sweep[-(-at * count // rounds) : -(-(at + 1) * count // rounds)]
                logics_stamp = sweep_stamp if at == rounds - 1 and sweep_ok else None
                at = (at + 1) % rounds
            try:
                await self._round(self.least_pages, in_full, logics_stamp, with_index or self.index_due())
            except OSError as exc:
                sweep_ok = False
                log.error("consume-queue flush failed: %s", exc)
