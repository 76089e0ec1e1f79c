"""Retention: deleting old commit-log files, then what pointed into them.

Every ``cleanResourceInterval`` (10 s) commit-log files (never the last) whose last write is
older than ``fileReservedTime`` hours are deleted, at most ten per round, when the hour is one
of ``deleteWhen``, or when the disk holding the commit log is more than
``diskMaxUsedSpaceRatio`` percent full. Above ``diskSpaceCleanForciblyRatio`` files go even
before they expire (forced clean-up), but only files whose messages every subscribed group has
consumed, unless ``cleanFileForciblyEnable`` (our default false; Apache's true) says to delete
them anyway. Whenever a deletion takes messages a group had not consumed yet, each group's
lost offsets are logged and counted (``StoreStats.unconsumed_deleted``). Above
``diskSpaceWarningLevelRatio`` the store refuses new messages until space is back (the store's
own disk watch decides that, within a second; see :meth:`MessageStore.check_disk`).

After commit-log files go, consume-queue files whose entries all point below the new
commit-log minimum are deleted (never a queue's last file), each queue's minimum offset moves
to its first entry still backed by the commit log, and index files wholly below the minimum
are deleted. The broker or an admin can run a round now with
:meth:`broker.store.MessageStore.delete_expired_files`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from aiorocketmq.protocol.loop import cancel_and_wait

from .commit_log import CommitLog
from .config import StoreConfig
from .consume_queue import BLANK_SIZE, ConsumeQueue
from .index import Index

log = logging.getLogger(__name__)

DELETE_FILES_BATCH_MAX = 10
_HOUR_MS = 3_600_000


def disk_used_ratio(path: str) -> float:
    """Blocking: fraction of the filesystem holding ``path`` that is in use (-1 if unknown)."""
    try:
        st = os.statvfs(path)
    except OSError:
        return -1.0
    total = st.f_blocks * st.f_frsize
    if total <= 0:
        return -1.0
    return (total - st.f_bfree * st.f_frsize) / total


class Destroyable(Protocol):
    def destroy(self) -> None: ...


class DiskStats(Protocol):
    disk_used_ratio: float
    unconsumed_deleted: int


class MessageStore(Protocol):
    """What retention uses of the store it cleans (:class:`.store.MessageStore`)."""

    disk_full: bool

    @property
    def config(self) -> StoreConfig: ...
    @property
    def stats(self) -> DiskStats: ...
    @property
    def commit_log(self) -> CommitLog: ...
    @property
    def index(self) -> Index | None: ...
    @property
    def consumer_progress(self) -> Callable[[], Iterable[tuple[str, str, int, int]]] | None: ...
    def consume_queues(self) -> Iterable[ConsumeQueue]: ...
    def consume_queue(self, topic: str, queue_id: int) -> ConsumeQueue | None: ...
    def discard(self, item: Destroyable) -> None: ...
    def check_disk(self) -> bool: ...


@dataclass(slots=True)
class RetentionState:
    disk_ratio: float = -1.0
    deleted_files: int = 0
    rounds: int = 0
    #: Forced clean-up rounds that kept a file because of unconsumed messages.
    spared_rounds: int = 0


class Loss(NamedTuple):
    """Messages of one group's queue that a deletion takes before they were consumed:
    queue offsets [first, end)."""

    group: str
    topic: str
    queue_id: int
    first: int
    end: int

    @property
    def lost(self) -> int:
        return self.end - self.first


class Retention:
    """The periodic clean-up task of a store."""

    def __init__(self, store: MessageStore) -> None:
        self.store = store
        self.state = RetentionState()
        self._task: asyncio.Task[None] | None = None
        self._last_spared_log = -1e9

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._run())

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None

    async def _run(self) -> None:
        interval = self.store.config.clean_resource_interval / 1000
        while True:
            await asyncio.sleep(interval)
            try:
                await self.run_once()
            except Exception:
                log.exception("retention round failed")

    async def run_once(self, now_ms: int | None = None) -> int:
        """One periodic round; returns the number of commit-log files deleted."""
        store = self.store
        config = store.config
        ratio = await asyncio.to_thread(disk_used_ratio, str(config.commit_log_dir))
        self.state.disk_ratio = ratio
        self.state.rounds += 1
        store.check_disk()
        now = time.time_ns() // 1_000_000 if now_ms is None else now_ms
        hour = time.localtime(now / 1000).tm_hour
        space_full = ratio > config.disk_max_used_space_ratio / 100
        forcibly = ratio > config.disk_space_clean_forcibly_ratio
        if not (hour in config.delete_hours or space_full or forcibly):
            return 0
        return self.delete_commit_log_files(
            now,
            immediately=forcibly,
            limit=DELETE_FILES_BATCH_MAX,
            spare_unconsumed=forcibly and not config.clean_file_forcibly_enable,
        )

    def delete_commit_log_files(
        self, now_ms: int, *, immediately: bool, limit: int | None = None, spare_unconsumed: bool = False
    ) -> int:
        """Delete expired (or, ``immediately``, all) commit-log files but the last, oldest first
        and stopping at the first one kept; then clean what pointed into them. With
        ``spare_unconsumed``, an unexpired file holding messages a subscribed group has not
        consumed yet is kept (and so is everything after it)."""
        store = self.store
        queue = store.commit_log.queue
        reserved_ms = store.config.file_reserved_time * _HOUR_MS
        deleted = 0
        while len(queue.files) > 1 and (limit is None or deleted < limit):
            first = queue.files[0]
            try:
                modified_ms = os.stat(first.path).st_mtime_ns // 1_000_000
            except OSError:
                modified_ms = 0
            expired = now_ms >= modified_ms + reserved_ms
            if not expired and not immediately:
                break
            losses = self.unconsumed_in(first.start, first.end)
            if losses and not expired and spare_unconsumed:
                self._log_spared(first.start, first.end, losses)
                break
            queue.files.pop(0)
            store.discard(first)
            deleted += 1
            if losses:
                self._log_losses(first.start, first.end, losses, expired)
        if deleted:
            log.info(
                "retention deleted %d commit-log file(s); minimum offset now %d", deleted, queue.min_offset
            )
            self.state.deleted_files += deleted
            self.clean_derived()
        return deleted

    def unconsumed_in(self, start: int, end: int) -> list[Loss]:
        """What each subscribed group would lose with the commit-log range [start, end): for
        each (group, topic, queue) whose next message to consume is stored below ``end``, the
        queue offsets of its unconsumed messages stored in that range."""
        store = self.store
        progress = store.consumer_progress
        if progress is None:
            return []
        losses = []
        for group, topic, queue_id, offset in progress():
            cq = store.consume_queue(topic, queue_id)
            if cq is None or offset >= cq.max_offset:
                continue
            offset = max(offset, cq.min_offset, cq.first_at_or_past(start))
            entry = cq.entry(offset)
            if entry is None or entry[1] == BLANK_SIZE or entry[0] >= end:
                continue
            upto = cq.first_at_or_past(end)
            if upto > offset:
                losses.append(Loss(group, topic, queue_id, offset, upto))
        return losses

    def _log_spared(self, start: int, end: int, losses: list[Loss]) -> None:
        now = time.monotonic()
        self.state.spared_rounds += 1
        if now - self._last_spared_log < 60:
            return
        self._last_spared_log = now
        first = losses[0]
        log.warning(
            "disk past diskSpaceCleanForciblyRatio, but commit-log file [%d, %d) holds %d messages "
            "not yet consumed (e.g. group %s, %s queue %d offsets [%d, %d)) in %d group queue(s); "
            "it is kept (cleanFileForciblyEnable=false), so puts may be refused once the disk fills",
            start,
            end,
            sum(loss.lost for loss in losses),
            first.group,
            first.topic,
            first.queue_id,
            first.first,
            first.end,
            len(losses),
        )

    def _log_losses(self, start: int, end: int, losses: list[Loss], expired: bool) -> None:
        why = "expired" if expired else "forced clean-up"
        for loss in losses:
            log.error(
                "%s deleted commit-log file [%d, %d): group %s lost %s queue %d offsets [%d, %d) "
                "(%d messages never consumed)",
                why,
                start,
                end,
                loss.group,
                loss.topic,
                loss.queue_id,
                loss.first,
                loss.end,
                loss.lost,
            )
            self.store.stats.unconsumed_deleted += loss.lost

    def clean_derived(self) -> None:
        """Consume-queue and index clean-up after the commit-log minimum moved."""
        store = self.store
        minimum = store.commit_log.min_offset
        for cq in store.consume_queues():
            for mapped in cq.delete_expired(minimum):
                store.discard(mapped)
        if store.index is not None:
            for index in store.index.delete_expired(minimum):
                store.discard(index)
