"""Operator requests to the controllers of RocketMQ 5's controller mode (and to brokers for
their epochs), on top of :class:`~client.admin.Admin`.

Like Apache's admin, requests that only the controllers' leader can answer first ask the given
controller who leads (CONTROLLER_GET_METADATA_INFO) and then go to that leader, so any replica's
address will do.

::

    async with Admin("127.0.0.1:9876") as admin:
        info = await sync_state_data(admin, "127.0.0.1:9878", ["broker-a"])
        print(info.replicas_info_table["broker-a"].master_address)
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from aiorocketmq.protocol.command import RemotingCommand
from aiorocketmq.protocol.controller import (
    BrokerReplicasInfo,
    CleanControllerBrokerDataRequestHeader,
    ControllerRequestCode,
    ControllerResponseCode,
    ElectMasterRequestHeader,
    ElectMasterResponseBody,
    ElectMasterResponseHeader,
    EpochEntryCache,
    GetMetaDataResponseHeader,
)
from aiorocketmq.protocol.errors import BrokerError, MQError
from aiorocketmq.protocol.settings import read_properties

from .admin import Admin


class ControllerError(BrokerError):
    """A controller's refusal, named by its controller code (``CONTROLLER_NOT_LEADER(2007)``)."""

    def __str__(self) -> str:
        try:
            name = ControllerResponseCode(self.code).name
        except ValueError:
            return super().__str__()
        return f"{name}({self.code}): {self.remark}" if self.remark else f"{name}({self.code})"


async def _call(admin: Admin, addr: str, code: int, header: Any = None, body: bytes = b"") -> RemotingCommand:
    """``admin.instance.call``, a controller's refusal raised as :class:`ControllerError`."""
    try:
        return await admin.instance.call(addr, code, header, body)
    except BrokerError as exc:
        if exc.code in ControllerResponseCode._value2member_map_:
            raise ControllerError(exc.remark, code=exc.code) from exc
        raise


def _properties(updates: Mapping[str, str]) -> bytes:
    return "".join(f"{k}={v}\n" for k, v in updates.items()).encode()


async def controller_metadata(admin: Admin, controller_addr: str) -> GetMetaDataResponseHeader:
    """Who leads the controllers, as ``controller_addr`` sees it (CONTROLLER_GET_METADATA_INFO)."""
    response = await _call(admin, controller_addr, ControllerRequestCode.CONTROLLER_GET_METADATA_INFO)
    return GetMetaDataResponseHeader.from_fields(response.ext_fields)


async def controller_leader(admin: Admin, controller_addr: str) -> str:
    """The leading controller's address, learnt from any replica."""
    metadata = await controller_metadata(admin, controller_addr)
    if not metadata.controller_leader_address:
        raise MQError(f"the controller at {controller_addr} knows of no leader")
    return metadata.controller_leader_address


async def sync_state_data(
    admin: Admin, controller_addr: str, broker_names: Sequence[str]
) -> BrokerReplicasInfo:
    """Each broker group's master, epochs and replicas in and out of sync
    (CONTROLLER_GET_SYNC_STATE_DATA to the leader)."""
    leader = await controller_leader(admin, controller_addr)
    body = json.dumps(list(broker_names)).encode()
    response = await _call(admin, leader, ControllerRequestCode.CONTROLLER_GET_SYNC_STATE_DATA, None, body)
    return BrokerReplicasInfo.decode(response.body or b"{}")


async def elect_master(
    admin: Admin, controller_addr: str, cluster: str, broker_name: str, broker_id: int
) -> tuple[ElectMasterResponseHeader, ElectMasterResponseBody]:
    """Make ``broker_id`` the master of ``broker_name`` (an operator's designated election)."""
    leader = await controller_leader(admin, controller_addr)
    header = ElectMasterRequestHeader(
        cluster_name=cluster, broker_name=broker_name, broker_id=broker_id, designate_elect=True
    )
    response = await _call(admin, leader, ControllerRequestCode.CONTROLLER_ELECT_MASTER, header)
    body = ElectMasterResponseBody.decode(response.body) if response.body else ElectMasterResponseBody()
    return ElectMasterResponseHeader.from_fields(response.ext_fields), body


async def clean_broker_metadata(
    admin: Admin,
    controller_addr: str,
    broker_name: str,
    *,
    cluster: str | None = None,
    broker_ids: str | None = None,
    clean_living_broker: bool = False,
) -> None:
    """Forget brokers of a group at the controllers (CLEAN_BROKER_DATA to the leader);
    ``broker_ids`` is ``;``-separated, none meaning the whole group."""
    leader = await controller_leader(admin, controller_addr)
    header = CleanControllerBrokerDataRequestHeader(
        cluster_name=cluster,
        broker_name=broker_name,
        broker_controller_ids_to_clean=broker_ids,
        is_clean_living_broker=clean_living_broker,
    )
    await _call(admin, leader, ControllerRequestCode.CLEAN_BROKER_DATA, header)


async def controller_config(admin: Admin, controller_addrs: Sequence[str]) -> dict[str, dict[str, str]]:
    """Each controller's settings (GET_CONTROLLER_CONFIG), by address."""
    configs = {}
    for addr in controller_addrs:
        response = await _call(admin, addr, ControllerRequestCode.GET_CONTROLLER_CONFIG)
        configs[addr] = read_properties((response.body or b"").decode())
    return configs


async def update_controller_config(
    admin: Admin, controller_addrs: Sequence[str], updates: Mapping[str, str]
) -> None:
    """Change each controller's settings in memory (UPDATE_CONTROLLER_CONFIG)."""
    for addr in controller_addrs:
        await _call(admin, addr, ControllerRequestCode.UPDATE_CONTROLLER_CONFIG, None, _properties(updates))


async def broker_epochs(admin: Admin, broker_addr: str) -> EpochEntryCache:
    """A controller-mode broker's epochs and log end (GET_BROKER_EPOCH_CACHE)."""
    response = await _call(admin, broker_addr, ControllerRequestCode.GET_BROKER_EPOCH_CACHE)
    return EpochEntryCache.decode(response.body or b"{}")
