"""The ack records POP writes per acknowledged message are formatted by hand (once per ack,
the hot path of a 5.x consumer acking each message): they must be the very bytes the JSON
encoder writes for the same fields, whatever the names hold, and read back the same."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from aiorocketmq.broker.pop import ReceiptHandleExpiredError
from aiorocketmq.broker.pop.checkpoint import (
    ACK_TAG,
    BATCH_ACK_TAG,
    CK_TAG,
    CheckPoint,
    decode_ack,
    encode_ack,
)
from aiorocketmq.protocol.body import TopicConfig
from aiorocketmq.protocol.message import MessageExt, PropertyKey, decode_record, stored_properties

from .support import Parts, broker_parts
from .test_pop import GROUP, TOPIC, put, receive, service_for


def json_ack(ck: CheckPoint, offsets: list[int]) -> tuple[str, bytes]:
    """Apache's AckMsg / BatchAckMsg field order, through ``json.dumps``."""
    body: dict[str, object] = {
        "so": ck.start_offset,
        "c": ck.group,
        "t": ck.topic,
        "q": ck.queue_id,
        "pt": ck.pop_time,
        "bn": ck.broker_name,
    }
    if len(offsets) == 1:
        body["ao"] = offsets[0]
        return ACK_TAG, json.dumps(body, separators=(",", ":")).encode()
    body["aol"] = offsets
    return BATCH_ACK_TAG, json.dumps(body, separators=(",", ":")).encode()


NAMES = [
    ("Orders", "billing", "broker-a"),
    ("%RETRY%billing_Orders", "billing", "broker-a"),
    ('quo"te\\back/slash', "tab\tnew\nline\x01", "ctl\x1f\x7f"),
    ("топик", "组", "brøker\u2028é"),
    ("", "", ""),
]


@pytest.mark.parametrize(("topic", "group", "broker_name"), NAMES)
@pytest.mark.parametrize("offsets", [[0], [1002], [2**40 + 7], [1000, 1005], [0, 1, 2**33], list(range(32))])
def test_an_ack_record_is_the_json_encoders_bytes(
    topic: str, group: str, broker_name: str, offsets: list[int]
) -> None:
    ck = CheckPoint(
        topic=topic,
        group=group,
        queue_id=7,
        start_offset=offsets[0],
        pop_time=1_765_000_000_123,
        invisible_time=30_000,
        offsets=offsets,
        attempts=[1] * len(offsets),
        revive_qid=3,
        revive_queue=3,
        broker_name=broker_name,
    )
    tag, body = encode_ack(ck, offsets)
    assert (tag, body) == json_ack(ck, offsets)
    assert decode_ack(body) == (ck.key, offsets)


async def test_revive_records_are_stored_with_their_tag_and_read_back(tmp_path: Path) -> None:
    """A pop's check point and an ack's record, as stored: each carries its tag alone as its
    properties (encoded once per tag, the writer's stored form), and a broker restarted on
    the store finds the acked message settled and the other still in flight."""
    async with broker_parts(tmp_path) as parts:
        parts.topics.put(TopicConfig(topic_name=TOPIC, read_queue_nums=1, write_queue_nums=1))
        service = service_for(parts)
        service.recover()
        for body in (b"a", b"b"):
            put(parts, body)
        acked, kept = await receive(
            service, group=GROUP, topic=TOPIC, queue_id=0, max_messages=2, invisible_ms=60_000
        )
        await service.ack(group=GROUP, topic=TOPIC, receipt_handle=acked.receipt_handle)
        topic = service.revive_topic
        records = []
        for queue in parts.store.queue_ids(topic):
            got = parts.store.get_messages("reader", topic, queue, 0, 32, None, None)
            records += [decode_record(bytes(buf))[0] for buf in got.buffers]
        tags = sorted(msg.properties[PropertyKey.TAGS] for msg in records)
        assert tags == [ACK_TAG, CK_TAG]
        for msg in records:
            assert msg.properties == {PropertyKey.TAGS: msg.properties[PropertyKey.TAGS]}
            assert stored_properties(msg.properties) == stored_properties({PropertyKey.TAGS: msg.tags})
        (ack,) = [msg for msg in records if msg.tags == ACK_TAG]
        assert decode_ack(ack.body)[1] == [acked.message.queue_offset]

        again = service_for(parts)
        again.recover()
        assert again.in_flight == 1
        with pytest.raises(ReceiptHandleExpiredError):
            await again.ack(group=GROUP, topic=TOPIC, receipt_handle=acked.receipt_handle)
        await again.ack(group=GROUP, topic=TOPIC, receipt_handle=kept.receipt_handle)
        assert again.in_flight == 0


def revive_records(parts: Parts, topic: str) -> list[MessageExt]:
    records: list[MessageExt] = []
    for queue in parts.store.queue_ids(topic):
        got = parts.store.get_messages("reader", topic, queue, 0, 64, None, None)
        records += [decode_record(bytes(buf))[0] for buf in got.buffers]
    return records


async def test_acks_of_a_batch_arriving_one_per_turn_share_one_record(tmp_path: Path) -> None:
    """A 5.x client acks each message of a batch in a call of its own; the calls reach the
    loop one per turn. The acks gather until the batch is all acked (well within GATHER_S
    here) and share one record; each is answered only once it is written."""
    async with broker_parts(tmp_path) as parts:
        parts.topics.put(TopicConfig(topic_name=TOPIC, read_queue_nums=1, write_queue_nums=1))
        service = service_for(parts)
        service.recover()
        for i in range(4):
            put(parts, f"m{i}".encode())
        got = await receive(
            service, group=GROUP, topic=TOPIC, queue_id=0, max_messages=4, invisible_ms=60_000
        )
        assert len(got) == 4
        loop = asyncio.get_running_loop()
        started = loop.time()
        acks = []
        for msg in got:
            acks.append(
                asyncio.ensure_future(
                    service.ack(group=GROUP, topic=TOPIC, receipt_handle=msg.receipt_handle)
                )
            )
            await asyncio.sleep(0)
            await asyncio.sleep(0)
            if len(acks) < 4:
                assert not any(a.done() for a in acks)  # nothing answered before its record
        await asyncio.gather(*acks)
        assert loop.time() - started < 1.0
        assert service.in_flight == 0
        records = revive_records(parts, service.revive_topic)
        assert sorted(msg.tags for msg in records) == [BATCH_ACK_TAG, CK_TAG]
        (batch,) = [msg for msg in records if msg.tags == BATCH_ACK_TAG]
        assert decode_ack(batch.body)[1] == [m.message.queue_offset for m in got]


async def test_an_ack_that_leaves_its_batch_in_flight_is_written_after_the_gathering_time(
    tmp_path: Path,
) -> None:
    """One ack of a batch of three: nothing else comes, so its record is written once the
    gathering time is up (and answered then); a second ack of the same handle meanwhile is
    refused as spent; the other messages stay in flight."""
    async with broker_parts(tmp_path) as parts:
        parts.topics.put(TopicConfig(topic_name=TOPIC, read_queue_nums=1, write_queue_nums=1))
        service = service_for(parts)
        service.recover()
        for i in range(3):
            put(parts, f"m{i}".encode())
        first, *rest = await receive(
            service, group=GROUP, topic=TOPIC, queue_id=0, max_messages=3, invisible_ms=60_000
        )
        twice = await asyncio.gather(
            service.ack(group=GROUP, topic=TOPIC, receipt_handle=first.receipt_handle),
            service.ack(group=GROUP, topic=TOPIC, receipt_handle=first.receipt_handle),
            return_exceptions=True,
        )
        assert twice[0] is None and isinstance(twice[1], ReceiptHandleExpiredError)
        assert service.in_flight == 2
        records = revive_records(parts, service.revive_topic)
        assert sorted(msg.tags for msg in records) == [ACK_TAG, CK_TAG]
        for msg in rest:
            await service.ack(group=GROUP, topic=TOPIC, receipt_handle=msg.receipt_handle)
        assert service.in_flight == 0
