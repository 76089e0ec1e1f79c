"""Fault injection for the reliability tests: a TCP proxy that cuts, freezes and slows the
traffic between clients and a server, and a small real filesystem (a loop-mounted ext4
image) that a test can fill to the brim.

The proxy follows the idea of asyncpg's fuzzing proxy: every connection through it is a pair
of pumps that the test controls; cutting aborts both sides at once, freezing holds the bytes
(neither side sees an error, as with a stalled network), slowing delays every chunk.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import subprocess
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path


class FaultProxy:
    """``127.0.0.1:<port>`` → ``target``; :meth:`cut`, :meth:`freeze`/:meth:`thaw`, ``delay``."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.delay = 0.0
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._server: asyncio.Server | None = None
        self._pairs: set[tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self.port = 0
        self.cuts = 0

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self.port

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def _accept(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(*self.target)
        except OSError:
            client_writer.transport.abort()
            return
        pair = (client_writer, upstream_writer)
        self._pairs.add(pair)
        pumps = [
            asyncio.ensure_future(self._pump(client_reader, upstream_writer)),
            asyncio.ensure_future(self._pump(upstream_reader, client_writer)),
        ]
        self._tasks.update(pumps)
        try:
            await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in pumps:
                task.cancel()
                self._tasks.discard(task)
            for writer in pair:
                writer.transport.abort()
            self._pairs.discard(pair)

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            while True:
                chunk = await reader.read(65536)
                if not chunk:
                    return
                await self._flowing.wait()
                if self.delay:
                    await asyncio.sleep(self.delay)
                writer.write(chunk)
                await writer.drain()

    def cut(self) -> None:
        """Abort every connection through the proxy, both sides at once (new ones may come)."""
        self.cuts += 1
        for client, upstream in list(self._pairs):
            client.transport.abort()
            upstream.transport.abort()

    def freeze(self) -> None:
        """Hold all traffic (connections stay open, nothing moves) until :meth:`thaw`."""
        self._flowing.clear()

    def thaw(self) -> None:
        self._flowing.set()

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        self.thaw()
        self.cut()
        for task in list(self._tasks):
            task.cancel()
        if self._server is not None:
            await self._server.wait_closed()


#: How each filesystem the tests use is made on an image file.
MKFS = {
    "ext4": ["mkfs.ext4", "-q", "-F", "-m", "0"],
    "xfs": ["mkfs.xfs", "-q", "-f"],
}
#: mkfs.xfs refuses filesystems under 300 MB unless told it runs for fstests (all three set),
#: which is what these small test volumes are.
_XFS_SMALL = {"TEST_DIR": "/tmp", "TEST_DEV": "/dev/null", "QA_CHECK_FS": "1"}


def loop_mount_missing(fs: str = "ext4") -> str:
    """Why a loop-mounted ``fs`` cannot be made here ("" when it can)."""
    if os.geteuid() != 0:
        return "loop mounts need root"
    for tool in (MKFS[fs][0], "mount", "losetup"):
        if shutil.which(tool) is None:
            package = "xfsprogs" if tool == "mkfs.xfs" else "e2fsprogs/mount"
            return f"{tool} is missing (Debian package {package}; make test installs it)"
    return ""


def loop_mount_available(fs: str = "ext4") -> bool:
    return not loop_mount_missing(fs)


@contextlib.contextmanager
def loop_filesystem(where: Path, size_mb: int, fs: str = "ext4") -> Iterator[Path]:
    """A fresh ``fs`` (ext4 or xfs) filesystem of ``size_mb`` MiB (no root reserve), mounted
    at ``where/mnt`` for the duration; unmounted and removed afterwards, whatever happens."""
    image = where / "disk.img"
    mount_point = where / "mnt"
    mount_point.mkdir(parents=True, exist_ok=True)
    with open(image, "wb") as f:
        f.truncate(size_mb << 20)
    env = {**os.environ, **_XFS_SMALL} if fs == "xfs" else None
    subprocess.run([*MKFS[fs], str(image)], check=True, env=env)
    subprocess.run(["mount", "-o", "loop", str(image), str(mount_point)], check=True)
    try:
        yield mount_point
    finally:
        # Lazy: a process killed a moment ago may still hold a file open for a few ms.
        subprocess.run(["umount", "-l", str(mount_point)], check=False)
        with contextlib.suppress(OSError):
            image.unlink()


def fill_disk(directory: Path, name: str = "filler") -> int:
    """Blocking: write ``directory/name`` until the filesystem refuses another byte; returns
    its size. Run it in a thread."""
    path = directory / name
    written = 0
    chunk = b"\xa5" * (1 << 20)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        for size in (1 << 20, 64 << 10, 4096, 512, 1):
            while True:
                try:
                    written += os.write(fd, chunk[:size])
                except OSError:
                    break
        os.fsync(fd)
    finally:
        os.close(fd)
    return written


def rss(pid: int) -> dict[str, int]:
    """VmRSS, VmHWM (peak), RssAnon and RssFile of a process, in bytes."""
    values = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
                values[key] = int(rest.split()[0]) * 1024
    return values


async def poll_until(
    predicate: Callable[[], Awaitable[bool] | bool], timeout: float, interval: float = 0.02
) -> float:
    """Poll a condition held by another process (no event to await) until it holds; returns
    the seconds it took, failing the test after ``timeout``."""
    started = time.monotonic()
    while True:
        outcome = predicate()
        if not isinstance(outcome, bool):
            outcome = await outcome
        if outcome:
            return time.monotonic() - started
        if time.monotonic() - started > timeout:
            raise AssertionError(f"condition not met within {timeout}s")
        await asyncio.sleep(interval)


async def closed_by_server(reader: asyncio.StreamReader, timeout: float) -> bool:
    """Whether the server closes (or resets) the connection ``reader`` reads within ``timeout``."""
    try:
        async with asyncio.timeout(timeout):
            return await reader.read(1) == b""
    except TimeoutError:  # before OSError, of which it is a subclass
        return False
    except (ConnectionError, OSError):
        return True
