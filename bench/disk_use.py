"""How much disk a broker on its default settings takes, against the data it holds (issue 37).

Starts the local cluster (``python -m aiorocketmq.broker.local_cluster``: a name server and one
broker, every store setting at its default) in a fresh data directory per scenario, and reports
``du`` of the broker's store:

* **idle**: the cluster up and registered, nothing sent.
* **mqbench**: the README's line, ``mqbench producer -t BenchmarkTest -w 16 -q 100000``
  (128-byte bodies; ``BenchmarkTest`` has 1,024 queues). Prints mqbench's per-second lines for
  the first 10 s (how fast the first seconds on new queues go), then the store against its
  data: commit-log bytes + 20 bytes per consume-queue entry + the index bytes in use (header,
  slots, entries), and the bound the store keeps: 1.5x that, plus one reservation step per
  open file (8 MiB for the commit log, a page per consume-queue file, 4 MiB for the index).
* **wide**: 1,000 topics of 8 queues, one message in each queue.

``--python`` runs the cluster and mqbench of another install (an older checkout's venv), so a
change can be measured before and after with the same script.

Run: ``.venv/bin/python -m bench.disk_use [--python PY] [--scenarios idle,mqbench,wide]``.
"""

from __future__ import annotations

import argparse
import asyncio
import mmap
import os
import re
import signal
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from aiorocketmq import Message, Producer
from aiorocketmq.client import Admin
from aiorocketmq.protocol.body import MessageQueue
from bench.machine import summary as machine_summary
from bench.procs import free_port, wait_port

MIB = 1 << 20
PAGE = 4096
COMMIT_LOG_STEP = 8 * MIB
INDEX_STEP = 4 * MIB
_ENTRY_SIZE = struct.Struct(">qiq")


def du(path: Path) -> int:
    """Bytes the filesystem allocated to the files under ``path``."""
    return sum(p.stat().st_blocks * 512 for p in path.rglob("*") if p.is_file())


def consume_queue_entries(store: Path) -> tuple[int, int]:
    """(entries, files) of every consume queue under ``store``: a file's entries are the prefix
    of non-empty 20-byte slots (the store writes them in order)."""
    entries = files = 0
    for path in (store / "consumequeue").rglob("*"):
        if not (path.is_file() and path.name.isdigit()):
            continue
        files += 1
        size = path.stat().st_size
        with open(path, "rb") as f, mmap.mmap(f.fileno(), size, prot=mmap.PROT_READ) as m:
            low, high = 0, size // 20
            while low < high:
                mid = (low + high) // 2
                if _ENTRY_SIZE.unpack_from(m, mid * 20)[1] != 0:
                    low = mid + 1
                else:
                    high = mid
            entries += low
    return entries, files


def index_bytes_used(store: Path, slots: int = 5_000_000) -> int:
    """Header, slots and written entries of every index file (its header's entry count)."""
    used = 0
    for path in (store / "index").glob("*"):
        with open(path, "rb") as f:
            header = f.read(40)
        count = struct.unpack(">qqqqii", header)[5] if len(header) == 40 else 0
        used += 40 + slots * 4 + max(count, 1) * 20
    return used


class LocalCluster:
    """The local cluster of one install, in its own data directory and ports."""

    def __init__(self, python: str, data: Path) -> None:
        self.python = python
        self.data = data
        self.namesrv_port = free_port()
        self.broker_port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def namesrv(self) -> str:
        return f"127.0.0.1:{self.namesrv_port}"

    @property
    def store(self) -> Path:
        return self.data / "broker-a"

    def __enter__(self) -> LocalCluster:
        command = [
            self.python, "-m", "aiorocketmq.broker.local_cluster", "--data", str(self.data),
            "--namesrv-port", str(self.namesrv_port), "--broker-port", str(self.broker_port),
        ]  # fmt: skip
        # Run from the data directory: from a checkout, ``-m`` would import that checkout's
        # package instead of the install's.
        self.proc = subprocess.Popen(
            command,
            cwd=self.data.parent,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_port(self.broker_port, 60, self.proc)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


async def registered(namesrv: str) -> None:
    """Until the broker is in the name server's cluster table."""
    async with Admin(namesrv) as admin:
        deadline = time.monotonic() + 60
        while not (await admin.cluster_info()).broker_addr_table:
            if time.monotonic() > deadline:
                raise RuntimeError("the broker never registered")
            await asyncio.sleep(0.1)


def idle(python: str, work: Path) -> None:
    with LocalCluster(python, work / "idle") as cluster:
        asyncio.run(registered(cluster.namesrv))
        time.sleep(3)  # its start-up writes (configs, timers, preparing files) are done
        print(f"idle: store {du(cluster.store) / MIB:.1f} MiB on disk")


def run_mqbench(python: str, namesrv: str, messages: int, what: str) -> None:
    """The README's mqbench line; prints its per-second lines for the first 10 s."""
    started = time.monotonic()
    command = [
        python, "-m", "aiorocketmq.tools.mqbench", "producer", "-n", namesrv,
        "-t", "BenchmarkTest", "-w", "16", "-q", str(messages),
    ]  # fmt: skip
    run = subprocess.run(command, capture_output=True, text=True, check=True, cwd=tempfile.gettempdir())
    elapsed = time.monotonic() - started
    # The per-second progress lines go to stderr, the report lines to stdout.
    seconds = [line for line in run.stderr.splitlines() if re.match(r"\[\s*\d+\.\ds\]", line)]
    print(f"mqbench ({what}): {messages} messages in {elapsed:.1f} s; its first 10 s:")
    for line in seconds[:10]:
        print(f"  {line}")
    print(f"  {run.stdout.splitlines()[-1]}")


def mqbench(python: str, work: Path, messages: int) -> None:
    with LocalCluster(python, work / "mqbench") as cluster:
        asyncio.run(registered(cluster.namesrv))
        run_mqbench(python, cluster.namesrv, messages, "new queues")
        report(cluster)
        # The same again on queues that exist: what the first seconds cost without making files.
        run_mqbench(python, cluster.namesrv, messages, "existing queues")


def report(cluster: LocalCluster) -> None:
    async def log_bytes() -> int:
        async with Admin(cluster.namesrv) as admin:
            info = await admin.broker_runtime_info(f"127.0.0.1:{cluster.broker_port}")
        return int(info["commitLogMaxOffset"]) - int(info["commitLogMinOffset"])

    store = cluster.store
    commit_log = asyncio.run(log_bytes())
    entries, cq_files = consume_queue_entries(store)
    index = index_bytes_used(store)
    data = commit_log + 20 * entries + index
    bound = 1.5 * data + COMMIT_LOG_STEP + PAGE * cq_files + INDEX_STEP
    used = du(store)
    parts = {
        name: du(store / name) / MIB
        for name in ("commitlog", "consumequeue", "index")
        if (store / name).exists()
    }
    print(
        f"  store {used / MIB:.1f} MiB on disk ({', '.join(f'{k} {v:.1f}' for k, v in parts.items())}); data "
        f"{data / MIB:.1f} MiB (commit log {commit_log / MIB:.1f}, {entries} consume-queue entries in "
        f"{cq_files} files, index {index / MIB:.1f}); {used / data:.2f}x the data; bound "
        f"{bound / MIB:.1f} MiB: {'within' if used <= bound else 'OVER'}"
    )


def wide(python: str, work: Path, topics: int, queues: int) -> None:
    async def fill(cluster: LocalCluster) -> None:
        broker = f"127.0.0.1:{cluster.broker_port}"
        async with Admin(cluster.namesrv) as admin:
            for t in range(topics):
                await admin.create_topic(f"Wide{t:04d}", queues, broker_addr=broker, wait=0)
            await admin.wait_for_route(f"Wide{topics - 1:04d}")
        async with Producer("disk-use-wide", namesrv=cluster.namesrv) as producer:
            for t in range(topics):
                topic = f"Wide{t:04d}"
                sends = [
                    producer.send(
                        Message(topic, b"x" * 128),
                        queue=MessageQueue(topic=topic, broker_name="broker-a", queue_id=q),
                    )
                    for q in range(queues)
                ]
                await asyncio.gather(*sends)

    with LocalCluster(python, work / "wide") as cluster:
        asyncio.run(registered(cluster.namesrv))
        started = time.monotonic()
        asyncio.run(fill(cluster))
        print(
            f"wide: {topics} topics x {queues} queues, a message each, in {time.monotonic() - started:.1f} s"
        )
        report(cluster)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.disk_use", description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", default=sys.executable, help="interpreter of the install to measure")
    parser.add_argument("--scenarios", default="idle,mqbench,wide")
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--topics", type=int, default=1000)
    parser.add_argument("--work", help="where the data directories go (default: a temporary one)")
    args = parser.parse_args(argv)
    print(machine_summary())
    version = subprocess.run(
        [args.python, "-c", "import aiorocketmq, os; print(os.path.dirname(aiorocketmq.__file__))"],
        capture_output=True,
        text=True,
        check=True,
        cwd=tempfile.gettempdir(),
    ).stdout.strip()
    print(f"install: {args.python} ({version})")
    with tempfile.TemporaryDirectory(dir=args.work) as tmp:
        work = Path(tmp)
        for scenario in args.scenarios.split(","):
            if scenario == "idle":
                idle(args.python, work)
            elif scenario == "mqbench":
                mqbench(args.python, work, args.messages)
            elif scenario == "wide":
                wide(args.python, work, args.topics, 8)
            else:
                raise SystemExit(f"unknown scenario {scenario!r}")
        os.sync()


if __name__ == "__main__":
    main()
