"""Producers against a real name server and broker: sync, oneway, batch and sharded sends,
compression, auto-created topics, and the errors a caller sees."""

from __future__ import annotations

import asyncio
import zlib
from collections import Counter

import pytest

from aiorocketmq.client import (
    Admin,
    ClientOptions,
    ConsumeFrom,
    ConsumeResult,
    Message,
    MessageExt,
    MessageQueue,
    Producer,
    PullClient,
    PushConsumer,
    SendFailedError,
    SendStatus,
)
from aiorocketmq.client.errors import (
    BrokerError,
    ClientError,
    ClientStateError,
    ConnectionClosedError,
    NoRouteError,
    RequestTimeoutError,
)
from aiorocketmq.protocol.codes import MessageSysFlag, RequestCode
from aiorocketmq.protocol.command import RemotingCommand
from aiorocketmq.protocol.message import decode_offset_msg_id
from aiorocketmq.protocol.transport import Connection, Server, connect
from tests.cluster import Cluster
from tests.namesrv.fake_broker import FakeBroker

from .conftest import Collector, unique

pytestmark = pytest.mark.asyncio(loop_scope="module")


async def read_all(cluster: Cluster, topic: str, expression: str = "*") -> list[MessageExt]:
    """Every stored message of ``topic`` (tag-filtered), through the offset-range pull client."""
    async with PullClient(unique("reader"), cluster.namesrv_addr) as reader:
        found = []
        for queue in await reader.queues(topic):
            end = await reader.max_offset(queue)
            found.extend([msg async for msg in reader.read(queue, 0, end, expression=expression)])
        return found


async def test_a_busy_polling_producer_polls_its_broker_connection_and_sends_as_ever(
    cluster: Cluster, admin: Admin
) -> None:
    topic = unique("Polled")
    await admin.create_topic(topic, 2)
    options = ClientOptions(busy_poll=0.0005)
    async with Producer(unique("pg"), cluster.namesrv_addr, options=options) as producer:
        results = [await producer.send(Message(topic, f"m{i}".encode())) for i in range(20)]
        assert all(r.status is SendStatus.SEND_OK for r in results)
        by_queue: dict[int, list[int]] = {}
        for r in results:
            by_queue.setdefault(r.queue.queue_id, []).append(r.queue_offset)
        assert all(offsets == list(range(len(offsets))) for offsets in by_queue.values()), by_queue
        broker = await producer._instance.find_broker_addr(results[0].queue.broker_name, topic=topic)
        assert (await producer._instance.connection(broker)).busy_poll == 0.0005
    with pytest.raises(ClientError, match="busy_poll"):
        ClientOptions(busy_poll=0.5)


@pytest.mark.parametrize("serialization", ["msgpack", "json"])
async def test_send_and_push_consume_end_to_end(cluster: Cluster, admin: Admin, serialization: str) -> None:
    topic = unique("Orders")
    await admin.create_topic(topic, 4)
    options = ClientOptions(serialization=serialization)  # type: ignore[arg-type]
    sent = {}
    async with Producer(unique("pg"), cluster.namesrv_addr, options=options) as producer:
        for i in range(40):
            msg = Message(
                topic,
                f"order-{i}".encode(),
                tags="paid",
                keys=[f"order-{i}", "k2"],
                properties={"color": "red"},
            )
            result = await producer.send(msg)
            assert result.status is SendStatus.SEND_OK
            sent[result.msg_id] = (i, result)
    collector = Collector()
    consumer = PushConsumer(
        unique("cg"), cluster.namesrv_addr, consume_from=ConsumeFrom.FIRST_OFFSET, options=options
    )
    consumer.subscribe(topic, "paid")

    @consumer.listener
    async def handle(messages: list[MessageExt]) -> ConsumeResult:
        await collector.add(messages)
        return ConsumeResult.SUCCESS

    async with consumer:
        received = await collector.wait_count(40)
    assert len({m.msg_id for m in received}) == 40
    for msg in received:
        i, result = sent[msg.msg_id]
        assert msg.body == f"order-{i}".encode()
        assert msg.topic == topic
        assert msg.tags == "paid"
        assert msg.keys == [f"order-{i}", "k2"]
        assert msg.properties["color"] == "red"
        assert (msg.queue_id, msg.queue_offset) == (result.queue.queue_id, result.queue_offset)
        assert msg.offset_msg_id == result.offset_msg_id
        assert msg.reconsume_times == 0
        assert 0 < msg.born_timestamp <= msg.store_timestamp


async def test_sends_cycle_round_robin_over_all_queues(cluster: Cluster, admin: Admin) -> None:
    topic = unique("RoundRobin")
    await admin.create_topic(topic, 4)
    async with Producer(unique("pg"), cluster.namesrv_addr) as producer:
        results = [await producer.send(Message(topic, b"x")) for _ in range(20)]
    per_queue = Counter(r.queue.queue_id for r in results)
    assert per_queue == {0: 5, 1: 5, 2: 5, 3: 5}
    for r in results:
        assert r.queue.topic == topic and r.queue.broker_name == "broker-a"
        addr, commit_log_offset = decode_offset_msg_id(r.offset_msg_id)
        assert addr == cluster.brokers["broker-a"].addr
        assert commit_log_offset >= 0
    # offsets in each queue are consecutive from 0
    for queue_id in range(4):
        offsets = sorted(r.queue_offset for r in results if r.queue.queue_id == queue_id)
        assert offsets == list(range(5))


async def test_shard_key_sends_every_message_of_a_key_to_one_queue(cluster: Cluster, admin: Admin) -> None:
    topic = unique("Sharded")
    await admin.create_topic(topic, 8)
    queues_of: dict[str, set[int]] = {}
    async with Producer(unique("pg"), cluster.namesrv_addr) as producer:
        for i in range(60):
            key = f"order-{i % 6}"
            result = await producer.send(Message(topic, f"{key}:{i}".encode()), shard_key=key)
            queues_of.setdefault(key, set()).add(result.queue.queue_id)
        explicit = (await producer.queues(topic))[5]
        result = await producer.send(Message(topic, b"exact"), queue=explicit)
        assert result.queue == explicit
    assert all(len(ids) == 1 for ids in queues_of.values()), queues_of
    assert len({next(iter(ids)) for ids in queues_of.values()}) > 1  # keys spread over queues
    stored = await read_all(cluster, topic)
    for key in queues_of:
        seq = [
            int(m.body.split(b":")[1])
            for m in sorted(stored, key=lambda m: m.queue_offset)
            if m.body.startswith(key.encode() + b":")
        ]
        assert seq == sorted(seq)


async def test_send_batch_stores_consecutive_offsets_with_their_own_ids(
    cluster: Cluster, admin: Admin
) -> None:
    topic = unique("Batch")
    await admin.create_topic(topic, 2)
    messages = [Message(topic, f"b{i}".encode(), tags="t", keys=[f"key{i}"]) for i in range(50)]
    async with Producer(unique("pg"), cluster.namesrv_addr) as producer:
        result = await producer.send_batch(messages)
    ids = result.msg_id.split(",")
    assert len(ids) == 50 and len(set(ids)) == 50
    assert ids == [m.unique_id for m in messages]
    stored = sorted(await read_all(cluster, topic), key=lambda m: m.queue_offset)
    assert [m.body for m in stored] == [f"b{i}".encode() for i in range(50)]
    assert [m.queue_offset for m in stored] == list(range(result.queue_offset, result.queue_offset + 50))
    assert {m.queue_id for m in stored} == {result.queue.queue_id}
    assert [m.msg_id for m in stored] == ids
    assert stored[7].keys == ["key7"]


async def test_batch_rules_are_checked_before_sending(cluster: Cluster) -> None:
    async with Producer(unique("pg"), cluster.namesrv_addr) as producer:
        with pytest.raises(ClientError, match="one topic"):
            await producer.send_batch([Message("A", b"1"), Message("B", b"2")])
        with pytest.raises(ClientError, match="delayed"):
            await producer.send_batch([Message("A", b"1", delay_level=2)])
        with pytest.raises(ClientError, match="empty"):
            await producer.send_batch([])
        with pytest.raises(ClientError, match="body is empty"):
            await producer.send_batch([Message("A", b"1"), Message("A", b"")])
        whole = [Message("A", b"x" * (1024 * 1024)) for _ in range(4)]  # 4 MiB of bodies, plus heads
        with pytest.raises(ClientError, match=r"the batch is 419\d{4} bytes, more than the 4194304 allowed"):
            await producer.send_batch(whole)
        with pytest.raises(ClientError, match="body is empty"):
            await producer.send(Message("A", b""))
        with pytest.raises(ClientError, match="topic name"):
            await producer.send(Message("bad topic!", b"x"))


async def test_send_oneway_delivers_without_a_result(cluster: Cluster, admin: Admin) -> None:
    topic = unique("Oneway")
    await admin.create_topic(topic, 2)
    async with Producer(unique("pg"), cluster.namesrv_addr) as producer:
        for i in range(30):
            assert await producer.send_oneway(Message(topic, f"o{i}".encode())) is None
        # oneway has no acknowledgement: poll the broker until all arrived
        queues = await producer.queues(topic)
        deadline = asyncio.get_running_loop().time() + 10
        while sum([await admin.max_offset(q) for q in queues]) < 30:
            assert asyncio.get_running_loop().time() < deadline, "oneway messages did not arrive"
            await asyncio.sleep(0.05)
    assert sorted(m.body for m in await read_all(cluster, topic)) == sorted(
        f"o{i}".encode() for i in range(30)
    )


async def test_large_bodies_travel_compressed_and_arrive_intact(cluster: Cluster, admin: Admin) -> None:
    topic = unique("Large")
    await admin.create_topic(topic, 1)
    big = bytes(range(256)) * 400  # 100 KiB, compressible
    small = b"s" * 4095
    async with Producer(unique("pg"), cluster.namesrv_addr) as producer:
        await producer.send(Message(topic, big))
        await producer.send(Message(topic, small))
    async with PullClient(unique("reader"), cluster.namesrv_addr) as reader:
        (queue,) = await reader.queues(topic)
        result = await reader.pull(queue, 0, 10)
    first, second = result.messages
    assert first.body == big and first.sys_flag & MessageSysFlag.COMPRESSED
    assert first.store_size < len(big) // 10  # stored compressed
    assert second.body == small and not second.sys_flag & MessageSysFlag.COMPRESSED
    assert zlib.crc32(first.body) == zlib.crc32(big)


async def test_unknown_topic_is_auto_created_through_tbw102(cluster: Cluster, admin: Admin) -> None:
    topic = unique("AutoCreated")
    async with Producer(unique("pg"), cluster.namesrv_addr) as producer:
        results = [await producer.send(Message(topic, f"a{i}".encode())) for i in range(8)]
        assert {r.status for r in results} == {SendStatus.SEND_OK}
        assert {r.queue.queue_id for r in results} == {0, 1, 2, 3}  # 4 default queues
    route = await admin.topic_route(topic)
    assert [(q.broker_name, q.write_queue_nums) for q in route.queue_datas] == [("broker-a", 4)]
    assert len(await read_all(cluster, topic)) == 8


async def test_the_producer_checks_the_4_mib_body_limit_itself(cluster: Cluster, admin: Admin) -> None:
    """A body of 4 MiB + 1 byte is refused by the client before it is sent, although this
    one compresses to almost nothing and the broker would store it; 4 MiB exactly is sent."""
    topic = unique("Limit")
    await admin.create_topic(topic, 1)
    queue = MessageQueue(topic=topic, broker_name="broker-a", queue_id=0)
    limit = 4 * 1024 * 1024
    async with Producer(unique("pg"), cluster.namesrv_addr) as producer:
        with pytest.raises(ClientError, match=f"more than the {limit} allowed") as info:
            await producer.send(Message(topic, b"a" * (limit + 1)), queue=queue)
        assert type(info.value) is ClientError  # not a broker's refusal, not a failed send
        result = await producer.send(Message(topic, b"a" * limit), queue=queue)
    assert result.status is SendStatus.SEND_OK
    assert await admin.max_offset(queue) == 1  # only the second one reached the broker
    (stored,) = await read_all(cluster, topic)
    assert len(stored.body) == limit


async def test_broker_refusal_surfaces_as_broker_error(cluster: Cluster) -> None:
    async with Producer(unique("pg"), cluster.namesrv_addr) as producer:
        with pytest.raises((SendFailedError, BrokerError)) as info:
            await producer.send(Message("SCHEDULE_TOPIC_XXXX", b"not allowed"))
    error = info.value
    errors = error.errors if isinstance(error, SendFailedError) else [error]
    assert errors and all(isinstance(e, BrokerError) for e in errors)


async def test_send_before_start_and_after_shutdown_is_refused(cluster: Cluster) -> None:
    producer = Producer(unique("pg"), cluster.namesrv_addr)
    with pytest.raises(ClientStateError, match="not started"):
        await producer.send(Message("T", b"x"))
    await producer.start()
    with pytest.raises(ClientStateError, match="already started"):
        await producer.start()
    await producer.shutdown()
    with pytest.raises(ClientStateError, match="shut down"):
        await producer.send(Message("T", b"x"))


async def test_no_route_when_topic_missing_and_auto_create_is_off(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    from .conftest import start_cluster

    strict = await start_cluster(tmp_path_factory.mktemp("strict"), autoCreateTopicEnable="false")
    try:
        async with Producer(unique("pg"), strict.namesrv_addr) as producer:
            with pytest.raises(NoRouteError, match="does not exist"):
                await producer.send(Message(unique("Missing"), b"x"))
    finally:
        await strict.stop()


async def test_send_times_out_and_fails_over_when_a_broker_never_answers(cluster: Cluster) -> None:
    """A broker that accepts sends but never answers: each attempt times out within the
    send's budget, and the caller gets every attempt's timeout."""
    silent = Server(
        {
            RequestCode.SEND_MESSAGE_V2: lambda conn, cmd: None,
            RequestCode.HEART_BEAT: lambda c, cmd: cmd.response(),
        }
    )
    port = await silent.listen("127.0.0.1", 0)
    topic = unique("Silent")
    ns_host, ns_port = cluster.namesrv_addr.split(":")
    conn: Connection = await connect(ns_host, int(ns_port))
    fake = FakeBroker(conn, "SilentCluster", unique("silent"), f"127.0.0.1:{port}", topics={topic: 2})
    try:
        response: RemotingCommand = await fake.register()
        assert response.code == 0
        budget = 1.5
        async with Producer(unique("pg"), cluster.namesrv_addr, send_timeout=budget) as producer:
            loop = asyncio.get_running_loop()
            began = loop.time()
            with pytest.raises(SendFailedError) as info:
                await producer.send(Message(topic, b"lost"))
            elapsed = loop.time() - began
        # Three attempts each given the whole budget would take 3 x 1.5 s; one budget plus
        # the room a loaded machine needs stays well below that.
        assert budget - 0.1 < elapsed < 2 * budget
        assert info.value.errors and all(
            isinstance(e, (RequestTimeoutError, TimeoutError)) for e in info.value.errors
        )
    finally:
        conn.close()
        await silent.close()


async def test_a_send_to_a_dead_broker_states_its_cause_once_with_a_count(cluster: Cluster) -> None:
    """A send rides out an unreachable broker until its budget runs out, failing the same way
    on every attempt: the error says so once, with how often, instead of once per attempt."""
    probe = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    dead_port = probe.sockets[0].getsockname()[1]
    probe.close()
    await probe.wait_closed()  # nothing listens there any more: every connect is refused
    topic = unique("Dead")
    ns_host, ns_port = cluster.namesrv_addr.split(":")
    conn: Connection = await connect(ns_host, int(ns_port))
    fake = FakeBroker(conn, "DeadCluster", unique("dead"), f"127.0.0.1:{dead_port}", topics={topic: 2})
    try:
        assert (await fake.register()).code == 0
        async with Producer(unique("pg"), cluster.namesrv_addr, send_timeout=1.0) as producer:
            with pytest.raises(SendFailedError) as info:
                await producer.send(Message(topic, b"lost"))
    finally:
        conn.close()
    error = info.value
    refused = [e for e in error.errors if isinstance(e, ConnectionClosedError)]
    assert len(refused) >= 3, error.errors  # rode it out: several attempts
    text = str(error)
    assert text.count(f"127.0.0.1:{dead_port}") == 1, text
    assert f"(x{len(refused)})" in text, text
    assert f"failed after {len(refused)} attempt(s)" in text, text
    assert error.brokers[: len(refused)] == [fake.name] * len(refused)
