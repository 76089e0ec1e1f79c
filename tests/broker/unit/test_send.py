"""SEND_MESSAGE / SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE / CONSUMER_SEND_MSG_BACK handled in
process: checks, topic auto-creation, retry and dead-letter routing, delay levels,
transactional half messages, batches, sync flush."""

from __future__ import annotations

from pathlib import Path

from aiorocketmq.protocol.codes import (
    PERM_READ_WRITE,
    TRANSACTION_NOT_TYPE,
    MQVersion,
    Perm,
    RequestCode,
    ResponseCode,
    RpcFlag,
    transaction_type,
)
from aiorocketmq.protocol.command import RemotingCommand
from aiorocketmq.protocol.headers import ConsumerSendMsgBackRequestHeader
from aiorocketmq.protocol.message import Message, PropertyKey, encode_batch
from aiorocketmq.protocol.names import SCHEDULE_TOPIC, TRANS_HALF_TOPIC, dlq_topic, retry_topic

from .support import Parts, RecordedConnection, answer, broker_parts, send_ok, send_request

TOPIC = "UnitTopic"


def make_topic(parts: Parts, topic: str = TOPIC, queues: int = 4, perm: int = PERM_READ_WRITE) -> None:
    parts.topics.ensure(topic, queues, perm)


async def test_send_stores_the_message_and_answers_where(parts: Parts, conn: RecordedConnection) -> None:
    make_topic(parts)
    response = await send_ok(parts, conn, TOPIC, b"hello", queue_id=2, tags="TagA")
    assert response.ext_fields["queueId"] == "2"
    assert response.ext_fields["queueOffset"] == "0"
    assert response.ext_fields["MSG_REGION"] == "DefaultRegion"
    (stored,) = parts.messages(TOPIC, 2)
    assert stored.body == b"hello"
    assert stored.offset_msg_id == response.ext_fields["msgId"]
    assert stored.properties[PropertyKey.CLUSTER] == parts.config.broker_cluster_name
    assert stored.properties[PropertyKey.TAGS] == "TagA"
    assert stored.born_host == "10.0.0.7:52001"
    assert parts.stats.put_messages[TOPIC] == 1


async def test_send_v1_header_is_served_like_v2(parts: Parts, conn: RecordedConnection) -> None:
    make_topic(parts)
    cmd = send_request(TOPIC, b"v1", code=RequestCode.SEND_MESSAGE)
    assert "producerGroup" in cmd.ext_fields
    response = await answer(parts.sender.send, conn, cmd)
    assert response.code == ResponseCode.SUCCESS
    assert [m.body for m in parts.messages(TOPIC, 0)] == [b"v1"]


async def test_send_checks_answer_with_their_codes(tmp_path: Path, conn: RecordedConnection) -> None:
    async with broker_parts(
        tmp_path, {"maxMessageSize": 1024}, autoCreateTopicEnable="false", brokerPermission="6"
    ) as parts:
        make_topic(parts)
        make_topic(parts, "ReadOnly", perm=int(Perm.READ))
        cases = [
            (
                send_request(SCHEDULE_TOPIC),
                ResponseCode.NO_PERMISSION,
                "Sending message to topic[SCHEDULE_TOPIC_XXXX] is forbidden.",
            ),
            (send_request("bad topic!"), ResponseCode.INVALID_PARAMETER, "contains characters other than"),
            (send_request("x" * 128), ResponseCode.INVALID_PARAMETER, "longer than 127"),
            (
                send_request("NoSuchTopic"),
                ResponseCode.TOPIC_NOT_EXIST,
                "topic[NoSuchTopic] not exist, apply first please!",
            ),
            (
                send_request("ReadOnly"),
                ResponseCode.NO_PERMISSION,
                "the topic[ReadOnly] sending message is forbidden",
            ),
            (
                send_request(TOPIC, queue_id=4),
                ResponseCode.INVALID_PARAMETER,
                "request queueId[4] is illegal",
            ),
            (
                send_request(TOPIC, b"x" * 1025),
                ResponseCode.MESSAGE_ILLEGAL,
                "body size 1025 bytes is over the maximum 1024",
            ),
            (
                send_request(TOPIC, properties={"big": "v" * 33000}),
                ResponseCode.MESSAGE_ILLEGAL,
                "properties size",
            ),
        ]
        for cmd, code, remark in cases:
            response = await answer(parts.sender.send, conn, cmd)
            assert (response.code, remark in (response.remark or "")) == (code, True), (
                remark,
                response.remark,
            )
        assert parts.store.get_max_offset(TOPIC, 0) == 0  # nothing refused was stored


async def test_a_broker_without_write_permission_refuses_sends(
    tmp_path: Path, conn: RecordedConnection
) -> None:
    async with broker_parts(tmp_path, brokerPermission=str(int(Perm.READ))) as parts:
        make_topic(parts)
        response = await answer(parts.sender.send, conn, send_request(TOPIC))
        assert response.code == ResponseCode.NO_PERMISSION
        assert response.remark == "the broker[127.0.0.1] sending message is forbidden"


async def test_first_send_creates_the_topic_from_tbw102(parts: Parts, conn: RecordedConnection) -> None:
    response = await send_ok(parts, conn, "Fresh", queue_id=-1, default_topic_queue_nums=3)
    created = parts.topics.get("Fresh")
    assert created is not None and (created.read_queue_nums, created.write_queue_nums) == (3, 3)
    assert 0 <= int(response.ext_fields["queueId"]) < 3  # a negative queue id picks one


async def test_send_to_retry_topic_below_max_stays_in_retry(parts: Parts, conn: RecordedConnection) -> None:
    retry = retry_topic("G1")
    await send_ok(parts, conn, retry, b"again", reconsume_times=1, max_reconsume_times=3)
    assert [m.body for m in parts.messages(retry, 0)] == [b"again"]
    assert parts.topics.get(dlq_topic("G1")) is None


async def test_send_to_retry_topic_at_max_reconsume_goes_to_the_dlq(
    parts: Parts, conn: RecordedConnection
) -> None:
    retry = retry_topic("G2")
    response = await send_ok(
        parts,
        conn,
        retry,
        b"dead",
        reconsume_times=3,
        max_reconsume_times=3,
        properties={PropertyKey.DELAY_TIME_LEVEL: "5"},
    )
    dlq = dlq_topic("G2")
    config = parts.topics.get(dlq)
    assert config is not None and config.perm == PERM_READ_WRITE and config.write_queue_nums == 1
    assert response.ext_fields["queueId"] == "0"
    (stored,) = parts.messages(dlq, 0)
    assert stored.body == b"dead" and PropertyKey.DELAY_TIME_LEVEL not in stored.properties
    assert parts.store.get_max_offset(retry, 0) == 0
    assert parts.store.get_max_offset(SCHEDULE_TOPIC, 4) == 0  # the delay was dropped


async def test_retry_reconsume_times_fall_back_to_the_property(
    parts: Parts, conn: RecordedConnection
) -> None:
    """Without ``reconsumeTimes`` in the header the broker reads RECONSUME_TIME; the group's
    retryMaxTimes (16) applies without ``maxReconsumeTimes``."""
    retry = retry_topic("G3")
    await send_ok(parts, conn, retry, b"16th", properties={PropertyKey.RECONSUME_TIME: "16"})
    assert [m.body for m in parts.messages(dlq_topic("G3"), 0)] == [b"16th"]


async def test_retry_send_of_an_unknown_group_is_refused(tmp_path: Path, conn: RecordedConnection) -> None:
    async with broker_parts(tmp_path, autoCreateSubscriptionGroup="false") as parts:
        response = await answer(parts.sender.send, conn, send_request(retry_topic("Nobody")))
        assert response.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST
        assert response.remark == "the retry group 'Nobody' does not exist"


async def test_delay_level_parks_the_message_in_the_schedule_topic(
    parts: Parts, conn: RecordedConnection
) -> None:
    make_topic(parts)
    response = await send_ok(
        parts, conn, TOPIC, b"later", queue_id=1, properties={PropertyKey.DELAY_TIME_LEVEL: "3"}
    )
    assert response.ext_fields["queueId"] == "1"
    assert parts.store.get_max_offset(TOPIC, 1) == 0
    (parked,) = parts.messages(SCHEDULE_TOPIC, 2)
    assert parked.properties[PropertyKey.REAL_TOPIC] == TOPIC
    assert parked.properties[PropertyKey.REAL_QUEUE_ID] == "1"
    (deliver_at,) = parts.tags_codes(SCHEDULE_TOPIC, 2)
    assert deliver_at == parked.store_timestamp + 10_000  # level 3 is 10 s


async def test_delay_level_past_the_last_waits_as_long_as_the_last(
    parts: Parts, conn: RecordedConnection
) -> None:
    make_topic(parts)
    await send_ok(parts, conn, TOPIC, properties={PropertyKey.DELAY_TIME_LEVEL: "99"})
    (parked,) = parts.messages(SCHEDULE_TOPIC, 17)
    assert parts.tags_codes(SCHEDULE_TOPIC, 17) == [parked.store_timestamp + 2 * 3600 * 1000]


async def test_transactional_send_stores_a_half_message(parts: Parts, conn: RecordedConnection) -> None:
    make_topic(parts)
    response = await send_ok(
        parts,
        conn,
        TOPIC,
        b"half",
        queue_id=3,
        sys_flag=0x4,
        properties={PropertyKey.TRANSACTION_PREPARED: "true", PropertyKey.PRODUCER_GROUP: "TxGroup"},
    )
    assert response.ext_fields["queueId"] == "3"
    assert parts.store.get_max_offset(TOPIC, 3) == 0
    (half,) = parts.messages(TRANS_HALF_TOPIC, 0)
    assert half.properties[PropertyKey.REAL_TOPIC] == TOPIC
    assert half.properties[PropertyKey.REAL_QUEUE_ID] == "3"
    assert transaction_type(half.sys_flag) == TRANSACTION_NOT_TYPE
    (pending,) = parts.transactions.pending.values()
    assert (pending.commit_log_offset, pending.producer_group) == (half.commit_log_offset, "TxGroup")


async def test_transactional_send_is_refused_when_the_broker_rejects_them(
    tmp_path: Path, conn: RecordedConnection
) -> None:
    async with broker_parts(tmp_path, rejectTransactionMessage="true") as parts:
        make_topic(parts)
        cmd = send_request(TOPIC, properties={PropertyKey.TRANSACTION_PREPARED: "true"})
        response = await answer(parts.sender.send, conn, cmd)
        assert response.code == ResponseCode.NO_PERMISSION
        assert "sending transaction message is forbidden" in response.remark
        assert not parts.transactions.pending


def batch_request(topic: str, messages: list[Message], **header: object) -> RemotingCommand:
    return send_request(
        topic, encode_batch(messages), code=RequestCode.SEND_BATCH_MESSAGE, batch=True, **header
    )


async def test_batch_stores_every_entry_with_its_own_properties(
    parts: Parts, conn: RecordedConnection
) -> None:
    make_topic(parts)
    batch = [Message(TOPIC, f"m{i}".encode(), tags=f"T{i}", keys=f"K{i}") for i in range(3)]
    response = await answer(parts.sender.send, conn, batch_request(TOPIC, batch, queue_id=1))
    assert response.code == ResponseCode.SUCCESS
    stored = parts.messages(TOPIC, 1)
    assert [m.body for m in stored] == [b"m0", b"m1", b"m2"]
    assert [m.tags for m in stored] == ["T0", "T1", "T2"]
    assert all(m.properties[PropertyKey.CLUSTER] == parts.config.broker_cluster_name for m in stored)
    assert response.ext_fields["msgId"].split(",") == [m.offset_msg_id for m in stored]
    assert response.ext_fields["queueOffset"] == "0"


async def test_batch_checks(parts: Parts, conn: RecordedConnection) -> None:
    make_topic(parts)
    delayed = Message(TOPIC, b"d")
    delayed.properties[PropertyKey.DELAY_TIME_LEVEL] = "2"
    cases = [
        (
            batch_request(retry_topic("G"), [Message(retry_topic("G"), b"x")]),
            "batch messages cannot be sent to a retry topic",
        ),
        (batch_request(TOPIC, [Message(TOPIC, b"x"), delayed]), "a batch message cannot have a delay level"),
        (
            send_request(TOPIC, b"\x00\x00\x00\x09garbage", code=RequestCode.SEND_BATCH_MESSAGE, batch=True),
            "bad batch body",
        ),
        (
            send_request(TOPIC, b"", code=RequestCode.SEND_BATCH_MESSAGE, batch=True),
            "the batch holds no message",
        ),
    ]
    for cmd, remark in cases:
        response = await answer(parts.sender.send, conn, cmd)
        assert response.code == ResponseCode.MESSAGE_ILLEGAL, (remark, response.remark)
        assert remark in response.remark
    assert parts.store.get_max_offset(TOPIC, 0) == 0


async def test_sync_flush_answers_once_the_message_is_flushed(
    tmp_path: Path, conn: RecordedConnection
) -> None:
    async with broker_parts(tmp_path, {"flushDiskType": "SYNC_FLUSH"}) as parts:
        make_topic(parts)

        async def handled(cmd: RemotingCommand) -> object:
            # What the handler gives, once any wait for the queue's first file is over.
            result = parts.sender.send(conn, cmd)  # type: ignore[arg-type]
            return await result if result is not None and not isinstance(result, RemotingCommand) else result

        # A oneway send is flushed like any other, and never answered.
        oneway = send_request(TOPIC, b"unanswered")
        oneway.flag |= RpcFlag.ONEWAY.value
        assert await handled(oneway) is None
        # The handler answers nothing itself: the flush that covers the message does.
        assert await handled(send_request(TOPIC, b"durable")) is None
        response = await conn.next_response()
        assert response.code == ResponseCode.SUCCESS
        stored = parts.messages(TOPIC, 0)
        assert [m.body for m in stored] == [b"unanswered", b"durable"]
        assert response.ext_fields["queueOffset"] == "1"
        assert parts.store.commit_log.queue.flushed_where > stored[1].commit_log_offset
        # One more: by its answer every earlier flush has been settled, and only it answered.
        assert await handled(send_request(TOPIC, b"later")) is None
        assert (await conn.next_response()).ext_fields["queueOffset"] == "2"
        assert conn.responses == []


def send_back_request(offset: int, group: str, **header: object) -> RemotingCommand:
    h = ConsumerSendMsgBackRequestHeader(offset=offset, group=group, **header)
    return RemotingCommand.request(RequestCode.CONSUMER_SEND_MSG_BACK, h.to_fields())


async def test_send_back_goes_to_retry_then_dlq(parts: Parts, conn: RecordedConnection) -> None:
    make_topic(parts)
    await send_ok(parts, conn, TOPIC, b"failing", tags="T")
    original = parts.messages(TOPIC, 0)[0]
    response = await answer(
        parts.sender.send_back,
        conn,
        send_back_request(original.commit_log_offset, "G", max_reconsume_times=1),
    )
    assert response.code == ResponseCode.SUCCESS
    # A retry waits at delay level 3 + reconsume times, for %RETRY%G.
    (parked,) = parts.messages(SCHEDULE_TOPIC, 2)
    assert parked.properties[PropertyKey.REAL_TOPIC] == retry_topic("G")
    assert parked.properties[PropertyKey.RETRY_TOPIC] == TOPIC
    assert parked.properties[PropertyKey.ORIGIN_MESSAGE_ID] == original.msg_id
    assert parked.reconsume_times == 1
    # Consumed from the retry topic and failed again: reconsume 1 >= max 1, so dead.
    response = await answer(
        parts.sender.send_back, conn, send_back_request(parked.commit_log_offset, "G", max_reconsume_times=1)
    )
    assert response.code == ResponseCode.SUCCESS
    (dead,) = parts.messages(dlq_topic("G"), 0)
    assert dead.body == b"failing" and dead.reconsume_times == 2
    assert PropertyKey.DELAY_TIME_LEVEL not in dead.properties
    assert dead.properties[PropertyKey.RETRY_TOPIC] == TOPIC


async def test_send_back_checks(tmp_path: Path, conn: RecordedConnection) -> None:
    async with broker_parts(tmp_path, autoCreateSubscriptionGroup="false") as parts:
        response = await answer(parts.sender.send_back, conn, send_back_request(0, "Unknown"))
        assert (response.code, response.remark) == (
            ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
            "subscription group not exist, Unknown",
        )
        response = await answer(parts.sender.send_back, conn, send_back_request(123_456, "TOOLS_CONSUMER"))
        assert (response.code, response.remark) == (
            ResponseCode.SYSTEM_ERROR,
            "look message by offset failed, 123456",
        )


async def test_old_clients_max_reconsume_times_is_ignored(parts: Parts, conn: RecordedConnection) -> None:
    """Before V3_4_9 ``maxReconsumeTimes`` was not sent; a value from an older client is not read."""
    retry = retry_topic("G4")
    cmd = send_request(retry, b"old", reconsume_times=2, max_reconsume_times=2)
    cmd.version = int(MQVersion.V3_1_8)
    response = await answer(parts.sender.send, conn, cmd)
    assert response.code == ResponseCode.SUCCESS
    assert [m.body for m in parts.messages(retry, 0)] == [b"old"]
