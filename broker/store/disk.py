"""Compiled with mypyc (aiorocketmq/compiled.py, which lists the rules): declared, typed
attributes only; no monkeypatching, setattr or frame tricks; no await in except/finally.

Disk space: whether the store accepts puts. :class:`DiskGuard` looks at the filesystems the
store writes (every second, every 0.2 s while full, and whenever the commit log reserves a new
stretch), refuses puts past ``diskSpaceWarningLevelRatio`` or after a file could not be
allocated, and accepts them again once the space is back.

Apart from the store because it is a state of its own with its own task; the put path reads
one flag of it (:attr:`DiskGuard.full`) per request.
"""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path

from aiorocketmq.protocol.loop import cancel_and_wait

from .config import StoreConfig
from .mapped_file import DiskFullError, free_bytes
from .retention import disk_used_ratio
from .store_stats import StoreStats

log = logging.getLogger(__name__)

#: How often the disk is looked at while puts are refused for lack of space (writes resume
#: within this of space coming back), and while they are not.
DISK_WATCH_FULL_SECONDS = 0.2
DISK_WATCH_SECONDS = 1.0


class DiskGuard:
    """The store's disk-full state, and the task that watches the disk."""

    def __init__(self, config: StoreConfig, stats: StoreStats) -> None:
        self._config = config
        self._stats = stats
        #: Puts are refused for lack of space: the disk passed ``diskSpaceWarningLevelRatio``,
        #: or a file the store needed could not be allocated (:meth:`check` decides).
        self.full = False
        self.reason = ""
        #: Bytes the last failed allocation wanted: puts resume once that much is free again.
        self._space_needed = 0
        #: The commit log's reservation count when the disk was last looked at: each new
        #: stretch reserved is a look (a small volume fills in less than the watch's second).
        self.reservations_seen = 0
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._watch())

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None

    def _paths(self) -> list[Path]:
        """The store's directories on distinct filesystems (commit log first)."""
        paths = []
        devices = set()
        for path in (self._config.commit_log_dir, self._config.root_dir):
            try:
                device = os.stat(path).st_dev
            except OSError:
                continue
            if device not in devices:
                devices.add(device)
                paths.append(path)
        return paths

    def usage(self) -> list[tuple[Path, float, int]]:
        """``(directory, fraction used, bytes free)`` for each filesystem the store writes."""
        usage = []
        for path in self._paths():
            ratio = disk_used_ratio(str(path))
            try:
                free = free_bytes(path)
            except OSError:
                free = -1
            usage.append((path, ratio, free))
        return usage

    def check(self) -> bool:
        """Look at the disk now; refuse or accept puts accordingly. Returns :attr:`full`.

        Full means: past ``diskSpaceWarningLevelRatio``, or less free than the last allocation
        that failed wanted. ``statvfs`` is one cheap system call, so this runs on the loop."""
        usage = self.usage()
        if not usage:
            return self.full
        limit = self._config.disk_space_warning_level_ratio
        self._stats.disk_used_ratio = usage[0][1]
        problem = ""
        for path, ratio, free in usage:
            if ratio > limit:
                problem = f"{path} is {ratio:.1%} full (diskSpaceWarningLevelRatio {limit:.0%})"
                break
            if 0 <= free < self._space_needed:
                problem = f"{path} has {free} bytes free, a new store file needs {self._space_needed}"
                break
        if problem:
            self._set_full(problem)
        elif self.full:
            log.warning("disk space is back (%s): the store accepts messages again", _usage_text(usage))
            self.full = False
            self.reason = ""
            self._space_needed = 0
        return self.full

    def _set_full(self, reason: str) -> None:
        if not self.full:
            log.error("disk full, the store refuses new messages (reads go on): %s", reason)
        self.full = True
        self.reason = reason

    def on_disk_full(self, exc: DiskFullError) -> None:
        """An allocation failed for lack of space: full until that much is free again."""
        self._space_needed = max(self._space_needed, exc.needed)
        self._set_full(str(exc))

    def remark(self) -> str:
        """What a refused producer is told: the broker's disk is full, where, and how full."""
        return (
            "service not available now: the broker's disk is full, no message can be stored "
            f"until space is freed ({self.reason}; {_usage_text(self.usage())})"
        )

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(DISK_WATCH_FULL_SECONDS if self.full else DISK_WATCH_SECONDS)
            try:
                self.check()
            except Exception:
                log.exception("checking the disk failed")


def _usage_text(usage: list[tuple[Path, float, int]]) -> str:
    return ", ".join(f"{path} {ratio:.1%} used, {free} bytes free" for path, ratio, free in usage)
