"""POP consumption on the wire (RocketMQ 5.x remoting): the request codes, the headers of
POP_MESSAGE / ACK_MESSAGE / CHANGE_MESSAGE_INVISIBLETIME, the two response codes only POP
uses, and the receipt handle ("extra info") that names one popped message.

A receipt handle is Apache's ``ExtraInfoUtil`` layout, space-separated::

    ckQueueOffset popTime invisibleTime reviveQid topicType brokerName queueId msgQueueOffset [commitLogOffset]

``ckQueueOffset`` is the queue offset the check point (the popped batch) starts at,
``reviveQid`` 999 marks an orderly (FIFO) pop, ``topicType`` 1 means the message came from the
group's POP retry topic ``%RETRY%<group>_<topic>``; the 5.x proxy appends the commit-log
offset. A broker answers a pop with the batch's ``startOffsetInfo`` / ``msgOffsetInfo`` /
``orderCountInfo`` strings, from which the client builds each message's handle
(:func:`handles_for`), as Apache's clients do.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable, Sequence
from enum import IntEnum
from typing import Any, NamedTuple

from pydantic import Field

from .headers import Header, Int32, Int64, WireBool
from .message import KEY_SEPARATOR
from .names import RETRY_PREFIX


class PopRequestCode(IntEnum):
    """Apache 5.x request codes of POP consumption."""

    POP_MESSAGE = 200050
    ACK_MESSAGE = 200051
    PEEK_MESSAGE = 200052
    CHANGE_MESSAGE_INVISIBLETIME = 200053
    NOTIFICATION = 200054
    POLLING_INFO = 200055
    POP_ROLLBACK = 200056
    BATCH_ACK_MESSAGE = 200151


#: A long-polling pop found nothing before its poll time ran out (5.x ``POLLING_TIMEOUT``;
#: the 4.x ACL codes reuse the number, so it is not in ``ResponseCode``).
POLLING_TIMEOUT = 210
#: Too many pops are waiting on the broker (5.x ``POLLING_FULL``).
POLLING_FULL = 209

#: The ``reviveQid`` of an orderly (FIFO) pop.
ORDER_REVIVE_QID = 999
#: Pop's ``initMode``: a group without a committed offset starts at the queue's beginning
#: (MIN) or at its end (MAX, what the 5.x proxy asks for).
INIT_MODE_MIN = 0
INIT_MODE_MAX = 1

NORMAL_TOPIC_TYPE = "0"
RETRY_TOPIC_TYPE = "1"
RETRY_TOPIC_V2_TYPE = "2"


def pop_retry_topic(group: str, topic: str) -> str:
    """Where a group's POP redeliveries of ``topic`` wait (Apache's v1 name)."""
    return f"{RETRY_PREFIX}{group}_{topic}"


def pop_retry_topic_v2(group: str, topic: str) -> str:
    """Apache's v2 name for the same (``enableRetryTopicV2``); accepted, never produced here."""
    return f"{RETRY_PREFIX}{group}+{topic}"


# -- headers -----------------------------------------------------------------------------------


class PopMessageRequestHeader(Header):
    consumer_group: str = Field(alias="consumerGroup")
    topic: str
    #: -1: any queue of the topic on this broker.
    queue_id: Int32 = Field(-1, alias="queueId")
    max_msg_nums: Int32 = Field(alias="maxMsgNums")
    invisible_time: Int64 = Field(alias="invisibleTime")
    #: How long the broker may hold the request when nothing is there (ms; 0: answer now).
    poll_time: Int64 = Field(0, alias="pollTime")
    born_time: Int64 = Field(0, alias="bornTime")
    init_mode: Int32 = Field(INIT_MODE_MIN, alias="initMode")
    exp_type: str | None = Field(None, alias="expType")
    exp: str | None = None
    order: WireBool = False
    attempt_id: str | None = Field(None, alias="attemptId")


class PopMessageResponseHeader(Header):
    pop_time: Int64 = Field(alias="popTime")
    invisible_time: Int64 = Field(alias="invisibleTime")
    revive_qid: Int32 = Field(alias="reviveQid")
    rest_num: Int64 = Field(0, alias="restNum")
    start_offset_info: str | None = Field(None, alias="startOffsetInfo")
    msg_offset_info: str | None = Field(None, alias="msgOffsetInfo")
    order_count_info: str | None = Field(None, alias="orderCountInfo")


class AckMessageRequestHeader(Header):
    consumer_group: str = Field(alias="consumerGroup")
    topic: str
    queue_id: Int32 = Field(alias="queueId")
    extra_info: str = Field(alias="extraInfo")
    offset: Int64


class ChangeInvisibleTimeRequestHeader(Header):
    consumer_group: str = Field(alias="consumerGroup")
    topic: str
    queue_id: Int32 = Field(alias="queueId")
    extra_info: str = Field(alias="extraInfo")
    offset: Int64
    invisible_time: Int64 = Field(alias="invisibleTime")


class ChangeInvisibleTimeResponseHeader(Header):
    pop_time: Int64 = Field(alias="popTime")
    invisible_time: Int64 = Field(alias="invisibleTime")
    revive_qid: Int32 = Field(alias="reviveQid")


# -- receipt handles ---------------------------------------------------------------------------


class ReceiptHandleError(ValueError):
    """A receipt handle that does not parse."""


class ReceiptHandle(NamedTuple):
    """One popped message: where its check point is, when it becomes visible again."""

    ck_queue_offset: int
    pop_time: int
    invisible_time: int
    revive_qid: int
    #: ``"0"`` normal topic, ``"1"`` / ``"2"`` the group's POP retry topic (v1 / v2 name).
    topic_type: str
    broker_name: str
    queue_id: int
    queue_offset: int
    #: Appended by 5.x proxies; -1 when the handle has only eight fields.
    commit_log_offset: int = -1

    @property
    def retry(self) -> bool:
        return self.topic_type != NORMAL_TOPIC_TYPE

    @property
    def orderly(self) -> bool:
        return self.revive_qid == ORDER_REVIVE_QID

    @property
    def visible_at(self) -> int:
        """When the message becomes visible again (ms since the epoch)."""
        return self.pop_time + self.invisible_time

    def changed(self, answer: ChangeInvisibleTimeResponseHeader) -> ReceiptHandle:
        """The handle after a CHANGE_MESSAGE_INVISIBLETIME the broker answered with ``answer``
        (the new check point is the message's own; where the message is, unchanged)."""
        return ReceiptHandle(
            self.queue_offset,
            answer.pop_time,
            answer.invisible_time,
            answer.revive_qid,
            self.topic_type,
            self.broker_name,
            self.queue_id,
            self.queue_offset,
            self.commit_log_offset,
        )

    def real_topic(self, topic: str, group: str) -> str:
        """The topic the message is stored in: ``topic`` itself, or the group's retry topic."""
        if topic.startswith(RETRY_PREFIX) or not self.retry:
            return topic
        if self.topic_type == RETRY_TOPIC_V2_TYPE:
            return pop_retry_topic_v2(group, topic)
        return pop_retry_topic(group, topic)

    def encode(self) -> str:
        fields = [
            str(self.ck_queue_offset),
            str(self.pop_time),
            str(self.invisible_time),
            str(self.revive_qid),
            self.topic_type,
            self.broker_name,
            str(self.queue_id),
            str(self.queue_offset),
        ]
        if self.commit_log_offset >= 0:
            fields.append(str(self.commit_log_offset))
        return KEY_SEPARATOR.join(fields)

    @classmethod
    def decode(cls, text: str) -> ReceiptHandle:
        if not isinstance(text, str):
            raise ReceiptHandleError("the receipt handle is not a string")
        parts = text.split(KEY_SEPARATOR)
        if len(parts) not in (8, 9):
            raise ReceiptHandleError(f"a receipt handle has 8 or 9 fields, not {len(parts)}: {text!r}")
        try:
            handle = cls(
                ck_queue_offset=int(parts[0]),
                pop_time=int(parts[1]),
                invisible_time=int(parts[2]),
                revive_qid=int(parts[3]),
                topic_type=parts[4],
                broker_name=parts[5],
                queue_id=int(parts[6]),
                queue_offset=int(parts[7]),
                commit_log_offset=int(parts[8]) if len(parts) == 9 else -1,
            )
        except ValueError:
            raise ReceiptHandleError(f"a receipt handle field is not a number: {text!r}") from None
        if handle.topic_type not in (NORMAL_TOPIC_TYPE, RETRY_TOPIC_TYPE, RETRY_TOPIC_V2_TYPE):
            raise ReceiptHandleError(f"unknown topic type {handle.topic_type!r} in receipt handle {text!r}")
        if min(handle.ck_queue_offset, handle.pop_time, handle.invisible_time, handle.queue_offset) < 0:
            raise ReceiptHandleError(f"a receipt handle field is negative: {text!r}")
        return handle


def topic_type_of(topic: str) -> str:
    """The handle's topic type of a stored topic."""
    if topic.startswith(RETRY_PREFIX):
        return RETRY_TOPIC_V2_TYPE if "+" in topic else RETRY_TOPIC_TYPE
    return NORMAL_TOPIC_TYPE


# -- the offset-info strings of a pop response -------------------------------------------------


def start_offset_info(batches: Iterable[tuple[bool, int, int]]) -> str:
    """``type qid startOffset`` per (retry, queue id, check-point start offset), ``;``-joined."""
    return ";".join(
        f"{RETRY_TOPIC_TYPE if retry else NORMAL_TOPIC_TYPE} {qid} {start}" for retry, qid, start in batches
    )


def msg_offset_info(batches: Iterable[tuple[bool, int, Sequence[int]]]) -> str:
    """``type qid o1,o2,...`` per (retry, queue id, popped queue offsets), ``;``-joined."""
    return ";".join(
        f"{RETRY_TOPIC_TYPE if retry else NORMAL_TOPIC_TYPE} {qid} {','.join(map(str, offsets))}"
        for retry, qid, offsets in batches
    )


def order_count_info(counts: Iterable[tuple[bool, int, int, int]]) -> str:
    """``type qo<qid>%<offset> count`` per (retry, queue id, offset, times consumed before)."""
    return ";".join(
        f"{RETRY_TOPIC_TYPE if retry else NORMAL_TOPIC_TYPE} qo{qid}%{offset} {count}"
        for retry, qid, offset, count in counts
    )


def _parse_info(text: str | None, what: str) -> dict[str, str]:
    parsed: dict[str, str] = {}
    if not text:
        return parsed
    for one in text.split(";"):
        parts = one.split(KEY_SEPARATOR)
        if len(parts) != 3:
            raise ReceiptHandleError(f"bad {what}: {text!r}")
        key = f"{parts[0]}@{parts[1]}"
        if key in parsed:
            raise ReceiptHandleError(f"bad {what}, {key} twice: {text!r}")
        parsed[key] = parts[2]
    return parsed


#: The property in which a broker hands out a record's receipt handle itself (Apache 5.x, for
#: redeliveries).
POP_CK = "POP_CK"


def handles_for(
    header: PopMessageResponseHeader,
    broker_name: str,
    messages: Sequence[tuple[str, int, int]],
    given: Sequence[str | None] = (),
) -> list[tuple[str, int]]:
    """Each popped message's receipt handle and times consumed before (0 unless orderly), from
    a pop response; ``messages`` are the (stored topic, queue id, queue offset) of its records
    in body order, ``given`` their ``POP_CK`` properties, if any.

    A handle the broker put in a record's ``POP_CK`` property is that record's handle: Apache
    5.x's broker does so for a redelivery, whose record it rewrites to the original topic (so
    the topic no longer tells that the start offset to use is the retry queue's)."""
    starts = _parse_info(header.start_offset_info, "startOffsetInfo")
    counts = _parse_info(header.order_count_info, "orderCountInfo")
    out = []
    for i, (topic, queue_id, offset) in enumerate(messages):
        kind = topic_type_of(topic)
        mark = NORMAL_TOPIC_TYPE if kind == NORMAL_TOPIC_TYPE else RETRY_TOPIC_TYPE
        key = f"{mark}@{queue_id}"
        preset = given[i] if i < len(given) else None
        if preset:
            out.append((preset, int(counts.get(f"{mark}@qo{queue_id}%{offset}") or counts.get(key) or "0")))
            continue
        start = starts.get(key)
        if start is None:
            raise ReceiptHandleError(f"the pop response has no start offset for {key}")
        handle = ReceiptHandle(
            int(start),
            header.pop_time,
            header.invisible_time,
            header.revive_qid,
            kind,
            broker_name,
            queue_id,
            offset,
        )
        count = counts.get(f"{mark}@qo{queue_id}%{offset}") or counts.get(key) or "0"
        out.append((handle.encode(), int(count)))
    return out


# -- batch acks ----------------------------------------------------------------------------------


class BatchAck(NamedTuple):
    """The acks of one popped batch (one check point) in a BATCH_ACK_MESSAGE body."""

    consumer_group: str
    topic: str
    retry: bool
    start_offset: int
    queue_id: int
    revive_qid: int
    pop_time: int
    invisible_time: int
    #: Queue offsets acked (Apache sends them as a bit set relative to ``start_offset``).
    offsets: tuple[int, ...]

    def handles(self, broker_name: str) -> list[str]:
        """The receipt handle of each acked message."""
        kind = RETRY_TOPIC_TYPE if self.retry else NORMAL_TOPIC_TYPE
        return [
            ReceiptHandle(
                self.start_offset,
                self.pop_time,
                self.invisible_time,
                self.revive_qid,
                kind,
                broker_name,
                self.queue_id,
                offset,
            ).encode()
            for offset in self.offsets
        ]


def _bit_set(start: int, offsets: Iterable[int]) -> str:
    """Java ``BitSet.toByteArray()`` (little-endian bytes) in base64, as fastjson writes it."""
    bits = 0
    for offset in offsets:
        if offset < start:
            raise ReceiptHandleError(f"offset {offset} is before the batch start {start}")
        bits |= 1 << (offset - start)
    raw = bits.to_bytes((bits.bit_length() + 7) // 8, "little")
    return base64.b64encode(raw).decode()


def _bit_offsets(start: int, text: str) -> tuple[int, ...]:
    bits = int.from_bytes(base64.b64decode(text, validate=True), "little")
    offsets = []
    index = 0
    while bits:
        if bits & 1:
            offsets.append(start + index)
        bits >>= 1
        index += 1
    return tuple(offsets)


def encode_batch_ack_body(broker_name: str, acks: Iterable[BatchAck]) -> bytes:
    """The body of BATCH_ACK_MESSAGE (200151): Apache's ``BatchAckMessageRequestBody``."""
    return json.dumps(
        {
            "brokerName": broker_name,
            "acks": [
                {
                    "c": ack.consumer_group,
                    "t": ack.topic,
                    "r": RETRY_TOPIC_TYPE if ack.retry else NORMAL_TOPIC_TYPE,
                    "so": ack.start_offset,
                    "q": ack.queue_id,
                    "rq": ack.revive_qid,
                    "pt": ack.pop_time,
                    "it": ack.invisible_time,
                    "b": _bit_set(ack.start_offset, ack.offsets),
                }
                for ack in acks
            ],
        },
        separators=(",", ":"),
    ).encode()


def decode_batch_ack_body(body: bytes) -> tuple[str, list[BatchAck]]:
    """The broker name and acks of a BATCH_ACK_MESSAGE body (Apache's long field names are
    accepted too); ReceiptHandleError when it is not one."""
    try:
        raw = json.loads(body)
        acks = []
        for one in raw.get("acks") or []:

            def field(short: str, long: str, entry: dict[str, Any] = one) -> Any:
                return entry[short] if short in entry else entry[long]

            start = int(field("so", "startOffset"))
            acks.append(
                BatchAck(
                    consumer_group=str(field("c", "consumerGroup")),
                    topic=str(field("t", "topic")),
                    retry=str(field("r", "retry")) != NORMAL_TOPIC_TYPE,
                    start_offset=start,
                    queue_id=int(field("q", "queueId")),
                    revive_qid=int(field("rq", "reviveQueueId")),
                    pop_time=int(field("pt", "popTime")),
                    invisible_time=int(field("it", "invisibleTime")),
                    offsets=_bit_offsets(start, str(field("b", "bitSet"))),
                )
            )
        return str(raw.get("brokerName", "")), acks
    except (ValueError, KeyError, TypeError, AttributeError, binascii.Error) as exc:
        raise ReceiptHandleError(f"bad batch ack body: {exc}") from None
