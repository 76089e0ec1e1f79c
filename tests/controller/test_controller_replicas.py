"""The controller's replicas info state machine and heartbeat table, without I/O: each request
answered as Apache RocketMQ 5.3's ReplicasInfoManager / DefaultElectPolicy answers it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from aiorocketmq.controller.heartbeat import BrokerHeartbeatManager
from aiorocketmq.controller.replicas import (
    ELECT_MASTER_EVENT,
    ControllerResult,
    ReplicasInfo,
)
from aiorocketmq.protocol.codes import ResponseCode
from aiorocketmq.protocol.controller import (
    AlterSyncStateSetRequestHeader,
    ApplyBrokerIdRequestHeader,
    BrokerReplicasInfo,
    CleanControllerBrokerDataRequestHeader,
    ElectMasterRequestHeader,
    ElectMasterResponseBody,
    GetNextBrokerIdRequestHeader,
    GetReplicaInfoRequestHeader,
    RegisterBrokerToControllerRequestHeader,
    SyncStateSet,
)
from aiorocketmq.protocol.controller import (
    ControllerResponseCode as Code,
)

CLUSTER, GROUP = "c1", "broker-a"


def h(result: ControllerResult) -> Any:
    """A result's response header (typed loosely: each request has its own)."""
    assert result.header is not None
    return result.header


@dataclass
class Live:
    epoch: int = 0
    max_offset: int = 0
    election_priority: int = 0


class World:
    """A replicas info whose results are applied at once, and a set of alive brokers."""

    def __init__(self, unclean: bool = False) -> None:
        self.state = ReplicasInfo(enable_elect_unclean_master=unclean)
        self.alive_ids: set[int] = set()
        self.live: dict[int, Live] = {}

    def alive(self, cluster: str, name: str, broker_id: int) -> bool:
        return broker_id in self.alive_ids

    def live_info(self, cluster: str, name: str, broker_id: int) -> Live | None:
        return self.live.get(broker_id, Live()) if broker_id in self.alive_ids else None

    def commit(self, result: ControllerResult) -> ControllerResult:
        self.state.apply_events(result.events)
        return result

    def apply_id(self, broker_id: int, addr: str | None = None, code: str | None = None) -> ControllerResult:
        addr = addr or f"10.0.0.{broker_id}:10911"
        header = ApplyBrokerIdRequestHeader(
            cluster_name=CLUSTER,
            broker_name=GROUP,
            applied_broker_id=broker_id,
            register_check_code=code or f"{addr};{1000 + broker_id}",
        )
        return self.commit(self.state.apply_broker_id(header))

    def register(self, broker_id: int, addr: str | None = None) -> ControllerResult:
        header = RegisterBrokerToControllerRequestHeader(
            cluster_name=CLUSTER,
            broker_name=GROUP,
            broker_id=broker_id,
            broker_address=addr or f"10.0.0.{broker_id}:10911",
        )
        return self.commit(self.state.register_broker(header, self.alive))

    def elect(self, broker_id: int = -1, designate: bool = False) -> ControllerResult:
        header = ElectMasterRequestHeader(
            cluster_name=CLUSTER, broker_name=GROUP, broker_id=broker_id, designate_elect=designate
        )
        return self.commit(self.state.elect_master(header, self.alive, self.live_info))

    def alter(self, members: set[int], master: int, master_epoch: int, sss_epoch: int) -> ControllerResult:
        header = AlterSyncStateSetRequestHeader(
            broker_name=GROUP, master_broker_id=master, master_epoch=master_epoch
        )
        body = SyncStateSet(sync_state_set=members, sync_state_set_epoch=sss_epoch)
        return self.commit(self.state.alter_sync_state_set(header, body, self.alive))

    def info(self) -> tuple[int | None, int, set[int], int]:
        s = self.state.sync_state_set_info_table[GROUP]
        return s.master_broker_id, s.master_epoch, set(s.sync_state_set), s.sync_state_set_epoch

    def group_of(self, *ids: int) -> None:
        for broker_id in ids:
            assert self.apply_id(broker_id).code == ResponseCode.SUCCESS
            self.alive_ids.add(broker_id)


def test_next_broker_id_and_apply() -> None:
    w = World()
    header = GetNextBrokerIdRequestHeader(cluster_name=CLUSTER, broker_name=GROUP)
    assert h(w.state.get_next_broker_id(header)).next_broker_id == 1
    # The first id of a group must be 1.
    refused = w.apply_id(2)
    assert refused.code == Code.CONTROLLER_BROKER_ID_INVALID and not refused.events
    assert "hasn't been registered in controller" in (refused.remark or "")
    assert w.apply_id(1).code == ResponseCode.SUCCESS
    assert h(w.state.get_next_broker_id(header)).next_broker_id == 2
    # The same broker retrying (same check code) gets its id again; another broker does not.
    assert w.apply_id(1).code == ResponseCode.SUCCESS
    assert w.apply_id(1, code="10.9.9.9:10911;5").code == Code.CONTROLLER_BROKER_ID_INVALID
    assert w.apply_id(2).code == ResponseCode.SUCCESS
    assert w.state.replica_info_table[GROUP].id_table() == {1: "10.0.0.1:10911", 2: "10.0.0.2:10911"}
    assert h(w.state.get_next_broker_id(header)).next_broker_id == 3


def test_register() -> None:
    w = World()
    assert w.register(1).code == Code.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED
    w.group_of(1)
    assert w.register(7).code == Code.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED
    ok = w.register(1)
    assert ok.code == ResponseCode.SUCCESS and ok.events == []
    assert h(ok).master_broker_id is None
    assert SyncStateSet.decode(ok.body or b"").sync_state_set_epoch == 0
    moved = w.register(1, "10.1.1.1:10911")
    assert [e["type"] for e in moved.events] == ["UPDATE_BROKER_ADDRESS"]
    assert w.state.replica_info_table[GROUP].address(1) == "10.1.1.1:10911"
    # With a live master, registering tells who it is.
    assert w.elect(1).code == ResponseCode.SUCCESS
    answer = h(w.register(1, "10.1.1.1:10911"))
    assert (answer.master_broker_id, answer.master_epoch, answer.sync_state_set_epoch) == (1, 1, 1)
    w.alive_ids.clear()
    assert h(w.register(1, "10.1.1.1:10911")).master_broker_id is None


def test_first_election_takes_whoever_asks() -> None:
    w = World()
    w.group_of(1, 2)
    w.alive_ids.clear()  # not even alive: the first broker asking becomes master
    result = w.elect(2)
    assert result.code == ResponseCode.SUCCESS
    header = h(result)
    assert (
        header.master_broker_id,
        header.master_address,
        header.master_epoch,
        header.sync_state_set_epoch,
    ) == (
        2,
        "10.0.0.2:10911",
        1,
        1,
    )
    body = ElectMasterResponseBody.decode(result.body or b"")
    assert body.sync_state_set == {2}
    assert body.broker_member_group is not None and body.broker_member_group.broker_addrs == {
        1: "10.0.0.1:10911",
        2: "10.0.0.2:10911",
    }
    assert w.info() == (2, 1, {2}, 1)


def test_master_still_exists() -> None:
    w = World()
    w.group_of(1, 2)
    w.elect(1)
    again = w.elect(2)
    assert again.code == Code.CONTROLLER_MASTER_STILL_EXIST and not again.events
    assert (h(again).master_broker_id, h(again).master_epoch) == (1, 1)
    assert ElectMasterResponseBody.decode(again.body or b"").broker_member_group is None


def test_failover_prefers_sync_state_set() -> None:
    w = World()
    w.group_of(1, 2, 3)
    w.elect(1)
    assert w.alter({1, 2}, master=1, master_epoch=1, sss_epoch=1).code == ResponseCode.SUCCESS
    w.alive_ids.discard(1)
    w.live[3] = Live(epoch=9, max_offset=999)  # better log, but not in sync: not eligible
    result = w.elect()
    assert result.code == ResponseCode.SUCCESS and h(result).master_broker_id == 2
    assert w.info() == (2, 2, {2}, 3)


def test_no_alive_replica_in_sync_state_set() -> None:
    w = World()
    w.group_of(1, 2)
    w.elect(1)
    w.alive_ids = {2}
    w.alive_ids.discard(1)
    # Not in the SyncStateSet and unclean elections are off: nobody.
    from_broker = w.elect(2)
    assert from_broker.code == Code.CONTROLLER_ELECT_MASTER_FAILED and not from_broker.events
    from_controller = w.elect(-1)
    assert from_controller.code == Code.CONTROLLER_MASTER_NOT_AVAILABLE
    assert from_controller.events == [
        {"type": ELECT_MASTER_EVENT, "brokerName": GROUP, "newMasterElected": False}
    ]
    # The master is gone, its epoch moves on, the SyncStateSet is kept.
    assert w.info() == (None, 2, {1}, 1)


def test_unclean_election() -> None:
    w = World(unclean=True)
    w.group_of(1, 2, 3)
    w.elect(1)
    w.alive_ids = {2, 3}
    w.live[2] = Live(epoch=1, max_offset=100)
    w.live[3] = Live(epoch=1, max_offset=200)
    result = w.elect()
    assert result.code == ResponseCode.SUCCESS and h(result).master_broker_id == 3


@pytest.mark.parametrize(
    ("lives", "winner"),
    [
        ({2: Live(2, 10, 5), 3: Live(1, 99, 0)}, 2),  # higher epoch first
        ({2: Live(1, 10, 0), 3: Live(1, 20, 9)}, 3),  # then larger max offset
        ({2: Live(1, 10, 3), 3: Live(1, 10, 1)}, 3),  # then lower priority value
        ({2: Live(1, 10, 1), 3: Live(1, 10, 1)}, 2),  # then the lower id
    ],
)
def test_election_order(lives: dict[int, Live], winner: int) -> None:
    w = World()
    w.group_of(1, 2, 3)
    w.elect(1)
    w.alter({1, 2, 3}, master=1, master_epoch=1, sss_epoch=1)
    w.alive_ids = {2, 3}
    w.live.update(lives)
    assert h(w.elect()).master_broker_id == winner


def test_designated_election() -> None:
    w = World()
    w.group_of(1, 2, 3)
    w.elect(1)
    w.alter({1, 2, 3}, master=1, master_epoch=1, sss_epoch=1)
    result = w.elect(3, designate=True)
    assert result.code == ResponseCode.SUCCESS and h(result).master_broker_id == 3
    w.alive_ids.discard(2)
    assert w.elect(2, designate=True).code == Code.CONTROLLER_ELECT_MASTER_FAILED
    # Designating the current master: it stays.
    assert w.elect(3, designate=True).code == Code.CONTROLLER_MASTER_STILL_EXIST


def test_elect_unknown_group() -> None:
    w = World()
    assert w.elect(1).code == Code.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED


def test_alter_sync_state_set_fencing() -> None:
    w = World()
    assert w.alter({1}, 1, 1, 1).code == Code.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED
    w.group_of(1, 2, 3)
    w.elect(1)  # master 1, epoch 1, SyncStateSet {1} epoch 1
    assert w.alter({1}, 1, 1, 1).code == Code.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED  # unchanged
    assert w.alter({1, 2}, 2, 1, 1).code == Code.CONTROLLER_INVALID_MASTER
    assert w.alter({1, 2}, 1, 0, 1).code == Code.CONTROLLER_FENCED_MASTER_EPOCH
    assert w.alter({1, 2}, 1, 1, 0).code == Code.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH
    assert w.alter({1, 9}, 1, 1, 1).code == Code.CONTROLLER_INVALID_REPLICAS
    w.alive_ids.discard(3)
    assert w.alter({1, 3}, 1, 1, 1).code == Code.CONTROLLER_BROKER_NOT_ALIVE
    assert w.alter({2}, 1, 1, 1).code == Code.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED  # drops the master
    ok = w.alter({1, 2}, 1, 1, 1)
    assert ok.code == ResponseCode.SUCCESS and h(ok).new_sync_state_set_epoch == 2
    assert SyncStateSet.decode(ok.body or b"") == SyncStateSet(sync_state_set={1, 2}, sync_state_set_epoch=2)
    assert w.info() == (1, 1, {1, 2}, 2)
    # A stale view (epoch 1) is fenced once the set moved on.
    assert w.alter({1}, 1, 1, 1).code == Code.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH


def test_replica_info_and_sync_state_data() -> None:
    w = World()
    missing = w.state.get_replica_info(GetReplicaInfoRequestHeader(broker_name=GROUP))
    assert missing.code == Code.CONTROLLER_BROKER_METADATA_NOT_EXIST
    w.group_of(1, 2)
    w.elect(1)
    info = w.state.get_replica_info(GetReplicaInfoRequestHeader(broker_name=GROUP))
    assert (h(info).master_broker_id, h(info).master_address, h(info).master_epoch) == (
        1,
        "10.0.0.1:10911",
        1,
    )
    w.alive_ids.discard(2)
    data = BrokerReplicasInfo.decode(w.state.get_sync_state_data([GROUP, "nope"], w.alive).body or b"")
    assert list(data.replicas_info_table) == [GROUP]
    group = data.replicas_info_table[GROUP]
    assert [(r.broker_id, r.alive) for r in group.in_sync_replicas] == [(1, True)]
    assert [(r.broker_id, r.alive) for r in group.not_in_sync_replicas] == [(2, False)]


def test_clean_broker_data() -> None:
    w = World()

    def clean(ids: str | None = None, living: bool = False) -> ControllerResult:
        header = CleanControllerBrokerDataRequestHeader(
            cluster_name=CLUSTER,
            broker_name=GROUP,
            broker_controller_ids_to_clean=ids,
            is_clean_living_broker=living,
        )
        return w.commit(w.state.clean_broker_data(header, w.alive))

    assert clean().code == Code.CONTROLLER_INVALID_CLEAN_BROKER_METADATA  # not existed
    w.group_of(1, 2, 3)
    w.elect(1)
    w.alter({1, 2, 3}, 1, 1, 1)
    assert "still alive" in (clean().remark or "")  # a master exists
    assert clean("2").code == Code.CONTROLLER_INVALID_CLEAN_BROKER_METADATA  # 2 alive
    assert "format" in (clean("x;2").remark or "")
    w.alive_ids.discard(3)
    assert clean("3").code == ResponseCode.SUCCESS
    assert set(w.state.replica_info_table[GROUP].broker_id_info) == {1, 2}
    assert w.info()[2] == {1, 2}
    assert clean(living=True).code == ResponseCode.SUCCESS
    assert not w.state.contains(GROUP)


def test_scan_need_reelect() -> None:
    w = World()
    w.group_of(1, 2)
    w.elect(1)
    assert w.state.scan_need_reelect_broker_sets(w.alive) == []
    w.alive_ids = {2}
    assert w.state.scan_need_reelect_broker_sets(w.alive) == [GROUP]
    w.alive_ids = set()
    assert w.state.scan_need_reelect_broker_sets(w.alive) == []


def test_snapshot_round_trip() -> None:
    w = World()
    w.group_of(1, 2)
    w.elect(1)
    w.alter({1, 2}, 1, 1, 1)
    copy = ReplicasInfo()
    copy.load_wire(w.state.to_wire())
    assert copy.to_wire() == w.state.to_wire()
    assert copy.replica_info_table[GROUP].check_code(2) == "10.0.0.2:10911;1002"


def test_heartbeats() -> None:
    now = [1_000_000]
    hb = BrokerHeartbeatManager(clock=lambda: now[0])
    channel = object()
    assert hb.on_heartbeat(CLUSTER, GROUP, "a:1", 1, 3_000, channel, epoch=1, max_offset=100)
    assert not hb.on_heartbeat(CLUSTER, GROUP, "a:1", 1, 3_000, channel, epoch=1, max_offset=50)
    info = hb.live_info(CLUSTER, GROUP, 1)
    assert info is not None and info.max_offset == 100  # never goes back
    hb.on_heartbeat(CLUSTER, GROUP, "a:1", 1, 3_000, channel, epoch=2, max_offset=10, election_priority=3)
    assert (info.epoch, info.max_offset, info.election_priority) == (2, 10, 3)
    now[0] += 3_000
    assert hb.is_active(CLUSTER, GROUP, 1) and hb.scan() == []
    now[0] += 1
    assert not hb.is_active(CLUSTER, GROUP, 1)
    assert [key for key, _ in hb.scan()] == [(CLUSTER, GROUP, 1)]
    # Without a timeout, 10 s; a closed connection ends it at once.
    hb.on_heartbeat(CLUSTER, GROUP, "b:1", 2, None, channel)
    now[0] += 10_000
    assert hb.is_active(CLUSTER, GROUP, 2)
    lost = hb.on_channel_closed(channel)
    assert lost is not None and lost[0] == (CLUSTER, GROUP, 2)
    assert not hb.is_active(CLUSTER, GROUP, 2)
