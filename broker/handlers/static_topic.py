"""UPDATE_AND_CREATE_STATIC_TOPIC (513, RocketMQ 5): a static topic's config and this broker's
share of its mapping, as ``mqadmin updateStaticTopic`` and ``remappingStaticTopic`` send them.

The mapping is checked before anything changes (Apache's broker stores the topic config first
and may refuse the mapping after); then the topic config is stored, the router put in front of
the queue handlers, and the name servers told.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiorocketmq.protocol.body import TopicQueueMappingDetail
from aiorocketmq.protocol.codes import RequestCode
from aiorocketmq.protocol.command import RemotingCommand
from aiorocketmq.protocol.errors import InvalidParameterError, ProtocolError, ServerSystemError
from aiorocketmq.protocol.headers import CreateTopicRequestHeader
from aiorocketmq.protocol.names import topic_name_problem
from aiorocketmq.protocol.transport import Connection, Handler

from ..config import BrokerConfig
from ..static_topics import StaticTopicTable
from ..topics import TopicTable
from . import topic_config_of


class StaticTopicHandlers:
    def __init__(
        self,
        config: BrokerConfig,
        *,
        topics: TopicTable,
        table: StaticTopicTable,
        changed: Callable[[], None],
        register: Callable[[], Awaitable[None]],
    ) -> None:
        """``changed()`` persists the table and routes the topic's requests through the
        mapping; ``register()`` registers with every name server now."""
        self.config = config
        self.topics = topics
        self.table = table
        self._changed = changed
        self._register = register

    def handlers(self) -> dict[int, Handler]:
        return {RequestCode.UPDATE_AND_CREATE_STATIC_TOPIC: self.create}

    async def create(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = CreateTopicRequestHeader.from_fields(cmd.ext_fields)
        problem = topic_name_problem(h.topic)
        if problem is not None:
            raise InvalidParameterError(problem)
        try:
            detail = TopicQueueMappingDetail.decode(cmd.body)
        except ProtocolError as exc:
            raise ServerSystemError(f"bad static topic mapping: {exc}") from None
        if detail.topic != h.topic:
            raise ServerSystemError(f"the mapping is for topic {detail.topic}, the request for {h.topic}")
        if detail.bname != self.config.broker_name:
            raise ServerSystemError(
                f"the mapping is for broker {detail.bname}, this broker is {self.config.broker_name}"
            )
        self.table.update(detail, force=bool(h.force))
        current = self.topics.get(h.topic)
        self.topics.put(topic_config_of(h, dict(current.attributes) if current is not None else None))
        self._changed()
        await self._register()
        return cmd.response()
