"""Recalling a timer message (RocketMQ 5): a producer cancels a message before its delivery time
with the recall handle its send returned. One set of checks, in Apache's order and with its
answers, for every front (the remoting RECALL_MESSAGE and the 5.x RecallMessage); off unless
``recallMessageEnable``, as in Apache."""

from __future__ import annotations

import time

from aiorocketmq.protocol.codes import ResponseCode
from aiorocketmq.protocol.errors import (
    BrokerError,
    NoPermissionError,
    ProtocolError,
    ServiceNotAvailableError,
    SlaveNotAvailableError,
    TopicNotExistError,
)
from aiorocketmq.protocol.recall import RecallHandle

from .config import BrokerConfig
from .store import MessageStore
from .timers import TimerStore
from .topics import TopicTable


class IllegalOperationError(BrokerError):
    code = ResponseCode.ILLEGAL_OPERATION


class Recaller:
    """Applies recalls to the timer store (module doc)."""

    def __init__(
        self, config: BrokerConfig, *, store: MessageStore, topics: TopicTable, timers: TimerStore
    ) -> None:
        self.config = config
        self.store = store
        self.topics = topics
        self.timers = timers

    def recall(self, topic: str, raw: str, *, producer_group: str, born_host: bytes) -> str:
        """Recall the message ``raw`` (a recall handle) names in ``topic``; its message id.
        Raises the broker's error, with Apache's remark, when it cannot be recalled."""
        config = self.config
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
        self.timers.recall(topic, handle.message_id, due, producer_group, born_host)
        return handle.message_id
