"""Retention: deleting old commit-log files, then what pointed into them.

The rule, checked every ``cleanResourceInterval`` (10 s):

* A commit-log file (never the last) is deleted once its last write is older than
  ``fileReservedTime`` hours, at a ``deleteWhen`` hour, or at any hour while the disk holding the
  commit log is more than ``diskMaxUsedSpaceRatio`` percent full; at most ten per round.
* Disk pressure alone never deletes a file younger than that unless the operator enabled forced
  clean-up (``cleanFileForciblyEnable``, our default false; Apache's true): past
  ``diskSpaceCleanForciblyRatio`` unexpired files then go too, oldest first. With it off the disk
  fills instead, and past ``diskSpaceWarningLevelRatio`` the store refuses new messages until
  space is back (its own disk watch decides that, within a second; see
  :meth:`MessageStore.check_disk`); this round says so in the log, once a minute.
* Whenever a deletion takes messages that some consumer group, or no group at all, has not
  consumed yet, each topic-queue's lost offsets are logged (topic, queue, offset range, count,
  the groups behind) and counted per topic (``StoreStats.unconsumed_deleted_by_topic``, the
  broker's metrics): at WARNING, except for expired messages of a topic no group reads, whose
  deletion is retention doing its job (INFO).

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
    unconsumed_deleted_by_topic: dict[str, int]


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
    #: Rounds past ``diskSpaceCleanForciblyRatio`` that deleted nothing unexpired because forced
    #: clean-up is off.
    spared_rounds: int = 0


#: Who had not consumed lost messages: no group reads the topic at all.
NO_GROUP = "(no consumer group)"
#: Loss lines logged per deleted file; the rest are summed up in one more line.
_LOSS_LINES = 20


class Loss(NamedTuple):
    """Messages of one topic-queue that a deletion took before some group (or, with
    ``groups`` empty, any group) consumed them: queue offsets [first, end)."""

    topic: str
    queue_id: int
    first: int
    end: int
    groups: tuple[str, ...]

    @property
    def lost(self) -> int:
        return self.end - self.first

    @property
    def who(self) -> str:
        return ", ".join(self.groups) if self.groups else NO_GROUP


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
        pressed = ratio > config.disk_space_clean_forcibly_ratio
        forcibly = pressed and config.clean_file_forcibly_enable
        if not (hour in config.delete_hours or space_full or forcibly):
            if pressed:
                self._log_spared(ratio)
            return 0
        deleted = self.delete_commit_log_files(now, immediately=forcibly, limit=DELETE_FILES_BATCH_MAX)
        if pressed and not forcibly:
            self._log_spared(ratio)
        return deleted

    def delete_commit_log_files(self, now_ms: int, *, immediately: bool, limit: int | None = None) -> int:
        """Delete expired (or, ``immediately``, all) commit-log files but the last, oldest first
        and stopping at the first one kept; then clean what pointed into them. Messages taken
        before their time or before they were consumed are logged and counted."""
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
        """What deleting the commit-log range [start, end) would take before it was consumed:
        for each topic-queue with messages stored there, those at or past the next offset of
        the group furthest behind on it, or all of them when no group reads the topic."""
        store = self.store
        behind: dict[tuple[str, int], list[tuple[int, str]]] = {}
        progress = store.consumer_progress
        if progress is not None:
            for group, topic, queue_id, offset in progress():
                behind.setdefault((topic, queue_id), []).append((offset, group))
        losses = []
        for cq in store.consume_queues():
            first = max(cq.min_offset, cq.first_at_or_past(start))
            upto = cq.first_at_or_past(end)
            if first >= upto:
                continue
            entry = cq.entry(first)
            if entry is None or entry[1] == BLANK_SIZE or entry[0] >= end:
                continue
            readers = behind.get((cq.topic, cq.queue_id))
            if readers is None:
                losses.append(Loss(cq.topic, cq.queue_id, first, upto, ()))
                continue
            lagging = sorted((offset, group) for offset, group in readers if offset < upto)
            if lagging:
                losses.append(
                    Loss(cq.topic, cq.queue_id, max(first, lagging[0][0]), upto, tuple(g for _, g in lagging))
                )
        return losses

    def _log_spared(self, ratio: float) -> None:
        self.state.spared_rounds += 1
        now = time.monotonic()
        if now - self._last_spared_log < 60:
            return
        self._last_spared_log = now
        config = self.store.config
        log.warning(
            "the commit-log disk is %.1f%% full (past diskSpaceCleanForciblyRatio %.0f%%), but no "
            "commit-log file younger than fileReservedTime (%d h) is deleted: cleanFileForciblyEnable "
            "is false, so new messages will be refused past diskSpaceWarningLevelRatio (%.0f%%) until "
            "space is freed",
            ratio * 100,
            config.disk_space_clean_forcibly_ratio * 100,
            config.file_reserved_time,
            config.disk_space_warning_level_ratio * 100,
        )

    def _log_losses(self, start: int, end: int, losses: list[Loss], expired: bool) -> None:
        why = "expired (fileReservedTime)" if expired else "forced clean-up (cleanFileForciblyEnable)"
        stats = self.store.stats
        by_topic = stats.unconsumed_deleted_by_topic
        for i, loss in enumerate(losses):
            stats.unconsumed_deleted += loss.lost
            by_topic[loss.topic] = by_topic.get(loss.topic, 0) + loss.lost
            if i < _LOSS_LINES:
                # Expiry of what no group reads is retention doing its job; anything else is a loss.
                log.log(
                    logging.INFO if expired and not loss.groups else logging.WARNING,
                    "%s deleted commit-log file [%d, %d) with %d message(s) not yet consumed: "
                    "topic %s queue %d offsets [%d, %d), behind: %s",
                    why,
                    start,
                    end,
                    loss.lost,
                    loss.topic,
                    loss.queue_id,
                    loss.first,
                    loss.end,
                    loss.who,
                )
        if len(losses) > _LOSS_LINES:
            rest = losses[_LOSS_LINES:]
            log.warning(
                "%s deleted commit-log file [%d, %d): %d more topic-queue(s) lost %d message(s) not "
                "yet consumed (topics %s)",
                why,
                start,
                end,
                len(rest),
                sum(loss.lost for loss in rest),
                ", ".join(sorted({loss.topic for loss in rest})[:10]),
            )

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
