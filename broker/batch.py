"""A SEND_BATCH body turned into the messages the store appends.

A batch (docs/protocol.md §4.7) is many messages for one queue in one request. Each entry keeps its
own properties string, with what the broker adds (the header's properties and the cluster)
appended; its tags, keys and unique key are read for the consume queue and the index. Entries a
batch may not carry (a delay level, a delivery time, oversized properties) refuse the whole
batch, as Apache's broker does.

This is the hottest loop of batched sends, so ``protocol/_speedups.c`` has a compiled
``store_batch`` doing the same in one pass over the body; :func:`store_batch` is whichever is
active. Both give the same messages, the same refusal and the same error for a malformed body
(tests/protocol/test_speedups.py holds them to it).
"""

from __future__ import annotations

from collections.abc import Callable
from enum import IntEnum
from typing import Any

from aiorocketmq.protocol.message import (
    MAX_PROPERTIES_LENGTH,
    PROPERTY_SEPARATOR,
    PropertyKey,
    decode_batch,
    decode_properties,
    tags_code,
)
from aiorocketmq.protocol.names import TIMER_REQUESTS
from aiorocketmq.protocol.speedups import compiled

from .store import StoreMessage

__all__ = ["BatchRefusal", "store_batch", "store_batch_pure"]


class BatchRefusal(IntEnum):
    """Why a well-formed batch is refused (the first offending entry decides)."""

    DELAY = 1
    DELIVERY_TIME = 2
    PROPERTIES_TOO_LARGE = 3


_TAGS = PropertyKey.TAGS
_KEYS = PropertyKey.KEYS
_UNIQ_KEY = PropertyKey.UNIQ_CLIENT_MESSAGE_ID_KEYIDX
_DELAY = PropertyKey.DELAY_TIME_LEVEL
_WAIT = PropertyKey.WAIT_STORE_MSG_OK


#: (data, topic, queue_id, extra, sys_flag, born_timestamp, born_host) -> see store_batch_pure
StoreBatch = Callable[[bytes, str, int, str, int, int, bytes], "tuple[list[StoreMessage], bool] | int"]


def store_batch_pure(
    data: bytes,
    topic: str,
    queue_id: int,
    extra: str,
    sys_flag: int,
    born_timestamp: int,
    born_host: bytes,
) -> tuple[list[StoreMessage], bool] | int:
    """The store messages of batch body ``data``, each with ``extra`` appended to its own
    properties, and whether every entry lets the producer wait for the store (none says
    ``WAIT=false``); or a :class:`BatchRefusal`. A malformed body raises ``ProtocolError``
    (before any refusal: the whole body is checked first)."""
    messages: list[StoreMessage] = []
    wait = True
    for entry in decode_batch(data):
        raw = entry.properties
        props = decode_properties(raw) if raw else {}
        if props.get(_DELAY, "0") != "0":
            return BatchRefusal.DELAY
        if not TIMER_REQUESTS.isdisjoint(props):
            return BatchRefusal.DELIVERY_TIME
        if props.get(_WAIT) == "false":
            wait = False
        encoded = (
            raw + extra
            if not raw or raw.endswith(PROPERTY_SEPARATOR)
            else f"{raw}{PROPERTY_SEPARATOR}{extra}"
        )
        if len(encoded) > MAX_PROPERTIES_LENGTH:
            return BatchRefusal.PROPERTIES_TOO_LARGE
        messages.append(
            StoreMessage(
                topic,
                queue_id,
                entry.body,
                encoded,
                entry.flag,
                sys_flag,
                born_timestamp,
                born_host,
                0,
                0,
                tags_code(props.get(_TAGS)),
                props.get(_KEYS),
                props.get(_UNIQ_KEY),
            )
        )
    return messages, wait


def setup_compiled(module: Any) -> None:
    """Register with the compiled extension the class and property names its ``store_batch``
    works with."""
    module.setup_batch(
        StoreMessage,
        _TAGS,
        _KEYS,
        _UNIQ_KEY,
        _DELAY,
        _WAIT,
        tuple(sorted(TIMER_REQUESTS)),
        MAX_PROPERTIES_LENGTH,
    )


def _bind() -> StoreBatch:
    if compiled is None:
        return store_batch_pure
    setup_compiled(compiled)
    fast: StoreBatch = compiled.store_batch
    return fast


#: The active implementation: the compiled one when the extension is loaded.
store_batch: StoreBatch = _bind()
