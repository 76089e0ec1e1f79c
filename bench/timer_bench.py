"""Timer-message benchmark: how late timer messages are released while the timer store holds
``--pending`` (1 million by default) other timers.

Starts a real name server and broker, parks ``--pending`` timer messages due one to three
hours from now (sent 64 at a time; this takes a while), then sends ``--probes`` probe timers
due 2 s after their send, paced at ``--rate`` per second while plain sends keep the broker
busy, with a push consumer subscribed to the probe topic. For each probe:

* **release lateness**: the released record's store timestamp minus its delivery time
  (``TIMER_OUT_MS``): the timer store's own delay;
* **end-to-end lateness**: when the consumer's listener got it minus its delivery time.

Prints p50 / p99 / max of both (the target: at most 100 ms), and how many probes arrived
early (must be 0). Run: ``.venv/bin/python -m bench.timer_bench [--pending 1000000]``.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import tempfile
import time
from pathlib import Path

from aiorocketmq.client import Admin, ConsumeFrom, ConsumeResult, Message, MessageExt, Producer, PushConsumer
from aiorocketmq.client.errors import MQError
from aiorocketmq.protocol.loop import run as run_loop
from bench.machine import summary as machine_summary
from tests.cluster import Cluster

PENDING_TOPIC = "BenchTimerPending"
PROBE_TOPIC = "BenchTimerProbe"
LOAD_TOPIC = "BenchTimerLoad"


def now_ms() -> int:
    return time.time_ns() // 1_000_000


async def park_pending(producer: Producer, count: int) -> None:
    base = now_ms() + 3600_000
    sent = 0
    started = time.perf_counter()

    async def worker(worker_id: int) -> None:
        nonlocal sent
        while sent < count:
            sent += 1
            due = base + random.randrange(2 * 3600_000)
            while True:
                try:
                    await producer.send(Message(PENDING_TOPIC, b"p" * 64), deliver_at=due / 1000, timeout=30)
                    break
                except MQError as exc:  # a busy machine: try the same timer again
                    print(f"  send failed, retrying: {exc}")

    async def report() -> None:
        while True:
            await asyncio.sleep(10)
            print(f"  parked {sent:,} of {count:,} ({sent / (time.perf_counter() - started):,.0f}/s)")

    reporter = asyncio.create_task(report())
    await asyncio.gather(*(worker(i) for i in range(64)))
    reporter.cancel()
    print(f"parked {count:,} pending timers in {time.perf_counter() - started:.0f}s")


def percentile(values: list[int], q: float) -> float:
    ordered = sorted(values)
    return float(ordered[min(len(ordered) - 1, int(q * len(ordered)))])


async def main(args: argparse.Namespace) -> None:
    print(machine_summary(), flush=True)
    with tempfile.TemporaryDirectory(prefix="timer-bench-") as root:
        cluster = Cluster(Path(root))
        await cluster.start_namesrv()
        await cluster.start_broker(
            "broker-a", mappedFileSizeCommitLog=256 * 1024 * 1024, mappedFileSizeConsumeQueue=2_000_000 * 20
        )
        try:
            async with Admin(cluster.namesrv_addr) as admin:
                for topic in (PENDING_TOPIC, PROBE_TOPIC, LOAD_TOPIC):
                    await admin.create_topic(topic, 8)
            async with Producer("bench-timer-producer", cluster.namesrv_addr) as producer:
                await park_pending(producer, args.pending)
                got: dict[bytes, tuple[int, int, int]] = {}
                done = asyncio.Event()

                async def handle(messages: list[MessageExt]) -> ConsumeResult:
                    received = now_ms()
                    for msg in messages:
                        got[msg.body] = (int(msg.properties["TIMER_OUT_MS"]), msg.store_timestamp, received)
                    if len(got) >= args.probes:
                        done.set()
                    return ConsumeResult.SUCCESS

                consumer = PushConsumer(
                    "bench-timer-consumer", cluster.namesrv_addr, consume_from=ConsumeFrom.FIRST_OFFSET
                )
                consumer.subscribe(PROBE_TOPIC)
                consumer.listener(handle)
                await consumer.start()
                stop_load = asyncio.Event()

                async def load() -> None:
                    while not stop_load.is_set():
                        await producer.send(Message(LOAD_TOPIC, b"l" * 128))

                loaders = [asyncio.create_task(load()) for _ in range(8)]
                for i in range(args.probes):
                    await producer.send(Message(PROBE_TOPIC, f"probe-{i}".encode()), delay=2.0)
                    await asyncio.sleep(1 / args.rate)
                await asyncio.wait_for(done.wait(), 120)
                stop_load.set()
                await asyncio.gather(*loaders)
                await consumer.shutdown()
            release = [stored - due for due, stored, _ in got.values()]
            end_to_end = [received - due for due, _, received in got.values()]
            early = sum(1 for due, stored, received in got.values() if stored < due or received < due)
            for label, values in (("release", release), ("end-to-end", end_to_end)):
                print(
                    f"{label} lateness over {len(values)} probes with {args.pending:,} timers pending: "
                    f"p50 {percentile(values, 0.5):.0f} ms, p99 {percentile(values, 0.99):.0f} ms, "
                    f"max {max(values)} ms, mean {statistics.fmean(values):.1f} ms"
                )
            print(f"probes released or received before their time: {early} (must be 0); target p99 <= 100 ms")
        finally:
            await cluster.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pending", type=int, default=1_000_000)
    parser.add_argument("--probes", type=int, default=1000)
    parser.add_argument("--rate", type=float, default=100.0)
    run_loop(main(parser.parse_args()))
