"""The controllers of a controller-mode cluster (RocketMQ 5) as the ``/controller`` page shows
them: each controller replica and who leads (CONTROLLER_GET_METADATA_INFO), each broker group's
master, epochs and replicas in and out of the SyncStateSet (CONTROLLER_GET_SYNC_STATE_DATA),
and each broker's epoch list (GET_BROKER_EPOCH_CACHE), through
:mod:`aiorocketmq.client.controller_admin`. As everywhere in the dashboard, nothing that fails
to answer breaks the page: its error is kept next to what it concerns.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from aiorocketmq.client import Admin
from aiorocketmq.client.controller_admin import (
    broker_epochs,
    controller_metadata,
    elect_master,
    sync_state_data,
)
from aiorocketmq.protocol.controller import (
    BrokerReplicasInfo,
    ElectMasterResponseHeader,
    EpochEntry,
    GetMetaDataResponseHeader,
)
from aiorocketmq.protocol.errors import BrokerError, MQError

from .cluster_access import ClusterAccess, describe

#: Failures shown instead of raised.
EXPECTED = (MQError, OSError, ValueError, TimeoutError)
#: Java's Long.MAX_VALUE: an epoch whose end is still open.
OPEN_END = (1 << 63) - 1


def split_addresses(text: str | None) -> list[str]:
    """``host:port;host:port`` (commas too) as a list, in order, without repeats."""
    found: list[str] = []
    for part in (text or "").replace(",", ";").split(";"):
        part = part.strip()
        if part and part not in found:
            found.append(part)
    return found


def parse_peers(text: str | None) -> list[tuple[str, str]]:
    """The ``peers`` of CONTROLLER_GET_METADATA_INFO (``id:host:port;...``) as (id, address)."""
    peers = []
    for item in (text or "").split(";"):
        item = item.strip()
        if not item:
            continue
        pid, sep, address = item.partition(":")
        peers.append((pid, address) if sep else ("", pid))
    return peers


@dataclass
class ControllerRow:
    address: str
    #: Given with --controller (else learnt from a controller's peers).
    configured: bool
    peer_id: str = ""
    metadata: GetMetaDataResponseHeader | None = None
    error: str | None = None

    @property
    def up(self) -> bool:
        return self.metadata is not None

    @property
    def is_leader(self) -> bool:
        return self.metadata is not None and bool(self.metadata.is_leader)


@dataclass
class Replica:
    broker_id: int
    address: str
    alive: bool
    in_sync: bool
    master: bool
    epochs: list[EpochEntry] = field(default_factory=list)
    max_offset: int | None = None
    epoch_error: str | None = None


@dataclass
class GroupView:
    broker_name: str
    cluster: str
    master_broker_id: int | None
    master_address: str | None
    master_epoch: int | None
    sync_state_set_epoch: int | None
    replicas: list[Replica]

    @property
    def in_sync(self) -> list[Replica]:
        return [r for r in self.replicas if r.in_sync]

    @property
    def not_in_sync(self) -> list[Replica]:
        return [r for r in self.replicas if not r.in_sync]


@dataclass
class ControllerView:
    controllers: list[ControllerRow]
    leader_id: str | None
    leader_address: str | None
    groups: list[GroupView]
    #: Broker names asked about that the controllers do not know.
    unknown: list[str]
    error: str | None = None


async def _metadata(admin: Admin, row: ControllerRow) -> None:
    try:
        row.metadata = await controller_metadata(admin, row.address)
    except EXPECTED as exc:
        row.error = describe(exc)


async def controller_rows(admin: Admin, configured: list[str]) -> list[ControllerRow]:
    """Every controller given, and every peer they name, with its metadata or its error."""
    rows = [ControllerRow(address, configured=True) for address in configured]
    await asyncio.gather(*(_metadata(admin, row) for row in rows))
    known = {row.address: row for row in rows}
    extra = []
    for row in rows:
        for pid, address in parse_peers(row.metadata.peers if row.metadata else None):
            if address in known:
                known[address].peer_id = known[address].peer_id or pid
            else:
                known[address] = ControllerRow(address, configured=False, peer_id=pid)
                extra.append(known[address])
    await asyncio.gather(*(_metadata(admin, row) for row in extra))
    return rows + extra


async def group_names(access: ClusterAccess) -> dict[str, str]:
    """Broker names known to the name servers (and seen before), with their clusters."""
    names = {name: cluster for cluster, name, _id in access.seen_brokers.values()}
    try:
        info = await access.admin.cluster_info()
    except EXPECTED:
        return names
    for cluster, brokers in info.cluster_addr_table.items():
        for name in brokers:
            names[name] = cluster
    return names


async def _fill_epochs(admin: Admin, replica: Replica) -> None:
    try:
        cache = await broker_epochs(admin, replica.address)
    except EXPECTED as exc:
        replica.epoch_error = describe(exc)
        return
    replica.epochs = list(cache.epoch_list)
    replica.max_offset = cache.max_offset


async def overview(access: ClusterAccess, configured: list[str], wanted: list[str]) -> ControllerView:
    """The controllers and the groups of the name servers' brokers plus ``wanted``."""
    admin = access.admin
    rows = await controller_rows(admin, configured)
    leader = next((r for r in rows if r.is_leader), None)
    informed = next((r for r in rows if r.metadata and r.metadata.controller_leader_address), None)
    leader_id = leader_address = None
    if leader is not None and leader.metadata is not None:
        leader_id, leader_address = leader.metadata.controller_leader_id or leader.peer_id, leader.address
    elif informed is not None and informed.metadata is not None:
        leader_id = informed.metadata.controller_leader_id
        leader_address = informed.metadata.controller_leader_address
    clusters = await group_names(access)
    names = sorted(set(clusters) | set(wanted))
    view = ControllerView(rows, leader_id, leader_address, [], [])
    if not names:
        return view
    info: BrokerReplicasInfo | None = None
    errors = []
    for row in [r for r in rows if r.up] or rows:
        try:
            info = await sync_state_data(admin, row.address, names)
            break
        except EXPECTED as exc:
            errors.append(f"{row.address}: {describe(exc)}")
    if info is None:
        view.error = "no controller answered with the SyncStateSets: " + "; ".join(errors)
        return view
    for name in names:
        replicas_info = info.replicas_info_table.get(name)
        if replicas_info is None:
            view.unknown.append(name)
            continue
        replicas = [
            Replica(
                broker_id=r.broker_id if r.broker_id is not None else -1,
                address=r.broker_address or "",
                alive=bool(r.alive),
                in_sync=in_sync,
                master=r.broker_id == replicas_info.master_broker_id,
            )
            for in_sync, listed in (
                (True, replicas_info.in_sync_replicas),
                (False, replicas_info.not_in_sync_replicas),
            )
            for r in listed
        ]
        replicas.sort(key=lambda r: r.broker_id)
        view.groups.append(
            GroupView(
                broker_name=name,
                cluster=clusters.get(name, ""),
                master_broker_id=replicas_info.master_broker_id,
                master_address=replicas_info.master_address,
                master_epoch=replicas_info.master_epoch,
                sync_state_set_epoch=replicas_info.sync_state_set_epoch,
                replicas=replicas,
            )
        )
    await asyncio.gather(*(_fill_epochs(admin, r) for g in view.groups for r in g.replicas if r.address))
    return view


async def elect(
    access: ClusterAccess, configured: list[str], cluster: str, broker_name: str, broker_id: int
) -> ElectMasterResponseHeader:
    """Make ``broker_id`` the master of ``broker_name`` through whichever controller answers
    (each finds the leader); the last failure is raised when none does."""
    last: Exception | None = None
    for address in configured:
        try:
            header, _body = await elect_master(access.admin, address, cluster, broker_name, broker_id)
            return header
        except EXPECTED as exc:
            last = exc
            # A controller's refusal (the broker is not alive, ...) is the answer; only a
            # controller that cannot be reached (or knows no leader) sends us to the next one.
            if isinstance(exc, BrokerError):
                raise
    if last is None:
        raise ValueError("no controller address: start mqdashboard with --controller")
    raise last
