"""Settling popped messages by their receipt handles: acks (one, or several of one batch),
changes of invisible time, and a consumer's forward to the dead-letter queue.

A receipt handle names its check point (topic, group, queue, start offset, pop time) and the
message's offset in it; :meth:`Acks.locate` finds it in the in-flight table or refuses the
handle (another broker's, spent, or past its invisible time). Acks arriving in one loop
iteration share one revive-log record per check point, written before any of them is
answered (:meth:`Acks.flush`); an ack awaited as a coroutine (a 5.x client's, one message per
call) also waits up to :data:`GATHER_S` for the rest of its batch to share the record. A
change of invisible time writes the new check point before settling the old one, so a crash
in between delivers the message again instead of losing it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable

from aiorocketmq.protocol.errors import BrokerError, MessageIllegalError
from aiorocketmq.protocol.pop import ORDER_REVIVE_QID, ReceiptHandle, ReceiptHandleError

from . import clock
from .checkpoint import CheckPoint, CheckPointKey
from .errors import MAX_INVISIBLE_MS, InvalidReceiptHandleError, ReceiptHandleExpiredError
from .inflight import InFlight
from .revive import Reviver

log = logging.getLogger(__name__)

#: Longest an ack (:meth:`Acks.ack`) waits for the other acks of its batch to share its
#: revive-log record: one record per ack is most of the CPU an ack costs the broker.
GATHER_S = 0.002
#: Called once an ack is settled: with None, or with the error that refused it.
AckDone = Callable[["BrokerError | None"], None]


def _call(done: AckDone, error: BrokerError | None) -> None:
    try:
        done(error)
    except Exception:
        log.exception("POP: an ack's completion failed")


def _more_to_come(ck: CheckPoint, waiters: list[tuple[int, AckDone]]) -> bool:
    """Whether messages of ``ck`` are in flight that none of ``waiters`` acks."""
    left = len(ck.offsets) - ck.done.bit_count()
    return left > len(waiters) or left > len({i for i, _ in waiters})


class Acks:
    """Acks, changes of invisible time and forwards to the DLQ of in-flight messages."""

    def __init__(self, state: InFlight, reviver: Reviver) -> None:
        self.state = state
        self.reviver = reviver
        self._pending: dict[CheckPointKey, tuple[CheckPoint, list[tuple[int, AckDone]]]] = {}
        self._flush_scheduled = False
        #: The flush scheduled :data:`GATHER_S` ahead, while acks of a batch are gathered.
        self._gathering: asyncio.TimerHandle | None = None

    async def ack(self, *, group: str, topic: str, receipt_handle: str) -> None:
        """Acknowledge a popped message: it is never delivered again (raises
        :class:`ReceiptHandleExpiredError` when its invisible time has passed)."""
        ck, i = self.in_flight(group, topic, receipt_handle, live=True)
        settled: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def done(error: BrokerError | None) -> None:
            if not settled.done():
                if error is None:
                    settled.set_result(None)
                else:
                    settled.set_exception(error)

        self.queue(ck, i, done, gather=True)
        await settled
        await self.state.durable()

    def ack_soon(self, *, group: str, topic: str, receipt_handle: str, done: AckDone) -> None:
        """:meth:`ack` without a coroutine: the handle is checked now (raising), the ack is
        written with the others of this loop iteration, then ``done`` is called."""
        ck, i = self.in_flight(group, topic, receipt_handle, live=True)
        self.queue(ck, i, done)

    def ack_offsets_soon(
        self, *, group: str, topic: str, batch: ReceiptHandle, offsets: Iterable[int], done: AckDone
    ) -> None:
        """:meth:`ack_soon` for several messages of one popped batch at once: ``done`` is
        called once per offset, with the refusal for those no longer in flight."""
        for offset in offsets:
            try:
                ck, i = self.locate(group, topic, batch, offset, live=True)
            except BrokerError as exc:
                _call(done, exc)
                continue
            self.queue(ck, i, done)

    def queue(self, ck: CheckPoint, i: int, done: AckDone, *, gather: bool = False) -> None:
        """Have ``done`` called once the ack of ``ck``'s message ``i`` is written.

        Acks arriving together (a client acks a batch at once) share one revive-log record
        per check point, written before any of them is answered: those of one turn of the
        loop always. With ``gather`` (the ack of one message per call, as 5.x clients send
        them: such calls reach the loop one per turn, spread over the time the loop takes to
        serve them) the record also waits up to :data:`GATHER_S` for the other acks of the
        batch, and is written as soon as every message of it is acked."""
        waiting = self._pending.get(ck.key)
        if waiting is None:
            waiting = self._pending[ck.key] = (ck, [])
        waiting[1].append((i, done))
        gathering = self._gathering
        if gather and _more_to_come(ck, waiting[1]):
            if not self._flush_scheduled:
                self._flush_scheduled = True
                self._gathering = asyncio.get_running_loop().call_later(GATHER_S, self.flush)
            return
        if gathering is not None:
            # This turn's acks settle a batch (or were not to wait): no more waiting.
            gathering.cancel()
            self._gathering = None
            self._flush_scheduled = False
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self.flush)

    def flush(self) -> None:
        self._flush_scheduled = False
        gathering, self._gathering = self._gathering, None
        if gathering is not None:
            gathering.cancel()  # (a no-op when it is the one running)
        pending, self._pending = self._pending, {}
        for ck, waiters in pending.values():
            settled = sorted({i for i, _ in waiters if ck.is_pending(i)})
            try:
                self.state.resolve(ck, settled)
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
        state = self.state
        handle = self.decode(receipt_handle)
        ck, i = self.in_flight(group, topic, receipt_handle, live=True)
        offset = ck.offsets[i]
        revive_qid = ORDER_REVIVE_QID if ck.orderly else state.take_revive_qid()
        fresh = CheckPoint(
            topic=ck.topic,
            group=group,
            queue_id=ck.queue_id,
            start_offset=offset,
            pop_time=state.unique_pop_time([(ck.topic, group, ck.queue_id, offset)], clock.now_ms()),
            invisible_time=invisible_ms,
            offsets=[offset],
            attempts=[ck.attempts[i]],
            revive_qid=revive_qid,
            revive_queue=state.revive_queue(revive_qid, ck.queue_id),
            broker_name=state.broker_name,
            orderly=ck.orderly,
        )
        # The new check point first: a crash between the two records redelivers the message
        # (once, at the earlier time) instead of losing it.
        state.write_checkpoint(fresh)
        state.resolve(ck, [i])
        await state.durable()
        return ReceiptHandle(
            offset,
            fresh.pop_time,
            invisible_ms,
            revive_qid,
            handle.topic_type,
            state.broker_name,
            ck.queue_id,
            offset,
            handle.commit_log_offset,
        ).encode()

    async def forward_to_dlq(self, *, group: str, topic: str, receipt_handle: str) -> None:
        """Move a popped message to ``%DLQ%<group>`` now and settle its handle (its invisible
        time may have passed, as long as it was not redelivered yet)."""
        state = self.state
        ck, i = self.in_flight(group, topic, receipt_handle, live=False)
        msg = state.load(ck.topic, ck.queue_id, ck.offsets[i])
        if msg is not None:
            self.reviver.dead_letter(ck, msg, ck.attempts[i])
        state.resolve(ck, [i])
        await state.durable()

    # -- handles ------------------------------------------------------------------------------

    @staticmethod
    def decode(receipt_handle: str) -> ReceiptHandle:
        try:
            return ReceiptHandle.decode(receipt_handle)
        except ReceiptHandleError as exc:
            raise InvalidReceiptHandleError(str(exc)) from None

    def in_flight(self, group: str, topic: str, receipt_handle: str, *, live: bool) -> tuple[CheckPoint, int]:
        """The check point and index a handle names, while its message is in flight."""
        handle = self.decode(receipt_handle)
        return self.locate(group, topic, handle, handle.queue_offset, live=live)

    def locate(
        self, group: str, topic: str, handle: ReceiptHandle, offset: int, *, live: bool
    ) -> tuple[CheckPoint, int]:
        """The check point of ``handle`` and the index of ``offset`` in it, while in flight."""
        broker_name = self.state.broker_name
        if handle.broker_name != broker_name:
            raise InvalidReceiptHandleError(
                f"the receipt handle is from broker {handle.broker_name}, not {broker_name}"
            )
        real_topic = handle.real_topic(topic, group)
        ck = self.state.checkpoints.get(
            (real_topic, group, handle.queue_id, handle.ck_queue_offset, handle.pop_time)
        )
        i = ck.index.get(offset) if ck is not None else None
        if ck is None or i is None or not ck.is_pending(i):
            raise ReceiptHandleExpiredError(
                f"the message {real_topic}[{handle.queue_id}]@{offset} is not in flight "
                f"for group {group} under this receipt handle (acked, redelivered or expired)"
            )
        if live and ck.deadline <= clock.now_ms():
            raise ReceiptHandleExpiredError(
                f"the receipt handle of {real_topic}[{handle.queue_id}]@{offset} expired"
            )
        return ck, i
