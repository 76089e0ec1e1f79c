"""RocketMQ 5's controller protocol: what brokers, controllers and ``mqadmin`` exchange in
controller mode (docs/controller.md).

A controller keeps, per broker group (one broker name), the broker ids it handed out, the
current master with its *master epoch*, and the *SyncStateSet* (the replicas in sync with the
master) with its own epoch. Brokers register and heartbeat to the controller; the master asks
it to grow or shrink the SyncStateSet; when a master stops heartbeating the controller elects
another from the SyncStateSet and tells the group's brokers (NOTIFY_BROKER_ROLE_CHANGED).

Codes and wire names are Apache RocketMQ 5.3's; headers are :class:`Header` models, bodies
:class:`Body` models, so the broker, the controller, the SDK's admin and ``mqadmin`` all read
and write them from here.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Any

from pydantic import Field

from .body import Body, BrokerMemberGroup
from .headers import Header, Int32, Int64, WireBool


class ControllerRequestCode(IntEnum):
    """Request codes of controller mode (a controller, or a broker for 906-908 and 1007)."""

    BROKER_HEARTBEAT = 904
    NOTIFY_MIN_BROKER_ID_CHANGE = 905
    EXCHANGE_BROKER_HA_INFO = 906
    GET_BROKER_HA_STATUS = 907
    RESET_MASTER_FLUSH_OFFSET = 908
    CONTROLLER_ALTER_SYNC_STATE_SET = 1001
    CONTROLLER_ELECT_MASTER = 1002
    CONTROLLER_REGISTER_BROKER = 1003
    CONTROLLER_GET_REPLICA_INFO = 1004
    CONTROLLER_GET_METADATA_INFO = 1005
    CONTROLLER_GET_SYNC_STATE_DATA = 1006
    GET_BROKER_EPOCH_CACHE = 1007
    NOTIFY_BROKER_ROLE_CHANGED = 1008
    UPDATE_CONTROLLER_CONFIG = 1009
    GET_CONTROLLER_CONFIG = 1010
    CLEAN_BROKER_DATA = 1011
    CONTROLLER_GET_NEXT_BROKER_ID = 1012
    CONTROLLER_APPLY_BROKER_ID = 1013


class ControllerResponseCode(IntEnum):
    """A controller's refusals (Apache's numbers)."""

    CONTROLLER_FENCED_MASTER_EPOCH = 2000
    CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH = 2001
    CONTROLLER_INVALID_MASTER = 2002
    CONTROLLER_INVALID_REPLICAS = 2003
    CONTROLLER_MASTER_NOT_AVAILABLE = 2004
    CONTROLLER_INVALID_REQUEST = 2005
    CONTROLLER_BROKER_NOT_ALIVE = 2006
    CONTROLLER_NOT_LEADER = 2007
    CONTROLLER_BROKER_METADATA_NOT_EXIST = 2008
    CONTROLLER_INVALID_CLEAN_BROKER_METADATA = 2009
    CONTROLLER_BROKER_NEED_TO_BE_REGISTERED = 2010
    CONTROLLER_MASTER_STILL_EXIST = 2011
    CONTROLLER_ELECT_MASTER_FAILED = 2012
    CONTROLLER_ALTER_SYNC_STATE_SET_FAILED = 2013
    CONTROLLER_BROKER_ID_INVALID = 2014
    CONTROLLER_JRAFT_INTERNAL_ERROR = 2015
    CONTROLLER_BROKER_LIVE_INFO_NOT_EXISTS = 2016


#: The broker id a group's master registers with at the name servers, whatever its
#: controller-assigned id (Apache's ``MixAll.MASTER_ID``).
MASTER_ID = 0
#: The first id a controller hands out in a group (Apache's ``MixAll.FIRST_BROKER_CONTROLLER_ID``).
FIRST_BROKER_CONTROLLER_ID = 1
#: ``brokerId`` in a broker's config that asks the controller for one.
BROKER_ID_FROM_CONTROLLER = -1


# -- registration ---------------------------------------------------------------------------


class GetNextBrokerIdRequestHeader(Header):
    cluster_name: str = Field(alias="clusterName")
    broker_name: str = Field(alias="brokerName")


class GetNextBrokerIdResponseHeader(Header):
    cluster_name: str | None = Field(None, alias="clusterName")
    broker_name: str | None = Field(None, alias="brokerName")
    next_broker_id: Int64 | None = Field(None, alias="nextBrokerId")


class ApplyBrokerIdRequestHeader(Header):
    cluster_name: str = Field(alias="clusterName")
    broker_name: str = Field(alias="brokerName")
    applied_broker_id: Int64 = Field(alias="appliedBrokerId")
    #: ``<broker address>;<millis>``: the broker's proof that an id is its own on a retry.
    register_check_code: str = Field(alias="registerCheckCode")


class ApplyBrokerIdResponseHeader(Header):
    cluster_name: str | None = Field(None, alias="clusterName")
    broker_name: str | None = Field(None, alias="brokerName")


class RegisterBrokerToControllerRequestHeader(Header):
    cluster_name: str = Field(alias="clusterName")
    broker_name: str = Field(alias="brokerName")
    broker_id: Int64 = Field(alias="brokerId")
    broker_address: str = Field(alias="brokerAddress")
    invoke_time: Int64 = Field(0, alias="invokeTime")


class ReplicaStateHeader(Header):
    """The group's master as a controller answers it (register, replica info, election)."""

    master_broker_id: Int64 | None = Field(None, alias="masterBrokerId")
    master_address: str | None = Field(None, alias="masterAddress")
    master_epoch: Int32 | None = Field(None, alias="masterEpoch")


class RegisterBrokerToControllerResponseHeader(ReplicaStateHeader):
    cluster_name: str | None = Field(None, alias="clusterName")
    broker_name: str | None = Field(None, alias="brokerName")
    sync_state_set_epoch: Int32 | None = Field(None, alias="syncStateSetEpoch")


class BrokerHeartbeatRequestHeader(Header):
    """BROKER_HEARTBEAT to a controller (and, in 5.x, to the name servers)."""

    cluster_name: str = Field(alias="clusterName")
    broker_addr: str = Field(alias="brokerAddr")
    broker_name: str = Field(alias="brokerName")
    broker_id: Int64 | None = Field(None, alias="brokerId")
    epoch: Int32 | None = None
    max_offset: Int64 | None = Field(None, alias="maxOffset")
    confirm_offset: Int64 | None = Field(None, alias="confirmOffset")
    heartbeat_timeout_millis: Int64 | None = Field(None, alias="heartbeatTimeoutMills")
    election_priority: Int32 | None = Field(None, alias="electionPriority")


# -- replicas -------------------------------------------------------------------------------


class GetReplicaInfoRequestHeader(Header):
    broker_name: str = Field(alias="brokerName")


class GetReplicaInfoResponseHeader(ReplicaStateHeader):
    pass


class AlterSyncStateSetRequestHeader(Header):
    broker_name: str = Field(alias="brokerName")
    master_broker_id: Int64 = Field(alias="masterBrokerId")
    master_epoch: Int32 = Field(alias="masterEpoch")
    invoke_time: Int64 = Field(0, alias="invokeTime")


class AlterSyncStateSetResponseHeader(Header):
    new_sync_state_set_epoch: Int32 = Field(0, alias="newSyncStateSetEpoch")


class ElectMasterRequestHeader(Header):
    """CONTROLLER_ELECT_MASTER: from a broker (``brokerId`` = itself, asking to be master), from
    ``mqadmin electMaster`` (``designateElect``), or from the controller itself (``brokerId`` -1)."""

    cluster_name: str = Field("", alias="clusterName")
    broker_name: str = Field("", alias="brokerName")
    broker_id: Int64 = Field(-1, alias="brokerId")
    designate_elect: WireBool = Field(False, alias="designateElect")
    invoke_time: Int64 = Field(0, alias="invokeTime")


class ElectMasterResponseHeader(ReplicaStateHeader):
    sync_state_set_epoch: Int32 | None = Field(None, alias="syncStateSetEpoch")


class NotifyBrokerRoleChangedRequestHeader(Header):
    """NOTIFY_BROKER_ROLE_CHANGED, from a controller to each broker of a group."""

    master_address: str | None = Field(None, alias="masterAddress")
    master_epoch: Int32 | None = Field(None, alias="masterEpoch")
    sync_state_set_epoch: Int32 | None = Field(None, alias="syncStateSetEpoch")
    master_broker_id: Int64 | None = Field(None, alias="masterBrokerId")


class CleanControllerBrokerDataRequestHeader(Header):
    cluster_name: str | None = Field(None, alias="clusterName")
    broker_name: str = Field(alias="brokerName")
    #: ``;``-separated broker ids; empty means every broker of the group.
    broker_controller_ids_to_clean: str | None = Field(None, alias="brokerControllerIdsToClean")
    is_clean_living_broker: WireBool = Field(False, alias="isCleanLivingBroker")
    invoke_time: Int64 = Field(0, alias="invokeTime")


class GetMetaDataResponseHeader(Header):
    """CONTROLLER_GET_METADATA_INFO: who leads the controllers."""

    group: str | None = None
    controller_leader_id: str | None = Field(None, alias="controllerLeaderId")
    controller_leader_address: str | None = Field(None, alias="controllerLeaderAddress")
    is_leader: WireBool = Field(False, alias="isLeader")
    #: ``id:host:port;`` of every controller replica, one after another.
    peers: str | None = None


class ExchangeHAInfoRequestHeader(Header):
    master_ha_address: str | None = Field(None, alias="masterHaAddress")
    master_flush_offset: Int64 | None = Field(None, alias="masterFlushOffset")
    master_address: str | None = Field(None, alias="masterAddress")


class ExchangeHAInfoResponseHeader(ExchangeHAInfoRequestHeader):
    pass


class ResetMasterFlushOffsetHeader(Header):
    master_flush_offset: Int64 | None = Field(None, alias="masterFlushOffset")


# -- bodies ---------------------------------------------------------------------------------


class SyncStateSet(Body):
    """CONTROLLER_ALTER_SYNC_STATE_SET's request body and answer."""

    sync_state_set: set[int] = Field(default_factory=set, alias="syncStateSet")
    sync_state_set_epoch: int = Field(0, alias="syncStateSetEpoch")

    def to_wire(self) -> dict[str, Any]:
        return {"syncStateSet": sorted(self.sync_state_set), "syncStateSetEpoch": self.sync_state_set_epoch}


class ElectMasterResponseBody(Body):
    broker_member_group: BrokerMemberGroup | None = Field(None, alias="brokerMemberGroup")
    sync_state_set: set[int] = Field(default_factory=set, alias="syncStateSet")

    def to_wire(self) -> dict[str, Any]:
        # fastjson's order: alphabetical
        wire: dict[str, Any] = {}
        if self.broker_member_group is not None:
            wire["brokerMemberGroup"] = self.broker_member_group.to_wire()
        wire["syncStateSet"] = sorted(self.sync_state_set)
        return wire


class ReplicaIdentity(Body):
    broker_name: str | None = Field(None, alias="brokerName")
    broker_id: int | None = Field(None, alias="brokerId")
    broker_address: str | None = Field(None, alias="brokerAddress")
    alive: bool | None = None


class ReplicasInfo(Body):
    master_broker_id: int | None = Field(None, alias="masterBrokerId")
    master_address: str | None = Field(None, alias="masterAddress")
    master_epoch: int | None = Field(None, alias="masterEpoch")
    sync_state_set_epoch: int | None = Field(None, alias="syncStateSetEpoch")
    in_sync_replicas: list[ReplicaIdentity] = Field(default_factory=list, alias="inSyncReplicas")
    not_in_sync_replicas: list[ReplicaIdentity] = Field(default_factory=list, alias="notInSyncReplicas")


class BrokerReplicasInfo(Body):
    """CONTROLLER_GET_SYNC_STATE_DATA's answer (``mqadmin getSyncStateSet``), by broker name."""

    replicas_info_table: dict[str, ReplicasInfo] = Field(default_factory=dict, alias="replicasInfoTable")


class EpochEntry(Body):
    """One master epoch and the commit-log range written under it (end open for the last)."""

    epoch: int
    start_offset: int = Field(alias="startOffset")
    end_offset: int = Field((1 << 63) - 1, alias="endOffset")


class EpochEntryCache(Body):
    """GET_BROKER_EPOCH_CACHE's answer (``mqadmin getBrokerEpoch``)."""

    cluster_name: str | None = Field(None, alias="clusterName")
    broker_name: str | None = Field(None, alias="brokerName")
    broker_id: int = Field(0, alias="brokerId")
    epoch_list: list[EpochEntry] = Field(default_factory=list, alias="epochList")
    max_offset: int = Field(0, alias="maxOffset")
