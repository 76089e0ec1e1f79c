"""``mqproxy``, the cluster mode: separate, stateless proxy processes in front of two of our
brokers. The official 5.x clients talk only to a proxy; the proxy talks remoting to the
brokers it learns from the name server (proxy/cluster.py).

Shown here: a route names the proxy for both brokers' queues; sends through a proxy spread
over both brokers; SimpleConsumer and PushConsumer through a proxy receive everything from
both; a FIFO group keeps its order; a transaction commits and an orphan is checked back
through the proxy; a receipt handle from one proxy is acknowledged through another; a broker
killed with kill -9 under load: sends carry on through the proxy, nothing acknowledged lost.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
import pytest_asyncio
from google.protobuf.duration_pb2 import Duration

from aiorocketmq.broker.grpc import messaging_pb2 as pb
from aiorocketmq.broker.grpc import messaging_pb2_grpc as pb_grpc
from aiorocketmq.client import PullClient
from aiorocketmq.client.admin import Admin
from aiorocketmq.protocol.body import SubscriptionGroupConfig
from aiorocketmq.protocol.pop import ReceiptHandle
from tests.cluster import Cluster, ProxyProcess, start_mqproxy
from tests.support import ServerProcess

from .conftest import Grpc5, install_py5_client
from .test_go5_client import Go5, assert_fifo, build_go5
from .test_java5_client import run_java_done
from .test_node5_client import run_node
from .test_py5_producer import check_recall

pytestmark = pytest.mark.asyncio(loop_scope="package")

_names = itertools.count(1)
BROKERS = ("broker-a", "broker-b")


def unique(prefix: str) -> str:
    return f"{prefix}_{os.getpid()}_{next(_names)}"


@dataclass
class ProxiedCluster:
    cluster: Cluster
    proxies: list[ProxyProcess]

    def endpoint(self, i: int = 0) -> str:
        return f"127.0.0.1:{self.proxies[i].grpc_port}"

    def client(self, i: int = 0) -> Grpc5:
        return Grpc5(self.cluster, self.proxies[i].grpc_port, install_py5_client())


async def start_proxied(root: Path, proxies: int = 2) -> ProxiedCluster:
    cluster = Cluster(root)
    await cluster.start_namesrv()
    await asyncio.gather(
        *(
            cluster.start_broker(
                name,
                transactionCheckInterval=1000,
                transactionTimeOut=1000,
                recallMessageEnable="true",
                enablePropertyFilter="true",
            )
            for name in BROKERS
        )
    )
    started = [await start_mqproxy(cluster.namesrv_addr) for _ in range(proxies)]
    return ProxiedCluster(cluster, started)


async def stop_proxied(proxied: ProxiedCluster) -> None:
    for proxy in proxied.proxies:
        await proxy.stop()
    await proxied.cluster.stop()


@pytest_asyncio.fixture(scope="module", loop_scope="package")
async def proxied(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ProxiedCluster]:
    await asyncio.to_thread(install_py5_client)
    started = await start_proxied(tmp_path_factory.mktemp("mqproxy"))
    try:
        yield started
    finally:
        await stop_proxied(started)


async def create_topic(cluster: Cluster, topic: str, queues: int = 4, **kwargs: object) -> None:
    async with Admin(cluster.namesrv_addr) as admin:
        await admin.create_topic(topic, queues, **kwargs)
        await admin.wait_for_route(topic, brokers=BROKERS, timeout=10)


async def stored_bodies(cluster: Cluster, topic: str) -> dict[str, Counter[str]]:
    found: dict[str, Counter[str]] = {name: Counter() for name in BROKERS}
    async with PullClient(unique("reader"), namesrv=cluster.namesrv_addr) as client:
        for queue in await client.queues(topic):
            end = await client.max_offset(queue)
            async for msg in client.read(queue, 0, end):
                found[queue.broker_name][msg.body.decode()] += 1
    return found


async def test_a_route_names_the_proxy_for_every_broker(proxied: ProxiedCluster) -> None:
    topic = unique("ProxyRoute")
    await create_topic(proxied.cluster, topic, 2)
    async with grpc.aio.insecure_channel(proxied.endpoint()) as channel:
        stub = pb_grpc.MessagingServiceStub(channel)
        # Without endpoints in the request: the proxy's own address.
        response = await stub.QueryRoute(pb.QueryRouteRequest(topic=pb.Resource(name=topic)))
        assert response.status.code == pb.OK, response.status
        assert sorted((q.broker.name, q.id) for q in response.message_queues) == [
            (b, i) for b in BROKERS for i in range(2)
        ]
        assert {a.port for q in response.message_queues for a in q.broker.endpoints.addresses} == {
            proxied.proxies[0].grpc_port
        }
        # With the endpoints the client reached it by (a load balancer's, say): those.
        balancer = pb.Endpoints(scheme=pb.IPv4, addresses=[pb.Address(host="10.1.2.3", port=9081)])
        response = await stub.QueryRoute(
            pb.QueryRouteRequest(topic=pb.Resource(name=topic), endpoints=balancer)
        )
        assert {(a.host, a.port) for q in response.message_queues for a in q.broker.endpoints.addresses} == {
            ("10.1.2.3", 9081)
        }
        missing = await stub.QueryRoute(pb.QueryRouteRequest(topic=pb.Resource(name=unique("NoSuchTopic"))))
        assert missing.status.code == pb.TOPIC_NOT_FOUND, missing.status


async def test_python_client_sends_over_both_brokers_and_receives_everything(proxied: ProxiedCluster) -> None:
    topic, group = unique("ProxyPy5"), unique("cg")
    await create_topic(proxied.cluster, topic, 4)
    bodies = [f"proxy-{i}" for i in range(40)]
    result = await proxied.client(0).run("produce", messages=[{"topic": topic, "body": b} for b in bodies])
    assert result["errors"] == [] and len(result["receipts"]) == 40
    stored = await stored_bodies(proxied.cluster, topic)
    assert sum(stored.values(), Counter()) == Counter(bodies)
    assert all(len(stored[name]) >= 10 for name in BROKERS), {n: len(c) for n, c in stored.items()}

    got = await proxied.client(1).run("simple", topic=topic, group=group, count=40, wait=60)
    assert sorted(m["body"] for m in got["messages"]) == sorted(bodies)
    pushed = await proxied.client(0).run("push", topic=topic, group=unique("push"), count=40, wait=60)
    assert sorted({m["body"] for m in pushed["messages"]}) == sorted(bodies)


async def test_fifo_message_groups_keep_their_order(proxied: ProxiedCluster) -> None:
    topic, group = unique("ProxyFifo"), unique("fifo")
    await create_topic(proxied.cluster, topic, 4, attributes={"+message.type": "FIFO"})
    async with Admin(proxied.cluster.namesrv_addr) as admin:
        await admin.update_subscription_group(
            SubscriptionGroupConfig(group_name=group, consume_message_orderly=True)
        )
    messages = [
        {"topic": topic, "body": f"{g}-{i}", "group": g} for i in range(5) for g in ("ga", "gb", "gc")
    ]
    result = await proxied.client(0).run("produce", messages=messages)
    assert result["errors"] == [], result["errors"]
    got = await proxied.client(1).run("push", topic=topic, group=group, count=15, wait=60)
    bodies = [m["body"] for m in got["messages"]]
    assert sorted(bodies) == sorted(m["body"] for m in messages), f"{len(bodies)} of 15: {bodies}"
    for g in ("ga", "gb", "gc"):
        assert [b for b in bodies if b.startswith(g)] == [f"{g}-{i}" for i in range(5)], bodies


async def test_transactions_commit_and_an_orphan_is_checked_back(proxied: ProxiedCluster) -> None:
    """EndTransaction through the proxy (END_TRANSACTION to the half message's broker); an
    open one checked back by its broker through the proxy (CHECK_TRANSACTION_STATE to the
    proxy's connection, relayed to the client's telemetry stream, answered through it)."""
    topic = unique("ProxyTx")
    await create_topic(proxied.cluster, topic, 4, attributes={"+message.type": "TRANSACTION"})
    commits = [f"c{i}" for i in range(8)]
    orphans = ["o1", "o2", "o3", "o4"]
    result = await proxied.client(0).run(
        "transaction",
        topic=topic,
        commit=commits,
        rollback=["r1", "r2"],
        orphan=orphans,
        wait=40,
        timeout=120,
    )
    assert sorted(set(result["checked"])) == orphans, f"checked: {result['checked']}"
    stored = await stored_bodies(proxied.cluster, topic)
    assert sorted(sum(stored.values(), Counter()).elements()) == sorted(commits + orphans), stored
    assert all(stored[name] for name in BROKERS), stored


async def test_a_changed_invisible_duration_redelivers(proxied: ProxiedCluster) -> None:
    topic, group = unique("ProxyChange"), unique("cg")
    await create_topic(proxied.cluster, topic, 2)
    bodies = [f"change-{i}" for i in range(4)]
    result = await proxied.client(0).run("produce", messages=[{"topic": topic, "body": b} for b in bodies])
    assert result["errors"] == []
    got = await proxied.client(1).run("simple", topic=topic, group=group, count=4, change=2, wait=40)
    assert sorted(m["body"] for m in got["changed"]) == bodies, got["changed"]
    assert sorted(m["body"] for m in got["messages"]) == bodies, got["messages"]
    assert {m["attempt"] for m in got["messages"]} == {2}


async def test_an_sql92_filter_receives_only_what_matches(proxied: ProxiedCluster) -> None:
    """A SimpleConsumer with an SQL92 filter through the proxy: the brokers filter the POP by
    the messages' properties."""
    topic, group = unique("ProxySql"), unique("cg")
    await create_topic(proxied.cluster, topic, 2)
    colors = ["red", "blue"] * 6
    messages = [
        {"topic": topic, "body": f"{c}-{i}", "properties": {"color": c}} for i, c in enumerate(colors)
    ]
    result = await proxied.client(0).run("produce", messages=messages)
    assert result["errors"] == []
    got = await proxied.client(1).run(
        "simple", topic=topic, group=group, count=6, sql="color = 'red'", wait=30
    )
    assert sorted(m["body"] for m in got["messages"]) == sorted(
        m["body"] for m in messages if "red" in m["body"]
    )


async def test_a_recalled_timer_message_is_never_delivered(proxied: ProxiedCluster) -> None:
    """RecallMessage through the proxy: RECALL_MESSAGE to the broker the recall handle names."""
    topic = unique("ProxyRecall")
    await create_topic(proxied.cluster, topic, 2)

    async def read(name: str) -> list[str]:
        return sorted(sum((await stored_bodies(proxied.cluster, name)).values(), Counter()).elements())

    await check_recall(proxied.client(0), topic, read)


async def test_a_receipt_handle_from_one_proxy_is_acknowledged_through_another(
    proxied: ProxiedCluster,
) -> None:
    topic, group = unique("ProxyMove"), unique("cg")
    await create_topic(proxied.cluster, topic, 2)
    result = await proxied.client(0).run("produce", messages=[{"topic": topic, "body": "moving"}])
    assert result["errors"] == []
    metadata = (("x-mq-client-id", unique("mover")),)
    received: list[pb.Message] = []
    async with grpc.aio.insecure_channel(proxied.endpoint(0)) as channel:
        stub = pb_grpc.MessagingServiceStub(channel)
        assignment = await stub.QueryAssignment(
            pb.QueryAssignmentRequest(topic=pb.Resource(name=topic), group=pb.Resource(name=group)),
            metadata=metadata,
        )
        assert assignment.status.code == pb.OK, assignment.status
        for queue in [a.message_queue for a in assignment.assignments]:
            async for answer in stub.ReceiveMessage(
                pb.ReceiveMessageRequest(
                    group=pb.Resource(name=group),
                    message_queue=queue,
                    filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"),
                    batch_size=8,
                    invisible_duration=Duration(seconds=30),
                    long_polling_timeout=Duration(seconds=5),
                ),
                metadata=metadata,
                timeout=30,
            ):
                if answer.HasField("message"):
                    received.append(answer.message)
    assert [m.body for m in received] == [b"moving"]
    handle = received[0].system_properties.receipt_handle
    assert ReceiptHandle.decode(handle).broker_name in BROKERS
    async with grpc.aio.insecure_channel(proxied.endpoint(1)) as channel:
        stub = pb_grpc.MessagingServiceStub(channel)
        ack = await stub.AckMessage(
            pb.AckMessageRequest(
                group=pb.Resource(name=group),
                topic=pb.Resource(name=topic),
                entries=[
                    pb.AckMessageEntry(
                        message_id=received[0].system_properties.message_id, receipt_handle=handle
                    )
                ],
            ),
            metadata=metadata,
        )
        assert ack.status.code == pb.OK, ack.status
        again = await stub.AckMessage(
            pb.AckMessageRequest(
                group=pb.Resource(name=group),
                topic=pb.Resource(name=topic),
                entries=[pb.AckMessageEntry(message_id="x", receipt_handle="not a handle")],
            ),
            metadata=metadata,
        )
        assert again.status.code == pb.INVALID_RECEIPT_HANDLE, again.status


async def test_java_client_through_the_proxy(proxied: ProxiedCluster) -> None:
    topic, group = unique("ProxyJava"), unique("cg")
    await create_topic(proxied.cluster, topic, 4)
    lines = await run_java_done("produce", proxied.endpoint(1), topic, "20")
    assert len([line for line in lines if line.startswith("SENT ")]) == 20
    stored = await stored_bodies(proxied.cluster, topic)
    bodies = [f"java-{i}" for i in range(20)]
    assert sum(stored.values(), Counter()) == Counter(bodies)
    assert all(stored[name] for name in BROKERS), {n: len(c) for n, c in stored.items()}
    lines = await run_java_done("consume", proxied.endpoint(0), topic, group, "20")
    got = [json.loads(line[4:]) for line in lines if line.startswith("MSG ")]
    assert sorted({m["body"] for m in got}) == sorted(bodies)


async def test_go_client_through_the_proxy(proxied: ProxiedCluster, tmp_path: Path) -> None:
    """The Go 5.x client: sends spread over both brokers, its SimpleConsumer receives all of
    them, and its PushConsumer keeps FIFO groups in order, all through a proxy."""
    go5 = Go5(await asyncio.to_thread(build_go5), tmp_path)
    topic, group = unique("ProxyGo"), unique("cg")
    await create_topic(proxied.cluster, topic, 4)
    sent = await go5.run("produce", proxied.endpoint(0), topic=topic, count=40, prefix="g")
    assert sent["errors"] == []
    stored = await stored_bodies(proxied.cluster, topic)
    assert sum(stored.values(), Counter()) == Counter(f"g-{i}" for i in range(40))
    assert all(len(stored[name]) >= 10 for name in BROKERS), {n: len(c) for n, c in stored.items()}
    got = await go5.run("simple_consume", proxied.endpoint(1), topic=topic, group=group, count=40, wait=30)
    assert {m["body"] for m in got["messages"]} == {f"g-{i}" for i in range(40)}, got["errors"]
    assert {m["broker"] for m in got["messages"]} == set(BROKERS)

    fifo_topic, fifo_group = unique("ProxyGoFifo"), unique("fifo")
    await create_topic(proxied.cluster, fifo_topic, 4)
    async with Admin(proxied.cluster.namesrv_addr) as admin:
        await admin.update_subscription_group(
            SubscriptionGroupConfig(group_name=fifo_group, consume_message_orderly=True)
        )
    groups = [f"g{n}" for n in range(6)]
    sent = await go5.run(
        "produce", proxied.endpoint(0), topic=fifo_topic, count=30, prefix="f", groups=groups
    )
    assert sent["errors"] == []
    got = await go5.run(
        "push_consume", proxied.endpoint(0), topic=fifo_topic, group=fifo_group, count=30, wait=40
    )
    assert_fifo(got, groups, 30)


async def test_node_client_through_the_proxy(proxied: ProxiedCluster) -> None:
    topic, group = unique("ProxyNode"), unique("cg")
    await create_topic(proxied.cluster, topic, 4)
    sent = (await run_node("produce", proxied.endpoint(1), topic, "20"))["sent"]
    assert len(sent) == 20 and all(sent)
    stored = await stored_bodies(proxied.cluster, topic)
    bodies = [f"node-{i}" for i in range(20)]
    assert sum(stored.values(), Counter()) == Counter(bodies)
    assert all(stored[name] for name in BROKERS), {n: len(c) for n, c in stored.items()}
    got = (await run_node("consume", proxied.endpoint(0), topic, group, "20"))["messages"]
    assert sorted({m["body"] for m in got}) == sorted(bodies)


async def test_a_broker_killed_under_load_sends_carry_on_through_the_proxy(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """kill -9 of broker-b while the Python 5.x client sends through a proxy, one message every
    50 ms: every send is acknowledged, and every acknowledged message is stored."""
    proxied = await start_proxied(tmp_path_factory.mktemp("mqproxy-kill"), proxies=1)
    try:
        cluster = proxied.cluster
        topic = unique("ProxyKill")
        await create_topic(cluster, topic, 4)
        progress = tmp_path_factory.mktemp("progress") / "sent"
        bodies = [f"kill-{i}" for i in range(120)]
        sending = asyncio.ensure_future(
            proxied.client(0).run(
                "produce",
                messages=[{"topic": topic, "body": body} for body in bodies],
                progress=str(progress),
                interval=0.05,
                timeout=120,
            )
        )
        async with PullClient(unique("watch"), namesrv=cluster.namesrv_addr) as client:
            queues = [q for q in await client.queues(topic) if q.broker_name == "broker-b"]
            while sum([await client.max_offset(q) for q in queues]) < 10:
                assert not sending.done(), sending.result()
                await asyncio.sleep(0.05)
        await cluster.kill_broker("broker-b")
        killed_after = len(progress.read_text().splitlines())
        result = await sending
        assert killed_after < 100, "the sends ended before the kill"
        assert result["errors"] == []
        acked = [receipt["body"] for receipt in result["receipts"]]
        assert acked == bodies
        await cluster.start_broker("broker-b", transactionCheckInterval=1000, transactionTimeOut=1000)
        async with Admin(cluster.namesrv_addr) as admin:
            await admin.wait_for_route(topic, brokers=BROKERS, timeout=30)
        stored = sum((await stored_bodies(cluster, topic)).values(), Counter())
        assert set(acked) <= set(stored), f"acknowledged but lost: {sorted(set(acked) - set(stored))}"
        assert sum(count - 1 for count in stored.values()) <= 1, stored
    finally:
        await stop_proxied(proxied)


async def test_apache_proxy_config_file_and_its_refusals(tmp_path: Path, proxied: ProxiedCluster) -> None:
    """Apache's rmq-proxy.json works as is (its keys this proxy does not use are listed);
    a mistyped key or the local mode is refused with the reason."""
    conf = tmp_path / "rmq-proxy.json"
    conf.write_text(
        json.dumps(
            {
                "rocketMQClusterName": "DefaultCluster",
                "proxyMode": "cluster",
                "namesrvAddr": proxied.cluster.namesrv_addr,
                "grpcServerPort": 0,
                "remotingListenPort": -1,
                "grpcThreadPoolNums": 8,
            }
        )
    )
    proxy = await ServerProcess(
        "aiorocketmq.proxy", ["-pc", str(conf), "--bind-address", "127.0.0.1"]
    ).start()
    try:
        await proxy.wait_for_line("not used by this proxy: grpcThreadPoolNums$")
        async with grpc.aio.insecure_channel(f"127.0.0.1:{proxy.port}") as channel:
            stub = pb_grpc.MessagingServiceStub(channel)
            topic = unique("ProxyConf")
            await create_topic(proxied.cluster, topic, 1)
            response = await stub.QueryRoute(pb.QueryRouteRequest(topic=pb.Resource(name=topic)))
            assert response.status.code == pb.OK, response.status
    finally:
        assert await proxy.stop() == 0
    for bad, reason in (
        ({"namesrvAddr": "127.0.0.1:1", "grpcServerPrt": 8081}, "grpcServerPrt"),
        ({"namesrvAddr": "127.0.0.1:1", "proxyMode": "local"}, "cluster mode only"),
    ):
        conf.write_text(json.dumps(bad))
        refused = ServerProcess("aiorocketmq.proxy", ["-pc", str(conf)])
        with pytest.raises(RuntimeError, match="exited with 2"):
            await refused.start(timeout=20)
        assert reason in refused.output, refused.output
