"""The transport's limits on peers, in one process over loopback: the buffer budget drops the
peer holding the largest incomplete frame, an overdue frame is dropped, the connections of one
address are capped, and everyone else keeps being served (``ConnectionLimits``)."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncIterator

import pytest

from aiorocketmq.protocol.codes import ResponseCode
from aiorocketmq.protocol.command import RemotingCommand
from aiorocketmq.protocol.transport import Connection, ConnectionLimits, Server, connect

from .faults import closed_by_server

ECHO = 1000


def echo(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    return cmd.response(body=cmd.body)


@pytest.fixture
async def serve() -> AsyncIterator[object]:
    servers: list[Server] = []

    async def start(limits: ConnectionLimits) -> tuple[Server, int]:
        server = Server({ECHO: echo}, name="limits", limits=limits)
        servers.append(server)
        return server, await server.listen("127.0.0.1", 0)

    yield start
    for server in servers:
        await server.close()


async def partial_frame(
    port: int, declared: int, sent: int
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(struct.pack(">iI", declared, 10) + bytes(sent))
    await writer.drain()
    return reader, writer


async def echoes(port: int) -> bool:
    client = await connect("127.0.0.1", port)
    try:
        response = await client.request(RemotingCommand.request(ECHO, body=b"ping"), timeout=5)
        return response.code == ResponseCode.SUCCESS and response.body == b"ping"
    finally:
        client.close()


async def test_budget_drops_the_largest_incomplete_frame(serve: object) -> None:
    server, port = await serve(ConnectionLimits(max_buffered=1 << 20, frame_timeout=60))  # type: ignore[operator]
    small_reader, small = await partial_frame(port, 1 << 20, 100_000)
    big_reader, big = await partial_frame(port, 4 << 20, 700_000)
    assert not await closed_by_server(small_reader, 0.3)
    _, third = await partial_frame(port, 1 << 20, 400_000)  # 1.2 MB together: over 1 MiB
    assert await closed_by_server(big_reader, 5)
    assert not await closed_by_server(small_reader, 0.3)
    assert server.buffered <= 1 << 20 and server.dropped == 1
    assert await echoes(port)
    for writer in (small, big, third):
        writer.transport.abort()


async def test_a_frame_that_does_not_finish_in_time_is_dropped(serve: object) -> None:
    server, port = await serve(ConnectionLimits(frame_timeout=0.4))  # type: ignore[operator]
    reader, writer = await partial_frame(port, 1000, 10)
    assert await closed_by_server(reader, 5)
    assert server.buffered == 0 and server.dropped == 1
    # A peer that trickles whole frames slowly is not a stalled frame.
    client = await connect("127.0.0.1", port)
    for _ in range(4):
        await asyncio.sleep(0.2)
        assert (await client.request(RemotingCommand.request(ECHO, body=b"x"), timeout=5)).code == 0
    client.close()
    writer.transport.abort()


async def test_connections_per_address_are_capped(serve: object) -> None:
    server, port = await serve(ConnectionLimits(max_per_address=3))  # type: ignore[operator]
    held = [await asyncio.open_connection("127.0.0.1", port) for _ in range(3)]
    extra_reader, extra = await asyncio.open_connection("127.0.0.1", port)
    assert await closed_by_server(extra_reader, 5)
    assert not await closed_by_server(held[0][0], 0.2)
    assert server.dropped == 1
    loop = asyncio.get_running_loop()
    _, other = await loop.create_connection(Connection, "127.0.0.1", port, local_addr=("127.0.0.2", 0))
    assert (await other.request(RemotingCommand.request(ECHO, body=b"y"), timeout=5)).body == b"y"
    # A slot freed is a slot to take again.
    held.pop()[1].transport.abort()
    await asyncio.sleep(0.2)
    assert await echoes(port)
    for _, writer in [*held, (None, extra)]:
        writer.transport.abort()
    other.close()
