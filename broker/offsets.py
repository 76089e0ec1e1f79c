"""Committed consumer offsets per (topic, group, queue), persisted to
``config/consumerOffset.json`` in RocketMQ's ``{"offsetTable":{"topic@group":{qid:offset}}}``."""

from __future__ import annotations

import logging

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
