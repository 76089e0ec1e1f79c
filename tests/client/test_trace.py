"""Message traces through a real name server and broker (``traceTopicEnable=true``).

A traced producer and push consumer write ``Pub``, ``SubBefore`` and ``SubAfter`` records, a
traced transaction producer ``EndTransaction``; the records are found by the message's id
through the broker's index and decode to what happened; a custom trace topic gets them
instead; ``mqadmin queryMsgTraceById`` prints them as RocketMQ's command does.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from aiorocketmq.client import (
    Admin,
    ConsumeResult,
    LitePullConsumer,
    Message,
    MessageExt,
    Producer,
    PushConsumer,
    TransactionProducer,
    TransactionState,
)
from aiorocketmq.protocol.errors import TopicNotExistError
from aiorocketmq.protocol.names import TRACE_TOPIC
from aiorocketmq.protocol.trace import TraceContext, TraceMessageType, TraceType, decode_trace_data
from tests.client.conftest import start_cluster, unique, wait_until
from tests.cluster import Cluster
from tests.tools.conftest import mqadmin

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def cluster(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Cluster]:
    cluster = await start_cluster(Path(tmp_path_factory.mktemp("trace")), traceTopicEnable="true")
    try:
        yield cluster
    finally:
        await cluster.stop()


async def traces_of(admin: Admin, msg_id: str, topic: str = TRACE_TOPIC) -> list[TraceContext]:
    try:
        found = await admin.query_messages_by_key(topic, msg_id, max_num=64)
    except TopicNotExistError:
        return []  # a custom trace topic is routed once the broker registered it
    return [
        ctx for msg in found for ctx in decode_trace_data(msg.body.decode()) if ctx.beans[0].msg_id == msg_id
    ]


async def wait_traces(
    admin: Admin, msg_id: str, kinds: set[TraceType], topic: str = TRACE_TOPIC
) -> list[TraceContext]:
    seen: list[TraceContext] = []

    async def complete() -> bool:
        seen[:] = await traces_of(admin, msg_id, topic)
        return kinds <= {ctx.trace_type for ctx in seen}

    await wait_until(complete, timeout=30)
    return seen


async def test_trace_topic_created_by_the_broker(cluster: Cluster) -> None:
    async with Admin(cluster.namesrv_addr) as admin:
        route = await admin.topic_route(TRACE_TOPIC)
    assert [q.read_queue_nums for q in route.queue_datas] == [1]


async def test_send_and_consume_are_traced(cluster: Cluster) -> None:
    topic = unique("traced")
    producer_group, consumer_group = unique("trace_pg"), unique("trace_cg")
    consumed: asyncio.Queue[MessageExt] = asyncio.Queue()
    consumer = PushConsumer(consumer_group, cluster.namesrv_addr, enable_trace=True)
    consumer.subscribe(topic)

    @consumer.listener
    async def handle(messages: list[MessageExt]) -> ConsumeResult:
        for msg in messages:
            consumed.put_nowait(msg)
        return ConsumeResult.SUCCESS

    async with Admin(cluster.namesrv_addr) as admin:
        await admin.create_topic(topic, queue_nums=2)
        async with Producer(producer_group, cluster.namesrv_addr, enable_trace=True) as producer, consumer:
            result = await producer.send(
                Message(topic, b"traced body", tags="TagA", keys=["order-1", "user-7"])
            )
            got = await asyncio.wait_for(consumed.get(), 30)
            assert got.msg_id == result.msg_id
            records = await wait_traces(
                admin, result.msg_id, {TraceType.PUB, TraceType.SUB_BEFORE, TraceType.SUB_AFTER}
            )
        by_kind = {ctx.trace_type: ctx for ctx in records}
        pub = by_kind[TraceType.PUB]
        bean = pub.beans[0]
        assert (pub.group, pub.success, bean.topic, bean.tags, bean.keys) == (
            producer_group,
            True,
            topic,
            "TagA",
            "order-1 user-7",
        )
        assert bean.store_host == cluster.brokers["broker-a"].addr
        assert bean.body_length == len(b"traced body")
        assert bean.offset_msg_id == result.offset_msg_id
        assert bean.msg_type is TraceMessageType.NORMAL
        before, after = by_kind[TraceType.SUB_BEFORE], by_kind[TraceType.SUB_AFTER]
        assert (before.group, before.beans[0].retry_times, before.beans[0].keys) == (
            consumer_group,
            0,
            "order-1 user-7",
        )
        assert (after.group, after.success, after.context_code) == (consumer_group, True, 0)
        assert after.request_id == before.request_id
        assert after.timestamp >= before.timestamp >= pub.timestamp
        # The trace message is indexed under the message's keys too.
        by_key = await admin.query_messages_by_key(TRACE_TOPIC, "user-7")
        assert any(result.msg_id in m.body.decode() for m in by_key)

    shown = await mqadmin("queryMsgTraceById", "-n", cluster.namesrv_addr, "-i", result.msg_id)
    assert shown.code == 0, shown.err
    lines = shown.lines
    assert lines[0].split() == [
        "#Type",
        "#ProducerGroup",
        "#ClientHost",
        "#SendTime",
        "#CostTimes",
        "#Status",
    ]
    pub_row = lines[1].split()
    assert pub_row[0:2] == ["Pub", producer_group] and pub_row[-1] == "success"
    assert lines[1].index(producer_group) == lines[0].index("#ProducerGroup")
    sub_header = lines.index(
        next(line for line in lines if line.startswith("#Type") and "#ConsumerGroup" in line)
    )
    sub_row = lines[sub_header + 1].split()
    assert sub_row[0:2] == ["Sub", consumer_group] and sub_row[-1] == "success"
    as_json = await mqadmin("queryMsgTraceById", "-n", cluster.namesrv_addr, "-i", result.msg_id, "--json")
    assert as_json.code == 0, as_json.err
    assert '"msgType": "SubBefore"' in as_json.out


async def test_failed_listener_call_is_traced_as_failed(cluster: Cluster) -> None:
    topic = unique("traced_fail")
    calls: asyncio.Queue[MessageExt] = asyncio.Queue()
    consumer = PushConsumer(unique("trace_cg"), cluster.namesrv_addr, enable_trace=True)
    consumer.subscribe(topic)

    @consumer.listener
    async def handle(messages: list[MessageExt]) -> ConsumeResult:
        calls.put_nowait(messages[0])
        raise RuntimeError("boom")

    async with Admin(cluster.namesrv_addr) as admin:
        await admin.create_topic(topic, queue_nums=1)
        async with Producer(unique("plain_pg"), cluster.namesrv_addr) as producer, consumer:
            result = await producer.send(Message(topic, b"fails"))
            await asyncio.wait_for(calls.get(), 30)
            records = await wait_traces(admin, result.msg_id, {TraceType.SUB_AFTER})
    after = next(ctx for ctx in records if ctx.trace_type is TraceType.SUB_AFTER)
    assert (after.success, after.context_code) == (False, 2)  # EXCEPTION
    # The producer did not trace: no Pub record.
    assert TraceType.PUB not in {ctx.trace_type for ctx in records}


async def test_custom_trace_topic_and_transactions(cluster: Cluster) -> None:
    trace_topic = unique("MyTraces")
    topic = unique("traced_tx")
    group = unique("trace_tx_pg")

    async with Admin(cluster.namesrv_addr) as admin:
        await admin.create_topic(topic, queue_nums=1)
        async with TransactionProducer(
            group,
            cluster.namesrv_addr,
            checker=lambda msg: TransactionState.COMMIT,
            enable_trace=True,
            trace_topic=trace_topic,
        ) as producer:
            sent = await producer.send_in_transaction(
                Message(topic, b"tx"), lambda msg: TransactionState.COMMIT
            )
            msg_id = sent.send_result.msg_id
            records = await wait_traces(
                admin, msg_id, {TraceType.PUB, TraceType.END_TRANSACTION}, trace_topic
            )
        assert await traces_of(admin, msg_id) == []  # nothing in the default topic
    by_kind = {ctx.trace_type: ctx for ctx in records}
    assert by_kind[TraceType.PUB].beans[0].msg_type is TraceMessageType.TRANS_HALF
    end = by_kind[TraceType.END_TRANSACTION].beans[0]
    assert (end.transaction_state, end.from_transaction_check, end.msg_type) == (
        "COMMIT_MESSAGE",
        False,
        TraceMessageType.TRANS_COMMIT,
    )
    assert by_kind[TraceType.END_TRANSACTION].group == group


async def test_lite_pull_hand_outs_are_traced(cluster: Cluster) -> None:
    topic = unique("traced_lite")
    group = unique("trace_lite_cg")
    async with Admin(cluster.namesrv_addr) as admin:
        await admin.create_topic(topic, queue_nums=1)
        consumer = LitePullConsumer(group, cluster.namesrv_addr, enable_trace=True)
        consumer.subscribe(topic)
        async with consumer, Producer(unique("plain_pg"), cluster.namesrv_addr) as producer:
            result = await producer.send(Message(topic, b"polled", keys=["lite-1"]))
            polled: list[MessageExt] = []
            async with asyncio.timeout(30):
                while not polled:
                    polled = await consumer.poll(timeout=10)
            assert [m.msg_id for m in polled] == [result.msg_id]
            records = await wait_traces(admin, result.msg_id, {TraceType.SUB_BEFORE, TraceType.SUB_AFTER})
    after = next(ctx for ctx in records if ctx.trace_type is TraceType.SUB_AFTER)
    assert (after.group, after.success, after.beans[0].keys) == (group, True, "lite-1")
