"""PopService, the API the remoting handlers and the gRPC front share, on a real store:
handles, acks, changes, dead letters, long polling, orderly pops, errors and recovery."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from aiorocketmq.broker.acl import Perm, needed_resources
from aiorocketmq.broker.offsets import OffsetTable
from aiorocketmq.broker.pop import (
    InvalidReceiptHandleError,
    PoppedMessage,
    PopService,
    ReceiptHandleExpiredError,
)
from aiorocketmq.broker.pop.checkpoint import revive_topic
from aiorocketmq.broker.pop.handlers import PopHandlers
from aiorocketmq.protocol.body import SubscriptionGroupConfig, TopicConfig
from aiorocketmq.protocol.codes import ResponseCode
from aiorocketmq.protocol.command import RemotingCommand
from aiorocketmq.protocol.errors import MessageIllegalError, SubscriptionParseFailedError, TopicNotExistError
from aiorocketmq.protocol.message import PropertyKey
from aiorocketmq.protocol.pop import (
    POLLING_TIMEOUT,
    BatchAck,
    PopRequestCode,
    ReceiptHandle,
    encode_batch_ack_body,
    pop_retry_topic,
)
from tests.support import wait_until

from .support import Parts, RecordedConnection, answer, broker_parts

TOPIC = "PopUnit"
GROUP = "pop-group"


async def receive(service: PopService, **request: Any) -> list[PoppedMessage]:
    """The messages of one pop, as the gRPC endpoint takes them."""
    return (await service.pop(**request)).messages


def service_for(parts: Parts, offsets: OffsetTable | None = None) -> PopService:
    return PopService(
        parts.config,
        store=parts.store,
        writer=parts.writer,
        topics=parts.topics,
        groups=parts.groups,
        offsets=offsets or parts.offsets,
    )


@pytest.fixture
async def pop(tmp_path: Path) -> AsyncIterator[tuple[Parts, PopService]]:
    async with broker_parts(tmp_path) as parts:
        parts.topics.put(TopicConfig(topic_name=TOPIC, read_queue_nums=2, write_queue_nums=2))
        service = service_for(parts)
        service.recover()
        parts.store.add_arrival_listener(service.on_arrival)
        service.start()
        try:
            yield parts, service
        finally:
            await service.stop()


@pytest.fixture
async def held(tmp_path: Path) -> AsyncIterator[tuple[Parts, PopService]]:
    """A PopService whose revive runs only when the test calls it, at the time the test says:
    the clock held still, so no timing bound is raced."""
    async with broker_parts(tmp_path) as parts:
        parts.topics.put(TopicConfig(topic_name=TOPIC, read_queue_nums=2, write_queue_nums=2))
        service = service_for(parts)
        service.recover()
        parts.store.add_arrival_listener(service.on_arrival)
        yield parts, service


def put(parts: Parts, body: bytes, queue_id: int = 0, tags: str = "t", topic: str = TOPIC) -> None:
    writer = parts.writer
    assert writer.put(writer.build(topic, queue_id, body, {PropertyKey.TAGS: tags})).ok


async def test_receive_hands_out_messages_with_nine_field_handles_and_acks_settle_them(
    pop: tuple[Parts, PopService],
) -> None:
    parts, service = pop
    for i in range(3):
        put(parts, f"m{i}".encode(), queue_id=i % 2)
    got = await receive(
        service, group=GROUP, topic=TOPIC, queue_id=None, max_messages=32, invisible_ms=60_000,
        expression_type="TAG", expression="*", poll_ms=0, fifo=False,
    )  # fmt: skip
    assert sorted(m.message.body for m in got) == [b"m0", b"m1", b"m2"]
    assert {m.delivery_attempt for m in got} == {1}
    handle = ReceiptHandle.decode(got[0].receipt_handle)
    assert handle.commit_log_offset == got[0].message.commit_log_offset
    assert (handle.invisible_time, handle.broker_name, handle.retry) == (60_000, "broker-u", False)
    assert service.in_flight == 3
    for msg in got:
        await service.ack(group=GROUP, topic=TOPIC, receipt_handle=msg.receipt_handle)
    assert service.in_flight == 0
    with pytest.raises(ReceiptHandleExpiredError):
        await service.ack(group=GROUP, topic=TOPIC, receipt_handle=got[0].receipt_handle)
    with pytest.raises(InvalidReceiptHandleError):
        await service.ack(group=GROUP, topic=TOPIC, receipt_handle="1 2 3")
    assert (
        await receive(service, group=GROUP, topic=TOPIC, queue_id=None, max_messages=32, invisible_ms=60_000)
        == []
    )


async def test_expired_messages_are_redelivered_from_the_retry_topic(pop: tuple[Parts, PopService]) -> None:
    parts, service = pop
    put(parts, b"late", tags="x")
    (first,) = await receive(service, group=GROUP, topic=TOPIC, queue_id=0, max_messages=1, invisible_ms=50)
    with pytest.raises(ReceiptHandleExpiredError):
        await asyncio.sleep(0.1)
        await service.ack(group=GROUP, topic=TOPIC, receipt_handle=first.receipt_handle)
    (again,) = await receive(
        service,
        group=GROUP,
        topic=TOPIC,
        queue_id=None,
        max_messages=4,
        invisible_ms=60_000,
        expression="x",
        poll_ms=5000,
    )
    assert (again.message.body, again.delivery_attempt, again.topic) == (b"late", 2, TOPIC)
    assert again.message.topic == pop_retry_topic(GROUP, TOPIC)
    assert again.message.msg_id == first.message.msg_id
    assert ReceiptHandle.decode(again.receipt_handle).retry
    await service.ack(group=GROUP, topic=TOPIC, receipt_handle=again.receipt_handle)
    assert service.redelivered == 1


async def test_forward_to_dlq_and_dead_letters_after_max_attempts(pop: tuple[Parts, PopService]) -> None:
    parts, service = pop
    parts.groups.put(SubscriptionGroupConfig(group_name=GROUP, retry_max_times=0))
    put(parts, b"now", queue_id=0)
    put(parts, b"later", queue_id=1)
    (now,) = await receive(service, group=GROUP, topic=TOPIC, queue_id=0, max_messages=1, invisible_ms=60_000)
    await service.forward_to_dlq(group=GROUP, topic=TOPIC, receipt_handle=now.receipt_handle)
    (later,) = await receive(service, group=GROUP, topic=TOPIC, queue_id=1, max_messages=1, invisible_ms=10)
    assert later.message.body == b"later"
    await asyncio.sleep(0.05)
    # retryMaxTimes=0: the one delivery was all it gets
    assert (
        await receive(service, group=GROUP, topic=TOPIC, queue_id=None, max_messages=4, invisible_ms=10) == []
    )
    dead = parts.messages(f"%DLQ%{GROUP}", 0)
    assert [m.body for m in dead] == [b"now", b"later"]
    assert {m.properties["DLQ_ORIGIN_TOPIC"] for m in dead} == {TOPIC}
    assert service.in_flight == 0


async def test_change_invisible_returns_a_new_handle_and_spends_the_old(
    pop: tuple[Parts, PopService],
) -> None:
    parts, service = pop
    put(parts, b"c")
    (msg,) = await receive(service, group=GROUP, topic=TOPIC, queue_id=0, max_messages=1, invisible_ms=60_000)
    fresh = await service.change_invisible(
        group=GROUP, topic=TOPIC, receipt_handle=msg.receipt_handle, invisible_ms=120_000
    )
    assert ReceiptHandle.decode(fresh).invisible_time == 120_000
    with pytest.raises(ReceiptHandleExpiredError):
        await service.ack(group=GROUP, topic=TOPIC, receipt_handle=msg.receipt_handle)
    with pytest.raises(MessageIllegalError):
        await service.change_invisible(group=GROUP, topic=TOPIC, receipt_handle=fresh, invisible_ms=-1)
    await service.ack(group=GROUP, topic=TOPIC, receipt_handle=fresh)
    assert service.in_flight == 0


async def test_a_waiting_receive_returns_when_a_message_arrives(pop: tuple[Parts, PopService]) -> None:
    parts, service = pop
    waiting = asyncio.ensure_future(
        receive(
            service,
            group=GROUP,
            topic=TOPIC,
            queue_id=None,
            max_messages=4,
            invisible_ms=60_000,
            poll_ms=20_000,
        )
    )
    await wait_until(lambda: service.waiting > 0)
    put(parts, b"wake", queue_id=1)
    (got,) = await asyncio.wait_for(waiting, 5)
    assert got.message.body == b"wake"


async def test_bad_requests_are_refused(pop: tuple[Parts, PopService]) -> None:
    _, service = pop
    with pytest.raises(TopicNotExistError):
        await receive(
            service, group=GROUP, topic="NoSuchTopic", queue_id=None, max_messages=1, invisible_ms=1000
        )
    with pytest.raises(MessageIllegalError):
        await receive(service, group=GROUP, topic=TOPIC, queue_id=7, max_messages=1, invisible_ms=1000)
    with pytest.raises(MessageIllegalError):
        await receive(service, group=GROUP, topic=TOPIC, queue_id=None, max_messages=0, invisible_ms=1000)
    with pytest.raises(MessageIllegalError):
        await receive(
            service,
            group=GROUP,
            topic=TOPIC,
            queue_id=None,
            max_messages=1,
            invisible_ms=1000,
            expression_type="SQL92",
        )


async def test_orderly_pops_block_the_queue_until_the_batch_is_acked(pop: tuple[Parts, PopService]) -> None:
    parts, service = pop
    for i in range(4):
        put(parts, f"o{i}".encode())
    batch = await receive(
        service, group=GROUP, topic=TOPIC, queue_id=0, max_messages=2, invisible_ms=60_000, fifo=True
    )
    assert [m.message.body for m in batch] == [b"o0", b"o1"]
    assert (
        await receive(
            service, group=GROUP, topic=TOPIC, queue_id=0, max_messages=2, invisible_ms=1, fifo=True
        )
        == []
    )
    for msg in batch:
        await service.ack(group=GROUP, topic=TOPIC, receipt_handle=msg.receipt_handle)
    nxt = await receive(
        service, group=GROUP, topic=TOPIC, queue_id=0, max_messages=2, invisible_ms=60_000, fifo=True
    )
    assert [m.message.body for m in nxt] == [b"o2", b"o3"]


async def test_recovery_rebuilds_in_flight_state_and_offsets_from_the_revive_log(
    pop: tuple[Parts, PopService],
) -> None:
    parts, service = pop
    for i in range(4):
        put(parts, f"r{i}".encode())
    got = await receive(service, group=GROUP, topic=TOPIC, queue_id=0, max_messages=4, invisible_ms=60_000)
    for msg in got[:3]:
        await service.ack(group=GROUP, topic=TOPIC, receipt_handle=msg.receipt_handle)
    # a restart whose offset file is from before all of it (a crash between saves)
    restarted = service_for(parts, OffsetTable(parts.config))
    restarted.recover()
    assert restarted.in_flight == 1
    assert parts.topics.get(revive_topic(parts.config.broker_cluster_name)) is not None
    await restarted.ack(group=GROUP, topic=TOPIC, receipt_handle=got[3].receipt_handle)
    assert (
        await receive(restarted, group=GROUP, topic=TOPIC, queue_id=0, max_messages=4, invisible_ms=1000)
        == []
    )


def test_acl_asks_pop_requests_for_the_topic_and_the_group() -> None:
    fields = {"consumerGroup": "g", "topic": "T"}
    assert needed_resources(PopRequestCode.POP_MESSAGE, fields, None) == {"T": Perm.SUB, "%RETRY%g": Perm.SUB}
    retry_ack = {"consumerGroup": "g", "topic": "%RETRY%g_T"}
    assert needed_resources(PopRequestCode.ACK_MESSAGE, retry_ack, None) == {"%RETRY%g": Perm.SUB}


async def test_bad_remoting_requests_get_clear_errors(pop: tuple[Parts, PopService]) -> None:
    _, service = pop
    handlers = PopHandlers(service)
    ack = RemotingCommand.request(
        PopRequestCode.ACK_MESSAGE,
        {"consumerGroup": GROUP, "topic": TOPIC, "queueId": 0, "extraInfo": "not a handle", "offset": 0},
    )
    response = await answer(handlers.ack, None, ack)
    assert response.code == ResponseCode.MESSAGE_ILLEGAL and "receipt handle" in response.remark
    missing = RemotingCommand.request(PopRequestCode.POP_MESSAGE, {"topic": TOPIC})
    response = await answer(handlers.pop, None, missing)
    assert response.code == ResponseCode.SYSTEM_ERROR and "consumerGroup" in response.remark
    empty = RemotingCommand.request(
        PopRequestCode.POP_MESSAGE,
        {"consumerGroup": GROUP, "topic": TOPIC, "queueId": -1, "maxMsgNums": 4, "invisibleTime": 1000},
    )
    response = await answer(handlers.pop, None, empty)
    assert response.code == POLLING_TIMEOUT


async def test_under_sync_flush_pop_state_is_on_disk_before_the_answer(tmp_path: Path) -> None:
    async with broker_parts(tmp_path, {"flushDiskType": "SYNC_FLUSH"}) as parts:
        parts.topics.put(TopicConfig(topic_name=TOPIC, read_queue_nums=1, write_queue_nums=1))
        service = service_for(parts)
        service.recover()
        put(parts, b"durable")
        log = parts.store.commit_log
        (msg,) = await receive(
            service, group=GROUP, topic=TOPIC, queue_id=0, max_messages=1, invisible_ms=60_000
        )
        assert log.queue.flushed_where == log.max_offset  # the check point is on disk
        before = log.max_offset
        await service.ack(group=GROUP, topic=TOPIC, receipt_handle=msg.receipt_handle)
        assert log.max_offset > before  # the ack record ...
        assert log.queue.flushed_where == log.max_offset  # ... is on disk too


async def test_remoting_acks_are_answered_once_their_record_is_written(
    pop: tuple[Parts, PopService], conn: RecordedConnection
) -> None:
    parts, service = pop
    put(parts, b"a1")
    put(parts, b"a2")
    got = await receive(service, group=GROUP, topic=TOPIC, queue_id=0, max_messages=2, invisible_ms=60_000)
    handlers = PopHandlers(service)
    revive_queue = ReceiptHandle.decode(got[0].receipt_handle).revive_qid
    records = parts.store.get_max_offset(service.revive_topic, revive_queue)
    for msg in [*got, got[0]]:  # the last one twice
        fields = {
            "consumerGroup": GROUP,
            "topic": TOPIC,
            "queueId": 0,
            "extraInfo": msg.receipt_handle,
            "offset": 0,
        }
        assert handlers.ack(conn, RemotingCommand.request(PopRequestCode.ACK_MESSAGE, fields)) is None  # type: ignore[arg-type]
    codes = [(await conn.next_response()).code for _ in range(3)]
    assert codes == [ResponseCode.SUCCESS, ResponseCode.SUCCESS, ResponseCode.NO_MESSAGE]
    # both acks went into one revive-log record
    assert parts.store.get_max_offset(service.revive_topic, revive_queue) == records + 1
    assert service.in_flight == 0


async def test_a_waiting_pop_whose_client_left_takes_nothing(
    pop: tuple[Parts, PopService], conn: RecordedConnection
) -> None:
    parts, service = pop
    fields = {
        "consumerGroup": GROUP, "topic": TOPIC, "queueId": -1, "maxMsgNums": 4, "invisibleTime": 60_000,
        "pollTime": 20_000,
    }  # fmt: skip
    pending = PopHandlers(service).pop(conn, RemotingCommand.request(PopRequestCode.POP_MESSAGE, fields))  # type: ignore[arg-type]
    assert inspect.isawaitable(pending)
    waiting = asyncio.ensure_future(pending)
    await wait_until(lambda: service.waiting > 0)
    conn.closed = True
    put(parts, b"kept")
    response = await asyncio.wait_for(waiting, 5)
    assert response.code == POLLING_TIMEOUT
    assert service.in_flight == 0
    (msg,) = await receive(
        service, group=GROUP, topic=TOPIC, queue_id=None, max_messages=4, invisible_ms=60_000
    )
    assert msg.message.body == b"kept"


async def test_committed_revive_progress_never_passes_a_check_point_in_flight(
    pop: tuple[Parts, PopService],
) -> None:
    parts, service = pop
    for i in range(3):
        put(parts, f"p{i}".encode())
    first = await receive(service, group=GROUP, topic=TOPIC, queue_id=0, max_messages=1, invisible_ms=60_000)
    rest = await receive(service, group=GROUP, topic=TOPIC, queue_id=0, max_messages=2, invisible_ms=60_000)
    for msg in rest:
        await service.ack(group=GROUP, topic=TOPIC, receipt_handle=msg.receipt_handle)
    service.commit_progress()
    restarted = service_for(parts)  # the same offset table: what a graceful restart reads back
    restarted.recover()
    assert restarted.in_flight == 1
    await restarted.ack(group=GROUP, topic=TOPIC, receipt_handle=first[0].receipt_handle)
    restarted.commit_progress()
    again = service_for(parts)
    again.recover()
    assert again.in_flight == 0
    assert await receive(again, group=GROUP, topic=TOPIC, queue_id=0, max_messages=4, invisible_ms=1000) == []


async def test_batch_acks_settle_what_is_in_flight_and_report_the_rest(
    pop: tuple[Parts, PopService], conn: RecordedConnection
) -> None:
    parts, service = pop
    for i in range(3):
        put(parts, f"b{i}".encode())
    got = await receive(service, group=GROUP, topic=TOPIC, queue_id=0, max_messages=3, invisible_ms=60_000)
    await service.ack(group=GROUP, topic=TOPIC, receipt_handle=got[2].receipt_handle)
    h = ReceiptHandle.decode(got[0].receipt_handle)
    batch = BatchAck(GROUP, TOPIC, False, h.ck_queue_offset, 0, h.revive_qid, h.pop_time, h.invisible_time,
                     tuple(m.message.queue_offset for m in got))  # fmt: skip
    cmd = RemotingCommand.request(
        PopRequestCode.BATCH_ACK_MESSAGE, {}, encode_batch_ack_body("broker-u", [batch])
    )
    assert PopHandlers(service).batch_ack(conn, cmd) is None  # type: ignore[arg-type]
    response = await conn.next_response()
    assert response.code == ResponseCode.NO_MESSAGE and "1 of 3" in (response.remark or "")
    assert service.in_flight == 0
    garbage = RemotingCommand.request(PopRequestCode.BATCH_ACK_MESSAGE, {}, b"not json")
    assert (await answer(PopHandlers(service).batch_ack, conn, garbage)).code == ResponseCode.MESSAGE_ILLEGAL


async def test_a_broker_nobody_pops_from_has_no_revive_topic_and_no_revive_offsets(
    pop: tuple[Parts, PopService],
) -> None:
    parts, service = pop
    service.commit_progress()
    assert parts.topics.get(service.revive_topic) is None
    assert parts.offsets.topics_of_group("CID_RMQ_SYS_REVIVE_GROUP") == []
    put(parts, b"x")
    (msg,) = await receive(service, group=GROUP, topic=TOPIC, queue_id=0, max_messages=1, invisible_ms=60_000)
    await service.ack(group=GROUP, topic=TOPIC, receipt_handle=msg.receipt_handle)
    service.commit_progress()
    assert parts.topics.get(service.revive_topic) is not None
    assert parts.offsets.topics_of_group("CID_RMQ_SYS_REVIVE_GROUP") == [service.revive_topic]


async def test_sql92_pops_filter_on_properties_when_the_broker_allows_it(tmp_path: Path) -> None:
    async with broker_parts(tmp_path, enablePropertyFilter="true") as parts:
        parts.topics.put(TopicConfig(topic_name=TOPIC, read_queue_nums=1, write_queue_nums=1))
        service = service_for(parts)
        service.recover()
        writer = parts.writer
        for i, region in enumerate(["eu", "us", "eu"]):
            props = {PropertyKey.TAGS: "t", "region": region, "n": str(i)}
            assert writer.put(writer.build(TOPIC, 0, f"s{i}".encode(), props)).ok
        got = await receive(service,
            group=GROUP, topic=TOPIC, queue_id=None, max_messages=8, invisible_ms=60_000,
            expression_type="SQL92", expression="region = 'eu' AND n > 0",
        )  # fmt: skip
        assert [m.message.body for m in got] == [b"s2"]
        with pytest.raises(SubscriptionParseFailedError):
            await receive(service,
                group=GROUP, topic=TOPIC, queue_id=None, max_messages=8, invisible_ms=1000,
                expression_type="SQL92", expression="region = ",
            )  # fmt: skip


async def test_nothing_comes_back_before_its_invisible_time_ends(held: tuple[Parts, PopService]) -> None:
    """Here for the bug of a redelivery before the invisible time ends (by 300 ms, or any
    amount): one millisecond before pop time + invisible time nothing is redelivered, at it
    the message is."""
    parts, service = held
    put(parts, b"m")
    (got,) = await receive(service, group=GROUP, topic=TOPIC, queue_id=0, max_messages=1, invisible_ms=10_000)
    (ck,) = service.checkpoints.values()
    assert ck.deadline == ReceiptHandle.decode(got.receipt_handle).pop_time + 10_000
    retry = pop_retry_topic(GROUP, TOPIC)
    service.reviver.revive_due(ck.deadline - 1)
    assert (service.redelivered, service.in_flight, parts.messages(retry, 0)) == (0, 1, [])
    service.reviver.revive_due(ck.deadline)
    assert (service.redelivered, service.in_flight) == (1, 0)
    assert [m.body for m in parts.messages(retry, 0)] == [b"m"]


async def test_the_revive_task_redelivers_at_the_invisible_time_not_before(
    pop: tuple[Parts, PopService],
) -> None:
    """The same rule through the running revive task: the redelivered copy is stored no
    earlier than pop time + invisible time (its store timestamp says when it was made)."""
    parts, service = pop
    put(parts, b"timed")
    (got,) = await receive(service, group=GROUP, topic=TOPIC, queue_id=0, max_messages=1, invisible_ms=400)
    deadline = ReceiptHandle.decode(got.receipt_handle).pop_time + 400
    retry = pop_retry_topic(GROUP, TOPIC)
    await wait_until(lambda: service.redelivered == 1, timeout=10)
    (copy,) = parts.messages(retry, 0)
    assert copy.store_timestamp >= deadline, (copy.store_timestamp, deadline)


async def test_a_partly_acknowledged_batch_redelivers_only_what_was_not_acknowledged(
    held: tuple[Parts, PopService],
) -> None:
    """Here for the bug of an expiry that redelivers the acknowledged messages of a partly
    acknowledged batch too."""
    parts, service = held
    for i in range(4):
        put(parts, f"m{i}".encode())
    got = await receive(service, group=GROUP, topic=TOPIC, queue_id=0, max_messages=4, invisible_ms=10_000)
    assert [m.message.body for m in got] == [b"m0", b"m1", b"m2", b"m3"]
    for msg in got[::2]:
        await service.ack(group=GROUP, topic=TOPIC, receipt_handle=msg.receipt_handle)
    assert service.in_flight == 2
    (ck,) = service.checkpoints.values()
    service.reviver.revive_due(ck.deadline)
    assert sorted(m.body for m in parts.messages(pop_retry_topic(GROUP, TOPIC), 0)) == [b"m1", b"m3"]
    assert (service.redelivered, service.in_flight) == (2, 0)
    # Only those come back to a consumer.
    again = await receive(
        service, group=GROUP, topic=TOPIC, queue_id=None, max_messages=32, invisible_ms=60_000
    )
    assert sorted(m.message.body for m in again) == [b"m1", b"m3"]
