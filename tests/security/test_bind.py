"""Where the servers listen. ``bindAddress`` puts every port of a broker process (remoting, VIP,
metrics) on one address; ``make run`` puts every port of every process it starts (name server,
broker, VIP, HA, gRPC, metrics, dashboard) on loopback unless ``HOST=0.0.0.0`` opens it, read
from the kernel's socket tables; the dashboard serves beyond loopback only with a login."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import shlex
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from aiorocketmq.dashboard.users import load_users
from aiorocketmq.protocol.message import local_ipv4
from tests.cluster import Cluster
from tests.support import ROOT, ServerProcess, die_with_parent, held_port, wait_until


async def _reachable(host: str, port: int) -> bool:
    try:
        _reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), 5)
    except OSError:
        return False
    writer.close()
    await writer.wait_closed()
    return True


async def test_every_broker_port_listens_on_bind_address(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path)
    await cluster.start_namesrv()
    with held_port() as metrics_port:
        await _check_ports(cluster, metrics_port)


async def _check_ports(cluster: Cluster, metrics_port: int) -> None:
    try:
        broker = await cluster.start_broker(
            "broker-a",
            bindAddress="127.0.0.2",
            brokerIP1="127.0.0.2",
            metricsPromExporterEnable="true",
            metricsPromExporterPort=metrics_port,
        )
        assert broker.process is not None
        await broker.process.wait_for_line(r"metrics on http://127\.0\.0\.2:")
        for port in (broker.port, broker.port - 2, metrics_port):
            assert await _reachable("127.0.0.2", port), port
            assert not await _reachable("127.0.0.1", port), port
    finally:
        await cluster.stop()


# -- `make run`: loopback by default, HOST=0.0.0.0 opens it -----------------------------------


def outside_make() -> dict[str, str]:
    """The environment without what a parent make (``make test``) passes down, which would turn
    ``make -n``'s output into a sub-make's (directory lines, inherited flags)."""
    return {
        k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES")
    }


def make_run_commands(**variables: str) -> tuple[list[str], list[str]]:
    """The dashboard's and the local cluster's command lines as ``make run VAR=...`` runs them
    (``make -n`` prints the recipe without running it)."""
    printed = subprocess.run(
        ["make", "-n", "--no-print-directory", "run", *(f"{k}={v}" for k, v in variables.items())],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        env=outside_make(),
    ).stdout.replace("\\\n", " ")
    recipe = printed[printed.index(".venv/bin/mqdashboard") :]
    lexer = shlex.shlex(recipe, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    commands: list[list[str]] = [[]]
    for token in lexer:
        if token in ("&", ";", "&&", "|", "||"):
            commands.append([])
        else:
            commands[-1].append(token)
    dashboard = next(c for c in commands if c and c[0].endswith("mqdashboard"))
    cluster = next(c for c in commands if "aiorocketmq.broker.local_cluster" in c)
    # The recipe's .venv is the one running these tests.
    dashboard[0] = str(Path(sys.executable).parent / "mqdashboard")
    cluster[0] = sys.executable
    return dashboard, cluster


def _process_tree(root: int) -> set[int]:
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(stat.parent.name)] = int(fields[1])
    tree = {root}
    grew = True
    while grew:
        children = {pid for pid, ppid in parents.items() if ppid in tree} - tree
        tree |= children
        grew = bool(children)
    return tree


def _socket_inodes(pids: set[int]) -> set[int]:
    inodes: set[int] = set()
    for pid in pids:
        with contextlib.suppress(OSError):
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                with contextlib.suppress(OSError):
                    target = os.readlink(fd)
                    if target.startswith("socket:["):
                        inodes.add(int(target[8:-1]))
    return inodes


def listening(root_pids: list[int]) -> set[tuple[str, int]]:
    """(address, port) of every TCP socket listening in these processes or their children,
    from the kernel's own tables (/proc/net/tcp, tcp6)."""
    pids: set[int] = set()
    for root in root_pids:
        pids |= _process_tree(root)
    inodes = _socket_inodes(pids)
    found: set[tuple[str, int]] = set()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] != "0A" or int(fields[9]) not in inodes:  # 0A: LISTEN
                continue
            hex_addr, hex_port = fields[1].split(":")
            raw = bytes.fromhex(hex_addr)
            # The kernel prints each 32-bit word in host (little-endian) order.
            raw = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
            address = ipaddress.ip_address(raw)
            # grpcio listens on an IPv6 socket bound to the IPv4 address (::ffff:127.0.0.1).
            if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
                address = address.ipv4_mapped
            found.add((str(address), int(hex_port, 16)))
    return found


@contextlib.contextmanager
def held_broker_port() -> Iterator[int]:
    """A broker port whose VIP (-2) and HA (+1) neighbours are held too."""
    with contextlib.ExitStack() as stack:
        while True:
            port = stack.enter_context(held_port())
            try:
                for neighbour in (port - 2, port + 1):
                    holder = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
                    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                    holder.bind(("0.0.0.0", neighbour))
            except OSError:
                stack.close()
                continue
            yield port
            return


def reach(address: str) -> str:
    """Who can connect to a socket listening on ``address``: this machine only, or anyone."""
    ip = ipaddress.ip_address(address)
    return "loopback" if ip.is_loopback else "every interface" if ip.is_unspecified else address


async def _run_make_run(tmp_path: Path, expected: str, **variables: str) -> None:
    with contextlib.ExitStack() as ports:
        namesrv, metrics, grpc, dashboard_port = (ports.enter_context(held_port()) for _ in range(4))
        broker = ports.enter_context(held_broker_port())
        dashboard_cmd, cluster_cmd = make_run_commands(**variables)
        namesrv_host = dashboard_cmd[dashboard_cmd.index("--namesrv") + 1].rsplit(":", 1)[0]
        conf = tmp_path / "ports.conf"
        conf.write_text(f"metricsPromExporterPort={metrics}\ngrpcServerPort={grpc}\n")
        cluster_cmd += ["--data", str(tmp_path / "data"), "--namesrv-port", str(namesrv)]
        cluster_cmd += ["--broker-port", str(broker), "-c", str(conf)]
        dashboard_cmd += ["--port", str(dashboard_port), "--namesrv", f"{namesrv_host}:{namesrv}"]
        dashboard_cmd += ["--data-dir", str(tmp_path / "dashboard")]
        processes = [
            await asyncio.create_subprocess_exec(
                *cmd,
                cwd=ROOT,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=log.open("wb"),
                preexec_fn=die_with_parent,
            )
            for cmd, log in (
                (cluster_cmd, tmp_path / "cluster.log"),
                (dashboard_cmd, tmp_path / "dashboard.log"),
            )
        ]
        expected_ports = {namesrv, broker, broker - 2, broker + 1, metrics, grpc, dashboard_port}
        pids = [p.pid for p in processes]
        try:

            def all_listening() -> bool:
                assert all(p.returncode is None for p in processes), _logs(tmp_path)
                return expected_ports <= {port for _, port in listening(pids)}

            await wait_until(all_listening, timeout=90, interval=0.2)
            sockets = listening(pids)
            # Every public port is on the one address; any other socket a process listens on is
            # internal and on loopback only (the gRPC port's TLS/plain-text relay hands each
            # connection to one of two loopback listeners).
            public = {(address, port) for address, port in sockets if port in expected_ports}
            internal = sockets - public
            assert {reach(address) for address, _ in public} == {expected}, (sockets, _logs(tmp_path))
            assert {reach(address) for address, _ in internal} <= {"loopback"}, (sockets, _logs(tmp_path))
            # And it answers there: from another local address when open, only loopback when not.
            outside = local_ipv4()
            for port in expected_ports:
                assert await _reachable("127.0.0.1", port), port
                if outside != "127.0.0.1":
                    assert await _reachable(outside, port) == (expected == "every interface"), port
        finally:
            for proc in reversed(processes):
                if proc.returncode is None:
                    proc.send_signal(signal.SIGTERM)
            codes = [await asyncio.wait_for(p.wait(), 60) for p in processes]
        assert codes == [0, 0], _logs(tmp_path)


def _logs(tmp_path: Path) -> str:
    return "\n".join(f"{log.name}:\n{log.read_text()[-3000:]}" for log in sorted(tmp_path.glob("*.log")))


async def test_make_run_listens_on_loopback_only(tmp_path: Path) -> None:
    await _run_make_run(tmp_path, "loopback")


async def test_make_run_host_option_opens_every_port(tmp_path: Path) -> None:
    users = tmp_path / "users.properties"
    users.write_text("admin=s3cret-enough,1\n")
    await _run_make_run(
        tmp_path, "every interface", HOST="0.0.0.0", DASHBOARD_HOST="0.0.0.0", DASHBOARD_USERS=str(users)
    )


def test_make_run_ignores_a_host_from_the_environment() -> None:
    """zsh and some CI images export HOST (the machine's name); only ``make run HOST=...`` opens."""
    printed = subprocess.run(
        ["make", "-n", "--no-print-directory", "run"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        env={**outside_make(), "HOST": "0.0.0.0"},
    ).stdout
    assert "--bind-address 127.0.0.1" in printed and "--host 127.0.0.1" in printed, printed


# -- the dashboard: beyond loopback only with a login -----------------------------------------


def _dashboard(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(Path(sys.executable).parent / "mqdashboard"), "--namesrv", "127.0.0.1:1", "--port", "0", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.0.2.1"])
def test_dashboard_refuses_beyond_loopback_without_users(host: str) -> None:
    result = _dashboard("--host", host)
    assert result.returncode == 2, result.stderr
    assert f"refusing to serve {host} without a login" in result.stderr
    assert "--users FILE" in result.stderr and "listening on" not in result.stderr


async def test_dashboard_opens_beyond_loopback_with_a_users_file_or_the_loud_flag(tmp_path: Path) -> None:
    users = tmp_path / "users.properties"
    for args, login in (
        (["--users", str(users), "--init-users"], True),
        (["--insecure-no-login"], False),
    ):
        proc = ServerProcess(
            "aiorocketmq.dashboard",
            [
                "--namesrv",
                "127.0.0.1:1",
                "--host",
                "0.0.0.0",
                "--port",
                "0",
                "--data-dir",
                str(tmp_path / "d"),
                *args,
            ],
        )
        await proc.start()
        try:
            assert proc.port is not None
            reader, writer = await asyncio.open_connection(local_ipv4(), proc.port)
            writer.write(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            head = (await asyncio.wait_for(reader.read(), 20)).split(b"\r\n", 1)[0]
            writer.close()
            # With a users file a stranger is sent to the login page; with the flag the page opens.
            assert head == (b"HTTP/1.1 303 See Other" if login else b"HTTP/1.1 200 OK"), head
            if not login:
                assert "WITHOUT A LOGIN" in proc.output
        finally:
            await proc.stop()
    # --init-users made a file only its owner reads, with one admin and a long random password.
    assert users.stat().st_mode & 0o777 == 0o600
    made = load_users(users)
    assert list(made) == ["admin"] and made["admin"].admin and len(made["admin"].password) >= 20
