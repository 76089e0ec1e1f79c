"""RocketMQ 5's remoting additions on a real name server and two brokers: server-side queue
assignment (QUERY_ASSIGNMENT, SET_MESSAGE_REQUEST_MODE, GET_ALL_MESSAGE_REQUEST_MODE and the
persisted mode table), LITE_PULL_MESSAGE, the properties a 5.x broker stores in every message,
and the log line for a request code the broker does not serve."""

from __future__ import annotations

import asyncio
import json
import struct
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from aiorocketmq.client import ConsumeFrom, ConsumeResult, Producer, PushConsumer
from aiorocketmq.protocol import fastjson
from aiorocketmq.protocol.body import (
    ConsumeType,
    CreateTopicListBody,
    MessageQueue,
    SubscriptionGroupConfig,
    SubscriptionGroupList,
    TopicConfig,
)
from aiorocketmq.protocol.codes import MessageSysFlag, PullSysFlag, RequestCode, ResponseCode
from aiorocketmq.protocol.command import RemotingCommand
from aiorocketmq.protocol.headers import SendMessageRequestHeader
from aiorocketmq.protocol.message import Message, MessageExt, PropertyKey, decode_records, encode_batch
from aiorocketmq.protocol.names import TRANS_HALF_TOPIC
from aiorocketmq.protocol.pop import PopRequestCode
from aiorocketmq.protocol.transport import Connection
from tests.cluster import Cluster
from tests.support import wait_until

from .conftest import ConnectTo
from .requests import call, heartbeat, pull_request, send_ok

TOPIC = "Assigned"
GROUP = "assigned-group"


async def create_topic(conn: Connection, topic: str, queues: int) -> None:
    response = await call(
        conn,
        RequestCode.UPDATE_AND_CREATE_TOPIC,
        {"topic": topic, "readQueueNums": queues, "writeQueueNums": queues, "perm": 6},
    )
    assert response.code == ResponseCode.SUCCESS, response


async def query(conn: Connection, client_id: str, *, topic: str = TOPIC, strategy: str = "AVG") -> dict:
    body = {
        "topic": topic,
        "consumerGroup": GROUP,
        "clientId": client_id,
        "strategyName": strategy,
        "messageModel": "CLUSTERING",
    }
    response = await call(conn, RequestCode.QUERY_ASSIGNMENT, body=json.dumps(body).encode())
    assert response.code == ResponseCode.SUCCESS, response
    return json.loads(response.body)


def queues_of(answer: dict) -> list[tuple[MessageQueue, str]]:
    return [
        (MessageQueue.model_validate(a["messageQueue"]), a["mode"]) for a in answer["messageQueueAssignments"]
    ]


async def set_mode(conn: Connection, topic: str, mode: str, share: int = 0) -> RemotingCommand:
    body = {"topic": topic, "consumerGroup": GROUP, "mode": mode, "popShareQueueNum": share}
    return await call(conn, RequestCode.SET_MESSAGE_REQUEST_MODE, body=json.dumps(body).encode())


async def test_the_broker_assigns_every_brokers_queues_among_the_live_clients(
    two_brokers: Cluster, connect_to: ConnectTo
) -> None:
    """Three clients asking broker-a share the eight queues of both brokers, each queue once
    (Apache's AVG over the name server's route), all to be pulled; a client the broker does
    not know gets nothing, an unknown topic or strategy an empty answer (keep what you have)."""
    a = await connect_to(two_brokers.brokers["broker-a"].port)
    b = await connect_to(two_brokers.brokers["broker-b"].port)
    await create_topic(a, TOPIC, 4)
    await create_topic(b, TOPIC, 4)
    clients = [f"10.0.0.{i}@1" for i in range(3)]
    for client_id in clients:
        await heartbeat(
            await connect_to(two_brokers.brokers["broker-a"].port), client_id, GROUP, {TOPIC: "*"}
        )

    async def both_routed() -> bool:
        answer = await query(a, clients[0])
        return {q.broker_name for q, _ in queues_of(answer)} | {
            q.broker_name for c in clients[1:] for q, _ in queues_of(await query(a, c))
        } == {"broker-a", "broker-b"}

    await wait_until(both_routed, timeout=15)
    shares = [queues_of(await query(a, c)) for c in clients]
    owned = [q for share in shares for q, _ in share]
    everything = {
        MessageQueue(topic=TOPIC, broker_name=n, queue_id=i)
        for n in ("broker-a", "broker-b")
        for i in range(4)
    }
    assert sorted(owned) == sorted(everything), shares
    assert [len(s) for s in shares] == [3, 3, 2]
    assert {mode for share in shares for _, mode in share} == {"PULL"}
    assert queues_of(await query(a, "stranger@1")) == []
    assert await query(a, clients[0], topic="NoSuchTopic") == {}
    assert await query(a, clients[0], strategy="NO_SUCH_STRATEGY") == {}


async def test_a_pop_mode_is_kept_across_a_restart_and_hands_out_each_broker_whole(
    two_brokers: Cluster, connect_to: ConnectTo
) -> None:
    """SET_MESSAGE_REQUEST_MODE POP makes every client pop every broker (queue id -1); the mode
    is in config/messageRequestMode.json and GET_ALL_MESSAGE_REQUEST_MODE after a restart."""
    a = await connect_to(two_brokers.brokers["broker-a"].port)
    await create_topic(a, TOPIC, 4)
    group = SubscriptionGroupConfig(group_name=GROUP)
    response = await call(a, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=group.encode())
    assert response.code == ResponseCode.SUCCESS, response
    assert (await set_mode(a, TOPIC, "POP")).code == ResponseCode.SUCCESS
    refused = await set_mode(a, f"%RETRY%{GROUP}", "POP")
    assert (refused.code, refused.remark) == (
        ResponseCode.NO_PERMISSION,
        "retry topic is not allowed to set mode",
    )
    missing = await set_mode(a, "NoSuchTopic", "POP")
    assert missing.code == ResponseCode.TOPIC_NOT_EXIST, missing
    bad = await call(a, RequestCode.SET_MESSAGE_REQUEST_MODE, body=b'{"topic": "x", "mode": "SOMETIMES"}')
    assert bad.code != ResponseCode.SUCCESS and "consumerGroup" in (bad.remark or ""), bad

    await heartbeat(a, "10.0.0.1@1", GROUP, {TOPIC: "*"})
    answer = queues_of(await query(a, "10.0.0.1@1"))
    assert answer == [(MessageQueue(topic=TOPIC, broker_name="broker-a", queue_id=-1), "POP")]

    await two_brokers.stop_broker("broker-a")
    await two_brokers.start_broker("broker-a")
    a = await connect_to(two_brokers.brokers["broker-a"].port)
    stored = await call(a, RequestCode.GET_ALL_MESSAGE_REQUEST_MODE)
    assert stored.code == ResponseCode.SUCCESS, stored
    assert json.loads(stored.body) == {
        "messageRequestModeMap": {
            TOPIC: {GROUP: {"consumerGroup": GROUP, "mode": "POP", "popShareQueueNum": 0, "topic": TOPIC}}
        }
    }


async def test_lite_pull_is_a_pull_and_can_be_switched_off(tmp_path: Path, connect_to: ConnectTo) -> None:
    """LITE_PULL_MESSAGE (361) answers what PULL_MESSAGE answers; with litePullMessageEnable=false
    it is refused as Apache refuses it."""
    cluster = Cluster(tmp_path)
    await cluster.start_namesrv()
    try:
        for name, enabled in (("broker-a", "true"), ("broker-b", "false")):
            broker = await cluster.start_broker(name, litePullMessageEnable=enabled)
            conn = await connect_to(broker.port)
            await create_topic(conn, TOPIC, 1)
            await send_ok(conn, TOPIC, b"lite")
            request = pull_request(TOPIC, 0)
            request.ext_fields["sysFlag"] = str(int(PullSysFlag.SUBSCRIPTION) | 0x10)
            response = await call(conn, RequestCode.LITE_PULL_MESSAGE, request.ext_fields)
            if enabled == "true":
                assert response.code == ResponseCode.SUCCESS, response
                assert [m.body for m in decode_records(response.body)] == [b"lite"]
            else:
                assert response.code == ResponseCode.NO_PERMISSION, response
                assert "for lite pull consumer is forbidden" in (response.remark or "")
    finally:
        await cluster.stop()


async def test_every_stored_message_carries_the_region_and_trace_switch(
    two_brokers: Cluster, connect_to: ConnectTo
) -> None:
    """As RocketMQ 5 stores them (a 5.x consumer's trace needs MSG_REGION): single and batch
    sends, with a producer's own values replaced by the broker's, each properties string
    ending with the separator as 5.3.3's do."""
    a = await connect_to(two_brokers.brokers["broker-a"].port)
    await create_topic(a, TOPIC, 1)
    await send_ok(a, TOPIC, b"one", properties={"MSG_REGION": "elsewhere"})
    header = SendMessageRequestHeader(
        producer_group="g", topic=TOPIC, queue_id=0, born_timestamp=1, batch=True, properties="WAIT\x01true"
    ).to_v2()
    batch = encode_batch([Message(TOPIC, b"two"), Message(TOPIC, b"three", properties={"TRACE_ON": "false"})])
    response = await call(a, RequestCode.SEND_BATCH_MESSAGE, header.to_fields(), batch)
    assert response.code == ResponseCode.SUCCESS, response
    await send_ok(a, TOPIC, b"four", properties={"KEYS": "k"})  # the broker's appended to the producer's
    pulled = await call(a, RequestCode.PULL_MESSAGE, pull_request(TOPIC, 0).ext_fields)
    messages = decode_records(pulled.body)
    assert [m.body for m in messages] == [b"one", b"two", b"three", b"four"]
    for m in messages:
        assert (m.properties["MSG_REGION"], m.properties["TRACE_ON"], m.properties["CLUSTER"]) == (
            "DefaultRegion",
            "true",
            "DefaultCluster",
        ), m.properties
    raw = stored_property_strings(pulled.body)
    assert len(raw) == 4 and all(text.endswith(b"\x02") and not text.endswith(b"\x02\x02") for text in raw), (
        raw
    )


def stored_property_strings(records: bytes) -> list[bytes]:
    """Each record's properties exactly as stored (IPv4 hosts): after the fixed fields, the
    body, and the topic."""
    strings, pos = [], 0
    while pos < len(records):
        (size,) = struct.unpack_from(">i", records, pos)
        record = records[pos : pos + size]
        (body_len,) = struct.unpack_from(">i", record, 84)
        at = 88 + body_len
        at += 1 + record[at]  # the topic
        (props_len,) = struct.unpack_from(">h", record, at)
        strings.append(record[at + 2 : at + 2 + props_len])
        pos += size
    return strings


async def test_an_unserved_request_code_is_logged_once_with_its_peer(
    two_brokers: Cluster, connect_to: ConnectTo
) -> None:
    """The client gets REQUEST_CODE_NOT_SUPPORTED; the broker's log names the code and the
    peer once, however often it is repeated."""
    broker = two_brokers.brokers["broker-a"]
    conn = await connect_to(broker.port)
    for _ in range(5):
        response = await call(conn, 9999)
        assert (response.code, response.remark) == (
            ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
            " request type 9999 not supported",
        )
    assert broker.process is not None
    await broker.process.wait_for_line(
        r"refused 9999 \(code 9999\) from 127\.0\.0\.1:\d+: request code not supported"
    )
    assert sum("refused 9999" in line for line in broker.process.lines) == 1


async def test_the_5x_admin_reads_and_bulk_group_creation(
    two_brokers: Cluster, connect_to: ConnectTo
) -> None:
    """GET_TOPIC_CONFIG, GET_SUBSCRIPTIONGROUP_CONFIG, UPDATE_AND_CREATE_SUBSCRIPTIONGROUP_LIST,
    QUERY_TOPICS_BY_CONSUMER and QUERY_SUBSCRIPTION_BY_CONSUMER answer from the broker's
    tables (what mqadmin 5 reads), and refuse what is not there."""
    a = await connect_to(two_brokers.brokers["broker-a"].port)
    await create_topic(a, TOPIC, 3)
    topic = await call(a, RequestCode.GET_TOPIC_CONFIG, {"topic": TOPIC})
    assert topic.code == ResponseCode.SUCCESS, topic
    assert (json.loads(topic.body)["topicName"], json.loads(topic.body)["readQueueNums"]) == (TOPIC, 3)
    missing = await call(a, RequestCode.GET_TOPIC_CONFIG, {"topic": "NoSuchTopic"})
    assert missing.code == ResponseCode.TOPIC_NOT_EXIST, missing

    groups = SubscriptionGroupList(
        group_config_list=[
            SubscriptionGroupConfig(group_name="bulk-1", retry_max_times=3),
            SubscriptionGroupConfig(group_name="bulk-2", consume_enable=False),
        ]
    )
    created = await call(a, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP_LIST, body=groups.encode())
    assert created.code == ResponseCode.SUCCESS, created
    first = json.loads((await call(a, RequestCode.GET_SUBSCRIPTIONGROUP_CONFIG, {"group": "bulk-1"})).body)
    second = json.loads((await call(a, RequestCode.GET_SUBSCRIPTIONGROUP_CONFIG, {"group": "bulk-2"})).body)
    assert (first["retryMaxTimes"], second["consumeEnable"]) == (3, False)

    commit = await call(
        a,
        RequestCode.UPDATE_CONSUMER_OFFSET,
        {"consumerGroup": "bulk-1", "topic": TOPIC, "queueId": 1, "commitOffset": 0},
    )
    assert commit.code == ResponseCode.SUCCESS, commit
    topics = json.loads((await call(a, RequestCode.QUERY_TOPICS_BY_CONSUMER, {"group": "bulk-1"})).body)
    assert topics["topicList"] == [TOPIC] and topics["brokerAddr"].endswith(
        f":{two_brokers.brokers['broker-a'].port}"
    ), topics

    await heartbeat(a, "10.0.0.9@1", "bulk-1", {TOPIC: "tag-a || tag-b"})
    sub = await call(a, RequestCode.QUERY_SUBSCRIPTION_BY_CONSUMER, {"group": "bulk-1", "topic": TOPIC})
    answer = json.loads(sub.body)
    assert (answer["group"], answer["topic"], answer["subscriptionData"]["subString"]) == (
        "bulk-1",
        TOPIC,
        "tag-a || tag-b",
    )
    none = json.loads(
        (await call(a, RequestCode.QUERY_SUBSCRIPTION_BY_CONSUMER, {"group": "bulk-2", "topic": TOPIC})).body
    )
    assert "subscriptionData" not in none


async def test_timer_checkpoint_and_metrics_count_what_is_parked(
    two_brokers: Cluster, connect_to: ConnectTo
) -> None:
    """GET_TIMER_METRICS counts a parked timer message under its real topic; GET_TIMER_CHECK_POINT
    is Apache's 56-byte record, its timer-queue offset past the parked entry."""
    a = await connect_to(two_brokers.brokers["broker-a"].port)
    await create_topic(a, TOPIC, 1)
    await send_ok(a, TOPIC, b"later", properties={"TIMER_DELAY_SEC": "60"})
    metrics = json.loads((await call(a, RequestCode.GET_TIMER_METRICS)).body)
    assert metrics["timingCount"][TOPIC]["count"] == 1, metrics
    record = (await call(a, RequestCode.GET_TIMER_CHECK_POINT)).body
    assert len(record) == 56
    _read_ms, flush_pos, queue_offset, _master, _state, _ts, _counter = struct.unpack(">7q", record)
    assert (queue_offset, flush_pos) == (1, 20)


async def test_topics_in_bulk_rocksdb_requests_and_resuming_a_half_message(
    two_brokers: Cluster, connect_to: ConnectTo
) -> None:
    """UPDATE_AND_CREATE_TOPIC_LIST creates every topic or none; the RocksDB requests answer as
    Apache's broker does without RocksDB tables (export: nothing to do; check: refused, with
    why); RESUME_CHECK_HALF_MESSAGE puts a half message back to be checked from the start."""
    a = await connect_to(two_brokers.brokers["broker-a"].port)
    batch = CreateTopicListBody(
        topic_config_list=[
            TopicConfig(topic_name="BulkA", read_queue_nums=2, write_queue_nums=2),
            TopicConfig(topic_name="BulkB"),
        ]
    )
    created = await call(a, RequestCode.UPDATE_AND_CREATE_TOPIC_LIST, body=batch.encode())
    assert created.code == ResponseCode.SUCCESS, created
    for name, queues in (("BulkA", 2), ("BulkB", 16)):
        config = json.loads((await call(a, RequestCode.GET_TOPIC_CONFIG, {"topic": name})).body)
        assert config["readQueueNums"] == queues, config
    refused = CreateTopicListBody(
        topic_config_list=[TopicConfig(topic_name="BulkC"), TopicConfig(topic_name="bad topic!")]
    )
    answer = await call(a, RequestCode.UPDATE_AND_CREATE_TOPIC_LIST, body=refused.encode())
    assert answer.code == ResponseCode.INVALID_PARAMETER, answer
    missing = await call(a, RequestCode.GET_TOPIC_CONFIG, {"topic": "BulkC"})
    assert missing.code == ResponseCode.TOPIC_NOT_EXIST, "a refused list created some of its topics"

    export = await call(a, RequestCode.EXPORT_ROCKSDB_CONFIG_TO_JSON, {"configType": "topics"})
    assert (export.code, export.remark) == (ResponseCode.SUCCESS, "export done.")
    check = await call(a, RequestCode.CHECK_ROCKSDB_CQ_WRITE_PROGRESS, {"topic": "BulkA"})
    assert check.code == ResponseCode.SYSTEM_ERROR and "RocksDB" in (check.remark or ""), check

    half = await send_ok(
        a,
        "BulkA",
        b"half",
        sys_flag=MessageSysFlag.TRANSACTION_PREPARED,
        properties={PropertyKey.TRANSACTION_PREPARED: "true", PropertyKey.PRODUCER_GROUP: "pg"},
    )
    resumed = await call(a, RequestCode.RESUME_CHECK_HALF_MESSAGE, {"msgId": half.ext_fields["msgId"]})
    assert resumed.code == ResponseCode.SUCCESS, resumed
    halves = decode_records(
        (
            await call(a, RequestCode.PULL_MESSAGE, pull_request(TRANS_HALF_TOPIC, 0, group="ops").ext_fields)
        ).body
    )
    assert [(m.body, m.properties.get(PropertyKey.TRANSACTION_CHECK_TIMES)) for m in halves] == [
        (b"half", None),
        (b"half", "0"),
    ]
    bad = await call(a, RequestCode.RESUME_CHECK_HALF_MESSAGE, {"msgId": "nothex"})
    assert bad.code == ResponseCode.SYSTEM_ERROR, bad


#: Every request code Apache RocketMQ 5.3.3's broker serves (its processors' registrations and
#: AdminBrokerProcessor's cases; docs/interop.md lists them with what we do for each).
APACHE_BROKER_CODES = frozenset(
    {10, 11, 12, 14, 15, 17, 18, 21, 25, 26, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 41, 42, 43, 45, 46}
    | {60, 61, 200, 201, 202, 203, 204, 207, 208, 215, 222, 223, 225, 300, 303, 305, 306, 307, 308, 309}
    | {310, 314, 315, 316, 317, 320, 321, 323, 324, 325, 328, 329, 343, 345, 351, 352, 353, 354, 355}
    | {361, 370, 400, 401, 402, 513, 905, 906, 907, 908, 1007, 1008, 2001, 2002, 2003, 2004}
    | set(range(3001, 3011))
    | {200050, 200051, 200052, 200053, 200054, 200055, 200056, 200151}
)

#: The codes of that list we answer REQUEST_CODE_NOT_SUPPORTED, each with the reason (the same
#: list is in docs/interop.md). A code served since must leave this list.
NOT_SERVED = {
    # Only Apache's slave-acting-master mode (enableSlaveActingMaster, not implemented) sends
    # these; controller mode's own (1007, 1008) are served (docs/controller.md).
    **{code: "slave acting master (enableSlaveActingMaster) is not implemented" for code in (905, 906)},
}


async def test_every_code_apaches_broker_serves_is_served_or_listed_with_its_reason(
    two_brokers: Cluster, connect_to: ConnectTo
) -> None:
    """Each code of Apache 5.3.3's broker, sent with an empty header and body, gets an answer
    other than REQUEST_CODE_NOT_SUPPORTED, unless NOT_SERVED says why not."""
    a = await connect_to(two_brokers.brokers["broker-a"].port)
    unsupported = set()
    for code in sorted(APACHE_BROKER_CODES):
        response = await call(a, code, timeout=30)
        if response.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
            unsupported.add(code)
    assert unsupported == set(NOT_SERVED), (
        f"answered as not supported but not listed: {sorted(unsupported - set(NOT_SERVED))}; "
        f"listed but served now: {sorted(set(NOT_SERVED) - unsupported)}"
    )


async def test_consumer_status_time_span_and_group_forbidden(
    two_brokers: Cluster, connect_to: ConnectTo
) -> None:
    """INVOKE_BROKER_TO_GET_CONSUMER_STATUS collects the offsets a live SDK consumer holds;
    QUERY_CONSUME_TIME_SPAN reports the group's progress in time; UPDATE_AND_GET_GROUP_FORBIDDEN
    stops a group's pulls on one topic (kept in subscriptionGroup.json) and lets them go on."""
    a = await connect_to(two_brokers.brokers["broker-a"].port)
    await create_topic(a, TOPIC, 2)
    group = "status-group"
    consumed: asyncio.Queue[bytes] = asyncio.Queue()
    consumer = PushConsumer(group, two_brokers.namesrv_addr, consume_from=ConsumeFrom.FIRST_OFFSET)
    consumer.subscribe(TOPIC)

    @consumer.listener
    async def handle(messages: list[MessageExt]) -> ConsumeResult:
        for m in messages:
            consumed.put_nowait(m.body)
        return ConsumeResult.SUCCESS

    for i in range(4):
        await send_ok(a, TOPIC, f"m{i}".encode(), queue_id=i % 2)
    async with consumer:
        for _ in range(4):
            await asyncio.wait_for(consumed.get(), 30)

        async def offsets_held() -> dict:
            answer = await call(
                a, RequestCode.INVOKE_BROKER_TO_GET_CONSUMER_STATUS, {"topic": TOPIC, "group": group}
            )
            assert answer.code == ResponseCode.SUCCESS, answer
            table = json.loads(fastjson_text(answer.body))["consumerTable"]
            return table.get(consumer.client_id, {})

        await wait_until(lambda: _all_at(offsets_held, 2), timeout=30)
        span = await call(a, RequestCode.QUERY_CONSUME_TIME_SPAN, {"topic": TOPIC, "group": group})
        spans = json.loads(span.body)["consumeTimeSpanSet"]
        assert [s["messageQueue"]["queueId"] for s in spans] == [0, 1]
        assert all(s["minTimeStamp"] > 0 and s["maxTimeStamp"] >= s["minTimeStamp"] for s in spans), spans

    await heartbeat(a, "10.0.0.7@1", group, {TOPIC: "*"})
    forbid = await call(
        a, RequestCode.UPDATE_AND_GET_GROUP_FORBIDDEN, {"group": group, "topic": TOPIC, "readable": "false"}
    )
    assert json.loads(forbid.body) == {"group": group, "readable": False, "topic": TOPIC}
    refused = await call(
        a, RequestCode.PULL_MESSAGE, pull_request(TOPIC, 0, group=group, subscription=None).ext_fields
    )
    assert refused.code == ResponseCode.NO_PERMISSION and "is forbidden for topic" in (
        refused.remark or ""
    ), refused
    groups_file = two_brokers.root / "broker-a" / "config" / "subscriptionGroup.json"
    # Saved in the background, soon after the change.
    await wait_until(lambda: json.loads(groups_file.read_text()).get("forbiddenTable") == {group: {TOPIC: 4}})
    allow = await call(
        a, RequestCode.UPDATE_AND_GET_GROUP_FORBIDDEN, {"group": group, "topic": TOPIC, "readable": "true"}
    )
    assert json.loads(allow.body)["readable"] is True
    again = await call(
        a, RequestCode.PULL_MESSAGE, pull_request(TOPIC, 0, group=group, subscription=None).ext_fields
    )
    assert again.code == ResponseCode.SUCCESS, again


def fastjson_text(body: bytes) -> str:
    """Our JSON reader for a body with fastjson's object keys, re-dumped as plain JSON."""
    return json.dumps(fastjson.loads(body))


async def _all_at(held: Callable[[], Awaitable[dict]], offset: int) -> bool:
    table = await held()
    return len(table) == 2 and all(v == offset for v in table.values())


async def test_peek_notification_polling_info_and_pop_rollback(
    two_brokers: Cluster, connect_to: ConnectTo
) -> None:
    """PEEK_MESSAGE shows what a pop would get without popping it; NOTIFICATION answers hasMsg
    once a message is there (asked before the send, it may wait for the arrival or find it); POLLING_INFO counts the pops waiting on a queue; POP_ROLLBACK (nothing
    kept outside check-points here) answers SUCCESS as Apache's broker without a RocksDB store."""
    a = await connect_to(two_brokers.brokers["broker-a"].port)
    b = await connect_to(two_brokers.brokers["broker-a"].port)
    await create_topic(a, TOPIC, 1)
    group = "peeking-group"
    now = int(time.time() * 1000)
    asked = {"consumerGroup": group, "topic": TOPIC, "queueId": 0, "pollTime": 20_000, "bornTime": now}
    waiting = asyncio.ensure_future(call(b, PopRequestCode.NOTIFICATION, asked, timeout=30))
    await asyncio.sleep(0)
    await send_ok(a, TOPIC, b"peeked")
    told = await asyncio.wait_for(waiting, 10)
    assert (told.code, told.ext_fields["hasMsg"], told.ext_fields["pollingFull"]) == (
        ResponseCode.SUCCESS,
        "true",
        "false",
    )

    for _ in range(2):  # looking twice finds it twice: a peek pops nothing
        peek = await call(
            a,
            PopRequestCode.PEEK_MESSAGE,
            {"consumerGroup": group, "topic": TOPIC, "queueId": -1, "maxMsgNums": 8},
        )
        assert (peek.code, peek.remark, peek.ext_fields["restNum"]) == (ResponseCode.SUCCESS, "FOUND", "1"), (
            peek
        )
        assert [m.body for m in decode_records(peek.body)] == [b"peeked"]

    other = "PolledTopic"
    await create_topic(a, other, 1)
    pop_fields = {
        "consumerGroup": group,
        "topic": other,
        "queueId": 0,
        "maxMsgNums": 1,
        "invisibleTime": 30_000,
        "pollTime": 20_000,
        "bornTime": int(time.time() * 1000),
        "initMode": 0,
    }
    pop = asyncio.ensure_future(call(b, PopRequestCode.POP_MESSAGE, pop_fields, timeout=30))

    async def polling() -> int:
        info = await call(
            a, PopRequestCode.POLLING_INFO, {"consumerGroup": group, "topic": other, "queueId": 0}
        )
        return int(info.ext_fields["pollingNum"])

    await wait_until(lambda: _equals(polling, 1))
    await send_ok(a, other, b"popped")
    popped = await asyncio.wait_for(pop, 10)
    assert [m.body for m in decode_records(popped.body)] == [b"popped"]
    assert await polling() == 0
    rollback = await call(a, PopRequestCode.POP_ROLLBACK)
    assert rollback.code == ResponseCode.SUCCESS, rollback


async def _equals(value: Callable[[], Awaitable[int]], expected: int) -> bool:
    return await value() == expected


async def test_a_recalled_timer_message_is_never_delivered_even_across_a_kill(
    tmp_path: Path, connect_to: ConnectTo
) -> None:
    """RECALL_MESSAGE with the handle a timer send returned cancels that message (the SDK's
    Producer.recall), also when the broker is killed with -9 before the delivery time; the
    message sent beside it, due later, is delivered. Refusals as Apache's: recall off (its
    default), a bad handle, a handle for another topic."""
    cluster = Cluster(tmp_path)
    await cluster.start_namesrv()
    try:
        broker = await cluster.start_broker("broker-a", recallMessageEnable="true")
        plain = await cluster.start_broker("broker-b")
        conn = await connect_to(broker.port)
        await create_topic(conn, TOPIC, 1)
        async with Producer("recalling", cluster.namesrv_addr) as producer:
            recalled = await producer.send(Message(TOPIC, b"recalled", properties={"TIMER_DELAY_MS": "3000"}))
            kept = await producer.send(Message(TOPIC, b"kept", properties={"TIMER_DELAY_MS": "3300"}))
            assert recalled.recall_handle and kept.recall_handle
            assert await producer.recall(TOPIC, recalled.recall_handle) == recalled.msg_id

            wrong_topic = await call(
                conn, RequestCode.RECALL_MESSAGE, {"topic": "BulkA", "recallHandle": kept.recall_handle}
            )
            assert wrong_topic.code in (ResponseCode.TOPIC_NOT_EXIST, ResponseCode.ILLEGAL_OPERATION), (
                wrong_topic
            )
            bad = await call(conn, RequestCode.RECALL_MESSAGE, {"topic": TOPIC, "recallHandle": "@@@"})
            assert (bad.code, bad.remark) == (ResponseCode.ILLEGAL_OPERATION, "recall handle is invalid")
            off = await call(
                await connect_to(plain.port),
                RequestCode.RECALL_MESSAGE,
                {"topic": TOPIC, "recallHandle": kept.recall_handle},
            )
            assert (off.code, off.remark) == (
                ResponseCode.NO_PERMISSION,
                "recall failed, operation is forbidden",
            )

        await cluster.kill_broker("broker-a")
        broker = await cluster.start_broker("broker-a", recallMessageEnable="true")
        conn = await connect_to(broker.port)

        async def delivered() -> list[bytes]:
            response = await call(conn, RequestCode.PULL_MESSAGE, pull_request(TOPIC, 0).ext_fields)
            return (
                [m.body for m in decode_records(response.body)]
                if response.code == ResponseCode.SUCCESS
                else []
            )

        async def kept_arrived() -> bool:
            return b"kept" in await delivered()

        await wait_until(kept_arrived, timeout=30)
        # Due 300 ms before the one delivered, the recalled message would be there first.
        assert await delivered() == [b"kept"]
    finally:
        await cluster.stop()


async def test_topic_attributes_are_kept_checked_and_survive_a_restart(
    tmp_path: Path, connect_to: ConnectTo
) -> None:
    """UPDATE_AND_CREATE_TOPIC's ``attributes`` (+add, -delete) change the topic's attribute map
    the way Apache 5.3.3's broker does; what it refuses is refused with its code and reason and
    changes nothing; the map is in GET_TOPIC_CONFIG, GET_ALL_TOPIC_CONFIG and topics.json."""
    cluster = Cluster(tmp_path)
    await cluster.start_namesrv()
    try:
        broker = await cluster.start_broker("broker-a")
        conn = await connect_to(broker.port)

        async def update(topic: str, attributes: str | None) -> RemotingCommand:
            fields = {"topic": topic, "readQueueNums": 2, "writeQueueNums": 2, "perm": 6}
            if attributes is not None:
                fields["attributes"] = attributes
            return await call(conn, RequestCode.UPDATE_AND_CREATE_TOPIC, fields)

        async def attributes(topic: str) -> dict[str, str]:
            answer = await call(conn, RequestCode.GET_TOPIC_CONFIG, {"topic": topic})
            assert answer.code == ResponseCode.SUCCESS, answer
            return json.loads(answer.body)["attributes"]

        assert (await update("Typed", "+message.type=FIFO,+queue.type=SimpleCQ")).code == ResponseCode.SUCCESS
        assert await attributes("Typed") == {"message.type": "FIFO", "queue.type": "SimpleCQ"}
        # an update without attributes keeps them; +/- change the changeable ones
        assert (await update("Typed", None)).code == ResponseCode.SUCCESS
        assert (await update("Typed", "+message.type=DELAY")).code == ResponseCode.SUCCESS
        assert await attributes("Typed") == {"message.type": "DELAY", "queue.type": "SimpleCQ"}
        refusals = [
            (
                "Typed",
                "+queue.type=BatchCQ",
                ResponseCode.SYSTEM_ERROR,
                "unchangeable attribute. key: queue.type",
            ),
            ("Typed", "-reserve.time", ResponseCode.SYSTEM_ERROR, "attempt to delete a nonexistent key"),
            (
                "Typed",
                "+message.type=MIXED",
                ResponseCode.INVALID_PARAMETER,
                "MIXED message type is not supported.",
            ),
            ("Typed", "message.type", ResponseCode.SYSTEM_ERROR, "delete attribute format is wrong"),
            ("Fresh", "-message.type", ResponseCode.SYSTEM_ERROR, "only add attribute is supported"),
            ("Fresh", "+colour=red", ResponseCode.SYSTEM_ERROR, "unsupported key: colour"),
            ("Fresh", "+cleanup.policy=COMPACTION", ResponseCode.SYSTEM_ERROR, "no compaction store"),
        ]
        for topic, change, code, reason in refusals:
            answer = await update(topic, change)
            assert (answer.code, reason in (answer.remark or "")) == (code, True), (change, answer)
        assert await attributes("Typed") == {"message.type": "DELAY", "queue.type": "SimpleCQ"}
        fresh = await call(conn, RequestCode.GET_TOPIC_CONFIG, {"topic": "Fresh"})
        assert fresh.code == ResponseCode.TOPIC_NOT_EXIST, "a refused creation created the topic"

        # the list form carries each topic's modification with its keys signed
        batch = CreateTopicListBody(
            topic_config_list=[TopicConfig(topic_name="Listed", attributes={"+message.type": "TRANSACTION"})]
        )
        assert (await call(conn, RequestCode.UPDATE_AND_CREATE_TOPIC_LIST, body=batch.encode())).code == 0
        assert await attributes("Listed") == {"message.type": "TRANSACTION"}
        assert (await update("Typed", "-message.type")).code == ResponseCode.SUCCESS

        await cluster.stop_broker("broker-a")
        broker = await cluster.start_broker("broker-a")
        conn = await connect_to(broker.port)
        table = json.loads((await call(conn, RequestCode.GET_ALL_TOPIC_CONFIG)).body)["topicConfigTable"]
        assert table["Typed"]["attributes"] == {"queue.type": "SimpleCQ"}
        assert table["Listed"]["attributes"] == {"message.type": "TRANSACTION"}
        assert table[TRANS_HALF_TOPIC]["attributes"] == {}
    finally:
        await cluster.stop()


async def test_cold_data_flow_control_slows_a_group_reading_far_behind(
    tmp_path: Path, connect_to: ConnectTo
) -> None:
    """With coldDataFlowControlEnable (and a broker that takes 1,024 bytes of RAM, so nearly
    everything is cold), a group that has read its threshold of cold bytes is slowed: a push
    consumer's next cold pull is refused with SYSTEM_BUSY, an active puller's is held and then
    answered with one message; the table says so, and a threshold set for the group lifts it."""
    cluster = Cluster(tmp_path)
    await cluster.start_namesrv()
    try:
        broker = await cluster.start_broker(
            "broker-a",
            coldDataFlowControlEnable="true",
            totalPhysicalMemory="1024",
            cgColdReadThreshold="1000",
        )
        conn = await connect_to(broker.port)
        await create_topic(conn, TOPIC, 1)
        for i in range(40):
            await send_ok(conn, TOPIC, b"%03d" % i + b"x" * 97)
        await heartbeat(conn, "pusher@1", "cold-push", {TOPIC: "*"})
        await heartbeat(
            conn, "puller@1", "cold-pull", {TOPIC: "*"}, consume_type=ConsumeType.CONSUME_ACTIVELY
        )

        async def pull_at(group: str, offset: int) -> RemotingCommand:
            request = pull_request(TOPIC, offset, group=group, subscription=None)
            return await call(conn, RequestCode.PULL_MESSAGE, request.ext_fields, timeout=15)

        for group in ("cold-push", "cold-pull"):
            first = await pull_at(group, 0)
            # all "in disk": maxTransferCountOnMessageInDisk (8) of them, 2.5 KB cold: over 1,000
            assert len(decode_records(first.body)) == 8, first
        refused = await pull_at("cold-push", 8)
        assert refused.code == ResponseCode.SYSTEM_BUSY, refused
        assert refused.remark == "This consumer group is reading cold data. It has been flow control"
        began = time.monotonic()
        held = await pull_at("cold-pull", 8)
        assert time.monotonic() - began >= 2.9, "an active puller's cold pull is held"
        assert [m.body[:3] for m in decode_records(held.body)] == [b"008"], "then answered with one"

        table = json.loads((await call(conn, RequestCode.GET_COLD_DATA_FLOW_CTR_INFO)).body)
        assert set(table["runtimeTable"]) == {"cold-push", "cold-pull"}
        assert table["runtimeTable"]["cold-push"]["coldAcc"] > 1000
        assert (table["cgColdReadThreshold"], table["configTable"]) == (1000, {})

        lifted = await call(conn, RequestCode.UPDATE_COLD_DATA_FLOW_CTR_CONFIG, body=b"cold-push=100000000\n")
        assert lifted.code == ResponseCode.SUCCESS
        assert len(decode_records((await pull_at("cold-push", 8)).body)) == 8
        removed = await call(conn, RequestCode.REMOVE_COLD_DATA_FLOW_CTR_CONFIG, body=b"cold-push")
        assert removed.code == ResponseCode.SUCCESS
        table = json.loads((await call(conn, RequestCode.GET_COLD_DATA_FLOW_CTR_INFO)).body)
        assert table["configTable"] == {}

        mode = await call(conn, RequestCode.SET_COMMITLOG_READ_MODE, {"READ_AHEAD_MODE": "1"})
        assert mode.code == ResponseCode.SUCCESS
        bad = await call(conn, RequestCode.SET_COMMITLOG_READ_MODE, {"READ_AHEAD_MODE": "7"})
        assert (bad.code, bad.remark) == (
            ResponseCode.INVALID_PARAMETER,
            "set commitlog readahead mode param value error",
        )
        assert broker.process is not None
        await broker.process.wait_for_line(r"commit-log read-ahead off on 1 file\(s\)")
    finally:
        await cluster.stop()
