"""Apache RocketMQ 5.3.3's broker in controller mode (``brokerId=-1``, ``brokerRole=SLAVE``,
``enableControllerMode=true``, as Apache's quick-start broker-n0.conf) against three of our
``mqcontroller`` processes: it finds the leader, gets broker id 1, registers, is elected
master, and our name server routes it as the group's master."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from aiorocketmq.protocol.codes import ResponseCode
from aiorocketmq.protocol.controller import ControllerRequestCode as Req
from aiorocketmq.protocol.controller import SyncStateSet
from tests.cluster import Cluster
from tests.controller.test_controller_cluster import Controllers, controllers  # noqa: F401 - fixture
from tests.interop.harness import (
    APACHE_CONTROLLER_BROKER,
    ApacheBroker,
    Toolchain,
    _remoting_call,
    build_java53_only,
)
from tests.support import wait_until

pytestmark = pytest.mark.timeout(300)


def _kill(broker: ApacheBroker) -> None:
    """kill -9 of the broker's JVM at the end of a test: nothing reads its store afterwards, and
    Apache's graceful shutdown takes seconds."""
    if broker.process is not None and broker.process.proc.poll() is None:
        broker.process.proc.kill()
    broker.stop()  # reaps it


@pytest.fixture(scope="module")
def java53() -> Toolchain:
    # A missing JDK or Maven fails the test with the install hint (never a skip).
    return build_java53_only()


async def test_apache_broker_becomes_master_through_our_controllers(
    controllers: Controllers,  # noqa: F811 - the fixture imported above
    java53: Toolchain,
    tmp_path: Path,
) -> None:
    namesrv = Cluster(tmp_path / "ours")
    await namesrv.start_namesrv()
    broker = ApacheBroker(
        java53,
        tmp_path / "apache",
        namesrv.namesrv_addr,
        name="broker-a",
        overrides={
            **APACHE_CONTROLLER_BROKER,
            "controllerAddr": ";".join(r.address for r in controllers.replicas),
        },
    )
    try:
        await asyncio.to_thread(broker.start)
        leader = await controllers.leader()

        async def is_master() -> bool:
            info = await controllers.request(
                leader, Req.CONTROLLER_GET_REPLICA_INFO, {"brokerName": "broker-a"}
            )
            return info.code == ResponseCode.SUCCESS and info.ext_fields.get("masterAddress") == broker.addr

        await wait_until(is_master, timeout=60)
        info = await controllers.request(leader, Req.CONTROLLER_GET_REPLICA_INFO, {"brokerName": "broker-a"})
        assert (info.ext_fields["masterBrokerId"], info.ext_fields["masterEpoch"]) == ("1", "1")
        assert SyncStateSet.decode(info.body).sync_state_set == {1}
        # Routed by the name server as the master (brokerId 0).
        await wait_until(
            lambda: (
                f'0:"{broker.addr}"'.encode() in _remoting_call(namesrv.namesrv_addr, 106)
                or f'"0":"{broker.addr}"'.encode() in _remoting_call(namesrv.namesrv_addr, 106)
            ),
            timeout=30,
        )
    finally:
        await asyncio.to_thread(_kill, broker)
        await namesrv.stop()


async def test_apache_slave_takes_over_when_the_master_is_killed(
    controllers: Controllers,  # noqa: F811 - the fixture imported above
    java53: Toolchain,
    tmp_path: Path,
) -> None:
    """Two Apache brokers in one group: the second follows the first and joins its
    SyncStateSet; kill -9 of the master makes our controllers elect the second and tell it."""
    namesrv = Cluster(tmp_path / "ours")
    await namesrv.start_namesrv()
    settings = {
        **APACHE_CONTROLLER_BROKER,
        "controllerAddr": ";".join(r.address for r in controllers.replicas),
    }
    first = ApacheBroker(java53, tmp_path / "a1", namesrv.namesrv_addr, name="broker-a", overrides=settings)
    second = ApacheBroker(java53, tmp_path / "a2", namesrv.namesrv_addr, name="broker-a", overrides=settings)
    try:
        await asyncio.to_thread(first.start)
        leader = await controllers.leader()

        async def replica_info() -> tuple[str | None, str | None, set[int]]:
            info = await controllers.request(
                leader, Req.CONTROLLER_GET_REPLICA_INFO, {"brokerName": "broker-a"}
            )
            if info.code != ResponseCode.SUCCESS:
                return None, None, set()
            members = SyncStateSet.decode(info.body).sync_state_set
            return info.ext_fields.get("masterBrokerId"), info.ext_fields.get("masterEpoch"), members

        async def first_is_master() -> bool:
            return (await replica_info())[0] == "1"

        await wait_until(first_is_master, timeout=60)
        await asyncio.to_thread(second.start)

        async def both_in_sync() -> bool:
            return (await replica_info())[2] == {1, 2}

        await wait_until(both_in_sync, timeout=60)
        assert first.process is not None
        first.process.proc.kill()

        async def second_is_master() -> bool:
            return (await replica_info())[:2] == ("2", "2")

        await wait_until(second_is_master, timeout=60)
        # Told by the controller, the second broker is master and registers as such.
        await wait_until(
            lambda: (
                f'0:"{second.addr}"'.encode() in _remoting_call(namesrv.namesrv_addr, 106)
                or f'"0":"{second.addr}"'.encode() in _remoting_call(namesrv.namesrv_addr, 106)
            ),
            timeout=60,
        )
    finally:
        await asyncio.to_thread(_kill, second)
        await asyncio.to_thread(_kill, first)
        await namesrv.stop()
