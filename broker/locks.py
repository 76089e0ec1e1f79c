"""Queue locks for orderly consumption: one client per (group, queue), expiring after
``rebalanceLockMaxLiveTime`` (60 s) unless the holder renews it."""

from __future__ import annotations

import time
from collections.abc import Iterable

from aiorocketmq.protocol.body import MessageQueue


class QueueLocks:
    def __init__(self, max_live_ms: int = 60_000) -> None:
        self.max_live = max_live_ms / 1000
        self._locks: dict[str, dict[MessageQueue, tuple[str, float]]] = {}

    def try_lock(self, group: str, queues: Iterable[MessageQueue], client_id: str) -> list[MessageQueue]:
        """Lock what is free, expired or already ours; returns the queues now held by ``client_id``."""
        now = time.monotonic()
        table = self._locks.setdefault(group, {})
        locked = []
        for mq in queues:
            holder = table.get(mq)
            if holder is None or holder[0] == client_id or now - holder[1] > self.max_live:
                table[mq] = (client_id, now)
                locked.append(mq)
        return locked

    def unlock(self, group: str, queues: Iterable[MessageQueue], client_id: str) -> None:
        """Release the queues ``client_id`` holds; locks held by others are left alone."""
        table = self._locks.get(group)
        if not table:
            return
        for mq in queues:
            holder = table.get(mq)
            if holder is not None and holder[0] == client_id:
                del table[mq]
        if not table:
            del self._locks[group]

    def holder(self, group: str, mq: MessageQueue) -> str | None:
        entry = self._locks.get(group, {}).get(mq)
        if entry is None or time.monotonic() - entry[1] > self.max_live:
            return None
        return entry[0]
