"""Push consumers against a real name server and broker: filtering, rebalance among group
members, retries and the dead-letter queue, delayed messages, broadcasting, orderly
consumption, flow of offsets."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import pytest

from aiorocketmq.client import (
    Admin,
    ConsumeFrom,
    ConsumeResult,
    Message,
    MessageExt,
    MessageModel,
    MessageQueue,
    Producer,
    PushConsumer,
)
from aiorocketmq.client.errors import ClientStateError, MQError
from aiorocketmq.client.process_queue import ProcessQueue
from aiorocketmq.protocol.body import SubscriptionGroupConfig
from tests.cluster import Cluster

from .conftest import Collector, unique, wait_consumed_to_end, wait_until

StopAtEnd = Callable[[PushConsumer], PushConsumer]

pytestmark = pytest.mark.asyncio(loop_scope="module")


def collecting_consumer(
    cluster: Cluster, group: str, topic: str, collector: Collector, expression: str = "*", **kwargs: object
) -> PushConsumer:
    consumer = PushConsumer(group, cluster.namesrv_addr, **kwargs)  # type: ignore[arg-type]
    consumer.subscribe(topic, expression)
    name = str(kwargs.get("instance_name", ""))

    @consumer.listener
    async def handle(messages: list[MessageExt]) -> ConsumeResult:
        await collector.add(messages, name)
        return ConsumeResult.SUCCESS

    return consumer


async def test_tag_expression_selects_messages(cluster: Cluster, admin: Admin) -> None:
    topic = unique("Tags")
    await admin.create_topic(topic, 2)
    async with Producer(unique("pg"), cluster.namesrv_addr) as producer:
        for i in range(30):
            await producer.send(Message(topic, f"{i}".encode(), tags="abc"[i % 3]))
        await producer.send(Message(topic, b"untagged"))
    collector = Collector()
    consumer = collecting_consumer(
        cluster, unique("cg"), topic, collector, "a || c", consume_from=ConsumeFrom.FIRST_OFFSET
    )
    async with consumer:
        await collector.wait_count(20)
        # the rest of the queue is skipped over: progress reaches the end
        await wait_until(
            lambda: (
                sum(
                    consumer._offset_store.snapshot().get(q, 0)
                    for q in consumer.assigned_queues
                    if q.topic == topic
                )
                == 31
            )
        )
    assert sorted(int(m.body) for m in collector.messages) == [i for i in range(30) if i % 3 != 1]
    assert {m.tags for m in collector.messages} == {"a", "c"}


async def test_three_members_share_eight_queues_and_take_over_a_leavers_queues(
    cluster: Cluster, admin: Admin, stopped_at_end: StopAtEnd
) -> None:
    topic = unique("Shared")
    group = unique("cg")
    await admin.create_topic(topic, 8)
    collector = Collector()
    consumers = [
        stopped_at_end(
            collecting_consumer(
                cluster,
                group,
                topic,
                collector,
                instance_name=f"member-{i}",
                consume_from=ConsumeFrom.FIRST_OFFSET,
            )
        )
        for i in range(3)
    ]
    for consumer in consumers:
        await consumer.start()

    def owned(members: list[PushConsumer]) -> list[set[MessageQueue]]:
        return [{q for q in c.assigned_queues if q.topic == topic} for c in members]

    def split_is(members: list[PushConsumer], sizes: list[int]) -> bool:
        sets = owned(members)
        union = set().union(*sets)
        return sorted(len(s) for s in sets) == sizes and len(union) == 8 and sum(map(len, sets)) == 8

    sent: set[bytes] = set()
    stop_sending = asyncio.Event()

    async def produce() -> None:
        async with Producer(unique("pg"), cluster.namesrv_addr) as producer:
            i = 0
            while not stop_sending.is_set():
                body = f"m{i}".encode()
                await producer.send(Message(topic, body))
                sent.add(body)
                i += 1
                await asyncio.sleep(0.002)

    sender = asyncio.ensure_future(produce())
    try:
        await wait_until(lambda: split_is(consumers, [2, 3, 3]), timeout=20)
        await collector.wait_count(100)
        leaver = consumers.pop(1)
        left_queues = owned([leaver])[0]
        await leaver.shutdown()
        began = time.monotonic()
        await wait_until(lambda: split_is(consumers, [4, 4]), timeout=20)
        moved_in = time.monotonic() - began
        assert moved_in < 20, "queues did not move within one rebalance period"
        assert left_queues <= set().union(*owned(consumers))
        count = len(collector.messages)
        await collector.wait_count(count + 100)
    finally:
        stop_sending.set()
        await sender
    await collector.wait_for(lambda msgs: sent <= {m.body for m in msgs}, timeout=30)
    for consumer in consumers:
        await consumer.shutdown()


async def test_failed_messages_are_retried_then_dead_lettered(cluster: Cluster, admin: Admin) -> None:
    topic = unique("Retry")
    group = unique("cg")
    await admin.create_topic(topic, 1)
    await admin.update_subscription_group(SubscriptionGroupConfig(group_name=group, retry_max_times=2))
    deliveries: dict[bytes, list[tuple[int, str, float]]] = defaultdict(list)
    changed = asyncio.Event()
    consumer = PushConsumer(group, cluster.namesrv_addr, consume_from=ConsumeFrom.FIRST_OFFSET)
    consumer.subscribe(topic)

    @consumer.listener
    async def handle(messages: list[MessageExt]) -> ConsumeResult:
        for msg in messages:
            deliveries[msg.body].append((msg.reconsume_times, msg.topic, time.monotonic()))
        changed.set()
        if messages[0].body == b"ok":
            return ConsumeResult.SUCCESS
        if messages[0].reconsume_times == 1:
            raise RuntimeError("an exception counts as RECONSUME_LATER")
        return ConsumeResult.RECONSUME_LATER

    async with Producer(unique("pg"), cluster.namesrv_addr) as producer:
        failing = await producer.send(Message(topic, b"fails", keys=["poison"]))
        await producer.send(Message(topic, b"ok"))
    async with consumer:
        async with asyncio.timeout(30):
            while len(deliveries[b"fails"]) < 3:
                changed.clear()
                await changed.wait()
        # the dead-letter topic is write-only, as in RocketMQ: find the message by its key
        dlq = f"%DLQ%{group}"

        async def dead_letters() -> list[MessageExt]:
            try:
                return await admin.query_messages_by_key(dlq, "poison")
            except MQError:
                return []

        await wait_until(lambda: _nonempty(dead_letters), timeout=20)
        (dead,) = await dead_letters()
    assert [d[0] for d in deliveries[b"fails"]] == [0, 1, 2]
    assert {d[1] for d in deliveries[b"fails"]} == {topic}  # retried messages show the original topic
    times = [d[2] for d in deliveries[b"fails"]]
    assert all(
        later - earlier >= 0.5 for earlier, later in itertools.pairwise(times)
    )  # came back after a delay
    assert len(deliveries[b"ok"]) == 1
    assert dead.body == b"fails" and dead.keys == ["poison"]
    assert dead.properties.get("RETRY_TOPIC") == topic
    assert dead.msg_id == failing.msg_id or dead.properties.get("ORIGIN_MESSAGE_ID") == failing.msg_id


async def _nonempty(fetch: object) -> bool:
    return bool(await fetch())  # type: ignore[operator]


async def test_delayed_message_arrives_after_its_delay(cluster: Cluster, admin: Admin) -> None:
    topic = unique("Delayed")
    await admin.create_topic(topic, 1)
    collector = Collector()
    async with collecting_consumer(cluster, unique("cg"), topic, collector):
        async with Producer(unique("pg"), cluster.namesrv_addr) as producer:
            await producer.send(Message(topic, b"now"))
            sent_at = time.time()
            await producer.send(Message(topic, b"later", delay_level=3))
        await collector.wait_count(2, timeout=20)
    now_msg, later_msg = sorted(collector.messages, key=lambda m: m.body != b"now")
    assert later_msg.body == b"later" and later_msg.topic == topic
    # test brokers run every delay level at 1 s
    assert later_msg.store_timestamp / 1000 - sent_at >= 0.9
    assert collector.messages.index(now_msg) < collector.messages.index(later_msg)


async def test_broadcasting_delivers_everything_to_every_member_with_local_offsets(
    cluster: Cluster, admin: Admin, tmp_path: Path, stopped_at_end: StopAtEnd
) -> None:
    topic = unique("Broadcast")
    group = unique("cg")
    await admin.create_topic(topic, 4)
    collectors = [Collector(), Collector()]

    def member(i: int) -> PushConsumer:
        return stopped_at_end(
            collecting_consumer(
                cluster,
                group,
                topic,
                collectors[i],
                model=MessageModel.BROADCASTING,
                instance_name=f"bc-{i}",
                offset_dir=tmp_path,
                consume_from=ConsumeFrom.FIRST_OFFSET,
            )
        )

    members = [member(0), member(1)]
    for consumer in members:
        await consumer.start()
    async with Producer(unique("pg"), cluster.namesrv_addr) as producer:
        for i in range(20):
            await producer.send(Message(topic, f"b{i}".encode()))
        for c in collectors:
            await c.wait_count(20)
        for consumer in members:
            await wait_consumed_to_end(consumer, admin, topic)  # duplicates would be in by now
        assert all(c.distinct_bodies() == {f"b{i}".encode() for i in range(20)} for c in collectors)
        assert all(len(c.messages) == 20 for c in collectors)
        assert len(members[0].assigned_queues) == 4 and len(members[1].assigned_queues) == 4
        for consumer in members:
            await consumer.shutdown()
        files = sorted(await asyncio.to_thread(lambda: list(tmp_path.rglob("offsets.json"))))
        assert len(files) == 2 and all(group in str(f) for f in files)
        # a restarted member resumes from its own file: only new messages come
        for i in range(20, 25):
            await producer.send(Message(topic, f"b{i}".encode()))
    collectors[0] = Collector()
    async with member(0) as restarted:
        await collectors[0].wait_count(5)
        await wait_consumed_to_end(restarted, admin, topic)  # any old message would be in by now
    assert sorted(collectors[0].bodies()) == sorted(f"b{i}".encode() for i in range(20, 25))


async def test_orderly_consumption_keeps_per_key_order_across_a_rebalance(
    cluster: Cluster, admin: Admin, stopped_at_end: StopAtEnd
) -> None:
    topic = unique("Orderly")
    group = unique("cg")
    await admin.create_topic(topic, 4)
    keys = [f"order-{k}" for k in range(8)]
    seen: dict[str, list[int]] = defaultdict(list)
    consumed_by: dict[str, set[int]] = defaultdict(set)
    in_flight: set[str] = set()
    overlap: list[str] = []
    total = Collector()

    def member(i: int) -> PushConsumer:
        consumer = PushConsumer(
            group,
            cluster.namesrv_addr,
            orderly=True,
            instance_name=f"ord-{i}",
            consume_from=ConsumeFrom.FIRST_OFFSET,
        )
        consumer.subscribe(topic)

        @consumer.listener
        async def handle(messages: list[MessageExt]) -> ConsumeResult:
            for msg in messages:
                key, seq = msg.body.decode().split(":")
                if key in in_flight:
                    overlap.append(key)
                in_flight.add(key)
                await asyncio.sleep(0.001)
                in_flight.discard(key)
                seen[key].append(int(seq))
                consumed_by[key].add(i)
            await total.add(messages)
            return ConsumeResult.SUCCESS

        return consumer

    first, second = stopped_at_end(member(0)), stopped_at_end(member(1))
    await first.start()
    per_key = 40

    async def produce() -> None:
        async with Producer(unique("pg"), cluster.namesrv_addr) as producer:
            for seq in range(per_key):
                for key in keys:
                    await producer.send(Message(topic, f"{key}:{seq}".encode()), shard_key=key)
                await asyncio.sleep(0.03)

    sender = asyncio.ensure_future(produce())
    try:
        await total.wait_count(60)
        await second.start()  # joins: queues move from first to second
        await wait_until(
            lambda: len([q for q in second.assigned_queues if q.topic == topic]) == 2, timeout=20
        )
        await total.wait_count(len(total.messages) + 60)
        await first.shutdown()  # leaves: second takes everything
        await sender
        await total.wait_for(lambda msgs: all(len(set(seen[k])) == per_key for k in keys), timeout=30)
        await second.shutdown()
    finally:
        sender.cancel()
        await asyncio.gather(sender, return_exceptions=True)
    for key in keys:
        assert seen[key] == list(range(per_key)), f"{key} out of order: {seen[key]}"
    assert not overlap
    # the rebalance really moved keys between members mid-stream
    assert any(members == {0, 1} for members in consumed_by.values())


async def test_concurrency_is_bounded_and_batches_are_sized(cluster: Cluster, admin: Admin) -> None:
    topic = unique("Bounded")
    await admin.create_topic(topic, 4)
    async with Producer(unique("pg"), cluster.namesrv_addr) as producer:
        await producer.send_batch(
            [Message(topic, f"{i}".encode()) for i in range(60)],
            queue=MessageQueue(topic=topic, broker_name="broker-a", queue_id=0),
        )
    active = 0
    peak = 0
    sizes = []
    done = Collector()
    consumer = PushConsumer(
        unique("cg"), cluster.namesrv_addr, concurrency=3, batch_size=4, consume_from=ConsumeFrom.FIRST_OFFSET
    )
    consumer.subscribe(topic)

    @consumer.listener
    async def handle(messages: list[MessageExt]) -> ConsumeResult:
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        sizes.append(len(messages))
        await asyncio.sleep(0.02)
        active -= 1
        await done.add(messages)
        return ConsumeResult.SUCCESS

    async with consumer:
        await done.wait_count(60)
    assert peak == 3
    assert max(sizes) == 4 and sum(sizes) == 60


async def test_committed_offset_is_the_smallest_in_flight(cluster: Cluster, admin: Admin) -> None:
    topic = unique("InFlight")
    group = unique("cg")
    await admin.create_topic(topic, 1)
    queue = MessageQueue(topic=topic, broker_name="broker-a", queue_id=0)
    release = asyncio.Event()
    done = Collector()
    consumer = PushConsumer(group, cluster.namesrv_addr, consume_from=ConsumeFrom.FIRST_OFFSET)
    consumer.subscribe(topic)

    @consumer.listener
    async def handle(messages: list[MessageExt]) -> ConsumeResult:
        if messages[0].body == b"3":
            await release.wait()
        await done.add(messages)
        return ConsumeResult.SUCCESS

    async with Producer(unique("pg"), cluster.namesrv_addr) as producer:
        for i in range(10):
            await producer.send(Message(topic, f"{i}".encode()), queue=queue)
    async with consumer:
        await done.wait_count(9)
        await consumer.persist_offsets()
        await wait_until(lambda: _committed_is(admin, group, queue, 3))
        release.set()
        await done.wait_count(10)
        await wait_until(lambda: consumer._offset_store.read_memory(queue) == 10)
    # shutdown persisted the final progress
    assert await admin.committed_offset(group, queue) == 10


async def _committed_is(admin: Admin, group: str, queue: MessageQueue, offset: int) -> bool:
    return await admin.committed_offset(group, queue) == offset


async def test_a_restarted_group_resumes_from_its_committed_offset(cluster: Cluster, admin: Admin) -> None:
    topic = unique("Resume")
    group = unique("cg")
    await admin.create_topic(topic, 2)
    first = Collector()
    async with Producer(unique("pg"), cluster.namesrv_addr) as producer:
        for i in range(20):
            await producer.send(Message(topic, f"a{i}".encode()))
        async with collecting_consumer(cluster, group, topic, first, consume_from=ConsumeFrom.FIRST_OFFSET):
            await first.wait_count(20)
        for i in range(20):
            await producer.send(Message(topic, f"b{i}".encode()))
    second = Collector()
    async with collecting_consumer(
        cluster, group, topic, second, consume_from=ConsumeFrom.FIRST_OFFSET
    ) as resumed:
        await second.wait_count(20)
        await wait_consumed_to_end(resumed, admin, topic)  # a re-delivery would be in by now
    assert second.distinct_bodies() == {f"b{i}".encode() for i in range(20)}
    assert len(second.messages) == 20


async def test_a_new_group_on_a_young_queue_starts_at_offset_zero(cluster: Cluster, admin: Admin) -> None:
    """RocketMQ brokers answer "offset 0" to a group without progress while the queue still
    holds its first message, so even LAST_OFFSET starts from the beginning there."""
    topic = unique("Young")
    await admin.create_topic(topic, 1)
    async with Producer(unique("pg"), cluster.namesrv_addr) as producer:
        await producer.send(Message(topic, b"old"))
        collector = Collector()
        async with collecting_consumer(
            cluster, unique("cg"), topic, collector, consume_from=ConsumeFrom.LAST_OFFSET
        ):
            await producer.send(Message(topic, b"new"))
            await collector.wait_count(2)
    assert collector.bodies() == [b"old", b"new"]


async def test_misuse_is_refused_loudly(cluster: Cluster) -> None:
    consumer = PushConsumer(unique("cg"), cluster.namesrv_addr)
    with pytest.raises(ClientStateError, match="no listener"):
        await consumer.start()
    consumer.listener(lambda messages: ConsumeResult.SUCCESS)
    with pytest.raises(ClientStateError, match="subscribes to nothing"):
        await consumer.start()
    consumer.subscribe(unique("T"))
    with pytest.raises(ValueError):
        PushConsumer(unique("cg"), cluster.namesrv_addr, concurrency=0)
    await consumer.start()
    try:
        with pytest.raises(ClientStateError, match="before start"):
            consumer.listener(lambda messages: ConsumeResult.SUCCESS)
        with pytest.raises(ClientStateError, match="already started"):
            await consumer.start()
    finally:
        await consumer.shutdown()


async def test_orderly_suspend_retries_in_place_then_dead_letters(cluster: Cluster, admin: Admin) -> None:
    topic = unique("OrderlySuspend")
    group = unique("cg")
    await admin.create_topic(topic, 1)
    attempts: list[tuple[bytes, int]] = []
    done = Collector()
    consumer = PushConsumer(
        group,
        cluster.namesrv_addr,
        orderly=True,
        max_reconsume_times=2,
        suspend_time=0.05,
        consume_from=ConsumeFrom.FIRST_OFFSET,
    )
    consumer.subscribe(topic)

    @consumer.listener
    async def handle(messages: list[MessageExt]) -> ConsumeResult:
        (msg,) = messages
        attempts.append((msg.body, msg.reconsume_times))
        if msg.body == b"poison":
            return ConsumeResult.SUSPEND
        if msg.body == b"flaky" and msg.reconsume_times == 0:
            raise RuntimeError("first attempt fails")
        await done.add(messages)
        return ConsumeResult.SUCCESS

    async with Producer(unique("pg"), cluster.namesrv_addr) as producer:
        for body in (b"first", b"flaky", b"poison", b"last"):
            await producer.send(Message(topic, body, keys=[body.decode()]))
    async with consumer:
        await done.wait_count(3)

        async def dead() -> list[MessageExt]:
            try:
                return await admin.query_messages_by_key(f"%DLQ%{group}", "poison")
            except MQError:
                return []

        await wait_until(lambda: _nonempty(dead), timeout=20)
    # each message in order; the failing ones retried in place before anything after them
    assert attempts == [
        (b"first", 0),
        (b"flaky", 0),
        (b"flaky", 1),
        (b"poison", 0),
        (b"poison", 1),
        (b"poison", 2),
        (b"last", 0),
    ]
    assert done.bodies() == [b"first", b"flaky", b"last"]


async def test_send_back_falls_back_to_resending_into_the_retry_topic(cluster: Cluster, admin: Admin) -> None:
    """When the broker cannot take a message back (here: it cannot find it by its commit-log
    offset), the consumer re-sends a copy into ``%RETRY%<group>`` itself."""
    topic = unique("Fallback")
    await admin.create_topic(topic, 1)
    deliveries: list[MessageExt] = []
    changed = asyncio.Event()
    consumer = PushConsumer(unique("cg"), cluster.namesrv_addr, consume_from=ConsumeFrom.FIRST_OFFSET)
    consumer.subscribe(topic)

    @consumer.listener
    async def handle(messages: list[MessageExt]) -> ConsumeResult:
        deliveries.extend(messages)
        changed.set()
        return ConsumeResult.SUCCESS

    async with Producer(unique("pg"), cluster.namesrv_addr) as producer:
        sent = await producer.send(Message(topic, b"again", tags="t", keys=["k"]))
    async with consumer:
        async with asyncio.timeout(20):
            while not deliveries:
                changed.clear()
                await changed.wait()
        original = deliveries[0]
        original.commit_log_offset = 1 << 40  # nowhere: the broker's send-back must fail
        assert await consumer.send_back(original) is True
        async with asyncio.timeout(20):
            while len(deliveries) < 2:
                changed.clear()
                await changed.wait()
    again = deliveries[1]
    assert again.body == b"again" and again.topic == topic and again.tags == "t" and again.keys == ["k"]
    assert again.reconsume_times == 1
    assert again.properties.get("ORIGIN_MESSAGE_ID") == sent.msg_id


async def test_a_consumer_started_before_its_topic_is_routed_picks_it_up_within_seconds(
    cluster: Cluster,
) -> None:
    """A topic the broker auto-creates reaches the name server a moment later; a consumer
    that found no route looks again about every second instead of waiting for the next
    rebalance (20 s)."""
    topic = unique("Late")
    collector = Collector()
    async with collecting_consumer(
        cluster, unique("cg"), topic, collector, consume_from=ConsumeFrom.FIRST_OFFSET
    ):
        async with Producer(unique("pg"), cluster.namesrv_addr) as producer:
            await producer.send(Message(topic, b"first"))  # creates the topic
        await collector.wait_count(1, timeout=10)
    assert collector.bodies() == [b"first"]


async def test_a_rebalance_finishing_after_shutdown_starts_no_pulls(cluster: Cluster, admin: Admin) -> None:
    topic = unique("T")
    await admin.create_topic(topic, 2)
    consumer = collecting_consumer(cluster, unique("cg"), topic, Collector())
    await consumer.start()
    await consumer.shutdown()
    pq = ProcessQueue()
    consumer._queue_added(MessageQueue(topic=topic, broker_name="broker-a", queue_id=0), pq, 0)
    assert pq.dropped
    assert not consumer._pull_tasks
