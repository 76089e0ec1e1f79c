"""The interop harness: brings Apache RocketMQ's Java pieces and the Go client, builds the suite's
own scenario programs, and runs Apache's name server and broker as real processes.

Everything downloaded or built lives outside the repository: Maven's ``~/.m2``, Go's module
cache, and one build cache (``$AIOROCKETMQ_INTEROP_CACHE``, default
``~/.cache/aiorocketmq-interop``) holding the compiled Java classes, the classpaths Maven resolved
and the Go binary. The cache is keyed by a digest of the poms and sources, so a change rebuilds and
a warm machine builds nothing; Maven runs offline first and goes to its registry only when the
local repository lacks something. A missing ``java``, ``mvn`` or ``go`` fails the test that needs it
with a message saying what to install: the suite never skips these tests silently.

``python -m tests.interop.harness`` builds everything once (what ``make interop-deps`` runs).
"""

from __future__ import annotations

import abc
import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from tests.support import die_with_parent

HERE = Path(__file__).resolve().parent
JAVA_DIR = HERE / "java"
#: The one JSON-lines writer the Java scenario programs print with (interop.Json), compiled into
#: each module that uses it.
JSON_WRITER = JAVA_DIR / "src" / "main" / "java" / "interop" / "Json.java"
GO_DIR = HERE / "go"
CACHE = Path(os.environ.get("AIOROCKETMQ_INTEROP_CACHE", Path.home() / ".cache" / "aiorocketmq-interop"))

#: Small heaps: two cores and several JVMs at once on a developer machine. Direct memory is not
#: left at the heap's size (the JVM's default): a 5.x broker keeps a direct encoding buffer of
#: maxMessageSize (4 MiB) in every thread that writes the commit log, and after the 5.3 scenarios
#: one held 212 MiB of them (224 MiB at peak, native memory tracking of a run). A 4 MiB request
#: then needs an 8 MiB frame buffer more. The differential's over-limit send failed in CI with
#: "connection closed by peer", which a limit of 64 MiB reproduces at once: OutOfMemoryError
#: "Cannot reserve 8388608 bytes of direct buffer memory", and Netty closes the connection.
#: Apache's own runbroker.sh gives the broker 15g.
SERVER_HEAP = ["-Xms256m", "-Xmx256m", "-XX:MaxDirectMemorySize=1g", "-XX:+UseSerialGC"]
CLIENT_HEAP = ["-Xms64m", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"]


class ToolchainMissing(RuntimeError):
    """A tool the interop suite needs is not installed."""


def require(tool: str, why: str) -> str:
    path = shutil.which(tool)
    if path is None:
        raise ToolchainMissing(
            f"the interop suite needs `{tool}` on the PATH ({why}); install it "
            "(Debian: `apt-get install openjdk-17-jdk-headless maven golang`) and run again"
        )
    return path


def free_port() -> int:
    """A port nothing listens on now. Apache's servers need a number in their config file (they
    cannot report a port 0 bind); a race with another process is retried (ApacheBroker.start)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class Toolchain:
    """What the harness built: classpaths for the Java programs and the Go binary's path."""

    java: str
    client_classpath: str  # the suite's classes + rocketmq-client/tools 4.9.8 and their deps
    server_classpath: str  # Apache's name server + broker (reference/pom.xml)
    go_binary: Path
    #: The release of Apache's servers on server_classpath: 4.9.7 (java/reference), or 5.3.3
    #: (java53/reference, build_java53), whose broker gets APACHE5_BROKER's settings as well.
    server_version: str = "4.9.7"

    def java_command(self, main: str, args: Sequence[str], props: dict[str, str] | None = None) -> list[str]:
        defines = [f"-D{k}={v}" for k, v in (props or {}).items()]
        return [self.java, *CLIENT_HEAP, *defines, "-cp", self.client_classpath, main, *args]


def _digest(paths: Sequence[Path]) -> str:
    sha = hashlib.sha256()
    for path in sorted(paths):
        sha.update(str(path.relative_to(HERE)).encode())
        sha.update(path.read_bytes())
    return sha.hexdigest()[:16]


def _run(
    cmd: Sequence[str], cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        list(cmd), cwd=cwd, env={**os.environ, **(env or {})}, capture_output=True, text=True, check=False
    )


def _maven(args: Sequence[str], pom: Path) -> None:
    """Run Maven offline first (a warm ``~/.m2`` needs no network), online if that fails."""
    mvn = require("mvn", "Maven resolves Apache RocketMQ's jars")
    offline = _run([mvn, "-B", "-q", "-o", "-f", str(pom), *args], cwd=pom.parent)
    if offline.returncode == 0:
        return
    online = _run([mvn, "-B", "-q", "-f", str(pom), *args], cwd=pom.parent)
    if online.returncode != 0:
        raise RuntimeError(f"maven failed for {pom}:\n{online.stdout}\n{online.stderr}")


def _source_tree(
    out: Path, root: Path, carried: Sequence[Path] = (), renames: dict[str, str] | None = None
) -> Path:
    """``root``'s Java sources with ``carried`` ones of another tree added (``renames`` applied
    to their text), under ``out/src``: what a module's pom compiles as ``interop.src``."""
    src = out / "src"
    shutil.rmtree(src, ignore_errors=True)
    shutil.copytree(root / "src" / "main" / "java", src)
    for path in carried:
        text = path.read_text()
        for old, new in (renames or {}).items():
            text = text.replace(old, new)
        target = src / path.relative_to(path.parents[1])  # keeps the package directory
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    return src


def _build_java_tree(
    root: Path, label: str, carried: Sequence[Path] = (), renames: dict[str, str] | None = None
) -> tuple[str, str, str]:
    """Compile ``root``'s scenario programs (``root/pom.xml``) and resolve its classpath and that of
    ``root/reference/pom.xml`` (Apache's servers), cached under ``CACHE/<label>-<digest>``.

    ``carried`` sources of another tree are compiled along, with ``renames`` applied to their
    text (the 4.9.8 scenario program built on the 5.3.2 client)."""
    java = require("java", "Apache RocketMQ's servers, client and mqadmin are Java")
    sources = [*root.rglob("*.java"), *root.rglob("pom.xml"), *carried]
    out = CACHE / f"{label}-{_digest(sources)}"
    client_cp = out / "client.classpath"
    server_cp = out / "server.classpath"
    classes = out / "build" / "classes"
    if not (client_cp.exists() and server_cp.exists() and classes.exists()):
        out.mkdir(parents=True, exist_ok=True)
        src = _source_tree(out, root, carried, renames)
        _maven(
            [
                f"-Dinterop.build.dir={out / 'build'}",
                f"-Dinterop.src={src}",
                "compile",
                "dependency:build-classpath",
                f"-Dmdep.outputFile={client_cp}.tmp",
            ],
            root / "pom.xml",
        )
        _maven(
            ["dependency:build-classpath", f"-Dmdep.outputFile={server_cp}.tmp"],
            root / "reference" / "pom.xml",
        )
        Path(f"{client_cp}.tmp").replace(client_cp)
        Path(f"{server_cp}.tmp").replace(server_cp)
    return java, f"{classes}:{client_cp.read_text().strip()}", server_cp.read_text().strip()


def build_java() -> tuple[str, str, str]:
    """``(java, client classpath, server classpath)``: java/ on the 4.9.8 client, Apache's 4.9.7 servers."""
    return _build_java_tree(JAVA_DIR, "java")


def build_go() -> Path:
    go = require("go", "the Go client v2 scenarios are a Go program")
    sources = [*GO_DIR.glob("*.go"), GO_DIR / "go.mod", GO_DIR / "go.sum"]
    binary = CACHE / f"go-{_digest(sources)}" / "interop-go"
    if not binary.exists():
        binary.parent.mkdir(parents=True, exist_ok=True)
        done = _run([go, "build", "-o", f"{binary}.tmp", "."], cwd=GO_DIR)
        if done.returncode != 0:
            raise RuntimeError(f"go build failed:\n{done.stdout}\n{done.stderr}")
        Path(f"{binary}.tmp").replace(binary)
    return binary


@contextlib.contextmanager
def _cache_lock() -> Iterator[None]:
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def build_java_only() -> Toolchain:
    with _cache_lock():
        java, client_cp, server_cp = build_java()
    return Toolchain(java, client_cp, server_cp, Path())


def build_all() -> Toolchain:
    with _cache_lock():
        java, client_cp, server_cp = build_java()
        binary = build_go()
    return Toolchain(java, client_cp, server_cp, binary)


# ---- Apache's servers as processes -------------------------------------------------------

LOGBACK = """<configuration>
  <appender name="FILE" class="ch.qos.logback.core.FileAppender">
    <file>{log}</file>
    <encoder><pattern>%d %-5level [%thread] %logger{{0}} - %msg%n</pattern></encoder>
  </appender>
  <root level="WARN"><appender-ref ref="FILE"/></root>
</configuration>
"""


#: The same for Apache's 5.x servers, whose logback is shaded into org.apache.rocketmq.logging
#: and reads the file named by ``-Drmq.logback.configurationFile`` (LOGBACK5_PROPERTY). Without it
#: they load the broker jar's own rmq.broker.logback.xml, which logs at INFO under
#: ``${user.home}/logs`` and prints several hundred lines of logback status on stdout.
LOGBACK5 = LOGBACK.replace("ch.qos.logback.", "org.apache.rocketmq.logging.ch.qos.logback.")
LOGBACK5_PROPERTY = "rmq.logback.configurationFile"


def rocketmq_home(root: Path) -> Path:
    """A ROCKETMQ_HOME with the logback files Apache's start-up classes load (logs in ``root``):
    ``conf/logback_<name>.xml`` for 4.x, ``conf/rmq_<name>.logback.xml`` for 5.x."""
    conf = root / "conf"
    conf.mkdir(parents=True, exist_ok=True)
    for name in ("namesrv", "broker", "tools", "proxy"):
        (conf / f"logback_{name}.xml").write_text(LOGBACK.format(log=root / f"{name}.log"))
        (conf / f"rmq_{name}.logback.xml").write_text(LOGBACK5.format(log=root / f"{name}.log"))
    return root


def _server_jvm(toolchain: Toolchain, home: Path, name: str) -> list[str]:
    """The JVM and its options for one of Apache's servers (``name``: namesrv or broker)."""
    return [
        toolchain.java,
        *SERVER_HEAP,
        f"-Duser.home={home}",
        f"-D{LOGBACK5_PROPERTY}={home / 'conf' / f'rmq_{name}.logback.xml'}",
        "-cp",
        toolchain.server_classpath,
    ]


class JavaProcess:
    """A JVM child whose stdout is kept and watched for a readiness line."""

    def __init__(self, command: Sequence[str], home: Path, name: str) -> None:
        self.name = name
        self.lines: list[str] = []
        self._changed = threading.Condition()
        self.proc = subprocess.Popen(
            list(command),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=home,
            env={**os.environ, "ROCKETMQ_HOME": str(home)},
            preexec_fn=die_with_parent,
        )
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()

    def _drain(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._changed:
                self.lines.append(line.rstrip())
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    def wait_for(self, pattern: str, timeout: float = 120.0) -> str:
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        seen = 0
        with self._changed:
            while True:
                for line in self.lines[seen:]:
                    if regex.search(line):
                        return line
                seen = len(self.lines)
                if self.proc.poll() is not None and not self._reader.is_alive():
                    raise RuntimeError(f"{self.name} exited ({self.proc.returncode}):\n{self.output}")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise RuntimeError(
                        f"{self.name}: no line matching {pattern!r} in {timeout}s:\n{self.output}"
                    )
                self._changed.wait(min(left, 1.0))

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._reader.join(5)


def _properties(path: Path, settings: dict[str, Any]) -> Path:
    path.write_text(
        "".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}\n" for k, v in settings.items())
    )
    return path


_Started = TypeVar("_Started")


def _on_free_ports(start_once: Callable[[], _Started], attempts: int) -> _Started:
    """``start_once()``, again on new free ports while it fails with a JVM BindException (a port
    picked free was taken before the JVM bound it), at most ``attempts`` times."""
    for attempt in range(attempts):
        try:
            return start_once()
        except RuntimeError as exc:
            if "BindException" not in str(exc) or attempt == attempts - 1:
                raise
    raise AssertionError("unreachable")


@dataclass
class ApacheNamesrv:
    """Apache's name server (NamesrvStartup) on a free port."""

    toolchain: Toolchain
    root: Path
    port: int = field(default_factory=free_port)
    process: JavaProcess | None = None

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> ApacheNamesrv:
        home = rocketmq_home(self.root)
        conf = _properties(self.root / "namesrv.conf", {"listenPort": self.port})
        command = [
            *_server_jvm(self.toolchain, home, "namesrv"),
            "org.apache.rocketmq.namesrv.NamesrvStartup",
            "-c",
            str(conf),
        ]
        self.process = JavaProcess(command, home, "apache namesrv")
        self.process.wait_for("boot success")
        return self

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()


@dataclass
class ApacheBroker:
    """Apache's broker (BrokerStartup) on a free port, its store in ``root``."""

    toolchain: Toolchain
    root: Path
    namesrv_addr: str
    name: str = "apache-a"
    cluster_name: str = "DefaultCluster"
    overrides: dict[str, Any] = field(default_factory=dict)
    port: int = 0
    process: JavaProcess | None = None

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, attempts: int = 3) -> ApacheBroker:
        # The JVM takes seconds to bind its three ports (listenPort, - 2 for the VIP channel, + 1
        # for HA): on a busy machine another process can take one meanwhile.
        return _on_free_ports(self._start_once, attempts)

    def _start_once(self) -> ApacheBroker:
        while True:
            self.port = free_port()
            if all(_port_free(p) for p in (self.port - 2, self.port + 1)):
                break
        home = rocketmq_home(self.root)
        store = self.root / "store"
        settings: dict[str, Any] = {
            "brokerClusterName": self.cluster_name,
            "brokerName": self.name,
            "brokerId": 0,
            "listenPort": self.port,
            "brokerIP1": "127.0.0.1",
            "namesrvAddr": self.namesrv_addr,
            "storePathRootDir": store,
            "storePathCommitLog": store / "commitlog",
            "mappedFileSizeCommitLog": 16 * 1024 * 1024,
            "mappedFileSizeConsumeQueue": 300_000 * 20,
            "maxIndexNum": 100_000,
            "maxHashSlotNum": 20_000,
            "autoCreateTopicEnable": True,
            "autoCreateSubscriptionGroup": True,
            "diskMaxUsedSpaceRatio": 98,
            **(APACHE5_BROKER if self.toolchain.server_version.startswith("5.") else {}),
            **self.overrides,
        }
        conf = _properties(self.root / "broker.conf", settings)
        command = [
            *_server_jvm(self.toolchain, home, "broker"),
            "org.apache.rocketmq.broker.BrokerStartup",
            "-c",
            str(conf),
        ]
        self.process = JavaProcess(command, home, f"apache broker {self.name}")
        self.process.wait_for("boot success", timeout=180)
        if self.toolchain.server_version.startswith("5."):
            self._await_registered()
        return self

    def _await_registered(self, timeout: float = 30.0) -> None:
        """Wait until each name server lists this broker. A 5.x broker registers at start only with
        the name servers its remoting client has already connected to (getAvailableNameSrvList,
        filled by a scan that starts with the broker and runs concurrently): when the scan is late
        it says "boot success" unregistered and registers 10 s later, with its first periodic
        registration (Apache 5.3.3)."""
        deadline = time.monotonic() + timeout
        for namesrv in self.namesrv_addr.split(";"):
            while self.addr.encode() not in _remoting_call(namesrv, 106):  # GET_BROKER_CLUSTER_INFO
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{self.name} at {self.addr} never registered with {namesrv}")
                time.sleep(0.2)

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()


def _remoting_call(addr: str, code: int, timeout: float = 5.0) -> bytes:
    """One remoting request without header fields or body (JSON-serialized header) to
    ``host:port``: the response's body, empty when the server cannot be reached."""
    import socket
    import struct

    host, port = addr.rsplit(":", 1)
    header = json.dumps(
        {
            "code": code,
            "flag": 0,
            "language": "JAVA",
            "opaque": 1,
            "serializeTypeCurrentRPC": "JSON",
            "version": 0,
        }
    ).encode()
    try:
        with socket.create_connection((host, int(port)), timeout=timeout) as conn:
            conn.sendall(struct.pack(">II", 4 + len(header), len(header)) + header)
            (length,) = struct.unpack(">I", _recv_exactly(conn, 4))
            frame = _recv_exactly(conn, length)
    except OSError:
        return b""
    header_length = struct.unpack(">I", frame[:4])[0] & 0xFFFFFF
    return frame[4 + header_length :]


def _recv_exactly(conn: Any, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            raise ConnectionError("closed mid-frame")
        data += chunk
    return data


def _port_free(port: int) -> bool:
    import socket

    if port <= 0:
        return False
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


# ---- running the scenario programs -------------------------------------------------------


@dataclass
class ProgramRun:
    """One run of a scenario program: exit code, JSON records and the raw output."""

    returncode: int
    records: list[dict[str, Any]]
    stdout: str
    stderr: str

    def of(self, scenario: str, event: str | None = None) -> list[dict[str, Any]]:
        return [
            r
            for r in self.records
            if r.get("scenario") == scenario and (event is None or r["event"] == event)
        ]

    def ended(self, scenario: str) -> dict[str, Any]:
        ends = self.of(scenario, "end")
        assert ends, f"scenario {scenario} never ended:\n{self.stdout[-4000:]}\n{self.stderr[-4000:]}"
        return ends[-1]

    def describe(self) -> str:
        return f"exit {self.returncode}\nstdout:\n{self.stdout[-6000:]}\nstderr:\n{self.stderr[-6000:]}"


def parse_records(stdout: str) -> list[dict[str, Any]]:
    records = []
    for line in stdout.splitlines():
        if line.startswith("{"):
            with contextlib.suppress(json.JSONDecodeError):
                records.append(json.loads(line))
    return records


def run_program(
    command: Sequence[str],
    *,
    cwd: Path,
    timeout: float,
    stdin: str | None = None,
    env: dict[str, str] | None = None,
    mkdir: bool = False,
) -> ProgramRun:
    if mkdir:
        cwd.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        list(command),
        input=stdin,
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        preexec_fn=die_with_parent,
        check=False,
    )
    return ProgramRun(done.returncode, parse_records(done.stdout), done.stdout, done.stderr)


def body(scenario: str, i: int, size: int) -> bytes:
    """The body scenario programs send for message ``i`` (Scenarios.body / main.go body)."""
    unit = f"{scenario}:{i};"
    return (unit * (size // len(unit) + 1))[:size].encode()


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# ---- the RocketMQ 5.x Java client (tests/grpc) ---------------------------------------------

JAVA5_DIR = HERE / "java5"


def _build_module(
    root: Path, label: str, tool_reason: str, sources: Sequence[Path], carried: Sequence[Path] = ()
) -> tuple[str, str]:
    """``(java, classpath)`` of one Maven module of the suite (its classes and their
    dependencies, ``carried`` sources of another tree compiled along), compiled and resolved
    once into ``CACHE/<label>-<digest of sources>``."""
    java = require("java", tool_reason)
    with _cache_lock():
        out = CACHE / f"{label}-{_digest([*sources, *carried])}"
        deps = out / "client.classpath"
        classes = out / "build" / "classes"
        if not (deps.exists() and classes.exists()):
            out.mkdir(parents=True, exist_ok=True)
            src = _source_tree(out, root, carried)
            _maven(
                [
                    f"-Dinterop.build.dir={out / 'build'}",
                    f"-Dinterop.src={src}",
                    "compile",
                    "dependency:build-classpath",
                    f"-Dmdep.outputFile={deps}.tmp",
                ],
                root / "pom.xml",
            )
            Path(f"{deps}.tmp").replace(deps)
    return java, f"{classes}:{deps.read_text().strip()}"


def build_java5() -> tuple[str, str]:
    """``(java, classpath)`` of the 5.x scenario program (java5/) on rocketmq-client-java."""
    sources = [*JAVA5_DIR.rglob("*.java"), JAVA5_DIR / "pom.xml"]
    return _build_module(JAVA5_DIR, "java5", "the RocketMQ 5.x Java client is Java", sources)


# ---- Apache RocketMQ 5.3: the remoting client 5.3.2 and the 5.3.3 servers (java53/) ---------

JAVA53_DIR = HERE / "java53"

#: Settings Apache's 5.x broker gets beyond the 4.9.7 ones (ApacheBroker): its timer log (5.x's
#: delayed messages) in 16 MiB files like the commit log rather than 100 MiB ones.
APACHE5_BROKER: dict[str, Any] = {
    "mappedFileSizeTimerLog": 16 * 1024 * 1024,
}


#: The 4.9.8 scenario program (java/, interop.Scenarios) is built on the 5.3.2 client too, so
#: the same scenarios run on both: RocketMQ 5 moved the protocol classes to its remoting module,
#: and java53/'s shim stands in for rocketmq-tools' DefaultMQAdminExt (no 5.3.2 release).
LEGACY_SOURCES = [
    JAVA_DIR / "src" / "main" / "java" / "interop" / name for name in ("Scenarios.java", "Json.java")
]
LEGACY_RENAMES = {
    "org.apache.rocketmq.common.protocol.": "org.apache.rocketmq.remoting.protocol.",
    "org.apache.rocketmq.tools.admin.DefaultMQAdminExt": "interop53.shim.DefaultMQAdminExt",
}


def build_java53() -> tuple[str, str, str]:
    """``(java, client classpath, server classpath)``: the suite's 5.3 scenario program (java53/,
    Scenarios53.java) and the 4.9.8 one (LEGACY_SOURCES) on rocketmq-client and rocketmq-acl
    5.3.2, and Apache's 5.3.3 name server, broker and tools (java53/reference), built and cached
    like :func:`build_java`."""
    return _build_java_tree(JAVA53_DIR, "java53", LEGACY_SOURCES, LEGACY_RENAMES)


def build_java53_only() -> Toolchain:
    with _cache_lock():
        java, client_cp, server_cp = build_java53()
    return Toolchain(java, client_cp, server_cp, Path(), server_version="5.3.3")


JAVA53_ADMIN_DIR = HERE / "java53admin"


def build_java53_admin() -> tuple[str, str]:
    """``(java, classpath)`` of Apache 5.3.3's ``mqadmin`` (rocketmq-tools 5.3.3) with the suite's
    AdminSession (java53admin/): a module of its own, the tools 5.3.3 and java53/'s client 5.3.2
    not sharing a classpath."""
    sources = [*JAVA53_ADMIN_DIR.rglob("*.java"), JAVA53_ADMIN_DIR / "pom.xml"]
    return _build_module(JAVA53_ADMIN_DIR, "java53admin", "Apache RocketMQ's mqadmin is Java", sources)


# ---- Apache RocketMQ 5.3.3's proxy in cluster mode (java53proxy/) ------------------------------

JAVA53_PROXY_DIR = HERE / "java53proxy"


def build_java53_proxy() -> tuple[str, str]:
    """``(java, classpath)`` of Apache's rocketmq-proxy 5.3.3 (java53proxy/pom.xml), resolved
    once into ``CACHE/java53proxy-<digest>``: a module of its own, so the 5.3.3 reference
    servers keep their classpath and cache."""
    java = require("java", "Apache RocketMQ's proxy is Java")
    pom = JAVA53_PROXY_DIR / "pom.xml"
    with _cache_lock():
        out = CACHE / f"java53proxy-{_digest([pom])}"
        deps = out / "server.classpath"
        if not deps.exists():
            out.mkdir(parents=True, exist_ok=True)
            _maven(["dependency:build-classpath", f"-Dmdep.outputFile={deps}.tmp"], pom)
            Path(f"{deps}.tmp").replace(deps)
    return java, deps.read_text().strip()


@dataclass
class ApacheProxy:
    """Apache 5.3.3's proxy (ProxyStartup) in cluster mode: a process of its own in front of the
    brokers of ``cluster_name`` it learns from ``namesrv_addr``, serving 5.x clients on
    ``grpc_port`` and 4.x ones on ``remoting_port``. ``overrides`` go to its ``rmq-proxy.json``
    (keys of Apache's ProxyConfig)."""

    java: str
    classpath: str
    root: Path
    namesrv_addr: str
    cluster_name: str = "DefaultCluster"
    overrides: dict[str, Any] = field(default_factory=dict)
    grpc_port: int = 0
    remoting_port: int = 0
    process: JavaProcess | None = None

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def start(self, attempts: int = 3) -> ApacheProxy:
        return _on_free_ports(self._start_once, attempts)

    def _start_once(self) -> ApacheProxy:
        self.grpc_port, self.remoting_port = free_port(), free_port()
        home = rocketmq_home(self.root)
        settings: dict[str, Any] = {
            "rocketMQClusterName": self.cluster_name,
            "proxyMode": "cluster",
            "namesrvAddr": self.namesrv_addr,
            "grpcServerPort": self.grpc_port,
            "remotingListenPort": self.remoting_port,
            # Two cores shared by the suite: Apache's defaults start dozens of threads per pool.
            "grpcThreadPoolNums": 4,
            "grpcWorkerLoopNum": 2,
            "rocketmqMQClientNum": 1,
            "enablePrintJstack": False,
            **self.overrides,
        }
        config = self.root / "rmq-proxy.json"
        config.write_text(json.dumps(settings, indent=2))
        command = [
            self.java,
            *SERVER_HEAP,
            f"-Duser.home={home}",
            f"-D{LOGBACK5_PROPERTY}={home / 'conf' / 'rmq_proxy.logback.xml'}",
            "-cp",
            self.classpath,
            "org.apache.rocketmq.proxy.ProxyStartup",
            "-pc",
            str(config),
        ]
        # ProxyStartup prints this on stdout once its gRPC and remoting servers listen.
        self.process = JavaProcess(command, home, "apache proxy")
        self.process.wait_for("rocketmq-proxy startup successfully", timeout=180)
        return self

    def stop(self) -> None:
        # Killed: the proxy keeps no state, and its orderly shutdown (hooks draining clients,
        # heartbeat and relay pools) took 10-30 s here.
        if self.process is not None:
            if self.process.proc.poll() is None:
                self.process.proc.kill()
                self.process.proc.wait()
            self.process.stop()


# ---- Spring: rocketmq-spring-boot-starter 2.3.5 on Spring Boot 3.5 (spring/) -----------------

SPRING_DIR = HERE / "spring"


def build_spring() -> tuple[str, str]:
    """``(java, classpath)`` of the suite's Spring Boot application (spring/, SpringInterop.java
    and application.properties) on Apache's rocketmq-spring-boot-starter (the digest covers the
    resources as well)."""
    sources = [
        path for path in (*SPRING_DIR.joinpath("src").rglob("*"), SPRING_DIR / "pom.xml") if path.is_file()
    ]
    return _build_module(
        SPRING_DIR,
        "spring",
        "the Spring Boot application on rocketmq-spring-boot-starter is Java",
        sources,
        carried=[JSON_WRITER],
    )


if __name__ == "__main__":
    started = time.monotonic()
    built = build_all()
    build_java53_only()
    build_spring()
    build_java53_admin()
    build_java53_proxy()
    print(
        f"interop harness ready in {time.monotonic() - started:.1f}s: cache {CACHE}, go binary {built.go_binary}"
    )


# ---- controller mode (T) ---------------------------------------------------------------------
#
# Apache 5.3.3's controller (rocketmq-controller, already on the 5.3.3 server classpath through
# rocketmq-namesrv's dependencies) and its brokers in controller mode, each process optionally on
# a simulated host (tests/hosts.py): ``prefix`` is the host's ``Host.prefix`` (``ip netns exec
# <namespace>``) and ``address`` its own address, which the process binds and advertises. Hosts
# have ports of their own, so these use Apache's fixed default ports there.

#: A controller's port in Apache's controller configs (conf/controller/): the DLedger peer address,
#: where the other replicas, the brokers and ``mqadmin -a`` reach it.
CONTROLLER_PORT = 9878
APACHE_NAMESRV_PORT = 9876
APACHE_BROKER_PORT = 10911

#: Controller settings for the tests (keys of Apache's ControllerConfig): the DLedger data in
#: 16 MiB files rather than 1 GiB ones, and inactive brokers scanned for every second (5 s by
#: default; a killed broker's closed channel is noticed at once anyway).
APACHE_CONTROLLER: dict[str, Any] = {
    "mappedFileSize": 16 * 1024 * 1024,
    "scanNotActiveBrokerInterval": 1000,
    "enableElectUncleanMaster": False,
    "notifyBrokerRoleChanged": True,
}

#: Broker settings for controller mode in the tests (BrokerConfig / MessageStoreConfig keys):
#: what Apache's quick-start broker-n0.conf sets (brokerId -1 so that the controller hands one
#: out, starting as a SLAVE until it says otherwise, every SyncStateSet replica acking a write),
#: with the periods shortened from 5-10 s so that a test sees a group form within seconds, and
#: pulls served by a slave (``slaveReadEnable``; a slave rejects them as SYSTEM_BUSY otherwise),
#: so that a test can read what a replica holds.
APACHE_CONTROLLER_BROKER: dict[str, Any] = {
    "brokerId": -1,
    "brokerRole": "SLAVE",
    "enableControllerMode": True,
    "allAckInSyncStateSet": True,
    "syncBrokerMetadataPeriod": 1000,
    "checkSyncStateSetPeriod": 1000,
    "syncControllerMetadataPeriod": 2000,
    "controllerHeartBeatTimeoutMills": 3000,
    "haMaxTimeSlaveNotCatchup": 5000,
    "slaveReadEnable": True,
}


def controller_peers(addresses: Sequence[str], port: int = CONTROLLER_PORT) -> str:
    """``controllerDLegerPeers`` for replicas at ``addresses``: ``n0-addr:port;n1-...``."""
    return ";".join(f"n{i}-{address}:{port}" for i, address in enumerate(addresses))


class _HostedJava(abc.ABC):
    """A JVM of Apache's started in the background (:meth:`launch`), then awaited
    (:meth:`wait_ready`, blocking: run it in a thread from asyncio)."""

    process: JavaProcess | None
    ready_line: str = "boot success"

    @abc.abstractmethod
    def launch(self) -> None:
        """Start the JVM without waiting for it."""

    def wait_ready(self, timeout: float = 180.0) -> None:
        assert self.process is not None, "launch() first"
        self.process.wait_for(self.ready_line, timeout=timeout)

    def start(self, timeout: float = 180.0) -> Any:
        self.launch()
        self.wait_ready(timeout)
        return self

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.proc.poll() is None

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()

    def kill(self) -> None:
        """kill -9 of the JVM alone (a host's kill takes every process of the host)."""
        if self.process is not None:
            if self.process.proc.poll() is None:
                self.process.proc.kill()
                self.process.proc.wait()
            self.process.stop()


@dataclass
class ApacheController(_HostedJava):
    """One replica of Apache 5.3.3's controller group (DLedger), replica ``index`` of ``peers``
    (every replica's address, in the same order everywhere; ids ``n0``, ``n1``...).

    ``embedded``: inside Apache's name server (NamesrvStartup with ``enableControllerInNamesrv``,
    serving routes on ``namesrv_port``), else standalone (ControllerStartup). Its data (DLedger
    log) stays in ``root/controller`` across restarts. ``overrides`` are ControllerConfig (or,
    embedded, NamesrvConfig) keys over :data:`APACHE_CONTROLLER`."""

    toolchain: Toolchain
    root: Path
    peers: Sequence[str]
    index: int = 0
    embedded: bool = True
    port: int = CONTROLLER_PORT
    namesrv_port: int = APACHE_NAMESRV_PORT
    prefix: Sequence[str] = ()
    group: str = "group1"
    overrides: dict[str, Any] = field(default_factory=dict)
    process: JavaProcess | None = None

    @property
    def address(self) -> str:
        return self.peers[self.index]

    @property
    def addr(self) -> str:
        """Where brokers and admin tools reach this controller replica."""
        return f"{self.address}:{self.port}"

    @property
    def namesrv_addr(self) -> str:
        assert self.embedded, "a standalone controller serves no routes"
        return f"{self.address}:{self.namesrv_port}"

    @property
    def controller_addrs(self) -> str:
        """Every replica's address, as brokers' ``controllerAddr`` takes them."""
        return ";".join(f"{address}:{self.port}" for address in self.peers)

    def settings(self) -> dict[str, Any]:
        settings: dict[str, Any] = {
            "controllerDLegerGroup": self.group,
            "controllerDLegerPeers": controller_peers(self.peers, self.port),
            "controllerDLegerSelfId": f"n{self.index}",
            "controllerStorePath": self.root / "controller",
            **APACHE_CONTROLLER,
        }
        if self.embedded:
            settings = {
                "listenPort": self.namesrv_port,
                "enableControllerInNamesrv": True,
                **settings,
            }
        return {**settings, **self.overrides}

    def launch(self) -> None:
        home = rocketmq_home(self.root)
        kind = "namesrv" if self.embedded else "controller"
        # ControllerStartup loads conf/rmq_controller.logback.xml: rocketmq_home makes none.
        (home / "conf" / "rmq_controller.logback.xml").write_text(
            LOGBACK5.format(log=home / "controller.log")
        )
        conf = _properties(self.root / f"{kind}.conf", self.settings())
        main = (
            "org.apache.rocketmq.namesrv.NamesrvStartup"
            if self.embedded
            else "org.apache.rocketmq.controller.ControllerStartup"
        )
        command = [*self.prefix, *_server_jvm(self.toolchain, home, kind), main, "-c", str(conf)]
        # Embedded, NamesrvStartup boots the name server first, then the controller.
        self.ready_line = (
            "ControllerManager boot success" if self.embedded else "Controller Server boot success"
        )
        self.process = JavaProcess(command, home, f"apache controller n{self.index} ({kind})")


@dataclass
class ApacheControllerBroker(_HostedJava):
    """Apache 5.3.3's broker in controller mode, one replica of the group ``name``: it asks the
    controllers at ``controller_addr`` (``;``-separated) for a broker id and a role, and
    registers with ``namesrv_addr``. It binds and advertises ``address`` (brokerIP1 and
    brokerIP2, the HA address slaves connect to); its store stays in ``root/store`` across
    restarts (its broker id and epoch file with it). ``overrides`` over
    :data:`APACHE_CONTROLLER_BROKER` and the suite's small-file store settings."""

    toolchain: Toolchain
    root: Path
    address: str
    namesrv_addr: str
    controller_addr: str
    name: str = "broker-a"
    cluster_name: str = "DefaultCluster"
    port: int = APACHE_BROKER_PORT
    prefix: Sequence[str] = ()
    overrides: dict[str, Any] = field(default_factory=dict)
    process: JavaProcess | None = None

    @property
    def addr(self) -> str:
        return f"{self.address}:{self.port}"

    def settings(self) -> dict[str, Any]:
        store = self.root / "store"
        return {
            "brokerClusterName": self.cluster_name,
            "brokerName": self.name,
            "listenPort": self.port,
            "haListenPort": self.port + 1,
            "brokerIP1": self.address,
            "brokerIP2": self.address,
            "namesrvAddr": self.namesrv_addr,
            "controllerAddr": self.controller_addr,
            "storePathRootDir": store,
            "storePathCommitLog": store / "commitlog",
            "mappedFileSizeCommitLog": 16 * 1024 * 1024,
            "mappedFileSizeConsumeQueue": 300_000 * 20,
            "maxIndexNum": 100_000,
            "maxHashSlotNum": 20_000,
            "autoCreateTopicEnable": True,
            "autoCreateSubscriptionGroup": True,
            "diskMaxUsedSpaceRatio": 98,
            **APACHE5_BROKER,
            **APACHE_CONTROLLER_BROKER,
            **self.overrides,
        }

    def launch(self) -> None:
        home = rocketmq_home(self.root)
        conf = _properties(self.root / "broker.conf", self.settings())
        command = [
            *self.prefix,
            *_server_jvm(self.toolchain, home, "broker"),
            "org.apache.rocketmq.broker.BrokerStartup",
            "-c",
            str(conf),
        ]
        self.process = JavaProcess(command, home, f"apache broker {self.name}@{self.address}")


@dataclass
class ApacheHostedGroup:
    """Apache 5.3.3 in controller mode on simulated hosts (:func:`start_apache_group`): the
    controllers embedded in name servers, one broker group, each process on a host of its own."""

    controllers: list[ApacheController]
    brokers: dict[str, ApacheControllerBroker]  # by broker address
    hosts: dict[str, Any]  # broker address -> tests.hosts.Host

    @property
    def namesrv_addr(self) -> str:
        return ";".join(c.namesrv_addr for c in self.controllers)

    @property
    def controller_addrs(self) -> list[str]:
        return [c.addr for c in self.controllers]

    async def kill(self, addr: str) -> None:
        """kill -9 of every process on the host of the broker at ``addr``."""
        await self.hosts[addr].kill()

    async def isolate(self, addr: str) -> None:
        """The host of the broker at ``addr`` unplugged: a power loss seen from the others (no
        connection closes; they notice by timeouts)."""
        await self.hosts[addr].isolate()

    async def restart(self, addr: str) -> None:
        """The broker at ``addr`` started again on its host, with its store (after a kill, or
        an isolation: its processes are killed and the host plugged in again first)."""
        import asyncio

        host = self.hosts[addr]
        await host.kill()
        await host.reconnect()
        broker = self.brokers[addr]
        broker.stop()  # reaps the killed JVM
        await asyncio.to_thread(broker.start)

    def stop(self) -> None:
        """Reap the JVMs (killed with their hosts when the network closes)."""
        for process in [*self.controllers, *self.brokers.values()]:
            process.stop()


async def start_apache_group(
    toolchain: Toolchain,
    net: Any,
    *,
    replicas: int = 3,
    controllers: int = 1,
    broker_name: str = "broker-a",
    broker_overrides: dict[str, Any] | None = None,
    controller_overrides: dict[str, Any] | None = None,
) -> ApacheHostedGroup:
    """``controllers`` Apache name servers with the controller embedded (hosts ``ns0``...) and
    ``replicas`` brokers of the group ``broker_name`` in controller mode (hosts ``b0``...) on
    ``net`` (a tests.hosts.Network), every JVM launched at once (brokers retry the controllers
    until they are up); returns once each says it booted (the group may not have formed yet).
    On a failure the JVMs started are reaped; the network's exit kills them anyway."""
    import asyncio

    ns_hosts = [await net.host(f"ns{i}") for i in range(controllers)]
    peers = [h.address for h in ns_hosts]
    group = ApacheHostedGroup(
        [
            ApacheController(
                toolchain,
                h.dir / "apache",
                peers,
                index=i,
                prefix=h.prefix,
                overrides=dict(controller_overrides or {}),
            )
            for i, h in enumerate(ns_hosts)
        ],
        {},
        {},
    )
    for i in range(replicas):
        host = await net.host(f"b{i}")
        broker = ApacheControllerBroker(
            toolchain,
            host.dir / "apache",
            host.address,
            group.namesrv_addr,
            group.controllers[0].controller_addrs,
            name=broker_name,
            prefix=host.prefix,
            overrides=dict(broker_overrides or {}),
        )
        group.brokers[broker.addr] = broker
        group.hosts[broker.addr] = host
    processes: list[_HostedJava] = [*group.controllers, *group.brokers.values()]
    try:
        for process in processes:
            process.launch()
        await asyncio.gather(*(asyncio.to_thread(process.wait_ready) for process in processes))
    except BaseException:
        for process in processes:
            process.kill()
        raise
    return group


# controller mode (R) -------------------------------------------------------------------------
# Apache 5.3.3's name server with its controller embedded (T's ApacheController, embedded) on free
# loopback ports, for our brokers in controller mode without simulated hosts. The controller does
# not answer on the name server's port: it serves on its DLedger peer's port
# (controllerDLegerPeers), which is what brokers put in controllerAddr.


def start_loopback_controller(toolchain: Toolchain, root: Path, **overrides: Any) -> ApacheController:
    """Apache's name server + embedded single-peer controller on free ports of 127.0.0.1, once
    its controller is leader (answers CONTROLLER_GET_METADATA_INFO with ``isLeader=true``)."""
    controller = launch_loopback_controller(toolchain, root, **overrides)
    await_loopback_controller(controller)
    return controller


def launch_loopback_controller(toolchain: Toolchain, root: Path, **overrides: Any) -> ApacheController:
    """:func:`start_loopback_controller` without the wait (:func:`await_loopback_controller`), to
    start several side by side. Launch from a thread that outlives the JVM (the main one): the JVM
    is SIGTERMed when the thread that forked it ends (die_with_parent)."""
    controller = ApacheController(
        toolchain, root, ["127.0.0.1"], port=free_port(), namesrv_port=free_port(), overrides=overrides
    )
    controller.launch()
    return controller


def await_loopback_controller(controller: ApacheController) -> None:
    """Until the launched ``controller`` booted and is leader (blocking; any thread)."""
    controller.wait_ready()
    await_controller_leader(controller.addr)


def await_controller_leader(addr: str, timeout: float = 60.0) -> None:
    """Wait until the controller at ``addr`` answers CONTROLLER_GET_METADATA_INFO (1005) as leader."""
    deadline = time.monotonic() + timeout
    while True:
        fields: dict[str, Any] = {}
        with contextlib.suppress(OSError, RuntimeError, ValueError):
            fields = remoting_header(addr, 1005)
        if str(fields.get("isLeader", "")).lower() == "true":
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"the controller at {addr} elected no leader in {timeout}s")
        time.sleep(0.3)


def remoting_header(
    addr: str, code: int, fields: dict[str, str] | None = None, timeout: float = 5.0
) -> dict[str, Any]:
    """One request without a body; the response's header fields (``extFields``); RuntimeError
    when it is not SUCCESS."""
    import socket
    import struct

    host, port = addr.rsplit(":", 1)
    command = {
        "code": code,
        "flag": 0,
        "language": "JAVA",
        "opaque": 1,
        "serializeTypeCurrentRPC": "JSON",
        "version": 475,
    }
    if fields:
        command["extFields"] = fields
    request = json.dumps(command).encode()
    with socket.create_connection((host, int(port)), timeout) as conn:
        conn.sendall(struct.pack(">II", 4 + len(request), len(request)) + request)
        (length,) = struct.unpack(">I", _recv_exactly(conn, 4))
        frame = _recv_exactly(conn, length)
    (header_length,) = struct.unpack(">I", frame[:4])
    header = json.loads(frame[4 : 4 + (header_length & 0xFFFFFF)])
    if header.get("code") != 0:
        raise RuntimeError(f"{addr} answered {header.get('code')}: {header.get('remark')}")
    answer: dict[str, Any] = header.get("extFields") or {}
    return answer
