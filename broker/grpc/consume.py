"""The 5.x POP consumption RPCs (SimpleConsumer, PushConsumer): QueryAssignment, ReceiveMessage,
AckMessage, ChangeInvisibleDuration and ForwardMessageToDeadLetterQueue, through the front's POP
hooks (the broker's POP service, or a broker's over remoting in the proxy); and the renewal of receipts received with ``auto_renew`` while their client lives."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

from . import messaging_pb2 as pb
from .convert import OK, Code, now_ms, status, timestamp_ms, to_message
from .front import (
    LONG_POLLING_TIMEOUT,
    RECEIVE_BATCH_SIZE,
    RENEW_MAX_MS,
    Front,
    Renewal,
    RpcError,
)
from .routes import assignments

log = logging.getLogger(__name__)

MIN_INVISIBLE_MS = 10_000
MAX_INVISIBLE_MS = 12 * 3600 * 1000
MIN_LONG_POLL = 5.0
#: Renewals in flight at once (renew_due).
RENEW_CONCURRENCY = 32


class ConsumptionRpcs(Front):
    """POP consumption and receipt renewal."""

    def start(self) -> None:
        """Begin renewing ``auto_renew`` receipts (once a second)."""
        self._renewing = asyncio.ensure_future(self._renew_periodically())

    async def stop(self) -> None:
        task, self._renewing = self._renewing, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _renew_periodically(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            try:
                await self.renew_due()
            except Exception:
                log.exception("renewing receipt handles failed")

    async def renew_due(self) -> None:
        """Extend every auto-renewed message whose invisible time ends within the renew-ahead
        time; give up on those received more than RENEW_MAX_MS ago (they come back). Renewals
        run side by side (through a proxy each is a round trip to a broker), at most
        :data:`RENEW_CONCURRENCY` at once."""
        now = now_ms()
        due: list[tuple[str, Renewal]] = []
        for first, renewal in list(self.renewals.items()):
            if renewal.deadline_ms - now > self.renew_ahead_ms:
                continue
            if now - renewal.received_ms >= RENEW_MAX_MS or renewal.client_id not in self.sessions:
                self.renewals.pop(first, None)
                continue
            due.append((first, renewal))
        if not due:
            return
        slots = asyncio.Semaphore(RENEW_CONCURRENCY)

        async def renew(first: str, renewal: Renewal) -> None:
            steps = self.renew_steps_ms
            invisible = steps[min(renewal.renewed, len(steps) - 1)]
            async with slots:
                try:
                    renewal.handle = await self._change_invisible(
                        group=renewal.group,
                        topic=renewal.topic,
                        receipt_handle=renewal.handle,
                        invisible_ms=invisible,
                    )
                except RpcError as exc:
                    log.debug("cannot renew %s: %s", first, exc)
                    self.renewals.pop(first, None)
                    return
            renewal.deadline_ms = now + invisible
            renewal.renewed += 1

        await asyncio.gather(*(renew(first, renewal) for first, renewal in due))

    def _current_handle(self, handle: str) -> str:
        """The latest receipt handle of a message the client knows by ``handle`` (renewals
        end when the client acts on it)."""
        renewal = self.renewals.pop(handle, None)
        return renewal.handle if renewal is not None else handle

    # -- POP consumption (SimpleConsumer, PushConsumer) -----------------------------------

    async def QueryAssignment(
        self, request: pb.QueryAssignmentRequest, context: Any
    ) -> pb.QueryAssignmentResponse:
        try:
            self._authorize(context, self._group_perms(request.topic.name, request.group.name), request)
            self._client_id_required(context)
            brokers, accepted = await self._cluster(request.topic.name, create=False)
            fifo = (await self._group(request.group.name)).fifo
            given = assignments(request.topic.name, brokers, fifo=fifo, accepted=accepted)
            if not given:
                raise RpcError(Code.FORBIDDEN, f"topic {request.topic.name} has no readable queue")
            return pb.QueryAssignmentResponse(status=OK, assignments=given)
        except RpcError as exc:
            return pb.QueryAssignmentResponse(status=exc.status)

    def _receive_params(self, request: pb.ReceiveMessageRequest, context: Any) -> tuple[int, float]:
        """(invisible ms, long-poll seconds) of a receive, as the proxy settles them."""
        if request.auto_renew:
            invisible = self.auto_renew_invisible_ms
        else:
            if not request.HasField("invisible_duration"):
                raise RpcError(
                    Code.ILLEGAL_INVISIBLE_TIME, "invisible_duration is required without auto_renew"
                )
            invisible = request.invisible_duration.ToMilliseconds()
            if not MIN_INVISIBLE_MS <= invisible <= MAX_INVISIBLE_MS:
                raise RpcError(
                    Code.ILLEGAL_INVISIBLE_TIME, f"invisible duration {invisible} ms is outside [10 s, 12 h]"
                )
        poll = (
            request.long_polling_timeout.ToNanoseconds() / 1e9
            if request.HasField("long_polling_timeout")
            else LONG_POLLING_TIMEOUT
        )
        poll = max(MIN_LONG_POLL, min(LONG_POLLING_TIMEOUT, poll))
        remaining = context.time_remaining()
        if remaining is not None:
            # Leave the answer time to travel before the client's deadline.
            if remaining < 1.0:
                raise RpcError(Code.ILLEGAL_POLLING_TIME, f"only {remaining:.1f}s of the deadline is left")
            poll = min(poll, remaining - 0.5 - min(remaining / 10, 2.0))
        return invisible, max(0.0, poll)

    async def ReceiveMessage(
        self, request: pb.ReceiveMessageRequest, context: Any
    ) -> AsyncIterator[pb.ReceiveMessageResponse]:
        group, mq = request.group.name, request.message_queue
        topic = mq.topic.name
        try:
            self._authorize(context, self._group_perms(topic, group), request)
            session = self._client_id_required(context)
            invisible, poll = self._receive_params(request, context)
            fifo = (await self._group(group)).fifo
            popped = await self._receive(
                mq.broker.name,
                group=group,
                topic=topic,
                queue_id=mq.id if fifo and mq.id >= 0 else None,
                max_messages=max(1, min(request.batch_size or RECEIVE_BATCH_SIZE, RECEIVE_BATCH_SIZE)),
                invisible_ms=invisible,
                expression=request.filter_expression.expression or "*",
                poll_ms=int(poll * 1000),
                fifo=fifo,
                expression_type="SQL92" if request.filter_expression.type == pb.SQL else "TAG",
                attempt_id=request.attempt_id,
            )
        except RpcError as exc:
            yield pb.ReceiveMessageResponse(status=exc.status)
            return
        if not popped:
            yield pb.ReceiveMessageResponse(status=status(Code.MESSAGE_NOT_FOUND, "no new message"))
            return
        yield pb.ReceiveMessageResponse(status=OK)
        sent = 0
        try:
            for item in popped:
                yield pb.ReceiveMessageResponse(
                    message=to_message(
                        item.message,
                        topic=item.topic,
                        receipt_handle=item.receipt_handle,
                        invisible_ms=item.invisible_time,
                        delivery_attempt=item.delivery_attempt,
                    )
                )
                sent += 1
                if request.auto_renew:
                    self.renewals[item.receipt_handle] = Renewal(
                        session.client_id,
                        group,
                        item.topic,
                        item.receipt_handle,
                        item.pop_time,
                        item.pop_time + item.invisible_time,
                    )
            yield pb.ReceiveMessageResponse(delivery_timestamp=timestamp_ms(now_ms()))
        finally:
            # Whatever did not reach the client comes back soon rather than after the
            # invisible time (the proxy's 1 s).
            for item in popped[sent:]:
                with contextlib.suppress(RpcError):
                    await self._change_invisible(
                        group=group, topic=item.topic, receipt_handle=item.receipt_handle, invisible_ms=1000
                    )

    async def AckMessage(self, request: pb.AckMessageRequest, context: Any) -> pb.AckMessageResponse:
        group, topic = request.group.name, request.topic.name
        try:
            self._authorize(context, self._group_perms(topic, group), request)
        except RpcError as exc:
            return pb.AckMessageResponse(status=exc.status)
        if not request.entries:
            return pb.AckMessageResponse(status=status(Code.BAD_REQUEST, "no entry to acknowledge"))

        async def settle(entry: pb.AckMessageEntry) -> pb.AckMessageResultEntry:
            try:
                await self._ack(
                    group=group, topic=topic, receipt_handle=self._current_handle(entry.receipt_handle)
                )
                result = OK
            except RpcError as exc:
                result = exc.status
            return pb.AckMessageResultEntry(
                message_id=entry.message_id, receipt_handle=entry.receipt_handle, status=result
            )

        if len(request.entries) == 1:
            entries = [await settle(request.entries[0])]
        else:
            # Side by side: the acks of one batch then share their revive-log record.
            entries = list(await asyncio.gather(*(settle(entry) for entry in request.entries)))
        if len(entries) == 1:
            top = entries[0].status
        elif all(e.status.code == Code.OK for e in entries):
            top = OK
        else:
            top = status(Code.MULTIPLE_RESULTS, "some entries were not acknowledged")
        return pb.AckMessageResponse(status=top, entries=entries)

    async def ChangeInvisibleDuration(
        self, request: pb.ChangeInvisibleDurationRequest, context: Any
    ) -> pb.ChangeInvisibleDurationResponse:
        group, topic = request.group.name, request.topic.name
        try:
            self._authorize(context, self._group_perms(topic, group), request)
            invisible = request.invisible_duration.ToMilliseconds()
            if not 0 <= invisible <= MAX_INVISIBLE_MS:
                raise RpcError(
                    Code.ILLEGAL_INVISIBLE_TIME, f"invisible duration {invisible} ms is outside [0, 12 h]"
                )
            handle = await self._change_invisible(
                group=group,
                topic=topic,
                receipt_handle=self._current_handle(request.receipt_handle),
                invisible_ms=invisible,
            )
            return pb.ChangeInvisibleDurationResponse(status=OK, receipt_handle=handle)
        except RpcError as exc:
            # The client replaces its handle with the answer's before it looks at the
            # status: a refusal hands back the one it had.
            return pb.ChangeInvisibleDurationResponse(
                status=exc.status, receipt_handle=request.receipt_handle
            )

    async def ForwardMessageToDeadLetterQueue(
        self, request: pb.ForwardMessageToDeadLetterQueueRequest, context: Any
    ) -> pb.ForwardMessageToDeadLetterQueueResponse:
        group, topic = request.group.name, request.topic.name
        try:
            self._authorize(context, self._group_perms(topic, group), request)
            await self._forward_to_dlq(
                group=group,
                topic=topic,
                receipt_handle=self._current_handle(request.receipt_handle),
                message_id=request.message_id,
            )
            return pb.ForwardMessageToDeadLetterQueueResponse(status=OK)
        except RpcError as exc:
            return pb.ForwardMessageToDeadLetterQueueResponse(status=exc.status)
