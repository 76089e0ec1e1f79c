"""A real local cluster for integration tests: ``mqnamesrv`` and ``mqbroker`` child processes,
each broker with its own store directory and a generated ``broker.conf``.

Every server binds port 0 and reports the port it got; a restarted server must keep its port
(clients and stored message ids know it), so its start is retried while the port is busy.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .support import ServerProcess, start_on_port

#: Short delays for every level, so retries and delayed messages finish within a test.
FAST_DELAY_LEVELS = " ".join(["1s"] * 18)


@dataclass
class BrokerProcess:
    name: str
    port: int
    conf: Path
    store_dir: Path
    process: ServerProcess | None = None

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"


@dataclass
class Cluster:
    """Name server(s) plus brokers, all real processes."""

    root: Path
    cluster_name: str = "DefaultCluster"
    namesrv_processes: list[ServerProcess] = field(default_factory=list)
    namesrv_ports: list[int] = field(default_factory=list)
    brokers: dict[str, BrokerProcess] = field(default_factory=dict)

    @property
    def namesrv_addr(self) -> str:
        return ";".join(f"127.0.0.1:{port}" for port in self.namesrv_ports)

    async def start_namesrv(self, count: int = 1, **settings: Any) -> None:
        """Start ``count`` name servers; ``settings`` (``orderMessageEnable=True``, ...) go to
        each one's properties file."""
        for i in range(len(self.namesrv_ports), len(self.namesrv_ports) + count):
            args = ["--listen-port", "0", "--store-dir", str(self.root / f"namesrv{i}")]
            if settings:
                conf = self.root / f"namesrv{i}.conf"
                conf.write_text("".join(f"{k}={_property(v)}\n" for k, v in settings.items()))
                args += ["-c", str(conf)]
            proc = ServerProcess("aiorocketmq.namesrv", args)
            await proc.start()
            assert proc.port is not None
            self.namesrv_processes.append(proc)
            self.namesrv_ports.append(proc.port)

    def broker_settings(self, name: str, port: int, store_dir: Path, **overrides: Any) -> dict[str, Any]:
        settings: dict[str, Any] = {
            "brokerClusterName": self.cluster_name,
            "brokerName": name,
            "brokerId": 0,
            "listenPort": port,
            "brokerIP1": "127.0.0.1",
            "namesrvAddr": self.namesrv_addr,
            "storePathRootDir": str(store_dir),
            "mappedFileSizeCommitLog": 16 * 1024 * 1024,
            "mappedFileSizeConsumeQueue": 300_000 * 20,
            "maxIndexNum": 100_000,
            "maxHashSlotNum": 20_000,
            "messageDelayLevel": FAST_DELAY_LEVELS,
            "metricsPromExporterEnable": "false",
            # The 5.x gRPC endpoint only where a test asks for it (tests/grpc): it costs
            # every broker start grpcio's import and threads.
            "enableGrpcServer": "false",
            "grpcServerPort": 0,
        }
        settings.update(overrides)
        return settings

    async def start_broker(self, name: str = "broker-a", **overrides: Any) -> BrokerProcess:
        """Start ``name``: on port 0 the first time, on the port it had before on a restart."""
        existing = self.brokers.get(name)
        if existing is None:
            store_dir = self.root / name
            store_dir.mkdir(parents=True, exist_ok=True)
            existing = BrokerProcess(name, 0, self.root / f"{name}.conf", store_dir)
            self.brokers[name] = existing
        settings = self.broker_settings(name, existing.port, existing.store_dir, **overrides)
        existing.conf.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
        existing.process = await start_on_port(
            lambda: ServerProcess("aiorocketmq.broker", ["-c", str(existing.conf)]), existing.port
        )
        assert existing.process.port is not None
        existing.port = existing.process.port
        return existing

    async def stop_broker(self, name: str) -> int:
        broker = self.brokers[name]
        assert broker.process is not None
        return await broker.process.stop()

    async def kill_broker(self, name: str) -> int:
        broker = self.brokers[name]
        assert broker.process is not None
        return await broker.process.kill()

    async def stop(self) -> None:
        for broker in self.brokers.values():
            if broker.process is not None:
                await broker.process.stop()
        for proc in self.namesrv_processes:
            await proc.stop()


def _property(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


REMOTING_PORT = re.compile(r"remoting clients on port (\d+)")


@dataclass
class ProxyProcess:
    """An ``mqproxy`` process: its gRPC port and its remoting port (0: none)."""

    process: ServerProcess
    grpc_port: int
    remoting_port: int

    async def stop(self) -> int:
        return await self.process.stop()


async def start_mqproxy(namesrv_addr: str | None, *args: str) -> ProxyProcess:
    """``mqproxy`` on free ports of loopback in front of ``namesrv_addr``'s brokers (None: the
    name servers of the config that ``args`` name, with ``-pc``)."""
    argv = ["--grpc-port", "0", "--remoting-port", "0", "--bind-address", "127.0.0.1", *args]
    if namesrv_addr is not None:
        argv = ["-n", namesrv_addr, *argv]
    process = await ServerProcess("aiorocketmq.proxy", argv).start()
    assert process.port is not None
    match = REMOTING_PORT.search(process.output)
    return ProxyProcess(process, process.port, int(match.group(1)) if match else 0)


async def start_mqcontroller(conf: Path, port: int = 0) -> ServerProcess:
    """``mqcontroller -c conf``, ready once it serves (a restart on its old ``port`` is retried
    while that port is still busy)."""
    return await start_on_port(lambda: ServerProcess("aiorocketmq.controller", ["-c", str(conf)]), port)
