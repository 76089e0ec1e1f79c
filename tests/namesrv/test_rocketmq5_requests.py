"""The request codes Apache RocketMQ 5's name server serves beyond 4.x's, over TCP to a real
process: REGISTER_TOPIC_IN_NAMESRV, GET_SYSTEM_TOPIC_LIST_FROM_NS, the unit topic lists,
GET_BROKER_MEMBER_GROUP and BROKER_HEARTBEAT, answered as Apache 5.3.3 answers them."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from aiorocketmq.protocol.body import ClusterInfo, GetBrokerMemberGroupResponseBody, TopicList
from aiorocketmq.protocol.codes import RequestCode, ResponseCode, TopicSysFlag
from aiorocketmq.protocol.command import RemotingCommand
from aiorocketmq.protocol.transport import Connection
from tests.broker.requests import JSON, ROCKETMQ
from tests.namesrv.conftest import Connect, StartNamesrv
from tests.namesrv.fake_broker import FakeBroker, broker_names, call, eventually, route

SERIALIZATIONS = [pytest.param(JSON, id="json"), pytest.param(ROCKETMQ, id="rocketmq")]

UNIT = int(TopicSysFlag.UNIT)
UNIT_SUB = int(TopicSysFlag.UNIT_SUB)


async def topic_list(conn: Connection, code: int, *, serialize_type: int = JSON) -> list[str]:
    response = await call(conn, code, serialize_type=serialize_type)
    assert response.code == ResponseCode.SUCCESS, response
    assert response.remark is None
    return TopicList.decode(response.body).topic_list


@pytest.mark.parametrize("st", SERIALIZATIONS)
async def test_unit_topic_lists_follow_the_topic_sys_flags(
    start_namesrv: StartNamesrv, connect_to: Connect, st: int
) -> None:
    ns = await start_namesrv()
    a = FakeBroker(
        await connect_to(ns),
        "c1",
        "broker-a",
        "10.0.0.1:10911",
        topics={"Plain": 4, "Unit": 4, "UnitSub": 4, "Both": 4},
        sys_flags={"Unit": UNIT, "UnitSub": UNIT_SUB, "Both": UNIT | UNIT_SUB},
        serialize_type=st,
    )
    b = FakeBroker(
        await connect_to(ns),
        "c2",
        "broker-b",
        "10.0.0.2:10911",
        topics={"Plain": 4, "UnitSubB": 2, "UnitB": 2},
        sys_flags={"UnitSubB": UNIT_SUB, "UnitB": UNIT},
        serialize_type=st,
    )
    for broker in (a, b):
        assert (await broker.register()).code == ResponseCode.SUCCESS
    client = await connect_to(ns)

    unit = await topic_list(client, RequestCode.GET_UNIT_TOPIC_LIST, serialize_type=st)
    assert sorted(unit) == ["Both", "Unit", "UnitB"]
    unit_sub = await topic_list(client, RequestCode.GET_HAS_UNIT_SUB_TOPIC_LIST, serialize_type=st)
    assert sorted(unit_sub) == ["Both", "UnitSub", "UnitSubB"]
    unit_sub_only = await topic_list(
        client, RequestCode.GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST, serialize_type=st
    )
    assert sorted(unit_sub_only) == ["UnitSub", "UnitSubB"]

    # Apache's TopicList shape: no brokerAddr on these lists
    response = await call(client, RequestCode.GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST, serialize_type=st)
    assert response.body == b'{"topicList":["UnitSub","UnitSubB"]}'

    # a broker name leaving takes its topics off the lists
    assert (await b.unregister()).code == ResponseCode.SUCCESS
    assert await topic_list(client, RequestCode.GET_UNIT_TOPIC_LIST) == ["Both", "Unit"]
    assert await topic_list(client, RequestCode.GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST) == ["UnitSub"]


async def test_topic_lists_answer_disable_when_enable_topic_list_is_off(
    start_namesrv: StartNamesrv, connect_to: Connect
) -> None:
    ns = await start_namesrv(config={"enableTopicList": "false"})
    broker = FakeBroker(
        await connect_to(ns), "c1", "broker-a", "10.0.0.1:10911", topics={"U": 4}, sys_flags={"U": UNIT}
    )
    assert (await broker.register()).code == ResponseCode.SUCCESS
    client = await connect_to(ns)
    for code, fields in [
        (RequestCode.GET_UNIT_TOPIC_LIST, {}),
        (RequestCode.GET_HAS_UNIT_SUB_TOPIC_LIST, {}),
        (RequestCode.GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST, {}),
        (RequestCode.GET_TOPICS_BY_CLUSTER, {"cluster": "c1"}),
    ]:
        response = await call(client, code, fields)
        assert (response.code, response.remark, response.body) == (ResponseCode.SYSTEM_ERROR, "disable", b"")
    # the system topic list is not one of them, in Apache either
    assert "c1" in await topic_list(client, RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS)


@pytest.mark.parametrize("st", SERIALIZATIONS)
async def test_system_topic_list_names_clusters_and_broker_names(
    start_namesrv: StartNamesrv, connect_to: Connect, st: int
) -> None:
    ns = await start_namesrv()
    client = await connect_to(ns)

    empty = await call(client, RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS, serialize_type=st)
    assert (empty.code, empty.remark, empty.body) == (ResponseCode.SUCCESS, None, b'{"topicList":[]}')

    brokers = [
        FakeBroker(await connect_to(ns), "c1", "broker-a", "10.0.0.11:10911", 1, topics={"T": 4}),
        FakeBroker(await connect_to(ns), "c1", "broker-a", "10.0.0.1:10911", topics={"T": 4}),
        FakeBroker(await connect_to(ns), "c1", "broker-b", "10.0.0.2:10911", topics={"T": 4}),
        FakeBroker(await connect_to(ns), "c2", "broker-c", "10.0.0.3:10911"),
    ]
    for broker in brokers:
        assert (await broker.register()).code == ResponseCode.SUCCESS

    response = await call(client, RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS, serialize_type=st)
    assert response.code == ResponseCode.SUCCESS and response.remark is None
    found = TopicList.decode(response.body)
    assert sorted(found.topic_list) == ["broker-a", "broker-b", "broker-c", "c1", "c2"]
    # one broker to ask for the brokers' own system topics: the lowest id of a broker name
    assert found.broker_addr == "10.0.0.1:10911"
    assert b'"brokerAddr":"10.0.0.1:10911"' in response.body
    assert "T" not in found.topic_list  # topics are not system topics

    # broker names and clusters that leave leave the list
    assert (await brokers[3].unregister()).code == ResponseCode.SUCCESS
    remaining = await topic_list(client, RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS)
    assert sorted(remaining) == ["broker-a", "broker-b", "c1"]


@pytest.mark.parametrize("st", SERIALIZATIONS)
async def test_broker_member_group_lists_the_addresses_of_a_broker_name(
    start_namesrv: StartNamesrv, connect_to: Connect, st: int
) -> None:
    ns = await start_namesrv()
    master = FakeBroker(await connect_to(ns), "c1", "broker-a", "10.0.0.1:10911", topics={"T": 4})
    slave = FakeBroker(await connect_to(ns), "c1", "broker-a", "10.0.0.11:10911", 1, topics={"T": 4})
    other = FakeBroker(await connect_to(ns), "c1", "broker-b", "10.0.0.2:10911", topics={"T": 4})
    for broker in (master, slave, other):
        assert (await broker.register()).code == ResponseCode.SUCCESS
    client = await connect_to(ns)

    async def member_group(cluster: str, broker_name: str) -> RemotingCommand:
        response = await call(
            client,
            RequestCode.GET_BROKER_MEMBER_GROUP,
            {"clusterName": cluster, "brokerName": broker_name},
            serialize_type=st,
        )
        assert response.code == ResponseCode.SUCCESS and response.remark is None
        return response

    response = await member_group("c1", "broker-a")
    # fastjson's shape: the group wrapped in brokerMemberGroup, broker-id keys unquoted
    assert response.body == (
        b'{"brokerMemberGroup":{"brokerAddrs":{0:"10.0.0.1:10911",1:"10.0.0.11:10911"},'
        b'"brokerName":"broker-a","cluster":"c1"}}'
    )
    group = GetBrokerMemberGroupResponseBody.decode(response.body).broker_member_group
    assert group is not None
    assert (group.cluster, group.broker_name) == ("c1", "broker-a")
    assert group.broker_addrs == {0: "10.0.0.1:10911", 1: "10.0.0.11:10911"}

    # an unknown broker name: the request echoed with no addresses, as Apache answers
    response = await member_group("c1", "broker-x")
    assert response.body == b'{"brokerMemberGroup":{"brokerAddrs":{},"brokerName":"broker-x","cluster":"c1"}}'

    # the slave leaves the group
    assert (await slave.unregister()).code == ResponseCode.SUCCESS
    group = GetBrokerMemberGroupResponseBody.decode(
        (await member_group("c1", "broker-a")).body
    ).broker_member_group
    assert group is not None and group.broker_addrs == {0: "10.0.0.1:10911"}

    missing = await call(
        client, RequestCode.GET_BROKER_MEMBER_GROUP, {"clusterName": "c1"}, serialize_type=st
    )
    assert missing.code == ResponseCode.SYSTEM_ERROR
    assert missing.remark is not None and "brokerName" in missing.remark


def queue_data(broker_name: str, queues: int, *, perm: int = 6, sys_flag: int = 0) -> dict[str, Any]:
    return {
        "brokerName": broker_name,
        "perm": perm,
        "readQueueNums": queues,
        "topicSysFlag": sys_flag,
        "writeQueueNums": queues,
    }


def route_body(*queue_datas: dict[str, Any]) -> bytes:
    """A TopicRouteData as a 5.x broker's registerSingleTopicAll writes it (fastjson)."""
    wire = {"brokerDatas": [], "filterServerTable": {}, "queueDatas": list(queue_datas)}
    return json.dumps(wire, separators=(",", ":")).encode()


@pytest.mark.parametrize("st", SERIALIZATIONS)
async def test_register_topic_makes_a_topic_routable(
    start_namesrv: StartNamesrv, connect_to: Connect, st: int
) -> None:
    ns = await start_namesrv()
    a = FakeBroker(await connect_to(ns), "c1", "broker-a", "10.0.0.1:10911", topics={"T": 4})
    b = FakeBroker(await connect_to(ns), "c1", "broker-b", "10.0.0.2:10911", topics={"T": 4})
    for broker in (a, b):
        assert (await broker.register()).code == ResponseCode.SUCCESS
    client = await connect_to(ns)
    assert await route(client, "New") is None

    async def register_topic(topic: str, body: bytes) -> None:
        response = await call(
            a.conn, RequestCode.REGISTER_TOPIC_IN_NAMESRV, {"topic": topic}, body, serialize_type=st
        )
        assert (response.code, response.remark, response.body) == (ResponseCode.SUCCESS, None, b"")

    await register_topic("New", route_body(queue_data("broker-a", 3, perm=4, sys_flag=UNIT)))
    found = await route(client, "New")
    assert found is not None
    assert [
        (q.broker_name, q.read_queue_nums, q.write_queue_nums, q.perm, q.topic_sys_flag)
        for q in found.queue_datas
    ] == [("broker-a", 3, 3, 4, UNIT)]
    assert [(d.broker_name, d.broker_addrs) for d in found.broker_datas] == [
        ("broker-a", {0: "10.0.0.1:10911"})
    ]
    assert "New" in await topic_list(client, RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
    assert "New" in await topic_list(client, RequestCode.GET_UNIT_TOPIC_LIST)

    # a second broker name joins the route; the first keeps its queues
    await register_topic("New", route_body(queue_data("broker-b", 8)))
    found = await route(client, "New")
    assert found is not None
    assert {q.broker_name: q.write_queue_nums for q in found.queue_datas} == {"broker-a": 3, "broker-b": 8}

    # Apache answers SUCCESS but registers nothing when a queue data names no registered broker,
    # when the body has no queue data, or has no body at all
    await register_topic("Ghost", route_body(queue_data("broker-a", 2), queue_data("broker-x", 2)))
    await register_topic("Ghost", route_body())
    await register_topic("Ghost", b"")
    assert await route(client, "Ghost") is None
    await register_topic("New", route_body(queue_data("broker-x", 2)))
    assert await broker_names(client, "New") == {"broker-a", "broker-b"}

    # the registered route leaves with its broker name, as a registration's does
    assert (await b.unregister()).code == ResponseCode.SUCCESS
    assert await broker_names(client, "New") == {"broker-a"}

    bad = await call(a.conn, RequestCode.REGISTER_TOPIC_IN_NAMESRV, {}, route_body(queue_data("broker-a", 1)))
    assert bad.code == ResponseCode.SYSTEM_ERROR and bad.remark is not None and "topic" in bad.remark


async def test_broker_heartbeat_keeps_a_registration_alive(
    start_namesrv: StartNamesrv, connect_to: Connect
) -> None:
    expiry = 1.5
    ns = await start_namesrv(
        config={"brokerChannelExpiredTime": "1500", "scanNotActiveBrokerInterval": "100"}
    )
    beating = FakeBroker(await connect_to(ns), "c1", "broker-a", "10.0.0.1:10911", topics={"T": 4})
    # registered after the beating broker, so it expires no earlier than that one would
    silent = FakeBroker(await connect_to(ns), "c1", "broker-b", "10.0.0.2:10911", topics={"T": 4})
    # heartbeats naming a cluster it did not register in do not count (Apache keys by both)
    misnamed = FakeBroker(await connect_to(ns), "c2", "broker-c", "10.0.0.3:10911", topics={"T": 4})
    for broker in (beating, silent, misnamed):
        assert (await broker.register()).code == ResponseCode.SUCCESS
    client = await connect_to(ns)
    assert await broker_names(client, "T") == {"broker-a", "broker-b", "broker-c"}

    def heartbeat(broker: FakeBroker, cluster: str | None = None) -> RemotingCommand:
        fields = {
            "clusterName": cluster or broker.cluster,
            "brokerAddr": broker.addr,
            "brokerName": broker.name,
            "brokerId": broker.broker_id,
        }
        return RemotingCommand.request(RequestCode.BROKER_HEARTBEAT, fields)

    answer = await beating.conn.request(heartbeat(beating), timeout=5)
    assert (answer.code, answer.remark, answer.body) == (ResponseCode.SUCCESS, None, b"")
    assert not answer.ext_fields

    async def keep_beating() -> None:
        # as 5.x brokers send it: oneway, every brokerHeartbeatInterval
        while True:
            beating.conn.send_oneway(heartbeat(beating))
            if not misnamed.conn.closed:  # the name server closes an expired broker's channel
                misnamed.conn.send_oneway(heartbeat(misnamed, cluster="c1"))
            await asyncio.sleep(0.2)

    async def only(names: set[str]) -> bool:
        info = ClusterInfo.decode((await call(client, RequestCode.GET_BROKER_CLUSTER_INFO)).body)
        return set(info.broker_addr_table) == names

    task = asyncio.ensure_future(keep_beating())
    try:
        # once the later-registered silent broker has expired, the beating one would have too
        await eventually(lambda: only({"broker-a"}), timeout=expiry + 3)
        assert await broker_names(client, "T") == {"broker-a"}
        assert task.done() is False
        # as Apache does, the expired brokers' channels are closed; the beating one's is not
        await asyncio.wait_for(misnamed.conn.wait_closed(), timeout=3)
        await asyncio.wait_for(silent.conn.wait_closed(), timeout=3)
        assert not beating.conn.closed
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    # without heartbeats the same expiry applies to it
    await eventually(lambda: only(set()), timeout=expiry + 3)
    await ns.wait_for_line(r"broker 10\.0\.0\.1:10911 expired", timeout=3)


#: Every request code Apache RocketMQ 5.3.3's name server serves (DefaultRequestProcessor's cases
#: and ClientRequestProcessor's GET_ROUTEINFO_BY_TOPIC).
APACHE_NAMESRV_CODES = (
    100, 101, 102, 103, 104, 105, 106, 205, 206, 216, 217, 219, 224, 304, 311, 312, 313, 318, 319, 322, 327, 901, 904,
)  # fmt: skip


async def test_every_code_apaches_name_server_serves_is_served(
    start_namesrv: StartNamesrv, connect_to: Connect
) -> None:
    """Sent with an empty header and body, none is answered REQUEST_CODE_NOT_SUPPORTED (a bad
    request gets its own error)."""
    client = await connect_to(await start_namesrv())
    unsupported = []
    for code in APACHE_NAMESRV_CODES:
        response = await client.request(RemotingCommand.request(code, {}), 10)
        if response.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
            unsupported.append(code)
    assert unsupported == []
