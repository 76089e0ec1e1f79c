"""Metadata files under ``storePathRootDir/config``: written atomically, read forgivingly.

A save writes ``<file>.tmp``, fsyncs it, keeps the previous content as ``<file>.bak`` and
renames the temp file into place, so a crash leaves either the old or the new file whole.
A load that finds the file missing, empty or unparsable falls back to ``.bak`` with a
warning; with neither, the caller starts empty. Files may be fastjson-style (unquoted
integer keys), as Java brokers write them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aiorocketmq.protocol import fastjson
from aiorocketmq.protocol.errors import ProtocolError

log = logging.getLogger(__name__)


class ConfigFile:
    """One JSON metadata file with ``.bak`` fallback and atomic, off-loop saves."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = asyncio.Lock()

    @property
    def backup(self) -> Path:
        return self.path.with_name(self.path.name + ".bak")

    def load(self) -> Any | None:
        """The parsed content, from the file or its backup; ``None`` when neither is usable."""
        for candidate in (self.path, self.backup):
            try:
                data = candidate.read_bytes()
            except FileNotFoundError:
                continue
            except OSError as exc:
                log.warning("cannot read %s: %s", candidate, exc)
                continue
            if not data.strip():
                log.warning("%s is empty", candidate)
                continue
            try:
                return fastjson.loads(data)
            except ProtocolError as exc:
                log.warning("%s is corrupt (%s); trying the backup", candidate, exc)
        return None

    def save_now(self, data: bytes) -> None:
        """Blocking atomic write; call from a thread (see :meth:`save`)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        try:
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        except OSError:
            # A full disk: the old file stays whole; a half-written temp file must not linger
            # holding the blocks that are short.
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        if self.path.exists():
            os.replace(self.path, self.backup)
        os.replace(tmp, self.path)
        dir_fd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)

    async def save(self, data: bytes) -> None:
        """Write ``data`` atomically on a worker thread; saves of one file never interleave."""
        async with self._lock:
            await asyncio.to_thread(self.save_now, data)


class Saver:
    """Saves a :class:`ConfigFile` in the background whenever asked, coalescing bursts:
    changes made while a save runs are written by one more save right after it."""

    def __init__(self, file: ConfigFile, encode: Callable[[], bytes]) -> None:
        self.file = file
        self.encode = encode
        self._task: asyncio.Task[None] | None = None
        self._again = False

    def request(self) -> None:
        if self._task is not None and not self._task.done():
            self._again = True
            return
        try:
            self._task = asyncio.get_running_loop().create_task(self._run())
        except RuntimeError:  # no loop yet (start-up): the final flush will write it
            self._again = True

    async def _run(self) -> None:
        while True:
            self._again = False
            try:
                await self.file.save(self.encode())
            except OSError as exc:
                log.error("cannot save %s: %s", self.file.path, exc)
            if not self._again:
                return

    async def flush(self) -> None:
        """Write the current state now (and wait for any save in flight)."""
        if self._task is not None:
            await asyncio.shield(self._task)
        await self.file.save(self.encode())
