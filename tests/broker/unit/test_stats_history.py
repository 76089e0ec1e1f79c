"""The broker's counters over the last minute, hour and day (VIEW_BROKER_STATS_DATA), on a
controlled clock."""

from __future__ import annotations

import pytest

from aiorocketmq.broker.stats import BrokerStats
from aiorocketmq.broker.stats_history import GROUP_GET_NUMS, TOPIC_PUT_NUMS, StatsHistory


class Put:
    ok = True

    def __init__(self, count: int, size: int) -> None:
        self.msg_count = count
        self.wrote_bytes = size


def test_windows_count_from_the_oldest_sample_inside_them() -> None:
    now = [1000.0]
    stats = BrokerStats()
    history = StatsHistory(stats, clock=lambda: now[0])
    stats.on_put("T", Put(4, 400))  # one request of 4 messages
    for _ in range(6 * 5):  # five minutes of 10 s samples
        now[0] += 10
        history.sample()
    stats.on_put("T", Put(1, 100))
    stats.on_put("T", Put(1, 100))
    stats.on_get("g", "T", 3, 300)
    now[0] += 5
    minute = history.window(TOPIC_PUT_NUMS, "T", 0)
    # The last minute saw the two late single-message puts only.
    assert (minute.sum, minute.avgpt) == (2, 1.0)
    assert minute.tps == pytest.approx(2 / 65, rel=0.01)
    hour = history.window(TOPIC_PUT_NUMS, "T", 1)
    assert (hour.sum, hour.avgpt) == (6, 2.0)  # 6 messages in 3 requests since the start
    assert history.window(GROUP_GET_NUMS, "T@g", 2).sum == 3
    assert history.known(GROUP_GET_NUMS, "T@g") and not history.known(GROUP_GET_NUMS, "T@other")
    assert history.window(TOPIC_PUT_NUMS, "nothing", 0).sum == 0
