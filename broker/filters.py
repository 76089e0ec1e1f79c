"""Consumer filters evaluated on the broker: SQL92 subscriptions (``enablePropertyFilter``).

Heartbeats carry each consumer group's subscriptions; those whose ``expressionType`` is not a
tag type are compiled here once per (group, topic, version) and kept for the pulls that rely
on the registered subscription. Pulls that carry their own expression (the SUBSCRIPTION flag)
are compiled through a small cache keyed by the expression text. A pull then hands the store
a record filter that reads a stored record's properties and evaluates the expression, so
only matching messages travel; the consume queue's tag hash cannot help an SQL92 filter.

CHECK_CLIENT_CONFIG lets a client learn at subscribe time that its expression is malformed
or that the broker does not filter by properties, as RocketMQ's clients ask before starting.
"""

from __future__ import annotations

import functools
import logging
import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from aiorocketmq.protocol.body import SubscriptionData
from aiorocketmq.protocol.message import (
    NAME_VALUE_SEPARATOR,
    PROPERTY_SEPARATOR,
    RECORD_SYS_FLAG_POS,
    decode_properties,
)
from aiorocketmq.protocol.sql92 import (
    EXPRESSION_TYPE_SQL92,
    EvaluationError,
    Sql92Error,
    Sql92Filter,
    compile_sql92,
)

log = logging.getLogger(__name__)

#: A record filter: a stored record (its bytes) in, whether it travels out.
RecordFilter = Callable[[memoryview], bool]

_BODY_LENGTH = struct.Struct(">i")
_PROPS_LENGTH = struct.Struct(">h")
_BORN_V6 = 0x10
_STORE_V6 = 0x20
#: The sys flag's low byte, which holds the address-width bits.
_SYS_FLAG_LOW = RECORD_SYS_FLAG_POS + 3
_SEPARATOR = PROPERTY_SEPARATOR.encode()


def is_tag_type(expression_type: str | None) -> bool:
    """RocketMQ's rule: no type, an empty one and ``TAG`` all mean a tag expression."""
    return not expression_type or expression_type == "TAG"


@functools.lru_cache(maxsize=1024)
def compile_expression(expression: str, expression_type: str) -> Sql92Filter:
    """The compiled filter of a non-tag subscription; :class:`Sql92Error` when it is not one
    this broker can evaluate."""
    if expression_type != EXPRESSION_TYPE_SQL92:
        raise Sql92Error(f"the filter type {expression_type!r} is not supported (only SQL92)")
    return compile_sql92(expression)


class RecordMatcher:
    """A store-side filter: the record's properties must satisfy the expression.

    ``needles`` are byte strings (``name\x01value``) one of which every matching record
    contains, when the expression implies one (``TAGS = 'a'``, ``kind IN ('x', 'y')`` at its
    top level); the store searches for them in the mapped file before calling the matcher.
    Only the properties the expression reads are looked up, straight in the record's bytes:
    decoding every property of every scanned record would cost more than the evaluation."""

    __slots__ = ("needles", "_evaluate", "_wanted")

    def __init__(self, expression: Sql92Filter) -> None:
        self._evaluate = expression.evaluate
        self.needles: tuple[bytes, ...] = (
            tuple(f"{name}{NAME_VALUE_SEPARATOR}{value}".encode() for name, value in sorted(expression.needs))
            if expression.needs
            else ()
        )
        self._wanted = [
            (
                name,
                (name + NAME_VALUE_SEPARATOR).encode(),
                f"{PROPERTY_SEPARATOR}{name}{NAME_VALUE_SEPARATOR}".encode(),
            )
            for name in sorted(expression.properties)
        ]

    def __call__(self, record: memoryview) -> bool:
        try:
            raw = bytes(record)
            sys_flag = raw[_SYS_FLAG_LOW]
            head = 88 + (12 if sys_flag & _BORN_V6 else 0) + (12 if sys_flag & _STORE_V6 else 0)
            topic_pos = head + _BODY_LENGTH.unpack_from(raw, head - 4)[0]
            props = topic_pos + 3 + raw[topic_pos]  # past the topic and the properties' length
            found: dict[str, str] = {}
            for name, first, inner in self._wanted:
                if raw.startswith(first, props):
                    start = props + len(first)
                else:
                    at = raw.find(inner, props)
                    if at < 0:
                        continue
                    start = at + len(inner)
                stop = raw.find(_SEPARATOR, start)
                value = raw[start:stop] if stop >= 0 else raw[start:]
                if raw.find(inner, start) >= 0:
                    # The name given again (a batch entry's own and the batch's): RocketMQ
                    # decodes the properties into a map, so its last non-empty value counts.
                    value = decode_properties(raw[props:].decode()).get(name, "").encode()
                if value:  # an empty value counts as absent, as RocketMQ decodes properties
                    found[name] = value.decode()
            return self._evaluate(found) is True
        except (struct.error, IndexError, UnicodeDecodeError, EvaluationError):
            # A record we cannot read the properties of, or a value that does not convert
            # to what the expression compares it with: no match.
            return False


def record_filter(expression: Sql92Filter) -> RecordMatcher:
    """The store-side filter of ``expression``."""
    return RecordMatcher(expression)


@dataclass(slots=True)
class FilterData:
    """One group's compiled expression for one topic, at the subscription version it came with."""

    expression: str
    expression_type: str
    version: int
    compiled: Sql92Filter


class ConsumerFilters:
    """The compiled non-tag subscriptions of the consumer groups, by (group, topic)."""

    def __init__(self, enabled: bool) -> None:
        #: ``enablePropertyFilter``: whether pulls may filter by SQL92 at all.
        self.enabled = enabled
        self._data: dict[tuple[str, str], FilterData] = {}

    def register(self, group: str, subscriptions: Iterable[SubscriptionData]) -> None:
        """Adopt a heartbeat's subscriptions: compile what is new or newer, keep the rest.
        A malformed expression leaves no filter data, so pulls relying on it are refused."""
        for sub in subscriptions:
            key = (group, sub.topic)
            if is_tag_type(sub.expression_type) or not sub.sub_string:
                self._data.pop(key, None)
                continue
            known = self._data.get(key)
            if (
                known is not None
                and known.version >= sub.sub_version
                and known.expression == sub.sub_string
                and known.expression_type == sub.expression_type
            ):
                continue
            try:
                compiled = compile_expression(sub.sub_string, sub.expression_type)
            except Sql92Error as exc:
                log.warning("group %s topic %s: %s", group, sub.topic, exc)
                self._data.pop(key, None)
                continue
            self._data[key] = FilterData(sub.sub_string, sub.expression_type, sub.sub_version, compiled)

    def get(self, group: str, topic: str) -> FilterData | None:
        return self._data.get((group, topic))
