"""Soak: produce and consume at half the measured maximum for a long time, and watch whether
the broker's and the name server's memory, files and connections stay flat.

    python -m bench.soak                      # 30 minutes (the issue's figure)
    python -m bench.soak --minutes 5 --sample-seconds 15

Starts a real name server and broker (on a temporary store), measures the maximum send rate
of an SDK producer for ``--calibrate-seconds`` (``--concurrency`` sends in flight), then runs
one SDK producer paced at half of it (``--fraction``) and one push consumer for the duration.
Every ``--sample-seconds`` it reads ``/proc/PID/status`` (RssAnon: the heap, what leaks;
RssFile: the mapped store, which grows with the commit log and the page cache and is not a
leak) and counts open files and sockets of both servers. It prints a table and a verdict:
anonymous RSS is *flat* when the last third of the samples averages within 10 % (and 8 MiB)
of the middle third (the first third is warm-up). Not part of the test suite.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from aiorocketmq import ConsumeFrom, ConsumeResult, Message, MessageExt, Producer, PushConsumer
from aiorocketmq.protocol.errors import MQError
from aiorocketmq.protocol.loop import run
from bench.machine import summary as machine_summary
from bench.procs import free_port, wait_port

ROOT = Path(__file__).resolve().parent.parent
TOPIC = "SoakTopic"
CALIBRATION_TOPIC = "SoakCalibration"
MiB = 1 << 20


@dataclass
class Sample:
    at: float
    sent: int
    consumed: int
    figures: dict[str, dict[str, int]]


def proc_figures(pid: int) -> dict[str, int]:
    """RssAnon, RssFile (bytes), open files and sockets of a process."""
    out = {"RssAnon": 0, "RssFile": 0}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in out:
                out[key] = int(rest.split()[0]) * 1024
    fds = sockets = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):
            fds += 1
            if os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:"):
                sockets += 1
    out["files"] = fds
    out["sockets"] = sockets
    return out


async def calibrate(namesrv: str, seconds: float, concurrency: int) -> float:
    """Sends per second one producer reaches with ``concurrency`` sends in flight."""
    async with Producer("soak-calibration", namesrv=namesrv) as producer:
        await producer.send(Message(CALIBRATION_TOPIC, b"warm-up"))
        sent = 0
        deadline = time.monotonic() + seconds
        started = time.monotonic()

        async def worker() -> None:
            nonlocal sent
            while time.monotonic() < deadline:
                await producer.send(Message(CALIBRATION_TOPIC, b"c" * 128))
                sent += 1

        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return sent / (time.monotonic() - started)


async def soak(args: argparse.Namespace, namesrv: str, pids: dict[str, int]) -> list[Sample]:
    maximum = await calibrate(namesrv, args.calibrate_seconds, args.concurrency)
    rate = maximum * args.fraction
    print(
        f"maximum {maximum:.0f} sends/s with {args.concurrency} in flight; soaking at {rate:.0f}/s",
        flush=True,
    )
    consumed = 0
    received = asyncio.Event()

    consumer = PushConsumer("soak-consumer", namesrv=namesrv, consume_from=ConsumeFrom.LAST_OFFSET)
    consumer.subscribe(TOPIC)

    @consumer.listener
    async def handle(messages: list[MessageExt]) -> ConsumeResult:
        nonlocal consumed
        consumed += len(messages)
        received.set()
        return ConsumeResult.SUCCESS

    samples: list[Sample] = []
    sent = errors = 0
    async with consumer, Producer("soak-producer", namesrv=namesrv) as producer:
        started = time.monotonic()
        end = started + args.minutes * 60
        next_sample = started

        async def paced(worker: int, workers: int) -> None:
            nonlocal sent, errors
            interval = workers / rate
            due = time.monotonic() + worker * interval / workers
            while due < end:
                delay = due - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                try:
                    await producer.send(Message(TOPIC, b"s" * 128))
                    sent += 1
                except MQError:
                    errors += 1
                due += interval

        workers = max(1, min(args.concurrency, int(rate // 50) + 1))
        load = asyncio.ensure_future(asyncio.gather(*(paced(i, workers) for i in range(workers))))
        header = f"{'min':>6} {'sent':>9} {'consumed':>9} " + " ".join(
            f"{name + ' ' + col:>16}" for name in pids for col in ("anon MiB", "file MiB", "files", "socks")
        )
        print(header, flush=True)
        while not load.done():
            now = time.monotonic()
            if now >= next_sample:
                figures = {name: proc_figures(pid) for name, pid in pids.items()}
                samples.append(Sample(now - started, sent, consumed, figures))
                row = f"{(now - started) / 60:6.1f} {sent:9d} {consumed:9d} " + " ".join(
                    f"{f['RssAnon'] / MiB:16.1f} {f['RssFile'] / MiB:16.1f} {f['files']:16d} {f['sockets']:16d}"
                    for f in figures.values()
                )
                print(row, flush=True)
                next_sample += args.sample_seconds
            await asyncio.wait([load], timeout=max(0.05, next_sample - time.monotonic()))
        await load
        # Let the consumer catch up before the last look.
        drain_until = time.monotonic() + 30
        while consumed < sent and time.monotonic() < drain_until:
            received.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(received.wait(), 1.0)
        figures = {name: proc_figures(pid) for name, pid in pids.items()}
        samples.append(Sample(time.monotonic() - started, sent, consumed, figures))
    print(
        f"sent {sent} ({errors} errors), consumed {consumed} (at least once: consumed >= sent once drained)"
    )
    return samples


def verdict(samples: list[Sample], name: str) -> str:
    anon = [s.figures[name]["RssAnon"] for s in samples]
    third = max(1, len(anon) // 3)
    middle = statistics.fmean(anon[third : 2 * third] or anon)
    last = statistics.fmean(anon[-third:])
    growth = last - middle
    flat = growth <= max(0.10 * middle, 8 * MiB)
    peak = max(s.figures[name]["RssFile"] for s in samples)
    return (
        f"{name}: anonymous RSS {middle / MiB:.1f} -> {last / MiB:.1f} MiB (middle third -> last third, "
        f"{growth / MiB:+.1f} MiB): {'FLAT' if flat else 'GROWING'}; file-backed RSS peak {peak / MiB:.1f} MiB; "
        f"files {samples[0].figures[name]['files']} -> {samples[-1].figures[name]['files']}, "
        f"sockets {samples[0].figures[name]['sockets']} -> {samples[-1].figures[name]['sockets']}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--sample-seconds", type=float, default=30.0)
    parser.add_argument("--calibrate-seconds", type=float, default=10.0)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--fraction", type=float, default=0.5, help="of the measured maximum (default 0.5)")
    args = parser.parse_args(argv)
    print(machine_summary(), flush=True)
    work = Path(tempfile.mkdtemp(prefix="soak-"))
    ns_port, broker_port = free_port(), free_port()
    conf = work / "broker.conf"
    conf.write_text(
        f"brokerName=soak\nlistenPort={broker_port}\nbrokerIP1=127.0.0.1\nnamesrvAddr=127.0.0.1:{ns_port}\n"
        f"storePathRootDir={work / 'store'}\nmappedFileSizeCommitLog={256 * MiB}\nmetricsPromExporterEnable=false\n"
    )
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    logs = {name: open(work / f"{name}.log", "w") for name in ("namesrv", "broker")}  # noqa: SIM115
    namesrv = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "aiorocketmq.namesrv",
            "--listen-port",
            str(ns_port),
            "--store-dir",
            str(work / "ns"),
        ],
        stdout=logs["namesrv"],
        stderr=subprocess.STDOUT,
        env=env,
        cwd=ROOT,
    )
    broker = subprocess.Popen(
        [sys.executable, "-m", "aiorocketmq.broker", "-c", str(conf)],
        stdout=logs["broker"],
        stderr=subprocess.STDOUT,
        env=env,
        cwd=ROOT,
    )
    try:
        wait_port(ns_port)
        wait_port(broker_port)
        time.sleep(1.0)  # first registration
        samples = run(soak(args, f"127.0.0.1:{ns_port}", {"broker": broker.pid, "namesrv": namesrv.pid}))
        for name in ("broker", "namesrv"):
            print(verdict(samples, name))
    finally:
        for proc in (broker, namesrv):
            proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(30)
        for log in logs.values():
            log.close()
        shutil.rmtree(work / "store", ignore_errors=True)
        print(f"logs in {work}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
