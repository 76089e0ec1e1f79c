"""Consumer-group monitors: per group, a minimum number of online consumers and a maximum total
lag, kept in ``monitors.json`` in the dashboard's ``--data-dir`` and checked after every
collector round (:mod:`.history`). A group whose figures breach a threshold is in alarm: the
groups and group pages say so, and the log gets one WARNING naming the group and the threshold
when the alarm starts and one when it clears. Apache's old dashboard had the same monitor
(``/monitor/*``).

A figure the cluster did not give (a broker down, the name server silent) changes no alarm:
the monitor cannot tell, so the state stays what it was until the next good reading.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

from aiorocketmq.protocol.errors import BrokerError, ClientError, MQError

from .cluster_access import ClusterAccess, describe

log = logging.getLogger(__name__)

MIN_CONSUMERS = "min_consumers"
MAX_LAG = "max_lag"


@dataclass
class Thresholds:
    """A group's limits; None: that one is not checked."""

    min_consumers: int | None = None
    max_lag: int | None = None

    @property
    def empty(self) -> bool:
        return self.min_consumers is None and self.max_lag is None


def breaches(limits: Thresholds, consumers: int | None, lag: int | None) -> dict[str, str | None]:
    """Each threshold that could be checked, with what breaches it (None: within it).
    ``consumers`` or ``lag`` None: not known this time, so that threshold is left out."""
    found: dict[str, str | None] = {}
    if limits.min_consumers is not None and consumers is not None:
        found[MIN_CONSUMERS] = (
            f"{consumers} consumers online, fewer than the minimum {limits.min_consumers}"
            if consumers < limits.min_consumers
            else None
        )
    if limits.max_lag is not None and lag is not None:
        found[MAX_LAG] = f"lag {lag}, above the maximum {limits.max_lag}" if lag > limits.max_lag else None
    return found


def load_thresholds(path: Path) -> dict[str, Thresholds]:
    if not path.exists():
        return {}
    doc = json.loads(path.read_text(encoding="utf-8"))
    return {
        str(group): Thresholds(
            None if v.get(MIN_CONSUMERS) is None else int(v[MIN_CONSUMERS]),
            None if v.get(MAX_LAG) is None else int(v[MAX_LAG]),
        )
        for group, v in doc.items()
    }


def save_thresholds(path: Path, thresholds: dict[str, Thresholds]) -> None:
    """Written whole to a temporary file and renamed over the old one, so a crash leaves
    either the old settings or the new ones."""
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {
        group: {MIN_CONSUMERS: t.min_consumers, MAX_LAG: t.max_lag} for group, t in sorted(thresholds.items())
    }
    partial = path.with_name(path.name + ".tmp")
    partial.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    os.replace(partial, path)


class GroupMonitor:
    """The thresholds of every monitored group and which of them are breached now."""

    def __init__(self, ops: ClusterAccess, path: Path) -> None:
        self.ops = ops
        self.path = path
        self.thresholds: dict[str, Thresholds] = {}
        #: group -> threshold -> what breaches it.
        self.alarms: dict[str, dict[str, str]] = {}
        self.checked_at: float | None = None
        self.load_error: str | None = None
        try:
            self.thresholds = load_thresholds(path)
        except (OSError, ValueError, TypeError, AttributeError) as exc:
            self.load_error = f"{path}: {describe(exc)}"
            log.warning("group monitor settings not read from %s", self.load_error)

    def limits(self, group: str) -> Thresholds:
        return self.thresholds.get(group, Thresholds())

    def set(self, group: str, limits: Thresholds) -> None:
        """Save ``group``'s thresholds (both None: stop monitoring it)."""
        updated = dict(self.thresholds)
        if limits.empty:
            updated.pop(group, None)
        else:
            updated[group] = limits
        save_thresholds(self.path, updated)
        self.thresholds = updated
        # A threshold no longer set can no longer be in alarm.
        held = self.alarms.get(group, {})
        for name in list(held):
            if getattr(limits, name) is None:
                log.warning("consumer group %s: alarm cleared, %s is no longer monitored", group, name)
                del held[name]
        if not held:
            self.alarms.pop(group, None)

    def update(self, group: str, found: dict[str, str | None]) -> None:
        """Record one check's outcome, logging each alarm that starts or clears."""
        held = self.alarms.setdefault(group, {})
        for name, breach in found.items():
            if breach is not None and name not in held:
                log.warning("consumer group %s in alarm: %s", group, breach)
                held[name] = breach
            elif breach is not None:
                held[name] = breach  # still in alarm: the figure may have moved, no new line
            elif name in held:
                del held[name]
                log.warning("consumer group %s: alarm cleared, %s is within its threshold", group, name)
        if not held:
            del self.alarms[group]

    async def check(self) -> None:
        await asyncio.gather(*(self.check_group(group) for group in list(self.thresholds)))
        self.checked_at = time.time()

    async def check_group(self, group: str) -> None:
        limits = self.thresholds.get(group)
        if limits is None:
            return
        consumers = await self._consumers(group) if limits.min_consumers is not None else None
        lag = await self._lag(group) if limits.max_lag is not None else None
        if self.thresholds.get(group) is not limits:
            return  # changed or cleared while this check waited: its outcome is for old limits
        self.update(group, breaches(limits, consumers, lag))

    async def _consumers(self, group: str) -> int | None:
        try:
            return len((await self.ops.admin.consumer_connections(group)).connection_set)
        except ClientError as exc:
            # Every master answered that the group is not online there: none online. Raised
            # without a broker's answer behind it (no route, no master), it is no figure.
            return 0 if isinstance(exc.__cause__, BrokerError) else None
        except (MQError, OSError):
            return None

    async def _lag(self, group: str) -> int | None:
        try:
            lag = await self.ops.group_lag(group)
        except (MQError, OSError):
            return None
        return lag or 0  # None: no offsets anywhere, so nothing is behind
