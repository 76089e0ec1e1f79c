"""A broker restart in the middle of a stream: producers keep retrying, consumers reconnect
and resume, and every message a send acknowledged is consumed."""

from __future__ import annotations

import asyncio
import time

import pytest

from aiorocketmq.client import Admin, ConsumeFrom, ConsumeResult, Message, MessageExt, Producer, PushConsumer
from aiorocketmq.client.errors import MQError
from tests.cluster import Cluster

from .conftest import Collector, start_cluster, unique, wait_consumed_to_end, wait_until

pytestmark = pytest.mark.asyncio(loop_scope="function")


def consumer_for(cluster: Cluster, group: str, topic: str, collector: Collector) -> PushConsumer:
    consumer = PushConsumer(group, cluster.namesrv_addr, consume_from=ConsumeFrom.FIRST_OFFSET)
    consumer.subscribe(topic)

    @consumer.listener
    async def handle(messages: list[MessageExt]) -> ConsumeResult:
        await collector.add(messages)
        return ConsumeResult.SUCCESS

    return consumer


@pytest.mark.parametrize("how", ["kill", "stop"])
async def test_broker_restart_mid_stream_loses_nothing_acknowledged(
    tmp_path_factory: pytest.TempPathFactory, how: str
) -> None:
    cluster = await start_cluster(tmp_path_factory.mktemp(f"restart-{how}"))
    started: list[PushConsumer] = []
    try:
        topic = unique("Restart")
        group = unique("cg")
        async with Admin(cluster.namesrv_addr) as admin:
            await admin.create_topic(topic, 4)
        collector = Collector()
        first = consumer_for(cluster, group, topic, collector)
        started.append(first)
        await first.start()
        acked: list[bytes] = []
        failures = 0

        async with Producer(unique("pg"), cluster.namesrv_addr, send_timeout=1.0) as producer:

            async def send_until_acked(i: int) -> None:
                nonlocal failures
                body = f"m{i}".encode()
                deadline = time.monotonic() + 60
                while True:
                    try:
                        await producer.send(Message(topic, body))
                    except MQError:
                        failures += 1
                        assert time.monotonic() < deadline, "the broker never came back"
                        await asyncio.sleep(0.1)
                        continue
                    acked.append(body)
                    return

            for i in range(150):
                await send_until_acked(i)
            await collector.wait_count(150)

            async def restart() -> None:
                if how == "kill":
                    await cluster.kill_broker("broker-a")
                else:
                    assert await cluster.stop_broker("broker-a") == 0
                await wait_until(lambda: failures > 0, timeout=30)  # the producer hit the dead broker
                await cluster.start_broker("broker-a")

            restarting = asyncio.ensure_future(restart())
            for i in range(150, 300):
                await send_until_acked(i)
                await asyncio.sleep(0.002)
            await restarting
            for i in range(300, 350):
                await send_until_acked(i)
        assert failures > 0, "the restart went unnoticed by the producer"
        await collector.wait_for(lambda msgs: set(acked) <= {m.body for m in msgs}, timeout=60)
        await first.shutdown()

        # a new member of the group resumes from the committed offset: no history again
        resumed = Collector()
        async with (
            Admin(cluster.namesrv_addr) as admin,
            Producer(unique("pg"), cluster.namesrv_addr) as producer,
            consumer_for(cluster, group, topic, resumed) as second,
        ):
            started.append(second)
            for i in range(350, 360):
                await producer.send(Message(topic, f"m{i}".encode()))
            await resumed.wait_count(10)
            await wait_consumed_to_end(second, admin, topic)  # re-delivered history would be in
        assert resumed.distinct_bodies() == {f"m{i}".encode() for i in range(350, 360)}
    finally:
        for consumer in started:
            await consumer.shutdown()
        await cluster.stop()


async def test_sends_fail_over_to_another_broker_when_one_dies(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    cluster = await start_cluster(tmp_path_factory.mktemp("failover"))
    try:
        await cluster.start_broker("broker-b")
        topic = unique("Failover")
        async with Admin(cluster.namesrv_addr) as admin:
            await admin.create_topic(topic, 2)  # on both brokers
            assert len(await admin.queues(topic)) == 4
        async with Producer(unique("pg"), cluster.namesrv_addr, send_timeout=2.0) as producer:
            before = [await producer.send(Message(topic, f"a{i}".encode())) for i in range(8)]
            assert {r.queue.broker_name for r in before} == {"broker-a", "broker-b"}
            await cluster.kill_broker("broker-a")
            # the cached route still lists broker-a: its attempts fail and move to broker-b
            after = [await producer.send(Message(topic, f"b{i}".encode())) for i in range(20)]
        assert {r.queue.broker_name for r in after} == {"broker-b"}
        assert len({(r.queue.queue_id, r.queue_offset) for r in after}) == 20
    finally:
        await cluster.stop()


async def test_a_one_broker_restart_shorter_than_the_send_timeout_reaches_no_application_error(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """The only broker restarts on the same port (gracefully, then killed) while producers
    send without pause: every send succeeds, riding the outage out with back-off retries
    within its timeout, and every acknowledged message is consumed afterwards."""
    cluster = await start_cluster(tmp_path_factory.mktemp("ride-out"))
    try:
        topic = unique("RideOut")
        async with Admin(cluster.namesrv_addr) as admin:
            await admin.create_topic(topic, 4)
        port = cluster.brokers["broker-a"].port
        acked: list[bytes] = []
        errors: list[BaseException] = []
        spans: list[tuple[float, float]] = []
        stopping = False
        progress = asyncio.Event()
        async with Producer(unique("pg"), cluster.namesrv_addr, send_timeout=20.0) as producer:

            async def sender(worker: int) -> None:
                n = 0
                while not stopping:
                    body = f"w{worker}-{n}".encode()
                    began = time.monotonic()
                    try:
                        await producer.send(Message(topic, body))
                    except Exception as exc:  # what would reach the application
                        errors.append(exc)
                        progress.set()
                        return
                    spans.append((began, time.monotonic()))
                    acked.append(body)
                    progress.set()
                    n += 1

            async def more_acks(count: int) -> None:
                target = len(acked) + count
                while len(acked) < target:
                    assert not errors, f"an error reached the application: {errors[0]!r}"
                    progress.clear()
                    await asyncio.wait_for(progress.wait(), 30)

            senders = [asyncio.ensure_future(sender(w)) for w in range(3)]
            await more_acks(50)
            outages = []
            for how in ("stop", "kill"):
                if how == "stop":
                    assert await cluster.stop_broker("broker-a") == 0
                else:
                    await cluster.kill_broker("broker-a")
                down = time.monotonic()  # every sender is inside a send now: none can finish
                await cluster.start_broker("broker-a")
                assert cluster.brokers["broker-a"].port == port
                outages.append(down)
                await more_acks(50)
            stopping = True
            await asyncio.gather(*senders)
        assert errors == []
        for down in outages:
            # the sends in flight when the broker went away completed after it came back
            assert sum(1 for began, ended in spans if began < down < ended) == 3

        collector = Collector()
        async with consumer_for(cluster, unique("cg"), topic, collector):
            await collector.wait_for(lambda msgs: set(acked) <= {m.body for m in msgs}, timeout=60)
    finally:
        await cluster.stop()
