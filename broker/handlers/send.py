"""Compiled with mypyc (aiorocketmq/compiled.py, which lists the rules): declared, typed
attributes only; no monkeypatching, setattr or frame tricks; no await in except/finally.

The remoting front of sending: SEND_MESSAGE (10), SEND_MESSAGE_V2 (310), SEND_BATCH_MESSAGE
(320) and CONSUMER_SEND_MSG_BACK (36). A single message's header is unpacked into the
:class:`~aiorocketmq.broker.accept.Acceptor`'s calls, which every front shares (checks,
routing, storing); batches and send-backs are remoting's own. The answer carries msgId /
queueId / queueOffset, sent once the message is flushed or replicated where the producer waits
for it (``WAIT``).

A refused send raises the error class of its response code; the transport answers with it.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable

from aiorocketmq.broker.store import MessageStore, PutResult, PutStatus, StoreMessage
from aiorocketmq.protocol.codes import (
    PERM_READ_WRITE,
    MessageSysFlag,
    MQVersion,
    Perm,
    RequestCode,
    ResponseCode,
)
from aiorocketmq.protocol.command import RemotingCommand
from aiorocketmq.protocol.errors import (
    InvalidParameterError,
    MessageIllegalError,
    NoPermissionError,
    ProtocolError,
    ServerSystemError,
    SubscriptionGroupNotExistError,
)
from aiorocketmq.protocol.headers import ConsumerSendMsgBackRequestHeader, SendHeader, send_header
from aiorocketmq.protocol.message import PropertyKey, decode_properties, stored_properties
from aiorocketmq.protocol.names import dlq_topic, is_retry_topic, retry_topic
from aiorocketmq.protocol.transport import Connection, Handler, HandlerResult

from ..accept import DLQ_PERM, STATUS_CODES, Accepted, Acceptor, put_failed
from ..batch import BatchRefusal, store_batch
from ..config import BrokerConfig
from ..groups import GroupTable
from ..topics import TopicTable
from ..transactions import TransactionService
from ..writer import MessageWriter, born_host

_SUCCESS = ResponseCode.SUCCESS
_STATUS_CODES = STATUS_CODES
_WAIT = PropertyKey.WAIT_STORE_MSG_OK
_DELAY = PropertyKey.DELAY_TIME_LEVEL
_BATCH_REFUSALS: dict[int, str] = {
    BatchRefusal.DELAY: "a batch message cannot have a delay level",
    BatchRefusal.DELIVERY_TIME: "a batch message cannot have a delivery time",
    BatchRefusal.PROPERTIES_TOO_LARGE: "a batch message's properties are too large",
}
_PERM_WRITE = int(Perm.WRITE)
#: Distinct batch header properties remembered (the set starts again when full).
_BATCH_EXTRAS_KEPT = 64
_MULTI_TAGS = int(MessageSysFlag.MULTI_TAGS)


async def _settle(
    deferred: Awaitable[HandlerResult],
) -> RemotingCommand | None:
    """The answer to a put deferred until its consume-queue file was made (see
    ``MessageStore.room_pending``): the put's response, what it waits for (a slave), or None
    when a flush will answer it."""
    response = await deferred
    if response is None or isinstance(response, RemotingCommand):
        return response
    return await response


def _answered(accepted: Accepted) -> dict[str, str] | None:
    """The response fields a stored message adds to msgId / queueId / queueOffset: a timer
    message's ``recallHandle``; a half message's ``transactionId``, which Apache's proxy (5.3.3,
    SendMessageActivity: SendResultEntry.transactionId from SendResult.getTransactionId(), the
    header field SendMessageProcessor sets) hands the 5.x client for its commit or rollback."""
    if accepted.recall is None and accepted.transaction_id is None:
        return None
    extra: dict[str, str] = {}
    if accepted.recall is not None:
        extra["recallHandle"] = accepted.recall
    if accepted.transaction_id is not None:
        extra["transactionId"] = accepted.transaction_id
    return extra


class Sender:
    def __init__(
        self,
        config: BrokerConfig,
        *,
        store: MessageStore,
        topics: TopicTable,
        groups: GroupTable,
        writer: MessageWriter,
        transactions: TransactionService,
        max_message_size: int,
        sync_flush: bool,
    ) -> None:
        self.config = config
        self.store = store
        self.topics = topics
        self.groups = groups
        self.writer = writer
        self.sync_flush = sync_flush
        #: Accepting a message, shared with the gRPC front.
        self.acceptor = Acceptor(
            config,
            store=store,
            topics=topics,
            groups=groups,
            writer=writer,
            transactions=transactions,
            max_message_size=max_message_size,
        )
        self.max_body = max_message_size
        self.region = self.acceptor.region
        self.trace_on = self.acceptor.trace_on
        self.broker_properties = self.acceptor.broker_properties
        #: Batch headers' properties string -> (whether the producer waits for the store, what
        #: is appended to each entry's own properties). A producer sends the same header
        #: properties with every batch; decoding and re-encoding them was about 3 µs a request.
        self._batch_extras: dict[str, tuple[bool, str]] = {}

    def handlers(self) -> dict[int, Handler]:
        return {
            RequestCode.SEND_MESSAGE: self.send,
            RequestCode.SEND_MESSAGE_V2: self.send,
            RequestCode.SEND_BATCH_MESSAGE: self.send,
            RequestCode.CONSUMER_SEND_MSG_BACK: self.send_back,
        }

    # -- SEND ----------------------------------------------------------------------------

    def send(self, conn: Connection, cmd: RemotingCommand) -> HandlerResult:
        h = send_header(cmd.ext_fields, cmd.code != RequestCode.SEND_MESSAGE)
        topic = h.topic
        topic_config = self.acceptor.topic_for_send(
            topic, h.default_topic, h.default_topic_queue_nums, h.unit_mode
        )
        queue_id = h.queue_id
        queue_nums = max(topic_config.read_queue_nums, topic_config.write_queue_nums)
        if queue_id >= queue_nums:
            raise InvalidParameterError(
                f"request queueId[{queue_id}] is illegal, topic[{topic}] has {queue_nums} queues; "
                f"producer: {conn.address}"
            )
        if queue_id < 0:
            queue_id = random.randrange(max(1, topic_config.write_queue_nums))
        sys_flag = h.sys_flag
        if topic_config.topic_filter_type == "MULTI_TAG":
            sys_flag |= _MULTI_TAGS
        if h.batch:
            return self._send_batch(conn, cmd, h, topic, queue_id, sys_flag)
        return self._send_one(conn, cmd, h, topic, queue_id, sys_flag)

    def _send_one(
        self,
        conn: Connection,
        cmd: RemotingCommand,
        h: SendHeader,
        topic: str,
        queue_id: int,
        sys_flag: int,
    ) -> HandlerResult:
        raw = h.properties or ""
        accepted = self.acceptor.accept(
            topic,
            queue_id,
            cmd.body,
            decode_properties(raw) if raw else {},
            raw,
            flag=h.flag,
            sys_flag=sys_flag,
            born_timestamp=h.born_timestamp,
            born_host=born_host(conn),
            reconsume_times=h.reconsume_times,
            max_reconsume_times=h.max_reconsume_times if cmd.version >= MQVersion.V3_4_9 else None,
        )
        if isinstance(accepted, Accepted):
            return self._respond(
                conn, cmd, accepted.result, accepted.queue_id, accepted.wait, _answered(accepted)
            )
        return self._respond_once_stored(conn, cmd, accepted)

    async def _respond_once_stored(
        self, conn: Connection, cmd: RemotingCommand, deferred: Awaitable[Accepted]
    ) -> RemotingCommand | None:
        accepted = await deferred
        response = self._respond(
            conn, cmd, accepted.result, accepted.queue_id, accepted.wait, _answered(accepted)
        )
        if response is None or isinstance(response, RemotingCommand):
            return response
        return await response

    def _send_batch(
        self,
        conn: Connection,
        cmd: RemotingCommand,
        h: SendHeader,
        topic: str,
        queue_id: int,
        sys_flag: int,
    ) -> HandlerResult:
        if is_retry_topic(topic):
            raise MessageIllegalError("batch messages cannot be sent to a retry topic")
        body = cmd.body
        if len(body) > self.max_body:
            raise MessageIllegalError(
                f"the batch body size {len(body)} bytes is over the maximum {self.max_body}"
            )
        raw = h.properties or ""
        known = self._batch_extras.get(raw)
        if known is None:
            header_props = decode_properties(raw) if raw else {}
            header_wait = header_props.pop(_WAIT, "true") != "false"
            # What the broker appends to every entry's own properties (Java: the header's
            # properties with the region and trace switch, then the cluster); entries are
            # stored with their own string plus this.
            header_props.update(self.broker_properties)
            known = (header_wait, stored_properties(header_props))
            if len(self._batch_extras) >= _BATCH_EXTRAS_KEPT:
                self._batch_extras.clear()
            self._batch_extras[raw] = known
        wait, extra = known
        try:
            stored = store_batch(body, topic, queue_id, extra, sys_flag, h.born_timestamp, born_host(conn))
        except ProtocolError as exc:
            raise MessageIllegalError(f"bad batch body: {exc}") from None
        if isinstance(stored, int):
            raise MessageIllegalError(_BATCH_REFUSALS[stored])
        messages, entries_wait = stored
        if not messages:
            raise MessageIllegalError("the batch holds no message")
        wait = wait and entries_wait
        room = self.store.room_pending(topic, queue_id, len(messages))
        if room is not None:
            return _settle(room.defer(lambda: self._store_batch(conn, cmd, messages, queue_id, wait)))
        return self._store_batch(conn, cmd, messages, queue_id, wait)

    def _store_batch(
        self, conn: Connection, cmd: RemotingCommand, messages: list[StoreMessage], queue_id: int, wait: bool
    ) -> HandlerResult:
        return self._respond(conn, cmd, self.writer.put_batch(messages), queue_id, wait)

    def _respond(
        self,
        conn: Connection,
        cmd: RemotingCommand,
        result: PutResult,
        queue_id: int,
        wait: bool,
        extra: dict[str, str] | None = None,
    ) -> HandlerResult:
        if not result.ok:
            raise put_failed(result)
        if wait and result.status == PutStatus.PUT_OK:
            if self.store.replica is not None:
                return self._respond_when_stored(cmd, result, queue_id, extra)
            if self.sync_flush:
                self._respond_when_flushed(conn, cmd, result, queue_id, extra)
                return None
        return self._success(cmd, result, queue_id, _STATUS_CODES.get(result.status, _SUCCESS), extra)

    def _respond_when_flushed(
        self,
        conn: Connection,
        cmd: RemotingCommand,
        result: PutResult,
        queue_id: int,
        extra: dict[str, str] | None,
    ) -> None:
        """SYNC_FLUSH: answer once a flush covers the message, from the flush's own settling
        (the handler returns None, as POP's acks do). Every put under SYNC_FLUSH comes here:
        a future per put, and the loop turn its callbacks take, were a share of its CPU."""
        oneway = cmd.is_oneway

        def on_flushed(status: PutStatus) -> None:
            if not oneway and not conn.closed:
                code = _STATUS_CODES.get(status, ResponseCode.SYSTEM_ERROR)
                conn.send_response(self._success(cmd, result, queue_id, code, extra))

        self.store.when_flushed(result, on_flushed)

    async def _respond_when_stored(
        self, cmd: RemotingCommand, result: PutResult, queue_id: int, extra: dict[str, str] | None
    ) -> RemotingCommand:
        """A SYNC_MASTER: the answer once the message is flushed (under SYNC_FLUSH) and the
        slave has it."""
        status = await self.store.wait_stored(result)
        return self._success(
            cmd, result, queue_id, _STATUS_CODES.get(status, ResponseCode.SYSTEM_ERROR), extra
        )

    def _success(
        self,
        cmd: RemotingCommand,
        result: PutResult,
        queue_id: int,
        code: int,
        extra: dict[str, str] | None = None,
    ) -> RemotingCommand:
        msg_ids = result.msg_ids
        fields = {
            "msgId": msg_ids[0] if len(msg_ids) == 1 else ",".join(msg_ids),
            "queueId": str(queue_id),
            "queueOffset": str(result.queue_offset),
            "MSG_REGION": self.region,
            "TRACE_ON": self.trace_on,
        }
        if extra is not None:
            fields.update(extra)
        return cmd.response(code, None, fields)

    # -- CONSUMER_SEND_MSG_BACK ----------------------------------------------------------

    def send_back(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """A consumer hands back a message it failed to consume: to ``%RETRY%group`` at the
        next delay level, or to ``%DLQ%group`` once retried ``maxReconsumeTimes`` times."""
        h = ConsumerSendMsgBackRequestHeader.from_fields(cmd.ext_fields)
        group = self.groups.find(h.group)
        if group is None:
            raise SubscriptionGroupNotExistError(f"subscription group not exist, {h.group}")
        if not self.config.writable:
            raise NoPermissionError(f"the broker[{self.config.broker_ip1}] sending message is forbidden")
        if group.retry_queue_nums <= 0:
            return cmd.response(_SUCCESS)
        original = self.store.look_message(h.offset)
        if original is None:
            raise ServerSystemError(f"look message by offset failed, {h.offset}")
        props = dict(original.properties)
        props.setdefault(PropertyKey.RETRY_TOPIC, original.topic)
        max_times = group.retry_max_times
        if cmd.version >= MQVersion.V3_4_9 and h.max_reconsume_times is not None:
            max_times = h.max_reconsume_times
        unit_flag = 0x2 if h.unit_mode else 0
        if original.reconsume_times >= max_times or h.delay_level < 0:
            topic = dlq_topic(h.group)
            self.topics.ensure(topic, 1, DLQ_PERM)
            queue_id = 0
            props.pop(_DELAY, None)
        else:
            topic = retry_topic(h.group)
            config = self.topics.ensure(topic, group.retry_queue_nums, PERM_READ_WRITE, unit_flag)
            if not config.perm & _PERM_WRITE:
                raise NoPermissionError(f"the topic[{topic}] sending message is forbidden")
            queue_id = random.randrange(max(1, group.retry_queue_nums))
            level = h.delay_level or 3 + original.reconsume_times
            props[_DELAY] = str(level)
        if not props.get(PropertyKey.ORIGIN_MESSAGE_ID):
            props[PropertyKey.ORIGIN_MESSAGE_ID] = h.origin_msg_id or original.msg_id
        props.pop(_WAIT, None)
        msg = self.writer.build_copy(
            original, topic, queue_id, props, reconsume_times=original.reconsume_times + 1
        )
        result = self.writer.put(msg)
        if not result.ok:
            raise ServerSystemError(result.remark or result.status.name)
        return cmd.response(_SUCCESS)
