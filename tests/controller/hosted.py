"""Our controller and our brokers in controller mode on simulated hosts (tests/hosts.py), for
tests/controller/failover.py's scenarios: what tests/interop/harness.py's ``start_apache_group``
is for Apache 5.3.3, with our processes.

- :class:`OurControllers`: ``count`` controller replicas, each on a host of its own: ``mqcontroller``
  processes (hosts ``c0``...) beside one name server of ours (host ``ns``), or (``embedded``) our
  name servers with ``enableControllerInNamesrv=true`` (hosts ``ns0``...), every one a route
  server and a controller replica. Raft (PySyncObj) runs on each peer's port +
  ``controllerRaftPortOffset`` (1000) on the same host.
- :class:`OurGroup`: one broker group of ours in controller mode (``brokerId=-1``,
  ``brokerRole=SLAVE``, ``enableControllerMode=true``), a broker per host, with
  ``kill`` / ``isolate`` / ``restart`` by broker address as :class:`FailoverScenario` takes them.

Settings are the Apache reference's (tests/interop/harness.py's ``APACHE_CONTROLLER`` and
``APACHE_CONTROLLER_BROKER``), so that the figures compare.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from tests.hosts import BROKER_PORT, NAMESRV_PORT, Host, Network
from tests.interop.harness import APACHE_CONTROLLER, APACHE_CONTROLLER_BROKER
from tests.support import ServerProcess

#: Where a controller serves (its peer address in ``controllerDLegerPeers``), as Apache's.
CONTROLLER_PORT = 9878


def _conf(values: dict[str, Any]) -> str:
    return "".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}\n" for k, v in values.items())


@dataclass
class OurControllers:
    """The controller replicas (and the name servers) of a hosted cluster."""

    net: Network
    embedded: bool
    #: One host per controller replica (embedded: the name servers' hosts).
    hosts: list[Host]
    #: The name servers' hosts (embedded: the same as :attr:`hosts`).
    namesrv_hosts: list[Host]
    overrides: dict[str, Any] = field(default_factory=dict)
    processes: dict[str, ServerProcess] = field(default_factory=dict)  # by host name

    @property
    def addrs(self) -> list[str]:
        """Every replica's serving address (the brokers' ``controllerAddr``)."""
        return [host.addr(CONTROLLER_PORT) for host in self.hosts]

    @property
    def namesrv_addr(self) -> str:
        return ";".join(host.addr(NAMESRV_PORT) for host in self.namesrv_hosts)

    def host_of(self, addr: str) -> Host:
        return next(host for host in self.hosts if host.addr(CONTROLLER_PORT) == addr)

    def settings(self, index: int) -> dict[str, Any]:
        host = self.hosts[index]
        return {
            "controllerDLegerGroup": "group1",
            "controllerDLegerPeers": ";".join(f"n{i}-{a}" for i, a in enumerate(self.addrs)),
            "controllerDLegerSelfId": f"n{index}",
            "controllerStorePath": host.dir / "controller",
            **APACHE_CONTROLLER,
            **self.overrides,
        }

    async def start(self, index: int) -> ServerProcess:
        """Replica ``index`` on its host (again after a kill: same store)."""
        host = self.hosts[index]
        conf = host.dir / "controller.conf"
        if self.embedded:
            settings = {
                "listenPort": NAMESRV_PORT,
                "storePathRootDir": host.dir / "namesrv",
                "enableControllerInNamesrv": True,
                **self.settings(index),
            }
            conf.write_text(_conf(settings))
            process = await host.serve("aiorocketmq.namesrv", ["-c", str(conf)])
        else:
            conf.write_text(_conf(self.settings(index)))
            process = await host.serve("aiorocketmq.controller", ["-c", str(conf)])
        self.processes[host.name] = process
        return process

    async def kill(self, addr: str) -> None:
        """kill -9 of every process on the host of the replica serving at ``addr``."""
        await self.host_of(addr).kill()


async def start_controllers(
    net: Network, *, count: int = 3, embedded: bool = False, **overrides: Any
) -> OurControllers:
    """``count`` controller replicas (and the name server(s)), all started at once; returns once
    each serves (a leader may not be elected yet: :class:`ControllerClient` waits for one)."""
    if embedded:
        hosts = [await net.host(f"ns{i}") for i in range(count)]
        controllers = OurControllers(net, True, hosts, hosts, dict(overrides))
        await asyncio.gather(*(controllers.start(i) for i in range(count)))
    else:
        hosts = [await net.host(f"c{i}") for i in range(count)]
        namesrv = await net.host("ns")
        controllers = OurControllers(net, False, hosts, [namesrv], dict(overrides))
        await asyncio.gather(namesrv.namesrv(), *(controllers.start(i) for i in range(count)))
    return controllers


@dataclass
class OurGroup:
    """One broker group of ours in controller mode, a broker per host (by broker address)."""

    controllers: OurControllers
    broker_name: str
    settings: dict[str, Any]
    hosts: dict[str, Host] = field(default_factory=dict)
    processes: dict[str, ServerProcess] = field(default_factory=dict)

    @property
    def namesrv_addr(self) -> str:
        return self.controllers.namesrv_addr

    @property
    def controller_addrs(self) -> list[str]:
        return self.controllers.addrs

    @property
    def addrs(self) -> list[str]:
        return list(self.hosts)

    async def start(self, addr: str) -> ServerProcess:
        host = self.hosts[addr]
        process = await host.broker(self.broker_name, self.namesrv_addr, BROKER_PORT, **self.settings)
        self.processes[addr] = process
        return process

    async def kill(self, addr: str) -> None:
        """kill -9 of every process on the host of the broker at ``addr``."""
        await self.hosts[addr].kill()

    async def isolate(self, addr: str) -> None:
        """The host of the broker at ``addr`` unplugged (nothing closes; timeouts tell)."""
        await self.hosts[addr].isolate()

    async def restart(self, addr: str) -> ServerProcess:
        """The broker at ``addr`` started again on its host with its store (its processes killed
        and its cable plugged in first, whatever happened to it)."""
        host = self.hosts[addr]
        await host.kill()
        await host.reconnect()
        return await self.start(addr)

    def log(self, addr: str) -> str:
        process = self.processes.get(addr)
        return process.output if process is not None else ""


async def start_group(
    controllers: OurControllers,
    *,
    broker_name: str = "broker-a",
    replicas: int = 3,
    host_prefix: str = "b",
    **overrides: Any,
) -> OurGroup:
    """``replicas`` brokers of ``broker_name`` on new hosts ``<host_prefix>0``..., started at
    once with the Apache reference's controller-mode settings and ``overrides`` over them;
    returns once each serves (the group may not have formed yet)."""
    settings: dict[str, Any] = {
        **APACHE_CONTROLLER_BROKER,
        "controllerAddr": ";".join(controllers.addrs),
        **overrides,
    }
    group = OurGroup(controllers, broker_name, settings)
    for i in range(replicas):
        host = await controllers.net.host(f"{host_prefix}{i}")
        group.hosts[host.addr(BROKER_PORT)] = host
    await asyncio.gather(*(group.start(addr) for addr in group.addrs))
    return group
