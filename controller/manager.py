"""One controller replica: its remoting server, its Raft node, broker liveness and elections
(Apache RocketMQ 5.3's ``ControllerManager``, ``ControllerRequestProcessor`` and
``DLedgerController``).

Only the Raft leader answers the controller requests (others answer CONTROLLER_NOT_LEADER, as
Apache's followers do), and only once it has applied every entry of the earlier terms (a
barrier entry, as Apache's leader appends an initial entry before it schedules requests).
Requests are handled one at a time: checked against the state, their events replicated, and
answered once the events are committed and applied. BROKER_HEARTBEAT,
CONTROLLER_GET_METADATA_INFO and the config requests are answered by every replica.

The leader elects a new master when a group's master stops heartbeating (its heartbeat
timeout passes, or its connection closes) and, every ``scanInactiveMasterInterval``, for each
group whose master is not alive while another broker of it is; then, with
``notifyBrokerRoleChanged``, it sends NOTIFY_BROKER_ROLE_CHANGED to the group's live brokers.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiorocketmq.protocol import fastjson
from aiorocketmq.protocol.codes import ResponseCode
from aiorocketmq.protocol.command import RemotingCommand
from aiorocketmq.protocol.controller import (
    AlterSyncStateSetRequestHeader,
    ApplyBrokerIdRequestHeader,
    BrokerHeartbeatRequestHeader,
    CleanControllerBrokerDataRequestHeader,
    ControllerRequestCode,
    ControllerResponseCode,
    ElectMasterRequestHeader,
    ElectMasterResponseBody,
    ElectMasterResponseHeader,
    GetMetaDataResponseHeader,
    GetNextBrokerIdRequestHeader,
    GetReplicaInfoRequestHeader,
    NotifyBrokerRoleChangedRequestHeader,
    RegisterBrokerToControllerRequestHeader,
    SyncStateSet,
)
from aiorocketmq.protocol.errors import MQError, ProtocolError
from aiorocketmq.protocol.settings import read_properties
from aiorocketmq.protocol.transport import Connection, Handler, Server, connect

from .config import ControllerSettings, Peer
from .heartbeat import BrokerHeartbeatManager, BrokerLiveInfo
from .metrics import FAILED, SUCCESS, TIMEOUT, ControllerMetrics, GroupState
from .raft import FOLLOWER, LEADER, ROLE_NAMES, RaftError, RaftNode
from .replicas import ControllerResult, ReplicasInfo

log = logging.getLogger("controller")

Req = ControllerRequestCode
#: Apache's ``ControllerRequestProcessor.WAIT_TIMEOUT_OUT`` (seconds).
WAIT_TIMEOUT = 5.0
#: Apache's heartbeat manager starts scanning 2 s after start-up.
FIRST_SCAN_DELAY = 2.0
#: How the request being handled ended when its handler still answered (a Raft commit that
#: failed or timed out is answered SYSTEM_ERROR): for ``request_total``'s status.
_OUTCOME: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "controller_request_outcome", default=None
)


def _raft_status(exc: RaftError) -> str:
    # RaftNode's timeout says "not committed within"; other failures are PySyncObj's reasons.
    return TIMEOUT if str(exc).startswith("not committed within") else FAILED


class ControllerManager:
    """A controller replica; :meth:`start` it inside a running event loop."""

    def __init__(self, settings: ControllerSettings, *, name: str = "controller") -> None:
        self.settings = settings
        self.peers, self.self_id = settings.peers()
        self.self_peer: Peer = next(p for p in self.peers if p.id == self.self_id)
        self.replicas = ReplicasInfo(enable_elect_unclean_master=settings.enable_elect_unclean_master)
        self.heartbeats = BrokerHeartbeatManager()
        #: PySyncObj's state of this replica (the ``role`` metric).
        self.raft_role = FOLLOWER
        self.metrics = ControllerMetrics.for_manager(self)
        self.server = Server(
            self._handlers(),
            name=name,
            on_disconnect=self._connection_closed,
            idle_timeout=120.0,
            tls=settings.server_tls(),
            limits=settings.connection_limits(),
        )
        self.port: int | None = None
        self.raft: RaftNode | None = None
        self._leader_ready = False
        self._leader_term = -1
        self._lock: asyncio.Lock | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._scanner: asyncio.Task[None] | None = None
        self._master_scanner: asyncio.Task[None] | None = None
        self._becoming: asyncio.Task[None] | None = None
        self._notify_conns: dict[str, Connection] = {}
        self._closing = False

    # -- lifecycle ----------------------------------------------------------------------

    async def start(self) -> int:
        """Serve on this replica's address, start Raft and the liveness scan; returns the port."""
        loop = asyncio.get_running_loop()
        self._lock = asyncio.Lock()
        port = int(self.self_peer.address.rpartition(":")[2])
        self.port = await self.server.listen(self.settings.bind_address, port)
        # As Apache's: the port it serves on is its listenPort (getControllerConfig shows it).
        self.settings.listen_port = self.port
        others = [p.raft_address for p in self.peers if p.id != self.self_id]
        self.raft = await loop.run_in_executor(
            None,
            lambda: RaftNode(
                self.self_peer.raft_address,
                others,
                self.settings.store_dir,
                self.replicas,
                loop,
                self._role_changed,
                election_timeout=self.settings.jraft_election_timeout_ms / 1000,
            ),
        )
        self._scanner = asyncio.ensure_future(self._scan_forever())
        await self.metrics.start()
        log.info(
            "controller %s serves on %s:%d (Raft %s, peers %s, store %s)",
            self.self_id,
            self.settings.bind_address,
            self.port,
            self.self_peer.raft_address,
            ", ".join(f"{p.id}={p.address}/{p.raft_address}" for p in self.peers),
            self.settings.store_dir,
        )
        return self.port

    async def close(self) -> None:
        self._closing = True
        self._leader_ready = False
        for task in [self._scanner, self._master_scanner, self._becoming, *self._tasks]:
            if task is not None:
                task.cancel()
        for task in [self._scanner, self._master_scanner, self._becoming, *self._tasks]:
            if task is not None:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        for conn in self._notify_conns.values():
            conn.close("controller shutting down")
        self._notify_conns.clear()
        await self.server.close()
        await self.metrics.stop()
        if self.raft is not None:
            await self.raft.close()

    def _spawn(self, coro: Any) -> asyncio.Task[Any]:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # -- leadership ---------------------------------------------------------------------

    @property
    def is_leader(self) -> bool:
        """Raft leader of the controllers and caught up with every earlier term."""
        return self._leader_ready and self.raft is not None and self.raft.is_leader()

    def leader_peer(self) -> Peer | None:
        if self.raft is None:
            return None
        address = self.raft.leader_address()
        return next((p for p in self.peers if p.raft_address == address), None)

    def _role_changed(self, role: int) -> None:
        if self._closing:
            return
        self.raft_role = role
        log.info("controller %s is now Raft %s", self.self_id, ROLE_NAMES.get(role, role))
        if role == LEADER:
            if self._becoming is None or self._becoming.done():
                self._becoming = asyncio.ensure_future(self._become_leader())
            return
        if self._leader_ready:
            log.info("controller %s stops scheduling requests", self.self_id)
        self._leader_ready = False
        if self._master_scanner is not None:
            self._master_scanner.cancel()
            self._master_scanner = None

    async def _become_leader(self) -> None:
        """As Apache's leader: commit an entry of our own before answering requests."""
        assert self.raft is not None
        while not self._closing and self.raft.is_leader():
            term = self.raft.term
            try:
                await self.raft.barrier(f"{self.self_id}:{term}")
            except RaftError as exc:
                log.warning("controller %s: leader's initial entry failed (%s), retrying", self.self_id, exc)
                await asyncio.sleep(0.1)
                continue
            if not self.raft.is_leader():
                return
            if self.raft.term != term:
                continue  # lost and won again meanwhile: an entry of this term first
            self._leader_term = term
            self._leader_ready = True
            log.info("controller %s is the leader (term %d) and schedules requests", self.self_id, term)
            if self._master_scanner is None or self._master_scanner.done():
                self._master_scanner = asyncio.ensure_future(self._scan_masters_forever())
            return

    # -- handlers -----------------------------------------------------------------------

    def _handlers(self) -> dict[int, Handler]:
        handlers: dict[int, Handler] = {
            Req.CONTROLLER_ALTER_SYNC_STATE_SET: self.alter_sync_state_set,
            Req.CONTROLLER_ELECT_MASTER: self.elect_master,
            Req.CONTROLLER_REGISTER_BROKER: self.register_broker,
            Req.CONTROLLER_GET_REPLICA_INFO: self.get_replica_info,
            Req.CONTROLLER_GET_METADATA_INFO: self.get_metadata,
            Req.CONTROLLER_GET_SYNC_STATE_DATA: self.get_sync_state_data,
            Req.BROKER_HEARTBEAT: self.broker_heartbeat,
            Req.UPDATE_CONTROLLER_CONFIG: self.update_config,
            Req.GET_CONTROLLER_CONFIG: self.get_config,
            Req.CLEAN_BROKER_DATA: self.clean_broker_data,
            Req.CONTROLLER_GET_NEXT_BROKER_ID: self.get_next_broker_id,
            Req.CONTROLLER_APPLY_BROKER_ID: self.apply_broker_id,
        }
        return {code: self._measured(handler) for code, handler in handlers.items()}

    def _measured(self, handler: Handler) -> Handler:
        """``handler``, counted in ``request_total`` and timed in ``request_latency`` (as
        Apache's request processor: a handler that raises counts as failed, or timeout)."""
        metrics = self.metrics

        def measured(conn: Connection, cmd: RemotingCommand) -> Any:
            started = time.perf_counter()
            try:
                result = handler(conn, cmd)
            except Exception as exc:
                metrics.request(cmd.code, TIMEOUT if isinstance(exc, TimeoutError) else FAILED, None)
                raise
            if inspect.isawaitable(result):
                return self._measured_async(cmd.code, started, result)
            metrics.request(cmd.code, SUCCESS, (time.perf_counter() - started) * 1e6)
            return result

        return measured

    async def _measured_async(self, code: int, started: float, pending: Awaitable[Any]) -> Any:
        token = _OUTCOME.set(None)
        try:
            response = await pending
        except Exception as exc:
            self.metrics.request(code, TIMEOUT if isinstance(exc, TimeoutError) else FAILED, None)
            raise
        else:
            outcome = _OUTCOME.get()
            if outcome is None:
                self.metrics.request(code, SUCCESS, (time.perf_counter() - started) * 1e6)
            else:
                self.metrics.request(code, outcome, None)
            return response
        finally:
            _OUTCOME.reset(token)

    def _alive(self, cluster: str, broker_name: str, broker_id: int) -> bool:
        return self.heartbeats.is_active(cluster, broker_name, broker_id)

    def _live_info(self, cluster: str, broker_name: str, broker_id: int) -> BrokerLiveInfo | None:
        return self.heartbeats.live_info(cluster, broker_name, broker_id)

    async def run(self, compute: Callable[[ReplicasInfo], ControllerResult], write: bool) -> ControllerResult:
        """Apache's event scheduler: one request at a time, on the leader only; a write's
        events are committed and applied before it is answered. :class:`RaftError` when
        they could not be."""
        if not self.is_leader or self._lock is None or self.raft is None:
            return ControllerResult().refuse(
                ControllerResponseCode.CONTROLLER_NOT_LEADER, "The controller is not in leader state"
            )
        async with self._lock:
            if not self.is_leader:
                return ControllerResult().refuse(
                    ControllerResponseCode.CONTROLLER_NOT_LEADER, "The controller is not in leader state"
                )
            with self.raft.lock:
                result = compute(self.replicas)
            if write and result.events:
                await self._append(self.raft.append(result.events, timeout=WAIT_TIMEOUT))
            elif self.settings.process_read_event:
                await self._append(self.raft.barrier("read", timeout=WAIT_TIMEOUT))
            return result

    async def _append(self, append: Awaitable[None]) -> None:
        """One append to the replicated log, counted in ``dledger_op_total`` (and timed)."""
        started = time.perf_counter()
        try:
            await append
        except RaftError as exc:
            self.metrics.raft_op("append", _raft_status(exc), None)
            raise
        self.metrics.raft_op("append", SUCCESS, (time.perf_counter() - started) * 1e6)

    async def _answer(
        self, cmd: RemotingCommand, compute: Callable[[ReplicasInfo], ControllerResult], write: bool
    ) -> RemotingCommand:
        try:
            result = await self.run(compute, write)
        except RaftError as exc:
            log.error("controller %s: request %d not committed: %s", self.self_id, cmd.code, exc)
            _OUTCOME.set(_raft_status(exc))
            return cmd.response(
                ResponseCode.SYSTEM_ERROR, f"the controller could not commit the request: {exc}"
            )
        return _response(cmd, result)

    def alter_sync_state_set(self, conn: Connection, cmd: RemotingCommand) -> Any:
        header = AlterSyncStateSetRequestHeader.from_fields(cmd.ext_fields)
        if not cmd.body:
            raise ProtocolError("CONTROLLER_ALTER_SYNC_STATE_SET needs a SyncStateSet body")
        body = SyncStateSet.decode(cmd.body)
        return self._answer(cmd, lambda r: r.alter_sync_state_set(header, body, self._alive), True)

    async def elect_master(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        header = ElectMasterRequestHeader.from_fields(cmd.ext_fields)
        response = await self._answer(
            cmd, lambda r: r.elect_master(header, self._alive, self._live_info), True
        )
        if _OUTCOME.get() is None:  # decided (and committed): an election, whatever its outcome
            self._count_election(header.cluster_name, header.broker_name, response.code)
        if response.code == ResponseCode.SUCCESS and self.settings.notify_broker_role_changed:
            self.notify_broker_role_changed(response)
        return response

    def register_broker(self, conn: Connection, cmd: RemotingCommand) -> Any:
        header = RegisterBrokerToControllerRequestHeader.from_fields(cmd.ext_fields)
        return self._answer(cmd, lambda r: r.register_broker(header, self._alive), True)

    def get_replica_info(self, conn: Connection, cmd: RemotingCommand) -> Any:
        header = GetReplicaInfoRequestHeader.from_fields(cmd.ext_fields)
        return self._answer(cmd, lambda r: r.get_replica_info(header), False)

    def get_sync_state_data(self, conn: Connection, cmd: RemotingCommand) -> Any:
        names: Any = None
        if cmd.body:
            try:
                names = fastjson.loads(cmd.body)
            except Exception as exc:
                raise ProtocolError(
                    f"CONTROLLER_GET_SYNC_STATE_DATA body is not a JSON list: {exc}"
                ) from None
        if isinstance(names, list) and names:
            wanted = [str(n) for n in names]
            return self._answer(cmd, lambda r: r.get_sync_state_data(wanted, self._alive), False)
        # As Apache: no broker names, no answer set.
        return cmd.response(ResponseCode.SYSTEM_ERROR, "not set any response code")

    def clean_broker_data(self, conn: Connection, cmd: RemotingCommand) -> Any:
        header = CleanControllerBrokerDataRequestHeader.from_fields(cmd.ext_fields)
        return self._answer(cmd, lambda r: r.clean_broker_data(header, self._alive), True)

    def get_next_broker_id(self, conn: Connection, cmd: RemotingCommand) -> Any:
        header = GetNextBrokerIdRequestHeader.from_fields(cmd.ext_fields)
        return self._answer(cmd, lambda r: r.get_next_broker_id(header), False)

    def apply_broker_id(self, conn: Connection, cmd: RemotingCommand) -> Any:
        header = ApplyBrokerIdRequestHeader.from_fields(cmd.ext_fields)
        return self._answer(cmd, lambda r: r.apply_broker_id(header), True)

    def broker_heartbeat(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        header = BrokerHeartbeatRequestHeader.from_fields(cmd.ext_fields)
        if header.broker_id is None:
            return cmd.response(
                ControllerResponseCode.CONTROLLER_INVALID_REQUEST, "Heart beat with empty brokerId"
            )
        if self.heartbeats.on_heartbeat(
            header.cluster_name,
            header.broker_name,
            header.broker_addr,
            header.broker_id,
            header.heartbeat_timeout_millis,
            conn,
            header.epoch,
            header.max_offset,
            header.confirm_offset,
            header.election_priority,
        ):
            log.info(
                "broker alive: %s %s id=%d at %s",
                header.cluster_name,
                header.broker_name,
                header.broker_id,
                header.broker_addr,
            )
        return cmd.response(ResponseCode.SUCCESS, "Heart beat success")

    def get_metadata(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        leader = self.leader_peer()
        peers = "".join(f"{p.id}:{p.address};" for p in self.peers)
        header = GetMetaDataResponseHeader(
            group=self.settings.group,
            controller_leader_id=leader.id if leader is not None else None,
            controller_leader_address=leader.address if leader is not None else None,
            is_leader=self.raft is not None and self.raft.is_leader(),
            peers=peers,
        )
        return cmd.response(ext_fields=header.to_fields())

    def get_config(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(body=self.settings.to_properties().encode())

    def update_config(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """UPDATE_CONTROLLER_CONFIG: the body's ``key=value`` lines applied in memory to the
        keys this controller knows; a key of the black list refuses the whole update."""
        if not cmd.body:
            return cmd.response()
        try:
            updates = read_properties(cmd.body.decode())
        except UnicodeDecodeError:
            return cmd.response(ResponseCode.SYSTEM_ERROR, "the config body is not UTF-8 text")
        if set(updates) & self.settings.black_list():
            return cmd.response(ResponseCode.NO_PERMISSION, "Can not update config in black list.")
        fields: dict[str, str] = {}
        for name, info in type(self.settings).model_fields.items():
            fields[info.alias or name] = name
            for choice in getattr(info.validation_alias, "choices", ()):
                if isinstance(choice, str):
                    fields[choice] = name
        # Every value checked before any is applied: a bad one leaves the settings as they were.
        trial = self.settings.model_copy()
        known = [(key, fields[key], value) for key, value in updates.items() if key in fields]
        for key, name, value in known:
            try:
                setattr(trial, name, value)
            except ValueError as exc:
                return cmd.response(
                    ResponseCode.SYSTEM_ERROR, f"{key}={value}: {str(exc).splitlines()[-1].strip()}"
                )
        for _, name, _ in known:
            setattr(self.settings, name, getattr(trial, name))
        if "enableElectUncleanMaster" in updates:
            with contextlib.ExitStack() as stack:
                if self.raft is not None:
                    stack.enter_context(self.raft.lock)
                self.replicas.enable_elect_unclean_master = self.settings.enable_elect_unclean_master
        log.info("controller config updated by %s: %s", conn.address, updates)
        return cmd.response()

    def _count_election(self, cluster: str | None, broker_name: str | None, code: int) -> None:
        if not cluster and broker_name:
            with self.raft.lock if self.raft is not None else contextlib.nullcontext():
                known = self.replicas.replica_info_table.get(broker_name)
            cluster = known.cluster_name if known is not None else None
        self.metrics.election(cluster, broker_name, code)

    def group_states(self) -> list[GroupState]:
        """Every broker group's master and SyncStateSet as this replica holds them."""
        with self.raft.lock if self.raft is not None else contextlib.nullcontext():
            groups = []
            for name, replicas in sorted(self.replicas.replica_info_table.items()):
                info = self.replicas.sync_state_set_info_table.get(name)
                master = info.master_broker_id if info is not None else None
                groups.append(
                    GroupState(
                        cluster=replicas.cluster_name,
                        broker_set=name,
                        brokers=len(replicas.broker_id_info),
                        master_broker_id=master,
                        master_alive=master is not None and self._alive(replicas.cluster_name, name, master),
                        master_epoch=info.master_epoch if info is not None else 0,
                        sync_state_set_epoch=info.sync_state_set_epoch if info is not None else 0,
                        sync_state_set_size=len(info.sync_state_set) if info is not None else 0,
                    )
                )
            return groups

    # -- liveness and elections ---------------------------------------------------------

    async def _scan_forever(self) -> None:
        await asyncio.sleep(FIRST_SCAN_DELAY)
        while True:
            try:
                self.scan_not_active_brokers()
            except Exception:
                log.exception("liveness scan failed")
            await asyncio.sleep(self.settings.scan_not_active_broker_interval / 1000)

    def scan_not_active_brokers(self) -> None:
        for (cluster, broker_name, broker_id), info in self.heartbeats.scan():
            log.warning(
                "broker %s %s id=%d at %s expired: no heartbeat for %dms",
                cluster,
                broker_name,
                broker_id,
                info.broker_addr,
                info.heartbeat_timeout_millis,
            )
            channel = info.channel
            if isinstance(channel, Connection) and not channel.closed:
                channel.close("broker heartbeat expired")
            self._spawn(self.on_broker_inactive(cluster, broker_name, broker_id))

    def _connection_closed(self, conn: Connection) -> None:
        lost = self.heartbeats.on_channel_closed(conn)
        if lost is not None and not self._closing:
            (cluster, broker_name, broker_id), _info = lost
            log.info(
                "broker %s %s id=%d: its connection %s closed", cluster, broker_name, broker_id, conn.address
            )
            self._spawn(self.on_broker_inactive(cluster, broker_name, broker_id))

    async def on_broker_inactive(self, cluster: str, broker_name: str, broker_id: int | None) -> None:
        if not self.is_leader:
            log.warning(
                "The broker with brokerId: %s in broker-set: %s has been inactive", broker_id, broker_name
            )
            return
        if broker_id is None:
            await self.trigger_elect_master(broker_name)
            return
        try:
            result = await self.run(
                lambda r: r.get_replica_info(GetReplicaInfoRequestHeader(broker_name=broker_name)), False
            )
        except RaftError as exc:
            log.error("Failed to get replica-info for broker-set: %s: %s", broker_name, exc)
            return
        master = (
            getattr(result.header, "master_broker_id", None) if result.code == ResponseCode.SUCCESS else None
        )
        if master != broker_id:
            log.warning(
                "The broker with brokerId: %s in broker-set: %s has been inactive", broker_id, broker_name
            )
            return
        await self.trigger_elect_master(broker_name)

    async def trigger_elect_master(self, broker_name: str) -> bool:
        """Elect a new master for ``broker_name`` (up to ``electMasterMaxRetryCount`` tries)."""
        request = ElectMasterRequestHeader(broker_name=broker_name, broker_id=-1)
        for attempt in range(self.settings.elect_master_max_retry_count):
            try:
                result = await self.run(lambda r: r.elect_master(request, self._alive, self._live_info), True)
            except RaftError as exc:
                log.warning(
                    "Failed to trigger elect-master in broker-set: %s, retry %d: %s",
                    broker_name,
                    attempt,
                    exc,
                )
                continue
            self._count_election(None, broker_name, result.code)
            if result.code == ResponseCode.SUCCESS:
                header = result.header
                assert isinstance(header, ElectMasterResponseHeader)
                log.info(
                    "Elect a new master in broker-set: %s done: master %s at %s, epoch %s",
                    broker_name,
                    header.master_broker_id,
                    header.master_address,
                    header.master_epoch,
                )
                if self.settings.notify_broker_role_changed:
                    self.notify_broker_role_changed(_response(RemotingCommand.request(0), result))
                return True
            log.error(
                "Failed to trigger elect-master in broker-set: %s: %s %s",
                broker_name,
                result.code,
                result.remark,
            )
        return False

    async def _scan_masters_forever(self) -> None:
        interval = self.settings.scan_inactive_master_interval / 1000
        while True:
            await asyncio.sleep(interval)
            if not self.is_leader:
                continue
            try:
                with self.raft.lock if self.raft is not None else contextlib.nullcontext():
                    groups = self.replicas.scan_need_reelect_broker_sets(self._alive)
                for broker_name in groups:
                    await self.on_broker_inactive("", broker_name, None)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("inactive master scan failed")

    def notify_broker_role_changed(self, elect_response: RemotingCommand) -> None:
        """Tell every live broker of the group (by the election's member group) its new master."""
        header = ElectMasterResponseHeader.from_fields(elect_response.ext_fields)
        if not elect_response.body:
            return
        body = ElectMasterResponseBody.decode(elect_response.body)
        group = body.broker_member_group
        if group is None:
            return
        if header.master_broker_id is None:
            log.warning("not notifying a role change without a master: %s", header)
            return
        notify = NotifyBrokerRoleChangedRequestHeader(
            master_address=header.master_address,
            master_epoch=header.master_epoch,
            sync_state_set_epoch=header.sync_state_set_epoch,
            master_broker_id=header.master_broker_id,
        )
        payload = SyncStateSet(
            sync_state_set=set(body.sync_state_set), sync_state_set_epoch=header.sync_state_set_epoch or 0
        ).encode()
        for broker_id, address in sorted(group.broker_addrs.items()):
            if self.heartbeats.is_active(group.cluster or "", group.broker_name or "", broker_id):
                self._spawn(self._notify(address, notify, payload))

    async def _notify(self, address: str, header: NotifyBrokerRoleChangedRequestHeader, body: bytes) -> None:
        log.info("notifying broker %s of its group's master: %s", address, header)
        try:
            conn = self._notify_conns.get(address)
            if conn is None or conn.closed:
                host, _, port = address.rpartition(":")
                conn = await connect(host, int(port), timeout=3.0, name="controller-notify")
                self._notify_conns[address] = conn
            conn.send_oneway(
                RemotingCommand.request(Req.NOTIFY_BROKER_ROLE_CHANGED, header.to_fields(), body, oneway=True)
            )
        except (MQError, OSError, ValueError) as exc:
            log.error("Failed to notify broker %s that role changed: %s", address, exc)


def _response(cmd: RemotingCommand, result: ControllerResult) -> RemotingCommand:
    return cmd.response(
        result.code,
        result.remark,
        ext_fields=result.header.to_fields() if result.header is not None else {},
        body=result.body or b"",
    )
