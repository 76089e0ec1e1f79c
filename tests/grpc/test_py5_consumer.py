"""The official 5.x Python client's SimpleConsumer and PushConsumer against our broker's gRPC
endpoint (POP consumption on our store), fed by our 4.x-protocol SDK and by the 5.x
Producer: receive, ack, change of invisible duration, redelivery with the attempt counted,
FIFO groups in order."""

from __future__ import annotations

import asyncio
import itertools
import os
from collections.abc import Awaitable
from pathlib import Path

import pytest

from aiorocketmq.client import Producer, PullClient
from aiorocketmq.client.admin import Admin
from aiorocketmq.protocol.body import SubscriptionGroupConfig
from aiorocketmq.protocol.errors import MQError
from aiorocketmq.protocol.message import Message
from tests.support import wait_until

from .conftest import Grpc5

pytestmark = pytest.mark.asyncio(loop_scope="package")

_names = itertools.count(1)


def unique(prefix: str) -> str:
    return f"{prefix}_{os.getpid()}_{next(_names)}"


async def send_4x(grpc5: Grpc5, topic: str, messages: list[Message]) -> list[str]:
    """Send with our 4.x SDK (remoting); the unique message ids."""
    ids = []
    async with Producer(unique("pg"), grpc5.cluster.namesrv_addr) as producer:
        for msg in messages:
            result = await producer.send(msg)
            ids.append(result.msg_id)
    return ids


async def create(grpc5: Grpc5, topic: str, queues: int = 4, *, orderly_group: str | None = None) -> None:
    async with Admin(grpc5.cluster.namesrv_addr) as admin:
        await admin.create_topic(topic, queues)
        if orderly_group is not None:
            await admin.update_subscription_group(
                SubscriptionGroupConfig(group_name=orderly_group, consume_message_orderly=True)
            )


async def test_simple_consumer_receives_4x_messages_intact_and_acks_them(grpc5: Grpc5) -> None:
    topic, group = unique("Simple"), unique("cg")
    await create(grpc5, topic)
    # The first receive of a new group starts at the queues' ends (the proxy's init mode):
    # let it register before anything is sent.
    first = await grpc5.run("simple", group=group, topic=topic, count=1, wait=2, **{"await": 1})
    assert first["messages"] == []
    ids = await send_4x(
        grpc5,
        topic,
        [
            Message(
                topic,
                f"m{i}",
                tags="TagA" if i % 2 else "TagB",
                keys=[f"key{i}", "common"],
                properties={"n": str(i)},
            )
            for i in range(6)
        ],
    )
    got = await grpc5.run("simple", group=group, topic=topic, count=6, **{"await": 5})
    received = {m["body"]: m for m in got["messages"]}
    assert set(received) == {f"m{i}" for i in range(6)}
    for i in range(6):
        msg = received[f"m{i}"]
        assert msg["tag"] == ("TagA" if i % 2 else "TagB")
        assert msg["keys"] == sorted([f"key{i}", "common"])
        assert msg["properties"] == {"n": str(i)}
        assert msg["message_id"] == ids[i]
        assert msg["attempt"] == 1
        assert not msg["corrupted"]
    # All acked: nothing comes back, even after the invisible time would have passed.
    again = await grpc5.run("simple", group=group, topic=topic, count=1, wait=3, **{"await": 1})
    assert again["messages"] == []


async def test_a_tag_filter_and_a_changed_invisible_duration(grpc5: Grpc5) -> None:
    topic, group = unique("Change"), unique("cg")
    await create(grpc5, topic, 2)
    await send_4x(grpc5, topic, [Message(topic, f"t{i}", tags="keep" if i < 3 else "skip") for i in range(6)])
    # Each message is received, made invisible for 1 s instead of 30, and comes back as
    # its second delivery attempt, which is acked.
    got = await grpc5.run(
        "simple",
        group=group,
        topic=topic,
        count=3,
        filter="keep",
        invisible=30,
        change=1,
        wait=45,
        **{"await": 5},
    )
    assert sorted(m["body"] for m in got["changed"]) == ["t0", "t1", "t2"]
    assert sorted(m["body"] for m in got["messages"]) == ["t0", "t1", "t2"]
    assert {m["attempt"] for m in got["messages"]} == {2}
    assert {m["tag"] for m in got["messages"]} == {"keep"}


async def test_push_consumer_gets_5x_producer_messages_and_redelivery_after_failure(grpc5: Grpc5) -> None:
    topic, group = unique("Push"), unique("cg")
    await create(grpc5, topic)
    sent = await grpc5.run(
        "produce",
        messages=[
            {"topic": topic, "body": f"p{i}", "tag": "T", "keys": [f"k{i}"], "properties": {"i": str(i)}}
            for i in range(4)
        ],
    )
    assert sent["errors"] == []
    # The listener fails each first delivery; the consumer NACKs (a changed invisible
    # duration of its first backoff step, 1 s) and gets each message again as attempt 2.
    got = await grpc5.run("push", group=group, topic=topic, count=8, fail_first=True, wait=60)
    by_attempt: dict[int, list[str]] = {}
    for msg in got["messages"]:
        by_attempt.setdefault(msg["attempt"], []).append(msg["body"])
        assert msg["properties"] == {"i": msg["body"][1:]}
        assert msg["keys"] == [f"k{msg['body'][1:]}"]
    assert sorted(by_attempt[1]) == [f"p{i}" for i in range(4)]
    assert sorted(by_attempt[2]) == [f"p{i}" for i in range(4)]


async def test_fifo_group_receives_each_message_group_in_order(grpc5: Grpc5) -> None:
    topic, group = unique("Fifo"), unique("fifo")
    await create(grpc5, topic, orderly_group=group)
    messages = [{"topic": topic, "body": f"{g}-{i}", "group": g} for i in range(5) for g in ("ga", "gb")]
    sent = await grpc5.run("produce", messages=messages)
    assert sent["errors"] == []
    got = await grpc5.run("push", group=group, topic=topic, count=10, wait=60)
    bodies = [m["body"] for m in got["messages"]]
    assert sorted(bodies) == sorted(m["body"] for m in messages)
    for g in ("ga", "gb"):
        assert [b for b in bodies if b.startswith(g)] == [f"{g}-{i}" for i in range(5)]
    assert {m["group"] for m in got["messages"]} == {"ga", "gb"}


async def test_messages_failing_every_attempt_end_in_the_dead_letter_queue(
    grpc5: Grpc5, tmp_path: Path
) -> None:
    """retryMaxTimes=1 (two attempts): a concurrent group's message is dead-lettered by the
    broker after its second failure; a FIFO group's by the client itself
    (ForwardMessageToDeadLetterQueue) after its local retries."""
    topic = unique("Dlq")
    plain, fifo = unique("cg"), unique("fifo")
    await create(grpc5, topic, 1)
    async with Admin(grpc5.cluster.namesrv_addr) as admin:
        await admin.update_subscription_group(SubscriptionGroupConfig(group_name=plain, retry_max_times=1))
        await admin.update_subscription_group(
            SubscriptionGroupConfig(group_name=fifo, retry_max_times=1, consume_message_orderly=True)
        )
    sent = await grpc5.run("produce", messages=[{"topic": topic, "body": "doomed", "group": "g1"}])
    assert sent["errors"] == []
    stop = tmp_path / "stop"
    consumers = [
        asyncio.ensure_future(
            grpc5.run(
                "push", group=group, topic=topic, count=1000, fail_always=True, wait=60, stop_file=str(stop)
            )
        )
        for group in (plain, fifo)
    ]
    try:
        async with PullClient(unique("reader"), namesrv=grpc5.cluster.namesrv_addr) as reader:

            async def dead_lettered(group: str) -> list[str]:
                try:
                    queues = await reader.queues(f"%DLQ%{group}")
                except MQError:
                    return []  # not created yet
                bodies = []
                for queue in queues:
                    async for msg in reader.read(queue, 0, await reader.max_offset(queue)):
                        bodies.append(msg.body.decode())
                return bodies

            for group in (plain, fifo):
                await wait_until(lambda g=group: _has(dead_lettered(g), "doomed"), timeout=50)
    finally:
        stop.touch()
        results = await asyncio.gather(*consumers)
    # Both attempts reached the listener first: redelivered by the broker (attempt 2) for the
    # concurrent group, retried in the client (the same delivery) for the FIFO one.
    assert sorted(m["attempt"] for m in results[0]["messages"])[:2] == [1, 2]
    assert len(results[1]["messages"]) >= 2


async def _has(bodies: Awaitable[list[str]], body: str) -> bool:
    return body in await bodies
