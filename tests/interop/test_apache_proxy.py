"""Apache RocketMQ 5.3.3's proxy (``rocketmq-proxy`` from Maven Central, ProxyStartup) in
cluster mode in front of our name server and two of our brokers, serving the official 5.x
Python and Java clients: Apache's own caller of our brokers' 5.x remoting (sends, POP, orderly
POP for FIFO groups, ACK, CHANGE_INVISIBLE_TIME, GET_TOPIC_CONFIG and
GET_SUBSCRIPTIONGROUP_CONFIG, producer heartbeats, END_TRANSACTION and
CHECK_TRANSACTION_STATE). The proxy answers assignments itself, from the name server's routes.

One proxy and one pair of brokers for the module: each JVM start costs seconds.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
import pytest_asyncio

from aiorocketmq.client import PullClient
from aiorocketmq.client.admin import Admin
from aiorocketmq.protocol.body import SubscriptionGroupConfig
from tests.cluster import Cluster
from tests.grpc.conftest import Grpc5, install_py5_client
from tests.grpc.test_java5_client import run_java_done
from tests.interop.harness import ApacheProxy, build_java53_proxy

pytestmark = pytest.mark.asyncio(loop_scope="module")

_names = itertools.count(1)
BROKERS = ("broker-a", "broker-b")


def unique(prefix: str) -> str:
    return f"{prefix}_{os.getpid()}_{next(_names)}"


#: The Python client 5.1.2's SimpleConsumer does not wait for the server's settings at start
#: (rocketmq/v5/client/client.py, ``__init_routes`` waits only for the other client types), so
#: a receive can reach Apache's proxy before the client's Settings on the telemetry stream; the
#: proxy then fails it with a NullPointerException (ReceiveMessageActivity.java:63,
#: ``settings.getSubscription()``). A race of that client and that proxy, not of our brokers:
#: the ``simple`` runs record it and receive again.
SETTINGS_RACE = '"settings" is null'


@dataclass
class ProxiedPair:
    """Our name server and brokers, and Apache's proxy in front of them."""

    cluster: Cluster
    proxy: ApacheProxy
    client: Grpc5  # the official Python 5.x client, pointed at the proxy

    async def run(self, scenario: str, **args: Any) -> dict[str, Any]:
        """A ``py5_client.py`` scenario through the proxy. A 10 s request timeout: the proxy
        refuses a receive whose deadline leaves less than its 5 s minimum long poll
        (ReceiveMessageActivity, grpcClientConsumerMinLongPollingTimeoutMillis), and the
        client's deadline is its request timeout plus the long poll, so the default 3 s left
        a cold proxy on a busy machine too little."""
        args.setdefault("request_timeout", 10)
        if scenario == "simple":
            args.setdefault("tolerate", [SETTINGS_RACE])
        result = await self.client.run(scenario, **args)
        # Each ``simple`` run is a new client: its first receives may meet the race.
        races = result.get("errors", []) if scenario == "simple" else []
        assert all(SETTINGS_RACE in error for error in races), races
        return result

    async def create_topic(self, topic: str, queues: int = 4, **kwargs: Any) -> None:
        async with Admin(self.cluster.namesrv_addr) as admin:
            await admin.create_topic(topic, queues, **kwargs)

    async def create_group(self, group: str, **kwargs: Any) -> None:
        async with Admin(self.cluster.namesrv_addr) as admin:
            await admin.update_subscription_group(SubscriptionGroupConfig(group_name=group, **kwargs))

    async def stored(self, topic: str) -> dict[str, Counter[str]]:
        """Broker name -> the bodies it stores in ``topic`` (our 4.x SDK pulls every queue)."""
        found: dict[str, Counter[str]] = {name: Counter() for name in BROKERS}
        async with PullClient(unique("reader"), namesrv=self.cluster.namesrv_addr) as client:
            for queue in await client.queues(topic):
                end = await client.max_offset(queue)
                async for msg in client.read(queue, 0, end):
                    found[queue.broker_name][msg.body.decode()] += 1
        return found


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def proxied(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ProxiedPair]:
    root = tmp_path_factory.mktemp("apache-proxy")
    java, classpath = await asyncio.to_thread(build_java53_proxy)
    client_path = await asyncio.to_thread(install_py5_client)
    cluster = Cluster(root / "ours")
    await cluster.start_namesrv()
    proxy: ApacheProxy | None = None
    try:
        await asyncio.gather(
            *(
                cluster.start_broker(name, transactionCheckInterval=1000, transactionTimeOut=1000)
                for name in BROKERS
            )
        )
        settings = {
            # The proxy tells brokers which producer groups it serves by heartbeats every
            # transactionHeartbeatPeriodSecond (20 s; ClusterTransactionService): sooner than
            # our brokers' 15 checks a second apart give a half message up (transactionCheckMax).
            "transactionHeartbeatPeriodSecond": 1,
            # Long polls of at most 5 s (of 20 s): the Java PushConsumer's close waits for its
            # receives in flight.
            "grpcClientConsumerMaxLongPollingTimeoutMillis": 5000,
        }
        proxy = ApacheProxy(java, classpath, root / "proxy", cluster.namesrv_addr, overrides=settings)
        await asyncio.to_thread(proxy.start)
        client = Grpc5(cluster, proxy.grpc_port, client_path)
        yield ProxiedPair(cluster, proxy, client)
    finally:
        if proxy is not None:
            await asyncio.to_thread(proxy.stop)
        await cluster.stop()


async def test_sends_spread_over_both_of_our_brokers(proxied: ProxiedPair) -> None:
    topic = unique("ProxySend")
    await proxied.create_topic(topic, 4)
    bodies = [f"send-{i}" for i in range(24)]
    result = await proxied.run("produce", messages=[{"topic": topic, "body": b} for b in bodies])
    assert result["errors"] == [], result["errors"]
    assert len(result["receipts"]) == 24, f"{len(result['receipts'])} of 24 sends acknowledged"
    stored = await proxied.stored(topic)
    counts = {name: sum(c.values()) for name, c in stored.items()}
    assert sum(stored.values(), Counter()) == Counter(bodies), counts
    assert all(counts[name] >= 6 for name in BROKERS), f"stored per broker: {counts}"


async def send(proxied: ProxiedPair, topic: str, bodies: list[str], **spec: Any) -> None:
    """Send ``bodies`` through the proxy; every send acknowledged."""
    messages = [{"topic": topic, "body": body, **spec} for body in bodies]
    result = await proxied.run("produce", messages=messages)
    assert result["errors"] == [], result["errors"]
    assert len(result["receipts"]) == len(bodies), f"{len(result['receipts'])} of {len(bodies)} acknowledged"


async def test_simple_consumer_receives_and_acks_everything_from_both(proxied: ProxiedPair) -> None:
    """POP and ACK through Apache's proxy to both of our brokers. The client checks every
    ack's answer (MessagingResultChecker raises on a status other than OK)."""
    topic, group = unique("ProxySimple"), unique("cg")
    await proxied.create_topic(topic, 4)
    bodies = [f"simple-{i}" for i in range(16)]
    await send(proxied, topic, bodies)
    stored = await proxied.stored(topic)
    assert all(stored[name] for name in BROKERS), {n: len(c) for n, c in stored.items()}
    got = await proxied.run("simple", topic=topic, group=group, count=16, wait=40, invisible=20)
    received = Counter(m["body"] for m in got["messages"])
    assert sorted(received) == sorted(bodies), f"{len(received)} of 16 received: {sorted(received)}"
    assert all(n == 1 for n in received.values()), f"received twice: {received}"


async def test_push_consumer_receives_everything_from_both(proxied: ProxiedPair) -> None:
    """QUERY_ASSIGNMENT and POP through Apache's proxy, the client's PushConsumer."""
    topic, group = unique("ProxyPush"), unique("push")
    await proxied.create_topic(topic, 4)
    bodies = [f"push-{i}" for i in range(16)]
    await send(proxied, topic, bodies)
    stored = await proxied.stored(topic)
    assert all(stored[name] for name in BROKERS), {n: len(c) for n, c in stored.items()}
    got = await proxied.run("push", topic=topic, group=group, count=16, wait=40)
    received = sorted({m["body"] for m in got["messages"]})
    assert received == sorted(bodies), f"{len(received)} of 16 received: {received}"


async def test_a_failed_delivery_comes_back_as_the_next_attempt(proxied: ProxiedPair) -> None:
    """The PushConsumer fails each first delivery; its NACK (a changed invisible duration of
    the first backoff step) through the proxy brings each message back as attempt 2, with its
    keys and properties."""
    topic, group = unique("ProxyRetry"), unique("cg")
    await proxied.create_topic(topic, 2)
    messages = [
        {"topic": topic, "body": f"r{i}", "keys": [f"k{i}"], "properties": {"i": str(i)}} for i in range(4)
    ]
    result = await proxied.run("produce", messages=messages)
    assert result["errors"] == [], result["errors"]
    got = await proxied.run("push", topic=topic, group=group, count=8, fail_first=True, wait=60)
    by_attempt: dict[int, list[str]] = {}
    for msg in got["messages"]:
        by_attempt.setdefault(msg["attempt"], []).append(msg["body"])
        assert (msg["keys"], msg["properties"]) == ([f"k{msg['body'][1:]}"], {"i": msg["body"][1:]}), msg
    bodies = [f"r{i}" for i in range(4)]
    assert sorted(by_attempt.get(1, [])) == bodies, by_attempt
    assert sorted(by_attempt.get(2, [])) == bodies, by_attempt


async def test_fifo_message_groups_keep_their_order(proxied: ProxiedPair) -> None:
    """A FIFO topic and an orderly group: each message group's messages in the order sent."""
    topic, group = unique("ProxyFifo"), unique("fifo")
    await proxied.create_topic(topic, 4, attributes={"+message.type": "FIFO"})
    await proxied.create_group(group, consume_message_orderly=True)
    messages = [
        {"topic": topic, "body": f"{g}-{i}", "group": g} for i in range(5) for g in ("ga", "gb", "gc")
    ]
    result = await proxied.run("produce", messages=messages)
    assert result["errors"] == [], result["errors"]
    got = await proxied.run("push", topic=topic, group=group, count=15, wait=60)
    bodies = [m["body"] for m in got["messages"]]
    assert sorted(bodies) == sorted(m["body"] for m in messages), f"{len(bodies)} of 15: {bodies}"
    for g in ("ga", "gb", "gc"):
        assert [b for b in bodies if b.startswith(g)] == [f"{g}-{i}" for i in range(5)], bodies


async def test_transactions_commit_and_one_is_checked_back(proxied: ProxiedPair) -> None:
    """END_TRANSACTION through the proxy; an open one checked back by our broker through the
    proxy (CHECK_TRANSACTION_STATE to the proxy, relayed to the client's telemetry stream)."""
    topic = unique("ProxyTx")
    await proxied.create_topic(topic, 4, attributes={"+message.type": "TRANSACTION"})
    result = await proxied.run(
        "transaction", topic=topic, commit=["c1", "c2"], rollback=["r1"], orphan=["o1"], wait=40
    )
    assert result["checked"][:1] == ["o1"], f"checked: {result['checked']}"
    stored = sum((await proxied.stored(topic)).values(), Counter())
    assert sorted(stored.elements()) == ["c1", "c2", "o1"], stored


async def test_a_changed_invisible_duration_redelivers(proxied: ProxiedPair) -> None:
    """CHANGE_INVISIBLE_TIME through the proxy: each message given 2 s more on its first
    delivery comes back as attempt 2, and is acked then."""
    topic, group = unique("ProxyChange"), unique("cg")
    await proxied.create_topic(topic, 2)
    bodies = [f"change-{i}" for i in range(4)]
    await send(proxied, topic, bodies)
    got = await proxied.run("simple", topic=topic, group=group, count=4, change=2, wait=40)
    assert sorted(m["body"] for m in got["changed"]) == bodies, got["changed"]
    assert sorted(m["body"] for m in got["messages"]) == bodies, got["messages"]
    assert {m["attempt"] for m in got["messages"]} == {2}


async def test_java_client_sends_over_both_and_receives_everything(proxied: ProxiedPair) -> None:
    """The Java 5.x client (rocketmq-client-java) through the proxy: its Producer's sends on
    both of our brokers, its SimpleConsumer's and its PushConsumer's receives of all."""
    topic = unique("ProxyJava")
    await proxied.create_topic(topic, 4)
    endpoint = proxied.proxy.endpoint
    lines = await run_java_done("produce", endpoint, topic, "12")
    assert len([line for line in lines if line.startswith("SENT ")]) == 12, "\n".join(lines)
    bodies = [f"java-{i}" for i in range(12)]
    stored = await proxied.stored(topic)
    counts = {name: sum(c.values()) for name, c in stored.items()}
    assert sum(stored.values(), Counter()) == Counter(bodies), counts
    assert all(counts[name] for name in BROKERS), f"stored per broker: {counts}"
    for mode in ("consume", "push"):
        lines = await run_java_done(mode, endpoint, topic, unique(mode), "12")
        got = sorted({json.loads(line[4:])["body"] for line in lines if line.startswith("MSG ")})
        assert got == sorted(bodies), f"{mode}: {len(got)} of 12: {got}"


async def test_our_brokers_served_every_request_the_proxy_sent(proxied: ProxiedPair) -> None:
    """Last of the module: no request of Apache's proxy met a code our brokers do not serve,
    and they logged no error."""
    for name in BROKERS:
        process = proxied.cluster.brokers[name].process
        assert process is not None
        refused = [line for line in process.lines if "request code not supported" in line]
        errors = [line for line in process.lines if " ERROR " in line or "Traceback" in line]
        assert refused == [] and errors == [], f"{name}:\n" + "\n".join(refused + errors)
