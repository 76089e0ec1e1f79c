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

The broker's gRPC front and the remoting handlers (:mod:`.handlers`) both call
:class:`PopService`.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import random
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

from aiorocketmq.broker.store import FlushDiskType, GetStatus, MessageStore, PutResult, PutStatus
from aiorocketmq.protocol.codes import PERM_READ_WRITE, Perm
from aiorocketmq.protocol.errors import (
    BrokerError,
    MessageIllegalError,
    NoPermissionError,
    ProtocolError,
    ServerSystemError,
    SubscriptionGroupNotExistError,
    SubscriptionParseFailedError,
    TopicNotExistError,
)
from aiorocketmq.protocol.loop import cancel_and_wait
from aiorocketmq.protocol.message import MessageExt, PropertyKey, decode_record
from aiorocketmq.protocol.names import (
    RETRY_PREFIX,
    TIMER_REQUESTS,
    dlq_topic,
    parse_tag_expression,
    tag_codes,
)
from aiorocketmq.protocol.pop import (
    INIT_MODE_MAX,
    ORDER_REVIVE_QID,
    POLLING_FULL,
    ReceiptHandle,
    ReceiptHandleError,
    pop_retry_topic,
    topic_type_of,
)
from aiorocketmq.protocol.sql92 import Sql92Error

from ..arrivals import ANY_QUEUE, Arrivals
from ..config import BrokerConfig
from ..filters import RecordFilter, compile_expression, is_tag_type, record_filter
from ..groups import GroupTable
from ..offsets import OffsetTable
from ..topics import TopicTable
from ..writer import MessageWriter
from .checkpoint import (
    ACK_TAG,
    BATCH_ACK_TAG,
    CK_TAG,
    CheckPoint,
    CheckPointKey,
    decode_ack,
    encode_ack,
    revive_topic,
)

log = logging.getLogger(__name__)

#: Queues of the revive log (Apache's ``reviveQueueNum``).
REVIVE_QUEUE_NUM = 8
#: The group under which the revive log's replayed progress is committed.
REVIVE_GROUP = "CID_RMQ_SYS_REVIVE_GROUP"
#: Most messages one pop hands out (Apache's limit).
MAX_POP_MESSAGES = 32
#: A group's ``retryMaxTimes`` when it has no config.
DEFAULT_RETRY_MAX_TIMES = 16
#: The longest invisible time a pop or change may ask for (the 5.x proxy's limit).
MAX_INVISIBLE_MS = 12 * 3600 * 1000
#: Redelivery that could not be written (disk full, say) is tried again after this.
REVIVE_RETRY_MS = 5000
#: Most receives waiting for messages at once (Apache's ``maxPopPollingSize``).
MAX_WAITING = 100_000
#: How often the revive log's progress is committed to the offset table.
PROGRESS_INTERVAL = 1.0
#: Properties a redelivery must not carry: they would park it again.
_DELAYING = (PropertyKey.DELAY_TIME_LEVEL, *sorted(TIMER_REQUESTS))
FIRST_POP_TIME = "1ST_POP_TIME"
DLQ_ORIGIN_TOPIC = "DLQ_ORIGIN_TOPIC"
DLQ_ORIGIN_MESSAGE_ID = "DLQ_ORIGIN_MESSAGE_ID"
_PERM_READ = int(Perm.READ)


class PopError(BrokerError):
    """Base of the errors a POP request can get back."""


class InvalidReceiptHandleError(PopError):
    """The receipt handle does not parse, or names no message this broker handed out."""

    code = 13  # MESSAGE_ILLEGAL on the remoting wire


class ReceiptHandleExpiredError(PopError):
    """The message is no longer in flight under this handle: acked already, or its invisible
    time passed (it is, or soon will be, delivered again)."""

    code = 208  # NO_MESSAGE on the remoting wire, as Apache's broker answers a stale ack


class PollingFullError(PopError):
    """Too many receives are waiting for messages on this broker already."""

    code = POLLING_FULL


#: Called once an ack is settled: with None, or with the error that refused it.
AckDone = Callable[["BrokerError | None"], None]


def _call(done: AckDone, error: BrokerError | None) -> None:
    try:
        done(error)
    except Exception:
        log.exception("POP: an ack's completion failed")


def now_ms() -> int:
    return time.time_ns() // 1_000_000


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


class _Filter(NamedTuple):
    """What a pop keeps: tag hash codes and exact tags, or an SQL92 record filter."""

    codes: frozenset[int] | None
    tags: frozenset[str] | None
    matches: RecordFilter | None


@dataclass(slots=True)
class _Read:
    """Messages read from one queue for a pop, before its check point is written."""

    topic: str
    queue_id: int
    messages: list[tuple[MessageExt, bytes, int]]  # message, record, delivery attempt
    next_offset: int
    #: Pending (check point, index) pairs an orderly re-pop supersedes.
    superseded: list[tuple[CheckPoint, int]] = field(default_factory=list)


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
        self.revive_topic = revive_topic(config.broker_cluster_name)
        self.broker_name = config.broker_name
        #: In-flight check points by key.
        self.checkpoints: dict[CheckPointKey, CheckPoint] = {}
        #: Orderly check points of each (group, topic, queue): what blocks the queue.
        self._orderly: dict[tuple[str, str, int], list[CheckPoint]] = {}
        self._deadlines: list[tuple[int, int, CheckPointKey]] = []
        self._seq = 0
        self._next_revive_qid = 0
        #: Where pops wait for messages, by the topic they asked for (the broker's one registry
        #: of waiting consumers; a registry of its own in unit tests).
        self.arrivals = arrivals if arrivals is not None else Arrivals()
        #: Pops waiting for messages per (topic, group, queue id or -1): POLLING_INFO's count.
        self._polling: dict[tuple[str, str, int], int] = {}
        #: POP retry topic -> the topic it redelivers.
        self._retry_of: dict[str, str] = {}
        self._revive_wakeup: asyncio.Event | None = None
        self._pending_acks: dict[CheckPointKey, tuple[CheckPoint, list[tuple[int, AckDone]]]] = {}
        self._ack_flush_scheduled = False
        self._last_put: PutResult | None = None
        self._revive_topic_known = False
        self._tasks: list[asyncio.Task[None]] = []
        self.redelivered = 0
        self.dead_lettered = 0

    # -- lifecycle ----------------------------------------------------------------------------

    def recover(self) -> None:
        """Rebuild the in-flight check points from the revive log (after the store and the
        offset table are loaded): every check point from the committed revive progress on,
        minus what its acks marked; each group's pop offsets are moved past everything a
        recovered check point handed out."""
        store = self.store
        recovered = acked = 0
        for queue in range(REVIVE_QUEUE_NUM):
            offset = max(
                self.offsets.query(REVIVE_GROUP, self.revive_topic, queue),
                store.get_min_offset(self.revive_topic, queue),
            )
            high = store.get_max_offset(self.revive_topic, queue)
            while offset < high:
                entries = store.read_consume_queue(self.revive_topic, queue, offset, 256)
                if not entries:
                    offset += 1  # a hole (an entry whose record is gone): step over it
                    continue
                for commit_log_offset, size, _code in entries:
                    self._replay(queue, offset, commit_log_offset, size)
                    offset += 1
        for ck in list(self.checkpoints.values()):
            # Every check point moves its group past what it handed out, acked or not: the
            # committed offsets may be older than the crash.
            frontier = max(ck.offsets) + 1
            if frontier > self.offsets.query(ck.group, ck.topic, ck.queue_id):
                self.offsets.commit(ck.group, ck.topic, ck.queue_id, frontier)
            if ck.finished:
                self._forget(ck)
                continue
            recovered += 1
            acked += bin(ck.done).count("1")
            self._schedule(ck)
        if recovered:
            log.info("POP: %d check points in flight after recovery (%d messages acked)", recovered, acked)

    def _replay(self, queue: int, offset: int, commit_log_offset: int, size: int) -> None:
        msg = self.store.look_message(commit_log_offset)
        if msg is None:
            return
        tag = msg.tags
        try:
            if tag == CK_TAG:
                ck = CheckPoint.decode(msg.body, queue, offset)
                self.checkpoints.setdefault(ck.key, ck)
                if ck.orderly:
                    self._orderly.setdefault((ck.group, ck.topic, ck.queue_id), []).append(ck)
                self._retry_of_topic(ck.topic, ck.group)
            elif tag in (ACK_TAG, BATCH_ACK_TAG):
                key, offsets = decode_ack(msg.body)
                found = self.checkpoints.get(key)
                if found is not None:
                    self._mark(found, offsets)
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("POP: revive log record at %d of queue %d is unreadable: %s", offset, queue, exc)

    def start(self) -> None:
        self._revive_wakeup = asyncio.Event()
        self._tasks = [
            asyncio.ensure_future(self._revive_periodically()),
            asyncio.ensure_future(self._commit_progress_periodically()),
        ]

    async def stop(self) -> None:
        await cancel_and_wait(*self._tasks)
        self._tasks.clear()
        self.arrivals.cancel_all()
        self.commit_progress()

    @property
    def in_flight(self) -> int:
        """Messages handed out and not yet acked, redelivered or dead-lettered."""
        return sum(len(ck.offsets) - bin(ck.done).count("1") for ck in self.checkpoints.values())

    # -- the API ------------------------------------------------------------------------------

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
        wanted = self._check(group, topic, queue_id, max_messages, invisible_ms, expression_type, expression)
        loop = asyncio.get_running_loop()
        give_up = loop.time() + max(0, poll_ms) / 1000
        while True:
            result = self._pop_now(
                group, topic, queue_id, max_messages, invisible_ms, wanted, fifo, init_mode, with_handles
            )
            remaining = give_up - loop.time()
            if result.messages or remaining <= 0:
                if result.messages:
                    await self._durable()
                return result
            wait = remaining
            if fifo:
                # A blocked orderly queue opens when its batch's invisible time passes.
                opens = self._orderly_opens(group, topic, queue_id)
                if opens is not None:
                    wait = min(wait, max(0.0, (opens - now_ms()) / 1000) + 0.001)
            if self.waiting >= MAX_WAITING:
                raise PollingFullError(f"{self.waiting} receives are waiting already")
            key = (topic, group, -1 if queue_id is None or queue_id < 0 else queue_id)
            self._polling[key] = self._polling.get(key, 0) + 1
            try:
                await self.arrivals.wait(topic, ANY_QUEUE, wait)
            finally:
                left = self._polling[key] - 1
                if left:
                    self._polling[key] = left
                else:
                    del self._polling[key]
            if alive is not None and not alive():
                return PopResult(invisible_time=invisible_ms, pop_time=now_ms())

    # -- looking without popping (RocketMQ 5's PEEK_MESSAGE, NOTIFICATION, POLLING_INFO) -------

    def _pop_offset(self, group: str, topic: str, queue_id: int) -> int:
        offset = self.offsets.query(group, topic, queue_id)
        return offset if offset >= 0 else self.store.get_min_offset(topic, queue_id)

    def _looked_at(self, group: str, topic: str, queue_id: int) -> list[tuple[str, int]]:
        """The queues a peek or notification looks at: the topic's (one, or all for a
        negative id), then the group's POP retry topic's."""
        config = self.topics.get(topic)
        queue_nums = config.read_queue_nums if config is not None else 0
        queues = [queue_id] if queue_id >= 0 else list(range(queue_nums))
        retry = pop_retry_topic(group, topic)
        return [(topic, q) for q in queues] + [(retry, q) for q in self.store.queue_ids(retry)]

    def peek(self, *, group: str, topic: str, queue_id: int, max_messages: int) -> tuple[int, list[bytes]]:
        """Up to ``max_messages`` stored records a pop would look at next, and how many wait in
        all: nothing is popped, no offset moves, nothing becomes invisible."""
        self._check(group, topic, queue_id, max_messages, 0, "TAG", "*")
        store = self.store
        rest = 0
        records: list[bytes] = []
        for stored_topic, q in self._looked_at(group, topic, queue_id):
            offset = self._pop_offset(group, stored_topic, q)
            rest += max(0, store.get_max_offset(stored_topic, q) - offset)
            if len(records) >= max_messages:
                continue
            result = store.get_messages(
                group, stored_topic, q, offset, max_messages - len(records), None, None
            )
            if result.status is GetStatus.FOUND:
                records.extend(bytes(buf) for buf in result.buffers)
        return rest, records

    def has_messages(self, group: str, topic: str, queue_id: int) -> bool:
        store = self.store
        return any(
            store.get_max_offset(t, q) > self._pop_offset(group, t, q)
            for t, q in self._looked_at(group, topic, queue_id)
        )

    async def notification(self, *, group: str, topic: str, queue_id: int, poll_ms: int) -> tuple[bool, bool]:
        """``(has messages, polling full)``: whether a pop would find something now, or within
        ``poll_ms`` (waiting for arrivals as a pop does)."""
        self._check(group, topic, queue_id, 1, 0, "TAG", "*")
        loop = asyncio.get_running_loop()
        give_up = loop.time() + max(0, poll_ms) / 1000
        while True:
            if self.has_messages(group, topic, queue_id):
                return True, False
            remaining = give_up - loop.time()
            if remaining <= 0:
                return False, False
            if self.waiting >= MAX_WAITING:
                return False, True
            await self.arrivals.wait(topic, ANY_QUEUE, remaining)

    def polling(self, group: str, topic: str, queue_id: int) -> int:
        """Pops of ``group`` waiting for ``topic``'s queue (-1: for any of its queues)."""
        return self._polling.get((topic, group, queue_id), 0)

    async def ack(self, *, group: str, topic: str, receipt_handle: str) -> None:
        """Acknowledge a popped message: it is never delivered again (raises
        :class:`ReceiptHandleExpiredError` when its invisible time has passed)."""
        ck, i = self._in_flight(group, topic, receipt_handle, live=True)
        settled: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def done(error: BrokerError | None) -> None:
            if not settled.done():
                if error is None:
                    settled.set_result(None)
                else:
                    settled.set_exception(error)

        self._queue_ack(ck, i, done)
        await settled
        await self._durable()

    def ack_soon(self, *, group: str, topic: str, receipt_handle: str, done: AckDone) -> None:
        """:meth:`ack` without a coroutine, for the remoting handler: the handle is checked
        now (raising), the ack is written with the others of this loop iteration, then
        ``done(None)`` (or ``done(error)``) is called. Not for SYNC_FLUSH brokers, whose acks
        wait for the disk (:attr:`sync_flush`)."""
        ck, i = self._in_flight(group, topic, receipt_handle, live=True)
        self._queue_ack(ck, i, done)

    def ack_offsets_soon(
        self, *, group: str, topic: str, batch: ReceiptHandle, offsets: Iterable[int], done: AckDone
    ) -> None:
        """:meth:`ack_soon` for several messages of one popped batch at once (what a batch
        ack names): ``batch`` is the handle of any of them; ``done`` is called once per
        offset, with the refusal for those no longer in flight."""
        for offset in offsets:
            try:
                ck, i = self._locate(group, topic, batch, offset, live=True)
            except BrokerError as exc:
                _call(done, exc)
                continue
            self._queue_ack(ck, i, done)

    @property
    def sync_flush(self) -> bool:
        return self.store.config.flush_disk_type is FlushDiskType.SYNC_FLUSH

    def _queue_ack(self, ck: CheckPoint, i: int, done: AckDone) -> None:
        # Acks arriving together (a client acks a batch at once) share one revive-log record
        # per check point, written before any of them is answered.
        waiting = self._pending_acks.get(ck.key)
        if waiting is None:
            self._pending_acks[ck.key] = (ck, [(i, done)])
        else:
            waiting[1].append((i, done))
        if not self._ack_flush_scheduled:
            self._ack_flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush_acks)

    def _flush_acks(self) -> None:
        self._ack_flush_scheduled = False
        pending, self._pending_acks = self._pending_acks, {}
        for ck, waiters in pending.values():
            settled = sorted({i for i, _ in waiters if ck.is_pending(i)})
            try:
                self._resolve(ck, settled)
            except BrokerError as exc:
                for _, done in waiters:
                    _call(done, exc)
                continue
            answered: set[int] = set()
            for i, done in waiters:
                if i in settled and i not in answered:
                    answered.add(i)
                    _call(done, None)
                else:  # acked twice, or redelivered since the handle was checked
                    _call(
                        done,
                        ReceiptHandleExpiredError(
                            f"the message at offset {ck.offsets[i]} is not in flight any more"
                        ),
                    )

    async def change_invisible(
        self, *, group: str, topic: str, receipt_handle: str, invisible_ms: int
    ) -> str:
        """Make a popped message invisible for ``invisible_ms`` from now; its new receipt
        handle (the old one is spent)."""
        if not 0 <= invisible_ms <= MAX_INVISIBLE_MS:
            raise MessageIllegalError(f"invisible time {invisible_ms} ms is outside [0, {MAX_INVISIBLE_MS}]")
        handle = self._decode(receipt_handle)
        ck, i = self._in_flight(group, topic, receipt_handle, live=True)
        offset = ck.offsets[i]
        revive_qid = ORDER_REVIVE_QID if ck.orderly else self._take_revive_qid()
        fresh = CheckPoint(
            topic=ck.topic,
            group=group,
            queue_id=ck.queue_id,
            start_offset=offset,
            pop_time=self._unique_pop_time([(ck.topic, group, ck.queue_id, offset)], now_ms()),
            invisible_time=invisible_ms,
            offsets=[offset],
            attempts=[ck.attempts[i]],
            revive_qid=revive_qid,
            revive_queue=self._revive_queue(revive_qid, ck.queue_id),
            broker_name=self.broker_name,
            orderly=ck.orderly,
        )
        # The new check point first: a crash between the two records redelivers the message
        # (once, at the earlier time) instead of losing it.
        self._write_checkpoint(fresh)
        self._resolve(ck, [i])
        await self._durable()
        return ReceiptHandle(
            offset,
            fresh.pop_time,
            invisible_ms,
            revive_qid,
            handle.topic_type,
            self.broker_name,
            ck.queue_id,
            offset,
            handle.commit_log_offset,
        ).encode()

    async def forward_to_dlq(self, *, group: str, topic: str, receipt_handle: str) -> None:
        """Move a popped message to ``%DLQ%<group>`` now and settle its handle (its invisible
        time may have passed, as long as it was not redelivered yet)."""
        ck, i = self._in_flight(group, topic, receipt_handle, live=False)
        msg = self._load(ck.topic, ck.queue_id, ck.offsets[i])
        if msg is not None:
            self._dead_letter(ck, msg, ck.attempts[i])
        self._resolve(ck, [i])
        await self._durable()

    # -- popping ------------------------------------------------------------------------------

    def _check(
        self,
        group: str,
        topic: str,
        queue_id: int | None,
        max_messages: int,
        invisible_ms: int,
        expression_type: str,
        expression: str,
    ) -> _Filter:
        config = self.config
        if not config.readable:
            raise NoPermissionError(f"the broker[{config.broker_ip1}] pop message is forbidden")
        group_config = self.groups.find(group)
        if group_config is None:
            raise SubscriptionGroupNotExistError(f"subscription group [{group}] does not exist")
        if not group_config.consume_enable:
            raise NoPermissionError(f"subscription group no permission, {group}")
        topic_config = self.topics.get(topic)
        if topic_config is None:
            raise TopicNotExistError(f"topic[{topic}] not exist, apply first please!")
        if not topic_config.perm & _PERM_READ:
            raise NoPermissionError(f"the topic[{topic}] peeking message is forbidden")
        if queue_id is not None and queue_id >= 0 and queue_id >= topic_config.read_queue_nums:
            raise MessageIllegalError(
                f"queueId[{queue_id}] is illegal, topic:[{topic}] readQueueNums:[{topic_config.read_queue_nums}]"
            )
        if not 0 < max_messages <= MAX_POP_MESSAGES:
            raise MessageIllegalError(f"max messages {max_messages} is outside [1, {MAX_POP_MESSAGES}]")
        if not 0 <= invisible_ms <= MAX_INVISIBLE_MS:
            raise MessageIllegalError(f"invisible time {invisible_ms} ms is outside [0, {MAX_INVISIBLE_MS}]")
        if not is_tag_type(expression_type):
            # SQL92 (enablePropertyFilter): the store evaluates it on each record's properties.
            if not config.enable_property_filter:
                raise MessageIllegalError(
                    f"The broker does not support consumer to filter message by {expression_type}"
                )
            try:
                return _Filter(None, None, record_filter(compile_expression(expression, expression_type)))
            except Sql92Error as exc:
                raise SubscriptionParseFailedError(
                    f"parse the consumer's subscription failed: {exc}"
                ) from None
        tags = parse_tag_expression(expression)
        return _Filter(tag_codes(expression), frozenset(tags) if tags else None, None)

    def _pop_now(
        self,
        group: str,
        topic: str,
        queue_id: int | None,
        max_messages: int,
        invisible_ms: int,
        flt: _Filter,
        fifo: bool,
        init_mode: int,
        with_handles: bool,
    ) -> PopResult:
        now = now_ms()
        self._revive_due(now)
        topic_config = self.topics.get(topic)
        queue_nums = topic_config.read_queue_nums if topic_config is not None else 0
        if queue_id is not None and queue_id >= 0:
            queues = [queue_id]
        else:
            start = random.randrange(queue_nums) if queue_nums else 0
            queues = [(start + i) % queue_nums for i in range(queue_nums)]
        retry = pop_retry_topic(group, topic)
        self._redelivers(retry, topic)
        targets = [(topic, q) for q in queues]
        if not fifo:
            retry_queues = [(retry, q) for q in self.store.queue_ids(retry)]
            # Now and then the retry topic first, so a busy topic does not starve redeliveries.
            targets = retry_queues + targets if random.random() < 0.2 else targets + retry_queues
        reads: list[_Read] = []
        rest = 0
        wanted = max_messages
        for stored_topic, q in targets:
            if wanted <= 0:
                break
            if fifo:
                read = self._read_orderly(group, stored_topic, q, wanted, flt, init_mode, now)
            else:
                read = self._read_queue(group, stored_topic, q, wanted, flt, init_mode)
            if read is None:
                continue
            rest += max(0, self.store.get_max_offset(stored_topic, q) - read.next_offset)
            if read.messages:
                reads.append(read)
                wanted -= len(read.messages)
            elif not read.superseded:
                self._advance(group, stored_topic, q, read.next_offset)
        result = PopResult(invisible_time=invisible_ms, rest=rest)
        if not reads:
            result.pop_time = now
            return result
        revive_qid = ORDER_REVIVE_QID if fifo else self._take_revive_qid()
        pop_time = self._unique_pop_time(
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
                revive_queue=self._revive_queue(revive_qid, read.queue_id),
                broker_name=self.broker_name,
                orderly=fifo,
            )
            self._write_checkpoint(ck)
            result.checkpoints.append(ck)
            if read.superseded:
                by_ck: dict[CheckPointKey, tuple[CheckPoint, list[int]]] = {}
                for old, i in read.superseded:
                    by_ck.setdefault(old.key, (old, []))[1].append(i)
                for old, indices in by_ck.values():
                    self._resolve(old, indices, wake=False)
            else:
                self._advance(group, read.topic, read.queue_id, read.next_offset)
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
                        self.broker_name,
                        read.queue_id,
                        msg.queue_offset,
                        msg.commit_log_offset,
                    ).encode()
                result.messages.append(
                    PoppedMessage(msg, record, topic, handle, attempt, pop_time, invisible_ms)
                )
        return result

    def _start_offset(self, group: str, topic: str, queue_id: int, init_mode: int) -> int:
        # The consumer-offset table is where a POP group's progress lives (what mqadmin shows
        # and resets), shared with pull groups, each group under its own key.
        offset = self.offsets.query(group, topic, queue_id)
        if offset >= 0:
            return offset
        store = self.store
        low = store.get_min_offset(topic, queue_id)
        if topic.startswith(RETRY_PREFIX) or init_mode != INIT_MODE_MAX or low <= 0:
            # A queue still holding its first message is read from there (a group that
            # pops right after the first sends gets them), as 4.x brokers do for young queues.
            offset = low
        else:
            offset = store.get_max_offset(topic, queue_id)
        self.offsets.commit(group, topic, queue_id, offset)
        return offset

    def _advance(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        if self.offsets.query(group, topic, queue_id) != offset:
            self.offsets.commit(group, topic, queue_id, offset)

    def _read_queue(
        self,
        group: str,
        topic: str,
        queue_id: int,
        wanted: int,
        flt: _Filter,
        init_mode: int,
    ) -> _Read | None:
        offset = self._start_offset(group, topic, queue_id, init_mode)
        messages: list[tuple[MessageExt, bytes, int]] = []
        store = self.store
        for _ in range(8):
            result = store.get_messages(
                group, topic, queue_id, offset, wanted - len(messages), flt.codes, flt.matches
            )
            if result.status is GetStatus.FOUND:
                for buf in result.buffers:
                    record = bytes(buf)
                    msg = decode_record(record)[0]
                    if flt.tags is not None and msg.tags not in flt.tags:
                        continue  # a tag-hash collision: not for this group
                    messages.append((msg, record, msg.reconsume_times + 1))
            moved = result.next_begin_offset != offset
            offset = result.next_begin_offset
            # Scan on only past entries that did not match (or an offset corrected forward).
            if messages or not moved:
                break
        return _Read(topic, queue_id, messages, offset)

    def _read_orderly(
        self,
        group: str,
        topic: str,
        queue_id: int,
        wanted: int,
        flt: _Filter,
        init_mode: int,
        now: int,
    ) -> _Read | None:
        held = self._orderly.get((group, topic, queue_id))
        if held:
            if any(ck.deadline > now for ck in held):
                return None  # a batch of this queue is out: the queue waits for it
            pending = sorted(
                ((ck.offsets[i], ck, i) for ck in held for i in ck.pending()), key=lambda entry: entry[0]
            )
            messages: list[tuple[MessageExt, bytes, int]] = []
            superseded: list[tuple[CheckPoint, int]] = []
            for offset, ck, i in pending[:wanted]:
                loaded = self._load_record(topic, queue_id, offset)
                superseded.append((ck, i))
                if loaded is not None:
                    messages.append((loaded[0], loaded[1], ck.attempts[i] + 1))
            if superseded and not messages:
                # Every message of the batch is gone from the store: nothing to hand out.
                by_ck: dict[CheckPointKey, tuple[CheckPoint, list[int]]] = {}
                for ck, i in superseded:
                    by_ck.setdefault(ck.key, (ck, []))[1].append(i)
                for ck, indices in by_ck.values():
                    self._resolve(ck, indices, wake=False)
                return None
            offset = self.offsets.query(group, topic, queue_id)
            return _Read(topic, queue_id, messages, offset, superseded)
        return self._read_queue(group, topic, queue_id, wanted, flt, init_mode)

    def _orderly_opens(self, group: str, topic: str, queue_id: int | None) -> int | None:
        """The earliest time a blocked orderly queue of ``topic`` opens again."""
        soonest: int | None = None
        for (g, t, q), held in self._orderly.items():
            if g != group or t != topic or (queue_id is not None and queue_id >= 0 and q != queue_id):
                continue
            if held:
                opens = max(ck.deadline for ck in held)
                soonest = opens if soonest is None else min(soonest, opens)
        return soonest

    def _unique_pop_time(self, keys: Iterable[tuple[str, str, int, int]], now: int) -> int:
        """``now``, or a little later if a check point of the same queue and start offset
        already has that pop time (acks name check points by it)."""
        keys = list(keys)
        pop_time = now
        while any((t, g, q, so, pop_time) in self.checkpoints for t, g, q, so in keys):
            pop_time += 1
        return pop_time

    def _take_revive_qid(self) -> int:
        qid = self._next_revive_qid
        self._next_revive_qid = (qid + 1) % REVIVE_QUEUE_NUM
        return qid

    @staticmethod
    def _revive_queue(revive_qid: int, queue_id: int) -> int:
        return queue_id % REVIVE_QUEUE_NUM if revive_qid == ORDER_REVIVE_QID else revive_qid

    # -- handles ------------------------------------------------------------------------------

    @staticmethod
    def _decode(receipt_handle: str) -> ReceiptHandle:
        try:
            return ReceiptHandle.decode(receipt_handle)
        except ReceiptHandleError as exc:
            raise InvalidReceiptHandleError(str(exc)) from None

    def _in_flight(
        self, group: str, topic: str, receipt_handle: str, *, live: bool
    ) -> tuple[CheckPoint, int]:
        """The check point and index a handle names, while its message is in flight."""
        handle = self._decode(receipt_handle)
        return self._locate(group, topic, handle, handle.queue_offset, live=live)

    def _locate(
        self, group: str, topic: str, handle: ReceiptHandle, offset: int, *, live: bool
    ) -> tuple[CheckPoint, int]:
        """The check point of ``handle`` and the index of ``offset`` in it, while in flight."""
        if handle.broker_name != self.broker_name:
            raise InvalidReceiptHandleError(
                f"the receipt handle is from broker {handle.broker_name}, not {self.broker_name}"
            )
        real_topic = handle.real_topic(topic, group)
        ck = self.checkpoints.get(
            (real_topic, group, handle.queue_id, handle.ck_queue_offset, handle.pop_time)
        )
        i = ck.index.get(offset) if ck is not None else None
        if ck is None or i is None or not ck.is_pending(i):
            raise ReceiptHandleExpiredError(
                f"the message {real_topic}[{handle.queue_id}]@{offset} is not in flight "
                f"for group {group} under this receipt handle (acked, redelivered or expired)"
            )
        if live and ck.deadline <= now_ms():
            raise ReceiptHandleExpiredError(
                f"the receipt handle of {real_topic}[{handle.queue_id}]@{offset} expired"
            )
        return ck, i

    # -- revive-log records -------------------------------------------------------------------

    def _put_record(self, queue: int, tag: str, body: bytes) -> int:
        if not self._revive_topic_known:
            # Created on first use, so a broker nobody pops from lists no revive topic.
            self.topics.ensure(self.revive_topic, REVIVE_QUEUE_NUM, PERM_READ_WRITE)
            self._revive_topic_known = True
        writer = self.writer
        result = writer.put(
            writer.build(self.revive_topic, queue, body, {PropertyKey.TAGS: tag}, born_host=writer.store_host)
        )
        if not result.ok:
            raise ServerSystemError(
                f"POP state cannot be written to {self.revive_topic}: {result.remark or result.status.name}"
            )
        self._last_put = result
        return result.queue_offset

    async def _durable(self) -> None:
        """Under SYNC_FLUSH, return once the POP records written so far are on disk (the
        commit log flushes in order: the last one covers the rest); at once otherwise."""
        last = self._last_put
        if last is not None:
            status = await self.store.wait_flushed(last)
            if status is not PutStatus.PUT_OK:
                log.warning("POP: state records not flushed in time (%s)", status.name)

    def _write_checkpoint(self, ck: CheckPoint) -> None:
        ck.revive_offset = self._put_record(ck.revive_queue, CK_TAG, ck.encode())
        self.checkpoints[ck.key] = ck
        if ck.orderly:
            self._orderly.setdefault((ck.group, ck.topic, ck.queue_id), []).append(ck)
        self._schedule(ck)

    def _resolve(self, ck: CheckPoint, indices: list[int], *, wake: bool = True) -> None:
        """Record ``indices`` of ``ck`` as handled (acked, superseded, redelivered or
        dead-lettered): written before the state changes, so a crash cannot undo it."""
        offsets = [ck.offsets[i] for i in indices if ck.is_pending(i)]
        if not offsets:
            return
        tag, body = encode_ack(ck, offsets)
        self._put_record(ck.revive_queue, tag, body)
        self._mark(ck, offsets)
        if ck.finished:
            self._forget(ck)
        if wake and ck.orderly:
            self._wake(self._retry_of.get(ck.topic, ck.topic))

    def _mark(self, ck: CheckPoint, offsets: list[int]) -> None:
        for offset in offsets:
            i = ck.index.get(offset)
            if i is not None:
                ck.done |= 1 << i

    def _forget(self, ck: CheckPoint) -> None:
        self.checkpoints.pop(ck.key, None)
        if ck.orderly:
            key = (ck.group, ck.topic, ck.queue_id)
            held = self._orderly.get(key)
            if held is not None:
                if ck in held:
                    held.remove(ck)
                if not held:
                    del self._orderly[key]

    def _retry_of_topic(self, topic: str, group: str) -> None:
        """Remember which topic a POP retry topic of ``group`` redelivers (for waking pops)."""
        prefix = pop_retry_topic(group, "")
        if topic.startswith(prefix) and topic not in self._retry_of:
            self._redelivers(topic, topic[len(prefix) :])

    def _redelivers(self, retry: str, topic: str) -> None:
        """Remember that POP retry topic ``retry`` redelivers ``topic``: its arrivals wake the
        pops waiting for ``topic``."""
        if retry not in self._retry_of:
            self._retry_of[retry] = topic
            self.arrivals.alias(retry, topic)

    # -- revive -------------------------------------------------------------------------------

    def _schedule(self, ck: CheckPoint) -> None:
        self._seq += 1
        heapq.heappush(self._deadlines, (ck.deadline, self._seq, ck.key))
        wakeup = self._revive_wakeup
        if wakeup is not None and self._deadlines[0][2] == ck.key:
            wakeup.set()

    def _revive_due(self, now: int) -> None:
        """Redeliver or dead-letter what every check point past its invisible time left."""
        deadlines = self._deadlines
        while deadlines and deadlines[0][0] <= now:
            due, _, key = heapq.heappop(deadlines)
            ck = self.checkpoints.get(key)
            if ck is None or ck.deadline != due:
                continue
            try:
                self._revive(ck)
            except BrokerError as exc:
                log.warning("POP: redelivery of %s failed, trying again later: %s", key, exc)
                self._seq += 1
                heapq.heappush(deadlines, (now + REVIVE_RETRY_MS, self._seq, key))
                ck.invisible_time = now + REVIVE_RETRY_MS - ck.pop_time

    def _max_times(self, group: str) -> int:
        config = self.groups.get(group)
        return config.retry_max_times if config is not None else DEFAULT_RETRY_MAX_TIMES

    def _revive(self, ck: CheckPoint) -> None:
        max_times = self._max_times(ck.group)
        pending = ck.pending()
        if ck.orderly:
            # An orderly batch is handed out again by the next pop of its queue; only what
            # has used up its deliveries leaves now.
            dead = [i for i in pending if ck.attempts[i] > max_times]
            for i in dead:
                msg = self._load(ck.topic, ck.queue_id, ck.offsets[i])
                if msg is not None:
                    self._dead_letter(ck, msg, ck.attempts[i])
            self._resolve(ck, dead, wake=False)
            self._wake(self._retry_of.get(ck.topic, ck.topic))
            return
        handled: list[int] = []
        try:
            for i in pending:
                msg = self._load(ck.topic, ck.queue_id, ck.offsets[i])
                if msg is not None:
                    if msg.reconsume_times >= max_times:
                        self._dead_letter(ck, msg, msg.reconsume_times + 1)
                    else:
                        self._redeliver(ck, msg)
                handled.append(i)
        finally:
            self._resolve(ck, handled, wake=False)

    def _original_topic(self, ck: CheckPoint, msg: MessageExt) -> str:
        """The topic the consumer popped: the check point's, or the one its retry topic
        redelivers (a property the producer set does not decide it)."""
        if not ck.topic.startswith(RETRY_PREFIX):
            return ck.topic
        return self._retry_of.get(ck.topic) or msg.properties.get(PropertyKey.RETRY_TOPIC) or ck.topic

    def _redeliver(self, ck: CheckPoint, msg: MessageExt) -> None:
        props = dict(msg.properties)
        original = self._original_topic(ck, msg)
        props[PropertyKey.RETRY_TOPIC] = original
        retry = pop_retry_topic(ck.group, original)
        self._redelivers(retry, original)
        self._prepare_copy(props, msg, ck)
        self.topics.ensure(retry, 1, PERM_READ_WRITE)
        result = self.writer.put(
            self.writer.build_copy(msg, retry, 0, props, reconsume_times=msg.reconsume_times + 1)
        )
        if not result.ok:
            raise ServerSystemError(f"redelivery to {retry} failed: {result.remark or result.status.name}")
        self.redelivered += 1

    def _dead_letter(self, ck: CheckPoint, msg: MessageExt, attempts: int) -> None:
        props = dict(msg.properties)
        original = self._original_topic(ck, msg)
        self._prepare_copy(props, msg, ck)
        props[DLQ_ORIGIN_TOPIC] = original
        props[DLQ_ORIGIN_MESSAGE_ID] = props[PropertyKey.UNIQ_CLIENT_MESSAGE_ID_KEYIDX]
        props[PropertyKey.RETRY_TOPIC] = original
        dlq = dlq_topic(ck.group)
        self.topics.ensure(dlq, 1, PERM_READ_WRITE)
        result = self.writer.put(self.writer.build_copy(msg, dlq, 0, props, reconsume_times=attempts))
        if not result.ok:
            raise ServerSystemError(f"dead-lettering to {dlq} failed: {result.remark or result.status.name}")
        self.dead_lettered += 1
        log.info("POP: %s of group %s to %s after %d deliveries", msg.msg_id, ck.group, dlq, attempts)

    @staticmethod
    def _prepare_copy(props: dict[str, str], msg: MessageExt, ck: CheckPoint) -> None:
        for key in _DELAYING:
            props.pop(key, None)
        # The copy keeps the message's id, so every delivery of it shows the same one.
        props.setdefault(PropertyKey.UNIQ_CLIENT_MESSAGE_ID_KEYIDX, msg.msg_id)
        props.setdefault(PropertyKey.ORIGIN_MESSAGE_ID, msg.msg_id)
        props.setdefault(FIRST_POP_TIME, str(ck.pop_time))

    def _load_record(self, topic: str, queue_id: int, offset: int) -> tuple[MessageExt, bytes] | None:
        entries = self.store.read_consume_queue(topic, queue_id, offset, 1)
        if not entries:
            return None
        commit_log_offset, size, _ = entries[0]
        record = self.store.read_record(commit_log_offset, size)
        if record is None:
            return None
        try:
            return decode_record(record)[0], record
        except ProtocolError:
            return None

    def _load(self, topic: str, queue_id: int, offset: int) -> MessageExt | None:
        loaded = self._load_record(topic, queue_id, offset)
        if loaded is None:
            log.warning("POP: %s[%d]@%d is gone from the store; not delivered again", topic, queue_id, offset)
            return None
        return loaded[0]

    async def _revive_periodically(self) -> None:
        wakeup = self._revive_wakeup
        assert wakeup is not None
        while True:
            wakeup.clear()
            now = now_ms()
            self._revive_due(now)
            delay = (self._deadlines[0][0] - now_ms()) / 1000 if self._deadlines else 3600.0
            if delay > 0:
                try:
                    await asyncio.wait_for(wakeup.wait(), timeout=delay)
                except TimeoutError:
                    pass

    # -- progress -----------------------------------------------------------------------------

    def commit_progress(self) -> None:
        """Commit how far the revive log is settled: recovery replays it from there."""
        lowest: dict[int, int] = {}
        for ck in self.checkpoints.values():
            if ck.revive_offset >= 0:
                current = lowest.get(ck.revive_queue)
                if current is None or ck.revive_offset < current:
                    lowest[ck.revive_queue] = ck.revive_offset
        for queue in range(REVIVE_QUEUE_NUM):
            settled = lowest.get(queue, self.store.get_max_offset(self.revive_topic, queue))
            committed = self.offsets.query(REVIVE_GROUP, self.revive_topic, queue)
            # An empty revive queue leaves no entry (a broker nobody pops from keeps its
            # consumerOffset.json as it was).
            if settled != committed and (settled > 0 or committed >= 0):
                self.offsets.commit(REVIVE_GROUP, self.revive_topic, queue, settled)

    async def _commit_progress_periodically(self) -> None:
        while True:
            await asyncio.sleep(PROGRESS_INTERVAL)
            self.commit_progress()

    # -- long polling -------------------------------------------------------------------------

    def _wake(self, topic: str) -> None:
        self.arrivals.wake(topic)

    @property
    def waiting(self) -> int:
        return self.arrivals.waiting

    def on_arrival(self, topic: str, queue_id: int, max_offset: int, tags_code: int) -> None:
        """Store listener for a service with a registry of its own (the broker registers its
        one :class:`~aiorocketmq.broker.arrivals.Arrivals` instead): wake the pops waiting for
        ``topic`` (or for what its POP retry topic redelivers)."""
        self.arrivals.on_arrival(topic, queue_id, max_offset, tags_code)
