"""Compiled with mypyc (aiorocketmq/compiled.py, which lists the rules): declared, typed
attributes only; no monkeypatching, setattr or frame tricks; no await in except/finally.

SEND_MESSAGE (10), SEND_MESSAGE_V2 (310), SEND_BATCH_MESSAGE (320) and
CONSUMER_SEND_MSG_BACK (36): validate, route (auto-created topics, retry → DLQ, delay levels,
transaction half messages), store, answer with msgId / queueId / queueOffset.

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
    reset_transaction_type,
)
from aiorocketmq.protocol.command import RemotingCommand
from aiorocketmq.protocol.errors import (
    BrokerError,
    InvalidParameterError,
    MessageIllegalError,
    NoPermissionError,
    ProtocolError,
    ServerSystemError,
    SubscriptionGroupNotExistError,
    TopicNotExistError,
    error_for_code,
)
from aiorocketmq.protocol.headers import ConsumerSendMsgBackRequestHeader, SendHeader, send_header
from aiorocketmq.protocol.message import (
    MAX_PROPERTIES_LENGTH,
    PROPERTY_SEPARATOR,
    PropertyKey,
    decode_properties,
    stored_properties,
)
from aiorocketmq.protocol.names import (
    NOT_ALLOWED_SEND_TOPICS,
    TIMER_OUT_MS,
    TIMER_TOPIC,
    TRANS_HALF_TOPIC,
    dlq_topic,
    group_of_retry_topic,
    is_retry_topic,
    retry_topic,
    topic_name_problem,
)
from aiorocketmq.protocol.recall import RecallHandle
from aiorocketmq.protocol.transport import Connection, Handler, HandlerResult

from ..batch import BatchRefusal, store_batch
from ..config import BrokerConfig
from ..groups import GroupTable
from ..topics import TopicTable
from ..transactions import TransactionService
from ..writer import MessageWriter, born_host

_SUCCESS = ResponseCode.SUCCESS
_STATUS_CODES = {
    PutStatus.PUT_OK: ResponseCode.SUCCESS,
    PutStatus.FLUSH_DISK_TIMEOUT: ResponseCode.FLUSH_DISK_TIMEOUT,
    PutStatus.FLUSH_SLAVE_TIMEOUT: ResponseCode.FLUSH_SLAVE_TIMEOUT,
    PutStatus.SLAVE_NOT_AVAILABLE: ResponseCode.SLAVE_NOT_AVAILABLE,
    PutStatus.MESSAGE_ILLEGAL: ResponseCode.MESSAGE_ILLEGAL,
    PutStatus.PROPERTIES_SIZE_EXCEEDED: ResponseCode.MESSAGE_ILLEGAL,
    PutStatus.SERVICE_NOT_AVAILABLE: ResponseCode.SERVICE_NOT_AVAILABLE,
}
_CLUSTER = PropertyKey.CLUSTER
_REGION = PropertyKey.MSG_REGION
_TRACE_SWITCH = PropertyKey.TRACE_SWITCH
_WAIT = PropertyKey.WAIT_STORE_MSG_OK
_DELAY = PropertyKey.DELAY_TIME_LEVEL
_BATCH_REFUSALS: dict[int, str] = {
    BatchRefusal.DELAY: "a batch message cannot have a delay level",
    BatchRefusal.DELIVERY_TIME: "a batch message cannot have a delivery time",
    BatchRefusal.PROPERTIES_TOO_LARGE: "a batch message's properties are too large",
}
_TRAN_MSG = PropertyKey.TRANSACTION_PREPARED
_RECONSUME_TIME = PropertyKey.RECONSUME_TIME
#: Dead-letter topics are readable, so operators can consume and replay them (Java 4.9).
DLQ_PERM = PERM_READ_WRITE
_PERM_WRITE = int(Perm.WRITE)
_MULTI_TAGS = int(MessageSysFlag.MULTI_TAGS)


def put_failed(result: PutResult) -> BrokerError:
    """The error a send answers when the store did not take its message."""
    code = _STATUS_CODES.get(result.status, ResponseCode.SYSTEM_ERROR)
    if result.remark:  # the store's own words (a full disk: where, and how full)
        return error_for_code(code, result.remark)
    if result.status == PutStatus.OS_PAGECACHE_BUSY:
        return error_for_code(code, "[PC_SYNCHRONIZED]broker busy")
    return error_for_code(code, f"put message failed: {result.status.name}")


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
        self.transactions = transactions
        self.max_body = max_message_size
        self.sync_flush = sync_flush
        self.region = config.region_id
        self.trace_on = "true" if config.trace_on else "false"
        self.cluster = config.broker_cluster_name
        # What RocketMQ 5 stores in every sent message besides the producer's properties: the
        # broker's region and trace switch (a 5.x client's consumer trace needs the region) and
        # the cluster. Java puts the first two into the request's properties before storing,
        # so a producer's own values are replaced.
        self.broker_properties = {_REGION: self.region, _TRACE_SWITCH: self.trace_on, _CLUSTER: self.cluster}
        # Ending with the separator, as a RocketMQ 5 broker stores every properties string.
        self.broker_suffix = stored_properties(self.broker_properties)

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
        config = self.config
        if not config.writable:
            raise NoPermissionError(f"the broker[{config.broker_ip1}] sending message is forbidden")
        topic = h.topic
        if topic in NOT_ALLOWED_SEND_TOPICS:
            raise NoPermissionError(f"Sending message to topic[{topic}] is forbidden.")
        topic_config = self.topics.get(topic)
        if topic_config is None:
            # Names in the topic table were validated when they were created.
            problem = topic_name_problem(topic)
            if problem is not None:
                raise InvalidParameterError(problem)
            if is_retry_topic(topic):
                topic_config = self.topics.ensure(topic, 1, PERM_READ_WRITE)
            else:
                topic_config = self.topics.create_on_send(
                    topic, h.default_topic, h.default_topic_queue_nums, h.unit_mode
                )
            if topic_config is None:
                raise TopicNotExistError(
                    f"topic[{topic}] not exist, apply first please! "
                    "See https://rocketmq.apache.org/docs/bestPractice/06FAQ"
                )
        if not topic_config.perm & _PERM_WRITE:
            raise NoPermissionError(f"the topic[{topic}] sending message is forbidden")
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
        body = cmd.body
        if len(body) > self.max_body:
            raise MessageIllegalError(
                f"the message body size {len(body)} bytes is over the maximum {self.max_body}"
            )
        raw = h.properties or ""
        props = decode_properties(raw) if raw else {}
        retry = is_retry_topic(topic)
        if retry:
            topic, queue_id = self._retry_or_dlq(cmd, h, topic, queue_id, props)
        wait = props.get(_WAIT) != "false"
        # The producer set none of the broker's properties (the usual case): they can be
        # appended to its string as they are.
        appendable = _REGION not in props and _TRACE_SWITCH not in props and _CLUSTER not in props
        props.update(self.broker_properties)
        transactional = props.get(_TRAN_MSG) == "true"
        encoded: str | None = None
        if transactional:
            if self.config.reject_transaction_message:
                raise NoPermissionError(
                    f"the broker[{self.config.broker_ip1}] sending transaction message is forbidden"
                )
            props[PropertyKey.REAL_TOPIC] = topic
            props[PropertyKey.REAL_QUEUE_ID] = str(queue_id)
            sys_flag = reset_transaction_type(sys_flag, 0)
        elif not retry and appendable:
            # Append the broker's properties to the string the producer sent instead of
            # encoding them all again.
            encoded = (
                f"{raw}{self.broker_suffix}"
                if raw.endswith(PROPERTY_SEPARATOR) or not raw
                else (f"{raw}{PROPERTY_SEPARATOR}{self.broker_suffix}")
            )
        msg = self.writer.build(
            # A half message waits in the half topic; the queue the producer chose is in
            # REAL_QID and in the answer (its delay, if any, applies once it is committed).
            TRANS_HALF_TOPIC if transactional else topic,
            0 if transactional else queue_id,
            body,
            props,
            flag=h.flag,
            sys_flag=sys_flag,
            born_timestamp=h.born_timestamp,
            born_host=born_host(conn),
            reconsume_times=h.reconsume_times or 0,
            encoded=encoded,
        )
        if len(msg.properties) > MAX_PROPERTIES_LENGTH:
            raise MessageIllegalError(
                f"the message properties size {len(msg.properties)} is over the maximum {MAX_PROPERTIES_LENGTH}"
            )
        room = self.store.room_pending(msg.topic, msg.queue_id, 1)
        if room is not None:
            return _settle(
                room.defer(lambda: self._store_one(conn, cmd, msg, props, transactional, queue_id, wait))
            )
        return self._store_one(conn, cmd, msg, props, transactional, queue_id, wait)

    def _store_one(
        self,
        conn: Connection,
        cmd: RemotingCommand,
        msg: StoreMessage,
        props: dict[str, str],
        transactional: bool,
        queue_id: int,
        wait: bool,
    ) -> HandlerResult:
        result = self.writer.put(msg)
        if transactional and result.ok:
            self.transactions.on_half_stored(props, result)
        recall = None
        if msg.topic == TIMER_TOPIC and result.ok:
            recall = self._recall_handle(props)
        return self._respond(conn, cmd, result, queue_id, wait, recall)

    def _recall_handle(self, props: dict[str, str]) -> str | None:
        """RocketMQ 5: a timer message's handle for RECALL_MESSAGE (not for a retry topic's)."""
        topic, due = props.get(PropertyKey.REAL_TOPIC), props.get(TIMER_OUT_MS)
        if not topic or not due or is_retry_topic(topic):
            return None
        unique = props.get(PropertyKey.UNIQ_CLIENT_MESSAGE_ID_KEYIDX, "")
        return RecallHandle(topic, self.config.broker_name, str(int(due) + 1), unique).encode()

    def _retry_or_dlq(
        self,
        cmd: RemotingCommand,
        h: SendHeader,
        topic: str,
        queue_id: int,
        props: dict[str, str],
    ) -> tuple[str, int]:
        """A producer's own re-send to ``%RETRY%group``: off to the DLQ once it has been
        retried ``maxReconsumeTimes`` times."""
        group_name = group_of_retry_topic(topic)
        group = self.groups.find(group_name)
        if group is None:
            raise SubscriptionGroupNotExistError(f"the retry group {group_name!r} does not exist")
        max_times = group.retry_max_times
        if cmd.version >= MQVersion.V3_4_9 and h.max_reconsume_times is not None:
            max_times = h.max_reconsume_times
        reconsume = h.reconsume_times
        if reconsume is None:
            raw = props.get(_RECONSUME_TIME)
            reconsume = int(raw) if raw and raw.isdigit() else 0
        if reconsume < max_times:
            return topic, queue_id
        props.pop(_DELAY, None)
        dlq = dlq_topic(group_name)
        self.topics.ensure(dlq, 1, DLQ_PERM)
        return dlq, 0

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
        header_props = decode_properties(h.properties) if h.properties else {}
        wait = header_props.pop(_WAIT, "true") != "false"
        # What the broker appends to every entry's own properties (Java: the header's
        # properties with the region and trace switch, then the cluster); entries are stored
        # with their own string plus this.
        header_props.update(self.broker_properties)
        extra = stored_properties(header_props)
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
        recall: str | None = None,
    ) -> HandlerResult:
        if not result.ok:
            raise put_failed(result)
        if wait and result.status == PutStatus.PUT_OK:
            if self.store.replica is not None:
                return self._respond_when_stored(cmd, result, queue_id, recall)
            if self.sync_flush:
                self._respond_when_flushed(conn, cmd, result, queue_id, recall)
                return None
        return self._success(cmd, result, queue_id, _STATUS_CODES.get(result.status, _SUCCESS), recall)

    def _respond_when_flushed(
        self, conn: Connection, cmd: RemotingCommand, result: PutResult, queue_id: int, recall: str | None
    ) -> None:
        """SYNC_FLUSH: answer once a flush covers the message, from the flush's own settling
        (the handler returns None, as POP's acks do). Every put under SYNC_FLUSH comes here:
        a future per put, and the loop turn its callbacks take, were a share of its CPU."""
        oneway = cmd.is_oneway

        def on_flushed(status: PutStatus) -> None:
            if not oneway and not conn.closed:
                code = _STATUS_CODES.get(status, ResponseCode.SYSTEM_ERROR)
                conn.send_response(self._success(cmd, result, queue_id, code, recall))

        self.store.when_flushed(result, on_flushed)

    async def _respond_when_stored(
        self, cmd: RemotingCommand, result: PutResult, queue_id: int, recall: str | None
    ) -> RemotingCommand:
        """A SYNC_MASTER: the answer once the message is flushed (under SYNC_FLUSH) and the
        slave has it."""
        status = await self.store.wait_stored(result)
        return self._success(
            cmd, result, queue_id, _STATUS_CODES.get(status, ResponseCode.SYSTEM_ERROR), recall
        )

    def _success(
        self, cmd: RemotingCommand, result: PutResult, queue_id: int, code: int, recall: str | None = None
    ) -> RemotingCommand:
        msg_ids = result.msg_ids
        fields = {
            "msgId": msg_ids[0] if len(msg_ids) == 1 else ",".join(msg_ids),
            "queueId": str(queue_id),
            "queueOffset": str(result.queue_offset),
            "MSG_REGION": self.region,
            "TRACE_ON": self.trace_on,
        }
        if recall is not None:
            fields["recallHandle"] = recall
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
