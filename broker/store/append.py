"""Compiled with mypyc (aiorocketmq/compiled.py, which lists the rules): declared, typed
attributes only; no monkeypatching, setattr or frame tricks; no await in except/finally.

Appending a put: a message or a batch of one topic-queue checked, refused when the store
cannot take it (not running, a slave, the disk full, a dispatch that failed before), else
written to the commit log with the next queue offsets and handed to the dispatch, and
answered with its offsets, offset message ids and store time.

Apart from the store's lifecycle because this is the send path, the hottest code of the
broker: one call per request from :class:`.store.MessageStore`, one call into
:class:`.dispatch.Dispatcher` after the append, and none per message in between (the commit
log encodes the batch, the dispatcher loops over it). Controller mode's dispatch limit
(:attr:`.dispatch.Dispatcher.limit`) costs the others one attribute check per put.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

from aiorocketmq.protocol.message import offset_msg_ids
from aiorocketmq.protocol.speedups import compiled as _compiled

from .commit_log import CommitLog
from .disk import DiskGuard
from .dispatch import Dispatcher
from .mapped_file import DiskFullError
from .messages import PutResult, PutStatus, StoreMessage
from .queues import QueueRegistry
from .store_stats import StoreStats

log = logging.getLogger(__name__)

#: The compiled check that a batch is for one topic-queue (None: it cannot tell, the loop
#: below does), when the codecs are active (aiorocketmq.protocol.speedups).
_same_queue = _compiled.same_queue if _compiled is not None else None


class Appender:
    """The put path of a store."""

    def __init__(
        self,
        commit_log: CommitLog,
        queues: QueueRegistry,
        dispatcher: Dispatcher,
        disk: DiskGuard,
        stats: StoreStats,
        *,
        store_host: bytes,
        slave: bool,
    ) -> None:
        self._commit_log = commit_log
        self._queues = queues
        self._dispatcher = dispatcher
        self._disk = disk
        self._stats = stats
        self._slave = slave
        #: An offset message id is the store host's bytes and the record's offset, in hex.
        self._msg_id_host = store_host.hex().upper()
        #: Set when a put could not write its consume-queue entries; puts are refused after.
        self.dispatch_failed = False

    def put_batch(self, msgs: Sequence[StoreMessage], running: bool) -> PutResult:
        """:meth:`.store.MessageStore.put_messages`: one topic-queue per batch, or MESSAGE_ILLEGAL."""
        if not msgs:
            self._stats.put_message_failures += 1
            return PutResult(PutStatus.MESSAGE_ILLEGAL)
        topic = msgs[0].topic
        queue_id = msgs[0].queue_id
        same = _same_queue(msgs, topic, queue_id) if _same_queue is not None else None
        if same is None:
            same = all(msg.topic == topic and msg.queue_id == queue_id for msg in msgs)
        if not same:
            self._stats.put_message_failures += 1
            return PutResult(PutStatus.MESSAGE_ILLEGAL)
        return self.put(msgs, running)

    def _refuse_disk_full(self) -> PutResult:
        self._stats.put_message_failures += 1
        self._stats.put_refused_disk_full += 1
        return PutResult(PutStatus.SERVICE_NOT_AVAILABLE, remark=self._disk.remark())

    def put(self, msgs: Sequence[StoreMessage], running: bool) -> PutResult:
        """Append ``msgs`` (one topic-queue) and dispatch them, or refuse them."""
        stats = self._stats
        disk = self._disk
        if disk.full and running and not self._slave:
            return self._refuse_disk_full()
        if not running or self._slave or self.dispatch_failed:
            stats.put_message_failures += 1
            if self._slave:
                return PutResult(
                    PutStatus.SERVICE_NOT_AVAILABLE,
                    remark="service not available now: this broker is a slave (brokerRole=SLAVE), "
                    "messages go to its master",
                )
            return PutResult(PutStatus.SERVICE_NOT_AVAILABLE)
        started = time.perf_counter_ns()
        first = msgs[0]
        topic = first.topic
        queue_id = first.queue_id
        queues = self._queues.by_topic.get(topic)
        cq = queues.get(queue_id) if queues is not None else None
        queue_offset = cq.max_offset if cq is not None else 0
        dispatcher = self._dispatcher
        limited = dispatcher.limit is not None
        if limited and dispatcher.holding:
            queue_offset = dispatcher.held_queue_offset(topic, queue_id, queue_offset)
        now_ms = time.time_ns() // 1_000_000
        if cq is None and self._commit_log.topic_prefix(topic) is None:
            # Checked before the queue (a directory named after the topic) exists.
            stats.put_message_failures += 1
            return PutResult(PutStatus.MESSAGE_ILLEGAL)
        try:
            if cq is None:
                cq = self._queues.create(topic, queue_id)
            # The consume-queue entries' blocks, before anything is appended: a full disk then
            # refuses the put instead of failing its dispatch. (The index takes what room it
            # finds: a key without room is counted, never a reason to refuse the message.)
            cq.make_room(len(msgs))
        except DiskFullError as exc:
            disk.on_disk_full(exc)
            return self._refuse_disk_full()
        except OSError as error:
            log.error("cannot create a consume-queue or index file: %s", error)
            stats.put_message_failures += 1
            return PutResult(PutStatus.CREATE_MAPPED_FILE_FAILED)
        appended = self._commit_log.append(msgs, queue_offset, now_ms)
        if isinstance(appended, PutStatus):
            disk_full = self._commit_log.disk_full
            if disk_full is not None:
                disk.on_disk_full(disk_full)
                return self._refuse_disk_full()
            stats.put_message_failures += 1
            return PutResult(appended)
        offsets = appended.offsets
        count = len(msgs)
        if self._commit_log.reservations != disk.reservations_seen:
            disk.reservations_seen = self._commit_log.reservations
            disk.check()
        try:
            if limited:
                dispatcher.dispatch_held(msgs, cq, queue_offset, appended)
            elif count == 1:
                dispatcher.dispatch_one(first, cq, queue_offset, appended)
            else:
                dispatcher.dispatch_batch(msgs, cq, queue_offset, appended)
        except OSError as failure:
            # The records are in the commit log but not in their consume queue (a file that
            # cannot be created: disk full, too many open files). Like RocketMQ's "logics
            # queue error": refuse puts until a restart dispatches them from the log.
            log.error("cannot write consume-queue or index entries, refusing new messages: %s", failure)
            self.dispatch_failed = True
            stats.put_message_failures += 1
            return PutResult(PutStatus.UNKNOWN_ERROR, appended.wrote_offset, appended.wrote_bytes)
        ids = offset_msg_ids(self._msg_id_host, offsets)
        stats.put_message_times_total += count
        stats.put_message_size_total += appended.wrote_bytes
        stats.on_put_latency(time.perf_counter_ns() - started)
        return PutResult(
            PutStatus.PUT_OK,
            appended.wrote_offset,
            appended.wrote_bytes,
            queue_offset if appended.next_queue_offset > queue_offset else 0,
            count,
            ids,
            appended.store_timestamps[0],
        )
