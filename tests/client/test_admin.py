"""The admin API and the blocking facade against a real name server and broker (and, for what
spans name servers and for retention, a cluster of two name servers and a small-file broker)."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from aiorocketmq.client import (
    Admin,
    BrokerIdentity,
    ClientError,
    ConsumeFrom,
    ConsumeResult,
    Message,
    MessageExt,
    MessageQueue,
    Producer,
    PushConsumer,
    SendResult,
)
from aiorocketmq.client.blocking import BlockingAdmin, BlockingProducer, BlockingPullClient
from aiorocketmq.client.errors import BrokerError, ClientStateError, TopicNotExistError
from aiorocketmq.protocol.body import (
    ORDER_TOPIC_CONFIG,
    SubscriptionGroupConfig,
    SubscriptionGroupWrapper,
    TopicConfigSerializeWrapper,
)
from aiorocketmq.protocol.codes import PERM_READ_WRITE, Perm, RequestCode, ResponseCode, TopicSysFlag
from aiorocketmq.protocol.errors import QueryNotFoundError
from tests.cluster import Cluster

from .conftest import Collector, unique, wait_until

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def wide_cluster(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Cluster]:
    """Two name servers that route ordered topics (``orderMessageEnable``) and one broker
    registered with both, rolling its commit log every 64 KiB so that retention has files."""
    cluster = Cluster(tmp_path_factory.mktemp("wide-cluster"))
    try:
        await cluster.start_namesrv(2, orderMessageEnable=True)
        await cluster.start_broker("broker-a", mappedFileSizeCommitLog=64 * 1024)
        yield cluster
    finally:
        await cluster.stop()


def namesrv_addrs(cluster: Cluster) -> list[str]:
    return cluster.namesrv_addr.split(";")


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
    (by_order,) = await admin.query_messages_by_key(topic, "order-7")
    assert (by_order.body, by_order.msg_id, by_order.keys) == (
        b"needle",
        target.msg_id,
        ["order-7", "customer-3"],
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
    put_before = int(info["msgPutTotal"])
    config = await admin.broker_config(addr)
    assert config["brokerName"] == "broker-a"
    assert config["listenPort"] == str(cluster.brokers["broker-a"].port)
    group = unique("pg")
    async with Producer(group, cluster.namesrv_addr) as producer:
        for i in range(3):
            await producer.send(Message(unique("Conn"), f"x{i}".encode()))
        connections = await admin.producer_connections(group)
        assert [c.client_id for c in connections.connection_set] == [producer.client_id]
    # Other tests' retries and delays may put messages too, never fewer than these three.
    assert int((await admin.broker_runtime_info(addr))["msgPutTotal"]) >= put_before + 3


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


async def test_topic_with_separate_read_and_write_queues_and_flags(cluster: Cluster, admin: Admin) -> None:
    topic = unique("AdminReadWrite")
    addr = cluster.brokers["broker-a"].addr
    config = await admin.create_topic(
        topic, read_queue_nums=6, write_queue_nums=3, order=True, topic_sys_flag=TopicSysFlag.UNIT
    )
    assert (config.read_queue_nums, config.write_queue_nums, config.perm, config.order) == (6, 3, 6, True)
    # What the broker holds...
    response = await admin.instance.call(addr, RequestCode.GET_ALL_TOPIC_CONFIG, {})
    assert TopicConfigSerializeWrapper.decode(response.body).topic_config_table[topic] == config
    # ...and the route create_topic waited for and adopted: readers see 6 queues, writers 3.
    route = admin.instance.routes[topic]
    assert [
        (q.broker_name, q.read_queue_nums, q.write_queue_nums, q.perm, q.topic_sys_flag)
        for q in route.queue_datas
    ] == [("broker-a", 6, 3, 6, 1)]
    assert len(await admin.queues(topic)) == 6
    async with Producer(unique("pg"), cluster.namesrv_addr) as producer:
        assert [q.queue_id for q in await producer.queues(topic)] == [0, 1, 2]

    # Only the permission changes: create_topic returns once the name server routes it.
    await admin.create_topic(topic, read_queue_nums=6, write_queue_nums=3, perm=Perm.READ, broker_addr=addr)
    assert [
        (q.read_queue_nums, q.write_queue_nums, q.perm) for q in admin.instance.routes[topic].queue_datas
    ] == [(6, 3, Perm.READ)]
    routed = await admin.wait_for_route(
        topic, brokers=["broker-a"], read_queue_nums=6, perm=Perm.READ, timeout=1
    )
    assert routed.queue_datas[0].write_queue_nums == 3
    with pytest.raises(ClientError, match="as wanted on \\['broker-a'\\]"):
        await admin.wait_for_route(topic, brokers=["broker-a"], perm=PERM_READ_WRITE, timeout=0.3)
    with pytest.raises(ClientError, match="as wanted on \\['broker-x'\\]"):
        await admin.wait_for_route(topic, brokers=["broker-x"], timeout=0.3)
    with pytest.raises(ClientError) as missing:
        await admin.wait_for_route(unique("NoSuchTopic"), timeout=0.3)
    assert isinstance(missing.value.__cause__, TopicNotExistError)
    with pytest.raises(ValueError):
        await admin.create_topic(topic, read_queue_nums=0)


async def test_brokers_by_addr(cluster: Cluster, admin: Admin) -> None:
    assert await admin.brokers_by_addr() == {
        cluster.brokers["broker-a"].addr: BrokerIdentity("DefaultCluster", "broker-a", 0)
    }


async def test_consumer_groups_of_a_topic(cluster: Cluster, admin: Admin) -> None:
    topic, committed, online = unique("AdminConsumedBy"), unique("cg_committed"), unique("cg_online")
    await admin.create_topic(topic, 2)
    assert await admin.consumer_groups_of(topic) == []
    # One group only has committed offsets, the other only a member online.
    await admin.update_consumer_offset(
        committed, MessageQueue(topic=topic, broker_name="broker-a", queue_id=1), 0
    )
    consumer = PushConsumer(online, cluster.namesrv_addr)
    consumer.subscribe(topic)

    @consumer.listener
    async def handle(messages: list[MessageExt]) -> ConsumeResult:
        return ConsumeResult.SUCCESS

    async with consumer:
        assert await admin.consumer_groups_of(topic) == sorted([committed, online])
    with pytest.raises(TopicNotExistError):
        await admin.consumer_groups_of(unique("NoSuchTopic"))


async def group_configs(admin: Admin, addr: str) -> dict[str, SubscriptionGroupConfig]:
    response = await admin.instance.call(addr, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, {})
    return SubscriptionGroupWrapper.decode(response.body).subscription_group_table


async def test_delete_subscription_group_on_one_broker(cluster: Cluster, admin: Admin) -> None:
    addr = cluster.brokers["broker-a"].addr
    group, topic = unique("cg_deleted"), unique("AdminGroupDelete")
    await admin.create_topic(topic, 1)
    queue = MessageQueue(topic=topic, broker_name="broker-a", queue_id=0)
    await admin.update_subscription_group(
        SubscriptionGroupConfig(group_name=group, retry_max_times=3), broker_addr=addr
    )
    await admin.update_consumer_offset(group, queue, 5)
    assert (await group_configs(admin, addr))[group].retry_max_times == 3

    await admin.delete_subscription_group(group, broker_addr=addr)
    assert group not in await group_configs(admin, addr)
    # Its offsets stay unless asked to go too.
    assert await admin.committed_offset(group, queue) == 5
    assert await admin.consumer_groups_of(topic) == [group]
    await admin.delete_subscription_group(group, broker_addr=addr, remove_offsets=True)
    assert await admin.consumer_groups_of(topic) == []
    assert await admin.committed_offset(group, queue) in (-1, 0)  # "none", as the broker says it


async def test_consumer_connections_on_one_broker(cluster: Cluster, admin: Admin) -> None:
    addr = cluster.brokers["broker-a"].addr
    topic, group = unique("AdminConnections"), unique("cg_conn")
    await admin.create_topic(topic, 1)
    consumer = PushConsumer(group, cluster.namesrv_addr)
    consumer.subscribe(topic, "a || b")

    @consumer.listener
    async def handle(messages: list[MessageExt]) -> ConsumeResult:
        return ConsumeResult.SUCCESS

    async with consumer:
        connections = await admin.consumer_connections(group, broker_addr=addr)
        assert [c.client_id for c in connections.connection_set] == [consumer.client_id]
        assert connections.subscription_table[topic].sub_string == "a || b"
    # Aimed at one broker, its refusal comes as is (over all masters: "not online").
    with pytest.raises(BrokerError) as refused:
        await admin.consumer_connections(unique("cg_absent"), broker_addr=addr)
    assert refused.value.code == ResponseCode.CONSUMER_NOT_ONLINE
    with pytest.raises(ClientError, match="is not online"):
        await admin.consumer_connections(unique("cg_absent"))


async def test_kv_config_on_every_name_server(wide_cluster: Cluster) -> None:
    key = unique("key")
    first, second = namesrv_addrs(wide_cluster)
    async with (
        Admin(wide_cluster.namesrv_addr) as admin,
        Admin(first) as on_first,
        Admin(second) as on_second,
    ):
        assert await admin.kv_config("ADMIN_TEST", key) is None
        await admin.update_kv_config("ADMIN_TEST", key, "v1")
        assert [await a.kv_config("ADMIN_TEST", key) for a in (on_first, on_second)] == ["v1", "v1"]
        await admin.update_kv_config("ADMIN_TEST", key, "v2")
        assert [await a.kv_config("ADMIN_TEST", key) for a in (on_first, on_second)] == ["v2", "v2"]
        await admin.delete_kv_config("ADMIN_TEST", key)
        assert [await a.kv_config("ADMIN_TEST", key) for a in (on_first, on_second)] == [None, None]
        await admin.delete_kv_config("ADMIN_TEST", key)  # already gone: still fine


async def test_ordered_topic_conf_routes_producers(wide_cluster: Cluster) -> None:
    topic = unique("AdminOrdered")
    async with Admin(wide_cluster.namesrv_addr) as admin:
        await admin.create_topic(topic, 4, order=True)
        assert await admin.order_topic_conf(topic) == {}
        assert await admin.update_order_topic_conf(topic, {"broker-a": 2}) == "broker-a:2"
        assert await admin.order_topic_conf(topic) == {"broker-a": 2}
        for addr in namesrv_addrs(wide_cluster):
            async with Admin(addr) as one:
                assert (await one.topic_route(topic)).order_topic_conf == "broker-a:2"
        async with Producer(unique("pg"), wide_cluster.namesrv_addr) as producer:
            assert [q.queue_id for q in await producer.queues(topic)] == [0, 1]  # not all 4

        merged = await admin.update_order_topic_conf(topic, {"broker-b": 3}, merge=True)
        assert merged == "broker-a:2;broker-b:3"
        assert (
            await admin.update_order_topic_conf(topic, {"broker-a": 1}, merge=True) == "broker-a:1;broker-b:3"
        )
        assert await admin.update_order_topic_conf(topic, {"broker-b": 1}) == "broker-b:1"
        assert await admin.kv_config(ORDER_TOPIC_CONFIG, topic) == "broker-b:1"
        with pytest.raises(ValueError):
            await admin.update_order_topic_conf(topic, {"broker-a": 0})
        await admin.delete_kv_config(ORDER_TOPIC_CONFIG, topic)
        assert await admin.order_topic_conf(topic) == {}
        assert (await admin.topic_route(topic)).order_topic_conf is None


async def test_trigger_delete_files_runs_retention_now(wide_cluster: Cluster) -> None:
    topic = unique("AdminRetention")
    addr = wide_cluster.brokers["broker-a"].addr
    async with Admin(wide_cluster.namesrv_addr) as admin:
        await admin.create_topic(topic, 1)
        queue = MessageQueue(topic=topic, broker_name="broker-a", queue_id=0)
        async with Producer(unique("pg"), wide_cluster.namesrv_addr) as producer:
            for batch in range(6):  # 300 messages of 1 KB: several 64 KiB commit-log files
                await producer.send_batch(
                    [Message(topic, b"r" * 1000, keys=[f"{batch}-{i}"]) for i in range(50)], queue=queue
                )
        await wait_until(lambda: _max_offset_is(admin, queue, 300), timeout=10)
        assert await admin.min_offset(queue) == 0

        remark = await admin.trigger_delete_files(addr)
        deleted = re.fullmatch(r"(\d+) commit log files deleted", remark)
        assert deleted is not None and int(deleted.group(1)) >= 4, remark
        await wait_until(lambda: _min_offset_above(admin, queue, 200), timeout=30)
        assert await admin.max_offset(queue) == 300
        # Only the file being written is left.
        assert await admin.trigger_delete_files(addr) == "0 commit log files deleted"


async def _max_offset_is(admin: Admin, queue: MessageQueue, offset: int) -> bool:
    return await admin.max_offset(queue) == offset


async def _min_offset_above(admin: Admin, queue: MessageQueue, offset: int) -> bool:
    return await admin.min_offset(queue) > offset


async def test_blocking_admin_for_scripts(wide_cluster: Cluster) -> None:
    topic, key = unique("BlockingAdmin"), unique("key")
    addr = wide_cluster.brokers["broker-a"].addr

    def script() -> None:
        with BlockingAdmin(wide_cluster.namesrv_addr) as admin:
            config = admin.create_topic(topic, read_queue_nums=4, write_queue_nums=2)
            assert (config.read_queue_nums, config.write_queue_nums) == (4, 2)
            route = admin.wait_for_route(topic, brokers=["broker-a"], read_queue_nums=4, write_queue_nums=2)
            assert route.queue_datas[0].perm == PERM_READ_WRITE
            assert admin.brokers_by_addr()[addr].broker_name == "broker-a"
            assert admin.master_addrs() == [addr]
            admin.update_kv_config("BLOCKING_TEST", key, "v")
            assert admin.kv_config("BLOCKING_TEST", key) == "v"
            admin.delete_kv_config("BLOCKING_TEST", key)
            assert admin.kv_config("BLOCKING_TEST", key) is None
            assert admin.update_order_topic_conf(topic, {"broker-a": 2}) == "broker-a:2"
            assert admin.order_topic_conf(topic) == {"broker-a": 2}
            group = unique("cg")
            admin.update_consumer_offset(
                group, MessageQueue(topic=topic, broker_name="broker-a", queue_id=0), 0
            )
            assert admin.consumer_groups_of(topic) == [group]
            admin.update_subscription_group(SubscriptionGroupConfig(group_name=group), broker_addr=addr)
            admin.delete_subscription_group(group, broker_addr=addr, remove_offsets=True)
            assert admin.consumer_groups_of(topic) == []
            with pytest.raises(BrokerError):
                admin.consumer_connections(group, broker_addr=addr)
            assert re.fullmatch(r"\d+ commit log files deleted", admin.trigger_delete_files(addr))

    await asyncio.to_thread(script)
