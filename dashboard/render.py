"""How a message is shown: its body as text, JSON or hex, its headers as label/value pairs,
times as local dates, and dead letters exported as JSON or CSV. Pure code."""

from __future__ import annotations

import base64
import csv
import io
import json
from datetime import datetime
from typing import Any

from aiorocketmq.client import MessageExt

BODY_VIEWS = ("text", "json", "hex")


def when(millis: int) -> str:
    """A store or born time for people (local time, milliseconds)."""
    if millis <= 0:
        return ""
    return datetime.fromtimestamp(millis / 1000).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def body_as(body: bytes, view: str) -> tuple[str, str | None]:
    """The body shown as ``view``; the second item says why that view could not be used
    (the text view is then given instead)."""
    if view == "hex":
        return hexdump(body), None
    text = body.decode("utf-8", errors="replace")
    if view == "json":
        try:
            return json.dumps(json.loads(body), indent=2, ensure_ascii=False), None
        except ValueError as exc:
            return text, f"the body is not JSON ({exc})"
    return text, None


def hexdump(data: bytes, width: int = 16) -> str:
    """Offset, hex bytes and printable ASCII, ``width`` bytes a line."""
    lines = []
    for start in range(0, len(data), width):
        chunk = data[start : start + width]
        hex_part = " ".join(f"{b:02x}" for b in chunk)
        text = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append(f"{start:08x}  {hex_part:<{width * 3 - 1}}  {text}")
    return "\n".join(lines)


def headers(msg: MessageExt) -> list[tuple[str, Any]]:
    return [
        ("Topic", msg.topic),
        ("Message ID", msg.msg_id),
        ("Offset message ID", msg.offset_msg_id),
        ("Tags", msg.tags or ""),
        ("Keys", " ".join(msg.keys)),
        ("Broker", msg.broker_name or ""),
        ("Queue ID", msg.queue_id),
        ("Queue offset", msg.queue_offset),
        ("Commit-log offset", msg.commit_log_offset),
        ("Born", f"{when(msg.born_timestamp)} from {msg.born_host}"),
        ("Stored", f"{when(msg.store_timestamp)} at {msg.store_host}"),
        ("Reconsume times", msg.reconsume_times),
        ("Body size", f"{len(msg.body)} bytes"),
        ("Body CRC", msg.body_crc),
        ("System flag", msg.sys_flag),
        ("Flag", msg.flag),
    ]


def message_document(msg: MessageExt) -> dict[str, Any]:
    """A message with RocketMQ's field names (the body as UTF-8 text, or base64 when it is
    not: ``bodyEncoding`` says which)."""
    try:
        body, encoding = msg.body.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        body, encoding = base64.b64encode(msg.body).decode(), "base64"
    return {
        "msgId": msg.msg_id,
        "offsetMsgId": msg.offset_msg_id,
        "topic": msg.topic,
        "brokerName": msg.broker_name,
        "queueId": msg.queue_id,
        "queueOffset": msg.queue_offset,
        "tags": msg.tags,
        "keys": msg.keys,
        "reconsumeTimes": msg.reconsume_times,
        "bornTimestamp": msg.born_timestamp,
        "bornHost": msg.born_host,
        "storeTimestamp": msg.store_timestamp,
        "storeHost": msg.store_host,
        "properties": dict(msg.properties),
        "body": body,
        "bodyEncoding": encoding,
    }


CSV_COLUMNS = (
    "msgId", "offsetMsgId", "topic", "brokerName", "queueId", "queueOffset", "tags", "keys",
    "reconsumeTimes", "bornTimestamp", "storeTimestamp", "properties", "body", "bodyEncoding",
)  # fmt: skip


def messages_csv(messages: list[MessageExt]) -> str:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(CSV_COLUMNS)
    for msg in messages:
        doc = message_document(msg)
        doc["keys"] = " ".join(doc["keys"])
        doc["properties"] = json.dumps(doc["properties"], ensure_ascii=False, sort_keys=True)
        writer.writerow([doc[c] for c in CSV_COLUMNS])
    return out.getvalue()
