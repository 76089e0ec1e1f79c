"""Automatic batching of a producer's sends (RocketMQ 5's ``autoBatch``; Kafka's ``linger.ms``
and ``batch.size``).

With ``Producer(auto_batch=True)``, each plain :meth:`Producer.send` joins the open batch of its
topic instead of going out alone; the batch goes out as one SEND_BATCH_MESSAGE once it holds
more than ``batch_size`` bytes of bodies or ``linger`` seconds after its first message,
whichever comes first, and each caller gets its own message's result (its id, the broker's
offset id and queue offset). Many small concurrent sends so cost one request each batch rather
than one each; a single send waits up to ``linger`` longer.

Memory is bounded: past ``buffer_memory`` bytes of bodies waiting in batches, a send goes out
alone rather than waiting. A failed batch fails every send in it with the same error (each
caller may retry on its own). Messages that cannot share a batch are never held: timer and
delay-level messages, those for one queue or shard, retry-topic and reply messages.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace

from aiorocketmq.protocol.message import Message

from .types import SendResult

#: Sends one batch of one topic, as :meth:`Producer.send_batch` does.
SendBatch = Callable[[Sequence[Message]], Awaitable[SendResult]]


@dataclass(slots=True)
class _Batch:
    topic: str
    messages: list[Message] = field(default_factory=list)
    waiters: list[asyncio.Future[SendResult]] = field(default_factory=list)
    size: int = 0
    timer: asyncio.TimerHandle | None = None


class BatchAccumulator:
    def __init__(self, send_batch: SendBatch, *, linger: float, batch_size: int, buffer_memory: int) -> None:
        if linger <= 0 or linger > 30:
            raise ValueError("linger must be more than 0 and at most 30 seconds")
        if not 0 < batch_size <= 2 * 1024 * 1024:
            raise ValueError("batch_size must be between 1 byte and 2 MiB")
        if buffer_memory <= 0:
            raise ValueError("buffer_memory must be positive")
        self._send_batch = send_batch
        self.linger = linger
        self.batch_size = batch_size
        self.buffer_memory = buffer_memory
        self._open: dict[str, _Batch] = {}
        self._held = 0
        self._sending: set[asyncio.Task[None]] = set()
        self._closing = False

    @property
    def held(self) -> int:
        """Bytes of bodies waiting in open batches or being sent."""
        return self._held

    def offer(self, msg: Message) -> asyncio.Future[SendResult] | None:
        """The future of ``msg``'s result once its batch is sent; None when the buffer is full
        (the caller sends it alone)."""
        size = len(msg.body)
        if self._closing or self._held + size > self.buffer_memory:
            return None
        batch = self._open.get(msg.topic)
        loop = asyncio.get_running_loop()
        if batch is None:
            batch = self._open[msg.topic] = _Batch(msg.topic)
            batch.timer = loop.call_later(self.linger, self._flush, batch)
        waiter: asyncio.Future[SendResult] = loop.create_future()
        batch.messages.append(msg)
        batch.waiters.append(waiter)
        batch.size += size
        self._held += size
        if batch.size > self.batch_size:
            self._flush(batch)
        return waiter

    def _flush(self, batch: _Batch) -> None:
        if self._open.get(batch.topic) is batch:
            del self._open[batch.topic]
        if batch.timer is not None:
            batch.timer.cancel()
            batch.timer = None
        task = asyncio.ensure_future(self._send(batch))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _send(self, batch: _Batch) -> None:
        try:
            result = await self._send_batch(batch.messages)
        except BaseException as exc:
            for waiter in batch.waiters:
                if not waiter.done():
                    waiter.set_exception(exc)
            if isinstance(exc, asyncio.CancelledError):
                raise
            return
        finally:
            self._held -= batch.size
        for waiter, own in zip(batch.waiters, split_result(result, len(batch.messages)), strict=True):
            if not waiter.done():
                waiter.set_result(own)

    async def close(self) -> None:
        """Send every open batch now and wait for all in flight; later sends go out alone."""
        self._closing = True
        for batch in list(self._open.values()):
            self._flush(batch)
        while self._sending:
            with contextlib.suppress(Exception):
                await asyncio.gather(*self._sending, return_exceptions=True)


def split_result(result: SendResult, count: int) -> list[SendResult]:
    """Each message's result out of its batch's: the ids the batch result lists, comma-joined,
    in order, and consecutive queue offsets."""
    ids = result.msg_id.split(",")
    offset_ids = result.offset_msg_id.split(",")
    if count == 1:
        return [result]
    if len(ids) != count or len(offset_ids) != count:
        raise ValueError(f"a batch of {count} messages got a result for {len(ids)}: {result}")
    return [
        replace(result, msg_id=ids[i], offset_msg_id=offset_ids[i], queue_offset=result.queue_offset + i)
        for i in range(count)
    ]
