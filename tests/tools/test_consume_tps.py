"""Consume TPS as operators read it: ``mqadmin consumerProgress`` and the dashboard (both from
GET_CONSUME_STATS) and the broker's ``rocketmq_consumer_tps`` gauge report one figure, for a
consumer kept at a steady rate by a producer sending on a fixed schedule."""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from aiorocketmq.client import Admin, ConsumeFrom, ConsumeResult, Message, MessageExt, Producer, PushConsumer
from aiorocketmq.dashboard.cluster_access import ClusterAccess
from tests.broker.test_metrics import parse, scrape
from tests.cluster import Cluster

from .conftest import mqadmin, unique, wait_until

pytestmark = pytest.mark.asyncio(loop_scope="module")

#: Messages per second the producer sends and the consumer therefore pulls.
RATE = 20
#: The gauge's window (broker/metrics.py RATE_WINDOW): one second of it at RATE is 2 msg/s.
ONE_SECOND_OF_WINDOW = RATE / 10


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def metered(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[tuple[Cluster, int]]:
    """A name server and one broker serving ``/metrics``; yields the cluster and that port."""
    cluster = Cluster(tmp_path_factory.mktemp("tps"))
    try:
        await cluster.start_namesrv()
        broker = await cluster.start_broker(metricsPromExporterEnable="true", metricsPromExporterPort=0)
        assert broker.process is not None
        line = await broker.process.wait_for_line(r"metrics on http://\S+:\d+/metrics")
        match = re.search(r":(\d+)/metrics", line)
        assert match is not None
        async with Admin(cluster.namesrv_addr) as admin:

            async def registered() -> bool:
                return len((await admin.cluster_info()).broker_addr_table) == 1

            await wait_until(registered)
        yield cluster, int(match[1])
    finally:
        await cluster.stop()


async def gauge(port: int, group: str, topic: str) -> float:
    _, body = await scrape(port)
    found = [
        value
        for name, labels, value in parse(body)
        if name == "rocketmq_consumer_tps" and labels.get("group") == group and labels.get("topic") == topic
    ]
    return found[0] if found else 0.0


async def test_consumer_progress_reports_the_rate_metrics_report(metered: tuple[Cluster, int]) -> None:
    cluster, metrics_port = metered
    ns = cluster.namesrv_addr
    topic, group = unique("TpsTopic"), unique("tps_cg")
    async with Admin(ns) as admin:
        await admin.create_topic(topic, 2)

    stop = asyncio.Event()

    async def produce_steadily() -> None:
        async with Producer(unique("tps_pg"), ns) as producer:
            start = time.monotonic()
            sent = 0
            while not stop.is_set():
                await producer.send(Message(topic, f"m{sent}".encode()))
                sent += 1
                # A fixed schedule, not a fixed pause: a slow send does not lower the rate.
                await asyncio.sleep(max(0.0, start + sent / RATE - time.monotonic()))

    consumed = 0
    consumer = PushConsumer(group, ns, consume_from=ConsumeFrom.FIRST_OFFSET)
    consumer.subscribe(topic, "*")

    @consumer.listener
    def handle(messages: list[MessageExt]) -> ConsumeResult:
        nonlocal consumed
        consumed += len(messages)
        return ConsumeResult.SUCCESS

    dashboard = ClusterAccess(ns)
    await dashboard.start()
    async with consumer:
        producing = asyncio.ensure_future(produce_steadily())
        try:

            async def window_full_at_rate() -> bool:
                return abs(await gauge(metrics_port, group, topic) - RATE) <= ONE_SECOND_OF_WINDOW

            # The gauge climbs to RATE as its ten-second window fills with steady consumption.
            await wait_until(window_full_at_rate, timeout=60, interval=0.5)
            before = await gauge(metrics_port, group, topic)
            text, as_json, detail = await asyncio.gather(
                mqadmin("consumerProgress", "-n", ns, "-g", group),
                mqadmin("consumerProgress", "-n", ns, "-g", group, "-t", topic, "--json"),
                dashboard.topic_detail(topic),
            )
            after = await gauge(metrics_port, group, topic)
        finally:
            stop.set()
            await producing
            await dashboard.shutdown()
    assert consumed > 0
    assert text.code == 0, text.err
    assert as_json.code == 0, as_json.err
    low = min(before, after) - ONE_SECOND_OF_WINDOW
    high = max(before, after) + ONE_SECOND_OF_WINDOW
    shown = [line for line in text.lines if line.startswith("Consume TPS: ")]
    assert len(shown) == 1, text.out
    text_tps = float(shown[0].removeprefix("Consume TPS: "))
    json_tps = json.loads(as_json.out)["consumeTps"]
    (row,) = [row for row in detail.groups if row.group == group]
    assert row.consume_tps is not None
    for tps in (text_tps, json_tps, row.consume_tps):
        assert tps > 0, "consume TPS reported as 0 while the group consumes"
        assert low <= tps <= high, (tps, before, after)
