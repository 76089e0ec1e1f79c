"""docker-compose.yml, proven without a Docker engine: the file validates against the Compose
specification, and every service's command runs locally (service names mapped to 127.0.0.1,
volumes to temporary directories, each published port to a free one the test holds until its
service listens) in ``depends_on`` order, each waiting for its dependencies' health checks,
until the cluster works end to end."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import socket
import subprocess
import sys
import time
import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from aiorocketmq.client import Admin
from aiorocketmq.dashboard.users import load_users
from aiorocketmq.protocol.body import ClusterInfo
from aiorocketmq.protocol.codes import RequestCode, ResponseCode
from aiorocketmq.protocol.command import RemotingCommand
from aiorocketmq.protocol.errors import MQError
from aiorocketmq.protocol.transport import connect
from tests.support import ROOT, die_with_parent

COMPOSE = ROOT / "docker-compose.yml"
BIN = Path(sys.executable).parent
VARIABLE = re.compile(r"\$\{(\w+)(?::-([^}]*))?\}")
#: The interpreter inside the image (python:3.11-slim).
IMAGE_PYTHON = "/usr/local/bin/python"


def check_schema(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "check-jsonschema"), "--builtin-schema", "vendor.compose-spec", str(path)],
        capture_output=True,
        text=True,
    )


def test_compose_file_follows_the_compose_specification(tmp_path: Path) -> None:
    result = check_schema(COMPOSE)
    assert result.returncode == 0, result.stdout + result.stderr
    # The check has teeth: a typo'd key is refused.
    broken = yaml.safe_load(COMPOSE.read_text())
    broken["services"]["namesrv"]["heathcheck"] = broken["services"]["namesrv"].pop("healthcheck")
    bad = tmp_path / "docker-compose.yml"
    bad.write_text(yaml.safe_dump(broken))
    assert check_schema(bad).returncode != 0


def test_compose_declares_the_cluster() -> None:
    services = yaml.safe_load(COMPOSE.read_text())["services"]
    assert {"namesrv", "broker-a", "broker-b"} <= set(services)
    for name in ("namesrv", "broker-a", "broker-b"):
        assert services[name]["healthcheck"]["test"][0] == "CMD"
        assert any(v.endswith(":/data") for v in services[name]["volumes"]), name
    for broker in ("broker-a", "broker-b"):
        assert services[broker]["depends_on"]["namesrv"]["condition"] == "service_healthy"
    optional = [name for name, svc in services.items() if svc.get("profiles")]
    assert all(services[name]["profiles"] == ["pipeline"] for name in optional)


@dataclass
class LocalService:
    """One compose service run as a local process."""

    name: str
    spec: dict[str, Any]
    workdir: Path
    process: asyncio.subprocess.Process | None = None
    log: Path = field(init=False)

    def __post_init__(self) -> None:
        self.log = self.workdir / f"{self.name}.log"


def _hold(port: int = 0) -> socket.socket:
    """A socket bound to ``port`` (0: any) and never listening: the port is kept from anyone
    but a server that binds it with SO_REUSEADDR, as ours do."""
    holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        holder.bind(("0.0.0.0", port))
    except OSError:
        holder.close()
        raise
    return holder


def hold_ports(published: list[int]) -> tuple[dict[int, int], list[socket.socket]]:
    """A free local port for each published one, held until the services bind them. A broker
    also listens on ``listenPort - 2`` (its VIP channel), so where the file publishes both
    ``p`` and ``p - 2`` the local pair keeps that distance."""
    mapping: dict[int, int] = {}
    holders: list[socket.socket] = []
    for port in sorted(published, reverse=True):
        if port in mapping:
            continue
        while True:
            holder = _hold()
            local = int(holder.getsockname()[1])
            if port - 2 not in published:
                break
            try:
                partner = _hold(local - 2)
            except OSError:
                holder.close()
                continue
            holders.append(partner)
            mapping[port - 2] = local - 2
            break
        holders.append(holder)
        mapping[port] = local
    return mapping, holders


class LocalCompose:
    """Runs a compose file's services without containers."""

    def __init__(self, path: Path, workdir: Path, profiles: tuple[str, ...] = ()) -> None:
        self.doc = yaml.safe_load(path.read_text())
        self.base = path.parent
        self.workdir = workdir
        names = [
            name
            for name, spec in self.doc["services"].items()
            if not spec.get("profiles") or set(spec["profiles"]) & set(profiles)
        ]
        self.services = {name: LocalService(name, self.doc["services"][name], workdir) for name in names}
        self.hosts = set(self.doc["services"])
        published = [
            int(str(mapping).split(":")[-1])
            for spec in self.doc["services"].values()
            for mapping in spec.get("ports", [])
        ]
        #: Published (container) port -> the local port standing in for it.
        self.ports, self._holders = hold_ports(published)

    def release_ports(self) -> None:
        for holder in self._holders:
            holder.close()
        self._holders = []

    def port(self, container_port: int) -> int:
        return self.ports[container_port]

    @property
    def namesrv_addr(self) -> str:
        return f"127.0.0.1:{self.port(9876)}"

    def localize(self, text: str) -> str:
        """Interpolate ``${VAR:-default}``, use this interpreter for the image's, and send
        service host names to 127.0.0.1 where they are used as hosts: ``name:port``, a quoted
        ``'name'``, or an argument that is the name."""
        text = VARIABLE.sub(lambda m: os.environ.get(m.group(1), m.group(2) or ""), text)
        if text == IMAGE_PYTHON:
            return sys.executable
        if text in self.hosts:
            return "127.0.0.1"
        for host in sorted(self.hosts, key=len, reverse=True):
            name = re.escape(host)
            text = re.sub(rf"(?<![\w.-]){name}(?=:\d)", "127.0.0.1", text)
            text = re.sub(rf"(['\"]){name}\1", r"\g<1>127.0.0.1\g<1>", text)
        if self.ports:  # one pass, so a local port equal to another published one stays
            published = "|".join(str(p) for p in sorted(self.ports, reverse=True))
            text = re.sub(rf"(?<![\w.])({published})(?!\d)", lambda m: str(self.ports[int(m[1])]), text)
        return text

    def mounts(self, service: LocalService) -> dict[str, str]:
        """Container path → local path: named volumes become empty directories; bind-mounted
        files are copied with service names and container paths mapped."""
        mapping: dict[str, str] = {}
        files: list[tuple[Path, Path]] = []
        for volume in service.spec.get("volumes", []):
            source, target, *_ = volume.split(":")
            local = self.workdir / service.name / target.strip("/").replace("/", "_")
            if source.startswith((".", "/")):
                files.append((self.base / source, local))
            else:
                local.mkdir(parents=True, exist_ok=True)
            mapping[target] = str(local)
        for source_file, local in files:
            local.parent.mkdir(parents=True, exist_ok=True)
            local.write_text(self.remap(self.localize(source_file.read_text()), mapping))
        return mapping

    @staticmethod
    def remap(text: str, mounts: dict[str, str]) -> str:
        for target, local in sorted(mounts.items(), key=lambda kv: -len(kv[0])):
            text = re.sub(rf"(?<![\w/]){re.escape(target)}(?=/|\s|$)", local, text)
        return text

    def command(self, service: LocalService, key: str = "command") -> list[str]:
        args = service.spec[key] if key == "command" else service.spec["healthcheck"]["test"][1:]
        mounts = self.mounts(service) if key == "command" else {}
        result = [self.remap(self.localize(arg), mounts) for arg in args]
        if result[0] in ("python", "python3"):
            result[0] = sys.executable
        elif (BIN / result[0]).exists():
            result[0] = str(BIN / result[0])
        return result

    def order(self) -> list[LocalService]:
        done: list[LocalService] = []
        pending = dict(self.services)
        while pending:
            ready = [
                s
                for s in pending.values()
                if all(d in [x.name for x in done] for d in s.spec.get("depends_on", {}))
            ]
            assert ready, f"depends_on cycle among {sorted(pending)}"
            for service in ready:
                done.append(service)
                del pending[service.name]
        return done

    async def healthy(self, service: LocalService, timeout: float = 60) -> None:
        """Run the service's health check until it passes, as compose does."""
        check = self.command(service, "healthcheck")
        deadline = time.monotonic() + timeout
        while True:
            assert service.process is not None
            assert service.process.returncode is None, f"{service.name} exited:\n{service.log.read_text()}"
            probe = await asyncio.create_subprocess_exec(
                *check, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
            if await probe.wait() == 0:
                return
            assert time.monotonic() < deadline, (
                f"{service.name} never became healthy:\n{service.log.read_text()}"
            )
            await asyncio.sleep(0.2)

    async def up(self) -> None:
        for service in self.order():
            for dependency, rule in service.spec.get("depends_on", {}).items():
                if rule.get("condition") == "service_healthy":
                    await self.healthy(self.services[dependency])
            (self.workdir / service.name).mkdir(parents=True, exist_ok=True)
            env = {
                **os.environ,
                **{k: self.localize(str(v)) for k, v in service.spec.get("environment", {}).items()},
            }
            with service.log.open("wb") as log:
                service.process = await asyncio.create_subprocess_exec(
                    *self.command(service),
                    preexec_fn=die_with_parent,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    cwd=self.workdir / service.name,
                    env=env,
                )
        for service in self.services.values():
            if "healthcheck" in service.spec:
                await self.healthy(service)

    async def down(self) -> dict[str, int]:
        codes = {}
        for service in reversed(self.order()):
            proc = service.process
            if proc is None:
                continue
            if proc.returncode is None:
                proc.terminate()
                try:
                    await asyncio.wait_for(proc.wait(), 30)
                except TimeoutError:
                    proc.kill()
                    await proc.wait()
            codes[service.name] = proc.returncode if proc.returncode is not None else -1
        return codes


StartCompose = Callable[..., Awaitable[LocalCompose]]


@pytest.fixture
async def compose(tmp_path: Path) -> AsyncIterator[StartCompose]:
    """Start the compose file's services (the default ones, plus ``profiles``) locally; at
    the end each must stop cleanly on SIGTERM."""
    started: list[LocalCompose] = []

    async def start(profiles: tuple[str, ...] = ()) -> LocalCompose:
        local = LocalCompose(COMPOSE, tmp_path, profiles)
        started.append(local)
        try:
            await local.up()  # every service healthy: each listens on its port now
        finally:
            local.release_ports()
        return local

    yield start
    for local in started:
        local.release_ports()
        codes = await local.down()
        for name, code in codes.items():
            assert code == 0, f"{name} exited with {code}:\n{local.services[name].log.read_text()}"


async def test_compose_services_run_together(compose: StartCompose) -> None:
    cluster = await compose()
    published = {
        name: [cluster.port(int(str(p).split(":")[-1])) for p in svc.spec.get("ports", [])]
        for name, svc in cluster.services.items()
    }
    for ports in published.values():
        for port in ports:
            _, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 10)
            writer.close()
    # The two brokers found the name server through the file's addresses and registered.
    conn = await connect("127.0.0.1", cluster.port(9876))
    try:
        deadline = time.monotonic() + 30
        while True:
            response = await conn.request(RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO))
            assert response.code == ResponseCode.SUCCESS
            info = ClusterInfo.decode(response.body)
            if {"broker-a", "broker-b"} <= set(info.broker_addr_table) and set(
                info.broker_addr_table["broker-a"].broker_addrs
            ) == {0, 1}:
                break
            assert time.monotonic() < deadline, info
            await asyncio.sleep(0.2)
    finally:
        conn.close()
    assert info.broker_addr_table["broker-a"].broker_addrs[0] == f"127.0.0.1:{cluster.port(10911)}"
    assert info.broker_addr_table["broker-b"].broker_addrs[0] == f"127.0.0.1:{cluster.port(10921)}"
    # broker-a's slave (id 1) registered under broker-a's name.
    assert info.broker_addr_table["broker-a"].broker_addrs[1] == f"127.0.0.1:{cluster.port(10941)}"
    assert info.cluster_addr_table["DefaultCluster"] == sorted(info.cluster_addr_table["DefaultCluster"])
    for port in (cluster.port(5557), cluster.port(5558)):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /metrics HTTP/1.1\r\n\r\n")
        body = await asyncio.wait_for(reader.read(), 10)
        writer.close()
        assert body.startswith(b"HTTP/1.1 200 OK") and b"rocketmq_broker_tps" in body
    # The dashboard asks for a login: it made its users file in its volume on the first start.
    dashboard = cluster.port(8080)
    page = await _http(dashboard, "GET / HTTP/1.1\r\n")
    assert page.startswith(b"HTTP/1.1 303 See Other") and b"location: /login" in page.lower(), page[:300]
    users = Path(cluster.mounts(cluster.services["dashboard"])["/data"]) / "users.properties"
    password = load_users(users)["admin"].password
    body = f"username=admin&password={urllib.parse.quote(password)}&next=/"
    answer = await _http(
        dashboard,
        "POST /login HTTP/1.1\r\nContent-Type: application/x-www-form-urlencoded\r\n"
        f"Content-Length: {len(body)}\r\n",
        body,
    )
    cookie = re.search(rb"set-cookie: ([^;\r]+)", answer, re.I)
    assert cookie, answer[:300]
    # Logged in, it shows both brokers, found through the file's name server address.
    page = await _http(dashboard, f"GET / HTTP/1.1\r\nCookie: {cookie[1].decode()}\r\n")
    assert page.startswith(b"HTTP/1.1 200 OK"), page[:200]
    for name in (b"broker-a", b"broker-b"):
        assert b'data-broker="' + name + b'"' in page, page.decode(errors="replace")


async def _http(port: int, head: str, body: str = "") -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"{head}Host: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n{body}".encode())
    answer = await asyncio.wait_for(reader.read(), 20)
    writer.close()
    return answer


def test_compose_publishes_every_port_on_loopback_only() -> None:
    """Nothing in the file asks for a password by default, so no port is offered beyond the
    host; and the dashboard, which must listen on the container's own interface for Docker to
    forward to it, runs with a users file."""
    services = yaml.safe_load(COMPOSE.read_text())["services"]
    published = [(name, mapping) for name, spec in services.items() for mapping in spec.get("ports", [])]
    assert len(published) >= 9
    for name, mapping in published:
        assert isinstance(mapping, str) and re.fullmatch(r"127\.0\.0\.1:(\d+):\1", mapping), (name, mapping)
    dashboard = services["dashboard"]["command"]
    assert dashboard[dashboard.index("--users") + 1].startswith("/data/") and "--init-users" in dashboard


def test_dockerfile_installs_what_the_compose_commands_run() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    services = yaml.safe_load(COMPOSE.read_text())["services"]
    scripts = (ROOT / "pyproject.toml").read_text()
    for spec in services.values():
        executable = spec["command"][0]
        if executable not in ("python", "python3"):
            assert re.search(rf"^{re.escape(executable)}\s*=", scripts, re.M), (
                f"{executable} is not a console script"
            )
    for package in (
        "aiorocketmq",
        "protocol",
        "namesrv",
        "broker",
        "client",
        "pipeline",
        "tools",
        "dashboard",
    ):
        assert f"COPY {package} " in dockerfile
    # The wheel is built where a compiler is (setup.py's compiled parts), and the image
    # installs that wheel rather than the bare sources.
    assert "COPY pyproject.toml setup.py " in dockerfile and "pip wheel" in dockerfile
    assert re.search(r"^RUN pip install .*/wheels/aiorocketmq-", dockerfile, re.M), dockerfile


async def test_compose_pipeline_profile_produces_revenue(compose: StartCompose) -> None:
    """The optional example pipeline runs against the file's cluster and emits closed windows
    to its result topic and to Parquet."""
    local = await compose(("pipeline",))
    pipeline = local.services["pipeline"]
    data_dir = Path(local.mounts(pipeline)["/data"])
    async with Admin(namesrv=local.namesrv_addr) as admin:
        deadline = time.monotonic() + 240
        results = 0
        while results == 0:
            assert pipeline.process is not None and pipeline.process.returncode is None, (
                pipeline.log.read_text()
            )
            assert time.monotonic() < deadline, f"no revenue results yet:\n{pipeline.log.read_text()[-4000:]}"
            await asyncio.sleep(1)
            with contextlib.suppress(MQError):
                results = sum([await admin.max_offset(q) for q in await admin.queues("CategoryRevenue")])
    assert list((data_dir / "revenue-parquet").glob("*.parquet"))
