"""What the master and slave sides use of the replication that owns them, as protocols, so
that neither imports the package that builds them; and the replication's settings."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Protocol

from aiorocketmq.broker.store import MessageStore

from ..security import HaSecurity
from .epoch import EpochFileCache


@dataclass
class AutoSwitchSettings:
    """Apache's controller-mode replication keys (``MessageStoreConfig``); each is read from
    the store settings, then the broker settings, when they have it."""

    all_ack_in_sync_state_set: bool = False
    in_sync_replicas: int = 1
    min_in_sync_replicas: int = 1
    ha_max_time_slave_not_catchup: int = 15_000
    sync_from_last_file: bool = False
    async_learner: bool = False

    @classmethod
    def from_configs(cls, *configs: object) -> AutoSwitchSettings:
        settings = cls()
        for item in fields(cls):
            for config in configs:
                value = getattr(config, item.name, None)
                if value is not None:
                    setattr(settings, item.name, value)
                    break
        return settings


class Owner(Protocol):
    """The replication as the master side sees it."""

    store: MessageStore
    settings: AutoSwitchSettings
    security: HaSecurity
    epochs: EpochFileCache
    local_broker_id: int
    on_sync_state_set_expand: Callable[[set[int]], None] | None
    on_sync_state_set_shrink: Callable[[set[int]], None] | None


class ConfirmKeeper(Protocol):
    """The master side's confirm offset, as a slave keeps it from its master's."""

    stored_confirm: int

    def lower_confirm(self, offset: int) -> None: ...


class SlaveOwner(Owner, Protocol):
    """The replication as the slave side sees it."""

    @property
    def master_side(self) -> ConfirmKeeper: ...
