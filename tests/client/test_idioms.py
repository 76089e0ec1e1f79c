"""The SDK's Python idioms against a real name server and broker: ``async for`` over a lite
pull consumer (single messages and batches, ending on shutdown, ``break`` losing nothing) and
JSON / pydantic payloads that travel as ordinary messages."""

from __future__ import annotations

import asyncio
import datetime as dt

import pydantic
import pytest

from aiorocketmq import Admin, ConsumeFrom, LitePullConsumer, Message, MessageExt, Producer
from aiorocketmq.protocol.message import JSON_CONTENT_TYPE, PropertyKey
from tests.cluster import Cluster

from .conftest import unique
from .test_lite_pull import fill

pytestmark = pytest.mark.asyncio(loop_scope="module")


async def test_async_for_yields_each_message_once_and_ends_on_shutdown(
    cluster: Cluster, admin: Admin
) -> None:
    topic = unique("Iter")
    await admin.create_topic(topic, 2)
    await fill(cluster, topic, 30, queues=2)
    # A poll timeout far longer than the test: only the shutdown can end the loop in time.
    lite = LitePullConsumer(
        unique("lg"), cluster.namesrv_addr, consume_from=ConsumeFrom.FIRST_OFFSET, poll_timeout=120
    )
    lite.subscribe(topic)
    got: list[MessageExt] = []
    all_in = asyncio.Event()

    async def iterate() -> None:
        async for msg in lite:
            got.append(msg)
            if len(got) == 30:
                all_in.set()

    await lite.start()
    try:
        task = asyncio.ensure_future(iterate())
        await asyncio.wait_for(all_in.wait(), 30)
    finally:
        await lite.shutdown()
    await asyncio.wait_for(task, 10)  # ended by the shutdown, not by an error
    assert sorted(m.body for m in got) == sorted(f"m{i}".encode() for i in range(30))
    for queue_id in (0, 1):
        offsets = [m.queue_offset for m in got if m.queue_id == queue_id]
        assert offsets == sorted(offsets)


async def test_messages_in_batches_of_at_most_the_size(cluster: Cluster, admin: Admin) -> None:
    topic = unique("IterBatch")
    await admin.create_topic(topic, 1)
    (queue,) = await fill(cluster, topic, 25, queues=1)
    batches: list[list[MessageExt]] = []
    async with LitePullConsumer(unique("lg"), cluster.namesrv_addr, pull_batch_size=10) as lite:
        lite.assign([queue])
        async with asyncio.timeout(30):
            async for batch in lite.messages(batch_size=4):
                batches.append(batch)
                if sum(map(len, batches)) == 25:
                    break
    assert all(1 <= len(batch) <= 4 for batch in batches)
    assert [m.queue_offset for batch in batches for m in batch] == list(range(25))


async def test_break_keeps_the_rest_of_a_batch_for_the_next_poll(cluster: Cluster, admin: Admin) -> None:
    topic = unique("IterBreak")
    await admin.create_topic(topic, 1)
    (queue,) = await fill(cluster, topic, 10, queues=1)
    async with LitePullConsumer(
        unique("lg"), cluster.namesrv_addr, pull_batch_size=10, auto_commit=False
    ) as lite:
        lite.assign([queue])
        seen: list[int] = []
        async with asyncio.timeout(30):
            async for msg in lite:
                seen.append(msg.queue_offset)
                if len(seen) == 3:
                    break
            while len(seen) < 10:
                seen.extend(m.queue_offset for m in await lite.poll(timeout=1))
        assert seen == list(range(10))
        await lite.commit()
        assert await lite.committed(queue) == 10


class Order(pydantic.BaseModel):
    id: int
    item: str
    placed: dt.datetime


async def test_json_and_model_payloads_round_trip(cluster: Cluster, admin: Admin) -> None:
    topic = unique("Typed")
    await admin.create_topic(topic, 1)
    order = Order(id=42, item="book", placed=dt.datetime(2026, 11, 24, 8, 30, tzinfo=dt.UTC))
    async with Producer(unique("pg"), cluster.namesrv_addr) as producer:
        await producer.send(Message.json(topic, order, tags="paid", keys="order-42"))
        await producer.send(Message.json(topic, {"ids": [1, 2, 3], "ok": True}))
    async with LitePullConsumer(
        unique("lg"), cluster.namesrv_addr, consume_from=ConsumeFrom.FIRST_OFFSET
    ) as lite:
        lite.subscribe(topic)
        async with asyncio.timeout(30):
            first = await anext(aiter(lite))
            second = await anext(aiter(lite))
    assert first.model(Order) == order
    assert first.json() == {"id": 42, "item": "book", "placed": "2026-11-24T08:30:00Z"}
    assert (first.tags, first.keys, first.content_type) == ("paid", ["order-42"], JSON_CONTENT_TYPE)
    assert second.json() == {"ids": [1, 2, 3], "ok": True}
    assert second.model(dict[str, object]) == {"ids": [1, 2, 3], "ok": True}
    # Other clients see an ordinary message: bytes and a plain property.
    assert second.body == b'{"ids":[1,2,3],"ok":true}'
    assert second.properties[PropertyKey.CONTENT_TYPE] == "application/json"
    with pytest.raises(pydantic.ValidationError):
        second.model(Order)
