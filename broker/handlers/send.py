"""SEND_MESSAGE (10), SEND_MESSAGE_V2 (310), SEND_BATCH_MESSAGE (320) and
CONSUMER_SEND_MSG_BACK (36): validate, route (auto-created topics, retry → DLQ, delay levels,
transaction half messages), store, answer with msgId / queueId / queueOffset.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable
from typing import TYPE_CHECKING

from aiorocketmq.broker.store import PutResult, PutStatus, StoreMessage
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
from aiorocketmq.protocol.errors import ProtocolError
from aiorocketmq.protocol.headers import (
    ConsumerSendMsgBackRequestHeader,
    SendMessageRequestHeader,
    SendMessageRequestHeaderV2,
)
from aiorocketmq.protocol.message import (
    MAX_PROPERTIES_LENGTH,
    NAME_VALUE_SEPARATOR,
    PROPERTY_SEPARATOR,
    PropertyKey,
    decode_batch,
    decode_properties,
    java_hash,
)
from aiorocketmq.protocol.transport import Connection, Handler

from ..topics import (
    NOT_ALLOWED_SEND_TOPICS,
    RETRY_PREFIX,
    TRANS_HALF_TOPIC,
    dlq_topic,
    retry_topic,
    validate_topic_name,
)

if TYPE_CHECKING:
    from ..server import Broker

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
_WAIT = PropertyKey.WAIT_STORE_MSG_OK
_DELAY = PropertyKey.DELAY_TIME_LEVEL
_TRAN_MSG = PropertyKey.TRANSACTION_PREPARED
_RECONSUME_TIME = PropertyKey.RECONSUME_TIME
_MAX_RECONSUME_TIMES = PropertyKey.MAX_RECONSUME_TIMES
#: Dead-letter topics are readable, so operators can consume and replay them (Java 4.9).
DLQ_PERM = PERM_READ_WRITE
_PERM_WRITE = int(Perm.WRITE)
_MULTI_TAGS = int(MessageSysFlag.MULTI_TAGS)


def handlers(broker: Broker) -> dict[int, Handler]:
    sender = Sender(broker)
    return {
        RequestCode.SEND_MESSAGE: sender.send,
        RequestCode.SEND_MESSAGE_V2: sender.send,
        RequestCode.SEND_BATCH_MESSAGE: sender.send,
        RequestCode.CONSUMER_SEND_MSG_BACK: sender.send_back,
    }


class _Refused(Exception):
    """A send refused with a response code; turned into the response by the handler."""

    def __init__(self, code: int, remark: str) -> None:
        super().__init__(remark)
        self.code = code
        self.remark = remark


class Sender:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.config = broker.config
        self.max_body = broker.store_config.max_message_size
        self.region = self.config.region_id
        self.trace_on = "true" if self.config.trace_on else "false"
        self.cluster = self.config.broker_cluster_name
        self.cluster_property = f"{_CLUSTER}{NAME_VALUE_SEPARATOR}{self.cluster}"

    # -- SEND ----------------------------------------------------------------------------

    def send(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand | Awaitable[RemotingCommand]:
        if cmd.code == RequestCode.SEND_MESSAGE:
            header: SendMessageRequestHeader | SendMessageRequestHeaderV2 = (
                SendMessageRequestHeader.from_fields(cmd.ext_fields)
            )
        else:
            header = SendMessageRequestHeaderV2.from_fields(cmd.ext_fields)
        try:
            return self._send(conn, cmd, header)
        except _Refused as refused:
            return cmd.response(refused.code, refused.remark)

    def _send(
        self,
        conn: Connection,
        cmd: RemotingCommand,
        h: SendMessageRequestHeader | SendMessageRequestHeaderV2,
    ) -> RemotingCommand | Awaitable[RemotingCommand]:
        broker = self.broker
        if not broker.writable:
            raise _Refused(
                ResponseCode.NO_PERMISSION,
                f"the broker[{self.config.broker_ip1}] sending message is forbidden",
            )
        topic = h.topic
        if topic in NOT_ALLOWED_SEND_TOPICS:
            raise _Refused(ResponseCode.NO_PERMISSION, f"Sending message to topic[{topic}] is forbidden.")
        topic_config = broker.topics.get(topic)
        if topic_config is None:
            # Names in the topic table were validated when they were created.
            problem = validate_topic_name(topic)
            if problem is not None:
                raise _Refused(ResponseCode.SYSTEM_ERROR, problem)
            if topic.startswith(RETRY_PREFIX):
                topic_config = broker.topics.ensure(topic, 1, PERM_READ_WRITE)
            else:
                topic_config = broker.topics.create_on_send(
                    topic, h.default_topic, h.default_topic_queue_nums, h.unit_mode
                )
            if topic_config is None:
                raise _Refused(
                    ResponseCode.TOPIC_NOT_EXIST,
                    f"topic[{topic}] not exist, apply first please! "
                    "See https://rocketmq.apache.org/docs/bestPractice/06FAQ",
                )
        if not topic_config.perm & _PERM_WRITE:
            raise _Refused(ResponseCode.NO_PERMISSION, f"the topic[{topic}] sending message is forbidden")
        queue_id = h.queue_id
        queue_nums = max(topic_config.read_queue_nums, topic_config.write_queue_nums)
        if queue_id >= queue_nums:
            raise _Refused(
                ResponseCode.SYSTEM_ERROR,
                f"request queueId[{queue_id}] is illegal, topic[{topic}] has {queue_nums} queues; "
                f"producer: {conn.address}",
            )
        if queue_id < 0:
            queue_id = random.randrange(max(1, topic_config.write_queue_nums))
        sys_flag = h.sys_flag
        if topic_config.topic_filter_type == "MULTI_TAG":
            sys_flag |= _MULTI_TAGS
        body = cmd.body
        if h.batch:
            return self._send_batch(conn, cmd, h, topic, queue_id, sys_flag)
        if len(body) > self.max_body:
            raise _Refused(
                ResponseCode.MESSAGE_ILLEGAL,
                f"the message body size {len(body)} bytes is over the maximum {self.max_body}",
            )
        raw = h.properties or ""
        props = decode_properties(raw) if raw else {}
        reconsume_times = h.reconsume_times or 0
        retry = topic.startswith(RETRY_PREFIX)
        if retry:
            topic, queue_id = self._retry_or_dlq(cmd, h, topic, queue_id, props)
        wait = props.get(_WAIT) != "false"
        props[_CLUSTER] = self.cluster
        transactional = props.get(_TRAN_MSG) == "true"
        encoded: str | None = None
        if transactional:
            if self.config.reject_transaction_message:
                raise _Refused(
                    ResponseCode.NO_PERMISSION,
                    f"the broker[{self.config.broker_ip1}] sending transaction message is forbidden",
                )
            props[PropertyKey.REAL_TOPIC] = topic
            props[PropertyKey.REAL_QUEUE_ID] = str(queue_id)
            sys_flag = reset_transaction_type(sys_flag, 0)
        elif not retry:
            # The common case changes nothing but the cluster name: append it to the string
            # the producer sent instead of encoding the properties again.
            encoded = (
                f"{raw}{self.cluster_property}"
                if raw.endswith(PROPERTY_SEPARATOR) or not raw
                else (f"{raw}{PROPERTY_SEPARATOR}{self.cluster_property}")
            )
        msg = broker.build_message(
            # A half message waits in the half topic; the queue the producer chose is in
            # REAL_QID and in the answer (its delay, if any, applies once it is committed).
            TRANS_HALF_TOPIC if transactional else topic,
            0 if transactional else queue_id,
            body,
            props,
            flag=h.flag,
            sys_flag=sys_flag,
            born_timestamp=h.born_timestamp,
            born_host=broker.born_host(conn),
            reconsume_times=reconsume_times,
            encoded=encoded,
        )
        if len(msg.properties) > MAX_PROPERTIES_LENGTH:
            raise _Refused(
                ResponseCode.MESSAGE_ILLEGAL,
                f"the message properties size {len(msg.properties)} is over the maximum {MAX_PROPERTIES_LENGTH}",
            )
        result = broker.put(msg)
        if transactional and result.ok:
            broker.transactions.on_half_stored(props, result)
        return self._respond(cmd, result, queue_id, wait)

    def _retry_or_dlq(
        self,
        cmd: RemotingCommand,
        h: SendMessageRequestHeader | SendMessageRequestHeaderV2,
        topic: str,
        queue_id: int,
        props: dict[str, str],
    ) -> tuple[str, int]:
        """A producer's own re-send to ``%RETRY%group``: off to the DLQ once it has been
        retried ``maxReconsumeTimes`` times."""
        group_name = topic[len(RETRY_PREFIX) :]
        group = self.broker.groups.find(group_name)
        if group is None:
            raise _Refused(
                ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"the retry group {group_name!r} does not exist"
            )
        max_times = group.retry_max_times
        if cmd.version >= MQVersion.V3_4_9 and h.max_reconsume_times is not None:
            max_times = h.max_reconsume_times
        reconsume = h.reconsume_times
        if reconsume is None:
            raw = props.get(_RECONSUME_TIME)
            reconsume = int(raw) if raw and raw.isdigit() else 0
        if reconsume < max_times:
            return topic, queue_id
        props.pop(PropertyKey.DELAY_TIME_LEVEL, None)
        dlq = dlq_topic(group_name)
        self.broker.topics.ensure(dlq, 1, DLQ_PERM)
        return dlq, 0

    def _send_batch(
        self,
        conn: Connection,
        cmd: RemotingCommand,
        h: SendMessageRequestHeader | SendMessageRequestHeaderV2,
        topic: str,
        queue_id: int,
        sys_flag: int,
    ) -> RemotingCommand | Awaitable[RemotingCommand]:
        if topic.startswith(RETRY_PREFIX):
            raise _Refused(ResponseCode.MESSAGE_ILLEGAL, "batch messages cannot be sent to a retry topic")
        body = cmd.body
        if len(body) > self.max_body:
            raise _Refused(
                ResponseCode.MESSAGE_ILLEGAL,
                f"the batch body size {len(body)} bytes is over the maximum {self.max_body}",
            )
        try:
            entries = decode_batch(body)
        except ProtocolError as exc:
            raise _Refused(ResponseCode.MESSAGE_ILLEGAL, f"bad batch body: {exc}") from None
        if not entries:
            raise _Refused(ResponseCode.MESSAGE_ILLEGAL, "the batch holds no message")
        header_props = decode_properties(h.properties) if h.properties else {}
        wait = header_props.pop(_WAIT, "true") != "false"
        born_host = self.broker.born_host(conn)
        born_timestamp = h.born_timestamp
        # What the broker appends to every entry's own properties (Java 4.9: the header's
        # properties, then the cluster); entries are stored with their own string plus this.
        extra = PROPERTY_SEPARATOR.join(
            [f"{k}{NAME_VALUE_SEPARATOR}{v}" for k, v in header_props.items()] + [self.cluster_property]
        )
        tags_key, keys_key, uniq_key = (
            PropertyKey.TAGS,
            PropertyKey.KEYS,
            PropertyKey.UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
        )
        messages: list[StoreMessage] = []
        for entry in entries:
            raw = entry.properties
            props = decode_properties(raw) if raw else {}
            if props.get(_DELAY, "0") not in ("", "0"):
                raise _Refused(ResponseCode.MESSAGE_ILLEGAL, "a batch message cannot have a delay level")
            if props.get(_WAIT) == "false":
                wait = False
            if not raw or raw.endswith(PROPERTY_SEPARATOR):
                encoded = raw + extra
            else:
                encoded = f"{raw}{PROPERTY_SEPARATOR}{extra}"
            if len(encoded) > MAX_PROPERTIES_LENGTH:
                raise _Refused(ResponseCode.MESSAGE_ILLEGAL, "a batch message's properties are too large")
            tags = props.get(tags_key)
            messages.append(
                StoreMessage(
                    topic,
                    queue_id,
                    entry.body,
                    encoded,
                    entry.flag,
                    sys_flag,
                    born_timestamp,
                    born_host,
                    0,
                    0,
                    java_hash(tags) if tags else 0,
                    props.get(keys_key),
                    props.get(uniq_key),
                )
            )
        result = self.broker.put_batch(messages)
        return self._respond(cmd, result, queue_id, wait)

    def _respond(
        self, cmd: RemotingCommand, result: PutResult, queue_id: int, wait: bool
    ) -> RemotingCommand | Awaitable[RemotingCommand]:
        if not result.ok:
            code = _STATUS_CODES.get(result.status, ResponseCode.SYSTEM_ERROR)
            remark = (
                "[PC_SYNCHRONIZED]broker busy"
                if result.status == PutStatus.OS_PAGECACHE_BUSY
                else (f"put message failed: {result.status.name}")
            )
            return cmd.response(code, remark)
        if wait and self.broker.is_sync_flush and result.status == PutStatus.PUT_OK:
            return self._respond_when_flushed(cmd, result, queue_id)
        return self._success(cmd, result, queue_id, _STATUS_CODES.get(result.status, _SUCCESS))

    async def _respond_when_flushed(
        self, cmd: RemotingCommand, result: PutResult, queue_id: int
    ) -> RemotingCommand:
        status = await self.broker.store.wait_flushed(result)
        return self._success(cmd, result, queue_id, _STATUS_CODES.get(status, ResponseCode.SYSTEM_ERROR))

    def _success(self, cmd: RemotingCommand, result: PutResult, queue_id: int, code: int) -> RemotingCommand:
        msg_ids = result.msg_ids
        return cmd.response(
            code,
            None,
            {
                "msgId": msg_ids[0] if len(msg_ids) == 1 else ",".join(msg_ids),
                "queueId": str(queue_id),
                "queueOffset": str(result.queue_offset),
                "MSG_REGION": self.region,
                "TRACE_ON": self.trace_on,
            },
        )

    # -- CONSUMER_SEND_MSG_BACK ----------------------------------------------------------

    def send_back(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = ConsumerSendMsgBackRequestHeader.from_fields(cmd.ext_fields)
        broker = self.broker
        group = broker.groups.find(h.group)
        if group is None:
            return cmd.response(
                ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"subscription group not exist, {h.group}"
            )
        if not broker.writable:
            return cmd.response(
                ResponseCode.NO_PERMISSION,
                f"the broker[{self.config.broker_ip1}] sending message is forbidden",
            )
        if group.retry_queue_nums <= 0:
            return cmd.response(_SUCCESS)
        original = broker.store.look_message(h.offset)
        if original is None:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"look message by offset failed, {h.offset}")
        props = dict(original.properties)
        origin_topic = props.setdefault(PropertyKey.RETRY_TOPIC, original.topic)
        max_times = group.retry_max_times
        if cmd.version >= MQVersion.V3_4_9 and h.max_reconsume_times is not None:
            max_times = h.max_reconsume_times
        unit_flag = 0x2 if h.unit_mode else 0
        if original.reconsume_times >= max_times or h.delay_level < 0:
            topic = dlq_topic(h.group)
            broker.topics.ensure(topic, 1, DLQ_PERM)
            queue_id = 0
            props.pop(PropertyKey.DELAY_TIME_LEVEL, None)
        else:
            topic = retry_topic(h.group)
            config = broker.topics.ensure(topic, group.retry_queue_nums, PERM_READ_WRITE, unit_flag)
            if not config.perm & _PERM_WRITE:
                return cmd.response(
                    ResponseCode.NO_PERMISSION, f"the topic[{topic}] sending message is forbidden"
                )
            queue_id = random.randrange(max(1, group.retry_queue_nums))
            level = h.delay_level or 3 + original.reconsume_times
            props[PropertyKey.DELAY_TIME_LEVEL] = str(level)
        if not props.get(PropertyKey.ORIGIN_MESSAGE_ID):
            props[PropertyKey.ORIGIN_MESSAGE_ID] = h.origin_msg_id or original.msg_id
        props.pop(_WAIT, None)
        msg = broker.build_message(
            topic,
            queue_id,
            original.body,
            props,
            flag=original.flag,
            sys_flag=original.sys_flag,
            born_timestamp=original.born_timestamp,
            born_host=original.born_host_bytes,
            reconsume_times=original.reconsume_times + 1,
        )
        result = broker.put(msg)
        if not result.ok:
            return cmd.response(ResponseCode.SYSTEM_ERROR, result.status.name)
        broker.stats.on_send_back(h.group, origin_topic)
        return cmd.response(_SUCCESS)
