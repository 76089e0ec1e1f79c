"""Broken and hostile peers cannot exhaust a server's memory, and others keep being served.

Sixty connections each send 15 MiB of a frame that declares 16 MiB and then stall: the broker
and the name server keep their incomplete-frame bytes under ``serverBufferedFrameBytesMax``
(256 MiB by default) by dropping the peer holding the largest, drop the rest when their frame
is overdue (``serverFrameReadTimeoutMillis``), log each drop, and answer a normal client
throughout. A cap on connections per address refuses the excess ones.
"""

from __future__ import annotations

import asyncio
import shutil
import struct
import subprocess
from pathlib import Path

from aiorocketmq.protocol.codes import RequestCode, ResponseCode
from aiorocketmq.protocol.transport import Connection, connect
from tests.broker.requests import call, pull, send
from tests.cluster import Cluster
from tests.support import ServerProcess

from .faults import closed_by_server, rss

PEERS = 60
DECLARED = 16 * 1024 * 1024 - 4
SENT = 15 * 1024 * 1024
#: What the test holds the servers to: the process's own ~40-50 MiB, the 256 MiB the
#: incomplete frames may hold together, and allocator slack.
RSS_BOUND = 360 * 1024 * 1024
FRAME_TIMEOUT_MS = 4000


def listen_backlog(port: int) -> int | None:
    """The backlog of the socket listening on ``port`` (``ss`` shows it as Send-Q)."""
    if shutil.which("ss") is None:
        return None
    out = subprocess.run(["ss", "-ltnH", f"sport = :{port}"], capture_output=True, text=True, check=True)
    line = out.stdout.split("\n")[0].split()
    return int(line[2])


async def hostile_peer(
    port: int, payload: bytes, outcome: list[str]
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
    """Send a frame head declaring 16 MiB and 15 MiB of it, then stall (keep it open)."""
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(struct.pack(">iI", DECLARED, 100))
        writer.write(payload)
        await writer.drain()
    except OSError:
        outcome.append("dropped while sending")
        return None
    outcome.append("sent")
    return reader, writer


async def siege(
    proc: ServerProcess, port: int
) -> tuple[dict[str, int], list[tuple[asyncio.StreamReader, asyncio.StreamWriter]]]:
    assert proc.proc is not None
    payload = bytes(SENT)
    outcome: list[str] = []
    peers = await asyncio.gather(*(hostile_peer(port, payload, outcome) for _ in range(PEERS)))
    return rss(proc.proc.pid), [p for p in peers if p is not None]


async def test_broker_under_sixty_stalled_huge_frames(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path)
    try:
        broker = await cluster.start_broker("broker-a", serverFrameReadTimeoutMillis=FRAME_TIMEOUT_MS)
        assert broker.process is not None
        client = await connect("127.0.0.1", broker.port)
        assert listen_backlog(broker.port) in (1024, None)  # RocketMQ's serverSocketBacklog
        before = rss(broker.process.proc.pid)  # type: ignore[union-attr]
        _, peers = await siege(broker.process, broker.port)
        # A normal client is served while the stalled frames sit there.
        sent = await send(client, "Hostile", b"still here")
        assert sent.code == ResponseCode.SUCCESS, sent
        got = await pull(client, "Hostile", int(sent.ext_fields["queueId"]), 0)
        assert got.code == ResponseCode.SUCCESS
        peak = rss(broker.process.proc.pid)["VmHWM"]  # type: ignore[union-attr]
        print(
            f"broker RSS {before['VmRSS'] >> 20} MiB before, peak {peak >> 20} MiB "
            f"with {PEERS} peers x {SENT >> 20} MiB ({len(peers)} still connected after sending)"
        )
        assert peak < RSS_BOUND
        await broker.process.wait_for_line("incomplete frames are buffered for all peers", timeout=5)
        # The survivors' frames are overdue after the deadline: each is dropped.
        dropped = await asyncio.gather(
            *(closed_by_server(reader, FRAME_TIMEOUT_MS / 1000 + 5) for reader, _ in peers)
        )
        assert all(dropped)
        await broker.process.wait_for_line("is still incomplete", timeout=5)
        assert (await send(client, "Hostile", b"and still")).code == ResponseCode.SUCCESS
        for _, writer in peers:
            writer.transport.abort()
        client.close()
    finally:
        await cluster.stop()


async def test_name_server_under_sixty_stalled_huge_frames_and_a_connection_cap(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path)
    try:
        await cluster.start_namesrv(
            serverFrameReadTimeoutMillis=FRAME_TIMEOUT_MS, serverMaxConnectionsPerAddress=PEERS + 2
        )
        proc, port = cluster.namesrv_processes[0], cluster.namesrv_ports[0]
        assert proc.proc is not None
        client = await connect("127.0.0.1", port)
        _, peers = await siege(proc, port)
        answer = await call(client, RequestCode.GET_BROKER_CLUSTER_INFO)
        assert answer.code == ResponseCode.SUCCESS
        peak = rss(proc.proc.pid)["VmHWM"]
        print(f"name server peak RSS {peak >> 20} MiB with {PEERS} peers x {SENT >> 20} MiB")
        assert peak < RSS_BOUND
        await proc.wait_for_line("incomplete frames are buffered for all peers", timeout=5)

        # One more connection from this address fits (the client holds one, the survivors
        # and the dropped ones' slots are released as they go); far more do not.
        extra = [await asyncio.open_connection("127.0.0.1", port) for _ in range(PEERS + 5)]
        refused = await asyncio.gather(*(closed_by_server(reader, 2.0) for reader, _ in extra))
        assert any(refused)
        await proc.wait_for_line("limit .* per address", timeout=5)
        # A client from another address is served whatever this one does.
        loop = asyncio.get_running_loop()
        _, other = await loop.create_connection(Connection, "127.0.0.1", port, local_addr=("127.0.0.2", 0))
        assert (await call(other, RequestCode.GET_BROKER_CLUSTER_INFO)).code == ResponseCode.SUCCESS
        for _, writer in [*peers, *extra]:
            writer.transport.abort()
        other.close()
        client.close()
    finally:
        await cluster.stop()
