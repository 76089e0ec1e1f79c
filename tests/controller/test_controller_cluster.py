"""Three real ``mqcontroller`` processes (Raft over PySyncObj) on free ports of loopback,
driven over TCP with raw controller requests: broker ids applied and registered, a master
elected and replaced when its heartbeats stop (with NOTIFY_BROKER_ROLE_CHANGED to the live
broker), the Raft leader killed with SIGKILL, and the state surviving restarts."""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from aiorocketmq.protocol.codes import ResponseCode
from aiorocketmq.protocol.command import RemotingCommand
from aiorocketmq.protocol.controller import (
    ControllerRequestCode as Req,
)
from aiorocketmq.protocol.controller import (
    ControllerResponseCode as Code,
)
from aiorocketmq.protocol.controller import (
    NotifyBrokerRoleChangedRequestHeader,
    SyncStateSet,
)
from aiorocketmq.protocol.errors import MQError
from aiorocketmq.protocol.transport import Connection, Server, connect
from tests.cluster import start_mqcontroller
from tests.support import ServerProcess, held_port, wait_until
from tests.tools.conftest import mqadmin

CLUSTER, GROUP = "DefaultCluster", "broker-a"
#: Brokers announce this heartbeat timeout: a stopped master is replaced within seconds.
HEARTBEAT_TIMEOUT_MS = 1500


@dataclass
class Replica:
    id: str
    port: int
    conf: Path
    process: ServerProcess | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"


@dataclass
class Controllers:
    replicas: list[Replica]
    conns: dict[str, Connection] = field(default_factory=dict)

    async def start(self, replica: Replica) -> None:
        replica.process = await start_mqcontroller(replica.conf, replica.port)

    def running(self) -> list[Replica]:
        return [
            r
            for r in self.replicas
            if r.process is not None and r.process.proc is not None and r.process.proc.returncode is None
        ]

    async def conn(self, address: str) -> Connection:
        conn = self.conns.get(address)
        if conn is None or conn.closed:
            host, _, port = address.rpartition(":")
            conn = await connect(host, int(port))
            self.conns[address] = conn
        return conn

    async def request(
        self, address: str, code: int, fields: dict[str, Any] | None = None, body: bytes = b""
    ) -> RemotingCommand:
        conn = await self.conn(address)
        return await conn.request(RemotingCommand.request(code, fields or {}, body), timeout=10.0)

    async def leader(self, timeout: float = 30.0) -> str:
        """The address of the controller that answers as leader (asked of the running ones)."""
        found: list[str] = []

        async def ready() -> bool:
            for replica in self.running():
                try:
                    meta = await self.request(replica.address, Req.CONTROLLER_GET_METADATA_INFO)
                except MQError:
                    continue
                address = meta.ext_fields.get("controllerLeaderAddress")
                if not address:
                    continue
                try:
                    probe = await self.request(address, Req.CONTROLLER_GET_NEXT_BROKER_ID, _group())
                except MQError:
                    continue
                if probe.code == ResponseCode.SUCCESS:
                    found.append(address)
                    return True
            return False

        await wait_until(ready, timeout, interval=0.1)
        return found[-1]

    async def close(self) -> None:
        for conn in self.conns.values():
            conn.close()
        for replica in self.replicas:
            if replica.process is not None:
                await replica.process.stop()


def _group() -> dict[str, Any]:
    return {"clusterName": CLUSTER, "brokerName": GROUP}


@contextlib.contextmanager
def _ports(count: int) -> Iterator[list[int]]:
    with contextlib.ExitStack() as stack:
        yield [stack.enter_context(held_port()) for _ in range(count)]


@pytest.fixture
async def controllers(tmp_path: Path) -> AsyncIterator[Controllers]:
    with _ports(6) as ports:
        served, raft = ports[:3], ports[3:]
        peers = ";".join(f"n{i}-127.0.0.1:{p}" for i, p in enumerate(served))
        raft_peers = ";".join(f"n{i}-127.0.0.1:{p}" for i, p in enumerate(raft))
        replicas = []
        for i, port in enumerate(served):
            conf = tmp_path / f"controller-n{i}.conf"
            conf.write_text(
                "\n".join(
                    [
                        "controllerDLegerGroup=group1",
                        f"controllerDLegerPeers={peers}",
                        f"controllerRaftPeers={raft_peers}",
                        f"controllerDLegerSelfId=n{i}",
                        f"controllerStorePath={tmp_path / f'store-n{i}'}",
                        "bindAddress=127.0.0.1",
                        "scanNotActiveBrokerInterval=300",
                        "scanInactiveMasterInterval=500",
                        "",
                    ]
                )
            )
            replicas.append(Replica(f"n{i}", port, conf))
        cluster = Controllers(replicas)
        try:
            await asyncio.gather(*(cluster.start(r) for r in replicas))
        except BaseException:
            await cluster.close()
            raise
    try:
        yield cluster
    finally:
        await cluster.close()


class FakeBroker:
    """A broker's address that listens (to receive NOTIFY_BROKER_ROLE_CHANGED) and heartbeats."""

    def __init__(self, broker_id: int) -> None:
        self.broker_id = broker_id
        self.notified: list[tuple[NotifyBrokerRoleChangedRequestHeader, SyncStateSet]] = []
        self.changed = asyncio.Event()
        self.server = Server({Req.NOTIFY_BROKER_ROLE_CHANGED: self._notified}, name=f"broker{broker_id}")
        self.port = 0
        self.beating: asyncio.Task[None] | None = None
        self.heartbeat_conn: Connection | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _notified(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        header = NotifyBrokerRoleChangedRequestHeader.from_fields(cmd.ext_fields)
        self.notified.append((header, SyncStateSet.decode(cmd.body)))
        self.changed.set()
        return cmd.response()

    async def start(self) -> FakeBroker:
        self.port = await self.server.listen("127.0.0.1", 0)
        return self

    def heartbeat_fields(self) -> dict[str, Any]:
        return {
            **_group(),
            "brokerAddr": self.address,
            "brokerId": self.broker_id,
            "heartbeatTimeoutMills": HEARTBEAT_TIMEOUT_MS,
            "epoch": 0,
            "maxOffset": 0,
        }

    async def _beat(self, cluster: Controllers, address: str) -> None:
        host, _, port = address.rpartition(":")
        while True:
            try:
                if (
                    self.heartbeat_conn is None
                    or self.heartbeat_conn.closed
                    or self.heartbeat_conn.address != address
                ):
                    if self.heartbeat_conn is not None:
                        self.heartbeat_conn.close()
                    self.heartbeat_conn = await connect(host, int(port))
                self.heartbeat_conn.send_oneway(
                    RemotingCommand.request(Req.BROKER_HEARTBEAT, self.heartbeat_fields(), oneway=True)
                )
            except MQError:
                pass
            await asyncio.sleep(0.2)

    async def heartbeat_once(self, cluster: Controllers, address: str) -> None:
        """One heartbeat, on this broker's own connection (a controller ties a broker's
        liveness to the connection its first heartbeat came on)."""
        if (
            self.heartbeat_conn is None
            or self.heartbeat_conn.closed
            or self.heartbeat_conn.address != address
        ):
            if self.heartbeat_conn is not None:
                self.heartbeat_conn.close()
            host, _, port = address.rpartition(":")
            self.heartbeat_conn = await connect(host, int(port))
        response = await self.heartbeat_conn.request(
            RemotingCommand.request(Req.BROKER_HEARTBEAT, self.heartbeat_fields()), timeout=10.0
        )
        assert response.code == ResponseCode.SUCCESS, response

    def start_heartbeats(self, cluster: Controllers, address: str) -> None:
        self.stop_heartbeats()
        self.beating = asyncio.ensure_future(self._beat(cluster, address))

    def stop_heartbeats(self) -> None:
        if self.beating is not None:
            self.beating.cancel()
            self.beating = None

    async def close(self) -> None:
        self.stop_heartbeats()
        if self.heartbeat_conn is not None:
            self.heartbeat_conn.close()
        await self.server.close()


@pytest.fixture
async def brokers() -> AsyncIterator[list[FakeBroker]]:
    made = [await FakeBroker(i).start() for i in (1, 2, 3)]
    yield made
    for broker in made:
        await broker.close()


async def _join(cluster: Controllers, leader: str, broker: FakeBroker) -> None:
    """What a controller-mode broker does at start: get an id, apply for it, register."""
    nxt = await cluster.request(leader, Req.CONTROLLER_GET_NEXT_BROKER_ID, _group())
    assert nxt.code == ResponseCode.SUCCESS and int(nxt.ext_fields["nextBrokerId"]) == broker.broker_id
    applied = await cluster.request(
        leader,
        Req.CONTROLLER_APPLY_BROKER_ID,
        {**_group(), "appliedBrokerId": broker.broker_id, "registerCheckCode": f"{broker.address};1"},
    )
    assert applied.code == ResponseCode.SUCCESS, applied
    registered = await cluster.request(
        leader,
        Req.CONTROLLER_REGISTER_BROKER,
        {**_group(), "brokerId": broker.broker_id, "brokerAddress": broker.address},
    )
    assert registered.code == ResponseCode.SUCCESS, registered


async def _replica_info(cluster: Controllers, leader: str) -> RemotingCommand:
    info = await cluster.request(leader, Req.CONTROLLER_GET_REPLICA_INFO, {"brokerName": GROUP})
    assert info.code == ResponseCode.SUCCESS, info
    return info


async def _group_with_master(cluster: Controllers, brokers: list[FakeBroker]) -> str:
    """Brokers 1 and 2 join, 1 becomes master, the SyncStateSet grows to {1, 2}."""
    leader = await cluster.leader()
    for broker in brokers[:2]:
        await _join(cluster, leader, broker)
        await broker.heartbeat_once(cluster, leader)
        broker.start_heartbeats(cluster, leader)
    elected = await cluster.request(
        leader, Req.CONTROLLER_ELECT_MASTER, {**_group(), "brokerId": 1, "designateElect": "false"}
    )
    assert elected.code == ResponseCode.SUCCESS, elected
    assert (elected.ext_fields["masterBrokerId"], elected.ext_fields["masterEpoch"]) == ("1", "1")
    altered = await cluster.request(
        leader,
        Req.CONTROLLER_ALTER_SYNC_STATE_SET,
        {"brokerName": GROUP, "masterBrokerId": 1, "masterEpoch": 1},
        SyncStateSet(sync_state_set={1, 2}, sync_state_set_epoch=1).encode(),
    )
    assert altered.code == ResponseCode.SUCCESS, altered
    assert altered.ext_fields["newSyncStateSetEpoch"] == "2"
    return leader


async def test_followers_refuse_and_point_to_the_leader(controllers: Controllers) -> None:
    leader = await controllers.leader()

    async def all_know_it() -> bool:
        for replica in controllers.replicas:
            meta = await controllers.request(replica.address, Req.CONTROLLER_GET_METADATA_INFO)
            if meta.ext_fields.get("controllerLeaderAddress") != leader:
                return False
        return True

    await wait_until(all_know_it, timeout=10)
    for replica in controllers.replicas:
        meta = await controllers.request(replica.address, Req.CONTROLLER_GET_METADATA_INFO)
        assert meta.code == ResponseCode.SUCCESS
        assert meta.ext_fields["controllerLeaderAddress"] == leader
        assert meta.ext_fields["group"] == "group1"
        assert meta.ext_fields["isLeader"] == ("true" if replica.address == leader else "false")
        assert meta.ext_fields["peers"].count(";") == 3
        if replica.address != leader:
            refused = await controllers.request(
                replica.address, Req.CONTROLLER_GET_REPLICA_INFO, {"brokerName": GROUP}
            )
            assert refused.code == Code.CONTROLLER_NOT_LEADER


async def test_master_replaced_when_its_heartbeats_stop(
    controllers: Controllers, brokers: list[FakeBroker]
) -> None:
    leader = await _group_with_master(controllers, brokers)
    # The master stops heartbeating (its connection stays open): after its timeout the
    # leader elects 2, the other member of the SyncStateSet, and tells broker 2.
    brokers[0].stop_heartbeats()

    async def master_is_2() -> bool:
        return (await _replica_info(controllers, leader)).ext_fields.get("masterBrokerId") == "2"

    await wait_until(master_is_2, timeout=20)
    info = await _replica_info(controllers, leader)
    assert info.ext_fields["masterEpoch"] == "2"
    assert info.ext_fields["masterAddress"] == brokers[1].address
    assert SyncStateSet.decode(info.body) == SyncStateSet(sync_state_set={2}, sync_state_set_epoch=3)
    await asyncio.wait_for(brokers[1].changed.wait(), 10)
    header, body = brokers[1].notified[-1]
    assert (header.master_broker_id, header.master_epoch, header.master_address) == (2, 2, brokers[1].address)
    assert body.sync_state_set == {2}
    # Broker 1 was told of its own election (epoch 1), not of this one: it is not alive.
    assert [h.master_epoch for h, _ in brokers[0].notified] == [1]
    # The old master comes back: registering tells it who is master now.
    brokers[0].start_heartbeats(controllers, leader)
    registered = await controllers.request(
        leader,
        Req.CONTROLLER_REGISTER_BROKER,
        {**_group(), "brokerId": 1, "brokerAddress": brokers[0].address},
    )
    assert registered.ext_fields["masterBrokerId"] == "2"


async def test_broker_asks_to_become_master(controllers: Controllers, brokers: list[FakeBroker]) -> None:
    leader = await controllers.leader()
    await _join(controllers, leader, brokers[0])
    unknown = await controllers.request(
        leader, Req.CONTROLLER_ELECT_MASTER, {"clusterName": CLUSTER, "brokerName": "nope", "brokerId": 1}
    )
    assert unknown.code == Code.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED
    elected = await controllers.request(leader, Req.CONTROLLER_ELECT_MASTER, {**_group(), "brokerId": 1})
    assert elected.code == ResponseCode.SUCCESS
    again = await controllers.request(leader, Req.CONTROLLER_ELECT_MASTER, {**_group(), "brokerId": 1})
    assert (
        again.code == Code.CONTROLLER_MASTER_STILL_EXIST or again.code == Code.CONTROLLER_ELECT_MASTER_FAILED
    )


async def test_leader_killed_new_leader_elects(controllers: Controllers, brokers: list[FakeBroker]) -> None:
    old_leader = await _group_with_master(controllers, brokers)
    victim = next(r for r in controllers.replicas if r.address == old_leader)
    assert victim.process is not None
    await victim.process.kill()
    new_leader = await controllers.leader()
    assert new_leader != old_leader
    # The replicated state is all there.
    info = await _replica_info(controllers, new_leader)
    assert (info.ext_fields["masterBrokerId"], info.ext_fields["masterEpoch"]) == ("1", "1")
    assert SyncStateSet.decode(info.body) == SyncStateSet(sync_state_set={1, 2}, sync_state_set_epoch=2)
    # Brokers find the new leader and heartbeat to it; the master then dies: 2 is elected.
    brokers[1].start_heartbeats(controllers, new_leader)
    await brokers[1].heartbeat_once(controllers, new_leader)
    brokers[0].stop_heartbeats()
    await brokers[0].heartbeat_once(controllers, new_leader)  # known, then silent

    async def master_is_2() -> bool:
        return (await _replica_info(controllers, new_leader)).ext_fields.get("masterBrokerId") == "2"

    await wait_until(master_is_2, timeout=20)
    await asyncio.wait_for(brokers[1].changed.wait(), 10)
    # And a new broker can still join (a write through the remaining quorum).
    await _join(controllers, new_leader, brokers[2])


async def test_state_survives_restarts(controllers: Controllers, brokers: list[FakeBroker]) -> None:
    leader = await _group_with_master(controllers, brokers)
    # A follower restarts: it catches up and the cluster keeps its state.
    follower = next(r for r in controllers.replicas if r.address != leader)
    assert follower.process is not None
    await follower.process.stop()
    await _join(controllers, leader, brokers[2])  # written while it is down
    await controllers.start(follower)
    # Every replica stops, then all start again: the state comes back from their journals.
    for replica in controllers.replicas:
        assert replica.process is not None
        await replica.process.kill()
    await asyncio.gather(*(controllers.start(r) for r in controllers.replicas))
    leader = await controllers.leader()
    info = await _replica_info(controllers, leader)
    assert (info.ext_fields["masterBrokerId"], info.ext_fields["masterEpoch"]) == ("1", "1")
    assert SyncStateSet.decode(info.body) == SyncStateSet(sync_state_set={1, 2}, sync_state_set_epoch=2)
    nxt = await controllers.request(leader, Req.CONTROLLER_GET_NEXT_BROKER_ID, _group())
    assert nxt.ext_fields["nextBrokerId"] == "4"
    data = await controllers.request(leader, Req.CONTROLLER_GET_SYNC_STATE_DATA, body=b'["broker-a"]')
    assert data.code == ResponseCode.SUCCESS
    assert b'"brokerAddress":"' + brokers[2].address.encode() in data.body


async def test_controller_embedded_in_namesrv(tmp_path: Path) -> None:
    """``enableControllerInNamesrv=true``: the name server serves routes on its port and the
    controller (here a single replica) on its peer address, as Apache's does."""
    with _ports(2) as (served, raft):
        conf = tmp_path / "namesrv.conf"
        conf.write_text(
            "\n".join(
                [
                    "listenPort=0",
                    "bindAddress=127.0.0.1",
                    f"storePathRootDir={tmp_path / 'namesrv'}",
                    "enableControllerInNamesrv=true",
                    "controllerDLegerGroup=group1",
                    f"controllerDLegerPeers=n0-127.0.0.1:{served}",
                    f"controllerRaftPeers=n0-127.0.0.1:{raft}",
                    "controllerDLegerSelfId=n0",
                    f"controllerStorePath={tmp_path / 'controller'}",
                    "",
                ]
            )
        )
        namesrv = await ServerProcess("aiorocketmq.namesrv", ["-c", str(conf)]).start()
    cluster = Controllers([Replica("n0", served, conf, namesrv)])
    try:
        assert namesrv.port != served
        assert "unknown configuration key" not in namesrv.output
        routes = await cluster.request(f"127.0.0.1:{namesrv.port}", 106)  # GET_BROKER_CLUSTER_INFO
        assert routes.code == ResponseCode.SUCCESS
        leader = await cluster.leader()
        assert leader == f"127.0.0.1:{served}"
        applied = await cluster.request(
            leader,
            Req.CONTROLLER_APPLY_BROKER_ID,
            {**_group(), "appliedBrokerId": 1, "registerCheckCode": "127.0.0.1:10911;1"},
        )
        assert applied.code == ResponseCode.SUCCESS
        # The name server's own port does not serve controller requests.
        other = await cluster.request(f"127.0.0.1:{namesrv.port}", Req.CONTROLLER_GET_METADATA_INFO)
        assert other.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    finally:
        await cluster.close()


async def test_mqadmin_controller_commands(controllers: Controllers, brokers: list[FakeBroker]) -> None:
    """Our ``mqadmin``'s controller commands against the three replicas, any replica's address
    given with ``-a`` (requests for the leader find it), no name server needed."""
    leader = await _group_with_master(controllers, brokers)
    follower = next(r.address for r in controllers.replicas if r.address != leader)

    meta = await mqadmin("getControllerMetaData", "-a", follower)
    assert meta.code == 0, meta.err
    assert f"#ControllerLeaderAddress\t{leader}" in meta.lines
    assert "#ControllerGroup\tgroup1" in meta.lines
    assert sum(line.startswith("#Peer:\t") for line in meta.lines) == 3

    state = await mqadmin("getSyncStateSet", "-a", follower, "-b", GROUP)
    assert state.code == 0, state.err
    assert "#MasterBrokerId\t1" in state.lines and "#SyncStateSetNums\t2" in state.lines

    elected = await mqadmin("electMaster", "-a", follower, "-c", CLUSTER, "-bn", GROUP, "-b", "2")
    assert elected.code == 0, elected.err
    assert f"#BrokerMasterAddr\t{brokers[1].address}" in elected.lines
    assert "#MasterEpoch\t2" in elected.lines
    info = await _replica_info(controllers, leader)
    assert info.ext_fields["masterBrokerId"] == "2"

    # Broker 3 applied for an id but never came alive: cleaning it frees nothing else.
    await _join(controllers, leader, brokers[2])
    refused = await mqadmin("cleanBrokerMetadata", "-a", follower, "-bn", GROUP, "-b", "3")
    assert refused.code != 0 and "clusterName" in refused.err
    cleaned = await mqadmin("cleanBrokerMetadata", "-a", follower, "-bn", GROUP, "-c", CLUSTER, "-b", "3")
    assert cleaned.code == 0, cleaned.err
    data = await controllers.request(leader, Req.CONTROLLER_GET_SYNC_STATE_DATA, body=b'["broker-a"]')
    assert brokers[2].address.encode() not in data.body and brokers[1].address.encode() in data.body

    config = await mqadmin("getControllerConfig", "-a", ";".join(r.address for r in controllers.replicas))
    assert config.code == 0, config.err
    assert sum(line.startswith("============") for line in config.lines) == 3
    updated = await mqadmin(
        "updateControllerConfig", "-a", leader, "-k", "enableElectUncleanMaster", "-v", "true"
    )
    assert updated.code == 0, updated.err
    after = await mqadmin("getControllerConfig", "-a", leader)
    assert any(re.fullmatch(r"enableElectUncleanMaster\s+=  true", line) for line in after.lines), after.out
