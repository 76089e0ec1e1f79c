"""Controller-mode failover on Apache RocketMQ 5.3.3 alone: the reference figures.

Apache's controller embedded in its name server on one simulated host (tests/hosts.py), three
Apache brokers of one group in controller mode (``allAckInSyncStateSet=true``), each on a host of
its own, and the clients (our SDK) in the test process. Under a SYNC load the master's host is
killed (kill -9 of every process on it): a new master must be elected within 10 s, writes must
resume, and no acknowledged message may be missing from the new master. The figures are printed
(``pytest -s``) as the reference our controller and brokers are compared with; the scenario is
tests/controller/failover.py's, which runs on any controller and brokers.

Then the old master's host comes back with its store: its broker must rejoin the group as a
slave, catch up (back in the SyncStateSet) and hold every acknowledged message.

Last, Apache's standalone controller (ControllerStartup) in three replicas on three hosts: when
the leader's host dies, another replica leads.

Without network namespaces (not root, no ``ip``/``nft``) these tests fail saying so; they never
skip.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from aiorocketmq.client import Admin, MQError
from tests.controller.failover import ControllerClient, FailoverScenario
from tests.hosts import Network
from tests.interop.harness import ApacheController, ApacheHostedGroup, build_java53_only, start_apache_group

pytestmark = pytest.mark.timeout(240)

BROKER_NAME = "broker-a"
REPLICAS = 3


@contextlib.asynccontextmanager
async def apache_group(root: Path) -> AsyncIterator[ApacheHostedGroup]:
    """The controller (in a name server) and REPLICAS brokers, each on a host of its own."""
    toolchain = await asyncio.to_thread(build_java53_only)
    group: ApacheHostedGroup | None = None
    try:
        async with Network(root) as net:
            group = await start_apache_group(toolchain, net, replicas=REPLICAS, broker_name=BROKER_NAME)
            yield group
    finally:
        if group is not None:
            group.stop()


async def test_apache_failover_kill_master_host_loses_no_acknowledged_message(tmp_path: Path) -> None:
    async with (
        apache_group(tmp_path) as group,
        FailoverScenario(
            namesrv=group.namesrv_addr,
            controllers=group.controller_addrs,
            broker_name=BROKER_NAME,
        ) as scenario,
    ):
        ready = await scenario.wait_group(REPLICAS, timeout=60)
        print(f"\n[apache 5.3.3] group ready: {ready.describe()}")
        figures, tally = await scenario.run(group.kill, replicas=REPLICAS, before=100, after=100)
        print(f"[apache 5.3.3] {figures.describe()}")
        print(f"[apache 5.3.3] {tally.describe()}")

        assert figures.time_to_master < 10.0, figures.describe()
        assert figures.new_master != figures.old_master
        assert figures.new_epoch > figures.old_epoch
        assert tally.acked >= 200
        assert not tally.lost, f"acknowledged but lost: {tally.lost[:20]}"
        assert not tally.moved, f"acknowledged at another position: {tally.moved[:20]}"
        assert not tally.foreign

        # The old master's host back, same store: a slave that catches up.
        old = figures.old_master
        old_id = ready.id_of(old)
        assert old_id is not None, ready.describe()
        await group.restart(old)
        rejoined = await scenario.wait_in_sync(old_id, timeout=60)
        print(f"[apache 5.3.3] old master rejoined: {rejoined.describe()}")
        assert rejoined.master_addr == figures.new_master
        on_old = await scenario.audit(old)
        print(f"[apache 5.3.3] read from the rejoined replica: {on_old.describe()}")
        assert not on_old.lost, f"acknowledged but not on the rejoined replica: {on_old.lost[:20]}"


async def test_apache_standalone_controllers_elect_a_new_leader_when_the_leaders_host_dies(
    tmp_path: Path,
) -> None:
    """Three standalone controllers (ControllerStartup), each on a host of its own: one leads;
    kill -9 of its host and another one leads (DLedger's election)."""
    toolchain = await asyncio.to_thread(build_java53_only)
    controllers: list[ApacheController] = []
    try:
        async with Network(tmp_path) as net:
            hosts = [await net.host(f"c{i}") for i in range(3)]
            peers = [host.address for host in hosts]
            controllers = [
                ApacheController(
                    toolchain, host.dir / "apache", peers, index=i, embedded=False, prefix=host.prefix
                )
                for i, host in enumerate(hosts)
            ]
            for controller in controllers:
                controller.launch()
            await asyncio.gather(*(asyncio.to_thread(c.wait_ready) for c in controllers))
            async with Admin(net.local.addr(9876)) as admin:  # no name server: controller requests only
                client = ControllerClient(admin, [c.addr for c in controllers])
                leader = await until_leader(client, timeout=60)
                by_addr = {c.addr: host for c, host in zip(controllers, hosts, strict=True)}
                killed = time.monotonic()
                await by_addr[leader].kill()
                client.addrs.remove(leader)
                new_leader = await until_leader(client, timeout=30)
                took = time.monotonic() - killed
                print(
                    f"\n[apache 5.3.3] controller leader {leader} killed; {new_leader} leads after {took:.3f}s"
                )
                assert new_leader != leader
    finally:
        for controller in controllers:
            controller.stop()


async def until_leader(client: ControllerClient, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while True:
        try:
            return await client.leader()
        except MQError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)
