"""Committed consumer offsets per (topic, group, queue), persisted to
``config/consumerOffset.json`` in RocketMQ's ``{"offsetTable":{"topic@group":{qid:offset}}}``."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping

from aiorocketmq.protocol.body import ConsumerOffsetTable

from .config import BrokerConfig
from .config_files import ConfigFile

log = logging.getLogger(__name__)

KEY_SEPARATOR = "@"


class OffsetTable:
    def __init__(self, config: BrokerConfig) -> None:
        self.file = ConfigFile(config.config_dir / "consumerOffset.json")
        self.table: dict[str, dict[int, int]] = {}
        self.dirty = False

    def load(self) -> None:
        raw = self.file.load()
        if raw is not None:
            self.table = ConsumerOffsetTable.model_validate(raw).offset_table

    def encode(self) -> bytes:
        """The file content; marks the table clean (it is about to be saved)."""
        self.dirty = False
        return self.encode_snapshot()

    def encode_snapshot(self) -> bytes:
        return ConsumerOffsetTable(offset_table=self.table).encode()

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Store a committed offset; negative offsets mean "none" and are ignored."""
        if offset < 0:
            return
        queues = self.table.get(f"{topic}{KEY_SEPARATOR}{group}")
        if queues is None:
            queues = self.table[f"{topic}{KEY_SEPARATOR}{group}"] = {}
        previous = queues.get(queue_id)
        if previous is not None and offset < previous:
            log.debug("offset of %s@%s[%d] moves back %d -> %d", topic, group, queue_id, previous, offset)
        queues[queue_id] = offset
        self.dirty = True

    def query(self, group: str, topic: str, queue_id: int) -> int:
        """The committed offset, -1 when there is none."""
        queues = self.table.get(f"{topic}{KEY_SEPARATOR}{group}")
        if not queues:
            return -1
        return queues.get(queue_id, -1)

    def queues_of(self, group: str, topic: str) -> dict[int, int]:
        return dict(self.table.get(f"{topic}{KEY_SEPARATOR}{group}", {}))

    def topics_of_group(self, group: str) -> list[str]:
        suffix = KEY_SEPARATOR + group
        return sorted(key[: -len(suffix)] for key in self.table if key.endswith(suffix))

    def groups_of_topic(self, topic: str) -> list[str]:
        prefix = topic + KEY_SEPARATOR
        return sorted(key[len(prefix) :] for key in self.table if key.startswith(prefix))

    def delete_group(self, group: str) -> None:
        suffix = KEY_SEPARATOR + group
        for key in [k for k in self.table if k.endswith(suffix)]:
            del self.table[key]
        self.dirty = True

    def delete_topic(self, topic: str) -> None:
        prefix = topic + KEY_SEPARATOR
        for key in [k for k in self.table if k.startswith(prefix)]:
            del self.table[key]
        self.dirty = True


def consumer_progress(
    offsets: OffsetTable,
    subscribed: Mapping[str, Iterable[str]],
    queue_ids: Callable[[str], list[int]],
    delayed: Mapping[int, int],
    schedule_topic: str,
) -> Iterator[tuple[str, str, int, int]]:
    """``(group, topic, queue id, next offset to consume)`` for everything still to be consumed:
    every committed offset; every queue of a topic an online group (``subscribed``: group →
    topics) subscribes to without having committed anything there yet (from the start, to be
    safe); and the delayed-delivery position of each delay level. This is what the store's
    forced clean-up protects."""
    committed = set()
    for key, queues in list(offsets.table.items()):
        topic, _, group = key.partition(KEY_SEPARATOR)
        committed.add(key)
        for queue_id, offset in list(queues.items()):
            yield group, topic, queue_id, offset
    for group, topics in subscribed.items():
        for topic in topics:
            if f"{topic}{KEY_SEPARATOR}{group}" not in committed:
                for queue_id in queue_ids(topic):
                    yield group, topic, queue_id, 0
    for level, offset in list(delayed.items()):
        yield "(delayed delivery)", schedule_topic, level - 1, offset
