"""POP consumption throughput from the SDK's SimpleConsumer against a real broker.

Starts a name server and a broker (child processes), preloads ``--messages`` messages of
``--size`` bytes (batches of 64), then for each of ``--runs`` runs drains them with a new
consumer group:

* **receive+ack**: ``--consumers`` coroutines, each ``receive(32)`` then one ack per message
  (the acks of a batch in flight together, as an application acking as it goes would have);
* **receive+batch**: the same, each batch acked with one ``ack_batch`` (BATCH_ACK_MESSAGE);
* **receive only**: the same receives with no acks (the messages are left to expire), to
  show what acks cost;
* **push** (for comparison): a push consumer of a new group draining the same messages.

Reported: messages/s, and the client's and the broker's CPU time per message. Each figure is
the median of the runs. Run: ``.venv/bin/python -m bench.pop_bench [--runs 3]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from pathlib import Path

from aiorocketmq.client import (
    Admin,
    ConsumeFrom,
    ConsumeResult,
    Message,
    MessageExt,
    Producer,
    PushConsumer,
    SimpleConsumer,
)
from aiorocketmq.protocol.loop import run as run_loop
from bench.machine import summary as machine_summary
from bench.procs import cpu_seconds
from tests.cluster import Cluster

TOPIC = "BenchmarkPop"
QUEUES = 8


async def drain_pop(cluster: Cluster, group: str, total: int, consumers: int, ack: str) -> float:
    """Seconds to receive (and ack) ``total`` messages with ``consumers`` coroutines."""
    received = 0
    done = asyncio.Event()

    async def one(consumer: SimpleConsumer) -> None:
        nonlocal received
        while not done.is_set():
            # Invisible past the end of the bench: un-acked messages must not come back (and
            # load the broker) while later scenarios run.
            batch = await consumer.receive(32, 900.0, await_duration=1.0)
            if ack == "each" and batch:
                await asyncio.gather(*(consumer.ack(msg) for msg in batch))
            elif ack == "batch" and batch:
                await consumer.ack_batch(batch)
            received += len(batch)
            if received >= total:
                done.set()

    async with SimpleConsumer(group, cluster.namesrv_addr, subscriptions={TOPIC: "*"}) as consumer:
        started = time.perf_counter()
        tasks = [asyncio.ensure_future(one(consumer)) for _ in range(consumers)]
        await done.wait()
        elapsed = time.perf_counter() - started
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return elapsed


async def drain_push(cluster: Cluster, group: str, total: int) -> float:
    received = 0
    done = asyncio.Event()
    consumer = PushConsumer(group, cluster.namesrv_addr, consume_from=ConsumeFrom.FIRST_OFFSET)
    consumer.subscribe(TOPIC)

    @consumer.listener
    async def handle(messages: list[MessageExt]) -> ConsumeResult:
        nonlocal received
        received += len(messages)
        if received >= total:
            done.set()
        return ConsumeResult.SUCCESS

    started = time.perf_counter()
    async with consumer:
        await done.wait()
        elapsed = time.perf_counter() - started
    return elapsed


async def bench(args: argparse.Namespace) -> None:
    cluster = Cluster(Path(tempfile.mkdtemp(prefix="pop-bench-")))
    body = os.urandom(args.size)
    figures: dict[str, list[tuple[float, float, float]]] = {}
    try:
        await cluster.start_namesrv()
        broker = await cluster.start_broker("broker-a", mappedFileSizeCommitLog=256 * 1024 * 1024)
        assert broker.process is not None and broker.process.proc is not None
        broker_pid = broker.process.proc.pid
        async with Admin(cluster.namesrv_addr) as admin:
            await admin.create_topic(TOPIC, QUEUES)
        async with Producer("pop-bench-producer", cluster.namesrv_addr) as producer:
            sent = 0
            while sent < args.messages:
                await producer.send_batch([Message(TOPIC, body) for _ in range(64)])
                sent += 64
        print(f"preloaded {sent} messages of {args.size} bytes on {QUEUES} queues")
        scenarios = {
            "receive+ack": lambda group: drain_pop(cluster, group, sent, args.consumers, "each"),
            "receive+batch": lambda group: drain_pop(cluster, group, sent, args.consumers, "batch"),
            "receive only": lambda group: drain_pop(cluster, group, sent, args.consumers, "none"),
            "push (pull)": lambda group: drain_push(cluster, group, sent),
        }
        for run in range(args.runs):
            for name, scenario in scenarios.items():
                group = f"pop-bench-{run}-{name.split()[0].replace('+', '-')}"
                cpu0, broker0 = time.process_time(), cpu_seconds(broker_pid)
                seconds = await scenario(group)
                client_us = (time.process_time() - cpu0) / sent * 1e6
                broker_us = (cpu_seconds(broker_pid) - broker0) / sent * 1e6
                figures.setdefault(name, []).append((sent / seconds, client_us, broker_us))
                print(
                    f"run {run + 1} {name:<13} {sent / seconds:9.0f} msg/s  "
                    f"CPU us/msg client {client_us:6.1f} broker {broker_us:6.1f}"
                )
    finally:
        await cluster.stop()
    print(f"\nmedian of {args.runs} runs ({args.consumers} receiving coroutines, 32 per receive):")
    for name, rows in figures.items():
        tps = statistics.median(r[0] for r in rows)
        client = statistics.median(r[1] for r in rows)
        broker_cpu = statistics.median(r[2] for r in rows)
        print(f"{name:<13} {tps:9.0f} msg/s  CPU us/msg client {client:6.1f} broker {broker_cpu:6.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("-s", "--size", type=int, default=128)
    parser.add_argument("--consumers", type=int, default=4, help="receiving coroutines (default 4)")
    args = parser.parse_args()
    print(machine_summary(), flush=True)
    run_loop(bench(args))


if __name__ == "__main__":
    main()
