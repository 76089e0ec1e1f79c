"""Spark connector benchmark: batch read and write throughput of the ``rocketmq`` data source on
``local[2]`` against a real local name server and broker (child processes), 128-byte bodies.

For each of ``--runs`` runs it measures:

* **read -> count()**: ``spark.read.format("rocketmq")...load().count()`` over the preloaded
  topic (every message pulled, decoded into Arrow batches and counted by Spark);
* **read -> Parquet**: the same DataFrame written to a Parquet directory;
* **write**: a DataFrame of ``--messages`` rows (``body`` binary, ``tags``) appended to a new
  topic with ``df.write.format("rocketmq")``.

Messages/s are reported as the median over the runs (the first run included, Python workers
are reused after it), with the CPU seconds each process used (the broker, the JVM with its
Python workers, and this driver) to show where the time goes. The test data is produced
with pipelined batch sends before the first run.

Run: ``.venv/bin/python -m bench.spark_bench [--messages 1000000] [--runs 5]``. Add
``--broker-conf maxTransferCountOnMessageInMemory=1024`` to see a broker tuned for bulk reads.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aiorocketmq.protocol.message import Message
from bench.machine import summary as machine_summary
from tests.pipeline.conftest import TestCluster

TARGET_READ = 200_000
TARGET_WRITE = 100_000
BODY = 128


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of ``pid`` and its children that were waited for."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    ticks = os.sysconf("SC_CLK_TCK")
    return sum(int(v) for v in fields[11:15]) / ticks


def tree_cpu(pid: int) -> float:
    """CPU seconds of ``pid`` and every live descendant."""
    total = cpu_seconds(pid)
    children = Path(f"/proc/{pid}/task")
    seen: set[int] = set()
    for task in children.iterdir() if children.exists() else []:
        try:
            kids = (task / "children").read_text().split()
        except OSError:
            continue
        for kid in kids:
            if int(kid) not in seen:
                seen.add(int(kid))
                total += tree_cpu(int(kid))
    return total


def produce(cluster: TestCluster, topic: str, count: int) -> float:
    body = os.urandom(BODY)
    began = time.perf_counter()
    step = 50_000
    for first in range(0, count, step):
        cluster.produce([Message(topic, body, tags="bench") for _ in range(min(step, count - first))])
    return time.perf_counter() - began


def measure(name: str, messages: int, fn: Callable[[], Any], pids: dict[str, int]) -> dict[str, float]:
    before = {k: (cpu_seconds(p) if k == "driver" else tree_cpu(p)) for k, p in pids.items()}
    began = time.perf_counter()
    fn()
    seconds = time.perf_counter() - began
    after = {k: (cpu_seconds(p) if k == "driver" else tree_cpu(p)) for k, p in pids.items()}
    figures = {"rate": messages / seconds, "seconds": seconds}
    for key in pids:
        figures[f"cpu_{key}"] = after[key] - before[key]
    cpu = ", ".join(f"{k} {figures[f'cpu_{k}']:.1f}s" for k in pids)
    print(
        f"  {name:<16} {messages:>9,} msgs in {seconds:6.2f}s = {figures['rate']:>10,.0f} msg/s  (cpu: {cpu})"
    )
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1, help="unmeasured runs first (JIT, worker start)")
    parser.add_argument("--queues", type=int, default=8)
    parser.add_argument("--broker-conf", action="append", default=[], help="key=value for broker.conf")
    args = parser.parse_args(argv)
    print(machine_summary(), flush=True)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from aiorocketmq.pipeline import RocketMQDataSource

    conf = dict(item.split("=", 1) for item in args.broker_conf)
    root = Path(tempfile.mkdtemp(prefix="spark-bench-"))
    cluster = TestCluster(
        root,
        ("broker-a",),
        mappedFileSizeCommitLog=256 * 1024 * 1024,
        mappedFileSizeConsumeQueue=2_000_000 * 20,
        maxIndexNum=4_000_000,
        maxHashSlotNum=500_000,
        **conf,
    )
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("rocketmq-spark-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.pyspark.python", sys.executable)
        .config("spark.driver.memory", "2g")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(RocketMQDataSource)
    try:
        topic = "SparkBenchRead"
        cluster.create_topic(topic, args.queues)
        seconds = produce(cluster, topic, args.messages)
        print(
            f"preloaded {args.messages:,} messages of {BODY} bytes in {seconds:.1f}s "
            f"({args.messages / seconds:,.0f} msg/s, pipelined batch sends)"
        )
        broker = cluster.cluster.brokers["broker-a"].process
        assert broker is not None and broker.proc is not None
        pids = {"broker": broker.proc.pid, "jvm+workers": _jvm_pid(spark), "driver": os.getpid()}
        reader = spark.read.format("rocketmq").option("namesrv", cluster.namesrv).option("topic", topic)
        rows = (
            spark.range(args.messages)
            .selectExpr(f"cast(repeat('x', {BODY}) as binary) as body", "'bench' as tags")
            .cache()
        )
        rows.count()
        tiny = "SparkBenchTiny"
        cluster.create_topic(tiny, args.queues)
        cluster.produce([Message(tiny, b"x") for _ in range(args.queues)])
        tiny_reader = spark.read.format("rocketmq").option("namesrv", cluster.namesrv).option("topic", tiny)
        overhead: list[float] = []
        results: dict[str, list[dict[str, float]]] = {"count": [], "parquet": [], "write": []}
        out = root / "parquet"
        for run in range(1 - args.warmup, args.runs + 1):
            print(f"run {run}/{args.runs}" if run > 0 else "warm-up run (not counted)")

            def count() -> None:
                got = reader.load().count()
                assert got == args.messages, got

            began = time.perf_counter()
            assert tiny_reader.load().count() == args.queues
            overhead.append(time.perf_counter() - began)
            print(f"  fixed cost: load() + count() of {args.queues} messages took {overhead[-1]:.2f}s")
            figures = measure("read -> count()", args.messages, count, pids)
            if run > 0:
                results["count"].append(figures)
            shutil.rmtree(out, ignore_errors=True)
            figures = measure(
                "read -> Parquet", args.messages, lambda: reader.load().write.parquet(str(out)), pids
            )
            if run > 0:
                results["parquet"].append(figures)
            write_topic = f"SparkBenchWrite{run + args.warmup}"
            cluster.create_topic(write_topic, args.queues)

            def write(write_topic: str = write_topic) -> None:
                rows.write.format("rocketmq").option("namesrv", cluster.namesrv).option(
                    "topic", write_topic
                ).mode("append").save()

            figures = measure("write", args.messages, write, pids)
            if run > 0:
                results["write"].append(figures)
        print(f"\nmedians over {args.runs} runs (local[2], {BODY}-byte bodies, {args.messages:,} messages):")
        print(
            f"  fixed cost of a read query (planning, one task per queue): {statistics.median(overhead[args.warmup :]):.2f}s"
        )
        targets = {"count": TARGET_READ, "parquet": TARGET_READ, "write": TARGET_WRITE}
        for key, runs in results.items():
            rate = statistics.median(r["rate"] for r in runs)
            cpu = {k: statistics.median(r[f"cpu_{k}"] for r in runs) for k in pids}
            per_msg = ", ".join(f"{k} {cpu[k] / args.messages * 1e6:.1f}" for k in pids)
            verdict = "meets" if rate >= targets[key] else "below"
            print(
                f"  {key:<8} {rate:>10,.0f} msg/s  ({verdict} target {targets[key]:,})  cpu us/msg: {per_msg}"
            )
    finally:
        spark.stop()
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)
    return 0


def _jvm_pid(spark: Any) -> int:
    return int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())


if __name__ == "__main__":
    raise SystemExit(main())
