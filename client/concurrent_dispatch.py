"""Concurrent consumption for the push consumer: pulled messages, cut into batches of
``batch_size``, go to a pool of ``concurrency`` workers that call the listener.

A batch the listener fails (``RECONSUME_LATER`` or an exception) is sent back to the broker
(CONSUMER_SEND_MSG_BACK) to come again through ``%RETRY%<group>`` after a delay; a message whose
send-back fails stays in its process queue and is consumed again here 5 s later. Progress is
the smallest offset still in flight, so the committed offset never passes an unconsumed
message. Broadcasting consumption does not retry: a failed batch is logged and dropped.

Java runs listeners on a thread pool beside its network threads; here they share one event
loop, and a worker with a backlog would run listener after listener in one turn of it while
the answers to the queues' next pulls wait unread. So while the backlog is short
(:data:`~.pull_loop.YIELD_BACKLOG`), a worker gives the loop a turn after every
:data:`~.pull_loop.YIELD_AFTER` messages it hands over since it last waited for work (an
``async`` listener that awaits gives turns of its own, which this does not count). A longer
backlog is worked down first, so plain-function listeners slow enough to matter should be
``async`` or hand their work off.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections import deque
from typing import TYPE_CHECKING, Any, TypeAlias

from aiorocketmq.protocol.body import MessageModel, MessageQueue
from aiorocketmq.protocol.message import MessageExt

from . import telemetry
from .process_queue import ProcessQueue
from .pull_loop import YIELD_AFTER, YIELD_BACKLOG
from .types import ConsumeResult, ServiceState

if TYPE_CHECKING:
    from .push_consumer import PushConsumer

log = logging.getLogger(__name__)

#: A batch whose send-back failed is consumed again locally after this long.
LOCAL_RETRY_DELAY = 5.0

_SUCCESS = ConsumeResult.SUCCESS
_RECONSUME_LATER = ConsumeResult.RECONSUME_LATER

#: One listener call's worth: its messages, their process queue and message queue (a plain
#: tuple: one is made per message with the default batch size).
ConsumeRequest: TypeAlias = tuple[list[MessageExt], ProcessQueue, MessageQueue]

_EMPTY: Any = object()


class WorkQueue:
    """A FIFO handing consume requests to idle workers (lighter than asyncio.Queue).
    ``None`` tells a worker to stop."""

    def __init__(self) -> None:
        self._items: deque[ConsumeRequest | None] = deque()
        self._waiters: deque[asyncio.Future[ConsumeRequest | None]] = deque()

    def put(self, item: ConsumeRequest | None) -> None:
        waiters = self._waiters
        while waiters:
            waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_result(item)
                return
        self._items.append(item)

    def take(self) -> ConsumeRequest | None:
        """The next item without waiting, or ``_EMPTY``."""
        return self._items.popleft() if self._items else _EMPTY

    async def get(self) -> ConsumeRequest | None:
        if self._items:
            return self._items.popleft()
        waiter: asyncio.Future[ConsumeRequest | None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        return await waiter

    def clear(self) -> None:
        self._items.clear()

    def __len__(self) -> int:
        return len(self._items)


class ConcurrentDispatch:
    """The worker pool of one push consumer in concurrent mode."""

    def __init__(self, consumer: PushConsumer) -> None:
        self.consumer = consumer
        self.work = WorkQueue()
        self._workers: list[asyncio.Task[None]] = []

    def start(self) -> None:
        self._workers = [asyncio.ensure_future(self._worker()) for _ in range(self.consumer.concurrency)]

    async def stop(self, timeout: float) -> None:
        """Drop the batches not started yet; let the listener calls in progress finish for up
        to ``timeout`` seconds, then cancel them."""
        work = self.work
        work.clear()
        for _ in self._workers:
            work.put(None)
        if self._workers:
            _, late = await asyncio.wait(self._workers, timeout=timeout)
            for task in late:
                task.cancel()
            await asyncio.gather(*late, return_exceptions=True)

    def submit(self, messages: list[MessageExt], pq: ProcessQueue, queue: MessageQueue) -> None:
        size = self.consumer.batch_size
        put = self.work.put
        if len(messages) <= size:
            put((messages, pq, queue))
        elif size == 1:
            for msg in messages:
                put(([msg], pq, queue))
        else:
            for i in range(0, len(messages), size):
                put((messages[i : i + size], pq, queue))

    async def _worker(self) -> None:
        # The hot loop of concurrent consumption, one listener call per turn: locals and an
        # inlined request path keep the per-message cost down.
        consumer = self.consumer
        work = self.work
        take = work.take
        listener = consumer._listener
        assert listener is not None
        is_async = consumer._listener_is_async
        retry_topic = consumer._retry_topic
        group = consumer.group
        trace = consumer._trace
        batch_size = consumer.batch_size
        handed = 0  # messages given to the listener since this worker last let the loop run
        while True:
            if handed >= YIELD_AFTER:
                handed = 0
                if len(work) * batch_size < YIELD_BACKLOG:
                    await asyncio.sleep(0)
            request = take()
            if request is _EMPTY:
                handed = 0
                request = await work.get()
            if request is None:
                return
            messages, pq, queue = request
            if pq.dropped:
                continue
            handed += len(messages)
            try:
                if queue.topic == retry_topic:
                    consumer._restore_topics(messages)
                span = telemetry.consumer_span(messages, group)
                traced = trace.consume_before(group, messages) if trace is not None else None
                error: Exception | None = None
                try:
                    outcome: Any = listener(messages)
                    if is_async or inspect.isawaitable(outcome):
                        outcome = await outcome
                except Exception as exc:
                    log.exception("listener of %s raised; the batch will be consumed again later", group)
                    outcome = _RECONSUME_LATER
                    error = exc
                    if span is not None:
                        span.end(exc)
                        span = None
                if traced is not None and trace is not None:
                    trace.consume_after(traced, outcome, error)
                if span is not None:
                    span.failed = outcome is not _SUCCESS
                    span.end()
                if outcome is _SUCCESS:
                    acked = messages
                else:
                    if outcome is not _RECONSUME_LATER:
                        log.error(
                            "listener of %s returned %r; concurrent listeners return SUCCESS or RECONSUME_LATER",
                            group,
                            outcome,
                        )
                    acked = await self._handle_failure(messages, pq, queue)
                if pq.dropped:
                    continue
                offset = pq.remove(acked)
                if offset >= 0:
                    pq.offset_slot.advance(offset)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("consuming a batch of %s failed", queue)

    async def _handle_failure(
        self, messages: list[MessageExt], pq: ProcessQueue, queue: MessageQueue
    ) -> list[MessageExt]:
        """Send failed messages back for a later retry; the ones that could not be sent back
        stay in the process queue and are consumed again here after a while."""
        consumer = self.consumer
        if consumer.model == MessageModel.BROADCASTING:
            log.warning(
                "%s: broadcasting consumption of %d message(s) failed; dropped", consumer.group, len(messages)
            )
            return messages
        acked = []
        failed = []
        for msg in messages:
            if await consumer.send_back(msg):
                acked.append(msg)
            else:
                msg.reconsume_times += 1
                failed.append(msg)
        if failed:
            consumer._instance.spawn(self._consume_later(failed, pq, queue))
        return acked

    async def _consume_later(self, messages: list[MessageExt], pq: ProcessQueue, queue: MessageQueue) -> None:
        await asyncio.sleep(LOCAL_RETRY_DELAY)
        if not pq.dropped and self.consumer.state is ServiceState.RUNNING:
            self.work.put((messages, pq, queue))
