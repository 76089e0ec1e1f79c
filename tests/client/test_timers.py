"""Timer messages (5.x delivery times) against a real broker: each of the ways to ask for a
delivery time, never delivered before it and released at most 100 ms after it (the released
record's store timestamp against ``TIMER_OUT_MS``), across a clean restart and a kill -9,
and the limits (``timerMaxDelaySec``, malformed times) refused with a clear error."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from aiorocketmq.client import Admin, ConsumeFrom, ConsumeResult, Message, MessageExt, Producer, PushConsumer
from aiorocketmq.protocol.errors import MessageIllegalError
from tests.cluster import Cluster

from .conftest import start_cluster, unique

pytestmark = pytest.mark.asyncio(loop_scope="module")

#: The promise: released no earlier than the time and at most this much later.
MAX_LATENESS_MS = 100


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def cluster(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Cluster]:
    cluster = await start_cluster(tmp_path_factory.mktemp("timers"))
    try:
        yield cluster
    finally:
        await cluster.stop()


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class Arrivals:
    """What a consumer received, with the local time each message reached the listener."""

    def __init__(self) -> None:
        self.got: dict[bytes, tuple[MessageExt, int]] = {}
        self.changed = asyncio.Event()

    async def handle(self, messages: list[MessageExt]) -> ConsumeResult:
        for msg in messages:
            self.got.setdefault(msg.body, (msg, now_ms()))
        self.changed.set()
        return ConsumeResult.SUCCESS

    async def wait_for(self, bodies: set[bytes], timeout: float = 30) -> None:
        async with asyncio.timeout(timeout):
            while not bodies <= self.got.keys():
                self.changed.clear()
                await self.changed.wait()


async def consume(cluster: Cluster, topic: str, arrivals: Arrivals) -> PushConsumer:
    consumer = PushConsumer(unique("tg"), cluster.namesrv_addr, consume_from=ConsumeFrom.FIRST_OFFSET)
    consumer.subscribe(topic)
    consumer.listener(arrivals.handle)
    await consumer.start()
    return consumer


def check_on_time(arrivals: Arrivals, bodies: set[bytes], *, due_after: int = 0) -> None:
    """Every message of ``bodies``: released and received no earlier than its time, released
    at most MAX_LATENESS_MS after it when it fell due after ``due_after``."""
    for body in bodies:
        msg, received = arrivals.got[body]
        due = int(msg.properties["TIMER_OUT_MS"])
        assert msg.store_timestamp >= due, (body, msg.store_timestamp - due)
        assert received >= due, (body, received - due)
        if due > due_after:
            assert msg.store_timestamp - due <= MAX_LATENESS_MS, (body, msg.store_timestamp - due)
        assert "REAL_TOPIC" not in msg.properties and "REAL_QID" not in msg.properties


async def test_every_way_to_ask_for_a_delivery_time(cluster: Cluster, admin: Admin) -> None:
    topic = unique("Timers")
    await admin.create_topic(topic, 2)
    arrivals = Arrivals()
    consumer = await consume(cluster, topic, arrivals)
    try:
        async with Producer(unique("tp"), cluster.namesrv_addr) as producer:
            at = now_ms() + 1500
            sent_at = now_ms()
            await producer.send(Message(topic, b"deliver_at"), deliver_at=at / 1000)
            await producer.send(Message(topic, b"delay"), delay=1.2)
            await producer.send(Message(topic, b"delay-ms", properties={"TIMER_DELAY_MS": "1300"}))
            await producer.send(Message(topic, b"delay-sec", properties={"TIMER_DELAY_SEC": "2"}))
            await producer.send(
                Message(topic, b"start-deliver", properties={"__STARTDELIVERTIME": str(at + 200)})
            )
            await producer.send(Message(topic, b"plain"))
            await producer.send(Message(topic, b"past", properties={"TIMER_DELIVER_MS": str(sent_at - 5000)}))
        timed = {b"deliver_at", b"delay", b"delay-ms", b"delay-sec", b"start-deliver"}
        await arrivals.wait_for({b"plain", b"past"})
        assert not timed & arrivals.got.keys()  # none of them before its time
        await arrivals.wait_for(timed)
        check_on_time(arrivals, timed)
        assert int(arrivals.got[b"deliver_at"][0].properties["TIMER_OUT_MS"]) == at
        assert int(arrivals.got[b"start-deliver"][0].properties["TIMER_OUT_MS"]) == at + 200
        assert int(arrivals.got[b"delay-sec"][0].properties["TIMER_OUT_MS"]) >= sent_at + 2000
        for body in timed:
            assert arrivals.got[body][0].topic == topic
        # A time already past is an ordinary message, stored in its own topic at once.
        assert "TIMER_OUT_MS" not in arrivals.got[b"past"][0].properties
        assert arrivals.got[b"past"][0].topic == topic
    finally:
        await consumer.shutdown()


async def test_limits_are_refused_with_the_reason(cluster: Cluster, admin: Admin) -> None:
    topic = unique("TimerLimits")
    await admin.create_topic(topic, 1)
    async with Producer(unique("tp"), cluster.namesrv_addr) as producer:
        with pytest.raises(MessageIllegalError, match="timerMaxDelaySec"):
            await producer.send(Message(topic, b"too far"), delay=4 * 24 * 3600)
        with pytest.raises(MessageIllegalError, match="not a number"):
            await producer.send(Message(topic, b"bad", properties={"TIMER_DELIVER_MS": "tomorrow"}))


async def test_timers_survive_a_restart_and_a_kill(cluster: Cluster, admin: Admin) -> None:
    topic = unique("TimerRestart")
    await admin.create_topic(topic, 2)
    async with Producer(unique("tp"), cluster.namesrv_addr) as producer:
        base = now_ms()
        # Due while the broker restarts cleanly, and after it is back.
        first = {f"r{i}".encode(): base + 2000 + 400 * i for i in range(8)}
        for body, due in first.items():
            await producer.send(Message(topic, body), deliver_at=due / 1000)
    await cluster.stop_broker("broker-a")
    await cluster.start_broker("broker-a")
    back = now_ms()
    arrivals = Arrivals()
    consumer = await consume(cluster, topic, arrivals)
    try:
        await arrivals.wait_for(set(first))
        check_on_time(arrivals, set(first), due_after=back)
        assert any(due > back for due in first.values())
        await consumer.shutdown()

        async with Producer(unique("tp"), cluster.namesrv_addr) as producer:
            base = now_ms()
            second = {f"k{i}".encode(): base + 1500 + 500 * i for i in range(10)}
            for body, due in second.items():
                await producer.send(Message(topic, body), deliver_at=due / 1000)
        await cluster.kill_broker("broker-a")
        await cluster.start_broker("broker-a")
        back = now_ms()
        arrivals = Arrivals()
        consumer = await consume(cluster, topic, arrivals)
        await arrivals.wait_for(set(first) | set(second))
        check_on_time(arrivals, set(second), due_after=back)
        assert any(due > back for due in second.values())
    finally:
        await consumer.shutdown()
