"""Delayed delivery in process: a due message in ``SCHEDULE_TOPIC_XXXX`` is re-stored to its
real topic and queue with its properties restored; one not yet due waits."""

from __future__ import annotations

import asyncio
import time

from aiorocketmq.broker.store import StoreMessage
from aiorocketmq.protocol.codes import PERM_READ_WRITE
from aiorocketmq.protocol.message import PropertyKey, decode_records, encode_properties, java_hash, pack_host
from aiorocketmq.protocol.names import SCHEDULE_TOPIC

from .support import Parts, RecordedConnection, send_ok

TOPIC = "DelayTopic"


def arrivals(parts: Parts, topic: str) -> asyncio.Queue[tuple[int, int]]:
    """(queue id, next offset) of every message dispatched to ``topic``, as it happens."""
    seen: asyncio.Queue[tuple[int, int]] = asyncio.Queue()

    def listener(arrived: str, queue_id: int, next_offset: int, _code: int) -> None:
        if arrived == topic:
            seen.put_nowait((queue_id, next_offset))

    parts.store.add_arrival_listener(listener)
    return seen


async def test_a_due_message_is_delivered_with_its_properties_restored(parts: Parts) -> None:
    parts.topics.ensure(TOPIC, 4, PERM_READ_WRITE)
    stored_at = time.time_ns() // 1_000_000 - 60_000  # parked a minute ago at level 2 (5 s)
    properties = {
        PropertyKey.TAGS: "TagD",
        PropertyKey.KEYS: "order-7",
        PropertyKey.DELAY_TIME_LEVEL: "2",
        PropertyKey.REAL_TOPIC: TOPIC,
        PropertyKey.REAL_QUEUE_ID: "3",
        "custom": "kept",
    }
    born = pack_host("10.1.2.3", 4567)
    parked = StoreMessage(
        topic=SCHEDULE_TOPIC,
        queue_id=1,
        body=b"due",
        properties=encode_properties(properties),
        flag=7,
        born_timestamp=stored_at - 5,
        born_host=born,
        reconsume_times=2,
        tags_code=stored_at + 5_000,
        keys="order-7",
        store_timestamp=stored_at,
    )
    assert parts.writer.put(parked).ok
    seen = arrivals(parts, TOPIC)
    parts.delay.start()
    async with asyncio.timeout(10):
        assert await seen.get() == (3, 1)
    (delivered,) = parts.messages(TOPIC, 3)
    assert delivered.body == b"due"
    assert delivered.properties[PropertyKey.TAGS] == "TagD"
    assert delivered.properties["custom"] == "kept"
    assert PropertyKey.DELAY_TIME_LEVEL not in delivered.properties
    assert (delivered.flag, delivered.reconsume_times, delivered.born_host) == (7, 2, "10.1.2.3:4567")
    assert delivered.store_timestamp > stored_at
    # In the real queue the tags slot is the tag's hash again, and the key is indexed.
    assert parts.tags_codes(TOPIC, 3) == [java_hash("TagD")]
    found = parts.store.query_by_key(TOPIC, "order-7", 4, 0, 2**62)
    assert [m.body for record in found.records for m in decode_records(record)] == [b"due"]
    assert parts.delay.offsets[2] == 1 and parts.delay.delivered == 1


async def test_a_sent_delayed_message_waits_for_its_level(parts: Parts, conn: RecordedConnection) -> None:
    parts.topics.ensure(TOPIC, 4, PERM_READ_WRITE)
    seen = arrivals(parts, TOPIC)
    parts.delay.start()
    await send_ok(
        parts, conn, TOPIC, b"in a second", queue_id=1, properties={PropertyKey.DELAY_TIME_LEVEL: "1"}
    )
    (parked,) = parts.messages(SCHEDULE_TOPIC, 0)
    assert parts.store.get_max_offset(TOPIC, 1) == 0
    async with asyncio.timeout(10):
        assert await seen.get() == (1, 1)
    (delivered,) = parts.messages(TOPIC, 1)
    assert delivered.body == b"in a second"
    assert delivered.store_timestamp >= parked.store_timestamp + 1_000  # level 1 is 1 s
    assert parts.delay.offsets[1] == 1


async def test_delivery_progress_survives_a_reload(parts: Parts, conn: RecordedConnection) -> None:
    parts.topics.ensure(TOPIC, 1, PERM_READ_WRITE)
    seen = arrivals(parts, TOPIC)
    parts.delay.start()
    await send_ok(parts, conn, TOPIC, b"once", properties={PropertyKey.DELAY_TIME_LEVEL: "1"})
    async with asyncio.timeout(10):
        await seen.get()
    await parts.delay.stop()
    await parts.delay.flush()
    parts.delay.offsets.clear()
    parts.delay.load()
    assert parts.delay.offsets[1] == 1  # from delayOffset.json: not delivered twice
