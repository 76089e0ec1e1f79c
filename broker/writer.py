"""Compiled with mypyc (aiorocketmq/compiled.py, which lists the rules): declared, typed
attributes only; no monkeypatching, setattr or frame tricks; no await in except/finally.

Writing messages the broker makes: a store message built from properties (tags code, keys,
unique key, a delay level parked in the schedule topic, a delivery time parked by the timer
store) and appended with its put counted.

Sends, send-backs, transaction commits, delayed deliveries and the broker's own records
(transaction op records, offset-moved events) all go through one :class:`MessageWriter`.
"""

from __future__ import annotations

from typing import Protocol

from aiorocketmq.broker.store import MessageStore, PutResult, StoreMessage
from aiorocketmq.protocol.message import MessageExt, PropertyKey, pack_host, stored_properties, tags_code
from aiorocketmq.protocol.names import (
    TIMER_DELAY_MS,
    TIMER_DELAY_SEC,
    TIMER_DELIVER_MS,
    TIMER_REQUESTS,
    TIMER_TOPIC,
)
from aiorocketmq.protocol.transport import Connection

from .delay_levels import DelayLevels
from .stats import BrokerStats

_DELAY = PropertyKey.DELAY_TIME_LEVEL
_TAGS = PropertyKey.TAGS
_KEYS = PropertyKey.KEYS
_UNIQ_KEY = PropertyKey.UNIQ_CLIENT_MESSAGE_ID_KEYIDX
_NO_HOST = b"\0" * 8
_TIMER_REQUESTS = TIMER_REQUESTS


class TimerParking(Protocol):
    """Diverts timer messages (see :mod:`.timers`): their delivery time, None for others."""

    def park(self, topic: str, queue_id: int, properties: dict[str, str], sys_flag: int) -> int | None: ...


def born_host(conn: Connection) -> bytes:
    """The peer address as stored in records; IPv6 peers become 127.0.0.1 because the C++
    and JS clients read 4-byte hosts only (docs/protocol.md §4.3)."""
    packed: bytes | None = conn.attrs.get("born_host")
    if packed is None:
        host, port = conn.peer
        try:
            packed = pack_host(host, port)
        except ValueError:
            packed = pack_host("127.0.0.1", port)
        if len(packed) != 8:
            packed = pack_host("127.0.0.1", port)
        conn.attrs["born_host"] = packed
    return packed


class MessageWriter:
    def __init__(
        self, store: MessageStore, stats: BrokerStats, delay_levels: DelayLevels, store_host: bytes
    ) -> None:
        self.store = store
        self.stats = stats
        self.delay_levels = delay_levels
        #: This broker's address as records hold it (for the messages it writes itself).
        self.store_host = store_host
        #: Parks timer messages (5.x delivery times) when set.
        self.timers: TimerParking | None = None

    def build(
        self,
        topic: str,
        queue_id: int,
        body: bytes,
        properties: dict[str, str],
        *,
        flag: int = 0,
        sys_flag: int = 0,
        born_timestamp: int = 0,
        born_host: bytes = _NO_HOST,
        reconsume_times: int = 0,
        prepared_transaction_offset: int = 0,
        encoded: str | None = None,
    ) -> StoreMessage:
        """A store message, parked in ``SCHEDULE_TOPIC_XXXX`` when it carries a delay level.

        ``encoded`` is ``properties`` already in wire form, when the caller has it."""
        code = tags_code(properties.get(_TAGS))
        store_timestamp = 0  # the store's clock
        if properties.get(_DELAY):
            if not _TIMER_REQUESTS.isdisjoint(properties):
                for key in (TIMER_DELIVER_MS, TIMER_DELAY_SEC, TIMER_DELAY_MS):
                    properties.pop(key, None)  # a delay level wins, as in RocketMQ
                encoded = None
            parked = self.delay_levels.park(topic, queue_id, properties, sys_flag)
            if parked is not None:
                topic, queue_id, store_timestamp, code = parked
                encoded = None  # the real topic and queue were added
        elif self.timers is not None and not _TIMER_REQUESTS.isdisjoint(properties):
            deliver = self.timers.park(topic, queue_id, properties, sys_flag)
            if deliver is not None:
                topic, queue_id, code, encoded = TIMER_TOPIC, 0, deliver, None
        # Positionally, in the field order: a send builds one per message, and fourteen
        # keyword arguments cost three times as much.
        return StoreMessage(
            topic,
            queue_id,
            body,
            encoded if encoded is not None else stored_properties(properties),
            flag,
            sys_flag,
            born_timestamp,
            born_host,
            reconsume_times,
            prepared_transaction_offset,
            code,
            properties.get(_KEYS),
            properties.get(_UNIQ_KEY),
            store_timestamp,
        )

    def build_copy(
        self,
        msg: MessageExt,
        topic: str,
        queue_id: int,
        properties: dict[str, str],
        *,
        reconsume_times: int | None = None,
    ) -> StoreMessage:
        """:meth:`build` for a stored message written again under ``topic`` and ``queue_id``
        (a delayed or timer message coming due, a send-back, a POP redelivery or dead letter):
        its body, flags, birth and reconsume count (``reconsume_times`` when given) carried over,
        ``properties`` as the caller changed them."""
        return self.build(
            topic,
            queue_id,
            msg.body,
            properties,
            flag=msg.flag,
            sys_flag=msg.sys_flag,
            born_timestamp=msg.born_timestamp,
            born_host=msg.born_host_bytes,
            reconsume_times=msg.reconsume_times if reconsume_times is None else reconsume_times,
        )

    def put(self, msg: StoreMessage) -> PutResult:
        result = self.store.put_message(msg)
        self.stats.on_put(msg.topic, result)
        return result

    def put_batch(self, messages: list[StoreMessage]) -> PutResult:
        result = self.store.put_messages(messages)
        self.stats.on_put(messages[0].topic, result)
        return result
