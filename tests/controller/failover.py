"""Controller-mode failover scenarios, whoever's controller and brokers run them.

A library for tests (not a test file): it only talks RocketMQ's wire protocol to a name server,
the controllers and one broker group, so the same scenario runs on Apache 5.3.3's processes
(tests/interop/test_controller_failover_apache.py, the reference figures) and on ours.

::

    async with FailoverScenario(namesrv=ns, controllers=[ctl], broker_name="broker-a") as sc:
        await sc.wait_group(replicas=3)              # a master, every replica in sync
        await sc.prepare()                           # the topic on every replica, routed
        await sc.start_load()                        # SYNC sends from the test process
        await sc.load.wait_acked(200)
        figures = await sc.kill_master(kill)         # kill(addr): kill -9 of that broker's host
        await sc.load.wait_acked(200, after=figures.first_send_at)
        await sc.stop_load()
        tally = await sc.audit()                     # everything read back from the new master
        assert not tally.lost

or all of it at once: ``figures, tally = await sc.run(kill, replicas=3)``. ``kill`` is any
coroutine function of the master's address: ``Host.kill`` (a crash), ``Host.isolate`` (a power
loss: nothing closes, the others notice by timeouts), a process kill. Afterwards
``await sc.wait_in_sync(broker_id)`` waits for a restarted replica to be back in the
SyncStateSet and ``await sc.audit(addr)`` reads what that replica holds (a slave must serve
pulls: Apache's ``slaveReadEnable``).

What the controller must answer for this to work: CONTROLLER_GET_METADATA_INFO (``isLeader``),
CONTROLLER_GET_REPLICA_INFO, and CONTROLLER_GET_SYNC_STATE_DATA with every replica's
``brokerId``, ``brokerAddress`` and ``alive`` (in- and not-in-sync lists); the name server must
route the master as broker id 0.

- :class:`ControllerClient`: CONTROLLER_GET_METADATA_INFO (which replica leads),
  CONTROLLER_GET_REPLICA_INFO and CONTROLLER_GET_SYNC_STATE_DATA, asked of the leader, with
  the SDK's remoting client.
- :class:`SyncLoad`: concurrent SYNC sends of our SDK's :class:`~aiorocketmq.client.Producer`,
  every outcome kept as a :class:`SendRecord` (key, status, message id, queue and offset).
- :class:`FailoverScenario`: the group's readiness, the kill with its figures
  (:class:`FailoverFigures`: kill -> new master elected -> first acknowledged send again),
  and the read-back (:class:`Tally`: acknowledged / lost / duplicated / moved).

Times are ``time.monotonic()`` seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import statistics
import time
import uuid
from collections import defaultdict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from aiorocketmq.client import Admin, Message, MQError, Producer
from aiorocketmq.client.client_instance import ClientOptions
from aiorocketmq.client.pull import pull_raw
from aiorocketmq.client.types import SendStatus
from aiorocketmq.protocol.body import MessageQueue
from aiorocketmq.protocol.codes import RequestCode, ResponseCode
from aiorocketmq.protocol.command import RemotingCommand
from aiorocketmq.protocol.controller import (
    MASTER_ID,
    BrokerReplicasInfo,
    ControllerRequestCode,
    ControllerResponseCode,
    GetMetaDataResponseHeader,
    GetReplicaInfoRequestHeader,
    GetReplicaInfoResponseHeader,
    ReplicasInfo,
    SyncStateSet,
)
from aiorocketmq.protocol.headers import CreateTopicRequestHeader, PullMessageResponseHeader
from aiorocketmq.protocol.message import MessageExt, decode_records

#: What a scenario's kill is given: the master's broker address (``host:port``); it returns once
#: that broker is dead (tests/hosts.py's ``Host.kill`` of the host with that address).
Kill = Callable[[str], Awaitable[Any]]


class ScenarioError(AssertionError):
    """The group did not reach the state a scenario waits for in time (the message says which
    state and the last one seen)."""


# -- the controllers ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Replica:
    broker_id: int
    addr: str
    alive: bool
    in_sync: bool


@dataclass(frozen=True)
class GroupState:
    """One broker group as the controller leader sees it."""

    broker_name: str
    master_id: int | None
    master_addr: str | None
    master_epoch: int
    sync_state_set: frozenset[int]
    sync_state_set_epoch: int
    #: every replica the controller knows, by broker id (in the SyncStateSet or not)
    replicas: dict[int, Replica] = field(default_factory=dict)

    @property
    def has_master(self) -> bool:
        return bool(self.master_addr) and self.master_id is not None and self.master_id >= 0

    def addr_of(self, broker_id: int) -> str | None:
        replica = self.replicas.get(broker_id)
        return replica.addr if replica else None

    def id_of(self, addr: str) -> int | None:
        return next((r.broker_id for r in self.replicas.values() if r.addr == addr), None)

    def describe(self) -> str:
        replicas = ", ".join(
            f"{r.broker_id}@{r.addr}{'' if r.alive else ' dead'}{' in-sync' if r.in_sync else ''}"
            for r in sorted(self.replicas.values(), key=lambda r: r.broker_id)
        )
        return (
            f"{self.broker_name}: master {self.master_id}@{self.master_addr} epoch {self.master_epoch}, "
            f"SyncStateSet {sorted(self.sync_state_set)} epoch {self.sync_state_set_epoch}; [{replicas}]"
        )


class ControllerClient:
    """Controller requests over a started SDK client (``Admin.instance``), always to the
    current leader among ``addrs`` (found with CONTROLLER_GET_METADATA_INFO, found again when a
    replica answers CONTROLLER_NOT_LEADER or cannot be reached)."""

    def __init__(self, admin: Admin, addrs: Sequence[str], *, timeout: float = 2.0) -> None:
        if not addrs:
            raise ValueError("no controller address")
        self.admin = admin
        self.addrs = list(addrs)
        self.timeout = timeout
        self._leader: str | None = None

    async def metadata(self, addr: str) -> GetMetaDataResponseHeader:
        response = await self.admin.instance.invoke(
            addr, ControllerRequestCode.CONTROLLER_GET_METADATA_INFO, timeout=self.timeout
        )
        _check(response, f"CONTROLLER_GET_METADATA_INFO to {addr}")
        return GetMetaDataResponseHeader.from_fields(response.ext_fields)

    async def leader(self) -> str:
        """The leading replica's address: one that says it leads (a replica's word for another
        one is checked with that one: it may name a leader that just died). Raises MQError when
        none answers or none leads."""
        last: Exception | None = None
        named: list[str] = []
        for addr in self.addrs:
            try:
                meta = await self.metadata(addr)
            except MQError as exc:
                last = exc
                continue
            if meta.is_leader:
                self._leader = addr
                return addr
            if meta.controller_leader_address and meta.controller_leader_address not in self.addrs:
                named.append(meta.controller_leader_address)
        for addr in dict.fromkeys(named):
            with contextlib.suppress(MQError):
                if (await self.metadata(addr)).is_leader:
                    self._leader = addr
                    return addr
        raise MQError(f"no controller of {self.addrs} leads: {last or 'no leader elected yet'}")

    async def call(self, code: int, header: Any = None, body: bytes = b"") -> RemotingCommand:
        """``code`` to the leader, successful, once more to a new leader when it moved."""
        for attempt in range(2):
            addr = self._leader or await self.leader()
            try:
                response = await self.admin.instance.invoke(addr, code, header, body, timeout=self.timeout)
            except MQError:
                self._leader = None
                if attempt:
                    raise
                continue
            if response.code == ControllerResponseCode.CONTROLLER_NOT_LEADER and not attempt:
                self._leader = None
                continue
            _check(response, f"controller request {code} to {addr}")
            return response
        raise AssertionError("unreachable")

    async def replica_info(self, broker_name: str) -> tuple[GetReplicaInfoResponseHeader, SyncStateSet]:
        """CONTROLLER_GET_REPLICA_INFO: the group's master (header) and SyncStateSet (body)."""
        response = await self.call(
            ControllerRequestCode.CONTROLLER_GET_REPLICA_INFO,
            GetReplicaInfoRequestHeader(broker_name=broker_name),
        )
        header = GetReplicaInfoResponseHeader.from_fields(response.ext_fields)
        sync = SyncStateSet.decode(response.body) if response.body else SyncStateSet()
        return header, sync

    async def sync_state_data(self, broker_names: Sequence[str]) -> BrokerReplicasInfo:
        """CONTROLLER_GET_SYNC_STATE_DATA (``mqadmin getSyncStateSet``): the body is the JSON
        list of broker names."""
        response = await self.call(
            ControllerRequestCode.CONTROLLER_GET_SYNC_STATE_DATA,
            None,
            json.dumps(list(broker_names)).encode(),
        )
        return BrokerReplicasInfo.decode(response.body)

    async def group(self, broker_name: str) -> GroupState:
        data = await self.sync_state_data([broker_name])
        info = data.replicas_info_table.get(broker_name) or ReplicasInfo()
        replicas: dict[int, Replica] = {}
        for in_sync, members in ((True, info.in_sync_replicas), (False, info.not_in_sync_replicas)):
            for member in members:
                if member.broker_id is not None:
                    replicas[member.broker_id] = Replica(
                        member.broker_id, member.broker_address or "", bool(member.alive), in_sync
                    )
        return GroupState(
            broker_name,
            info.master_broker_id,
            info.master_address or None,
            info.master_epoch or 0,
            frozenset(r.broker_id for r in replicas.values() if r.in_sync),
            info.sync_state_set_epoch or 0,
            replicas,
        )


def _check(response: RemotingCommand, what: str) -> None:
    if response.code != ResponseCode.SUCCESS:
        raise MQError(f"{what}: code {response.code} {response.remark or ''}".strip())


# -- the load ----------------------------------------------------------------------------------


@dataclass
class SendRecord:
    """One SYNC send of the load and its outcome."""

    key: str
    worker: int
    seq: int
    started: float
    finished: float = 0.0
    #: a SendStatus name, or "ERROR" when the send raised (``error`` says what)
    status: str = ""
    msg_id: str | None = None
    queue_id: int | None = None
    offset: int | None = None
    error: str | None = None

    @property
    def acked(self) -> bool:
        return self.status == SendStatus.SEND_OK


class SyncLoad:
    """``senders`` tasks sending one message at a time with ``producer`` to ``topic``, each
    message keyed ``<run>-<worker>-<seq>``; every outcome lands in :attr:`records`."""

    def __init__(
        self,
        producer: Producer,
        topic: str,
        *,
        senders: int = 2,
        body_size: int = 128,
        pause: float = 0.0,
    ) -> None:
        self.producer = producer
        self.topic = topic
        self.senders = senders
        self.body_size = body_size
        self.pause = pause
        self.run_id = uuid.uuid4().hex[:8]
        self.records: list[SendRecord] = []
        self._changed = asyncio.Condition()
        self._stopping = False
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        self._stopping = False
        self._tasks = [asyncio.create_task(self._send_loop(worker)) for worker in range(self.senders)]

    async def stop(self) -> None:
        """Let the sends in flight finish (each bounded by the producer's send timeout)."""
        self._stopping = True
        await asyncio.gather(*self._tasks)
        self._tasks = []

    def body(self, key: str) -> bytes:
        unit = f"{key};".encode()
        return (unit * (self.body_size // len(unit) + 1))[: self.body_size]

    async def _send_loop(self, worker: int) -> None:
        seq = 0
        while not self._stopping:
            key = f"{self.run_id}-{worker}-{seq}"
            record = SendRecord(key, worker, seq, time.monotonic())
            try:
                result = await self.producer.send(
                    Message(self.topic, self.body(key), tags="failover", keys=key)
                )
            except MQError as exc:
                record.status, record.error = "ERROR", f"{type(exc).__name__}: {exc}"
            else:
                record.status = str(result.status)
                record.msg_id = result.msg_id
                record.queue_id = result.queue.queue_id
                record.offset = result.queue_offset
            record.finished = time.monotonic()
            async with self._changed:
                self.records.append(record)
                self._changed.notify_all()
            seq += 1
            if record.status == "ERROR":
                await asyncio.sleep(0.05)  # the producer itself already backed off; no spin
            elif self.pause:
                await asyncio.sleep(self.pause)

    def acked(self, after: float | None = None) -> list[SendRecord]:
        return [r for r in self.records if r.acked and (after is None or r.finished > after)]

    async def wait_acked(
        self, count: int, *, after: float | None = None, timeout: float = 30.0
    ) -> SendRecord:
        """Wait until ``count`` sends finishing after ``after`` were acknowledged; the first."""

        def enough() -> bool:
            return len(self.acked(after)) >= count

        try:
            async with self._changed:
                await asyncio.wait_for(self._changed.wait_for(enough), timeout)
        except TimeoutError:
            raise ScenarioError(
                f"{len(self.acked(after))} of {count} sends acknowledged in {timeout:g}s; "
                f"last outcomes: {[(r.key, r.status, r.error) for r in self.records[-3:]]}"
            ) from None
        return min(self.acked(after), key=lambda r: r.finished)


# -- the figures -------------------------------------------------------------------------------


@dataclass
class FailoverFigures:
    old_master: str
    old_epoch: int
    new_master: str
    new_epoch: int
    kill_started: float
    kill_done: float
    #: when the controller was first seen naming another master (polled every ``poll`` s)
    elected_at: float
    #: when the first send finishing after the kill was acknowledged
    first_send_at: float
    errors_during: int = 0

    @property
    def time_to_master(self) -> float:
        return self.elected_at - self.kill_started

    @property
    def time_to_first_send(self) -> float:
        return self.first_send_at - self.kill_started

    def describe(self) -> str:
        return (
            f"master {self.old_master} (epoch {self.old_epoch}) down; new master {self.new_master} "
            f"(epoch {self.new_epoch}) after {self.time_to_master:.3f}s, first acknowledged send after "
            f"{self.time_to_first_send:.3f}s ({self.errors_during} failed sends meanwhile)"
        )


@dataclass(frozen=True)
class StoredMessage:
    key: str
    queue_id: int
    offset: int
    msg_id: str | None


@dataclass
class Tally:
    """What the read-back found against what the load recorded."""

    sent: int
    acked: int
    failed: int
    #: stored with a status other than SEND_OK (FLUSH_SLAVE_TIMEOUT...): in doubt for the client
    not_ok: int
    stored: int
    lost: list[str]
    #: keys read twice, at different (queue, offset): a send stored twice (its first attempt
    #: stored and replicated, its answer lost with the master, the retry stored again)
    duplicated: list[str]
    #: acknowledged keys found, but not at the queue and offset their send result said
    moved: list[str]
    #: keys whose send failed or was in doubt, found anyway
    unacked_stored: list[str]
    #: keys read that the load never sent
    foreign: list[str]

    def describe(self) -> str:
        return (
            f"sent {self.sent}, acked {self.acked}, failed {self.failed}, in doubt {self.not_ok}; read "
            f"{self.stored}: lost {len(self.lost)}, duplicated {len(self.duplicated)}, moved {len(self.moved)}, "
            f"unacked but stored {len(self.unacked_stored)}, foreign {len(self.foreign)}"
        )


def tally(records: Sequence[SendRecord], stored: Sequence[StoredMessage]) -> Tally:
    positions: dict[str, set[tuple[int, int]]] = defaultdict(set)
    for msg in stored:
        positions[msg.key].add((msg.queue_id, msg.offset))
    sent = {r.key: r for r in records}
    acked = [r for r in records if r.acked]
    return Tally(
        sent=len(records),
        acked=len(acked),
        failed=sum(r.status == "ERROR" for r in records),
        not_ok=sum(r.status not in ("ERROR", SendStatus.SEND_OK) for r in records),
        stored=len(positions),
        lost=sorted(r.key for r in acked if r.key not in positions),
        duplicated=sorted(key for key, where in positions.items() if len(where) > 1),
        moved=sorted(
            r.key for r in acked if r.key in positions and (r.queue_id, r.offset) not in positions[r.key]
        ),
        unacked_stored=sorted(r.key for r in records if not r.acked and r.key in positions),
        foreign=sorted(key for key in positions if key not in sent),
    )


def spread(values: Sequence[float]) -> str:
    """``min/median/max`` of some figures."""
    if not values:
        return "-"
    return f"min {min(values):.3f}s / median {statistics.median(values):.3f}s / max {max(values):.3f}s"


# -- the scenario ------------------------------------------------------------------------------


class FailoverScenario:
    """One broker group (``broker_name``) behind ``controllers`` and ``namesrv``, its topic, a
    SYNC load and a master kill; see the module's docstring."""

    def __init__(
        self,
        *,
        namesrv: str,
        controllers: Sequence[str],
        broker_name: str,
        topic: str = "FailoverTopic",
        queue_nums: int = 4,
        senders: int = 2,
        body_size: int = 128,
        send_timeout: float = 3.0,
        retries: int = 2,
        poll: float = 0.05,
    ) -> None:
        self.namesrv = namesrv
        self.broker_name = broker_name
        self.topic = topic
        self.queue_nums = queue_nums
        self.senders = senders
        self.body_size = body_size
        self.send_timeout = send_timeout
        self.retries = retries
        self.poll = poll
        options = ClientOptions(request_timeout=2.0)
        self.admin = Admin(namesrv, instance_name=f"failover-admin-{uuid.uuid4().hex[:6]}", options=options)
        self.controller = ControllerClient(self.admin, controllers)
        self.producer: Producer | None = None
        self._load: SyncLoad | None = None

    async def __aenter__(self) -> FailoverScenario:
        await self.admin.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        with contextlib.suppress(Exception):
            if self._load is not None:
                await asyncio.wait_for(self._load.stop(), self.send_timeout * 2)
        if self.producer is not None:
            with contextlib.suppress(Exception):
                await self.producer.shutdown()
        await self.admin.shutdown()

    @property
    def load(self) -> SyncLoad:
        assert self._load is not None, "start_load() first"
        return self._load

    # -- the group's state ------------------------------------------------------------------

    async def state(self) -> GroupState:
        return await self.controller.group(self.broker_name)

    async def routed_master(self) -> str | None:
        """The group's master address the name server routes (broker id 0), if any."""
        with contextlib.suppress(MQError):
            info = await self.admin.cluster_info()
            data = info.broker_addr_table.get(self.broker_name)
            if data is not None:
                return data.broker_addrs.get(MASTER_ID)
        return None

    async def _until(
        self, what: str, check: Callable[[GroupState], bool], timeout: float, *, routed: bool = True
    ) -> GroupState:
        deadline = time.monotonic() + timeout
        last: GroupState | str = "no answer yet"
        while True:
            try:
                state = await self.state()
            except MQError as exc:
                last = f"controller: {exc}"
            else:
                last = state
                if check(state) and (not routed or await self.routed_master() == state.master_addr):
                    return state
            if time.monotonic() > deadline:
                seen = last.describe() if isinstance(last, GroupState) else last
                raise ScenarioError(f"{what}: not within {timeout:g}s; last seen {seen}")
            await asyncio.sleep(self.poll)

    async def wait_group(self, replicas: int, *, timeout: float = 60.0) -> GroupState:
        """Until the group has a master, ``replicas`` alive replicas all in its SyncStateSet,
        and the name server routes that master."""

        def ready(state: GroupState) -> bool:
            alive = [r for r in state.replicas.values() if r.alive]
            return state.has_master and len(alive) >= replicas and len(state.sync_state_set) >= replicas

        return await self._until(f"{self.broker_name} with {replicas} replicas in sync", ready, timeout)

    async def wait_in_sync(self, broker_id: int, *, timeout: float = 60.0) -> GroupState:
        """Until ``broker_id`` is back in the SyncStateSet (a restarted replica caught up)."""
        return await self._until(
            f"broker id {broker_id} in the SyncStateSet",
            lambda s: s.has_master and broker_id in s.sync_state_set,
            timeout,
        )

    # -- topic and load ---------------------------------------------------------------------

    async def prepare(self, *, timeout: float = 30.0) -> None:
        """Create the topic on every replica (a slave would only get it from the master's
        metadata sync, seconds later) and wait until the name server routes it."""
        state = await self.state()
        header = CreateTopicRequestHeader(
            topic=self.topic, read_queue_nums=self.queue_nums, write_queue_nums=self.queue_nums, perm=6
        )
        if not state.has_master:
            raise ScenarioError(f"no master to create {self.topic} on: {state.describe()}")
        for replica in state.replicas.values():
            if replica.addr == state.master_addr:
                await self.admin.instance.call(replica.addr, RequestCode.UPDATE_AND_CREATE_TOPIC, header)
            elif replica.alive:  # a slave refusing it gets the topic from the master later
                with contextlib.suppress(MQError):
                    await self.admin.instance.call(replica.addr, RequestCode.UPDATE_AND_CREATE_TOPIC, header)
        await self.admin.wait_for_route(
            self.topic,
            brokers=[self.broker_name],
            read_queue_nums=self.queue_nums,
            write_queue_nums=self.queue_nums,
            timeout=timeout,
        )

    async def start_load(self) -> SyncLoad:
        if self.producer is None:
            self.producer = Producer(
                f"failover-{uuid.uuid4().hex[:6]}",
                self.namesrv,
                send_timeout=self.send_timeout,
                retries=self.retries,
                options=ClientOptions(request_timeout=self.send_timeout),
            )
            await self.producer.start()
        self._load = SyncLoad(self.producer, self.topic, senders=self.senders, body_size=self.body_size)
        self._load.start()
        return self._load

    async def stop_load(self) -> None:
        if self._load is not None:
            await self._load.stop()

    # -- the kill ---------------------------------------------------------------------------

    async def kill_master(
        self, kill: Kill, *, elect_timeout: float = 30.0, resume_timeout: float = 30.0
    ) -> FailoverFigures:
        """Kill the current master with ``kill(addr)`` under the running load; measure until a
        new master is elected (the controller names another one) and a send is acknowledged
        again."""
        before = await self.state()
        if not before.has_master:
            raise ScenarioError(f"no master to kill: {before.describe()}")
        assert before.master_addr is not None
        kill_started = time.monotonic()
        await kill(before.master_addr)
        kill_done = time.monotonic()

        async def elected() -> tuple[float, GroupState]:
            deadline = kill_done + elect_timeout
            last: str = "no answer"
            while True:
                try:
                    header, _ = await self.controller.replica_info(self.broker_name)
                except MQError as exc:
                    last = str(exc)
                else:
                    last = f"master {header.master_broker_id}@{header.master_address} epoch {header.master_epoch}"
                    if header.master_address and header.master_address != before.master_addr:
                        return time.monotonic(), await self.state()
                if time.monotonic() > deadline:
                    raise ScenarioError(f"no new master within {elect_timeout:g}s of the kill; last {last}")
                await asyncio.sleep(self.poll)

        electing = asyncio.create_task(elected())
        resuming = asyncio.create_task(
            self.load.wait_acked(1, after=kill_done, timeout=max(elect_timeout, resume_timeout))
        )
        try:
            (elected_at, after), first = await electing, await resuming
        finally:
            for task in (electing, resuming):
                task.cancel()
        assert after.master_addr is not None
        return FailoverFigures(
            old_master=before.master_addr,
            old_epoch=before.master_epoch,
            new_master=after.master_addr,
            new_epoch=after.master_epoch,
            kill_started=kill_started,
            kill_done=kill_done,
            elected_at=elected_at,
            first_send_at=first.finished,
            errors_during=sum(
                r.status == "ERROR" for r in self.load.records if kill_started <= r.finished <= first.finished
            ),
        )

    # -- reading back -----------------------------------------------------------------------

    async def read_all(self, addr: str | None = None, *, timeout: float = 30.0) -> list[StoredMessage]:
        """Every message of the topic, pulled queue by queue from offset 0 from ``addr`` (the
        routed master by default)."""
        addr = addr or await self.routed_master()
        if addr is None:
            raise ScenarioError(f"no master of {self.broker_name} routed to read from")
        group = f"failover-audit-{uuid.uuid4().hex[:6]}"
        stored: list[StoredMessage] = []
        deadline = time.monotonic() + timeout
        for queue_id in range(self.queue_nums):
            queue = MessageQueue(topic=self.topic, broker_name=self.broker_name, queue_id=queue_id)
            offset = 0
            while True:
                try:
                    response = await pull_raw(
                        self.admin.instance,
                        group,
                        queue,
                        offset,
                        max_nums=32,
                        suspend=0,
                        timeout=5.0,
                        expression="*",
                        addr=addr,
                    )
                except MQError:
                    if time.monotonic() > deadline:
                        raise
                    await asyncio.sleep(0.2)
                    continue
                if response.code not in (
                    ResponseCode.SUCCESS,
                    ResponseCode.PULL_NOT_FOUND,
                    ResponseCode.PULL_RETRY_IMMEDIATELY,
                    ResponseCode.PULL_OFFSET_MOVED,
                ):
                    raise ScenarioError(
                        f"pull of {queue} at {offset} from {addr}: {response.code} {response.remark}"
                    )
                header = PullMessageResponseHeader.from_fields(response.ext_fields)
                if response.code == ResponseCode.SUCCESS and response.body:
                    for msg in decode_records(response.body):
                        stored.append(_stored(msg))
                if header.next_begin_offset <= offset:
                    break
                offset = header.next_begin_offset
        return stored

    async def audit(self, addr: str | None = None, *, timeout: float = 30.0) -> Tally:
        """The load's records against everything read back from ``addr`` (the routed master)."""
        return tally(self.load.records, await self.read_all(addr, timeout=timeout))

    # -- all of it --------------------------------------------------------------------------

    async def run(
        self,
        kill: Kill,
        *,
        replicas: int,
        before: int = 100,
        after: int = 100,
        ready_timeout: float = 60.0,
        elect_timeout: float = 30.0,
    ) -> tuple[FailoverFigures, Tally]:
        """The whole scenario: group ready, topic, load, ``before`` acks, the kill, ``after``
        more acks, the load stopped, the read-back from the new master."""
        await self.wait_group(replicas, timeout=ready_timeout)
        await self.prepare()
        await self.start_load()
        await self.load.wait_acked(before)
        figures = await self.kill_master(kill, elect_timeout=elect_timeout)
        await self.load.wait_acked(after, after=figures.first_send_at - 1e-6)
        await self.stop_load()
        await self._until(
            f"the new master {figures.new_master} routed", lambda s: s.master_addr == figures.new_master, 30.0
        )
        return figures, await self.audit(figures.new_master)


def _stored(msg: MessageExt) -> StoredMessage:
    keys = msg.keys
    return StoredMessage(keys[0] if keys else "", msg.queue_id, msg.queue_offset, msg.unique_id)
