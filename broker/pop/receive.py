"""A pop, start to end: picking the queues (the topic's, and the group's POP retry topic's),
reading them (:mod:`.reading`), writing one check point per queue batch before answering,
the receipt handles that name it, and long polling when nothing is there (NOTIFICATION and
POLLING_INFO included, which wait and count the same way).

Each pop first revives what is due (:mod:`.revive`), so an expired message is back in the
retry topic before the pop looks for it. A pop waits on the broker's registry of waiting
consumers (:class:`~aiorocketmq.broker.arrivals.Arrivals`), at most :data:`MAX_WAITING` at
once; a waiting orderly pop also wakes when its blocked queue opens.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from aiorocketmq.protocol.message import MessageExt
from aiorocketmq.protocol.pop import (
    INIT_MODE_MAX,
    ORDER_REVIVE_QID,
    ReceiptHandle,
    pop_retry_topic,
    topic_type_of,
)

from ..arrivals import ANY_QUEUE
from . import clock
from .checkpoint import CheckPoint, CheckPointKey
from .errors import PollingFullError
from .inflight import InFlight
from .reading import Filter, QueueReader, Read
from .revive import Reviver

#: Most receives waiting for messages at once (Apache's ``maxPopPollingSize``).
MAX_WAITING = 100_000


@dataclass(slots=True)
class PoppedMessage:
    """One message handed out by a pop."""

    #: The stored message, decoded (for a redelivery it is the copy in the POP retry topic,
    #: whose ``topic`` is that retry topic; ``reconsume_times`` is ``delivery_attempt - 1``).
    message: MessageExt
    #: The stored record as it is in the commit log (what a remoting pop answers with).
    record: bytes
    #: The topic the consumer asked for (the message's original topic).
    topic: str
    receipt_handle: str
    #: 1 for a first delivery.
    delivery_attempt: int
    pop_time: int
    invisible_time: int


@dataclass(slots=True)
class PopResult:
    """What one pop handed out, with what a remoting response reports about it."""

    messages: list[PoppedMessage] = field(default_factory=list)
    checkpoints: list[CheckPoint] = field(default_factory=list)
    pop_time: int = 0
    invisible_time: int = 0
    revive_qid: int = 0
    #: Messages left behind in the queues looked at.
    rest: int = 0


class Receiver:
    """Pops (with long polling) and the notifications that wait like them."""

    def __init__(self, state: InFlight, reader: QueueReader, reviver: Reviver) -> None:
        self.state = state
        self.reader = reader
        self.reviver = reviver
        #: Pops waiting for messages per (topic, group, queue id or -1): POLLING_INFO's count.
        self._polling: dict[tuple[str, str, int], int] = {}

    @property
    def waiting(self) -> int:
        return self.state.arrivals.waiting

    def polling(self, group: str, topic: str, queue_id: int) -> int:
        """Pops of ``group`` waiting for ``topic``'s queue (-1: for any of its queues)."""
        return self._polling.get((topic, group, queue_id), 0)

    async def pop(
        self,
        *,
        group: str,
        topic: str,
        queue_id: int | None,
        max_messages: int,
        invisible_ms: int,
        expression_type: str = "TAG",
        expression: str = "*",
        poll_ms: int = 0,
        fifo: bool = False,
        init_mode: int = INIT_MODE_MAX,
        with_handles: bool = True,
        alive: Callable[[], bool] | None = None,
    ) -> PopResult:
        """:meth:`~.service.PopService.pop`."""
        wanted = self.reader.check(
            group, topic, queue_id, max_messages, invisible_ms, expression_type, expression
        )
        loop = asyncio.get_running_loop()
        give_up = loop.time() + max(0, poll_ms) / 1000
        while True:
            result = self.pop_now(
                group, topic, queue_id, max_messages, invisible_ms, wanted, fifo, init_mode, with_handles
            )
            remaining = give_up - loop.time()
            if result.messages or remaining <= 0:
                if result.messages:
                    await self.state.durable()
                return result
            wait = remaining
            if fifo:
                # A blocked orderly queue opens when its batch's invisible time passes.
                opens = self.reader.orderly_opens(group, topic, queue_id)
                if opens is not None:
                    wait = min(wait, max(0.0, (opens - clock.now_ms()) / 1000) + 0.001)
            if self.waiting >= MAX_WAITING:
                raise PollingFullError(f"{self.waiting} receives are waiting already")
            key = (topic, group, -1 if queue_id is None or queue_id < 0 else queue_id)
            self._polling[key] = self._polling.get(key, 0) + 1
            try:
                await self.state.arrivals.wait(topic, ANY_QUEUE, wait)
            finally:
                left = self._polling[key] - 1
                if left:
                    self._polling[key] = left
                else:
                    del self._polling[key]
            if alive is not None and not alive():
                return PopResult(invisible_time=invisible_ms, pop_time=clock.now_ms())

    async def notification(self, *, group: str, topic: str, queue_id: int, poll_ms: int) -> tuple[bool, bool]:
        """:meth:`~.service.PopService.notification`."""
        reader = self.reader
        reader.check(group, topic, queue_id, 1, 0, "TAG", "*")
        loop = asyncio.get_running_loop()
        give_up = loop.time() + max(0, poll_ms) / 1000
        while True:
            if reader.has_messages(group, topic, queue_id):
                return True, False
            remaining = give_up - loop.time()
            if remaining <= 0:
                return False, False
            if self.waiting >= MAX_WAITING:
                return False, True
            await self.state.arrivals.wait(topic, ANY_QUEUE, remaining)

    def pop_now(
        self,
        group: str,
        topic: str,
        queue_id: int | None,
        max_messages: int,
        invisible_ms: int,
        flt: Filter,
        fifo: bool,
        init_mode: int,
        with_handles: bool,
    ) -> PopResult:
        state = self.state
        reader = self.reader
        now = clock.now_ms()
        self.reviver.revive_due(now)
        topic_config = reader.topics.get(topic)
        queue_nums = topic_config.read_queue_nums if topic_config is not None else 0
        if queue_id is not None and queue_id >= 0:
            queues = [queue_id]
        else:
            start = random.randrange(queue_nums) if queue_nums else 0
            queues = [(start + i) % queue_nums for i in range(queue_nums)]
        retry = pop_retry_topic(group, topic)
        state.redelivers(retry, topic)
        targets = [(topic, q) for q in queues]
        if not fifo:
            retry_queues = [(retry, q) for q in state.store.queue_ids(retry)]
            # Now and then the retry topic first, so a busy topic does not starve redeliveries.
            targets = retry_queues + targets if random.random() < 0.2 else targets + retry_queues
        reads: list[Read] = []
        rest = 0
        wanted = max_messages
        for stored_topic, q in targets:
            if wanted <= 0:
                break
            if fifo:
                read = reader.read_orderly(group, stored_topic, q, wanted, flt, init_mode, now)
            else:
                read = reader.read_queue(group, stored_topic, q, wanted, flt, init_mode)
            if read is None:
                continue
            rest += max(0, state.store.get_max_offset(stored_topic, q) - read.next_offset)
            if read.messages:
                reads.append(read)
                wanted -= len(read.messages)
            elif not read.superseded:
                reader.advance(group, stored_topic, q, read.next_offset)
        result = PopResult(invisible_time=invisible_ms, rest=rest)
        if not reads:
            result.pop_time = now
            return result
        revive_qid = ORDER_REVIVE_QID if fifo else state.take_revive_qid()
        pop_time = state.unique_pop_time(
            [(r.topic, group, r.queue_id, r.messages[0][0].queue_offset) for r in reads], now
        )
        result.pop_time = pop_time
        result.revive_qid = revive_qid
        for read in reads:
            ck = CheckPoint(
                topic=read.topic,
                group=group,
                queue_id=read.queue_id,
                start_offset=read.messages[0][0].queue_offset,
                pop_time=pop_time,
                invisible_time=invisible_ms,
                offsets=[m.queue_offset for m, _, _ in read.messages],
                attempts=[attempt for _, _, attempt in read.messages],
                revive_qid=revive_qid,
                revive_queue=state.revive_queue(revive_qid, read.queue_id),
                broker_name=state.broker_name,
                orderly=fifo,
            )
            state.write_checkpoint(ck)
            result.checkpoints.append(ck)
            if read.superseded:
                by_ck: dict[CheckPointKey, tuple[CheckPoint, list[int]]] = {}
                for old, i in read.superseded:
                    by_ck.setdefault(old.key, (old, []))[1].append(i)
                for old, indices in by_ck.values():
                    state.resolve(old, indices, wake=False)
            else:
                reader.advance(group, read.topic, read.queue_id, read.next_offset)
            kind = topic_type_of(read.topic)
            for msg, record, attempt in read.messages:
                msg.reconsume_times = attempt - 1
                handle = ""
                if with_handles:
                    handle = ReceiptHandle(
                        ck.start_offset,
                        pop_time,
                        invisible_ms,
                        revive_qid,
                        kind,
                        state.broker_name,
                        read.queue_id,
                        msg.queue_offset,
                        msg.commit_log_offset,
                    ).encode()
                result.messages.append(
                    PoppedMessage(msg, record, topic, handle, attempt, pop_time, invisible_ms)
                )
        return result
