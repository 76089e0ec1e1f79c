"""What ``mqadmin queryMsgTraceById`` shows: one message's trace records, read from the trace
messages the broker's index finds under its id, laid out as RocketMQ's command prints them
(the send, then each consumer group's listener calls)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from aiorocketmq.protocol.message import MessageExt
from aiorocketmq.protocol.trace import TraceType, decode_trace_data

from ..cli import date_time

_ROW = "{:<10} {:<20} {:<20} {:<20} {:<10} {:<10}"


@dataclass(frozen=True, slots=True)
class TraceView:
    """One record about the message asked for (Java ``TraceView``)."""

    msg_type: str
    group: str | None
    client_host: str
    timestamp: int
    cost_time: int
    status: str
    topic: str | None
    tags: str | None
    keys: str | None
    msg_id: str
    offset_msg_id: str | None
    store_host: str | None

    def to_json(self) -> dict[str, Any]:
        return {
            "msgType": self.msg_type,
            "groupName": self.group,
            "clientHost": self.client_host,
            "timeStamp": self.timestamp,
            "costTime": self.cost_time,
            "status": self.status,
            "topic": self.topic,
            "tags": self.tags,
            "keys": self.keys,
            "msgId": self.msg_id,
            "offSetMsgId": self.offset_msg_id,
            "storeHost": self.store_host,
        }


def trace_views(msg_id: str, trace_messages: Iterable[MessageExt]) -> list[TraceView]:
    """The records about ``msg_id`` in ``trace_messages``; the client host is the host that
    sent the trace message."""
    views = []
    for message in trace_messages:
        host = message.born_host.rsplit(":", 1)[0]
        for ctx in decode_trace_data(message.body.decode("utf-8", "replace")):
            bean = ctx.beans[0]
            if bean.msg_id != msg_id:
                continue
            views.append(
                TraceView(
                    ctx.trace_type.value,
                    ctx.group,
                    host,
                    ctx.timestamp,
                    ctx.cost_time,
                    "success" if ctx.success else "failed",
                    bean.topic,
                    bean.tags,
                    bean.keys,
                    bean.msg_id,
                    bean.offset_msg_id,
                    bean.store_host,
                )
            )
    return views


def _row(kind: str, view: TraceView) -> str:
    return _ROW.format(
        kind, str(view.group), view.client_host, date_time(view.timestamp), f"{view.cost_time}ms", view.status
    )


def trace_lines(views: Iterable[TraceView]) -> list[str]:
    """RocketMQ's layout: a table per send, then a table per consumer group."""
    lines: list[str] = []
    consumers: dict[str | None, list[TraceView]] = {}
    for view in views:
        if view.msg_type == TraceType.PUB:
            lines.append(
                _ROW.format("#Type", "#ProducerGroup", "#ClientHost", "#SendTime", "#CostTimes", "#Status")
            )
            lines += [_row("Pub", view), ""]
        elif view.msg_type == TraceType.SUB_AFTER:
            consumers.setdefault(view.group, []).append(view)
    for group_views in consumers.values():
        lines.append(
            _ROW.format("#Type", "#ConsumerGroup", "#ClientHost", "#ConsumerTime", "#CostTimes", "#Status")
        )
        lines += [_row("Sub", view) for view in group_views]
        lines.append("")
    return lines
