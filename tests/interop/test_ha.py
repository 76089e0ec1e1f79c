"""Replication across implementations, with Apache RocketMQ's own broker (the harness's): our
SYNC_MASTER feeds an Apache slave, and an Apache SYNC_MASTER feeds our slave. Each side's
SUCCESS means the other side's slave acknowledged the bytes; the slave then holds the master's
commit log byte for byte and serves its messages."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from aiorocketmq.protocol.codes import RequestCode, ResponseCode
from aiorocketmq.protocol.transport import Connection, connect
from tests.broker.ha.support import held_port_pair, runtime_info
from tests.broker.requests import call, pull_all, send
from tests.cluster import Cluster
from tests.interop.harness import ApacheBroker, ApacheNamesrv, Toolchain, body, run_program, sha256
from tests.support import wait_until

TOPIC = "HaInterop"
COUNT = 30


async def open_conn(addr: str) -> Connection:
    host, port = addr.split(":")
    return await connect(host, int(port), timeout=10.0)


async def commit_log_end(addr: str) -> int:
    return int((await runtime_info(int(addr.split(":")[1])))["commitLogMaxOffset"])


async def wait_for_runtime_info(apache: ApacheBroker) -> None:
    """Apache's broker fails GET_BROKER_RUNTIME_INFO (SYSTEM_ERROR, a NoSuchElementException
    from an empty LinkedList) until its store statistics have taken their first sample, about
    a second after it starts; a fast machine asks sooner than that."""

    async def answers() -> bool:
        conn = await open_conn(apache.addr)
        try:
            response = await call(conn, RequestCode.GET_BROKER_RUNTIME_INFO, timeout=3.0)
            return response.code == ResponseCode.SUCCESS
        finally:
            conn.close()

    await wait_until(answers, 30)


async def send_all(master: str) -> list[str]:
    conn = await open_conn(master)
    try:
        bodies = []
        for i in range(COUNT):
            body = f"ha-interop {i} " + "x" * (i * 37 % 500)
            response = await send(conn, TOPIC, body.encode(), queue_id=i % 4)
            # SYNC_MASTER: SUCCESS only once the other implementation's slave acked it.
            assert response.code == ResponseCode.SUCCESS, response
            bodies.append(body)
        return bodies
    finally:
        conn.close()


async def slave_serves(slave: str, bodies: list[str]) -> None:
    conn = await open_conn(slave)
    try:

        async def all_there() -> bool:
            got: list[str] = []
            for q in range(4):
                got += [m.body.decode() for m in await pull_all(conn, TOPIC, q)]
            return sorted(got) == sorted(bodies)

        await wait_until(all_there, 60)
        raw = await call(conn, RequestCode.GET_MAX_OFFSET, {"topic": TOPIC, "queueId": 1})
        assert int(raw.ext_fields["offset"]) == COUNT // 4 + (1 if COUNT % 4 > 1 else 0)
    finally:
        conn.close()


@pytest.mark.timeout(600)
async def test_our_master_feeds_an_apache_slave(java_toolchain: Toolchain, tmp_path: Path) -> None:
    ours = Cluster(tmp_path / "ours")
    slave: ApacheBroker | None = None
    try:
        await ours.start_namesrv()
        with held_port_pair() as port:
            master = await ours.start_broker("broker-a", listenPort=port, brokerRole="SYNC_MASTER")
        slave = ApacheBroker(
            java_toolchain,
            tmp_path / "apache-slave",
            ours.namesrv_addr,
            name="broker-a",
            overrides={"brokerId": 1, "brokerRole": "SLAVE"},
        )
        await asyncio.to_thread(slave.start)
        await wait_for_runtime_info(slave)

        async def apache_slave_connected() -> bool:
            # Connected and reported its offset (Apache's slave first reports after
            # haSendHeartbeatInterval; a SYNC_MASTER send before that times out, as on Apache).
            link = (await runtime_info(master.port)).get("haSlave0", "")
            return "ackOffset=" in link and "ackOffset=-1" not in link

        await wait_until(apache_slave_connected, 60)
        bodies = await send_all(master.addr)
        assert await commit_log_end(slave.addr) == await commit_log_end(master.addr)
        # Apache's slave copied our topic config (GET_ALL_TOPIC_CONFIG) and serves the messages.
        await slave_serves(slave.addr, bodies)
    finally:
        if slave is not None:
            await asyncio.to_thread(slave.stop)
        await ours.stop()


@pytest.mark.timeout(600)
async def test_an_apache_master_feeds_our_slave(java_toolchain: Toolchain, tmp_path: Path) -> None:
    namesrv = ApacheNamesrv(java_toolchain, tmp_path / "apache-namesrv")
    master: ApacheBroker | None = None
    ours = Cluster(tmp_path / "ours")
    try:
        await asyncio.to_thread(namesrv.start)
        master = ApacheBroker(
            java_toolchain,
            tmp_path / "apache-master",
            namesrv.addr,
            name="broker-j",
            overrides={"brokerRole": "SYNC_MASTER"},
        )
        await asyncio.to_thread(master.start)
        await wait_for_runtime_info(master)
        ours.namesrv_ports.append(namesrv.port)
        with held_port_pair() as port:
            slave = await ours.start_broker(
                "broker-j", listenPort=port, brokerId=1, brokerRole="SLAVE", namesrvAddr=namesrv.addr
            )

        async def our_slave_connected() -> bool:
            return (await runtime_info(slave.port)).get("haConnected") == "true"

        await wait_until(our_slave_connected, 60)
        bodies = await send_all(master.addr)
        assert await commit_log_end(slave.addr) == await commit_log_end(master.addr)
        # Our slave copied Apache's topic config and serves the messages.
        await slave_serves(slave.addr, bodies)
    finally:
        await ours.stop()
        if master is not None:
            await asyncio.to_thread(master.stop)
        await asyncio.to_thread(namesrv.stop)


@pytest.mark.timeout(600)
async def test_the_java_consumer_reads_from_our_slave_while_the_master_is_down(
    java_toolchain: Toolchain, tmp_path: Path
) -> None:
    ours = Cluster(tmp_path / "ours")
    prefix = f"JHA{os.getpid()}"
    topic = f"{prefix}_fromslave"
    try:
        await ours.start_namesrv()
        with held_port_pair() as port:
            master = await ours.start_broker("broker-a", listenPort=port, brokerRole="SYNC_MASTER")
        with held_port_pair() as port:
            slave = await ours.start_broker(
                "broker-a-slave", listenPort=port, brokerName="broker-a", brokerId=1, brokerRole="SLAVE"
            )

        async def connected() -> bool:
            return (await runtime_info(master.port)).get("haConnectionCount") == "1"

        await wait_until(connected, 60)
        conn = await open_conn(master.addr)
        try:
            for i in range(16):
                sent = await send(conn, topic, body("fromslave", i, 100), queue_id=i % 4)
                assert sent.code == ResponseCode.SUCCESS, sent
        finally:
            conn.close()

        async def slave_serves() -> bool:
            slave_conn = await open_conn(slave.addr)
            try:
                return len(await pull_all(slave_conn, topic, 0)) == 4
            finally:
                slave_conn.close()

        await wait_until(slave_serves, 30)
        await ours.kill_broker("broker-a")
        home = tmp_path / "java"
        command = java_toolchain.java_command(
            "interop.Scenarios",
            [f"namesrv={ours.namesrv_addr}", f"prefix={prefix}", "scenarios=fromslave", "timeout=60"],
            {
                "user.home": str(home),
                "rocketmq.client.logRoot": str(home / "logs"),
                "rocketmq.client.localOffsetStoreDir": str(home / "offsets"),
            },
        )
        run = await asyncio.to_thread(run_program, command, cwd=home, timeout=300, mkdir=True)
        assert run.ended("fromslave")["ok"], run.describe()
        got = {record["bodySha"] for record in run.of("fromslave", "recv")}
        assert got == {sha256(body("fromslave", i, 100)) for i in range(16)}
    finally:
        await ours.stop()
