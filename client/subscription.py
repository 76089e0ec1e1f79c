"""Subscriptions: parsing a tag expression (``"*"`` or ``"tagA || tagB"``) into the
``SubscriptionData`` that heartbeats carry, and the exact-tag filter clients apply to pulled
messages (the broker filters by tag hash only, and hashes collide)."""

from __future__ import annotations

import re
import time

from aiorocketmq.protocol.body import SubscriptionData
from aiorocketmq.protocol.message import MessageExt, java_hash

from .errors import ClientError

SUBSCRIBE_ALL = "*"
RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"
MAX_TOPIC_LENGTH = 127
MAX_GROUP_LENGTH = 255
_VALID_NAME = re.compile(r"^[%|a-zA-Z0-9_-]+$")


def retry_topic(group: str) -> str:
    return RETRY_PREFIX + group


def dlq_topic(group: str) -> str:
    return DLQ_PREFIX + group


def check_topic(topic: str) -> None:
    """Raise :class:`ClientError` unless ``topic`` is a name a broker accepts."""
    if not isinstance(topic, str) or not topic.strip():
        raise ClientError("the topic name is empty")
    if len(topic) > MAX_TOPIC_LENGTH:
        raise ClientError(f"the topic name {topic!r} is longer than {MAX_TOPIC_LENGTH} characters")
    if not _VALID_NAME.match(topic):
        raise ClientError(f"the topic name {topic!r} may contain only letters, digits, '%', '|', '_' and '-'")


def check_group(group: str) -> None:
    """Raise :class:`ClientError` unless ``group`` is a usable producer or consumer group."""
    if not isinstance(group, str) or not group.strip():
        raise ClientError("the group name is empty")
    if len(group) > MAX_GROUP_LENGTH:
        raise ClientError(f"the group name {group!r} is longer than {MAX_GROUP_LENGTH} characters")
    if not _VALID_NAME.match(group):
        raise ClientError(f"the group name {group!r} may contain only letters, digits, '%', '|', '_' and '-'")


def parse_tags(expression: str | None) -> list[str]:
    """The tags of an expression, in order, duplicates removed; empty for ``*``."""
    if expression is None:
        return []
    text = expression.strip()
    if not text or text == SUBSCRIBE_ALL:
        return []
    tags: list[str] = []
    for piece in text.split("||"):
        tag = piece.strip()
        if tag and tag not in tags:
            tags.append(tag)
    if not tags:
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
