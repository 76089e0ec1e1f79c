"""Consumers restarted under load lose nothing: a producer streams messages while a consumer in
a child process (``consumer_child.py``: push, orderly push, or lite-pull, in clustering mode)
is killed with -9 mid-stream, its successor shut down cleanly mid-stream, and a third one
consumes to the end. Every acknowledged message must be consumed; duplicates are bounded by
what the killed consumer had in flight: the messages it consumed past the offsets the broker
held for its group when it was killed (a clean shutdown commits what it consumed, so it adds
none).

Here for the bug of a consumer committing the largest offset it consumed instead of the
smallest still in flight, which passed every test while the restarts were only the broker's.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from aiorocketmq.client import Admin, Message, Producer
from aiorocketmq.protocol.body import MessageQueue
from tests.cluster import Cluster

from .child_process import ConsumerProcess
from .conftest import start_cluster, unique, wait_until

pytestmark = pytest.mark.asyncio(loop_scope="module")

QUEUES = 4
MESSAGES = 3000
ROOT = Path(__file__).resolve().parent.parent.parent


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def cluster(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Cluster]:
    # A killed orderly consumer's queue locks lapse after 3 s instead of a minute.
    cluster = await start_cluster(tmp_path_factory.mktemp("restart"), rebalanceLockMaxLiveTime=3000)
    try:
        yield cluster
    finally:
        await cluster.stop()


class Child(ConsumerProcess):
    """One ``consumer_child`` process: the messages it finished, and those it announced as slow."""

    PROGRAM = "tests.client.consumer_child"

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        #: Messages the consumer announced as slow: (queue id, queue offset).
        self.slow: list[tuple[int, int]] = []
        super().__init__(proc)

    def on_stderr(self, line: bytes) -> None:
        if line.startswith(b"SLOW "):
            _, queue_id, offset = line.split()
            self.slow.append((int(queue_id), int(offset)))

    def in_hand(self) -> tuple[int, int] | None:
        """A slow message it started and has not finished, if any."""
        done = {(q, o) for q, o, _ in self.records}
        return next((s for s in reversed(self.slow) if s not in done), None)


async def produce(namesrv: str, topic: str, acked: set[str], backlog: asyncio.Event) -> None:
    """Send MESSAGES bodies ``m<n>``, four at a time, recording those acknowledged: half at
    once (a backlog, so that a consumer always has several messages in hand, finishing out of
    order), then the rest over about 15 s, so messages still arrive while all three consumers
    come and go (an orderly one waits for the killed one's queue locks to lapse)."""
    async with Producer(unique("restart-producer"), namesrv) as producer:

        async def lane(first: int, last: int, pause: float) -> None:
            for n in range(first, last, 4):
                await producer.send(Message(topic, f"m{n}".encode()))
                acked.add(f"m{n}")
                if pause:
                    await asyncio.sleep(pause)

        half = MESSAGES // 2
        await asyncio.gather(*(lane(i, half, 0) for i in range(4)))
        backlog.set()
        await asyncio.gather(*(lane(half + i, MESSAGES, 0.04) for i in range(4)))


@pytest.mark.parametrize("kind", ["push", "orderly", "lite"])
async def test_consumers_killed_and_stopped_mid_stream_lose_nothing(cluster: Cluster, kind: str) -> None:
    topic, group = unique(f"Restart{kind.title()}"), unique(f"restart-{kind}")
    namesrv = cluster.namesrv_addr
    async with Admin(namesrv) as admin:
        await admin.create_topic(topic, QUEUES)
        acked: set[str] = set()
        backlog = asyncio.Event()
        producing = asyncio.ensure_future(produce(namesrv, topic, acked, backlog))
        await asyncio.wait_for(backlog.wait(), 60)

        # 1. Killed with -9 in the middle of the stream (a push consumer: while a slow message is
        # in its hands, once the broker holds its group's offset up to that message: a consumer
        # that committed what it finished after it would have lost it).
        first = await Child.start(kind, namesrv, topic, group)
        await wait_until(lambda: len(first.records) >= 400, timeout=60)
        if kind == "push":
            await wait_until(lambda: first.in_hand() is not None, timeout=30)
            held = first.in_hand()
            assert held is not None
            queue = MessageQueue(topic=topic, broker_name="broker-a", queue_id=held[0])

            async def committed_up_to_it() -> bool:
                return await admin.committed_offset(group, queue) >= held[1]

            await wait_until(committed_up_to_it, timeout=10)
            assert held not in {(q, o) for q, o, _ in first.records}, (
                "the slow message finished before the kill"
            )
        committed = {}
        for queue_id in range(QUEUES):
            mq = MessageQueue(topic=topic, broker_name="broker-a", queue_id=queue_id)
            committed[queue_id] = await admin.committed_offset(group, mq)
        await first.kill()
        in_flight = sum(1 for q, offset, _ in first.records if offset >= committed[q])

        # 2. Its successor, shut down cleanly in the middle of the stream.
        second = await Child.start(kind, namesrv, topic, group)
        await wait_until(lambda: len(second.records) >= 400, timeout=60)
        assert not producing.done(), "the producer finished before the second consumer was stopped"
        assert await second.stop() == 0

        # 3. The last one consumes to the end.
        third = await Child.start(kind, namesrv, topic, group)
        await asyncio.wait_for(producing, 120)

        def all_consumed() -> bool:
            return acked <= {body for child in (first, second, third) for *_, body in child.records}

        with contextlib.suppress(AssertionError):  # what never comes is counted as lost below
            await wait_until(all_consumed, timeout=30)
        assert await third.stop() == 0

    consumed = Counter(body for child in (first, second, third) for *_, body in child.records)
    lost = acked - set(consumed)
    duplicates = sum(n - 1 for n in consumed.values())
    print(
        f"{kind}: {len(acked)} acknowledged; consumed {len(first.records)} + {len(second.records)} + "
        f"{len(third.records)}; lost {len(lost)}; {duplicates} duplicates, at most {in_flight} in flight at the kill"
    )
    assert not lost, sorted(lost)[:20]
    assert duplicates <= in_flight
    # Per queue, each consumer's consumption follows the queue's order in orderly mode.
    if kind == "orderly":
        for child in (first, second, third):
            for queue_id in range(QUEUES):
                offsets = [o for q, o, _ in child.records if q == queue_id]
                assert offsets == sorted(offsets)
