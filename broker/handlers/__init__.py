"""Request handlers, one module per request family; each family is a class built with only
the broker parts it uses, whose ``handlers()`` maps its request codes to its methods."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aiorocketmq.protocol.body import TopicConfig
from aiorocketmq.protocol.errors import MessageIllegalError
from aiorocketmq.protocol.headers import CreateTopicRequestHeader


def text_field(fields: Mapping[str, Any] | None, name: str) -> str:
    """A required text field of a request's header, or a refusal naming it (for the RocketMQ 5
    requests read without a header model)."""
    value = (fields or {}).get(name)
    if not isinstance(value, str) or not value:
        raise MessageIllegalError(f"the request has no {name}")
    return value


def int_field(fields: Mapping[str, Any] | None, name: str) -> int:
    """A required integer field of a request's header, or a refusal naming it."""
    value = (fields or {}).get(name)
    try:
        return int(str(value))
    except ValueError:
        raise MessageIllegalError(f"the request's {name} is not a number: {value!r}") from None


def topic_config_of(h: CreateTopicRequestHeader, attributes: dict[str, str] | None = None) -> TopicConfig:
    """The topic config a creation request's header describes (UPDATE_AND_CREATE_TOPIC and
    UPDATE_AND_CREATE_STATIC_TOPIC)."""
    return TopicConfig(
        topic_name=h.topic,
        read_queue_nums=h.read_queue_nums,
        write_queue_nums=h.write_queue_nums,
        perm=h.perm,
        topic_filter_type=h.topic_filter_type,
        topic_sys_flag=h.topic_sys_flag or 0,
        order=h.order,
        attributes=attributes or {},
    )
