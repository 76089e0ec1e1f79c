"""The simple consumer: POP consumption (RocketMQ 5.x) over remoting.

The application asks for messages when it wants them; each comes with a receipt handle and
stays invisible to the rest of the group for the invisible duration. An acked message is done;
one not acked in time is delivered again (to any member) with its delivery attempt raised,
and goes to the group's dead-letter queue once the group's ``retryMaxTimes`` retries are used
up. There is no rebalance and no offset to commit: the broker keeps the group's progress.

::

    async with SimpleConsumer("billing", "127.0.0.1:9876", subscriptions={"Orders": "paid"}) as consumer:
        for msg in await consumer.receive(16, invisible_duration=30):
            ...
            await consumer.ack(msg)

Requests are Apache 5.x's POP_MESSAGE / ACK_MESSAGE / CHANGE_MESSAGE_INVISIBLETIME; receipt
handles are built from a pop's response as Apache's clients build them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Mapping

from aiorocketmq.protocol.codes import Perm, ResponseCode
from aiorocketmq.protocol.command import RemotingCommand
from aiorocketmq.protocol.errors import error_for_code
from aiorocketmq.protocol.message import MessageExt, decode_records
from aiorocketmq.protocol.names import SUBSCRIBE_ALL
from aiorocketmq.protocol.pop import (
    INIT_MODE_MAX,
    POLLING_FULL,
    POLLING_TIMEOUT,
    POP_CK,
    AckMessageRequestHeader,
    BatchAck,
    ChangeInvisibleTimeRequestHeader,
    ChangeInvisibleTimeResponseHeader,
    PopMessageRequestHeader,
    PopMessageResponseHeader,
    PopRequestCode,
    ReceiptHandle,
    encode_batch_ack_body,
    handles_for,
)
from aiorocketmq.protocol.sql92 import EXPRESSION_TYPE_SQL92

from .client_instance import (
    ClientInstance,
    ClientOptions,
    default_instance_name,
)
from .errors import ClientError, ClientStateError, MQError, NoRouteError, RemotingError
from .lifecycle import InstanceClient
from .subscription import build_sql_subscription, check_group, check_topic, parse_tags

#: Most messages one receive returns (the broker's limit per pop).
MAX_RECEIVE = 32
#: How long a receive waits on a broker for messages when none are there (seconds).
DEFAULT_AWAIT_DURATION = 20.0
ROUTE_TTL = 30.0
_EMPTY = frozenset({POLLING_TIMEOUT, POLLING_FULL, int(ResponseCode.PULL_NOT_FOUND)})
_PERM_READ = int(Perm.READ)
_ACK_MESSAGE = int(PopRequestCode.ACK_MESSAGE)
_BATCH_ACK_MESSAGE = int(PopRequestCode.BATCH_ACK_MESSAGE)
_ACK_GROUP = AckMessageRequestHeader.wire("consumer_group")
_ACK_TOPIC = AckMessageRequestHeader.wire("topic")
_ACK_QUEUE_ID = AckMessageRequestHeader.wire("queue_id")
_ACK_EXTRA_INFO = AckMessageRequestHeader.wire("extra_info")
_ACK_OFFSET = AckMessageRequestHeader.wire("offset")


class ReceivedMessage:
    """A message from :meth:`SimpleConsumer.receive`: the message itself (``message``, and
    its usual fields here) plus what acking it needs."""

    __slots__ = (
        "message",
        "receipt_handle",
        "delivery_attempt",
        "broker_name",
        "broker_addr",
        "invisible_until",
    )

    def __init__(
        self,
        message: MessageExt,
        receipt_handle: str,
        delivery_attempt: int,
        broker_name: str,
        broker_addr: str,
        invisible_until: float,
    ) -> None:
        self.message = message
        #: Names this delivery; replaced by :meth:`SimpleConsumer.change_invisible_duration`.
        self.receipt_handle = receipt_handle
        #: 1 for a first delivery, 2 for the first redelivery, ...
        self.delivery_attempt = delivery_attempt
        self.broker_name = broker_name
        self.broker_addr = broker_addr
        #: When the message becomes visible to the group again unless acked (epoch seconds).
        self.invisible_until = invisible_until

    @property
    def topic(self) -> str:
        return self.message.topic

    @property
    def body(self) -> bytes:
        return self.message.body

    @property
    def tags(self) -> str | None:
        return self.message.tags

    @property
    def keys(self) -> list[str]:
        return self.message.keys

    @property
    def properties(self) -> dict[str, str]:
        return self.message.properties

    @property
    def msg_id(self) -> str:
        """The message's id, the same on every delivery."""
        return self.message.msg_id

    @property
    def queue_id(self) -> int:
        return self.message.queue_id

    @property
    def queue_offset(self) -> int:
        return self.message.queue_offset

    def __repr__(self) -> str:
        return (
            f"ReceivedMessage(topic={self.topic!r}, msg_id={self.msg_id!r}, "
            f"delivery_attempt={self.delivery_attempt}, receipt_handle={self.receipt_handle!r})"
        )


class SimpleConsumer(InstanceClient):
    """Receive, ack and change the invisible duration of messages of the subscribed topics.

    ``subscriptions`` maps topics to tag expressions (``"*"``, ``"a || b"``); ``fifo`` pops
    orderly: one batch per queue at a time, in queue order, a queue blocked until its batch is
    acked or invisible no more (use it with a FIFO group and ordered sends)."""

    _describes = "the simple consumer"
    _started_by = "async with SimpleConsumer(...)"

    def __init__(
        self,
        group: str,
        namesrv: str | Iterable[str] | None = None,
        *,
        subscriptions: Mapping[str, str] | None = None,
        await_duration: float = DEFAULT_AWAIT_DURATION,
        fifo: bool = False,
        instance_name: str | None = None,
        options: ClientOptions | None = None,
    ) -> None:
        check_group(group)
        self.group = group
        self.namesrv = namesrv
        self.await_duration = await_duration
        self.fifo = fifo
        self.instance_name = instance_name or f"simple-{default_instance_name()}"
        self.options = options or ClientOptions()
        self._subscriptions: dict[str, str] = {}
        self._sql: set[str] = set()
        for topic, expression in (subscriptions or {}).items():
            self.subscribe(topic, expression)
        self._acquired: ClientInstance | None = None
        self._route_times: dict[str, float] = {}
        self._next_target = 0

    # -- lifecycle ----------------------------------------------------------------------------

    def subscribe(self, topic: str, expression: str = SUBSCRIBE_ALL, *, sql: bool = False) -> None:
        """Receive ``topic``'s messages whose tag the expression names (``"*"``: all), or,
        with ``sql``, those whose properties match an SQL92 expression (the broker needs
        ``enablePropertyFilter=true``)."""
        check_topic(topic)
        if sql:
            self._subscriptions[topic] = build_sql_subscription(topic, expression).sub_string
            self._sql.add(topic)
            return
        tags = parse_tags(expression)
        self._subscriptions[topic] = " || ".join(tags) if tags else SUBSCRIBE_ALL
        self._sql.discard(topic)

    def unsubscribe(self, topic: str) -> None:
        self._subscriptions.pop(topic, None)
        self._sql.discard(topic)

    @property
    def subscriptions(self) -> dict[str, str]:
        return dict(self._subscriptions)

    async def start(self) -> None:
        await super().start()
        try:
            for topic in self._subscriptions:
                await self._route(topic)
        except BaseException:
            await self.shutdown()
            raise

    # -- receiving ----------------------------------------------------------------------------

    async def receive(
        self, max_messages: int = 16, invisible_duration: float = 30.0, *, await_duration: float | None = None
    ) -> list[ReceivedMessage]:
        """Up to ``max_messages`` messages of the subscribed topics, each invisible to the
        group for ``invisible_duration`` seconds; waits up to ``await_duration`` (the
        consumer's by default) for messages when none are there, then returns ``[]``."""
        if not 0 < max_messages <= MAX_RECEIVE:
            raise ClientError(f"max_messages must be within [1, {MAX_RECEIVE}], not {max_messages}")
        if not 0 <= invisible_duration <= 12 * 3600:
            raise ClientError(f"invisible_duration must be within [0 s, 12 h], not {invisible_duration}")
        if not self._subscriptions:
            raise ClientStateError("the simple consumer subscribes to no topic")
        wait = self.await_duration if await_duration is None else await_duration
        targets = await self._targets()
        if not targets:
            raise NoRouteError(f"no readable queue of {sorted(self._subscriptions)} on any broker")
        start = self._next_target
        self._next_target += 1
        ordered = [targets[(start + i) % len(targets)] for i in range(len(targets))]
        invisible_ms = int(invisible_duration * 1000)
        # A quick look everywhere first, then a long poll on one broker (the next one each time).
        reachable = []
        failure: MQError | None = None
        for target in ordered:
            try:
                found = await self._pop(*target, max_messages, invisible_ms, 0)
            except RemotingError as exc:
                failure = exc  # that broker is down or unreachable: the others still serve
                continue
            if found:
                return found
            reachable.append(target)
        if not reachable:
            assert failure is not None
            raise failure
        if wait <= 0:
            return []
        return await self._pop(*reachable[0], max_messages, invisible_ms, int(wait * 1000))

    async def _pop(
        self, topic: str, broker_name: str, addr: str, max_messages: int, invisible_ms: int, poll_ms: int
    ) -> list[ReceivedMessage]:
        header = PopMessageRequestHeader(
            consumer_group=self.group,
            topic=topic,
            queue_id=-1,
            max_msg_nums=max_messages,
            invisible_time=invisible_ms,
            poll_time=poll_ms,
            born_time=time.time_ns() // 1_000_000,
            init_mode=INIT_MODE_MAX,
            exp_type=EXPRESSION_TYPE_SQL92 if topic in self._sql else "TAG",
            exp=self._subscriptions.get(topic, SUBSCRIBE_ALL),
            order=self.fifo,
        )
        timeout = poll_ms / 1000 + self.options.request_timeout
        response = await self._instance.invoke(addr, PopRequestCode.POP_MESSAGE, header, timeout=timeout)
        if response.code in _EMPTY:
            return []
        if response.code != ResponseCode.SUCCESS:
            raise error_for_code(response.code, response.remark)
        return self._received(response, topic, broker_name, addr)

    def _received(
        self, response: RemotingCommand, topic: str, broker_name: str, addr: str
    ) -> list[ReceivedMessage]:
        header = PopMessageResponseHeader.from_fields(response.ext_fields)
        messages = decode_records(response.body)
        handles = handles_for(
            header,
            broker_name,
            [(m.topic, m.queue_id, m.queue_offset) for m in messages],
            [m.properties.get(POP_CK) for m in messages],
        )
        invisible_until = (header.pop_time + header.invisible_time) / 1000
        received = []
        for msg, (handle, consumed_before) in zip(messages, handles, strict=True):
            if self.fifo and consumed_before > 0:
                msg.reconsume_times = consumed_before
            # A redelivery is stored in the group's retry topic: show the topic asked for.
            msg.topic = topic
            msg.broker_name = broker_name
            received.append(
                ReceivedMessage(msg, handle, msg.reconsume_times + 1, broker_name, addr, invisible_until)
            )
        return received

    # -- acking -------------------------------------------------------------------------------

    async def ack(self, message: ReceivedMessage) -> None:
        """The message is consumed: it will not be delivered again. Raises the broker's error
        when the handle is no longer valid (its invisible time passed: it will come again)."""
        handle = ReceiptHandle.decode(message.receipt_handle)
        # The header map by the model's wire names: a validation per ack would cost more
        # than the rest of the request.
        fields = {
            _ACK_GROUP: self.group,
            # A redelivery is acknowledged in the retry topic it is stored in (Apache's
            # brokers look it up there).
            _ACK_TOPIC: handle.real_topic(message.topic, self.group),
            _ACK_QUEUE_ID: handle.queue_id,
            _ACK_EXTRA_INFO: message.receipt_handle,
            _ACK_OFFSET: handle.queue_offset,
        }
        await self._instance.call(message.broker_addr, _ACK_MESSAGE, fields)

    async def ack_batch(self, messages: Iterable[ReceivedMessage]) -> None:
        """Ack many messages with one BATCH_ACK_MESSAGE request per broker. Raises the
        broker's error when some were refused (their invisible time passed); the others are
        acked all the same."""
        by_broker: dict[str, tuple[str, dict[tuple[str, bool, int, int, int, int, int], list[int]]]] = {}
        for message in messages:
            h = ReceiptHandle.decode(message.receipt_handle)
            batch = (
                message.topic,
                h.retry,
                h.ck_queue_offset,
                h.queue_id,
                h.revive_qid,
                h.pop_time,
                h.invisible_time,
            )
            by_broker.setdefault(message.broker_addr, (h.broker_name, {}))[1].setdefault(batch, []).append(
                h.queue_offset
            )
        calls = []
        for addr, (broker_name, batches) in by_broker.items():
            acks = [
                BatchAck(
                    consumer_group=self.group,
                    topic=topic,
                    retry=retry,
                    start_offset=start,
                    queue_id=queue_id,
                    revive_qid=revive_qid,
                    pop_time=pop_time,
                    invisible_time=invisible_time,
                    offsets=tuple(offsets),
                )
                for (
                    topic,
                    retry,
                    start,
                    queue_id,
                    revive_qid,
                    pop_time,
                    invisible_time,
                ), offsets in batches.items()
            ]
            body = encode_batch_ack_body(broker_name, acks)
            calls.append(self._instance.call(addr, _BATCH_ACK_MESSAGE, None, body))
        results = await asyncio.gather(*calls, return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result

    async def change_invisible_duration(self, message: ReceivedMessage, duration: float) -> None:
        """Keep the message invisible for ``duration`` seconds from now (more time to work on
        it, or 0 to hand it back at once); ``message`` gets its new receipt handle."""
        if not 0 <= duration <= 12 * 3600:
            raise ClientError(f"the invisible duration must be within [0 s, 12 h], not {duration}")
        handle = ReceiptHandle.decode(message.receipt_handle)
        header = ChangeInvisibleTimeRequestHeader(
            consumer_group=self.group,
            topic=handle.real_topic(message.topic, self.group),
            queue_id=handle.queue_id,
            extra_info=message.receipt_handle,
            offset=handle.queue_offset,
            invisible_time=int(duration * 1000),
        )
        response = await self._instance.call(
            message.broker_addr, PopRequestCode.CHANGE_MESSAGE_INVISIBLETIME, header
        )
        answer = ChangeInvisibleTimeResponseHeader.from_fields(response.ext_fields)
        fresh = handle.changed(answer)
        message.receipt_handle = fresh.encode()
        message.invisible_until = fresh.visible_at / 1000

    # -- routes -------------------------------------------------------------------------------

    async def _route(self, topic: str) -> None:
        await self._instance.update_route(topic)
        self._route_times[topic] = time.monotonic()

    async def _targets(self) -> list[tuple[str, str, str]]:
        """(topic, broker name, master address) of every broker with readable queues of a
        subscribed topic."""
        instance = self._instance
        targets = []
        now = time.monotonic()
        for topic in self._subscriptions:
            if topic not in instance.routes or now - self._route_times.get(topic, 0.0) > ROUTE_TTL:
                try:
                    await self._route(topic)
                except MQError:
                    if topic not in instance.routes:
                        raise
            route = instance.routes[topic]
            readable = {
                q.broker_name for q in route.queue_datas if q.perm & _PERM_READ and q.read_queue_nums > 0
            }
            for data in route.broker_datas:
                addr = data.master_addr()
                if data.broker_name in readable and addr is not None:
                    targets.append((topic, data.broker_name, addr))
        return targets
