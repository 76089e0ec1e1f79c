"""kill -9 of a SYNC_MASTER in the middle of a send stream, several times: every message the
master acknowledged is readable from the slave at once, and once the master is back a consumer
group consumes every acknowledged message (duplicates counted, none lost)."""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter

from aiorocketmq import ConsumeFrom, PushConsumer
from aiorocketmq.protocol.codes import ResponseCode
from aiorocketmq.protocol.errors import MQError
from aiorocketmq.protocol.transport import Connection, connect
from tests.broker.requests import pull_queues, send
from tests.cluster import Cluster
from tests.support import wait_until

from .support import consume_until, has_slaves, start_pair

TOPIC = "Failover"
WRITERS = 6
ROUNDS = 3
PER_ROUND = 150


async def slave_bodies(conn: Connection) -> Counter[str]:
    return Counter(m.body.decode() for m in await pull_queues(conn, TOPIC, 4))


async def slave_has_all(conn: Connection, bodies: set[str]) -> bool:
    return bodies <= set(await slave_bodies(conn))


async def test_killing_the_master_loses_no_acknowledged_message(cluster: Cluster) -> None:
    master, slave = await start_pair(cluster)
    await wait_until(lambda: has_slaves(master.port), 30)
    acked: set[str] = set()
    not_replicated = 0
    stop = asyncio.Event()
    progress = asyncio.Event()

    async def writer(w: int) -> None:
        nonlocal not_replicated
        seq = 0
        conn: Connection | None = None
        while not stop.is_set():
            try:
                if conn is None or conn.closed:
                    conn = await connect("127.0.0.1", master.port, timeout=1.0)
                body = f"w{w}-{seq}"
                seq += 1
                response = await send(conn, TOPIC, body.encode(), queue_id=seq % 4)
            except MQError:
                await asyncio.sleep(0.05)  # the master is down: try again on a new connection
                continue
            if response.code == ResponseCode.SUCCESS:
                acked.add(body)
                progress.set()
            elif response.code in (ResponseCode.SLAVE_NOT_AVAILABLE, ResponseCode.FLUSH_SLAVE_TIMEOUT):
                not_replicated += 1  # stored on the master only: not acknowledged as replicated
                await asyncio.sleep(0.05)
        if conn is not None:
            conn.close()

    writers = [asyncio.ensure_future(writer(w)) for w in range(WRITERS)]
    slave_conn = await connect("127.0.0.1", slave.port, timeout=5.0)
    try:
        for _ in range(ROUNDS):
            target = len(acked) + PER_ROUND
            while len(acked) < target:
                progress.clear()
                await asyncio.wait_for(progress.wait(), 30)
            await cluster.kill_broker("broker-a")
            # Every message acknowledged so far is on the slave (it learns the topic's config
            # from the master, so wait for that on the first round only).
            snapshot = set(acked)

            await wait_until(lambda snapshot=snapshot: slave_has_all(slave_conn, snapshot), 15)
            await cluster.start_broker("broker-a", brokerRole="SYNC_MASTER")
            await wait_until(lambda: has_slaves(master.port), 30)
        stop.set()
        await asyncio.gather(*writers)
    finally:
        stop.set()
        for task in writers:
            task.cancel()
        with contextlib.suppress(BaseException):
            await asyncio.gather(*writers)
        slave_conn.close()

    # The master is back: a consumer group gets every acknowledged message.
    consumer = PushConsumer(
        "FailoverGroup", namesrv=cluster.namesrv_addr, consume_from=ConsumeFrom.FIRST_OFFSET
    )
    consumer.subscribe(TOPIC, "*")
    got = Counter(await consume_until(consumer, acked, 60))
    lost = acked - set(got)
    duplicates = sum(n - 1 for n in got.values())
    print(
        f"acked {len(acked)}, consumed {sum(got.values())}, duplicates {duplicates}, "
        f"stored but not replicated {not_replicated}, lost {len(lost)}"
    )
    assert not lost, sorted(lost)[:20]
    assert len(acked) >= ROUNDS * PER_ROUND
