"""The controller's replicas info: a pure, deterministic state machine (no I/O, no clock).

Per broker group (one broker name) it keeps the broker ids handed out with their addresses
and register check codes, the master with its epoch, and the SyncStateSet with its epoch, as
Apache RocketMQ 5.3's ``ReplicasInfoManager`` (``BrokerReplicaInfo`` and ``SyncStateInfo``).

Each request is answered in two steps, as Apache's: a *compute* method checks the request
against the current state and returns a :class:`ControllerResult` (the response code, header
and body, and the events that would change the state); the events are then replicated (Raft)
and every replica *applies* them, in log order, with :meth:`ReplicasInfo.apply_event`. Events
are plain JSON-like dicts, so the Raft journal and snapshots do not depend on class names.

Liveness is not part of this state: each compute method that needs it takes an ``alive``
predicate ``(cluster, broker name, broker id) -> bool`` (the heartbeats a replica has seen)
and elections a ``live_info`` getter for the (epoch, max offset, priority) ordering.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from aiorocketmq.protocol.body import BrokerMemberGroup
from aiorocketmq.protocol.codes import ResponseCode
from aiorocketmq.protocol.controller import (
    FIRST_BROKER_CONTROLLER_ID,
    AlterSyncStateSetRequestHeader,
    AlterSyncStateSetResponseHeader,
    ApplyBrokerIdRequestHeader,
    ApplyBrokerIdResponseHeader,
    BrokerReplicasInfo,
    CleanControllerBrokerDataRequestHeader,
    ControllerResponseCode,
    ElectMasterRequestHeader,
    ElectMasterResponseBody,
    ElectMasterResponseHeader,
    GetNextBrokerIdRequestHeader,
    GetNextBrokerIdResponseHeader,
    GetReplicaInfoRequestHeader,
    GetReplicaInfoResponseHeader,
    RegisterBrokerToControllerRequestHeader,
    RegisterBrokerToControllerResponseHeader,
    ReplicaIdentity,
    SyncStateSet,
)
from aiorocketmq.protocol.controller import (
    ReplicasInfo as ReplicasInfoBody,
)
from aiorocketmq.protocol.headers import Header

Code = ControllerResponseCode

#: Event kinds (Apache's ``EventType`` names).
ALTER_SYNC_STATE_SET_EVENT = "ALTER_SYNC_STATE_SET_EVENT"
APPLY_BROKER_ID_EVENT = "APPLY_BROKER_ID_EVENT"
ELECT_MASTER_EVENT = "ELECT_MASTER_EVENT"
CLEAN_BROKER_DATA_EVENT = "CLEAN_BROKER_DATA_EVENT"
UPDATE_BROKER_ADDRESS = "UPDATE_BROKER_ADDRESS"

Event = dict[str, Any]
AlivePredicate = Callable[[str, str, int], bool]


class LiveInfo(Protocol):
    """What an election reads from a broker's last heartbeat."""

    @property
    def epoch(self) -> int: ...

    @property
    def max_offset(self) -> int: ...

    @property
    def election_priority(self) -> int: ...


LiveInfoGetter = Callable[[str, str, int], "LiveInfo | None"]


@dataclass
class ControllerResult:
    """A request's answer and the events that carry it out (Apache's ``ControllerResult``)."""

    header: Header | None = None
    code: int = ResponseCode.SUCCESS
    remark: str | None = None
    body: bytes | None = None
    events: list[Event] = field(default_factory=list)

    def refuse(self, code: int, remark: str) -> ControllerResult:
        self.code = code
        self.remark = remark
        return self


@dataclass
class BrokerReplicaInfo:
    """The broker ids of one group: id -> (address, register check code)."""

    cluster_name: str
    broker_name: str
    next_assign_broker_id: int = FIRST_BROKER_CONTROLLER_ID
    broker_id_info: dict[int, tuple[str, str]] = field(default_factory=dict)

    def add_broker(self, broker_id: int, address: str, check_code: str) -> None:
        self.broker_id_info[broker_id] = (address, check_code)
        # As Apache: one more id handed out, whatever id the broker applied for.
        self.next_assign_broker_id += 1

    def exists(self, broker_id: int | None) -> bool:
        return broker_id is not None and broker_id in self.broker_id_info

    def address(self, broker_id: int | None) -> str | None:
        if broker_id is None:
            return None
        entry = self.broker_id_info.get(broker_id)
        return entry[0] if entry is not None else None

    def check_code(self, broker_id: int) -> str | None:
        entry = self.broker_id_info.get(broker_id)
        return entry[1] if entry is not None else None

    def id_table(self) -> dict[int, str]:
        return {bid: entry[0] for bid, entry in sorted(self.broker_id_info.items())}

    def to_wire(self) -> dict[str, Any]:
        return {
            "clusterName": self.cluster_name,
            "brokerName": self.broker_name,
            "nextAssignBrokerId": self.next_assign_broker_id,
            "brokerIdInfo": [[bid, addr, code] for bid, (addr, code) in sorted(self.broker_id_info.items())],
        }

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> BrokerReplicaInfo:
        return cls(
            cluster_name=data["clusterName"],
            broker_name=data["brokerName"],
            next_assign_broker_id=int(data["nextAssignBrokerId"]),
            broker_id_info={int(b): (str(a), str(c)) for b, a, c in data["brokerIdInfo"]},
        )


@dataclass
class SyncStateInfo:
    """The master of one group, its epoch, the SyncStateSet and its epoch."""

    cluster_name: str
    broker_name: str
    master_epoch: int = 0
    sync_state_set_epoch: int = 0
    sync_state_set: set[int] = field(default_factory=set)
    master_broker_id: int | None = None

    def update_master(self, master: int | None) -> None:
        self.master_broker_id = master
        self.master_epoch += 1

    def update_sync_state_set(self, members: Iterable[int]) -> None:
        self.sync_state_set = set(members)
        self.sync_state_set_epoch += 1

    @property
    def first_time_for_elect(self) -> bool:
        return self.master_epoch == 0

    def to_wire(self) -> dict[str, Any]:
        return {
            "clusterName": self.cluster_name,
            "brokerName": self.broker_name,
            "masterEpoch": self.master_epoch,
            "syncStateSetEpoch": self.sync_state_set_epoch,
            "syncStateSet": sorted(self.sync_state_set),
            "masterBrokerId": self.master_broker_id,
        }

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> SyncStateInfo:
        master = data.get("masterBrokerId")
        return cls(
            cluster_name=data["clusterName"],
            broker_name=data["brokerName"],
            master_epoch=int(data["masterEpoch"]),
            sync_state_set_epoch=int(data["syncStateSetEpoch"]),
            sync_state_set={int(b) for b in data["syncStateSet"]},
            master_broker_id=int(master) if master is not None else None,
        )


# -- the election policy ---------------------------------------------------------------------


def elect(
    cluster: str,
    broker_name: str,
    sync_state_brokers: set[int] | None,
    all_replica_brokers: set[int] | None,
    old_master: int | None,
    prefer_broker_id: int | None,
    alive: AlivePredicate | None,
    live_info: LiveInfoGetter | None,
) -> int | None:
    """Apache's ``DefaultElectPolicy``: first among the alive members of the SyncStateSet,
    then (``all_replica_brokers`` given: ``enableElectUncleanMaster``) among every alive
    replica. The old master stays if alive and nobody is preferred; a preferred (designated)
    broker is taken if alive, else nobody; otherwise the highest (epoch, max offset), then the
    lowest election priority, then the lowest broker id."""
    for candidates in (sync_state_brokers, all_replica_brokers):
        if candidates is None:
            continue
        chosen = _try_elect(cluster, broker_name, candidates, old_master, prefer_broker_id, alive, live_info)
        if chosen is not None:
            return chosen
    return None


def _try_elect(
    cluster: str,
    broker_name: str,
    brokers: set[int],
    old_master: int | None,
    prefer: int | None,
    alive: AlivePredicate | None,
    live_info: LiveInfoGetter | None,
) -> int | None:
    if alive is not None:
        brokers = {b for b in brokers if alive(cluster, broker_name, b)}
    if not brokers:
        return None
    if old_master in brokers and (prefer is None or prefer == old_master):
        return old_master
    if prefer is not None:
        return prefer if prefer in brokers else None
    ordered = sorted(brokers)
    if live_info is not None:
        infos = [(b, live_info(cluster, broker_name, b)) for b in ordered]
        known = [(b, i) for b, i in infos if i is not None]
        if known:
            known.sort(key=lambda bi: (-bi[1].epoch, -bi[1].max_offset, bi[1].election_priority, bi[0]))
            return known[0][0]
    return ordered[0]


_LONG = re.compile(r"[+-]?\d+")


class ReplicasInfo:
    """Every broker group's replicas info (Apache's ``ReplicasInfoManager``)."""

    def __init__(self, *, enable_elect_unclean_master: bool = False) -> None:
        self.enable_elect_unclean_master = enable_elect_unclean_master
        self.replica_info_table: dict[str, BrokerReplicaInfo] = {}
        self.sync_state_set_info_table: dict[str, SyncStateInfo] = {}

    def contains(self, broker_name: str) -> bool:
        return broker_name in self.replica_info_table and broker_name in self.sync_state_set_info_table

    # -- requests ----------------------------------------------------------------------

    def alter_sync_state_set(
        self, request: AlterSyncStateSetRequestHeader, sync_state_set: SyncStateSet, alive: AlivePredicate
    ) -> ControllerResult:
        broker_name = request.broker_name
        result = ControllerResult(AlterSyncStateSetResponseHeader())
        if not self.contains(broker_name):
            return result.refuse(
                Code.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED, "Broker metadata is not existed"
            )
        new_set = set(sync_state_set.sync_state_set)
        info = self.sync_state_set_info_table[broker_name]
        replicas = self.replica_info_table[broker_name]
        if info.sync_state_set == new_set:
            return result.refuse(
                Code.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED,
                "The newSyncStateSet is equal with oldSyncStateSet, no needed to update syncStateSet",
            )
        if info.master_broker_id is None or info.master_broker_id != request.master_broker_id:
            return result.refuse(
                Code.CONTROLLER_INVALID_MASTER,
                "Rejecting alter syncStateSet request because the current leader is:"
                f"{{{_java(info.master_broker_id)}}}, not {{{request.master_broker_id}}}",
            )
        if request.master_epoch != info.master_epoch:
            return result.refuse(
                Code.CONTROLLER_FENCED_MASTER_EPOCH,
                "Rejecting alter syncStateSet request because the current master epoch is:"
                f"{{{info.master_epoch}}}, not {{{request.master_epoch}}}",
            )
        if sync_state_set.sync_state_set_epoch != info.sync_state_set_epoch:
            return result.refuse(
                Code.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH,
                "Rejecting alter syncStateSet request because the current syncStateSet epoch is:"
                f"{{{info.sync_state_set_epoch}}}, not {{{sync_state_set.sync_state_set_epoch}}}",
            )
        for replica in sorted(new_set):
            if not replicas.exists(replica):
                return result.refuse(
                    Code.CONTROLLER_INVALID_REPLICAS,
                    f"Rejecting alter syncStateSet request because the replicas {{{replica}}} don't exist",
                )
            if not alive(replicas.cluster_name, replicas.broker_name, replica):
                return result.refuse(
                    Code.CONTROLLER_BROKER_NOT_ALIVE,
                    f"Rejecting alter syncStateSet request because the replicas {{{replica}}} don't alive",
                )
        if info.master_broker_id not in new_set:
            return result.refuse(
                Code.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED,
                "Rejecting alter syncStateSet request because the newSyncStateSet don't contains origin "
                f"leader {{{info.master_broker_id}}}",
            )
        epoch = info.sync_state_set_epoch + 1
        result.header = AlterSyncStateSetResponseHeader(new_sync_state_set_epoch=epoch)
        result.body = SyncStateSet(sync_state_set=new_set, sync_state_set_epoch=epoch).encode()
        result.events.append(
            {
                "type": ALTER_SYNC_STATE_SET_EVENT,
                "brokerName": broker_name,
                "newSyncStateSet": sorted(new_set),
            }
        )
        return result

    def elect_master(
        self,
        request: ElectMasterRequestHeader,
        alive: AlivePredicate | None,
        live_info: LiveInfoGetter | None,
    ) -> ControllerResult:
        broker_name = request.broker_name
        broker_id: int | None = request.broker_id
        result = ControllerResult(ElectMasterResponseHeader())
        if not self.contains(broker_name):
            return result.refuse(
                Code.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED, "Broker hasn't been registered"
            )
        info = self.sync_state_set_info_table[broker_name]
        replicas = self.replica_info_table[broker_name]
        sync_state_set = set(info.sync_state_set)
        old_master = info.master_broker_id
        all_replicas = set(replicas.broker_id_info) if self.enable_elect_unclean_master else None
        new_master: int | None = None
        if info.first_time_for_elect:
            # Nobody was ever master here: whoever asks first becomes it.
            new_master = broker_id
        if new_master is None or new_master == -1:
            assigned = broker_id if request.designate_elect else None
            new_master = elect(
                replicas.cluster_name,
                replicas.broker_name,
                sync_state_set,
                all_replicas,
                old_master,
                assigned,
                alive,
                live_info,
            )
        if new_master is not None and new_master == old_master:
            result.header = ElectMasterResponseHeader(
                master_broker_id=old_master,
                master_address=replicas.address(old_master),
                master_epoch=info.master_epoch,
                sync_state_set_epoch=info.sync_state_set_epoch,
            )
            result.body = ElectMasterResponseBody(sync_state_set=sync_state_set).encode()
            return result.refuse(
                Code.CONTROLLER_MASTER_STILL_EXIST,
                f"The old master {old_master} is still alive, not need to elect new master for broker "
                f"{replicas.broker_name}",
            )
        if new_master is not None:
            result.header = ElectMasterResponseHeader(
                master_broker_id=new_master,
                master_address=replicas.address(new_master),
                master_epoch=info.master_epoch + 1,
                sync_state_set_epoch=info.sync_state_set_epoch + 1,
            )
            group = BrokerMemberGroup(
                cluster=replicas.cluster_name,
                broker_name=replicas.broker_name,
                broker_addrs=replicas.id_table(),
            )
            result.body = ElectMasterResponseBody(
                broker_member_group=group, sync_state_set={new_master}
            ).encode()
            result.events.append(
                {
                    "type": ELECT_MASTER_EVENT,
                    "brokerName": broker_name,
                    "newMasterElected": True,
                    "newMasterBrokerId": new_master,
                }
            )
            return result
        if broker_id is None or broker_id == -1:
            # Asked by the controller itself: the master is gone and nobody can replace it,
            # so the group is left without a master (the SyncStateSet is kept).
            result.events.append(
                {"type": ELECT_MASTER_EVENT, "brokerName": broker_name, "newMasterElected": False}
            )
            return result.refuse(
                Code.CONTROLLER_MASTER_NOT_AVAILABLE,
                "Old master has down and failed to elect a new broker master",
            )
        return result.refuse(Code.CONTROLLER_ELECT_MASTER_FAILED, "Failed to elect a new master")

    def get_next_broker_id(self, request: GetNextBrokerIdRequestHeader) -> ControllerResult:
        replicas = self.replica_info_table.get(request.broker_name)
        next_id = FIRST_BROKER_CONTROLLER_ID if replicas is None else replicas.next_assign_broker_id
        return ControllerResult(
            GetNextBrokerIdResponseHeader(
                cluster_name=request.cluster_name, broker_name=request.broker_name, next_broker_id=next_id
            )
        )

    def apply_broker_id(self, request: ApplyBrokerIdRequestHeader) -> ControllerResult:
        cluster, broker_name = request.cluster_name, request.broker_name
        broker_id = request.applied_broker_id
        check_code = request.register_check_code
        address = check_code.split(";")[0]
        result = ControllerResult(ApplyBrokerIdResponseHeader(cluster_name=cluster, broker_name=broker_name))
        event = {
            "type": APPLY_BROKER_ID_EVENT,
            "clusterName": cluster,
            "brokerName": broker_name,
            "brokerAddress": address,
            "newBrokerId": broker_id,
            "registerCheckCode": check_code,
        }
        replicas = self.replica_info_table.get(broker_name)
        if replicas is None:
            if broker_id == FIRST_BROKER_CONTROLLER_ID:
                result.events.append(event)
                return result
            return result.refuse(
                Code.CONTROLLER_BROKER_ID_INVALID,
                f"Broker-set: {broker_name} hasn't been registered in controller, but broker try to apply "
                f"brokerId: {broker_id}",
            )
        if not replicas.exists(broker_id) or check_code == replicas.check_code(broker_id):
            result.events.append(event)
            return result
        return result.refuse(
            Code.CONTROLLER_BROKER_ID_INVALID,
            f"Fail to apply brokerId: {broker_id} in broker-set: {broker_name}",
        )

    def register_broker(
        self, request: RegisterBrokerToControllerRequestHeader, alive: AlivePredicate
    ) -> ControllerResult:
        cluster, broker_name = request.cluster_name, request.broker_name
        broker_id, address = request.broker_id, request.broker_address
        result = ControllerResult(
            RegisterBrokerToControllerResponseHeader(cluster_name=cluster, broker_name=broker_name)
        )
        if not self.contains(broker_name):
            return result.refuse(
                Code.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED,
                f"Broker-set: {broker_name} hasn't been registered in controller",
            )
        replicas = self.replica_info_table[broker_name]
        info = self.sync_state_set_info_table[broker_name]
        if not replicas.exists(broker_id):
            return result.refuse(
                Code.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED,
                f"BrokerId: {broker_id} hasn't been registered in broker-set: {broker_name}",
            )
        master = info.master_broker_id
        if master is not None and alive(cluster, broker_name, master):
            result.header = RegisterBrokerToControllerResponseHeader(
                cluster_name=cluster,
                broker_name=broker_name,
                master_broker_id=master,
                master_address=replicas.address(master),
                master_epoch=info.master_epoch,
                sync_state_set_epoch=info.sync_state_set_epoch,
            )
        result.body = SyncStateSet(
            sync_state_set=set(info.sync_state_set), sync_state_set_epoch=info.sync_state_set_epoch
        ).encode()
        if address != replicas.address(broker_id):
            result.events.append(
                {
                    "type": UPDATE_BROKER_ADDRESS,
                    "clusterName": cluster,
                    "brokerName": broker_name,
                    "brokerAddress": address,
                    "brokerId": broker_id,
                }
            )
        return result

    def get_replica_info(self, request: GetReplicaInfoRequestHeader) -> ControllerResult:
        broker_name = request.broker_name
        result = ControllerResult(GetReplicaInfoResponseHeader())
        if not self.contains(broker_name):
            return result.refuse(Code.CONTROLLER_BROKER_METADATA_NOT_EXIST, "Broker metadata is not existed")
        info = self.sync_state_set_info_table[broker_name]
        replicas = self.replica_info_table[broker_name]
        result.header = GetReplicaInfoResponseHeader(
            master_broker_id=info.master_broker_id,
            master_address=replicas.address(info.master_broker_id),
            master_epoch=info.master_epoch,
        )
        result.body = SyncStateSet(
            sync_state_set=set(info.sync_state_set), sync_state_set_epoch=info.sync_state_set_epoch
        ).encode()
        return result

    def get_sync_state_data(self, broker_names: list[str], alive: AlivePredicate) -> ControllerResult:
        table: dict[str, ReplicasInfoBody] = {}
        for broker_name in broker_names:
            if not self.contains(broker_name):
                continue
            info = self.sync_state_set_info_table[broker_name]
            replicas = self.replica_info_table[broker_name]
            in_sync: list[ReplicaIdentity] = []
            not_in_sync: list[ReplicaIdentity] = []
            for broker_id, address in replicas.id_table().items():
                replica = ReplicaIdentity(
                    broker_name=broker_name,
                    broker_id=broker_id,
                    broker_address=address,
                    alive=alive(replicas.cluster_name, broker_name, broker_id),
                )
                (in_sync if broker_id in info.sync_state_set else not_in_sync).append(replica)
            table[broker_name] = ReplicasInfoBody(
                master_broker_id=info.master_broker_id,
                master_address=replicas.address(info.master_broker_id),
                master_epoch=info.master_epoch,
                sync_state_set_epoch=info.sync_state_set_epoch,
                in_sync_replicas=in_sync,
                not_in_sync_replicas=not_in_sync,
            )
        return ControllerResult(body=BrokerReplicasInfo(replicas_info_table=table).encode())

    def clean_broker_data(
        self, request: CleanControllerBrokerDataRequestHeader, alive: AlivePredicate
    ) -> ControllerResult:
        cluster = request.cluster_name or ""
        broker_name = request.broker_name
        ids_text = request.broker_controller_ids_to_clean
        result = ControllerResult()
        ids: list[int] | None = None
        if not request.is_clean_living_broker:
            info = self.sync_state_set_info_table.get(broker_name)
            if _blank(ids_text) and info is not None and info.master_broker_id is not None:
                return result.refuse(
                    Code.CONTROLLER_INVALID_CLEAN_BROKER_METADATA,
                    f"Broker {broker_name} is still alive, clean up failure",
                )
            if not _blank(ids_text):
                assert ids_text is not None
                parts = ids_text.split(";")
                bad = next((p for p in parts if not _LONG.fullmatch(p)), None)
                if bad is not None:
                    return result.refuse(
                        Code.CONTROLLER_INVALID_CLEAN_BROKER_METADATA,
                        "Please set the option <brokerControllerIdsToClean> according to the format, exception: "
                        f'java.lang.NumberFormatException: For input string: "{bad}"',
                    )
                ids = sorted({int(p) for p in parts})
                for broker_id in ids:
                    if alive(cluster, broker_name, broker_id):
                        return result.refuse(
                            Code.CONTROLLER_INVALID_CLEAN_BROKER_METADATA,
                            f"Broker [{broker_name},  {broker_id}] is still alive, clean up failure",
                        )
        if self.contains(broker_name):
            result.events.append(
                {"type": CLEAN_BROKER_DATA_EVENT, "brokerName": broker_name, "brokerIdSetToClean": ids}
            )
            return result
        return result.refuse(
            Code.CONTROLLER_INVALID_CLEAN_BROKER_METADATA,
            f"Broker {broker_name} is not existed,clean broker data failure.",
        )

    def scan_need_reelect_broker_sets(self, alive: AlivePredicate) -> list[str]:
        """Groups whose master is not alive while another of their brokers is."""
        found = []
        for broker_name, info in self.sync_state_set_info_table.items():
            master = info.master_broker_id
            if master is None or alive(info.cluster_name, broker_name, master):
                continue
            replicas = self.replica_info_table.get(broker_name)
            if replicas is None:
                continue
            if any(alive(info.cluster_name, broker_name, b) for b in replicas.broker_id_info):
                found.append(broker_name)
        return found

    # -- events ------------------------------------------------------------------------

    def apply_event(self, event: Event) -> None:
        kind = event.get("type")
        broker_name = str(event.get("brokerName"))
        if kind == ALTER_SYNC_STATE_SET_EVENT:
            if self.contains(broker_name):
                self.sync_state_set_info_table[broker_name].update_sync_state_set(event["newSyncStateSet"])
        elif kind == APPLY_BROKER_ID_EVENT:
            broker_id = int(event["newBrokerId"])
            if self.contains(broker_name):
                replicas = self.replica_info_table[broker_name]
                if not replicas.exists(broker_id):
                    replicas.add_broker(broker_id, event["brokerAddress"], event["registerCheckCode"])
            else:
                cluster = event["clusterName"]
                replicas = BrokerReplicaInfo(cluster, broker_name)
                replicas.add_broker(broker_id, event["brokerAddress"], event["registerCheckCode"])
                self.replica_info_table[broker_name] = replicas
                self.sync_state_set_info_table[broker_name] = SyncStateInfo(cluster, broker_name)
        elif kind == ELECT_MASTER_EVENT:
            if not self.contains(broker_name):
                return
            info = self.sync_state_set_info_table[broker_name]
            if event.get("newMasterElected"):
                master = int(event["newMasterBrokerId"])
                info.update_master(master)
                info.update_sync_state_set({master})
            else:
                info.update_master(None)
        elif kind == CLEAN_BROKER_DATA_EVENT:
            ids = event.get("brokerIdSetToClean")
            if not ids:
                self.replica_info_table.pop(broker_name, None)
                self.sync_state_set_info_table.pop(broker_name, None)
                return
            if not self.contains(broker_name):
                return
            replicas = self.replica_info_table[broker_name]
            info = self.sync_state_set_info_table[broker_name]
            for broker_id in ids:
                replicas.broker_id_info.pop(int(broker_id), None)
                info.sync_state_set.discard(int(broker_id))
            if not replicas.broker_id_info:
                del self.replica_info_table[broker_name]
            if not info.sync_state_set:
                del self.sync_state_set_info_table[broker_name]
        elif kind == UPDATE_BROKER_ADDRESS:
            replicas_or_none = self.replica_info_table.get(broker_name)
            broker_id = int(event["brokerId"])
            if replicas_or_none is not None and broker_id in replicas_or_none.broker_id_info:
                _, code = replicas_or_none.broker_id_info[broker_id]
                replicas_or_none.broker_id_info[broker_id] = (event["brokerAddress"], code)

    def apply_events(self, events: Iterable[Event]) -> None:
        for event in events:
            self.apply_event(event)

    # -- snapshots ---------------------------------------------------------------------

    def to_wire(self) -> dict[str, Any]:
        return {
            "replicaInfoTable": {k: v.to_wire() for k, v in sorted(self.replica_info_table.items())},
            "syncStateSetInfoTable": {
                k: v.to_wire() for k, v in sorted(self.sync_state_set_info_table.items())
            },
        }

    def load_wire(self, data: dict[str, Any]) -> None:
        self.replica_info_table = {
            k: BrokerReplicaInfo.from_wire(v) for k, v in data.get("replicaInfoTable", {}).items()
        }
        self.sync_state_set_info_table = {
            k: SyncStateInfo.from_wire(v) for k, v in data.get("syncStateSetInfoTable", {}).items()
        }


def _blank(text: str | None) -> bool:
    return text is None or not text.strip()


def _java(value: object) -> str:
    return "null" if value is None else str(value)
