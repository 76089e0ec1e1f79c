"""OpenTelemetry across a real broker: the producer's send span travels in the message's
properties and the consumers' process spans link to it; a C++-client message without context
is consumed without error; send and consume metrics count what happened. The scenario runs in
a child process (``otel_child.py``) so its global providers stay out of the other tests."""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

import pytest
import pytest_asyncio

from aiorocketmq import Admin
from aiorocketmq.client import telemetry
from tests.cluster import Cluster
from tests.support import ROOT

from .conftest import unique

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def outcome(cluster: Cluster) -> dict[str, Any]:
    topic = unique("Traced")
    async with Admin(cluster.namesrv_addr) as admin:
        await admin.create_topic(topic, 1)
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.client.otel_child",
        "--namesrv",
        cluster.namesrv_addr,
        "--topic",
        topic,
        cwd=str(ROOT),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 150)
    assert proc.returncode == 0, err.decode()
    result: dict[str, Any] = json.loads(out)
    result["topic"] = topic
    return result


def spans(outcome: dict[str, Any], name: str) -> list[dict[str, Any]]:
    return [span for span in outcome["spans"] if span["name"] == name]


async def test_send_span_is_carried_in_properties(outcome: dict[str, Any]) -> None:
    topic = outcome["topic"]
    (app,) = spans(outcome, "app-request")
    sends = spans(outcome, f"send {topic}")
    assert len(sends) == 2  # the single send and the batch
    for send in sends:
        assert send["kind"] == "PRODUCER"
        assert send["trace_id"] == app["trace_id"] and send["parent"] == app["span_id"]
        attrs = send["attributes"]
        assert attrs["messaging.system"] == "rocketmq"
        assert attrs["messaging.destination.name"] == topic
        assert attrs["messaging.operation.type"] == "send"
        assert attrs["messaging.rocketmq.client_group"] == "otel_pg"
    single = next(s for s in sends if "messaging.batch.message_count" not in s["attributes"])
    batch = next(s for s in sends if "messaging.batch.message_count" in s["attributes"])
    assert batch["attributes"]["messaging.batch.message_count"] == 2
    assert single["attributes"]["messaging.rocketmq.message.tag"] == "a"
    assert list(single["attributes"]["messaging.rocketmq.message.keys"]) == ["k-one"]
    # What the consumer received carries the send span as TRACE_CONTEXT (W3C traceparent).
    by_body = {body: msg_id for msg_id, body in outcome["sent"].items()}
    one = outcome["pushed"][by_body["one"]]
    assert one[telemetry.TRACE_CONTEXT].startswith(f"00-{single['trace_id']}-{single['span_id']}-")
    assert single["attributes"]["messaging.message.id"] == by_body["one"]
    for body in ("two", "three"):
        assert outcome["pushed"][by_body[body]][telemetry.TRACE_CONTEXT].split("-")[2] == batch["span_id"]


async def test_process_spans_link_to_the_producer(outcome: dict[str, Any]) -> None:
    topic = outcome["topic"]
    sends = {s["span_id"]: s for s in spans(outcome, f"send {topic}")}
    processes = spans(outcome, f"process {topic}")
    push = [p for p in processes if p["attributes"]["messaging.consumer.group.name"] == "otel_push"]
    lite = [p for p in processes if p["attributes"]["messaging.consumer.group.name"] == "otel_lite"]
    assert push and lite
    for span in processes:
        assert span["kind"] == "CONSUMER"
        assert span["attributes"]["messaging.operation.type"] == "process"
        assert span["status"] == "UNSET"
    linked_push = {link[1] for p in push for link in p["links"]}
    assert linked_push == set(sends)
    # The lite-pull consumer wraps each message it yields in a span of its own.
    assert len(lite) == 4
    assert sorted(span["attributes"]["messaging.message.id"] for span in lite) == sorted(outcome["pulled"])
    assert {link[1] for p in lite for link in p["links"]} == set(sends)
    # The listener's own span is a child of the process span that was current around it.
    handles = spans(outcome, "app-handle")
    assert len(handles) == 4
    push_ids = {p["span_id"] for p in push}
    assert all(h["parent"] in push_ids for h in handles)


async def test_message_without_context_is_consumed(outcome: dict[str, Any]) -> None:
    cpp_id = outcome["cpp_id"]
    assert cpp_id in outcome["pushed"] and cpp_id in outcome["pulled"]
    assert telemetry.TRACE_CONTEXT not in outcome["pushed"][cpp_id]
    cpp_spans = [
        s
        for s in spans(outcome, f"process {outcome['topic']}")
        if cpp_id == s["attributes"].get("messaging.message.id")
    ]
    # one around the lite-pull step; the push listener's batch span names it when it came alone
    lite_span = next(s for s in cpp_spans if s["attributes"]["messaging.consumer.group.name"] == "otel_lite")
    assert lite_span["links"] == [] and lite_span["status"] == "UNSET"


async def test_metrics_count_sends_and_consumption(outcome: dict[str, Any]) -> None:
    points = outcome["metrics"]
    assert points["messaging.client.sent.messages"] == 3
    assert points["messaging.client.operation.duration"] == 2  # two send operations
    assert points["messaging.client.consumed.messages"] == 8  # 4 pushed + 4 pulled
    assert points["messaging.process.duration"] >= 5


async def test_off_without_a_configured_provider() -> None:
    """In this process no provider is configured: telemetry stays off and sends carry no
    context (the cost is one check per operation)."""
    assert telemetry.active() is False
