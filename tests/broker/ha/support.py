"""A master/slave pair of real brokers for the HA tests, and the questions the tests ask of
them (slaves connected, runtime info, a consumer run until it has every message)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Iterator
from typing import Any

from aiorocketmq import ConsumeResult, MessageExt, PushConsumer
from aiorocketmq.protocol.body import KVTable
from aiorocketmq.protocol.codes import RequestCode, ResponseCode
from aiorocketmq.protocol.transport import connect
from tests.broker.requests import call
from tests.cluster import BrokerProcess, Cluster


@contextlib.contextmanager
def held_port_pair() -> Iterator[int]:
    """A port and the next one, both held (see ``tests.support.held_port``): a broker listens
    on ``listenPort`` and its HA port on ``listenPort + 1``."""
    for _ in range(100):
        first = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        second = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            for sock in (first, second):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            first.bind(("0.0.0.0", 0))
            port = int(first.getsockname()[1])
            try:
                second.bind(("0.0.0.0", port + 1))
            except OSError:
                continue
            yield port
            return
        finally:
            first.close()
            second.close()
    raise RuntimeError("no two consecutive free ports")


async def start_pair(
    cluster: Cluster, master: dict[str, Any] | None = None, slave: dict[str, Any] | None = None
) -> tuple[BrokerProcess, BrokerProcess]:
    """``broker-a`` (SYNC_MASTER unless told) and its slave ``broker-a-slave`` (id 1)."""
    with held_port_pair() as port:
        m = await cluster.start_broker(
            "broker-a", listenPort=port, **{"brokerRole": "SYNC_MASTER", **(master or {})}
        )
    return m, await start_slave(cluster, **(slave or {}))


async def start_slave(cluster: Cluster, **settings: Any) -> BrokerProcess:
    """``broker-a-slave``, the slave (id 1) of ``broker-a``, with ``settings`` added."""
    with held_port_pair() as port:
        return await cluster.start_broker(
            "broker-a-slave",
            listenPort=port,
            brokerName="broker-a",
            brokerId=1,
            brokerRole="SLAVE",
            **settings,
        )


async def runtime_info(port: int) -> dict[str, str]:
    conn = await connect("127.0.0.1", port, timeout=3.0)
    try:
        response = await call(conn, RequestCode.GET_BROKER_RUNTIME_INFO, timeout=3.0)
        assert response.code == ResponseCode.SUCCESS, response
        return dict(KVTable.decode(response.body).table)
    finally:
        conn.close()


async def slaves_connected(port: int) -> int:
    try:
        return int((await runtime_info(port)).get("haConnectionCount", "0"))
    except Exception:
        return -1


async def has_slaves(port: int, count: int = 1) -> bool:
    """Whether the master at ``port`` reports ``count`` slaves connected to its HA port."""
    return await slaves_connected(port) == count


async def consume_until(consumer: PushConsumer, want: set[str], timeout: float) -> list[str]:
    """Run ``consumer`` (subscribed, not started) until the bodies it consumed include ``want``
    or ``timeout`` seconds pass: the bodies, in the order consumed. Leaving shuts the consumer
    down, which persists its progress and waits for it."""
    got: list[str] = []
    done = asyncio.Event()

    @consumer.listener
    async def handle(messages: list[MessageExt]) -> ConsumeResult:
        got.extend(m.body.decode() for m in messages)
        if want <= set(got):
            done.set()
        return ConsumeResult.SUCCESS

    async with consumer:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(done.wait(), timeout)
    return got
