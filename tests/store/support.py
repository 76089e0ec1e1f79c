"""Helpers for store tests: small-file configs, deterministic messages, record checks."""

from __future__ import annotations

import zlib
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from aiorocketmq.broker.store import MessageStore, StoreConfig, StoreMessage
from aiorocketmq.protocol.message import MessageExt, decode_records, encode_properties, pack_host, tags_code

STORE_HOST = pack_host("127.0.0.1", 10911)
BORN_HOST = pack_host("10.0.0.7", 52001)


def small_config(root: Path, **overrides: Any) -> StoreConfig:
    """A store with small files, so tests roll them quickly."""
    values: dict[str, Any] = {
        "storePathRootDir": str(root),
        "mappedFileSizeCommitLog": 64 * 1024,
        "mappedFileSizeConsumeQueue": 50 * 20,
        "maxHashSlotNum": 64,
        "maxIndexNum": 400,
    }
    values.update(overrides)
    return StoreConfig.model_validate(values)


_PATTERN = bytes(range(251)) * 300


def body_for(topic: str, queue_id: int, n: int, size: int = 100) -> bytes:
    """A body that says which message it is, with filler bytes that depend on it."""
    head = f"{topic}/{queue_id}/{n}|".encode()
    start = n * 7 % 251
    return head + _PATTERN[start : start + max(0, size - len(head))]


def make_message(
    topic: str = "TopicA",
    queue_id: int = 0,
    n: int = 0,
    *,
    size: int = 100,
    tags: str | None = "TagA",
    keys: str | None = None,
    uniq_key: str | None = None,
    sys_flag: int = 0,
    extra: dict[str, str] | None = None,
    born_host: bytes = BORN_HOST,
    store_timestamp: int = 0,
) -> StoreMessage:
    properties: dict[str, str] = {}
    if tags:
        properties["TAGS"] = tags
    if keys:
        properties["KEYS"] = keys
    if uniq_key is None:
        uniq_key = f"U-{topic}-{queue_id}-{n}"
    if uniq_key:
        properties["UNIQ_KEY"] = uniq_key
    properties.update(extra or {})
    return StoreMessage(
        topic=topic,
        queue_id=queue_id,
        body=body_for(topic, queue_id, n, size),
        properties=encode_properties(properties),
        flag=n % 5,
        sys_flag=sys_flag,
        born_timestamp=1_700_000_000_000 + n,
        born_host=born_host,
        tags_code=tags_code(tags),
        keys=keys,
        uniq_key=uniq_key or None,
        store_timestamp=store_timestamp,
    )


def decode(buffers: Sequence[bytes | memoryview]) -> list[MessageExt]:
    return decode_records(b"".join(bytes(b) for b in buffers), check_crc=True, decompress=False)


def crc(body: bytes) -> int:
    return zlib.crc32(body) & 0x7FFFFFFF


@asynccontextmanager
async def running(config: StoreConfig) -> AsyncIterator[MessageStore]:
    store = MessageStore(config, store_host=STORE_HOST)
    await store.start()
    try:
        yield store
    finally:
        await store.shutdown()


def consume_queue_matches_log(store: MessageStore) -> int:
    """Check every consume-queue entry against the record it points to (topic, queue, queue
    offset, size, tags code) and that every dispatchable record has its entry; returns the
    number of entries checked."""
    checked = 0
    for topic in store.topics():
        for queue_id in store.queue_ids(topic):
            low = store.get_min_offset(topic, queue_id)
            high = store.get_max_offset(topic, queue_id)
            entries = store.read_consume_queue(topic, queue_id, low, high - low)
            assert len(entries) == high - low, (topic, queue_id, low, high, len(entries))
            for i, (offset, size, code) in enumerate(entries):
                record = store.read_record(offset, size)
                assert record is not None, (topic, queue_id, low + i, offset, size)
                msg = decode_records(record, check_crc=True, decompress=False)[0]
                assert (msg.topic, msg.queue_id, msg.queue_offset) == (topic, queue_id, low + i)
                assert msg.commit_log_offset == offset
                assert code == tags_code(msg.tags)
                checked += 1
    return checked
