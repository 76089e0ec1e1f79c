"""A consumer running in a child process, as the restart and signal tests drive one: the
program prints ``READY`` on stderr once it consumes and one line per finished message on
stdout, ``<queue id> <queue offset> <body>``, which this side collects as it comes."""

from __future__ import annotations

import asyncio
import signal
import sys
from typing import Self

from tests.support import ROOT


class ConsumerProcess:
    """One consumer process and the messages it finished: (queue id, queue offset, body).
    Subclasses read the program's other stderr lines in :meth:`on_stderr`."""

    #: The program's module, run with ``python -m`` from the repository's root.
    PROGRAM = ""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.records: list[tuple[int, int, str]] = []
        self.ready = asyncio.Event()
        self._reader = asyncio.ensure_future(self._read())
        self._errors = asyncio.ensure_future(self._read_errors())

    @classmethod
    async def start(cls, *args: str) -> Self:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", cls.PROGRAM, *args,
            cwd=ROOT,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        child = cls(proc)
        await asyncio.wait_for(child.ready.wait(), 30)
        return child

    def on_stderr(self, line: bytes) -> None:
        """A stderr line other than ``READY``."""

    async def _read(self) -> None:
        assert self.proc.stdout is not None
        while line := await self.proc.stdout.readline():
            queue_id, offset, body = line.decode().split()
            self.records.append((int(queue_id), int(offset), body))

    async def _read_errors(self) -> None:
        assert self.proc.stderr is not None
        while line := await self.proc.stderr.readline():
            if line.strip() == b"READY":
                self.ready.set()
            else:
                self.on_stderr(line)

    async def kill(self) -> None:
        self.proc.kill()
        assert await self.proc.wait() == -signal.SIGKILL
        await self._reader

    async def stop(self, sig: signal.Signals = signal.SIGTERM) -> int:
        """Send ``sig``; the exit code once the process has ended and its output is read."""
        self.proc.send_signal(sig)
        code = await asyncio.wait_for(self.proc.wait(), 30)
        await self._reader
        await self._errors
        return code
