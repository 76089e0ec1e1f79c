"""What the replicas manager drives: the auto-switch replication and the broker's side of a
role change."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from aiorocketmq.protocol.controller import EpochEntry


class AutoSwitch(Protocol):
    """What this manager uses of the auto-switch replication (``AutoSwitchReplication``)."""

    local_broker_id: int
    on_sync_state_set_expand: Callable[[set[int]], None] | None

    async def start(self, host: str) -> None: ...

    async def stop(self) -> None: ...

    async def change_to_master(self, master_epoch: int) -> None: ...

    async def change_to_slave(
        self, master_ha_address: str, master_epoch: int, master_broker_id: int
    ) -> None: ...

    def set_sync_state_set(self, ids: set[int]) -> None: ...

    def maybe_shrink_sync_state_set(self) -> set[int]: ...

    def confirm_offset(self) -> int: ...

    @property
    def last_epoch(self) -> int: ...

    def epoch_entries(self) -> list[EpochEntry]: ...

    def ha_status(self) -> dict[str, object]: ...

    def runtime_info(self) -> dict[str, str]: ...


class RoleSwitch(Protocol):
    """The broker's side of a role change (``HighAvailability`` plus the broker's services)."""

    @property
    def auto(self) -> AutoSwitch: ...

    def commit_log_max_offset(self) -> int: ...

    async def become_master(self, master_epoch: int) -> None:
        """Take writes, from ``master_epoch`` on (the replication switched first)."""

    async def become_slave(self, master_addr: str, master_epoch: int, master_broker_id: int) -> None:
        """Refuse writes and copy from the master at ``master_addr`` (its remoting address)."""

    async def role_changed(self) -> None:
        """After either change: the services that follow the role, the name servers."""
