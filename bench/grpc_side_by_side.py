"""The 5.x gRPC path side by side: our broker's own gRPC endpoint (Apache's "local" mode) and
Apache RocketMQ 5.3.3's broker with its proxy in local mode (``mqbroker --enable-proxy``:
``ProxyStartup -pm local -bc broker.conf``, broker and proxy in one JVM), the same client and
the same loads on both (issue 40).

The client is the official 5.x Go client 5.1.4 (``bench/go5load/main.go``, built once per
change of its sources into the interop cache, as tests/grpc builds its Go program). Plain text
on both sides by default: ours with ``tls.server.mode=disabled`` (grpcio serves the port itself;
the default permissive port relays every connection through one more hop), Apache's port as it
comes (it tells TLS from plain text per connection, in process). ``--tls`` dials TLS on both
(ours then ``enforcing``, with its self-signed certificate); ``--our-tls-mode permissive``
measures our default port instead.

Each round starts each side in turn (alternating which goes first) with a fresh store and its
own name server (Apache's 5.3.3 for Apache, ours for ours), creates the topic (8 queues), warms
up (unmeasured sends and a receive+ack of them on another topic: Java's JIT), then:

* **send**: THREADS goroutines of one Producer sending SIZE-byte messages synchronously for
  SECONDS: send TPS, p50 / p99 latency, the broker's CPU per message;
* **receive+ack**: RECV_THREADS goroutines of one SimpleConsumer receiving batches of BATCH and
  acking each message (a batch's acks in parallel) until they have what the send load sent:
  receive+ack TPS and the broker's CPU per message.

The broker's CPU is utime + stime of the broker process and its descendants (Apache: the one
JVM holding broker and proxy; the name servers are not counted) between the load's ``STARTED``
line (client started) and its ``RESULT`` line (load over, before the client shuts down).
``other`` is the machine's busy CPU in that window less the broker's and the client's: what
else ran (the machine has two cores and may be shared), as a share of one core.

Output: a line per measurement as it goes, then a table per round with ours/Apache ratios, and
the medians of the per-round ratios. ``cpu/msg`` ratios below 1.0 mean ours costs less CPU per
message; ``msgs per CPU-s`` is Apache's CPU per message over ours (the target is >= 1.0).

Run: ``.venv/bin/python -m bench.grpc_side_by_side --rounds 3 --seconds 8``. Needs java 17,
mvn and go (what the interop suite needs); the first run resolves Apache's jars and builds the
Go load. ``--py-spy PATH`` then profiles our broker (``py-spy record``) under one send load and
one receive+ack load and prints where its CPU went.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from aiorocketmq.client.admin import Admin  # noqa: E402
from bench.machine import summary as machine_summary  # noqa: E402
from bench.procs import free_port, wait_port  # noqa: E402
from bench.side_by_side import (  # noqa: E402
    APACHE_BROKER_JVM,
    APACHE_NAMESRV_JVM,
    broker_port,
    stop,
    store_settings,
    write_properties,
)
from tests.grpc.conftest import build_go_program  # noqa: E402
from tests.interop.harness import (  # noqa: E402
    LOGBACK5_PROPERTY,
    build_java53_only,
    build_java53_proxy,
    rocketmq_home,
)
from tests.support import die_with_parent  # noqa: E402

GO5LOAD_DIR = Path(__file__).with_name("go5load")
TOPIC = "GrpcSideBySide"
WARM_TOPIC = "GrpcSideBySideWarm"
GROUP = "GrpcSideBySideGroup"
QUEUES = 8
CLK_TCK = os.sysconf("SC_CLK_TCK")


# ---- the Go load --------------------------------------------------------------------------


def build_go5load() -> Path:
    """``go5load/``'s program, built once per digest of its sources into the interop cache."""
    return build_go_program(GO5LOAD_DIR, "go5load", "the 5.x load is the official Go client")


# ---- CPU accounting -----------------------------------------------------------------------


def _stat(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def tree_cpu(pid: int) -> float:
    """CPU seconds (utime + stime) of ``pid`` and its live descendants."""
    children: dict[int, list[int]] = collections.defaultdict(list)
    ticks: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = _stat(int(entry.name))
        except OSError:
            continue
        children[int(fields[1])].append(int(entry.name))
        ticks[int(entry.name)] = int(fields[11]) + int(fields[12])
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        total += ticks.get(p, 0)
        todo.extend(children.get(p, []))
    return total / CLK_TCK


def machine_busy() -> float:
    """CPU seconds the whole machine has spent busy (all cores; /proc/stat)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]
    return (sum(fields[:8]) - idle) / CLK_TCK


@dataclass
class Window:
    broker: float = 0.0
    client: float = 0.0
    machine: float = 0.0
    wall: float = 0.0

    @property
    def other_cores(self) -> float:
        """What else the machine ran in the window, in cores."""
        return max(0.0, self.machine - self.broker - self.client) / max(self.wall, 1e-9)


class Load:
    """One run of the Go load: the broker's CPU between its STARTED and RESULT lines."""

    def __init__(self, binary: Path, log_dir: Path) -> None:
        self.binary = binary
        self.log_dir = log_dir

    def run(self, kind: str, broker_pid: int, timeout: float, **args: Any) -> tuple[dict[str, Any], Window]:
        proc = subprocess.Popen(
            [str(self.binary), kind, json.dumps(args)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "rocketmq.client.logRoot": str(self.log_dir)},
            preexec_fn=die_with_parent,
        )
        assert proc.stdout is not None
        timer = threading.Timer(timeout, proc.kill)
        timer.start()
        window, begin, lines = Window(), (0.0, 0.0, 0.0, 0.0), []
        result: dict[str, Any] | None = None
        try:
            for line in proc.stdout:
                lines.append(line)
                if line.startswith("STARTED"):
                    begin = (tree_cpu(broker_pid), _cpu_of(proc.pid), machine_busy(), time.monotonic())
                elif line.startswith("RESULT "):
                    end = (tree_cpu(broker_pid), _cpu_of(proc.pid), machine_busy(), time.monotonic())
                    window = Window(*(e - b for e, b in zip(end, begin, strict=True)))
                    result = json.loads(line[len("RESULT ") :])
            proc.wait()
        finally:
            timer.cancel()
        if result is None or "fatal" in result:
            raise RuntimeError(f"go5load {kind} failed ({proc.returncode}):\n{''.join(lines)[-4000:]}")
        return result, window


def _cpu_of(pid: int) -> float:
    try:
        fields = _stat(pid)
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


# ---- the two sides ------------------------------------------------------------------------


@dataclass
class Side:
    """One system under test: a name server and a broker serving 5.x clients on ``grpc_port``."""

    name: str
    root: Path
    args: argparse.Namespace
    java: str = ""
    namesrv_cp: str = ""
    proxy_cp: str = ""
    procs: list[subprocess.Popen[Any]] = field(default_factory=list)
    broker: subprocess.Popen[Any] | None = None
    namesrv_port: int = 0
    grpc_port: int = 0
    startup_s: float = 0.0

    @property
    def namesrv_addr(self) -> str:
        return f"127.0.0.1:{self.namesrv_port}"

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def _spawn(self, cmd: list[str], home: Path, env: dict[str, str]) -> subprocess.Popen[Any]:
        log = open(home / f"{Path(cmd[0]).name}-{len(self.procs)}.out", "w")  # noqa: SIM115
        proc = subprocess.Popen(
            cmd, cwd=home, env=env, stdout=log, stderr=subprocess.STDOUT, preexec_fn=die_with_parent
        )
        log.close()
        self.procs.append(proc)
        return proc

    def start(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)
        self.root.mkdir(parents=True)
        started = time.monotonic()
        self._start_namesrv()
        self._start_broker()
        asyncio.run(self._create_topics())
        self.startup_s = time.monotonic() - started

    def _start_namesrv(self) -> None:
        self.namesrv_port = free_port()
        home = self.root / "namesrv"
        home.mkdir(parents=True)
        if self.name == "apache":
            conf = write_properties(home / "namesrv.conf", {"listenPort": self.namesrv_port})
            cmd = [
                self.java,
                *APACHE_NAMESRV_JVM,
                f"-Duser.home={home}",
                f"-D{LOGBACK5_PROPERTY}={rocketmq_home(home) / 'conf' / 'rmq_namesrv.logback.xml'}",
                "-cp",
                self.namesrv_cp,
                "org.apache.rocketmq.namesrv.NamesrvStartup",
                "-c",
                str(conf),
            ]
            env = {**os.environ, "ROCKETMQ_HOME": str(home)}
        else:
            cmd = [sys.executable, "-m", "aiorocketmq.namesrv", "--listen-port", str(self.namesrv_port)]
            cmd += ["--store-dir", str(home)]
            env = dict(os.environ)
        wait_port(self.namesrv_port, 120, self._spawn(cmd, home, env))

    def _start_broker(self) -> None:
        home = self.root / "broker"
        port, self.grpc_port = broker_port(), free_port()
        settings: dict[str, Any] = {
            **store_settings(home),
            "brokerName": f"{self.name}-a",
            "listenPort": port,
            "namesrvAddr": self.namesrv_addr,
        }
        if self.name == "apache":
            conf = write_properties(home / "broker.conf", settings)
            proxy = {
                "proxyMode": "local",
                "rocketMQClusterName": settings["brokerClusterName"],
                "namesrvAddr": self.namesrv_addr,
                "grpcServerPort": self.grpc_port,
                "remotingListenPort": free_port(),
                "enablePrintJstack": False,
            }
            proxy_conf = home / "rmq-proxy.json"
            proxy_conf.write_text(json.dumps(proxy, indent=2))
            cmd = [
                self.java,
                *APACHE_BROKER_JVM,
                f"-Duser.home={home}",
                f"-D{LOGBACK5_PROPERTY}={rocketmq_home(home) / 'conf' / 'rmq_proxy.logback.xml'}",
                "-cp",
                self.proxy_cp,
                "org.apache.rocketmq.proxy.ProxyStartup",
                "-pm",
                "local",
                "-bc",
                str(conf),
                "-pc",
                str(proxy_conf),
            ]
            env = {**os.environ, "ROCKETMQ_HOME": str(home)}
        else:
            tls = "enforcing" if self.args.tls else self.args.our_tls_mode
            settings |= {"enableGrpcServer": True, "grpcServerPort": self.grpc_port, "tls.server.mode": tls}
            conf = write_properties(home / "broker.conf", settings)
            cmd = [sys.executable, "-m", "aiorocketmq.broker", "-c", str(conf), "--log-level", "WARNING"]
            env = dict(os.environ)
        self.broker = self._spawn(cmd, home, env)
        wait_port(self.grpc_port, 180, self.broker)
        wait_port(port, 60, self.broker)

    async def _create_topics(self) -> None:
        deadline = time.monotonic() + 60
        async with Admin(self.namesrv_addr) as admin:
            while True:
                try:
                    for topic in (TOPIC, WARM_TOPIC):
                        await admin.create_topic(topic, QUEUES)
                    return
                except Exception:
                    # The broker registers with its name server moments after it listens.
                    if time.monotonic() > deadline:
                        raise
                    await asyncio.sleep(0.2)

    def stop(self) -> None:
        procs: list[subprocess.Popen[Any]] = list(reversed(self.procs))
        for proc in procs:
            if self.name == "apache" and proc.pid == (self.broker.pid if self.broker else -1):
                # Killed: its orderly shutdown waits out clients and pools for 10-30 s.
                proc.kill()
                proc.wait()
            else:
                stop(proc)
        self.procs.clear()
        self.broker = None


# ---- measuring ----------------------------------------------------------------------------

Row = dict[str, float]


def measure(side: Side, load: Load, args: argparse.Namespace, round_no: int) -> Row:
    assert side.broker is not None
    pid = side.broker.pid
    common: dict[str, Any] = {"endpoint": side.endpoint, "tls": args.tls}
    if args.warmup:
        warm, _ = load.run(
            "send",
            pid,
            120,
            **common,
            topic=WARM_TOPIC,
            seconds=args.warmup,
            threads=args.threads,
            size=args.size,
        )
        load.run(
            "receive",
            pid,
            120,
            **common,
            topic=WARM_TOPIC,
            group=GROUP + "Warm",
            count=warm["sent"],
            seconds=60,
            threads=args.recv_threads,
            batch=args.batch,
        )
    sent, w_send = load.run(
        "send",
        pid,
        args.seconds + 60,
        **common,
        topic=TOPIC,
        seconds=args.seconds,
        threads=args.threads,
        size=args.size,
    )
    got, w_recv = load.run(
        "receive",
        pid,
        max(120, args.seconds * 10),
        **common,
        topic=TOPIC,
        group=GROUP,
        count=sent["sent"],
        seconds=max(60, args.seconds * 8),
        threads=args.recv_threads,
        batch=args.batch,
    )
    row: Row = {
        "send_tps": sent["tps"],
        "p50_ms": sent["p50_ms"],
        "p99_ms": sent["p99_ms"],
        "send_cpu_us": w_send.broker / max(1, sent["sent"]) * 1e6,
        "send_other": w_send.other_cores,
        "recv_tps": got["tps"],
        "recv_cpu_us": w_recv.broker / max(1, got["acked"]) * 1e6,
        "recv_other": w_recv.other_cores,
        "sent": sent["sent"],
        "acked": got["acked"],
        "startup_s": side.startup_s,
    }
    errors = [*sent["errors"], *got["errors"]]
    print(
        f"round {round_no} {side.name:<6} send {row['send_tps']:>7,.0f}/s p50 {row['p50_ms']:.2f} ms "
        f"p99 {row['p99_ms']:.2f} ms, {row['send_cpu_us']:.0f} µs/msg (other {row['send_other']:.2f} cores); "
        f"receive+ack {row['recv_tps']:>7,.0f}/s, {row['recv_cpu_us']:.0f} µs/msg "
        f"({got['acked']:,} of {sent['sent']:,} acked; other {row['recv_other']:.2f} cores)"
        + (f"; errors {errors[:4]}" if errors else ""),
        flush=True,
    )
    return row


# ---- the table ----------------------------------------------------------------------------

COLUMNS = [
    ("send TPS", "send_tps", "{:,.0f}"),
    ("p50 ms", "p50_ms", "{:.2f}"),
    ("p99 ms", "p99_ms", "{:.2f}"),
    ("send µs/msg", "send_cpu_us", "{:.0f}"),
    ("recv+ack TPS", "recv_tps", "{:,.0f}"),
    ("recv µs/msg", "recv_cpu_us", "{:.0f}"),
]


def ratios(ours: Row, apache: Row) -> Row:
    out = {key: ours[key] / apache[key] if apache[key] else float("nan") for _, key, _ in COLUMNS}
    # Messages per broker CPU-second, ours over Apache's: Apache's CPU per message over ours.
    out["send_per_cpu"] = apache["send_cpu_us"] / ours["send_cpu_us"]
    out["recv_per_cpu"] = apache["recv_cpu_us"] / ours["recv_cpu_us"]
    return out


def table(rounds: list[dict[str, Row]]) -> str:
    width = [16, *(max(len(title), 9) + 2 for title, _, _ in COLUMNS), 13]
    titles = ["round / side", *(c[0] for c in COLUMNS), "other s/r"]
    head = "".join(f"{t:>{w}}" for t, w in zip(titles, width, strict=True))
    lines = [head, "-" * len(head)]
    per_round: list[Row] = []
    for i, result in enumerate(rounds, 1):
        for name in ("apache", "ours"):
            row = result[name]
            cells = [f"{i} {name}", *(fmt.format(row[key]) for _, key, fmt in COLUMNS)]
            cells.append(f"{row['send_other']:.2f}/{row['recv_other']:.2f}")
            lines.append("".join(f"{c:>{w}}" for c, w in zip(cells, width, strict=True)))
        r = ratios(result["ours"], result["apache"])
        per_round.append(r)
        cells = [f"{i} ours/apache", *(f"{r[key]:.2f}x" for _, key, _ in COLUMNS), ""]
        lines.append("".join(f"{c:>{w}}" for c, w in zip(cells, width, strict=True)))
    med = {key: statistics.median(r[key] for r in per_round) for key in per_round[0]}
    lo = {key: min(r[key] for r in per_round) for key in per_round[0]}
    hi = {key: max(r[key] for r in per_round) for key in per_round[0]}
    lines.append("-" * len(head))
    cells = ["median ratio", *(f"{med[key]:.2f}x" for _, key, _ in COLUMNS), ""]
    lines.append("".join(f"{c:>{w}}" for c, w in zip(cells, width, strict=True)))
    cells = ["ratio range", *(f"{lo[key]:.2f}-{hi[key]:.2f}" for _, key, _ in COLUMNS), ""]
    lines.append("".join(f"{c:>{w}}" for c, w in zip(cells, width, strict=True)))
    lines.append(
        f"messages per broker CPU-second, ours/Apache (median, range): sends {med['send_per_cpu']:.2f}x "
        f"({lo['send_per_cpu']:.2f}-{hi['send_per_cpu']:.2f}), receive+ack {med['recv_per_cpu']:.2f}x "
        f"({lo['recv_per_cpu']:.2f}-{hi['recv_per_cpu']:.2f}); target >= 1.00x, p99 ratio <= 1.00x"
    )
    return "\n".join(lines)


# ---- profiling our broker -----------------------------------------------------------------

#: Where a sampled stack's time goes, by the first (innermost) frame that matches, in order.
CATEGORIES: list[tuple[str, tuple[str, ...]]] = [
    ("protobuf (parse/serialize, messages)", ("google/protobuf", "upb", "_message.", "messaging_pb2")),
    ("our conversion (broker/grpc/convert.py)", ("grpc/convert.py",)),
    ("store / commit log / acceptor", ("/store/", "accept.py", "commitlog", "consume_queue")),
    ("POP service (broker/pop*)", ("/pop", "pop_")),
    ("our 5.x front (broker/grpc/*.py)", ("/broker/grpc/",)),
    ("other broker code", ("/broker/",)),
    ("protocol / message codecs", ("/protocol/",)),
    (
        "grpcio (cygrpc, aio server, core)",
        ("grpc/_cython", "grpc/aio", "/grpc/", "grpc_", "cygrpc", "libgrpc"),
    ),
    ("event loop (asyncio/uvloop)", ("asyncio/", "uvloop", "selectors.py")),
]


def categorize(collapsed: Path) -> list[tuple[str, float]]:
    """Shares of the samples in py-spy's raw (collapsed) output, each sample given to the
    category of its innermost frame that matches one (CATEGORIES), else to ``other``."""
    counts: collections.Counter[str] = collections.Counter()
    total = 0
    for line in collapsed.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not n.isdigit():
            continue
        total += int(n)
        frames = stack.split(";")
        for frame in reversed(frames):
            name = next((cat for cat, needles in CATEGORIES if any(x in frame for x in needles)), None)
            if name is not None:
                counts[name] += int(n)
                break
        else:
            counts["other (interpreter, idle threads, unknown)"] += int(n)
    return [(name, n / total * 100) for name, n in counts.most_common()] if total else []


def inclusive(collapsed: Path, needles: list[str]) -> list[tuple[str, float]]:
    """The share of samples whose stack holds a frame containing each needle."""
    counts: collections.Counter[str] = collections.Counter()
    total = 0
    for line in collapsed.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not n.isdigit():
            continue
        total += int(n)
        for needle in needles:
            if needle in stack:
                counts[needle] += int(n)
    return [(needle, counts[needle] / max(1, total) * 100) for needle in needles]


def profile(side: Side, load: Load, args: argparse.Namespace, out: Path) -> None:
    """``py-spy record`` on our broker during one send load and one receive+ack load."""
    assert side.broker is not None
    pid = side.broker.pid
    common: dict[str, Any] = {"endpoint": side.endpoint, "tls": args.tls}
    load.run("send", pid, 120, **common, topic=WARM_TOPIC, seconds=3, threads=args.threads, size=args.size)
    load.run(
        "receive",
        pid,
        120,
        **common,
        topic=WARM_TOPIC,
        group=GROUP + "Warm",
        count=10**9,
        seconds=5,
        threads=args.recv_threads,
        batch=args.batch,
    )
    for kind in ("send", "receive"):
        raw = out / f"{kind}.collapsed"
        spy = subprocess.Popen(
            [
                args.py_spy,
                "record",
                "--pid",
                str(pid),
                "--format",
                "raw",
                "--output",
                str(raw),
                "--duration",
                str(int(args.seconds)),
                "--threads",
                # --native stops the process for each sample (C frames: grpc core, protobuf's upb).
                *(["--native", "--rate", "100"] if args.native else ["--nonblocking", "--rate", "250"]),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        time.sleep(0.5)
        if kind == "send":
            result, window = load.run(
                "send",
                pid,
                120,
                **common,
                topic=TOPIC,
                seconds=args.seconds,
                threads=args.threads,
                size=args.size,
            )
            count = result["sent"]
        else:
            result, window = load.run(
                "receive",
                pid,
                120,
                **common,
                topic=TOPIC,
                group=GROUP,
                count=10**9,
                seconds=args.seconds,
                threads=args.recv_threads,
                batch=args.batch,
            )
            count = result["acked"]
        _, err = spy.communicate()
        print(
            f"\nprofile of our broker, {kind}: {result['tps']:,.0f}/s, "
            f"{window.broker / max(1, count) * 1e6:.0f} µs/msg under py-spy ({raw})"
        )
        if not raw.exists():
            print(f"py-spy wrote nothing: {err[-2000:]}")
            continue
        for name, share in categorize(raw):
            print(f"  {share:5.1f}%  {name}")
        print("  inclusive (stack holds):")
        for needle, share in inclusive(raw, args.inclusive):
            print(f"  {share:5.1f}%  {needle}")


# ---- main ---------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=8.0, help="length of a send load")
    parser.add_argument("--threads", type=int, default=8, help="sending goroutines")
    parser.add_argument("--size", type=int, default=128, help="body bytes")
    parser.add_argument("--recv-threads", type=int, default=4, help="receiving goroutines")
    parser.add_argument("--batch", type=int, default=32, help="messages a receive asks for")
    parser.add_argument("--warmup", type=float, default=5.0, help="unmeasured seconds of sends first")
    parser.add_argument("--tls", action="store_true", help="both sides dial TLS")
    parser.add_argument(
        "--our-tls-mode",
        default="disabled",
        choices=["disabled", "permissive"],
        help="our port (without --tls)",
    )
    parser.add_argument("--py-spy", default="", help="py-spy binary: profile our broker after the rounds")
    parser.add_argument("--native", action="store_true", help="py-spy --native (C frames too)")
    parser.add_argument(
        "--inclusive",
        nargs="*",
        default=["grpc/convert.py", "grpc/publish.py", "grpc/consume.py", "SerializeToString", "FromString"],
        help="frames whose inclusive share the profile prints",
    )
    parser.add_argument(
        "--sides",
        nargs="+",
        default=["apache", "ours"],
        choices=["apache", "ours"],
        help="measure only these (the table of ratios needs both)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args()

    print(machine_summary(), flush=True)
    print(
        f"load: Go 5.x client 5.1.4, {'TLS' if args.tls else 'plain text'} on both sides; "
        f"our port tls.server.mode={'enforcing' if args.tls else args.our_tls_mode}",
        flush=True,
    )
    binary = build_go5load()
    java, proxy_cp, namesrv_cp = "", "", ""
    if "apache" in args.sides:
        java, proxy_cp = build_java53_proxy()
        namesrv_cp = build_java53_only().server_classpath
    work = Path(tempfile.mkdtemp(prefix="grpc-sbs-"))
    load = Load(binary, work / "client-logs")
    rounds: list[dict[str, Row]] = []
    try:
        for i in range(1, args.rounds + 1):
            result: dict[str, Row] = {}
            order = ("apache", "ours") if i % 2 else ("ours", "apache")
            for name in (n for n in order if n in args.sides):
                side = Side(name, work / name, args, java, namesrv_cp, proxy_cp)
                try:
                    side.start()
                    result[name] = measure(side, load, args, i)
                finally:
                    side.stop()
            rounds.append(result)
        if rounds and len(args.sides) == 2:
            print()
            print(table(rounds), flush=True)
        if args.py_spy:
            side = Side("ours", work / "ours", args)
            try:
                side.start()
                profile(side, load, args, work)
            finally:
                side.stop()
    finally:
        if args.keep:
            print(f"work directory kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
