"""The admin API and the blocking facade against a real name server and broker."""

from __future__ import annotations

import asyncio
import time

import pytest

from client import (
    Admin,
    ConsumeFrom,
    ConsumeResult,
    Message,
    MessageExt,
    MessageQueue,
    Producer,
    PushConsumer,
    SendResult,
)
from client.blocking import BlockingAdmin, BlockingProducer, BlockingPullClient
from client.errors import ClientStateError, TopicNotExistError
from protocol.errors import QueryNotFoundError
from tests.cluster import Cluster

from .conftest import Collector, unique, wait_until

pytestmark = pytest.mark.asyncio(loop_scope="module")


async def test_topics_routes_and_cluster_info(cluster: Cluster, admin: Admin) -> None:
    topic = unique("AdminTopic")
    await admin.create_topic(topic, 6)
    route = await admin.topic_route(topic)
    assert [(q.broker_name, q.read_queue_nums, q.write_queue_nums, q.perm) for q in route.queue_datas] == [
        ("broker-a", 6, 6, 6)
    ]
    assert [q.queue_id for q in await admin.queues(topic)] == list(range(6))
    assert topic in await admin.topic_list()
    info = await admin.cluster_info()
    assert info.cluster_addr_table == {"DefaultCluster": ["broker-a"]}
    assert await admin.master_addrs() == [cluster.brokers["broker-a"].addr]
    await admin.delete_topic(topic)
    with pytest.raises(TopicNotExistError):
        await admin.instance.fetch_route(topic)
    assert topic not in await admin.topic_list()


async def test_offsets_stats_and_lag(cluster: Cluster, admin: Admin) -> None:
    topic = unique("AdminStats")
    group = unique("cg")
    await admin.create_topic(topic, 2)
    before = time.time()
    async with Producer(unique("pg"), cluster.namesrv_addr) as producer:
        queues = await producer.queues(topic)
        for i in range(30):
            await producer.send(Message(topic, f"{i}".encode()), queue=queues[i % 2])
    stats = await admin.topic_stats(topic)
    assert {q.queue_id: (s.min_offset, s.max_offset) for q, s in stats.items()} == {0: (0, 15), 1: (0, 15)}
    assert all(s.last_update_timestamp / 1000 >= before - 1 for s in stats.values())
    assert await admin.max_offset(queues[0]) == 15
    assert await admin.min_offset(queues[0]) == 0
    assert await admin.search_offset(queues[0], before - 60) == 0
    assert await admin.earliest_store_time(queues[0]) >= before - 1
    assert await admin.committed_offset(group, queues[0]) in (-1, 0)
    await admin.update_consumer_offset(group, queues[0], 10)
    await admin.update_consumer_offset(group, queues[1], 4)
    assert await admin.committed_offset(group, queues[0]) == 10
    consume = await admin.consume_stats(group, topic)
    assert {q.queue_id: (w.broker_offset, w.consumer_offset) for q, w in consume.offset_table.items()} == {
        0: (15, 10),
        1: (15, 4),
    }
    assert await admin.consumer_lag(group, topic) == 5 + 11


async def test_query_messages_by_id_and_key(cluster: Cluster, admin: Admin) -> None:
    topic = unique("AdminQuery")
    await admin.create_topic(topic, 2)
    async with Producer(unique("pg"), cluster.namesrv_addr) as producer:
        target = await producer.send(Message(topic, b"needle", keys=["order-7", "customer-3"]))
        for i in range(10):
            await producer.send(Message(topic, f"hay{i}".encode(), keys=[f"order-{100 + i}"]))
        await producer.send(Message(topic, b"needle-2", keys=["customer-3"]))

    async def indexed() -> bool:
        try:
            return len(await admin.query_messages_by_key(topic, "customer-3")) == 2
        except QueryNotFoundError:
            return False

    await wait_until(indexed, timeout=10)  # the index is built asynchronously by the broker
    by_key = await admin.query_messages_by_key(topic, "customer-3")
    assert sorted(m.body for m in by_key) == [b"needle", b"needle-2"]
    by_unique = await admin.query_message_by_id(topic, target.msg_id)
    assert by_unique.body == b"needle" and by_unique.keys == ["order-7", "customer-3"]
    by_offset_id = await admin.query_message_by_id(topic, target.offset_msg_id)
    assert by_offset_id.body == b"needle"
    viewed = await admin.view_message(target.offset_msg_id)
    assert (viewed.queue_id, viewed.queue_offset) == (target.queue.queue_id, target.queue_offset)
    assert await admin.query_messages_by_key(topic, "order-7") == [by_unique] or (
        [m.body for m in await admin.query_messages_by_key(topic, "order-7")] == [b"needle"]
    )
    with pytest.raises(QueryNotFoundError):
        await admin.query_message_by_id(topic, "0" * 32)


async def test_reset_offsets_by_time_rewinds_a_running_consumer(cluster: Cluster, admin: Admin) -> None:
    topic = unique("AdminReset")
    group = unique("cg")
    await admin.create_topic(topic, 2)
    collector = Collector()
    consumer = PushConsumer(group, cluster.namesrv_addr, consume_from=ConsumeFrom.FIRST_OFFSET)
    consumer.subscribe(topic)

    @consumer.listener
    async def handle(messages: list[MessageExt]) -> ConsumeResult:
        await collector.add(messages)
        return ConsumeResult.SUCCESS

    async with Producer(unique("pg"), cluster.namesrv_addr) as producer:
        for i in range(10):
            await producer.send(Message(topic, f"early{i}".encode()))
        await asyncio.sleep(0.05)  # a store-time boundary between the two halves
        boundary = time.time()
        await asyncio.sleep(0.05)
        for i in range(10):
            await producer.send(Message(topic, f"late{i}".encode()))
    async with consumer:
        await collector.wait_count(20)
        connections = await admin.consumer_connections(group)
        assert [c.client_id for c in connections.connection_set] == [consumer.client_id]
        assert topic in connections.subscription_table
        offsets = await admin.reset_offset_by_time(group, topic, boundary)
        assert sum(offsets.values()) == 10  # each queue moves to its first "late" message
        await collector.wait_count(30)
    again = collector.bodies()[20:]
    assert sorted(again) == sorted(f"late{i}".encode() for i in range(10))


async def test_broker_runtime_info_config_and_producer_connections(cluster: Cluster, admin: Admin) -> None:
    addr = cluster.brokers["broker-a"].addr
    info = await admin.broker_runtime_info(addr)
    assert info["brokerName"] == "broker-a"
    assert int(info["msgPutTotal"]) >= 0
    config = await admin.broker_config(addr)
    assert config["brokerName"] == "broker-a"
    assert config["listenPort"] == str(cluster.brokers["broker-a"].port)
    group = unique("pg")
    async with Producer(group, cluster.namesrv_addr) as producer:
        await producer.send(Message(unique("Conn"), b"x"))
        connections = await admin.producer_connections(group)
        assert [c.client_id for c in connections.connection_set] == [producer.client_id]


async def test_blocking_facade_for_scripts_and_executors(cluster: Cluster, admin: Admin) -> None:
    topic = unique("Blocking")
    group = unique("spark")
    ns = cluster.namesrv_addr

    with pytest.raises(ClientStateError, match="running event loop"):
        BlockingAdmin(ns)

    def script() -> tuple[list[SendResult], list[bytes], list[bytes], int, int]:
        with BlockingAdmin(ns) as blocking_admin:
            blocking_admin.create_topic(topic, 2)
            assert len(blocking_admin.queues(topic)) == 2
        with BlockingProducer(unique("pg"), ns) as producer:
            messages = [
                Message(topic, f"row{i}".encode(), tags="keep" if i % 3 else "drop") for i in range(600)
            ]
            results = producer.send_all(messages)
        with BlockingPullClient(group, ns) as reader:
            q0, q1 = reader.queues(topic)
            # the broker indexes stored messages asynchronously: read up to what it reports
            deadline = time.monotonic() + 10
            while reader.max_offset(q0) + reader.max_offset(q1) < 600:
                assert time.monotonic() < deadline, "sent messages never became readable"
                time.sleep(0.01)
            end0 = reader.max_offset(q0)
            rows = reader.read(q0, 0, end0, expression="keep")
            first_ten = reader.read(q1, 0, 10)
            reader.commit(q0, end0)
            committed = reader.committed(q0)
        return results, [m.body for m in rows], [m.body for m in first_ten], end0, committed

    results, rows, first_ten, end0, committed = await asyncio.to_thread(script)
    # 600 rows went as batches of 256, 256 and 88, alternating between the two queues
    assert [len(r.msg_id.split(",")) for r in results] == [256, 256, 88]
    assert results[0].queue != results[1].queue
    in_q0 = [
        i
        for b, r in enumerate(results)
        if r.queue.queue_id == 0
        for i in range(b * 256, min(600, b * 256 + 256))
    ]
    assert committed == end0 == len(in_q0)
    # concurrent batches to one queue may be stored in either order
    assert sorted(int(r[3:]) for r in rows) == [i for i in in_q0 if i % 3]  # "drop" rows filtered out
    assert len(first_ten) == 10
    assert (
        await admin.committed_offset(group, MessageQueue(topic=topic, broker_name="broker-a", queue_id=0))
        == end0
    )
