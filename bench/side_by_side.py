"""aiorocketmq side by side with the brokers users compare it with, on the same machine, the
same loads, in turn.

The references (``--reference``, default all three):

* ``4.9.7``: Apache RocketMQ 4.9.7 (name server + broker on Java 17, ``-Xms1g -Xmx1g``, G1 as
  Apache's ``runbroker.sh``);
* ``5.3.3``: Apache RocketMQ 5.3.3, the same JVM settings, its broker's defaults (a 16 MiB timer
  log like the commit log's files, as tests/interop/harness.py's APACHE5_BROKER);
* ``rust``: rocketmq-rust 1.0.0 (crates.io ``rocketmq-namesrv`` and ``rocketmq-broker``),
  installed by ``cargo install`` into the interop cache on first use and configured as
  bench/rust_reference.py says.

Each round starts every system in turn (ours and each reference, the first rotating from
round to round), each with a fresh store per message size (``--sizes``, default 128 and 1,024
bytes, Apache's ``producer.sh -s 1024``), the same broker settings (ASYNC_FLUSH) and the same
topic (8 queues), and drives each with:

* ``producer``: the Java load (``tests/interop/java/.../benchload/Load.java``, the official
  rocketmq-client 4.9.8) as Apache's ``Producer -w 16 -s SIZE``: 16 threads of sync sends;
* ``batch``: as ``BatchProducer -b 32`` (16 threads, batches of 32 messages);
* ``lean``: 16 batches of 32 in flight from ``bench/batch_load.c`` (below), which
  costs a fraction of a microsecond a message where the Java client costs 3-4: what each
  broker does when the client is not taking half the machine;
* ``consumer``: as ``Consumer``: one push consumer (20 threads) draining what ``producer`` sent;
* ``cpp``: ``bench/cpp_load.c``, the official C++ client, 16 threads of sync sends;
* ``e2e``: end-to-end latency at 5,000 msg/s (paced sync sends, a push consumer in the same JVM,
  latency from the send call to the listener);
* ``sync64``: the broker restarted with SYNC_FLUSH, 64 threads of sync sends.

``--loads`` picks some of them.
For each it records TPS (messages/s), average / max / p99 RT, the broker's CPU per message
(utime + stime from ``/proc/<pid>/stat`` over the measuring window), the broker's peak RSS
(``VmHWM``) and its start-up time (process spawn to the first SEND_OK from the broker itself).
Ours only: ``scale`` (2 broker processes in one cluster vs 1, batched sends: once with the Java
``BatchProducer`` load, once with ``bench/batch_load.c``, a load that replays pre-encoded
batches for a few microseconds each, so that the brokers rather than the client decide how
far two processes get on two cores), ``disk`` (1 KiB batches from the lean load under
ASYNC_FLUSH and SYNC_FLUSH: the commit log's write rate beside ``dd``'s direct-I/O rate on the
same file system, measured just before) and ``topics``
(1,000 topics x 8 queues vs one topic, sync sends; and a broker with 10,000 topics: time until
the name server lists them all, and how long ``topicList`` takes).

Output: one line per measurement as it goes, then one table per reference and size: per round
the ratio ours/reference and the median of the rounds.

Run: ``.venv/bin/python -m bench.side_by_side`` (5 rounds, 10 s windows; about 25 minutes on two
cores), ``--quick`` (3 rounds, 5 s windows), ``--rounds N``, ``--ours-only`` (``--only scale``,
``--only topics``, ``--only 10k`` or ``--only disk``: just that part). Needs java 17, mvn and
gcc (what the interop suite needs), and cargo for the rocketmq-rust reference; the first run
builds the Java load and fetches Apache's jars through tests/interop/harness.py.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from aiorocketmq.protocol.codes import RequestCode  # noqa: E402
from aiorocketmq.protocol.command import RemotingCommand  # noqa: E402
from aiorocketmq.protocol.headers import SendMessageRequestHeaderV2  # noqa: E402
from aiorocketmq.protocol.message import (  # noqa: E402
    Message,
    PropertyKey,
    UniqueIdGenerator,
    encode_batch,
    encode_properties,
)
from bench import rust_reference  # noqa: E402
from bench.broker_bench import build_cpp_load  # noqa: E402
from bench.machine import summary as machine_summary  # noqa: E402
from bench.procs import free_port, wait_port  # noqa: E402
from tests.interop.harness import (  # noqa: E402
    APACHE5_BROKER,
    CACHE,
    Toolchain,
    build_java53_only,
    build_java_only,
    rocketmq_home,
)

#: The systems ours is compared with (``--reference``), by key.
REFERENCES = {
    "4.9.7": "Apache RocketMQ 4.9.7",
    "5.3.3": "Apache RocketMQ 5.3.3",
    "rust": "rocketmq-rust 1.0.0",
}
#: Apache's releases: each one's name server + broker classpath, built (and cached) on first use.
APACHE_SERVERS: dict[str, Callable[[], str]] = {
    "4.9.7": functools.cache(lambda: build_java_only().server_classpath),
    "5.3.3": functools.cache(lambda: build_java53_only().server_classpath),
}
TOPIC = "SideBySide"
QUEUES = 8
BATCH_LOAD = Path(__file__).with_name("batch_load.c")
#: Consume-queue file size for the 1,000-topic run (6,000 entries of 20 bytes).
MANY_TOPICS_CQ_FILE = 6000 * 20
#: Apache's runbroker.sh options, with the heap the issue asks for on a small machine.
APACHE_BROKER_JVM = [
    "-server",
    "-Xms1g",
    "-Xmx1g",
    "-XX:+UseG1GC",
    "-XX:G1HeapRegionSize=16m",
    "-XX:G1ReservePercent=25",
    "-XX:InitiatingHeapOccupancyPercent=30",
    "-XX:SoftRefLRUPolicyMSPerMB=0",
]
#: runserver.sh gives the name server a smaller heap (and it is not measured).
APACHE_NAMESRV_JVM = ["-server", "-Xms512m", "-Xmx512m", "-XX:+UseG1GC"]
#: Apache's benchmark scripts (runclass.sh).
LOAD_JVM = ["-Xms1g", "-Xmx1g", "-Xmn256m"]


def ports_free(*ports: int) -> bool:
    for port in ports:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                return False
    return True


def broker_port() -> int:
    """A port whose neighbours (-2 for the VIP channel, +1 for HA) are free too."""
    while True:
        port = free_port()
        if port > 2 and ports_free(port - 2, port + 1):
            return port


def proc_stat(pid: int) -> tuple[float, int]:
    """(CPU seconds, peak RSS bytes) of a process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    peak = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            peak = int(line.split()[1]) * 1024
    return cpu, peak


def first_send(port: int, proc: subprocess.Popen[Any], timeout: float = 120) -> None:
    """Until the broker answers SEND_OK to a send (a new topic, auto-created from TBW102, as a
    first producer does; system topics refuse sends on Apache)."""
    from aiorocketmq.protocol.codes import RequestCode, ResponseCode
    from aiorocketmq.protocol.command import RemotingCommand
    from aiorocketmq.protocol.errors import MQError
    from aiorocketmq.protocol.headers import SendMessageRequestHeaderV2

    async def attempt() -> bool:
        from aiorocketmq.protocol.transport import connect

        try:
            conn = await connect("127.0.0.1", port, timeout=2)
        except (MQError, OSError):
            return False
        try:
            header = SendMessageRequestHeaderV2(
                producer_group="side_by_side_probe",
                default_topic_queue_nums=QUEUES,
                topic="StartupProbe",
                queue_id=0,
                born_timestamp=int(time.time() * 1000),
            )
            cmd = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, header.to_fields(), b"probe")
            response = await conn.request(cmd, 3)
            return response.code == ResponseCode.SUCCESS
        except MQError:
            return False
        finally:
            conn.close()

    async def loop() -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"broker exited with {proc.returncode}")
            if await attempt():
                return
            await asyncio.sleep(0.02)
        raise RuntimeError("the broker never accepted a send")

    asyncio.run(loop())


def store_settings(root: Path) -> dict[str, Any]:
    """Broker settings both systems get (RocketMQ's keys)."""
    store = root / "store"
    return {
        "brokerClusterName": "BenchCluster",
        "brokerId": 0,
        "brokerIP1": "127.0.0.1",
        "storePathRootDir": store,
        "storePathCommitLog": store / "commitlog",
        "autoCreateTopicEnable": True,
        "autoCreateSubscriptionGroup": True,
        "diskMaxUsedSpaceRatio": 98,
        "flushDiskType": "ASYNC_FLUSH",
        # Ours only (Apache ignores keys it does not know): no fixed extra ports, so several
        # brokers fit on one host, and no work the comparison does not ask for.
        "metricsPromExporterEnable": False,
        "enableGrpcServer": False,
    }


def write_properties(path: Path, settings: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}\n" for k, v in settings.items())
    )
    return path


def stop(proc: subprocess.Popen[Any]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# ---- the two systems ------------------------------------------------------------------------


@dataclass
class Broker:
    proc: subprocess.Popen[Any]
    port: int
    startup_s: float


@dataclass
class System:
    """One cluster under test: a name server and brokers, started and stopped as processes."""

    #: "ours", or a key of :data:`REFERENCES`.
    name: str
    toolchain: Toolchain
    root: Path
    namesrv: subprocess.Popen[Any] | None = None
    namesrv_port: int = 0
    brokers: list[Broker] = field(default_factory=list)

    @property
    def namesrv_addr(self) -> str:
        return f"127.0.0.1:{self.namesrv_port}"

    @property
    def is_apache(self) -> bool:
        return self.name in APACHE_SERVERS

    @property
    def server_classpath(self) -> str:
        """Apache's name server and broker of this system's release."""
        return APACHE_SERVERS[self.name]()

    @staticmethod
    def rust_binaries() -> tuple[Path, Path]:
        return rust_reference.install(CACHE)

    def start_namesrv(self) -> None:
        self.namesrv_port = free_port()
        home = self.root / "namesrv"
        home.mkdir(parents=True, exist_ok=True)
        if self.name == "rust":
            self.namesrv = rust_reference.start_namesrv(self.rust_binaries()[0], self.namesrv_port, home)
            wait_port(self.namesrv_port, 120, self.namesrv)
            return
        if self.is_apache:
            conf = write_properties(home / "namesrv.conf", {"listenPort": self.namesrv_port})
            cmd = [
                self.toolchain.java,
                *APACHE_NAMESRV_JVM,
                f"-Duser.home={home}",
                "-cp",
                self.server_classpath,
                "org.apache.rocketmq.namesrv.NamesrvStartup",
                "-c",
                str(conf),
            ]
            env = {**os.environ, "ROCKETMQ_HOME": str(rocketmq_home(home))}
        else:
            cmd = [sys.executable, "-m", "aiorocketmq.namesrv", "--listen-port", str(self.namesrv_port)]
            cmd += ["--store-dir", str(home)]
            env = dict(os.environ)
        self.namesrv = subprocess.Popen(
            cmd, cwd=home, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        wait_port(self.namesrv_port, 120, self.namesrv)

    def start_broker(self, name: str, cpu: int | None = None, **overrides: Any) -> Broker:
        """A broker of this system with the shared settings and ``overrides``; ``cpu``: pinned,
        with every thread it starts, to that core (ours only)."""
        port = broker_port()
        home = self.root / name
        settings = {
            **store_settings(home),
            "brokerName": name,
            "listenPort": port,
            "namesrvAddr": self.namesrv_addr,
            **overrides,
        }
        if self.name == "5.3.3":
            settings = {**APACHE5_BROKER, **settings}
        started = time.monotonic()
        if self.name == "rust":
            proc = rust_reference.start_broker(self.rust_binaries()[1], settings, home)
        else:
            proc = self._spawn_broker(home, write_properties(home / "broker.conf", settings), cpu)
        first_send(port, proc)
        broker = Broker(proc, port, time.monotonic() - started)
        self.brokers.append(broker)
        return broker

    def _spawn_broker(self, home: Path, conf: Path, cpu: int | None = None) -> subprocess.Popen[Any]:
        if self.is_apache:
            cmd = [
                self.toolchain.java,
                *APACHE_BROKER_JVM,
                f"-Duser.home={home}",
                "-cp",
                self.server_classpath,
                "org.apache.rocketmq.broker.BrokerStartup",
                "-c",
                str(conf),
            ]
            env = {**os.environ, "ROCKETMQ_HOME": str(rocketmq_home(home))}
        else:
            cmd = [sys.executable, "-m", "aiorocketmq.broker", "-c", str(conf), "--log-level", "WARNING"]
            env = dict(os.environ)
        return subprocess.Popen(
            cmd,
            cwd=home,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=None if cpu is None else functools.partial(os.sched_setaffinity, 0, {cpu}),
        )

    def stop_brokers(self) -> None:
        for broker in self.brokers:
            stop(broker.proc)
        self.brokers.clear()

    def stop(self) -> None:
        self.stop_brokers()
        if self.namesrv is not None:
            stop(self.namesrv)
            self.namesrv = None

    def broker_stat(self) -> tuple[float, int]:
        """CPU seconds and peak RSS summed over the brokers."""
        stats = [proc_stat(b.proc.pid) for b in self.brokers]
        return sum(s[0] for s in stats), sum(s[1] for s in stats)


# ---- loads ---------------------------------------------------------------------------------


class Loads:
    def __init__(self, toolchain: Toolchain, cpp_load: Path, work: Path, args: argparse.Namespace) -> None:
        self.toolchain = toolchain
        self.cpp_load = cpp_load
        self.batch_load = build_batch_load(work)
        self.work = work
        self.args = args

    def java(self, system: System, mode: str, **opts: Any) -> tuple[dict[str, Any], float]:
        """Run the Java load; returns its result and the brokers' CPU seconds in its window."""
        window = float(opts.get("seconds", 0))
        cmd = [
            self.toolchain.java,
            *LOAD_JVM,
            "-Dorg.apache.rocketmq.client.sendSmartMsg=true",
            f"-Drocketmq.client.logRoot={self.work / 'client-logs'}",
            "-Drocketmq.client.logLevel=WARN",
            "-cp",
            self.toolchain.client_classpath,
            "benchload.Load",
            mode,
            f"namesrv={system.namesrv_addr}",
            *(f"{k}={v}" for k, v in opts.items()),
        ]
        errors = self.work / f"load-{mode}.err"
        with errors.open("w") as err:
            proc = subprocess.Popen(cmd, cwd=self.work, stdout=subprocess.PIPE, stderr=err, text=True)
        assert proc.stdout is not None
        cpu = 0.0
        seen = []
        if window and mode in ("producer", "batch"):
            # The load prints {"event": "window"} as its measuring window opens.
            for line in proc.stdout:
                seen.append(line)
                if line.startswith('{"event": "window"}'):
                    cpu = self._cpu_over(system, time.monotonic(), window, proc)
                    break
        out = "".join(seen) + proc.stdout.read()
        proc.wait(600)
        lines = [line for line in out.splitlines() if line.startswith("{") and '"event"' not in line]
        if proc.returncode != 0 or not lines:
            raise RuntimeError(
                f"Load {mode} failed ({proc.returncode}):\n{out[-2000:]}\n{errors.read_text()[-3000:]}"
            )
        return json.loads(lines[-1]), cpu

    def topic(self, system: System, **opts: Any) -> dict[str, Any]:
        """Create a topic on every master; a failure (an admin call timing out on a busy
        machine) is shown and tried again, twice at most."""
        for attempt in range(3):
            try:
                return self.java(system, "topic", **opts)[0]
            except RuntimeError as exc:
                if attempt == 2:
                    raise
                print(f"topic creation failed, trying again: {str(exc)[-1500:]}", file=sys.stderr, flush=True)
        raise AssertionError("unreachable")

    @staticmethod
    def _cpu_over(
        system: System,
        start_at: float,
        seconds: float,
        load: subprocess.Popen[Any] | None = None,
        at_window: Callable[[], None] | None = None,
    ) -> float:
        """Brokers' CPU seconds over the window (cut short when ``load`` ends first: a load
        with a ``limit`` stops early); ``at_window`` is called as it opens and as it closes."""
        time.sleep(max(0.0, start_at - time.monotonic()))
        if at_window is not None:
            at_window()
        before = system.broker_stat()[0]
        closes = time.monotonic() + seconds
        if load is None:
            time.sleep(seconds)
        else:
            with contextlib.suppress(subprocess.TimeoutExpired):
                load.wait(seconds)
        cpu = system.broker_stat()[0] - before
        if at_window is not None:
            time.sleep(max(0.0, closes - time.monotonic()))
            at_window()
        return cpu

    def cpp(
        self, system: System, threads: int, seconds: float, size: int = 128
    ) -> tuple[dict[str, Any], float]:
        start_at = time.time() + 3.0
        cmd = [
            str(self.cpp_load),
            "produce",
            system.namesrv_addr,
            TOPIC,
            str(threads),
            str(seconds),
            str(size),
        ]
        proc = subprocess.Popen(
            [*cmd, f"{start_at:.3f}"],
            cwd=self.work,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        cpu = self._cpu_over(system, time.monotonic() + (start_at - time.time()), seconds)
        out, _ = proc.communicate(timeout=300)
        result = json.loads(out.strip().splitlines()[-1])
        sent = result["sent"]
        if result["failed"]:
            # The client's own words for the first failure (under load: its route lookups).
            print(f"  cpp_load: {result['failed']} sends failed, the first with {result['first_failure']!r}")
        return {
            "tps": sent / seconds,
            "count": sent,
            "avg_rt_ms": result["rt_sum_us"] / 1000 / max(1, sent),
            "max_rt_ms": result["rt_max_us"] / 1000,
            "failed": result["failed"],
            "client_cpu_s": result["cpu_s"],
        }, cpu

    def lean(
        self,
        system: System,
        seconds: float,
        warmup: float,
        inflight: int = 16,
        batch: int = 32,
        size: int = 128,
        at_window: Callable[[], None] | None = None,
    ) -> tuple[dict[str, Any], float]:
        """``bench/batch_load.c`` against every broker of ``system``: ``inflight`` batches of
        ``batch`` messages of ``size`` bytes outstanding per broker, spread over the topic's
        queues. ``at_window`` is called as the measuring window opens and as it closes."""
        frames = self.work / f"frames-{batch}-{size}.bin"
        frames.write_bytes(batch_frames(TOPIC, QUEUES, batch, size))
        argv = [str(self.batch_load), str(seconds), str(warmup), str(inflight), str(batch)]
        for broker in system.brokers:
            argv += [f"127.0.0.1:{broker.port}", str(frames)]
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        cpu = self._cpu_over(system, time.monotonic() + warmup, seconds, at_window=at_window)
        out, err = proc.communicate(timeout=120)
        if proc.returncode:
            raise RuntimeError(f"batch_load failed ({proc.returncode}): {err.strip()}")
        return json.loads(out.strip().splitlines()[-1]), cpu


def send_frames(topic: str, queues: int, batch: int, size: int, per_queue: int = 8) -> list[bytes]:
    """Sends as the SDK would frame them (its own encoders and V2 header), ``per_queue``
    distinct requests for each queue, each message with its own unique id: SEND_BATCH_MESSAGE
    of ``batch`` messages, or SEND_MESSAGE_V2 for ``batch`` 1. The opaque is the ten-digit
    placeholder ``batch_load`` rewrites."""
    ids = UniqueIdGenerator()
    body = os.urandom(size // 2).hex().encode()[:size]
    frames = []
    for queue_id in range(queues):
        for _ in range(per_queue):
            messages = [Message(topic, body) for _ in range(batch)]
            for msg, uniq in zip(messages, ids.next_ids(batch), strict=True):
                msg.properties[PropertyKey.UNIQ_CLIENT_MESSAGE_ID_KEYIDX] = uniq
            if batch > 1:
                code, payload, properties = RequestCode.SEND_BATCH_MESSAGE, encode_batch(messages), None
            else:
                code, payload, properties = (
                    RequestCode.SEND_MESSAGE_V2,
                    body,
                    encode_properties(messages[0].properties),
                )
            header = SendMessageRequestHeaderV2(
                producer_group="benchmark_lean_batch",
                topic=topic,
                default_topic="TBW102",
                default_topic_queue_nums=4,
                queue_id=queue_id,
                sys_flag=0,
                born_timestamp=int(time.time() * 1000),
                flag=0,
                properties=properties,
                reconsume_times=0,
                unit_mode=False,
                batch=batch > 1,
            )
            cmd = RemotingCommand(
                int(code), opaque=1_000_000_000, ext_fields=header.to_fields(), body=payload
            )
            frames.append(cmd.encode())
    return frames


def batch_frames(topic: str, queues: int, batch: int, size: int, per_queue: int = 8) -> bytes:
    """:func:`send_frames` of ``batch`` > 1, back to back (``batch_load`` replays them)."""
    return b"".join(send_frames(topic, queues, batch, size, per_queue))


def build_batch_load(work: Path) -> Path:
    binary = work / "batch_load"
    subprocess.run(["gcc", "-O2", "-o", str(binary), str(BATCH_LOAD)], check=True)
    return binary


# ---- one round on one system ---------------------------------------------------------------

Row = dict[str, float]


def measure(
    system: System,
    loads: Loads,
    args: argparse.Namespace,
    report: Callable[[str, Row], None],
    size: int,
    first: bool,
) -> None:
    """One system, one message size: a fresh broker, every load of ``args.loads`` in turn,
    then (for ``sync64``) a fresh broker under SYNC_FLUSH. ``first``: this system's first size
    of the round, which also reports its start-up time."""
    seconds, warmup = args.seconds, args.warmup
    wanted = set(args.loads)

    def put(name: str, row: Row) -> None:
        report(labelled(name, size), row)

    system.start_namesrv()
    try:
        broker = system.start_broker("broker-a")
        if first:
            report("startup", {"startup_s": broker.startup_s})
        loads.topic(system, topic=TOPIC, queues=QUEUES)

        def sends(name: str, mode: str, **opts: Any) -> dict[str, Any]:
            result, cpu = loads.java(system, mode, topic=TOPIC, seconds=seconds, warmup=warmup, **opts)
            count = max(1, result["count"])
            put(
                name,
                {
                    "tps": result["mps"],
                    "avg_rt_ms": result["avg_rt_ms"],
                    "max_rt_ms": result["max_rt_ms"],
                    "p99_ms": result["p99_ms"],
                    "cpu_us_per_msg": 1e6 * cpu * (result["seconds"] / seconds) / count,
                    "failed": result["failed"],
                },
            )
            return result

        prewarm(system, loads, args, threads=16, size=size)
        if wanted & {"producer", "consumer"}:
            produced = sends("producer -w 16", "producer", threads=16, size=size)
        if "batch" in wanted:
            sends("batch -b 32", "batch", threads=16, size=size, batch=32)
        if "lean" in wanted:
            put("batch, lean load", lean_batches(system, loads, args, size))
        if "consumer" in wanted:
            cpu_before = system.broker_stat()[0]
            consumed, _ = loads.java(
                system,
                "consumer",
                topic=TOPIC,
                group="benchmark_consumer",
                count=produced["count"],
                timeout=180,
            )
            cpu = system.broker_stat()[0] - cpu_before
            put("consumer", {"tps": consumed["tps"], "cpu_us_per_msg": 1e6 * cpu / max(1, consumed["count"])})
        if "cpp" in wanted and system.name == "rust":
            # Measured, not assumed: bench/rust_reference.py's smoke run shows it.
            print(
                "  cpp_load: not run on rocketmq-rust 1.0.0, which closes every connection whose"
                " header lacks serializeTypeCurrentRPC (the C++ client 0.4.4 never sends it)",
                flush=True,
            )
        elif "cpp" in wanted:
            result, cpu = loads.cpp(system, 16, seconds, size)
            put(
                "cpp_load -w 16",
                {
                    "tps": result["tps"],
                    "avg_rt_ms": result["avg_rt_ms"],
                    "max_rt_ms": result["max_rt_ms"],
                    "cpu_us_per_msg": 1e6 * cpu / max(1, result["count"]),
                    # The client shares the cores: its CPU per send, to show where the rest went.
                    "client_us_per_msg": 1e6 * result["client_cpu_s"] / max(1, result["count"]),
                    "failed": result["failed"],
                },
            )
        if "e2e" in wanted:
            loads.topic(system, topic=f"{TOPIC}E2E", queues=QUEUES)
            e2e, _ = loads.java(
                system,
                "e2e",
                topic=f"{TOPIC}E2E",
                rate=5000,
                senders=32,
                seconds=seconds,
                warmup=warmup,
                size=size,
            )
            put(
                "e2e @5000/s",
                {
                    "p99_ms": e2e["p99_ms"],
                    "p50_ms": e2e["p50_ms"],
                    "max_rt_ms": e2e["max_ms"],
                    "received_pct": 100 * e2e["received"] / max(1, 5000 * seconds),
                },
            )
        put("broker RSS", {"peak_rss_mb": system.broker_stat()[1] / 2**20})
        if "sync64" in wanted:
            system.stop_brokers()
            shutil.rmtree(system.root / "broker-a", ignore_errors=True)
            system.start_broker("broker-a", flushDiskType="SYNC_FLUSH")
            loads.topic(system, topic=TOPIC, queues=QUEUES)
            prewarm(system, loads, args, threads=64, size=size)
            sends("SYNC_FLUSH -w 64", "producer", threads=64, size=size)
    finally:
        system.stop()


def labelled(name: str, size: int) -> str:
    """A measurement's key in a round's results: its load and the message size."""
    return f"{name} @{size} B"


def lean_batches(system: System, loads: Loads, args: argparse.Namespace, size: int = 128) -> Row:
    """Batches of 32 from ``bench/batch_load.c``: the brokers' own limit, with a load that
    leaves them nearly all the CPU."""
    result, cpu = loads.lean(system, args.seconds, args.warmup, size=size)
    return {
        "tps": result["mps"],
        "cpu_us_per_msg": 1e6 * cpu / max(1, result["count"]),
        "p99_ms": result["p99_ms"],
        "failed": result["failed"],
    }


def prewarm(system: System, loads: Loads, args: argparse.Namespace, threads: int, size: int = 128) -> None:
    """Unmeasured sends on a fresh broker first: the JVM's JIT needs them (and both brokers
    create their first commit-log file meanwhile)."""
    if args.prewarm:
        loads.java(
            system, "producer", topic=TOPIC, seconds=args.prewarm, warmup=0, threads=threads, size=size
        )


def measure_ours_only(
    loads: Loads, args: argparse.Namespace, work: Path, report: Callable[[str, Row], None]
) -> None:
    """Scale across cores and many topics (our broker only)."""
    seconds, warmup = args.seconds, args.warmup
    lean_tps: list[float] = []
    for count in (1, 2) if args.only in (None, "scale") else ():
        system = System("ours", loads.toolchain, work / f"scale{count}")
        system.start_namesrv()
        try:
            for i in range(count):
                system.start_broker(f"broker-{'ab'[i]}")
            loads.topic(system, topic=TOPIC, queues=QUEUES)
            if args.prewarm:
                loads.java(
                    system,
                    "batch",
                    topic=TOPIC,
                    seconds=args.prewarm,
                    warmup=0,
                    threads=16,
                    size=128,
                    batch=32,
                )
            result, _ = loads.java(
                system, "batch", topic=TOPIC, seconds=seconds, warmup=warmup, threads=16, size=128, batch=32
            )
            report(
                f"scale: batch -b 32, {count} broker(s)", {"tps": result["mps"], "p99_ms": result["p99_ms"]}
            )
            lean = lean_batches(system, loads, args)
            report(f"scale: lean batch load, {count} broker(s)", lean)
            lean_tps.append(lean["tps"])
        finally:
            system.stop()
        shutil.rmtree(system.root, ignore_errors=True)
    if len(lean_tps) == 2:
        report("scale: lean batch load, 2 / 1 broker(s)", {"tps_ratio": lean_tps[1] / max(1.0, lean_tps[0])})
    if args.only in (None, "scale") and (os.cpu_count() or 1) >= 2:
        # One broker process per core, as a host is deployed: each broker pinned to a core of
        # its own, so the figure is what a second core adds (the load itself is not pinned).
        pinned_tps: list[float] = []
        for count in (1, 2):
            system = System("ours", loads.toolchain, work / f"pinned{count}")
            system.start_namesrv()
            try:
                for i in range(count):
                    system.start_broker(f"broker-{'ab'[i]}", cpu=i)
                loads.topic(system, topic=TOPIC, queues=QUEUES)
                lean = lean_batches(system, loads, args)
                report(f"scale: lean batch load, {count} broker(s) on a core each", lean)
                pinned_tps.append(lean["tps"])
            finally:
                system.stop()
            shutil.rmtree(system.root, ignore_errors=True)
        report(
            "scale: lean batch load, 2 / 1 broker(s) on a core each",
            {"tps_ratio": pinned_tps[1] / max(1.0, pinned_tps[0])},
        )

    if args.only in (None, "disk"):
        disk_limit(loads, args, work, report)
    if args.only in (None, "topics"):
        many_topics(loads, args, work, report)
    if args.only in (None, "10k"):
        report("topics: 10,000-topic broker", ten_thousand_topics(loads.toolchain, work / "10k"))


def direct_write_rate(directory: Path, mib: int = 1024) -> float:
    """The file system's own sequential write rate in MB/s: ``dd`` of ``mib`` MiB in 1 MiB
    blocks with direct I/O (no page cache) and a final fsync, timed from outside."""
    target = directory / "dd-direct.bin"
    directory.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    subprocess.run(
        ["dd", "if=/dev/zero", f"of={target}", "bs=1M", f"count={mib}", "oflag=direct", "conv=fsync"],
        check=True,
        capture_output=True,
    )
    elapsed = time.monotonic() - started
    target.unlink()
    return mib * 2**20 / elapsed / 1e6


def commit_log_max_offset(port: int) -> int:
    """The broker's ``commitLogMaxOffset`` (GET_BROKER_RUNTIME_INFO, as ``mqadmin brokerStatus``)."""
    from aiorocketmq.protocol.body import KVTable
    from aiorocketmq.protocol.transport import connect

    async def ask() -> int:
        conn = await connect("127.0.0.1", port, timeout=5)
        try:
            response = await conn.request(RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO), 10)
            return int(str(KVTable.decode(response.body).table["commitLogMaxOffset"]))
        finally:
            conn.close()

    return asyncio.run(ask())


def mark_offset(into: list[tuple[float, int]], port: int) -> None:
    into.append((time.monotonic(), commit_log_max_offset(port)))


def disk_limit(
    loads: Loads, args: argparse.Namespace, work: Path, report: Callable[[str, Row], None]
) -> None:
    """How close the store gets to the disk: 1 KiB batches of 32 from the lean load against one
    broker, under ASYNC_FLUSH (the page cache takes the writes; the flusher writes them back)
    and SYNC_FLUSH (every batch answered once on disk), beside ``dd``'s direct-I/O rate on the
    same file system measured just before. The store's rate is the commit log's growth over
    the measuring window (records with their headers and properties, not only bodies)."""
    disk = direct_write_rate(work / "dd")
    report("disk: dd bs=1M oflag=direct", {"mb_per_s": disk})
    for flush in ("ASYNC_FLUSH", "SYNC_FLUSH"):
        system = System("ours", loads.toolchain, work / f"disk-{flush}")
        system.start_namesrv()
        try:
            broker = system.start_broker("broker-a", flushDiskType=flush)
            loads.topic(system, topic=TOPIC, queues=QUEUES)
            # The window only: the offset when it opens (after the warm-up) and when it ends.
            offsets: list[tuple[float, int]] = []
            mark = functools.partial(mark_offset, offsets, broker.port)
            result, cpu = loads.lean(system, args.seconds, args.warmup, size=1024, at_window=mark)
            (opened, first), (closed, last) = offsets
            rate = (last - first) / (closed - opened) / 1e6
            report(
                f"disk: lean 1 KiB batches, {flush}",
                {
                    "tps": result["mps"],
                    "store_mb_per_s": rate,
                    "of_disk": rate / disk,
                    "cpu_us_per_msg": 1e6 * cpu / max(1, result["count"]),
                    "p99_ms": result["p99_ms"],
                },
            )
        finally:
            system.stop()
        shutil.rmtree(system.root, ignore_errors=True)


def many_topics(
    loads: Loads, args: argparse.Namespace, work: Path, report: Callable[[str, Row], None]
) -> None:
    """Sync sends to one topic, then round-robin over 1,000 topics of 8 queues each."""
    seconds, warmup = args.seconds, args.warmup
    system = System("ours", loads.toolchain, work / "topics")
    system.start_namesrv()
    try:
        # Our store allocates every file for real (no sparse mapped files, see
        # broker/store/mapped_file.py): 8,000 consume queues of the default 6 MB would take 48 GB,
        # so these consume-queue files hold 6,000 entries (120 KB) each.
        system.start_broker("broker-a", mappedFileSizeConsumeQueue=MANY_TOPICS_CQ_FILE)
        made = loads.topic(system, topic="Many", queues=QUEUES, count=1000)
        report("topics: create 1,000 x 8 queues", {"seconds": made["seconds"]})
        loads.topic(system, topic=TOPIC, queues=QUEUES)
        tps = []
        for label, opts in (
            ("one topic", {"topic": TOPIC}),
            ("1,000 topics", {"topic": "Many", "topics": 1000}),
        ):
            # Unmeasured first, until every queue has messages: the broker creates 8,000
            # consume queues (the steady state is what is compared; each measured load, a new
            # client, also looks every route up before its clock starts).
            topics = int(opts.get("topics", 1))
            loads.java(
                system,
                "producer",
                seconds=120,
                warmup=0,
                threads=16,
                size=128,
                limit=16 * QUEUES * topics,
                **opts,
            )
            result, _ = loads.java(
                system, "producer", seconds=seconds, warmup=warmup, threads=16, size=128, **opts
            )
            report(f"topics: producer -w 16, {label}", {"tps": result["mps"], "p99_ms": result["p99_ms"]})
            tps.append(result["mps"])
        report("topics: 1,000 topics / one topic", {"tps_ratio": tps[1] / max(1.0, tps[0])})
    finally:
        system.stop()
    shutil.rmtree(system.root, ignore_errors=True)


def ten_thousand_topics(toolchain: Toolchain, root: Path) -> Row:
    """A broker whose topics.json has 10,000 topics: seconds from spawn until the name server
    lists them all, and how long one GET_ALL_TOPIC_LIST_FROM_NAMESERVER takes then."""
    from aiorocketmq.protocol.body import TopicConfig, TopicConfigSerializeWrapper, TopicList
    from aiorocketmq.protocol.codes import RequestCode
    from aiorocketmq.protocol.command import RemotingCommand
    from aiorocketmq.protocol.transport import connect

    system = System("ours", toolchain, root)
    system.start_namesrv()
    config = root / "broker-a" / "store" / "config"
    config.mkdir(parents=True)
    names = [f"Many10k_{i}" for i in range(10_000)]
    table = {n: TopicConfig(topic_name=n, read_queue_nums=8, write_queue_nums=8) for n in names}
    (config / "topics.json").write_bytes(TopicConfigSerializeWrapper(topic_config_table=table).encode())

    async def listed(started: float) -> Row:
        conn = await connect("127.0.0.1", system.namesrv_port)
        try:
            while True:
                asked = time.monotonic()
                response = await conn.request(
                    RemotingCommand.request(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER), 10
                )
                topics = set(TopicList.decode(response.body).topic_list) if response.body else set()
                if topics.issuperset(names):
                    registered = time.monotonic() - started
                    # topicList once the table is in: the median of five requests.
                    times = []
                    for _ in range(5):
                        asked = time.monotonic()
                        await conn.request(
                            RemotingCommand.request(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER), 10
                        )
                        times.append(time.monotonic() - asked)
                    return {
                        "registered_after_s": registered,
                        "topic_list_ms": 1000 * statistics.median(times),
                    }
                if time.monotonic() - started > 60:
                    raise RuntimeError(f"only {len(topics)} topics listed after 60 s")
                await asyncio.sleep(0.05)
        finally:
            conn.close()

    try:
        started = time.monotonic()
        system.start_broker("broker-a")
        return asyncio.run(listed(started))
    finally:
        system.stop()


# ---- the table -----------------------------------------------------------------------------

#: (measurement, metric, higher is better)
COLUMNS = [
    ("producer -w 16", "tps", True),
    ("producer -w 16", "cpu_us_per_msg", False),
    ("producer -w 16", "avg_rt_ms", False),
    ("producer -w 16", "p99_ms", False),
    ("producer -w 16", "max_rt_ms", False),
    ("batch -b 32", "tps", True),
    ("batch -b 32", "cpu_us_per_msg", False),
    ("batch -b 32", "p99_ms", False),
    ("batch, lean load", "tps", True),
    ("batch, lean load", "cpu_us_per_msg", False),
    ("consumer", "tps", True),
    ("consumer", "cpu_us_per_msg", False),
    ("cpp_load -w 16", "tps", True),
    ("cpp_load -w 16", "cpu_us_per_msg", False),
    ("cpp_load -w 16", "client_us_per_msg", False),
    ("cpp_load -w 16", "avg_rt_ms", False),
    ("SYNC_FLUSH -w 64", "tps", True),
    ("SYNC_FLUSH -w 64", "cpu_us_per_msg", False),
    ("SYNC_FLUSH -w 64", "p99_ms", False),
    ("e2e @5000/s", "p99_ms", False),
    ("e2e @5000/s", "received_pct", True),
    ("broker RSS", "peak_rss_mb", False),
    ("startup", "startup_s", False),
]


def table(results: list[dict[str, dict[str, Row]]], reference: str, size: int) -> str:
    """Ours against ``reference`` at ``size``-byte bodies: each round's ratio and the medians."""
    rounds = len(results)
    head = ["measurement", "metric", *(f"r{i + 1} ours/ref" for i in range(rounds))]
    head += ["median ours", f"median {reference}", "median ratio"]
    rows = [head]
    for name, metric, _ in COLUMNS:
        key = name if name == "startup" else labelled(name, size)
        ratios, ours, theirs = [], [], []
        for r in results:
            o = r["ours"].get(key, {}).get(metric)
            a = r.get(reference, {}).get(key, {}).get(metric)
            if o is not None:
                ours.append(o)
            if a is not None:
                theirs.append(a)
            ratios.append(o / a if o is not None and a else None)
        if not ours and not theirs:
            continue
        cells = [f"{x:.2f}x" if x is not None else "-" for x in ratios]
        valid = [x for x in ratios if x is not None]
        rows.append(
            [
                name,
                metric,
                *cells,
                _fmt(statistics.median(ours)) if ours else "-",
                _fmt(statistics.median(theirs)) if theirs else "-",
                f"{statistics.median(valid):.2f}x" if valid else "-",
            ]
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |" for row in rows]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def ours_table(extra: list[dict[str, Row]]) -> str:
    lines = [
        "| measurement (ours only) | metric | "
        + " | ".join(f"r{i + 1}" for i in range(len(extra)))
        + " | median |"
    ]
    lines.append("|---|---|" + "---|" * (len(extra) + 1))
    keys: list[tuple[str, str]] = []
    for run in extra:
        for name, row in run.items():
            for metric in row:
                if (name, metric) not in keys:
                    keys.append((name, metric))
    for name, metric in keys:
        values = [run.get(name, {}).get(metric) for run in extra]
        present = [v for v in values if v is not None]
        median = _fmt(statistics.median(present)) if present else "-"
        lines.append(
            f"| {name} | {metric} | "
            + " | ".join(_fmt(v) if v is not None else "-" for v in values)
            + f" | {median} |"
        )
    return "\n".join(lines)


def _fmt(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def reporter(into: dict[str, Row], prefix: str) -> Callable[[str, Row], None]:
    def report(what: str, row: Row) -> None:
        into[what] = row
        shown = ", ".join(f"{k}={_fmt(v)}" for k, v in row.items())
        print(f"{prefix} {what}: {shown}", flush=True)

    return report


@contextmanager
def workdir(keep: bool) -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="side-by-side-"))
    try:
        yield path
    finally:
        if not keep:
            shutil.rmtree(path, ignore_errors=True)


LOADS = ("producer", "batch", "lean", "consumer", "cpp", "e2e", "sync64")


def csv(kind: Callable[[str], Any]) -> Callable[[str], list[Any]]:
    return lambda text: [kind(part) for part in text.split(",") if part]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=None, help="rounds (default 5; 3 with --quick)")
    parser.add_argument("--quick", action="store_true", help="3 rounds of 5 s windows")
    parser.add_argument("--seconds", type=float, default=None, help="measuring window per load (default 10)")
    parser.add_argument("--warmup", type=float, default=None, help="warm-up before each window (default 3)")
    parser.add_argument(
        "--prewarm",
        type=int,
        default=None,
        help="unmeasured sends on each fresh broker (default 10 s; 5 quick)",
    )
    parser.add_argument(
        "--reference",
        type=csv(str),
        default=list(REFERENCES),
        help=f"comma-separated references to compare with (default all: {','.join(REFERENCES)})",
    )
    parser.add_argument(
        "--sizes", type=csv(int), default=[128, 1024], help="message body sizes (default 128,1024)"
    )
    parser.add_argument(
        "--loads", type=csv(str), default=list(LOADS), help=f"loads to run (default all: {','.join(LOADS)})"
    )
    parser.add_argument("--ours-only", action="store_true", help="only the scale and many-topics runs")
    parser.add_argument("--no-ours-only", action="store_true", help="skip the scale and many-topics runs")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument(
        "--only",
        choices=("scale", "topics", "10k", "disk"),
        default=None,
        help="only this part of the ours-only runs (implies --ours-only)",
    )
    args = parser.parse_args()
    unknown = [r for r in args.reference if r not in REFERENCES] + [x for x in args.loads if x not in LOADS]
    if unknown:
        parser.error(f"unknown reference or load: {', '.join(unknown)}")
    args.ours_only = args.ours_only or args.only is not None
    args.rounds = args.rounds or (3 if args.quick else 5)
    args.seconds = int(args.seconds or (5 if args.quick else 10))
    args.warmup = int(args.warmup or (2 if args.quick else 3))
    args.prewarm = args.prewarm if args.prewarm is not None else (5 if args.quick else 10)
    print(machine_summary(), flush=True)
    toolchain = build_java_only()
    with workdir(args.keep) as work:
        cpp_load = build_cpp_load(work)
        loads = Loads(toolchain, cpp_load, work, args)
        results: list[dict[str, dict[str, Row]]] = []
        extra: list[dict[str, Row]] = []
        systems = ["ours", *args.reference]
        for i in range(args.rounds):
            # Each round starts with another system, so none always runs on the coolest machine.
            order = systems[i % len(systems) :] + systems[: i % len(systems)]
            round_results: dict[str, dict[str, Row]] = {name: {} for name in systems}
            for name in [] if args.ours_only else order:
                for j, size in enumerate(args.sizes):
                    system = System(name, toolchain, work / f"r{i}-{name}-{size}")
                    measure(
                        system,
                        loads,
                        args,
                        reporter(round_results[name], f"round {i + 1} {name:6}"),
                        size,
                        j == 0,
                    )
                    shutil.rmtree(system.root, ignore_errors=True)
            if not args.ours_only:
                results.append(round_results)
            if not args.no_ours_only:
                ours_extra: dict[str, Row] = {}
                measure_ours_only(
                    loads, args, work / f"r{i}-extra", reporter(ours_extra, f"round {i + 1} ours  ")
                )
                extra.append(ours_extra)
        print()
        print(
            f"side by side: {args.rounds} rounds, {args.seconds:.0f} s windows after {args.warmup:.0f} s warm-up, "
            f"{os.cpu_count()} cores; ratios are ours/reference (higher is better for tps and received_pct, "
            "lower for the rest)"
        )
        print(machine_summary())
        for reference in [] if args.ours_only else args.reference:
            for size in args.sizes:
                print()
                print(f"ours / {REFERENCES[reference]}, {size}-byte bodies")
                print(table(results, reference, size))
        if extra:
            print()
            print(ours_table(extra))


if __name__ == "__main__":
    main()
