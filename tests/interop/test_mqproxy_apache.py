"""Our ``mqproxy`` in front of Apache's brokers: Apache 5.3.3's broker beside one of ours in one
cluster (our name server), the official Python 5.x client talking only to the proxy.

The proxy's remoting requests are answered by Apache's own broker here: SEND_MESSAGE_V2 with the
5.x properties, POP_MESSAGE / ACK_MESSAGE / CHANGE_MESSAGE_INVISIBLETIME with Apache's receipt
handles, GET_TOPIC_CONFIG and GET_SUBSCRIPTIONGROUP_CONFIG, END_TRANSACTION, and Apache's
CHECK_TRANSACTION_STATE coming back through the proxy to the client.
"""

from __future__ import annotations

import asyncio
import itertools
import os
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
import pytest_asyncio

from aiorocketmq.client import Message, Producer, PullClient, SimpleConsumer
from aiorocketmq.client.admin import Admin
from aiorocketmq.client.simple_consumer import ReceivedMessage
from tests.cluster import Cluster, ProxyProcess, start_mqproxy
from tests.grpc.conftest import Grpc5, install_py5_client
from tests.support import wait_until

from .conftest import APACHE53_BROKER
from .harness import ApacheBroker, Toolchain

pytestmark = pytest.mark.asyncio(loop_scope="module")

_names = itertools.count(1)
BROKERS = ("broker-a", "apache-b")


def unique(prefix: str) -> str:
    return f"{prefix}_{os.getpid()}_{next(_names)}"


@dataclass
class Mixed:
    cluster: Cluster
    client: Grpc5

    async def create_topic(self, topic: str, queues: int = 4, **kwargs: object) -> None:
        async with Admin(self.cluster.namesrv_addr) as admin:
            await admin.create_topic(topic, queues, **kwargs)
            await admin.wait_for_route(topic, brokers=BROKERS, timeout=20)

    async def stored(self, topic: str) -> dict[str, Counter[str]]:
        found: dict[str, Counter[str]] = {name: Counter() for name in BROKERS}
        async with PullClient(unique("reader"), namesrv=self.cluster.namesrv_addr) as client:
            for queue in await client.queues(topic):
                end = await client.max_offset(queue)
                async for msg in client.read(queue, 0, end):
                    found[queue.broker_name][msg.body.decode()] += 1
        return found


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def mixed(
    java53_toolchain: Toolchain, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Mixed]:
    root = tmp_path_factory.mktemp("mqproxy-apache")
    client_path = await asyncio.to_thread(install_py5_client)
    cluster = Cluster(root / "ours")
    await cluster.start_namesrv()
    apache: ApacheBroker | None = None
    proxy: ProxyProcess | None = None
    try:
        await cluster.start_broker("broker-a", transactionCheckInterval=1000, transactionTimeOut=1000)
        apache = ApacheBroker(
            java53_toolchain,
            root / "apache-b",
            cluster.namesrv_addr,
            name="apache-b",
            # Apache 5.x writes the op messages that close transactions in batches, 3 to 6 s late
            # by default (transactionOpBatchInterval): a check meanwhile asks about committed
            # ones too. Written every 200 ms here, they are in place when a check runs (2 s).
            overrides={
                **APACHE53_BROKER,
                "transactionCheckInterval": 1000,
                "transactionTimeOut": 2000,
                "transactionOpBatchInterval": 200,
            },
        )
        await asyncio.to_thread(apache.start)
        async with Admin(cluster.namesrv_addr) as admin:

            async def both_registered() -> bool:
                return set((await admin.cluster_info()).broker_addr_table) == set(BROKERS)

            await wait_until(both_registered, timeout=60)
        proxy = await start_mqproxy(cluster.namesrv_addr)
        yield Mixed(cluster, Grpc5(cluster, proxy.grpc_port, client_path))
    finally:
        if proxy is not None:
            await proxy.stop()
        if apache is not None:
            await asyncio.to_thread(apache.stop)
        await cluster.stop()


async def test_sends_spread_over_ours_and_apaches_and_everything_is_received(mixed: Mixed) -> None:
    topic, group = unique("MixedProxy"), unique("cg")
    await mixed.create_topic(topic, 4)
    bodies = [f"mixed-{i}" for i in range(32)]
    result = await mixed.client.run("produce", messages=[{"topic": topic, "body": b} for b in bodies])
    assert result["errors"] == [], result["errors"]
    stored = await mixed.stored(topic)
    counts = {name: sum(c.values()) for name, c in stored.items()}
    assert sum(stored.values(), Counter()) == Counter(bodies), counts
    assert all(counts[name] >= 8 for name in BROKERS), counts
    got = await mixed.client.run("simple", topic=topic, group=group, count=32, wait=60)
    assert sorted(m["body"] for m in got["messages"]) == sorted(bodies)


async def test_a_changed_invisible_duration_on_apaches_broker_redelivers(mixed: Mixed) -> None:
    topic, group = unique("MixedChange"), unique("cg")
    await mixed.create_topic(topic, 2)
    bodies = [f"change-{i}" for i in range(6)]
    result = await mixed.client.run("produce", messages=[{"topic": topic, "body": b} for b in bodies])
    assert result["errors"] == []
    stored = await mixed.stored(topic)
    assert sum(stored["apache-b"].values()) > 0, stored
    got = await mixed.client.run("simple", topic=topic, group=group, count=6, change=2, wait=60)
    assert sorted(m["body"] for m in got["changed"]) == bodies, got["changed"]
    assert sorted(m["body"] for m in got["messages"]) == bodies, got["messages"]
    assert {m["attempt"] for m in got["messages"]} == {2}


async def test_transactions_on_both_and_an_orphan_checked_back_through_the_proxy(mixed: Mixed) -> None:
    topic = unique("MixedTx")
    await mixed.create_topic(topic, 4, attributes={"+message.type": "TRANSACTION"})
    commits = [f"c{i}" for i in range(8)]
    orphans = ["o1", "o2", "o3", "o4"]
    result = await mixed.client.run(
        "transaction",
        topic=topic,
        commit=commits,
        rollback=["r1", "r2"],
        orphan=orphans,
        wait=60,
        timeout=150,
    )
    assert sorted(set(result["checked"])) == orphans, f"checked: {result['checked']}"
    stored = await mixed.stored(topic)
    assert sorted(sum(stored.values(), Counter()).elements()) == sorted(commits + orphans), stored
    assert all(stored[name] for name in BROKERS), stored


async def test_our_sdk_simple_consumer_acks_redeliveries_from_apaches_broker(mixed: Mixed) -> None:
    """Our SDK's SimpleConsumer straight on the brokers (no proxy): a redelivery from Apache
    5.3.3's broker comes with its receipt handle in POP_CK and is acknowledged in its retry
    topic, as Apache's own client does; before, it failed to parse ("no start offset") and
    an ack naming the original topic was refused ("offset is illegal")."""
    topic, group = unique("MixedSdk"), unique("cg")
    await mixed.create_topic(topic, 2)
    bodies = [f"sdk-{i}" for i in range(8)]
    async with Producer(unique("pg"), mixed.cluster.namesrv_addr) as producer:
        for body in bodies:
            await producer.send(Message(topic, body))
    async with SimpleConsumer(group, mixed.cluster.namesrv_addr, subscriptions={topic: "*"}) as consumer:
        first: list[ReceivedMessage] = []
        while len(first) < len(bodies):
            first += await consumer.receive(16, invisible_duration=2, await_duration=5)
        assert {m.broker_name for m in first} == set(BROKERS)
        # Not acknowledged: each comes back once its 2 s are over, as attempt 2.
        again: list[ReceivedMessage] = []
        while len(again) < len(bodies):
            again += await consumer.receive(16, invisible_duration=30, await_duration=5)
        assert sorted(m.body.decode() for m in again) == sorted(bodies)
        assert {m.delivery_attempt for m in again} == {2}
        for message in again:
            await consumer.ack(message)
        assert await consumer.receive(16, invisible_duration=30, await_duration=3) == []
