"""Fixtures for the 5.x gRPC endpoint: a name server and a broker (real processes) whose gRPC
port the tests read from the broker's log, and the official 5.x Python client
(``rocketmq-python-client``), installed on first use into a cache outside the repository
and run as a child process (see ``py5_client.py`` for why).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
import pytest_asyncio

from aiorocketmq.broker.grpc import messaging_pb2_grpc as pb_grpc
from tests.cluster import Cluster
from tests.interop.harness import require

HERE = Path(__file__).resolve().parent
PY5_CLIENT = "rocketmq-python-client==5.1.2"
CACHE = Path(os.environ.get("AIOROCKETMQ_INTEROP_CACHE", Path.home() / ".cache" / "aiorocketmq-interop"))
PY5_DIR = CACHE / "rocketmq-python-client-5.1.2"
NODE5_CLIENT = "rocketmq-client-nodejs@1.0.8"
NODE5_DIR = CACHE / "rocketmq-client-nodejs-1.0.8"
GRPC_PORT = r"gRPC endpoint for 5.x clients on \S+ port (\d+)"


@contextlib.contextmanager
def cache_lock(name: str = "py5") -> Iterator[None]:
    """Holds ``CACHE/.<name>.lock``: one process at a time installs or builds a client there."""
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / f".{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def build_go_program(source: Path, name: str, why: str) -> Path:
    """The Go program in ``source`` (its own go.mod), built once per digest of its sources into
    the cache (a warm cache builds nothing)."""
    go = require("go", why)
    sha = hashlib.sha256()
    for path in sorted([*source.glob("*.go"), source / "go.mod", source / "go.sum"]):
        sha.update(path.name.encode())
        sha.update(path.read_bytes())
    binary = CACHE / f"{name}-{sha.hexdigest()[:16]}" / name
    with cache_lock(name):
        if not binary.exists():
            binary.parent.mkdir(parents=True, exist_ok=True)
            done = subprocess.run(
                [go, "build", "-buildvcs=false", "-o", f"{binary}.tmp", "."],
                cwd=source,
                capture_output=True,
                text=True,
                check=False,
            )
            if done.returncode != 0:
                raise RuntimeError(f"go build failed:\n{done.stdout}\n{done.stderr}")
            Path(f"{binary}.tmp").replace(binary)
    return binary


def install_py5_client() -> Path:
    """``rocketmq-python-client`` and its dependencies in a directory of their own."""
    done = PY5_DIR / ".installed"
    with cache_lock():
        if not done.exists():
            staging = PY5_DIR.with_name(PY5_DIR.name + ".tmp")
            subprocess.run(["rm", "-rf", str(staging), str(PY5_DIR)], check=True)
            subprocess.run(
                [sys.executable, "-m", "pip", "install", "--quiet", "--target", str(staging), PY5_CLIENT],
                check=True,
            )
            staging.rename(PY5_DIR)
            done.touch()
    return PY5_DIR


def install_node5_client() -> Path:
    """``rocketmq-client-nodejs`` from npm, in a directory of its own; its node_modules."""
    done = NODE5_DIR / ".installed"
    with cache_lock():
        if not done.exists():
            npm = shutil.which("npm")
            if npm is None:
                raise RuntimeError("the Node.js client tests need `npm` (Debian: apt-get install npm)")
            NODE5_DIR.mkdir(parents=True, exist_ok=True)
            subprocess.run(
                [
                    npm,
                    "install",
                    "--no-audit",
                    "--no-fund",
                    "--silent",
                    "--prefix",
                    str(NODE5_DIR),
                    NODE5_CLIENT,
                ],
                check=True,
            )
            done.touch()
    return NODE5_DIR / "node_modules"


@dataclass
class Grpc5:
    """A broker serving 5.x clients, and how to drive the official client against it."""

    cluster: Cluster
    port: int
    client_path: Path

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def run(self, scenario: str, timeout: float = 90.0, **args: Any) -> dict[str, Any]:
        """Run one scenario of ``py5_client.py``; what it printed."""
        args.setdefault("endpoint", self.endpoint)
        argv = [sys.executable, str(HERE / "py5_client.py"), scenario, json.dumps(args)]
        code, text = await run_child(argv, timeout, env={"PYTHONPATH": str(self.client_path)}, what=scenario)
        return result_of(text, code, scenario)


async def run_child(
    argv: list[str], timeout: float, *, env: dict[str, str] | None = None, what: str = ""
) -> tuple[int, str]:
    """Run a client program (a 5.x client driven by the tests) to its end: its exit code and
    output (stdout and stderr). One that does not finish in ``timeout`` seconds is killed and
    the test fails with what it printed."""
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env={**os.environ, **(env or {})},
    )
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        proc.kill()
        out, _ = await proc.communicate()
        raise AssertionError(
            f"{what or argv[0]} did not finish in {timeout}s:\n{out.decode(errors='replace')}"
        ) from None
    return proc.returncode or 0, out.decode(errors="replace")


def result_of(text: str, code: int, what: str) -> dict[str, Any]:
    """The ``RESULT {json}`` line a client program printed."""
    for line in text.splitlines():
        if line.startswith("RESULT "):
            result: dict[str, Any] = json.loads(line[len("RESULT ") :])
            return result
    raise AssertionError(f"{what} exited with {code} and no result:\n{text}")


async def start_grpc_broker(cluster: Cluster, name: str = "broker-a", **overrides: Any) -> int:
    broker = await cluster.start_broker(name, enableGrpcServer="true", **overrides)
    assert broker.process is not None
    line = await broker.process.wait_for_line(GRPC_PORT)
    match = re.search(GRPC_PORT, line)
    assert match is not None
    return int(match.group(1))


@pytest_asyncio.fixture(scope="package", loop_scope="package")
async def grpc5(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Grpc5]:
    path = await asyncio.to_thread(install_py5_client)
    # One broker for every module of this package (tests use unique names): each start costs seconds.
    cluster = Cluster(tmp_path_factory.mktemp("grpc5"))
    await cluster.start_namesrv()
    try:
        port = await start_grpc_broker(
            cluster,
            transactionCheckInterval=1000,
            transactionTimeOut=1000,
            autoCreateTopicEnable="true",
            recallMessageEnable="true",
        )
        yield Grpc5(cluster, port, path)
    finally:
        await cluster.stop()


@pytest_asyncio.fixture(loop_scope="package")
async def stub(grpc5: Grpc5) -> AsyncIterator[pb_grpc.MessagingServiceStub]:
    """Our own generated client stub on the broker's gRPC port (for what the official client
    never sends: malformed requests, the pull RPCs, server-initiated commands)."""
    async with grpc.aio.insecure_channel(grpc5.endpoint) as channel:
        yield pb_grpc.MessagingServiceStub(channel)


@dataclass
class Grpc5Pair:
    """One name server and two brokers, ``broker-a`` and ``broker-b``, each serving 5.x clients
    on its own gRPC port. A test drives a client at either endpoint; for ``py5_client.py``,
    ``Grpc5(pair.cluster, pair.ports[name], install_py5_client())``."""

    cluster: Cluster
    ports: dict[str, int]

    def endpoint(self, broker: str) -> str:
        return f"127.0.0.1:{self.ports[broker]}"


@pytest_asyncio.fixture(scope="package", loop_scope="package")
async def grpc5_pair(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Grpc5Pair]:
    # Shared by every module of the package (tests use unique topic and group names).
    cluster = Cluster(tmp_path_factory.mktemp("grpc5-pair"))
    await cluster.start_namesrv()
    try:
        names = ("broker-a", "broker-b")
        ports = await asyncio.gather(
            *(start_grpc_broker(cluster, name, autoCreateTopicEnable="true") for name in names)
        )
        yield Grpc5Pair(cluster, dict(zip(names, ports, strict=True)))
    finally:
        await cluster.stop()
