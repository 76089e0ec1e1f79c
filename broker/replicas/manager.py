"""The ReplicasManager (see the package doc): start-up, registration, elections, role changes
and the SyncStateSet."""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable, Coroutine
from enum import Enum
from typing import Any

from aiorocketmq.protocol.codes import ResponseCode
from aiorocketmq.protocol.controller import (
    MASTER_ID,
    AlterSyncStateSetRequestHeader,
    ApplyBrokerIdRequestHeader,
    BrokerHeartbeatRequestHeader,
    ControllerRequestCode,
    ControllerResponseCode,
    ElectMasterRequestHeader,
    ElectMasterResponseBody,
    ElectMasterResponseHeader,
    EpochEntry,
    GetNextBrokerIdRequestHeader,
    GetNextBrokerIdResponseHeader,
    GetReplicaInfoRequestHeader,
    GetReplicaInfoResponseHeader,
    RegisterBrokerToControllerRequestHeader,
    RegisterBrokerToControllerResponseHeader,
    SyncStateSet,
)
from aiorocketmq.protocol.errors import MQError
from aiorocketmq.protocol.loop import cancel_and_wait, wait_event
from aiorocketmq.protocol.transport import Signer

from ..config import BrokerConfig
from .controllers import ControllerError, Controllers
from .identity import BrokerIdentityFile
from .roles import RoleSwitch

log = logging.getLogger(__name__)

#: Seconds between two attempts at the start-up sequence (Apache's ``RETRY_INTERVAL_SECOND``).
RETRY_INTERVAL = 5.0
#: Delay before the first periodic look at the group / the SyncStateSet (Apache's 3 s).
FIRST_PERIODIC_DELAY = 3.0
#: How often a configured domain name is resolved again (``fetchControllerAddrByDnsLookup``).
DNS_LOOKUP_PERIOD = 120.0


class State(Enum):
    INITIAL = "INITIAL"
    FIRST_TIME_SYNC_CONTROLLER_METADATA_DONE = "FIRST_TIME_SYNC_CONTROLLER_METADATA_DONE"
    REGISTER_TO_CONTROLLER_DONE = "REGISTER_TO_CONTROLLER_DONE"
    RUNNING = "RUNNING"
    SHUTDOWN = "SHUTDOWN"


class RegisterState(Enum):
    INITIAL = "INITIAL"
    CREATE_TEMP_METADATA_FILE_DONE = "CREATE_TEMP_METADATA_FILE_DONE"
    CREATE_METADATA_FILE_DONE = "CREATE_METADATA_FILE_DONE"
    REGISTERED = "REGISTERED"


class ReplicasManager:
    """One broker's membership of its group under the controllers (see the package doc)."""

    def __init__(self, config: BrokerConfig, role: RoleSwitch, *, signer: Signer | None = None) -> None:
        self.config = config
        self.role = role
        self.broker_address = config.broker_addr
        self.controllers = Controllers(config, signer=signer)
        self.state = State.INITIAL
        self.register_state = RegisterState.INITIAL
        identity = config.broker_identity_path
        self.metadata = BrokerIdentityFile(identity)
        self.temp_metadata = BrokerIdentityFile(identity.with_name(identity.name + "-temp"), temp=True)
        #: The id the controllers gave this broker (``brokerConfig.brokerId`` is 0 while master).
        self.broker_controller_id: int | None = None
        self.master_broker_id: int | None = None
        self.master_address = ""
        self.master_epoch = 0
        self.sync_state_set: set[int] = set()
        self.sync_state_set_epoch = 0
        #: Until the group has a master this broker neither registers with the name servers
        #: nor heartbeats on schedule (Apache's ``isIsolated``).
        self.fenced = True
        self._lock = asyncio.Lock()
        self._tasks: list[asyncio.Task[None]] = []
        self._check_task: asyncio.Task[None] | None = None
        self._background: set[asyncio.Task[Any]] = set()
        self._sync_soon = asyncio.Event()
        #: Set once the start-up sequence is done (the broker's role known).
        self.running = asyncio.Event()

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        """Begin the start-up sequence in the background; the broker keeps serving (as a fenced
        slave) until the group's master is known."""
        self.state = State.INITIAL
        await self.controllers.resolve()
        # Apache registers one listener for both: a caught-up slave (expand) and an in-sync
        # slave whose connection dropped (shrink, where the replication has that hook).
        auto = self.role.auto
        auto.on_sync_state_set_expand = self._change_proposed
        if hasattr(auto, "on_sync_state_set_shrink"):
            auto.on_sync_state_set_shrink = self._change_proposed
        self._tasks.append(asyncio.ensure_future(self._start_up()))
        if self.config.fetch_controller_addr_by_dns_lookup:
            self._tasks.append(
                asyncio.ensure_future(self._every(DNS_LOOKUP_PERIOD, self.controllers.resolve))
            )

    async def stop(self) -> None:
        self.state = State.SHUTDOWN
        self.register_state = RegisterState.INITIAL
        await cancel_and_wait(*self._tasks, self._check_task, *self._background)
        self._tasks.clear()
        self._check_task = None
        await self.controllers.close()

    async def _start_up(self) -> None:
        attempt = 0
        while not await self._start_basic_service():
            if self.state is State.SHUTDOWN:
                return
            attempt += 1
            log.warning(
                "controller mode: start-up not done (state %s), attempt %d; retrying",
                self.state.value,
                attempt,
            )
            await asyncio.sleep(RETRY_INTERVAL)
        log.info(
            "controller mode: running (broker id %s, master %s)",
            self.broker_controller_id,
            self.master_broker_id,
        )

    async def _start_basic_service(self) -> bool:
        if self.state is State.SHUTDOWN:
            return False
        if self.state is State.INITIAL:
            if not await self.controllers.find_leader():
                return False
            self.state = State.FIRST_TIME_SYNC_CONTROLLER_METADATA_DONE
            self._tasks.append(
                asyncio.ensure_future(
                    self._every(
                        self.config.sync_controller_metadata_period / 1000, self.controllers.update_leader
                    )
                )
            )
        if self.state is State.FIRST_TIME_SYNC_CONTROLLER_METADATA_DONE:
            for _ in range(5):
                if await self._register():
                    self.state = State.REGISTER_TO_CONTROLLER_DONE
                    log.info(
                        "controller mode: registered to the controller as broker %s",
                        self.broker_controller_id,
                    )
                    break
                # Other brokers of the group may be registering at the same moment.
                await asyncio.sleep(random.random())
            else:
                log.error("controller mode: registering to the controller failed 5 times")
                return False
        if self.state is State.REGISTER_TO_CONTROLLER_DONE:
            # The scheduled heartbeats skip a fenced broker: the controller must see this one
            # alive before it may elect it.
            self.send_heartbeats()
            if self.master_broker_id is None and not await self._elect():
                return False
            self.state = State.RUNNING
            self.fenced = False
            self.running.set()
        self._tasks.append(asyncio.ensure_future(self._heartbeat_periodically()))
        self._tasks.append(asyncio.ensure_future(self._sync_replica_info_periodically()))
        return True

    # -- heartbeats ---------------------------------------------------------------------

    def send_heartbeats(self) -> None:
        """BROKER_HEARTBEAT to every controller: this broker's last epoch, commit-log end,
        confirm offset and election priority, and how long the controller may wait for the next."""
        if self.broker_controller_id is None:
            return
        cfg = self.config
        auto = self.role.auto
        header = BrokerHeartbeatRequestHeader(
            cluster_name=cfg.broker_cluster_name,
            broker_addr=self.broker_address,
            broker_name=cfg.broker_name,
            broker_id=self.broker_controller_id,
            epoch=auto.last_epoch,
            max_offset=self.role.commit_log_max_offset(),
            confirm_offset=auto.confirm_offset(),
            heartbeat_timeout_millis=cfg.controller_heart_beat_timeout_mills,
            election_priority=cfg.broker_election_priority,
        )
        self.controllers.heartbeat(header.to_fields())

    async def _heartbeat_periodically(self) -> None:
        await asyncio.sleep(1.0)
        while True:
            if not self.fenced:
                self.send_heartbeats()
            await asyncio.sleep(self.config.broker_heartbeat_interval / 1000)

    # -- registration ---------------------------------------------------------------------

    async def _register(self) -> bool:
        cfg = self.config
        try:
            self._confirm_register_state()
            if not self._metadata_valid():
                log.error(
                    "controller mode: the broker id files under %s are for another broker; fix the config or the files",
                    self.metadata.path.parent,
                )
                return False
            if self.register_state is RegisterState.INITIAL:
                next_id = await self._next_broker_id()
                if next_id is None:
                    return False
                check_code = f"{self.broker_address};{int(time.time() * 1000)}"
                try:
                    self.temp_metadata.persist(cfg.broker_cluster_name, cfg.broker_name, next_id, check_code)
                except OSError as exc:
                    log.error("cannot write %s: %s", self.temp_metadata.path, exc)
                    self.temp_metadata.clear()
                    return False
                self.register_state = RegisterState.CREATE_TEMP_METADATA_FILE_DONE
                log.info("controller mode: applying for broker id %d", next_id)
            if self.register_state is RegisterState.CREATE_TEMP_METADATA_FILE_DONE:
                if not await self._apply_broker_id():
                    # Another broker took the id: start over with the next one.
                    self.temp_metadata.clear()
                    self.register_state = RegisterState.INITIAL
                    return False
                assert self.temp_metadata.broker_id is not None
                try:
                    self.metadata.persist(
                        cfg.broker_cluster_name, cfg.broker_name, self.temp_metadata.broker_id
                    )
                except OSError as exc:
                    log.error("cannot write %s: %s", self.metadata.path, exc)
                    self.metadata.clear()
                    return False
                self.temp_metadata.clear()
                self._use_broker_id(self.metadata.broker_id)
                self.register_state = RegisterState.CREATE_METADATA_FILE_DONE
            if self.register_state is RegisterState.CREATE_METADATA_FILE_DONE:
                if not await self._register_to_controller():
                    return False
                self.register_state = RegisterState.REGISTERED
            return True
        except (MQError, OSError) as exc:
            log.error("controller mode: registering to the controller failed: %s", exc)
            return False

    def _use_broker_id(self, broker_id: int | None) -> None:
        assert broker_id is not None
        self.broker_controller_id = broker_id
        self.role.auto.local_broker_id = broker_id

    def _confirm_register_state(self) -> None:
        if self.metadata.read():
            self.register_state = RegisterState.CREATE_METADATA_FILE_DONE
            self._use_broker_id(self.metadata.broker_id)
            return
        if self.temp_metadata.read():
            self.register_state = RegisterState.CREATE_TEMP_METADATA_FILE_DONE

    def _metadata_valid(self) -> bool:
        cfg = self.config
        if self.register_state is RegisterState.CREATE_TEMP_METADATA_FILE_DONE:
            file = self.temp_metadata
        elif self.register_state is RegisterState.CREATE_METADATA_FILE_DONE:
            file = self.metadata
        else:
            return True
        return file.cluster_name == cfg.broker_cluster_name and file.broker_name == cfg.broker_name

    async def _next_broker_id(self) -> int | None:
        cfg = self.config
        header = GetNextBrokerIdRequestHeader(
            cluster_name=cfg.broker_cluster_name, broker_name=cfg.broker_name
        )
        response = await self.controllers.call_leader(
            ControllerRequestCode.CONTROLLER_GET_NEXT_BROKER_ID, header.to_fields()
        )
        if response.code != ResponseCode.SUCCESS:
            log.error("controller refused GET_NEXT_BROKER_ID: %s %s", response.code, response.remark)
            return None
        return GetNextBrokerIdResponseHeader.from_fields(response.ext_fields).next_broker_id

    async def _apply_broker_id(self) -> bool:
        cfg = self.config
        temp = self.temp_metadata
        assert temp.broker_id is not None and temp.register_check_code is not None
        header = ApplyBrokerIdRequestHeader(
            cluster_name=cfg.broker_cluster_name,
            broker_name=cfg.broker_name,
            applied_broker_id=temp.broker_id,
            register_check_code=temp.register_check_code,
        )
        response = await self.controllers.call_leader(
            ControllerRequestCode.CONTROLLER_APPLY_BROKER_ID, header.to_fields()
        )
        if response.code != ResponseCode.SUCCESS:
            log.warning(
                "controller refused broker id %d: %s %s", temp.broker_id, response.code, response.remark
            )
            return False
        return True

    async def _register_to_controller(self) -> bool:
        cfg = self.config
        assert self.broker_controller_id is not None
        header = RegisterBrokerToControllerRequestHeader(
            cluster_name=cfg.broker_cluster_name,
            broker_name=cfg.broker_name,
            broker_id=self.broker_controller_id,
            broker_address=self.broker_address,
            invoke_time=int(time.time() * 1000),
        )
        response = await self.controllers.call_leader(
            ControllerRequestCode.CONTROLLER_REGISTER_BROKER, header.to_fields()
        )
        if response.code != ResponseCode.SUCCESS:
            log.error("controller refused the registration: %s %s", response.code, response.remark)
            return False
        answer = RegisterBrokerToControllerResponseHeader.from_fields(response.ext_fields)
        members = SyncStateSet.decode(response.body).sync_state_set if response.body else set()
        if answer.master_broker_id is None:
            return True
        await self._follow(
            answer.master_broker_id,
            answer.master_address or "",
            answer.master_epoch or 0,
            answer.sync_state_set_epoch or 0,
            members,
        )
        return True

    # -- elections and role changes -------------------------------------------------------

    async def _elect(self) -> bool:
        """Ask the controller to elect a master (this broker, if it can be); True when the
        group has one afterwards."""
        cfg = self.config
        assert self.broker_controller_id is not None
        header = ElectMasterRequestHeader(
            cluster_name=cfg.broker_cluster_name,
            broker_name=cfg.broker_name,
            broker_id=self.broker_controller_id,
            designate_elect=False,
            invoke_time=int(time.time() * 1000),
        )
        try:
            response = await self.controllers.call_leader(
                ControllerRequestCode.CONTROLLER_ELECT_MASTER, header.to_fields()
            )
        except (MQError, OSError, ControllerError) as exc:
            log.error("controller mode: election request failed: %s", exc)
            return False
        if response.code not in (ResponseCode.SUCCESS, ControllerResponseCode.CONTROLLER_MASTER_STILL_EXIST):
            log.warning("controller mode: no master elected: %s %s", response.code, response.remark)
            return False
        answer = ElectMasterResponseHeader.from_fields(response.ext_fields)
        members = ElectMasterResponseBody.decode(response.body).sync_state_set if response.body else set()
        if not answer.master_address or answer.master_broker_id is None:
            log.warning("controller mode: the group %s has no master", cfg.broker_name)
            return False
        await self._follow(
            answer.master_broker_id,
            answer.master_address,
            answer.master_epoch or 0,
            answer.sync_state_set_epoch or 0,
            members,
        )
        return True

    async def change_broker_role(
        self,
        master_broker_id: int | None,
        master_address: str | None,
        master_epoch: int | None,
        sync_state_set_epoch: int | None,
        sync_state_set: set[int],
    ) -> None:
        """NOTIFY_BROKER_ROLE_CHANGED: follow the controller's word if its epoch is newer (once
        this broker has its id: until then its registration answer says the same)."""
        if master_broker_id is None or master_epoch is None or self.broker_controller_id is None:
            return
        await self._follow(
            master_broker_id, master_address or "", master_epoch, sync_state_set_epoch or 0, sync_state_set
        )

    async def _follow(
        self, master_id: int, master_address: str, master_epoch: int, sss_epoch: int, members: set[int]
    ) -> None:
        if master_id == self.broker_controller_id:
            await self.change_to_master(master_epoch, sss_epoch, members)
        else:
            await self.change_to_slave(master_address, master_epoch, master_id)

    async def change_to_master(self, master_epoch: int, sss_epoch: int, members: set[int]) -> None:
        async with self._lock:
            if master_epoch <= self.master_epoch:
                return
            log.info(
                "controller mode: %s (broker %s) becomes master, epoch %d",
                self.config.broker_name,
                self.broker_controller_id,
                master_epoch,
            )
            self.master_epoch = master_epoch
            was_master = (
                self.master_broker_id == self.broker_controller_id and self.config.broker_id == MASTER_ID
            )
            self._change_sync_state_set(set(members), sss_epoch)
            await self.role.become_master(master_epoch)
            if not was_master:
                self.config.broker_id = MASTER_ID
                self.master_address = self.broker_address
                self.master_broker_id = self.broker_controller_id
                self._schedule_sync_state_set_check()
            self._spawn(self._check_sync_state_set())
        # Like Apache's registerBrokerWhenRoleChange, in the background: a notification is
        # answered without waiting for the name servers.
        self._spawn(self.role.role_changed())

    async def change_to_slave(self, master_address: str, master_epoch: int, master_id: int) -> None:
        async with self._lock:
            if master_epoch <= self.master_epoch:
                return
            log.info(
                "controller mode: %s (broker %s) becomes slave of broker %d at %s, epoch %d",
                self.config.broker_name,
                self.broker_controller_id,
                master_id,
                master_address,
                master_epoch,
            )
            self.master_epoch = master_epoch
            if master_id != self.master_broker_id:
                await cancel_and_wait(self._check_task)
                self._check_task = None
                assert self.broker_controller_id is not None
                self.config.broker_id = self.broker_controller_id
                self.master_address = master_address
                self.master_broker_id = master_id
            await self.role.become_slave(master_address, master_epoch, master_id)
        self._spawn(self.role.role_changed())

    @property
    def is_master(self) -> bool:
        return self.master_broker_id is not None and self.master_broker_id == self.broker_controller_id

    # -- the group's state ----------------------------------------------------------------

    async def _sync_replica_info_periodically(self) -> None:
        await wait_event(self._sync_soon, FIRST_PERIODIC_DELAY)
        while True:
            self._sync_soon.clear()
            try:
                await self.sync_replica_info()
            except (MQError, OSError, ControllerError) as exc:
                log.warning("controller mode: cannot read %s's replicas: %s", self.config.broker_name, exc)
            except Exception:
                log.exception("controller mode: reading %s's replicas failed", self.config.broker_name)
            await wait_event(self._sync_soon, self.config.sync_broker_metadata_period / 1000)

    async def sync_replica_info(self) -> None:
        """CONTROLLER_GET_REPLICA_INFO: catch up with a role change whose notification was lost,
        ask for an election when the group has no master, adopt the SyncStateSet as master."""
        header = GetReplicaInfoRequestHeader(broker_name=self.config.broker_name)
        response = await self.controllers.call_leader(
            ControllerRequestCode.CONTROLLER_GET_REPLICA_INFO, header.to_fields()
        )
        if response.code == ControllerResponseCode.CONTROLLER_BROKER_METADATA_NOT_EXIST:
            # The controller lost this group (a new controller cluster): register again.
            log.warning(
                "controller mode: the controller does not know %s; registering again", self.config.broker_name
            )
            await self._register_to_controller()
            await asyncio.sleep(2.0)
            return
        if response.code != ResponseCode.SUCCESS:
            raise ControllerError(response.code, response.remark)
        info = GetReplicaInfoResponseHeader.from_fields(response.ext_fields)
        state = SyncStateSet.decode(response.body) if response.body else SyncStateSet()
        epoch = info.master_epoch or 0
        if epoch > self.master_epoch:
            if info.master_address and info.master_broker_id is not None:
                await self._follow(
                    info.master_broker_id,
                    info.master_address,
                    epoch,
                    state.sync_state_set_epoch,
                    state.sync_state_set,
                )
            else:
                await self._elect()
        elif epoch == self.master_epoch and self.is_master:
            async with self._lock:
                self._change_sync_state_set(state.sync_state_set, state.sync_state_set_epoch)

    def _change_sync_state_set(self, members: set[int], epoch: int) -> None:
        if epoch > self.sync_state_set_epoch:
            log.info(
                "controller mode: SyncStateSet %s -> %s (epoch %d)",
                sorted(self.sync_state_set),
                sorted(members),
                epoch,
            )
            self.sync_state_set_epoch = epoch
            self.sync_state_set = set(members)
            self.role.auto.set_sync_state_set(set(members))

    def _schedule_sync_state_set_check(self) -> None:
        if self._check_task is not None:
            self._check_task.cancel()

        async def check_periodically() -> None:
            await asyncio.sleep(FIRST_PERIODIC_DELAY)
            while True:
                await self._check_sync_state_set()
                await asyncio.sleep(self.config.check_sync_state_set_period / 1000)

        self._check_task = asyncio.ensure_future(check_periodically())

    async def _check_sync_state_set(self) -> None:
        """The master's periodic check: report a SyncStateSet without the replicas that fell
        behind."""
        try:
            members = set(self.role.auto.maybe_shrink_sync_state_set())
            if self.broker_controller_id is not None:
                members.add(self.broker_controller_id)
            if members == self.sync_state_set:
                return
            await self.report_sync_state_set(members)
        except Exception:
            log.exception("controller mode: checking the SyncStateSet failed")

    def _change_proposed(self, members: set[int]) -> None:
        """The replication proposes a SyncStateSet (a slave caught up, or one dropped out):
        report it to the controller."""
        self._spawn(self.report_sync_state_set(set(members)))

    async def report_sync_state_set(self, members: set[int]) -> None:
        """CONTROLLER_ALTER_SYNC_STATE_SET as master with ``members``; the controller's answer
        (the set and its new epoch) is adopted. A fenced answer (a stale master or set epoch)
        is logged and the group's state read again."""
        if not self.is_master or self.broker_controller_id is None:
            return
        header = AlterSyncStateSetRequestHeader(
            broker_name=self.config.broker_name,
            master_broker_id=self.broker_controller_id,
            master_epoch=self.master_epoch,
            invoke_time=int(time.time() * 1000),
        )
        body = SyncStateSet(sync_state_set=members, sync_state_set_epoch=self.sync_state_set_epoch).encode()
        try:
            response = await self.controllers.call_leader(
                ControllerRequestCode.CONTROLLER_ALTER_SYNC_STATE_SET, header.to_fields(), body
            )
        except (MQError, OSError, ControllerError) as exc:
            log.error("controller mode: cannot report SyncStateSet %s: %s", sorted(members), exc)
            return
        if response.code != ResponseCode.SUCCESS:
            log.error(
                "controller mode: SyncStateSet %s (master epoch %d, set epoch %d) refused: %s %s",
                sorted(members),
                self.master_epoch,
                self.sync_state_set_epoch,
                response.code,
                response.remark,
            )
            if response.code in (
                ControllerResponseCode.CONTROLLER_FENCED_MASTER_EPOCH,
                ControllerResponseCode.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH,
            ):
                self._sync_soon.set()
            return
        if response.body:
            result = SyncStateSet.decode(response.body)
            async with self._lock:
                self._change_sync_state_set(result.sync_state_set, result.sync_state_set_epoch)

    # -- helpers --------------------------------------------------------------------------

    async def _every(self, seconds: float, action: Callable[[], Coroutine[Any, Any, Any]]) -> None:
        while True:
            await asyncio.sleep(seconds)
            try:
                await action()
            except Exception:
                log.exception("controller mode: periodic task failed")

    def _spawn(self, work: Coroutine[Any, Any, Any]) -> None:
        if self.state is State.SHUTDOWN:
            work.close()
            return
        task = asyncio.ensure_future(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def epoch_entries(self) -> list[EpochEntry]:
        return self.role.auto.epoch_entries()

    def runtime_info(self) -> dict[str, str]:
        return {
            "controllerLeaderAddress": self.controllers.leader_address,
            "brokerControllerId": "" if self.broker_controller_id is None else str(self.broker_controller_id),
            "masterEpoch": str(self.master_epoch),
            "syncStateSetEpoch": str(self.sync_state_set_epoch),
            "syncStateSet": ",".join(str(i) for i in sorted(self.sync_state_set)),
            "replicasManagerState": self.state.value,
        }
