"""RECALL_MESSAGE (370, RocketMQ 5): a producer cancels a timer message before its delivery
time with the recall handle its send returned. Checked in Apache's order, with its answers;
off unless ``recallMessageEnable``, as in Apache."""

from __future__ import annotations

import time

from aiorocketmq.protocol.codes import RequestCode, ResponseCode
from aiorocketmq.protocol.command import RemotingCommand
from aiorocketmq.protocol.errors import (
    BrokerError,
    NoPermissionError,
    ProtocolError,
    ServiceNotAvailableError,
    SlaveNotAvailableError,
    TopicNotExistError,
)
from aiorocketmq.protocol.recall import RecallHandle
from aiorocketmq.protocol.transport import Connection, Handler

from ..config import BrokerConfig
from ..store import MessageStore
from ..timers import TimerStore
from ..topics import TopicTable
from ..writer import born_host


class IllegalOperationError(BrokerError):
    code = ResponseCode.ILLEGAL_OPERATION


class RecallHandlers:
    def __init__(
        self, config: BrokerConfig, *, store: MessageStore, topics: TopicTable, timers: TimerStore
    ) -> None:
        self.config = config
        self.store = store
        self.topics = topics
        self.timers = timers

    def handlers(self) -> dict[int, Handler]:
        return {RequestCode.RECALL_MESSAGE: self.recall}

    def recall(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        config = self.config
        fields = cmd.ext_fields or {}
        topic, raw = str(fields.get("topic") or ""), str(fields.get("recallHandle") or "")
        if not topic or not raw:
            raise ProtocolError("the request has no topic or recallHandle")
        if not config.recall_message_enable:
            raise NoPermissionError("recall failed, operation is forbidden")
        if self.store.is_slave:
            raise SlaveNotAvailableError("recall failed, broker service not available")
        if not config.writable and not config.allow_recall_when_broker_not_writeable:
            raise ServiceNotAvailableError("recall failed, broker service not available")
        if self.topics.get(topic) is None:
            raise TopicNotExistError(f"recall failed, the topic[{topic}] not exist")
        try:
            handle = RecallHandle.decode(raw)
        except ProtocolError as exc:
            raise IllegalOperationError(str(exc)) from None
        if handle.topic != topic:
            raise IllegalOperationError("recall failed, topic not match")
        if handle.broker_name != config.broker_name:
            raise IllegalOperationError("recall failed, broker service not available")
        due = int(handle.timestamp) if handle.timestamp.lstrip("-").isdigit() else -1
        left = due - int(time.time() * 1000)
        if left <= 0 or left >= self.timers.max_delay_ms:
            raise IllegalOperationError("recall failed, timestamp invalid")
        self.timers.recall(
            topic, handle.message_id, due, str(fields.get("producerGroup") or ""), born_host(conn)
        )
        return cmd.response(ext_fields={"msgId": handle.message_id, "MSG_REGION": config.region_id})
