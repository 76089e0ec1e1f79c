"""The 5.x publishing RPCs: SendMessage (each message checked as Apache's proxy checks it and
turned into 4.x properties, then handed to the front's ``_store``) and EndTransaction (the
front's ``_end``, by transaction id)."""

from __future__ import annotations

import logging
from typing import Any

from aiorocketmq.broker.acl import Perm as AclPerm
from aiorocketmq.protocol.codes import TRANSACTION_PREPARED_TYPE, MessageSysFlag, ResponseCode
from aiorocketmq.protocol.errors import BrokerError
from aiorocketmq.protocol.message import PropertyKey, java_hash, new_unique_id, pack_host
from aiorocketmq.protocol.names import topic_name_problem

from . import messaging_pb2 as pb
from .convert import (
    BORN_HOST,
    BORN_TIMESTAMP,
    OK,
    SHARDING_KEY,
    SYSTEM_PROPERTIES,
    TIMER_DELIVER_MS,
    TRACE_CONTEXT,
    Code,
    consistent_hash,
    delivery_time_ms,
    message_type,
    now_ms,
    status,
    status_of_response_code,
)
from .front import Front, Outgoing, RpcError, peer_of
from .sessions import GrpcChannel

log = logging.getLogger(__name__)

#: The proxy's limits on a sent message (ProxyConfig defaults; the body's is the broker's
#: maxMessageSize).
MAX_USER_PROPERTIES = 128
MAX_USER_PROPERTIES_SIZE = 16 * 1024
MAX_MESSAGE_GROUP_SIZE = 64
MAX_DELAY_MS = 24 * 3600 * 1000
_TRAN_MSG = PropertyKey.TRANSACTION_PREPARED
_UNIQ_KEY = PropertyKey.UNIQ_CLIENT_MESSAGE_ID_KEYIDX


class PublishingRpcs(Front):
    """SendMessage and EndTransaction."""

    # -- SendMessage ----------------------------------------------------------------------

    async def SendMessage(self, request: pb.SendMessageRequest, context: Any) -> pb.SendMessageResponse:
        if not request.messages:
            return pb.SendMessageResponse(status=status(Code.BAD_REQUEST, "no message to send"))
        try:
            self._authorize(context, {m.topic.name: AclPerm.PUB for m in request.messages}, request)
        except RpcError as exc:
            return pb.SendMessageResponse(status=exc.status)
        session = self._session(context)
        peer = session.channel if session is not None else None
        entries = []
        for message in request.messages:
            try:
                entries.append(await self._send_one(message, peer, peer_of(context)))
            except RpcError as exc:
                entries.append(pb.SendResultEntry(status=exc.status))
        if len(entries) == 1:
            top = entries[0].status
        elif all(e.status.code == Code.OK for e in entries):
            top = OK
        else:
            top = status(Code.MULTIPLE_RESULTS, "some messages were not sent")
        return pb.SendMessageResponse(status=top, entries=entries)

    def _properties(self, message: pb.Message, peer_host: str) -> dict[str, str]:
        """The 4.x properties of a 5.x message; raises :class:`RpcError` for one the proxy
        refuses."""
        sp = message.system_properties
        user = message.user_properties
        if len(user) > MAX_USER_PROPERTIES:
            raise RpcError(Code.MESSAGE_PROPERTIES_TOO_LARGE, f"more than {MAX_USER_PROPERTIES} properties")
        size = 0
        for key, value in user.items():
            if not key or key in SYSTEM_PROPERTIES:
                raise RpcError(Code.ILLEGAL_MESSAGE_PROPERTY_KEY, f"property key {key!r} is reserved")
            if any(c in key or c in value for c in "\x01\x02"):
                raise RpcError(
                    Code.ILLEGAL_MESSAGE_PROPERTY_KEY, f"property {key!r} holds a separator character"
                )
            size += len(key) + len(value)
        if size > MAX_USER_PROPERTIES_SIZE:
            raise RpcError(
                Code.MESSAGE_PROPERTIES_TOO_LARGE, f"the properties are over {MAX_USER_PROPERTIES_SIZE} bytes"
            )
        props = dict(user)
        if sp.HasField("tag"):
            tag = sp.tag
            if not tag.strip() or "|" in tag or any(ord(c) < 32 or ord(c) == 127 for c in tag):
                raise RpcError(Code.ILLEGAL_MESSAGE_TAG, f"tag {tag!r} is not allowed")
            props[PropertyKey.TAGS] = tag
        if sp.keys:
            for key in sp.keys:
                if not key.strip() or " " in key or any(ord(c) < 32 for c in key):
                    raise RpcError(Code.ILLEGAL_MESSAGE_KEY, f"key {key!r} is not allowed")
            props[PropertyKey.KEYS] = " ".join(sp.keys)
        props[_UNIQ_KEY] = sp.message_id or new_unique_id()
        if sp.HasField("message_group"):
            group = sp.message_group
            if not group or len(group.encode()) >= MAX_MESSAGE_GROUP_SIZE or any(ord(c) < 32 for c in group):
                raise RpcError(Code.ILLEGAL_MESSAGE_GROUP, f"message group {group!r} is not allowed")
            props[SHARDING_KEY] = group
        if sp.HasField("delivery_timestamp"):
            deliver = delivery_time_ms(sp.delivery_timestamp)
            if deliver - now_ms() > MAX_DELAY_MS:
                raise RpcError(Code.ILLEGAL_DELIVERY_TIME, "the delivery time is more than a day ahead")
            props[TIMER_DELIVER_MS] = str(deliver)
        if sp.message_type == pb.TRANSACTION:
            props[_TRAN_MSG] = "true"
            props[PropertyKey.PRODUCER_GROUP] = message.topic.name
            if sp.HasField("orphaned_transaction_recovery_duration"):
                seconds = sp.orphaned_transaction_recovery_duration.seconds
                if seconds > 0:
                    props[PropertyKey.CHECK_IMMUNITY_TIME_IN_SECONDS] = str(seconds)
        if sp.HasField("delivery_attempt"):
            props[PropertyKey.RECONSUME_TIME] = str(sp.delivery_attempt)
        if sp.HasField("trace_context") and sp.trace_context:
            props[TRACE_CONTEXT] = sp.trace_context
        props[BORN_HOST] = sp.born_host or peer_host
        born = sp.born_timestamp.ToMilliseconds() if sp.HasField("born_timestamp") else now_ms()
        props[BORN_TIMESTAMP] = str(born)
        return props

    async def _send_one(
        self, message: pb.Message, channel: GrpcChannel | None, peer: tuple[str, int]
    ) -> pb.SendResultEntry:
        sp = message.system_properties
        if not message.body:
            raise RpcError(Code.MESSAGE_BODY_EMPTY, "the message body is empty")
        limit = self.max_message_size  # the broker's maxMessageSize, as for remoting
        if len(message.body) > limit:
            raise RpcError(Code.MESSAGE_BODY_TOO_LARGE, f"the body is over {limit} bytes")
        name = message.topic.name
        problem = topic_name_problem(name) if name else "the topic name is empty"
        if problem is not None:
            raise RpcError(Code.ILLEGAL_TOPIC, problem)
        props = self._properties(message, peer[0])
        transactional = props.get(_TRAN_MSG) == "true"
        sys_flag = TRANSACTION_PREPARED_TYPE if transactional else 0
        if sp.body_encoding == pb.GZIP:
            sys_flag |= MessageSysFlag.COMPRESSED
        return await self._store(
            Outgoing(
                topic=name,
                body=bytes(message.body),
                properties=props,
                sys_flag=sys_flag,
                born_timestamp=int(props[BORN_TIMESTAMP]),
                born_host=peer,
                reconsume_times=max(0, sp.delivery_attempt - 1) if sp.HasField("delivery_attempt") else 0,
                transactional=transactional,
            )
        )

    # -- RecallMessage --------------------------------------------------------------------

    async def RecallMessage(self, request: pb.RecallMessageRequest, context: Any) -> pb.RecallMessageResponse:
        """Cancel a timer message before its delivery time (the recall handle its send returned)."""
        try:
            self._authorize(context, {request.topic.name: AclPerm.PUB}, request)
            if not request.recall_handle.strip():
                raise RpcError(Code.BAD_REQUEST, "the recall handle is empty")
            message_id = await self._recall(request.topic.name, request.recall_handle, peer_of(context))
            return pb.RecallMessageResponse(status=OK, message_id=message_id)
        except RpcError as exc:
            return pb.RecallMessageResponse(status=exc.status)

    # -- EndTransaction -------------------------------------------------------------------

    async def EndTransaction(
        self, request: pb.EndTransactionRequest, context: Any
    ) -> pb.EndTransactionResponse:
        try:
            self._authorize(context, {request.topic.name: AclPerm.PUB}, request)
            if not request.transaction_id.strip():
                raise RpcError(Code.INVALID_TRANSACTION_ID, "the transaction id is empty")
            if request.resolution not in (pb.COMMIT, pb.ROLLBACK):
                raise RpcError(Code.BAD_REQUEST, "the resolution is neither COMMIT nor ROLLBACK")
            await self._end(
                request.topic.name, request.transaction_id, commit=request.resolution == pb.COMMIT
            )
            return pb.EndTransactionResponse(status=OK)
        except RpcError as exc:
            return pb.EndTransactionResponse(status=exc.status)


def recall_refusal(exc: BrokerError) -> RpcError:
    """A broker's refusal of a recall as a 5.x status (a handle it cannot apply: BAD_REQUEST)."""
    code = (
        Code.BAD_REQUEST if exc.code == ResponseCode.ILLEGAL_OPERATION else status_of_response_code(exc.code)
    )
    return RpcError(code, exc.remark or str(exc))


def check_message_type(expected: str | None, properties: dict[str, str]) -> None:
    """Refuse a message whose kind (normal, FIFO, delay, transaction) is not the one its
    topic's ``message.type`` attribute names (``expected``; None or MIXED: any)."""
    if expected is None or expected == "MIXED":
        return
    actual = pb.MessageType.Name(message_type(properties))
    if actual != expected:
        raise RpcError(
            Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
            f"TopicMessageType validate failed, the expected type is {expected}, but actual type is {actual}",
        )


def born_host(peer: tuple[str, int]) -> bytes:
    """The peer as records store it (IPv4 and port; an IPv6 peer as 127.0.0.1, as for remoting)."""
    try:
        packed = pack_host(*peer)
    except ValueError:
        packed = b""
    return packed if len(packed) == 8 else pack_host("127.0.0.1", peer[1])


def consistent_queue(group: str, queues: int) -> int:
    """The queue a message group's messages go to (the proxy's choice, so both agree)."""
    return consistent_hash(java_hash(group), queues)
