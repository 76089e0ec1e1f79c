"""Message traces from the SDK (``enable_trace=True``): who sent a message and when it was
stored (``Pub``), which group consumed it, how long that took and how it ended
(``SubBefore`` / ``SubAfter``), and how a transaction ended (``EndTransaction``), in
RocketMQ's trace format (:mod:`aiorocketmq.protocol.trace`), so that RocketMQ's tools and
dashboard read ours and ``mqadmin queryMsgTraceById`` reads everybody's.

Recording an event costs the send or the listener call one small object put on a queue; a
background task of the :class:`TraceDispatcher` takes the queued events in batches, encodes
them (grouped by the traced message's topic, at most ~128 KB a message) and sends them with
its own producer, on its own client instance, to the trace topic (``RMQ_SYS_TRACE_TOPIC`` by
default). When the queue is full, new events are dropped and counted rather than slowing the
application down.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import time
from collections import deque
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from aiorocketmq.protocol.errors import MQError
from aiorocketmq.protocol.loop import cancel_and_wait, wait_event
from aiorocketmq.protocol.message import Message, MessageExt, PropertyKey, new_unique_id
from aiorocketmq.protocol.names import TRACE_TOPIC
from aiorocketmq.protocol.trace import (
    ConsumeReturnType,
    TraceBean,
    TraceContext,
    TraceMessageType,
    TraceType,
    batch_contexts,
)

from .types import ConsumeResult, SendResult, SendStatus

if TYPE_CHECKING:
    from .client_instance import ClientOptions
    from .producer import Producer

log = logging.getLogger(__name__)

#: RocketMQ's names for the trace producer: group prefix and instance name.
TRACE_GROUP_PREFIX = "_INNER_TRACE_PRODUCER-"
TRACE_INSTANCE_NAME = "PID_CLIENT_INNER_TRACE_PRODUCER"
#: The region recorded when the broker did not say (RocketMQ's default ``regionId``).
DEFAULT_REGION = "DefaultRegion"
MAX_TRACE_MESSAGE_SIZE = 128_000
BATCH_SIZE = 100
QUEUE_SIZE = 2048
FLUSH_INTERVAL = 0.1
SEND_TIMEOUT = 5.0

_instances = itertools.count(1)
_SUCCESS = ConsumeResult.SUCCESS
_SEND_OK = SendStatus.SEND_OK


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def message_type(msg: Message) -> TraceMessageType:
    """How a message being sent is meant, as its trace records it."""
    props = msg.properties
    if props.get(PropertyKey.TRANSACTION_PREPARED) == "true":
        return TraceMessageType.TRANS_HALF
    if props.get(PropertyKey.DELAY_TIME_LEVEL) or props.get(PropertyKey.START_DELIVER_TIME):
        return TraceMessageType.DELAY
    return TraceMessageType.NORMAL


class TraceDispatcher:
    """Trace events of one producer or consumer, sent in batches by a background task."""

    def __init__(
        self,
        namesrv: str | Iterable[str] | None,
        options: ClientOptions | None = None,
        trace_topic: str | None = None,
        *,
        batch_size: int = BATCH_SIZE,
        queue_size: int = QUEUE_SIZE,
        flush_interval: float = FLUSH_INTERVAL,
        max_message_size: int = MAX_TRACE_MESSAGE_SIZE,
    ) -> None:
        self.namesrv = namesrv
        self.options = options
        self.trace_topic = trace_topic or TRACE_TOPIC
        self.batch_size = batch_size
        self.queue_size = queue_size
        self.flush_interval = flush_interval
        self.max_message_size = max_message_size
        #: Events dropped because the queue was full, and trace messages that failed to send.
        self.dropped = 0
        self.failed_sends = 0
        self.sent_messages = 0
        self._queue: deque[TraceContext] = deque()
        self._wakeup = asyncio.Event()
        self._producer: Producer | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        from .producer import Producer  # the producer module records traces through this one

        self._producer = Producer(
            f"{TRACE_GROUP_PREFIX}{self.trace_topic}",
            self.namesrv,
            instance_name=f"{TRACE_INSTANCE_NAME}_{os.getpid()}_{next(_instances)}",
            send_timeout=SEND_TIMEOUT,
            options=self.options,
        )
        await self._producer.start()
        self._task = asyncio.ensure_future(self._run())

    async def shutdown(self, timeout: float = 5.0) -> None:
        """Send what is queued (for up to ``timeout`` seconds), then stop."""
        if self._task is None:
            return
        await cancel_and_wait(self._task)
        self._task = None
        try:
            await asyncio.wait_for(self.flush(), timeout)
        except TimeoutError:
            log.warning("trace: %d event(s) not sent at shutdown", len(self._queue))
        assert self._producer is not None
        await self._producer.shutdown()

    # -- recording (the hot path: no I/O, no encoding) ------------------------------------

    def append(self, ctx: TraceContext) -> None:
        queue = self._queue
        if len(queue) >= self.queue_size:
            self.dropped += 1
            return
        queue.append(ctx)
        if len(queue) >= self.batch_size:
            self._wakeup.set()

    def sent(
        self,
        group: str,
        messages: Sequence[Message],
        result: SendResult,
        began: int,
        store_host: str | None,
        region: str = DEFAULT_REGION,
    ) -> None:
        """A send of ``messages`` that started at ``began`` (epoch ms) returned ``result``."""
        if messages[0].topic == self.trace_topic:
            return
        cost = (_now_ms() - began) // len(messages)
        ids = result.msg_id.split(",") if len(messages) > 1 else [result.msg_id]
        success = result.status is _SEND_OK
        for msg, msg_id in zip(messages, ids):
            bean = TraceBean(
                msg_id,
                msg.topic,
                msg.properties.get(PropertyKey.TAGS),
                msg.properties.get(PropertyKey.KEYS),
                store_host,
                len(msg.body),
                message_type(msg),
                result.offset_msg_id,
            )
            self.append(TraceContext(TraceType.PUB, began, region, group, cost, success, beans=[bean]))

    def transaction_ended(
        self,
        group: str,
        msg: Message,
        msg_id: str,
        transaction_id: str | None,
        state: str,
        store_host: str | None,
        from_check: bool,
    ) -> None:
        bean = TraceBean(
            msg_id,
            msg.topic,
            msg.properties.get(PropertyKey.TAGS),
            msg.properties.get(PropertyKey.KEYS),
            store_host,
            len(msg.body),
            TraceMessageType.TRANS_COMMIT,
            transaction_id=transaction_id,
            transaction_state=state,
            from_transaction_check=from_check,
        )
        self.append(TraceContext(TraceType.END_TRANSACTION, _now_ms(), DEFAULT_REGION, group, beans=[bean]))

    def consume_before(self, group: str, messages: Sequence[MessageExt]) -> TraceContext | None:
        """A listener call on ``messages`` starts: its ``SubBefore`` (messages whose broker
        switched tracing off are left out); pass the result to :meth:`consume_after`."""
        beans = []
        region = None
        for msg in messages:
            props = msg.properties
            if props.get(PropertyKey.TRACE_SWITCH) == "false":
                continue
            region = props.get(PropertyKey.MSG_REGION)
            beans.append(
                TraceBean(
                    msg.msg_id,
                    msg.topic,
                    props.get(PropertyKey.TAGS),
                    props.get(PropertyKey.KEYS),
                    body_length=msg.store_size,
                    retry_times=msg.reconsume_times,
                )
            )
        if not beans:
            return None
        ctx = TraceContext(TraceType.SUB_BEFORE, _now_ms(), region or "", group, request_id=new_unique_id())
        ctx.beans = beans
        self.append(ctx)
        return ctx

    def consume_after(self, before: TraceContext | None, outcome: Any, error: BaseException | None) -> None:
        """The listener call :meth:`consume_before` recorded ended with ``outcome`` (or
        raised ``error``)."""
        if before is None:
            return
        now = _now_ms()
        if error is not None:
            code = ConsumeReturnType.EXCEPTION
        elif outcome is None:
            code = ConsumeReturnType.RETURN_NULL
        elif outcome is _SUCCESS:
            code = ConsumeReturnType.SUCCESS
        else:
            code = ConsumeReturnType.FAILED
        after = TraceContext(
            TraceType.SUB_AFTER,
            now,
            before.region_id,
            before.group,
            (now - before.timestamp) // len(before.beans),
            error is None and outcome is _SUCCESS,
            before.request_id,
            int(code),
            before.beans,
        )
        self.append(after)

    # -- sending ----------------------------------------------------------------------------

    async def _run(self) -> None:
        while True:
            await wait_event(self._wakeup, self.flush_interval)
            self._wakeup.clear()
            try:
                await self.flush()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("trace: sending trace data failed")

    async def flush(self) -> None:
        """Send every queued event now."""
        queue = self._queue
        while queue:
            taken = [queue.popleft() for _ in range(min(self.batch_size, len(queue)))]
            by_topic: dict[tuple[str | None, str | None], list[TraceContext]] = {}
            for ctx in taken:
                by_topic.setdefault((ctx.beans[0].topic, ctx.region_id), []).append(ctx)
            for contexts in by_topic.values():
                for batch in batch_contexts(contexts, self.max_message_size):
                    await self._send(Message(self.trace_topic, batch.data.encode(), keys=batch.keys))

    async def _send(self, msg: Message) -> None:
        assert self._producer is not None
        try:
            await self._producer.send(msg)
        except MQError as exc:
            self.failed_sends += 1
            log.warning("trace: sending to %s failed: %s", self.trace_topic, exc)
        else:
            self.sent_messages += 1
