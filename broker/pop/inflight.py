"""The in-flight table of POP and the revive log it is written to: what every other part of
:class:`~.service.PopService` reads and changes.

It owns the check points handed out and not yet settled (by key, and the orderly ones by the
queue they block), the deadlines at which each comes due, which POP retry topic redelivers
which topic, and the one way any of it changes: a record put to
``rmq_sys_REVIVE_LOG_<cluster>`` first (:meth:`InFlight.write_checkpoint`,
:meth:`InFlight.resolve`), the table second, so a crash in between cannot undo a settled
message or lose a handed-out one. Popping (:mod:`.receive`), acks (:mod:`.acks`), the revive
timer (:mod:`.revive`) and recovery (:mod:`.recovery`) each work on this one table; none of
them holds POP state of its own but their counters and queues of work.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
from collections.abc import Iterable

from aiorocketmq.broker.store import MessageStore, PutResult, PutStatus
from aiorocketmq.protocol.codes import PERM_READ_WRITE
from aiorocketmq.protocol.errors import ProtocolError, ServerSystemError
from aiorocketmq.protocol.message import MessageExt, PropertyKey, decode_record, stored_properties
from aiorocketmq.protocol.pop import ORDER_REVIVE_QID, pop_retry_topic

from ..arrivals import Arrivals
from ..topics import TopicTable
from ..writer import MessageWriter
from .checkpoint import CK_TAG, CheckPoint, CheckPointKey, encode_ack, revive_topic

log = logging.getLogger(__name__)

#: Queues of the revive log (Apache's ``reviveQueueNum``).
REVIVE_QUEUE_NUM = 8
#: A revive-log record's properties (its tag alone) in stored form, by tag: one record is
#: written per ack, so the encoding is done once per tag.
_TAG_PROPERTIES: dict[str, str] = {}


class InFlight:
    """The check points of one broker in flight, their deadlines, and the revive log."""

    def __init__(
        self,
        *,
        cluster: str,
        broker_name: str,
        store: MessageStore,
        writer: MessageWriter,
        topics: TopicTable,
        arrivals: Arrivals,
    ) -> None:
        self.store = store
        self.writer = writer
        self.topics = topics
        self.arrivals = arrivals
        self.revive_topic = revive_topic(cluster)
        self.broker_name = broker_name
        #: In-flight check points by key.
        self.checkpoints: dict[CheckPointKey, CheckPoint] = {}
        #: Orderly check points of each (group, topic, queue): what blocks the queue.
        self.orderly: dict[tuple[str, str, int], list[CheckPoint]] = {}
        #: ``(deadline, sequence, key)``, a heap: the check point that comes due next first.
        self.deadlines: list[tuple[int, int, CheckPointKey]] = []
        self._seq = 0
        #: Set when a check point due sooner than all others is scheduled (the revive timer's).
        self.revive_wakeup: asyncio.Event | None = None
        self._next_revive_qid = 0
        #: POP retry topic -> the topic it redelivers.
        self.retry_of: dict[str, str] = {}
        self._last_put: PutResult | None = None
        self._revive_topic_known = False

    @property
    def in_flight(self) -> int:
        """Messages handed out and not yet acked, redelivered or dead-lettered."""
        return sum(len(ck.offsets) - bin(ck.done).count("1") for ck in self.checkpoints.values())

    # -- revive-log records -------------------------------------------------------------------

    def put_record(self, queue: int, tag: str, body: bytes) -> int:
        if not self._revive_topic_known:
            # Created on first use, so a broker nobody pops from lists no revive topic.
            self.topics.ensure(self.revive_topic, REVIVE_QUEUE_NUM, PERM_READ_WRITE)
            self._revive_topic_known = True
        writer = self.writer
        encoded = _TAG_PROPERTIES.get(tag)
        if encoded is None:
            encoded = _TAG_PROPERTIES[tag] = stored_properties({PropertyKey.TAGS: tag})
        result = writer.put(
            writer.build(
                self.revive_topic,
                queue,
                body,
                {PropertyKey.TAGS: tag},
                born_host=writer.store_host,
                encoded=encoded,
            )
        )
        if not result.ok:
            raise ServerSystemError(
                f"POP state cannot be written to {self.revive_topic}: {result.remark or result.status.name}"
            )
        self._last_put = result
        return result.queue_offset

    async def durable(self) -> None:
        """Under SYNC_FLUSH, return once the POP records written so far are on disk (the
        commit log flushes in order: the last one covers the rest); at once otherwise."""
        last = self._last_put
        if last is not None:
            status = await self.store.wait_flushed(last)
            if status is not PutStatus.PUT_OK:
                log.warning("POP: state records not flushed in time (%s)", status.name)

    def write_checkpoint(self, ck: CheckPoint) -> None:
        ck.revive_offset = self.put_record(ck.revive_queue, CK_TAG, ck.encode())
        self.checkpoints[ck.key] = ck
        if ck.orderly:
            self.orderly.setdefault((ck.group, ck.topic, ck.queue_id), []).append(ck)
        self.schedule(ck)

    def resolve(self, ck: CheckPoint, indices: list[int], *, wake: bool = True) -> None:
        """Record ``indices`` of ``ck`` as handled (acked, superseded, redelivered or
        dead-lettered): written before the state changes, so a crash cannot undo it."""
        offsets = [ck.offsets[i] for i in indices if ck.is_pending(i)]
        if not offsets:
            return
        tag, body = encode_ack(ck, offsets)
        self.put_record(ck.revive_queue, tag, body)
        self.mark(ck, offsets)
        if ck.finished:
            self.forget(ck)
        if wake and ck.orderly:
            self.wake(self.retry_of.get(ck.topic, ck.topic))

    def mark(self, ck: CheckPoint, offsets: list[int]) -> None:
        for offset in offsets:
            i = ck.index.get(offset)
            if i is not None:
                ck.done |= 1 << i

    def forget(self, ck: CheckPoint) -> None:
        self.checkpoints.pop(ck.key, None)
        if ck.orderly:
            key = (ck.group, ck.topic, ck.queue_id)
            held = self.orderly.get(key)
            if held is not None:
                if ck in held:
                    held.remove(ck)
                if not held:
                    del self.orderly[key]

    # -- which topic a retry topic redelivers -------------------------------------------------

    def retry_of_topic(self, topic: str, group: str) -> None:
        """Remember which topic a POP retry topic of ``group`` redelivers (for waking pops)."""
        prefix = pop_retry_topic(group, "")
        if topic.startswith(prefix) and topic not in self.retry_of:
            self.redelivers(topic, topic[len(prefix) :])

    def redelivers(self, retry: str, topic: str) -> None:
        """Remember that POP retry topic ``retry`` redelivers ``topic``: its arrivals wake the
        pops waiting for ``topic``."""
        if retry not in self.retry_of:
            self.retry_of[retry] = topic
            self.arrivals.alias(retry, topic)

    def wake(self, topic: str) -> None:
        self.arrivals.wake(topic)

    # -- deadlines ----------------------------------------------------------------------------

    def schedule(self, ck: CheckPoint) -> None:
        self.push_deadline(ck.deadline, ck.key)
        wakeup = self.revive_wakeup
        if wakeup is not None and self.deadlines[0][2] == ck.key:
            wakeup.set()

    def push_deadline(self, due: int, key: CheckPointKey) -> None:
        self._seq += 1
        heapq.heappush(self.deadlines, (due, self._seq, key))

    # -- what a new check point is named by ---------------------------------------------------

    def unique_pop_time(self, keys: Iterable[tuple[str, str, int, int]], now: int) -> int:
        """``now``, or a little later if a check point of the same queue and start offset
        already has that pop time (acks name check points by it)."""
        keys = list(keys)
        pop_time = now
        while any((t, g, q, so, pop_time) in self.checkpoints for t, g, q, so in keys):
            pop_time += 1
        return pop_time

    def take_revive_qid(self) -> int:
        qid = self._next_revive_qid
        self._next_revive_qid = (qid + 1) % REVIVE_QUEUE_NUM
        return qid

    @staticmethod
    def revive_queue(revive_qid: int, queue_id: int) -> int:
        return queue_id % REVIVE_QUEUE_NUM if revive_qid == ORDER_REVIVE_QID else revive_qid

    # -- the messages check points name -------------------------------------------------------

    def load_record(self, topic: str, queue_id: int, offset: int) -> tuple[MessageExt, bytes] | None:
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

    def load(self, topic: str, queue_id: int, offset: int) -> MessageExt | None:
        loaded = self.load_record(topic, queue_id, offset)
        if loaded is None:
            log.warning("POP: %s[%d]@%d is gone from the store; not delivered again", topic, queue_id, offset)
            return None
        return loaded[0]
