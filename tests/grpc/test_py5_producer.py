"""The official 5.x Python client's Producer against our broker's gRPC endpoint, read back
with our 4.x-protocol SDK (mixed generations on one store): normal, FIFO, timer and
transactional messages with bodies, tags, keys and properties intact."""

from __future__ import annotations

import asyncio
import itertools
import os
import time
from typing import Any

import pytest

from aiorocketmq.client import PullClient
from aiorocketmq.client.admin import Admin
from aiorocketmq.protocol.message import MessageExt

from .conftest import Grpc5

pytestmark = pytest.mark.asyncio(loop_scope="package")

_names = itertools.count(1)


def unique(prefix: str) -> str:
    return f"{prefix}_{os.getpid()}_{next(_names)}"


async def read_all(grpc5: Grpc5, topic: str) -> list[MessageExt]:
    """Every message stored in ``topic``, queue by queue, in queue order (a 4.x pull)."""
    got: list[MessageExt] = []
    async with PullClient(unique("reader"), namesrv=grpc5.cluster.namesrv_addr) as client:
        for queue in sorted(await client.queues(topic), key=lambda q: q.queue_id):
            end = await client.max_offset(queue)
            async for msg in client.read(queue, 0, end):
                got.append(msg)
    return got


async def create_topic(grpc5: Grpc5, topic: str, queues: int = 4) -> None:
    async with Admin(grpc5.cluster.namesrv_addr) as admin:
        await admin.create_topic(topic, queues)


async def test_normal_fifo_and_timer_messages_reach_a_4x_consumer_intact(grpc5: Grpc5) -> None:
    topic = unique("Py5Send")
    await create_topic(grpc5, topic)
    deliver_at = int(time.time() * 1000) + 5000
    messages = [
        {
            "topic": topic,
            "body": "plain",
            "tag": "TagA",
            "keys": ["k1", "k2"],
            "properties": {"color": "red"},
        },
        *({"topic": topic, "body": f"fifo-{i}", "group": "order-7", "tag": "F"} for i in range(6)),
        {"topic": topic, "body": "later", "delivery_ms": deliver_at},
    ]
    result = await grpc5.run("produce", messages=messages)
    assert result["errors"] == []
    assert len(result["receipts"]) == len(messages)
    assert all(r["message_id"] for r in result["receipts"])

    # The timer message is parked until its time (whole seconds: what the client sends).
    deliver_ms = deliver_at // 1000 * 1000
    stored = await read_all(grpc5, topic)
    if time.time() * 1000 < deliver_ms:
        assert "later" not in {m.body.decode() for m in stored}
    while "later" not in {m.body.decode() for m in stored}:
        assert time.time() * 1000 < deliver_ms + 10_000, "the timer message was never released"
        await asyncio.sleep(0.1)
        stored = await read_all(grpc5, topic)
    by_body = {m.body.decode(): m for m in stored}
    assert set(by_body) == {m["body"] for m in messages}
    plain = by_body["plain"]
    assert plain.tags == "TagA"
    assert sorted(plain.keys) == ["k1", "k2"]
    assert plain.properties["color"] == "red"
    # The 5.x client's message id is the stored unique key: both generations see one id.
    assert plain.properties["UNIQ_KEY"] == result["receipts"][0]["message_id"]
    # One message group, one queue, in send order.
    fifo = [m for m in stored if m.body.startswith(b"fifo-")]
    assert len({m.queue_id for m in fifo}) == 1
    assert [m.body for m in fifo] == [f"fifo-{i}".encode() for i in range(6)]
    assert {m.properties["__SHARDINGKEY"] for m in fifo} == {"order-7"}
    # The delivery time travels as TIMER_DELIVER_MS, and the message is released no earlier.
    later = by_body["later"]
    assert later.properties["TIMER_DELIVER_MS"] == str(deliver_ms)
    assert later.store_timestamp >= deliver_ms


async def check_recall(grpc5: Grpc5, topic: str, read: Any) -> None:
    """Two timer messages sent with the official client; one recalled with its receipt's recall
    handle (RecallMessage) before its time: only the other is ever delivered."""
    deliver_at = int(time.time() * 1000) + 4000
    messages = [{"topic": topic, "body": body, "delivery_ms": deliver_at} for body in ("keep", "drop")]
    result = await grpc5.run("recall", topic=topic, messages=messages, recall=["drop"])
    assert all(result["handles"].values()), result
    first, _, made_up = result["outcomes"]
    assert first["body"] == "drop" and first.get("message_id"), result
    assert "error" in made_up, result
    deliver_ms = deliver_at // 1000 * 1000
    stored = await read(topic)
    while "keep" not in stored:
        assert time.time() * 1000 < deliver_ms + 10_000, "the timer message was never released"
        await asyncio.sleep(0.1)
        stored = await read(topic)
    assert stored == ["keep"], stored


async def test_a_recalled_timer_message_is_never_delivered(grpc5: Grpc5) -> None:
    topic = unique("Py5Recall")
    await create_topic(grpc5, topic)

    async def read(name: str) -> list[str]:
        return [m.body.decode() for m in await read_all(grpc5, name)]

    await check_recall(grpc5, topic, read)


async def test_transactions_commit_rollback_and_recovery_by_check(grpc5: Grpc5) -> None:
    topic = unique("Py5Tx")
    await create_topic(grpc5, topic)
    result = await grpc5.run(
        "transaction", topic=topic, commit=["c1", "c2"], rollback=["r1"], orphan=["o1"], wait=40
    )
    # The broker asked the producer about the one left open, on its telemetry stream.
    assert result["checked"][:1] == ["o1"]
    assert all(result["transaction_ids"].values())
    stored = sorted(m.body.decode() for m in await read_all(grpc5, topic))
    assert stored == ["c1", "c2", "o1"]
