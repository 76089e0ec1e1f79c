"""PULL_MESSAGE handled in process: every status and code, tag filtering, offsets committed on
the way, and the long-polling hold and wake-up."""

from __future__ import annotations

from pathlib import Path

from aiorocketmq.protocol import fastjson
from aiorocketmq.protocol.body import ConsumerData, MessageModel, SubscriptionData, SubscriptionGroupConfig
from aiorocketmq.protocol.codes import PERM_READ_WRITE, Perm, ResponseCode
from aiorocketmq.protocol.message import decode_records
from aiorocketmq.protocol.names import OFFSET_MOVED_EVENT

from .support import (
    Parts,
    RecordedConnection,
    answer,
    broker_parts,
    producer_channel,
    pull_request,
    send_ok,
)

TOPIC = "PullTopic"
GROUP = "unit-consumer"


async def fill(parts: Parts, conn: RecordedConnection, tags: list[str], queue_id: int = 0) -> None:
    parts.topics.ensure(TOPIC, 2, PERM_READ_WRITE)
    for i, tag in enumerate(tags):
        await send_ok(parts, conn, TOPIC, f"m{i}".encode(), tags=tag, queue_id=queue_id)


async def test_found_answers_the_stored_records(parts: Parts, conn: RecordedConnection) -> None:
    await fill(parts, conn, ["a", "b", "c"])
    response = await answer(parts.puller.pull, conn, pull_request(TOPIC, 1))
    assert (response.code, response.remark) == (ResponseCode.SUCCESS, "FOUND")
    assert [m.body for m in decode_records(response.body)] == [b"m1", b"m2"]
    assert response.ext_fields["nextBeginOffset"] == 3
    assert (response.ext_fields["minOffset"], response.ext_fields["maxOffset"]) == (0, 3)
    assert parts.stats.got_messages[(GROUP, TOPIC)] == 2


async def test_tag_filter_answers_only_matching_tags(parts: Parts, conn: RecordedConnection) -> None:
    await fill(parts, conn, ["a", "b", "c", "b", "d"])
    response = await answer(parts.puller.pull, conn, pull_request(TOPIC, 0, subscription="b || d"))
    assert response.code == ResponseCode.SUCCESS
    assert [m.tags for m in decode_records(response.body)] == ["b", "b", "d"]
    assert response.ext_fields["nextBeginOffset"] == 5


async def test_no_matched_message_says_retry_from_past_the_scanned_entries(
    parts: Parts, conn: RecordedConnection
) -> None:
    await fill(parts, conn, ["a", "a"])
    response = await answer(parts.puller.pull, conn, pull_request(TOPIC, 0, subscription="z"))
    assert (response.code, response.remark) == (ResponseCode.PULL_RETRY_IMMEDIATELY, "NO_MATCHED_MESSAGE")
    assert response.ext_fields["nextBeginOffset"] == 2
    assert response.body == b""


async def test_no_new_message_at_the_end_of_the_queue(parts: Parts, conn: RecordedConnection) -> None:
    await fill(parts, conn, ["a"])
    response = await answer(parts.puller.pull, conn, pull_request(TOPIC, 1))
    assert (response.code, response.remark) == (ResponseCode.PULL_NOT_FOUND, "OFFSET_OVERFLOW_ONE")
    assert response.ext_fields["nextBeginOffset"] == 1


async def test_empty_queue_from_zero_is_not_found(parts: Parts, conn: RecordedConnection) -> None:
    parts.topics.ensure(TOPIC, 2, PERM_READ_WRITE)
    response = await answer(parts.puller.pull, conn, pull_request(TOPIC, 0))
    assert response.code == ResponseCode.PULL_NOT_FOUND
    assert parts.store.get_max_offset(OFFSET_MOVED_EVENT, 0) == 0


async def test_offset_past_the_end_is_moved_and_the_correction_recorded(
    parts: Parts, conn: RecordedConnection
) -> None:
    await fill(parts, conn, ["a", "b"])
    response = await answer(parts.puller.pull, conn, pull_request(TOPIC, 50))
    assert (response.code, response.remark) == (ResponseCode.PULL_OFFSET_MOVED, "OFFSET_OVERFLOW_BADLY")
    # As Apache's 4.9.7 broker: a pull past the end is sent back to the queue's end.
    assert response.ext_fields["nextBeginOffset"] == 2
    (event,) = parts.messages(OFFSET_MOVED_EVENT, 0)
    assert fastjson.loads(event.body) == {
        "consumerGroup": GROUP,
        "messageQueue": {"brokerName": "broker-u", "queueId": 0, "topic": TOPIC},
        "offsetNew": 2,
        "offsetRequest": 50,
    }
    # An empty queue asked from a non-zero offset moves too.
    response = await answer(parts.puller.pull, conn, pull_request(TOPIC, 7, queue_id=1))
    assert (response.code, response.remark) == (ResponseCode.PULL_OFFSET_MOVED, "NO_MESSAGE_IN_QUEUE")
    assert len(parts.messages(OFFSET_MOVED_EVENT, 0)) == 2


async def test_offset_below_the_queue_minimum_is_moved(parts: Parts, conn: RecordedConnection) -> None:
    """Retention deleted the first commit-log files and the consume-queue entries behind them."""
    parts.topics.ensure(TOPIC, 1, PERM_READ_WRITE)
    for i in range(200):
        await send_ok(parts, conn, TOPIC, bytes(900) + str(i).encode())
    assert parts.store.delete_expired_files(force=True) > 0
    low = parts.store.get_min_offset(TOPIC, 0)
    assert low > 0
    response = await answer(parts.puller.pull, conn, pull_request(TOPIC, 0))
    assert (response.code, response.remark) == (ResponseCode.PULL_OFFSET_MOVED, "OFFSET_TOO_SMALL")
    assert response.ext_fields["nextBeginOffset"] == low


async def test_pull_checks_answer_with_their_codes(tmp_path: Path, conn: RecordedConnection) -> None:
    async with broker_parts(tmp_path, autoCreateSubscriptionGroup="false") as parts:
        parts.topics.ensure(TOPIC, 2, PERM_READ_WRITE)
        parts.topics.ensure("WriteOnly", 1, int(Perm.WRITE))
        parts.groups.put(SubscriptionGroupConfig(group_name=GROUP))
        parts.groups.put(SubscriptionGroupConfig(group_name="Disabled", consume_enable=False))
        cases = [
            (
                pull_request(TOPIC, 0, group="Ghost"),
                ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                "subscription group [Ghost] does not exist",
            ),
            (
                pull_request(TOPIC, 0, group="Disabled"),
                ResponseCode.NO_PERMISSION,
                "subscription group no permission, Disabled",
            ),
            (
                pull_request("Nowhere", 0),
                ResponseCode.TOPIC_NOT_EXIST,
                "topic[Nowhere] not exist, apply first please!",
            ),
            (
                pull_request("WriteOnly", 0),
                ResponseCode.NO_PERMISSION,
                "the topic[WriteOnly] pulling message is forbidden",
            ),
            (pull_request(TOPIC, 0, queue_id=2), ResponseCode.INVALID_PARAMETER, "queueId[2] is illegal"),
            (
                pull_request(TOPIC, 0, expression_type="SQL92"),
                ResponseCode.SYSTEM_ERROR,
                "filter message by SQL92",
            ),
            (
                pull_request(TOPIC, 0, subscription=None),
                ResponseCode.SUBSCRIPTION_NOT_EXIST,
                "the consumer's group info not exist",
            ),
        ]
        for cmd, code, remark in cases:
            response = await answer(parts.puller.pull, conn, cmd)
            assert response.code == code, (remark, response.code, response.remark)
            assert remark in response.remark


async def test_pull_without_subscription_uses_the_heartbeat(parts: Parts, conn: RecordedConnection) -> None:
    await fill(parts, conn, ["a", "b"])
    channel = producer_channel(conn, "consumer-1")

    def heartbeat(
        topic: str, expression: str, version: int, model: MessageModel = MessageModel.CLUSTERING
    ) -> None:
        parts.clients.register_consumer(
            channel,
            ConsumerData(
                group_name=GROUP,
                message_model=model,
                subscription_data_set=[
                    SubscriptionData(topic=topic, sub_string=expression, sub_version=version)
                ],
            ),
        )

    heartbeat("OtherTopic", "*", 5)
    response = await answer(parts.puller.pull, conn, pull_request(TOPIC, 0, subscription=None))
    assert (response.code, response.remark) == (
        ResponseCode.SUBSCRIPTION_NOT_EXIST,
        "the consumer's subscription not exist",
    )
    heartbeat(TOPIC, "b", 5)
    response = await answer(parts.puller.pull, conn, pull_request(TOPIC, 0, subscription=None, sub_version=6))
    assert (response.code, response.remark) == (
        ResponseCode.SUBSCRIPTION_NOT_LATEST,
        "the consumer's subscription not latest",
    )
    response = await answer(parts.puller.pull, conn, pull_request(TOPIC, 0, subscription=None, sub_version=5))
    assert [m.tags for m in decode_records(response.body)] == ["b"]
    parts.groups.put(SubscriptionGroupConfig(group_name=GROUP, consume_broadcast_enable=False))
    heartbeat(TOPIC, "b", 7, MessageModel.BROADCASTING)
    response = await answer(parts.puller.pull, conn, pull_request(TOPIC, 0, subscription=None))
    assert (response.code, response.remark) == (
        ResponseCode.NO_PERMISSION,
        f"the consumer group[{GROUP}] can not consume by broadcast way",
    )


async def test_a_broker_without_read_permission_refuses_pulls(
    tmp_path: Path, conn: RecordedConnection
) -> None:
    async with broker_parts(tmp_path, brokerPermission=str(int(Perm.WRITE))) as parts:
        response = await answer(parts.puller.pull, conn, pull_request(TOPIC, 0))
        assert (response.code, response.remark) == (
            ResponseCode.NO_PERMISSION,
            "the broker[127.0.0.1] pulling message is forbidden",
        )


async def test_commit_offset_rides_on_the_pull(parts: Parts, conn: RecordedConnection) -> None:
    await fill(parts, conn, ["a", "b"])
    await answer(parts.puller.pull, conn, pull_request(TOPIC, 1, commit_offset=1))
    assert parts.offsets.query(GROUP, TOPIC, 0) == 1


async def test_suspended_pull_is_held_and_woken_by_a_matching_arrival(
    parts: Parts, conn: RecordedConnection
) -> None:
    await fill(parts, conn, ["a"])
    consumer = RecordedConnection("10.0.0.9:40000")
    cmd = pull_request(TOPIC, 1, subscription="wanted", suspend_ms=30_000, commit_offset=1)
    assert parts.puller.pull(consumer, cmd) is None  # type: ignore[arg-type]
    assert parts.long_polling.held_count == 1
    assert parts.offsets.query(GROUP, TOPIC, 0) == 1
    await send_ok(parts, conn, TOPIC, b"other", tags="unwanted")
    assert parts.long_polling.held_count == 1 and not consumer.responses
    parts.offsets.commit(GROUP, TOPIC, 0, 0)
    await send_ok(parts, conn, TOPIC, b"this one", tags="wanted")
    response = await consumer.next_response(timeout=0)  # answered during the put itself
    assert response.code == ResponseCode.SUCCESS and response.opaque == cmd.opaque
    assert [m.body for m in decode_records(response.body)] == [b"this one"]
    assert parts.long_polling.held_count == 0
    assert parts.offsets.query(GROUP, TOPIC, 0) == 0  # a woken pull does not commit again


async def test_suspended_pull_is_answered_not_found_when_the_hold_times_out(
    parts: Parts, conn: RecordedConnection
) -> None:
    await fill(parts, conn, ["a"])
    consumer = RecordedConnection()
    assert parts.puller.pull(consumer, pull_request(TOPIC, 1, suspend_ms=50)) is None  # type: ignore[arg-type]
    response = await consumer.next_response()
    assert (response.code, response.remark) == (ResponseCode.PULL_NOT_FOUND, "OFFSET_OVERFLOW_ONE")
    assert parts.long_polling.held_count == 0


async def test_short_polling_holds_for_short_polling_time(tmp_path: Path, conn: RecordedConnection) -> None:
    async with broker_parts(tmp_path, longPollingEnable="false", shortPollingTimeMills="20") as parts:
        parts.topics.ensure(TOPIC, 1, PERM_READ_WRITE)
        consumer = RecordedConnection()
        assert parts.puller.pull(consumer, pull_request(TOPIC, 0, suspend_ms=60_000)) is None  # type: ignore[arg-type]
        response = await consumer.next_response(timeout=5)  # not the 60 s the client asked for
        assert response.code == ResponseCode.PULL_NOT_FOUND


async def test_suggest_which_broker_id_follows_rocketmq_rule(
    tmp_path: Path, conn: RecordedConnection
) -> None:
    """slaveReadEnable: cold data (behind 40 % of RAM) goes to the group's
    whichBrokerWhenConsumeSlowly, hot data to its brokerId; without it always the master (0)."""
    memory = {"totalPhysicalMemory": 100_000}  # messages 40 KB behind the end are "in disk"
    for enabled, cold, hot in ((True, 1, 0), (False, 0, 0)):
        async with broker_parts(
            tmp_path / str(enabled), memory, slaveReadEnable=str(enabled).lower()
        ) as parts:
            parts.topics.ensure(TOPIC, 2, PERM_READ_WRITE)
            for _ in range(60):
                await send_ok(parts, conn, TOPIC, b"x" * 1000, queue_id=0)
            old = await answer(parts.puller.pull, conn, pull_request(TOPIC, 0))
            new = await answer(parts.puller.pull, conn, pull_request(TOPIC, 59))
            assert old.code == new.code == ResponseCode.SUCCESS
            assert (old.ext_fields["suggestWhichBrokerId"], new.ext_fields["suggestWhichBrokerId"]) == (
                cold,
                hot,
            )
            if enabled:
                # The group's own choices are what is suggested.
                parts.groups.put(
                    SubscriptionGroupConfig(group_name=GROUP, broker_id=3, which_broker_when_consume_slowly=2)
                )
                old = await answer(parts.puller.pull, conn, pull_request(TOPIC, 0))
                new = await answer(parts.puller.pull, conn, pull_request(TOPIC, 59))
                assert (old.ext_fields["suggestWhichBrokerId"], new.ext_fields["suggestWhichBrokerId"]) == (
                    2,
                    3,
                )


async def test_a_slave_keeps_no_offset_from_pulls_and_does_not_correct_them(
    tmp_path: Path, conn: RecordedConnection
) -> None:
    async with broker_parts(tmp_path, {"brokerRole": "SLAVE"}, brokerId="1") as parts:
        parts.topics.ensure(TOPIC, 2, PERM_READ_WRITE)
        response = await answer(parts.puller.pull, conn, pull_request(TOPIC, 5, commit_offset=3))
        # Nothing here: the slave neither stores the piggy-backed offset nor moves the consumer.
        assert response.code == ResponseCode.PULL_RETRY_IMMEDIATELY
        assert response.ext_fields["nextBeginOffset"] == 5
        assert parts.offsets.query(GROUP, TOPIC, 0) < 0
