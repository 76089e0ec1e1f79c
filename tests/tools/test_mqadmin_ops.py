"""Apache 4.9's maintenance, statistics and diagnosis ``mqadmin`` commands against one real name
server and two brokers, shared by the module: a topic on both brokers, a live producer and a
live push consumer that has consumed what was sent. Commands run in process (the parsing and
execution ``mqadmin`` itself uses) to keep the module quick; one subprocess run shows they are
registered in the installed tool. Each check compares the output with what the cluster holds.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import pytest_asyncio

from aiorocketmq.client import Admin, ConsumeResult, Message, MessageExt, MessageQueue, Producer, PushConsumer
from aiorocketmq.client.cluster_admin import correction_offsets, namesrv_config
from aiorocketmq.protocol.body import ORDER_TOPIC_CONFIG
from aiorocketmq.protocol.codes import RequestCode
from aiorocketmq.protocol.errors import MQError
from aiorocketmq.tools.cli import CommandFailed
from aiorocketmq.tools.mqadmin import Result, execute, parse_args
from tests.cluster import Cluster

from .conftest import mqadmin, unique, wait_until

pytestmark = pytest.mark.asyncio(loop_scope="module")

SENT = 12


async def run(ns: str, *argv: str) -> Result:
    """One mqadmin command, in process."""
    return await execute(parse_args([argv[0], "-n", ns, *argv[1:]]))


@dataclass
class World:
    cluster: Cluster
    ns: str
    admin: Admin
    topic: str
    group: str
    producer_group: str
    producer: Producer
    consumer: PushConsumer
    sent: list[tuple[str, str, MessageQueue]]  # (msg id, key, queue)
    consumed: list[MessageExt]

    def addr(self, broker: str) -> str:
        return self.cluster.brokers[broker].addr


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def world(cluster: Cluster) -> AsyncIterator[World]:
    ns = cluster.namesrv_addr
    topic, group, producer_group = unique("OpsTopic"), unique("ops_cg"), unique("ops_pg")
    async with Admin(ns) as admin:
        await admin.create_topic(topic, 4)  # four queues on each broker
        async with Producer(producer_group, ns) as producer:
            sent = []
            for i in range(SENT):
                key = f"ops-key-{i}"
                msg = Message(
                    topic, f"ops body {i}".encode(), tags="even" if i % 2 == 0 else "odd", keys=[key]
                )
                result = await producer.send(msg, shard_key=str(i))
                sent.append((result.msg_id, key, result.queue))
            consumed: list[MessageExt] = []
            all_in = asyncio.Event()
            consumer = PushConsumer(group, ns)
            consumer.subscribe(topic, "*")

            @consumer.listener
            def handle(messages: list[MessageExt]) -> ConsumeResult:
                consumed.extend(messages)
                if len(consumed) >= SENT:
                    all_in.set()
                return ConsumeResult.SUCCESS

            async with consumer:
                await asyncio.wait_for(all_in.wait(), 60)

                async def committed() -> bool:
                    await consumer.persist_offsets()
                    return await admin.consumer_lag(group, topic) == 0

                await wait_until(committed, timeout=60)
                yield World(
                    cluster, ns, admin, topic, group, producer_group, producer, consumer, sent, consumed
                )


# -- configuration and permissions ---------------------------------------------------------------


async def test_update_broker_config_on_a_cluster(world: World) -> None:
    result = await run(
        world.ns, "updateBrokerConfig", "-c", "DefaultCluster", "-k", "fileReservedTime", "-v", "47"
    )
    assert result.lines == [
        f"update broker config success, {world.addr(b)}" for b in ("broker-a", "broker-b")
    ]
    for broker in ("broker-a", "broker-b"):
        assert (await world.admin.broker_config(world.addr(broker)))["fileReservedTime"] == "47"


async def test_namesrv_config_get_update_and_black_list(world: World) -> None:
    before = await run(world.ns, "getNamesrvConfig")
    assert before.lines[0] == f"============{world.ns}============"
    assert "orderMessageEnable                                =  false" in before.lines
    updated = await run(world.ns, "updateNamesrvConfig", "-k", "orderMessageEnable", "-v", "true")
    assert updated.lines == [f"update name server config success![{world.ns}]", "orderMessageEnable : true"]
    assert (await namesrv_config(world.admin))[world.ns]["orderMessageEnable"] == "true"
    with pytest.raises(MQError, match="black list"):
        await run(world.ns, "updateNamesrvConfig", "-k", "kvConfigPath", "-v", "/tmp/elsewhere.json")
    await run(world.ns, "updateNamesrvConfig", "-k", "orderMessageEnable", "-v", "false")


async def test_update_topic_perm_and_write_perm_on_the_name_server(world: World) -> None:
    def perms(route: object) -> dict[str, int]:
        return {q.broker_name: q.perm for q in route.queue_datas}  # type: ignore[attr-defined]

    read_only = await run(world.ns, "updateTopicPerm", "-c", "DefaultCluster", "-t", world.topic, "-p", "4")
    assert read_only.lines == [
        f"update topic perm from 6 to 4 in {world.addr(b)} success." for b in ("broker-a", "broker-b")
    ]
    await world.admin.wait_for_route(world.topic, brokers={"broker-a", "broker-b"}, perm=4)
    same = await run(world.ns, "updateTopicPerm", "-b", world.addr("broker-a"), "-t", world.topic, "-p", "4")
    assert same.lines == ["new perm equals to the old one!"]
    await run(world.ns, "updateTopicPerm", "-c", "DefaultCluster", "-t", world.topic, "-p", "6")
    await world.admin.wait_for_route(world.topic, brokers={"broker-a", "broker-b"}, perm=6)

    wiped = await run(world.ns, "wipeWritePerm", "-b", "broker-a")
    [line] = wiped.lines
    assert line.startswith(f"wipe write perm of broker[broker-a] in name server[{world.ns}] OK, ")
    assert int(line.rsplit(" ", 1)[1]) >= 1
    assert perms(await world.admin.instance.fetch_route(world.topic)) == {"broker-a": 4, "broker-b": 6}
    added = await run(world.ns, "addWritePerm", "-b", "broker-a")
    assert added.lines == [line.replace("wipe", "add")]
    assert perms(await world.admin.instance.fetch_route(world.topic)) == {"broker-a": 6, "broker-b": 6}


async def test_update_order_conf(world: World) -> None:
    put = await run(
        world.ns, "updateOrderConf", "-t", world.topic, "-m", "put", "-v", "broker-a:4;broker-b:4"
    )
    assert put.lines == [
        f"update orderConf success. topic=[{world.topic}], orderConf=[broker-a:4;broker-b:4]"
    ]
    assert await world.admin.kv_config(ORDER_TOPIC_CONFIG, world.topic) == "broker-a:4;broker-b:4"
    got = await run(world.ns, "updateOrderConf", "-t", world.topic, "-m", "get")
    assert got.lines == [f"get orderConf success. topic=[{world.topic}], orderConf=[broker-a:4;broker-b:4] "]
    deleted = await run(world.ns, "updateOrderConf", "-t", world.topic, "-m", "delete")
    assert deleted.lines == [f"delete orderConf success. topic=[{world.topic}]"]
    assert await world.admin.kv_config(ORDER_TOPIC_CONFIG, world.topic) is None
    with pytest.raises(CommandFailed, match="-v"):
        await run(world.ns, "updateOrderConf", "-t", world.topic, "-m", "put")


async def test_topic_cluster_list_and_allocate_mq(world: World) -> None:
    assert (await run(world.ns, "topicClusterList", "-t", world.topic)).lines == ["DefaultCluster"]
    allocated = (
        await run(world.ns, "allocateMQ", "-t", world.topic, "-i", "10.0.0.3,10.0.0.1,10.0.0.2")
    ).data
    shares = allocated["result"]
    assert [len(shares[ip]) for ip in ("10.0.0.1", "10.0.0.2", "10.0.0.3")] == [3, 3, 2]
    every = [(q["brokerName"], q["queueId"]) for share in shares.values() for q in share]
    assert sorted(every) == sorted((q.broker_name, q.queue_id) for q in await world.admin.queues(world.topic))


# -- producers and consumers ---------------------------------------------------------------------


async def test_producer_views(world: World) -> None:
    client_id = world.producer.client_id
    connection = await run(world.ns, "producerConnection", "-g", world.producer_group, "-t", world.topic)
    [line] = connection.lines
    assert line.split() == ["0001", client_id, line.split()[2], "PYTHON", "V4_9_4"]
    table = await run(world.ns, "producer", "-b", world.addr("broker-a"))
    [mine] = [line for line in table.lines if f"({world.producer_group})" in line]
    assert mine.startswith(
        f"producer group ({world.producer_group}) instance : clientId={client_id},remoteIP=/"
    )
    assert "language=PYTHON, version=401" in mine


async def test_consumer_status_through_the_broker(
    world: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # Apache's tool writes each consumer's report under the cwd
    status = await run(world.ns, "consumerStatus", "-g", world.group)
    assert status.lines[0].split() == ["#Index", "#ClientId", "#Version", "#ConsumerRunningInfoFile"]
    assert status.lines[1].split()[:3] == ["1", world.consumer.client_id, "V4_9_4"]
    assert "Same subscription in the same group of consumer" in status.lines
    assert "Rebalance OK" in status.lines
    info = status.data[world.consumer.client_id]
    held = {(q["brokerName"], q["queueId"]): q["commitOffset"] for q in info["mqTable"]}
    stats = await world.admin.consume_stats(world.group, world.topic)
    assert held == {(q.broker_name, q.queue_id): w.consumer_offset for q, w in stats.offset_table.items()}
    report = (tmp_path / status.lines[1].split()[3]).read_text()
    assert report.startswith("#Consumer Properties#\n")

    one = await run(world.ns, "consumerStatus", "-g", world.group, "-i", world.consumer.client_id)
    assert one.lines[0] == "#Consumer Properties#"
    assert any(
        re.match(rf"\d{{3}} Topic: {world.topic} ", line) is not None and line.endswith("SubExpression: *")
        for line in one.lines
    )
    details = [line for line in one.lines if "ProcessQueueInfo [commitOffset=" in line]
    assert len([line for line in details if line.startswith(f"{world.topic} ")]) == 8  # and its retry queues
    with pytest.raises(MQError, match="not online"):
        await run(world.ns, "consumerStatus", "-g", world.group, "-i", "10.0.0.9@nobody")


async def test_clone_and_skip_offsets(world: World) -> None:
    clone = unique("ops_clone")
    cloned = await run(world.ns, "cloneGroupOffset", "-s", world.group, "-d", clone, "-t", world.topic)
    assert cloned.lines == [
        f"clone group offset success. srcGroup[{world.group}], destGroup=[{clone}], topic[{world.topic}]"
    ]
    for queue in await world.admin.queues(world.topic):
        assert await world.admin.committed_offset(clone, queue) == await world.admin.committed_offset(
            world.group, queue
        )
    # Two more messages: the live group consumes them, the clone (nobody) does not.
    on_a = next(q for q in await world.admin.queues(world.topic) if q.broker_name == "broker-a")
    for i in range(2):
        await world.producer.send(Message(world.topic, f"late {i}".encode()), queue=on_a)
    assert await world.admin.consumer_lag(clone, world.topic) == 2
    # QUERY_CORRECTION_OFFSET: the smallest offset of the groups, and "nothing to correct"
    # where the compared group is further behind than the others.
    await wait_until(lambda: _no_lag(world), timeout=60)  # the live group has the late two
    committed = {}
    for q in await world.admin.queues(world.topic):
        if q.broker_name == "broker-a":
            committed[q.queue_id] = (
                await world.admin.committed_offset(world.group, q),
                await world.admin.committed_offset(clone, q),
            )
    addr = world.addr("broker-a")
    lowest = await correction_offsets(world.admin, addr, world.topic, clone)
    assert lowest == {qid: min(mine, cloned) for qid, (mine, cloned) in committed.items()}
    others = await correction_offsets(world.admin, addr, world.topic, clone, [clone])
    assert others == {qid: 2**63 - 1 if cloned < mine else mine for qid, (mine, cloned) in committed.items()}
    assert others[on_a.queue_id] == 2**63 - 1  # the clone is 2 behind there
    skipped = await run(world.ns, "skipAccumulatedMessage", "-g", clone, "-t", world.topic)
    assert skipped.lines[0].split() == ["#brokerName", "#queueId", "#offset"]
    maxima = {
        (q.broker_name, q.queue_id): await world.admin.max_offset(q)
        for q in await world.admin.queues(world.topic)
    }
    assert {(r.split()[0], int(r.split()[1])): int(r.split()[2]) for r in skipped.lines[1:]} == maxima
    assert await world.admin.consumer_lag(clone, world.topic) == 0


async def test_get_consumer_config(world: World) -> None:
    result = await run(world.ns, "getConsumerConfig", "-g", world.group)
    headers = [line for line in result.lines if line.startswith("=====")]
    assert headers == [f"{'=' * 29}DefaultCluster:{b}{'=' * 29}" for b in ("broker-a", "broker-b")]
    assert f"{'groupName':<40}=  {world.group}" in result.lines
    assert f"{'retryMaxTimes':<40}=  16" in result.lines
    with pytest.raises(CommandFailed):
        await run(world.ns, "getConsumerConfig", "-g", unique("ops_nobody"))


# -- statistics and monitoring -------------------------------------------------------------------


async def test_broker_consume_stats_stats_all_and_monitoring(world: World) -> None:
    await wait_until(lambda: _no_lag(world), timeout=60)
    stats = await run(world.ns, "brokerConsumeStats", "-b", world.addr("broker-a"))
    rows = [line.split() for line in stats.lines[1:] if line.startswith(world.topic)]
    on_a = [q for _, _, q in world.sent if q.broker_name == "broker-a"]
    assert {int(r[3]) for r in rows if r[1] == world.group} == {q.queue_id for q in on_a}
    assert all(r[4] == r[5] and r[6] == "0" for r in rows if r[1] == world.group)
    assert stats.lines[-1] == "Diff Total: 0"

    all_stats = await run(world.ns, "statsAll", "-t", world.topic)
    [row] = [line.split() for line in all_stats.lines[1:] if world.group in line.split()]
    produced = SENT + 2  # the two late messages of the offset test, when it ran first
    assert row[0] == world.topic and row[2] == "0"
    assert int(row[5]) in (SENT, produced) and int(row[6]) == int(row[5])

    monitor = await run(world.ns, "startMonitoring", "--rounds", "1", "--interval", "0")
    [report] = [r for r in monitor.data["reports"] if r["consumerGroup"] == world.group]
    assert (report["topic"], report["undoneMsgsTotal"]) == (world.topic, 0)


async def _no_lag(world: World) -> bool:
    await world.consumer.persist_offsets()
    return await world.admin.consumer_lag(world.group, world.topic) == 0


# -- messages and queues -------------------------------------------------------------------------


async def test_query_msg_by_unique_key_with_track(world: World, tmp_path: Path) -> None:
    msg_id, key, _ = world.sent[3]
    result = await run(
        world.ns, "queryMsgByUniqueKey", "-t", world.topic, "-i", msg_id, "--body-dir", str(tmp_path)
    )
    assert result.lines[0] == f"{'Topic:':<20} {world.topic}"
    assert f"{'Keys:':<20} [{key}]" in result.lines
    assert (tmp_path / msg_id).read_bytes() == b"ops body 3"
    assert (
        f"MessageTrack [consumerGroup={world.group}, trackType=CONSUMED, exceptionDesc=null]"
        in result.lines[-1]
    )

    # -g/-d: the live consumer's listener gets the message once more, now.
    before = sum(1 for m in world.consumed if m.msg_id == msg_id)
    again = await run(
        world.ns, "queryMsgByUniqueKey", "-t", world.topic, "-i", msg_id, "-g", world.group,
        "-d", world.consumer.client_id,
    )  # fmt: skip
    [line] = again.lines
    assert re.fullmatch(
        r"ConsumeMessageDirectlyResult \[order=false, autoCommit=true, consumeResult=CR_SUCCESS, "
        r"remark=null, spentTimeMills=\d+\]",
        line,
    ), line
    assert sum(1 for m in world.consumed if m.msg_id == msg_id) == before + 1
    with pytest.raises(MQError, match="not online"):
        await run(
            world.ns, "queryMsgByUniqueKey", "-t", world.topic, "-i", msg_id, "-g", world.group, "-d", "x@y"
        )


async def test_print_msg_by_queue_and_query_cq(world: World) -> None:
    queue = next(q for _, _, q in world.sent if q.broker_name == "broker-a")
    printed = await run(
        world.ns, "printMsgByQueue", "-t", world.topic, "-a", "broker-a", "-i", str(queue.queue_id),
        "-p", "true", "-d", "true", "-f", "true",
    )  # fmt: skip
    messages = [line for line in printed.lines if line.startswith("MSGID: ")]
    in_queue = [(m, k) for m, k, q in world.sent if q == queue]
    assert [line.split()[1] for line in messages[: len(in_queue)]] == [m for m, _ in in_queue]
    assert all(" BODY: " in line and "NOT PRINT BODY" not in line for line in messages)
    tag_lines = [
        re.fullmatch(r"Tag: (.{30}) Count: (\d+)", line) for line in printed.lines if line.startswith("Tag: ")
    ]
    counts = {m.group(1).strip(): int(m.group(2)) for m in tag_lines if m is not None}
    assert len(counts) == len(tag_lines) and {"even", "odd"} & set(counts)
    assert sum(counts.values()) == len(messages) == printed.data["count"]

    addr = world.addr("broker-a")
    cq = await run(
        world.ns, "queryCq", "-t", world.topic, "-q", str(queue.queue_id), "-i", "0", "-c", "32", "-b", addr
    )
    assert cq.lines[:2] == ["Queue data: ", f"max: {printed.data['maxOffset']}, min: 0"]
    entries = [line for line in cq.lines if line.startswith("ConsumeQueueData{")]
    assert len(entries) == printed.data["maxOffset"]
    assert [line for line in cq.lines if line.startswith("idx: ")] == [
        f"idx: {i}" for i in range(len(entries))
    ]
    with_group = await run(world.ns, "queryCq", "-t", world.topic, "-q", str(queue.queue_id), "-i", "0", "-c", "1",
                           "-b", addr, "-g", world.group)  # fmt: skip
    assert with_group.lines[0] == "Subscription data: "
    assert (
        json.loads(
            "\n".join(with_group.lines[1 : with_group.lines.index("======================================")])
        )["topic"]
        == world.topic
    )
    with pytest.raises(MQError, match="is not exist"):
        await run(world.ns, "queryCq", "-t", world.topic, "-q", "77", "-i", "0", "-b", addr)


async def test_send_round_trips(world: World) -> None:
    status = await run(world.ns, "sendMsgStatus", "-b", "broker-b", "-c", "3")
    assert len(status.lines) == 3
    assert all(line.startswith("rt=") and "sendStatus=SEND_OK" in line and "topic=broker-b" in line
               for line in status.lines)  # fmt: skip
    offsets = [r["queueOffset"] for r in status.data["results"]]
    assert offsets == sorted(offsets) and len(set(offsets)) == 3

    rt = await run(world.ns, "checkMsgSendRT", "-t", world.topic, "-a", "4", "-s", "16")
    assert rt.lines[0].split() == ["#Broker", "Name", "#QID", "#Send", "Result", "#RT"]
    assert [line.split()[2] for line in rt.lines[1:5]] == ["true"] * 4
    assert rt.lines[-1].startswith("Avg RT: ")

    cluster_rt = await run(world.ns, "clusterRT", "-a", "2", "--rounds", "1")
    assert sorted((r["brokerName"], r["success"], r["fail"]) for r in cluster_rt.data["rounds"]) == [
        ("broker-a", 2, 0),
        ("broker-b", 2, 0),
    ]


# -- store maintenance and exports ---------------------------------------------------------------


@pytest.mark.parametrize("name", ["cleanExpiredCQ", "deleteExpiredCommitLog", "cleanUnusedTopic"])
async def test_store_maintenance_keeps_what_is_live(world: World, name: str) -> None:
    result = await run(world.ns, name, "-c", "DefaultCluster")
    assert result.lines == ["success"]
    assert sorted(result.data["brokerAddrs"]) == sorted(world.addr(b) for b in ("broker-a", "broker-b"))
    # Nothing here had expired and every topic is configured: all messages still readable.
    msg_id, _, _ = world.sent[0]
    assert (await world.admin.query_message_by_id(world.topic, msg_id)).msg_id == msg_id
    for queue in await world.admin.queues(world.topic):
        assert await world.admin.min_offset(queue) == 0


async def test_exports(world: World, tmp_path: Path) -> None:
    metadata = await run(world.ns, "exportMetadata", "-c", "DefaultCluster", "-f", str(tmp_path))
    assert metadata.lines == [f"export {tmp_path / 'metadata.json'} success"]
    document = json.loads((tmp_path / "metadata.json").read_text())
    assert document["topicConfigTable"][world.topic]["readQueueNums"] == 8  # 4 on each broker
    assert "TBW102" not in document["topicConfigTable"] and "broker-a" not in document["topicConfigTable"]
    assert world.group in document["subscriptionGroupTable"]
    topics_only = await run(
        world.ns, "exportMetadata", "-b", world.addr("broker-b"), "-t", "-f", str(tmp_path)
    )
    assert topics_only.lines == [f"export {tmp_path / 'topic.json'} success"]
    assert world.topic in json.loads((tmp_path / "topic.json").read_text())["topicConfigTable"]

    configs = await run(world.ns, "exportConfigs", "-c", "DefaultCluster", "-f", str(tmp_path))
    document = json.loads((tmp_path / "configs.json").read_text())
    assert configs.lines == [f"export {tmp_path / 'configs.json'} success"]
    assert document["clusterScale"] == {"namesrvSize": 1, "slaveBrokerSize": 0, "masterBrokerSize": 2}
    assert document["brokerConfigs"]["broker-b"]["brokerName"] == "broker-b"

    await run(world.ns, "exportMetrics", "-c", "DefaultCluster", "-f", str(tmp_path))
    document = json.loads((tmp_path / "metrics.json").read_text())
    assert sorted(document["evaluateReport"]) == ["broker-a", "broker-b"]
    quota = document["evaluateReport"]["broker-a"]["runtimeQuota"]
    assert float(quota["messageAverageSize"]) > len(b"ops body 0")  # a record is more than its body
    # Counted between the last two midnights, as Apache does: none yet on a fresh broker.
    assert document["totalData"]["totalOneDayNum"]["normalOneDayInNum"] == 0


async def test_registered_in_the_installed_tool(world: World) -> None:
    """The new commands are in the real ``mqadmin``'s table, with Apache's option letters."""
    usage = await mqadmin("updateTopicPerm", "--help")
    assert usage.code == 0
    for option in (
        "-b brokerAddr, --brokerAddr",
        "-c clusterName, --clusterName",
        "-t topic, --topic",
        "-p perm, --perm",
    ):
        assert option in usage.out
    done = await mqadmin("topicClusterList", "-n", world.ns, "-t", world.topic)
    assert (done.code, done.out) == (0, "DefaultCluster\n")


async def test_bad_requests_get_clear_errors_and_servers_keep_serving(world: World) -> None:
    call = world.admin.instance.call
    addr = world.addr("broker-a")
    with pytest.raises(MQError, match="srcGroup"):
        await call(addr, RequestCode.CLONE_GROUP_OFFSET, {"destGroup": "x", "topic": world.topic})
    with pytest.raises(MQError, match="not exist"):
        await call(
            addr, RequestCode.VIEW_BROKER_STATS_DATA, {"statsName": "TOPIC_PUT_NUMS", "statsKey": "nope"}
        )
    with pytest.raises(MQError, match="bad index"):
        await call(
            addr,
            RequestCode.QUERY_CONSUME_QUEUE,
            {"topic": world.topic, "queueId": 0, "index": -1, "count": 5},
        )
    with pytest.raises(MQError, match="bad offset msgId"):
        await call(addr, RequestCode.CONSUME_MESSAGE_DIRECTLY, {"consumerGroup": world.group, "msgId": "zz"})
    with pytest.raises(MQError, match="not UTF-8"):
        await call(world.ns, RequestCode.UPDATE_NAMESRV_CONFIG, None, b"orderMessageEnable=\xff\xfe")
    with pytest.raises(MQError, match="brokerName"):
        await call(world.ns, RequestCode.ADD_WRITE_PERM_OF_BROKER, {})
    assert (await run(world.ns, "topicClusterList", "-t", world.topic)).lines == ["DefaultCluster"]
    assert (await run(world.ns, "cleanUnusedTopic", "-b", addr)).lines == ["success"]
