"""POP state across a restart: rebuilding the in-flight table from the revive log, and
committing how far that log is settled so the next recovery starts there.

The revive log (:mod:`.checkpoint`'s records in ``rmq_sys_REVIVE_LOG_<cluster>``) is the
durable form of :class:`~.inflight.InFlight`; the progress committed under
``CID_RMQ_SYS_REVIVE_GROUP`` in the consumer-offset table is the lowest revive-log offset a
check point still in flight was written at. Recovery replays every check point from there on,
minus what its acks marked, so nothing acked comes back and nothing un-acked is lost after a
``kill -9``; each group's pop offsets move past everything a replayed check point handed out.
"""

from __future__ import annotations

import asyncio
import logging

from ..offsets import OffsetTable
from .checkpoint import ACK_TAG, BATCH_ACK_TAG, CK_TAG, CheckPoint, decode_ack
from .inflight import REVIVE_QUEUE_NUM, InFlight

log = logging.getLogger(__name__)

#: The group under which the revive log's replayed progress is committed.
REVIVE_GROUP = "CID_RMQ_SYS_REVIVE_GROUP"
#: How often the revive log's progress is committed to the offset table.
PROGRESS_INTERVAL = 1.0


class Recovery:
    """Replays the revive log into the in-flight table, and commits the log's progress."""

    def __init__(self, state: InFlight, offsets: OffsetTable) -> None:
        self.state = state
        self.offsets = offsets

    def recover(self) -> None:
        """Rebuild the in-flight check points from the revive log (after the store and the
        offset table are loaded): every check point from the committed revive progress on,
        minus what its acks marked; each group's pop offsets are moved past everything a
        recovered check point handed out."""
        state = self.state
        store = state.store
        revive_topic = state.revive_topic
        recovered = acked = 0
        for queue in range(REVIVE_QUEUE_NUM):
            offset = max(
                self.offsets.query(REVIVE_GROUP, revive_topic, queue),
                store.get_min_offset(revive_topic, queue),
            )
            high = store.get_max_offset(revive_topic, queue)
            while offset < high:
                entries = store.read_consume_queue(revive_topic, queue, offset, 256)
                if not entries:
                    offset += 1  # a hole (an entry whose record is gone): step over it
                    continue
                for commit_log_offset, size, _code in entries:
                    self.replay(queue, offset, commit_log_offset, size)
                    offset += 1
        for ck in list(state.checkpoints.values()):
            # Every check point moves its group past what it handed out, acked or not: the
            # committed offsets may be older than the crash.
            frontier = max(ck.offsets) + 1
            if frontier > self.offsets.query(ck.group, ck.topic, ck.queue_id):
                self.offsets.commit(ck.group, ck.topic, ck.queue_id, frontier)
            if ck.finished:
                state.forget(ck)
                continue
            recovered += 1
            acked += bin(ck.done).count("1")
            state.schedule(ck)
        if recovered:
            log.info("POP: %d check points in flight after recovery (%d messages acked)", recovered, acked)

    def replay(self, queue: int, offset: int, commit_log_offset: int, size: int) -> None:
        state = self.state
        msg = state.store.look_message(commit_log_offset)
        if msg is None:
            return
        tag = msg.tags
        try:
            if tag == CK_TAG:
                ck = CheckPoint.decode(msg.body, queue, offset)
                state.checkpoints.setdefault(ck.key, ck)
                if ck.orderly:
                    state.orderly.setdefault((ck.group, ck.topic, ck.queue_id), []).append(ck)
                state.retry_of_topic(ck.topic, ck.group)
            elif tag in (ACK_TAG, BATCH_ACK_TAG):
                key, offsets = decode_ack(msg.body)
                found = state.checkpoints.get(key)
                if found is not None:
                    state.mark(found, offsets)
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("POP: revive log record at %d of queue %d is unreadable: %s", offset, queue, exc)

    def commit_progress(self) -> None:
        """Commit how far the revive log is settled: recovery replays it from there."""
        state = self.state
        lowest: dict[int, int] = {}
        for ck in state.checkpoints.values():
            if ck.revive_offset >= 0:
                current = lowest.get(ck.revive_queue)
                if current is None or ck.revive_offset < current:
                    lowest[ck.revive_queue] = ck.revive_offset
        for queue in range(REVIVE_QUEUE_NUM):
            settled = lowest.get(queue, state.store.get_max_offset(state.revive_topic, queue))
            committed = self.offsets.query(REVIVE_GROUP, state.revive_topic, queue)
            # An empty revive queue leaves no entry (a broker nobody pops from keeps its
            # consumerOffset.json as it was).
            if settled != committed and (settled > 0 or committed >= 0):
                self.offsets.commit(REVIVE_GROUP, state.revive_topic, queue, settled)

    async def commit_progress_periodically(self) -> None:
        while True:
            await asyncio.sleep(PROGRESS_INTERVAL)
            self.commit_progress()
