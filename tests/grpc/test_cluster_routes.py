"""5.x clients on a cluster of two brokers in local mode (each broker serving gRPC itself, as
Apache's proxy embedded in a broker does): a route or assignment asked of either broker names
both brokers, each at its own gRPC endpoint, so the official clients spread their sends over
both and receive what both hold (broker/grpc/routes.py).

Before: a broker's route listed only its own queues; 40 messages sent through broker-a all
landed on broker-a, and a consumer connected to one broker never saw the other's messages.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
from collections import Counter
from typing import Any

import grpc
import pytest

from aiorocketmq.broker.grpc import messaging_pb2 as pb
from aiorocketmq.broker.grpc import messaging_pb2_grpc as pb_grpc
from aiorocketmq.client import PullClient
from aiorocketmq.client.admin import Admin
from tests.cluster import Cluster

from .conftest import Grpc5, Grpc5Pair, install_py5_client, start_grpc_broker
from .test_java5_client import run_java_done
from .test_node5_client import run_node

pytestmark = pytest.mark.asyncio(loop_scope="package")

_names = itertools.count(1)
BROKERS = ("broker-a", "broker-b")


def unique(prefix: str) -> str:
    return f"{prefix}_{os.getpid()}_{next(_names)}"


async def create_topic(pair: Grpc5Pair, topic: str, queues: int = 4, **kwargs: Any) -> None:
    """``topic`` on both brokers, and known to the name server (routes come from there)."""
    async with Admin(pair.cluster.namesrv_addr) as admin:
        await admin.create_topic(topic, queues, **kwargs)


async def stored_bodies(pair: Grpc5Pair, topic: str) -> dict[str, Counter[str]]:
    """Broker name -> the bodies it stores in ``topic`` (a 4.x pull of every queue)."""
    found: dict[str, Counter[str]] = {name: Counter() for name in BROKERS}
    async with PullClient(unique("reader"), namesrv=pair.cluster.namesrv_addr) as client:
        for queue in await client.queues(topic):
            end = await client.max_offset(queue)
            async for msg in client.read(queue, 0, end):
                found[queue.broker_name][msg.body.decode()] += 1
    return found


def py5(pair: Grpc5Pair, broker: str) -> Grpc5:
    return Grpc5(pair.cluster, pair.ports[broker], install_py5_client())


async def query_route(pair: Grpc5Pair, broker: str, topic: str) -> pb.QueryRouteResponse:
    async with grpc.aio.insecure_channel(pair.endpoint(broker)) as channel:
        stub = pb_grpc.MessagingServiceStub(channel)
        return await stub.QueryRoute(pb.QueryRouteRequest(topic=pb.Resource(name=topic)))


async def query_assignment(
    pair: Grpc5Pair, broker: str, topic: str, group: str
) -> pb.QueryAssignmentResponse:
    async with grpc.aio.insecure_channel(pair.endpoint(broker)) as channel:
        stub = pb_grpc.MessagingServiceStub(channel)
        return await stub.QueryAssignment(
            pb.QueryAssignmentRequest(topic=pb.Resource(name=topic), group=pb.Resource(name=group)),
            metadata=(("x-mq-client-id", unique("routes-test")),),
        )


def by_broker(queues: list[pb.MessageQueue]) -> dict[str, tuple[set[int], list[int]]]:
    """Broker name -> (the ports its queues name, its queue ids)."""
    result: dict[str, tuple[set[int], list[int]]] = {}
    for queue in queues:
        ports, ids = result.setdefault(queue.broker.name, (set(), []))
        ports.update(address.port for address in queue.broker.endpoints.addresses)
        ids.append(queue.id)
    return result


async def test_a_route_from_either_broker_names_both_at_their_own_endpoints(grpc5_pair: Grpc5Pair) -> None:
    topic = unique("Routes")
    await create_topic(grpc5_pair, topic, 4)
    for asked in BROKERS:
        response = await query_route(grpc5_pair, asked, topic)
        assert response.status.code == pb.OK, response.status
        assert by_broker(list(response.message_queues)) == {
            name: ({grpc5_pair.ports[name]}, [0, 1, 2, 3]) for name in BROKERS
        }, f"route asked of {asked}"
        assert {queue.permission for queue in response.message_queues} == {pb.READ_WRITE}
        assert {queue.broker.id for queue in response.message_queues} == {0}


async def test_assignments_from_either_broker_cover_both(grpc5_pair: Grpc5Pair) -> None:
    topic = unique("Assign")
    await create_topic(grpc5_pair, topic, 2)
    for asked in BROKERS:
        response = await query_assignment(grpc5_pair, asked, topic, unique("cg"))
        assert response.status.code == pb.OK, response.status
        queues = [assignment.message_queue for assignment in response.assignments]
        assert by_broker(queues) == {name: ({grpc5_pair.ports[name]}, [-1]) for name in BROKERS}


async def test_a_topic_only_one_broker_has_routes_to_that_broker(grpc5_pair: Grpc5Pair) -> None:
    """A topic the route itself creates (autoCreateTopicEnable) lives on the broker asked; the
    other broker, which lacks it, sends clients there (and does not create it too) once the
    name server knows it."""
    topic = unique("OnlyA")
    first = await query_route(grpc5_pair, "broker-a", topic)
    assert first.status.code == pb.OK, first.status
    assert set(by_broker(list(first.message_queues))) == {"broker-a"}
    async with Admin(grpc5_pair.cluster.namesrv_addr) as admin:
        await admin.wait_for_route(topic, timeout=10)
    other = await query_route(grpc5_pair, "broker-b", topic)
    assert other.status.code == pb.OK, other.status
    assert by_broker(list(other.message_queues)) == {
        "broker-a": ({grpc5_pair.ports["broker-a"]}, list(range(len(first.message_queues))))
    }


async def test_python_client_sends_over_both_brokers_and_receives_from_both(grpc5_pair: Grpc5Pair) -> None:
    topic, group = unique("Py5Pair"), unique("cg")
    await create_topic(grpc5_pair, topic, 4)
    bodies = [f"pair-{i}" for i in range(40)]
    result = await py5(grpc5_pair, "broker-a").run(
        "produce", messages=[{"topic": topic, "body": body} for body in bodies]
    )
    assert result["errors"] == [] and len(result["receipts"]) == 40
    stored = await stored_bodies(grpc5_pair, topic)
    assert sum(stored.values(), Counter()) == Counter(bodies)
    # The client's round robin over 8 queues of two brokers: about half on each.
    assert all(len(stored[name]) >= 10 for name in BROKERS), {n: len(c) for n, c in stored.items()}

    got = await py5(grpc5_pair, "broker-a").run("simple", topic=topic, group=group, count=40, wait=60)
    assert sorted({m["body"] for m in got["messages"]}) == sorted(bodies)
    pushed = await py5(grpc5_pair, "broker-b").run(
        "push", topic=topic, group=unique("push"), count=40, wait=60
    )
    assert sorted({m["body"] for m in pushed["messages"]}) == sorted(bodies)


async def test_java_client_sends_over_both_brokers_and_receives_from_both(grpc5_pair: Grpc5Pair) -> None:
    topic, group = unique("Java5Pair"), unique("cg")
    await create_topic(grpc5_pair, topic, 4)
    lines = await run_java_done("produce", grpc5_pair.endpoint("broker-b"), topic, "20")
    assert len([line for line in lines if line.startswith("SENT ")]) == 20
    stored = await stored_bodies(grpc5_pair, topic)
    bodies = [f"java-{i}" for i in range(20)]
    assert sum(stored.values(), Counter()) == Counter(bodies)
    assert all(stored[name] for name in BROKERS), {n: len(c) for n, c in stored.items()}
    lines = await run_java_done("consume", grpc5_pair.endpoint("broker-a"), topic, group, "20")
    got = [json.loads(line[4:]) for line in lines if line.startswith("MSG ")]
    assert sorted({m["body"] for m in got}) == sorted(bodies)


async def test_node_client_sends_over_both_brokers_and_receives_from_both(grpc5_pair: Grpc5Pair) -> None:
    topic, group = unique("Node5Pair"), unique("cg")
    await create_topic(grpc5_pair, topic, 4)
    sent = (await run_node("produce", grpc5_pair.endpoint("broker-a"), topic, "20"))["sent"]
    assert len(sent) == 20 and all(sent)
    stored = await stored_bodies(grpc5_pair, topic)
    bodies = [f"node-{i}" for i in range(20)]
    assert sum(stored.values(), Counter()) == Counter(bodies)
    assert all(stored[name] for name in BROKERS), {n: len(c) for n, c in stored.items()}
    got = (await run_node("consume", grpc5_pair.endpoint("broker-b"), topic, group, "20"))["messages"]
    assert sorted({m["body"] for m in got}) == sorted(bodies)


async def test_a_broker_killed_under_load_sends_carry_on_to_the_other(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """kill -9 of broker-b while the Python 5.x client, connected to broker-a, sends one message
    every 50 ms: every send is acknowledged (those meeting the dead broker by a retry on
    broker-a), and every acknowledged message is stored (broker-b's once it is back)."""
    cluster = Cluster(tmp_path_factory.mktemp("grpc5-kill"))
    await cluster.start_namesrv()
    try:
        ports = dict(
            zip(
                BROKERS,
                await asyncio.gather(*(start_grpc_broker(cluster, name) for name in BROKERS)),
                strict=True,
            )
        )
        pair = Grpc5Pair(cluster, ports)
        topic = unique("Py5Kill")
        await create_topic(pair, topic, 4)
        progress = tmp_path_factory.mktemp("progress") / "sent"
        bodies = [f"kill-{i}" for i in range(120)]
        sending = asyncio.ensure_future(
            py5(pair, "broker-a").run(
                "produce",
                messages=[{"topic": topic, "body": body} for body in bodies],
                progress=str(progress),
                interval=0.05,
                timeout=120,
            )
        )
        # Kill once broker-b holds some of the messages.
        async with PullClient(unique("watch"), namesrv=cluster.namesrv_addr) as client:
            queues = [q for q in await client.queues(topic) if q.broker_name == "broker-b"]
            while sum([await client.max_offset(q) for q in queues]) < 10:
                assert not sending.done(), sending.result()
                await asyncio.sleep(0.05)
        await cluster.kill_broker("broker-b")
        killed_after = len(progress.read_text().splitlines())
        result = await sending
        acked = [receipt["body"] for receipt in result["receipts"]]
        assert killed_after < 100, "the sends ended before the kill"
        # Sends go on: the last 20 were all acknowledged, and nearly all after the kill.
        assert killed_after < 100, "the sends ended before the kill"
        # Sends go on: a send that meets the dead broker is retried on the next queue of the
        # route, which is broker-a's (routes.py interleaves the brokers).
        assert result["errors"] == []
        assert acked == bodies
        await cluster.start_broker("broker-b", enableGrpcServer="true")
        async with Admin(cluster.namesrv_addr) as admin:
            await admin.wait_for_route(topic, brokers=BROKERS, timeout=30)
        stored = sum((await stored_bodies(pair, topic)).values(), Counter())
        assert set(acked) <= set(stored), f"acknowledged but lost: {sorted(set(acked) - set(stored))}"
        # At most the one send in flight at the kill is stored twice (on b before it died, and
        # on a by the client's retry): at least once, as RocketMQ promises.
        assert sum(count - 1 for count in stored.values()) <= 1, stored
    finally:
        await cluster.stop()
