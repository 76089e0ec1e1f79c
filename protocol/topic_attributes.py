"""Topic attributes (RocketMQ 5): the ``+key=value,-key`` modifications tools send, and the
rules a topic's attribute map changes by.

``mqadmin updateTopic -a +message.type=FIFO`` sends the modification string in the
UPDATE_AND_CREATE_TOPIC header's ``attributes`` field; UPDATE_AND_CREATE_TOPIC_LIST carries the
parsed map (keys still signed) in each topic config. The broker applies them with
:func:`apply` and keeps the resulting plain map in ``topics.json`` and in every topic config it
answers with; the admin SDK formats them. Apache's rules, which clients and tools rely on: a new topic may only add; ``+`` adds or updates, ``-`` deletes an existing key;
a key appears once; only known keys, each with its own values, and only changeable ones after
creation.

What our broker differs in is refused here with the reason, not accepted and ignored:
``queue.type=BatchCQ`` and ``cleanup.policy=COMPACTION`` need stores this broker does not have,
and ``reserve.time`` needs a tiered store (Apache refuses it without one too).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

#: Attribute names (``TopicAttributes`` in Apache RocketMQ 5).
QUEUE_TYPE = "queue.type"
CLEANUP_POLICY = "cleanup.policy"
MESSAGE_TYPE = "message.type"
RESERVE_TIME = "reserve.time"

#: The values of ``message.type``.
MESSAGE_TYPES = frozenset({"UNSPECIFIED", "NORMAL", "FIFO", "DELAY", "TRANSACTION", "MIXED"})


class AttributeRefused(ValueError):
    """A modification the broker refuses; the message is what the peer is told."""


@dataclass(frozen=True)
class _Attribute:
    changeable: bool
    values: frozenset[str] | None  # None: a number in [-1, 2**63-1]
    #: Values Apache accepts that this broker cannot honour, with the reason.
    unsupported: Mapping[str, str]


_ATTRIBUTES: dict[str, _Attribute] = {
    QUEUE_TYPE: _Attribute(
        False,
        frozenset({"BatchCQ", "SimpleCQ"}),
        {"BatchCQ": "this broker has no batch consume queue: queue.type SimpleCQ is the only one"},
    ),
    CLEANUP_POLICY: _Attribute(
        False,
        frozenset({"DELETE", "COMPACTION"}),
        {"COMPACTION": "this broker has no compaction store: cleanup.policy DELETE is the only one"},
    ),
    MESSAGE_TYPE: _Attribute(True, MESSAGE_TYPES, {}),
    RESERVE_TIME: _Attribute(True, None, {}),
}


def parse_modification(text: str | None) -> dict[str, str]:
    """``+a=1,+b=2,-c`` as a map of signed keys to values (a deletion's value is empty)."""
    if not text:
        return {}
    parsed: dict[str, str] = {}
    for item in text.split(","):
        if "=" in item:
            key, value = item.split("=")[:2]  # as Apache's: what follows a second "=" is dropped
            if "+" not in key:
                raise AttributeRefused(f"add/alter attribute format is wrong: {key}")
        else:
            key, value = item, ""
            if "-" not in key:
                raise AttributeRefused(f"delete attribute format is wrong: {key}")
        if key in parsed:
            raise AttributeRefused(f"key duplication: {key}")
        parsed[key] = value
    return parsed


def format_modification(attributes: Mapping[str, str]) -> str:
    """The inverse of :func:`parse_modification`, as tools put it in a request header."""
    return ",".join(f"{key}={value}" if value else key for key, value in attributes.items())


def sets_mixed(modification: Mapping[str, str]) -> bool:
    """Whether ``modification`` makes the topic MIXED, which a broker without
    ``enableMixedMessageType`` refuses as an invalid parameter (before any other check)."""
    return modification.get("+" + MESSAGE_TYPE) == "MIXED"


def apply(current: Mapping[str, str] | None, modification: Mapping[str, str]) -> dict[str, str]:
    """The topic's attributes after ``modification`` (signed keys); ``current`` is None for a
    topic being created. Raises :class:`AttributeRefused` saying what is wrong."""
    create = current is None
    result = dict(current or {})
    seen: set[str] = set()
    for signed, value in modification.items():
        sign, key = signed[:1], signed[1:]
        if not key or "+" in key or "-" in key:
            raise AttributeRefused("kv string format wrong.")
        if key in seen:
            raise AttributeRefused(f"alter duplication key. key: {key}")
        seen.add(key)
        if sign == "+":
            _check(key, value, create=create)
            result[key] = value
        elif create:
            raise AttributeRefused(f"only add attribute is supported while creating topic. key: {key}")
        elif sign == "-":
            if key not in result:
                raise AttributeRefused(f"attempt to delete a nonexistent key: {key}")
            _check(key, None, create=False)
            del result[key]
        else:
            raise AttributeRefused(f"wrong format key: {key}")
    return result


def _check(key: str, value: str | None, *, create: bool) -> None:
    attribute = _ATTRIBUTES.get(key)
    if attribute is None:
        raise AttributeRefused(f"unsupported key: {key}")
    if not create and not attribute.changeable:
        raise AttributeRefused(f"attempt to update an unchangeable attribute. key: {key}")
    if value is None:  # a deletion: no value to check
        return
    if key == RESERVE_TIME:
        raise AttributeRefused("Update topic reserveTime not supported")
    if attribute.values is not None and value not in attribute.values:
        raise AttributeRefused(f"value is not in set: [{', '.join(sorted(attribute.values))}]")
    reason = attribute.unsupported.get(value)
    if reason is not None:
        raise AttributeRefused(reason)
