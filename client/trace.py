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
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aiorocketmq.protocol.errors import MQError
from aiorocketmq.protocol.loop import cancel_and_wait, wait_event
from aiorocketmq.protocol.message import Message, MessageExt, PropertyKey, new_unique_id
from aiorocketmq.protocol.names import TRACE_TOPIC
from aiorocketmq.protocol.trace import (
    ConsumeReturnType,
    TraceContext,
    TraceMessageType,
    batch_records,
    encode_context,
    encode_end_transaction,
    encode_pub,
    encode_sub_after,
    encode_sub_before,
    index_keys,
    trace_keys,
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
_TAGS = PropertyKey.TAGS
_KEYS = PropertyKey.KEYS
_TRACE_SWITCH = PropertyKey.TRACE_SWITCH
_REGION = PropertyKey.MSG_REGION


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


_NORMAL = int(TraceMessageType.NORMAL)
_TRANS_HALF = int(TraceMessageType.TRANS_HALF)
_DELAY = int(TraceMessageType.DELAY)
_PREPARED = PropertyKey.TRANSACTION_PREPARED
_DELAY_LEVEL = PropertyKey.DELAY_TIME_LEVEL
_DELIVER_TIME = PropertyKey.START_DELIVER_TIME


def message_type(msg: Message) -> int:
    """How a message being sent is meant (a :class:`TraceMessageType` value)."""
    props = msg.properties
    if not props:
        return _NORMAL
    if props.get(_PREPARED) == "true":
        return _TRANS_HALF
    if props.get(_DELAY_LEVEL) or props.get(_DELIVER_TIME):
        return _DELAY
    return _NORMAL


class TraceDispatcher:
    """Trace events of one producer or consumer, sent in batches by a background task.

    The queue holds each event already encoded, with what the trace message is grouped by
    (the traced message's topic and region) and found by (its ids and keys)."""

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
        #: (topic, region, encoded records, index keys) per event.
        self._queue: deque[tuple[str | None, str | None, str, str]] = deque()
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
            # A trace body (~15 KB) is not worth the sender's CPU to compress: it is written
            # once and read only when someone looks a message up.
            compress_threshold=self.max_message_size + 1,
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

    # -- recording (the hot path: one string per event, no I/O) ---------------------------

    def _append(self, topic: str | None, region: str | None, data: str, keys: str) -> None:
        queue = self._queue
        if len(queue) >= self.queue_size:
            self.dropped += 1
            return
        queue.append((topic, region, data, keys))
        if len(queue) >= self.batch_size:
            self._wakeup.set()

    def append(self, ctx: TraceContext) -> None:
        """Queue a trace event built by hand."""
        topic = ctx.beans[0].topic if ctx.beans else None
        self._append(topic, ctx.region_id, encode_context(ctx), " ".join(trace_keys(ctx)))

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
        first = messages[0]
        topic = first.topic
        if topic == self.trace_topic:
            return
        count = len(messages)
        cost = (time.time_ns() // 1_000_000 - began) // count
        success = result.status is _SEND_OK
        kind = message_type(first)
        offset_msg_id = result.offset_msg_id
        if count == 1:  # the common case, without the loop
            props = first.properties
            keys = props.get(_KEYS)
            msg_id = result.msg_id
            data = encode_pub(
                began, region, group, topic, msg_id, props.get(_TAGS), keys, store_host,
                len(first.body), cost, kind, offset_msg_id, success,
            )  # fmt: skip
            self._append(topic, region, data, f"{msg_id} {keys}" if keys else msg_id)
            return
        for msg, msg_id in zip(messages, result.msg_id.split(",")):
            props = msg.properties
            keys = props.get(_KEYS)
            data = encode_pub(
                began, region, group, topic, msg_id, props.get(_TAGS), keys, store_host,
                len(msg.body), cost, kind, offset_msg_id, success,
            )  # fmt: skip
            self._append(topic, region, data, index_keys(msg_id, keys))

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
        props = msg.properties
        keys = props.get(_KEYS)
        data = encode_end_transaction(
            _now_ms(), DEFAULT_REGION, group, msg.topic, msg_id, props.get(_TAGS), keys, store_host,
            int(TraceMessageType.TRANS_COMMIT), transaction_id, state, from_check,
        )  # fmt: skip
        self._append(msg.topic, DEFAULT_REGION, data, index_keys(msg_id, keys))

    def consume_before(self, group: str, messages: Sequence[MessageExt]) -> ListenerCall | None:
        """A listener call on ``messages`` starts: its ``SubBefore`` (messages whose broker
        switched tracing off are left out); pass the result to :meth:`consume_after`."""
        traced = [m for m in messages if m.properties.get(_TRACE_SWITCH) != "false"]
        if not traced:
            return None
        region = traced[-1].properties.get(_REGION) or ""
        call = ListenerCall(_now_ms(), region, group, new_unique_id(), traced)
        records = []
        keys = []
        for msg in traced:
            msg_keys = msg.properties.get(_KEYS)
            msg_id = msg.msg_id
            records.append(
                encode_sub_before(
                    call.timestamp, region, group, call.request_id, msg_id, msg.reconsume_times, msg_keys
                )
            )
            keys.append(index_keys(msg_id, msg_keys))
        self._append(traced[0].topic, region, "".join(records), " ".join(keys))
        return call

    def consume_after(self, call: ListenerCall | None, outcome: Any, error: BaseException | None) -> None:
        """The listener call :meth:`consume_before` recorded ended with ``outcome`` (or
        raised ``error``)."""
        if call is None:
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
        success = code is ConsumeReturnType.SUCCESS
        cost = (now - call.timestamp) // len(call.messages)
        records = []
        keys = []
        for msg in call.messages:
            msg_keys = msg.properties.get(_KEYS)
            msg_id = msg.msg_id
            records.append(
                encode_sub_after(call.request_id, msg_id, cost, success, msg_keys, int(code), now, call.group)
            )
            keys.append(index_keys(msg_id, msg_keys))
        self._append(call.messages[0].topic, call.region, "".join(records), " ".join(keys))

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
            by_topic: dict[tuple[str | None, str | None], list[tuple[str, str]]] = {}
            for topic, region, data, keys in taken:
                by_topic.setdefault((topic, region), []).append((data, keys))
            for records in by_topic.values():
                for batch in batch_records(records, self.max_message_size):
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


@dataclass(slots=True)
class ListenerCall:
    """What :meth:`TraceDispatcher.consume_after` needs of the call's ``SubBefore``."""

    timestamp: int
    region: str
    group: str
    request_id: str
    messages: list[MessageExt]
