"""Static topics (RocketMQ 5) on a real name server and two brokers: the mapping each broker
takes (UPDATE_AND_CREATE_STATIC_TOPIC), the route 5.x clients read it from, and requests on
global queues and logical offsets served on physical ones, across a remapping (the old item's
messages asked of the broker that holds them) and a restart."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from aiorocketmq.client import ConsumeFrom, ConsumeResult, Message, MessageExt, Producer, PushConsumer
from aiorocketmq.protocol.codes import RequestCode, ResponseCode
from aiorocketmq.protocol.command import RemotingCommand
from aiorocketmq.protocol.message import decode_records
from aiorocketmq.protocol.transport import Connection
from tests.cluster import Cluster

from .conftest import ConnectTo
from .requests import call, pull_request, send

TOPIC = "StaticOrders"
GROUP = "static-group"
EPOCH = 1_700_000_000_000


def item(bname: str, queue_id: int, *, gen: int = 0, logic: int = 0) -> str:
    return (
        f'{{"bname":"{bname}","endOffset":-1,"gen":{gen},"logicOffset":{logic},"queueId":{queue_id},'
        '"startOffset":0,"timeOfEnd":-1,"timeOfStart":-1}'
    )


def mapping(bname: str, hosted: dict[int, list[str]], epoch: int = EPOCH) -> bytes:
    """A mapping as Apache's tools write it: fastjson's bare integer keys."""
    queues = ",".join(f"{gid}:[{','.join(items)}]" for gid, items in sorted(hosted.items()))
    return (
        f'{{"bname":"{bname}","currIdMap":{{}},"dirty":false,"epoch":{epoch},"hostedQueues":{{{queues}}},'
        f'"scope":"__global__","topic":"{TOPIC}","totalQueues":4}}'
    ).encode()


async def create(conn: Connection, body: bytes, queues: int) -> RemotingCommand:
    fields = {"topic": TOPIC, "readQueueNums": queues, "writeQueueNums": queues, "perm": 6, "force": "false"}
    return await call(conn, RequestCode.UPDATE_AND_CREATE_STATIC_TOPIC, fields, body)


async def offset_call(conn: Connection, code: int, gid: int, **extra: Any) -> RemotingCommand:
    return await call(conn, code, {"topic": TOPIC, "queueId": gid, "consumerGroup": GROUP, **extra})


async def deal_four_queues(cluster: Cluster, connect_to: ConnectTo) -> tuple[Connection, Connection]:
    """Global 0 and 2 on broker-a's queues 0 and 1, global 1 and 3 on broker-b's."""
    a = await connect_to(cluster.brokers["broker-a"].port)
    b = await connect_to(cluster.brokers["broker-b"].port)
    assert (
        await create(a, mapping("broker-a", {0: [item("broker-a", 0)], 2: [item("broker-a", 1)]}), 2)
    ).code == 0
    assert (
        await create(b, mapping("broker-b", {1: [item("broker-b", 0)], 3: [item("broker-b", 1)]}), 2)
    ).code == 0
    return a, b


async def test_global_queues_are_served_on_physical_ones_across_a_remapping_and_a_restart(
    two_brokers: Cluster, connect_to: ConnectTo
) -> None:
    cluster = two_brokers
    a, b = await deal_four_queues(cluster, connect_to)

    ns = await connect_to(cluster.namesrv_ports[0])
    route = json.loads((await call(ns, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": TOPIC})).body)
    by_broker = route["topicQueueMappingByBroker"]
    assert {name: info["currIdMap"] for name, info in by_broker.items()} == {
        "broker-a": {"0": 0, "2": 1},
        "broker-b": {"1": 0, "3": 1},
    }
    assert {info["totalQueues"] for info in by_broker.values()} == {4}

    # a send names the global queue; the answer too, with the logical offset
    sent = await send(b, TOPIC, b"first", queue_id=3)
    assert sent.code == ResponseCode.SUCCESS, sent
    assert (sent.ext_fields["queueId"], sent.ext_fields["queueOffset"]) == ("3", "0")
    refused = await send(a, TOPIC, b"lost", queue_id=3)
    assert refused.code == ResponseCode.NOT_LEADER_FOR_QUEUE, refused
    assert "StaticOrders-3" in (refused.remark or "")
    physical = await call(
        b, RequestCode.PULL_MESSAGE, {**pull_request(TOPIC, 0, queue_id=1).ext_fields, "lo": "false"}
    )
    assert [m.body for m in decode_records(physical.body)] == [b"first"], "not stored in broker-b's queue 1"

    pulled = await call(b, RequestCode.PULL_MESSAGE, pull_request(TOPIC, 0, queue_id=3).ext_fields)
    assert pulled.code == ResponseCode.SUCCESS, pulled
    assert [m.body for m in decode_records(pulled.body)] == [b"first"]
    assert (pulled.ext_fields["nextBeginOffset"], pulled.ext_fields["offsetDelta"]) == ("1", "0")

    assert (await offset_call(b, RequestCode.UPDATE_CONSUMER_OFFSET, 3, commitOffset=1)).code == 0
    local = await offset_call(b, RequestCode.QUERY_CONSUMER_OFFSET, 1, lo="false")
    assert local.ext_fields["offset"] == "1", "the commit was not stored on the physical queue"
    assert (await offset_call(b, RequestCode.QUERY_CONSUMER_OFFSET, 3)).ext_fields["offset"] == "1"
    assert (await offset_call(b, RequestCode.GET_MAX_OFFSET, 3)).ext_fields["offset"] == "1"

    plain = json.loads((await call(b, RequestCode.GET_TOPIC_CONFIG, {"topic": TOPIC})).body)
    assert "mappingDetail" not in plain
    detailed = json.loads((await call(b, RequestCode.GET_TOPIC_CONFIG, {"topic": TOPIC, "lo": "true"})).body)
    assert detailed["mappingDetail"]["hostedQueues"]["3"][0]["queueId"] == 1
    assert detailed["writeQueueNums"] == 2

    # an older epoch is refused and changes nothing
    stale = await create(b, mapping("broker-b", {1: [item("broker-b", 0)]}, epoch=EPOCH - 1), 2)
    assert stale.code == ResponseCode.SYSTEM_ERROR and "small epoch" in (stale.remark or ""), stale

    # remap global 3 to broker-a's new queue 2; its history stays on broker-b
    moved = [item("broker-b", 1), item("broker-a", 2, gen=1, logic=10_000)]
    hosted_a = {0: [item("broker-a", 0)], 2: [item("broker-a", 1)], 3: moved}
    assert (await create(a, mapping("broker-a", hosted_a, EPOCH + 1000), 3)).code == 0
    assert (
        await create(b, mapping("broker-b", {1: [item("broker-b", 0)], 3: moved}, EPOCH + 1000), 2)
    ).code == 0
    assert (await send(b, TOPIC, b"late", queue_id=3)).code == ResponseCode.NOT_LEADER_FOR_QUEUE
    second = await send(a, TOPIC, b"second", queue_id=3)
    assert (second.ext_fields["queueId"], second.ext_fields["queueOffset"]) == ("3", "10000")

    async def pull_global(offset: int) -> RemotingCommand:
        return await call(a, RequestCode.PULL_MESSAGE, pull_request(TOPIC, offset, queue_id=3).ext_fields)

    old = await pull_global(0)  # held by broker-b: asked of it
    assert [m.body for m in decode_records(old.body)] == [b"first"], old
    past = await pull_global(1)  # the end of broker-b's part: on to broker-a's
    assert past.code == ResponseCode.PULL_RETRY_IMMEDIATELY, past
    assert past.ext_fields["nextBeginOffset"] == "10000"
    new = await pull_global(10_000)
    assert [m.body for m in decode_records(new.body)] == [b"second"]
    assert (new.ext_fields["nextBeginOffset"], new.ext_fields["offsetDelta"]) == ("10001", "10000")
    assert (await offset_call(a, RequestCode.GET_MAX_OFFSET, 3)).ext_fields["offset"] == "10001"
    assert (await offset_call(a, RequestCode.GET_MIN_OFFSET, 3)).ext_fields["offset"] == "0"
    # a commit on the old part is stored by broker-b, on the new part by broker-a
    queried = await offset_call(a, RequestCode.QUERY_CONSUMER_OFFSET, 3)
    assert queried.ext_fields.get("offset") == "1", queried
    assert (await offset_call(a, RequestCode.UPDATE_CONSUMER_OFFSET, 3, commitOffset=10_001)).code == 0
    assert (await offset_call(a, RequestCode.QUERY_CONSUMER_OFFSET, 2, lo="false")).ext_fields[
        "offset"
    ] == "1"

    await cluster.stop_broker("broker-a")
    await cluster.start_broker("broker-a")
    a = await connect_to(cluster.brokers["broker-a"].port)
    again = await call(a, RequestCode.PULL_MESSAGE, pull_request(TOPIC, 10_000, queue_id=3).ext_fields)
    assert [m.body for m in decode_records(again.body)] == [b"second"], (
        "the mapping did not survive a restart"
    )
    assert (await offset_call(a, RequestCode.QUERY_CONSUMER_OFFSET, 3)).ext_fields["offset"] == "10001"
    route = json.loads((await call(ns, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": TOPIC})).body)
    assert route["topicQueueMappingByBroker"]["broker-a"]["currIdMap"] == {"0": 0, "2": 1, "3": 2}


async def test_the_sdk_sends_to_and_consumes_global_queues(
    two_brokers: Cluster, connect_to: ConnectTo
) -> None:
    """Our producer routes a static topic by its mappings (global queues on their leaders) and
    a push consumer reads every message back once, with the global queue and logical offset
    its send was answered with."""
    cluster = two_brokers
    await deal_four_queues(cluster, connect_to)
    sent: dict[str, tuple[str, int, int]] = {}
    async with Producer("static-producer", namesrv=cluster.namesrv_addr) as producer:
        for i in range(20):
            result = await producer.send(Message(TOPIC, f"m{i}".encode()))
            queue = result.queue
            sent[result.msg_id] = (queue.broker_name, queue.queue_id, result.queue_offset)
    assert {(broker, gid) for broker, gid, _ in sent.values()} == {
        ("broker-a", 0),
        ("broker-b", 1),
        ("broker-a", 2),
        ("broker-b", 3),
    }
    received: dict[str, tuple[str, int, int]] = {}
    done = asyncio.Event()
    consumer = PushConsumer(GROUP, namesrv=cluster.namesrv_addr, consume_from=ConsumeFrom.FIRST_OFFSET)
    consumer.subscribe(TOPIC, "*")

    @consumer.listener
    async def handle(messages: list[MessageExt]) -> ConsumeResult:
        for msg in messages:
            received[msg.msg_id] = (msg.broker_name, msg.queue_id, msg.queue_offset)
        if len(received) >= len(sent):
            done.set()
        return ConsumeResult.SUCCESS

    async with consumer:
        await asyncio.wait_for(done.wait(), 30)
    assert received == sent
