"""The name server as real clients and brokers see it: a real process, requests over TCP."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest

from aiorocketmq.protocol.body import ClusterInfo, DataVersion, KVTable, TopicList
from aiorocketmq.protocol.codes import RequestCode, ResponseCode
from aiorocketmq.protocol.command import RemotingCommand, decode_frame
from aiorocketmq.protocol.transport import Connection
from tests.broker.requests import JSON, ROCKETMQ
from tests.namesrv.conftest import Connect, StartNamesrv
from tests.namesrv.fake_broker import (
    FakeBroker,
    broker_names,
    call,
    eventually,
    route,
)
from tests.support import held_port

SERIALIZATIONS = [pytest.param(JSON, id="json"), pytest.param(ROCKETMQ, id="rocketmq")]


@pytest.mark.parametrize("st", SERIALIZATIONS)
async def test_brokers_of_two_clusters_register_and_routes_merge(
    start_namesrv: StartNamesrv, connect_to: Connect, st: int
) -> None:
    ns = await start_namesrv()
    a = FakeBroker(
        await connect_to(ns),
        "c1",
        "broker-a",
        "10.0.0.1:10911",
        topics={"T": 4, "OnlyA": 2},
        serialize_type=st,
    )
    a_slave = FakeBroker(
        await connect_to(ns), "c1", "broker-a", "10.0.0.11:10911", 1, topics={"T": 4}, serialize_type=st
    )
    b = FakeBroker(
        await connect_to(ns), "c2", "broker-b", "10.0.0.2:10911", topics={"T": 8}, serialize_type=st
    )
    for broker in (a, a_slave, b):
        response = await broker.register()
        assert response.code == ResponseCode.SUCCESS, response
        assert response.body == b""  # no ORDER_TOPIC_CONFIG entries yet
    client = await connect_to(ns)

    found = await route(client, "T", serialize_type=st)
    assert found is not None
    assert [(q.broker_name, q.read_queue_nums, q.write_queue_nums, q.perm) for q in found.queue_datas] == [
        ("broker-a", 4, 4, 6),
        ("broker-b", 8, 8, 6),
    ]
    assert [(d.broker_name, d.cluster, d.broker_addrs) for d in found.broker_datas] == [
        ("broker-a", "c1", {0: "10.0.0.1:10911", 1: "10.0.0.11:10911"}),
        ("broker-b", "c2", {0: "10.0.0.2:10911"}),
    ]
    assert found.filter_server_table == {}
    only_a = await route(client, "OnlyA", serialize_type=st)
    assert only_a is not None and [q.broker_name for q in only_a.queue_datas] == ["broker-a"]

    response = await call(client, RequestCode.GET_BROKER_CLUSTER_INFO, serialize_type=st)
    assert response.code == ResponseCode.SUCCESS
    assert b'"brokerAddrs":{0:"10.0.0.1:10911",1:"10.0.0.11:10911"}' in response.body  # legacy keys, always
    info = ClusterInfo.decode(response.body)
    assert info.cluster_addr_table == {"c1": ["broker-a"], "c2": ["broker-b"]}
    assert info.broker_addr_table["broker-b"].broker_addrs == {0: "10.0.0.2:10911"}

    response = await call(client, RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, serialize_type=st)
    assert sorted(TopicList.decode(response.body).topic_list) == ["OnlyA", "T"]
    response = await call(client, RequestCode.GET_TOPICS_BY_CLUSTER, {"cluster": "c2"}, serialize_type=st)
    assert TopicList.decode(response.body).topic_list == ["T"]
    response = await call(client, RequestCode.GET_TOPICS_BY_CLUSTER, {"cluster": "c1"}, serialize_type=st)
    assert TopicList.decode(response.body).topic_list == ["OnlyA", "T"]

    # a broker leaving on purpose takes its queue data along
    assert (await a.unregister()).code == ResponseCode.SUCCESS
    assert (await a_slave.unregister()).code == ResponseCode.SUCCESS
    assert await broker_names(client, "T") == {"broker-b"}
    assert await route(client, "OnlyA") is None


async def test_route_json_matches_what_real_clients_parse(
    start_namesrv: StartNamesrv, connect_to: Connect
) -> None:
    ns = await start_namesrv()
    broker = FakeBroker(
        await connect_to(ns), "DefaultCluster", "broker-a", "10.0.0.1:10911", topics={"TopicTest": 4}
    )
    assert (await broker.register()).code == ResponseCode.SUCCESS
    client = await connect_to(ns)
    legacy = (
        b'{"brokerDatas":[{"brokerAddrs":{0:"10.0.0.1:10911"},"brokerName":"broker-a","cluster":"DefaultCluster"}],'
        b'"filterServerTable":{},'
        b'"queueDatas":[{"brokerName":"broker-a","perm":6,"readQueueNums":4,"topicSysFlag":0,"writeQueueNums":4}]}'
    )
    standard = legacy.replace(b"{0:", b'{"0":')
    cases: list[tuple[int, dict[str, Any], bytes]] = [
        (63, {}, legacy),  # C++ 1.2.x
        (121, {}, legacy),  # ali-ons
        (317, {}, legacy),  # Go v2: ParseInt on the raw key
        (401, {}, standard),  # V4_9_4 and later ask for standard JSON by version
        (407, {}, standard),
        (317, {"acceptStandardJsonOnly": "true"}, standard),
        (317, {"acceptStandardJsonOnly": True}, standard),
        (317, {"acceptStandardJsonOnly": "false"}, legacy),
    ]
    for version, extra, expected in cases:
        response = await call(
            client, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TopicTest", **extra}, version=version
        )
        assert response.code == ResponseCode.SUCCESS
        assert response.body == expected, (version, extra)


@pytest.mark.parametrize("st", SERIALIZATIONS)
async def test_unknown_topic_is_topic_not_exist(
    start_namesrv: StartNamesrv, connect_to: Connect, st: int
) -> None:
    ns = await start_namesrv()
    client = await connect_to(ns)
    response = await call(client, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Nowhere"}, serialize_type=st)
    assert response.code == ResponseCode.TOPIC_NOT_EXIST
    assert response.remark is not None
    assert response.remark.startswith("No topic route info in name server for the topic: Nowhere")
    assert response.body == b""


async def test_silent_broker_expires_while_heartbeating_ones_stay(
    start_namesrv: StartNamesrv, connect_to: Connect
) -> None:
    expiry = 1.5
    ns = await start_namesrv(
        config={"brokerChannelExpiredTime": "1500", "scanNotActiveBrokerInterval": "200"}
    )
    silent = FakeBroker(await connect_to(ns), "c1", "broker-a", "10.0.0.1:10911", topics={"T": 4})
    registering = FakeBroker(await connect_to(ns), "c1", "broker-b", "10.0.0.2:10911", topics={"T": 4})
    # a broker with forceRegister=false keeps itself alive with QUERY_DATA_VERSION alone
    querying = FakeBroker(await connect_to(ns), "c2", "broker-c", "10.0.0.3:10911", topics={"T": 4})
    for broker in (silent, registering, querying):
        assert (await broker.register()).code == ResponseCode.SUCCESS
    registered_at = time.monotonic()
    client = await connect_to(ns)
    assert await broker_names(client, "T") == {"broker-a", "broker-b", "broker-c"}

    async def heartbeat() -> None:
        while True:
            await asyncio.sleep(0.3)
            assert (await registering.register()).code == ResponseCode.SUCCESS
            response = await call(
                querying.conn,
                RequestCode.QUERY_DATA_VERSION,
                querying.header(),
                querying.data_version().encode(),
            )
            assert response.code == ResponseCode.SUCCESS
            assert response.ext_fields["changed"] == "false"
            assert DataVersion.decode(response.body) == querying.data_version()

    beating = asyncio.ensure_future(heartbeat())
    try:
        await eventually(lambda: _lacks(client, "T", "broker-a"), timeout=expiry + 3)
        gone_after = time.monotonic() - registered_at
        # not before its expiry (allowing for the time the registration took to come back)
        assert gone_after >= expiry - 0.2, gone_after
        assert await broker_names(client, "T") == {"broker-b", "broker-c"}
        # the silent broker's connection is closed by the name server, so it would reconnect
        await asyncio.wait_for(silent.conn.wait_closed(), 3)
        await ns.wait_for_line(r"broker 10\.0\.0\.1:10911 expired", timeout=3)
        assert beating.done() is False  # the others kept registering without error
    finally:
        beating.cancel()
        await asyncio.gather(beating, return_exceptions=True)
    assert await broker_names(client, "T") == {"broker-b", "broker-c"}


async def _lacks(client: Connection, topic: str, broker: str) -> bool:
    return broker not in await broker_names(client, topic)


async def test_closed_connection_removes_its_broker_at_once(
    start_namesrv: StartNamesrv, connect_to: Connect
) -> None:
    ns = await start_namesrv()  # default 120 s expiry: only the closed connection can explain removal
    leaving = FakeBroker(
        await connect_to(ns), "c1", "broker-a", "10.0.0.1:10911", topics={"T": 4, "OnlyA": 1}
    )
    staying = FakeBroker(await connect_to(ns), "c1", "broker-b", "10.0.0.2:10911", topics={"T": 4})
    assert (await leaving.register()).code == ResponseCode.SUCCESS
    assert (await staying.register()).code == ResponseCode.SUCCESS
    client = await connect_to(ns)
    assert await broker_names(client, "T") == {"broker-a", "broker-b"}
    leaving.conn.close()
    await leaving.conn.wait_closed()
    await eventually(lambda: _lacks(client, "T", "broker-a"), timeout=2)
    assert await route(client, "OnlyA") is None
    response = await call(client, RequestCode.GET_BROKER_CLUSTER_INFO)
    assert ClusterInfo.decode(response.body).cluster_addr_table == {"c1": ["broker-b"]}


@pytest.mark.parametrize("st", SERIALIZATIONS)
async def test_kv_config_survives_a_restart(
    start_namesrv: StartNamesrv, connect_to: Connect, tmp_path: Path, st: int
) -> None:
    store = tmp_path / "data"
    ns = await start_namesrv(store_dir=store)
    conn = await connect_to(ns)
    for key, value in (("k1", "v1"), ("k2", "v2")):
        put = await call(
            conn,
            RequestCode.PUT_KV_CONFIG,
            {"namespace": "ns", "key": key, "value": value},
            serialize_type=st,
        )
        assert put.code == ResponseCode.SUCCESS, put
    got = await call(conn, RequestCode.GET_KV_CONFIG, {"namespace": "ns", "key": "k1"}, serialize_type=st)
    assert got.code == ResponseCode.SUCCESS and got.ext_fields == {"value": "v1"}
    # acknowledged means on disk, in Java's file format
    saved = json.loads((store / "kvConfig.json").read_text())
    assert saved == {"configTable": {"ns": {"k1": "v1", "k2": "v2"}}}
    assert await ns.stop() == 0
    assert "stopped" in ns.output

    ns2 = await start_namesrv(store_dir=store)
    conn2 = await connect_to(ns2)
    got = await call(conn2, RequestCode.GET_KV_CONFIG, {"namespace": "ns", "key": "k2"}, serialize_type=st)
    assert got.code == ResponseCode.SUCCESS and got.ext_fields == {"value": "v2"}
    listed = await call(conn2, RequestCode.GET_KVLIST_BY_NAMESPACE, {"namespace": "ns"}, serialize_type=st)
    assert KVTable.decode(listed.body).table == {"k1": "v1", "k2": "v2"}
    deleted = await call(
        conn2, RequestCode.DELETE_KV_CONFIG, {"namespace": "ns", "key": "k1"}, serialize_type=st
    )
    assert deleted.code == ResponseCode.SUCCESS
    missing = await call(
        conn2, RequestCode.GET_KV_CONFIG, {"namespace": "ns", "key": "k1"}, serialize_type=st
    )
    assert missing.code == ResponseCode.QUERY_NOT_FOUND
    assert missing.remark == "No config item, Namespace: ns Key: k1"
    empty = await call(conn2, RequestCode.GET_KVLIST_BY_NAMESPACE, {"namespace": "none"}, serialize_type=st)
    assert empty.code == ResponseCode.QUERY_NOT_FOUND
    assert empty.remark == "No config item, Namespace: none"


@pytest.mark.parametrize(
    "bad", [pytest.param(b"", id="empty"), pytest.param(b'{"configTable":{"ns"', id="torn")]
)
async def test_corrupt_kv_config_falls_back_to_backup(
    start_namesrv: StartNamesrv, connect_to: Connect, tmp_path: Path, bad: bytes
) -> None:
    store = tmp_path / "data"
    ns = await start_namesrv(store_dir=store)
    conn = await connect_to(ns)
    for value in ("first", "second"):
        put = await call(conn, RequestCode.PUT_KV_CONFIG, {"namespace": "ns", "key": "k", "value": value})
        assert put.code == ResponseCode.SUCCESS
    assert await ns.stop() == 0
    (store / "kvConfig.json").write_bytes(bad)

    ns2 = await start_namesrv(store_dir=store)
    await ns2.wait_for_line(r"WARNING .*kvConfig\.json is unusable .*loaded 1 namespaces from backup")
    conn2 = await connect_to(ns2)
    got = await call(conn2, RequestCode.GET_KV_CONFIG, {"namespace": "ns", "key": "k"})
    assert got.ext_fields == {"value": "first"}  # the backup is the state before the last write
    assert (store / "kvConfig.json.corrupt").read_bytes() == bad
    # and it goes on serving and writing
    put = await call(conn2, RequestCode.PUT_KV_CONFIG, {"namespace": "ns", "key": "k", "value": "third"})
    assert put.code == ResponseCode.SUCCESS
    assert json.loads((store / "kvConfig.json").read_text()) == {"configTable": {"ns": {"k": "third"}}}


@pytest.mark.parametrize("enabled", [True, False])
async def test_order_topic_conf(start_namesrv: StartNamesrv, connect_to: Connect, enabled: bool) -> None:
    ns = await start_namesrv(config={"orderMessageEnable": str(enabled).lower()})
    admin = await connect_to(ns)
    put = await call(
        admin,
        RequestCode.PUT_KV_CONFIG,
        {"namespace": "ORDER_TOPIC_CONFIG", "key": "T", "value": "broker-a:4"},
    )
    assert put.code == ResponseCode.SUCCESS
    broker = FakeBroker(await connect_to(ns), "c1", "broker-a", "10.0.0.1:10911", topics={"T": 4, "U": 4})
    registered = await broker.register()
    # brokers always get the ordered-topic table back
    assert KVTable.decode(registered.body).table == {"T": "broker-a:4"}

    response = await call(admin, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"})
    found = await route(admin, "T")
    assert found is not None
    if enabled:
        assert found.order_topic_conf == "broker-a:4"
        assert b'"orderTopicConf":"broker-a:4","queueDatas"' in response.body
    else:
        assert found.order_topic_conf is None
        assert b"orderTopicConf" not in response.body
    other = await call(admin, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "U"})
    assert other.code == ResponseCode.SUCCESS and b"orderTopicConf" not in other.body


@pytest.mark.parametrize("st", SERIALIZATIONS)
async def test_compressed_registration_and_crc_check(
    start_namesrv: StartNamesrv, connect_to: Connect, st: int
) -> None:
    ns = await start_namesrv()
    client = await connect_to(ns)
    broker = FakeBroker(
        await connect_to(ns), "c1", "broker-a", "10.0.0.1:10911", topics={"T": 3, "U": 5}, serialize_type=st
    )
    bad = await broker.register(compressed=True, crc=12345)
    assert bad.code == ResponseCode.SYSTEM_ERROR and bad.remark == "crc32 not match"
    info = ClusterInfo.decode((await call(client, RequestCode.GET_BROKER_CLUSTER_INFO)).body)
    assert info.broker_addr_table == {}  # a rejected registration leaves nothing behind

    ok = await broker.register(compressed=True)
    assert ok.code == ResponseCode.SUCCESS, ok
    found = await route(client, "U", serialize_type=st)
    assert found is not None and [(q.read_queue_nums, q.write_queue_nums) for q in found.queue_datas] == [
        (5, 5)
    ]

    command = broker.register_command(compressed=True)
    command.body = b"not zlib at all"
    command.ext_fields["bodyCrc32"] = 0  # 0 = don't check
    broken = await broker.conn.request(command, timeout=5)
    assert broken.code == ResponseCode.SYSTEM_ERROR
    assert broken.remark is not None and "does not inflate" in broken.remark


@pytest.mark.parametrize("st", SERIALIZATIONS)
async def test_slave_registration_returns_the_master(
    start_namesrv: StartNamesrv, connect_to: Connect, st: int
) -> None:
    ns = await start_namesrv()
    client = await connect_to(ns)
    slave = FakeBroker(
        await connect_to(ns),
        "c1",
        "broker-a",
        "10.0.0.11:10911",
        1,
        topics={"T": 4},
        ha_addr="10.0.0.11:10912",
        serialize_type=st,
    )
    alone = await slave.register()
    assert alone.code == ResponseCode.SUCCESS
    assert "masterAddr" not in alone.ext_fields and "haServerAddr" not in alone.ext_fields
    assert await route(client, "T") is None  # slaves never create queue data

    master = FakeBroker(
        await connect_to(ns),
        "c1",
        "broker-a",
        "10.0.0.1:10911",
        topics={"T": 4},
        ha_addr="10.0.0.1:10912",
        serialize_type=st,
    )
    registered = await master.register()
    assert "masterAddr" not in registered.ext_fields
    again = await slave.register()
    assert again.ext_fields == {"masterAddr": "10.0.0.1:10911", "haServerAddr": "10.0.0.1:10912"}
    found = await route(client, "T")
    assert found is not None and found.broker_datas[0].broker_addrs == {
        0: "10.0.0.1:10911",
        1: "10.0.0.11:10911",
    }

    # the master's connection drops: the slave no longer hears of a master
    master.conn.close()
    await eventually(lambda: _master_gone(client), timeout=2)
    assert "masterAddr" not in (await slave.register()).ext_fields


async def test_a_demoted_masters_stale_registration_is_refused(
    start_namesrv: StartNamesrv, connect_to: Connect
) -> None:
    """Controller mode: B elected master (epoch 2) has registered as id 0 when a registration of
    the old master A as id 0 (epoch 1, sent before it learnt of the election) arrives. It is
    answered with no master and changes nothing but forgetting A, as Apache's name server does;
    A, registering next as a slave, hears of B at once."""
    ns = await start_namesrv()
    client = await connect_to(ns)
    a = FakeBroker(await connect_to(ns), "c1", "broker-a", "10.0.0.1:10911", topics={"T": 4}, state_version=1)
    b = FakeBroker(
        await connect_to(ns), "c1", "broker-a", "10.0.0.2:10911", 2, topics={"T": 4}, state_version=1
    )
    await a.register()
    assert (await b.register()).ext_fields["haServerAddr"] == "10.0.0.1:10912"
    b.broker_id, b.state_version = 0, 2
    await b.register()
    stale = await a.register()
    assert stale.code == ResponseCode.SUCCESS and stale.ext_fields == {}
    info = ClusterInfo.decode((await call(client, RequestCode.GET_BROKER_CLUSTER_INFO)).body)
    assert info.broker_addr_table["broker-a"].broker_addrs == {0: "10.0.0.2:10911"}
    a.broker_id, a.state_version = 1, 2
    demoted = await a.register()
    assert demoted.ext_fields == {"masterAddr": "10.0.0.2:10911", "haServerAddr": "10.0.0.2:10912"}


async def _master_gone(client: Connection) -> bool:
    info = ClusterInfo.decode((await call(client, RequestCode.GET_BROKER_CLUSTER_INFO)).body)
    return info.broker_addr_table["broker-a"].broker_addrs == {1: "10.0.0.11:10911"}


async def test_oneway_registration(start_namesrv: StartNamesrv, connect_to: Connect) -> None:
    ns = await start_namesrv()
    client = await connect_to(ns)
    broker = FakeBroker(await connect_to(ns), "c1", "broker-a", "10.0.0.1:10911", topics={"T": 4})
    broker.conn.send_oneway(broker.register_command())
    await eventually(lambda: _has(client, "T", "broker-a"), timeout=2)
    assert broker.conn.pending_requests == 0


async def _has(client: Connection, topic: str, broker: str) -> bool:
    return broker in await broker_names(client, topic)


@pytest.mark.parametrize("st", SERIALIZATIONS)
async def test_admin_requests(start_namesrv: StartNamesrv, connect_to: Connect, st: int) -> None:
    ns = await start_namesrv()
    admin = await connect_to(ns)
    a = FakeBroker(
        await connect_to(ns), "c1", "broker-a", "10.0.0.1:10911", topics={"T": 4, "U": 4}, serialize_type=st
    )
    b = FakeBroker(
        await connect_to(ns), "c2", "broker-b", "10.0.0.2:10911", topics={"T": 4}, serialize_type=st
    )
    await a.register()
    await b.register()

    # QUERY_DATA_VERSION: changed or not, and the stored version
    newer = DataVersion(timestamp=1, counter=99)
    response = await call(
        admin, RequestCode.QUERY_DATA_VERSION, a.header(), newer.encode(), serialize_type=st
    )
    assert response.ext_fields == {"changed": "true"}
    assert DataVersion.decode(response.body) == a.data_version()
    unknown = {**a.header(), "brokerAddr": "10.9.9.9:10911"}
    response = await call(admin, RequestCode.QUERY_DATA_VERSION, unknown, newer.encode(), serialize_type=st)
    assert response.ext_fields == {"changed": "true"} and response.body == b""

    # WIPE_WRITE_PERM_OF_BROKER
    response = await call(
        admin, RequestCode.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": "broker-a"}, serialize_type=st
    )
    assert response.code == ResponseCode.SUCCESS and response.ext_fields == {"wipeTopicCount": "2"}
    found = await route(admin, "T")
    assert found is not None and {q.broker_name: q.perm for q in found.queue_datas} == {
        "broker-a": 4,
        "broker-b": 6,
    }

    # DELETE_TOPIC_IN_NAMESRV, on one cluster and then everywhere
    response = await call(
        admin, RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": "T", "clusterName": "c2"}, serialize_type=st
    )
    assert response.code == ResponseCode.SUCCESS
    assert await broker_names(admin, "T") == {"broker-a"}
    response = await call(admin, RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": "T"}, serialize_type=st)
    assert response.code == ResponseCode.SUCCESS
    assert await route(admin, "T") is None
    topics = await call(admin, RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, serialize_type=st)
    assert TopicList.decode(topics.body).topic_list == ["U"]

    # GET_NAMESRV_CONFIG
    response = await call(admin, RequestCode.GET_NAMESRV_CONFIG, serialize_type=st)
    assert response.code == ResponseCode.SUCCESS
    assert "listenPort=0\n" in response.body.decode()  # the configured port, as Java reports it
    assert "brokerChannelExpiredTime=120000\n" in response.body.decode()


@pytest.mark.parametrize("st", SERIALIZATIONS)
async def test_bad_requests_get_clear_errors_and_the_server_keeps_serving(
    start_namesrv: StartNamesrv, connect_to: Connect, st: int
) -> None:
    ns = await start_namesrv()
    conn = await connect_to(ns)

    # 218: 4.x's DELETE_KV_CONFIG_BY_VALUE, which no name server (Apache 4.x or 5.x) serves
    unknown = await call(conn, RequestCode.DELETE_KV_CONFIG_BY_VALUE, {"namespace": "n"}, serialize_type=st)
    assert unknown.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    assert unknown.remark == " request type 218 not supported"

    cases: list[tuple[int, dict[str, Any], str]] = [
        (RequestCode.REGISTER_BROKER, {"brokerName": "a", "clusterName": "c", "brokerId": 0}, "brokerAddr"),
        (
            RequestCode.REGISTER_BROKER,
            {"brokerName": "a", "brokerAddr": "x:1", "clusterName": "c", "brokerId": "zero"},
            "brokerId",
        ),
        (RequestCode.GET_ROUTEINFO_BY_TOPIC, {}, "topic"),
        (RequestCode.PUT_KV_CONFIG, {"namespace": "n", "key": "k"}, "value"),
        (RequestCode.GET_KV_CONFIG, {"namespace": "n"}, "key"),
        (
            RequestCode.UNREGISTER_BROKER,
            {"brokerName": "a", "brokerAddr": "x:1", "brokerId": 0},
            "clusterName",
        ),
        (RequestCode.WIPE_WRITE_PERM_OF_BROKER, {}, "brokerName"),
        (RequestCode.GET_TOPICS_BY_CLUSTER, {}, "cluster"),
    ]
    for code, fields, missing in cases:
        response = await call(conn, code, fields, serialize_type=st)
        assert response.code == ResponseCode.SYSTEM_ERROR, (code, response)
        assert response.remark is not None and f"'{missing}'" in response.remark, (code, response.remark)

    header = {"brokerName": "a", "brokerAddr": "10.0.0.1:10911", "clusterName": "c", "brokerId": 0}
    response = await call(conn, RequestCode.REGISTER_BROKER, header, b"{this is not json", serialize_type=st)
    assert response.code == ResponseCode.SYSTEM_ERROR and "invalid JSON" in (response.remark or "")
    response = await call(conn, RequestCode.QUERY_DATA_VERSION, header, serialize_type=st)
    assert response.code == ResponseCode.SYSTEM_ERROR and "DataVersion" in (response.remark or "")
    # nothing was registered by the failed attempts
    info = await call(conn, RequestCode.GET_BROKER_CLUSTER_INFO, serialize_type=st)
    assert ClusterInfo.decode(info.body).broker_addr_table == {}

    # garbage frames: that connection is closed, everyone else is still served
    assert ns.port is not None
    for garbage in (
        b"\x00\x00\x00\x0c\x07\x00\x00\x04abcdefgh",  # unknown serialize type 7
        b"\xff\xff\xff\xf0rest",  # negative frame length
        b"\x7f\xff\xff\xff\x00\x00\x00\x00",  # 2 GiB frame, over the 16 MiB limit
        b"\x00\x00\x00\x10\x00\x00\x00\x08{notjson}and",  # JSON header that is not JSON
        b"\x00\x00\x00\x10\x01\x00\x00\x08\x00\x69\x00\x01\x00\x00\x00\x00rest",  # binary header too short
    ):
        reader, writer = await asyncio.open_connection("127.0.0.1", ns.port)
        # the connection works until the garbage arrives
        good = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"}, serialize_type=st)
        good.opaque = 42
        writer.write(good.encode())
        size = int.from_bytes(await asyncio.wait_for(reader.readexactly(4), 5), "big")
        answer = decode_frame(await reader.readexactly(size))
        assert (answer.opaque, answer.code) == (42, ResponseCode.TOPIC_NOT_EXIST)
        writer.write(garbage)
        await writer.drain()
        assert await asyncio.wait_for(reader.read(), 5) == b"", garbage
        writer.close()
        await writer.wait_closed()
    response = await call(conn, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"}, serialize_type=st)
    assert response.code == ResponseCode.TOPIC_NOT_EXIST
    fresh = await connect_to(ns)
    response = await call(fresh, RequestCode.GET_BROKER_CLUSTER_INFO, serialize_type=st)
    assert response.code == ResponseCode.SUCCESS


async def test_name_servers_share_nothing(
    start_namesrv: StartNamesrv, connect_to: Connect, tmp_path: Path
) -> None:
    first = await start_namesrv(store_dir=tmp_path / "ns1")
    second = await start_namesrv(store_dir=tmp_path / "ns2")
    assert first.port != second.port
    # a broker registers with each name server over its own connection
    for ns in (first, second):
        broker = FakeBroker(await connect_to(ns), "c1", "broker-a", "10.0.0.1:10911", topics={"T": 4})
        assert (await broker.register()).code == ResponseCode.SUCCESS
    c1, c2 = await connect_to(first), await connect_to(second)
    r1, r2 = (
        await call(c1, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"}),
        await call(c2, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"}),
    )
    assert r1.body == r2.body and r1.code == ResponseCode.SUCCESS
    put = await call(c1, RequestCode.PUT_KV_CONFIG, {"namespace": "ns", "key": "k", "value": "v"})
    assert put.code == ResponseCode.SUCCESS
    assert (await call(c2, RequestCode.GET_KV_CONFIG, {"namespace": "ns", "key": "k"})).code == (
        ResponseCode.QUERY_NOT_FOUND
    )
    assert not (tmp_path / "ns2" / "kvConfig.json").exists()


async def test_config_file_port_and_sigint(start_namesrv: StartNamesrv, connect_to: Connect) -> None:
    with held_port() as port:  # held until the name server listens on it
        ns = await start_namesrv(config={"listenPort": str(port), "someUnknownKey": "1"}, port=None)
    assert ns.port == port
    await ns.wait_for_line(r"unknown configuration key 'someUnknownKey' ignored")
    conn = await connect_to(ns)
    assert (await call(conn, RequestCode.GET_BROKER_CLUSTER_INFO)).code == ResponseCode.SUCCESS
    assert ns.proc is not None
    ns.proc.send_signal(2)  # SIGINT, as Ctrl-C in `make run`
    assert await asyncio.wait_for(ns.proc.wait(), 10) == 0
    await ns.wait_for_line("stopped")
