"""The consumer's process queue: what a new queue reports, the offsets it commits, flow control's
wake-ups and the orderly consume task's hand-over (tests written for surviving mutants of
client/process_queue.py)."""

from __future__ import annotations

import asyncio
import time

import pytest

from aiorocketmq.client import process_queue as pq_module
from aiorocketmq.client.process_queue import LOCK_MAX_LIVE_TIME, PULL_MAX_IDLE_TIME, ProcessQueue
from aiorocketmq.client.running_info import running_info
from aiorocketmq.protocol.body import ConsumerData, MessageQueue
from aiorocketmq.protocol.message import MessageExt

MQ = MessageQueue(topic="T", broker_name="b", queue_id=0)


def ext(offset: int, body: bytes = b"x") -> MessageExt:
    return MessageExt("T", body, queue_offset=offset)


class HeldClock:
    """Stands in for the ``time`` module of client/process_queue.py."""

    def __init__(self, now: float) -> None:
        self.now = now

    def monotonic(self) -> float:
        return self.now


class _Rebalance:
    def __init__(self, pq: ProcessQueue) -> None:
        self.process_queues = {MQ: pq}


class _Store:
    def read_memory(self, queue: MessageQueue) -> int:
        return 0


class _Member:
    """A registered consumer as running_info reads it: one held queue."""

    def __init__(self, pq: ProcessQueue) -> None:
        self._rebalance = _Rebalance(pq)
        self._offset_store = _Store()

    def _consumer_data(self) -> ConsumerData:
        return ConsumerData(group_name="g")


def test_a_new_queue_is_reported_unlocked_not_dropped_and_pulled_just_now() -> None:
    """``mqadmin consumerStatus`` shows a freshly taken queue as Java's ProcessQueue starts:
    not locked, not dropped, its last pull and lock time the moment it was created."""
    pq = ProcessQueue()
    info = running_info(_Member(pq), "ns:9876", time.time())
    queue_info = info.mq_table[MQ]
    assert queue_info.locked is False
    assert queue_info.droped is False
    now_ms = time.time() * 1000
    assert abs(queue_info.last_pull_timestamp - now_ms) < 60_000
    assert abs(queue_info.last_lock_timestamp - now_ms) < 60_000


def test_a_new_queue_goes_idle_and_its_lock_stale_after_exactly_their_limits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A queue counts as not pulled for too long only after PULL_MAX_IDLE_TIME (120 s) from its
    creation, and its local lock as stale after LOCK_MAX_LIVE_TIME (30 s)."""
    clock = HeldClock(5000.0)
    monkeypatch.setattr(pq_module, "time", clock)
    pq = ProcessQueue()
    clock.now = 5000.0 + LOCK_MAX_LIVE_TIME
    assert not pq.lock_expired
    clock.now += 0.001
    assert pq.lock_expired
    clock.now = 5000.0 + PULL_MAX_IDLE_TIME
    assert not pq.pull_expired
    clock.now += 0.001
    assert pq.pull_expired


def test_consuming_the_first_message_of_a_queue_commits_offset_1() -> None:
    """A queue's very first message sits at offset 0: once consumed, the offset to commit is 1,
    not 2 (which would skip message 1)."""
    pq = ProcessQueue()
    first = ext(0)
    pq.put([first])
    assert pq.remove([first]) == 1


def test_progress_covers_a_single_filtered_offset_after_the_last_message() -> None:
    """Messages 0..4 pulled, then a pull whose only message (5) was filtered out by tag: once
    0..4 are consumed, the commit is 6, not 5."""
    pq = ProcessQueue()
    msgs = [ext(i) for i in range(5)]
    pq.put(msgs)
    pq.pulled_up_to(6)
    assert pq.remove(msgs) == 6


def test_a_pull_answered_below_the_progress_never_lowers_it() -> None:
    """Progress only moves forward: after messages 0..9 were pulled, a pull answered with a
    next offset of 10 or below (a lite-pull consumer's OFFSET_ILLEGAL jump back) says nothing
    new, and consuming 0..9 still commits 10 (the mutant of pulled_up_to lowered it to 9)."""
    pq = ProcessQueue()
    msgs = [ext(i) for i in range(10)]
    pq.put(msgs)
    pq.pulled_up_to(10)
    pq.pulled_up_to(9)
    assert pq.remove(msgs) == 10


def test_removing_an_already_removed_message_is_harmless() -> None:
    """A message consumed twice (delivered again in a later batch) is removed once: the second
    removal neither fails nor miscounts, and the rest of its batch is removed."""
    pq = ProcessQueue()
    msgs = [ext(i, b"ab") for i in range(3)]
    pq.put(msgs)
    assert pq.remove(msgs[:2]) == 2
    assert pq.remove(msgs[1:]) == 3
    assert (pq.count, pq.size) == (0, 0)


async def test_flow_control_does_not_wait_when_exactly_at_the_low_water_mark() -> None:
    """``wait_for_space`` returns at once when at most ``low_water`` messages wait, the limit
    included."""
    pq = ProcessQueue()
    pq.put([ext(i) for i in range(4)])
    waiter = asyncio.ensure_future(pq.wait_for_space(low_water=4, timeout=60))
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert waiter.done()
    await waiter


async def test_flow_control_gives_up_waiting_after_its_timeout() -> None:
    """When the count never falls (a limit other than the count), ``wait_for_space`` returns
    after ``timeout`` so the pull loop looks again."""
    pq = ProcessQueue()
    pq.put([ext(i) for i in range(4)])
    await asyncio.wait_for(pq.wait_for_space(low_water=1, timeout=0), 10)


async def test_consuming_after_a_flow_control_wait_ended_still_works() -> None:
    """A wait that was woken is over: removing the next messages (down to the low-water mark
    again) must not trip over the finished wait."""
    pq = ProcessQueue()
    msgs = [ext(i) for i in range(4)]
    pq.put(msgs)
    waiter = asyncio.ensure_future(pq.wait_for_space(low_water=1, timeout=60))
    await asyncio.sleep(0)
    assert pq.remove(msgs[:3]) == 3
    await asyncio.wait_for(waiter, 10)
    assert pq.remove(msgs[3:]) == 4
    assert pq.count == 0


async def test_two_batches_finishing_before_the_waiter_resumes_both_count() -> None:
    """Two consumed batches may be removed in one turn of the loop, after the first already
    woke the flow-control waiter: the second removal still succeeds."""
    pq = ProcessQueue()
    msgs = [ext(i) for i in range(6)]
    pq.put(msgs)
    waiter = asyncio.ensure_future(pq.wait_for_space(low_water=3, timeout=60))
    await asyncio.sleep(0)
    assert pq.remove(msgs[:3]) == 3  # 3 left: wakes the waiter
    assert pq.remove(msgs[3:5]) == 5  # before the waiter has run
    await asyncio.wait_for(waiter, 10)
    assert pq.count == 1


async def test_an_orderly_commit_wakes_flow_control_at_the_low_water_mark() -> None:
    """Orderly consumption releases messages by committing them: a commit that brings the count
    down to exactly the low-water mark wakes the waiting pull loop at once."""
    pq = ProcessQueue()
    pq.put([ext(i) for i in range(5)])
    waiter = asyncio.ensure_future(pq.wait_for_space(low_water=2, timeout=60))
    await asyncio.sleep(0)
    assert [m.queue_offset for m in pq.take(3)] == [0, 1, 2]
    assert pq.commit() == 3
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert waiter.done()
    await waiter


def test_an_orderly_commit_releases_the_bytes_of_the_committed_messages() -> None:
    """The cached size (``pullThresholdSizeForQueue``) drops by exactly the committed bodies."""
    pq = ProcessQueue()
    pq.put([ext(0, b"a" * 10), ext(1, b"b" * 20), ext(2, b"c" * 40)])
    pq.take(2)
    assert pq.commit() == 2
    assert (pq.count, pq.size) == (1, 40)


def test_one_orderly_consume_task_at_a_time() -> None:
    """``put`` asks for a consume task only when none runs: not while one is taking batches,
    and again once that task found the queue empty and ended."""
    pq = ProcessQueue()
    assert pq.put([ext(0)]) is True
    assert [m.queue_offset for m in pq.take(10)] == [0]
    assert pq.put([ext(1)]) is False  # the task is still running
    pq.commit()
    assert [m.queue_offset for m in pq.take(10)] == [1]
    pq.commit()
    assert pq.take(10) == []  # the task ends
    assert pq.put([ext(2)]) is True


def test_a_suspended_batch_after_an_offset_reset_is_not_put_back() -> None:
    """An administrator's offset reset clears the queue while an orderly batch is in the
    listener: when the listener then asks to suspend, nothing is put back and nothing fails."""
    pq = ProcessQueue()
    pq.put([ext(i) for i in range(3)])
    batch = pq.take(2)
    pq.clear()
    pq.reconsume(batch)
    assert pq.snapshot() == [] and pq.count == 0


def test_clearing_a_queue_forgets_its_messages_bytes_and_progress() -> None:
    """As Java's ProcessQueue.clear: no cached messages, no bytes, offset max back to 0."""
    pq = ProcessQueue()
    pq.put([ext(i, b"abc") for i in range(7, 10)])
    pq.take(1)
    pq.clear()
    assert (pq.count, pq.size, pq.max_offset) == (0, 0, 0)
    assert pq.snapshot() == [] and pq.first_offset() is None and pq.commit() == -1
