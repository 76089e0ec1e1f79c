"""Clients fail over (issue 41): each client family keeps sending and consuming through a
controller-mode master failover, on loopback.

One cluster for the module: our name server with the controller embedded
(``enableControllerInNamesrv``) and two of our brokers of one group in controller mode
(``allAckInSyncStateSet``, each also serving gRPC in local mode). Per client family, one test:

- the client runs a producer under a continuous load (one SYNC send at a time) and a consumer
  of a group of its own, on a topic of its own;
- once both run and the group has committed an offset on every queue, the master broker
  process gets kill -9;
- sends must resume (acknowledged by the new master) within the family's bound
  (:data:`BOUNDS`), printed with the measured gap from the kill to the first acknowledged send;
- every acknowledged message is consumed (duplicates allowed, counted and printed);
- the group's committed offsets on the new master (QUERY_CONSUMER_OFFSET asked of it) are not
  behind those the old master held just before the kill, and once everything is consumed they
  reach the queues' ends. What the new master held at its election is printed too: the slave
  copies the master's offsets every 10 s (broker/ha/slave_sync.py, as Apache's slave does), so
  it is the clients that bring the offsets committed since then.

Before each test the group is made whole again: the previous test's killed broker is restarted
(same store, same controller id) and must be back in the SyncStateSet, as a slave.

The families: our SDK (Producer and PushConsumer, in this process), Apache's Java client 4.9.8
and the 5.3.2 remoting client (DefaultMQProducer and DefaultMQPushConsumer:
``interop.Scenarios``' scenario ``failover``, built on each), and the official 5.x Python gRPC
client 5.1.2 (Producer and SimpleConsumer, see :func:`py5_main` for why not its PushConsumer;
this module run as a program, ``python -m tests.interop.test_controller_clients py5 JSON``, the
client on PYTHONPATH: tests/grpc/py5_client.py says why it runs apart).

The bounds follow each client's route refresh: ours asks for a topic's route as soon as a send
or a pull fails; the Java clients ask the name server every ``pollNameServerInterval`` (30 s by
default, 5 s here: :data:`JAVA_POLL_MS`); the 5.x Python client re-queries routes 10 s after
its start and every 30 s after that (not configurable), whatever fails meanwhile.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import json
import os
import re
import sys
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from aiorocketmq.client import ConsumeFrom, ConsumeResult, Message, MQError, Producer, PushConsumer
from aiorocketmq.client.client_instance import ClientOptions
from aiorocketmq.protocol.body import MessageQueue
from aiorocketmq.protocol.codes import RequestCode
from aiorocketmq.protocol.errors import QueryNotFoundError
from aiorocketmq.protocol.headers import (
    OffsetResponseHeader,
    QueryConsumerOffsetRequestHeader,
    QueryConsumerOffsetResponseHeader,
    QueueRequestHeader,
)
from aiorocketmq.protocol.message import MessageExt
from tests.cluster import Cluster
from tests.controller.failover import FailoverScenario
from tests.interop.harness import Toolchain, free_port
from tests.support import die_with_parent

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(300)]

REPO = Path(__file__).resolve().parents[2]
GROUP = "broker-fo"
REPLICAS = ("n1", "n2")
QUEUES = 4
#: Acknowledged sends before the kill, and after the first one acknowledged after it.
BEFORE, AFTER = 100, 100
#: The Java clients' pollNameServerInterval here (their default is 30 s).
JAVA_POLL_MS = 5000
#: Seconds from the kill to the first acknowledged send, by family.
BOUNDS = {"sdk": 10.0, "java": JAVA_POLL_MS / 1000 + 7.0, "grpc": 30.0 + 10.0}
GRPC_PORT = re.compile(r"gRPC endpoint for 5.x clients on \S+ port (\d+)")

#: Our brokers in controller mode, as Apache's quick-start broker-n0.conf sets Apache's, periods
#: shortened for a test (tests/interop/test_controller_mode_apache.py's settings).
CONTROLLER_BROKER: dict[str, object] = {
    "brokerName": GROUP,
    "brokerId": -1,
    "brokerRole": "SLAVE",
    "enableControllerMode": "true",
    "allAckInSyncStateSet": "true",
    "syncBrokerMetadataPeriod": 1000,
    "checkSyncStateSetPeriod": 1000,
    "controllerHeartBeatTimeoutMills": 3000,
    "haMaxTimeSlaveNotCatchup": 5000,
    "enableGrpcServer": "true",
}


# -- the cluster ---------------------------------------------------------------------------------


@dataclass
class ReplicaGroup:
    cluster: Cluster
    controller_addr: str
    killed: set[str] = field(default_factory=set)

    async def start(self, name: str) -> None:
        broker = await self.cluster.start_broker(
            name, controllerAddr=self.controller_addr, **CONTROLLER_BROKER
        )
        assert broker.process is not None
        await broker.process.wait_for_line(r"is now (SYNC_MASTER|SLAVE) \(brokerId \d+\)", timeout=60)
        self.killed.discard(name)

    async def make_whole(self, scenario: FailoverScenario) -> None:
        """Restart what a test killed; until both replicas are alive and in sync, routed."""
        for name in REPLICAS:
            if name in self.killed or name not in self.cluster.brokers:
                await self.start(name)
        await scenario.wait_group(len(REPLICAS), timeout=60)

    def name_of(self, addr: str) -> str:
        return next(name for name, b in self.cluster.brokers.items() if b.addr == addr)

    async def kill(self, addr: str) -> None:
        name = self.name_of(addr)
        await self.cluster.kill_broker(name)
        self.killed.add(name)

    def grpc_endpoints(self) -> str:
        ports = []
        for broker in self.cluster.brokers.values():
            assert broker.process is not None
            found = GRPC_PORT.findall(broker.process.output)
            assert found, f"{broker.name} serves no gRPC"
            ports.append(int(found[-1]))
        return ";".join(f"127.0.0.1:{port}" for port in ports)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def group(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ReplicaGroup]:
    root = tmp_path_factory.mktemp("controller-clients")
    cluster = Cluster(root)
    peer, raft = free_port(), free_port()
    await cluster.start_namesrv(
        bindAddress="127.0.0.1",
        enableControllerInNamesrv=True,
        controllerDLegerGroup="group1",
        controllerDLegerPeers=f"n0-127.0.0.1:{peer}",
        controllerRaftPeers=f"n0-127.0.0.1:{raft}",
        controllerDLegerSelfId="n0",
        controllerStorePath=str(root / "controller"),
    )
    replicas = ReplicaGroup(cluster, f"127.0.0.1:{peer}")
    try:
        for name in REPLICAS:  # one after the other: n1 becomes master with controller id 1
            await replicas.start(name)
        yield replicas
    finally:
        await cluster.stop()
        for name, broker in cluster.brokers.items():  # shown when a test fails
            if broker.process is not None:
                print(f"---- our broker {name} ----\n{broker.process.output[-20000:]}")


# -- what a client did --------------------------------------------------------------------------


@dataclass
class Sent:
    key: str
    acked: bool
    started: float  # wall clock, seconds
    at: float
    error: str = ""


class ClientRun(abc.ABC):
    """One client's producer and consumer: every send outcome and delivery, as they happen."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.sends: list[Sent] = []
        self.received: Counter[str] = Counter()
        self.first_received: dict[str, float] = {}
        self.stopped = False
        self._changed = asyncio.Condition()

    async def note(self, event: dict[str, Any]) -> None:
        kind = event.get("event")
        if kind in ("sent", "senderror"):
            ok = kind == "sent" and event.get("status") == "SEND_OK"
            error = event.get("error", "") or ("" if ok else str(event.get("status")))
            self.sends.append(Sent(event["keys"], ok, event["started"] / 1000, event["at"] / 1000, error))
        elif kind == "recv":
            self.received[event["keys"]] += 1
            self.first_received.setdefault(event["keys"], event["at"] / 1000)
        elif kind == "stopped":
            self.stopped = True
        async with self._changed:
            self._changed.notify_all()

    def acked(self, after: float = 0.0) -> list[Sent]:
        return [s for s in self.sends if s.acked and s.at > after]

    async def until(self, what: str, check: Callable[[], bool], timeout: float) -> None:
        try:
            async with asyncio.timeout(timeout), self._changed:
                await self._changed.wait_for(lambda: check() or self.ended())
        except TimeoutError:
            raise AssertionError(f"{self.label}: {what} not within {timeout:g}s; {self.describe()}") from None
        if not check():
            raise AssertionError(f"{self.label}: ended before {what}; {self.describe()}")

    def ended(self) -> bool:
        return False

    def describe(self) -> str:
        last = [(s.key, s.error or "ok") for s in self.sends[-3:]]
        return f"{len(self.acked())} acked of {len(self.sends)} sends, {len(self.received)} consumed; last {last}"

    @abc.abstractmethod
    async def stop_sending(self) -> None:
        """Stop the send loop (the consumer goes on)."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Stop the client and reap whatever runs it."""


class SdkRun(ClientRun):
    """Our SDK in this process: a Producer and a PushConsumer, each on a client instance of its
    own (the consumer must find the new master itself)."""

    def __init__(self, namesrv: str, topic: str, consumer_group: str) -> None:
        super().__init__("sdk")
        tag = uuid.uuid4().hex[:6]
        self.producer = Producer(
            f"fo-pg-{tag}", namesrv, send_timeout=3.0, retries=2, instance_name=f"fo-p-{tag}"
        )
        self.consumer = PushConsumer(
            consumer_group,
            namesrv,
            consume_from=ConsumeFrom.FIRST_OFFSET,
            instance_name=f"fo-c-{tag}",
            options=ClientOptions(persist_offset_interval=1.0),
        )
        self.consumer.subscribe(topic)
        self.consumer.listener(self._consume)
        self.topic = topic
        self._sending = True
        self._sender: asyncio.Task[None] | None = None

    async def _consume(self, messages: list[MessageExt]) -> ConsumeResult:
        for msg in messages:
            await self.note({"event": "recv", "keys": msg.keys[0], "at": time.time() * 1000})
        return ConsumeResult.SUCCESS

    async def start(self) -> SdkRun:
        await self.consumer.start()
        await self.producer.start()
        self._sender = asyncio.create_task(self._send_loop())
        return self

    async def _send_loop(self) -> None:
        i = 0
        while self._sending:
            key = f"sdk-{i}"
            started = time.time() * 1000
            try:
                result = await self.producer.send(
                    Message(self.topic, key.encode() * 8, tags="failover", keys=key)
                )
            except MQError as exc:
                event = {"event": "senderror", "error": f"{type(exc).__name__}: {exc}"}
            else:
                event = {"event": "sent", "status": str(result.status)}
            await self.note({**event, "keys": key, "started": started, "at": time.time() * 1000})
            if event["event"] == "senderror":
                await asyncio.sleep(0.05)
            i += 1

    async def stop_sending(self) -> None:
        self._sending = False
        if self._sender is not None:
            await self._sender

    async def close(self) -> None:
        await self.stop_sending()
        await self.producer.shutdown()
        await self.consumer.shutdown()


class ProcessRun(ClientRun):
    """A client program printing JSON lines (``sent``/``senderror``/``recv``/``stopped``) and
    reading ``stop`` (end the sends) and ``quit`` on its stdin."""

    def __init__(self, label: str, argv: list[str], *, cwd: Path, env: dict[str, str] | None = None) -> None:
        super().__init__(label)
        self.argv, self.cwd, self.env = argv, cwd, env or {}
        self.log = cwd / f"{label}.log"
        self.proc: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task[None] | None = None
        self.tail: list[str] = []

    async def start(self) -> ProcessRun:
        self.cwd.mkdir(parents=True, exist_ok=True)
        log = os.open(self.log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            self.proc = await asyncio.create_subprocess_exec(
                *self.argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=log,
                cwd=self.cwd,
                env={**os.environ, **self.env},
                preexec_fn=die_with_parent,
                limit=1 << 20,
            )
        finally:
            os.close(log)
        self._reader = asyncio.create_task(self._read())
        return self

    async def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        async for raw in self.proc.stdout:
            line = raw.decode(errors="replace").strip()
            event: dict[str, Any] | None = None
            if line.startswith("{"):
                with contextlib.suppress(json.JSONDecodeError):
                    event = json.loads(line)
            if event is not None and event.get("event") in ("sent", "senderror", "recv", "stopped"):
                await self.note(event)
            else:
                self.tail = [*self.tail[-20:], line]
        async with self._changed:
            self._changed.notify_all()

    def ended(self) -> bool:
        return self._reader is not None and self._reader.done()

    def describe(self) -> str:
        stderr = self.log.read_text(errors="replace")[-3000:] if self.log.exists() else ""
        return f"{super().describe()}\nstdout tail: {self.tail}\nstderr tail: {stderr}"

    async def _say(self, line: str) -> None:
        assert self.proc is not None and self.proc.stdin is not None
        with contextlib.suppress(ConnectionError):
            self.proc.stdin.write(f"{line}\n".encode())
            await self.proc.stdin.drain()

    async def stop_sending(self) -> None:
        await self._say("stop")
        await self.until("the sends stopped", lambda: self.stopped, 30)

    async def close(self) -> None:
        if self.proc is None:
            return
        await self._say("quit")
        try:
            await asyncio.wait_for(self.proc.wait(), 30)
        except TimeoutError:
            self.proc.kill()
            await self.proc.wait()
        if self._reader is not None:
            await self._reader


# -- the scenario ---------------------------------------------------------------------------------


async def committed(scenario: FailoverScenario, addr: str, consumer_group: str, topic: str) -> dict[int, int]:
    """QUERY_CONSUMER_OFFSET asked of the broker at ``addr``, queue by queue (-1: none)."""
    offsets: dict[int, int] = {}
    for queue_id in range(QUEUES):
        header = QueryConsumerOffsetRequestHeader(
            consumer_group=consumer_group, topic=topic, queue_id=queue_id
        )
        try:
            response = await scenario.admin.instance.call(addr, RequestCode.QUERY_CONSUMER_OFFSET, header)
        except QueryNotFoundError:
            offsets[queue_id] = -1
        else:
            offsets[queue_id] = QueryConsumerOffsetResponseHeader.from_fields(response.ext_fields).offset
    return offsets


async def max_offsets(scenario: FailoverScenario, addr: str, topic: str) -> dict[int, int]:
    """GET_MAX_OFFSET asked of the broker at ``addr``, queue by queue."""
    offsets: dict[int, int] = {}
    for queue_id in range(QUEUES):
        header = QueueRequestHeader(topic=topic, queue_id=queue_id)
        response = await scenario.admin.instance.call(addr, RequestCode.GET_MAX_OFFSET, header)
        offsets[queue_id] = OffsetResponseHeader.from_fields(response.ext_fields).offset
    return offsets


async def poll(
    what: str, check: Callable[[], Awaitable[bool]], timeout: float, interval: float = 0.1
) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout:g}s")
        await asyncio.sleep(interval)


@dataclass
class Figures:
    label: str
    old_master: str
    new_master: str
    elected_after: float
    gap: float
    errors_during: int
    acked: int
    consumed: int
    lost: list[str]
    duplicated: int
    consumer_gap: float
    before: dict[int, int]
    at_election: dict[int, int]
    final: dict[int, int]
    max_offsets: dict[int, int]

    def describe(self) -> str:
        return (
            f"[{self.label}] master {self.old_master} killed; {self.new_master} elected after "
            f"{self.elected_after:.3f}s; first acknowledged send {self.gap:.3f}s after the kill "
            f"({self.errors_during} failed sends meanwhile); first message sent after the kill consumed "
            f"{self.consumer_gap:.3f}s after the kill\n"
            f"[{self.label}] acked {self.acked}, consumed {self.consumed} distinct, lost {len(self.lost)}, "
            f"duplicated {self.duplicated}\n"
            f"[{self.label}] committed offsets: old master before the kill {self.before}, new master at its "
            f"election {self.at_election}, new master at the end {self.final} (queue ends {self.max_offsets})"
        )


async def run_failover(
    group: ReplicaGroup,
    label: str,
    topic: str,
    consumer_group: str,
    start: Callable[[], Awaitable[ClientRun]],
    *,
    seed_offsets: bool = False,
) -> Figures:
    async with FailoverScenario(
        namesrv=group.cluster.namesrv_addr,
        controllers=[group.controller_addr],
        broker_name=GROUP,
        topic=topic,
        queue_nums=QUEUES,
    ) as scenario:
        await group.make_whole(scenario)
        await scenario.prepare()
        state = await scenario.state()
        master = state.master_addr
        assert master is not None
        if seed_offsets:  # a POP group starts at the queues' ends unless it has offsets
            for q in range(QUEUES):
                await scenario.admin.update_consumer_offset(
                    consumer_group, MessageQueue(topic=topic, broker_name=GROUP, queue_id=q), 0
                )
        run = await start()
        try:
            await run.until(
                f"{BEFORE} acked and {BEFORE // 2} consumed",
                lambda: len(run.acked()) >= BEFORE and len(run.received) >= BEFORE // 2,
                60,
            )

            async def all_committed() -> bool:
                return all(o > 0 for o in (await committed(scenario, master, consumer_group, topic)).values())

            await poll(f"{label}: offsets of every queue committed on the master", all_committed, 30)
            before = await committed(scenario, master, consumer_group, topic)

            kill_at = time.time()
            await group.kill(master)
            dead_at = time.time()
            at_election: dict[int, int] = {}
            elected: list[float] = []

            async def new_master_named() -> bool:
                with contextlib.suppress(MQError):
                    header, _ = await scenario.controller.replica_info(GROUP)
                    if header.master_address and header.master_address != master:
                        elected.append(time.time())
                        with contextlib.suppress(MQError):
                            at_election.update(
                                await committed(scenario, header.master_address, consumer_group, topic)
                            )
                        return True
                return False

            await poll(f"{label}: a new master elected", new_master_named, 30, interval=0.05)
            await run.until("a send acknowledged after the kill", lambda: bool(run.acked(dead_at)), 90)
            first = min(run.acked(dead_at), key=lambda s: s.at)
            await run.until(
                f"{AFTER} sends acknowledged after the kill", lambda: len(run.acked(dead_at)) >= AFTER, 60
            )
            await run.stop_sending()
            acked = {s.key for s in run.acked()}
            await run.until("every acknowledged message consumed", lambda: acked <= set(run.received), 90)
            new_master = await scenario.routed_master()
            assert new_master is not None and new_master != master

            ends = await max_offsets(scenario, new_master, topic)

            async def caught_up() -> bool:
                # Everything is consumed: the group's commits reach the queues' ends.
                now = await committed(scenario, new_master, consumer_group, topic)
                return all(now[q] >= ends[q] for q in range(QUEUES))

            with contextlib.suppress(AssertionError):  # checked with the figures
                await poll(f"{label}: offsets on the new master", caught_up, 20, interval=0.2)
            final = await committed(scenario, new_master, consumer_group, topic)
            after_kill = [
                run.first_received[s.key] for s in run.acked(dead_at) if s.key in run.first_received
            ]
            return Figures(
                label=label,
                old_master=master,
                new_master=new_master,
                elected_after=elected[0] - kill_at,
                gap=first.at - kill_at,
                errors_during=sum(not s.acked and kill_at <= s.at <= first.at for s in run.sends),
                acked=len(acked),
                consumed=len(run.received),
                lost=sorted(acked - set(run.received)),
                duplicated=sum(n - 1 for n in run.received.values() if n > 1),
                consumer_gap=(min(after_kill) - kill_at) if after_kill else float("nan"),
                before=before,
                at_election=at_election,
                final=final,
                max_offsets=ends,
            )
        finally:
            await run.close()


def check(figures: Figures, bound: float, *, consumer_bound: float | None = None) -> None:
    """The family's figures printed, then: sends resumed within ``bound`` seconds (and, with
    ``consumer_bound``, the first message sent after the kill consumed within that), nothing
    acknowledged went unconsumed, the new master's committed offsets are not behind the old
    master's before the kill and, everything being consumed, reach the queues' ends."""
    print(f"\n{figures.describe()}")
    assert figures.gap < bound, figures.describe()
    if consumer_bound is not None:
        assert figures.consumer_gap < consumer_bound, figures.describe()
    assert not figures.lost, f"acknowledged, never consumed: {figures.lost[:20]}"
    behind = {
        q: (figures.before[q], figures.final[q])
        for q in figures.before
        if figures.final[q] < figures.before[q]
    }
    assert not behind, f"committed offsets behind on the new master (before, after): {behind}"
    assert figures.final == figures.max_offsets, figures.describe()


def unique(prefix: str) -> str:
    return f"{prefix}_{os.getpid()}_{uuid.uuid4().hex[:6]}"


# -- the client families ---------------------------------------------------------------------------


async def test_our_sdk_fails_over(group: ReplicaGroup) -> None:
    topic, consumer_group = unique("FoSdk"), unique("fo_sdk_cg")

    async def start() -> ClientRun:
        return await SdkRun(group.cluster.namesrv_addr, topic, consumer_group).start()

    # Its consumer asks for the route as soon as a pull fails (client/pull_loop.py): it moves
    # within seconds, not at the next periodic refresh (30 s).
    figures = await run_failover(group, "sdk", topic, consumer_group, start)
    check(figures, BOUNDS["sdk"], consumer_bound=BOUNDS["sdk"])


async def java_failover(toolchain: Toolchain, group: ReplicaGroup, label: str, home: Path) -> None:
    prefix = unique(f"J{label.replace('.', '')}")
    topic, consumer_group = f"{prefix}_failover", f"{prefix}_failover_cg"
    props = {
        "user.home": str(home),
        "rocketmq.client.logRoot": str(home / "logs"),
        "rocketmq.client.localOffsetStoreDir": str(home / "offsets"),
        "failover.pollNameServerInterval": str(JAVA_POLL_MS),
    }
    argv = toolchain.java_command(
        "interop.Scenarios",
        [f"namesrv={group.cluster.namesrv_addr}", f"prefix={prefix}", "scenarios=failover", "timeout=60"],
        props,
    )

    async def start() -> ClientRun:
        return await ProcessRun(f"java-{label}", argv, cwd=home).start()

    check(await run_failover(group, f"java {label}", topic, consumer_group, start), BOUNDS["java"])


async def test_java_498_fails_over(group: ReplicaGroup, java_toolchain: Toolchain, tmp_path: Path) -> None:
    await java_failover(java_toolchain, group, "4.9.8", tmp_path)


async def test_java_532_fails_over(group: ReplicaGroup, java53_toolchain: Toolchain, tmp_path: Path) -> None:
    await java_failover(java53_toolchain, group, "5.3.2", tmp_path)


async def test_grpc_python_client_fails_over(group: ReplicaGroup, tmp_path: Path) -> None:
    from tests.grpc.conftest import install_py5_client

    client_path = await asyncio.to_thread(install_py5_client)
    topic, consumer_group = unique("FoGrpc"), unique("fo_grpc_cg")

    async def start() -> ClientRun:
        args = {"endpoints": group.grpc_endpoints(), "topic": topic, "group": consumer_group}
        argv = [sys.executable, "-m", "tests.interop.test_controller_clients", "py5", json.dumps(args)]
        env = {"PYTHONPATH": f"{client_path}{os.pathsep}{REPO}"}
        return await ProcessRun("grpc-py5", argv, cwd=tmp_path, env=env).start()

    figures = await run_failover(group, "grpc py5", topic, consumer_group, start, seed_offsets=True)
    check(figures, BOUNDS["grpc"])


# -- the 5.x Python client's side (run as a program) ----------------------------------------------


def py5_main(args: dict[str, Any]) -> None:  # pragma: no cover - runs in the child process
    """The official 5.x Python client: a SimpleConsumer of ``group`` (receive, then ack each
    message) and a send loop on ``topic``, both on ``endpoints`` (every broker's gRPC endpoint,
    ``;``-separated), printing JSON lines.

    Not its PushConsumer: in 5.1.2 that one retries a failed ack in the consumption thread,
    sleeping, until it succeeds; the acks of what the dead master delivered never do, and once
    every consumption thread is stuck in such a retry nothing is consumed again."""
    import threading

    from rocketmq import (
        ClientConfiguration,
        Credentials,
        FilterExpression,
        SimpleConsumer,
    )
    from rocketmq import (
        Message as Py5Message,
    )
    from rocketmq import (
        Producer as Py5Producer,
    )

    lock = threading.Lock()

    def emit(event: str, **fields: Any) -> None:
        with lock:
            print(json.dumps({"event": event, **fields}), flush=True)

    def now() -> int:
        return int(time.time() * 1000)

    config = ClientConfiguration(args["endpoints"], Credentials("", ""), request_timeout=3)
    consumer = SimpleConsumer(config, args["group"], {args["topic"]: FilterExpression("*")}, await_duration=2)
    consumer.startup()
    producer = Py5Producer(config, (args["topic"],))
    producer.startup()
    sending, consuming = threading.Event(), threading.Event()
    sending.set()
    consuming.set()

    def send_loop() -> None:
        i = 0
        while sending.is_set():
            key = f"py5-{i}"
            msg = Py5Message()
            msg.topic = args["topic"]
            msg.body = key.encode() * 8
            msg.tag = "failover"
            msg.keys = key
            started = now()
            try:
                producer.send(msg)
            except Exception as exc:
                emit("senderror", keys=key, error=f"{type(exc).__name__}: {exc}", started=started, at=now())
                time.sleep(0.05)
            else:
                emit("sent", keys=key, status="SEND_OK", started=started, at=now())
            i += 1

    def consume_loop() -> None:
        while consuming.is_set():
            try:
                received = consumer.receive(16, 15) or []
            except Exception:
                time.sleep(0.2)  # the client logs it; the next receive may go elsewhere
                continue
            for msg in received:
                emit("recv", keys=sorted(msg.keys or [""])[0], at=now())
                with contextlib.suppress(Exception):  # unacknowledged: delivered again
                    consumer.ack(msg)

    threads = [threading.Thread(target=send_loop), threading.Thread(target=consume_loop)]
    for thread in threads:
        thread.start()
    for line in sys.stdin:
        if line.strip() == "stop":
            sending.clear()
            threads[0].join()
            emit("stopped")
        elif line.strip() == "quit":
            break
    sending.clear()
    consuming.clear()
    for thread in threads:
        thread.join()
    producer.shutdown()
    consumer.shutdown()


if __name__ == "__main__":  # pragma: no cover
    if sys.argv[1] == "py5":
        py5_main(json.loads(sys.argv[2]))
        sys.stdout.flush()
        os._exit(0)  # the client's scheduler threads may linger
