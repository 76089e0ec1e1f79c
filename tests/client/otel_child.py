"""The OpenTelemetry scenario of ``test_telemetry.py``, run in a child process so that the
global tracer and meter providers it installs never reach the other tests.

It configures the OpenTelemetry SDK with in-memory exporters, sends through a producer inside
an application span (one message, and a batch), has the official C++ client send a message
that carries no context, consumes everything with a push consumer (whose listener opens a
span of its own) and the lite-pull consumer's ``async for``, and prints one JSON document
with every finished span and the metric points.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from aiorocketmq import (
    ConsumeFrom,
    ConsumeResult,
    LitePullConsumer,
    Message,
    MessageExt,
    Producer,
    PushConsumer,
)
from tests.cpp_client import shutdown_safely

EXPORTER = InMemorySpanExporter()
READER = InMemoryMetricReader()


def configure() -> None:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
    trace.set_tracer_provider(provider)
    metrics.set_meter_provider(MeterProvider(metric_readers=[READER]))


def send_with_cpp_client(namesrv: str, topic: str) -> str:
    from rocketmq.client import Message as CppMessage
    from rocketmq.client import Producer as CppProducer

    producer = CppProducer("otel_cpp_pg")
    producer.set_namesrv_addr(namesrv)
    producer.start()
    started_at = time.monotonic()
    try:
        msg = CppMessage(topic)
        msg.set_body("from-cpp")
        msg.set_keys("cpp-key")
        return str(producer.send_sync(msg).msg_id)
    finally:
        shutdown_safely(producer, started_at)


def span_json(span: ReadableSpan) -> dict[str, Any]:
    ctx = span.get_span_context()
    assert ctx is not None
    return {
        "name": span.name,
        "kind": span.kind.name,
        "trace_id": format(ctx.trace_id, "032x"),
        "span_id": format(ctx.span_id, "016x"),
        "parent": format(span.parent.span_id, "016x") if span.parent else None,
        "links": [
            [format(link.context.trace_id, "032x"), format(link.context.span_id, "016x")]
            for link in span.links
        ],
        "attributes": dict(span.attributes or {}),
        "status": span.status.status_code.name,
    }


def metric_points() -> dict[str, float]:
    points: dict[str, float] = {}
    data = READER.get_metrics_data()
    for resource in data.resource_metrics if data else []:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    value = getattr(point, "value", None)
                    if value is None:
                        value = point.count  # type: ignore[union-attr]
                    points[metric.name] = points.get(metric.name, 0) + value
    return points


async def scenario(namesrv: str, topic: str) -> dict[str, Any]:
    tracer = trace.get_tracer("app")
    sent: dict[str, str] = {}
    async with Producer("otel_pg", namesrv=namesrv) as producer:
        with tracer.start_as_current_span("app-request"):
            result = await producer.send(Message(topic, b"one", tags="a", keys=["k-one"]))
            sent[result.msg_id] = "one"
            batch = await producer.send_batch([Message(topic, b"two"), Message(topic, b"three")])
            for msg_id, body in zip(batch.msg_id.split(","), ("two", "three"), strict=True):
                sent[msg_id] = body
    cpp_id = await asyncio.to_thread(send_with_cpp_client, namesrv, topic)

    pushed: dict[str, dict[str, str]] = {}
    done = asyncio.Event()
    push = PushConsumer("otel_push", namesrv=namesrv, consume_from=ConsumeFrom.FIRST_OFFSET)
    push.subscribe(topic)

    @push.listener
    async def handle(messages: list[MessageExt]) -> ConsumeResult:
        for msg in messages:
            with tracer.start_as_current_span("app-handle"):
                pushed[msg.msg_id] = dict(msg.properties)
        if len(pushed) >= 4:
            done.set()
        return ConsumeResult.SUCCESS

    async with push:
        await asyncio.wait_for(done.wait(), 60)

    pulled: list[str] = []
    async with LitePullConsumer("otel_lite", namesrv=namesrv, consume_from=ConsumeFrom.FIRST_OFFSET) as lite:
        lite.subscribe(topic)
        async with asyncio.timeout(60):
            async for msg in lite:
                pulled.append(msg.msg_id)
                if len(pulled) == 4:
                    break
    return {
        "sent": sent,
        "cpp_id": cpp_id,
        "pushed": pushed,
        "pulled": pulled,
        "spans": [span_json(span) for span in EXPORTER.get_finished_spans()],
        "metrics": metric_points(),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--namesrv", required=True)
    parser.add_argument("--topic", required=True)
    args = parser.parse_args()
    configure()
    outcome = asyncio.run(scenario(args.namesrv, args.topic))
    json.dump(outcome, sys.stdout)


if __name__ == "__main__":
    main()
