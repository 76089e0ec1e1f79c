"""Delayed delivery: messages with a delay level wait in ``SCHEDULE_TOPIC_XXXX`` (queue
``level - 1``, consume-queue tags slot = delivery time; see :mod:`.delay_levels`) and are
re-stored to their real topic and queue when due. One task per level; progress is persisted
to ``config/delayOffset.json``.

Each level's queue is FIFO with one delay, so entries become due in order: a level's task
sleeps until its head entry is due, and waits for an arrival when the queue is empty.
"""

from __future__ import annotations

import asyncio
import logging
import time

from aiorocketmq.broker.store import MessageStore
from aiorocketmq.protocol.body import DelayOffsetTable
from aiorocketmq.protocol.loop import cancel_and_wait
from aiorocketmq.protocol.message import PropertyKey
from aiorocketmq.protocol.names import SCHEDULE_TOPIC, TRANS_HALF_TOPIC

from .config import BrokerConfig
from .config_files import ConfigFile, Saver
from .writer import MessageWriter

log = logging.getLogger(__name__)

BATCH = 32
RETRY_AFTER_FAILURE = 10.0


class DelayService:
    def __init__(self, config: BrokerConfig, *, store: MessageStore, writer: MessageWriter) -> None:
        self.config = config
        self.store = store
        self.writer = writer
        self.delays = writer.delay_levels.delays
        self.offsets: dict[int, int] = {}
        self.file = ConfigFile(config.config_dir / "delayOffset.json")
        self._saver = Saver(self.file, self.encode)
        self._wakeups = [asyncio.Event() for _ in self.delays]
        self._tasks: list[asyncio.Task[None]] = []
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
            self._tasks.append(asyncio.ensure_future(self._run_level(level)))
        self._tasks.append(asyncio.ensure_future(self._persist_periodically()))

    async def stop(self) -> None:
        await cancel_and_wait(*self._tasks)
        self._tasks.clear()

    async def flush(self) -> None:
        """Write ``delayOffset.json`` now."""
        await self._saver.flush()

    def save_soon(self) -> None:
        """Write ``delayOffset.json`` in the background (a slave adopted its master's offsets)."""
        self._saver.request()

    def on_arrival(self, topic: str, queue_id: int, max_offset: int, tags_code: int) -> None:
        if topic == SCHEDULE_TOPIC and 0 <= queue_id < len(self._wakeups):
            self._wakeups[queue_id].set()

    async def _persist_periodically(self) -> None:
        interval = self.config.flush_delay_offset_interval / 1000
        while True:
            await asyncio.sleep(interval)
            self._saver.request()

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
                now = time.time_ns() // 1_000_000
                if deliver_at > now + delay_ms:  # a clock step backwards: deliver now
                    deliver_at = now
                # The loop's timers run on its own millisecond-cached monotonic clock and may
                # fire a little before the wall clock reaches the delivery time, so the wall
                # clock is asked again until it has (a message is never delivered early).
                while deliver_at > now:
                    await asyncio.sleep((deliver_at - now) / 1000)
                    now = time.time_ns() // 1_000_000
                if not self._deliver(commit_log_offset):
                    await asyncio.sleep(RETRY_AFTER_FAILURE)
                    break
                offset += 1
                self.offsets[level] = offset
            # A backlog of due messages is delivered a batch at a time, letting the rest of
            # the broker run between batches.
            await asyncio.sleep(0)

    def _deliver(self, commit_log_offset: int) -> bool:
        """Re-store one due message to its real topic; False to retry later."""
        msg = self.store.look_message(commit_log_offset)
        if msg is None:
            log.warning("delayed message at %d is gone; skipping it", commit_log_offset)
            return True
        props = dict(msg.properties)
        props.pop(PropertyKey.DELAY_TIME_LEVEL, None)
        topic = props.get(PropertyKey.REAL_TOPIC)
        real_qid = props.get(PropertyKey.REAL_QUEUE_ID, "")
        if not topic or not real_qid.isdigit() or topic == TRANS_HALF_TOPIC:
            log.error("delayed message at %d has no usable real topic/queue; dropped", commit_log_offset)
            return True
        result = self.writer.put(self.writer.build_copy(msg, topic, int(real_qid), props))
        if not result.ok:
            log.warning("delivering delayed message to %s failed: %s", topic, result.status.name)
            return False
        self.delivered += 1
        return True
