"""The 5.x pull-style RPCs: PullMessage (a pull at the end of a queue waits in the broker's one
registry of waiting consumers for the next message) and the offset RPCs, on the store and the
offset table as 4.x pulls are."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from typing import Any

from aiorocketmq.broker.acl import Perm as AclPerm
from aiorocketmq.protocol.errors import MQError
from aiorocketmq.protocol.message import decode_records, tags_code

from . import messaging_pb2 as pb
from .convert import OK, Code, status, to_message
from .front import LONG_POLLING_TIMEOUT, RECEIVE_BATCH_SIZE, RpcError
from .local import LocalFront

log = logging.getLogger(__name__)


class PullRpcs(LocalFront):
    """PullMessage, UpdateOffset, GetOffset and QueryOffset."""

    # -- PullMessage and offsets (pull-style clients) -------------------------------------

    async def PullMessage(
        self, request: pb.PullMessageRequest, context: Any
    ) -> AsyncIterator[pb.PullMessageResponse]:
        mq = request.message_queue
        try:
            self._authorize(context, self._group_perms(mq.topic.name, request.group.name), request)
            self._topic(mq.topic.name, create=False)
            codes = _tag_codes(request.filter_expression)
            batch = max(1, min(request.batch_size or RECEIVE_BATCH_SIZE, RECEIVE_BATCH_SIZE))
            poll = (
                request.long_polling_timeout.ToNanoseconds() / 1e9
                if request.HasField("long_polling_timeout")
                else 0.0
            )
            deadline = time.monotonic() + max(0.0, min(poll, LONG_POLLING_TIMEOUT))
            while True:
                result = self.store.get_messages(
                    request.group.name, mq.topic.name, mq.id, request.offset, batch, codes
                )
                messages = (
                    decode_records(b"".join(result.buffers), decompress=False) if result.buffers else []
                )
                remaining = deadline - time.monotonic()
                if messages or remaining <= 0 or result.next_begin_offset != request.offset:
                    break
                await self.arrivals.wait(mq.topic.name, mq.id, remaining)
        except RpcError as exc:
            yield pb.PullMessageResponse(status=exc.status)
            return
        except MQError as exc:
            yield pb.PullMessageResponse(status=status(Code.INTERNAL_SERVER_ERROR, str(exc)))
            return
        yield pb.PullMessageResponse(
            status=OK if messages else status(Code.MESSAGE_NOT_FOUND, "no new message")
        )
        for msg in messages:
            yield pb.PullMessageResponse(message=to_message(msg))
        yield pb.PullMessageResponse(next_offset=result.next_begin_offset)

    async def UpdateOffset(self, request: pb.UpdateOffsetRequest, context: Any) -> pb.UpdateOffsetResponse:
        mq = request.message_queue
        try:
            self._authorize(context, self._group_perms(mq.topic.name, request.group.name), request)
            self._topic(mq.topic.name, create=False)
            if request.offset < 0:
                raise RpcError(Code.ILLEGAL_OFFSET, f"offset {request.offset} is negative")
            self.offsets.commit(request.group.name, mq.topic.name, mq.id, request.offset)
            return pb.UpdateOffsetResponse(status=OK)
        except RpcError as exc:
            return pb.UpdateOffsetResponse(status=exc.status)

    async def GetOffset(self, request: pb.GetOffsetRequest, context: Any) -> pb.GetOffsetResponse:
        mq = request.message_queue
        try:
            self._authorize(context, self._group_perms(mq.topic.name, request.group.name), request)
            self._topic(mq.topic.name, create=False)
            offset = self.offsets.query(request.group.name, mq.topic.name, mq.id)
            if offset < 0:
                raise RpcError(
                    Code.OFFSET_NOT_FOUND, f"group {request.group.name} has no offset on this queue"
                )
            return pb.GetOffsetResponse(status=OK, offset=offset)
        except RpcError as exc:
            return pb.GetOffsetResponse(status=exc.status)

    async def QueryOffset(self, request: pb.QueryOffsetRequest, context: Any) -> pb.QueryOffsetResponse:
        mq = request.message_queue
        try:
            self._authorize(context, {mq.topic.name: AclPerm.SUB}, request)
            self._topic(mq.topic.name, create=False)
            policy = request.query_offset_policy
            if policy == pb.BEGINNING:
                offset = self.store.get_min_offset(mq.topic.name, mq.id)
            elif policy == pb.END:
                offset = self.store.get_max_offset(mq.topic.name, mq.id)
            else:
                offset = self.store.get_offset_by_time(
                    mq.topic.name, mq.id, request.timestamp.ToMilliseconds()
                )
            return pb.QueryOffsetResponse(status=OK, offset=offset)
        except RpcError as exc:
            return pb.QueryOffsetResponse(status=exc.status)


def _tag_codes(expression: pb.FilterExpression) -> frozenset[int] | None:
    """The tags codes a TAG filter keeps (None: all); SQL92 is not served on pulls."""
    if expression.type == pb.SQL:
        raise RpcError(Code.ILLEGAL_FILTER_EXPRESSION, "SQL92 filters are not served on PullMessage")
    text = expression.expression.strip()
    if not text or text == "*":
        return None
    return frozenset(tags_code(t.strip()) for t in text.split("||") if t.strip())
