"""Our broker's controller mode (broker/replicas.py) against Apache 5.3.3's controller, embedded in
Apache's name server on loopback.

First our ReplicasManager alone, in the test process, over a stand-in for the replication (the
manager's side of the protocol, independent of broker/ha/autoswitch): two members of a group get
ids 1 and 2 from the controller (kept in ``brokerIdentity``), the first is elected master, the
second follows it, the master reports the second in its SyncStateSet, and when the master stops
heartbeating the controller elects the second and tells it (NOTIFY_BROKER_ROLE_CHANGED).

Then our broker processes in controller mode: one registers, becomes master, is routed by the
name server with brokerId 0 and takes sends; a second becomes its slave; kill -9 of the master
makes the slave master, and it takes sends.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import pytest

from aiorocketmq.broker.config import BrokerConfig
from aiorocketmq.broker.handlers.admin import ControllerModeHandlers
from aiorocketmq.broker.replicas import ReplicasManager, State
from aiorocketmq.broker.store import MessageStore, StoreConfig
from aiorocketmq.protocol.body import ClusterInfo
from aiorocketmq.protocol.codes import ResponseCode
from aiorocketmq.protocol.command import RemotingCommand
from aiorocketmq.protocol.controller import (
    BrokerReplicasInfo,
    ControllerRequestCode,
    ElectMasterRequestHeader,
    EpochEntry,
    EpochEntryCache,
)
from aiorocketmq.protocol.errors import MQError
from aiorocketmq.protocol.transport import Server, connect
from tests.broker.requests import pull_queues, send
from tests.cluster import BrokerProcess, Cluster
from tests.interop.harness import (
    ApacheController,
    ApacheControllerBroker,
    Toolchain,
    _port_free,
    _remoting_call,
    free_port,
    remoting_header,
    start_loopback_controller,
)
from tests.support import wait_until

pytestmark = pytest.mark.timeout(240)


class FakeReplication:
    """The auto-switch replication's API as the manager uses it, recording each call."""

    def __init__(self, changed: asyncio.Condition) -> None:
        self.local_broker_id = -1
        self.on_sync_state_set_expand: Callable[[set[int]], None] | None = None
        self.sync_state_set: set[int] = set()
        self.epoch = 0
        self.calls: list[tuple[object, ...]] = []
        self._changed = changed
        self._notifying: set[asyncio.Task[None]] = set()

    async def start(self, host: str) -> None:
        pass

    async def stop(self) -> None:
        pass

    async def change_to_master(self, master_epoch: int) -> None:
        self.epoch = master_epoch
        self.calls.append(("master", master_epoch))

    async def change_to_slave(self, master_ha_address: str, master_epoch: int, master_broker_id: int) -> None:
        self.epoch = master_epoch
        self.calls.append(("slave", master_ha_address, master_epoch, master_broker_id))

    def set_sync_state_set(self, ids: set[int]) -> None:
        self.sync_state_set = set(ids)
        self.calls.append(("sss", frozenset(ids)))
        task = asyncio.ensure_future(self._notify())
        self._notifying.add(task)
        task.add_done_callback(self._notifying.discard)

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    def maybe_shrink_sync_state_set(self) -> set[int]:
        return set(self.sync_state_set)

    def confirm_offset(self) -> int:
        return 0

    @property
    def last_epoch(self) -> int:
        return self.epoch

    def epoch_entries(self) -> list[EpochEntry]:
        return [EpochEntry(epoch=self.epoch, start_offset=0)] if self.epoch else []

    def ha_status(self) -> dict[str, object]:
        return {}

    def runtime_info(self) -> dict[str, str]:
        return {}


class FakeBroker:
    """A RoleSwitch over FakeReplication, serving the controller's notifications on a port."""

    def __init__(self, root: Path, controller: ApacheController, group: str) -> None:
        self.root = root
        self.controller = controller
        self.group = group
        self.changed = asyncio.Condition()
        self.replication = FakeReplication(self.changed)
        self.master = False
        self.server: Server | None = None
        self.manager: ReplicasManager | None = None

    @property
    def auto(self) -> FakeReplication:
        return self.replication

    def commit_log_max_offset(self) -> int:
        return 0

    async def become_master(self, master_epoch: int) -> None:
        await self.replication.change_to_master(master_epoch)
        self.master = True

    async def become_slave(self, master_addr: str, master_epoch: int, master_broker_id: int) -> None:
        self.master = False
        await self.replication.change_to_slave(master_addr, master_epoch, master_broker_id)

    async def role_changed(self) -> None:
        async with self.changed:
            self.changed.notify_all()

    async def start(self) -> ReplicasManager:
        self.server = Server({}, name="fake broker")
        port = await self.server.listen("127.0.0.1", 0)
        config = BrokerConfig(
            brokerClusterName="DefaultCluster",
            brokerName=self.group,
            brokerId=-1,
            brokerIP1="127.0.0.1",
            listenPort=port,
            storePathRootDir=str(self.root),
            enableControllerMode=True,
            controllerAddr=self.controller.addr,
            syncBrokerMetadataPeriod=1000,
            checkSyncStateSetPeriod=1000,
            controllerHeartBeatTimeoutMills=3000,
        )
        self.manager = ReplicasManager(config, self)
        store = MessageStore(StoreConfig(storePathRootDir=str(self.root / "store")), store_host=bytes(8))
        self.server.handlers.update(
            ControllerModeHandlers(config, store=store, replicas=self.manager).handlers()
        )
        await self.manager.start()
        return self.manager

    async def wait(self, condition: Callable[[], bool], timeout: float = 30.0) -> None:
        """Until ``condition()`` holds after some role change (or already)."""
        async with asyncio.timeout(timeout), self.changed:
            await self.changed.wait_for(condition)

    async def stop(self) -> None:
        if self.manager is not None:
            await self.manager.stop()
        if self.server is not None:
            await self.server.close()


async def sync_state_data(controller_addr: str, group: str) -> BrokerReplicasInfo:
    """CONTROLLER_GET_SYNC_STATE_DATA (``mqadmin getSyncStateSet``) for the group."""
    host, port = controller_addr.rsplit(":", 1)
    conn = await connect(host, int(port))
    try:
        response = await conn.request(
            RemotingCommand.request(
                ControllerRequestCode.CONTROLLER_GET_SYNC_STATE_DATA, body=json.dumps([group]).encode()
            )
        )
    finally:
        conn.close()
    assert response.code == ResponseCode.SUCCESS, response.remark
    return BrokerReplicasInfo.decode(response.body)


@pytest.fixture(scope="module")
def controller(
    java53_toolchain: Toolchain, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ApacheController]:
    """One Apache controller (in its name server) for the module: each test has a broker group of
    its own (:func:`group`), and the controller keeps its state per group."""
    started = start_loopback_controller(java53_toolchain, tmp_path_factory.mktemp("apache-controller"))
    try:
        yield started
    finally:
        started.kill()  # nothing to keep: no need for Apache's graceful shutdown (~10 s)


_groups = itertools.count(1)


@pytest.fixture
def group() -> str:
    """The test's own broker group (brokerName), fresh to the module's controller: broker ids
    from 1, no master, no SyncStateSet, epoch 0."""
    return f"broker-r{next(_groups)}"


async def test_manager_registers_elects_and_fails_over(
    controller: ApacheController, group: str, tmp_path: Path
) -> None:
    first, second = (
        FakeBroker(tmp_path / "b1", controller, group),
        FakeBroker(tmp_path / "b2", controller, group),
    )
    try:
        m1 = await first.start()
        await first.wait(lambda: first.master)
        assert m1.broker_controller_id == 1
        assert m1.state is State.RUNNING and not m1.fenced
        assert m1.config.broker_id == 0  # registered with the name servers as the master
        assert (tmp_path / "b1" / "brokerIdentity").read_text() == f"DefaultCluster#{group}#1"
        assert not (tmp_path / "b1" / "brokerIdentity-temp").exists()
        assert first.replication.calls[0] == ("sss", frozenset({1}))
        assert ("master", m1.master_epoch) in first.replication.calls
        assert m1.sync_state_set == {1}

        m2 = await second.start()
        await second.wait(lambda: m2.master_broker_id == 1)
        assert m2.broker_controller_id == 2 and m2.config.broker_id == 2
        assert second.replication.calls[-1] == (
            "slave",
            first.manager and first.manager.broker_address,
            m1.master_epoch,
            1,
        )

        # The master's replication proposes the caught-up slave: the controller takes it.
        assert first.replication.on_sync_state_set_expand is not None
        first.replication.on_sync_state_set_expand({1, 2})
        await first.wait(lambda: m1.sync_state_set == {1, 2})
        assert first.replication.sync_state_set == {1, 2} and m1.sync_state_set_epoch >= 2
        info = await asyncio.to_thread(remoting_header, controller.addr, 1004, {"brokerName": group})
        assert info["masterBrokerId"] == "1" and info["masterAddress"] == m1.broker_address

        # Heartbeats keep both alive past controllerHeartBeatTimeoutMills (3 s), with no new
        # election: nothing to await but time passing.
        epoch = m1.master_epoch
        await asyncio.sleep(4.5)
        replicas = (await sync_state_data(controller.addr, group)).replicas_info_table[group]
        assert {(r.broker_id, r.alive) for r in replicas.in_sync_replicas} == {(1, True), (2, True)}
        assert m1.master_epoch == m2.master_epoch == epoch

        # The epoch cache over the wire (GET_BROKER_EPOCH_CACHE, mqadmin getBrokerEpoch).
        conn = await connect("127.0.0.1", int(m1.broker_address.rsplit(":", 1)[1]))
        try:
            response = await conn.request(
                RemotingCommand.request(ControllerRequestCode.GET_BROKER_EPOCH_CACHE)
            )
        finally:
            conn.close()
        cache = EpochEntryCache.decode(response.body)
        assert cache.broker_name == group and [e.epoch for e in cache.epoch_list] == [m1.master_epoch]

        # The master stops heartbeating: the controller elects the slave and tells it.
        old_epoch = m1.master_epoch
        await first.stop()
        await second.wait(lambda: second.master, timeout=60)
        assert m2.master_broker_id == 2 and m2.master_epoch > old_epoch
        assert m2.config.broker_id == 0
        assert ("master", m2.master_epoch) in second.replication.calls
    finally:
        await second.stop()
        await first.stop()


async def test_manager_keeps_its_id_across_restarts(
    controller: ApacheController, group: str, tmp_path: Path
) -> None:
    broker = FakeBroker(tmp_path / "b1", controller, group)
    try:
        manager = await broker.start()
        await broker.wait(lambda: broker.master)
        assert manager.broker_controller_id == 1
        epoch = manager.master_epoch
        await broker.stop()
        again = FakeBroker(tmp_path / "b1", controller, group)
        broker = again
        manager = await again.start()
        await again.wait(lambda: again.master, timeout=60)
        # Same id from brokerIdentity, no GET_NEXT_BROKER_ID; master again under a newer epoch
        # (or the same master, if the controller kept it through the restart).
        assert manager.broker_controller_id == 1
        assert manager.master_epoch >= epoch
    finally:
        await broker.stop()


# -- our broker processes -----------------------------------------------------------------------

#: Our brokers in controller mode, as Apache's quick-start broker-n0.conf sets Apache's (brokerId
#: -1, brokerRole SLAVE, every SyncStateSet member acking), periods shortened for the test.
CONTROLLER_BROKER: dict[str, object] = {
    "brokerId": -1,
    "brokerRole": "SLAVE",
    "enableControllerMode": "true",
    "allAckInSyncStateSet": "true",
    "syncBrokerMetadataPeriod": 1000,
    "checkSyncStateSetPeriod": 1000,
    "controllerHeartBeatTimeoutMills": 3000,
    "haMaxTimeSlaveNotCatchup": 5000,
}
TOPIC = "ControllerMode"


async def cluster_info(namesrv_addr: str) -> ClusterInfo:
    body = await asyncio.to_thread(_remoting_call, namesrv_addr, 106)  # GET_BROKER_CLUSTER_INFO
    return ClusterInfo.decode(body) if body else ClusterInfo()


async def routed_master(namesrv_addr: str, group: str) -> str | None:
    """The group's address under brokerId 0 at the name server."""
    data = (await cluster_info(namesrv_addr)).broker_addr_table.get(group)
    return data.broker_addrs.get(0) if data is not None else None


async def send_once(addr: str, body: bytes) -> RemotingCommand:
    host, port = addr.rsplit(":", 1)
    conn = await connect(host, int(port), timeout=3.0)
    try:
        return await send(conn, TOPIC, body)
    finally:
        conn.close()


async def sends_ok(addr: str) -> bool:
    try:
        return (await send_once(addr, b"probe")).code == ResponseCode.SUCCESS
    except MQError:
        return False


@pytest.fixture
async def ours(controller: ApacheController, tmp_path: Path) -> AsyncIterator[Cluster]:
    cluster = Cluster(tmp_path / "ours", cluster_name="DefaultCluster")
    cluster.namesrv_ports.append(controller.namesrv_port)
    try:
        yield cluster
    finally:
        await cluster.stop()
        for name, broker in cluster.brokers.items():  # shown when the test fails
            if broker.process is not None:
                print(f"---- our broker {name} ----\n{broker.process.output}")


async def start_replica(
    cluster: Cluster, controller: ApacheController, group: str, name: str
) -> BrokerProcess:
    return await cluster.start_broker(
        name, brokerName=group, controllerAddr=controller.addr, **CONTROLLER_BROKER
    )


async def test_one_broker_becomes_master_routed_as_id_0(
    ours: Cluster, controller: ApacheController, group: str
) -> None:
    broker = await start_replica(ours, controller, group, "r1")
    assert broker.process is not None
    await broker.process.wait_for_line(r"is now SYNC_MASTER \(brokerId 0\)")
    assert (broker.store_dir / "brokerIdentity").read_text() == f"DefaultCluster#{group}#1"
    await wait_until(lambda: _is(routed_master(controller.namesrv_addr, group), broker.addr), 15)
    response = await send_once(broker.addr, b"hello")
    assert response.code == ResponseCode.SUCCESS, response.remark
    info = await asyncio.to_thread(remoting_header, controller.addr, 1004, {"brokerName": group})
    assert info["masterBrokerId"] == "1" and info["masterAddress"] == broker.addr


async def test_slave_takes_over_when_the_master_is_killed(
    ours: Cluster, controller: ApacheController, group: str
) -> None:
    first = await start_replica(ours, controller, group, "r1")
    assert first.process is not None
    await first.process.wait_for_line(r"is now SYNC_MASTER \(brokerId 0\)")
    second = await start_replica(ours, controller, group, "r2")
    assert second.process is not None
    await second.process.wait_for_line(r"is now SLAVE \(brokerId 2\)")
    # The slave refuses writes; the master takes them once the slave is in the SyncStateSet.
    refused = await send_once(second.addr, b"to the slave")
    assert refused.code != ResponseCode.SUCCESS
    await wait_until(lambda: sends_ok(first.addr), 30)
    slaves = (await cluster_info(controller.namesrv_addr)).broker_addr_table[group].broker_addrs
    assert slaves == {0: first.addr, 2: second.addr}
    # Acknowledged with allAckInSyncStateSet: the slave holds each of these.
    acked = {f"before-{i}" for i in range(20)}
    for body in sorted(acked):
        response = await send_once(first.addr, body.encode())
        assert response.code == ResponseCode.SUCCESS, response.remark

    await ours.kill_broker("r1")
    await second.process.wait_for_line(r"is now SYNC_MASTER \(brokerId 0\)", timeout=60)
    await wait_until(lambda: sends_ok(second.addr), 30)
    await wait_until(lambda: _is(routed_master(controller.namesrv_addr, group), second.addr), 30)
    response = await send_once(second.addr, b"after")
    assert response.code == ResponseCode.SUCCESS, response.remark
    conn = await connect("127.0.0.1", second.port)
    try:
        bodies = {m.body.decode() for m in await pull_queues(conn, TOPIC, 1)}
    finally:
        conn.close()
    assert acked | {"after"} <= bodies
    info = await asyncio.to_thread(remoting_header, controller.addr, 1004, {"brokerName": group})
    assert info["masterBrokerId"] == "2" and info["masterAddress"] == second.addr

    # The old master comes back with its store and id: a slave of the new one, in sync again.
    back = await start_replica(ours, controller, group, "r1")
    assert back.process is not None
    await back.process.wait_for_line(r"is now SLAVE \(brokerId 1\)")
    await wait_until(lambda: _equals(in_sync(controller.addr, group), {1, 2}), 30)
    slaves = (await cluster_info(controller.namesrv_addr)).broker_addr_table[group].broker_addrs
    assert slaves == {0: second.addr, 1: back.addr}


async def _is(value: Awaitable[str | None], expected: str) -> bool:
    return await value == expected


async def in_sync(controller_addr: str, group: str) -> set[int]:
    replicas = (await sync_state_data(controller_addr, group)).replicas_info_table.get(group)
    return {r.broker_id for r in replicas.in_sync_replicas if r.broker_id is not None} if replicas else set()


async def designate(controller_addr: str, group: str, broker_id: int) -> None:
    """``mqadmin electMaster``: the controller makes ``broker_id`` the master."""
    host, port = controller_addr.rsplit(":", 1)
    conn = await connect(host, int(port))
    header = ElectMasterRequestHeader(
        cluster_name="DefaultCluster", broker_name=group, broker_id=broker_id, designate_elect=True
    )
    try:
        response = await conn.request(
            RemotingCommand.request(ControllerRequestCode.CONTROLLER_ELECT_MASTER, header.to_fields())
        )
    finally:
        conn.close()
    assert response.code == ResponseCode.SUCCESS, response.remark


def times(broker: BrokerProcess, text: str) -> int:
    assert broker.process is not None
    return broker.process.output.count(text)


async def bodies_on(broker: BrokerProcess) -> set[str]:
    conn = await connect("127.0.0.1", broker.port)
    try:
        return {m.body.decode() for m in await pull_queues(conn, TOPIC, 1)}
    finally:
        conn.close()


async def test_roles_switch_both_ways_without_a_restart(
    ours: Cluster, controller: ApacheController, group: str
) -> None:
    first = await start_replica(ours, controller, group, "r1")
    assert first.process is not None
    await first.process.wait_for_line(r"is now SYNC_MASTER \(brokerId 0\)")
    second = await start_replica(ours, controller, group, "r2")
    await wait_until(lambda: _equals(in_sync(controller.addr, group), {1, 2}), 30)
    for i in range(10):
        assert (await send_once(first.addr, f"one-{i}".encode())).code == ResponseCode.SUCCESS

    # The controller moves the master to broker 2: broker 1 steps down without a restart.
    await designate(controller.addr, group, 2)
    await wait_until(lambda: times(second, "is now SYNC_MASTER (brokerId 0)") == 1, 30)
    await wait_until(lambda: times(first, "is now SLAVE (brokerId 1)") == 1, 30)
    assert (await send_once(first.addr, b"refused")).code != ResponseCode.SUCCESS
    await wait_until(lambda: sends_ok(second.addr), 30)
    await wait_until(lambda: _is(routed_master(controller.namesrv_addr, group), second.addr), 30)
    for i in range(10):
        assert (await send_once(second.addr, f"two-{i}".encode())).code == ResponseCode.SUCCESS

    # And back: broker 1, caught up as a slave, is master again.
    await wait_until(lambda: _equals(in_sync(controller.addr, group), {1, 2}), 30)
    await designate(controller.addr, group, 1)
    await wait_until(lambda: times(first, "is now SYNC_MASTER (brokerId 0)") == 2, 30)
    await wait_until(lambda: times(second, "is now SLAVE (brokerId 2)") == 2, 30)
    await wait_until(lambda: sends_ok(first.addr), 30)
    await wait_until(lambda: _is(routed_master(controller.namesrv_addr, group), first.addr), 30)
    wanted = {f"one-{i}" for i in range(10)} | {f"two-{i}" for i in range(10)}
    assert wanted <= await bodies_on(first)


async def _equals(value: Awaitable[set[int]], expected: set[int]) -> bool:
    return await value == expected


# -- mixed groups: Apache's brokers and ours ------------------------------------------------------


def apache_replica(
    toolchain: Toolchain, root: Path, controller: ApacheController, group: str
) -> ApacheControllerBroker:
    """Apache 5.3.3's broker in controller mode on free loopback ports (listenPort, its HA port
    listenPort + 1 and its VIP port listenPort - 2)."""
    while True:
        port = free_port()
        if all(_port_free(p) for p in (port - 2, port + 1)):
            break
    return ApacheControllerBroker(
        toolchain, root, "127.0.0.1", controller.namesrv_addr, controller.addr, name=group, port=port
    )


async def master_id(controller_addr: str, group: str) -> str | None:
    info = await asyncio.to_thread(remoting_header, controller_addr, 1004, {"brokerName": group})
    return info.get("masterBrokerId")


async def test_our_slave_of_an_apache_master_takes_over(
    ours: Cluster, controller: ApacheController, group: str, java53_toolchain: Toolchain, tmp_path: Path
) -> None:
    apache = apache_replica(java53_toolchain, tmp_path / "apache-broker", controller, group)
    await asyncio.to_thread(apache.start)
    try:
        await wait_until(lambda: _is(master_id(controller.addr, group), "1"), 60)
        ours_broker = await start_replica(ours, controller, group, "r2")
        assert ours_broker.process is not None
        await ours_broker.process.wait_for_line(r"is now SLAVE \(brokerId 2\)")
        await wait_until(lambda: _equals(in_sync(controller.addr, group), {1, 2}), 60)
        acked = {f"apache-{i}" for i in range(10)}
        for body in sorted(acked):
            assert (await send_once(apache.addr, body.encode())).code == ResponseCode.SUCCESS

        await asyncio.to_thread(apache.kill)
        await ours_broker.process.wait_for_line(r"is now SYNC_MASTER \(brokerId 0\)", timeout=60)
        await wait_until(lambda: sends_ok(ours_broker.addr), 30)
        await wait_until(lambda: _is(routed_master(controller.namesrv_addr, group), ours_broker.addr), 30)
        assert acked <= await bodies_on(ours_broker)
    finally:
        await asyncio.to_thread(apache.kill)  # (its store is not read after the test)


async def test_an_apache_slave_of_our_master_takes_over(
    ours: Cluster, controller: ApacheController, group: str, java53_toolchain: Toolchain, tmp_path: Path
) -> None:
    mine = await start_replica(ours, controller, group, "r1")
    assert mine.process is not None
    await mine.process.wait_for_line(r"is now SYNC_MASTER \(brokerId 0\)")
    apache = apache_replica(java53_toolchain, tmp_path / "apache-broker", controller, group)
    await asyncio.to_thread(apache.start)
    try:
        await wait_until(lambda: _equals(in_sync(controller.addr, group), {1, 2}), 60)
        acked = {f"ours-{i}" for i in range(10)}
        for body in sorted(acked):
            assert (await send_once(mine.addr, body.encode())).code == ResponseCode.SUCCESS

        await ours.kill_broker("r1")
        await wait_until(lambda: _is(master_id(controller.addr, group), "2"), 60)
        await wait_until(lambda: sends_ok(apache.addr), 60)
        assert acked <= await bodies_on_addr(apache.addr)
    finally:
        await asyncio.to_thread(apache.kill)  # (its store is not read after the test)


async def bodies_on_addr(addr: str) -> set[str]:
    host, port = addr.rsplit(":", 1)
    conn = await connect(host, int(port))
    try:
        return {m.body.decode() for m in await pull_queues(conn, TOPIC, 1)}
    finally:
        conn.close()


async def test_our_slave_finds_an_apache_masters_own_ha_port(
    ours: Cluster, controller: ApacheController, group: str, java53_toolchain: Toolchain, tmp_path: Path
) -> None:
    """An Apache master whose ``haListenPort`` is not ``listenPort + 1``: our slave learns the
    HA address from the name server's answer to its registration, as Apache's slaves do."""
    apache = apache_replica(java53_toolchain, tmp_path / "apache-broker", controller, group)
    apache.overrides["haListenPort"] = free_port()
    await asyncio.to_thread(apache.start)
    try:
        await wait_until(lambda: _is(master_id(controller.addr, group), "1"), 60)
        mine = await start_replica(ours, controller, group, "r2")
        assert mine.process is not None
        await mine.process.wait_for_line(r"is now SLAVE \(brokerId 2\)")
        await mine.process.wait_for_line(
            f"the master's HA address is 127.0.0.1:{apache.overrides['haListenPort']}"
        )
        await wait_until(lambda: _equals(in_sync(controller.addr, group), {1, 2}), 60)
        assert (await send_once(apache.addr, b"replicated")).code == ResponseCode.SUCCESS
    finally:
        await asyncio.to_thread(apache.kill)  # (its store is not read after the test)
