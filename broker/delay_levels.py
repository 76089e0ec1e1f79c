"""Delay levels: how a message that asks for a delay level is parked in
``SCHEDULE_TOPIC_XXXX`` until it is due.

A level ``n`` message waits in queue ``n - 1`` of the schedule topic (one queue per level, so
each queue is FIFO with one delay); its consume-queue tags slot holds its delivery time, and
``REAL_TOPIC``/``REAL_QID`` remember where it goes (:mod:`.parked`, shared with timer messages,
says which messages may wait and records that). The store rebuilds the same delivery time
when it recovers the schedule topic's consume queues; :mod:`.delay` delivers due messages.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from aiorocketmq.protocol.message import PropertyKey
from aiorocketmq.protocol.names import SCHEDULE_TOPIC

from .parked import now_ms, parkable, remember_real_queue

_DELAY = PropertyKey.DELAY_TIME_LEVEL


class Parked(NamedTuple):
    """Where a delayed message is stored instead of its own topic and queue."""

    topic: str
    queue_id: int
    store_timestamp: int
    deliver_at: int


class DelayLevels:
    """The configured delays (``messageDelayLevel``), level ``n`` at index ``n - 1``."""

    def __init__(self, delays_ms: Sequence[int]) -> None:
        self.delays = list(delays_ms)

    def __len__(self) -> int:
        return len(self.delays)

    def park(self, topic: str, queue_id: int, properties: dict[str, str], sys_flag: int) -> Parked | None:
        """Divert a message with a delay level to the schedule topic: records its real topic
        and queue in ``properties`` and says where it goes; ``None`` when no delay applies."""
        delay = properties.get(_DELAY)
        if not delay or not parkable(topic, sys_flag):
            return None
        try:
            level = int(delay)
        except ValueError:
            return None
        if level <= 0:
            return None
        # Levels past the last one wait as long as the last one.
        level = min(level, len(self.delays))
        remember_real_queue(properties, topic, queue_id)
        # The store keeps this time, so recovery finds the same delivery time again.
        now = now_ms()
        return Parked(SCHEDULE_TOPIC, level - 1, now, now + self.delays[level - 1])
