"""The checkpoint and the marker files of a store directory.

* ``checkpoint``: 4096 bytes; at 0, 8 and 16 the store timestamps (ms, i64) of the newest
  message known durable in the commit log, in the consume queues and in the index. An
  abnormal restart re-verifies the commit log from the file holding the oldest of the three
  (less three seconds of slack). At 24 and 32, as in RocketMQ's ``StoreCheckpoint``, the
  master's flushed offset (kept as read, unused here) and the *confirm offset* of controller
  mode (``confirmPhyOffset``: how far the commit log may be dispatched to consumers; 0 when
  never set).
* ``abort``: exists while a store runs; finding it at start means the last run did not shut
  down cleanly.
* ``lock``: held (``flock``) by the running store, so two processes never share a directory.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import struct
from collections.abc import Callable
from pathlib import Path

from .mapped_file import StoreError, reserve

CHECKPOINT_SIZE = 4096
#: The three timestamps, the master's flushed offset and the confirm offset.
_FIELDS = struct.Struct(">qqqqq")
#: Slack subtracted from the checkpoint before choosing where recovery starts.
RECOVERY_SLACK_MS = 3000


class Checkpoint:
    """The three durability timestamps; :meth:`flush` (blocking) writes and syncs them."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        #: Controller mode: the confirm offset to persist (RocketMQ's ``confirmPhyOffset``),
        #: read from ``confirm_source`` when set (at each flush, from the flushing thread).
        self.confirm_offset = 0
        self.confirm_source: Callable[[], int] | None = None
        self._master_flushed_offset = 0
        data = os.pread(self.fd, _FIELDS.size, 0)
        if len(data) == _FIELDS.size:
            (
                self.physic_timestamp,
                self.logics_timestamp,
                self.index_timestamp,
                self._master_flushed_offset,
                self.confirm_offset,
            ) = _FIELDS.unpack(data)
        else:
            self.physic_timestamp = self.logics_timestamp = self.index_timestamp = 0
            try:
                os.ftruncate(self.fd, CHECKPOINT_SIZE)
                # Its blocks exist from the start: a checkpoint must still be writable when
                # the disk is full.
                reserve(self.fd, 0, CHECKPOINT_SIZE, path)
            except BaseException:
                os.close(self.fd)
                raise

    def min_timestamp(self, with_index: bool) -> int:
        """Where abnormal recovery may start (before slack): the oldest durable timestamp."""
        stamp = min(self.physic_timestamp, self.logics_timestamp)
        if with_index and self.index_timestamp > 0:
            stamp = min(stamp, self.index_timestamp)
        return stamp

    def flush(self, stamps: tuple[int, int, int] | None = None) -> None:
        """Blocking: write ``stamps`` (default: the current values) and the confirm offset, and
        force them to disk."""
        if stamps is None:
            stamps = (self.physic_timestamp, self.logics_timestamp, self.index_timestamp)
        if self.confirm_source is not None:
            self.confirm_offset = self.confirm_source()
        os.pwrite(self.fd, _FIELDS.pack(*stamps, self._master_flushed_offset, self.confirm_offset), 0)
        os.fdatasync(self.fd)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)


class DirectoryLock:
    """An exclusive ``flock`` on ``{root}/lock`` for the life of the store."""

    def __init__(self, root: Path) -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.fd = os.open(root / "lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(self.fd)
            raise StoreError(f"store directory {root} is in use by another process") from None

    def release(self) -> None:
        with contextlib.suppress(OSError):
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)


def create_abort_file(root: Path) -> None:
    """Blocking: mark the store as running, durably."""
    fd = os.open(root / "abort", os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    dir_fd = os.open(root, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def remove_abort_file(root: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(root / "abort")


def abort_file_exists(root: Path) -> bool:
    return (root / "abort").exists()
