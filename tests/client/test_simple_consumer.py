"""POP consumption end to end: our SDK's SimpleConsumer against a real broker process
(receive, ack, invisible time, redelivery with the attempt counted, dead letters, change of
invisible duration, orderly pops, pull and POP groups on one topic, kill -9 mid-stream)."""

from __future__ import annotations

import asyncio
import time

import pytest

from aiorocketmq.client import (
    Admin,
    ConsumeFrom,
    ConsumeResult,
    Message,
    MessageExt,
    MQError,
    Producer,
    PushConsumer,
    ReceivedMessage,
    SimpleConsumer,
)
from aiorocketmq.protocol.body import SubscriptionGroupConfig
from aiorocketmq.protocol.errors import BrokerError
from aiorocketmq.protocol.pop import ReceiptHandle
from tests.cluster import Cluster

from .conftest import Collector, start_cluster, unique

pytestmark = pytest.mark.asyncio(loop_scope="module")


async def send_all(cluster: Cluster, topic: str, bodies: list[bytes], **kwargs: object) -> None:
    async with Producer(unique("pg"), cluster.namesrv_addr) as producer:
        for body in bodies:
            await producer.send(Message(topic, body, **kwargs))  # type: ignore[arg-type]


async def receive_until(
    consumer: SimpleConsumer, count: int, *, invisible: float, timeout: float = 30.0, max_messages: int = 32
) -> list[ReceivedMessage]:
    """Receive until ``count`` messages came (long polls; no sleeping)."""
    got: list[ReceivedMessage] = []
    async with asyncio.timeout(timeout):
        while len(got) < count:
            got += await consumer.receive(min(32, max_messages), invisible, await_duration=5)
    return got


async def test_unacked_messages_come_back_after_the_invisible_time_with_the_attempt_raised(
    cluster: Cluster, admin: Admin
) -> None:
    topic = unique("PopRedeliver")
    await admin.create_topic(topic, 4)
    bodies = [f"m{i}".encode() for i in range(6)]
    async with SimpleConsumer(unique("cg"), cluster.namesrv_addr, subscriptions={topic: "*"}) as consumer:
        await send_all(cluster, topic, bodies, tags="t")
        first = await receive_until(consumer, 6, invisible=1.0)
        assert sorted(m.body for m in first) == bodies
        assert {m.delivery_attempt for m in first} == {1}
        assert {m.topic for m in first} == {topic}
        handle = ReceiptHandle.decode(first[0].receipt_handle)
        assert (handle.broker_name, handle.topic_type, handle.invisible_time) == ("broker-a", "0", 1000)
        acked = {m.body for m in first[:3]}
        await consumer.ack_batch(first[:3])  # one BATCH_ACK_MESSAGE
        started = time.monotonic()
        again = await receive_until(consumer, 3, invisible=30.0)
        assert time.monotonic() - started >= 0.5  # not before the invisible time ran out
        assert {m.body for m in again} == set(bodies) - acked
        assert {m.delivery_attempt for m in again} == {2}
        assert {m.topic for m in again} == {topic}
        ids = {m.body: m.msg_id for m in first}
        assert all(m.msg_id == ids[m.body] for m in again)  # the same message, not a copy's id
        assert ReceiptHandle.decode(again[0].receipt_handle).retry
        for msg in again:
            await consumer.ack(msg)
        assert await consumer.receive(32, 1.0, await_duration=1.5) == []


async def test_messages_acked_one_by_one_do_not_come_back(cluster: Cluster, admin: Admin) -> None:
    """Single ACK_MESSAGE requests (not a batch): once the unacked half is back after the
    invisible time, nothing of the acked half has come with it."""
    topic = unique("PopSingleAck")
    await admin.create_topic(topic, 2)
    bodies = [f"s{i}".encode() for i in range(4)]
    async with SimpleConsumer(unique("cg"), cluster.namesrv_addr, subscriptions={topic: "*"}) as consumer:
        await send_all(cluster, topic, bodies)
        first = sorted(await receive_until(consumer, 4, invisible=1.0), key=lambda m: m.body)
        for msg in first[:2]:
            await consumer.ack(msg)
        again = await receive_until(consumer, 2, invisible=30.0)
        assert sorted(m.body for m in again) == bodies[2:]
        for msg in again:
            await consumer.ack(msg)


async def test_messages_go_to_the_dead_letter_queue_after_the_group_max_attempts(
    cluster: Cluster, admin: Admin
) -> None:
    topic = unique("PopDlq")
    group = unique("cg")
    await admin.create_topic(topic, 2)
    await admin.update_subscription_group(SubscriptionGroupConfig(group_name=group, retry_max_times=2))
    async with SimpleConsumer(group, cluster.namesrv_addr, subscriptions={topic: "*"}) as consumer:
        await send_all(cluster, topic, [b"doomed"], keys=["k1"])
        attempts = []
        for _ in range(3):
            (msg,) = await receive_until(consumer, 1, invisible=0.3)
            attempts.append(msg.delivery_attempt)
        assert attempts == [1, 2, 3]  # the first delivery and retryMaxTimes=2 retries
        assert await consumer.receive(32, 0.3, await_duration=1.5) == []
    dlq = f"%DLQ%{group}"
    async with SimpleConsumer(unique("cg"), cluster.namesrv_addr, subscriptions={dlq: "*"}) as reader:
        (dead,) = await receive_until(reader, 1, invisible=30.0)
    assert dead.body == b"doomed"
    assert dead.properties["DLQ_ORIGIN_TOPIC"] == topic
    assert dead.keys == ["k1"]


async def test_change_invisible_duration_shortens_and_extends(cluster: Cluster, admin: Admin) -> None:
    topic = unique("PopChange")
    await admin.create_topic(topic, 1)
    async with SimpleConsumer(unique("cg"), cluster.namesrv_addr, subscriptions={topic: "*"}) as consumer:
        await send_all(cluster, topic, [b"a", b"b"])
        a, b = sorted(await receive_until(consumer, 2, invisible=60.0), key=lambda m: m.body)
        old_handle = a.receipt_handle
        await consumer.change_invisible_duration(a, 0.2)  # hand it back soon
        assert a.receipt_handle != old_handle
        with pytest.raises(BrokerError):
            await consumer.ack(ReceivedMessage(a.message, old_handle, 1, a.broker_name, a.broker_addr, 0))
        (back,) = await receive_until(consumer, 1, invisible=60.0)
        assert (back.body, back.delivery_attempt) == (b"a", 2)
        await consumer.change_invisible_duration(b, 1.0)
        await consumer.change_invisible_duration(b, 600.0)  # extended before it ran out
        assert await consumer.receive(32, 60.0, await_duration=2.0) == []
        await consumer.ack(b)
        await consumer.ack(back)


async def test_fifo_pops_keep_queue_order_with_one_batch_in_flight(cluster: Cluster, admin: Admin) -> None:
    topic = unique("PopFifo")
    await admin.create_topic(topic, 1)
    bodies = [f"f{i}".encode() for i in range(6)]
    async with SimpleConsumer(
        unique("cg"), cluster.namesrv_addr, subscriptions={topic: "*"}, fifo=True
    ) as consumer:
        await send_all(cluster, topic, bodies)
        batch = await receive_until(consumer, 2, invisible=1.0, max_messages=2)
        assert [m.body for m in batch] == bodies[:2]
        # the queue is blocked while that batch is out
        assert await consumer.receive(2, 1.0, await_duration=0.3) == []
        await consumer.ack(batch[0])
        # f1 was not acked: it comes again, alone and before anything newer
        (again,) = await receive_until(consumer, 1, invisible=30.0, max_messages=2)
        assert (again.body, again.delivery_attempt) == (b"f1", 2)
        await consumer.ack(again)
        rest: list[bytes] = []
        while len(rest) < 4:
            got = await receive_until(consumer, 1, invisible=30.0, max_messages=3)
            rest += [m.body for m in got]
            for msg in got:
                await consumer.ack(msg)
        assert rest == bodies[2:]


async def test_pop_and_pull_groups_each_get_every_message_of_a_topic(cluster: Cluster, admin: Admin) -> None:
    topic = unique("PopAndPull")
    await admin.create_topic(topic, 4)
    bodies = [f"c{i}".encode() for i in range(40)]
    pulled = Collector()
    push = PushConsumer(unique("cg"), cluster.namesrv_addr, consume_from=ConsumeFrom.FIRST_OFFSET)
    push.subscribe(topic)

    @push.listener
    async def handle(messages: list[MessageExt]) -> ConsumeResult:
        await pulled.add(messages)
        return ConsumeResult.SUCCESS

    async with push, SimpleConsumer(unique("cg"), cluster.namesrv_addr, subscriptions={topic: "*"}) as simple:
        await send_all(cluster, topic, bodies)
        popped = await receive_until(simple, 40, invisible=30.0)
        for msg in popped:
            await simple.ack(msg)
        await pulled.wait_count(40)
    assert sorted(m.body for m in popped) == sorted(bodies)
    assert pulled.distinct_bodies() == set(bodies)


async def test_tag_expressions_filter_what_a_simple_consumer_receives(cluster: Cluster, admin: Admin) -> None:
    topic = unique("PopTags")
    await admin.create_topic(topic, 2)
    async with SimpleConsumer(
        unique("cg"), cluster.namesrv_addr, subscriptions={topic: "b || c"}
    ) as consumer:
        async with Producer(unique("pg"), cluster.namesrv_addr) as producer:
            for i, tag in enumerate("abcab"):
                await producer.send(Message(topic, f"{tag}{i}".encode(), tags=tag))
        got = await receive_until(consumer, 3, invisible=30.0)
        assert sorted(m.body for m in got) == [b"b1", b"b4", b"c2"]
        assert await consumer.receive(32, 30.0, await_duration=0.5) == []


async def test_kill_9_mid_stream_loses_no_ack_and_redelivers_the_rest(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """The broker is killed while a consumer receives and acks: no message whose ack was
    answered comes again, every message never acked does (redelivered ones with the attempt
    raised), and acks cut off by the kill may go either way."""
    cluster = await start_cluster(tmp_path_factory.mktemp("pop-kill"))
    try:
        topic = unique("PopKill")
        group = unique("cg")
        async with Admin(cluster.namesrv_addr) as admin:
            await admin.create_topic(topic, 4)
        bodies = {f"k{i}".encode() for i in range(60)}
        await send_all(cluster, topic, sorted(bodies))
        acked: set[bytes] = set()
        cut_off: set[bytes] = set()  # received, then the ack failed: acked or not, unknown
        received: set[bytes] = set()
        unanswered_receives = 1  # the one in flight when the broker dies, plus any that fail before
        enough = asyncio.Event()
        killing = asyncio.Event()
        stop = asyncio.Event()
        async with SimpleConsumer(group, cluster.namesrv_addr, subscriptions={topic: "*"}) as consumer:

            async def consume() -> None:
                nonlocal unanswered_receives
                # A flag as well as the cancel: on 3.11 asyncio.wait_for (under the client's
                # connect) may swallow a cancel that lands as a connection attempt fails.
                while not stop.is_set():
                    try:
                        batch = await consumer.receive(8, 3.0, await_duration=1.0)
                    except MQError:
                        if not killing.is_set():
                            unanswered_receives += 1
                        await asyncio.sleep(0.05)  # the broker is gone: the client keeps trying
                        continue
                    for msg in batch:
                        received.add(msg.body)
                        try:
                            await consumer.ack(msg)
                        except MQError:
                            cut_off.add(msg.body)
                        else:
                            acked.add(msg.body)
                            if len(acked) >= 25:
                                enough.set()

            consuming = asyncio.ensure_future(consume())
            await asyncio.wait_for(enough.wait(), 30)
            killing.set()
            assert await cluster.kill_broker("broker-a") != 0  # acks are still flowing
            stop.set()
            consuming.cancel()
            await asyncio.wait({consuming}, timeout=30)
            assert consuming.done()
        assert 25 <= len(acked) < len(bodies)
        await cluster.start_broker("broker-a")
        must_come = bodies - acked - cut_off
        after: list[ReceivedMessage] = []
        async with SimpleConsumer(group, cluster.namesrv_addr, subscriptions={topic: "*"}) as consumer:
            async with asyncio.timeout(60):
                while not must_come <= {m.body for m in after}:
                    batch = await consumer.receive(32, 30.0, await_duration=5.0)
                    after += batch
                    await consumer.ack_batch(batch)
            after += await consumer.receive(32, 30.0, await_duration=1.0)  # stragglers, if any
        assert not acked & {m.body for m in after}, "an acknowledged message came again"
        assert {m.body for m in after} <= must_come | cut_off
        for msg in after:  # what went out before the kill comes with its attempt raised
            assert msg.body not in received or msg.delivery_attempt > 1, msg
        # A pop the broker recorded but whose answer never arrived (the kill cut it off) was a
        # delivery too, so its messages come with the attempt raised although nobody saw them: at
        # most one batch of 8 for each receive that went unanswered.
        unseen_but_retried = {m.body for m in after if m.delivery_attempt > 1 and m.body not in received}
        assert len(unseen_but_retried) <= 8 * unanswered_receives, sorted(unseen_but_retried)
    finally:
        await cluster.stop()


async def test_sql92_subscriptions_on_a_property_filtering_broker(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    cluster = await start_cluster(tmp_path_factory.mktemp("pop-sql"), enablePropertyFilter="true")
    try:
        topic = unique("PopSql")
        async with Admin(cluster.namesrv_addr) as admin:
            await admin.create_topic(topic, 2)
        consumer = SimpleConsumer(unique("cg"), cluster.namesrv_addr)
        consumer.subscribe(topic, "amount > 100 AND currency = 'EUR'", sql=True)
        async with consumer, Producer(unique("pg"), cluster.namesrv_addr) as producer:
            for amount, currency in [(50, "EUR"), (150, "EUR"), (500, "USD"), (101, "EUR")]:
                message = Message(topic, f"{amount}{currency}".encode())
                message.properties.update(amount=str(amount), currency=currency)
                await producer.send(message)
            got = await receive_until(consumer, 2, invisible=30.0)
            await consumer.ack_batch(got)
            assert await consumer.receive(32, 30.0, await_duration=0.5) == []
        assert sorted(m.body for m in got) == [b"101EUR", b"150EUR"]
    finally:
        await cluster.stop()
