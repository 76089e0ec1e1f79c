"""SDK benchmark, after RocketMQ's own benchmark tool (``docs/operations.md#mqbench``), with
redis-server driven by redis-py on the same machine as the peer.

Starts a real name server and broker (child processes), then for each of ``--runs`` runs:

* **sync-1**: one producer sending 128-byte messages synchronously, one at a time (the Java
  tool's ``-w 1``), for ``--seconds``: Send TPS, average and max RT;
* **sync-1-poll**: the same with ``ClientOptions(busy_poll=...)`` (``--busy-poll``, 100 µs):
  the client polls its connection while each response is awaited instead of sleeping, which
  spends CPU to skip the wake-up a sleeping loop pays on each round trip;
* **sync-64**: 64 coroutines doing the same on one producer (in-flight sends pipeline on one
  connection, like the tool's ``-w 64``);
* **batch**: ``send_batch`` of ``--batch`` messages, 8 batches in flight, and **batch1000**
  the same with ``--large-batch`` messages (1,000: what the pipelined ``XADD`` sends per round
  trip);
* **consume**: a push consumer (new group, from the first offset) draining ``--consume``
  preloaded messages with a listener that returns SUCCESS: Consume TPS, average/max B2C
  (born to consumed) and S2C (stored to consumed); once with RocketMQ's defaults (32
  messages per pull, the broker's cap, one message per listener call), once "tuned" (256 per
  pull; the broker's ``maxTransferCountOnMessageInMemory`` raised to match) and once with
  listener batches of 32 (``batch_size=32``, Java's ``consumeMessageBatchMaxSize``);
* **latency**: a producer paced at ``--rate`` messages/s and a push consumer: end-to-end
  latency (send call to listener) percentiles;
* **ceiling**: the same send and consume scenarios against ``bench.fake_broker``, an instant
  broker that stores nothing, to show the SDK's own limit apart from the broker's work
  (``--ceiling-only`` runs just these, without a cluster);
* **redis**: ``XADD`` one at a time, ``XADD`` pipelined (1,000 per pipeline), ``XREADGROUP``
  (``COUNT`` 32 and 1,000, each batch ``XACK``-ed), on redis-server without persistence. Skipped
  with a message when redis-server or redis-py is missing.

Each figure is the median of the runs; the summary gives ratios against redis measured in
the same script and the targets, and the client's and the broker's CPU time per message, to
show where the time goes. Run: ``.venv/bin/python -m bench.sdk_bench [--runs 5]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import gc
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiorocketmq.client import (
    Admin,
    ClientOptions,
    ConsumeFrom,
    ConsumeResult,
    Message,
    MessageExt,
    Producer,
    PushConsumer,
)
from aiorocketmq.client.errors import BrokerError, MQError
from aiorocketmq.protocol.loop import run as run_loop
from bench.machine import summary as machine_summary
from bench.procs import free_port
from tests.cluster import Cluster

ROOT = Path(__file__).resolve().parent.parent
TOPIC = "BenchmarkSdk"
#: Preloaded once; every drain reads it from offset 0 with a new consumer group.
CONSUME_TOPIC = "BenchmarkSdkConsume"
QUEUES = 8
TUNED_PULL_BATCH = 256


def now_str() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S")


@dataclass
class Figures:
    """One scenario's measurements in one run."""

    messages: int = 0
    seconds: float = 0.0
    rt_sum: float = 0.0
    rt_max: float = 0.0
    send_failed: int = 0
    response_failed: int = 0
    client_cpu: float = 0.0
    broker_cpu: float = 0.0
    extra: dict[str, float] = field(default_factory=dict)

    @property
    def tps(self) -> float:
        return self.messages / self.seconds if self.seconds else 0.0

    def per_message_us(self, cpu: float) -> float:
        return cpu / self.messages * 1e6 if self.messages else 0.0


class CpuMeter:
    """CPU seconds used by this process and by the broker process over a scenario."""

    def __init__(self, broker_pid: int | None) -> None:
        self.broker_pid = broker_pid

    def broker_seconds(self) -> float:
        if self.broker_pid is None:
            return 0.0
        try:
            parts = Path(f"/proc/{self.broker_pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return 0.0
        return (int(parts[11]) + int(parts[12])) / os.sysconf("SC_CLK_TCK")

    def start(self) -> tuple[float, float]:
        return time.process_time(), self.broker_seconds()

    def stop(self, started: tuple[float, float], figures: Figures) -> None:
        figures.client_cpu = time.process_time() - started[0]
        figures.broker_cpu = self.broker_seconds() - started[1]


def send_line(label: str, f: Figures) -> str:
    avg = f.rt_sum / f.messages * 1000 if f.messages else 0.0
    return (
        f"Current Time: {now_str()} | {label:<11} | Send TPS: {f.tps:7.0f} | Max RT(ms): {f.rt_max * 1000:7.3f} | "
        f"Average RT(ms): {avg:7.3f} | Send Failed: {f.send_failed} | Response Failed: {f.response_failed} | "
        f"CPU us/msg client {f.per_message_us(f.client_cpu):5.1f} broker {f.per_message_us(f.broker_cpu):5.1f}"
    )


# -- SDK scenarios ----------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def warmed_producer(
    group: str, namesrv: str, options: ClientOptions | None = None
) -> AsyncIterator[Producer]:
    """A producer that knows the route and has written each queue of the topic once (a
    broker makes a consume queue's file on its first message, which is not steady state)."""
    async with Producer(group, namesrv, compress_threshold=1 << 30, options=options) as producer:
        for queue in await producer.queues(TOPIC):
            await producer.send(Message(TOPIC, b"warm-up"), queue=queue)
        yield producer


async def sync_sends(producer: Producer, seconds: float, workers: int, size: int, cpu: CpuMeter) -> Figures:
    f = Figures()
    body = os.urandom(size // 2).hex().encode()[:size]
    stop_at = time.monotonic() + seconds

    async def worker() -> None:
        perf = time.perf_counter
        while time.monotonic() < stop_at:
            began = perf()
            try:
                await producer.send(Message(TOPIC, body))
            except BrokerError:
                f.response_failed += 1
                await asyncio.sleep(1)
                continue
            except MQError:
                f.send_failed += 1
                await asyncio.sleep(1)
                continue
            rt = perf() - began
            f.messages += 1
            f.rt_sum += rt
            if rt > f.rt_max:
                f.rt_max = rt

    started = cpu.start()
    began = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(workers)))
    f.seconds = time.perf_counter() - began
    cpu.stop(started, f)
    return f


async def batch_sends(
    producer: Producer, seconds: float, batch: int, depth: int, size: int, cpu: CpuMeter
) -> Figures:
    f = Figures()
    body = os.urandom(size // 2).hex().encode()[:size]
    stop_at = time.monotonic() + seconds

    async def worker() -> None:
        perf = time.perf_counter
        while time.monotonic() < stop_at:
            began = perf()
            try:
                await producer.send_batch([Message(TOPIC, body) for _ in range(batch)])
            except MQError:
                f.send_failed += 1
                await asyncio.sleep(1)
                continue
            rt = perf() - began
            f.messages += batch
            f.rt_sum += rt * batch  # per-message average RT = batch RT
            f.rt_max = max(f.rt_max, rt)

    started = cpu.start()
    began = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(depth)))
    f.seconds = time.perf_counter() - began
    cpu.stop(started, f)
    return f


async def preload(producer: Producer, count: int, size: int) -> None:
    body = os.urandom(size // 2).hex().encode()[:size]
    slots = asyncio.Semaphore(8)

    async def one(n: int) -> None:
        async with slots:
            await producer.send_batch([Message(CONSUME_TOPIC, body) for _ in range(n)])

    await asyncio.gather(*(one(min(128, count - i)) for i in range(0, count, 128)))


async def drain(
    namesrv: str,
    expected: int,
    pull_batch: int,
    cpu: CpuMeter,
    run_id: str,
    batch_size: int = 1,
    topic: str = CONSUME_TOPIC,
) -> Figures:
    f = Figures()
    done = asyncio.Event()
    b2c_sum = s2c_sum = 0.0
    b2c_max = s2c_max = 0.0
    consumer = PushConsumer(
        f"bench_consumer_{run_id}",
        namesrv,
        consume_from=ConsumeFrom.FIRST_OFFSET,
        pull_batch_size=pull_batch,
        queue_threshold=max(1000, pull_batch * 4),
        batch_size=batch_size,
    )
    consumer.subscribe(topic)

    @consumer.listener
    async def handle(messages: list[MessageExt]) -> ConsumeResult:
        nonlocal b2c_sum, s2c_sum, b2c_max, s2c_max
        now = time.time() * 1000
        for msg in messages:
            b2c = now - msg.born_timestamp
            s2c = now - msg.store_timestamp
            b2c_sum += b2c
            s2c_sum += s2c
            if b2c > b2c_max:
                b2c_max = b2c
            if s2c > s2c_max:
                s2c_max = s2c
        f.messages += len(messages)
        if f.messages >= expected:
            done.set()
        return ConsumeResult.SUCCESS

    started = cpu.start()
    began = time.perf_counter()
    await consumer.start()
    await asyncio.wait_for(done.wait(), 600)
    f.seconds = time.perf_counter() - began
    cpu.stop(started, f)
    await consumer.shutdown()
    f.extra = {
        "b2c_avg": b2c_sum / f.messages,
        "s2c_avg": s2c_sum / f.messages,
        "b2c_max": b2c_max,
        "s2c_max": s2c_max,
    }
    return f


def consume_line(label: str, f: Figures) -> str:
    e = f.extra
    return (
        f"Current Time: {now_str()} | {label:<8} | Consume TPS: {f.tps:7.0f} | AVG(B2C) RT(ms): {e['b2c_avg']:9.3f} | "
        f"AVG(S2C) RT(ms): {e['s2c_avg']:9.3f} | MAX(B2C) RT(ms): {e['b2c_max']:7.0f} | MAX(S2C) RT(ms): "
        f"{e['s2c_max']:7.0f} | Consume Fail: 0 | CPU us/msg client {f.per_message_us(f.client_cpu):5.1f} "
        f"broker {f.per_message_us(f.broker_cpu):5.1f}"
    )


async def end_to_end(namesrv: str, rate: int, seconds: float, run_id: str) -> dict[str, float]:
    """Send at ``rate`` messages/s; latency from before the send call to the listener."""
    latencies: list[float] = []
    expected = int(rate * seconds)
    done = asyncio.Event()
    consumer = PushConsumer(f"bench_latency_{run_id}", namesrv, consume_from=ConsumeFrom.LAST_OFFSET)
    topic = f"{TOPIC}Latency{run_id}"
    async with Admin(namesrv) as admin:
        await admin.create_topic(topic, QUEUES)
    consumer.subscribe(topic)

    @consumer.listener
    async def handle(messages: list[MessageExt]) -> ConsumeResult:
        now = time.perf_counter()
        for msg in messages:
            if msg.body != b"warm-up":
                latencies.append(now - float(msg.body))
        if len(latencies) >= expected:
            done.set()
        return ConsumeResult.SUCCESS

    async with Producer(f"bench_latency_producer_{run_id}", namesrv) as producer:
        # Route known, connection open, and every queue written once: a broker creates a
        # consume queue's file on its first message (a few ms), which is not steady state.
        for queue in await producer.queues(topic):
            await producer.send(Message(topic, b"warm-up"), queue=queue)
        await consumer.start()
        await asyncio.sleep(1.0)  # let the consumer settle on its queues at the end offsets
        latencies.clear()
        interval = 1.0 / rate
        began = time.perf_counter()
        in_flight: set[asyncio.Task[Any]] = set()
        for i in range(expected):
            target = began + i * interval
            delay = target - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            task = asyncio.ensure_future(producer.send(Message(topic, repr(time.perf_counter()).encode())))
            in_flight.add(task)
            task.add_done_callback(in_flight.discard)
        await asyncio.wait_for(done.wait(), 60)
        await consumer.shutdown()
    latencies.sort()
    pick = lambda q: latencies[min(len(latencies) - 1, int(q * len(latencies)))] * 1000  # noqa: E731
    return {"p50": pick(0.50), "p90": pick(0.90), "p99": pick(0.99), "max": latencies[-1] * 1000}


# -- redis peer -------------------------------------------------------------------------------


class RedisPeer:
    """redis-server (no persistence, like an ASYNC_FLUSH broker writing to page cache)."""

    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="bench-redis-")
        self.port = free_port()
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--save", "", "--appendonly", "no", "--dir", self.dir],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        import redis

        self.client = redis.Redis(port=self.port)
        deadline = time.monotonic() + 10
        while True:
            try:
                self.client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)
        shutil.rmtree(self.dir, ignore_errors=True)

    def xadd_one(self, seconds: float, body: bytes) -> float:
        r = self.client
        stream = f"one-{time.monotonic_ns()}"
        count = 0
        stop_at = time.monotonic() + seconds
        began = time.perf_counter()
        while time.monotonic() < stop_at:
            r.xadd(stream, {"body": body})
            count += 1
        elapsed = time.perf_counter() - began
        r.delete(stream)
        return count / elapsed

    def xadd_pipelined(self, seconds: float, body: bytes, depth: int = 1000) -> float:
        r = self.client
        stream = f"pipe-{time.monotonic_ns()}"
        count = 0
        stop_at = time.monotonic() + seconds
        began = time.perf_counter()
        while time.monotonic() < stop_at:
            pipe = r.pipeline(transaction=False)
            for _ in range(depth):
                pipe.xadd(stream, {"body": body})
            pipe.execute()
            count += depth
        elapsed = time.perf_counter() - began
        r.delete(stream)
        return count / elapsed

    def xreadgroup(self, total: int, body: bytes, count: int) -> float:
        r = self.client
        stream = f"read-{time.monotonic_ns()}"
        for start in range(0, total, 1000):
            pipe = r.pipeline(transaction=False)
            for _ in range(min(1000, total - start)):
                pipe.xadd(stream, {"body": body})
            pipe.execute()
        r.xgroup_create(stream, "g", id="0")
        got = 0
        began = time.perf_counter()
        while got < total:
            reply: Any = r.xreadgroup("g", "c", {stream: ">"}, count=count)
            for _, entries in reply:
                got += len(entries)
                r.xack(stream, "g", *[entry_id for entry_id, _ in entries])
        elapsed = time.perf_counter() - began
        r.delete(stream)
        return got / elapsed


def redis_available() -> str | None:
    """Why the redis comparison cannot run, or None when it can."""
    if shutil.which("redis-server") is None:
        return "redis-server is not installed (apt-get install -y redis-server)"
    try:
        import redis  # noqa: F401
    except ImportError:
        return "redis-py is not installed (pip install 'aiorocketmq[bench]')"
    return None


# -- driver -----------------------------------------------------------------------------------


def large_batch_label(args: argparse.Namespace) -> str:
    """The label of the second batch scenario (``--large-batch`` messages a batch)."""
    return f"batch{args.large_batch}"


def median(values: list[float]) -> float:
    return statistics.median(values) if values else 0.0


async def sdk_ceiling(args: argparse.Namespace) -> dict[str, list[Figures]]:
    """The SDK against an instant broker (``bench.fake_broker``): its own ceiling here."""
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bench.fake_broker",
        "--port",
        str(port),
        "--size",
        str(args.size),
        cwd=str(ROOT),
        stdout=asyncio.subprocess.PIPE,
    )
    results: dict[str, list[Figures]] = {}
    large = large_batch_label(args)
    try:
        assert proc.stdout is not None
        await asyncio.wait_for(proc.stdout.readline(), 30)
        namesrv = f"127.0.0.1:{port}"
        cpu = CpuMeter(proc.pid)
        print(f"--- the SDK alone, against an instant broker (bench.fake_broker, pid {proc.pid})")
        for run in range(1, args.runs + 1):
            async with Producer(f"ceiling_producer_{run}", namesrv, compress_threshold=1 << 30) as p:
                await p.send(Message(TOPIC, b"warm-up"))
                for label, coro in (
                    ("sync-1", lambda: sync_sends(p, args.seconds, 1, args.size, cpu)),
                    ("sync-64", lambda: sync_sends(p, args.seconds, 64, args.size, cpu)),
                    ("batch", lambda: batch_sends(p, args.seconds, args.batch, 8, args.size, cpu)),
                    (large, lambda: batch_sends(p, args.seconds, args.large_batch, 8, args.size, cpu)),
                ):
                    figures = await coro()
                    results.setdefault(label, []).append(figures)
                    print(send_line(label, figures))
            figures = await drain(namesrv, args.consume, 32, cpu, f"ceiling_{run}", topic=TOPIC)
            results.setdefault("consume", []).append(figures)
            print(consume_line("consume", figures))
    finally:
        proc.kill()
        await proc.wait()
    return results


async def ceiling_only(args: argparse.Namespace) -> None:
    """Only the SDK-alone runs: a quick check of the client's own send and consume cost."""
    if args.gc_freeze:
        gc.collect()
        gc.freeze()
    ceiling = await sdk_ceiling(args)
    print()
    print(f"=== the SDK alone (instant broker): medians of {args.runs} runs, {args.size}-byte messages ===")
    for label, runs in ceiling.items():
        alone = median([f.tps for f in runs])
        client = median([f.per_message_us(f.client_cpu) for f in runs])
        print(f"{label:<10} {alone:>9.0f} msg/s (client CPU {client:5.1f} us/msg)")


async def bench(args: argparse.Namespace) -> None:
    root = Path(tempfile.mkdtemp(prefix="sdk-bench-"))
    cluster = Cluster(root)
    results: dict[str, list[Figures]] = {}
    latency: list[dict[str, float]] = []
    peer: dict[str, list[float]] = {}
    large = large_batch_label(args)
    why_not = "not needed" if args.skip_redis or args.latency_only else redis_available()
    if why_not is not None:
        print(f"redis comparison skipped: {why_not}")
    redis = RedisPeer() if why_not is None else None
    body = os.urandom(args.size // 2).hex().encode()[: args.size]

    async def against_redis(name: str, measure: Callable[[], float]) -> None:
        # Right after the SDK figure it is compared with: both see the same machine load.
        if redis is not None:
            value = await asyncio.to_thread(measure)
            peer.setdefault(name, []).append(value)
            print(f"Current Time: {now_str()} | redis {name:<15} | {value:9.0f} msg/s")

    try:
        await cluster.start_namesrv()
        broker = await cluster.start_broker(
            "broker-a",
            mappedFileSizeCommitLog=256 * 1024 * 1024,
            maxTransferCountOnMessageInMemory=TUNED_PULL_BATCH,
            maxTransferBytesOnMessageInMemory=4 * 1024 * 1024,
        )
        assert broker.process is not None and broker.process.proc is not None
        cpu = CpuMeter(broker.process.proc.pid)
        async with Admin(cluster.namesrv_addr) as admin:
            await admin.create_topic(TOPIC, QUEUES)
            await admin.create_topic(CONSUME_TOPIC, QUEUES)
        print(
            f"cluster: name server {cluster.namesrv_addr}, broker {broker.addr}; topic {TOPIC} ({QUEUES} queues)"
        )
        if not args.latency_only:
            async with Producer(
                "benchmark_preload", cluster.namesrv_addr, compress_threshold=1 << 30
            ) as loader:
                await preload(loader, args.consume, args.size)
        if args.gc_freeze:
            # What a latency-sensitive service does after start-up: objects alive now (modules,
            # pydantic schemas, ...) leave the collector's generations, so full collections
            # walk only what the workload allocates.
            gc.collect()
            gc.freeze()
            print("gc.freeze() after start-up (--no-gc-freeze to measure without)")
        for run in range(1, args.runs + 1):
            print(f"--- run {run}/{args.runs}")
            # latency first, while the broker has no backlog to write out
            percentiles = await end_to_end(cluster.namesrv_addr, args.rate, args.latency_seconds, str(run))
            latency.append(percentiles)
            print(
                f"Current Time: {now_str()} | e2e@{args.rate}/s | p50 {percentiles['p50']:.3f} ms | "
                f"p90 {percentiles['p90']:.3f} ms | p99 {percentiles['p99']:.3f} ms | max {percentiles['max']:.3f} ms"
            )
            if args.latency_only:
                continue
            async with warmed_producer(f"benchmark_producer_{run}", cluster.namesrv_addr) as p:
                for label, coro in (
                    ("sync-1", lambda: sync_sends(p, args.seconds, 1, args.size, cpu)),
                    ("sync-64", lambda: sync_sends(p, args.seconds, 64, args.size, cpu)),
                    ("batch", lambda: batch_sends(p, args.seconds, args.batch, 8, args.size, cpu)),
                    (large, lambda: batch_sends(p, args.seconds, args.large_batch, 8, args.size, cpu)),
                ):
                    figures = await coro()
                    results.setdefault(label, []).append(figures)
                    print(send_line(label, figures))
                    if label == "sync-1":
                        await against_redis("xadd-1", lambda: redis.xadd_one(args.seconds, body))
                        # Right after both, with its own producer: the polling one.
                        polling_options = ClientOptions(busy_poll=args.busy_poll)
                        async with warmed_producer(
                            f"benchmark_polling_{run}", cluster.namesrv_addr, polling_options
                        ) as polling:
                            figures = await sync_sends(polling, args.seconds, 1, args.size, cpu)
                        results.setdefault("sync-1-poll", []).append(figures)
                        print(send_line("sync-1-poll", figures))
            if redis is not None:
                await against_redis("xadd-pipe", lambda: redis.xadd_pipelined(args.seconds, body))
            for label, pull_batch, batch_size, count in (
                ("consume", 32, 1, 32),
                ("consume+", TUNED_PULL_BATCH, 1, 1000),
                ("consume32", 32, 32, 0),
            ):
                figures = await drain(
                    cluster.namesrv_addr,
                    args.consume,
                    pull_batch,
                    cpu,
                    f"{run}_{pull_batch}_{batch_size}",
                    batch_size,
                )
                results.setdefault(label, []).append(figures)
                print(consume_line(label, figures))
                if redis is not None and count:
                    await against_redis(
                        f"xreadgroup-{count}", functools.partial(redis.xreadgroup, args.consume, body, count)
                    )
    finally:
        await cluster.stop()
        shutil.rmtree(root, ignore_errors=True)
        if redis is not None:
            redis.close()
    ceiling = await sdk_ceiling(args) if args.ceiling and not args.latency_only else {}
    if args.latency_only:
        p99 = median([p["p99"] for p in latency])
        print(
            f"e2e@{args.rate}/s median p99 {p99:.3f} ms over {args.runs} runs (load average {os.getloadavg()[0]:.2f})"
        )
        return
    summarize(results, latency, peer, args)
    if ceiling:
        print()
        print("=== the SDK alone (instant broker): its ceiling, and the share the real broker adds ===")
        for label, runs in ceiling.items():
            ours = median([f.tps for f in results.get(label, [])])
            alone = median([f.tps for f in runs])
            client = median([f.per_message_us(f.client_cpu) for f in runs])
            print(
                f"{label:<10} SDK alone {alone:>9.0f} msg/s (client CPU {client:5.1f} us/msg)   "
                f"with the real broker {ours:>9.0f} msg/s"
            )


def summarize(
    results: dict[str, list[Figures]],
    latency: list[dict[str, float]],
    peer: dict[str, list[float]],
    args: argparse.Namespace,
) -> None:
    def tps(label: str) -> list[float]:
        return [f.tps for f in results[label]]

    def cpu(label: str, attr: str) -> float:
        return median([f.per_message_us(getattr(f, attr)) for f in results[label]])

    print()
    print(
        f"=== medians of {args.runs} runs, {args.size}-byte messages; {os.cpu_count()} CPUs, "
        f"load average now {os.getloadavg()[0]:.2f} (other processes on the machine skew every figure) ==="
    )
    print(machine_summary())
    for label in results:
        rt = median([f.rt_sum / f.messages * 1000 for f in results[label] if f.messages and f.rt_sum])
        line = f"{label:<11} {median(tps(label)):>10.0f} msg/s"
        if rt:
            line += f"   avg RT {rt:7.3f} ms"
        line += f"   CPU/msg: client {cpu(label, 'client_cpu'):5.1f} us, broker {cpu(label, 'broker_cpu'):5.1f} us"
        print(line)
    p99 = median([p["p99"] for p in latency])
    p50 = median([p["p50"] for p in latency])
    print(
        f"e2e@{args.rate}/s  p50 {p50:.3f} ms   p99 {p99:.3f} ms   (per run p99: "
        + ", ".join(f"{p['p99']:.2f}" for p in latency)
        + ")"
    )
    if peer:
        print()
        for name, values in peer.items():
            print(f"redis {name:<16} {median(values):>10.0f} msg/s")
        print()
        print(
            "=== against the targets (median of per-run ratios; each run measures both sides back to back) ==="
        )
        best_send = [max(runs) for runs in zip(tps("sync-64"), tps("batch"), tps(large_batch_label(args)))]
        rows = [
            ("sync one-at-a-time vs XADD one-at-a-time", tps("sync-1"), peer["xadd-1"], 1.0),
            (
                f"the same, busy_poll={args.busy_poll * 1e6:g} us, vs XADD one-at-a-time",
                tps("sync-1-poll"),
                peer["xadd-1"],
                1.0,
            ),
            ("best pipelined/batched send vs pipelined XADD", best_send, peer["xadd-pipe"], 3.0),
            ("push consume (defaults) vs XREADGROUP COUNT 32", tps("consume"), peer["xreadgroup-32"], 3.0),
            ("push consume (tuned) vs XREADGROUP COUNT 1000", tps("consume+"), peer["xreadgroup-1000"], 3.0),
        ]
        for name, ours, theirs, target in rows:
            ratio = median([a / b for a, b in zip(ours, theirs) if b])
            verdict = "met" if ratio >= target else "NOT met"
            print(
                f"{name:<50} {median(ours):>9.0f} / {median(theirs):>9.0f}: {ratio:5.2f}x "
                f"(target {target:g}x: {verdict})"
            )
    verdict = "met" if p99 <= 5 else "NOT met"
    print(f"{'e2e p99 at ' + str(args.rate) + ' msg/s':<50} {p99:9.3f} ms (target <= 5 ms: {verdict})")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("-s", "--size", type=int, default=128, help="message body size (default 128)")
    parser.add_argument("--seconds", type=float, default=5.0, help="duration of each send scenario")
    parser.add_argument("--batch", type=int, default=64, help="messages per batch (default 64)")
    parser.add_argument(
        "--large-batch", type=int, default=1000, help="messages per batch of the second batch scenario"
    )
    parser.add_argument("--consume", type=int, default=200_000, help="messages each drain reads at least")
    parser.add_argument("--rate", type=int, default=5000, help="end-to-end latency send rate (msg/s)")
    parser.add_argument("--latency-seconds", type=float, default=5.0)
    parser.add_argument(
        "--busy-poll",
        type=float,
        default=0.0001,
        help="ClientOptions.busy_poll of the sync-1-poll producer, in seconds (default 0.0001)",
    )
    parser.add_argument("--skip-redis", action="store_true")
    parser.add_argument("--no-gc-freeze", dest="gc_freeze", action="store_false")
    parser.add_argument("--latency-only", action="store_true", help="only the end-to-end latency runs")
    parser.add_argument(
        "--no-ceiling", dest="ceiling", action="store_false", help="skip the SDK-alone runs (instant broker)"
    )
    parser.add_argument(
        "--ceiling-only", action="store_true", help="only the SDK-alone runs (instant broker, no cluster)"
    )
    args = parser.parse_args()
    run_loop(ceiling_only(args) if args.ceiling_only else bench(args))


if __name__ == "__main__":
    main()
