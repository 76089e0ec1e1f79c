"""Restarts and network faults: routes heal fast and nothing acknowledged is lost.

* The name server is killed (-9) and restarted on the same port while an SDK producer sends:
  the broker notices its connection closed, reconnects and registers again, so the route is
  back within 2 s of the new name server listening (not at the next 30 s registration).
* A producer talks to the broker through a fault proxy that freezes, slows and cuts the
  connection, and the broker is killed (-9) and restarted under it: every acknowledged
  message is stored exactly where the broker said; duplicates (a retry of a send whose answer
  was lost) are counted and bounded by the number of retries.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from aiorocketmq import Message, Producer
from aiorocketmq.protocol.codes import RequestCode, ResponseCode
from aiorocketmq.protocol.errors import MQError
from aiorocketmq.protocol.message import MessageExt
from aiorocketmq.protocol.transport import Connection, connect
from tests.broker.requests import call, pull_queues, send
from tests.cluster import Cluster
from tests.support import ServerProcess

from .faults import FaultProxy, poll_until

TOPIC = "Healing"
QUEUES = 4


async def route_exists(port: int, topic: str) -> bool:
    try:
        conn = await connect("127.0.0.1", port, timeout=1.0)
    except MQError:
        return False
    try:
        response = await call(conn, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}, timeout=1.0)
        return response.code == ResponseCode.SUCCESS
    except MQError:
        return False
    finally:
        conn.close()


def account(acked: set[int], messages: list[MessageExt]) -> tuple[int, int]:
    seen: dict[int, int] = {}
    for msg in messages:
        seq = int(msg.body.split(b"|", 1)[0])
        seen[seq] = seen.get(seq, 0) + 1
    return len(acked - set(seen)), sum(n - 1 for n in seen.values())


async def test_routes_return_within_two_seconds_of_a_name_server_restart(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path)
    try:
        await cluster.start_namesrv()
        port = cluster.namesrv_ports[0]
        broker = await cluster.start_broker("broker-a", defaultTopicQueueNums=QUEUES)
        conn = await connect("127.0.0.1", broker.port)
        assert (await send(conn, TOPIC, b"-1|first")).code == ResponseCode.SUCCESS
        await poll_until(lambda: route_exists(port, TOPIC), timeout=10)

        acked: set[int] = set()
        errors: list[BaseException] = []
        stop = asyncio.Event()

        async def produce() -> None:
            async with Producer("healing-producer", namesrv=cluster.namesrv_addr) as producer:
                seq = 0
                while not stop.is_set():
                    try:
                        await producer.send(Message(TOPIC, f"{seq}|".encode()))
                        acked.add(seq)
                    except MQError as exc:
                        errors.append(exc)
                    seq += 1
                    await asyncio.sleep(0.005)

        producing = asyncio.ensure_future(produce())
        await asyncio.sleep(0.5)
        old = cluster.namesrv_processes[0]
        await old.kill()
        await asyncio.sleep(0.5)
        args = list(old.args)
        args[args.index("--listen-port") + 1] = str(port)  # the same port again
        restarted = ServerProcess("aiorocketmq.namesrv", args)
        await restarted.start()
        cluster.namesrv_processes[0] = restarted
        listening = time.monotonic()
        try:
            await poll_until(lambda: route_exists(port, TOPIC), timeout=10)
        except AssertionError:
            assert broker.process is not None
            raise AssertionError("no route after the restart\n" + broker.process.output[-3000:]) from None
        healed = time.monotonic() - listening
        print(f"route back {healed:.2f}s after the restarted name server listened")
        assert healed < 2.0
        await asyncio.sleep(0.5)
        stop.set()
        await producing
        lost, duplicates = account(acked, await pull_queues(conn, TOPIC, QUEUES, max_nums=32))
        print(
            f"SDK producer: {len(acked)} acknowledged, {lost} lost, {duplicates} duplicated, {len(errors)} errors"
        )
        assert len(acked) > 50 and lost == 0 and duplicates == 0
        assert errors == []  # the route was cached: a name-server outage is invisible to sends
        conn.close()
    finally:
        await cluster.stop()


async def test_cuts_freezes_slowness_and_kill_9_lose_nothing_acknowledged(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path)
    proxy: FaultProxy | None = None
    try:
        broker = await cluster.start_broker("broker-a", defaultTopicQueueNums=QUEUES)
        proxy = FaultProxy("127.0.0.1", broker.port)
        await proxy.start()
        acked: set[int] = set()
        retries = 0
        state: dict[str, Connection | None] = {"conn": None}

        async def send_seq(seq: int) -> None:
            """Send until the broker acknowledges (reconnecting through the proxy as needed)."""
            nonlocal retries
            while True:
                conn = state["conn"]
                try:
                    if conn is None or conn.closed:
                        conn = state["conn"] = await connect("127.0.0.1", proxy.port, timeout=1.0)
                    response = await asyncio.wait_for(
                        send(conn, TOPIC, f"{seq}|".encode(), queue_id=seq % QUEUES), 1.5
                    )
                    if response.code == ResponseCode.SUCCESS:
                        acked.add(seq)
                        return
                except (MQError, TimeoutError, OSError):
                    if conn is not None:
                        conn.abort()
                    state["conn"] = None
                retries += 1
                await asyncio.sleep(0.05)

        async def produce(first: int, count: int) -> None:
            for seq in range(first, first + count):
                await send_seq(seq)

        async def faults() -> None:
            await asyncio.sleep(0.3)
            proxy.freeze()
            await asyncio.sleep(2.0)  # longer than a send's timeout: the client gives up, retries
            proxy.thaw()
            await asyncio.sleep(0.3)
            proxy.delay = 0.02
            await asyncio.sleep(0.5)
            proxy.delay = 0.0
            proxy.cut()
            await asyncio.sleep(0.3)
            proxy.cut()

        await asyncio.gather(produce(0, 400), faults())
        # kill -9 in the middle of a stream of sends, then restart on the same store.
        producing = asyncio.ensure_future(produce(400, 400))
        await asyncio.sleep(0.5)
        await cluster.kill_broker("broker-a")
        await cluster.start_broker("broker-a", defaultTopicQueueNums=QUEUES)
        await producing
        assert len(acked) == 800
        direct = await connect("127.0.0.1", broker.port)
        lost, duplicates = account(acked, await pull_queues(direct, TOPIC, QUEUES, max_nums=32))
        print(
            f"through faults and kill -9: {len(acked)} acknowledged, {lost} lost, {duplicates} duplicated, {retries} retries, {proxy.cuts} cuts"
        )
        assert lost == 0
        assert duplicates <= retries
        direct.close()
    finally:
        if proxy is not None:
            await proxy.close()
        await cluster.stop()
