"""Subscription group configs (retry queues, max retries, consume switches) and
``config/subscriptionGroup.json``; groups are created on first sight when
``autoCreateSubscriptionGroup`` is on."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from aiorocketmq.protocol.body import DataVersion, SubscriptionGroupConfig, SubscriptionGroupWrapper
from aiorocketmq.protocol.names import SYSTEM_GROUPS

from .config import BrokerConfig
from .config_files import ConfigFile

log = logging.getLogger(__name__)


class GroupTable:
    def __init__(self, config: BrokerConfig, on_change: Callable[[], None] | None = None) -> None:
        self.config = config
        self.file = ConfigFile(config.config_dir / "subscriptionGroup.json")
        self.groups: dict[str, SubscriptionGroupConfig] = {}
        #: RocketMQ 5's group forbidden table: per group and topic, bits of what is forbidden.
        self.forbidden: dict[str, dict[str, int]] = {}
        self.data_version = DataVersion(timestamp=time.time_ns() // 1_000_000)
        self.on_change = on_change

    def load(self) -> None:
        raw = self.file.load()
        if raw is not None:
            wrapper = SubscriptionGroupWrapper.model_validate(raw)
            self.groups.update(wrapper.subscription_group_table)
            self.forbidden = {g: dict(t) for g, t in wrapper.forbidden_table.items()}
            self.data_version = wrapper.data_version
        for name in SYSTEM_GROUPS:
            self.groups.setdefault(name, SubscriptionGroupConfig(group_name=name))

    def encode(self) -> bytes:
        return SubscriptionGroupWrapper(
            subscription_group_table=dict(self.groups),
            forbidden_table={g: dict(t) for g, t in self.forbidden.items()},
            data_version=self.data_version,
        ).encode()

    def get(self, group: str) -> SubscriptionGroupConfig | None:
        return self.groups.get(group)

    def find(self, group: str) -> SubscriptionGroupConfig | None:
        """The group's config, auto-created when the broker allows it."""
        found = self.groups.get(group)
        if found is None and self.config.auto_create_subscription_group:
            found = self.put(SubscriptionGroupConfig(group_name=group))
        return found

    def put(self, group: SubscriptionGroupConfig) -> SubscriptionGroupConfig:
        self.groups[group.group_name] = group
        self._changed()
        log.info("subscription group %s updated", group.group_name)
        return group

    def delete(self, group: str) -> bool:
        if self.groups.pop(group, None) is None:
            return False
        self._changed()
        log.info("subscription group %s deleted", group)
        return True

    def is_forbidden(self, group: str, topic: str, bit: int) -> bool:
        return bool(self.forbidden.get(group, {}).get(topic, 0) & (1 << bit))

    def set_forbidden(self, group: str, topic: str, bit: int, forbidden: bool) -> None:
        """Forbid (or allow again) one permission of a group on a topic (Apache 5's
        UPDATE_AND_GET_GROUP_FORBIDDEN; read is bit 2)."""
        topics = self.forbidden.setdefault(group, {})
        value = topics.get(topic, 0)
        value = value | (1 << bit) if forbidden else value & ~(1 << bit)
        if value:
            topics[topic] = value
        else:
            topics.pop(topic, None)
            if not topics:
                del self.forbidden[group]
        self._changed()
        log.info("group %s %s on topic %s", group, "forbidden" if forbidden else "allowed", topic)

    def _changed(self) -> None:
        self.data_version = DataVersion(
            timestamp=time.time_ns() // 1_000_000, counter=self.data_version.counter + 1
        )
        if self.on_change is not None:
            self.on_change()
