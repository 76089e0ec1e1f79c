"""High availability: RocketMQ's classic master/slave replication, wire-compatible with Apache's.

A master (ASYNC_MASTER or SYNC_MASTER) serves its commit log on the HA port (``listenPort + 1``,
:mod:`.master`); a SLAVE (``brokerId > 0``) copies it from there (:mod:`.slave`) and copies the
master's metadata over the remoting port every 10 s (:mod:`.slave_sync`). The byte format is
in :mod:`.wire`; what guards the HA port (the signed handshake, TLS, the connection cap and
the bound on unread bytes) in :mod:`.security`; docs/operations.md says how to run a pair.

In controller mode (``enableControllerMode=true``) the role is not configured: the broker
starts as a slave that takes no writes, and :mod:`aiorocketmq.broker.replicas` moves it
between master and slave at run time (:meth:`HighAvailability.become_master`,
:meth:`HighAvailability.become_slave`) over the auto-switch replication (:mod:`.autoswitch`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from aiorocketmq.broker.store import BrokerRole, MessageStore, StoreConfig
from aiorocketmq.protocol.headers import RegisterBrokerResponseHeader
from aiorocketmq.protocol.loop import cancel_and_wait
from aiorocketmq.protocol.message import split_address
from aiorocketmq.protocol.settings import ConfigError

from ..config import BrokerConfig
from ..delay import DelayService
from ..groups import GroupTable
from ..offsets import OffsetTable
from ..topics import TopicTable
from .master import ReplicationMaster
from .security import HaSecurity
from .slave import ReplicationSlave
from .slave_sync import MetadataSync

if TYPE_CHECKING:
    from ..replicas import AutoSwitch

__all__ = [
    "HaSecurity",
    "HighAvailability",
    "MetadataSync",
    "ReplicationMaster",
    "ReplicationSlave",
    "check_role",
    "set_store_role",
]

log = logging.getLogger(__name__)

#: How far behind the master's end a slave may be and still count as in sync for ``haStatus``
#: (Apache 5's ``haMaxGapNotInSync``, 256 MiB).
IN_SYNC_GAP = 256 * 1024 * 1024


def check_role(config: BrokerConfig, store_config: StoreConfig) -> None:
    """RocketMQ's start-up rule: a slave needs ``brokerId > 0``. In controller mode the
    controllers give the id and the role (``brokerId=-1``, ``brokerRole=SLAVE`` as Apache's
    examples set them; whatever is configured is replaced), but they must be reachable."""
    if config.enable_controller_mode:
        if not config.controller_addrs:
            raise ConfigError("enableControllerMode=true needs controllerAddr (host:port;host:port...)")
        return
    if store_config.broker_role is BrokerRole.SLAVE and config.broker_id <= 0:
        raise ConfigError(f"brokerRole=SLAVE needs brokerId > 0 (got {config.broker_id})")


def set_store_role(store: MessageStore, store_config: StoreConfig, *, slave: bool) -> None:
    """Controller mode: make a running store refuse puts (a slave's takes only replicated
    bytes) or take them, and correct consumers' offsets as a master does."""
    store._slave = slave
    store.is_slave = slave
    store.appender._slave = slave
    store.reader._correct_offsets = not slave or store_config.offset_check_in_slave


def ha_address(master_addr: str) -> str:
    """A master's HA address from its remoting address: the HA port is ``listenPort + 1``
    (ours always, Apache's by default)."""
    host, port = split_address(master_addr)
    return f"{host}:{port + 1}"


def _auto_switch(config: BrokerConfig, store_config: StoreConfig, store: MessageStore) -> AutoSwitch:
    from .autoswitch import AutoSwitchReplication  # type: ignore[attr-defined,unused-ignore]

    replication: AutoSwitch = AutoSwitchReplication(config, store_config, store)
    return replication


class HighAvailability:
    """The broker's replication role: the HA port of a master, or a slave's links."""

    def __init__(
        self,
        config: BrokerConfig,
        store_config: StoreConfig,
        store: MessageStore,
        *,
        topics: TopicTable,
        groups: GroupTable,
        offsets: OffsetTable,
        delay: DelayService,
        topics_changed: Callable[[], None],
        groups_changed: Callable[[], None],
        delay_changed: Callable[[], None],
    ) -> None:
        check_role(config, store_config)
        self.config = config
        self.store_config = store_config
        self.role = store_config.broker_role
        self.store = store
        self._topics = topics
        self.master: ReplicationMaster | None = None
        self.slave: ReplicationSlave | None = None
        self.sync: MetadataSync | None = None
        #: Controller mode: the auto-switch replication, whatever the role.
        self._auto: AutoSwitch | None = None
        self.controller_mode = config.enable_controller_mode
        #: Controller mode, as a slave: the master's HA address followed, its epoch and id.
        self._following: tuple[str, int, int] | None = None
        self._repointing: asyncio.Task[None] | None = None
        if self.controller_mode or self.role is BrokerRole.SLAVE:
            self.sync = MetadataSync(
                own_addr=config.broker_addr,
                topics=topics,
                groups=groups,
                offsets=offsets,
                delay=delay,
                topics_changed=topics_changed,
                groups_changed=groups_changed,
                delay_changed=delay_changed,
            )
        if self.controller_mode:
            # A slave until the controllers say otherwise.
            self.role = store_config.broker_role = BrokerRole.SLAVE
            set_store_role(store, store_config, slave=True)
            self._auto = _auto_switch(config, store_config, store)
            return
        security = HaSecurity.from_config(config, master=self.role is not BrokerRole.SLAVE)
        if self.role is BrokerRole.SLAVE:
            self.slave = ReplicationSlave(store, store_config, security)
        else:
            self.master = ReplicationMaster(
                store, store_config, sync=self.role is BrokerRole.SYNC_MASTER, security=security
            )
            if self.master.sync:
                store.replica = self.master

    @property
    def is_slave(self) -> bool:
        return self.role is BrokerRole.SLAVE

    @property
    def auto(self) -> AutoSwitch:
        """Controller mode's replication (only in controller mode)."""
        assert self._auto is not None, "not in controller mode"
        return self._auto

    async def become_master(self, master_epoch: int) -> None:
        """Controller mode: this broker is the group's master from ``master_epoch`` on. The
        replication switches first (it settles the log and opens the epoch); then the store
        takes writes."""
        if self.sync is not None:
            self.sync.master_addr = None
        self._following = None
        await self._repointed()
        await self.auto.change_to_master(master_epoch)
        set_store_role(self.store, self.store_config, slave=False)
        self.role = self.store_config.broker_role = BrokerRole.SYNC_MASTER

    async def become_slave(self, master_addr: str, master_epoch: int, master_broker_id: int) -> None:
        """Controller mode: copy from the master at ``master_addr`` (its remoting address; the
        log from its HA port, the metadata from the remoting port). Writes stop first."""
        set_store_role(self.store, self.store_config, slave=True)
        self.role = self.store_config.broker_role = BrokerRole.SLAVE
        ha_addr = ha_address(master_addr)
        self._following = (ha_addr, master_epoch, master_broker_id)
        await self._repointed()
        await self.auto.change_to_slave(ha_addr, master_epoch, master_broker_id)
        if self.sync is not None:
            self.sync.master_addr = master_addr
            self.sync.sync_soon()

    async def start(self, host: str) -> None:
        """Open the HA port (master) or start copying (slave); the store must be running."""
        if self._auto is not None:
            await self._auto.start(host)
        if self.master is not None:
            self.store.add_arrival_listener(self.master.wake)
            try:
                await self.master.start(host, self.config.ha_listen_port)
            except OSError as exc:
                # Like the VIP port: the broker serves clients all the same, but say loudly
                # that no slave can copy from it (a SYNC_MASTER answers SLAVE_NOT_AVAILABLE).
                log.error(
                    "cannot open the HA port %d (listenPort + 1): %s; no slave can replicate from this broker",
                    self.config.ha_listen_port,
                    exc,
                )
        if self.slave is not None:
            self.slave.start()
        if self.sync is not None:
            self.store.add_arrival_listener(self._replicated)
            self.sync.start()

    async def stop(self) -> None:
        await cancel_and_wait(self._repointing)
        if self._auto is not None:
            await self._auto.stop()
        if self.master is not None:
            await self.master.stop()
        if self.slave is not None:
            await self.slave.stop()
        if self.sync is not None:
            await self.sync.stop()

    def _replicated(self, topic: str, queue_id: int, next_offset: int, tags_code: int) -> None:
        if self.sync is not None and self._topics.get(topic) is None:
            self.sync.sync_soon()

    def registered(self, response: RegisterBrokerResponseHeader) -> None:
        """The name server's answer to a registration: a slave learns its master's addresses
        (in controller mode from the controllers instead)."""
        if self.controller_mode:
            self._master_ha_from_namesrv(response)
            return
        if self.slave is not None:
            self.slave.update_master_address(response.ha_server_addr)
        if self.sync is not None and response.master_addr:
            self.sync.master_addr = response.master_addr

    def _master_ha_from_namesrv(self, response: RegisterBrokerResponseHeader) -> None:
        """Controller mode: the master's HA address is taken as its ``listenPort + 1``; a name
        server that routes the same master (by remoting address) with another HA address
        (Apache's ``haListenPort`` set otherwise) is believed, as Apache's slaves do."""
        following = self._following
        if following is None or self.sync is None or not response.ha_server_addr:
            return
        if response.master_addr != self.sync.master_addr or response.ha_server_addr == following[0]:
            return
        _, epoch, master_id = following
        log.info("the master's HA address is %s (from the name server)", response.ha_server_addr)
        self._following = (response.ha_server_addr, epoch, master_id)
        self._repointing = asyncio.ensure_future(
            self.auto.change_to_slave(response.ha_server_addr, epoch, master_id)
        )

    async def _repointed(self) -> None:
        """Let a re-pointing to the name server's HA address finish before another change (the
        replication's role changes are not made to be interrupted)."""
        task = self._repointing
        self._repointing = None
        if task is not None and not task.done():
            try:
                await task
            except Exception:
                log.exception("re-pointing the replication to the master's HA address failed")

    def slave_lag(self) -> list[tuple[str, int]]:
        """Each connected slave's address and lag in bytes (a master; empty on a slave)."""
        if self._auto is not None:
            if self.role is BrokerRole.SLAVE:
                return []
            links = self._auto.ha_status().get("haConnectionInfo")
            if not isinstance(links, list):
                return []
            return [(str(link["addr"]), int(link["diff"])) for link in links if isinstance(link, dict)]
        if self.master is None:
            return []
        return [(s["address"], int(s["lagBytes"])) for s in self.master.slaves()]

    def ha_status(self) -> dict[str, object]:
        """GET_BROKER_HA_STATUS's body (Apache 5's ``HARuntimeInfo``, what ``mqadmin haStatus``
        prints): a master's slaves with their acknowledged offsets and lag, or a slave's link to
        its master. A slave within ``IN_SYNC_GAP`` bytes of the master's end counts as in sync.
        Transfer speeds are not measured here and read 0. In controller mode, the auto-switch
        replication's."""
        if self._auto is not None:
            return self._auto.ha_status()
        end = self.store.commit_log_max_offset
        if self.slave is None:
            links = sorted(self.master.links, key=lambda link: link.connected_at) if self.master else []
            connections = [
                {
                    "addr": link.address,
                    "slaveAckOffset": link.ack_offset,
                    "diff": end - max(link.ack_offset, 0),
                    "inSync": end - max(link.ack_offset, 0) <= IN_SYNC_GAP,
                    "transferredByteInSecond": 0,
                    "transferFromWhere": link.request_offset,
                }
                for link in links
            ]
            return {
                "master": True,
                "masterCommitLogMaxOffset": end,
                "inSyncSlaveNums": sum(1 for c in connections if c["inSync"]),
                "haConnectionInfo": connections,
                "haClientRuntimeInfo": {},
            }
        slave = self.slave
        return {
            "master": False,
            "masterCommitLogMaxOffset": 0,
            "inSyncSlaveNums": 0,
            "haConnectionInfo": [],
            "haClientRuntimeInfo": {
                "masterAddr": slave.master_address,
                "transferredByteInSecond": 0,
                "maxOffset": end,
                "lastReadTimestamp": slave.last_read_ms,
                "lastWriteTimestamp": slave.last_write_ms,
                "masterFlushOffset": 0,
                "isActivated": slave.connected,
            },
        }

    def runtime_info(self) -> dict[str, str]:
        """What GET_BROKER_RUNTIME_INFO adds about replication (``brokerStatus`` shows it)."""
        info = {"brokerRole": self.role.value}
        if self._auto is not None:
            info.update(self._auto.runtime_info())
            info["haMasterRemotingAddress"] = (self.sync.master_addr if self.sync else None) or ""
            return info
        if self.master is not None:
            info.update(self.master.runtime_info())
        if self.slave is not None:
            info.update(self.slave.runtime_info())
            info["haMasterRemotingAddress"] = (self.sync.master_addr if self.sync else None) or ""
        return info
