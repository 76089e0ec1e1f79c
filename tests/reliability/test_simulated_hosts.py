"""Simulated hosts (tests/hosts.py): the harness's own behaviour, then a 4.x SYNC_MASTER/SLAVE
pair on three hosts, cut apart, healed and its master host killed.

The pair's client is our SDK in the test process (the network's ``local`` host): a producer
and a pull of the slave, reaching the hosts over the harness's link from the root namespace.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from pathlib import Path

import pytest

from aiorocketmq import Admin, Message, Producer, PullClient
from aiorocketmq.client.types import SendStatus
from aiorocketmq.protocol.body import KVTable
from aiorocketmq.protocol.codes import RequestCode, ResponseCode
from aiorocketmq.protocol.transport import connect
from tests.broker.requests import call, pull_queues
from tests.hosts import Host, HostsUnavailable, Network, _command
from tests.support import wait_until

PORT = 7000


def pid_max() -> int:
    return int(Path("/proc/sys/kernel/pid_max").read_text())


def alive(pid: int) -> bool:
    return Path(f"/proc/{pid}").exists()


async def reach(src: Host, dst: Host) -> bool:
    return await src.reaches(dst.address, PORT, timeout=0.5)


async def test_hosts_reach_each_other_and_faults_cut_exactly_what_they_say(tmp_path: Path) -> None:
    async with Network(tmp_path) as net:
        a, b, c = [await net.host(name) for name in ("a", "b", "c")]
        local = net.local
        assert len({a.address, b.address, c.address, local.address}) == 4
        for host in (a, b, c):
            await host.listen(PORT)
        pairs = [(x, y) for x in (a, b, c, local) for y in (a, b, c) if x is not y]
        assert all(await asyncio.gather(*(reach(x, y) for x, y in pairs)))

        await a.cut(b)
        assert not await reach(a, b) and not await reach(b, a)
        # Only that pair: c and the test process still reach both, and both reach c.
        assert await reach(c, a) and await reach(c, b) and await reach(a, c) and await reach(b, c)
        assert await reach(local, a) and await reach(local, b)
        await b.heal(a)  # from either side
        assert await reach(a, b) and await reach(b, a)

        await local.cut(c)  # the test process cut from c only
        assert not await reach(local, c) and await reach(local, a) and await reach(a, c)
        await local.heal(c)
        assert await reach(local, c)

        await a.isolate()
        assert not any(await asyncio.gather(reach(a, b), reach(b, a), reach(c, a), reach(local, a)))
        assert await reach(b, c)
        await a.reconnect()
        assert await reach(b, a) and await reach(a, c)

        pids = await b.pids()
        assert pids  # the listener
        assert await b.kill() >= 1
        assert await b.pids() == []
        assert not await reach(a, b)  # the host is up, nothing listens
        assert await reach(a, c)

        names = await _command("ip", "netns", "list")
        assert net.switch in names and f"{net.run}-a" in names
        run = net.run
        survivors = [pid for host in (a, c) for pid in await host.pids()]
        assert survivors

    names = await _command("ip", "netns", "list")
    links = [link["ifname"] for link in json.loads(await _command("ip", "-j", "link", "show"))]
    assert run not in names and run not in links, (names, links)
    for pid in survivors:
        assert not alive(pid), f"process {pid} outlived its network"


async def test_cleanup_runs_when_the_test_fails(tmp_path: Path) -> None:
    run = ""
    try:
        async with Network(tmp_path) as net:
            run = net.run
            await (await net.host("a")).listen(PORT)
            raise KeyError("the test failed")
    except KeyError:
        pass
    assert run and run not in await _command("ip", "netns", "list")


async def test_a_dead_runs_leftovers_are_removed_and_a_missing_tool_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A run whose process is gone (no pid is above pid_max) left a namespace and a root link.
    dead = f"rmqh{pid_max() + 1}x0"
    await _command("ip", "netns", "add", f"{dead}-a")
    await _command("ip", "link", "add", dead, "type", "veth", "peer", "name", f"{dead}p")
    async with Network(tmp_path):
        assert f"{dead}-a" not in await _command("ip", "netns", "list")
        assert dead not in await _command("ip", "link", "show")

    monkeypatch.setenv("PATH", str(tmp_path))  # neither `ip` nor `nft` on it
    with pytest.raises(HostsUnavailable, match=r"simulated hosts need .*`ip`.*`nft`"):
        async with Network(tmp_path):
            pass


# -- a 4.x SYNC_MASTER and its SLAVE on hosts of their own ----------------------------------------

TOPIC = "OnHosts"
QUEUES = 4
#: Short HA timings, so that each phase ends within seconds: a SYNC_MASTER waits ``slaveTimeout``
#: for its slave, and drops a slave it heard nothing from for ``haHousekeepingInterval`` (the
#: slave reports every ``haSendHeartbeatInterval``; Apache's defaults are 3 s, 20 s and 5 s).
SLAVE_TIMEOUT = 1.0
HOUSEKEEPING = 4.0
HA_TIMINGS = {
    "slaveTimeout": int(SLAVE_TIMEOUT * 1000),
    "haHousekeepingInterval": int(HOUSEKEEPING * 1000),
    "haSendHeartbeatInterval": 1000,
}
#: Scheduling slack on 2 shared cores for every bound below.
SLACK = 1.5


async def runtime_info(host: Host) -> dict[str, str]:
    conn = await connect(host.address, 10911, timeout=3.0)
    try:
        response = await call(conn, RequestCode.GET_BROKER_RUNTIME_INFO, timeout=3.0)
        assert response.code == ResponseCode.SUCCESS, response
        return dict(KVTable.decode(response.body).table)
    finally:
        conn.close()


async def commit_log_end(host: Host) -> int:
    return int((await runtime_info(host))["commitLogMaxOffset"])


async def slaves_connected(master: Host) -> int:
    return int((await runtime_info(master)).get("haConnectionCount", "0"))


async def caught_up(master: Host, slave: Host) -> bool:
    return await slaves_connected(master) == 1 and await commit_log_end(slave) == await commit_log_end(master)


async def test_a_sync_pair_on_hosts_cut_healed_and_its_master_host_killed(tmp_path: Path) -> None:
    started = time.monotonic()
    async with Network(tmp_path) as net:
        n, m, s = [await net.host(name) for name in ("namesrv", "master", "slave")]
        await n.namesrv()
        namesrv = n.addr(9876)
        await m.broker("broker-a", namesrv, brokerRole="SYNC_MASTER", **HA_TIMINGS)
        # The slave learns its master's HA address from its registration's answer.
        await s.broker("broker-a", namesrv, brokerId=1, brokerRole="SLAVE", **HA_TIMINGS)
        await wait_until(lambda: caught_up(m, s), 20)
        async with Admin(namesrv) as admin:
            await admin.create_topic(TOPIC, QUEUES)
        statuses: Counter[str] = Counter()
        acked: list[str] = []
        stored_unacked: list[str] = []
        async with Producer("HostsProducer", namesrv=namesrv, send_timeout=10.0) as producer:

            async def send(body: str) -> tuple[SendStatus, float]:
                began = time.monotonic()
                result = await producer.send(Message(TOPIC, body.encode()))
                statuses[result.status.name] += 1
                (acked if result.status is SendStatus.SEND_OK else stored_unacked).append(body)
                return result.status, time.monotonic() - began

            # Connected: every send is acknowledged, and what is acknowledged is on the slave.
            for i in range(20):
                status, _ = await send(f"connected-{i}")
                assert status is SendStatus.SEND_OK
                assert await commit_log_end(s) >= await commit_log_end(m)

            # Cut apart: the master waits slaveTimeout for its slave (FLUSH_SLAVE_TIMEOUT) until
            # it has heard nothing from it for haHousekeepingInterval, then drops it and answers
            # SLAVE_NOT_AVAILABLE at once. Nothing is acknowledged meanwhile.
            await m.cut(s)
            cut_at = time.monotonic()
            during: list[tuple[SendStatus, float, float]] = []
            while sum(status is SendStatus.SLAVE_NOT_AVAILABLE for status, _, _ in during) < 5:
                assert time.monotonic() - cut_at < HOUSEKEEPING + 10, during
                status, took = await send(f"cut-{len(during)}")
                during.append((status, took, time.monotonic() - cut_at))
            codes = [status for status, _, _ in during]
            assert SendStatus.SEND_OK not in codes, during
            assert codes[0] is SendStatus.FLUSH_SLAVE_TIMEOUT, during
            first_unavailable = codes.index(SendStatus.SLAVE_NOT_AVAILABLE)
            assert set(codes[:first_unavailable]) == {SendStatus.FLUSH_SLAVE_TIMEOUT}, during
            assert set(codes[first_unavailable:]) == {SendStatus.SLAVE_NOT_AVAILABLE}, during
            unavailable_after = during[first_unavailable][2]
            assert unavailable_after < HOUSEKEEPING + SLAVE_TIMEOUT + SLACK, during
            waits = [took for status, took, _ in during if status is SendStatus.FLUSH_SLAVE_TIMEOUT]
            assert all(SLAVE_TIMEOUT - 0.05 < took < SLAVE_TIMEOUT + SLACK for took in waits), waits
            quick = [took for status, took, _ in during if status is SendStatus.SLAVE_NOT_AVAILABLE]
            assert max(quick) < 0.5, quick

            # Healed: the slave reconnects, copies what the master stored meanwhile, and sends
            # are acknowledged again.
            await m.heal(s)
            healed_at = time.monotonic()
            await wait_until(lambda: caught_up(m, s), 20)
            catch_up = time.monotonic() - healed_at
            for i in range(20):
                status, _ = await send(f"healed-{i}")
                assert status is SendStatus.SEND_OK

        # The master's machine dies: the slave still serves every acknowledged message.
        killed = await m.kill()
        assert killed >= 1 and await m.pids() == []
        conn = await connect(s.address, 10911, timeout=3.0)
        try:
            held = Counter(msg.body.decode() for msg in await pull_queues(conn, TOPIC, QUEUES))
        finally:
            conn.close()
        # And so does it to our SDK's pulls (to the end of each queue: a max offset query goes
        # to the master only, as Java's MQAdminImpl.maxOffset does).
        async with PullClient("HostsReader", namesrv) as reader:
            read: Counter[str] = Counter()
            for queue in await reader.queues(TOPIC):
                async for msg in reader.read(queue, 0, 1 << 62):
                    read[msg.body.decode()] += 1
        assert read == held
        lost = [body for body in acked if body not in held]
        duplicates = sum(n - 1 for n in held.values())
        print(
            f"statuses {dict(statuses)}; cut: {len(waits)} FLUSH_SLAVE_TIMEOUT in "
            f"{min(waits):.2f}-{max(waits):.2f}s each, SLAVE_NOT_AVAILABLE from {unavailable_after:.2f}s "
            f"after the cut, answered in <= {max(quick) * 1000:.0f} ms; caught up {catch_up:.2f}s after "
            f"heal; after kill of the master host: {len(acked)} acknowledged, {len(lost)} lost, "
            f"{duplicates} duplicates, {sum(body in held for body in stored_unacked)}/{len(stored_unacked)} "
            f"unacknowledged on the slave; {time.monotonic() - started:.1f}s"
        )
        assert not lost, lost
        assert duplicates == 0
        assert len(acked) == 40
