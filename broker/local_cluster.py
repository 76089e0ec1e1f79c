"""A local cluster in the foreground (what ``make run`` starts): one name server and one broker
as child processes, on embedded defaults, storing under one data directory.

Ctrl-C (or SIGTERM) stops the broker first, so it can unregister and flush, then the name
server. If either process dies, the other is stopped too and the exit code says so.
"""

from __future__ import annotations

import argparse
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m aiorocketmq.broker.local_cluster", description=__doc__)
    parser.add_argument("--data", default="./.data", help="data directory (default ./.data)")
    parser.add_argument("--namesrv-port", type=int, default=9876)
    parser.add_argument("--broker-port", type=int, default=10911)
    parser.add_argument("--broker-name", default="broker-a")
    parser.add_argument("--host", default="127.0.0.1", help="address the broker advertises (brokerIP1)")
    parser.add_argument("-c", "--broker-config", help="extra broker.conf (RocketMQ keys)")
    return parser.parse_args(argv)


def _wait_for_port(port: int, proc: subprocess.Popen[bytes], timeout: float = 30.0) -> bool:
    """Until the name server accepts connections (so the broker registers at once)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return True
        except OSError:
            time.sleep(0.1)
    return False


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    data = Path(args.data).resolve()
    data.mkdir(parents=True, exist_ok=True)
    namesrv_addr = f"127.0.0.1:{args.namesrv_port}"
    namesrv = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "aiorocketmq.namesrv",
            "--listen-port",
            str(args.namesrv_port),
            "--store-dir",
            str(data / "namesrv"),
        ]
    )
    if not _wait_for_port(args.namesrv_port, namesrv):
        print("local cluster: the name server did not start", file=sys.stderr)
        namesrv.terminate()
        namesrv.wait(30)
        return 1
    broker_cmd = [
        sys.executable, "-m", "aiorocketmq.broker",
        "-n", namesrv_addr,
        "--listen-port", str(args.broker_port),
        "--store-dir", str(data / args.broker_name),
        "--broker-ip", args.host,
        "--broker-name", args.broker_name,
    ]  # fmt: skip
    if args.broker_config:
        broker_cmd += ["-c", args.broker_config]
    broker = subprocess.Popen(broker_cmd)
    stopping = False

    def stop(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    print(
        f"local cluster: name server {namesrv_addr}, broker {args.broker_name} at {args.host}:{args.broker_port}, "
        f"data in {data}; Ctrl-C stops it",
        file=sys.stderr,
        flush=True,
    )
    while not stopping and namesrv.poll() is None and broker.poll() is None:
        time.sleep(0.2)
    failed = not stopping
    for proc in (broker, namesrv):
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    codes = {"broker": broker.returncode, "namesrv": namesrv.returncode}
    if failed:
        print(f"local cluster: a process exited unexpectedly: {codes}", file=sys.stderr)
        return 1
    return 0 if all(code == 0 for code in codes.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
