"""Fixtures for name server tests: real ``python -m aiorocketmq.namesrv`` processes and connections to them."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from aiorocketmq.protocol.transport import Connection, connect
from tests.support import ServerProcess

StartNamesrv = Callable[..., Awaitable[ServerProcess]]
Connect = Callable[[ServerProcess], Awaitable[Connection]]


@pytest.fixture
async def start_namesrv(tmp_path: Path) -> AsyncIterator[StartNamesrv]:
    """Start a name server; every one still running at the end must stop cleanly (exit 0)."""
    started: list[ServerProcess] = []

    async def start(
        *,
        store_dir: Path | None = None,
        config: dict[str, str] | None = None,
        port: int | None = 0,
        args: tuple[str, ...] = (),
    ) -> ServerProcess:
        argv = ["--store-dir", str(store_dir or tmp_path / "store"), "--bind-address", "127.0.0.1"]
        if port is not None:
            argv += ["--listen-port", str(port)]
        if config is not None:
            path = tmp_path / f"namesrv-{len(started)}.properties"
            path.write_text("".join(f"{k}={v}\n" for k, v in config.items()))
            argv += ["-c", str(path)]
        proc = ServerProcess("aiorocketmq.namesrv", [*argv, *args])
        await proc.start()
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if proc.proc is not None and proc.proc.returncode is None:
            code = await proc.stop()
            assert code == 0, f"name server exited with {code}\n{proc.output}"


@pytest.fixture
async def connect_to() -> AsyncIterator[Connect]:
    """Open connections to a name server; all are closed at the end."""
    opened: list[Connection] = []

    async def open_connection(proc: ServerProcess) -> Connection:
        assert proc.port is not None
        conn = await connect("127.0.0.1", proc.port)
        opened.append(conn)
        return conn

    yield open_connection
    for conn in opened:
        conn.close()
        await conn.wait_closed()
