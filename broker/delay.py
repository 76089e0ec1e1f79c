"""Delayed delivery: messages with a delay level wait in ``SCHEDULE_TOPIC_XXXX`` (queue
``level - 1``, consume-queue tags slot = delivery time; see :mod:`.delay_levels`) and are
released to their real topic and queue when due. One task per level; progress is persisted
to ``config/delayOffset.json``.

Each level's queue is FIFO with one delay, so entries become due in order: a level's task
sleeps until its head entry is due, and waits for an arrival when the queue is empty. What
this module owns is that schedule and its progress; releasing a due message (and the
``DELAY`` property it loses) is :mod:`.parked`'s, shared with timer messages.
"""

from __future__ import annotations

import asyncio
import logging

from aiorocketmq.broker.store import MessageStore
from aiorocketmq.protocol.body import DelayOffsetTable
from aiorocketmq.protocol.message import PropertyKey
from aiorocketmq.protocol.names import SCHEDULE_TOPIC

from .config import BrokerConfig
from .config_files import ConfigFile, Saver
from .parked import ParkedKind, ParkedMessages, now_ms
from .writer import MessageWriter

log = logging.getLogger(__name__)

BATCH = 32
RETRY_AFTER_FAILURE = 10.0
#: A delivered message keeps ``REAL_TOPIC``/``REAL_QID``, as Apache's schedule service leaves them.
_KIND = ParkedKind(
    noun="delayed message",
    verb="delivering",
    log=log,
    removed=(PropertyKey.DELAY_TIME_LEVEL,),
    refuse_half_topic=True,
)


class DelayService(ParkedMessages):
    def __init__(self, config: BrokerConfig, *, store: MessageStore, writer: MessageWriter) -> None:
        super().__init__(store, writer, _KIND)
        self.config = config
        self.delays = writer.delay_levels.delays
        self.offsets: dict[int, int] = {}
        self.file = ConfigFile(config.config_dir / "delayOffset.json")
        self._saver = Saver(self.file, self.encode)
        self._wakeups = [asyncio.Event() for _ in self.delays]
        self.delivered = 0

    def load(self) -> None:
        raw = self.file.load()
        if raw is not None:
            self.offsets = DelayOffsetTable.model_validate(raw).offset_table
        store = self.store
        for level in range(1, len(self.delays) + 1):
            low = store.get_min_offset(SCHEDULE_TOPIC, level - 1)
            high = store.get_max_offset(SCHEDULE_TOPIC, level - 1)
            self.offsets[level] = min(max(self.offsets.get(level, 0), low), high)

    def encode(self) -> bytes:
        return DelayOffsetTable(offset_table=self.offsets).encode()

    def start(self) -> None:
        for level in range(1, len(self.delays) + 1):
            self._spawn(self._run_level(level))
        self._every(self.config.flush_delay_offset_interval / 1000, self._saver.request)

    async def flush(self) -> None:
        """Write ``delayOffset.json`` now."""
        await self._saver.flush()

    def save_soon(self) -> None:
        """Write ``delayOffset.json`` in the background (a slave adopted its master's offsets)."""
        self._saver.request()

    def on_arrival(self, topic: str, queue_id: int, max_offset: int, tags_code: int) -> None:
        if topic == SCHEDULE_TOPIC and 0 <= queue_id < len(self._wakeups):
            self._wakeups[queue_id].set()

    async def _run_level(self, level: int) -> None:
        store = self.store
        queue_id = level - 1
        delay_ms = self.delays[level - 1]
        wakeup = self._wakeups[queue_id]
        while True:
            offset = self.offsets.get(level, 0)
            low = store.get_min_offset(SCHEDULE_TOPIC, queue_id)
            if offset < low:
                offset = self.offsets[level] = low
            wakeup.clear()
            entries = store.read_consume_queue(SCHEDULE_TOPIC, queue_id, offset, BATCH)
            if not entries:
                await wakeup.wait()
                continue
            for commit_log_offset, _size, deliver_at in entries:
                now = now_ms()
                if deliver_at > now + delay_ms:  # a clock step backwards: deliver now
                    deliver_at = now
                # The loop's timers run on its own millisecond-cached monotonic clock and may
                # fire a little before the wall clock reaches the delivery time, so the wall
                # clock is asked again until it has (a message is never delivered early).
                while deliver_at > now:
                    await asyncio.sleep((deliver_at - now) / 1000)
                    now = now_ms()
                if not self.release(commit_log_offset):
                    await asyncio.sleep(RETRY_AFTER_FAILURE)
                    break
                offset += 1
                self.offsets[level] = offset
            # A backlog of due messages is delivered a batch at a time, letting the rest of
            # the broker run between batches.
            await asyncio.sleep(0)

    def _released(self, topic: str) -> None:
        self.delivered += 1
