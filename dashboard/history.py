"""The TPS history by day: a collector inside the dashboard process samples, every
``--collect-interval`` seconds (60), each broker's put/get TPS and each topic's put TPS and
appends one JSON line to that day's file in ``--data-dir``; the ``/history`` page reads a day
back for its charts and its top-10 topics. Apache's rocketmq-dashboard keeps the same figures
(its collector task writes a file per day under ``rocketmq.config.dataPath``); this is our own
format.

One file per local day, ``tps-YYYY-MM-DD.jsonl``, one line per sample::

    {"t": 1765030000.0,
     "brokers": {"broker-a@10.0.0.1:10911": [12.5, 3.0], "broker-b@10.0.0.2:10911": null},
     "topics": {"Orders": [0.52, 31]},
     "error": null}

``brokers`` maps ``NAME@ADDR`` to ``[put TPS, get TPS]``, or ``null`` when the broker did not
answer (a down broker is recorded as down, never as the last rate it reported). ``topics`` maps a
topic to ``[put TPS, messages stored since the previous sample]`` (the growth of its summed max
offsets, as the live charts compute it), or ``null`` when its brokers did not answer; a topic
appears from the second sample on, once there is a previous one to compare with. ``error`` says
what could not be read (the name server, the topic list). A line cut short by a crash is
skipped when the day is read back. Files older than ``--history-days`` are removed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

from aiorocketmq.protocol.errors import MQError
from aiorocketmq.protocol.loop import cancel_and_wait

from .cluster_access import ClusterAccess, describe

log = logging.getLogger(__name__)

FILE_PATTERN = re.compile(r"^tps-(\d{4}-\d{2}-\d{2})\.jsonl$")
#: Topics in a day's top list.
TOP = 10


def day_file(directory: Path, day: date) -> Path:
    return directory / f"tps-{day.isoformat()}.jsonl"


@dataclass
class Sample:
    """One collector round: what each broker and topic did."""

    at: float
    #: ``NAME@ADDR`` -> (put TPS, get TPS); None: the broker did not answer.
    brokers: dict[str, tuple[float, float] | None] = field(default_factory=dict)
    #: topic -> (put TPS, messages since the previous sample); None: no figure.
    topics: dict[str, tuple[float, int] | None] = field(default_factory=dict)
    error: str | None = None

    def to_line(self) -> str:
        return json.dumps(
            {
                "t": round(self.at, 3),
                "brokers": {k: None if v is None else list(v) for k, v in sorted(self.brokers.items())},
                "topics": {k: None if v is None else list(v) for k, v in sorted(self.topics.items())},
                "error": self.error,
            },
            separators=(",", ":"),
        )

    @classmethod
    def from_line(cls, line: str) -> Sample:
        """A sample from its line; ValueError when the line is not one (cut short, edited)."""
        try:
            doc = json.loads(line)
            brokers = {
                str(k): None if v is None else (float(v[0]), float(v[1])) for k, v in doc["brokers"].items()
            }
            topics = {
                str(k): None if v is None else (float(v[0]), int(v[1])) for k, v in doc["topics"].items()
            }
            return cls(float(doc["t"]), brokers, topics, doc.get("error"))
        except (json.JSONDecodeError, KeyError, TypeError, IndexError, AttributeError) as exc:
            raise ValueError(f"not a history line: {exc}") from None


@dataclass
class DayHistory:
    """A day read back: series for the charts (``[[t, value or None], ...]``, as ``/api/live``
    serves them) and the day's message count per topic."""

    day: date
    samples: int = 0
    skipped: int = 0
    first: float | None = None
    last: float | None = None
    broker_put: dict[str, list[list[float | None]]] = field(default_factory=dict)
    broker_get: dict[str, list[list[float | None]]] = field(default_factory=dict)
    topic_tps: dict[str, list[list[float | None]]] = field(default_factory=dict)
    messages: dict[str, int] = field(default_factory=dict)
    errors: int = 0

    def add(self, sample: Sample) -> None:
        self.samples += 1
        self.first = sample.at if self.first is None else min(self.first, sample.at)
        self.last = sample.at if self.last is None else max(self.last, sample.at)
        if sample.error:
            self.errors += 1
        for label, rates in sample.brokers.items():
            self.broker_put.setdefault(label, []).append([sample.at, None if rates is None else rates[0]])
            self.broker_get.setdefault(label, []).append([sample.at, None if rates is None else rates[1]])
        for topic, figure in sample.topics.items():
            self.topic_tps.setdefault(topic, []).append([sample.at, None if figure is None else figure[0]])
            if figure is not None:
                self.messages[topic] = self.messages.get(topic, 0) + figure[1]

    def top(self, n: int = TOP) -> list[tuple[str, int]]:
        """The ``n`` topics that stored the most messages that day, most first."""
        return sorted(self.messages.items(), key=lambda item: (-item[1], item[0]))[:n]


class HistoryStore:
    """The day files in one folder: append, read a day back, list the days, drop old ones."""

    def __init__(self, directory: Path, keep_days: int = 7) -> None:
        self.directory = directory
        self.keep_days = keep_days

    def append(self, sample: Sample) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        day = datetime.fromtimestamp(sample.at).date()
        with day_file(self.directory, day).open("a", encoding="utf-8") as out:
            out.write(sample.to_line() + "\n")

    def days(self) -> list[date]:
        """The days with a file, newest first."""
        if not self.directory.is_dir():
            return []
        found = []
        for path in self.directory.iterdir():
            match = FILE_PATTERN.match(path.name)
            if match:
                with contextlib.suppress(ValueError):
                    found.append(date.fromisoformat(match.group(1)))
        return sorted(found, reverse=True)

    def read(self, day: date) -> DayHistory:
        history = DayHistory(day)
        path = day_file(self.directory, day)
        if not path.exists():
            return history
        with path.open(encoding="utf-8", errors="replace") as lines:
            for line in lines:
                if not line.strip():
                    continue
                try:
                    history.add(Sample.from_line(line))
                except ValueError:
                    history.skipped += 1
        return history

    def prune(self, today: date) -> list[Path]:
        """Remove the day files older than ``keep_days`` days before ``today`` (today's is
        day 1); other files in the folder are left alone. Returns the removed paths."""
        oldest = today - timedelta(days=self.keep_days - 1)
        removed = []
        for day in self.days():
            if day < oldest:
                path = day_file(self.directory, day)
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
                    removed.append(path)
        return removed


class Collector:
    """Samples the cluster every ``interval`` seconds into a :class:`HistoryStore`, whether or
    not a page is open, and after each sample runs ``after_sample`` (the group monitor's
    check). A cluster that does not answer is recorded as such; nothing here stops the
    dashboard: a failed round is logged and the next one comes on time."""

    def __init__(
        self,
        ops: ClusterAccess,
        store: HistoryStore,
        interval: float = 60.0,
        after_sample: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.ops = ops
        self.store = store
        self.interval = interval
        self.after_sample = after_sample
        #: Set after every round (tests and the page's status line use it).
        self.sampled = asyncio.Event()
        self.rounds = 0
        self.last_error: str | None = None
        self._offsets: dict[str, tuple[float, int]] = {}
        self._task: asyncio.Task[None] | None = None
        self._pruned_on: date | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="mqdashboard-collector")

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None

    async def _run(self) -> None:
        while True:
            started = time.monotonic()
            await self.round()
            await asyncio.sleep(max(0.0, self.interval - (time.monotonic() - started)))

    async def round(self) -> None:
        """One sample written (and the day's pruning, once a day), then ``after_sample``."""
        try:
            sample = await self.sample()
            await asyncio.to_thread(self._write, sample)
            self.last_error = sample.error
        except Exception as exc:  # a full disk or a bug: logged; the next round tries again
            log.warning("history sample not written: %s", describe(exc))
            self.last_error = describe(exc)
        if self.after_sample is not None:
            try:
                await self.after_sample()
            except Exception as exc:
                log.warning("group monitor check failed: %s", describe(exc))
        self.rounds += 1
        self.sampled.set()
        self.sampled.clear()

    def _write(self, sample: Sample) -> None:
        self.store.append(sample)
        today = datetime.fromtimestamp(sample.at).date()
        if self._pruned_on != today:
            for path in self.store.prune(today):
                log.info("removed history file %s (older than %d days)", path.name, self.store.keep_days)
            self._pruned_on = today

    async def sample(self) -> Sample:
        sample = Sample(time.time())
        errors: list[str] = []
        try:
            rows = await self.ops.brokers()
            for row in rows:
                rates = (row.put_tps or 0.0, row.get_tps or 0.0)
                sample.brokers[f"{row.name}@{row.addr}"] = rates if row.up else None
        except (MQError, OSError) as exc:
            errors.append(f"name server: {describe(exc)}")
            # Every broker seen before is down as far as this sample knows.
            for addr, (_, name, _) in self.ops.seen_brokers.items():
                sample.brokers[f"{name}@{addr}"] = None
        try:
            topics = [t.topic for t in await self.ops.topics(with_routes=False) if t.kind == "normal"]
        except (MQError, OSError) as exc:
            errors.append(f"topics: {describe(exc)}")
            topics = []
        limit = asyncio.Semaphore(8)

        async def one(topic: str) -> None:
            async with limit:
                figure = await self._topic(topic, sample.at)
            if figure is not False:
                sample.topics[topic] = figure

        await asyncio.gather(*(one(t) for t in topics))
        for gone in set(self._offsets) - set(topics):
            del self._offsets[gone]
        sample.error = "; ".join(errors) or None
        return sample

    async def _topic(self, topic: str, at: float) -> tuple[float, int] | Literal[False] | None:
        """(TPS, messages) since the previous sample; None: no figure now; False: nothing to
        compare with yet (the topic's first sample)."""
        try:
            stats = await self.ops.admin.topic_stats(topic)
        except (MQError, OSError):
            return None if topic in self._offsets else False
        total = sum(o.max_offset for o in stats.values())
        previous = self._offsets.get(topic)
        self._offsets[topic] = (at, total)
        if previous is None or at <= previous[0]:
            return False
        added = max(0, total - previous[1])
        return round(added / (at - previous[0]), 2), added

    def status(self) -> dict[str, Any]:
        return {"interval": self.interval, "rounds": self.rounds, "error": self.last_error}
