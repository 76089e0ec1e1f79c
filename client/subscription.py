"""Subscriptions: parsing a tag expression (``"*"`` or ``"tagA || tagB"``) or an SQL92
expression into the ``SubscriptionData`` that heartbeats carry, the exact-tag filter clients
apply to pulled messages (the broker filters by tag hash only, and hashes collide), and asking
a broker whether it accepts an SQL92 subscription (CHECK_CLIENT_CONFIG) before consuming. The
naming rules and the expression syntax are RocketMQ's, from :mod:`aiorocketmq.protocol.names`
and :mod:`aiorocketmq.protocol.sql92`."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

from aiorocketmq.protocol.body import CheckClientRequestBody, SubscriptionData
from aiorocketmq.protocol.codes import RequestCode, ResponseCode
from aiorocketmq.protocol.message import MessageExt, java_hash
from aiorocketmq.protocol.names import (
    SUBSCRIBE_ALL,
    group_name_problem,
    is_subscribe_all,
    parse_tag_expression,
    topic_name_problem,
)
from aiorocketmq.protocol.sql92 import EXPRESSION_TYPE_SQL92, Sql92Error, compile_sql92

from .errors import ClientError

if TYPE_CHECKING:
    from .client_instance import ClientInstance


def check_topic(topic: str) -> None:
    """Raise :class:`ClientError` unless ``topic`` is a name a broker accepts."""
    problem = topic_name_problem(topic)
    if problem is not None:
        raise ClientError(problem)


def check_group(group: str) -> None:
    """Raise :class:`ClientError` unless ``group`` is a usable producer or consumer group."""
    problem = group_name_problem(group)
    if problem is not None:
        raise ClientError(problem)


def parse_tags(expression: str | None) -> list[str]:
    """The tags of an expression, in order, duplicates removed; empty for ``*``."""
    tags = parse_tag_expression(expression)
    if not tags and not is_subscribe_all(expression):
        raise ClientError(f"the tag expression {expression!r} names no tag")
    return tags


def build_subscription(topic: str, expression: str | None = SUBSCRIBE_ALL) -> SubscriptionData:
    """The ``SubscriptionData`` for ``topic`` and a tag expression (Java ``buildSubscriptionData``)."""
    tags = parse_tags(expression)
    return SubscriptionData(
        topic=topic,
        sub_string=" || ".join(tags) if tags else SUBSCRIBE_ALL,
        tags_set=tags,
        code_set=[java_hash(tag) for tag in tags],
        sub_version=time.time_ns() // 1_000_000,
        expression_type="TAG",
    )


def tag_filter(tags: list[str]) -> frozenset[str] | None:
    """The exact-tag set to keep, or ``None`` when every message matches."""
    return frozenset(tags) if tags else None


def filter_by_tags(messages: list[MessageExt], wanted: frozenset[str] | None) -> list[MessageExt]:
    """Keep the messages whose tag is in ``wanted`` (all of them when ``wanted`` is None)."""
    if wanted is None:
        return messages
    return [msg for msg in messages if msg.properties.get("TAGS") in wanted]


def build_sql_subscription(topic: str, sql: str) -> SubscriptionData:
    """The ``SubscriptionData`` of an SQL92 subscription; a malformed expression raises
    :class:`ClientError` here, before any broker sees it."""
    try:
        compile_sql92(sql)
    except Sql92Error as exc:
        raise ClientError(f"the SQL92 expression {sql!r} is not valid: {exc}") from None
    return SubscriptionData(
        topic=topic,
        sub_string=sql,
        sub_version=time.time_ns() // 1_000_000,
        expression_type=EXPRESSION_TYPE_SQL92,
    )


def is_tag_subscription(sub: SubscriptionData) -> bool:
    return not sub.expression_type or sub.expression_type == "TAG"


async def check_in_brokers(
    instance: ClientInstance, group: str, subscriptions: Iterable[SubscriptionData]
) -> None:
    """Ask a broker of each topic subscribed by expression whether it accepts the expression
    (CHECK_CLIENT_CONFIG, as RocketMQ's consumers do when they start); raises
    :class:`ClientError` with the broker's reason when it does not."""
    for sub in subscriptions:
        if is_tag_subscription(sub):
            continue
        addr = await instance.find_any_broker_addr(sub.topic)
        body = CheckClientRequestBody(client_id=instance.client_id, group=group, subscription_data=sub)
        response = await instance.invoke(addr, RequestCode.CHECK_CLIENT_CONFIG, None, body.encode())
        if response.code != ResponseCode.SUCCESS:
            raise ClientError(
                f"the broker {addr} refused the {sub.expression_type} subscription of {sub.topic!r} "
                f"({sub.sub_string!r}): {response.remark}"
            )
