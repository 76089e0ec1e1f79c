"""Cross-compatibility with the official RocketMQ C++ client (librocketmq 1.2.x, PyPI
``rocketmq==0.4.4``) through our real name server and broker: what the SDK sends the C++
consumer reads, and what the C++ producer sends the SDK consumes.

The C++ calls block, so they run through ``asyncio.to_thread``; its callbacks run on C++
threads and hand deliveries over with a condition variable.
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass
from typing import Any

import pytest
from rocketmq.client import Message as CppMessage
from rocketmq.client import PushConsumer as CppPushConsumer
from rocketmq.client import RecvMessage
from rocketmq.client import SendStatus as CppSendStatus

from aiorocketmq.client import Admin, ConsumeFrom, ConsumeResult, Message, MessageExt, Producer, PushConsumer
from tests.cluster import Cluster
from tests.cpp_client import TolerantProducer as CppProducer
from tests.cpp_client import shutdown_safely

from .conftest import Collector, unique, wait_consumed_to_end

pytestmark = pytest.mark.asyncio(loop_scope="module")


@dataclass(frozen=True)
class CppDelivery:
    msg_id: str
    topic: str
    body: bytes
    tags: str
    keys: str
    color: str
    queue_id: int
    queue_offset: int


def _text(value: bytes | str | None) -> str:
    if isinstance(value, bytes):
        return value.decode()
    return value or ""


class ThreadCollector:
    """Deliveries from C++ threads; an asyncio test waits for them in a worker thread."""

    def __init__(self) -> None:
        self.items: list[CppDelivery] = []
        self._cond = threading.Condition()

    def __call__(self, msg: RecvMessage) -> None:
        item = CppDelivery(
            msg_id=msg.id,
            topic=msg.topic,
            body=msg.body,
            tags=_text(msg.tags),
            keys=_text(msg.keys),
            color=_text(msg.get_property("color")),
            queue_id=msg.queue_id,
            queue_offset=msg.queue_offset,
        )
        with self._cond:
            self.items.append(item)
            self._cond.notify_all()

    def _wait(self, count: int, timeout: float) -> list[CppDelivery]:
        with self._cond:
            self._cond.wait_for(lambda: len(self.items) >= count, timeout)
            return list(self.items)

    async def wait_count(self, count: int, timeout: float = 60) -> list[CppDelivery]:
        items = await asyncio.to_thread(self._wait, count, timeout)
        assert len(items) >= count, f"the C++ consumer got {len(items)} of {count} messages"
        return items


async def test_sdk_producer_to_cpp_push_consumer(cluster: Cluster, admin: Admin) -> None:
    topic = unique("SdkToCpp")
    await admin.create_topic(topic, 4)
    sent: dict[bytes, tuple[str, str]] = {}
    big = b"0123456789abcdef" * 1024  # 16 KiB: compressed on the wire
    async with Producer(unique("pg"), cluster.namesrv_addr) as producer:
        for i in range(30):
            body = f"sdk-{i}".encode()
            result = await producer.send(
                Message(
                    topic,
                    body,
                    tags=f"tag{i % 3}",
                    keys=[f"key-{i}", "shared"],
                    properties={"color": f"c{i}"},
                )
            )
            sent[body] = (result.msg_id, result.offset_msg_id)
        result = await producer.send(Message(topic, big, tags="big"))
        sent[big] = (result.msg_id, result.offset_msg_id)
        batch = [Message(topic, f"batch-{i}".encode(), tags="batch") for i in range(10)]
        result = await producer.send_batch(batch)
        for msg in batch:
            sent[msg.body] = (msg.unique_id or "", "")
        for i in range(12):
            body = f"sharded-{i}".encode()
            result = await producer.send(Message(topic, body, tags="shard"), shard_key=f"user-{i % 3}")
            sent[body] = (result.msg_id, result.offset_msg_id)

    collector = ThreadCollector()
    consumer = CppPushConsumer(unique("cpp_cg"))
    consumer.set_namesrv_addr(cluster.namesrv_addr)
    consumer.set_instance_name(unique("cpp_instance"))
    consumer.subscribe(topic, collector)
    await asyncio.to_thread(consumer.start)
    started_at = time.monotonic()
    try:
        items = await collector.wait_count(len(sent))
    finally:
        await asyncio.to_thread(shutdown_safely, consumer, started_at)
    by_body = {item.body: item for item in items}
    assert set(by_body) == set(sent)
    for i in range(30):
        item = by_body[f"sdk-{i}".encode()]
        assert (item.topic, item.tags, item.color) == (topic, f"tag{i % 3}", f"c{i}")
        assert item.keys.split(" ") == [f"key-{i}", "shared"]
        assert item.msg_id in sent[item.body]
    assert by_body[big].tags == "big"
    batch_items = [by_body[f"batch-{i}".encode()] for i in range(10)]
    assert len({(b.queue_id) for b in batch_items}) == 1
    assert [b.queue_offset for b in batch_items] == list(
        range(batch_items[0].queue_offset, batch_items[0].queue_offset + 10)
    )


async def test_cpp_producer_to_sdk_push_consumer(cluster: Cluster, admin: Admin) -> None:
    topic = unique("CppToSdk")
    await admin.create_topic(topic, 4)

    def produce() -> dict[bytes, str]:
        producer = CppProducer(unique("cpp_pg"))
        producer.set_namesrv_addr(cluster.namesrv_addr)
        producer.start()
        started_at = time.monotonic()
        try:
            ids = {}
            for i in range(30):
                msg = CppMessage(topic)
                msg.set_body(f"cpp-{i}")
                msg.set_tags("even" if i % 2 == 0 else "odd")
                msg.set_keys(f"key-{i}")
                msg.set_property("color", f"c{i}")
                result = producer.send_sync(msg)
                assert result.status == CppSendStatus.OK
                ids[f"cpp-{i}".encode()] = result.msg_id
            big = CppMessage(topic)
            big.set_body("x" * 20000)  # the C++ producer compresses this
            big.set_tags("even")
            ids[b"x" * 20000] = producer.send_sync(big).msg_id
            return ids
        finally:
            shutdown_safely(producer, started_at)

    ids = await asyncio.to_thread(produce)
    collector = Collector()
    consumer = PushConsumer(unique("cg"), cluster.namesrv_addr, consume_from=ConsumeFrom.FIRST_OFFSET)
    consumer.subscribe(topic, "even")

    @consumer.listener
    async def handle(messages: list[MessageExt]) -> ConsumeResult:
        await collector.add(messages)
        return ConsumeResult.SUCCESS

    async with consumer:
        received = await collector.wait_count(16)
        await wait_consumed_to_end(consumer, admin, topic)  # an "odd" one would be in by now
    by_body: dict[bytes, Any] = {m.body: m for m in received}
    assert set(by_body) == {f"cpp-{i}".encode() for i in range(0, 30, 2)} | {b"x" * 20000}
    assert len(received) == 16
    for i in range(0, 30, 2):
        msg = by_body[f"cpp-{i}".encode()]
        assert msg.topic == topic and msg.tags == "even"
        assert msg.keys == [f"key-{i}"]
        assert msg.properties["color"] == f"c{i}"
        assert msg.msg_id == ids[msg.body]
        assert msg.born_timestamp <= msg.store_timestamp
    assert by_body[b"x" * 20000].msg_id == ids[b"x" * 20000]
