"""The official RocketMQ 5.x Go client (``github.com/apache/rocketmq-clients/golang/v5``,
``go5/main.go``) against our brokers' gRPC endpoints: on one broker, and on a cluster of two
(``grpc5_pair``) through broker-a's endpoint alone, where a 5.x client must see the whole
cluster's queues, as Apache's proxy in local mode shows them: sends spread over both brokers,
a SimpleConsumer gets every broker's messages, FIFO groups keep their order.

The program is built once per change of its sources into the interop cache (like
tests/interop's Go 4.x program); ``go build`` fetches the modules through the Go module proxy
on a fresh machine.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from aiorocketmq.client import Producer
from aiorocketmq.client.admin import Admin
from aiorocketmq.protocol.body import SubscriptionGroupConfig
from aiorocketmq.protocol.message import Message
from tests.cluster import Cluster

from .conftest import HERE, Grpc5, Grpc5Pair, build_go_program, result_of, run_child

pytestmark = pytest.mark.asyncio(loop_scope="package")

GO5_DIR = HERE / "go5"
_names = itertools.count(1)


def unique(prefix: str) -> str:
    return f"{prefix}_{os.getpid()}_{next(_names)}"


def build_go5() -> Path:
    """``go5/``'s program, built once per digest of its sources (a warm cache builds nothing)."""
    return build_go_program(GO5_DIR, "go5", "the Go 5.x client scenarios are a Go program")


@dataclass(frozen=True)
class Go5:
    """The built program, and a directory for the client's own log."""

    binary: Path
    log_dir: Path

    async def run(self, scenario: str, endpoint: str, timeout: float = 90.0, **args: Any) -> dict[str, Any]:
        """Run one scenario of ``go5/main.go`` at ``endpoint``; what it printed."""
        argv = [str(self.binary), scenario, json.dumps({"endpoint": endpoint, **args})]
        # The client reads its log settings from these (dotted) environment variables.
        code, text = await run_child(
            argv, timeout, env={"rocketmq.client.logRoot": str(self.log_dir)}, what=scenario
        )
        result = result_of(text, code, scenario)
        assert "fatal" not in result, f"{scenario}: {result['fatal']}"
        return result


@pytest_asyncio.fixture(scope="module", loop_scope="package")
async def go5(tmp_path_factory: pytest.TempPathFactory) -> Go5:
    return Go5(await asyncio.to_thread(build_go5), tmp_path_factory.mktemp("go5-logs"))


async def create(cluster: Cluster, topic: str, *, orderly_group: str | None = None) -> None:
    """``topic`` with 4 queues on every broker of ``cluster`` (routed before this returns)."""
    async with Admin(cluster.namesrv_addr) as admin:
        await admin.create_topic(topic, 4)
        if orderly_group is not None:
            await admin.update_subscription_group(
                SubscriptionGroupConfig(group_name=orderly_group, consume_message_orderly=True)
            )


async def stored_per_broker(cluster: Cluster, topic: str) -> dict[str, int]:
    """How many messages of ``topic`` each broker holds, from its queues' offsets."""
    counts: Counter[str] = Counter()
    async with Admin(cluster.namesrv_addr) as admin:
        for queue, offset in (await admin.topic_stats(topic)).items():
            counts[queue.broker_name] += offset.max_offset - offset.min_offset
    return dict(counts)


def broker_of_port(pair: Grpc5Pair) -> dict[str, str]:
    return {pair.endpoint(name): name for name in pair.ports}


def bodies(result: dict[str, Any]) -> set[str]:
    return {m["body"] for m in result["messages"]}


# -- one broker: the harness itself ---------------------------------------------------------


async def test_one_broker_produce_then_simple_consume(go5: Go5, grpc5: Grpc5) -> None:
    topic, group = unique("Go5One"), unique("cg")
    await create(grpc5.cluster, topic)
    sent = await go5.run("produce", grpc5.endpoint, topic=topic, count=8, prefix="one", tag="GoTag")
    assert sent["errors"] == []
    assert sorted(r["i"] for r in sent["receipts"]) == list(range(8))
    assert {r["endpoint"] for r in sent["receipts"]} == {grpc5.endpoint}
    assert len({r["message_id"] for r in sent["receipts"]}) == 8

    got = await go5.run("simple_consume", grpc5.endpoint, topic=topic, group=group, count=8, wait=30)
    assert got["errors"] == []
    assert bodies(got) == {f"one-{i}" for i in range(8)}
    ids = {r["i"]: r["message_id"] for r in sent["receipts"]}
    for msg in got["messages"]:
        i = int(msg["body"].split("-")[1])
        assert (msg["id"], msg["tag"], msg["keys"], msg["properties"]) == (
            ids[i],
            "GoTag",
            [f"one-k{i}"],
            {"i": str(i)},
        )
        assert (msg["broker"], msg["endpoint"], msg["attempt"]) == ("broker-a", grpc5.endpoint, 1)


async def test_one_broker_push_consumer_keeps_fifo_groups_in_order(go5: Go5, grpc5: Grpc5) -> None:
    topic, group = unique("Go5Fifo1"), unique("fifo")
    await create(grpc5.cluster, topic, orderly_group=group)
    groups = ["ga", "gb", "gc"]
    sent = await go5.run("produce", grpc5.endpoint, topic=topic, count=15, prefix="f", groups=groups)
    assert sent["errors"] == []
    got = await go5.run("push_consume", grpc5.endpoint, topic=topic, group=group, count=15, wait=40)
    assert_fifo(got, groups, 15)


def assert_fifo(got: dict[str, Any], groups: list[str], count: int) -> None:
    """Every message consumed, each message group's in send order, from one queue per group."""
    assert got["errors"] == []
    assert bodies(got) == {f"f-{i}" for i in range(count)}
    order: dict[str, list[int]] = defaultdict(list)
    queues: dict[str, set[tuple[str, int]]] = defaultdict(set)
    for msg in got["messages"]:
        order[msg["group"]].append(int(msg["body"].split("-")[1]))
        queues[msg["group"]].add((msg["broker"], msg["queue"]))
    for g, name in enumerate(groups):
        assert order[name] == list(range(g, count, len(groups))), (name, order[name])
        assert len(queues[name]) == 1, (name, queues[name])


# -- two brokers, the client connected to broker-a ------------------------------------------


async def test_sends_through_broker_a_spread_over_both_brokers(go5: Go5, grpc5_pair: Grpc5Pair) -> None:
    pair = grpc5_pair
    topic = unique("Go5Spread")
    await create(pair.cluster, topic)
    sent = await go5.run("produce", pair.endpoint("broker-a"), topic=topic, count=40, prefix="s")
    assert sent["errors"] == []
    assert sorted(r["i"] for r in sent["receipts"]) == list(range(40))
    brokers = broker_of_port(pair)
    by_receipt = Counter(brokers.get(r["endpoint"], r["endpoint"]) for r in sent["receipts"])
    stored = await stored_per_broker(pair.cluster, topic)
    assert sum(stored.values()) == 40, stored
    # A route covering the cluster has 8 writable queues, 4 per broker, taken in turn.
    assert stored.get("broker-a", 0) >= 10 and stored.get("broker-b", 0) >= 10, (
        f"stored per broker {stored}, receipts' endpoints {dict(by_receipt)}"
    )
    assert dict(by_receipt) == {name: n for name, n in stored.items() if n}


async def test_simple_consumer_on_broker_a_receives_both_brokers_messages(
    go5: Go5, grpc5_pair: Grpc5Pair
) -> None:
    pair = grpc5_pair
    topic, group = unique("Go5Both"), unique("cg")
    await create(pair.cluster, topic)
    # Sent with our 4.x SDK, which spreads over every queue the name server routes: the
    # messages are on both brokers whatever a 5.x route says.
    async with Producer(unique("pg"), pair.cluster.namesrv_addr) as producer:
        for i in range(40):
            await producer.send(Message(topic, f"b-{i}", tags="T", keys=[f"b-k{i}"]))
    stored = await stored_per_broker(pair.cluster, topic)
    assert stored.get("broker-a", 0) > 0 and stored.get("broker-b", 0) > 0, stored

    got = await go5.run(
        "simple_consume", pair.endpoint("broker-a"), topic=topic, group=group, count=40, wait=20
    )
    received = Counter(m["broker"] for m in got["messages"])
    missing = {f"b-{i}" for i in range(40)} - bodies(got)
    assert not missing, (
        f"{len(missing)} of 40 never received; stored per broker {stored}, "
        f"received per broker {dict(received)}, errors {got['errors']}"
    )
    assert set(received) == {"broker-a", "broker-b"}


async def test_fifo_groups_through_broker_a_keep_order_on_two_brokers(
    go5: Go5, grpc5_pair: Grpc5Pair
) -> None:
    pair = grpc5_pair
    topic, group = unique("Go5Fifo2"), unique("fifo")
    await create(pair.cluster, topic, orderly_group=group)
    groups = [f"g{n}" for n in range(6)]
    sent = await go5.run(
        "produce", pair.endpoint("broker-a"), topic=topic, count=30, prefix="f", groups=groups
    )
    assert sent["errors"] == []
    got = await go5.run(
        "push_consume", pair.endpoint("broker-a"), topic=topic, group=group, count=30, wait=40
    )
    assert_fifo(got, groups, 30)
    # Whatever broker each group's queue is on, the consumer got it from there.
    stored = await stored_per_broker(pair.cluster, topic)
    assert Counter(m["broker"] for m in got["messages"]) == {name: n for name, n in stored.items() if n}
