"""Producers: :class:`Producer` (sync, oneway, batch and sharded sends) and
:class:`TransactionProducer` (half message, local transaction, commit or rollback, and answers
to the broker's check-backs).

A send finds the topic's route (falling back to the auto-create template ``TBW102`` for a
topic no name server knows yet), picks a queue round robin, stamps a client unique id
(``UNIQ_KEY``), compresses bodies of 4 KiB or more, and sends SEND_MESSAGE_V2 (310) or
SEND_BATCH_MESSAGE (320). A synchronous send that fails with an error whose class says it is
``retriable`` is tried again, on another broker first, pausing with a growing back-off before
going back to a broker that failed, all within the send's timeout budget.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from datetime import datetime
from typing import Any

from aiorocketmq.protocol.body import MessageQueue, TopicRouteData
from aiorocketmq.protocol.codes import MessageSysFlag, RequestCode
from aiorocketmq.protocol.errors import (
    ConnectionClosedError,
    MQError,
    ProtocolError,
    RemotingError,
    TopicNotExistError,
    error_for_code,
)
from aiorocketmq.protocol.headers import (
    CheckTransactionStateRequestHeader,
    EndTransactionRequestHeader,
    SendMessageRequestHeaderV2,
    SendMessageResponseHeader,
)
from aiorocketmq.protocol.message import (
    COMPRESS_THRESHOLD,
    MAX_PROPERTIES_LENGTH,
    Message,
    MessageExt,
    PropertyKey,
    batch_fault,
    body_fault,
    compress_body,
    decode_offset_msg_id,
    encode_batch,
    encode_properties,
    java_hash,
    prepare_batch,
)
from aiorocketmq.protocol.names import AUTO_CREATE_TOPIC, DLQ_PREFIX, RETRY_PREFIX, TIMER_REQUESTS
from aiorocketmq.protocol.recall import RecallHandle

from . import telemetry
from .batching import BatchAccumulator
from .client_instance import (
    ClientInstance,
    ClientOptions,
    acquire_instance,
    default_instance_name,
    release_instance,
)
from .errors import ClientError, ClientStateError, NoRouteError, SendFailedError, summarize_causes
from .lifecycle import ClientLifecycle
from .request_reply import ReplyCallback, create_reply_message, is_reply, request, request_with_callback
from .routing import LatencyFaults, PublishInfo, clamp_default_route
from .subscription import check_group, check_topic
from .trace import TraceDispatcher
from .types import SEND_STATUS_BY_CODE, SendResult, ServiceState, TransactionSendResult, TransactionState

log = logging.getLogger(__name__)

MAX_MESSAGE_SIZE = 4 * 1024 * 1024
#: The pause before a retry goes back to a broker that already failed this send; it doubles
#: with each such retry up to the cap (a restarting broker is asked about once a second).
RETRY_BACKOFF = 0.05
RETRY_BACKOFF_MAX = 1.0

_UNIQ_KEY = PropertyKey.UNIQ_CLIENT_MESSAGE_ID_KEYIDX
_SEND_V2 = int(RequestCode.SEND_MESSAGE_V2)
_SEND_BATCH = int(RequestCode.SEND_BATCH_MESSAGE)
_SEND_REPLY_V2 = int(RequestCode.SEND_REPLY_MESSAGE_V2)
_COMPRESSED = int(MessageSysFlag.COMPRESSED | MessageSysFlag.COMPRESSION_ZLIB)
_PREPARED = int(MessageSysFlag.TRANSACTION_PREPARED)
_STATUS = SEND_STATUS_BY_CODE

# The send path fills a per-topic copy of a header map built once through the declared V2
# model (validating each send's header would cost more than the rest of the send): these are
# the wire names of the fields that change from one send to the next, taken from that model.
_V2 = SendMessageRequestHeaderV2
_QUEUE_ID = _V2.wire("queue_id")
_SYS_FLAG = _V2.wire("sys_flag")
_BORN_TIMESTAMP = _V2.wire("born_timestamp")
_FLAG = _V2.wire("flag")
_PROPERTIES = _V2.wire("properties")
_RECONSUME_TIMES = _V2.wire("reconsume_times")
_MAX_RECONSUME_TIMES = _V2.wire("max_reconsume_times")
_BATCH = _V2.wire("batch")
# ... and of the send response, read the same way (the full model explains a bad response).
_R = SendMessageResponseHeader
_R_MSG_ID = _R.wire("msg_id")
_R_QUEUE_ID = _R.wire("queue_id")
_R_QUEUE_OFFSET = _R.wire("queue_offset")
_R_TRANSACTION_ID = _R.wire("transaction_id")


def _read_send_response(ext: dict[str, Any]) -> tuple[str, int, int, str | None]:
    """msgId, queueId, queueOffset and transactionId of a send response."""
    try:
        return (
            ext[_R_MSG_ID],
            int(ext[_R_QUEUE_ID]),
            int(ext[_R_QUEUE_OFFSET]),
            ext.get(_R_TRANSACTION_ID) or None,
        )
    except (KeyError, TypeError, ValueError):
        header = SendMessageResponseHeader.from_fields(ext)  # raises a ProtocolError naming the field
        return header.msg_id, header.queue_id, header.queue_offset, header.transaction_id or None


def _batchable(msg: Message) -> bool:
    """Whether ``msg`` may wait in an automatic batch: not a timer, delay-level, retry-topic
    or reply message, nor one of another producer group (as the 5.x Java client decides)."""
    props = msg.properties
    return (
        not msg.topic.startswith(RETRY_PREFIX)
        and TIMER_REQUESTS.isdisjoint(props)
        and PropertyKey.DELAY_TIME_LEVEL not in props
        and PropertyKey.PRODUCER_GROUP not in props
        and not is_reply(msg)
    )


class Producer(ClientLifecycle):
    """Sends messages to topics.

    ::

        async with Producer("orders-producer", namesrv="127.0.0.1:9876") as producer:
            result = await producer.send(Message("Orders", b"...", tags="paid"))

    ``retries`` (default 2) extra attempts are made by synchronous sends when an attempt
    fails with a ``retriable`` error, another broker first; while no broker can be reached
    at all, attempts go on (with back-off) until ``send_timeout`` runs out, which bounds each
    send, retries included. Sharded and explicit-queue sends never retry, since moving to
    another queue would break their order.

    ``auto_batch=True`` lets concurrent plain sends of one topic share one request: a batch goes
    out when its bodies pass ``batch_size`` bytes (32 KiB) or ``linger`` seconds (10 ms) after
    its first message, with at most ``buffer_memory`` bytes (32 MiB) waiting
    (:mod:`aiorocketmq.client.batching`; RocketMQ 5's ``autoBatch``).
    """

    def __init__(
        self,
        group: str,
        namesrv: str | Iterable[str] | None = None,
        *,
        instance_name: str | None = None,
        send_timeout: float = 3.0,
        retries: int = 2,
        compress_threshold: int = COMPRESS_THRESHOLD,
        max_message_size: int = MAX_MESSAGE_SIZE,
        latency_fault_tolerance: bool = False,
        default_topic_queue_nums: int = 4,
        options: ClientOptions | None = None,
        enable_trace: bool = False,
        trace_topic: str | None = None,
        auto_batch: bool = False,
        linger: float = 0.010,
        batch_size: int = 32 * 1024,
        buffer_memory: int = 32 * 1024 * 1024,
    ) -> None:
        check_group(group)
        if send_timeout <= 0:
            raise ValueError("send_timeout must be positive")
        if retries < 0:
            raise ValueError("retries must not be negative")
        self.group = group
        self.namesrv = namesrv
        self.instance_name = instance_name or default_instance_name()
        self.send_timeout = send_timeout
        self.retries = retries
        self.compress_threshold = compress_threshold
        self.max_message_size = max_message_size
        self.default_topic_queue_nums = default_topic_queue_nums
        self.options = options or ClientOptions()
        self._faults = LatencyFaults() if latency_fault_tolerance else None
        self._acquired: ClientInstance | None = None
        self._publish: dict[str, PublishInfo] = {}
        self._checked_topics: set[str] = set()
        #: topic -> the V2 header map each single (batch) send to it starts from.
        self._single_headers: dict[str, dict[str, Any]] = {}
        self._batch_headers: dict[str, dict[str, Any]] = {}
        self._registered = True
        self._state = ServiceState.CREATED
        #: ``enable_trace``: message traces (``Pub``, ``EndTransaction``) go to ``trace_topic``.
        self.enable_trace = enable_trace
        self.trace_topic = trace_topic
        self._trace: TraceDispatcher | None = None
        #: ``auto_batch``: plain sends share batches (:mod:`aiorocketmq.client.batching`), sent
        #: when over ``batch_size`` bytes or ``linger`` seconds old.
        self._batcher = (
            BatchAccumulator(
                self.send_batch, linger=linger, batch_size=batch_size, buffer_memory=buffer_memory
            )
            if auto_batch
            else None
        )

    # -- lifecycle ------------------------------------------------------------------------

    @classmethod
    def _internal(cls, instance: ClientInstance, group: str) -> Producer:
        """A producer that rides on ``instance`` without registering a group (used by
        consumers to re-send messages to a retry topic when send-back fails)."""
        producer = cls(group, instance.namesrv_addrs, instance_name="internal")
        producer._acquired = instance
        producer._registered = False
        producer._state = ServiceState.RUNNING
        return producer

    async def start(self) -> None:
        """Join the client instance and announce the group to the brokers."""
        if self._state is not ServiceState.CREATED:
            raise ClientStateError(f"producer {self.group!r} was already started")
        instance = acquire_instance(self.namesrv, self.instance_name, self.options)
        try:
            instance.register_producer(self)
        except BaseException:
            await release_instance(instance)
            raise
        self._acquired = instance
        self._state = ServiceState.RUNNING
        await instance.send_heartbeat()
        if self.enable_trace:
            trace = TraceDispatcher(self.namesrv, self.options, self.trace_topic)
            await trace.start()
            self._trace = trace

    async def shutdown(self) -> None:
        """Unregister the group from the brokers and leave the client instance."""
        if self._state is not ServiceState.RUNNING:
            return
        if self._batcher is not None:
            # What waits in batches goes out first, while the producer can still send.
            await self._batcher.close()
        self._state = ServiceState.SHUTTING_DOWN
        instance = self._acquired
        assert instance is not None
        try:
            if self._trace is not None:
                await self._trace.shutdown()
            if self._registered:
                await instance.unregister_producer(self.group)
                await release_instance(instance)
        finally:
            self._state = ServiceState.SHUT_DOWN

    @property
    def _instance(self) -> ClientInstance:
        if self._state is not ServiceState.RUNNING or self._acquired is None:
            created = self._state in (ServiceState.CREATED, ServiceState.STARTING)
            state = "is not started" if created else "has been shut down"
            raise ClientStateError(
                f"producer {self.group!r} {state}; use 'async with Producer(...)' or 'await producer.start()'"
            )
        return self._acquired

    @property
    def state(self) -> ServiceState:
        return self._state

    @property
    def client_id(self) -> str:
        return self._instance.client_id

    # -- client instance callbacks --------------------------------------------------------

    def _published_topics(self) -> Iterable[str]:
        return list(self._publish)

    def _route_changed(self, topic: str, route: TopicRouteData) -> None:
        old = self._publish.get(topic)
        if old is not None:
            info = PublishInfo.from_route(topic, route)
            info._counter = old._counter  # keep the round-robin position
            if info.ok or old.own_route:
                self._publish[topic] = info

    def _check_transaction(
        self, broker_addr: str, header: CheckTransactionStateRequestHeader, message: MessageExt
    ) -> None:
        log.warning("producer %s got a transaction check but is not a TransactionProducer", self.group)

    # -- routes ---------------------------------------------------------------------------

    async def _publish_info(self, topic: str) -> PublishInfo:
        info = self._publish.get(topic)
        if info is not None and info.ok:
            return info
        instance = self._instance
        self._publish.setdefault(topic, PublishInfo(topic, [], own_route=False))
        try:
            route = await instance.update_route(topic)
            info = PublishInfo.from_route(topic, route)
        except TopicNotExistError:
            # Unknown topic: send through the auto-create template, as Java and C++ do; the
            # broker creates the topic and the next route refresh finds it.
            try:
                default = await instance.fetch_route(AUTO_CREATE_TOPIC)
            except TopicNotExistError:
                self._publish.pop(topic, None)
                raise NoRouteError(
                    f"no route for topic {topic!r}: it does not exist and no broker allows auto-creation"
                ) from None
            route = clamp_default_route(default, self.default_topic_queue_nums)
            instance.adopt_route(topic, route)
            info = PublishInfo.from_route(topic, route, own_route=False)
        except BaseException:
            self._publish.pop(topic, None)
            raise
        if not info.ok:
            raise NoRouteError(f"no writable queue for topic {topic!r}")
        current = self._publish.get(topic)
        if current is not None and current.ok:
            return current  # a concurrent first send got there first: share its position
        self._publish[topic] = info
        return info

    async def queues(self, topic: str) -> list[MessageQueue]:
        """The writable queues of ``topic``, in the order sends cycle through them."""
        check_topic(topic)
        return list((await self._publish_info(topic)).queues)

    # -- message preparation --------------------------------------------------------------

    def _header_template(self, topic: str, batch: bool) -> dict[str, Any]:
        """The V2 header map of a send to ``topic``, built once through the model."""
        cache = self._batch_headers if batch else self._single_headers
        template = cache.get(topic)
        if template is None:
            template = _V2(
                producer_group=self.group,
                topic=topic,
                default_topic=AUTO_CREATE_TOPIC,
                default_topic_queue_nums=self.default_topic_queue_nums,
                queue_id=0,
                sys_flag=0,
                born_timestamp=0,
                flag=0,
                reconsume_times=0,
                unit_mode=False,
                batch=batch,
            ).to_fields()
            if not batch:
                del template[_BATCH]  # absent means false, and single sends have always left it out
            cache[topic] = template
        return template

    def _check_message(self, msg: Message) -> None:
        topic = msg.topic
        if topic not in self._checked_topics:
            check_topic(topic)
            self._checked_topics.add(topic)
        fault = body_fault(msg.body, self.max_message_size)
        if fault is not None:
            raise ClientError(fault)

    def _prepare(self, msg: Message, sys_flag: int = 0) -> tuple[dict[str, Any], bytes, str]:
        """The V2 header fields (without queue id), wire body and unique id of one message."""
        self._check_message(msg)
        props = msg.properties
        uniq = props.get(_UNIQ_KEY)
        if uniq is None:
            uniq = props[_UNIQ_KEY] = self._instance.unique_ids.next_id()
        body = msg.body
        if len(body) >= self.compress_threshold:
            body = compress_body(body)
            sys_flag |= _COMPRESSED
        template = self._single_headers.get(msg.topic)
        if template is None:
            template = self._header_template(msg.topic, False)
        fields = template.copy()
        fields[_SYS_FLAG] = sys_flag
        fields[_BORN_TIMESTAMP] = time.time_ns() // 1_000_000
        fields[_FLAG] = msg.flag
        if msg.topic.startswith(RETRY_PREFIX):
            # A retry message carries its retry count in the header, not in properties.
            props = dict(props)
            reconsume = props.pop(PropertyKey.RECONSUME_TIME, None)
            max_reconsume = props.pop(PropertyKey.MAX_RECONSUME_TIMES, None)
            if reconsume is not None:
                fields[_RECONSUME_TIMES] = int(reconsume)
            if max_reconsume is not None:
                fields[_MAX_RECONSUME_TIMES] = int(max_reconsume)
        properties = fields[_PROPERTIES] = encode_properties(props)
        if len(properties) > MAX_PROPERTIES_LENGTH:
            raise ClientError(f"the message properties exceed {MAX_PROPERTIES_LENGTH} bytes")
        return fields, body, uniq

    def _prepare_batch(self, messages: Sequence[Message]) -> tuple[dict[str, Any], bytes, str]:
        if not messages:
            raise ClientError("the batch is empty")
        topic = messages[0].topic
        if topic.startswith(RETRY_PREFIX):
            raise ClientError("retry topics cannot be sent in a batch")
        if topic not in self._checked_topics:
            check_topic(topic)
            self._checked_topics.add(topic)
        prepared = prepare_batch(messages, topic, self.max_message_size, self._instance.unique_ids)
        if prepared is None:
            raise self._batch_error(messages, topic)
        body, ids = prepared
        fields = self._header_template(topic, True).copy()
        fields[_BORN_TIMESTAMP] = time.time_ns() // 1_000_000
        return fields, body, ids

    def _batch_error(self, messages: Sequence[Message], topic: str) -> ClientError:
        """Why ``prepare_batch`` refused ``messages``: the first message's fault, else the size."""
        fault = batch_fault(messages, topic, self.max_message_size)
        if fault is None:
            size = len(encode_batch(messages))
            fault = f"the batch is {size} bytes, more than the {self.max_message_size} allowed; split it"
        return ClientError(fault)

    async def _fixed_queue(
        self, topic: str, shard_key: str | None, queue: MessageQueue | None
    ) -> MessageQueue | None:
        if queue is not None:
            if shard_key is not None:
                raise ClientError("pass shard_key or queue, not both")
            if queue.topic != topic:
                raise ClientError(f"queue {queue} is not a queue of topic {topic!r}")
            return queue
        if shard_key is None:
            return None
        queues = (await self._publish_info(topic)).queues
        return queues[abs(java_hash(shard_key)) % len(queues)]

    # -- recall ---------------------------------------------------------------------------

    async def recall(self, topic: str, recall_handle: str, *, timeout: float | None = None) -> str:
        """Cancel a timer message before its delivery time with the ``recall_handle`` its send
        returned (RocketMQ 5, on brokers with ``recallMessageEnable=true``); returns its message
        id. The broker that issued the handle is asked; a refusal raises its BrokerError."""
        check_topic(topic)
        if topic.startswith((RETRY_PREFIX, DLQ_PREFIX)):
            raise ClientError("topic is not supported")
        try:
            handle = RecallHandle.decode(recall_handle)
        except ProtocolError as exc:
            raise ClientError(str(exc)) from None
        instance = self._instance
        await self._publish_info(topic)
        ids = instance.brokers.get(handle.broker_name)
        addr = ids.get(0) if ids else None
        if addr is None:
            addr = await instance.find_broker_addr(handle.broker_name, topic=topic)
        fields = {
            "producerGroup": self.group,
            "topic": topic,
            "recallHandle": recall_handle,
            "bname": handle.broker_name,
        }
        response = await instance.invoke(
            addr,
            RequestCode.RECALL_MESSAGE,
            fields,
            timeout=self.send_timeout if timeout is None else timeout,
        )
        if response.code != 0:
            raise error_for_code(response.code, response.remark)
        return str(response.ext_fields.get("msgId", handle.message_id))

    # -- sending --------------------------------------------------------------------------

    async def send(
        self,
        msg: Message,
        *,
        shard_key: str | None = None,
        queue: MessageQueue | None = None,
        timeout: float | None = None,
        deliver_at: float | datetime | None = None,
        delay: float | None = None,
    ) -> SendResult:
        """Send one message and wait until a broker stored it.

        ``shard_key``: messages with the same key go to the same queue (for ordered
        consumption); ``queue``: this exact queue. ``deliver_at`` (a datetime or seconds since
        the epoch) or ``delay`` (seconds from now): consumers see the message from then on, to
        the millisecond (a 5.x timer message, ``TIMER_DELIVER_MS``; the broker refuses times
        beyond its ``timerMaxDelaySec``, 3 days by default). Raises :class:`SendFailedError`
        when every attempt failed, :class:`NoRouteError` when the topic has no route, or the
        broker's error for a non-retryable refusal.
        """
        if deliver_at is not None or delay is not None:
            set_delivery_time(msg, deliver_at, delay)
        batcher = self._batcher
        if (
            batcher is not None
            and shard_key is None
            and queue is None
            and timeout is None
            and _batchable(msg)
        ):
            self._check_message(msg)
            waiting = batcher.offer(msg)
            if waiting is not None:
                return await waiting
        sending = self._send_one(msg, shard_key, queue, timeout)
        if self._trace is not None:
            sending = self._traced([msg], sending)
        if telemetry.active():
            kind = "fifo" if shard_key is not None else "delay" if msg.delay_level else "normal"
            return await self._observed([msg], kind, sending)
        return await sending

    async def _traced(self, messages: Sequence[Message], sending: Awaitable[SendResult]) -> SendResult:
        """Run ``sending`` and record its ``Pub`` trace (a failed send records nothing)."""
        began = time.time_ns() // 1_000_000
        result = await sending
        trace = self._trace
        if trace is not None:
            addrs = self._instance.brokers.get(result.queue.broker_name)
            trace.sent(self.group, messages, result, began, addrs.get(0) if addrs else None)
        return result

    async def _send_one(
        self, msg: Message, shard_key: str | None, queue: MessageQueue | None, timeout: float | None
    ) -> SendResult:
        fields, body, uniq = self._prepare(msg)
        fixed = await self._fixed_queue(msg.topic, shard_key, queue)
        code = _SEND_REPLY_V2 if is_reply(msg) else _SEND_V2
        return await self._send(msg.topic, code, fields, body, uniq, fixed, timeout)

    async def _observed(
        self, messages: Sequence[Message], kind: str, sending: Awaitable[SendResult]
    ) -> SendResult:
        """Run ``sending`` inside a send span whose context the messages carry (the span
        starts before ``sending`` encodes their properties) and record the send metrics."""
        start = time.perf_counter()
        topic = messages[0].topic
        try:
            with telemetry.send_span(messages, self.group, message_type=kind) as span:
                result = await sending
                if span is not None:
                    span.set_attribute("messaging.message.id", result.msg_id)
        except BaseException as exc:
            telemetry.record_send(topic, len(messages), time.perf_counter() - start, exc)
            raise
        telemetry.record_send(topic, len(messages), time.perf_counter() - start)
        return result

    async def send_batch(
        self,
        messages: Sequence[Message],
        *,
        shard_key: str | None = None,
        queue: MessageQueue | None = None,
        timeout: float | None = None,
    ) -> SendResult:
        """Send messages of one topic as one request, stored with consecutive offsets in one
        queue. The result's ``msg_id`` lists the unique ids, comma-separated."""
        sending = self._send_many(messages, shard_key, queue, timeout)
        if self._trace is not None and messages:
            sending = self._traced(messages, sending)
        if telemetry.active() and messages:
            return await self._observed(messages, "normal", sending)
        return await sending

    async def _send_many(
        self,
        messages: Sequence[Message],
        shard_key: str | None,
        queue: MessageQueue | None,
        timeout: float | None,
    ) -> SendResult:
        fields, body, ids = self._prepare_batch(messages)
        topic = messages[0].topic
        fixed = await self._fixed_queue(topic, shard_key, queue)
        return await self._send(topic, _SEND_BATCH, fields, body, ids, fixed, timeout)

    # -- request-reply ---------------------------------------------------------------------

    async def request(
        self,
        msg: Message,
        timeout: float = 3.0,
        *,
        shard_key: str | None = None,
        queue: MessageQueue | None = None,
    ) -> MessageExt:
        """Send ``msg`` as a request and return the reply a consumer sends back
        (:meth:`reply`). Raises :class:`~.request_reply.RequestFailedError` when the request
        cannot be sent and :class:`~.request_reply.ReplyTimeoutError` when no reply comes
        within ``timeout`` seconds (which bounds the send too)."""
        return await request(self, msg, timeout, shard_key=shard_key, queue=queue)

    def request_with_callback(
        self,
        msg: Message,
        callback: ReplyCallback,
        timeout: float = 3.0,
        *,
        shard_key: str | None = None,
        queue: MessageQueue | None = None,
    ) -> asyncio.Task[None]:
        """Send a request in the background: ``callback(reply, None)`` gets its reply,
        ``callback(None, error)`` the error that ended it (a plain or async function).
        The returned task ends after the callback."""
        return request_with_callback(self, msg, callback, timeout, shard_key=shard_key, queue=queue)

    async def reply(self, request: Message, body: bytes, *, timeout: float | None = None) -> SendResult:
        """Answer a consumed request message with ``body`` (its requester's
        :meth:`request` returns it)."""
        return await self.send(create_reply_message(request, body), timeout=timeout)

    async def send_oneway(
        self, msg: Message, *, shard_key: str | None = None, queue: MessageQueue | None = None
    ) -> None:
        """Send without waiting for the broker: fastest, no result, no retry, no guarantee."""
        if telemetry.active():
            with telemetry.send_span([msg], self.group):
                await self._send_oneway(msg, shard_key, queue)
            return
        await self._send_oneway(msg, shard_key, queue)

    async def _send_oneway(self, msg: Message, shard_key: str | None, queue: MessageQueue | None) -> None:
        fields, body, _ = self._prepare(msg)
        fixed = await self._fixed_queue(msg.topic, shard_key, queue)
        if fixed is None:
            fixed = (await self._publish_info(msg.topic)).select()
        instance = self._instance
        fields[_QUEUE_ID] = fixed.queue_id
        addr = await instance.find_broker_addr(fixed.broker_name, topic=msg.topic)
        await instance.oneway(addr, _SEND_V2, fields, body)

    async def _send(
        self,
        topic: str,
        code: int,
        fields: dict[str, Any],
        body: bytes,
        uniq: str,
        fixed: MessageQueue | None,
        timeout: float | None,
    ) -> SendResult:
        instance = self._instance
        budget = self.send_timeout if timeout is None else timeout
        start = time.monotonic()
        deadline = start + budget
        attempts = 1 if fixed is not None else 1 + self.retries
        # Only a send free to move may keep trying while no broker can be reached at all.
        ride_out = fixed is None and self.retries > 0
        info = None if fixed is not None else await self._publish_info(topic)
        brokers = instance.brokers
        faults = self._faults
        errors: list[BaseException] = []
        #: the broker each attempt in ``errors`` was aimed at
        aimed: list[str | None] = []
        failed: set[str] = set()
        last_broker: str | None = None
        backoff = RETRY_BACKOFF
        while True:
            if info is None:
                assert fixed is not None
                mq = fixed
            else:
                if errors:
                    # A route refreshed since the last attempt is used from now on.
                    current = self._publish.get(topic)
                    if current is not None and current.ok:
                        info = current
                mq = info.select(last_broker, faults)
            if mq.broker_name in failed:
                # Back to a broker that failed this send (no other one is left): give it a
                # moment, longer each time, but keep the last bit of the budget for the attempt.
                room = deadline - time.monotonic() - RETRY_BACKOFF
                if room <= 0:
                    errors.append(TimeoutError(f"send to {topic!r} ran out of its {budget:g}s budget"))
                    aimed.append(None)
                    break
                await asyncio.sleep(min(backoff, room))
                backoff = min(backoff * 2, RETRY_BACKOFF_MAX)
            last_broker = mq.broker_name
            began = time.monotonic()
            remaining = deadline - began
            if remaining <= 0:
                errors.append(TimeoutError(f"send to {topic!r} ran out of its {budget:g}s budget"))
                aimed.append(None)
                break
            ids = brokers.get(mq.broker_name)
            addr = ids.get(0) if ids else None
            fields[_QUEUE_ID] = mq.queue_id
            error: MQError
            try:
                if addr is None:
                    addr = await instance.find_broker_addr(mq.broker_name, topic=topic)
                response = await instance.invoke(addr, code, fields, body, timeout=remaining)
            except MQError as exc:
                if not exc.retriable:
                    raise
                if faults is not None and isinstance(exc, RemotingError):
                    faults.update(mq.broker_name, time.monotonic() - began, isolate=True)
                error = exc
            else:
                status = _STATUS.get(response.code)
                if status is not None:
                    if faults is not None:
                        faults.update(mq.broker_name, time.monotonic() - began)
                    msg_id, queue_id, queue_offset, transaction_id = _read_send_response(response.ext_fields)
                    if queue_id != mq.queue_id:
                        mq = MessageQueue(topic=topic, broker_name=mq.broker_name, queue_id=queue_id)
                    recall = response.ext_fields.get("recallHandle") or None
                    return SendResult(status, uniq, msg_id, mq, queue_offset, transaction_id, recall)
                error = error_for_code(response.code, response.remark)
                if faults is not None:
                    faults.update(mq.broker_name, time.monotonic() - began, isolate=True)
                if not error.retriable:
                    raise error
            errors.append(error)
            aimed.append(mq.broker_name)
            failed.add(mq.broker_name)
            if info is not None:
                # After a failure the broker set may have changed (a master moved).
                self._instance.refresh_route_soon(topic)
            unreachable = isinstance(error, (ConnectionClosedError, NoRouteError))
            if len(errors) >= attempts and not (ride_out and unreachable):
                break
        cost = time.monotonic() - start
        tries = sum(where is not None for where in aimed)
        causes = summarize_causes(zip(aimed, errors, strict=True)) or "no attempt could be made"
        failure = SendFailedError(
            f"send to {topic!r} failed after {tries} attempt(s) in {cost:.3f}s: {causes}", errors, aimed
        )
        raise failure from (errors[-1] if errors else None)


#: Java's ``LocalTransactionState`` names, as ``EndTransaction`` traces record them.
_TRACE_STATES = {
    TransactionState.COMMIT: "COMMIT_MESSAGE",
    TransactionState.ROLLBACK: "ROLLBACK_MESSAGE",
    TransactionState.UNKNOWN: "UNKNOW",
}

LocalTransaction = Callable[[Message], "TransactionState | Awaitable[TransactionState]"]
TransactionChecker = Callable[[MessageExt], "TransactionState | Awaitable[TransactionState]"]


async def _resolve(outcome: Any) -> TransactionState:
    if inspect.isawaitable(outcome):
        outcome = await outcome
    if outcome is None:
        return TransactionState.UNKNOWN
    if not isinstance(outcome, TransactionState):
        raise ClientError(f"a transaction callback returned {outcome!r}, not a TransactionState")
    return outcome


class TransactionProducer(Producer):
    """A producer of transactional messages.

    ::

        async def check(msg: MessageExt) -> TransactionState: ...   # asked by the broker
        async with TransactionProducer("tx-group", namesrv=..., checker=check) as producer:
            result = await producer.send_in_transaction(msg, execute)  # execute(msg) -> state

    The message is first stored as a half message, invisible to consumers; ``execute`` runs
    the local transaction; COMMIT makes the message visible, ROLLBACK discards it, UNKNOWN
    (or an exception) leaves the broker to ask ``checker`` later.
    """

    def __init__(
        self,
        group: str,
        namesrv: str | Iterable[str] | None = None,
        *,
        checker: TransactionChecker,
        **kwargs: Any,
    ) -> None:
        if not callable(checker):
            raise ClientError("a TransactionProducer needs a checker callback for the broker's check-backs")
        super().__init__(group, namesrv, **kwargs)
        self.checker = checker

    async def send_in_transaction(self, msg: Message, execute: LocalTransaction) -> TransactionSendResult:
        if msg.delay_level:
            msg.delay_level = 0  # transactions and delays do not mix (as in Java)
        msg.properties[PropertyKey.TRANSACTION_PREPARED] = "true"
        msg.properties[PropertyKey.PRODUCER_GROUP] = self.group
        result = await (
            self._observed([msg], "transaction", self._send_half(msg))
            if telemetry.active()
            else self._send_half(msg)
        )
        uniq = result.msg_id
        error: BaseException | None = None
        if result.status.name == "SEND_OK":
            try:
                state = await _resolve(execute(msg))
            except Exception as exc:
                log.warning(
                    "local transaction of %s raised; leaving it to the check-back", uniq, exc_info=True
                )
                state, error = TransactionState.UNKNOWN, exc
        else:
            state = TransactionState.ROLLBACK
        try:
            await self._end_transaction(msg, result, state, error)
        except MQError as exc:
            # The broker's check-back resolves the half message anyway.
            log.warning("END_TRANSACTION for %s failed: %s", uniq, exc)
        return TransactionSendResult(result, state)

    async def _send_half(self, msg: Message) -> SendResult:
        fields, body, uniq = self._prepare(msg, _PREPARED)
        sending = self._send(msg.topic, _SEND_V2, fields, body, uniq, None, None)
        if self._trace is not None:
            return await self._traced([msg], sending)
        return await sending

    async def _end_transaction(
        self, msg: Message, result: SendResult, state: TransactionState, error: BaseException | None
    ) -> None:
        instance = self._instance
        addr = await instance.find_broker_addr(result.queue.broker_name, topic=result.queue.topic)
        _, commit_log_offset = decode_offset_msg_id(result.offset_msg_id)
        header = EndTransactionRequestHeader(
            producer_group=self.group,
            tran_state_table_offset=result.queue_offset,
            commit_log_offset=commit_log_offset,
            commit_or_rollback=state.value,
            from_transaction_check=False,
            msg_id=result.msg_id,
            transaction_id=result.transaction_id or result.msg_id,
        )
        conn = await instance.connection(addr)
        cmd = instance._request_command(addr, RequestCode.END_TRANSACTION, header, b"")
        if error is not None:
            cmd.remark = f"{type(error).__name__}: {error}"
        conn.send_oneway(cmd)
        if self._trace is not None:
            self._trace.transaction_ended(
                self.group, msg, result.msg_id, header.transaction_id, _TRACE_STATES[state], addr, False
            )

    def _check_transaction(
        self, broker_addr: str, header: CheckTransactionStateRequestHeader, message: MessageExt
    ) -> None:
        self._instance.spawn(self._answer_check(broker_addr, header, message))

    async def _answer_check(
        self, broker_addr: str, header: CheckTransactionStateRequestHeader, message: MessageExt
    ) -> None:
        try:
            state = await _resolve(self.checker(message))
        except Exception:
            log.exception("transaction checker raised for %s", message.msg_id)
            state = TransactionState.UNKNOWN
        uniq = message.properties.get(_UNIQ_KEY) or message.msg_id
        answer = EndTransactionRequestHeader(
            producer_group=self.group,
            tran_state_table_offset=header.tran_state_table_offset,
            commit_log_offset=header.commit_log_offset,
            commit_or_rollback=state.value,
            from_transaction_check=True,
            msg_id=uniq,
            transaction_id=header.transaction_id or uniq,
        )
        try:
            await self._instance.oneway(broker_addr, RequestCode.END_TRANSACTION, answer)
        except MQError as exc:
            log.warning("answering the transaction check of %s failed: %s", uniq, exc)
            return
        if self._trace is not None:
            self._trace.transaction_ended(
                self.group, message, uniq, answer.transaction_id, _TRACE_STATES[state], broker_addr, True
            )


__all__ = [
    "LocalTransaction",
    "Producer",
    "TransactionChecker",
    "TransactionProducer",
]


#: The 5.x property carrying a message's delivery time (ms since the epoch).
TIMER_DELIVER_MS = "TIMER_DELIVER_MS"


def set_delivery_time(msg: Message, deliver_at: float | datetime | None, delay: float | None) -> None:
    """Make ``msg`` a timer message due at ``deliver_at`` (datetime or epoch seconds) or
    ``delay`` seconds from now."""
    if deliver_at is not None and delay is not None:
        raise ClientError("give deliver_at or delay, not both")
    if msg.delay_level:
        raise ClientError("a message has either a delay level or a delivery time, not both")
    if delay is not None:
        if delay < 0:
            raise ClientError(f"delay must not be negative, got {delay}")
        when = time.time() + delay
    elif isinstance(deliver_at, datetime):
        when = deliver_at.timestamp()
    else:
        assert deliver_at is not None
        when = float(deliver_at)
    msg.properties[TIMER_DELIVER_MS] = str(round(when * 1000))
