"""Fixtures for broker tests: a real name server + broker, and raw connections to them."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from aiorocketmq.protocol.transport import Connection, connect
from tests.cluster import Cluster

ConnectTo = Callable[..., Awaitable[Connection]]


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    """A name server and one broker (``broker-a``); every process must stop cleanly."""
    cluster = Cluster(tmp_path)
    await cluster.start_namesrv()
    try:
        await cluster.start_broker("broker-a")
        yield cluster
    finally:
        await cluster.stop()


@pytest.fixture
async def two_brokers(tmp_path: Path) -> AsyncIterator[Cluster]:
    """A name server and two brokers (``broker-a``, ``broker-b``)."""
    cluster = Cluster(tmp_path)
    await cluster.start_namesrv()
    try:
        await cluster.start_broker("broker-a")
        await cluster.start_broker("broker-b")
        yield cluster
    finally:
        await cluster.stop()


@pytest.fixture
async def connect_to() -> AsyncIterator[ConnectTo]:
    opened: list[Connection] = []

    async def open_connection(port: int, **kwargs: object) -> Connection:
        conn = await connect("127.0.0.1", port, **kwargs)  # type: ignore[arg-type]
        opened.append(conn)
        return conn

    yield open_connection
    for conn in opened:
        conn.close()
        await conn.wait_closed()


@pytest.fixture
async def broker_conn(cluster: Cluster, connect_to: ConnectTo) -> Connection:
    return await connect_to(cluster.brokers["broker-a"].port)
