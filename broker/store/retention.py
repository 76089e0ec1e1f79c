"""Retention: deleting old commit-log files, then what pointed into them.

Every ``cleanResourceInterval`` (10 s) commit-log files (never the last) whose last write is older than ``fileReservedTime`` hours are deleted, at most ten per
round, when the hour is one of ``deleteWhen``, or when the disk holding the commit log is more
than ``diskMaxUsedSpaceRatio`` percent full. Above ``diskSpaceCleanForciblyRatio`` files go even
before they expire; above ``diskSpaceWarningLevelRatio`` the store also refuses new messages
until space is back.

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
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from aiorocketmq.protocol.loop import cancel_and_wait

from .commit_log import CommitLog
from .config import StoreConfig
from .consume_queue import ConsumeQueue
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
    def consume_queues(self) -> Iterable[ConsumeQueue]: ...
    def discard(self, item: Destroyable) -> None: ...


@dataclass(slots=True)
class RetentionState:
    disk_ratio: float = -1.0
    deleted_files: int = 0
    rounds: int = 0


class Retention:
    """The periodic clean-up task of a store."""

    def __init__(self, store: MessageStore) -> None:
        self.store = store
        self.state = RetentionState()
        self._task: asyncio.Task[None] | None = None

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
        store.stats.disk_used_ratio = ratio
        self.state.rounds += 1
        over_warning = ratio > config.disk_space_warning_level_ratio
        if over_warning != store.disk_full:
            store.disk_full = over_warning
            if over_warning:
                log.error("disk %.0f%% full: the store refuses new messages", ratio * 100)
            else:
                log.info("disk %.0f%% full: the store accepts new messages again", ratio * 100)
        now = time.time_ns() // 1_000_000 if now_ms is None else now_ms
        hour = time.localtime(now / 1000).tm_hour
        space_full = ratio > config.disk_max_used_space_ratio / 100
        forcibly = config.clean_file_forcibly_enable and ratio > config.disk_space_clean_forcibly_ratio
        if not (hour in config.delete_hours or space_full or forcibly):
            return 0
        return self.delete_commit_log_files(now, immediately=forcibly, limit=DELETE_FILES_BATCH_MAX)

    def delete_commit_log_files(self, now_ms: int, *, immediately: bool, limit: int | None = None) -> int:
        """Delete expired (or, ``immediately``, all) commit-log files but the last, oldest first
        and stopping at the first one kept; then clean what pointed into them."""
        store = self.store
        queue = store.commit_log.queue
        reserved_ms = store.config.file_reserved_time * _HOUR_MS
        deleted = 0
        while len(queue.files) > 1 and (limit is None or deleted < limit):
            first = queue.files[0]
            if not immediately:
                try:
                    modified_ms = os.stat(first.path).st_mtime_ns // 1_000_000
                except OSError:
                    modified_ms = 0
                if now_ms < modified_ms + reserved_ms:
                    break
            queue.files.pop(0)
            store.discard(first)
            deleted += 1
        if deleted:
            log.info(
                "retention deleted %d commit-log file(s); minimum offset now %d", deleted, queue.min_offset
            )
            self.state.deleted_files += deleted
            self.clean_derived()
        return deleted

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
