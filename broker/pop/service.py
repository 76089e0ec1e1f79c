"""POP consumption on our store: receive with an invisible time, ack, change of invisible
time, redelivery through the group's POP retry topic, dead letters, orderly (FIFO) pops,
long polling, and recovery of all of it after a crash.

The model (docs/broker.md#pop-consumption-brokerpop, Apache's 5.x broker on 4.x-style storage):

* A group pops a queue from its own offset in the consumer-offset table (the same table pull
  consumers commit to, so pull and POP groups share a topic and each has its own progress);
  the offset moves past what a pop hands out at once.
* Each popped batch is a :class:`~.checkpoint.CheckPoint` written to the revive log before
  the pop is answered; acks, changes of invisible time, redeliveries and dead-lettering are
  records naming it. Recovery replays the log from the revive progress committed in the
  offset table, so nothing acked comes back and nothing un-acked is lost.
* When a check point's invisible time passes, its un-acked messages are put into
  ``%RETRY%<group>_<topic>`` with ``reconsumeTimes + 1`` (the next pop reads that topic too),
  or into ``%DLQ%<group>`` once delivered ``retryMaxTimes + 1`` times.
* An orderly pop takes one batch per queue and blocks the queue until every message of it is
  acked; an expired batch is handed out again (same offsets, attempt + 1) before anything
  newer, so the queue is consumed in order.

:class:`PopService` is the one object the broker's fronts call (the remoting handlers,
:mod:`.handlers`, and the gRPC front); it owns no logic of its own but the wiring of its
parts, each a module of this package:

* :mod:`.inflight`: the in-flight check points, their deadlines and the revive log they are
  written to (the state every other part works on);
* :mod:`.reading`: request checks, each group's offsets, reading queues, peeking;
* :mod:`.receive`: a pop start to end (check points, receipt handles, long polling);
* :mod:`.acks`: acks, changes of invisible time, forwards to the DLQ;
* :mod:`.revive`: the revive timer, redeliveries and dead letters;
* :mod:`.recovery`: rebuilding the table after a restart, committing the log's progress.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable

from aiorocketmq.broker.store import FlushDiskType, MessageStore
from aiorocketmq.protocol.loop import cancel_and_wait
from aiorocketmq.protocol.pop import INIT_MODE_MAX, ReceiptHandle

from ..arrivals import Arrivals
from ..config import BrokerConfig
from ..groups import GroupTable
from ..offsets import OffsetTable
from ..topics import TopicTable
from ..writer import MessageWriter
from .acks import AckDone, Acks
from .checkpoint import CheckPoint, CheckPointKey
from .clock import now_ms
from .errors import InvalidReceiptHandleError, PollingFullError, PopError, ReceiptHandleExpiredError
from .inflight import InFlight
from .reading import QueueReader
from .receive import PoppedMessage, PopResult, Receiver
from .recovery import Recovery
from .revive import Reviver

__all__ = [
    "AckDone",
    "InvalidReceiptHandleError",
    "PollingFullError",
    "PopError",
    "PopResult",
    "PopService",
    "PoppedMessage",
    "ReceiptHandleExpiredError",
    "now_ms",
]


class PopService:
    """POP state of one broker: in-flight check points, the offsets POP groups consume
    from, the revive timer and the pops waiting for messages."""

    def __init__(
        self,
        config: BrokerConfig,
        *,
        store: MessageStore,
        writer: MessageWriter,
        topics: TopicTable,
        groups: GroupTable,
        offsets: OffsetTable,
        arrivals: Arrivals | None = None,
    ) -> None:
        self.config = config
        self.store = store
        self.writer = writer
        self.topics = topics
        self.groups = groups
        self.offsets = offsets
        #: Where pops wait for messages, by the topic they asked for (the broker's one registry
        #: of waiting consumers; a registry of its own in unit tests).
        self.arrivals = arrivals if arrivals is not None else Arrivals()
        self.state = InFlight(
            cluster=config.broker_cluster_name,
            broker_name=config.broker_name,
            store=store,
            writer=writer,
            topics=topics,
            arrivals=self.arrivals,
        )
        self.revive_topic = self.state.revive_topic
        self.broker_name = config.broker_name
        #: In-flight check points by key (the table :attr:`state` keeps).
        self.checkpoints: dict[CheckPointKey, CheckPoint] = self.state.checkpoints
        self.reviver = Reviver(self.state, groups)
        self.reader = QueueReader(config, state=self.state, topics=topics, groups=groups, offsets=offsets)
        self.receiver = Receiver(self.state, self.reader, self.reviver)
        self.acks = Acks(self.state, self.reviver)
        self.recovery = Recovery(self.state, offsets)
        self._tasks: list[asyncio.Task[None]] = []

    # -- lifecycle ----------------------------------------------------------------------------

    def recover(self) -> None:
        """Rebuild the in-flight check points from the revive log (after the store and the
        offset table are loaded): every check point from the committed revive progress on,
        minus what its acks marked; each group's pop offsets are moved past everything a
        recovered check point handed out."""
        self.recovery.recover()

    def start(self) -> None:
        self.state.revive_wakeup = asyncio.Event()
        self._tasks = [
            asyncio.ensure_future(self.reviver.run()),
            asyncio.ensure_future(self.recovery.commit_progress_periodically()),
        ]

    async def stop(self) -> None:
        await cancel_and_wait(*self._tasks)
        self._tasks.clear()
        self.arrivals.cancel_all()
        self.commit_progress()

    def commit_progress(self) -> None:
        """Commit how far the revive log is settled: recovery replays it from there."""
        self.recovery.commit_progress()

    @property
    def in_flight(self) -> int:
        """Messages handed out and not yet acked, redelivered or dead-lettered."""
        return self.state.in_flight

    @property
    def redelivered(self) -> int:
        """Messages put into a POP retry topic by the revive timer so far."""
        return self.reviver.redelivered

    @property
    def dead_lettered(self) -> int:
        """Messages put into a DLQ so far (by the revive timer or a consumer's forward)."""
        return self.reviver.dead_lettered

    @property
    def sync_flush(self) -> bool:
        return self.store.config.flush_disk_type is FlushDiskType.SYNC_FLUSH

    # -- popping ------------------------------------------------------------------------------

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
        """Pop up to ``max_messages`` (at most 32) of ``topic`` (``queue_id`` None: any
        queue) matching a tag expression (or an SQL92 one, with ``enablePropertyFilter``), invisible
        to others for ``invisible_ms``; wait up to ``poll_ms`` for messages when there are none.
        ``fifo``: orderly pop. The result has the messages (``result.messages``) and what a
        remoting response reports about the pop; a waiting pop whose ``alive()`` turns false (its
        client left) gives up without popping."""
        return await self.receiver.pop(
            group=group,
            topic=topic,
            queue_id=queue_id,
            max_messages=max_messages,
            invisible_ms=invisible_ms,
            expression_type=expression_type,
            expression=expression,
            poll_ms=poll_ms,
            fifo=fifo,
            init_mode=init_mode,
            with_handles=with_handles,
            alive=alive,
        )

    # -- looking without popping (RocketMQ 5's PEEK_MESSAGE, NOTIFICATION, POLLING_INFO) -------

    def peek(self, *, group: str, topic: str, queue_id: int, max_messages: int) -> tuple[int, list[bytes]]:
        """Up to ``max_messages`` stored records a pop would look at next, and how many wait in
        all: nothing is popped, no offset moves, nothing becomes invisible."""
        return self.reader.peek(group=group, topic=topic, queue_id=queue_id, max_messages=max_messages)

    def has_messages(self, group: str, topic: str, queue_id: int) -> bool:
        return self.reader.has_messages(group, topic, queue_id)

    async def notification(self, *, group: str, topic: str, queue_id: int, poll_ms: int) -> tuple[bool, bool]:
        """``(has messages, polling full)``: whether a pop would find something now, or within
        ``poll_ms`` (waiting for arrivals as a pop does)."""
        return await self.receiver.notification(group=group, topic=topic, queue_id=queue_id, poll_ms=poll_ms)

    def polling(self, group: str, topic: str, queue_id: int) -> int:
        """Pops of ``group`` waiting for ``topic``'s queue (-1: for any of its queues)."""
        return self.receiver.polling(group, topic, queue_id)

    # -- settling -----------------------------------------------------------------------------

    async def ack(self, *, group: str, topic: str, receipt_handle: str) -> None:
        """Acknowledge a popped message: it is never delivered again (raises
        :class:`ReceiptHandleExpiredError` when its invisible time has passed)."""
        await self.acks.ack(group=group, topic=topic, receipt_handle=receipt_handle)

    def ack_soon(self, *, group: str, topic: str, receipt_handle: str, done: AckDone) -> None:
        """:meth:`ack` without a coroutine, for the remoting handler: the handle is checked
        now (raising), the ack is written with the others of this loop iteration, then
        ``done(None)`` (or ``done(error)``) is called. Not for SYNC_FLUSH brokers, whose acks
        wait for the disk (:attr:`sync_flush`)."""
        self.acks.ack_soon(group=group, topic=topic, receipt_handle=receipt_handle, done=done)

    def ack_offsets_soon(
        self, *, group: str, topic: str, batch: ReceiptHandle, offsets: Iterable[int], done: AckDone
    ) -> None:
        """:meth:`ack_soon` for several messages of one popped batch at once (what a batch
        ack names): ``batch`` is the handle of any of them; ``done`` is called once per
        offset, with the refusal for those no longer in flight."""
        self.acks.ack_offsets_soon(group=group, topic=topic, batch=batch, offsets=offsets, done=done)

    async def change_invisible(
        self, *, group: str, topic: str, receipt_handle: str, invisible_ms: int
    ) -> str:
        """Make a popped message invisible for ``invisible_ms`` from now; its new receipt
        handle (the old one is spent)."""
        return await self.acks.change_invisible(
            group=group, topic=topic, receipt_handle=receipt_handle, invisible_ms=invisible_ms
        )

    async def forward_to_dlq(self, *, group: str, topic: str, receipt_handle: str) -> None:
        """Move a popped message to ``%DLQ%<group>`` now and settle its handle (its invisible
        time may have passed, as long as it was not redelivered yet)."""
        await self.acks.forward_to_dlq(group=group, topic=topic, receipt_handle=receipt_handle)

    # -- long polling -------------------------------------------------------------------------

    @property
    def waiting(self) -> int:
        return self.arrivals.waiting

    def on_arrival(self, topic: str, queue_id: int, max_offset: int, tags_code: int) -> None:
        """Store listener for a service with a registry of its own (the broker registers its
        one :class:`~aiorocketmq.broker.arrivals.Arrivals` instead): wake the pops waiting for
        ``topic`` (or for what its POP retry topic redelivers)."""
        self.arrivals.on_arrival(topic, queue_id, max_offset, tags_code)
