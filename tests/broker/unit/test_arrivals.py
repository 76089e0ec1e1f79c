"""broker/arrivals.py: the one registry of consumers waiting for a message (POP receives, 5.x
pulls): who an arrival wakes, and that a waiter leaves no trace when it is done."""

from __future__ import annotations

import asyncio

from aiorocketmq.broker.arrivals import ANY_QUEUE, Arrivals


async def started(arrivals: Arrivals, topic: str, queue_id: int, timeout: float = 5.0) -> asyncio.Task[bool]:
    before = arrivals.waiting
    task = asyncio.ensure_future(arrivals.wait(topic, queue_id, timeout))
    await asyncio.sleep(0)  # one loop turn: the task runs up to its wait, registered by then
    assert arrivals.waiting == before + 1
    return task


async def test_an_arrival_wakes_its_queue_and_its_topic_not_others() -> None:
    arrivals = Arrivals()
    queue1 = await started(arrivals, "T", 1)
    queue2 = await started(arrivals, "T", 2)
    whole = await started(arrivals, "T", ANY_QUEUE)
    other = await started(arrivals, "U", ANY_QUEUE, timeout=0.05)
    arrivals.on_arrival("T", 1, 10, 0)
    assert await queue1 is True
    assert await whole is True
    assert await other is False, "an arrival in another topic woke it"
    assert not queue2.done()
    arrivals.wake("T", 2)
    assert await queue2 is True
    assert arrivals.waiting == 0


async def test_an_aliased_topic_wakes_the_topic_it_redelivers() -> None:
    arrivals = Arrivals()
    arrivals.alias("%RETRY%G_T", "T")
    pop = await started(arrivals, "T", ANY_QUEUE)
    arrivals.on_arrival("%RETRY%G_T", 0)
    assert await pop is True


async def test_a_timeout_answers_false_and_stopping_wakes_everyone() -> None:
    arrivals = Arrivals()
    assert await arrivals.wait("T", ANY_QUEUE, 0.01) is False
    assert arrivals.waiting == 0
    waiting = [await started(arrivals, "T", q) for q in (ANY_QUEUE, 0, 3)]
    arrivals.cancel_all()
    assert [await task for task in waiting] == [True, True, True]
    assert arrivals.waiting == 0


async def test_one_arrival_wakes_held_pulls_and_coroutine_waiters_alike() -> None:
    """The registry owns the remoting pulls' long polling: the store's one listener answers a
    held pull (with its tag filter and offset) and wakes a POP waiter on the same arrival."""
    from aiorocketmq.broker.long_polling import LongPolling

    from .support import RecordedConnection
    from .test_long_polling import Queues, Repull, request

    pulls, repull, conn = LongPolling(Queues()), Repull(), RecordedConnection()
    arrivals = Arrivals(pulls)
    cmd = request()
    pulls.hold(conn, cmd, "T", 0, 5, frozenset({11}), 30_000, repull)  # type: ignore[arg-type]
    pop = await started(arrivals, "T", ANY_QUEUE)
    arrivals.on_arrival("T", 0, 6, 99)  # another tag: the pull keeps waiting, the POP wakes
    assert await pop is True
    assert repull.calls == [] and pulls.held_count == 1
    arrivals.on_arrival("T", 0, 6, 11)
    assert repull.calls == [cmd] and pulls.held_count == 0
    (response,) = conn.responses
    assert response.opaque == cmd.opaque
