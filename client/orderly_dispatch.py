"""Orderly consumption for the push consumer: one listener call at a time per queue, in offset
order.

In clustering mode a queue is consumed only under its broker lock, renewed every 20 s for
every owned queue; a queue whose lock is lost or stale waits until it is taken again. A batch
the listener fails (``SUSPEND``, or an exception) goes back to the head of its process queue
and is consumed again after ``suspend_time``, keeping the order; a message past
``max_reconsume_times`` moves to the dead-letter queue instead. Each batch is committed under
the queue's consume lock, which rebalance takes before releasing the queue to another member.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from aiorocketmq.protocol.body import MessageModel, MessageQueue
from aiorocketmq.protocol.errors import MQError
from aiorocketmq.protocol.loop import cancel_and_wait
from aiorocketmq.protocol.message import MessageExt, PropertyKey

from .process_queue import ProcessQueue
from .types import ConsumeResult, ServiceState

if TYPE_CHECKING:
    from .push_consumer import PushConsumer

log = logging.getLogger(__name__)

LOCK_RENEW_INTERVAL = 20.0
#: Orderly consumption yields the queue after this long of continuous consuming.
MAX_TIME_CONSUME_CONTINUOUSLY = 60.0

_SUCCESS = ConsumeResult.SUCCESS
_RECONSUME_LATER = ConsumeResult.RECONSUME_LATER
_SUSPEND = ConsumeResult.SUSPEND


class OrderlyDispatch:
    """The per-queue consume tasks of one push consumer in orderly mode."""

    def __init__(self, consumer: PushConsumer) -> None:
        self.consumer = consumer
        self._tasks: set[asyncio.Task[None]] = set()
        self._lock_task: asyncio.Task[None] | None = None

    @property
    def _clustering(self) -> bool:
        return self.consumer.model == MessageModel.CLUSTERING

    def start(self) -> None:
        if self._clustering:
            self._lock_task = asyncio.ensure_future(self._renew_locks())

    async def stop(self, timeout: float) -> None:
        """Stop renewing locks; let the batches in progress finish for up to ``timeout``
        seconds, then cancel them."""
        await cancel_and_wait(self._lock_task)
        if self._tasks:
            _, late = await asyncio.wait(list(self._tasks), timeout=timeout)
            for task in late:
                task.cancel()
            await asyncio.gather(*late, return_exceptions=True)

    def submit(self, queue: MessageQueue, pq: ProcessQueue, dispatch: bool) -> None:
        """Pulled messages wait in ``pq``; ``dispatch`` when no consume task runs for it."""
        if dispatch:
            task = asyncio.ensure_future(self._consume(queue, pq))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _renew_locks(self) -> None:
        rebalance = self.consumer._rebalance
        await asyncio.sleep(1.0)
        while True:
            await rebalance.lock_all()
            await asyncio.sleep(LOCK_RENEW_INTERVAL)

    async def _consume(self, queue: MessageQueue, pq: ProcessQueue) -> None:
        consumer = self.consumer
        clustering = self._clustering
        began = time.monotonic()
        while not pq.dropped and consumer.state is ServiceState.RUNNING:
            if clustering and (not pq.locked or pq.lock_expired):
                await asyncio.sleep(0.01)
                if not await consumer._rebalance.lock(queue, pq):
                    await asyncio.sleep(3.0)
                continue
            if time.monotonic() - began > MAX_TIME_CONSUME_CONTINUOUSLY:
                await asyncio.sleep(0.01)  # let other queues' tasks run
                began = time.monotonic()
            messages = pq.take(consumer.batch_size)
            if not messages:
                return
            consumer._restore_topics(messages)
            suspend = False
            async with pq.consume_lock:
                try:
                    outcome = await consumer._call_listener(messages)
                except Exception:
                    log.exception("orderly listener of %s raised; retrying the batch", consumer.group)
                    outcome = _SUSPEND
                if outcome is not _SUCCESS:
                    if outcome is not _SUSPEND and outcome is not _RECONSUME_LATER:
                        log.error(
                            "orderly listener of %s returned %r; treated as SUSPEND", consumer.group, outcome
                        )
                    suspend = await self._retry_locally(messages)
                if suspend:
                    pq.reconsume(messages)
                else:
                    commit = pq.commit()
                    # Committed under the consume lock: queue removal waits for this lock
                    # and persists afterwards, so the update counts even if pq was dropped.
                    if commit >= 0:
                        pq.offset_slot.value = commit
            if suspend:
                await asyncio.sleep(consumer.suspend_time)

    async def _retry_locally(self, messages: list[MessageExt]) -> bool:
        """Orderly failure: True when the batch is to be consumed again here; messages past
        ``max_reconsume_times`` go to the dead-letter queue instead."""
        consumer = self.consumer
        limit = consumer._max_reconsume
        suspend = False
        for msg in messages:
            if msg.reconsume_times >= limit:
                msg.properties[PropertyKey.RECONSUME_TIME] = str(msg.reconsume_times)
                try:
                    await consumer._resend_to_retry_topic(msg, 3 + msg.reconsume_times)
                    continue
                except MQError as exc:
                    log.warning("moving %s to the dead-letter queue failed: %s", msg.msg_id, exc)
            suspend = True
            msg.reconsume_times += 1
        return suspend
