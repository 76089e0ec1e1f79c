"""Helpers for integration tests: ports and real server processes.

A :class:`ServerProcess` runs ``python -m <module> ...`` as a child, drains its stderr (kept
for failure messages) and is ready when the server logs ``listening on <host>:<port>``.

No test picks a "free" port and lets it go before a child binds it (another process may take
it in between): servers bind port 0 and report what they got, a test that needs a known port
holds it (:func:`held_port`) until the server has it, and a restart on a port the server had
before retries while the port is still busy (:func:`start_on_port`).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import re
import signal
import socket
import sys
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from pathlib import Path

READY = re.compile(r"listening on \S+:(\d+)")
ROOT = Path(__file__).resolve().parent.parent


def die_with_parent() -> None:
    """Runs in the child before exec: if the test process dies (a crash in a C++ client it
    loaded, say), the kernel sends the child SIGTERM, so no server outlives its test run."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


PR_SET_PDEATHSIG = 1


async def wait_until(
    predicate: Callable[[], bool | Awaitable[bool]], timeout: float = 30.0, interval: float = 0.05
) -> None:
    """Poll an external condition (another process's state) until it holds, failing after
    ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        outcome = predicate()
        if not isinstance(outcome, bool):
            outcome = await outcome
        if outcome:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        await asyncio.sleep(interval)


@contextlib.contextmanager
def held_port() -> Iterator[int]:
    """A port bound (SO_REUSEADDR) but never listening, for the length of the block.

    Nothing else can bind it meanwhile, connecting to it is refused (a dead address), and a
    server started inside the block listens on it, since the servers set SO_REUSEADDR too.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        holder.bind(("0.0.0.0", 0))
        yield int(holder.getsockname()[1])


ADDRESS_IN_USE = re.compile(r"address already in use|errno 98", re.IGNORECASE)


async def start_on_port(make: Callable[[], ServerProcess], port: int, timeout: float = 30.0) -> ServerProcess:
    """Start the server ``make()`` builds, configured to listen on ``port``. Port 0 binds once;
    a fixed port (a restart keeping its address) is retried while another socket still holds
    it (an outgoing connection may have been given it as its local port)."""
    deadline = time.monotonic() + timeout
    while True:
        proc = make()
        try:
            return await proc.start()
        except RuntimeError:
            if port == 0 or not ADDRESS_IN_USE.search(proc.output) or time.monotonic() > deadline:
                raise
        await asyncio.sleep(0.2)


class ServerProcess:
    """A server child process started with ``sys.executable -m module args``."""

    def __init__(
        self,
        module: str,
        args: Sequence[str],
        *,
        env: dict[str, str] | None = None,
        prefix: Sequence[str] = (),
    ) -> None:
        self.module = module
        self.args = list(args)
        #: Runs the interpreter under this command (``ip netns exec <ns>``: tests/hosts.py).
        self.prefix = list(prefix)
        self.env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
        self.proc: asyncio.subprocess.Process | None = None
        self.lines: list[str] = []
        self.port: int | None = None
        self._ready: asyncio.Future[int] | None = None
        self._reader: asyncio.Task[None] | None = None
        self._new_line = asyncio.Event()

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    async def start(self, timeout: float = 30.0) -> ServerProcess:
        loop = asyncio.get_running_loop()
        self._ready = loop.create_future()
        self.proc = await asyncio.create_subprocess_exec(
            *self.prefix,
            sys.executable,
            "-m",
            self.module,
            *self.args,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env=self.env,
            cwd=str(ROOT),
            preexec_fn=die_with_parent,
        )
        self._reader = asyncio.ensure_future(self._drain())
        try:
            self.port = await asyncio.wait_for(asyncio.shield(self._ready), timeout)
        except (TimeoutError, RuntimeError) as exc:
            await self.kill()
            raise RuntimeError(f"{self.module} did not become ready: {exc}\n{self.output}") from None
        return self

    async def _drain(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        async for raw in self.proc.stdout:
            line = raw.decode(errors="replace").rstrip()
            self.lines.append(line)
            self._new_line.set()
            match = READY.search(line)
            if match and self._ready is not None and not self._ready.done():
                self._ready.set_result(int(match.group(1)))
        self._new_line.set()
        if self._ready is not None and not self._ready.done():
            self._ready.set_exception(RuntimeError(f"exited with {await self.proc.wait()}"))

    async def wait_for_line(self, pattern: str, timeout: float = 30.0) -> str:
        """Wait until the process writes a line matching ``pattern``."""
        regex = re.compile(pattern)
        try:
            async with asyncio.timeout(timeout):
                seen = 0
                while True:
                    for line in self.lines[seen:]:
                        if regex.search(line):
                            return line
                    seen = len(self.lines)
                    if self._reader is None or self._reader.done():
                        raise RuntimeError(f"process ended without printing {pattern!r}\n{self.output}")
                    self._new_line.clear()
                    await self._new_line.wait()
        except TimeoutError:
            raise AssertionError(f"no line matching {pattern!r} within {timeout}s:\n{self.output}") from None

    async def stop(self, timeout: float = 20.0) -> int:
        """SIGTERM and wait for a clean exit; returns the exit code."""
        return await self._signal(signal.SIGTERM, timeout)

    async def kill(self) -> int:
        return await self._signal(signal.SIGKILL, 10.0)

    async def _signal(self, sig: int, timeout: float) -> int:
        proc = self.proc
        if proc is None:
            return 0
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(sig)
            try:
                await asyncio.wait_for(proc.wait(), timeout)
            except TimeoutError:
                proc.kill()
                await proc.wait()
        if self._reader is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._reader, 5)
        return proc.returncode if proc.returncode is not None else 0
