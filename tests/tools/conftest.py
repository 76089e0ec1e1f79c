"""Fixtures for the command-line tools: a real cluster per test module, and runners that start
``mqadmin`` / ``mqbench`` as real subprocesses (``python -m aiorocketmq.tools.<tool>``)."""

from __future__ import annotations

import asyncio
import itertools
import os
import re
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import pytest_asyncio

from aiorocketmq.client import Admin
from tests.cluster import Cluster
from tests.support import ROOT

_names = itertools.count(1)
CLI_TIMEOUT = 60.0


def unique(prefix: str) -> str:
    """A topic or group name no other test uses."""
    return f"{prefix}_{os.getpid()}_{next(_names)}"


def tool_env() -> dict[str, str]:
    # A NAMESRV_ADDR from the developer's shell must not decide which cluster a test talks to.
    env = {k: v for k, v in os.environ.items() if k != "NAMESRV_ADDR"}
    env["PYTHONUNBUFFERED"] = "1"
    return env


async def spawn_tool(
    tool: str, *args: str, env: dict[str, str] | None = None, cwd: Path | None = ROOT
) -> asyncio.subprocess.Process:
    """``python -m aiorocketmq.tools.<tool> args``, no stdin, its output piped; ``env``:
    :func:`tool_env` unless given."""
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        f"aiorocketmq.tools.{tool}",
        *args,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=cwd,
        env=tool_env() if env is None else env,
    )


@dataclass
class Outcome:
    code: int
    out: str
    err: str

    @property
    def lines(self) -> list[str]:
        return self.out.splitlines()


async def run_tool(tool: str, *args: str, timeout: float = CLI_TIMEOUT) -> Outcome:
    proc = await spawn_tool(tool, *args)
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    assert proc.returncode is not None
    return Outcome(proc.returncode, out.decode(), err.decode())


async def mqadmin(*args: str) -> Outcome:
    return await run_tool("mqadmin", *args)


async def mqbench(*args: str) -> Outcome:
    return await run_tool("mqbench", *args)


class RunningTool:
    """A long-running tool subprocess whose stdout lines can be awaited one by one."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.out: list[str] = []
        self.err: list[str] = []
        self._new = asyncio.Event()
        assert proc.stdout is not None and proc.stderr is not None
        self._readers = [
            asyncio.ensure_future(self._drain(proc.stdout, self.out)),
            asyncio.ensure_future(self._drain(proc.stderr, self.err)),
        ]

    @classmethod
    async def start(cls, tool: str, *args: str) -> RunningTool:
        return cls(await spawn_tool(tool, *args))

    async def _drain(self, stream: asyncio.StreamReader, lines: list[str]) -> None:
        async for raw in stream:
            lines.append(raw.decode().rstrip("\n"))
            self._new.set()
        self._new.set()

    async def wait_for_line(self, pattern: str, timeout: float = 30.0, *, stream: str = "out") -> str:
        """The first line (of stdout, or stderr) matching ``pattern``, waiting for it."""
        regex = re.compile(pattern)
        lines = self.out if stream == "out" else self.err
        async with asyncio.timeout(timeout):
            while True:
                for line in lines:
                    if regex.search(line):
                        return line
                if all(reader.done() for reader in self._readers):
                    raise AssertionError(
                        f"the tool ended without printing {pattern!r}:\n" + "\n".join(self.out + self.err)
                    )
                self._new.clear()
                await self._new.wait()

    async def wait(self, timeout: float = 60.0) -> int:
        async with asyncio.timeout(timeout):
            code = await self.proc.wait()
            await asyncio.gather(*self._readers)
        return code

    async def stop(self) -> None:
        if self.proc.returncode is None:
            self.proc.kill()
            await self.proc.wait()
        for reader in self._readers:
            reader.cancel()


async def wait_until(
    predicate: Callable[[], Awaitable[bool]], timeout: float = 30.0, interval: float = 0.1
) -> None:
    """Poll an external condition until it holds, failing after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not await predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        await asyncio.sleep(interval)


async def start_cluster(root: Path, brokers: tuple[str, ...]) -> Cluster:
    cluster = Cluster(root)
    await cluster.start_namesrv()
    try:
        for name in brokers:
            await cluster.start_broker(name)
    except BaseException:
        await cluster.stop()
        raise
    return cluster


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def cluster(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Cluster]:
    """A name server and two brokers of one cluster, shared by a test module."""
    cluster = await start_cluster(tmp_path_factory.mktemp("cluster"), ("broker-a", "broker-b"))
    try:
        async with Admin(cluster.namesrv_addr) as admin:
            # Both brokers registered: commands that span the cluster see both.
            async def registered() -> bool:
                return len((await admin.cluster_info()).broker_addr_table) == 2

            await wait_until(registered)
        yield cluster
    finally:
        await cluster.stop()


@pytest_asyncio.fixture(loop_scope="module")
async def admin(cluster: Cluster) -> AsyncIterator[Admin]:
    async with Admin(cluster.namesrv_addr) as admin:
        yield admin
