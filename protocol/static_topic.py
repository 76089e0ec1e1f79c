"""Static topics (RocketMQ 5): logic queues mapped onto brokers' physical queues.

A static topic has a fixed number of *global* queue ids, each hosted by one broker's physical
queue at a time. ``mqadmin updateStaticTopic`` decides the mapping and sends each broker its
share (UPDATE_AND_CREATE_STATIC_TOPIC, 513, with a :class:`TopicQueueMappingDetail` body); the
brokers register a summary (:class:`TopicQueueMappingInfo`, global id -> local queue id of the
queues each leads) and the name server hands those summaries to 5.x clients in the route's
``topicQueueMappingByBroker``. Clients then address queues by global id on the broker that
leads them; the broker turns the global id and logical offsets into its physical queue and
offsets (:mod:`aiorocketmq.broker.static_topics`).

A global queue moved to another broker (``remappingStaticTopic``) keeps its history: its list of
:class:`LogicQueueMappingItem` grows by one item per move, the last being the leader, each item
saying where on which broker a range of logical offsets lives.
"""

from __future__ import annotations

from pydantic import Field

from .body import (
    GLOBAL_SCOPE,
    LogicQueueMappingItem,
    TopicConfig,
    TopicQueueMappingDetail,
    TopicQueueMappingInfo,
)

__all__ = [
    "GLOBAL_SCOPE",
    "MOCK_BROKER_PREFIX",
    "LogicQueueMappingItem",
    "TopicConfigAndQueueMapping",
    "TopicQueueMappingDetail",
    "TopicQueueMappingInfo",
    "check_items",
    "find_item",
    "mock_broker_name",
]

#: The broker name 5.x clients put on a static topic's queues (``__syslo__`` + scope).
MOCK_BROKER_PREFIX = "__syslo__"


def mock_broker_name(scope: str = GLOBAL_SCOPE) -> str:
    return MOCK_BROKER_PREFIX + (scope[2:] if scope.startswith("__") else scope)


class TopicConfigAndQueueMapping(TopicConfig):
    """GET_TOPIC_CONFIG's answer: the topic's config, with its mapping when asked (``lo``)."""

    mapping_detail: TopicQueueMappingDetail | None = Field(None, alias="mappingDetail")


def find_item(items: list[LogicQueueMappingItem], logical: int) -> LogicQueueMappingItem | None:
    """The item holding logical offset ``logical``: the newest one starting at or before it
    (items whose start is undecided are skipped), else the oldest."""
    if not items:
        return None
    for item in reversed(items):
        if 0 <= item.logic_offset <= logical:
            return item
    return items[0]


def check_items(items: list[LogicQueueMappingItem]) -> str | None:
    """Why a global queue's item list cannot be accepted, or None."""
    previous: LogicQueueMappingItem | None = None
    for index, item in enumerate(items):
        if item.start_offset < 0 or item.gen < 0 or item.queue_id < 0:
            return f"the mapping item {item.to_wire()} has a negative start offset, gen or queue id"
        if previous is not None and item.gen <= previous.gen:
            return f"the mapping items' generations do not increase: {previous.gen} then {item.gen}"
        if index < len(items) - 1 and item.logic_offset < 0:
            return f"only the newest mapping item may leave its logic offset undecided: {item.to_wire()}"
        if previous is not None and 0 <= item.logic_offset < previous.logic_offset:
            return f"the mapping items' logic offsets do not increase: {previous.logic_offset} then {item.logic_offset}"
        previous = item
    return None
