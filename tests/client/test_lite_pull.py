"""Lite pull consumers against a real name server and broker: subscribe with rebalance,
assign, poll, seek, commit (manual and automatic), pause and resume."""

from __future__ import annotations

import asyncio
import time

import pytest

from aiorocketmq.client import (
    Admin,
    ConsumeFrom,
    LitePullConsumer,
    Message,
    MessageExt,
    MessageQueue,
    Producer,
)
from aiorocketmq.client.errors import ClientError, ClientStateError
from aiorocketmq.client.process_queue import ProcessQueue
from tests.cluster import Cluster

from .conftest import unique, wait_until

pytestmark = pytest.mark.asyncio(loop_scope="module")


async def fill(
    cluster: Cluster, topic: str, count: int, queues: int = 4, prefix: str = "m"
) -> list[MessageQueue]:
    """Send ``count`` messages spread round robin; returns the topic's queues."""
    async with Producer(unique("pg"), cluster.namesrv_addr) as producer:
        all_queues = await producer.queues(topic)
        for i in range(count):
            await producer.send(Message(topic, f"{prefix}{i}".encode()), queue=all_queues[i % queues])
    return all_queues


async def poll_until(lite: LitePullConsumer, count: int, timeout: float = 20) -> list[MessageExt]:
    got: list[MessageExt] = []
    deadline = time.monotonic() + timeout
    while len(got) < count:
        assert time.monotonic() < deadline, f"polled {len(got)} of {count}"
        got.extend(await lite.poll(timeout=0.5))
    return got


async def test_subscribe_shares_queues_and_commits_consumed_offsets(cluster: Cluster, admin: Admin) -> None:
    topic = unique("LiteSub")
    group = unique("lg")
    await admin.create_topic(topic, 4)
    queues = await fill(cluster, topic, 40)
    members = [
        LitePullConsumer(
            group, cluster.namesrv_addr, instance_name=f"lite-{i}", consume_from=ConsumeFrom.FIRST_OFFSET
        )
        for i in range(2)
    ]
    for lite in members:
        lite.subscribe(topic)
        await lite.start()
    try:
        await wait_until(lambda: [len(m.assignment) for m in members] == [2, 2], timeout=20)
        assert set(members[0].assignment).isdisjoint(members[1].assignment)
        got: list[MessageExt] = []
        deadline = time.monotonic() + 20
        while len(got) < 40:
            assert time.monotonic() < deadline
            for lite in members:
                got.extend(await lite.poll(timeout=0.1))
        assert sorted(m.body for m in got) == sorted(f"m{i}".encode() for i in range(40))
        for lite in members:
            await lite.commit()
        for queue in queues:
            assert await admin.committed_offset(group, queue) == 10
    finally:
        for lite in members:
            await lite.shutdown()


async def test_assign_reads_only_the_given_queues_with_a_tag_filter(cluster: Cluster, admin: Admin) -> None:
    topic = unique("LiteAssign")
    await admin.create_topic(topic, 4)
    async with Producer(unique("pg"), cluster.namesrv_addr) as producer:
        queues = await producer.queues(topic)
        for i in range(40):
            await producer.send(
                Message(topic, f"{i}".encode(), tags="even" if i % 2 == 0 else "odd"), queue=queues[i % 4]
            )
    async with LitePullConsumer(
        unique("lg"), cluster.namesrv_addr, consume_from=ConsumeFrom.FIRST_OFFSET
    ) as lite:
        lite.assign(queues[:2], expression="even")
        got = await poll_until(lite, 10)
        assert await lite.poll(timeout=0.3) == []
        assert lite.assignment == queues[:2]
    # queue 0 holds 0, 4, 8...; queue 1 holds 1, 5, 9... (odd, filtered out)
    assert sorted(int(m.body) for m in got) == list(range(0, 40, 4))
    assert {m.queue_id for m in got} == {0}


async def test_seek_rereads_and_skips(cluster: Cluster, admin: Admin) -> None:
    topic = unique("LiteSeek")
    await admin.create_topic(topic, 1)
    (queue,) = await fill(cluster, topic, 10, queues=1)
    async with LitePullConsumer(unique("lg"), cluster.namesrv_addr, pull_batch_size=4) as lite:
        lite.assign([queue])
        first = await poll_until(lite, 10)
        assert [m.queue_offset for m in first] == list(range(10))
        lite.seek(queue, 6)
        again = await poll_until(lite, 4)
        assert [m.queue_offset for m in again] == [6, 7, 8, 9]
        await lite.seek_to_begin(queue)
        from_start = await poll_until(lite, 10)
        assert [m.queue_offset for m in from_start] == list(range(10))
        await lite.seek_to_end(queue)
        assert await lite.poll(timeout=0.3) == []
        await fill(cluster, topic, 1, queues=1, prefix="late")
        (late,) = await poll_until(lite, 1)
        assert late.body == b"late0" and late.queue_offset == 10
        with pytest.raises(ClientError, match="not assigned"):
            lite.seek(MessageQueue(topic=topic, broker_name="broker-a", queue_id=3), 0)


async def test_manual_commit_controls_where_the_group_resumes(cluster: Cluster, admin: Admin) -> None:
    topic = unique("LiteCommit")
    group = unique("lg")
    await admin.create_topic(topic, 1)
    (queue,) = await fill(cluster, topic, 12, queues=1)
    async with LitePullConsumer(
        group,
        cluster.namesrv_addr,
        auto_commit=False,
        pull_batch_size=4,
        consume_from=ConsumeFrom.FIRST_OFFSET,
    ) as lite:
        lite.subscribe(topic)
        batch = await poll_until(lite, 4)
        assert [m.queue_offset for m in batch[:4]] == [0, 1, 2, 3]
        await lite.commit({queue: 4})
        assert await lite.committed(queue) == 4
        assert await admin.committed_offset(group, queue) == 4
    # without auto-commit, what was polled after the commit is not recorded
    assert await admin.committed_offset(group, queue) == 4
    async with LitePullConsumer(group, cluster.namesrv_addr, auto_commit=False, pull_batch_size=4) as lite:
        lite.subscribe(topic)
        rest = await poll_until(lite, 8)
        assert [m.queue_offset for m in rest] == list(range(4, 12))
        await lite.commit()
    assert await admin.committed_offset(group, queue) == 12


async def test_auto_commit_records_progress(cluster: Cluster, admin: Admin) -> None:
    topic = unique("LiteAuto")
    group = unique("lg")
    await admin.create_topic(topic, 2)
    queues = await fill(cluster, topic, 20, queues=2)
    lite = LitePullConsumer(
        group, cluster.namesrv_addr, auto_commit_interval=1.0, consume_from=ConsumeFrom.FIRST_OFFSET
    )
    lite.subscribe(topic)
    async with lite:
        await poll_until(lite, 20)
        # the next poll after the interval commits; the client instance persists it
        await asyncio.sleep(1.1)
        await lite.poll(timeout=0.1)
        await wait_until(lambda: _all_committed(admin, group, queues, 10), timeout=15)


async def _all_committed(admin: Admin, group: str, queues: list[MessageQueue], offset: int) -> bool:
    return all([await admin.committed_offset(group, q) == offset for q in queues])


async def test_pause_and_resume_a_queue(cluster: Cluster, admin: Admin) -> None:
    topic = unique("LitePause")
    await admin.create_topic(topic, 2)
    queues = await fill(cluster, topic, 0, queues=2)
    async with LitePullConsumer(unique("lg"), cluster.namesrv_addr) as lite:
        lite.assign(queues)
        await lite.poll(timeout=0.2)
        lite.pause([queues[1]])
        async with Producer(unique("pg"), cluster.namesrv_addr) as producer:
            await producer.send(Message(topic, b"q0"), queue=queues[0])
            await producer.send(Message(topic, b"q1"), queue=queues[1])
        (first,) = await poll_until(lite, 1)
        assert first.body == b"q0"
        assert await lite.poll(timeout=0.5) == []
        lite.resume([queues[1]])
        (second,) = await poll_until(lite, 1)
        assert second.body == b"q1"


async def test_lite_misuse_is_refused(cluster: Cluster) -> None:
    lite = LitePullConsumer(unique("lg"), cluster.namesrv_addr)
    with pytest.raises(ClientStateError, match="not running"):
        await lite.poll(timeout=0)
    lite.subscribe(unique("T"))
    with pytest.raises(ClientStateError, match="mutually exclusive"):
        lite.assign([MessageQueue(topic="T", broker_name="b", queue_id=0)])
    with pytest.raises(ClientError, match="at least one queue"):
        LitePullConsumer(unique("lg"), cluster.namesrv_addr).assign([])
    async with lite:
        with pytest.raises(ValueError):
            await lite.poll(timeout=-1)


async def test_a_rebalance_finishing_after_shutdown_starts_no_pulls(cluster: Cluster, admin: Admin) -> None:
    topic = unique("LiteLate")
    await admin.create_topic(topic, 2)
    lite = LitePullConsumer(unique("lg"), cluster.namesrv_addr)
    lite.subscribe(topic)
    await lite.start()
    await lite.shutdown()
    before = dict(lite._states)
    pq = ProcessQueue()
    lite._queue_added(MessageQueue(topic=topic, broker_name="broker-a", queue_id=0), pq, 0)
    assert pq.dropped
    assert lite._states == before  # no new queue state, so no new pull task
    assert all(state.task is None or state.task.done() for state in lite._states.values())


async def test_a_buffered_batch_handed_out_one_by_one_lets_the_loop_run(
    cluster: Cluster, admin: Admin
) -> None:
    """``async for`` over buffered messages never waits; every YIELD_AFTER messages the loop
    gets a turn (where the answers to the next pulls are read), not once per pulled batch."""
    from aiorocketmq.client.pull_loop import YIELD_AFTER

    topic = unique("LiteTurns")
    await admin.create_topic(topic, 1)
    async with Producer(unique("pg"), cluster.namesrv_addr) as producer:
        (queue,) = await producer.queues(topic)
        await producer.send_batch([Message(topic, f"{i}".encode()) for i in range(64)], queue=queue)
    loop = asyncio.get_running_loop()
    handed = 0
    seen_by_loop: list[int] = []

    def note() -> None:  # how many were handed out by the time the loop ran it
        seen_by_loop.append(handed)

    async with LitePullConsumer(unique("lg"), cluster.namesrv_addr, pull_batch_size=32) as lite:
        lite.assign([queue])
        async for msg in lite:
            handed += 1
            if handed == 1:
                assert msg.queue_offset == 0
                # The first pull brought a full batch (without it the test proves nothing).
                assert lite._carry is not None and len(lite._carry.messages) == 32
                loop.call_soon(note)
            if handed == 32:
                break
    assert seen_by_loop, "the loop never ran the callback"
    # Without the turns the callback would have waited for the whole batch of 32.
    assert seen_by_loop[0] <= YIELD_AFTER < 32
