"""Simulated machines for tests: each host is a Linux network namespace on a virtual switch,
so a test can kill a whole machine, pull its cable or cut it from some peers only.

A :class:`Network` (an async context manager, run as root) makes a switch (a bridge in a
namespace of its own) and, per :meth:`Network.host`, a namespace plugged into it by a veth
pair, with an address of a private /24 that no route of this machine uses. The test process
itself is one more host, :attr:`Network.local`: a veth from the root namespace to the switch
(the only thing added to the root namespace, with its connected route, removed on exit), so
clients run in the test process reach every host and can be cut from some.

- :meth:`Host.kill`: kill -9 of every process in the namespace, as a crash of every process
  (the kernel still closes their sockets; :meth:`Host.isolate` first to lose power instead);
- :meth:`Host.isolate` / :meth:`Host.reconnect`: the host's switch port down / up (its packets
  and those to it vanish; nothing on the host sees an error);
- :meth:`Host.cut` / :meth:`Host.heal`: nftables rules inside the host's namespace drop what
  it exchanges with one other host, both ways (``nft`` is Debian's ``nftables``).

Every namespace and link is named ``rmqh<pid>x<n>...`` (the test process's pid), so
concurrent runs do not collide and a later run removes what a dead run left. Leaving the
context kills every process in its namespaces and removes them all, whatever the test did.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import itertools
import json
import os
import re
import shutil
import signal
import socket
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, BinaryIO

from .cluster import Cluster
from .support import ServerProcess, die_with_parent

PREFIX = "rmqh"
#: ``rmqh<pid>x<n>``, the start of every name a run makes (a veth name allows 15 bytes).
RUN_NAME = re.compile(rf"^{PREFIX}(\d+)x(\d+)")
HOST_NAME = re.compile(r"^[a-z][a-z0-9]{0,15}$")
NAMESRV_PORT = 9876
BROKER_PORT = 10911
#: nftables set of the addresses a host is cut from; the chains drop both directions.
_NFT_RULES = """
table inet rmqhosts {
    set cut { type ipv4_addr; }
    chain input { type filter hook input priority 0; policy accept; ip saddr @cut drop; }
    chain output { type filter hook output priority 0; policy accept; ip daddr @cut drop; }
}
"""
_runs = itertools.count()
#: Host.reaches in a namespace: exit 0 when a connection to argv[1]:argv[2] opens in time.
_CONNECT = """
import socket, sys
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=float(sys.argv[3])).close()
except OSError:
    sys.exit(1)
"""


class HostsUnavailable(RuntimeError):
    """This machine cannot make simulated hosts (not root, no ``ip``/``nft``, kernel refuses)."""


class CommandError(RuntimeError):
    """An ``ip`` or ``nft`` command failed (its stderr is the message)."""


async def _command(*argv: str, stdin: bytes | None = None, check: bool = True) -> str:
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate(stdin)
    if check and proc.returncode != 0:
        raise CommandError(f"{' '.join(argv)}: exit {proc.returncode}: {err.decode().strip()}")
    return out.decode()


def requirements_missing() -> list[str]:
    """What this machine lacks to make simulated hosts (empty: nothing)."""
    missing = []
    if os.geteuid() != 0:
        missing.append(f"root (network namespaces need it; running as uid {os.geteuid()})")
    if shutil.which("ip") is None:
        missing.append("iproute2's `ip` (apt-get install iproute2)")
    if shutil.which("nft") is None:
        missing.append("`nft` (make nftables, or apt-get install nftables)")
    return missing


async def _namespaces() -> list[str]:
    return [line.split()[0] for line in (await _command("ip", "netns", "list")).splitlines() if line.strip()]


async def _root_links() -> list[str]:
    return [link["ifname"] for link in json.loads(await _command("ip", "-j", "link", "show") or "[]")]


async def _namespace_pids(namespace: str) -> list[int]:
    out = await _command("ip", "netns", "pids", namespace, check=False)
    return [int(pid) for pid in out.split()]


async def _kill_namespace(namespace: str, timeout: float = 10.0) -> int:
    """kill -9 every process in ``namespace`` until none is left (a dying one may fork); the
    number killed."""
    killed = 0
    deadline = time.monotonic() + timeout
    while pids := await _namespace_pids(namespace):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
                killed += 1
        if time.monotonic() > deadline:
            raise RuntimeError(f"processes {pids} survive kill -9 in namespace {namespace}")
        await asyncio.sleep(0.02)
    return killed


async def remove_dead_runs() -> list[str]:
    """Remove the namespaces and root links of runs whose process is gone; what it removed."""
    removed = []
    for name in await _root_links():
        match = RUN_NAME.match(name)
        if match and _gone(int(match.group(1))):
            await _command("ip", "link", "del", name, check=False)
            removed.append(name)
    for namespace in await _namespaces():
        match = RUN_NAME.match(namespace)
        if match and _gone(int(match.group(1))):
            await _kill_namespace(namespace)
            await _command("ip", "netns", "del", namespace, check=False)
            removed.append(namespace)
    return removed


async def _free_subnet(seed: int) -> ipaddress.IPv4Network:
    """A 10.x.y.0/24 that no route or address of the root namespace overlaps (the default
    route aside), starting from ``seed`` so that concurrent runs pick different ones."""
    taken = []
    for route in json.loads(await _command("ip", "-4", "-j", "route", "show", "table", "all") or "[]"):
        dst = route.get("dst", "default")
        if dst != "default":
            network = ipaddress.ip_network(dst, strict=False)
            if network.prefixlen > 0:
                taken.append(network)
    for link in json.loads(await _command("ip", "-4", "-j", "addr", "show") or "[]"):
        for addr in link.get("addr_info", []):
            taken.append(ipaddress.ip_network(f"{addr['local']}/{addr['prefixlen']}", strict=False))
    candidates = 55 * 256  # 10.200.0.0/24 .. 10.254.255.0/24
    for i in range(candidates):
        n = (seed + i) % candidates
        subnet = ipaddress.IPv4Network(f"10.{200 + n // 256}.{n % 256}.0/24")
        if not any(subnet.overlaps(other) for other in taken):
            return subnet
    raise HostsUnavailable("no free 10.200-254.x.0/24 subnet for the simulated hosts")


class Host:
    """One simulated machine (or, with no namespace, the test process's own end)."""

    def __init__(self, network: Network, name: str, address: str, namespace: str | None, port: str) -> None:
        self.network = network
        self.name = name
        self.address = address
        #: The network namespace (None: the test process's root namespace).
        self.namespace = namespace
        #: The switch port it is plugged into (a veth end in the switch's namespace).
        self.port = port
        #: A directory of its own under the network's, for data and logs.
        self.dir = network.root / name
        self.dir.mkdir(parents=True, exist_ok=True)
        self._processes: list[asyncio.subprocess.Process] = []
        self._servers: list[ServerProcess] = []
        self._cut: set[str] = set()
        self._firewall = False
        self._logs = itertools.count()

    def __repr__(self) -> str:
        return f"Host({self.name} {self.address})"

    @property
    def prefix(self) -> list[str]:
        """What runs a command on this host."""
        return ["ip", "netns", "exec", self.namespace] if self.namespace is not None else []

    def addr(self, port: int) -> str:
        return f"{self.address}:{port}"

    # -- processes ----------------------------------------------------------------------------

    async def run(
        self, argv: Sequence[str], *, env: Mapping[str, str] | None = None, **kwargs: Any
    ) -> asyncio.subprocess.Process:
        """Start ``argv`` on this host; ``kwargs`` go to ``create_subprocess_exec``. Its output
        goes to a log file in :attr:`dir` unless ``stdout`` says otherwise."""
        kwargs.setdefault("stdin", asyncio.subprocess.DEVNULL)
        log = None
        if "stdout" not in kwargs:
            log = _log_file(self.dir / f"run{next(self._logs)}.log")
            kwargs["stdout"] = log
            kwargs.setdefault("stderr", asyncio.subprocess.STDOUT)
        try:
            proc = await asyncio.create_subprocess_exec(
                *self.prefix,
                *argv,
                env={**os.environ, **env} if env is not None else None,
                preexec_fn=die_with_parent,
                **kwargs,
            )
        finally:
            if log is not None:
                log.close()  # the child has its own descriptor
        self._processes.append(proc)
        return proc

    async def serve(
        self, module: str, args: Sequence[str], *, env: dict[str, str] | None = None, timeout: float = 30.0
    ) -> ServerProcess:
        """``python -m module args`` on this host, ready once it logs ``listening on``."""
        server = ServerProcess(module, args, env=env, prefix=self.prefix)
        self._servers.append(server)
        return await server.start(timeout)

    async def namesrv(self, port: int = NAMESRV_PORT, **settings: Any) -> ServerProcess:
        """Our name server on ``port`` (ports are the host's own: no collisions)."""
        args = ["--listen-port", str(port), "--store-dir", str(self.dir / "namesrv")]
        if settings:
            conf = self.dir / "namesrv.conf"
            conf.write_text("".join(f"{k}={_property(v)}\n" for k, v in settings.items()))
            args += ["-c", str(conf)]
        return await self.serve("aiorocketmq.namesrv", args)

    async def broker(
        self, name: str, namesrv: str, port: int = BROKER_PORT, **settings: Any
    ) -> ServerProcess:
        """Our broker ``name`` on ``port`` (its HA port is the next one), registering with
        ``namesrv``, with tests/cluster.py's settings for tests and ``settings`` over them.
        A restart keeps its store (``dir/<name>``) and port."""
        store = self.dir / name
        store.mkdir(exist_ok=True)
        merged = Cluster(self.dir).broker_settings(
            name, port, store, namesrvAddr=namesrv, brokerIP1=self.address, **settings
        )
        conf = self.dir / f"{name}.conf"
        conf.write_text("".join(f"{k}={_property(v)}\n" for k, v in merged.items()))
        return await self.serve("aiorocketmq.broker", ["-c", str(conf)])

    async def listen(self, port: int) -> ServerProcess:
        """A bare TCP listener on ``port`` that accepts and closes (for reachability checks)."""
        return await self.serve("tests.hosts", ["listen", str(port)])

    async def reaches(self, address: str, port: int, timeout: float = 0.5) -> bool:
        """Whether a TCP connection from this host to ``address:port`` opens within ``timeout``."""
        if self.namespace is None:
            try:
                _, writer = await asyncio.wait_for(asyncio.open_connection(address, port), timeout)
            except (OSError, TimeoutError):
                return False
            writer.close()
            return True
        proc = await self.run(
            [sys.executable, "-I", "-S", "-c", _CONNECT, address, str(port), str(timeout)],
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )
        return await proc.wait() == 0

    async def pids(self) -> list[int]:
        """Every process in this host's namespace."""
        if self.namespace is None:
            return []
        return await _namespace_pids(self.namespace)

    async def kill(self) -> int:
        """kill -9 every process on this host; returns how many (once none is left)."""
        if self.namespace is None:
            raise RuntimeError("the test process's own end cannot be killed")
        killed = await _kill_namespace(self.namespace)
        await self._reap()
        return killed

    async def _reap(self) -> None:
        for server in self._servers:
            await server.kill()  # already dead: waits for it and its output
        for proc in self._processes:
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await asyncio.wait_for(proc.wait(), 10)

    # -- network faults -----------------------------------------------------------------------

    async def isolate(self) -> None:
        """Unplug this host from the switch: its traffic and any to it vanish."""
        await self.network.switch_command("link", "set", self.port, "down")

    async def reconnect(self) -> None:
        await self.network.switch_command("link", "set", self.port, "up")

    async def cut(self, other: Host) -> None:
        """Drop everything between this host and ``other`` (both ways), nothing else."""
        if self.namespace is None:
            return await other.cut(self)
        if not self._firewall:
            await _command(*self.prefix, "nft", "-f", "-", stdin=_NFT_RULES.encode())
            self._firewall = True
        if other.address not in self._cut:
            await _command(
                *self.prefix, "nft", "add", "element", "inet", "rmqhosts", "cut", f"{{ {other.address} }}"
            )
            self._cut.add(other.address)

    async def heal(self, other: Host) -> None:
        """Undo :meth:`cut` between the two, whichever side made it."""
        for host, peer in ((self, other), (other, self)):
            if host.namespace is not None and peer.address in host._cut:
                await _command(
                    *host.prefix,
                    "nft",
                    "delete",
                    "element",
                    "inet",
                    "rmqhosts",
                    "cut",
                    f"{{ {peer.address} }}",
                )
                host._cut.discard(peer.address)


class Network:
    """Simulated hosts on one switch; see the module's docstring."""

    def __init__(self, root: Path) -> None:
        #: Where hosts keep their data and logs (``root/<host>``).
        self.root = root
        self._number = next(_runs)
        self.run = f"{PREFIX}{os.getpid()}x{self._number}"
        self.switch = f"{self.run}-switch"
        self.uplink = self.run  # the root namespace's end of the test process's link
        self.hosts: dict[str, Host] = {}
        self.subnet: ipaddress.IPv4Network | None = None
        self._local: Host | None = None
        self._created: list[str] = []

    @property
    def local(self) -> Host:
        """The test process's end: clients in the test process connect from this address."""
        assert self._local is not None, "use the Network inside `async with`"
        return self._local

    async def switch_command(self, *args: str) -> str:
        return await _command("ip", "-n", self.switch, *args)

    async def __aenter__(self) -> Network:
        missing = requirements_missing()
        if missing:
            raise HostsUnavailable("simulated hosts need " + "; ".join(missing))
        await remove_dead_runs()
        try:
            await self._make_switch()
        except BaseException:
            await self.close()
            raise
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def _make_switch(self) -> None:
        self.subnet = await _free_subnet(os.getpid() * 7 + self._number)
        try:
            await self._add_namespace(self.switch)
        except CommandError as error:
            raise HostsUnavailable(f"the kernel refused a network namespace: {error}") from None
        try:
            await self.switch_command("link", "add", "switch", "type", "bridge")
            await self.switch_command("link", "set", "switch", "up")
            await _command(
                "ip",
                "link",
                "add",
                self.uplink,
                "type",
                "veth",
                "peer",
                "name",
                "local",
                "netns",
                self.switch,
            )
        except CommandError as error:
            raise HostsUnavailable(f"cannot make a bridge or a veth pair: {error}") from None
        await self.switch_command("link", "set", "local", "master", "switch", "up")
        address = str(self.subnet.network_address + 1)
        await _command("ip", "addr", "add", f"{address}/{self.subnet.prefixlen}", "dev", self.uplink)
        await _command("ip", "link", "set", self.uplink, "up")
        self._local = Host(self, "local", address, None, "local")

    async def _add_namespace(self, namespace: str) -> None:
        await _command("ip", "netns", "add", namespace)
        self._created.append(namespace)
        await _command("ip", "-n", namespace, "link", "set", "lo", "up")

    async def host(self, name: str) -> Host:
        """A new host ``name`` (a lowercase word), plugged in and up."""
        assert self.subnet is not None, "use the Network inside `async with`"
        if not HOST_NAME.match(name) or name in ("local", "switch") or name in self.hosts:
            raise ValueError(f"bad or duplicate host name {name!r}")
        index = len(self.hosts) + 2
        if index > 254:
            raise ValueError("at most 253 hosts")
        namespace = f"{self.run}-{name}"
        port = f"h{index}"
        await self._add_namespace(namespace)
        await _command(
            "ip",
            "-n",
            namespace,
            "link",
            "add",
            "eth0",
            "type",
            "veth",
            "peer",
            "name",
            port,
            "netns",
            self.switch,
        )
        await self.switch_command("link", "set", port, "master", "switch", "up")
        address = str(self.subnet.network_address + index)
        await _command(
            "ip", "-n", namespace, "addr", "add", f"{address}/{self.subnet.prefixlen}", "dev", "eth0"
        )
        await _command("ip", "-n", namespace, "link", "set", "eth0", "up")
        host = self.hosts[name] = Host(self, name, address, namespace, port)
        return host

    async def close(self) -> None:
        """Kill every process on every host, then remove the namespaces and the root link;
        raises if any of them is still there afterwards."""
        errors: list[str] = []
        for host in [*self.hosts.values(), *([self._local] if self._local else [])]:
            try:
                if host.namespace is not None:
                    await _kill_namespace(host.namespace)
                await host._reap()
            except Exception as exc:  # keep cleaning up
                errors.append(f"{host}: {exc}")
        with contextlib.suppress(CommandError):
            await _command("ip", "link", "del", self.uplink)
        for namespace in reversed(self._created):
            try:
                await _command("ip", "netns", "del", namespace)
            except CommandError as exc:
                errors.append(str(exc))
        left = [name for name in await _namespaces() if name.startswith(f"{self.run}-")]
        left += [name for name in await _root_links() if name == self.uplink]
        if left:
            errors.append(f"left behind: {left}")
        self._created.clear()
        if errors:
            raise RuntimeError("simulated hosts not cleaned up: " + "; ".join(errors))


def _gone(pid: int) -> bool:
    return not os.path.exists(f"/proc/{pid}")


def _log_file(path: Path) -> BinaryIO:
    return open(path, "wb")


def _property(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _listen(port: int) -> None:
    with socket.create_server(("0.0.0.0", port), reuse_port=False) as server:
        print(f"listening on 0.0.0.0:{port}", flush=True)
        while True:
            conn, _ = server.accept()
            conn.close()


if __name__ == "__main__":
    # `python -m tests.hosts listen PORT`: Host.listen's server.
    _listen(int(sys.argv[2]))
