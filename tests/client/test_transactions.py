"""Transactional messages against a real broker whose check-back runs every half second:
commit, rollback, and the broker asking the producer's checker about undecided ones."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from aiorocketmq.client import (
    Admin,
    ConsumeFrom,
    ConsumeResult,
    Message,
    MessageExt,
    MessageQueue,
    PushConsumer,
    SendStatus,
    TransactionProducer,
    TransactionState,
)
from aiorocketmq.client.errors import ClientError
from tests.cluster import Cluster

from .conftest import Collector, start_cluster, unique, wait_consumed_to_end, wait_no_open_transactions

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def cluster(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Cluster]:
    cluster = await start_cluster(
        tmp_path_factory.mktemp("tx"), transactionCheckInterval=500, transactionTimeOut=1000
    )
    try:
        yield cluster
    finally:
        await cluster.stop()


async def consume(cluster: Cluster, topic: str, collector: Collector) -> PushConsumer:
    consumer = PushConsumer(unique("cg"), cluster.namesrv_addr, consume_from=ConsumeFrom.FIRST_OFFSET)
    consumer.subscribe(topic)

    @consumer.listener
    async def handle(messages: list[MessageExt]) -> ConsumeResult:
        await collector.add(messages)
        return ConsumeResult.SUCCESS

    await consumer.start()
    return consumer


async def test_commit_makes_the_message_visible_only_after_the_local_transaction(
    cluster: Cluster, admin: Admin
) -> None:
    topic = unique("TxCommit")
    await admin.create_topic(topic, 1)
    queue = MessageQueue(topic=topic, broker_name="broker-a", queue_id=0)
    decided = asyncio.Event()
    running = asyncio.Event()

    async def execute(msg: Message) -> TransactionState:
        running.set()
        await decided.wait()
        return TransactionState.COMMIT

    asked: list[MessageExt] = []

    async def never_asked(msg: MessageExt) -> TransactionState:
        # The producer answers a checker's exception itself: record the call for the test.
        asked.append(msg)
        return TransactionState.COMMIT

    async with TransactionProducer(unique("txg"), cluster.namesrv_addr, checker=never_asked) as producer:
        sending = asyncio.ensure_future(
            producer.send_in_transaction(Message(topic, b"paid", keys=["tx-1"]), execute)
        )
        await running.wait()
        assert await admin.max_offset(queue) == 0  # the half message is invisible
        decided.set()
        result = await sending
        # Decided: the broker's table is empty, so it has nothing left to check.
        await wait_no_open_transactions(cluster, admin)
    assert asked == [], "a decided transaction was checked"
    assert result.state is TransactionState.COMMIT
    assert result.send_result.status is SendStatus.SEND_OK
    collector = Collector()
    consumer = await consume(cluster, topic, collector)
    try:
        (msg,) = await collector.wait_count(1)
    finally:
        await consumer.shutdown()
    assert msg.body == b"paid" and msg.topic == topic and msg.keys == ["tx-1"]
    assert msg.msg_id == result.send_result.msg_id
    assert msg.transaction_id == result.send_result.msg_id


async def test_rollback_discards_the_message(cluster: Cluster, admin: Admin) -> None:
    topic = unique("TxRollback")
    await admin.create_topic(topic, 1)

    async def checker(msg: MessageExt) -> TransactionState:
        return TransactionState.ROLLBACK

    async with TransactionProducer(unique("txg"), cluster.namesrv_addr, checker=checker) as producer:
        rolled = await producer.send_in_transaction(
            Message(topic, b"cancelled"), lambda msg: TransactionState.ROLLBACK
        )
        committed = await producer.send_in_transaction(
            Message(topic, b"kept"), lambda msg: TransactionState.COMMIT
        )
    assert rolled.state is TransactionState.ROLLBACK and committed.state is TransactionState.COMMIT
    await wait_no_open_transactions(cluster, admin)  # both decided: nothing can still turn up
    collector = Collector()
    consumer = await consume(cluster, topic, collector)
    try:
        await collector.wait_count(1)
        await wait_consumed_to_end(consumer, admin, topic)
    finally:
        await consumer.shutdown()
    assert collector.bodies() == [b"kept"]
    assert collector.messages[0].queue_offset == 0


async def test_undecided_transactions_are_resolved_by_the_check_back(cluster: Cluster, admin: Admin) -> None:
    topic = unique("TxCheck")
    await admin.create_topic(topic, 1)
    asked: list[MessageExt] = []
    ages_ms: list[float] = []

    async def checker(msg: MessageExt) -> TransactionState:
        asked.append(msg)
        ages_ms.append(time.time() * 1000 - msg.store_timestamp)
        return TransactionState.COMMIT if msg.body == b"commit-me" else TransactionState.ROLLBACK

    def failing(msg: Message) -> TransactionState:
        raise RuntimeError("local transaction crashed")

    async with TransactionProducer(unique("txg"), cluster.namesrv_addr, checker=checker) as producer:
        unknown = await producer.send_in_transaction(
            Message(topic, b"commit-me"), lambda msg: TransactionState.UNKNOWN
        )
        crashed = await producer.send_in_transaction(Message(topic, b"roll-me-back"), failing)
        assert unknown.state is TransactionState.UNKNOWN and crashed.state is TransactionState.UNKNOWN
        collector = Collector()
        consumer = await consume(cluster, topic, collector)
        try:
            (msg,) = await collector.wait_count(1, timeout=20)
            # Both resolved by the check-back, then everything stored was consumed.
            await wait_no_open_transactions(cluster, admin)
            await wait_consumed_to_end(consumer, admin, topic)
        finally:
            await consumer.shutdown()
    assert msg.body == b"commit-me" and msg.msg_id == unknown.send_result.msg_id
    assert collector.bodies() == [b"commit-me"]
    assert min(ages_ms) >= 1000, f"checked before transactionTimeOut (1 s): {ages_ms}"
    checked = {m.body: m for m in asked}
    assert set(checked) == {b"commit-me", b"roll-me-back"}
    assert checked[b"commit-me"].msg_id == unknown.send_result.msg_id
    assert checked[b"commit-me"].topic == topic


async def test_a_transaction_producer_needs_a_checker(cluster: Cluster) -> None:
    with pytest.raises(ClientError, match="checker"):
        TransactionProducer(unique("txg"), cluster.namesrv_addr, checker=None)  # type: ignore[arg-type]
