"""Compiled with mypyc (aiorocketmq/compiled.py, which lists the rules): declared, typed
attributes only; no monkeypatching, setattr or frame tricks; no await in except/finally.

Dispatch: what follows an append. Each record the commit log took gets its consume-queue entry
(half and rolled-back transaction messages get none) and its index keys, and the arrival
listeners (long polling, the delay and timer services) are told the queue's new end. The same
for the records recovery verifies and for the bytes a slave replicates.

Apart from the append (:mod:`.store`) because three writers share it: a put, recovery, and
replication.

Controller mode sets a *dispatch limit* (:attr:`Dispatcher.limit`: the confirm offset, which
every SyncStateSet member holds; RocketMQ's ``getReputEndOffset``): a record that ends past it
is appended but *held*, neither in its consume queue nor the index nor told to the listeners,
until the limit passes it; then the held records are dispatched in log order from
:attr:`Dispatcher.reput_offset` as a slave's are (:meth:`Dispatcher.dispatch_replicated`). A put
behind held records takes its queue offset after theirs (:attr:`Dispatcher.held_next`).
Without a limit (every other broker) a put pays one attribute check for it.

A put calls :meth:`Dispatcher.dispatch_one` or :meth:`Dispatcher.dispatch_batch` once per
request, which loop over the batch themselves. The consume-queue and index timestamps it keeps
are what the logics flush checkpoints (:class:`.flush.LogicsFlusher`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from aiorocketmq.protocol.codes import (
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    TRANSACTION_TYPE_MASK,
)
from aiorocketmq.protocol.message import KEY_SEPARATOR, PropertyKey, decode_properties, tags_code
from aiorocketmq.protocol.names import SCHEDULE_TOPIC, TIMER_OUT_MS, TIMER_TOPIC
from aiorocketmq.protocol.speedups import compiled as _compiled

from .commit_log import Appended, CommitLog, ScannedRecord
from .consume_queue import ConsumeQueue
from .index import Index
from .messages import StoreMessage
from .queues import QueueRegistry

log = logging.getLogger(__name__)

#: The compiled reader of a batch's tags codes (None: it cannot tell, the comprehension
#: does), when the codecs are active (aiorocketmq.protocol.speedups).
_tags_codes = _compiled.tags_codes if _compiled is not None else None

_TX_MASK = TRANSACTION_TYPE_MASK
_TX_PREPARED = TRANSACTION_PREPARED_TYPE
_TX_ROLLBACK = TRANSACTION_ROLLBACK_TYPE
#: Replicated records dispatched together (their index keys go in as one batch).
_CHUNK = 512
#: No dispatch limit.
NO_LIMIT = 1 << 62

ArrivalListener = Callable[[str, int, int, int], None]


class Dispatcher:
    """Consume-queue entries, index keys and arrival notices for appended records."""

    def __init__(
        self, queues: QueueRegistry, commit_log: CommitLog, index: Index | None, delay_levels: list[int]
    ) -> None:
        self._queues = queues
        self._commit_log = commit_log
        self._index = index
        self._delay_levels = delay_levels
        #: Store time of the last record given consume-queue entries / index keys.
        self.logics_timestamp = 0
        self.index_timestamp = 0
        #: Arrival listeners with the topic each watches (None: every topic).
        self.listeners: list[tuple[str | None, ArrivalListener]] = []
        #: The listeners of each topic that has had arrivals, in registration order.
        self.topic_listeners: dict[str, tuple[ArrivalListener, ...]] = {}
        #: A slave: where dispatching replicated records stands in the commit log (with a
        #: limit, on a master too: the first record not dispatched, or the log's end).
        self.reput_offset = 0
        #: Controller mode: the confirm offset; records ending past it are held. None: no limit.
        self.limit: Callable[[], int] | None = None
        #: Called after a put was held (no arrival tells the HA writers about it).
        self.on_held: Callable[[], None] | None = None
        #: The limit as last seen (what the checkpoint keeps).
        self.confirmed = 0
        #: With a limit: records may be held past :attr:`reput_offset` (False: none are).
        self.holding = False
        #: The queue offset after the held records of each queue that has some, and whether
        #: it is known (else :meth:`scan_held` reads it from the log).
        self.held_next: dict[tuple[str, int], int] = {}
        self.held_known = True

    # -- puts ------------------------------------------------------------------------------------

    def dispatch_one(
        self, msg: StoreMessage, cq: ConsumeQueue | None, queue_offset: int, appended: Appended
    ) -> None:
        offset = appended.offsets[0]
        stamp = appended.store_timestamps[0]
        dispatched = appended.next_queue_offset > queue_offset
        if dispatched:
            if cq is None:
                cq = self._queues.create(msg.topic, msg.queue_id)
            cq.put(offset, appended.sizes[0], msg.tags_code, queue_offset)
            self.logics_timestamp = stamp
        index = self._index
        if index is not None and (msg.keys or msg.uniq_key):
            written = index.build(msg.topic, offset, stamp, msg.sys_flag, msg.keys, msg.uniq_key)
            if written is not None:
                written.write_header()
            # Also past keys the disk had no room for: they are counted, not retried.
            self.index_timestamp = stamp
        if dispatched and self.listeners:
            self.notify(msg.topic, msg.queue_id, ((queue_offset + 1, msg.tags_code),))

    def dispatch_batch(
        self, msgs: Sequence[StoreMessage], cq: ConsumeQueue | None, queue_offset: int, appended: Appended
    ) -> None:
        first = msgs[0]
        topic = first.topic
        queue_id = first.queue_id
        offsets = appended.offsets
        sizes = appended.sizes
        stamps = appended.store_timestamps
        taken = appended.next_queue_offset - queue_offset
        arrivals: dict[int, int] = {}
        notices: list[tuple[int, int]] | None = None
        if taken:
            if cq is None:
                cq = self._queues.create(topic, queue_id)
            if taken == len(msgs):
                codes: list[int] | None = _tags_codes(msgs) if _tags_codes is not None else None
                if codes is None:
                    codes = [m.tags_code for m in msgs]
                cq.put_batch(offsets, sizes, codes, queue_offset)
                if self.listeners:
                    count = len(codes)
                    if codes.count(codes[0]) == count:
                        # One tag (or none) for the whole batch, the usual case: one notice.
                        notices = [(queue_offset + count, codes[0])]
                    else:
                        # Each tag code with the queue offset after its last message (later
                        # pairs win).
                        arrivals = dict(
                            zip(codes, range(queue_offset + 1, queue_offset + 1 + count), strict=True)
                        )
            else:
                qoff = queue_offset
                for i, msg in enumerate(msgs):
                    if msg.sys_flag & _TX_MASK not in (_TX_PREPARED, _TX_ROLLBACK):
                        cq.put(offsets[i], sizes[i], msg.tags_code, qoff)
                        qoff += 1
                        arrivals[msg.tags_code] = qoff
            self.logics_timestamp = stamps[-1]
        index = self._index
        if index is not None and index.build_batch(topic, msgs, offsets, stamps):
            self.index_timestamp = stamps[-1]
        if arrivals and self.listeners:
            notices = sorted((nxt, code) for code, nxt in arrivals.items())
        if notices is not None:
            self.notify(topic, queue_id, notices)

    # -- the dispatch limit (controller mode) ------------------------------------------------------

    def held_queue_offset(self, topic: str, queue_id: int, queue_offset: int) -> int:
        """The queue offset of a put to ``topic``/``queue_id`` while records are held (those of
        the queue took theirs already)."""
        if not self.held_known:
            self.scan_held()
        return self.held_next.get((topic, queue_id), queue_offset)

    def dispatch_held(
        self, msgs: Sequence[StoreMessage], cq: ConsumeQueue | None, queue_offset: int, appended: Appended
    ) -> None:
        """A put under a limit: dispatched at once when nothing is held and the limit covers
        it, else held (and the records the limit covers, from the oldest held, dispatched)."""
        assert self.limit is not None
        end = appended.wrote_offset + appended.wrote_bytes
        confirmed = self.confirmed = self.limit()
        if not self.holding and confirmed >= end:
            if len(msgs) == 1:
                self.dispatch_one(msgs[0], cq, queue_offset, appended)
            else:
                self.dispatch_batch(msgs, cq, queue_offset, appended)
            self.reput_offset = end
            return
        if not self.holding:
            self.holding = True
            self.held_next.clear()
            self.held_known = True
        if appended.next_queue_offset > queue_offset:
            self.held_next[(msgs[0].topic, msgs[0].queue_id)] = appended.next_queue_offset
        on_held = self.on_held
        if on_held is not None:
            on_held()
        if confirmed > self.reput_offset:
            try:
                self.dispatch_replicated()
            except ValueError as exc:  # not this put's fault: it is stored, it stays held
                log.error("cannot dispatch held records: %s", exc)

    def scan_held(self) -> int:
        """Read the whole records from :attr:`reput_offset` on (none dispatched): the queue
        offsets they took (:attr:`held_next`); returns where they end (before bytes that are not
        a record where one must start, or a record not wholly written)."""
        commit_log = self._commit_log
        held = self.held_next
        held.clear()
        offset = self.reput_offset
        while True:
            try:
                mapped, count, file_ended = commit_log.complete_records(offset, _CHUNK)
            except ValueError:
                break
            if mapped is None:
                break
            if count:
                records, end, _outcome = commit_log.read_run(mapped, offset - mapped.start, False, count)
                for record in records:
                    tx = record[5] & _TX_MASK
                    if tx != _TX_PREPARED and tx != _TX_ROLLBACK:
                        held[(record[2], record[3])] = record[4] + 1
                offset = mapped.start + end
                if len(records) < count:
                    break
            if file_ended:
                offset = mapped.end
            elif count < _CHUNK:
                break
        self.held_known = True
        return offset

    # -- arrival listeners -------------------------------------------------------------------------

    def add_listener(self, fn: ArrivalListener, topic: str | None) -> None:
        self.listeners.append((topic, fn))
        self.topic_listeners.clear()

    def forget_topic(self, topic: str) -> None:
        """A deleted topic's listeners (found again on its next arrival)."""
        self.topic_listeners.pop(topic, None)

    def notify(self, topic: str, queue_id: int, arrivals: Sequence[tuple[int, int]]) -> None:
        listeners = self.topic_listeners.get(topic)
        if listeners is None:
            listeners = tuple(fn for watched, fn in self.listeners if watched is None or watched == topic)
            self.topic_listeners[topic] = listeners
        for next_offset, code in arrivals:
            for listener in listeners:
                try:
                    listener(topic, queue_id, next_offset, code)
                except Exception:
                    log.exception("arrival listener %r failed", listener)

    # -- recovered and replicated records ------------------------------------------------------------

    def dispatch_recovered(self, records: Sequence[ScannedRecord]) -> None:
        """Rebuild the consume-queue and index entries of verified records (in log order)."""
        if not records:
            return
        keys: list[tuple[str, int, int]] = []
        index = self._index
        queues = self._queues.by_topic
        for offset, size, topic, queue_id, queue_offset, sys_flag, stamp, text in records:
            properties = decode_properties(text)
            tx = sys_flag & _TX_MASK
            if tx != _TX_PREPARED and tx != _TX_ROLLBACK:
                by_id = queues.get(topic)
                cq = by_id.get(queue_id) if by_id is not None else None
                if cq is None:
                    cq = self._queues.create(topic, queue_id)
                cq.put(offset, size, self.recovered_tags_code(topic, stamp, properties), queue_offset)
            if index is not None and tx != _TX_ROLLBACK:
                uniq_key = properties.get(PropertyKey.UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
                if uniq_key:
                    keys.append((f"{topic}#{uniq_key}", offset, stamp))
                message_keys = properties.get(PropertyKey.KEYS)
                if message_keys:
                    for key in message_keys.split(KEY_SEPARATOR):
                        if key:
                            keys.append((f"{topic}#{key}", offset, stamp))
        stamp = records[-1][6]
        self.logics_timestamp = stamp
        if index is not None and keys:
            index.put_items(keys)
            self.index_timestamp = stamp
        self._commit_log.last_store_timestamp = stamp

    def recovered_tags_code(self, topic: str, store_timestamp: int, properties: dict[str, str]) -> int:
        """The tags code the broker gave at put time: the tag's hash, or for a delayed message
        its delivery time (store time + the delay of its level, clamped to the last level)."""
        if topic == TIMER_TOPIC:
            # A parked timer message: its delivery time, as the timer store put it there.
            deliver = properties.get(TIMER_OUT_MS, "")
            if deliver.isdigit():
                return int(deliver)
        if topic == SCHEDULE_TOPIC:
            level_text = properties.get(PropertyKey.DELAY_TIME_LEVEL)
            if level_text and level_text.lstrip("-").isdigit():
                level = min(int(level_text), len(self._delay_levels))
                if level > 0:
                    return store_timestamp + self._delay_levels[level - 1]
        return tags_code(properties.get(PropertyKey.TAGS))

    def dispatch_replicated(self) -> int:
        """Dispatch the complete records between :attr:`reput_offset` and the end of the log (or
        the limit: those that end at or before it); ValueError at bytes that are not a record
        where one must start (``reput_offset`` then stands after the last record dispatched)."""
        commit_log = self._commit_log
        limit = NO_LIMIT
        if self.limit is not None:
            limit = self.confirmed = self.limit()
        dispatched = 0
        while True:
            mapped, count, file_ended = commit_log.complete_records(self.reput_offset, _CHUNK)
            if mapped is None:
                break
            if count:
                pos = self.reput_offset - mapped.start
                records, end, _outcome = commit_log.read_run(mapped, pos, False, count)
                if len(records) < count:
                    raise ValueError(f"invalid record at commit-log offset {mapped.start + end}")
                limited = mapped.start + end > limit
                if limited:
                    records = [record for record in records if record[0] + record[1] <= limit]
                    if not records:
                        break
                    last = records[-1]
                    end = last[0] + last[1] - mapped.start
                self._dispatch_run(records)
                dispatched += len(records)
                self.reput_offset = mapped.start + end
                if limited:
                    break
            if file_ended:
                self.reput_offset = mapped.end
            elif count < _CHUNK:
                break
        if self.limit is not None and self.holding and self.reput_offset >= commit_log.max_offset:
            self.holding = False
            self.held_next.clear()
            self.held_known = True
        return dispatched

    def _dispatch_run(self, records: Sequence[ScannedRecord]) -> None:
        stamp = self._commit_log.last_store_timestamp
        self.dispatch_recovered(records)
        if self.limit is not None and stamp > self._commit_log.last_store_timestamp:
            # A master's held records: the log's newest time stays its last append's.
            self._commit_log.last_store_timestamp = stamp
        if self.listeners:
            # Pulls held on the slave wake once per queue and run (RocketMQ's slave
            # wakes none; a held pull filtering other tags waits for its recheck).
            last: dict[tuple[str, int], ScannedRecord] = {}
            for record in records:
                tx = record[5] & _TX_MASK
                if tx != _TX_PREPARED and tx != _TX_ROLLBACK:
                    last[(record[2], record[3])] = record
            for (topic, queue_id), record in last.items():
                code = self.recovered_tags_code(topic, record[6], decode_properties(record[7]))
                self.notify(topic, queue_id, ((record[4] + 1, code),))
