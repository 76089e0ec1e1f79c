"""Automatic batching against one-by-one sends (issue 39): the same producer workload with
``auto_batch`` off and on, against the local cluster (a name server and one broker on their
defaults), in alternating rounds.

Workload: ``--messages`` 128-byte messages sent by ``--senders`` concurrent tasks, each
awaiting its own sends one after another (what an application with many request handlers
each publishing an event looks like). Reported per mode: messages per second by the wall clock
(median of ``--rounds``), and the ratio auto/one-by-one.

Run: ``.venv/bin/python -m bench.auto_batch [--messages 40960] [--senders 1024] [--rounds 3]``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

from aiorocketmq import Message, Producer
from aiorocketmq.client import Admin
from aiorocketmq.client.errors import NoRouteError
from bench.disk_use import LocalCluster
from bench.machine import summary as machine_summary


async def one_round(
    namesrv: str, topic: str, messages: int, senders: int, auto_batch: bool, linger: float
) -> float:
    body = b"x" * 128
    per_sender = messages // senders
    async with Producer(
        f"bench-{int(auto_batch)}", namesrv, auto_batch=auto_batch, linger=linger
    ) as producer:
        await producer.send(Message(topic, body))  # route and connection ready before the clock

        async def sender() -> None:
            for _ in range(per_sender):
                await producer.send(Message(topic, body))

        started = time.perf_counter()
        await asyncio.gather(*(sender() for _ in range(senders)))
        elapsed = time.perf_counter() - started
    return per_sender * senders / elapsed


async def main(args: argparse.Namespace) -> None:
    print(machine_summary())
    with tempfile.TemporaryDirectory(prefix="auto-batch-") as tmp:
        data = Path(tmp) / "data"
        data.mkdir()
        with LocalCluster(sys.executable, data) as cluster:
            async with Admin(cluster.namesrv) as admin:
                for _ in range(100):  # the broker registers with the name server soon after it listens
                    try:
                        await admin.create_topic("AutoBatchBench", 8)
                        break
                    except NoRouteError:
                        await asyncio.sleep(0.1)
            rates: dict[bool, list[float]] = {False: [], True: []}
            for r in range(args.rounds):
                for auto in (False, True) if r % 2 == 0 else (True, False):
                    rate = await one_round(
                        cluster.namesrv, "AutoBatchBench", args.messages, args.senders, auto, args.linger
                    )
                    rates[auto].append(rate)
                    print(
                        f"round {r + 1} {'auto_batch' if auto else 'one-by-one'}: {rate:,.0f} msg/s",
                        flush=True,
                    )
    plain, batched = statistics.median(rates[False]), statistics.median(rates[True])
    print(
        f"\n{args.messages:,} x 128 B, {args.senders} senders, linger {args.linger * 1000:g} ms, "
        f"medians of {args.rounds}: one-by-one {plain:,.0f} msg/s, auto_batch {batched:,.0f} msg/s "
        f"({batched / plain:.2f}x)"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=40_960)
    parser.add_argument("--senders", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--linger", type=float, default=0.010)
    asyncio.run(main(parser.parse_args()))
