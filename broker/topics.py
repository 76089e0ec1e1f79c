"""Compiled with mypyc (aiorocketmq/compiled.py, which lists the rules): declared, typed
attributes only; no monkeypatching, setattr or frame tricks; no await in except/finally.

The broker's topic table: system topics, auto-creation, ``topics.json``.

The names of system topics and the rules for valid names live in
:mod:`aiorocketmq.protocol.names`.

Every change bumps the data version; the broker persists the table and re-registers with the
name servers through the ``on_change`` callback. The topics created or updated since the last
registration are kept (:meth:`TopicTable.take_changed`), so that registration carries only them,
as Apache 4.9's broker does (``registerIncrementBrokerData``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from aiorocketmq.protocol.body import DataVersion, TopicConfig, TopicConfigSerializeWrapper
from aiorocketmq.protocol.codes import PERM_READ_WRITE, Perm, TopicSysFlag
from aiorocketmq.protocol.names import (
    AUTO_CREATE_TOPIC,
    BENCHMARK_TOPIC,
    OFFSET_MOVED_EVENT,
    SCHEDULE_TOPIC,
    SELF_TEST_TOPIC,
    TRANS_HALF_TOPIC,
    TRANS_OP_HALF_TOPIC,
)

from .config import BrokerConfig
from .config_files import ConfigFile

log = logging.getLogger(__name__)


class TopicTable:
    """Topic configs by name, persisted to ``config/topics.json``."""

    def __init__(self, config: BrokerConfig, on_change: Callable[[], None] | None = None) -> None:
        self.config = config
        self.file = ConfigFile(config.config_dir / "topics.json")
        self.topics: dict[str, TopicConfig] = {}
        self.data_version = DataVersion(timestamp=_now_ms(), counter=0)
        self.on_change = on_change
        #: Topics put since the name-server registration last took them.
        self._changed_names: set[str] = set()

    # -- lifecycle ------------------------------------------------------------------------

    def load(self) -> None:
        raw = self.file.load()
        if raw is not None:
            wrapper = TopicConfigSerializeWrapper.model_validate(raw)
            self.topics.update(wrapper.topic_config_table)
            self.data_version = wrapper.data_version
        self._ensure_system_topics()

    def _ensure_system_topics(self) -> None:
        cfg = self.config
        system = [
            TopicConfig(topic_name=SELF_TEST_TOPIC, read_queue_nums=1, write_queue_nums=1),
            TopicConfig(topic_name=BENCHMARK_TOPIC, read_queue_nums=1024, write_queue_nums=1024),
            TopicConfig(topic_name=OFFSET_MOVED_EVENT, read_queue_nums=1, write_queue_nums=1),
            TopicConfig(topic_name=SCHEDULE_TOPIC, read_queue_nums=18, write_queue_nums=18),
            TopicConfig(topic_name=TRANS_HALF_TOPIC, read_queue_nums=1, write_queue_nums=1),
            TopicConfig(topic_name=TRANS_OP_HALF_TOPIC, read_queue_nums=1, write_queue_nums=1),
            TopicConfig(
                topic_name=f"{cfg.broker_cluster_name}_REPLY_TOPIC", read_queue_nums=1, write_queue_nums=1
            ),
        ]
        if cfg.auto_create_topic_enable:
            system.append(
                TopicConfig(
                    topic_name=AUTO_CREATE_TOPIC,
                    read_queue_nums=cfg.default_topic_queue_nums,
                    write_queue_nums=cfg.default_topic_queue_nums,
                    perm=int(Perm.INHERIT | Perm.READ | Perm.WRITE),
                )
            )
        if cfg.cluster_topic_enable:
            system.append(TopicConfig(topic_name=cfg.broker_cluster_name, perm=PERM_READ_WRITE))
        if cfg.broker_topic_enable:
            system.append(
                TopicConfig(
                    topic_name=cfg.broker_name, read_queue_nums=1, write_queue_nums=1, perm=PERM_READ_WRITE
                )
            )
        if cfg.trace_topic_enable:
            system.append(
                TopicConfig(topic_name=cfg.msg_trace_topic_name, read_queue_nums=1, write_queue_nums=1)
            )
        for topic in system:
            self.topics.setdefault(topic.topic_name, topic)
        if not cfg.auto_create_topic_enable:
            self.topics.pop(AUTO_CREATE_TOPIC, None)

    def encode(self) -> bytes:
        return self.wrapper().encode()

    def wrapper(self) -> TopicConfigSerializeWrapper:
        return TopicConfigSerializeWrapper(
            topic_config_table=dict(self.topics), data_version=self.data_version
        )

    # -- queries --------------------------------------------------------------------------

    def get(self, topic: str) -> TopicConfig | None:
        return self.topics.get(topic)

    # -- changes --------------------------------------------------------------------------

    def put(self, topic: TopicConfig) -> TopicConfig:
        """Create or replace a topic config."""
        self.topics[topic.topic_name] = topic
        self._changed_names.add(topic.topic_name)
        self._changed()
        log.info(
            "topic %s: read=%d write=%d perm=%d",
            topic.topic_name,
            topic.read_queue_nums,
            topic.write_queue_nums,
            topic.perm,
        )
        return topic

    def delete(self, topic: str) -> bool:
        if self.topics.pop(topic, None) is None:
            return False
        self._changed()
        log.info("topic %s deleted", topic)
        return True

    def create_on_send(
        self, topic: str, default_topic: str, client_queue_nums: int, unit_mode: bool = False
    ) -> TopicConfig | None:
        """Auto-create ``topic`` from its template the way a producer's first send does:
        the template must exist and carry PERM_INHERIT."""
        existing = self.topics.get(topic)
        if existing is not None:
            return existing
        template = self.topics.get(default_topic)
        if template is None or not template.perm & Perm.INHERIT:
            return None
        if default_topic == AUTO_CREATE_TOPIC and not self.config.auto_create_topic_enable:
            return None
        queues = max(1, min(client_queue_nums, template.write_queue_nums))
        return self.put(
            TopicConfig(
                topic_name=topic,
                read_queue_nums=queues,
                write_queue_nums=queues,
                perm=template.perm & ~Perm.INHERIT,
                topic_filter_type=template.topic_filter_type,
                topic_sys_flag=TopicSysFlag.UNIT if unit_mode else 0,
            )
        )

    def ensure(self, topic: str, queue_nums: int, perm: int, topic_sys_flag: int = 0) -> TopicConfig:
        """The topic's config, created with these settings if missing (retry and DLQ topics)."""
        existing = self.topics.get(topic)
        if existing is not None:
            return existing
        return self.put(
            TopicConfig(
                topic_name=topic,
                read_queue_nums=queue_nums,
                write_queue_nums=queue_nums,
                perm=perm,
                topic_sys_flag=topic_sys_flag,
            )
        )

    def take_changed(self) -> set[str]:
        """The topics created or updated since the last call (the name-server registration
        sends only these after a change)."""
        names, self._changed_names = self._changed_names, set()
        return names

    def _changed(self) -> None:
        self.next_version()
        if self.on_change is not None:
            self.on_change()

    def next_version(self, state_version: int | None = None) -> None:
        """A new data version (the name servers re-read the topics); ``state_version``, a
        controller-mode broker's new master epoch, is kept in every later version."""
        previous = self.data_version
        self.data_version = DataVersion(
            timestamp=_now_ms(),
            counter=previous.counter + 1,
            state_version=previous.state_version if state_version is None else state_version,
        )


def _now_ms() -> int:
    return time.time_ns() // 1_000_000
