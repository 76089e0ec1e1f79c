"""Master/slave replication between real broker processes.

A SYNC_MASTER answers a send only once its slave holds the message; the slave serves it,
refuses writes, and the name server routes list both. A stalled slave makes sends answer
FLUSH_SLAVE_TIMEOUT after ``slaveTimeout`` without holding up other connections, and no slave
at all makes them answer SLAVE_NOT_AVAILABLE at once.
"""

from __future__ import annotations

import asyncio
import re
import time

from aiorocketmq.protocol.body import (
    DelayOffsetTable,
    SubscriptionGroupConfig,
    SubscriptionGroupWrapper,
    TopicRouteData,
)
from aiorocketmq.protocol.codes import RequestCode, ResponseCode
from aiorocketmq.protocol.transport import Connection, connect
from tests.broker.requests import call, max_offset, pull_all, send
from tests.cluster import Cluster
from tests.reliability.faults import FaultProxy
from tests.support import held_port, wait_until
from tests.tools.conftest import mqadmin

from .support import has_slaves, held_port_pair, runtime_info, start_pair, start_slave

TOPIC = "Replicated"


async def open_conn(port: int) -> Connection:
    return await connect("127.0.0.1", port, timeout=5.0)


async def scrape(port: int) -> str:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    data = await reader.read()
    writer.close()
    return data.decode()


async def test_a_sync_master_acks_what_its_slave_holds(cluster: Cluster) -> None:
    with held_port() as metrics_port:
        master, slave = await start_pair(
            cluster, master={"metricsPromExporterEnable": "true", "metricsPromExporterPort": metrics_port}
        )
    await wait_until(lambda: has_slaves(master.port), 30)
    conn = await open_conn(master.port)
    slave_conn = await open_conn(slave.port)
    try:
        group = SubscriptionGroupConfig(group_name="HaGroup", retry_max_times=7)
        created = await call(conn, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=group.encode())
        assert created.code == ResponseCode.SUCCESS
        for i in range(40):
            response = await send(conn, TOPIC, f"m{i}".encode(), queue_id=i % 4)
            assert response.code == ResponseCode.SUCCESS, response
            # Acknowledged means the slave's commit log has it already.
            master_end = int((await runtime_info(master.port))["commitLogMaxOffset"])
            assert int((await runtime_info(slave.port))["commitLogMaxOffset"]) >= master_end
        info = await runtime_info(master.port)
        assert info["brokerRole"] == "SYNC_MASTER" and info["commitLogDiff"] == "0"

        # The slave learns the topic from its master and serves every message, read-only.
        async def slave_bodies() -> list[str]:
            bodies = []
            for q in range(4):
                bodies += [m.body.decode() for m in await pull_all(slave_conn, TOPIC, q)]
            return sorted(bodies)

        expected = sorted(f"m{i}" for i in range(40))

        async def slave_serves_all() -> bool:
            return await slave_bodies() == expected

        await wait_until(slave_serves_all, 20)
        assert await max_offset(slave_conn, TOPIC, 1) == 10
        # The same sync round copied the master's groups and delay offsets.
        groups = await call(slave_conn, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
        table = SubscriptionGroupWrapper.decode(groups.body).subscription_group_table
        assert table["HaGroup"].retry_max_times == 7
        delays = [(await call(c, RequestCode.GET_ALL_DELAY_OFFSET)).body for c in (conn, slave_conn)]
        assert DelayOffsetTable.decode(delays[0]) == DelayOffsetTable.decode(delays[1])
        refused = await send(slave_conn, TOPIC, b"to the slave")
        assert refused.code == ResponseCode.SERVICE_NOT_AVAILABLE
        assert "slave" in (refused.remark or "")

        # The name server routes list the master (id 0) and the slave (id 1).
        ns = await open_conn(cluster.namesrv_ports[0])
        try:
            route = await call(ns, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": TOPIC})
            assert route.code == ResponseCode.SUCCESS
            addrs = TopicRouteData.decode(route.body).broker_datas[0].broker_addrs
            assert addrs == {0: master.addr, 1: slave.addr}
        finally:
            ns.close()
        slave_info = await runtime_info(slave.port)
        assert slave_info["brokerRole"] == "SLAVE" and slave_info["haConnected"] == "true"

        # Operators see the slave and its lag: mqadmin, runtime info, the exporter's gauge.
        listed = await mqadmin("clusterList", "-n", cluster.namesrv_addr)
        assert listed.code == 0, listed.err
        header, *rows = listed.lines
        assert header.split()[-1] == "#Behind"
        assert sorted((row.split()[2], row.split()[-1]) for row in rows) == [("0", "-"), ("1", "0")]
        status = await mqadmin("brokerStatus", "-n", cluster.namesrv_addr, "-b", master.addr)
        assert "haConnectionCount" in status.out and "lagBytes=0" in status.out
        metrics = await scrape(metrics_port)
        assert re.search(r'rocketmq_broker_commitlog_diff\{[^}]*brokerIP="127.0.0.1:\d+"[^}]*\} 0', metrics)
    finally:
        conn.close()
        slave_conn.close()


async def test_a_sync_master_answers_no_send_before_its_slave_acknowledges_the_end(cluster: Cluster) -> None:
    """Here for the bugs of a SYNC_MASTER answering once the slave holds the message's start
    (which it does the moment the previous message is acknowledged), or not waiting at all.
    The replication link is held still after catch-up, so no acknowledgement can come: a send
    must stay unanswered however long the test looks, then be answered SEND_OK once the link
    moves and the slave's acknowledged offset has reached the message's end."""
    with held_port_pair() as port:
        master = await cluster.start_broker(
            "broker-a", listenPort=port, brokerRole="SYNC_MASTER", slaveTimeout=20_000
        )
    proxy = FaultProxy("127.0.0.1", master.port + 1)
    await proxy.start()
    await start_slave(cluster, haMasterAddress=proxy.addr)
    await wait_until(lambda: has_slaves(master.port), 30)
    conn = await open_conn(master.port)
    try:
        assert (await send(conn, TOPIC, b"caught up")).code == ResponseCode.SUCCESS
        before = int((await runtime_info(master.port))["commitLogMaxOffset"])
        ack = re.search(r"ackOffset=(\d+)", (await runtime_info(master.port))["haSlave0"])
        assert ack is not None and int(ack.group(1)) == before  # the slave holds everything so far
        proxy.freeze()
        waiting = asyncio.ensure_future(send(conn, TOPIC, b"held"))
        # Stored on the master at once; unanswered while nothing can reach the slave.
        await wait_until(lambda: _max_offset_above(master.port, before), 10)
        await asyncio.sleep(1.0)
        assert not waiting.done(), waiting.result()
        proxy.thaw()
        response = await waiting
        assert response.code == ResponseCode.SUCCESS, response
        end = int((await runtime_info(master.port))["commitLogMaxOffset"])
        ack = re.search(r"ackOffset=(\d+)", (await runtime_info(master.port))["haSlave0"])
        assert ack is not None and int(ack.group(1)) >= end > before
    finally:
        conn.close()
        await proxy.close()


async def _max_offset_above(port: int, offset: int) -> bool:
    return int((await runtime_info(port))["commitLogMaxOffset"]) > offset


async def test_a_stalled_slave_times_sends_out_without_blocking_others(cluster: Cluster) -> None:
    # The slave reaches the master's HA port through a proxy the test can freeze.
    with held_port_pair() as port:
        master = await cluster.start_broker(
            "broker-a", listenPort=port, brokerRole="SYNC_MASTER", slaveTimeout=1500
        )
    proxy = FaultProxy("127.0.0.1", master.port + 1)
    await proxy.start()
    await start_slave(cluster, haMasterAddress=proxy.addr)
    await wait_until(lambda: has_slaves(master.port), 30)
    conn = await open_conn(master.port)
    other = await open_conn(master.port)
    try:
        assert (await send(conn, TOPIC, b"replicated")).code == ResponseCode.SUCCESS
        proxy.freeze()
        started = time.monotonic()
        waiting = asyncio.ensure_future(send(conn, TOPIC, b"stalled"))
        # Meanwhile another connection is answered at once.
        quick = await call(other, RequestCode.GET_MAX_OFFSET, {"topic": TOPIC, "queueId": 0})
        assert quick.code == ResponseCode.SUCCESS and not waiting.done()
        response = await waiting
        assert response.code == ResponseCode.FLUSH_SLAVE_TIMEOUT
        assert time.monotonic() - started >= 1.4
        # Stored on the master all the same (RocketMQ's SendResult still carries the ids).
        assert response.ext_fields["msgId"]

        # No slave at all: SLAVE_NOT_AVAILABLE without waiting.
        await cluster.kill_broker("broker-a-slave")
        proxy.thaw()
        proxy.cut()
        await wait_until(lambda: has_slaves(master.port, 0), 20)
        started = time.monotonic()
        response = await send(conn, TOPIC, b"alone")
        assert response.code == ResponseCode.SLAVE_NOT_AVAILABLE
        assert time.monotonic() - started < 1.0
    finally:
        conn.close()
        other.close()
        await proxy.close()


async def test_a_cut_link_resumes_at_the_slaves_offset(cluster: Cluster) -> None:
    with held_port_pair() as port:
        master = await cluster.start_broker("broker-a", listenPort=port, brokerRole="ASYNC_MASTER")
    proxy = FaultProxy("127.0.0.1", master.port + 1)
    await proxy.start()
    slave = await start_slave(cluster, haMasterAddress=proxy.addr)
    await wait_until(lambda: has_slaves(master.port), 30)
    conn = await open_conn(master.port)
    try:
        for i in range(300):
            assert (await send(conn, TOPIC, f"c{i}".encode() * 40, queue_id=i % 4)).code == 0
            if i % 60 == 59:
                proxy.cut()  # mid-stream: frames in flight are lost with the connection

        async def caught_up() -> bool:
            m, s = await runtime_info(master.port), await runtime_info(slave.port)
            return m["commitLogMaxOffset"] == s["commitLogMaxOffset"] and m["commitLogDiff"] == "0"

        await wait_until(caught_up, 30)
        info = await runtime_info(slave.port)
        assert int(info["haConnects"]) >= 2 and info["haDivergedRefusals"] == "0"
        slave_conn = await open_conn(slave.port)
        try:

            async def slave_serves_all() -> bool:
                got = [m.body for q in range(4) for m in await pull_all(slave_conn, TOPIC, q)]
                return sorted(got) == sorted(f"c{i}".encode() * 40 for i in range(300))

            await wait_until(slave_serves_all, 20)
        finally:
            slave_conn.close()
    finally:
        conn.close()
        await proxy.close()


async def test_a_slave_ahead_of_its_master_is_refused_and_reported(cluster: Cluster) -> None:
    # A store that once belonged to another master, with more log than this master has.
    with held_port_pair() as port:
        other = await cluster.start_broker("broker-x", listenPort=port)
    conn = await open_conn(other.port)
    try:
        for _ in range(20):
            assert (await send(conn, TOPIC, b"elsewhere" * 50)).code == 0
    finally:
        conn.close()
    await cluster.stop_broker("broker-x")
    with held_port_pair() as port:
        master = await cluster.start_broker("broker-a", listenPort=port, brokerRole="ASYNC_MASTER")
    conn = await open_conn(master.port)
    try:
        assert (await send(conn, TOPIC, b"here")).code == 0
    finally:
        conn.close()
    with held_port_pair() as port:
        await cluster.start_broker(
            "broker-x",
            listenPort=port,
            brokerName="broker-a",
            brokerId=1,
            brokerRole="SLAVE",
            haMasterAddress=f"127.0.0.1:{master.port + 1}",
        )

    async def refused() -> bool:
        return int((await runtime_info(master.port)).get("haSlavesRefused", "0")) >= 1

    await wait_until(refused, 20)
    log = cluster.brokers["broker-a"].process
    assert log is not None
    await log.wait_for_line("its log has diverged from the master's", 5)
    ahead = int((await runtime_info(cluster.brokers["broker-x"].port))["commitLogMaxOffset"])
    assert ahead > int((await runtime_info(master.port))["commitLogMaxOffset"])
