"""Compiled with mypyc (aiorocketmq/compiled.py, which lists the rules): declared, typed
attributes only; no monkeypatching, setattr or frame tricks; no await in except/finally.

Running counters the broker keeps for runtime info and metrics: messages and bytes put per
topic, messages got per group and topic; TPS comes from snapshots. Put latency is the store's
(:class:`~aiorocketmq.broker.store.StoreStats`): it times the append once, where it happens."""

from __future__ import annotations

import time
from collections import defaultdict, deque
from dataclasses import dataclass, field
from typing import Any

#: rocketmq-exporter's names for the store's put-latency buckets (``rocketmq_brokeruntime_pmdt_<label>``).
PUT_LATENCY_LABELS = (
    "0ms", "0to10ms", "10to50ms", "50to100ms", "100to200ms", "200to500ms", "500to1s",
    "1to2s", "2to3s", "3to4s", "4to5s", "5to10s", "10stomore",
)  # fmt: skip


@dataclass
class BrokerStats:
    put_messages: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    put_bytes: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    put_failures: int = 0
    got_messages: dict[tuple[str, str], int] = field(default_factory=lambda: defaultdict(int))
    got_bytes: dict[tuple[str, str], int] = field(default_factory=lambda: defaultdict(int))
    #: Requests behind the message counts (RocketMQ's ``times``: messages per request).
    put_times: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    got_times: dict[tuple[str, str], int] = field(default_factory=lambda: defaultdict(int))

    def on_put(self, topic: str, result: Any) -> None:
        if result.ok:
            self.put_messages[topic] += result.msg_count
            self.put_bytes[topic] += result.wrote_bytes
            self.put_times[topic] += 1
        else:
            self.put_failures += 1

    def on_get(self, group: str, topic: str, count: int, size: int) -> None:
        self.got_messages[(group, topic)] += count
        self.got_bytes[(group, topic)] += size
        self.got_times[(group, topic)] += 1

    @property
    def total_put(self) -> int:
        return sum(self.put_messages.values())

    @property
    def total_got(self) -> int:
        return sum(self.got_messages.values())


class TpsSampler:
    """Totals of messages put and got, sampled every second for ten minutes, so runtime info
    can report RocketMQ's ``putTps``/``getTransferedTps`` triples (last 10 s, 1 min, 10 min)."""

    WINDOWS = (10, 60, 600)

    def __init__(self, stats: BrokerStats) -> None:
        self.stats = stats
        self._samples: deque[tuple[float, int, int]] = deque(maxlen=self.WINDOWS[-1] + 1)
        self.sample()

    def sample(self) -> None:
        self._samples.append((time.monotonic(), self.stats.total_put, self.stats.total_got))

    def _rate(self, index: int, seconds: int) -> float:
        now, *totals = time.monotonic(), self.stats.total_put, self.stats.total_got
        for at, put, got in self._samples:
            if now - at <= seconds + 0.5:
                elapsed = now - at
                if elapsed <= 0:
                    return 0.0
                return (totals[index] - (put, got)[index]) / elapsed
        return 0.0

    def put_tps(self) -> str:
        return " ".join(f"{self._rate(0, w):.2f}" for w in self.WINDOWS)

    def get_tps(self) -> str:
        return " ".join(f"{self._rate(1, w):.2f}" for w in self.WINDOWS)
