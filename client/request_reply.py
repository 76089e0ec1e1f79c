"""Request-reply messaging (RocketMQ 4.6+): a producer sends a request and waits for the
answer a consumer sends back.

The requester stamps the message with a fresh ``CORRELATION_ID``, its own client id as
``REPLY_TO_CLIENT`` and the time it will wait as ``TTL`` (ms), and sends it like any message.
The consumer that handles it builds the reply with :func:`create_reply_message`: the body it
chooses, sent to the reply topic of the cluster that stored the request
(``<cluster>_REPLY_TOPIC``, from the request's ``CLUSTER`` property) with ``MSG_TYPE=reply``
and the request's correlation id, reply-to client and TTL. A producer sends such a message
with SEND_REPLY_MESSAGE_V2, and the broker pushes it straight to the requester's connection
(PUSH_REPLY_MESSAGE_TO_CLIENT), where :class:`ReplyWaiters` hands it to the waiting request.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeAlias

from aiorocketmq.protocol.codes import MessageSysFlag, ResponseCode
from aiorocketmq.protocol.command import RemotingCommand
from aiorocketmq.protocol.errors import MQError
from aiorocketmq.protocol.headers import ReplyMessageRequestHeader
from aiorocketmq.protocol.message import (
    Message,
    MessageExt,
    PropertyKey,
    decode_properties,
    decompress_body,
    pack_host,
)
from aiorocketmq.protocol.names import REPLY_MESSAGE_FLAG, reply_topic
from aiorocketmq.protocol.transport import Connection

from .errors import ClientError

if TYPE_CHECKING:
    from aiorocketmq.protocol.body import MessageQueue

    from .producer import Producer

log = logging.getLogger(__name__)

_CORRELATION_ID = PropertyKey.CORRELATION_ID
_REPLY_TO = PropertyKey.REPLY_TO_CLIENT
_TTL = PropertyKey.TTL
_COMPRESSED = int(MessageSysFlag.COMPRESSED)

#: Called with the reply, or with the error that ended the request (never both).
ReplyCallback: TypeAlias = Callable[[MessageExt | None, BaseException | None], Awaitable[None] | None]


class RequestFailedError(ClientError):
    """The request message could not be sent; ``__cause__`` says why."""


class ReplyTimeoutError(ClientError, TimeoutError):
    """The request was sent but no reply came back within its timeout."""


def is_reply(msg: Message) -> bool:
    """True for a reply message (sent with SEND_REPLY_MESSAGE_V2, not SEND_MESSAGE_V2)."""
    return msg.properties.get(PropertyKey.MESSAGE_TYPE) == REPLY_MESSAGE_FLAG


def create_reply_message(request: Message, body: bytes) -> Message:
    """The reply to a consumed ``request``: send it with any producer's ``send``.

    Raises :class:`ClientError` when ``request`` lacks the ``CLUSTER`` property the broker
    adds to every stored message (it was not consumed from a broker)."""
    props = request.properties
    cluster = props.get(PropertyKey.CLUSTER)
    if not cluster:
        raise ClientError(
            f"create reply message fail, requestMessage error, property[{PropertyKey.CLUSTER}] is null."
        )
    reply = {PropertyKey.MESSAGE_TYPE: REPLY_MESSAGE_FLAG}
    for name in (_CORRELATION_ID, _REPLY_TO, _TTL):
        value = props.get(name)
        if value is not None:
            reply[name] = value
    return Message(reply_topic(cluster), body, properties=reply)


def _host(text: str | None) -> bytes:
    """``/127.0.0.1:10911`` (or ``name/127.0.0.1:10911``, Java's ``SocketAddress`` text) packed."""
    if text:
        address = text.rsplit("/", 1)[-1]
        host, _, port = address.rpartition(":")
        try:
            return pack_host(host.strip("[]"), int(port))
        except ValueError:
            pass
    return b"\0" * 8


def decode_pushed_reply(cmd: RemotingCommand, arrived: int) -> MessageExt:
    """The reply a PUSH_REPLY_MESSAGE_TO_CLIENT request carries (``arrived``: epoch ms)."""
    h = ReplyMessageRequestHeader.from_fields(cmd.ext_fields)
    body = cmd.body
    if h.sys_flag & _COMPRESSED:
        body = decompress_body(body, h.sys_flag)
    props = decode_properties(h.properties or "")
    props[PropertyKey.ARRIVE_TIME] = str(arrived)
    return MessageExt(
        h.topic,
        body,
        flag=h.flag,
        properties=props,
        queue_id=h.queue_id,
        sys_flag=h.sys_flag,
        born_timestamp=h.born_timestamp,
        born_host=_host(h.born_host),
        store_timestamp=h.store_timestamp,
        store_host=_host(h.store_host),
        reconsume_times=h.reconsume_times or 0,
    )


class ReplyWaiters:
    """The requests of one client instance that wait for a reply, by correlation id."""

    def __init__(self) -> None:
        self._waiting: dict[str, asyncio.Future[MessageExt]] = {}

    def __len__(self) -> int:
        return len(self._waiting)

    def register(self, correlation_id: str) -> asyncio.Future[MessageExt]:
        future: asyncio.Future[MessageExt] = asyncio.get_running_loop().create_future()
        self._waiting[correlation_id] = future
        return future

    def discard(self, correlation_id: str) -> None:
        self._waiting.pop(correlation_id, None)

    def on_push_reply(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """A broker pushes a reply: wake the request waiting for it (a late reply, whose
        request gave up, is acknowledged and dropped)."""
        msg = decode_pushed_reply(cmd, time.time_ns() // 1_000_000)
        correlation_id = msg.properties.get(_CORRELATION_ID)
        future = self._waiting.pop(correlation_id, None) if correlation_id else None
        if future is None:
            log.warning("reply %s from %s matches no waiting request", correlation_id, conn.address)
        elif not future.done():
            future.set_result(msg)
        return cmd.response(ResponseCode.SUCCESS)


async def request(
    producer: Producer,
    msg: Message,
    timeout: float,
    *,
    shard_key: str | None = None,
    queue: MessageQueue | None = None,
) -> MessageExt:
    """Send ``msg`` as a request through ``producer`` and wait for its reply."""
    if timeout <= 0:
        raise ValueError("a request's timeout must be positive")
    instance = producer._instance
    start = time.monotonic()
    correlation_id = str(uuid.uuid4())
    props = msg.properties
    props[_CORRELATION_ID] = correlation_id
    props[_REPLY_TO] = instance.client_id
    props[_TTL] = str(int(timeout * 1000))
    waiters = instance.replies
    future = waiters.register(correlation_id)
    try:
        if msg.topic not in instance.routes:
            # A first request: the brokers must know this client (its heartbeat) before a
            # reply to it can be pushed back.
            try:
                await producer.queues(msg.topic)
                await instance.send_heartbeat(wait=True)
            except MQError as exc:
                raise RequestFailedError(f"send request message to <{msg.topic}> fail: {exc}") from exc
        left = timeout - (time.monotonic() - start)
        try:
            if left <= 0:
                raise TimeoutError(f"no time left of the request's {timeout:g}s to send it")
            await producer.send(msg, shard_key=shard_key, queue=queue, timeout=left)
        except (MQError, TimeoutError) as exc:
            raise RequestFailedError(f"send request message to <{msg.topic}> fail: {exc}") from exc
        left = timeout - (time.monotonic() - start)
        try:
            return await asyncio.wait_for(future, max(left, 0))
        except TimeoutError:
            raise ReplyTimeoutError(
                f"send request message to <{msg.topic}> OK, but wait reply message timeout, "
                f"{int(timeout * 1000)} ms."
            ) from None
    finally:
        waiters.discard(correlation_id)


async def _call_back(callback: ReplyCallback, reply: MessageExt | None, error: BaseException | None) -> None:
    try:
        outcome: Any = callback(reply, error)
        if inspect.isawaitable(outcome):
            await outcome
    except Exception:
        log.exception("a request callback raised")


def request_with_callback(
    producer: Producer,
    msg: Message,
    callback: ReplyCallback,
    timeout: float,
    *,
    shard_key: str | None = None,
    queue: MessageQueue | None = None,
) -> asyncio.Task[None]:
    """Send the request in the background; ``callback(reply, None)`` on its reply,
    ``callback(None, error)`` when it could not be sent or timed out."""
    if not callable(callback):
        raise ClientError("the request callback must be callable")
    if timeout <= 0:
        raise ValueError("a request's timeout must be positive")

    async def run() -> None:
        try:
            reply = await request(producer, msg, timeout, shard_key=shard_key, queue=queue)
        except MQError as exc:
            await _call_back(callback, None, exc)
            return
        await _call_back(callback, reply, None)

    return producer._instance.spawn(run())
