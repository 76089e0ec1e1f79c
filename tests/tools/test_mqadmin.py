"""``mqadmin`` against a real name server and two brokers: every command runs as a subprocess,
its text and JSON output checked against what the cluster really holds."""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Awaitable, Callable
from datetime import datetime
from pathlib import Path

import pytest

from aiorocketmq.client import (
    Admin,
    ConsumeFrom,
    ConsumeResult,
    Message,
    MessageExt,
    MessageQueue,
    Producer,
    PushConsumer,
)
from aiorocketmq.protocol.body import SubscriptionGroupWrapper
from aiorocketmq.protocol.codes import RequestCode
from aiorocketmq.protocol.errors import QueryNotFoundError, TopicNotExistError
from tests.cluster import Cluster

from .conftest import mqadmin, unique, wait_until

pytestmark = pytest.mark.asyncio(loop_scope="module")


def addr_of(cluster: Cluster, name: str) -> str:
    return cluster.brokers[name].addr


def single_line(text: str) -> str:
    lines = text.strip().splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got {lines!r}"
    return lines[0]


async def test_cluster_list_broker_status_and_config(cluster: Cluster) -> None:
    ns = cluster.namesrv_addr
    listed, as_json, status, status_all, config, config_json = await asyncio.gather(
        mqadmin("clusterList", "-n", ns),
        mqadmin("clusterList", "-n", ns, "--json"),
        mqadmin("brokerStatus", "-n", ns, "-b", addr_of(cluster, "broker-a")),
        mqadmin("brokerStatus", "-n", ns, "-c", "DefaultCluster", "--json"),
        mqadmin("getBrokerConfig", "-n", ns, "-b", addr_of(cluster, "broker-b")),
        mqadmin("getBrokerConfig", "-n", ns, "-c", "DefaultCluster", "--json"),
    )
    for outcome in (listed, as_json, status, status_all, config, config_json):
        assert outcome.code == 0, outcome.err

    header, *rows = listed.lines
    assert header.split() == [
        "#Cluster", "Name", "#Broker", "Name", "#BID", "#Addr", "#Version",
        "#InTPS", "#OutTPS", "#InTotal", "#OutTotal", "#Runtime",
    ]  # fmt: skip
    assert [row.split()[:5] for row in rows] == [
        ["DefaultCluster", "broker-a", "0", addr_of(cluster, "broker-a"), "V4_9_4"],
        ["DefaultCluster", "broker-b", "0", addr_of(cluster, "broker-b"), "V4_9_4"],
    ]
    # Aligned: every column starts where its header does.
    assert rows[0].index(addr_of(cluster, "broker-a")) == header.index("#Addr")
    document = json.loads(as_json.out)
    assert document["clusterAddrTable"] == {"DefaultCluster": ["broker-a", "broker-b"]}
    assert [(b["brokerName"], b["addr"], b["runtimeInfo"]["brokerName"]) for b in document["brokers"]] == [
        ("broker-a", addr_of(cluster, "broker-a"), "broker-a"),
        ("broker-b", addr_of(cluster, "broker-b"), "broker-b"),
    ]

    stats = {key.strip(): value for key, value in (line.split(": ", 1) for line in status.lines)}
    assert stats["brokerName"] == "broker-a"
    assert stats["brokerAddr"] == addr_of(cluster, "broker-a")
    assert {addr: stats["brokerName"] for addr, stats in json.loads(status_all.out).items()} == {
        addr_of(cluster, "broker-a"): "broker-a",
        addr_of(cluster, "broker-b"): "broker-b",
    }

    assert config.lines[0] == f"============{addr_of(cluster, 'broker-b')}============"
    settings = {k.strip(): v.strip() for k, v in (line.split("=  ", 1) for line in config.lines[1:] if line)}
    assert settings["brokerName"] == "broker-b"
    assert settings["listenPort"] == str(cluster.brokers["broker-b"].port)
    configs = json.loads(config_json.out)
    assert {addr: c["brokerName"] for addr, c in configs.items()} == {
        addr_of(cluster, "broker-a"): "broker-a",
        addr_of(cluster, "broker-b"): "broker-b",
    }


async def test_topic_lifecycle(cluster: Cluster) -> None:
    ns = cluster.namesrv_addr
    topic = unique("CliTopic")
    created = await mqadmin(
        "updateTopic", "-n", ns, "-c", "DefaultCluster", "-t", topic, "-r", "3", "-w", "3"
    )
    assert created.code == 0, created.err
    assert created.lines == [
        f"create topic to {addr_of(cluster, 'broker-a')} success.",
        f"create topic to {addr_of(cluster, 'broker-b')} success.",
        f"TopicConfig [topicName={topic}, readQueueNums=3, writeQueueNums=3, perm=RW-, "
        "topicFilterType=SINGLE_TAG, topicSysFlag=0, order=false, attributes={}]",
    ]

    listed, listed_json, route, route_list, status = await asyncio.gather(
        mqadmin("topicList", "-n", ns),
        mqadmin("topicList", "-n", ns, "--json"),
        mqadmin("topicRoute", "-n", ns, "-t", topic),
        mqadmin("topicRoute", "-n", ns, "-t", topic, "-l"),
        mqadmin("topicStatus", "-n", ns, "-t", topic),
    )
    assert topic in listed.lines
    assert topic in json.loads(listed_json.out)["topicList"]
    document = json.loads(route.out)  # RocketMQ prints the route as JSON by default
    assert sorted(
        (q["brokerName"], q["readQueueNums"], q["writeQueueNums"], q["perm"]) for q in document["queueDatas"]
    ) == [
        ("broker-a", 3, 3, 6),
        ("broker-b", 3, 3, 6),
    ]
    assert route_list.lines[0].split() == [
        "#ClusterName", "#BrokerName", "#BrokerAddrs", "#ReadQueue", "#WriteQueue", "#Perm",
    ]  # fmt: skip
    assert [line.split() for line in route_list.lines[1:3]] == [
        ["DefaultCluster", "broker-a", f"0={addr_of(cluster, 'broker-a')}", "3", "3", "6"],
        ["DefaultCluster", "broker-b", f"0={addr_of(cluster, 'broker-b')}", "3", "3", "6"],
    ]
    assert route_list.lines[-1] == "Total: 2 brokers, 6 read queues, 6 write queues"
    assert status.lines[0].split() == [
        "#Broker",
        "Name",
        "#QID",
        "#Min",
        "Offset",
        "#Max",
        "Offset",
        "#Last",
        "Updated",
    ]
    assert [line.split() for line in status.lines[1:]] == [
        [broker, str(qid), "0", "0"] for broker in ("broker-a", "broker-b") for qid in range(3)
    ]

    # One broker only, other counts and read-only: the route shows both brokers' settings.
    changed = await mqadmin(
        "updateTopic",
        "-n",
        ns,
        "-b",
        addr_of(cluster, "broker-a"),
        "-t",
        topic,
        "-r",
        "5",
        "-w",
        "5",
        "-p",
        "4",
        "--json",
    )
    assert changed.code == 0, changed.err
    assert json.loads(changed.out)["topicConfig"]["perm"] == 4
    route = await mqadmin("topicRoute", "-n", ns, "-t", topic, "--json")
    assert sorted(
        (q["brokerName"], q["readQueueNums"], q["perm"]) for q in json.loads(route.out)["queueDatas"]
    ) == [
        ("broker-a", 5, 4),
        ("broker-b", 3, 6),
    ]

    deleted = await mqadmin("deleteTopic", "-n", ns, "-t", topic, "-c", "DefaultCluster")
    assert deleted.code == 0, deleted.err
    assert deleted.lines == [
        f"delete topic [{topic}] from cluster [DefaultCluster] success.",
        f"delete topic [{topic}] from NameServer success.",
    ]
    gone, listed = await asyncio.gather(
        mqadmin("topicRoute", "-n", ns, "-t", topic), mqadmin("topicList", "-n", ns)
    )
    assert gone.code == 1 and gone.out == ""
    assert "TOPIC_NOT_EXIST" in single_line(gone.err)
    assert topic not in listed.lines


async def test_send_and_query_messages(cluster: Cluster, admin: Admin, tmp_path: Path) -> None:
    ns = cluster.namesrv_addr
    topic = unique("CliMessages")
    await admin.create_topic(topic, 2, broker_addr=addr_of(cluster, "broker-a"))
    sent = await mqadmin(
        "sendMessage", "-n", ns, "-t", topic, "-p", "hello world", "-k", "order-1 customer-9", "-c", "paid",
        "-b", "broker-a", "-i", "0", "--json",
    )  # fmt: skip
    assert sent.code == 0, sent.err
    first = json.loads(sent.out)
    assert (first["sendStatus"], first["brokerName"], first["queueId"], first["queueOffset"]) == (
        "SEND_OK",
        "broker-a",
        0,
        0,
    )
    pinned = await mqadmin(
        "sendMessage", "-n", ns, "-t", topic, "-p", "second", "-c", "refunded", "-b", "broker-a", "-i", "1"
    )
    assert pinned.code == 0, pinned.err
    header, row = pinned.lines
    assert header.split() == ["#Broker", "Name", "#QID", "#Send", "Result", "#MsgId"]
    broker, qid, status, second_id = row.split()
    assert (broker, qid, status) == ("broker-a", "1", "SEND_OK")

    async def indexed() -> bool:
        try:
            return len(await admin.query_messages_by_key(topic, "customer-9")) == 1
        except QueryNotFoundError:
            return False

    await wait_until(indexed)  # the broker builds its index asynchronously
    body_dir = str(tmp_path / "bodies")
    (
        by_key,
        by_key_json,
        status,
        by_offset_id,
        by_unique_id,
        no_topic,
        by_offset,
        past_end,
    ) = await asyncio.gather(
        mqadmin("queryMsgByKey", "-n", ns, "-t", topic, "-k", "customer-9"),
        mqadmin("queryMsgByKey", "-n", ns, "-t", topic, "-k", "order-1", "--json"),
        mqadmin("topicStatus", "-n", ns, "-t", topic, "--json"),
        mqadmin("queryMsgById", "-n", ns, "-i", first["offsetMsgId"], "--body-dir", body_dir),
        mqadmin("queryMsgById", "-n", ns, "-i", first["msgId"], "-t", topic, "--json"),
        mqadmin("queryMsgById", "-n", ns, "-i", first["msgId"]),
        mqadmin("queryMsgByOffset", "-n", ns, "-t", topic, "-b", "broker-a", "-i", "1", "-o", "0", "--json"),
        mqadmin("queryMsgByOffset", "-n", ns, "-t", topic, "-b", "broker-a", "-i", "1", "-o", "7"),
    )
    assert [line.split() for line in by_key.lines] == [
        ["#Message", "ID", "#QID", "#Offset"],
        [first["msgId"], str(first["queueId"]), str(first["queueOffset"])],
    ]
    assert [m["msgId"] for m in json.loads(by_key_json.out)["messages"]] == [first["msgId"]]
    assert [
        (q["queueId"], q["minOffset"], q["maxOffset"]) for q in json.loads(status.out)["offsetTable"]
    ] == [
        (0, 0, 1),
        (1, 0, 1),
    ]
    fields = dict(re.split(r":\s+", line, maxsplit=1) for line in by_offset_id.lines if line)
    assert fields["OffsetID"] == first["offsetMsgId"]
    assert fields["MsgId"] == first["msgId"]
    assert (fields["Topic"], fields["Tags"], fields["Keys"]) == (topic, "[paid]", "[order-1 customer-9]")
    assert fields["Queue ID"] == str(first["queueId"]) and fields["Queue Offset"] == str(first["queueOffset"])
    assert fields["Store Host"] == addr_of(cluster, "broker-a")
    assert await asyncio.to_thread(Path(fields["Message Body Path"]).read_bytes) == b"hello world"
    [message] = json.loads(by_unique_id.out)["messages"]
    assert (message["body"], message["tags"], message["keys"]) == (
        "hello world",
        "paid",
        ["order-1", "customer-9"],
    )
    assert no_topic.code == 1 and "-t TOPIC" in single_line(no_topic.err)
    [at_offset] = json.loads(by_offset.out)["messages"]
    assert (at_offset["msgId"], at_offset["body"], at_offset["queueId"], at_offset["queueOffset"]) == (
        second_id,
        "second",
        1,
        0,
    )
    assert past_end.code == 1 and past_end.out == ""
    assert "no message at offset 7" in single_line(past_end.err)

    printed, printed_paid, printed_json, consumed, consumed_queue = await asyncio.gather(
        mqadmin("printMsg", "-n", ns, "-t", topic),
        mqadmin("printMsg", "-n", ns, "-t", topic, "-s", "paid"),
        mqadmin("printMsg", "-n", ns, "-t", topic, "--json"),
        mqadmin("consumeMessage", "-n", ns, "-t", topic, "-c", "1", "--json"),
        mqadmin("consumeMessage", "-n", ns, "-t", topic, "-b", "broker-a", "-i", "1", "-o", "0"),
    )
    bodies = [line.rsplit("BODY: ", 1)[1] for line in printed.lines if line.startswith("MSGID: ")]
    assert sorted(bodies) == ["hello world", "second"]
    assert [line for line in printed.lines if line.startswith("minOffset=")] == [
        f"minOffset=0, maxOffset=1, MessageQueue [topic={topic}, brokerName=broker-a, queueId=0]",
        f"minOffset=0, maxOffset=1, MessageQueue [topic={topic}, brokerName=broker-a, queueId=1]",
    ]
    assert [line.rsplit("BODY: ", 1)[1] for line in printed_paid.lines if line.startswith("MSGID: ")] == [
        "hello world"
    ]
    queues = json.loads(printed_json.out)["queues"]
    assert sum(len(q["messages"]) for q in queues) == 2
    assert len(json.loads(consumed.out)["messages"]) == 1  # -c 1
    assert "Consume ok" in consumed_queue.lines
    assert [line.split()[1] for line in consumed_queue.lines if line.startswith("MSGID: ")] == [second_id]


async def test_consumer_progress_connection_and_reset(cluster: Cluster, admin: Admin) -> None:
    ns = cluster.namesrv_addr
    topic = unique("CliProgress")
    group = unique("cli_cg")
    await admin.create_topic(topic, 2)  # two queues on each broker
    queues = await admin.queues(topic)
    assert len(queues) == 4
    first_round = [5, 3, 4, 2]
    second_round = [2, 0, 1, 3]
    before = int(time.time() * 1000) - 1

    async def produce(counts: list[int]) -> None:
        async with Producer(unique("cli_pg"), ns) as producer:
            for queue, count in zip(queues, counts):
                for i in range(count):
                    await producer.send(Message(topic, f"{queue.queue_id}-{i}".encode()), queue=queue)

    await produce(first_round)
    received: list[MessageExt] = []
    all_in = asyncio.Event()
    consumer = PushConsumer(group, ns)
    consumer.subscribe(topic, "*")

    @consumer.listener
    def handle(messages: list[MessageExt]) -> ConsumeResult:
        received.extend(messages)
        if len(received) >= sum(first_round):
            all_in.set()
        return ConsumeResult.SUCCESS

    async with consumer:
        await asyncio.wait_for(all_in.wait(), 30)
        connection, on_broker = await asyncio.gather(
            mqadmin("consumerConnection", "-n", ns, "-g", group),
            mqadmin(
                "consumerConnection", "-n", ns, "-g", group, "-b", addr_of(cluster, "broker-b"), "--json"
            ),
        )
        assert connection.code == 0, connection.err
        assert connection.lines[0].split() == ["#ClientId", "#ClientAddr", "#Language", "#Version"]
        assert connection.lines[1].split()[0] == consumer.client_id
        assert connection.lines[1].split()[2:] == ["PYTHON", "V4_9_4"]
        assert [topic, "*"] in [line.split() for line in connection.lines]
        assert connection.lines[-3:] == [
            "ConsumeType: CONSUME_PASSIVELY",
            "MessageModel: CLUSTERING",
            "ConsumeFromWhere: CONSUME_FROM_LAST_OFFSET",
        ]
        assert [c["clientId"] for c in json.loads(on_broker.out)["connectionSet"]] == [consumer.client_id]
    # shutdown committed the consumed offsets; now some more arrive, which nobody consumes
    await produce(second_round)

    progress, progress_json, groups = await asyncio.gather(
        mqadmin("consumerProgress", "-n", ns, "-g", group, "-t", topic),
        mqadmin("consumerProgress", "-n", ns, "-g", group, "-t", topic, "--json"),
        mqadmin("consumerProgress", "-n", ns, "--json"),
    )
    assert progress.code == 0, progress.err
    document = json.loads(progress_json.out)
    expected = [
        (q.broker_name, q.queue_id, a + b, a, b) for q, a, b in zip(queues, first_round, second_round)
    ]
    assert [
        (e["brokerName"], e["queueId"], e["brokerOffset"], e["consumerOffset"], e["diff"])
        for e in document["offsetTable"]
    ] == expected
    produced, consumed = sum(first_round) + sum(second_round), len(received)
    assert document["diffTotal"] == produced - consumed == sum(second_round)
    assert [line.split()[:6] for line in progress.lines[1:5]] == [
        [topic, broker, str(qid), str(total), str(done), str(diff)]
        for broker, qid, total, done, diff in expected
    ]
    assert progress.lines[-1] == f"Diff Total: {produced - consumed}"
    [row] = [g for g in json.loads(groups.out)["groups"] if g["group"] == group]
    assert (row["count"], row["diffTotal"]) == (0, sum(second_round))  # offline now

    # Back to the start: everything is lag again; then to the end: no lag at all.
    # RocketMQ's time format, local time, to the millisecond
    java_time = datetime.fromtimestamp(before / 1000).strftime("%Y-%m-%d#%H:%M:%S:%f")[:-3]
    rewound = await mqadmin("resetOffsetByTime", "-n", ns, "-g", group, "-t", topic, "-s", java_time)
    assert rewound.code == 0, rewound.err
    assert rewound.lines[0] == (
        f"rollback consumer offset by specified group[{group}], topic[{topic}], force[true], "
        f"timestamp(string)[{java_time}], timestamp(long)[{before}]"
    )
    assert [line.split() for line in rewound.lines[2:]] == [
        [q.broker_name, str(q.queue_id), "0"] for q in queues
    ]
    lag = json.loads((await mqadmin("consumerProgress", "-n", ns, "-g", group, "-t", topic, "--json")).out)
    assert lag["diffTotal"] == produced
    ended = await mqadmin("resetOffsetByTime", "-n", ns, "-g", group, "-t", topic, "-s", "now", "--json")
    assert [e["offset"] for e in json.loads(ended.out)["offsetTable"]] == [
        a + b for a, b in zip(first_round, second_round)
    ]
    lag = json.loads((await mqadmin("consumerProgress", "-n", ns, "-g", group, "-t", topic, "--json")).out)
    assert lag["diffTotal"] == 0


async def subscription_groups(admin: Admin, addr: str) -> dict[str, dict[str, object]]:
    response = await admin.instance.call(addr, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, {})
    table = SubscriptionGroupWrapper.decode(response.body).subscription_group_table
    return {name: config.to_wire() for name, config in table.items()}


async def test_subscription_groups(cluster: Cluster, admin: Admin) -> None:
    ns = cluster.namesrv_addr
    group, single = unique("cli_sg"), unique("cli_sg")
    created = await mqadmin(
        "updateSubGroup", "-n", ns, "-c", "DefaultCluster", "-g", group, "-r", "5", "-q", "2", "-s", "false"
    )
    assert created.code == 0, created.err
    assert created.lines[:2] == [
        f"create subscription group to {addr_of(cluster, 'broker-a')} success.",
        f"create subscription group to {addr_of(cluster, 'broker-b')} success.",
    ]
    assert "retryMaxTimes=5" in created.lines[2] and "consumeEnable=false" in created.lines[2]
    on_one = await mqadmin(
        "updateSubGroup", "-n", ns, "-b", addr_of(cluster, "broker-a"), "-g", single, "--json"
    )
    assert json.loads(on_one.out)["brokerAddrs"] == [addr_of(cluster, "broker-a")]
    for name in ("broker-a", "broker-b"):
        config = (await subscription_groups(admin, addr_of(cluster, name)))[group]
        assert (config["retryMaxTimes"], config["retryQueueNums"], config["consumeEnable"]) == (5, 2, False)
    assert single in await subscription_groups(admin, addr_of(cluster, "broker-a"))
    assert single not in await subscription_groups(admin, addr_of(cluster, "broker-b"))

    deleted, deleted_one = await asyncio.gather(
        mqadmin("deleteSubGroup", "-n", ns, "-c", "DefaultCluster", "-g", group),
        mqadmin("deleteSubGroup", "-n", ns, "-b", addr_of(cluster, "broker-a"), "-g", single),
    )
    assert deleted.code == 0 and deleted_one.code == 0, deleted.err + deleted_one.err
    assert (
        f"delete subscription group [{group}] from broker [{addr_of(cluster, 'broker-b')}] in cluster [DefaultCluster] success."
        in deleted.lines
    )
    assert deleted_one.lines == [
        f"delete subscription group [{single}] from broker [{addr_of(cluster, 'broker-a')}] success."
    ]
    for name in ("broker-a", "broker-b"):
        remaining = await subscription_groups(admin, addr_of(cluster, name))
        assert group not in remaining and single not in remaining


async def kv_value(admin: Admin, namespace: str, key: str) -> str | None:
    try:
        response = await admin.instance.call_namesrv(
            RequestCode.GET_KV_CONFIG, {"namespace": namespace, "key": key}
        )
    except QueryNotFoundError:
        return None
    return response.ext_fields["value"]


async def test_kv_config_and_ordered_topic_conf(cluster: Cluster, admin: Admin) -> None:
    ns = cluster.namesrv_addr
    key = unique("key")
    updated = await mqadmin("updateKvConfig", "-n", ns, "-s", "CLI_TEST", "-k", key, "-v", "v1")
    assert updated.code == 0 and updated.lines == ["create or update kv config to namespace success."]
    assert await kv_value(admin, "CLI_TEST", key) == "v1"
    deleted = await mqadmin("deleteKvConfig", "-n", ns, "-s", "CLI_TEST", "-k", key)
    assert deleted.code == 0 and deleted.lines == ["delete kv config from namespace success."]
    assert await kv_value(admin, "CLI_TEST", key) is None

    topic = unique("CliOrdered")
    ordered = await mqadmin(
        "updateTopic", "-n", ns, "-c", "DefaultCluster", "-t", topic, "-r", "4", "-w", "4", "-o", "true"
    )
    assert ordered.code == 0, ordered.err
    assert "set cluster orderConf. isOrder=true, orderConf=[broker-a:4;broker-b:4]" in ordered.lines
    assert await kv_value(admin, "ORDER_TOPIC_CONFIG", topic) == "broker-a:4;broker-b:4"
    # One broker changes its count: the other broker's entry stays.
    await mqadmin(
        "updateTopic",
        "-n",
        ns,
        "-b",
        addr_of(cluster, "broker-b"),
        "-t",
        topic,
        "-r",
        "2",
        "-w",
        "2",
        "-o",
        "true",
    )
    assert await kv_value(admin, "ORDER_TOPIC_CONFIG", topic) == "broker-a:4;broker-b:2"


async def test_failures_give_one_line_and_exit_1(cluster: Cluster, dead_address: str) -> None:
    ns = cluster.namesrv_addr
    dead = dead_address
    outcomes = await asyncio.gather(
        mqadmin("topicRoute", "-n", ns, "-t", "NoSuchTopic_cli"),
        mqadmin("topicStatus", "-n", ns, "-t", "NoSuchTopic_cli"),
        mqadmin("consumerProgress", "-n", ns, "-g", "no_such_group_cli"),
        mqadmin("consumerConnection", "-n", ns, "-g", "no_such_group_cli"),
        mqadmin("clusterList", "-n", ns, "-c", "NoSuchCluster"),
        mqadmin("topicList", "-n", dead),
        mqadmin("clusterList"),  # no -n and no NAMESRV_ADDR
    )
    reasons = []
    for outcome in outcomes:
        assert outcome.code == 1, outcome
        assert outcome.out == ""
        reasons.append(single_line(outcome.err))
    route, status, progress, connection, cluster_list, unreachable, no_namesrv = reasons
    assert route.startswith("mqadmin topicRoute: ") and "TOPIC_NOT_EXIST" in route
    assert status.startswith("mqadmin topicStatus: ") and "TOPIC_NOT_EXIST" in status
    assert "no_such_group_cli" in progress and "no_such_group_cli" in connection
    assert "NoSuchCluster" in cluster_list
    assert unreachable.startswith("mqadmin topicList: cannot connect to " + dead)
    assert "name server" in no_namesrv


async def test_bad_arguments_print_usage_and_exit_2() -> None:
    outcomes = await asyncio.gather(
        mqadmin("noSuchCommand"),
        mqadmin("topicRoute", "-n", "127.0.0.1:9876"),
        mqadmin("updateTopic", "-n", "127.0.0.1:9876", "-t", "T"),
        mqadmin("updateTopic", "-n", "127.0.0.1:9876", "-t", "T", "-c", "C", "-b", "127.0.0.1:10911"),
        mqadmin("updateTopic", "-n", "127.0.0.1:9876", "-t", "T", "-c", "C", "-r", "many"),
        mqadmin("updateTopic", "-n", "127.0.0.1:9876", "-t", "T", "-c", "C", "-o", "maybe"),
        mqadmin(
            "queryMsgByOffset", "-n", "127.0.0.1:9876", "-t", "T", "-b", "broker-a", "-i", "0", "-o", "-1"
        ),
    )
    for outcome in outcomes:
        assert outcome.code == 2, outcome
        assert outcome.out == ""
        assert "usage: mqadmin" in outcome.err
    assert "the sub command noSuchCommand does not exist" in outcomes[0].err
    assert "-t" in outcomes[1].err and "required" in outcomes[1].err
    assert "exactly one of -b or -c" in outcomes[2].err and "exactly one of -b or -c" in outcomes[3].err


async def test_no_arguments_or_help_list_the_commands_as_apache_does() -> None:
    bare, helped, usage, unknown, misspelt = await asyncio.gather(
        mqadmin(),
        mqadmin("help"),
        mqadmin("help", "consumerProgress"),
        mqadmin("help", "noSuchCommand"),
        mqadmin("topicRout", "-n", "127.0.0.1:9876"),
    )
    assert bare.code == 0 and bare.err == ""
    assert helped.out == bare.out and helped.code == 0
    # Apache's printHelp: a header, "   %-35s %s" per command, a blank line, a pointer to help.
    header, *rows, blank, footer = bare.lines
    assert header == "The most commonly used mqadmin commands are:"
    assert blank == ""
    assert footer == "See 'mqadmin help <command>' for more information on a specific command."
    listed = {}
    for row in rows:
        match = re.fullmatch(r"   (\S+) +(\S.*)", row)
        assert match, row
        assert row.index(match[2]) == 3 + max(35, len(match[1])) + 1, row
        listed[match[1]] = match[2]
    assert len(listed) == len(rows)
    assert listed["updateTopic"] == "Update or create topic."
    assert listed["consumerProgress"] == "Query consumers's progress, speed."
    assert listed["queryMsgTraceById"] and listed["exportMetrics"] and listed["getAclConfig"]
    # Every listed command is one the tool runs: its usage names it.
    assert usage.code == 0
    assert usage.out.startswith("usage: mqadmin consumerProgress") and "--groupName" in usage.out
    assert "Query consumers's progress, speed." in usage.out
    assert unknown.code == 2 and unknown.out == ""
    assert unknown.err.strip() == (
        "mqadmin: the sub command noSuchCommand does not exist; 'mqadmin help' lists the commands"
    )
    assert misspelt.code == 2 and "did you mean topicRoute" in misspelt.err


async def test_topic_list_with_clusters_and_groups(cluster: Cluster, admin: Admin) -> None:
    ns = cluster.namesrv_addr
    topic, group = unique("CliTopicGroups"), unique("cli_tg")
    await admin.create_topic(topic, 1, broker_addr=addr_of(cluster, "broker-a"))
    await admin.update_consumer_offset(
        group, MessageQueue(topic=topic, broker_name="broker-a", queue_id=0), 0
    )
    listed = await mqadmin("topicList", "-n", ns, "-c", "--json")
    rows = json.loads(listed.out)["topics"]
    assert {"clusterName": "DefaultCluster", "topic": topic, "consumerGroup": group} in rows
    assert not any(r["topic"].startswith(("%RETRY%", "%DLQ%")) for r in rows)


async def test_rocketmq5_batch_updates_and_consume_mode(
    cluster: Cluster, admin: Admin, tmp_path: Path
) -> None:
    """updateTopicList and updateSubGroupList create from a JSON file in one request per
    master; setConsumeMode stores the group's message request mode, read back from the broker."""
    ns = cluster.namesrv_addr
    a, b = addr_of(cluster, "broker-a"), addr_of(cluster, "broker-b")
    topics, groups = [unique("cli_tl"), unique("cli_tl")], [unique("cli_gl"), unique("cli_gl")]
    topic_file, group_file = tmp_path / "topics.json", tmp_path / "groups.json"
    topic_file.write_text(
        json.dumps([{"topicName": t, "readQueueNums": 3, "writeQueueNums": 3, "perm": 6} for t in topics])
    )
    group_file.write_text(json.dumps([{"groupName": g, "retryMaxTimes": 7} for g in groups]))

    made = await mqadmin("updateTopicList", "-n", ns, "-c", "DefaultCluster", "-f", str(topic_file))
    assert made.code == 0, made.err
    assert sorted(made.lines) == sorted(
        f"submit batch of topic config to {addr} success, please check the result later." for addr in (a, b)
    )
    for t in topics:
        await wait_until(lambda t=t: _routed_queues(admin, t, 6), timeout=15)

    grouped = await mqadmin("updateSubGroupList", "-n", ns, "-b", a, "-f", str(group_file))
    assert grouped.code == 0, grouped.err
    assert grouped.lines == [f"submit batch of group config to {a} success, please check the result later."]
    on_a = await subscription_groups(admin, a)
    assert [on_a[g]["retryMaxTimes"] for g in groups] == [7, 7]
    assert not set(groups) & set(await subscription_groups(admin, b))

    missing = await mqadmin("updateTopicList", "-n", ns, "-b", a, "-f", str(tmp_path / "nope.json"))
    assert missing.lines == [f"the file path {tmp_path / 'nope.json'} does not exists"]

    mode = await mqadmin(
        "setConsumeMode", "-n", ns, "-b", b, "-t", topics[0], "-g", groups[0], "-m", "POP", "-q", "2"
    )
    assert mode.code == 0, mode.err
    assert mode.lines == [
        f"set consume mode to {b} success.",
        f"topic[{topics[0]}] group[{groups[0]}] consume mode[POP] popShareQueueNum[2]",
    ]
    stored = await admin.message_request_modes(b)
    assert stored[topics[0]][groups[0]] == {
        "consumerGroup": groups[0],
        "mode": "POP",
        "popShareQueueNum": 2,
        "topic": topics[0],
    }


async def test_update_topic_attributes(cluster: Cluster, admin: Admin) -> None:
    """updateTopic -a (RocketMQ 5): the broker keeps the attribute, the tool prints the config
    with it as Apache 5.3.3's does, and a change the broker refuses fails with its reason."""
    ns, a = cluster.namesrv_addr, addr_of(cluster, "broker-a")
    topic = unique("cli_attr")
    made = await mqadmin("updateTopic", "-n", ns, "-b", a, "-t", topic, "-a", "+message.type=FIFO")
    assert made.code == 0, made.err
    assert made.lines[-1].endswith(", order=false, attributes={+message.type=FIFO}]"), made.lines
    answer = await admin.instance.call(a, RequestCode.GET_TOPIC_CONFIG, {"topic": topic})
    assert json.loads(answer.body)["attributes"] == {"message.type": "FIFO"}
    refused = await mqadmin("updateTopic", "-n", ns, "-b", a, "-t", topic, "-a", "+queue.type=BatchCQ")
    assert refused.code != 0 and "attempt to update an unchangeable attribute" in refused.err, refused
    malformed = await mqadmin("updateTopic", "-n", ns, "-b", a, "-t", topic, "-a", "message.type=FIFO")
    assert malformed.code != 0 and "add/alter attribute format is wrong" in malformed.err, malformed


async def test_cold_data_commands(cluster: Cluster) -> None:
    """updateColdDataFlowCtrGroupConfig / getColdDataFlowCtrInfo / removeColdDataFlowCtrGroupConfig
    and setCommitLogReadAheadMode (RocketMQ 5) against the broker's tables."""
    ns, a = cluster.namesrv_addr, addr_of(cluster, "broker-a")
    group = unique("cli_cold")
    updated = await mqadmin("updateColdDataFlowCtrGroupConfig", "-n", ns, "-b", a, "-g", group, "-v", "4096")
    assert updated.lines == [f"updateColdDataFlowCtrGroupConfig success, {a}"], updated
    info = await mqadmin("getColdDataFlowCtrInfo", "-n", ns, "-b", a, "--json")
    assert info.code == 0, info.err
    assert json.loads(info.out)[a]["configTable"] == {group: 4096}
    removed = await mqadmin("removeColdDataFlowCtrGroupConfig", "-n", ns, "-b", a, "-g", group)
    assert removed.lines == [f"remove broker cold read threshold success, {a}"], removed
    info = await mqadmin("getColdDataFlowCtrInfo", "-n", ns, "-b", a, "--json")
    assert group not in json.loads(info.out)[a]["configTable"]
    random_read = await mqadmin("setCommitLogReadAheadMode", "-n", ns, "-b", a, "-m", "1")
    assert random_read.code == 0, random_read.err
    assert (await mqadmin("setCommitLogReadAheadMode", "-n", ns, "-b", a, "-m", "0")).code == 0


async def test_ha_status_and_reset_master_flush_offset(cluster: Cluster) -> None:
    """haStatus prints a master's replication block as Apache 5's tool does (no slave here);
    resetMasterFlushOffset answers as Apache's does on a master."""
    ns, a = cluster.namesrv_addr, addr_of(cluster, "broker-a")
    status = await mqadmin("haStatus", "-n", ns, "-b", a)
    assert status.code == 0, status.err
    assert status.lines[:5] == [
        "",
        f"#MasterAddr\t{a}",
        status.lines[2],
        "#SlaveNum\t0",
        "#InSyncSlaveNum\t0",
    ]
    assert re.fullmatch(r"#MasterCommitLogMaxOffset\t\d+", status.lines[2]), status.lines
    assert status.lines[5].split() == [
        "#SlaveAddr", "#SlaveAckOffset", "#Diff", "#TransferSpeed(KB/s)", "#Status", "#TransferFromWhere"
    ]  # fmt: skip
    reset = await mqadmin("resetMasterFlushOffset", "-n", ns, "-b", a, "-o", "0")
    assert reset.lines == ["reset master flush offset to 0 success"], reset


async def test_update_static_topic(cluster: Cluster, admin: Admin) -> None:
    """updateStaticTopic deals global queues over the cluster's brokers, grows them keeping the
    ones dealt, and refuses to shrink or to change nothing; the route carries every mapping."""
    ns = cluster.namesrv_addr
    topic = unique("cli_static")
    made = await mqadmin("updateStaticTopic", "-n", ns, "-c", "DefaultCluster", "-t", topic, "-qn", "4")
    assert made.code == 0, made.err
    assert [line.split(" file ")[0] for line in made.lines] == [
        "The old mapping data is written to",
        "The new mapping data is written to",
    ]
    files = [Path(line.split(" file ")[1]) for line in made.lines]
    assert all(await asyncio.gather(*(asyncio.to_thread(f.exists) for f in files)))

    async def leaders() -> dict[int, str]:
        route = await admin.instance.fetch_route(topic)
        return {
            gid: name
            for name, info in (route.topic_queue_mapping_by_broker or {}).items()
            for gid in info.curr_id_map
        }

    await wait_until(lambda: _has_queues(leaders, 4), timeout=15)
    first = await leaders()
    assert sorted(first) == [0, 1, 2, 3] and set(first.values()) == {"broker-a", "broker-b"}
    grown = await mqadmin("updateStaticTopic", "-n", ns, "-c", "DefaultCluster", "-t", topic, "-qn", "6")
    assert grown.code == 0, grown.err
    await wait_until(lambda: _has_queues(leaders, 6), timeout=15)
    assert {gid: name for gid, name in (await leaders()).items() if gid < 4} == first, "dealt queues stay"
    same = await mqadmin("updateStaticTopic", "-n", ns, "-c", "DefaultCluster", "-t", topic, "-qn", "6")
    assert same.code != 0 and "equal the existed queue num" in same.err, same
    fewer = await mqadmin("updateStaticTopic", "-n", ns, "-c", "DefaultCluster", "-t", topic, "-qn", "2")
    assert fewer.code != 0 and "Cannot decrease the queue num for static topic 2 < 6" in fewer.err, fewer


async def test_remapping_a_static_topic_loses_nothing(cluster: Cluster, admin: Admin) -> None:
    """A static topic of four global queues on broker-a, remapped over both brokers: two queues
    move to broker-b, new sends land there at logical offsets past a block boundary, and a
    consumer reads every message once, the old ones of the moved queues asked of broker-a."""
    ns = cluster.namesrv_addr
    topic = unique("cli_remap")
    made = await mqadmin("updateStaticTopic", "-n", ns, "-b", "broker-a", "-t", topic, "-qn", "4")
    assert made.code == 0, made.err

    async def leaders() -> dict[int, str]:
        route = await admin.instance.fetch_route(topic)
        found: dict[int, tuple[int, str]] = {}
        for name, info in (route.topic_queue_mapping_by_broker or {}).items():
            for gid in info.curr_id_map:
                if gid not in found or info.epoch > found[gid][0]:
                    found[gid] = (info.epoch, name)
        return {gid: name for gid, (_, name) in found.items()}

    await wait_until(lambda: _has_queues(leaders, 4), timeout=15)
    sent: dict[str, tuple[int, int]] = {}
    async with Producer(unique("remap_p"), namesrv=ns) as producer:
        for i in range(8):
            result = await producer.send(Message(topic, b"before %d" % i))
            sent[result.msg_id] = (result.queue.queue_id, result.queue_offset)
        remapped = await mqadmin("remappingStaticTopic", "-n", ns, "-c", "DefaultCluster", "-t", topic)
        assert remapped.code == 0, remapped.err

        async def spread() -> bool:
            return sorted((await leaders()).values()) == ["broker-a", "broker-a", "broker-b", "broker-b"]

        await wait_until(spread, timeout=15)
        moved = {gid for gid, name in (await leaders()).items() if name == "broker-b"}
        # this producer's route is stale: a send to a moved queue is refused (NOT_LEADER_FOR_QUEUE)
        # and tried again elsewhere, and the route is read again
        for i in range(8):
            result = await producer.send(Message(topic, b"stale %d" % i))
            sent[result.msg_id] = (result.queue.queue_id, result.queue_offset)
    async with Producer(unique("remap_p2"), namesrv=ns) as producer:
        for i in range(8):
            result = await producer.send(Message(topic, b"after %d" % i))
            sent[result.msg_id] = (result.queue.queue_id, result.queue_offset)
    after = [offset for gid, offset in sent.values() if gid in moved and offset >= 10_000]
    assert after, f"no send landed on a moved queue past its old end: {sent}"

    received: dict[str, tuple[int, int]] = {}
    done = asyncio.Event()
    consumer = PushConsumer(unique("remap_c"), namesrv=ns, consume_from=ConsumeFrom.FIRST_OFFSET)
    consumer.subscribe(topic, "*")

    @consumer.listener
    async def handle(messages: list[MessageExt]) -> ConsumeResult:
        for msg in messages:
            received[msg.msg_id] = (msg.queue_id, msg.queue_offset)
        if len(received) >= len(sent):
            done.set()
        return ConsumeResult.SUCCESS

    async with consumer:
        await asyncio.wait_for(done.wait(), 60)
    assert received == sent


async def _has_queues(leaders: Callable[[], Awaitable[dict[int, str]]], count: int) -> bool:
    return len(await leaders()) == count


async def _routed_queues(admin: Admin, topic: str, total: int) -> bool:
    try:
        route = await admin.instance.fetch_route(topic)
    except TopicNotExistError:
        return False
    return sum(q.read_queue_nums for q in route.queue_datas) == total
