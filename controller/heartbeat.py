"""Broker liveness as a controller replica sees it (Apache's ``DefaultBrokerHeartbeatManager``).

Kept in memory on each replica, not replicated: a broker is alive while its last
BROKER_HEARTBEAT is younger than the timeout it announced (``heartbeatTimeoutMills``, 10 s when
absent). :meth:`BrokerHeartbeatManager.scan` drops the expired ones and closes their
connections; a closed connection drops its broker at once. Both report the lost brokers so
that the leader can elect a new master when one of them was a master.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: Apache's ``BrokerHeartbeatManager.DEFAULT_BROKER_CHANNEL_EXPIRED_TIME``.
DEFAULT_BROKER_CHANNEL_EXPIRED_TIME = 10_000
#: The election priority of a broker that announced none (Java's ``Integer.MAX_VALUE``).
LOWEST_PRIORITY = (1 << 31) - 1

BrokerIdentity = tuple[str, str, int]  # cluster, broker name, broker id


@dataclass
class BrokerLiveInfo:
    broker_name: str
    broker_addr: str
    broker_id: int
    last_update_timestamp: int
    heartbeat_timeout_millis: int
    channel: Any
    epoch: int
    max_offset: int
    election_priority: int
    confirm_offset: int = -1


def _millis() -> int:
    return int(time.time() * 1000)


class BrokerHeartbeatManager:
    """The brokers' last heartbeats, by (cluster, broker name, broker id)."""

    def __init__(self, clock: Callable[[], int] = _millis) -> None:
        self.clock = clock
        self.table: dict[BrokerIdentity, BrokerLiveInfo] = {}

    def on_heartbeat(
        self,
        cluster: str,
        broker_name: str,
        broker_addr: str,
        broker_id: int,
        timeout_millis: int | None = None,
        channel: Any = None,
        epoch: int | None = None,
        max_offset: int | None = None,
        confirm_offset: int | None = None,
        election_priority: int | None = None,
    ) -> bool:
        """Record a heartbeat; True when the broker was not known as alive before."""
        key = (cluster, broker_name, broker_id)
        real_epoch = -1 if epoch is None else epoch
        real_offset = -1 if max_offset is None else max_offset
        real_confirm = -1 if confirm_offset is None else confirm_offset
        real_timeout = DEFAULT_BROKER_CHANNEL_EXPIRED_TIME if timeout_millis is None else timeout_millis
        real_priority = LOWEST_PRIORITY if election_priority is None else election_priority
        now = self.clock()
        prev = self.table.get(key)
        if prev is None:
            self.table[key] = BrokerLiveInfo(
                broker_name,
                broker_addr,
                broker_id,
                now,
                real_timeout,
                channel,
                real_epoch,
                real_offset,
                real_priority,
                real_confirm,
            )
            return True
        # As Apache: the address and channel of the first heartbeat stay.
        prev.last_update_timestamp = now
        prev.heartbeat_timeout_millis = real_timeout
        prev.election_priority = real_priority
        if real_epoch > prev.epoch or (real_epoch == prev.epoch and real_offset > prev.max_offset):
            prev.epoch = real_epoch
            prev.max_offset = real_offset
            prev.confirm_offset = real_confirm
        return False

    def is_active(self, cluster: str, broker_name: str, broker_id: int) -> bool:
        info = self.table.get((cluster, broker_name, broker_id))
        return info is not None and info.last_update_timestamp + info.heartbeat_timeout_millis >= self.clock()

    def live_info(self, cluster: str, broker_name: str, broker_id: int) -> BrokerLiveInfo | None:
        return self.table.get((cluster, broker_name, broker_id))

    def scan(self) -> list[tuple[BrokerIdentity, BrokerLiveInfo]]:
        """Drop the brokers silent for longer than their timeout; returns them."""
        now = self.clock()
        expired = [
            (key, info)
            for key, info in self.table.items()
            if now - info.last_update_timestamp > info.heartbeat_timeout_millis
        ]
        for key, _ in expired:
            del self.table[key]
        return expired

    def on_channel_closed(self, channel: Any) -> tuple[BrokerIdentity, BrokerLiveInfo] | None:
        """A broker's connection closed: it is no longer alive (as Apache, the first broker
        found on that connection)."""
        for key, info in self.table.items():
            if info.channel is channel:
                del self.table[key]
                return key, info
        return None

    def active_brokers_num(self) -> dict[str, dict[str, int]]:
        counts: dict[str, dict[str, int]] = {}
        for cluster, broker_name, broker_id in self.table:
            if self.is_active(cluster, broker_name, broker_id):
                per = counts.setdefault(cluster, {})
                per[broker_name] = per.get(broker_name, 0) + 1
        return counts
