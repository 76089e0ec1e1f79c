"""PopService behaviours the mutation run of ``broker/pop/service.py`` found untested (issue 38):
limits of a pop request, when a handle stops working, what a change of invisible time, a
redelivery and a dead letter carry, orderly batches that expire, peeking and notification,
and the revive log's progress. The clock is held (``now_ms`` answers what the test says and
revive runs only when the test calls it), so no timing bound is raced."""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import pytest

from aiorocketmq.broker.pop import (
    InvalidReceiptHandleError,
    PollingFullError,
    PoppedMessage,
    PopService,
    ReceiptHandleExpiredError,
)
from aiorocketmq.broker.pop import clock as clock_module
from aiorocketmq.broker.pop import receive as receive_module
from aiorocketmq.broker.pop import recovery as recovery_module
from aiorocketmq.broker.pop.errors import MAX_INVISIBLE_MS, MAX_POP_MESSAGES
from aiorocketmq.broker.pop.recovery import REVIVE_GROUP
from aiorocketmq.broker.pop.revive import DLQ_ORIGIN_MESSAGE_ID, DLQ_ORIGIN_TOPIC, FIRST_POP_TIME
from aiorocketmq.broker.store import MessageStore, PutResult, PutStatus
from aiorocketmq.protocol.body import SubscriptionGroupConfig, TopicConfig
from aiorocketmq.protocol.codes import Perm
from aiorocketmq.protocol.errors import (
    BrokerError,
    MessageIllegalError,
    NoPermissionError,
    ServerSystemError,
    SubscriptionGroupNotExistError,
    SubscriptionParseFailedError,
    TopicNotExistError,
)
from aiorocketmq.protocol.message import MessageExt, PropertyKey, decode_record
from aiorocketmq.protocol.pop import INIT_MODE_MIN, ORDER_REVIVE_QID, ReceiptHandle, pop_retry_topic
from tests.support import wait_until

from .support import STORE_HOST, Parts, broker_parts

TOPIC = "PopMut"
GROUP = "pop-mut-group"
T0 = 1_800_000_000_000


class Clock:
    """The time PopService reads, moved only by the test."""

    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    held = Clock()
    monkeypatch.setattr(clock_module, "now_ms", held)
    return held


def service_for(parts: Parts) -> PopService:
    return PopService(
        parts.config,
        store=parts.store,
        writer=parts.writer,
        topics=parts.topics,
        groups=parts.groups,
        offsets=parts.offsets,
    )


@pytest.fixture
async def held(tmp_path: Path, clock: Clock) -> AsyncIterator[tuple[Parts, PopService]]:
    async with broker_parts(tmp_path) as parts:
        parts.topics.put(TopicConfig(topic_name=TOPIC, read_queue_nums=2, write_queue_nums=2))
        service = service_for(parts)
        service.recover()
        parts.store.add_arrival_listener(service.on_arrival)
        yield parts, service


def put(parts: Parts, body: bytes, queue_id: int = 0, tags: str = "t", topic: str = TOPIC) -> None:
    writer = parts.writer
    assert writer.put(writer.build(topic, queue_id, body, {PropertyKey.TAGS: tags})).ok


async def pop(service: PopService, **request: Any) -> list[PoppedMessage]:
    """The messages of one pop; by default of queue 0, up to 32, invisible for 10 s."""
    request = {
        "group": GROUP,
        "topic": TOPIC,
        "queue_id": 0,
        "max_messages": 32,
        "invisible_ms": 10_000,
        **request,
    }
    return (await service.pop(**request)).messages


async def ack(service: PopService, receipt_handle: str) -> None:
    """An ack that fails the test instead of hanging when it is never answered."""
    await asyncio.wait_for(service.ack(group=GROUP, topic=TOPIC, receipt_handle=receipt_handle), 5)


def bodies(messages: list[PoppedMessage]) -> list[bytes]:
    return [m.message.body for m in messages]


def bodies_of(messages: list[MessageExt]) -> list[bytes]:
    return [m.body for m in messages]


# -- the limits of a request ------------------------------------------------------------------


async def test_a_pop_may_ask_for_32_messages_and_the_longest_invisible_time_but_no_more(
    held: tuple[Parts, PopService],
) -> None:
    """Boundaries of the request checks: 32 messages and 12 h invisible are allowed, 33 and
    12 h + 1 ms are refused, as is a negative invisible time; the last queue id is
    readable, the next is not."""
    parts, service = held
    for i in range(MAX_POP_MESSAGES + 1):
        put(parts, f"m{i}".encode(), queue_id=1)
    got = await pop(service, queue_id=1, max_messages=MAX_POP_MESSAGES, invisible_ms=MAX_INVISIBLE_MS)
    assert len(got) == MAX_POP_MESSAGES
    assert ReceiptHandle.decode(got[0].receipt_handle).invisible_time == MAX_INVISIBLE_MS
    await pop(service, queue_id=0, max_messages=1, invisible_ms=0)
    for bad, remark in (
        ({"max_messages": MAX_POP_MESSAGES + 1}, "max messages 33 is outside [1, 32]"),
        ({"invisible_ms": MAX_INVISIBLE_MS + 1}, "invisible time 43200001 ms is outside [0, 43200000]"),
        ({"invisible_ms": -1}, "invisible time -1 ms is outside [0, 43200000]"),
        ({"queue_id": 2}, f"queueId[2] is illegal, topic:[{TOPIC}] readQueueNums:[2]"),
        (
            {"expression_type": "SQL92", "expression": "a > 1"},
            "The broker does not support consumer to filter message by SQL92",
        ),
    ):
        with pytest.raises(MessageIllegalError, match=re.escape(remark)):
            await pop(service, **bad)


async def test_pops_are_refused_without_read_permission_or_a_usable_group(
    tmp_path: Path, clock: Clock
) -> None:
    """A write-only broker, a write-only topic, a group whose consumption is disabled and a
    group that does not exist (auto-creation off) are each refused, before anything is popped."""
    async with broker_parts(tmp_path, brokerPermission="2", autoCreateSubscriptionGroup="false") as parts:
        parts.topics.put(TopicConfig(topic_name=TOPIC, read_queue_nums=1, write_queue_nums=1))
        service = service_for(parts)
        with pytest.raises(
            NoPermissionError, match=re.escape("the broker[127.0.0.1] pop message is forbidden")
        ):
            await pop(service)
    async with broker_parts(tmp_path / "b", autoCreateSubscriptionGroup="false") as parts:
        parts.topics.put(TopicConfig(topic_name=TOPIC, read_queue_nums=1, write_queue_nums=1))
        parts.topics.put(
            TopicConfig(topic_name="WriteOnly", read_queue_nums=1, write_queue_nums=1, perm=int(Perm.WRITE))
        )
        parts.groups.put(SubscriptionGroupConfig(group_name=GROUP))
        parts.groups.put(SubscriptionGroupConfig(group_name="off", consume_enable=False))
        service = service_for(parts)
        put(parts, b"kept")
        with pytest.raises(
            SubscriptionGroupNotExistError, match=re.escape("subscription group [nobody] does not exist")
        ):
            await pop(service, group="nobody")
        with pytest.raises(NoPermissionError, match="subscription group no permission, off"):
            await pop(service, group="off")
        with pytest.raises(
            NoPermissionError, match=re.escape("the topic[WriteOnly] peeking message is forbidden")
        ):
            await pop(service, topic="WriteOnly")
        with pytest.raises(TopicNotExistError, match=re.escape("topic[Nope] not exist, apply first please!")):
            await pop(service, topic="Nope")
        assert bodies(await pop(service)) == [b"kept"]


# -- handles, acks and changes of invisible time ----------------------------------------------


async def test_a_handle_works_until_its_invisible_time_ends_and_not_at_it(
    held: tuple[Parts, PopService], clock: Clock
) -> None:
    """An ack 1 ms before pop time + invisible time settles the message; at that time the
    handle is spent (the message is due for redelivery then), and a handle of another broker
    is refused as invalid."""
    parts, service = held
    put(parts, b"a")
    put(parts, b"b")
    first, second = await pop(service, invisible_ms=10_000)
    clock.now = T0 + 9_999
    await ack(service, first.receipt_handle)
    clock.now = T0 + 10_000
    with pytest.raises(
        ReceiptHandleExpiredError, match=re.escape(f"the receipt handle of {TOPIC}[0]@1 expired")
    ):
        await ack(service, second.receipt_handle)
    with pytest.raises(ReceiptHandleExpiredError):
        await service.change_invisible(
            group=GROUP, topic=TOPIC, receipt_handle=second.receipt_handle, invisible_ms=1000
        )
    foreign = ReceiptHandle.decode(second.receipt_handle)._replace(broker_name="other-broker").encode()
    with pytest.raises(
        InvalidReceiptHandleError, match="the receipt handle is from broker other-broker, not broker-u"
    ):
        await service.forward_to_dlq(group=GROUP, topic=TOPIC, receipt_handle=foreign)
    # Not redelivered yet: the consumer may still send it to the dead-letter queue.
    await service.forward_to_dlq(group=GROUP, topic=TOPIC, receipt_handle=second.receipt_handle)
    (dead,) = parts.messages(f"%DLQ%{GROUP}", 0)
    assert (dead.body, dead.reconsume_times) == (b"b", 1)  # delivered once
    assert service.in_flight == 0
    clock.now = T0 + 20_000
    assert await pop(service, queue_id=None) == []


async def test_a_changed_invisible_time_counts_from_the_change_and_the_new_handle_names_the_message(
    held: tuple[Parts, PopService], clock: Clock
) -> None:
    """After a change at T+1 s to 5 s the message comes back at T+6 s, not at the first
    deadline and not 1 ms before the new one; the new handle keeps the message's queue,
    offsets and commit-log offset, and a second change in the same millisecond still gives
    a handle that acks."""
    parts, service = held
    put(parts, b"skip", queue_id=1)
    put(parts, b"c", queue_id=1)
    skip, msg = await pop(service, queue_id=1, invisible_ms=10_000)
    await ack(service, skip.receipt_handle)
    # an acked message's handle is spent: no change, no dead letter
    with pytest.raises(ReceiptHandleExpiredError, match="is not in flight"):
        await service.change_invisible(
            group=GROUP, topic=TOPIC, receipt_handle=skip.receipt_handle, invisible_ms=5_000
        )
    with pytest.raises(ReceiptHandleExpiredError, match="is not in flight"):
        await service.forward_to_dlq(group=GROUP, topic=TOPIC, receipt_handle=skip.receipt_handle)
    clock.now = T0 + 1_000
    fresh = await service.change_invisible(
        group=GROUP, topic=TOPIC, receipt_handle=msg.receipt_handle, invisible_ms=5_000
    )
    old, new = ReceiptHandle.decode(msg.receipt_handle), ReceiptHandle.decode(fresh)
    assert (new.pop_time, new.invisible_time, new.visible_at) == (T0 + 1_000, 5_000, T0 + 6_000)
    assert (new.queue_id, new.queue_offset, new.ck_queue_offset) == (1, 1, 1)
    assert (new.commit_log_offset, new.broker_name, new.topic_type) == (
        old.commit_log_offset,
        "broker-u",
        old.topic_type,
    )
    assert 0 <= new.revive_qid < 8 and not new.orderly
    retry = pop_retry_topic(GROUP, TOPIC)
    service.reviver.revive_due(T0 + 6_000 - 1)
    assert (service.redelivered, service.in_flight, parts.messages(retry, 0)) == (0, 1, [])
    # a change again, in the same millisecond as the first: its own check point
    again = await service.change_invisible(group=GROUP, topic=TOPIC, receipt_handle=fresh, invisible_ms=5_000)
    due = ReceiptHandle.decode(again).visible_at
    assert due >= T0 + 6_000
    with pytest.raises(ReceiptHandleExpiredError):
        await ack(service, fresh)
    service.reviver.revive_due(due - 1)
    assert (service.redelivered, service.in_flight) == (0, 1)
    service.reviver.revive_due(due)
    assert (service.redelivered, service.in_flight) == (1, 0)
    assert bodies_of(parts.messages(retry, 0)) == [b"c"]


async def test_a_change_may_ask_for_the_longest_invisible_time_but_no_more(
    held: tuple[Parts, PopService],
) -> None:
    parts, service = held
    put(parts, b"c")
    (msg,) = await pop(service)
    with pytest.raises(MessageIllegalError):
        await service.change_invisible(
            group=GROUP, topic=TOPIC, receipt_handle=msg.receipt_handle, invisible_ms=MAX_INVISIBLE_MS + 1
        )
    fresh = await service.change_invisible(
        group=GROUP, topic=TOPIC, receipt_handle=msg.receipt_handle, invisible_ms=MAX_INVISIBLE_MS
    )
    assert ReceiptHandle.decode(fresh).invisible_time == MAX_INVISIBLE_MS
    zero = await service.change_invisible(group=GROUP, topic=TOPIC, receipt_handle=fresh, invisible_ms=0)
    assert ReceiptHandle.decode(zero).invisible_time == 0


# -- redelivery and dead letters --------------------------------------------------------------


async def test_redeliveries_count_up_to_retry_max_times_then_the_message_is_dead_lettered(
    held: tuple[Parts, PopService], clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    """With retryMaxTimes 1 a message is delivered twice (the retry copy has reconsumeTimes
    1 and attempt 2), then goes to ``%DLQ%<group>`` with the same message id, its origin
    topic and id, and reconsumeTimes 2; nothing of it comes back."""
    caplog.set_level(logging.INFO, logger="aiorocketmq.broker.pop.revive")
    parts, service = held
    parts.groups.put(SubscriptionGroupConfig(group_name=GROUP, retry_max_times=1))
    put(parts, b"d")
    (first,) = await pop(service)
    retry = pop_retry_topic(GROUP, TOPIC)
    clock.now = T0 + 10_000
    (second,) = await pop(service, queue_id=None, invisible_ms=1_000)  # revives, then reads the retry topic
    assert (second.message.body, second.delivery_attempt, second.message.reconsume_times) == (b"d", 2, 1)
    assert second.topic == TOPIC and second.message.topic == retry
    assert second.message.msg_id == first.message.msg_id
    (copy,) = parts.messages(retry, 0)
    assert copy.properties[PropertyKey.RETRY_TOPIC] == TOPIC
    assert copy.properties[FIRST_POP_TIME] == str(T0)
    assert copy.properties[PropertyKey.ORIGIN_MESSAGE_ID] == first.message.msg_id
    assert (service.redelivered, service.dead_lettered) == (1, 0)
    clock.now = T0 + 11_000
    assert await pop(service, queue_id=None) == []
    assert (service.redelivered, service.dead_lettered) == (1, 1)
    (dead,) = parts.messages(f"%DLQ%{GROUP}", 0)
    assert (dead.body, dead.msg_id, dead.reconsume_times) == (b"d", first.message.msg_id, 2)
    assert dead.properties[DLQ_ORIGIN_TOPIC] == TOPIC
    assert dead.properties[DLQ_ORIGIN_MESSAGE_ID] == first.message.msg_id
    assert dead.properties[PropertyKey.RETRY_TOPIC] == TOPIC
    assert dead.properties[FIRST_POP_TIME] == str(T0)
    assert service.in_flight == 0
    # one queue each, as Apache creates retry and dead-letter topics
    for created in (retry, f"%DLQ%{GROUP}"):
        config = parts.topics.get(created)
        assert config is not None and (config.read_queue_nums, config.write_queue_nums) == (1, 1)
    assert (
        f"POP: {first.message.msg_id} of group {GROUP} to %DLQ%{GROUP} after 2 deliveries" in caplog.messages
    )
    clock.now = T0 + 100_000
    assert await pop(service, queue_id=None) == []


async def test_a_group_without_config_gets_sixteen_redeliveries(tmp_path: Path, clock: Clock) -> None:
    """Without a subscription group config (auto-created groups are not stored) a message is
    redelivered 16 times and dead-lettered at the 17th expiry (Apache's default
    retryMaxTimes)."""
    async with broker_parts(tmp_path) as parts:
        parts.topics.put(TopicConfig(topic_name=TOPIC, read_queue_nums=1, write_queue_nums=1))
        service = service_for(parts)
        put(parts, b"r")
        attempts: list[int] = []
        for round_ in range(18):
            clock.now = T0 + round_ * 1_000
            got = await pop(service, queue_id=None, invisible_ms=500)
            attempts.extend(m.delivery_attempt for m in got)
        assert attempts == list(range(1, 18))
        assert (service.redelivered, service.dead_lettered) == (16, 1)
        put(parts, b"r2")
        (r2,) = await pop(service, queue_id=None)
        await service.forward_to_dlq(group=GROUP, topic=TOPIC, receipt_handle=r2.receipt_handle)
        assert service.dead_lettered == 2


# -- orderly pops -----------------------------------------------------------------------------


async def test_an_expired_orderly_batch_comes_back_first_and_only_what_was_not_acked(
    held: tuple[Parts, PopService], clock: Clock
) -> None:
    """An orderly batch blocks its queue until its invisible time ends (1 ms before, nothing;
    the other queue is not blocked); then its un-acked messages are handed out again, same
    offsets, attempt + 1, before anything newer, with orderly handles."""
    parts, service = held
    for i in range(4):
        put(parts, f"o{i}".encode())
    put(parts, b"other", queue_id=1)
    queue0 = await pop(service, queue_id=0, max_messages=3, fifo=True)
    queue1 = await pop(service, queue_id=1, fifo=True)
    assert (bodies(queue0), bodies(queue1)) == ([b"o0", b"o1", b"o2"], [b"other"])
    assert all(ReceiptHandle.decode(m.receipt_handle).revive_qid == ORDER_REVIVE_QID for m in queue0)
    await ack(service, queue0[1].receipt_handle)
    await ack(service, queue1[0].receipt_handle)
    put(parts, b"other2", queue_id=1)
    clock.now = T0 + 9_999
    assert bodies(await pop(service, queue_id=None, fifo=True)) == [b"other2"]
    clock.now = T0 + 10_000
    result = await service.pop(
        group=GROUP, topic=TOPIC, queue_id=0, max_messages=32, invisible_ms=10_000, fifo=True
    )
    again = result.messages
    assert result.rest == 1  # o3 waits behind the batch
    assert [(m.message.body, m.message.queue_offset, m.delivery_attempt) for m in again] == [
        (b"o0", 0, 2),
        (b"o2", 2, 2),
    ]
    for m in again:
        await ack(service, m.receipt_handle)
    assert bodies(await pop(service, queue_id=0, fifo=True)) == [b"o3"]


async def test_an_orderly_message_past_its_deliveries_is_dead_lettered_and_the_queue_moves_on(
    held: tuple[Parts, PopService], clock: Clock
) -> None:
    """retryMaxTimes 1: an orderly message is delivered twice; at the second expiry it goes
    to the dead-letter queue (reconsumeTimes 2) and the queue's next message is handed out."""
    parts, service = held
    parts.groups.put(SubscriptionGroupConfig(group_name=GROUP, retry_max_times=1))
    put(parts, b"stuck")
    put(parts, b"next")
    assert bodies(await pop(service, max_messages=1, fifo=True)) == [b"stuck"]
    clock.now = T0 + 10_000
    (second,) = await pop(service, max_messages=1, fifo=True)
    assert (second.message.body, second.delivery_attempt) == (b"stuck", 2)
    assert service.dead_lettered == 0
    clock.now = T0 + 20_000
    service.reviver.revive_due(clock.now)
    (dead,) = parts.messages(f"%DLQ%{GROUP}", 0)
    assert (dead.body, dead.reconsume_times) == (b"stuck", 2)
    assert service.dead_lettered == 1 and service.redelivered == 0
    (nxt,) = await pop(service, max_messages=1, fifo=True)
    assert (nxt.message.body, nxt.delivery_attempt) == (b"next", 1)


# -- looking without popping ------------------------------------------------------------------


async def test_peek_shows_what_a_pop_would_take_next_without_taking_it(
    held: tuple[Parts, PopService], clock: Clock
) -> None:
    """PEEK_MESSAGE: the next records of one queue or of all of them and of the group's retry
    topic, at most ``max_messages``, and how many wait in all; the group's offsets do not
    move and a later pop still gets them. NOTIFICATION and has_messages say whether a pop
    would find something."""
    parts, service = held
    assert service.has_messages(GROUP, TOPIC, -1) is False
    assert await asyncio.wait_for(
        service.notification(group=GROUP, topic=TOPIC, queue_id=-1, poll_ms=0), 5
    ) == (False, False)
    for i in range(3):
        put(parts, f"q0-{i}".encode())
    put(parts, b"q1-0", queue_id=1)
    (first,) = await pop(service, max_messages=1, invisible_ms=1_000)
    assert first.message.body == b"q0-0"
    clock.now = T0 + 1_000
    service.reviver.revive_due(clock.now)  # q0-0 now waits in the retry topic
    rest, records = service.peek(group=GROUP, topic=TOPIC, queue_id=-1, max_messages=3)
    assert rest == 4
    assert len(records) == 3
    assert service.peek(group=GROUP, topic=TOPIC, queue_id=-1, max_messages=2)[0] == 4
    rest, records = service.peek(group=GROUP, topic=TOPIC, queue_id=-1, max_messages=32)
    assert rest == 4 and len(records) == 4
    rest, records = service.peek(group=GROUP, topic=TOPIC, queue_id=1, max_messages=32)
    assert rest == 2 and len(records) == 2  # queue 1 and the retry topic
    assert service.has_messages(GROUP, TOPIC, 1) is True
    assert await asyncio.wait_for(
        service.notification(group=GROUP, topic=TOPIC, queue_id=0, poll_ms=0), 5
    ) == (True, False)
    got = await pop(service, queue_id=None)
    assert sorted(bodies(got)) == [b"q0-0", b"q0-1", b"q0-2", b"q1-0"]
    assert service.peek(group=GROUP, topic=TOPIC, queue_id=-1, max_messages=32) == (0, [])
    assert service.has_messages(GROUP, TOPIC, -1) is False
    put(parts, b"q1-1", queue_id=1)
    assert (service.has_messages(GROUP, TOPIC, 0), service.has_messages(GROUP, TOPIC, 1)) == (False, True)
    await pop(service, queue_id=1)
    clock.now = T0 + 20_000
    service.reviver.revive_due(clock.now)  # only redeliveries wait now, in the retry topic
    assert service.has_messages(GROUP, TOPIC, 0) is True
    with pytest.raises(MessageIllegalError):
        await service.notification(group=GROUP, topic=TOPIC, queue_id=2, poll_ms=0)


async def test_a_pop_reports_how_many_messages_it_left_behind(held: tuple[Parts, PopService]) -> None:
    """The remoting response's restNum: what is left in the queues looked at after the pop."""
    parts, service = held
    for i in range(5):
        put(parts, f"m{i}".encode())
    result = await service.pop(group=GROUP, topic=TOPIC, queue_id=0, max_messages=2, invisible_ms=1_000)
    assert [m.message.body for m in result.messages] == [b"m0", b"m1"]
    assert (result.rest, result.invisible_time) == (3, 1_000)
    assert result.pop_time == T0 and 0 <= result.revive_qid < 8
    empty = await service.pop(group=GROUP, topic=TOPIC, queue_id=1, max_messages=2, invisible_ms=1_000)
    assert (empty.messages, empty.rest, empty.pop_time) == ([], 0, T0)


# -- long polling -----------------------------------------------------------------------------


async def test_waiting_pops_are_counted_per_queue_and_woken_by_a_redelivery(
    held: tuple[Parts, PopService], clock: Clock
) -> None:
    """POLLING_INFO counts the pops waiting for a queue (-1: any queue of the topic) while
    they wait and forgets them after; a pop waiting for the topic wakes when a redelivery
    lands in the group's retry topic, and a NOTIFICATION waiting for the topic wakes on an
    arrival."""
    parts, service = held
    any_queue = asyncio.ensure_future(pop(service, queue_id=None, poll_ms=20_000))
    one_queue = asyncio.ensure_future(pop(service, group="other", queue_id=1, poll_ms=20_000))
    await wait_until(lambda: service.waiting == 2, timeout=5)
    assert (service.polling(GROUP, TOPIC, -1), service.polling("other", TOPIC, 1)) == (1, 1)
    assert (service.polling(GROUP, TOPIC, 1), service.polling("other", TOPIC, -1)) == (0, 0)
    put(parts, b"x", queue_id=1)
    (x,) = await asyncio.wait_for(any_queue, 5)
    (x_other,) = await asyncio.wait_for(one_queue, 5)
    assert x.message.body == x_other.message.body == b"x"
    assert (service.polling(GROUP, TOPIC, -1), service.polling("other", TOPIC, 1), service.waiting) == (
        0,
        0,
        0,
    )
    waiting = asyncio.ensure_future(pop(service, queue_id=None, poll_ms=20_000))
    await wait_until(lambda: service.waiting == 1, timeout=5)
    clock.now = T0 + 10_000
    service.reviver.revive_due(clock.now)  # the copy lands in the retry topic: wakes the waiting pop
    (again,) = await asyncio.wait_for(waiting, 5)
    assert (again.message.body, again.delivery_attempt) == (b"x", 2)
    told = asyncio.ensure_future(service.notification(group=GROUP, topic=TOPIC, queue_id=-1, poll_ms=20_000))
    await wait_until(lambda: service.waiting == 1, timeout=5)
    put(parts, b"z")
    assert await asyncio.wait_for(told, 5) == (True, False)


async def test_a_pop_and_a_notification_wait_their_poll_time_when_nothing_comes(
    held: tuple[Parts, PopService],
) -> None:
    """Nothing arrives: both give up after about their poll time (not at once, not much
    later) and leave no waiter behind."""
    _, service = held
    loop = asyncio.get_running_loop()
    started = loop.time()
    assert await asyncio.wait_for(pop(service, queue_id=None, poll_ms=300), 5) == []
    assert 0.29 <= loop.time() - started < 5
    started = loop.time()
    told = service.notification(group=GROUP, topic=TOPIC, queue_id=-1, poll_ms=300)
    assert await asyncio.wait_for(told, 5) == (False, False)
    assert 0.29 <= loop.time() - started < 5
    assert service.waiting == 0 and service.polling(GROUP, TOPIC, -1) == 0


# -- failures, recovery and the revive log's progress -----------------------------------------


async def test_a_redelivery_that_cannot_be_written_is_tried_again_five_seconds_later(
    held: tuple[Parts, PopService], clock: Clock
) -> None:
    """Disk full at the invisible time: nothing is lost or marked done; the redelivery is
    tried again 5 s later (not before) and then lands once."""
    parts, service = held
    put(parts, b"kept")
    await pop(service, invisible_ms=1_000)
    store = parts.store
    ratio = store.config.disk_space_warning_level_ratio
    store.config.disk_space_warning_level_ratio = 0.0
    assert store.check_disk()
    clock.now = T0 + 1_000
    service.reviver.revive_due(clock.now)
    assert (service.redelivered, service.in_flight) == (0, 1)
    store.config.disk_space_warning_level_ratio = ratio
    assert not store.check_disk()
    service.reviver.revive_due(T0 + 6_000 - 1)
    assert (service.redelivered, service.in_flight) == (0, 1)
    service.reviver.revive_due(T0 + 6_000)
    assert (service.redelivered, service.in_flight) == (1, 0)
    service.reviver.revive_due(T0 + 60_000)
    assert bodies_of(parts.messages(pop_retry_topic(GROUP, TOPIC), 0)) == [b"kept"]


async def test_after_a_restart_in_flight_batches_expire_on_time_and_orderly_queues_stay_blocked(
    held: tuple[Parts, PopService], clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    """Recovery schedules every recovered check point: the un-acked message comes back at
    its old pop time + invisible time (not before), an orderly batch still blocks its queue
    until then, and a fully acked batch is not in flight."""
    parts, service = held
    for i in range(3):
        put(parts, f"n{i}".encode())
    put(parts, b"fifo", queue_id=1)
    put(parts, b"fifo-next", queue_id=1)
    n0, _ = await pop(service, max_messages=2, invisible_ms=5_000)
    (n2,) = await pop(service, max_messages=1, invisible_ms=5_000)
    (fifo,) = await pop(service, queue_id=1, max_messages=1, fifo=True, invisible_ms=5_000)
    await ack(service, n0.receipt_handle)
    await ack(service, n2.receipt_handle)
    service.commit_progress()
    restarted = service_for(parts)
    with caplog.at_level(logging.WARNING, logger="aiorocketmq.broker.pop.recovery"):
        restarted.recover()
    assert not [m for m in caplog.messages if "unreadable" in m]
    assert restarted.in_flight == 2
    clock.now = T0 + 4_999
    assert await pop(restarted, queue_id=1, fifo=True) == []
    assert restarted.redelivered == 0
    clock.now = T0 + 5_000
    again = await pop(restarted, queue_id=0)
    assert bodies(again) == [b"n1"]
    (fifo_again,) = await pop(restarted, queue_id=1, max_messages=1, fifo=True)
    assert (fifo_again.message.body, fifo_again.delivery_attempt) == (b"fifo", 2)
    assert fifo.message.body == b"fifo"


async def test_committed_revive_progress_is_the_oldest_check_point_in_flight_per_revive_queue(
    held: tuple[Parts, PopService],
) -> None:
    """Each revive queue's committed progress stops at its oldest check point in flight (a
    restart replays from there); a queue whose check points are all settled is committed to
    its end."""
    parts, service = held
    for i in range(2):
        put(parts, f"p{i}".encode())
    (a,) = await pop(service, max_messages=1)
    (b,) = await pop(service, max_messages=1)
    qa, qb = (ReceiptHandle.decode(m.receipt_handle).revive_qid for m in (a, b))
    assert qa != qb
    await ack(service, b.receipt_handle)
    service.commit_progress()
    topic = service.revive_topic
    assert parts.offsets.query(REVIVE_GROUP, topic, qa) <= 0  # -1 (nothing committed) replays from 0 too
    assert parts.offsets.query(REVIVE_GROUP, topic, qb) == parts.store.get_max_offset(topic, qb) == 2
    await ack(service, a.receipt_handle)
    service.commit_progress()
    assert parts.offsets.query(REVIVE_GROUP, topic, qa) == 2


async def test_remoting_acks_of_an_expired_handle_are_refused_and_a_batch_ack_settles_the_rest(
    held: tuple[Parts, PopService], clock: Clock
) -> None:
    """The remoting ack paths (one handle, or several offsets of one batch) refuse what is
    past its invisible time, like the gRPC ack; a batch ack whose first offset is already
    acked still settles the offsets after it."""
    parts, service = held
    for i in range(4):
        put(parts, f"b{i}".encode())
    got = await pop(service, invisible_ms=10_000)
    outcomes: list[BrokerError | None] = []
    await ack(service, got[0].receipt_handle)
    handle = ReceiptHandle.decode(got[0].receipt_handle)
    service.ack_offsets_soon(group=GROUP, topic=TOPIC, batch=handle, offsets=[0, 1], done=outcomes.append)
    await asyncio.sleep(0)
    assert isinstance(outcomes[0], ReceiptHandleExpiredError) and outcomes[1:] == [None]
    assert service.in_flight == 2
    outcomes.clear()  # an offset the batch does not have
    service.ack_offsets_soon(group=GROUP, topic=TOPIC, batch=handle, offsets=[99], done=outcomes.append)
    assert len(outcomes) == 1 and isinstance(outcomes[0], ReceiptHandleExpiredError)
    # the same handle twice at once: one ack settles it, the other is told it is spent
    twice = await asyncio.gather(
        ack(service, got[3].receipt_handle), ack(service, got[3].receipt_handle), return_exceptions=True
    )
    assert twice[0] is None and isinstance(twice[1], ReceiptHandleExpiredError)
    assert str(twice[1]).endswith("the message at offset 3 is not in flight any more")
    clock.now = T0 + 10_000
    with pytest.raises(ReceiptHandleExpiredError):
        service.ack_soon(group=GROUP, topic=TOPIC, receipt_handle=got[2].receipt_handle, done=outcomes.append)
    outcomes.clear()
    service.ack_offsets_soon(group=GROUP, topic=TOPIC, batch=handle, offsets=[2], done=outcomes.append)
    await asyncio.sleep(0)
    assert len(outcomes) == 1 and isinstance(outcomes[0], ReceiptHandleExpiredError)
    assert service.in_flight == 1
    service.reviver.revive_due(clock.now)
    assert bodies_of(parts.messages(pop_retry_topic(GROUP, TOPIC), 0)) == [b"b2"]


async def test_an_orderly_message_keeps_its_attempts_and_its_queue_blocked_across_a_change(
    held: tuple[Parts, PopService], clock: Clock
) -> None:
    """Changing the invisible time of an orderly message gives an orderly handle; the queue
    stays blocked until the new time, then the message comes back with attempt 2 — also
    after a restart in between (the new check point is in the revive log)."""
    parts, service = held
    put(parts, b"o0")
    put(parts, b"o1")
    (msg,) = await pop(service, max_messages=1, fifo=True)
    clock.now = T0 + 1_000
    fresh = await service.change_invisible(
        group=GROUP, topic=TOPIC, receipt_handle=msg.receipt_handle, invisible_ms=20_000
    )
    assert ReceiptHandle.decode(fresh).orderly
    restarted = service_for(parts)
    restarted.recover()
    for svc in (service, restarted):
        clock.now = T0 + 20_999
        assert await pop(svc, fifo=True) == []
        clock.now = T0 + 21_000
        (again,) = await pop(svc, max_messages=1, fifo=True)
        assert (again.message.body, again.delivery_attempt) == (b"o0", 2)
        clock.now = T0


async def test_a_changed_handle_survives_a_restart(held: tuple[Parts, PopService], clock: Clock) -> None:
    """After a change of invisible time and a restart the message is still in flight under
    its new handle (the new check point was written to the revive log) and acks."""
    parts, service = held
    put(parts, b"c")
    (msg,) = await pop(service)
    fresh = await service.change_invisible(
        group=GROUP, topic=TOPIC, receipt_handle=msg.receipt_handle, invisible_ms=30_000
    )
    restarted = service_for(parts)
    restarted.recover()
    assert restarted.in_flight == 1
    restarted.commit_progress()  # stops at the recovered check point
    revive_queue = ReceiptHandle.decode(fresh).revive_qid
    assert parts.offsets.query(REVIVE_GROUP, restarted.revive_topic, revive_queue) <= 1
    await ack(restarted, fresh)
    assert restarted.in_flight == 0
    with pytest.raises(MessageIllegalError, match="invisible time"):
        await restarted.change_invisible(group=GROUP, topic=TOPIC, receipt_handle=fresh, invisible_ms=-5)


async def test_a_dead_letter_that_cannot_be_written_says_why_and_leaves_the_message_in_flight(
    held: tuple[Parts, PopService],
) -> None:
    """Disk full: forwarding to the dead-letter queue fails with the store's reason and the
    message stays in flight (its handle still works once the disk has room)."""
    parts, service = held
    put(parts, b"f")
    (msg,) = await pop(service)
    store = parts.store
    ratio = store.config.disk_space_warning_level_ratio
    store.config.disk_space_warning_level_ratio = 0.0
    assert store.check_disk()
    with pytest.raises(ServerSystemError, match=f"dead-lettering to %DLQ%{GROUP} failed: .*disk"):
        await service.forward_to_dlq(group=GROUP, topic=TOPIC, receipt_handle=msg.receipt_handle)
    assert service.in_flight == 1
    store.config.disk_space_warning_level_ratio = ratio
    assert not store.check_disk()
    await service.forward_to_dlq(group=GROUP, topic=TOPIC, receipt_handle=msg.receipt_handle)
    assert bodies_of(parts.messages(f"%DLQ%{GROUP}", 0)) == [b"f"]


async def test_recovery_skips_an_unreadable_revive_record_and_says_where_it_is(
    held: tuple[Parts, PopService], caplog: pytest.LogCaptureFixture
) -> None:
    """A check point record that does not parse is skipped with a warning naming its offset
    and revive queue; the records after it are recovered."""
    parts, service = held
    put(parts, b"after")
    service.state.put_record(0, "ck", b"{not json")
    (msg,) = await pop(service)
    restarted = service_for(parts)
    with caplog.at_level(logging.WARNING, logger="aiorocketmq.broker.pop.recovery"):
        restarted.recover()
    assert any(
        m.startswith("POP: revive log record at 0 of queue 0 is unreadable: Expecting property name")
        for m in caplog.messages
    ), caplog.messages
    assert restarted.in_flight == 1
    await ack(restarted, msg.receipt_handle)
    restarted.commit_progress()
    assert restarted.in_flight == 0


async def test_a_tag_pop_skips_a_hash_collision_and_scans_past_what_does_not_match(
    held: tuple[Parts, PopService],
) -> None:
    """Tags "Aa" and "BB" share a hash code: a pop for "Aa" is not handed "BB". A pop finds
    its tag behind a long run of other tags, and the group's offset moves past the run."""
    parts, service = held
    put(parts, b"bb", tags="BB")
    put(parts, b"aa", tags="Aa")
    assert bodies(await pop(service, expression="Aa")) == [b"aa"]
    for i in range(100):
        put(parts, f"x{i}".encode(), queue_id=1, tags="x")
    put(parts, b"wanted", queue_id=1, tags="w")
    assert bodies(await pop(service, queue_id=1, max_messages=1, expression="w || v")) == [b"wanted"]
    assert parts.offsets.query(GROUP, TOPIC, 1) == 101
    assert await pop(service, queue_id=1, expression="x") == []


async def test_stopping_commits_the_revive_logs_progress(tmp_path: Path) -> None:
    """stop() commits how far the revive log is settled (a restart replays from there)."""
    async with broker_parts(tmp_path) as parts:
        parts.topics.put(TopicConfig(topic_name=TOPIC, read_queue_nums=1, write_queue_nums=1))
        service = service_for(parts)
        service.recover()
        service.start()
        put(parts, b"s")
        (msg,) = await pop(service)
        await ack(service, msg.receipt_handle)
        await service.stop()
        queue = ReceiptHandle.decode(msg.receipt_handle).revive_qid
        assert parts.offsets.query(REVIVE_GROUP, service.revive_topic, queue) == 2


async def test_a_pop_that_gives_up_does_not_stop_the_others_from_being_woken(
    held: tuple[Parts, PopService],
) -> None:
    """Two pops wait for the topic; the one with the short poll time gives up; a message
    then arriving still wakes the other at once."""
    parts, service = held
    patient = asyncio.ensure_future(pop(service, queue_id=None, poll_ms=60_000))
    await wait_until(lambda: service.waiting == 1, timeout=5)
    assert await asyncio.wait_for(pop(service, queue_id=None, poll_ms=50), 5) == []
    assert service.waiting == 1
    put(parts, b"late")
    (got,) = await asyncio.wait_for(patient, 5)
    assert got.message.body == b"late"


async def test_an_ack_that_cannot_be_written_fails_and_a_failing_completion_is_logged(
    held: tuple[Parts, PopService], caplog: pytest.LogCaptureFixture
) -> None:
    """Disk full: the ack raises the store's refusal and the message stays in flight. A
    remoting ack whose completion raises is logged, and the ack stands."""
    parts, service = held
    put(parts, b"a")
    put(parts, b"b")
    first, second = await pop(service)
    store = parts.store
    ratio = store.config.disk_space_warning_level_ratio
    store.config.disk_space_warning_level_ratio = 0.0
    assert store.check_disk()
    with pytest.raises(ServerSystemError, match="POP state cannot be written"):
        await ack(service, first.receipt_handle)
    assert service.in_flight == 2

    store.config.disk_space_warning_level_ratio = ratio
    assert not store.check_disk()

    def broken(error: BrokerError | None) -> None:
        raise RuntimeError("the connection is gone")

    service.ack_soon(group=GROUP, topic=TOPIC, receipt_handle=second.receipt_handle, done=broken)
    await asyncio.sleep(0)
    assert "POP: an ack's completion failed" in caplog.messages
    assert service.in_flight == 1


# -- messages gone from the store (retention) -------------------------------------------------


def roll_away(parts: Parts, queue_id: int = 0, count: int = 120) -> int:
    """Store ``count`` more messages of 1.2 KB in the queue and let retention force-delete
    every commit-log file but the last (with what was stored before them); the queue's
    first offset kept."""
    writer = parts.writer
    for _ in range(count):
        assert writer.put(writer.build(TOPIC, queue_id, b"f" * 1200, {PropertyKey.TAGS: "f"})).ok
    assert parts.store.delete_expired_files(force=True) > 0
    return parts.store.get_min_offset(TOPIC, queue_id)


async def test_a_new_group_starts_at_the_end_of_an_old_queue_or_at_its_start_when_asked(
    held: tuple[Parts, PopService],
) -> None:
    """A group popping a queue for the first time starts at its end (INIT_MODE_MAX, the
    default) once the queue's first messages are gone, or at its first message kept with
    INIT_MODE_MIN; either way it is remembered in the offset table."""
    parts, service = held
    assert roll_away(parts) == 100
    # a peek of a group that never popped looks from the first message kept, as Apache's does
    rest, records = service.peek(group="peeker", topic=TOPIC, queue_id=0, max_messages=1)
    assert rest == 20 and [decode_record(r)[0].queue_offset for r in records] == [100]
    assert await pop(service, group="new-max") == []
    assert parts.offsets.query("new-max", TOPIC, 0) == 120
    (first,) = await pop(service, group="new-min", max_messages=1, init_mode=INIT_MODE_MIN)
    assert first.message.queue_offset == 100
    assert await pop(service, group="new-fifo", fifo=True) == []
    assert parts.offsets.query("new-fifo", TOPIC, 0) == 120
    put(parts, b"fresh")
    assert bodies(await pop(service, group="new-max")) == [b"fresh"]
    assert bodies(await pop(service, group="new-fifo", fifo=True)) == [b"fresh"]


async def test_an_expired_message_gone_from_the_store_is_not_delivered_again(
    held: tuple[Parts, PopService], clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    """Retention deleted a popped message before its invisible time ended: nothing is
    redelivered or dead-lettered, the message is no longer in flight, and a warning names it.
    An orderly batch whose messages are all gone unblocks its queue, which goes on with what
    is left."""
    parts, service = held
    put(parts, b"gone")
    put(parts, b"gone-too")
    (normal,) = await pop(service, max_messages=1)
    assert normal.message.body == b"gone"
    put(parts, b"o0", queue_id=1)
    put(parts, b"o1", queue_id=1)
    orderly = await pop(service, queue_id=1, fifo=True)
    assert bodies(orderly) == [b"o0", b"o1"]
    clock.now = T0 + 1_000
    # two check points hold the orderly queue: the batch and the message whose time changed
    await service.change_invisible(
        group=GROUP, topic=TOPIC, receipt_handle=orderly[1].receipt_handle, invisible_ms=9_000
    )
    assert roll_away(parts, queue_id=0) > 1
    put(parts, b"o2", queue_id=1)
    clock.now = T0 + 10_000
    service.reviver.revive_due(clock.now)
    assert f"POP: {TOPIC}[0]@0 is gone from the store; not delivered again" in caplog.messages
    assert (service.redelivered, service.dead_lettered) == (0, 0)
    got = await pop(service, queue_id=1, fifo=True)  # settles the batch whose messages are gone
    got = got or await pop(service, queue_id=1, fifo=True)
    assert [(m.message.body, m.message.queue_offset, m.delivery_attempt) for m in got] == [(b"o2", 2, 1)]
    assert service.in_flight == 1  # the new batch only
    assert parts.messages(pop_retry_topic(GROUP, TOPIC), 0) == []


async def test_acks_of_several_batches_refused_together_are_each_answered(
    held: tuple[Parts, PopService],
) -> None:
    """Disk full while acks of two popped batches wait for the same write: each ack gets the
    refusal (none is left waiting), and both messages stay in flight."""
    parts, service = held
    put(parts, b"a", queue_id=0)
    put(parts, b"b", queue_id=1)
    (a,) = await pop(service, queue_id=0)
    (b,) = await pop(service, queue_id=1)
    store = parts.store
    ratio = store.config.disk_space_warning_level_ratio
    store.config.disk_space_warning_level_ratio = 0.0
    assert store.check_disk()
    outcomes = await asyncio.gather(
        ack(service, a.receipt_handle), ack(service, b.receipt_handle), return_exceptions=True
    )
    assert [type(o) for o in outcomes] == [ServerSystemError, ServerSystemError]
    assert service.in_flight == 2
    store.config.disk_space_warning_level_ratio = ratio
    assert not store.check_disk()
    await asyncio.gather(ack(service, a.receipt_handle), ack(service, b.receipt_handle))
    assert service.in_flight == 0


async def test_peek_is_bounded_by_its_queue_id_and_its_message_count(held: tuple[Parts, PopService]) -> None:
    """A peek of a queue the topic does not have is refused; a peek hands back no more than
    it asked for, and counts what waits in every queue it looks at, also past the ones that
    filled it."""
    parts, service = held
    put(parts, b"a0")
    put(parts, b"a1")
    for i in range(3):
        put(parts, f"b{i}".encode(), queue_id=1)
    with pytest.raises(MessageIllegalError):
        service.peek(group=GROUP, topic=TOPIC, queue_id=2, max_messages=1)
    assert service.peek(group=GROUP, topic=TOPIC, queue_id=-1, max_messages=3)[0] == 5
    assert len(service.peek(group=GROUP, topic=TOPIC, queue_id=-1, max_messages=3)[1]) == 3


async def test_after_a_restart_acking_an_orderly_batch_wakes_the_pops_waiting_for_its_queue(
    held: tuple[Parts, PopService],
) -> None:
    """An orderly batch recovered after a restart blocks its queue; a pop waiting for the
    queue gets the next message as soon as the batch is acked, not at its poll time."""
    parts, service = held
    put(parts, b"first")
    put(parts, b"second")
    (first,) = await pop(service, max_messages=1, fifo=True)
    restarted = service_for(parts)
    restarted.recover()
    waiting = asyncio.ensure_future(pop(restarted, max_messages=1, fifo=True, poll_ms=60_000))
    await wait_until(lambda: restarted.waiting == 1, timeout=5)
    await ack(restarted, first.receipt_handle)
    (second,) = await asyncio.wait_for(waiting, 5)
    assert second.message.body == b"second"


async def test_a_waiting_orderly_pop_gets_the_expired_batch_when_its_invisible_time_ends(
    held: tuple[Parts, PopService], clock: Clock
) -> None:
    """Nothing arrives and nothing is acked: a pop waiting for a blocked orderly queue wakes
    by itself when the first of its blocked queues opens (not the last) and gets that batch
    again (another group's batch does not hand it out)."""
    parts, service = held
    put(parts, b"o0")
    put(parts, b"q1", queue_id=1)
    (other,) = await pop(service, group="other", fifo=True, queue_id=1, invisible_ms=100)
    (first,) = await pop(service, fifo=True, invisible_ms=200)
    (later,) = await pop(service, fifo=True, queue_id=1, invisible_ms=60_000)  # opens much later
    clock.now = T0 + 100
    waiting = asyncio.ensure_future(pop(service, queue_id=None, fifo=True, poll_ms=60_000))
    await wait_until(lambda: service.waiting == 1, timeout=5)
    clock.now = T0 + 200  # no event: only the pop's own timer can notice
    (again,) = await asyncio.wait_for(waiting, 5)
    assert (again.message.body, again.delivery_attempt) == (b"o0", 2)
    assert first.message.body == b"o0" and other.message.body == later.message.body == b"q1"


async def test_committed_revive_progress_stops_at_the_oldest_of_several_check_points_in_one_queue(
    held: tuple[Parts, PopService],
) -> None:
    """Two groups' orderly batches of queue 0 share revive queue 0: the committed progress
    stops at the older one, so a restart still has both in flight."""
    parts, service = held
    put(parts, b"o")
    (a,) = await pop(service, group="ga", fifo=True)
    (b,) = await pop(service, group="gb", fifo=True)
    service.commit_progress()
    restarted = service_for(parts)
    restarted.recover()
    assert restarted.in_flight == 2
    assert a.message.body == b.message.body == b"o"


async def test_when_too_many_receives_wait_a_notification_says_polling_full_and_a_pop_is_refused(
    held: tuple[Parts, PopService], monkeypatch: pytest.MonkeyPatch
) -> None:
    """maxPopPollingSize (here 1) receives waiting already: a NOTIFICATION that would wait
    answers (no messages, polling full) and a waiting POP is refused with POLLING_FULL."""
    _, service = held
    monkeypatch.setattr(receive_module, "MAX_WAITING", 1)
    waiting = asyncio.ensure_future(pop(service, queue_id=None, poll_ms=60_000))
    await wait_until(lambda: service.waiting == 1, timeout=5)
    told = service.notification(group=GROUP, topic=TOPIC, queue_id=-1, poll_ms=10_000)
    assert await asyncio.wait_for(told, 5) == (False, True)
    with pytest.raises(PollingFullError, match="1 receives are waiting already"):
        await asyncio.wait_for(pop(service, queue_id=None, poll_ms=10_000), 5)
    waiting.cancel()
    await asyncio.gather(waiting, return_exceptions=True)


# -- second pass: the functions the first run did not reach ------------------------------------


async def test_a_pop_time_is_the_wall_clock_in_milliseconds(tmp_path: Path) -> None:
    """Without a held clock: the pop time a pop reports and its handles carry is the wall
    clock in ms (as Apache's System.currentTimeMillis()), which clients add the invisible
    time to."""
    async with broker_parts(tmp_path) as parts:
        parts.topics.put(TopicConfig(topic_name=TOPIC, read_queue_nums=1, write_queue_nums=1))
        service = service_for(parts)
        put(parts, b"w")
        before = time.time_ns() // 1_000_000
        result = await service.pop(group=GROUP, topic=TOPIC, queue_id=0, max_messages=1, invisible_ms=1_000)
        after = time.time_ns() // 1_000_000
        assert before <= result.pop_time <= after
        assert ReceiptHandle.decode(result.messages[0].receipt_handle).pop_time == result.pop_time


async def test_the_messages_of_a_deleted_group_are_still_redelivered_and_other_pops_go_on(
    held: tuple[Parts, PopService], clock: Clock
) -> None:
    """A subscription group deleted while its popped message is in flight: at the invisible
    time the message is still redelivered to the group's retry topic (the default
    retryMaxTimes applies), and the pops of other groups that run the revive are not
    disturbed."""
    parts, service = held
    put(parts, b"d")
    (first,) = await pop(service)
    assert parts.groups.delete(GROUP)
    clock.now = T0 + 10_000
    assert bodies(await pop(service, group="other")) == [b"d"]
    (copy,) = parts.messages(pop_retry_topic(GROUP, TOPIC), 0)
    assert (copy.body, copy.reconsume_times) == (b"d", 1)
    assert first.message.body == b"d" and service.in_flight == 1  # the other group's


async def test_after_a_restart_a_waiting_notification_is_woken_by_a_redelivery(
    held: tuple[Parts, PopService], clock: Clock
) -> None:
    """After a restart nobody has popped yet: a NOTIFICATION waiting for the topic learns at
    once that a recovered message came back to the group's retry topic (not at the end of
    its poll time)."""
    parts, service = held
    put(parts, b"n")
    await pop(service)
    restarted = service_for(parts)
    restarted.recover()
    parts.store.add_arrival_listener(restarted.on_arrival)
    told = asyncio.ensure_future(
        restarted.notification(group=GROUP, topic=TOPIC, queue_id=-1, poll_ms=60_000)
    )
    await wait_until(lambda: restarted.waiting == 1, timeout=5)
    clock.now = T0 + 10_000
    restarted.reviver.revive_due(clock.now)
    assert await asyncio.wait_for(told, 5) == (True, False)


async def test_recovery_logs_how_many_batches_and_acked_messages_it_found_in_flight(
    held: tuple[Parts, PopService], caplog: pytest.LogCaptureFixture
) -> None:
    """The recovery line counts the check points still in flight (two batches) and their
    acked messages (one of each); a revive log with nothing in flight logs no such line."""
    parts, service = held
    caplog.set_level(logging.INFO, logger="aiorocketmq.broker.pop.recovery")
    service_for(parts).recover()
    assert not [m for m in caplog.messages if "after recovery" in m]
    for queue_id in (0, 1):
        put(parts, b"a", queue_id=queue_id)
        put(parts, b"b", queue_id=queue_id)
        first, _ = await pop(service, queue_id=queue_id)
        await ack(service, first.receipt_handle)
    service_for(parts).recover()
    assert "POP: 2 check points in flight after recovery (2 messages acked)" in caplog.messages


async def test_a_restart_does_not_undo_an_offset_reset_made_after_the_batches_were_settled(
    held: tuple[Parts, PopService],
) -> None:
    """Recovery replays the revive log from its committed progress only: a batch acked and
    settled before it does not move the group's offset again, so a reset of the offset
    (mqadmin resetOffsetByTime) made after it still re-delivers the messages after a restart."""
    parts, service = held
    put(parts, b"m0")
    (msg,) = await pop(service)
    await ack(service, msg.receipt_handle)
    service.commit_progress()
    parts.offsets.commit(GROUP, TOPIC, 0, 0)  # the reset
    restarted = service_for(parts)
    restarted.recover()
    assert parts.offsets.query(GROUP, TOPIC, 0) == 0
    assert bodies(await pop(restarted)) == [b"m0"]


async def test_successive_pops_spread_their_batches_over_every_revive_queue(
    held: tuple[Parts, PopService],
) -> None:
    """Eight pops in a row use each of the eight revive queues once (Apache's round robin),
    so expiries are spread over every revive queue."""
    parts, service = held
    for i in range(8):
        put(parts, f"r{i}".encode())
    qids = []
    for _ in range(8):
        (msg,) = await pop(service, max_messages=1)
        qids.append(ReceiptHandle.decode(msg.receipt_handle).revive_qid)
    assert sorted(qids) == list(range(8))


async def test_batches_that_expire_together_are_redelivered_in_the_order_they_were_popped(
    held: tuple[Parts, PopService], clock: Clock
) -> None:
    """Two batches popped in the same millisecond with the same invisible time: the one
    popped first (queue 1) lands in the retry topic first."""
    parts, service = held
    put(parts, b"q1", queue_id=1)
    put(parts, b"q0", queue_id=0)
    await pop(service, queue_id=1, invisible_ms=1_000)
    await pop(service, queue_id=0, invisible_ms=1_000)
    clock.now = T0 + 1_000
    service.reviver.revive_due(clock.now)
    assert bodies_of(parts.messages(pop_retry_topic(GROUP, TOPIC), 0)) == [b"q1", b"q0"]


async def test_revive_log_records_are_born_here_and_a_refused_one_says_why(
    held: tuple[Parts, PopService], caplog: pytest.LogCaptureFixture
) -> None:
    """The revive log's records carry this broker's address as their born host (as Apache
    writes them); when the disk is full, the refusal names the revive topic and the store's
    reason, and a redelivery that cannot be written is logged with its own."""
    parts, service = held
    put(parts, b"a")
    (msg,) = await pop(service, invisible_ms=1_000)
    qid = ReceiptHandle.decode(msg.receipt_handle).revive_qid
    (record,) = parts.messages(service.revive_topic, qid)
    assert record.born_host_bytes == STORE_HOST
    store = parts.store
    ratio = store.config.disk_space_warning_level_ratio
    store.config.disk_space_warning_level_ratio = 0.0
    assert store.check_disk()
    full = "service not available now: the broker's disk is full"
    with pytest.raises(
        ServerSystemError, match=re.escape(f"POP state cannot be written to {service.revive_topic}: {full}")
    ):
        await ack(service, msg.receipt_handle)
    with caplog.at_level(logging.WARNING, logger="aiorocketmq.broker.pop.revive"):
        service.reviver.revive_due(T0 + 1_000)
    retry = pop_retry_topic(GROUP, TOPIC)
    key = (TOPIC, GROUP, 0, 0, T0)
    logged = [m for m in caplog.messages if m.startswith("POP: redelivery of")]
    assert len(logged) == 1 and logged[0].endswith("bytes free)"), logged
    assert logged[0].startswith(
        f"POP: redelivery of {key} failed, trying again later: SYSTEM_ERROR(1): redelivery to {retry} failed: {full}"
    )
    store.config.disk_space_warning_level_ratio = ratio
    assert not store.check_disk()


class _FlushTimesOut:
    """The store, but a SYNC_FLUSH disk that never confirms a flush in time."""

    def __init__(self, store: MessageStore) -> None:
        self._store = store

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def wait_flushed(self, result: PutResult) -> PutStatus:
        return PutStatus.FLUSH_DISK_TIMEOUT


async def test_pop_records_not_flushed_in_time_are_logged_and_the_pop_still_answers(
    held: tuple[Parts, PopService], caplog: pytest.LogCaptureFixture
) -> None:
    """A flush that times out does not fail the pop or the ack; a warning names the status.
    When the flush is confirmed nothing is logged."""
    parts, service = held
    caplog.set_level(logging.WARNING, logger="aiorocketmq.broker.pop.inflight")
    put(parts, b"fine")
    (fine,) = await pop(service)
    await ack(service, fine.receipt_handle)
    assert not [m for m in caplog.messages if "flushed" in m]
    slow = PopService(
        parts.config,
        store=cast(MessageStore, _FlushTimesOut(parts.store)),
        writer=parts.writer,
        topics=parts.topics,
        groups=parts.groups,
        offsets=parts.offsets,
    )
    put(parts, b"slow")
    assert bodies(await pop(slow)) == [b"slow"]
    assert "POP: state records not flushed in time (FLUSH_DISK_TIMEOUT)" in caplog.messages


async def test_the_revive_logs_progress_is_committed_while_the_broker_runs(
    held: tuple[Parts, PopService], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not only at stop: the running service commits the settled revive progress every
    PROGRESS_INTERVAL, so a crash replays little."""
    parts, service = held
    monkeypatch.setattr(recovery_module, "PROGRESS_INTERVAL", 0.01)
    service.start()
    try:
        put(parts, b"p")
        (msg,) = await pop(service)
        await ack(service, msg.receipt_handle)
        qid = ReceiptHandle.decode(msg.receipt_handle).revive_qid
        await wait_until(lambda: parts.offsets.query(REVIVE_GROUP, service.revive_topic, qid) == 2, timeout=5)
    finally:
        await service.stop()


async def test_the_revive_timer_redelivers_on_time_and_leaves_the_loop_free_while_it_waits(
    tmp_path: Path,
) -> None:
    """Wall clock, running service: a message 0.8 s from its invisible time does not keep
    the event loop busy until then (other tasks run on time), and the revive timer
    redelivers it by itself."""
    async with broker_parts(tmp_path) as parts:
        parts.topics.put(TopicConfig(topic_name=TOPIC, read_queue_nums=1, write_queue_nums=1))
        service = service_for(parts)
        service.recover()
        service.start()
        try:
            put(parts, b"t")
            await pop(service, invisible_ms=800)
            loop = asyncio.get_running_loop()
            started = loop.time()
            await asyncio.sleep(0.05)
            assert loop.time() - started < 0.5
            await wait_until(lambda: service.redelivered == 1, timeout=5)
            assert bodies_of(parts.messages(pop_retry_topic(GROUP, TOPIC), 0)) == [b"t"]
        finally:
            await service.stop()


async def test_a_batch_still_in_flight_survives_two_restarts_in_a_row(
    held: tuple[Parts, PopService], clock: Clock
) -> None:
    """Crash, restart, commit the revive progress, crash again: the batch still in flight
    is recovered both times (the progress the first restart commits stops at its record),
    and a settled batch recovered before it does not hide it."""
    parts, service = held
    put(parts, b"o")
    (a,) = await pop(service, group="ga", fifo=True)  # revive queue 0, offset 0
    (b,) = await pop(service, group="gb", fifo=True)  # revive queue 0, offset 1
    await service.ack(group="ga", topic=TOPIC, receipt_handle=a.receipt_handle)  # revive queue 0, offset 2
    first = service_for(parts)
    first.recover()
    assert first.in_flight == 1
    first.commit_progress()
    second = service_for(parts)
    second.recover()
    assert second.in_flight == 1
    clock.now = T0 + 10_000
    (again,) = await pop(second, group="gb", fifo=True)
    assert (again.message.body, again.delivery_attempt) == (b"o", 2)
    assert b.message.body == b"o"


async def test_after_a_restart_a_batch_popped_after_a_settled_one_still_comes_back(
    held: tuple[Parts, PopService], clock: Clock
) -> None:
    """The first batch is acked, the second is not: after a restart the second is still
    redelivered at its invisible time."""
    parts, service = held
    put(parts, b"a")
    put(parts, b"b")
    (a,) = await pop(service, max_messages=1)
    assert bodies(await pop(service, max_messages=1)) == [b"b"]
    await ack(service, a.receipt_handle)
    restarted = service_for(parts)
    restarted.recover()
    assert restarted.in_flight == 1
    clock.now = T0 + 10_000
    (again,) = await pop(restarted, queue_id=None)
    assert (again.message.body, again.delivery_attempt) == (b"b", 2)


async def test_a_pop_of_any_queue_starts_at_a_random_queue(held: tuple[Parts, PopService]) -> None:
    """Pops of one message from any queue are served from both queues, not always from the
    first (Apache starts at a random queue)."""
    parts, service = held
    for i in range(20):
        put(parts, f"q0-{i}".encode(), queue_id=0)
        put(parts, f"q1-{i}".encode(), queue_id=1)
    served = set()
    for _ in range(20):
        (msg,) = await pop(service, queue_id=None, max_messages=1)
        served.add(msg.message.queue_id)
    assert served == {0, 1}


async def test_redeliveries_and_new_messages_take_turns(held: tuple[Parts, PopService], clock: Clock) -> None:
    """60 redeliveries wait in the retry topic and 60 new messages in the topic: of 60 pops
    of one message, some (about a fifth, as Apache reads the retry topic first one time in
    five) take a redelivery and most a new message, so neither starves the other."""
    parts, service = held
    for i in range(60):
        put(parts, f"old{i}".encode())
    popped = 0
    while popped < 60:  # a read stops at the end of a consume-queue file (50 entries)
        popped += len(await pop(service, invisible_ms=1_000))
    clock.now = T0 + 1_000
    service.reviver.revive_due(clock.now)
    assert service.redelivered == 60
    for i in range(60):
        put(parts, f"new{i}".encode())
    retry = pop_retry_topic(GROUP, TOPIC)
    from_retry = 0
    for _ in range(60):
        (msg,) = await pop(service, max_messages=1)
        from_retry += msg.message.topic == retry
    assert 1 <= from_retry <= 30


async def test_a_blocked_orderly_queue_does_not_stop_an_orderly_pop_of_any_queue(
    held: tuple[Parts, PopService],
) -> None:
    """Queue 0 is blocked by each group's orderly batch: an orderly pop of any queue still
    gets queue 1's message, whichever queue it looks at first."""
    parts, service = held
    put(parts, b"q0")
    put(parts, b"q1", queue_id=1)
    for g in range(10):
        group = f"fifo-{g}"
        assert bodies(await pop(service, group=group, queue_id=0, fifo=True)) == [b"q0"]
        assert bodies(await pop(service, group=group, queue_id=None, fifo=True)) == [b"q1"]


async def test_a_pop_of_any_queue_hands_out_no_more_than_asked_in_all(held: tuple[Parts, PopService]) -> None:
    """Two queues of three messages each: a pop of any queue for four gets four."""
    parts, service = held
    for i in range(3):
        put(parts, f"q0-{i}".encode(), queue_id=0)
        put(parts, f"q1-{i}".encode(), queue_id=1)
    result = await service.pop(group=GROUP, topic=TOPIC, queue_id=None, max_messages=4, invisible_ms=1_000)
    assert len(result.messages) == 4 and result.rest == 2


async def test_rest_counts_what_every_queue_read_left_behind(tmp_path: Path, clock: Clock) -> None:
    """The store hands out at most two messages per read (maxTransferCountOnMessageInMemory):
    a pop of any queue takes two of each queue's three, and its restNum counts the one left
    in each."""
    async with broker_parts(tmp_path, {"maxTransferCountOnMessageInMemory": 2}) as parts:
        parts.topics.put(TopicConfig(topic_name=TOPIC, read_queue_nums=2, write_queue_nums=2))
        service = service_for(parts)
        for i in range(3):
            put(parts, f"q0-{i}".encode(), queue_id=0)
            put(parts, f"q1-{i}".encode(), queue_id=1)
        result = await service.pop(
            group=GROUP, topic=TOPIC, queue_id=None, max_messages=32, invisible_ms=1_000
        )
        assert (len(result.messages), result.rest) == (4, 2)


async def test_a_pop_that_finds_only_other_tags_moves_the_groups_offset_past_them(
    held: tuple[Parts, PopService],
) -> None:
    """Nothing matches the pop's tag: the group's offset still moves past what was scanned
    (as Apache commits it), so the next pop does not scan it again."""
    parts, service = held
    for i in range(5):
        put(parts, f"x{i}".encode(), tags="x")
    assert await pop(service, expression="y") == []
    assert parts.offsets.query(GROUP, TOPIC, 0) == 5


async def test_an_orderly_re_pop_settles_every_batch_it_supersedes(
    held: tuple[Parts, PopService], clock: Clock
) -> None:
    """An orderly batch of two whose second message's invisible time was changed (so two
    check points hold the queue, expiring together): the re-pop hands out both again, and
    once those are acked the queue moves on to its next message; nothing else is in flight."""
    parts, service = held
    for i in range(3):
        put(parts, f"o{i}".encode())
    o0, o1 = await pop(service, max_messages=2, fifo=True)
    clock.now = T0 + 1_000
    await service.change_invisible(
        group=GROUP, topic=TOPIC, receipt_handle=o1.receipt_handle, invisible_ms=9_000
    )
    clock.now = T0 + 10_000
    again = await pop(service, max_messages=2, fifo=True)
    assert [(m.message.body, m.delivery_attempt) for m in again] == [(b"o0", 2), (b"o1", 2)]
    for m in again:
        await ack(service, m.receipt_handle)
    assert service.in_flight == 0
    (nxt,) = await pop(service, max_messages=1, fifo=True)
    assert (nxt.message.body, nxt.delivery_attempt) == (b"o2", 1)
    assert o0.message.body == b"o0"


async def test_a_pop_result_describes_its_batches_and_carries_the_stored_records(
    held: tuple[Parts, PopService],
) -> None:
    """What the remoting response is built from: one check point per queue read (its topic,
    queue and offsets: startOffsetInfo and msgOffsetInfo), each message's stored record (the
    response body), and per message the pop time and invisible time (what the gRPC front
    renews handles with)."""
    parts, service = held
    put(parts, b"r0")
    put(parts, b"r1")
    result = await service.pop(group=GROUP, topic=TOPIC, queue_id=0, max_messages=32, invisible_ms=7_000)
    assert [(ck.topic, ck.queue_id, ck.start_offset, ck.offsets) for ck in result.checkpoints] == [
        (TOPIC, 0, 0, [0, 1])
    ]
    for m in result.messages:
        stored = decode_record(m.record)[0]
        assert (stored.body, stored.queue_offset) == (m.message.body, m.message.queue_offset)
        assert (m.pop_time, m.invisible_time) == (result.pop_time, 7_000)


async def test_a_group_whose_offset_is_0_goes_on_from_the_first_message_kept(
    held: tuple[Parts, PopService],
) -> None:
    """A group that first popped the queue while it was young has offset 0; after retention
    deleted the queue's first messages its next pop starts at the first message kept, not
    at the end (its offset is its own, not a new group's)."""
    parts, service = held
    assert await pop(service, group="early") == []
    assert parts.offsets.query("early", TOPIC, 0) == 0
    assert roll_away(parts) == 100
    (first,) = await pop(service, group="early", max_messages=1)
    assert first.message.queue_offset == 100


async def test_a_pop_of_any_queue_of_a_topic_without_read_queues_finds_nothing(
    held: tuple[Parts, PopService],
) -> None:
    """A topic whose read queues were set to 0 (scaled down by an admin): a pop of any of
    its queues answers with nothing instead of failing; a pop of queue 0 is refused."""
    parts, service = held
    parts.topics.put(TopicConfig(topic_name="NoReads", read_queue_nums=0, write_queue_nums=1))
    result = await service.pop(
        group=GROUP, topic="NoReads", queue_id=None, max_messages=1, invisible_ms=1_000
    )
    assert (result.messages, result.rest) == ([], 0)
    with pytest.raises(
        MessageIllegalError, match=re.escape("queueId[0] is illegal, topic:[NoReads] readQueueNums:[0]")
    ):
        await pop(service, topic="NoReads", queue_id=0)


async def test_a_waiting_orderly_pop_gets_the_batch_soon_after_it_opens(
    held: tuple[Parts, PopService], clock: Clock
) -> None:
    """A pop waiting for a queue whose orderly batch opens 0.1 s later gets the batch about
    then, not a second later."""
    parts, service = held
    put(parts, b"o0")
    await pop(service, fifo=True, invisible_ms=200)
    clock.now = T0 + 100
    waiting = asyncio.ensure_future(pop(service, fifo=True, poll_ms=60_000))
    await wait_until(lambda: service.waiting == 1, timeout=5, interval=0.001)
    loop = asyncio.get_running_loop()
    started = loop.time()
    clock.now = T0 + 200
    (again,) = await asyncio.wait_for(waiting, 5)
    assert loop.time() - started < 0.6
    assert (again.message.body, again.delivery_attempt) == (b"o0", 2)


async def test_polling_info_counts_a_pop_waiting_for_queue_0_under_queue_0(
    held: tuple[Parts, PopService],
) -> None:
    """POLLING_INFO of queue 0 counts a pop waiting for queue 0 (not as waiting for any queue)."""
    _, service = held
    waiting = asyncio.ensure_future(pop(service, queue_id=0, poll_ms=60_000))
    await wait_until(lambda: service.waiting == 1, timeout=5)
    assert (service.polling(GROUP, TOPIC, 0), service.polling(GROUP, TOPIC, -1)) == (1, 0)
    waiting.cancel()
    await asyncio.gather(waiting, return_exceptions=True)


async def test_a_batch_acked_before_its_time_does_not_hold_back_the_next_redelivery(
    held: tuple[Parts, PopService], clock: Clock
) -> None:
    """Two batches due at the same time, the first acked: the pop at their invisible time
    still gets the second back (the revive it runs first goes past the settled one)."""
    parts, service = held
    put(parts, b"a")
    put(parts, b"b")
    (a,) = await pop(service, max_messages=1)
    (b,) = await pop(service, max_messages=1)
    await ack(service, a.receipt_handle)
    clock.now = T0 + 10_000
    (again,) = await pop(service, queue_id=None)
    assert (again.message.body, again.delivery_attempt) == (b"b", 2)
    assert b.message.body == b"b"


async def test_batches_whose_redelivery_failed_together_are_retried_in_the_order_they_were_popped(
    held: tuple[Parts, PopService], clock: Clock
) -> None:
    """Disk full when two batches of the same millisecond expire: both are tried again 5 s
    later, and land in the retry topic in the order they were popped (queue 1 first)."""
    parts, service = held
    put(parts, b"q1", queue_id=1)
    put(parts, b"q0", queue_id=0)
    await pop(service, queue_id=1, invisible_ms=1_000)
    await pop(service, queue_id=0, invisible_ms=1_000)
    store = parts.store
    ratio = store.config.disk_space_warning_level_ratio
    store.config.disk_space_warning_level_ratio = 0.0
    assert store.check_disk()
    service.reviver.revive_due(T0 + 1_000)
    assert service.redelivered == 0
    store.config.disk_space_warning_level_ratio = ratio
    assert not store.check_disk()
    service.reviver.revive_due(T0 + 6_000)
    assert bodies_of(parts.messages(pop_retry_topic(GROUP, TOPIC), 0)) == [b"q1", b"q0"]


async def test_a_pop_with_an_sql92_expression_that_does_not_parse_says_why(tmp_path: Path) -> None:
    """enablePropertyFilter on: an SQL92 expression that does not parse is refused with the
    parser's reason."""
    async with broker_parts(tmp_path, enablePropertyFilter="true") as parts:
        parts.topics.put(TopicConfig(topic_name=TOPIC, read_queue_nums=1, write_queue_nums=1))
        service = service_for(parts)
        with pytest.raises(
            SubscriptionParseFailedError, match=r"parse the consumer's subscription failed: \S"
        ):
            await pop(service, expression_type="SQL92", expression="a >")


async def test_a_service_stopped_before_it_started_still_commits_the_revive_progress(
    held: tuple[Parts, PopService],
) -> None:
    """A broker whose start-up failed stops its POP service without having started it: the
    stop still commits how far the revive log is settled."""
    parts, service = held
    put(parts, b"s")
    (msg,) = await pop(service)
    await ack(service, msg.receipt_handle)
    await service.stop()
    queue = ReceiptHandle.decode(msg.receipt_handle).revive_qid
    assert parts.offsets.query(REVIVE_GROUP, service.revive_topic, queue) == 2


async def test_a_new_group_starts_at_the_end_once_even_only_the_first_message_is_gone(
    held: tuple[Parts, PopService],
) -> None:
    """Retention deleted just the queue's first message (its minimum offset is 1): a group
    popping the queue for the first time starts at its end (INIT_MODE_MAX), as for any queue
    that no longer holds its first message (Apache reads from 0 only while the minimum is 0)."""
    parts, service = held
    writer = parts.writer
    # the first message fills the first commit-log file by itself
    assert writer.put(writer.build(TOPIC, 0, b"f" * (64 * 1024 - 120), {PropertyKey.TAGS: "f"})).ok
    for i in range(3):
        put(parts, f"kept{i}".encode())
    assert parts.store.delete_expired_files(force=True) > 0
    assert parts.store.get_min_offset(TOPIC, 0) == 1
    assert await pop(service, group="newcomer") == []
    assert parts.offsets.query("newcomer", TOPIC, 0) == 4
