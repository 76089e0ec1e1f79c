"""The remoting side of POP consumption (Apache 5.x request codes): POP_MESSAGE (200050),
ACK_MESSAGE (200051) and CHANGE_MESSAGE_INVISIBLETIME (200053), answered as Apache's broker
answers them, so its remoting clients and our SDK's :class:`SimpleConsumer` both work.

A pop's response body is the stored records, as a pull's; its header says when the batch was
popped, for how long it is invisible, and the offset-info strings from which the client builds
each message's receipt handle.
"""

from __future__ import annotations

from aiorocketmq.protocol.codes import ResponseCode
from aiorocketmq.protocol.command import RemotingCommand
from aiorocketmq.protocol.errors import BrokerError
from aiorocketmq.protocol.pop import (
    NORMAL_TOPIC_TYPE,
    POLLING_TIMEOUT,
    RETRY_TOPIC_TYPE,
    AckMessageRequestHeader,
    ChangeInvisibleTimeRequestHeader,
    PopMessageRequestHeader,
    PopRequestCode,
    ReceiptHandle,
    ReceiptHandleError,
    decode_batch_ack_body,
    msg_offset_info,
    order_count_info,
    start_offset_info,
)
from aiorocketmq.protocol.transport import Connection, Handler, HandlerResult, error_response

from ..handlers import int_field, text_field
from .clock import now_ms
from .errors import InvalidReceiptHandleError
from .service import PopService

#: The longest a pop may wait for messages on the broker (ms).
MAX_POLL_MS = 60_000
_GROUP = AckMessageRequestHeader.wire("consumer_group")
_TOPIC = AckMessageRequestHeader.wire("topic")
_EXTRA_INFO = AckMessageRequestHeader.wire("extra_info")


class PopHandlers:
    def __init__(self, service: PopService) -> None:
        self.service = service

    def handlers(self) -> dict[int, Handler]:
        return {
            PopRequestCode.POP_MESSAGE: self.pop,
            PopRequestCode.ACK_MESSAGE: self.ack,
            PopRequestCode.CHANGE_MESSAGE_INVISIBLETIME: self.change_invisible_time,
            PopRequestCode.BATCH_ACK_MESSAGE: self.batch_ack,
            PopRequestCode.PEEK_MESSAGE: self.peek,
            PopRequestCode.NOTIFICATION: self.notification,
            PopRequestCode.POLLING_INFO: self.polling_info,
            PopRequestCode.POP_ROLLBACK: self.pop_rollback,
        }

    def peek(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """PEEK_MESSAGE (200052): what a pop would get next, without popping it."""
        fields = cmd.ext_fields or {}
        rest, records = self.service.peek(
            group=text_field(fields, "consumerGroup"),
            topic=text_field(fields, "topic"),
            queue_id=int_field(fields, "queueId"),
            max_messages=int_field(fields, "maxMsgNums"),
        )
        header: dict[str, object] = {"popTime": 0, "invisibleTime": 0, "reviveQid": 0, "restNum": rest}
        if not records:
            return cmd.response(ResponseCode.PULL_NOT_FOUND, "NO_MESSAGE_IN_QUEUE", header)
        return cmd.response(ResponseCode.SUCCESS, "FOUND", header, b"".join(records))

    async def notification(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """NOTIFICATION (200054): whether a pop would find messages, waiting up to the poll
        time for some to arrive."""
        fields = cmd.ext_fields or {}
        born = int_field(fields, "bornTime") if fields.get("bornTime") not in (None, "0") else now_ms()
        poll = min(max(0, born + int_field(fields, "pollTime") - now_ms()), MAX_POLL_MS)
        has, full = await self.service.notification(
            group=text_field(fields, "consumerGroup"),
            topic=text_field(fields, "topic"),
            queue_id=int_field(fields, "queueId"),
            poll_ms=poll,
        )
        return cmd.response(
            ext_fields={"hasMsg": "true" if has else "false", "pollingFull": "true" if full else "false"}
        )

    def polling_info(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """POLLING_INFO (200055): how many pops of the group wait on that queue."""
        fields = cmd.ext_fields or {}
        group, topic = text_field(fields, "consumerGroup"), text_field(fields, "topic")
        queue_id = int_field(fields, "queueId")
        self.service.peek(group=group, topic=topic, queue_id=queue_id, max_messages=1)  # the same checks
        return cmd.response(ext_fields={"pollingNum": self.service.polling(group, topic, queue_id)})

    def pop_rollback(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """POP_ROLLBACK (200056, ``mqadmin exportPopRecord``): Apache moves POP records from its
        optional RocksDB store back to check-points; ours are check-points already."""
        return cmd.response()

    def pop(self, conn: Connection, cmd: RemotingCommand) -> HandlerResult:
        return self._pop(conn, cmd, PopMessageRequestHeader.from_fields(cmd.ext_fields))

    async def _pop(
        self, conn: Connection, cmd: RemotingCommand, h: PopMessageRequestHeader
    ) -> RemotingCommand:
        result = await self.service.pop(
            group=h.consumer_group,
            topic=h.topic,
            queue_id=h.queue_id if h.queue_id >= 0 else None,
            max_messages=h.max_msg_nums,
            invisible_ms=h.invisible_time,
            expression_type=h.exp_type or "TAG",
            expression=h.exp or "*",
            poll_ms=min(max(0, h.poll_time), MAX_POLL_MS),
            fifo=h.order,
            init_mode=h.init_mode,
            with_handles=False,
            # Messages popped for a client that is gone would stay invisible for nothing.
            alive=lambda: not conn.closed,
        )
        fields: dict[str, object] = {
            "popTime": result.pop_time,
            "invisibleTime": result.invisible_time,
            "reviveQid": result.revive_qid,
            "restNum": result.rest,
        }
        if not result.messages:
            return cmd.response(POLLING_TIMEOUT, "no new message", fields)
        checkpoints = result.checkpoints
        fields["startOffsetInfo"] = start_offset_info(
            (ck.topic != h.topic, ck.queue_id, ck.start_offset) for ck in checkpoints
        )
        fields["msgOffsetInfo"] = msg_offset_info(
            (ck.topic != h.topic, ck.queue_id, ck.offsets) for ck in checkpoints
        )
        if h.order:
            fields["orderCountInfo"] = order_count_info(
                (
                    m.message.topic != h.topic,
                    m.message.queue_id,
                    m.message.queue_offset,
                    m.delivery_attempt - 1,
                )
                for m in result.messages
            )
        body = b"".join(m.record for m in result.messages)
        return cmd.response(ResponseCode.SUCCESS, None, fields, body)

    def ack(self, conn: Connection, cmd: RemotingCommand) -> HandlerResult:
        fields = cmd.ext_fields or {}
        group, topic, extra_info = fields.get(_GROUP), fields.get(_TOPIC), fields.get(_EXTRA_INFO)
        if not (isinstance(group, str) and isinstance(topic, str) and isinstance(extra_info, str)):
            h = AckMessageRequestHeader.from_fields(fields)  # a ProtocolError naming the field
            group, topic, extra_info = h.consumer_group, h.topic, h.extra_info
        if self.service.sync_flush:
            return self._ack(cmd, group, topic, extra_info)
        oneway = cmd.is_oneway

        # The hot path of POP: answered from the ack flush, with no task per request.
        def answer(error: BrokerError | None) -> None:
            if not oneway and not conn.closed:
                conn.send_response(cmd.response() if error is None else error_response(cmd, error))

        self.service.ack_soon(group=group, topic=topic, receipt_handle=extra_info, done=answer)
        return None

    async def _ack(self, cmd: RemotingCommand, group: str, topic: str, extra_info: str) -> RemotingCommand:
        await self.service.ack(group=group, topic=topic, receipt_handle=extra_info)
        return cmd.response()

    def batch_ack(self, conn: Connection, cmd: RemotingCommand) -> HandlerResult:
        """BATCH_ACK_MESSAGE (200151): Apache's body of per-batch bit sets. Answered SUCCESS
        once every ack is written, or with the first refusal's code and how many failed."""
        try:
            broker_name, acks = decode_batch_ack_body(cmd.body or b"")
        except ReceiptHandleError as exc:
            raise InvalidReceiptHandleError(str(exc)) from None
        service = self.service
        broker_name = broker_name or service.broker_name
        total = sum(len(ack.offsets) for ack in acks)
        if not total:
            return cmd.response()
        if service.sync_flush:
            jobs = [
                (ack.consumer_group, ack.topic, handle) for ack in acks for handle in ack.handles(broker_name)
            ]
            return self._batch_ack(cmd, jobs)
        oneway = cmd.is_oneway
        failures: list[BrokerError] = []
        remaining = total

        def one_done(error: BrokerError | None) -> None:
            nonlocal remaining
            if error is not None:
                failures.append(error)
            remaining -= 1
            if remaining == 0 and not oneway and not conn.closed:
                conn.send_response(_batch_answer(cmd, failures, total))

        for ack in acks:
            batch = ReceiptHandle(
                ack.start_offset,
                ack.pop_time,
                ack.invisible_time,
                ack.revive_qid,
                RETRY_TOPIC_TYPE if ack.retry else NORMAL_TOPIC_TYPE,
                broker_name,
                ack.queue_id,
                ack.start_offset,
            )
            service.ack_offsets_soon(
                group=ack.consumer_group, topic=ack.topic, batch=batch, offsets=ack.offsets, done=one_done
            )
        return None

    async def _batch_ack(self, cmd: RemotingCommand, jobs: list[tuple[str, str, str]]) -> RemotingCommand:
        failures: list[BrokerError] = []
        for group, topic, handle in jobs:
            try:
                await self.service.ack(group=group, topic=topic, receipt_handle=handle)
            except BrokerError as exc:
                failures.append(exc)
        return _batch_answer(cmd, failures, len(jobs))

    def change_invisible_time(self, conn: Connection, cmd: RemotingCommand) -> HandlerResult:
        h = ChangeInvisibleTimeRequestHeader.from_fields(cmd.ext_fields)
        return self._change(cmd, h)

    async def _change(self, cmd: RemotingCommand, h: ChangeInvisibleTimeRequestHeader) -> RemotingCommand:
        handle = ReceiptHandle.decode(
            await self.service.change_invisible(
                group=h.consumer_group,
                topic=h.topic,
                receipt_handle=h.extra_info,
                invisible_ms=h.invisible_time,
            )
        )
        return cmd.response(
            ResponseCode.SUCCESS,
            None,
            {
                "popTime": handle.pop_time,
                "invisibleTime": handle.invisible_time,
                "reviveQid": handle.revive_qid,
            },
        )


def _batch_answer(cmd: RemotingCommand, failures: list[BrokerError], total: int) -> RemotingCommand:
    if not failures:
        return cmd.response()
    first = failures[0]
    return cmd.response(first.code, f"{len(failures)} of {total} acks refused; the first: {first.remark}")
