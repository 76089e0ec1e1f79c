"""The producer's automatic batching (``auto_batch``, RocketMQ 5's ``autoBatch``) against a real
name server and broker: concurrent sends share requests, each caller gets its own message's
result (checked against what a consumer reads back), and what must not wait in a batch does
not."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from aiorocketmq.client import Admin, Message, MessageQueue, Producer, PullClient, SendResult
from tests.cluster import Cluster

from .conftest import unique

pytestmark = pytest.mark.asyncio(loop_scope="module")


class CountingProducer(Producer):
    """A producer that counts the batch requests it makes (a real subclass, no mock)."""

    batches: list[int]

    async def send_batch(self, messages: Sequence[Message], **kwargs: object) -> SendResult:  # type: ignore[override]
        self.batches.append(len(messages))
        return await super().send_batch(messages, **kwargs)  # type: ignore[arg-type]


async def test_concurrent_sends_share_batches_and_each_gets_its_own_result(
    cluster: Cluster, admin: Admin
) -> None:
    topic = unique("AutoBatch")
    await admin.create_topic(topic, 2)
    producer = CountingProducer(unique("pg"), cluster.namesrv_addr, auto_batch=True, linger=0.05)
    producer.batches = []
    messages = [Message(topic, f"auto-{i}".encode(), keys=[f"k{i}"]) for i in range(300)]
    async with producer:
        results = await asyncio.gather(*(producer.send(m) for m in messages))
    assert sum(producer.batches) == 300 and len(producer.batches) < 30, producer.batches
    assert len({r.msg_id for r in results}) == 300
    assert [r.msg_id for r in results] == [m.properties["UNIQ_KEY"] for m in messages]

    stored = {}
    async with PullClient(unique("check"), cluster.namesrv_addr) as puller:
        for queue_id in range(2):
            mq = MessageQueue(topic=topic, broker_name="broker-a", queue_id=queue_id)
            offset = 0
            while True:
                pulled = await puller.pull(mq, offset, 64)
                if not pulled.messages:
                    break
                for m in pulled.messages:
                    stored[(m.queue_id, m.queue_offset)] = (m.body, m.msg_id, m.offset_msg_id)
                offset = pulled.next_begin_offset
    for msg, result in zip(messages, results, strict=True):
        assert stored[(result.queue.queue_id, result.queue_offset)] == (
            msg.body,
            result.msg_id,
            result.offset_msg_id,
        )


async def test_a_lone_send_goes_out_after_the_linger_and_timers_never_wait(
    cluster: Cluster, admin: Admin
) -> None:
    topic = unique("AutoBatchLone")
    await admin.create_topic(topic, 1)
    producer = CountingProducer(unique("pg"), cluster.namesrv_addr, auto_batch=True, linger=0.02)
    producer.batches = []
    async with producer:
        lone = await producer.send(Message(topic, b"alone"))
        timer = await producer.send(Message(topic, b"later"), delay=60)
    assert producer.batches == [1]
    assert lone.queue_offset == 0 and lone.recall_handle is None
    assert timer.recall_handle is not None  # sent on its own, as a timer message


async def test_shutdown_sends_what_is_waiting(cluster: Cluster, admin: Admin) -> None:
    topic = unique("AutoBatchClose")
    await admin.create_topic(topic, 1)
    producer = CountingProducer(unique("pg"), cluster.namesrv_addr, auto_batch=True, linger=30)
    producer.batches = []
    await producer.start()
    pending = [asyncio.ensure_future(producer.send(Message(topic, f"w{i}".encode()))) for i in range(5)]
    await asyncio.sleep(0)  # the sends join the open batch
    await producer.shutdown()
    results = await asyncio.gather(*pending)
    assert producer.batches == [5] and [r.queue_offset for r in results] == [0, 1, 2, 3, 4]
