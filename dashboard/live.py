"""The live charts' figures: put/get TPS per broker, TPS per topic and lag per consumer group,
sampled every few seconds into short histories that ``/api/live`` serves to the pages' script.

Sampling runs only while someone looks: each ``/api/live`` request keeps it going for
:data:`IDLE_AFTER` seconds more, so an unwatched dashboard puts no load on the cluster. Topic
TPS is the growth of the topic's summed max offsets between two samples (the brokers report no
per-topic rate); broker TPS is what each broker reports for its last 10 seconds. A broker that
does not answer gets a gap (``null``) in its series, not its last rate, so a chart shows it down.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from aiorocketmq.protocol.errors import MQError
from aiorocketmq.protocol.loop import cancel_and_wait, wait_event

from .cluster_access import BrokerRow, ClusterAccess, describe

log = logging.getLogger(__name__)

#: Seconds the sampler keeps going after the last request for figures.
IDLE_AFTER = 60.0
#: Samples kept per series.
HISTORY = 120
#: Topics whose TPS is sampled at most (the first ones by name; system topics never).
MAX_TOPICS = 50


@dataclass
class Series:
    #: (time, value); value None: no figure then (the broker was down).
    points: deque[tuple[float, float | None]] = field(default_factory=lambda: deque(maxlen=HISTORY))

    def add(self, at: float, value: float | None) -> None:
        self.points.append((at, value))

    def to_json(self) -> list[list[float | None]]:
        return [[round(t, 3), v] for t, v in self.points]


@dataclass
class Figures:
    brokers_put: dict[str, Series] = field(default_factory=dict)
    brokers_get: dict[str, Series] = field(default_factory=dict)
    topics: dict[str, Series] = field(default_factory=dict)
    lag: dict[str, Series] = field(default_factory=dict)
    #: The latest lag of every group (None: no offsets yet).
    latest_lag: dict[str, int | None] = field(default_factory=dict)
    brokers_up: dict[str, bool] = field(default_factory=dict)
    error: str | None = None
    sampled_at: float = 0.0


class LiveSampler:
    def __init__(self, ops: ClusterAccess, interval: float = 5.0) -> None:
        self.ops = ops
        self.interval = interval
        self.figures = Figures()
        self._wanted_until = 0.0
        self._wake = asyncio.Event()
        self._sampled = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._offsets: dict[str, tuple[float, int]] = {}

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="mqdashboard-sampler")

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None

    async def wanted(self) -> Figures:
        """Keep sampling for a while; the first request waits for a first sample."""
        idle = time.monotonic() >= self._wanted_until
        self._wanted_until = time.monotonic() + IDLE_AFTER
        if idle:
            self._sampled.clear()
            self._wake.set()
            await wait_event(self._sampled, max(10.0, self.interval * 2))
        return self.figures

    async def _run(self) -> None:
        while True:
            if time.monotonic() >= self._wanted_until:
                self._wake.clear()
                await self._wake.wait()
            started = time.monotonic()
            try:
                await self.sample()
            except Exception as exc:  # the charts show why; the sampler keeps going
                log.warning("sampling failed: %s", describe(exc))
                self.figures.error = describe(exc)
            self._sampled.set()
            await asyncio.sleep(max(0.0, self.interval - (time.monotonic() - started)))

    async def sample(self) -> None:
        figures = self.figures
        at = time.time()
        errors: list[str] = []
        try:
            brokers = await self.ops.brokers()
        except (MQError, OSError) as exc:
            errors.append(f"name server: {describe(exc)}")
            # No name server, no figures: every broker seen before is unknown, drawn as down.
            brokers = [BrokerRow(c, name, i, addr) for addr, (c, name, i) in self.ops.seen_brokers.items()]
        for row in brokers:
            label = f"{row.name}@{row.addr}"
            figures.brokers_up[label] = row.up
            # Down: a gap, never the last rate it reported.
            figures.brokers_put.setdefault(label, Series()).add(at, (row.put_tps or 0.0) if row.up else None)
            figures.brokers_get.setdefault(label, Series()).add(at, (row.get_tps or 0.0) if row.up else None)
        try:
            topics = [t.topic for t in await self.ops.topics(with_routes=False) if t.kind == "normal"]
        except (MQError, OSError) as exc:
            errors.append(f"topics: {describe(exc)}")
            topics = []
        await asyncio.gather(*(self._topic_tps(t, at) for t in topics[:MAX_TOPICS]))
        try:
            groups = await self.ops.group_names()
        except (MQError, OSError) as exc:
            errors.append(f"groups: {describe(exc)}")
            groups = []
        lags = await asyncio.gather(*(self._lag(g) for g in groups))
        figures.latest_lag = dict(zip(groups, lags))
        for group, lag in figures.latest_lag.items():
            if lag is not None:
                figures.lag.setdefault(group, Series()).add(at, float(lag))
        for gone in set(figures.lag) - set(groups):
            del figures.lag[gone]
        for gone in set(figures.topics) - set(topics):
            del figures.topics[gone]
        figures.error = "; ".join(errors) or None
        figures.sampled_at = at

    async def _lag(self, group: str) -> int | None:
        with contextlib.suppress(MQError, OSError):
            return await self.ops.group_lag(group)
        return None

    async def _topic_tps(self, topic: str, at: float) -> None:
        try:
            stats = await self.ops.admin.topic_stats(topic)
        except (MQError, OSError):
            return
        total = sum(o.max_offset for o in stats.values())
        previous = self._offsets.get(topic)
        self._offsets[topic] = (at, total)
        if previous is not None and at > previous[0]:
            tps = max(0, total - previous[1]) / (at - previous[0])
            self.figures.topics.setdefault(topic, Series()).add(at, round(tps, 2))

    def to_json(self) -> dict[str, Any]:
        f = self.figures
        return {
            "sampledAt": f.sampled_at,
            "interval": self.interval,
            "error": f.error,
            "brokerPutTps": {k: s.to_json() for k, s in sorted(f.brokers_put.items())},
            "brokerGetTps": {k: s.to_json() for k, s in sorted(f.brokers_get.items())},
            "brokersUp": dict(sorted(f.brokers_up.items())),
            "topicTps": {k: s.to_json() for k, s in sorted(f.topics.items())},
            "groupLag": {k: s.to_json() for k, s in sorted(f.lag.items())},
            "latestLag": dict(sorted(f.latest_lag.items())),
        }
