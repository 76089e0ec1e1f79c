"""What the SDK's idioms cost: ``async for`` against ``poll()``, and OpenTelemetry absent,
installed but unconfigured, and recording with a real tracer.

Starts a real name server and broker (child processes), preloads ``--messages`` 128-byte
messages, then over ``--runs`` rounds (the order alternating):

* **iterate**: a lite pull consumer (new group, from the first offset) drains the topic with
  ``poll()`` and with ``async for``: messages per second, and the ratio (target ≥ 0.95x);
* **otel**: a child process sends ``--sends`` messages (16 coroutines, synchronous sends) and
  drains them with a push consumer, in three modes: ``absent`` (``opentelemetry`` cannot be
  imported), ``idle`` (installed, no provider configured; target ≥ 0.97x of absent) and
  ``tracer`` (the SDK's TracerProvider with a BatchSpanProcessor and a discarding exporter,
  plus a MeterProvider; reported).

Each figure is the median of the rounds. Run: ``.venv/bin/python -m bench.idioms_bench``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from aiorocketmq import Admin, ConsumeFrom, LitePullConsumer, Message, Producer
from aiorocketmq.protocol.loop import run as run_loop
from bench.machine import summary as machine_summary
from tests.cluster import Cluster

ROOT = Path(__file__).resolve().parent.parent
TOPIC = "BenchmarkIdioms"
QUEUES = 8

_BLOCK_OTEL = """
import sys
class _NoOtel:
    def find_spec(self, name, path=None, target=None):
        if name == "opentelemetry" or name.startswith("opentelemetry."):
            raise ImportError("opentelemetry is not installed (blocked by the benchmark)")
        return None
sys.meta_path.insert(0, _NoOtel())
"""

_TRACER = """
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

class _Discard(SpanExporter):
    def export(self, spans):
        return SpanExportResult.SUCCESS

provider = TracerProvider()
provider.add_span_processor(BatchSpanProcessor(_Discard()))
trace.set_tracer_provider(provider)
metrics.set_meter_provider(MeterProvider(metric_readers=[InMemoryMetricReader()]))
"""


async def preload(namesrv: str, topic: str, count: int) -> None:
    async with Admin(namesrv) as admin:
        await admin.create_topic(topic, QUEUES)
    async with Producer("bench_idioms_pg", namesrv) as producer:
        body = b"x" * 128
        for start in range(0, count, 256):
            await producer.send_batch([Message(topic, body) for _ in range(min(256, count - start))])


async def drain(namesrv: str, topic: str, count: int, group: str, mode: str) -> tuple[float, float]:
    """Seconds (wall clock, and this process's CPU) to hand ``count`` messages to the
    application, by ``poll()`` or ``async for``."""
    lite = LitePullConsumer(group, namesrv, consume_from=ConsumeFrom.FIRST_OFFSET, pull_batch_size=32)
    lite.subscribe(topic)
    got = 0
    async with lite:
        start = time.perf_counter()
        cpu = time.process_time()
        if mode == "poll":
            while got < count:
                got += len(await lite.poll(timeout=5))
        else:
            async for _msg in lite:
                got += 1
                if got == count:
                    break
        return time.perf_counter() - start, time.process_time() - cpu


def otel_child(namesrv: str, topic: str, sends: int, mode: str) -> dict[str, float]:
    prelude = {"absent": _BLOCK_OTEL, "idle": "", "tracer": _TRACER}[mode]
    code = (
        prelude
        + f"\nfrom bench.idioms_bench import otel_scenario\notel_scenario({namesrv!r}, {topic!r}, {sends})\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, capture_output=True, text=True)
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def otel_scenario(namesrv: str, topic: str, sends: int) -> None:
    """Runs in the child: send ``sends`` messages with 16 coroutines, then drain them with a
    push consumer; prints send and consume messages per second as JSON."""
    from aiorocketmq import ConsumeResult, MessageExt, PushConsumer
    from aiorocketmq.client import telemetry

    async def scenario() -> dict[str, float]:
        body = b"x" * 128
        async with Producer("bench_otel_pg", namesrv) as producer:
            await producer.send(Message(topic, body))  # route and connection warm
            left = sends

            async def worker() -> None:
                nonlocal left
                while left > 0:
                    left -= 1
                    await producer.send(Message(topic, body))

            start = time.perf_counter()
            await asyncio.gather(*(worker() for _ in range(16)))
            send_seconds = time.perf_counter() - start
        done = asyncio.Event()
        seen = 0
        consumer = PushConsumer(
            f"bench_otel_{time.time_ns()}", namesrv, consume_from=ConsumeFrom.FIRST_OFFSET
        )
        consumer.subscribe(topic)

        @consumer.listener
        async def handle(messages: list[MessageExt]) -> ConsumeResult:
            nonlocal seen
            seen += len(messages)
            if seen >= sends:
                done.set()
            return ConsumeResult.SUCCESS

        start = time.perf_counter()
        async with consumer:
            await asyncio.wait_for(done.wait(), 300)
        consume_seconds = time.perf_counter() - start
        return {
            "send": sends / send_seconds,
            "consume": sends / consume_seconds,
            "telemetry": float(telemetry.active()),
        }

    print(json.dumps(run_loop(scenario())))


def ratio_line(label: str, ours: list[float], base: list[float], target: float | None) -> str:
    ratios = [a / b for a, b in zip(ours, base, strict=True)]
    med = statistics.median(ratios)
    verdict = (
        "" if target is None else (" meets" if med >= target else " MISSES") + f" the {target:g}x target"
    )
    return f"{label:<44} {statistics.median(ours):>10,.0f}/s vs {statistics.median(base):>10,.0f}/s = {med:.3f}x{verdict}"


async def bench(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="idioms-bench-") as tmp:
        cluster = Cluster(Path(tmp))
        await cluster.start_namesrv()
        try:
            await cluster.start_broker("broker-a", maxTransferCountOnMessageInMemory=256)
            namesrv = cluster.namesrv_addr
            await preload(namesrv, TOPIC, args.messages)
            polled: list[float] = []
            iterated: list[float] = []
            cpu_per_msg: dict[str, list[float]] = {"poll": [], "iterate": []}
            for run in range(args.runs):
                order = ("poll", "iterate") if run % 2 == 0 else ("iterate", "poll")
                for mode in order:
                    seconds, cpu = await drain(
                        namesrv, TOPIC, args.messages, f"bench_iter_{run}_{mode}", mode
                    )
                    (polled if mode == "poll" else iterated).append(args.messages / seconds)
                    cpu_per_msg[mode].append(cpu / args.messages * 1e6)
                print(
                    f"run {run + 1}: poll {polled[-1]:,.0f}/s ({cpu_per_msg['poll'][-1]:.2f} µs CPU/msg), "
                    f"async for {iterated[-1]:,.0f}/s ({cpu_per_msg['iterate'][-1]:.2f} µs CPU/msg)",
                    flush=True,
                )

            figures: dict[str, list[dict[str, float]]] = {"absent": [], "idle": [], "tracer": []}
            modes = list(figures)
            for run in range(args.runs):
                for mode in modes[run % 3 :] + modes[: run % 3]:
                    topic = f"BenchmarkOtel_{run}_{mode}"
                    async with Admin(namesrv) as admin:
                        await admin.create_topic(topic, QUEUES)
                    result = await asyncio.to_thread(otel_child, namesrv, topic, args.sends, mode)
                    assert result["telemetry"] == (1.0 if mode == "tracer" else 0.0), (mode, result)
                    figures[mode].append(result)
                print(
                    f"run {run + 1}: "
                    + ", ".join(
                        f"{m} send {figures[m][-1]['send']:,.0f}/s consume {figures[m][-1]['consume']:,.0f}/s"
                        for m in modes
                    ),
                    flush=True,
                )
        finally:
            await cluster.stop()

    def series(mode: str, key: str) -> list[float]:
        return [f[key] for f in figures[mode]]

    print()
    print(
        f"medians of {args.runs} runs, {args.messages:,} messages to iterate, {args.sends:,} sends per otel run"
    )
    print(ratio_line("lite pull: async for vs poll()", iterated, polled, 0.95))
    cpu_ratio = statistics.median(
        p / i for p, i in zip(cpu_per_msg["poll"], cpu_per_msg["iterate"], strict=True)
    )
    print(
        f"{'  by consumer CPU per message (poll/async for)':<44} "
        f"{statistics.median(cpu_per_msg['iterate']):.2f} µs vs {statistics.median(cpu_per_msg['poll']):.2f} µs = {cpu_ratio:.3f}x"
    )
    print(
        ratio_line(
            "send: otel installed, no provider vs absent",
            series("idle", "send"),
            series("absent", "send"),
            0.97,
        )
    )
    print(
        ratio_line(
            "consume: otel installed, no provider vs absent",
            series("idle", "consume"),
            series("absent", "consume"),
            0.97,
        )
    )
    print(
        ratio_line(
            "send: tracer + batch processor vs absent",
            series("tracer", "send"),
            series("absent", "send"),
            None,
        )
    )
    print(
        ratio_line(
            "consume: tracer + batch processor vs absent",
            series("tracer", "consume"),
            series("absent", "consume"),
            None,
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.idioms_bench", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--messages", type=int, default=100_000, help="messages drained per iterate run")
    parser.add_argument("--sends", type=int, default=20_000, help="messages sent and consumed per otel run")
    args = parser.parse_args()
    print(machine_summary(), flush=True)
    run_loop(bench(args))


if __name__ == "__main__":
    main()
