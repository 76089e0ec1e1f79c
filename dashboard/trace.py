"""Message trace records as RocketMQ clients write them to ``RMQ_SYS_TRACE_TOPIC``.

A trace message's body holds one or more records, each ended by ``\\x02``; a record's fields
are separated by ``\\x01`` and its first field names its kind:

* ``Pub``: time, region, producer group, topic, msgId, tags, keys, store host, body length,
  cost (ms), message type, [offset msgId,] success[, client host]
* ``SubBefore``: time, region, consumer group, request id, msgId, retry times, keys
* ``SubAfter``: request id, msgId, cost (ms), success, keys[, context code[, time, group]]
* ``EndTransaction``: time, region, producer group, topic, msgId, tags, keys, store host,
  message type, transaction id, transaction state, from a check

Each trace message is indexed under the traced message's id (and its keys), so a query by key
finds the records of one message. Pure code: text in, records out.
"""

from __future__ import annotations

from dataclasses import dataclass

TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"
FIELD_SEPARATOR = "\x01"
RECORD_SEPARATOR = "\x02"


@dataclass(frozen=True)
class TraceRecord:
    """One step in a message's life: published, about to be consumed, consumed, or a
    transaction's end."""

    kind: str
    msg_id: str
    timestamp: int = 0
    group: str = ""
    topic: str = ""
    tags: str = ""
    keys: str = ""
    store_host: str = ""
    cost_ms: int | None = None
    success: bool | None = None
    request_id: str = ""
    retry_times: int | None = None
    transaction_state: str = ""


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        return 0


def _bool(text: str) -> bool:
    return text.strip().lower() == "true"


def decode_record(text: str) -> TraceRecord | None:
    """One record, or None for an unknown kind or a record too short to be one."""
    f = text.split(FIELD_SEPARATOR)
    kind = f[0].strip()
    if kind == "Pub" and len(f) >= 12:
        success = _bool(f[13]) if len(f) >= 14 else (_bool(f[12]) if len(f) == 13 else None)
        return TraceRecord(
            kind, f[5], _int(f[1]), f[3], f[4], f[6], f[7], f[8], cost_ms=_int(f[10]), success=success
        )
    if kind == "SubBefore" and len(f) >= 8:
        return TraceRecord(kind, f[5], _int(f[1]), f[3], keys=f[7], request_id=f[4], retry_times=_int(f[6]))
    if kind == "SubAfter" and len(f) >= 6:
        timestamp = _int(f[7]) if len(f) >= 9 else 0
        group = f[8] if len(f) >= 9 else ""
        return TraceRecord(
            kind, f[2], timestamp, group, keys=f[5], cost_ms=_int(f[3]), success=_bool(f[4]), request_id=f[1]
        )
    if kind == "EndTransaction" and len(f) >= 13:
        return TraceRecord(kind, f[5], _int(f[1]), f[3], f[4], f[6], f[7], f[8], transaction_state=f[11])
    return None


def decode_trace(body: str) -> list[TraceRecord]:
    """Every record a trace message's body holds (unknown kinds are skipped)."""
    records = []
    for text in body.split(RECORD_SEPARATOR):
        if text.strip():
            record = decode_record(text)
            if record is not None:
                records.append(record)
    return records


def encode_record(record: TraceRecord) -> str:
    """A record in the clients' format (what tests and tools write to the trace topic)."""
    if record.kind == "Pub":
        fields = [
            "Pub", str(record.timestamp), "DefaultRegion", record.group, record.topic, record.msg_id,
            record.tags, record.keys, record.store_host, "0", str(record.cost_ms or 0), "0", "",
            str(bool(record.success)).lower(),
        ]  # fmt: skip
    elif record.kind == "SubBefore":
        fields = [
            "SubBefore", str(record.timestamp), "DefaultRegion", record.group, record.request_id,
            record.msg_id, str(record.retry_times or 0), record.keys,
        ]  # fmt: skip
    elif record.kind == "SubAfter":
        fields = [
            "SubAfter", record.request_id, record.msg_id, str(record.cost_ms or 0),
            str(bool(record.success)).lower(), record.keys, "0", str(record.timestamp), record.group,
        ]  # fmt: skip
    else:
        raise ValueError(f"cannot encode a {record.kind!r} trace record")
    return FIELD_SEPARATOR.join(fields) + RECORD_SEPARATOR
