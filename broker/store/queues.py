"""Compiled with mypyc (aiorocketmq/compiled.py, which lists the rules): declared, typed
attributes only; no monkeypatching, setattr or frame tricks; no await in except/finally.

The store's consume queues as a set: which topic-queues exist, loading them at start, making
a queue on its first put (and its next file off the event loop for a client's send:
:meth:`QueueRegistry.room_pending`, :class:`RoomWait`), and taking a topic's or a queue's
files away.

One place for the ``topic -> queue id -> ConsumeQueue`` map that the put, the dispatch, the
reads, the flushes and retention all look up. The put and get paths read
:attr:`QueueRegistry.by_topic` directly (two dict lookups, as before the split), never through
a method per message.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import os
import shutil
import time
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from .commit_log import CommitLog
from .config import StoreConfig
from .consume_queue import ConsumeQueue
from .mapped_file import MappedFile, MappedFileQueue

T = TypeVar("T")

#: A deleted topic's directory is renamed to this prefix first (and removed in the background,
#: or at the next start if the broker stopped before).
TOMBSTONE_PREFIX = ".deleted-"
#: Threads that make consume-queue files for sends waiting on them.
QUEUE_FILE_THREADS = 4


class QueueRegistry:
    """The consume queues of a store, by topic and queue id."""

    def __init__(self, config: StoreConfig, commit_log: CommitLog) -> None:
        self._config = config
        self._commit_log = commit_log
        self._file_size = config.consume_queue_file_size
        self.by_topic: dict[str, dict[int, ConsumeQueue]] = {}
        #: Consume queues a write may have made worth a flush (see :class:`.flush.LogicsFlusher`).
        self.flush_due: set[MappedFileQueue] = set()
        #: Consume queues whose next file a worker is making, and the puts waiting for it.
        self._room_waits: dict[ConsumeQueue, RoomWait] = {}

    def load(self) -> None:
        """Blocking (recovery): open every consume queue found on disk."""
        root = self._config.consume_queue_dir
        root.mkdir(parents=True, exist_ok=True)
        for topic_entry in os.scandir(root):
            if not topic_entry.is_dir():
                continue
            if topic_entry.name.startswith(TOMBSTONE_PREFIX):
                shutil.rmtree(topic_entry.path, ignore_errors=True)
                continue
            for queue_entry in os.scandir(topic_entry.path):
                if not (queue_entry.is_dir() and queue_entry.name.isdigit()):
                    continue
                cq = ConsumeQueue(
                    root,
                    topic_entry.name,
                    int(queue_entry.name),
                    self._file_size,
                    flush_due=self.flush_due,
                )
                cq.load()
                if cq.queue.files:
                    self.by_topic.setdefault(cq.topic, {})[cq.queue_id] = cq

    def all(self) -> Iterator[ConsumeQueue]:
        for queues in list(self.by_topic.values()):
            yield from list(queues.values())

    def files(self) -> list[MappedFileQueue]:
        return [cq.queue for cq in self.all()]

    def create(self, topic: str, queue_id: int) -> ConsumeQueue:
        cq = ConsumeQueue(
            self._config.consume_queue_dir, topic, queue_id, self._file_size, flush_due=self.flush_due
        )
        self.by_topic.setdefault(topic, {})[queue_id] = cq
        return cq

    def get(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        queues = self.by_topic.get(topic)
        return queues.get(queue_id) if queues is not None else None

    def room_pending(
        self, topic: str, queue_id: int, count: int, executor: concurrent.futures.ThreadPoolExecutor
    ) -> RoomWait | None:
        """:meth:`.store.MessageStore.room_pending` once the store has ruled out a put it would
        refuse anyway: None when the file exists, else the wait to defer the put to."""
        queues = self.by_topic.get(topic)
        cq = queues.get(queue_id) if queues is not None else None
        if cq is None:
            if self._commit_log.topic_prefix(topic) is None:
                return None  # the put refuses the name
            cq = self.create(topic, queue_id)
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

    def remove_topic(self, topic: str) -> Tree | None:
        """Forget the topic's queues; the files to discard (their directory renamed to a
        tombstone first), or None if it had none."""
        queues = self.by_topic.pop(topic, None)
        if not queues:
            return None
        directory = self._config.consume_queue_dir / topic
        tombstone = directory.with_name(f"{TOMBSTONE_PREFIX}{topic}-{time.time_ns()}")
        try:
            os.rename(directory, tombstone)
        except OSError:
            tombstone = directory
        files = [mapped for cq in queues.values() for mapped in cq.queue.files]
        files.extend(cq.spare for cq in queues.values() if cq.spare is not None)
        for cq in queues.values():
            cq.drop_preparing()
        return Tree(tombstone, files)

    def remove_queue(self, topic: str, queue_id: int) -> Tree | None:
        """Forget one queue; its files to discard, or None if there is no such queue."""
        queues = self.by_topic.get(topic)
        cq = queues.pop(queue_id, None) if queues is not None else None
        if cq is None:
            return None
        if not queues:
            self.by_topic.pop(topic, None)
        files = list(cq.queue.files)
        if cq.spare is not None:
            files.append(cq.spare)
        cq.drop_preparing()
        directory = self._config.consume_queue_dir / topic / str(queue_id)
        return Tree(directory, files)

    def close(self) -> None:
        for cq in self.all():
            cq.close()
        self.by_topic.clear()
        self.flush_due.clear()


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


class Tree:
    """A directory of mapped files to close and remove (in the background)."""

    def __init__(self, path: Path, files: list[MappedFile]) -> None:
        self.path = path
        self.files = files

    def destroy(self) -> None:
        for mapped in self.files:
            mapped.close()
        shutil.rmtree(self.path, ignore_errors=True)
