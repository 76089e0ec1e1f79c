"""The official RocketMQ C++ client (librocketmq 1.2.x from the PyPI ``rocketmq==0.4.4`` wheel)
against our real name server and broker processes, unchanged.

The C++ calls block and its callbacks run on C++ threads: tests call it through
``asyncio.to_thread`` and collect deliveries with thread-safe collectors.
"""

from __future__ import annotations

import asyncio
import functools
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from rocketmq.client import Message as CppMessage
from rocketmq.client import PullConsumer as CppPullConsumer
from rocketmq.client import PushConsumer as CppPushConsumer
from rocketmq.client import RecvMessage, SendStatus
from rocketmq.ffi import MessageModel as CppMessageModel
from rocketmq.ffi import _CConsumeStatus

from aiorocketmq.protocol.body import (
    GetConsumerListByGroupResponseBody,
    LockBatchRequestBody,
    LockBatchResponseBody,
    MessageQueue,
    SubscriptionGroupConfig,
)
from aiorocketmq.protocol.codes import RequestCode, ResponseCode
from aiorocketmq.protocol.message import decode_records
from aiorocketmq.protocol.transport import Connection, connect
from tests.cluster import Cluster
from tests.cpp_client import TolerantProducer as CppProducer
from tests.cpp_client import shutdown_safely
from tests.support import wait_until

from .conftest import ConnectTo
from .requests import call, max_offset


@dataclass(frozen=True)
class Delivery:
    topic: str
    body: str
    tags: str
    keys: str
    color: str
    queue_id: int
    reconsume_times: int
    received_at: float


def delivery(msg: RecvMessage) -> Delivery:
    def text(value: bytes | str | None) -> str:
        if isinstance(value, bytes):
            return value.decode()
        return value or ""

    return Delivery(
        topic=msg.topic,
        body=text(msg.body),
        tags=text(msg.tags),
        keys=text(msg.keys),
        color=text(msg.get_property("color")),
        queue_id=msg.queue_id,
        reconsume_times=msg.reconsume_times,
        received_at=time.time(),
    )


class Collector:
    """Deliveries from C++ threads; waiters block (in a worker thread) until enough arrived."""

    def __init__(self) -> None:
        self.items: list[Delivery] = []
        self._cond = threading.Condition()

    def add(self, item: Delivery) -> None:
        with self._cond:
            self.items.append(item)
            self._cond.notify_all()

    def _wait(
        self, predicate: Callable[[list[Delivery]], bool], timeout: float
    ) -> tuple[bool, list[Delivery]]:
        with self._cond:
            met = self._cond.wait_for(lambda: predicate(self.items), timeout)
            return met, list(self.items)

    async def wait_for(
        self, predicate: Callable[[list[Delivery]], bool], timeout: float = 60, what: str = "the deliveries"
    ) -> list[Delivery]:
        met, items = await asyncio.to_thread(self._wait, predicate, timeout)
        assert met, f"{what} did not arrive within {timeout}s ({len(items)} delivered)"
        return items

    async def wait_count(self, count: int, timeout: float = 60) -> list[Delivery]:
        return await self.wait_for(lambda items: len(items) >= count, timeout, f"{count} messages")


def cpp_message(topic: str, body: str, *, tags: str = "", keys: str = "", color: str = "") -> CppMessage:
    msg = CppMessage(topic)
    msg.set_body(body)
    if tags:
        msg.set_tags(tags)
    if keys:
        msg.set_keys(keys)
    if color:
        msg.set_property("color", color)
    return msg


@contextmanager
def cpp_producer(cluster: Cluster, group: str) -> Iterator[CppProducer]:
    producer = CppProducer(group)
    producer.set_namesrv_addr(cluster.namesrv_addr)
    producer.start()
    started_at = time.monotonic()
    try:
        yield producer
    finally:
        shutdown_safely(producer, started_at)


def start_push_consumer(
    cluster: Cluster,
    group: str,
    topic: str,
    handler: Callable[[RecvMessage], int],
    *,
    orderly: bool = False,
    model: CppMessageModel = CppMessageModel.CLUSTERING,
    instance: str | None = None,
    expression: str = "*",
) -> CppPushConsumer:
    """A C++ push consumer whose callback returns the C++ consume status ``handler`` decides."""
    consumer = CppPushConsumer(group, orderly=orderly, message_model=model)
    consumer.set_namesrv_addr(cluster.namesrv_addr)
    if instance:
        consumer.set_instance_name(instance)

    def on_message(_consumer: Any, msg: Any) -> int:
        return handler(RecvMessage(msg))

    # The wrapper's own callback turns exceptions into a *successful* status (ctypes ignores
    # them), so register the callback directly to be able to answer RECONSUME_LATER.
    from rocketmq.exceptions import ffi_check
    from rocketmq.ffi import dll

    ffi_check(dll.Subscribe(consumer._handle, topic.encode(), expression.encode()))
    consumer._register_callback(on_message)
    consumer.start()
    consumer.started_at = time.monotonic()
    return consumer


def collecting(collector: Collector) -> Callable[[RecvMessage], int]:
    def handle(msg: RecvMessage) -> int:
        collector.add(delivery(msg))
        return int(_CConsumeStatus.CONSUME_SUCCESS.value)

    return handle


async def stop_consumer(consumer: CppPushConsumer) -> None:
    await asyncio.to_thread(shutdown_safely, consumer, consumer.started_at)


async def committed_to_end(conn: Connection, group: str, topic: str, queues: int = 4) -> None:
    """Until ``group``'s committed offset on every queue of ``topic`` is the queue's end: the
    consumer finished everything stored, so nothing more is due to it."""

    async def at_end() -> bool:
        for queue_id in range(queues):
            query = {"consumerGroup": group, "topic": topic, "queueId": queue_id}
            committed = await call(conn, RequestCode.QUERY_CONSUMER_OFFSET, query)
            if committed.code != ResponseCode.SUCCESS:
                return False
            if int(committed.ext_fields["offset"]) != await max_offset(conn, topic, queue_id):
                return False
        return True

    await wait_until(at_end, timeout=20)


async def test_sync_send_and_clustering_consume_keep_every_field(
    cluster: Cluster, connect_to: ConnectTo
) -> None:
    """Scenarios 1 and 2: 1,000 synchronous sends all SEND_OK, and a clustering push consumer
    receives every one, once, with body, tags, keys and properties intact."""
    topic = "CppSync"

    def produce() -> list[Any]:
        with cpp_producer(cluster, "cpp-sync-producer") as producer:
            return [
                producer.send_sync(
                    cpp_message(topic, f"body-{i}", tags=f"tag{i % 3}", keys=f"key-{i}", color=f"c{i}")
                )
                for i in range(1000)
            ]

    results = await asyncio.to_thread(produce)
    assert [r.status for r in results] == [SendStatus.OK] * 1000
    assert len({r.msg_id for r in results}) == 1000

    collector = Collector()
    consumer = start_push_consumer(cluster, "cpp-sync-consumer", topic, collecting(collector))
    try:
        await collector.wait_count(1000)
    finally:
        await stop_consumer(consumer)
    # Stopped, with its progress at the end of every queue: no delivery is still to come.
    await committed_to_end(await connect_to(cluster.brokers["broker-a"].port), "cpp-sync-consumer", topic)
    items = list(collector.items)
    by_body = {item.body: item for item in items}
    assert len(by_body) == 1000
    assert len(items) == 1000, "some messages were delivered twice"
    for i in range(1000):
        item = by_body[f"body-{i}"]
        assert (item.topic, item.tags, item.keys, item.color) == (topic, f"tag{i % 3}", f"key-{i}", f"c{i}")


async def test_oneway_async_and_batch_sends_deliver(cluster: Cluster) -> None:
    """Scenario 3."""
    topic = "CppModes"
    done = threading.Event()
    async_results: list[Any] = []
    failures: list[Exception] = []

    def produce() -> Any:
        with cpp_producer(cluster, "cpp-modes-producer") as producer:
            producer.send_sync(cpp_message(topic, "warm-up"))  # routes known before oneway
            for i in range(10):
                producer.send_oneway(cpp_message(topic, f"oneway-{i}"))

            def ok(result: Any) -> None:
                async_results.append(result)
                if len(async_results) == 10:
                    done.set()

            def failed(exc: Exception) -> None:
                failures.append(exc)
                done.set()

            for i in range(10):
                producer.send_async(cpp_message(topic, f"async-{i}"), ok, failed)
            assert done.wait(30), "async sends never completed"
            batch = producer.send_batch([cpp_message(topic, f"batch-{i}", tags="b") for i in range(10)])
            # The C++ client's callback objects must stay alive until it has called them.
            time.sleep(0.2)
            return batch

    batch_result = await asyncio.to_thread(produce)
    assert not failures
    assert [r.status for r in async_results] == [SendStatus.OK] * 10
    assert batch_result.status == SendStatus.OK

    collector = Collector()
    consumer = start_push_consumer(cluster, "cpp-modes-consumer", topic, collecting(collector))
    try:
        items = await collector.wait_count(31)
    finally:
        await stop_consumer(consumer)
    bodies = {item.body for item in items}
    expected = {"warm-up"} | {f"{kind}-{i}" for kind in ("oneway", "async", "batch") for i in range(10)}
    assert bodies == expected
    assert {item.tags for item in items if item.body.startswith("batch")} == {"b"}


async def test_orderly_send_and_orderly_consume_keep_per_key_order(cluster: Cluster) -> None:
    """Scenario 4."""
    topic = "CppOrderly"
    keys = [f"order-{k}" for k in range(6)]

    def produce() -> None:
        with cpp_producer(cluster, "cpp-orderly-producer") as producer:
            for step in range(20):
                for k, key in enumerate(keys):
                    result = producer.send_orderly(cpp_message(topic, f"{key}:{step}", keys=key), k)
                    assert result.status == SendStatus.OK

    await asyncio.to_thread(produce)
    collector = Collector()
    consumer = start_push_consumer(
        cluster, "cpp-orderly-consumer", topic, collecting(collector), orderly=True
    )
    try:
        items = await collector.wait_count(len(keys) * 20)
    finally:
        await stop_consumer(consumer)
    per_key: dict[str, list[int]] = defaultdict(list)
    queue_of: dict[str, set[int]] = defaultdict(set)
    for item in items:
        key, step = item.body.split(":")
        per_key[key].append(int(step))
        queue_of[key].add(item.queue_id)
    for key in keys:
        assert per_key[key] == list(range(20)), key
        assert len(queue_of[key]) == 1  # one key, one queue


async def test_failed_consumption_retries_then_lands_in_dlq(cluster: Cluster, connect_to: ConnectTo) -> None:
    """Scenario 5: the C++ consumer answers RECONSUME_LATER; the message comes back through
    %RETRY%group with a growing reconsume count and, after the group's maximum, goes to the DLQ."""
    topic, group = "CppRetry", "cpp-retry-consumer"
    conn = await connect_to(cluster.brokers["broker-a"].port)
    config = SubscriptionGroupConfig(group_name=group, retry_max_times=2)
    response = await call(conn, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=config.encode())
    assert response.code == ResponseCode.SUCCESS

    def produce() -> None:
        with cpp_producer(cluster, "cpp-retry-producer") as producer:
            assert producer.send_sync(cpp_message(topic, "fails", keys="poison")).status == SendStatus.OK

    await asyncio.to_thread(produce)
    collector = Collector()

    def always_fail(msg: RecvMessage) -> int:
        collector.add(delivery(msg))
        return int(_CConsumeStatus.RECONSUME_LATER.value)

    consumer = start_push_consumer(cluster, group, topic, always_fail)
    try:
        items = await collector.wait_count(3, timeout=90)
        deadline = time.monotonic() + 30
        while await max_offset(conn, f"%DLQ%{group}", 0) < 1:
            assert time.monotonic() < deadline, "the message never reached the DLQ"
            await asyncio.sleep(0.2)
    finally:
        await stop_consumer(consumer)
    assert [item.reconsume_times for item in items[:3]] == [0, 1, 2]
    assert all(item.body == "fails" and item.topic == topic for item in items)
    found = await call(
        conn,
        RequestCode.QUERY_MESSAGE,
        {"topic": f"%DLQ%{group}", "key": "poison", "maxNum": 4, "beginTimestamp": 0, "endTimestamp": 2**62},
    )
    assert found.code == ResponseCode.SUCCESS
    (dead,) = decode_records(found.body)
    assert dead.body == b"fails" and dead.properties["RETRY_TOPIC"] == topic


async def test_delay_level_message_arrives_no_earlier_than_its_delay(cluster: Cluster) -> None:
    """Scenario 6 (this broker's level 3 is 3 s)."""
    await cluster.stop_broker("broker-a")
    await cluster.start_broker("broker-a", messageDelayLevel="1s 2s 3s 4s")
    topic = "CppDelay"
    collector = Collector()

    def produce(body: str, level: int = 0) -> float:
        with cpp_producer(cluster, "cpp-delay-producer") as producer:
            msg = cpp_message(topic, body)
            if level:
                msg.set_delay_time_level(level)
            sent_at = time.time()
            assert producer.send_sync(msg).status == SendStatus.OK
            return sent_at

    await asyncio.to_thread(produce, "now")
    consumer = start_push_consumer(cluster, "cpp-delay-consumer", topic, collecting(collector))
    try:
        await collector.wait_for(lambda items: any(i.body == "now" for i in items), 30)
        sent_at = await asyncio.to_thread(produce, "later", 3)
        items = await collector.wait_for(lambda items: any(i.body == "later" for i in items), 30)
    finally:
        await stop_consumer(consumer)
    later = next(i for i in items if i.body == "later")
    assert later.received_at - sent_at >= 3.0
    assert later.received_at - sent_at < 20


async def test_broadcasting_consumers_each_receive_everything(cluster: Cluster) -> None:
    """Scenario 7."""
    topic, group = "CppBroadcast", "cpp-broadcast"

    def produce() -> None:
        with cpp_producer(cluster, "cpp-broadcast-producer") as producer:
            producer.send_sync(cpp_message(topic, "create"))

    await asyncio.to_thread(produce)  # the topic exists before the consumers start
    collectors = [Collector(), Collector()]
    consumers = [
        start_push_consumer(
            cluster, group, topic, collecting(c), model=CppMessageModel.BROADCASTING, instance=f"bc{i}"
        )
        for i, c in enumerate(collectors)
    ]
    try:

        def produce_more() -> None:
            with cpp_producer(cluster, "cpp-broadcast-producer") as producer:
                for i in range(40):
                    producer.send_sync(cpp_message(topic, f"b{i}"))

        await asyncio.to_thread(produce_more)
        wanted = {f"b{i}" for i in range(40)}
        for collector in collectors:
            await collector.wait_for(lambda items: wanted <= {i.body for i in items}, 60)
    finally:
        for consumer in consumers:
            await stop_consumer(consumer)
    # Stopped: nothing more can arrive. Each member got each message once.
    for collector in collectors:
        counts = Counter(item.body for item in collector.items)
        assert {body: n for body, n in counts.items() if body != "create"} == dict.fromkeys(wanted, 1)
        assert counts["create"] <= 1


async def test_pull_consumer_reads_every_queue_from_zero(cluster: Cluster) -> None:
    """Scenario 8."""
    topic = "CppPull"

    def produce() -> None:
        with cpp_producer(cluster, "cpp-pull-producer") as producer:
            for i in range(100):
                assert producer.send_sync(cpp_message(topic, f"p{i}")).status == SendStatus.OK

    await asyncio.to_thread(produce)

    def read_all() -> list[tuple[int, int, str]]:
        consumer = CppPullConsumer("cpp-pull-consumer")
        consumer.set_namesrv_addr(cluster.namesrv_addr)
        consumer.start()
        started_at = time.monotonic()
        try:
            return [(m.queue_id, m.queue_offset, m.body.decode()) for m in consumer.pull(topic)]
        finally:
            shutdown_safely(consumer, started_at)

    rows = await asyncio.to_thread(read_all)
    assert sorted(body for _q, _o, body in rows) == sorted(f"p{i}" for i in range(100))
    per_queue: dict[int, list[int]] = defaultdict(list)
    for queue_id, offset, _body in rows:
        per_queue[queue_id].append(offset)
    assert len(per_queue) == 4
    for offsets in per_queue.values():
        assert offsets == list(range(len(offsets)))


async def create_routed_topic(cluster: Cluster, conn: Connection, topic: str, queues: int = 4) -> None:
    response = await call(
        conn,
        RequestCode.UPDATE_AND_CREATE_TOPIC,
        {"topic": topic, "readQueueNums": queues, "writeQueueNums": queues, "perm": 6},
    )
    assert response.code == ResponseCode.SUCCESS, response
    ns = await connect("127.0.0.1", cluster.namesrv_ports[0])
    try:

        async def routed() -> bool:
            found = await call(ns, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
            return found.code == ResponseCode.SUCCESS

        await wait_until(routed, timeout=20)
    finally:
        ns.close()


async def members(conn: Connection, group: str) -> list[str]:
    listed = await call(conn, RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": group})
    if listed.code != ResponseCode.SUCCESS:
        return []
    return GetConsumerListByGroupResponseBody.decode(listed.body).consumer_id_list


async def settle_into_a_split(
    producer: CppProducer, topic: str, collectors: dict[str, Collector], *, rounds: int = 12
) -> dict[str, set[int]]:
    """Send rounds of two messages per queue (by queue id) until one round is consumed with
    every queue served by exactly one member and every member serving some; returns that
    round's queue ids per member. Rebalance moves queues at once when a member joins (the
    broker notifies the others), so this takes a round or two; a group whose members each
    take every queue never gets there."""
    seen: list[dict[str, set[int]]] = []

    def send_round(bodies: dict[str, int]) -> None:
        for body, queue_id in bodies.items():
            assert producer.send_orderly(cpp_message(topic, body), queue_id).status == SendStatus.OK

    def delivered(bodies: dict[str, int]) -> bool:
        return set(bodies) <= {i.body for c in collectors.values() for i in c.items}

    for round_no in range(rounds):
        bodies = {f"r{round_no}-q{q}-{n}": q for q in range(4) for n in range(2)}
        await asyncio.to_thread(send_round, bodies)
        await wait_until(functools.partial(delivered, bodies), timeout=30)
        served = {name: {i.queue_id for i in c.items if i.body in bodies} for name, c in collectors.items()}
        seen.append(served)
        each_once = all(
            sum(1 for c in collectors.values() for i in c.items if i.body == body) == 1 for body in bodies
        )
        queue_sets = list(served.values())
        disjoint = all(not (a & b) for n, a in enumerate(queue_sets) for b in queue_sets[n + 1 :])
        if each_once and disjoint and all(queue_sets):
            return served
    raise AssertionError(f"the members never split the queues between them: {seen}")


async def test_two_clustering_consumers_split_the_queues(cluster: Cluster, connect_to: ConnectTo) -> None:
    """Two C++ consumers in one clustering group: once the second joins, each queue is served
    by one of them, and a round of messages sent then reaches the group once."""
    topic, group = "CppShared", "cpp-shared"
    conn = await connect_to(cluster.brokers["broker-a"].port)
    await create_routed_topic(cluster, conn, topic)
    collectors = {"first": Collector(), "second": Collector()}
    started: list[CppPushConsumer] = []
    producer = CppProducer("cpp-shared-producer")
    producer.set_namesrv_addr(cluster.namesrv_addr)
    producer.start()
    producer_started = time.monotonic()
    try:
        started.append(
            start_push_consumer(cluster, group, topic, collecting(collectors["first"]), instance="m1")
        )
        started.append(
            start_push_consumer(cluster, group, topic, collecting(collectors["second"]), instance="m2")
        )
        await wait_until(lambda: _count_is(members(conn, group), 2), timeout=30)
        served = await settle_into_a_split(producer, topic, collectors)
        assert sorted(len(q) for q in served.values()) == [2, 2]  # AVG allocation: 2 queues each
    finally:
        for consumer in started:
            await stop_consumer(consumer)
        await asyncio.to_thread(shutdown_safely, producer, producer_started)


async def test_orderly_consumers_lock_their_queues_and_keep_order(
    cluster: Cluster, connect_to: ConnectTo
) -> None:
    """Two orderly C++ consumers in one group: each queue is locked on the broker by a member
    (a third client can lock none of them), each serves its own queues, and every queue's
    messages are consumed in the order they were sent."""
    topic, group = "CppOrderlyShared", "cpp-orderly-shared"
    conn = await connect_to(cluster.brokers["broker-a"].port)
    await create_routed_topic(cluster, conn, topic)
    collectors = {"first": Collector(), "second": Collector()}
    started: list[CppPushConsumer] = []
    producer = CppProducer("cpp-orderly-shared-producer")
    producer.set_namesrv_addr(cluster.namesrv_addr)
    producer.start()
    producer_started = time.monotonic()
    try:
        for name, instance in (("first", "o1"), ("second", "o2")):
            started.append(
                start_push_consumer(
                    cluster, group, topic, collecting(collectors[name]), orderly=True, instance=instance
                )
            )
        await wait_until(lambda: _count_is(members(conn, group), 2), timeout=30)
        served = await settle_into_a_split(producer, topic, collectors)
        assert sorted(len(q) for q in served.values()) == [2, 2]
        queues = [MessageQueue(topic=topic, broker_name="broker-a", queue_id=q) for q in range(4)]
        body = LockBatchRequestBody(consumer_group=group, client_id="intruder", mq_set=queues).encode()
        locked = await call(conn, RequestCode.LOCK_BATCH_MQ, body=body)
        assert LockBatchResponseBody.decode(locked.body).lock_ok_mq_set == []  # all held by members
    finally:
        for consumer in started:
            await stop_consumer(consumer)
        await asyncio.to_thread(shutdown_safely, producer, producer_started)
    # Per queue, the messages came in the order sent (a re-delivery after a queue moved may
    # repeat some, never reorder them).
    for queue_id in range(4):
        bodies = [i.body for c in collectors.values() for i in sorted(c.items, key=lambda d: d.received_at)]
        mine = [b for b in bodies if f"-q{queue_id}-" in b]
        firsts = list(dict.fromkeys(mine))
        expected = sorted(firsts, key=lambda b: (int(b.split("-")[0][1:]), int(b.split("-")[2])))
        assert firsts == expected, f"queue {queue_id} out of order: {mine}"


async def _count_is(listing: Awaitable[list[str]], count: int) -> bool:
    return len(await listing) == count
