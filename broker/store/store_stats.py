"""Compiled with mypyc (aiorocketmq/compiled.py, which lists the rules): declared, typed
attributes only; no monkeypatching, setattr or frame tricks; no await in except/finally.

The store's statistics: the counters every put and get moves (:class:`StoreStats`), and
:func:`runtime_info`, the same figures under RocketMQ's runtime-info names.

Apart from the store so that the broker's metrics and runtime info read one small, plain
record; the put and get paths move its counters in place (an attribute each, no call but
:meth:`StoreStats.on_put_latency` once per put).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .commit_log import CommitLog
from .config import StoreConfig
from .index import Index
from .retention import disk_used_ratio

#: Upper bounds (ms, exclusive) of RocketMQ's put-latency buckets; the last is unbounded.
PUT_LATENCY_BUCKETS_MS = (1, 10, 50, 100, 200, 500, 1000, 2000, 3000, 4000, 5000, 10000)
_PUT_LATENCY_BOUNDS_NS = tuple(ms * 1_000_000 for ms in PUT_LATENCY_BUCKETS_MS)
_FIRST_BOUND_NS = _PUT_LATENCY_BOUNDS_NS[0]


@dataclass(slots=True)
class StoreStats:
    """Counters for the broker's runtime info and metrics."""

    put_message_times_total: int = 0
    put_message_size_total: int = 0
    put_message_failures: int = 0
    put_calls: int = 0
    put_latency_total_ns: int = 0
    put_latency_max_ns: int = 0
    #: Puts per latency bucket (:data:`PUT_LATENCY_BUCKETS_MS`, then one for the rest).
    put_latency_buckets: list[int] = field(default_factory=lambda: [0] * (len(PUT_LATENCY_BUCKETS_MS) + 1))
    get_message_times_found: int = 0
    get_message_times_miss: int = 0
    get_message_transferred: int = 0
    #: Fraction of the commit-log disk in use at the last look (-1: not yet known).
    disk_used_ratio: float = -1.0
    #: Puts refused because the disk was full.
    put_refused_disk_full: int = 0
    #: Messages some group (or no group at all) had not consumed when retention deleted their
    #: file, in all and per topic.
    unconsumed_deleted: int = 0
    unconsumed_deleted_by_topic: dict[str, int] = field(default_factory=dict)

    @property
    def put_latency_avg_ms(self) -> float:
        return self.put_latency_total_ns / self.put_calls / 1e6 if self.put_calls else 0.0

    def on_put_latency(self, latency_ns: int) -> None:
        self.put_calls += 1
        self.put_latency_total_ns += latency_ns
        if latency_ns > self.put_latency_max_ns:
            self.put_latency_max_ns = latency_ns
        buckets = self.put_latency_buckets
        if latency_ns < _FIRST_BOUND_NS:
            buckets[0] += 1  # nearly every put
            return
        for i, bound in enumerate(_PUT_LATENCY_BOUNDS_NS[1:], 1):
            if latency_ns < bound:
                buckets[i] += 1
                return
        buckets[-1] += 1


def runtime_info(
    stats: StoreStats, config: StoreConfig, commit_log: CommitLog, index: Index | None, disk_full: bool
) -> dict[str, str]:
    """Store figures under RocketMQ's runtime-info names."""
    ratio = stats.disk_used_ratio
    if ratio < 0:
        ratio = disk_used_ratio(str(config.commit_log_dir))
    return {
        "putMessageTimesTotal": str(stats.put_message_times_total),
        "putMessageSizeTotal": str(stats.put_message_size_total),
        "putMessageFailedTimes": str(stats.put_message_failures),
        "putMessageAverageLatencyMs": f"{stats.put_latency_avg_ms:.3f}",
        "putMessageMaxLatencyMs": f"{stats.put_latency_max_ns / 1e6:.3f}",
        "getMessageTimesTotalFound": str(stats.get_message_times_found),
        "getMessageTimesTotalMiss": str(stats.get_message_times_miss),
        "getMessageTransferedMsgCount": str(stats.get_message_transferred),
        "commitLogMinOffset": str(commit_log.min_offset),
        "commitLogMaxOffset": str(commit_log.max_offset),
        "commitLogDiskRatio": f"{ratio:.4f}",
        "consumeQueueDiskRatio": f"{disk_used_ratio(str(config.root_dir)):.4f}",
        "diskFull": "true" if disk_full else "false",
        "putMessageRefusedDiskFull": str(stats.put_refused_disk_full),
        "unconsumedMessagesDeleted": str(stats.unconsumed_deleted),
        "indexKeysMissed": str(index.missed_keys if index is not None else 0),
        "dispatchBehindBytes": "0",
        "pageCacheLockTimeMills": "0",
    }
