"""SEND_REPLY_MESSAGE (324) and SEND_REPLY_MESSAGE_V2 (325): a consumer answers a request.

The reply is pushed at once to the requester's own connection, the one whose heartbeat
announced the client id in the reply's ``REPLY_TO_CLIENT`` property, as a
PUSH_REPLY_MESSAGE_TO_CLIENT (326) request; the replier's send succeeds only when that push
did. With ``storeReplyMessageEnable`` (the default) the reply is also stored in its topic
(``<cluster>_REPLY_TOPIC``), so it can be looked up later like any message.
"""

from __future__ import annotations

import logging
import random
import time

from aiorocketmq.broker.store import PutStatus
from aiorocketmq.protocol.codes import Perm, RequestCode, ResponseCode
from aiorocketmq.protocol.command import RemotingCommand
from aiorocketmq.protocol.errors import MQError, NoPermissionError, ServerSystemError, TopicNotExistError
from aiorocketmq.protocol.headers import (
    ReplyMessageRequestHeader,
    SendMessageRequestHeader,
    SendMessageRequestHeaderV2,
)
from aiorocketmq.protocol.message import PropertyKey, decode_properties, encode_properties, unpack_host
from aiorocketmq.protocol.names import topic_name_problem
from aiorocketmq.protocol.transport import Connection, Handler

from ..clients import ClientRegistry
from ..config import BrokerConfig
from ..topics import TopicTable
from ..writer import MessageWriter, born_host

log = logging.getLogger(__name__)

#: How long the requester has to acknowledge a pushed reply.
PUSH_TIMEOUT = 3.0
_PERM_WRITE = int(Perm.WRITE)
_STORED = (
    PutStatus.PUT_OK,
    PutStatus.FLUSH_DISK_TIMEOUT,
    PutStatus.FLUSH_SLAVE_TIMEOUT,
    PutStatus.SLAVE_NOT_AVAILABLE,
)


class ReplyHandlers:
    def __init__(
        self,
        config: BrokerConfig,
        *,
        topics: TopicTable,
        clients: ClientRegistry,
        writer: MessageWriter,
    ) -> None:
        self.config = config
        self.topics = topics
        self.clients = clients
        self.writer = writer
        self.store_host = f"/{unpack_host(writer.store_host)}"

    def handlers(self) -> dict[int, Handler]:
        return {
            RequestCode.SEND_REPLY_MESSAGE: self.send_reply,
            RequestCode.SEND_REPLY_MESSAGE_V2: self.send_reply,
        }

    async def send_reply(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h: SendMessageRequestHeader
        if cmd.code == RequestCode.SEND_REPLY_MESSAGE_V2:
            h = SendMessageRequestHeaderV2.from_fields(cmd.ext_fields).to_v1()
        else:
            h = SendMessageRequestHeader.from_fields(cmd.ext_fields)
        queue_id = self._check(h)
        props = decode_properties(h.properties or "")
        pushed, remark = await self._push(conn, h, props, cmd.body)
        ext = {
            "msgId": "0",
            "queueId": str(queue_id),
            "queueOffset": "0",
            "MSG_REGION": self.config.region_id,
            "TRACE_ON": "true" if self.config.trace_on else "false",
        }
        if self.config.store_reply_message_enable:
            msg = self.writer.build(
                h.topic,
                queue_id,
                cmd.body,
                props,
                flag=h.flag,
                sys_flag=h.sys_flag,
                born_timestamp=h.born_timestamp,
                born_host=born_host(conn),
                reconsume_times=h.reconsume_times or 0,
                encoded=h.properties or "",
            )
            result = self.writer.put(msg)
            if result.status in _STORED:
                ext["msgId"] = result.msg_ids[0] if result.msg_ids else "0"
                ext["queueOffset"] = str(result.queue_offset)
            else:
                # The reply reached its requester (or not, which the response says); a failed
                # store is the broker's own problem, as in RocketMQ.
                log.warning("reply to %s not stored: %s", h.topic, result.remark or result.status.name)
        if not pushed:
            return cmd.response(ResponseCode.SYSTEM_ERROR, remark, ext)
        return cmd.response(ResponseCode.SUCCESS, None, ext)

    def _check(self, h: SendMessageRequestHeader) -> int:
        """The queue the reply is stored in, after the checks any send passes."""
        if not self.config.writable:
            raise NoPermissionError(f"the broker[{self.config.broker_ip1}] sending message is forbidden")
        topic = h.topic
        config = self.topics.get(topic)
        if config is None:
            problem = topic_name_problem(topic)
            if problem is not None:
                raise ServerSystemError(problem)
            config = self.topics.create_on_send(
                topic, h.default_topic, h.default_topic_queue_nums, h.unit_mode
            )
            if config is None:
                raise TopicNotExistError(f"topic[{topic}] not exist, apply first please!")
        if not config.perm & _PERM_WRITE:
            raise NoPermissionError(f"the topic[{topic}] sending message is forbidden")
        queues = max(config.read_queue_nums, config.write_queue_nums)
        if h.queue_id >= queues:
            raise ServerSystemError(
                f"request queueId[{h.queue_id}] is illegal, topic[{topic}] has {queues} queues"
            )
        if h.queue_id < 0:
            return random.randrange(max(1, config.write_queue_nums))
        return h.queue_id

    async def _push(
        self, conn: Connection, h: SendMessageRequestHeader, props: dict[str, str], body: bytes
    ) -> tuple[bool, str | None]:
        """Hand the reply to its requester: (delivered, why not)."""
        requester = props.get(PropertyKey.REPLY_TO_CLIENT)
        if requester is None:
            log.warning("a reply without %s cannot be delivered", PropertyKey.REPLY_TO_CLIENT)
            return False, f"reply message properties[{PropertyKey.REPLY_TO_CLIENT}] is null"
        target = self.clients.producer_connection(requester)
        if target is None:
            remark = f"push reply message fail, channel of <{requester}> not found."
            log.warning(remark)
            return False, remark
        pushed = dict(props)
        pushed[PropertyKey.PUSH_REPLY_TIME] = str(time.time_ns() // 1_000_000)
        header = ReplyMessageRequestHeader(
            producer_group=h.producer_group,
            topic=h.topic,
            default_topic=h.default_topic,
            default_topic_queue_nums=h.default_topic_queue_nums,
            queue_id=h.queue_id,
            sys_flag=h.sys_flag,
            born_timestamp=h.born_timestamp,
            flag=h.flag,
            properties=encode_properties(pushed),
            reconsume_times=h.reconsume_times,
            unit_mode=h.unit_mode,
            born_host=f"/{conn.address}",
            store_host=self.store_host,
            store_timestamp=time.time_ns() // 1_000_000,
        )
        # Requests to clients go out as JSON: every RocketMQ client reads it.
        request = RemotingCommand.request(RequestCode.PUSH_REPLY_MESSAGE_TO_CLIENT, header.to_fields(), body)
        try:
            response = await target.request(request, PUSH_TIMEOUT)
        except MQError as exc:
            log.warning("push reply message to <%s> failed: %s", requester, exc)
            return False, f"push reply message to {requester} fail."
        if response.code != ResponseCode.SUCCESS:
            log.warning("push reply message to <%s> refused: %s", requester, response.remark)
            return False, f"push reply message to {requester} fail."
        return True, None
