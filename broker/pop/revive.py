"""The revive timer: what happens to a popped message nobody acked in its invisible time.

When a check point comes due, its un-acked messages are put into ``%RETRY%<group>_<topic>``
with ``reconsumeTimes + 1`` (the next pop reads that topic too), or into ``%DLQ%<group>`` once
delivered ``retryMaxTimes + 1`` times; an orderly batch stays where it is (the next pop of its
queue hands it out again) and only what used up its deliveries leaves. The copies written to
those topics (which properties they keep, drop and add) are made here too, for the
consumer's own ``forward_to_dlq`` (:mod:`.acks`) as for an expiry. The deadlines themselves
are kept by :class:`~.inflight.InFlight`, which every new check point is scheduled on.
"""

from __future__ import annotations

import asyncio
import heapq
import logging

from aiorocketmq.protocol.codes import PERM_READ_WRITE
from aiorocketmq.protocol.errors import BrokerError, ServerSystemError
from aiorocketmq.protocol.message import MessageExt, PropertyKey
from aiorocketmq.protocol.names import RETRY_PREFIX, TIMER_REQUESTS, dlq_topic
from aiorocketmq.protocol.pop import pop_retry_topic

from ..groups import GroupTable
from . import clock
from .checkpoint import CheckPoint
from .inflight import InFlight

log = logging.getLogger(__name__)

#: A group's ``retryMaxTimes`` when it has no config.
DEFAULT_RETRY_MAX_TIMES = 16
#: Redelivery that could not be written (disk full, say) is tried again after this.
REVIVE_RETRY_MS = 5000
#: Properties a redelivery must not carry: they would park it again.
_DELAYING = (PropertyKey.DELAY_TIME_LEVEL, *sorted(TIMER_REQUESTS))
FIRST_POP_TIME = "1ST_POP_TIME"
DLQ_ORIGIN_TOPIC = "DLQ_ORIGIN_TOPIC"
DLQ_ORIGIN_MESSAGE_ID = "DLQ_ORIGIN_MESSAGE_ID"


class Reviver:
    """Redelivers or dead-letters what each check point past its invisible time left."""

    def __init__(self, state: InFlight, groups: GroupTable) -> None:
        self.state = state
        self.groups = groups
        self.redelivered = 0
        self.dead_lettered = 0

    def revive_due(self, now: int) -> None:
        """Redeliver or dead-letter what every check point past its invisible time left."""
        state = self.state
        deadlines = state.deadlines
        while deadlines and deadlines[0][0] <= now:
            due, _, key = heapq.heappop(deadlines)
            ck = state.checkpoints.get(key)
            if ck is None or ck.deadline != due:
                continue
            try:
                self.revive(ck)
            except BrokerError as exc:
                log.warning("POP: redelivery of %s failed, trying again later: %s", key, exc)
                state.push_deadline(now + REVIVE_RETRY_MS, key)
                ck.invisible_time = now + REVIVE_RETRY_MS - ck.pop_time

    async def run(self) -> None:
        """The timer: revive what is due, then sleep until the next deadline (or until a
        check point due sooner is scheduled)."""
        state = self.state
        wakeup = state.revive_wakeup
        assert wakeup is not None
        while True:
            wakeup.clear()
            now = clock.now_ms()
            self.revive_due(now)
            delay = (state.deadlines[0][0] - clock.now_ms()) / 1000 if state.deadlines else 3600.0
            if delay > 0:
                try:
                    await asyncio.wait_for(wakeup.wait(), timeout=delay)
                except TimeoutError:
                    pass

    def max_times(self, group: str) -> int:
        config = self.groups.get(group)
        return config.retry_max_times if config is not None else DEFAULT_RETRY_MAX_TIMES

    def revive(self, ck: CheckPoint) -> None:
        state = self.state
        max_times = self.max_times(ck.group)
        pending = ck.pending()
        if ck.orderly:
            # An orderly batch is handed out again by the next pop of its queue; only what
            # has used up its deliveries leaves now.
            dead = [i for i in pending if ck.attempts[i] > max_times]
            for i in dead:
                msg = state.load(ck.topic, ck.queue_id, ck.offsets[i])
                if msg is not None:
                    self.dead_letter(ck, msg, ck.attempts[i])
            state.resolve(ck, dead, wake=False)
            state.wake(state.retry_of.get(ck.topic, ck.topic))
            return
        handled: list[int] = []
        try:
            for i in pending:
                msg = state.load(ck.topic, ck.queue_id, ck.offsets[i])
                if msg is not None:
                    if msg.reconsume_times >= max_times:
                        self.dead_letter(ck, msg, msg.reconsume_times + 1)
                    else:
                        self.redeliver(ck, msg)
                handled.append(i)
        finally:
            state.resolve(ck, handled, wake=False)

    def original_topic(self, ck: CheckPoint, msg: MessageExt) -> str:
        """The topic the consumer popped: the check point's, or the one its retry topic
        redelivers (a property the producer set does not decide it)."""
        if not ck.topic.startswith(RETRY_PREFIX):
            return ck.topic
        return self.state.retry_of.get(ck.topic) or msg.properties.get(PropertyKey.RETRY_TOPIC) or ck.topic

    def redeliver(self, ck: CheckPoint, msg: MessageExt) -> None:
        state = self.state
        props = dict(msg.properties)
        original = self.original_topic(ck, msg)
        props[PropertyKey.RETRY_TOPIC] = original
        retry = pop_retry_topic(ck.group, original)
        state.redelivers(retry, original)
        self.prepare_copy(props, msg, ck)
        state.topics.ensure(retry, 1, PERM_READ_WRITE)
        result = state.writer.put(
            state.writer.build_copy(msg, retry, 0, props, reconsume_times=msg.reconsume_times + 1)
        )
        if not result.ok:
            raise ServerSystemError(f"redelivery to {retry} failed: {result.remark or result.status.name}")
        self.redelivered += 1

    def dead_letter(self, ck: CheckPoint, msg: MessageExt, attempts: int) -> None:
        state = self.state
        props = dict(msg.properties)
        original = self.original_topic(ck, msg)
        self.prepare_copy(props, msg, ck)
        props[DLQ_ORIGIN_TOPIC] = original
        props[DLQ_ORIGIN_MESSAGE_ID] = props[PropertyKey.UNIQ_CLIENT_MESSAGE_ID_KEYIDX]
        props[PropertyKey.RETRY_TOPIC] = original
        dlq = dlq_topic(ck.group)
        state.topics.ensure(dlq, 1, PERM_READ_WRITE)
        result = state.writer.put(state.writer.build_copy(msg, dlq, 0, props, reconsume_times=attempts))
        if not result.ok:
            raise ServerSystemError(f"dead-lettering to {dlq} failed: {result.remark or result.status.name}")
        self.dead_lettered += 1
        log.info("POP: %s of group %s to %s after %d deliveries", msg.msg_id, ck.group, dlq, attempts)

    @staticmethod
    def prepare_copy(props: dict[str, str], msg: MessageExt, ck: CheckPoint) -> None:
        for key in _DELAYING:
            props.pop(key, None)
        # The copy keeps the message's id, so every delivery of it shows the same one.
        props.setdefault(PropertyKey.UNIQ_CLIENT_MESSAGE_ID_KEYIDX, msg.msg_id)
        props.setdefault(PropertyKey.ORIGIN_MESSAGE_ID, msg.msg_id)
        props.setdefault(FIRST_POP_TIME, str(ck.pop_time))
