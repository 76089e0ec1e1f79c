"""``mqproxy``'s remoting port with Apache's Java remoting client 5.3.2: the client takes the
proxy for its name server and for every broker (two of ours behind it), and names the broker of
each request in ``bname``, as RocketMQ 5's clients do. The proxy relays each request on the
client's own connection to that broker, so what a broker sends the client comes back through
it too (here: request-reply's replies, pushed by the broker to the requester).

A client that sends no ``bname`` (a 4.x client, our SDK) is refused as Apache's proxy refuses
it: VERSION_NOT_SUPPORTED, "Request doesn't have field bname".
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import pytest_asyncio

from aiorocketmq.client import Message, Producer, PullClient
from aiorocketmq.client.admin import Admin
from aiorocketmq.client.errors import MQError
from aiorocketmq.protocol.codes import RequestCode, ResponseCode
from aiorocketmq.protocol.command import RemotingCommand
from aiorocketmq.protocol.transport import connect
from tests.cluster import Cluster, ProxyProcess, start_mqproxy

from .harness import Toolchain
from .test_java53_client import SCENARIOS, assert_content, names, run_scenario, scenario

pytestmark = pytest.mark.asyncio(loop_scope="module")

BROKERS = ("broker-a", "broker-b")


@dataclass
class Proxied:
    cluster: Cluster
    remoting_addr: str
    root: Path


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def proxied(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Proxied]:
    root = tmp_path_factory.mktemp("mqproxy-remoting")
    cluster = Cluster(root / "ours")
    await cluster.start_namesrv()
    proxy: ProxyProcess | None = None
    try:
        for name in BROKERS:
            await cluster.start_broker(name, traceTopicEnable=True)
        proxy = await start_mqproxy(cluster.namesrv_addr)
        assert proxy.remoting_port
        yield Proxied(cluster, f"127.0.0.1:{proxy.remoting_port}", root)
    finally:
        if proxy is not None:
            await proxy.stop()
        await cluster.stop()


async def create(proxied: Proxied, topic: str, queues: int = 2) -> None:
    async with Admin(proxied.cluster.namesrv_addr) as admin:
        await admin.create_topic(topic, queues)
        await admin.wait_for_route(topic, brokers=BROKERS, timeout=10)


async def stored_per_broker(proxied: Proxied, topic: str) -> dict[str, int]:
    counts: Counter[str] = Counter()
    async with PullClient(f"reader-{os.getpid()}", namesrv=proxied.cluster.namesrv_addr) as client:
        for queue in await client.queues(topic):
            counts[queue.broker_name] += await client.max_offset(queue)
    return dict(counts)


async def run_through_proxy(
    proxied: Proxied, toolchain: Toolchain, name: str, prefix: str
) -> dict[str, object]:
    topic, _ = names(prefix, name)
    await create(proxied, topic)
    run = await run_scenario(
        toolchain, proxied.remoting_addr, proxied.root, prefix, name, props={"interop.topicsExist": "true"}
    )
    return {"runs": {name: run}, "topic": topic}


async def test_sends_and_lite_pulls_through_the_proxy(proxied: Proxied, java53_toolchain: Toolchain) -> None:
    """Compressed sends spread over both brokers and read back by a lite pull consumer
    (PULL_MESSAGE, offsets), all through the proxy's remoting port."""
    name = "compression"
    done = await run_through_proxy(proxied, java53_toolchain, name, f"PxR{os.getpid()}")
    runs = done["runs"]
    assert isinstance(runs, dict)
    run, end = scenario(runs, name)
    received = assert_content(run, name)
    assert sorted(int(r["idx"]) for r in received) == list(range(SCENARIOS[name])), run.describe()
    assert end["received"] == SCENARIOS[name]
    stored = await stored_per_broker(proxied, str(done["topic"]))
    assert sum(stored.values()) == SCENARIOS[name] and all(stored.get(b) for b in BROKERS), stored


async def test_request_reply_comes_back_through_the_proxy(
    proxied: Proxied, java53_toolchain: Toolchain
) -> None:
    """A push consumer replies to each request; the broker pushes each reply to the requester
    (PUSH_REPLY_MESSAGE_TO_CLIENT) on the requester's connection, which is the proxy's."""
    name = "request-reply"
    done = await run_through_proxy(proxied, java53_toolchain, name, f"PxQ{os.getpid()}")
    runs = done["runs"]
    assert isinstance(runs, dict)
    run, end = scenario(runs, name)
    count = SCENARIOS[name]
    assert (end["replies"], end["replied"]) == (count, count + 1), run.describe()
    assert [r["i"] for r in run.of(name, "reply")] == list(range(count)), run.describe()


async def test_a_client_without_bname_is_refused_as_apache_refuses_it(proxied: Proxied) -> None:
    topic = f"PxNoBname{os.getpid()}"
    await create(proxied, topic)
    async with Producer(f"pg-{os.getpid()}", proxied.remoting_addr) as producer:
        with pytest.raises(MQError, match="Request doesn't have field bname"):
            await producer.send(Message(topic, b"no bname"))


async def test_admin_requests_are_not_relayed(proxied: Proxied) -> None:
    """Only the codes Apache's proxy relays pass: an admin request naming a broker (creating a
    topic, changing the broker's config) is REQUEST_CODE_NOT_SUPPORTED, and the broker never
    sees it."""
    host, _, port = proxied.remoting_addr.rpartition(":")
    conn = await connect(host, int(port))
    topic = f"PxAdmin{os.getpid()}"
    try:
        create = RemotingCommand.request(
            RequestCode.UPDATE_AND_CREATE_TOPIC,
            {
                "topic": topic,
                "defaultTopic": "TBW102",
                "readQueueNums": 1,
                "writeQueueNums": 1,
                "perm": 6,
                "bname": "broker-a",
            },
        )
        answer = await conn.request(create)
        assert answer.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED, answer
        config = RemotingCommand.request(RequestCode.UPDATE_BROKER_CONFIG, {"bname": "broker-a"})
        config.body = b"brokerPermission=2\n"
        answer = await conn.request(config)
        assert answer.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED, answer
    finally:
        conn.close()
    async with Admin(proxied.cluster.namesrv_addr) as admin:
        with pytest.raises(MQError):
            await admin.topic_route(topic)
