"""SQL92 subscriptions against a real broker with ``enablePropertyFilter=true``: only matching
messages travel (the SDK does not filter SQL92 itself, so what arrives is what the broker
chose), retries of a filtered subscription come back, lite pulls carry the expression in the
request, and malformed expressions or a broker without property filtering are refused at
subscribe time with the reason."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
import pytest_asyncio

from aiorocketmq.client import (
    Admin,
    ConsumeFrom,
    ConsumeResult,
    LitePullConsumer,
    Message,
    MessageExt,
    Producer,
    PushConsumer,
)
from aiorocketmq.client.errors import ClientError
from aiorocketmq.client.pull import pull
from aiorocketmq.protocol.body import CheckClientRequestBody, SubscriptionData
from aiorocketmq.protocol.codes import RequestCode, ResponseCode
from aiorocketmq.protocol.errors import SubscriptionParseFailedError
from tests.cluster import Cluster

from .conftest import Collector, start_cluster, unique, wait_consumed_to_end, wait_until

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def cluster(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Cluster]:
    cluster = await start_cluster(tmp_path_factory.mktemp("sql92"), enablePropertyFilter="true")
    try:
        yield cluster
    finally:
        await cluster.stop()


async def send_numbered(cluster: Cluster, topic: str, count: int) -> None:
    """``count`` messages with property ``n`` = i and tag ``even`` / ``odd``."""
    async with Producer(unique("pg"), cluster.namesrv_addr) as producer:
        for i in range(count):
            msg = Message(topic, f"m{i}".encode(), tags="even" if i % 2 == 0 else "odd")
            msg.properties["n"] = str(i)
            await producer.send(msg)


async def test_only_matching_messages_travel_and_retries_come_back(
    cluster: Cluster, admin: Admin, stopped_at_end: Callable[[PushConsumer], PushConsumer]
) -> None:
    topic = unique("SqlPush")
    await admin.create_topic(topic, 4)
    await send_numbered(cluster, topic, 60)
    collector = Collector()
    failed_once: set[bytes] = set()
    consumer = stopped_at_end(
        PushConsumer(unique("sg"), cluster.namesrv_addr, consume_from=ConsumeFrom.FIRST_OFFSET)
    )
    consumer.subscribe(topic, sql="TAGS = 'even' AND n BETWEEN 10 AND 29 AND (color IS NULL)")

    @consumer.listener
    async def handle(messages: list[MessageExt]) -> ConsumeResult:
        for msg in messages:
            if msg.body == b"m20" and msg.body not in failed_once:
                failed_once.add(msg.body)
                return ConsumeResult.RECONSUME_LATER  # comes back through %RETRY%
        await collector.add(messages)
        return ConsumeResult.SUCCESS

    await consumer.start()
    expected = {f"m{i}".encode() for i in range(10, 30, 2)}
    await collector.wait_for(lambda msgs: {m.body for m in msgs} >= expected)
    await wait_consumed_to_end(consumer, admin, topic)
    assert collector.distinct_bodies() == expected
    retried = [m for m in collector.messages if m.body == b"m20"]
    assert retried and retried[0].reconsume_times == 1
    await consumer.shutdown()


async def test_lite_pull_sends_its_expression_with_each_pull(cluster: Cluster, admin: Admin) -> None:
    topic = unique("SqlLite")
    await admin.create_topic(topic, 2)
    await send_numbered(cluster, topic, 40)
    lite = LitePullConsumer(unique("lg"), cluster.namesrv_addr, consume_from=ConsumeFrom.FIRST_OFFSET)
    lite.subscribe(topic, sql="n IN ('3', '17', '33') OR n > 37")
    await lite.start()
    try:
        got: list[MessageExt] = []

        async def polled_all() -> bool:
            got.extend(await lite.poll(timeout=0.2))
            return len(got) >= 5

        await wait_until(polled_all, timeout=20)
        assert sorted(int(m.properties["n"]) for m in got) == [3, 17, 33, 38, 39]
    finally:
        await lite.shutdown()


async def test_malformed_expressions_are_refused_with_the_reason(cluster: Cluster, admin: Admin) -> None:
    topic = unique("SqlBad")
    await admin.create_topic(topic, 1)
    consumer = PushConsumer(unique("bg"), cluster.namesrv_addr)
    with pytest.raises(ClientError, match="cannot be compared"):
        consumer.subscribe(topic, sql="n > 'x'")
    # What another client might send anyway: the broker refuses it too, with the reason.
    instance = admin.instance
    addr = cluster.brokers["broker-a"].addr
    sub = SubscriptionData(topic=topic, sub_string="n BETWEEN 5 AND 1", expression_type="SQL92")
    body = CheckClientRequestBody(client_id="c", group="bg", subscription_data=sub).encode()
    response = await instance.invoke(addr, RequestCode.CHECK_CLIENT_CONFIG, None, body)
    assert response.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED
    assert "must less than or equal" in (response.remark or "")
    good = SubscriptionData(topic=topic, sub_string="n > 1", expression_type="SQL92")
    body = CheckClientRequestBody(client_id="c", group="bg", subscription_data=good).encode()
    response = await instance.invoke(addr, RequestCode.CHECK_CLIENT_CONFIG, None, body)
    assert response.code == ResponseCode.SUCCESS
    queue = (await admin.queues(topic))[0]
    with pytest.raises(SubscriptionParseFailedError, match="parse the consumer's subscription failed"):
        await pull(instance, "bg", queue, 0, expression="n = ", expression_type="SQL92", suspend=0)


async def test_a_broker_without_property_filter_refuses_sql92(tmp_path: Path) -> None:
    plain = await start_cluster(tmp_path)
    try:
        async with Admin(plain.namesrv_addr) as admin:
            topic = unique("SqlOff")
            await admin.create_topic(topic, 1)
            consumer = PushConsumer(unique("og"), plain.namesrv_addr)
            consumer.subscribe(topic, sql="n > 1")

            @consumer.listener
            async def handle(messages: list[MessageExt]) -> ConsumeResult:
                return ConsumeResult.SUCCESS

            with pytest.raises(ClientError, match="does not support consumer to filter message by SQL92"):
                await consumer.start()
    finally:
        await plain.stop()
