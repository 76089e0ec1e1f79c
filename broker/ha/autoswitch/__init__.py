"""Replication in controller mode: RocketMQ 5's auto-switch HA, byte-compatible with Apache
5.3's ``AutoSwitchHAService``, so an Apache broker can be the master or a slave of ours.

In controller mode no broker is configured master or slave: the controller says who the
master is and with which *master epoch*, and the broker switches its replication at run time
(:meth:`AutoSwitchReplication.change_to_master`, :meth:`~AutoSwitchReplication.change_to_slave`).
Each master epoch's share of the commit log is kept in the epoch file (:mod:`.epoch`); when a
slave connects, the two epoch lists show up to where both logs agree, and the slave cuts its own
back to there (an old master's messages the new one never had are dropped, with their consume-
queue and index entries, :mod:`.store_ops`) before it copies the rest. The master tracks which
slaves keep up: one that catches up is proposed for the *SyncStateSet* (the callback
:attr:`~AutoSwitchReplication.on_sync_state_set_expand`, which asks the controller), one that
falls behind for ``haMaxTimeSlaveNotCatchup`` is left out of
:meth:`~AutoSwitchReplication.maybe_shrink_sync_state_set`'s answer; a send that waits for its
message waits, with ``allAckInSyncStateSet``, for every member of the set
(:attr:`aiorocketmq.broker.store.MessageStore.replica`). The bytes on the HA port are in
:mod:`.wire`, the master's side in :mod:`.master`, the slave's in :mod:`.slave`.

Keys read from the store or broker settings when present (Apache's names; defaults Apache's):
``allAckInSyncStateSet`` (false), ``inSyncReplicas`` (1), ``minInSyncReplicas`` (1),
``haMaxTimeSlaveNotCatchup`` (15000 ms), ``syncFromLastFile`` (false), ``asyncLearner``
(false), ``storePathEpochFile`` (``{storePathRootDir}/epochFileCheckpoint``); the HA port is
``listenPort + 1`` and its guards (TLS, the signed handshake, the connection cap) are the
classic replication's (:mod:`aiorocketmq.broker.ha.security`), off by default as Apache has none.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from aiorocketmq.broker.store import BrokerRole, MessageStore, StoreConfig
from aiorocketmq.protocol.controller import EpochEntry
from aiorocketmq.protocol.loop import cancel_and_wait

from ...config import BrokerConfig
from ..security import HaSecurity
from . import store_ops
from .epoch import OPEN_END, Epoch, EpochFileCache, epoch_file_path
from .master import MasterSide, now_ms
from .owner import AutoSwitchSettings
from .slave import SlaveClient

__all__ = [
    "OPEN_END",
    "AutoSwitchReplication",
    "AutoSwitchSettings",
    "Epoch",
    "EpochFileCache",
    "MasterSide",
    "SlaveClient",
]

log = logging.getLogger(__name__)

#: How often the epoch file forgets the epochs of deleted commit-log files.
HOUSEKEEPING_SECONDS = 1.0


class AutoSwitchReplication:
    """A controller-mode broker's replication: neither master nor slave until told."""

    def __init__(self, config: BrokerConfig, store_config: StoreConfig, store: MessageStore) -> None:
        self.config = config
        self.store_config = store_config
        self.store = store
        self.settings = AutoSwitchSettings.from_configs(store_config, config)
        self.security = HaSecurity.from_config(config, master=True)
        self.epochs = EpochFileCache(epoch_file_path(store_config))
        self.epochs.load()
        #: This broker's id from the controller (set before the first change of role).
        self.local_broker_id: int = config.broker_id
        #: Called with the proposed SyncStateSet when a slave caught up (ask the controller).
        self.on_sync_state_set_expand: Callable[[set[int]], None] | None = None
        #: Called with the proposed SyncStateSet when an in-sync slave disconnected (Apache
        #: reports that to the controller at once, through the same listener); None: the
        #: expansion callback is called for it too.
        self.on_sync_state_set_shrink: Callable[[set[int]], None] | None = None
        self.master_side = MasterSide(self)
        # Consumers see only what every SyncStateSet member holds: the store dispatches up to
        # the confirm offset (on a slave, its master's), unless readUnCommitted=true.
        store.limit_dispatch(self.master_side.confirm_offset, on_held=self.master_side.wake)
        self.slave: SlaveClient | None = None
        #: The master epoch of the last role change.
        self.master_epoch = -1
        self.master_broker_id: int | None = None
        self._role: BrokerRole | None = None
        self._started_at_offset = -1
        self._min_offset_seen = -1
        self._housekeeping: asyncio.Task[None] | None = None
        self._listening = False

    # -- lifecycle ------------------------------------------------------------------------------

    @property
    def is_master(self) -> bool:
        return self._role is BrokerRole.SYNC_MASTER

    @property
    def is_slave(self) -> bool:
        return self._role is BrokerRole.SLAVE

    @property
    def port(self) -> int:
        """The HA port as opened (0 before :meth:`start`)."""
        return self.master_side.port

    async def start(self, host: str) -> None:
        """Open the HA port (``listenPort + 1``); the store must be running. Connections are
        served only while this broker is master."""
        store = self.store
        self._started_at_offset = store.commit_log_max_offset
        # The confirm offset the checkpoint kept (RocketMQ's confirmPhyOffset), until the
        # master (or this broker as master) says more.
        self.master_side.stored_confirm = (
            store.confirm_offset if store.dispatch_limited else store.commit_log_max_offset
        )
        store.add_arrival_listener(self.master_side.wake)
        try:
            await self.master_side.open(host, self.config.ha_listen_port)
            self._listening = True
        except OSError as exc:
            log.error(
                "cannot open the HA port %d (listenPort + 1): %s; no slave can replicate from this broker",
                self.config.ha_listen_port,
                exc,
            )
        self._housekeeping = asyncio.ensure_future(self._housekeep())

    async def stop(self) -> None:
        await cancel_and_wait(self._housekeeping)
        self._housekeeping = None
        await self._stop_slave()
        if self.store.replica is self.master_side:
            self.store.replica = None
        await self.master_side.close()
        self._role = None

    async def _stop_slave(self) -> None:
        if self.slave is not None:
            await self.slave.stop()
            self.slave = None

    async def _housekeep(self) -> None:
        while True:
            await asyncio.sleep(HOUSEKEEPING_SECONDS)
            minimum = self.store.commit_log_min_offset
            if minimum > self._min_offset_seen:
                if self._min_offset_seen >= 0:
                    # Files were deleted: their epochs go too (Apache: minPhyOffset - 1).
                    self.epochs.truncate_prefix_by_offset(minimum - 1)
                self._min_offset_seen = minimum

    def _own_reput_offset(self) -> None:
        """Make the store's ``reput_offset`` mean "dispatched up to" again before replicated
        bytes are appended or cut: a master's puts are dispatched as they are stored and do
        not move it (under the store's dispatch limit they do: nothing to do)."""
        store = self.store
        if store.dispatch_limited:
            return
        if self._role is BrokerRole.SYNC_MASTER or (
            self._role is None and store.commit_log_max_offset != self._started_at_offset
        ):
            store.reput_offset = store.commit_log_max_offset

    # -- role changes ---------------------------------------------------------------------------

    async def change_to_master(self, master_epoch: int) -> None:
        """Become the master of ``master_epoch``: stop copying, drop a torn tail of the
        replicated log, record the epoch as starting at the log's end, serve slaves, and
        make sends wait for them (``store.replica``). An epoch older than the last one
        recorded is refused (logged, nothing changes), as Apache's."""
        epochs = self.epochs
        store = self.store
        if master_epoch < epochs.last_epoch:
            log.warning(
                "master epoch %d < last epoch %d: not changing to master", master_epoch, epochs.last_epoch
            )
            return
        if self._role is BrokerRole.SYNC_MASTER:
            # Master again, under a new epoch (Apache's changeToMasterWhenLastRoleIsMaster).
            self._open_epoch(master_epoch)
            self.master_epoch = master_epoch
            log.info("master again, epoch %d; epochs %s", master_epoch, epochs.describe())
            return
        await self._stop_slave()
        self._own_reput_offset()
        cut = store_ops.truncate_invalid(store)
        side = self.master_side
        if cut >= 0:
            epochs.truncate_suffix_by_offset(cut)
            side.lower_confirm(cut)
        side.stored_confirm = side.compute_confirm_offset()
        self._open_epoch(master_epoch)
        self._role = BrokerRole.SYNC_MASTER
        self.master_epoch = master_epoch
        self.master_broker_id = self.local_broker_id
        side.activate()
        store.replica = side
        # What the new confirm offset covers becomes visible (RocketMQ waits for that dispatch).
        store.dispatch_confirmed()
        log.info(
            "changed to master: epoch %d, commit log ends at %d, confirm offset %d; epochs %s",
            master_epoch,
            store.commit_log_max_offset,
            side.confirm_offset(),
            epochs.describe(),
        )

    def _open_epoch(self, master_epoch: int) -> None:
        """Record ``master_epoch`` as starting at the log's end. When it is already the last
        epoch recorded (master again under the same epoch, after a restart say), its entry stays
        as it is: Apache cuts it and appends it again at the log's end, which would credit the
        epoch before it with this epoch's messages (a slave then copies them again)."""
        epochs = self.epochs
        if epochs.last_epoch == master_epoch:
            return
        epochs.append(master_epoch, self.store.commit_log_max_offset)

    async def change_to_slave(self, master_ha_address: str, master_epoch: int, master_broker_id: int) -> None:
        """Copy from the master whose HA port is ``master_ha_address`` (reconnecting until
        told otherwise); first, as every time it connects, the log is cut back to where it
        agrees with the master's. An epoch older than the last one recorded is refused."""
        if master_epoch < self.epochs.last_epoch:
            log.warning(
                "master epoch %d < last epoch %d: not changing to slave", master_epoch, self.epochs.last_epoch
            )
            return
        slave = self.slave
        if (
            self._role is BrokerRole.SLAVE
            and slave is not None
            and slave.master_address == master_ha_address
            and self.master_broker_id == master_broker_id
        ):
            self.master_epoch = master_epoch
            return
        side = self.master_side
        if self.store.replica is side:
            self.store.replica = None
        await side.deactivate()
        await self._stop_slave()
        self._own_reput_offset()
        self._role = BrokerRole.SLAVE
        self.master_epoch = master_epoch
        self.master_broker_id = master_broker_id
        self.slave = SlaveClient(self, master_ha_address, self.local_broker_id)
        self.slave.start()
        log.info(
            "changed to slave of broker %d at %s, epoch %d; epochs %s",
            master_broker_id,
            master_ha_address,
            master_epoch,
            self.epochs.describe(),
        )

    # -- the SyncStateSet -----------------------------------------------------------------------

    def set_sync_state_set(self, ids: set[int]) -> None:
        """The SyncStateSet the controller confirmed (or elected with)."""
        self.master_side.set_sync_state_set(ids)

    @property
    def sync_state_set(self) -> set[int]:
        """The SyncStateSet as last confirmed by the controller."""
        return set(self.master_side.local_sync_state_set)

    def maybe_shrink_sync_state_set(self) -> set[int]:
        """The SyncStateSet without the slaves that did not catch up within
        ``haMaxTimeSlaveNotCatchup`` or are not connected (to propose when it differs)."""
        return self.master_side.maybe_shrink()

    def in_sync_replicas_enough(self) -> bool:
        """Whether a send may be stored now: at least ``minInSyncReplicas`` in sync (Apache
        refuses it otherwise, IN_SYNC_REPLICAS_NOT_ENOUGH, before storing it)."""
        return self.master_side.in_sync_replicas_enough()

    # -- offsets and epochs ---------------------------------------------------------------------

    def confirm_offset(self) -> int:
        return self.master_side.confirm_offset()

    @property
    def last_epoch(self) -> int:
        return self.epochs.last_epoch

    def epoch_entries(self) -> list[EpochEntry]:
        return [entry.to_entry() for entry in self.epochs.entries()]

    # -- status ---------------------------------------------------------------------------------

    def ha_status(self) -> dict[str, object]:
        """GET_BROKER_HA_STATUS's body (Apache's ``HARuntimeInfo`` of its auto-switch service):
        a master's connections, in sync when their broker is in the SyncStateSet; or a slave's
        link. Transfer speeds are not measured and read 0."""
        store = self.store
        end = store.commit_log_max_offset
        side = self.master_side
        if self.is_master:
            members = side.local_sync_state_set
            links = sorted(side.links, key=lambda link: link.connected_at)
            return {
                "master": True,
                "masterCommitLogMaxOffset": end,
                "inSyncSlaveNums": max(len(members) - 1, 0),
                "haConnectionInfo": [
                    {
                        "addr": link.address,
                        "slaveAckOffset": link.ack_offset,
                        "diff": end - link.ack_offset,
                        "inSync": link.slave_id in members,
                        "transferredByteInSecond": 0,
                        "transferFromWhere": link.next_offset,
                    }
                    for link in links
                ],
                "haClientRuntimeInfo": {},
            }
        slave = self.slave
        return {
            "master": False,
            "masterCommitLogMaxOffset": 0,
            "inSyncSlaveNums": 0,
            "haConnectionInfo": [],
            "haClientRuntimeInfo": {
                "masterAddr": slave.master_address if slave else None,
                "transferredByteInSecond": 0,
                "maxOffset": end,
                "lastReadTimestamp": slave.last_read_ms if slave else 0,
                "lastWriteTimestamp": slave.last_write_ms if slave else 0,
                "masterFlushOffset": 0,
                "isActivated": bool(slave and slave.connected),
            },
        }

    def runtime_info(self) -> dict[str, str]:
        """What GET_BROKER_RUNTIME_INFO adds about replication."""
        store = self.store
        side = self.master_side
        info = {
            "brokerRole": self._role.value if self._role is not None else "",
            "masterEpoch": str(self.master_epoch),
            "epochEntries": self.epochs.describe(),
            "confirmOffset": str(self.confirm_offset()),
        }
        if self.is_master:
            end = store.commit_log_max_offset
            acks = [link.ack_offset for link in side.links if link.ack_offset >= 0]
            now = now_ms()
            info.update(
                {
                    "haConnectionCount": str(len(side.links)),
                    "commitLogDiff": str(end - max(acks) if acks else 0),
                    "haPush2SlaveMaxOffset": str(max(acks) if acks else 0),
                    "syncStateSet": ",".join(str(i) for i in sorted(side.local_sync_state_set)),
                    "inSyncReplicas": str(side.in_sync_replicas()),
                }
            )
            for i, link in enumerate(sorted(side.links, key=lambda link: link.connected_at)):
                caught = side.caught_up.get(link.slave_id)
                info[f"haSlave{i}"] = (
                    f"{link.address} brokerId={link.slave_id} ackOffset={link.ack_offset} "
                    f"lagBytes={max(0, end - link.ack_offset)} "
                    f"caughtUpMsAgo={now - caught if caught is not None else -1}"
                )
        elif self.slave is not None:
            info.update(self.slave.runtime_info())
        return info
