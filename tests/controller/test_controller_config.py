"""The controller's settings (Apache's ControllerConfig keys), ``mqcontroller -p``, and the
requests every replica answers itself, on one in-process replica."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from aiorocketmq.controller.__main__ import main
from aiorocketmq.controller.config import ControllerSettings, Peer
from aiorocketmq.controller.manager import ControllerManager
from aiorocketmq.protocol.codes import ResponseCode
from aiorocketmq.protocol.command import RemotingCommand
from aiorocketmq.protocol.controller import ControllerRequestCode as Req
from aiorocketmq.protocol.controller import ControllerResponseCode as Code
from aiorocketmq.protocol.settings import ConfigError, read_properties
from aiorocketmq.protocol.transport import Connection, connect
from tests.support import held_port, wait_until


def test_dledger_peers_serve_on_their_address() -> None:
    settings = ControllerSettings.load(
        None,
        {
            "controllerDLegerPeers": "n0-127.0.0.1:9878;n1-127.0.0.1:9868",
            "controllerDLegerSelfId": "n1",
        },
    )
    peers, self_id = settings.peers()
    assert self_id == "n1"
    # Without controllerRaftPeers, Raft is on the peer's port plus controllerRaftPortOffset.
    assert peers == [
        Peer("n0", "127.0.0.1:9878", "127.0.0.1:10878"),
        Peer("n1", "127.0.0.1:9868", "127.0.0.1:10868"),
    ]
    settings.controller_raft_peers = "n0-127.0.0.1:7000;n1-127.0.0.1:7001"
    assert [p.raft_address for p in settings.peers()[0]] == ["127.0.0.1:7000", "127.0.0.1:7001"]


def test_jraft_keys() -> None:
    settings = ControllerSettings.load(
        None,
        {
            "controllerType": "jraft",
            "jRaftInitConf": "127.0.0.1:9880,127.0.0.1:9881",
            "jRaftServerId": "127.0.0.1:9881",
            "jRaftControllerRPCAddr": "127.0.0.1:9770,127.0.0.1:9771",
        },
    )
    assert settings.controller_type == "jRaft"
    peers, self_id = settings.peers()
    assert self_id == "127.0.0.1:9881"
    assert peers[1] == Peer("127.0.0.1:9881", "127.0.0.1:9771", "127.0.0.1:9881")


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({}, "controllerDLegerPeers"),
        ({"controllerDLegerPeers": "n0-127.0.0.1:9878"}, "controllerDLegerSelfId"),
        ({"controllerDLegerPeers": "n0-127.0.0.1:9878", "controllerDLegerSelfId": "n3"}, "not in"),
        ({"controllerDLegerPeers": "n0-localhost", "controllerDLegerSelfId": "n0"}, "host:port"),
    ],
)
def test_bad_peers(values: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        ControllerSettings.load(None, values).peers()


def test_controller_type_checked() -> None:
    with pytest.raises(ConfigError, match="controllerType"):
        ControllerSettings.load(None, {"controllerType": "zookeeper"})


def test_print_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    conf = tmp_path / "controller.conf"
    conf.write_text(
        "controllerDLegerGroup=group1\ncontrollerDLegerPeers=n0-127.0.0.1:9878\ncontrollerDLegerSelfId=n0\n"
        "enableElectUncleanMaster=true\nnoSuchKey=1\n"
    )
    assert main(["-c", str(conf), "-p"]) == 0
    printed = read_properties(capsys.readouterr().out)
    assert printed["controllerDLegerPeers"] == "n0-127.0.0.1:9878"
    assert printed["enableElectUncleanMaster"] == "true"
    assert printed["notifyBrokerRoleChanged"] == "true"
    assert printed["scanNotActiveBrokerInterval"] == "5000"
    assert "noSuchKey" not in printed


@pytest.fixture
async def replica(tmp_path: Path) -> AsyncIterator[tuple[ControllerManager, Connection]]:
    with held_port() as port, held_port() as raft:
        settings = ControllerSettings.load(
            None,
            {
                "controllerDLegerGroup": "g",
                "controllerDLegerPeers": f"n0-127.0.0.1:{port}",
                "controllerRaftPeers": f"n0-127.0.0.1:{raft}",
                "controllerDLegerSelfId": "n0",
                "controllerStorePath": str(tmp_path / "store"),
                "bindAddress": "127.0.0.1",
            },
        )
        controller = ControllerManager(settings)
        await controller.start()
    conn = await connect("127.0.0.1", port)
    try:
        await wait_until(lambda: controller.is_leader, timeout=20)
        yield controller, conn
    finally:
        conn.close()
        await controller.close()


async def test_requests_every_replica_answers(replica: tuple[ControllerManager, Connection]) -> None:
    controller, conn = replica

    async def ask(code: int, fields: dict[str, object] | None = None, body: bytes = b"") -> RemotingCommand:
        return await conn.request(RemotingCommand.request(code, fields or {}, body))

    no_id = await ask(
        Req.BROKER_HEARTBEAT, {"clusterName": "c", "brokerName": "b", "brokerAddr": "127.0.0.1:1"}
    )
    assert (no_id.code, no_id.remark) == (Code.CONTROLLER_INVALID_REQUEST, "Heart beat with empty brokerId")
    beat = await ask(
        Req.BROKER_HEARTBEAT,
        {"clusterName": "c", "brokerName": "b", "brokerAddr": "127.0.0.1:1", "brokerId": 1},
    )
    assert (beat.code, beat.remark) == (ResponseCode.SUCCESS, "Heart beat success")
    assert controller.heartbeats.is_active("c", "b", 1)
    no_names = await ask(Req.CONTROLLER_GET_SYNC_STATE_DATA)
    assert (no_names.code, no_names.remark) == (ResponseCode.SYSTEM_ERROR, "not set any response code")
    refused = await ask(Req.UPDATE_CONTROLLER_CONFIG, body=b"configStorePath=/tmp/x\n")
    assert refused.code == ResponseCode.NO_PERMISSION
    updated = await ask(Req.UPDATE_CONTROLLER_CONFIG, body=b"enableElectUncleanMaster=true\n")
    assert updated.code == ResponseCode.SUCCESS
    assert controller.replicas.enable_elect_unclean_master
    config = read_properties((await ask(Req.GET_CONTROLLER_CONFIG)).body.decode())
    assert config["enableElectUncleanMaster"] == "true"
    meta = await ask(Req.CONTROLLER_GET_METADATA_INFO)
    assert meta.ext_fields["isLeader"] == "true" and meta.ext_fields["controllerLeaderId"] == "n0"


async def test_config_as_apache_lists_it(replica: tuple[ControllerManager, Connection]) -> None:
    """GET_CONTROLLER_CONFIG names and values as Apache's: ``isProcessReadEvent`` (its field; its
    setter's ``processReadEvent`` is read too), the port it serves on as ``listenPort``, the
    store path spelt out. An update with one bad value changes nothing."""
    controller, conn = replica

    async def ask(code: int, body: bytes = b"") -> RemotingCommand:
        return await conn.request(RemotingCommand.request(code, {}, body))

    async def config() -> dict[str, str]:
        return read_properties((await ask(Req.GET_CONTROLLER_CONFIG)).body.decode())

    before = await config()
    assert before["isProcessReadEvent"] == "false" and "processReadEvent" not in before
    assert before["listenPort"] == str(controller.port)
    assert before["configStorePath"] == str(Path.home() / "controller" / "controller.properties")
    assert (await ask(Req.UPDATE_CONTROLLER_CONFIG, b"processReadEvent=true\n")).code == ResponseCode.SUCCESS
    assert controller.settings.process_read_event
    assert (
        await ask(Req.UPDATE_CONTROLLER_CONFIG, b"isProcessReadEvent=false\n")
    ).code == ResponseCode.SUCCESS
    assert not controller.settings.process_read_event
    refused = await ask(
        Req.UPDATE_CONTROLLER_CONFIG, b"electMasterMaxRetryCount=7\nscanNotActiveBrokerInterval=soon\n"
    )
    assert refused.code == ResponseCode.SYSTEM_ERROR and "scanNotActiveBrokerInterval=soon" in (
        refused.remark or ""
    )
    assert await config() == before


async def test_raft_snapshot_restores_the_state(tmp_path: Path) -> None:
    """PySyncObj's log compaction writes our state to ``raft.dump``; a replica restarted from
    it (and the journal's tail) has the same replicas info."""
    import asyncio

    from aiorocketmq.controller.raft import RaftNode
    from aiorocketmq.controller.replicas import ReplicasInfo

    loop = asyncio.get_running_loop()
    events = [
        {
            "type": "APPLY_BROKER_ID_EVENT",
            "clusterName": "c",
            "brokerName": "b",
            "brokerAddress": "127.0.0.1:1",
            "newBrokerId": 1,
            "registerCheckCode": "127.0.0.1:1;5",
        },
        {"type": "ELECT_MASTER_EVENT", "brokerName": "b", "newMasterElected": True, "newMasterBrokerId": 1},
    ]
    with held_port() as raft:
        first = ReplicasInfo()
        node = RaftNode(f"127.0.0.1:{raft}", [], tmp_path, first, loop, lambda role: None)
        try:
            await wait_until(node.is_leader, timeout=20)
            await node.append(events[:1])
            node.sync.forceLogCompaction()
            await wait_until(lambda: (tmp_path / "raft.dump").exists(), timeout=20)
            await node.append(events[1:])  # after the snapshot: from the journal
        finally:
            await node.close()
        second = ReplicasInfo()
        node = RaftNode(f"127.0.0.1:{raft}", [], tmp_path, second, loop, lambda role: None)
        try:
            await wait_until(lambda: second.to_wire() == first.to_wire(), timeout=20)
        finally:
            await node.close()
    assert second.sync_state_set_info_table["b"].master_broker_id == 1


def test_importing_the_controller_leaves_ipv6_address_text_working() -> None:
    """PySyncObj swaps socket.inet_ntop for a Windows-only shim when imported; a name server
    running a controller (and every test after one) must keep the real one."""
    import importlib
    import socket

    import aiorocketmq.controller.raft as raft

    importlib.reload(raft)
    assert socket.inet_ntop(socket.AF_INET6, bytes(15) + b"\x01") == "::1"
