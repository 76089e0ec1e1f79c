"""Per-topic and per-group message counters over the last minute, hour and day, as RocketMQ's
broker keeps them for VIEW_BROKER_STATS_DATA (``mqadmin statsAll``) and the per-group consume
TPS of GET_BROKER_CONSUME_STATS.

The running totals live in :class:`~broker.stats.BrokerStats`; this module samples them in
three tiers (every 10 s for a minute, every 10 min for an hour, every hour for a day), so a
window's sum is the live total minus the oldest sample inside the window.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from .stats import BrokerStats

#: RocketMQ's stats names (``BrokerStatsManager``) and how their keys are formed.
TOPIC_PUT_NUMS = "TOPIC_PUT_NUMS"
TOPIC_PUT_SIZE = "TOPIC_PUT_SIZE"
GROUP_GET_NUMS = "GROUP_GET_NUMS"
GROUP_GET_SIZE = "GROUP_GET_SIZE"

SAMPLE_INTERVAL = 10.0
#: (window seconds, samples between two entries of the tier)
_TIERS = ((60, 1), (3600, 60), (86400, 360))


@dataclass(frozen=True, slots=True)
class Window:
    """One counter over one window: its sum, rate per second, and sum per request."""

    sum: int
    tps: float
    avgpt: float


Snapshot = dict[str, dict[str, tuple[int, int]]]


class StatsHistory:
    """Samples of every counter; :meth:`sample` runs every :data:`SAMPLE_INTERVAL` seconds."""

    def __init__(self, stats: BrokerStats, clock: Callable[[], float] = time.monotonic) -> None:
        self.stats = stats
        self.clock = clock
        self._ticks = 0
        #: Totals put and got at the last two local midnights (RocketMQ's ``...TodayMorning``
        #: and ``...YesterdayMorning``): 0 until the broker has seen a midnight, as there.
        self.today_morning = (0, 0)
        self.yesterday_morning = (0, 0)
        self._day = time.localtime().tm_yday
        self._tiers: list[deque[tuple[float, Snapshot]]] = [
            deque(maxlen=window // (int(SAMPLE_INTERVAL) * every) + 2) for window, every in _TIERS
        ]
        self.sample()

    def current(self) -> Snapshot:
        """Every stats name -> key -> (value, requests) now."""
        s = self.stats
        return {
            TOPIC_PUT_NUMS: {t: (n, s.put_times.get(t, 0)) for t, n in s.put_messages.items()},
            TOPIC_PUT_SIZE: {t: (n, s.put_times.get(t, 0)) for t, n in s.put_bytes.items()},
            GROUP_GET_NUMS: {
                f"{topic}@{group}": (n, s.got_times.get((group, topic), 0))
                for (group, topic), n in s.got_messages.items()
            },
            GROUP_GET_SIZE: {
                f"{topic}@{group}": (n, s.got_times.get((group, topic), 0))
                for (group, topic), n in s.got_bytes.items()
            },
        }

    def sample(self) -> None:
        now, snapshot = self.clock(), self.current()
        day = time.localtime().tm_yday
        if day != self._day:
            self._day = day
            self.yesterday_morning = self.today_morning
            self.today_morning = (self.stats.total_put, self.stats.total_got)
        for tier, (_, every) in zip(self._tiers, _TIERS):
            if self._ticks % every == 0:
                tier.append((now, snapshot))
        self._ticks += 1

    def known(self, name: str, key: str) -> bool:
        return key in self.current().get(name, {})

    def window(self, name: str, key: str, tier: int) -> Window:
        """``name``/``key`` over tier 0 (minute), 1 (hour) or 2 (day)."""
        now, current = self.clock(), self.current()
        value, times = current.get(name, {}).get(key, (0, 0))
        span = _TIERS[tier][0]
        start_at, start_value, start_times = now, value, times
        for at, snapshot in self._tiers[tier]:
            if now - at <= span + SAMPLE_INTERVAL:
                start_at = at
                start_value, start_times = snapshot.get(name, {}).get(key, (0, 0))
                break
        total = value - start_value
        elapsed = now - start_at
        calls = times - start_times
        return Window(
            sum=total,
            tps=total / elapsed if elapsed > 0 else 0.0,
            avgpt=total / calls if calls > 0 else 0.0,
        )
