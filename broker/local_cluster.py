"""A local cluster in the foreground (what ``make run`` starts): one name server and one or more
brokers as child processes, on embedded defaults, storing under one data directory.

A broker process uses one core, so a host scales across its cores RocketMQ's way: several
brokers in one cluster, each with its own store (``--brokers N``: ``broker-a``, ``broker-b``,
... on ``--broker-port``, then every ``--port-step`` ports above it); topics created on the
cluster spread their queues over all of them.

``--proxy-port P`` adds ``mqproxy`` (the 5.x proxy in cluster mode) in front of them.

Every port (name server, broker remoting and VIP, HA, gRPC, metrics, proxy) listens on
``--bind-address``: loopback by default, so a developer's cluster is not open to the network
(``--bind-address 0.0.0.0`` opens it; the processes' own default, as Apache's, is 0.0.0.0).

Ctrl-C (or SIGTERM) stops the brokers first, so they can unregister and flush, then the name
server. If any process dies, the others are stopped too and the exit code says so.
"""

from __future__ import annotations

import argparse
import ipaddress
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType

from aiorocketmq import compiled
from aiorocketmq.protocol import speedups
from aiorocketmq.protocol.message import local_ipv4

#: Where ``make run`` listens unless told otherwise.
DEFAULT_BIND_ADDRESS = "127.0.0.1"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m aiorocketmq.broker.local_cluster", description=__doc__)
    parser.add_argument("--data", default="./.data", help="data directory (default ./.data)")
    parser.add_argument("--namesrv-port", type=int, default=9876)
    parser.add_argument("--broker-port", type=int, default=10911)
    parser.add_argument(
        "--broker-name", default="broker-a", help="the first broker's name (default broker-a)"
    )
    parser.add_argument(
        "--brokers", type=int, default=1, help="broker processes, one per core to use (default 1)"
    )
    parser.add_argument(
        "--port-step", type=int, default=100, help="port distance between brokers (each uses port-2..port+1)"
    )
    parser.add_argument(
        "--bind-address",
        default=DEFAULT_BIND_ADDRESS,
        metavar="HOST",
        help="address every port of every process listens on (bindAddress; default 127.0.0.1: "
        "loopback only; 0.0.0.0 opens the cluster to the network)",
    )
    parser.add_argument(
        "--host",
        help="address the brokers advertise (brokerIP1; default: the bind address, or this host's "
        "address when that is 0.0.0.0)",
    )
    parser.add_argument("-c", "--broker-config", help="extra broker.conf (RocketMQ keys)")
    parser.add_argument(
        "--proxy-port",
        type=int,
        default=0,
        metavar="PORT",
        help="also run mqproxy (cluster mode) for 5.x clients on this gRPC port, and for 5.x remoting "
        "clients on the next port (default: none; each broker serves 5.x clients itself on its "
        "grpcServerPort, 8081)",
    )
    return parser.parse_args(argv)


def broker_names(first: str, count: int) -> list[str]:
    """``broker-a``, ``broker-b``, ... from the first name's last letter (or ``first-2``, ...)."""
    if count < 1:
        raise SystemExit("--brokers must be at least 1")
    stem, last = first[:-1], first[-1:]
    if last.isalpha() and last.islower() and ord(last) + count - 1 <= ord("z"):
        return [stem + chr(ord(last) + i) for i in range(count)]
    return [first] + [f"{first}-{i + 1}" for i in range(1, count)]


def _is_wildcard(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_unspecified
    except ValueError:
        return False


def connect_host(bind_address: str) -> str:
    """The address the processes reach each other at: the bind address, or loopback when that
    is every interface."""
    return "127.0.0.1" if _is_wildcard(bind_address) else bind_address


def advertised_host(bind_address: str, host: str | None) -> str:
    """``brokerIP1``: as given, else the bind address, else (bound to every interface) the
    address other hosts see this one by, so clients elsewhere can follow the routes."""
    if host:
        return host
    return local_ipv4() if _is_wildcard(bind_address) else bind_address


def _wait_for_port(host: str, port: int, proc: subprocess.Popen[bytes], timeout: float = 30.0) -> bool:
    """Until the name server accepts connections (so the broker registers at once)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with socket.create_connection((host, port), timeout=1):
                return True
        except OSError:
            time.sleep(0.1)
    return False


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    data = Path(args.data).resolve()
    data.mkdir(parents=True, exist_ok=True)
    local_host = connect_host(args.bind_address)
    host = advertised_host(args.bind_address, args.host)
    namesrv_addr = f"{local_host}:{args.namesrv_port}"
    namesrv = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "aiorocketmq.namesrv",
            "--listen-port",
            str(args.namesrv_port),
            "--store-dir",
            str(data / "namesrv"),
            "--bind-address",
            args.bind_address,
        ]
    )
    if not _wait_for_port(local_host, args.namesrv_port, namesrv):
        print("local cluster: the name server did not start", file=sys.stderr)
        namesrv.terminate()
        namesrv.wait(30)
        return 1
    brokers: dict[str, subprocess.Popen[bytes]] = {}
    for i, name in enumerate(broker_names(args.broker_name, args.brokers)):
        port = args.broker_port + i * args.port_step
        broker_cmd = [
            sys.executable, "-m", "aiorocketmq.broker",
            "-n", namesrv_addr,
            "--listen-port", str(port),
            "--store-dir", str(data / name),
            "--broker-ip", host,
            "--bind-address", args.bind_address,
            "--broker-name", name,
        ]  # fmt: skip
        if args.broker_config:
            broker_cmd += ["-c", args.broker_config]
        brokers[f"{name} at {host}:{port}"] = subprocess.Popen(broker_cmd)
    if args.proxy_port:
        proxy_cmd = [
            sys.executable, "-m", "aiorocketmq.proxy",
            "-n", namesrv_addr,
            "--grpc-port", str(args.proxy_port),
            "--remoting-port", str(args.proxy_port + 1),
            "--bind-address", args.bind_address,
        ]  # fmt: skip
        brokers[f"mqproxy at {host}:{args.proxy_port}"] = subprocess.Popen(proxy_cmd)
    stopping = False

    def stop(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    print(
        f"local cluster: name server {namesrv_addr}, brokers {', '.join(brokers)}, every port listening"
        f" on {args.bind_address}, data in {data}; Ctrl-C stops it",
        file=sys.stderr,
        flush=True,
    )
    print(f"local cluster: {speedups.describe()}; {compiled.describe()}", file=sys.stderr, flush=True)
    while not stopping and namesrv.poll() is None and all(b.poll() is None for b in brokers.values()):
        time.sleep(0.2)
    failed = not stopping
    for proc in (*brokers.values(), namesrv):
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    codes = {name.split()[0]: proc.returncode for name, proc in brokers.items()} | {
        "namesrv": namesrv.returncode
    }
    if failed:
        print(f"local cluster: a process exited unexpectedly: {codes}", file=sys.stderr)
        return 1
    return 0 if all(code == 0 for code in codes.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
