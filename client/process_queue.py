"""The process queue: a consumer's local snapshot of one message queue.

Pulled messages wait here, keyed by queue offset, until the listener has consumed them. It
answers the questions flow control asks (how many messages, how many bytes, how wide the
offset span) and the one offset commits ask: the smallest offset still in flight, so the
committed offset never passes an unconsumed message. Orderly consumption takes messages
from the head into a "consuming" set and commits or puts them back as a whole.

Everything runs on one event loop, so no locks guard the tables; ``consume_lock`` only
serialises orderly listener calls against rebalance removing the queue.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Iterable

from aiorocketmq.protocol.message import MessageExt

from .offset_store import OffsetSlot

#: A local orderly lock older than this is treated as lost (the broker keeps it 60 s).
LOCK_MAX_LIVE_TIME = 30.0
#: A push queue that has not pulled for this long is dropped and re-created by rebalance.
PULL_MAX_IDLE_TIME = 120.0


class ProcessQueue:
    __slots__ = (
        "_messages",
        "_order",
        "_consuming",
        "count",
        "size",
        "max_offset",
        "dropped",
        "locked",
        "last_lock_time",
        "last_pull_time",
        "consuming",
        "consume_lock",
        "offset_slot",
        "_space",
        "_low_water",
    )

    def __init__(self) -> None:
        # Insertion order is offset order: pulls add increasing offsets, and orderly
        # re-inserts rebuild the dict in order.
        self._messages: dict[int, MessageExt] = {}
        # The waiting offsets in order, consumed ones dropped lazily from the left: the head
        # of the dict itself is not cheap to find once many of its first entries were
        # popped (its iterator steps over every deleted slot until the next resize).
        self._order: deque[int] = deque()
        self._consuming: dict[int, MessageExt] = {}
        self.count = 0
        self.size = 0
        self.max_offset = 0
        self.dropped = False
        self.locked = False
        now = time.monotonic()
        self.last_lock_time = now
        self.last_pull_time = now
        #: Orderly: a consume task is running for this queue.
        self.consuming = False
        self.consume_lock = asyncio.Lock()
        #: The queue's entry in the consumer's offset store, set when the queue is taken.
        self.offset_slot = OffsetSlot()
        self._space: asyncio.Future[None] | None = None
        self._low_water = 0

    # -- pulled messages ------------------------------------------------------------------

    def put(self, messages: list[MessageExt]) -> bool:
        """Add pulled messages (duplicates ignored). True when an orderly consume task
        should start: the queue has messages and none is running."""
        table = self._messages
        added = 0
        size = 0
        for msg in messages:
            offset = msg.queue_offset
            if offset not in table and offset not in self._consuming:
                table[offset] = msg
                self._order.append(offset)
                added += 1
                size += len(msg.body)
                if offset > self.max_offset:
                    self.max_offset = offset
        self.count += added
        self.size += size
        if table and not self.consuming:
            self.consuming = True
            return True
        return False

    def pulled_up_to(self, next_offset: int) -> None:
        """Every offset below ``next_offset`` has been pulled (or filtered out by tag): once
        the waiting messages are consumed, progress is ``next_offset``."""
        if next_offset - 1 > self.max_offset:
            self.max_offset = next_offset - 1

    @property
    def max_span(self) -> int:
        """Offset distance between the oldest and newest waiting message."""
        table = self._messages
        if not table:
            return 0
        head = self._head()
        return next(reversed(table)) - head if head is not None else 0

    @property
    def has_messages(self) -> bool:
        return bool(self._messages)

    def first_offset(self) -> int | None:
        return self._head()

    def _head(self) -> int | None:
        """The smallest waiting offset (amortised O(1))."""
        order = self._order
        table = self._messages
        while order:
            offset = order[0]
            if offset in table:
                return offset
            order.popleft()
        return None

    def remove(self, messages: Iterable[MessageExt]) -> int:
        """Remove consumed messages; the offset consumption has safely reached: the smallest
        offset still waiting, or one past the newest when none waits; -1 if nothing waited."""
        table = self._messages
        if not table:
            return -1
        removed = 0
        size = 0
        pop = table.pop
        for msg in messages:
            if pop(msg.queue_offset, None) is not None:
                removed += 1
                size += len(msg.body)
        self.count -= removed
        self.size -= size
        if self._space is not None and self.count <= self._low_water:
            self._wake()
        head = self._head()
        return head if head is not None else self.max_offset + 1

    async def wait_for_space(self, low_water: int, timeout: float) -> None:
        """Flow control: return once at most ``low_water`` messages wait (or after
        ``timeout``, for limits other than the count)."""
        if self.count <= low_water:
            return
        self._low_water = low_water
        self._space = asyncio.get_running_loop().create_future()
        try:
            async with asyncio.timeout(timeout):
                await self._space
        except TimeoutError:
            pass
        finally:
            self._space = None

    def _wake(self) -> None:
        space = self._space
        if space is not None and not space.done():
            space.set_result(None)

    def clear(self) -> None:
        self._messages.clear()
        self._order.clear()
        self._consuming.clear()
        self.count = 0
        self.size = 0
        self.max_offset = 0

    def snapshot(self) -> list[MessageExt]:
        """The waiting messages, oldest first."""
        return list(self._messages.values())

    # -- orderly --------------------------------------------------------------------------

    def take(self, batch_size: int) -> list[MessageExt]:
        """Move up to ``batch_size`` of the oldest messages into the consuming set. An empty
        result ends the consume task (``consuming`` goes false)."""
        table = self._messages
        taken: list[MessageExt] = []
        while len(taken) < batch_size:
            offset = self._head()
            if offset is None:
                break
            msg = table.pop(offset)
            self._consuming[offset] = msg
            taken.append(msg)
        if not taken:
            self.consuming = False
        return taken

    def commit(self) -> int:
        """Acknowledge the consuming set; the next offset to consume, or -1 if it was empty."""
        consuming = self._consuming
        if not consuming:
            return -1
        offset = max(consuming)
        self.count -= len(consuming)
        self.size -= sum(len(msg.body) for msg in consuming.values())
        consuming.clear()
        if self._space is not None and self.count <= self._low_water:
            self._wake()
        return offset + 1

    def reconsume(self, messages: Iterable[MessageExt]) -> None:
        """Put messages from the consuming set back at the head, to consume them again."""
        back = {}
        for msg in messages:
            if self._consuming.pop(msg.queue_offset, None) is not None:
                back[msg.queue_offset] = msg
        if back:
            merged = dict(sorted({**back, **self._messages}.items()))
            self._messages = merged
            self._order = deque(merged)

    def rollback(self) -> None:
        """Put the whole consuming set back."""
        self.reconsume(list(self._consuming.values()))

    # -- locks and liveness ---------------------------------------------------------------

    def mark_locked(self) -> None:
        self.locked = True
        self.last_lock_time = time.monotonic()

    @property
    def lock_expired(self) -> bool:
        return time.monotonic() - self.last_lock_time > LOCK_MAX_LIVE_TIME

    @property
    def pull_expired(self) -> bool:
        return time.monotonic() - self.last_pull_time > PULL_MAX_IDLE_TIME
