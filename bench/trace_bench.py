"""Message trace cost: send TPS of a producer with ``enable_trace=True`` against one without.

Starts a real name server and broker (``traceTopicEnable=true``; child processes), then for
each of ``--runs`` rounds measures, in alternating order, ``--seconds`` of synchronous sends of
128-byte messages by ``--workers`` coroutines on one producer with traces off and on. Each
figure is the median of the rounds; the target is trace-on >= 0.85x trace-off. The traced run
also reports how many trace messages were sent and how many events were dropped (a full
queue drops rather than slows the sender) and, for both, the client process's CPU time per
message (the broker is usually the limit on one machine; the CPU figure shows the SDK's own
extra work for traces).

Run: ``.venv/bin/python -m bench.trace_bench [--runs 3] [--seconds 5] [--workers 64]``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from aiorocketmq.client import Admin, Message, Producer
from aiorocketmq.protocol.loop import run as run_loop
from bench.machine import summary as machine_summary
from tests.cluster import Cluster

TOPIC = "BenchmarkTrace"
TARGET = 0.85


async def measure(namesrv: str, traced: bool, seconds: float, workers: int, run_id: str) -> tuple[float, str]:
    producer = Producer(f"bench_trace_{run_id}_{int(traced)}", namesrv, enable_trace=traced)
    await producer.start()
    body = b"x" * 128
    try:
        await producer.send(Message(TOPIC, body))  # route and connection warmed up
        sent = 0
        deadline = time.monotonic() + seconds

        async def worker() -> None:
            nonlocal sent
            while time.monotonic() < deadline:
                await producer.send(Message(TOPIC, body))
                sent += 1

        started, cpu = time.monotonic(), time.process_time()
        await asyncio.gather(*(worker() for _ in range(workers)))
        elapsed = time.monotonic() - started
        trace = producer._trace
        if trace is not None:
            await trace.flush()  # the traces of these sends are part of their cost
        note = f"; client CPU {(time.process_time() - cpu) / sent * 1e6:.0f} us/msg"
        if trace is not None:
            note += f" ({trace.sent_messages} trace messages, {trace.dropped} events dropped)"
        return sent / elapsed, note
    finally:
        await producer.shutdown()


async def bench(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="trace-bench-") as tmp:
        cluster = Cluster(Path(tmp))
        await cluster.start_namesrv()
        try:
            await cluster.start_broker("broker-a", traceTopicEnable="true", flushDiskType="ASYNC_FLUSH")
            async with Admin(cluster.namesrv_addr) as admin:
                await admin.create_topic(TOPIC, queue_nums=8)
            off: list[float] = []
            on: list[float] = []
            for n in range(args.runs):
                order = (False, True) if n % 2 == 0 else (True, False)
                for traced in order:
                    tps, note = await measure(
                        cluster.namesrv_addr, traced, args.seconds, args.workers, f"{n}"
                    )
                    (on if traced else off).append(tps)
                    print(
                        f"run {n + 1}: trace {'on ' if traced else 'off'} {tps:10,.0f} msg/s{note}",
                        flush=True,
                    )
        finally:
            await cluster.stop()
    ratio = statistics.median(on) / statistics.median(off)
    verdict = "meets" if ratio >= TARGET else "misses"
    print(
        f"median send TPS: trace off {statistics.median(off):,.0f}, trace on {statistics.median(on):,.0f}: "
        f"{ratio:.2f}x ({verdict} the {TARGET}x target)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--workers", type=int, default=64)
    print(machine_summary(), flush=True)
    run_loop(bench(parser.parse_args()))


if __name__ == "__main__":
    main()
