"""Subscriptions: parsing a tag expression (``"*"`` or ``"tagA || tagB"``) into the
``SubscriptionData`` that heartbeats carry, and the exact-tag filter clients apply to pulled
messages (the broker filters by tag hash only, and hashes collide). The naming rules and the
expression syntax are RocketMQ's, from :mod:`aiorocketmq.protocol.names`."""

from __future__ import annotations

import time

from aiorocketmq.protocol.body import SubscriptionData
from aiorocketmq.protocol.message import MessageExt, java_hash
from aiorocketmq.protocol.names import (
    SUBSCRIBE_ALL,
    group_name_problem,
    is_subscribe_all,
    parse_tag_expression,
    topic_name_problem,
)

from .errors import ClientError


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
