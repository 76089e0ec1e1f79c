"""The broker over TCP, driven with raw protocol requests: sends in every header dialect, pulls
and long polling, offsets, client management, locks, retries, delays, transactions, queries,
admin, bad input and restarts."""

from __future__ import annotations

import asyncio
import contextlib
import re
import shutil
import signal
import socket
import struct
import sys
import time
from pathlib import Path

import pytest

from aiorocketmq.client import Message as ClientMessage
from aiorocketmq.client import Producer, SendStatus
from aiorocketmq.protocol.body import (
    ClusterInfo,
    ConsumeStats,
    GetConsumerListByGroupResponseBody,
    KVTable,
    LockBatchRequestBody,
    LockBatchResponseBody,
    MessageQueue,
    SubscriptionGroupConfig,
    TopicConfigSerializeWrapper,
    TopicRouteData,
)
from aiorocketmq.protocol.codes import MessageSysFlag, RequestCode, ResponseCode
from aiorocketmq.protocol.command import RemotingCommand
from aiorocketmq.protocol.headers import (
    CheckTransactionStateRequestHeader,
    EndTransactionRequestHeader,
    SendMessageRequestHeader,
)
from aiorocketmq.protocol.message import (
    Message,
    PropertyKey,
    decode_offset_msg_id,
    decode_record,
    decode_records,
    encode_batch,
)
from aiorocketmq.protocol.transport import Connection
from tests.cluster import BrokerProcess, Cluster
from tests.support import wait_until

from .conftest import ConnectTo
from .requests import (
    JSON,
    MSGPACK,
    ROCKETMQ,
    call,
    heartbeat,
    max_offset,
    message_properties,
    pull,
    pull_all,
    send,
    send_ok,
)
from .syscalls import SyscallTrace


async def create_topic(conn: Connection, topic: str, queues: int = 4, perm: int = 6) -> None:
    response = await call(
        conn,
        RequestCode.UPDATE_AND_CREATE_TOPIC,
        {"topic": topic, "readQueueNums": queues, "writeQueueNums": queues, "perm": perm},
    )
    assert response.code == ResponseCode.SUCCESS, response


async def namesrv_route(cluster: Cluster, connect_to: ConnectTo, topic: str) -> TopicRouteData | None:
    conn = await connect_to(cluster.namesrv_ports[0])
    response = await call(conn, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
    if response.code != ResponseCode.SUCCESS:
        return None
    return TopicRouteData.decode(response.body)


# -- sending ------------------------------------------------------------------------------


@pytest.mark.parametrize("serialize_type", [JSON, ROCKETMQ, MSGPACK])
async def test_send_and_pull_round_trip(broker_conn: Connection, serialize_type: int) -> None:
    topic = f"RoundTrip{serialize_type}"
    response = await send_ok(
        broker_conn,
        topic,
        b"hello",
        tags="TagA",
        keys="k1 k2",
        properties={"color": "blue"},
        serialize_type=serialize_type,
    )
    fields = response.ext_fields
    assert fields["queueId"] in ("0", 0) and fields["queueOffset"] in ("0", 0)
    assert fields["MSG_REGION"] == "DefaultRegion" and fields["TRACE_ON"] == "true"
    if serialize_type != MSGPACK:  # real clients need strings in JSON/ROCKETMQ headers
        assert all(isinstance(v, str) for v in fields.values())
    address, offset = decode_offset_msg_id(fields["msgId"])
    assert address == f"127.0.0.1:{broker_conn.peer[1]}"

    pulled = await pull(broker_conn, topic, 0, 0, serialize_type=serialize_type)
    assert pulled.code == ResponseCode.SUCCESS
    assert {k: int(pulled.ext_fields[k]) for k in ("nextBeginOffset", "minOffset", "maxOffset")} == {
        "nextBeginOffset": 1,
        "minOffset": 0,
        "maxOffset": 1,
    }
    (msg,) = decode_records(pulled.body, check_crc=True)
    assert (msg.topic, msg.body, msg.tags, msg.keys, msg.properties["color"]) == (
        topic,
        b"hello",
        "TagA",
        ["k1", "k2"],
        "blue",
    )
    assert msg.commit_log_offset == offset
    assert msg.properties[PropertyKey.CLUSTER] == "DefaultCluster"
    assert msg.store_host == address
    assert msg.born_host.startswith("127.0.0.1:")


async def test_send_v1_with_cpp_style_header_and_batch_flag(broker_conn: Connection) -> None:
    """The C++ 1.2.x client sends code 10 with numbers, string timestamps and "1" booleans,
    and batches as code 10 with batch "1"."""
    base = {
        "producerGroup": "cpp-group",
        "topic": "CppStyle",
        "defaultTopic": "TBW102",
        "defaultTopicQueueNums": 4,
        "queueId": 1,
        "sysFlag": 0,
        "bornTimestamp": str(int(time.time() * 1000)),
        "flag": 0,
        "properties": message_properties("t"),
        "reconsumeTimes": "0",
        "unitMode": "0",
        "AccessKey": "",
        "Signature": "",
    }
    single = await call(broker_conn, RequestCode.SEND_MESSAGE, {**base, "batch": "0"}, b"one")
    assert single.code == ResponseCode.SUCCESS, single
    batch = encode_batch([Message("CppStyle", f"m{i}".encode(), tags="b") for i in range(3)])
    multi = await call(broker_conn, RequestCode.SEND_MESSAGE, {**base, "batch": "1"}, batch)
    assert multi.code == ResponseCode.SUCCESS, multi
    assert multi.ext_fields["queueOffset"] == "1"
    assert len(multi.ext_fields["msgId"].split(",")) == 3
    bodies = [m.body for m in await pull_all(broker_conn, "CppStyle", 1)]
    assert bodies == [b"one", b"m0", b"m1", b"m2"]


async def test_send_batch_code_320(broker_conn: Connection) -> None:
    header = SendMessageRequestHeader(
        producer_group="g",
        topic="Batched",
        queue_id=2,
        born_timestamp=1,
        batch=True,
        properties="WAIT\x01true",
    ).to_v2()
    messages = [Message("Batched", f"b{i}".encode(), keys=[f"key-{i}"]) for i in range(5)]
    response = await call(
        broker_conn, RequestCode.SEND_BATCH_MESSAGE, header.to_fields(), encode_batch(messages)
    )
    assert response.code == ResponseCode.SUCCESS, response
    pulled = await pull_all(broker_conn, "Batched", 2)
    assert [(m.queue_offset, m.body, m.keys) for m in pulled] == [
        (i, f"b{i}".encode(), [f"key-{i}"]) for i in range(5)
    ]


async def test_auto_created_topic_is_registered_with_the_name_server(
    cluster: Cluster, broker_conn: Connection, connect_to: ConnectTo
) -> None:
    await send_ok(broker_conn, "FreshTopic", b"x")
    deadline = time.monotonic() + 10
    route = await namesrv_route(cluster, connect_to, "FreshTopic")
    while route is None and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
        route = await namesrv_route(cluster, connect_to, "FreshTopic")
    assert route is not None
    (queue_data,) = route.queue_datas
    assert (queue_data.broker_name, queue_data.write_queue_nums, queue_data.perm) == ("broker-a", 4, 6)
    assert route.broker_datas[0].broker_addrs[0] == cluster.brokers["broker-a"].addr


async def test_send_refusals_have_clear_remarks(
    cluster: Cluster, connect_to: ConnectTo, tmp_path: object
) -> None:
    await cluster.stop_broker("broker-a")
    await cluster.start_broker("broker-a", autoCreateTopicEnable="false", maxMessageSize=1024)
    conn = await connect_to(cluster.brokers["broker-a"].port)
    unknown = await send(conn, "NoSuchTopic", b"x")
    assert unknown.code == ResponseCode.TOPIC_NOT_EXIST and "NoSuchTopic" in (unknown.remark or "")
    await create_topic(conn, "Small", 2)
    bad_queue = await send(conn, "Small", b"x", queue_id=7)
    assert bad_queue.code == ResponseCode.INVALID_PARAMETER and "queueId[7]" in (bad_queue.remark or "")
    too_big = await send(conn, "Small", b"x" * 2000)
    assert too_big.code == ResponseCode.MESSAGE_ILLEGAL and "1024" in (too_big.remark or "")
    system = await send(conn, "SCHEDULE_TOPIC_XXXX", b"x")
    assert system.code == ResponseCode.NO_PERMISSION
    bad_name = await send(conn, "bad topic!", b"x")
    assert bad_name.code == ResponseCode.INVALID_PARAMETER and "bad topic!" in (bad_name.remark or "")
    wrong_type = await call(
        conn, RequestCode.SEND_MESSAGE_V2, {"a": "g", "b": "Small", "e": "zero", "g": "1"}, b"x"
    )
    assert wrong_type.code == ResponseCode.SYSTEM_ERROR and "'e'" in (wrong_type.remark or "")
    missing = await call(conn, RequestCode.SEND_MESSAGE_V2, {"a": "g", "e": 0, "g": "1"}, b"x")
    assert missing.code == ResponseCode.SYSTEM_ERROR and "'b'" in (missing.remark or "")
    unknown_code = await call(conn, 9999)
    assert unknown_code.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    # Nothing above stored anything.
    assert await max_offset(conn, "Small", 0) == 0


async def test_garbage_frames_close_only_their_connection(broker_conn: Connection, cluster: Cluster) -> None:
    await send_ok(broker_conn, "Sturdy", b"keep me")
    port = cluster.brokers["broker-a"].port
    for garbage in (
        b"\x00\x00\x00\x08\x05\x00\x00\x00junk",  # unknown serialize type
        struct.pack(">i", 64 * 1024 * 1024),  # over the frame limit
        b"\x00\x00\x00\x10\x00\x00\x00\x40" + b"{" * 8,  # header longer than the frame
        b"\x00\x00\x00\x0c\x00\x00\x00\x08not-json",  # invalid JSON header
    ):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(garbage)
        await writer.drain()
        assert await asyncio.wait_for(reader.read(), 10) == b""  # closed by the broker
        writer.close()
    (msg,) = await pull_all(broker_conn, "Sturdy", 0)
    assert msg.body == b"keep me"


# -- pulling ------------------------------------------------------------------------------


async def test_pull_statuses_and_offsets(broker_conn: Connection) -> None:
    await create_topic(broker_conn, "Statuses", 1)
    empty = await pull(broker_conn, "Statuses", 0, 0)
    assert empty.code == ResponseCode.PULL_NOT_FOUND
    moved = await pull(broker_conn, "Statuses", 0, 5)
    assert moved.code == ResponseCode.PULL_OFFSET_MOVED and moved.ext_fields["nextBeginOffset"] == "0"
    for i in range(3):
        await send_ok(broker_conn, "Statuses", f"{i}".encode(), tags="even" if i % 2 == 0 else "odd")
    caught_up = await pull(broker_conn, "Statuses", 0, 3)
    assert caught_up.code == ResponseCode.PULL_NOT_FOUND and caught_up.ext_fields["nextBeginOffset"] == "3"
    beyond = await pull(broker_conn, "Statuses", 0, 10)
    # Past the end of the queue: back to its end, as Apache's 4.9.7 broker answers.
    assert beyond.code == ResponseCode.PULL_OFFSET_MOVED and beyond.ext_fields["nextBeginOffset"] == "3"
    filtered = await pull(broker_conn, "Statuses", 0, 0, subscription="odd")
    assert filtered.code == ResponseCode.SUCCESS
    assert [m.body for m in decode_records(filtered.body)] == [b"1"]
    assert filtered.ext_fields["nextBeginOffset"] == "3"
    none_match = await pull(broker_conn, "Statuses", 0, 0, subscription="none")
    assert none_match.code == ResponseCode.PULL_RETRY_IMMEDIATELY
    limited = await pull(broker_conn, "Statuses", 0, 0, max_nums=2)
    assert len(decode_records(limited.body)) == 2 and limited.ext_fields["nextBeginOffset"] == "2"
    bad_queue = await pull(broker_conn, "Statuses", 3, 0)
    assert bad_queue.code == ResponseCode.INVALID_PARAMETER
    no_topic = await pull(broker_conn, "NeverCreated", 0, 0)
    assert no_topic.code == ResponseCode.TOPIC_NOT_EXIST


async def runtime_info(conn: Connection) -> dict[str, str]:
    return KVTable.decode((await call(conn, RequestCode.GET_BROKER_RUNTIME_INFO)).body).table


async def wait_held(conn: Connection, count: int) -> None:
    """Until the broker holds ``count`` pulls (its runtime info counts them)."""

    async def holding() -> bool:
        return (await runtime_info(conn))["heldPullRequests"] == str(count)

    await wait_until(holding, timeout=10, interval=0.02)


#: The broker's periodic re-check of held pulls (``long_polling.RECHECK_INTERVAL``).
RECHECK_INTERVAL = 5.0


async def test_long_poll_wakes_on_arrival(
    broker_conn: Connection, connect_to: ConnectTo, cluster: Cluster
) -> None:
    """A held pull is answered when a matching message arrives, not at the next periodic
    re-check: the test finds the re-check's phase, then holds a pull for a minute and sends
    a message; the answer must come long before the following re-check."""
    await create_topic(broker_conn, "LongPoll", 1)
    producer = await connect_to(cluster.brokers["broker-a"].port)
    admin = await connect_to(cluster.brokers["broker-a"].port)
    first = asyncio.ensure_future(
        pull(broker_conn, "LongPoll", 0, 0, suspend_ms=60_000, subscription="wanted", timeout=70)
    )
    await wait_held(admin, 1)
    await send_ok(producer, "LongPoll", b"other", tags="unwanted")
    # The arrival does not match the filter, so only the periodic re-check (which wakes any
    # held pull whose queue grew) answers it, with nothing: that moment is the re-check's phase.
    skipped = await asyncio.wait_for(first, RECHECK_INTERVAL + 5)
    rechecked_at = time.monotonic()
    assert skipped.code in (ResponseCode.PULL_RETRY_IMMEDIATELY, ResponseCode.PULL_NOT_FOUND), skipped
    assert not skipped.body
    assert skipped.ext_fields["nextBeginOffset"] in ("0", "1")
    held = asyncio.ensure_future(
        pull(broker_conn, "LongPoll", 0, 1, suspend_ms=60_000, subscription="wanted", timeout=70)
    )
    await wait_held(admin, 1)
    await send_ok(producer, "LongPoll", b"yes", tags="wanted")
    response = await asyncio.wait_for(held, 70)
    waited = time.monotonic() - rechecked_at
    assert waited < RECHECK_INTERVAL / 2, f"answered {waited:.2f}s after a re-check: not woken by the arrival"
    assert response.code == ResponseCode.SUCCESS
    assert [m.body for m in decode_records(response.body)] == [b"yes"]


async def test_long_poll_times_out_with_not_found(broker_conn: Connection) -> None:
    await create_topic(broker_conn, "Quiet", 1)
    started = time.monotonic()
    response = await pull(broker_conn, "Quiet", 0, 0, suspend_ms=700)
    elapsed = time.monotonic() - started
    assert response.code == ResponseCode.PULL_NOT_FOUND
    assert 0.6 <= elapsed < 5
    for key in ("suggestWhichBrokerId", "nextBeginOffset", "minOffset", "maxOffset"):
        assert key in response.ext_fields


async def test_consumer_offsets(broker_conn: Connection) -> None:
    await create_topic(broker_conn, "Offsets", 2)
    for _ in range(4):
        await send_ok(broker_conn, "Offsets", b"x", queue_id=1)
    query = {"consumerGroup": "og", "topic": "Offsets", "queueId": 1}
    fresh = await call(broker_conn, RequestCode.QUERY_CONSUMER_OFFSET, query)
    assert fresh.code == ResponseCode.SUCCESS and fresh.ext_fields["offset"] == "0"  # young queue
    update = await call(broker_conn, RequestCode.UPDATE_CONSUMER_OFFSET, {**query, "commitOffset": 3})
    assert update.code == ResponseCode.SUCCESS
    stored = await call(broker_conn, RequestCode.QUERY_CONSUMER_OFFSET, query)
    assert stored.ext_fields["offset"] == "3"
    await pull(broker_conn, "Offsets", 1, 3, group="og", commit_offset=4)
    assert (await call(broker_conn, RequestCode.QUERY_CONSUMER_OFFSET, query)).ext_fields["offset"] == "4"
    assert await max_offset(broker_conn, "Offsets", 1) == 4
    minimum = await call(broker_conn, RequestCode.GET_MIN_OFFSET, {"topic": "Offsets", "queueId": 1})
    assert minimum.ext_fields["offset"] == "0"
    earliest = await call(
        broker_conn, RequestCode.GET_EARLIEST_MSG_STORETIME, {"topic": "Offsets", "queueId": 1}
    )
    stored_at = int(earliest.ext_fields["timestamp"])
    assert abs(stored_at - time.time() * 1000) < 60_000
    search = await call(
        broker_conn,
        RequestCode.SEARCH_OFFSET_BY_TIMESTAMP,
        {"topic": "Offsets", "queueId": 1, "timestamp": 0},
    )
    assert search.ext_fields["offset"] == "0"


# -- clients ------------------------------------------------------------------------------


async def test_heartbeat_membership_and_notify(
    cluster: Cluster, broker_conn: Connection, connect_to: ConnectTo
) -> None:
    notified: asyncio.Queue[str] = asyncio.Queue()

    def on_notify(conn: Connection, cmd: RemotingCommand) -> None:
        assert cmd.serialize_type == JSON and cmd.is_oneway
        notified.put_nowait(cmd.ext_fields["consumerGroup"])

    port = cluster.brokers["broker-a"].port
    first = await connect_to(port, handlers={RequestCode.NOTIFY_CONSUMER_IDS_CHANGED: on_notify})
    await heartbeat(first, "client-1", "members", {"Members": "*"})
    assert await asyncio.wait_for(notified.get(), 5) == "members"
    second = await connect_to(port)
    await heartbeat(second, "client-2", "members", {"Members": "*"})
    assert await asyncio.wait_for(notified.get(), 5) == "members"  # a member joined
    listed = await call(first, RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "members"})
    ids = GetConsumerListByGroupResponseBody.decode(listed.body).consumer_id_list
    assert sorted(ids) == ["client-1", "client-2"]
    second.close()
    assert await asyncio.wait_for(notified.get(), 5) == "members"  # a member left
    listed = await call(first, RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "members"})
    assert GetConsumerListByGroupResponseBody.decode(listed.body).consumer_id_list == ["client-1"]
    unregister = await call(
        first, RequestCode.UNREGISTER_CLIENT, {"clientID": "client-1", "consumerGroup": "members"}
    )
    assert unregister.code == ResponseCode.SUCCESS
    empty = await call(first, RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "members"})
    assert empty.code == ResponseCode.SYSTEM_ERROR and "members" in (empty.remark or "")
    # The heartbeat created the group's retry topic.
    retry = await pull(broker_conn, "%RETRY%members", 0, 0)
    assert retry.code == ResponseCode.PULL_NOT_FOUND


async def test_pull_without_subscription_uses_the_heartbeat(broker_conn: Connection) -> None:
    await create_topic(broker_conn, "HbSub", 1)
    await send_ok(broker_conn, "HbSub", b"a", tags="x")
    await send_ok(broker_conn, "HbSub", b"b", tags="y")
    header = {
        "consumerGroup": "hb",
        "topic": "HbSub",
        "queueId": 0,
        "queueOffset": 0,
        "maxMsgNums": 32,
        "sysFlag": 0,
        "commitOffset": 0,
        "suspendTimeoutMillis": 0,
        "subVersion": 0,
    }
    unknown_group = await call(broker_conn, RequestCode.PULL_MESSAGE, header)
    assert unknown_group.code == ResponseCode.SUBSCRIPTION_NOT_EXIST
    await heartbeat(broker_conn, "hb-client", "hb", {"HbSub": "y"})
    found = await call(broker_conn, RequestCode.PULL_MESSAGE, header)
    assert [m.body for m in decode_records(found.body)] == [b"b"]
    newer = await call(
        broker_conn, RequestCode.PULL_MESSAGE, {**header, "subVersion": int(time.time() * 1000) + 60_000}
    )
    assert newer.code == ResponseCode.SUBSCRIPTION_NOT_LATEST


async def test_queue_locks(broker_conn: Connection, connect_to: ConnectTo, cluster: Cluster) -> None:
    mqs = [MessageQueue(topic="Locked", broker_name="broker-a", queue_id=i) for i in range(3)]

    async def lock(conn: Connection, client: str, queues: list[MessageQueue]) -> list[MessageQueue]:
        body = LockBatchRequestBody(consumer_group="lg", client_id=client, mq_set=queues).encode()
        response = await call(conn, RequestCode.LOCK_BATCH_MQ, body=body)
        return LockBatchResponseBody.decode(response.body).lock_ok_mq_set

    other = await connect_to(cluster.brokers["broker-a"].port)
    assert await lock(broker_conn, "c1", mqs[:2]) == mqs[:2]
    assert await lock(other, "c2", mqs) == mqs[2:]
    body = LockBatchRequestBody(consumer_group="lg", client_id="c1", mq_set=mqs[:1]).encode()
    assert (await call(broker_conn, RequestCode.UNLOCK_BATCH_MQ, body=body)).code == ResponseCode.SUCCESS
    assert await lock(other, "c2", mqs) == [mqs[0], mqs[2]]


# -- retry, DLQ, delay ----------------------------------------------------------------------


async def test_send_back_retries_then_dead_letters(broker_conn: Connection) -> None:
    group = SubscriptionGroupConfig(group_name="rg", retry_max_times=2)
    response = await call(broker_conn, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=group.encode())
    assert response.code == ResponseCode.SUCCESS
    await send_ok(broker_conn, "RetryMe", b"payload", tags="t", keys="order-1")
    (original,) = await pull_all(broker_conn, "RetryMe", 0)
    current = original
    for attempt in range(1, 3):
        back = await call(
            broker_conn,
            RequestCode.CONSUMER_SEND_MSG_BACK,
            {
                "offset": current.commit_log_offset,
                "group": "rg",
                "delayLevel": 0,
                "originMsgId": original.msg_id,
                "originTopic": "RetryMe",
                "maxReconsumeTimes": 2,
            },
            version=407,
        )
        assert back.code == ResponseCode.SUCCESS, back
        # Delivered to %RETRY%rg after the (1 s in tests) delay.
        deadline = time.monotonic() + 15
        while await max_offset(broker_conn, "%RETRY%rg", 0) < attempt:
            assert time.monotonic() < deadline, "retry message never delivered"
            await asyncio.sleep(0.1)
        retried = (await pull_all(broker_conn, "%RETRY%rg", 0))[attempt - 1]
        assert retried.reconsume_times == attempt
        assert retried.body == b"payload"
        assert retried.properties[PropertyKey.RETRY_TOPIC] == "RetryMe"
        assert retried.properties[PropertyKey.ORIGIN_MESSAGE_ID] == original.msg_id
        current = retried
    back = await call(
        broker_conn,
        RequestCode.CONSUMER_SEND_MSG_BACK,
        {"offset": current.commit_log_offset, "group": "rg", "delayLevel": 0, "maxReconsumeTimes": 2},
        version=407,
    )
    assert back.code == ResponseCode.SUCCESS
    assert await max_offset(broker_conn, "%DLQ%rg", 0) == 1
    # Dead letters can be read back (the DLQ topic is readable, as in RocketMQ 4.9).
    (pulled,) = await pull_all(broker_conn, "%DLQ%rg", 0)
    assert pulled.body == b"payload"
    found = await call(
        broker_conn,
        RequestCode.QUERY_MESSAGE,
        {"topic": "%DLQ%rg", "key": "order-1", "maxNum": 8, "beginTimestamp": 0, "endTimestamp": 2**62},
    )
    assert found.code == ResponseCode.SUCCESS, found
    (dead,) = decode_records(found.body)
    assert (dead.body, dead.reconsume_times, dead.properties[PropertyKey.RETRY_TOPIC]) == (
        b"payload",
        3,
        "RetryMe",
    )
    missing = await call(
        broker_conn, RequestCode.CONSUMER_SEND_MSG_BACK, {"offset": 10**12, "group": "rg", "delayLevel": 0}
    )
    assert missing.code == ResponseCode.SYSTEM_ERROR and "look message by offset failed" in (
        missing.remark or ""
    )


async def test_delayed_message_arrives_after_its_delay(cluster: Cluster, connect_to: ConnectTo) -> None:
    await cluster.stop_broker("broker-a")
    await cluster.start_broker("broker-a", messageDelayLevel="1s 2s 3s")
    conn = await connect_to(cluster.brokers["broker-a"].port)
    await create_topic(conn, "Later", 1)
    sent_at = time.time()
    await send_ok(conn, "Later", b"later", properties={"DELAY": "3"})
    assert await max_offset(conn, "Later", 0) == 0
    held = await pull(conn, "Later", 0, 0, suspend_ms=10_000)
    assert held.code == ResponseCode.SUCCESS
    assert time.time() - sent_at >= 2.9
    (msg,) = decode_records(held.body)
    assert msg.body == b"later" and "DELAY" not in msg.properties
    assert msg.properties[PropertyKey.REAL_TOPIC] == "Later"
    assert msg.store_timestamp - msg.born_timestamp >= 2900
    offsets = await call(conn, RequestCode.GET_ALL_DELAY_OFFSET)
    assert b"3:1" in offsets.body or b'"3":1' in offsets.body


# -- transactions ---------------------------------------------------------------------------


async def send_half(conn: Connection, topic: str, body: bytes, group: str, **props: str) -> RemotingCommand:
    return await send_ok(
        conn,
        topic,
        body,
        group=group,
        sys_flag=MessageSysFlag.TRANSACTION_PREPARED,
        properties={PropertyKey.TRANSACTION_PREPARED: "true", PropertyKey.PRODUCER_GROUP: group, **props},
    )


async def end_transaction(conn: Connection, sent: RemotingCommand, group: str, decision: int) -> None:
    _, commit_log_offset = decode_offset_msg_id(sent.ext_fields["msgId"])
    header = EndTransactionRequestHeader(
        producer_group=group,
        tran_state_table_offset=int(sent.ext_fields["queueOffset"]),
        commit_log_offset=commit_log_offset,
        commit_or_rollback=decision,
        msg_id="m",
    )
    conn.send_oneway(RemotingCommand.request(RequestCode.END_TRANSACTION, header.to_fields()))


async def test_transaction_commit_and_rollback(broker_conn: Connection) -> None:
    await create_topic(broker_conn, "Tx", 1)
    committed = await send_half(broker_conn, "Tx", b"commit me", "txg")
    rolled = await send_half(broker_conn, "Tx", b"roll me back", "txg")
    assert await max_offset(broker_conn, "Tx", 0) == 0  # half messages are invisible
    await end_transaction(broker_conn, rolled, "txg", 12)
    await end_transaction(broker_conn, committed, "txg", 8)
    response = await pull(broker_conn, "Tx", 0, 0, suspend_ms=5000)
    (msg,) = decode_records(response.body)
    assert msg.body == b"commit me"
    assert msg.sys_flag & 0xC == 0x8
    assert PropertyKey.TRANSACTION_PREPARED not in msg.properties
    assert msg.prepared_transaction_offset == decode_offset_msg_id(committed.ext_fields["msgId"])[1]
    runtime = await call(broker_conn, RequestCode.GET_BROKER_RUNTIME_INFO)
    assert KVTable.decode(runtime.body).table["openTransactions"] == "0"


async def test_a_half_message_is_answered_with_its_transaction_id(broker_conn: Connection) -> None:
    """The send response of a half message carries ``transactionId``, its unique id, as Apache
    5.3.3's SendMessageProcessor sets it (``responseHeader.setTransactionId(
    MessageClientIDSetter.getUniqID(msg))``). Apache's proxy hands it to the 5.x client as
    SendResultEntry.transactionId; before, it was missing and the Python 5.x client's commit
    through Apache's proxy failed with "40008, transaction id cannot be empty"."""
    await create_topic(broker_conn, "TxId", 1)
    unique = "7F00000100002A9F0000000000000042"
    sent = await send_half(
        broker_conn, "TxId", b"half", "txg", **{PropertyKey.UNIQ_CLIENT_MESSAGE_ID_KEYIDX: unique}
    )
    assert sent.ext_fields["transactionId"] == unique, sent.ext_fields


async def test_transaction_check_back(cluster: Cluster, connect_to: ConnectTo) -> None:
    """The broker asks the producer about a half message left undecided, but never before it
    is ``transactionTimeOut`` old, however often its check-back runs."""
    await cluster.stop_broker("broker-a")
    await cluster.start_broker("broker-a", transactionCheckInterval=100, transactionTimeOut=1500)
    port = cluster.brokers["broker-a"].port
    checks: asyncio.Queue[tuple[CheckTransactionStateRequestHeader, bytes]] = asyncio.Queue()

    def on_check(conn: Connection, cmd: RemotingCommand) -> None:
        assert cmd.serialize_type == JSON
        checks.put_nowait((CheckTransactionStateRequestHeader.from_fields(cmd.ext_fields), cmd.body))

    producer = await connect_to(port, handlers={RequestCode.CHECK_TRANSACTION_STATE: on_check})
    await heartbeat(producer, "tx-client", "", {}, producer_groups=("checked",))
    await create_topic(producer, "TxChecked", 1)
    sent = await send_half(producer, "TxChecked", b"unknown at first", "checked")
    header, body = await asyncio.wait_for(checks.get(), 10)
    asked_at_ms = time.time() * 1000
    msg, _ = decode_record(body)
    assert asked_at_ms - msg.store_timestamp >= 1500, "checked before transactionTimeOut"
    assert (msg.topic, msg.body) == ("TxChecked", b"unknown at first")  # restored real topic
    assert header.tran_state_table_offset == int(sent.ext_fields["queueOffset"])
    assert header.offset_msg_id == sent.ext_fields["msgId"]
    reply = EndTransactionRequestHeader(
        producer_group="checked",
        tran_state_table_offset=header.tran_state_table_offset,
        commit_log_offset=header.commit_log_offset,
        commit_or_rollback=8,
        from_transaction_check=True,
        msg_id=header.msg_id or "",
    )
    producer.send_oneway(RemotingCommand.request(RequestCode.END_TRANSACTION, reply.to_fields()))
    response = await pull(producer, "TxChecked", 0, 0, suspend_ms=5000)
    assert [m.body for m in decode_records(response.body)] == [b"unknown at first"]


# -- queries and admin ----------------------------------------------------------------------


async def test_query_by_key_and_view_by_id(broker_conn: Connection) -> None:
    sent = await send_ok(broker_conn, "Indexed", b"find me", keys="alpha beta")
    _, offset = decode_offset_msg_id(sent.ext_fields["msgId"])
    viewed = await call(broker_conn, RequestCode.VIEW_MESSAGE_BY_ID, {"offset": offset})
    assert decode_record(viewed.body)[0].body == b"find me"
    for key in ("alpha", "beta"):
        found = await call(
            broker_conn,
            RequestCode.QUERY_MESSAGE,
            {"topic": "Indexed", "key": key, "maxNum": 4, "beginTimestamp": 0, "endTimestamp": 2**62},
        )
        assert found.code == ResponseCode.SUCCESS
        assert [m.body for m in decode_records(found.body)] == [b"find me"]
    missing = await call(
        broker_conn,
        RequestCode.QUERY_MESSAGE,
        {"topic": "Indexed", "key": "gamma", "maxNum": 4, "beginTimestamp": 0, "endTimestamp": 2**62},
    )
    assert missing.code == ResponseCode.QUERY_NOT_FOUND
    gone = await call(broker_conn, RequestCode.VIEW_MESSAGE_BY_ID, {"offset": 10**12})
    assert gone.code == ResponseCode.SYSTEM_ERROR


async def test_admin_topics_groups_and_consume_stats(broker_conn: Connection) -> None:
    await create_topic(broker_conn, "Admin", 2)
    everything = await call(broker_conn, RequestCode.GET_ALL_TOPIC_CONFIG)
    table = TopicConfigSerializeWrapper.decode(everything.body).topic_config_table
    assert table["Admin"].read_queue_nums == 2 and "TBW102" in table
    for _ in range(3):
        await send_ok(broker_conn, "Admin", b"x", queue_id=1)
    await call(
        broker_conn,
        RequestCode.UPDATE_CONSUMER_OFFSET,
        {"consumerGroup": "ag", "topic": "Admin", "queueId": 1, "commitOffset": 1},
    )
    stats = await call(broker_conn, RequestCode.GET_CONSUME_STATS, {"consumerGroup": "ag", "topic": "Admin"})
    consume = ConsumeStats.decode(stats.body)
    assert consume.diff_total() == 2
    queue1 = consume.offset_table[MessageQueue(topic="Admin", broker_name="broker-a", queue_id=1)]
    assert (queue1.broker_offset, queue1.consumer_offset) == (3, 1)
    reset = await call(
        broker_conn,
        RequestCode.INVOKE_BROKER_TO_RESET_OFFSET,
        {"topic": "Admin", "group": "ag", "timestamp": 0, "isForce": "true"},
    )
    assert reset.code == ResponseCode.SUCCESS
    query = await call(
        broker_conn,
        RequestCode.QUERY_CONSUMER_OFFSET,
        {"consumerGroup": "ag", "topic": "Admin", "queueId": 1},
    )
    assert query.ext_fields["offset"] == "0"
    deleted = await call(broker_conn, RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "Admin"})
    assert deleted.code == ResponseCode.SUCCESS
    assert (await pull(broker_conn, "Admin", 0, 0)).code == ResponseCode.TOPIC_NOT_EXIST
    reserved = await call(
        broker_conn,
        RequestCode.UPDATE_AND_CREATE_TOPIC,
        {"topic": "TBW102", "readQueueNums": 1, "writeQueueNums": 1, "perm": 6},
    )
    assert reserved.code == ResponseCode.INVALID_PARAMETER
    config = await call(broker_conn, RequestCode.GET_BROKER_CONFIG)
    assert b"brokerName=broker-a" in config.body and b"flushDiskType=" in config.body


# -- persistence ------------------------------------------------------------------------------


async def test_metadata_and_messages_survive_restart(cluster: Cluster, connect_to: ConnectTo) -> None:
    port = cluster.brokers["broker-a"].port
    conn = await connect_to(port)
    await create_topic(conn, "Durable", 2)
    for i in range(20):
        await send_ok(conn, "Durable", f"m{i}".encode(), queue_id=i % 2, tags=f"t{i}")
    await call(
        conn,
        RequestCode.UPDATE_CONSUMER_OFFSET,
        {"consumerGroup": "dg", "topic": "Durable", "queueId": 0, "commitOffset": 7},
    )
    assert await cluster.stop_broker("broker-a") == 0
    # Without its consume queues the broker rebuilds them, tag codes included, from the log.
    shutil.rmtree(cluster.brokers["broker-a"].store_dir / "consumequeue")
    await cluster.start_broker("broker-a")
    conn = await connect_to(port)
    bodies = sorted(
        m.body for m in [*await pull_all(conn, "Durable", 0), *await pull_all(conn, "Durable", 1)]
    )
    assert bodies == sorted(f"m{i}".encode() for i in range(20))
    query = await call(
        conn, RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": "dg", "topic": "Durable", "queueId": 0}
    )
    assert query.ext_fields["offset"] == "7"
    for i in range(20):
        filtered = await pull(conn, "Durable", i % 2, 0, subscription=f"t{i}")
        assert [m.body for m in decode_records(filtered.body)] == [f"m{i}".encode()], i


SOCKET_READS = ("read", "readv", "recvfrom", "recvmsg")
SOCKET_WRITES = ("write", "writev", "sendto", "sendmsg")
FLUSHES = ("fdatasync", "fsync", "sync_file_range")


async def test_sync_flush_acknowledges_only_what_the_commit_log_has_on_disk(
    cluster: Cluster, connect_to: ConnectTo, tmp_path: Path
) -> None:
    """Under SYNC_FLUSH, between reading a send and writing its acknowledgment, the broker
    completes a flush of the commit log, seen in its system calls (a kill -9 keeps the page
    cache, so surviving one proves nothing about the disk)."""
    await cluster.stop_broker("broker-a")
    broker = await cluster.start_broker("broker-a", flushDiskType="SYNC_FLUSH")
    assert broker.process is not None and broker.process.proc is not None
    await create_topic(await connect_to(broker.port), "Killed", 1)
    conn = await connect_to(broker.port)
    fence = await connect_to(broker.port)
    client_end = f"->127.0.0.1:{conn.local[1]}]"  # the broker's socket to this client
    trace = await SyscallTrace(
        broker.process.proc.pid, tmp_path / "strace.txt", (*FLUSHES, *SOCKET_READS, *SOCKET_WRITES)
    ).attach()
    acked = []
    try:
        for i in range(20):
            await send_ok(conn, "Killed", f"k{i}".encode())
            acked.append(f"k{i}".encode())
        # The client can read an answer while strace still holds the broker's write at its
        # exit and has not printed it. One more round trip, on another connection, that the
        # same event-loop thread answers, comes after that write has been reported.
        await call(fence, RequestCode.GET_BROKER_RUNTIME_INFO)
    finally:
        calls = await trace.detach()
    flushes = [c for c in calls if c.name in FLUSHES and "/commitlog/" in c.args and c.result == 0]
    mine = [c for c in calls if client_end in c.args and (c.result or 0) > 0]
    requests = [c for c in mine if c.name in SOCKET_READS]
    answers = [c for c in mine if c.name in SOCKET_WRITES]
    assert len(requests) == len(answers) == len(acked), (requests, answers)
    for i, (request, answer) in enumerate(zip(requests, answers, strict=True)):
        assert request.ended < answer.started
        assert any(request.ended < f.started and f.ended < answer.started for f in flushes), (
            f"send {i} was acknowledged without a commit-log flush after it arrived"
        )
    # And what was acknowledged is there after a kill -9.
    await cluster.kill_broker("broker-a")
    await cluster.start_broker("broker-a", flushDiskType="SYNC_FLUSH")
    conn = await connect_to(broker.port)
    assert [m.body for m in await pull_all(conn, "Killed", 0)] == acked


async def test_a_producer_gets_flush_disk_timeout_from_a_disk_slower_than_sync_flush_timeout(
    cluster: Cluster, connect_to: ConnectTo, tmp_path: Path
) -> None:
    """Every fdatasync of the broker is delayed by 1.5 s (strace's fault injection) while
    ``syncFlushTimeout`` is 200 ms: the send is answered FLUSH_DISK_TIMEOUT, and the message
    is stored all the same."""
    await cluster.stop_broker("broker-a")
    broker = await cluster.start_broker("broker-a", flushDiskType="SYNC_FLUSH", syncFlushTimeout=200)
    assert broker.process is not None and broker.process.proc is not None
    conn = await connect_to(broker.port)
    await create_topic(conn, "SlowDisk", 1)

    async def routed() -> bool:
        return await namesrv_route(cluster, connect_to, "SlowDisk") is not None

    await wait_until(routed, timeout=20)
    trace = await SyscallTrace(
        broker.process.proc.pid,
        tmp_path / "strace.txt",
        ("fdatasync",),
        inject=("fdatasync:delay_enter=1500000",),
    ).attach()
    try:
        async with Producer("slow-disk-producer", cluster.namesrv_addr) as producer:
            result = await producer.send(ClientMessage("SlowDisk", b"stored, not known durable"))
    finally:
        await trace.detach()
    assert result.status is SendStatus.FLUSH_DISK_TIMEOUT
    assert [m.body for m in await pull_all(conn, "SlowDisk", 0)] == [b"stored, not known durable"]


async def test_runtime_info_reports_rates_and_store_figures(broker_conn: Connection) -> None:
    for i in range(5):
        await send_ok(broker_conn, "Runtime", f"r{i}".encode())
    response = await call(broker_conn, RequestCode.GET_BROKER_RUNTIME_INFO)
    table = KVTable.decode(response.body).table
    put_tps = [float(x) for x in table["putTps"].split()]
    assert len(put_tps) == 3 and put_tps[0] > 0  # last 10 s, 1 min, 10 min
    assert len(table["getTransferedTps"].split()) == 3
    assert int(table["msgPutTotalTodayNow"]) == 5
    assert abs(int(table["earliestMessageTimeStamp"]) - time.time() * 1000) < 60_000
    assert 0 <= float(table["commitLogDiskRatio"]) <= 1
    assert int(table["commitLogMaxOffset"]) > int(table["commitLogMinOffset"])
    assert table["runtime"].startswith("[ 0 days, 0 hours")


async def test_transactional_message_with_a_delay_is_delayed_after_commit(broker_conn: Connection) -> None:
    await create_topic(broker_conn, "TxLater", 1)
    sent = await send_half(broker_conn, "TxLater", b"late commit", "txd", DELAY="2")
    assert sent.ext_fields["queueId"] == "0"
    await end_transaction(broker_conn, sent, "txd", 8)
    committed_at = time.monotonic()
    response = await pull(broker_conn, "TxLater", 0, 0, suspend_ms=10_000)
    (msg,) = decode_records(response.body)
    assert msg.body == b"late commit"
    assert time.monotonic() - committed_at >= 0.9  # level 2 is 1 s on the test cluster
    assert PropertyKey.TRANSACTION_PREPARED not in msg.properties


async def test_undecided_transactions_of_a_vanished_group_are_discarded(
    cluster: Cluster, connect_to: ConnectTo
) -> None:
    await cluster.stop_broker("broker-a")
    await cluster.start_broker(
        "broker-a", transactionCheckInterval=100, transactionTimeOut=50, transactionCheckMax=2
    )
    conn = await connect_to(cluster.brokers["broker-a"].port)
    await create_topic(conn, "TxGone", 1)
    sent = await send_half(conn, "TxGone", b"orphan", "no-such-producer")
    deadline = time.monotonic() + 15
    while True:
        runtime = KVTable.decode((await call(conn, RequestCode.GET_BROKER_RUNTIME_INFO)).body).table
        if runtime["openTransactions"] == "0":
            break
        assert time.monotonic() < deadline, "the orphan half message was never discarded"
        await asyncio.sleep(0.1)
    # A decision that arrives after the broker gave up is still applied.
    await end_transaction(conn, sent, "no-such-producer", 8)
    response = await pull(conn, "TxGone", 0, 0, suspend_ms=5000)
    assert [m.body for m in decode_records(response.body)] == [b"orphan"]


async def test_query_message_caps_the_number_of_answers(broker_conn: Connection) -> None:
    for i in range(70):
        await send_ok(broker_conn, "ManyKeys", f"k{i}".encode(), keys="same")
    found = await call(
        broker_conn,
        RequestCode.QUERY_MESSAGE,
        {"topic": "ManyKeys", "key": "same", "maxNum": 100_000, "beginTimestamp": 0, "endTimestamp": 2**62},
    )
    assert found.code == ResponseCode.SUCCESS
    assert len(decode_records(found.body)) == 64


async def test_a_refused_pull_commits_no_offset(broker_conn: Connection) -> None:
    refused = await pull(broker_conn, "NoSuchTopicHere", 0, 5, group="cg-refused", commit_offset=123)
    assert refused.code == ResponseCode.TOPIC_NOT_EXIST
    await create_topic(broker_conn, "NoSuchTopicHere", 1)
    query = {"consumerGroup": "cg-refused", "topic": "NoSuchTopicHere", "queueId": 0}
    stored = await call(broker_conn, RequestCode.QUERY_CONSUMER_OFFSET, query)
    # No progress stored: an empty queue's consumers start at its beginning.
    assert (stored.code, stored.ext_fields.get("offset")) == (ResponseCode.SUCCESS, "0"), stored


async def test_idle_connections_are_closed(cluster: Cluster) -> None:
    await cluster.stop_broker("broker-a")
    await cluster.start_broker("broker-a", serverChannelMaxIdleTimeSeconds=1)
    reader, writer = await asyncio.open_connection("127.0.0.1", cluster.brokers["broker-a"].port)
    started = time.monotonic()
    assert await asyncio.wait_for(reader.read(), 10) == b""  # closed by the broker
    assert time.monotonic() - started >= 0.9
    writer.close()


async def test_shutdown_does_not_wait_for_a_client_that_stopped_reading(
    cluster: Cluster, connect_to: ConnectTo
) -> None:
    port = cluster.brokers["broker-a"].port
    conn = await connect_to(port)
    sent = await send_ok(conn, "Heavy", b"x" * 1_000_000)
    _, offset = decode_offset_msg_id(sent.ext_fields["msgId"])
    _, writer = await asyncio.open_connection("127.0.0.1", port)
    view = RemotingCommand.request(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(offset)}).encode()
    writer.write(view * 30)  # ~30 MB of answers this client will never read
    await writer.drain()
    stopped = time.monotonic()
    assert await cluster.stop_broker("broker-a") == 0
    assert time.monotonic() - stopped < 15
    writer.close()


async def test_a_second_broker_on_a_store_in_use_fails_and_leaves_it_alone(
    cluster: Cluster, connect_to: ConnectTo
) -> None:
    first = cluster.brokers["broker-a"]
    conn = await connect_to(first.port)
    await create_topic(conn, "Owned", 1)
    await send_ok(conn, "Owned", b"mine")
    topics_file = first.store_dir / "config" / "topics.json"
    deadline = time.monotonic() + 10
    while not (topics_file.exists() and b"Owned" in topics_file.read_bytes()):
        assert time.monotonic() < deadline, "topics.json never saved"
        await asyncio.sleep(0.05)
    topics_before = topics_file.read_bytes()
    intruder = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "aiorocketmq.broker", "-c", str(first.conf), "--listen-port", "0",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    try:
        output, _ = await asyncio.wait_for(intruder.communicate(), 60)
    finally:
        if intruder.returncode is None:  # it should have refused the store: never leave it running
            intruder.kill()
            await intruder.wait()
    assert intruder.returncode != 0
    assert b"in use" in output
    assert topics_file.read_bytes() == topics_before
    assert [m.body for m in await pull_all(conn, "Owned", 0)] == [b"mine"]


# -- permissions ------------------------------------------------------------------------------


async def test_topic_broker_and_group_permissions_refuse_sends_and_pulls(
    cluster: Cluster, connect_to: ConnectTo
) -> None:
    conn = await connect_to(cluster.brokers["broker-a"].port)
    await create_topic(conn, "ReadOnly", 1, perm=4)
    await create_topic(conn, "WriteOnly", 1, perm=2)
    await create_topic(conn, "Open", 1)
    refused_send = await send(conn, "ReadOnly", b"x")
    assert refused_send.code == ResponseCode.NO_PERMISSION
    assert "topic[ReadOnly] sending message is forbidden" in (refused_send.remark or "")
    await send_ok(conn, "WriteOnly", b"w")
    refused_pull = await pull(conn, "WriteOnly", 0, 0)
    assert refused_pull.code == ResponseCode.NO_PERMISSION
    assert "topic[WriteOnly] pulling message is forbidden" in (refused_pull.remark or "")
    await send_ok(conn, "Open", b"o")
    disabled = SubscriptionGroupConfig(group_name="disabled", consume_enable=False)
    response = await call(conn, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=disabled.encode())
    assert response.code == ResponseCode.SUCCESS
    refused_group = await pull(conn, "Open", 0, 0, group="disabled")
    assert refused_group.code == ResponseCode.NO_PERMISSION
    assert "subscription group no permission, disabled" in (refused_group.remark or "")
    assert [m.body for m in decode_records((await pull(conn, "Open", 0, 0, group="enabled")).body)] == [b"o"]
    assert await max_offset(conn, "ReadOnly", 0) == 0  # the refused send stored nothing

    # A read-only broker (brokerPermission 4) refuses every send, a write-only one (2) every pull.
    await cluster.stop_broker("broker-a")
    await cluster.start_broker("broker-a", brokerPermission=4)
    conn = await connect_to(cluster.brokers["broker-a"].port)
    read_only = await send(conn, "Open", b"no")
    assert read_only.code == ResponseCode.NO_PERMISSION
    assert "sending message is forbidden" in (read_only.remark or "")
    assert [m.body for m in await pull_all(conn, "Open", 0)] == [b"o"]
    await cluster.stop_broker("broker-a")
    await cluster.start_broker("broker-a", brokerPermission=2)
    conn = await connect_to(cluster.brokers["broker-a"].port)
    write_only = await pull(conn, "Open", 0, 0)
    assert write_only.code == ResponseCode.NO_PERMISSION
    assert "pulling message is forbidden" in (write_only.remark or "")
    await send_ok(conn, "Open", b"yes")
    assert await max_offset(conn, "Open", 0) == 2


# -- the index across restarts ------------------------------------------------------------


@pytest.mark.parametrize("how", ["stop", "kill"])
async def test_query_by_key_after_a_broker_restart(cluster: Cluster, connect_to: ConnectTo, how: str) -> None:
    conn = await connect_to(cluster.brokers["broker-a"].port)
    for i in range(10):
        await send_ok(conn, "Reindexed", f"r{i}".encode(), keys=f"order-{i % 3} all")

    async def query(key: str) -> RemotingCommand:
        return await call(
            conn,
            RequestCode.QUERY_MESSAGE,
            {"topic": "Reindexed", "key": key, "maxNum": 32, "beginTimestamp": 0, "endTimestamp": 2**62},
        )

    async def indexed() -> bool:
        return (await query("all")).code == ResponseCode.SUCCESS

    await wait_until(indexed, timeout=10)
    if how == "kill":
        await cluster.kill_broker("broker-a")
    else:
        assert await cluster.stop_broker("broker-a") == 0
    await cluster.start_broker("broker-a")
    conn = await connect_to(cluster.brokers["broker-a"].port)
    found = await query("order-1")
    assert found.code == ResponseCode.SUCCESS, found
    assert sorted(m.body for m in decode_records(found.body)) == [b"r1", b"r4", b"r7"]
    everything = await query("all")
    assert sorted(m.body for m in decode_records(everything.body)) == sorted(
        f"r{i}".encode() for i in range(10)
    )


# -- the name server's view of real brokers -----------------------------------------------


#: Brokers register every 10 s at the most often (RocketMQ's floor on registerNameServerPeriod).
EXPIRY = 11


async def test_name_server_drops_a_stopped_a_killed_and_a_frozen_broker(
    tmp_path: Path, connect_to: ConnectTo
) -> None:
    """A broker shut down unregisters itself; a killed one is dropped when its connection
    closes; a frozen one (SIGSTOP: its connection stays open) expires after the name server's
    ``brokerChannelExpiredTime``."""
    cluster = Cluster(tmp_path)
    frozen: BrokerProcess | None = None
    try:
        await cluster.start_namesrv(brokerChannelExpiredTime=EXPIRY * 1000, scanNotActiveBrokerInterval=200)
        (namesrv,) = cluster.namesrv_processes
        brokers = [await cluster.start_broker(name) for name in ("broker-a", "broker-b", "broker-c")]
        ns_conn = await connect_to(cluster.namesrv_ports[0])

        async def registered() -> set[str]:
            response = await call(ns_conn, RequestCode.GET_BROKER_CLUSTER_INFO)
            return set(ClusterInfo.decode(response.body).broker_addr_table)

        async def all_registered() -> bool:
            return await registered() == {"broker-a", "broker-b", "broker-c"}

        await wait_until(all_registered, timeout=20)
        stopped, killed, frozen = brokers
        # Frozen first: it expires brokerChannelExpiredTime after its last registration,
        # while the other two leave.
        assert frozen.process is not None and frozen.process.proc is not None
        frozen.process.proc.send_signal(signal.SIGSTOP)

        assert await cluster.stop_broker("broker-a") == 0
        await namesrv.wait_for_line(
            rf"broker unregistered: {re.escape(stopped.addr)} name=broker-a", timeout=10
        )
        assert "broker-a" not in await registered()

        await cluster.kill_broker("broker-b")
        await namesrv.wait_for_line(rf"broker {re.escape(killed.addr)} removed: its connection", timeout=10)
        assert "broker-b" not in await registered()

        await namesrv.wait_for_line(rf"broker {re.escape(frozen.addr)} expired", timeout=EXPIRY + 10)
        assert await registered() == set()
    finally:
        if frozen is not None and frozen.process is not None and frozen.process.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                frozen.process.proc.send_signal(signal.SIGCONT)
            await frozen.process.kill()
        await cluster.stop()


async def test_a_restart_keeps_its_port_and_waits_until_it_is_free(
    cluster: Cluster, connect_to: ConnectTo
) -> None:
    """The test cluster restarts a broker on the port it had (clients and stored message ids
    know it); while another socket still holds that port, the start is retried."""
    port = cluster.brokers["broker-a"].port
    await cluster.stop_broker("broker-a")
    squatter = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    squatter.bind(("127.0.0.1", port))
    squatter.listen()
    asyncio.get_running_loop().call_later(3.0, squatter.close)  # longer than a broker takes to start
    try:
        await cluster.start_broker("broker-a")
    finally:
        squatter.close()
    assert cluster.brokers["broker-a"].port == port
    await send_ok(await connect_to(port), "SamePort", b"still here")
