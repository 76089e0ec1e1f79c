"""Message traces in RocketMQ 4.x's text format, as bytes in and records out.

A trace message's body is a run of records, each ended by ``\\x02``; a record's fields are
separated by ``\\x01`` and the first one names its kind:

* ``Pub``: timestamp, region, producer group, topic, msgId, tags, keys, store host, body length,
  cost (ms), message type (0 normal, 1 half, 2 commit, 3 delay), offset msgId, success;
* ``SubBefore``: timestamp, region, consumer group, request id, msgId, retry times, keys;
* ``SubAfter``: request id, msgId, cost (ms per message), success, keys, context code
  (0 success, 1 time-out, 2 exception, 3 returned nothing, 4 failed), timestamp, consumer group;
* ``EndTransaction``: timestamp, region, producer group, topic, msgId, tags, keys, store host,
  message type, transaction id, transaction state (``COMMIT_MESSAGE``, ``ROLLBACK_MESSAGE``,
  ``UNKNOW``), from a check-back.

A missing text field is written ``null``, as Java's ``StringBuilder`` writes it. The trace
message's keys are the msgIds and keys its records describe, so the broker's index finds a
message's traces by its id. Older writers leave fields off the end (a ``Pub`` without offset
msgId, a ``SubAfter`` without timestamp or group); the decoder reads those too.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from enum import IntEnum, StrEnum

from .message import KEY_SEPARATOR

CONTENT_SEPARATOR = "\x01"
FIELD_SEPARATOR = "\x02"
#: What Java writes for a missing text field.
NULL = "null"


class TraceType(StrEnum):
    PUB = "Pub"
    SUB_BEFORE = "SubBefore"
    SUB_AFTER = "SubAfter"
    END_TRANSACTION = "EndTransaction"


class TraceMessageType(IntEnum):
    """How a sent message was meant (Java ``MessageType``; the ordinal is on the wire)."""

    NORMAL = 0
    TRANS_HALF = 1
    TRANS_COMMIT = 2
    DELAY = 3


class ConsumeReturnType(IntEnum):
    """How a listener call ended (the ``SubAfter`` context code)."""

    SUCCESS = 0
    TIME_OUT = 1
    EXCEPTION = 2
    RETURN_NULL = 3
    FAILED = 4


@dataclass(slots=True)
class TraceBean:
    """One message a trace record describes."""

    msg_id: str
    topic: str | None = None
    tags: str | None = None
    keys: str | None = None
    store_host: str | None = None
    body_length: int = 0
    msg_type: TraceMessageType = TraceMessageType.NORMAL
    offset_msg_id: str | None = None
    retry_times: int = 0
    transaction_id: str | None = None
    transaction_state: str | None = None
    from_transaction_check: bool = False
    #: Only in records of old writers (a 15th ``Pub`` field).
    client_host: str | None = None


@dataclass(slots=True)
class TraceContext:
    """One trace event: a send, a listener call starting or ending, a transaction's end."""

    trace_type: TraceType
    timestamp: int = 0
    region_id: str | None = None
    group: str | None = None
    cost_time: int = 0
    success: bool = True
    request_id: str | None = None
    context_code: int = 0
    beans: list[TraceBean] = field(default_factory=list)


def _text(value: str | None) -> str:
    return NULL if value is None else value


def _bool(value: bool) -> str:
    return "true" if value else "false"


# The record encoders take plain values, so that the SDK's hot path builds one string per
# event and no intermediate objects; :func:`encode_context` is built on them.


def encode_pub(
    timestamp: int,
    region: str | None,
    group: str | None,
    topic: str | None,
    msg_id: str,
    tags: str | None,
    keys: str | None,
    store_host: str | None,
    body_length: int,
    cost_time: int,
    msg_type: int,
    offset_msg_id: str | None,
    success: bool,
) -> str:
    # Inline None checks: this runs once per traced send.
    return (
        f"Pub\x01{timestamp}\x01{NULL if region is None else region}\x01{NULL if group is None else group}"
        f"\x01{NULL if topic is None else topic}\x01{msg_id}\x01{NULL if tags is None else tags}"
        f"\x01{NULL if keys is None else keys}\x01{NULL if store_host is None else store_host}"
        f"\x01{body_length}\x01{cost_time}\x01{msg_type}\x01{NULL if offset_msg_id is None else offset_msg_id}"
        f"\x01{'true' if success else 'false'}\x02"
    )


def encode_sub_before(
    timestamp: int,
    region: str | None,
    group: str | None,
    request_id: str | None,
    msg_id: str,
    retry_times: int,
    keys: str | None,
) -> str:
    return (
        f"SubBefore\x01{timestamp}\x01{_text(region)}\x01{_text(group)}\x01{_text(request_id)}"
        f"\x01{msg_id}\x01{retry_times}\x01{_text(keys)}\x02"
    )


def encode_sub_after(
    request_id: str | None,
    msg_id: str,
    cost_time: int,
    success: bool,
    keys: str | None,
    context_code: int,
    timestamp: int,
    group: str | None,
) -> str:
    return (
        f"SubAfter\x01{_text(request_id)}\x01{msg_id}\x01{cost_time}\x01{'true' if success else 'false'}"
        f"\x01{_text(keys)}\x01{context_code}\x01{timestamp}\x01{_text(group)}\x02"
    )


def encode_end_transaction(
    timestamp: int,
    region: str | None,
    group: str | None,
    topic: str | None,
    msg_id: str,
    tags: str | None,
    keys: str | None,
    store_host: str | None,
    msg_type: int,
    transaction_id: str | None,
    transaction_state: str | None,
    from_transaction_check: bool,
) -> str:
    return (
        f"EndTransaction\x01{timestamp}\x01{_text(region)}\x01{_text(group)}\x01{_text(topic)}"
        f"\x01{msg_id}\x01{_text(tags)}\x01{_text(keys)}\x01{_text(store_host)}\x01{msg_type}"
        f"\x01{_text(transaction_id)}\x01{_text(transaction_state)}"
        f"\x01{'true' if from_transaction_check else 'false'}\x02"
    )


def encode_context(ctx: TraceContext) -> str:
    """The records of one trace event (a ``Pub`` or ``EndTransaction`` describes its first
    message only, as Java's encoder does; consumer events one record per message)."""
    kind = ctx.trace_type
    if kind is TraceType.PUB or kind is TraceType.END_TRANSACTION:
        if not ctx.beans:
            return ""
        b = ctx.beans[0]
        if kind is TraceType.PUB:
            return encode_pub(
                ctx.timestamp, ctx.region_id, ctx.group, b.topic, b.msg_id, b.tags, b.keys, b.store_host,
                b.body_length, ctx.cost_time, int(b.msg_type), b.offset_msg_id, ctx.success,
            )  # fmt: skip
        return encode_end_transaction(
            ctx.timestamp, ctx.region_id, ctx.group, b.topic, b.msg_id, b.tags, b.keys, b.store_host,
            int(b.msg_type), b.transaction_id, b.transaction_state, b.from_transaction_check,
        )  # fmt: skip
    if kind is TraceType.SUB_BEFORE:
        return "".join(
            encode_sub_before(
                ctx.timestamp, ctx.region_id, ctx.group, ctx.request_id, b.msg_id, b.retry_times, b.keys
            )
            for b in ctx.beans
        )
    return "".join(
        encode_sub_after(
            ctx.request_id,
            b.msg_id,
            ctx.cost_time,
            ctx.success,
            b.keys,
            ctx.context_code,
            ctx.timestamp,
            ctx.group,
        )
        for b in ctx.beans
    )


def index_keys(msg_id: str, keys: str | None) -> str:
    """What a trace message about one message must be found by, space-separated (the form of
    the ``KEYS`` property): its id and its own keys."""
    return f"{msg_id}{KEY_SEPARATOR}{keys}" if keys else msg_id


def trace_keys(ctx: TraceContext) -> list[str]:
    """The index keys a trace message carrying ``ctx`` needs: each message's id and keys."""
    keys: list[str] = []
    for b in ctx.beans:
        keys.extend(k for k in index_keys(b.msg_id, b.keys).split(KEY_SEPARATOR) if k)
    return keys


@dataclass(slots=True)
class TraceBatch:
    """Trace records ready to be sent as one message: the body text and its keys."""

    data: str
    keys: list[str]


def _keys_of(texts: list[str]) -> list[str]:
    return list(dict.fromkeys(k for k in KEY_SEPARATOR.join(texts).split(KEY_SEPARATOR) if k))


def batch_records(records: Iterable[tuple[str, str]], max_size: int) -> Iterator[TraceBatch]:
    """Join encoded records ``(data, index keys)`` into trace-message bodies, starting a new
    one once a body has reached ``max_size`` characters (as Java cuts its buffer); keys
    deduplicated, in order."""
    parts: list[str] = []
    keys: list[str] = []
    size = 0
    for data, key_text in records:
        if not data:
            continue
        parts.append(data)
        keys.append(key_text)
        size += len(data)
        if size >= max_size:
            yield TraceBatch("".join(parts), _keys_of(keys))
            parts, keys, size = [], [], 0
    if parts:
        yield TraceBatch("".join(parts), _keys_of(keys))


def batch_contexts(contexts: Iterable[TraceContext], max_size: int) -> Iterator[TraceBatch]:
    """:func:`batch_records` of trace events."""
    return batch_records(
        ((encode_context(ctx), KEY_SEPARATOR.join(trace_keys(ctx))) for ctx in contexts), max_size
    )


def _opt(value: str) -> str | None:
    return None if value == NULL else value


def _decode_record(line: list[str]) -> TraceContext | None:
    kind = line[0]
    if kind == TraceType.PUB:
        ctx = TraceContext(TraceType.PUB, int(line[1]), _opt(line[2]), _opt(line[3]))
        bean = TraceBean(line[5], _opt(line[4]), _opt(line[6]), _opt(line[7]), _opt(line[8]), int(line[9]))
        ctx.cost_time = int(line[10])
        bean.msg_type = TraceMessageType(int(line[11]))
        if len(line) == 13:
            ctx.success = line[12] == "true"
        elif len(line) >= 14:
            bean.offset_msg_id = _opt(line[12])
            ctx.success = line[13] == "true"
            if len(line) >= 15:
                bean.client_host = _opt(line[14])
        else:
            ctx.success = False
        ctx.beans.append(bean)
        return ctx
    if kind == TraceType.SUB_BEFORE:
        ctx = TraceContext(TraceType.SUB_BEFORE, int(line[1]), _opt(line[2]), _opt(line[3]))
        ctx.request_id = _opt(line[4])
        ctx.beans.append(TraceBean(line[5], retry_times=int(line[6]), keys=_opt(line[7])))
        return ctx
    if kind == TraceType.SUB_AFTER:
        ctx = TraceContext(TraceType.SUB_AFTER, request_id=_opt(line[1]))
        ctx.beans.append(TraceBean(line[2], keys=_opt(line[5])))
        ctx.cost_time = int(line[3])
        ctx.success = line[4] == "true"
        if len(line) >= 7:
            ctx.context_code = int(line[6])
        if len(line) >= 8:
            ctx.timestamp = int(line[7])
        if len(line) >= 9:
            ctx.group = _opt(line[8])
        return ctx
    if kind == TraceType.END_TRANSACTION:
        ctx = TraceContext(TraceType.END_TRANSACTION, int(line[1]), _opt(line[2]), _opt(line[3]))
        bean = TraceBean(line[5], _opt(line[4]), _opt(line[6]), _opt(line[7]), _opt(line[8]))
        bean.msg_type = TraceMessageType(int(line[9]))
        bean.transaction_id = _opt(line[10])
        bean.transaction_state = _opt(line[11])
        bean.from_transaction_check = line[12] == "true"
        ctx.beans.append(bean)
        return ctx
    return None


def decode_trace_data(text: str) -> list[TraceContext]:
    """The trace events of a trace message's body. Records of an unknown kind and records
    too short or with a bad number are skipped: one bad writer must not hide the others."""
    found = []
    for record in text.split(FIELD_SEPARATOR):
        if not record:
            continue
        try:
            ctx = _decode_record(record.split(CONTENT_SEPARATOR))
        except (IndexError, ValueError):
            continue
        if ctx is not None:
            found.append(ctx)
    return found
