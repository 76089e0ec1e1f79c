"""SQL92 filter benchmark: consuming with an SQL92 subscription that matches 10% of a topic
against a tag subscription that matches the same 10% (target: SQL92 >= 0.7x the tag rate).

Starts a real name server and broker (``enablePropertyFilter=true``), preloads ``--messages``
messages (every tenth tagged ``hit`` and with property ``kind=hit``, the rest ``miss``), then
for each of ``--runs`` runs drains the topic from the first offset with a new push-consumer
group, once per subscription, timing from start until the last matching message was consumed.
The broker does the filtering in both cases (tag hash in the consume queue, or the expression
over each record's properties), so the figure is the broker's filter cost plus delivery.
Run: ``.venv/bin/python -m bench.sql92_bench [--messages 200000] [--runs 3]``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from aiorocketmq.client import Admin, ConsumeFrom, ConsumeResult, Message, MessageExt, Producer, PushConsumer
from aiorocketmq.protocol.loop import run as run_loop
from bench.machine import summary as machine_summary
from tests.cluster import Cluster

TOPIC = "BenchmarkSql92"
QUEUES = 8
SQL = "kind = 'hit' AND size > 100"


async def preload(namesrv: str, count: int) -> int:
    hits = 0
    async with Producer("bench-sql92-producer", namesrv) as producer:
        batch: list[Message] = []
        for i in range(count):
            hit = i % 10 == 0
            hits += hit
            msg = Message(TOPIC, b"x" * 128, tags="hit" if hit else "miss")
            msg.properties["kind"] = "hit" if hit else "miss"
            msg.properties["size"] = "128"
            batch.append(msg)
            if len(batch) == 64:
                await producer.send_batch(batch)
                batch = []
        if batch:
            await producer.send_batch(batch)
    return hits


async def drain(namesrv: str, group: str, expected: int, *, tag: str | None, sql: str | None) -> float:
    """Seconds until ``expected`` messages were consumed by a new group."""
    done = asyncio.Event()
    seen = 0

    async def handle(messages: list[MessageExt]) -> ConsumeResult:
        nonlocal seen
        seen += len(messages)
        if seen >= expected:
            done.set()
        return ConsumeResult.SUCCESS

    consumer = PushConsumer(group, namesrv, consume_from=ConsumeFrom.FIRST_OFFSET, batch_size=32)
    if sql is not None:
        consumer.subscribe(TOPIC, sql=sql)
    else:
        consumer.subscribe(TOPIC, tag or "*")
    consumer.listener(handle)
    started = time.perf_counter()
    await consumer.start()
    await asyncio.wait_for(done.wait(), 600)
    elapsed = time.perf_counter() - started
    await consumer.shutdown()
    assert seen == expected, f"{seen} consumed, {expected} expected"
    return elapsed


async def main(args: argparse.Namespace) -> None:
    print(machine_summary(), flush=True)
    with tempfile.TemporaryDirectory(prefix="sql92-bench-") as root:
        cluster = Cluster(Path(root))
        await cluster.start_namesrv()
        await cluster.start_broker("broker-a", enablePropertyFilter="true")
        try:
            async with Admin(cluster.namesrv_addr) as admin:
                await admin.create_topic(TOPIC, QUEUES)
            hits = await preload(cluster.namesrv_addr, args.messages)
            print(f"preloaded {args.messages} messages, {hits} matching (10%)")
            tag_rates, sql_rates = [], []
            for run in range(args.runs):
                t = await drain(cluster.namesrv_addr, f"bench-tag-{run}", hits, tag="hit", sql=None)
                s = await drain(cluster.namesrv_addr, f"bench-sql-{run}", hits, tag=None, sql=SQL)
                tag_rates.append(hits / t)
                sql_rates.append(hits / s)
                print(f"run {run + 1}: tag {hits / t:,.0f} msg/s   sql92 {hits / s:,.0f} msg/s")
            tag, sql = statistics.median(tag_rates), statistics.median(sql_rates)
            print(
                f"median: tag {tag:,.0f} matching msg/s ({tag * 10:,.0f} scanned/s), "
                f"sql92 {sql:,.0f} matching msg/s ({sql * 10:,.0f} scanned/s); "
                f"sql92/tag = {sql / tag:.2f}x (target >= 0.70x)"
            )
        finally:
            await cluster.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=3)
    run_loop(main(parser.parse_args()))
