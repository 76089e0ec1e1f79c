"""Parked messages: what delay levels (:mod:`.delay_levels` parks, :mod:`.delay` releases) and
timer messages (:mod:`.timers`) share.

A parked message is stored under a system topic (``SCHEDULE_TOPIC_XXXX``, ``rmq_sys_wheel_timer``)
with ``REAL_TOPIC``/``REAL_QID`` naming where it belongs, and stored again there when it is due.
This module owns both ends of that: which messages may be parked and how their real queue is
recorded (:func:`parkable`, :func:`remember_real_queue`), and what releasing one means
(:meth:`ParkedMessages.release`: the message rebuilt for its real topic and queue with the
kind's properties taken off, a real topic that is missing, not a number or (for delay levels)
the half topic refused, the write through the broker's :class:`~.writer.MessageWriter`, whose
store dispatch wakes the waiting consumers). It also owns the wall clock parked messages are
due by and the background tasks a schedule runs.

What stays with each kind is how it finds what is due and remembers how far it got: delay
levels read one FIFO queue per level and keep ``config/delayOffset.json``; timers keep a timing
wheel over the timer log and ``config/timercheck``. Each decides when a refused release is
tried again (10 s for a level, holding the messages behind it; 100 ms for a timer, on its own).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Protocol

from aiorocketmq.broker.store import MessageStore, PutResult, StoreMessage
from aiorocketmq.protocol.codes import TRANSACTION_COMMIT_TYPE, TRANSACTION_NOT_TYPE, transaction_type
from aiorocketmq.protocol.loop import cancel_and_wait
from aiorocketmq.protocol.message import MessageExt, PropertyKey
from aiorocketmq.protocol.names import TRANS_HALF_TOPIC

_REAL_TOPIC = PropertyKey.REAL_TOPIC
_REAL_QID = PropertyKey.REAL_QUEUE_ID
#: Only plain and committed transactional messages wait: a half message's delay or delivery
#: time applies once its producer commits it.
_PARKABLE = (TRANSACTION_NOT_TYPE, TRANSACTION_COMMIT_TYPE)


def now_ms() -> int:
    """The wall clock in ms since the epoch: delivery times are wall-clock times."""
    return time.time_ns() // 1_000_000


def parkable(topic: str, sys_flag: int) -> bool:
    """Whether a message may wait at all: never a half message, nor anything for the half topic."""
    return topic != TRANS_HALF_TOPIC and transaction_type(sys_flag) in _PARKABLE


def remember_real_queue(properties: dict[str, str], topic: str, queue_id: int) -> None:
    """Record in ``properties`` where a message being parked goes when it is released."""
    properties[_REAL_TOPIC] = topic
    properties[_REAL_QID] = str(queue_id)


class Rewriter(Protocol):
    """What releasing needs of :class:`~.writer.MessageWriter` (which imports the parking side
    of this module, so it is named structurally here)."""

    def build_copy(
        self,
        msg: MessageExt,
        topic: str,
        queue_id: int,
        properties: dict[str, str],
        *,
        reconsume_times: int | None = None,
    ) -> StoreMessage: ...

    def put(self, msg: StoreMessage) -> PutResult: ...


@dataclass(frozen=True, slots=True)
class ParkedKind:
    """What tells one kind of parked message from another when it is released."""

    #: How log lines name one ("delayed message") and releasing one ("delivering").
    noun: str
    verb: str
    log: logging.Logger
    #: Properties the released message no longer carries.
    removed: tuple[str, ...]
    #: A real topic naming the half topic is dropped: the copy would be a half message that no
    #: producer owns (Apache's schedule service drops it; its timer store does not check).
    refuse_half_topic: bool


class ParkedMessages:
    """The part of a parked-message schedule that does not depend on how it finds what is due:
    the store and writer, :meth:`release`, and the background tasks (:meth:`stop` ends them)."""

    def __init__(self, store: MessageStore, writer: Rewriter, kind: ParkedKind) -> None:
        self.store = store
        self.writer = writer
        self._kind = kind
        self._tasks: list[asyncio.Task[None]] = []

    def release(self, phy: int, due: int | None = None) -> bool:
        """Store the parked message at commit-log offset ``phy`` under its real topic and queue;
        False when the store refused it (the caller tries again later). A message gone from the
        commit log, without a usable real topic and queue, or dropped by :meth:`_admit` counts
        as handled."""
        kind = self._kind
        msg = self.store.look_message(phy)
        if msg is None:
            when = "" if due is None else f" (due {due})"
            kind.log.warning("%s at %d%s is gone; skipping it", kind.noun, phy, when)
            return True
        props = dict(msg.properties)
        topic = props.get(_REAL_TOPIC)
        real_qid = props.get(_REAL_QID, "")
        for key in kind.removed:
            props.pop(key, None)
        if not topic or not real_qid.isdigit() or (kind.refuse_half_topic and topic == TRANS_HALF_TOPIC):
            kind.log.error("%s at %d has no usable real topic/queue; dropped", kind.noun, phy)
            return True
        if not self._admit(msg, topic, props):
            return True
        result = self.writer.put(self.writer.build_copy(msg, topic, int(real_qid), props))
        if not result.ok:
            kind.log.warning("%s %s to %s failed: %s", kind.verb, kind.noun, topic, result.status.name)
            return False
        self._released(topic)
        return True

    def _admit(self, msg: MessageExt, topic: str, properties: dict[str, str]) -> bool:
        """The kind's last word before the write: may add to ``properties``; False drops it."""
        return True

    def _released(self, topic: str) -> None:
        """One message was stored under ``topic``: the kind counts it."""

    # -- background tasks ---------------------------------------------------------------------

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        self._tasks.append(asyncio.get_running_loop().create_task(work))

    def _every(self, seconds: float, action: Callable[[], None]) -> None:
        """Run ``action`` every ``seconds``, the first time ``seconds`` from now, until :meth:`stop`."""

        async def repeat() -> None:
            while True:
                await asyncio.sleep(seconds)
                action()

        self._spawn(repeat())

    async def stop(self) -> None:
        await cancel_and_wait(*self._tasks)
        self._tasks.clear()
