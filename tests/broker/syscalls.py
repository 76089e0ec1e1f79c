"""Watching a running broker's system calls with ``strace``, for what no client can observe:
whether the commit log really reached the disk before a send was acknowledged, and a disk
slow enough that a synchronous flush runs out of time.

``strace -f -yy -p PID`` attaches to every thread of the broker and prints each call with the
path or TCP endpoints behind its file descriptors; calls that block in one thread while
another runs are split into ``<unfinished ...>`` and ``<... resumed>`` lines, which
:func:`parse` joins back into one :class:`Call` with the line numbers of its start and end
(the order in which the kernel saw them).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import shutil
import signal
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

_START = re.compile(r"^(\d+)\s+(\w+)\((.*)$")
_RESUMED = re.compile(r"^(\d+)\s+<\.\.\. (\w+) resumed>(.*)$")
_RESULT = re.compile(r"\)\s+=\s+(-?\d+)")


@dataclass
class Call:
    name: str
    args: str
    started: int  # line number of the call's start
    ended: int  # line number of its end
    result: int | None


def parse(text: str) -> list[Call]:
    calls: list[Call] = []
    pending: dict[str, Call] = {}
    for number, line in enumerate(text.splitlines()):
        if resumed := _RESUMED.match(line):
            pid, _name, rest = resumed.groups()
            call = pending.pop(pid, None)
            if call is None:
                continue
            call.ended = number
            result = _RESULT.search(rest)
            call.result = int(result[1]) if result else None
            calls.append(call)
        elif started := _START.match(line):
            pid, name, rest = started.groups()
            call = Call(name, rest, number, number, None)
            if rest.endswith("<unfinished ...>"):
                pending[pid] = call
            else:
                result = _RESULT.search(rest)
                call.result = int(result[1]) if result else None
                calls.append(call)
    return sorted(calls, key=lambda c: c.started)


class SyscallTrace:
    """``strace`` attached to a running process until :meth:`detach`."""

    def __init__(self, pid: int, out: Path, syscalls: Sequence[str], inject: Sequence[str] = ()) -> None:
        self.pid = pid
        self.out = out
        self.syscalls = list(syscalls)
        self.inject = list(inject)
        self.proc: asyncio.subprocess.Process | None = None

    async def attach(self, timeout: float = 20.0) -> SyscallTrace:
        strace = shutil.which("strace")
        assert strace, "strace is not installed (make test installs it on Debian/Ubuntu)"
        args = ["-f", "-yy", "-s", "0", "-o", str(self.out), "-e", "trace=" + ",".join(self.syscalls)]
        for rule in self.inject:
            args += ["-e", f"inject={rule}"]
        self.proc = await asyncio.create_subprocess_exec(
            strace, *args, "-p", str(self.pid), stderr=asyncio.subprocess.PIPE
        )
        assert self.proc.stderr is not None
        async with asyncio.timeout(timeout):
            # "Process PID attached [with N threads]": printed once every thread is traced.
            while True:
                line = (await self.proc.stderr.readline()).decode()
                assert line, f"strace ended before attaching to {self.pid}"
                if f"Process {self.pid} attached" in line:
                    return self

    async def detach(self) -> list[Call]:
        if self.proc is not None and self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)
            await asyncio.wait_for(self.proc.communicate(), 20)
        return parse(self.out.read_text()) if self.out.exists() else []
