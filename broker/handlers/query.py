"""Message lookups: QUERY_MESSAGE (12) by key or unique key through the index, and
VIEW_MESSAGE_BY_ID (33) by commit-log offset."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiorocketmq.protocol.codes import RequestCode, ResponseCode
from aiorocketmq.protocol.command import RemotingCommand
from aiorocketmq.protocol.headers import QueryMessageRequestHeader, ViewMessageRequestHeader
from aiorocketmq.protocol.transport import Connection, Handler

if TYPE_CHECKING:
    from ..server import Broker

#: At most this many messages per QUERY_MESSAGE (RocketMQ's ``maxMsgsNumBatch``) ...
MAX_QUERY_NUM = 64
#: ... and about this many bytes of them.
MAX_QUERY_BYTES = 8 * 1024 * 1024


def handlers(broker: Broker) -> dict[int, Handler]:
    def query_message(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = QueryMessageRequestHeader.from_fields(cmd.ext_fields)
        max_num = broker.config.default_query_max_num if h.unique_key_query else min(h.max_num, MAX_QUERY_NUM)
        result = broker.store.query_by_key(h.topic, h.key, max_num, h.begin_timestamp, h.end_timestamp)
        records: list[bytes] = []
        size = 0
        for record in result.records:
            # Stay well inside a client's frame limit (16 MiB): a bigger answer would cost it
            # the connection and every request in flight on it.
            size += len(record)
            if records and size > MAX_QUERY_BYTES:
                break
            records.append(record)
        fields = {
            "indexLastUpdateTimestamp": result.index_last_update_timestamp,
            "indexLastUpdatePhyoffset": result.index_last_update_phyoffset,
        }
        if not records:
            return cmd.response(
                ResponseCode.QUERY_NOT_FOUND, "can not find message, maybe time range not correct", fields
            )
        return cmd.response(ext_fields=fields, body=b"".join(records))

    def view_message(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = ViewMessageRequestHeader.from_fields(cmd.ext_fields)
        record = broker.store.read_record(h.offset)
        if record is None:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"can not find message by the offset, {h.offset}")
        return cmd.response(body=record)

    return {RequestCode.QUERY_MESSAGE: query_message, RequestCode.VIEW_MESSAGE_BY_ID: view_message}
