"""5.x client throughput against our broker's gRPC endpoint (issue 19).

Starts a real broker (its gRPC port on a free port), then with the official RocketMQ 5.x
Python client (``rocketmq-python-client`` 5.1.2, installed into the interop cache on first
use, run as its own process by ``bench/grpc_load.py``):

* **send**: one Producer, T threads sending SIZE-byte messages synchronously for D seconds:
  send TPS, p50 / p99 latency, broker CPU per message;
* **receive**: one SimpleConsumer receiving batches of 32 and acking each message
  on 8 threads until it has everything sent: receive+ack TPS, broker CPU per message.

Run: ``.venv/bin/python -m bench.grpc_bench [--threads 8 --seconds 10 --size 128]``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.machine import summary as machine_summary
from bench.procs import cpu_seconds
from tests.grpc.conftest import GRPC_PORT, install_py5_client

ROOT = Path(__file__).resolve().parent.parent
LOAD = Path(__file__).with_name("grpc_load.py")
TOPIC = "BenchmarkGrpc"


def start_broker(work: Path) -> tuple[subprocess.Popen[str], int]:
    conf = work / "broker.conf"
    conf.write_text(
        "brokerName=bench-grpc\nlistenPort=0\ngrpcServerPort=0\nbrokerIP1=127.0.0.1\n"
        f"storePathRootDir={work / 'store'}\nmetricsPromExporterEnable=false\n"
    )
    broker = subprocess.Popen(
        [sys.executable, "-m", "aiorocketmq.broker", "-c", str(conf)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert broker.stdout is not None
    deadline = time.monotonic() + 30
    for line in broker.stdout:
        match = re.search(GRPC_PORT, line)
        if match:
            return broker, int(match.group(1))
        if time.monotonic() > deadline:
            break
    broker.kill()
    raise RuntimeError("the broker did not open its gRPC port")


def load(client: Path, *args: object) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, str(LOAD), *map(str, args)],
        env={**os.environ, "PYTHONPATH": str(client)},
        capture_output=True,
        text=True,
        check=False,
    )
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            result: dict[str, float] = json.loads(line[len("RESULT ") :])
            return result
    raise RuntimeError(f"load failed:\n{done.stdout}\n{done.stderr}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--size", type=int, default=128)
    args = parser.parse_args()
    print(machine_summary(), flush=True)
    client = install_py5_client()
    with tempfile.TemporaryDirectory(prefix="grpc-bench-") as tmp:
        broker, port = start_broker(Path(tmp))
        try:
            endpoint = f"127.0.0.1:{port}"
            cpu = cpu_seconds(broker.pid)
            sent = load(client, "send", endpoint, TOPIC, args.seconds, args.threads, args.size)
            send_cpu = cpu_seconds(broker.pid) - cpu
            print(
                f"send    {sent['tps']:>9,.0f} msg/s  ({sent['sent']:,.0f} in {sent['seconds']:.1f}s, "
                f"{args.threads} threads, {args.size} B; p50 {sent['p50_ms']:.2f} ms, p99 {sent['p99_ms']:.2f} ms; "
                f"broker CPU {send_cpu / max(1, sent['sent']) * 1e6:.0f} µs/msg)"
            )
            cpu = cpu_seconds(broker.pid)
            got = load(client, "receive", endpoint, TOPIC, "BenchmarkGrpcGroup", int(sent["sent"]), 32)
            print(
                f"receive {got['tps']:>9,.0f} msg/s  ({got['received']:,.0f} of {sent['sent']:,.0f} received "
                f"and acked in {got['seconds']:.1f}s, batches of 32; "
                f"broker CPU {(cpu_seconds(broker.pid) - cpu) / max(1, got['received']) * 1e6:.0f} µs/msg)"
            )
        finally:
            broker.terminate()
            broker.wait(20)


if __name__ == "__main__":
    main()
