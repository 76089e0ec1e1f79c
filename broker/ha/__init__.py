"""High availability: RocketMQ's classic master/slave replication, wire-compatible with Apache's.

A master (ASYNC_MASTER or SYNC_MASTER) serves its commit log on the HA port (``listenPort + 1``,
:mod:`.master`); a SLAVE (``brokerId > 0``) copies it from there (:mod:`.slave`) and copies the
master's metadata over the remoting port every 10 s (:mod:`.slave_sync`). The byte format is
in :mod:`.wire`; what guards the HA port (the signed handshake, TLS, the connection cap and
the bound on unread bytes) in :mod:`.security`; docs/operations.md says how to run a pair.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from aiorocketmq.broker.store import BrokerRole, MessageStore, StoreConfig
from aiorocketmq.protocol.headers import RegisterBrokerResponseHeader
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

__all__ = [
    "HaSecurity",
    "HighAvailability",
    "MetadataSync",
    "ReplicationMaster",
    "ReplicationSlave",
    "check_role",
]

log = logging.getLogger(__name__)

#: How far behind the master's end a slave may be and still count as in sync for ``haStatus``
#: (Apache 5's ``haMaxGapNotInSync``, 256 MiB).
IN_SYNC_GAP = 256 * 1024 * 1024


def check_role(config: BrokerConfig, store_config: StoreConfig) -> None:
    """RocketMQ's start-up rule: a slave needs ``brokerId > 0``."""
    if store_config.broker_role is BrokerRole.SLAVE and config.broker_id <= 0:
        raise ConfigError(f"brokerRole=SLAVE needs brokerId > 0 (got {config.broker_id})")


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
        self.role = store_config.broker_role
        self.store = store
        self._topics = topics
        self.master: ReplicationMaster | None = None
        self.slave: ReplicationSlave | None = None
        self.sync: MetadataSync | None = None
        security = HaSecurity.from_config(config, master=self.role is not BrokerRole.SLAVE)
        if self.role is BrokerRole.SLAVE:
            self.slave = ReplicationSlave(store, store_config, security)
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
        else:
            self.master = ReplicationMaster(
                store, store_config, sync=self.role is BrokerRole.SYNC_MASTER, security=security
            )
            if self.master.sync:
                store.replica = self.master

    @property
    def is_slave(self) -> bool:
        return self.slave is not None

    async def start(self, host: str) -> None:
        """Open the HA port (master) or start copying (slave); the store must be running."""
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
        """The name server's answer to a registration: a slave learns its master's addresses."""
        if self.slave is not None:
            self.slave.update_master_address(response.ha_server_addr)
        if self.sync is not None and response.master_addr:
            self.sync.master_addr = response.master_addr

    def slave_lag(self) -> list[tuple[str, int]]:
        """Each connected slave's address and lag in bytes (a master; empty on a slave)."""
        if self.master is None:
            return []
        return [(s["address"], int(s["lagBytes"])) for s in self.master.slaves()]

    def ha_status(self) -> dict[str, object]:
        """GET_BROKER_HA_STATUS's body (Apache 5's ``HARuntimeInfo``, what ``mqadmin haStatus``
        prints): a master's slaves with their acknowledged offsets and lag, or a slave's link to
        its master. A slave within ``IN_SYNC_GAP`` bytes of the master's end counts as in sync.
        Transfer speeds are not measured here and read 0."""
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
        if self.master is not None:
            info.update(self.master.runtime_info())
        if self.slave is not None:
            info.update(self.slave.runtime_info())
            info["haMasterRemotingAddress"] = (self.sync.master_addr if self.sync else None) or ""
        return info
